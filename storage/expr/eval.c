/*
 * Evaluation of conditions and projections. Pure functions of (expression, item): no
 * clock, no randomness, numbers compared exactly. A condition never fails on the data:
 * a missing attribute or a type mismatch makes the comparison false, as in DynamoDB.
 */
#include <string.h>

#include "storage/expr/expr_int.h"

const av *expr_path_get(const av *item, const expr_path *p)
{
    const av *v = item;
    for (uint32_t i = 0; i < p->count && v != NULL; i++) {
        const path_elem *e = &p->elems[i];
        if (e->name != NULL) {
            v = v->type == AV_M ? av_map_get(v, e->name, e->len) : NULL;
        } else {
            v = (v->type == AV_L && e->index < v->u.list.count) ? &v->u.list.elems[e->index] : NULL;
        }
    }
    return v;
}

/* An operand's value: `v` points at it, or at `tmp` for computed numbers (size). NULL
 * when it has no value (missing attribute, size of a number, ...). */
static const av *eval_operand(const node *n, const av *item, av *tmp)
{
    switch (n->kind) {
    case N_PATH:
        return expr_path_get(item, &n->path);
    case N_VALUE:
        return n->value;
    case N_FUNC: {
        if (n->func != F_SIZE || n->nargs != 1)
            return NULL;
        av inner;
        const av *v = eval_operand(n->args[0], item, &inner);
        if (v == NULL)
            return NULL;
        int64_t size;
        switch (v->type) {
        case AV_S: {
            /* DynamoDB counts UTF-16 code units: one per character, two for characters
             * outside the BMP (4-byte UTF-8 sequences). */
            size = 0;
            for (uint32_t i = 0; i < v->u.bytes.len; i++) {
                uint8_t b = v->u.bytes.ptr[i];
                if ((b & 0xC0) != 0x80)
                    size += b >= 0xF0 ? 2 : 1;
            }
            break;
        }
        case AV_B:
            size = v->u.bytes.len;
            break;
        case AV_SS:
        case AV_NS:
        case AV_BS:
        case AV_L:
            size = v->u.list.count;
            break;
        case AV_M:
            size = v->u.map.count;
            break;
        default:
            return NULL;
        }
        tmp->type = AV_N;
        num_from_i64(size, &tmp->u.n);
        return tmp;
    }
    default:
        return NULL;
    }
}

static bool is_scalar(av_type t)
{
    return t == AV_S || t == AV_N || t == AV_B;
}

static bool bytes_contain(const av *hay, const av *needle)
{
    uint32_t n = needle->u.bytes.len, h = hay->u.bytes.len;
    if (n == 0)
        return true;
    if (n > h)
        return false;
    return memmem(hay->u.bytes.ptr, h, needle->u.bytes.ptr, n) != NULL;
}

static bool eval_contains(const av *a, const av *b)
{
    switch (a->type) {
    case AV_S:
    case AV_B:
        return b->type == a->type && bytes_contain(a, b);
    case AV_SS:
    case AV_NS:
    case AV_BS: {
        av_type elem = a->type == AV_SS ? AV_S : a->type == AV_NS ? AV_N : AV_B;
        if (b->type != elem)
            return false;
        /* sets are sorted: binary search */
        uint32_t lo = 0, hi = a->u.list.count;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            int c = av_cmp_scalar(&a->u.list.elems[mid], b);
            if (c == 0)
                return true;
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        return false;
    }
    case AV_L:
        for (uint32_t i = 0; i < a->u.list.count; i++)
            if (av_equal(&a->u.list.elems[i], b))
                return true;
        return false;
    default:
        return false;
    }
}

