/*
 * Internal iterators that combine sources: a merge of any iterators (memtables, level-0
 * files, levels), a level iterator walking the non-overlapping files of one level, and
 * an empty iterator that carries an error.
 */
#include <stdlib.h>

#include "storage/lsm/lsm_int.h"

/* ---- Merge ---- */
typedef struct {
    iter base;
    iter **kids;
    int n;
    int cur; /* -1 when not valid */
    bool forward;
    strata_err err; /* a child failed: the merge is over (skipping it would lose keys) */
} merge_iter;

/* Only moved children can fail; `only` < 0 checks all of them. */
static bool mg_failed(merge_iter *m, int only)
{
    if (m->err.code != ERR_NONE)
        return true;
    for (int i = only < 0 ? 0 : only; i < (only < 0 ? m->n : only + 1); i++) {
        if (m->kids[i]->status(m->kids[i], &m->err) < 0) {
            m->cur = -1;
            return true;
        }
    }
    return false;
}

static void mg_smallest(merge_iter *m)
{
    int best = -1;
    const uint8_t *bk = NULL;
    size_t bn = 0;
    for (int i = 0; i < m->n; i++) {
        iter *k = m->kids[i];
        if (!k->valid(k))
            continue;
        size_t n;
        const uint8_t *key = k->key(k, &n);
        if (best < 0 || ikey_cmp(key, n, bk, bn) < 0) {
            best = i;
            bk = key;
            bn = n;
        }
    }
    m->cur = best;
}

static void mg_largest(merge_iter *m)
{
    int best = -1;
    const uint8_t *bk = NULL;
    size_t bn = 0;
    for (int i = 0; i < m->n; i++) {
        iter *k = m->kids[i];
        if (!k->valid(k))
            continue;
        size_t n;
        const uint8_t *key = k->key(k, &n);
        if (best < 0 || ikey_cmp(key, n, bk, bn) > 0) {
            best = i;
            bk = key;
            bn = n;
        }
    }
    m->cur = best;
}

static void mg_first(iter *it)
{
    merge_iter *m = (merge_iter *)it;
    for (int i = 0; i < m->n; i++)
        m->kids[i]->first(m->kids[i]);
    m->forward = true;
    if (!mg_failed(m, -1))
        mg_smallest(m);
}

static void mg_last(iter *it)
{
    merge_iter *m = (merge_iter *)it;
    for (int i = 0; i < m->n; i++)
        m->kids[i]->last(m->kids[i]);
    m->forward = false;
    if (!mg_failed(m, -1))
        mg_largest(m);
}

static void mg_seek(iter *it, const uint8_t *k, size_t n)
{
    merge_iter *m = (merge_iter *)it;
    for (int i = 0; i < m->n; i++)
        m->kids[i]->seek(m->kids[i], k, n);
    m->forward = true;
    if (!mg_failed(m, -1))
        mg_smallest(m);
}

static void mg_next(iter *it)
{
    merge_iter *m = (merge_iter *)it;
    iter *cur = m->kids[m->cur];
    int moved = m->cur;
    if (!m->forward) {
        moved = -1;
        /* Every other child must move to the first entry after the current key. Keys are
         * unique across children (each has its own sequence numbers). */
        size_t n;
        const uint8_t *k = cur->key(cur, &n);
        for (int i = 0; i < m->n; i++) {
            iter *c = m->kids[i];
            if (c == cur)
                continue;
            c->seek(c, k, n);
            size_t cn;
            if (c->valid(c) && ikey_cmp(k, n, c->key(c, &cn), cn) == 0)
                c->next(c);
        }
        m->forward = true;
    }
    cur->next(cur);
    if (!mg_failed(m, moved))
        mg_smallest(m);
}

static void mg_prev(iter *it)
{
    merge_iter *m = (merge_iter *)it;
    iter *cur = m->kids[m->cur];
    int moved = m->cur;
    if (m->forward) {
        moved = -1;
        size_t n;
        const uint8_t *k = cur->key(cur, &n);
        for (int i = 0; i < m->n; i++) {
            iter *c = m->kids[i];
            if (c == cur)
                continue;
            c->seek(c, k, n);
            if (c->valid(c))
                c->prev(c);
            else
                c->last(c);
        }
        m->forward = false;
    }
    cur->prev(cur);
    if (!mg_failed(m, moved))
        mg_largest(m);
}

static bool mg_valid(const iter *it)
{
    const merge_iter *m = (const merge_iter *)it;
    return m->cur >= 0;
}

static const uint8_t *mg_key(const iter *it, size_t *n)
{
    const merge_iter *m = (const merge_iter *)it;
    return m->kids[m->cur]->key(m->kids[m->cur], n);
}

static const uint8_t *mg_value(const iter *it, size_t *n)
{
    const merge_iter *m = (const merge_iter *)it;
    return m->kids[m->cur]->value(m->kids[m->cur], n);
}

static int mg_status(const iter *it, strata_err *err)
{
    const merge_iter *m = (const merge_iter *)it;
    if (m->err.code == ERR_NONE)
        return 0;
    if (err)
        *err = m->err;
    return -1;
}

static void mg_destroy(iter *it)
{
    merge_iter *m = (merge_iter *)it;
    for (int i = 0; i < m->n; i++)
        m->kids[i]->destroy(m->kids[i]);
    free(m->kids);
    free(m);
}

iter *merge_iter_new(iter **children, int n)
{
    merge_iter *m = calloc(1, sizeof *m);
    if (m == NULL) {
        for (int i = 0; i < n; i++)
            children[i]->destroy(children[i]);
        free(children);
        return NULL;
    }
    m->base = (iter){mg_first, mg_last, mg_seek,  mg_next,   mg_prev,
                     mg_valid, mg_key,  mg_value, mg_status, mg_destroy};
    m->kids = children;
    m->n = n;
    m->cur = -1;
    m->forward = true;
    return &m->base;
}

