/*
 * api_table.c: the control plane. CreateTable, DeleteTable, DescribeTable, ListTables,
 * UpdateTable, TagResource, UntagResource, ListTagsOfResource, DescribeLimits,
 * DescribeEndpoints, DescribeTimeToLive.
 *
 * A change builds the next state of one table (a table_info), encodes it as a catalog
 * record and hands it to the router, which answers once the record is durable and
 * applied. Changes are serialized (api_serial): each sees the effect of the previous.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "node/api_internal.h"

#define ACCOUNT_ID         "000000000000"
#define MAX_CAPACITY_UNITS 40000 /* DescribeLimits' per-table maximum */
#define CHANGE_ATTEMPTS    20    /* a change other nodes' changes keep refusing fails then */

/* ---- helpers ---- */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Milliseconds, as DynamoDB reports them. */
    return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000000) / 1000.0;
}

static void make_uuid(char out[37])
{
    uint8_t b[16];
    if (RAND_bytes(b, sizeof b) != 1) {
        uint64_t t = (uint64_t)time(NULL) * 6364136223846793005ull + (uint64_t)clock();
        memcpy(b, &t, 8);
        memcpy(b + 8, &t, 8);
    }
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

static void table_arn(api_request *req, const table_info *t, char *out, size_t cap)
{
    snprintf(out, cap, "arn:aws:dynamodb:%s:" ACCOUNT_ID ":table/%s", api_region(req),
             t->schema.name);
}

static const char *type_name(av_type t)
{
    return t == AV_N ? "N" : t == AV_B ? "B" : "S";
}

/* Decreases count per UTC day: yesterday's decreases do not count today. */
static int64_t decreases_today(const table_info *t, double now)
{
    if (t->last_decrease_time <= 0 ||
        (int64_t)(t->last_decrease_time / 86400) != (int64_t)(now / 86400))
        return 0;
    return t->decreases_today;
}

/* The TableDescription of `t` as DynamoDB shows it, with `status` shown. */
static json_t *describe(api_request *req, const table_info *t, table_status status)
{
    const table_schema *s = &t->schema;
    char arn[512];
    table_arn(req, t, arn, sizeof arn);
    json_t *defs = json_array();
    for (size_t i = 0; i < t->n_attr_defs; i++)
        json_array_append_new(defs, json_pack("{s:s, s:s}", "AttributeName", t->attr_defs[i].name,
                                              "AttributeType", type_name(t->attr_defs[i].type)));
    json_t *keys = json_array();
    json_array_append_new(
        keys, json_pack("{s:s, s:s}", "AttributeName", s->hash.name, "KeyType", "HASH"));
    if (s->has_range)
        json_array_append_new(
            keys, json_pack("{s:s, s:s}", "AttributeName", s->range.name, "KeyType", "RANGE"));
    json_t *pt = json_object();
    if (t->last_increase_time > 0)
        json_object_set_new(pt, "LastIncreaseDateTime", json_real(t->last_increase_time));
    if (t->last_decrease_time > 0)
        json_object_set_new(pt, "LastDecreaseDateTime", json_real(t->last_decrease_time));
    json_object_set_new(pt, "NumberOfDecreasesToday",
                        json_integer(decreases_today(t, now_seconds())));
    json_object_set_new(pt, "ReadCapacityUnits",
                        json_integer(t->billing == BILLING_PROVISIONED ? t->read_capacity : 0));
    json_object_set_new(pt, "WriteCapacityUnits",
                        json_integer(t->billing == BILLING_PROVISIONED ? t->write_capacity : 0));
    json_t *bms = json_object();
    json_object_set_new(bms, "BillingMode", json_string(billing_mode_name(t->billing)));
    if (t->billing == BILLING_PAY_PER_REQUEST)
        json_object_set_new(
            bms, "LastUpdateToPayPerRequestDateTime",
            json_real(t->billing_last_update > 0 ? t->billing_last_update : t->creation_time));
    partition_stats st = router_table_stats(req->router, s->table_id);
    json_t *d = json_object();
    json_object_set_new(d, "AttributeDefinitions", defs);
    json_object_set_new(d, "TableName", json_string(s->name));
    json_object_set_new(d, "KeySchema", keys);
    json_object_set_new(d, "TableStatus", json_string(table_status_name(status)));
    json_object_set_new(d, "CreationDateTime", json_real(t->creation_time));
    json_object_set_new(d, "ProvisionedThroughput", pt);
    json_object_set_new(d, "TableSizeBytes", json_integer(st.size_bytes));
    json_object_set_new(d, "ItemCount", json_integer(st.item_count));
    json_object_set_new(d, "TableArn", json_string(arn));
    json_object_set_new(d, "TableId", json_string(t->uuid));
    json_object_set_new(d, "BillingModeSummary", bms);
    json_object_set_new(d, "DeletionProtectionEnabled", json_boolean(t->deletion_protection));
    return d;
}

/* ---- serialized changes ---- */

static void serial_run(api_request *req, void (*fn)(api_request *req))
{
    api_serial *q = api_server_serial(req->srv);
    if (!q->busy) {
        q->busy = true;
        q->running = fn;
        q->attempts = 0;
        fn(req);
        return;
    }
    api_deferred *d = arena_zalloc(req->arena, sizeof *d);
    if (d == NULL) {
        api_respond_error(req, ERR_NOMEM, "out of memory");
        return;
    }
    d->req = req;
    d->fn = fn;
    if (q->tail != NULL)
        q->tail->next = d;
    else
        q->head = d;
    q->tail = d;
}

/* The running change has answered: start the next one. */
static void serial_done(api_server *srv)
{
    api_serial *q = api_server_serial(srv);
    api_deferred *d = q->head;
    if (d == NULL) {
        q->busy = false;
        return;
    }
    q->head = d->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->running = d->fn;
    q->attempts = 0;
    d->fn(d->req);
}

/* Answers with an error and lets the next change run. */
static void change_fail(api_request *req, const strata_err *err)
{
    api_server *srv = req->srv;
    api_respond_err(req, err);
    serial_done(srv);
}

typedef struct {
    api_request *req;
    table_info next; /* the state being written (heap parts freed after) */
    void (*answer)(api_request *req, const table_info *next);
} change;

static void on_change_durable(void *ctx, const strata_err *err, const uint8_t *result, size_t len)
{
    change *c = ctx;
    api_request *req = c->req;
    api_server *srv = req->srv;
    api_serial *q = api_server_serial(srv);
    (void)result;
    (void)len;
    if (err != NULL && err->code == ERR_BUSY && q->attempts < CHANGE_ATTEMPTS) {
        /* Another node changed the table first (the map refused this change, and this
         * node's catalog now holds the other one): build it again from there. */
        catalog_table_free(&c->next);
        free(c);
        q->attempts++;
        q->running(req);
        return;
    }
    strata_err gone;
    if (err != NULL && err->code == ERR_NOT_FOUND) { /* dropped meanwhile (by another node) */
        strata_err_set(&gone, ERR_RESOURCE_NOT_FOUND,
                       "Requested resource not found: Table: %s not found", c->next.schema.name);
        err = &gone;
    }
    if (err != NULL)
        api_respond_err(req, err);
    else
        c->answer(req, &c->next);
    catalog_table_free(&c->next);
    free(c);
    serial_done(srv);
}

/* Takes `next` (its heap parts): writes it (or drops it when `drop`), then `answer`. */
static void submit_change(api_request *req, table_info *next, bool drop,
                          void (*answer)(api_request *req, const table_info *next))
{
    strata_err err;
    change *c = calloc(1, sizeof *c);
    if (c == NULL) {
        catalog_table_free(next);
        strata_err_set(&err, ERR_NOMEM, "out of memory");
        change_fail(req, &err);
        return;
    }
    c->req = req;
    c->next = *next;
    c->answer = answer;
    buf b;
    buf_init(&b, 0);
    int rc = drop ? catalog_encode_drop(next->schema.name, next->schema.name_len, &b, &err)
                  : catalog_encode_table(next, &b, &err);
    if (rc == 0)
        rc = router_catalog_write(req->router, b.data, b.len, on_change_durable, c, &err);
    buf_free(&b);
    if (rc < 0) {
        catalog_table_free(&c->next);
        free(c);
        change_fail(req, &err);
    }
}

/* ---- CreateTable ---- */

static const char *const billing_modes[] = {"PROVISIONED", "PAY_PER_REQUEST", NULL};
/* Validated, and otherwise without effect: every table is served the same way. */
static const char *const table_classes[] = {"STANDARD", "STANDARD_INFREQUENT_ACCESS", NULL};

typedef struct {
    bool present;
    int64_t read, write;
} throughput;

/* ProvisionedThroughput: {ReadCapacityUnits, WriteCapacityUnits}, both >= 1. JSON type
 * errors always fail; constraint failures are added to `v` unless it is NULL. */
static int parse_throughput(api_request *req, api_verr *v, throughput *out, strata_err *err)
{
    json_t *pt;
    memset(out, 0, sizeof *out);
    if (api_param_object(req, "ProvisionedThroughput", &pt, err) < 0)
        return -1;
    if (pt == NULL)
        return 0;
    out->present = true;
    /* DynamoDB checks (and lists) WriteCapacityUnits first. */
    static const char *const names[2] = {"WriteCapacityUnits", "ReadCapacityUnits"};
    static const char *const members[2] = {"provisionedThroughput.writeCapacityUnits",
                                           "provisionedThroughput.readCapacityUnits"};
    int64_t *vals[2] = {&out->write, &out->read};
    for (int i = 0; i < 2; i++) {
        json_t *n = json_object_get(pt, names[i]);
        if (n == NULL || json_is_null(n)) {
            if (v != NULL)
                api_verr_add(v, NULL, members[i], "Member must not be null");
            continue;
        }
        if (!json_is_integer(n))
            return api_wrong_type(n, "Long", err);
        *vals[i] = json_integer_value(n);
        if (*vals[i] < 1 && v != NULL) {
            char val[32];
            snprintf(val, sizeof val, "%" PRId64, *vals[i]);
            api_verr_add(v, val, members[i], "Member must have value greater than or equal to 1");
        }
    }
    return 0;
}

/* Checks the throughput against the billing mode (`named`: the request gave it, rather
 * than PROVISIONED by default); 0 or -1 with DynamoDB's message. */
static int check_billing(billing_mode mode, bool named, const throughput *tp, strata_err *err)
{
    if (mode == BILLING_PAY_PER_REQUEST && tp->present)
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values were invalid: Neither "
                              "ReadCapacityUnits nor WriteCapacityUnits can be specified when "
                              "BillingMode is PAY_PER_REQUEST");
    if (mode == BILLING_PROVISIONED && !tp->present)
        return strata_err_set(err, ERR_VALIDATION,
                              named ? "One or more parameter values were invalid: "
                                      "ReadCapacityUnits and WriteCapacityUnits must both be "
                                      "specified when BillingMode is PROVISIONED"
                                    : "No provisioned throughput specified for the table");
    if (tp->present && (tp->read > MAX_CAPACITY_UNITS || tp->write > MAX_CAPACITY_UNITS))
        return strata_err_set(err, ERR_LIMIT_EXCEEDED,
                              "Subscriber limit exceeded: Provisioned throughput for a table "
                              "cannot exceed %d read or write capacity units",
                              MAX_CAPACITY_UNITS);
    return 0;
}

