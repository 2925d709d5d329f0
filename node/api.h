#ifndef STRATA_NODE_API_H
#define STRATA_NODE_API_H
/*
 * The DynamoDB JSON API: turns HTTP requests into operations on the router.
 *
 *   GET /            -> 200 {"status":"ok"} (health check)
 *   POST /           -> X-Amz-Target: DynamoDB_20120810.<Op>, body application/x-amz-json-1.0
 *   anything else    -> 404 / 405 in DynamoDB's error shape
 *
 * Every answer carries x-amzn-RequestId (unique per request) and x-amz-crc32 (CRC-32 of
 * the body), and errors have DynamoDB's JSON shape and HTTP status. A request without an
 * Authorization header gets MissingAuthenticationTokenException; any credentials are
 * accepted for now.
 */
#include <stdint.h>

#include <uv.h>

#include "cluster/router.h"
#include "node/http/http.h"

typedef struct api_server api_server;

typedef struct {
    uv_loop_t *loop;
    router *router;
    int initial_partitions; /* partitions of a new table (>= 1) */
    const char *region;     /* for ARNs and DescribeEndpoints; "us-east-1" if NULL */
    const char *endpoint;   /* host:port for DescribeEndpoints */
    int log_level;          /* 0 errors only .. 3 debug (one line per request) */
} api_config;

api_server *api_server_new(const api_config *cfg, strata_err *err);
/* Requests still being answered keep running; call after the HTTP server stopped. */
void api_server_free(api_server *s);

/* Sets the host:port DescribeEndpoints reports (once the listener is bound). */
void api_server_set_endpoint(api_server *s, const char *endpoint);

/* The HTTP handler (http_server_options.handler, with handler_data = the api_server). */
void api_handle(http_request *req, void *data);

/* Requests handled and not yet answered. */
uint64_t api_inflight(const api_server *s);

#endif
