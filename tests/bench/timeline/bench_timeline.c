/*
 * Latency timeline: a closed-loop DynamoDB client that records every request, so that
 * WHEN slow requests happen can be seen, not only how many there are. wrk's histogram
 * says "p99 is 20 ms"; this says whether those 20 ms requests are spread evenly (the
 * queueing of a saturated machine) or come in bursts (a stall: a timeout, a flush, a
 * split, a neighbour on the host), and which keys they hit.
 *
 *   bench_timeline [options] HOST:PORT
 *     -c CONNS     connections, each with one request in flight (default 64)
 *     -d SECONDS   duration (default 5)
 *     -o put|get|strong   PutItem, GetItem, or GetItem with ConsistentRead (default put)
 *     -k KEYS      keys k000000000.. chosen at random (default 10000)
 *     -v BYTES     value size of PutItem (default 100)
 *     -t TABLE     table (default bench), hash key attribute pk (S)
 *     -i MS        interval of the timeline (default 100)
 *     -s MS        a request slower than this is "slow" (default 10)
 *     -l FILE      also log every request: start_us latency_us status key; its first line,
 *                  "# start_monotonic_us N", is when the run began on CLOCK_MONOTONIC,
 *                  the clock of `perf record -k CLOCK_MONOTONIC`, to line the two up
 *
 * Requests and keys are those of ../shared/bench/ddb-put.lua and ddb-get.lua. Output:
 * totals and percentiles, then one line per interval (requests/s of the requests that
 * started in it, p99, max, and how many were slow), then the slow requests grouped into
 * bursts (runs of slow requests less than one interval apart). Exit status 1 if any
 * request failed (connection lost or a status other than 200).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>

#define CONNS_MAX   1024
#define BODY_MAX    65536 /* of a request */
#define REQUEST_MAX (BODY_MAX + 1024)
#define VALUE_MAX   (BODY_MAX - 512)

typedef struct {
    uint32_t start_us; /* since the run began */
    uint32_t latency_us;
    uint32_t key;
    uint16_t status;
} sample;

typedef struct {
    int fd;
    uint64_t t0_us;
    uint32_t key;
    http_parser parser; /* of the response to the request in flight */
    bool done;          /* that response is complete */
} conn;

typedef struct {
    const char *target; /* host:port */
    int conns;
    double seconds;
    const char *op;
    unsigned keys;
    int value_size;
    const char *table;
    int interval_ms, slow_ms;
    const char *log_path;
} options;

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_timeline [-c CONNS] [-d SECONDS] [-o put|get|strong] "
                    "[-k KEYS] [-v BYTES] [-t TABLE] [-i MS] [-s MS] [-l FILE] HOST:PORT\n");
    exit(2);
}

static int parse_int(const char *s, int lo, int hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        usage();
    return (int)v;
}

static options parse_options(int argc, char **argv)
{
    options o = {NULL, 64, 5, "put", 10000, 100, "bench", 100, 10, NULL};
    int c;
    while ((c = getopt(argc, argv, "c:d:o:k:v:t:i:s:l:")) != -1) {
        switch (c) {
        case 'c':
            o.conns = parse_int(optarg, 1, CONNS_MAX);
            break;
        case 'd':
            o.seconds = parse_int(optarg, 1, 3600);
            break;
        case 'o':
            o.op = optarg;
            break;
        case 'k':
            o.keys = (unsigned)parse_int(optarg, 1, 1000000000);
            break;
        case 'v':
            o.value_size = parse_int(optarg, 0, VALUE_MAX);
            break;
        case 't':
            o.table = optarg;
            break;
        case 'i':
            o.interval_ms = parse_int(optarg, 1, 60000);
            break;
        case 's':
            o.slow_ms = parse_int(optarg, 1, 60000);
            break;
        case 'l':
            o.log_path = optarg;
            break;
        default:
            usage();
        }
    }
    if (optind != argc - 1 || strlen(o.table) > 255 || strlen(argv[optind]) > 300 ||
        (strcmp(o.op, "put") && strcmp(o.op, "get") && strcmp(o.op, "strong")))
        usage();
    o.target = argv[optind];
    return o;
}

