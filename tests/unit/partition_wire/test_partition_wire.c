/*
 * Partition reads over the wire (cluster/partition_wire.c) against the real engine.
 *
 * The property: for any read request `req` (callbacks included),
 *     finish(req, res_decode(res_encode(partition_read(req_decode(req_encode(req))))))
 * equals partition_read(req) field by field (items by av_equal). Checked over many
 * random GET / QUERY / SCAN requests (both directions, limits, small and 1 MB pages,
 * start keys, filters, projections, count_only, paging on LastEvaluatedKey) on two
 * tables of a few hundred items, some large enough for pages to end on their size.
 * Also: request and result round trips, refusal of malformed or out-of-bounds messages
 * (hand-made, truncated, bit-flipped: always ERR_CORRUPT or a faithful decode), the wire
 * bound on the worst-case page, and finish refusing results that are not raw.
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
#include "partition.pb-c.h"
#include "storage/data/codec.h"
#include "storage/lsm/lsm.h"

#define NPK       10  /* partition keys of the range table */
#define NSK       30  /* sort keys under each */
#define NHASH     120 /* items of the hash-only table */
#define NREQUESTS 1500

/* ------------------------------------------------------------------ fixture */

typedef struct {
    char dir[64];
    uv_loop_t loop;
    lsm *db;
    arena a;                /* the items and keys written (kept for the whole test) */
    partition_desc part[2]; /* [0] range table 3, [1] hash-only table 4 */
    partition_key_schema ks[2];
    av *keys[2][NPK * NSK]; /* the key of every item written */
    uint32_t nkeys[2];
    uint64_t log_index;
    uint64_t rng;
} fx;

static uint32_t rnd(fx *f, uint32_t n)
{
    /* xorshift64*: deterministic, so a failure is reproducible. */
    f->rng ^= f->rng >> 12;
    f->rng ^= f->rng << 25;
    f->rng ^= f->rng >> 27;
    return (uint32_t)((f->rng * 2685821657736338717ull) >> 33) % n;
}

static av s_val(arena *a, const char *s, size_t len)
{
    av v = {.type = AV_S};
    v.u.bytes.ptr = arena_memdup(a, s, len ? len : 1);
    v.u.bytes.len = (uint32_t)len;
    return v;
}

static av n_val(int64_t i)
{
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)i);
    av v = {.type = AV_N};
    strata_err err;
    assert_int_equal(num_parse(t, strlen(t), &v.u.n, &err), 0);
    return v;
}

/* A copy of `n` attributes (never a zero-byte allocation). */
static av_attr *attrs_dup(arena *a, const av_attr *attrs, uint32_t n)
{
    av_attr *c = arena_alloc(a, n * sizeof *attrs + 1);
    if (c && n)
        memcpy(c, attrs, n * sizeof *attrs);
    return c;
}

/* A map of `n` attributes (sorted here). */
static av *map_n(arena *a, const av_attr *attrs, uint32_t n)
{
    av *m = arena_zalloc(a, sizeof *m);
    m->type = AV_M;
    m->u.map.attrs = attrs_dup(a, attrs, n);
    m->u.map.count = n;
    strata_err err;
    assert_int_equal(av_map_sort(m, &err), 0);
    return m;
}

static av_attr attr(const char *name, av v)
{
    return (av_attr){.name = name, .name_len = (uint32_t)strlen(name), .value = v};
}

static void put(fx *f, int t, av *item, av *key)
{
    partition_write w = {.kind = PARTITION_PUT,
                         .table_id = f->part[t].table_id,
                         .ks = f->ks[t],
                         .key = key,
                         .item = item,
                         .now_ms = 1700000000000ull};
    buf cmd, res;
    buf_init(&cmd, 0);
    buf_init(&res, 0);
    strata_err err;
    assert_int_equal(partition_write_encode(&w, &cmd, &err), 0);
    assert_int_equal(
        partition_apply(f->db, &f->part[t], cmd.data, cmd.len, ++f->log_index, &res, &err), 0);
    partition_write_result r;
    assert_int_equal(partition_result_decode(res.data, res.len, &f->a, &r, &err), 0);
    assert_int_equal(r.code, ERR_NONE);
    buf_free(&cmd);
    buf_free(&res);
    f->keys[t][f->nkeys[t]++] = key;
}

/* The non-key attributes every item has: c (filter), a, l, m (projections), b (size:
 * one item in ten is ~40 KB, so pages end on 1 MB too). */
