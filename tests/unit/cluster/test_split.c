/* Unit tests of cluster/split: the SPLIT command, the range record, the split point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "cluster/split.h"

static split_cmd sample_cmd(void)
{
    split_cmd c = {.child_id = 77, .split_hash = 0x8000000000000000ull, .n_members = 4};
    c.members[0] = (split_member){.node = 1, .voter = true};
    c.members[1] = (split_member){.node = 2, .voter = true};
    c.members[2] = (split_member){.node = 300, .voter = true};
    c.members[3] = (split_member){.node = 4, .voter = false};
    return c;
}

/* sample_cmd() encoded into b (initialized here). */
static split_cmd encode_sample(buf *b)
{
    split_cmd c = sample_cmd();
    strata_err err;
    buf_init(b, 0);
    assert_int_equal(split_cmd_encode(&c, b, &err), 0);
    return c;
}

static void test_cmd_roundtrip(void **state)
{
    (void)state;
    split_cmd d;
    buf b;
    split_cmd c = encode_sample(&b);
    strata_err err;
    assert_true(split_cmd_is(b.data, b.len));
    assert_int_equal(split_cmd_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.child_id, 77);
    assert_int_equal(d.split_hash, 0x8000000000000000ull);
    assert_int_equal(d.n_members, 4);
    assert_memory_equal(d.members, c.members, 4 * sizeof *c.members);
    /* Every truncation and every flipped byte is refused. */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(split_cmd_decode(b.data, n, &d, &err), -1);
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x41;
        assert_int_equal(split_cmd_decode(b.data, b.len, &d, &err), -1);
        assert_int_equal(err.code, ERR_CORRUPT);
        b.data[i] ^= 0x41;
    }
    buf_free(&b);
}

/* A SPLIT of a version above SPLIT_VERSION, intact, is a newer binary's (ERR_NEWER: the
 * replica stops), not a damaged one (ERR_CORRUPT: ignored). */
