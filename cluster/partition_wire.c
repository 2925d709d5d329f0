/*
 * Partition reads over the wire (see partition.h, "reads over the wire").
 *
 * Requests and results are PartitionReadRequest / PartitionReadResult messages
 * (proto/partition.proto); items and key maps in the item codec, single values wrapped
 * in a one-attribute map {"v": value} because the codec's unit is the map. Decoders
 * unpack into a scratch arena (bounded in proportion to the input) and copy only the
 * decoded values into the caller's arena, so a rejected message leaves nothing behind
 * there but what it decoded before the failure.
 *
 * One validation (check_req, check_res) serves both directions, with the error code as
 * a parameter: ERR_INTERNAL when encoding (a bug upstream), ERR_CORRUPT when decoding.
 */
#include <string.h>

#include "cluster/partition.h"
#include "partition.pb-c.h"
#include "storage/base/arena_pb.h"
#include "storage/data/codec.h"
#include "storage/data/key.h"

#define KEY_NAME_MAX 255u /* bytes of a key attribute name (DynamoDB's limit) */
/* A key map: two names and both key values at their limits. */
#define KEY_MAP_SIZE_MAX (2 * KEY_NAME_MAX + PARTITION_KEY_MAX + SORT_KEY_MAX)
/* Its encoding: the values' and names' bytes plus tags and varints. */
#define KEY_MAP_WIRE_MAX (KEY_MAP_SIZE_MAX + 64)

/* ------------------------------------------------------------------ helpers */

static bool sk_op_ok(partition_sk_op op)
{
    return (int)op >= (int)PARTITION_SK_ANY && (int)op <= (int)PARTITION_SK_BEGINS_WITH;
}

