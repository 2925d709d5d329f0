/*
 * bench_lsm: the Strata LSM engine side by side with RocksDB (C API, benchmark only) on
 * the same workload and equivalent settings: RocksDB's WAL off (the engine has none), lz4,
 * 4 KiB blocks, 10-bit bloom filters, 64 MiB memtables (two at most), a 256 MiB level 1
 * and the same block cache size.
 *
 * Phases, each engine in its own child process (so peak RSS is its own):
 *   fill   N random-order puts (16-byte keys, 100-byte values), then a flush
 *   read   N/2 random point reads of existing keys (latency percentiles too)
 *   seek   10k range scans: seek to a random key, read the next 100
 *   scan   one full forward scan
 *   rmw    N/2 read-modify-writes of random existing keys: a get, then a put of the key
 *          (what a PutItem's apply does: it reads the old item first)
 * Each run repeats `runs` times; medians are printed, then the ratios engine/RocksDB.
 *
 * Usage: bench_lsm [keys (1000000)] [runs (3)] [cache MiB (64)] [dir (/tmp)]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "storage/lsm/lsm.h"

#define KEY_LEN 16
#define VAL_LEN 100
#define MiB     (1024u * 1024)

typedef struct {
    double fill, read, seek, scan, rmw; /* ops/s */
    double read_p50, read_p99;     /* microseconds */
    double rss_mib;
    double bound_mib; /* engine only: configured memory bound */
} result;

static uint64_t nkeys = 1000000;
static size_t cache_mib = 64;
static const char *base_dir = "/tmp";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Key i: 16 hex digits of a bijective mix of i, so random order with no duplicates. */
static void make_key(uint64_t i, char *k)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t x = mix(i + 1);
    for (int j = 15; j >= 0; j--) {
        k[j] = hex[x & 15];
        x >>= 4;
    }
}

/* Half compressible, like db_bench's default 0.5 compression ratio. */
static void make_value(uint64_t i, char *v)
{
    uint64_t x = mix(i ^ 0x5555);
    for (int j = 0; j < VAL_LEN / 2; j++) {
        v[j] = (char)('a' + (x % 26));
        x = mix(x + (uint64_t)j);
    }
    memset(v + VAL_LEN / 2, 'x', VAL_LEN - VAL_LEN / 2);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *lat, size_t n, double p)
{
    qsort(lat, n, sizeof *lat, cmp_double);
    return lat[(size_t)((double)(n - 1) * p)];
}

/* ---- Strata engine ---- */
static void done_cb(void *arg, const strata_err *err)
{
    if (err->code != ERR_NONE) {
        fprintf(stderr, "lsm: %s\n", err->msg);
        exit(1);
    }
    *(bool *)arg = true;
}

static void run_until(uv_loop_t *loop, bool *flag)
{
    while (!*flag)
        uv_run(loop, UV_RUN_ONCE);
}

/* Puts k -> v as log index `index`, waiting while the engine pushes back (ERR_BUSY). */
static void put_waiting(uv_loop_t *loop, lsm *db, lsm_batch *b, const char *k, const char *v,
                        uint64_t index)
{
    strata_err err;
    lsm_batch_clear(b);
    lsm_batch_put(b, k, KEY_LEN, v, VAL_LEN, &err);
    while (lsm_write(db, b, 1, index, &err) < 0) {
        if (err.code != ERR_BUSY) {
            fprintf(stderr, "lsm_write: %s\n", err.msg);
            exit(1);
        }
        bool ok = false;
        lsm_on_writable(db, done_cb, &ok);
        run_until(loop, &ok);
    }
    if ((index & 1023) == 0)
        uv_run(loop, UV_RUN_NOWAIT); /* let finished jobs install */
}

