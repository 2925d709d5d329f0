/*
 * Legacy (non-expression) request parameters: Expected, QueryFilter, ScanFilter,
 * KeyConditions, AttributesToGet, AttributeUpdates, ConditionalOperator.
 *
 * Each is validated with DynamoDB's messages, then rendered as expression text over
 * generated placeholders ("#l00000" for names, ":l00000" for values) that are added to
 * the request's ctx. From there on a legacy request is an expression request: the same
 * parser, evaluator and replicated command format.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/base/buf.h"
#include "storage/data/ddbjson.h"
#include "storage/expr/expr_int.h"

#define INVALID         "One or more parameter values were invalid: "
#define LEGACY_TEXT_MAX (1024 * 1024)

/* ---- generated placeholders ---- */

static int check_legacy_ctx(expr_ctx *c, strata_err *err)
{
    if ((c->has_names || c->has_values) && !c->legacy)
        return strata_err_set(err, ERR_INTERNAL,
                              "legacy parameters converted into a ctx with user placeholders");
    c->legacy = true;
    return 0;
}

/* Adds a name placeholder for attribute `name`; writes it into `out`. */
static int gen_name(expr_ctx *c, const char *name, size_t len, buf *out, strata_err *err)
{
    /* Checked here: expr_ctx_add_name's message would name the generated placeholder. */
    if (len == 0)
        return strata_err_set(err, ERR_VALIDATION, INVALID "Empty attribute name");
    char ph[16];
    int n = snprintf(ph, sizeof(ph), "#l%05u", c->legacy_seq++);
    if (expr_ctx_add_name(c, ph, (size_t)n, name, len, err) != 0)
        return -1;
    buf_append(out, ph, (size_t)n);
    return 0;
}

/* Adds a value placeholder; writes it into `out`. */
static int gen_value(expr_ctx *c, const av *v, buf *out, strata_err *err)
{
    av *m = &c->legacy_values;
    if (m->u.map.count == c->legacy_values_cap) {
        uint32_t cap = c->legacy_values_cap ? c->legacy_values_cap * 2 : 8;
        av_attr *attrs = arena_alloc(c->a, cap * sizeof(av_attr));
        bool *used = arena_zalloc(c->a, cap * sizeof(bool));
        if (attrs == NULL || used == NULL)
            return strata_err_set(err, ERR_NOMEM, "legacy conversion: out of memory");
        if (m->u.map.count) {
            memcpy(attrs, m->u.map.attrs, m->u.map.count * sizeof(av_attr));
            memcpy(used, c->value_used, m->u.map.count * sizeof(bool));
        }
        m->u.map.attrs = attrs;
        c->value_used = used;
        c->legacy_values_cap = cap;
    }
    char ph[16];
    int n = snprintf(ph, sizeof(ph), ":l%05u", c->legacy_seq++);
    av_attr *at = &m->u.map.attrs[m->u.map.count];
    at->name = arena_strndup(c->a, ph, (size_t)n);
    if (at->name == NULL)
        return strata_err_set(err, ERR_NOMEM, "legacy conversion: out of memory");
    at->name_len = (uint32_t)n;
    at->value = *v;
    m->type = AV_M;
    m->u.map.count++;
    c->values = m;
    c->has_values = true;
    buf_append(out, ph, (size_t)n);
    return 0;
}

static const char *finish(expr_ctx *c, buf *b, strata_err *err)
{
    if (b->failed) {
        buf_free(b);
        strata_err_set(err, ERR_NOMEM, "legacy conversion: out of memory");
        return NULL;
    }
    char *s = arena_strndup(c->a, b->len ? (const char *)b->data : "", b->len);
    buf_free(b);
    if (s == NULL)
        strata_err_set(err, ERR_NOMEM, "legacy conversion: out of memory");
    return s;
}

/* ---- comparison operators ---- */

typedef enum {
    OP_EQ,
    OP_NE,
    OP_LE,
    OP_LT,
    OP_GE,
    OP_GT,
    OP_NOT_NULL,
    OP_NULL,
    OP_CONTAINS,
    OP_NOT_CONTAINS,
    OP_BEGINS_WITH,
    OP_IN,
    OP_BETWEEN,
    OP_COUNT
} cmp_op;

