/*
 * The socket-free connection core (node/http/http_conn.h) with a fake transport:
 * deterministic checks that reads may be split anywhere, of the phases the transport
 * times, of EOF handling and of the stash bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/http/http_conn.h"
#include "storage/base/buf.h"
#include "tests/unit/asan_death.h"

typedef struct {
    http_conn c;
    http_conn_shared sh;
    buf out;
    bool auto_complete; /* complete writes inside io->write (re-entrant path) */
    bool write_pending;
    bool done;
    bool defer;
    http_request *held[8];
    int nheld;
} fake;

static fake *fake_of(http_conn *c)
{
    return (fake *)((char *)c - offsetof(fake, c));
}

static void fake_write(http_conn *c, const http_iov *iov, size_t n)
{
    fake *f = fake_of(c);
    assert_false(f->write_pending);
    for (size_t i = 0; i < n; i++)
        buf_append(&f->out, iov[i].base, iov[i].len);
    if (f->auto_complete) {
        http_conn_write_done(c, 0);
        return;
    }
    f->write_pending = true;
}

static void fake_update(http_conn *c)
{
    fake *f = fake_of(c);
    if (!f->done && http_conn_phase(c) == HTTP_PHASE_DONE)
        f->done = true;
}

static const http_conn_io fake_io = {fake_write, fake_update};

static const char *fixed_date(http_conn_shared *sh)
{
    (void)sh;
    return "Thu, 01 Jan 2026 00:00:00 GMT";
}

static void echo(http_request *req)
{
    size_t len;
    const uint8_t *body = http_request_body(req, &len);
    char out[256];
    int n = snprintf(out, sizeof out, "%s %s ?%s [%zu:%.32s]", http_request_method(req),
                     http_request_path(req), http_request_query(req), len, (const char *)body);
    http_respond(req, 200, NULL, 0, out, (size_t)n);
}

static void handler(http_request *req, void *data)
{
    fake *f = data;
    if (f->defer) {
        assert_true(f->nheld < 8);
        f->held[f->nheld++] = req;
        return;
    }
    echo(req);
}

static void fake_init(fake *f, unsigned max_pipeline, bool auto_complete)
{
    memset(f, 0, sizeof *f);
    f->sh = (http_conn_shared){
        .max_body = 1 << 20,
        .max_header_bytes = 8192,
        .max_headers = 50,
        .max_pipeline = max_pipeline,
        .arena_limit = 1 << 20,
        .handler = handler,
        .handler_data = f,
        .io = &fake_io,
        .date = fixed_date,
    };
    buf_init(&f->out, 0);
    f->auto_complete = auto_complete;
    http_conn_init(&f->c, &f->sh);
    snprintf(f->c.peer, sizeof f->c.peer, "test:1");
}

static void fake_complete_writes(fake *f)
{
    while (f->write_pending) {
        f->write_pending = false;
        http_conn_write_done(&f->c, 0);
    }
}

static void fake_free(fake *f)
{
    http_conn_close(&f->c);
    http_conn_shared_release(&f->sh);
    buf_free(&f->out);
}

static const char pipeline[] =
    "GET /one HTTP/1.1\r\nHost: a\r\n\r\n"
    "POST /two?x=y HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-Empty:\r\n\r\nhello"
    "POST /three HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
    "chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"
    "DELETE /four HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";

/* Feeds `in` in pieces of at most `step` bytes (0: all at once); returns the output. */
static char *run(const char *in, size_t step, unsigned max_pipeline, bool auto_complete)
{
    fake f;
    fake_init(&f, max_pipeline, auto_complete);
    size_t n = strlen(in);
    for (size_t off = 0; off < n;) {
        size_t k = step == 0 || n - off < step ? n - off : step;
        http_conn_feed(&f.c, in + off, k);
        off += k;
        fake_complete_writes(&f);
    }
    fake_complete_writes(&f);
    assert_true(f.done); /* the last request said Connection: close */
    buf_put_u8(&f.out, 0);
    char *out = strdup((char *)f.out.data);
    fake_free(&f);
    return out;
}

