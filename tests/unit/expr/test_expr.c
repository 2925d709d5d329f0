/* Unit tests for storage/expr: parsing, errors, conditions, projections, updates, key
 * conditions, placeholders and limits. Table-driven: each row is one rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/expr/expr.h"
#include "storage/expr/expr_int.h"
#include "tests/unit/expr/av_json.h"

/* ---- request helper ---- */

typedef struct {
    arena a;
    expr_ctx *c;
    strata_err err;
} req;

static void req_init(req *r, const char *names, const char *values)
{
    arena_init(&r->a, 64 << 20);
    r->c = expr_ctx_new(&r->a);
    assert_non_null(r->c);
    strata_err_clear(&r->err);
    if (names != NULL) {
        json_t *j = json_loads(names, 0, NULL);
        assert_non_null(j);
        assert_int_equal(expr_ctx_set_names_json(r->c, j, &r->err), 0);
        json_decref(j);
    }
    if (values != NULL) {
        av *v = tj_parse(&r->a, values, 1);
        assert_non_null(v);
        assert_int_equal(expr_ctx_set_values(r->c, v, &r->err), 0);
    }
}

static void req_free(req *r)
{
    arena_free(&r->a);
}

static void assert_item_json(const av *item, const char *expected)
{
    char *got = tj_dump_item(item);
    json_t *e = json_loads(expected, 0, NULL);
    assert_non_null(e);
    char *want = json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS);
    if (strcmp(got, want) != 0)
        fail_msg("item mismatch\n  got:  %s\n  want: %s", got, want);
    free(got);
    free(want);
    json_decref(e);
}

/* ---- conditions ---- */

static const char *cond_item =
    "{\"id\":{\"S\":\"k1\"},\"n\":{\"N\":\"10\"},\"s\":{\"S\":\"hello\"},\"b\":{\"B\":\"AQID\"},"
    "\"t\":{\"BOOL\":true},\"z\":{\"NULL\":true},\"ss\":{\"SS\":[\"a\",\"b\",\"c\"]},"
    "\"ns\":{\"NS\":[\"1\",\"2.5\",\"30\"]},\"bs\":{\"BS\":[\"AQ==\",\"Ag==\"]},"
    "\"l\":{\"L\":[{\"S\":\"x\"},{\"N\":\"1\"},{\"M\":{\"q\":{\"S\":\"deep\"}}}]},"
    "\"m\":{\"M\":{\"a\":{\"N\":\"1\"},\"b\":{\"M\":{\"c\":{\"S\":\"z\"}}},\"status\":{\"S\":"
    "\"on\"}}},"
    "\"u\":{\"S\":\"\xc3\xa9\xf0\x9d\x84\x9e\"}}";

static const char *cond_values =
    "{\":n10\":{\"N\":\"10.0\"},\":n1e1\":{\"N\":\"1E+1\"},\":n5\":{\"N\":\"5\"},"
    "\":n20\":{\"N\":\"20\"},\":n30\":{\"N\":\"30\"},\":n0\":{\"N\":\"0\"},\":n1\":{\"N\":\"1\"},"
    "\":n3\":{\"N\":\"3\"},\":n25\":{\"N\":\"2.50\"},\":s\":{\"S\":\"hello\"},\":sa\":{\"S\":\"a\"}"
    ","
    "\":sb\":{\"S\":\"b\"},\":sx\":{\"S\":\"x\"},\":sz\":{\"S\":\"z\"},\":he\":{\"S\":\"he\"},"
    "\":lo\":{\"S\":\"lo\"},\":ll\":{\"S\":\"ll\"},\":on\":{\"S\":\"on\"},\":b\":{\"B\":\"AQID\"},"
    "\":b01\":{\"B\":\"AQ==\"},\":b02\":{\"B\":\"Ag==\"},\":tN\":{\"S\":\"N\"},"
    "\":tSS\":{\"S\":\"SS\"},\":tS\":{\"S\":\"S\"},\":tNULL\":{\"S\":\"NULL\"},"
    "\":tBOOL\":{\"S\":\"BOOL\"},\":true\":{\"BOOL\":true},"
    "\":mcopy\":{\"M\":{\"status\":{\"S\":\"on\"},\"a\":{\"N\":\"1.0\"},\"b\":{\"M\":{\"c\":{\"S\":"
    "\"z\"}}}}},"
    "\":sscopy\":{\"SS\":[\"c\",\"b\",\"a\"]},\":lcopy\":{\"L\":[{\"S\":\"x\"},{\"N\":\"1\"},"
    "{\"M\":{\"q\":{\"S\":\"deep\"}}}]}}";

typedef struct {
    const char *text;
    const char *names;
    int expect;
} cond_case;

static const cond_case cond_cases[] = {
    /* comparators, numbers compare by value */
    {"n = :n10", NULL, 1},
    {"n = :n1e1", NULL, 1},
    {"n <> :n10", NULL, 0},
    {"n <> :n5", NULL, 1},
    {"n < :n20", NULL, 1},
    {"n <= :n10", NULL, 1},
    {"n > :n5", NULL, 1},
    {"n >= :n20", NULL, 0},
    {":n5 < n", NULL, 1},
    {"s > :sa", NULL, 1},
    {"s < :sa", NULL, 0},
    {"b = :b", NULL, 1},
    {"b > :b01", NULL, 1},
    /* different types: never ordered, never equal */
    {"s = :n10", NULL, 0},
    {"s < :n10", NULL, 0},
    {"s > :n10", NULL, 0},
    {"t = :true", NULL, 1},
    /* missing attributes */
    {"absent = :n10", NULL, 0},
    {"absent <> :n10", NULL, 1},
    {"absent < :n10", NULL, 0},
    /* deep equality */
    {"m = :mcopy", NULL, 1},
    {"ss = :sscopy", NULL, 1},
    {"l = :lcopy", NULL, 1},
    {"m <> :mcopy", NULL, 0},
    /* BETWEEN, IN */
    {"n BETWEEN :n5 AND :n20", NULL, 1},
    {"n BETWEEN :n10 AND :n10", NULL, 1},
    {"n BETWEEN :n20 AND :n30", NULL, 0},
    {"s BETWEEN :n5 AND :n20", NULL, 0},
    {"s BETWEEN :sa AND :sz", NULL, 1},
    {"n IN (:n5, :n10)", NULL, 1},
    {"n IN (:n5)", NULL, 0},
    {"absent IN (:n5)", NULL, 0},
    {"s IN (:n5, :s)", NULL, 1},
    /* logic and precedence: NOT > AND > OR */
    {"s = :s AND n = :n10", NULL, 1},
    {"s = :s AND n = :n5", NULL, 0},
    {"s = :sa OR n = :n10", NULL, 1},
    {"NOT s = :s", NULL, 0},
    {"NOT (s = :s)", NULL, 0},
    {"NOT NOT s = :s", NULL, 1},
    {"n = :n10 OR n = :n5 AND s = :sa", NULL, 1},
    {"(n = :n10 OR n = :n5) AND s = :sa", NULL, 0},
    {"NOT n = :n10 AND n = :n5", NULL, 0},
    {"not n = :n5 and n = :n10", NULL, 1},
    /* parentheses around conditions and operands */
    {"(n = :n10)", NULL, 1},
    {"((n = :n10) AND (s = :s))", NULL, 1},
    {"(n) = :n10", NULL, 1},
    {"n = (:n10)", NULL, 1},
    {"(size(s)) = :n5", NULL, 1},
    {"(attribute_exists(n))", NULL, 1},
    /* functions */
    {"attribute_exists(n)", NULL, 1},
    {"attribute_exists(nope)", NULL, 0},
    {"attribute_not_exists(nope)", NULL, 1},
    {"attribute_not_exists(n)", NULL, 0},
    {"attribute_exists(m.b.c)", NULL, 1},
    {"attribute_exists(m.b.d)", NULL, 0},
    {"attribute_exists(l[2].q)", NULL, 1},
    {"attribute_exists(l[3])", NULL, 0},
    {"attribute_exists(s[0])", NULL, 0},
    {"attribute_exists(n.x)", NULL, 0},
    {"attribute_type(n, :tN)", NULL, 1},
    {"attribute_type(ss, :tSS)", NULL, 1},
    {"attribute_type(n, :tS)", NULL, 0},
    {"attribute_type(z, :tNULL)", NULL, 1},
    {"attribute_type(t, :tBOOL)", NULL, 1},
    {"attribute_type(nope, :tS)", NULL, 0},
    {"begins_with(s, :he)", NULL, 1},
    {"begins_with(s, :lo)", NULL, 0},
    {"begins_with(s, :s)", NULL, 1},
    {"begins_with(b, :b01)", NULL, 1},
    {"begins_with(b, :b02)", NULL, 0},
    {"begins_with(n, :he)", NULL, 0},
    {"begins_with(s, :b01)", NULL, 0},
    {"contains(s, :ll)", NULL, 1},
    {"contains(s, :sz)", NULL, 0},
    {"contains(ss, :sb)", NULL, 1},
    {"contains(ss, :sx)", NULL, 0},
    {"contains(ns, :n25)", NULL, 1},
    {"contains(ns, :n3)", NULL, 0},
    {"contains(bs, :b02)", NULL, 1},
    {"contains(b, :b02)", NULL, 1},
    {"contains(l, :sx)", NULL, 1},
    {"contains(l, :n1)", NULL, 1},
    {"contains(l, :n3)", NULL, 0},
    {"contains(n, :n10)", NULL, 0},
    {"contains(nope, :sa)", NULL, 0},
    {"size(s) = :n5", NULL, 1},
    {"size(u) = :n3", NULL, 1}, /* UTF-16 code units, as DynamoDB counts */
    {"size(b) = :n3", NULL, 1},
    {"size(ss) = :n3", NULL, 1},
    {"size(ns) = :n3", NULL, 1},
    {"size(l) = :n3", NULL, 1},
    {"size(m) = :n3", NULL, 1},
    {"size(m.b) = :n1", NULL, 1},
    {"size(n) = :n1", NULL, 0},
    {"size(n) <> :n1", NULL, 1},
    {"size(absent) > :n0", NULL, 0},
    {"size(s) BETWEEN :n1 AND :n5", NULL, 1},
    {"size(:s) = :n5", NULL, 1},
    {"size(s) IN (:n3, :n5)", NULL, 1},
    /* document paths and names */
    {"m.#st = :on", "{\"#st\":\"status\"}", 1},
    {"#m.#b.#c = :sz", "{\"#m\":\"m\",\"#b\":\"b\",\"#c\":\"c\"}", 1},
    {"m.b.c = :sz", NULL, 1},
    {"l[0] = :sx", NULL, 1},
    {"l[1] = :n1", NULL, 1},
    {"l [ 1 ] = :n1", NULL, 1},
    {"l[2].q = :s", NULL, 0},
    {"#dot = :n5", "{\"#dot\":\"a.b\"}", 0},
    {"  n\t=\n:n10  ", NULL, 1},
    {"n_2 = :n10", NULL, 0},
};

