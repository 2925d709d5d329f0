/*
 * rpc/ throughput and latency between two endpoints on loopback, each on its own loop
 * and thread (in one process).
 *
 *   messages/s: node 1 streams N fire-and-forget messages to node 2 (queueing until the
 *               back-pressure bound, then running its loop), then a call; the call's
 *               response comes back after node 2 has handled every message (same
 *               connection, in order), so it marks the end of the stream.
 *   call RTT:   sequential calls (one outstanding), node 2 echoes the payload; p50, p99.
 *
 * Each figure is the median of `runs` repetitions (the machine is shared and noisy).
 * Usage: bench_rpc [runs=3] [messages=200000] [calls=5000]
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "rpc/rpc.h"

static atomic_ulong server_msgs;

static void server_on_message(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data,
                              size_t len)
{
    (void)ctx, (void)peer, (void)type, (void)data, (void)len;
    atomic_fetch_add_explicit(&server_msgs, 1, memory_order_relaxed);
}

static void server_on_request(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data,
                              size_t len, rpc_responder *r)
{
    (void)ctx, (void)peer, (void)type;
    rpc_respond(r, data, len, NULL);
}

typedef struct {
    uv_loop_t loop;
    uv_async_t stop;
    rpc *r;
} server;

static void on_stop(uv_async_t *a)
{
    server *s = a->data;
    rpc_close(s->r);
    uv_close((uv_handle_t *)&s->stop, NULL);
}

static void server_thread(void *arg)
{
    server *s = arg;
    uv_run(&s->loop, UV_RUN_DEFAULT);
}

typedef struct {
    int done;
    int status;
    uint64_t t_end;
} call_state;

static void on_call(void *ctx, int status, const strata_err *err, const uint8_t *data, size_t len)
{
    (void)err, (void)data, (void)len;
    call_state *c = ctx;
    c->done = 1;
    c->status = status;
    c->t_end = uv_hrtime();
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void wait_call(uv_loop_t *loop, call_state *c)
{
    while (!c->done)
        uv_run(loop, UV_RUN_ONCE);
    if (c->status != 0) {
        fprintf(stderr, "bench_rpc: call failed\n");
        exit(1);
    }
}

/* Streams n messages of `size` bytes; returns messages per second. */
static double run_stream(uv_loop_t *loop, rpc *r, size_t size, unsigned long n)
{
    uint8_t *payload = calloc(1, size);
    unsigned long before = atomic_load(&server_msgs);
    uint64_t t0 = uv_hrtime();
    unsigned long sent = 0;
    while (sent < n) {
        while (sent < n && rpc_send(r, 2, 1, payload, size, NULL) == 0)
            sent++;
        uv_run(loop, UV_RUN_ONCE);
    }
    call_state c = {0};
    rpc_call(r, 2, 1, "end", 3, 60000, on_call, &c, NULL);
    wait_call(loop, &c);
    double secs = (double)(c.t_end - t0) / 1e9;
    if (atomic_load(&server_msgs) - before != n) {
        fprintf(stderr, "bench_rpc: lost messages\n");
        exit(1);
    }
    free(payload);
    return (double)n / secs;
}

static void run_calls(uv_loop_t *loop, rpc *r, size_t size, int n, double *p50, double *p99)
{
    uint8_t *payload = calloc(1, size);
    uint64_t *lat = malloc(sizeof *lat * (size_t)n);
    for (int i = 0; i < n; i++) {
        call_state c = {0};
        uint64_t t0 = uv_hrtime();
        if (rpc_call(r, 2, 1, payload, size, 10000, on_call, &c, NULL) != 0) {
            fprintf(stderr, "bench_rpc: rpc_call failed\n");
            exit(1);
        }
        wait_call(loop, &c);
        lat[i] = c.t_end - t0;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    *p50 = (double)lat[n / 2] / 1e3;
    *p99 = (double)lat[(size_t)n * 99 / 100] / 1e3;
    free(lat);
    free(payload);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 3;
    unsigned long msgs = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
    int calls = argc > 3 ? atoi(argv[3]) : 5000;
    if (runs < 1 || runs > 50 || msgs == 0 || calls < 1) {
        fprintf(stderr, "usage: bench_rpc [runs] [messages] [calls]\n");
        return 2;
    }
    strata_err err;
    server s;
    uv_loop_init(&s.loop);
    rpc_options so = {.node_id = 2, .cluster_id = "bench", .listen_host = "127.0.0.1"};
    rpc_handlers sh = {.on_message = server_on_message, .on_request = server_on_request};
    s.r = rpc_open(&s.loop, &so, &sh, &err);
    if (s.r == NULL) {
        fprintf(stderr, "bench_rpc: %s\n", err.msg);
        return 1;
    }
    int port = rpc_listen_port(s.r);
    uv_async_init(&s.loop, &s.stop, on_stop);
    s.stop.data = &s;
    uv_thread_t tid;
    uv_thread_create(&tid, server_thread, &s);

    uv_loop_t loop;
    uv_loop_init(&loop);
    rpc_options co = {.node_id = 1,
                      .cluster_id = "bench",
                      .listen_host = "127.0.0.1",
                      .max_queued_bytes = 8u << 20};
    rpc_handlers ch = {0};
    rpc *c = rpc_open(&loop, &co, &ch, &err);
    if (c == NULL || rpc_add_peer(c, 2, "127.0.0.1", port, &err) != 0) {
        fprintf(stderr, "bench_rpc: %s\n", err.msg);
        return 1;
    }
    call_state warm = {0};
    rpc_call(c, 2, 1, "hi", 2, 10000, on_call, &warm, NULL);
    wait_call(&loop, &warm);

    static const size_t sizes[] = {100, 4096};
    printf("bench_rpc: %d runs (medians), %lu messages, %d sequential calls, loopback\n", runs,
           msgs, calls);
    for (size_t si = 0; si < 2; si++) {
        size_t size = sizes[si];
        double *tput = malloc(sizeof(double) * (size_t)runs);
        double *p50 = malloc(sizeof(double) * (size_t)runs);
        double *p99 = malloc(sizeof(double) * (size_t)runs);
        for (int i = 0; i < runs; i++) {
            tput[i] = run_stream(&loop, c, size, size > 1000 ? msgs / 4 : msgs);
            run_calls(&loop, c, size, calls, &p50[i], &p99[i]);
        }
        double mps = median(tput, runs);
        printf("payload %5zu B: send %10.0f msg/s (%7.1f MB/s)   call RTT p50 %7.1f us  p99 "
               "%7.1f us\n",
               size, mps, mps * (double)(size + 32) / 1e6, median(p50, runs), median(p99, runs));
        free(tput);
        free(p50);
        free(p99);
    }
    rpc_peer_stats st;
    if (rpc_peer_stats_get(c, 2, &st, NULL) == 0)
        printf("frames sent %llu in %llu writes (%.1f frames/write)\n",
               (unsigned long long)st.frames_sent, (unsigned long long)st.writes,
               (double)st.frames_sent / (double)(st.writes ? st.writes : 1));
    rpc_close(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    uv_async_send(&s.stop);
    uv_thread_join(&tid);
    uv_loop_close(&s.loop);
    return 0;
}
