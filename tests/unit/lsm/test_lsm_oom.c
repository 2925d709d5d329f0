/* Unit tests for storage/lsm under allocation failure, SQLite style: the same flush and
 * compaction are run again and again, with the Nth allocation on the loop thread failing,
 * for N = 1, 2, ... until one run needs no failure. Every run must end in a clean error or
 * success, close without a leak or double free (ASan), and reopen with every key that was
 * durable before the failure.
 *
 * Allocations are intercepted with the linker's --wrap (see meson.build), so only calls
 * from the engine's own objects and this file are affected, never libuv's or libc's.
 * Worker threads (the flush and compaction jobs) never fail here: their failures come
 * back as job errors, which other tests cover; the loop thread's install path is what
 * this test is for. */
#include "tests/unit/lsm/helpers.h"

#include <pthread.h>
#include <sys/stat.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static pthread_t loop_thread;
static long fail_countdown; /* > 0: the allocation that brings it to 0 fails */
static bool failed_once;

static bool should_fail(void)
{
    if (fail_countdown <= 0 || !pthread_equal(pthread_self(), loop_thread))
        return false;
    if (--fail_countdown > 0)
        return false;
    failed_once = true;
    return true;
}

void *__wrap_malloc(size_t n)
{
    return should_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return should_fail() ? NULL : __real_realloc(p, n);
}

static int setup(void **state)
{
    fixture_setup(state);
    fixture *f = *state;
    f->o.no_compaction = true;
    /* Small output files: a compaction writes several, so its install adds several. */
    f->o.table_file_bytes = 2048;
    f->o.block_bytes = 256;
    loop_thread = pthread_self();
    return 0;
}

static void put_range(lsm *db, int from, int to, uint64_t idx)
{
    for (int i = from; i < to; i++) {
        char k[32], v[64];
        snprintf(k, sizeof k, "key%05d", i);
        snprintf(v, sizeof v, "value-%05d-%040d", i, i);
        put1(db, k, v, 1, idx);
    }
}

static void expect_range(lsm *db, int from, int to)
{
    for (int i = from; i < to; i++) {
        char k[32], v[128];
        snprintf(k, sizeof k, "key%05d", i);
        assert_int_equal(get1(db, NULL, k, v, sizeof v), 1);
    }
}

/* Runs `op` (flush or compact) with the countdown armed; returns the callback's code. */
static strata_code run_armed(fixture *f, lsm *db, void (*op)(lsm *, lsm_cb, void *), long countdown)
{
    waitcb w = {0};
    fail_countdown = countdown;
    op(db, waitcb_fn, &w);
    run_until(&f->loop, &w.done);
    fail_countdown = 0;
    return w.err.code;
}

/* One engine, two flushed files, then the armed operation; afterwards close, reopen and
 * check that every key is there (both files were durable before the operation). Returns
 * true when the run saw no injected failure: later countdowns would change nothing. */
static bool one_run(fixture *f, void (*op)(lsm *, lsm_cb, void *), long countdown)
{
    lsm *db = open_db(&f->loop, &f->o);
    put_range(db, 0, 200, 1);
    flush_db(&f->loop, db);
    put_range(db, 100, 300, 2);
    if (op == lsm_compact)
        flush_db(&f->loop, db);
    failed_once = false;
    strata_code code = run_armed(f, db, op, countdown);
    bool clean = !failed_once;
    if (clean)
        assert_int_equal(code, ERR_NONE);
    else
        assert_true(code == ERR_NONE || code == ERR_NOMEM);
    close_db(&f->loop, db);

    db = open_db(&f->loop, &f->o);
    expect_range(db, 0, 200);
    if (op == lsm_compact || code == ERR_NONE)
        expect_range(db, 100, 300);
    close_db(&f->loop, db);
    rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0700), 0);
    return clean;
}

static void flush_survives_every_allocation_failure(void **state)
{
    fixture *f = *state;
    long n = 1;
    while (!one_run(f, lsm_flush, n))
        n++;
    assert_true(n > 1); /* the install path did allocate, so failures were injected */
}

static void compaction_survives_every_allocation_failure(void **state)
{
    fixture *f = *state;
    long n = 1;
    while (!one_run(f, lsm_compact, n))
        n++;
    assert_true(n > 3); /* several outputs were added to the new version one by one */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(flush_survives_every_allocation_failure, setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(compaction_survives_every_allocation_failure, setup,
                                        fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