static void condition_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cond_cases) / sizeof(cond_cases[0]); i++) {
        const cond_case *tc = &cond_cases[i];
        req r;
        req_init(&r, tc->names, cond_values);
        av *item = tj_parse(&r.a, cond_item, 1);
        assert_non_null(item);
        expr *e = expr_parse(r.c, EXPR_CONDITION, tc->text, strlen(tc->text), &r.err);
        if (e == NULL)
            fail_msg("parse failed: %s: %s", tc->text, r.err.msg);
        bool result;
        assert_int_equal(expr_condition_eval(e, item, &result, &r.err), 0);
        if ((int)result != tc->expect)
            fail_msg("condition %s: got %d want %d", tc->text, result, tc->expect);
        req_free(&r);
    }
}

static void condition_on_missing_item(void **state)
{
    (void)state;
    req r;
    req_init(&r, NULL, "{\":v\":{\"S\":\"x\"}}");
    expr *e = expr_parse(r.c, EXPR_CONDITION, "attribute_not_exists(id)", 24, &r.err);
    assert_non_null(e);
    bool result = false;
    assert_int_equal(expr_condition_eval(e, NULL, &result, &r.err), 0);
    assert_true(result);
    e = expr_parse(r.c, EXPR_FILTER, "id = :v", 7, &r.err);
    assert_non_null(e);
    assert_int_equal(expr_condition_eval(e, NULL, &result, &r.err), 0);
    assert_false(result);
    assert_int_equal(expr_ctx_check_unused(r.c, &r.err), 0);
    req_free(&r);
}

/* ---- parse errors ---- */

typedef struct {
    expr_kind kind;
    const char *text;
    const char *names;
    const char *values;
    const char *msg;
} err_case;

#define V1 "{\":v\":{\"S\":\"x\"}}"
#define VN                                                                                         \
    "{\":v\":{\"S\":\"x\"},\":n\":{\"N\":\"10\"},\":n20\":{\"N\":\"20\"},\":s\":{\"S\":\"x\"}}"

static const err_case err_cases[] = {
    {EXPR_CONDITION, "", NULL, NULL,
     "Invalid ConditionExpression: The expression can not be empty;"},
    {EXPR_UPDATE, "   ", NULL, NULL, "Invalid UpdateExpression: The expression can not be empty;"},
    {EXPR_PROJECTION, "", NULL, NULL,
     "Invalid ProjectionExpression: The expression can not be empty;"},
    {EXPR_KEY_CONDITION, "", NULL, NULL,
     "Invalid KeyConditionExpression: The expression can not be empty;"},
    {EXPR_FILTER, "", NULL, NULL, "Invalid FilterExpression: The expression can not be empty;"},
    /* syntax errors quote the token and its neighbours */
    {EXPR_CONDITION, "a = = :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"=\", near: \"= = :v\""},
    {EXPR_UPDATE, "INVALID SYNTAX HERE", NULL, NULL,
     "Invalid UpdateExpression: Syntax error; token: \"INVALID\", near: \"INVALID SYNTAX\""},
    {EXPR_UPDATE, "ADD hits : incr", NULL, NULL,
     "Invalid UpdateExpression: Syntax error; token: \":\", near: \"hits : incr\""},
    {EXPR_UPDATE, "SET a = :v,", NULL, V1,
     "Invalid UpdateExpression: Syntax error; token: \"<EOF>\", near: \",\""},
    {EXPR_UPDATE, "SET #as, #b", "{\"#as\":\"a\",\"#b\":\"b\"}", NULL,
     "Invalid UpdateExpression: Syntax error; token: \",\", near: \"#as, #b\""},
    {EXPR_UPDATE, "SET a = b + c + d", NULL, NULL,
     "Invalid UpdateExpression: Syntax error; token: \"+\", near: \"c + d\""},
    {EXPR_UPDATE, "SET a = :v, REMOVE b", NULL, V1,
     "Invalid UpdateExpression: Syntax error; token: \"REMOVE\", near: \", REMOVE b\""},
    {EXPR_CONDITION, "a", NULL, NULL,
     "Invalid ConditionExpression: Syntax error; token: \"<EOF>\", near: \"a\""},
    {EXPR_CONDITION, "a = :v AND", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"<EOF>\", near: \"AND\""},
    {EXPR_CONDITION, "a = :v b", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"b\", near: \":v b\""},
    {EXPR_CONDITION, "a $ :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"$\", near: \"a $ :v\""},
    {EXPR_CONDITION, "_hidden = :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"_\", near: \"_hidden\""},
    {EXPR_CONDITION, "a < :l", NULL, "{\":l\":{\"L\":[{\"N\":\"1\"}]}}",
     "Invalid ConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: <, operand type: LIST"},
    {EXPR_FILTER, ":t >= a", NULL, "{\":t\":{\"BOOL\":true}}",
     "Invalid FilterExpression: Incorrect operand type for operator or function; operator "
     "or function: >=, operand type: BOOLEAN"},
    {EXPR_CONDITION, "a BETWEEN :m AND :m", NULL, "{\":m\":{\"M\":{}}}",
     "Invalid ConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: BETWEEN, operand type: MAP"},
    {EXPR_CONDITION, "a.1 = :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"1\", near: \".1 =\""},
    {EXPR_CONDITION, "(a = :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"<EOF>\", near: \":v\""},
    {EXPR_CONDITION, "NOT a", NULL, NULL,
     "Invalid ConditionExpression: Syntax error; token: \"<EOF>\", near: \"a\""},
    {EXPR_CONDITION, "a AND b = :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"AND\", near: \"a AND b\""},
    {EXPR_CONDITION, "a = :v OR b", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"<EOF>\", near: \"b\""},
    {EXPR_CONDITION, "a = \xc3\xa9", NULL, NULL,
     "Invalid ConditionExpression: Syntax error; token: \"\xc3\xa9\", near: \"= \xc3\xa9\""},
    {EXPR_CONDITION, "a BETWEEN :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \"<EOF>\", near: \":v\""},
    {EXPR_CONDITION, "a IN :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \":v\", near: \"IN :v\""},
    {EXPR_CONDITION, "size() > :v", NULL, V1,
     "Invalid ConditionExpression: Syntax error; token: \")\", near: \"() >\""},
    {EXPR_KEY_CONDITION, "id = :v AND", NULL, V1,
     "Invalid KeyConditionExpression: Syntax error; token: \"<EOF>\", near: \"AND\""},
    {EXPR_UPDATE, "SET a = :v REMOVE", NULL, V1,
     "Invalid UpdateExpression: Syntax error; token: \"<EOF>\", near: \"REMOVE\""},
    {EXPR_UPDATE, "SET a :v", NULL, V1,
     "Invalid UpdateExpression: Syntax error; token: \":v\", near: \"a :v\""},
    {EXPR_UPDATE, "REMOVE a = :v", NULL, V1,
     "Invalid UpdateExpression: Syntax error; token: \"=\", near: \"a = :v\""},
    {EXPR_UPDATE, "ADD a b", NULL, NULL,
     "Invalid UpdateExpression: Syntax error; token: \"b\", near: \"a b\""},
    {EXPR_PROJECTION, "a b", NULL, NULL,
     "Invalid ProjectionExpression: Syntax error; token: \"b\", near: \"a b\""},
    {EXPR_PROJECTION, "a,", NULL, NULL,
     "Invalid ProjectionExpression: Syntax error; token: \"<EOF>\", near: \",\""},
    {EXPR_PROJECTION, "a,,b", NULL, NULL,
     "Invalid ProjectionExpression: Syntax error; token: \",\", near: \",,b\""},
    {EXPR_PROJECTION, "a[x]", NULL, NULL,
     "Invalid ProjectionExpression: Syntax error; token: \"x\", near: \"[x]\""},
    /* reserved words, as written */
    {EXPR_CONDITION, "status = :v", NULL, V1,
     "Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: status"},
    {EXPR_FILTER, "a.Name = :v", NULL, V1,
     "Invalid FilterExpression: Attribute name is a reserved keyword; reserved keyword: Name"},
    {EXPR_PROJECTION, "id, size", NULL, NULL,
     "Invalid ProjectionExpression: Attribute name is a reserved keyword; reserved keyword: size"},
    {EXPR_UPDATE, "SET #s = :v, data = :v", "{\"#s\":\"status\"}", V1,
     "Invalid UpdateExpression: Attribute name is a reserved keyword; reserved keyword: data"},
    /* undefined placeholders */
    {EXPR_CONDITION, "#n = :v", NULL, V1,
     "Invalid ConditionExpression: An expression attribute name used in the document path is "
     "not defined; attribute name: #n"},
    {EXPR_UPDATE, "SET a = :w", NULL, V1,
     "Invalid UpdateExpression: An expression attribute value used in expression is not "
     "defined; attribute value: :w"},
    {EXPR_KEY_CONDITION, "id = :k", NULL, NULL,
     "Invalid KeyConditionExpression: An expression attribute value used in expression is not "
     "defined; attribute value: :k"},
    /* functions */
    {EXPR_CONDITION, "foo(a)", NULL, NULL,
     "Invalid ConditionExpression: Invalid function name; function: foo"},
    {EXPR_CONDITION, "if_not_exists(a, :v)", NULL, V1,
     "Invalid ConditionExpression: Invalid function name; function: if_not_exists"},
    {EXPR_CONDITION, "size(a)", NULL, NULL,
     "Invalid ConditionExpression: The function is not allowed to be used this way in an "
     "expression; function: size"},
    {EXPR_CONDITION, "attribute_exists(a) = :v", NULL, V1,
     "Invalid ConditionExpression: The function is not allowed to be used this way in an "
     "expression; function: attribute_exists"},
    {EXPR_CONDITION, "begins_with(a)", NULL, NULL,
     "Invalid ConditionExpression: Incorrect number of operands for operator or function; "
     "operator or function: begins_with, number of operands: 1"},
    {EXPR_CONDITION, "attribute_exists(a, b)", NULL, NULL,
     "Invalid ConditionExpression: Incorrect number of operands for operator or function; "
     "operator or function: attribute_exists, number of operands: 2"},
    {EXPR_CONDITION, "attribute_exists(:v)", NULL, V1,
     "Invalid ConditionExpression: Operator or function requires a document path; operator or "
     "function: attribute_exists"},
    {EXPR_CONDITION, "attribute_type(a, :n)", NULL, VN,
     "Invalid ConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: attribute_type, operand type: N"},
    {EXPR_CONDITION, "attribute_type(a, :t)", NULL, "{\":t\":{\"S\":\"FOO\"}}",
     "Invalid ConditionExpression: Invalid attribute type name found; type: FOO, valid types: "
     "{B,NULL,SS,BOOL,L,BS,N,NS,S,M}"},
    {EXPR_CONDITION, "begins_with(a, :n)", NULL, VN,
     "Invalid ConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: begins_with, operand type: N"},
    {EXPR_CONDITION, "size(:n) > :n", NULL, VN,
     "Invalid ConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: size, operand type: N"},
    {EXPR_CONDITION, "size(size(a)) > :n", NULL, VN,
     "Invalid ConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: size, operand type: N"},
    {EXPR_CONDITION, "a = a", NULL, NULL,
     "Invalid ConditionExpression: The first operand must be distinct from the remaining "
     "operands for this operator or function; operator: =, first operand: [a]"},
    {EXPR_CONDITION, "contains(a.b[1], a.b[1])", NULL, NULL,
     "Invalid ConditionExpression: The first operand must be distinct from the remaining "
     "operands for this operator or function; operator: contains, first operand: [a, b, [1]]"},
    {EXPR_CONDITION, "a BETWEEN :n AND :s", NULL, VN,
     "Invalid ConditionExpression: The BETWEEN operator requires same data type for lower and "
     "upper bounds; lower bound operand: AttributeValue: {N:10}, upper bound operand: "
     "AttributeValue: {S:x}"},
    {EXPR_CONDITION, "a BETWEEN :n20 AND :n", NULL, VN,
     "Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than "
     "or equal to lower bound; lower bound operand: AttributeValue: {N:20}, upper bound operand: "
     "AttributeValue: {N:10}"},
    {EXPR_CONDITION, "((a = :v))", NULL, V1,
     "Invalid ConditionExpression: The expression has redundant parentheses;"},
    {EXPR_CONDITION, "((a)) = :v", NULL, V1,
     "Invalid ConditionExpression: The expression has redundant parentheses;"},
    /* error precedence: reserved word before undefined name */
    {EXPR_CONDITION, "#x = :v AND status = :v", NULL, V1,
     "Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: status"},
    /* updates */
    {EXPR_UPDATE, "SET a = :v SET b = :v", NULL, V1,
     "Invalid UpdateExpression: The \"SET\" section can only be used once in an update "
     "expression;"},
    {EXPR_UPDATE, "REMOVE a REMOVE b", NULL, NULL,
     "Invalid UpdateExpression: The \"REMOVE\" section can only be used once in an update "
     "expression;"},
    {EXPR_UPDATE, "SET a = :v REMOVE a.b", NULL, V1,
     "Invalid UpdateExpression: Two document paths overlap with each other; must remove or "
     "rewrite one of these paths; path one: [a], path two: [a, b]"},
    {EXPR_UPDATE, "SET a = :v, a = :v", NULL, V1,
     "Invalid UpdateExpression: Two document paths overlap with each other; must remove or "
     "rewrite one of these paths; path one: [a], path two: [a]"},
    {EXPR_UPDATE, "SET a[1] = :v REMOVE a.b", NULL, V1,
     "Invalid UpdateExpression: Two document paths conflict with each other; must remove or "
     "rewrite one of these paths; path one: [a, [1]], path two: [a, b]"},
    {EXPR_UPDATE, "ADD a :s", NULL, VN,
     "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: "
     "ADD, operand type: STRING"},
    {EXPR_UPDATE, "ADD a :l", NULL, "{\":l\":{\"L\":[]}}",
     "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: "
     "ADD, operand type: LIST"},
    {EXPR_UPDATE, "DELETE a :n", NULL, VN,
     "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: "
     "DELETE, operand type: NUMBER"},
    {EXPR_UPDATE, "SET a = if_not_exists(:v, :v)", NULL, V1,
     "Invalid UpdateExpression: Operator or function requires a document path; operator or "
     "function: if_not_exists"},
    {EXPR_UPDATE, "SET a = list_append(:s, b)", NULL, VN,
     "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or "
     "function: list_append, operand type: S"},
    {EXPR_UPDATE, "SET a = list_append(b)", NULL, NULL,
     "Invalid UpdateExpression: Incorrect number of operands for operator or function; operator "
     "or function: list_append, number of operands: 1"},
    {EXPR_UPDATE, "SET a = :s + b", NULL, VN,
     "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or "
     "function: +, operand type: S"},
    {EXPR_UPDATE, "SET a = size(b)", NULL, NULL,
     "Invalid UpdateExpression: Invalid function name; function: size"},
    /* projections */
    {EXPR_PROJECTION, "a, a.b", NULL, NULL,
     "Invalid ProjectionExpression: Two document paths overlap with each other; must remove or "
     "rewrite one of these paths; path one: [a], path two: [a, b]"},
    {EXPR_PROJECTION, "a[0], a.b", NULL, NULL,
     "Invalid ProjectionExpression: Two document paths conflict with each other; must remove or "
     "rewrite one of these paths; path one: [a, [0]], path two: [a, b]"},
};

