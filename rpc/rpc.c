/*
 * Peer endpoint (contract in rpc.h).
 *
 * Ownership and lifetimes. libuv closes handles asynchronously, so every struct that
 * embeds a handle is freed in that handle's close callback, and the endpoint itself is
 * freed when its last handle has closed (r->handles counts them). Pointers that can
 * outlive a connection (responders, calls) refer to it by id, never by address.
 *
 *   peer   one per rpc_add_peer: address, send queue (survives reconnects), backoff
 *          timer, stats. Freed when its backoff timer closes after rpc_remove_peer.
 *   conn   one TCP connection, outbound (dialled to a peer) or inbound (accepted),
 *          with a handshake timer and a stream decoder. Freed when both handles closed.
 *   call   one outstanding rpc_call with its deadline timer, in a hash by corr id.
 *
 * Batching: rpc_send only queues and marks the connection dirty; a check handle (runs
 * after the poll phase) writes each dirty connection's whole queue with one uv_write.
 * An idle handle is started alongside so the poll phase does not block while frames
 * queued from a timer or from outside the loop wait for the check phase.
 */
#include "rpc/rpc.h"

#include <assert.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/frame.h"
#include "storage/base/buf.h"
#include "strata.pb-c.h"

#define DEFAULT_MAX_FRAME   (16u << 20)
#define DEFAULT_MAX_QUEUED  (64u << 20)
#define DEFAULT_CONNECT_MS  2000
#define DEFAULT_MAX_INBOUND 256
#define DEFAULT_BACKOFF_MIN 50
#define DEFAULT_BACKOFF_MAX 5000
#define READ_BUF_SIZE       (64 * 1024)
#define CALL_BUCKETS        1024
#define ERROR_MSG_MAX       400
#define HELLO_MAX           1024 /* frame bound until the remote's Hello is accepted */
#define NONCE_LEN           32   /* Hello.auth_nonce */
#define PROOF_LEN           32   /* HMAC-SHA256 */
/* What a proof signs: this label, the prover's role, the cluster id, prover and verifier
 * ids and both nonces (see proof_compute). */
#define PROOF_LABEL     "strata peer proof v1"
#define PROOF_INPUT_MAX (sizeof PROOF_LABEL + 1 + 1 + RPC_CLUSTER_ID_MAX + 8 + 8 + 2 * NONCE_LEN)

typedef struct out_frame {
    struct out_frame *next;
    uint64_t corr_id;
    uint8_t type;
    size_t len; /* header + payload */
    uint8_t data[];
} out_frame;

typedef struct {
    out_frame *head, *tail;
    size_t count;
    size_t bytes; /* waiting, not yet handed to uv_write */
} outq;

typedef struct peer peer;
typedef struct conn conn;

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* connect + handshake deadline */
    uv_connect_t connect_req;
    rpc *r;
    uint64_t id;
    peer *peer; /* outbound: the peer dialled; NULL if inbound or peer removed */
    bool outbound;
    bool hello_seen;                 /* the handshake is complete (Hello, and the proof if any) */
    bool awaiting_proof;             /* the remote's Hello was accepted; its proof has not come */
    bool authenticated;              /* the remote proved the secret */
    uint64_t hello_node;             /* the node id the remote's Hello named */
    uint8_t nonce[NONCE_LEN];        /* ours, in our Hello (with a secret) */
    uint8_t remote_nonce[NONCE_LEN]; /* the remote's */
    bool closing;
    bool dirty;
    uint64_t remote_node;
    int refs;        /* handles not yet closed */
    outq own;        /* inbound connections: responses */
    size_t inflight; /* bytes handed to uv_write, not yet completed */
    rpc_decoder dec;
    conn *next, *prev; /* r->conns */
    conn *dirty_next;
};

struct peer {
    rpc *r;
    uint64_t node_id;
    struct sockaddr_storage addr;
    conn *conn; /* current outbound connection, if any */
    outq q;
    uv_timer_t backoff;
    uint32_t attempts;
    bool removed;
    rpc_peer_stats stats;
    peer *next;
};

typedef struct call {
    uv_timer_t timer;
    rpc *r;
    uint64_t id;
    uint64_t peer_id;
    uint64_t sent_on; /* id of the connection it was written on; 0 while queued */
    rpc_call_cb cb;
    void *ctx;
    struct call *hnext;
} call;

struct rpc_responder {
    rpc *r;
    uint64_t conn_id;
    uint64_t corr_id;
    uint32_t msg_type;
    uint64_t peer;
    rpc_responder *prev, *next;
};

typedef struct {
    uv_write_t req;
    conn *c;
    size_t bytes;
    out_frame *frames;
    uv_buf_t bufs[];
} write_req;

struct rpc {
    uv_loop_t *loop;
    uint64_t node_id;
    char cluster_id[RPC_CLUSTER_ID_MAX + 1];
    size_t max_frame, max_queued;
    uint32_t connect_ms, backoff_min, backoff_max;
    uint32_t max_inbound, inbound; /* bound and count of open inbound connections */
    uint64_t prng;
    rpc_handlers h;
    uv_tcp_t listener;
    uv_check_t check;
    uv_idle_t idle;
    bool flush_armed;
    int port;
    int handles;
    bool closing;
    conn *conns;
    conn *dirty;
    peer *peers;
    call *calls[CALL_BUCKETS];
    uint64_t next_corr;
    uint64_t next_conn_id;
    rpc_responder *responders;
    /* The peer secrets (rpc_secrets, copied): we prove with secret[0]. n_secrets 0: no
     * peer authentication. */
    uint8_t *secret[RPC_SECRETS_MAX];
    size_t secret_len[RPC_SECRETS_MAX];
    size_t n_secrets;
    bool secrets_optional; /* rpc_secrets.optional: peers without a secret are taken */
    rpc_stats stats;
    uint8_t readbuf[READ_BUF_SIZE];
};

static void conn_fail(conn *c, const char *why);
static void dial(peer *p);

