/*
 * The partition state machine (see partition.h for the contract).
 *
 * Write commands are PartitionWrite messages (proto/partition.proto) whose items, keys
 * and values are in the binary item codec (storage/data/codec.h). Apply reads the
 * current item, evaluates the condition, computes the new item, checks the size limit,
 * writes it under (range_id = partition id, log_index) and answers a
 * PartitionWriteResult. Everything here depends only on the command and the engine's
 * state, so every replica computes the same bytes.
 */
#include "cluster/partition.h"

#include <string.h>

#include <jansson.h>

#include "partition.pb-c.h"
#include "storage/base/arena_pb.h"
#include "storage/data/codec.h"
#include "storage/data/json.h"
#include "storage/data/key.h"
#include "storage/expr/expr.h"
#include "storage/lsm/lsm.h"

#define KB 1024u

/* ------------------------------------------------------------------ small helpers */

static char *dup_or_empty(arena *a, const char *s, size_t len)
{
    if (s == NULL)
        return "";
    return arena_strndup(a, s, len);
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static bool str_present(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* Encodes an AV_M with the item codec into a fresh arena copy. */
static int encode_map(arena *a, const av *m, ProtobufCBinaryData *out, strata_err *err)
{
    out->data = NULL;
    out->len = 0;
    if (m == NULL)
        return 0;
    buf b;
    buf_init(&b, 0);
    item_encode(m, &b);
    if (b.failed) {
        buf_free(&b);
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding an item");
    }
    out->data = arena_memdup(a, b.data, b.len ? b.len : 1);
    out->len = b.len;
    buf_free(&b);
    if (out->data == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding an item");
    return 0;
}

static int decode_map(arena *a, const ProtobufCBinaryData *in, av **out, strata_err *err)
{
    *out = NULL;
    if (in->len == 0)
        return 0;
    av *m = arena_zalloc(a, sizeof *m);
    if (m == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory decoding an item");
    if (item_decode(in->data, in->len, a, m, err) < 0)
        return -1;
    *out = m;
    return 0;
}

static void key_schema_from_pb(const Strata__PartitionKeySchema *pb, partition_key_schema *ks)
{
    memset(ks, 0, sizeof *ks);
    if (pb == NULL)
        return;
    ks->hash_name = pb->hash_name;
    ks->hash_name_len = (uint32_t)strlen(pb->hash_name);
    ks->hash_type = (av_type)pb->hash_type;
    if (pb->range_type != 0) {
        ks->range_name = pb->range_name;
        ks->range_name_len = (uint32_t)strlen(pb->range_name);
        ks->range_type = (av_type)pb->range_type;
    }
}

/* The key values of an item or key map under schema `ks`; -1 if one is missing. */
static int key_values(const partition_key_schema *ks, const av *m, const av **pk, const av **sk,
                      strata_err *err)
{
    *pk = av_map_get(m, ks->hash_name, ks->hash_name_len);
    *sk = NULL;
    if (*pk == NULL || (*pk)->type != ks->hash_type || !key_type_ok(ks->hash_type))
        return strata_err_set(err, ERR_VALIDATION,
                              "The provided key element does not match the schema");
    if (ks->range_type) {
        *sk = av_map_get(m, ks->range_name, ks->range_name_len);
        if (*sk == NULL || (*sk)->type != ks->range_type || !key_type_ok(ks->range_type))
            return strata_err_set(err, ERR_VALIDATION,
                                  "The provided key element does not match the schema");
    }
    return 0;
}

/* The storage key of (table, pk, sk) into `b` (reset first). */
static int storage_key(uint32_t table_id, const av *pk, const av *sk, buf *b, strata_err *err)
{
    buf_reset(b);
    storage_key_build(table_id, pk, sk, b);
    if (b->failed)
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding a key");
    return 0;
}

/* Reads and decodes the item stored under `key`; *item NULL when absent. */
static int read_item(struct lsm *engine, const buf *key, arena *a, av **item, strata_err *err)
{
    *item = NULL;
    buf v;
    buf_init(&v, 0);
    int rc = lsm_get(engine, NULL, key->data, key->len, &v, err);
    if (rc < 0) {
        buf_free(&v);
        return -1;
    }
    if (rc == 1) {
        av *it = arena_zalloc(a, sizeof *it);
        if (it == NULL || item_decode_copy(v.data, v.len, a, it, err) < 0) {
            buf_free(&v);
            if (it == NULL)
                return strata_err_set(err, ERR_NOMEM, "out of memory reading an item");
            return -1;
        }
        *item = it;
    }
    buf_free(&v);
    return 0;
}

/* A map holding only the key attributes of `item`. */
static int key_of_item(arena *a, const partition_key_schema *ks, const av *item, av *out,
                       strata_err *err)
{
    const av *pk, *sk;
    if (key_values(ks, item, &pk, &sk, err) < 0)
        return -1;
    uint32_t n = sk ? 2 : 1;
    av_attr *attrs = arena_zalloc(a, n * sizeof *attrs);
    if (attrs == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    attrs[0].name = ks->hash_name;
    attrs[0].name_len = ks->hash_name_len;
    attrs[0].value = *pk;
    if (sk) {
        attrs[1].name = ks->range_name;
        attrs[1].name_len = ks->range_name_len;
        attrs[1].value = *sk;
    }
    out->type = AV_M;
    out->u.map.attrs = attrs;
    out->u.map.count = n;
    return av_map_sort(out, err);
}

/* ------------------------------------------------------------------ write commands */

int partition_write_encode(const partition_write *w, buf *out, strata_err *err)
{
    arena a;
    arena_init(&a, 0);
    int rc = -1;

    Strata__PartitionWrite m = STRATA__PARTITION_WRITE__INIT;
    Strata__PartitionKeySchema ks = STRATA__PARTITION_KEY_SCHEMA__INIT;
    ks.hash_name = dup_or_empty(&a, w->ks.hash_name, w->ks.hash_name_len);
    ks.hash_type = (uint32_t)w->ks.hash_type;
    ks.range_name =
        w->ks.range_type ? dup_or_empty(&a, w->ks.range_name, w->ks.range_name_len) : "";
    ks.range_type = (uint32_t)w->ks.range_type;
    if (ks.hash_name == NULL || ks.range_name == NULL)
        goto oom;

    switch (w->kind) {
    case PARTITION_PUT:
        m.kind = STRATA__PARTITION_WRITE__KIND__PUT;
        break;
    case PARTITION_UPDATE:
        m.kind = STRATA__PARTITION_WRITE__KIND__UPDATE;
        break;
    case PARTITION_DELETE:
        m.kind = STRATA__PARTITION_WRITE__KIND__DELETE;
        break;
    default:
        strata_err_set(err, ERR_INTERNAL, "partition_write_encode: bad kind %d", (int)w->kind);
        goto out;
    }
    m.table_id = w->table_id;
    m.key_schema = &ks;
    if (encode_map(&a, w->key, &m.key, err) < 0)
        goto out;
    if (w->kind == PARTITION_PUT && encode_map(&a, w->item, &m.item, err) < 0)
        goto out;
    m.condition_expression = (char *)str_or_empty(w->condition);
    m.update_expression = (char *)str_or_empty(w->update);
    if (w->nnames) {
        m.names = arena_zalloc(&a, w->nnames * sizeof *m.names);
        Strata__PartitionNameEntry *e = arena_zalloc(&a, w->nnames * sizeof *e);
        if (m.names == NULL || e == NULL)
            goto oom;
        for (uint32_t i = 0; i < w->nnames; i++) {
            strata__partition_name_entry__init(&e[i]);
            e[i].placeholder = (char *)str_or_empty(w->names[i].placeholder);
            e[i].name = (char *)str_or_empty(w->names[i].name);
            m.names[i] = &e[i];
        }
        m.n_names = w->nnames;
    }
    if (encode_map(&a, w->values, &m.values, err) < 0)
        goto out;
    m.expected_json = (char *)str_or_empty(w->expected_json);
    m.conditional_operator_json = (char *)str_or_empty(w->conditional_operator_json);
    m.attribute_updates_json = (char *)str_or_empty(w->attribute_updates_json);
    m.return_values = (uint32_t)w->return_values;
    m.return_old_on_condition_failure = w->return_old_on_condition_failure;
    m.now_ms = w->now_ms;

    size_t n = strata__partition_write__get_packed_size(&m);
    if (!buf_reserve(out, n))
        goto oom;
    strata__partition_write__pack(&m, out->data + out->len);
    out->len += n;
    rc = 0;
    goto out;
oom:
    strata_err_set(err, ERR_NOMEM, "out of memory encoding a write command");
out:
    arena_free(&a);
    return rc;
}

/* What one command did; encoded as PartitionWriteResult. */
typedef struct {
    strata_code code;
    char message[STRATA_ERR_MSG_MAX];
    const av *attributes;
    uint64_t old_size, new_size;
} outcome;

static void outcome_fail(outcome *o, const strata_err *e)
{
    o->code = e->code;
    snprintf(o->message, sizeof o->message, "%s", e->msg);
}

static int encode_result(arena *a, const outcome *o, buf *result, strata_err *err)
{
    Strata__PartitionWriteResult r = STRATA__PARTITION_WRITE_RESULT__INIT;
    r.code = (uint32_t)o->code;
    r.message = (char *)o->message;
    r.old_size = o->old_size;
    r.new_size = o->new_size;
    if (o->attributes) {
        r.has_attributes = true;
        if (encode_map(a, o->attributes, &r.attributes, err) < 0)
            return -1;
    }
    size_t n = strata__partition_write_result__get_packed_size(&r);
    if (n == 0)
        return 0; /* all defaults (e.g. deleting a missing item): empty bytes decode fine */
    if (!buf_reserve(result, n))
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding a result");
    strata__partition_write_result__pack(&r, result->data + result->len);
    result->len += n;
    return 0;
}

/* Parses a JSON parameter shipped as text; NULL for "" (absent). */
static json_t *load_json(const char *text, strata_err *err, bool *failed)
{
    *failed = false;
    if (!str_present(text))
        return NULL;
    strata_err je;
    json_t *j =
        strata_json_parse(text, strlen(text), STRATA_JSON_DECODE_ANY | STRATA_JSON_ALLOW_NUL, &je);
    if (j == NULL) {
        *failed = true;
        strata_err_set(err, ERR_INTERNAL, "write command carries invalid JSON: %s", je.msg);
    }
    return j;
}

/* Parses the command's condition and update (expressions or legacy parameters). */
static int parse_expressions(arena *a, const Strata__PartitionWrite *m, expr **cond, expr **upd,
                             strata_err *err)
{
    *cond = *upd = NULL;
    expr_ctx *c = expr_ctx_new(a);
    if (c == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->n_names; i++) {
        const Strata__PartitionNameEntry *e = m->names[i];
        if (expr_ctx_add_name(c, e->placeholder, strlen(e->placeholder), e->name, strlen(e->name),
                              err) < 0)
            return -1;
    }
    av *values;
    if (decode_map(a, &m->values, &values, err) < 0)
        return -1;
    if (values && expr_ctx_set_values(c, values, err) < 0)
        return -1;

    const char *cond_text = m->condition_expression;
    const char *upd_text = m->update_expression;
    int rc = 0;
    bool failed;
    json_t *expected = load_json(m->expected_json, err, &failed);
    if (failed)
        return -1;
    json_t *condop = load_json(m->conditional_operator_json, err, &failed);
    if (failed) {
        json_decref(expected);
        return -1;
    }
    json_t *updates = load_json(m->attribute_updates_json, err, &failed);
    if (failed) {
        json_decref(expected);
        json_decref(condop);
        return -1;
    }
    if (expected) {
        cond_text = expr_legacy_expected(c, expected, condop, err);
        if (cond_text == NULL)
            rc = -1;
    }
    if (rc == 0 && updates) {
        upd_text = expr_legacy_attribute_updates(c, updates, err);
        if (upd_text == NULL)
            rc = -1;
    }
    if (rc == 0 && str_present(cond_text)) {
        *cond = expr_parse(c, EXPR_CONDITION, cond_text, strlen(cond_text), err);
        if (*cond == NULL)
            rc = -1;
    }
    if (rc == 0 && str_present(upd_text)) {
        *upd = expr_parse(c, EXPR_UPDATE, upd_text, strlen(upd_text), err);
        if (*upd == NULL)
            rc = -1;
    }
    json_decref(expected);
    json_decref(condop);
    json_decref(updates);
    return rc;
}

static int write_engine(struct lsm *engine, const partition_desc *p, uint64_t log_index,
                        const buf *key, const av *new_item, arena *a, strata_err *err)
{
    lsm_batch *b = lsm_batch_new();
    if (b == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    int rc;
    if (new_item) {
        ProtobufCBinaryData v;
        rc = encode_map(a, new_item, &v, err);
        if (rc == 0)
            rc = lsm_batch_put(b, key->data, key->len, v.data, v.len, err);
    } else {
        rc = lsm_batch_delete(b, key->data, key->len, err);
    }
    if (rc == 0)
        rc = lsm_write(engine, b, p->id, log_index, err);
    lsm_batch_free(b);
    return rc;
}

/* Runs the command. Returns -1 only for engine failures; everything else lands in `o`. */
static int run_command(struct lsm *engine, const partition_desc *p, const Strata__PartitionWrite *m,
                       uint64_t log_index, arena *a, outcome *o, strata_err *err)
{
    strata_err e;
    strata_err_clear(&e);
    partition_key_schema ks;
    key_schema_from_pb(m->key_schema, &ks);

    av *key, *put_item = NULL;
    const av *pk, *sk;
    if (decode_map(a, &m->key, &key, &e) < 0 || key == NULL ||
        key_values(&ks, key, &pk, &sk, &e) < 0) {
        if (e.code == ERR_NONE)
            strata_err_set(&e, ERR_VALIDATION, "write command without a key");
        outcome_fail(o, &e);
        return 0;
    }
    /* A command routed to the wrong partition is a bug upstream; refusing it keeps
     * this partition's range clean (the API layer never produces one). */
    uint64_t h = key_hash(pk);
    if (m->table_id != p->table_id || h < p->hash_lo || h > p->hash_hi) {
        strata_err_set(&e, ERR_INTERNAL, "write command for another partition");
        outcome_fail(o, &e);
        return 0;
    }
    if (m->kind == STRATA__PARTITION_WRITE__KIND__PUT) {
        const av *ipk, *isk;
        if (decode_map(a, &m->item, &put_item, &e) < 0 || put_item == NULL ||
            key_values(&ks, put_item, &ipk, &isk, &e) < 0 || !av_equal(ipk, pk) ||
            (sk && !av_equal(isk, sk))) {
            if (e.code == ERR_NONE)
                strata_err_set(&e, ERR_VALIDATION,
                               "The provided key element does not match the schema");
            outcome_fail(o, &e);
            return 0;
        }
    }

    buf k;
    buf_init(&k, 0);
    int rc = -1;
    if (storage_key(m->table_id, pk, sk, &k, err) < 0)
        goto out;
    av *old;
    if (read_item(engine, &k, a, &old, err) < 0)
        goto out;
    o->old_size = old ? item_size(old) : 0;
    o->new_size = o->old_size;

    expr *cond, *upd;
    if (parse_expressions(a, m, &cond, &upd, &e) < 0) {
        outcome_fail(o, &e);
        rc = 0;
        goto out;
    }
    if (cond) {
        bool ok;
        if (expr_condition_eval(cond, old, &ok, err) < 0)
            goto out;
        if (!ok) {
            o->code = ERR_CONDITIONAL_CHECK;
            snprintf(o->message, sizeof o->message, "The conditional request failed");
            if (m->return_old_on_condition_failure && old)
                o->attributes = old;
            rc = 0;
            goto out;
        }
    }

    av *new_item = NULL;
    switch (m->kind) {
    case STRATA__PARTITION_WRITE__KIND__PUT:
        new_item = put_item;
        if (item_size(new_item) > ITEM_MAX_SIZE) {
            o->code = ERR_VALIDATION;
            snprintf(o->message, sizeof o->message,
                     "Item size has exceeded the maximum allowed size");
            rc = 0;
            goto out;
        }
        break;
    case STRATA__PARTITION_WRITE__KIND__UPDATE:
        new_item = arena_zalloc(a, sizeof *new_item);
        if (new_item == NULL) {
            strata_err_set(err, ERR_NOMEM, "out of memory");
            goto out;
        }
        /* A missing item is created from its key, as DynamoDB's UpdateItem does. */
        const av *base = old ? old : key;
        if (upd) {
            if (expr_update_apply(upd, base, a, new_item, &e) < 0) {
                if (e.code == ERR_NOMEM) {
                    *err = e;
                    goto out;
                }
                outcome_fail(o, &e);
                rc = 0;
                goto out;
            }
        } else {
            *new_item = *base;
        }
        if (item_size(new_item) > ITEM_MAX_SIZE) {
            o->code = ERR_VALIDATION;
            snprintf(o->message, sizeof o->message,
                     "Item size to update has exceeded the maximum allowed size");
            rc = 0;
            goto out;
        }
        break;
    case STRATA__PARTITION_WRITE__KIND__DELETE:
        new_item = NULL;
        break;
    default:
        strata_err_set(&e, ERR_VALIDATION, "unknown write command kind %d", (int)m->kind);
        outcome_fail(o, &e);
        rc = 0;
        goto out;
    }

    /* An update of a missing item that only REMOVEs or DELETEs (it leaves nothing but
     * the key) creates no item, as in DynamoDB; SET and ADD always add an attribute. */
    bool nothing = m->kind == STRATA__PARTITION_WRITE__KIND__UPDATE && old == NULL && upd &&
                   new_item->u.map.count == key->u.map.count;
    if (nothing) {
        new_item = NULL;
    } else if (write_engine(engine, p, log_index, &k, new_item, a, err) < 0) {
        goto out;
    }
    o->new_size = new_item ? item_size(new_item) : 0;

    /* The image ReturnValues asks for; an empty image is no Attributes at all. */
    const av *ret = NULL;
    switch ((partition_return)m->return_values) {
    case PARTITION_RETURN_NONE:
        break;
    case PARTITION_RETURN_ALL_OLD:
        ret = old;
        break;
    case PARTITION_RETURN_ALL_NEW:
        ret = new_item;
        break;
    case PARTITION_RETURN_UPDATED_OLD:
    case PARTITION_RETURN_UPDATED_NEW: {
        const av *src = m->return_values == PARTITION_RETURN_UPDATED_OLD ? old : new_item;
        if (upd && src) {
            av *r = arena_zalloc(a, sizeof *r);
            if (r == NULL) {
                strata_err_set(err, ERR_NOMEM, "out of memory");
                goto out;
            }
            if (expr_update_returned(upd, src, a, r, err) < 0)
                goto out;
            ret = r;
        }
        break;
    }
    }
    if (ret && ret->type == AV_M && ret->u.map.count > 0)
        o->attributes = ret;
    rc = 0;
out:
    buf_free(&k);
    return rc;
}

/* Whether this binary knows everything in the command (see partition_apply in the header).
 * Kind 0 is no newer binary's: such a command is answered (it has no key). */
static bool command_known(const Strata__PartitionWrite *m)
{
    return m->base.n_unknown_fields == 0 &&
           m->kind >= STRATA__PARTITION_WRITE__KIND__KIND_UNSPECIFIED &&
           m->kind <= STRATA__PARTITION_WRITE__KIND__DELETE;
}

int partition_apply(struct lsm *engine, const partition_desc *p, const uint8_t *cmd, size_t len,
                    uint64_t log_index, buf *result, strata_err *err)
{
    arena a;
    arena_init(&a, 0);
    ProtobufCAllocator alloc = arena_pb_allocator(&a);
    outcome o;
    memset(&o, 0, sizeof o);
    int rc = 0;

    Strata__PartitionWrite *m = strata__partition_write__unpack(&alloc, len, cmd);
    if (m != NULL && !command_known(m)) {
        strata_err_set(err, ERR_NEWER,
                       "write command of a newer version (kind %d, %u unknown fields)",
                       (int)m->kind, m->base.n_unknown_fields);
        arena_free(&a);
        return -1;
    }
    if (m == NULL) {
        /* The log checksums its entries, so this is a bug, not corruption: answer it
         * (deterministically) rather than stopping the replica. */
        o.code = ERR_INTERNAL;
        snprintf(o.message, sizeof o.message, "write command does not decode");
    } else {
        rc = run_command(engine, p, m, log_index, &a, &o, err);
    }
    if (rc == 0)
        rc = encode_result(&a, &o, result, err);
    arena_free(&a);
    return rc;
}

int partition_result_decode(const uint8_t *res, size_t len, arena *a, partition_write_result *out,
                            strata_err *err)
{
    memset(out, 0, sizeof *out);
    ProtobufCAllocator alloc = arena_pb_allocator(a);
    Strata__PartitionWriteResult *r = strata__partition_write_result__unpack(&alloc, len, res);
    if (r == NULL)
        return strata_err_set(err, ERR_CORRUPT, "write result does not decode");
    out->code = (strata_code)r->code;
    if (out->code >= ERR_CODE_COUNT)
        out->code = ERR_INTERNAL;
    /* A bounded copy rather than snprintf("%s"): this runs twice for every write. */
    const char *msg = r->message ? r->message : "";
    size_t n = strnlen(msg, sizeof out->message - 1);
    memcpy(out->message, msg, n);
    out->message[n] = '\0';
    out->old_size = r->old_size;
    out->new_size = r->new_size;
    if (r->has_attributes) {
        av *m;
        if (decode_map(a, &r->attributes, &m, err) < 0)
            return -1;
        out->attributes = m;
    }
    return 0;
}

void partition_result_delta(const uint8_t *res, size_t len, int64_t *items, int64_t *bytes)
{
    *items = 0;
    *bytes = 0;
    arena a;
    arena_init(&a, 0);
    ProtobufCAllocator alloc = arena_pb_allocator(&a);
    Strata__PartitionWriteResult *r = strata__partition_write_result__unpack(&alloc, len, res);
    if (r != NULL) {
        *items = (int64_t)(r->new_size > 0) - (int64_t)(r->old_size > 0);
        *bytes = (int64_t)r->new_size - (int64_t)r->old_size;
    }
    arena_free(&a);
}

uint64_t partition_write_units(const partition_write_result *r)
{
    uint64_t size = r->old_size > r->new_size ? r->old_size : r->new_size;
    uint64_t units = (size + KB - 1) / KB;
    return units ? units : 1;
}

double partition_read_units(uint64_t bytes, bool consistent)
{
    uint64_t units = (bytes + 4 * KB - 1) / (4 * KB);
    if (units == 0)
        units = 1;
    return consistent ? (double)units : (double)units / 2.0;
}

/* ------------------------------------------------------------------ reads */

/* Appends one item to the result (projected unless counting only). */
static int emit(const partition_read_req *req, arena *a, partition_read_res *res, uint32_t *cap,
                const av *item, strata_err *err)
{
    if (req->filter) {
        int keep = req->filter(req->filter_ctx, item, err);
        if (keep < 0)
            return -1;
        if (!keep)
            return 0;
    }
    res->count++;
    if (req->count_only)
        return 0;
    if (res->count > *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 16;
        av *n = arena_realloc(a, res->items, *cap * sizeof *n, ncap * sizeof *n);
        if (n == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory collecting items");
        res->items = n;
        *cap = ncap;
    }
    av *slot = &res->items[res->count - 1];
    if (req->project)
        return req->project(req->project_ctx, a, item, slot, err);
    *slot = *item;
    return 0;
}

static int read_get(struct lsm *engine, const partition_read_req *req, arena *a,
                    partition_read_res *res, strata_err *err)
{
    const av *pk, *sk;
    if (key_values(&req->ks, req->key, &pk, &sk, err) < 0)
        return -1;
    buf k;
    buf_init(&k, 0);
    av *item = NULL;
    int rc = storage_key(req->table_id, pk, sk, &k, err);
    if (rc == 0)
        rc = read_item(engine, &k, a, &item, err);
    buf_free(&k);
    if (rc < 0 || item == NULL)
        return rc;
    res->found = true;
    res->scanned_count = 1;
    res->bytes_read = item_size(item);
    res->items = arena_zalloc(a, sizeof *res->items);
    if (res->items == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    res->count = 1;
    if (req->project)
        return req->project(req->project_ctx, a, item, &res->items[0], err);
    res->items[0] = *item;
    return 0;
}

static bool has_prefix(const av *v, const av *prefix)
{
    return v->u.bytes.len >= prefix->u.bytes.len &&
           memcmp(v->u.bytes.ptr, prefix->u.bytes.ptr, prefix->u.bytes.len) == 0;
}

/* Where a sort key lies relative to the predicate, in ascending order:
 * -1 before the matching range, 0 inside, +1 after it. */
static int sk_position(const partition_read_req *req, const av *sk)
{
    const av *a1 = req->sk1, *a2 = req->sk2;
    int c;
    switch (req->sk_op) {
    case PARTITION_SK_ANY:
        return 0;
    case PARTITION_SK_EQ:
        c = av_cmp_scalar(sk, a1);
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    case PARTITION_SK_LT:
        return av_cmp_scalar(sk, a1) < 0 ? 0 : 1;
    case PARTITION_SK_LE:
        return av_cmp_scalar(sk, a1) <= 0 ? 0 : 1;
    case PARTITION_SK_GT:
        return av_cmp_scalar(sk, a1) > 0 ? 0 : -1;
    case PARTITION_SK_GE:
        return av_cmp_scalar(sk, a1) >= 0 ? 0 : -1;
    case PARTITION_SK_BETWEEN:
        if (av_cmp_scalar(sk, a1) < 0)
            return -1;
        return av_cmp_scalar(sk, a2) <= 0 ? 0 : 1;
    case PARTITION_SK_BEGINS_WITH:
        if (has_prefix(sk, a1))
            return 0;
        return av_cmp_scalar(sk, a1) < 0 ? -1 : 1;
    }
    return 0;
}

static int buf_cmp(const buf *a, const buf *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->data, b->data, n);
    if (c != 0)
        return c;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

/* Raises `lo` to (pk, sk) (inclusive, or exclusive with `after`). */
static void raise_lo(const partition_read_req *req, const av *sk, bool after, buf *lo, buf *tmp)
{
    buf_reset(tmp);
    storage_key_build(req->table_id, req->hash_value, sk, tmp);
    if (after)
        key_prefix_successor(tmp); /* sort-key encodings are self-delimiting */
    if (buf_cmp(tmp, lo) > 0) {
        buf_reset(lo);
        buf_append(lo, tmp->data, tmp->len);
    }
}

/* Lowers `hi` (exclusive) to (pk, sk) (exclusive, or inclusive with `including`). */
static void lower_hi(const partition_read_req *req, const av *sk, bool including, buf *hi, buf *tmp)
{
    buf_reset(tmp);
    storage_key_build(req->table_id, req->hash_value, sk, tmp);
    if (including)
        key_prefix_successor(tmp);
    if (hi->len == 0 || buf_cmp(tmp, hi) < 0) {
        buf_reset(hi);
        buf_append(hi, tmp->data, tmp->len);
    }
}

/* Bounds of the keys a QUERY or SCAN may visit, as storage keys [lo, hi); hi empty
 * means no upper bound. Returns 1 if the range is empty. */
static int range_bounds(const partition_desc *p, const partition_read_req *req, buf *lo, buf *hi,
                        strata_err *err)
{
    buf_reset(lo);
    buf_reset(hi);
    if (req->kind == PARTITION_SCAN) {
        uint64_t h_lo = req->hash_lo > p->hash_lo ? req->hash_lo : p->hash_lo;
        uint64_t h_hi = req->hash_hi < p->hash_hi ? req->hash_hi : p->hash_hi;
        if (h_lo > h_hi)
            return 1;
        if (!storage_key_range_hash(req->table_id, h_lo, h_hi, lo, hi))
            buf_reset(hi);
    } else if (req->sk_op == PARTITION_SK_BEGINS_WITH) {
        storage_key_range_sk_prefix(req->table_id, req->hash_value, req->sk1, lo, hi);
    } else {
        storage_key_range_partition(req->table_id, req->hash_value, lo, hi);
        buf tmp;
        buf_init(&tmp, 0);
        switch (req->sk_op) {
        case PARTITION_SK_EQ:
            raise_lo(req, req->sk1, false, lo, &tmp);
            lower_hi(req, req->sk1, true, hi, &tmp);
            break;
        case PARTITION_SK_GE:
            raise_lo(req, req->sk1, false, lo, &tmp);
            break;
        case PARTITION_SK_GT:
            raise_lo(req, req->sk1, true, lo, &tmp);
            break;
        case PARTITION_SK_LE:
            lower_hi(req, req->sk1, true, hi, &tmp);
            break;
        case PARTITION_SK_LT:
            lower_hi(req, req->sk1, false, hi, &tmp);
            break;
        case PARTITION_SK_BETWEEN:
            raise_lo(req, req->sk1, false, lo, &tmp);
            lower_hi(req, req->sk2, true, hi, &tmp);
            break;
        default:
            break;
        }
        bool failed = tmp.failed;
        buf_free(&tmp);
        if (failed)
            return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    if (lo->failed || hi->failed)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    if (hi->len && buf_cmp(lo, hi) >= 0)
        return 1;
    return 0;
}

static int read_range(struct lsm *engine, const partition_desc *p, const partition_read_req *req,
                      arena *a, partition_read_res *res, strata_err *err)
{
    bool forward = req->kind == PARTITION_SCAN || req->forward;
    size_t max_bytes = req->max_bytes ? req->max_bytes : PARTITION_PAGE_BYTES;
    buf lo, hi, start;
    buf_init(&lo, 0);
    buf_init(&hi, 0);
    buf_init(&start, 0);
    lsm_iter *it = NULL;
    int rc = -1;

    int empty = range_bounds(p, req, &lo, &hi, err);
    if (empty < 0)
        goto out;
    if (empty) {
        rc = 0; /* e.g. the requested hash range does not meet this partition */
        goto out;
    }
    lsm_iter_options o = {.lower = lo.data,
                          .lower_len = lo.len,
                          .upper = hi.len ? hi.data : NULL,
                          .upper_len = hi.len};
    it = lsm_iter_new(engine, &o, err);
    if (it == NULL)
        goto out;

    bool skip_equal = false;
    if (req->exclusive_start_key) {
        const av *pk, *sk;
        if (key_values(&req->ks, req->exclusive_start_key, &pk, &sk, err) < 0 ||
            storage_key(req->table_id, pk, sk, &start, err) < 0)
            goto out;
        if (forward)
            lsm_iter_seek(it, start.data, start.len);
        else
            lsm_iter_seek_for_prev(it, start.data, start.len);
        skip_equal = true;
    } else if (forward) {
        lsm_iter_first(it);
    } else {
        lsm_iter_last(it);
    }

    uint32_t cap = 0;
    const av *last = NULL;
    bool stopped_early = false;
    for (; lsm_iter_valid(it); forward ? lsm_iter_next(it) : lsm_iter_prev(it)) {
        size_t klen, vlen;
        const void *kp = lsm_iter_key(it, &klen);
        if (skip_equal) {
            skip_equal = false;
            if (klen == start.len && memcmp(kp, start.data, klen) == 0)
                continue;
        }
        if (req->limit && res->scanned_count >= req->limit) {
            stopped_early = true;
            break;
        }
        if (res->bytes_read >= max_bytes) {
            stopped_early = true;
            break;
        }
        const void *vp = lsm_iter_value(it, &vlen);
        av *item = arena_zalloc(a, sizeof *item);
        if (item == NULL) {
            strata_err_set(err, ERR_NOMEM, "out of memory reading items");
            goto out;
        }
        if (item_decode_copy(vp, vlen, a, item, err) < 0)
            goto out;
        if (req->kind == PARTITION_QUERY && req->ks.range_type) {
            const av *sk = av_map_get(item, req->ks.range_name, req->ks.range_name_len);
            int pos = sk ? sk_position(req, sk) : 0;
            if (pos != 0) {
                /* Past the matching range in the direction of travel: done. */
                if ((forward && pos > 0) || (!forward && pos < 0))
                    break;
                continue;
            }
        }
        res->scanned_count++;
        res->bytes_read += item_size(item);
        last = item;
        if (emit(req, a, res, &cap, item, err) < 0)
            goto out;
    }
    if (lsm_iter_status(it, err) < 0)
        goto out;
    /* DynamoDB answers a LastEvaluatedKey whenever the page ended on its limit, even
     * if nothing follows: stopping at the limit without looking further. */
    if (last && (stopped_early || (req->limit && res->scanned_count >= req->limit) ||
                 res->bytes_read >= max_bytes)) {
        av *lek = arena_zalloc(a, sizeof *lek);
        if (lek == NULL) {
            strata_err_set(err, ERR_NOMEM, "out of memory");
            goto out;
        }
        if (key_of_item(a, &req->ks, last, lek, err) < 0)
            goto out;
        res->last_evaluated_key = lek;
    }
    rc = 0;
out:
    if (it)
        lsm_iter_free(it);
    buf_free(&lo);
    buf_free(&hi);
    buf_free(&start);
    return rc;
}

int partition_read(struct lsm *engine, const partition_desc *p, const partition_read_req *req,
                   arena *a, partition_read_res *res, strata_err *err)
{
    memset(res, 0, sizeof *res);
    switch (req->kind) {
    case PARTITION_GET:
        return read_get(engine, req, a, res, err);
    case PARTITION_QUERY:
    case PARTITION_SCAN:
        return read_range(engine, p, req, a, res, err);
    }
    return strata_err_set(err, ERR_INTERNAL, "partition_read: bad kind %d", (int)req->kind);
}
