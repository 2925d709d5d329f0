#ifndef STRATA_NODE_HTTP_HTTP_CONN_H
#define STRATA_NODE_HTTP_HTTP_CONN_H
/*
 * Internal to node/http: one HTTP/1.1 connection as a state machine that knows nothing
 * of sockets. The transport (http_server.c on libuv, or the fuzz harness) feeds it the
 * bytes it reads, writes the bytes it is handed, and asks it what to do next:
 *
 *   transport -> core:  http_conn_feed / _eof / _write_done / _timeout / _stop / _close
 *   core -> transport:  io->write (one write at a time), io->update (re-read the state)
 *
 * The core parses requests (http-parser), enforces the size bounds, hands complete
 * requests to the handler, keeps their responses in request order and decides when the
 * connection is finished. It never calls back into the transport while it is in the
 * middle of a parse, and io->update is called only by the outermost entry point, last.
 */
#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node/http/http.h"

typedef struct http_conn http_conn;

typedef struct {
    const void *base;
    size_t len;
} http_iov;

typedef struct {
    /* Sends the bytes of `iov` (valid until http_conn_write_done). At most one at a time. */
    void (*write)(http_conn *c, const http_iov *iov, size_t n);
    /* The state changed: re-read http_conn_phase() and http_conn_wants_read(). */
    void (*update)(http_conn *c);
} http_conn_io;

/* What every connection of one server shares: limits, the handler, counters. */
typedef struct http_conn_shared {
    size_t max_body;
    size_t max_header_bytes;
    unsigned max_headers;
    unsigned max_pipeline;
    size_t arena_limit;
    size_t body_budget; /* bound on body_bytes; 0: none */
    size_t body_bytes;  /* body memory held by requests of all connections */
    http_handler_fn handler;
    void *handler_data;
    const http_conn_io *io;
    /* The Date header value for a response built now (IMF-fixdate). */
    const char *(*date)(struct http_conn_shared *sh);
    bool stopping;           /* responses built from now on say Connection: close */
    uint64_t requests_total; /* handed to the handler */
    uint64_t errors_total;   /* error responses produced by the core */
    /* Finished requests kept for the next ones, with their header and response-head
     * buffers: a request then costs no allocation of them. http_conn_shared_release
     * frees them. */
    struct http_request *spare;
    unsigned nspare;
} http_conn_shared;

/* Frees the spare requests; call once every connection of `sh` is closed. */
void http_conn_shared_release(http_conn_shared *sh);

typedef enum {
    HTTP_PHASE_HEADER, /* waiting for (the rest of) a request line and headers */
    HTTP_PHASE_BODY,   /* waiting for the rest of a request body */
    HTTP_PHASE_IDLE,   /* keep-alive: nothing received, nothing owed */
    HTTP_PHASE_BUSY,   /* requests are with the handler or their responses being written */
    HTTP_PHASE_DONE,   /* nothing more to do: the transport closes the connection */
} http_phase;

#define HTTP_PEER_MAX 64

struct http_conn {
    http_conn_shared *sh;
    http_parser parser;
    http_request *cur;  /* request being parsed, NULL between requests */
    http_request *head; /* complete requests in arrival order, answered or not */
    http_request *tail;
    unsigned nqueued; /* requests in head..tail */
    uint8_t *stash;   /* bytes received while parsing is held back */
    size_t stash_len;
    size_t stash_cap;
    uint32_t started; /* requests begun so far (the transport's header deadline key) */
    int fail_status;  /* set by a parser callback before it fails the parse */
    const char *fail_msg;
    bool writing;       /* io->write outstanding */
    bool send_continue; /* a 100 Continue is owed before the current body */
    bool writing_continue;
    bool closing;  /* no more requests: finish once the queue is written */
    bool broken;   /* a write failed or memory ran out: finish now */
    bool finished; /* a response that closes the connection was written */
    bool eof;      /* the client closed its side */
    bool served;   /* at least one request was begun */
    bool in_pump;
    bool pump_again;
    char peer[HTTP_PEER_MAX];
};

/* Initialises `c` (the caller fills c->peer afterwards if it knows it). */
void http_conn_init(http_conn *c, http_conn_shared *sh);
/* Bytes read from the client. */
void http_conn_feed(http_conn *c, const void *data, size_t len);
/* The client closed its sending side: answer what is complete, then finish. */
void http_conn_eof(http_conn *c);
/* The write handed to io->write completed (status 0) or failed (< 0). */
void http_conn_write_done(http_conn *c, int status);
/* The timeout of the current phase expired (HEADER, BODY: 408; IDLE: finish). */
void http_conn_timeout(http_conn *c);
/* The server stops: drop any partial request, finish after the owed responses. */
void http_conn_stop(http_conn *c);
/* Releases everything; requests still with the handler live on, detached. */
void http_conn_close(http_conn *c);

http_phase http_conn_phase(const http_conn *c);
/* False while reading more would only buffer bytes that cannot be parsed yet. */
bool http_conn_wants_read(const http_conn *c);
/* Why the connection finished, for the transport: false means close at once. */
bool http_conn_should_linger(const http_conn *c);

#endif