static const char *const op_names[OP_COUNT] = {
    "EQ",   "NE",       "LE",           "LT",          "GE", "GT",      "NOT_NULL",
    "NULL", "CONTAINS", "NOT_CONTAINS", "BEGINS_WITH", "IN", "BETWEEN",
};

static int op_lookup(const json_t *j)
{
    if (!json_is_string(j))
        return -1;
    for (int i = 0; i < OP_COUNT; i++)
        if (strcmp(json_string_value(j), op_names[i]) == 0)
            return i;
    return -1;
}

static bool op_arity_ok(cmp_op op, size_t n)
{
    switch (op) {
    case OP_NOT_NULL:
    case OP_NULL:
        return n == 0;
    case OP_IN:
        return n >= 1;
    case OP_BETWEEN:
        return n == 2;
    default:
        return n == 1;
    }
}

static bool op_type_ok(cmp_op op, av_type t)
{
    switch (op) {
    case OP_EQ:
    case OP_NE:
        return true;
    case OP_BEGINS_WITH:
        return t == AV_S || t == AV_B;
    case OP_CONTAINS:
    case OP_NOT_CONTAINS:
        return t == AV_S || t == AV_N || t == AV_B;
    default:
        return t == AV_S || t == AV_N || t == AV_B;
    }
}

/* Converts the AttributeValueList (or Value) of one condition into avs. */
static int convert_values(expr_ctx *c, const json_t *list, av **out, size_t *n, strata_err *err)
{
    *n = list ? json_array_size(list) : 0;
    *out = arena_zalloc(c->a, (*n ? *n : 1) * sizeof(av));
    if (*out == NULL)
        return strata_err_set(err, ERR_NOMEM, "legacy conversion: out of memory");
    for (size_t i = 0; i < *n; i++)
        if (ddbjson_to_value(json_array_get(list, i), c->a, &(*out)[i], err) != 0)
            return -1;
    return 0;
}

/* Validates and renders "<attr> <op> <values>" into b. */
static int render_condition(expr_ctx *c, const char *attr, cmp_op op, const av *vals, size_t n,
                            buf *b, strata_err *err)
{
    if (!op_arity_ok(op, n))
        return strata_err_set(err, ERR_VALIDATION,
                              INVALID "Invalid number of argument(s) for the %s ComparisonOperator",
                              op_names[op]);
    for (size_t i = 0; i < n; i++) {
        if (vals[i].type != vals[0].type)
            return strata_err_set(err, ERR_VALIDATION,
                                  INVALID "AttributeValues inside AttributeValueList must be of "
                                          "same type");
        if (!op_type_ok(op, vals[i].type))
            return strata_err_set(err, ERR_VALIDATION,
                                  INVALID
                                  "ComparisonOperator %s is not valid for %s AttributeValue "
                                  "type",
                                  op_names[op], av_type_name(vals[i].type));
    }
    if (op == OP_BETWEEN && av_cmp_scalar(&vals[0], &vals[1]) > 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "The BETWEEN condition was provided a range where the lower bound "
                              "is greater than the upper bound");
    static const char *const cmp_text[] = {"=", "<>", "<=", "<", ">=", ">"};
    buf name;
    buf_init(&name, 64);
    if (gen_name(c, attr, strlen(attr), &name, err) != 0) {
        buf_free(&name);
        return -1;
    }
    const char *nm = (const char *)name.data;
    int nl = (int)name.len;
    int rc = 0;
    switch (op) {
    case OP_NOT_NULL:
        buf_printf(b, "attribute_exists(%.*s)", nl, nm);
        break;
    case OP_NULL:
        buf_printf(b, "attribute_not_exists(%.*s)", nl, nm);
        break;
    case OP_CONTAINS:
    case OP_NOT_CONTAINS:
    case OP_BEGINS_WITH:
        /* legacy operators other than NE and NULL never match a missing attribute, so
         * NOT_CONTAINS needs the attribute to exist (unlike NOT contains(...)) */
        if (op == OP_NOT_CONTAINS)
            buf_printf(b, "attribute_exists(%.*s) AND NOT ", nl, nm);
        buf_printf(b, "%s(%.*s, ", op == OP_BEGINS_WITH ? "begins_with" : "contains", nl, nm);
        rc = gen_value(c, &vals[0], b, err);
        buf_printf(b, ")");
        break;
    case OP_IN:
        buf_printf(b, "%.*s IN (", nl, nm);
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (i)
                buf_printf(b, ", ");
            rc = gen_value(c, &vals[i], b, err);
        }
        buf_printf(b, ")");
        break;
    case OP_BETWEEN:
        buf_printf(b, "%.*s BETWEEN ", nl, nm);
        rc = gen_value(c, &vals[0], b, err);
        buf_printf(b, " AND ");
        if (rc == 0)
            rc = gen_value(c, &vals[1], b, err);
        break;
    default:
        buf_printf(b, "%.*s %s ", nl, nm, cmp_text[op]);
        rc = gen_value(c, &vals[0], b, err);
        break;
    }
    buf_free(&name);
    return rc;
}