static uint32_t body(fx *f, av_attr *at)
{
    static char blob[48 * 1024];
    if (blob[0] == 0)
        memset(blob, 'x', sizeof blob);
    char c[2] = {(char)('a' + rnd(f, 5)), 0};
    size_t blen = rnd(f, 10) == 0 ? 30000 + rnd(f, 12000) : rnd(f, 300);
    uint32_t n = 0;
    at[n++] = attr("c", s_val(&f->a, c, 1));
    at[n++] = attr("a", n_val((int64_t)rnd(f, 1000) - 500));
    at[n++] = attr("b", s_val(&f->a, blob, blen));
    av *l = arena_zalloc(&f->a, 2 * sizeof *l);
    l[0] = n_val(rnd(f, 9));
    l[1] = s_val(&f->a, "e", 1);
    av lv = {.type = AV_L};
    lv.u.list.elems = l;
    lv.u.list.count = 2;
    at[n++] = attr("l", lv);
    av_attr inner[2] = {attr("x", n_val(rnd(f, 50))), attr("y", s_val(&f->a, "yy", 2))};
    at[n++] = attr("m", *map_n(&f->a, inner, 1 + rnd(f, 2)));
    return n;
}

static void fill(fx *f)
{
    av_attr at[8];
    for (int p = 0; p < NPK; p++) {
        char pk[8];
        snprintf(pk, sizeof pk, "p%d", p);
        for (int s = 0; s < NSK; s++) {
            av pkv = s_val(&f->a, pk, strlen(pk)), skv = n_val(s * 3 - 20);
            av_attr k[2] = {attr("pk", pkv), attr("sk", skv)};
            uint32_t n = body(f, at);
            at[n++] = k[0];
            at[n++] = k[1];
            put(f, 0, map_n(&f->a, at, n), map_n(&f->a, k, 2));
        }
    }
    for (int i = 0; i < NHASH; i++) {
        av_attr k = attr("id", n_val(i * 7 - 100));
        uint32_t n = body(f, at);
        at[n++] = k;
        put(f, 1, map_n(&f->a, at, n), map_n(&f->a, &k, 1));
    }
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/strata-pwire-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    uv_loop_init(&f->loop);
    lsm_options o = {.dir = f->dir, .no_compaction = true, .memtable_bytes = 64 << 20};
    strata_err err;
    if (lsm_open(&o, &f->loop, &f->db, &err) < 0) {
        fprintf(stderr, "lsm_open: %s\n", err.msg);
        return -1;
    }
    arena_init(&f->a, 0);
    f->rng = 0x9e3779b97f4a7c15ull;
    f->part[0] = (partition_desc){.id = 7, .table_id = 3, .hash_lo = 0, .hash_hi = UINT64_MAX};
    f->part[1] = (partition_desc){.id = 8, .table_id = 4, .hash_lo = 0, .hash_hi = UINT64_MAX};
    f->ks[0] = (partition_key_schema){.hash_name = "pk",
                                      .hash_name_len = 2,
                                      .hash_type = AV_S,
                                      .range_name = "sk",
                                      .range_name_len = 2,
                                      .range_type = AV_N};
    f->ks[1] = (partition_key_schema){.hash_name = "id", .hash_name_len = 2, .hash_type = AV_N};
    fill(f);
    *state = f;
    return 0;
}

static void close_cb(void *arg, const strata_err *err)
{
    (void)err;
    *(bool *)arg = true;
}

