/*
 * BatchGetItem and BatchWriteItem.
 *
 * Every key (or write request) is validated up front, then all of them are sent to the
 * router at once: each one is an independent single-item operation on its own partition,
 * so they run in parallel. The answer is built when the last one has called back. Keys
 * that could not be read (the 16 MB response cap) and writes the router refused for
 * back-pressure come back as UnprocessedKeys / UnprocessedItems, as DynamoDB does; so do
 * those refused for capacity (ERR_THROUGHPUT_EXCEEDED), unless every one of them was:
 * then the whole request fails with ProvisionedThroughputExceededException and counts
 * as one ThrottledRequests per table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/capacity.h"
#include "cluster/partition.h"
#include "node/api_items.h"
#include "storage/data/ddbjson.h"
#include "storage/data/key.h"

#define BATCH_GET_MAX      100
#define BATCH_WRITE_MAX    25
#define BATCH_RESPONSE_MAX (16u * 1024 * 1024)

static const char dup_msg[] = "Provided list of item keys contains duplicates";

/* A storage key per request, to find duplicates within one table. */
typedef struct {
    uint32_t table_id;
    uint8_t *key;
    size_t len;
} dup_key;

static int dup_key_add(arena *a, dup_key *keys, size_t n, uint32_t table_id, const av *pk,
                       const av *sk, strata_err *err)
{
    buf b;
    buf_init(&b, 0);
    storage_key_build(table_id, pk, sk, &b);
    if (b.failed) {
        buf_free(&b);
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (keys[i].len == b.len && memcmp(keys[i].key, b.data, b.len) == 0) {
            buf_free(&b);
            return strata_err_set(err, ERR_VALIDATION, "%s", dup_msg);
        }
    }
    keys[n].table_id = table_id;
    keys[n].key = arena_memdup(a, b.data, b.len);
    keys[n].len = b.len;
    buf_free(&b);
    return keys[n].key ? 0 : strata_err_set(err, ERR_NOMEM, "out of memory");
}

static int request_items(api_request *req, json_t **out, strata_err *err)
{
    if (api_param_object(req, "RequestItems", out, err) < 0)
        return -1;
    if (*out == NULL) {
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, NULL, "requestItems", "Member must not be null");
        return api_verr_finish(&ve, err);
    }
    if (json_object_size(*out) == 0) {
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, "{}", "requestItems",
                     "Member must have length greater than or equal to 1");
        return api_verr_finish(&ve, err);
    }
    const char *name;
    json_t *v;
    api_verr ve;
    api_verr_init(&ve);
    json_object_foreach(*out, name, v)
    {
        api_check_table_name(&ve, name, strlen(name), "requestItems.member.key");
    }
    return api_verr_finish(&ve, err);
}

/* Notes a part refused for capacity; its first refusal is the error if all parts are. */
static void note_throttle(strata_err *first, size_t *throttled, const strata_err *err)
{
    if ((*throttled)++ == 0)
        *first = *err;
}

static void add_consumed(json_t *list, items_rcc rcc, const char *table, double units)
{
    json_t *cc = items_consumed_json(rcc, table, units);
    if (cc)
        json_array_append_new(list, cc);
}

/* ------------------------------------------------------------------ BatchGetItem */

typedef struct batch_get batch_get;

typedef struct {
    char name[TABLE_NAME_MAX + 1];
    uint32_t table_id;
    partition_read_req rr; /* template: key set per read */
    json_t *spec;          /* the table's request (for UnprocessedKeys) */
    json_t *items;         /* Responses[name] */
    json_t *unprocessed;   /* UnprocessedKeys[name].Keys, or NULL */
    double units;
    bool consistent;
} get_table;

typedef struct {
    batch_get *b;
    get_table *t;
    const av *key;
    partition_read_req rr; /* the table's request for this key; lives until the read ends */
} get_key;