static void bench_strata(const char *dir, result *r)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    lsm_options o = {.dir = dir,
                     .memtable_bytes = 64 * MiB,
                     .level1_bytes = 256 * MiB, /* RocksDB's max_bytes_for_level_base */
                     .max_memtables = 2,
                     .block_cache_bytes = cache_mib * MiB,
                     .bloom_bits_per_key = 10,
                     .block_bytes = 4096};
    lsm *db;
    strata_err err;
    if (lsm_open(&o, &loop, &db, &err) < 0) {
        fprintf(stderr, "lsm_open: %s\n", err.msg);
        exit(1);
    }
    char k[KEY_LEN], v[VAL_LEN];
    lsm_batch *b = lsm_batch_new();
    double t0 = now();
    for (uint64_t i = 0; i < nkeys; i++) {
        make_key(i, k);
        make_value(i, v);
        put_waiting(&loop, db, b, k, v, i + 1);
    }
    bool flushed = false;
    lsm_flush(db, done_cb, &flushed);
    run_until(&loop, &flushed);
    r->fill = (double)nkeys / (now() - t0);
    lsm_batch_free(b);

    /* Let background compaction settle so reads see a steady shape. */
    bool compacted = false;
    lsm_compact(db, done_cb, &compacted);
    run_until(&loop, &compacted);

    uint64_t nread = nkeys / 2;
    double *lat = malloc(nread * sizeof *lat);
    buf val;
    buf_init(&val, 0);
    t0 = now();
    for (uint64_t i = 0; i < nread; i++) {
        make_key(mix(i * 7 + 3) % nkeys, k);
        double s = now();
        if (lsm_get(db, NULL, k, KEY_LEN, &val, &err) != 1 || val.len != VAL_LEN) {
            fprintf(stderr, "lsm_get: missing key\n");
            exit(1);
        }
        lat[i] = (now() - s) * 1e6;
    }
    r->read = (double)nread / (now() - t0);
    r->read_p50 = percentile(lat, nread, 0.5);
    r->read_p99 = percentile(lat, nread, 0.99);
    free(lat);
    buf_free(&val);

    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    uint64_t n = 0;
    t0 = now();
    for (int s = 0; s < 10000; s++) {
        make_key(mix((uint64_t)s) % nkeys, k);
        lsm_iter_seek(it, k, KEY_LEN);
        for (int j = 0; j < 100 && lsm_iter_valid(it); j++, n++)
            lsm_iter_next(it);
    }
    r->seek = (double)n / (now() - t0);
    n = 0;
    t0 = now();
    size_t total = 0;
    for (lsm_iter_first(it); lsm_iter_valid(it); lsm_iter_next(it), n++) {
        size_t vl;
        lsm_iter_value(it, &vl);
        total += vl;
    }
    r->scan = (double)n / (now() - t0);
    if (n != nkeys || total != nkeys * VAL_LEN) {
        fprintf(stderr, "lsm scan: %" PRIu64 " keys\n", n);
        exit(1);
    }
    lsm_iter_free(it);

    uint64_t nrmw = nkeys / 2;
    b = lsm_batch_new();
    buf_init(&val, 0);
    t0 = now();
    for (uint64_t i = 0; i < nrmw; i++) {
        make_key(mix(i * 11 + 5) % nkeys, k);
        if (lsm_get(db, NULL, k, KEY_LEN, &val, &err) != 1 || val.len != VAL_LEN) {
            fprintf(stderr, "lsm_get: missing key\n");
            exit(1);
        }
        val.data[0] ^= 1;
        put_waiting(&loop, db, b, k, (const char *)val.data, nkeys + i + 1);
    }
    r->rmw = (double)nrmw / (now() - t0);
    lsm_batch_free(b);
    buf_free(&val);
    lsm_stats st;
    lsm_get_stats(db, &st);
    r->bound_mib = (double)(2 * o.memtable_bytes + o.block_cache_bytes + st.table_meta_bytes) / MiB;
    bool closed = false;
    lsm_close(db, done_cb, &closed);
    run_until(&loop, &closed);
    uv_loop_close(&loop);
}

