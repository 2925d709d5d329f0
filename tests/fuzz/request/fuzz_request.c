/*
 * libFuzzer harness over whole DynamoDB requests: the input bytes are what a client
 * sends on one connection; they go through the socket-free HTTP connection core
 * (node/http/http_conn.h) into the real API handler (api_handle) and a real router,
 * engine and log in a temporary directory under /dev/shm (fsync there is cheap).
 *
 * Each input runs on a fresh connection: bytes are fed while the core wants them, then
 * EOF; the uv loop runs until every response is written and the connection finished.
 * A connection that is not finished within HANG_DEADLINE_MS of the last input byte is a
 * hang and aborts. One table ("fuzz", hash key pk S, range key sk N) exists before every
 * input (it is re-created if an input deleted it), so item operations reach the
 * partition state machine.
 *
 * Every response must be a well-formed status line. With STRATA_FUZZ_NO_500=1 in the
 * environment, a 500 answer aborts too (an internal error is a bug for any input);
 * STRATA_FUZZ_VERBOSE=1 prints every response's status line and the start of its body.
 */
#include <ftw.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "cluster/catalog.h"
#include "cluster/partition.h"
#include "cluster/router.h"
#include "node/api.h"
#include "node/http/http_conn.h"

#define HANG_DEADLINE_MS 10000
#define FEED_CHUNK       4096
#define FUZZ_TABLE       "fuzz"

static const char create_fuzz_table_body[] =
    "{\"TableName\":\"" FUZZ_TABLE "\",\"BillingMode\":\"PAY_PER_REQUEST\","
    "\"AttributeDefinitions\":[{\"AttributeName\":\"pk\",\"AttributeType\":\"S\"},"
    "{\"AttributeName\":\"sk\",\"AttributeType\":\"N\"}],\"KeySchema\":[{\"AttributeName\":"
    "\"pk\",\"KeyType\":\"HASH\"},{\"AttributeName\":\"sk\",\"KeyType\":\"RANGE\"}]}";

/* One client connection. */
typedef struct {
    http_conn c;
    bool write_pending;
    size_t responses;
} client;

static struct {
    bool ready;
    bool strict_500;
    bool verbose;
    char dir[64];
    uv_loop_t loop;
    uv_timer_t deadline;
    bool expired;
    router *r;
    api_server *api;
    http_conn_shared sh;
} g;

static client *client_of(http_conn *c)
{
    return (client *)((char *)c - offsetof(client, c));
}

static void on_write(http_conn *c, const http_iov *iov, size_t n)
{
    client *cl = client_of(c);
    if (cl->write_pending || n == 0)
        abort(); /* the core promised one write at a time */
    /* Every response starts with a status line, e.g. "HTTP/1.1 400 Bad Request". */
    if (iov[0].len < 12 || memcmp(iov[0].base, "HTTP/1.1 ", 9) != 0)
        abort();
    const char *status = (const char *)iov[0].base + 9;
    if (status[0] < '1' || status[0] > '5')
        abort();
    if (g.strict_500 && memcmp(status, "500", 3) == 0) {
        fprintf(stderr, "fuzz_request: 500 answer:\n%.*s\n",
                (int)(iov[0].len < 2000 ? iov[0].len : 2000), (const char *)iov[0].base);
        for (size_t i = 1; i < n; i++)
            fprintf(stderr, "%.*s\n", (int)(iov[i].len < 2000 ? iov[i].len : 2000),
                    (const char *)iov[i].base);
        abort();
    }
    if (g.verbose) /* the status line and the body, to read what a reproducer does */
        fprintf(stderr, "fuzz_request: %.*s ... %.*s\n", (int)strcspn(iov[0].base, "\r"),
                (const char *)iov[0].base, n > 1 ? (int)(iov[1].len < 300 ? iov[1].len : 300) : 0,
                n > 1 ? (const char *)iov[1].base : "");
    cl->responses++;
    cl->write_pending = true; /* completed from the drive loop, as a socket would */
}

static void on_update(http_conn *c)
{
    (void)c;
}

static const http_conn_io io = {on_write, on_update};

static const char *fixed_date(http_conn_shared *sh)
{
    (void)sh;
    return "Thu, 01 Jan 2026 00:00:00 GMT";
}

static void on_deadline(uv_timer_t *t)
{
    (void)t;
    g.expired = true;
}

/* Feeds `data` on a new connection, then EOF, and runs the loop until the connection is
 * finished; aborts on a hang. */
