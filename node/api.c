/*
 * api.c: HTTP -> DynamoDB operation dispatch, answers and error shapes, and the
 * parameter helpers every node/api_*.c uses (node/api_internal.h).
 *
 * Order of the checks on POST /, as DynamoDB does them: the content type, the body's JSON
 * syntax, the operation (X-Amz-Target), authentication, a body that is a JSON object,
 * then the operation's own validation.
 */
#include "node/api.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>
#include <xxhash.h>

#include "node/api_internal.h"
#include "storage/data/json.h"

#define TARGET_PREFIX "DynamoDB_20120810."
#define CONTENT_TYPE  "application/x-amz-json-1.0"

struct api_server {
    uv_loop_t *loop;
    router *router;
    int initial_partitions;
    char region[64];
    char endpoint[128];
    uint64_t request_seq;
    uint8_t request_salt[8];
    uint64_t inflight;
    int log_level;
    api_serial serial;
    /* Admission of the operations that read or write many items (api_op.heavy): at most
     * HEAVY_RUNNING run at once, the next HEAVY_QUEUED wait in arrival order, more are
     * refused (503, which the SDKs retry with backoff). One loop serves every request, so
     * without a bound a burst of Scans (or clients that sent them and left) keeps it busy
     * for all the others; queued requests whose client has gone are dropped unrun. */
    unsigned heavy_running, heavy_queued;
    api_request *queue_head, *queue_tail;
    bool pumping;
};

#define HEAVY_RUNNING 16
#define HEAVY_QUEUED  1024

api_serial *api_server_serial(api_server *s)
{
    return &s->serial;
}

typedef struct {
    const char *name;
    void (*fn)(api_request *req);
    bool heavy; /* reads or writes many items: admitted in bounded numbers (see above) */
} api_op;

static const api_op ops[] = {
    {"BatchGetItem", api_batch_get_item, true},
    {"BatchWriteItem", api_batch_write_item, true},
    {"CreateTable", api_create_table},
    {"DeleteItem", api_delete_item},
    {"DeleteTable", api_delete_table},
    {"DescribeEndpoints", api_describe_endpoints},
    {"DescribeLimits", api_describe_limits},
    {"DescribeTable", api_describe_table},
    {"DescribeTimeToLive", api_describe_time_to_live},
    {"GetItem", api_get_item},
    {"ListTables", api_list_tables},
    {"ListTagsOfResource", api_list_tags_of_resource},
    {"PutItem", api_put_item},
    {"Query", api_query, true},
    {"Scan", api_scan, true},
    {"TagResource", api_tag_resource},
    {"UntagResource", api_untag_resource},
    {"UpdateItem", api_update_item},
    {"UpdateTable", api_update_table},
};

/* POST /admin/node-state {"node": N, "state": "DRAINING" | "REMOVED" | "ACTIVE"}: an
 * operator's command on the cluster map (router_node_state). Answers {} once this node's
 * map holds the change. */
static void admin_state_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    api_request *req = ctx;
    (void)res;
    (void)len;
    if (err != NULL)
        api_respond_err(req, err);
    else
        api_respond_json(req, json_object());
}

static void admin_node_state(api_request *req)
{
    json_t *node = json_object_get(req->body, "node");
    const char *state = json_string_value(json_object_get(req->body, "state"));
    strata_err err;
    if (!json_is_integer(node) || json_integer_value(node) <= 0 || state == NULL) {
        api_respond_error(req, ERR_VALIDATION, "expected {\"node\": id, \"state\": name}");
        return;
    }
    if (router_node_state(req->router, (uint64_t)json_integer_value(node), state, admin_state_done,
                          req, &err) < 0)
        api_respond_err(req, &err);
}

static const api_op admin_node_state_op = {"AdminNodeState", admin_node_state};

/* POST /admin/rebalance-leaders {}: an operator's leader rebalance
 * (router_rebalance_leaders). Answers {"moved": N}, N leader hints changed, once this
 * node's map holds them; partition leaders follow within seconds. */
static void admin_rebalance_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    api_request *req = ctx;
    if (err != NULL) {
        api_respond_err(req, err);
        return;
    }
    char text[32];
    size_t n = len < sizeof text - 1 ? len : sizeof text - 1;
    memcpy(text, res != NULL ? (const char *)res : "", res != NULL ? n : 0);
    text[res != NULL ? n : 0] = '\0';
    json_t *o = json_object();
    json_object_set_new(o, "moved", json_integer(strtoll(text, NULL, 10)));
    api_respond_json(req, o);
}

static void admin_rebalance_leaders(api_request *req)
{
    strata_err err;
    if (router_rebalance_leaders(req->router, admin_rebalance_done, req, &err) < 0)
        api_respond_err(req, &err);
}