/* ---- small helpers ---------------------------------------------------------------- */

static uint64_t next_random(rpc *r)
{
    /* splitmix64: tiny, and deterministic from the injected seed. */
    uint64_t z = (r->prng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void free_secrets(rpc *r)
{
    for (size_t i = 0; i < r->n_secrets; i++) {
        OPENSSL_cleanse(r->secret[i], r->secret_len[i]);
        free(r->secret[i]);
        r->secret[i] = NULL;
    }
    r->n_secrets = 0;
}

static void handle_closed(rpc *r)
{
    assert(r->handles > 0);
    if (--r->handles == 0 && r->closing) {
        free_secrets(r);
        free(r);
    }
}

static void on_simple_close(uv_handle_t *h)
{
    handle_closed(h->data);
}

static peer *find_peer(const rpc *r, uint64_t node_id)
{
    for (peer *p = r->peers; p != NULL; p = p->next)
        if (p->node_id == node_id && !p->removed)
            return p;
    return NULL;
}

static conn *find_conn(const rpc *r, uint64_t id)
{
    for (conn *c = r->conns; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static out_frame *frame_new(uint8_t type, uint32_t msg_type, uint64_t corr_id, const void *data,
                            size_t len)
{
    out_frame *f = malloc(sizeof *f + RPC_FRAME_HEADER_SIZE + len);
    if (f == NULL)
        return NULL;
    f->next = NULL;
    f->corr_id = corr_id;
    f->type = type;
    f->len = RPC_FRAME_HEADER_SIZE + len;
    if (len > 0)
        memcpy(f->data + RPC_FRAME_HEADER_SIZE, data, len);
    rpc_frame hdr = {.type = type,
                     .msg_type = msg_type,
                     .corr_id = corr_id,
                     .payload = f->data + RPC_FRAME_HEADER_SIZE,
                     .len = (uint32_t)len};
    rpc_frame_write_header(f->data, &hdr);
    return f;
}

static void frames_free(out_frame *f)
{
    while (f != NULL) {
        out_frame *next = f->next;
        free(f);
        f = next;
    }
}

static void outq_push(outq *q, out_frame *f)
{
    if (q->tail != NULL)
        q->tail->next = f;
    else
        q->head = f;
    q->tail = f;
    q->count++;
    q->bytes += f->len;
}

static void outq_clear(outq *q)
{
    frames_free(q->head);
    memset(q, 0, sizeof *q);
}

static outq *conn_queue(conn *c)
{
    return c->peer != NULL ? &c->peer->q : &c->own;
}

static size_t peer_queued(const peer *p)
{
    return p->q.bytes + (p->conn != NULL ? p->conn->inflight : 0);
}

/* ---- calls ------------------------------------------------------------------------ */

static call **call_slot(rpc *r, uint64_t id)
{
    call **pp = &r->calls[id % CALL_BUCKETS];
    while (*pp != NULL && (*pp)->id != id)
        pp = &(*pp)->hnext;
    return pp;
}

static call *call_take(rpc *r, uint64_t id)
{
    call **pp = call_slot(r, id);
    call *c = *pp;
    if (c != NULL) {
        *pp = c->hnext;
        c->hnext = NULL;
    }
    return c;
}

static void on_call_close(uv_handle_t *h)
{
    call *cl = h->data;
    rpc *r = cl->r;
    free(cl);
    handle_closed(r);
}

/* Completes a call already removed from the hash: releases it, then runs its callback
 * (last, so the callback may do anything, rpc_close included). */
static void call_finish(call *cl, int status, const strata_err *err, const uint8_t *data,
                        size_t len)
{
    rpc_call_cb cb = cl->cb;
    void *ctx = cl->ctx;
    uv_timer_stop(&cl->timer);
    uv_close((uv_handle_t *)&cl->timer, on_call_close);
    cb(ctx, status, err, data, len);
}

static void call_fail(call *cl, const char *why)
{
    strata_err e;
    strata_err_set(&e, ERR_UNAVAILABLE, "rpc call to node %llu: %s",
                   (unsigned long long)cl->peer_id, why);
    call_finish(cl, -1, &e, NULL, 0);
}

/* Fails every call matching (peer_id, sent_on); sent_on == UINT64_MAX matches any
 * connection, peer_id == 0 any peer. Matching calls are detached first because the
 * callbacks may change the hash. */
static void calls_fail_matching(rpc *r, uint64_t peer_id, uint64_t sent_on, const char *why)
{
    call *list = NULL;
    for (size_t b = 0; b < CALL_BUCKETS; b++) {
        call **pp = &r->calls[b];
        while (*pp != NULL) {
            call *cl = *pp;
            bool match = (peer_id == 0 || cl->peer_id == peer_id) &&
                         (sent_on == UINT64_MAX || cl->sent_on == sent_on);
            if (match) {
                *pp = cl->hnext;
                cl->hnext = list;
                list = cl;
            } else {
                pp = &cl->hnext;
            }
        }
    }
    while (list != NULL) {
        call *cl = list;
        list = cl->hnext;
        peer *p = find_peer(r, cl->peer_id);
        if (p != NULL)
            p->stats.call_failures++;
        call_fail(cl, why);
    }
}

static void on_call_deadline(uv_timer_t *t)
{
    call *cl = t->data;
    rpc *r = cl->r;
    if (call_take(r, cl->id) == NULL)
        return;
    peer *p = find_peer(r, cl->peer_id);
    if (p != NULL)
        p->stats.call_timeouts++;
    call_fail(cl, "deadline exceeded");
}

/* ---- writing ---------------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status)
{
    write_req *w = (write_req *)req;
    conn *c = w->c;
    assert(c->inflight >= w->bytes);
    c->inflight -= w->bytes;
    frames_free(w->frames);
    free(w);
    if (status < 0 && !c->closing)
        conn_fail(c, uv_strerror(status));
}

/* Hands the kernel as much of bufs as it takes at once (nothing if libuv still queues
 * bytes of this connection: order first). Returns the index of the first buffer not
 * taken whole, and trims that one by what was taken of it; n if all were. libuv's
 * uv_write would cost an epoll_ctl on completion even when the kernel takes all. */
static size_t try_write(conn *c, uv_buf_t *bufs, size_t n)
{
    int k = uv_try_write((uv_stream_t *)&c->tcp, bufs, (unsigned)n);
    if (k < 0)
        return 0; /* EAGAIN, or an error uv_write reports */
    size_t took = (size_t)k, i = 0;
    while (i < n && took >= bufs[i].len)
        took -= bufs[i++].len;
    if (i < n) {
        bufs[i].base += took;
        bufs[i].len -= took;
    }
    return i;
}

/* Writes a list of frames (one buffer per frame): what the kernel takes at once, then
 * the rest with one uv_write. Takes the frames. */
static void write_frames(conn *c, out_frame *list, size_t n, size_t bytes)
{
    write_req *w = calloc(1, sizeof *w + n * sizeof(uv_buf_t));
    if (w == NULL) {
        frames_free(list);
        conn_fail(c, "out of memory");
        return;
    }
    w->c = c;
    w->bytes = bytes;
    w->frames = list;
    size_t i = 0;
    for (out_frame *f = list; f != NULL && i < n; f = f->next, i++) {
        w->bufs[i].base = (char *)f->data;
        w->bufs[i].len = f->len;
    }
    assert(i == n && i > 0);
    size_t first = try_write(c, w->bufs, n);
    if (first == n) {
        frames_free(list);
        free(w);
        return;
    }
    c->inflight += bytes;
    int rc =
        uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs + first, (unsigned)(n - first), on_write);
    if (rc < 0) {
        c->inflight -= bytes;
        frames_free(list);
        free(w);
        conn_fail(c, uv_strerror(rc));
    }
}

static void flush_conn(conn *c)
{
    rpc *r = c->r;
    outq *q = conn_queue(c);
    if (q->head == NULL || c->closing || !c->hello_seen)
        return;
    out_frame *list = q->head;
    size_t n = q->count, bytes = q->bytes;
    memset(q, 0, sizeof *q);
    for (out_frame *f = list; f != NULL; f = f->next) {
        if (f->type == RPC_FRAME_REQUEST) {
            call *cl = *call_slot(r, f->corr_id);
            if (cl != NULL)
                cl->sent_on = c->id;
        }
    }
    peer *p = find_peer(r, c->remote_node);
    if (p != NULL) {
        p->stats.frames_sent += n;
        p->stats.bytes_sent += bytes;
        p->stats.writes++;
    }
    write_frames(c, list, n, bytes);
}

static void on_check(uv_check_t *h)
{
    rpc *r = h->data;
    /* Pop one at a time: a flush can fail a connection, whose callbacks may queue more
     * frames (re-marking connections dirty) or close the endpoint. */
    while (r->dirty != NULL) {
        conn *c = r->dirty;
        r->dirty = c->dirty_next;
        c->dirty_next = NULL;
        c->dirty = false;
        flush_conn(c);
    }
    if (r->flush_armed && !r->closing) {
        uv_check_stop(&r->check);
        uv_idle_stop(&r->idle);
    }
    r->flush_armed = false;
}

static void on_idle(uv_idle_t *h)
{
    (void)h; /* only keeps the poll phase from blocking until on_check runs */
}

static void mark_dirty(conn *c)
{
    rpc *r = c->r;
    if (c->dirty || c->closing)
        return;
    c->dirty = true;
    c->dirty_next = r->dirty;
    r->dirty = c;
    if (!r->flush_armed) {
        r->flush_armed = true;
        uv_check_start(&r->check, on_check);
        uv_idle_start(&r->idle, on_idle);
    }
}

/* ---- connections ------------------------------------------------------------------ */

static void on_conn_handle_close(uv_handle_t *h)
{
    conn *c = h->data;
    rpc *r = c->r;
    if (--c->refs == 0) {
        if (!c->outbound)
            r->inbound--;
        if (c->prev != NULL)
            c->prev->next = c->next;
        else
            r->conns = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
        rpc_decoder_free(&c->dec);
        outq_clear(&c->own);
        free(c);
    }
    handle_closed(r);
}

/* Starts closing both handles; the struct goes when both close callbacks have run. */
static void conn_close(conn *c)
{
    rpc *r = c->r;
    if (c->closing)
        return;
    c->closing = true;
    if (c->dirty) {
        conn **pp = &r->dirty;
        while (*pp != c)
            pp = &(*pp)->dirty_next;
        *pp = c->dirty_next;
        c->dirty = false;
    }
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_close);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_close);
}

static void on_backoff(uv_timer_t *t)
{
    peer *p = t->data;
    if (!p->removed && p->conn == NULL)
        dial(p);
}

static void schedule_redial(rpc *r, peer *p)
{
    uint64_t base = r->backoff_min;
    for (uint32_t i = 0; i < p->attempts && base < r->backoff_max; i++)
        base *= 2;
    if (base > r->backoff_max)
        base = r->backoff_max;
    uint64_t delay = base / 2 + next_random(r) % (base - base / 2 + 1);
    p->attempts++;
    uv_timer_start(&p->backoff, on_backoff, delay, 0);
}

/* Closes a connection after an error. An outbound connection's peer is re-dialled after
 * a backoff; calls written on it fail (their responses cannot come back another way). */
static void conn_fail(conn *c, const char *why)
{
    rpc *r = c->r;
    if (c->closing)
        return;
    conn_close(c);
    peer *p = c->peer;
    if (p == NULL || r->closing)
        return;
    bool was_connected = p->stats.connected;
    c->peer = NULL;
    p->conn = NULL;
    p->stats.connected = false;
    p->stats.connect_failures++;
    schedule_redial(r, p);
    uint64_t node = p->node_id;
    calls_fail_matching(r, node, c->id, why);
    if (was_connected && r->h.on_peer_state != NULL && !r->closing)
        r->h.on_peer_state(r->h.ctx, node, false);
}

static void on_conn_timer(uv_timer_t *t)
{
    conn *c = t->data;
    if (!c->outbound && !c->hello_seen)
        c->r->stats.handshake_timeouts++;
    conn_fail(c, "connect/handshake timed out");
}

static conn *conn_new(rpc *r, bool outbound)
{
    conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->r = r;
    c->id = ++r->next_conn_id;
    c->outbound = outbound;
    /* A stranger cannot make us allocate more than HELLO_MAX before saying who it is. */
    rpc_decoder_init(&c->dec, HELLO_MAX);
    uv_tcp_init(r->loop, &c->tcp);
    uv_timer_init(r->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->refs = 2;
    r->handles += 2;
    c->next = r->conns;
    if (r->conns != NULL)
        r->conns->prev = c;
    r->conns = c;
    uv_timer_start(&c->timer, on_conn_timer, r->connect_ms, 0);
    return c;
}

/* Queues a handshake frame (Hello, proof) ahead of everything: flush_conn holds the
 * rest until the handshake is complete. */
static void send_handshake_frame(conn *c, uint8_t type, const uint8_t *data, size_t len)
{
    out_frame *f = frame_new(type, 0, 0, data, len);
    if (f == NULL) {
        conn_fail(c, "out of memory");
        return;
    }
    write_frames(c, f, 1, f->len);
}

static void send_hello(conn *c)
{
    rpc *r = c->r;
    Strata__Hello h = STRATA__HELLO__INIT;
    h.cluster_id = r->cluster_id;
    h.node_id = r->node_id;
    h.protocol_version = RPC_PROTOCOL_VERSION;
    if (r->n_secrets > 0) {
        if (RAND_bytes(c->nonce, NONCE_LEN) != 1) {
            conn_fail(c, "no random bytes for the handshake nonce");
            return;
        }
        h.auth_nonce.data = c->nonce;
        h.auth_nonce.len = NONCE_LEN;
        h.auth_optional = r->secrets_optional;
    }
    uint8_t packed[HELLO_MAX];
    size_t len = strata__hello__get_packed_size(&h);
    assert(len <= sizeof packed); /* the cluster id is bounded by RPC_CLUSTER_ID_MAX */
    strata__hello__pack(&h, packed);
    send_handshake_frame(c, RPC_FRAME_HELLO, packed, len);
}

/*
 * The proof that one side of `c` knows secret number `key`: ours (`ours`) or the one the
 * remote must send. It binds the prover's role on this connection ('D' dialler, 'A'
 * acceptor), so that a proof cannot be reflected back, and both fresh nonces (the
 * dialler's first), so that it is good for this connection only. -1 if that fails.
 */
static int proof_compute(const conn *c, bool ours, size_t key, uint8_t out[PROOF_LEN])
{
    const rpc *r = c->r;
    size_t cid = strlen(r->cluster_id);
    buf in;
    buf_init(&in, PROOF_INPUT_MAX);
    buf_append(&in, PROOF_LABEL, sizeof PROOF_LABEL); /* with its NUL */
    buf_put_u8(&in, ours == c->outbound ? 'D' : 'A');
    buf_put_u8(&in, (uint8_t)cid);
    buf_append(&in, r->cluster_id, cid);
    buf_put_u64be(&in, ours ? r->node_id : c->hello_node);
    buf_put_u64be(&in, ours ? c->hello_node : r->node_id);
    buf_append(&in, c->outbound ? c->nonce : c->remote_nonce, NONCE_LEN);
    buf_append(&in, c->outbound ? c->remote_nonce : c->nonce, NONCE_LEN);
    unsigned int out_len = 0;
    bool ok = !in.failed &&
              HMAC(EVP_sha256(), r->secret[key], (int)r->secret_len[key], in.data, in.len, out,
                   &out_len) != NULL &&
              out_len == PROOF_LEN;
    buf_free(&in);
    return ok ? 0 : -1;
}

static void send_proof(conn *c)
{
    uint8_t proof[PROOF_LEN];
    if (proof_compute(c, true, 0, proof) < 0) {
        conn_fail(c, "cannot compute the handshake proof");
        return;
    }
    send_handshake_frame(c, RPC_FRAME_PROOF, proof, PROOF_LEN);
}

static void remote_addr(conn *c, char *out, size_t cap)
{
    struct sockaddr_storage sa;
    int len = sizeof sa;
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) == 0) {
        if (sa.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&sa, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&sa, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        }
    }
    snprintf(out, cap, strchr(ip, ':') != NULL ? "[%s]:%d" : "%s:%d", ip, port);
}

