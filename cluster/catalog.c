/*
 * catalog.c: the tables of the node as a deterministic state machine of records.
 *
 * A record is: u8 version | u8 kind | u64 xxh3(payload) BE | payload. The payload of a
 * TABLE record is the table's whole state as JSON (small, rare, easy to inspect); a DROP
 * record's payload is the table name. Tables are kept in an array sorted by name.
 */
#include "cluster/catalog.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "storage/data/key.h"

#define RECORD_VERSION 1
#define RECORD_HEADER  10

enum { REC_TABLE = 1, REC_DROP = 2 };

struct catalog {
    table_info **tables; /* sorted by name */
    table_info **by_id;  /* the same tables sorted by table id */
    size_t n, cap;
    uint32_t next_table_id;
    uint64_t next_partition_id;
};

catalog *catalog_new(void)
{
    catalog *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->next_table_id = 1;
    c->next_partition_id = 1;
    return c;
}

void catalog_table_free(table_info *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n_tags; i++) {
        free(t->tags[i].key);
        free(t->tags[i].value);
    }
    free(t->tags);
    free(t->partitions);
    t->tags = NULL;
    t->n_tags = 0;
    t->partitions = NULL;
    t->n_partitions = 0;
}

void catalog_free(catalog *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++) {
        catalog_table_free(c->tables[i]);
        free(c->tables[i]);
    }
    free(c->tables);
    free(c->by_id);
    free(c);
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int r = memcmp(a, b, n);
    if (r != 0)
        return r;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* Index of the first table whose name is >= name. */