static const api_op admin_rebalance_op = {"AdminRebalanceLeaders", admin_rebalance_leaders};

/* POST /admin/split {"partition": P, "hash": "HEX"} (hash optional: the middle of the
 * range): splits a partition of the cluster map (router_split). Answers
 * {"partition", "child", "split_hash"} once this node's map holds the split. */
static void admin_split_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    api_request *req = ctx;
    json_t *j = err == NULL ? json_loadb((const char *)res, len, 0, NULL) : NULL;
    if (err != NULL)
        api_respond_err(req, err);
    else
        api_respond_json(req, j != NULL ? j : json_object());
}

static void admin_split(api_request *req)
{
    json_t *part = json_object_get(req->body, "partition");
    json_t *hash = json_object_get(req->body, "hash");
    const char *hex = json_string_value(hash);
    /* Hex digits only: strtoull alone would also take a sign or leading spaces. */
    size_t hl = hex != NULL ? strlen(hex) : 0;
    bool hex_ok = hl >= 1 && hl <= 16 && strspn(hex, "0123456789abcdefABCDEF") == hl;
    uint64_t h = hex_ok ? strtoull(hex, NULL, 16) : 0;
    strata_err err;
    if (!json_is_integer(part) || json_integer_value(part) <= 0 || (hash != NULL && !hex_ok)) {
        api_respond_error(req, ERR_VALIDATION,
                          "expected {\"partition\": id, \"hash\": \"16 hex digits\" (optional)}");
        return;
    }
    if (router_split(req->router, (uint64_t)json_integer_value(part), hash != NULL, h,
                     admin_split_done, req, &err) < 0)
        api_respond_err(req, &err);
}

static const api_op admin_split_op = {"AdminSplit", admin_split};

static const api_op *find_op(const char *name)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].name, name) == 0)
            return &ops[i];
    return NULL;
}

/* ---- server ---- */

api_server *api_server_new(const api_config *cfg, strata_err *err)
{
    api_server *s = calloc(1, sizeof *s);
    if (s == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->loop = cfg->loop;
    s->router = cfg->router;
    s->initial_partitions = cfg->initial_partitions > 0 ? cfg->initial_partitions : 4;
    s->log_level = cfg->log_level;
    snprintf(s->region, sizeof s->region, "%s", cfg->region ? cfg->region : "us-east-1");
    snprintf(s->endpoint, sizeof s->endpoint, "%s", cfg->endpoint ? cfg->endpoint : "localhost");
    if (RAND_bytes(s->request_salt, sizeof s->request_salt) != 1) {
        uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)s;
        memcpy(s->request_salt, &t, sizeof t);
    }
    return s;
}

void api_server_free(api_server *s)
{
    /* Queued requests never ran: answer them (their connections are closed by now, so
     * that only frees them). */
    s->pumping = true;
    while (s->queue_head != NULL) {
        api_request *req = s->queue_head;
        s->queue_head = req->queue_next;
        api_respond_error(req, ERR_UNAVAILABLE, "The server is shutting down");
    }
    free(s);
}

void api_server_set_endpoint(api_server *s, const char *endpoint)
{
    snprintf(s->endpoint, sizeof s->endpoint, "%s", endpoint);
}

uint64_t api_inflight(const api_server *s)
{
    return s->inflight;
}

int api_server_initial_partitions(const api_server *s)
{
    return s->initial_partitions;
}

const char *api_server_endpoint(const api_server *s)
{
    return s->endpoint;
}

/* A 52-character id in DynamoDB's alphabet: 39 characters mixed from a per-process
 * salt and the sequence number, then the sequence number itself, so ids are unique for
 * the life of the process and unlikely to repeat across restarts. */
static void make_request_id(api_server *s, char out[53])
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t seq = ++s->request_seq;
    uint8_t in[16];
    memcpy(in, s->request_salt, 8);
    memcpy(in + 8, &seq, 8);
    for (int part = 0; part < 3; part++) {
        in[0] ^= (uint8_t)(part + 1);
        uint64_t h = XXH3_64bits(in, sizeof in);
        for (int i = 0; i < 13; i++) {
            out[part * 13 + i] = alphabet[h % 36];
            h /= 36;
        }
    }
    uint64_t n = seq;
    for (int i = 51; i >= 39; i--) {
        out[i] = alphabet[n % 36];
        n /= 36;
    }
    out[52] = '\0';
}

/* ---- answers ---- */