/* Refuses the handshake of `c`: counts it (`auth`: a wrong proof), closes the connection
 * and tells the handler. */
static void reject_handshake(conn *c, uint64_t node, bool auth, const char *why)
{
    rpc *r = c->r;
    if (c->peer != NULL) {
        c->peer->stats.handshake_rejects++;
        c->peer->stats.auth_failures += auth;
        if (c->peer->node_id < RPC_SEED_ID_MIN)
            node = c->peer->node_id;
    } else {
        r->stats.handshake_rejects++;
        r->stats.auth_failures += auth;
    }
    char addr[128];
    remote_addr(c, addr, sizeof addr);
    conn_fail(c, why);
    if (r->h.on_reject != NULL && !r->closing)
        r->h.on_reject(r->h.ctx, node, addr, why);
}

static void handshake_done(conn *c, uint64_t node)
{
    rpc *r = c->r;
    c->hello_seen = true;
    /* A seed's connection keeps the seed id: its calls and stats are under that id. */
    c->remote_node =
        c->peer != NULL && c->peer->node_id >= RPC_SEED_ID_MIN ? c->peer->node_id : node;
    rpc_decoder_set_max(&c->dec, r->max_frame);
    uv_timer_stop(&c->timer);
    if (c->peer == NULL)
        return;
    peer *p = c->peer;
    p->attempts = 0;
    p->stats.connected = true;
    p->stats.connects++;
    if (p->q.head != NULL)
        mark_dirty(c);
    if (r->h.on_peer_state != NULL)
        r->h.on_peer_state(r->h.ctx, p->node_id, true);
}

