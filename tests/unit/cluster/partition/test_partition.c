/*
 * The partition state machine against the real engine in a temporary directory:
 * conditions, return values, updates, the item size limit, determinism, reads (get,
 * query in both directions, limits and paging at 1 MB, exclusive start keys) and scans
 * over hash-range segments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "cluster/partition.h"
#include "storage/data/key.h"
#include "storage/lsm/lsm.h"

/* ------------------------------------------------------------------ fixture */

typedef struct {
    char dir[64];
    uv_loop_t loop;
    lsm *db;
    arena a;
    partition_desc part;
    partition_key_schema ks;
    uint64_t log_index;
} fx;

static void rm_rf(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static int open_engine(fx *f)
{
    lsm_options o = {.dir = f->dir, .no_compaction = true, .memtable_bytes = 8 << 20};
    strata_err err;
    if (lsm_open(&o, &f->loop, &f->db, &err) < 0) {
        fprintf(stderr, "lsm_open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int setup_common(void **state, bool with_range)
{
    fx *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/strata-partition-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    uv_loop_init(&f->loop);
    if (open_engine(f) < 0)
        return -1;
    arena_init(&f->a, 0);
    f->part = (partition_desc){.id = 7, .table_id = 3, .hash_lo = 0, .hash_hi = UINT64_MAX};
    f->ks.hash_name = "pk";
    f->ks.hash_name_len = 2;
    f->ks.hash_type = AV_S;
    if (with_range) {
        f->ks.range_name = "sk";
        f->ks.range_name_len = 2;
        f->ks.range_type = AV_N;
    }
    *state = f;
    return 0;
}

static int setup_hash(void **state)
{
    return setup_common(state, false);
}
static int setup_range(void **state)
{
    return setup_common(state, true);
}

static void close_cb(void *arg, const strata_err *err)
{
    (void)err;
    *(bool *)arg = true;
}

static void close_engine(fx *f)
{
    bool done = false;
    lsm_close(f->db, close_cb, &done);
    while (!done)
        uv_run(&f->loop, UV_RUN_ONCE);
    f->db = NULL;
}

static int teardown(void **state)
{
    fx *f = *state;
    close_engine(f);
    uv_loop_close(&f->loop);
    arena_free(&f->a);
    rm_rf(f->dir);
    free(f);
    return 0;
}

/* ------------------------------------------------------------------ value builders */

static av s_val(const char *s)
{
    av v = {.type = AV_S};
    v.u.bytes.ptr = (const uint8_t *)s;
    v.u.bytes.len = (uint32_t)strlen(s);
    return v;
}

static av n_val(const char *s)
{
    av v = {.type = AV_N};
    strata_err err;
    assert_int_equal(num_parse(s, strlen(s), &v.u.n, &err), 0);
    return v;
}

/* A map from name/value pairs, terminated by a NULL name. */
static av *map_of(arena *a, ...)
{
    va_list ap;
    av_attr attrs[16];
    uint32_t n = 0;
    va_start(ap, a);
    for (;;) {
        const char *name = va_arg(ap, const char *);
        if (name == NULL)
            break;
        assert_true(n < 16);
        attrs[n].name = name;
        attrs[n].name_len = (uint32_t)strlen(name);
        attrs[n].value = va_arg(ap, av);
        n++;
    }
    va_end(ap);
    av *m = arena_zalloc(a, sizeof *m);
    m->type = AV_M;
    m->u.map.attrs = arena_memdup(a, attrs, n * sizeof attrs[0] + 1);
    m->u.map.count = n;
    strata_err err;
    assert_int_equal(av_map_sort(m, &err), 0);
    return m;
}

static av m_val(av *m)
{
    return *m;
}

/* ------------------------------------------------------------------ write helpers */

typedef struct {
    partition_write_result r;
    buf bytes;
} wres;

static void wres_free(wres *w)
{
    buf_free(&w->bytes);
}

static void apply(fx *f, const partition_write *w, wres *out)
{
    buf cmd;
    buf_init(&cmd, 0);
    strata_err err;
    assert_int_equal(partition_write_encode(w, &cmd, &err), 0);
    buf_init(&out->bytes, 0);
    int rc = partition_apply(f->db, &f->part, cmd.data, cmd.len, ++f->log_index, &out->bytes, &err);
    if (rc != 0)
        fail_msg("partition_apply: %s", err.msg);
    assert_int_equal(partition_result_decode(out->bytes.data, out->bytes.len, &f->a, &out->r, &err),
                     0);
    buf_free(&cmd);
}

static partition_write base_write(fx *f, partition_write_kind kind, const av *key)
{
    partition_write w = {.kind = kind, .table_id = f->part.table_id, .ks = f->ks, .key = key};
    w.now_ms = 1700000000000ull;
    return w;
}

static const av *key_hash_only(fx *f, const char *pk)
{
    return map_of(&f->a, "pk", s_val(pk), NULL);
}

static void put(fx *f, av *item)
{
    const av *pk = av_map_get(item, "pk", 2);
    const av *sk = av_map_get(item, "sk", 2);
    const av *key = sk ? map_of(&f->a, "pk", *pk, "sk", *sk, NULL) : map_of(&f->a, "pk", *pk, NULL);
    partition_write w = base_write(f, PARTITION_PUT, key);
    w.item = item;
    wres r;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    wres_free(&r);
}

static const av *get(fx *f, const av *key)
{
    partition_read_req req = {.kind = PARTITION_GET,
                              .table_id = f->part.table_id,
                              .ks = f->ks,
                              .key = key,
                              .consistent = true};
    partition_read_res res;
    strata_err err;
    assert_int_equal(partition_read(f->db, &f->part, &req, &f->a, &res, &err), 0);
    return res.found ? &res.items[0] : NULL;
}

static const char *num_text(const av *v, char *out)
{
    assert_int_equal(v->type, AV_N);
    num_format(&v->u.n, out, NUM_TEXT_MAX);
    return out;
}

/* ------------------------------------------------------------------ write tests */

static void test_put_get_all_old(void **state)
{
    fx *f = *state;
    const av *key = key_hash_only(f, "a");
    assert_null(get(f, key));

    partition_write w = base_write(f, PARTITION_PUT, key);
    w.item = map_of(&f->a, "pk", s_val("a"), "x", n_val("1"), NULL);
    w.return_values = PARTITION_RETURN_ALL_OLD;
    wres r;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    assert_null(r.r.attributes); /* no old item */
    assert_int_equal(r.r.old_size, 0);
    assert_int_equal(r.r.new_size, item_size(w.item));
    int64_t di, db;
    partition_result_delta(r.bytes.data, r.bytes.len, &di, &db);
    assert_int_equal(di, 1);
    assert_int_equal(db, (int64_t)item_size(w.item));
    wres_free(&r);

    w.item = map_of(&f->a, "pk", s_val("a"), "x", n_val("2"), NULL);
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    assert_non_null(r.r.attributes);
    char t[NUM_TEXT_MAX];
    assert_string_equal(num_text(av_map_get(r.r.attributes, "x", 1), t), "1");
    partition_result_delta(r.bytes.data, r.bytes.len, &di, &db);
    assert_int_equal(di, 0);
    wres_free(&r);

    const av *got = get(f, key);
    assert_non_null(got);
    assert_string_equal(num_text(av_map_get(got, "x", 1), t), "2");
}

static void test_condition_failure(void **state)
{
    fx *f = *state;
    const av *key = key_hash_only(f, "c");
    put(f, map_of(&f->a, "pk", s_val("c"), "v", s_val("old"), NULL));

    partition_write w = base_write(f, PARTITION_PUT, key);
    w.item = map_of(&f->a, "pk", s_val("c"), "v", s_val("new"), NULL);
    w.condition = "attribute_not_exists(pk)";
    wres r;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_CONDITIONAL_CHECK);
    assert_string_equal(r.r.message, "The conditional request failed");
    assert_null(r.r.attributes);
    assert_int_equal(r.r.new_size, r.r.old_size); /* nothing written */
    int64_t di, db;
    partition_result_delta(r.bytes.data, r.bytes.len, &di, &db);
    assert_int_equal(di, 0);
    assert_int_equal(db, 0);
    wres_free(&r);

    w.return_old_on_condition_failure = true;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_CONDITIONAL_CHECK);
    assert_non_null(r.r.attributes);
    const av *v = av_map_get(r.r.attributes, "v", 1);
    assert_int_equal(v->u.bytes.len, 3);
    assert_memory_equal(v->u.bytes.ptr, "old", 3);
    wres_free(&r);

    /* With names and values, a condition that holds. */
    partition_name names[] = {{"#v", "v"}};
    w.condition = "#v = :o";
    w.names = names;
    w.nnames = 1;
    w.values = map_of(&f->a, ":o", s_val("old"), NULL);
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    wres_free(&r);
    v = av_map_get(get(f, key), "v", 1);
    assert_memory_equal(v->u.bytes.ptr, "new", 3);

    /* Delete with a failing condition leaves the item. */
    partition_write d = base_write(f, PARTITION_DELETE, key);
    d.condition = "v = :o";
    d.values = map_of(&f->a, ":o", s_val("old"), NULL);
    apply(f, &d, &r);
    assert_int_equal(r.r.code, ERR_CONDITIONAL_CHECK);
    wres_free(&r);
    assert_non_null(get(f, key));
}

static void test_legacy_expected(void **state)
{
    fx *f = *state;
    const av *key = key_hash_only(f, "l");
    put(f, map_of(&f->a, "pk", s_val("l"), "n", n_val("5"), NULL));
    partition_write w = base_write(f, PARTITION_UPDATE, key);
    w.expected_json = "{\"n\":{\"Value\":{\"N\":\"4\"}}}";
    w.attribute_updates_json = "{\"n\":{\"Action\":\"ADD\",\"Value\":{\"N\":\"1\"}}}";
    wres r;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_CONDITIONAL_CHECK);
    wres_free(&r);
    w.expected_json = "{\"n\":{\"Value\":{\"N\":\"5\"}}}";
    w.return_values = PARTITION_RETURN_UPDATED_NEW;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    char t[NUM_TEXT_MAX];
    assert_string_equal(num_text(av_map_get(r.r.attributes, "n", 1), t), "6");
    wres_free(&r);
}

static void test_update_return_values(void **state)
{
    fx *f = *state;
    const av *key = key_hash_only(f, "u");
    partition_write w = base_write(f, PARTITION_UPDATE, key);
    w.update = "SET cnt = if_not_exists(cnt, :zero) + :one, tag = :t";
    w.values = map_of(&f->a, ":zero", n_val("0"), ":one", n_val("1"), ":t", s_val("x"), NULL);
    w.return_values = PARTITION_RETURN_UPDATED_OLD;
    wres r;
    apply(f, &w, &r); /* creates the item from its key */
    assert_int_equal(r.r.code, ERR_NONE);
    assert_null(r.r.attributes); /* nothing was there before */
    assert_int_equal(r.r.old_size, 0);
    wres_free(&r);

    w.return_values = PARTITION_RETURN_UPDATED_NEW;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    char t[NUM_TEXT_MAX];
    assert_int_equal(r.r.attributes->u.map.count, 2);
    assert_string_equal(num_text(av_map_get(r.r.attributes, "cnt", 3), t), "2");
    assert_null(av_map_get(r.r.attributes, "pk", 2));
    wres_free(&r);

    w.return_values = PARTITION_RETURN_UPDATED_OLD;
    apply(f, &w, &r);
    assert_string_equal(num_text(av_map_get(r.r.attributes, "cnt", 3), t), "2");
    wres_free(&r);

    w.return_values = PARTITION_RETURN_ALL_NEW;
    apply(f, &w, &r);
    assert_int_equal(r.r.attributes->u.map.count, 3);
    assert_non_null(av_map_get(r.r.attributes, "pk", 2));
    assert_string_equal(num_text(av_map_get(r.r.attributes, "cnt", 3), t), "4");
    wres_free(&r);

    w.return_values = PARTITION_RETURN_ALL_OLD;
    w.update = "REMOVE tag";
    w.values = NULL;
    apply(f, &w, &r);
    assert_int_equal(r.r.attributes->u.map.count, 3);
    wres_free(&r);
    assert_null(av_map_get(get(f, key), "tag", 3));

    /* An update error (arithmetic on a string) is a result, not an apply failure. */
    w.update = "SET pk2 = tag + :one";
    w.values = map_of(&f->a, ":one", n_val("1"), NULL);
    w.return_values = PARTITION_RETURN_NONE;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_VALIDATION);
    wres_free(&r);

    /* REMOVE on a missing item creates nothing. */
    partition_write rm = base_write(f, PARTITION_UPDATE, key_hash_only(f, "ghost"));
    rm.update = "REMOVE a";
    rm.return_values = PARTITION_RETURN_ALL_NEW;
    apply(f, &rm, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    assert_null(r.r.attributes);
    assert_int_equal(r.r.new_size, 0);
    wres_free(&r);
    assert_null(get(f, key_hash_only(f, "ghost")));

    /* An update without an expression creates the key-only item. */
    partition_write k = base_write(f, PARTITION_UPDATE, key_hash_only(f, "bare"));
    k.return_values = PARTITION_RETURN_ALL_NEW;
    apply(f, &k, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    assert_int_equal(r.r.attributes->u.map.count, 1);
    wres_free(&r);
}

static void test_item_size_limit_after_update(void **state)
{
    fx *f = *state;
    const av *key = key_hash_only(f, "big");
    size_t n = 300 * 1024;
    char *blob = arena_zalloc(&f->a, n + 1);
    memset(blob, 'x', n);
    put(f, map_of(&f->a, "pk", s_val("big"), "a", s_val(blob), NULL));

    partition_write w = base_write(f, PARTITION_UPDATE, key);
    w.update = "SET b = a";
    wres r;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_VALIDATION);
    assert_string_equal(r.r.message, "Item size to update has exceeded the maximum allowed size");
    wres_free(&r);
    assert_null(av_map_get(get(f, key), "b", 1));

    /* Capacity: the larger of old and new, 1 KB units rounded up. */
    partition_write_result x = {.old_size = 1024, .new_size = 1025};
    assert_int_equal(partition_write_units(&x), 2);
    x.old_size = x.new_size = 0;
    assert_int_equal(partition_write_units(&x), 1);
    x.old_size = 300 * 1024;
    assert_int_equal(partition_write_units(&x), 300);
    assert_true(partition_read_units(1, true) == 1.0);
    assert_true(partition_read_units(4096, false) == 0.5);
    assert_true(partition_read_units(4097, false) == 1.0);
    assert_true(partition_read_units(0, true) == 1.0);
}

static void test_delete(void **state)
{
    fx *f = *state;
    const av *key = key_hash_only(f, "d");
    put(f, map_of(&f->a, "pk", s_val("d"), "v", n_val("9"), NULL));
    partition_write w = base_write(f, PARTITION_DELETE, key);
    w.return_values = PARTITION_RETURN_ALL_OLD;
    wres r;
    apply(f, &w, &r);
    assert_int_equal(r.r.code, ERR_NONE);
    assert_non_null(r.r.attributes);
    assert_int_equal(r.r.new_size, 0);
    int64_t di, db;
    partition_result_delta(r.bytes.data, r.bytes.len, &di, &db);
    assert_int_equal(di, -1);
    wres_free(&r);
    assert_null(get(f, key));
    apply(f, &w, &r); /* deleting nothing succeeds, returns nothing */
    assert_int_equal(r.r.code, ERR_NONE);
    assert_null(r.r.attributes);
    assert_int_equal(r.r.old_size, 0);
    wres_free(&r);
    /* Nothing to report at all: the result bytes are empty and still decode. */
    w.return_values = PARTITION_RETURN_NONE;
    apply(f, &w, &r);
    assert_int_equal(r.bytes.len, 0);
    assert_int_equal(r.r.code, ERR_NONE);
    assert_null(r.r.attributes);
    wres_free(&r);
    assert_true(lsm_applied_index(f->db, f->part.id) >= 2);
}

/* Two replicas applying the same commands produce the same result bytes. */
static void test_deterministic(void **state)
{
    fx *f = *state;
    fx g = *f;
    snprintf(g.dir, sizeof g.dir, "/tmp/strata-partition-XXXXXX");
    assert_non_null(mkdtemp(g.dir));
    uv_loop_init(&g.loop);
    assert_int_equal(open_engine(&g), 0);

    const char *updates[] = {"SET a = :one", "SET a = a + :one, b = :s", "REMOVE b", "ADD s :set",
                             "SET l = list_append(if_not_exists(l, :empty), :l)"};
    for (int i = 0; i < 5; i++) {
        partition_write w = base_write(f, PARTITION_UPDATE, key_hash_only(f, "det"));
        w.update = updates[i];
        av set = {.type = AV_SS};
        av elems[1] = {s_val("e")};
        set.u.list.elems = elems;
        set.u.list.count = 1;
        av empty = {.type = AV_L};
        av lv = {.type = AV_L};
        lv.u.list.elems = elems;
        lv.u.list.count = 1;
        switch (i) {
        case 0:
            w.values = map_of(&f->a, ":one", n_val("1"), NULL);
            break;
        case 1:
            w.values = map_of(&f->a, ":one", n_val("1.5"), ":s", s_val("z"), NULL);
            break;
        case 3:
            w.values = map_of(&f->a, ":set", set, NULL);
            break;
        case 4:
            w.values = map_of(&f->a, ":empty", empty, ":l", lv, NULL);
            break;
        default:
            break;
        }
        w.return_values = PARTITION_RETURN_ALL_NEW;
        wres r1, r2;
        apply(f, &w, &r1);
        apply(&g, &w, &r2);
        assert_int_equal(r1.r.code, ERR_NONE);
        assert_int_equal(r1.bytes.len, r2.bytes.len);
        assert_memory_equal(r1.bytes.data, r2.bytes.data, r1.bytes.len);
        wres_free(&r1);
        wres_free(&r2);
    }
    close_engine(&g);
    uv_loop_close(&g.loop);
    arena_free(&g.a);
    rm_rf(g.dir);
}

/* Garbage commands are answered (deterministically), not fatal. */
static void test_bad_command(void **state)
{
    fx *f = *state;
    buf res;
    buf_init(&res, 0);
    strata_err err;
    uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
    assert_int_equal(partition_apply(f->db, &f->part, junk, sizeof junk, 1, &res, &err), 0);
    partition_write_result r;
    assert_int_equal(partition_result_decode(res.data, res.len, &f->a, &r, &err), 0);
    assert_int_equal(r.code, ERR_INTERNAL);
    buf_free(&res);
    /* A command for another table, or a hash outside the partition, is refused. */
    partition_write w = base_write(f, PARTITION_PUT, key_hash_only(f, "x"));
    w.item = map_of(&f->a, "pk", s_val("x"), NULL);
    w.table_id = 99;
    wres wr;
    apply(f, &w, &wr);
    assert_int_equal(wr.r.code, ERR_INTERNAL);
    wres_free(&wr);
    w.table_id = f->part.table_id;
    uint64_t h = key_hash(av_map_get(w.item, "pk", 2));
    partition_desc saved = f->part;
    f->part.hash_lo = h + 1;
    f->part.hash_hi = h == UINT64_MAX - 1 ? UINT64_MAX : h + 1;
    if (h != UINT64_MAX) {
        apply(f, &w, &wr);
        assert_int_equal(wr.r.code, ERR_INTERNAL);
        wres_free(&wr);
    }
    f->part = saved;
    /* A put whose item carries another key than the command's. */
    w.item = map_of(&f->a, "pk", s_val("y"), NULL);
    apply(f, &w, &wr);
    assert_int_equal(wr.r.code, ERR_VALIDATION);
    wres_free(&wr);
    assert_null(get(f, key_hash_only(f, "x")));
    assert_null(get(f, key_hash_only(f, "y")));

    uint8_t junk2[] = {0x0a, 0xff};
    assert_int_equal(partition_result_decode(junk2, sizeof junk2, &f->a, &r, &err), -1);
}

/* A command of a newer binary (a kind or a field this one does not know) is neither
 * applied nor answered: partition_apply fails with ERR_NEWER and the replica stops
 * (Formats, cluster/partition_entry.h). */
static void test_newer_command(void **state)
{
    fx *f = *state;
    partition_write w = base_write(f, PARTITION_PUT, key_hash_only(f, "n"));
    w.item = map_of(&f->a, "pk", s_val("n"), NULL);
    buf cmd, res;
    buf_init(&cmd, 0);
    buf_init(&res, 0);
    strata_err err;
    assert_int_equal(partition_write_encode(&w, &cmd, &err), 0);
    assert_true(cmd.len >= 2 && cmd.data[0] == 0x08 && cmd.data[1] == PARTITION_PUT);
    /* Field 99 (varint 1) appended: protobuf would skip it. */
    const uint8_t field99[] = {0x98, 0x06, 0x01};
    buf_append(&cmd, field99, sizeof field99);
    assert_int_equal(partition_apply(f->db, &f->part, cmd.data, cmd.len, 1, &res, &err), -1);
    assert_int_equal(err.code, ERR_NEWER);
    assert_int_equal(res.len, 0);
    cmd.len -= sizeof field99;
    /* Kind 4 and kind -1 (a ten-byte varint). */
    cmd.data[1] = 4;
    assert_int_equal(partition_apply(f->db, &f->part, cmd.data, cmd.len, 1, &res, &err), -1);
    assert_int_equal(err.code, ERR_NEWER);
    buf neg;
    buf_init(&neg, 0);
    const uint8_t kind_minus_one[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0x01};
    buf_append(&neg, kind_minus_one, sizeof kind_minus_one);
    buf_append(&neg, cmd.data + 2, cmd.len - 2);
    assert_int_equal(partition_apply(f->db, &f->part, neg.data, neg.len, 1, &res, &err), -1);
    assert_int_equal(err.code, ERR_NEWER);
    assert_int_equal(res.len, 0);
    assert_null(get(f, key_hash_only(f, "n")));
    /* The same command as this binary wrote it applies. */
    cmd.data[1] = PARTITION_PUT;
    assert_int_equal(partition_apply(f->db, &f->part, cmd.data, cmd.len, 1, &res, &err), 0);
    assert_non_null(get(f, key_hash_only(f, "n")));
    buf_free(&neg);
    buf_free(&res);
    buf_free(&cmd);
}

/* ------------------------------------------------------------------ read tests */

static void put_range(fx *f, const char *pk, int sk, size_t pad)
{
    char digits[16];
    snprintf(digits, sizeof digits, "%d", sk);
    char *p = arena_zalloc(&f->a, pad + 1);
    memset(p, 'p', pad);
    put(f, map_of(&f->a, "pk", s_val(pk), "sk", n_val(arena_strndup(&f->a, digits, strlen(digits))),
                  "pad", s_val(p), NULL));
}

static int sk_int(const av *item)
{
    const av *sk = av_map_get(item, "sk", 2);
    int64_t v;
    assert_int_equal(num_to_i64(&sk->u.n, &v), 0);
    return (int)v;
}

static partition_read_res query(fx *f, const char *pk, partition_sk_op op, int a1, int a2,
                                bool forward, uint32_t limit, const av *esk)
{
    char t1[16], t2[16];
    snprintf(t1, sizeof t1, "%d", a1);
    snprintf(t2, sizeof t2, "%d", a2);
    av *pkv = arena_zalloc(&f->a, sizeof *pkv);
    *pkv = s_val(pk);
    av *s1 = arena_zalloc(&f->a, sizeof *s1), *s2 = arena_zalloc(&f->a, sizeof *s2);
    *s1 = n_val(t1);
    *s2 = n_val(t2);
    partition_read_req req = {.kind = PARTITION_QUERY,
                              .table_id = f->part.table_id,
                              .ks = f->ks,
                              .hash_value = pkv,
                              .sk_op = op,
                              .sk1 = s1,
                              .sk2 = s2,
                              .forward = forward,
                              .limit = limit,
                              .exclusive_start_key = esk};
    partition_read_res res;
    strata_err err;
    assert_int_equal(partition_read(f->db, &f->part, &req, &f->a, &res, &err), 0);
    return res;
}

static void test_query_ranges(void **state)
{
    fx *f = *state;
    for (int i = -5; i < 15; i++)
        put_range(f, "q", i, 10);
    put_range(f, "other", 3, 10);

    partition_read_res r = query(f, "q", PARTITION_SK_ANY, 0, 0, true, 0, NULL);
    assert_int_equal(r.count, 20);
    assert_int_equal(r.scanned_count, 20);
    assert_null(r.last_evaluated_key);
    for (uint32_t i = 0; i < r.count; i++)
        assert_int_equal(sk_int(&r.items[i]), (int)i - 5);

    r = query(f, "q", PARTITION_SK_ANY, 0, 0, false, 0, NULL);
    assert_int_equal(r.count, 20);
    assert_int_equal(sk_int(&r.items[0]), 14);
    assert_int_equal(sk_int(&r.items[19]), -5);

    struct {
        partition_sk_op op;
        int a1, a2, n, first, last;
    } cases[] = {
        {PARTITION_SK_EQ, 3, 0, 1, 3, 3},    {PARTITION_SK_LT, 0, 0, 5, -5, -1},
        {PARTITION_SK_LE, 0, 0, 6, -5, 0},   {PARTITION_SK_GT, 10, 0, 4, 11, 14},
        {PARTITION_SK_GE, 10, 0, 5, 10, 14}, {PARTITION_SK_BETWEEN, -2, 2, 5, -2, 2},
        {PARTITION_SK_EQ, 100, 0, 0, 0, 0},  {PARTITION_SK_BETWEEN, 5, 4, 0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int dir = 0; dir < 2; dir++) {
            r = query(f, "q", cases[c].op, cases[c].a1, cases[c].a2, dir == 0, 0, NULL);
            assert_int_equal(r.count, cases[c].n);
            if (r.count) {
                int first = dir == 0 ? cases[c].first : cases[c].last;
                int last = dir == 0 ? cases[c].last : cases[c].first;
                assert_int_equal(sk_int(&r.items[0]), first);
                assert_int_equal(sk_int(&r.items[r.count - 1]), last);
            }
        }
    }
}

static void test_query_limit_and_resume(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 10; i++)
        put_range(f, "r", i, 10);
    for (int dir = 0; dir < 2; dir++) {
        const av *esk = NULL;
        int seen = 0, pages = 0;
        for (;;) {
            partition_read_res r = query(f, "r", PARTITION_SK_ANY, 0, 0, dir == 0, 3, esk);
            pages++;
            for (uint32_t i = 0; i < r.count; i++, seen++)
                assert_int_equal(sk_int(&r.items[i]), dir == 0 ? seen : 9 - seen);
            if (r.last_evaluated_key == NULL)
                break;
            /* the key holds exactly the key attributes */
            assert_int_equal(r.last_evaluated_key->u.map.count, 2);
            esk = r.last_evaluated_key;
        }
        assert_int_equal(seen, 10);
        /* 3+3+3 with a key each time, then 1 without: Limit reached gives a key. */
        assert_int_equal(pages, 4);
    }
    /* Exactly at the limit: a key is still returned, and the next page is empty. */
    partition_read_res r = query(f, "r", PARTITION_SK_ANY, 0, 0, true, 10, NULL);
    assert_int_equal(r.count, 10);
    assert_non_null(r.last_evaluated_key);
    r = query(f, "r", PARTITION_SK_ANY, 0, 0, true, 10, r.last_evaluated_key);
    assert_int_equal(r.count, 0);
    assert_null(r.last_evaluated_key);
    /* A resume key inside a BETWEEN range in reverse. */
    r = query(f, "r", PARTITION_SK_BETWEEN, 2, 7, false, 2, NULL);
    assert_int_equal(sk_int(&r.items[0]), 7);
    assert_int_equal(sk_int(&r.items[1]), 6);
    r = query(f, "r", PARTITION_SK_BETWEEN, 2, 7, false, 0, r.last_evaluated_key);
    assert_int_equal(r.count, 4);
    assert_int_equal(sk_int(&r.items[0]), 5);
    assert_int_equal(sk_int(&r.items[3]), 2);
}

