/*
 * The libuv transport of the HTTP server: listening, accepting, reading into one
 * loop-wide buffer, writing, timeouts and closing. What the bytes mean is decided by the
 * socket-free state machine in http_conn.c.
 *
 * Timeouts cost one uv timer per server. Every connection with a running timeout sits
 * in one of a few lists, one per kind of timeout; since a kind has one fixed duration
 * and uv_now() only grows, appending on arm keeps each list sorted by deadline. The
 * timer is set to the earliest list head; when it fires only expired heads are visited,
 * so thousands of idle connections cost nothing per tick.
 */
#include "node/http/http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "node/http/http_conn.h"

/* One read buffer per server: reads are parsed (and the rest copied) before returning. */
#define READ_BUF_SIZE (64 * 1024)
/* After the last response of a closing connection, how long we drain the client. */
#define LINGER_MS      2000
#define LISTEN_BACKLOG 1024

typedef enum { TL_HEADER, TL_BODY, TL_IDLE, TL_WRITE, TL_LINGER, TL_COUNT, TL_NONE = -1 } tl_kind;

typedef struct uconn uconn;

struct uconn {
    http_conn core;
    uv_tcp_t tcp;
    http_server *srv;
    uconn *prev; /* all open connections of the server */
    uconn *next;
    uconn *tprev; /* the timeout list it is in (tlist) */
    uconn *tnext;
    int tlist;
    uint32_t tgen; /* core.started when the header deadline was set */
    uint64_t deadline;
    size_t write_queue_mark; /* unsent_bytes() when the write deadline was set */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    uconn *dnext; /* in the server's list of writes done at once (done_queued) */
    bool reading;
    bool write_pending;
    bool done_queued;
    bool lingering; /* last response sent and FIN sent: draining until EOF */
    bool closing;   /* uv_close called */
};

typedef struct {
    uconn *head;
    uconn *tail;
    uint64_t timeout_ms; /* 0: this kind of timeout is off */
} tlist;

struct http_server {
    uv_loop_t *loop;
    http_server_options opts;
    char host[64];
    http_conn_shared shared;
    uv_tcp_t listener;
    uv_timer_t timer;
    /* Writes the kernel took whole at once. Their completions are delivered in the
     * check phase, right after the poll phase in which most responses are written;
     * done_idle runs while any wait, so that the poll cannot block on them. libuv's own
     * path would cost an epoll_ctl per write and a turn of the loop. */
    uv_check_t done_check;
    uv_idle_t done_idle;
    uconn *done_head;
    bool timer_armed;
    uint64_t timer_due;
    tlist tl[TL_COUNT];
    uconn *conns;
    http_server_stats stats;
    int port;
    bool stopping;
    bool listener_closed;
    bool timer_closing;
    int handles_closing; /* timers, done_idle and done_check, at the very end */
    uv_timer_t grace;    /* bounds a stop's wait for busy connections */
    void (*stop_done)(void *data);
    void *stop_data;
    char *readbuf;
    time_t date_at;
    char date[32];
};

static uconn *uconn_of(http_conn *core)
{
    return (uconn *)((char *)core - offsetof(uconn, core));
}

/* ---------------------------------------------------------------- options */

void http_server_options_default(http_server_options *o)
{
    memset(o, 0, sizeof *o);
    o->host = "0.0.0.0";
    o->port = 8000;
    o->max_body = 17u * 1024 * 1024; /* DynamoDB's 16 MB request bound plus JSON slack */
    o->max_header_bytes = 64 * 1024;
    o->max_headers = 100;
    o->max_connections = 10000;
    o->max_pipeline = 1;
    o->request_arena_limit = 256u * 1024 * 1024;
    o->max_body_total = 1024u * 1024 * 1024;
    o->header_timeout_ms = 10000;
    o->body_timeout_ms = 30000;
    o->idle_timeout_ms = 60000;
    o->write_timeout_ms = 30000;
    o->stop_grace_ms = 10000;
}

