/* Unit tests for storage/base: errors, arena, bounded buffers and readers. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "storage/base/arena.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "tests/unit/asan_death.h"

static void err_set_formats_and_returns_minus_one(void **state)
{
    (void)state;
    strata_err err;
    assert_int_equal(strata_err_set(&err, ERR_VALIDATION, "bad %s %d", "x", 7), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_string_equal(err.msg, "bad x 7");
    assert_string_equal(strata_code_name(err.code), "ValidationException");
    assert_int_equal(strata_err_set(NULL, ERR_IO, "ignored"), -1);
    assert_string_equal(strata_code_name((strata_code)999), "UnknownError");
    strata_err_clear(&err);
    assert_int_equal(err.code, ERR_NONE);
}

static void arena_aligns_and_respects_limit(void **state)
{
    (void)state;
    arena a;
    arena_init(&a, 100000);
    for (int i = 0; i < 1000; i++) {
        void *p = arena_alloc(&a, (size_t)(i % 37) + 1);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
    }
    assert_null(arena_alloc(&a, 200000));        /* over the limit */
    char *s = arena_strndup(&a, "hello world", 5);
    assert_string_equal(s, "hello");
    char *g = arena_realloc(&a, s, 6, 4000);     /* grows the last allocation */
    assert_non_null(g);
    assert_memory_equal(g, "hello", 6);
    arena_reset(&a);
    assert_int_equal(a.allocated, 0);
    assert_non_null(arena_alloc(&a, 64));
    arena_free(&a);
    /* Capping chunk growth at the limit must not refuse what still fits. */
    arena lim;
    arena_init(&lim, 40000);
    for (int i = 0; i < 30; i++)
        assert_non_null(arena_alloc(&lim, 1000)); /* 30 x 1008 after alignment */
    assert_non_null(arena_alloc(&lim, 9000));     /* 39,248 of 40,000 */
    assert_null(arena_alloc(&lim, 1000));         /* over the limit */
    arena_free(&lim);
}

/* A freed arena's minimum-size chunk serves the next arena, empty; a big chunk does not
 * stay around; arenas on many threads at once share the spare chunks safely. */
static void arena_reuses_freed_chunks(void **state)
{
    (void)state;
    arena a, b;
    arena_init(&a, 0);
    char *p = arena_alloc(&a, 100);
    assert_non_null(p);
    memset(p, 'x', 100);
    arena_free(&a);
    arena_init(&b, 0);
    char *q = arena_alloc(&b, 100);
    assert_ptr_equal(p, q); /* the same chunk, from its start */
    assert_non_null(arena_alloc(&b, 15000)); /* still fits the 16 KiB chunk */
    arena_free(&b);

    arena big;
    arena_init(&big, 0);
    assert_non_null(arena_alloc(&big, 1 << 20));
    arena_free(&big);
    arena_init(&b, 0);
    assert_ptr_equal(arena_alloc(&b, 100), p); /* the small spare, not the megabyte */
    arena_free(&b);
}

/* At most 128 freed chunks wait for reuse (2 MiB); the rest go back to malloc. After 300
 * arenas are freed, the next arenas get the first 128 of their chunks, last kept first,
 * and the 129th gets a chunk of its own. Fails with the bound raised. */
#define SPARE_PROBE 300
static void arena_spares_are_bounded(void **state)
{
    (void)state;
    static arena a[SPARE_PROBE];
    static void *first[SPARE_PROBE];
    for (int i = 0; i < SPARE_PROBE; i++) { /* takes every spare left by earlier tests */
        arena_init(&a[i], 0);
        first[i] = arena_alloc(&a[i], 1);
        assert_non_null(first[i]);
    }
    for (int i = 0; i < SPARE_PROBE; i++)
        arena_free(&a[i]);
    for (int i = 0; i < SPARE_PROBE; i++) {
        arena_init(&a[i], 0);
        void *p = arena_alloc(&a[i], 1);
        assert_non_null(p);
        if (i < 128)
            assert_ptr_equal(p, first[127 - i]);
        else if (i == 128)
            for (int k = 0; k < 128; k++)
                assert_ptr_not_equal(p, first[k]);
    }
    for (int i = 0; i < SPARE_PROBE; i++)
        arena_free(&a[i]);
}

/* Under AddressSanitizer, memory of a freed arena is still reported when used, although
 * its chunk waits among the spares instead of going back to malloc. */