static int drop_odd(void *ctx, const av *item, strata_err *err)
{
    (void)ctx;
    (void)err;
    return sk_int(item) % 2 == 0;
}

static int project_sk(void *ctx, arena *a, const av *item, av *out, strata_err *err)
{
    (void)ctx;
    (void)err;
    *out = m_val(map_of(a, "sk", *av_map_get(item, "sk", 2), NULL));
    return 0;
}

static void test_query_page_1mb_filter_projection(void **state)
{
    fx *f = *state;
    /* 30 items of ~100 KB: a page stops once 1 MB has been read. */
    for (int i = 0; i < 30; i++)
        put_range(f, "big", i, 100 * 1000);
    av pk = s_val("big");
    partition_read_req req = {.kind = PARTITION_QUERY,
                              .table_id = f->part.table_id,
                              .ks = f->ks,
                              .hash_value = &pk,
                              .forward = true,
                              .filter = drop_odd,
                              .project = project_sk};
    int total_scanned = 0, total = 0, pages = 0;
    for (;;) {
        partition_read_res r;
        strata_err err;
        assert_int_equal(partition_read(f->db, &f->part, &req, &f->a, &r, &err), 0);
        pages++;
        total_scanned += r.scanned_count;
        total += r.count;
        assert_true(r.bytes_read >= r.scanned_count * 100000u);
        if (r.last_evaluated_key) {
            /* the item that crosses 1 MB is the last one read */
            assert_true(r.bytes_read >= PARTITION_PAGE_BYTES);
            assert_true(r.bytes_read - 100100 < PARTITION_PAGE_BYTES);
        }
        for (uint32_t i = 0; i < r.count; i++) {
            assert_int_equal(r.items[i].u.map.count, 1); /* projected */
            assert_int_equal(sk_int(&r.items[i]) % 2, 0);
        }
        if (r.last_evaluated_key == NULL)
            break;
        req.exclusive_start_key = r.last_evaluated_key;
    }
    assert_int_equal(total_scanned, 30);
    assert_int_equal(total, 15);
    assert_int_equal(pages, 3); /* 11 + 11 + 8 */

    /* COUNT only: no items, same counts. */
    req.exclusive_start_key = NULL;
    req.count_only = true;
    req.max_bytes = 64u << 20;
    partition_read_res r;
    strata_err err;
    assert_int_equal(partition_read(f->db, &f->part, &req, &f->a, &r, &err), 0);
    assert_int_equal(r.count, 15);
    assert_int_equal(r.scanned_count, 30);
    assert_null(r.items);
}