static int conjunction(const json_t *conditional_operator, const char **out, strata_err *err)
{
    *out = " AND ";
    if (conditional_operator == NULL || json_is_null(conditional_operator))
        return 0;
    const char *s =
        json_is_string(conditional_operator) ? json_string_value(conditional_operator) : "";
    if (strcmp(s, "OR") == 0)
        *out = " OR ";
    else if (strcmp(s, "AND") != 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "1 validation error detected: Value '%s' at 'conditionalOperator' "
                              "failed to satisfy constraint: Member must satisfy enum value set: "
                              "[OR, AND]",
                              s);
    return 0;
}

/* QueryFilter / ScanFilter / KeyConditions: attr -> {ComparisonOperator, AttributeValueList} */
static const char *convert_conditions(expr_ctx *c, const char *param, const json_t *conds,
                                      const char *joiner, bool key_conditions, strata_err *err)
{
    if (check_legacy_ctx(c, err) != 0)
        return NULL;
    if (!json_is_object(conds)) {
        strata_err_set(err, ERR_SERIALIZATION, "%s must be a map", param);
        return NULL;
    }
    buf b;
    buf_init(&b, LEGACY_TEXT_MAX);
    const char *attr;
    json_t *cond;
    size_t k = 0;
    bool not_indexable = false;
    json_object_foreach((json_t *)conds, attr, cond)
    {
        const json_t *opj = json_object_get(cond, "ComparisonOperator");
        int op = op_lookup(opj);
        if (op < 0) {
            strata_err_set(
                err, ERR_VALIDATION,
                "1 validation error detected: Value '%s' at '%s.%s.member."
                "comparisonOperator' failed to satisfy constraint: Member must satisfy "
                "enum value set: [IN, NULL, BETWEEN, LT, NOT_CONTAINS, EQ, GT, NOT_NULL, "
                "NE, LE, BEGINS_WITH, GE, CONTAINS]",
                json_is_string(opj) ? json_string_value(opj) : "null",
                key_conditions ? "keyConditions" : param, attr);
            goto fail;
        }
        if (key_conditions && op != OP_EQ && op != OP_LE && op != OP_LT && op != OP_GE &&
            op != OP_GT && op != OP_BEGINS_WITH && op != OP_BETWEEN)
            not_indexable = true; /* reported after the count, as DynamoDB does */
        av *vals;
        size_t n;
        if (convert_values(c, json_object_get(cond, "AttributeValueList"), &vals, &n, err) != 0)
            goto fail;
        if (k++)
            buf_printf(&b, "%s", joiner);
        buf_printf(&b, "(");
        if (render_condition(c, attr, (cmp_op)op, vals, n, &b, err) != 0)
            goto fail;
        buf_printf(&b, ")");
    }
    if (key_conditions && (k < 1 || k > 2)) {
        strata_err_set(err, ERR_VALIDATION, "Conditions can be of length 1 or 2 only");
        goto fail;
    }
    if (not_indexable) {
        strata_err_set(err, ERR_VALIDATION,
                       "Attempted conditional constraint is not an indexable operation");
        goto fail;
    }
    return finish(c, &b, err);
fail:
    buf_free(&b);
    return NULL;
}

