/*
 * Frame codec (see frame.h for the layout). The decoder is a two-state machine: filling
 * the fixed header, then filling the payload. It validates the header before it
 * allocates anything, so a hostile length can never make it allocate more than
 * max_payload bytes.
 */
#include "rpc/frame.h"

#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define CHECKSUMMED_HEADER 24 /* header bytes the checksum covers (all but itself) */
/* A reassembly buffer larger than this is released between frames, so one big frame
 * does not pin its memory on an idle connection. */
#define KEEP_BUFFER (256 * 1024)

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static uint64_t frame_checksum(const uint8_t *hdr, const uint8_t *payload, size_t len)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, hdr, CHECKSUMMED_HEADER);
    if (len > 0)
        XXH3_64bits_update(&st, payload, len);
    return XXH3_64bits_digest(&st);
}

void rpc_frame_write_header(uint8_t out[RPC_FRAME_HEADER_SIZE], const rpc_frame *f)
{
    put32(out, RPC_FRAME_MAGIC);
    out[4] = RPC_FRAME_VERSION;
    out[5] = f->type;
    put16(out + 6, f->flags);
    put32(out + 8, f->msg_type);
    put64(out + 12, f->corr_id);
    put32(out + 20, f->len);
    put64(out + 24, frame_checksum(out, f->payload, f->len));
}

void rpc_decoder_init(rpc_decoder *d, size_t max_payload)
{
    memset(d, 0, sizeof *d);
    d->max_payload = max_payload;
}

void rpc_decoder_set_max(rpc_decoder *d, size_t max_payload)
{
    d->max_payload = max_payload;
}

void rpc_decoder_free(rpc_decoder *d)
{
    free(d->buf);
    d->buf = NULL;
    d->buf_cap = 0;
}

bool rpc_decoder_mid_frame(const rpc_decoder *d)
{
    return d->hdr_have > 0;
}

static int fail(rpc_decoder *d, strata_err *err, const char *what)
{
    d->failed = true;
    return strata_err_set(err, ERR_CORRUPT, "rpc frame: %s", what);
}

/* Validates a complete header and loads its fields into d->cur. */
static int parse_header(rpc_decoder *d, strata_err *err)
{
    const uint8_t *h = d->hdr;
    if (get32(h) != RPC_FRAME_MAGIC)
        return fail(d, err, "bad magic");
    if (h[4] != RPC_FRAME_VERSION)
        return fail(d, err, "unsupported version");
    if (h[5] < RPC_FRAME_HELLO || h[5] > RPC_FRAME_PROOF)
        return fail(d, err, "unknown frame type");
    if (get16(h + 6) != 0)
        return fail(d, err, "unknown flags");
    uint32_t len = get32(h + 20);
    if (len > d->max_payload)
        return fail(d, err, "payload length over the frame bound");
    d->cur.type = h[5];
    d->cur.flags = 0;
    d->cur.msg_type = get32(h + 8);
    d->cur.corr_id = get64(h + 12);
    d->cur.len = len;
    d->cur.payload = NULL;
    d->checksum = get64(h + 24);
    return 0;
}

/* Checks the checksum of the completed frame and hands it out; resets for the next. */
static int finish_frame(rpc_decoder *d, const uint8_t *payload, rpc_frame *out, strata_err *err)
{
    if (frame_checksum(d->hdr, payload, d->cur.len) != d->checksum)
        return fail(d, err, "checksum mismatch");
    *out = d->cur;
    out->payload = payload;
    d->hdr_have = 0;
    d->buf_have = 0;
    return 1;
}

static int reserve_payload(rpc_decoder *d, size_t len, strata_err *err)
{
    if (len <= d->buf_cap)
        return 0;
    uint8_t *nb = realloc(d->buf, len);
    if (nb == NULL) {
        d->failed = true;
        return strata_err_set(err, ERR_NOMEM, "rpc frame: cannot allocate %zu bytes", len);
    }
    d->buf = nb;
    d->buf_cap = len;
    return 0;
}

int rpc_decoder_feed(rpc_decoder *d, const uint8_t **p, size_t *n, rpc_frame *out, strata_err *err)
{
    if (d->failed)
        return strata_err_set(err, ERR_CORRUPT, "rpc frame: stream already failed");
    if (d->hdr_have == 0 && d->buf_cap > KEEP_BUFFER)
        rpc_decoder_free(d);
    while (*n > 0) {
        if (d->hdr_have < RPC_FRAME_HEADER_SIZE) {
            size_t take = RPC_FRAME_HEADER_SIZE - d->hdr_have;
            if (take > *n)
                take = *n;
            memcpy(d->hdr + d->hdr_have, *p, take);
            d->hdr_have += take;
            *p += take;
            *n -= take;
            if (d->hdr_have < RPC_FRAME_HEADER_SIZE)
                return 0;
            if (parse_header(d, err) < 0)
                return -1;
            if (d->cur.len == 0)
                return finish_frame(d, NULL, out, err);
            /* Whole payload already in the input: hand it out without copying. */
            if (*n >= d->cur.len) {
                const uint8_t *payload = *p;
                *p += d->cur.len;
                *n -= d->cur.len;
                return finish_frame(d, payload, out, err);
            }
            if (reserve_payload(d, d->cur.len, err) < 0)
                return -1;
            continue;
        }
        size_t take = d->cur.len - d->buf_have;
        if (take > *n)
            take = *n;
        memcpy(d->buf + d->buf_have, *p, take);
        d->buf_have += take;
        *p += take;
        *n -= take;
        if (d->buf_have == d->cur.len)
            return finish_frame(d, d->buf, out, err);
    }
    return 0;
}
