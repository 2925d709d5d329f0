/* Unit tests for storage/lsm: batches, memtable reads, iterators, snapshots, flush,
 * recovery, durable indexes, range deletes, compaction, back-pressure, and a randomized
 * comparison against a simple model. */
#include "tests/unit/lsm/helpers.h"

#include <inttypes.h>

#include "storage/lsm/lsm_int.h"

static void batch_validates_inputs(void **state)
{
    (void)state;
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    static char big[LSM_MAX_KEY + 1];
    assert_int_equal(lsm_batch_put(b, big, sizeof big, "v", 1, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(lsm_batch_delete(b, big, sizeof big, &err), -1);
    assert_int_equal(lsm_batch_delete_range(b, "b", 1, "a", 1, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(lsm_batch_delete_range(b, "a", 1, "a", 1, &err), -1);
    assert_int_equal(lsm_batch_count(b), 0);
    assert_int_equal(lsm_batch_put(b, "k", 1, "v", 1, &err), 0);
    assert_int_equal(lsm_batch_delete(b, "k", 1, &err), 0);
    assert_int_equal(lsm_batch_count(b), 2);
    assert_true(lsm_batch_bytes(b) > 0);
    lsm_batch_clear(b);
    assert_int_equal(lsm_batch_count(b), 0);
    lsm_batch_free(b);
}

static void open_rejects_bad_options(void **state)
{
    fixture *f = *state;
    lsm *db;
    strata_err err = {0};
    lsm_options o = {0};
    assert_int_equal(lsm_open(&o, &f->loop, &db, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    o.dir = f->dir;
    o.max_memtables = 1;
    assert_int_equal(lsm_open(&o, &f->loop, &db, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    o.max_memtables = 17;
    assert_int_equal(lsm_open(&o, &f->loop, &db, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    o.max_memtables = 0;
    o.dir = "/proc/definitely/not/here";
    assert_int_equal(lsm_open(&o, &f->loop, &db, &err), -1);
    assert_int_equal(err.code, ERR_IO);
}

static void put_get_delete_in_memtable(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    char v[64];
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 0);
    put1(db, "a", "1", 0, 0);
    put1(db, "b", "2", 0, 0);
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1);
    assert_string_equal(v, "1");
    put1(db, "a", "3", 0, 0);
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1);
    assert_string_equal(v, "3");
    del1(db, "a");
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "b", v, sizeof v), 1);
    /* An empty key and an empty value are legal. */
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    assert_int_equal(lsm_batch_put(b, "", 0, "", 0, &err), 0);
    assert_int_equal(lsm_write(db, b, 0, 0, &err), 0);
    lsm_batch_free(b);
    buf out;
    buf_init(&out, 0);
    assert_int_equal(lsm_get(db, NULL, "", 0, &out, &err), 1);
    assert_int_equal(out.len, 0);
    buf_free(&out);
    close_db(&f->loop, db);
}

static void snapshot_sees_the_past(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "k", "old", 0, 0);
    const lsm_snapshot *s = lsm_snapshot_new(db);
    put1(db, "k", "new", 0, 0);
    put1(db, "j", "later", 0, 0);
    del1(db, "k");
    char v[64];
    assert_int_equal(get1(db, s, "k", v, sizeof v), 1);
    assert_string_equal(v, "old");
    assert_int_equal(get1(db, s, "j", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "k", v, sizeof v), 0);
    /* Still true after flush and compaction: the snapshot keeps the old version alive. */
    flush_db(&f->loop, db);
    compact_db(&f->loop, db);
    assert_int_equal(get1(db, s, "k", v, sizeof v), 1);
    assert_string_equal(v, "old");
    assert_int_equal(get1(db, NULL, "k", v, sizeof v), 0);
    lsm_snapshot_release(db, s);
    compact_db(&f->loop, db);
    assert_int_equal(get1(db, NULL, "k", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "j", v, sizeof v), 1);
    close_db(&f->loop, db);
}

/* Collects the iterator's keys into a string "a,b,c" (forward or reverse). */
static void collect(lsm_iter *it, bool reverse, char *out, size_t n)
{
    out[0] = 0;
    if (reverse)
        lsm_iter_last(it);
    else
        lsm_iter_first(it);
    while (lsm_iter_valid(it)) {
        size_t kl;
        const char *k = lsm_iter_key(it, &kl);
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%.*s", len ? "," : "", (int)kl, k);
        if (reverse)
            lsm_iter_prev(it);
        else
            lsm_iter_next(it);
    }
    assert_int_equal(lsm_iter_status(it, NULL), 0);
}

static void iterate_checks(lsm *db)
{
    char got[256];
    strata_err err = {0};
    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    assert_non_null(it);
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "a,c,d,f");
    collect(it, true, got, sizeof got);
    assert_string_equal(got, "f,d,c,a");
    /* seek, direction changes */
    lsm_iter_seek(it, "b", 1);
    size_t kl;
    assert_true(lsm_iter_valid(it));
    assert_memory_equal(lsm_iter_key(it, &kl), "c", 1);
    lsm_iter_next(it);
    assert_memory_equal(lsm_iter_key(it, &kl), "d", 1);
    lsm_iter_prev(it);
    assert_memory_equal(lsm_iter_key(it, &kl), "c", 1);
    lsm_iter_prev(it);
    assert_memory_equal(lsm_iter_key(it, &kl), "a", 1);
    size_t vl;
    assert_memory_equal(lsm_iter_value(it, &vl), "A2", 2);
    lsm_iter_next(it);
    assert_memory_equal(lsm_iter_key(it, &kl), "c", 1);
    lsm_iter_seek_for_prev(it, "e", 1);
    assert_memory_equal(lsm_iter_key(it, &kl), "d", 1);
    lsm_iter_seek_for_prev(it, "d", 1);
    assert_memory_equal(lsm_iter_key(it, &kl), "d", 1);
    lsm_iter_seek_for_prev(it, "0", 1);
    assert_false(lsm_iter_valid(it));
    lsm_iter_seek(it, "g", 1);
    assert_false(lsm_iter_valid(it));
    lsm_iter_free(it);

    lsm_iter_options o = {.lower = "b", .lower_len = 1, .upper = "f", .upper_len = 1};
    it = lsm_iter_new(db, &o, &err);
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "c,d");
    collect(it, true, got, sizeof got);
    assert_string_equal(got, "d,c");
    lsm_iter_seek(it, "a", 1);
    assert_memory_equal(lsm_iter_key(it, &kl), "c", 1);
    lsm_iter_seek_for_prev(it, "z", 1);
    assert_memory_equal(lsm_iter_key(it, &kl), "d", 1);
    lsm_iter_free(it);
}

static void write_iter_data(lsm *db)
{
    put1(db, "a", "A1", 0, 0);
    put1(db, "b", "B", 0, 0);
    put1(db, "c", "C", 0, 0);
    put1(db, "a", "A2", 0, 0);
    put1(db, "d", "D", 0, 0);
    del1(db, "b");
    put1(db, "e", "E", 0, 0);
    put1(db, "f", "F", 0, 0);
    del1(db, "e");
}

static void iterators_over_memtable(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    write_iter_data(db);
    iterate_checks(db);
    close_db(&f->loop, db);
}

static void iterators_over_files_and_memtable(void **state)
{
    fixture *f = *state;
    f->o.no_compaction = true;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "A1", 0, 0);
    put1(db, "b", "B", 0, 0);
    flush_db(&f->loop, db);
    put1(db, "c", "C", 0, 0);
    put1(db, "a", "A2", 0, 0);
    flush_db(&f->loop, db);
    put1(db, "d", "D", 0, 0);
    del1(db, "b");
    put1(db, "e", "E", 0, 0);
    flush_db(&f->loop, db);
    put1(db, "f", "F", 0, 0);
    del1(db, "e");
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.files[0], 3);
    iterate_checks(db);
    compact_db(&f->loop, db);
    lsm_get_stats(db, &st);
    assert_int_equal(st.files[0], 0);
    assert_true(st.files[1] >= 1);
    iterate_checks(db);
    close_db(&f->loop, db);
}

