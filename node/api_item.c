/*
 * PutItem, GetItem, UpdateItem, DeleteItem, and the helpers the other item operations
 * share (node/api_items.h).
 *
 * A write is validated here, encoded as a partition command (cluster/partition.h) and
 * submitted to the router; the answer is built from the state machine's result in the
 * router's callback. A read runs partition_read() inside the router's read callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/capacity.h"
#include "cluster/partition.h"
#include "node/api_items.h"
#include "storage/data/ddbjson.h"
#include "storage/data/key.h"

/* ------------------------------------------------------------------ shared helpers */

const table_info *items_table(api_request *req, const char *name, size_t len, strata_err *err)
{
    const table_info *t = api_table(req, name, len, err);
    if (t == NULL && err && err->code == ERR_RESOURCE_NOT_FOUND)
        strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    return t;
}

void items_note_throttled(api_request *req, uint32_t table_id, const strata_err *err)
{
    if (err != NULL && err->code == ERR_THROUGHPUT_EXCEEDED)
        capacity_note_throttled_request(router_capacity(req->router), table_id);
}

int items_param_rcc(api_request *req, items_rcc *out, strata_err *err)
{
    static const char *const allowed[] = {"INDEXES", "TOTAL", "NONE", NULL};
    int v;
    if (api_param_enum(req, "ReturnConsumedCapacity", "returnConsumedCapacity", allowed,
                       ITEMS_RCC_NONE, &v, err) < 0)
        return -1;
    *out = (items_rcc)v;
    return 0;
}

json_t *items_consumed_json(items_rcc mode, const char *table, double units)
{
    if (mode == ITEMS_RCC_NONE)
        return NULL;
    json_t *o = json_object();
    json_object_set_new(o, "TableName", json_string(table));
    json_object_set_new(o, "CapacityUnits", json_real(units));
    if (mode == ITEMS_RCC_INDEXES)
        json_object_set_new(o, "Table", json_pack("{s:f}", "CapacityUnits", units));
    return o;
}

static int key_value_ok(const key_attr *k, const av *v, bool is_hash, strata_err *err)
{
    if ((v->type == AV_S || v->type == AV_B) && v->u.bytes.len == 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values are not valid. The AttributeValue "
                              "for a key attribute cannot contain an empty %s value. Key: %s",
                              v->type == AV_S ? "string" : "binary", k->name);
    size_t size = av_size(v);
    if (is_hash && size > PARTITION_KEY_MAX)
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values were invalid: Size of hashkey has "
                              "exceeded the maximum size limit of%d bytes",
                              PARTITION_KEY_MAX);
    if (!is_hash && size > SORT_KEY_MAX)
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values were invalid: Aggregated size of all "
                              "range keys has exceeded the size limit of %d bytes",
                              SORT_KEY_MAX);
    return 0;
}

int items_check_key(const table_schema *s, const av *m, bool exact, const av **pk, const av **sk,
                    strata_err *err)
{
    static const char mismatch[] = "The provided key element does not match the schema";
    *pk = av_map_get(m, s->hash.name, s->hash.name_len);
    *sk = s->has_range ? av_map_get(m, s->range.name, s->range.name_len) : NULL;
    if (exact) {
        uint32_t want = s->has_range ? 2 : 1;
        if (m->u.map.count != want || *pk == NULL || (*pk)->type != s->hash.type ||
            (s->has_range && (*sk == NULL || (*sk)->type != s->range.type)))
            return strata_err_set(err, ERR_VALIDATION, "%s", mismatch);
    } else {
        const key_attr *keys[2] = {&s->hash, &s->range};
        const av *vals[2] = {*pk, *sk};
        for (int i = 0; i < (s->has_range ? 2 : 1); i++) {
            if (vals[i] == NULL)
                return strata_err_set(err, ERR_VALIDATION,
                                      "One or more parameter values were invalid: Missing the "
                                      "key %s in the item",
                                      keys[i]->name);
            if (vals[i]->type != keys[i]->type)
                return strata_err_set(err, ERR_VALIDATION,
                                      "One or more parameter values were invalid: Type mismatch "
                                      "for key %s expected: %s actual: %s",
                                      keys[i]->name, av_type_name(keys[i]->type),
                                      av_type_name(vals[i]->type));
        }
    }
    if (key_value_ok(&s->hash, *pk, true, err) < 0)
        return -1;
    if (*sk && key_value_ok(&s->range, *sk, false, err) < 0)
        return -1;
    return 0;
}

