/*
 * WAL benchmark: appends/s of small entries (100-200 bytes) from 1, 8 and 64 groups,
 * each group keeping one append in flight (issuing the next when the previous completes,
 * as Raft does with pipelining off), and a variant with 4 in flight per group; compared
 * with the raw rate of a write + fdatasync loop on the same disk, measured in the same
 * run. Then an open loop: appends arriving at a fixed rate over 64 groups, with the log's
 * hold (wal.h, Group commit) at stratad's default and off. Each configuration runs REPEAT
 * times; medians are reported.
 *
 *   bench_wal [DIR] [SECONDS_PER_RUN] [REPEAT]     (defaults: /tmp 1.0 3)
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
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

/* A log in a new directory under `parent` (dir: its path), on a new loop; exits on error. */
static wal *log_open(const char *parent, unsigned hold_ops, char dir[4096], uv_loop_t *loop)
{
    snprintf(dir, 4096, "%s/bench-wal-XXXXXX", parent);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    uv_loop_init(loop);
    wal_options o = {.dir = dir, .hold_ops = hold_ops};
    wal *w;
    strata_err err;
    if (wal_open(&o, loop, &w, &err) != 0) {
        fprintf(stderr, "wal_open: %s\n", err.msg);
        exit(1);
    }
    return w;
}

