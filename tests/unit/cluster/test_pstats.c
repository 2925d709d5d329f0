/* Unit tests for cluster/pstats.c: the statistics message codec (version 2 with loads,
 * version 1 still read), newest-wins recording, freshness, pruning, refusal of malformed
 * messages (nothing recorded), the load figure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/pstats.h"

static void roundtrip_and_newest_wins(void **state)
{
    (void)state;
    pstats *s = pstats_new();
    pstats_entry e[3] = {{7, {10, 1000}}, {3, {1, 50}}, {9, {0, 0}}};
    buf b;
    buf_init(&b, 0);
    pstats_encode(e, 3, &b);
    strata_err err;
    assert_int_equal(pstats_receive(s, b.data, b.len, 100, &err), 0);
    assert_int_equal(pstats_count(s), 3);
    partition_stats st;
    assert_true(pstats_get(s, 7, 0, &st));
    assert_int_equal(st.item_count, 10);
    assert_int_equal(st.size_bytes, 1000);
    assert_false(pstats_get(s, 8, 0, &st));
    assert_false(pstats_get(s, 3, 101, &st)); /* heard before since_ms */
    buf_reset(&b);
    pstats_entry newer = {7, {12, 1200}};
    pstats_encode(&newer, 1, &b);
    assert_int_equal(pstats_receive(s, b.data, b.len, 200, &err), 0);
    assert_true(pstats_get(s, 7, 150, &st));
    assert_int_equal(st.item_count, 12);
    assert_int_equal(pstats_count(s), 3);
    buf_free(&b);
    pstats_free(s);
}

static bool keep_odd(void *ctx, uint64_t p)
{
    (void)ctx;
    return p % 2 == 1;
}

static void prune_and_many(void **state)
{
    (void)state;
    pstats *s = pstats_new();
    static pstats_entry e[PSTATS_MAX_ENTRIES];
    for (size_t i = 0; i < PSTATS_MAX_ENTRIES; i++)
        e[i] = (pstats_entry){PSTATS_MAX_ENTRIES - i, {(int64_t)i, (int64_t)i * 10}};
    buf b;
    buf_init(&b, 0);
    pstats_encode(e, PSTATS_MAX_ENTRIES, &b);
    strata_err err;
    assert_int_equal(pstats_receive(s, b.data, b.len, 1, &err), 0);
    assert_int_equal(pstats_count(s), PSTATS_MAX_ENTRIES);
    pstats_prune(s, keep_odd, NULL);
    assert_int_equal(pstats_count(s), PSTATS_MAX_ENTRIES / 2);
    partition_stats st;
    assert_false(pstats_get(s, 2, 0, &st));
    assert_true(pstats_get(s, 3, 0, &st));
    assert_int_equal(st.item_count, PSTATS_MAX_ENTRIES - 3);
    buf_free(&b);
    pstats_free(s);
}

static void malformed_records_nothing(void **state)
{
    (void)state;
    pstats *s = pstats_new();
    pstats_entry e[2] = {{1, {1, 1}}, {2, {2, 2}}};
    buf b;
    buf_init(&b, 0);
    pstats_encode(e, 2, &b);
    strata_err err;
    /* Every strict prefix is truncated. */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(pstats_receive(s, b.data, n, 1, &err), -1);
    /* A trailing byte, another version, a count over the bound. */
    uint8_t more[64];
    memcpy(more, b.data, b.len);
    more[b.len] = 0;
    assert_int_equal(pstats_receive(s, more, b.len + 1, 1, &err), -1);
    more[0] = 3;
    assert_int_equal(pstats_receive(s, more, b.len, 1, &err), -1);
    more[0] = 0;
    assert_int_equal(pstats_receive(s, more, b.len, 1, &err), -1);
    /* A version 2 body read as version 1 leaves the loads over: trailing bytes. */
    more[0] = 1;
    assert_int_equal(pstats_receive(s, more, b.len, 1, &err), -1);
    buf_reset(&b);
    buf_put_u8(&b, 1);
    buf_put_varint(&b, PSTATS_MAX_ENTRIES + 1);
    assert_int_equal(pstats_receive(s, b.data, b.len, 1, &err), -1);
    /* A count above INT64_MAX. */
    buf_reset(&b);
    buf_put_u8(&b, 1);
    buf_put_varint(&b, 1);
    buf_put_varint(&b, 5);
    buf_put_varint(&b, UINT64_MAX);
    buf_put_varint(&b, 0);
    assert_int_equal(pstats_receive(s, b.data, b.len, 1, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_int_equal(pstats_count(s), 0);
    buf_free(&b);
    pstats_free(s);
}

static void load_v2_and_v1(void **state)
{
    (void)state;
    pstats *s = pstats_new();
    pstats_entry e[2] = {{4, {3, 300}, 123456789}, {5, {1, 10}, 0}};
    buf b;
    buf_init(&b, 0);
    pstats_encode(e, 2, &b);
    strata_err err;
    assert_int_equal(pstats_receive(s, b.data, b.len, 10, &err), 0);
    uint64_t load = 1;
    assert_true(pstats_get_load(s, 4, 10, &load));
    assert_int_equal(load, 123456789);
    assert_true(pstats_get_load(s, 5, 0, &load));
    assert_int_equal(load, 0);
    assert_false(pstats_get_load(s, 4, 11, &load)); /* stale */
    assert_false(pstats_get_load(s, 6, 0, &load));
    /* A version 1 body (a node not yet upgraded): figures recorded, load 0. */
    buf_reset(&b);
    buf_put_u8(&b, 1);
    buf_put_varint(&b, 1);
    buf_put_varint(&b, 4);
    buf_put_varint(&b, 7);
    buf_put_varint(&b, 700);
    assert_int_equal(pstats_receive(s, b.data, b.len, 20, &err), 0);
    partition_stats st;
    assert_true(pstats_get(s, 4, 20, &st));
    assert_int_equal(st.item_count, 7);
    assert_int_equal(st.size_bytes, 700);
    assert_true(pstats_get_load(s, 4, 20, &load));
    assert_int_equal(load, 0);
    assert_int_equal(pstats_count(s), 2);
    buf_free(&b);
    pstats_free(s);
}

static void load_rate(void **state)
{
    (void)state;
    const int64_t unit = 1000000000; /* CAP_NANO */
    /* 10 read units and 5 write units over 2 s: (10 + 3 x 5) / 2 = 12.5 units/s. */
    assert_int_equal(pstats_load_rate(10 * unit, 5 * unit, 2000), 12500);
    assert_int_equal(pstats_load_rate(unit / 2, 0, 1000), 500); /* half a read unit */
    assert_int_equal(pstats_load_rate(0, unit, 1000), 1000 * PSTATS_WRITE_WEIGHT);
    assert_int_equal(pstats_load_rate(unit, unit, 0), 0);      /* no window */
    assert_int_equal(pstats_load_rate(-unit, -unit, 1000), 0); /* counters restarted */
    assert_int_equal(pstats_load_rate(INT64_MAX, INT64_MAX, 1), 36893488147419103);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip_and_newest_wins),
        cmocka_unit_test(prune_and_many),
        cmocka_unit_test(malformed_records_nothing),
        cmocka_unit_test(load_v2_and_v1),
        cmocka_unit_test(load_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