struct batch_get {
    api_request *req;
    items_rcc rcc;
    get_table *tables;
    size_t ntables;
    size_t pending;
    uint64_t bytes;
    strata_err err; /* first hard error */
    size_t nkeys, throttled;
    strata_err throttle_err; /* the first refusal for capacity */
};

static void get_finish(batch_get *b)
{
    api_request *req = b->req;
    if (b->err.code == ERR_NONE && b->throttled > 0 && b->throttled == b->nkeys) {
        b->err = b->throttle_err; /* nothing could be read */
        for (size_t i = 0; i < b->ntables; i++)
            items_note_throttled(req, b->tables[i].table_id, &b->err);
    }
    if (b->err.code != ERR_NONE) {
        for (size_t i = 0; i < b->ntables; i++) {
            json_decref(b->tables[i].items);
            json_decref(b->tables[i].unprocessed);
        }
        api_respond_err(req, &b->err);
        return;
    }
    json_t *out = json_object();
    json_t *responses = json_object();
    json_t *unprocessed = json_object();
    json_t *consumed = json_array();
    for (size_t i = 0; i < b->ntables; i++) {
        get_table *t = &b->tables[i];
        json_object_set_new(responses, t->name, t->items);
        if (t->unprocessed) {
            json_t *spec = json_deep_copy(t->spec);
            json_object_set_new(spec, "Keys", t->unprocessed);
            json_object_set_new(unprocessed, t->name, spec);
        }
        add_consumed(consumed, b->rcc, t->name, t->units);
    }
    json_object_set_new(out, "Responses", responses);
    json_object_set_new(out, "UnprocessedKeys", unprocessed);
    if (b->rcc != ITEMS_RCC_NONE)
        json_object_set_new(out, "ConsumedCapacity", consumed);
    else
        json_decref(consumed);
    api_respond_json(req, out);
}

static void get_unprocessed(get_key *k)
{
    if (k->t->unprocessed == NULL)
        k->t->unprocessed = json_array();
    json_array_append_new(k->t->unprocessed, ddbjson_from_item(k->key));
}

static void get_one(void *arg, const strata_err *err, partition_read_res *resp)
{
    get_key *k = arg;
    batch_get *b = k->b;
    get_table *t = k->t;
    if (err != NULL && err->code == ERR_THROUGHPUT_EXCEEDED) {
        get_unprocessed(k);
        note_throttle(&b->throttle_err, &b->throttled, err);
    } else if (err != NULL) {
        if (b->err.code == ERR_NONE)
            b->err = *err;
    } else {
        const partition_read_res res = *resp;
        if (b->bytes + res.bytes_read > BATCH_RESPONSE_MAX) {
            /* The response would pass 16 MB: the caller asks again for the rest. */
            get_unprocessed(k);
        } else {
            t->units += partition_read_units(res.bytes_read, t->consistent);
            if (res.found) {
                b->bytes += res.bytes_read;
                json_array_append_new(t->items, ddbjson_from_item(&res.items[0]));
            }
        }
    }
    if (--b->pending == 0)
        get_finish(b);
}