static void on_hello(conn *c, const rpc_frame *f)
{
    rpc *r = c->r;
    Strata__Hello *h = strata__hello__unpack(NULL, f->len, f->payload);
    const char *bad = NULL;
    if (h == NULL)
        bad = "undecodable Hello";
    else if (h->protocol_version != RPC_PROTOCOL_VERSION)
        bad = "protocol version mismatch";
    else if (h->cluster_id == NULL || strcmp(h->cluster_id, r->cluster_id) != 0)
        bad = "foreign cluster";
    else if (h->node_id == 0 || h->node_id == r->node_id)
        bad = "bad node id";
    else if (c->peer != NULL && h->node_id != c->peer->node_id &&
             c->peer->node_id < RPC_SEED_ID_MIN)
        bad = "unexpected node id";
    else if (r->n_secrets > 0 && h->auth_nonce.len == 0 && !r->secrets_optional)
        bad = "the peer has no peer secret; this node requires one";
    else if (r->n_secrets == 0 && h->auth_nonce.len != 0 && !h->auth_optional)
        bad = "the peer requires a peer secret; this node has none";
    else if (h->auth_nonce.len != 0 && h->auth_nonce.len != NONCE_LEN)
        bad = "bad handshake nonce";
    uint64_t node = h != NULL ? h->node_id : 0;
    /* Proofs both ways when both sides have a secret (each side sees both Hellos, so both
     * decide alike); otherwise one side is optional and takes the link unproved. */
    bool prove = bad == NULL && r->n_secrets > 0 && h->auth_nonce.len != 0;
    if (prove)
        memcpy(c->remote_nonce, h->auth_nonce.data, NONCE_LEN);
    if (h != NULL)
        strata__hello__free_unpacked(h, NULL);
    if (bad != NULL) {
        reject_handshake(c, node, false, bad);
        return;
    }
    if (!prove) {
        handshake_done(c, node);
        return;
    }
    /* Our proof covers the remote's nonce, so it goes once its Hello is accepted; the
     * remote's proof comes the same way, and nothing else passes before it checks out. */
    c->hello_node = node;
    c->awaiting_proof = true;
    send_proof(c);
}

