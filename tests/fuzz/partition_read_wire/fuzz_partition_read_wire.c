/*
 * libFuzzer harness for partition reads over the wire (cluster/partition_wire.c). The same
 * bytes go to both decoders, which must refuse anything malformed with ERR_CORRUPT and
 * never crash. What decodes must be safe to use:
 *  - a request: it encodes again (the encoder refuses exactly what the decoder refuses)
 *    into bytes that decode and encode to themselves; partition_read runs it on a real
 *    engine holding a few items (what a remote node does with it, once it has checked
 *    the request's key schema against its catalog); its raw result travels (encode,
 *    decode) and finishes with a filter and a projection attached;
 *  - a result: it encodes again, and partition_read_finish of it for a scan either works
 *    or refuses it with ERR_CORRUPT.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "cluster/partition.h"
#include "storage/lsm/lsm.h"

/* Aborts with the failed condition's line, so a crash says which property broke. */
#define must(ok) must_at((ok), __LINE__)
static void must_at(int ok, int line)
{
    if (!ok) {
        fprintf(stderr, "fuzz_partition_read_wire: property at line %d broken\n", line);
        abort();
    }
}

static lsm *db;
static uv_loop_t loop;
static char dir[] = "/tmp/strata-fuzz-pwire-XXXXXX";
/* The engine's one table: 1, partition key "pk" (S), sort key "sk" (N), as the seeds. */
static const partition_desc part = {.id = 1, .table_id = 1, .hash_lo = 0, .hash_hi = UINT64_MAX};
static const partition_key_schema schema = {.hash_name = "pk",
                                            .hash_name_len = 2,
                                            .hash_type = AV_S,
                                            .range_name = "sk",
                                            .range_name_len = 2,
                                            .range_type = AV_N};

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static av s_val(const char *s)
{
    av v = {.type = AV_S};
    v.u.bytes.ptr = (const uint8_t *)s;
    v.u.bytes.len = (uint32_t)strlen(s);
    return v;
}

static av n_val(int i)
{
    char t[16];
    snprintf(t, sizeof t, "%d", i);
    av v = {.type = AV_N};
    must(num_parse(t, strlen(t), &v.u.n, NULL) == 0);
    return v;
}

/* Items pk = "a".."c", sk = 0..9, with one more attribute "x". */
static void fill(void)
{
    static const char *pks[] = {"a", "b", "c"};
    for (int p = 0; p < 3; p++) {
        for (int s = 0; s < 10; s++) {
            av_attr at[3] = {{.name = "pk", .name_len = 2, .value = s_val(pks[p])},
                             {.name = "sk", .name_len = 2, .value = n_val(s)},
                             {.name = "x", .name_len = 1, .value = n_val(p * s)}};
            av item = {.type = AV_M}, key = {.type = AV_M};
            item.u.map.attrs = at;
            item.u.map.count = 3;
            key.u.map.attrs = at;
            key.u.map.count = 2;
            partition_write w = {
                .kind = PARTITION_PUT, .table_id = 1, .ks = schema, .key = &key, .item = &item};
            buf cmd, res;
            buf_init(&cmd, 0);
            buf_init(&res, 0);
            must(partition_write_encode(&w, &cmd, NULL) == 0);
            must(partition_apply(db, &part, cmd.data, cmd.len, (uint64_t)(p * 10 + s + 1), &res,
                                 NULL) == 0);
            buf_free(&cmd);
            buf_free(&res);
        }
    }
}

static void setup(void)
{
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(cleanup);
    uv_loop_init(&loop);
    lsm_options o = {.dir = dir, .memtable_bytes = 4 << 20, .no_compaction = true};
    if (lsm_open(&o, &loop, &db, NULL) < 0)
        abort();
    fill();
}

/* Keeps every other item. */
static int filter_odd(void *ctx, const av *item, strata_err *err)
{
    (void)item;
    (void)err;
    return (*(int *)ctx)++ & 1;
}

/* Keeps the first attribute only. */
static int project_first(void *ctx, arena *a, const av *item, av *out, strata_err *err)
{
    (void)ctx;
    (void)a;
    (void)err;
    *out = *item;
    if (out->u.map.count > 1)
        out->u.map.count = 1;
    return 0;
}

static bool same_schema(const partition_read_req *r)
{
    const partition_key_schema *k = &r->ks;
    if (r->table_id != part.table_id)
        return true; /* no items: nothing to misread */
    return k->hash_type == schema.hash_type && k->range_type == schema.range_type &&
           k->hash_name_len == 2 && memcmp(k->hash_name, "pk", 2) == 0 && k->range_name_len == 2 &&
           memcmp(k->range_name, "sk", 2) == 0;
}

static void check_request(const uint8_t *data, size_t size, arena *a)
{
    partition_read_req req;
    strata_err err;
    if (partition_read_req_decode(data, size, a, &req, &err) < 0) {
        must(err.code == ERR_CORRUPT);
        return;
    }
    buf b1, b2;
    buf_init(&b1, 0);
    buf_init(&b2, 0);
    must(partition_read_req_encode(&req, &b1, &err) == 0);
    partition_read_req again;
    must(partition_read_req_decode(b1.data, b1.len, a, &again, &err) == 0);
    must(partition_read_req_encode(&again, &b2, &err) == 0);
    must(b1.len == b2.len && memcmp(b1.data, b2.data, b1.len) == 0);

    /* partition_read trusts the key schema to describe the stored items (an N sort key
     * compared with an S attribute is a crash): the remote node checks the request's
     * schema against its catalog first, as this does for the one table that has items. */
    partition_read_res res, back;
    if (same_schema(&req) && partition_read(db, &part, &req, a, &res, &err) == 0) {
        buf_reset(&b1);
        must(partition_read_res_encode(&res, &b1, &err) == 0);
        must(partition_read_res_decode(b1.data, b1.len, a, &back, &err) == 0);
        int calls = 0;
        req.filter = filter_odd;
        req.filter_ctx = &calls;
        req.project = project_first;
        req.count_only = size & 1;
        must(partition_read_finish(&req, a, &back, &err) == 0);
    }
    buf_free(&b1);
    buf_free(&b2);
}

static void check_result(const uint8_t *data, size_t size, arena *a)
{
    partition_read_res res;
    strata_err err;
    if (partition_read_res_decode(data, size, a, &res, &err) < 0) {
        must(err.code == ERR_CORRUPT);
        return;
    }
    buf b;
    buf_init(&b, 0);
    must(partition_read_res_encode(&res, &b, &err) == 0);
    buf_free(&b);
    int calls = 0;
    partition_read_req scan = {.kind = PARTITION_SCAN,
                               .table_id = 1,
                               .ks = schema,
                               .hash_hi = UINT64_MAX,
                               .filter = filter_odd,
                               .filter_ctx = &calls,
                               .project = project_first};
    if (partition_read_finish(&scan, a, &res, &err) < 0)
        must(err.code == ERR_CORRUPT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (db == NULL)
        setup();
    arena a;
    arena_init(&a, 0);
    check_request(data, size, &a);
    arena_reset(&a);
    check_result(data, size, &a);
    arena_free(&a);
    return 0;
}
