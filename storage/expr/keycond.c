/*
 * KeyConditionExpression: the parsed condition is checked against the shape DynamoDB
 * accepts (one equality on the partition key, optionally AND one sort-key predicate)
 * and against the key schema, and reduced to an expr_key_cond.
 */
#include <string.h>

#include "storage/expr/expr_int.h"

typedef struct {
    const expr_path *path;
    expr_sk_op op;
    const av *v1, *v2;
} key_leaf;

static expr_sk_op op_from_tok(tok_type t, bool flipped)
{
    switch (t) {
    case T_EQ:
        return EXPR_SK_EQ;
    case T_LT:
        return flipped ? EXPR_SK_GT : EXPR_SK_LT;
    case T_LE:
        return flipped ? EXPR_SK_GE : EXPR_SK_LE;
    case T_GT:
        return flipped ? EXPR_SK_LT : EXPR_SK_GT;
    case T_GE:
        return flipped ? EXPR_SK_LE : EXPR_SK_GE;
    default:
        return EXPR_SK_NONE;
    }
}

static const char *func_name(func_id f)
{
    switch (f) {
    case F_ATTRIBUTE_EXISTS:
        return "attribute_exists";
    case F_ATTRIBUTE_NOT_EXISTS:
        return "attribute_not_exists";
    case F_ATTRIBUTE_TYPE:
        return "attribute_type";
    case F_CONTAINS:
        return "contains";
    default:
        return "?";
    }
}

/* Checks one leaf's operands: exactly one top-level path, the rest values. */
static int leaf_operands(node **args, uint32_t nargs, int *path_at, strata_err *err)
{
    *path_at = -1;
    for (uint32_t i = 0; i < nargs; i++) {
        node *a = args[i];
        if (a->kind == N_FUNC)
            return strata_err_set(err, ERR_VALIDATION,
                                  "KeyConditionExpressions cannot contain nested operations");
        if (a->kind != N_PATH)
            continue;
        if (*path_at >= 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Invalid condition in KeyConditionExpression: Multiple "
                                  "attribute names used in one condition");
        if (a->path.count > 1)
            return strata_err_set(err, ERR_VALIDATION,
                                  "KeyConditionExpressions cannot have conditions on nested "
                                  "attributes");
        *path_at = (int)i;
    }
    if (*path_at < 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "Invalid condition in KeyConditionExpression: No key attribute "
                              "specified");
    return 0;
}

static int collect(const node *n, key_leaf *leaves, uint32_t *count, strata_err *err)
{
    int at;
    key_leaf leaf = {0};
    switch (n->kind) {
    case N_AND:
        if (collect(n->args[0], leaves, count, err) != 0)
            return -1;
        return collect(n->args[1], leaves, count, err);
    case N_OR:
        return strata_err_set(err, ERR_VALIDATION,
                              "Invalid operator used in KeyConditionExpression: OR");
    case N_NOT:
        return strata_err_set(err, ERR_VALIDATION,
                              "Invalid operator used in KeyConditionExpression: NOT");
    case N_IN:
        return strata_err_set(err, ERR_VALIDATION,
                              "Invalid operator used in KeyConditionExpression: IN");
    case N_CMP:
        if (n->op == T_NE)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Invalid operator used in KeyConditionExpression: <>");
        if (leaf_operands(n->args, 2, &at, err) != 0)
            return -1;
        leaf.path = &n->args[at]->path;
        leaf.op = op_from_tok(n->op, at == 1);
        leaf.v1 = n->args[1 - at]->value;
        break;
    case N_BETWEEN:
        if (n->args[0]->kind != N_PATH)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Invalid condition in KeyConditionExpression: BETWEEN operator "
                                  "must have the key attribute as its first operand");
        if (leaf_operands(n->args, 3, &at, err) != 0)
            return -1;
        leaf.path = &n->args[0]->path;
        leaf.op = EXPR_SK_BETWEEN;
        leaf.v1 = n->args[1]->value;
        leaf.v2 = n->args[2]->value;
        break;
    case N_FUNC:
        if (n->func == F_SIZE)
            return strata_err_set(err, ERR_VALIDATION,
                                  "KeyConditionExpressions cannot contain nested operations");
        if (n->func != F_BEGINS_WITH)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Invalid operator used in KeyConditionExpression: %s",
                                  func_name(n->func));
        if (n->args[0]->kind != N_PATH)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Invalid condition in KeyConditionExpression: begins_with "
                                  "operator must have the key attribute as its first operand");
        if (leaf_operands(n->args, n->nargs, &at, err) != 0)
            return -1;
        leaf.path = &n->args[0]->path;
        leaf.op = EXPR_SK_BEGINS_WITH;
        leaf.v1 = n->args[1]->value;
        break;
    default:
        return strata_err_set(err, ERR_VALIDATION, "Query key condition not supported");
    }
    for (uint32_t i = 0; i < *count; i++) {
        const path_elem *a = &leaves[i].path->elems[0], *b = &leaf.path->elems[0];
        if (a->len == b->len && memcmp(a->name, b->name, a->len) == 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "KeyConditionExpressions must only contain one condition per "
                                  "key");
    }
    if (*count >= 2)
        return strata_err_set(err, ERR_VALIDATION, "Conditions can be of length 1 or 2 only");
    leaves[(*count)++] = leaf;
    return 0;
}