static void test_query_begins_with(void **state)
{
    fx *f = *state;
    f->ks.range_type = AV_S; /* this test's table has a string sort key */
    const char *sks[] = {"a", "ab", "abc", "abd", "ac", "b", "ab\xff", "ab\x00z"};
    for (size_t i = 0; i < sizeof sks / sizeof sks[0]; i++) {
        av sk = s_val(sks[i]);
        if (i == 7)
            sk.u.bytes.len = 4; /* "ab\0z" with its NUL */
        put(f, map_of(&f->a, "pk", s_val("bw"), "sk", sk, NULL));
    }
    av pk = s_val("bw"), prefix = s_val("ab");
    for (int dir = 0; dir < 2; dir++) {
        partition_read_req req = {.kind = PARTITION_QUERY,
                                  .table_id = f->part.table_id,
                                  .ks = f->ks,
                                  .hash_value = &pk,
                                  .sk_op = PARTITION_SK_BEGINS_WITH,
                                  .sk1 = &prefix,
                                  .forward = dir == 0};
        partition_read_res r;
        strata_err err;
        assert_int_equal(partition_read(f->db, &f->part, &req, &f->a, &r, &err), 0);
        assert_int_equal(r.count, 5); /* ab, ab\0z, abc, abd, ab\xff (bytewise order) */
        const av *first = av_map_get(&r.items[0], "sk", 2);
        const av *last = av_map_get(&r.items[4], "sk", 2);
        const av *lo = dir == 0 ? first : last, *hi = dir == 0 ? last : first;
        assert_int_equal(lo->u.bytes.len, 2);
        assert_memory_equal(lo->u.bytes.ptr, "ab", 2);
        assert_int_equal(hi->u.bytes.len, 3);
        assert_memory_equal(hi->u.bytes.ptr, "ab\xff", 3);
        for (uint32_t i = 1; i < r.count; i++) {
            int c = av_cmp_scalar(av_map_get(&r.items[i - 1], "sk", 2),
                                  av_map_get(&r.items[i], "sk", 2));
            assert_true(dir == 0 ? c < 0 : c > 0);
        }
    }
}

