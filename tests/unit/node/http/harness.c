#include "tests/unit/node/http/harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- handler */

static void answer_echo(http_request *req)
{
    size_t len;
    const uint8_t *body = http_request_body(req, &len);
    const char *target = http_request_header(req, "X-Amz-Target");
    char out[512];
    int n = snprintf(out, sizeof out, "M=%s|P=%s|Q=%s|U=%s|T=%s|N=%zu|L=%zu|B=%.64s",
                     http_request_method(req), http_request_path(req), http_request_query(req),
                     http_request_url(req), target ? target : "-", http_request_header_count(req),
                     len, (const char *)body);
    assert_true(http_request_peer(req)[0] != '\0');
    assert_int_equal(body[len], '\0');
    http_header hs[] = {{"Content-Type", "text/plain"},
                        {"X-Test", "yes"},
                        {"Content-Length", "999"},
                        {"Bad", "a\r\nInjected: 1"},
                        {"X-Peer", http_request_peer(req)}};
    http_respond(req, 200, hs, 5, out, (size_t)n);
}

static void test_handler(http_request *req, void *data)
{
    harness *h = data;
    h->dispatched++;
    switch (h->mode) {
    case MODE_ECHO:
        answer_echo(req);
        break;
    case MODE_DEFER:
        assert_true(h->nheld < HOLD_MAX);
        h->held[h->nheld++] = req;
        break;
    case MODE_BIG: {
        char crc[16];
        snprintf(crc, sizeof crc, "%u", (unsigned)http_crc32(h->big, h->big_len));
        http_header hs[] = {{"x-amz-crc32", crc}};
        http_respond(req, 200, hs, 1, h->big, h->big_len);
        break;
    }
    case MODE_STATUS:
        http_respond(req, h->status, NULL, 0, "status", 6);
        break;
    case MODE_CLOSE: {
        http_header hs[] = {{"Connection", "close"}};
        http_respond(req, 200, hs, 1, "bye", 3);
        break;
    }
    }
}

/* ---------------------------------------------------------------- loop thread */

static void on_async(uv_async_t *a)
{
    harness *h = a->data;
    pthread_mutex_lock(&h->mu);
    void (*fn)(void *, void *) = h->call_fn;
    void *arg = h->call_arg;
    pthread_mutex_unlock(&h->mu);
    if (fn == NULL)
        return;
    fn(h, arg);
    pthread_mutex_lock(&h->mu);
    h->call_fn = NULL;
    h->call_pending = false;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void *loop_main(void *arg)
{
    harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
    return NULL;
}

void on_loop(harness *h, void (*fn)(void *h, void *arg), void *arg)
{
    pthread_mutex_lock(&h->mu);
    h->call_fn = fn;
    h->call_arg = arg;
    h->call_pending = true;
    pthread_mutex_unlock(&h->mu);
    uv_async_send(&h->async);
    pthread_mutex_lock(&h->mu);
    while (h->call_pending)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

void harness_start(harness *h, http_server_options *opts, handler_mode mode)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->mode = mode;
    assert_int_equal(uv_loop_init(&h->loop), 0);
    assert_int_equal(uv_async_init(&h->loop, &h->async, on_async), 0);
    h->async.data = h;
    if (opts->host == NULL || strcmp(opts->host, "0.0.0.0") == 0)
        opts->host = "127.0.0.1";
    opts->port = 0;
    opts->handler = test_handler;
    opts->handler_data = h;
    strata_err err;
    if (http_server_start(&h->loop, opts, &h->srv, &err) != 0)
        fail_msg("http_server_start: %s", err.msg);
    h->port = http_server_port(h->srv);
    assert_true(h->port > 0);
    assert_int_equal(pthread_create(&h->thread, NULL, loop_main, h), 0);
}

static void on_stopped(void *data)
{
    harness *h = data;
    h->stopped = true;
}

static void do_stop_begin(void *hv, void *arg)
{
    (void)arg;
    harness *h = hv;
    http_server_stop(h->srv, on_stopped, h);
    h->srv = NULL;
}

void harness_stop_begin(harness *h)
{
    on_loop(h, do_stop_begin, NULL);
}

static bool is_stopped(harness *h, void *arg)
{
    (void)arg;
    return h->stopped;
}

static void do_close_async(void *hv, void *arg)
{
    (void)arg;
    harness *h = hv;
    uv_close((uv_handle_t *)&h->async, NULL);
}

void harness_stop_finish(harness *h)
{
    assert_true(harness_wait(h, is_stopped, NULL, 5000));
    on_loop(h, do_close_async, NULL);
    pthread_join(h->thread, NULL);
    assert_int_equal(h->nheld, 0); /* every held request must have been answered */
    assert_int_equal(uv_loop_close(&h->loop), 0);
    free(h->big);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

void harness_stop(harness *h)
{
    harness_stop_begin(h);
    harness_stop_finish(h);
}

static void get_stats(void *hv, void *arg)
{
    harness *h = hv;
    http_server_get_stats(h->srv, arg);
}

http_server_stats harness_stats(harness *h)
{
    http_server_stats st;
    on_loop(h, get_stats, &st);
    return st;
}

static void get_nheld(void *hv, void *arg)
{
    harness *h = hv;
    *(int *)arg = h->nheld;
}

int harness_nheld(harness *h)
{
    int n;
    on_loop(h, get_nheld, &n);
    return n;
}

static void get_dispatched(void *hv, void *arg)
{
    harness *h = hv;
    *(uint64_t *)arg = h->dispatched;
}

uint64_t harness_dispatched(harness *h)
{
    uint64_t n;
    on_loop(h, get_dispatched, &n);
    return n;
}

static void do_set_status(void *hv, void *arg)
{
    harness *h = hv;
    h->status = *(int *)arg;
}

void harness_set_status(harness *h, int status)
{
    on_loop(h, do_set_status, &status);
}

static void do_answer(void *hv, void *arg)
{
    harness *h = hv;
    int i = *(int *)arg;
    assert_true(i >= 0 && i < h->nheld);
    http_request *req = h->held[i];
    memmove(&h->held[i], &h->held[i + 1], (size_t)(h->nheld - i - 1) * sizeof h->held[0]);
    h->nheld--;
    answer_echo(req);
}

void harness_answer(harness *h, int i)
{
    on_loop(h, do_answer, &i);
}

typedef struct {
    bool (*cond)(harness *h, void *arg);
    void *arg;
    bool result;
} wait_call;

static void do_wait_check(void *hv, void *arg)
{
    wait_call *w = arg;
    w->result = w->cond(hv, w->arg);
}

bool harness_wait(harness *h, bool (*cond)(harness *h, void *arg), void *arg, int deadline_ms)
{
    uint64_t end = now_ms() + (uint64_t)deadline_ms;
    wait_call w = {cond, arg, false};
    for (;;) {
        on_loop(h, do_wait_check, &w);
        if (w.result)
            return true;
        if (now_ms() > end)
            return false;
        struct timespec ts = {0, 2 * 1000 * 1000}; /* poll interval, not a wait for an event */
        nanosleep(&ts, NULL);
    }
}

/* ---------------------------------------------------------------- client */

void client_connect_rcvbuf(client *c, int port, int rcvbuf)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    if (rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = {5, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&sin, sizeof sin), 0);
}

void client_connect(client *c, int port)
{
    client_connect_rcvbuf(c, port, 0);
}

void client_connect6(client *c, int port)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET6, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    struct timeval tv = {5, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    sin6.sin6_addr = in6addr_loopback;
    assert_int_equal(connect(c->fd, (struct sockaddr *)&sin6, sizeof sin6), 0);
}

void client_send(client *c, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        s += w;
        n -= (size_t)w;
    }
}

