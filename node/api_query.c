/*
 * Query and Scan.
 *
 * A Query reads one partition key, so one partition. A Scan walks the partitions of the
 * table in hash order, restricted to the hash range of its segment (Segment /
 * TotalSegments cut the 64-bit hash space into equal ranges, so every item belongs to
 * exactly one segment); one page may continue from one partition into the next, sharing
 * the Limit and the 1 MB read budget. The LastEvaluatedKey of a Scan is the key of the
 * last item read; its hash tells the next request which partition to resume in.
 *
 * The response is written as JSON text directly (ddbjson's writer): pages can be large.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/partition.h"
#include "node/api_items.h"
#include "storage/data/ddbjson.h"
#include "storage/data/key.h"

enum { SEL_ALL = 0, SEL_ALL_PROJECTED, SEL_SPECIFIC, SEL_COUNT };
static const char *const select_names[] = {"ALL_ATTRIBUTES", "ALL_PROJECTED_ATTRIBUTES",
                                           "SPECIFIC_ATTRIBUTES", "COUNT", NULL};

typedef struct {
    api_request *req;
    bool scan;
    items_rcc rcc;
    bool consistent;
    char table[TABLE_NAME_MAX + 1];
    uint32_t table_id;
    partition_read_req rr;
    uint32_t limit; /* 0 = none */
    /* Query: the one partition. Scan: walks the segment by hash, partition after
     * partition as the router's map has them when each is read (splits may change them
     * between pages, or during one: router_err_moved). */
    uint64_t *parts;
    size_t nparts, next;
    uint64_t pos, seg_hi; /* Scan: the next hash to read, the segment's last */
    uint64_t cur_hi;      /* Scan: the last hash of the partition being read */
    unsigned replans;     /* Scan: reads planned again after a split */
    /* Accumulated page. */
    buf items; /* JSON text of the items, comma-separated */
    uint32_t count, scanned;
    uint64_t bytes;
    const av *lek;
} read_ctx;

/* Validates an ExclusiveStartKey against the table's key schema. DynamoDB words the
 * error differently per operation: Query says only "The provided starting key is
 * invalid", Scan adds the reason. */