static void parse_error_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++) {
        const err_case *tc = &err_cases[i];
        req r;
        req_init(&r, tc->names, tc->values);
        expr *e = expr_parse(r.c, tc->kind, tc->text, strlen(tc->text), &r.err);
        if (e != NULL)
            fail_msg("expected an error for \"%s\"", tc->text);
        assert_int_equal(r.err.code, ERR_VALIDATION);
        if (strcmp(r.err.msg, tc->msg) != 0)
            fail_msg("\"%s\"\n  got:  %s\n  want: %s", tc->text, r.err.msg, tc->msg);
        req_free(&r);
    }
}

/* ---- limits ---- */

static void limits(void **state)
{
    (void)state;
    req r;
    req_init(&r, NULL, V1);
    char *text = malloc(8192);
    /* expression size: 4096 bytes accepted, 4097 rejected */
    memset(text, ' ', 8192);
    memcpy(text, "a = :v", 6);
    assert_non_null(expr_parse(r.c, EXPR_CONDITION, text, 4096, &r.err));
    assert_null(expr_parse(r.c, EXPR_FILTER, text, 4097, &r.err));
    assert_string_equal(r.err.msg, "Invalid FilterExpression: Expression size has exceeded the "
                                   "maximum allowed size; expression size: 4097");
    /* IN: 100 operands fine, 101 rejected */
    for (int count = 100; count <= 101; count++) {
        size_t n = (size_t)sprintf(text, "a IN (");
        for (int i = 0; i < count; i++)
            n += (size_t)sprintf(text + n, "%s:v", i ? "," : "");
        n += (size_t)sprintf(text + n, ")");
        expr *e = expr_parse(r.c, EXPR_CONDITION, text, n, &r.err);
        if (count == 100) {
            assert_non_null(e);
        } else {
            assert_null(e);
            assert_string_equal(r.err.msg,
                                "Invalid ConditionExpression: The IN operator is provided with too "
                                "many operands; number of operands: 101");
        }
    }
    /* operators: 300 fine, 301 rejected (comparisons and ANDs both count) */
    for (int ops = 299; ops <= 301; ops += 2) {
        int cmps = (ops + 1) / 2;
        size_t n = 0;
        for (int i = 0; i < cmps; i++)
            n += (size_t)sprintf(text + n, "%sa=:v", i ? " AND " : "");
        expr *e = expr_parse(r.c, EXPR_CONDITION, text, n, &r.err);
        if (ops < 301) {
            assert_non_null(e);
        } else {
            assert_null(e);
            assert_string_equal(r.err.msg, "Invalid ConditionExpression: The expression contains "
                                           "too many operators; operator count: 301");
        }
    }
    /* document path nesting: 32 levels fine, 33 rejected */
    for (int depth = 32; depth <= 33; depth++) {
        size_t n = 0;
        for (int i = 0; i < depth; i++)
            n += (size_t)sprintf(text + n, "%sa", i ? "." : "");
        expr *e = expr_parse(r.c, EXPR_PROJECTION, text, n, &r.err);
        if (depth == 32) {
            assert_non_null(e);
        } else {
            assert_null(e);
            assert_string_equal(r.err.msg, "Invalid ProjectionExpression: The document path has "
                                           "too many nesting levels; nesting levels: 33");
        }
    }
    /* placeholders: 255 bytes fine, 256 rejected */
    char ph[300];
    ph[0] = '#';
    memset(ph + 1, 'p', sizeof(ph) - 1);
    assert_int_equal(expr_ctx_add_name(r.c, ph, 255, "x", 1, &r.err), 0);
    assert_int_equal(expr_ctx_add_name(r.c, ph, 256, "x", 1, &r.err), -1);
    assert_string_equal(r.err.msg, "ExpressionAttributeNames contains invalid key: The expression "
                                   "attribute map contains a key that is too long; size of key: "
                                   "256");
    free(text);
    req_free(&r);
}

/* ---- context: names and values ---- */