static int failing_filter(void *ctx, const av *item, strata_err *err)
{
    (void)ctx;
    (void)item;
    return strata_err_set(err, ERR_NOMEM, "filter failed");
}

/* An error from the filter stops the read and is reported. */
static void test_filter_error(void **state)
{
    fx *f = *state;
    put_range(f, "fe", 1, 1);
    av pk = s_val("fe");
    partition_read_req req = {.kind = PARTITION_QUERY,
                              .table_id = f->part.table_id,
                              .ks = f->ks,
                              .hash_value = &pk,
                              .forward = true,
                              .filter = failing_filter};
    partition_read_res r;
    strata_err err;
    assert_int_equal(partition_read(f->db, &f->part, &req, &f->a, &r, &err), -1);
    assert_int_equal(err.code, ERR_NOMEM);
}

static void test_scan_segments(void **state)
{
    fx *f = *state;
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "k%d", i);
        put(f, map_of(&f->a, "pk", s_val(arena_strndup(&f->a, name, strlen(name))), "i",
                      n_val(arena_strndup(&f->a, name + 1, strlen(name + 1))), NULL));
    }
    /* Another table's items must never show up. */
    partition_desc saved = f->part;
    f->part.table_id = 4;
    put(f, map_of(&f->a, "pk", s_val("k1"), NULL));
    f->part = saved;

    int seen[N] = {0};
    /* Two partitions, four segments each (the API's mapping of Segment/TotalSegments). */
    partition_desc parts[2] = {f->part, f->part};
    parts[0].hash_hi = UINT64_MAX / 2;
    parts[1].hash_lo = UINT64_MAX / 2 + 1;
    uint64_t seg = UINT64_MAX / 4 + 1;
    for (int s = 0; s < 4; s++) {
        uint64_t lo = (uint64_t)s * seg, hi = s == 3 ? UINT64_MAX : lo + seg - 1;
        for (int p = 0; p < 2; p++) {
            partition_read_req req = {.kind = PARTITION_SCAN,
                                      .table_id = 3,
                                      .ks = f->ks,
                                      .hash_lo = lo,
                                      .hash_hi = hi,
                                      .limit = 7};
            uint64_t prev_hash = 0;
            for (;;) {
                partition_read_res r;
                strata_err err;
                assert_int_equal(partition_read(f->db, &parts[p], &req, &f->a, &r, &err), 0);
                for (uint32_t i = 0; i < r.count; i++) {
                    const av *pk = av_map_get(&r.items[i], "pk", 2);
                    uint64_t h = key_hash(pk);
                    assert_true(h >= lo && h <= hi);
                    assert_true(h >= parts[p].hash_lo && h <= parts[p].hash_hi);
                    assert_true(h >= prev_hash); /* hash order */
                    prev_hash = h;
                    int64_t v;
                    assert_int_equal(num_to_i64(&av_map_get(&r.items[i], "i", 1)->u.n, &v), 0);
                    seen[v]++;
                }
                if (!r.last_evaluated_key)
                    break;
                req.exclusive_start_key = r.last_evaluated_key;
            }
        }
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
}

