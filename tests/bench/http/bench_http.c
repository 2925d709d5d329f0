/*
 * HTTP server benchmark.
 *
 *   bench_http [-s SECONDS] [-r RUNS] [-c LIST] [-i IDLE_CONNS] [-w WRK]
 *
 * 1. Throughput and latency: the server (trivial handler answering a small DynamoDB-like
 *    JSON body with x-amz-crc32) runs in a thread; wrk drives it with 1, 16 and 64
 *    keep-alive connections (default), RUNS times each; the median requests/s, p50 and
 *    p99 over the runs are printed (the machine is shared and noisy).
 * 2. Memory per idle connection: IDLE_CONNS clients (default 5000) each send one request,
 *    read the answer and stay open; the process RSS before and after, divided by the
 *    count, is the server's cost per idle keep-alive connection (client sockets cost
 *    only kernel memory).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "node/http/http.h"

static const char body[] = "{\"Item\":{\"pk\":{\"S\":\"user#1\"},\"n\":{\"N\":\"42\"}}}";
static char body_crc[16];

typedef struct {
    uv_loop_t loop;
    uv_async_t async;
    http_server *srv;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int op; /* 1 = read stats, 2 = stop */
    bool op_done;
    http_server_stats stats;
} bench;

static void handler(http_request *req, void *data)
{
    (void)data;
    http_header hs[] = {
        {"Content-Type", "application/x-amz-json-1.0"},
        {"x-amzn-RequestId", "BENCH0000000000000000000000000000000000000000000000"},
        {"x-amz-crc32", body_crc},
    };
    http_respond(req, 200, hs, 3, body, sizeof body - 1);
}