/* Whether the remote's proof was made with one of our secrets (each is tried, so that
 * the time taken does not say which). */
static bool proof_good(const conn *c, const rpc_frame *f)
{
    if (f->len != PROOF_LEN)
        return false;
    bool good = false;
    for (size_t k = 0; k < c->r->n_secrets; k++) {
        uint8_t want[PROOF_LEN];
        if (proof_compute(c, false, k, want) == 0 &&
            CRYPTO_memcmp(want, f->payload, PROOF_LEN) == 0)
            good = true;
    }
    return good;
}

static void on_proof(conn *c, const rpc_frame *f)
{
    if (!proof_good(c, f)) {
        reject_handshake(c, c->hello_node, true, "wrong proof of the peer secret");
        return;
    }
    c->awaiting_proof = false;
    c->authenticated = true;
    handshake_done(c, c->hello_node);
}

static void responder_unlink(rpc_responder *rs)
{
    rpc *r = rs->r;
    if (rs->prev != NULL)
        rs->prev->next = rs->next;
    else
        r->responders = rs->next;
    if (rs->next != NULL)
        rs->next->prev = rs->prev;
}

static void on_request(conn *c, const rpc_frame *f)
{
    rpc *r = c->r;
    rpc_responder *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return; /* the caller's deadline reports it */
    rs->r = r;
    rs->conn_id = c->id;
    rs->corr_id = f->corr_id;
    rs->msg_type = f->msg_type;
    rs->peer = c->remote_node;
    rs->next = r->responders;
    if (r->responders != NULL)
        r->responders->prev = rs;
    r->responders = rs;
    if (r->h.on_request == NULL) {
        rpc_respond_error(rs, ERR_UNKNOWN_OPERATION, "no request handler");
        return;
    }
    r->h.on_request(r->h.ctx, c->remote_node, f->msg_type, f->payload, f->len, rs);
}

static void on_response(conn *c, const rpc_frame *f)
{
    rpc *r = c->r;
    call *cl = *call_slot(r, f->corr_id);
    if (cl == NULL || cl->peer_id != c->remote_node)
        return; /* late (deadline passed) or not ours */
    call_take(r, f->corr_id);
    if (f->type == RPC_FRAME_RESPONSE) {
        call_finish(cl, 0, NULL, f->payload, f->len);
        return;
    }
    strata_err e;
    strata_code code = ERR_INTERNAL;
    const char *msg = "";
    size_t mlen = 0;
    if (f->len >= 4) {
        uint32_t v = ((uint32_t)f->payload[0] << 24) | ((uint32_t)f->payload[1] << 16) |
                     ((uint32_t)f->payload[2] << 8) | f->payload[3];
        if (v > ERR_NONE && v < ERR_CODE_COUNT)
            code = (strata_code)v;
        msg = (const char *)f->payload + 4;
        mlen = f->len - 4;
        if (mlen > ERROR_MSG_MAX)
            mlen = ERROR_MSG_MAX;
    }
    strata_err_set(&e, code, "%.*s", (int)mlen, msg);
    peer *p = find_peer(r, cl->peer_id);
    if (p != NULL)
        p->stats.call_failures++;
    call_finish(cl, -1, &e, NULL, 0);
}