static bool eval_func(const node *n, const av *item)
{
    av t0, t1;
    switch (n->func) {
    case F_ATTRIBUTE_EXISTS:
        return expr_path_get(item, &n->args[0]->path) != NULL;
    case F_ATTRIBUTE_NOT_EXISTS:
        return expr_path_get(item, &n->args[0]->path) == NULL;
    case F_ATTRIBUTE_TYPE: {
        const av *v = expr_path_get(item, &n->args[0]->path);
        const av *t = n->args[1]->value;
        if (v == NULL || t == NULL || t->type != AV_S)
            return false;
        return av_type_from_name((const char *)t->u.bytes.ptr, t->u.bytes.len) == v->type;
    }
    case F_BEGINS_WITH: {
        const av *a = eval_operand(n->args[0], item, &t0);
        const av *b = eval_operand(n->args[1], item, &t1);
        if (a == NULL || b == NULL || a->type != b->type || (a->type != AV_S && a->type != AV_B))
            return false;
        return b->u.bytes.len <= a->u.bytes.len &&
               memcmp(a->u.bytes.ptr, b->u.bytes.ptr, b->u.bytes.len) == 0;
    }
    case F_CONTAINS: {
        const av *a = eval_operand(n->args[0], item, &t0);
        const av *b = eval_operand(n->args[1], item, &t1);
        return a != NULL && b != NULL && eval_contains(a, b);
    }
    default:
        return false;
    }
}

static bool eval_cmp(tok_type op, const av *a, const av *b)
{
    if (op == T_EQ)
        return a != NULL && b != NULL && av_equal(a, b);
    if (op == T_NE)
        return !(a != NULL && b != NULL && av_equal(a, b));
    if (a == NULL || b == NULL || a->type != b->type || !is_scalar(a->type))
        return false;
    int c = av_cmp_scalar(a, b);
    switch (op) {
    case T_LT:
        return c < 0;
    case T_LE:
        return c <= 0;
    case T_GT:
        return c > 0;
    case T_GE:
        return c >= 0;
    default:
        return false;
    }
}

static bool eval_node(const node *n, const av *item)
{
    av t0, t1, t2;
    switch (n->kind) {
    case N_AND:
        return eval_node(n->args[0], item) && eval_node(n->args[1], item);
    case N_OR:
        return eval_node(n->args[0], item) || eval_node(n->args[1], item);
    case N_NOT:
        return !eval_node(n->args[0], item);
    case N_CMP:
        return eval_cmp(n->op, eval_operand(n->args[0], item, &t0),
                        eval_operand(n->args[1], item, &t1));
    case N_BETWEEN: {
        const av *v = eval_operand(n->args[0], item, &t0);
        const av *lo = eval_operand(n->args[1], item, &t1);
        const av *hi = eval_operand(n->args[2], item, &t2);
        if (v == NULL || lo == NULL || hi == NULL || !is_scalar(v->type) || v->type != lo->type ||
            v->type != hi->type)
            return false;
        return av_cmp_scalar(lo, v) <= 0 && av_cmp_scalar(v, hi) <= 0;
    }
    case N_IN: {
        const av *v = eval_operand(n->args[0], item, &t0);
        if (v == NULL)
            return false;
        for (uint32_t i = 1; i < n->nargs; i++) {
            const av *c = eval_operand(n->args[i], item, &t1);
            if (c != NULL && av_equal(v, c))
                return true;
        }
        return false;
    }
    case N_FUNC:
        return eval_func(n, item);
    default:
        return false;
    }
}

int expr_condition_eval(const expr *e, const av *item, bool *result, strata_err *err)
{
    static const av empty_map = {.type = AV_M};
    if (e->cond == NULL)
        return strata_err_set(err, ERR_INTERNAL, "not a condition expression");
    *result = eval_node(e->cond, item != NULL ? item : &empty_map);
    return 0;
}

/* ---- Projection ----
 * The paths are processed level by level: at each container, the distinct next elements
 * of the paths that pass through it are taken in order (names sorted bytewise, indexes
 * ascending); an element where some path ends is copied whole, otherwise the projection
 * recurses. Containers that end up empty are dropped, as DynamoDB returns nothing for
 * paths that do not exist in the item. */

typedef struct {
    const expr_path *path;
} pref;

static int cmp_elem(const path_elem *a, const path_elem *b)
{
    if (a->name == NULL || b->name == NULL) {
        if (a->name != NULL || b->name != NULL)
            return a->name == NULL ? -1 : 1;
        return a->index < b->index ? -1 : a->index > b->index;
    }
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, n);
    if (c != 0)
        return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* Insertion sort of the path refs by element `depth` (counts are small). */
