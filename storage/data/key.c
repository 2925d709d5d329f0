/*
 * Order-preserving key encodings. See key.h for the layout and why it sorts correctly:
 * the one subtle part is numbers, where the sign class comes first, then the exponent
 * (larger magnitude, larger exponent, since numbers are normalized), then base-100
 * digits whose terminator is smaller than every digit pair, so a prefix sorts first;
 * negatives complement all of that to reverse the order.
 */
#include "storage/data/key.h"

#include <assert.h>
#include <string.h>
#include <xxhash.h>

#define NUM_CLASS_NEG  0x40
#define NUM_CLASS_ZERO 0x80
#define NUM_CLASS_POS  0xC0

static void encode_bytes(const uint8_t *p, size_t n, buf *out, bool terminate)
{
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == 0x00) {
            buf_append(out, p + start, i + 1 - start);
            buf_put_u8(out, 0xFF);
            start = i + 1;
        }
    }
    if (n > start) /* p may be NULL for an empty value */
        buf_append(out, p + start, n - start);
    if (terminate) {
        buf_put_u8(out, 0x00);
        buf_put_u8(out, 0x01);
    }
}

static void encode_num(const num *n, buf *out)
{
    if (n->ndigits == 0) {
        buf_put_u8(out, NUM_CLASS_ZERO);
        return;
    }
    uint8_t tmp[2 + NUM_MAX_DIGITS / 2 + 2];
    size_t k = 0;
    tmp[k++] = (uint8_t)(n->exp - NUM_MIN_EXP);
    for (int j = 0; j < n->ndigits; j += 2) {
        int lo = j + 1 < n->ndigits ? n->d[j + 1] : 0;
        tmp[k++] = (uint8_t)(n->d[j] * 10 + lo + 1);
    }
    tmp[k++] = 0x00;
    if (n->neg) {
        for (size_t i = 0; i < k; i++)
            tmp[i] = (uint8_t)(255 - tmp[i]);
    }
    buf_put_u8(out, n->neg ? NUM_CLASS_NEG : NUM_CLASS_POS);
    buf_append(out, tmp, k);
}

void key_encode_value(const av *v, buf *out)
{
    switch (v->type) {
    case AV_S:
    case AV_B:
        encode_bytes(v->u.bytes.ptr, v->u.bytes.len, out, true);
        return;
    case AV_N:
        encode_num(&v->u.n, out);
        return;
    default:
        assert(!"key values are S, N or B");
        out->failed = true;
    }
}

static int bad_key(strata_err *err, const char *what)
{
    return strata_err_set(err, ERR_CORRUPT, "corrupt key encoding: %s", what);
}

