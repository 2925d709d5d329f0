/*
 * Attribute values: names, ordering, equality, lookup, normalization and DynamoDB's item
 * size rules.
 */
#include "storage/data/value.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/base64.h"

static const char *const type_names[] = {
    [AV_S] = "S", [AV_N] = "N", [AV_B] = "B",   [AV_BOOL] = "BOOL", [AV_NULL] = "NULL",
    [AV_M] = "M", [AV_L] = "L", [AV_SS] = "SS", [AV_NS] = "NS",     [AV_BS] = "BS",
};

const char *av_type_name(av_type t)
{
    if (t < AV_S || t > AV_BS)
        return NULL;
    return type_names[t];
}

av_type av_type_from_name(const char *s, size_t len)
{
    for (int t = AV_S; t <= AV_BS; t++) {
        if (strlen(type_names[t]) == len && memcmp(type_names[t], s, len) == 0)
            return (av_type)t;
    }
    return (av_type)0;
}

bool av_is_set(av_type t)
{
    return t == AV_SS || t == AV_NS || t == AV_BS;
}

static int cmp_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c < 0 ? -1 : 1;
    return (alen > blen) - (alen < blen);
}

int av_cmp_scalar(const av *a, const av *b)
{
    assert(a->type == b->type);
    if (a->type == AV_N)
        return num_cmp(&a->u.n, &b->u.n);
    assert(a->type == AV_S || a->type == AV_B);
    return cmp_bytes(a->u.bytes.ptr, a->u.bytes.len, b->u.bytes.ptr, b->u.bytes.len);
}

bool av_equal(const av *a, const av *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case AV_S:
    case AV_B:
    case AV_N:
        return av_cmp_scalar(a, b) == 0;
    case AV_BOOL:
        return a->u.boolean == b->u.boolean;
    case AV_NULL:
        return true;
    case AV_L:
    case AV_SS:
    case AV_NS:
    case AV_BS:
        /* Sets are sorted and unique, so set equality is element-wise equality. */
        if (a->u.list.count != b->u.list.count)
            return false;
        for (uint32_t i = 0; i < a->u.list.count; i++) {
            if (!av_equal(&a->u.list.elems[i], &b->u.list.elems[i]))
                return false;
        }
        return true;
    case AV_M:
        if (a->u.map.count != b->u.map.count)
            return false;
        for (uint32_t i = 0; i < a->u.map.count; i++) {
            const av_attr *x = &a->u.map.attrs[i], *y = &b->u.map.attrs[i];
            if (x->name_len != y->name_len || memcmp(x->name, y->name, x->name_len) != 0 ||
                !av_equal(&x->value, &y->value))
                return false;
        }
        return true;
    }
    return false;
}