static void placeholders(void **state)
{
    (void)state;
    req r;
    /* unused names are reported first, sorted */
    req_init(&r, "{\"#a\":\"a\",\"#c\":\"c\",\"#b\":\"b\"}",
             "{\":v\":{\"S\":\"x\"},\":w\":{\"S\":\"y\"}}");
    assert_non_null(expr_parse(r.c, EXPR_CONDITION, "#a = :v", 7, &r.err));
    assert_int_equal(expr_ctx_check_unused(r.c, &r.err), -1);
    assert_string_equal(r.err.msg, "Value provided in ExpressionAttributeNames unused in "
                                   "expressions: keys: {#b, #c}");
    assert_non_null(expr_parse(r.c, EXPR_PROJECTION, "#b, #c", 6, &r.err));
    assert_int_equal(expr_ctx_check_unused(r.c, &r.err), -1);
    assert_string_equal(r.err.msg, "Value provided in ExpressionAttributeValues unused in "
                                   "expressions: keys: {:w}");
    /* placeholders used by any of the request's expressions count */
    assert_non_null(expr_parse(r.c, EXPR_UPDATE, "SET x = :w", 10, &r.err));
    assert_int_equal(expr_ctx_check_unused(r.c, &r.err), 0);
    assert_true(expr_ctx_has_names(r.c));
    assert_true(expr_ctx_has_values(r.c));
    req_free(&r);

    /* malformed maps */
    req_init(&r, NULL, NULL);
    json_t *empty = json_object();
    assert_int_equal(expr_ctx_set_names_json(r.c, empty, &r.err), -1);
    assert_string_equal(r.err.msg, "ExpressionAttributeNames must not be empty");
    json_decref(empty);
    av *ev = tj_parse(&r.a, "{}", 1);
    assert_int_equal(expr_ctx_set_values(r.c, ev, &r.err), -1);
    assert_string_equal(r.err.msg, "ExpressionAttributeValues must not be empty");
    assert_int_equal(expr_ctx_add_name(r.c, "#a-b", 4, "x", 1, &r.err), -1);
    assert_string_equal(
        r.err.msg, "ExpressionAttributeNames contains invalid key: Syntax error; key: \"#a-b\"");
    assert_int_equal(expr_ctx_add_name(r.c, "#e", 2, "", 0, &r.err), -1);
    assert_string_equal(r.err.msg,
                        "ExpressionAttributeNames contains invalid value: Empty attribute name for "
                        "key #e");
    assert_int_equal(expr_ctx_add_name(r.c, "n", 1, "x", 1, &r.err), -1);
    assert_int_equal(expr_ctx_add_name(r.c, "#", 1, "x", 1, &r.err), -1);
    av *bad = tj_parse(&r.a, "{\"v\":{\"S\":\"x\"}}", 1);
    assert_int_equal(expr_ctx_set_values(r.c, bad, &r.err), -1);
    assert_string_equal(r.err.msg,
                        "ExpressionAttributeValues contains invalid key: Syntax error; key: \"v\"");
    assert_false(expr_ctx_has_values(r.c));
    assert_null(expr_ctx_names_json(r.c));
    assert_null(expr_ctx_values(r.c));
    json_t *nonstr = json_loads("{\"#a\":1}", 0, NULL);
    assert_int_equal(expr_ctx_set_names_json(r.c, nonstr, &r.err), -1);
    json_decref(nonstr);
    assert_int_equal(expr_ctx_check_unused(r.c, &r.err), 0);
    req_free(&r);
}

static void reserved_words(void **state)
{
    (void)state;
    assert_int_equal(expr_reserved_count(), 573);
    const char *yes[] = {"ABORT", "abort", "Zone",           "status", "NAME",  "size",
                         "DATA",  "ttl",   "LOCALTIMESTAMP", "COLUMN", "value", "year"};
    const char *no[] = {"", "id", "abortx", "zones", "foo", "LOCALTIMESTAMPS", "a_b"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        assert_true(expr_is_reserved(yes[i], strlen(yes[i])));
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        assert_false(expr_is_reserved(no[i], strlen(no[i])));
}

static void mentions(void **state)
{
    (void)state;
    req r;
    req_init(&r, "{\"#k\":\"id\"}", VN);
    expr *e = expr_parse(r.c, EXPR_FILTER, "a.b = :v OR size(#k) > :n", 25, &r.err);
    assert_non_null(e);
    assert_true(expr_mentions_attr(e, "a", 1));
    assert_true(expr_mentions_attr(e, "id", 2));
    assert_false(expr_mentions_attr(e, "b", 1));
    assert_int_equal(expr_get_kind(e), EXPR_FILTER);
    req_free(&r);
}

/* ---- projections ---- */

typedef struct {
    const char *text;
    const char *names;
    const char *expect;
} proj_case;

static const char *proj_item =
    "{\"a\":{\"M\":{\"b\":{\"N\":\"1\"},\"c\":{\"N\":\"2\"}}},"
    "\"l\":{\"L\":[{\"S\":\"x\"},{\"M\":{\"p\":{\"S\":\"q\"},\"r\":{\"S\":\"s\"}}},{\"S\":\"z\"}]},"
    "\"k\":{\"S\":\"v\"},\"e\":{\"M\":{}}}";

static const proj_case proj_cases[] = {
    {"k", NULL, "{\"k\":{\"S\":\"v\"}}"},
    {"k, a", NULL, "{\"k\":{\"S\":\"v\"},\"a\":{\"M\":{\"b\":{\"N\":\"1\"},\"c\":{\"N\":\"2\"}}}}"},
    {"a.b", NULL, "{\"a\":{\"M\":{\"b\":{\"N\":\"1\"}}}}"},
    {"a.c, a.b", NULL, "{\"a\":{\"M\":{\"b\":{\"N\":\"1\"},\"c\":{\"N\":\"2\"}}}}"},
    {"l[2], l[1].p", NULL, "{\"l\":{\"L\":[{\"M\":{\"p\":{\"S\":\"q\"}}},{\"S\":\"z\"}]}}"},
    {"l[1].r, l[1].p", NULL, "{\"l\":{\"L\":[{\"M\":{\"p\":{\"S\":\"q\"},\"r\":{\"S\":\"s\"}}}]}}"},
    {"nope, a.nope, l[7], l[0].x, k.x", NULL, "{}"},
    {"#k, #a.#b", "{\"#k\":\"k\",\"#a\":\"a\",\"#b\":\"b\"}",
     "{\"k\":{\"S\":\"v\"},\"a\":{\"M\":{\"b\":{\"N\":\"1\"}}}}"},
    {"e", NULL, "{\"e\":{\"M\":{}}}"},
};

static void projection_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(proj_cases) / sizeof(proj_cases[0]); i++) {
        const proj_case *tc = &proj_cases[i];
        req r;
        req_init(&r, tc->names, NULL);
        av *item = tj_parse(&r.a, proj_item, 1);
        assert_non_null(item);
        expr *e = expr_parse(r.c, EXPR_PROJECTION, tc->text, strlen(tc->text), &r.err);
        if (e == NULL)
            fail_msg("parse %s: %s", tc->text, r.err.msg);
        av out;
        assert_int_equal(expr_project(e, item, &r.a, &out, &r.err), 0);
        assert_item_json(&out, tc->expect);
        assert_int_equal(expr_ctx_check_unused(r.c, &r.err), 0);
        req_free(&r);
    }
    req r;
    req_init(&r, NULL, NULL);
    expr *e = expr_parse(r.c, EXPR_PROJECTION, "a, b.c", 6, &r.err);
    assert_non_null(e);
    assert_int_equal(expr_projection_count(e), 2);
    size_t len;
    const char *top = expr_projection_top_name(e, 1, &len);
    assert_int_equal(len, 1);
    assert_memory_equal(top, "b", 1);
    av out;
    assert_int_equal(expr_project(e, NULL, &r.a, &out, &r.err), 0);
    assert_item_json(&out, "{}");
    req_free(&r);
}

/* ---- updates ---- */

typedef struct {
    const char *text;
    const char *names;
    const char *old;    /* NULL: no item */
    const char *expect; /* new item, or NULL when an error is expected */
    const char *msg;    /* error message (prefix match) */
} upd_case;

static const char *upd_values =
    "{\":s\":{\"S\":\"new\"},\":one\":{\"N\":\"1\"},\":zero\":{\"N\":\"0\"},"
    "\":l2\":{\"L\":[{\"N\":\"4\"}]},\":ssc\":{\"SS\":[\"c\"]},\":ssa\":{\"SS\":[\"a\"]},"
    "\":ssab\":{\"SS\":[\"b\",\"a\"]},\":nsx\":{\"NS\":[\"7\"]},"
    "\":big\":{\"N\":\"9.9999999999999999999999999999999999999E+125\"},"
    "\":frac\":{\"N\":\"0.1\"}}";

#define OLD                                                                                        \
    "{\"id\":{\"S\":\"k\"},\"n\":{\"N\":\"5\"},\"l\":{\"L\":[{\"N\":\"1\"},{\"N\":\"2\"},"         \
    "{\"N\":\"3\"}]},\"m\":{\"M\":{\"x\":{\"S\":\"y\"}}},\"ss\":{\"SS\":[\"a\",\"b\"]}}"
#define REST_L  "\"l\":{\"L\":[{\"N\":\"1\"},{\"N\":\"2\"},{\"N\":\"3\"}]}"
#define REST_M  "\"m\":{\"M\":{\"x\":{\"S\":\"y\"}}}"
#define REST_SS "\"ss\":{\"SS\":[\"a\",\"b\"]}"
#define ID      "\"id\":{\"S\":\"k\"}"
#define N5      "\"n\":{\"N\":\"5\"}"