typedef struct {
    const char *name;
    size_t len;
    int type; /* index into {"B","N","S"} or -1 */
} attr_def_in;

static const char *const attr_types[] = {"B", "N", "S", NULL};
static const av_type attr_av_types[] = {AV_B, AV_N, AV_S};
static const char *const key_types[] = {"HASH", "RANGE", NULL};

static int enum_index(const char *const *allowed, const char *s)
{
    for (int i = 0; allowed[i] != NULL; i++)
        if (strcmp(allowed[i], s) == 0)
            return i;
    return -1;
}

/* A string member of an element of a list parameter; -1 on a wrong JSON type. */
static int elem_string(json_t *elem, const char *name, const char **out, strata_err *err)
{
    json_t *v = json_object_get(elem, name);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return api_wrong_type(v, "String", err);
    *out = json_string_value(v);
    return 0;
}

static void check_attr_name(api_verr *v, const char *name, const char *member)
{
    if (name == NULL) {
        api_verr_add(v, NULL, member, "Member must not be null");
        return;
    }
    size_t len = strlen(name);
    if (len < 1)
        api_verr_add(v, name, member, "Member must have length greater than or equal to 1");
    if (len > ATTR_NAME_MAX)
        api_verr_add(v, name, member, "Member must have length less than or equal to 255");
}

