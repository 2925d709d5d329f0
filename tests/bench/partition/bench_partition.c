/*
 * The partition state machine on the real engine, without the log or HTTP: what one
 * partition replica can apply and read per second.
 *
 *   put      partition_apply of PutItem commands (~200 B items, fresh keys)
 *   update   partition_apply of "SET n = n + :one" with a condition, on existing items
 *   get      partition_read GET of random existing keys
 *   query    partition_read QUERY pages of 100 items (one partition key, sort key range)
 *   scan     partition_read SCAN pages (1 MB) over the whole table
 *
 * Prints per operation the median ops/s over RUNS runs and latency percentiles of the
 * last run. Command encoding (partition_write_encode) is measured inside put/update,
 * as the API layer pays it too.
 *   bench_partition [items] [runs] [op]     (op: only that operation)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "cluster/partition.h"
#include "storage/lsm/lsm.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
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

static void die(const char *what, const strata_err *err)
{
    fprintf(stderr, "%s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

static av s_val(const char *s, size_t len)
{
    av v = {.type = AV_S};
    v.u.bytes.ptr = (const uint8_t *)s;
    v.u.bytes.len = (uint32_t)len;
    return v;
}

static av n_val(long long x)
{
    av v = {.type = AV_N};
    num_from_i64(x, &v.u.n);
    return v;
}

static av map2(arena *a, const char *n1, av v1, const char *n2, av v2, const char *n3, av v3)
{
    av_attr *attrs = arena_zalloc(a, 3 * sizeof *attrs);
    const char *names[3] = {n1, n2, n3};
    av vals[3] = {v1, v2, v3};
    uint32_t n = 0;
    for (int i = 0; i < 3; i++) {
        if (names[i] == NULL)
            continue;
        attrs[n].name = names[i];
        attrs[n].name_len = (uint32_t)strlen(names[i]);
        attrs[n].value = vals[i];
        n++;
    }
    av m = {.type = AV_M};
    m.u.map.attrs = attrs;
    m.u.map.count = n;
    if (av_map_sort(&m, NULL) < 0)
        die("av_map_sort", NULL);
    return m;
}

typedef struct {
    lsm *db;
    partition_desc part;
    partition_key_schema ks;
    uint64_t index;
    int items;
    char payload[160];
} bench;

/* Items: pk = "p<i / 100>" (so 100 items per partition key), sk = i % 100. */
static void key_of(int i, char *pk, size_t cap, size_t *len, long long *sk)
{
    *len = (size_t)snprintf(pk, cap, "p%08d", i / 100);
    *sk = i % 100;
}

static void apply_one(bench *b, const partition_write *w, buf *cmd, buf *res)
{
    strata_err err;
    buf_reset(cmd);
    buf_reset(res);
    if (partition_write_encode(w, cmd, &err) < 0)
        die("encode", &err);
    if (partition_apply(b->db, &b->part, cmd->data, cmd->len, ++b->index, res, &err) < 0)
        die("apply", &err);
}

typedef void (*op_fn)(bench *b, int i, arena *a, buf *cmd, buf *res);

static void op_put(bench *b, int i, arena *a, buf *cmd, buf *res)
{
    char pk[32];
    size_t len;
    long long sk;
    key_of(i, pk, sizeof pk, &len, &sk);
    av key = map2(a, "pk", s_val(pk, len), "sk", n_val(sk), NULL, (av){0});
    av item =
        map2(a, "pk", s_val(pk, len), "sk", n_val(sk), "v", s_val(b->payload, sizeof b->payload));
    partition_write w = {
        .kind = PARTITION_PUT, .table_id = 1, .ks = b->ks, .key = &key, .item = &item};
    apply_one(b, &w, cmd, res);
}

static void op_update(bench *b, int i, arena *a, buf *cmd, buf *res)
{
    i = (int)(rnd() % (uint64_t)b->items);
    char pk[32];
    size_t len;
    long long sk;
    key_of(i, pk, sizeof pk, &len, &sk);
    av key = map2(a, "pk", s_val(pk, len), "sk", n_val(sk), NULL, (av){0});
    av values = map2(a, ":one", n_val(1), ":zero", n_val(0), NULL, (av){0});
    partition_write w = {.kind = PARTITION_UPDATE,
                         .table_id = 1,
                         .ks = b->ks,
                         .key = &key,
                         .update = "SET n = if_not_exists(n, :zero) + :one",
                         .condition = "attribute_exists(pk)",
                         .values = &values,
                         .return_values = PARTITION_RETURN_UPDATED_NEW};
    apply_one(b, &w, cmd, res);
}

static void op_get(bench *b, int i, arena *a, buf *cmd, buf *res)
{
    (void)cmd;
    (void)res;
    i = (int)(rnd() % (uint64_t)b->items);
    char pk[32];
    size_t len;
    long long sk;
    key_of(i, pk, sizeof pk, &len, &sk);
    av key = map2(a, "pk", s_val(pk, len), "sk", n_val(sk), NULL, (av){0});
    partition_read_req req = {.kind = PARTITION_GET, .table_id = 1, .ks = b->ks, .key = &key};
    partition_read_res r;
    strata_err err;
    if (partition_read(b->db, &b->part, &req, a, &r, &err) < 0 || !r.found)
        die("get", &err);
}

