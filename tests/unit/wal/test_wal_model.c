/*
 * Model test for storage/wal: random appends (with conflicts), truncations, snapshots
 * (compactions and installs beyond the log), term/vote changes and drops over several
 * groups, with small segments so that segments roll and are removed. After every batch
 * and after every reopen, each group's state and entries must equal a simple in-memory
 * model of the contract in wal.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/wal/wal_test_util.h"

#define GROUPS 6
#define MAXLOG 4096

typedef struct {
    bool exists;
    uint64_t term, vote, snap_index, snap_term, keep_from;
    uint64_t start, last;        /* entries held: [start, last] */
    uint64_t entry_term[MAXLOG]; /* by index; valid for [first, last] */
} model_group;

static model_group model[GROUPS + 1];
static uint64_t rng = 88172645463325252ULL;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return n ? rng % n : 0;
}

static void model_reset(model_group *m)
{
    memset(m, 0, sizeof *m);
    m->keep_from = 1;
    m->start = 1;
}

static int outstanding;

static void done_cb(void *data, int status, const strata_err *err)
{
    (void)data;
    (void)err;
    assert_int_equal(status, 0);
    outstanding--;
}

static void check_group(wal *w, uint64_t g)
{
    model_group *m = &model[g];
    wal_group_info info;
    strata_err err;
    int rc = wal_group_state(w, g, &info, &err);
    if (!m->exists) {
        assert_int_equal(rc, -1);
        assert_int_equal(err.code, ERR_NOT_FOUND);
        return;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(info.term, m->term);
    assert_int_equal(info.vote, m->vote);
    assert_int_equal(info.snapshot_index, m->snap_index);
    assert_int_equal(info.snapshot_term, m->snap_term);
    assert_int_equal(info.keep_from, m->keep_from);
    assert_int_equal(info.last_index, m->last);
    assert_int_equal(info.first_index, m->start);
    if (info.first_index > info.last_index)
        return;
    wal_entry *e;
    size_t n;
    if (wal_read_entries(w, g, info.first_index, info.last_index, 0, &e, &n, &err) != 0)
        fail_msg("read group %llu: %s", (unsigned long long)g, err.msg);
    assert_int_equal(n, info.last_index - info.first_index + 1);
    uint8_t want[300];
    for (size_t i = 0; i < n; i++) {
        uint64_t idx = info.first_index + i;
        assert_int_equal(e[i].term, m->entry_term[idx]);
        size_t len = tu_payload(g, idx, e[i].term, want);
        assert_int_equal(e[i].len, len);
        assert_memory_equal(e[i].data, want, len);
    }
    free(e);
}

static void random_op(wal *w)
{
    uint64_t g = 1 + rnd(GROUPS);
    model_group *m = &model[g];
    strata_err err;
    uint64_t r = rnd(100);
    if (!m->exists)
        model_reset(m);
    if (r < 55) {
        /* Append, sometimes replacing a suffix (Raft conflict). */
        uint64_t lo = m->snap_index + 1, hi = m->last + 1;
        uint64_t first = rnd(4) == 0 && hi > lo ? lo + rnd(hi - lo + 1) : hi;
        size_t n = 1 + rnd(6);
        if (first + n >= MAXLOG)
            return;
        uint64_t term = m->term + 1 + rnd(3);
        uint8_t bufs[6][300];
        wal_entry e[6];
        for (size_t i = 0; i < n; i++) {
            e[i] = (wal_entry){term, 1, bufs[i], tu_payload(g, first + i, term, bufs[i])};
            m->entry_term[first + i] = term;
        }
        assert_int_equal(wal_append(w, g, first, e, n, done_cb, NULL, &err), 0);
        m->last = first + n - 1;
    } else if (r < 65) {
        uint64_t from = m->snap_index + 1 + rnd(m->last - m->snap_index + 2);
        assert_int_equal(wal_truncate(w, g, from, done_cb, NULL, &err), 0);
        if (from <= m->last)
            m->last = from - 1;
    } else if (r < 85) {
        uint64_t index = m->snap_index + rnd(m->last - m->snap_index + 1);
        if (rnd(8) == 0)
            index = m->last + 1 + rnd(5); /* installed from the leader */
        if (index >= MAXLOG - 10)
            return;
        uint64_t keep = index + 1 - rnd(index + 1 < 8 ? index + 1 : 8);
        uint8_t meta[4] = {(uint8_t)g, (uint8_t)index};
        wal_snapshot s = {index, m->term, keep, meta, rnd(2) ? sizeof meta : 0};
        assert_int_equal(wal_set_snapshot(w, g, &s, done_cb, NULL, &err), 0);
        if (index > m->last) {
            m->last = index;
            m->start = index + 1;
        }
        m->snap_index = index;
        m->snap_term = m->term;
        if (keep > m->keep_from)
            m->keep_from = keep;
        if (m->start < m->keep_from)
            m->start = m->keep_from;
        if (m->start > m->last + 1)
            m->start = m->last + 1;
    } else if (r < 97) {
        uint64_t term = m->term + rnd(2), vote = rnd(5);
        assert_int_equal(wal_set_term_vote(w, g, term, vote, done_cb, NULL, &err), 0);
        m->term = term;
        m->vote = vote;
    } else {
        assert_int_equal(wal_drop_group(w, g, done_cb, NULL, &err), 0);
        model_reset(m);
        outstanding++;
        return;
    }
    m->exists = true;
    outstanding++;
}

static void random_history_matches_model(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    wal_options o = {.dir = dir, .segment_size = 64 << 10};
    strata_err err;
    wal *w;
    uint64_t removed = 0, max_segments = 0;
    for (int cycle = 0; cycle < 12; cycle++) {
        if (wal_open(&o, &loop, &w, &err) != 0)
            fail_msg("open: %s", err.msg);
        for (uint64_t g = 1; g <= GROUPS; g++)
            check_group(w, g);
        for (int batch = 0; batch < 40; batch++) {
            int n = 1 + (int)rnd(12);
            for (int i = 0; i < n; i++)
                random_op(w);
            double deadline = tu_now() + 10;
            while (outstanding > 0 && tu_now() < deadline)
                uv_run(&loop, UV_RUN_ONCE);
            assert_int_equal(outstanding, 0);
            for (uint64_t g = 1; g <= GROUPS; g++)
                check_group(w, g);
        }
        wal_stats st;
        wal_get_stats(w, &st);
        removed += st.segments_removed;
        if (st.segments > max_segments)
            max_segments = st.segments;
        assert_true(tu_close(w, &loop));
    }
    print_message("model: %llu segments removed, at most %llu live\n", (unsigned long long)removed,
                  (unsigned long long)max_segments);
    assert_true(removed > 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    tu_rmdir(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_history_matches_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