static void any_split_gives_the_same_responses(void **state)
{
    (void)state;
    char *whole = run(pipeline, 0, 1, true);
    assert_non_null(strstr(whole, "GET /one ? [0:]"));
    assert_non_null(strstr(whole, "POST /two ?x=y [5:hello]"));
    assert_non_null(strstr(whole, "POST /three ? [5:abcde]"));
    assert_non_null(strstr(whole, "DELETE /four ? [0:]"));
    assert_true(strstr(whole, "/one") < strstr(whole, "/two"));
    assert_true(strstr(whole, "/three") < strstr(whole, "/four"));
    assert_non_null(strstr(whole, "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"));
    for (size_t step = 1; step <= 64; step++) {
        for (unsigned pipe = 1; pipe <= 3; pipe++) {
            char *o = run(pipeline, step, pipe, step % 2 == 0);
            assert_string_equal(o, whole);
            free(o);
        }
    }
    free(whole);
}

static void phases_follow_the_request(void **state)
{
    (void)state;
    fake f;
    fake_init(&f, 1, false);
    assert_int_equal(http_conn_phase(&f.c), HTTP_PHASE_HEADER); /* fresh: header deadline */
    http_conn_feed(&f.c, "POST / HTTP/1.1\r\nHost: h\r\n", 26);
    assert_int_equal(http_conn_phase(&f.c), HTTP_PHASE_HEADER);
    assert_int_equal(f.c.started, 1);
    http_conn_feed(&f.c, "Content-Length: 2\r\n\r\n", 21);
    assert_int_equal(http_conn_phase(&f.c), HTTP_PHASE_BODY);
    http_conn_feed(&f.c, "ok", 2);
    assert_int_equal(http_conn_phase(&f.c), HTTP_PHASE_BUSY); /* response being written */
    fake_complete_writes(&f);
    assert_int_equal(http_conn_phase(&f.c), HTTP_PHASE_IDLE);
    http_conn_timeout(&f.c);
    assert_true(f.done); /* idle timeout: closed without a word */
    fake_free(&f);

    fake_init(&f, 1, true);
    http_conn_feed(&f.c, "GET / HTTP/1.1\r\nHost: h\r\nHo", 27);
    http_conn_timeout(&f.c);
    buf_put_u8(&f.out, 0);
    assert_non_null(strstr((char *)f.out.data, "HTTP/1.1 408 Request Timeout"));
    assert_true(f.done);
    fake_free(&f);
}

static void eof_answers_complete_requests_only(void **state)
{
    (void)state;
    fake f;
    fake_init(&f, 1, false);
    f.defer = true;
    const char *in = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\nGET "
                     "/partial HTTP/1.1\r\nHost: h\r\n";
    http_conn_feed(&f.c, in, strlen(in));
    http_conn_eof(&f.c);
    assert_false(f.done);
    assert_int_equal(f.nheld, 1);
    echo(f.held[0]);
    fake_complete_writes(&f);
    assert_int_equal(f.nheld, 2); /* /b, parsed from the stash after /a went out */
    echo(f.held[1]);
    fake_complete_writes(&f);
    assert_true(f.done); /* the partial request is dropped */
    buf_put_u8(&f.out, 0);
    assert_non_null(strstr((char *)f.out.data, "GET /b"));
    assert_null(strstr((char *)f.out.data, "/partial"));
    fake_free(&f);
}

static void stash_is_bounded_and_requests_survive_close(void **state)
{
    (void)state;
    fake f;
    fake_init(&f, 1, false);
    f.defer = true;
    http_conn_feed(&f.c, "GET /held HTTP/1.1\r\nHost: h\r\n\r\n", 31);
    assert_int_equal(f.nheld, 1);
    char junk[1024];
    memset(junk, 'G', sizeof junk);
    int fed = 0;
    while (http_conn_wants_read(&f.c)) {
        http_conn_feed(&f.c, junk, sizeof junk);
        fed++;
        assert_true(fed < 100);
    }
    assert_true(fed >= 16); /* about 16 KiB held back, not parsed */
    assert_int_equal(f.nheld, 1);
    http_conn_close(&f.c); /* the client vanished */
    assert_true(http_request_disconnected(f.held[0]));
    assert_string_equal(http_request_peer(f.held[0]), "test:1");
    assert_non_null(arena_alloc(http_request_arena(f.held[0]), 100));
    http_respond(f.held[0], 200, NULL, 0, "x", 1); /* just freed */
    http_conn_shared_release(&f.sh);
    buf_free(&f.out);
}