/* Validates an enum member: a missing required value, or one outside `allowed`, adds
 * DynamoDB's constraint message to `v`. Returns the value's index in `allowed`, or -1
 * when it is missing or invalid. */
static int check_enum(api_verr *v, const char *value, const char *member,
                      const char *const *allowed, bool required)
{
    if (value == NULL) {
        if (required)
            api_verr_add(v, NULL, member, "Member must not be null");
        return -1;
    }
    int i = enum_index(allowed, value);
    if (i >= 0)
        return i;
    char c[128];
    size_t n = (size_t)snprintf(c, sizeof c, "Member must satisfy enum value set: [");
    for (int k = 0; allowed[k] != NULL && n < sizeof c; k++)
        n += (size_t)snprintf(c + n, sizeof c - n, "%s%s", k ? ", " : "", allowed[k]);
    if (n < sizeof c)
        snprintf(c + n, sizeof c - n, "]");
    api_verr_add(v, value, member, c);
    return -1;
}

/* ---- Tag rules, shared by TagResource and CreateTable ---- */

#define TAG_KEY_MAX   128 /* Unicode characters */
#define TAG_VALUE_MAX 256

/* Unicode characters of a UTF-8 string (jansson only hands out valid UTF-8). */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s != '\0'; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* DynamoDB's tag alphabet: letters, numbers, white space and + - = . _ : / (and @, which
 * AWS tagging allows everywhere). Any non-ASCII character passes as a letter: without
 * Unicode tables, refusing a valid tag would be worse than taking an odd symbol. */
static bool tag_text_ok(const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        bool alnum = (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z');
        if (ch < 0x80 && !alnum && strchr(" \t+-=._:/@", ch) == NULL)
            return false;
    }
    return true;
}

#define TAG_PATTERN                                                                                \
    "Member must satisfy regular expression pattern: [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*"

/*
 * The Tags list of TagResource or CreateTable: an element of the wrong shape is -1 with
 * `err`; each key (1..128 characters) and value (0..256) outside DynamoDB's limits or
 * alphabet is added to `v` (paths tags.N.member.key and .value).
 */
static int check_tags(const json_t *tags, api_verr *v, strata_err *err)
{
    for (size_t i = 0; i < json_array_size(tags); i++) {
        json_t *e = json_array_get(tags, i);
        if (!json_is_object(e))
            return api_wrong_type(e, "Tag", err);
        const char *k, *val;
        if (elem_string(e, "Key", &k, err) < 0 || elem_string(e, "Value", &val, err) < 0)
            return -1;
        char member[64];
        snprintf(member, sizeof member, "tags.%zu.member.key", i + 1);
        size_t kn = k ? utf8_chars(k) : 0;
        if (k == NULL)
            api_verr_add(v, NULL, member, "Member must not be null");
        else if (kn < 1)
            api_verr_add(v, k, member, "Member must have length greater than or equal to 1");
        else if (kn > TAG_KEY_MAX)
            api_verr_add(v, k, member, "Member must have length less than or equal to 128");
        else if (!tag_text_ok(k))
            api_verr_add(v, k, member, TAG_PATTERN);
        snprintf(member, sizeof member, "tags.%zu.member.value", i + 1);
        if (val == NULL)
            api_verr_add(v, NULL, member, "Member must not be null");
        else if (utf8_chars(val) > TAG_VALUE_MAX)
            api_verr_add(v, val, member, "Member must have length less than or equal to 256");
        else if (!tag_text_ok(val))
            api_verr_add(v, val, member, TAG_PATTERN);
    }
    return 0;
}