static bool leaf_is(const key_leaf *l, const char *name, size_t len)
{
    const path_elem *h = &l->path->elems[0];
    return name != NULL && h->len == len && memcmp(h->name, name, len) == 0;
}

static int check_type(const key_leaf *l, av_type t, strata_err *err)
{
    if (l->op == EXPR_SK_BEGINS_WITH && t == AV_N)
        return strata_err_set(err, ERR_VALIDATION,
                              "Invalid KeyConditionExpression: Incorrect operand type for operator "
                              "or function; operator or function: begins_with, operand type: N");
    if ((l->v1 != NULL && l->v1->type != t) || (l->v2 != NULL && l->v2->type != t))
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values were invalid: Condition parameter "
                              "type does not match schema type");
    return 0;
}

int expr_key_condition(const expr *e, const expr_key_schema *schema, expr_key_cond *out,
                       strata_err *err)
{
    if (e->kind != EXPR_KEY_CONDITION || e->cond == NULL)
        return strata_err_set(err, ERR_INTERNAL, "not a key condition expression");
    key_leaf leaves[2];
    uint32_t count = 0;
    if (collect(e->cond, leaves, &count, err) != 0)
        return -1;
    const key_leaf *hash = NULL, *range = NULL;
    for (uint32_t i = 0; i < count; i++) {
        if (leaf_is(&leaves[i], schema->hash_name, schema->hash_name_len))
            hash = &leaves[i];
        else if (leaf_is(&leaves[i], schema->range_name, schema->range_name_len))
            range = &leaves[i];
        else if (schema->range_name != NULL && count == 2)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Query condition missed key schema element: %.*s",
                                  (int)schema->range_name_len, schema->range_name);
    }
    if (hash == NULL)
        return strata_err_set(err, ERR_VALIDATION,
                              "Query condition missed key schema element: %.*s",
                              (int)schema->hash_name_len, schema->hash_name);
    if (hash->op != EXPR_SK_EQ || (count == 2 && range == NULL))
        return strata_err_set(err, ERR_VALIDATION, "Query key condition not supported");
    if (check_type(hash, schema->hash_type, err) != 0)
        return -1;
    if (range != NULL && check_type(range, schema->range_type, err) != 0)
        return -1;
    if (range != NULL && range->op == EXPR_SK_BETWEEN && range->v1 && range->v2 &&
        av_cmp_scalar(range->v1, range->v2) > 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "Invalid KeyConditionExpression: The BETWEEN operator requires upper "
                              "bound to be greater than or equal to lower bound");
    out->pk = hash->v1;
    out->sk_op = range ? range->op : EXPR_SK_NONE;
    out->sk1 = range ? range->v1 : NULL;
    out->sk2 = range ? range->v2 : NULL;
    return 0;
}

bool expr_key_cond_match_sk(const expr_key_cond *kc, const av *sk)
{
    if (kc->sk_op == EXPR_SK_NONE)
        return true;
    if (sk == NULL || kc->sk1 == NULL || sk->type != kc->sk1->type)
        return false;
    if (kc->sk_op == EXPR_SK_BEGINS_WITH)
        return (sk->type == AV_S || sk->type == AV_B) && kc->sk1->u.bytes.len <= sk->u.bytes.len &&
               memcmp(sk->u.bytes.ptr, kc->sk1->u.bytes.ptr, kc->sk1->u.bytes.len) == 0;
    int c = av_cmp_scalar(sk, kc->sk1);
    switch (kc->sk_op) {
    case EXPR_SK_EQ:
        return c == 0;
    case EXPR_SK_LT:
        return c < 0;
    case EXPR_SK_LE:
        return c <= 0;
    case EXPR_SK_GT:
        return c > 0;
    case EXPR_SK_GE:
        return c >= 0;
    case EXPR_SK_BETWEEN:
        return c >= 0 && kc->sk2 != NULL && sk->type == kc->sk2->type &&
               av_cmp_scalar(sk, kc->sk2) <= 0;
    default:
        return false;
    }
}
