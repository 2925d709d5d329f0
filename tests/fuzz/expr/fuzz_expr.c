/*
 * libFuzzer harness for storage/expr. The input is split at NUL bytes into
 *   <kind byte><expression text> \0 <names JSON> \0 <values DynamoDB JSON> \0 <item JSON>
 * Kind (byte % 10): 0 condition, 1 filter, 2 key condition, 3 projection, 4 update,
 * 5..9 the legacy converters fed with the names segment as their JSON parameter.
 * A first byte >= 0xC0 selects generated mode instead: the remaining bytes drive a small
 * grammar that writes mostly valid expressions over a fixed request and item.
 * Every path is exercised the way the API layer will: build the ctx, parse, check
 * unused placeholders, then evaluate against the item. Must never crash, hang or leak.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "storage/data/ddbjson.h"
#include "storage/expr/expr.h"

#define FUZZ_ARENA_LIMIT (32u << 20)

static const char *next_part(const char **p, const char *end, size_t *len)
{
    const char *start = *p;
    const char *nul = start < end ? memchr(start, '\0', (size_t)(end - start)) : NULL;
    const char *stop = nul ? nul : end;
    *len = (size_t)(stop - start);
    *p = nul ? nul + 1 : end;
    return start;
}

static json_t *load_json(const char *s, size_t len)
{
    if (len == 0)
        return NULL;
    return json_loadb(s, len, JSON_DECODE_ANY, NULL);
}

/* The invariants storage/data/value.h promises every consumer: sorted unique map names,
 * non-empty sorted unique sets. Results of updates and projections must keep them. */
static void check_invariants(const av *v, int depth)
{
    if (depth > 64)
        __builtin_trap();
    switch (v->type) {
    case AV_M:
        for (uint32_t i = 0; i < v->u.map.count; i++) {
            if (i > 0) {
                const av_attr *x = &v->u.map.attrs[i - 1], *y = &v->u.map.attrs[i];
                uint32_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
                int c = memcmp(x->name, y->name, n);
                if (c > 0 || (c == 0 && x->name_len >= y->name_len))
                    __builtin_trap();
            }
            check_invariants(&v->u.map.attrs[i].value, depth + 1);
        }
        break;
    case AV_L:
        for (uint32_t i = 0; i < v->u.list.count; i++)
            check_invariants(&v->u.list.elems[i], depth + 1);
        break;
    case AV_SS:
    case AV_NS:
    case AV_BS:
        if (v->u.list.count == 0)
            __builtin_trap();
        for (uint32_t i = 1; i < v->u.list.count; i++)
            if (av_cmp_scalar(&v->u.list.elems[i - 1], &v->u.list.elems[i]) >= 0)
                __builtin_trap();
        break;
    default:
        break;
    }
}

static void evaluate(expr *e, expr_kind kind, const av *item, arena *a)
{
    strata_err err;
    bool result;
    av out, out2;
    static const expr_key_schema schemas[2] = {
        {"id", 2, AV_S, NULL, 0, 0},
        {"id", 2, AV_S, "sk", 2, AV_N},
    };
    switch (kind) {
    case EXPR_CONDITION:
    case EXPR_FILTER:
        expr_condition_eval(e, item, &result, &err);
        break;
    case EXPR_PROJECTION:
        if (expr_project(e, item, a, &out, &err) == 0)
            check_invariants(&out, 0);
        break;
    case EXPR_UPDATE:
        (void)expr_update_check_keys(e, &schemas[1], &err);
        if (expr_update_apply(e, item, a, &out, &err) == 0) {
            check_invariants(&out, 0);
            /* deterministic: a second application gives the same item */
            av again;
            if (expr_update_apply(e, item, a, &again, &err) != 0 || !av_equal(&out, &again))
                __builtin_trap();
            expr_update_returned(e, &out, a, &out2, &err);
            expr_update_returned(e, item, a, &out2, &err);
        }
        break;
    case EXPR_KEY_CONDITION:
        for (int i = 0; i < 2; i++) {
            expr_key_cond kc;
            if (expr_key_condition(e, &schemas[i], &kc, &err) == 0 && item != NULL)
                (void)expr_key_cond_match_sk(&kc, av_map_get(item, "sk", 2));
        }
        expr_condition_eval(e, item, &result, &err);
        break;
    }
    (void)expr_mentions_attr(e, "id", 2);
}

static void run_legacy(int which, const json_t *param, const av *item, arena *a)
{
    strata_err err;
    expr_ctx *c = expr_ctx_new(a);
    if (c == NULL || param == NULL)
        return;
    const char *text = NULL;
    expr_kind kind = EXPR_CONDITION;
    json_t *op = json_string("OR");
    switch (which) {
    case 5:
        text = expr_legacy_expected(c, param, op, &err);
        break;
    case 6:
        text = expr_legacy_filter(c, "QueryFilter", param, NULL, &err);
        kind = EXPR_FILTER;
        break;
    case 7:
        text = expr_legacy_key_conditions(c, param, &err);
        kind = EXPR_KEY_CONDITION;
        break;
    case 8:
        text = expr_legacy_attributes_to_get(c, param, &err);
        kind = EXPR_PROJECTION;
        break;
    default:
        text = expr_legacy_attribute_updates(c, param, &err);
        kind = EXPR_UPDATE;
        break;
    }
    json_decref(op);
    if (text == NULL || text[0] == '\0')
        return;
    expr *e = expr_parse(c, kind, text, strlen(text), &err);
    if (e != NULL && expr_ctx_check_unused(c, &err) == 0)
        evaluate(e, kind, item, a);
}