static const upd_case upd_cases[] = {
    {"SET a = :s", NULL, OLD,
     "{" ID "," N5 "," REST_L "," REST_M "," REST_SS ",\"a\":{\"S\":\"new\"}}", NULL},
    {"SET n = n + :one", NULL, OLD,
     "{" ID ",\"n\":{\"N\":\"6\"}," REST_L "," REST_M "," REST_SS "}", NULL},
    {"SET n = n - :one", NULL, OLD,
     "{" ID ",\"n\":{\"N\":\"4\"}," REST_L "," REST_M "," REST_SS "}", NULL},
    {"SET n = :one - n", NULL, OLD,
     "{" ID ",\"n\":{\"N\":\"-4\"}," REST_L "," REST_M "," REST_SS "}", NULL},
    {"SET n = n + :frac", NULL, OLD,
     "{" ID ",\"n\":{\"N\":\"5.1\"}," REST_L "," REST_M "," REST_SS "}", NULL},
    {"SET n = (n + :one)", NULL, OLD,
     "{" ID ",\"n\":{\"N\":\"6\"}," REST_L "," REST_M "," REST_SS "}", NULL},
    {"set #c = if_not_exists(#c, :zero) + :one", "{\"#c\":\"cnt\"}", OLD,
     "{" ID "," N5 "," REST_L "," REST_M "," REST_SS ",\"cnt\":{\"N\":\"1\"}}", NULL},
    {"SET n = if_not_exists(n, :zero)", NULL, OLD,
     "{" ID "," N5 "," REST_L "," REST_M "," REST_SS "}", NULL},
    {"SET a = n, n = :one", NULL, OLD, /* operands see the old item */
     "{" ID ",\"n\":{\"N\":\"1\"}," REST_L "," REST_M "," REST_SS ",\"a\":{\"N\":\"5\"}}", NULL},
    {"SET l = list_append(l, :l2)", NULL, OLD,
     "{" ID "," N5
     ",\"l\":{\"L\":[{\"N\":\"1\"},{\"N\":\"2\"},{\"N\":\"3\"},{\"N\":\"4\"}]}," REST_M "," REST_SS
     "}",
     NULL},
    {"SET l = list_append(:l2, l)", NULL, OLD,
     "{" ID "," N5
     ",\"l\":{\"L\":[{\"N\":\"4\"},{\"N\":\"1\"},{\"N\":\"2\"},{\"N\":\"3\"}]}," REST_M "," REST_SS
     "}",
     NULL},
    {"SET l[1] = :s", NULL, OLD,
     "{" ID "," N5 ",\"l\":{\"L\":[{\"N\":\"1\"},{\"S\":\"new\"},{\"N\":\"3\"}]}," REST_M
     "," REST_SS "}",
     NULL},
    {"SET l[10] = :s", NULL, OLD,
     "{" ID "," N5
     ",\"l\":{\"L\":[{\"N\":\"1\"},{\"N\":\"2\"},{\"N\":\"3\"},{\"S\":\"new\"}]}," REST_M
     "," REST_SS "}",
     NULL},
    {"SET m.x = :s", NULL, OLD,
     "{" ID "," N5 "," REST_L ",\"m\":{\"M\":{\"x\":{\"S\":\"new\"}}}," REST_SS "}", NULL},
    {"SET m.a = :s", NULL, OLD,
     "{" ID "," N5 "," REST_L ",\"m\":{\"M\":{\"a\":{\"S\":\"new\"},\"x\":{\"S\":\"y\"}}}," REST_SS
     "}",
     NULL},
    {"SET m.x = :s, m.z = :one", NULL, OLD,
     "{" ID "," N5 "," REST_L ",\"m\":{\"M\":{\"x\":{\"S\":\"new\"},\"z\":{\"N\":\"1\"}}}," REST_SS
     "}",
     NULL},
    {"REMOVE n, m.x", NULL, OLD, "{" ID "," REST_L ",\"m\":{\"M\":{}}," REST_SS "}", NULL},
    {"REMOVE l[0], l[2]", NULL, OLD,
     "{" ID "," N5 ",\"l\":{\"L\":[{\"N\":\"2\"}]}," REST_M "," REST_SS "}", NULL},
    {"REMOVE l[5], nope, m.nope", NULL, OLD, "{" ID "," N5 "," REST_L "," REST_M "," REST_SS "}",
     NULL},
    {"ADD n :one", NULL, OLD, "{" ID ",\"n\":{\"N\":\"6\"}," REST_L "," REST_M "," REST_SS "}",
     NULL},
    {"ADD newn :one", NULL, OLD,
     "{" ID "," N5 "," REST_L "," REST_M "," REST_SS ",\"newn\":{\"N\":\"1\"}}", NULL},
    {"ADD ss :ssc", NULL, OLD,
     "{" ID "," N5 "," REST_L "," REST_M ",\"ss\":{\"SS\":[\"a\",\"b\",\"c\"]}}", NULL},
    {"ADD ss :ssab", NULL, OLD, "{" ID "," N5 "," REST_L "," REST_M "," REST_SS "}", NULL},
    {"ADD m.k :nsx", NULL, OLD,
     "{" ID "," N5 "," REST_L ",\"m\":{\"M\":{\"k\":{\"NS\":[\"7\"]},\"x\":{\"S\":\"y\"}}}," REST_SS
     "}",
     NULL},
    {"DELETE ss :ssa", NULL, OLD, "{" ID "," N5 "," REST_L "," REST_M ",\"ss\":{\"SS\":[\"b\"]}}",
     NULL},
    {"DELETE ss :ssab", NULL, OLD, "{" ID "," N5 "," REST_L "," REST_M "}", NULL},
    {"DELETE nope :ssa", NULL, OLD, "{" ID "," N5 "," REST_L "," REST_M "," REST_SS "}", NULL},
    {"SET a = :s REMOVE n ADD c :one DELETE ss :ssa", NULL, OLD,
     "{" ID "," REST_L "," REST_M ",\"ss\":{\"SS\":[\"b\"]},\"a\":{\"S\":\"new\"},"
     "\"c\":{\"N\":\"1\"}}",
     NULL},
    {"SET a = :s", NULL, NULL, "{\"a\":{\"S\":\"new\"}}", NULL},
    {"REMOVE a", NULL, NULL, "{}", NULL},
    /* runtime errors */
    {"SET n = nope + :one", NULL, OLD, NULL,
     "The provided expression refers to an attribute that does not exist in the item"},
    {"SET a = nope", NULL, OLD, NULL,
     "The provided expression refers to an attribute that does not exist in the item"},
    {"SET a = m + :one", NULL, OLD, NULL,
     "An operand in the update expression has an incorrect data type"},
    {"SET a = list_append(l, m)", NULL, OLD, NULL,
     "An operand in the update expression has an incorrect data type"},
    {"ADD ss :one", NULL, OLD, NULL,
     "An operand in the update expression has an incorrect data type"},
    {"ADD ss :nsx", NULL, OLD, NULL,
     "An operand in the update expression has an incorrect data type"},
    {"ADD m :one", NULL, OLD, NULL,
     "An operand in the update expression has an incorrect data type"},
    {"DELETE n :ssa", NULL, OLD, NULL,
     "An operand in the update expression has an incorrect data type"},
    {"SET nope.x = :s", NULL, OLD, NULL,
     "The document path provided in the update expression is invalid for update"},
    {"SET n.x = :s", NULL, OLD, NULL,
     "The document path provided in the update expression is invalid for update"},
    {"SET m[0] = :s", NULL, OLD, NULL,
     "The document path provided in the update expression is invalid for update"},
    {"SET l[7].x = :s", NULL, OLD, NULL,
     "The document path provided in the update expression is invalid for update"},
    {"SET a.b = :s", NULL, NULL, NULL,
     "The document path provided in the update expression is invalid for update"},
    {"ADD nope.x :one", NULL, OLD, NULL,
     "The document path provided in the update expression is invalid for update"},
    {"SET n = :big + :big", NULL, OLD, NULL, "Number overflow"},
};

static void update_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(upd_cases) / sizeof(upd_cases[0]); i++) {
        const upd_case *tc = &upd_cases[i];
        req r;
        req_init(&r, tc->names, upd_values);
        av *old = tc->old ? tj_parse(&r.a, tc->old, 1) : NULL;
        char *before = old ? tj_dump_item(old) : NULL;
        expr *e = expr_parse(r.c, EXPR_UPDATE, tc->text, strlen(tc->text), &r.err);
        if (e == NULL)
            fail_msg("parse %s: %s", tc->text, r.err.msg);
        av out;
        int rc = expr_update_apply(e, old, &r.a, &out, &r.err);
        if (tc->expect != NULL) {
            if (rc != 0)
                fail_msg("update %s: %s", tc->text, r.err.msg);
            assert_item_json(&out, tc->expect);
        } else {
            if (rc == 0)
                fail_msg("update %s: expected an error", tc->text);
            assert_int_equal(r.err.code, ERR_VALIDATION);
            if (strncmp(r.err.msg, tc->msg, strlen(tc->msg)) != 0)
                fail_msg("update %s\n  got:  %s\n  want: %s", tc->text, r.err.msg, tc->msg);
        }
        if (old != NULL) { /* the old item is never modified */
            char *after = tj_dump_item(old);
            assert_string_equal(before, after);
            free(after);
        }
        free(before);
        req_free(&r);
    }
}

static void update_nesting_limit(void **state)
{
    (void)state;
    req r;
    char json[2048], path[256];
    size_t n = 0;
    for (int i = 0; i < 16; i++)
        n += (size_t)sprintf(json + n, "{\"M\":{\"k\":");
    n += (size_t)sprintf(json + n, "{\"S\":\"x\"}");
    for (int i = 0; i < 16; i++)
        n += (size_t)sprintf(json + n, "}}");
    char values[2200];
    sprintf(values, "{\":deep\":%s}", json);
    for (int extra = 0; extra <= 1; extra++) {
        req_init(&r, NULL, values);
        /* a holds 15 (+1) nested maps; replacing the innermost value with 16 more maps
         * gives 31 levels (the most DynamoDB allows in one attribute), then 32 */
        char old[1024];
        size_t o = (size_t)sprintf(old, "{\"a\":");
        for (int i = 0; i < 15 + extra; i++)
            o += (size_t)sprintf(old + o, "{\"M\":{\"k\":");
        o += (size_t)sprintf(old + o, "{\"S\":\"x\"}");
        for (int i = 0; i < 15 + extra; i++)
            o += (size_t)sprintf(old + o, "}}");
        sprintf(old + o, "}");
        av *item = tj_parse(&r.a, old, 1);
        assert_non_null(item);
        size_t p = (size_t)sprintf(path, "SET a");
        for (int i = 0; i < 15 + extra; i++)
            p += (size_t)sprintf(path + p, ".k");
        p += (size_t)sprintf(path + p, " = :deep");
        expr *e = expr_parse(r.c, EXPR_UPDATE, path, p, &r.err);
        assert_non_null(e);
        av out;
        int rc = expr_update_apply(e, item, &r.a, &out, &r.err);
        if (extra == 0) {
            if (rc != 0)
                fail_msg("%s: %s", path, r.err.msg);
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(r.err.code, ERR_VALIDATION);
            assert_non_null(strstr(r.err.msg, "Nesting Levels have exceeded supported limits"));
        }
        req_free(&r);
    }
}

