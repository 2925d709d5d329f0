/*
 * node/http against real sockets: a server on 127.0.0.1 port 0 and blocking clients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "tests/unit/node/http/harness.h"

#define DEADLINE_MS 5000

static void opts_default(http_server_options *o)
{
    http_server_options_default(o);
}

static bool nheld_at_least(harness *h, void *arg)
{
    return h->nheld >= *(int *)arg;
}

static bool open_conns_is(harness *h, void *arg)
{
    http_server_stats st;
    http_server_get_stats(h->srv, &st);
    return st.connections_open == *(uint64_t *)arg;
}

static void wait_held(harness *h, int n)
{
    assert_true(harness_wait(h, nheld_at_least, &n, DEADLINE_MS));
}

static void wait_open(harness *h, uint64_t n)
{
    assert_true(harness_wait(h, open_conns_is, &n, DEADLINE_MS));
}

static void expect_echo(client *c, const char *path)
{
    response r;
    assert_int_equal(client_read(c, &r), 0);
    assert_int_equal(r.status, 200);
    char want[64];
    snprintf(want, sizeof want, "P=%s|", path);
    if (strstr((char *)r.body, want) == NULL)
        fail_msg("expected %s in %s", want, (char *)r.body);
    response_free(&r);
}

/* ---------------------------------------------------------------- basics */

static void crc32_known_vectors(void **state)
{
    (void)state;
    assert_int_equal(http_crc32("", 0), 0);
    assert_int_equal(http_crc32("123456789", 9), 0xCBF43926u);
    assert_int_equal(http_crc32("a", 1), 0xE8B7BE43u);
    const char *fox = "The quick brown fox jumps over the lazy dog";
    assert_int_equal(http_crc32(fox, strlen(fox)), 0x414FA339u);
    /* Against a bitwise reference, at every length and split point around 8-byte steps. */
    uint8_t data[300];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    for (size_t n = 0; n <= sizeof data; n += 7) {
        uint32_t ref = 0xFFFFFFFFu;
        for (size_t i = 0; i < n; i++) {
            ref ^= data[i];
            for (int k = 0; k < 8; k++)
                ref = (ref & 1) ? (ref >> 1) ^ 0xEDB88320u : ref >> 1;
        }
        ref = ~ref;
        assert_int_equal(http_crc32(data, n), ref);
        size_t cut = n / 3;
        assert_int_equal(http_crc32_update(http_crc32(data, cut), data + cut, n - cut), ref);
    }
}

static void status_reasons(void **state)
{
    (void)state;
    assert_string_equal(http_status_reason(200), "OK");
    assert_string_equal(http_status_reason(413), "Payload Too Large");
    assert_string_equal(http_status_reason(505), "HTTP Version Not Supported");
    assert_string_equal(http_status_reason(799), "Unknown");
}