static void send_answer(http_request *http, const char *request_id, int status, const char *body,
                        size_t len)
{
    char crc[U64_DECIMAL_MAX];
    u64_decimal(http_crc32(body, len), crc);
    http_header h[3] = {
        {"Content-Type", CONTENT_TYPE},
        {"x-amzn-RequestId", request_id},
        {"x-amz-crc32", crc},
    };
    http_respond(http, status, h, 3, body, len);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* At --log-level debug, one line per answered request. */
static void log_request(const api_request *req, int status, const char *error)
{
    if (req->srv->log_level < 3)
        return;
    fprintf(stderr, "stratad: %s %s %d %s %.3f ms\n", req->request_id, req->op, status,
            error ? error : "", (double)(now_ns() - req->start_ns) / 1e6);
}

static void pump_heavy(api_server *s);

static void finish(api_request *req)
{
    assert(!req->answered);
    req->answered = true;
    if (req->body != NULL)
        json_decref(req->body);
    req->body = NULL;
    req->srv->inflight--;
    if (req->heavy) {
        req->srv->heavy_running--;
        pump_heavy(req->srv);
    }
}

/* Starts queued heavy requests while there is room. Answers can come back inside
 * req->run (validation errors) and call this again: the outer call does the work. */
static void pump_heavy(api_server *s)
{
    if (s->pumping)
        return;
    s->pumping = true;
    while (s->heavy_running < HEAVY_RUNNING && s->queue_head != NULL) {
        api_request *req = s->queue_head;
        s->queue_head = req->queue_next;
        if (s->queue_head == NULL)
            s->queue_tail = NULL;
        s->heavy_queued--;
        s->heavy_running++;
        req->heavy = true;
        if (http_request_disconnected(req->http))
            api_respond_error(req, ERR_UNAVAILABLE, "The client has gone"); /* just freed */
        else
            req->run(req);
    }
    s->pumping = false;
}

/* Runs a request now, or queues it behind the heavy ones running, or refuses it. */
static void admit(api_server *s, api_request *req, const api_op *op)
{
    req->run = op->fn;
    if (!op->heavy) {
        op->fn(req);
        return;
    }
    if (s->heavy_running < HEAVY_RUNNING && s->queue_head == NULL) {
        s->heavy_running++;
        req->heavy = true;
        op->fn(req);
        return;
    }
    if (s->heavy_queued >= HEAVY_QUEUED) {
        api_respond_error(req, ERR_UNAVAILABLE,
                          "Too many requests are waiting on this node; retry with backoff");
        return;
    }
    if (s->queue_tail != NULL)
        s->queue_tail->queue_next = req;
    else
        s->queue_head = req;
    s->queue_tail = req;
    s->heavy_queued++;
}

void api_respond_raw(api_request *req, const char *json, size_t len)
{
    log_request(req, 200, NULL);
    finish(req);
    send_answer(req->http, req->request_id, 200, json, len);
}

void api_respond_json(api_request *req, json_t *obj)
{
    /* 13 significant digits: epoch seconds with milliseconds, capacity units. */
    char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(13));
    json_decref(obj);
    if (text == NULL) {
        api_respond_error(req, ERR_INTERNAL, "out of memory");
        return;
    }
    api_respond_raw(req, text, strlen(text));
    free(text);
}

int api_error_status(strata_code code)
{
    switch (code) {
    case ERR_INTERNAL:
    case ERR_IO:
    case ERR_CORRUPT:
    case ERR_NOMEM:
    case ERR_NOT_FOUND:
    case ERR_NEWER:
    case ERR_NONE:
    case ERR_CODE_COUNT:
        return 500;
    case ERR_UNAVAILABLE:
    case ERR_BUSY:
        return 503;
    default:
        return 400;
    }
}

const char *api_error_type(strata_code code)
{
    switch (code) {
    case ERR_VALIDATION:
        return "com.amazon.coral.validate#ValidationException";
    case ERR_SERIALIZATION:
        return "com.amazon.coral.service#SerializationException";
    case ERR_MISSING_AUTH:
        return "com.amazon.coral.service#MissingAuthenticationTokenException";
    case ERR_UNRECOGNIZED_CLIENT:
        return "com.amazon.coral.service#UnrecognizedClientException";
    case ERR_INCOMPLETE_SIGNATURE:
        return "com.amazon.coral.service#IncompleteSignatureException";
    case ERR_ACCESS_DENIED:
        return "com.amazon.coral.service#AccessDeniedException";
    case ERR_UNKNOWN_OPERATION:
        return "com.amazon.coral.service#UnknownOperationException";
    case ERR_UNAVAILABLE:
    case ERR_BUSY:
        return "com.amazonaws.dynamodb.v20120810#ServiceUnavailable";
    case ERR_CONDITIONAL_CHECK:
        return "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException";
    case ERR_RESOURCE_NOT_FOUND:
        return "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException";
    case ERR_RESOURCE_IN_USE:
        return "com.amazonaws.dynamodb.v20120810#ResourceInUseException";
    case ERR_LIMIT_EXCEEDED:
        return "com.amazonaws.dynamodb.v20120810#LimitExceededException";
    case ERR_THROUGHPUT_EXCEEDED:
        return "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException";
    case ERR_REQUEST_LIMIT:
        return "com.amazonaws.dynamodb.v20120810#RequestLimitExceeded";
    case ERR_THROTTLING:
        return "com.amazonaws.dynamodb.v20120810#ThrottlingException";
    case ERR_ITEM_COLLECTION_SIZE:
        return "com.amazonaws.dynamodb.v20120810#ItemCollectionSizeLimitExceededException";
    case ERR_TRANSACTION_CANCELED:
        return "com.amazonaws.dynamodb.v20120810#TransactionCanceledException";
    case ERR_TRANSACTION_CONFLICT:
        return "com.amazonaws.dynamodb.v20120810#TransactionConflictException";
    case ERR_TRANSACTION_IN_PROGRESS:
        return "com.amazonaws.dynamodb.v20120810#TransactionInProgressException";
    case ERR_IDEMPOTENT_MISMATCH:
        return "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException";
    default:
        return "com.amazonaws.dynamodb.v20120810#InternalServerError";
    }
}