static void update_returned_and_keys(void **state)
{
    (void)state;
    req r;
    req_init(&r, NULL, upd_values);
    av *old = tj_parse(&r.a, OLD, 1);
    const char *text = "SET m.x = :s, n = n + :one REMOVE ss";
    expr *e = expr_parse(r.c, EXPR_UPDATE, text, strlen(text), &r.err);
    assert_non_null(e);
    av nw, ret;
    assert_int_equal(expr_update_apply(e, old, &r.a, &nw, &r.err), 0);
    assert_int_equal(expr_update_returned(e, old, &r.a, &ret, &r.err), 0);
    assert_item_json(&ret, "{\"m\":{\"M\":{\"x\":{\"S\":\"y\"}}},\"n\":{\"N\":\"5\"}," REST_SS "}");
    assert_int_equal(expr_update_returned(e, &nw, &r.a, &ret, &r.err), 0);
    assert_item_json(&ret, "{\"m\":{\"M\":{\"x\":{\"S\":\"new\"}}},\"n\":{\"N\":\"6\"}}");

    expr_key_schema ks = {"id", 2, AV_S, "sk", 2, AV_N};
    assert_int_equal(expr_update_check_keys(e, &ks, &r.err), 0);
    const char *bad[] = {"SET id = :s", "REMOVE sk", "ADD sk :one", "SET id.x = :s"};
    for (size_t i = 0; i < 4; i++) {
        expr *k = expr_parse(r.c, EXPR_UPDATE, bad[i], strlen(bad[i]), &r.err);
        assert_non_null(k);
        assert_int_equal(expr_update_check_keys(k, &ks, &r.err), -1);
        const char *want = i == 0 || i == 3 ? "One or more parameter values were invalid: Cannot "
                                              "update attribute id. This attribute is part of the "
                                              "key"
                                            : "One or more parameter values were invalid: Cannot "
                                              "update attribute sk. This attribute is part of the "
                                              "key";
        assert_string_equal(r.err.msg, want);
    }
    req_free(&r);
}

/* ---- key conditions ---- */

typedef struct {
    const char *text;
    int range_s; /* 1: sort key of type S (else N) */
    expr_sk_op op;
    const char *msg; /* NULL: success */
} key_case;

static const char *key_values =
    "{\":s\":{\"S\":\"p\"},\":n\":{\"N\":\"5\"},\":n2\":{\"N\":\"9\"},\":pre\":{\"S\":\"ab\"}}";

static const key_case key_cases[] = {
    {"id = :s", 0, EXPR_SK_NONE, NULL},
    {"id = :s AND sk = :n", 0, EXPR_SK_EQ, NULL},
    {"id = :s AND sk < :n", 0, EXPR_SK_LT, NULL},
    {"id = :s AND sk <= :n", 0, EXPR_SK_LE, NULL},
    {"id = :s AND sk > :n", 0, EXPR_SK_GT, NULL},
    {"sk >= :n AND id = :s", 0, EXPR_SK_GE, NULL},
    {":n < sk AND :s = id", 0, EXPR_SK_GT, NULL},
    {"(id = :s) AND (sk BETWEEN :n AND :n2)", 0, EXPR_SK_BETWEEN, NULL},
    {"id = :s AND begins_with(sk, :pre)", 1, EXPR_SK_BEGINS_WITH, NULL},
    {"sk = :n", 0, 0, "Query condition missed key schema element: id"},
    {"id = :s AND extra = :n", 0, 0, "Query condition missed key schema element: sk"},
    {"id > :s", 0, 0, "Query key condition not supported"},
    {"id = :s OR sk = :n", 0, 0, "Invalid operator used in KeyConditionExpression: OR"},
    {"NOT id = :s", 0, 0, "Invalid operator used in KeyConditionExpression: NOT"},
    {"id = :s AND sk IN (:n)", 0, 0, "Invalid operator used in KeyConditionExpression: IN"},
    {"id = :s AND sk <> :n", 0, 0, "Invalid operator used in KeyConditionExpression: <>"},
    {"id = :s AND attribute_exists(sk)", 0, 0,
     "Invalid operator used in KeyConditionExpression: attribute_exists"},
    {"id = :s AND size(sk) > :n", 0, 0, "KeyConditionExpressions cannot contain nested operations"},
    {"id = :s AND sk.x = :n", 0, 0,
     "KeyConditionExpressions cannot have conditions on nested attributes"},
    {"id = :s AND sk = id", 0, 0,
     "Invalid condition in KeyConditionExpression: Multiple attribute names used in one "
     "condition"},
    {"id = :s AND :n = :n2", 0, 0,
     "Invalid condition in KeyConditionExpression: No key attribute specified"},
    {"id = :s AND id = :s", 0, 0,
     "KeyConditionExpressions must only contain one condition per key"},
    {"id = :s AND sk > :n AND sk < :n2", 0, 0,
     "KeyConditionExpressions must only contain one condition per key"},
    {"id = :n", 0, 0,
     "One or more parameter values were invalid: Condition parameter type does not match schema "
     "type"},
    {"id = :s AND sk = :s", 0, 0,
     "One or more parameter values were invalid: Condition parameter type does not match schema "
     "type"},
    {"id = :s AND begins_with(sk, :pre)", 0, 0,
     "Invalid KeyConditionExpression: Incorrect operand type for operator or function; operator "
     "or function: begins_with, operand type: N"},
};

static void key_condition_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(key_cases) / sizeof(key_cases[0]); i++) {
        const key_case *tc = &key_cases[i];
        req r;
        req_init(&r, NULL, key_values);
        expr *e = expr_parse(r.c, EXPR_KEY_CONDITION, tc->text, strlen(tc->text), &r.err);
        if (e == NULL)
            fail_msg("parse %s: %s", tc->text, r.err.msg);
        expr_key_schema ks = {"id", 2, AV_S, "sk", 2, tc->range_s ? AV_S : AV_N};
        expr_key_cond kc;
        int rc = expr_key_condition(e, &ks, &kc, &r.err);
        if (tc->msg == NULL) {
            if (rc != 0)
                fail_msg("key condition %s: %s", tc->text, r.err.msg);
            assert_int_equal(kc.sk_op, tc->op);
            assert_non_null(kc.pk);
            assert_int_equal(kc.pk->type, AV_S);
        } else {
            assert_int_equal(rc, -1);
            if (strcmp(r.err.msg, tc->msg) != 0)
                fail_msg("key condition %s\n  got:  %s\n  want: %s", tc->text, r.err.msg, tc->msg);
        }
        req_free(&r);
    }
    /* hash-only table: a second condition is not supported */
    req r;
    req_init(&r, NULL, key_values);
    expr *e = expr_parse(r.c, EXPR_KEY_CONDITION, "id = :s AND sk = :n", 19, &r.err);
    expr_key_schema hash_only = {"id", 2, AV_S, NULL, 0, 0};
    expr_key_cond kc;
    assert_int_equal(expr_key_condition(e, &hash_only, &kc, &r.err), -1);
    assert_string_equal(r.err.msg, "Query key condition not supported");
    req_free(&r);
}

static void key_condition_match(void **state)
{
    (void)state;
    arena a;
    arena_init(&a, 1 << 20);
    av *v5 = tj_parse(&a, "{\"N\":\"5\"}", 0), *v9 = tj_parse(&a, "{\"N\":\"9\"}", 0);
    av *v7 = tj_parse(&a, "{\"N\":\"7\"}", 0), *s = tj_parse(&a, "{\"S\":\"abc\"}", 0);
    av *pre = tj_parse(&a, "{\"S\":\"ab\"}", 0), *other = tj_parse(&a, "{\"S\":\"b\"}", 0);
    expr_key_cond kc = {v5, EXPR_SK_BETWEEN, v5, v9};
    assert_true(expr_key_cond_match_sk(&kc, v7));
    assert_true(expr_key_cond_match_sk(&kc, v5));
    assert_true(expr_key_cond_match_sk(&kc, v9));
    assert_false(expr_key_cond_match_sk(&kc, s));
    kc.sk_op = EXPR_SK_GT;
    assert_false(expr_key_cond_match_sk(&kc, v5));
    assert_true(expr_key_cond_match_sk(&kc, v7));
    kc.sk_op = EXPR_SK_LE;
    assert_true(expr_key_cond_match_sk(&kc, v5));
    kc.sk_op = EXPR_SK_BEGINS_WITH;
    kc.sk1 = pre;
    assert_true(expr_key_cond_match_sk(&kc, s));
    assert_false(expr_key_cond_match_sk(&kc, other));
    assert_false(expr_key_cond_match_sk(&kc, v5));
    kc.sk_op = EXPR_SK_NONE;
    assert_true(expr_key_cond_match_sk(&kc, other));
    arena_free(&a);
}

/* ---- legacy parameters ---- */

typedef struct {
    int which; /* 0 Expected, 1 ScanFilter, 2 KeyConditions, 3 AttributesToGet, 4 AttributeUpdates
                */
    const char *json;
    const char *conditional_operator;
    const char *text; /* expected text, or NULL for an error */
    const char *msg;
} legacy_case;