static void start_rejects_bad_options(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    http_server_options o;
    http_server *s;
    strata_err err;
    opts_default(&o);
    o.port = 0;
    assert_int_equal(http_server_start(&loop, &o, &s, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION); /* no handler */
    harness h;
    http_server_options ho;
    opts_default(&ho);
    harness_start(&h, &ho, MODE_ECHO);
    o.handler = (http_handler_fn)1;
    o.host = "127.0.0.1";
    o.port = h.port; /* in use */
    assert_int_equal(http_server_start(&loop, &o, &s, &err), -1);
    assert_int_equal(err.code, ERR_IO);
    o.port = 0;
    o.host = "not-an-address";
    assert_int_equal(http_server_start(&loop, &o, &s, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    o.host = "127.0.0.1";
    o.max_pipeline = 0;
    assert_int_equal(http_server_start(&loop, &o, &s, &err), -1);
    harness_stop(&h);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void single_request(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "POST /tables?x=1&y=2 HTTP/1.1\r\nHost: localhost\r\n"
                     "X-Amz-Target:   DynamoDB_20120810.GetItem  \r\n"
                     "Content-Type: application/x-amz-json-1.0\r\n"
                     "Content-Length: 7\r\n\r\n{\"a\":1}");
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal((char *)r.body, "M=POST|P=/tables|Q=x=1&y=2|U=/tables?x=1&y=2|"
                                        "T=DynamoDB_20120810.GetItem|N=4|L=7|B={\"a\":1}");
    char v[128];
    assert_true(response_header(&r, "Content-Length", v, sizeof v));
    assert_int_equal(atoi(v), (int)r.body_len); /* the handler's own value is ignored */
    assert_true(response_header(&r, "Connection", v, sizeof v));
    assert_string_equal(v, "keep-alive");
    assert_true(response_header(&r, "Date", v, sizeof v));
    assert_non_null(strstr(v, " GMT"));
    assert_true(response_header(&r, "X-Test", v, sizeof v));
    assert_true(response_header(&r, "X-Peer", v, sizeof v));
    assert_true(strncmp(v, "127.0.0.1:", 10) == 0);
    assert_false(response_header(&r, "Injected", v, sizeof v)); /* CR LF headers dropped */
    assert_false(response_header(&r, "Bad", v, sizeof v));
    response_free(&r);
    client_close(&c);
    harness_stop(&h);
}

static void ipv6_listener_and_peer(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.host = "::1";
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect6(&c, h.port);
    client_sends(&c, "GET /six HTTP/1.1\r\nHost: h\r\n\r\n");
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    char v[80];
    assert_true(response_header(&r, "X-Peer", v, sizeof v));
    assert_true(strncmp(v, "[::1]:", 6) == 0);
    response_free(&r);
    client_close(&c);
    harness_stop(&h);
}

static void keep_alive_reuses_connection(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    for (int i = 0; i < 5; i++) {
        char req[128], path[16];
        snprintf(path, sizeof path, "/r%d", i);
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
        client_sends(&c, req);
        expect_echo(&c, path);
    }
    http_server_stats st = harness_stats(&h);
    assert_int_equal(st.connections_total, 1);
    assert_int_equal(st.requests_total, 5);
    client_close(&c);
    wait_open(&h, 0);
    harness_stop(&h);
}

static void header_split_across_reads(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    const char *req =
        "POST /split HTTP/1.1\r\nHost: h\r\nX-Amz-Target: abc\r\nContent-Length: 3\r\n\r\nxyz";
    for (const char *p = req; *p; p++) {
        client_send(&c, p, 1);
        /* Make the server see the bytes separately: wait until it read them. */
        if (p[1] != '\0')
            harness_stats(&h);
    }
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    assert_string_equal((char *)r.body, "M=POST|P=/split|Q=|U=/split|T=abc|N=3|L=3|B=xyz");
    response_free(&r);
    client_close(&c);
    harness_stop(&h);
}

static void chunked_body_accepted(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n");
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    assert_non_null(strstr((char *)r.body, "L=7|B=abcdefg"));
    response_free(&r);
    client_close(&c);
    harness_stop(&h);
}

static void head_has_length_but_no_body(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n");
    c.next_is_head = true;
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    char v[32];
    assert_true(response_header(&r, "Content-Length", v, sizeof v));
    assert_true(atoi(v) > 0);
    response_free(&r);
    client_sends(&c, "GET /after HTTP/1.1\r\nHost: h\r\n\r\n");
    expect_echo(&c, "/after"); /* would fail if a body had followed the HEAD response */
    client_close(&c);
    harness_stop(&h);
}

/* ---------------------------------------------------------------- pipelining */

static const char three_requests[] = "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n"
                                     "POST /2 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"
                                     "GET /3 HTTP/1.1\r\nHost: h\r\n\r\n";

static void pipeline_one_at_a_time(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o); /* max_pipeline 1 */
    harness_start(&h, &o, MODE_DEFER);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, three_requests);
    for (int i = 1; i <= 3; i++) {
        wait_held(&h, 1);
        /* The next request is not handed over before this one is answered. */
        assert_int_equal(harness_dispatched(&h), (uint64_t)i);
        harness_answer(&h, 0);
        char path[8];
        snprintf(path, sizeof path, "/%d", i);
        expect_echo(&c, path);
    }
    client_close(&c);
    harness_stop(&h);
}

static void pipeline_answers_in_request_order(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.max_pipeline = 3;
    harness_start(&h, &o, MODE_DEFER);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, three_requests);
    wait_held(&h, 3);
    harness_answer(&h, 2); /* /3 first: held back behind /1 and /2 */
    harness_answer(&h, 0); /* /1 */
    expect_echo(&c, "/1");
    harness_answer(&h, 0); /* /2 */
    expect_echo(&c, "/2");
    expect_echo(&c, "/3");
    client_close(&c);
    harness_stop(&h);
}