/* ---- generated mode: well-formed-ish expressions over a fixed request, so the fuzzer
 * spends its time in evaluation and update application rather than in the lexer. ---- */

typedef struct {
    const uint8_t *p, *end;
    char out[EXPR_TEXT_MAX + 64];
    size_t len;
} gen;

static unsigned pick(gen *g, unsigned n)
{
    unsigned v = g->p < g->end ? *g->p++ : 0;
    return n ? v % n : 0;
}

static void emit(gen *g, const char *s)
{
    size_t n = strlen(s);
    if (g->len + n < EXPR_TEXT_MAX) {
        memcpy(g->out + g->len, s, n);
        g->len += n;
    }
}

static void gen_path(gen *g)
{
    static const char *const heads[] = {"a", "b", "l", "m", "s", "ss", "ns", "#a", "#l", "#m", "x"};
    static const char *const fields[] = {".a", ".b", ".c", ".x", ".#a", "[0]", "[1]", "[2]", "[7]"};
    emit(g, heads[pick(g, 11)]);
    for (unsigned i = 0, n = pick(g, 4); i < n; i++)
        emit(g, fields[pick(g, 9)]);
}

static void gen_value(gen *g)
{
    static const char *const vals[] = {":n1", ":n2", ":s", ":ss", ":ns",
                                       ":l",  ":m",  ":b", ":t",  ":big"};
    emit(g, vals[pick(g, 10)]);
}

static void gen_operand(gen *g)
{
    switch (pick(g, 4)) {
    case 0:
        gen_value(g);
        break;
    case 1:
        emit(g, "size(");
        gen_path(g);
        emit(g, ")");
        break;
    default:
        gen_path(g);
        break;
    }
}

static void gen_cond(gen *g, int depth)
{
    static const char *const cmps[] = {" = ", " <> ", " < ", " <= ", " > ", " >= "};
    unsigned c = depth > 6 ? pick(g, 4) : pick(g, 8);
    switch (c) {
    case 0:
        gen_operand(g);
        emit(g, cmps[pick(g, 6)]);
        gen_operand(g);
        break;
    case 1:
        gen_operand(g);
        emit(g, " BETWEEN ");
        gen_operand(g);
        emit(g, " AND ");
        gen_operand(g);
        break;
    case 2:
        gen_operand(g);
        emit(g, " IN (");
        for (unsigned i = 0, n = 1 + pick(g, 3); i < n; i++) {
            if (i)
                emit(g, ", ");
            gen_operand(g);
        }
        emit(g, ")");
        break;
    case 3: {
        static const char *const fns[] = {"attribute_exists(", "attribute_not_exists(",
                                          "begins_with(", "contains(", "attribute_type("};
        unsigned f = pick(g, 5);
        emit(g, fns[f]);
        gen_path(g);
        if (f >= 2) {
            emit(g, ", ");
            if (f == 4)
                emit(g, ":t");
            else
                gen_operand(g);
        }
        emit(g, ")");
        break;
    }
    case 4:
    case 5:
        gen_cond(g, depth + 1);
        emit(g, c == 4 ? " AND " : " OR ");
        gen_cond(g, depth + 1);
        break;
    case 6:
        emit(g, "NOT ");
        gen_cond(g, depth + 1);
        break;
    default:
        emit(g, "(");
        gen_cond(g, depth + 1);
        emit(g, ")");
        break;
    }
}

static void gen_set_value(gen *g)
{
    switch (pick(g, 5)) {
    case 0:
        gen_operand(g);
        emit(g, pick(g, 2) ? " + " : " - ");
        gen_operand(g);
        break;
    case 1:
        emit(g, "if_not_exists(");
        gen_path(g);
        emit(g, ", ");
        gen_operand(g);
        emit(g, ")");
        break;
    case 2:
        emit(g, "list_append(");
        gen_operand(g);
        emit(g, ", ");
        gen_operand(g);
        emit(g, ")");
        break;
    default:
        gen_operand(g);
        break;
    }
}

static void gen_update(gen *g)
{
    static const char *const secs[] = {"SET ", "REMOVE ", "ADD ", "DELETE "};
    bool used[4] = {false};
    for (unsigned s = 0, ns = 1 + pick(g, 4); s < ns; s++) {
        unsigned k = pick(g, 4);
        if (used[k])
            continue;
        used[k] = true;
        if (g->len)
            emit(g, " ");
        emit(g, secs[k]);
        for (unsigned i = 0, n = 1 + pick(g, 3); i < n; i++) {
            if (i)
                emit(g, ", ");
            gen_path(g);
            if (k == 0) {
                emit(g, " = ");
                gen_set_value(g);
            } else if (k >= 2) {
                emit(g, " ");
                gen_value(g);
            }
        }
    }
}