void client_sends(client *c, const char *s)
{
    client_send(c, s, strlen(s));
}

static int fill(client *c)
{
    if (c->len == sizeof c->buf)
        return -1;
    ssize_t n;
    do
        n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    c->len += (size_t)n;
    return 0;
}

bool response_header(const response *r, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    const char *p = strstr(r->head, "\r\n");
    while (p != NULL && p[2] != '\0') {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t len = e ? (size_t)(e - v) : strlen(v);
            if (len >= n)
                len = n - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return true;
        }
        p = strstr(p, "\r\n");
    }
    return false;
}

int client_read(client *c, response *r)
{
    memset(r, 0, sizeof *r);
    char *end;
    while ((end = memmem(c->buf, c->len, "\r\n\r\n", 4)) == NULL)
        if (fill(c) != 0)
            return -1;
    size_t head_len = (size_t)(end - c->buf) + 4;
    assert_true(head_len < sizeof r->head);
    memcpy(r->head, c->buf, head_len);
    r->head[head_len] = '\0';
    assert_int_equal(sscanf(r->head, "HTTP/1.1 %d", &r->status), 1);
    char cl[32];
    size_t body_len = 0;
    if (response_header(r, "Content-Length", cl, sizeof cl))
        body_len = (size_t)strtoull(cl, NULL, 10);
    if (c->next_is_head)
        body_len = 0;
    c->next_is_head = false;
    memmove(c->buf, c->buf + head_len, c->len - head_len);
    c->len -= head_len;
    r->body = malloc(body_len + 1);
    assert_non_null(r->body);
    size_t have = c->len < body_len ? c->len : body_len;
    memcpy(r->body, c->buf, have);
    memmove(c->buf, c->buf + have, c->len - have);
    c->len -= have;
    while (have < body_len) {
        ssize_t n = recv(c->fd, r->body + have, body_len - have, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            response_free(r);
            return -1;
        }
        have += (size_t)n;
    }
    r->body[body_len] = '\0';
    r->body_len = body_len;
    return 0;
}

bool client_closed(client *c)
{
    if (c->len > 0)
        return false;
    char b[256];
    ssize_t n;
    do
        n = recv(c->fd, b, sizeof b, 0);
    while (n < 0 && errno == EINTR);
    return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE));
}

void client_close(client *c)
{
    close(c->fd);
    c->fd = -1;
}

void client_reset(client *c)
{
    struct linger l = {1, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    client_close(c);
}

void response_free(response *r)
{
    free(r->body);
    r->body = NULL;
}
