/*
 * Sync stalls of the machine, without Strata. WRITERS threads, each with a file of its
 * own, write 8 KiB and fdatasync at RATE syncs a second (a WAL's group commit). Three
 * phases: the writers on an otherwise idle machine ("idle"); one busy-looping thread per
 * CPU and no writes ("spin"); both at once ("busy", what a saturated closed-loop
 * benchmark does). For the writers it prints the syncs' latency (p50, p99, max), how many
 * took over 4 ms, and where those started in CLOCK_MONOTONIC's 100 ms period (ten 10 ms
 * bins). Each busy thread watches the clock and reports the gaps over 1 ms between two of
 * its readings, by where they ended: gaps that end at the same point of the period on
 * every CPU mean the whole machine was stopped (see tests/bench/cluster/README.md).
 *
 *   bench_syncstall [DIR] [SECONDS] [WRITERS] [RATE]     (defaults: /tmp 5 3 800)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES  (8u << 20) /* each writer's file, written over and over */
#define WRITE_BYTES 8192u
#define MAX_WRITERS 16
#define MAX_CPUS    64
#define SLOW_NS     4000000ull
#define PERIOD_NS   100000000ull
#define BINS        10
#define GAP_NS      1000000ull

typedef struct {
    uint64_t start_ns, took_ns;
} sample;

typedef struct {
    char path[4096];
    double seconds;
    unsigned rate;
    sample *samples;
    size_t cap, n;
    int failed_errno;
} writer;