/* ---------------------------------------------------------------- Date header */

static const char *server_date(http_conn_shared *sh)
{
    http_server *s = (http_server *)((char *)sh - offsetof(http_server, shared));
    time_t now = time(NULL);
    if (now != s->date_at) {
        static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
        static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
        struct tm tm;
        gmtime_r(&now, &tm);
        snprintf(s->date, sizeof s->date, "%s, %02d %s %04d %02d:%02d:%02d GMT",
                 days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
                 tm.tm_hour, tm.tm_min, tm.tm_sec);
        s->date_at = now;
    }
    return s->date;
}

/* ---------------------------------------------------------------- timeouts */

static void on_sweep(uv_timer_t *t);

static void timer_schedule(http_server *s, uint64_t due)
{
    if (s->timer_closing || (s->timer_armed && s->timer_due <= due))
        return;
    uint64_t now = uv_now(s->loop);
    s->timer_armed = true;
    s->timer_due = due;
    uv_timer_start(&s->timer, on_sweep, due > now ? due - now : 0, 0);
}

static void tl_remove(uconn *c)
{
    if (c->tlist == TL_NONE)
        return;
    tlist *l = &c->srv->tl[c->tlist];
    if (c->tprev != NULL)
        c->tprev->tnext = c->tnext;
    else
        l->head = c->tnext;
    if (c->tnext != NULL)
        c->tnext->tprev = c->tprev;
    else
        l->tail = c->tprev;
    c->tprev = c->tnext = NULL;
    c->tlist = TL_NONE;
}

static void tl_arm(uconn *c, tl_kind kind)
{
    tl_remove(c);
    tlist *l = &c->srv->tl[kind];
    if (l->timeout_ms == 0)
        return;
    c->deadline = uv_now(c->srv->loop) + l->timeout_ms;
    c->tlist = kind;
    c->tprev = l->tail;
    c->tnext = NULL;
    if (l->tail != NULL)
        l->tail->tnext = c;
    else
        l->head = c;
    l->tail = c;
    timer_schedule(c->srv, c->deadline);
}

static void conn_close(uconn *c);

/*
 * Bytes of responses not yet taken by the client: libuv's queue plus the kernel's send
 * queue. The kernel part matters: with megabytes of socket buffer, libuv's queue alone
 * can stand still for a while although the client reads steadily.
 */
static size_t unsent_bytes(uconn *c)
{
    size_t n = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    uv_os_fd_t fd;
    int outq = 0;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, TIOCOUTQ, &outq) == 0 && outq > 0)
        n += (size_t)outq;
    return n;
}

static void expire(uconn *c, tl_kind kind)
{
    http_server *s = c->srv;
    switch (kind) {
    case TL_WRITE: {
        size_t queued = unsent_bytes(c);
        bool handed_over = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0;
        /* Moving, or all bytes with the kernel (the write callback is due): wait on. */
        if (c->write_pending && (handed_over || queued < c->write_queue_mark)) {
            c->write_queue_mark = queued;
            tl_arm(c, TL_WRITE);
            return;
        }
        s->stats.timeouts_total++;
        conn_close(c);
        return;
    }
    case TL_LINGER:
        conn_close(c);
        return;
    default:
        s->stats.timeouts_total++;
        http_conn_timeout(&c->core);
        return;
    }
}

static void on_sweep(uv_timer_t *t)
{
    http_server *s = t->data;
    s->timer_armed = false;
    uint64_t now = uv_now(s->loop);
    for (int k = 0; k < TL_COUNT; k++) {
        uconn *c;
        while ((c = s->tl[k].head) != NULL && c->deadline <= now) {
            tl_remove(c);
            expire(c, (tl_kind)k);
        }
    }
    for (int k = 0; k < TL_COUNT; k++)
        if (s->tl[k].head != NULL)
            timer_schedule(s, s->tl[k].head->deadline);
}

/* ---------------------------------------------------------------- closing */

