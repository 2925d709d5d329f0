/* Unit tests for storage/data/key: order preservation, self-delimiting, storage keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "storage/data/key.h"
#include "tests/unit/data/gen.h"

static int sign(int x)
{
    return (x > 0) - (x < 0);
}

static int cmp_buf(const buf *a, const buf *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    if (c)
        return sign(c);
    return (a->len > b->len) - (a->len < b->len);
}

static av num_av(const char *s)
{
    av v = {.type = AV_N};
    assert_int_equal(num_parse(s, strlen(s), &v.u.n, NULL), 0);
    return v;
}

static void check_pair(const av *x, const av *y, buf *ex, buf *ey)
{
    buf_reset(ex);
    buf_reset(ey);
    key_encode_value(x, ex);
    key_encode_value(y, ey);
    int want = sign(av_cmp_scalar(x, y));
    int got = cmp_buf(ex, ey);
    if (want != got) {
        char a[NUM_TEXT_MAX] = "", b[NUM_TEXT_MAX] = "";
        if (x->type == AV_N) {
            num_format(&x->u.n, a, sizeof a);
            num_format(&y->u.n, b, sizeof b);
        }
        fail_msg("order mismatch (type %d) %s vs %s: want %d got %d", x->type, a, b, want, got);
    }
}

static void order_property_random_pairs(void **state)
{
    (void)state;
    gen_rng r = {42};
    buf ex, ey;
    buf_init(&ex, 0);
    buf_init(&ey, 0);
    static const av_type types[] = {AV_S, AV_N, AV_B};
    for (int i = 0; i < 100000; i++) {
        arena a;
        arena_init(&a, 0);
        av x, y;
        av_type t = types[i % 3];
        gen_scalar(&r, &a, t, 8, &x);
        if (gen_below(&r, 4) == 0) {
            /* Near neighbours: same value, or a prefix / one-digit change. */
            y = x;
            if (t == AV_N && y.u.n.ndigits > 1 && gen_below(&r, 2))
                y.u.n.ndigits--;
            while (t == AV_N && y.u.n.ndigits > 0 && y.u.n.d[y.u.n.ndigits - 1] == 0)
                y.u.n.ndigits--;
            if (t != AV_N && y.u.bytes.len > 0 && gen_below(&r, 2))
                y.u.bytes.len--;
        } else {
            gen_scalar(&r, &a, t, 8, &y);
        }
        check_pair(&x, &y, &ex, &ey);
        arena_free(&a);
    }
    buf_free(&ex);
    buf_free(&ey);
}

static void order_tricky_numbers(void **state)
{
    (void)state;
    static const char *nums[] = {
        "-9.9999999999999999999999999999999999999E+125",
        "-1E+125",
        "-100",
        "-99.5",
        "-10",
        "-9",
        "-1.01",
        "-1.001",
        "-1",
        "-0.99",
        "-0.1",
        "-0.01",
        "-1E-129",
        "-1E-130",
        "0",
        "1E-130",
        "1.1E-130",
        "2E-130",
        "1E-129",
        "0.001",
        "0.01",
        "0.0101",
        "0.011",
        "0.1",
        "0.10000000000000000000000000000000000001",
        "0.11",
        "0.9",
        "1",
        "1.000001",
        "1.01",
        "1.1",
        "2",
        "9",
        "9.99",
        "10",
        "10.5",
        "11",
        "99",
        "100",
        "101",
        "1000",
        "12345678901234567890123456789012345678",
        "1E+125",
        "9.9999999999999999999999999999999999999E+125",
    };
    size_t n = sizeof nums / sizeof nums[0];
    buf ex, ey;
    buf_init(&ex, 0);
    buf_init(&ey, 0);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            av x = num_av(nums[i]), y = num_av(nums[j]);
            assert_int_equal(sign(av_cmp_scalar(&x, &y)), (i > j) - (i < j));
            check_pair(&x, &y, &ex, &ey);
        }
    }
    buf_free(&ex);
    buf_free(&ey);
}