static atomic_bool burning;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void sleep_until(uint64_t when)
{
    struct timespec t = {(time_t)(when / 1000000000ull), (long)(when % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
    }
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t k = pwrite(fd, p, len, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
        off += k;
    }
    return 0;
}

/* Fills the file first (and syncs it), so that the timed writes overwrite written blocks
 * as a WAL with preallocated segments does: its syncs then carry data, not allocation. */
static int prepare(int fd, uint8_t *buf)
{
    memset(buf, 0, WRITE_BYTES);
    for (off_t off = 0; off < (off_t)FILE_BYTES; off += WRITE_BYTES)
        if (write_all(fd, buf, WRITE_BYTES, off) != 0)
            return -1;
    return fsync(fd);
}

static void *run_writer(void *arg)
{
    writer *w = arg;
    uint8_t buf[WRITE_BYTES];
    int fd = open(w->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || prepare(fd, buf) != 0) {
        w->failed_errno = errno;
        if (fd >= 0) {
            close(fd);
            unlink(w->path);
        }
        return NULL;
    }
    memset(buf, 'x', sizeof buf);
    uint64_t step = 1000000000ull / w->rate, start = now_ns(), next = start;
    uint64_t end = start + (uint64_t)(w->seconds * 1e9);
    off_t off = 0;
    while (w->n < w->cap && next < end) {
        sleep_until(next);
        next += step;
        if (write_all(fd, buf, sizeof buf, off) != 0) {
            w->failed_errno = errno;
            break;
        }
        off = (off + (off_t)sizeof buf) % (off_t)FILE_BYTES;
        uint64_t a = now_ns();
        if (fdatasync(fd) != 0) {
            w->failed_errno = errno;
            break;
        }
        w->samples[w->n++] = (sample){a, now_ns() - a};
    }
    close(fd);
    unlink(w->path);
    return NULL;
}

/* A busy loop that also watches the clock: a gap of over GAP_NS between two readings
 * means this CPU ran something else, or the whole machine was stopped. */
typedef struct {
    uint64_t gaps, gap_ns;
    uint64_t ends[BINS]; /* gaps by where in the 100 ms period they ended */
} burner;

static void *run_burner(void *arg)
{
    burner *b = arg;
    uint64_t prev = now_ns();
    while (atomic_load_explicit(&burning, memory_order_relaxed)) {
        uint64_t t = now_ns();
        if (t - prev > GAP_NS) {
            b->gaps++;
            b->gap_ns += t - prev;
            b->ends[(t % PERIOD_NS) * BINS / PERIOD_NS]++;
        }
        prev = t;
    }
    return NULL;
}

static void report_burners(const burner *bs, unsigned n, double seconds)
{
    for (unsigned i = 0; i < n; i++) {
        printf("        busy thread %u: %4" PRIu64 " gaps over 1 ms, %6.1f ms a second; by end:", i,
               bs[i].gaps, (double)bs[i].gap_ns / 1e6 / seconds);
        for (int b = 0; b < BINS; b++)
            printf(" %d-%d:%" PRIu64, b * 10, b * 10 + 9, bs[i].ends[b]);
        printf("\n");
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *phase, writer *ws, unsigned n_writers)
{
    size_t total = 0;
    for (unsigned i = 0; i < n_writers; i++)
        total += ws[i].n;
    uint64_t *took = malloc((total ? total : 1) * sizeof *took);
    if (took == NULL) {
        fprintf(stderr, "bench_syncstall: out of memory\n");
        exit(1);
    }
    size_t k = 0, slow = 0, bins[BINS] = {0};
    for (unsigned i = 0; i < n_writers; i++)
        for (size_t j = 0; j < ws[i].n; j++) {
            const sample *s = &ws[i].samples[j];
            took[k++] = s->took_ns;
            if (s->took_ns > SLOW_NS) {
                slow++;
                bins[(s->start_ns % PERIOD_NS) * BINS / PERIOD_NS]++;
            }
        }
    qsort(took, total, sizeof *took, cmp_u64);
    double seconds = ws[0].seconds;
    printf("%-7s %6zu syncs (%5.0f/s)  p50 %5.2f ms  p99 %5.2f ms  max %6.2f ms  over 4 ms: %4zu "
           "(%.1f/s)\n",
           phase, total, (double)total / seconds, total ? (double)took[total / 2] / 1e6 : 0.0,
           total ? (double)took[total * 99 / 100] / 1e6 : 0.0,
           total ? (double)took[total - 1] / 1e6 : 0.0, slow, (double)slow / seconds);
    if (slow > 0) {
        printf("        slow syncs by start, ms into CLOCK_MONOTONIC's 100 ms period:");
        for (int b = 0; b < BINS; b++)
            printf(" %d-%d:%zu", b * 10, b * 10 + 9, bins[b]);
        printf("\n");
    }
    free(took);
}

static int run_phase(const char *phase, const char *dir, double seconds, unsigned n_writers,
                     unsigned rate, unsigned n_burners)
{
    writer ws[MAX_WRITERS];
    pthread_t wt[MAX_WRITERS], bt[MAX_CPUS];
    burner bs[MAX_CPUS];
    size_t cap = (size_t)(seconds * rate) + 16;
    atomic_store(&burning, true);
    unsigned burners = 0;
    for (; burners < n_burners; burners++) {
        bs[burners] = (burner){0};
        if (pthread_create(&bt[burners], NULL, run_burner, &bs[burners]) != 0)
            break;
    }
    int rc = 0;
    unsigned started = 0;
    if (n_writers == 0) /* the busy threads alone, for as long */
        sleep_until(now_ns() + (uint64_t)(seconds * 1e9));
    for (; started < n_writers; started++) {
        writer *w = &ws[started];
        *w = (writer){.seconds = seconds, .rate = rate, .cap = cap};
        snprintf(w->path, sizeof w->path, "%s/syncstall.%ld.%u", dir, (long)getpid(), started);
        w->samples = malloc(cap * sizeof *w->samples);
        if (w->samples == NULL || pthread_create(&wt[started], NULL, run_writer, w) != 0) {
            free(w->samples);
            rc = -1;
            break;
        }
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(wt[i], NULL);
    atomic_store(&burning, false);
    for (unsigned i = 0; i < burners; i++)
        pthread_join(bt[i], NULL);
    for (unsigned i = 0; i < started; i++)
        if (ws[i].failed_errno != 0) {
            fprintf(stderr, "bench_syncstall: %s: %s\n", ws[i].path, strerror(ws[i].failed_errno));
            rc = -1;
        }
    if (rc == 0 && started > 0)
        report(phase, ws, started);
    else if (rc == 0)
        printf("%-7s no writes\n", phase);
    if (rc == 0)
        report_burners(bs, burners, seconds);
    for (unsigned i = 0; i < started; i++)
        free(ws[i].samples);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 5.0;
    long n_writers = argc > 3 ? strtol(argv[3], NULL, 10) : 3;
    long rate = argc > 4 ? strtol(argv[4], NULL, 10) : 800;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (seconds <= 0 || seconds > 600 || n_writers < 1 || n_writers > MAX_WRITERS || rate < 1 ||
        rate > 100000 || cpus < 1) {
        fprintf(stderr,
                "usage: bench_syncstall [DIR] [SECONDS 0-600] [WRITERS 1-%d] "
                "[RATE 1-100000]\n",
                MAX_WRITERS);
        return 2;
    }
    if (cpus > MAX_CPUS)
        cpus = MAX_CPUS;
    printf("%ld writers, each write %u bytes + fdatasync at %ld/s, %.0f s a phase, in %s\n",
           n_writers, WRITE_BYTES, rate, seconds, dir);
    if (run_phase("idle", dir, seconds, (unsigned)n_writers, (unsigned)rate, 0) != 0 ||
        run_phase("spin", dir, seconds, 0, (unsigned)rate, (unsigned)cpus) != 0 ||
        run_phase("busy", dir, seconds, (unsigned)n_writers, (unsigned)rate, (unsigned)cpus) != 0)
        return 1;
    printf("(spin: one busy-looping thread per CPU, %ld, and no writes; busy: the same "
           "alongside the writers)\n",
           cpus);
    return 0;
}