/* A key the user may not assign: the aws: prefix is AWS's own (any letter case). */
static int check_tag_prefixes(const json_t *tags, strata_err *err)
{
    for (size_t i = 0; i < json_array_size(tags); i++) {
        const char *k = json_string_value(json_object_get(json_array_get(tags, i), "Key"));
        if (k != NULL && strncasecmp(k, "aws:", 4) == 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "One or more parameter values were invalid: tag key %s uses "
                                  "the prefix aws:, which is reserved for AWS",
                                  k);
    }
    return 0;
}

/* Applies the tags to `t`, then holds it to the 50 tags a resource may carry. */
static int apply_tags(table_info *t, const json_t *tags, strata_err *err)
{
    for (size_t i = 0; i < json_array_size(tags); i++) {
        json_t *e = json_array_get(tags, i);
        if (catalog_table_set_tag(t, json_string_value(json_object_get(e, "Key")),
                                  json_string_value(json_object_get(e, "Value")), err) < 0)
            return -1;
    }
    if (t->n_tags > CATALOG_MAX_TAGS)
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values were invalid: the number of tags "
                              "on the resource would exceed the limit of %d",
                              CATALOG_MAX_TAGS);
    return 0;
}

static void answer_create(api_request *req, const table_info *next);

static void create_table_now(api_request *req)
{
    strata_err err;
    api_verr v;
    api_verr_init(&v);
    const catalog *cat = router_catalog(req->router);

    json_t *defs, *keys, *gsis, *lsis, *tags, *stream;
    const char *name;
    size_t name_len;
    int billing;
    bool protect;
    throughput tp;
    if (api_param_array(req, "AttributeDefinitions", &defs, &err) < 0 ||
        api_param_array(req, "KeySchema", &keys, &err) < 0 ||
        api_param_array(req, "GlobalSecondaryIndexes", &gsis, &err) < 0 ||
        api_param_array(req, "LocalSecondaryIndexes", &lsis, &err) < 0 ||
        api_param_array(req, "Tags", &tags, &err) < 0 ||
        api_param_object(req, "StreamSpecification", &stream, &err) < 0 ||
        api_param_string(req, "TableName", false, &name, &name_len, &err) < 0 ||
        api_param_bool(req, "DeletionProtectionEnabled", false, &protect, &err) < 0 ||
        parse_throughput(req, NULL, &tp, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    const char *bm = NULL, *tclass = NULL;
    if (api_param_string(req, "BillingMode", false, &bm, NULL, &err) < 0 ||
        api_param_string(req, "TableClass", false, &tclass, NULL, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    /* Constraint checks, collected in DynamoDB's member order: AttributeDefinitions,
     * TableName, BillingMode, ProvisionedThroughput, KeySchema. */
    attr_def_in in_defs[8];
    size_t n_defs = 0;
    if (defs == NULL) {
        api_verr_add(&v, NULL, "attributeDefinitions", "Member must not be null");
    } else {
        for (size_t i = 0; i < json_array_size(defs); i++) {
            json_t *e = json_array_get(defs, i);
            if (!json_is_object(e)) {
                api_wrong_type(e, "AttributeDefinition", &err);
                change_fail(req, &err);
                return;
            }
            const char *an, *at;
            if (elem_string(e, "AttributeName", &an, &err) < 0 ||
                elem_string(e, "AttributeType", &at, &err) < 0) {
                change_fail(req, &err);
                return;
            }
            char member[96];
            snprintf(member, sizeof member, "attributeDefinitions.%zu.member.attributeName", i + 1);
            check_attr_name(&v, an, member);
            snprintf(member, sizeof member, "attributeDefinitions.%zu.member.attributeType", i + 1);
            int ti = check_enum(&v, at, member, attr_types, true);
            if (n_defs < sizeof in_defs / sizeof in_defs[0] && an != NULL)
                in_defs[n_defs++] = (attr_def_in){an, strlen(an), ti};
        }
    }
    api_check_table_name(&v, name, name_len, "tableName");
    billing = check_enum(&v, bm, "billingMode", billing_modes, false);
    if (billing < 0)
        billing = BILLING_PROVISIONED;
    parse_throughput(req, &v, &tp, &err);
    check_enum(&v, tclass, "tableClass", table_classes, false);
    const char *key_name[2] = {NULL, NULL};
    int key_type[2] = {-1, -1};
    size_t n_keys = 0;
    if (keys == NULL) {
        api_verr_add(&v, NULL, "keySchema", "Member must not be null");
    } else {
        n_keys = json_array_size(keys);
        if (n_keys < 1)
            api_verr_add_json(&v, keys, "keySchema",
                              "Member must have length greater than or equal to 1");
        if (n_keys > 2)
            api_verr_add_json(&v, keys, "keySchema",
                              "Member must have length less than or equal to 2");
        for (size_t i = 0; i < n_keys; i++) {
            json_t *e = json_array_get(keys, i);
            if (!json_is_object(e)) {
                api_wrong_type(e, "KeySchemaElement", &err);
                change_fail(req, &err);
                return;
            }
            const char *an, *kt;
            if (elem_string(e, "AttributeName", &an, &err) < 0 ||
                elem_string(e, "KeyType", &kt, &err) < 0) {
                change_fail(req, &err);
                return;
            }
            char member[64];
            snprintf(member, sizeof member, "keySchema.%zu.member.attributeName", i + 1);
            check_attr_name(&v, an, member);
            snprintf(member, sizeof member, "keySchema.%zu.member.keyType", i + 1);
            int ki = check_enum(&v, kt, member, key_types, true);
            if (i < 2) {
                key_name[i] = an;
                key_type[i] = ki;
            }
        }
    }
    if (check_tags(tags, &v, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    if (api_verr_finish(&v, &err) < 0 || check_tag_prefixes(tags, &err) < 0) {
        change_fail(req, &err);
        return;
    }

    /* Rules between members, in the order DynamoDB reports them. */
    if (check_billing((billing_mode)billing, bm != NULL, &tp, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    if (n_keys > n_defs) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Invalid KeySchema: Some index key attribute have no definition");
        change_fail(req, &err);
        return;
    }
    int key_def[2] = {-1, -1};
    for (size_t k = 0; k < n_keys; k++)
        for (size_t i = 0; i < n_defs; i++)
            if (strlen(key_name[k]) == in_defs[i].len &&
                memcmp(key_name[k], in_defs[i].name, in_defs[i].len) == 0)
                key_def[k] = (int)i;
    if (key_def[0] < 0 || (n_keys == 2 && key_def[1] < 0)) {
        char msg[STRATA_ERR_MSG_MAX];
        size_t n = (size_t)snprintf(msg, sizeof msg,
                                    "One or more parameter values were invalid: Some index key "
                                    "attributes are not defined in AttributeDefinitions. Keys: [");
        for (size_t k = 0; k < n_keys && n < sizeof msg; k++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s", k ? ", " : "", key_name[k]);
        if (n < sizeof msg)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "], AttributeDefinitions: [");
        for (size_t i = 0; i < n_defs && n < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%.*s", i ? ", " : "",
                                  (int)in_defs[i].len, in_defs[i].name);
        if (n < sizeof msg)
            snprintf(msg + n, sizeof msg - n, "]");
        strata_err_set(&err, ERR_VALIDATION, "%s", msg);
        change_fail(req, &err);
        return;
    }
    if (n_keys == 2 && strcmp(key_name[0], key_name[1]) == 0) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Both the Hash Key and the Range Key element in the KeySchema have the "
                       "same name");
        change_fail(req, &err);
        return;
    }
    if (key_type[0] != KEY_HASH) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Invalid KeySchema: The first KeySchemaElement is not a HASH key type");
        change_fail(req, &err);
        return;
    }
    if (n_keys == 2 && key_type[1] != KEY_RANGE) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type");
        change_fail(req, &err);
        return;
    }
    for (size_t i = 0; i < n_defs; i++)
        for (size_t j = i + 1; j < n_defs; j++)
            if (in_defs[i].len == in_defs[j].len &&
                memcmp(in_defs[i].name, in_defs[j].name, in_defs[i].len) == 0) {
                strata_err_set(&err, ERR_VALIDATION,
                               "Cannot have two attributes with the same name");
                change_fail(req, &err);
                return;
            }
    if (gsis != NULL || lsis != NULL) {
        const char *which = gsis != NULL ? "GlobalSecondaryIndexes" : "LocalSecondaryIndexes";
        if (json_array_size(gsis != NULL ? gsis : lsis) == 0)
            strata_err_set(&err, ERR_VALIDATION,
                           "One or more parameter values were invalid: List of %s is empty", which);
        else
            strata_err_set(&err, ERR_VALIDATION,
                           "One or more parameter values were invalid: %s are not supported "
                           "yet",
                           which);
        change_fail(req, &err);
        return;
    }
    if (n_defs != n_keys) {
        strata_err_set(&err, ERR_VALIDATION,
                       "One or more parameter values were invalid: Number of attributes in "
                       "KeySchema does not exactly match number of attributes defined in "
                       "AttributeDefinitions");
        change_fail(req, &err);
        return;
    }
    if (stream != NULL && json_is_true(json_object_get(stream, "StreamEnabled"))) {
        strata_err_set(&err, ERR_VALIDATION,
                       "One or more parameter values were invalid: Streams are not supported yet");
        change_fail(req, &err);
        return;
    }
    if (catalog_find(cat, name, name_len) != NULL) {
        api_catalog_doubt(req); /* deleted meanwhile through another node? */
        strata_err_set(&err, ERR_RESOURCE_IN_USE, "Table already exists: %s", name);
        change_fail(req, &err);
        return;
    }
    if (catalog_count(cat) >= CATALOG_MAX_TABLES) {
        strata_err_set(&err, ERR_LIMIT_EXCEEDED,
                       "Subscriber limit exceeded: There is a limit of %d tables per account",
                       CATALOG_MAX_TABLES);
        change_fail(req, &err);
        return;
    }

    table_info t;
    memset(&t, 0, sizeof t);
    table_schema *s = &t.schema;
    s->table_id = catalog_next_table_id(cat);
    memcpy(s->name, name, name_len);
    s->name_len = name_len;
    for (size_t k = 0; k < n_keys; k++) {
        key_attr *ka = k == 0 ? &s->hash : &s->range;
        const attr_def_in *d = &in_defs[key_def[k]];
        memcpy(ka->name, d->name, d->len);
        ka->name[d->len] = '\0';
        ka->name_len = d->len;
        ka->type = attr_av_types[d->type];
    }
    s->has_range = n_keys == 2;
    /* AttributeDefinitions in name order, as DynamoDB lists them. */
    t.attr_defs[0] = s->hash;
    t.n_attr_defs = 1;
    if (s->has_range) {
        bool before = strcmp(s->range.name, s->hash.name) < 0;
        t.attr_defs[before ? 0 : 1] = s->range;
        t.attr_defs[before ? 1 : 0] = s->hash;
        t.n_attr_defs = 2;
    }
    t.status = TABLE_ACTIVE;
    make_uuid(t.uuid);
    t.creation_time = now_seconds();
    t.billing = (billing_mode)billing;
    if (billing == BILLING_PAY_PER_REQUEST)
        t.billing_last_update = t.creation_time;
    t.read_capacity = tp.present ? tp.read : 0;
    t.write_capacity = tp.present ? tp.write : 0;
    t.deletion_protection = protect;
    if (apply_tags(&t, tags, &err) < 0) {
        catalog_table_free(&t);
        change_fail(req, &err);
        return;
    }
    int parts = api_server_initial_partitions(req->srv);
    if (catalog_split_even(&t, (size_t)parts, catalog_next_partition_id(cat), &err) < 0) {
        catalog_table_free(&t);
        change_fail(req, &err);
        return;
    }
    submit_change(req, &t, false, answer_create);
}

static void answer_create(api_request *req, const table_info *next)
{
    const table_info *t =
        catalog_find(router_catalog(req->router), next->schema.name, next->schema.name_len);
    if (t == NULL)
        t = next;
    api_respond_json(req, json_pack("{s:o}", "TableDescription", describe(req, t, t->status)));
}

void api_create_table(api_request *req)
{
    serial_run(req, create_table_now);
}

/* ---- DescribeTable ---- */

void api_describe_table(api_request *req)
{
    if (api_catalog_sync_first(req))
        return;
    strata_err err;
    const char *name;
    size_t len;
    if (api_param_table_name(req, &name, &len, &err) < 0) {
        api_respond_err(req, &err);
        return;
    }
    const table_info *t = catalog_find(router_catalog(req->router), name, len);
    if (t == NULL) {
        api_catalog_doubt(req);
        api_respond_error(req, ERR_RESOURCE_NOT_FOUND,
                          "Requested resource not found: Table: %s not found", name);
        return;
    }
    api_respond_json(req, json_pack("{s:o}", "Table", describe(req, t, t->status)));
}

/* ---- ListTables ---- */

void api_list_tables(api_request *req)
{
    if (api_catalog_sync_first(req))
        return;
    strata_err err;
    const char *start;
    size_t start_len;
    bool has_limit;
    int64_t limit = 100;
    api_verr v;
    api_verr_init(&v);
    if (api_param_string(req, "ExclusiveStartTableName", false, &start, &start_len, &err) < 0 ||
        api_param_int(req, "Limit", "limit", 1, 100, &has_limit, &limit, &err) < 0) {
        api_respond_err(req, &err);
        return;
    }
    if (!has_limit)
        limit = 100;
    if (start != NULL)
        api_check_table_name(&v, start, start_len, "exclusiveStartTableName");
    if (api_verr_finish(&v, &err) < 0) {
        api_respond_err(req, &err);
        return;
    }
    const catalog *cat = router_catalog(req->router);
    json_t *names = json_array();
    const table_info *t = catalog_next(cat, start, start_len);
    const table_info *last = NULL;
    int64_t n = 0;
    for (; t != NULL && n < limit; t = catalog_next(cat, t->schema.name, t->schema.name_len)) {
        json_array_append_new(names, json_string(t->schema.name));
        last = t;
        n++;
    }
    json_t *out = json_pack("{s:o}", "TableNames", names);
    if (t != NULL && last != NULL)
        json_object_set_new(out, "LastEvaluatedTableName", json_string(last->schema.name));
    api_respond_json(req, out);
}

/* ---- DeleteTable ---- */

static void answer_delete(api_request *req, const table_info *gone)
{
    api_respond_json(req,
                     json_pack("{s:o}", "TableDescription", describe(req, gone, TABLE_DELETING)));
}

static void delete_table_now(api_request *req)
{
    strata_err err;
    const char *name;
    size_t len;
    if (api_param_table_name(req, &name, &len, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    const table_info *t = api_table(req, name, len, &err);
    if (t == NULL) {
        change_fail(req, &err);
        return;
    }
    if (t->deletion_protection) {
        strata_err_set(&err, ERR_VALIDATION,
                       "Resource cannot be deleted as it is currently protected against "
                       "deletion. Disable deletion protection first.");
        change_fail(req, &err);
        return;
    }
    table_info copy;
    if (catalog_table_copy(t, &copy, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    submit_change(req, &copy, true, answer_delete);
}

void api_delete_table(api_request *req)
{
    serial_run(req, delete_table_now);
}

/* ---- UpdateTable ---- */

static void answer_update(api_request *req, const table_info *next)
{
    const table_info *t =
        catalog_find(router_catalog(req->router), next->schema.name, next->schema.name_len);
    if (t == NULL)
        t = next;
    api_respond_json(req, json_pack("{s:o}", "TableDescription", describe(req, t, t->status)));
}

static void update_table_now(api_request *req)
{
    strata_err err;
    api_verr v;
    api_verr_init(&v);
    const char *name;
    size_t len;
    json_t *gsi_updates, *stream, *sse, *replicas;
    throughput tp;
    const char *bm, *tclass;
    bool has_protect = json_object_get(req->body, "DeletionProtectionEnabled") != NULL &&
                       !json_is_null(json_object_get(req->body, "DeletionProtectionEnabled"));
    bool protect;
    if (api_param_string(req, "TableName", false, &name, &len, &err) < 0 ||
        api_param_array(req, "GlobalSecondaryIndexUpdates", &gsi_updates, &err) < 0 ||
        api_param_object(req, "StreamSpecification", &stream, &err) < 0 ||
        api_param_object(req, "SSESpecification", &sse, &err) < 0 ||
        api_param_array(req, "ReplicaUpdates", &replicas, &err) < 0 ||
        api_param_bool(req, "DeletionProtectionEnabled", false, &protect, &err) < 0 ||
        api_param_string(req, "BillingMode", false, &bm, NULL, &err) < 0 ||
        api_param_string(req, "TableClass", false, &tclass, NULL, &err) < 0 ||
        parse_throughput(req, &v, &tp, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    int billing = check_enum(&v, bm, "billingMode", billing_modes, false);
    check_enum(&v, tclass, "tableClass", table_classes, false);
    api_check_table_name(&v, name, len, "tableName");
    if (api_verr_finish(&v, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    const table_info *t = api_table(req, name, len, &err);
    if (t == NULL) {
        change_fail(req, &err);
        return;
    }
    if (gsi_updates != NULL) {
        strata_err_set(&err, ERR_VALIDATION,
                       "One or more parameter values were invalid: GlobalSecondaryIndexUpdates "
                       "are not supported yet");
        change_fail(req, &err);
        return;
    }
    if (!tp.present && billing < 0 && stream == NULL && sse == NULL && replicas == NULL &&
        !has_protect && tclass == NULL) {
        strata_err_set(&err, ERR_VALIDATION,
                       "At least one of ProvisionedThroughput, BillingMode, UpdateStreamEnabled, "
                       "GlobalSecondaryIndexUpdates or SSESpecification or ReplicaUpdates is "
                       "required");
        change_fail(req, &err);
        return;
    }
    billing_mode mode = billing >= 0 ? (billing_mode)billing : t->billing;
    if (mode == BILLING_PAY_PER_REQUEST && tp.present) {
        check_billing(mode, true, &tp, &err);
        change_fail(req, &err);
        return;
    }
    if (mode == BILLING_PROVISIONED && t->billing == BILLING_PAY_PER_REQUEST && !tp.present) {
        strata_err_set(&err, ERR_VALIDATION,
                       "One or more parameter values were invalid: ProvisionedThroughput must "
                       "be specified when BillingMode is PROVISIONED");
        change_fail(req, &err);
        return;
    }
    if (tp.present && check_billing(mode, true, &tp, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    if (tp.present && mode == t->billing && tp.read == t->read_capacity &&
        tp.write == t->write_capacity && billing < 0 && !has_protect) {
        strata_err_set(&err, ERR_VALIDATION,
                       "The provisioned throughput for the table will not change. The requested "
                       "value equals the current value. Current ReadCapacityUnits provisioned "
                       "for the table: %" PRId64 ". Requested ReadCapacityUnits: %" PRId64
                       ". Current WriteCapacityUnits provisioned for the table: %" PRId64
                       ". Requested WriteCapacityUnits: %" PRId64
                       ". Refer to the Amazon DynamoDB Developer Guide for current limits and "
                       "how to request higher limits.",
                       t->read_capacity, tp.read, t->write_capacity, tp.write);
        change_fail(req, &err);
        return;
    }
    if (stream != NULL && json_is_true(json_object_get(stream, "StreamEnabled"))) {
        strata_err_set(&err, ERR_VALIDATION,
                       "One or more parameter values were invalid: Streams are not supported yet");
        change_fail(req, &err);
        return;
    }
    table_info next;
    if (catalog_table_copy(t, &next, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    double now = now_seconds();
    if (mode != t->billing) {
        next.billing = mode;
        next.billing_last_update = now;
        if (mode == BILLING_PAY_PER_REQUEST) {
            next.read_capacity = 0;
            next.write_capacity = 0;
        }
    }
    if (tp.present) {
        if (tp.read > t->read_capacity || tp.write > t->write_capacity)
            next.last_increase_time = now;
        if (tp.read < t->read_capacity || tp.write < t->write_capacity) {
            next.decreases_today = decreases_today(t, now) + 1;
            next.last_decrease_time = now;
        }
        next.read_capacity = tp.read;
        next.write_capacity = tp.write;
    }
    if (has_protect)
        next.deletion_protection = protect;
    submit_change(req, &next, false, answer_update);
}

void api_update_table(api_request *req)
{
    serial_run(req, update_table_now);
}

/* ---- Tags ---- */

/* The table an ARN names; NULL with DynamoDB's error otherwise. */
static const table_info *table_from_arn(api_request *req, const char *arn, strata_err *err)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "arn:aws:dynamodb:%s:" ACCOUNT_ID ":table/", api_region(req));
    size_t plen = strlen(prefix);
    const char *name = NULL;
    if (strncmp(arn, prefix, plen) == 0)
        name = arn + plen;
    else if (strncmp(arn, "arn:aws:dynamodb:", 17) == 0) {
        const char *t = strstr(arn, ":table/");
        if (t == NULL) {
            strata_err_set(err, ERR_VALIDATION,
                           "Invalid TableArn: Invalid ResourceArn provided as input %s", arn);
            return NULL;
        }
        strata_err_set(err, ERR_RESOURCE_NOT_FOUND,
                       "Requested resource not found: ResourcArn: %s not found", arn);
        return NULL;
    }
    if (name == NULL || strchr(name, '/') != NULL ||
        !catalog_valid_table_name(name, strlen(name))) {
        strata_err_set(err, ERR_VALIDATION,
                       "Invalid TableArn: Invalid ResourceArn provided as input %s", arn);
        return NULL;
    }
    const table_info *t = catalog_find(router_catalog(req->router), name, strlen(name));
    if (t == NULL || t->status == TABLE_DELETING) {
        api_catalog_doubt(req);
        strata_err_set(err, ERR_RESOURCE_NOT_FOUND,
                       "Requested resource not found: ResourcArn: %s not found", arn);
        return NULL;
    }
    return t;
}

static int param_arn(api_request *req, const char **arn, api_verr *v, strata_err *err)
{
    size_t len;
    if (api_param_string(req, "ResourceArn", false, arn, &len, err) < 0)
        return -1;
    if (*arn == NULL)
        api_verr_add(v, NULL, "resourceArn", "Member must not be null");
    else if (len < 1)
        api_verr_add(v, *arn, "resourceArn", "Member must have length greater than or equal to 1");
    else if (len > 1283)
        api_verr_add(v, *arn, "resourceArn", "Member must have length less than or equal to 1283");
    return 0;
}

static void answer_empty(api_request *req, const table_info *next)
{
    (void)next;
    api_respond_raw(req, "{}", 2);
}

static void tag_resource_now(api_request *req)
{
    strata_err err;
    api_verr v;
    api_verr_init(&v);
    const char *arn;
    json_t *tags;
    if (param_arn(req, &arn, &v, &err) < 0 || api_param_array(req, "Tags", &tags, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    if (tags == NULL)
        api_verr_add(&v, NULL, "tags", "Member must not be null");
    if (check_tags(tags, &v, &err) < 0 || api_verr_finish(&v, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    const table_info *t = table_from_arn(req, arn, &err);
    if (t == NULL) {
        change_fail(req, &err);
        return;
    }
    if (json_array_size(tags) == 0) {
        strata_err_set(&err, ERR_VALIDATION, "Atleast one Tag needs to be provided as Input.");
        change_fail(req, &err);
        return;
    }
    if (check_tag_prefixes(tags, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    table_info next;
    if (catalog_table_copy(t, &next, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    if (apply_tags(&next, tags, &err) < 0) {
        catalog_table_free(&next);
        change_fail(req, &err);
        return;
    }
    submit_change(req, &next, false, answer_empty);
}

void api_tag_resource(api_request *req)
{
    serial_run(req, tag_resource_now);
}

static void untag_resource_now(api_request *req)
{
    strata_err err;
    api_verr v;
    api_verr_init(&v);
    const char *arn;
    json_t *keys;
    if (param_arn(req, &arn, &v, &err) < 0 || api_param_array(req, "TagKeys", &keys, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    if (keys == NULL)
        api_verr_add(&v, NULL, "tagKeys", "Member must not be null");
    for (size_t i = 0; keys != NULL && i < json_array_size(keys); i++) {
        json_t *k = json_array_get(keys, i);
        if (!json_is_string(k)) {
            api_wrong_type(k, "String", &err);
            change_fail(req, &err);
            return;
        }
    }
    if (api_verr_finish(&v, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    const table_info *t = table_from_arn(req, arn, &err);
    if (t == NULL) {
        change_fail(req, &err);
        return;
    }
    if (json_array_size(keys) == 0) {
        strata_err_set(&err, ERR_VALIDATION, "Atleast one Tag Key needs to be provided as Input.");
        change_fail(req, &err);
        return;
    }
    table_info next;
    if (catalog_table_copy(t, &next, &err) < 0) {
        change_fail(req, &err);
        return;
    }
    for (size_t i = 0; i < json_array_size(keys); i++)
        catalog_table_remove_tag(&next, json_string_value(json_array_get(keys, i)));
    submit_change(req, &next, false, answer_empty);
}

void api_untag_resource(api_request *req)
{
    serial_run(req, untag_resource_now);
}

void api_list_tags_of_resource(api_request *req)
{
    if (api_catalog_sync_first(req))
        return;
    strata_err err;
    api_verr v;
    api_verr_init(&v);
    const char *arn;
    if (param_arn(req, &arn, &v, &err) < 0 || api_verr_finish(&v, &err) < 0) {
        api_respond_err(req, &err);
        return;
    }
    const table_info *t = table_from_arn(req, arn, &err);
    if (t == NULL) {
        api_respond_err(req, &err);
        return;
    }
    json_t *tags = json_array();
    for (size_t i = 0; i < t->n_tags; i++)
        json_array_append_new(
            tags, json_pack("{s:s, s:s}", "Key", t->tags[i].key, "Value", t->tags[i].value));
    api_respond_json(req, json_pack("{s:o}", "Tags", tags));
}

/* ---- the rest ---- */

void api_describe_limits(api_request *req)
{
    api_respond_json(req, json_pack("{s:i, s:i, s:i, s:i}", "AccountMaxReadCapacityUnits", 80000,
                                    "AccountMaxWriteCapacityUnits", 80000,
                                    "TableMaxReadCapacityUnits", MAX_CAPACITY_UNITS,
                                    "TableMaxWriteCapacityUnits", MAX_CAPACITY_UNITS));
}

void api_describe_endpoints(api_request *req)
{
    api_respond_json(req, json_pack("{s:[{s:s, s:i}]}", "Endpoints", "Address",
                                    api_server_endpoint(req->srv), "CachePeriodInMinutes", 1440));
}

void api_describe_time_to_live(api_request *req)
{
    if (api_catalog_sync_first(req))
        return;
    strata_err err;
    const char *name;
    size_t len;
    if (api_param_table_name(req, &name, &len, &err) < 0) {
        api_respond_err(req, &err);
        return;
    }
    if (api_table(req, name, len, &err) == NULL) {
        api_respond_err(req, &err);
        return;
    }
    api_respond_json(
        req, json_pack("{s:{s:s}}", "TimeToLiveDescription", "TimeToLiveStatus", "DISABLED"));
}
