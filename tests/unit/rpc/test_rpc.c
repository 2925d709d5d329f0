/*
 * Real loopback endpoints on one uv loop. Every wait runs the loop until a condition
 * holds, with a deadline (a ticker timer makes sure uv_run returns to re-check).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rpc/frame.h"
#include "rpc/rpc.h"
#include "strata.pb-c.h"

#define WAIT_MS  5000
#define MAX_MSGS 4096

typedef struct {
    rpc *r;
    uint64_t id;
    int port;
    /* received messages */
    int nmsg;
    uint64_t msg_peer[MAX_MSGS];
    uint32_t msg_type[MAX_MSGS];
    uint32_t msg_seq[MAX_MSGS];
    size_t msg_len[MAX_MSGS];
    /* request handling */
    bool hold_requests; /* keep responders instead of answering */
    rpc_responder *held[64];
    int nheld;
    int nreq;
    int peer_up, peer_down;
    /* refused handshakes, as on_reject reports them */
    int nreject;
    uint64_t reject_node;
    char reject_addr[128], reject_why[128];
} node;

typedef struct {
    int done;
    int status;
    strata_err err;
    uint8_t data[256];
    size_t len;
} call_result;

static uv_loop_t loop;
/* Endpoints still open, so a failed test's teardown can close them. */
static node *live[16];

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until cond(arg) is true or WAIT_MS passes; returns cond's final value. */
static bool run_until(bool (*cond)(void *), void *arg)
{
    uv_timer_t tick;
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, on_tick, 5, 5);
    uint64_t deadline = uv_now(&loop) + WAIT_MS;
    bool ok;
    while (!(ok = cond(arg)) && uv_now(&loop) < deadline)
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    return ok;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

/* Runs the loop for about `ms` (used only to show something does NOT happen). */
static void run_for(uint32_t ms)
{
    uv_timer_t tick;
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, on_tick, 5, 5);
    uint64_t deadline = uv_now(&loop) + ms;
    while (!never(NULL) && uv_now(&loop) < deadline)
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static void on_message(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len)
{
    node *n = ctx;
    assert_true(n->nmsg < MAX_MSGS);
    n->msg_peer[n->nmsg] = peer;
    n->msg_type[n->nmsg] = type;
    n->msg_len[n->nmsg] = len;
    uint32_t seq = 0;
    if (len >= 4)
        memcpy(&seq, data, 4);
    n->msg_seq[n->nmsg] = seq;
    n->nmsg++;
}

/* Echo server: type 1 echoes "re:" + payload; type 2 answers an error; holds if asked. */
static void on_request(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len,
                       rpc_responder *resp)
{
    node *n = ctx;
    n->nreq++;
    assert_int_equal(rpc_responder_peer(resp), peer);
    if (n->hold_requests) {
        assert_true(n->nheld < 64);
        n->held[n->nheld++] = resp;
        return;
    }
    if (type == 2) {
        rpc_respond_error(resp, ERR_CONDITIONAL_CHECK, "The conditional request failed");
        return;
    }
    uint8_t out[300];
    memcpy(out, "re:", 3);
    if (len > 0)
        memcpy(out + 3, data, len);
    assert_int_equal(rpc_respond(resp, out, len + 3, NULL), 0);
}

static void on_peer_state(void *ctx, uint64_t peer, bool up)
{
    node *n = ctx;
    (void)peer;
    if (up)
        n->peer_up++;
    else
        n->peer_down++;
}

static void on_reject(void *ctx, uint64_t peer, const char *addr, const char *why)
{
    node *n = ctx;
    n->nreject++;
    n->reject_node = peer;
    snprintf(n->reject_addr, sizeof n->reject_addr, "%s", addr);
    snprintf(n->reject_why, sizeof n->reject_why, "%s", why);
}

static void on_call_done(void *ctx, int status, const strata_err *err, const uint8_t *data,
                         size_t len)
{
    call_result *c = ctx;
    c->done++;
    c->status = status;
    if (err != NULL)
        c->err = *err;
    if (status == 0) {
        assert_true(len <= sizeof c->data);
        memcpy(c->data, data, len);
        c->len = len;
    }
}

static int open_node_opts(node *n, uint64_t id, const char *cluster, int port,
                          const rpc_options *base, strata_err *err)
{
    rpc_options o = base != NULL ? *base : (rpc_options){0};
    o.node_id = id;
    o.cluster_id = cluster;
    o.listen_host = "127.0.0.1";
    o.listen_port = port;
    if (o.connect_timeout_ms == 0)
        o.connect_timeout_ms = 500;
    if (o.backoff_min_ms == 0)
        o.backoff_min_ms = 5;
    if (o.backoff_max_ms == 0)
        o.backoff_max_ms = 40;
    o.seed = id;
    rpc_handlers h = {.on_message = on_message,
                      .on_request = on_request,
                      .on_peer_state = on_peer_state,
                      .on_reject = on_reject,
                      .ctx = n};
    n->id = id;
    n->r = rpc_open(&loop, &o, &h, err);
    if (n->r == NULL)
        return -1;
    n->port = rpc_listen_port(n->r);
    for (int i = 0; i < 16; i++) {
        if (live[i] == NULL) {
            live[i] = n;
            break;
        }
    }
    return 0;
}

static node *open_node(uint64_t id, const char *cluster, int port)
{
    node *n = calloc(1, sizeof *n);
    assert_int_equal(open_node_opts(n, id, cluster, port, NULL, NULL), 0);
    return n;
}

static void close_node(node *n)
{
    if (n->r != NULL)
        rpc_close(n->r);
    n->r = NULL;
    for (int i = 0; i < 16; i++)
        if (live[i] == n)
            live[i] = NULL;
}

static int setup(void **state)
{
    (void)state;
    return uv_loop_init(&loop);
}