const av *av_map_get(const av *map, const char *name, size_t name_len)
{
    assert(map->type == AV_M);
    size_t lo = 0, hi = map->u.map.count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const av_attr *at = &map->u.map.attrs[mid];
        int c = cmp_bytes(at->name, at->name_len, name, name_len);
        if (c == 0)
            return &at->value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int cmp_attr(const void *pa, const void *pb)
{
    const av_attr *a = pa, *b = pb;
    return cmp_bytes(a->name, a->name_len, b->name, b->name_len);
}

static bool attrs_sorted_unique(const av *map)
{
    for (uint32_t i = 1; i < map->u.map.count; i++) {
        if (cmp_attr(&map->u.map.attrs[i - 1], &map->u.map.attrs[i]) >= 0)
            return false;
    }
    return true;
}

int av_map_sort(av *map, strata_err *err)
{
    assert(map->type == AV_M);
    /* Items usually arrive sorted (our own encodings), so check before sorting. */
    if (attrs_sorted_unique(map))
        return 0;
    qsort(map->u.map.attrs, map->u.map.count, sizeof(av_attr), cmp_attr);
    for (uint32_t i = 1; i < map->u.map.count; i++) {
        const av_attr *at = &map->u.map.attrs[i];
        if (cmp_attr(&map->u.map.attrs[i - 1], at) == 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "One or more parameter values were invalid: Duplicate "
                                  "attribute name: %.*s",
                                  (int)(at->name_len > 255 ? 255 : at->name_len), at->name);
    }
    return 0;
}

static int cmp_elem(const void *pa, const void *pb)
{
    return av_cmp_scalar(pa, pb);
}

static bool elems_sorted_unique(const av *set)
{
    for (uint32_t i = 1; i < set->u.list.count; i++) {
        if (av_cmp_scalar(&set->u.list.elems[i - 1], &set->u.list.elems[i]) >= 0)
            return false;
    }
    return true;
}

/* "[a, b, c]" as DynamoDB prints a string set's elements in messages (a binary set's in
 * base64), cut to fit. */
static void describe_set(const av *set, char *out, size_t cap)
{
    size_t k = 0;
    out[k++] = '[';
    for (uint32_t i = 0; i < set->u.list.count && k + 8 < cap; i++) {
        const av *e = &set->u.list.elems[i];
        if (i > 0) {
            out[k++] = ',';
            out[k++] = ' ';
        }
        size_t room = cap - k - 4, n = e->u.bytes.len;
        if (set->type == AV_BS) {
            if (b64_encoded_len(n) > room)
                break;
            b64_encode(e->u.bytes.ptr, n, out + k);
            k += b64_encoded_len(n);
            continue;
        }
        if (n > room)
            n = room;
        memcpy(out + k, e->u.bytes.ptr, n);
        k += n;
    }
    out[k++] = ']';
    out[k] = '\0';
}

int av_set_sort(av *set, strata_err *err)
{
    assert(av_is_set(set->type));
    if (set->u.list.count == 0)
        return av_empty_set_error(set->type, err);
    if (elems_sorted_unique(set))
        return 0;
    qsort(set->u.list.elems, set->u.list.count, sizeof(av), cmp_elem);
    for (uint32_t i = 1; i < set->u.list.count; i++) {
        if (av_cmp_scalar(&set->u.list.elems[i - 1], &set->u.list.elems[i]) == 0) {
            if (set->type == AV_NS)
                return strata_err_set(err, ERR_VALIDATION, "Input collection contains duplicates");
            char desc[400];
            describe_set(set, desc, sizeof desc);
            return av_duplicate_set_error(set->type, desc, err);
        }
    }
    return 0;
}

int av_empty_set_error(av_type t, strata_err *err)
{
    /* DynamoDB's own wording, double space and "An" included; binary sets have their own. */
    if (t == AV_BS)
        return strata_err_set(err, ERR_VALIDATION,
                              "One or more parameter values were invalid: Binary sets should not "
                              "be empty");
    const char *what = t == AV_SS ? "string" : "number";
    return strata_err_set(err, ERR_VALIDATION,
                          "One or more parameter values were invalid: An %s set  may not be empty",
                          what);
}

int av_duplicate_set_error(av_type t, const char *elements, strata_err *err)
{
    /* DynamoDB's wording; for binary sets with no space before "of type". */
    return strata_err_set(err, ERR_VALIDATION,
                          "One or more parameter values were invalid: Input collection %s%s "
                          "contains duplicates.",
                          elements, t == AV_BS ? "of type BS" : "");
}

int av_copy(arena *a, const av *src, av *dst)
{
    *dst = *src;
    switch (src->type) {
    case AV_S:
    case AV_B:
        dst->u.bytes.ptr = arena_memdup(a, src->u.bytes.ptr, src->u.bytes.len);
        return dst->u.bytes.ptr ? 0 : -1;
    case AV_N:
    case AV_BOOL:
    case AV_NULL:
        return 0;
    case AV_L:
    case AV_SS:
    case AV_NS:
    case AV_BS: {
        uint32_t n = src->u.list.count;
        av *elems = arena_alloc(a, (size_t)n * sizeof(av));
        if (elems == NULL)
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            if (av_copy(a, &src->u.list.elems[i], &elems[i]) != 0)
                return -1;
        }
        dst->u.list.elems = elems;
        return 0;
    }
    case AV_M: {
        uint32_t n = src->u.map.count;
        av_attr *attrs = arena_alloc(a, (size_t)n * sizeof(av_attr));
        if (attrs == NULL)
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            const av_attr *s = &src->u.map.attrs[i];
            attrs[i].name_len = s->name_len;
            attrs[i].name = arena_memdup(a, s->name, s->name_len);
            if (attrs[i].name == NULL || av_copy(a, &s->value, &attrs[i].value) != 0)
                return -1;
        }
        dst->u.map.attrs = attrs;
        return 0;
    }
    }
    return -1;
}

