#ifndef STRATA_NODE_API_INTERNAL_H
#define STRATA_NODE_API_INTERNAL_H
/*
 * Shared by every node/api_*.c: the request context of one DynamoDB API call and the
 * helpers to read its parameters and answer it.
 *
 * Life of a request (node/api.c): the HTTP layer hands over POST /; api.c checks the
 * auth header, content type and X-Amz-Target, parses the body as a JSON object
 * (SerializationException otherwise), builds an api_request and calls the operation's
 * handler. The handler validates, calls the router (cluster/router.h) and, now or from
 * a router callback, answers exactly ONCE with api_respond_json/_raw/_error/_err. The
 * answer frees the request (its arena and body): touch nothing of it afterwards.
 *
 * Handlers are asynchronous: keep the api_request pointer in your callback context; the
 * request lives until it is answered. Keep table ids, not table_info pointers, across
 * router callbacks (a catalog change may free them); look the table up again with
 * api_table_by_id().
 *
 * Validation messages follow DynamoDB exactly. The generic constraint form is
 *   1 validation error detected: Value 'x' at 'tableName' failed to satisfy constraint:
 *   Member must have length greater than or equal to 3
 * and several are joined as "N validation errors detected: A; B". Collect them with
 * api_verr, which formats that for you.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/catalog.h"
#include "cluster/router.h"
#include "storage/base/arena.h"
#include "storage/base/err.h"

typedef struct http_request http_request; /* node/http/http.h */

/* The node's API state (one per stratad). */
typedef struct api_server api_server;

typedef struct api_request {
    api_server *srv;
    router *router; /* the partition-operation interface */
    http_request *http;
    arena *arena;        /* request-scoped memory, freed when answered */
    json_t *body;        /* the request's JSON object; owned by the request */
    const char *op;      /* operation name, e.g. "PutItem" (NUL-terminated) */
    char request_id[53]; /* x-amzn-RequestId (52 characters) */
    uint64_t start_ns;   /* monotonic, when the request arrived */
    bool answered;       /* set by the respond functions (debug check) */
    bool heavy;          /* holds one of the heavy operations' places (api.c, admit) */
    void (*run)(struct api_request *req); /* the operation */
    struct api_request *queue_next;       /* waiting for a heavy operation's place */
    /* The error about to be answered rests on this node's catalog, which may lag
     * (api_catalog_doubt), and whether the catalog was brought up to date for this
     * request already. */
    bool catalog_doubt;
    bool catalog_synced;
} api_request;

/* ---- Answering (each frees the request) ---- */

/* 200 with `obj` as the body (the reference is stolen: do not json_decref it). */
void api_respond_json(api_request *req, json_t *obj);
/* 200 with a ready JSON text (for example from ddbjson's fast writer); copied. */
void api_respond_raw(api_request *req, const char *json, size_t len);
/* An error answer: status and __type from the code (api_error_status/_type), body
 * {"__type":"...","message":"..."}. Internal codes (ERR_IO, ERR_CORRUPT, ERR_NOMEM,
 * ERR_NOT_FOUND, ERR_INTERNAL) answer 500 InternalServerError; ERR_UNAVAILABLE and
 * ERR_BUSY answer 503 ServiceUnavailable. */