static void iterator_is_a_point_in_time(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 0, 0);
    put1(db, "b", "2", 0, 0);
    strata_err err = {0};
    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    put1(db, "c", "3", 0, 0);
    del1(db, "a");
    delrange1(db, "a", "z");
    flush_db(&f->loop, db);
    compact_db(&f->loop, db);
    char got[64];
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "a,b");
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.iterators, 1);
    lsm_iter_free(it);
    it = lsm_iter_new(db, NULL, &err);
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "");
    lsm_iter_free(it);
    close_db(&f->loop, db);
}

static void flush_and_reopen_keeps_data_and_indexes(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 7, 10);
    put1(db, "b", "2", 7, 11);
    put1(db, "c", "3", 8, 5);
    assert_int_equal(lsm_durable_index(db, 7), 0);
    assert_int_equal(lsm_applied_index(db, 7), 11);
    flush_db(&f->loop, db);
    assert_int_equal(lsm_durable_index(db, 7), 11);
    assert_int_equal(lsm_durable_index(db, 8), 5);
    put1(db, "d", "4", 7, 12); /* lost: never flushed */
    close_db(&f->loop, db);

    db = open_db(&f->loop, &f->o);
    char v[64];
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1);
    assert_string_equal(v, "1");
    assert_int_equal(get1(db, NULL, "c", v, sizeof v), 1);
    assert_int_equal(get1(db, NULL, "d", v, sizeof v), 0);
    assert_int_equal(lsm_durable_index(db, 7), 11);
    assert_int_equal(lsm_applied_index(db, 7), 11);
    assert_int_equal(lsm_durable_index(db, 9), 0);
    /* New writes after reopen win over the recovered ones. */
    put1(db, "a", "new", 7, 12);
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1);
    assert_string_equal(v, "new");
    flush_db(&f->loop, db);
    close_db(&f->loop, db);
    db = open_db(&f->loop, &f->o);
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1);
    assert_string_equal(v, "new");
    assert_int_equal(lsm_durable_index(db, 7), 12);
    close_db(&f->loop, db);
}

static void foreach_cb(void *arg, uint64_t range, uint64_t index)
{
    uint64_t *sum = arg;
    sum[0] += range;
    sum[1] += index;
}

static void durable_foreach_lists_ranges(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 1, 100);
    put1(db, "b", "1", 2, 200);
    put1(db, "c", "1", 0, 3); /* range 0 is a range like any other */
    flush_db(&f->loop, db);
    uint64_t sum[2] = {0};
    lsm_durable_foreach(db, foreach_cb, sum);
    assert_int_equal(sum[0], 3);
    assert_int_equal(sum[1], 303);
    /* Flushing nothing completes at once. */
    flush_db(&f->loop, db);
    close_db(&f->loop, db);
}

/* A forgotten range index goes with the batch written beside it: in memory at once,
 * durable with the flush of that memtable, never before (a reopen before the flush finds
 * the old index and the old data together). */
