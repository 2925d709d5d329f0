#ifndef STRATA_NODE_HTTP_HTTP_H
#define STRATA_NODE_HTTP_HTTP_H
/*
 * The HTTP/1.1 server that DynamoDB clients talk to (AWS SDKs, the AWS CLI, wrk).
 *
 * One server runs on one libuv loop; every callback runs on that loop's thread and none
 * of these functions may be called from another thread.
 *
 * Connections and requests
 *   - Keep-alive is the default for HTTP/1.1; `Connection: close` is honoured; HTTP/1.0
 *     closes after the response unless the client sent `Connection: keep-alive`.
 *   - Pipelined requests on one connection are answered in request order. With
 *     `max_pipeline` 1 (the default, and the only safe choice for non-idempotent POSTs)
 *     the handler sees a request only after the previous one's response was written;
 *     with a larger value up to that many requests of one connection are handed to the
 *     handler at once and may be answered in any order: a slow response still holds the
 *     later ones back.
 *   - Request bodies: Content-Length or chunked transfer coding, both bounded by
 *     `max_body`; beyond it the server answers 413 with a JSON error body and closes.
 *     The header section (request line and headers) is bounded by `max_header_bytes` and
 *     `max_headers` (and http-parser's own 80 KiB); beyond either the answer is 431.
 *     Malformed requests get 400, and so do the framings RFC 9112 says a server must
 *     refuse: an HTTP/1.1 request without exactly one Host, a Transfer-Encoding that
 *     does not end in one chunked coding, any Transfer-Encoding in HTTP/1.0. A coding
 *     before chunked (gzip, ...) gets 501, a version other than 1.0 and 1.1 gets 505.
 *     Folded header lines are unfolded (http-parser drops the CRLF). Request bodies of all
 * connections together may hold at most `max_body_total` bytes; a body that would pass it gets 503
 * (SDKs retry). After any of these errors the connection closes. `Expect: 100-continue` is answered
 * with 100 Continue (or with 413 at once), unless earlier pipelined responses are still owed (then
 * the client's own timer sends on).
 *   - Timeouts (milliseconds, 0 = none): `header_timeout_ms` from the connection's accept
 *     or a request's first byte until its headers are complete (then 408 and close),
 *     `body_timeout_ms` from there until the body is complete (408 and close),
 *     `idle_timeout_ms` between keep-alive requests (silent close), `write_timeout_ms`
 *     while a response makes no progress toward a client that does not read (close).
 *   - At most `max_connections` open connections; further ones are accepted and closed
 *     at once. Idle connections hold no read buffer (reads use one buffer per server).
 *
 * Error bodies produced by the server itself (400, 408, 413, 431, 501, 503, 505) are JSON,
 * `{"__type":"com.amazon.coral.service#<Name>","message":"..."}`, with Content-Type
 * application/x-amz-json-1.0 and x-amz-crc32.
 */
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "storage/base/arena.h"
#include "storage/base/err.h"

typedef struct http_server http_server;
typedef struct http_request http_request;

typedef struct {
    const char *name;
    const char *value;
} http_header;

/*
 * Called once per complete request, on the loop thread. The handler must eventually
 * call http_respond() (or http_respond_arena()) exactly once for `req`, either before
 * it returns or later from any other callback of the same loop.
 */
typedef void (*http_handler_fn)(http_request *req, void *data);

typedef struct {
    const char *host;           /* listen address, e.g. "127.0.0.1" or "::"; NULL = "0.0.0.0" */
    int port;                   /* 0 picks a free port: see http_server_port() */
    size_t max_body;            /* request body bound in bytes (default 17 MiB) */
    size_t max_header_bytes;    /* request line + header section bound (default 64 KiB) */
    unsigned max_headers;       /* header count bound (default 100) */
    unsigned max_connections;   /* open connection bound (default 10000) */
    unsigned max_pipeline;      /* requests of one connection in the handler at once (1) */
    size_t request_arena_limit; /* byte limit of http_request_arena() (default 256 MiB) */
    size_t max_body_total;      /* request body memory of all connections (1 GiB; 0: none) */
    uint64_t header_timeout_ms; /* default 10 000 */
    uint64_t body_timeout_ms;   /* default 30 000 */
    uint64_t idle_timeout_ms;   /* default 60 000 */
    uint64_t write_timeout_ms;  /* no write progress for this long closes (default 30 000) */
    uint64_t stop_grace_ms;     /* stop waits this long for busy connections (10 000; 0: ever) */
    http_handler_fn handler;    /* required */
    void *handler_data;
} http_server_options;