static int teardown(void **state)
{
    fx *f = *state;
    bool done = false;
    lsm_close(f->db, close_cb, &done);
    while (!done)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_loop_close(&f->loop);
    arena_free(&f->a);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

/* ------------------------------------------------------------------ callbacks */

typedef struct {
    int mode; /* 0: c == ch, 1: c != ch, 2: none, 3: error on the nth item */
    char ch;
    int calls; /* for mode 3 */
    int fail_at;
} filter_ctx;

static int filter_fn(void *ctx, const av *item, strata_err *err)
{
    filter_ctx *c = ctx;
    const av *v = av_map_get(item, "c", 1);
    bool eq = v && v->type == AV_S && v->u.bytes.len == 1 && v->u.bytes.ptr[0] == c->ch;
    switch (c->mode) {
    case 0:
        return eq;
    case 1:
        return !eq;
    case 2:
        return 0;
    default:
        if (++c->calls == c->fail_at)
            return strata_err_set(err, ERR_VALIDATION, "filter failed on purpose");
        return 1;
    }
}

typedef struct {
    const char *names[4];
    int n;
} project_ctx;

/* Keeps the named top-level attributes that exist (an empty map if none does). */
static int project_fn(void *ctx, arena *a, const av *item, av *out, strata_err *err)
{
    project_ctx *c = ctx;
    av_attr at[4];
    uint32_t n = 0;
    for (int i = 0; i < c->n; i++) {
        const av *v = av_map_get(item, c->names[i], strlen(c->names[i]));
        bool dup = false;
        for (int j = 0; j < i; j++)
            dup = dup || strcmp(c->names[j], c->names[i]) == 0;
        if (v && !dup)
            at[n++] = attr(c->names[i], *v);
    }
    out->type = AV_M;
    out->u.map.attrs = attrs_dup(a, at, n);
    out->u.map.count = n;
    if (out->u.map.attrs == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    return av_map_sort(out, err);
}

/* ------------------------------------------------------------------ comparisons */

static bool av_same(const av *x, const av *y)
{
    if (x == NULL || y == NULL)
        return x == y;
    return av_equal(x, y);
}

static void assert_res_equal(const partition_read_res *x, const partition_read_res *y,
                             const char *what, int nth)
{
    if (x->count != y->count || x->scanned_count != y->scanned_count ||
        x->bytes_read != y->bytes_read || x->found != y->found ||
        (x->items == NULL) != (y->items == NULL) ||
        !av_same(x->last_evaluated_key, y->last_evaluated_key))
        fail_msg("%s #%d: count %u/%u scanned %u/%u bytes %llu/%llu found %d/%d items %p/%p "
                 "lek %p/%p",
                 what, nth, x->count, y->count, x->scanned_count, y->scanned_count,
                 (unsigned long long)x->bytes_read, (unsigned long long)y->bytes_read, x->found,
                 y->found, (void *)x->items, (void *)y->items, (const void *)x->last_evaluated_key,
                 (const void *)y->last_evaluated_key);
    for (uint32_t i = 0; x->items && i < x->count; i++)
        if (!av_equal(&x->items[i], &y->items[i]))
            fail_msg("%s #%d: item %u differs", what, nth, i);
}

/* The decoded request is the raw request: same read, no callbacks, no count_only. */
static void assert_req_raw_equal(const partition_read_req *r, const partition_read_req *d, int nth)
{
    assert_int_equal(d->kind, r->kind);
    assert_int_equal(d->table_id, r->table_id);
    assert_int_equal(d->ks.hash_type, r->ks.hash_type);
    assert_int_equal(d->ks.range_type, r->ks.range_type);
    assert_int_equal(d->ks.hash_name_len, r->ks.hash_name_len);
    assert_memory_equal(d->ks.hash_name, r->ks.hash_name, r->ks.hash_name_len);
    assert_int_equal(d->ks.hash_name[d->ks.hash_name_len], '\0');
    if (r->ks.range_type) {
        assert_int_equal(d->ks.range_name_len, r->ks.range_name_len);
        assert_memory_equal(d->ks.range_name, r->ks.range_name, r->ks.range_name_len);
    }
    bool get = r->kind == PARTITION_GET, query = r->kind == PARTITION_QUERY;
    if (!av_same(d->key, get ? r->key : NULL) ||
        !av_same(d->hash_value, query ? r->hash_value : NULL) ||
        !av_same(d->sk1, query ? r->sk1 : NULL) || !av_same(d->sk2, query ? r->sk2 : NULL) ||
        !av_same(d->exclusive_start_key, get ? NULL : r->exclusive_start_key))
        fail_msg("request #%d: a value differs after the round trip", nth);
    assert_int_equal(d->sk_op, query ? r->sk_op : PARTITION_SK_ANY);
    assert_int_equal(d->forward, r->forward);
    assert_int_equal(d->hash_lo, r->hash_lo);
    assert_int_equal(d->hash_hi, r->hash_hi);
    assert_int_equal(d->limit, r->limit);
    assert_int_equal(d->max_bytes, r->max_bytes);
    assert_int_equal(d->consistent, r->consistent);
    assert_false(d->count_only);
    assert_null(d->filter);
    assert_null(d->filter_ctx);
    assert_null(d->project);
    assert_null(d->project_ctx);
}

/* ------------------------------------------------------------------ random requests */

typedef struct {
    partition_read_req req;
    int t; /* table */
    filter_ctx fc;
    project_ctx pc;
} gen;

static const av *sk_operand(fx *f, arena *a)
{
    av *v = arena_zalloc(a, sizeof *v);
    *v = n_val((int64_t)rnd(f, 110) - 30);
    return v;
}

static void random_request(fx *f, arena *a, gen *g)
{
    memset(g, 0, sizeof *g);
    partition_read_req *r = &g->req;
    uint32_t kind = rnd(f, 10);
    g->t = rnd(f, 2);
    r->kind = kind < 2 ? PARTITION_GET : kind < 6 && g->t == 0 ? PARTITION_QUERY : PARTITION_SCAN;
    r->table_id = f->part[g->t].table_id;
    r->ks = f->ks[g->t];
    r->consistent = rnd(f, 2);
    r->count_only = rnd(f, 4) == 0;
    static const uint32_t limits[] = {0, 0, 1, 2, 3, 7, 20, 100};
    r->limit = limits[rnd(f, 8)];
    static const size_t pages[] = {0, 0, PARTITION_PAGE_BYTES, 1, 5000, 60000, 300000};
    r->max_bytes = pages[rnd(f, 7)];
    r->forward = rnd(f, 2);
    const av *some_key = f->keys[g->t][rnd(f, f->nkeys[g->t])];
    if (r->kind == PARTITION_GET) {
        if (rnd(f, 5) == 0) { /* a missing item */
            av_attr k[2] = {attr(g->t ? "id" : "pk", g->t ? n_val(99999) : s_val(a, "zz", 2)),
                            attr("sk", n_val(1))};
            some_key = map_n(a, k, g->t ? 1 : 2);
        }
        r->key = some_key;
    } else if (r->kind == PARTITION_QUERY) {
        r->hash_value = av_map_get(some_key, "pk", 2);
        r->sk_op = (partition_sk_op)rnd(f, PARTITION_SK_BETWEEN + 1); /* no begins_with on N */
        if (r->sk_op != PARTITION_SK_ANY)
            r->sk1 = sk_operand(f, a);
        if (r->sk_op == PARTITION_SK_BETWEEN)
            r->sk2 = sk_operand(f, a);
    } else {
        uint64_t h1 = ((uint64_t)rnd(f, 1u << 30) << 34) | rnd(f, 1u << 30);
        uint64_t h2 = ((uint64_t)rnd(f, 1u << 30) << 34) | rnd(f, 1u << 30);
        r->hash_lo = rnd(f, 3) ? 0 : h1 < h2 ? h1 : h2;
        r->hash_hi = rnd(f, 3) ? UINT64_MAX : h1 < h2 ? h2 : h1;
    }
    if (r->kind != PARTITION_GET && rnd(f, 3) == 0) {
        /* A start key of the same partition key for a query, any key for a scan. */
        r->exclusive_start_key = f->keys[g->t][rnd(f, f->nkeys[g->t])];
        if (r->kind == PARTITION_QUERY) {
            av_attr k[2] = {attr("pk", *r->hash_value), attr("sk", *sk_operand(f, a))};
            r->exclusive_start_key = map_n(a, k, 2);
        }
    }
    if (rnd(f, 2)) {
        g->fc = (filter_ctx){.mode = (int)rnd(f, 3), .ch = (char)('a' + rnd(f, 5))};
        if (rnd(f, 30) == 0)
            g->fc = (filter_ctx){.mode = 3, .fail_at = 1 + (int)rnd(f, 5)};
        r->filter = filter_fn;
        r->filter_ctx = &g->fc;
    }
    if (rnd(f, 2)) {
        static const char *names[] = {"a", "c", "m", "pk", "nope", "sk", "id", "l"};
        g->pc.n = 1 + (int)rnd(f, 4);
        for (int i = 0; i < g->pc.n; i++)
            g->pc.names[i] = names[rnd(f, 8)];
        r->project = project_fn;
        r->project_ctx = &g->pc;
    }
}

/* The remote path: encode the request, decode it, read, encode the result, decode it,
 * finish it. Returns partition_read_finish's return code. */
static int remote_read(fx *f, gen *g, arena *a, partition_read_res *out, strata_err *err, int nth)
{
    buf rq, rs;
    buf_init(&rq, 0);
    buf_init(&rs, 0);
    strata_err e;
    assert_int_equal(partition_read_req_encode(&g->req, &rq, &e), 0);
    partition_read_req raw;
    if (partition_read_req_decode(rq.data, rq.len, a, &raw, &e) < 0)
        fail_msg("request #%d does not decode: %s", nth, e.msg);
    assert_req_raw_equal(&g->req, &raw, nth);
    partition_read_res rres;
    assert_int_equal(partition_read(f->db, &f->part[g->t], &raw, a, &rres, &e), 0);
    if (partition_read_res_encode(&rres, &rs, &e) < 0)
        fail_msg("result #%d does not encode: %s", nth, e.msg);
    assert_true(rs.len <= PARTITION_READ_RES_WIRE_MAX);
    if (partition_read_res_decode(rs.data, rs.len, a, out, &e) < 0)
        fail_msg("result #%d does not decode: %s", nth, e.msg);
    assert_res_equal(&rres, out, "raw round trip", nth);
    buf_free(&rq);
    buf_free(&rs);
    if (g->fc.mode == 3)
        g->fc.calls = 0; /* the failing filter counts its calls per read */
    return partition_read_finish(&g->req, a, out, err);
}

/* finish(decode(encode(read(raw)))) == read(req), following LastEvaluatedKey for up to
 * three pages. */
static void test_remote_equals_local(void **state)
{
    fx *f = *state;
    int pages = 0, leks = 0, filtered = 0, errors = 0;
    for (int nth = 0; nth < NREQUESTS; nth++) {
        arena a;
        arena_init(&a, 0);
        gen g;
        random_request(f, &a, &g);
        for (int page = 0; page < 3; page++) {
            partition_read_res local, remote;
            strata_err e1, e2;
            if (g.fc.mode == 3)
                g.fc.calls = 0;
            int rc1 = partition_read(f->db, &f->part[g.t], &g.req, &a, &local, &e1);
            int rc2 = remote_read(f, &g, &a, &remote, &e2, nth);
            assert_int_equal(rc1, rc2);
            pages++;
            if (rc1 < 0) {
                assert_int_equal(e1.code, e2.code);
                assert_string_equal(e1.msg, e2.msg);
                errors++;
                break;
            }
            assert_res_equal(&local, &remote, "finished read", nth);
            filtered += local.count != local.scanned_count;
            if (local.last_evaluated_key == NULL || g.req.kind == PARTITION_GET)
                break;
            leks++;
            g.req.exclusive_start_key = local.last_evaluated_key;
        }
        arena_free(&a);
    }
    /* The random requests reach every case that matters. */
    print_message("%d pages, %d continued on LastEvaluatedKey, %d filtered, %d errors\n", pages,
                  leks, filtered, errors);
    assert_true(leks > 100 && filtered > 100 && errors > 0);
}

/* ------------------------------------------------------------------ round trips */

/* A finished (projected, count_only) result encodes and decodes as is too. */
static void test_result_round_trip(void **state)
{
    fx *f = *state;
    for (int nth = 0; nth < 300; nth++) {
        arena a;
        arena_init(&a, 0);
        gen g;
        random_request(f, &a, &g);
        g.fc.mode = g.fc.mode == 3 ? 0 : g.fc.mode;
        partition_read_res r, d;
        strata_err err;
        assert_int_equal(partition_read(f->db, &f->part[g.t], &g.req, &a, &r, &err), 0);
        buf b;
        buf_init(&b, 0);
        assert_int_equal(partition_read_res_encode(&r, &b, &err), 0);
        assert_int_equal(partition_read_res_decode(b.data, b.len, &a, &d, &err), 0);
        assert_res_equal(&r, &d, "result round trip", nth);
        buf_free(&b);
        arena_free(&a);
    }
}

/* The encoder refuses what the decoder would refuse. */
static void test_encode_refuses(void **state)
{
    fx *f = *state;
    arena a;
    arena_init(&a, 0);
    partition_read_req ok = {.kind = PARTITION_QUERY,
                             .table_id = 3,
                             .ks = f->ks[0],
                             .hash_value = av_map_get(f->keys[0][0], "pk", 2)};
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(partition_read_req_encode(&ok, &b, &err), 0);

    partition_read_req r = ok;
    r.max_bytes = PARTITION_PAGE_BYTES + 1;
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    assert_int_equal(err.code, ERR_INTERNAL);
    r = ok;
    r.sk_op = PARTITION_SK_BEGINS_WITH; /* on an N sort key */
    r.sk1 = sk_operand(f, &a);
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.sk_op = PARTITION_SK_EQ; /* no operand */
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.sk_op = (partition_sk_op)42;
    r.sk1 = sk_operand(f, &a);
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.hash_value = av_map_get(f->keys[0][0], "sk", 2); /* N for an S key */
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.kind = (partition_read_kind)9;
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.kind = PARTITION_GET; /* without a key */
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r.key = f->keys[1][0]; /* the other table's key */
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.exclusive_start_key = f->keys[1][0];
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    r = ok;
    r.ks.range_name = "pk"; /* same name as the partition key */
    assert_int_equal(partition_read_req_encode(&r, &b, &err), -1);
    buf_free(&b);
    arena_free(&a);
}

/* ------------------------------------------------------------------ hostile bytes */

static size_t pack_req(const Strata__PartitionReadRequest *m, uint8_t *out, size_t cap)
{
    size_t n = strata__partition_read_request__get_packed_size(m);
    assert_true(n <= cap);
    return strata__partition_read_request__pack(m, out);
}

static ProtobufCBinaryData bytes_of(arena *a, const av *m)
{
    buf b;
    buf_init(&b, 0);
    item_encode(m, &b);
    ProtobufCBinaryData d = {b.len, arena_memdup(a, b.data, b.len)};
    buf_free(&b);
    return d;
}

static ProtobufCBinaryData value_bytes(arena *a, av v)
{
    av_attr at = attr("v", v);
    return bytes_of(a, map_n(a, &at, 1));
}

static void expect_req_corrupt(const Strata__PartitionReadRequest *m, const char *what)
{
    static uint8_t b[1 << 16];
    size_t n = pack_req(m, b, sizeof b);
    arena a;
    arena_init(&a, 0);
    partition_read_req out;
    strata_err err;
    strata_err_clear(&err);
    if (partition_read_req_decode(b, n, &a, &out, &err) == 0 || err.code != ERR_CORRUPT)
        fail_msg("%s: decoded (%s)", what, err.msg);
    arena_free(&a);
}

/* Hand-made requests, each wrong in one way the protobuf layer cannot see. */
static void test_decode_refuses(void **state)
{
    fx *f = *state;
    arena a;
    arena_init(&a, 0);
    Strata__PartitionKeySchema ks = STRATA__PARTITION_KEY_SCHEMA__INIT;
    ks.hash_name = "pk";
    ks.hash_type = AV_S;
    ks.range_name = "sk";
    ks.range_type = AV_N;
    Strata__PartitionReadRequest ok = STRATA__PARTITION_READ_REQUEST__INIT;
    ok.kind = STRATA__PARTITION_READ_REQUEST__KIND__QUERY;
    ok.table_id = 3;
    ok.key_schema = &ks;
    ok.hash_value = value_bytes(&a, s_val(&a, "p1", 2));
    ok.sk_op = PARTITION_SK_BETWEEN;
    ok.sk1 = value_bytes(&a, n_val(1));
    ok.sk2 = value_bytes(&a, n_val(9));
    {
        uint8_t b[4096];
        size_t n = pack_req(&ok, b, sizeof b);
        partition_read_req out;
        strata_err err;
        assert_int_equal(partition_read_req_decode(b, n, &a, &out, &err), 0);
        assert_int_equal(out.sk_op, PARTITION_SK_BETWEEN);
    }
    Strata__PartitionReadRequest m;
    Strata__PartitionKeySchema k2;

#define CASE(what, change)                                                                         \
    do {                                                                                           \
        m = ok;                                                                                    \
        k2 = ks;                                                                                   \
        m.key_schema = &k2;                                                                        \
        change;                                                                                    \
        expect_req_corrupt(&m, what);                                                              \
    } while (0)

    CASE("kind 0", m.kind = 0);
    CASE("kind 4", m.kind = 4);
    CASE("kind negative", m.kind = -1);
    CASE("sk_op 8", m.sk_op = 8);
    CASE("sk_op huge", m.sk_op = UINT32_MAX);
    CASE("no key schema", m.key_schema = NULL);
    CASE("hash type 0", k2.hash_type = 0);
    CASE("hash type BOOL", k2.hash_type = AV_BOOL);
    CASE("range type M", k2.range_type = AV_M);
    CASE("empty hash name", k2.hash_name = "");
    CASE("same names", k2.range_name = "pk");
    CASE("range name without type", (k2.range_type = 0, m.sk_op = 0, m.sk1.len = 0, m.sk2.len = 0));
    CASE("sort op without sort key", k2.range_type = 0);
    CASE("begins_with on N", (m.sk_op = PARTITION_SK_BEGINS_WITH, m.sk2.len = 0));
    CASE("BETWEEN without sk2", m.sk2.len = 0);
    CASE("EQ with sk2", m.sk_op = PARTITION_SK_EQ);
    CASE("ANY with sk1", (m.sk_op = PARTITION_SK_ANY, m.sk2.len = 0));
    CASE("sk1 of the wrong type", m.sk1 = value_bytes(&a, s_val(&a, "x", 1)));
    CASE("hash value of the wrong type", m.hash_value = value_bytes(&a, n_val(1)));
    CASE("no hash value", m.hash_value.len = 0);
    CASE("hash value not wrapped", m.hash_value = bytes_of(&a, f->keys[0][0]));
    CASE("garbage value", (m.sk1.data = (uint8_t *)"\x01\x05", m.sk1.len = 2));
    CASE("page over 1 MB", m.max_bytes = PARTITION_PAGE_BYTES + 1);
    CASE("page way over", m.max_bytes = UINT64_MAX);
    CASE("key on a query", m.key = bytes_of(&a, f->keys[0][0]));
    CASE("scan with a hash value", m.kind = STRATA__PARTITION_READ_REQUEST__KIND__SCAN);
    CASE("get without key", (m.kind = STRATA__PARTITION_READ_REQUEST__KIND__GET,
                             m.hash_value.len = 0, m.sk_op = 0, m.sk1.len = 0, m.sk2.len = 0));
    CASE("get with a bad key",
         (m.kind = STRATA__PARTITION_READ_REQUEST__KIND__GET, m.hash_value.len = 0, m.sk_op = 0,
          m.sk1.len = 0, m.sk2.len = 0, m.key = bytes_of(&a, f->keys[1][0])));
    CASE("start key of another schema", m.exclusive_start_key = bytes_of(&a, f->keys[1][0]));
    {
        /* A start key with one attribute too many. */
        av_attr at[3] = {attr("pk", s_val(&a, "p", 1)), attr("sk", n_val(1)), attr("zz", n_val(2))};
        CASE("start key with extras", m.exclusive_start_key = bytes_of(&a, map_n(&a, at, 3)));
        /* A partition key value over 2048 bytes in a GET key. */
        static char big[3000];
        memset(big, 'k', sizeof big);
        at[0] = attr("pk", s_val(&a, big, sizeof big));
        CASE("oversized key",
             (m.kind = STRATA__PARTITION_READ_REQUEST__KIND__GET, m.hash_value.len = 0, m.sk_op = 0,
              m.sk1.len = 0, m.sk2.len = 0, m.key = bytes_of(&a, map_n(&a, at, 2))));
    }
#undef CASE
    /* Over the wire bound, whatever it holds. */
    size_t n = PARTITION_READ_REQ_WIRE_MAX + 1;
    uint8_t *big = calloc(1, n);
    partition_read_req out;
    strata_err err;
    assert_int_equal(partition_read_req_decode(big, n, &a, &out, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    free(big);
    arena_free(&a);
}

/* Each truncation and each byte flip of `b` either is refused with ERR_CORRUPT or
 * decodes into something valid; a truncation that decodes is the same message's prefix,
 * so it encodes back to exactly those bytes. Returns how many variants were refused. */
static int mangle_req(const buf *b)
{
    int refused = 0;
    uint8_t *c = malloc(b->len);
    for (size_t cut = 0; cut < b->len; cut++) {
        arena a;
        arena_init(&a, 0);
        partition_read_req r;
        strata_err err;
        strata_err_clear(&err);
        memcpy(c, b->data, cut);
        if (partition_read_req_decode(c, cut, &a, &r, &err) < 0) {
            assert_int_equal(err.code, ERR_CORRUPT);
            refused++;
        } else {
            buf e;
            buf_init(&e, 0);
            assert_int_equal(partition_read_req_encode(&r, &e, &err), 0);
            assert_int_equal(e.len, cut);
            assert_memory_equal(e.data, c, cut);
            buf_free(&e);
        }
        arena_free(&a);
    }
    for (size_t i = 0; i < b->len; i++) {
        for (int bit = 0; bit < 9; bit++) {
            memcpy(c, b->data, b->len);
            c[i] ^= bit == 8 ? 0xff : (uint8_t)(1u << bit);
            arena a;
            arena_init(&a, 0);
            partition_read_req r;
            strata_err err;
            strata_err_clear(&err);
            if (partition_read_req_decode(c, b->len, &a, &r, &err) < 0) {
                assert_int_equal(err.code, ERR_CORRUPT);
                refused++;
            } else {
                buf e;
                buf_init(&e, 0);
                assert_int_equal(partition_read_req_encode(&r, &e, &err), 0);
                buf_free(&e);
            }
            arena_free(&a);
        }
    }
    free(c);
    return refused;
}

static int mangle_res(const buf *b)
{
    int refused = 0;
    uint8_t *c = malloc(b->len ? b->len : 1);
    for (size_t cut = 0; cut < b->len; cut++) {
        arena a;
        arena_init(&a, 0);
        partition_read_res r;
        strata_err err;
        strata_err_clear(&err);
        memcpy(c, b->data, cut);
        if (partition_read_res_decode(c, cut, &a, &r, &err) < 0) {
            assert_int_equal(err.code, ERR_CORRUPT);
            refused++;
        } else {
            buf e;
            buf_init(&e, 0);
            assert_int_equal(partition_read_res_encode(&r, &e, &err), 0);
            assert_int_equal(e.len, cut);
            assert_memory_equal(e.data, c, cut);
            buf_free(&e);
        }
        arena_free(&a);
    }
    for (size_t i = 0; i < b->len; i++) {
        for (int bit = 0; bit < 9; bit++) {
            memcpy(c, b->data, b->len);
            c[i] ^= bit == 8 ? 0xff : (uint8_t)(1u << bit);
            arena a;
            arena_init(&a, 0);
            partition_read_res r;
            strata_err err;
            strata_err_clear(&err);
            if (partition_read_res_decode(c, b->len, &a, &r, &err) < 0) {
                assert_int_equal(err.code, ERR_CORRUPT);
                refused++;
            } else {
                buf e;
                buf_init(&e, 0);
                assert_int_equal(partition_read_res_encode(&r, &e, &err), 0);
                buf_free(&e);
            }
            arena_free(&a);
        }
    }
    free(c);
    return refused;
}

static void test_truncated_and_flipped(void **state)
{
    fx *f = *state;
    int variants = 0, refused = 0;
    for (int nth = 0; nth < 15; nth++) {
        arena a;
        arena_init(&a, 0);
        gen g;
        random_request(f, &a, &g);
        g.req.max_bytes = 2000; /* small results: every byte gets mangled */
        g.req.limit = 3;
        buf rq, rs;
        buf_init(&rq, 0);
        buf_init(&rs, 0);
        strata_err err;
        assert_int_equal(partition_read_req_encode(&g.req, &rq, &err), 0);
        refused += mangle_req(&rq);
        variants += (int)rq.len * 10;
        g.req.filter = NULL;
        g.req.project = NULL;
        g.req.count_only = false;
        partition_read_res r;
        assert_int_equal(partition_read(f->db, &f->part[g.t], &g.req, &a, &r, &err), 0);
        assert_int_equal(partition_read_res_encode(&r, &rs, &err), 0);
        refused += mangle_res(&rs);
        variants += (int)rs.len * 10;
        buf_free(&rq);
        buf_free(&rs);
        arena_free(&a);
    }
    /* Most flips land in item payloads and stay valid; what matters is above (refused
     * only ever as ERR_CORRUPT, accepted only as something valid). */
    print_message("%d of %d mangled messages refused\n", refused, variants);
    assert_true(refused > variants / 20);
}

/* ------------------------------------------------------------------ bounds */

/* The worst page for the wire bound: 1 MB plus one item of the smallest items (an S
 * key of one byte under a one-byte name: size 2, 9 bytes on the wire) encodes within
 * PARTITION_READ_RES_WIRE_MAX; one more byte read is refused both ways. */
static void test_worst_page(void **state)
{
    (void)state;
    arena a;
    arena_init(&a, 0);
    uint32_t n = (uint32_t)(PARTITION_READ_PAGE_MAX / 2);
    partition_read_res r = {.count = n, .scanned_count = n, .bytes_read = 2ull * n};
    r.items = arena_zalloc(&a, n * sizeof *r.items);
    av_attr *at = arena_zalloc(&a, sizeof *at);
    *at = attr("k", s_val(&a, "v", 1));
    for (uint32_t i = 0; i < n; i++) {
        r.items[i].type = AV_M;
        r.items[i].u.map.attrs = at;
        r.items[i].u.map.count = 1;
    }
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(partition_read_res_encode(&r, &b, &err), 0);
    print_message("worst page: %u items, %zu bytes on the wire (bound %llu)\n", n, b.len,
                  (unsigned long long)PARTITION_READ_RES_WIRE_MAX);
    assert_true(b.len <= PARTITION_READ_RES_WIRE_MAX);
    partition_read_res d;
    assert_int_equal(partition_read_res_decode(b.data, b.len, &a, &d, &err), 0);
    assert_int_equal(d.count, n);
    /* Reading past 1 MB + 400 KB is no page partition_read makes. */
    r.bytes_read = PARTITION_READ_PAGE_MAX + 1;
    assert_int_equal(partition_read_res_encode(&r, &b, &err), -1);
    assert_int_equal(err.code, ERR_INTERNAL);
    Strata__PartitionReadResult m = STRATA__PARTITION_READ_RESULT__INIT;
    m.count = m.scanned_count = 1;
    m.bytes_read = PARTITION_READ_PAGE_MAX + 1;
    uint8_t small[64];
    size_t len = strata__partition_read_result__pack(&m, small);
    assert_int_equal(partition_read_res_decode(small, len, &a, &d, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    /* Counts that disagree. */
    m.bytes_read = 10;
    m.count = 2;
    len = strata__partition_read_result__pack(&m, small);
    assert_int_equal(partition_read_res_decode(small, len, &a, &d, &err), -1);
    m.count = 1;
    m.found = true;
    m.scanned_count = 1; /* found without its item */
    len = strata__partition_read_result__pack(&m, small);
    assert_int_equal(partition_read_res_decode(small, len, &a, &d, &err), -1);
    buf_free(&b);
    arena_free(&a);
}

/* finish only accepts raw results of its request. */
static void test_finish_refuses_non_raw(void **state)
{
    fx *f = *state;
    arena a;
    arena_init(&a, 0);
    project_ctx pc = {.names = {"a"}, .n = 1};
    partition_read_req req = {.kind = PARTITION_QUERY,
                              .table_id = 3,
                              .ks = f->ks[0],
                              .hash_value = av_map_get(f->keys[0][0], "pk", 2),
                              .limit = 5};
    partition_read_res raw, r;
    strata_err err;
    assert_int_equal(partition_read(f->db, &f->part[0], &req, &a, &raw, &err), 0);
    assert_int_equal(raw.count, 5);
    assert_non_null(raw.last_evaluated_key);
    r = raw;
    assert_int_equal(partition_read_finish(&req, &a, &r, &err), 0); /* raw of itself */

    req.project = project_fn; /* a projected result is not raw */
    req.project_ctx = &pc;
    partition_read_res projected;
    assert_int_equal(partition_read(f->db, &f->part[0], &req, &a, &projected, &err), 0);
    assert_int_equal(partition_read_finish(&req, &a, &projected, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);

    r = raw; /* items missing */
    r.count = r.scanned_count = 4;
    r.bytes_read -= item_size(&raw.items[4]);
    assert_int_equal(partition_read_finish(&req, &a, &r, &err), -1);
    r = raw; /* LastEvaluatedKey is not the last item's */
    r.last_evaluated_key = f->keys[0][NSK * 5];
    assert_int_equal(partition_read_finish(&req, &a, &r, &err), -1);
    r = raw; /* count_only result */
    r.items = NULL;
    assert_int_equal(partition_read_finish(&req, &a, &r, &err), -1);
    r = raw; /* GET's found on a query */
    req.kind = PARTITION_GET;
    req.key = f->keys[0][0];
    req.hash_value = NULL;
    assert_int_equal(partition_read_finish(&req, &a, &r, &err), -1);
    arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_equals_local),    cmocka_unit_test(test_result_round_trip),
        cmocka_unit_test(test_encode_refuses),         cmocka_unit_test(test_decode_refuses),
        cmocka_unit_test(test_truncated_and_flipped),  cmocka_unit_test(test_worst_page),
        cmocka_unit_test(test_finish_refuses_non_raw),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
