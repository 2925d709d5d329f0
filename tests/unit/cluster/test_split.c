/* Unit tests of cluster/split: the SPLIT command, the range record, the split point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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

static void test_cmd_roundtrip(void **state)
{
    (void)state;
    split_cmd c = sample_cmd(), d;
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(split_cmd_encode(&c, &b, &err), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cmd_roundtrip),
        cmocka_unit_test(test_cmd_rules),
        cmocka_unit_test(test_range_roundtrip),
        cmocka_unit_test(test_split_point),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