static void test_cmd_newer_version(void **state)
{
    (void)state;
    split_cmd d;
    buf b;
    encode_sample(&b);
    strata_err err;
    assert_int_equal(b.data[2], SPLIT_VERSION);
    b.data[2] = SPLIT_VERSION + 1;
    size_t body = b.len - 8;
    uint64_t sum = XXH3_64bits(b.data, body);
    for (int i = 0; i < 8; i++)
        b.data[body + i] = (uint8_t)(sum >> (56 - 8 * i));
    assert_int_equal(split_cmd_decode(b.data, b.len, &d, &err), -1);
    assert_int_equal(err.code, ERR_NEWER);
    b.data[body] ^= 1; /* the same, damaged */
    assert_int_equal(split_cmd_decode(b.data, b.len, &d, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    buf_free(&b);
}

static void test_cmd_rules(void **state)
{
    (void)state;
    buf b;
    buf_init(&b, 0);
    strata_err err;
    split_cmd c = sample_cmd();
    c.child_id = 0;
    assert_int_equal(split_cmd_encode(&c, &b, &err), -1);
    c = sample_cmd();
    for (uint32_t i = 0; i < c.n_members; i++)
        c.members[i].voter = false;
    assert_int_equal(split_cmd_encode(&c, &b, &err), -1); /* no voter */
    c = sample_cmd();
    c.n_members = 0;
    assert_int_equal(split_cmd_encode(&c, &b, &err), -1);
    c.n_members = SPLIT_MAX_MEMBERS + 1;
    assert_int_equal(split_cmd_encode(&c, &b, &err), -1);
    /* A write command (protobuf) is never taken for a SPLIT. */
    const uint8_t pb[] = {0x08, 0x01, 0x10, 0x02};
    assert_false(split_cmd_is(pb, sizeof pb));
    assert_false(split_cmd_is(pb, 0));
    buf_free(&b);
}

static void test_range_roundtrip(void **state)
{
    (void)state;
    split_range r = {.table_id = 9, .hash_lo = 10, .hash_hi = UINT64_MAX}, d;
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(split_range_encode(&r, &b, &err), 0);
    assert_int_equal(split_range_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.table_id, 9);
    assert_int_equal(d.hash_lo, 10);
    assert_int_equal(d.hash_hi, UINT64_MAX);
    assert_int_equal(d.n_members, 0);
    buf_reset(&b);
    split_cmd c = sample_cmd();
    r.n_members = c.n_members;
    memcpy(r.members, c.members, sizeof c.members);
    assert_int_equal(split_range_encode(&r, &b, &err), 0);
    assert_int_equal(split_range_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.n_members, 4);
    assert_memory_equal(d.members, c.members, 4 * sizeof *c.members);
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x10;
        assert_int_equal(split_range_decode(b.data, b.len, &d, &err), -1);
        b.data[i] ^= 0x10;
    }
    buf_reset(&b);
    r.hash_lo = 5;
    r.hash_hi = 4;
    assert_int_equal(split_range_encode(&r, &b, &err), -1);
    buf_free(&b);
}

static void test_split_point(void **state)
{
    (void)state;
    uint64_t s;
    strata_err err;
    assert_int_equal(split_middle(0, UINT64_MAX, &s, &err), 0);
    assert_int_equal(s, 0x8000000000000000ull);
    assert_true(split_hash_valid(0, UINT64_MAX, s));
    assert_int_equal(split_middle(0x8000000000000000ull, UINT64_MAX, &s, &err), 0);
    assert_int_equal(s, 0xC000000000000000ull);
    assert_int_equal(split_middle(4, 5, &s, &err), 0);
    assert_int_equal(s, 5); /* parent [4, 4], child [5, 5] */
    assert_int_equal(split_middle(7, 7, &s, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_false(split_hash_valid(4, 9, 4)); /* the parent would be empty */
    assert_true(split_hash_valid(4, 9, 9));
    assert_false(split_hash_valid(4, 9, 10));
}

/* Even traffic over [0, 2^64): the weighted cut lands near the middle, between samples. */
static void test_weighted_even(void **state)
{
    (void)state;
    split_sample s[256];
    for (size_t i = 0; i < 256; i++)
        s[255 - i] = (split_sample){.hash = (uint64_t)i << 56 | 0x1234, .weight = 10};
    uint64_t at = 0;
    assert_int_equal(split_weighted(s, 256, 0, UINT64_MAX, 32, 50, &at), SPLIT_POINT_FOUND);
    /* 128 samples below, 128 at or above: the cut is half-way between 127<<56 and 128<<56. */
    assert_true(at > ((uint64_t)127 << 56 | 0x1234) && at <= ((uint64_t)128 << 56 | 0x1234));
}

/* Weight, not count: one heavy region pulls the cut into it. */
static void test_weighted_skew(void **state)
{
    (void)state;
    split_sample s[100];
    for (size_t i = 0; i < 100; i++)
        s[i] = (split_sample){.hash = 1000 + i * 10, .weight = i >= 90 ? 100 : 1};
    /* total 90 + 1000; the ten heavy samples at 1900..1990 hold most: the cut falls
     * among them (five heavy on each side is the most even). */
    uint64_t at = 0;
    assert_int_equal(split_weighted(s, 100, 0, 1 << 20, 32, 50, &at), SPLIT_POINT_FOUND);
    assert_true(at > 1930 && at <= 1950);
}

/* One key with half the weight is a hot key; samples outside the range do not count;
 * too few samples give no answer. */
static void test_weighted_hot_and_few(void **state)
{
    (void)state;
    split_sample s[64];
    for (size_t i = 0; i < 64; i++)
        s[i] = (split_sample){.hash = i % 2 ? 5000 : 100 + i, .weight = 3};
    uint64_t at = 0;
    assert_int_equal(split_weighted(s, 64, 0, 10000, 32, 50, &at), SPLIT_POINT_HOT_KEY);
    assert_int_equal(at, 5000);
    /* Without the hot key's range, the rest is 32 distinct keys: a cut. */
    for (size_t i = 0; i < 64; i++)
        s[i] = (split_sample){.hash = i % 2 ? 5000 : 100 + i, .weight = 3};
    assert_int_equal(split_weighted(s, 64, 0, 4999, 32, 50, &at), SPLIT_POINT_FOUND);
    assert_true(at > 100 && at <= 162);
    for (size_t i = 0; i < 64; i++)
        s[i] = (split_sample){.hash = i % 2 ? 5000 : 100 + i, .weight = 3};
    assert_int_equal(split_weighted(s, 64, 0, 4999, 33, 50, &at), SPLIT_POINT_TOO_FEW);
    /* One distinct hash under the hot share (share 101%: never hot): nothing to cut. */
    for (size_t i = 0; i < 64; i++)
        s[i] = (split_sample){.hash = 7, .weight = 1};
    assert_int_equal(split_weighted(s, 64, 0, 100, 1, 101, &at), SPLIT_POINT_TOO_FEW);
    /* Zero weights are ignored. */
    for (size_t i = 0; i < 64; i++)
        s[i] = (split_sample){.hash = i, .weight = 0};
    assert_int_equal(split_weighted(s, 64, 0, 100, 1, 50, &at), SPLIT_POINT_TOO_FEW);
    /* Two keys at the ends of a two-hash range: the child gets the upper one. */
    split_sample two[2] = {{.hash = 9, .weight = 1}, {.hash = 8, .weight = 1}};
    assert_int_equal(split_weighted(two, 2, 8, 9, 2, 60, &at), SPLIT_POINT_FOUND);
    assert_int_equal(at, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cmd_roundtrip), cmocka_unit_test(test_cmd_newer_version),
        cmocka_unit_test(test_cmd_rules),     cmocka_unit_test(test_range_roundtrip),
        cmocka_unit_test(test_split_point),   cmocka_unit_test(test_weighted_even),
        cmocka_unit_test(test_weighted_skew), cmocka_unit_test(test_weighted_hot_and_few),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