static void close_stray(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* A passing test closed everything itself: a leaked handle makes uv_loop_close fail.
 * After a failed test, close what it left so the next tests still run. */
static int teardown(void **state)
{
    (void)state;
    bool leftovers = false;
    for (int i = 0; i < 16; i++) {
        if (live[i] != NULL) {
            leftovers = true;
            close_node(live[i]);
        }
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_run(&loop, UV_RUN_NOWAIT);
    int rc = uv_loop_close(&loop);
    if (rc != 0) {
        uv_walk(&loop, close_stray, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
    }
    return rc == 0 && !leftovers ? 0 : -1;
}

typedef struct {
    node *n;
    uint64_t peer;
} peer_ref;

static bool is_connected(void *arg)
{
    peer_ref *p = arg;
    rpc_peer_stats s;
    return rpc_peer_stats_get(p->n->r, p->peer, &s, NULL) == 0 && s.connected;
}

static bool is_disconnected(void *arg)
{
    return !is_connected(arg);
}

typedef struct {
    node *n;
    int count;
} msg_wait;

static bool has_msgs(void *arg)
{
    msg_wait *w = arg;
    return w->n->nmsg >= w->count;
}

static bool call_done(void *arg)
{
    return ((call_result *)arg)->done > 0;
}

static void send_seq(node *from, uint64_t to, uint32_t seq, size_t len)
{
    uint8_t buf[4096] = {0};
    assert_true(len >= 4 && len <= sizeof buf);
    memcpy(buf, &seq, 4);
    strata_err e;
    int rc = rpc_send(from->r, to, 7, buf, len, &e);
    if (rc != 0)
        fail_msg("rpc_send: %s", e.msg);
}

static void test_handshake(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    peer_ref ab = {a, 2};
    assert_true(run_until(is_connected, &ab));
    assert_int_equal(a->peer_up, 1);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_int_equal(s.connects, 1);
    rpc_stats bs;
    rpc_stats_get(b->r, &bs);
    assert_int_equal(bs.accepted, 1);
    assert_int_equal(bs.handshake_rejects, 0);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

static void test_send_in_order_batched(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    /* Queued before the handshake: must wait for it, then arrive first. */
    for (uint32_t i = 0; i < 10; i++)
        send_seq(a, 2, i, 100);
    peer_ref ab = {a, 2};
    assert_true(run_until(is_connected, &ab));
    for (uint32_t i = 10; i < 2000; i++)
        send_seq(a, 2, i, i % 3 == 0 ? 4000 : 100);
    msg_wait w = {b, 2000};
    assert_true(run_until(has_msgs, &w));
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(b->msg_seq[i], i);
        assert_int_equal(b->msg_peer[i], 1);
        assert_int_equal(b->msg_type[i], 7);
        assert_int_equal(b->msg_len[i], i % 3 == 0 && i >= 10 ? 4000 : 100);
    }
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_int_equal(s.frames_sent, 2000);
    /* One loop iteration's frames go out in one write. */
    assert_true(s.writes <= 3);
    assert_int_equal(s.queued_bytes, 0);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

static void test_calls(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    enum { N = 50 };
    call_result res[N];
    memset(res, 0, sizeof res);
    for (int i = 0; i < N; i++) {
        char msg[16];
        int len = snprintf(msg, sizeof msg, "q%d", i);
        assert_int_equal(rpc_call(a->r, 2, 1, msg, (size_t)len, 2000, on_call_done, &res[i], NULL),
                         0);
        assert_int_equal(res[i].done, 0); /* never inside rpc_call */
    }
    for (int i = 0; i < N; i++) {
        assert_true(run_until(call_done, &res[i]));
        char want[16];
        int len = snprintf(want, sizeof want, "re:q%d", i);
        assert_int_equal(res[i].status, 0);
        assert_int_equal(res[i].len, len);
        assert_memory_equal(res[i].data, want, (size_t)len);
    }
    /* A remote error keeps its code and message. */
    call_result er = {0};
    assert_int_equal(rpc_call(a->r, 2, 2, "x", 1, 2000, on_call_done, &er, NULL), 0);
    assert_true(run_until(call_done, &er));
    assert_int_equal(er.status, -1);
    assert_int_equal(er.err.code, ERR_CONDITIONAL_CHECK);
    assert_string_equal(er.err.msg, "The conditional request failed");
    /* Empty request and response payloads. */
    call_result em = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, NULL, 0, 2000, on_call_done, &em, NULL), 0);
    assert_true(run_until(call_done, &em));
    assert_int_equal(em.len, 3);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_int_equal(s.calls, N + 2);
    assert_int_equal(s.call_failures, 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i].done, 1);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

static void test_no_request_handler(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0);
    node *b = calloc(1, sizeof *b);
    rpc_options o = {.node_id = 2, .cluster_id = "c1", .listen_host = "127.0.0.1"};
    rpc_handlers h = {0};
    b->r = rpc_open(&loop, &o, &h, NULL);
    assert_non_null(b->r);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", rpc_listen_port(b->r), NULL), 0);
    call_result res = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "x", 1, 2000, on_call_done, &res, NULL), 0);
    assert_true(run_until(call_done, &res));
    assert_int_equal(res.status, -1);
    assert_int_equal(res.err.code, ERR_UNKNOWN_OPERATION);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

static void test_call_deadline(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    b->hold_requests = true;
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    call_result res = {0};
    uint64_t start = uv_now(&loop);
    assert_int_equal(rpc_call(a->r, 2, 1, "slow", 4, 100, on_call_done, &res, NULL), 0);
    assert_true(run_until(call_done, &res));
    assert_true(uv_now(&loop) - start >= 99);
    assert_int_equal(res.status, -1);
    assert_int_equal(res.err.code, ERR_UNAVAILABLE);
    assert_int_equal(b->nheld, 1);
    /* The late response is dropped: the callback does not run again. */
    assert_int_equal(rpc_respond(b->held[0], "late", 4, NULL), 0);
    run_for(50);
    assert_int_equal(res.done, 1);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_int_equal(s.call_timeouts, 1);
    /* A call outstanding at close completes with ERR_UNAVAILABLE, inside rpc_close. */
    call_result c2 = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "x", 1, 5000, on_call_done, &c2, NULL), 0);
    close_node(a);
    assert_int_equal(c2.done, 1);
    assert_int_equal(c2.err.code, ERR_UNAVAILABLE);
    close_node(b); /* releases b's held responder */
    free(a);
    free(b);
}

static void test_reconnect_after_restart(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    int port = b->port;
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", port, NULL), 0);
    peer_ref ab = {a, 2};
    assert_true(run_until(is_connected, &ab));
    send_seq(a, 2, 1, 8);
    msg_wait w = {b, 1};
    assert_true(run_until(has_msgs, &w));

    /* A call written before the peer dies fails when the connection breaks. */
    b->hold_requests = true;
    call_result res = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "x", 1, 4000, on_call_done, &res, NULL), 0);
    w.count = 1;
    b->nmsg = 0;
    b->nreq = 0;
    while (b->nreq == 0)
        uv_run(&loop, UV_RUN_ONCE);
    close_node(b);
    assert_true(run_until(call_done, &res));
    assert_int_equal(res.err.code, ERR_UNAVAILABLE);
    assert_true(run_until(is_disconnected, &ab));
    assert_int_equal(a->peer_down, 1);

    /* Sent while the peer is down: waits in the queue. */
    send_seq(a, 2, 100, 8);
    run_for(60); /* several failed dials with backoff */
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_true(s.connect_failures >= 2);
    assert_true(s.queued_bytes > 0);

    node *b2 = open_node(2, "c1", port);
    assert_true(run_until(is_connected, &ab));
    send_seq(a, 2, 101, 8);
    msg_wait w2 = {b2, 2};
    assert_true(run_until(has_msgs, &w2));
    assert_int_equal(b2->msg_seq[0], 100);
    assert_int_equal(b2->msg_seq[1], 101);
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_int_equal(s.connects, 2);
    assert_int_equal(a->peer_up, 2);
    close_node(a);
    close_node(b2);
    free(a);
    free(b);
    free(b2);
}

