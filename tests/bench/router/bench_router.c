/*
 * Router benchmark: acknowledged writes/s through the router (log append, group-commit
 * fdatasync, apply to the engine) with 1, 16, 64 and 256 writes kept in flight over a
 * 4-partition table, and the latency from router_write to its callback. The state
 * machine is a minimal put of a 100-byte value, so this measures the router, the log
 * and the engine, not item encoding. Each configuration runs REPEAT times; medians.
 *
 *   bench_router [DIR] [SECONDS_PER_RUN] [REPEAT]     (defaults: /tmp 1.0 3)
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/router.h"
#include "storage/lsm/lsm.h"

#define MAX_SAMPLES (1 << 21)
#define MAX_REPEAT  15

static int put_apply(struct lsm *engine, const partition_desc *p, const uint8_t *cmd, size_t len,
                     uint64_t log_index, buf *result, strata_err *err)
{
    uint8_t key[20];
    for (int i = 0; i < 4; i++)
        key[i] = (uint8_t)(p->table_id >> (24 - 8 * i));
    memcpy(key + 4, cmd, 16); /* hash (8 bytes, from the command) + 8 bytes of key */
    lsm_batch *b = lsm_batch_new();
    int rc = lsm_batch_put(b, key, sizeof key, cmd + 16, len - 16, err);
    if (rc == 0)
        rc = lsm_write(engine, b, p->id, log_index, err);
    lsm_batch_free(b);
    buf_append(result, "ok", 2);
    return rc;
}

typedef struct {
    router *r;
    uv_loop_t *loop;
    uint32_t table_id;
    uint64_t seq;
    uint64_t done;
    uint64_t deadline_ns;
    bool stopping;
    int inflight;
    double *samples;
    size_t nsamples;
} bench;

typedef struct {
    bench *b;
    uint64_t start_ns;
} op;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void submit(bench *b, op *o);

static void on_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    op *o = ctx;
    bench *b = o->b;
    (void)res;
    (void)len;
    if (err != NULL) {
        fprintf(stderr, "write failed: %s\n", err->msg);
        exit(1);
    }
    uint64_t t = now_ns();
    if (b->nsamples < MAX_SAMPLES)
        b->samples[b->nsamples++] = (double)(t - o->start_ns) / 1000.0;
    b->done++;
    b->inflight--;
    if (t < b->deadline_ns)
        submit(b, o);
    else
        free(o);
}

static void submit(bench *b, op *o)
{
    uint8_t cmd[16 + 100];
    uint64_t n = b->seq++;
    uint64_t hash = n * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 8; i++)
        cmd[i] = (uint8_t)(hash >> (56 - 8 * i));
    memcpy(cmd + 8, &n, 8);
    memset(cmd + 16, 'v', 100);
    o->b = b;
    o->start_ns = now_ns();
    strata_err err;
    if (router_write(b->r, b->table_id, hash, cmd, sizeof cmd, on_done, o, &err) < 0) {
        fprintf(stderr, "router_write: %s\n", err.msg);
        exit(1);
    }
    b->inflight++;
}

static void catalog_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    (void)res;
    (void)len;
    if (err != NULL) {
        fprintf(stderr, "create table: %s\n", err->msg);
        exit(1);
    }
    *(int *)ctx = 1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double ops_per_s, p50_us, p99_us;
} result;

static result run_once(const char *parent, int inflight, double seconds, double *samples)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bench-router-XXXXXX", parent);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    router_config cfg = {.loop = &loop, .data_dir = dir, .ops = {.apply = put_apply}};
    strata_err err;
    router *r = router_open(&cfg, &err);
    if (r == NULL) {
        fprintf(stderr, "router_open: %s\n", err.msg);
        exit(1);
    }
    table_info t;
    memset(&t, 0, sizeof t);
    t.schema.table_id = 1;
    strcpy(t.schema.name, "bench");
    t.schema.name_len = 5;
    strcpy(t.schema.hash.name, "pk");
    t.schema.hash.name_len = 2;
    t.schema.hash.type = AV_S;
    t.status = TABLE_ACTIVE;
    strcpy(t.uuid, "00000000-0000-4000-8000-000000000000");
    catalog_split_even(&t, 4, 1, NULL);
    buf rec;
    buf_init(&rec, 0);
    catalog_encode_table(&t, &rec, NULL);
    int created = 0;
    router_catalog_write(r, rec.data, rec.len, catalog_done, &created, NULL);
    while (!created)
        uv_run(&loop, UV_RUN_ONCE);
    buf_free(&rec);
    catalog_table_free(&t);

    bench b = {.r = r, .loop = &loop, .table_id = 1, .samples = samples};
    uint64_t start = now_ns();
    b.deadline_ns = start + (uint64_t)(seconds * 1e9);
    for (int i = 0; i < inflight; i++)
        submit(&b, malloc(sizeof(op)));
    while (b.inflight > 0)
        uv_run(&loop, UV_RUN_ONCE);
    double elapsed = (double)(now_ns() - start) / 1e9;
    router_close(r);
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);

    qsort(b.samples, b.nsamples, sizeof(double), cmp_double);
    result res = {
        .ops_per_s = (double)b.done / elapsed,
        .p50_us = b.nsamples ? b.samples[b.nsamples / 2] : 0,
        .p99_us = b.nsamples ? b.samples[(size_t)((double)b.nsamples * 0.99)] : 0,
    };
    return res;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    int repeat = argc > 3 ? atoi(argv[3]) : 3;
    if (seconds <= 0 || repeat < 1 || repeat > MAX_REPEAT) {
        fprintf(stderr, "usage: bench_router [DIR] [SECONDS_PER_RUN] [REPEAT<=15]\n");
        return 2;
    }
    double *samples = malloc(MAX_SAMPLES * sizeof(double));
    const int configs[] = {1, 16, 64, 256};
    printf("bench_router: dir %s, %.1f s per run, median of %d runs, 100-byte values, "
           "4 partitions\n",
           dir, seconds, repeat);
    printf("%-12s %10s %10s %10s\n", "in flight", "writes/s", "p50 us", "p99 us");
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        double ops[MAX_REPEAT], p50[MAX_REPEAT], p99[MAX_REPEAT];
        for (int i = 0; i < repeat; i++) {
            result r = run_once(dir, configs[c], seconds, samples);
            ops[i] = r.ops_per_s;
            p50[i] = r.p50_us;
            p99[i] = r.p99_us;
        }
        qsort(ops, (size_t)repeat, sizeof(double), cmp_double);
        qsort(p50, (size_t)repeat, sizeof(double), cmp_double);
        qsort(p99, (size_t)repeat, sizeof(double), cmp_double);
        printf("%-12d %10.0f %10.0f %10.0f\n", configs[c], ops[repeat / 2], p50[repeat / 2],
               p99[repeat / 2]);
    }
    free(samples);
    return 0;
}
