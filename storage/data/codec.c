/*
 * Item encoding. The decoder is written for hostile input: it never reads past the end
 * (an inlined rd reader), never allocates more than the input could describe (every element costs
 * at least one byte, so a count larger than the bytes left is rejected before allocating), and
 * checks every invariant value.h promises, so a decoded item is as trustworthy as a freshly
 * validated request.
 */
#include "storage/data/codec.h"

#include <assert.h>
#include <string.h>

#define NUM_NEG_FLAG 0x80

/*
 * Encoding is two passes: measure, reserve once, then write through a raw pointer. Items
 * are written on every put, and this avoids a bounds check and a call per byte.
 */

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t num_size(const num *n)
{
    return n->ndigits == 0 ? 1 : 2 + ((size_t)n->ndigits + 1) / 2;
}

static size_t body_size(const av *v);

static size_t value_size(const av *v)
{
    return 1 + body_size(v);
}

static size_t body_size(const av *v)
{
    size_t size = 0;
    switch (v->type) {
    case AV_S:
    case AV_B:
        return varint_size(v->u.bytes.len) + v->u.bytes.len;
    case AV_N:
        return num_size(&v->u.n);
    case AV_BOOL:
        return 1;
    case AV_NULL:
        return 0;
    case AV_M:
        size = varint_size(v->u.map.count);
        for (uint32_t i = 0; i < v->u.map.count; i++) {
            const av_attr *at = &v->u.map.attrs[i];
            size += varint_size(at->name_len) + at->name_len + value_size(&at->value);
        }
        return size;
    case AV_L:
        size = varint_size(v->u.list.count);
        for (uint32_t i = 0; i < v->u.list.count; i++)
            size += value_size(&v->u.list.elems[i]);
        return size;
    case AV_SS:
    case AV_NS:
    case AV_BS:
        size = varint_size(v->u.list.count);
        for (uint32_t i = 0; i < v->u.list.count; i++)
            size += body_size(&v->u.list.elems[i]);
        return size;
    }
    return 0;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *put_bytes(uint8_t *p, const void *bytes, uint32_t len)
{
    p = put_varint(p, len);
    if (len > 0)
        memcpy(p, bytes, len);
    return p + len;
}

static uint8_t *put_num(uint8_t *p, const num *n)
{
    *p++ = (uint8_t)(n->ndigits | (n->neg ? NUM_NEG_FLAG : 0));
    if (n->ndigits == 0)
        return p;
    *p++ = (uint8_t)(n->exp - NUM_MIN_EXP);
    for (int j = 0; j < n->ndigits; j += 2) {
        uint8_t lo = j + 1 < n->ndigits ? n->d[j + 1] : 0;
        *p++ = (uint8_t)(n->d[j] << 4 | lo);
    }
    return p;
}

static uint8_t *put_body(uint8_t *p, const av *v);

static uint8_t *put_value(uint8_t *p, const av *v)
{
    *p++ = (uint8_t)v->type;
    return put_body(p, v);
}

static uint8_t *put_body(uint8_t *p, const av *v)
{
    switch (v->type) {
    case AV_S:
    case AV_B:
        return put_bytes(p, v->u.bytes.ptr, v->u.bytes.len);
    case AV_N:
        return put_num(p, &v->u.n);
    case AV_BOOL:
        *p++ = v->u.boolean ? 1 : 0;
        return p;
    case AV_NULL:
        return p;
    case AV_M:
        p = put_varint(p, v->u.map.count);
        for (uint32_t i = 0; i < v->u.map.count; i++) {
            const av_attr *at = &v->u.map.attrs[i];
            p = put_bytes(p, at->name, at->name_len);
            p = put_value(p, &at->value);
        }
        return p;
    case AV_L:
        p = put_varint(p, v->u.list.count);
        for (uint32_t i = 0; i < v->u.list.count; i++)
            p = put_value(p, &v->u.list.elems[i]);
        return p;
    case AV_SS:
    case AV_NS:
    case AV_BS:
        /* Elements share the set's type, so they carry no tag. */
        p = put_varint(p, v->u.list.count);
        for (uint32_t i = 0; i < v->u.list.count; i++)
            p = put_body(p, &v->u.list.elems[i]);
        return p;
    }
    return p;
}

static bool valid_type(av_type t)
{
    return t >= AV_S && t <= AV_BS;
}

void av_encode(const av *v, buf *out)
{
    if (!valid_type(v->type)) {
        out->failed = true;
        return;
    }
    size_t size = value_size(v);
    if (!buf_reserve(out, size))
        return;
    uint8_t *end = put_value(out->data + out->len, v);
    assert((size_t)(end - (out->data + out->len)) == size);
    (void)end;
    out->len += size;
}

size_t item_encoded_size(const av *item)
{
    return 1 + body_size(item);
}

void item_encode(const av *item, buf *out)
{
    assert(item->type == AV_M);
    size_t size = item_encoded_size(item);
    if (!buf_reserve(out, size))
        return;
    uint8_t *p = out->data + out->len;
    *p++ = ITEM_FORMAT_VERSION;
    uint8_t *end = put_body(p, item);
    assert((size_t)(end - (out->data + out->len)) == size);
    (void)end;
    out->len += size;
}

/* ---- decoding ---- */

typedef struct {
    rd r;
    arena *a;
    strata_err *err;
    bool nomem;
} decoder;

/*
 * The rd reader's contract (sticky failure, never past the end), inlined: decoding runs
 * on every read and these are called per byte.
 */
static inline size_t in_left(const rd *r)
{
    return r->failed ? 0 : (size_t)(r->end - r->p);
}

static inline uint8_t in_u8(rd *r)
{
    if (r->failed || r->p >= r->end) {
        r->failed = true;
        return 0;
    }
    return *r->p++;
}

static inline const uint8_t *in_bytes(rd *r, size_t n)
{
    if (r->failed || n > (size_t)(r->end - r->p)) {
        r->failed = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

/* LEB128, at most 10 bytes, no bits beyond 64. */
static inline uint64_t in_varint(rd *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        uint8_t b = in_u8(r);
        if (r->failed)
            return 0;
        if (shift == 63 && b > 1) {
            r->failed = true;
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->failed = true;
    return 0;
}

static int corrupt(decoder *d, const char *what)
{
    if (d->nomem)
        return strata_err_set(d->err, ERR_NOMEM, "out of memory decoding an item");
    return strata_err_set(d->err, ERR_CORRUPT, "corrupt item encoding: %s", what);
}

/* A count of elements each taking at least `min_size` bytes, checked against what is
 * left so allocation is bounded by the input size. */
static int read_count(decoder *d, size_t min_size, uint32_t *count)
{
    uint64_t c = in_varint(&d->r);
    if (d->r.failed || c > UINT32_MAX || c > in_left(&d->r) / min_size)
        return corrupt(d, "bad count");
    *count = (uint32_t)c;
    return 0;
}

static int read_bytes(decoder *d, const uint8_t **p, uint32_t *len)
{
    uint64_t n = in_varint(&d->r);
    if (d->r.failed || n > in_left(&d->r))
        return corrupt(d, "bad length");
    *p = in_bytes(&d->r, (size_t)n);
    *len = (uint32_t)n;
    return 0;
}

static int decode_num(decoder *d, num *n)
{
    uint8_t head = in_u8(&d->r);
    if (d->r.failed)
        return corrupt(d, "truncated number");
    uint8_t nd = head & 0x7f;
    n->neg = (head & NUM_NEG_FLAG) != 0;
    n->ndigits = nd;
    n->exp = 0;
    if (nd == 0)
        return n->neg ? corrupt(d, "negative zero") : 0;
    if (nd > NUM_MAX_DIGITS)
        return corrupt(d, "too many digits");
    uint8_t e = in_u8(&d->r);
    const uint8_t *pk = in_bytes(&d->r, (size_t)(nd + 1) / 2);
    if (pk == NULL)
        return corrupt(d, "truncated number");
    int exp = (int)e + NUM_MIN_EXP;
    if (exp > NUM_MAX_EXP)
        return corrupt(d, "exponent out of range");
    n->exp = (int16_t)exp;
    for (int j = 0; j < nd; j += 2) {
        uint8_t hi = pk[j / 2] >> 4, lo = pk[j / 2] & 15;
        if (hi > 9 || lo > 9 || (j + 1 == nd && lo != 0))
            return corrupt(d, "bad digit");
        n->d[j] = hi;
        if (j + 1 < nd)
            n->d[j + 1] = lo;
    }
    if (n->d[0] == 0 || n->d[nd - 1] == 0)
        return corrupt(d, "number not normalized");
    return 0;
}

static int decode_value(decoder *d, av *v, int depth);

static int cmp_name(const av_attr *a, const av_attr *b)
{
    size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
    int c = n ? memcmp(a->name, b->name, n) : 0;
    if (c != 0)
        return c;
    return (a->name_len > b->name_len) - (a->name_len < b->name_len);
}

static int decode_map(decoder *d, av *v, int depth)
{
    uint32_t count = 0;
    /* name length + tag */
    if (read_count(d, 2, &count) != 0)
        return -1;
    av_attr *attrs = NULL;
    if (count > 0) {
        attrs = arena_alloc(d->a, (size_t)count * sizeof(av_attr));
        if (attrs == NULL) {
            d->nomem = true;
            return corrupt(d, "");
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *name = NULL;
        if (read_bytes(d, &name, &attrs[i].name_len) != 0)
            return -1;
        attrs[i].name = (const char *)name;
        if (i > 0 && cmp_name(&attrs[i - 1], &attrs[i]) >= 0)
            return corrupt(d, "attribute names not sorted and unique");
        if (decode_value(d, &attrs[i].value, depth) != 0)
            return -1;
    }
    v->u.map.attrs = attrs;
    v->u.map.count = count;
    return 0;
}

static int decode_list(decoder *d, av *v, int depth)
{
    uint32_t count = 0;
    if (read_count(d, 1, &count) != 0)
        return -1;
    av *elems = NULL;
    if (count > 0) {
        elems = arena_alloc(d->a, (size_t)count * sizeof(av));
        if (elems == NULL) {
            d->nomem = true;
            return corrupt(d, "");
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        if (decode_value(d, &elems[i], depth) != 0)
            return -1;
    }
    v->u.list.elems = elems;
    v->u.list.count = count;
    return 0;
}

static int decode_set(decoder *d, av *v)
{
    uint32_t count = 0;
    if (read_count(d, 1, &count) != 0)
        return -1;
    if (count == 0)
        return corrupt(d, "empty set");
    av *elems = arena_alloc(d->a, (size_t)count * sizeof(av));
    if (elems == NULL) {
        d->nomem = true;
        return corrupt(d, "");
    }
    av_type et = v->type == AV_SS ? AV_S : v->type == AV_NS ? AV_N : AV_B;
    for (uint32_t i = 0; i < count; i++) {
        elems[i].type = et;
        if (et == AV_N) {
            if (decode_num(d, &elems[i].u.n) != 0)
                return -1;
        } else if (read_bytes(d, &elems[i].u.bytes.ptr, &elems[i].u.bytes.len) != 0) {
            return -1;
        }
        if (i > 0 && av_cmp_scalar(&elems[i - 1], &elems[i]) >= 0)
            return corrupt(d, "set not sorted and unique");
    }
    /* Set members keep the element type in memory; the set itself has the set type. */
    v->u.list.elems = elems;
    v->u.list.count = count;
    return 0;
}

/* `depth` is the number of maps and lists that enclose v. */
static int decode_value(decoder *d, av *v, int depth)
{
    uint8_t tag = in_u8(&d->r);
    if (d->r.failed)
        return corrupt(d, "truncated value");
    if (tag < AV_S || tag > AV_BS)
        return corrupt(d, "bad type tag");
    v->type = (av_type)tag;
    switch (v->type) {
    case AV_S:
    case AV_B:
        return read_bytes(d, &v->u.bytes.ptr, &v->u.bytes.len);
    case AV_N:
        return decode_num(d, &v->u.n);
    case AV_BOOL: {
        uint8_t b = in_u8(&d->r);
        if (d->r.failed || b > 1)
            return corrupt(d, "bad boolean");
        v->u.boolean = b == 1;
        return 0;
    }
    case AV_NULL:
        return 0;
    case AV_M:
    case AV_L:
        if (depth >= AV_MAX_DEPTH)
            return corrupt(d, "nested too deeply");
        return v->type == AV_M ? decode_map(d, v, depth + 1) : decode_list(d, v, depth + 1);
    case AV_SS:
    case AV_NS:
    case AV_BS:
        return decode_set(d, v);
    }
    return corrupt(d, "bad type tag");
}

int item_decode(const uint8_t *p, size_t n, arena *a, av *out, strata_err *err)
{
    decoder d = {.a = a, .err = err, .nomem = false};
    if (n == 0) /* also keeps a NULL `p` away from pointer arithmetic */
        return corrupt(&d, "empty input");
    rd_init(&d.r, p, n);
    uint8_t version = in_u8(&d.r);
    if (d.r.failed || version != ITEM_FORMAT_VERSION)
        return corrupt(&d, "unknown format version");
    out->type = AV_M;
    if (decode_map(&d, out, 0) != 0)
        return -1;
    if (in_left(&d.r) != 0)
        return corrupt(&d, "trailing bytes");
    return 0;
}

int item_decode_copy(const uint8_t *p, size_t n, arena *a, av *out, strata_err *err)
{
    const uint8_t *copy = arena_memdup(a, p, n);
    if (copy == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory decoding an item");
    return item_decode(copy, n, a, out, err);
}