static bool is_internal(strata_code code)
{
    return api_error_status(code) == 500;
}

/* The error body. Coral-level errors without a message carry only __type, as DynamoDB
 * sends them. */
static char *error_body(strata_code code, const char *msg, json_t *extra)
{
    json_t *o = extra != NULL ? extra : json_object();
    if (o == NULL)
        return NULL;
    json_object_set_new(o, "__type", json_string(api_error_type(code)));
    if (msg != NULL && msg[0] != '\0') {
        json_t *m = json_string(msg);
        if (m == NULL) /* not UTF-8: keep the answer valid JSON */
            m = json_string("Invalid request");
        json_object_set_new(o, "message", m);
    }
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return text;
}

static void send_error(http_request *http, const char *request_id, strata_code code,
                       const char *msg, json_t *extra)
{
    char *text = error_body(code, msg, extra);
    if (text == NULL) {
        static const char fallback[] =
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#InternalServerError\"}";
        send_answer(http, request_id, 500, fallback, sizeof fallback - 1);
        return;
    }
    send_answer(http, request_id, api_error_status(code), text, strlen(text));
    free(text);
}

void api_catalog_doubt(api_request *req)
{
    req->catalog_doubt = true;
}

static void run_after_sync(void *ctx)
{
    api_request *req = ctx;
    req->run(req);
}

bool api_catalog_sync_first(api_request *req)
{
    if (req->catalog_synced || !router_catalog_may_lag(req->router) || req->run == NULL)
        return false;
    req->catalog_synced = true;
    router_sync_catalog(req->router, run_after_sync, req);
    return true;
}

/* An error that rests on this node's catalog, before the catalog was brought up to date
 * for this request: true when the request will run again afterwards instead of being
 * answered now. */
static bool retry_after_catalog_sync(api_request *req, const strata_err *err, json_t *extra)
{
    if (err == NULL || !req->catalog_doubt || req->catalog_synced ||
        !router_catalog_may_lag(req->router) || req->run == NULL)
        return false;
    if (extra != NULL)
        json_decref(extra);
    req->catalog_synced = true;
    req->catalog_doubt = false;
    router_sync_catalog(req->router, run_after_sync, req);
    return true;
}

void api_respond_err_with(api_request *req, const strata_err *err, json_t *extra)
{
    if (retry_after_catalog_sync(req, err, extra))
        return;
    strata_code code = err != NULL ? err->code : ERR_INTERNAL;
    const char *msg = err != NULL ? err->msg : "";
    if (is_internal(code)) {
        fprintf(stderr, "stratad: %s %s: internal error %s: %s\n", req->request_id, req->op,
                strata_code_name(code), msg);
        code = ERR_INTERNAL;
        msg = "Internal server error";
    } else if (code == ERR_BUSY) {
        msg = "The server is busy; retry the request";
    }
    log_request(req, api_error_status(code), strata_code_name(code));
    finish(req);
    send_error(req->http, req->request_id, code, msg, extra);
}

void api_respond_err(api_request *req, const strata_err *err)
{
    api_respond_err_with(req, err, NULL);
}

void api_respond_error(api_request *req, strata_code code, const char *fmt, ...)
{
    strata_err err;
    va_list ap;
    va_start(ap, fmt);
    strata_err_setv(&err, code, fmt, ap);
    va_end(ap);
    api_respond_err(req, &err);
}

/* ---- dispatch ---- */

static void health(http_request *http, api_server *s)
{
    char id[53];
    make_request_id(s, id);
    static const char ok[] = "{\"status\":\"ok\"}";
    send_answer(http, id, 200, ok, sizeof ok - 1);
}