/* Encodes map `m` with the item codec into scratch memory of `tmp`. */
static int encode_map(arena *tmp, const av *m, ProtobufCBinaryData *out, strata_err *err)
{
    out->data = NULL;
    out->len = 0;
    buf b;
    buf_init(&b, 0);
    item_encode(m, &b);
    if (!b.failed)
        out->data = arena_memdup(tmp, b.data, b.len ? b.len : 1);
    out->len = b.len;
    buf_free(&b);
    if (out->data == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding a read");
    return 0;
}

/* Encodes one value as the map {"v": v}. */
static int encode_value(arena *tmp, const av *v, ProtobufCBinaryData *out, strata_err *err)
{
    av_attr attr = {.name = "v", .name_len = 1, .value = *v};
    av m = {.type = AV_M};
    m.u.map.attrs = &attr;
    m.u.map.count = 1;
    return encode_map(tmp, &m, out, err);
}

/* Decodes a codec map of at most `max` bytes into `a`; NULL for empty bytes. */
static int decode_map(const ProtobufCBinaryData *in, size_t max, arena *a, av **out,
                      strata_err *err)
{
    *out = NULL;
    if (in->len == 0)
        return 0;
    if (in->len > max)
        return strata_err_set(err, ERR_CORRUPT, "read message: a value of %zu bytes", in->len);
    av *m = arena_zalloc(a, sizeof *m);
    if (m == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory decoding a read");
    if (item_decode_copy(in->data, in->len, a, m, err) < 0)
        return -1;
    *out = m;
    return 0;
}

/* Decodes {"v": value}; *out NULL for empty bytes. */
static int decode_value(const ProtobufCBinaryData *in, arena *a, const av **out, strata_err *err)
{
    *out = NULL;
    av *m;
    if (decode_map(in, PARTITION_READ_REQ_WIRE_MAX, a, &m, err) < 0)
        return -1;
    if (m == NULL)
        return 0;
    if (m->u.map.count != 1 || m->u.map.attrs[0].name_len != 1 || m->u.map.attrs[0].name[0] != 'v')
        return strata_err_set(err, ERR_CORRUPT, "read request: a malformed value");
    *out = &m->u.map.attrs[0].value;
    return 0;
}

/* ------------------------------------------------------------------ request checks */

static int check_schema(const partition_key_schema *ks, strata_code code, strata_err *err)
{
    if (!key_type_ok(ks->hash_type) || ks->hash_name == NULL || ks->hash_name_len == 0 ||
        ks->hash_name_len > KEY_NAME_MAX)
        return strata_err_set(err, code, "read request: bad partition key schema");
    if (ks->range_type == 0)
        return 0;
    if (!key_type_ok(ks->range_type) || ks->range_name == NULL || ks->range_name_len == 0 ||
        ks->range_name_len > KEY_NAME_MAX ||
        (ks->range_name_len == ks->hash_name_len &&
         memcmp(ks->range_name, ks->hash_name, ks->hash_name_len) == 0))
        return strata_err_set(err, code, "read request: bad sort key schema");
    return 0;
}

/* A scalar of type `t` whose size is at most `max`. */
static int check_scalar(const av *v, av_type t, size_t max, const char *what, strata_code code,
                        strata_err *err)
{
    if (v == NULL || v->type != t || av_size(v) > max)
        return strata_err_set(err, code, "read request: bad %s", what);
    return 0;
}

/* A map holding exactly the key attributes of `ks`, within the key size limits. */
static int check_key_map(const partition_key_schema *ks, const av *m, const char *what,
                         strata_code code, strata_err *err)
{
    uint32_t want = ks->range_type ? 2 : 1;
    if (m->type != AV_M || m->u.map.count != want)
        return strata_err_set(err, code, "read request: bad %s", what);
    const av *pk = av_map_get(m, ks->hash_name, ks->hash_name_len);
    if (check_scalar(pk, ks->hash_type, PARTITION_KEY_MAX, what, code, err) < 0)
        return -1;
    if (ks->range_type) {
        const av *sk = av_map_get(m, ks->range_name, ks->range_name_len);
        if (check_scalar(sk, ks->range_type, SORT_KEY_MAX, what, code, err) < 0)
            return -1;
    }
    return 0;
}

/* Only the values a kind uses may be present (the encoder sends no others). */
static bool values_fit_kind(const partition_read_req *r)
{
    bool get = r->kind == PARTITION_GET, query = r->kind == PARTITION_QUERY;
    if (!get && r->key)
        return false;
    if (get && r->exclusive_start_key)
        return false;
    if (!query && (r->hash_value || r->sk1 || r->sk2 || r->sk_op != PARTITION_SK_ANY))
        return false;
    if (query && (r->sk_op == PARTITION_SK_ANY) != (r->sk1 == NULL))
        return false;
    if (query && (r->sk_op == PARTITION_SK_BETWEEN) != (r->sk2 != NULL))
        return false;
    return true;
}

static int check_query(const partition_read_req *r, strata_code code, strata_err *err)
{
    const partition_key_schema *ks = &r->ks;
    if (check_scalar(r->hash_value, ks->hash_type, ITEM_MAX_SIZE, "partition key value", code,
                     err) < 0)
        return -1;
    if (!sk_op_ok(r->sk_op))
        return strata_err_set(err, code, "read request: bad sort key operator %d", (int)r->sk_op);
    if (r->sk_op == PARTITION_SK_ANY)
        return 0;
    /* partition_read compares operands with av_cmp_scalar and begins_with reads bytes:
     * both need the schema's type, and begins_with an S or B key. */
    if (ks->range_type == 0 || (r->sk_op == PARTITION_SK_BEGINS_WITH && ks->range_type == AV_N))
        return strata_err_set(err, code, "read request: sort key operator without a sort key");
    if (check_scalar(r->sk1, ks->range_type, ITEM_MAX_SIZE, "sort key operand", code, err) < 0)
        return -1;
    if (r->sk_op == PARTITION_SK_BETWEEN &&
        check_scalar(r->sk2, ks->range_type, ITEM_MAX_SIZE, "sort key operand", code, err) < 0)
        return -1;
    return 0;
}

/* Everything partition_read relies on, for the raw request (callbacks aside). */
static int check_req(const partition_read_req *r, strata_code code, strata_err *err)
{
    if (r->kind != PARTITION_GET && r->kind != PARTITION_QUERY && r->kind != PARTITION_SCAN)
        return strata_err_set(err, code, "read request: bad kind %d", (int)r->kind);
    if (check_schema(&r->ks, code, err) < 0)
        return -1;
    if (r->max_bytes > PARTITION_PAGE_BYTES)
        return strata_err_set(err, code, "read request: page of %zu bytes", r->max_bytes);
    if (!values_fit_kind(r))
        return strata_err_set(err, code, "read request: values that do not fit its kind");
    if (r->kind == PARTITION_GET)
        return r->key ? check_key_map(&r->ks, r->key, "key", code, err)
                      : strata_err_set(err, code, "read request: GET without a key");
    if (r->kind == PARTITION_QUERY && check_query(r, code, err) < 0)
        return -1;
    if (r->exclusive_start_key &&
        check_key_map(&r->ks, r->exclusive_start_key, "start key", code, err) < 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------ requests */

static int req_values_to_pb(arena *tmp, const partition_read_req *req,
                            Strata__PartitionReadRequest *m, strata_err *err)
{
    if (req->key && encode_map(tmp, req->key, &m->key, err) < 0)
        return -1;
    if (req->hash_value && encode_value(tmp, req->hash_value, &m->hash_value, err) < 0)
        return -1;
    if (req->sk1 && encode_value(tmp, req->sk1, &m->sk1, err) < 0)
        return -1;
    if (req->sk2 && encode_value(tmp, req->sk2, &m->sk2, err) < 0)
        return -1;
    if (req->exclusive_start_key &&
        encode_map(tmp, req->exclusive_start_key, &m->exclusive_start_key, err) < 0)
        return -1;
    return 0;
}

/* Appends packed message `m`, refusing more than `max` bytes (the decoder's bound). */
static int pack(const ProtobufCMessage *m, size_t max, const char *what, buf *out, strata_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > max)
        return strata_err_set(err, ERR_INTERNAL, "%s of %zu bytes is too large", what, n);
    if (n == 0)
        return 0; /* all defaults (an empty result): empty bytes decode to it */
    if (!buf_reserve(out, n))
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding %s", what);
    protobuf_c_message_pack(m, out->data + out->len);
    out->len += n;
    return 0;
}

int partition_read_req_encode(const partition_read_req *req, buf *out, strata_err *err)
{
    /* The raw request: the remote node never sees the callbacks. */
    partition_read_req raw = *req;
    raw.filter = NULL;
    raw.filter_ctx = NULL;
    raw.project = NULL;
    raw.project_ctx = NULL;
    raw.count_only = false;
    /* Send only the values the kind uses (the decoder refuses others). */
    if (raw.kind != PARTITION_GET)
        raw.key = NULL;
    if (raw.kind == PARTITION_GET)
        raw.exclusive_start_key = NULL;
    if (raw.kind != PARTITION_QUERY) {
        raw.hash_value = raw.sk1 = raw.sk2 = NULL;
        raw.sk_op = PARTITION_SK_ANY;
    } else {
        if (raw.sk_op == PARTITION_SK_ANY)
            raw.sk1 = NULL;
        if (raw.sk_op != PARTITION_SK_BETWEEN)
            raw.sk2 = NULL;
    }
    if (check_req(&raw, ERR_INTERNAL, err) < 0)
        return -1;

    arena tmp;
    arena_init(&tmp, 0);
    Strata__PartitionReadRequest m = STRATA__PARTITION_READ_REQUEST__INIT;
    Strata__PartitionKeySchema ks = STRATA__PARTITION_KEY_SCHEMA__INIT;
    int rc = -1;
    ks.hash_name = arena_strndup(&tmp, raw.ks.hash_name, raw.ks.hash_name_len);
    ks.hash_type = (uint32_t)raw.ks.hash_type;
    ks.range_name =
        raw.ks.range_type ? arena_strndup(&tmp, raw.ks.range_name, raw.ks.range_name_len) : "";
    ks.range_type = (uint32_t)raw.ks.range_type;
    if (ks.hash_name == NULL || ks.range_name == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory encoding a read");
        goto out;
    }
    m.kind = (Strata__PartitionReadRequest__Kind)raw.kind;
    m.table_id = raw.table_id;
    m.key_schema = &ks;
    m.sk_op = (uint32_t)raw.sk_op;
    m.forward = raw.forward;
    m.hash_lo = raw.hash_lo;
    m.hash_hi = raw.hash_hi;
    m.limit = raw.limit;
    m.max_bytes = raw.max_bytes;
    m.consistent = raw.consistent;
    if (req_values_to_pb(&tmp, &raw, &m, err) < 0)
        goto out;
    rc = pack(&m.base, PARTITION_READ_REQ_WIRE_MAX, "a read request", out, err);
out:
    arena_free(&tmp);
    return rc;
}

/* A key schema name: 1..255 bytes without NUL (protobuf strings may hold one). */
static int schema_name(const char *s, arena *a, const char **out, uint32_t *len, strata_err *err)
{
    size_t n = strnlen(s, KEY_NAME_MAX + 1);
    if (n == 0 || n > KEY_NAME_MAX)
        return strata_err_set(err, ERR_CORRUPT, "read request: bad key attribute name");
    *out = arena_strndup(a, s, n);
    *len = (uint32_t)n;
    if (*out == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory decoding a read");
    return 0;
}

static int schema_from_pb(const Strata__PartitionKeySchema *pb, arena *a, partition_key_schema *ks,
                          strata_err *err)
{
    memset(ks, 0, sizeof *ks);
    if (pb == NULL)
        return strata_err_set(err, ERR_CORRUPT, "read request without a key schema");
    if (pb->hash_type > (uint32_t)AV_B || pb->range_type > (uint32_t)AV_B ||
        pb->hash_name == NULL || pb->range_name == NULL)
        return strata_err_set(err, ERR_CORRUPT, "read request: bad key type");
    ks->hash_type = (av_type)pb->hash_type;
    ks->range_type = (av_type)pb->range_type;
    if (schema_name(pb->hash_name, a, &ks->hash_name, &ks->hash_name_len, err) < 0)
        return -1;
    if (ks->range_type == 0) {
        if (pb->range_name[0] != '\0')
            return strata_err_set(err, ERR_CORRUPT, "read request: sort key name without a type");
        return 0;
    }
    return schema_name(pb->range_name, a, &ks->range_name, &ks->range_name_len, err);
}

static int req_from_pb(const Strata__PartitionReadRequest *m, arena *a, partition_read_req *out,
                       strata_err *err)
{
    if ((int)m->kind < (int)PARTITION_GET || (int)m->kind > (int)PARTITION_SCAN)
        return strata_err_set(err, ERR_CORRUPT, "read request: bad kind %d", (int)m->kind);
    if (m->sk_op > (uint32_t)PARTITION_SK_BEGINS_WITH)
        return strata_err_set(err, ERR_CORRUPT, "read request: bad sort key operator");
    if (m->max_bytes > PARTITION_PAGE_BYTES)
        return strata_err_set(err, ERR_CORRUPT, "read request: page over 1 MB");
    out->kind = (partition_read_kind)m->kind;
    out->table_id = m->table_id;
    out->sk_op = (partition_sk_op)m->sk_op;
    out->forward = m->forward;
    out->hash_lo = m->hash_lo;
    out->hash_hi = m->hash_hi;
    out->limit = m->limit;
    out->max_bytes = (size_t)m->max_bytes;
    out->consistent = m->consistent;
    if (schema_from_pb(m->key_schema, a, &out->ks, err) < 0)
        return -1;
    av *key, *esk;
    if (decode_map(&m->key, KEY_MAP_WIRE_MAX, a, &key, err) < 0 ||
        decode_map(&m->exclusive_start_key, KEY_MAP_WIRE_MAX, a, &esk, err) < 0 ||
        decode_value(&m->hash_value, a, &out->hash_value, err) < 0 ||
        decode_value(&m->sk1, a, &out->sk1, err) < 0 ||
        decode_value(&m->sk2, a, &out->sk2, err) < 0)
        return -1;
    out->key = key;
    out->exclusive_start_key = esk;
    return check_req(out, ERR_CORRUPT, err);
}

int partition_read_req_decode(const uint8_t *b, size_t len, arena *a, partition_read_req *out,
                              strata_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > PARTITION_READ_REQ_WIRE_MAX)
        return strata_err_set(err, ERR_CORRUPT, "read request of %zu bytes", len);
    /* protobuf-c needs at most a few times the input (structs, copies of bytes). */
    arena tmp;
    arena_init(&tmp, 8 * len + 64 * 1024);
    ProtobufCAllocator alloc = arena_pb_allocator(&tmp);
    Strata__PartitionReadRequest *m = strata__partition_read_request__unpack(&alloc, len, b);
    int rc;
    if (m == NULL)
        rc = strata_err_set(err, ERR_CORRUPT, "read request does not decode");
    else
        rc = req_from_pb(m, a, out, err);
    arena_free(&tmp);
    if (rc < 0)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ------------------------------------------------------------------ results */

/* The bounds of partition.h on a result holding `n` items; `code` on a violation. */
static int check_res(const partition_read_res *r, uint32_t n, strata_code code, strata_err *err)
{
    if (n != 0 && n != r->count)
        return strata_err_set(err, code, "read result: %u items for a count of %u", n, r->count);
    /* Every item read is stored with a key, so it weighs at least one byte. */
    if (r->count > r->scanned_count || r->scanned_count > r->bytes_read ||
        r->bytes_read > PARTITION_READ_PAGE_MAX)
        return strata_err_set(err, code, "read result: inconsistent counts");
    if (r->found && (r->count != 1 || r->scanned_count != 1 || n != 1 || r->last_evaluated_key))
        return strata_err_set(err, code, "read result: inconsistent GET");
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (r->items[i].type != AV_M)
            return strata_err_set(err, code, "read result: an item is not a map");
        size_t s = item_size(&r->items[i]);
        if (s > ITEM_MAX_SIZE)
            return strata_err_set(err, code, "read result: an item of %zu bytes", s);
        sum += s;
    }
    /* Projections only ever keep parts of items, so never weigh more than the read. */
    if (sum > r->bytes_read)
        return strata_err_set(err, code, "read result: items weigh more than was read");
    const av *k = r->last_evaluated_key;
    if (k && (k->type != AV_M || k->u.map.count == 0 || k->u.map.count > 2 ||
              item_size(k) > KEY_MAP_SIZE_MAX))
        return strata_err_set(err, code, "read result: bad last evaluated key");
    return 0;
}

static int items_to_pb(arena *tmp, const partition_read_res *res, uint32_t n,
                       Strata__PartitionReadResult *m, strata_err *err)
{
    if (n == 0)
        return 0;
    m->items = arena_zalloc(tmp, n * sizeof *m->items);
    if (m->items == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory encoding a read result");
    for (uint32_t i = 0; i < n; i++)
        if (encode_map(tmp, &res->items[i], &m->items[i], err) < 0)
            return -1;
    m->n_items = n;
    return 0;
}

int partition_read_res_encode(const partition_read_res *res, buf *out, strata_err *err)
{
    uint32_t n = res->items ? res->count : 0;
    if (check_res(res, n, ERR_INTERNAL, err) < 0)
        return -1;
    arena tmp;
    arena_init(&tmp, 0);
    Strata__PartitionReadResult m = STRATA__PARTITION_READ_RESULT__INIT;
    int rc = -1;
    m.count = res->count;
    m.scanned_count = res->scanned_count;
    m.bytes_read = res->bytes_read;
    m.found = res->found;
    if (items_to_pb(&tmp, res, n, &m, err) < 0)
        goto out;
    if (res->last_evaluated_key &&
        encode_map(&tmp, res->last_evaluated_key, &m.last_evaluated_key, err) < 0)
        goto out;
    rc = pack(&m.base, PARTITION_READ_RES_WIRE_MAX, "a read result", out, err);
out:
    arena_free(&tmp);
    return rc;
}

static int res_from_pb(const Strata__PartitionReadResult *m, arena *a, partition_read_res *out,
                       strata_err *err)
{
    /* Check the counts before allocating anything in proportion to them. */
    if (m->n_items != 0 && m->n_items != m->count)
        return strata_err_set(err, ERR_CORRUPT, "read result: item count mismatch");
    if (m->count > m->scanned_count || m->scanned_count > m->bytes_read ||
        m->bytes_read > PARTITION_READ_PAGE_MAX)
        return strata_err_set(err, ERR_CORRUPT, "read result: inconsistent counts");
    out->count = m->count;
    out->scanned_count = m->scanned_count;
    out->bytes_read = m->bytes_read;
    out->found = m->found;
    uint32_t n = (uint32_t)m->n_items;
    if (n) {
        out->items = arena_zalloc(a, n * sizeof *out->items);
        if (out->items == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory decoding a read result");
    }
    for (uint32_t i = 0; i < n; i++) {
        if (m->items[i].len == 0)
            return strata_err_set(err, ERR_CORRUPT, "read result: an empty item");
        if (item_decode_copy(m->items[i].data, m->items[i].len, a, &out->items[i], err) < 0)
            return -1;
    }
    av *lek;
    if (decode_map(&m->last_evaluated_key, KEY_MAP_WIRE_MAX, a, &lek, err) < 0)
        return -1;
    out->last_evaluated_key = lek;
    return check_res(out, n, ERR_CORRUPT, err);
}

int partition_read_res_decode(const uint8_t *b, size_t len, arena *a, partition_read_res *out,
                              strata_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > PARTITION_READ_RES_WIRE_MAX)
        return strata_err_set(err, ERR_CORRUPT, "read result of %zu bytes", len);
    /* protobuf-c keeps one 16-byte descriptor per item (>= 2 bytes on the wire each)
     * plus a copy of the bytes: at most 9 x the input. */
    arena tmp;
    arena_init(&tmp, 10 * len + 64 * 1024);
    ProtobufCAllocator alloc = arena_pb_allocator(&tmp);
    Strata__PartitionReadResult *m = strata__partition_read_result__unpack(&alloc, len, b);
    int rc;
    if (m == NULL)
        rc = strata_err_set(err, ERR_CORRUPT, "read result does not decode");
    else
        rc = res_from_pb(m, a, out, err);
    arena_free(&tmp);
    if (rc < 0)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ------------------------------------------------------------------ finishing */

/* `lek` is the key (under `ks`) of `item`. */
static bool is_key_of(const partition_key_schema *ks, const av *lek, const av *item)
{
    uint32_t want = ks->range_type ? 2 : 1;
    if (lek->type != AV_M || lek->u.map.count != want)
        return false;
    const av *names[2][2] = {{av_map_get(lek, ks->hash_name, ks->hash_name_len),
                              av_map_get(item, ks->hash_name, ks->hash_name_len)},
                             {NULL, NULL}};
    if (ks->range_type) {
        names[1][0] = av_map_get(lek, ks->range_name, ks->range_name_len);
        names[1][1] = av_map_get(item, ks->range_name, ks->range_name_len);
    }
    for (uint32_t i = 0; i < want; i++)
        if (names[i][0] == NULL || names[i][1] == NULL || !av_equal(names[i][0], names[i][1]))
            return false;
    return true;
}

/* `res` is what a raw read of `req` returns (see partition_read). */
static int check_raw(const partition_read_req *req, const partition_read_res *res, strata_err *err)
{
    uint32_t n = res->items ? res->count : 0;
    if (check_res(res, n, ERR_CORRUPT, err) < 0)
        return -1;
    if (req->kind == PARTITION_GET) {
        bool ok = res->found ? res->last_evaluated_key == NULL &&
                                   res->bytes_read == item_size(&res->items[0])
                             : res->scanned_count == 0 && res->bytes_read == 0;
        return ok ? 0 : strata_err_set(err, ERR_CORRUPT, "not a raw GET result");
    }
    if (res->found || n != res->scanned_count)
        return strata_err_set(err, ERR_CORRUPT, "not a raw result: items missing");
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += item_size(&res->items[i]);
    if (sum != res->bytes_read)
        return strata_err_set(err, ERR_CORRUPT, "not a raw result: projected items");
    if (res->last_evaluated_key &&
        (n == 0 || !is_key_of(&req->ks, res->last_evaluated_key, &res->items[n - 1])))
        return strata_err_set(err, ERR_CORRUPT, "not a raw result: bad last evaluated key");
    return 0;
}

/* One item as partition_read's emit leaves it: projected or whole. */
static int shape(const partition_read_req *req, arena *a, const av *item, av *slot, strata_err *err)
{
    if (req->project)
        return req->project(req->project_ctx, a, item, slot, err);
    *slot = *item;
    return 0;
}

static int finish_range(const partition_read_req *req, arena *a, partition_read_res *res,
                        strata_err *err)
{
    uint32_t n = res->count;
    const av *raw = res->items;
    av *kept = NULL;
    if (n && !req->count_only) {
        kept = arena_zalloc(a, n * sizeof *kept);
        if (kept == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory finishing a read");
    }
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (req->filter) {
            int keep = req->filter(req->filter_ctx, &raw[i], err);
            if (keep < 0)
                return -1;
            if (!keep)
                continue;
        }
        if (kept && shape(req, a, &raw[i], &kept[count], err) < 0)
            return -1;
        count++;
    }
    res->count = count;
    /* As partition_read: no item array when no item is returned. */
    res->items = count ? kept : NULL;
    return 0;
}

int partition_read_finish(const partition_read_req *req, arena *a, partition_read_res *res,
                          strata_err *err)
{
    if (req->kind != PARTITION_GET && req->kind != PARTITION_QUERY && req->kind != PARTITION_SCAN)
        return strata_err_set(err, ERR_INTERNAL, "partition_read_finish: bad kind %d",
                              (int)req->kind);
    if (check_raw(req, res, err) < 0)
        return -1;
    if (req->kind != PARTITION_GET)
        return finish_range(req, a, res, err);
    if (!res->found || req->project == NULL)
        return 0;
    av *slot = arena_zalloc(a, sizeof *slot);
    if (slot == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory finishing a read");
    if (req->project(req->project_ctx, a, &res->items[0], slot, err) < 0)
        return -1;
    res->items = slot;
    return 0;
}
