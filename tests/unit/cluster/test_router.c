/*
 * Unit tests of cluster/router with the real engine and log in a temporary directory,
 * and a tiny fake state machine: a command is 'P' key value (put) or 'D' key (delete)
 * or 'X' (an apply error), where key is the suffix after table id | hash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ftw.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/router.h"
#include "storage/lsm/lsm.h"

/* ---- fake state machine ---- */

static size_t item_key(uint8_t *out, uint32_t table_id, uint64_t hash, const char *k)
{
    for (int i = 0; i < 4; i++)
        out[i] = (uint8_t)(table_id >> (24 - 8 * i));
    for (int i = 0; i < 8; i++)
        out[4 + i] = (uint8_t)(hash >> (56 - 8 * i));
    size_t n = strlen(k);
    memcpy(out + 12, k, n);
    return 12 + n;
}

/* cmd: op u8 | hash u64 (host order) | key NUL | value NUL */
static size_t make_cmd(uint8_t *out, char op, uint64_t hash, const char *key, const char *val)
{
    size_t n = 0;
    out[n++] = (uint8_t)op;
    memcpy(out + n, &hash, 8);
    n += 8;
    strcpy((char *)out + n, key);
    n += strlen(key) + 1;
    strcpy((char *)out + n, val);
    n += strlen(val) + 1;
    return n;
}

static int busy_left;   /* 'B' commands are refused with ERR_BUSY this many times */
static int apply_order; /* bumped by every successful apply */

static int fake_apply(struct lsm *engine, const partition_desc *p, const uint8_t *cmd, size_t len,
                      uint64_t log_index, buf *result, strata_err *err)
{
    assert_true(len >= 11);
    uint64_t hash;
    memcpy(&hash, cmd + 1, 8);
    assert_true(hash >= p->hash_lo && hash <= p->hash_hi);
    const char *key = (const char *)cmd + 9;
    const char *val = key + strlen(key) + 1;
    if (cmd[0] == 'X')
        return strata_err_set(err, ERR_IO, "fake apply failure");
    if (cmd[0] == 'B' && busy_left > 0) {
        busy_left--;
        return strata_err_set(err, ERR_BUSY, "engine busy");
    }
    apply_order++;
    uint8_t k[128];
    size_t klen = item_key(k, p->table_id, hash, key);
    lsm_batch *b = lsm_batch_new();
    if (cmd[0] == 'P' || cmd[0] == 'B')
        lsm_batch_put(b, k, klen, val, strlen(val), err);
    else
        lsm_batch_delete(b, k, klen, err);
    int rc = lsm_write(engine, b, p->id, log_index, err);
    lsm_batch_free(b);
    buf_append(result, cmd[0] == 'D' ? "del" : "put", 3);
    return rc;
}

static void fake_stats(const uint8_t *result, size_t len, partition_stats *delta)
{
    if (len == 3 && memcmp(result, "put", 3) == 0) {
        delta->item_count = 1;
        delta->size_bytes = 10;
    }
}

/* The fake state machine's read: req->key is an AV_S naming the engine key under
 * req->hash_lo; the value comes back as items[0] (AV_S). */
static int fake_read(struct lsm *engine, const partition_desc *p, const partition_read_req *req,
                     arena *a, partition_read_res *res, strata_err *err)
{
    char key[64];
    size_t n = req->key->u.bytes.len < sizeof key - 1 ? req->key->u.bytes.len : sizeof key - 1;
    memcpy(key, req->key->u.bytes.ptr, n);
    key[n] = '\0';
    uint8_t k[128];
    size_t klen = item_key(k, p->table_id, req->hash_lo, key);
    buf v;
    buf_init(&v, 0);
    memset(res, 0, sizeof *res);
    int found = lsm_get(engine, NULL, k, klen, &v, err);
    if (found < 0) {
        buf_free(&v);
        return -1;
    }
    res->found = found == 1;
    if (res->found) {
        av *item = arena_zalloc(a, sizeof *item);
        uint8_t *copy = arena_memdup(a, v.data, v.len + 1);
        assert_non_null(item);
        assert_non_null(copy);
        item->type = AV_S;
        item->u.bytes.ptr = copy;
        item->u.bytes.len = (uint32_t)v.len;
        res->items = item;
        res->count = 1;
    }
    buf_free(&v);
    return 0;
}

