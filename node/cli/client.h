#ifndef STRATA_NODE_CLI_CLIENT_H
#define STRATA_NODE_CLI_CLIENT_H
/*
 * A small blocking HTTP/1.1 client for the `strata` command-line tool: one request per
 * connection (Connection: close), plain TCP (no TLS), a deadline for the whole exchange,
 * a bounded response body.
 */
#include <stddef.h>
#include <stdint.h>

#include "node/http/http.h"
#include "storage/base/err.h"

#define CLI_BODY_MAX (32u * 1024 * 1024)

typedef struct {
    char host[256]; /* a name or address; IPv6 without brackets */
    char port[8];
    char base_path[256]; /* "" or a prefix like "/strata" (no trailing slash) */
} cli_endpoint;

/* Parses "http://host[:port][/path]" (port defaults to 80; "[::1]:8000" for IPv6). */
int cli_endpoint_parse(const char *url, cli_endpoint *ep, strata_err *err);

typedef struct {
    int status;
    char *body; /* malloc'd, NUL-terminated */
    size_t body_len;
} cli_response;

/*
 * Sends one request to ep (path is appended to ep->base_path) and reads the response
 * within timeout_ms. ERR_UNAVAILABLE: could not connect or timed out; ERR_IO: the
 * connection failed midway; ERR_CORRUPT: the answer is not HTTP.
 */
int cli_http_request(const cli_endpoint *ep, const char *method, const char *path,
                     const http_header *headers, size_t nheaders, const void *body, size_t len,
                     int timeout_ms, cli_response *out, strata_err *err);
void cli_response_free(cli_response *r);

/* Milliseconds on the monotonic clock, for deadlines. */
int64_t cli_mono_ms(void);

#endif