static size_t lower_bound(const catalog *c, const char *name, size_t len)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const table_schema *s = &c->tables[mid]->schema;
        if (name_cmp(s->name, s->name_len, name, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const table_info *catalog_find(const catalog *c, const char *name, size_t name_len)
{
    size_t i = lower_bound(c, name, name_len);
    if (i < c->n) {
        const table_schema *s = &c->tables[i]->schema;
        if (name_cmp(s->name, s->name_len, name, name_len) == 0)
            return c->tables[i];
    }
    return NULL;
}

/* Index in by_id of the first table whose id is >= table_id. */
static size_t id_lower_bound(const catalog *c, uint32_t table_id)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->by_id[mid]->schema.table_id < table_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const table_info *catalog_find_id(const catalog *c, uint32_t table_id)
{
    size_t i = id_lower_bound(c, table_id);
    return i < c->n && c->by_id[i]->schema.table_id == table_id ? c->by_id[i] : NULL;
}

int catalog_set_partitions(catalog *c, uint32_t table_id, const partition_desc *parts, size_t n,
                           strata_err *err)
{
    size_t i = id_lower_bound(c, table_id);
    if (i >= c->n || c->by_id[i]->schema.table_id != table_id)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "no table %u", table_id);
    partition_desc *np = malloc((n ? n : 1) * sizeof *np);
    if (np == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    memcpy(np, parts, n * sizeof *np);
    table_info *t = c->by_id[i];
    free(t->partitions);
    t->partitions = np;
    t->n_partitions = n;
    for (size_t k = 0; k < n; k++)
        if (parts[k].id >= c->next_partition_id)
            c->next_partition_id = parts[k].id + 1;
    return 0;
}

/* by_id holds c->n entries before the call (insert: the new table is not counted yet). */
static void by_id_insert(catalog *c, table_info *t)
{
    size_t i = id_lower_bound(c, t->schema.table_id);
    memmove(&c->by_id[i + 1], &c->by_id[i], (c->n - i) * sizeof *c->by_id);
    c->by_id[i] = t;
}

static void by_id_remove(catalog *c, const table_info *t)
{
    for (size_t i = id_lower_bound(c, t->schema.table_id); i < c->n; i++) {
        if (c->by_id[i] == t) {
            memmove(&c->by_id[i], &c->by_id[i + 1], (c->n - i - 1) * sizeof *c->by_id);
            return;
        }
    }
}

const partition_desc *catalog_find_partition(const catalog *c, uint64_t partition_id,
                                             const table_info **table)
{
    for (size_t i = 0; i < c->n; i++) {
        const table_info *t = c->by_id[i];
        for (size_t j = 0; j < t->n_partitions; j++) {
            if (t->partitions[j].id == partition_id) {
                if (table != NULL)
                    *table = t;
                return &t->partitions[j];
            }
        }
    }
    return NULL;
}

const table_info *catalog_next(const catalog *c, const char *after, size_t after_len)
{
    size_t i = 0;
    if (after != NULL) {
        i = lower_bound(c, after, after_len);
        if (i < c->n) {
            const table_schema *s = &c->tables[i]->schema;
            if (name_cmp(s->name, s->name_len, after, after_len) == 0)
                i++;
        }
    }
    return i < c->n ? c->tables[i] : NULL;
}

size_t catalog_count(const catalog *c)
{
    return c->n;
}

uint32_t catalog_next_table_id(const catalog *c)
{
    return c->next_table_id;
}

uint64_t catalog_next_partition_id(const catalog *c)
{
    return c->next_partition_id;
}

int catalog_split_even(table_info *t, size_t n, uint64_t first_id, strata_err *err)
{
    if (n == 0 || n > CATALOG_MAX_PARTITIONS)
        return strata_err_set(err, ERR_VALIDATION, "partition count %zu out of 1..%d", n,
                              CATALOG_MAX_PARTITIONS);
    partition_desc *p = calloc(n, sizeof *p);
    if (p == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    /* Equal ranges of the 2^64 hash space: partition i starts at i * (2^64 / n). */
    unsigned __int128 space = (unsigned __int128)1 << 64;
    for (size_t i = 0; i < n; i++) {
        p[i].id = first_id + i;
        p[i].table_id = t->schema.table_id;
        p[i].hash_lo = (uint64_t)(space * i / n);
        p[i].hash_hi = i + 1 == n ? UINT64_MAX : (uint64_t)(space * (i + 1) / n - 1);
    }
    free(t->partitions);
    t->partitions = p;
    t->n_partitions = n;
    return 0;
}

const partition_desc *catalog_partition_for_hash(const table_info *t, uint64_t hash)
{
    size_t lo = 0, hi = t->n_partitions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->partitions[mid].hash_hi < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n_partitions ? &t->partitions[lo] : NULL;
}

int catalog_table_copy(const table_info *src, table_info *dst, strata_err *err)
{
    *dst = *src;
    dst->tags = NULL;
    dst->n_tags = 0;
    dst->partitions = NULL;
    dst->n_partitions = 0;
    if (src->n_partitions > 0) {
        dst->partitions = malloc(src->n_partitions * sizeof *dst->partitions);
        if (dst->partitions == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory");
        memcpy(dst->partitions, src->partitions, src->n_partitions * sizeof *dst->partitions);
        dst->n_partitions = src->n_partitions;
    }
    for (size_t i = 0; i < src->n_tags; i++) {
        if (catalog_table_set_tag(dst, src->tags[i].key, src->tags[i].value, err) < 0) {
            catalog_table_free(dst);
            return -1;
        }
    }
    return 0;
}

int catalog_table_set_tag(table_info *t, const char *key, const char *value, strata_err *err)
{
    size_t i = 0;
    while (i < t->n_tags && strcmp(t->tags[i].key, key) < 0)
        i++;
    char *v = strdup(value);
    if (v == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    if (i < t->n_tags && strcmp(t->tags[i].key, key) == 0) {
        free(t->tags[i].value);
        t->tags[i].value = v;
        return 0;
    }
    char *k = strdup(key);
    table_tag *tags = realloc(t->tags, (t->n_tags + 1) * sizeof *tags);
    if (k == NULL || tags == NULL) {
        free(k);
        free(v);
        if (tags != NULL)
            t->tags = tags;
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    t->tags = tags;
    memmove(&tags[i + 1], &tags[i], (t->n_tags - i) * sizeof *tags);
    tags[i].key = k;
    tags[i].value = v;
    t->n_tags++;
    return 0;
}

void catalog_table_remove_tag(table_info *t, const char *key)
{
    for (size_t i = 0; i < t->n_tags; i++) {
        if (strcmp(t->tags[i].key, key) == 0) {
            free(t->tags[i].key);
            free(t->tags[i].value);
            memmove(&t->tags[i], &t->tags[i + 1], (t->n_tags - i - 1) * sizeof *t->tags);
            t->n_tags--;
            return;
        }
    }
}

void catalog_key_schema(const table_schema *s, partition_key_schema *out)
{
    memset(out, 0, sizeof *out);
    out->hash_name = s->hash.name;
    out->hash_name_len = (uint32_t)s->hash.name_len;
    out->hash_type = s->hash.type;
    if (s->has_range) {
        out->range_name = s->range.name;
        out->range_name_len = (uint32_t)s->range.name_len;
        out->range_type = s->range.type;
    }
}

int catalog_key_schema_copy(const table_schema *s, arena *a, partition_key_schema *out)
{
    catalog_key_schema(s, out);
    char *h = arena_alloc(a, out->hash_name_len + 1);
    char *r = out->range_name ? arena_alloc(a, out->range_name_len + 1) : NULL;
    if (h == NULL || (out->range_name && r == NULL))
        return -1;
    memcpy(h, out->hash_name, out->hash_name_len);
    h[out->hash_name_len] = '\0';
    out->hash_name = h;
    if (r != NULL) {
        memcpy(r, out->range_name, out->range_name_len);
        r[out->range_name_len] = '\0';
        out->range_name = r;
    }
    return 0;
}

const char *table_status_name(table_status s)
{
    switch (s) {
    case TABLE_CREATING:
        return "CREATING";
    case TABLE_ACTIVE:
        return "ACTIVE";
    case TABLE_UPDATING:
        return "UPDATING";
    case TABLE_DELETING:
        return "DELETING";
    }
    return "ACTIVE";
}

const char *billing_mode_name(billing_mode m)
{
    return m == BILLING_PAY_PER_REQUEST ? "PAY_PER_REQUEST" : "PROVISIONED";
}

bool catalog_valid_table_name(const char *name, size_t len)
{
    if (len < TABLE_NAME_MIN || len > TABLE_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* ---- Records ---- */

static void put_header(buf *out, int kind, const void *payload, size_t len)
{
    buf_put_u8(out, RECORD_VERSION);
    buf_put_u8(out, (uint8_t)kind);
    buf_put_u64be(out, XXH3_64bits(payload, len));
    buf_append(out, payload, len);
}

static json_t *key_attr_json(const key_attr *k)
{
    return json_pack("{s:s%, s:i}", "name", k->name, k->name_len, "type", (int)k->type);
}

int catalog_encode_table(const table_info *t, buf *out, strata_err *err)
{
    const table_schema *s = &t->schema;
    json_t *o = json_object();
    json_t *defs = json_array();
    json_t *tags = json_array();
    json_t *parts = json_array();
    if (o == NULL || defs == NULL || tags == NULL || parts == NULL)
        goto nomem;
    for (size_t i = 0; i < t->n_attr_defs; i++)
        json_array_append_new(defs, key_attr_json(&t->attr_defs[i]));
    for (size_t i = 0; i < t->n_tags; i++)
        json_array_append_new(tags, json_pack("[s,s]", t->tags[i].key, t->tags[i].value));
    for (size_t i = 0; i < t->n_partitions; i++) {
        const partition_desc *p = &t->partitions[i];
        /* u64 as strings: JSON integers are signed in jansson. */
        char id[24], lo[24], hi[24];
        snprintf(id, sizeof id, "%llu", (unsigned long long)p->id);
        snprintf(lo, sizeof lo, "%llu", (unsigned long long)p->hash_lo);
        snprintf(hi, sizeof hi, "%llu", (unsigned long long)p->hash_hi);
        json_array_append_new(parts, json_pack("[s,s,s]", id, lo, hi));
    }
    json_object_set_new(o, "id", json_integer(s->table_id));
    json_object_set_new(o, "name", json_stringn(s->name, s->name_len));
    json_object_set_new(o, "hash", key_attr_json(&s->hash));
    if (s->has_range)
        json_object_set_new(o, "range", key_attr_json(&s->range));
    json_object_set_new(o, "status", json_integer(t->status));
    json_object_set_new(o, "uuid", json_string(t->uuid));
    json_object_set_new(o, "created", json_real(t->creation_time));
    json_object_set_new(o, "billing", json_integer(t->billing));
    json_object_set_new(o, "billing_update", json_real(t->billing_last_update));
    json_object_set_new(o, "rcu", json_integer(t->read_capacity));
    json_object_set_new(o, "wcu", json_integer(t->write_capacity));
    json_object_set_new(o, "last_inc", json_real(t->last_increase_time));
    json_object_set_new(o, "last_dec", json_real(t->last_decrease_time));
    json_object_set_new(o, "dec_today", json_integer(t->decreases_today));
    json_object_set_new(o, "deletion_protection", json_boolean(t->deletion_protection));
    json_object_set_new(o, "defs", defs);
    json_object_set_new(o, "tags", tags);
    json_object_set_new(o, "parts", parts);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (text == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    /* Payload: u16 name length | name | JSON, so the name can be read without parsing. */
    size_t tlen = strlen(text);
    size_t plen = 2 + s->name_len + tlen;
    uint8_t *payload = malloc(plen);
    if (payload == NULL) {
        free(text);
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    payload[0] = (uint8_t)(s->name_len >> 8);
    payload[1] = (uint8_t)s->name_len;
    memcpy(payload + 2, s->name, s->name_len);
    memcpy(payload + 2 + s->name_len, text, tlen);
    put_header(out, REC_TABLE, payload, plen);
    free(payload);
    free(text);
    if (out->failed)
        return strata_err_set(err, ERR_NOMEM, "catalog record does not fit");
    return 0;
nomem:
    json_decref(o);
    json_decref(defs);
    json_decref(tags);
    json_decref(parts);
    return strata_err_set(err, ERR_NOMEM, "out of memory");
}

int catalog_encode_drop(const char *name, size_t name_len, buf *out, strata_err *err)
{
    put_header(out, REC_DROP, name, name_len);
    if (out->failed)
        return strata_err_set(err, ERR_NOMEM, "catalog record does not fit");
    return 0;
}

static int parse_key_attr(const json_t *j, key_attr *k)
{
    const char *name;
    size_t len;
    int type;
    if (json_unpack((json_t *)j, "{s:s%, s:i}", "name", &name, &len, "type", &type) < 0)
        return -1;
    if (len == 0 || len > ATTR_NAME_MAX || !key_type_ok(type))
        return -1;
    memcpy(k->name, name, len);
    k->name[len] = '\0';
    k->name_len = len;
    k->type = (av_type)type;
    return 0;
}

static int parse_u64(const json_t *j, uint64_t *out)
{
    const char *s = json_string_value(j);
    if (s == NULL || *s == '\0')
        return -1;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int decode_table(const char *text, size_t len, table_info *t)
{
    memset(t, 0, sizeof *t);
    json_t *o = json_loadb(text, len, 0, NULL);
    if (o == NULL || !json_is_object(o))
        goto bad;
    table_schema *s = &t->schema;
    json_int_t id, status, billing, rcu, wcu, dec_today;
    const char *name, *uuid;
    size_t name_len;
    json_t *hash, *defs, *tags, *parts;
    double created, billing_update, last_inc, last_dec;
    int deletion_protection;
    if (json_unpack(o,
                    "{s:I, s:s%, s:o, s:I, s:s, s:F, s:I, s:F, s:I, s:I, s:F, s:F, s:I,"
                    " s:b, s:o, s:o, s:o}",
                    "id", &id, "name", &name, &name_len, "hash", &hash, "status", &status, "uuid",
                    &uuid, "created", &created, "billing", &billing, "billing_update",
                    &billing_update, "rcu", &rcu, "wcu", &wcu, "last_inc", &last_inc, "last_dec",
                    &last_dec, "dec_today", &dec_today, "deletion_protection", &deletion_protection,
                    "defs", &defs, "tags", &tags, "parts", &parts) < 0)
        goto bad;
    if (id < 1 || id > UINT32_MAX || name_len == 0 || name_len > TABLE_NAME_MAX ||
        strlen(uuid) >= sizeof t->uuid)
        goto bad;
    s->table_id = (uint32_t)id;
    memcpy(s->name, name, name_len);
    s->name[name_len] = '\0';
    s->name_len = name_len;
    if (parse_key_attr(hash, &s->hash) < 0)
        goto bad;
    json_t *range = json_object_get(o, "range");
    if (range != NULL) {
        if (parse_key_attr(range, &s->range) < 0)
            goto bad;
        s->has_range = true;
    }
    if (status < TABLE_CREATING || status > TABLE_DELETING || billing < 0 || billing > 1)
        goto bad;
    t->status = (table_status)status;
    strcpy(t->uuid, uuid);
    t->creation_time = created;
    t->billing = (billing_mode)billing;
    t->billing_last_update = billing_update;
    t->read_capacity = rcu;
    t->write_capacity = wcu;
    t->last_increase_time = last_inc;
    t->last_decrease_time = last_dec;
    t->decreases_today = dec_today;
    t->deletion_protection = deletion_protection;
    if (!json_is_array(defs) || json_array_size(defs) > CATALOG_MAX_ATTR_DEFS)
        goto bad;
    for (size_t i = 0; i < json_array_size(defs); i++)
        if (parse_key_attr(json_array_get(defs, i), &t->attr_defs[t->n_attr_defs++]) < 0)
            goto bad;
    if (!json_is_array(tags) || !json_is_array(parts) || json_array_size(parts) == 0 ||
        json_array_size(parts) > CATALOG_MAX_PARTITIONS)
        goto bad;
    for (size_t i = 0; i < json_array_size(tags); i++) {
        const char *k, *v;
        if (json_unpack(json_array_get(tags, i), "[s,s]", &k, &v) < 0 ||
            catalog_table_set_tag(t, k, v, NULL) < 0)
            goto bad;
    }
    t->partitions = calloc(json_array_size(parts), sizeof *t->partitions);
    if (t->partitions == NULL)
        goto bad;
    for (size_t i = 0; i < json_array_size(parts); i++) {
        json_t *p = json_array_get(parts, i);
        partition_desc *d = &t->partitions[i];
        if (!json_is_array(p) || json_array_size(p) != 3 ||
            parse_u64(json_array_get(p, 0), &d->id) < 0 ||
            parse_u64(json_array_get(p, 1), &d->hash_lo) < 0 ||
            parse_u64(json_array_get(p, 2), &d->hash_hi) < 0 || d->id == 0 ||
            d->hash_lo > d->hash_hi)
            goto bad;
        d->table_id = s->table_id;
        t->n_partitions++;
    }
    /* The partitions must tile the hash space in order. */
    if (t->partitions[0].hash_lo != 0 || t->partitions[t->n_partitions - 1].hash_hi != UINT64_MAX)
        goto bad;
    for (size_t i = 1; i < t->n_partitions; i++)
        if (t->partitions[i].hash_lo != t->partitions[i - 1].hash_hi + 1)
            goto bad;
    json_decref(o);
    return 0;
bad:
    json_decref(o);
    catalog_table_free(t);
    return -1;
}

/* A TABLE payload: u16 name length | name | JSON whose "name" must be the same name. */
static int decode_table_payload(const uint8_t *payload, size_t plen, table_info *t)
{
    if (plen < 2)
        return -1;
    size_t nlen = (size_t)payload[0] << 8 | payload[1];
    if (nlen > plen - 2)
        return -1;
    if (decode_table((const char *)payload + 2 + nlen, plen - 2 - nlen, t) < 0)
        return -1;
    if (t->schema.name_len != nlen || memcmp(t->schema.name, payload + 2, nlen) != 0) {
        catalog_table_free(t);
        return -1;
    }
    return 0;
}

static int remove_table(catalog *c, const char *name, size_t len)
{
    size_t i = lower_bound(c, name, len);
    if (i >= c->n)
        return 0;
    table_info *t = c->tables[i];
    if (name_cmp(t->schema.name, t->schema.name_len, name, len) != 0)
        return 0;
    by_id_remove(c, t);
    catalog_table_free(t);
    free(t);
    memmove(&c->tables[i], &c->tables[i + 1], (c->n - i - 1) * sizeof *c->tables);
    c->n--;
    return 0;
}

static int upsert_table(catalog *c, table_info *t, strata_err *err)
{
    table_info *heap = malloc(sizeof *heap);
    if (heap == NULL) {
        catalog_table_free(t);
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    *heap = *t;
    const table_schema *s = &heap->schema;
    size_t i = lower_bound(c, s->name, s->name_len);
    if (i < c->n && name_cmp(c->tables[i]->schema.name, c->tables[i]->schema.name_len, s->name,
                             s->name_len) == 0) {
        by_id_remove(c, c->tables[i]);
        c->n--;
        by_id_insert(c, heap);
        c->n++;
        catalog_table_free(c->tables[i]);
        free(c->tables[i]);
        c->tables[i] = heap;
    } else {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 16;
            table_info **tables = realloc(c->tables, cap * sizeof *tables);
            if (tables != NULL)
                c->tables = tables;
            table_info **by_id = tables ? realloc(c->by_id, cap * sizeof *by_id) : NULL;
            if (by_id != NULL)
                c->by_id = by_id;
            if (tables == NULL || by_id == NULL) {
                catalog_table_free(heap);
                free(heap);
                return strata_err_set(err, ERR_NOMEM, "out of memory");
            }
            c->cap = cap;
        }
        memmove(&c->tables[i + 1], &c->tables[i], (c->n - i) * sizeof *c->tables);
        c->tables[i] = heap;
        by_id_insert(c, heap);
        c->n++;
    }
    if (s->table_id >= c->next_table_id)
        c->next_table_id = s->table_id + 1;
    for (size_t j = 0; j < heap->n_partitions; j++)
        if (heap->partitions[j].id >= c->next_partition_id)
            c->next_partition_id = heap->partitions[j].id + 1;
    return 0;
}

int catalog_apply(catalog *c, const uint8_t *rec, size_t len, strata_err *err)
{
    rd r;
    rd_init(&r, rec, len);
    uint8_t version = rd_u8(&r);
    uint8_t kind = rd_u8(&r);
    uint64_t sum = rd_u64be(&r);
    if (r.failed || version != RECORD_VERSION)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad header");
    size_t plen = rd_left(&r);
    const uint8_t *payload = rd_bytes(&r, plen);
    if (XXH3_64bits(payload, plen) != sum)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: checksum mismatch");
    if (kind == REC_DROP) {
        if (plen == 0 || plen > TABLE_NAME_MAX)
            return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table name");
        return remove_table(c, (const char *)payload, plen);
    }
    if (kind != REC_TABLE)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: unknown kind %u", kind);
    table_info t;
    if (decode_table_payload(payload, plen, &t) < 0)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table");
    return upsert_table(c, &t, err);
}

int catalog_record_peek(const uint8_t *rec, size_t len, catalog_change *out, strata_err *err)
{
    rd r;
    rd_init(&r, rec, len);
    uint8_t version = rd_u8(&r);
    uint8_t kind = rd_u8(&r);
    uint64_t sum = rd_u64be(&r);
    if (r.failed || version != RECORD_VERSION || (kind != REC_TABLE && kind != REC_DROP))
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad header");
    size_t plen = rd_left(&r);
    const char *payload = (const char *)rd_bytes(&r, plen);
    if (XXH3_64bits(payload, plen) != sum)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: checksum mismatch");
    memset(out, 0, sizeof *out);
    out->drop = kind == REC_DROP;
    if (out->drop) {
        if (plen == 0 || plen > TABLE_NAME_MAX)
            return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table name");
        out->name = payload;
        out->name_len = plen;
        return 0;
    }
    if (plen < 2)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table name");
    size_t nlen = (size_t)(uint8_t)payload[0] << 8 | (uint8_t)payload[1];
    if (nlen > plen - 2)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table name");
    out->name = payload + 2;
    out->name_len = nlen;
    table_info t;
    if (decode_table_payload((const uint8_t *)payload, plen, &t) < 0)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table");
    out->table_id = t.schema.table_id;
    for (size_t i = 0; i < t.n_partitions; i++)
        if (t.partitions[i].id > out->max_partition_id)
            out->max_partition_id = t.partitions[i].id;
    catalog_table_free(&t);
    return 0;
}

void catalog_bump_ids(catalog *c, uint32_t next_table_id, uint64_t next_partition_id)
{
    if (next_table_id > c->next_table_id)
        c->next_table_id = next_table_id;
    if (next_partition_id > c->next_partition_id)
        c->next_partition_id = next_partition_id;
}
