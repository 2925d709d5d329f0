/*
 * Capacity shares across nodes: the other nodes' wants per table and the share they leave
 * this node (see capshare.h).
 */
#include "cluster/capshare.h"

#include <stdlib.h>
#include <string.h>

#define VERSION     1
#define MAX_FIGURES ((size_t)CAPSHARE_MAX_ENTRIES * 64) /* nodes x tables kept, at most */

typedef struct {
    uint32_t table_id;
    uint64_t node;
    int64_t milli[2];
    uint64_t period;   /* the wall-clock second the figure was sent at */
    uint64_t heard_ms; /* local time it arrived (or was made, for self's) */
} figure;

struct capshare {
    figure *figs; /* sorted by (table_id, node) */
    size_t n, cap;
};

capshare *capshare_new(void)
{
    return calloc(1, sizeof(capshare));
}

void capshare_free(capshare *s)
{
    if (s == NULL)
        return;
    free(s->figs);
    free(s);
}

size_t capshare_count(const capshare *s)
{
    return s->n;
}

capshare_want capshare_want_of(const cap_demand *d, uint64_t period_ms)
{
    capshare_want w = {.table_id = d->table_id};
    if (period_ms == 0)
        period_ms = 1;
    for (int k = 0; k < 2; k++) {
        /* nano per period -> milli-units per second: nano / CAP_NANO * 1000 * 1000 / ms */
        int64_t milli = d->nano[k] / (int64_t)period_ms / (CAP_NANO / 1000000);
        w.milli[k] = milli < 0 ? 0 : milli > CAPSHARE_MAX_MILLI ? CAPSHARE_MAX_MILLI : milli;
    }
    return w;
}

void capshare_encode(uint64_t period, const capshare_want *wants, size_t n, buf *out)
{
    buf_put_u8(out, VERSION);
    buf_put_varint(out, period);
    buf_put_varint(out, n);
    for (size_t i = 0; i < n; i++) {
        buf_put_varint(out, wants[i].table_id);
        buf_put_varint(out, (uint64_t)wants[i].milli[CAP_READ]);
        buf_put_varint(out, (uint64_t)wants[i].milli[CAP_WRITE]);
    }
}

static int cmp_key(uint32_t table_a, uint64_t node_a, uint32_t table_b, uint64_t node_b)
{
    if (table_a != table_b)
        return table_a < table_b ? -1 : 1;
    return node_a < node_b ? -1 : node_a > node_b ? 1 : 0;
}

/* First figure at or after (table_id, node). */
static size_t lower_bound(const capshare *s, uint32_t table_id, uint64_t node)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(s->figs[mid].table_id, s->figs[mid].node, table_id, node) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int put(capshare *s, uint64_t from, const capshare_want *w, uint64_t period, uint64_t now_ms,
               strata_err *err)
{
    size_t at = lower_bound(s, w->table_id, from);
    figure *f = at < s->n ? &s->figs[at] : NULL;
    if (f == NULL || f->table_id != w->table_id || f->node != from) {
        if (s->n == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 16;
            figure *a = realloc(s->figs, ncap * sizeof *a);
            if (a == NULL)
                return strata_err_set(err, ERR_NOMEM, "out of memory");
            s->figs = a;
            s->cap = ncap;
        }
        memmove(&s->figs[at + 1], &s->figs[at], (s->n - at) * sizeof *s->figs);
        s->n++;
        f = &s->figs[at];
        *f = (figure){.table_id = w->table_id, .node = from};
    }
    f->milli[CAP_READ] = w->milli[CAP_READ];
    f->milli[CAP_WRITE] = w->milli[CAP_WRITE];
    f->period = period;
    f->heard_ms = now_ms;
    return 0;
}

/* Reads one want; false (r->failed) on malformed input. */
static bool read_want(rd *r, capshare_want *w)
{
    uint64_t table = rd_varint(r), read = rd_varint(r), write = rd_varint(r);
    if (r->failed || table > UINT32_MAX || read > (uint64_t)CAPSHARE_MAX_MILLI ||
        write > (uint64_t)CAPSHARE_MAX_MILLI)
        return false;
    *w = (capshare_want){.table_id = (uint32_t)table,
                         .milli = {[CAP_READ] = (int64_t)read, [CAP_WRITE] = (int64_t)write}};
    return true;
}