/* ---- fixture ---- */

typedef struct {
    char dir[64];
    uv_loop_t loop;
    router *r;
    arena arena; /* read results */
} fixture;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static router *open_router(fixture *f)
{
    router_config cfg = {
        .loop = &f->loop,
        .data_dir = f->dir,
        .ops = {.apply = fake_apply, .result_stats = fake_stats, .read = fake_read},
        .region = "eu-west-1",
        .wal_segment_size = 1 << 20, /* recovery scans whole segments: keep tests fast */
    };
    strata_err err;
    router *r = router_open(&cfg, &err);
    if (r == NULL)
        fail_msg("router_open: %s", err.msg);
    return r;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/strata-router-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    uv_loop_init(&f->loop);
    arena_init(&f->arena, 1 << 20);
    f->r = open_router(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->r != NULL)
        router_close(f->r);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    arena_free(&f->arena);
    free(f);
    return 0;
}

/* ---- helpers ---- */

typedef struct {
    int done;
    strata_code code;
    char result[16];
} outcome;

static void on_done(void *ctx, const strata_err *err, const uint8_t *result, size_t len)
{
    outcome *o = ctx;
    o->done++;
    o->code = err ? err->code : ERR_NONE;
    if (len > 0 && len < sizeof o->result)
        memcpy(o->result, result, len);
}

/* Runs the loop until `*done` reaches `want` or 10 s pass. */
static void wait_for(fixture *f, int *done, int want)
{
    uint64_t deadline = uv_now(&f->loop) + 10000;
    while (*done < want) {
        uv_run(&f->loop, UV_RUN_ONCE);
        uv_update_time(&f->loop);
        if (uv_now(&f->loop) > deadline)
            fail_msg("timed out waiting for callbacks (%d of %d)", *done, want);
    }
}

static void create_table(fixture *f, uint32_t *table_id, const char *name, size_t parts)
{
    const catalog *c = router_catalog(f->r);
    table_info t;
    memset(&t, 0, sizeof t);
    t.schema.table_id = catalog_next_table_id(c);
    snprintf(t.schema.name, sizeof t.schema.name, "%s", name);
    t.schema.name_len = strlen(name);
    strcpy(t.schema.hash.name, "pk");
    t.schema.hash.name_len = 2;
    t.schema.hash.type = AV_S;
    t.attr_defs[0] = t.schema.hash;
    t.n_attr_defs = 1;
    t.status = TABLE_ACTIVE;
    strcpy(t.uuid, "00000000-0000-4000-8000-000000000000");
    assert_int_equal(catalog_split_even(&t, parts, catalog_next_partition_id(c), NULL), 0);
    buf b;
    buf_init(&b, 0);
    assert_int_equal(catalog_encode_table(&t, &b, NULL), 0);
    outcome o = {0};
    assert_int_equal(router_catalog_write(f->r, b.data, b.len, on_done, &o, NULL), 0);
    assert_int_equal(o.done, 0); /* never answered from inside the call */
    wait_for(f, &o.done, 1);
    assert_int_equal(o.code, ERR_NONE);
    buf_free(&b);
    *table_id = t.schema.table_id;
    catalog_table_free(&t);
}

static void drop_table(fixture *f, const char *name)
{
    buf b;
    buf_init(&b, 0);
    assert_int_equal(catalog_encode_drop(name, strlen(name), &b, NULL), 0);
    outcome o = {0};
    assert_int_equal(router_catalog_write(f->r, b.data, b.len, on_done, &o, NULL), 0);
    wait_for(f, &o.done, 1);
    assert_int_equal(o.code, ERR_NONE);
    buf_free(&b);
}

static uint64_t hash_of(int i)
{
    return (uint64_t)i * 0x9E3779B97F4A7C15ull;
}