static void headers_are_trimmed_and_iterable(void **state)
{
    (void)state;
    fake f;
    fake_init(&f, 1, false);
    f.defer = true;
    const char *in =
        "GET / HTTP/1.1\r\nHost: h\r\nA:  one \t\r\nb-Name:two\r\nEmpty:\r\nA: again\r\n\r\n";
    http_conn_feed(&f.c, in, strlen(in));
    assert_int_equal(f.nheld, 1);
    http_request *r = f.held[0];
    assert_int_equal(http_request_header_count(r), 5);
    assert_string_equal(http_request_header(r, "a"), "one");
    assert_string_equal(http_request_header(r, "B-NAME"), "two");
    assert_string_equal(http_request_header(r, "empty"), "");
    assert_null(http_request_header(r, "missing"));
    http_header h = http_request_header_at(r, 4);
    assert_string_equal(h.name, "A");
    assert_string_equal(h.value, "again");
    size_t len = 99;
    assert_string_equal((const char *)http_request_body(r, &len), "");
    assert_int_equal(len, 0);
    http_respond(r, 204, NULL, 0, "ignored", 7);
    buf_put_u8(&f.out, 0);
    assert_non_null(strstr((char *)f.out.data, "HTTP/1.1 204 No Content\r\n"));
    assert_null(strstr((char *)f.out.data, "Content-Length"));
    assert_null(strstr((char *)f.out.data, "ignored"));
    fake_complete_writes(&f);
    fake_free(&f);
}

static void close_response_ends_a_pipeline(void **state)
{
    (void)state;
    fake f;
    fake_init(&f, 3, false);
    f.defer = true;
    const char *in = "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 "
                     "HTTP/1.1\r\nHost: h\r\n\r\n";
    http_conn_feed(&f.c, in, strlen(in));
    assert_int_equal(f.nheld, 3);
    echo(f.held[1]); /* /2 answered early: waits behind /1 */
    assert_false(f.write_pending);
    http_header close_hdr[] = {{"Connection", "close"}};
    http_respond(f.held[0], 200, close_hdr, 1, "bye", 3);
    assert_true(f.write_pending);
    fake_complete_writes(&f);
    assert_true(f.done); /* /2's answer is never written */
    buf_put_u8(&f.out, 0);
    assert_non_null(strstr((char *)f.out.data, "Connection: close"));
    assert_null(strstr((char *)f.out.data, "GET /2"));
    http_conn_close(&f.c);
    assert_true(http_request_disconnected(f.held[2]));
    echo(f.held[2]); /* orphan: freed */
    http_conn_shared_release(&f.sh);
    buf_free(&f.out);
}

static void body_budget_is_shared_by_connections(void **state)
{
    (void)state;
    fake a, b;
    fake_init(&a, 1, false);
    a.defer = true;
    a.sh.body_budget = 48 * 1024;
    fake_init(&b, 1, false);
    http_conn_init(&b.c, &a.sh); /* both connections of one server */
    char body[40 * 1024];
    memset(body, 'x', sizeof body);
    const char *head = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 40960\r\n\r\n";
    http_conn_feed(&a.c, head, strlen(head));
    http_conn_feed(&a.c, body, sizeof body);
    assert_int_equal(a.nheld, 1);
    assert_true(a.sh.body_bytes >= sizeof body);
    http_conn_feed(&b.c, head, strlen(head));
    http_conn_feed(&b.c, body, sizeof body); /* does not fit beside the first */
    assert_true(b.write_pending);
    buf_put_u8(&b.out, 0);
    assert_non_null(strstr((char *)b.out.data, "HTTP/1.1 503 Service Unavailable"));
    assert_non_null(strstr((char *)b.out.data, "ServiceUnavailableException"));
    fake_complete_writes(&b);
    assert_true(b.done);
    echo(a.held[0]); /* answering frees the body: room again */
    fake_complete_writes(&a);
    assert_int_equal(a.sh.body_bytes, 0);
    fake_free(&b);
    fake_free(&a);
}

