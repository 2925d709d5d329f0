#ifndef STRATA_EXPR_EXPR_H
#define STRATA_EXPR_EXPR_H
/*
 * DynamoDB's expression language: ConditionExpression, FilterExpression,
 * KeyConditionExpression, ProjectionExpression and UpdateExpression, plus the legacy
 * parameters (Expected, AttributeUpdates, KeyConditions, QueryFilter, ScanFilter,
 * AttributesToGet, ConditionalOperator) converted into the same form.
 *
 * Flow for one request:
 *   expr_ctx *c = expr_ctx_new(a);
 *   expr_ctx_add_name(c, "#n", 2, "status", 6, err)      -- per ExpressionAttributeNames entry
 *   expr_ctx_set_values(c, values_map, err)              -- ExpressionAttributeValues (AV_M)
 *   expr *cond = expr_parse(c, EXPR_CONDITION, text, len, err);   -- each expression once
 *   expr *upd  = expr_parse(c, EXPR_UPDATE, text, len, err);
 *   expr_ctx_check_unused(c, err);                       -- after ALL expressions parsed
 *   ... then evaluate as often as needed (expr_condition_eval, expr_update_apply, ...).
 *
 * Parsing validates everything DynamoDB validates before touching an item (syntax,
 * reserved words, undefined placeholders, function names and arities, operand types of
 * literal values, limits, overlapping update paths) and fails with ERR_VALIDATION and
 * DynamoDB's exact message, e.g.
 *   Invalid UpdateExpression: Syntax error; token: "=", near: "SET ="
 *   Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: status
 *
 * Evaluation is pure and deterministic: no clock, no randomness, exact decimal
 * arithmetic (storage/data/number.h). Replicas re-parse the shipped expression text with
 * the shipped names and values and evaluate at apply time against their own copy of the
 * item, so they all reach the same result. Anything evaluation allocates comes from the
 * arena passed to it; results may point into the parsed expression's values and into
 * the input item, so keep those alive as long as the results.
 *
 * A parsed expr and its ctx live in the ctx's arena. A ctx is used by one thread at a
 * time; a parsed expr is immutable and may be evaluated any number of times, from any
 * thread. Nesting of parentheses/NOT/function calls is bounded (512 levels) so hostile
 * input cannot exhaust the stack; deeper input is a syntax error.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "storage/base/arena.h"
#include "storage/base/err.h"
#include "storage/data/value.h"

/* Limits (DynamoDB's). */
#define EXPR_TEXT_MAX             4096 /* bytes of one expression */
#define EXPR_PLACEHOLDER_MAX      255  /* bytes of a #name or :value placeholder */
#define EXPR_IN_MAX               100  /* operands of IN (right-hand side) */
#define EXPR_UPDATE_OPERATORS_MAX 300
#define EXPR_PATH_DEPTH_MAX       32 /* nesting levels of a document path */

typedef enum {
    EXPR_CONDITION = 1, /* ConditionExpression */
    EXPR_FILTER,        /* FilterExpression: same language, different error prefix */
    EXPR_KEY_CONDITION, /* KeyConditionExpression */
    EXPR_PROJECTION,    /* ProjectionExpression */
    EXPR_UPDATE,        /* UpdateExpression */
} expr_kind;

typedef struct expr_ctx expr_ctx;
typedef struct expr expr;

/* ---------------------------------------------------------------------------------
 * The request context: placeholders and their use.
 */

/* A new empty context allocated from `a` (NULL only when the arena is exhausted).
 * Every expr parsed with it is allocated from the same arena. */
expr_ctx *expr_ctx_new(arena *a);

/* Adds one ExpressionAttributeNames entry. The placeholder must start with '#', the
 * name is any non-empty UTF-8 string. Both are copied. Fails (ERR_VALIDATION, DynamoDB's
 * message) on a malformed placeholder, a placeholder over EXPR_PLACEHOLDER_MAX bytes or
 * an empty name. Placeholders must be unique (as JSON object keys are). */