#ifdef STRATA_ASAN
static void use_freed_arena(void *arg)
{
    (void)arg;
    arena a;
    arena_init(&a, 0);
    volatile char *p = arena_alloc(&a, 64);
    p[0] = 1;
    arena_free(&a);
    p[0] = 2; /* must abort here */
}
#endif

static void arena_use_after_free_is_reported(void **state)
{
    (void)state;
    EXPECT_ASAN_DEATH(use_freed_arena);
}

static void *arena_churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        arena a;
        arena_init(&a, 0);
        for (int k = 0; k < 4; k++) {
            unsigned char *p = arena_alloc(&a, 9000); /* two chunks per arena */
            if (p == NULL)
                return (void *)1;
            memset(p, k, 9000);
        }
        arena_free(&a);
    }
    return NULL;
}

static void arena_spares_are_thread_safe(void **state)
{
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, arena_churn, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *rc;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_null(rc);
    }
}

static void buf_is_bounded_and_sticky(void **state)
{
    (void)state;
    buf b;
    buf_init(&b, 10);
    buf_append(&b, "12345678", 8);
    assert_false(b.failed);
    buf_put_u32be(&b, 1);                         /* 12 > 10 */
    assert_true(b.failed);
    assert_int_equal(b.len, 8);
    buf_put_u8(&b, 1);                            /* sticky */
    assert_int_equal(b.len, 8);
    buf_reset(&b);
    buf_printf(&b, "%d-%s", 42, "ab");
    assert_false(b.failed);
    assert_memory_equal(b.data, "42-ab", 5);
    buf_free(&b);
}

static void u64_decimal_matches_printf(void **state)
{
    (void)state;
    const uint64_t vals[] = {0, 7, 10, 99, 100, 4294967295u, 4294967296u, 1234567890123ull,
                             UINT64_MAX / 10, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char got[U64_DECIMAL_MAX], want[32];
        size_t n = u64_decimal(vals[i], got);
        snprintf(want, sizeof want, "%" PRIu64, vals[i]);
        assert_string_equal(got, want);
        assert_int_equal(n, strlen(want));
    }
}

static void varint_and_be_round_trip(void **state)
{
    (void)state;
    static const uint64_t vals[] = {0, 1, 127, 128, 300, 16383, 16384, UINT32_MAX,
                                    (uint64_t)1 << 63, UINT64_MAX};
    buf b;
    buf_init(&b, 0);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        buf_put_varint(&b, vals[i]);
        buf_put_u64be(&b, vals[i]);
        buf_put_u16be(&b, (uint16_t)vals[i]);
    }
    rd r;
    rd_init(&r, b.data, b.len);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        assert_true(rd_varint(&r) == vals[i]);
        assert_true(rd_u64be(&r) == vals[i]);
        assert_int_equal(rd_u16be(&r), (uint16_t)vals[i]);
    }
    assert_false(r.failed);
    assert_int_equal(rd_left(&r), 0);
    rd_u8(&r);
    assert_true(r.failed);
    buf_free(&b);
}

static void reader_rejects_overlong_varint(void **state)
{
    (void)state;
    static const uint8_t too_long[11] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0x01};
    rd r;
    rd_init(&r, too_long, sizeof too_long);
    rd_varint(&r);
    assert_true(r.failed);
    static const uint8_t overflow[10] = {0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0x02};
    rd_init(&r, overflow, sizeof overflow);
    rd_varint(&r);
    assert_true(r.failed);
    static const uint8_t truncated[2] = {0x80, 0x80};
    rd_init(&r, truncated, sizeof truncated);
    rd_varint(&r);
    assert_true(r.failed);
    assert_null(rd_bytes(&r, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(err_set_formats_and_returns_minus_one),
        cmocka_unit_test(arena_aligns_and_respects_limit),
        cmocka_unit_test(arena_reuses_freed_chunks),
        cmocka_unit_test(arena_spares_are_thread_safe),
        cmocka_unit_test(arena_spares_are_bounded),
        cmocka_unit_test(arena_use_after_free_is_reported),
        cmocka_unit_test(buf_is_bounded_and_sticky),
        cmocka_unit_test(u64_decimal_matches_printf),
        cmocka_unit_test(varint_and_be_round_trip),
        cmocka_unit_test(reader_rejects_overlong_varint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
