/*
 * Applying an UpdateExpression to an item.
 *
 * DynamoDB evaluates every operand against the item as it was before the update, then
 * applies the actions; the parser already guaranteed that no two actions touch
 * overlapping paths, so the order of application only matters for list elements
 * removed from the same list (removed from the highest index down, so every index
 * refers to the original list).
 *
 * The new item is built persistently: each action copies only the containers along its
 * path and shares everything else with the old item and with the expression's values.
 */
#include <stdlib.h>
#include <string.h>

#include "storage/expr/expr_int.h"

#define MSG_INVALID_PATH "The document path provided in the update expression is invalid for update"
#define MSG_BAD_TYPE     "An operand in the update expression has an incorrect data type"
#define MSG_MISSING      "The provided expression refers to an attribute that does not exist in the item"

typedef enum { W_SET, W_REMOVE } write_mode;

static int nomem(strata_err *err)
{
    return strata_err_set(err, ERR_NOMEM, "update: out of memory");
}

/* Binary search of a map's attributes: index of `name`, or -(insertion point) - 1. */
static long map_find(const av *m, const char *name, uint32_t len)
{
    long lo = 0, hi = (long)m->u.map.count;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        const av_attr *at = &m->u.map.attrs[mid];
        uint32_t n = at->name_len < len ? at->name_len : len;
        int c = memcmp(at->name, name, n);
        if (c == 0)
            c = at->name_len < len ? -1 : at->name_len > len;
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -lo - 1;
}

/* Writes `value` (W_SET) or removes (W_REMOVE) at path[depth..] inside `container`,
 * producing the new container in `out`. */
static int write_path(arena *a, const av *container, const expr_path *path, uint32_t depth,
                      write_mode mode, const av *value, av *out, strata_err *err)
{
    const path_elem *e = &path->elems[depth];
    bool last = depth + 1 == path->count;
    if (e->name != NULL) {
        if (container->type != AV_M)
            return strata_err_set(err, ERR_VALIDATION, MSG_INVALID_PATH);
        long idx = map_find(container, e->name, e->len);
        uint32_t count = container->u.map.count;
        if (!last) {
            if (idx < 0)
                return strata_err_set(err, ERR_VALIDATION, MSG_INVALID_PATH);
            av child;
            if (write_path(a, &container->u.map.attrs[idx].value, path, depth + 1, mode, value,
                           &child, err) != 0)
                return -1;
            av_attr *attrs = arena_memdup(a, container->u.map.attrs, count * sizeof(av_attr));
            if (attrs == NULL)
                return nomem(err);
            attrs[idx].value = child;
            *out = *container;
            out->u.map.attrs = attrs;
            return 0;
        }
        if (mode == W_REMOVE) {
            *out = *container;
            if (idx < 0)
                return 0;
            av_attr *attrs = arena_alloc(a, (count ? count : 1) * sizeof(av_attr));
            if (attrs == NULL)
                return nomem(err);
            memcpy(attrs, container->u.map.attrs, (size_t)idx * sizeof(av_attr));
            memcpy(attrs + idx, container->u.map.attrs + idx + 1,
                   (count - (size_t)idx - 1) * sizeof(av_attr));
            out->u.map.attrs = attrs;
            out->u.map.count = count - 1;
            return 0;
        }
        av_attr *attrs = arena_alloc(a, (count + 1) * sizeof(av_attr));
        if (attrs == NULL)
            return nomem(err);
        if (count)
            memcpy(attrs, container->u.map.attrs, count * sizeof(av_attr));
        *out = *container;
        out->u.map.attrs = attrs;
        if (idx >= 0) {
            attrs[idx].value = *value;
            return 0;
        }
        size_t at = (size_t)(-idx - 1);
        memmove(attrs + at + 1, attrs + at, (count - at) * sizeof(av_attr));
        attrs[at].name = e->name;
        attrs[at].name_len = e->len;
        attrs[at].value = *value;
        out->u.map.count = count + 1;
        return 0;
    }
    if (container->type != AV_L)
        return strata_err_set(err, ERR_VALIDATION, MSG_INVALID_PATH);
    uint32_t count = container->u.list.count;
    uint32_t i = e->index;
    if (!last) {
        if (i >= count)
            return strata_err_set(err, ERR_VALIDATION, MSG_INVALID_PATH);
        av child;
        if (write_path(a, &container->u.list.elems[i], path, depth + 1, mode, value, &child, err) !=
            0)
            return -1;
        av *elems = arena_memdup(a, container->u.list.elems, count * sizeof(av));
        if (elems == NULL)
            return nomem(err);
        elems[i] = child;
        *out = *container;
        out->u.list.elems = elems;
        return 0;
    }
    *out = *container;
    if (mode == W_REMOVE) {
        if (i >= count)
            return 0; /* removing past the end does nothing */
        av *elems = arena_alloc(a, (count ? count : 1) * sizeof(av));
        if (elems == NULL)
            return nomem(err);
        memcpy(elems, container->u.list.elems, i * sizeof(av));
        memcpy(elems + i, container->u.list.elems + i + 1, (count - i - 1) * sizeof(av));
        out->u.list.elems = elems;
        out->u.list.count = count - 1;
        return 0;
    }
    av *elems = arena_alloc(a, (count + 1) * sizeof(av));
    if (elems == NULL)
        return nomem(err);
    if (count)
        memcpy(elems, container->u.list.elems, count * sizeof(av));
    out->u.list.elems = elems;
    if (i < count) {
        elems[i] = *value;
    } else {
        /* setting past the end appends */
        elems[count] = *value;
        out->u.list.count = count + 1;
    }
    return 0;
}