/* A finished request is kept for the next one; nothing of it shows through. */
static void spare_requests_start_clean(void **state)
{
    (void)state;
    fake f;
    fake_init(&f, 1, true);
    f.defer = true;
    const char *a = "POST /a?q=1 HTTP/1.1\r\nHost: h\r\nX-One: 1\r\nContent-Length: 3\r\n\r\nabc";
    http_conn_feed(&f.c, a, strlen(a));
    assert_int_equal(f.nheld, 1);
    assert_string_equal(http_request_header(f.held[0], "x-one"), "1");
    assert_non_null(arena_alloc(http_request_arena(f.held[0]), 20000));
    echo(f.held[0]);
    assert_int_equal(f.sh.nspare, 1);

    const char *b = "GET /b HTTP/1.1\r\nHost: h\r\n\r\n";
    http_conn_feed(&f.c, b, strlen(b));
    assert_int_equal(f.nheld, 2);
    assert_int_equal(f.sh.nspare, 0); /* taken again */
    http_request *r = f.held[1];
    assert_null(http_request_header(r, "X-One"));
    assert_int_equal(http_request_header_count(r), 1);
    assert_string_equal(http_request_method(r), "GET");
    assert_string_equal(http_request_query(r), "");
    size_t len = 99;
    http_request_body(r, &len);
    assert_int_equal(len, 0);
    assert_false(http_request_disconnected(r));
    echo(r);
    assert_int_equal(f.sh.nspare, 1);

    /* A request whose header block outgrew the kept size goes back to malloc. */
    char big[6000];
    int n = snprintf(big, sizeof big, "GET /c HTTP/1.1\r\nHost: h\r\nX-Big: %05000d\r\n\r\n", 7);
    http_conn_feed(&f.c, big, (size_t)n);
    assert_int_equal(f.nheld, 3);
    echo(f.held[2]);
    assert_int_equal(f.sh.nspare, 0);
    buf_put_u8(&f.out, 0);
    assert_non_null(strstr((char *)f.out.data, "POST /a ?q=1 [3:abc]"));
    assert_non_null(strstr((char *)f.out.data, "GET /b ? [0:]"));
    assert_non_null(strstr((char *)f.out.data, "GET /c ? [0:]"));
    fake_free(&f);
    assert_int_equal(f.sh.nspare, 0);
}

/* Requests handed to the handler, held unanswered (spare_requests_are_bounded). */
typedef struct {
    http_request *req[80];
    int n;
} held_all;

static void hold_request(http_request *req, void *data)
{
    held_all *h = data;
    assert_true(h->n < 80);
    h->req[h->n++] = req;
}

/* A server keeps at most SPARE_REQUESTS_MAX (64) spares: 72 requests in flight over nine
 * connections of one server, all answered, leave 64 kept and free the rest. */
static void spare_requests_are_bounded(void **state)
{
    (void)state;
    enum { CONNS = 9, EACH = 8 };
    const char *req = "GET /n HTTP/1.1\r\nHost: h\r\n\r\n";
    fake *f = calloc(CONNS, sizeof *f);
    held_all h = {.n = 0};
    assert_non_null(f);
    for (int i = 0; i < CONNS; i++) {
        fake_init(&f[i], EACH, true);
        if (i > 0)
            http_conn_init(&f[i].c, &f[0].sh); /* all connections of one server */
    }
    f[0].sh.handler = hold_request;
    f[0].sh.handler_data = &h;
    for (int i = 0; i < CONNS; i++)
        for (int k = 0; k < EACH; k++)
            http_conn_feed(&f[i].c, req, strlen(req));
    assert_int_equal(h.n, CONNS * EACH);
    assert_int_equal(f[0].sh.nspare, 0);
    for (int i = 0; i < h.n; i++)
        echo(h.req[i]);
    assert_int_equal(f[0].sh.nspare, 64);
    for (int i = CONNS - 1; i >= 0; i--)
        fake_free(&f[i]);
    assert_int_equal(f[0].sh.nspare, 0);
    free(f);
}

/* Under AddressSanitizer a spare request's buffers are poisoned: a handler that reads its
 * request after answering it is still reported, although the memory was not given back. */
#ifdef STRATA_ASAN
static void read_answered_request(void *arg)
{
    (void)arg;
    fake f;
    fake_init(&f, 1, true);
    f.defer = true;
    const char *a = "GET /gone HTTP/1.1\r\nHost: h\r\n\r\n";
    http_conn_feed(&f.c, a, strlen(a));
    volatile const char *path = http_request_path(f.held[0]);
    echo(f.held[0]);
    if (f.sh.nspare != 1)
        _exit(0); /* not kept: this test would prove nothing; fail it */
    (void)path[0]; /* must abort here */
}
#endif

static void spare_request_use_after_respond_is_reported(void **state)
{
    (void)state;
    EXPECT_ASAN_DEATH(read_answered_request);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(any_split_gives_the_same_responses),
        cmocka_unit_test(phases_follow_the_request),
        cmocka_unit_test(eof_answers_complete_requests_only),
        cmocka_unit_test(stash_is_bounded_and_requests_survive_close),
        cmocka_unit_test(headers_are_trimmed_and_iterable),
        cmocka_unit_test(close_response_ends_a_pipeline),
        cmocka_unit_test(body_budget_is_shared_by_connections),
        cmocka_unit_test(spare_requests_start_clean),
        cmocka_unit_test(spare_requests_are_bounded),
        cmocka_unit_test(spare_request_use_after_respond_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