static void forget_drops_a_range_index_with_its_batch(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 5, 10);
    put1(db, "b", "1", 6, 20);
    flush_db(&f->loop, db);
    put1(db, "a", "2", 5, 11); /* in the memtable: forgotten too */
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    assert_int_equal(lsm_batch_delete(b, "a", 1, &err), 0);
    assert_int_equal(lsm_write_forget(db, b, 5, &err), 0);
    lsm_batch_free(b);
    assert_int_equal(lsm_applied_index(db, 5), 0);
    assert_int_equal(lsm_durable_index(db, 5), 10); /* not flushed yet */
    assert_int_equal(lsm_applied_index(db, 6), 20);
    close_db(&f->loop, db); /* drops the memtable: as a crash */
    db = open_db(&f->loop, &f->o);
    assert_int_equal(lsm_durable_index(db, 5), 10);
    char v[8];
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1);
    b = lsm_batch_new();
    assert_int_equal(lsm_batch_delete(b, "a", 1, &err), 0);
    assert_int_equal(lsm_write_forget(db, b, 5, &err), 0);
    lsm_batch_free(b);
    put1(db, "c", "1", 5, 3); /* a new replica of range 5 starts over */
    flush_db(&f->loop, db);
    assert_int_equal(lsm_durable_index(db, 5), 3);
    assert_int_equal(lsm_durable_index(db, 6), 20);
    close_db(&f->loop, db);
    db = open_db(&f->loop, &f->o);
    assert_int_equal(lsm_durable_index(db, 5), 3);
    assert_int_equal(lsm_durable_index(db, 6), 20);
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 0);
    close_db(&f->loop, db);
}

/* u64map deletion (backward shift) against a model, with long probe chains. */
static void u64map_delete_keeps_every_other_key(void **state)
{
    (void)state;
    enum { N = 2000 };
    static uint64_t model[N + 1];
    memset(model, 0, sizeof model);
    u64map *m = u64map_new();
    uint32_t x = 7;
    for (int round = 0; round < 20000; round++) {
        x = x * 1103515245u + 12345u;
        uint64_t k = (x >> 8) % (N + 1); /* key 0 included */
        if ((x & 3) == 0) {
            u64map_del(m, k);
            model[k] = 0;
        } else {
            uint64_t v = (x >> 4) % 1000 + 1;
            assert_true(u64map_max(m, k, v));
            if (model[k] < v)
                model[k] = v;
        }
        if (round % 1000 == 0) {
            size_t count = 0;
            for (uint64_t i = 0; i <= N; i++) {
                assert_int_equal(u64map_get(m, i), model[i]);
                count += model[i] != 0;
            }
            assert_int_equal(u64map_count(m), count);
        }
    }
    u64map_free(m);
}

static void range_delete_hides_and_compaction_drops(void **state)
{
    fixture *f = *state;
    f->o.no_compaction = true;
    lsm *db = open_db(&f->loop, &f->o);
    char k[32], v[64];
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof k, "t1/%04d", i);
        put1(db, k, "x", 0, 0);
    }
    put1(db, "t0/a", "keep", 0, 0);
    put1(db, "t2/a", "keep", 0, 0);
    flush_db(&f->loop, db);
    compact_db(&f->loop, db); /* into level 1 */
    delrange1(db, "t1/", "t1~");
    assert_int_equal(get1(db, NULL, "t1/0005", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "t0/a", v, sizeof v), 1);
    put1(db, "t1/0007", "again", 0, 0); /* newer than the tombstone: visible */
    assert_int_equal(get1(db, NULL, "t1/0007", v, sizeof v), 1);
    char got[256];
    strata_err err = {0};
    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "t0/a,t1/0007,t2/a");
    collect(it, true, got, sizeof got);
    assert_string_equal(got, "t2/a,t1/0007,t0/a");
    lsm_iter_free(it);
    flush_db(&f->loop, db);
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.range_tombstones, 1);
    assert_int_equal(get1(db, NULL, "t1/0005", v, sizeof v), 0);
    compact_db(&f->loop, db);
    lsm_get_stats(db, &st);
    assert_int_equal(st.range_tombstones, 0); /* its data is gone, so is it */
    assert_int_equal(get1(db, NULL, "t1/0005", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "t1/0007", v, sizeof v), 1);
    it = lsm_iter_new(db, NULL, &err);
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "t0/a,t1/0007,t2/a");
    lsm_iter_free(it);
    close_db(&f->loop, db);
    db = open_db(&f->loop, &f->o);
    assert_int_equal(get1(db, NULL, "t1/0005", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "t2/a", v, sizeof v), 1);
    close_db(&f->loop, db);
}

static void range_delete_drops_whole_files(void **state)
{
    fixture *f = *state;
    f->o.no_compaction = true;
    lsm *db = open_db(&f->loop, &f->o);
    char k[32], v[64];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof k, "t5/%04d", i);
        put1(db, k, "x", 0, 0);
    }
    flush_db(&f->loop, db);
    put1(db, "t6/a", "keep", 0, 0);
    flush_db(&f->loop, db);
    delrange1(db, "t5/", "t5~");
    flush_db(&f->loop, db);
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.files[0], 2); /* the tombstone-only flush writes no file */
    assert_int_equal(st.range_tombstones, 1);
    const lsm_snapshot *s = lsm_snapshot_new(db);
    compact_db(&f->loop, db);
    lsm_get_stats(db, &st);
    assert_int_equal(st.files_dropped_whole, 1);
    assert_int_equal(st.range_tombstones, 0);
    assert_int_equal(get1(db, NULL, "t5/0001", v, sizeof v), 0);
    assert_int_equal(get1(db, s, "t5/0001", v, sizeof v), 0);
    assert_int_equal(get1(db, NULL, "t6/a", v, sizeof v), 1);
    lsm_snapshot_release(db, s);
    close_db(&f->loop, db);
}

static void snapshot_blocks_range_drop(void **state)
{
    fixture *f = *state;
    f->o.no_compaction = true;
    lsm *db = open_db(&f->loop, &f->o);
    char v[64];
    put1(db, "r/1", "x", 0, 0);
    flush_db(&f->loop, db);
    const lsm_snapshot *s = lsm_snapshot_new(db);
    delrange1(db, "r/", "r~");
    flush_db(&f->loop, db);
    compact_db(&f->loop, db);
    assert_int_equal(get1(db, s, "r/1", v, sizeof v), 1);
    assert_int_equal(get1(db, NULL, "r/1", v, sizeof v), 0);
    lsm_snapshot_release(db, s);
    compact_db(&f->loop, db);
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.range_tombstones, 0);
    assert_int_equal(get1(db, NULL, "r/1", v, sizeof v), 0);
    close_db(&f->loop, db);
}