static void on_frame(conn *c, const rpc_frame *f)
{
    rpc *r = c->r;
    if (!c->hello_seen) {
        uint8_t expected = c->awaiting_proof ? RPC_FRAME_PROOF : RPC_FRAME_HELLO;
        if (f->type != expected) {
            r->stats.corrupt_frames++;
            conn_fail(c, c->awaiting_proof ? "frame before the proof" : "frame before Hello");
        } else if (c->awaiting_proof) {
            on_proof(c, f);
        } else {
            on_hello(c, f);
        }
        return;
    }
    peer *p = find_peer(r, c->remote_node);
    if (p != NULL) {
        p->stats.frames_received++;
        p->stats.bytes_received += RPC_FRAME_HEADER_SIZE + f->len;
    }
    switch (f->type) {
    case RPC_FRAME_MESSAGE:
        if (r->h.on_message != NULL)
            r->h.on_message(r->h.ctx, c->remote_node, f->msg_type, f->payload, f->len);
        break;
    case RPC_FRAME_REQUEST:
        on_request(c, f);
        break;
    case RPC_FRAME_RESPONSE:
    case RPC_FRAME_ERROR:
        on_response(c, f);
        break;
    default:
        r->stats.corrupt_frames++;
        conn_fail(c, "handshake frame after the handshake");
        break;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    (void)suggested;
    conn *c = h->data;
    /* One buffer for all connections: a read callback consumes it before the next read. */
    *out = uv_buf_init((char *)c->r->readbuf, READ_BUF_SIZE);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    conn *c = s->data;
    if (nread < 0) {
        conn_fail(c, nread == UV_EOF ? "connection closed by peer" : uv_strerror((int)nread));
        return;
    }
    const uint8_t *p = (const uint8_t *)b->base;
    size_t n = (size_t)nread;
    while (!c->closing) {
        rpc_frame f;
        strata_err e;
        int rc = rpc_decoder_feed(&c->dec, &p, &n, &f, &e);
        if (rc == 0)
            break;
        if (rc < 0) {
            c->r->stats.corrupt_frames++;
            conn_fail(c, e.msg);
            break;
        }
        on_frame(c, &f);
    }
}

static void start_conn(conn *c)
{
    uv_tcp_nodelay(&c->tcp, 1);
    /* Lets the kernel notice a peer that vanished without a FIN (power loss, partition);
     * until then call deadlines and the queue bound are what the caller sees. */
    uv_tcp_keepalive(&c->tcp, 1, 10);
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) {
        conn_fail(c, uv_strerror(rc));
        return;
    }
    send_hello(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    conn *c = req->data;
    if (c->closing)
        return; /* cancelled by close */
    if (status < 0) {
        conn_fail(c, uv_strerror(status));
        return;
    }
    start_conn(c);
}

static void dial(peer *p)
{
    rpc *r = p->r;
    conn *c = conn_new(r, true);
    if (c == NULL) {
        p->stats.connect_failures++;
        schedule_redial(r, p);
        return;
    }
    c->peer = p;
    c->remote_node = p->node_id;
    p->conn = c;
    c->connect_req.data = c;
    int rc =
        uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&p->addr, on_connect);
    if (rc < 0)
        conn_fail(c, uv_strerror(rc));
}

static void on_refused_close(uv_handle_t *h)
{
    free(h);
}

/* Accepts a connection only to close it: left in the backlog it would be retried. */
static void refuse(rpc *r, uv_stream_t *server)
{
    uv_tcp_t *t = malloc(sizeof *t);
    if (t == NULL)
        return;
    uv_tcp_init(r->loop, t);
    if (uv_accept(server, (uv_stream_t *)t) == 0)
        r->stats.refused++;
    uv_close((uv_handle_t *)t, on_refused_close);
}

static void on_connection(uv_stream_t *server, int status)
{
    rpc *r = server->data;
    if (status < 0 || r->closing)
        return;
    if (r->inbound >= r->max_inbound) {
        refuse(r, server);
        return;
    }
    conn *c = conn_new(r, false);
    if (c == NULL)
        return;
    r->inbound++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    r->stats.accepted++;
    start_conn(c);
}

/* ---- public API ------------------------------------------------------------------- */

static int parse_addr(const char *host, int port, struct sockaddr_storage *out, strata_err *err)
{
    if (host == NULL || port < 0 || port > 65535)
        return strata_err_set(err, ERR_VALIDATION, "rpc: bad address");
    memset(out, 0, sizeof *out);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)out) == 0)
        return 0;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)out) == 0)
        return 0;
    return strata_err_set(err, ERR_VALIDATION, "rpc: '%s' is not a numeric IP address", host);
}

static int secrets_check(const rpc_secrets *s, strata_err *err)
{
    if (s->count > RPC_SECRETS_MAX)
        return strata_err_set(err, ERR_VALIDATION, "rpc: at most %d peer secrets", RPC_SECRETS_MAX);
    if (s->optional && s->count == 0)
        return strata_err_set(err, ERR_VALIDATION, "rpc: optional authentication without a secret");
    for (size_t i = 0; i < s->count; i++)
        if (s->key[i] == NULL || s->len[i] < RPC_SECRET_MIN || s->len[i] > RPC_SECRET_MAX)
            return strata_err_set(err, ERR_VALIDATION, "rpc: a peer secret has %d to %d bytes",
                                  RPC_SECRET_MIN, RPC_SECRET_MAX);
    return 0;
}

/* Copies the checked secrets `s` over r's (all or nothing). */
static int secrets_copy(rpc *r, const rpc_secrets *s, strata_err *err)
{
    uint8_t *copy[RPC_SECRETS_MAX] = {0};
    for (size_t i = 0; i < s->count; i++) {
        copy[i] = malloc(s->len[i]);
        if (copy[i] == NULL) {
            for (size_t j = 0; j < i; j++) {
                OPENSSL_cleanse(copy[j], s->len[j]);
                free(copy[j]);
            }
            return strata_err_set(err, ERR_NOMEM, "rpc: out of memory");
        }
        memcpy(copy[i], s->key[i], s->len[i]);
    }
    free_secrets(r);
    for (size_t i = 0; i < s->count; i++) {
        r->secret[i] = copy[i];
        r->secret_len[i] = s->len[i];
    }
    r->n_secrets = s->count;
    r->secrets_optional = s->count > 0 && s->optional;
    return 0;
}

