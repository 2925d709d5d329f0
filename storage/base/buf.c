#include "storage/base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t buf_limit(const buf *b)
{
    return b->limit ? b->limit : SIZE_MAX / 2;
}

void buf_init(buf *b, size_t limit)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->limit = limit;
    b->failed = false;
}

void buf_free(buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

void buf_reset(buf *b)
{
    b->len = 0;
    b->failed = false;
}

bool buf_reserve_slow(buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (extra > buf_limit(b) - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + extra;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 4 ? need : cap * 2;
    if (cap > buf_limit(b))
        cap = buf_limit(b);
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void buf_put_u16be(buf *b, uint16_t v)
{
    uint8_t t[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    buf_append(b, t, sizeof t);
}

void buf_put_u32be(buf *b, uint32_t v)
{
    uint8_t t[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    buf_append(b, t, sizeof t);
}

void buf_put_u64be(buf *b, uint64_t v)
{
    buf_put_u32be(b, (uint32_t)(v >> 32));
    buf_put_u32be(b, (uint32_t)v);
}

void buf_put_varint(buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        t[n++] = byte | (v ? 0x80 : 0);
    } while (v);
    buf_append(b, t, n);
}

void buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if (!buf_reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

uint8_t *buf_steal(buf *b, size_t *len)
{
    uint8_t *p = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void rd_init(rd *r, const void *p, size_t n)
{
    /* NULL + 0 is undefined behaviour in C: an empty reader points at a static byte. */
    static const uint8_t empty;
    r->p = p != NULL ? p : &empty;
    r->end = r->p + (p != NULL ? n : 0);
    r->failed = false;
}

size_t rd_left(const rd *r)
{
    return r->failed ? 0 : (size_t)(r->end - r->p);
}

const uint8_t *rd_bytes(rd *r, size_t n)
{
    if (r->failed || n > (size_t)(r->end - r->p)) {
        r->failed = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

uint8_t rd_u8(rd *r)
{
    const uint8_t *p = rd_bytes(r, 1);
    return p ? p[0] : 0;
}

uint16_t rd_u16be(rd *r)
{
    const uint8_t *p = rd_bytes(r, 2);
    return p ? (uint16_t)((p[0] << 8) | p[1]) : 0;
}

uint32_t rd_u32be(rd *r)
{
    const uint8_t *p = rd_bytes(r, 4);
    if (p == NULL)
        return 0;
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

uint64_t rd_u64be(rd *r)
{
    uint64_t hi = rd_u32be(r);
    uint64_t lo = rd_u32be(r);
    return (hi << 32) | lo;
}

uint64_t rd_varint(rd *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        uint8_t byte = rd_u8(r);
        if (r->failed)
            return 0;
        if (shift == 63 && (byte & 0x7e)) /* would overflow 64 bits */
            break;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0)
            return v;
    }
    r->failed = true;
    return 0;
}

size_t u64_decimal(uint64_t v, char out[U64_DECIMAL_MAX])
{
    char tmp[U64_DECIMAL_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}