/* Levels of M/L in v (0 for a scalar or a set), stopping once past `limit`. */
static int nesting_of(const av *v, int limit)
{
    if (v->type != AV_M && v->type != AV_L)
        return 0;
    if (limit <= 0)
        return 1;
    int deepest = 0;
    if (v->type == AV_M) {
        for (uint32_t i = 0; i < v->u.map.count && deepest < limit; i++) {
            int d = nesting_of(&v->u.map.attrs[i].value, limit - 1);
            deepest = d > deepest ? d : deepest;
        }
    } else {
        for (uint32_t i = 0; i < v->u.list.count && deepest < limit; i++) {
            int d = nesting_of(&v->u.list.elems[i], limit - 1);
            deepest = d > deepest ? d : deepest;
        }
    }
    return 1 + deepest;
}

int av_check_nesting(const av *v, strata_err *err)
{
    if (nesting_of(v, AV_MAX_NESTING) > AV_MAX_NESTING)
        return strata_err_set(err, ERR_VALIDATION, AV_NESTING_MSG);
    return 0;
}

int item_check_nesting(const av *item, strata_err *err)
{
    assert(item->type == AV_M);
    for (uint32_t i = 0; i < item->u.map.count; i++) {
        if (av_check_nesting(&item->u.map.attrs[i].value, err) != 0)
            return -1;
    }
    return 0;
}

/* floor(p / 2) for negative p too. */
static int floor_half(int p)
{
    return p >= 0 ? p / 2 : -((1 - p) / 2);
}

/*
 * DynamoDB stores numbers in base 100 (two decimal digits per byte, aligned on the
 * decimal point) plus an exponent byte, and one more byte for negatives, never more than
 * 21 bytes. Digit j of 0.d... * 10^exp has power exp-1-j; count the base-100 digits the
 * significant digits span. Zero is one byte.
 */
size_t av_num_size(const num *n)
{
    if (n->ndigits == 0)
        return 1;
    int hi = n->exp - 1, lo = n->exp - n->ndigits;
    size_t size = (size_t)(floor_half(hi) - floor_half(lo) + 1) + 1 + (n->neg ? 1 : 0);
    return size > 21 ? 21 : size;
}

size_t av_size(const av *v)
{
    size_t size = 0;
    switch (v->type) {
    case AV_S:
    case AV_B:
        return v->u.bytes.len;
    case AV_N:
        return av_num_size(&v->u.n);
    case AV_BOOL:
    case AV_NULL:
        return 1;
    case AV_SS:
    case AV_NS:
    case AV_BS:
        for (uint32_t i = 0; i < v->u.list.count; i++)
            size += av_size(&v->u.list.elems[i]);
        return size;
    case AV_L:
        /* A document costs 3 bytes plus one byte per element. */
        size = 3;
        for (uint32_t i = 0; i < v->u.list.count; i++)
            size += av_size(&v->u.list.elems[i]) + 1;
        return size;
    case AV_M:
        size = 3;
        for (uint32_t i = 0; i < v->u.map.count; i++)
            size += v->u.map.attrs[i].name_len + av_size(&v->u.map.attrs[i].value) + 1;
        return size;
    }
    return 0;
}

size_t item_size(const av *item)
{
    assert(item->type == AV_M);
    size_t size = 0;
    for (uint32_t i = 0; i < item->u.map.count; i++)
        size += item->u.map.attrs[i].name_len + av_size(&item->u.map.attrs[i].value);
    return size;
}