int capshare_receive(capshare *s, uint64_t from, const uint8_t *data, size_t len, uint64_t now_ms,
                     strata_err *err)
{
    rd r;
    rd_init(&r, data, len);
    uint8_t version = rd_u8(&r);
    uint64_t period = rd_varint(&r);
    uint64_t n = rd_varint(&r);
    if (r.failed || version != VERSION || n > CAPSHARE_MAX_ENTRIES)
        return strata_err_set(err, ERR_CORRUPT, "malformed capacity demand message");
    /* Validate the whole message before recording any of it. */
    rd check = r;
    capshare_want w;
    for (uint64_t i = 0; i < n; i++)
        if (!read_want(&check, &w))
            return strata_err_set(err, ERR_CORRUPT, "malformed capacity demand entry");
    if (rd_left(&check) != 0)
        return strata_err_set(err, ERR_CORRUPT, "trailing bytes in capacity demand message");
    capshare_expire(s, now_ms);
    if (s->n + n > MAX_FIGURES)
        return strata_err_set(err, ERR_CORRUPT, "capacity demand figures beyond %zu", MAX_FIGURES);
    for (uint64_t i = 0; i < n; i++) {
        read_want(&r, &w);
        if (put(s, from, &w, period, now_ms, err) < 0)
            return -1;
    }
    return 0;
}

void capshare_expire(capshare *s, uint64_t now_ms)
{
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->figs[i].heard_ms + CAPSHARE_FRESH_MS >= now_ms)
            s->figs[kept++] = s->figs[i];
    s->n = kept;
}

static const capshare_want *raw_of(const capshare_want *raw, size_t n, uint32_t table_id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (raw[mid].table_id < table_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && raw[lo].table_id == table_id ? &raw[lo] : NULL;
}

size_t capshare_own(capshare *s, uint64_t self, const capshare_want *raw, size_t n,
                    capshare_want *out, size_t max, uint64_t period, uint64_t now_ms)
{
    /* Tables wanted before: half the old figure and half this period's. */
    size_t n_out = 0, kept = 0;
    for (size_t i = 0; i < s->n; i++) {
        figure *f = &s->figs[i];
        if (f->node == self) {
            const capshare_want *w = raw_of(raw, n, f->table_id);
            for (int k = 0; k < 2; k++)
                f->milli[k] = (f->milli[k] + (w != NULL ? w->milli[k] : 0)) / 2;
            f->period = period;
            f->heard_ms = now_ms;
            if (n_out < max)
                out[n_out++] =
                    (capshare_want){.table_id = f->table_id, .milli = {f->milli[0], f->milli[1]}};
            if (f->milli[0] == 0 && f->milli[1] == 0)
                continue; /* faded: sent once at zero, then forgotten */
        }
        s->figs[kept++] = *f;
    }
    s->n = kept;
    /* Tables first wanted now start at their figure: a burst shows at once. */
    for (size_t i = 0; i < n; i++) {
        size_t at = lower_bound(s, raw[i].table_id, self);
        bool known =
            at < s->n && s->figs[at].table_id == raw[i].table_id && s->figs[at].node == self;
        strata_err err;
        if (known || (raw[i].milli[0] == 0 && raw[i].milli[1] == 0) ||
            put(s, self, &raw[i], period, now_ms, &err) < 0)
            continue;
        if (n_out < max)
            out[n_out++] = raw[i];
    }
    return n_out;
}

static int64_t weight_of(const capshare_weight *weights, size_t n, uint64_t node)
{
    for (size_t i = 0; i < n; i++)
        if (weights[i].node == node)
            return weights[i].weight > 0 ? weights[i].weight : 0;
    return 0;
}

/* part / whole in parts per million, within [0, CAP_PPM] (doubles: the figures reach
 * 2^50 x the number of nodes, and a share needs no more than six digits). */
static uint32_t ppm_of(double part, double whole)
{
    double ppm = part / whole * CAP_PPM;
    return ppm <= 0 ? 0 : ppm >= CAP_PPM ? CAP_PPM : (uint32_t)ppm;
}

uint32_t capshare_share(const capshare *s, uint64_t self, uint32_t table_id, cap_kind k,
                        int64_t rate_milli, const capshare_weight *weights, size_t n,
                        uint64_t period, uint64_t now_ms)
{
    if (rate_milli <= 0)
        return CAP_PPM;
    /* Every node's want, self's included, and the number of other nodes heard. */
    double demand = 0, self_milli = 0;
    size_t others = 0;
    for (size_t i = lower_bound(s, table_id, 0); i < s->n && s->figs[i].table_id == table_id; i++) {
        const figure *f = &s->figs[i];
        if (f->heard_ms + CAPSHARE_FRESH_MS < now_ms || f->period + CAPSHARE_LATE < period ||
            f->period > period + 1)
            continue;
        demand += (double)f->milli[k];
        if (f->node == self)
            self_milli = (double)f->milli[k];
        else
            others++;
    }
    if (demand >= (double)rate_milli)
        return ppm_of(self_milli, demand);
    double spare = (double)rate_milli - demand;
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += weights[i].weight > 0 ? (double)weights[i].weight : 0;
    double mine = total > 0 ? spare * (double)weight_of(weights, n, self) / total
                            : spare / (double)(others + 1);
    return ppm_of(self_milli + mine, (double)rate_milli);
}