static void op_query(bench *b, int i, arena *a, buf *cmd, buf *res)
{
    (void)cmd;
    (void)res;
    (void)i;
    int pkno = (int)(rnd() % (uint64_t)(b->items / 100));
    char pk[32];
    size_t len = (size_t)snprintf(pk, sizeof pk, "p%08d", pkno);
    av pkv = s_val(pk, len);
    partition_read_req req = {
        .kind = PARTITION_QUERY, .table_id = 1, .ks = b->ks, .hash_value = &pkv, .forward = true};
    partition_read_res r;
    strata_err err;
    if (partition_read(b->db, &b->part, &req, a, &r, &err) < 0 || r.count != 100)
        die("query", &err);
}

static int scanned_total;

static void op_scan(bench *b, int i, arena *a, buf *cmd, buf *res)
{
    (void)cmd;
    (void)res;
    (void)i;
    partition_read_req req = {
        .kind = PARTITION_SCAN, .table_id = 1, .ks = b->ks, .hash_lo = 0, .hash_hi = UINT64_MAX};
    scanned_total = 0;
    for (;;) {
        partition_read_res r;
        strata_err err;
        if (partition_read(b->db, &b->part, &req, a, &r, &err) < 0)
            die("scan", &err);
        scanned_total += (int)r.scanned_count;
        if (!r.last_evaluated_key)
            break;
        req.exclusive_start_key = r.last_evaluated_key;
    }
    if (scanned_total != b->items)
        die("scan count", NULL);
}

/* Runs `n` operations; returns ops/s and fills lat (ns per op). */
static double run(bench *b, op_fn fn, int n, uint64_t *lat)
{
    arena a;
    arena_init(&a, 0);
    buf cmd, res;
    buf_init(&cmd, 0);
    buf_init(&res, 0);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        uint64_t s = now_ns();
        fn(b, i, &a, &cmd, &res);
        lat[i] = now_ns() - s;
        if ((i & 63) == 63)
            arena_reset(&a);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    buf_free(&cmd);
    buf_free(&res);
    arena_free(&a);
    return n / secs;
}

static void report(const char *name, double *rates, int runs, uint64_t *lat, int n,
                   const char *unit)
{
    qsort(rates, (size_t)runs, sizeof *rates, cmp_double);
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    printf("%-7s %10.0f %s/s (median of %d)   p50 %6.1f us   p99 %7.1f us   max %8.1f us\n", name,
           rates[runs / 2], unit, runs, lat[n / 2] / 1e3, lat[(size_t)(n * 0.99)] / 1e3,
           lat[n - 1] / 1e3);
}

static void flush_cb(void *arg, const strata_err *err)
{
    (void)err;
    *(int *)arg = 1;
}

int main(int argc, char **argv)
{
    int items = argc > 1 ? atoi(argv[1]) : 100000;
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    const char *only = argc > 3 ? argv[3] : NULL;
    items = items / 100 * 100;
    if (items < 100 || runs < 1) {
        fprintf(stderr, "usage: bench_partition [items >= 100] [runs]\n");
        return 2;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    double rates[16];
    if (runs > 16)
        runs = 16;
    uint64_t *lat = calloc((size_t)items, sizeof *lat);

    struct {
        const char *name;
        op_fn fn;
        int n;
        const char *unit;
    } ops[] = {
        {"put", op_put, items, "ops"},
        {"update", op_update, items, "ops"},
        {"get", op_get, items, "ops"},
        {"query", op_query, items / 100 < 2000 ? items / 100 : 2000, "pages"},
        {"scan", op_scan, 1, "scans"},
    };
    printf("bench_partition: %d items of ~200 B, %d runs\n", items, runs);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        if (only && strcmp(only, ops[o].name) != 0)
            continue;
        int n = ops[o].n;
        int nruns = ops[o].fn == op_scan ? runs : runs;
        for (int r = 0; r < nruns; r++) {
            /* Every run starts from a fresh engine loaded with the items (except put). */
            char dir[64];
            snprintf(dir, sizeof dir, "/tmp/strata-bench-partition-XXXXXX");
            if (mkdtemp(dir) == NULL)
                die("mkdtemp", NULL);
            bench b = {.part = {.id = 1, .table_id = 1, .hash_lo = 0, .hash_hi = UINT64_MAX},
                       .items = items};
            memset(b.payload, 'x', sizeof b.payload);
            b.ks = (partition_key_schema){.hash_name = "pk",
                                          .hash_name_len = 2,
                                          .hash_type = AV_S,
                                          .range_name = "sk",
                                          .range_name_len = 2,
                                          .range_type = AV_N};
            lsm_options lo = {.dir = dir};
            strata_err err;
            if (lsm_open(&lo, &loop, &b.db, &err) < 0)
                die("lsm_open", &err);
            if (ops[o].fn != op_put)
                run(&b, op_put, items, lat);
            rates[r] = run(&b, ops[o].fn, n, lat);
            if (ops[o].fn == op_scan)
                rates[r] = items * rates[r]; /* report items/s for scans */
            int done = 0;
            lsm_close(b.db, flush_cb, &done);
            while (!done)
                uv_run(&loop, UV_RUN_ONCE);
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            if (system(cmd) != 0)
                die("rm", NULL);
        }
        report(ops[o].name, rates, nruns, lat, n, ops[o].fn == op_scan ? "items" : ops[o].unit);
    }
    free(lat);
    uv_loop_close(&loop);
    return 0;
}