static void writable_cb(void *arg, const strata_err *err)
{
    int *n = arg;
    assert_int_equal(err->code, ERR_NONE);
    (*n)++;
}

static void backpressure_and_memory_bound(void **state)
{
    fixture *f = *state;
    f->o.memtable_bytes = 1 << 20;
    f->o.max_memtables = 2;
    lsm *db = open_db(&f->loop, &f->o);
    char k[32], val[200];
    memset(val, 'v', sizeof val - 1);
    val[sizeof val - 1] = 0;
    int busy = 0, written = 0;
    for (int i = 0; i < 40000; i++) {
        snprintf(k, sizeof k, "key%08d", (i * 7919) % 40000);
        lsm_batch *b = lsm_batch_new();
        strata_err err = {0};
        lsm_batch_put(b, k, strlen(k), val, strlen(val), &err);
        int rc = lsm_write(db, b, 1, (uint64_t)i + 1, &err);
        lsm_batch_free(b);
        if (rc < 0) {
            assert_int_equal(err.code, ERR_BUSY);
            busy++;
            int woke = 0;
            lsm_on_writable(db, writable_cb, &woke);
            double deadline = now_s() + 30;
            while (!woke) {
                assert_true(now_s() < deadline);
                uv_run(&f->loop, UV_RUN_ONCE);
            }
            i--;
            continue;
        }
        written++;
        lsm_stats st;
        lsm_get_stats(db, &st);
        /* Bound: max_memtables full memtables plus one entry's overshoot. */
        assert_true(st.memtable_bytes <= 2 * (f->o.memtable_bytes + (1 << 20)));
    }
    assert_true(busy > 0);
    assert_int_equal(written, 40000);
    flush_db(&f->loop, db);
    compact_db(&f->loop, db);
    char v[256];
    assert_int_equal(get1(db, NULL, "key00012345", v, sizeof v), 1);
    assert_string_equal(v, val);
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_true(st.write_stalls > 0);
    assert_true(st.block_cache_bytes <= 64u << 20);
    close_db(&f->loop, db);
}

static void block_cache_is_bounded(void **state)
{
    fixture *f = *state;
    f->o.block_cache_bytes = 64 * 1024;
    f->o.no_compression = true;
    lsm *db = open_db(&f->loop, &f->o);
    char k[32], v[128];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "k%06d", i);
        snprintf(v, sizeof v, "value-%06d-padding-padding-padding-padding", i);
        put1(db, k, v, 0, 0);
    }
    flush_db(&f->loop, db);
    for (int i = 0; i < 5000; i += 3) {
        snprintf(k, sizeof k, "k%06d", i);
        assert_int_equal(get1(db, NULL, k, v, sizeof v), 1);
        lsm_stats st;
        lsm_get_stats(db, &st);
        assert_true(st.block_cache_bytes <= 64 * 1024);
    }
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_true(st.cache_misses > 0);
    assert_true(st.cache_hits > 0);
    close_db(&f->loop, db);
}

/* ---- Randomized model check ---- */
#define NKEYS 600

typedef struct {
    char val[NKEYS][24];
    bool live[NKEYS];
} model;

static uint32_t rnd_state = 12345;
static uint32_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 17;
    rnd_state ^= rnd_state << 5;
    return rnd_state;
}

static void model_check(lsm *db, const lsm_snapshot *s, const model *m)
{
    char k[16], v[64];
    for (int i = 0; i < NKEYS; i++) {
        snprintf(k, sizeof k, "k%04d", i);
        int rc = get1(db, s, k, v, sizeof v);
        if (rc != (m->live[i] ? 1 : 0))
            fail_msg("key %s: got %d want %d", k, rc, m->live[i]);
        if (rc)
            assert_string_equal(v, m->val[i]);
    }
    strata_err err = {0};
    lsm_iter_options o = {.snapshot = s};
    lsm_iter *it = lsm_iter_new(db, &o, &err);
    int i = 0;
    for (lsm_iter_first(it); lsm_iter_valid(it); lsm_iter_next(it), i++) {
        while (i < NKEYS && !m->live[i])
            i++;
        assert_true(i < NKEYS);
        size_t kl;
        const char *key = lsm_iter_key(it, &kl);
        snprintf(k, sizeof k, "k%04d", i);
        assert_int_equal(kl, strlen(k));
        assert_memory_equal(key, k, kl);
    }
    while (i < NKEYS && !m->live[i])
        i++;
    assert_int_equal(i, NKEYS);
    i = NKEYS - 1;
    for (lsm_iter_last(it); lsm_iter_valid(it); lsm_iter_prev(it), i--) {
        while (i >= 0 && !m->live[i])
            i--;
        assert_true(i >= 0);
        size_t kl, vl;
        const char *key = lsm_iter_key(it, &kl);
        const char *val = lsm_iter_value(it, &vl);
        snprintf(k, sizeof k, "k%04d", i);
        assert_memory_equal(key, k, kl);
        assert_int_equal(vl, strlen(m->val[i]));
        assert_memory_equal(val, m->val[i], vl);
    }
    assert_int_equal(lsm_iter_status(it, NULL), 0);
    lsm_iter_free(it);
}