/* GET /admin/cluster: the node's view of the cluster (router_status_json); GET
 * /admin/digests: digests of its replicas (router_digests_json). */
static void cluster_status(http_request *http, api_server *s, bool digests)
{
    char id[53];
    make_request_id(s, id);
    buf b;
    buf_init(&b, 0);
    if (digests)
        router_digests_json(s->router, &b);
    else
        router_status_json(s->router, &b);
    if (b.failed)
        send_error(http, id, ERR_NOMEM, "out of memory", NULL);
    else
        send_answer(http, id, 200, (const char *)b.data, b.len);
    buf_free(&b);
}

/*
 * DynamoDB strings may hold U+0000, so bodies are parsed with STRATA_JSON_ALLOW_NUL. But
 * the other strings of a request (names, expressions, tags) are read as C strings, where
 * a NUL would cut them short unseen: a NUL is let through only where DynamoDB JSON carries
 * string data, a value under "S" or an element of an array under "SS".
 */
static bool nul_outside_string_data(json_t *j, const char *key, bool in_ss)
{
    const char *k;
    json_t *v;
    size_t i;
    switch (json_typeof(j)) {
    case JSON_STRING:
        return !in_ss && (key == NULL || strcmp(key, "S") != 0) &&
               memchr(json_string_value(j), '\0', json_string_length(j)) != NULL;
    case JSON_OBJECT:
        json_object_foreach(j, k, v)
        {
            if (nul_outside_string_data(v, k, false))
                return true;
        }
        return false;
    case JSON_ARRAY:
        json_array_foreach(j, i, v)
        {
            if (nul_outside_string_data(v, NULL, key != NULL && strcmp(key, "SS") == 0))
                return true;
        }
        return false;
    default:
        return false;
    }
}

static bool content_type_ok(const char *ct)
{
    if (ct == NULL)
        return true; /* DynamoDB accepts a body without a content type */
    size_t n = strcspn(ct, ";");
    while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    return (n == strlen(CONTENT_TYPE) && strncasecmp(ct, CONTENT_TYPE, n) == 0) ||
           (n == 26 && strncasecmp(ct, "application/x-amz-json-1.1", n) == 0) ||
           (n == 16 && strncasecmp(ct, "application/json", n) == 0);
}

/* One parameter name of a SigV4 Authorization header, for the missing-parameter message. */
typedef struct {
    const char *name;
    size_t len;
} sigv4_param;

static const sigv4_param sigv4_params[] = {
    /* DynamoDB names the missing ones in this order. */
    {"Credential", 10},
    {"Signature", 9},
    {"SignedHeaders", 13},
};

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"

/* Bit i set when sigv4_params[i] appears as a "Name=" token. Tokens are separated by
 * commas and blanks, as in "AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=h, Signature=s";
 * the first token is the algorithm. One pass, no allocation: this runs on every request. */
static unsigned sigv4_params_present(const char *auth)
{
    const char *p = auth + strcspn(auth, " \t,");
    unsigned seen = 0;
    while (*p != '\0') {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, " \t,");
        const char *eq = memchr(p, '=', n);
        if (eq != NULL) {
            size_t klen = (size_t)(eq - p);
            for (size_t i = 0; i < sizeof sigv4_params / sizeof sigv4_params[0]; i++)
                if (klen == sigv4_params[i].len && memcmp(p, sigv4_params[i].name, klen) == 0)
                    seen |= 1u << i;
        }
        p += n;
    }
    return seen;
}

int api_check_authorization(const char *auth, bool has_date, char *msg, size_t cap)
{
    assert(auth != NULL && cap > 0);
    size_t alg = strlen(SIGV4_ALGORITHM);
    bool sigv4 = strncmp(auth, SIGV4_ALGORITHM, alg) == 0 &&
                 (auth[alg] == ' ' || auth[alg] == '\t' || auth[alg] == '\0');
    /* Another scheme's parameters are not SigV4's: all of them are missing. */
    unsigned seen = sigv4 ? sigv4_params_present(auth) : 0;
    unsigned all = (1u << (sizeof sigv4_params / sizeof sigv4_params[0])) - 1;
    if (seen == all && has_date)
        return 0;
    size_t len = 0;
    msg[0] = '\0';
    for (size_t i = 0; i < sizeof sigv4_params / sizeof sigv4_params[0]; i++) {
        if (seen & (1u << i))
            continue;
        int n = snprintf(msg + len, cap - len, "Authorization header requires '%s' parameter. ",
                         sigv4_params[i].name);
        if (n < 0 || (size_t)n >= cap - len)
            return -1; /* cut short: msg stays NUL-terminated */
        len += (size_t)n;
    }
    if (!has_date) {
        int n = snprintf(msg + len, cap - len, "%s",
                         "Authorization header requires existence of either a 'X-Amz-Date' or "
                         "a 'Date' header. ");
        if (n < 0 || (size_t)n >= cap - len)
            return -1;
        len += (size_t)n;
    }
    snprintf(msg + len, cap - len, "Authorization=%s", auth);
    return -1;
}