/* Concatenations keep tuple order, and each value decodes back from the front. */
static void self_delimiting_and_decoding(void **state)
{
    (void)state;
    gen_rng r = {4242};
    buf e1, e2;
    buf_init(&e1, 0);
    buf_init(&e2, 0);
    static const av_type types[] = {AV_S, AV_N, AV_B};
    for (int i = 0; i < 30000; i++) {
        arena a;
        arena_init(&a, 0);
        av_type t1 = types[gen_below(&r, 3)], t2 = types[gen_below(&r, 3)];
        av x1, x2, y1, y2;
        gen_scalar(&r, &a, t1, 5, &x1);
        gen_scalar(&r, &a, t2, 5, &x2);
        if (gen_below(&r, 2))
            y1 = x1;
        else
            gen_scalar(&r, &a, t1, 5, &y1);
        gen_scalar(&r, &a, t2, 5, &y2);
        buf_reset(&e1);
        buf_reset(&e2);
        key_encode_value(&x1, &e1);
        key_encode_value(&x2, &e1);
        key_encode_value(&y1, &e2);
        key_encode_value(&y2, &e2);
        int c = av_cmp_scalar(&x1, &y1);
        if (c == 0)
            c = av_cmp_scalar(&x2, &y2);
        assert_int_equal(cmp_buf(&e1, &e2), sign(c));

        av d1, d2;
        size_t used1, used2;
        strata_err err;
        assert_int_equal(key_decode_value(e1.data, e1.len, t1, &a, &d1, &used1, &err), 0);
        assert_int_equal(
            key_decode_value(e1.data + used1, e1.len - used1, t2, &a, &d2, &used2, &err), 0);
        assert_int_equal(used1 + used2, e1.len);
        assert_true(av_equal(&d1, &x1));
        assert_true(av_equal(&d2, &x2));
        /* Truncations never decode to the full pair. */
        for (size_t cut = 0; cut < e1.len; cut++) {
            size_t u;
            av tmp;
            if (key_decode_value(e1.data, cut, t1, &a, &tmp, &u, &err) == 0)
                assert_true(u <= cut);
        }
        arena_free(&a);
    }
    buf_free(&e1);
    buf_free(&e2);
}

