#ifndef STRATA_NODE_API_ITEMS_H
#define STRATA_NODE_API_ITEMS_H
/*
 * Helpers shared by the item operations (node/api_item.c, api_query.c, api_batch.c;
 * engineer "items"). Defined in node/api_item.c. Everything allocates from the
 * request's arena.
 */
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/partition.h"
#include "node/api_internal.h"
#include "storage/expr/expr.h"

/* api_table() with the data plane's ResourceNotFoundException message, which is just
 * "Requested resource not found" (DescribeTable's names the table). */
const table_info *items_table(api_request *req, const char *name, size_t len, strata_err *err);

/* Counts one request refused as a whole for capacity (the ThrottledRequests metric,
 * cluster/capacity.h) when `err` is ERR_THROUGHPUT_EXCEEDED; nothing otherwise. */
void items_note_throttled(api_request *req, uint32_t table_id, const strata_err *err);

/* ReturnConsumedCapacity */
typedef enum { ITEMS_RCC_INDEXES = 0, ITEMS_RCC_TOTAL = 1, ITEMS_RCC_NONE = 2 } items_rcc;

int items_param_rcc(api_request *req, items_rcc *out, strata_err *err);

/* {"TableName": t, "CapacityUnits": u} (+ "Table": {"CapacityUnits": u} for INDEXES);
 * NULL for NONE. */
json_t *items_consumed_json(items_rcc mode, const char *table, double units);

/* Validates a key or an item against the table's key schema with DynamoDB's messages.
 * exact = true: `m` is a Key (exactly the key attributes, else "The provided key element
 * does not match the schema"); false: `m` is an Item that must contain them. Checks
 * empty S/B key values and the key size limits. Sets *pk and *sk (NULL without a sort
 * key). */
int items_check_key(const table_schema *s, const av *m, bool exact, const av **pk, const av **sk,
                    strata_err *err);
/* A map with only the key attributes. NULL on OOM. */
av *items_key_map(arena *a, const table_schema *s, const av *pk, const av *sk);
/* A Key from JSON (ddbjson + items_check_key exact). */
int items_key_from_json(arena *a, const table_schema *s, const json_t *j, av **key, const av **pk,
                        const av **sk, strata_err *err);

/* The expression parameters of one request. */
typedef struct {
    expr_ctx *ctx;
    av *values;            /* ExpressionAttributeValues, NULL if absent */
    partition_name *names; /* ExpressionAttributeNames, as shipped in commands */
    uint32_t nnames;
    unsigned params; /* EXPR_P_* present in the request */
} items_exprs;

/* Reads ExpressionAttributeNames / ExpressionAttributeValues of `obj` (the request body,
 * or one element of a batch) into a fresh ctx and notes which of the operation's
 * expression (`allowed`) and legacy (`legacy`) parameters `obj` carries (EXPR_P_*);
 * runs expr_check_param_mix. */
int items_exprs_init(api_request *req, const json_t *obj, unsigned allowed, unsigned legacy,
                     items_exprs *x, strata_err *err);

/* Parses one expression given as a string member `name` of `obj` (absent: *out NULL). */
int items_parse_member(api_request *req, const json_t *obj, items_exprs *x, const char *name,
                       expr_kind kind, expr **out, const char **text, strata_err *err);

/* The projection of the request (ProjectionExpression or legacy AttributesToGet);
 * *out NULL when the whole item is wanted. */
int items_parse_projection(api_request *req, const json_t *obj, items_exprs *x, expr **out,
                           strata_err *err);

/* partition_read_req.project callback: ctx is an expr (EXPR_PROJECTION). */
int items_project_cb(void *ctx, arena *a, const av *item, av *out, strata_err *err);
/* partition_read_req.filter callback: ctx is an expr (EXPR_FILTER). */
int items_filter_cb(void *ctx, const av *item, strata_err *err);

/* The key schema in the forms partition.h and expr.h want. */
void items_expr_schema(const table_schema *s, expr_key_schema *out);

/* JSON text of a member of obj for shipping legacy parameters; NULL if absent. */
const char *items_json_text(arena *a, const json_t *obj, const char *name);

#endif