/* Evaluates a SET operand against the old item. */
static int eval_value(const node *n, const av *old, arena *a, av *out, strata_err *err)
{
    switch (n->kind) {
    case N_PATH: {
        const av *v = expr_path_get(old, &n->path);
        if (v == NULL)
            return strata_err_set(err, ERR_VALIDATION, MSG_MISSING);
        *out = *v;
        return 0;
    }
    case N_VALUE:
        if (n->value == NULL)
            return strata_err_set(err, ERR_INTERNAL, "unresolved expression value");
        *out = *n->value;
        return 0;
    case N_FUNC:
        if (n->func == F_IF_NOT_EXISTS) {
            const av *v = expr_path_get(old, &n->args[0]->path);
            if (v != NULL) {
                *out = *v;
                return 0;
            }
            return eval_value(n->args[1], old, a, out, err);
        }
        if (n->func == F_LIST_APPEND) {
            av x, y;
            if (eval_value(n->args[0], old, a, &x, err) != 0 ||
                eval_value(n->args[1], old, a, &y, err) != 0)
                return -1;
            if (x.type != AV_L || y.type != AV_L)
                return strata_err_set(err, ERR_VALIDATION, MSG_BAD_TYPE);
            uint32_t n1 = x.u.list.count, n2 = y.u.list.count;
            av *elems = arena_alloc(a, ((size_t)n1 + n2 + 1) * sizeof(av));
            if (elems == NULL)
                return nomem(err);
            if (n1)
                memcpy(elems, x.u.list.elems, n1 * sizeof(av));
            if (n2)
                memcpy(elems + n1, y.u.list.elems, n2 * sizeof(av));
            out->type = AV_L;
            out->u.list.elems = elems;
            out->u.list.count = n1 + n2;
            return 0;
        }
        return strata_err_set(err, ERR_INTERNAL, "unexpected function in update");
    case N_PLUS:
    case N_MINUS: {
        av x, y;
        if (eval_value(n->args[0], old, a, &x, err) != 0 ||
            eval_value(n->args[1], old, a, &y, err) != 0)
            return -1;
        if (x.type != AV_N || y.type != AV_N)
            return strata_err_set(err, ERR_VALIDATION, MSG_BAD_TYPE);
        out->type = AV_N;
        if (n->kind == N_PLUS)
            return num_add(&x.u.n, &y.u.n, &out->u.n, err);
        return num_sub(&x.u.n, &y.u.n, &out->u.n, err);
    }
    default:
        return strata_err_set(err, ERR_INTERNAL, "unexpected node in update");
    }
}

/* Union (add) or difference (!add) of two sets of the same type, both sorted. */
static int set_merge(arena *a, const av *x, const av *y, bool add, av *out, strata_err *err)
{
    uint32_t nx = x->u.list.count, ny = y->u.list.count;
    av *elems = arena_alloc(a, ((size_t)nx + ny + 1) * sizeof(av));
    if (elems == NULL)
        return nomem(err);
    uint32_t i = 0, j = 0, k = 0;
    while (i < nx || j < ny) {
        int c = i == nx   ? 1
                : j == ny ? -1
                          : av_cmp_scalar(&x->u.list.elems[i], &y->u.list.elems[j]);
        if (c < 0) {
            elems[k++] = x->u.list.elems[i++];
        } else if (c > 0) {
            if (add)
                elems[k++] = y->u.list.elems[j];
            j++;
        } else {
            if (add)
                elems[k++] = x->u.list.elems[i];
            i++;
            j++;
        }
    }
    out->type = x->type;
    out->u.list.elems = elems;
    out->u.list.count = k;
    return 0;
}

static int cmp_path_desc(const void *x, const void *y)
{
    const expr_path *a = *(const expr_path *const *)x, *b = *(const expr_path *const *)y;
    uint32_t n = a->count < b->count ? a->count : b->count;
    for (uint32_t i = 0; i < n; i++) {
        const path_elem *p = &a->elems[i], *q = &b->elems[i];
        int c;
        if (p->name == NULL && q->name == NULL)
            c = p->index < q->index ? -1 : p->index > q->index;
        else if (p->name == NULL || q->name == NULL)
            c = p->name == NULL ? -1 : 1;
        else {
            uint32_t m = p->len < q->len ? p->len : q->len;
            c = memcmp(p->name, q->name, m);
            if (c == 0)
                c = p->len < q->len ? -1 : p->len > q->len;
        }
        if (c != 0)
            return -c;
    }
    return a->count < b->count ? 1 : a->count > b->count ? -1 : 0;
}