static void randomized_against_model(void **state)
{
    fixture *f = *state;
    f->o.memtable_bytes = 64 * 1024;
    f->o.table_file_bytes = 16 * 1024;
    f->o.level1_bytes = 64 * 1024;
    f->o.block_bytes = 512;
    /* LSM_TEST_SEED picks another sequence for ad-hoc stress runs. */
    if (getenv("LSM_TEST_SEED"))
        rnd_state = (uint32_t)strtoul(getenv("LSM_TEST_SEED"), NULL, 10) | 1;
    lsm *db = open_db(&f->loop, &f->o);
    static model m, snapm;
    memset(&m, 0, sizeof m);
    const lsm_snapshot *snap = NULL;
    for (int round = 0; round < 40; round++) {
        for (int op = 0; op < 300; op++) {
            int i = (int)(rnd() % NKEYS);
            char k[16], k2[16];
            snprintf(k, sizeof k, "k%04d", i);
            /* Reads between writes, as PutItem's apply does (it reads its key first): of
             * the key about to be written, of another key, or none. */
            char got[64], other[16];
            uint32_t g = rnd() % 10;
            if (g < 5) {
                assert_int_equal(get1(db, NULL, k, got, sizeof got), m.live[i] ? 1 : 0);
            } else if (g < 7) {
                int o = (int)(rnd() % NKEYS);
                snprintf(other, sizeof other, "k%04d", o);
                assert_int_equal(get1(db, NULL, other, got, sizeof got), m.live[o] ? 1 : 0);
            }
            uint32_t r = rnd() % 100;
            lsm_batch *b = lsm_batch_new();
            strata_err err = {0};
            if (r < 70) {
                snprintf(m.val[i], sizeof m.val[i], "v%d.%d", round, op);
                m.live[i] = true;
                lsm_batch_put(b, k, strlen(k), m.val[i], strlen(m.val[i]), &err);
            } else if (r < 95) {
                m.live[i] = false;
                lsm_batch_delete(b, k, strlen(k), &err);
            } else {
                int j = i + 1 + (int)(rnd() % 40);
                if (j > NKEYS)
                    j = NKEYS;
                snprintf(k2, sizeof k2, "k%04d", j);
                for (int x = i; x < j; x++)
                    m.live[x] = false;
                lsm_batch_delete_range(b, k, strlen(k), k2, strlen(k2), &err);
            }
            int rc;
            while ((rc = lsm_write(db, b, 1, 1, &err)) < 0) {
                assert_int_equal(err.code, ERR_BUSY);
                int woke = 0;
                lsm_on_writable(db, writable_cb, &woke);
                while (!woke)
                    uv_run(&f->loop, UV_RUN_ONCE);
            }
            lsm_batch_free(b);
        }
        /* Let background work make progress in between. */
        uv_run(&f->loop, UV_RUN_NOWAIT);
        if (round % 7 == 3)
            flush_db(&f->loop, db);
        if (round % 11 == 5)
            compact_db(&f->loop, db);
        if (round % 10 == 2) {
            if (snap) {
                model_check(db, snap, &snapm);
                lsm_snapshot_release(db, snap);
            }
            snap = lsm_snapshot_new(db);
            snapm = m;
        }
        model_check(db, NULL, &m);
    }
    if (snap) {
        model_check(db, snap, &snapm);
        lsm_snapshot_release(db, snap);
    }
    flush_db(&f->loop, db);
    close_db(&f->loop, db);
    db = open_db(&f->loop, &f->o);
    model_check(db, NULL, &m);
    compact_db(&f->loop, db);
    model_check(db, NULL, &m);
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_true(st.compactions > 0);
    close_db(&f->loop, db);
}

static int count_tables(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".sst") != NULL;
    closedir(d);
    return n;
}

/* Open deletes orphan tables ("<n>.sst" not in the MANIFEST) and nothing else. */
static void open_removes_only_orphan_tables(void **state)
{
    fixture *f = *state;
    static const char *const keep[] = {"12.sstable", "12.sst.bak", "x12.sst", "notes"};
    char path[4200];
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", f->dir, keep[i]);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fclose(fp);
    }
    snprintf(path, sizeof path, "%s/77.sst", f->dir);
    FILE *orphan = fopen(path, "w");
    assert_non_null(orphan);
    fclose(orphan);
    lsm *db = open_db(&f->loop, &f->o);
    assert_int_equal(access(path, F_OK), -1);
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", f->dir, keep[i]);
        assert_int_equal(access(path, F_OK), 0);
    }
    close_db(&f->loop, db);
}

static void obsolete_files_outlive_their_readers(void **state)
{
    fixture *f = *state;
    f->o.no_compaction = true;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 0, 0);
    flush_db(&f->loop, db);
    put1(db, "b", "2", 0, 0);
    flush_db(&f->loop, db);
    assert_int_equal(count_tables(f->dir), 2);
    strata_err err = {0};
    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    compact_db(&f->loop, db);
    /* The compaction output plus the two inputs the iterator still reads. */
    assert_int_equal(count_tables(f->dir), 3);
    char got[64];
    collect(it, false, got, sizeof got);
    assert_string_equal(got, "a,b");
    lsm_iter_free(it);
    assert_int_equal(count_tables(f->dir), 1);
    close_db(&f->loop, db);
}

static void background_error_is_sticky(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 3, 9);
    /* Pull the directory away: the flush cannot create its table file. */
    char moved[128];
    snprintf(moved, sizeof moved, "%s.moved", f->dir);
    assert_int_equal(rename(f->dir, moved), 0);
    strata_err why;
    assert_false(lsm_failed(db, &why));
    waitcb w = {0};
    lsm_flush(db, waitcb_fn, &w);
    run_until(&f->loop, &w.done);
    assert_int_equal(w.err.code, ERR_IO);
    /* The node asks (and stops): the error, with its file. */
    assert_true(lsm_failed(db, &why));
    assert_int_equal(why.code, ERR_IO);
    assert_string_equal(why.msg, w.err.msg);
    assert_true(lsm_failed(db, NULL));
    assert_int_equal(lsm_durable_index(db, 3), 0);
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    lsm_batch_put(b, "b", 1, "2", 1, &err);
    assert_int_equal(lsm_write(db, b, 0, 0, &err), -1);
    assert_int_equal(err.code, ERR_IO);
    lsm_batch_free(b);
    char v[16];
    assert_int_equal(get1(db, NULL, "a", v, sizeof v), 1); /* reads still work */
    waitcb w2 = {0};
    lsm_flush(db, waitcb_fn, &w2);
    assert_true(w2.done);
    assert_int_equal(w2.err.code, ERR_IO);
    close_db(&f->loop, db);
    assert_int_equal(rename(moved, f->dir), 0);
}