static const char *gen_names = "{\"#a\":\"a\",\"#l\":\"l\",\"#m\":\"m\"}";
static const char *gen_values =
    "{\":n1\":{\"N\":\"1\"},\":n2\":{\"N\":\"-2.5\"},\":s\":{\"S\":\"x\"},"
    "\":ss\":{\"SS\":[\"x\",\"y\"]},\":ns\":{\"NS\":[\"1\",\"2\"]},\":l\":{\"L\":[{\"N\":\"1\"}]},"
    "\":m\":{\"M\":{\"a\":{\"S\":\"z\"}}},\":b\":{\"B\":\"AQI=\"},\":t\":{\"S\":\"L\"},"
    "\":big\":{\"N\":\"9.9999999999999999999999999999999999999E+125\"}}";
static const char *gen_item =
    "{\"a\":{\"N\":\"3\"},\"b\":{\"S\":\"xyz\"},\"s\":{\"SS\":[\"x\"]},\"ss\":{\"SS\":[\"y\",\"z\"]"
    "},"
    "\"ns\":{\"NS\":[\"2\"]},\"l\":{\"L\":[{\"N\":\"1\"},{\"M\":{\"a\":{\"N\":\"1\"}}},"
    "{\"L\":[{\"S\":\"q\"}]}]},\"m\":{\"M\":{\"a\":{\"M\":{\"b\":{\"N\":\"0\"}}},\"x\":{\"B\":\"AQ="
    "=\"}}}}";

static void run_generated(const uint8_t *data, size_t size, arena *a)
{
    static const expr_kind kinds[4] = {EXPR_CONDITION, EXPR_PROJECTION, EXPR_UPDATE,
                                       EXPR_KEY_CONDITION};
    gen g = {.p = data + 1, .end = data + size};
    expr_kind kind = kinds[pick(&g, 4)];
    if (kind == EXPR_UPDATE) {
        gen_update(&g);
    } else if (kind == EXPR_PROJECTION) {
        for (unsigned i = 0, n = 1 + pick(&g, 4); i < n; i++) {
            if (i)
                emit(&g, ", ");
            gen_path(&g);
        }
    } else {
        gen_cond(&g, 0);
    }
    strata_err err;
    expr_ctx *c = expr_ctx_new(a);
    json_t *jn = json_loads(gen_names, 0, NULL);
    json_t *jv = json_loads(gen_values, 0, NULL);
    json_t *ji = json_loads(gen_item, 0, NULL);
    av item;
    if (c != NULL && expr_ctx_set_names_json(c, jn, &err) == 0 &&
        expr_ctx_set_values_json(c, jv, &err) == 0 && ddbjson_to_item(ji, a, &item, &err) == 0) {
        expr *e = expr_parse(c, kind, g.out, g.len, &err);
        if (e != NULL)
            evaluate(e, kind, &item, a);
    }
    json_decref(jn);
    json_decref(jv);
    json_decref(ji);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] >= 0xC0) { /* generated mode */
        arena ga;
        arena_init(&ga, FUZZ_ARENA_LIMIT);
        run_generated(data, size, &ga);
        arena_free(&ga);
        return 0;
    }
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    int which = data[0] % 10;
    size_t tlen, nlen, vlen, ilen;
    const char *text = next_part(&p, end, &tlen);
    const char *names = next_part(&p, end, &nlen);
    const char *values = next_part(&p, end, &vlen);
    const char *itemj = next_part(&p, end, &ilen);

    arena a;
    arena_init(&a, FUZZ_ARENA_LIMIT);
    strata_err err;
    json_t *jn = load_json(names, nlen);
    json_t *jv = load_json(values, vlen);
    json_t *ji = load_json(itemj, ilen);
    av item, vals;
    const av *itemp = NULL;
    if (ji != NULL && ddbjson_to_item(ji, &a, &item, &err) == 0)
        itemp = &item;

    if (which >= 5) {
        run_legacy(which, jn, itemp, &a);
        goto done;
    }
    static const expr_kind kinds[5] = {EXPR_CONDITION, EXPR_FILTER, EXPR_KEY_CONDITION,
                                       EXPR_PROJECTION, EXPR_UPDATE};
    expr_kind kind = kinds[which];
    expr_ctx *c = expr_ctx_new(&a);
    if (c == NULL)
        goto done;
    if (jn != NULL && expr_ctx_set_names_json(c, jn, &err) != 0)
        goto done;
    if (jv != NULL && ddbjson_to_item(jv, &a, &vals, &err) == 0 &&
        expr_ctx_set_values(c, &vals, &err) != 0)
        goto done;
    expr *e = expr_parse(c, kind, text, tlen, &err);
    if (e == NULL)
        goto done;
    (void)expr_ctx_check_unused(c, &err);
    evaluate(e, kind, itemp, &a);
done:
    json_decref(jn);
    json_decref(jv);
    json_decref(ji);
    arena_free(&a);
    return 0;
}