const char *expr_legacy_filter(expr_ctx *c, const char *param, const json_t *filter,
                               const json_t *conditional_operator, strata_err *err)
{
    const char *joiner;
    if (conjunction(conditional_operator, &joiner, err) != 0)
        return NULL;
    return convert_conditions(c, param, filter, joiner, false, err);
}

const char *expr_legacy_key_conditions(expr_ctx *c, const json_t *key_conditions, strata_err *err)
{
    return convert_conditions(c, "KeyConditions", key_conditions, " AND ", true, err);
}

const char *expr_legacy_expected(expr_ctx *c, const json_t *expected,
                                 const json_t *conditional_operator, strata_err *err)
{
    const char *joiner;
    if (check_legacy_ctx(c, err) != 0 || conjunction(conditional_operator, &joiner, err) != 0)
        return NULL;
    if (!json_is_object(expected)) {
        strata_err_set(err, ERR_SERIALIZATION, "Expected must be a map");
        return NULL;
    }
    buf b;
    buf_init(&b, LEGACY_TEXT_MAX);
    const char *attr;
    json_t *cond;
    size_t k = 0;
    json_object_foreach((json_t *)expected, attr, cond)
    {
        const json_t *opj = json_object_get(cond, "ComparisonOperator");
        const json_t *list = json_object_get(cond, "AttributeValueList");
        const json_t *value = json_object_get(cond, "Value");
        const json_t *exists = json_object_get(cond, "Exists");
        if (list && value) {
            strata_err_set(err, ERR_VALIDATION,
                           INVALID "Value and AttributeValueList cannot be used together for "
                                   "Attribute: %s",
                           attr);
            goto fail;
        }
        if (k++)
            buf_printf(&b, "%s", joiner);
        buf_printf(&b, "(");
        if (opj != NULL) {
            int op = op_lookup(opj);
            if (exists != NULL) {
                strata_err_set(err, ERR_VALIDATION,
                               INVALID "Exists and ComparisonOperator cannot be used together "
                                       "for Attribute: %s",
                               attr);
                goto fail;
            }
            if (op < 0) {
                strata_err_set(err, ERR_VALIDATION,
                               "1 validation error detected: Value '%s' at 'expected.%s.member."
                               "comparisonOperator' failed to satisfy constraint: Member must "
                               "satisfy enum value set: [IN, NULL, BETWEEN, LT, NOT_CONTAINS, EQ, "
                               "GT, NOT_NULL, NE, LE, BEGINS_WITH, GE, CONTAINS]",
                               json_is_string(opj) ? json_string_value(opj) : "null", attr);
                goto fail;
            }
            if (op != OP_NULL && op != OP_NOT_NULL && value == NULL && list == NULL) {
                strata_err_set(err, ERR_VALIDATION,
                               INVALID "Value or AttributeValueList must be used with "
                                       "ComparisonOperator: %s for Attribute: %s",
                               op_names[op], attr);
                goto fail;
            }
            av *vals;
            size_t n;
            if (value != NULL) {
                vals = arena_alloc(c->a, sizeof(av));
                n = 1;
                if (vals == NULL || ddbjson_to_value(value, c->a, vals, err) != 0)
                    goto fail;
            } else if (convert_values(c, list, &vals, &n, err) != 0) {
                goto fail;
            }
            if (render_condition(c, attr, (cmp_op)op, vals, n, &b, err) != 0)
                goto fail;
        } else if (list != NULL) {
            strata_err_set(err, ERR_VALIDATION,
                           INVALID "AttributeValueList can only be used with a ComparisonOperator "
                                   "for Attribute: %s",
                           attr);
            goto fail;
        } else {
            bool want = exists == NULL || json_is_true(exists);
            if (want && value == NULL) {
                strata_err_set(err, ERR_VALIDATION,
                               INVALID "Value must be provided when Exists is %s for Attribute: %s",
                               exists == NULL ? "null" : "true", attr);
                goto fail;
            }
            if (!want && value != NULL) {
                strata_err_set(
                    err, ERR_VALIDATION,
                    INVALID "Value cannot be used when Exists is false for Attribute: %s", attr);
                goto fail;
            }
            av v;
            if (want && ddbjson_to_value(value, c->a, &v, err) != 0)
                goto fail;
            if (render_condition(c, attr, want ? OP_EQ : OP_NULL, want ? &v : NULL, want ? 1 : 0,
                                 &b, err) != 0)
                goto fail;
        }
        buf_printf(&b, ")");
    }
    return finish(c, &b, err);
fail:
    buf_free(&b);
    return NULL;
}