static int connect_to(const char *target)
{
    char host[256];
    const char *colon = strrchr(target, ':');
    if (!colon || (size_t)(colon - target) >= sizeof host)
        usage();
    memcpy(host, target, (size_t)(colon - target));
    host[colon - target] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "bench_timeline: %s: %s\n", target, gai_strerror(rc));
        exit(2);
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        fprintf(stderr, "bench_timeline: connect %s: %s\n", target, strerror(errno));
        exit(2);
    }
    freeaddrinfo(res);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* The request for `key`, as ddb-put.lua / ddb-get.lua send it. */
static size_t format_request(const options *o, const char *value, uint32_t key, char *out)
{
    char body[BODY_MAX];
    int blen;
    const char *target;
    if (strcmp(o->op, "put") == 0) {
        target = "PutItem";
        blen = snprintf(body, sizeof body,
                        "{\"TableName\":\"%s\",\"Item\":{\"pk\":{\"S\":\"k%09u\"},"
                        "\"v\":{\"S\":\"%s\"}}}",
                        o->table, key, value);
    } else {
        target = "GetItem";
        blen = snprintf(body, sizeof body,
                        "{\"TableName\":\"%s\",\"Key\":{\"pk\":{\"S\":\"k%09u\"}}%s}", o->table,
                        key, strcmp(o->op, "strong") == 0 ? ",\"ConsistentRead\":true" : "");
    }
    int n = snprintf(out, REQUEST_MAX,
                     "POST / HTTP/1.1\r\nHost: %s\r\n"
                     "Content-Type: application/x-amz-json-1.0\r\n"
                     "X-Amz-Target: DynamoDB_20120810.%s\r\n"
                     "X-Amz-Date: 20261202T000000Z\r\n"
                     "Authorization: AWS4-HMAC-SHA256 Credential=AKID/20261202/us-east-1/"
                     "dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     o->target, target, blen, body);
    return (size_t)n;
}

static void send_request(const options *o, const char *value, conn *c)
{
    char req[REQUEST_MAX];
    c->key = (uint32_t)(random() % o->keys);
    size_t n = format_request(o, value, c->key, req);
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    c->done = false;
    c->t0_us = now_us();
    /* A small request into an empty socket buffer: one write takes it all. */
    if (write(c->fd, req, n) != (ssize_t)n) {
        fprintf(stderr, "bench_timeline: write: %s\n", strerror(errno));
        exit(1);
    }
}

static int on_message_complete(http_parser *p)
{
    ((conn *)p->data)->done = true;
    return 0;
}

/* Feeds what arrived to the connection's response parser: false if it is not HTTP. The
 * body is not kept: only the status and the time matter. */
static bool response_feed(conn *c, const char *data, size_t len)
{
    static const http_parser_settings settings = {.on_message_complete = on_message_complete};
    size_t used = http_parser_execute(&c->parser, &settings, data, len);
    return used == len && HTTP_PARSER_ERRNO(&c->parser) == HPE_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(const uint32_t *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p / 100 * (double)n);
    return sorted[i < n ? i : n - 1] / 1000.0;
}

static void print_timeline(const options *o, const sample *s, size_t n, uint64_t run_us)
{
    uint32_t step = (uint32_t)o->interval_ms * 1000u, slow = (uint32_t)o->slow_ms * 1000u;
    uint32_t *lat = malloc((n ? n : 1) * sizeof *lat);
    if (!lat) {
        perror("malloc");
        exit(1);
    }
    printf("%9s %9s %9s %9s %7s\n", "at_ms", "req/s", "p99_ms", "max_ms", "slow");
    size_t i = 0;
    for (uint64_t from = 0; from < run_us; from += step) {
        size_t k = 0, nslow = 0;
        for (; i < n && s[i].start_us < from + step; i++) {
            lat[k++] = s[i].latency_us;
            nslow += s[i].latency_us > slow;
        }
        qsort(lat, k, sizeof *lat, cmp_u32);
        printf("%9.0f %9.0f %9.2f %9.2f %7zu\n", from / 1000.0, k * 1e6 / step, pct_ms(lat, k, 99),
               k ? lat[k - 1] / 1000.0 : 0.0, nslow);
    }
    free(lat);
}

/* Slow requests less than one interval apart (by start) form one burst. */
static void print_bursts(const options *o, const sample *s, size_t n)
{
    uint32_t step = (uint32_t)o->interval_ms * 1000u, slow = (uint32_t)o->slow_ms * 1000u;
    size_t bursts = 0, total = 0;
    uint32_t first = 0, last = 0, worst = 0, count = 0;
    printf("slow requests (> %d ms) in bursts:\n", o->slow_ms);
    for (size_t i = 0; i <= n; i++) {
        bool is_slow = i < n && s[i].latency_us > slow;
        if (i < n && !is_slow)
            continue;
        if (count > 0 && (i == n || s[i].start_us - last > step)) {
            printf("  %8.1f ms .. %8.1f ms: %5u slow, worst %.2f ms\n", first / 1000.0,
                   last / 1000.0, count, worst / 1000.0);
            bursts++;
            count = 0;
        }
        if (i == n)
            break;
        if (count == 0)
            first = s[i].start_us, worst = 0;
        last = s[i].start_us;
        worst = s[i].latency_us > worst ? s[i].latency_us : worst;
        count++;
        total++;
    }
    printf("%zu slow requests in %zu bursts\n", total, bursts);
}

static int cmp_start(const void *a, const void *b)
{
    const sample *x = a, *y = b;
    return x->start_us < y->start_us ? -1 : x->start_us > y->start_us;
}

int main(int argc, char **argv)
{
    options o = parse_options(argc, argv);
    static char value[VALUE_MAX + 1];
    memset(value, 'x', (size_t)o.value_size);
    srandom((unsigned)now_us());

    size_t cap = 1 << 20, n = 0, failed = 0;
    sample *samples = malloc(cap * sizeof *samples);
    conn *conns = calloc((size_t)o.conns, sizeof *conns);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!samples || !conns || ep < 0) {
        perror("bench_timeline");
        return 1;
    }
    for (int i = 0; i < o.conns; i++) {
        conns[i].fd = connect_to(o.target);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
    }
    uint64_t start = now_us(), end = start + (uint64_t)(o.seconds * 1e6);
    for (int i = 0; i < o.conns; i++)
        send_request(&o, value, &conns[i]);
    /* Requests that start before the end are all waited for, so none is cut short. */
    int open = o.conns;
    while (open > 0) {
        struct epoll_event evs[256];
        int k = epoll_wait(ep, evs, 256, 1000);
        if (k < 0 && errno != EINTR) {
            perror("epoll_wait");
            return 1;
        }
        for (int e = 0; e < k; e++) {
            conn *c = &conns[evs[e].data.u32];
            static char in[65536];
            ssize_t r = read(c->fd, in, sizeof in);
            bool ok = r > 0 ? response_feed(c, in, (size_t)r) : r < 0 && errno == EINTR;
            if (!ok) {
                fprintf(stderr, "bench_timeline: connection %u lost or garbled\n", evs[e].data.u32);
                return 1;
            }
            if (!c->done)
                continue;
            int status = (int)c->parser.status_code;
            uint64_t t = now_us();
            if (n == cap) {
                sample *grown = realloc(samples, 2 * cap * sizeof *samples);
                if (!grown) {
                    perror("realloc");
                    return 1;
                }
                samples = grown, cap *= 2;
            }
            samples[n++] = (sample){(uint32_t)(c->t0_us - start), (uint32_t)(t - c->t0_us), c->key,
                                    (uint16_t)status};
            failed += status != 200;
            if (t < end) {
                send_request(&o, value, c);
            } else {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                open--;
            }
        }
    }
    uint64_t run_us = end - start;
    qsort(samples, n, sizeof *samples, cmp_start);
    if (o.log_path) {
        FILE *f = fopen(o.log_path, "w");
        if (!f) {
            perror(o.log_path);
            return 1;
        }
        fprintf(f, "# start_monotonic_us %" PRIu64 "\n", start);
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%u %u %u k%09u\n", samples[i].start_us, samples[i].latency_us,
                    samples[i].status, samples[i].key);
        fclose(f);
    }
    uint32_t *lat = malloc((n ? n : 1) * sizeof *lat);
    if (!lat) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        lat[i] = samples[i].latency_us;
    qsort(lat, n, sizeof *lat, cmp_u32);
    printf("%s %s, %d connections, %.0f s: %zu requests, %.0f req/s, %zu failed\n", o.op, o.target,
           o.conns, o.seconds, n, n * 1e6 / run_us, failed);
    printf("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", pct_ms(lat, n, 50),
           pct_ms(lat, n, 90), pct_ms(lat, n, 99), pct_ms(lat, n, 99.9),
           n ? lat[n - 1] / 1000.0 : 0.0);
    free(lat);
    print_timeline(&o, samples, n, run_us);
    print_bursts(&o, samples, n);
    free(samples);
    free(conns);
    return failed > 0;
}