static const legacy_case legacy_cases[] = {
    {0, "{\"a\":{\"ComparisonOperator\":\"EQ\"}}", NULL, NULL,
     "One or more parameter values were invalid: Value or AttributeValueList must be used with "
     "ComparisonOperator: EQ for Attribute: a"},
    {0, "{\"a\":{\"Value\":{\"S\":\"x\"}}}", NULL, "(#l00000 = :l00001)", NULL},
    {0, "{\"a\":{\"Exists\":false}}", NULL, "(attribute_not_exists(#l00000))", NULL},
    {0, "{\"a\":{\"Exists\":true,\"Value\":{\"N\":\"1\"}},\"b\":{\"ComparisonOperator\":\"NULL\"}}",
     "OR", "(#l00000 = :l00001) OR (attribute_not_exists(#l00002))", NULL},
    {0,
     "{\"a\":{\"ComparisonOperator\":\"BETWEEN\",\"AttributeValueList\":[{\"N\":\"1\"},{\"N\":"
     "\"2\"}]}}",
     NULL, "(#l00000 BETWEEN :l00001 AND :l00002)", NULL},
    {0,
     "{\"a\":{\"ComparisonOperator\":\"IN\",\"AttributeValueList\":[{\"S\":\"x\"},{\"S\":\"y\"}]}}",
     NULL, "(#l00000 IN (:l00001, :l00002))", NULL},
    {0, "{\"a\":{\"ComparisonOperator\":\"NOT_CONTAINS\",\"Value\":{\"S\":\"x\"}}}", NULL,
     "(attribute_exists(#l00000) AND NOT contains(#l00000, :l00001))", NULL},
    {0, "{\"a\":{\"Exists\":true}}", NULL, NULL,
     "One or more parameter values were invalid: Value must be provided when Exists is true for "
     "Attribute: a"},
    {0, "{\"a\":{}}", NULL, NULL,
     "One or more parameter values were invalid: Value must be provided when Exists is null for "
     "Attribute: a"},
    {0, "{\"a\":{\"Exists\":false,\"Value\":{\"S\":\"x\"}}}", NULL, NULL,
     "One or more parameter values were invalid: Value cannot be used when Exists is false for "
     "Attribute: a"},
    {0, "{\"a\":{\"Exists\":true,\"ComparisonOperator\":\"EQ\"}}", NULL, NULL,
     "One or more parameter values were invalid: Exists and ComparisonOperator cannot be used "
     "together for Attribute: a"},
    {0, "{\"a\":{\"AttributeValueList\":[{\"S\":\"x\"}]}}", NULL, NULL,
     "One or more parameter values were invalid: AttributeValueList can only be used with a "
     "ComparisonOperator for Attribute: a"},
    {0, "{\"a\":{\"ComparisonOperator\":\"EQ\",\"Value\":{\"S\":\"x\"},\"AttributeValueList\":[]}}",
     NULL, NULL,
     "One or more parameter values were invalid: Value and AttributeValueList cannot be used "
     "together for Attribute: a"},
    {1, "{\"a\":{\"ComparisonOperator\":\"BETWEEN\",\"AttributeValueList\":[{\"N\":\"1\"}]}}", NULL,
     NULL,
     "One or more parameter values were invalid: Invalid number of argument(s) for the BETWEEN "
     "ComparisonOperator"},
    {1, "{\"a\":{\"ComparisonOperator\":\"NULL\",\"AttributeValueList\":[{\"N\":\"1\"}]}}", NULL,
     NULL,
     "One or more parameter values were invalid: Invalid number of argument(s) for the NULL "
     "ComparisonOperator"},
    {1, "{\"a\":{\"ComparisonOperator\":\"IN\",\"AttributeValueList\":[]}}", NULL, NULL,
     "One or more parameter values were invalid: Invalid number of argument(s) for the IN "
     "ComparisonOperator"},
    {1,
     "{\"a\":{\"ComparisonOperator\":\"BETWEEN\",\"AttributeValueList\":[{\"N\":\"1\"},{\"S\":"
     "\"x\"}]}}",
     NULL, NULL,
     "One or more parameter values were invalid: AttributeValues inside AttributeValueList must "
     "be of same type"},
    {1,
     "{\"a\":{\"ComparisonOperator\":\"BETWEEN\",\"AttributeValueList\":[{\"N\":\"2\"},{\"N\":"
     "\"1\"}]}}",
     NULL, NULL,
     "The BETWEEN condition was provided a range where the lower bound is greater than the upper "
     "bound"},
    {1, "{\"a\":{\"ComparisonOperator\":\"BEGINS_WITH\",\"AttributeValueList\":[{\"N\":\"1\"}]}}",
     NULL, NULL,
     "One or more parameter values were invalid: ComparisonOperator BEGINS_WITH is not valid for "
     "N AttributeValue type"},
    {1,
     "{\"a\":{\"ComparisonOperator\":\"GT\",\"AttributeValueList\":[{\"N\":\"1\"}]},"
     "\"b\":{\"ComparisonOperator\":\"NOT_NULL\"}}",
     "AND", "(#l00000 > :l00001) AND (attribute_exists(#l00002))", NULL},
    {2, "{\"id\":{\"ComparisonOperator\":\"EQ\",\"AttributeValueList\":[{\"S\":\"x\"}]}}", NULL,
     "(#l00000 = :l00001)", NULL},
    {2, "{\"id\":{\"ComparisonOperator\":\"NE\",\"AttributeValueList\":[{\"S\":\"x\"}]}}", NULL,
     NULL, "Attempted conditional constraint is not an indexable operation"},
    {3, "[\"a\",\"b\"]", NULL, "#l00000, #l00001", NULL},
    {3, "[\"a\",\"a\"]", NULL, NULL,
     "One or more parameter values were invalid: Duplicate value in attribute name: a"},
    {4, "{\"a\":{\"Value\":{\"S\":\"x\"}},\"b\":{\"Action\":\"DELETE\"}}", NULL,
     "SET #l00000 = :l00001 REMOVE #l00002", NULL},
    {4,
     "{\"a\":{\"Action\":\"ADD\",\"Value\":{\"N\":\"1\"}},\"b\":{\"Action\":\"DELETE\",\"Value\":{"
     "\"SS\":[\"x\"]}}}",
     NULL, "ADD #l00000 :l00001 DELETE #l00002 :l00003", NULL},
    {4, "{\"a\":{\"Action\":\"ADD\",\"Value\":{\"L\":[{\"S\":\"x\"}]}}}", NULL,
     "SET #l00000 = list_append(if_not_exists(#l00000, :l00001), :l00002)", NULL},
    {4, "{\"a\":{\"Action\":\"PUT\"}}", NULL, NULL,
     "One or more parameter values were invalid: Only DELETE action is allowed when no attribute "
     "value is specified"},
    {4, "{\"a\":{\"Action\":\"DELETE\",\"Value\":{\"S\":\"x\"}}}", NULL, NULL,
     "One or more parameter values were invalid: DELETE action with value is not supported for "
     "the type S"},
    {4, "{\"a\":{\"Action\":\"ADD\",\"Value\":{\"S\":\"x\"}}}", NULL, NULL,
     "One or more parameter values were invalid: ADD action is not supported for the type S"},
};

static void legacy_table(void **state)
{
    (void)state;
    static const expr_kind kinds[] = {EXPR_CONDITION, EXPR_FILTER, EXPR_KEY_CONDITION,
                                      EXPR_PROJECTION, EXPR_UPDATE};
    for (size_t i = 0; i < sizeof(legacy_cases) / sizeof(legacy_cases[0]); i++) {
        const legacy_case *tc = &legacy_cases[i];
        req r;
        req_init(&r, NULL, NULL);
        json_t *j = json_loads(tc->json, JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        json_t *op = tc->conditional_operator ? json_string(tc->conditional_operator) : NULL;
        const char *text = NULL;
        switch (tc->which) {
        case 0:
            text = expr_legacy_expected(r.c, j, op, &r.err);
            break;
        case 1:
            text = expr_legacy_filter(r.c, "ScanFilter", j, op, &r.err);
            break;
        case 2:
            text = expr_legacy_key_conditions(r.c, j, &r.err);
            break;
        case 3:
            text = expr_legacy_attributes_to_get(r.c, j, &r.err);
            break;
        default:
            text = expr_legacy_attribute_updates(r.c, j, &r.err);
            break;
        }
        if (tc->text != NULL) {
            if (text == NULL)
                fail_msg("legacy %s: %s", tc->json, r.err.msg);
            assert_string_equal(text, tc->text);
            /* the rendered text parses, and uses every generated placeholder */
            expr *e = expr_parse(r.c, kinds[tc->which], text, strlen(text), &r.err);
            if (e == NULL)
                fail_msg("legacy text %s: %s", text, r.err.msg);
            assert_int_equal(expr_ctx_check_unused(r.c, &r.err), 0);
        } else {
            assert_null(text);
            if (strcmp(r.err.msg, tc->msg) != 0)
                fail_msg("legacy %s\n  got:  %s\n  want: %s", tc->json, r.err.msg, tc->msg);
        }
        json_decref(j);
        json_decref(op);
        req_free(&r);
    }
}

static void legacy_semantics(void **state)
{
    (void)state;
    req r;
    req_init(&r, NULL, NULL);
    json_t *exp = json_loads("{\"n\":{\"ComparisonOperator\":\"GE\",\"AttributeValueList\":"
                             "[{\"N\":\"5\"}]},\"s\":{\"Value\":{\"S\":\"x\"}}}",
                             0, NULL);
    json_t *upd = json_loads("{\"n\":{\"Action\":\"ADD\",\"Value\":{\"N\":\"2\"}},"
                             "\"l\":{\"Action\":\"ADD\",\"Value\":{\"L\":[{\"N\":\"9\"}]}}}",
                             0, NULL);
    const char *ct = expr_legacy_expected(r.c, exp, NULL, &r.err);
    const char *ut = expr_legacy_attribute_updates(r.c, upd, &r.err);
    assert_non_null(ct);
    assert_non_null(ut);
    expr *ce = expr_parse(r.c, EXPR_CONDITION, ct, strlen(ct), &r.err);
    expr *ue = expr_parse(r.c, EXPR_UPDATE, ut, strlen(ut), &r.err);
    assert_non_null(ce);
    assert_non_null(ue);
    assert_int_equal(expr_ctx_check_unused(r.c, &r.err), 0);
    av *item = tj_parse(&r.a, "{\"n\":{\"N\":\"5\"},\"s\":{\"S\":\"x\"}}", 1);
    bool ok;
    assert_int_equal(expr_condition_eval(ce, item, &ok, &r.err), 0);
    assert_true(ok);
    av out;
    assert_int_equal(expr_update_apply(ue, item, &r.a, &out, &r.err), 0);
    assert_item_json(&out,
                     "{\"n\":{\"N\":\"7\"},\"s\":{\"S\":\"x\"},\"l\":{\"L\":[{\"N\":\"9\"}]}}");
    json_decref(exp);
    json_decref(upd);
    /* a ctx with user placeholders refuses legacy conversion */
    req_free(&r);
    req_init(&r, "{\"#a\":\"a\"}", NULL);
    json_t *atg = json_loads("[\"a\"]", 0, NULL);
    assert_null(expr_legacy_attributes_to_get(r.c, atg, &r.err));
    json_decref(atg);
    req_free(&r);
}

typedef struct {
    unsigned present, allowed;
    const char *msg;
} mix_case;

static const mix_case mix_cases[] = {
    {EXPR_P_ATTRIBUTES_TO_GET | EXPR_P_PROJECTION_EXPRESSION, EXPR_P_PROJECTION_EXPRESSION,
     "Can not use both expression and non-expression parameters in the same request: "
     "Non-expression parameters: {AttributesToGet} Expression parameters: {ProjectionExpression}"},
    {EXPR_P_EXPECTED | EXPR_P_ATTRIBUTE_UPDATES | EXPR_P_UPDATE_EXPRESSION,
     EXPR_P_UPDATE_EXPRESSION | EXPR_P_CONDITION_EXPRESSION,
     "Can not use both expression and non-expression parameters in the same request: "
     "Non-expression parameters: {AttributeUpdates, Expected} Expression parameters: "
     "{UpdateExpression}"},
    {EXPR_P_KEY_CONDITIONS | EXPR_P_FILTER_EXPRESSION,
     EXPR_P_KEY_CONDITION_EXPRESSION | EXPR_P_FILTER_EXPRESSION | EXPR_P_PROJECTION_EXPRESSION,
     NULL},
    {EXPR_P_NAMES | EXPR_P_ATTRIBUTES_TO_GET, EXPR_P_PROJECTION_EXPRESSION,
     "ExpressionAttributeNames can only be specified when using expressions"},
    {EXPR_P_VALUES | EXPR_P_NAMES | EXPR_P_PROJECTION_EXPRESSION,
     EXPR_P_PROJECTION_EXPRESSION | EXPR_P_FILTER_EXPRESSION,
     "ExpressionAttributeValues can only be specified when using expressions: FilterExpression "
     "is null"},
    {EXPR_P_VALUES, EXPR_P_UPDATE_EXPRESSION | EXPR_P_CONDITION_EXPRESSION,
     "ExpressionAttributeValues can only be specified when using expressions: UpdateExpression "
     "and ConditionExpression are null"},
    {EXPR_P_VALUES | EXPR_P_NAMES | EXPR_P_CONDITION_EXPRESSION,
     EXPR_P_UPDATE_EXPRESSION | EXPR_P_CONDITION_EXPRESSION, NULL},
    {EXPR_P_EXPECTED | EXPR_P_CONDITIONAL_OPERATOR, EXPR_P_CONDITION_EXPRESSION, NULL},
    /* Query and Scan with everything, in DynamoDB's order. */
    {EXPR_P_ATTRIBUTES_TO_GET | EXPR_P_QUERY_FILTER | EXPR_P_CONDITIONAL_OPERATOR |
         EXPR_P_KEY_CONDITIONS | EXPR_P_PROJECTION_EXPRESSION | EXPR_P_FILTER_EXPRESSION |
         EXPR_P_KEY_CONDITION_EXPRESSION,
     EXPR_P_KEY_CONDITION_EXPRESSION | EXPR_P_FILTER_EXPRESSION | EXPR_P_PROJECTION_EXPRESSION,
     "Can not use both expression and non-expression parameters in the same request: "
     "Non-expression parameters: {AttributesToGet, QueryFilter, ConditionalOperator, "
     "KeyConditions} Expression parameters: {ProjectionExpression, FilterExpression, "
     "KeyConditionExpression}"},
    {EXPR_P_ATTRIBUTES_TO_GET | EXPR_P_SCAN_FILTER | EXPR_P_CONDITIONAL_OPERATOR |
         EXPR_P_PROJECTION_EXPRESSION | EXPR_P_FILTER_EXPRESSION,
     EXPR_P_FILTER_EXPRESSION | EXPR_P_PROJECTION_EXPRESSION,
     "Can not use both expression and non-expression parameters in the same request: "
     "Non-expression parameters: {AttributesToGet, ScanFilter, ConditionalOperator} "
     "Expression parameters: {ProjectionExpression, FilterExpression}"},
    {EXPR_P_VALUES | EXPR_P_QUERY_FILTER,
     EXPR_P_KEY_CONDITION_EXPRESSION | EXPR_P_FILTER_EXPRESSION | EXPR_P_PROJECTION_EXPRESSION,
     "ExpressionAttributeValues can only be specified when using expressions: FilterExpression "
     "and KeyConditionExpression are null"},
};

static void param_mix(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(mix_cases) / sizeof(mix_cases[0]); i++) {
        strata_err err;
        int rc = expr_check_param_mix(mix_cases[i].present, mix_cases[i].allowed, &err);
        if (mix_cases[i].msg == NULL) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, -1);
            assert_string_equal(err.msg, mix_cases[i].msg);
        }
    }
}