static void test_survives_reopen(void **state)
{
    fx *f = *state;
    put(f, map_of(&f->a, "pk", s_val("durable"), NULL));
    bool done = false;
    lsm_flush(f->db, close_cb, &done);
    while (!done)
        uv_run(&f->loop, UV_RUN_ONCE);
    uint64_t idx = lsm_durable_index(f->db, f->part.id);
    assert_int_equal(idx, f->log_index);
    close_engine(f);
    assert_int_equal(open_engine(f), 0);
    assert_non_null(get(f, key_hash_only(f, "durable")));
    assert_int_equal(lsm_durable_index(f->db, f->part.id), idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_all_old, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_condition_failure, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_legacy_expected, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_update_return_values, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_item_size_limit_after_update, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_deterministic, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_bad_command, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_newer_command, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_query_ranges, setup_range, teardown),
        cmocka_unit_test_setup_teardown(test_query_limit_and_resume, setup_range, teardown),
        cmocka_unit_test_setup_teardown(test_query_page_1mb_filter_projection, setup_range,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_query_begins_with, setup_range, teardown),
        cmocka_unit_test_setup_teardown(test_filter_error, setup_range, teardown),
        cmocka_unit_test_setup_teardown(test_scan_segments, setup_hash, teardown),
        cmocka_unit_test_setup_teardown(test_survives_reopen, setup_hash, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
