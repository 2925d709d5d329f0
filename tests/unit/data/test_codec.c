/* Unit tests for storage/data/codec: round trips, canonical form, hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/data/codec.h"
#include "tests/unit/data/gen.h"

static void expect_corrupt(const uint8_t *p, size_t n)
{
    arena a;
    arena_init(&a, 0);
    av out;
    strata_err err;
    strata_err_clear(&err);
    assert_int_equal(item_decode(p, n, &a, &out, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    arena_free(&a);
}

static void expect_ok(const uint8_t *p, size_t n)
{
    arena a;
    arena_init(&a, 0);
    av out;
    strata_err err;
    strata_err_clear(&err);
    if (item_decode(p, n, &a, &out, &err) != 0)
        fail_msg("decode failed: %s", err.msg);
    arena_free(&a);
}

static void random_round_trips(void **state)
{
    (void)state;
    gen_rng r = {0x9e3779b97f4a7c15ULL};
    buf b1, b2;
    buf_init(&b1, 0);
    buf_init(&b2, 0);
    for (int i = 0; i < 2000; i++) {
        arena a;
        arena_init(&a, 0);
        av item, back, copy;
        gen_item(&r, &a, 6, &item);
        buf_reset(&b1);
        item_encode(&item, &b1);
        assert_false(b1.failed);
        assert_int_equal(b1.data[0], ITEM_FORMAT_VERSION);
        assert_int_equal(b1.len, item_encoded_size(&item));
        strata_err err;
        if (item_decode(b1.data, b1.len, &a, &back, &err) != 0)
            fail_msg("round trip %d failed: %s", i, err.msg);
        assert_true(av_equal(&item, &back));
        assert_int_equal(item_size(&item), item_size(&back));
        buf_reset(&b2);
        item_encode(&back, &b2);
        assert_int_equal(b1.len, b2.len);
        assert_memory_equal(b1.data, b2.data, b1.len);
        assert_int_equal(item_decode_copy(b1.data, b1.len, &a, &copy, &err), 0);
        assert_true(av_equal(&item, &copy));
        /* Every strict prefix is rejected: nothing is silently dropped. */
        if (i % 10 == 0) {
            for (size_t cut = 0; cut < b1.len; cut++)
                expect_corrupt(b1.data, cut);
        }
        arena_free(&a);
    }
    buf_free(&b1);
    buf_free(&b2);
}

/* Flipped bytes either fail cleanly or decode to something that re-encodes stably. */
static void random_corruption_is_safe(void **state)
{
    (void)state;
    gen_rng r = {12345};
    buf b, e1, e2;
    buf_init(&b, 0);
    buf_init(&e1, 0);
    buf_init(&e2, 0);
    for (int i = 0; i < 3000; i++) {
        arena a;
        arena_init(&a, 0);
        av item, back;
        gen_item(&r, &a, 4, &item);
        buf_reset(&b);
        item_encode(&item, &b);
        int flips = 1 + (int)gen_below(&r, 3);
        for (int f = 0; f < flips; f++)
            b.data[gen_below(&r, (uint32_t)b.len)] ^= (uint8_t)(1u << gen_below(&r, 8));
        strata_err err;
        if (item_decode(b.data, b.len, &a, &back, &err) == 0) {
            buf_reset(&e1);
            item_encode(&back, &e1);
            av again;
            assert_int_equal(item_decode(e1.data, e1.len, &a, &again, &err), 0);
            assert_true(av_equal(&back, &again));
            buf_reset(&e2);
            item_encode(&again, &e2);
            assert_int_equal(e1.len, e2.len);
            assert_memory_equal(e1.data, e2.data, e1.len);
        } else {
            assert_true(err.code == ERR_CORRUPT);
        }
        arena_free(&a);
    }
    buf_free(&b);
    buf_free(&e1);
    buf_free(&e2);
}

#define V ITEM_FORMAT_VERSION