int rpc_set_secrets(rpc *r, const rpc_secrets *s, strata_err *err)
{
    if (secrets_check(s, err) < 0)
        return -1;
    if ((s->count == 0) != (r->n_secrets == 0))
        return strata_err_set(err, ERR_VALIDATION,
                              "rpc: a peer secret cannot be turned %s while the node runs",
                              s->count == 0 ? "off" : "on");
    if (s->optional != r->secrets_optional)
        return strata_err_set(err, ERR_VALIDATION,
                              "rpc: whether peers without a secret are taken cannot change "
                              "while the node runs");
    return secrets_copy(r, s, err);
}

rpc *rpc_open(uv_loop_t *loop, const rpc_options *o, const rpc_handlers *handlers, strata_err *err)
{
    if (o->node_id == 0 || o->cluster_id == NULL || o->cluster_id[0] == '\0' ||
        strlen(o->cluster_id) > RPC_CLUSTER_ID_MAX) {
        strata_err_set(err, ERR_VALIDATION, "rpc: node id and cluster id are required");
        return NULL;
    }
    if (o->max_frame_bytes > UINT32_MAX) {
        strata_err_set(err, ERR_VALIDATION, "rpc: max_frame_bytes over 4 GiB");
        return NULL;
    }
    struct sockaddr_storage addr;
    if (parse_addr(o->listen_host, o->listen_port, &addr, err) < 0)
        return NULL;
    rpc *r = calloc(1, sizeof *r);
    if (r == NULL) {
        strata_err_set(err, ERR_NOMEM, "rpc: out of memory");
        return NULL;
    }
    r->loop = loop;
    r->node_id = o->node_id;
    strcpy(r->cluster_id, o->cluster_id);
    r->max_frame = o->max_frame_bytes ? o->max_frame_bytes : DEFAULT_MAX_FRAME;
    r->max_queued = o->max_queued_bytes ? o->max_queued_bytes : DEFAULT_MAX_QUEUED;
    r->connect_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_MS;
    r->max_inbound = o->max_inbound ? o->max_inbound : DEFAULT_MAX_INBOUND;
    r->backoff_min = o->backoff_min_ms ? o->backoff_min_ms : DEFAULT_BACKOFF_MIN;
    r->backoff_max = o->backoff_max_ms ? o->backoff_max_ms : DEFAULT_BACKOFF_MAX;
    if (r->backoff_max < r->backoff_min)
        r->backoff_max = r->backoff_min;
    r->prng = o->seed;
    if (handlers != NULL)
        r->h = *handlers;
    if (secrets_check(&o->secrets, err) < 0 || secrets_copy(r, &o->secrets, err) < 0) {
        free(r);
        return NULL;
    }
    uv_tcp_init(loop, &r->listener);
    uv_check_init(loop, &r->check);
    uv_idle_init(loop, &r->idle);
    r->listener.data = r->check.data = r->idle.data = r;
    r->handles = 3;
    int rc = uv_tcp_bind(&r->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&r->listener, 128, on_connection);
    if (rc < 0) {
        strata_err_set(err, ERR_IO, "rpc: cannot listen on %s:%d: %s", o->listen_host,
                       o->listen_port, uv_strerror(rc));
        rpc_close(r);
        return NULL;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&r->listener, (struct sockaddr *)&bound, &blen);
    r->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    return r;
}

int rpc_listen_port(const rpc *r)
{
    return r->port;
}

static void on_peer_close(uv_handle_t *h)
{
    peer *p = h->data;
    rpc *r = p->r;
    free(p);
    handle_closed(r);
}

/* Unlinks a peer, closes its connection and timer; the struct goes with the timer. */
static void peer_drop(rpc *r, peer *p)
{
    peer **pp = &r->peers;
    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
    p->removed = true;
    outq_clear(&p->q);
    if (p->conn != NULL) {
        conn *c = p->conn;
        c->peer = NULL;
        p->conn = NULL;
        conn_close(c);
    }
    uv_timer_stop(&p->backoff);
    uv_close((uv_handle_t *)&p->backoff, on_peer_close);
}

void rpc_close(rpc *r)
{
    if (r->closing)
        return;
    r->closing = true;
    calls_fail_matching(r, 0, UINT64_MAX, "endpoint closed");
    while (r->responders != NULL) {
        rpc_responder *rs = r->responders;
        responder_unlink(rs);
        free(rs);
    }
    while (r->peers != NULL)
        peer_drop(r, r->peers);
    for (conn *c = r->conns; c != NULL; c = c->next)
        conn_close(c);
    r->dirty = NULL;
    uv_close((uv_handle_t *)&r->listener, on_simple_close);
    uv_close((uv_handle_t *)&r->check, on_simple_close);
    uv_close((uv_handle_t *)&r->idle, on_simple_close);
}

int rpc_add_peer(rpc *r, uint64_t node_id, const char *host, int port, strata_err *err)
{
    if (node_id == 0 || node_id == r->node_id)
        return strata_err_set(err, ERR_VALIDATION, "rpc: bad peer node id %llu",
                              (unsigned long long)node_id);
    if (find_peer(r, node_id) != NULL)
        return strata_err_set(err, ERR_RESOURCE_IN_USE, "rpc: node %llu is already a peer",
                              (unsigned long long)node_id);
    struct sockaddr_storage addr;
    if (port <= 0 || parse_addr(host, port, &addr, err) < 0)
        return strata_err_set(err, ERR_VALIDATION, "rpc: bad peer address");
    peer *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_err_set(err, ERR_NOMEM, "rpc: out of memory");
    p->r = r;
    p->node_id = node_id;
    p->addr = addr;
    uv_timer_init(r->loop, &p->backoff);
    p->backoff.data = p;
    r->handles++;
    p->next = r->peers;
    r->peers = p;
    dial(p);
    return 0;
}