static void values_json_and_replica_reparse(void **state)
{
    (void)state;
    req r;
    req_init(&r, NULL, NULL);
    json_t *bad = json_loads("{\":v\":{\"NS\":[]}}", 0, NULL);
    assert_int_equal(expr_ctx_set_values_json(r.c, bad, &r.err), -1);
    assert_int_equal(r.err.code, ERR_VALIDATION);
    assert_true(strncmp(r.err.msg, "ExpressionAttributeValues contains invalid value: ", 50) == 0);
    assert_non_null(strstr(r.err.msg, " for key :v"));
    json_decref(bad);
    bad = json_loads("{\":v\":{\"NS\":[]},\"x\":{\"S\":\"a\"}}", 0, NULL);
    assert_int_equal(expr_ctx_set_values_json(r.c, bad, &r.err), -1);
    assert_string_equal(r.err.msg,
                        "ExpressionAttributeValues contains invalid key: Syntax error; key: \"x\"");
    json_decref(bad);
    req_free(&r);

    /* a legacy request: convert, then ship (text, names, values) to a "replica" that
     * re-parses and must reach the same result */
    req_init(&r, NULL, NULL);
    json_t *upd = json_loads("{\"n\":{\"Action\":\"ADD\",\"Value\":{\"N\":\"2\"}},"
                             "\"s\":{\"Value\":{\"S\":\"x\"}}}",
                             0, NULL);
    const char *text = expr_legacy_attribute_updates(r.c, upd, &r.err);
    assert_non_null(text);
    json_t *names = expr_ctx_names_json(r.c);
    const av *values = expr_ctx_values(r.c);
    assert_non_null(names);
    assert_non_null(values);
    av *item = tj_parse(&r.a, "{\"n\":{\"N\":\"1\"}}", 1);
    expr *e1 = expr_parse(r.c, EXPR_UPDATE, text, strlen(text), &r.err);
    assert_non_null(e1);
    av out1;
    assert_int_equal(expr_update_apply(e1, item, &r.a, &out1, &r.err), 0);

    req replica;
    req_init(&replica, NULL, NULL);
    av copy;
    assert_int_equal(av_copy(&replica.a, values, &copy), 0);
    assert_int_equal(expr_ctx_set_names_json(replica.c, names, &replica.err), 0);
    assert_int_equal(expr_ctx_set_values(replica.c, &copy, &replica.err), 0);
    expr *e2 = expr_parse(replica.c, EXPR_UPDATE, text, strlen(text), &replica.err);
    assert_non_null(e2);
    assert_int_equal(expr_ctx_check_unused(replica.c, &replica.err), 0);
    av out2;
    assert_int_equal(expr_update_apply(e2, item, &replica.a, &out2, &replica.err), 0);
    char *a1 = tj_dump_item(&out1), *a2 = tj_dump_item(&out2);
    assert_string_equal(a1, a2);
    assert_string_equal(a1, "{\"n\":{\"N\":\"3\"},\"s\":{\"S\":\"x\"}}");
    free(a1);
    free(a2);
    json_decref(names);
    json_decref(upd);
    req_free(&replica);
    req_free(&r);
}

static void deep_nesting_is_bounded(void **state)
{
    (void)state;
    req r;
    req_init(&r, NULL, V1);
    char *text = malloc(EXPR_TEXT_MAX);
    /* 2000 nested parentheses, NOTs and function calls: an error, never a crash */
    const char *open[] = {"(", "NOT ", "size("};
    for (int k = 0; k < 3; k++) {
        size_t n = 0, w = strlen(open[k]);
        while (n + w + 8 < EXPR_TEXT_MAX) {
            memcpy(text + n, open[k], w);
            n += w;
        }
        memcpy(text + n, "a = :v", 6);
        n += 6;
        assert_null(expr_parse(r.c, EXPR_CONDITION, text, n, &r.err));
        assert_int_equal(r.err.code, ERR_VALIDATION);
    }
    /* but legitimate nesting works */
    const char *ok = "NOT NOT NOT (((a = :v) AND NOT (a = :v)) OR (a = :v))";
    assert_non_null(expr_parse(r.c, EXPR_CONDITION, ok, strlen(ok), &r.err));
    free(text);
    req_free(&r);
}

static void arena_exhaustion_is_an_error(void **state)
{
    (void)state;
    /* every allocation failure surfaces as ERR_NOMEM, never a crash */
    const char *text = "SET a = list_append(if_not_exists(a, :l), :l), b.c[1] = :l REMOVE d";
    for (size_t limit = 1024; limit < 200000; limit += 1024) {
        arena a;
        arena_init(&a, limit);
        strata_err err;
        expr_ctx *c = expr_ctx_new(&a);
        if (c == NULL) {
            arena_free(&a);
            continue;
        }
        json_t *vj = json_loads("{\":l\":{\"L\":[{\"S\":\"x\"}]}}", 0, NULL);
        if (expr_ctx_set_values_json(c, vj, &err) == 0) {
            expr *e = expr_parse(c, EXPR_UPDATE, text, strlen(text), &err);
            if (e == NULL)
                assert_int_equal(err.code, ERR_NOMEM);
        } else {
            assert_int_equal(err.code, ERR_NOMEM);
        }
        json_decref(vj);
        arena_free(&a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(condition_table),
        cmocka_unit_test(condition_on_missing_item),
        cmocka_unit_test(parse_error_table),
        cmocka_unit_test(limits),
        cmocka_unit_test(placeholders),
        cmocka_unit_test(reserved_words),
        cmocka_unit_test(mentions),
        cmocka_unit_test(projection_table),
        cmocka_unit_test(update_table),
        cmocka_unit_test(update_nesting_limit),
        cmocka_unit_test(update_returned_and_keys),
        cmocka_unit_test(key_condition_table),
        cmocka_unit_test(key_condition_match),
        cmocka_unit_test(legacy_table),
        cmocka_unit_test(legacy_semantics),
        cmocka_unit_test(param_mix),
        cmocka_unit_test(values_json_and_replica_reparse),
        cmocka_unit_test(deep_nesting_is_bounded),
        cmocka_unit_test(arena_exhaustion_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