static void on_async(uv_async_t *a)
{
    bench *b = a->data;
    pthread_mutex_lock(&b->mu);
    int op = b->op;
    pthread_mutex_unlock(&b->mu);
    if (op == 1) {
        http_server_get_stats(b->srv, &b->stats);
    } else if (op == 2) {
        http_server_stop(b->srv, NULL, NULL);
        uv_close((uv_handle_t *)&b->async, NULL);
    }
    pthread_mutex_lock(&b->mu);
    b->op = 0;
    b->op_done = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void call(bench *b, int op)
{
    pthread_mutex_lock(&b->mu);
    b->op = op;
    b->op_done = false;
    pthread_mutex_unlock(&b->mu);
    uv_async_send(&b->async);
    pthread_mutex_lock(&b->mu);
    while (!b->op_done)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

static void *loop_main(void *arg)
{
    bench *b = arg;
    uv_run(&b->loop, UV_RUN_DEFAULT);
    return NULL;
}

static double to_ms(double v, const char *unit)
{
    if (strcmp(unit, "us") == 0)
        return v / 1000.0;
    if (strcmp(unit, "s") == 0)
        return v * 1000.0;
    return v; /* ms */
}

typedef struct {
    double rps, p50, p99;
    double cpu_us; /* server loop thread CPU time per request */
} wrk_result;

static double thread_cpu_us(pthread_t t)
{
    clockid_t id;
    struct timespec ts;
    if (pthread_getcpuclockid(t, &id) != 0 || clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int run_wrk(const char *wrk, int port, int conns, int seconds, wrk_result *out)
{
    char cmd[512];
    int threads = conns < 2 ? 1 : 2;
    snprintf(cmd, sizeof cmd, "%s -t%d -c%d -d%ds --latency http://127.0.0.1:%d/ 2>&1", wrk,
             threads, conns, seconds, port);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    char line[512];
    memset(out, 0, sizeof *out);
    while (fgets(line, sizeof line, p) != NULL) {
        double v;
        char unit[8];
        if (sscanf(line, "Requests/sec: %lf", &v) == 1)
            out->rps = v;
        else if (sscanf(line, " 50%% %lf%7s", &v, unit) == 2)
            out->p50 = to_ms(v, unit);
        else if (sscanf(line, " 99%% %lf%7s", &v, unit) == 2)
            out->p99 = to_ms(v, unit);
    }
    return pclose(p) == 0 && out->rps > 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = -1;
    fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

static int connect_and_request(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static const char req[] = "GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0 ||
        send(fd, req, sizeof req - 1, 0) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return -1;
    }
    char buf[1024];
    size_t have = 0;
    while (memmem(buf, have, body, sizeof body - 1) == NULL) {
        ssize_t n = recv(fd, buf + have, sizeof buf - have, 0);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        have += (size_t)n;
    }
    return fd;
}

static void idle_memory(bench *b, int port, int n)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)(2 * n + 64) && rl.rlim_max >= (rlim_t)(2 * n + 64)) {
        rl.rlim_cur = (rlim_t)(2 * n + 64);
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int *fds = calloc((size_t)n, sizeof *fds);
    /* Warm up: one connection cycle, so lazily built tables are not counted. */
    int w = connect_and_request(port);
    if (w >= 0)
        close(w);
    long before = rss_bytes();
    int opened = 0;
    for (; opened < n; opened++) {
        fds[opened] = connect_and_request(port);
        if (fds[opened] < 0) {
            fprintf(stderr, "idle: connection %d failed: %s\n", opened, strerror(errno));
            break;
        }
    }
    call(b, 1);
    long after = rss_bytes();
    printf("idle connections: %d open (server counts %llu), RSS %+.1f MiB, %.0f bytes per "
           "connection\n",
           opened, (unsigned long long)b->stats.connections_open,
           (double)(after - before) / (1024.0 * 1024.0),
           opened ? (double)(after - before) / opened : 0.0);
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    free(fds);
}

int main(int argc, char **argv)
{
    int seconds = 3, runs = 3, idle = 5000;
    const char *wrk = "/usr/bin/wrk";
    const char *conn_list = "1,16,64";
    int opt;
    while ((opt = getopt(argc, argv, "s:r:c:i:w:")) != -1) {
        switch (opt) {
        case 's':
            seconds = atoi(optarg);
            break;
        case 'r':
            runs = atoi(optarg);
            break;
        case 'c':
            conn_list = optarg;
            break;
        case 'i':
            idle = atoi(optarg);
            break;
        case 'w':
            wrk = optarg;
            break;
        default:
            fprintf(stderr, "usage: %s [-s SECONDS] [-r RUNS] [-c 1,16,64] [-i IDLE] [-w WRK]\n",
                    argv[0]);
            return 2;
        }
    }
    snprintf(body_crc, sizeof body_crc, "%u", (unsigned)http_crc32(body, sizeof body - 1));

    static bench b;
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    uv_loop_init(&b.loop);
    uv_async_init(&b.loop, &b.async, on_async);
    b.async.data = &b;
    http_server_options o;
    http_server_options_default(&o);
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_connections = (unsigned)idle + 1024;
    o.handler = handler;
    strata_err err;
    if (http_server_start(&b.loop, &o, &b.srv, &err) != 0) {
        fprintf(stderr, "start: %s\n", err.msg);
        return 1;
    }
    int port = http_server_port(b.srv);
    pthread_create(&b.thread, NULL, loop_main, &b);

    if (idle > 0)
        idle_memory(&b, port, idle);

    if (runs > 0) {
        printf("%-6s %12s %10s %10s %12s   (median of %d runs of %d s; wrk --latency)\n", "conns",
               "req/s", "p50 ms", "p99 ms", "srv cpu us/r", runs, seconds);
        char list[128];
        snprintf(list, sizeof list, "%s", conn_list);
        for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
            int conns = atoi(tok);
            double rps[32], p50[32], p99[32];
            int ok = 0;
            double cpu[32];
            for (int r = 0; r < runs && r < 32; r++) {
                wrk_result res;
                call(&b, 1);
                uint64_t req0 = b.stats.requests_total;
                double cpu0 = thread_cpu_us(b.thread);
                if (run_wrk(wrk, port, conns, seconds, &res) != 0) {
                    fprintf(stderr, "wrk failed (is %s installed?)\n", wrk);
                    continue;
                }
                double cpu1 = thread_cpu_us(b.thread);
                call(&b, 1);
                uint64_t nreq = b.stats.requests_total - req0;
                rps[ok] = res.rps;
                p50[ok] = res.p50;
                p99[ok] = res.p99;
                cpu[ok] = nreq ? (cpu1 - cpu0) / (double)nreq : 0;
                ok++;
            }
            if (ok > 0)
                printf("%-6d %12.0f %10.3f %10.3f %12.2f\n", conns, median(rps, ok),
                       median(p50, ok), median(p99, ok), median(cpu, ok));
        }
    }
    call(&b, 2);
    pthread_join(b.thread, NULL);
    uv_loop_close(&b.loop);
    return 0;
}