static void run_connection(const uint8_t *data, size_t size)
{
    client cl;
    memset(&cl, 0, sizeof cl);
    http_conn_init(&cl.c, &g.sh);
    snprintf(cl.c.peer, sizeof cl.c.peer, "127.0.0.1:9");
    size_t off = 0;
    bool eof = false;
    /* Feeding is instant and every request takes milliseconds: one deadline suffices. */
    g.expired = false;
    uv_timer_start(&g.deadline, on_deadline, HANG_DEADLINE_MS, 0);
    for (;;) {
        bool progress = false;
        if (off < size && http_conn_wants_read(&cl.c) &&
            http_conn_phase(&cl.c) != HTTP_PHASE_DONE) {
            size_t n = size - off < FEED_CHUNK ? size - off : FEED_CHUNK;
            http_conn_feed(&cl.c, data + off, n);
            off += n;
            progress = true;
        } else if (!eof && (off == size || http_conn_phase(&cl.c) == HTTP_PHASE_DONE)) {
            /* All sent, or the core will take no more (it closes): the client hangs up. */
            http_conn_eof(&cl.c);
            eof = true;
            progress = true;
        }
        if (cl.write_pending) {
            cl.write_pending = false;
            http_conn_write_done(&cl.c, 0);
            progress = true;
        }
        if (http_conn_phase(&cl.c) == HTTP_PHASE_DONE && !cl.write_pending)
            break;
        if (progress)
            continue;
        if (g.expired) {
            fprintf(stderr,
                    "fuzz_request: connection not finished after %d ms (phase %d, %zu of %zu "
                    "bytes fed, %zu responses)\n",
                    HANG_DEADLINE_MS, (int)http_conn_phase(&cl.c), off, size, cl.responses);
            abort();
        }
        uv_run(&g.loop, UV_RUN_ONCE);
    }
    uv_timer_stop(&g.deadline);
    http_conn_close(&cl.c);
    if (g.sh.body_bytes != 0)
        abort(); /* body memory not given back to the budget */
}

static bool fuzz_table_active(void)
{
    const table_info *t = catalog_find(router_catalog(g.r), FUZZ_TABLE, strlen(FUZZ_TABLE));
    return t != NULL && t->status == TABLE_ACTIVE;
}

/* (Re)creates the table item requests aim at; an input may have deleted it. */
static void ensure_fuzz_table(void)
{
    if (fuzz_table_active())
        return;
    static char req[2048];
    int n = snprintf(req, sizeof req,
                     "POST / HTTP/1.1\r\nHost: fuzz\r\n"
                     "Content-Type: application/x-amz-json-1.0\r\n"
                     "X-Amz-Target: DynamoDB_20120810.CreateTable\r\n"
                     "X-Amz-Date: 20260101T000000Z\r\n"
                     "Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/"
                     "dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=00\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     sizeof create_fuzz_table_body - 1, create_fuzz_table_body);
    if (n < 0 || (size_t)n >= sizeof req)
        abort();
    /* A deletion still in progress must finish before the name is free again. */
    g.expired = false;
    uv_timer_start(&g.deadline, on_deadline, HANG_DEADLINE_MS, 0);
    while (catalog_find(router_catalog(g.r), FUZZ_TABLE, strlen(FUZZ_TABLE)) != NULL && !g.expired)
        uv_run(&g.loop, UV_RUN_ONCE);
    uv_timer_stop(&g.deadline);
    run_connection((const uint8_t *)req, (size_t)n);
    if (!fuzz_table_active()) {
        fprintf(stderr, "fuzz_request: cannot create table %s\n", FUZZ_TABLE);
        abort();
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void teardown(void)
{
    if (!g.ready)
        return;
    g.ready = false;
    uv_close((uv_handle_t *)&g.deadline, NULL);
    http_conn_shared_release(&g.sh);
    router_close(g.r);
    api_server_free(g.api);
    uv_run(&g.loop, UV_RUN_DEFAULT);
    uv_loop_close(&g.loop);
    nftw(g.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ItemCount / TableSizeBytes bookkeeping, as stratad does it. */
static void result_stats(const uint8_t *result, size_t len, partition_stats *delta)
{
    partition_result_delta(result, len, &delta->item_count, &delta->size_bytes);
}

static void setup(void)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g.dir, sizeof g.dir, "%s/strata-fuzz-request-XXXXXX", base);
    if (mkdtemp(g.dir) == NULL) {
        perror("fuzz_request: mkdtemp");
        abort();
    }
    const char *strict = getenv("STRATA_FUZZ_NO_500");
    g.strict_500 = strict != NULL && strict[0] == '1';
    const char *verbose = getenv("STRATA_FUZZ_VERBOSE");
    g.verbose = verbose != NULL && verbose[0] == '1';
    uv_loop_init(&g.loop);
    uv_timer_init(&g.loop, &g.deadline);
    strata_err err;
    router_config rc = {
        .loop = &g.loop,
        .data_dir = g.dir,
        .ops = {.apply = partition_apply, .result_stats = result_stats},
        .wal_segment_size = 4 << 20,
        .memtable_bytes = 4 << 20,
    };
    g.r = router_open(&rc, &err);
    if (g.r == NULL) {
        fprintf(stderr, "fuzz_request: router_open %s: %s\n", g.dir, err.msg);
        abort();
    }
    api_config ac = {
        .loop = &g.loop, .router = g.r, .initial_partitions = 2, .endpoint = "127.0.0.1:8000"};
    g.api = api_server_new(&ac, &err);
    if (g.api == NULL)
        abort();
    g.sh = (http_conn_shared){
        .max_body = 256 * 1024,
        .max_header_bytes = 16 * 1024,
        .max_headers = 64,
        .max_pipeline = 4,
        .arena_limit = 32u * 1024 * 1024,
        .body_budget = 4u * 1024 * 1024,
        .handler = api_handle,
        .handler_data = g.api,
        .io = &io,
        .date = fixed_date,
    };
    g.ready = true;
    atexit(teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g.ready)
        setup();
    ensure_fuzz_table();
    run_connection(data, size);
    /* Let background work (log trimming, engine flushes) move on between inputs. */
    uv_run(&g.loop, UV_RUN_NOWAIT);
    return 0;
}