static void maybe_finish_stop(http_server *s);

static void done_unlink(uconn *c)
{
    uconn **p = &c->srv->done_head;
    while (*p != c)
        p = &(*p)->dnext;
    *p = c->dnext;
    c->dnext = NULL;
    c->done_queued = false;
    if (c->srv->done_head == NULL)
        uv_idle_stop(&c->srv->done_idle);
}

static void on_conn_closed(uv_handle_t *h)
{
    uconn *c = h->data;
    http_server *s = c->srv;
    if (c->done_queued)
        done_unlink(c);
    http_conn_close(&c->core);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->stats.connections_open--;
    free(c);
    maybe_finish_stop(s);
}

static void conn_close(uconn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    tl_remove(c);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    uconn *c = req->data;
    if (status < 0)
        conn_close(c);
    /* Otherwise keep draining until EOF or the linger deadline. */
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *b);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);

/*
 * The connection has nothing more to do. If the client may still be sending (we refused
 * a request, or it asked to close), closing at once could reset the connection and
 * destroy our last response in its receive buffer; so send FIN and drain for a while.
 */
static void conn_finish(uconn *c)
{
    if (!http_conn_should_linger(&c->core)) {
        conn_close(c);
        return;
    }
    c->lingering = true;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    if (!c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->reading = true;
    }
    tl_arm(c, TL_LINGER);
}

/* ---------------------------------------------------------------- the core's io */

static void conn_update(http_conn *core)
{
    uconn *c = uconn_of(core);
    if (c->closing || c->lingering)
        return;
    http_phase phase = http_conn_phase(core);
    if (phase == HTTP_PHASE_DONE) {
        conn_finish(c);
        return;
    }
    bool want = http_conn_wants_read(core);
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (c->write_pending)
        return; /* the write deadline (armed in conn_write) governs */
    switch (phase) {
    case HTTP_PHASE_HEADER:
        /* The header deadline runs from a request's start, not from each read. */
        if (c->tlist != TL_HEADER || c->tgen != core->started) {
            c->tgen = core->started;
            tl_arm(c, TL_HEADER);
        }
        break;
    case HTTP_PHASE_BODY:
        if (c->tlist != TL_BODY)
            tl_arm(c, TL_BODY);
        break;
    case HTTP_PHASE_IDLE:
        if (c->tlist != TL_IDLE)
            tl_arm(c, TL_IDLE);
        break;
    default:
        tl_remove(c); /* the handler has it: no client deadline */
        break;
    }
}

static void on_write(uv_write_t *req, int status)
{
    uconn *c = req->data;
    c->write_pending = false;
    if (c->closing)
        return; /* cancelled by uv_close; the core is released in on_conn_closed */
    tl_remove(c);
    http_conn_write_done(&c->core, status);
}

/* Delivers the completions of the writes the kernel took whole. A completion may start
 * the next response's write, which may join the list again: that one waits for the
 * next phase, so a pipelined burst cannot hold the loop here. */
static void deliver_done(http_server *s)
{
    uconn *list = s->done_head;
    s->done_head = NULL;
    while (list != NULL) {
        uconn *c = list;
        list = c->dnext;
        c->dnext = NULL;
        c->done_queued = false;
        c->write_pending = false;
        if (c->closing)
            continue;
        tl_remove(c);
        http_conn_write_done(&c->core, 0);
    }
    if (s->done_head == NULL)
        uv_idle_stop(&s->done_idle);
}

static void on_done_check(uv_check_t *h)
{
    deliver_done(h->data);
}

static void on_done_idle(uv_idle_t *h)
{
    deliver_done(h->data);
}

/* Hands the kernel as much as it takes now; true if that was everything. Skips what it
 * took in bufs. */