int expr_update_apply(const expr *e, const av *old_item, arena *a, av *new_item, strata_err *err)
{
    static const av empty_map = {.type = AV_M};
    if (e->kind != EXPR_UPDATE)
        return strata_err_set(err, ERR_INTERNAL, "not an update expression");
    const av *old = old_item != NULL ? old_item : &empty_map;
    /* 1. every SET operand, against the old item */
    av *set_vals = arena_alloc(a, (e->nacts ? e->nacts : 1) * sizeof(av));
    const expr_path **removes = arena_alloc(a, (e->nacts ? e->nacts : 1) * sizeof(*removes));
    if (set_vals == NULL || removes == NULL)
        return nomem(err);
    uint32_t nremoves = 0;
    for (uint32_t i = 0; i < e->nacts; i++) {
        const update_action *act = &e->acts[i];
        if (act->kind == ACT_SET && eval_value(act->value, old, a, &set_vals[i], err) != 0)
            return -1;
        if (act->kind == ACT_REMOVE)
            removes[nremoves++] = &act->path;
    }
    /* 2. apply */
    av cur = *old;
    for (uint32_t i = 0; i < e->nacts; i++) {
        const update_action *act = &e->acts[i];
        av next;
        if (act->kind == ACT_SET) {
            if (write_path(a, &cur, &act->path, 0, W_SET, &set_vals[i], &next, err) != 0)
                return -1;
            cur = next;
        } else if (act->kind == ACT_ADD || act->kind == ACT_DELETE) {
            const av *v = act->value->value;
            const av *existing = expr_path_get(old, &act->path);
            av result;
            bool remove = false;
            if (v == NULL)
                return strata_err_set(err, ERR_INTERNAL, "unresolved expression value");
            if (act->kind == ACT_ADD) {
                if (existing == NULL) {
                    result = *v;
                } else if (existing->type != v->type) {
                    return strata_err_set(err, ERR_VALIDATION, MSG_BAD_TYPE);
                } else if (v->type == AV_N) {
                    result.type = AV_N;
                    if (num_add(&existing->u.n, &v->u.n, &result.u.n, err) != 0)
                        return -1;
                } else if (av_is_set(v->type)) {
                    if (set_merge(a, existing, v, true, &result, err) != 0)
                        return -1;
                } else {
                    return strata_err_set(err, ERR_VALIDATION, MSG_BAD_TYPE);
                }
            } else {
                if (!av_is_set(v->type))
                    return strata_err_set(err, ERR_VALIDATION, MSG_BAD_TYPE);
                if (existing == NULL) {
                    /* nothing to delete from; the parent must still be valid */
                    if (act->path.count > 1) {
                        expr_path parent = {act->path.elems, act->path.count - 1};
                        const av *pv = expr_path_get(old, &parent);
                        if (pv == NULL || (pv->type != AV_M && pv->type != AV_L))
                            return strata_err_set(err, ERR_VALIDATION, MSG_INVALID_PATH);
                    }
                    continue;
                }
                if (existing->type != v->type)
                    return strata_err_set(err, ERR_VALIDATION, MSG_BAD_TYPE);
                if (set_merge(a, existing, v, false, &result, err) != 0)
                    return -1;
                remove = result.u.list.count == 0;
            }
            if (write_path(a, &cur, &act->path, 0, remove ? W_REMOVE : W_SET, &result, &next,
                           err) != 0)
                return -1;
            cur = next;
        }
    }
    /* 3. removals, highest list index first */
    if (nremoves > 1)
        qsort(removes, nremoves, sizeof(*removes), cmp_path_desc);
    for (uint32_t i = 0; i < nremoves; i++) {
        av next;
        if (write_path(a, &cur, removes[i], 0, W_REMOVE, NULL, &next, err) != 0)
            return -1;
        cur = next;
    }
    /* an update can nest values deeper than DynamoDB allows (SET a.b.c... = :deep);
     * only the attributes it touched need checking */
    for (uint32_t i = 0; i < e->nacts; i++) {
        const path_elem *h = &e->acts[i].path.elems[0];
        const av *v = av_map_get(&cur, h->name, h->len);
        if (v != NULL && e->acts[i].kind != ACT_REMOVE && av_check_nesting(v, err) != 0)
            return -1;
    }
    *new_item = cur;
    return 0;
}

int expr_update_check_keys(const expr *e, const expr_key_schema *schema, strata_err *err)
{
    if (e->kind != EXPR_UPDATE)
        return strata_err_set(err, ERR_INTERNAL, "not an update expression");
    for (uint32_t i = 0; i < e->nacts; i++) {
        const path_elem *h = &e->acts[i].path.elems[0];
        bool is_hash = schema->hash_name != NULL && h->len == schema->hash_name_len &&
                       memcmp(h->name, schema->hash_name, h->len) == 0;
        bool is_range = schema->range_name != NULL && h->len == schema->range_name_len &&
                        memcmp(h->name, schema->range_name, h->len) == 0;
        if (is_hash || is_range)
            return strata_err_set(
                err, ERR_VALIDATION,
                "One or more parameter values were invalid: Cannot update attribute "
                "%.*s. This attribute is part of the key",
                (int)h->len, h->name);
    }
    return 0;
}
