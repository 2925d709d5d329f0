/*
 * The socket-free HTTP/1.1 connection state machine (see http_conn.h) and the request
 * object the handler sees.
 *
 * Parsing is one request at a time: on_message_complete pauses http-parser, so bytes
 * after a complete request stay unparsed (in the stash) until the request queue has
 * room again (max_pipeline). That is what keeps pipelined requests in order and bounds
 * the memory one connection can make us hold: at most max_pipeline requests, one
 * partial request and a stash of about one read.
 */
#include "node/http/http_conn.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "storage/base/buf.h"
#include "storage/base/poison.h"

/* Stop reading once this much is stashed; a read adds at most one read buffer more. */
#define STASH_SOFT_MAX (16 * 1024)
/* A transport that keeps feeding past the soft bound is broken; drop the connection. */
#define STASH_HARD_MAX (1024 * 1024)
/* A response head carries the handler's headers; anything beyond this is a bug there. */
#define RESPONSE_HEAD_MAX (256 * 1024)
/* Responses are written with uv_buf_t (32-bit lengths); DynamoDB's are at most 16 MB. */
#define RESPONSE_BODY_MAX (1u << 30)
/* First body allocation: bodies grow with the bytes that really arrive. */
#define BODY_INITIAL (16 * 1024)
/* Spare requests a server keeps (see http_conn_shared), and the largest header block or
 * response head whose buffer a spare keeps: a larger one goes back to malloc. */
#define SPARE_REQUESTS_MAX 64
#define SPARE_BUF_MAX      4096

typedef enum {
    REQ_PARSING,   /* c->cur */
    REQ_QUEUED,    /* complete, not yet handed to the handler */
    REQ_HANDLER,   /* with the handler */
    REQ_RESPONDED, /* response built, waiting for its turn or being written */
} req_state;

typedef enum { LAST_NONE, LAST_FIELD, LAST_VALUE } header_cb;

struct http_request {
    http_conn *conn; /* NULL once the connection closed while the handler held us */
    http_request *next;
    req_state state;
    bool headers_done;
    bool url_done;
    bool close_after; /* the connection ends after this response */
    bool head_method;
    header_cb last_cb;
    const char *method;
    /* The header block: url NUL path NUL query NUL (name NUL value NUL)*. */
    buf hdr;
    size_t url_len;
    size_t hdr_bytes; /* bytes of the header section as received, for the bound */
    size_t path_off;
    size_t query_off;
    size_t fields_off;
    unsigned nfields;
    http_header *headers;
    uint8_t *body;
    size_t body_len;
    size_t body_cap;
    arena arena;
    char peer[HTTP_PEER_MAX];
    /* The response. */
    buf out_head;
    const uint8_t *out_body;
    size_t out_body_len;
    uint8_t *out_body_owned;
};

static void pump(http_conn *c);
static void stash_release(http_conn *c);
static void request_free(http_request *r);

/* Forgets a partly received request; the parser restarts clean (never inside the parser). */
static void drop_partial(http_conn *c)
{
    if (c->cur == NULL)
        return;
    request_free(c->cur);
    c->cur = NULL;
    c->send_continue = false;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
}

/* No request after the ones already complete will be parsed (never call inside the parser). */
static void stop_parsing(http_conn *c)
{
    c->closing = true;
    c->send_continue = false;
    drop_partial(c);
    stash_release(c);
}

/* ---------------------------------------------------------------- requests */

/*
 * Gives a new buffer the capacity nearly every request needs (a client's header block,
 * a response head), so that it does not grow by realloc from 64 bytes: that was about
 * six reallocs per request. Only a hint: when it cannot be had, the failure is forgotten
 * and the buffer grows on demand as before.
 */
static void buf_presize(buf *b, size_t n)
{
    if (n <= b->limit && !buf_reserve(b, n))
        b->failed = false;
}

/*
 * A spare request, or NULL. Every field but the two kept buffers is zero again. Reuse
 * matters beyond the calloc it saves: the header buffer is 1 KiB, which glibc serves from
 * its large bins after consolidating every small free chunk (malloc_consolidate was about
 * 2% of a node's CPU under a PutItem load).
 */