int expr_ctx_add_name(expr_ctx *c, const char *placeholder, size_t placeholder_len,
                      const char *name, size_t name_len, strata_err *err);

/* Adds every entry of the request's ExpressionAttributeNames JSON object (string
 * values), failing with "ExpressionAttributeNames must not be empty" on {}. */
int expr_ctx_set_names_json(expr_ctx *c, const json_t *names, strata_err *err);

/* Sets ExpressionAttributeValues: an AV_M mapping ":placeholder" -> value. Not copied:
 * `values` must outlive the ctx and every expr parsed with it. Validates the keys
 * (start with ':', at most EXPR_PLACEHOLDER_MAX bytes) and that the map is not empty
 * ("ExpressionAttributeValues must not be empty"). */
int expr_ctx_set_values(expr_ctx *c, const av *values, strata_err *err);

/* Converts the request's ExpressionAttributeValues JSON object (DynamoDB JSON values,
 * with storage/data/ddbjson.h) into the ctx's arena and sets it. Value errors are
 * reported as DynamoDB does: "ExpressionAttributeValues contains invalid value: <why>
 * for key :v" (shape errors stay SerializationException with ddbjson's message). */
int expr_ctx_set_values_json(expr_ctx *c, const json_t *values, strata_err *err);

/* What the cluster ships with the expression text so replicas can re-parse it (for
 * legacy requests these are the generated placeholders): the names as a new JSON
 * object reference (caller json_decref's it; NULL if none), and the values map (NULL if
 * none; owned by the ctx). */
json_t *expr_ctx_names_json(const expr_ctx *c);
const av *expr_ctx_values(const expr_ctx *c);

/* True if names / values were given (even if all later turn out unused). */
bool expr_ctx_has_names(const expr_ctx *c);
bool expr_ctx_has_values(const expr_ctx *c);

/* After every expression of the request is parsed: fails if a name or value
 * placeholder was never used, with DynamoDB's messages
 *   "Value provided in ExpressionAttributeNames unused in expressions: keys: {#a, #b}"
 *   "Value provided in ExpressionAttributeValues unused in expressions: keys: {:v}"
 * (names are checked first; keys listed in sorted order). Undefined placeholders are
 * reported by expr_parse itself:
 *   "An expression attribute name used in the document path is not defined; attribute name: #n"
 *   "An expression attribute value used in expression is not defined; attribute value: :v" */
int expr_ctx_check_unused(const expr_ctx *c, strata_err *err);

/* ---------------------------------------------------------------------------------
 * Parsing.
 */

/* Parses one expression of `kind`. `text` need not be NUL-terminated. Fails with
 * ERR_VALIDATION and DynamoDB's message, prefixed "Invalid <Kind>Expression: ". Empty
 * text: "Invalid <Kind>Expression: The expression can not be empty;". Placeholders used
 * are marked used in `c`. */
expr *expr_parse(expr_ctx *c, expr_kind kind, const char *text, size_t len, strata_err *err);

expr_kind expr_get_kind(const expr *e);

/* True if the expression reads or writes top-level attribute `name` (after name
 * substitution). The API layer uses it for e.g. "Filter Expression can only contain
 * non-primary key attributes: Primary key attribute: id" and for GSI projections. */
bool expr_mentions_attr(const expr *e, const char *name, size_t name_len);

/* ---------------------------------------------------------------------------------
 * Conditions (EXPR_CONDITION, EXPR_FILTER; also EXPR_KEY_CONDITION as a plain filter).
 */

/* Evaluates against `item` (an AV_M; NULL means the item does not exist, which behaves
 * as an empty map). Sets *result. Type mismatches are not errors in DynamoDB: they make
 * the comparison false; `a <> :v` is true when `a` is missing. Allocates nothing; fails
 * only when `e` is not a condition-like expression (ERR_INTERNAL). */
int expr_condition_eval(const expr *e, const av *item, bool *result, strata_err *err);