static bool try_write_whole(uconn *c, uv_buf_t *bufs, unsigned *n)
{
    int k = uv_try_write((uv_stream_t *)&c->tcp, bufs, *n);
    if (k < 0)
        return false; /* EAGAIN, or an error uv_write will report */
    size_t took = (size_t)k;
    unsigned i = 0;
    while (i < *n && took >= bufs[i].len)
        took -= bufs[i++].len;
    if (i == *n)
        return true;
    bufs[i].base += took;
    bufs[i].len -= took;
    memmove(bufs, bufs + i, (*n - i) * sizeof *bufs);
    *n -= i;
    return false;
}

static void conn_write(http_conn *core, const http_iov *iov, size_t n)
{
    uconn *c = uconn_of(core);
    if (c->closing)
        return; /* the bytes are released with the core */
    assert(n >= 1 && n <= 2 && !c->write_pending);
    uv_buf_t bufs[2] = {{0}};
    for (size_t i = 0; i < n; i++)
        bufs[i] = uv_buf_init((char *)iov[i].base, (unsigned)iov[i].len);
    unsigned nbufs = (unsigned)n;
    if (try_write_whole(c, bufs, &nbufs)) {
        /* Nearly always: the response fits the socket buffer. */
        c->write_pending = true;
        c->done_queued = true;
        c->dnext = c->srv->done_head;
        c->srv->done_head = c;
        uv_idle_start(&c->srv->done_idle, on_done_idle);
        return;
    }
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, bufs, nbufs, on_write);
    if (rc != 0) {
        http_conn_write_done(core, rc); /* the core tolerates this re-entry */
        return;
    }
    c->write_pending = true;
    /* Usually bytes stayed queued in libuv here. When not, expire() waits on without
     * looking at the mark (nothing can join libuv's queue while this write is pending),
     * so the TIOCOUTQ ioctl that unsent_bytes() makes is needed only in the first case. */
    c->write_queue_mark =
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0 ? 0 : unsent_bytes(c);
    tl_arm(c, TL_WRITE);
}

static const http_conn_io uv_conn_io = {
    .write = conn_write,
    .update = conn_update,
};

/* ---------------------------------------------------------------- reading */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    uconn *c = h->data;
    b->base = c->srv->readbuf;
    b->len = READ_BUF_SIZE;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *b)
{
    uconn *c = stream->data;
    if (nread == 0 || c->closing)
        return;
    if (c->lingering) {
        if (nread < 0)
            conn_close(c); /* drained: the client saw everything */
        return;
    }
    if (nread == UV_EOF) {
        c->reading = false; /* libuv stops reading at EOF */
        http_conn_eof(&c->core);
        return;
    }
    if (nread < 0) {
        conn_close(c);
        return;
    }
    http_conn_feed(&c->core, b->base, (size_t)nread);
}

/* ---------------------------------------------------------------- accepting */

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void free_unlinked_conn(uv_handle_t *h)
{
    free(h->data);
}

static void format_peer(uconn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[INET6_ADDRSTRLEN];
    c->core.peer[0] = '\0';
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        uv_ip4_name(sin, ip, sizeof ip);
        snprintf(c->core.peer, sizeof c->core.peer, "%s:%d", ip, ntohs(sin->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        uv_ip6_name(sin6, ip, sizeof ip);
        snprintf(c->core.peer, sizeof c->core.peer, "[%s]:%d", ip, ntohs(sin6->sin6_port));
    }
}

static void refuse(http_server *s, uv_stream_t *listener)
{
    uv_tcp_t *t = malloc(sizeof *t);
    if (t == NULL)
        return;
    uv_tcp_init(s->loop, t);
    if (uv_accept(listener, (uv_stream_t *)t) == 0)
        s->stats.connections_refused++;
    uv_close((uv_handle_t *)t, free_handle);
}

static void on_connection(uv_stream_t *listener, int status)
{
    http_server *s = listener->data;
    if (status < 0 || s->stopping)
        return;
    if (s->stats.connections_open >= s->opts.max_connections) {
        refuse(s, listener);
        return;
    }
    uconn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        refuse(s, listener);
        return;
    }
    c->srv = s;
    c->tlist = TL_NONE;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, free_unlinked_conn);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    http_conn_init(&c->core, &s->shared);
    format_peer(c);
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->stats.connections_open++;
    s->stats.connections_total++;
    conn_update(&c->core);
}