static void hand_made_bad_inputs(void **state)
{
    (void)state;
    const uint8_t empty_item[] = {V, 0};
    expect_ok(empty_item, sizeof empty_item);
    expect_corrupt(NULL, 0);
    const uint8_t bad_version[] = {2, 0};
    expect_corrupt(bad_version, sizeof bad_version);
    const uint8_t trailing[] = {V, 0, 0};
    expect_corrupt(trailing, sizeof trailing);
    const uint8_t one_null[] = {V, 1, 1, 'a', AV_NULL};
    expect_ok(one_null, sizeof one_null);
    const uint8_t bad_tag[] = {V, 1, 1, 'a', 11};
    expect_corrupt(bad_tag, sizeof bad_tag);
    const uint8_t zero_tag[] = {V, 1, 1, 'a', 0};
    expect_corrupt(zero_tag, sizeof zero_tag);
    const uint8_t unsorted[] = {V, 2, 1, 'b', AV_NULL, 1, 'a', AV_NULL};
    expect_corrupt(unsorted, sizeof unsorted);
    const uint8_t dup[] = {V, 2, 1, 'a', AV_NULL, 1, 'a', AV_NULL};
    expect_corrupt(dup, sizeof dup);
    const uint8_t sorted[] = {V, 2, 1, 'a', AV_NULL, 2, 'a', 'a', AV_NULL};
    expect_ok(sorted, sizeof sorted);
    const uint8_t huge_count[] = {V, 0xff, 0xff, 0xff, 0xff, 0x0f};
    expect_corrupt(huge_count, sizeof huge_count);
    const uint8_t long_name[] = {V, 1, 5, 'a', AV_NULL};
    expect_corrupt(long_name, sizeof long_name);
    const uint8_t bool_ok[] = {V, 1, 1, 'a', AV_BOOL, 1};
    expect_ok(bool_ok, sizeof bool_ok);
    const uint8_t bool_bad[] = {V, 1, 1, 'a', AV_BOOL, 2};
    expect_corrupt(bool_bad, sizeof bool_bad);
    /* Numbers: 12 = ndigits 2, exp 2 -> 0x12 packed. */
    const uint8_t n12[] = {V, 1, 1, 'n', AV_N, 2, 2 - NUM_MIN_EXP, 0x12};
    expect_ok(n12, sizeof n12);
    const uint8_t n_zero[] = {V, 1, 1, 'n', AV_N, 0};
    expect_ok(n_zero, sizeof n_zero);
    const uint8_t n_negzero[] = {V, 1, 1, 'n', AV_N, 0x80};
    expect_corrupt(n_negzero, sizeof n_negzero);
    const uint8_t n_digit[] = {V, 1, 1, 'n', AV_N, 2, 10, 0x1a};
    expect_corrupt(n_digit, sizeof n_digit);
    const uint8_t n_trailing0[] = {V, 1, 1, 'n', AV_N, 2, 10, 0x10};
    expect_corrupt(n_trailing0, sizeof n_trailing0);
    const uint8_t n_leading0[] = {V, 1, 1, 'n', AV_N, 2, 10, 0x01};
    expect_corrupt(n_leading0, sizeof n_leading0);
    const uint8_t n_pad[] = {V, 1, 1, 'n', AV_N, 1, 10, 0x15};
    expect_corrupt(n_pad, sizeof n_pad);
    /* The exponent byte covers exactly NUM_MIN_EXP..NUM_MAX_EXP. */
    const uint8_t n_exp[] = {V, 1, 1, 'n', AV_N, 1, 0xff, 0x10};
    expect_ok(n_exp, sizeof n_exp);
    const uint8_t n_many[] = {V, 1, 1, 'n', AV_N, 39, 10};
    expect_corrupt(n_many, sizeof n_many);
    const uint8_t ss_ok[] = {V, 1, 1, 's', AV_SS, 2, 1, 'a', 1, 'b'};
    expect_ok(ss_ok, sizeof ss_ok);
    const uint8_t ss_empty[] = {V, 1, 1, 's', AV_SS, 0};
    expect_corrupt(ss_empty, sizeof ss_empty);
    const uint8_t ss_unsorted[] = {V, 1, 1, 's', AV_SS, 2, 1, 'b', 1, 'a'};
    expect_corrupt(ss_unsorted, sizeof ss_unsorted);
    const uint8_t ss_dup[] = {V, 1, 1, 's', AV_SS, 2, 1, 'a', 1, 'a'};
    expect_corrupt(ss_dup, sizeof ss_dup);
    /* NS sorted numerically: 2 < 10 although "10" < "2" bytewise. */
    const uint8_t ns_ok[] = {V,   1, 1, 's', AV_NS, 2, 1, 1 - NUM_MIN_EXP, 0x20, 1, 2 - NUM_MIN_EXP,
                             0x10};
    expect_ok(ns_ok, sizeof ns_ok);
    const uint8_t ns_bad[] = {
        V, 1, 1, 's', AV_NS, 2, 1, 2 - NUM_MIN_EXP, 0x10, 1, 1 - NUM_MIN_EXP, 0x20};
    expect_corrupt(ns_bad, sizeof ns_bad);
    const uint8_t bad_varint[] = {V,    0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    expect_corrupt(bad_varint, sizeof bad_varint);
}

/* Lists nested 32 deep decode; 33 do not. */
static void depth_limit(void **state)
{
    (void)state;
    for (int depth = 31; depth <= 33; depth++) {
        uint8_t enc[128];
        size_t k = 0;
        enc[k++] = V;
        enc[k++] = 1;
        enc[k++] = 1;
        enc[k++] = 'a';
        for (int i = 0; i < depth; i++) {
            enc[k++] = AV_L;
            enc[k++] = i + 1 < depth ? 1 : 0;
        }
        if (depth <= AV_MAX_DEPTH)
            expect_ok(enc, k);
        else
            expect_corrupt(enc, k);
    }
}

/* av_encode writes a tagged value: an item is its version byte plus the map body, which
 * is the encoding of the item as an M value without its tag. */
static void single_value_encoding(void **state)
{
    (void)state;
    gen_rng r = {31337};
    buf item_enc, value_enc;
    buf_init(&item_enc, 0);
    buf_init(&value_enc, 0);
    for (int i = 0; i < 200; i++) {
        arena a;
        arena_init(&a, 0);
        av item;
        gen_item(&r, &a, 5, &item);
        buf_reset(&item_enc);
        buf_reset(&value_enc);
        item_encode(&item, &item_enc);
        av_encode(&item, &value_enc);
        assert_int_equal(value_enc.data[0], AV_M);
        assert_int_equal(item_enc.len, value_enc.len);
        assert_memory_equal(item_enc.data + 1, value_enc.data + 1, item_enc.len - 1);
        arena_free(&a);
    }
    /* A bounded buffer that is too small fails instead of overflowing. */
    buf small;
    buf_init(&small, 4);
    arena a;
    arena_init(&a, 0);
    av item;
    do {
        gen_item(&r, &a, 5, &item);
    } while (item_encoded_size(&item) <= 4);
    item_encode(&item, &small);
    assert_true(small.failed);
    assert_int_equal(small.len, 0);
    arena_free(&a);
    buf_free(&small);
    buf_free(&item_enc);
    buf_free(&value_enc);
}

static void arena_limit_is_nomem(void **state)
{
    (void)state;
    gen_rng r = {777};
    arena a, small;
    arena_init(&a, 0);
    av item, out;
    do {
        gen_item(&r, &a, 8, &item);
    } while (item.u.map.count < 5);
    buf b;
    buf_init(&b, 0);
    item_encode(&item, &b);
    arena_init(&small, 64);
    strata_err err;
    assert_int_equal(item_decode(b.data, b.len, &small, &out, &err), -1);
    assert_int_equal(err.code, ERR_NOMEM);
    arena_free(&small);
    arena_free(&a);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_round_trips),    cmocka_unit_test(random_corruption_is_safe),
        cmocka_unit_test(hand_made_bad_inputs),  cmocka_unit_test(depth_limit),
        cmocka_unit_test(single_value_encoding), cmocka_unit_test(arena_limit_is_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
