/*
 * Test harness for node/http: a real server on 127.0.0.1 port 0, its loop running in a
 * thread, and blocking client sockets driven from the test's own thread. Everything
 * that touches the server or a request runs on the loop thread through on_loop().
 * Waiting is always "poll a condition until a deadline", never a bare sleep.
 */
#ifndef STRATA_TESTS_HTTP_HARNESS_H
#define STRATA_TESTS_HTTP_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node/http/http.h"

#define HOLD_MAX 512

typedef enum {
    MODE_ECHO,   /* answer at once with a description of the request */
    MODE_DEFER,  /* keep the request; the test answers it later */
    MODE_BIG,    /* answer at once with big_len bytes of a pattern */
    MODE_CLOSE,  /* answer at once with Connection: close */
    MODE_STATUS, /* answer at once with `status` and body "status" */
} handler_mode;

typedef struct {
    uv_loop_t loop;
    uv_async_t async;
    pthread_t thread;
    http_server *srv;
    int port;
    handler_mode mode;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*call_fn)(void *h, void *arg);
    void *call_arg;
    bool call_pending;
    bool stopped; /* stop's done callback ran */
    /* Loop-thread state (read it through on_loop). */
    http_request *held[HOLD_MAX];
    int nheld;
    uint64_t dispatched;
    uint8_t *big;
    size_t big_len;
    int status;
} harness;

/*
 * Starts a server with `opts` (handler, port 0 and, unless another host is set, 127.0.0.1
 * are filled in) and its loop thread.
 */
void harness_start(harness *h, http_server_options *opts, handler_mode mode);
/* Stops the server gracefully, joins the thread, checks the loop closes cleanly. */
void harness_stop(harness *h);
/* The two halves of harness_stop: ask the server to stop; wait for it and clean up. */
void harness_stop_begin(harness *h);
void harness_stop_finish(harness *h);
/* Runs fn(h, arg) on the loop thread and waits for it. */
void on_loop(harness *h, void (*fn)(void *h, void *arg), void *arg);
http_server_stats harness_stats(harness *h);
int harness_nheld(harness *h);
uint64_t harness_dispatched(harness *h);
/* Sets the status MODE_STATUS answers with. */
void harness_set_status(harness *h, int status);
/* Answers the held request `i` (ECHO-style body), removing it from the held list. */
void harness_answer(harness *h, int i);
/* Polls cond(h) on the loop thread until true or deadline_ms passed. */
bool harness_wait(harness *h, bool (*cond)(harness *h, void *arg), void *arg, int deadline_ms);

/* ---- blocking client */

typedef struct {
    int fd;
    bool next_is_head; /* the next response answers a HEAD: it has no body */
    char buf[65536];
    size_t len;
} client;

typedef struct {
    int status;
    char head[8192];
    uint8_t *body; /* malloc'd, NUL-terminated */
    size_t body_len;
} response;

void client_connect(client *c, int port);
void client_connect6(client *c, int port); /* to [::1] */
void client_connect_rcvbuf(client *c, int port, int rcvbuf);
void client_send(client *c, const void *p, size_t n);
void client_sends(client *c, const char *s);
/* 0 and a response, or -1 on EOF, reset or timeout (5 s). */
int client_read(client *c, response *r);
/* True once the server closed the connection (EOF or reset) with nothing else sent. */
bool client_closed(client *c);
void client_close(client *c);
void client_reset(client *c); /* close with RST */
void response_free(response *r);
/* Header value from r->head (case-insensitive name), copied to out; false if absent. */
bool response_header(const response *r, const char *name, char *out, size_t n);

uint64_t now_ms(void);

#endif