void api_respond_error(api_request *req, strata_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void api_respond_err(api_request *req, const strata_err *err);
/* An error answer with extra top-level members (e.g. "Item" for a failed condition
 * with ReturnValuesOnConditionCheckFailure, CancellationReasons); `extra` is stolen,
 * may be NULL. */
void api_respond_err_with(api_request *req, const strata_err *err, json_t *extra);

/*
 * Notes that the error about to be answered rests on this node's catalog: a table the
 * request names is missing (or not ACTIVE) here, a key does not match the table's
 * schema as known here, CreateTable finds the name taken here, or the router reports the
 * table dropped under a read or write it did not apply. In a cluster that catalog may lag
 * the meta group (router.h, router_catalog_may_lag), by a moment: the table may have
 * been created, or deleted and created again with another key, through another node.
 * The error is then not sent at once: the catalog is brought up to date
 * (router_sync_catalog) and the request runs again from the start, once, and answers
 * what it finds then. So a table created through one node is never reported missing (or
 * its old self used) by another after its creator answered. Call it only before the
 * operation started any work it cannot repeat.
 */
void api_catalog_doubt(api_request *req);
/*
 * For the operations whose whole answer is the catalog (ListTables, DescribeTable,
 * ListTagsOfResource, DescribeTimeToLive): brings it up to date first, in a cluster, and
 * runs the request again then. True when it did so (the caller returns at once); false
 * on one node or on the second run. So a table created, changed or deleted through
 * another node shows here as its creator answered.
 */
bool api_catalog_sync_first(api_request *req);

/* HTTP status and __type string for a code, e.g. 400 and
 * "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException". */
int api_error_status(strata_code code);
const char *api_error_type(strata_code code);

/* ---- Validation errors in DynamoDB's format ---- */

/* At most this many are spelled out, more are only counted; the whole message is bounded
 * by STRATA_ERR_MSG_MAX (512 bytes), so a long list is cut short. */
#define API_VERR_MAX 8

typedef struct {
    int count;
    size_t len;
    char msg[STRATA_ERR_MSG_MAX];
} api_verr;

void api_verr_init(api_verr *v);
/* Adds one constraint failure; `value` may be NULL (formatted as "null"):
 *   Value '<value>' at '<member>' failed to satisfy constraint: <constraint> */
void api_verr_add(api_verr *v, const char *value, const char *member, const char *constraint);
/* Adds a failure with a value printed from JSON (strings raw, others as JSON text). */
void api_verr_add_json(api_verr *v, const json_t *value, const char *member,
                       const char *constraint);
/* 0 if nothing was added; else fills err (ERR_VALIDATION, "N validation error(s)
 * detected: ...") and returns -1. */
int api_verr_finish(const api_verr *v, strata_err *err);

/* SerializationException for a JSON value of the wrong type where a `want` ("String",
 * "Integer", "Boolean", "List", "Map", ...) is expected, with DynamoDB's message
 * ("NUMBER_VALUE cannot be converted to String"). Always returns -1. */
int api_wrong_type(const json_t *v, const char *want, strata_err *err);

/* ---- Typed parameters (all return 0/-1; -1 means `err` is filled) ---- */

/* A string member (JSON null counts as absent). Absent: *out = NULL, and if `required`
 * -1 with "1 validation error detected: Value null at 'tableName' failed to satisfy
 * constraint: Member must not be null" (member = name with a lower-case first letter).
 * A value of the wrong JSON type is a SerializationException (as DynamoDB answers).
 * *out points into req->body: valid until the request is answered. */
int api_param_string(api_request *req, const char *name, bool required, const char **out,
                     size_t *len, strata_err *err);
/* An integer member in [min, max]; absent: *present = false. Wrong JSON type:
 * SerializationException. Out of range: ValidationException with DynamoDB's message
 * ("Member must have value greater than or equal to 1") against member `member`. */
int api_param_int(api_request *req, const char *name, const char *member, int64_t min, int64_t max,
                  bool *present, int64_t *out, strata_err *err);
/* A boolean member; absent: *out = dflt. Wrong type: SerializationException. */
int api_param_bool(api_request *req, const char *name, bool dflt, bool *out, strata_err *err);
/* A string member that must be one of `allowed` (NULL-terminated list); absent: *out =
 * dflt. Otherwise ValidationException "Value 'X' at 'member' failed to satisfy
 * constraint: Member must satisfy enum value set: [A, B]". *out is the index. */
int api_param_enum(api_request *req, const char *name, const char *member,
                   const char *const *allowed, int dflt, int *out, strata_err *err);
/* An object / array member; absent: NULL. Wrong type: SerializationException. */
int api_param_object(api_request *req, const char *name, json_t **out, strata_err *err);
int api_param_array(api_request *req, const char *name, json_t **out, strata_err *err);

/* The TableName parameter: required, 3..255 of [a-zA-Z0-9_.-]
 * (member name "tableName" in messages). */
int api_param_table_name(api_request *req, const char **name, size_t *len, strata_err *err);
/* Checks a table name taken from elsewhere (e.g. a key of RequestItems), naming
 * `member` in the message; adds to `v`. */
void api_check_table_name(api_verr *v, const char *name, size_t len, const char *member);

/* ---- Tables ---- */

/* The ACTIVE (or UPDATING) table `name`; NULL with ResourceNotFoundException
 * "Requested resource not found: Table: <name> not found" otherwise. */
const table_info *api_table(api_request *req, const char *name, size_t len, strata_err *err);
/* The table with this id, or NULL (ResourceNotFoundException) if it went away. */
const table_info *api_table_by_id(api_request *req, uint32_t table_id, const char *name,
                                  strata_err *err);

/* ---- Serialized catalog changes (node/api_table.c) ----
 * Table changes run one at a time: each reads the catalog, builds the next state of one
 * table and waits for the router to make it durable; the next change starts after that,
 * so read-modify-write changes never lose each other's effect. */
typedef struct api_deferred {
    struct api_deferred *next;
    api_request *req;
    void (*fn)(api_request *req);
} api_deferred;

typedef struct {
    bool busy;
    void (*running)(api_request *req); /* the change being made, to make it again */
    unsigned attempts;                 /* times it was refused (the table changed first) */
    api_deferred *head, *tail;
} api_serial;

api_serial *api_server_serial(api_server *s);

/* ---- Authentication ---- */

/* Checks the shape of a SigV4 Authorization header (not the signature): it must start
 * with the algorithm AWS4-HMAC-SHA256 and carry Credential=, Signature= and
 * SignedHeaders=, and the request must have an X-Amz-Date or Date header (`has_date`).
 * 0 if so; else -1 with DynamoDB's IncompleteSignatureException message in `msg` (at
 * most cap - 1 bytes, cut short if the header is long), e.g.
 *   Authorization header requires 'Signature' parameter. Authorization header requires
 *   'SignedHeaders' parameter. Authorization=AWS4-HMAC-SHA256 Credential=... */
int api_check_authorization(const char *auth, bool has_date, char *msg, size_t cap);

/* ---- Misc ---- */

/* Wall-clock now in milliseconds since the epoch (commands carry it, see router.h). */
uint64_t api_now_ms(void);
/* Region of this node ("us-east-1" by default), for ARNs. */
const char *api_region(const api_request *req);
/* Partitions of a new table (stratad --initial-partitions). */
int api_server_initial_partitions(const api_server *s);
/* host:port clients reach this node at (DescribeEndpoints). */
const char *api_server_endpoint(const api_server *s);

/* node/api_metrics.c: answers GET /metrics (Prometheus text: the capacity metrics named
 * after DynamoDB's CloudWatch metrics, cluster/capacity.h) and GET
 * /admin/table-stats/<TableName> (capacity_table_json; 404 for an unknown table) and
 * returns true; false (nothing answered) for any other path. */
struct http_request;
bool api_serve_metrics(struct http_request *http, router *r);

/* ---- Operation handlers (dispatch table in api.c) ----
 * node/api_table.c (engineer "api"): */
void api_create_table(api_request *req);
void api_delete_table(api_request *req);
void api_describe_table(api_request *req);
void api_list_tables(api_request *req);
void api_update_table(api_request *req);
void api_tag_resource(api_request *req);
void api_untag_resource(api_request *req);
void api_list_tags_of_resource(api_request *req);
void api_describe_limits(api_request *req);
void api_describe_endpoints(api_request *req);
void api_describe_time_to_live(api_request *req);
/* node/api_item.c (engineer "items"): */
void api_put_item(api_request *req);
void api_get_item(api_request *req);
void api_update_item(api_request *req);
void api_delete_item(api_request *req);
/* node/api_query.c (engineer "items"): */
void api_query(api_request *req);
void api_scan(api_request *req);
/* node/api_batch.c (engineer "items"): */
void api_batch_get_item(api_request *req);
void api_batch_write_item(api_request *req);

#endif