static void close_waits_for_running_job(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    char k[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(k, sizeof k, "k%05d", i);
        put1(db, k, "value", 1, (uint64_t)i + 1);
    }
    waitcb fw = {0}, cw = {0};
    lsm_flush(db, waitcb_fn, &fw); /* a flush job is now running */
    lsm_close(db, waitcb_fn, &cw);
    assert_false(cw.done);
    run_until(&f->loop, &cw.done);
    assert_true(fw.done); /* the flush finished first (or was told the engine closed) */
    db = open_db(&f->loop, &f->o);
    assert_true(lsm_durable_index(db, 1) == 2000 || lsm_durable_index(db, 1) == 0);
    close_db(&f->loop, db);
}

/* A flush asked for while another runs must not take the last memtable slot: writes
 * would stall until the running flush ends. The memtable stays mutable, and is sealed and
 * flushed once a slot frees up, with everything written before the second call. */
static void flush_during_a_flush_leaves_room_for_writes(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->o.max_memtables, 0); /* the default: two memtables */
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 1, 1);
    waitcb first = {0}, second = {0};
    lsm_flush(db, waitcb_fn, &first); /* its job cannot end before the loop runs */
    put1(db, "b", "2", 1, 2);
    lsm_flush(db, waitcb_fn, &second);
    assert_false(first.done);
    assert_false(second.done);
    put1(db, "c", "3", 1, 3); /* fails (ERR_BUSY) if the second flush sealed "b" */
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.write_stalls, 0);
    run_until(&f->loop, &second.done);
    assert_true(first.done);
    assert_int_equal(first.err.code, ERR_NONE);
    assert_int_equal(second.err.code, ERR_NONE);
    assert_int_equal(lsm_durable_index(db, 1), 3); /* "c" came before the deferred seal */
    close_db(&f->loop, db);
    db = open_db(&f->loop, &f->o);
    char v[8];
    assert_int_equal(get1(db, NULL, "b", v, sizeof v), 1);
    assert_string_equal(v, "2");
    close_db(&f->loop, db);
}

/* A flush waiting for its memtable's seal is told when the engine closes first. */
static void close_answers_a_flush_waiting_to_seal(void **state)
{
    fixture *f = *state;
    lsm *db = open_db(&f->loop, &f->o);
    put1(db, "a", "1", 1, 1);
    waitcb first = {0}, second = {0}, closed = {0};
    lsm_flush(db, waitcb_fn, &first);
    put1(db, "b", "2", 1, 2);
    lsm_flush(db, waitcb_fn, &second);
    lsm_close(db, waitcb_fn, &closed);
    run_until(&f->loop, &closed.done);
    assert_true(first.done);
    assert_true(second.done);
    assert_int_equal(second.err.code, ERR_UNAVAILABLE);
}

/* Writes `n` distinct 100-byte values under range 1, log indexes 1..n. */
static void put_many(lsm *db, int n)
{
    char k[32], val[101];
    memset(val, 'v', sizeof val - 1);
    val[sizeof val - 1] = 0;
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "key%08d", (i * 7919) % n);
        put1(db, k, val, 1, (uint64_t)i + 1);
    }
}

/* A memtable that filled up is flushed by a job nothing waits for: it is paced (sleeps
 * between slices of work) and still completes. */
static void a_flush_nothing_waits_for_is_paced(void **state)
{
    fixture *f = *state;
    f->o.memtable_bytes = 8 << 20;
    f->o.background_cpu_pct = 10;
    lsm *db = open_db(&f->loop, &f->o);
    lsm_stats st;
    for (lsm_get_stats(db, &st); st.memtables < 2; lsm_get_stats(db, &st))
        put_many(db, 1000); /* the same keys again: memtables grow until one is sealed */
    double deadline = now_s() + 30;
    while (st.flushes == 0) {
        assert_true(now_s() < deadline);
        uv_run(&f->loop, UV_RUN_ONCE);
        lsm_get_stats(db, &st);
    }
    assert_true(st.paced_ms > 0);
    assert_int_equal(lsm_durable_index(db, 1), 1000);
    close_db(&f->loop, db);
}

/* A flush someone waits for (lsm_flush) runs at full speed from its start. */
static void a_flush_someone_waits_for_is_not_paced(void **state)
{
    fixture *f = *state;
    f->o.memtable_bytes = 8 << 20;
    f->o.background_cpu_pct = 1;
    lsm *db = open_db(&f->loop, &f->o);
    for (int i = 0; i < 40; i++)
        put_many(db, 1000);
    flush_db(&f->loop, db);
    lsm_stats st;
    lsm_get_stats(db, &st);
    assert_int_equal(st.flushes, 1);
    assert_int_equal(st.paced_ms, 0);
    close_db(&f->loop, db);
}