static int put_many(fixture *f, uint32_t table_id, int from, int n, outcome *o)
{
    for (int i = from; i < from + n; i++) {
        uint8_t cmd[128];
        char key[32], val[32];
        snprintf(key, sizeof key, "k%d", i);
        snprintf(val, sizeof val, "v%d", i);
        size_t len = make_cmd(cmd, 'P', hash_of(i), key, val);
        strata_err err;
        if (router_write(f->r, table_id, hash_of(i), cmd, len, on_done, o, &err) < 0)
            fail_msg("router_write: %s", err.msg);
    }
    return n;
}

typedef struct {
    int done;
    int found;
    uint64_t hash;
    const char *key;
    strata_code code;
    char value[32];
} read_ctx;

static void on_read(void *ctx, const strata_err *err, partition_read_res *res)
{
    read_ctx *rc = ctx;
    rc->done++;
    if (err != NULL) {
        rc->code = err->code;
        return;
    }
    rc->found = res->found;
    if (res->found && res->items[0].u.bytes.len < sizeof rc->value)
        memcpy(rc->value, res->items[0].u.bytes.ptr, res->items[0].u.bytes.len);
}

/* A read request for the fake state machine (see fake_read). */
static partition_read_req fake_req(const char *key, uint64_t hash, av *key_av)
{
    key_av->type = AV_S;
    key_av->u.bytes.ptr = (const uint8_t *)key;
    key_av->u.bytes.len = (uint32_t)strlen(key);
    partition_read_req req = {
        .kind = PARTITION_GET, .key = key_av, .hash_lo = hash, .consistent = true};
    return req;
}

static int read_key(fixture *f, uint32_t table_id, int i, char *value)
{
    const partition_desc *p = router_partition_for_hash(f->r, table_id, hash_of(i));
    assert_non_null(p);
    char key[32];
    snprintf(key, sizeof key, "k%d", i);
    read_ctx rc = {.hash = hash_of(i), .key = key};
    strata_err err;
    av key_av;
    partition_read_req req = fake_req(key, hash_of(i), &key_av);
    assert_int_equal(router_read(f->r, table_id, p->id, &req, &f->arena, on_read, &rc, &err), 0);
    assert_int_equal(rc.done, 0);
    wait_for(f, &rc.done, 1);
    assert_int_equal(rc.code, ERR_NONE);
    if (value != NULL)
        strcpy(value, rc.value);
    return rc.found;
}

/* ---- tests ---- */

static void test_create_write_read(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "t1", 4);
    const partition_desc *parts;
    size_t n;
    assert_int_equal(router_table_partitions(f->r, tid, &parts, &n, NULL), 0);
    assert_int_equal(n, 4);
    for (size_t i = 1; i < n; i++)
        assert_true(parts[i].hash_lo > parts[i - 1].hash_hi);
    outcome o = {0};
    put_many(f, tid, 0, 50, &o);
    assert_int_equal(o.done, 0);
    assert_int_equal(router_inflight(f->r), 50);
    wait_for(f, &o.done, 50);
    assert_int_equal(o.code, ERR_NONE);
    assert_string_equal(o.result, "put");
    char v[32];
    assert_int_equal(read_key(f, tid, 7, v), 1);
    assert_string_equal(v, "v7");
    assert_int_equal(read_key(f, tid, 99, NULL), 0);
    partition_stats st = router_table_stats(f->r, tid);
    assert_int_equal(st.item_count, 50);
    assert_int_equal(st.size_bytes, 500);
    assert_string_equal(router_region(f->r), "eu-west-1");
    assert_int_equal(router_inflight(f->r), 0);
}