/* Validates one table's part of RequestItems. */
static int get_table_params(api_request *req, const char *name, json_t *spec, get_table *gt,
                            size_t *nkeys, strata_err *err)
{
    if (!json_is_object(spec))
        return api_wrong_type(spec, "Map", err);
    const table_info *t = items_table(req, name, strlen(name), err);
    if (t == NULL)
        return -1;
    snprintf(gt->name, sizeof gt->name, "%s", t->schema.name);
    gt->table_id = t->schema.table_id;
    gt->spec = spec;
    json_t *keys = json_object_get(spec, "Keys");
    if (keys == NULL || json_is_null(keys)) {
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, NULL, "requestItems.member.keys", "Member must not be null");
        return api_verr_finish(&ve, err);
    }
    if (!json_is_array(keys))
        return api_wrong_type(keys, "List", err);
    if (json_array_size(keys) == 0) {
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, "[]", "requestItems.member.keys",
                     "Member must have length greater than or equal to 1");
        return api_verr_finish(&ve, err);
    }
    if (json_array_size(keys) > BATCH_GET_MAX) {
        /* DynamoDB prints the whole list here; an abbreviation keeps the message short. */
        char member[TABLE_NAME_MAX + 64];
        snprintf(member, sizeof member, "requestItems.%s.member.keys", name);
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, "[...]", member, "Member must have length less than or equal to 100");
        return api_verr_finish(&ve, err);
    }
    *nkeys += json_array_size(keys);
    json_t *cr = json_object_get(spec, "ConsistentRead");
    if (cr && !json_is_null(cr) && !json_is_boolean(cr))
        return api_wrong_type(cr, "Boolean", err);
    gt->consistent = cr && json_is_true(cr);

    items_exprs x;
    if (items_exprs_init(req, spec, EXPR_P_PROJECTION_EXPRESSION, EXPR_P_ATTRIBUTES_TO_GET, &x,
                         err) < 0)
        return -1;
    expr *proj;
    if (items_parse_projection(req, spec, &x, &proj, err) < 0)
        return -1;
    if (expr_ctx_check_unused(x.ctx, err) < 0)
        return -1;
    gt->rr.kind = PARTITION_GET;
    gt->rr.table_id = t->schema.table_id;
    if (catalog_key_schema_copy(&t->schema, req->arena, &gt->rr.ks) < 0)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    gt->rr.consistent = gt->consistent;
    if (proj) {
        gt->rr.project = items_project_cb;
        gt->rr.project_ctx = proj;
    }
    return 0;
}