static int cmp_json_str(const void *x, const void *y)
{
    const json_t *a = *(const json_t *const *)x, *b = *(const json_t *const *)y;
    size_t la = json_string_length(a), lb = json_string_length(b);
    int r = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
    return r != 0 ? r : (la < lb ? -1 : la > lb);
}

/* "Duplicate value in attribute name": sort a copy and compare neighbours. */
static int check_duplicates(expr_ctx *c, const json_t *list, strata_err *err)
{
    size_t n = json_array_size(list);
    const json_t **v = arena_alloc(c->a, (n ? n : 1) * sizeof(*v));
    if (v == NULL)
        return strata_err_set(err, ERR_NOMEM, "legacy conversion: out of memory");
    for (size_t i = 0; i < n; i++) {
        v[i] = json_array_get(list, i);
        if (!json_is_string(v[i]))
            return strata_err_set(err, ERR_SERIALIZATION,
                                  "AttributesToGet members must be strings");
    }
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_json_str);
    for (size_t i = 1; i < n; i++)
        if (cmp_json_str(&v[i - 1], &v[i]) == 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  INVALID "Duplicate value in attribute name: %s",
                                  json_string_value(v[i]));
    return 0;
}

const char *expr_legacy_attributes_to_get(expr_ctx *c, const json_t *attributes_to_get,
                                          strata_err *err)
{
    if (check_legacy_ctx(c, err) != 0)
        return NULL;
    if (!json_is_array(attributes_to_get)) {
        strata_err_set(err, ERR_SERIALIZATION, "AttributesToGet must be a list");
        return NULL;
    }
    size_t n = json_array_size(attributes_to_get);
    if (n == 0) {
        strata_err_set(err, ERR_VALIDATION,
                       "1 validation error detected: Value '[]' at 'attributesToGet' failed to "
                       "satisfy constraint: Member must have length greater than or equal to 1");
        return NULL;
    }
    if (check_duplicates(c, attributes_to_get, err) != 0)
        return NULL;
    buf b;
    buf_init(&b, LEGACY_TEXT_MAX);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(attributes_to_get, i);
        if (!json_is_string(s)) {
            strata_err_set(err, ERR_SERIALIZATION, "AttributesToGet members must be strings");
            goto fail;
        }
        if (i)
            buf_printf(&b, ", ");
        if (gen_name(c, json_string_value(s), json_string_length(s), &b, err) != 0)
            goto fail;
    }
    return finish(c, &b, err);
fail:
    buf_free(&b);
    return NULL;
}