/* ---------------------------------------------------------------- errors */

static void expect_error_then_close(client *c, int status, const char *type)
{
    response r;
    assert_int_equal(client_read(c, &r), 0);
    if (r.status != status)
        fail_msg("want %d, got %d: %s", status, r.status, (char *)r.body);
    char v[64];
    assert_true(response_header(&r, "Connection", v, sizeof v));
    assert_string_equal(v, "close");
    assert_true(response_header(&r, "x-amz-crc32", v, sizeof v));
    assert_int_equal(strtoul(v, NULL, 10), http_crc32(r.body, r.body_len));
    assert_non_null(strstr((char *)r.body, type));
    assert_non_null(strstr((char *)r.body, "\"__type\":\"com.amazon.coral.service#"));
    response_free(&r);
    assert_true(client_closed(c));
}

static void body_too_large_413(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.max_body = 1024;
    harness_start(&h, &o, MODE_ECHO);
    client c;
    /* Declared too large, and the client sends the body anyway: it still sees the 413. */
    client_connect(&c, h.port);
    client_sends(&c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n");
    char *big = calloc(1, 5000);
    memset(big, 'x', 5000);
    client_send(&c, big, 5000);
    expect_error_then_close(&c, 413, "RequestEntityTooLarge");
    client_close(&c);
    /* Chunked, growing past the bound. */
    client_connect(&c, h.port);
    client_sends(&c, "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    client_sends(&c, "400\r\n");
    client_send(&c, big, 1024);
    client_sends(&c, "\r\n1\r\nx\r\n0\r\n\r\n");
    expect_error_then_close(&c, 413, "RequestEntityTooLarge");
    client_close(&c);
    /* Exactly at the bound is fine. */
    client_connect(&c, h.port);
    client_sends(&c, "POST /ok HTTP/1.1\r\nHost: h\r\nContent-Length: 1024\r\n\r\n");
    client_send(&c, big, 1024);
    expect_echo(&c, "/ok");
    client_close(&c);
    free(big);
    assert_int_equal(harness_stats(&h).errors_total, 2);
    harness_stop(&h);
}

static void header_bounds_431(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.max_header_bytes = 1024;
    o.max_headers = 5;
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    char req[4096];
    char val[2001];
    memset(val, 'v', 2000);
    val[2000] = '\0';
    snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: h\r\nX-Big: %s\r\n\r\n", val);
    client_sends(&c, req);
    expect_error_then_close(&c, 431, "RequestHeaderFieldsTooLarge");
    client_close(&c);

    client_connect(&c, h.port);
    client_sends(&c, "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n");
    expect_error_then_close(&c, 431, "RequestHeaderFieldsTooLarge");
    client_close(&c);

    client_connect(&c, h.port); /* five headers are fine */
    client_sends(&c, "GET /five HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n");
    expect_echo(&c, "/five");
    client_close(&c);
    harness_stop(&h);
}

static void garbage_400(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    const char *bad[] = {
        "GARBAGE\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
        "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
        "GET / HTTP/1.1\r\nHost: h\r\nBad Header: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        client c;
        client_connect(&c, h.port);
        client_sends(&c, bad[i]);
        expect_error_then_close(&c, 400, "BadRequestException");
        client_close(&c);
    }
    /* A good request before the garbage is still answered, in order. */
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "GET /good HTTP/1.1\r\nHost: h\r\n\r\n\x01\x02 nonsense\r\n\r\n");
    expect_echo(&c, "/good");
    expect_error_then_close(&c, 400, "BadRequestException");
    client_close(&c);
    harness_stop(&h);
}

/* RFC 9112's framing rules that http-parser alone lets through: each refused request gets
 * its status and the connection ends; the lawful variants next to them are served. */
static void framing_rules(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    static const struct {
        const char *req;
        int status;
        const char *type;
    } refused[] = {
        {"GET / HTTP/9.9\r\nHost: h\r\n\r\n", 505, "HttpVersionNotSupportedException"},
        {"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "HttpVersionNotSupportedException"},
        {"GET / HTTP/1.1\r\n\r\n", 400, "BadRequestException"},
        {"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400, "BadRequestException"},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400,
         "BadRequestException"},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400,
         "BadRequestException"},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
         "chunked\r\n\r\n0\r\n\r\n",
         400, "BadRequestException"},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
         "BadRequestException"},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501,
         "NotImplementedException"},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: "
         "chunked\r\n\r\n0\r\n\r\n",
         501, "NotImplementedException"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        client c;
        client_connect(&c, h.port);
        client_sends(&c, refused[i].req);
        expect_error_then_close(&c, refused[i].status, refused[i].type);
        client_close(&c);
    }
    static const char *const served[] = {
        "GET /ten HTTP/1.0\r\n\r\n", /* HTTP/1.0 needs no Host */
        "POST /ows HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:  Chunked\r\n\r\n0\r\n\r\n",
        "GET /fold HTTP/1.1\r\nHost: h\r\nX-Fold: a\r\n b\r\n\r\n", /* unfolded */
    };
    static const char *const paths[] = {"/ten", "/ows", "/fold"};
    for (size_t i = 0; i < sizeof served / sizeof served[0]; i++) {
        client c;
        client_connect(&c, h.port);
        client_sends(&c, served[i]);
        expect_echo(&c, paths[i]);
        client_close(&c);
    }
    harness_stop(&h);
}