void api_handle(http_request *http, void *data)
{
    api_server *s = data;
    const char *method = http_request_method(http);
    const char *path = http_request_path(http);
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        if (strcmp(path, "/") == 0) {
            health(http, s);
            return;
        }
        if (strcmp(path, "/admin/cluster") == 0 || strcmp(path, "/admin/digests") == 0) {
            cluster_status(http, s, strcmp(path, "/admin/digests") == 0);
            return;
        }
        if (api_serve_metrics(http, s->router)) /* /metrics, /admin/table-stats/NAME */
            return;
        char id[53];
        make_request_id(s, id);
        send_error(http, id, ERR_UNKNOWN_OPERATION, NULL, NULL);
        return;
    }
    char id[53];
    make_request_id(s, id);
    if (strcmp(method, "POST") != 0) {
        send_error(http, id, ERR_UNKNOWN_OPERATION, NULL, NULL);
        return;
    }
    size_t len;
    const uint8_t *body = http_request_body(http, &len);
    if (len > 0 && !content_type_ok(http_request_header(http, "Content-Type"))) {
        send_error(http, id, ERR_UNKNOWN_OPERATION, NULL, NULL);
        return;
    }
    json_t *obj = NULL;
    if (len > 0) {
        strata_err jerr;
        obj = strata_json_parse(body, len, STRATA_JSON_REJECT_DUPLICATES | STRATA_JSON_ALLOW_NUL,
                                &jerr);
        /* Only a body that spells "\u0000" can hold one (keys never do); most bodies
         * have no backslash at all, which memchr tells fastest. */
        if (obj != NULL && memchr(body, '\\', len) != NULL &&
            memmem(body, len, "\\u0000", 6) != NULL && nul_outside_string_data(obj, NULL, false)) {
            json_decref(obj);
            obj = NULL;
        }
        if (obj == NULL) {
            send_error(http, id, ERR_SERIALIZATION, NULL, NULL);
            return;
        }
    }
    const char *target = http_request_header(http, "X-Amz-Target");
    const api_op *op = NULL;
    /* Operators' API: no AWS signature (SigV4 comes later). */
    static const struct {
        const char *path;
        const api_op *op;
    } admin_ops[] = {
        {"/admin/node-state", &admin_node_state_op},
        {"/admin/rebalance-leaders", &admin_rebalance_op},
        {"/admin/split", &admin_split_op},
    };
    bool admin = false;
    for (size_t i = 0; i < sizeof admin_ops / sizeof admin_ops[0] && !admin; i++) {
        admin = strcmp(path, admin_ops[i].path) == 0;
        op = admin ? admin_ops[i].op : NULL;
    }
    if (!admin && target != NULL && strncmp(target, TARGET_PREFIX, strlen(TARGET_PREFIX)) == 0)
        op = find_op(target + strlen(TARGET_PREFIX));
    if (op == NULL) {
        json_decref(obj);
        send_error(http, id, ERR_UNKNOWN_OPERATION, NULL, NULL);
        return;
    }
    const char *auth = admin ? "admin" : http_request_header(http, "Authorization");
    if (auth == NULL || auth[0] == '\0') {
        json_decref(obj);
        send_error(http, id, ERR_MISSING_AUTH, "Request is missing Authentication Token", NULL);
        return;
    }
    bool has_date = admin || http_request_header(http, "X-Amz-Date") != NULL ||
                    http_request_header(http, "Date") != NULL;
    char auth_msg[STRATA_ERR_MSG_MAX];
    if (!admin && api_check_authorization(auth, has_date, auth_msg, sizeof auth_msg) < 0) {
        json_decref(obj);
        send_error(http, id, ERR_INCOMPLETE_SIGNATURE, auth_msg, NULL);
        return;
    }
    if (!router_ready(s->router)) {
        json_decref(obj);
        send_error(http, id, ERR_UNAVAILABLE,
                   "The node has not joined its cluster yet; retry shortly", NULL);
        return;
    }
    /* An empty body, or JSON that is not an object, cannot be the operation's input. */
    if (obj == NULL || !json_is_object(obj)) {
        json_decref(obj);
        send_error(http, id, ERR_SERIALIZATION, NULL, NULL);
        return;
    }
    arena *a = http_request_arena(http);
    api_request *req = arena_zalloc(a, sizeof *req);
    if (req == NULL) {
        json_decref(obj);
        send_error(http, id, ERR_INTERNAL, "Internal server error", NULL);
        return;
    }
    req->srv = s;
    req->router = s->router;
    req->http = http;
    req->arena = a;
    req->body = obj;
    req->op = op->name;
    memcpy(req->request_id, id, sizeof id);
    req->start_ns = now_ns();
    s->inflight++;
    admit(s, req, op);
}