const char *expr_legacy_attribute_updates(expr_ctx *c, const json_t *attribute_updates,
                                          strata_err *err)
{
    if (check_legacy_ctx(c, err) != 0)
        return NULL;
    if (!json_is_object(attribute_updates)) {
        strata_err_set(err, ERR_SERIALIZATION, "AttributeUpdates must be a map");
        return NULL;
    }
    /* one buffer per section: SET, REMOVE, ADD, DELETE */
    buf sec[4];
    size_t count[4] = {0};
    static const char *const sec_names[4] = {"SET", "REMOVE", "ADD", "DELETE"};
    for (int i = 0; i < 4; i++)
        buf_init(&sec[i], LEGACY_TEXT_MAX);
    const char *attr;
    json_t *upd;
    json_object_foreach((json_t *)attribute_updates, attr, upd)
    {
        const json_t *actj = json_object_get(upd, "Action");
        const json_t *valj = json_object_get(upd, "Value");
        const char *action = json_is_string(actj) ? json_string_value(actj) : "PUT";
        if (strcmp(action, "PUT") != 0 && strcmp(action, "ADD") != 0 &&
            strcmp(action, "DELETE") != 0) {
            strata_err_set(err, ERR_VALIDATION,
                           "1 validation error detected: Value '%s' at 'attributeUpdates.%s."
                           "member.action' failed to satisfy constraint: Member must satisfy enum "
                           "value set: [ADD, PUT, DELETE]",
                           action, attr);
            goto fail;
        }
        av v;
        bool has_value = valj != NULL && !json_is_null(valj);
        if (has_value && ddbjson_to_value(valj, c->a, &v, err) != 0)
            goto fail;
        if (!has_value && strcmp(action, "DELETE") != 0) {
            strata_err_set(err, ERR_VALIDATION,
                           INVALID "Only DELETE action is allowed when no attribute value is "
                                   "specified");
            goto fail;
        }
        int s;
        if (strcmp(action, "PUT") == 0) {
            s = 0;
        } else if (strcmp(action, "DELETE") == 0) {
            if (has_value && !av_is_set(v.type)) {
                strata_err_set(err, ERR_VALIDATION,
                               INVALID "DELETE action with value is not supported for the type %s",
                               av_type_name(v.type));
                goto fail;
            }
            s = has_value ? 3 : 1;
        } else {
            if (v.type != AV_N && v.type != AV_L && !av_is_set(v.type)) {
                strata_err_set(err, ERR_VALIDATION,
                               INVALID "ADD action is not supported for the type %s",
                               av_type_name(v.type));
                goto fail;
            }
            /* legacy ADD appends to lists; the expression language does that with SET */
            s = v.type == AV_L ? 0 : 2;
        }
        buf *b = &sec[s];
        if (count[s]++)
            buf_printf(b, ", ");
        buf name;
        buf_init(&name, 64);
        if (gen_name(c, attr, strlen(attr), &name, err) != 0) {
            buf_free(&name);
            goto fail;
        }
        buf_append(b, name.data, name.len);
        int rc = 0;
        if (s == 0 && v.type == AV_L && strcmp(action, "ADD") == 0) {
            static const av empty_list = {.type = AV_L};
            buf_printf(b, " = list_append(if_not_exists(%.*s, ", (int)name.len,
                       (const char *)name.data);
            rc = gen_value(c, &empty_list, b, err);
            buf_printf(b, "), ");
            if (rc == 0)
                rc = gen_value(c, &v, b, err);
            buf_printf(b, ")");
        } else if (s == 0) {
            buf_printf(b, " = ");
            rc = gen_value(c, &v, b, err);
        } else if (s != 1) {
            buf_printf(b, " ");
            rc = gen_value(c, &v, b, err);
        }
        buf_free(&name);
        if (rc != 0)
            goto fail;
    }
    buf out;
    buf_init(&out, LEGACY_TEXT_MAX);
    for (int i = 0; i < 4; i++) {
        if (count[i] == 0)
            continue;
        if (out.len)
            buf_printf(&out, " ");
        buf_printf(&out, "%s ", sec_names[i]);
        buf_append(&out, sec[i].data, sec[i].len);
        out.failed |= sec[i].failed;
    }
    for (int i = 0; i < 4; i++)
        buf_free(&sec[i]);
    return finish(c, &out, err);
fail:
    for (int i = 0; i < 4; i++)
        buf_free(&sec[i]);
    return NULL;
}

/* ---- mixing expression and non-expression parameters ---- */

static void list_params(unsigned bits, const unsigned *order, const char *const *names, size_t n,
                        const char *sep, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!(bits & order[i]))
            continue;
        int w = snprintf(out + used, cap - used, "%s%s", used ? sep : "", names[i]);
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
    }
}

