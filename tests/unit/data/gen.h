/*
 * Random attribute values for tests and benchmarks: every value satisfies value.h's
 * invariants (sorted unique maps and sets, normalized numbers, bounded depth).
 * Header-only (static functions) so each test binary gets its own copy.
 */
#ifndef STRATA_TESTS_DATA_GEN_H
#define STRATA_TESTS_DATA_GEN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/value.h"

typedef struct {
    uint64_t s;
} gen_rng;

static inline uint64_t gen_next(gen_rng *r)
{
    /* xorshift64* */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ULL;
}

static inline uint32_t gen_below(gen_rng *r, uint32_t n)
{
    return (uint32_t)(gen_next(r) % n);
}

/* A normalized number with tricky shapes: zero, small integers, extreme exponents, full
 * 38-digit mantissas. */
static inline void gen_num(gen_rng *r, num *n)
{
    memset(n, 0, sizeof *n);
    uint32_t kind = gen_below(r, 10);
    if (kind == 0)
        return; /* zero */
    int nd;
    int exp;
    if (kind <= 3) { /* small integer */
        nd = 1 + (int)gen_below(r, 6);
        exp = nd + (int)gen_below(r, 3);
    } else if (kind <= 5) { /* small fraction or mixed */
        nd = 1 + (int)gen_below(r, 8);
        exp = (int)gen_below(r, 6) - 3;
    } else if (kind == 6) { /* extreme exponent */
        nd = 1 + (int)gen_below(r, NUM_MAX_DIGITS);
        exp = gen_below(r, 2) ? NUM_MAX_EXP - (int)gen_below(r, 3)
                              : NUM_MIN_EXP + (int)gen_below(r, 3);
    } else {
        nd = 1 + (int)gen_below(r, NUM_MAX_DIGITS);
        exp = NUM_MIN_EXP + (int)gen_below(r, NUM_MAX_EXP - NUM_MIN_EXP + 1);
    }
    for (int j = 0; j < nd; j++)
        n->d[j] = (uint8_t)gen_below(r, 10);
    /* Few distinct digits make near-equal numbers (shared prefixes) common. */
    if (gen_below(r, 3) == 0) {
        for (int j = 0; j < nd; j++)
            n->d[j] = (uint8_t)(n->d[j] < 5 ? 1 : 9);
    }
    if (n->d[0] == 0)
        n->d[0] = (uint8_t)(1 + gen_below(r, 9));
    if (n->d[nd - 1] == 0)
        n->d[nd - 1] = (uint8_t)(1 + gen_below(r, 9));
    n->ndigits = (uint8_t)nd;
    n->exp = (int16_t)exp;
    n->neg = gen_below(r, 2) == 0;
}

/* Bytes from a small alphabet that includes 0x00 and 0xFF, so prefixes and escapes are
 * exercised; `text` restricts to printable ASCII. */
static inline const uint8_t *gen_bytes(gen_rng *r, arena *a, uint32_t max_len, bool text,
                                       uint32_t *len)
{
    static const uint8_t alpha[] = {0x00, 0x01, 'a', 'b', 0x7f, 0x80, 0xfe, 0xff};
    uint32_t n = gen_below(r, max_len + 1);
    uint8_t *p = arena_alloc(a, n ? n : 1);
    for (uint32_t i = 0; i < n; i++)
        p[i] = text ? (uint8_t)('a' + gen_below(r, 4)) : alpha[gen_below(r, sizeof alpha)];
    *len = n;
    return p;
}

static inline void gen_scalar(gen_rng *r, arena *a, av_type t, uint32_t max_len, av *v)
{
    memset(v, 0, sizeof *v);
    v->type = t;
    if (t == AV_N)
        gen_num(r, &v->u.n);
    else
        v->u.bytes.ptr = gen_bytes(r, a, max_len, t == AV_S, &v->u.bytes.len);
}

static inline int gen_cmp_scalar(const void *x, const void *y)
{
    return av_cmp_scalar(x, y);
}

static inline int gen_cmp_attr(const void *x, const void *y)
{
    const av_attr *p = x, *q = y;
    size_t n = p->name_len < q->name_len ? p->name_len : q->name_len;
    int c = n ? memcmp(p->name, q->name, n) : 0;
    if (c)
        return c;
    return (p->name_len > q->name_len) - (p->name_len < q->name_len);
}

static inline void gen_value(gen_rng *r, arena *a, int depth, uint32_t width, av *v);

static inline void gen_map(gen_rng *r, arena *a, int depth, uint32_t width, av *v)
{
    uint32_t n = gen_below(r, width + 1);
    av_attr *attrs = arena_alloc(a, sizeof(av_attr) * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        attrs[i].name = (const char *)gen_bytes(r, a, 6, true, &len);
        if (len == 0) { /* attribute names are never empty (ddbjson refuses them) */
            attrs[i].name = "e";
            len = 1;
        }
        attrs[i].name_len = len;
        gen_value(r, a, depth + 1, width, &attrs[i].value);
    }
    qsort(attrs, n, sizeof(av_attr), gen_cmp_attr);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (k == 0 || gen_cmp_attr(&attrs[k - 1], &attrs[i]) != 0)
            attrs[k++] = attrs[i];
    }
    v->type = AV_M;
    v->u.map.attrs = attrs;
    v->u.map.count = k;
}

static inline void gen_value(gen_rng *r, arena *a, int depth, uint32_t width, av *v)
{
    memset(v, 0, sizeof *v);
    uint32_t pick = gen_below(r, depth >= 4 ? 7 : 10);
    static const av_type order[] = {AV_S,  AV_N,  AV_B,  AV_BOOL, AV_NULL,
                                    AV_SS, AV_NS, AV_BS, AV_M,    AV_L};
    av_type t = order[pick];
    v->type = t;
    switch (t) {
    case AV_S:
    case AV_N:
    case AV_B:
        gen_scalar(r, a, t, 12, v);
        return;
    case AV_BOOL:
        v->u.boolean = gen_below(r, 2);
        return;
    case AV_NULL:
        return;
    case AV_SS:
    case AV_NS:
    case AV_BS: {
        av_type et = t == AV_SS ? AV_S : t == AV_NS ? AV_N : AV_B;
        uint32_t n = 1 + gen_below(r, width);
        av *e = arena_alloc(a, sizeof(av) * n);
        for (uint32_t i = 0; i < n; i++)
            gen_scalar(r, a, et, 6, &e[i]);
        qsort(e, n, sizeof(av), gen_cmp_scalar);
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (k == 0 || av_cmp_scalar(&e[k - 1], &e[i]) != 0)
                e[k++] = e[i];
        }
        v->u.list.elems = e;
        v->u.list.count = k;
        return;
    }
    case AV_M:
        gen_map(r, a, depth, width, v);
        return;
    case AV_L: {
        uint32_t n = gen_below(r, width + 1);
        av *e = arena_alloc(a, sizeof(av) * (n ? n : 1));
        for (uint32_t i = 0; i < n; i++)
            gen_value(r, a, depth + 1, width, &e[i]);
        v->u.list.elems = e;
        v->u.list.count = n;
        return;
    }
    }
}

/* A random item (top-level map). */
static inline void gen_item(gen_rng *r, arena *a, uint32_t width, av *v)
{
    gen_map(r, a, 0, width, v);
}

#endif