static int decode_bytes(const uint8_t *p, size_t n, arena *a, av *out, size_t *used,
                        strata_err *err)
{
    /* First pass: find the terminator and the decoded length. */
    size_t i = 0, len = 0;
    for (;;) {
        if (i >= n)
            return bad_key(err, "unterminated bytes");
        if (p[i] != 0x00) {
            i++;
            len++;
            continue;
        }
        if (i + 1 >= n)
            return bad_key(err, "unterminated bytes");
        if (p[i + 1] == 0x01)
            break;
        if (p[i + 1] != 0xFF)
            return bad_key(err, "bad escape");
        i += 2;
        len++;
    }
    uint8_t *dst = arena_alloc(a, len);
    if (dst == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory decoding a key");
    size_t k = 0;
    for (size_t j = 0; j < i; j++) {
        dst[k++] = p[j];
        if (p[j] == 0x00)
            j++; /* skip the 0xFF escape */
    }
    out->u.bytes.ptr = dst;
    out->u.bytes.len = (uint32_t)len;
    *used = i + 2;
    return 0;
}

static int decode_num(const uint8_t *p, size_t n, num *out, size_t *used, strata_err *err)
{
    if (n < 1)
        return bad_key(err, "empty number");
    out->exp = 0;
    out->ndigits = 0;
    out->neg = false;
    if (p[0] == NUM_CLASS_ZERO) {
        *used = 1;
        return 0;
    }
    if (p[0] != NUM_CLASS_POS && p[0] != NUM_CLASS_NEG)
        return bad_key(err, "bad number class");
    bool neg = p[0] == NUM_CLASS_NEG;
    uint8_t flip = neg ? 0xFF : 0x00;
    if (n < 3)
        return bad_key(err, "truncated number");
    int exp = (int)(uint8_t)(p[1] ^ flip) + NUM_MIN_EXP;
    if (exp > NUM_MAX_EXP)
        return bad_key(err, "exponent out of range");
    /* Digit pairs up to the terminator; at most 19 pairs hold 38 digits. */
    uint8_t digits[NUM_MAX_DIGITS];
    int nd = 0;
    size_t i = 2;
    for (;;) {
        if (i >= n)
            return bad_key(err, "unterminated number");
        uint8_t b = p[i++] ^ flip;
        if (b == 0)
            break;
        if (b > 100 || nd + 2 > NUM_MAX_DIGITS)
            return bad_key(err, "bad digits");
        digits[nd++] = (uint8_t)((b - 1) / 10);
        digits[nd++] = (uint8_t)((b - 1) % 10);
    }
    /* Only a final odd digit is padded with a zero; anything else is not canonical. */
    if (nd > 0 && digits[nd - 1] == 0)
        nd--;
    if (nd == 0 || digits[0] == 0 || digits[nd - 1] == 0)
        return bad_key(err, "number not normalized");
    memcpy(out->d, digits, (size_t)nd);
    out->ndigits = (uint8_t)nd;
    out->exp = (int16_t)exp;
    out->neg = neg;
    *used = i;
    return 0;
}

int key_decode_value(const uint8_t *p, size_t n, av_type t, arena *a, av *out, size_t *used,
                     strata_err *err)
{
    out->type = t;
    switch (t) {
    case AV_S:
    case AV_B:
        return decode_bytes(p, n, a, out, used, err);
    case AV_N:
        return decode_num(p, n, &out->u.n, used, err);
    default:
        return bad_key(err, "key type is not S, N or B");
    }
}

uint64_t key_hash(const av *pk)
{
    /* Most keys are short: encode them on the stack, this runs on every request. */
    uint8_t stack[512];
    buf b;
    buf_init(&b, 0);
    b.data = stack;
    b.cap = sizeof stack;
    b.limit = sizeof stack;
    key_encode_value(pk, &b);
    if (!b.failed)
        return XXH3_64bits(stack, b.len);
    buf_init(&b, 0);
    key_encode_value(pk, &b);
    uint64_t h = XXH3_64bits(b.data, b.len);
    buf_free(&b);
    return h;
}

void storage_key_build(uint32_t table_id, const av *pk, const av *sk, buf *out)
{
    buf_put_u32be(out, table_id);
    size_t hash_at = out->len;
    buf_put_u64be(out, 0); /* patched once the key bytes are known */
    size_t pk_at = out->len;
    key_encode_value(pk, out);
    if (out->failed)
        return;
    uint64_t h = XXH3_64bits(out->data + pk_at, out->len - pk_at);
    for (int i = 0; i < 8; i++)
        out->data[hash_at + (size_t)i] = (uint8_t)(h >> (56 - 8 * i));
    if (sk != NULL)
        key_encode_value(sk, out);
}

int storage_key_parse(const uint8_t *p, size_t n, av_type pk_type, av_type sk_type, arena *a,
                      uint32_t *table_id, uint64_t *hash, av *pk, av *sk, strata_err *err)
{
    if (n < STORAGE_KEY_PREFIX_LEN)
        return bad_key(err, "truncated storage key");
    rd r;
    rd_init(&r, p, n);
    uint32_t tid = rd_u32be(&r);
    uint64_t h = rd_u64be(&r);
    if (r.failed)
        return bad_key(err, "truncated storage key");
    size_t off = STORAGE_KEY_PREFIX_LEN, used;
    if (key_decode_value(p + off, n - off, pk_type, a, pk, &used, err) != 0)
        return -1;
    if (XXH3_64bits(p + off, used) != h)
        return bad_key(err, "partition key hash mismatch");
    off += used;
    if (sk_type != 0) {
        if (key_decode_value(p + off, n - off, sk_type, a, sk, &used, err) != 0)
            return -1;
        off += used;
    }
    if (off != n)
        return bad_key(err, "trailing bytes");
    *table_id = tid;
    *hash = h;
    return 0;
}

bool key_prefix_successor(buf *b)
{
    while (b->len > 0 && b->data[b->len - 1] == 0xFF)
        b->len--;
    if (b->len == 0)
        return false;
    b->data[b->len - 1]++;
    return true;
}

bool storage_key_range_hash(uint32_t table_id, uint64_t hash_first, uint64_t hash_last, buf *lo,
                            buf *hi)
{
    buf_reset(lo);
    buf_reset(hi);
    buf_put_u32be(lo, table_id);
    buf_put_u64be(lo, hash_first);
    buf_put_u32be(hi, table_id);
    buf_put_u64be(hi, hash_last);
    /* Every key with hash_last is below the successor of its 12-byte prefix. */
    return key_prefix_successor(hi);
}

void storage_key_range_partition(uint32_t table_id, const av *pk, buf *lo, buf *hi)
{
    buf_reset(lo);
    buf_reset(hi);
    storage_key_build(table_id, pk, NULL, lo);
    buf_append(hi, lo->data, lo->len);
    /* enc(pk) never ends in 0xFF for S/B (terminator 0x01), and for N ends in 0x00, 0x80
     * or 0xFF; the successor handles all of them. */
    key_prefix_successor(hi);
}

void storage_key_range_sk_prefix(uint32_t table_id, const av *pk, const av *prefix, buf *lo,
                                 buf *hi)
{
    assert(prefix->type == AV_S || prefix->type == AV_B);
    buf_reset(lo);
    buf_reset(hi);
    storage_key_build(table_id, pk, NULL, lo);
    encode_bytes(prefix->u.bytes.ptr, prefix->u.bytes.len, lo, false);
    buf_append(hi, lo->data, lo->len);
    key_prefix_successor(hi);
}