/* Fills `o` with the defaults above (handler NULL, host "0.0.0.0", port 8000). */
void http_server_options_default(http_server_options *o);

/*
 * Binds, listens and starts accepting on `loop`. On success *out is the server and the
 * result is 0; on failure (bad options, address in use, ...) -1 with `err` filled.
 * If SIGPIPE still has its default action it is set to ignored (a write to a client that
 * vanished must fail with EPIPE, not kill the process).
 */
int http_server_start(uv_loop_t *loop, const http_server_options *opts, http_server **out,
                      strata_err *err);

/* The bound port (useful with port 0). */
int http_server_port(const http_server *s);

/*
 * Graceful stop: stops accepting, closes idle connections and partially received
 * requests at once, lets requests already handed to the handler finish (their
 * connections close after the response is written) for up to `stop_grace_ms`, then
 * closes whatever is left, frees the server and calls done(data) from the loop. `s` must
 * not be used after this call. Requests still held by the handler after their connection
 * closed remain valid until answered (http_respond then just frees them), even after
 * done ran.
 */
void http_server_stop(http_server *s, void (*done)(void *data), void *data);

typedef struct {
    uint64_t connections_open;    /* currently open */
    uint64_t connections_total;   /* accepted and kept since start */
    uint64_t connections_refused; /* closed at once because of max_connections */
    uint64_t requests_total;      /* complete requests handed to the handler */
    uint64_t errors_total;        /* 400/408/413/431/503 answers produced by the server */
    uint64_t timeouts_total;      /* connections closed by a timeout */
} http_server_stats;

void http_server_get_stats(const http_server *s, http_server_stats *out);

/* ---- requests: valid from the handler call until http_respond() ---- */

const char *http_request_method(const http_request *req); /* "GET", "POST", ... */
const char *http_request_url(const http_request *req);    /* raw request target */
const char *http_request_path(const http_request *req);   /* target up to '?', not decoded */
const char *http_request_query(const http_request *req);  /* after '?', "" if none */
/* First header with this name (ASCII case-insensitive), value trimmed; NULL if absent. */
const char *http_request_header(const http_request *req, const char *name);
/* All headers in arrival order (names as sent), e.g. for SigV4 canonical headers. */
size_t http_request_header_count(const http_request *req);
http_header http_request_header_at(const http_request *req, size_t i);
/* The body (never NULL; followed by a NUL byte not counted in *len). */
const uint8_t *http_request_body(const http_request *req, size_t *len);
/* Memory that lives until the response has been written (or the request dropped). */
arena *http_request_arena(http_request *req);
/* "ip:port" of the client, "[ip6]:port" for IPv6; "" if unknown. */
const char *http_request_peer(const http_request *req);
/* 0 while the connection is open; 1 once it closed (the response will be discarded). */
int http_request_disconnected(const http_request *req);

/*
 * Answers `req` with `status` (200..599), the given headers and body (no body for 204
 * and 304; for HEAD only its Content-Length). The server adds Content-Length, Date and
 * Connection itself and ignores those names if given (a given `Connection: close` still
 * closes after this response). Header names and values must not contain CR or LF (such
 * headers are dropped). The body is copied; http_respond_arena() avoids the copy when
 * the body lives in http_request_arena(req) or otherwise outlives the request. `req` is
 * invalid after the call. If the client disconnected meanwhile the request is just freed.
 */
void http_respond(http_request *req, int status, const http_header *headers, size_t nheaders,
                  const void *body, size_t len);
void http_respond_arena(http_request *req, int status, const http_header *headers, size_t nheaders,
                        const void *body, size_t len);

/* The standard reason phrase for a status ("OK", "Not Found"), "Unknown" otherwise. */
const char *http_status_reason(int status);

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32()) for DynamoDB's x-amz-crc32 header. */
uint32_t http_crc32(const void *p, size_t n);
/* Continues a CRC: http_crc32_update(http_crc32(a, n), b, m) == CRC of a then b. */
uint32_t http_crc32_update(uint32_t crc, const void *p, size_t n);

#endif
