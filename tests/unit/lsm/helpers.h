/* Shared helpers for the storage/lsm tests: a loop, a scratch directory, waiting on
 * callbacks with a deadline. */
#ifndef STRATA_TEST_LSM_HELPERS_H
#define STRATA_TEST_LSM_HELPERS_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/lsm/lsm.h"

typedef struct {
    bool done;
    strata_err err;
} waitcb;

static inline void waitcb_fn(void *arg, const strata_err *err)
{
    waitcb *w = arg;
    w->done = true;
    w->err = *err;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs the loop until *flag, failing the test after 30 s. */
static inline void run_until(uv_loop_t *loop, const bool *flag)
{
    double deadline = now_s() + 30;
    while (!*flag) {
        assert_true(now_s() < deadline);
        uv_run(loop, UV_RUN_ONCE);
    }
}

static inline void make_tmpdir(char *out, size_t n)
{
    snprintf(out, n, "/tmp/lsmtest.XXXXXX");
    assert_non_null(mkdtemp(out));
}

static inline void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static inline lsm *open_db(uv_loop_t *loop, const lsm_options *o)
{
    lsm *db = NULL;
    strata_err err = {0};
    int rc = lsm_open(o, loop, &db, &err);
    if (rc != 0)
        fail_msg("lsm_open: %s", err.msg);
    return db;
}

static inline void close_db(uv_loop_t *loop, lsm *db)
{
    waitcb w = {0};
    lsm_close(db, waitcb_fn, &w);
    run_until(loop, &w.done);
}

static inline void flush_db(uv_loop_t *loop, lsm *db)
{
    waitcb w = {0};
    lsm_flush(db, waitcb_fn, &w);
    run_until(loop, &w.done);
    if (w.err.code != ERR_NONE)
        fail_msg("flush: %s", w.err.msg);
}

static inline void compact_db(uv_loop_t *loop, lsm *db)
{
    waitcb w = {0};
    lsm_compact(db, waitcb_fn, &w);
    run_until(loop, &w.done);
    if (w.err.code != ERR_NONE)
        fail_msg("compact: %s", w.err.msg);
}

static inline void put1(lsm *db, const char *k, const char *v, uint64_t range, uint64_t idx)
{
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    assert_int_equal(lsm_batch_put(b, k, strlen(k), v, strlen(v), &err), 0);
    if (lsm_write(db, b, range, idx, &err) != 0)
        fail_msg("write: %s", err.msg);
    lsm_batch_free(b);
}

static inline void del1(lsm *db, const char *k)
{
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    assert_int_equal(lsm_batch_delete(b, k, strlen(k), &err), 0);
    assert_int_equal(lsm_write(db, b, 0, 0, &err), 0);
    lsm_batch_free(b);
}

static inline void delrange1(lsm *db, const char *s, const char *e)
{
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    assert_int_equal(lsm_batch_delete_range(b, s, strlen(s), e, strlen(e), &err), 0);
    assert_int_equal(lsm_write(db, b, 0, 0, &err), 0);
    lsm_batch_free(b);
}

/* Returns 1 and the value as a NUL-terminated static string, or 0. */
static inline int get1(lsm *db, const lsm_snapshot *s, const char *k, char *out, size_t n)
{
    buf v;
    buf_init(&v, 0);
    strata_err err = {0};
    int rc = lsm_get(db, s, k, strlen(k), &v, &err);
    if (rc < 0)
        fail_msg("get %s: %s", k, err.msg);
    if (rc == 1) {
        assert_true(v.len < n);
        memcpy(out, v.data, v.len);
        out[v.len] = 0;
    }
    buf_free(&v);
    return rc;
}

/* A loop and a scratch directory per test (cmocka setup/teardown). */
typedef struct {
    uv_loop_t loop;
    char dir[64];
    lsm_options o;
} fixture;

static inline int fixture_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    uv_loop_init(&f->loop);
    make_tmpdir(f->dir, sizeof f->dir);
    f->o.dir = f->dir;
    *state = f;
    return 0;
}

static inline int fixture_teardown(void **state)
{
    fixture *f = *state;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    rm_rf(f->dir);
    free(f);
    return 0;
}

#endif