static void bad_key_encodings(void **state)
{
    (void)state;
    arena a;
    arena_init(&a, 0);
    av out;
    size_t used;
    strata_err err;
    const uint8_t unterminated[] = {'a', 'b'};
    assert_int_equal(key_decode_value(unterminated, 2, AV_S, &a, &out, &used, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    const uint8_t bad_escape[] = {'a', 0x00, 0x05};
    assert_int_equal(key_decode_value(bad_escape, 3, AV_B, &a, &out, &used, &err), -1);
    const uint8_t escaped[] = {0x00, 0xff, 0x00, 0x01};
    assert_int_equal(key_decode_value(escaped, 4, AV_B, &a, &out, &used, &err), 0);
    assert_int_equal(out.u.bytes.len, 1);
    assert_int_equal(out.u.bytes.ptr[0], 0);
    assert_int_equal(used, 4);
    const uint8_t bad_class[] = {0x41};
    assert_int_equal(key_decode_value(bad_class, 1, AV_N, &a, &out, &used, &err), -1);
    const uint8_t bad_pair[] = {0xC0, 130, 101, 0x00};
    assert_int_equal(key_decode_value(bad_pair, 4, AV_N, &a, &out, &used, &err), -1);
    const uint8_t trailing_zero_pair[] = {0xC0, 130, 11, 1, 0x00};
    assert_int_equal(key_decode_value(trailing_zero_pair, 5, AV_N, &a, &out, &used, &err), -1);
    const uint8_t one[] = {0xC0, 130, 11, 0x00};
    assert_int_equal(key_decode_value(one, 4, AV_N, &a, &out, &used, &err), 0);
    av want = num_av("1");
    assert_true(av_equal(&out, &want));
    uint8_t too_long[64] = {0xC0, 130};
    memset(too_long + 2, 12, 20);
    too_long[22] = 0;
    assert_int_equal(key_decode_value(too_long, 23, AV_N, &a, &out, &used, &err), -1);
    assert_int_equal(key_decode_value(one, 4, AV_BOOL, &a, &out, &used, &err), -1);
    /* An empty value may have a NULL pointer. */
    av empty = {.type = AV_B};
    buf e;
    buf_init(&e, 0);
    key_encode_value(&empty, &e);
    assert_int_equal(e.len, 2);
    assert_int_equal(key_decode_value(e.data, e.len, AV_B, &a, &out, &used, &err), 0);
    assert_int_equal(out.u.bytes.len, 0);
    buf_free(&e);
    assert_int_equal(key_decode_value(NULL, 0, AV_S, &a, &out, &used, &err), -1);
    assert_int_equal(key_decode_value(NULL, 0, AV_N, &a, &out, &used, &err), -1);
    arena_free(&a);
}

static av str_av(const char *s)
{
    av v = {.type = AV_S};
    v.u.bytes.ptr = (const uint8_t *)s;
    v.u.bytes.len = (uint32_t)strlen(s);
    return v;
}

static bool in_range(const buf *k, const buf *lo, const buf *hi, bool hi_bounded)
{
    return cmp_buf(k, lo) >= 0 && (!hi_bounded || cmp_buf(k, hi) < 0);
}

static void storage_keys_and_ranges(void **state)
{
    (void)state;
    arena a;
    arena_init(&a, 0);
    buf k, lo, hi, enc;
    buf_init(&k, 0);
    buf_init(&lo, 0);
    buf_init(&hi, 0);
    buf_init(&enc, 0);

    av pk = str_av("user#1"), sk = num_av("-12.5");
    storage_key_build(7, &pk, &sk, &k);
    assert_false(k.failed);
    key_encode_value(&pk, &enc);
    assert_true(key_hash(&pk) == XXH3_64bits(enc.data, enc.len));
    uint32_t tid;
    uint64_t h;
    av pk2, sk2;
    strata_err err;
    assert_int_equal(storage_key_parse(k.data, k.len, AV_S, AV_N, &a, &tid, &h, &pk2, &sk2, &err),
                     0);
    assert_int_equal(tid, 7);
    assert_true(h == key_hash(&pk));
    assert_true(av_equal(&pk, &pk2));
    assert_true(av_equal(&sk, &sk2));
    /* Wrong schema, bad hash and trailing bytes are corrupt. */
    assert_int_equal(storage_key_parse(k.data, k.len, AV_S, 0, &a, &tid, &h, &pk2, NULL, &err), -1);
    k.data[5] ^= 1;
    assert_int_equal(storage_key_parse(k.data, k.len, AV_S, AV_N, &a, &tid, &h, &pk2, &sk2, &err),
                     -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    k.data[5] ^= 1;
    assert_int_equal(storage_key_parse(k.data, 10, AV_S, AV_N, &a, &tid, &h, &pk2, &sk2, &err), -1);

    /* Long keys hash like short ones (stack fast path vs heap). */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    av bigpk = str_av(big);
    buf_reset(&enc);
    key_encode_value(&bigpk, &enc);
    assert_true(key_hash(&bigpk) == XXH3_64bits(enc.data, enc.len));

    /* Random items: partition, hash and begins_with ranges hold exactly the right keys. */
    gen_rng r = {99};
    for (int i = 0; i < 20000; i++) {
        av p1, p2, s1;
        gen_scalar(&r, &a, AV_B, 3, &p1);
        gen_scalar(&r, &a, AV_B, 3, &p2);
        gen_scalar(&r, &a, AV_S, 4, &s1);
        buf_reset(&k);
        storage_key_build(3, &p2, &s1, &k);
        storage_key_range_partition(3, &p1, &lo, &hi);
        assert_int_equal(in_range(&k, &lo, &hi, true), av_cmp_scalar(&p1, &p2) == 0);

        av prefix;
        gen_scalar(&r, &a, AV_S, 2, &prefix);
        storage_key_range_sk_prefix(3, &p2, &prefix, &lo, &hi);
        bool begins = prefix.u.bytes.len <= s1.u.bytes.len &&
                      memcmp(prefix.u.bytes.ptr, s1.u.bytes.ptr, prefix.u.bytes.len) == 0;
        assert_int_equal(in_range(&k, &lo, &hi, true), begins);

        uint64_t kh = key_hash(&p2);
        uint64_t first = gen_next(&r), last = gen_next(&r);
        if (first > last) {
            uint64_t t = first;
            first = last;
            last = t;
        }
        if (i % 5 == 0)
            first = kh;
        if (i % 7 == 0)
            last = kh;
        bool bounded = storage_key_range_hash(3, first, last, &lo, &hi);
        assert_true(bounded);
        assert_int_equal(in_range(&k, &lo, &hi, true), kh >= first && kh <= last);
        /* Other tables are never inside. */
        buf_reset(&k);
        storage_key_build(4, &p2, &s1, &k);
        assert_false(in_range(&k, &lo, &hi, true));
    }
    assert_true(storage_key_range_hash(3, 0, UINT64_MAX, &lo, &hi));
    assert_int_equal(hi.len, 4);
    assert_false(storage_key_range_hash(UINT32_MAX, 0, UINT64_MAX, &lo, &hi));
    assert_int_equal(hi.len, 0);

    /* Negative number partition keys end in 0xFF: the successor still bounds them. */
    av negpk = num_av("-5");
    av sks = str_av("zzz");
    buf_reset(&k);
    storage_key_build(1, &negpk, &sks, &k);
    storage_key_range_partition(1, &negpk, &lo, &hi);
    assert_true(in_range(&k, &lo, &hi, true));
    av negpk2 = num_av("-4.9");
    buf_reset(&k);
    storage_key_build(1, &negpk2, &sks, &k);
    assert_false(in_range(&k, &lo, &hi, true));

    buf_free(&k);
    buf_free(&lo);
    buf_free(&hi);
    buf_free(&enc);
    arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_property_random_pairs),  cmocka_unit_test(order_tricky_numbers),
        cmocka_unit_test(self_delimiting_and_decoding), cmocka_unit_test(bad_key_encodings),
        cmocka_unit_test(storage_keys_and_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