/* ---------------------------------------------------------------------------------
 * Key conditions (EXPR_KEY_CONDITION).
 */

typedef struct {
    const char *hash_name; /* partition key attribute */
    size_t hash_name_len;
    av_type hash_type;      /* AV_S, AV_N or AV_B */
    const char *range_name; /* sort key attribute; NULL if the table/index has none */
    size_t range_name_len;
    av_type range_type;
} expr_key_schema;

typedef enum {
    EXPR_SK_NONE = 0, /* no sort-key condition: the whole partition */
    EXPR_SK_EQ,
    EXPR_SK_LT,
    EXPR_SK_LE,
    EXPR_SK_GT,
    EXPR_SK_GE,
    EXPR_SK_BETWEEN,     /* sk1 <= sk <= sk2 */
    EXPR_SK_BEGINS_WITH, /* S or B prefix sk1 */
} expr_sk_op;

typedef struct {
    const av *pk; /* the partition key value */
    expr_sk_op sk_op;
    const av *sk1; /* NULL for EXPR_SK_NONE */
    const av *sk2; /* BETWEEN's upper bound; NULL otherwise */
} expr_key_cond;

/* Validates a key condition against the key schema and extracts it. Errors are
 * DynamoDB's, e.g. "Query condition missed key schema element: id",
 * "Query key condition not supported", "Invalid KeyConditionExpression: ...",
 * "One or more parameter values were invalid: Condition parameter type does not match
 * schema type". `out` points into the expr's values. */
int expr_key_condition(const expr *e, const expr_key_schema *schema, expr_key_cond *out,
                       strata_err *err);

/* True if sort-key value `sk` satisfies the sort-key part of `kc` (always true for
 * EXPR_SK_NONE). */
bool expr_key_cond_match_sk(const expr_key_cond *kc, const av *sk);

/* ---------------------------------------------------------------------------------
 * Projections (EXPR_PROJECTION).
 */

/* Builds the projected item: only the listed document paths, nested paths keeping
 * their structure (a.b[1] -> {"a":{"b":[<elem 1>]}}); paths absent from the item are
 * skipped. `item` NULL gives an empty map. */
int expr_project(const expr *e, const av *item, arena *a, av *out, strata_err *err);

/* Number of paths, and the top-level attribute name of path i (after substitution). */
size_t expr_projection_count(const expr *e);
const char *expr_projection_top_name(const expr *e, size_t i, size_t *len);

/* ---------------------------------------------------------------------------------
 * Updates (EXPR_UPDATE).
 */

/* Fails with "One or more parameter values were invalid: Cannot update attribute <name>.
 * This attribute is part of the key" if the
 * update sets, removes, adds to or deletes from a key attribute (any of `schema`'s, and
 * the caller may call it again with an index's schema). Call right after parsing. */
int expr_update_check_keys(const expr *e, const expr_key_schema *schema, strata_err *err);

/* Applies the update to `old_item` (NULL: the item does not exist; an empty map is
 * used) and writes the new item to `new_item` (AV_M, attributes sorted), allocated from
 * `a`; `old_item` is not modified, and the result shares unchanged subtrees with it and
 * with the ctx's values (keep both alive as long as the result). Every operand is
 * evaluated against the old item. Errors are DynamoDB's, e.g.
 *   "The provided expression refers to an attribute that does not exist in the item"
 *   "An operand in the update expression has an incorrect data type"
 *   "The document path provided in the update expression is invalid for update"
 *   number overflow / underflow / precision from storage/data/number.h.
 * The caller still checks the item size limit and key attribute types. */
int expr_update_apply(const expr *e, const av *old_item, arena *a, av *new_item, strata_err *err);

/* For ReturnValues UPDATED_OLD (pass the old item) and UPDATED_NEW (pass the new item):
 * the item projected onto the document paths the update touched (REMOVEd paths are
 * simply absent from the new item). */
int expr_update_returned(const expr *e, const av *item, arena *a, av *out, strata_err *err);