void api_batch_get_item(api_request *req)
{
    strata_err err;
    json_t *ri;
    batch_get *b = arena_zalloc(req->arena, sizeof *b);
    if (b == NULL) {
        api_respond_error(req, ERR_NOMEM, "out of memory");
        return;
    }
    b->req = req;
    if (request_items(req, &ri, &err) < 0 || items_param_rcc(req, &b->rcc, &err) < 0)
        goto fail;
    b->ntables = json_object_size(ri);
    b->tables = arena_zalloc(req->arena, b->ntables * sizeof *b->tables);
    if (b->tables == NULL) {
        strata_err_set(&err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* Validate everything before reading anything. */
    size_t nkeys = 0, ti = 0;
    const char *name;
    json_t *spec;
    json_object_foreach(ri, name, spec)
    {
        if (get_table_params(req, name, spec, &b->tables[ti++], &nkeys, &err) < 0)
            goto fail;
    }
    if (nkeys > BATCH_GET_MAX) {
        strata_err_set(&err, ERR_VALIDATION, "Too many items requested for the BatchGetItem call");
        goto fail;
    }
    get_key *keys = arena_zalloc(req->arena, nkeys * sizeof *keys);
    dup_key *dups = arena_zalloc(req->arena, nkeys * sizeof *dups);
    uint64_t *part_ids = arena_zalloc(req->arena, nkeys * sizeof *part_ids);
    if (keys == NULL || dups == NULL || part_ids == NULL) {
        strata_err_set(&err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t n = 0;
    for (ti = 0; ti < b->ntables; ti++) {
        get_table *gt = &b->tables[ti];
        const table_info *t = api_table_by_id(req, gt->table_id, gt->name, &err);
        if (t == NULL)
            goto fail;
        json_t *kj;
        size_t i;
        json_array_foreach(json_object_get(gt->spec, "Keys"), i, kj)
        {
            av *key;
            const av *pk, *sk;
            if (!json_is_object(kj)) {
                api_wrong_type(kj, "Map", &err);
                goto fail;
            }
            if (items_key_from_json(req->arena, &t->schema, kj, &key, &pk, &sk, &err) < 0 ||
                dup_key_add(req->arena, dups, n, gt->table_id, pk, sk, &err) < 0)
                goto fail;
            const partition_desc *p =
                router_partition_for_hash(req->router, gt->table_id, key_hash(pk));
            if (p == NULL) {
                strata_err_set(&err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
                goto fail;
            }
            keys[n] = (get_key){.b = b, .t = gt, .key = key, .rr = gt->rr};
            keys[n].rr.key = key;
            part_ids[n] = p->id;
            n++;
        }
    }
    for (ti = 0; ti < b->ntables; ti++)
        b->tables[ti].items = json_array();
    /* All reads at once; the answer goes out when the last one is back. One extra
     * pending count keeps an early callback from finishing while we still submit. */
    b->pending = n + 1;
    b->nkeys = n;
    for (size_t i = 0; i < n; i++) {
        strata_err e;
        if (router_read(req->router, keys[i].t->table_id, part_ids[i], &keys[i].rr, req->arena,
                        get_one, &keys[i], &e) < 0) {
            if (e.code == ERR_THROUGHPUT_EXCEEDED) {
                get_unprocessed(&keys[i]);
                note_throttle(&b->throttle_err, &b->throttled, &e);
            } else if (b->err.code == ERR_NONE) {
                b->err = e;
            }
            b->pending--;
        }
    }
    if (--b->pending == 0)
        get_finish(b);
    return;
fail:
    api_respond_err(req, &err);
}

/* ------------------------------------------------------------------ BatchWriteItem */

typedef struct batch_write batch_write;

typedef struct {
    char name[TABLE_NAME_MAX + 1];
    uint32_t table_id;
    json_t *unprocessed; /* UnprocessedItems[name], or NULL */
    double units;
} write_table;

typedef struct {
    batch_write *b;
    write_table *t;
    json_t *request; /* the WriteRequest, for UnprocessedItems */
    uint32_t table_id;
    uint64_t hash;
    buf cmd;
} write_one;

struct batch_write {
    api_request *req;
    items_rcc rcc;
    write_table *tables;
    size_t ntables;
    size_t pending;
    strata_err err;
    size_t nwrites, throttled;
    strata_err throttle_err; /* the first refusal for capacity */
};

static void write_finish(batch_write *b)
{
    api_request *req = b->req;
    if (b->err.code == ERR_NONE && b->throttled > 0 && b->throttled == b->nwrites) {
        b->err = b->throttle_err; /* nothing could be written */
        for (size_t i = 0; i < b->ntables; i++)
            items_note_throttled(req, b->tables[i].table_id, &b->err);
    }
    if (b->err.code != ERR_NONE) {
        for (size_t i = 0; i < b->ntables; i++)
            json_decref(b->tables[i].unprocessed);
        api_respond_err(req, &b->err);
        return;
    }
    json_t *out = json_object();
    json_t *unprocessed = json_object();
    json_t *consumed = json_array();
    for (size_t i = 0; i < b->ntables; i++) {
        write_table *t = &b->tables[i];
        if (t->unprocessed)
            json_object_set_new(unprocessed, t->name, t->unprocessed);
        add_consumed(consumed, b->rcc, t->name, t->units);
    }
    json_object_set_new(out, "UnprocessedItems", unprocessed);
    if (b->rcc != ITEMS_RCC_NONE)
        json_object_set_new(out, "ConsumedCapacity", consumed);
    else
        json_decref(consumed);
    api_respond_json(req, out);
}

static void unprocessed_add(write_one *w)
{
    if (w->t->unprocessed == NULL)
        w->t->unprocessed = json_array();
    json_array_append(w->t->unprocessed, w->request);
}

static void write_one_done(void *arg, const strata_err *err, const uint8_t *result, size_t len)
{
    write_one *w = arg;
    batch_write *b = w->b;
    if (err != NULL) {
        if (err->code == ERR_THROUGHPUT_EXCEEDED)
            note_throttle(&b->throttle_err, &b->throttled, err);
        if (err->code == ERR_BUSY || err->code == ERR_UNAVAILABLE ||
            err->code == ERR_THROUGHPUT_EXCEEDED)
            unprocessed_add(w);
        else if (b->err.code == ERR_NONE)
            b->err = *err;
    } else {
        partition_write_result r;
        strata_err e;
        if (partition_result_decode(result, len, b->req->arena, &r, &e) < 0) {
            if (b->err.code == ERR_NONE)
                b->err = e;
        } else if (r.code != ERR_NONE) {
            if (b->err.code == ERR_NONE)
                strata_err_set(&b->err, r.code, "%s", r.message);
        } else {
            w->t->units += (double)partition_write_units(&r);
        }
    }
    if (--b->pending == 0)
        write_finish(b);
}

/* Validates one WriteRequest and encodes its command. */
static int write_request(api_request *req, const table_info *t, json_t *wr, write_one *w,
                         dup_key *dups, size_t n, strata_err *err)
{
    if (!json_is_object(wr))
        return api_wrong_type(wr, "Map", err);
    json_t *put = json_object_get(wr, "PutRequest");
    json_t *del = json_object_get(wr, "DeleteRequest");
    if (put && json_is_null(put))
        put = NULL;
    if (del && json_is_null(del))
        del = NULL;
    if ((put == NULL) == (del == NULL))
        return strata_err_set(err, ERR_VALIDATION,
                              "Supplied AttributeValue has more than one datatypes set, must "
                              "contain exactly one of the supported datatypes");
    partition_write pw = {.table_id = t->schema.table_id, .now_ms = api_now_ms()};
    catalog_key_schema(&t->schema, &pw.ks);
    const av *pk, *sk;
    if (put) {
        if (!json_is_object(put))
            return api_wrong_type(put, "Map", err);
        json_t *item_json = json_object_get(put, "Item");
        if (item_json == NULL || json_is_null(item_json)) {
            api_verr ve;
            api_verr_init(&ve);
            api_verr_add(&ve, NULL, "requestItems.member.member.putRequest.item",
                         "Member must not be null");
            return api_verr_finish(&ve, err);
        }
        av *item = arena_zalloc(req->arena, sizeof *item);
        if (item == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory");
        if (ddbjson_to_item(item_json, req->arena, item, err) < 0)
            return -1;
        if (items_check_key(&t->schema, item, false, &pk, &sk, err) < 0) {
            api_catalog_doubt(req);
            return -1;
        }
        if (item_size(item) > ITEM_MAX_SIZE)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Item size has exceeded the maximum allowed size");
        pw.kind = PARTITION_PUT;
        pw.item = item;
        pw.key = items_key_map(req->arena, &t->schema, pk, sk);
    } else {
        if (!json_is_object(del))
            return api_wrong_type(del, "Map", err);
        json_t *key_json = json_object_get(del, "Key");
        if (key_json == NULL || json_is_null(key_json)) {
            api_verr ve;
            api_verr_init(&ve);
            api_verr_add(&ve, NULL, "requestItems.member.member.deleteRequest.key",
                         "Member must not be null");
            return api_verr_finish(&ve, err);
        }
        av *key;
        if (items_key_from_json(req->arena, &t->schema, key_json, &key, &pk, &sk, err) < 0) {
            api_catalog_doubt(req);
            return -1;
        }
        pw.kind = PARTITION_DELETE;
        pw.key = key;
    }
    if (dup_key_add(req->arena, dups, n, t->schema.table_id, pk, sk, err) < 0)
        return -1;
    w->table_id = t->schema.table_id;
    w->hash = key_hash(pk);
    w->request = wr;
    buf_init(&w->cmd, 0);
    return partition_write_encode(&pw, &w->cmd, err);
}

void api_batch_write_item(api_request *req)
{
    strata_err err;
    json_t *ri;
    write_one *ws = NULL;
    size_t n = 0;
    batch_write *b = arena_zalloc(req->arena, sizeof *b);
    if (b == NULL) {
        api_respond_error(req, ERR_NOMEM, "out of memory");
        return;
    }
    b->req = req;
    static const char *const metrics[] = {"SIZE", "NONE", NULL};
    int m;
    if (request_items(req, &ri, &err) < 0 || items_param_rcc(req, &b->rcc, &err) < 0 ||
        api_param_enum(req, "ReturnItemCollectionMetrics", "returnItemCollectionMetrics", metrics,
                       1, &m, &err) < 0)
        goto fail;
    size_t total = 0;
    const char *name;
    json_t *list;
    json_object_foreach(ri, name, list)
    {
        if (!json_is_array(list)) {
            api_wrong_type(list, "List", &err);
            goto fail;
        }
        if (json_array_size(list) == 0) {
            api_verr ve;
            api_verr_init(&ve);
            api_verr_add(&ve, "[]", "requestItems.member.value",
                         "Member must have length greater than or equal to 1");
            api_verr_finish(&ve, &err);
            goto fail;
        }
        if (json_array_size(list) > BATCH_WRITE_MAX) {
            api_verr ve;
            api_verr_init(&ve);
            char value[TABLE_NAME_MAX + 16];
            snprintf(value, sizeof value, "{%s=[...]}", name);
            api_verr_add(&ve, value, "requestItems",
                         "Map value must satisfy constraint: [Member must have length less "
                         "than or equal to 25, Member must have length greater than or "
                         "equal to 1]");
            api_verr_finish(&ve, &err);
            goto fail;
        }
        total += json_array_size(list);
    }
    if (total > BATCH_WRITE_MAX) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Too many items requested for the BatchWriteItem call");
        goto fail;
    }
    b->ntables = json_object_size(ri);
    b->tables = arena_zalloc(req->arena, b->ntables * sizeof *b->tables);
    ws = arena_zalloc(req->arena, total * sizeof *ws);
    dup_key *dups = arena_zalloc(req->arena, total * sizeof *dups);
    if (b->tables == NULL || ws == NULL || dups == NULL) {
        strata_err_set(&err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t ti = 0;
    json_object_foreach(ri, name, list)
    {
        write_table *wt = &b->tables[ti++];
        const table_info *t = items_table(req, name, strlen(name), &err);
        if (t == NULL)
            goto fail;
        snprintf(wt->name, sizeof wt->name, "%s", t->schema.name);
        wt->table_id = t->schema.table_id;
        size_t i;
        json_t *wr;
        json_array_foreach(list, i, wr)
        {
            ws[n].b = b;
            ws[n].t = wt;
            if (write_request(req, t, wr, &ws[n], dups, n, &err) < 0) {
                n++;
                goto fail;
            }
            n++;
        }
    }
    /* Submit them all; see api_batch_get_item for the extra pending count. */
    b->pending = n + 1;
    b->nwrites = n;
    for (size_t i = 0; i < n; i++) {
        strata_err e;
        if (router_write(req->router, ws[i].table_id, ws[i].hash, ws[i].cmd.data, ws[i].cmd.len,
                         write_one_done, &ws[i], &e) < 0) {
            if (e.code == ERR_THROUGHPUT_EXCEEDED)
                note_throttle(&b->throttle_err, &b->throttled, &e);
            if (e.code == ERR_BUSY || e.code == ERR_UNAVAILABLE ||
                e.code == ERR_THROUGHPUT_EXCEEDED)
                unprocessed_add(&ws[i]);
            else if (b->err.code == ERR_NONE)
                b->err = e;
            b->pending--;
        }
        buf_free(&ws[i].cmd);
    }
    if (--b->pending == 0)
        write_finish(b);
    return;
fail:
    for (size_t i = 0; i < n; i++)
        buf_free(&ws[i].cmd);
    api_respond_err(req, &err);
}
