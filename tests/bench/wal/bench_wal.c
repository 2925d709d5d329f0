/*
 * WAL benchmark: appends/s of small entries (100-200 bytes) from 1, 8 and 64 groups,
 * each group keeping one append in flight (issuing the next when the previous completes,
 * as Raft does with pipelining off), and a variant with 4 in flight per group; compared
 * with the raw rate of a write + fdatasync loop on the same disk, measured in the same
 * run. Each configuration runs REPEAT times; medians are reported.
 *
 *   bench_wal [DIR] [SECONDS_PER_RUN] [REPEAT]     (defaults: /tmp 1.0 3)
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/wal/wal_test_util.h"

#define MAX_GROUPS   64
#define MAX_INFLIGHT 4
#define MAX_SAMPLES  (1 << 20)

typedef struct {
    double ops_per_s;
    double p50_us, p99_us;
    double ops_per_sync;
} result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double *samples;
static size_t nsamples;

static void summarize(double elapsed, size_t ops, result *r)
{
    qsort(samples, nsamples, sizeof *samples, cmp_double);
    r->ops_per_s = (double)ops / elapsed;
    r->p50_us = nsamples ? samples[nsamples / 2] * 1e6 : 0;
    r->p99_us = nsamples ? samples[nsamples * 99 / 100] * 1e6 : 0;
}

/* The raw disk: one small write then fdatasync, in a loop. `prealloc`: into a file
 * preallocated with posix_fallocate like the WAL's segments; otherwise appending to a
 * growing file (each fdatasync then also commits the new file size). */
static result raw_sync(const char *dir, double seconds, bool prealloc)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/raw-sync-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    uint8_t data[150];
    memset(data, 0xab, sizeof data);
    if (prealloc && posix_fallocate(fd, 0, 64 << 20) != 0) {
        perror("posix_fallocate");
        exit(1);
    }
    nsamples = 0;
    double start = tu_now(), end = start + seconds;
    size_t ops = 0;
    off_t off = 0;
    while (tu_now() < end) {
        double t = tu_now();
        if (pwrite(fd, data, sizeof data, off) != (ssize_t)sizeof data || fdatasync(fd) != 0) {
            perror("raw write");
            exit(1);
        }
        off += (off_t)sizeof data;
        ops++;
        if (nsamples < MAX_SAMPLES)
            samples[nsamples++] = tu_now() - t;
    }
    result r = {0};
    summarize(tu_now() - start, ops, &r);
    r.ops_per_sync = 1;
    close(fd);
    unlink(path);
    return r;
}

typedef struct bench bench;

typedef struct {
    bench *b;
    uint64_t group;
    double issued_at;
} slot;

struct bench {
    wal *w;
    uv_loop_t *loop;
    uint64_t next[MAX_GROUPS + 1];
    slot slots[MAX_GROUPS * MAX_INFLIGHT];
    double deadline;
    size_t done, outstanding;
    uint8_t payload[200];
};

static void issue(slot *s);

static void append_done(void *data, int status, const strata_err *err)
{
    slot *s = data;
    bench *b = s->b;
    if (status != 0) {
        fprintf(stderr, "append failed: %s\n", err->msg);
        exit(1);
    }
    b->done++;
    b->outstanding--;
    if (nsamples < MAX_SAMPLES)
        samples[nsamples++] = tu_now() - s->issued_at;
    if (tu_now() < b->deadline)
        issue(s);
}

static void issue(slot *s)
{
    bench *b = s->b;
    uint64_t idx = b->next[s->group]++;
    wal_entry e = {1, 1, b->payload, 100 + (size_t)(idx * 37 % 101)};
    strata_err err;
    s->issued_at = tu_now();
    if (wal_append(b->w, s->group, idx, &e, 1, append_done, s, &err) != 0) {
        fprintf(stderr, "append: %s\n", err.msg);
        exit(1);
    }
    b->outstanding++;
}