av *items_key_map(arena *a, const table_schema *s, const av *pk, const av *sk)
{
    uint32_t n = sk ? 2 : 1;
    av *m = arena_zalloc(a, sizeof *m);
    av_attr *attrs = arena_zalloc(a, n * sizeof *attrs);
    if (m == NULL || attrs == NULL)
        return NULL;
    attrs[0].name = s->hash.name;
    attrs[0].name_len = (uint32_t)s->hash.name_len;
    attrs[0].value = *pk;
    if (sk) {
        attrs[1].name = s->range.name;
        attrs[1].name_len = (uint32_t)s->range.name_len;
        attrs[1].value = *sk;
    }
    m->type = AV_M;
    m->u.map.attrs = attrs;
    m->u.map.count = n;
    if (av_map_sort(m, NULL) < 0)
        return NULL;
    return m;
}

int items_key_from_json(arena *a, const table_schema *s, const json_t *j, av **key, const av **pk,
                        const av **sk, strata_err *err)
{
    av *m = arena_zalloc(a, sizeof *m);
    if (m == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    if (ddbjson_to_item(j, a, m, err) < 0)
        return -1;
    if (items_check_key(s, m, true, pk, sk, err) < 0)
        return -1;
    *key = m;
    return 0;
}

/* The request members items_exprs_init() looks for; len spares a strlen per compare. */
/* clang-format off */
#define PARAM_BIT(name, bit) {name, sizeof name - 1, bit}
/* clang-format on */
static const struct {
    const char *name;
    size_t len;
    unsigned bit;
} param_bits[] = {
    PARAM_BIT("AttributesToGet", EXPR_P_ATTRIBUTES_TO_GET),
    PARAM_BIT("AttributeUpdates", EXPR_P_ATTRIBUTE_UPDATES),
    PARAM_BIT("ConditionalOperator", EXPR_P_CONDITIONAL_OPERATOR),
    PARAM_BIT("Expected", EXPR_P_EXPECTED),
    PARAM_BIT("KeyConditions", EXPR_P_KEY_CONDITIONS),
    PARAM_BIT("QueryFilter", EXPR_P_QUERY_FILTER),
    PARAM_BIT("ScanFilter", EXPR_P_SCAN_FILTER),
    PARAM_BIT("ConditionExpression", EXPR_P_CONDITION_EXPRESSION),
    PARAM_BIT("FilterExpression", EXPR_P_FILTER_EXPRESSION),
    PARAM_BIT("KeyConditionExpression", EXPR_P_KEY_CONDITION_EXPRESSION),
    PARAM_BIT("ProjectionExpression", EXPR_P_PROJECTION_EXPRESSION),
    PARAM_BIT("UpdateExpression", EXPR_P_UPDATE_EXPRESSION),
    PARAM_BIT("ExpressionAttributeNames", EXPR_P_NAMES),
    PARAM_BIT("ExpressionAttributeValues", EXPR_P_VALUES),
};
#undef PARAM_BIT

/* DynamoDB names the placeholder whose value is invalid:
 *   ExpressionAttributeValues contains invalid value: <why> for key :v */
static void values_error(arena *a, const json_t *values, strata_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)values, k, v)
    {
        av tmp;
        strata_err e;
        if (ddbjson_to_value(v, a, &tmp, &e) < 0 && e.code == ERR_VALIDATION) {
            strata_err_set(err, ERR_VALIDATION,
                           "ExpressionAttributeValues contains invalid value: %s for key %s", e.msg,
                           k);
            return;
        }
    }
}