/* ---- RocksDB ---- */
static void check(char *e, const char *what)
{
    if (e) {
        fprintf(stderr, "rocksdb %s: %s\n", what, e);
        exit(1);
    }
}

/* The value of k, which must exist (VAL_LEN bytes); the caller frees it. */
static char *rocks_get_existing(rocksdb_t *db, rocksdb_readoptions_t *ro, const char *k)
{
    char *e = NULL;
    size_t vl;
    char *val = rocksdb_get(db, ro, k, KEY_LEN, &vl, &e);
    check(e, "get");
    if (val == NULL || vl != VAL_LEN) {
        fprintf(stderr, "rocksdb_get: missing key\n");
        exit(1);
    }
    return val;
}

static void bench_rocks(const char *dir, result *r)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_compression(o, rocksdb_lz4_compression);
    rocksdb_options_set_write_buffer_size(o, 64 * MiB);
    rocksdb_options_set_max_write_buffer_number(o, 2);
    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_cache_t *cache = rocksdb_cache_create_lru(cache_mib * MiB);
    rocksdb_block_based_options_set_block_cache(t, cache);
    rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom(10));
    rocksdb_block_based_options_set_block_size(t, 4096);
    rocksdb_options_set_block_based_table_factory(o, t);
    char *e = NULL;
    rocksdb_t *db = rocksdb_open(o, dir, &e);
    check(e, "open");
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(wo, 1);
    char k[KEY_LEN], v[VAL_LEN];
    double t0 = now();
    for (uint64_t i = 0; i < nkeys; i++) {
        make_key(i, k);
        make_value(i, v);
        rocksdb_put(db, wo, k, KEY_LEN, v, VAL_LEN, &e);
        check(e, "put");
    }
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    rocksdb_flush(db, fo, &e);
    check(e, "flush");
    r->fill = (double)nkeys / (now() - t0);
    rocksdb_compact_range(db, NULL, 0, NULL, 0);

    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    uint64_t nread = nkeys / 2;
    double *lat = malloc(nread * sizeof *lat);
    t0 = now();
    for (uint64_t i = 0; i < nread; i++) {
        make_key(mix(i * 7 + 3) % nkeys, k);
        double s = now();
        rocksdb_free(rocks_get_existing(db, ro, k));
        lat[i] = (now() - s) * 1e6;
    }
    r->read = (double)nread / (now() - t0);
    r->read_p50 = percentile(lat, nread, 0.5);
    r->read_p99 = percentile(lat, nread, 0.99);
    free(lat);

    rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
    uint64_t n = 0;
    t0 = now();
    for (int s = 0; s < 10000; s++) {
        make_key(mix((uint64_t)s) % nkeys, k);
        rocksdb_iter_seek(it, k, KEY_LEN);
        for (int j = 0; j < 100 && rocksdb_iter_valid(it); j++, n++)
            rocksdb_iter_next(it);
    }
    r->seek = (double)n / (now() - t0);
    n = 0;
    size_t total = 0;
    t0 = now();
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it), n++) {
        size_t vl;
        rocksdb_iter_value(it, &vl);
        total += vl;
    }
    r->scan = (double)n / (now() - t0);
    if (n != nkeys || total != nkeys * VAL_LEN) {
        fprintf(stderr, "rocksdb scan: %" PRIu64 " keys\n", n);
        exit(1);
    }
    rocksdb_iter_destroy(it);

    uint64_t nrmw = nkeys / 2;
    t0 = now();
    for (uint64_t i = 0; i < nrmw; i++) {
        make_key(mix(i * 11 + 5) % nkeys, k);
        char *old = rocks_get_existing(db, ro, k);
        old[0] ^= 1;
        rocksdb_put(db, wo, k, KEY_LEN, old, VAL_LEN, &e);
        check(e, "put");
        rocksdb_free(old);
    }
    r->rmw = (double)nrmw / (now() - t0);
    rocksdb_readoptions_destroy(ro);
    rocksdb_flushoptions_destroy(fo);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);
    rocksdb_block_based_options_destroy(t);
    rocksdb_cache_destroy(cache);
}