/* ---------------------------------------------------------------------------------
 * Legacy (non-expression) parameters.
 *
 * Each converter validates the JSON parameter with DynamoDB's messages and renders it as
 * expression text over generated placeholders (names "#l<N>", values ":l<N>"), which it
 * adds to `c` (a ctx that must not hold user names/values: mixing is rejected by
 * expr_check_param_mix first). The returned text (NUL-terminated, in the ctx's arena)
 * is then parsed with expr_parse like any expression, and shipped the same way. Attribute
 * values in the JSON are DynamoDB JSON (converted with storage/data/ddbjson.h).
 * An empty parameter object ({}) gives "" (no condition / no update): do not parse it.
 * Call every converter a request needs before parsing the texts they return.
 * Errors are DynamoDB's, e.g. "One or more parameter values were invalid: Invalid number
 * of argument(s) for the BETWEEN ComparisonOperator".
 */

/* Expected (+ ConditionalOperator, may be NULL) -> ConditionExpression text. */
const char *expr_legacy_expected(expr_ctx *c, const json_t *expected,
                                 const json_t *conditional_operator, strata_err *err);
/* QueryFilter / ScanFilter (+ ConditionalOperator) -> FilterExpression text.
 * `param` is "QueryFilter" or "ScanFilter" (used in messages). */
const char *expr_legacy_filter(expr_ctx *c, const char *param, const json_t *filter,
                               const json_t *conditional_operator, strata_err *err);
/* KeyConditions -> KeyConditionExpression text. */
const char *expr_legacy_key_conditions(expr_ctx *c, const json_t *key_conditions, strata_err *err);
/* AttributesToGet -> ProjectionExpression text. */
const char *expr_legacy_attributes_to_get(expr_ctx *c, const json_t *attributes_to_get,
                                          strata_err *err);
/* AttributeUpdates -> UpdateExpression text. */
const char *expr_legacy_attribute_updates(expr_ctx *c, const json_t *attribute_updates,
                                          strata_err *err);

/* Which parameters a request carries, for expr_check_param_mix. */
enum {
    EXPR_P_ATTRIBUTES_TO_GET = 1u << 0,
    EXPR_P_ATTRIBUTE_UPDATES = 1u << 1,
    EXPR_P_CONDITIONAL_OPERATOR = 1u << 2,
    EXPR_P_EXPECTED = 1u << 3,
    EXPR_P_KEY_CONDITIONS = 1u << 4,
    EXPR_P_QUERY_FILTER = 1u << 5,
    EXPR_P_SCAN_FILTER = 1u << 6,
    EXPR_P_CONDITION_EXPRESSION = 1u << 8,
    EXPR_P_FILTER_EXPRESSION = 1u << 9,
    EXPR_P_KEY_CONDITION_EXPRESSION = 1u << 10,
    EXPR_P_PROJECTION_EXPRESSION = 1u << 11,
    EXPR_P_UPDATE_EXPRESSION = 1u << 12,
    EXPR_P_NAMES = 1u << 13,  /* ExpressionAttributeNames present */
    EXPR_P_VALUES = 1u << 14, /* ExpressionAttributeValues present */
};

/* Checks the combination of parameters a request carries (`present`, EXPR_P_* bits)
 * for an operation that accepts the expression parameters in `allowed` (e.g. UpdateItem:
 * EXPR_P_UPDATE_EXPRESSION | EXPR_P_CONDITION_EXPRESSION). Fails when legacy and
 * expression parameters are mixed:
 *   "Can not use both expression and non-expression parameters in the same request:
 *    Non-expression parameters: {AttributesToGet} Expression parameters:
 *    {ProjectionExpression}"
 * or when names/values come without an expression that can use them:
 *   "ExpressionAttributeNames can only be specified when using expressions"
 *   "ExpressionAttributeValues can only be specified when using expressions:
 *    UpdateExpression and ConditionExpression are null" */
int expr_check_param_mix(unsigned present, unsigned allowed, strata_err *err);

#endif
