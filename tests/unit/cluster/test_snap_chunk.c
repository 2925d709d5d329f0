/* Unit tests for cluster/snap_chunk.c: a chunk of a replica's copy encodes and decodes
 * back (header and items), every truncation of a valid chunk is refused, and so are a
 * range with lo > hi, a bad done byte, and a next key that contradicts done (an empty one
 * in a chunk that is not the last would start the copy over, for ever). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/snap_chunk.h"

/* A chunk of `n` items k<i> -> v<i> (values i+1 bytes long) into `out`. */
static void build(buf *out, int n, bool done, uint64_t lo, uint64_t hi)
{
    buf items;
    buf_init(&items, 0);
    char k[16], v[64];
    for (int i = 0; i < n; i++) {
        int kl = snprintf(k, sizeof k, "k%03d", i);
        memset(v, 'a' + i % 26, sizeof v);
        snap_chunk_item_put(&items, k, (size_t)kl, v, (size_t)(i % 63) + 1);
    }
    static const uint8_t next[] = {'k', '9', 0};
    snap_chunk c = {.applied = 300 + (uint64_t)n,
                    .hash_lo = lo,
                    .hash_hi = hi,
                    .done = done,
                    .next = next,
                    .next_len = done ? 0 : sizeof next,
                    .items = items.data,
                    .items_len = items.len};
    snap_chunk_encode(&c, out);
    assert_false(out->failed);
    buf_free(&items);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int n = 0; n < 40; n += 13)
        for (int done = 0; done < 2; done++) {
            buf b;
            buf_init(&b, 0);
            build(&b, n, done, 0x10, 0xffffffffffffffffull);
            snap_chunk c;
            strata_err err;
            assert_int_equal(snap_chunk_decode(b.data, b.len, &c, &err), 0);
            assert_int_equal(c.applied, 300 + (uint64_t)n);
            assert_int_equal(c.hash_lo, 0x10);
            assert_true(c.hash_hi == 0xffffffffffffffffull);
            assert_int_equal(c.done, done);
            assert_int_equal(c.next_len, done ? 0 : 3);
            if (!done)
                assert_memory_equal(c.next, "k9", 3);
            size_t pos = 0, kl, vl;
            const uint8_t *k, *v;
            int i = 0;
            while (snap_chunk_item_next(&c, &pos, &k, &kl, &v, &vl)) {
                char want[16];
                int wl = snprintf(want, sizeof want, "k%03d", i);
                assert_int_equal(kl, (size_t)wl);
                assert_memory_equal(k, want, kl);
                assert_int_equal(vl, (size_t)(i % 63) + 1);
                assert_int_equal(v[0], 'a' + i % 26);
                i++;
            }
            assert_int_equal(i, n);
            assert_int_equal(pos, c.items_len);
            buf_free(&b);
        }
}

static void test_truncated(void **state)
{
    (void)state;
    buf b;
    buf_init(&b, 0);
    build(&b, 5, false, 1, 2);
    snap_chunk c;
    strata_err err;
    /* Every prefix but the whole either cuts the header or an item. The item boundaries
     * are valid ends of the bytes, though: a prefix ending exactly after an item decodes
     * (fewer items), which the copy tolerates since the next key says where to go on. */
    size_t refused = 0;
    for (size_t len = 0; len < b.len; len++)
        if (snap_chunk_decode(b.data, len, &c, &err) != 0) {
            assert_int_equal(err.code, ERR_CORRUPT);
            refused++;
        }
    assert_true(refused >= b.len - 5);
    buf_free(&b);
}

static void test_bad_fields(void **state)
{
    (void)state;
    snap_chunk c;
    strata_err err;
    buf b;
    /* lo > hi */
    buf_init(&b, 0);
    build(&b, 2, true, 9, 8);
    assert_int_equal(snap_chunk_decode(b.data, b.len, &c, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    buf_free(&b);
    /* done byte 2: after the varint applied (2 bytes for 302) and the range (16 bytes) */
    buf_init(&b, 0);
    build(&b, 2, true, 1, 8);
    b.data[2 + 16] = 2;
    assert_int_equal(snap_chunk_decode(b.data, b.len, &c, &err), -1);
    buf_free(&b);
    /* done with a next key, and not done without one */
    for (int done = 0; done < 2; done++) {
        buf items;
        buf_init(&items, 0);
        snap_chunk_item_put(&items, "k", 1, "v", 1);
        snap_chunk bad = {.applied = 1,
                          .hash_lo = 1,
                          .hash_hi = 2,
                          .done = done,
                          .next = (const uint8_t *)"x",
                          .next_len = done ? 1 : 0,
                          .items = items.data,
                          .items_len = items.len};
        buf_init(&b, 0);
        snap_chunk_encode(&bad, &b);
        assert_int_equal(snap_chunk_decode(b.data, b.len, &c, &err), -1);
        buf_free(&b);
        buf_free(&items);
    }
    /* an item whose length runs past the end */
    buf_init(&b, 0);
    build(&b, 0, true, 1, 2);
    buf_put_varint(&b, 1000);
    buf_append(&b, "key", 3);
    assert_int_equal(snap_chunk_decode(b.data, b.len, &c, &err), -1);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