typedef struct {
    node *a, *c;
} mismatch;

static bool rejected(void *arg)
{
    mismatch *m = arg;
    rpc_peer_stats s;
    rpc_stats cs;
    rpc_peer_stats_get(m->a->r, 3, &s, NULL);
    rpc_stats_get(m->c->r, &cs);
    return s.handshake_rejects >= 2 && cs.handshake_rejects >= 2;
}

static void test_cluster_mismatch(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *c = open_node(3, "other-cluster", 0);
    assert_int_equal(rpc_add_peer(a->r, 3, "127.0.0.1", c->port, NULL), 0);
    send_seq(a, 3, 1, 8);
    call_result res = {0};
    assert_int_equal(rpc_call(a->r, 3, 1, "x", 1, 200, on_call_done, &res, NULL), 0);
    mismatch m = {a, c};
    assert_true(run_until(rejected, &m));
    assert_true(run_until(call_done, &res));
    assert_int_equal(res.err.code, ERR_UNAVAILABLE);
    assert_int_equal(c->nmsg, 0);
    assert_int_equal(c->nreq, 0);
    assert_int_equal(a->peer_up, 0);
    close_node(a);
    close_node(c);
    free(a);
    free(c);
}

/* Dialling an address where a different node answers is rejected too. */
static void test_wrong_node_at_address(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    assert_int_equal(rpc_add_peer(a->r, 5, "127.0.0.1", b->port, NULL), 0);
    send_seq(a, 5, 1, 8);
    run_for(100);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 5, &s, NULL), 0);
    assert_false(s.connected);
    assert_true(s.handshake_rejects >= 1);
    assert_int_equal(b->nmsg, 0);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

static void test_back_pressure(void **state)
{
    (void)state;
    /* Find a free port, then leave it closed: the peer is down. */
    node *probe = open_node(2, "c1", 0);
    int port = probe->port;
    close_node(probe);
    run_for(1);
    rpc_options o = {.max_queued_bytes = 4096};
    node *a = calloc(1, sizeof *a);
    assert_int_equal(open_node_opts(a, 1, "c1", 0, &o, NULL), 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", port, NULL), 0);
    /* 3 frames of 32 + 1000 bytes fit in 4096; the 4th does not. */
    for (uint32_t i = 0; i < 3; i++)
        send_seq(a, 2, i, 1000);
    uint8_t big[1000] = {0};
    strata_err e;
    assert_int_equal(rpc_send(a->r, 2, 7, big, sizeof big, &e), -1);
    assert_int_equal(e.code, ERR_BUSY);
    call_result res = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, big, sizeof big, 1000, on_call_done, &res, &e), -1);
    assert_int_equal(e.code, ERR_BUSY);
    /* Smaller still fits. */
    assert_int_equal(rpc_send(a->r, 2, 7, big, 900, &e), 0);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 2, &s, NULL), 0);
    assert_int_equal(s.busy_rejects, 2);
    assert_int_equal(s.queued_bytes, 3 * 1032 + 932);
    run_for(30);

    /* The peer comes up: the queue drains in order and sending works again. */
    free(probe);
    probe = open_node(2, "c1", port);
    msg_wait w = {probe, 4};
    assert_true(run_until(has_msgs, &w));
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(probe->msg_seq[i], i);
    assert_int_equal(probe->msg_len[3], 900);
    assert_int_equal(rpc_send(a->r, 2, 7, big, sizeof big, &e), 0);
    assert_int_equal(res.done, 0);
    close_node(a);
    close_node(probe);
    free(a);
    free(probe);
}