/* ---- validation errors ---- */

void api_verr_init(api_verr *v)
{
    v->count = 0;
    v->len = 0;
    v->msg[0] = '\0';
}

static void verr_append(api_verr *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verr_append(api_verr *v, const char *fmt, ...)
{
    if (v->len >= sizeof v->msg - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v->msg + v->len, sizeof v->msg - v->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        v->len += (size_t)n < sizeof v->msg - v->len ? (size_t)n : sizeof v->msg - v->len - 1;
}

void api_verr_add(api_verr *v, const char *value, const char *member, const char *constraint)
{
    v->count++;
    if (v->count > API_VERR_MAX)
        return;
    if (v->count > 1)
        verr_append(v, "; ");
    if (value == NULL)
        verr_append(v, "Value null at '%s' failed to satisfy constraint: %s", member, constraint);
    else
        verr_append(v, "Value '%s' at '%s' failed to satisfy constraint: %s", value, member,
                    constraint);
}

void api_verr_add_json(api_verr *v, const json_t *value, const char *member, const char *constraint)
{
    if (value == NULL || json_is_null(value)) {
        api_verr_add(v, NULL, member, constraint);
        return;
    }
    if (json_is_string(value)) {
        api_verr_add(v, json_string_value(value), member, constraint);
        return;
    }
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    api_verr_add(v, text ? text : "", member, constraint);
    free(text);
}

int api_verr_finish(const api_verr *v, strata_err *err)
{
    if (v->count == 0)
        return 0;
    return strata_err_set(err, ERR_VALIDATION, "%d validation error%s detected: %s", v->count,
                          v->count == 1 ? "" : "s", v->msg);
}

/* ---- typed parameters ---- */

/* DynamoDB's SerializationException text for a JSON value of the wrong type. */
int api_wrong_type(const json_t *v, const char *want, strata_err *err)
{
    const char *got;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return strata_err_set(err, ERR_SERIALIZATION,
                              "Start of structure or map found where not expected.");
    case JSON_ARRAY:
        return strata_err_set(err, ERR_SERIALIZATION, "Start of list found where not expected");
    case JSON_STRING:
        got = "STRING_VALUE";
        break;
    case JSON_INTEGER:
    case JSON_REAL:
        got = "NUMBER_VALUE";
        break;
    case JSON_TRUE:
        got = "TRUE_VALUE";
        break;
    case JSON_FALSE:
        got = "FALSE_VALUE";
        break;
    default:
        got = "NULL_VALUE";
        break;
    }
    return strata_err_set(err, ERR_SERIALIZATION, "%s cannot be converted to %s", got, want);
}

/* A member, treating JSON null as absent (as DynamoDB does). */
static json_t *member(api_request *req, const char *name)
{
    json_t *v = json_object_get(req->body, name);
    return v == NULL || json_is_null(v) ? NULL : v;
}

int api_param_string(api_request *req, const char *name, bool required, const char **out,
                     size_t *len, strata_err *err)
{
    json_t *v = member(req, name);
    *out = NULL;
    if (len != NULL)
        *len = 0;
    if (v == NULL) {
        if (!required)
            return 0;
        /* Member names in messages start lower-case: TableName -> tableName. */
        char m[128];
        snprintf(m, sizeof m, "%s", name);
        if (m[0] >= 'A' && m[0] <= 'Z')
            m[0] = (char)(m[0] - 'A' + 'a');
        api_verr v1;
        api_verr_init(&v1);
        api_verr_add(&v1, NULL, m, "Member must not be null");
        return api_verr_finish(&v1, err);
    }
    if (!json_is_string(v))
        return api_wrong_type(v, "String", err);
    *out = json_string_value(v);
    if (len != NULL)
        *len = json_string_length(v);
    return 0;
}

int api_param_int(api_request *req, const char *name, const char *member_name, int64_t min,
                  int64_t max, bool *present, int64_t *out, strata_err *err)
{
    json_t *v = member(req, name);
    *present = false;
    if (v == NULL)
        return 0;
    if (!json_is_integer(v)) {
        if (json_is_real(v))
            return strata_err_set(err, ERR_SERIALIZATION,
                                  "NUMBER_VALUE cannot be converted to Integer");
        return api_wrong_type(v, "Integer", err);
    }
    int64_t n = json_integer_value(v);
    api_verr ve;
    api_verr_init(&ve);
    char val[32], c[96];
    snprintf(val, sizeof val, "%" PRId64, n);
    if (n < min) {
        snprintf(c, sizeof c, "Member must have value greater than or equal to %" PRId64, min);
        api_verr_add(&ve, val, member_name, c);
    } else if (n > max) {
        snprintf(c, sizeof c, "Member must have value less than or equal to %" PRId64, max);
        api_verr_add(&ve, val, member_name, c);
    }
    if (api_verr_finish(&ve, err) < 0)
        return -1;
    *present = true;
    *out = n;
    return 0;
}

int api_param_bool(api_request *req, const char *name, bool dflt, bool *out, strata_err *err)
{
    json_t *v = member(req, name);
    *out = dflt;
    if (v == NULL)
        return 0;
    if (!json_is_boolean(v))
        return api_wrong_type(v, "Boolean", err);
    *out = json_is_true(v);
    return 0;
}

int api_param_enum(api_request *req, const char *name, const char *member_name,
                   const char *const *allowed, int dflt, int *out, strata_err *err)
{
    const char *s;
    size_t len;
    *out = dflt;
    if (api_param_string(req, name, false, &s, &len, err) < 0)
        return -1;
    if (s == NULL)
        return 0;
    for (int i = 0; allowed[i] != NULL; i++) {
        if (strlen(allowed[i]) == len && memcmp(allowed[i], s, len) == 0) {
            *out = i;
            return 0;
        }
    }
    char c[256];
    size_t n = (size_t)snprintf(c, sizeof c, "Member must satisfy enum value set: [");
    for (int i = 0; allowed[i] != NULL && n < sizeof c; i++)
        n += (size_t)snprintf(c + n, sizeof c - n, "%s%s", i ? ", " : "", allowed[i]);
    if (n < sizeof c)
        snprintf(c + n, sizeof c - n, "]");
    api_verr ve;
    api_verr_init(&ve);
    api_verr_add(&ve, s, member_name, c);
    return api_verr_finish(&ve, err);
}

int api_param_object(api_request *req, const char *name, json_t **out, strata_err *err)
{
    json_t *v = member(req, name);
    *out = NULL;
    if (v == NULL)
        return 0;
    if (!json_is_object(v))
        return api_wrong_type(v, "Map", err);
    *out = v;
    return 0;
}

int api_param_array(api_request *req, const char *name, json_t **out, strata_err *err)
{
    json_t *v = member(req, name);
    *out = NULL;
    if (v == NULL)
        return 0;
    if (!json_is_array(v))
        return api_wrong_type(v, "List", err);
    *out = v;
    return 0;
}

void api_check_table_name(api_verr *v, const char *name, size_t len, const char *member_name)
{
    if (name == NULL) {
        api_verr_add(v, NULL, member_name, "Member must not be null");
        return;
    }
    /* DynamoDB lists the pattern before the lengths. */
    bool pattern_ok = len > 0;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-'))
            pattern_ok = false;
    }
    if (!pattern_ok)
        api_verr_add(v, name, member_name,
                     "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+");
    if (len < TABLE_NAME_MIN)
        api_verr_add(v, name, member_name, "Member must have length greater than or equal to 3");
    if (len > TABLE_NAME_MAX)
        api_verr_add(v, name, member_name, "Member must have length less than or equal to 255");
}