static void bad_background_share_is_refused(void **state)
{
    fixture *f = *state;
    lsm *db = NULL;
    strata_err err = {0};
    f->o.background_cpu_pct = 101;
    assert_int_equal(lsm_open(&f->o, &f->loop, &db, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    f->o.background_cpu_pct = -1;
    assert_int_equal(lsm_open(&f->o, &f->loop, &db, &err), -1);
    assert_null(db);
}

static void level0_file_count_stops_writes(void **state)
{
    fixture *f = *state;
    f->o.no_compaction = true;
    f->o.l0_compaction_files = 2;
    f->o.l0_stop_files = 3;
    lsm *db = open_db(&f->loop, &f->o);
    char k[16];
    for (int i = 0; i < 3; i++) {
        snprintf(k, sizeof k, "k%d", i);
        put1(db, k, "v", 0, 0);
        flush_db(&f->loop, db);
    }
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    lsm_batch_put(b, "x", 1, "y", 1, &err);
    assert_int_equal(lsm_write(db, b, 0, 0, &err), -1);
    assert_int_equal(err.code, ERR_BUSY);
    int woke = 0;
    lsm_on_writable(db, writable_cb, &woke);
    assert_int_equal(woke, 0);
    compact_db(&f->loop, db);
    assert_int_equal(woke, 1);
    assert_int_equal(lsm_write(db, b, 0, 0, &err), 0);
    lsm_batch_free(b);
    char v[8];
    assert_int_equal(get1(db, NULL, "k1", v, sizeof v), 1);
    close_db(&f->loop, db);
}

static void big_keys_and_values_survive_flush_and_reopen(void **state)
{
    fixture *f = *state;
    f->o.memtable_bytes = 256 * 1024;
    lsm *db = open_db(&f->loop, &f->o);
    size_t vn = 3u << 20;
    char *val = malloc(vn);
    for (size_t i = 0; i < vn; i++)
        val[i] = (char)('a' + (i * 7919 % 26));
    static char key[LSM_MAX_KEY];
    memset(key, 'k', sizeof key);
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    assert_int_equal(lsm_batch_put(b, key, sizeof key, val, vn, &err), 0);
    assert_int_equal(lsm_batch_put(b, "small", 5, "s", 1, &err), 0);
    assert_int_equal(lsm_write(db, b, 1, 1, &err), 0);
    lsm_batch_free(b);
    buf out;
    buf_init(&out, 0);
    assert_int_equal(lsm_get(db, NULL, key, sizeof key, &out, &err), 1);
    assert_int_equal(out.len, vn);
    flush_db(&f->loop, db);
    close_db(&f->loop, db);
    db = open_db(&f->loop, &f->o);
    buf_reset(&out);
    assert_int_equal(lsm_get(db, NULL, key, sizeof key, &out, &err), 1);
    assert_int_equal(out.len, vn);
    assert_memory_equal(out.data, val, vn);
    assert_int_equal(lsm_get(db, NULL, key, sizeof key - 1, &out, &err), 0);
    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    lsm_iter_last(it);
    size_t kl;
    assert_memory_equal(lsm_iter_key(it, &kl), "small", 5);
    lsm_iter_prev(it);
    lsm_iter_key(it, &kl);
    assert_int_equal(kl, sizeof key);
    lsm_iter_free(it);
    buf_free(&out);
    free(val);
    close_db(&f->loop, db);
}

/* A new version of a key the memtable's index holds is linked in without a search, from
 * its neighbours (level 0 is doubly linked): every level must stay in order all the same.
 * Many versions of few keys, some older than the key's newest (those are searched for),
 * new keys among them; then the whole order forwards and backwards, and seeks, which use
 * the upper levels, against a sorted model. */
#define VER_KEYS  600
#define VER_ADDS  30000
#define VER_SEEKS 4000
typedef struct {
    uint8_t ik[40]; /* internal key */
    size_t n;
} ver_entry;

static int ver_cmp(const void *a, const void *b)
{
    const ver_entry *x = a, *y = b;
    return ikey_cmp(x->ik, x->n, y->ik, y->n);
}

static ver_entry ver_make(int k, uint64_t seq, int type)
{
    ver_entry e;
    int n = snprintf((char *)e.ik, sizeof e.ik, "k%0*d", 1 + k % 7, k); /* lengths vary */
    trailer_put(e.ik + n, trailer_pack(seq, type));
    e.n = (size_t)n + TRAILER_SIZE;
    return e;
}

static void memtable_versions_keep_every_level_in_order(void **state)
{
    (void)state;
    memtable *m = mem_new(1 << 20);
    assert_non_null(m);
    static ver_entry sorted[VER_ADDS];
    static uint64_t newest[VER_KEYS];
    uint64_t seq = 1000000;
    srand(7);
    for (int i = 0; i < VER_ADDS; i++) {
        /* mostly a few hot keys, as a PutItem load; now and then any key */
        int k = rand() % 4 ? rand() % 20 : rand() % VER_KEYS;
        /* one in ten: older than the key's newest version, below every sequence yet used */
        uint64_t s = newest[k] != 0 && rand() % 10 == 0 ? (uint64_t)(VER_ADDS - i) : ++seq;
        int type = rand() % 8 == 0 ? TYPE_DEL : TYPE_PUT;
        sorted[i] = ver_make(k, s, type);
        if (s > newest[k])
            newest[k] = s;
        size_t un = sorted[i].n - TRAILER_SIZE;
        assert_true(mem_add(m, s, type, sorted[i].ik, un, &i, type == TYPE_PUT ? sizeof i : 0));
    }
    qsort(sorted, VER_ADDS, sizeof *sorted, ver_cmp);
    iter *it = mem_iter_new(m);
    assert_non_null(it);
    size_t n;
    it->first(it);
    for (int i = 0; i < VER_ADDS; i++, it->next(it)) {
        assert_true(it->valid(it));
        const uint8_t *k = it->key(it, &n);
        assert_int_equal(ikey_cmp(k, n, sorted[i].ik, sorted[i].n), 0);
    }
    assert_false(it->valid(it));
    it->last(it);
    for (int i = VER_ADDS - 1; i >= 0; i--, it->prev(it)) {
        assert_true(it->valid(it));
        const uint8_t *k = it->key(it, &n);
        assert_int_equal(ikey_cmp(k, n, sorted[i].ik, sorted[i].n), 0);
    }
    assert_false(it->valid(it));
    for (int i = 0; i < VER_SEEKS; i++) {
        ver_entry probe =
            ver_make(rand() % (VER_KEYS + 10), (uint64_t)rand() % (seq + 10), TYPE_PUT);
        ver_entry *lo = sorted, *end = sorted + VER_ADDS;
        size_t len = VER_ADDS;
        while (len > 0) { /* the first model entry >= probe */
            size_t half = len / 2;
            if (ver_cmp(lo + half, &probe) < 0) {
                lo += half + 1;
                len -= half + 1;
            } else {
                len = half;
            }
        }
        it->seek(it, probe.ik, probe.n);
        assert_int_equal(it->valid(it), lo != end);
        if (lo != end) {
            const uint8_t *k = it->key(it, &n);
            assert_int_equal(ikey_cmp(k, n, lo->ik, lo->n), 0);
        }
    }
    it->destroy(it);
    mem_unref(m);
}

/* mem_get goes through the memtable's hash index when it has the key and may tell, and
 * searches the skiplist otherwise: past the index's bound (more keys than it takes), for
 * snapshots older than a key's newest entry, and for deletions. Every answer must be the
 * newest entry at or below the snapshot, as the skiplist alone gives. */
#define IDX_KEYS     40000 /* more than the index's 32 Ki keys */
#define IDX_VERSIONS 3
static void memtable_reads_agree_past_the_index_bound(void **state)
{
    (void)state;
    memtable *m = mem_new(1 << 20);
    assert_non_null(m);
    static uint64_t seqs[IDX_KEYS][IDX_VERSIONS];
    uint64_t seq = 0;
    char key[32], val[32];
    for (int v = 0; v < IDX_VERSIONS; v++) {
        for (int i = 0; i < IDX_KEYS; i++) {
            /* a different order each round, so keys first seen late come back early */
            int k = v % 2 ? IDX_KEYS - 1 - i : (i * 7919) % IDX_KEYS;
            int n = snprintf(key, sizeof key, "key%06d", k);
            int vn = snprintf(val, sizeof val, "v%" PRIu64, ++seq);
            int type = seq % 5 == 0 ? TYPE_DEL : TYPE_PUT;
            assert_true(
                mem_add(m, seq, type, key, (size_t)n, val, type == TYPE_PUT ? (size_t)vn : 0));
            seqs[k][v] = seq;
        }
    }
    for (int k = 0; k < IDX_KEYS; k++) {
        int n = snprintf(key, sizeof key, "key%06d", k);
        /* the newest entry, then each older one through a snapshot just below the next */
        for (int v = IDX_VERSIONS - 1; v >= 0; v--) {
            uint64_t snap = v == IDX_VERSIONS - 1 ? seq : seqs[k][v + 1] - 1;
            uint64_t got_seq;
            int got_type;
            const uint8_t *got_val;
            size_t got_len;
            assert_int_equal(
                mem_get(m, key, (size_t)n, snap, &got_seq, &got_type, &got_val, &got_len), 1);
            assert_int_equal(got_seq, seqs[k][v]);
            assert_int_equal(got_type, seqs[k][v] % 5 == 0 ? TYPE_DEL : TYPE_PUT);
            if (got_type == TYPE_PUT) {
                int vn = snprintf(val, sizeof val, "v%" PRIu64, seqs[k][v]);
                assert_int_equal(got_len, (size_t)vn);
                assert_memory_equal(got_val, val, (size_t)vn);
            }
        }
        uint64_t s2;
        int t2;
        const uint8_t *v2;
        size_t l2;
        /* before the key's first entry, and a key never written */
        assert_int_equal(mem_get(m, key, (size_t)n, seqs[k][0] - 1, &s2, &t2, &v2, &l2), 0);
        key[0] = 'j';
        assert_int_equal(mem_get(m, key, (size_t)n, seq, &s2, &t2, &v2, &l2), 0);
    }
    /* a memtable whose index holds every key answers for absent keys too */
    memtable *small = mem_new(4096);
    assert_non_null(small);
    uint64_t s2;
    int t2;
    const uint8_t *v2;
    size_t l2;
    assert_int_equal(mem_get(small, "a", 1, 10, &s2, &t2, &v2, &l2), 0);
    assert_true(mem_add(small, 5, TYPE_PUT, "a", 1, "x", 1));
    assert_int_equal(mem_get(small, "a", 1, 10, &s2, &t2, &v2, &l2), 1);
    assert_int_equal(mem_get(small, "a", 1, 4, &s2, &t2, &v2, &l2), 0);
    assert_int_equal(mem_get(small, "b", 1, 10, &s2, &t2, &v2, &l2), 0);
    mem_unref(small);
    mem_unref(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batch_validates_inputs),
        cmocka_unit_test_setup_teardown(open_rejects_bad_options, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(put_get_delete_in_memtable, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(snapshot_sees_the_past, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(iterators_over_memtable, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(iterators_over_files_and_memtable, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(iterator_is_a_point_in_time, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(flush_and_reopen_keeps_data_and_indexes, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(durable_foreach_lists_ranges, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(forget_drops_a_range_index_with_its_batch, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test(u64map_delete_keeps_every_other_key),
        cmocka_unit_test(memtable_reads_agree_past_the_index_bound),
        cmocka_unit_test(memtable_versions_keep_every_level_in_order),
        cmocka_unit_test_setup_teardown(range_delete_hides_and_compaction_drops, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(range_delete_drops_whole_files, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(snapshot_blocks_range_drop, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(backpressure_and_memory_bound, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(block_cache_is_bounded, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(randomized_against_model, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(obsolete_files_outlive_their_readers, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(open_removes_only_orphan_tables, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(background_error_is_sticky, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(close_waits_for_running_job, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(flush_during_a_flush_leaves_room_for_writes, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(close_answers_a_flush_waiting_to_seal, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(a_flush_nothing_waits_for_is_paced, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(a_flush_someone_waits_for_is_not_paced, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(bad_background_share_is_refused, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(level0_file_count_stops_writes, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(big_keys_and_values_survive_flush_and_reopen, fixture_setup,
                                        fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
