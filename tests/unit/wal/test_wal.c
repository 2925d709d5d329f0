/* Unit tests for storage/wal: appends, group commit, recovery, truncation, snapshots,
 * segment removal, corruption and torn tails, I/O failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "tests/unit/wal/wal_test_util.h"

typedef struct {
    uv_loop_t loop;
    char *dir;
    wal *w;
    wal_options opts;
} fixture;

/* Completion log: the order in which callbacks fired, and their status. */
typedef struct {
    int done;
    int failed;
    int order[4096];
    strata_err last_err;
} completions;

typedef struct {
    completions *c;
    int id;
} tag;

static void on_done(void *data, int status, const strata_err *err)
{
    tag *t = data;
    if (status != 0) {
        t->c->failed++;
        assert_non_null(err);
        t->c->last_err = *err;
    }
    t->c->order[t->c->done++] = t->id;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    uv_loop_init(&f->loop);
    f->dir = tu_tmpdir();
    f->opts.dir = f->dir;
    f->opts.segment_size = 64 << 10;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->w)
        assert_true(tu_close(f->w, &f->loop));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    tu_rmdir(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void reopen(fixture *f)
{
    strata_err err;
    if (f->w)
        assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    int rc = wal_open(&f->opts, &f->loop, &f->w, &err);
    if (rc != 0)
        fail_msg("wal_open: %s", err.msg);
}

/* Appends entries [first, first + n) with deterministic payloads. */
static int append_n(fixture *f, uint64_t g, uint64_t first, size_t n, uint64_t term, tag *t,
                    strata_err *err)
{
    static uint8_t bufs[64][300];
    wal_entry e[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        e[i].term = term;
        e[i].type = (uint8_t)(1 + (first + i) % 3);
        e[i].len = tu_payload(g, first + i, term, bufs[i]);
        e[i].data = bufs[i];
    }
    return wal_append(f->w, g, first, e, n, t ? on_done : NULL, t, err);
}

static void check_entries(fixture *f, uint64_t g, uint64_t from, uint64_t to, uint64_t term)
{
    wal_entry *e;
    size_t n;
    strata_err err;
    if (wal_read_entries(f->w, g, from, to, 0, &e, &n, &err) != 0)
        fail_msg("read %llu [%llu,%llu]: %s", (unsigned long long)g, (unsigned long long)from,
                 (unsigned long long)to, err.msg);
    assert_int_equal(n, to - from + 1);
    uint8_t want[300];
    for (size_t i = 0; i < n; i++) {
        size_t len = tu_payload(g, from + i, term, want);
        assert_int_equal(e[i].term, term);
        assert_int_equal(e[i].type, 1 + (from + i) % 3);
        assert_int_equal(e[i].len, len);
        assert_memory_equal(e[i].data, want, len);
    }
    free(e);
}

static void sync_append(fixture *f, uint64_t g, uint64_t first, size_t n, uint64_t term)
{
    completions c = {0};
    tag t = {&c, 0};
    strata_err err;
    assert_int_equal(append_n(f, g, first, n, term, &t, &err), 0);
    assert_true(tu_run_count(&f->loop, &c.done, 1));
    assert_int_equal(c.failed, 0);
}

static wal_group_info state_of(fixture *f, uint64_t g)
{
    wal_group_info info;
    strata_err err;
    if (wal_group_state(f->w, g, &info, &err) != 0)
        fail_msg("state %llu: %s", (unsigned long long)g, err.msg);
    return info;
}

static void segment_file(fixture *f, uint64_t seq, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%016llx.wal", f->dir, (unsigned long long)seq);
}

/* ---------------------------------------------------------------------------------- */

static void open_validates_options(void **state)
{
    fixture *f = *state;
    strata_err err;
    wal *w;
    wal_options o = {0};
    assert_int_equal(wal_open(&o, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    o.dir = f->dir;
    o.segment_size = 1000;
    assert_int_equal(wal_open(&o, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    o.dir = "/proc/strata-wal-cannot-exist/x";
    o.segment_size = 0;
    assert_int_equal(wal_open(&o, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_IO);
}

static void empty_log_opens_and_reopens(void **state)
{
    fixture *f = *state;
    reopen(f);
    assert_int_equal(wal_groups(f->w, NULL, 0), 0);
    wal_group_info info;
    strata_err err;
    assert_int_equal(wal_group_state(f->w, 7, &info, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    reopen(f);
    assert_int_equal(wal_groups(f->w, NULL, 0), 0);
    /* No segment, only (maybe) the first one being prepared, without a header. */
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.segments, 0);
    assert_true(tu_count_segments(f->dir) <= 1);
}

static void second_open_is_refused_by_lock(void **state)
{
    fixture *f = *state;
    reopen(f);
    wal *w2;
    strata_err err;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w2, &err), -1);
    assert_int_equal(err.code, ERR_BUSY);
}

static void appends_survive_reopen(void **state)
{
    fixture *f = *state;
    reopen(f);
    completions c = {0};
    tag t[6];
    strata_err err;
    for (int i = 0; i < 6; i++)
        t[i] = (tag){&c, i};
    assert_int_equal(append_n(f, 1, 1, 10, 1, &t[0], &err), 0);
    assert_int_equal(append_n(f, 2, 1, 3, 2, &t[1], &err), 0);
    assert_int_equal(wal_set_term_vote(f->w, 1, 3, 42, on_done, &t[2], &err), 0);
    assert_int_equal(append_n(f, 1, 11, 5, 1, &t[3], &err), 0);
    assert_int_equal(wal_set_term_vote(f->w, 2, 5, 0, on_done, &t[4], &err), 0);
    assert_int_equal(wal_set_term_vote(f->w, 2, 6, 9, on_done, &t[5], &err), 0);
    /* State reflects requests immediately. */
    assert_int_equal(state_of(f, 1).last_index, 15);
    assert_true(tu_run_count(&f->loop, &c.done, 6));
    assert_int_equal(c.failed, 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(c.order[i], i);
    check_entries(f, 1, 1, 15, 1);

    reopen(f);
    assert_int_equal(wal_groups(f->w, NULL, 0), 2);
    uint64_t ids[2];
    assert_int_equal(wal_groups(f->w, ids, 2), 2);
    assert_true((ids[0] == 1 && ids[1] == 2) || (ids[0] == 2 && ids[1] == 1));
    wal_group_info a = state_of(f, 1), b = state_of(f, 2);
    assert_int_equal(a.first_index, 1);
    assert_int_equal(a.last_index, 15);
    assert_int_equal(a.term, 3);
    assert_int_equal(a.vote, 42);
    assert_int_equal(b.last_index, 3);
    assert_int_equal(b.term, 6);
    assert_int_equal(b.vote, 9);
    check_entries(f, 1, 1, 15, 1);
    check_entries(f, 2, 1, 3, 2);
    check_entries(f, 1, 7, 9, 1);
    /* Appends continue cleanly after recovery. */
    sync_append(f, 1, 16, 4, 1);
    reopen(f);
    check_entries(f, 1, 1, 19, 1);
}

static void group_commit_shares_one_sync(void **state)
{
    fixture *f = *state;
    f->opts.segment_size = 0; /* default: everything fits in one segment */
    reopen(f);
    completions c = {0};
    tag t[200];
    strata_err err;
    for (int i = 0; i < 200; i++) {
        t[i] = (tag){&c, i};
        assert_int_equal(append_n(f, (uint64_t)i + 1, 1, 2, 1, &t[i], &err), 0);
    }
    assert_true(tu_run_count(&f->loop, &c.done, 200));
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.syncs, 1);
    assert_int_equal(st.ops, 200);
    for (int i = 0; i < 200; i++)
        assert_int_equal(c.order[i], i);
}

static void appends_accumulate_while_a_sync_is_in_flight(void **state)
{
    fixture *f = *state;
    reopen(f);
    completions c = {0};
    tag t[11];
    strata_err err;
    t[0] = (tag){&c, 0};
    assert_int_equal(append_n(f, 1, 1, 1, 1, &t[0], &err), 0);
    /* One iteration: the prepare handle hands the first batch to a worker. */
    uv_run(&f->loop, UV_RUN_NOWAIT);
    for (int i = 1; i <= 10; i++) {
        t[i] = (tag){&c, i};
        assert_int_equal(append_n(f, 10 + (uint64_t)i, 1, 1, 1, &t[i], &err), 0);
    }
    assert_true(tu_run_count(&f->loop, &c.done, 11));
    assert_int_equal(c.failed, 0);
    for (int i = 0; i <= 10; i++)
        assert_int_equal(c.order[i], i);
    wal_stats st;
    wal_get_stats(f->w, &st);
    /* The first batch, if still in flight, could not take the others; at most one more
     * batch carried all ten. */
    assert_true(st.batches <= 2);
}

/* Every thread of libuv's pool, held: a batch handed to a worker meanwhile stays in flight
 * until pool_release, whatever the speed of the disk, so that a test can arrange what
 * waits behind it. */
typedef struct {
    uv_work_t req[64];
    int n, started;
    bool released;
    uv_mutex_t mu;
    uv_cond_t cv;
} pool_hold;

static void pool_hold_work(uv_work_t *req)
{
    pool_hold *p = req->data;
    uv_mutex_lock(&p->mu);
    p->started++;
    uv_cond_broadcast(&p->cv);
    while (!p->released)
        uv_cond_wait(&p->cv, &p->mu);
    uv_mutex_unlock(&p->mu);
}

static void pool_hold_after(uv_work_t *req, int status)
{
    (void)status;
    pool_hold *p = req->data;
    p->n--;
}

/* Lets the held threads go, and runs the loop until their jobs have ended. */
static void pool_release(pool_hold *p, uv_loop_t *loop)
{
    uv_mutex_lock(&p->mu);
    p->released = true;
    uv_cond_broadcast(&p->cv);
    uv_mutex_unlock(&p->mu);
    double deadline = tu_now() + 10;
    while (p->n > 0 && tu_now() < deadline)
        uv_run(loop, UV_RUN_ONCE);
    assert_int_equal(p->n, 0);
    uv_cond_destroy(&p->cv);
    uv_mutex_destroy(&p->mu);
}

/* Takes every thread (libuv's UV_THREADPOOL_SIZE, 4 unless set); fails after 10 s when
 * some other job holds a thread. */
static void pool_take(pool_hold *p, uv_loop_t *loop)
{
    const char *env = getenv("UV_THREADPOOL_SIZE");
    int n = env != NULL && atoi(env) > 0 ? atoi(env) : 4;
    assert_true(n <= 64);
    *p = (pool_hold){.n = n};
    assert_int_equal(uv_mutex_init(&p->mu), 0);
    assert_int_equal(uv_cond_init(&p->cv), 0);
    for (int i = 0; i < n; i++) {
        p->req[i].data = p;
        assert_int_equal(uv_queue_work(loop, &p->req[i], pool_hold_work, pool_hold_after), 0);
    }
    uint64_t deadline = uv_hrtime() + UINT64_C(10000000000);
    uv_mutex_lock(&p->mu);
    while (p->started < n && uv_hrtime() < deadline)
        (void)uv_cond_timedwait(&p->cv, &p->mu, 100000000);
    bool all = p->started == n;
    uv_mutex_unlock(&p->mu);
    if (!all) {
        pool_release(p, loop);
        fail_msg("only %d of libuv's %d worker threads were free", p->started, n);
    }
}

/* Appends entry `index` of group 1 while the batch ahead of it is held in flight; the
 * first of `n` gets the batch going. Returns after `n` appends, the pool released. */
static void appends_behind_a_batch(fixture *f, completions *c, tag *t, uint64_t index, int n)
{
    pool_hold p;
    strata_err err;
    pool_take(&p, &f->loop);
    for (int i = 0; i < n; i++) {
        t[i] = (tag){c, (int)index - 1 + i}; /* in order from 0 for the entries from 1 */
        assert_int_equal(append_n(f, 1, index + (uint64_t)i, 1, 1, &t[i], &err), 0);
        if (i == 0)
            uv_run(&f->loop, UV_RUN_NOWAIT); /* the prepare handle launches it */
    }
    pool_release(&p, &f->loop);
}

/* Opens the log with hold_ops and makes entry 1 of group 1 durable (tag 0), so that its
 * segment exists: with one segment no file is prepared while a test holds the pool. */
static void open_for_holds(fixture *f, uint32_t hold_ops, completions *c, tag *t0)
{
    strata_err err;
    f->opts.segment_size = 0;
    f->opts.hold_ops = hold_ops;
    reopen(f);
    *t0 = (tag){c, 0};
    assert_int_equal(append_n(f, 1, 1, 1, 1, t0, &err), 0);
    assert_true(tu_run_count(&f->loop, &c->done, 1));
}

/* Group commit under load: when hold_ops operations or more wait behind a synced batch,
 * the next batch is held WAL_HOLD_MS to gather more; with fewer it goes at once. */
static void a_loaded_log_holds_the_next_batch(void **state)
{
    fixture *f = *state;
    completions c = {0};
    tag t[8];
    open_for_holds(f, 3, &c, &t[0]);
    /* Two wait behind the batch in flight: fewer than 3, not held. */
    appends_behind_a_batch(f, &c, &t[1], 2, 3);
    assert_true(tu_run_count(&f->loop, &c.done, 4));
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.holds, 0);
    assert_int_equal(st.batches, 3);
    /* Three wait: held, then synced together. */
    appends_behind_a_batch(f, &c, &t[4], 5, 4);
    assert_true(tu_run_count(&f->loop, &c.done, 8));
    wal_get_stats(f->w, &st);
    assert_int_equal(st.holds, 1);
    assert_int_equal(st.batches, 5);
    assert_int_equal(c.failed, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c.order[i], i);
    reopen(f);
    check_entries(f, 1, 1, 8, 1);
    /* Never, whatever waits. */
    f->opts.hold_ops = 0;
    reopen(f);
    appends_behind_a_batch(f, &c, &t[0], 9, 8);
    assert_true(tu_run_count(&f->loop, &c.done, 16));
    wal_get_stats(f->w, &st);
    assert_int_equal(st.holds, 0);
}

typedef struct {
    fixture *f;
    wal_stats at_first;
    bool closed;
} close_in_hold;

/* The first callback of the test below: the batch behind it is being held by now. */
static void close_in_first_callback(void *data, int status, const strata_err *err)
{
    (void)err;
    close_in_hold *h = data;
    assert_int_equal(status, 0);
    wal_get_stats(h->f->w, &h->at_first);
    wal_close(h->f->w, tu_close_done, &h->closed);
    h->f->w = NULL;
}

/* A close during a hold: what waits is written and synced, its callbacks fire, and the
 * log closes with its timer (the fixture's uv_loop_close finds no handle left). */
static void close_cuts_a_hold_short(void **state)
{
    fixture *f = *state;
    completions c = {0};
    tag t[2];
    strata_err err;
    open_for_holds(f, 1, &c, &t[0]);
    close_in_hold h = {.f = f};
    pool_hold p;
    pool_take(&p, &f->loop);
    uint8_t pl[300];
    wal_entry en = {1, 1 + 2 % 3, pl, tu_payload(1, 2, 1, pl)}; /* append_n's entry 2 */
    assert_int_equal(wal_append(f->w, 1, 2, &en, 1, close_in_first_callback, &h, &err), 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    t[1] = (tag){&c, 1};
    assert_int_equal(append_n(f, 1, 3, 1, 1, &t[1], &err), 0);
    pool_release(&p, &f->loop);
    assert_true(tu_run_until(&f->loop, &h.closed));
    assert_int_equal(h.at_first.holds, 1);
    assert_int_equal(c.done, 2);
    assert_int_equal(c.failed, 0);
    reopen(f);
    check_entries(f, 1, 1, 3, 1);
}

static void callbacks_can_append_from_inside(void **state);

typedef struct {
    fixture *f;
    int remaining;
    uint64_t next;
    int done;
} chain;

static void chain_cb(void *data, int status, const strata_err *err)
{
    chain *ch = data;
    (void)err;
    assert_int_equal(status, 0);
    ch->done++;
    if (--ch->remaining > 0) {
        strata_err e;
        uint8_t p[300];
        wal_entry en = {1, 1, p, tu_payload(9, ch->next, 1, p)};
        en.type = (uint8_t)(1 + ch->next % 3);
        assert_int_equal(wal_append(ch->f->w, 9, ch->next, &en, 1, chain_cb, ch, &e), 0);
        ch->next++;
    }
}

static void callbacks_can_append_from_inside(void **state)
{
    fixture *f = *state;
    reopen(f);
    chain ch = {f, 20, 2, 0};
    uint8_t p[300];
    wal_entry en = {1, 2, p, tu_payload(9, 1, 1, p)};
    strata_err err;
    assert_int_equal(wal_append(f->w, 9, 1, &en, 1, chain_cb, &ch, &err), 0);
    assert_true(tu_run_count(&f->loop, &ch.done, 20));
    reopen(f);
    check_entries(f, 9, 1, 20, 1);
}

static void conflicting_append_replaces_suffix(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 10, 1);
    /* Raft conflict: entries from 6 on are replaced by term-2 entries. */
    sync_append(f, 1, 6, 8, 2);
    assert_int_equal(state_of(f, 1).last_index, 13);
    check_entries(f, 1, 1, 5, 1);
    check_entries(f, 1, 6, 13, 2);
    reopen(f);
    assert_int_equal(state_of(f, 1).last_index, 13);
    check_entries(f, 1, 1, 5, 1);
    check_entries(f, 1, 6, 13, 2);
}

static void truncate_drops_suffix(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 10, 1);
    sync_append(f, 2, 1, 10, 1);
    completions c = {0};
    tag t = {&c, 0};
    strata_err err;
    assert_int_equal(wal_truncate(f->w, 1, 4, on_done, &t, &err), 0);
    assert_int_equal(state_of(f, 1).last_index, 3);
    assert_true(tu_run_count(&f->loop, &c.done, 1));
    /* A truncate beyond the end changes nothing. */
    assert_int_equal(wal_truncate(f->w, 2, 50, NULL, NULL, &err), 0);
    reopen(f);
    assert_int_equal(state_of(f, 1).last_index, 3);
    assert_int_equal(state_of(f, 2).last_index, 10);
    check_entries(f, 1, 1, 3, 1);
    wal_entry *e;
    size_t n;
    assert_int_equal(wal_read_entries(f->w, 1, 1, 4, 0, &e, &n, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    sync_append(f, 1, 4, 2, 3);
    reopen(f);
    check_entries(f, 1, 1, 3, 1);
    check_entries(f, 1, 4, 5, 3);
}

static void snapshot_compacts_and_recovers(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 30, 1);
    completions c = {0};
    tag t = {&c, 0};
    strata_err err;
    wal_snapshot s = {.index = 20, .term = 1, .keep_from = 15, .meta = "conf", .meta_len = 4};
    assert_int_equal(wal_set_snapshot(f->w, 1, &s, on_done, &t, &err), 0);
    assert_true(tu_run_count(&f->loop, &c.done, 1));
    wal_group_info i = state_of(f, 1);
    assert_int_equal(i.first_index, 15);
    assert_int_equal(i.last_index, 30);
    assert_int_equal(i.snapshot_index, 20);
    wal_entry *e;
    size_t n;
    assert_int_equal(wal_read_entries(f->w, 1, 14, 16, 0, &e, &n, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    reopen(f);
    i = state_of(f, 1);
    assert_int_equal(i.first_index, 15);
    assert_int_equal(i.last_index, 30);
    assert_int_equal(i.snapshot_index, 20);
    assert_int_equal(i.snapshot_term, 1);
    assert_int_equal(i.keep_from, 15);
    assert_int_equal(i.snapshot_meta_len, 4);
    assert_memory_equal(i.snapshot_meta, "conf", 4);
    check_entries(f, 1, 15, 30, 1);
    /* keep_from never moves back. */
    wal_snapshot s2 = {.index = 25, .term = 1, .keep_from = 3};
    assert_int_equal(wal_set_snapshot(f->w, 1, &s2, NULL, NULL, &err), 0);
    assert_int_equal(state_of(f, 1).keep_from, 15);
    /* A snapshot installed beyond the log drops every entry. */
    wal_snapshot s3 = {.index = 100, .term = 4, .keep_from = 101};
    assert_int_equal(wal_set_snapshot(f->w, 1, &s3, NULL, NULL, &err), 0);
    i = state_of(f, 1);
    assert_int_equal(i.first_index, 101);
    assert_int_equal(i.last_index, 100);
    sync_append(f, 1, 101, 5, 4);
    reopen(f);
    i = state_of(f, 1);
    assert_int_equal(i.first_index, 101);
    assert_int_equal(i.last_index, 105);
    assert_int_equal(i.snapshot_index, 100);
    assert_int_equal(i.snapshot_meta_len, 0);
    check_entries(f, 1, 101, 105, 4);
}

static void invalid_requests_are_refused(void **state)
{
    fixture *f = *state;
    reopen(f);
    strata_err err;
    uint8_t p[8] = {0};
    wal_entry e = {1, 1, p, sizeof p};
    assert_int_equal(wal_append(f->w, 1, 2, &e, 1, NULL, NULL, &err), -1); /* gap */
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(wal_append(f->w, 1, 0, &e, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(wal_append(f->w, 1, 1, &e, 0, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    wal_entry big = {1, 1, malloc(70000), 70000};
    assert_int_equal(wal_append(f->w, 1, 1, &big, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    free((void *)big.data);
    wal_entry nodata = {1, 1, NULL, 5};
    assert_int_equal(wal_append(f->w, 1, 1, &nodata, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    /* Nothing was created by refused requests. */
    assert_int_equal(wal_groups(f->w, NULL, 0), 0);

    sync_append(f, 1, 1, 5, 1);
    assert_int_equal(wal_append(f->w, 1, 7, &e, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(wal_set_term_vote(f->w, 1, 5, 1, NULL, NULL, &err), 0);
    assert_int_equal(wal_set_term_vote(f->w, 1, 4, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    wal_snapshot s = {.index = 3, .term = 1, .keep_from = 5};
    assert_int_equal(wal_set_snapshot(f->w, 1, &s, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    s.keep_from = 2;
    assert_int_equal(wal_set_snapshot(f->w, 1, &s, NULL, NULL, &err), 0);
    s.index = 2;
    assert_int_equal(wal_set_snapshot(f->w, 1, &s, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    s.index = 4;
    s.meta_len = 5; /* no pointer */
    assert_int_equal(wal_set_snapshot(f->w, 1, &s, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(wal_truncate(f->w, 1, 3, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(wal_append(f->w, 1, 3, &e, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    wal_entry *out;
    size_t n;
    assert_int_equal(wal_read_entries(f->w, 1, 5, 4, 0, &out, &n, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    assert_int_equal(wal_read_entries(f->w, 99, 1, 1, 0, &out, &n, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
}

static void back_pressure_when_too_much_is_pending(void **state)
{
    fixture *f = *state;
    f->opts.max_pending_bytes = 4096;
    reopen(f);
    strata_err err;
    uint8_t p[1000] = {0};
    wal_entry e = {1, 1, p, sizeof p};
    uint64_t idx = 1;
    while (wal_append(f->w, 1, idx, &e, 1, NULL, NULL, &err) == 0)
        idx++;
    assert_int_equal(err.code, ERR_BUSY);
    assert_true(idx > 2 && idx < 6);
}

static void read_is_paged_and_refuses_unwritten(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 20, 1);
    strata_err err;
    wal_entry *e;
    size_t n;
    assert_int_equal(wal_read_entries(f->w, 1, 1, 20, 1, &e, &n, &err), 0);
    assert_int_equal(n, 1); /* at least one entry, even over max_bytes */
    free(e);
    assert_int_equal(wal_read_entries(f->w, 1, 1, 20, 700, &e, &n, &err), 0);
    assert_true(n >= 2 && n < 20);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += e[i].len;
    assert_true(total <= 700);
    free(e);
    assert_int_equal(append_n(f, 1, 21, 1, 1, NULL, &err), 0);
    assert_int_equal(wal_read_entries(f->w, 1, 21, 21, 0, &e, &n, &err), -1);
    assert_int_equal(err.code, ERR_BUSY);
}

static void close_flushes_pending_requests(void **state)
{
    fixture *f = *state;
    reopen(f);
    completions c = {0};
    tag t = {&c, 0};
    strata_err err;
    assert_int_equal(append_n(f, 5, 1, 4, 1, &t, &err), 0);
    bool closed = false;
    wal_close(f->w, tu_close_done, &closed);
    /* Closing: new requests are refused, the one already made still completes. */
    assert_int_equal(append_n(f, 5, 5, 1, 1, NULL, &err), -1);
    assert_int_equal(err.code, ERR_IO);
    assert_true(tu_run_until(&f->loop, &closed));
    f->w = NULL;
    assert_int_equal(c.done, 1);
    assert_int_equal(c.failed, 0);
    reopen(f);
    check_entries(f, 5, 1, 4, 1);
}

static void drop_forgets_group(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 5, 1);
    sync_append(f, 2, 1, 5, 1);
    completions c = {0};
    tag t = {&c, 0};
    strata_err err;
    assert_int_equal(wal_drop_group(f->w, 1, on_done, &t, &err), 0);
    assert_true(tu_run_count(&f->loop, &c.done, 1));
    wal_group_info info;
    assert_int_equal(wal_group_state(f->w, 1, &info, &err), -1);
    reopen(f);
    assert_int_equal(wal_group_state(f->w, 1, &info, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    assert_int_equal(wal_groups(f->w, NULL, 0), 1);
    /* The id can start over. */
    sync_append(f, 1, 1, 2, 7);
    reopen(f);
    assert_int_equal(state_of(f, 1).last_index, 2);
    check_entries(f, 1, 1, 2, 7);
}

/* The files in the directory: the live segments, and maybe the next one prepared. */
static void check_segment_files(fixture *f, const wal_stats *st)
{
    int n = tu_count_segments(f->dir);
    assert_true(n >= (int)st->segments && n <= (int)(st->segments + st->prepared));
}

/* Many groups fill several 64 KiB segments; once every group's snapshot covers them
 * the old segments go, and a group with only a term/vote in the first segment does not
 * pin it (its record is written again). */
static void segments_are_removed_once_covered(void **state)
{
    fixture *f = *state;
    reopen(f);
    strata_err err;
    completions c = {0};
    tag t = {&c, 0};
    assert_int_equal(wal_set_term_vote(f->w, 77, 3, 1, on_done, &t, &err), 0);
    uint64_t next[8];
    for (int g = 0; g < 8; g++)
        next[g] = 1;
    for (int round = 0; round < 30; round++) {
        for (uint64_t g = 0; g < 8; g++) {
            assert_int_equal(append_n(f, g + 1, next[g], 8, 1, NULL, &err), 0);
            next[g] += 8;
        }
        sync_append(f, 100, (uint64_t)round + 1, 1, 1);
    }
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_true(st.last_seq >= 4);
    assert_int_equal(st.segments_removed, 0);
    check_segment_files(f, &st);
    /* Group 100 keeps everything, so nothing can go yet. */
    for (uint64_t g = 0; g < 8; g++) {
        wal_snapshot s = {.index = next[g] - 1, .term = 1, .keep_from = next[g] - 4};
        assert_int_equal(wal_set_snapshot(f->w, g + 1, &s, NULL, NULL, &err), 0);
    }
    sync_append(f, 100, 31, 1, 1);
    wal_get_stats(f->w, &st);
    assert_int_equal(st.segments_removed, 0);
    wal_snapshot s = {.index = 31, .term = 1, .keep_from = 32};
    assert_int_equal(wal_set_snapshot(f->w, 100, &s, NULL, NULL, &err), 0);
    /* Each completed batch lets removal advance; a few rounds let the re-logged
     * metadata become durable. The removals themselves run on the thread pool: on a
     * loaded disk they may finish rounds later, so rounds go on until they have (bounded). */
    wal_get_stats(f->w, &st);
    for (int i = 0; i < 500 && (i < 6 || st.segments_removed < 3); i++) {
        assert_int_equal(wal_set_term_vote(f->w, 101, (uint64_t)i + 1, 0, on_done, &t, &err), 0);
        assert_true(tu_run_count(&f->loop, &c.done, c.done + 1));
        wal_get_stats(f->w, &st);
    }
    assert_true(st.segments_removed >= 3);
    check_segment_files(f, &st);
    assert_true(st.first_seq > 1);

    reopen(f);
    wal_group_info i77 = state_of(f, 77);
    assert_int_equal(i77.term, 3);
    assert_int_equal(i77.vote, 1);
    for (uint64_t g = 0; g < 8; g++) {
        wal_group_info i = state_of(f, g + 1);
        assert_int_equal(i.last_index, next[g] - 1);
        assert_int_equal(i.first_index, next[g] - 4);
        check_entries(f, g + 1, next[g] - 4, next[g] - 1, 1);
    }
    assert_int_equal(state_of(f, 100).first_index, 32);
    /* And it keeps working after recovery. */
    sync_append(f, 3, next[2], 3, 1);
    reopen(f);
    check_entries(f, 3, next[2] - 4, next[2] + 2, 1);
}

static void flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x20;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static void flipped_byte_in_middle_is_corruption(void **state)
{
    fixture *f = *state;
    reopen(f);
    for (int i = 0; i < 5; i++)
        sync_append(f, 1, (uint64_t)i * 4 + 1, 4, 1);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    flip_byte(path, 32 + 40); /* inside the first record's payload */
    strata_err err;
    wal *w;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "0000000000000001.wal"));
    assert_non_null(strstr(err.msg, "offset 32"));
    /* Still refused the second time: nothing was silently dropped. */
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    flip_byte(path, 32 + 40);
    reopen(f);
    check_entries(f, 1, 1, 20, 1);
}

static void flipped_header_of_older_segment_is_corruption(void **state)
{
    fixture *f = *state;
    reopen(f);
    for (uint64_t i = 0; i < 120; i++)
        sync_append(f, 1, i * 8 + 1, 8, 1);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    flip_byte(path, 20);
    strata_err err;
    wal *w;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    flip_byte(path, 20);
    segment_file(f, 2, path, sizeof path);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "missing"));
}

static void damaged_last_batch_is_a_torn_tail(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 4, 1);
    sync_append(f, 1, 5, 4, 1);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    /* Find the last batch's record: the second record of the segment. */
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    int fd = open(path, O_RDONLY);
    uint8_t hdr[32];
    assert_int_equal(pread(fd, hdr, 32, 32), 32);
    close(fd);
    uint32_t len =
        (uint32_t)hdr[8] << 24 | (uint32_t)hdr[9] << 16 | (uint32_t)hdr[10] << 8 | hdr[11];
    long second = 32 + (long)((32 + len + 7) & ~7u);
    flip_byte(path, second + 50);
    reopen(f);
    wal_get_stats(f->w, &st);
    assert_true(st.tail_truncated > 0);
    assert_int_equal(state_of(f, 1).last_index, 4);
    check_entries(f, 1, 1, 4, 1);
    sync_append(f, 1, 5, 2, 2);
    reopen(f);
    check_entries(f, 1, 1, 4, 1);
    check_entries(f, 1, 5, 6, 2);
}

static void garbage_tail_is_truncated(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 10, 1);
    wal_stats st;
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    /* Garbage after the last record, as a torn write would leave. */
    int fd = open(path, O_RDWR);
    uint8_t junk[3000];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 7 + 1);
    wal_entry *e;
    size_t n;
    strata_err err;
    reopen(f);
    wal_group_info info = state_of(f, 1);
    (void)info;
    assert_int_equal(wal_read_entries(f->w, 1, 1, 10, 0, &e, &n, &err), 0);
    free(e);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    /* Records are ~1.7 KiB here; put junk well after them. */
    assert_int_equal(pwrite(fd, junk, sizeof junk, 8192), (ssize_t)sizeof junk);
    close(fd);
    reopen(f);
    wal_get_stats(f->w, &st);
    assert_true(st.tail_truncated >= sizeof junk);
    check_entries(f, 1, 1, 10, 1);
    sync_append(f, 1, 11, 30, 1);
    reopen(f);
    wal_get_stats(f->w, &st);
    assert_int_equal(st.tail_truncated, 0);
    check_entries(f, 1, 1, 40, 1);
}

static void torn_new_segment_is_removed(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 10, 1);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    /* A crash right after creating the next segment: a file of zeros. */
    char path[4096];
    segment_file(f, 2, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    assert_int_equal(ftruncate(fd, 65536), 0);
    close(fd);
    reopen(f);
    assert_int_equal(tu_count_segments(f->dir), 1);
    check_entries(f, 1, 1, 10, 1);
    /* The next segment can then be created again. */
    for (uint64_t i = 0; i < 100; i++)
        sync_append(f, 1, 11 + i * 8, 8, 1);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.last_seq, 3);
    reopen(f);
    check_entries(f, 1, 1, 810, 1);
    assert_int_equal(tu_count_segments(f->dir), 3);
}

static void io_failure_fails_callbacks_and_later_requests(void **state)
{
    fixture *f = *state;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, small = {16384, 16384};
    getrlimit(RLIMIT_FSIZE, &old);
    small.rlim_max = old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    reopen(f); /* after the limit: the first segment, prepared at open, fails too */
    completions c = {0};
    tag t[2] = {{&c, 0}, {&c, 1}};
    strata_err err, why;
    assert_false(wal_failed(f->w, &why));
    /* The first segment cannot even be preallocated past 16 KiB. */
    assert_int_equal(append_n(f, 1, 1, 1, 1, &t[0], &err), 0);
    assert_int_equal(append_n(f, 2, 1, 1, 1, &t[1], &err), 0);
    assert_true(tu_run_count(&f->loop, &c.done, 2));
    setrlimit(RLIMIT_FSIZE, &old);
    assert_int_equal(c.failed, 2);
    assert_int_equal(c.last_err.code, ERR_IO);
    /* The node asks (and stops): the first error, with its path and errno text. */
    assert_true(wal_failed(f->w, &why));
    assert_int_equal(why.code, ERR_IO);
    assert_string_equal(why.msg, c.last_err.msg);
    assert_non_null(strstr(why.msg, "File too large"));
    assert_true(wal_failed(f->w, NULL));
    assert_int_equal(append_n(f, 3, 1, 1, 1, NULL, &err), -1);
    assert_int_equal(err.code, ERR_IO);
    assert_int_equal(wal_set_term_vote(f->w, 3, 1, 1, NULL, NULL, &err), -1);
    assert_int_equal(err.code, ERR_IO);
}

/* One batch larger than what is left of a segment continues in the next segment; the
 * first is synced before the second is written (recovery relies on it). */
static void batch_spanning_segments_recovers(void **state)
{
    fixture *f = *state;
    reopen(f);
    completions c = {0};
    tag t[300];
    strata_err err;
    for (int i = 0; i < 300; i++) {
        t[i] = (tag){&c, i};
        assert_int_equal(
            append_n(f, (uint64_t)i % 10 + 1, (uint64_t)i / 10 * 2 + 1, 2, 1, &t[i], &err), 0);
    }
    assert_true(tu_run_count(&f->loop, &c.done, 300));
    assert_int_equal(c.failed, 0);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.batches, 1);
    assert_true(st.syncs >= 2);
    assert_true(st.last_seq >= 2);
    reopen(f);
    for (uint64_t g = 1; g <= 10; g++) {
        assert_int_equal(state_of(f, g).last_index, 60);
        check_entries(f, g, 1, 60, 1);
    }
}

static void damaged_end_of_older_segment_is_corruption(void **state)
{
    fixture *f = *state;
    reopen(f);
    uint64_t next = 1;
    wal_stats st;
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (st.last_seq < 2);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    /* Walk segment 1's records to its last one and damage it. */
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    int fd = open(path, O_RDONLY);
    long off = 32, last = 32;
    uint8_t h[32];
    while (pread(fd, h, 32, off) == 32 && h[12] != 0) {
        uint32_t len = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
        last = off;
        off += (long)((32 + len + 7) & ~7u);
    }
    close(fd);
    flip_byte(path, last + 45);
    strata_err err;
    wal *w;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    char want[64];
    snprintf(want, sizeof want, "offset %ld", last);
    assert_non_null(strstr(err.msg, want));
}

typedef struct {
    fixture *f;
    bool closed;
    int fired;
} close_ctx;

static void closed_cb(void *data)
{
    ((close_ctx *)data)->closed = true;
}

static void close_from_callback(void *data, int status, const strata_err *err)
{
    close_ctx *x = data;
    (void)err;
    assert_int_equal(status, 0);
    if (x->fired++ == 0)
        wal_close(x->f->w, closed_cb, x);
}

static void close_from_inside_a_callback(void **state)
{
    fixture *f = *state;
    reopen(f);
    close_ctx x = {f, false, 0};
    strata_err err;
    uint8_t p[10] = {0};
    wal_entry e = {1, 1, p, sizeof p};
    assert_int_equal(wal_append(f->w, 1, 1, &e, 1, close_from_callback, &x, &err), 0);
    assert_int_equal(wal_append(f->w, 1, 2, &e, 1, close_from_callback, &x, &err), 0);
    assert_true(tu_run_until(&f->loop, &x.closed));
    assert_int_equal(x.fired, 2);
    f->w = NULL;
    reopen(f);
    assert_int_equal(state_of(f, 1).last_index, 2);
}

/* A snapshot record that never changes must not pin the oldest segment: it is written
 * again, and survives the removal of its first copy. */
static void idle_snapshot_is_relogged(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 50, 1, 10, 1);
    strata_err err;
    wal_snapshot s = {.index = 10, .term = 1, .keep_from = 11, .meta = "idle", .meta_len = 4};
    assert_int_equal(wal_set_snapshot(f->w, 50, &s, NULL, NULL, &err), 0);
    uint64_t next = 1;
    wal_stats st;
    do {
        sync_append(f, 1, next, 8, 1);
        wal_snapshot s1 = {.index = next + 7, .term = 1, .keep_from = next + 8};
        assert_int_equal(wal_set_snapshot(f->w, 1, &s1, NULL, NULL, &err), 0);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (st.first_seq < 3 && next < 5000);
    assert_true(st.first_seq >= 3);
    reopen(f);
    wal_group_info i = state_of(f, 50);
    assert_int_equal(i.snapshot_index, 10);
    assert_int_equal(i.keep_from, 11);
    assert_int_equal(i.first_index, 11);
    assert_int_equal(i.last_index, 10);
    assert_int_equal(i.snapshot_meta_len, 4);
    assert_memory_equal(i.snapshot_meta, "idle", 4);
}

static void damage_found_when_reading_back(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 4, 1);
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    flip_byte(path, 32 + 60);
    strata_err err;
    wal_entry *e;
    size_t n;
    assert_int_equal(wal_read_entries(f->w, 1, 1, 4, 0, &e, &n, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "offset 32"));
    flip_byte(path, 32 + 60);
}

/* A record whose checksum matches but whose payload is malformed (count 0) is
 * corruption, not a torn tail. */
static void malformed_checksummed_record_is_corruption(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 4, 1);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    int fd = open(path, O_RDWR);
    uint8_t rec[4096];
    assert_int_equal(pread(fd, rec, sizeof rec, 32), (ssize_t)sizeof rec);
    uint32_t len =
        (uint32_t)rec[8] << 24 | (uint32_t)rec[9] << 16 | (uint32_t)rec[10] << 8 | rec[11];
    memset(rec + 32 + 8, 0, 4); /* entry count */
    uint64_t sum = XXH3_64bits(rec + 8, 24 + len);
    for (int i = 7; i >= 0; i--, sum >>= 8)
        rec[i] = (uint8_t)sum;
    assert_int_equal(pwrite(fd, rec, 32 + len, 32), (ssize_t)(32 + len));
    close(fd);
    strata_err err;
    wal *w;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "malformed"));
}

/* Losing the oldest segment while its entries are still needed is detected. */
static void lost_oldest_segment_is_detected(void **state)
{
    fixture *f = *state;
    reopen(f);
    uint64_t next = 1;
    wal_stats st;
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (st.last_seq < 3);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    assert_int_equal(unlink(path), 0);
    strata_err err;
    wal *w;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "missing"));
}

static void next_segment_is_prepared_ahead(void **state)
{
    fixture *f = *state;
    reopen(f);
    uint64_t next = 1;
    wal_stats st;
    /* Past half of the first segment, the second is created ahead. */
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (!st.prepared);
    double deadline = tu_now() + 10;
    while (tu_count_segments(f->dir) < 2 && tu_now() < deadline)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(tu_count_segments(f->dir), 2);
    assert_int_equal(st.segments, 1);
    uint64_t syncs_before = st.syncs;
    /* Roll over into it: the batch that does needs no directory sync of its own, and
     * the log goes on in it. */
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (st.last_seq < 2);
    assert_true(st.syncs > syncs_before);
    /* A clean close with a prepared, unused segment: recovery removes it quietly. */
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (!st.prepared);
    reopen(f);
    wal_get_stats(f->w, &st);
    assert_int_equal(st.tail_truncated, 0);
    assert_int_equal(st.segments, 2);
    check_entries(f, 1, 1, next - 1, 1);
}

/* Whether any extent of the file is still "unwritten" (allocated, never written): a
 * sync after writing into one must also commit the filesystem's metadata. */
static bool has_unwritten_extents(const char *path)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    enum { N = 64 };
    struct fiemap *q = malloc(sizeof *q + N * sizeof(struct fiemap_extent));
    assert_non_null(q);
    bool unwritten = false;
    uint64_t start = 0;
    for (;;) {
        memset(q, 0, sizeof *q + N * sizeof(struct fiemap_extent));
        q->fm_start = start;
        q->fm_length = FIEMAP_MAX_OFFSET;
        q->fm_flags = FIEMAP_FLAG_SYNC;
        q->fm_extent_count = N;
        assert_int_equal(ioctl(fd, FS_IOC_FIEMAP, q), 0);
        if (q->fm_mapped_extents == 0)
            break;
        for (uint32_t i = 0; i < q->fm_mapped_extents; i++)
            unwritten |= (q->fm_extents[i].fe_flags & FIEMAP_EXTENT_UNWRITTEN) != 0;
        struct fiemap_extent *last = &q->fm_extents[q->fm_mapped_extents - 1];
        if (last->fe_flags & FIEMAP_EXTENT_LAST)
            break;
        start = last->fe_logical + last->fe_length;
    }
    free(q);
    close(fd);
    return unwritten;
}

/* A new log prepares its first segment at once, and segments are prepared as written
 * zeros (not fallocate's unwritten extents) at their full size, so that the write
 * path's syncs carry data only. */
static void segments_are_prepared_as_zeros(void **state)
{
    fixture *f = *state;
    f->opts.segment_size = 1 << 20;
    reopen(f);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.prepared, 1);
    sync_append(f, 1, 1, 1, 1); /* waits for the prepared file and writes into it */
    char path[512];
    segment_file(f, 1, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 1 << 20);
    assert_false(has_unwritten_extents(path));
    check_entries(f, 1, 1, 1, 1);
}

/* A yardstick: opens an unpaced log of the same segment size in a directory of its own
 * and runs the loop until its first segment is prepared, i.e. until as much filling as
 * the paced spare needs has been done at full speed. */
static void wait_for_an_unpaced_fill(fixture *f)
{
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    wal_options o = {.dir = dir, .segment_size = f->opts.segment_size};
    wal *w;
    strata_err err;
    assert_int_equal(wal_open(&o, &f->loop, &w, &err), 0);
    wal_stats st;
    double deadline = tu_now() + 10;
    do {
        uv_run(&f->loop, UV_RUN_ONCE);
        wal_get_stats(w, &st);
    } while (!st.spare_ready && tu_now() < deadline);
    assert_int_equal(st.spare_ready, 1);
    assert_true(tu_close(w, &f->loop));
    tu_rmdir(dir);
    free(dir);
}

/* A spare segment's zeros go out at a pace (here spread over a minute), which a batch
 * that needs the file ends: it waits for the rest at full speed, not for the pace. */
static void paced_spare_is_hurried_by_a_waiting_batch(void **state)
{
    fixture *f = *state;
    f->opts.spare_fill_ms = 60000;
    reopen(f);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.prepared, 1); /* the first segment, paced too */
    double start = tu_now();
    sync_append(f, 1, 1, 8, 1); /* waits for it, but not for the pace */
    assert_true(tu_now() - start < 10);
    wal_get_stats(f->w, &st);
    assert_int_equal(st.spares_hurried, 1);
    uint64_t next = 9;
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (!st.prepared); /* past half: the second segment is being prepared */
    wait_for_an_unpaced_fill(f);
    wal_get_stats(f->w, &st);
    assert_int_equal(st.spare_ready, 0);
    assert_int_equal(st.spares_hurried, 1);
    do {
        sync_append(f, 1, next, 8, 1);
        next += 8;
        wal_get_stats(f->w, &st);
    } while (st.last_seq < 2);
    assert_true(tu_now() - start < 20);
    assert_int_equal(st.spares_hurried, 2);
    reopen(f);
    check_entries(f, 1, 1, next - 1, 1);
}

/* Closing does not wait for a paced spare. */
static void close_hurries_a_paced_spare(void **state)
{
    fixture *f = *state;
    f->opts.spare_fill_ms = 60000;
    reopen(f);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.prepared, 1);
    assert_int_equal(st.spare_ready, 0);
    double start = tu_now();
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    assert_true(tu_now() - start < 10); /* paced, the fill would go on for a minute */
}

/* Appends 40 single-entry records in ONE batch, closes, and returns the offsets of the
 * records in segment 1. */
static int one_batch_of_records(fixture *f, long *offs, long *ends)
{
    completions c = {0};
    tag t = {&c, 0};
    strata_err err;
    for (uint64_t i = 1; i <= 40; i++)
        assert_int_equal(append_n(f, 1, i, 1, 1, i == 40 ? &t : NULL, &err), 0);
    assert_true(tu_run_count(&f->loop, &c.done, 1));
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_int_equal(st.batches, 1);
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    int fd = open(path, O_RDONLY);
    long off = 32;
    int n = 0;
    uint8_t h[32];
    while (pread(fd, h, 32, off) == 32 && h[12] != 0) {
        uint32_t len = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
        offs[n] = off;
        ends[n++] = off + 32 + (long)len; /* checksummed bytes end here; padding follows */
        off += (long)((32 + len + 7) & ~7u);
    }
    close(fd);
    return n;
}

/* Within one batch, a flipped byte followed by valid records is corruption: a torn write
 * would have left whole sectors of zeros instead. */
static void flipped_byte_within_one_batch_is_corruption(void **state)
{
    fixture *f = *state;
    reopen(f);
    long offs[64], ends[64];
    assert_int_equal(one_batch_of_records(f, offs, ends), 40);
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    flip_byte(path, offs[20] + 40);
    strata_err err;
    wal *w;
    assert_int_equal(wal_open(&f->opts, &f->loop, &w, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    char want[64];
    snprintf(want, sizeof want, "offset %ld", offs[20]);
    assert_non_null(strstr(err.msg, want));
}

/* Within the last batch, a sector that never reached the disk (zeros) with valid
 * records after it is a torn write: the log ends before it. */
static void unwritten_sector_in_last_batch_is_a_torn_tail(void **state)
{
    fixture *f = *state;
    reopen(f);
    long offs[64], ends[64];
    assert_int_equal(one_batch_of_records(f, offs, ends), 40);
    char path[4096];
    segment_file(f, 1, path, sizeof path);
    long sector = (offs[20] + 511) & ~511L;
    assert_true(sector + 512 < offs[39]); /* valid records remain after it */
    static const uint8_t zeros[512];
    int fd = open(path, O_RDWR);
    assert_int_equal(pwrite(fd, zeros, 512, sector), 512);
    close(fd);
    int first_bad = 0; /* the first record whose checksummed bytes the sector hits */
    while (ends[first_bad] <= sector)
        first_bad++;
    reopen(f);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_true(st.tail_truncated > 0);
    wal_group_info i = state_of(f, 1);
    assert_int_equal(i.last_index, (uint64_t)first_bad);
    check_entries(f, 1, 1, (uint64_t)first_bad, 1);
}

/* Bytes this process has made the kernel read from storage (/proc/self/io), or -1 where
 * the kernel does not count them. */
static long long storage_read_bytes(void)
{
    FILE *fp = fopen("/proc/self/io", "r");
    if (fp == NULL)
        return -1;
    char line[128];
    long long v = -1;
    while (fgets(line, sizeof line, fp) != NULL)
        if (sscanf(line, "read_bytes: %lld", &v) == 1)
            break;
    fclose(fp);
    return v;
}

/* Drops the (clean, synced) cached pages of every segment file, as memory pressure would. */
static void evict_segments(const char *dir)
{
    char path[4200];
    for (uint64_t seq = 1; seq < 64; seq++) {
        snprintf(path, sizeof path, "%s/%016llx.wal", dir, (unsigned long long)seq);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        close(fd);
    }
}

/* Every write covers whole blocks: the written part of the tail block goes again in front
 * of a batch, zeros after it. So no batch makes the kernel read a block first, even with
 * the segment's pages evicted between batches (where the kernel counts a process's reads:
 * an unaligned write path reads in every such batch; a stray page fault of the test's own
 * code may read in one or two); that holds across segment rolls and, as recovery loads the
 * tail block, after a reopen; and recovery reads back exactly what was appended. */
static void writes_cover_whole_blocks(void **state)
{
    fixture *f = *state;
    reopen(f);
    uint64_t next = 1;
    int batches = 0, reading = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 40; i++) {
            evict_segments(f->dir);
            long long before = storage_read_bytes();
            size_t n = 1 + (size_t)(i * 7 + round) % 9; /* odd sizes: ends fall mid-block */
            sync_append(f, 1, next, n, 1);
            next += n;
            batches += before >= 0;
            reading += before >= 0 && storage_read_bytes() != before;
        }
        wal_stats st;
        wal_get_stats(f->w, &st);
        assert_int_equal(st.unaligned_writes, 0);
        reopen(f);
        check_entries(f, 1, 1, next - 1, 1);
    }
    if (reading > 2)
        fail_msg("%d of %d batches read from storage", reading, batches);
    wal_stats st;
    wal_get_stats(f->w, &st);
    assert_true(st.last_seq >= 2); /* the 64 KiB segments rolled */
}

/* The test binary links with -Wl,--wrap=pread64 and --wrap=pread (meson.build; glibc's
 * pread is pread64 where file offsets are 64-bit): while fail_tail_read is set, the next
 * read shorter than a page (recovery's read of the tail block; segments are read whole)
 * fails with EIO, once. */
static bool fail_tail_read;

static bool fail_this_read(size_t count)
{
    if (!fail_tail_read || count == 0 || count >= 4096)
        return false;
    fail_tail_read = false;
    errno = EIO;
    return true;
}

ssize_t __real_pread64(int fd, void *buf, size_t count, off_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t count, off_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t count, off_t off)
{
    return fail_this_read(count) ? -1 : __real_pread64(fd, buf, count, off);
}

ssize_t __real_pread(int fd, void *buf, size_t count, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off)
{
    return fail_this_read(count) ? -1 : __real_pread(fd, buf, count, off);
}

/* When recovery cannot read the written part of the tail block, the log does not know the
 * bytes in front of its next write: that write starts inside the block, unaligned (the
 * kernel reads the block first), which costs time, not correctness. So is every write that
 * ends in that block still; the first that ends past it leaves a tail block written from
 * its own bytes, and every write after it is aligned again (here 6 were not). Every entry
 * reads back, also after the next reopen. */
static void unread_tail_block_costs_unaligned_writes_until_it_fills(void **state)
{
    fixture *f = *state;
    reopen(f);
    sync_append(f, 1, 1, 3, 1); /* ends inside a block */
    assert_true(tu_close(f->w, &f->loop));
    f->w = NULL;
    fail_tail_read = true;
    reopen(f);
    assert_false(fail_tail_read); /* the tail block's read was the one that failed */
    assert_false(wal_failed(f->w, NULL));
    uint64_t next = 4;
    for (int i = 0; i < 40; i++) { /* odd sizes: ends fall mid-block, some blocks filled */
        size_t n = 1 + (size_t)(i * 7) % 9;
        sync_append(f, 1, next, n, 1);
        next += n;
        wal_stats st;
        wal_get_stats(f->w, &st);
        if (i == 0)
            assert_int_equal(st.unaligned_writes, 1);
        /* Entries of 1-300 bytes, 1-9 a batch: a few batches fill the block. */
        if (i >= 10 && st.unaligned_writes > 10)
            fail_msg("%llu unaligned writes after %d batches",
                     (unsigned long long)st.unaligned_writes, i + 1);
    }
    wal_stats st;
    wal_get_stats(f->w, &st);
    uint64_t settled = st.unaligned_writes;
    for (int i = 0; i < 20; i++) {
        size_t n = 1 + (size_t)(i * 5) % 9;
        sync_append(f, 1, next, n, 1);
        next += n;
    }
    wal_get_stats(f->w, &st);
    assert_int_equal(st.unaligned_writes, settled);
    check_entries(f, 1, 1, next - 1, 1);
    reopen(f);
    check_entries(f, 1, 1, next - 1, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(open_validates_options, setup, teardown),
        cmocka_unit_test_setup_teardown(empty_log_opens_and_reopens, setup, teardown),
        cmocka_unit_test_setup_teardown(second_open_is_refused_by_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(appends_survive_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(group_commit_shares_one_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(appends_accumulate_while_a_sync_is_in_flight, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_loaded_log_holds_the_next_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(close_cuts_a_hold_short, setup, teardown),
        cmocka_unit_test_setup_teardown(callbacks_can_append_from_inside, setup, teardown),
        cmocka_unit_test_setup_teardown(conflicting_append_replaces_suffix, setup, teardown),
        cmocka_unit_test_setup_teardown(truncate_drops_suffix, setup, teardown),
        cmocka_unit_test_setup_teardown(snapshot_compacts_and_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(invalid_requests_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(back_pressure_when_too_much_is_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(read_is_paged_and_refuses_unwritten, setup, teardown),
        cmocka_unit_test_setup_teardown(close_flushes_pending_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(drop_forgets_group, setup, teardown),
        cmocka_unit_test_setup_teardown(segments_are_removed_once_covered, setup, teardown),
        cmocka_unit_test_setup_teardown(flipped_byte_in_middle_is_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(flipped_header_of_older_segment_is_corruption, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(damaged_last_batch_is_a_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_tail_is_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(torn_new_segment_is_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(io_failure_fails_callbacks_and_later_requests, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(batch_spanning_segments_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(damaged_end_of_older_segment_is_corruption, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(close_from_inside_a_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_snapshot_is_relogged, setup, teardown),
        cmocka_unit_test_setup_teardown(damage_found_when_reading_back, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_checksummed_record_is_corruption, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(lost_oldest_segment_is_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(next_segment_is_prepared_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(segments_are_prepared_as_zeros, setup, teardown),
        cmocka_unit_test_setup_teardown(paced_spare_is_hurried_by_a_waiting_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(close_hurries_a_paced_spare, setup, teardown),
        cmocka_unit_test_setup_teardown(flipped_byte_within_one_batch_is_corruption, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(unwritten_sector_in_last_batch_is_a_torn_tail, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(writes_cover_whole_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(unread_tail_block_costs_unaligned_writes_until_it_fills,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