/* ---- Level: sorted, non-overlapping files opened one at a time ---- */
typedef struct {
    iter base;
    file_meta **files;
    int n;
    cache *c;
    int idx; /* file of `sub`, or -1 */
    iter *sub;
    strata_err err;
} level_iter;

static bool lv_open(level_iter *l, int idx)
{
    if (l->sub && l->idx == idx)
        return true;
    if (l->sub) {
        if (l->sub->status(l->sub, &l->err) < 0) {
            l->sub->destroy(l->sub);
            l->sub = NULL;
            return false;
        }
        l->sub->destroy(l->sub);
        l->sub = NULL;
    }
    l->idx = idx;
    if (idx < 0 || idx >= l->n)
        return false;
    l->sub = table_iter_new(l->files[idx]->t, l->c);
    if (l->sub == NULL) {
        strata_err_set(&l->err, ERR_NOMEM, "out of memory opening a table iterator");
        return false;
    }
    return true;
}

static bool lv_sub_ok(level_iter *l)
{
    if (l->sub == NULL)
        return false;
    if (l->sub->status(l->sub, &l->err) < 0)
        return false;
    return true;
}

static void lv_skip_forward(level_iter *l)
{
    while (lv_sub_ok(l) && !l->sub->valid(l->sub)) {
        if (!lv_open(l, l->idx + 1))
            return;
        l->sub->first(l->sub);
    }
}

static void lv_skip_backward(level_iter *l)
{
    while (lv_sub_ok(l) && !l->sub->valid(l->sub)) {
        if (!lv_open(l, l->idx - 1))
            return;
        l->sub->last(l->sub);
    }
}

static void lv_first(iter *it)
{
    level_iter *l = (level_iter *)it;
    if (l->err.code || !lv_open(l, 0))
        return;
    l->sub->first(l->sub);
    lv_skip_forward(l);
}

static void lv_last(iter *it)
{
    level_iter *l = (level_iter *)it;
    if (l->err.code || !lv_open(l, l->n - 1))
        return;
    l->sub->last(l->sub);
    lv_skip_backward(l);
}

static void lv_seek(iter *it, const uint8_t *k, size_t n)
{
    level_iter *l = (level_iter *)it;
    if (l->err.code)
        return;
    int lo = 0, hi = l->n; /* first file whose largest >= k */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const file_meta *f = l->files[mid];
        if (ikey_cmp(f->largest, f->largest_len, k, n) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lv_open(l, lo))
        return;
    l->sub->seek(l->sub, k, n);
    lv_skip_forward(l);
}

static void lv_next(iter *it)
{
    level_iter *l = (level_iter *)it;
    l->sub->next(l->sub);
    lv_skip_forward(l);
}

static void lv_prev(iter *it)
{
    level_iter *l = (level_iter *)it;
    l->sub->prev(l->sub);
    lv_skip_backward(l);
}

static bool lv_valid(const iter *it)
{
    const level_iter *l = (const level_iter *)it;
    return l->err.code == ERR_NONE && l->sub != NULL && l->sub->valid(l->sub);
}

static const uint8_t *lv_key(const iter *it, size_t *n)
{
    const level_iter *l = (const level_iter *)it;
    return l->sub->key(l->sub, n);
}

static const uint8_t *lv_value(const iter *it, size_t *n)
{
    const level_iter *l = (const level_iter *)it;
    return l->sub->value(l->sub, n);
}

static int lv_status(const iter *it, strata_err *err)
{
    const level_iter *l = (const level_iter *)it;
    if (l->err.code != ERR_NONE) {
        if (err)
            *err = l->err;
        return -1;
    }
    return l->sub ? l->sub->status(l->sub, err) : 0;
}

static void lv_destroy(iter *it)
{
    level_iter *l = (level_iter *)it;
    if (l->sub)
        l->sub->destroy(l->sub);
    free(l);
}

iter *level_iter_new(file_meta **files, int n, cache *c)
{
    level_iter *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->base = (iter){lv_first, lv_last, lv_seek,  lv_next,   lv_prev,
                     lv_valid, lv_key,  lv_value, lv_status, lv_destroy};
    l->files = files;
    l->n = n;
    l->c = c;
    l->idx = -1;
    return &l->base;
}

/* ---- Empty, possibly failed ---- */
typedef struct {
    iter base;
    strata_err err;
} error_iter;

static void ei_nop(iter *it)
{
    (void)it;
}
static void ei_seek(iter *it, const uint8_t *k, size_t n)
{
    (void)it;
    (void)k;
    (void)n;
}
static bool ei_valid(const iter *it)
{
    (void)it;
    return false;
}
static const uint8_t *ei_kv(const iter *it, size_t *n)
{
    (void)it;
    *n = 0;
    return NULL;
}
static int ei_status(const iter *it, strata_err *err)
{
    const error_iter *e = (const error_iter *)it;
    if (e->err.code == ERR_NONE)
        return 0;
    if (err)
        *err = e->err;
    return -1;
}
static void ei_destroy(iter *it)
{
    free(it);
}

iter *error_iter_new(const strata_err *err)
{
    error_iter *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->base = (iter){ei_nop,   ei_nop, ei_seek, ei_nop,    ei_nop,
                     ei_valid, ei_kv,  ei_kv,   ei_status, ei_destroy};
    if (err)
        e->err = *err;
    return &e->base;
}

int snap_stripe(const uint64_t *snaps, int n, uint64_t seq)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (snaps[mid] < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