static void test_remove_peer_fails_calls(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    b->hold_requests = true;
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    call_result res = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "x", 1, 5000, on_call_done, &res, NULL), 0);
    while (b->nreq == 0)
        uv_run(&loop, UV_RUN_ONCE);
    strata_err e;
    assert_int_equal(rpc_remove_peer(a->r, 2, &e), 0);
    assert_int_equal(res.done, 1);
    assert_int_equal(res.err.code, ERR_UNAVAILABLE);
    assert_int_equal(rpc_send(a->r, 2, 1, "x", 1, &e), -1);
    assert_int_equal(e.code, ERR_NOT_FOUND);
    assert_int_equal(rpc_remove_peer(a->r, 2, &e), -1);
    assert_int_equal(e.code, ERR_NOT_FOUND);
    /* Re-adding works. */
    b->hold_requests = false;
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    call_result r2 = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "y", 1, 5000, on_call_done, &r2, NULL), 0);
    assert_true(run_until(call_done, &r2));
    assert_int_equal(r2.status, 0);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    strata_err e;
    node n = {0};
    assert_int_equal(open_node_opts(&n, 0, "c1", 0, NULL, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    assert_int_equal(open_node_opts(&n, 1, "", 0, NULL, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    rpc_options o = {.node_id = 1, .cluster_id = "c1", .listen_host = "not-an-ip"};
    assert_null(rpc_open(&loop, &o, NULL, &e));
    assert_int_equal(e.code, ERR_VALIDATION);

    node *a = open_node(1, "c1", 0);
    /* Port in use. */
    node other = {0};
    assert_int_equal(open_node_opts(&other, 2, "c1", a->port, NULL, &e), -1);
    assert_int_equal(e.code, ERR_IO);
    assert_int_equal(rpc_add_peer(a->r, 1, "127.0.0.1", 1, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    assert_int_equal(rpc_add_peer(a->r, 0, "127.0.0.1", 1, &e), -1);
    assert_int_equal(rpc_add_peer(a->r, 2, "localhost", 1, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", 0, &e), -1);
    assert_int_equal(rpc_add_peer(a->r, 2, "::1", 9, &e), 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", 9, &e), -1);
    assert_int_equal(e.code, ERR_RESOURCE_IN_USE);
    assert_int_equal(rpc_send(a->r, 9, 1, "x", 1, &e), -1);
    assert_int_equal(e.code, ERR_NOT_FOUND);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 9, &s, &e), -1);
    assert_int_equal(e.code, ERR_NOT_FOUND);
    assert_int_equal(rpc_call(a->r, 2, 1, "x", 1, 0, on_call_done, NULL, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    uint8_t *huge = calloc(1, (16u << 20) + 1);
    assert_int_equal(rpc_send(a->r, 2, 1, huge, (16u << 20) + 1, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    free(huge);
    close_node(a);
    free(a);
}

/* A raw TCP client that writes whatever the test gives it and records EOF. */
typedef struct {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_buf_t out;
    bool connected, eof;
    uint8_t rbuf[4096];
} raw_client;

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)s;
    raw_client *c = h->data;
    *b = uv_buf_init((char *)c->rbuf, sizeof c->rbuf);
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    raw_client *c = s->data;
    if (n < 0)
        c->eof = true;
}

static void raw_written(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static void raw_connected(uv_connect_t *req, int status)
{
    raw_client *c = req->data;
    assert_int_equal(status, 0);
    c->connected = true;
    uv_read_start((uv_stream_t *)&c->tcp, raw_alloc, raw_read);
    if (c->out.len > 0)
        uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &c->out, 1, raw_written);
}

static bool raw_eof(void *arg)
{
    return ((raw_client *)arg)->eof;
}

static void raw_connect(raw_client *c, int port, const void *bytes, size_t len)
{
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    uv_tcp_init(&loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    c->out = uv_buf_init((char *)bytes, (unsigned)len);
    assert_int_equal(uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&addr, raw_connected), 0);
}

static void test_corrupt_stream_closes_connection(void **state)
{
    (void)state;
    node *b = open_node(2, "c1", 0);
    static const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\nmore garbage to fill";
    raw_client *c = calloc(1, sizeof *c);
    raw_connect(c, b->port, garbage, sizeof garbage);
    assert_true(run_until(raw_eof, c));
    rpc_stats st;
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.corrupt_frames, 1);

    /* A well-formed frame other than Hello as the first frame is refused too. */
    raw_client *c2 = calloc(1, sizeof *c2);
    static uint8_t frame[RPC_FRAME_HEADER_SIZE + 3];
    memcpy(frame + RPC_FRAME_HEADER_SIZE, "abc", 3);
    rpc_frame f = {.type = RPC_FRAME_MESSAGE, .msg_type = 1, .payload = frame + 32, .len = 3};
    rpc_frame_write_header(frame, &f);
    raw_connect(c2, b->port, frame, sizeof frame);
    assert_true(run_until(raw_eof, c2));
    assert_int_equal(b->nmsg, 0);
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.corrupt_frames, 2);

    uv_close((uv_handle_t *)&c->tcp, NULL);
    uv_close((uv_handle_t *)&c2->tcp, NULL);
    close_node(b);
    uv_run(&loop, UV_RUN_DEFAULT);
    free(c);
    free(c2);
    free(b);
}

/* A client that connects and never says Hello is dropped after the connect timeout. */
static void test_silent_client_times_out(void **state)
{
    (void)state;
    rpc_options o = {.connect_timeout_ms = 100};
    node *b = calloc(1, sizeof *b);
    assert_int_equal(open_node_opts(b, 2, "c1", 0, &o, NULL), 0);
    raw_client *c = calloc(1, sizeof *c);
    raw_connect(c, b->port, NULL, 0);
    uint64_t start = uv_now(&loop);
    assert_true(run_until(raw_eof, c));
    assert_true(uv_now(&loop) - start >= 90);
    rpc_stats st;
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.handshake_timeouts, 1);
    uv_close((uv_handle_t *)&c->tcp, NULL);
    close_node(b);
    uv_run(&loop, UV_RUN_DEFAULT);
    free(c);
    free(b);
}

static bool refused_one(void *arg)
{
    rpc_stats st;
    rpc_stats_get(((node *)arg)->r, &st);
    return st.refused >= 1;
}

/* Inbound connections beyond max_inbound are closed at once; once one goes, the next is
 * served again. A peer still connects when strangers hold every other slot. */
static void test_inbound_bound(void **state)
{
    (void)state;
    rpc_options o = {.connect_timeout_ms = 5000, .max_inbound = 3};
    node *b = calloc(1, sizeof *b);
    assert_int_equal(open_node_opts(b, 2, "c1", 0, &o, NULL), 0);
    raw_client *c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = calloc(1, sizeof *c[i]);
        raw_connect(c[i], b->port, NULL, 0);
    }
    assert_true(run_until(refused_one, b));
    int closed = 0;
    run_for(50);
    for (int i = 0; i < 4; i++)
        closed += c[i]->eof;
    assert_int_equal(closed, 1);
    rpc_stats st;
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.accepted, 3);
    assert_int_equal(st.refused, 1);

    /* A stranger leaves: a peer takes its slot and is served. */
    for (int i = 0; i < 4; i++) {
        if (!c[i]->eof) {
            uv_close((uv_handle_t *)&c[i]->tcp, NULL);
            c[i]->eof = true;
            break;
        }
    }
    node *a = open_node(1, "c1", 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    peer_ref ab = {a, 2};
    assert_true(run_until(is_connected, &ab));
    send_seq(a, 2, 7, 10);
    msg_wait w = {b, 1};
    assert_true(run_until(has_msgs, &w));

    for (int i = 0; i < 4; i++)
        if (!uv_is_closing((uv_handle_t *)&c[i]->tcp))
            uv_close((uv_handle_t *)&c[i]->tcp, NULL);
    close_node(a);
    close_node(b);
    uv_run(&loop, UV_RUN_DEFAULT);
    for (int i = 0; i < 4; i++)
        free(c[i]);
    free(a);
    free(b);
}

/* ---- peer secret (rpc.h, Authentication) ------------------------------------------ */

static const char SECRET_A[] = "the cluster's peer secret, 1";
static const char SECRET_B[] = "another cluster's secret, 22";

/* Secrets `first` (proved with) and `second` (also taken); NULL ends the list. */
static rpc_secrets secrets_of(const char *first, const char *second)
{
    rpc_secrets s = {0};
    const char *k[] = {first, second};
    for (int i = 0; i < 2 && k[i] != NULL; i++) {
        s.key[s.count] = (const uint8_t *)k[i];
        s.len[s.count++] = strlen(k[i]);
    }
    return s;
}

static node *open_node_secrets(uint64_t id, const char *first, const char *second)
{
    rpc_options o = {.secrets = secrets_of(first, second)};
    node *n = calloc(1, sizeof *n);
    assert_int_equal(open_node_opts(n, id, "c1", 0, &o, NULL), 0);
    return n;
}

static node *open_node_secret(uint64_t id, const char *secret)
{
    rpc_options o = {.secrets = secrets_of(secret, NULL)};
    node *n = calloc(1, sizeof *n);
    assert_int_equal(open_node_opts(n, id, "c1", 0, &o, NULL), 0);
    return n;
}

static void free_nodes(node *a, node *b)
{
    close_node(a);
    close_node(b);
    uv_run(&loop, UV_RUN_DEFAULT);
    free(a);
    free(b);
}

/* With the same secret on both sides, connections in both directions prove it and carry
 * messages and calls as without one. */
static void test_secret_handshake(void **state)
{
    (void)state;
    node *a = open_node_secret(1, SECRET_A), *b = open_node_secret(2, SECRET_A);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    assert_int_equal(rpc_add_peer(b->r, 1, "127.0.0.1", a->port, NULL), 0);
    /* Queued before the handshake: held until the proofs are checked, then delivered. */
    send_seq(a, 2, 1, 8);
    send_seq(b, 1, 2, 8);
    peer_ref ab = {a, 2}, ba = {b, 1};
    assert_true(run_until(is_connected, &ab));
    assert_true(run_until(is_connected, &ba));
    msg_wait wa = {a, 1}, wb = {b, 1};
    assert_true(run_until(has_msgs, &wb));
    assert_true(run_until(has_msgs, &wa));
    call_result res = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "hi", 2, 2000, on_call_done, &res, NULL), 0);
    assert_true(run_until(call_done, &res));
    assert_int_equal(res.status, 0);
    assert_memory_equal(res.data, "re:hi", 5);
    rpc_stats st;
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.handshake_rejects, 0);
    assert_int_equal(st.auth_failures, 0);
    free_nodes(a, b);
}

typedef struct {
    node *dialler, *acceptor;
    uint64_t peer; /* the acceptor's id in the dialler */
    bool auth;     /* count auth_failures instead of handshake_rejects */
} reject_wait;

static bool both_rejected(void *arg)
{
    reject_wait *w = arg;
    rpc_peer_stats ps;
    rpc_stats st;
    rpc_peer_stats_get(w->dialler->r, w->peer, &ps, NULL);
    rpc_stats_get(w->acceptor->r, &st);
    if (w->auth)
        return ps.auth_failures >= 2 && st.auth_failures >= 2;
    return ps.handshake_rejects >= 2 && st.handshake_rejects >= 2;
}

/* Dials `acceptor` from `dialler` with a message and a call queued; both sides refuse
 * the connection (again after each redial) and nothing passes. */
static void expect_refused(node *dialler, node *acceptor, bool auth)
{
    assert_int_equal(rpc_add_peer(dialler->r, acceptor->id, "127.0.0.1", acceptor->port, NULL), 0);
    send_seq(dialler, acceptor->id, 1, 8);
    call_result res = {0};
    assert_int_equal(rpc_call(dialler->r, acceptor->id, 1, "x", 1, 300, on_call_done, &res, NULL),
                     0);
    reject_wait w = {dialler, acceptor, acceptor->id, auth};
    assert_true(run_until(both_rejected, &w));
    assert_true(run_until(call_done, &res));
    assert_int_equal(res.err.code, ERR_UNAVAILABLE);
    assert_int_equal(acceptor->nmsg, 0);
    assert_int_equal(acceptor->nreq, 0);
    assert_int_equal(dialler->peer_up, 0);
    rpc_peer_stats ps;
    rpc_stats st;
    rpc_peer_stats_get(dialler->r, acceptor->id, &ps, NULL);
    rpc_stats_get(acceptor->r, &st);
    if (!auth) {
        assert_int_equal(ps.auth_failures, 0);
        assert_int_equal(st.auth_failures, 0);
    }
}

static void test_secret_mismatch(void **state)
{
    (void)state;
    node *a = open_node_secret(1, SECRET_A), *b = open_node_secret(2, SECRET_B);
    expect_refused(a, b, true);
    /* Both sides tell their handler who it was and why. */
    assert_true(a->nreject >= 1 && b->nreject >= 1);
    assert_int_equal(a->reject_node, 2);
    assert_int_equal(b->reject_node, 1);
    assert_string_equal(a->reject_why, "wrong proof of the peer secret");
    assert_string_equal(b->reject_why, "wrong proof of the peer secret");
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", b->port);
    assert_string_equal(a->reject_addr, want);
    assert_non_null(strstr(b->reject_addr, "127.0.0.1:"));
    free_nodes(a, b);
}

/* A node with a secret and one without refuse each other, whichever dials. */
static void test_secret_one_sided(void **state)
{
    (void)state;
    node *a = open_node_secret(1, SECRET_A), *b = open_node_secret(2, NULL);
    expect_refused(a, b, false);
    assert_string_equal(a->reject_why, "the peer has no peer secret; this node requires one");
    assert_string_equal(b->reject_why, "the peer requires a peer secret; this node has none");
    free_nodes(a, b);
    a = open_node_secret(1, NULL);
    b = open_node_secret(2, SECRET_A);
    expect_refused(a, b, false);
    free_nodes(a, b);
}

static void connect_both(node *a, node *b)
{
    peer_ref ab = {a, b->id}, ba = {b, a->id};
    assert_true(run_until(is_connected, &ab));
    assert_true(run_until(is_connected, &ba));
}

/* A node with `secret` (NULL: none), optional or not. */
static node *open_node_mode(uint64_t id, const char *secret, bool optional)
{
    rpc_options o = {.secrets = secrets_of(secret, NULL)};
    o.secrets.optional = optional;
    node *n = calloc(1, sizeof *n);
    assert_int_equal(open_node_opts(n, id, "c1", 0, &o, NULL), 0);
    return n;
}

/* Connects a and b both ways, checks that a message and a call pass each way, and that
 * each side's links are `authenticated` or not. */
static void expect_linked(node *a, node *b, bool authenticated)
{
    assert_int_equal(rpc_add_peer(a->r, b->id, "127.0.0.1", b->port, NULL), 0);
    assert_int_equal(rpc_add_peer(b->r, a->id, "127.0.0.1", a->port, NULL), 0);
    send_seq(a, b->id, 1, 4);
    send_seq(b, a->id, 1, 4);
    connect_both(a, b);
    msg_wait wa = {a, 1}, wb = {b, 1};
    assert_true(run_until(has_msgs, &wb));
    assert_true(run_until(has_msgs, &wa));
    node *from[2] = {a, b}, *to[2] = {b, a};
    for (int i = 0; i < 2; i++) {
        call_result res = {0};
        assert_int_equal(
            rpc_call(from[i]->r, to[i]->id, 1, "hi", 2, 2000, on_call_done, &res, NULL), 0);
        assert_true(run_until(call_done, &res));
        assert_int_equal(res.status, 0);
        rpc_peer_stats ps;
        assert_int_equal(rpc_peer_stats_get(from[i]->r, to[i]->id, &ps, NULL), 0);
        assert_int_equal(ps.authenticated, authenticated);
        assert_int_equal(ps.handshake_rejects, 0);
        rpc_stats st;
        rpc_stats_get(from[i]->r, &st);
        /* Its outbound connection and the other's inbound one. */
        assert_int_equal(st.unauthenticated, authenticated ? 0 : 2);
        assert_int_equal(st.handshake_rejects, 0);
    }
}

/* Turning authentication on (rpc.h): an optional node links with a node without a secret
 * (unproved, whichever dials), with a required one and with another optional one
 * (proved), and still refuses a wrong secret. */
static void test_secret_optional(void **state)
{
    (void)state;
    enum { UNPROVED, PROVED, WRONG_PROOF, REFUSED };
    static const struct {
        const char *a, *b; /* the dialler's secret and the acceptor's (NULL: none) */
        bool a_optional, b_optional;
        int outcome;
    } cases[] = {
        {SECRET_A, NULL, true, false, UNPROVED},
        {NULL, SECRET_A, false, true, UNPROVED},
        {SECRET_A, SECRET_A, true, false, PROVED},
        {SECRET_A, SECRET_A, true, true, PROVED},
        {SECRET_A, SECRET_B, true, true, WRONG_PROOF},
        /* A required node still refuses one without a secret, and is refused by it. */
        {NULL, SECRET_A, false, false, REFUSED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        node *a = open_node_mode(1, cases[i].a, cases[i].a_optional);
        node *b = open_node_mode(2, cases[i].b, cases[i].b_optional);
        if (cases[i].outcome == UNPROVED || cases[i].outcome == PROVED)
            expect_linked(a, b, cases[i].outcome == PROVED);
        else
            expect_refused(a, b, cases[i].outcome == WRONG_PROOF);
        rpc_stats st;
        rpc_stats_get(b->r, &st);
        assert_int_equal(st.secrets_optional, cases[i].b_optional);
        if (cases[i].outcome == REFUSED) {
            assert_string_equal(a->reject_why,
                                "the peer requires a peer secret; this node has none");
            assert_string_equal(b->reject_why,
                                "the peer has no peer secret; this node requires one");
        }
        free_nodes(a, b);
    }
}

/* Writes one frame of `type` with `payload` at `out`; returns its size. */
static size_t put_frame(uint8_t *out, uint8_t type, const void *payload, size_t len)
{
    memcpy(out + RPC_FRAME_HEADER_SIZE, payload, len);
    rpc_frame f = {.type = type, .payload = out + RPC_FRAME_HEADER_SIZE, .len = (uint32_t)len};
    rpc_frame_write_header(out, &f);
    return RPC_FRAME_HEADER_SIZE + len;
}

/* A Hello of node 9 in cluster c1 with a nonce of nonce_len bytes (0: none). */
static size_t put_hello(uint8_t *out, size_t nonce_len)
{
    Strata__Hello h = STRATA__HELLO__INIT;
    h.cluster_id = "c1";
    h.node_id = 9;
    h.protocol_version = RPC_PROTOCOL_VERSION;
    static uint8_t nonce[64] = {1, 2, 3};
    assert_true(nonce_len <= sizeof nonce);
    h.auth_nonce.data = nonce;
    h.auth_nonce.len = nonce_len;
    uint8_t buf[256];
    size_t len = strata__hello__pack(&h, buf);
    return put_frame(out, RPC_FRAME_HELLO, buf, len);
}

/* What a client that does not know the secret can send: each is closed before anything
 * it sent is delivered. */
static void test_secret_strangers(void **state)
{
    (void)state;
    rpc_options o = {.connect_timeout_ms = 300, .secrets = secrets_of(SECRET_A, NULL)};
    node *b = calloc(1, sizeof *b);
    assert_int_equal(open_node_opts(b, 2, "c1", 0, &o, NULL), 0);
    enum { CASES = 6 };
    static uint8_t wire[CASES][512];
    size_t n[CASES];
    uint8_t zeros[32] = {0};
    /* A made-up proof. */
    n[0] = put_hello(wire[0], 32);
    n[0] += put_frame(wire[0] + n[0], RPC_FRAME_PROOF, zeros, sizeof zeros);
    /* A proof of the wrong length. */
    n[1] = put_hello(wire[1], 32);
    n[1] += put_frame(wire[1] + n[1], RPC_FRAME_PROOF, zeros, 31);
    /* A message where the proof should be. */
    n[2] = put_hello(wire[2], 32);
    n[2] += put_frame(wire[2] + n[2], RPC_FRAME_MESSAGE, "abcd", 4);
    /* No nonce: a node without a secret. */
    n[3] = put_hello(wire[3], 0);
    n[3] += put_frame(wire[3] + n[3], RPC_FRAME_MESSAGE, "abcd", 4);
    /* A nonce of the wrong length. */
    n[4] = put_hello(wire[4], 16);
    /* A good Hello, then nothing: closed at the handshake deadline. */
    n[5] = put_hello(wire[5], 32);
    raw_client *c[CASES];
    for (int i = 0; i < CASES; i++) {
        c[i] = calloc(1, sizeof *c[i]);
        raw_connect(c[i], b->port, wire[i], n[i]);
        assert_true(run_until(raw_eof, c[i]));
    }
    rpc_stats st;
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.accepted, CASES);
    assert_int_equal(st.auth_failures, 2);
    assert_int_equal(st.handshake_rejects, 4);
    assert_int_equal(st.corrupt_frames, 1);
    assert_int_equal(st.handshake_timeouts, 1);
    assert_int_equal(b->nmsg, 0);
    assert_int_equal(b->nreject, 4); /* the message before the proof is a corrupt stream */
    assert_string_equal(b->reject_why, "bad handshake nonce");
    assert_int_equal(b->reject_node, 9);
    for (int i = 0; i < CASES; i++)
        uv_close((uv_handle_t *)&c[i]->tcp, NULL);
    close_node(b);
    uv_run(&loop, UV_RUN_DEFAULT);
    for (int i = 0; i < CASES; i++)
        free(c[i]);
    free(b);
}

static void test_secret_bounds(void **state)
{
    (void)state;
    static uint8_t big[RPC_SECRET_MAX + 1];
    size_t lens[] = {RPC_SECRET_MIN - 1, RPC_SECRET_MAX + 1};
    strata_err e;
    for (int i = 0; i < 2; i++) {
        rpc_options o = {.secrets = {.key = {big, big}, .len = {RPC_SECRET_MIN, lens[i]}}};
        for (o.secrets.count = 1; o.secrets.count <= 2; o.secrets.count++) {
            /* The bad one first, then second. */
            o.secrets.len[0] = o.secrets.count == 1 ? lens[i] : RPC_SECRET_MIN;
            node n = {0};
            assert_int_equal(open_node_opts(&n, 1, "c1", 0, &o, &e), -1);
            assert_int_equal(e.code, ERR_VALIDATION);
        }
    }
    rpc_options three = {.secrets = {.key = {big, big}, .len = {20, 20}, .count = 3}};
    node n3 = {0};
    assert_int_equal(open_node_opts(&n3, 1, "c1", 0, &three, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);

    rpc_options o = {.secrets = {.key = {big}, .len = {RPC_SECRET_MAX}, .count = 1}};
    node *n = calloc(1, sizeof *n);
    assert_int_equal(open_node_opts(n, 1, "c1", 0, &o, NULL), 0);
    /* A secret cannot be turned off, nor a bad one set, on a running endpoint. */
    rpc_secrets none = {0};
    assert_int_equal(rpc_set_secrets(n->r, &none, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    assert_int_equal(rpc_set_secrets(n->r, &three.secrets, &e), -1);
    /* Nor can `optional` change; and it needs a secret. */
    rpc_secrets optional = o.secrets;
    optional.optional = true;
    assert_int_equal(rpc_set_secrets(n->r, &optional, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    rpc_options no_secret = {.secrets = {.optional = true}};
    node n0 = {0};
    assert_int_equal(open_node_opts(&n0, 1, "c1", 0, &no_secret, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    node *plain = open_node(2, "c1", 0);
    rpc_secrets one = secrets_of(SECRET_A, NULL);
    assert_int_equal(rpc_set_secrets(plain->r, &one, &e), -1);
    assert_int_equal(e.code, ERR_VALIDATION);
    assert_int_equal(rpc_set_secrets(plain->r, &none, NULL), 0);
    free_nodes(n, plain);
}

static bool peer_auth_failed_twice(void *arg)
{
    peer_ref *p = arg;
    rpc_peer_stats s;
    return rpc_peer_stats_get(p->n->r, p->peer, &s, NULL) == 0 && s.auth_failures >= 2;
}

/* Dials a fresh connection between a and b both ways (peers removed and added again). */
static void redial(node *a, node *b)
{
    rpc_remove_peer(a->r, b->id, NULL);
    rpc_remove_peer(b->r, a->id, NULL);
    assert_int_equal(rpc_add_peer(a->r, b->id, "127.0.0.1", b->port, NULL), 0);
    assert_int_equal(rpc_add_peer(b->r, a->id, "127.0.0.1", a->port, NULL), 0);
    connect_both(a, b);
}

/* Moving a cluster of two from secret A to B, one node at a time, in the three steps of
 * rpc.h: at every step both can make new connections, in both directions. */
static void test_secret_rotation(void **state)
{
    (void)state;
    node *a = open_node_secret(1, SECRET_A), *b = open_node_secret(2, SECRET_A);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    assert_int_equal(rpc_add_peer(b->r, 1, "127.0.0.1", a->port, NULL), 0);
    connect_both(a, b);
    const char *steps[][2] = {{SECRET_A, SECRET_B}, {SECRET_B, SECRET_A}, {SECRET_B, NULL}};
    for (int step = 0; step < 3; step++) {
        node *order[] = {a, b};
        for (int i = 0; i < 2; i++) {
            rpc_secrets s = secrets_of(steps[step][0], steps[step][1]);
            assert_int_equal(rpc_set_secrets(order[i]->r, &s, NULL), 0);
            redial(a, b);
        }
    }
    rpc_stats st;
    rpc_stats_get(a->r, &st);
    assert_int_equal(st.auth_failures, 0);
    rpc_stats_get(b->r, &st);
    assert_int_equal(st.auth_failures, 0);

    /* Now on B alone: a node proving A is refused, whether or not it takes B too. */
    node *old = open_node_secret(3, SECRET_A);
    expect_refused(old, a, true);
    close_node(old);
    free(old);
    node *both = open_node_secrets(4, SECRET_A, SECRET_B);
    assert_int_equal(rpc_add_peer(a->r, 4, "127.0.0.1", both->port, NULL), 0);
    send_seq(a, 4, 1, 8);
    peer_ref a4 = {a, 4};
    assert_true(run_until(peer_auth_failed_twice, &a4));
    assert_int_equal(both->nmsg, 0); /* a never finished its handshake */
    close_node(both);
    free(both);
    free_nodes(a, b);
}

/* Both directions at once, and responses to the peer's requests on its connection. */
static void test_bidirectional(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    assert_int_equal(rpc_add_peer(b->r, 1, "127.0.0.1", a->port, NULL), 0);
    call_result ra = {0}, rb = {0};
    assert_int_equal(rpc_call(a->r, 2, 1, "from-a", 6, 2000, on_call_done, &ra, NULL), 0);
    assert_int_equal(rpc_call(b->r, 1, 1, "from-b", 6, 2000, on_call_done, &rb, NULL), 0);
    send_seq(a, 2, 5, 8);
    send_seq(b, 1, 6, 8);
    assert_true(run_until(call_done, &ra));
    assert_true(run_until(call_done, &rb));
    assert_memory_equal(ra.data, "re:from-a", 9);
    assert_memory_equal(rb.data, "re:from-b", 9);
    msg_wait wa = {a, 1}, wb = {b, 1};
    assert_true(run_until(has_msgs, &wa));
    assert_true(run_until(has_msgs, &wb));
    assert_int_equal(a->msg_seq[0], 6);
    assert_int_equal(b->msg_seq[0], 5);
    assert_int_equal(a->msg_peer[0], 2);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

typedef struct {
    node *n;
    size_t want;
    uint8_t fill;
    int got;
} big_wait;

static void on_big_message(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len)
{
    big_wait *w = ctx;
    (void)peer, (void)type;
    assert_int_equal(len, w->want);
    for (size_t i = 0; i < len; i++)
        if (data[i] != (uint8_t)(i * 7 + w->fill))
            fail_msg("byte %zu differs", i);
    w->got++;
}

static bool big_arrived(void *arg)
{
    return ((big_wait *)arg)->got > 0;
}

static bool reconnected(void *arg)
{
    peer_ref *p = arg;
    rpc_peer_stats s;
    return rpc_peer_stats_get(p->n->r, p->peer, &s, NULL) == 0 && s.connected && s.connects >= 2;
}

static bool has_corrupt(void *arg)
{
    rpc_stats st;
    rpc_stats_get(((node *)arg)->r, &st);
    return st.corrupt_frames > 0;
}

/* Frames larger than a socket read are reassembled; one over the receiver's bound closes
 * the connection as corrupt (and the sender reconnects). */
static void test_large_frames(void **state)
{
    (void)state;
    big_wait w = {.want = 1500000, .fill = 3};
    rpc_options bo = {
        .node_id = 2, .cluster_id = "c1", .listen_host = "127.0.0.1", .max_frame_bytes = 2000000};
    rpc_handlers bh = {.on_message = on_big_message, .ctx = &w};
    node *b = calloc(1, sizeof *b);
    b->r = rpc_open(&loop, &bo, &bh, NULL);
    assert_non_null(b->r);
    live[15] = b;
    rpc_options ao = {.max_frame_bytes = 3000000};
    node *a = calloc(1, sizeof *a);
    assert_int_equal(open_node_opts(a, 1, "c1", 0, &ao, NULL), 0);
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", rpc_listen_port(b->r), NULL), 0);
    uint8_t *big = malloc(2500000);
    for (size_t i = 0; i < 2500000; i++)
        big[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(rpc_send(a->r, 2, 1, big, w.want, NULL), 0);
    assert_true(run_until(big_arrived, &w));

    peer_ref ab = {a, 2};
    assert_int_equal(rpc_send(a->r, 2, 1, big, 2500000, NULL), 0);
    assert_true(run_until(has_corrupt, b));
    rpc_stats bs;
    rpc_stats_get(b->r, &bs);
    assert_int_equal(bs.corrupt_frames, 1);
    assert_int_equal(w.got, 1);
    /* Reconnected (a second handshake); normal traffic flows again. */
    assert_true(run_until(reconnected, &ab));
    w.got = 0;
    assert_int_equal(rpc_send(a->r, 2, 1, big, w.want, NULL), 0);
    assert_true(run_until(big_arrived, &w));
    free(big);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

typedef struct {
    rpc *self;
    int messages;
    int calls;
} closer;

static void close_on_message(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data,
                             size_t len)
{
    closer *c = ctx;
    (void)peer, (void)type, (void)data, (void)len;
    if (c->messages++ == 0)
        rpc_close(c->self);
}

static void close_in_call_cb(void *ctx, int status, const strata_err *err, const uint8_t *data,
                             size_t len)
{
    closer *c = ctx;
    (void)status, (void)err, (void)data, (void)len;
    if (c->calls++ == 0)
        rpc_close(c->self);
}

static bool closer_called(void *arg)
{
    closer *c = arg;
    return c->messages > 0 || c->calls > 0;
}

/* rpc_close from inside callbacks, with frames queued and writes in flight: nothing
 * leaks (ASan) and nothing is touched after release. */
static void test_close_from_callbacks(void **state)
{
    (void)state;
    closer cb = {0}, ca = {0};
    rpc_options bo = {.node_id = 2, .cluster_id = "c1", .listen_host = "127.0.0.1"};
    rpc_handlers bh = {.on_message = close_on_message, .on_request = on_request, .ctx = &cb};
    cb.self = rpc_open(&loop, &bo, &bh, NULL);
    assert_non_null(cb.self);
    rpc_options ao = {.node_id = 1,
                      .cluster_id = "c1",
                      .listen_host = "127.0.0.1",
                      .backoff_min_ms = 5,
                      .backoff_max_ms = 10};
    rpc_handlers ah = {0};
    ca.self = rpc_open(&loop, &ao, &ah, NULL);
    assert_non_null(ca.self);
    assert_int_equal(rpc_add_peer(ca.self, 2, "127.0.0.1", rpc_listen_port(cb.self), NULL), 0);
    /* Many frames in one batch: b closes itself on the first, mid-read. */
    static uint8_t payload[4096];
    for (int i = 0; i < 500; i++)
        assert_int_equal(rpc_send(ca.self, 2, 1, payload, sizeof payload, NULL), 0);
    /* Two calls: the first to fail (connection lost) closes a from its callback; the
     * second then fails inside that rpc_close. */
    assert_int_equal(rpc_call(ca.self, 2, 1, "x", 1, 3000, close_in_call_cb, &ca, NULL), 0);
    assert_int_equal(rpc_call(ca.self, 2, 1, "y", 1, 3000, close_in_call_cb, &ca, NULL), 0);
    assert_true(run_until(closer_called, &cb));
    assert_int_equal(cb.messages, 1);
    assert_true(run_until(closer_called, &ca));
    assert_int_equal(ca.calls, 2);
}

/* Removing a peer mid-dial, mid-backoff and while connected, then closing with frames
 * queued: no callbacks after removal, nothing leaks. */
static void test_remove_in_every_state(void **state)
{
    (void)state;
    node *a = open_node(1, "c1", 0), *b = open_node(2, "c1", 0);
    strata_err e;
    /* Mid-dial. */
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    send_seq(a, 2, 1, 100);
    assert_int_equal(rpc_remove_peer(a->r, 2, &e), 0);
    run_for(20);
    assert_int_equal(a->peer_up, 0);
    /* Mid-backoff: a port nobody listens on (node 3 does not exist). */
    node *gone = open_node(3, "c1", 0);
    int dead_port = gone->port;
    close_node(gone);
    run_for(1);
    free(gone);
    assert_int_equal(rpc_add_peer(a->r, 3, "127.0.0.1", dead_port, NULL), 0);
    run_for(20);
    rpc_peer_stats s;
    assert_int_equal(rpc_peer_stats_get(a->r, 3, &s, NULL), 0);
    assert_true(s.connect_failures >= 1);
    assert_int_equal(rpc_remove_peer(a->r, 3, &e), 0);
    /* Connected, then removed: the peer sees the connection go. */
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    peer_ref ab = {a, 2};
    assert_true(run_until(is_connected, &ab));
    msg_wait w = {b, 1};
    send_seq(a, 2, 2, 100);
    assert_true(run_until(has_msgs, &w));
    assert_int_equal(rpc_remove_peer(a->r, 2, &e), 0);
    assert_int_equal(a->peer_down, 0); /* removal is not reported as a lost connection */
    /* Queued frames at close are released. */
    assert_int_equal(rpc_add_peer(a->r, 2, "127.0.0.1", b->port, NULL), 0);
    for (int i = 0; i < 100; i++)
        send_seq(a, 2, (uint32_t)i, 4000);
    close_node(a);
    close_node(b);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handshake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_in_order_batched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_request_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_call_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnect_after_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_node_at_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_back_pressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_peer_fails_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_stream_closes_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_client_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inbound_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bidirectional, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_callbacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_in_every_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_handshake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_one_sided, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_strangers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_optional, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_rotation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