/* ---------------------------------------------------------------- connection handling */

static void connection_close_and_http10(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    char v[32];
    response r;

    client_connect(&c, h.port);
    client_sends(&c, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /ignored "
                     "HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(client_read(&c, &r), 0);
    assert_true(response_header(&r, "Connection", v, sizeof v));
    assert_string_equal(v, "close");
    response_free(&r);
    assert_true(client_closed(&c));
    client_close(&c);

    client_connect(&c, h.port);
    client_sends(&c, "GET /b HTTP/1.0\r\n\r\n");
    assert_int_equal(client_read(&c, &r), 0);
    assert_true(response_header(&r, "Connection", v, sizeof v));
    assert_string_equal(v, "close");
    response_free(&r);
    assert_true(client_closed(&c));
    client_close(&c);

    client_connect(&c, h.port);
    client_sends(&c, "GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_int_equal(client_read(&c, &r), 0);
    assert_true(response_header(&r, "Connection", v, sizeof v));
    assert_string_equal(v, "keep-alive");
    response_free(&r);
    client_sends(&c, "GET /d HTTP/1.1\r\nHost: h\r\n\r\n");
    expect_echo(&c, "/d");
    client_close(&c);
    harness_stop(&h);
}

static void handler_connection_close(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_CLOSE);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    assert_string_equal((char *)r.body, "bye");
    response_free(&r);
    assert_true(client_closed(&c));
    client_close(&c);
    harness_stop(&h);
}

static void expect_continue(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.max_body = 100;
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c,
                 "PUT /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    response r;
    assert_int_equal(client_read(&c, &r), 0);
    assert_int_equal(r.status, 100);
    response_free(&r);
    client_sends(&c, "hello");
    assert_int_equal(client_read(&c, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr((char *)r.body, "B=hello"));
    response_free(&r);
    /* Too large: 413 at once, no 100. */
    client_sends(
        &c, "PUT /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n");
    expect_error_then_close(&c, 413, "RequestEntityTooLarge");
    client_close(&c);
    harness_stop(&h);
}

static void max_connections_refuses(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.max_connections = 2;
    harness_start(&h, &o, MODE_ECHO);
    client a, b, x;
    client_connect(&a, h.port);
    client_sends(&a, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
    expect_echo(&a, "/a");
    client_connect(&b, h.port);
    client_sends(&b, "GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
    expect_echo(&b, "/b");
    client_connect(&x, h.port); /* the kernel accepts; the server closes at once */
    assert_true(client_closed(&x));
    client_close(&x);
    assert_int_equal(harness_stats(&h).connections_refused, 1);
    client_close(&a);
    wait_open(&h, 1);
    client_connect(&x, h.port); /* room again */
    client_sends(&x, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    expect_echo(&x, "/x");
    client_close(&x);
    client_close(&b);
    harness_stop(&h);
}

static void many_idle_connections(void **state)
{
    (void)state;
    enum { N = 300 };
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    static client cs[N];
    for (int i = 0; i < N; i++) {
        client_connect(&cs[i], h.port);
        client_sends(&cs[i], "GET /first HTTP/1.1\r\nHost: h\r\n\r\n");
    }
    for (int i = 0; i < N; i++)
        expect_echo(&cs[i], "/first");
    assert_int_equal(harness_stats(&h).connections_open, N);
    for (int i = N - 1; i >= 0; i--) {
        client_sends(&cs[i], "GET /second HTTP/1.1\r\nHost: h\r\n\r\n");
        expect_echo(&cs[i], "/second");
    }
    http_server_stats st = harness_stats(&h);
    assert_int_equal(st.connections_total, N);
    assert_int_equal(st.requests_total, 2 * N);
    for (int i = 0; i < N; i++)
        client_close(&cs[i]);
    wait_open(&h, 0);
    harness_stop(&h);
}

/* ---------------------------------------------------------------- timeouts */

static void header_timeout_408(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.header_timeout_ms = 150;
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    uint64_t t0 = now_ms();
    client_sends(&c, "GET / HTTP/1.1\r\nHost: x\r\n"); /* never finished */
    expect_error_then_close(&c, 408, "RequestTimeoutException");
    assert_true(now_ms() - t0 >= 100);
    client_close(&c);
    /* A connection that sends nothing is closed silently. */
    client_connect(&c, h.port);
    assert_true(client_closed(&c));
    client_close(&c);
    assert_int_equal(harness_stats(&h).timeouts_total, 2);
    harness_stop(&h);
}

static void body_timeout_408(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.body_timeout_ms = 150;
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc");
    expect_error_then_close(&c, 408, "RequestTimeoutException");
    client_close(&c);
    harness_stop(&h);
}

static void idle_timeout_closes(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.idle_timeout_ms = 150;
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "GET /i HTTP/1.1\r\nHost: h\r\n\r\n");
    expect_echo(&c, "/i");
    uint64_t t0 = now_ms();
    assert_true(client_closed(&c)); /* silently, no 408 on an idle connection */
    assert_true(now_ms() - t0 >= 100);
    client_close(&c);
    assert_int_equal(harness_stats(&h).timeouts_total, 1);
    harness_stop(&h);
}

static void write_timeout_closes_non_reader(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.write_timeout_ms = 200;
    harness_start(&h, &o, MODE_BIG);
    h.big_len = 16u * 1024 * 1024; /* far more than the socket buffers hold (4 MiB) */
    h.big = malloc(h.big_len);
    memset(h.big, 'b', h.big_len);
    client c;
    client_connect_rcvbuf(&c, h.port, 4096);
    client_sends(&c, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
    wait_open(&h, 0); /* the client never reads: closed by the write timeout */
    assert_int_equal(harness_stats(&h).timeouts_total, 1);
    client_close(&c);
    harness_stop(&h);
}

static void write_timeout_spares_slow_reader(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.write_timeout_ms = 600;
    harness_start(&h, &o, MODE_BIG);
    h.big_len = 12u * 1024 * 1024; /* more than the kernel buffers: libuv queues the rest */
    h.big = malloc(h.big_len);
    memset(h.big, 's', h.big_len);
    client c;
    /* Small enough to bound the kernel's share, big enough for normal window updates
       (a tiny window makes TCP fall back to zero-window probes with backoff). */
    client_connect_rcvbuf(&c, h.port, 256 * 1024);
    client_sends(&c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
    /* Read 1 MiB, pause 120 ms (less than the timeout), and so on: slow but moving. */
    size_t total = 0;
    uint64_t t0 = now_ms();
    char chunk[65536];
    while (total < h.big_len) {
        size_t burst = 0;
        while (burst < 1024 * 1024 && total + burst < h.big_len) {
            ssize_t n = recv(c.fd, chunk, sizeof chunk, 0);
            if (n <= 0)
                fail_msg("closed after %zu bytes, %llu ms, %llu timeouts", total + burst,
                         (unsigned long long)(now_ms() - t0),
                         (unsigned long long)harness_stats(&h).timeouts_total);
            burst += (size_t)n;
        }
        total += burst;
        struct timespec ts = {0, 120 * 1000 * 1000}; /* the slow client's pause */
        nanosleep(&ts, NULL);
    }
    assert_true(now_ms() - t0 > 600); /* longer than one timeout period in all */
    assert_int_equal(harness_stats(&h).timeouts_total, 0);
    client_close(&c);
    harness_stop(&h);
}

static void big_response_and_back_pressure(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_BIG);
    h.big_len = 4u * 1024 * 1024 + 13;
    h.big = malloc(h.big_len);
    for (size_t i = 0; i < h.big_len; i++)
        h.big[i] = (uint8_t)(i * 7);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
    for (int i = 0; i < 2; i++) {
        response r;
        assert_int_equal(client_read(&c, &r), 0);
        assert_int_equal(r.body_len, h.big_len);
        assert_memory_equal(r.body, h.big, h.big_len);
        char v[16];
        assert_true(response_header(&r, "x-amz-crc32", v, sizeof v));
        assert_int_equal(strtoul(v, NULL, 10), http_crc32(r.body, r.body_len));
        response_free(&r);
    }
    client_close(&c);
    harness_stop(&h);
}

static void client_closes_during_big_response(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_BIG);
    h.big_len = 8u * 1024 * 1024; /* set before the first request reaches the loop */
    h.big = calloc(1, h.big_len);
    for (int i = 0; i < 2; i++) {
        client c;
        client_connect(&c, h.port);
        client_sends(&c, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
        char first[64];
        assert_true(recv(c.fd, first, sizeof first, 0) > 0); /* the write has started */
        client_close(&c); /* unread data: the kernel resets; the server gets EPIPE */
    }
    wait_open(&h, 0); /* and survives it (no SIGPIPE death) */
    harness_stop(&h);
}

/* ---------------------------------------------------------------- async and stop */

static bool held_disconnected(harness *h, void *arg)
{
    (void)arg;
    return h->nheld == 1 && http_request_disconnected(h->held[0]);
}

static void client_gone_before_async_response(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_DEFER);
    /* Reset: the server notices while the handler holds the request. */
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "POST /gone HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc");
    wait_held(&h, 1);
    client_reset(&c);
    assert_true(harness_wait(&h, held_disconnected, NULL, DEADLINE_MS));
    wait_open(&h, 0);
    harness_answer(&h, 0); /* just freed */
    /* Orderly close: the response is still attempted, then the connection goes. */
    client_connect(&c, h.port);
    client_sends(&c, "GET /fin HTTP/1.1\r\nHost: h\r\n\r\n");
    wait_held(&h, 1);
    client_close(&c);
    harness_answer(&h, 0);
    wait_open(&h, 0);
    harness_stop(&h);
}

static void half_close_still_answered(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
    shutdown(c.fd, SHUT_WR);
    expect_echo(&c, "/1");
    expect_echo(&c, "/2");
    assert_true(client_closed(&c));
    client_close(&c);
    harness_stop(&h);
}

static void graceful_stop_finishes_in_flight(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    harness_start(&h, &o, MODE_DEFER);
    client busy, idle;
    client_connect(&busy, h.port);
    client_connect(&idle, h.port);
    client_sends(&busy, "GET /inflight HTTP/1.1\r\nHost: h\r\n\r\n");
    wait_held(&h, 1);
    wait_open(&h, 2);
    harness_stop_begin(&h);
    assert_true(client_closed(&idle)); /* idle connections go at once */
    harness_answer(&h, 0);
    response r;
    assert_int_equal(client_read(&busy, &r), 0);
    char v[16];
    assert_true(response_header(&r, "Connection", v, sizeof v));
    assert_string_equal(v, "close");
    response_free(&r);
    assert_true(client_closed(&busy));
    client_close(&busy);
    client_close(&idle);
    harness_stop_finish(&h);
}

static bool stopped(harness *h, void *arg)
{
    (void)arg;
    return h->stopped;
}

static void stop_grace_closes_busy_connections(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    opts_default(&o);
    o.stop_grace_ms = 200;
    harness_start(&h, &o, MODE_DEFER);
    client c;
    client_connect(&c, h.port);
    client_sends(&c, "GET /never HTTP/1.1\r\nHost: h\r\n\r\n");
    wait_held(&h, 1);
    uint64_t t0 = now_ms();
    harness_stop_begin(&h);
    assert_true(client_closed(&c)); /* no answer came within the grace period */
    assert_true(now_ms() - t0 >= 150);
    assert_true(harness_wait(&h, stopped, NULL, DEADLINE_MS)); /* done ran, request held */
    harness_answer(&h, 0); /* a detached request outliving the server: just freed */
    client_close(&c);
    harness_stop_finish(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32_known_vectors),
        cmocka_unit_test(status_reasons),
        cmocka_unit_test(start_rejects_bad_options),
        cmocka_unit_test(single_request),
        cmocka_unit_test(ipv6_listener_and_peer),
        cmocka_unit_test(keep_alive_reuses_connection),
        cmocka_unit_test(header_split_across_reads),
        cmocka_unit_test(chunked_body_accepted),
        cmocka_unit_test(head_has_length_but_no_body),
        cmocka_unit_test(pipeline_one_at_a_time),
        cmocka_unit_test(pipeline_answers_in_request_order),
        cmocka_unit_test(body_too_large_413),
        cmocka_unit_test(header_bounds_431),
        cmocka_unit_test(garbage_400),
        cmocka_unit_test(framing_rules),
        cmocka_unit_test(connection_close_and_http10),
        cmocka_unit_test(handler_connection_close),
        cmocka_unit_test(expect_continue),
        cmocka_unit_test(max_connections_refuses),
        cmocka_unit_test(many_idle_connections),
        cmocka_unit_test(header_timeout_408),
        cmocka_unit_test(body_timeout_408),
        cmocka_unit_test(idle_timeout_closes),
        cmocka_unit_test(write_timeout_closes_non_reader),
        cmocka_unit_test(write_timeout_spares_slow_reader),
        cmocka_unit_test(big_response_and_back_pressure),
        cmocka_unit_test(client_closes_during_big_response),
        cmocka_unit_test(client_gone_before_async_response),
        cmocka_unit_test(half_close_still_answered),
        cmocka_unit_test(graceful_stop_finishes_in_flight),
        cmocka_unit_test(stop_grace_closes_busy_connections),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