static void sort_refs(const expr_path **refs, uint32_t n, uint32_t depth)
{
    for (uint32_t i = 1; i < n; i++) {
        const expr_path *x = refs[i];
        uint32_t j = i;
        while (j > 0 && cmp_elem(&refs[j - 1]->elems[depth], &x->elems[depth]) > 0) {
            refs[j] = refs[j - 1];
            j--;
        }
        refs[j] = x;
    }
}

/* Projects `src` at `depth` onto refs (all of which have more than `depth` elements and
 * agree on elements before it). Sets *present false if nothing was projected. */
static int project_level(const expr_path **refs, uint32_t n, uint32_t depth, const av *src,
                         arena *a, av *out, bool *present, strata_err *err)
{
    sort_refs(refs, n, depth);
    bool is_map = src->type == AV_M;
    if (!is_map && src->type != AV_L) {
        *present = false;
        return 0;
    }
    /* count distinct elements = upper bound on output size */
    uint32_t groups = 0;
    for (uint32_t i = 0; i < n; i++)
        if (i == 0 || cmp_elem(&refs[i - 1]->elems[depth], &refs[i]->elems[depth]) != 0)
            groups++;
    av_attr *attrs = NULL;
    av *elems = NULL;
    if (is_map)
        attrs = arena_alloc(a, groups * sizeof(av_attr));
    else
        elems = arena_alloc(a, groups * sizeof(av));
    if ((is_map ? (void *)attrs : (void *)elems) == NULL)
        return strata_err_set(err, ERR_NOMEM, "projection: out of memory");
    uint32_t count = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t j = i + 1;
        while (j < n && cmp_elem(&refs[i]->elems[depth], &refs[j]->elems[depth]) == 0)
            j++;
        const path_elem *e = &refs[i]->elems[depth];
        const av *child = NULL;
        if (is_map && e->name != NULL)
            child = av_map_get(src, e->name, e->len);
        else if (!is_map && e->name == NULL && e->index < src->u.list.count)
            child = &src->u.list.elems[e->index];
        if (child != NULL) {
            bool whole = false;
            for (uint32_t k = i; k < j; k++)
                if (refs[k]->count == depth + 1)
                    whole = true;
            av val;
            bool got = true;
            if (whole) {
                val = *child; /* the item outlives the result: share it */
            } else if (project_level(refs + i, j - i, depth + 1, child, a, &val, &got, err) != 0) {
                return -1;
            }
            if (got) {
                if (is_map) {
                    attrs[count].name = e->name;
                    attrs[count].name_len = e->len;
                    attrs[count].value = val;
                } else {
                    elems[count] = val;
                }
                count++;
            }
        }
        i = j;
    }
    *present = count > 0;
    out->type = src->type;
    if (is_map) {
        out->u.map.attrs = attrs;
        out->u.map.count = count;
    } else {
        out->u.list.elems = elems;
        out->u.list.count = count;
    }
    return 0;
}

int expr_project_paths(const expr_path *paths, uint32_t npaths, const av *item, arena *a, av *out,
                       strata_err *err)
{
    static const av empty_map = {.type = AV_M};
    if (item == NULL)
        item = &empty_map;
    if (npaths == 0) {
        out->type = AV_M;
        out->u.map.attrs = NULL;
        out->u.map.count = 0;
        return 0;
    }
    const expr_path **refs = arena_alloc(a, npaths * sizeof(*refs));
    if (refs == NULL)
        return strata_err_set(err, ERR_NOMEM, "projection: out of memory");
    for (uint32_t i = 0; i < npaths; i++)
        refs[i] = &paths[i];
    bool present;
    if (project_level(refs, npaths, 0, item, a, out, &present, err) != 0)
        return -1;
    out->type = AV_M;
    return 0;
}

int expr_project(const expr *e, const av *item, arena *a, av *out, strata_err *err)
{
    if (e->kind != EXPR_PROJECTION)
        return strata_err_set(err, ERR_INTERNAL, "not a projection expression");
    return expr_project_paths(e->paths, e->npaths, item, a, out, err);
}

int expr_update_returned(const expr *e, const av *item, arena *a, av *out, strata_err *err)
{
    if (e->kind != EXPR_UPDATE)
        return strata_err_set(err, ERR_INTERNAL, "not an update expression");
    return expr_project_paths(e->paths, e->npaths, item, a, out, err);
}
