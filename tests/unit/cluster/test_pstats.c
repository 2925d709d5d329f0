/* Unit tests for cluster/pstats.c: the statistics message codec, newest-wins recording,
 * freshness, pruning, and refusal of malformed messages (nothing recorded). */
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
    more[0] = 2;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip_and_newest_wins),
        cmocka_unit_test(prune_and_many),
        cmocka_unit_test(malformed_records_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