int rpc_remove_peer(rpc *r, uint64_t node_id, strata_err *err)
{
    peer *p = find_peer(r, node_id);
    if (p == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "rpc: node %llu is not a peer",
                              (unsigned long long)node_id);
    peer_drop(r, p);
    calls_fail_matching(r, node_id, UINT64_MAX, "peer removed");
    return 0;
}

/* Queues one frame for a peer, enforcing the frame and queue bounds. */
static int enqueue(rpc *r, uint64_t node, uint8_t type, uint32_t msg_type, uint64_t corr,
                   const void *data, size_t len, strata_err *err)
{
    peer *p = find_peer(r, node);
    if (p == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "rpc: node %llu is not a peer",
                              (unsigned long long)node);
    if (len > r->max_frame)
        return strata_err_set(err, ERR_VALIDATION, "rpc: %zu-byte message over the %zu limit", len,
                              r->max_frame);
    if (peer_queued(p) + RPC_FRAME_HEADER_SIZE + len > r->max_queued) {
        p->stats.busy_rejects++;
        return strata_err_set(err, ERR_BUSY, "rpc: send queue to node %llu is full",
                              (unsigned long long)node);
    }
    out_frame *f = frame_new(type, msg_type, corr, data, len);
    if (f == NULL)
        return strata_err_set(err, ERR_NOMEM, "rpc: out of memory");
    outq_push(&p->q, f);
    if (p->conn != NULL && p->conn->hello_seen)
        mark_dirty(p->conn);
    return 0;
}

int rpc_send(rpc *r, uint64_t peer_id, uint32_t type, const void *data, size_t len, strata_err *err)
{
    if (r->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "rpc: endpoint closed");
    return enqueue(r, peer_id, RPC_FRAME_MESSAGE, type, 0, data, len, err);
}

int rpc_call(rpc *r, uint64_t peer_id, uint32_t type, const void *data, size_t len,
             uint32_t deadline_ms, rpc_call_cb cb, void *ctx, strata_err *err)
{
    if (r->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "rpc: endpoint closed");
    if (deadline_ms == 0 || cb == NULL)
        return strata_err_set(err, ERR_VALIDATION, "rpc: a call needs a deadline and a callback");
    uint64_t id = ++r->next_corr;
    if (enqueue(r, peer_id, RPC_FRAME_REQUEST, type, id, data, len, err) < 0)
        return -1;
    call *cl = calloc(1, sizeof *cl);
    if (cl == NULL) {
        /* The queued request goes out; a response to it will find no call. */
        return strata_err_set(err, ERR_NOMEM, "rpc: out of memory");
    }
    cl->r = r;
    cl->id = id;
    cl->peer_id = peer_id;
    cl->cb = cb;
    cl->ctx = ctx;
    uv_timer_init(r->loop, &cl->timer);
    cl->timer.data = cl;
    r->handles++;
    uv_timer_start(&cl->timer, on_call_deadline, deadline_ms, 0);
    call **slot = &r->calls[id % CALL_BUCKETS];
    cl->hnext = *slot;
    *slot = cl;
    find_peer(r, peer_id)->stats.calls++;
    return 0;
}

uint64_t rpc_responder_peer(const rpc_responder *resp)
{
    return resp->peer;
}

/* Queues a response frame on the requester's connection and releases the responder. */
static int respond_frame(rpc_responder *rs, uint8_t type, const void *data, size_t len,
                         strata_err *err)
{
    rpc *r = rs->r;
    conn *c = find_conn(r, rs->conn_id);
    int rc = 0;
    if (c != NULL && !c->closing) {
        outq *q = conn_queue(c);
        if (q->bytes + c->inflight + RPC_FRAME_HEADER_SIZE + len > r->max_queued) {
            rc = strata_err_set(err, ERR_BUSY, "rpc: response queue is full");
        } else {
            out_frame *f = frame_new(type, rs->msg_type, rs->corr_id, data, len);
            if (f == NULL) {
                rc = strata_err_set(err, ERR_NOMEM, "rpc: out of memory");
            } else {
                outq_push(q, f);
                mark_dirty(c);
            }
        }
    }
    responder_unlink(rs);
    free(rs);
    return rc;
}

int rpc_respond(rpc_responder *resp, const void *data, size_t len, strata_err *err)
{
    if (len > resp->r->max_frame) {
        rpc_respond_error(resp, ERR_INTERNAL, "response over the frame size limit");
        return strata_err_set(err, ERR_VALIDATION, "rpc: %zu-byte response over the limit", len);
    }
    return respond_frame(resp, RPC_FRAME_RESPONSE, data, len, err);
}

void rpc_respond_error(rpc_responder *resp, strata_code code, const char *msg)
{
    uint8_t payload[4 + ERROR_MSG_MAX];
    size_t mlen = msg != NULL ? strnlen(msg, ERROR_MSG_MAX) : 0;
    uint32_t v = (uint32_t)code;
    payload[0] = (uint8_t)(v >> 24);
    payload[1] = (uint8_t)(v >> 16);
    payload[2] = (uint8_t)(v >> 8);
    payload[3] = (uint8_t)v;
    if (mlen > 0)
        memcpy(payload + 4, msg, mlen);
    respond_frame(resp, RPC_FRAME_ERROR, payload, 4 + mlen, NULL);
}

int rpc_peer_stats_get(const rpc *r, uint64_t node, rpc_peer_stats *out, strata_err *err)
{
    peer *p = find_peer(r, node);
    if (p == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "rpc: node %llu is not a peer",
                              (unsigned long long)node);
    *out = p->stats;
    out->queued_bytes = peer_queued(p);
    out->authenticated = p->conn != NULL && p->conn->hello_seen && p->conn->authenticated;
    return 0;
}

void rpc_stats_get(const rpc *r, rpc_stats *out)
{
    *out = r->stats;
    out->secrets = r->n_secrets;
    out->secrets_optional = r->secrets_optional;
    out->unauthenticated = 0;
    for (const conn *c = r->conns; c != NULL; c = c->next)
        out->unauthenticated += c->hello_seen && !c->closing && !c->authenticated;
}