static http_request *take_spare(http_conn_shared *sh)
{
    http_request *r = sh->spare;
    if (r == NULL)
        return NULL;
    sh->spare = r->next;
    sh->nspare--;
    buf hdr = r->hdr, out_head = r->out_head;
    UNPOISON(hdr.data, hdr.cap);
    UNPOISON(out_head.data, out_head.cap);
    memset(r, 0, sizeof *r);
    r->hdr = hdr;
    r->out_head = out_head;
    buf_reset(&r->hdr);
    buf_reset(&r->out_head);
    return r;
}

static http_request *request_new(http_conn *c)
{
    http_request *r = take_spare(c->sh);
    if (r == NULL) {
        r = calloc(1, sizeof *r);
        if (r == NULL)
            return NULL;
        /* The block holds the url twice (whole, then split at '?') plus one NUL a piece. */
        buf_init(&r->hdr, 2 * c->sh->max_header_bytes + 4 * (size_t)c->sh->max_headers + 64);
        buf_init(&r->out_head, RESPONSE_HEAD_MAX);
        buf_presize(&r->hdr, 1024);
        buf_presize(&r->out_head, 512);
    }
    r->conn = c;
    r->state = REQ_PARSING;
    r->method = "GET";
    arena_init(&r->arena, c->sh->arena_limit);
    memcpy(r->peer, c->peer, sizeof r->peer);
    return r;
}

/* Gives the request's body memory back to the server-wide budget (once). */
static void request_uncharge(http_request *r)
{
    if (r->conn != NULL) {
        assert(r->conn->sh->body_bytes >= r->body_cap);
        r->conn->sh->body_bytes -= r->body_cap;
    }
    r->conn = NULL;
}

/* Keeps `r`, whose other memory is freed, as a spare of `sh` if there is room. */
static bool keep_spare(http_conn_shared *sh, http_request *r)
{
    if (sh->nspare >= SPARE_REQUESTS_MAX || r->hdr.cap > SPARE_BUF_MAX ||
        r->out_head.cap > SPARE_BUF_MAX)
        return false;
    r->next = sh->spare;
    sh->spare = r;
    sh->nspare++;
    /* The buffers, not the struct: LeakSanitizer does not follow pointers kept in
     * poisoned memory. The strings a handler got from the request (path, headers) are
     * in the header buffer. */
    POISON(r->hdr.data, r->hdr.cap);
    POISON(r->out_head.data, r->out_head.cap);
    return true;
}

static void request_free(http_request *r)
{
    /* A request detached from its closed connection may outlive the server: not kept. */
    http_conn_shared *sh = r->conn != NULL ? r->conn->sh : NULL;
    request_uncharge(r);
    free(r->headers);
    free(r->body);
    free(r->out_body_owned);
    arena_free(&r->arena);
    if (sh != NULL && keep_spare(sh, r))
        return;
    buf_free(&r->hdr);
    buf_free(&r->out_head);
    free(r);
}

void http_conn_shared_release(http_conn_shared *sh)
{
    while (sh->spare != NULL) {
        http_request *r = take_spare(sh);
        buf_free(&r->hdr);
        buf_free(&r->out_head);
        free(r);
    }
    assert(sh->nspare == 0);
}

static void queue_append(http_conn *c, http_request *r)
{
    r->next = NULL;
    if (c->tail != NULL)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->nqueued++;
}

static http_request *queue_pop(http_conn *c)
{
    http_request *r = c->head;
    assert(r != NULL);
    c->head = r->next;
    if (c->head == NULL)
        c->tail = NULL;
    c->nqueued--;
    r->next = NULL;
    return r;
}

/* ---------------------------------------------------------------- responses */