static void test_errors(void **state)
{
    fixture *f = *state;
    strata_err err;
    uint8_t cmd[64];
    size_t len = make_cmd(cmd, 'P', 1, "a", "b");
    outcome o = {0};
    assert_int_equal(router_write(f->r, 42, 1, cmd, len, on_done, &o, &err), -1);
    assert_int_equal(err.code, ERR_RESOURCE_NOT_FOUND);
    read_ctx rc = {0};
    av key_av;
    partition_read_req req = fake_req("a", 1, &key_av);
    assert_int_equal(router_read(f->r, 42, 1, &req, &f->arena, on_read, &rc, &err), -1);
    assert_int_equal(err.code, ERR_RESOURCE_NOT_FOUND);
    const partition_desc *parts;
    size_t n;
    assert_int_equal(router_table_partitions(f->r, 42, &parts, &n, &err), -1);
    assert_null(router_partition_for_hash(f->r, 42, 0));
    uint32_t tid;
    create_table(f, &tid, "t2", 2);
    /* A partition id of another table. */
    assert_int_equal(router_read(f->r, tid + 1, 1, &req, &f->arena, on_read, &rc, &err), -1);
    /* An apply error reaches the callback. */
    len = make_cmd(cmd, 'X', 5, "a", "b");
    assert_int_equal(router_write(f->r, tid, 5, cmd, len, on_done, &o, &err), 0);
    wait_for(f, &o.done, 1);
    assert_int_equal(o.code, ERR_IO);
    /* A bad catalog record. */
    uint8_t junk[12] = {1, 1, 0};
    outcome oc = {0};
    assert_int_equal(router_catalog_write(f->r, junk, sizeof junk, on_done, &oc, &err), 0);
    wait_for(f, &oc.done, 1);
    assert_int_equal(oc.code, ERR_CORRUPT);
}

/* One node leads nothing: a graceful stop has nothing to hand over, and says so at once
 * (stratad's SIGTERM path waits for router_hand_off to return 0). */
static void test_hand_off_single(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "t3", 2);
    size_t handed = 99;
    assert_int_equal(router_hand_off(f->r, &handed), 0);
    assert_int_equal(handed, 0);
    assert_int_equal(router_hand_off(f->r, NULL), 0);
}

static void count_call(void *ctx)
{
    ++*(int *)ctx;
}

/* One node: the catalog cannot lag, and a sync only defers its callback to the loop (a
 * callback from inside the call would re-enter the API mid-answer). */
static void test_sync_catalog_single(void **state)
{
    fixture *f = *state;
    assert_false(router_catalog_may_lag(f->r));
    int calls = 0;
    router_sync_catalog(f->r, count_call, &calls);
    router_sync_catalog(f->r, count_call, &calls);
    assert_int_equal(calls, 0);
    while (calls < 2)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* the timers' close callbacks: nothing leaks */
    assert_int_equal(calls, 2);
}

static void test_restart_clean(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "t3", 3);
    outcome o = {0};
    put_many(f, tid, 0, 20, &o);
    wait_for(f, &o.done, 20);
    router_close(f->r);
    f->r = open_router(f);
    const table_info *t = catalog_find(router_catalog(f->r), "t3", 2);
    assert_non_null(t);
    assert_int_equal(t->schema.table_id, tid);
    char v[32];
    for (int i = 0; i < 20; i++) {
        assert_int_equal(read_key(f, tid, i, v), 1);
    }
    /* Counted from the engine on open. */
    assert_int_equal(router_table_stats(f->r, tid).item_count, 20);
    /* New ids continue after the old ones. */
    uint32_t tid2;
    create_table(f, &tid2, "t4", 2);
    assert_true(tid2 > tid);
}

/* A child process writes, waits for the acknowledgements and dies without closing
 * anything: every acknowledged write must be there after recovery. */
static void test_crash_recovery(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "crash", 4);
    router_close(f->r);
    f->r = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fixture child;
        memset(&child, 0, sizeof child);
        strcpy(child.dir, f->dir);
        uv_loop_init(&child.loop);
        child.r = open_router(&child);
        outcome o = {0};
        put_many(&child, tid, 0, 200, &o);
        wait_for(&child, &o.done, 200);
        /* And a table created just before the crash. */
        uint32_t t2;
        create_table(&child, &t2, "late", 2);
        _exit(o.code == ERR_NONE ? 0 : 3);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    f->r = open_router(f);
    for (int i = 0; i < 200; i++) {
        char v[32], want[32];
        snprintf(want, sizeof want, "v%d", i);
        assert_int_equal(read_key(f, tid, i, v), 1);
        assert_string_equal(v, want);
    }
    assert_non_null(catalog_find(router_catalog(f->r), "late", 4));
    assert_int_equal(router_table_stats(f->r, tid).item_count, 200);
    /* Writes continue after the recovered log tail. */
    outcome o = {0};
    put_many(f, tid, 200, 10, &o);
    wait_for(f, &o.done, 10);
    assert_int_equal(o.code, ERR_NONE);
    router_close(f->r);
    f->r = open_router(f);
    assert_int_equal(read_key(f, tid, 205, NULL), 1);
}