static result wal_run(const char *parent, int groups, int inflight, double seconds)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/bench-wal-XXXXXX", parent);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    static bench b;
    memset(&b, 0, sizeof b);
    memset(b.payload, 0x5a, sizeof b.payload);
    b.loop = &loop;
    wal_options o = {.dir = dir};
    strata_err err;
    if (wal_open(&o, &loop, &b.w, &err) != 0) {
        fprintf(stderr, "wal_open: %s\n", err.msg);
        exit(1);
    }
    /* Warm up: create the first segment outside the measurement. */
    for (int g = 1; g <= groups; g++)
        b.next[g] = 1;
    b.deadline = 0;
    b.slots[0] = (slot){&b, 1, 0};
    issue(&b.slots[0]);
    while (b.outstanding)
        uv_run(&loop, UV_RUN_ONCE);
    wal_stats st0;
    wal_get_stats(b.w, &st0);

    nsamples = 0;
    b.done = 0;
    double start = tu_now();
    b.deadline = start + seconds;
    for (int g = 0; g < groups; g++)
        for (int k = 0; k < inflight; k++) {
            slot *s = &b.slots[g * inflight + k];
            *s = (slot){&b, (uint64_t)g + 1, 0};
            issue(s);
        }
    while (b.outstanding)
        uv_run(&loop, UV_RUN_ONCE);
    double elapsed = tu_now() - start;
    wal_stats st;
    wal_get_stats(b.w, &st);
    result r = {0};
    summarize(elapsed, b.done, &r);
    r.ops_per_sync = (double)b.done / (double)(st.syncs - st0.syncs);
    tu_close(b.w, &loop);
    uv_loop_close(&loop);
    tu_rmdir(dir);
    return r;
}

static result median(result *rs, int n)
{
    double v[4][16];
    for (int i = 0; i < n; i++) {
        v[0][i] = rs[i].ops_per_s;
        v[1][i] = rs[i].p50_us;
        v[2][i] = rs[i].p99_us;
        v[3][i] = rs[i].ops_per_sync;
    }
    for (int k = 0; k < 4; k++)
        qsort(v[k], (size_t)n, sizeof(double), cmp_double);
    return (result){v[0][n / 2], v[1][n / 2], v[2][n / 2], v[3][n / 2]};
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    int repeat = argc > 3 ? atoi(argv[3]) : 3;
    if (repeat < 1 || repeat > 15 || seconds <= 0) {
        fprintf(stderr, "usage: bench_wal [DIR] [SECONDS_PER_RUN] [REPEAT<=15]\n");
        return 2;
    }
    samples = malloc(MAX_SAMPLES * sizeof *samples);
    const struct {
        int groups, inflight;
    } configs[] = {{1, 1}, {8, 1}, {64, 1}, {1, 4}, {8, 4}, {64, 4}};
    const int nconf = (int)(sizeof configs / sizeof configs[0]);
    result raw[16], rawp[16], runs[8][16];
    /* Interleave configurations so that a noisy moment hits all of them alike. */
    for (int r = 0; r < repeat; r++) {
        raw[r] = raw_sync(dir, seconds, false);
        rawp[r] = raw_sync(dir, seconds, true);
        for (int c = 0; c < nconf; c++)
            runs[c][r] = wal_run(dir, configs[c].groups, configs[c].inflight, seconds);
    }
    result rawm = median(raw, repeat), rawpm = median(rawp, repeat);
    printf("bench_wal: dir %s, %.1f s per run, median of %d runs, entries 100-200 bytes\n", dir,
           seconds, repeat);
    printf("ratio: ops/s over the raw write+fdatasync rate into a preallocated file (the\n"
           "WAL's own case); ratio2: over the raw rate appending to a growing file\n");
    printf("%-28s %10s %8s %8s %10s %10s %9s\n", "config", "ops/s", "ratio", "ratio2", "p50 us",
           "p99 us", "ops/sync");
    printf("%-28s %10.0f %8.2f %8.2f %10.0f %10.0f %9.1f\n", "raw fdatasync, prealloc",
           rawpm.ops_per_s, 1.0, rawpm.ops_per_s / rawm.ops_per_s, rawpm.p50_us, rawpm.p99_us, 1.0);
    printf("%-28s %10.0f %8.2f %8.2f %10.0f %10.0f %9.1f\n", "raw fdatasync, growing file",
           rawm.ops_per_s, rawm.ops_per_s / rawpm.ops_per_s, 1.0, rawm.p50_us, rawm.p99_us, 1.0);
    for (int c = 0; c < nconf; c++) {
        result m = median(runs[c], repeat);
        char name[64];
        snprintf(name, sizeof name, "wal %d group%s, %d in flight", configs[c].groups,
                 configs[c].groups > 1 ? "s" : "", configs[c].inflight);
        printf("%-28s %10.0f %8.2f %8.2f %10.0f %10.0f %9.1f\n", name, m.ops_per_s,
               m.ops_per_s / rawpm.ops_per_s, m.ops_per_s / rawm.ops_per_s, m.p50_us, m.p99_us,
               m.ops_per_sync);
    }
    free(samples);
    return 0;
}