static const struct {
    int status;
    const char *reason;
} reasons[] = {
    {100, "Continue"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {304, "Not Modified"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {411, "Length Required"},
    {413, "Payload Too Large"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

const char *http_status_reason(int status)
{
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].status == status)
            return reasons[i].reason;
    return "Unknown";
}

static bool has_crlf(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

/* A header name against a known one, any case. Every request passes here several times
 * per header: the first letter rules most out before strcasecmp. */
static bool name_is(const char *name, const char *known)
{
    return (name[0] | 0x20) == (known[0] | 0x20) && strcasecmp(name, known) == 0;
}

/* Names the server sets itself; a handler's own copy is ignored. */
static bool server_owned_header(const char *name)
{
    return name_is(name, "Content-Length") || name_is(name, "Date") ||
           name_is(name, "Connection") || name_is(name, "Transfer-Encoding");
}

static bool status_has_body(int status)
{
    return !(status == 204 || status == 304 || (status >= 100 && status < 200));
}

static void put_str(buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

static void put_uint(buf *b, uint64_t v)
{
    char t[20];
    size_t n = 0;
    do {
        t[sizeof t - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    buf_append(b, t + sizeof t - n, n);
}

/*
 * Fills r->out_head. The body is attached by the caller. Returns false if the head did
 * not fit (only a handler passing absurd headers gets there). Every response passes
 * here, so it appends pieces rather than calling buf_printf: formatting the head with
 * printf (two vsnprintf calls per line) cost about 13,000 instructions per request.
 */
static bool build_head(http_request *r, http_conn_shared *sh, int status,
                       const http_header *headers, size_t nheaders, size_t body_len)
{
    buf *b = &r->out_head;
    buf_reset(b);
    put_str(b, "HTTP/1.1 ");
    put_uint(b, (uint64_t)status);
    buf_put_u8(b, ' ');
    put_str(b, http_status_reason(status));
    put_str(b, "\r\n");
    for (size_t i = 0; i < nheaders; i++) {
        const char *name = headers[i].name;
        const char *value = headers[i].value ? headers[i].value : "";
        if (name == NULL || name[0] == '\0' || has_crlf(name) || has_crlf(value))
            continue;
        if (name_is(name, "Connection") && strcasecmp(value, "close") == 0)
            r->close_after = true;
        if (server_owned_header(name))
            continue;
        put_str(b, name);
        put_str(b, ": ");
        put_str(b, value);
        put_str(b, "\r\n");
    }
    if (status_has_body(status)) {
        put_str(b, "Content-Length: ");
        put_uint(b, body_len);
        put_str(b, "\r\n");
    }
    put_str(b, "Date: ");
    put_str(b, sh->date(sh));
    put_str(b, "\r\n");
    if (sh->stopping)
        r->close_after = true;
    put_str(b, r->close_after ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n");
    return !b->failed;
}

/* The response of last resort, when building the real one ran out of memory. */
static void build_fallback_500(http_request *r, http_conn_shared *sh)
{
    free(r->out_body_owned);
    r->out_body_owned = NULL;
    r->out_body = NULL;
    r->out_body_len = 0;
    r->close_after = true;
    buf_free(&r->out_head);
    buf_init(&r->out_head, RESPONSE_HEAD_MAX);
    if (!build_head(r, sh, 500, NULL, 0, 0))
        r->conn->broken = true;
}

static void respond(http_request *r, int status, const http_header *headers, size_t nheaders,
                    const void *body, size_t len, bool copy)
{
    assert(r->state == REQ_HANDLER);
    assert(status >= 200 && status <= 599);
    if (status < 200 || status > 599 || len > RESPONSE_BODY_MAX) {
        status = 500; /* a handler bug: never put it on the wire */
        len = 0;
    }
    http_conn *c = r->conn;
    if (c == NULL) {
        request_free(r); /* the client went away while the handler worked */
        return;
    }
    r->state = REQ_RESPONDED;
    /* A HEAD response's Content-Length still says what a GET would have carried. */
    size_t declared = status_has_body(status) ? len : 0;
    if (!status_has_body(status) || r->head_method)
        len = 0;
    if (len > 0 && copy) {
        r->out_body_owned = malloc(len);
        if (r->out_body_owned == NULL) {
            build_fallback_500(r, c->sh);
            pump(c);
            return;
        }
        memcpy(r->out_body_owned, body, len);
        body = r->out_body_owned;
    }
    r->out_body = body;
    r->out_body_len = len;
    if (!build_head(r, c->sh, status, headers, nheaders, declared))
        build_fallback_500(r, c->sh);
    if (r->close_after)
        stop_parsing(c); /* parse nothing after a response that closes */
    pump(c);
}

void http_respond(http_request *req, int status, const http_header *headers, size_t nheaders,
                  const void *body, size_t len)
{
    respond(req, status, headers, nheaders, body, len, true);
}

void http_respond_arena(http_request *req, int status, const http_header *headers, size_t nheaders,
                        const void *body, size_t len)
{
    respond(req, status, headers, nheaders, body, len, false);
}

/*
 * Ends the connection's request stream with an error response produced by the server
 * (400, 408, 413, 431). It goes after the responses already owed, then the connection
 * closes.
 */
static void queue_error(http_conn *c, int status, const char *type, const char *message)
{
    stop_parsing(c);
    c->sh->errors_total++;
    http_request *r = request_new(c);
    if (r == NULL) {
        c->broken = true;
        return;
    }
    char body[512];
    int n =
        snprintf(body, sizeof body,
                 "{\"__type\":\"com.amazon.coral.service#%s\",\"message\":\"%s\"}", type, message);
    if (n < 0 || (size_t)n >= sizeof body)
        n = snprintf(body, sizeof body, "{\"__type\":\"com.amazon.coral.service#%s\"}", type);
    char crc[16];
    snprintf(crc, sizeof crc, "%u", (unsigned)http_crc32(body, (size_t)n));
    http_header h[] = {
        {"Content-Type", "application/x-amz-json-1.0"},
        {"x-amz-crc32", crc},
    };
    r->state = REQ_RESPONDED;
    r->close_after = true;
    queue_append(c, r);
    r->out_body_owned = malloc((size_t)n);
    if (r->out_body_owned == NULL || !build_head(r, c->sh, status, h, 2, (size_t)n)) {
        c->broken = true;
        return;
    }
    memcpy(r->out_body_owned, body, (size_t)n);
    r->out_body = r->out_body_owned;
    r->out_body_len = (size_t)n;
}

/* ---------------------------------------------------------------- parser callbacks */

static http_conn *conn_of(http_parser *p)
{
    return p->data;
}

static int fail(http_conn *c, int status, const char *msg)
{
    c->fail_status = status;
    c->fail_msg = msg;
    return -1;
}

static int on_message_begin(http_parser *p)
{
    http_conn *c = conn_of(p);
    assert(c->cur == NULL);
    c->cur = request_new(c);
    if (c->cur == NULL)
        return fail(c, 500, "out of memory");
    c->started++;
    c->served = true;
    return 0;
}

static int count_header_bytes(http_conn *c, size_t len)
{
    http_request *r = c->cur;
    r->hdr_bytes += len;
    if (r->hdr_bytes > c->sh->max_header_bytes)
        return fail(c, 431, "Request header section too large");
    return 0;
}

static int append_hdr(http_conn *c, const char *at, size_t len)
{
    if (memchr(at, '\0', len) != NULL)
        return fail(c, 400, "NUL byte in request header section");
    buf_append(&c->cur->hdr, at, len);
    if (c->cur->hdr.failed)
        return fail(c, 431, "Request header section too large");
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    if (count_header_bytes(c, len) != 0 || append_hdr(c, at, len) != 0)
        return -1;
    c->cur->url_len += len;
    return 0;
}

/* The url is complete: lay out "url NUL path NUL query NUL" at the start of the block. */
static int finish_url(http_conn *c)
{
    http_request *r = c->cur;
    if (r->url_done)
        return 0;
    r->url_done = true;
    buf *b = &r->hdr;
    buf_put_u8(b, 0);
    r->path_off = b->len;
    if (!buf_reserve(b, r->url_len + 2))
        return fail(c, 431, "Request header section too large");
    const char *url = (const char *)b->data;
    const char *q = memchr(url, '?', r->url_len);
    size_t path_len = q ? (size_t)(q - url) : r->url_len;
    /* buf_reserve made room, so appending from our own data cannot move it mid-copy. */
    buf_append(b, url, path_len);
    buf_put_u8(b, 0);
    r->query_off = b->len;
    if (q != NULL)
        buf_append(b, q + 1, r->url_len - path_len - 1);
    buf_put_u8(b, 0);
    r->fields_off = b->len;
    return b->failed ? fail(c, 431, "Request header section too large") : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    http_request *r = c->cur;
    if (r->headers_done)
        return 0; /* trailers of a chunked body: not kept */
    if (finish_url(c) != 0 || count_header_bytes(c, len) != 0)
        return -1;
    if (r->last_cb != LAST_FIELD) {
        if (r->last_cb == LAST_VALUE)
            buf_put_u8(&r->hdr, 0);
        if (++r->nfields > c->sh->max_headers)
            return fail(c, 431, "Too many request headers");
        r->last_cb = LAST_FIELD;
    }
    return append_hdr(c, at, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    http_request *r = c->cur;
    if (r->headers_done)
        return 0;
    if (count_header_bytes(c, len) != 0)
        return -1;
    if (r->last_cb == LAST_FIELD)
        buf_put_u8(&r->hdr, 0);
    r->last_cb = LAST_VALUE;
    return append_hdr(c, at, len);
}

static bool is_ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* Splits the block into name/value pairs, trimming values in place. */
static int index_headers(http_conn *c)
{
    http_request *r = c->cur;
    if (r->last_cb == LAST_FIELD)
        buf_put_u8(&r->hdr, 0); /* a name with no value callback at all */
    if (r->last_cb != LAST_NONE)
        buf_put_u8(&r->hdr, 0);
    if (r->hdr.failed)
        return fail(c, 431, "Request header section too large");
    if (r->nfields == 0)
        return 0;
    r->headers = calloc(r->nfields, sizeof *r->headers);
    if (r->headers == NULL)
        return fail(c, 500, "out of memory");
    char *p = (char *)r->hdr.data + r->fields_off;
    char *end = (char *)r->hdr.data + r->hdr.len;
    for (unsigned i = 0; i < r->nfields; i++) {
        assert(p < end);
        r->headers[i].name = p;
        /* http-parser (not strict) lets spaces into names; RFC 9112 5.1 says reject. */
        if (*p == '\0' || strpbrk(p, " \t") != NULL)
            return fail(c, 400, "Malformed HTTP header name");
        p += strlen(p) + 1;
        assert(p < end);
        char *v = p;
        size_t vlen = strlen(v);
        p += vlen + 1;
        while (vlen > 0 && is_ows(v[vlen - 1]))
            v[--vlen] = '\0';
        while (is_ows(*v))
            v++;
        r->headers[i].value = v;
    }
    (void)end;
    return 0;
}

/*
 * Grows the body buffer with the bytes that really arrived, charging the growth to the
 * server-wide budget of body memory. 0, or the status to fail with (503 over budget).
 */
static int body_reserve(http_conn *c, http_request *r, size_t extra, size_t want_cap_hint)
{
    size_t need = r->body_len + extra + 1; /* + the NUL after the body */
    if (need <= r->body_cap)
        return 0;
    size_t cap = r->body_cap ? r->body_cap : BODY_INITIAL;
    while (cap < need)
        cap *= 2;
    if (want_cap_hint != 0 && cap > want_cap_hint)
        cap = want_cap_hint > need ? want_cap_hint : need;
    size_t grow = cap - r->body_cap;
    http_conn_shared *sh = c->sh;
    if (sh->body_budget != 0 && grow > sh->body_budget - sh->body_bytes)
        return 503;
    uint8_t *nb = realloc(r->body, cap);
    if (nb == NULL)
        return 500;
    r->body = nb;
    r->body_cap = cap;
    sh->body_bytes += grow;
    return 0;
}

static bool wants_continue(const http_request *r)
{
    for (unsigned i = 0; i < r->nfields; i++)
        if (name_is(r->headers[i].name, "Expect") &&
            strcasecmp(r->headers[i].value, "100-continue") == 0)
            return true;
    return false;
}

/*
 * The request's transfer codings, in order over every Transfer-Encoding line (RFC 9112
 * 6.1): 0 when they are exactly "chunked"; 400 when chunked is missing, not the last
 * coding, or applied twice (6.3: the body's length cannot be determined); 501 for a
 * coding before it that the server does not understand (gzip, deflate, ...).
 */
static int transfer_coding_status(const http_request *r)
{
    unsigned chunked = 0, other = 0;
    bool chunked_last = false;
    for (unsigned i = 0; i < r->nfields; i++) {
        if (strcasecmp(r->headers[i].name, "Transfer-Encoding") != 0)
            continue;
        for (const char *v = r->headers[i].value; *v != '\0';) {
            size_t n = strcspn(v, ",");
            size_t lead = 0, len = n;
            while (lead < len && is_ows(v[lead]))
                lead++;
            while (len > lead && is_ows(v[len - 1]))
                len--;
            if (len > lead) {
                chunked_last = len - lead == 7 && strncasecmp(v + lead, "chunked", 7) == 0;
                chunked += chunked_last;
                other += !chunked_last;
            }
            v += n + (v[n] == ',');
        }
    }
    if (chunked != 1 || !chunked_last)
        return 400;
    return other == 0 ? 0 : 501;
}

/*
 * What http-parser lets through but RFC 9112 says a server must refuse, checked once
 * the header section is complete: a version other than HTTP/1.0 or 1.1 (505); an
 * HTTP/1.1 request without exactly one Host (3.2: 400); a transfer coding other than
 * one final chunked (6.1 and 6.3: 400 or 501), or any in HTTP/1.0 (6.1: the framing is
 * faulty, 400). Each ends the connection: what follows cannot be framed safely. (A
 * folded header line, 5.2, is unfolded by http-parser: the continuation's leading
 * blank stays and its CRLF goes, which 5.2 allows.)
 */
static int check_framing(http_conn *c, const http_parser *p)
{
    const http_request *r = c->cur;
    if (p->http_major != 1 || p->http_minor > 1)
        return fail(c, 505, "HTTP version not supported: only HTTP/1.0 and HTTP/1.1");
    unsigned hosts = 0;
    bool te = false;
    for (unsigned i = 0; i < r->nfields; i++) {
        const char *name = r->headers[i].name;
        hosts += name_is(name, "Host");
        te |= name_is(name, "Transfer-Encoding");
    }
    if (p->http_minor == 1 && hosts != 1)
        return fail(c, 400,
                    hosts == 0 ? "HTTP/1.1 request without a Host header"
                               : "More than one Host header");
    if (te && p->http_minor == 0)
        return fail(c, 400, "Transfer-Encoding in an HTTP/1.0 request");
    int status = te ? transfer_coding_status(r) : 0;
    if (status == 400)
        return fail(c, 400, "Transfer-Encoding must end in one chunked coding");
    if (status == 501)
        return fail(c, 501, "Transfer coding not implemented: only chunked is");
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    http_conn *c = conn_of(p);
    http_request *r = c->cur;
    if (finish_url(c) != 0 || index_headers(c) != 0 || check_framing(c, p) != 0)
        return -1;
    r->headers_done = true;
    r->method = http_method_str((enum http_method)p->method);
    r->head_method = p->method == HTTP_HEAD;
    r->close_after = !http_should_keep_alive(p) || p->upgrade;
    bool chunked = (p->flags & F_CHUNKED) != 0;
    bool has_length = !chunked && p->content_length != ULLONG_MAX && p->content_length > 0;
    if (has_length && p->content_length > c->sh->max_body)
        return fail(c, 413, "Request body too large");
    /* Interim 100 only when nothing else is owed, so it cannot overtake a response. */
    if ((chunked || has_length) && c->head == NULL && wants_continue(r))
        c->send_continue = true;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    http_request *r = c->cur;
    if (len > c->sh->max_body - r->body_len)
        return fail(c, 413, "Request body too large");
    /* http-parser has already subtracted this piece from content_length. */
    size_t hint = (p->flags & F_CHUNKED) ? 0 : r->body_len + len + (size_t)p->content_length + 1;
    int status = body_reserve(c, r, len, hint);
    if (status != 0)
        return fail(c, status,
                    status == 503 ? "Too much request data in flight; retry" : "out of memory");
    memcpy(r->body + r->body_len, at, len);
    r->body_len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    http_conn *c = conn_of(p);
    http_request *r = c->cur;
    c->cur = NULL;
    c->send_continue = false;
    if (r->body != NULL)
        r->body[r->body_len] = '\0';
    r->state = REQ_QUEUED;
    queue_append(c, r);
    if (r->close_after)
        c->closing = true; /* the client said this is its last request */
    /* Hold the next request back until this one has its turn (see the top comment). */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---------------------------------------------------------------- the state machine */

static bool can_parse(const http_conn *c)
{
    return !c->closing && !c->broken && c->nqueued < c->sh->max_pipeline;
}

static void parse_failed(http_conn *c, enum http_errno e)
{
    int status = c->fail_status;
    const char *msg = c->fail_msg;
    if (status == 0) {
        status = e == HPE_HEADER_OVERFLOW ? 431 : 400;
        msg = e == HPE_HEADER_OVERFLOW ? "Request header section too large"
                                       : "Malformed HTTP request";
    }
    if (status == 500) {
        c->broken = true; /* out of memory: nothing sensible to send */
        return;
    }
    const char *type = status == 413   ? "RequestEntityTooLarge"
                       : status == 431 ? "RequestHeaderFieldsTooLarge"
                       : status == 503 ? "ServiceUnavailableException"
                       : status == 501 ? "NotImplementedException"
                       : status == 505 ? "HttpVersionNotSupportedException"
                                       : "BadRequestException";
    queue_error(c, status, type, msg);
}

/* Runs the parser over p[0..n); returns the bytes it consumed (all of them on error). */
static size_t run_parser(http_conn *c, const uint8_t *p, size_t n)
{
    c->fail_status = 0;
    c->fail_msg = NULL;
    size_t used = http_parser_execute(&c->parser, &parser_settings, (const char *)p, n);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_PAUSED) {
        http_parser_pause(&c->parser, 0);
        return used;
    }
    if (e != HPE_OK) {
        parse_failed(c, e);
        return n;
    }
    if (used < n && !c->closing)
        queue_error(c, 400, "BadRequestException", "Malformed HTTP request");
    return n;
}

static bool stash_append(http_conn *c, const uint8_t *p, size_t n)
{
    if (n > STASH_HARD_MAX - c->stash_len)
        return false;
    if (c->stash_len + n > c->stash_cap) {
        size_t cap = c->stash_cap ? c->stash_cap : 4096;
        while (cap < c->stash_len + n)
            cap *= 2;
        uint8_t *ns = realloc(c->stash, cap);
        if (ns == NULL)
            return false;
        c->stash = ns;
        c->stash_cap = cap;
    }
    memcpy(c->stash + c->stash_len, p, n);
    c->stash_len += n;
    return true;
}

static void stash_release(http_conn *c)
{
    free(c->stash);
    c->stash = NULL;
    c->stash_len = 0;
    c->stash_cap = 0;
}

/* Parses stashed bytes if the queue has room. True if anything changed. */
static bool parse_stash(http_conn *c)
{
    if (c->stash_len == 0 || !can_parse(c))
        return false;
    size_t used = run_parser(c, c->stash, c->stash_len);
    if (used >= c->stash_len || c->closing || c->broken) {
        stash_release(c); /* an idle connection keeps no buffer */
    } else {
        memmove(c->stash, c->stash + used, c->stash_len - used);
        c->stash_len -= used;
    }
    if (c->eof && c->stash_len == 0)
        drop_partial(c); /* cut short by the client's EOF: never answered */
    return true;
}

/* Hands the oldest complete request not yet given to the handler. True if one was. */
static bool dispatch_one(http_conn *c)
{
    if (c->finished || c->broken)
        return false; /* nobody would read the answer */
    for (http_request *r = c->head; r != NULL; r = r->next) {
        if (r->state != REQ_QUEUED)
            continue;
        r->state = REQ_HANDLER;
        c->sh->requests_total++;
        c->sh->handler(r, c->sh->handler_data); /* may respond, and so re-enter pump */
        return true;
    }
    return false;
}

static const char continue_bytes[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* Starts the next write if none is outstanding. True if one was started. */
static bool flush(http_conn *c)
{
    if (c->writing || c->broken || c->finished)
        return false;
    if (c->send_continue) {
        c->send_continue = false;
        c->writing = true;
        c->writing_continue = true;
        http_iov iov = {continue_bytes, sizeof continue_bytes - 1};
        c->sh->io->write(c, &iov, 1);
        return true;
    }
    http_request *r = c->head;
    if (r == NULL || r->state != REQ_RESPONDED)
        return false;
    c->writing = true;
    http_iov iov[2] = {{r->out_head.data, r->out_head.len}, {r->out_body, r->out_body_len}};
    c->sh->io->write(c, iov, r->out_body_len > 0 ? 2 : 1);
    return true;
}

static void pump(http_conn *c)
{
    if (c->in_pump) {
        c->pump_again = true; /* the outer pump loops once more */
        return;
    }
    c->in_pump = true;
    do {
        c->pump_again = false;
        if (flush(c))
            c->pump_again = true;
        if (parse_stash(c))
            c->pump_again = true;
        if (dispatch_one(c))
            c->pump_again = true;
    } while (c->pump_again && !c->broken);
    c->in_pump = false;
    c->sh->io->update(c); /* last: the transport may close and free the connection */
}

void http_conn_init(http_conn *c, http_conn_shared *sh)
{
    memset(c, 0, sizeof *c);
    c->sh = sh;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
}

void http_conn_feed(http_conn *c, const void *data, size_t len)
{
    assert(!c->in_pump);
    const uint8_t *p = data;
    if (c->closing || c->broken || c->eof || len == 0)
        return; /* nothing more will be parsed: the bytes are dropped */
    /* Parse straight from the caller's buffer when possible; stash only the rest. */
    c->in_pump = true;
    if (c->stash_len == 0 && can_parse(c)) {
        size_t used = run_parser(c, p, len);
        p += used;
        len -= used;
    }
    if (len > 0 && !c->closing && !c->broken && !stash_append(c, p, len))
        c->broken = true;
    c->in_pump = false;
    pump(c);
}

void http_conn_eof(http_conn *c)
{
    c->eof = true;
    drop_partial(c); /* a request cut short is never answered */
    /* Complete requests still in the stash are answered: a client may half-close. */
    pump(c);
}

void http_conn_write_done(http_conn *c, int status)
{
    assert(c->writing);
    c->writing = false;
    if (c->writing_continue) {
        c->writing_continue = false;
    } else {
        http_request *r = queue_pop(c);
        assert(r->state == REQ_RESPONDED);
        if (r->close_after) {
            stop_parsing(c);
            c->finished = true; /* later pipelined requests are never answered */
        }
        request_free(r);
    }
    if (status < 0)
        c->broken = true;
    pump(c);
}

void http_conn_timeout(http_conn *c)
{
    switch (http_conn_phase(c)) {
    case HTTP_PHASE_HEADER:
        if (c->cur != NULL) {
            queue_error(c, 408, "RequestTimeoutException", "Request header timeout");
        } else {
            stop_parsing(c); /* connected but sent nothing: no one to tell */
        }
        break;
    case HTTP_PHASE_BODY:
        queue_error(c, 408, "RequestTimeoutException", "Request body timeout");
        break;
    case HTTP_PHASE_IDLE:
        stop_parsing(c);
        break;
    default:
        return; /* the phase moved on since the timer was armed */
    }
    pump(c);
}

void http_conn_stop(http_conn *c)
{
    stop_parsing(c);
    pump(c);
}

void http_conn_close(http_conn *c)
{
    assert(!c->in_pump);
    if (c->cur != NULL)
        request_free(c->cur);
    c->cur = NULL;
    while (c->head != NULL) {
        http_request *r = queue_pop(c);
        if (r->state == REQ_HANDLER)
            request_uncharge(r); /* detached; freed when the handler answers */
        else
            request_free(r);
    }
    stash_release(c);
    c->closing = true;
    c->broken = true;
}

http_phase http_conn_phase(const http_conn *c)
{
    if (c->broken || (c->finished && !c->writing))
        return HTTP_PHASE_DONE;
    if (c->cur != NULL)
        return c->cur->headers_done ? HTTP_PHASE_BODY : HTTP_PHASE_HEADER;
    if (c->head != NULL || c->writing || c->send_continue)
        return HTTP_PHASE_BUSY;
    if (c->closing || c->eof)
        return HTTP_PHASE_DONE;
    if (c->stash_len > 0)
        return HTTP_PHASE_HEADER; /* cannot happen with an empty queue; be safe */
    return c->served ? HTTP_PHASE_IDLE : HTTP_PHASE_HEADER;
}

bool http_conn_wants_read(const http_conn *c)
{
    return !c->closing && !c->broken && !c->eof && c->stash_len < STASH_SOFT_MAX;
}

bool http_conn_should_linger(const http_conn *c)
{
    return !c->broken && !c->eof && !c->sh->stopping;
}

/* ---------------------------------------------------------------- request accessors */

const char *http_request_method(const http_request *req)
{
    return req->method;
}

const char *http_request_url(const http_request *req)
{
    return (const char *)req->hdr.data;
}

const char *http_request_path(const http_request *req)
{
    return (const char *)req->hdr.data + req->path_off;
}

const char *http_request_query(const http_request *req)
{
    return (const char *)req->hdr.data + req->query_off;
}

const char *http_request_header(const http_request *req, const char *name)
{
    for (unsigned i = 0; i < req->nfields; i++)
        if (name_is(req->headers[i].name, name))
            return req->headers[i].value;
    return NULL;
}

size_t http_request_header_count(const http_request *req)
{
    return req->nfields;
}

http_header http_request_header_at(const http_request *req, size_t i)
{
    assert(i < req->nfields);
    return req->headers[i];
}

const uint8_t *http_request_body(const http_request *req, size_t *len)
{
    if (len != NULL)
        *len = req->body_len;
    return req->body != NULL ? req->body : (const uint8_t *)"";
}

arena *http_request_arena(http_request *req)
{
    return &req->arena;
}

const char *http_request_peer(const http_request *req)
{
    return req->peer;
}

int http_request_disconnected(const http_request *req)
{
    return req->conn == NULL;
}