/* Runs one engine in a child; returns its results with the child's peak RSS. */
static result run_child(bool strata, int run)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bench_lsm.%d.%s.%d", base_dir, (int)getpid(),
             strata ? "strata" : "rocks", run);
    int p[2];
    if (pipe(p) < 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        result r = {0};
        if (strata)
            bench_strata(dir, &r);
        else
            bench_rocks(dir, &r);
        if (write(p[1], &r, sizeof r) != sizeof r)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    result r = {0};
    ssize_t got = read(p[0], &r, sizeof r);
    close(p[0]);
    int status;
    struct rusage ru;
    wait4(pid, &status, 0, &ru);
    if (got != sizeof r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s run failed\n", strata ? "strata" : "rocksdb");
        exit(1);
    }
    r.rss_mib = (double)ru.ru_maxrss / 1024.0;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return r;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return x[n / 2];
}

#define FIELDS ((int)(sizeof(result) / sizeof(double))) /* every field is a double */
static void medians(result *rs, int n, result *out)
{
    double tmp[64];
    for (int f = 0; f < FIELDS; f++) {
        for (int i = 0; i < n; i++)
            tmp[i] = ((double *)&rs[i])[f];
        ((double *)out)[f] = median(tmp, n);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1)
        nkeys = strtoull(argv[1], NULL, 10);
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    if (argc > 3)
        cache_mib = strtoull(argv[3], NULL, 10);
    if (argc > 4)
        base_dir = argv[4];
    if (runs < 1 || runs > 64 || nkeys < 1000)
        return 2;
    result s[64], r[64], ms, mr;
    for (int i = 0; i < runs; i++) {
        s[i] = run_child(true, i);
        r[i] = run_child(false, i);
        fprintf(stderr,
                "run %d: strata fill %.0f read %.0f seek %.0f scan %.0f rmw %.0f | rocksdb "
                "fill %.0f read %.0f seek %.0f scan %.0f rmw %.0f\n",
                i, s[i].fill, s[i].read, s[i].seek, s[i].scan, s[i].rmw, r[i].fill, r[i].read,
                r[i].seek, r[i].scan, r[i].rmw);
    }
    medians(s, runs, &ms);
    medians(r, runs, &mr);
    printf("bench_lsm: %" PRIu64 " keys, %d-byte keys, %d-byte values, %zu MiB block cache, "
           "median of %d runs\n",
           nkeys, KEY_LEN, VAL_LEN, cache_mib, runs);
    printf("%-22s %14s %14s %8s\n", "", "strata", "rocksdb", "ratio");
    printf("%-22s %14.0f %14.0f %8.2f\n", "fill random (ops/s)", ms.fill, mr.fill,
           ms.fill / mr.fill);
    printf("%-22s %14.0f %14.0f %8.2f\n", "read random (ops/s)", ms.read, mr.read,
           ms.read / mr.read);
    printf("%-22s %14.2f %14.2f\n", "read p50 (us)", ms.read_p50, mr.read_p50);
    printf("%-22s %14.2f %14.2f\n", "read p99 (us)", ms.read_p99, mr.read_p99);
    printf("%-22s %14.0f %14.0f %8.2f\n", "seek+100 next (keys/s)", ms.seek, mr.seek,
           ms.seek / mr.seek);
    printf("%-22s %14.0f %14.0f %8.2f\n", "full scan (keys/s)", ms.scan, mr.scan,
           ms.scan / mr.scan);
    printf("%-22s %14.0f %14.0f %8.2f\n", "get+put (ops/s)", ms.rmw, mr.rmw, ms.rmw / mr.rmw);
    printf("%-22s %14.1f %14.1f %8.2f\n", "peak RSS (MiB)", ms.rss_mib, mr.rss_mib,
           ms.rss_mib / mr.rss_mib);
    printf("%-22s %14.1f\n", "strata bound (MiB)", ms.bound_mib);
    return 0;
}
