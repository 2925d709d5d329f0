#ifndef STRATA_RPC_FRAME_H
#define STRATA_RPC_FRAME_H
/*
 * The peer wire format: a pure codec with no sockets, so the fuzz harness and the unit
 * tests drive it directly.
 *
 * A frame is a fixed 32-byte header followed by `length` payload bytes. All integers
 * are big-endian.
 *
 *   offset size field
 *        0    4 magic            0x53545250 ("STRP")
 *        4    1 version          RPC_FRAME_VERSION
 *        5    1 frame type       rpc_frame_type
 *        6    2 flags            reserved, must be 0 (lets a later version add meaning)
 *        8    4 message type     opaque to rpc/: the application's channel/type
 *       12    8 correlation id   pairs a RESPONSE/ERROR with its REQUEST; 0 otherwise
 *       20    4 payload length   <= the decoder's max frame bytes
 *       24    8 checksum         XXH3_64 of bytes [0, 24) followed by the payload
 *
 * The checksum covers the header too, so a flipped type or correlation id is caught,
 * not just a damaged payload.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/err.h"

#define RPC_FRAME_MAGIC       0x53545250u
#define RPC_FRAME_VERSION     1
#define RPC_FRAME_HEADER_SIZE 32

typedef enum {
    RPC_FRAME_HELLO = 1,   /* payload: strata.Hello; first frame each side sends */
    RPC_FRAME_MESSAGE = 2, /* fire-and-forget */
    RPC_FRAME_REQUEST = 3, /* expects a RESPONSE or ERROR with the same correlation id */
    RPC_FRAME_RESPONSE = 4,
    RPC_FRAME_ERROR = 5, /* payload: 4-byte strata_code, then a message (no NUL) */
    RPC_FRAME_PROOF = 6, /* payload: HMAC-SHA256 proof of the peer secret (rpc.h) */
} rpc_frame_type;

typedef struct {
    uint8_t type; /* rpc_frame_type */
    uint16_t flags;
    uint32_t msg_type;
    uint64_t corr_id;
    const uint8_t *payload; /* decoder output: valid until the next rpc_decoder_feed */
    uint32_t len;
} rpc_frame;

/* Writes the 32-byte header for `f` (including the checksum over f->payload[0, f->len)). */
void rpc_frame_write_header(uint8_t out[RPC_FRAME_HEADER_SIZE], const rpc_frame *f);

/*
 * Stream decoder: reassembles frames from chunks of any size. Memory is bounded by
 * max_payload (the largest payload buffer it will ever allocate) plus the header.
 */
typedef struct {
    uint8_t hdr[RPC_FRAME_HEADER_SIZE];
    size_t hdr_have;
    uint8_t *buf; /* payload reassembly buffer */
    size_t buf_cap;
    size_t buf_have;
    size_t max_payload;
    rpc_frame cur; /* fields of the header being completed */
    uint64_t checksum;
    bool failed; /* sticky: a corrupt stream cannot be resynchronised */
} rpc_decoder;

void rpc_decoder_init(rpc_decoder *d, size_t max_payload);
/* The bound may change between frames (e.g. small until a handshake completes). */
void rpc_decoder_set_max(rpc_decoder *d, size_t max_payload);
void rpc_decoder_free(rpc_decoder *d);

/*
 * Consumes bytes from *p (advancing *p and decreasing *n) until a frame completes or the
 * input runs out. Returns 1 with *out filled when a frame is complete (call again with
 * the rest of the input), 0 when all input was consumed without completing a frame, and
 * -1 with ERR_CORRUPT on a bad magic, version, frame type, flags, length over the bound,
 * or checksum; after -1 every later call fails again (the connection must be closed).
 * out->payload points into the decoder or into the caller's input and is valid until the
 * next call or until the input is released.
 */
int rpc_decoder_feed(rpc_decoder *d, const uint8_t **p, size_t *n, rpc_frame *out, strata_err *err);

/* True when the decoder holds a partial frame (bytes of a header or payload). */
bool rpc_decoder_mid_frame(const rpc_decoder *d);

#endif