static int start_key(api_request *req, const table_schema *s, bool is_query, av **out,
                     strata_err *err)
{
    *out = NULL;
    json_t *j;
    if (api_param_object(req, "ExclusiveStartKey", &j, err) < 0)
        return -1;
    if (j == NULL)
        return 0;
    av *m = arena_zalloc(req->arena, sizeof *m);
    if (m == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    if (ddbjson_to_item(j, req->arena, m, err) < 0)
        return -1;
    const av *pk, *sk;
    strata_err e;
    if (items_check_key(s, m, true, &pk, &sk, &e) < 0) {
        api_catalog_doubt(req); /* the key may fit the table's new schema elsewhere */
        if (is_query)
            return strata_err_set(err, ERR_VALIDATION, "The provided starting key is invalid");
        return strata_err_set(err, ERR_VALIDATION, "The provided starting key is invalid: %s",
                              e.msg);
    }
    *out = m;
    return 0;
}

static void finish(read_ctx *c)
{
    api_request *req = c->req;
    buf out;
    buf_init(&out, 0);
    buf_printf(&out, "{");
    if (c->rr.count_only) {
        buf_printf(&out, "\"Count\":%u,\"ScannedCount\":%u", c->count, c->scanned);
    } else {
        buf_printf(&out, "\"Items\":[");
        buf_append(&out, c->items.data, c->items.len);
        buf_printf(&out, "],\"Count\":%u,\"ScannedCount\":%u", c->count, c->scanned);
    }
    if (c->lek) {
        buf_printf(&out, ",\"LastEvaluatedKey\":");
        ddbjson_write_item(c->lek, &out);
    }
    json_t *cc =
        items_consumed_json(c->rcc, c->table, partition_read_units(c->bytes, c->consistent));
    if (cc) {
        char *s = json_dumps(cc, JSON_COMPACT);
        json_decref(cc);
        if (s) {
            buf_printf(&out, ",\"ConsumedCapacity\":%s", s);
            free(s);
        }
    }
    buf_printf(&out, "}");
    buf_free(&c->items);
    if (out.failed) {
        buf_free(&out);
        api_respond_error(req, ERR_NOMEM, "out of memory writing the response");
        return;
    }
    api_respond_raw(req, (const char *)out.data, out.len);
    buf_free(&out);
}

static void fail(read_ctx *c, const strata_err *err)
{
    buf_free(&c->items);
    items_note_throttled(c->req, c->table_id, err);
    api_respond_err(c->req, err);
}

static void read_next(read_ctx *c);

static void read_done(void *arg, const strata_err *err, partition_read_res *res)
{
    read_ctx *c = arg;
    if (err != NULL && c->scan && router_err_moved(err) && c->replans++ < 64) {
        read_next(c); /* nothing was read: plan this part again from the current map */
        return;
    }
    if (err != NULL) {
        if (err->code == ERR_RESOURCE_NOT_FOUND) /* dropped: maybe recreated meanwhile */
            api_catalog_doubt(c->req);
        fail(c, err);
        return;
    }
    for (uint32_t i = 0; i < res->count && !c->rr.count_only; i++) {
        if (c->items.len)
            buf_put_u8(&c->items, ',');
        ddbjson_write_item(&res->items[i], &c->items);
    }
    c->count += res->count;
    c->scanned += res->scanned_count;
    c->bytes += res->bytes_read;
    if (res->last_evaluated_key) {
        c->lek = res->last_evaluated_key;
        finish(c);
        return;
    }
    c->rr.exclusive_start_key = NULL; /* only the first partition resumes */
    if (!c->scan || c->cur_hi >= c->seg_hi) {
        finish(c);
        return;
    }
    c->pos = c->cur_hi + 1;
    read_next(c);
}

static void read_next(read_ctx *c)
{
    strata_err err;
    uint64_t id;
    if (c->scan) {
        const partition_desc *p = router_partition_for_hash(c->req->router, c->table_id, c->pos);
        if (p == NULL) {
            strata_err_set(&err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
            fail(c, &err);
            return;
        }
        id = p->id;
        c->cur_hi = p->hash_hi;
    } else {
        id = c->parts[c->next++];
    }
    /* This partition gets what is left of the page's Limit and 1 MB. */
    c->rr.limit = c->limit ? c->limit - c->scanned : 0;
    c->rr.max_bytes = PARTITION_PAGE_BYTES - c->bytes;
    if (router_read(c->req->router, c->table_id, id, &c->rr, c->req->arena, read_done, c, &err) < 0)
        fail(c, &err);
}

/* Parameters Query and Scan share; fills c and returns the table. */
static const table_info *common_params(api_request *req, read_ctx *c, int *select, strata_err *err)
{
    const char *table;
    size_t table_len;
    if (api_param_table_name(req, &table, &table_len, err) < 0)
        return NULL;
    bool present;
    int64_t limit;
    if (api_param_int(req, "Limit", "limit", 1, INT32_MAX, &present, &limit, err) < 0)
        return NULL;
    c->limit = present ? (uint32_t)limit : 0;
    if (api_param_enum(req, "Select", "select", select_names, -1, select, err) < 0)
        return NULL;
    if (items_param_rcc(req, &c->rcc, err) < 0)
        return NULL;
    if (api_param_bool(req, "ConsistentRead", false, &c->consistent, err) < 0)
        return NULL;
    const table_info *t = items_table(req, table, table_len, err);
    if (t == NULL)
        return NULL;
    const char *index;
    size_t index_len;
    if (api_param_string(req, "IndexName", false, &index, &index_len, err) < 0)
        return NULL;
    if (index != NULL) {
        strata_err_set(err, ERR_VALIDATION, "The table does not have the specified index: %.*s",
                       (int)index_len, index);
        return NULL;
    }
    if (*select == SEL_ALL_PROJECTED) {
        strata_err_set(err, ERR_VALIDATION,
                       "ALL_PROJECTED_ATTRIBUTES can be used only when Querying using an "
                       "IndexName");
        return NULL;
    }
    snprintf(c->table, sizeof c->table, "%s", t->schema.name);
    c->table_id = t->schema.table_id;
    c->rr.table_id = t->schema.table_id;
    if (catalog_key_schema_copy(&t->schema, req->arena, &c->rr.ks) < 0) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->rr.consistent = c->consistent;
    buf_init(&c->items, 0);
    return t;
}

/* Projection, filter and Select, once the expression context exists. */
static int shape_params(api_request *req, read_ctx *c, items_exprs *x, int select,
                        const char *filter_param, strata_err *err)
{
    expr *proj;
    if (items_parse_projection(req, req->body, x, &proj, err) < 0)
        return -1;
    bool legacy_proj = (x->params & EXPR_P_ATTRIBUTES_TO_GET) != 0;
    if (select == SEL_COUNT && proj)
        return strata_err_set(err, ERR_VALIDATION,
                              "Cannot specify the %s when choosing to get only the COUNT",
                              legacy_proj ? "AttributesToGet" : "ProjectionExpression");
    if (select == SEL_ALL && proj)
        return strata_err_set(err, ERR_VALIDATION,
                              "Cannot specify the %s when choosing to get ALL_ATTRIBUTES",
                              legacy_proj ? "AttributesToGet" : "ProjectionExpression");
    if (select == SEL_SPECIFIC && !proj)
        return strata_err_set(err, ERR_VALIDATION,
                              "Must specify the AttributesToGet or ProjectionExpression when "
                              "choosing to get SPECIFIC_ATTRIBUTES");
    c->rr.count_only = select == SEL_COUNT;
    if (proj) {
        c->rr.project = items_project_cb;
        c->rr.project_ctx = proj;
    }

    expr *filter;
    json_t *legacy = json_object_get(req->body, filter_param);
    if (legacy && !json_is_null(legacy)) {
        const char *text = expr_legacy_filter(
            x->ctx, filter_param, legacy, json_object_get(req->body, "ConditionalOperator"), err);
        if (text == NULL)
            return -1;
        /* An empty QueryFilter / ScanFilter filters nothing (DynamoDB takes {}). */
        filter = text[0] ? expr_parse(x->ctx, EXPR_FILTER, text, strlen(text), err) : NULL;
        if (text[0] && filter == NULL)
            return -1;
    } else if (items_parse_member(req, req->body, x, "FilterExpression", EXPR_FILTER, &filter, NULL,
                                  err) < 0) {
        return -1;
    }
    if (filter) {
        c->rr.filter = items_filter_cb;
        c->rr.filter_ctx = filter;
    }
    return 0;
}

static read_ctx *new_ctx(api_request *req, bool scan)
{
    read_ctx *c = arena_zalloc(req->arena, sizeof *c);
    if (c == NULL) {
        api_respond_error(req, ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->req = req;
    c->scan = scan;
    buf_init(&c->items, 0);
    return c;
}

static partition_sk_op sk_op_of(expr_sk_op op)
{
    switch (op) {
    case EXPR_SK_NONE:
        return PARTITION_SK_ANY;
    case EXPR_SK_EQ:
        return PARTITION_SK_EQ;
    case EXPR_SK_LT:
        return PARTITION_SK_LT;
    case EXPR_SK_LE:
        return PARTITION_SK_LE;
    case EXPR_SK_GT:
        return PARTITION_SK_GT;
    case EXPR_SK_GE:
        return PARTITION_SK_GE;
    case EXPR_SK_BETWEEN:
        return PARTITION_SK_BETWEEN;
    case EXPR_SK_BEGINS_WITH:
        return PARTITION_SK_BEGINS_WITH;
    }
    return PARTITION_SK_ANY;
}

void api_query(api_request *req)
{
    strata_err err;
    read_ctx *c = new_ctx(req, false);
    if (c == NULL)
        return;
    int select;
    const table_info *t = common_params(req, c, &select, &err);
    if (t == NULL)
        goto fail;
    bool forward;
    if (api_param_bool(req, "ScanIndexForward", true, &forward, &err) < 0)
        goto fail;
    c->rr.kind = PARTITION_QUERY;
    c->rr.forward = forward;

    items_exprs x;
    if (items_exprs_init(req, req->body,
                         EXPR_P_KEY_CONDITION_EXPRESSION | EXPR_P_FILTER_EXPRESSION |
                             EXPR_P_PROJECTION_EXPRESSION,
                         EXPR_P_KEY_CONDITIONS | EXPR_P_QUERY_FILTER | EXPR_P_ATTRIBUTES_TO_GET |
                             EXPR_P_CONDITIONAL_OPERATOR,
                         &x, &err) < 0)
        goto fail;

    /* The key condition. */
    expr *kce = NULL;
    json_t *kc_legacy = json_object_get(req->body, "KeyConditions");
    if (kc_legacy && !json_is_null(kc_legacy)) {
        /* A context of its own: DynamoDB takes KeyConditions with a FilterExpression, whose
         * placeholders are the client's (x.ctx), not generated ones. */
        expr_ctx *kctx = expr_ctx_new(req->arena);
        if (kctx == NULL) {
            strata_err_set(&err, ERR_NOMEM, "out of memory");
            goto fail;
        }
        const char *text = expr_legacy_key_conditions(kctx, kc_legacy, &err);
        if (text == NULL)
            goto fail;
        kce = expr_parse(kctx, EXPR_KEY_CONDITION, text, strlen(text), &err);
        if (kce == NULL)
            goto fail;
    } else if (items_parse_member(req, req->body, &x, "KeyConditionExpression", EXPR_KEY_CONDITION,
                                  &kce, NULL, &err) < 0) {
        goto fail;
    }
    if (kce == NULL) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Either the KeyConditions or KeyConditionExpression parameter must be "
                       "specified in the request.");
        goto fail;
    }
    expr_key_schema ks;
    items_expr_schema(&t->schema, &ks);
    expr_key_cond kc;
    if (expr_key_condition(kce, &ks, &kc, &err) < 0)
        goto fail;

    /* Key values in the condition follow the rules of key values in items. */
    const av *kvals[3] = {kc.pk, kc.sk1, kc.sk2};
    for (int i = 0; i < 3; i++) {
        const av *v = kvals[i];
        if (v && (v->type == AV_S || v->type == AV_B) && v->u.bytes.len == 0) {
            strata_err_set(&err, ERR_VALIDATION,
                           "One or more parameter values are not valid. The AttributeValue for "
                           "a key attribute cannot contain an empty %s value. Key: %s",
                           v->type == AV_S ? "string" : "binary",
                           i == 0 ? t->schema.hash.name : t->schema.range.name);
            goto fail;
        }
    }

    bool legacy_filter = json_object_get(req->body, "QueryFilter") != NULL;
    if (shape_params(req, c, &x, select, "QueryFilter", &err) < 0)
        goto fail;
    if (c->rr.filter) {
        const key_attr *keys[2] = {&t->schema.hash, &t->schema.range};
        for (int i = 0; i < (t->schema.has_range ? 2 : 1); i++) {
            if (expr_mentions_attr(c->rr.filter_ctx, keys[i]->name, keys[i]->name_len)) {
                strata_err_set(&err, ERR_VALIDATION,
                               "%s can only contain non-primary key attributes: Primary key "
                               "attribute: %s",
                               legacy_filter ? "QueryFilter" : "Filter Expression", keys[i]->name);
                goto fail;
            }
        }
    }
    if (expr_ctx_check_unused(x.ctx, &err) < 0)
        goto fail;

    av *esk;
    if (start_key(req, &t->schema, true, &esk, &err) < 0)
        goto fail;
    if (esk) {
        /* The start key must lie within the query's range (DynamoDB's messages, which
         * depend on whether the condition names the sort key). */
        const av *epk = av_map_get(esk, t->schema.hash.name, t->schema.hash.name_len);
        if (t->schema.has_range && kc.sk_op != EXPR_SK_NONE) {
            const av *esk_sk = av_map_get(esk, t->schema.range.name, t->schema.range.name_len);
            if (!expr_key_cond_match_sk(&kc, esk_sk)) {
                strata_err_set(&err, ERR_VALIDATION,
                               "The provided starting key does not match the range key "
                               "predicate");
                goto fail;
            }
            if (!av_equal(epk, kc.pk)) {
                strata_err_set(&err, ERR_VALIDATION,
                               "The query can return at most one row and cannot be restarted");
                goto fail;
            }
        } else if (!av_equal(epk, kc.pk)) {
            strata_err_set(&err, ERR_VALIDATION,
                           "The provided starting key is outside query boundaries based on "
                           "provided conditions");
            goto fail;
        }
    }
    c->rr.exclusive_start_key = esk;
    c->rr.hash_value = kc.pk;
    c->rr.sk_op = sk_op_of(kc.sk_op);
    c->rr.sk1 = kc.sk1;
    c->rr.sk2 = kc.sk2;

    const partition_desc *p = router_partition_for_hash(req->router, c->table_id, key_hash(kc.pk));
    if (p == NULL) {
        strata_err_set(&err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
        goto fail;
    }
    c->parts = arena_zalloc(req->arena, sizeof *c->parts);
    if (c->parts == NULL) {
        strata_err_set(&err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    c->parts[0] = p->id;
    c->nparts = 1;
    read_next(c);
    return;
fail:
    fail(c, &err);
}

/* The hash range [lo, hi] of segment `seg` of `total`: equal cuts of 2^64. */
static void segment_range(uint64_t seg, uint64_t total, uint64_t *lo, uint64_t *hi)
{
    unsigned __int128 space = (unsigned __int128)1 << 64;
    *lo = (uint64_t)(space * seg / total);
    *hi = (uint64_t)(space * (seg + 1) / total - 1);
}

void api_scan(api_request *req)
{
    strata_err err;
    read_ctx *c = new_ctx(req, true);
    if (c == NULL)
        return;
    int select;
    bool has_seg, has_total;
    int64_t seg = 0, total = 1;
    if (api_param_int(req, "Segment", "segment", 0, 999999, &has_seg, &seg, &err) < 0 ||
        api_param_int(req, "TotalSegments", "totalSegments", 1, 1000000, &has_total, &total, &err) <
            0)
        goto fail;
    const table_info *t = common_params(req, c, &select, &err);
    if (t == NULL)
        goto fail;
    if (has_seg && !has_total) {
        strata_err_set(&err, ERR_VALIDATION,
                       "The TotalSegments parameter is required but was not present in the "
                       "request when Segment parameter is present");
        goto fail;
    }
    if (has_total && !has_seg) {
        strata_err_set(&err, ERR_VALIDATION,
                       "The Segment parameter is required but was not present in the request "
                       "when parameter TotalSegments is present");
        goto fail;
    }
    if (seg >= total) {
        strata_err_set(&err, ERR_VALIDATION,
                       "The Segment parameter is zero-based and must be less than parameter "
                       "TotalSegments: Segment: %lld is not less than TotalSegments: %lld",
                       (long long)seg, (long long)total);
        goto fail;
    }
    c->rr.kind = PARTITION_SCAN;
    segment_range((uint64_t)seg, (uint64_t)total, &c->rr.hash_lo, &c->rr.hash_hi);

    items_exprs x;
    if (items_exprs_init(req, req->body, EXPR_P_FILTER_EXPRESSION | EXPR_P_PROJECTION_EXPRESSION,
                         EXPR_P_SCAN_FILTER | EXPR_P_ATTRIBUTES_TO_GET |
                             EXPR_P_CONDITIONAL_OPERATOR,
                         &x, &err) < 0)
        goto fail;
    if (shape_params(req, c, &x, select, "ScanFilter", &err) < 0)
        goto fail;
    if (expr_ctx_check_unused(x.ctx, &err) < 0)
        goto fail;
    av *esk;
    if (start_key(req, &t->schema, false, &esk, &err) < 0)
        goto fail;
    uint64_t from = c->rr.hash_lo;
    if (esk) {
        const av *epk = av_map_get(esk, t->schema.hash.name, t->schema.hash.name_len);
        from = key_hash(epk);
        if (from < c->rr.hash_lo || from > c->rr.hash_hi) {
            strata_err_set(&err, ERR_VALIDATION,
                           "The provided Exclusive start key does not map to the provided "
                           "segment");
            goto fail;
        }
        c->rr.exclusive_start_key = esk;
    }

    /* The partitions meeting [from, hash_hi], in hash order, one after the other. */
    c->pos = from;
    c->seg_hi = c->rr.hash_hi;
    read_next(c);
    return;
fail:
    fail(c, &err);
}