/* ---------------------------------------------------------------- start and stop */

static int validate(const http_server_options *o, strata_err *err)
{
    if (o->handler == NULL)
        return strata_err_set(err, ERR_VALIDATION, "http server: no handler");
    if (o->port < 0 || o->port > 65535)
        return strata_err_set(err, ERR_VALIDATION, "http server: port %d out of range", o->port);
    if (o->max_body == 0 || o->max_body > SIZE_MAX / 4)
        return strata_err_set(err, ERR_VALIDATION, "http server: bad max_body");
    if (o->max_header_bytes < 256 || o->max_header_bytes > 16u * 1024 * 1024)
        return strata_err_set(err, ERR_VALIDATION, "http server: bad max_header_bytes");
    if (o->max_headers == 0 || o->max_headers > 100000)
        return strata_err_set(err, ERR_VALIDATION, "http server: bad max_headers");
    if (o->max_connections == 0 || o->max_pipeline == 0 || o->max_pipeline > 1024)
        return strata_err_set(err, ERR_VALIDATION,
                              "http server: max_connections and max_pipeline must be > 0");
    return 0;
}

/* Binds and listens with plain sockets so that every failure is reported right here. */
static int open_listener(const char *host, int port, int *fd_out, strata_err *err)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sslen;
    if (strchr(host, ':') != NULL) {
        if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
            return strata_err_set(err, ERR_VALIDATION, "http server: bad address %s", host);
        sslen = sizeof(struct sockaddr_in6);
    } else {
        if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0)
            return strata_err_set(err, ERR_VALIDATION, "http server: bad address %s", host);
        sslen = sizeof(struct sockaddr_in);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return strata_err_set(err, ERR_IO, "http server: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sslen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        int e = errno;
        close(fd);
        return strata_err_set(err, ERR_IO, "http server: listen on %s:%d: %s", host, port,
                              strerror(e));
    }
    *fd_out = fd;
    return 0;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void free_server(uv_handle_t *h)
{
    http_server *s = h->data;
    http_conn_shared_release(&s->shared);
    free(s->readbuf);
    free(s);
}

/*
 * libuv writes with writev(), which raises SIGPIPE when the client has gone; the default
 * action would kill the process. Ignore it unless the program installed its own handler.
 */
static void ignore_sigpipe(void)
{
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
}