int api_param_table_name(api_request *req, const char **name, size_t *len, strata_err *err)
{
    if (api_param_string(req, "TableName", false, name, len, err) < 0)
        return -1;
    api_verr v;
    api_verr_init(&v);
    api_check_table_name(&v, *name, *len, "tableName");
    return api_verr_finish(&v, err);
}

/* ---- tables ---- */

const table_info *api_table(api_request *req, const char *name, size_t len, strata_err *err)
{
    const table_info *t = catalog_find(router_catalog(req->router), name, len);
    if (t == NULL || t->status == TABLE_DELETING || t->status == TABLE_CREATING) {
        api_catalog_doubt(req);
        strata_err_set(err, ERR_RESOURCE_NOT_FOUND,
                       "Requested resource not found: Table: %.*s not found", (int)len, name);
        return NULL;
    }
    return t;
}

const table_info *api_table_by_id(api_request *req, uint32_t table_id, const char *name,
                                  strata_err *err)
{
    const table_info *t = catalog_find_id(router_catalog(req->router), table_id);
    if (t == NULL || t->status == TABLE_DELETING) {
        strata_err_set(err, ERR_RESOURCE_NOT_FOUND,
                       "Requested resource not found: Table: %s not found", name ? name : "");
        return NULL;
    }
    return t;
}

/* ---- misc ---- */

uint64_t api_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *api_region(const api_request *req)
{
    return req->srv->region;
}
