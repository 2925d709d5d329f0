#ifndef STRATA_BASE_BUF_H
#define STRATA_BASE_BUF_H
/*
 * Bounded byte buffers for writing, and bounds-checked readers for parsing untrusted
 * bytes (on-disk records, network frames).
 *
 * Both use a sticky failure flag: after the first failed append (out of memory or over
 * the buffer's limit) or the first read past the end, every later call does nothing and
 * `failed` stays set. Encoders and decoders check once at the end instead of at every
 * call, and can never write or read out of bounds.
 *
 * Multi-byte integers are big-endian (order-preserving); varints are LEB128 (u64).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t limit;   /* maximum len; 0 means SIZE_MAX / 2 */
    bool failed;
} buf;

void buf_init(buf *b, size_t limit);
void buf_free(buf *b);
void buf_reset(buf *b);                    /* len = 0, failed = false; keeps memory */
static inline bool buf_reserve(buf *b, size_t extra); /* false (and failed) if it cannot */
static inline void buf_append(buf *b, const void *p, size_t n);
static inline void buf_put_u8(buf *b, uint8_t v);
void buf_put_u16be(buf *b, uint16_t v);
void buf_put_u32be(buf *b, uint32_t v);
void buf_put_u64be(buf *b, uint64_t v);
void buf_put_varint(buf *b, uint64_t v);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Takes the bytes: the caller frees the result with free(); the buffer is emptied. */
uint8_t *buf_steal(buf *b, size_t *len);
/* v in decimal, NUL-terminated, into out (U64_DECIMAL_MAX bytes); returns its length.
 * For hot paths, where snprintf costs several hundred instructions. */
#define U64_DECIMAL_MAX 21
size_t u64_decimal(uint64_t v, char out[U64_DECIMAL_MAX]);

/* buf_reserve's way when the room is not there yet (grows, or fails); not for callers. */
bool buf_reserve_slow(buf *b, size_t extra);

/*
 * Inline, because encoders call these tens of times per request (a PutItem makes about 80
 * calls on its first node): the common case, room already there, is a compare. Room
 * there means within the limit too, since cap never exceeds it.
 */
static inline bool buf_reserve(buf *b, size_t extra)
{
    if (!b->failed && extra <= b->cap - b->len)
        return true;
    return buf_reserve_slow(b, extra);
}

static inline void buf_append(buf *b, const void *p, size_t n)
{
    if (n == 0 || !buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static inline void buf_put_u8(buf *b, uint8_t v)
{
    if (!buf_reserve(b, 1))
        return;
    b->data[b->len++] = v;
}

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    bool failed;
} rd;

void rd_init(rd *r, const void *p, size_t n);
size_t rd_left(const rd *r);
uint8_t rd_u8(rd *r);
uint16_t rd_u16be(rd *r);
uint32_t rd_u32be(rd *r);
uint64_t rd_u64be(rd *r);
uint64_t rd_varint(rd *r);                 /* fails on more than 10 bytes or overflow */
const uint8_t *rd_bytes(rd *r, size_t n);  /* NULL (and failed) if fewer than n left */

#endif