int http_server_start(uv_loop_t *loop, const http_server_options *opts, http_server **out,
                      strata_err *err)
{
    *out = NULL;
    if (validate(opts, err) != 0)
        return -1;
    ignore_sigpipe();
    const char *host = opts->host ? opts->host : "0.0.0.0";
    if (strlen(host) >= sizeof(((http_server *)0)->host))
        return strata_err_set(err, ERR_VALIDATION, "http server: host too long");
    http_server *s = calloc(1, sizeof *s);
    char *readbuf = malloc(READ_BUF_SIZE);
    if (s == NULL || readbuf == NULL) {
        free(s);
        free(readbuf);
        return strata_err_set(err, ERR_NOMEM, "http server: out of memory");
    }
    s->readbuf = readbuf;
    s->loop = loop;
    s->opts = *opts;
    snprintf(s->host, sizeof s->host, "%s", host);
    s->opts.host = s->host;
    s->shared = (http_conn_shared){
        .max_body = opts->max_body,
        .max_header_bytes = opts->max_header_bytes,
        .max_headers = opts->max_headers,
        .max_pipeline = opts->max_pipeline,
        .arena_limit = opts->request_arena_limit,
        .body_budget = opts->max_body_total,
        .handler = opts->handler,
        .handler_data = opts->handler_data,
        .io = &uv_conn_io,
        .date = server_date,
    };
    s->tl[TL_HEADER].timeout_ms = opts->header_timeout_ms;
    s->tl[TL_BODY].timeout_ms = opts->body_timeout_ms;
    s->tl[TL_IDLE].timeout_ms = opts->idle_timeout_ms;
    s->tl[TL_WRITE].timeout_ms = opts->write_timeout_ms;
    s->tl[TL_LINGER].timeout_ms = LINGER_MS;
    if (opts->header_timeout_ms != 0 && opts->header_timeout_ms < LINGER_MS)
        s->tl[TL_LINGER].timeout_ms = opts->header_timeout_ms;

    int fd = -1;
    if (open_listener(host, opts->port, &fd, err) != 0) {
        free(readbuf);
        free(s);
        return -1;
    }
    s->port = bound_port(fd);
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    int rc = uv_tcp_open(&s->listener, fd);
    if (rc != 0)
        close(fd); /* not adopted by the handle */
    else
        rc = uv_listen((uv_stream_t *)&s->listener, LISTEN_BACKLOG, on_connection);
    if (rc != 0) {
        uv_close((uv_handle_t *)&s->listener, free_server); /* s lives until then */
        return strata_err_set(err, ERR_IO, "http server: listen: %s", uv_strerror(rc));
    }
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_idle_init(loop, &s->done_idle);
    s->done_idle.data = s;
    uv_check_init(loop, &s->done_check);
    s->done_check.data = s;
    uv_check_start(&s->done_check, on_done_check);
    uv_unref((uv_handle_t *)&s->done_check); /* done_idle keeps the loop alive if needed */
    uv_timer_init(loop, &s->grace);
    s->grace.data = s;
    *out = s;
    return 0;
}

int http_server_port(const http_server *s)
{
    return s->port;
}

void http_server_get_stats(const http_server *s, http_server_stats *out)
{
    *out = s->stats;
    out->requests_total = s->shared.requests_total;
    out->errors_total = s->shared.errors_total;
}

static void on_timer_closed(uv_handle_t *h)
{
    http_server *s = h->data;
    if (--s->handles_closing > 0)
        return;
    void (*done)(void *) = s->stop_done;
    void *data = s->stop_data;
    http_conn_shared_release(&s->shared);
    free(s->readbuf);
    free(s);
    if (done != NULL)
        done(data);
}

static void maybe_finish_stop(http_server *s)
{
    if (!s->stopping || !s->listener_closed || s->conns != NULL || s->timer_closing)
        return;
    s->timer_closing = true;
    s->handles_closing = 4;
    uv_close((uv_handle_t *)&s->timer, on_timer_closed);
    uv_close((uv_handle_t *)&s->grace, on_timer_closed);
    uv_close((uv_handle_t *)&s->done_idle, on_timer_closed);
    uv_close((uv_handle_t *)&s->done_check, on_timer_closed);
}

/* The stop's grace period ended: close what is still busy (its requests become detached). */
static void on_grace(uv_timer_t *t)
{
    http_server *s = t->data;
    uconn *next;
    for (uconn *c = s->conns; c != NULL; c = next) {
        next = c->next;
        conn_close(c);
    }
}

static void on_listener_closed(uv_handle_t *h)
{
    http_server *s = h->data;
    s->listener_closed = true;
    maybe_finish_stop(s);
}

void http_server_stop(http_server *s, void (*done)(void *data), void *data)
{
    assert(!s->stopping);
    s->stopping = true;
    s->shared.stopping = true;
    s->stop_done = done;
    s->stop_data = data;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    if (s->opts.stop_grace_ms > 0)
        uv_timer_start(&s->grace, on_grace, s->opts.stop_grace_ms, 0);
    uconn *next;
    for (uconn *c = s->conns; c != NULL; c = next) {
        next = c->next; /* closing unlinks only later, in on_conn_closed */
        if (c->closing)
            continue;
        if (c->lingering)
            conn_close(c);
        else
            http_conn_stop(&c->core);
    }
}
