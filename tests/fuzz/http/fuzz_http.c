/*
 * libFuzzer harness for the HTTP connection core (node/http/http_conn.h), no sockets.
 *
 * The input is a script: byte 0 picks the configuration (pipeline depth, whether writes
 * complete inside io->write, whether the handler answers at once); then each control
 * byte either feeds the next bytes as a read, completes the outstanding write (maybe as
 * failed), answers the oldest held request, or delivers a timeout, EOF or stop. At the
 * end every held request is answered and the connection closed, so a leak shows up.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/http/http_conn.h"

#define HELD_MAX 8

typedef struct {
    http_conn c;
    http_conn_shared sh;
    bool auto_complete;
    bool write_pending;
    bool defer;
    bool closed;
    size_t out_bytes;
    http_request *held[HELD_MAX];
    int nheld;
} fz;

static fz *fz_of(http_conn *c)
{
    return (fz *)((char *)c - offsetof(fz, c));
}

static void fz_write(http_conn *c, const http_iov *iov, size_t n)
{
    fz *f = fz_of(c);
    if (f->write_pending || n == 0 || n > 2)
        abort(); /* the core promised one write at a time */
    if (iov[0].len < 9 || memcmp(iov[0].base, "HTTP/1.1 ", 9) != 0)
        abort(); /* every write starts a status line */
    for (size_t i = 0; i < n; i++)
        f->out_bytes += iov[i].len;
    if (f->auto_complete) {
        http_conn_write_done(c, 0);
        return;
    }
    f->write_pending = true;
}

static void fz_update(http_conn *c)
{
    (void)c;
}

static const http_conn_io fz_io = {fz_write, fz_update};

static const char *fz_date(http_conn_shared *sh)
{
    (void)sh;
    return "Thu, 01 Jan 2026 00:00:00 GMT";
}

static void answer(http_request *req, uint8_t how)
{
    size_t len;
    const uint8_t *body = http_request_body(req, &len);
    if (body[len] != '\0')
        abort();
    (void)http_request_header(req, "content-length");
    for (size_t i = 0; i < http_request_header_count(req); i++) {
        http_header h = http_request_header_at(req, i);
        if (h.name == NULL || h.value == NULL)
            abort();
    }
    (void)http_request_path(req);
    (void)http_request_query(req);
    static const int statuses[] = {200, 204, 400, 404, 500, 503, 304, 413};
    http_header hs[] = {{"Connection", (how & 8) ? "close" : "keep-alive"}, {"X-A", "b"}};
    if (how & 16) {
        char *copy = arena_memdup(http_request_arena(req), body, len);
        http_respond_arena(req, statuses[how & 7], hs, 2, copy, copy ? len : 0);
    } else {
        http_respond(req, statuses[how & 7], hs, 2, body, len);
    }
}

static void handler(http_request *req, void *data)
{
    fz *f = data;
    if (f->defer && f->nheld < HELD_MAX) {
        f->held[f->nheld++] = req;
        return;
    }
    answer(req, 0);
}

static void answer_oldest(fz *f, uint8_t how)
{
    if (f->nheld == 0)
        return;
    http_request *r = f->held[0];
    memmove(&f->held[0], &f->held[1], (size_t)(f->nheld - 1) * sizeof f->held[0]);
    f->nheld--;
    answer(r, how);
}

static void complete_write(fz *f, int status)
{
    if (!f->write_pending || f->closed)
        return;
    f->write_pending = false;
    http_conn_write_done(&f->c, status);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    fz f;
    memset(&f, 0, sizeof f);
    uint8_t cfg = data[0];
    f.sh = (http_conn_shared){
        .max_body = 4096,
        .max_header_bytes = 1024,
        .max_headers = 10,
        .max_pipeline = 1 + (cfg & 3),
        .arena_limit = 1 << 16,
        .body_budget = 3000 + (size_t)(cfg >> 4) * 1000, /* below max_body: 503s happen */
        .handler = handler,
        .handler_data = &f,
        .io = &fz_io,
        .date = fz_date,
    };
    f.auto_complete = (cfg & 4) != 0;
    f.defer = (cfg & 8) != 0;
    http_conn_init(&f.c, &f.sh);
    size_t i = 1;
    while (i < size && !f.closed) {
        uint8_t op = data[i++];
        switch (op & 7) {
        case 0:
        case 1:
        case 2:
        case 3: { /* a read of 1..256 bytes */
            size_t n = 1 + (size_t)(op >> 2) * 4;
            if (n > size - i)
                n = size - i;
            if (http_conn_wants_read(&f.c) || (op & 1))
                http_conn_feed(&f.c, data + i, n);
            i += n;
            break;
        }
        case 4:
            complete_write(&f, (op & 0x80) ? -1 : 0);
            break;
        case 5:
            answer_oldest(&f, op >> 3);
            break;
        case 6:
            if (op & 0x80)
                http_conn_eof(&f.c);
            else
                http_conn_timeout(&f.c);
            break;
        case 7:
            if (op & 0x80) {
                f.sh.stopping = true;
                http_conn_stop(&f.c);
            } else if (op & 0x40) {
                http_conn_close(&f.c); /* the transport lost the connection */
                f.closed = true;
            }
            break;
        }
        if (http_conn_phase(&f.c) == HTTP_PHASE_DONE && !f.write_pending) {
            http_conn_close(&f.c);
            f.closed = true;
        }
    }
    /* Drain: answer everything, finish writes; bounded by the pipeline depth. */
    for (int round = 0; round < 64 && !f.closed; round++) {
        complete_write(&f, 0);
        answer_oldest(&f, 0);
    }
    if (!f.closed)
        http_conn_close(&f.c);
    while (f.nheld > 0)
        answer_oldest(&f, 0); /* orphans: just freed */
    http_conn_shared_release(&f.sh);
    if (f.sh.body_bytes != 0)
        abort(); /* body memory not given back to the budget */
    return 0;
}