static result wal_run(const char *parent, int groups, int inflight, double seconds)
{
    char dir[4096];
    uv_loop_t loop;
    static bench b;
    memset(&b, 0, sizeof b);
    memset(b.payload, 0x5a, sizeof b.payload);
    b.loop = &loop;
    b.w = log_open(parent, 0, dir, &loop);
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

/*
 * Open loop: appends arrive at a fixed rate whatever the log's speed, spread over
 * OPEN_GROUPS groups, as a node's requests arrive from many clients. Only under such a load
 * do operations wait when a batch completes, so only here can the log hold a batch: the
 * closed loops above issue their next append from the completion, and every writer was in
 * the batch that completed. Every turn of the loop releases what is due (an idle handle:
 * the loop never sleeps, so arrivals are spread to the microsecond, at the cost of a CPU).
 */
#define OPEN_GROUPS 64
#define OPEN_SLOTS  (1 << 16) /* appends in flight at most; beyond, arrivals are dropped */

typedef struct open_bench open_bench;

typedef struct {
    open_bench *b;
    double issued_at;
    bool busy;
} open_slot;

struct open_bench {
    wal *w;
    uv_idle_t tick;
    double start, deadline, rate;
    uint64_t next[OPEN_GROUPS + 1];
    uint64_t issued, dropped;
    size_t done, outstanding, cursor;
    open_slot slots[OPEN_SLOTS];
    uint8_t payload[200];
};

typedef struct {
    result r;
    double syncs_per_s, holds_per_s;
    uint64_t dropped;
} open_result;

static void open_done(void *data, int status, const strata_err *err)
{
    open_slot *s = data;
    if (status != 0) {
        fprintf(stderr, "append failed: %s\n", err->msg);
        exit(1);
    }
    s->busy = false;
    s->b->done++;
    s->b->outstanding--;
    if (nsamples < MAX_SAMPLES)
        samples[nsamples++] = tu_now() - s->issued_at;
}

static open_slot *open_free_slot(open_bench *b)
{
    for (size_t k = 0; k < OPEN_SLOTS; k++) {
        open_slot *s = &b->slots[(b->cursor + k) % OPEN_SLOTS];
        if (!s->busy) {
            b->cursor = (b->cursor + k + 1) % OPEN_SLOTS;
            return s;
        }
    }
    return NULL;
}

static void open_issue(open_bench *b)
{
    open_slot *s = open_free_slot(b);
    uint64_t group = b->issued++ % OPEN_GROUPS + 1;
    if (s == NULL) {
        b->dropped++;
        return;
    }
    uint64_t idx = b->next[group]++;
    wal_entry e = {1, 1, b->payload, 100 + (size_t)(idx * 37 % 101)};
    strata_err err;
    *s = (open_slot){b, tu_now(), true};
    if (wal_append(b->w, group, idx, &e, 1, open_done, s, &err) != 0) {
        fprintf(stderr, "append: %s\n", err.msg);
        exit(1);
    }
    b->outstanding++;
}

static void open_tick(uv_idle_t *t)
{
    open_bench *b = t->data;
    double now = tu_now();
    if (now >= b->deadline) {
        uv_idle_stop(t);
        return;
    }
    uint64_t due = (uint64_t)((now - b->start) * b->rate);
    while (b->issued < due)
        open_issue(b);
}

static open_result open_run(const char *parent, double rate, unsigned hold_ops, double seconds)
{
    char dir[4096];
    uv_loop_t loop;
    static open_bench b;
    memset(&b, 0, sizeof b);
    memset(b.payload, 0x5a, sizeof b.payload);
    b.w = log_open(parent, hold_ops, dir, &loop);
    for (int g = 1; g <= OPEN_GROUPS; g++)
        b.next[g] = 1;
    /* Warm up: create the first segment outside the measurement. */
    open_issue(&b);
    while (b.outstanding)
        uv_run(&loop, UV_RUN_ONCE);
    wal_stats st0, st;
    wal_get_stats(b.w, &st0);

    nsamples = 0;
    b.done = 0;
    b.issued = 0;
    b.rate = rate;
    b.start = tu_now();
    b.deadline = b.start + seconds;
    uv_idle_init(&loop, &b.tick);
    b.tick.data = &b;
    uv_idle_start(&b.tick, open_tick);
    while (uv_is_active((uv_handle_t *)&b.tick) || b.outstanding)
        uv_run(&loop, UV_RUN_ONCE);
    double elapsed = tu_now() - b.start;
    wal_get_stats(b.w, &st);
    uv_close((uv_handle_t *)&b.tick, NULL);
    open_result r = {.dropped = b.dropped};
    summarize(elapsed, b.done, &r.r);
    r.r.ops_per_sync = (double)b.done / (double)(st.syncs - st0.syncs);
    r.syncs_per_s = (double)(st.syncs - st0.syncs) / elapsed;
    r.holds_per_s = (double)(st.holds - st0.holds) / elapsed;
    tu_close(b.w, &loop);
    uv_loop_close(&loop);
    tu_rmdir(dir);
    return r;
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
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
    const struct {
        double rate;
        unsigned hold_ops;
    } opens[] = {{10000, 0}, {10000, 12}, {30000, 0}, {30000, 12}, {60000, 0}, {60000, 12}};
    const int nopen = (int)(sizeof opens / sizeof opens[0]);
    result raw[16], rawp[16], runs[8][16];
    static open_result open_runs[8][16];
    /* Interleave configurations so that a noisy moment hits all of them alike. */
    for (int r = 0; r < repeat; r++) {
        raw[r] = raw_sync(dir, seconds, false);
        rawp[r] = raw_sync(dir, seconds, true);
        for (int c = 0; c < nconf; c++)
            runs[c][r] = wal_run(dir, configs[c].groups, configs[c].inflight, seconds);
        for (int c = 0; c < nopen; c++)
            open_runs[c][r] = open_run(dir, opens[c].rate, opens[c].hold_ops, seconds);
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
    printf("\nopen loop: appends arriving at a fixed rate over %d groups (released at every turn\n"
           "of the loop); hold: the log's hold_ops (stratad's default 12; 0 never holds)\n",
           OPEN_GROUPS);
    printf("%-28s %10s %10s %10s %9s %9s %9s\n", "config", "ops/s", "p50 us", "p99 us", "ops/sync",
           "syncs/s", "holds/s");
    for (int c = 0; c < nopen; c++) {
        result rs[16];
        double syncs[16], holds[16];
        uint64_t dropped = 0;
        for (int r = 0; r < repeat; r++) {
            rs[r] = open_runs[c][r].r;
            syncs[r] = open_runs[c][r].syncs_per_s;
            holds[r] = open_runs[c][r].holds_per_s;
            dropped += open_runs[c][r].dropped;
        }
        result m = median(rs, repeat);
        char name[64];
        snprintf(name, sizeof name, "open %.0f/s, hold %u", opens[c].rate, opens[c].hold_ops);
        printf("%-28s %10.0f %10.0f %10.0f %9.1f %9.0f %9.0f", name, m.ops_per_s, m.p50_us,
               m.p99_us, m.ops_per_sync, median_of(syncs, repeat), median_of(holds, repeat));
        if (dropped)
            printf("  (%" PRIu64 " arrivals dropped: over %d in flight)", dropped, OPEN_SLOTS);
        printf("\n");
    }
    free(samples);
    return 0;
}