int items_exprs_init(api_request *req, const json_t *obj, unsigned allowed, unsigned legacy,
                     items_exprs *x, strata_err *err)
{
    memset(x, 0, sizeof *x);
    unsigned relevant = allowed | legacy | EXPR_P_NAMES | EXPR_P_VALUES;
    /* One pass over the request's members (two or three in a plain GetItem or PutItem)
     * rather than a hash lookup for each of the 14 names: about 3,000 instructions less
     * per request. */
    const char *member;
    size_t mlen;
    json_t *mv;
    json_object_keylen_foreach((json_t *)obj, member, mlen, mv)
    {
        if (json_is_null(mv))
            continue;
        for (size_t i = 0; i < sizeof param_bits / sizeof param_bits[0]; i++) {
            if ((param_bits[i].bit & relevant) && mlen == param_bits[i].len &&
                memcmp(member, param_bits[i].name, mlen) == 0) {
                x->params |= param_bits[i].bit;
                break;
            }
        }
    }
    if (expr_check_param_mix(x->params, allowed, err) < 0)
        return -1;
    x->ctx = expr_ctx_new(req->arena);
    if (x->ctx == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");

    json_t *names =
        (x->params & EXPR_P_NAMES) ? json_object_get(obj, "ExpressionAttributeNames") : NULL;
    if (names != NULL && !json_is_null(names)) {
        if (!json_is_object(names))
            return api_wrong_type(names, "Map", err);
        if (json_object_size(names) == 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "ExpressionAttributeNames must not be empty");
        x->names = arena_zalloc(req->arena, json_object_size(names) * sizeof *x->names);
        if (x->names == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory");
        const char *k;
        json_t *v;
        json_object_foreach(names, k, v)
        {
            if (!json_is_string(v))
                return api_wrong_type(v, "String", err);
            const char *name = json_string_value(v);
            if (expr_ctx_add_name(x->ctx, k, strlen(k), name, json_string_length(v), err) < 0)
                return -1;
            x->names[x->nnames].placeholder = arena_strndup(req->arena, k, strlen(k));
            x->names[x->nnames].name = arena_strndup(req->arena, name, json_string_length(v));
            x->nnames++;
        }
    }
    json_t *values =
        (x->params & EXPR_P_VALUES) ? json_object_get(obj, "ExpressionAttributeValues") : NULL;
    if (values != NULL && !json_is_null(values)) {
        if (!json_is_object(values))
            return api_wrong_type(values, "Map", err);
        x->values = arena_zalloc(req->arena, sizeof *x->values);
        if (x->values == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory");
        if (ddbjson_to_values(values, req->arena, x->values, err) < 0) {
            if (err && err->code == ERR_VALIDATION)
                values_error(req->arena, values, err);
            return -1;
        }
        if (expr_ctx_set_values(x->ctx, x->values, err) < 0)
            return -1;
    }
    return 0;
}

int items_parse_member(api_request *req, const json_t *obj, items_exprs *x, const char *name,
                       expr_kind kind, expr **out, const char **text, strata_err *err)
{
    *out = NULL;
    if (text)
        *text = NULL;
    json_t *v = json_object_get(obj, name);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return api_wrong_type(v, "String", err);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    *out = expr_parse(x->ctx, kind, s, len, err);
    if (*out == NULL)
        return -1;
    if (text)
        *text = arena_strndup(req->arena, s, len);
    return 0;
}

int items_parse_projection(api_request *req, const json_t *obj, items_exprs *x, expr **out,
                           strata_err *err)
{
    *out = NULL;
    json_t *atg = json_object_get(obj, "AttributesToGet");
    if (atg != NULL && !json_is_null(atg)) {
        const char *text = expr_legacy_attributes_to_get(x->ctx, atg, err);
        if (text == NULL)
            return -1;
        *out = expr_parse(x->ctx, EXPR_PROJECTION, text, strlen(text), err);
        return *out ? 0 : -1;
    }
    return items_parse_member(req, obj, x, "ProjectionExpression", EXPR_PROJECTION, out, NULL, err);
}

int items_project_cb(void *ctx, arena *a, const av *item, av *out, strata_err *err)
{
    return expr_project(ctx, item, a, out, err);
}

int items_filter_cb(void *ctx, const av *item, strata_err *err)
{
    bool ok;
    if (expr_condition_eval(ctx, item, &ok, err) < 0)
        return -1;
    return ok ? 1 : 0;
}

void items_expr_schema(const table_schema *s, expr_key_schema *out)
{
    out->hash_name = s->hash.name;
    out->hash_name_len = s->hash.name_len;
    out->hash_type = s->hash.type;
    out->range_name = s->has_range ? s->range.name : NULL;
    out->range_name_len = s->has_range ? s->range.name_len : 0;
    out->range_type = s->has_range ? s->range.type : 0;
}

const char *items_json_text(arena *a, const json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL || json_is_null(v))
        return NULL;
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s == NULL)
        return NULL;
    char *copy = arena_strndup(a, s, strlen(s));
    free(s);
    return copy;
}

/* ------------------------------------------------------------------ writes */

/* The table name for the ConsumedCapacity answer: a bounded copy, as snprintf("%s") did
 * but at a tenth of the cost (this runs on every GetItem and write). */
static void copy_table_name(char dst[TABLE_NAME_MAX + 1], const char *name)
{
    size_t n = strnlen(name, TABLE_NAME_MAX);
    memcpy(dst, name, n);
    dst[n] = '\0';
}

/*
 * Answers {"<member>":<item>,"ConsumedCapacity":<cc>}, leaving out what is NULL, and
 * takes cc. The text is written straight from the item (as Query does): building a
 * jansson tree and dumping it cost about 25,000 instructions per GetItem, mostly jansson
 * checking and escaping string values character by character. The members, their order
 * and the number formats are the ones api_respond_json() gave.
 */
static void respond_item(api_request *req, const char *member, const av *item, json_t *cc)
{
    buf out;
    buf_init(&out, 0);
    /* One allocation up front rather than a realloc per doubling from 64 bytes; the
     * JSON text of an item is about its size plus the type and punctuation. */
    buf_reserve(&out, 256 + (item != NULL ? 2 * item_size(item) : 0));
    buf_put_u8(&out, '{');
    if (item != NULL) {
        ddbjson_write_string(member, strlen(member), &out);
        buf_put_u8(&out, ':');
        ddbjson_write_item(item, &out);
    }
    if (cc != NULL) {
        /* Same flags as api_respond_json(): capacity units with 13 significant digits. */
        char *text = json_dumps(cc, JSON_COMPACT | JSON_REAL_PRECISION(13));
        json_decref(cc);
        if (text == NULL) {
            buf_free(&out);
            api_respond_error(req, ERR_NOMEM, "out of memory");
            return;
        }
        if (item != NULL)
            buf_put_u8(&out, ',');
        buf_append(&out, "\"ConsumedCapacity\":", 19);
        buf_append(&out, text, strlen(text));
        free(text);
    }
    buf_put_u8(&out, '}');
    if (out.failed) {
        buf_free(&out);
        api_respond_error(req, ERR_NOMEM, "out of memory writing the response");
        return;
    }
    api_respond_raw(req, (const char *)out.data, out.len);
    buf_free(&out);
}

typedef struct {
    api_request *req;
    items_rcc rcc;
    uint32_t table_id;
    char table[TABLE_NAME_MAX + 1];
} write_ctx;

static void write_done(void *arg, const strata_err *err, const uint8_t *result, size_t len)
{
    write_ctx *w = arg;
    api_request *req = w->req;
    if (err != NULL) {
        items_note_throttled(req, w->table_id, err);
        if (err->code == ERR_RESOURCE_NOT_FOUND) /* dropped, not applied: maybe recreated */
            api_catalog_doubt(req);
        api_respond_err(req, err);
        return;
    }
    partition_write_result r;
    strata_err e;
    if (partition_result_decode(result, len, req->arena, &r, &e) < 0) {
        api_respond_err(req, &e);
        return;
    }
    if (r.code != ERR_NONE) {
        strata_err_set(&e, r.code, "%s", r.message);
        json_t *extra = NULL;
        if (r.code == ERR_CONDITIONAL_CHECK && r.attributes) {
            extra = json_object();
            json_object_set_new(extra, "Item", ddbjson_from_item(r.attributes));
        }
        api_respond_err_with(req, &e, extra);
        return;
    }
    json_t *cc = items_consumed_json(w->rcc, w->table, (double)partition_write_units(&r));
    respond_item(req, "Attributes", r.attributes, cc);
}

/* Parameters every single-item write shares. */
typedef struct {
    const table_info *t;
    const char *table;
    size_t table_len;
    items_rcc rcc;
    int rv;      /* index into return_values_names */
    bool rvoccf; /* ReturnValuesOnConditionCheckFailure = ALL_OLD */
    items_exprs x;
    partition_write w;
} write_req;

static const char *const return_values_names[] = {"NONE",    "ALL_OLD",     "UPDATED_OLD",
                                                  "ALL_NEW", "UPDATED_NEW", NULL};

static int write_params(api_request *req, write_req *wr, unsigned allowed, unsigned legacy,
                        strata_err *err)
{
    memset(wr, 0, sizeof *wr);
    if (api_param_table_name(req, &wr->table, &wr->table_len, err) < 0)
        return -1;
    if (api_param_enum(req, "ReturnValues", "returnValues", return_values_names, 0, &wr->rv, err) <
        0)
        return -1;
    static const char *const rvoccf[] = {"NONE", "ALL_OLD", NULL};
    int r;
    if (api_param_enum(req, "ReturnValuesOnConditionCheckFailure",
                       "returnValuesOnConditionCheckFailure", rvoccf, 0, &r, err) < 0)
        return -1;
    wr->rvoccf = r == 1;
    static const char *const metrics[] = {"SIZE", "NONE", NULL};
    if (api_param_enum(req, "ReturnItemCollectionMetrics", "returnItemCollectionMetrics", metrics,
                       1, &r, err) < 0)
        return -1;
    if (items_param_rcc(req, &wr->rcc, err) < 0)
        return -1;
    wr->t = items_table(req, wr->table, wr->table_len, err);
    if (wr->t == NULL)
        return -1;
    if (items_exprs_init(req, req->body, allowed, legacy, &wr->x, err) < 0)
        return -1;
    wr->w.table_id = wr->t->schema.table_id;
    catalog_key_schema(&wr->t->schema, &wr->w.ks);
    wr->w.return_values = (partition_return)wr->rv;
    wr->w.return_old_on_condition_failure = wr->rvoccf;
    wr->w.now_ms = api_now_ms();
    return 0;
}

/* The condition: ConditionExpression, or legacy Expected (+ ConditionalOperator). */
static int write_condition(api_request *req, write_req *wr, strata_err *err)
{
    expr *cond;
    if (items_parse_member(req, req->body, &wr->x, "ConditionExpression", EXPR_CONDITION, &cond,
                           &wr->w.condition, err) < 0)
        return -1;
    json_t *expected = json_object_get(req->body, "Expected");
    json_t *condop = json_object_get(req->body, "ConditionalOperator");
    if (expected && !json_is_null(expected)) {
        const char *text = expr_legacy_expected(wr->x.ctx, expected, condop, err);
        if (text == NULL)
            return -1;
        /* Expected {} checks nothing (the replica skips it the same way). */
        if (text[0] && expr_parse(wr->x.ctx, EXPR_CONDITION, text, strlen(text), err) == NULL)
            return -1;
        wr->w.expected_json = items_json_text(req->arena, req->body, "Expected");
        wr->w.conditional_operator_json =
            items_json_text(req->arena, req->body, "ConditionalOperator");
    }
    return 0;
}

/* Finishes a write: placeholders all used, names/values into the command, submit. */
static void write_submit(api_request *req, write_req *wr, const av *pk)
{
    strata_err err;
    if (expr_ctx_check_unused(wr->x.ctx, &err) < 0) {
        api_respond_err(req, &err);
        return;
    }
    if (!wr->w.expected_json && !wr->w.attribute_updates_json) {
        wr->w.names = wr->x.names;
        wr->w.nnames = wr->x.nnames;
        wr->w.values = wr->x.values;
    }
    write_ctx *c = arena_zalloc(req->arena, sizeof *c);
    if (c == NULL) {
        api_respond_error(req, ERR_NOMEM, "out of memory");
        return;
    }
    c->req = req;
    c->rcc = wr->rcc;
    c->table_id = wr->w.table_id;
    copy_table_name(c->table, wr->t->schema.name);
    buf cmd;
    buf_init(&cmd, 0);
    if (partition_write_encode(&wr->w, &cmd, &err) < 0 ||
        router_write(req->router, wr->w.table_id, key_hash(pk), cmd.data, cmd.len, write_done, c,
                     &err) < 0) {
        buf_free(&cmd);
        items_note_throttled(req, wr->w.table_id, &err);
        api_respond_err(req, &err);
        return;
    }
    buf_free(&cmd);
}

void api_put_item(api_request *req)
{
    write_req wr;
    strata_err err;
    if (write_params(req, &wr, EXPR_P_CONDITION_EXPRESSION,
                     EXPR_P_EXPECTED | EXPR_P_CONDITIONAL_OPERATOR, &err) < 0)
        goto fail;
    if (wr.rv != PARTITION_RETURN_NONE && wr.rv != PARTITION_RETURN_ALL_OLD) {
        strata_err_set(&err, ERR_VALIDATION, "ReturnValues can only be ALL_OLD or NONE");
        goto fail;
    }
    json_t *item_json;
    if (api_param_object(req, "Item", &item_json, &err) < 0)
        goto fail;
    if (item_json == NULL) {
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, NULL, "item", "Member must not be null");
        api_verr_finish(&ve, &err);
        goto fail;
    }
    av *item = arena_zalloc(req->arena, sizeof *item);
    if (item == NULL || ddbjson_to_item(item_json, req->arena, item, &err) < 0) {
        if (item == NULL)
            strata_err_set(&err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    const av *pk, *sk;
    if (items_check_key(&wr.t->schema, item, false, &pk, &sk, &err) < 0) {
        api_catalog_doubt(req);
        goto fail;
    }
    if (item_size(item) > ITEM_MAX_SIZE) {
        strata_err_set(&err, ERR_VALIDATION, "Item size has exceeded the maximum allowed size");
        goto fail;
    }
    if (write_condition(req, &wr, &err) < 0)
        goto fail;
    wr.w.kind = PARTITION_PUT;
    wr.w.item = item;
    wr.w.key = items_key_map(req->arena, &wr.t->schema, pk, sk);
    write_submit(req, &wr, pk);
    return;
fail:
    api_respond_err(req, &err);
}

/* The Key parameter of a single-item operation. */
static int key_param(api_request *req, const table_info *t, av **key, const av **pk, const av **sk,
                     strata_err *err)
{
    json_t *key_json;
    if (api_param_object(req, "Key", &key_json, err) < 0)
        return -1;
    if (key_json == NULL) {
        api_verr ve;
        api_verr_init(&ve);
        api_verr_add(&ve, NULL, "key", "Member must not be null");
        return api_verr_finish(&ve, err);
    }
    if (items_key_from_json(req->arena, &t->schema, key_json, key, pk, sk, err) < 0) {
        api_catalog_doubt(req);
        return -1;
    }
    return 0;
}

void api_delete_item(api_request *req)
{
    write_req wr;
    strata_err err;
    if (write_params(req, &wr, EXPR_P_CONDITION_EXPRESSION,
                     EXPR_P_EXPECTED | EXPR_P_CONDITIONAL_OPERATOR, &err) < 0)
        goto fail;
    if (wr.rv != PARTITION_RETURN_NONE && wr.rv != PARTITION_RETURN_ALL_OLD) {
        strata_err_set(&err, ERR_VALIDATION, "ReturnValues can only be ALL_OLD or NONE");
        goto fail;
    }
    av *key;
    const av *pk, *sk;
    if (key_param(req, wr.t, &key, &pk, &sk, &err) < 0)
        goto fail;
    if (write_condition(req, &wr, &err) < 0)
        goto fail;
    wr.w.kind = PARTITION_DELETE;
    wr.w.key = key;
    write_submit(req, &wr, pk);
    return;
fail:
    api_respond_err(req, &err);
}

void api_update_item(api_request *req)
{
    write_req wr;
    strata_err err;
    if (write_params(req, &wr, EXPR_P_UPDATE_EXPRESSION | EXPR_P_CONDITION_EXPRESSION,
                     EXPR_P_EXPECTED | EXPR_P_CONDITIONAL_OPERATOR | EXPR_P_ATTRIBUTE_UPDATES,
                     &err) < 0)
        goto fail;
    av *key;
    const av *pk, *sk;
    if (key_param(req, wr.t, &key, &pk, &sk, &err) < 0)
        goto fail;
    expr_key_schema ks;
    items_expr_schema(&wr.t->schema, &ks);
    expr *upd;
    if (items_parse_member(req, req->body, &wr.x, "UpdateExpression", EXPR_UPDATE, &upd,
                           &wr.w.update, &err) < 0)
        goto fail;
    json_t *updates = json_object_get(req->body, "AttributeUpdates");
    if (updates && !json_is_null(updates)) {
        const char *text = expr_legacy_attribute_updates(wr.x.ctx, updates, &err);
        if (text == NULL)
            goto fail;
        /* AttributeUpdates {} changes nothing but the item's existence, as no update. */
        upd = text[0] ? expr_parse(wr.x.ctx, EXPR_UPDATE, text, strlen(text), &err) : NULL;
        if (text[0] && upd == NULL)
            goto fail;
        wr.w.attribute_updates_json = items_json_text(req->arena, req->body, "AttributeUpdates");
    }
    if (upd && expr_update_check_keys(upd, &ks, &err) < 0) {
        static const char prefix[] = "One or more parameter values were invalid: ";
        if (strncmp(err.msg, prefix, sizeof prefix - 1) != 0) {
            char msg[STRATA_ERR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err.msg);
            strata_err_set(&err, ERR_VALIDATION, "%s%s", prefix, msg);
        }
        goto fail;
    }
    if (write_condition(req, &wr, &err) < 0)
        goto fail;
    wr.w.kind = PARTITION_UPDATE;
    wr.w.key = key;
    write_submit(req, &wr, pk);
    return;
fail:
    api_respond_err(req, &err);
}

/* ------------------------------------------------------------------ GetItem */

typedef struct {
    api_request *req;
    items_rcc rcc;
    bool consistent;
    char table[TABLE_NAME_MAX + 1];
    partition_read_req rr;
} get_ctx;

static void get_done(void *arg, const strata_err *err, partition_read_res *res)
{
    get_ctx *g = arg;
    api_request *req = g->req;
    if (err != NULL) {
        items_note_throttled(req, g->rr.table_id, err);
        if (err->code == ERR_RESOURCE_NOT_FOUND) /* dropped: maybe recreated */
            api_catalog_doubt(req);
        api_respond_err(req, err);
        return;
    }
    json_t *cc =
        items_consumed_json(g->rcc, g->table, partition_read_units(res->bytes_read, g->consistent));
    respond_item(req, "Item", res->found ? &res->items[0] : NULL, cc);
}

void api_get_item(api_request *req)
{
    strata_err err;
    const char *table;
    size_t table_len;
    get_ctx *g = arena_zalloc(req->arena, sizeof *g);
    if (g == NULL) {
        api_respond_error(req, ERR_NOMEM, "out of memory");
        return;
    }
    g->req = req;
    if (api_param_table_name(req, &table, &table_len, &err) < 0 ||
        items_param_rcc(req, &g->rcc, &err) < 0 ||
        api_param_bool(req, "ConsistentRead", false, &g->consistent, &err) < 0)
        goto fail;
    const table_info *t = items_table(req, table, table_len, &err);
    if (t == NULL)
        goto fail;
    copy_table_name(g->table, t->schema.name);
    av *key;
    const av *pk, *sk;
    if (key_param(req, t, &key, &pk, &sk, &err) < 0)
        goto fail;
    items_exprs x;
    if (items_exprs_init(req, req->body, EXPR_P_PROJECTION_EXPRESSION, EXPR_P_ATTRIBUTES_TO_GET, &x,
                         &err) < 0)
        goto fail;
    expr *proj;
    if (items_parse_projection(req, req->body, &x, &proj, &err) < 0)
        goto fail;
    if (expr_ctx_check_unused(x.ctx, &err) < 0)
        goto fail;
    g->rr.kind = PARTITION_GET;
    g->rr.table_id = t->schema.table_id;
    if (catalog_key_schema_copy(&t->schema, req->arena, &g->rr.ks) < 0) {
        strata_err_set(&err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    g->rr.key = key;
    g->rr.consistent = g->consistent;
    if (proj) {
        g->rr.project = items_project_cb;
        g->rr.project_ctx = proj;
    }
    const partition_desc *p =
        router_partition_for_hash(req->router, t->schema.table_id, key_hash(pk));
    if (p == NULL) {
        strata_err_set(&err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
        goto fail;
    }
    if (router_read(req->router, t->schema.table_id, p->id, &g->rr, req->arena, get_done, g, &err) <
        0) {
        items_note_throttled(req, t->schema.table_id, &err);
        goto fail;
    }
    return;
fail:
    api_respond_err(req, &err);
}