int expr_check_param_mix(unsigned present, unsigned allowed, strata_err *err)
{
    /* In the order DynamoDB lists them in its messages (Query: {AttributesToGet,
     * QueryFilter, ConditionalOperator, KeyConditions} and {ProjectionExpression,
     * FilterExpression, KeyConditionExpression}; UpdateItem: {AttributeUpdates, Expected}
     * and {UpdateExpression, ConditionExpression}; "FilterExpression and
     * KeyConditionExpression are null"). */
    static const unsigned legacy_bits[] = {
        EXPR_P_ATTRIBUTE_UPDATES, EXPR_P_ATTRIBUTES_TO_GET, EXPR_P_EXPECTED,
        EXPR_P_QUERY_FILTER,      EXPR_P_SCAN_FILTER,       EXPR_P_CONDITIONAL_OPERATOR,
        EXPR_P_KEY_CONDITIONS,
    };
    static const char *const legacy_names[] = {
        "AttributeUpdates", "AttributesToGet",     "Expected",      "QueryFilter",
        "ScanFilter",       "ConditionalOperator", "KeyConditions",
    };
    static const unsigned expr_bits[] = {
        EXPR_P_UPDATE_EXPRESSION, EXPR_P_CONDITION_EXPRESSION,     EXPR_P_PROJECTION_EXPRESSION,
        EXPR_P_FILTER_EXPRESSION, EXPR_P_KEY_CONDITION_EXPRESSION,
    };
    static const char *const expr_names[] = {
        "UpdateExpression", "ConditionExpression",    "ProjectionExpression",
        "FilterExpression", "KeyConditionExpression",
    };
    const unsigned all_expr = EXPR_P_UPDATE_EXPRESSION | EXPR_P_CONDITION_EXPRESSION |
                              EXPR_P_KEY_CONDITION_EXPRESSION | EXPR_P_FILTER_EXPRESSION |
                              EXPR_P_PROJECTION_EXPRESSION;
    unsigned exprs = present & all_expr;
    unsigned legacy = present & (EXPR_P_ATTRIBUTE_UPDATES | EXPR_P_ATTRIBUTES_TO_GET |
                                 EXPR_P_EXPECTED | EXPR_P_KEY_CONDITIONS | EXPR_P_QUERY_FILTER |
                                 EXPR_P_SCAN_FILTER | EXPR_P_CONDITIONAL_OPERATOR);
    if (exprs) {
        /* KeyConditions alongside filter/projection expressions is accepted, as by DynamoDB,
         * when no KeyConditionExpression is given */
        if (!(exprs & EXPR_P_KEY_CONDITION_EXPRESSION))
            legacy &= ~(unsigned)EXPR_P_KEY_CONDITIONS;
        if (legacy) {
            char l[256], e[256];
            list_params(legacy, legacy_bits, legacy_names, 7, ", ", l, sizeof(l));
            list_params(exprs, expr_bits, expr_names, 5, ", ", e, sizeof(e));
            return strata_err_set(err, ERR_VALIDATION,
                                  "Can not use both expression and non-expression parameters in "
                                  "the same request: Non-expression parameters: {%s} Expression "
                                  "parameters: {%s}",
                                  l, e);
        }
    }
    if ((present & EXPR_P_NAMES) && !exprs)
        return strata_err_set(err, ERR_VALIDATION,
                              "ExpressionAttributeNames can only be specified when using "
                              "expressions");
    unsigned value_exprs = allowed & all_expr & ~(unsigned)EXPR_P_PROJECTION_EXPRESSION;
    if ((present & EXPR_P_VALUES) && !(present & value_exprs)) {
        char e[256];
        list_params(value_exprs, expr_bits, expr_names, 5, " and ", e, sizeof(e));
        if (value_exprs == 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "ExpressionAttributeValues can only be specified when using "
                                  "expressions");
        bool plural = (value_exprs & (value_exprs - 1)) != 0;
        return strata_err_set(err, ERR_VALIDATION,
                              "ExpressionAttributeValues can only be specified when using "
                              "expressions: %s %s null",
                              e, plural ? "are" : "is");
    }
    return 0;
}