static void test_drop(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "gone", 2);
    outcome o = {0};
    put_many(f, tid, 0, 10, &o);
    /* Dropped while the writes are in flight: they are refused, not applied. */
    drop_table(f, "gone");
    wait_for(f, &o.done, 10);
    assert_null(catalog_find(router_catalog(f->r), "gone", 4));
    strata_err err;
    uint8_t cmd[64];
    size_t len = make_cmd(cmd, 'P', 1, "a", "b");
    assert_int_equal(router_write(f->r, tid, 1, cmd, len, on_done, &o, &err), -1);
    assert_int_equal(err.code, ERR_RESOURCE_NOT_FOUND);
    /* A new table reuses the name, not the id, and sees none of the old data. */
    uint32_t tid2;
    create_table(f, &tid2, "gone", 2);
    assert_true(tid2 != tid);
    assert_int_equal(router_table_stats(f->r, tid2).item_count, 0);
    router_close(f->r);
    f->r = open_router(f);
    assert_int_equal(catalog_count(router_catalog(f->r)), 1);
    assert_int_equal(catalog_find(router_catalog(f->r), "gone", 4)->schema.table_id, tid2);
}

static void test_drop_data_gone(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "data", 1);
    outcome o = {0};
    put_many(f, tid, 0, 5, &o);
    wait_for(f, &o.done, 5);
    drop_table(f, "data");
    router_close(f->r);
    f->r = open_router(f);
    /* The engine holds nothing under the old table id. */
    uint32_t tid2;
    create_table(f, &tid2, "other", 1);
    assert_int_equal(router_table_stats(f->r, tid2).item_count, 0);
    assert_null(catalog_find_id(router_catalog(f->r), tid));
}

/* The engine pushes back: the queue waits and retries, keeping the log order. */
typedef struct {
    int done;
    int order[2];
} busy_ctx;

static void on_busy_a(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    busy_ctx *b = ctx;
    (void)res;
    (void)len;
    assert_null(err);
    b->order[0] = apply_order;
    b->done++;
}

static void on_busy_b(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    busy_ctx *b = ctx;
    (void)res;
    (void)len;
    assert_null(err);
    b->order[1] = apply_order;
    b->done++;
}

static void test_busy_retry(void **state)
{
    fixture *f = *state;
    uint32_t tid;
    create_table(f, &tid, "busy", 1);
    busy_left = 3;
    apply_order = 0;
    busy_ctx b = {0};
    uint8_t cmd[64];
    size_t len = make_cmd(cmd, 'B', 11, "kb", "vb");
    assert_int_equal(router_write(f->r, tid, 11, cmd, len, on_busy_a, &b, NULL), 0);
    len = make_cmd(cmd, 'P', 12, "kp", "vp");
    assert_int_equal(router_write(f->r, tid, 12, cmd, len, on_busy_b, &b, NULL), 0);
    wait_for(f, &b.done, 2);
    assert_int_equal(busy_left, 0);
    assert_int_equal(b.order[0], 1);
    assert_int_equal(b.order[1], 2);
    /* The write refused three times is in the engine, and survives a restart. */
    router_close(f->r);
    f->r = open_router(f);
    read_ctx rc = {.hash = 11, .key = "kb"};
    const partition_desc *p = router_partition_for_hash(f->r, tid, 11);
    av key_av;
    partition_read_req req = fake_req("kb", 11, &key_av);
    assert_int_equal(router_read(f->r, tid, p->id, &req, &f->arena, on_read, &rc, NULL), 0);
    wait_for(f, &rc.done, 1);
    assert_int_equal(rc.found, 1);
    assert_string_equal(rc.value, "vb");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_write_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hand_off_single, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_catalog_single, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_recovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_data_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_retry, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
