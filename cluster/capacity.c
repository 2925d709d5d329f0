/*
 * capacity.c: token buckets for DynamoDB's capacity units (see capacity.h).
 *
 * Tables and partitions are kept in arrays sorted by id (binary search): a node serves a
 * bounded number of them (CATALOG_MAX_TABLES, CATALOG_MAX_PARTITIONS per table).
 */
#include "cluster/capacity.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC_MS         1000
#define ONDEMAND_BURST SEC_MS /* on-demand buckets hold one second: no burst credit */

static const char msg_provisioned[] =
    "The level of configured provisioned throughput for the table was exceeded. Consider "
    "increasing your provisioning level with the UpdateTable API.";
static const char msg_capacity[] =
    "Throughput exceeds the current capacity of your table or index. DynamoDB is "
    "automatically scaling your table or index so please try again shortly. If exceptions "
    "persist, check if you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html";

typedef struct {
    int64_t tokens; /* nano-units; below zero while an admitted operation's debt is repaid */
    uint64_t last_ms;
    bool started;
} bucket;

typedef struct {
    uint64_t hash;
    int64_t count; /* nano-units (space-saving: an over-estimate by at most `err`) */
    int64_t err;
} hot_slot;

typedef struct {
    uint64_t id;
    bucket share[2], ceiling[2];
    cap_counters n;
    hot_slot hot[CAP_HOT_SLOTS];
    size_t n_hot;
    int64_t hot_total;
    /* Heat (split for heat): the current window (at least a second) and since when the
     * windows before it were hot without a break (0: the last one was not). */
    uint64_t win_start, hot_since;
    int64_t win_nano[2];
    bool win_refused[2];
    /* The last CAP_SPLIT_SAMPLES key hashes charged, with their units (the split point);
     * allocated on the first one. */
    split_sample *ring;
    uint32_t ring_n, ring_at;
} cpart;

typedef struct {
    uint32_t id;
    cap_table_conf conf;
    bucket pool[2];
    bucket absent[2];       /* the shares of local partitions not seen yet, together */
    int64_t peak[2];        /* on-demand: highest units in one second (nano) */
    int64_t window_nano[2]; /* consumed in the current second */
    uint64_t window_start[2];
    /* Cluster mode (capacity_set_node_share): this node's share of the table's rate. */
    uint32_t share_ppm[2];
    bool share_set[2];
    /* Since the last capacity_demand_collect: units consumed, and reservations refused
     * for want of capacity units. */
    int64_t used_nano[2], refused_nano[2];
    uint64_t throttled_requests;
    cpart *parts; /* sorted by id */
    size_t n_parts, cap_parts;
} ctable;

struct capacity {
    ctable *tables; /* sorted by id */
    size_t n_tables, cap_tables;
    bool lenient;        /* capacity_set_enforcing(false): count, never refuse */
    int64_t ceiling[2];  /* per-partition ceilings, units/s (capacity_set_ceilings) */
};

/* ------------------------------------------------------------------ buckets */

/* Adds rate (units/s) x elapsed ms to the bucket, up to max_ms of the rate. The bucket
 * refills by exact nano-units per ms: a rate of R units/s is R * CAP_NANO / 1000 per ms.
 * `div` spreads the rate over that many partitions. */
static void refill(bucket *b, int64_t rate, int64_t div, int64_t max_ms, uint64_t now_ms)
{
    int64_t per_ms = rate * (CAP_NANO / SEC_MS) / (div > 0 ? div : 1);
    int64_t max = per_ms * max_ms;
    if (!b->started) {
        b->started = true;
        b->tokens = max; /* new buckets start full */
        b->last_ms = now_ms;
        return;
    }
    if (now_ms > b->last_ms) {
        uint64_t dt = now_ms - b->last_ms;
        if (dt > (uint64_t)max_ms + 1)
            dt = (uint64_t)max_ms + 1; /* long idle: full anyway, and no overflow */
        b->tokens += per_ms * (int64_t)dt;
        b->last_ms = now_ms;
    }
    if (b->tokens > max)
        b->tokens = max;
}

static int64_t table_rate(const ctable *t, cap_kind k)
{
    if (t->conf.on_demand)
        return 2 * (t->peak[k] / CAP_NANO);
    return k == CAP_READ ? t->conf.rcu : t->conf.wcu;
}


/* The node's pool holds a share of the table's rate set by the cluster (provisioned
 * tables; on-demand ones scale by splits, not by shares). */
static bool node_shared(const ctable *t, cap_kind k)
{
    return t->share_set[k] && !t->conf.on_demand;
}

static int64_t burst_ms(const ctable *t)
{
    return t->conf.on_demand ? ONDEMAND_BURST : CAP_BURST_MS;
}

/* Local partitions without state yet (never touched here). */
static int64_t n_absent(const ctable *t)
{
    return t->conf.n_local > t->n_parts ? (int64_t)(t->conf.n_local - t->n_parts) : 0;
}

static void refill_absent(ctable *t, cap_kind k, uint64_t now_ms)
{
    refill(&t->absent[k], table_rate(t, k) * n_absent(t), t->conf.n_partitions, burst_ms(t),
           now_ms);
}

/*
 * The table's pool on this node: the node's share of the table's rate when the cluster set
 * one, else the shares of the partitions it serves. Under a share it holds 300 s of the
 * share; when the share drops (demand moved to other nodes) the credit already held stays,
 * up to 300 s of the whole table, and accrues no more until spent below the new bound:
 * clipping it would lose burst credit at every shift of demand, leaving the cluster short
 * of DynamoDB's 300 s.
 */
static void refill_pool(ctable *t, cap_kind k, uint64_t now_ms)
{
    int64_t rate = table_rate(t, k);
    if (node_shared(t, k)) {
        int64_t r = rate < CAP_RATE_MAX ? rate : CAP_RATE_MAX;
        bucket *b = &t->pool[k];
        bool started = b->started;
        int64_t held = b->tokens;
        refill(b, r * t->share_ppm[k], CAP_PPM, burst_ms(t), now_ms);
        int64_t whole = r * (CAP_NANO / SEC_MS) * burst_ms(t);
        if (started && held > b->tokens)
            b->tokens = held < whole ? held : whole;
    } else
        refill(&t->pool[k], rate * t->conf.n_local, t->conf.n_partitions, burst_ms(t), now_ms);
}

static void refill_all(const capacity *c, ctable *t, cpart *p, cap_kind k, uint64_t now_ms)
{
    refill(&p->share[k], table_rate(t, k), t->conf.n_partitions, burst_ms(t), now_ms);
    refill_pool(t, k, now_ms);
    refill(&p->ceiling[k], c->ceiling[k], 1, SEC_MS, now_ms);
}

/* ------------------------------------------------------------------ lookups */

static ctable *table_find(const capacity *c, uint32_t id, size_t *pos)
{
    size_t lo = 0, hi = c->n_tables;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->tables[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (pos != NULL)
        *pos = lo;
    return lo < c->n_tables && c->tables[lo].id == id ? &c->tables[lo] : NULL;
}

static cpart *part_find(const ctable *t, uint64_t id, size_t *pos)
{
    size_t lo = 0, hi = t->n_parts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->parts[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (pos != NULL)
        *pos = lo;
    return lo < t->n_parts && t->parts[lo].id == id ? &t->parts[lo] : NULL;
}

/* The partition's state in any table (stats lookups by partition id alone). */
static const cpart *part_any(const capacity *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_tables; i++) {
        const cpart *p = part_find(&c->tables[i], id, NULL);
        if (p != NULL)
            return p;
    }
    return NULL;
}

static bool grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *a = realloc(*arr, ncap * size);
    if (a == NULL)
        return false;
    *arr = a;
    *cap = ncap;
    return true;
}

static ctable *table_get(capacity *c, uint32_t id, strata_err *err)
{
    size_t pos;
    ctable *t = table_find(c, id, &pos);
    if (t != NULL)
        return t;
    if (!grow((void **)&c->tables, &c->cap_tables, c->n_tables, sizeof *c->tables)) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    memmove(&c->tables[pos + 1], &c->tables[pos], (c->n_tables - pos) * sizeof *c->tables);
    c->n_tables++;
    t = &c->tables[pos];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->peak[CAP_READ] = CAP_ONDEMAND_READ * CAP_NANO;
    t->peak[CAP_WRITE] = CAP_ONDEMAND_WRITE * CAP_NANO;
    return t;
}

static cpart *part_get(ctable *t, uint64_t id, uint64_t now_ms, strata_err *err)
{
    size_t pos;
    cpart *p = part_find(t, id, &pos);
    if (p != NULL)
        return p;
    /* The newcomer's share of what the unseen partitions hold (they may have lent). */
    int64_t inherit[2] = {-1, -1};
    int64_t absent = n_absent(t);
    for (int k = 0; k < 2 && absent > 0; k++) {
        if (!t->absent[k].started)
            continue;
        refill_absent(t, (cap_kind)k, now_ms);
        inherit[k] = t->absent[k].tokens / absent;
        t->absent[k].tokens -= inherit[k];
    }
    if (!grow((void **)&t->parts, &t->cap_parts, t->n_parts, sizeof *t->parts)) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    memmove(&t->parts[pos + 1], &t->parts[pos], (t->n_parts - pos) * sizeof *t->parts);
    t->n_parts++;
    p = &t->parts[pos];
    memset(p, 0, sizeof *p);
    p->id = id;
    for (int k = 0; k < 2; k++) {
        if (inherit[k] < 0)
            continue;
        p->share[k] = (bucket){.tokens = inherit[k], .last_ms = now_ms, .started = true};
    }
    return p;
}

/* ------------------------------------------------------------------ settings */

cap_table_conf capacity_conf_of(const table_info *t, uint32_t n_local)
{
    cap_table_conf conf = {.on_demand = t->billing == BILLING_PAY_PER_REQUEST,
                           .rcu = t->read_capacity,
                           .wcu = t->write_capacity,
                           .n_partitions = t->n_partitions > 0 ? (uint32_t)t->n_partitions : 1};
    conf.n_local = n_local < 1 ? 1 : n_local > conf.n_partitions ? conf.n_partitions : n_local;
    return conf;
}

/* Takes the table's current settings. Buckets keep their tokens, clamped to the new
 * maximum by the next refill: a raised rate applies from now on, a lowered one also
 * lowers the credit kept. */
static void set_conf(const capacity *c, ctable *t, const cap_table_conf *conf, uint64_t now_ms)
{
    const cap_table_conf *o = &t->conf;
    if (o->on_demand == conf->on_demand && o->rcu == conf->rcu && o->wcu == conf->wcu &&
        o->n_partitions == conf->n_partitions && o->n_local == conf->n_local)
        return;
    /* Credit accrued so far counts at the old rate. */
    for (size_t i = 0; i < t->n_parts; i++)
        for (int k = 0; k < 2; k++)
            if (t->parts[i].share[k].started)
                refill_all(c, t, &t->parts[i], (cap_kind)k, now_ms);
    for (int k = 0; k < 2; k++)
        if (t->absent[k].started)
            refill_absent(t, (cap_kind)k, now_ms);
    if (o->on_demand != conf->on_demand) {
        /* A billing mode switch starts over with full buckets of the new mode. */
        for (size_t i = 0; i < t->n_parts; i++)
            for (int k = 0; k < 2; k++)
                t->parts[i].share[k].started = false;
        for (int k = 0; k < 2; k++)
            t->pool[k].started = t->absent[k].started = false;
    }
    t->conf = *conf;
    if (t->conf.n_partitions < 1)
        t->conf.n_partitions = 1;
    if (t->conf.n_local < 1)
        t->conf.n_local = 1;
}

void capacity_set_node_share(capacity *c, uint32_t table_id, cap_kind k, uint32_t ppm,
                             uint64_t now_ms)
{
    ctable *t = table_find(c, table_id, NULL);
    if (t == NULL)
        return;
    if (t->pool[k].started)
        refill_pool(t, k, now_ms); /* credit accrued so far counts at the old share */
    t->share_ppm[k] = ppm < CAP_PPM ? ppm : CAP_PPM;
    t->share_set[k] = true;
}

size_t capacity_demand_collect(capacity *c, cap_demand *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_tables && n < max; i++) {
        ctable *t = &c->tables[i];
        cap_demand d = {.table_id = t->id};
        for (int k = 0; k < 2; k++) {
            int64_t used = t->used_nano[k] > 0 ? t->used_nano[k] : 0;
            int64_t more = used + CAP_NANO; /* refused: up to the use + 1 unit (capacity.h) */
            d.nano[k] = used + (t->refused_nano[k] < more ? t->refused_nano[k] : more);
            t->used_nano[k] = t->refused_nano[k] = 0;
        }
        if (d.nano[CAP_READ] > 0 || d.nano[CAP_WRITE] > 0)
            out[n++] = d;
    }
    return n;
}

/* ------------------------------------------------------------------ admission */

capacity *capacity_new(void)
{
    capacity *c = calloc(1, sizeof(capacity));
    if (c != NULL) {
        c->ceiling[CAP_READ] = CAP_PART_MAX_READ;
        c->ceiling[CAP_WRITE] = CAP_PART_MAX_WRITE;
    }
    return c;
}

void capacity_set_ceilings(capacity *c, int64_t rcu, int64_t wcu)
{
    c->ceiling[CAP_READ] = rcu > 0 ? rcu : CAP_PART_MAX_READ;
    c->ceiling[CAP_WRITE] = wcu > 0 ? wcu : CAP_PART_MAX_WRITE;
}

static void table_release(ctable *t)
{
    for (size_t i = 0; i < t->n_parts; i++)
        free(t->parts[i].ring);
    free(t->parts);
}

void capacity_free(capacity *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n_tables; i++)
        table_release(&c->tables[i]);
    free(c->tables);
    free(c);
}

static void take(const capacity *c, ctable *t, cpart *p, cap_kind k, int64_t nano,
                 uint64_t now_ms);
static void heat_roll(const capacity *c, cpart *p, uint64_t now_ms);

void capacity_set_enforcing(capacity *c, bool on)
{
    c->lenient = !on;
}

int capacity_admit(capacity *c, uint32_t table_id, uint64_t part_id, const cap_table_conf *conf,
                   cap_kind k, int64_t reserve_nano, uint64_t now_ms, strata_err *err)
{
    ctable *t = table_get(c, table_id, err);
    if (t == NULL)
        return -1;
    set_conf(c, t, conf, now_ms);
    cpart *p = part_get(t, part_id, now_ms, err);
    if (p == NULL)
        return -1;
    refill_all(c, t, p, k, now_ms);
    if (c->lenient || (!t->conf.on_demand && table_rate(t, k) <= 0)) {
        take(c, t, p, k, reserve_nano, now_ms); /* lenient, or no units set: counted only */
        return 0;
    }
    if (p->ceiling[k].tokens <= 0) {
        p->n.throttle_events[k]++;
        heat_roll(c, p, now_ms);
        p->win_refused[k] = true; /* demand above the ceiling: this window is hot */
        return strata_err_set(err, ERR_THROUGHPUT_EXCEEDED, "%s", msg_capacity);
    }
    /* Its own share, or (adaptive sharing) what the table's other partitions left; with a
     * node share, the pool alone: it holds what every partition here left, and a
     * partition's own bucket would let replicas serving its eventual reads on several
     * nodes each spend the same share. */
    bool own = !node_shared(t, k) && p->share[k].tokens > 0;
    if (own || t->pool[k].tokens > 0) {
        take(c, t, p, k, reserve_nano, now_ms);
        return 0;
    }
    t->refused_nano[k] += reserve_nano; /* wanted: more share would have served it */
    p->n.throttle_events[k]++;
    return strata_err_set(err, ERR_THROUGHPUT_EXCEEDED, "%s",
                          t->conf.on_demand ? msg_capacity : msg_provisioned);
}

/* Space-saving: a sampled hash gains the units; an unsampled one replaces the smallest
 * slot, inheriting its count as its possible error. */
static void hot_note(cpart *p, uint64_t hash, int64_t nano)
{
    p->hot_total += nano;
    size_t min = 0;
    for (size_t i = 0; i < p->n_hot; i++) {
        if (p->hot[i].hash == hash) {
            p->hot[i].count += nano;
            return;
        }
        if (p->hot[i].count < p->hot[min].count)
            min = i;
    }
    if (p->n_hot < CAP_HOT_SLOTS) {
        p->hot[p->n_hot++] = (hot_slot){.hash = hash, .count = nano, .err = 0};
        return;
    }
    p->hot[min] =
        (hot_slot){.hash = hash, .count = p->hot[min].count + nano, .err = p->hot[min].count};
}

/* Remembers the last CAP_SPLIT_SAMPLES charged key hashes (no allocation, no sample:
 * the split point falls back to the middle of the range). */
static void ring_note(cpart *p, uint64_t hash, int64_t nano)
{
    if (p->ring == NULL && (p->ring = malloc(CAP_SPLIT_SAMPLES * sizeof *p->ring)) == NULL)
        return;
    p->ring[p->ring_at] = (split_sample){.hash = hash, .weight = nano};
    p->ring_at = (p->ring_at + 1) % CAP_SPLIT_SAMPLES;
    if (p->ring_n < CAP_SPLIT_SAMPLES)
        p->ring_n++;
}

/* Takes a borrowed charge from the shares other partitions left unused, so the same
 * unused capacity is never spent twice (once borrowed, once by its own partition).
 * Returns what they could not cover: the borrower's own debt. */
static void note_peak(ctable *t, cap_kind k, int64_t nano, uint64_t now_ms);

static int64_t lend(ctable *t, const cpart *borrower, cap_kind k, int64_t nano, uint64_t now_ms)
{
    int64_t rate = table_rate(t, k);
    for (size_t i = 0; i < t->n_parts && nano > 0; i++) {
        cpart *q = &t->parts[i];
        if (q == borrower)
            continue;
        refill(&q->share[k], rate, t->conf.n_partitions, burst_ms(t), now_ms);
        int64_t take = q->share[k].tokens < nano ? q->share[k].tokens : nano;
        if (take > 0) {
            q->share[k].tokens -= take;
            nano -= take;
        }
    }
    if (nano > 0 && n_absent(t) > 0) {
        refill_absent(t, k, now_ms);
        int64_t take = t->absent[k].tokens < nano ? t->absent[k].tokens : nano;
        if (take > 0) {
            t->absent[k].tokens -= take;
            nano -= take;
        }
    }
    return nano;
}

/* Closes the heat window once it lasted a second: it was hot when the partition was
 * refused by its ceiling or consumed at least CAP_HEAT_PERCENT of the ceiling's rate over
 * it. A window that lasted two seconds or more had an idle second in it: not hot. */
static void heat_roll(const capacity *c, cpart *p, uint64_t now_ms)
{
    if (now_ms < p->win_start + SEC_MS)
        return;
    uint64_t span = now_ms - p->win_start;
    bool hot = false;
    for (int k = 0; k < 2 && span < 2 * SEC_MS; k++) {
        /* nano * 100 * 1000 >= ceiling * CAP_NANO * percent * span, within int64_t:
         * win_nano is at most a few seconds of a ceiling (<= 1e6 units: 1e15 nano). */
        int64_t have = p->win_nano[k] / (CAP_NANO / SEC_MS) * 100;
        int64_t need = c->ceiling[k] * CAP_HEAT_PERCENT * (int64_t)span;
        hot = hot || p->win_refused[k] || have >= need;
    }
    if (!hot)
        p->hot_since = 0;
    else if (p->hot_since == 0)
        p->hot_since = p->win_start;
    p->win_start = now_ms;
    p->win_nano[0] = p->win_nano[1] = 0;
    p->win_refused[0] = p->win_refused[1] = false;
}

/* Takes `nano` from the buckets (a negative amount gives back an over-reservation to the
 * partition's own share) and counts it as consumed. */
static void take(const capacity *c, ctable *t, cpart *p, cap_kind k, int64_t nano,
                 uint64_t now_ms)
{
    heat_roll(c, p, now_ms);
    p->win_nano[k] += nano;
    p->ceiling[k].tokens -= nano;
    t->pool[k].tokens -= nano;
    /* Within its own share, or borrowed from the others once that is spent (with a node
     * share the pool alone counts: no per-partition accounting). */
    if (!node_shared(t, k)) {
        if (nano <= 0 || p->share[k].tokens > 0)
            p->share[k].tokens -= nano;
        else
            p->share[k].tokens -= lend(t, p, k, nano, now_ms);
    }
    p->n.consumed_nano[k] += nano;
    t->used_nano[k] += nano;
    note_peak(t, k, nano, now_ms);
}

/* On-demand: the previous peak is the most consumed in one second. */
static void note_peak(ctable *t, cap_kind k, int64_t nano, uint64_t now_ms)
{
    if (now_ms >= t->window_start[k] + SEC_MS) {
        if (t->window_nano[k] > t->peak[k])
            t->peak[k] = t->window_nano[k];
        t->window_nano[k] = 0;
        t->window_start[k] = now_ms;
    }
    t->window_nano[k] += nano;
}

void capacity_charge(capacity *c, uint32_t table_id, uint64_t part_id, cap_kind k, int64_t nano,
                     int64_t reserved_nano, bool has_key, uint64_t key_hash, uint64_t now_ms)
{
    ctable *t = table_find(c, table_id, NULL);
    cpart *p = t != NULL ? part_find(t, part_id, NULL) : NULL;
    if (p == NULL)
        return;
    refill_all(c, t, p, k, now_ms);
    take(c, t, p, k, nano - reserved_nano, now_ms);
    if (has_key) {
        hot_note(p, key_hash, nano);
        ring_note(p, key_hash, nano);
    }
}

int64_t capacity_nano(double units)
{
    return (int64_t)(units * (double)CAP_NANO + 0.5);
}

void capacity_note_throttled_request(capacity *c, uint32_t table_id)
{
    ctable *t = table_get(c, table_id, NULL);
    if (t != NULL)
        t->throttled_requests++;
}

/* ------------------------------------------------------------------ reporting */

bool capacity_partition_stats(const capacity *c, uint64_t part_id, cap_counters *out)
{
    const cpart *p = part_any(c, part_id);
    if (p == NULL)
        return false;
    *out = p->n;
    return true;
}

static bool hot_of(const cpart *p, uint64_t *key_hash, unsigned *percent)
{
    if (p->n_hot == 0 || p->hot_total <= 0)
        return false;
    size_t best = 0;
    for (size_t i = 1; i < p->n_hot; i++)
        if (p->hot[i].count > p->hot[best].count)
            best = i;
    /* The guaranteed part of the count (count - err): never over-reports a key. */
    int64_t sure = p->hot[best].count - p->hot[best].err;
    *key_hash = p->hot[best].hash;
    *percent = (unsigned)(sure * 100 / p->hot_total);
    return sure >= CAP_HOT_MIN_UNITS * CAP_NANO;
}

bool capacity_hot_key(const capacity *c, uint64_t part_id, uint64_t *key_hash, unsigned *percent)
{
    const cpart *p = part_any(c, part_id);
    return p != NULL && hot_of(p, key_hash, percent);
}

static cpart *part_any_mut(capacity *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_tables; i++) {
        cpart *p = part_find(&c->tables[i], id, NULL);
        if (p != NULL)
            return p;
    }
    return NULL;
}

uint64_t capacity_hot_ms(capacity *c, uint64_t part_id, uint64_t now_ms)
{
    cpart *p = part_any_mut(c, part_id);
    if (p == NULL)
        return 0;
    heat_roll(c, p, now_ms);
    /* Hot windows up to the current one; none while the current window is idle. */
    if (p->hot_since != 0 && now_ms < p->win_start + 2 * SEC_MS)
        return p->win_start - p->hot_since;
    return 0;
}

split_point capacity_split_point(const capacity *c, uint64_t part_id, uint64_t lo, uint64_t hi,
                                 uint64_t *hash)
{
    const cpart *p = part_any(c, part_id);
    if (p == NULL || p->ring_n == 0)
        return SPLIT_POINT_TOO_FEW;
    split_sample s[CAP_SPLIT_SAMPLES];
    memcpy(s, p->ring, p->ring_n * sizeof *s);
    return split_weighted(s, p->ring_n, lo, hi, CAP_SPLIT_MIN_SAMPLES, CAP_HOT_SHARE, hash);
}

void capacity_heat_reset(capacity *c, uint64_t part_id)
{
    cpart *p = part_any_mut(c, part_id);
    if (p == NULL)
        return;
    p->hot_since = 0;
    p->ring_n = p->ring_at = 0;
}

int64_t capacity_share_tokens(const capacity *c, uint64_t part_id, cap_kind k)
{
    const cpart *p = part_any(c, part_id);
    return p != NULL ? p->share[k].tokens : 0;
}

/* Drops the state of tables the catalog no longer has (or that were re-created under
 * another id). */
static void prune(capacity *c, const catalog *cat)
{
    size_t w = 0;
    for (size_t i = 0; i < c->n_tables; i++) {
        if (catalog_find_id(cat, c->tables[i].id) == NULL) {
            table_release(&c->tables[i]);
            continue;
        }
        c->tables[w++] = c->tables[i];
    }
    c->n_tables = w;
}

static void sum_table(const ctable *t, cap_counters *sum)
{
    memset(sum, 0, sizeof *sum);
    for (size_t i = 0; i < t->n_parts; i++)
        for (int k = 0; k < 2; k++) {
            sum->consumed_nano[k] += t->parts[i].n.consumed_nano[k];
            sum->throttle_events[k] += t->parts[i].n.throttle_events[k];
        }
}

/* Units as a decimal with up to 9 places (exact, no float rounding). */
static void put_units(buf *out, int64_t nano)
{
    buf_printf(out, "%" PRId64, nano / CAP_NANO);
    int64_t frac = nano % CAP_NANO;
    if (frac == 0)
        return;
    char digits[16];
    int n = snprintf(digits, sizeof digits, "%09" PRId64, frac);
    while (n > 0 && digits[n - 1] == '0')
        digits[--n] = '\0';
    buf_printf(out, ".%s", digits);
}

/* Prometheus label values escape \ " and newline; table names cannot hold them
 * ([a-zA-Z0-9_.-]), so they are printed as they are. */
static void metric(buf *out, const char *name, const char *table, const cpart *p)
{
    if (p != NULL)
        buf_printf(out, "%s{table=\"%s\",partition=\"%" PRIu64 "\"} ", name, table, p->id);
    else
        buf_printf(out, "%s{table=\"%s\"} ", name, table);
}

static void counters_text(buf *out, const char *table, const cpart *p, const cap_counters *n)
{
    metric(out, "ConsumedReadCapacityUnits", table, p);
    put_units(out, n->consumed_nano[CAP_READ]);
    buf_printf(out, "\n");
    metric(out, "ConsumedWriteCapacityUnits", table, p);
    put_units(out, n->consumed_nano[CAP_WRITE]);
    buf_printf(out, "\n");
    metric(out, "ReadThrottleEvents", table, p);
    buf_printf(out, "%" PRIu64 "\n", n->throttle_events[CAP_READ]);
    metric(out, "WriteThrottleEvents", table, p);
    buf_printf(out, "%" PRIu64 "\n", n->throttle_events[CAP_WRITE]);
}

void capacity_metrics_text(capacity *c, const catalog *cat, buf *out)
{
    prune(c, cat);
    static const char *const types[][2] = {
        {"ConsumedReadCapacityUnits", "counter"},   {"ConsumedWriteCapacityUnits", "counter"},
        {"ReadThrottleEvents", "counter"},          {"WriteThrottleEvents", "counter"},
        {"ThrottledRequests", "counter"},           {"ProvisionedReadCapacityUnits", "gauge"},
        {"ProvisionedWriteCapacityUnits", "gauge"}, {"HotKeyPercent", "gauge"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        buf_printf(out, "# TYPE %s %s\n", types[i][0], types[i][1]);
    for (size_t i = 0; i < c->n_tables; i++) {
        const ctable *t = &c->tables[i];
        const table_info *ti = catalog_find_id(cat, t->id);
        const char *name = ti->schema.name;
        cap_counters sum;
        sum_table(t, &sum);
        counters_text(out, name, NULL, &sum);
        metric(out, "ThrottledRequests", name, NULL);
        buf_printf(out, "%" PRIu64 "\n", t->throttled_requests);
        if (ti->billing == BILLING_PROVISIONED) {
            metric(out, "ProvisionedReadCapacityUnits", name, NULL);
            buf_printf(out, "%" PRId64 "\n", ti->read_capacity);
            metric(out, "ProvisionedWriteCapacityUnits", name, NULL);
            buf_printf(out, "%" PRId64 "\n", ti->write_capacity);
        }
        for (size_t j = 0; j < t->n_parts; j++) {
            const cpart *p = &t->parts[j];
            counters_text(out, name, p, &p->n);
            uint64_t h;
            unsigned pct;
            if (hot_of(p, &h, &pct) && pct >= CAP_HOT_SHARE)
                buf_printf(out,
                           "HotKeyPercent{table=\"%s\",partition=\"%" PRIu64
                           "\",key_hash=\"%016" PRIx64 "\"} %u\n",
                           name, p->id, h, pct);
        }
    }
}

static void counters_json(buf *out, const cap_counters *n)
{
    buf_printf(out, "\"consumed\":{\"read\":");
    put_units(out, n->consumed_nano[CAP_READ]);
    buf_printf(out, ",\"write\":");
    put_units(out, n->consumed_nano[CAP_WRITE]);
    buf_printf(out, "},\"read_throttle_events\":%" PRIu64 ",\"write_throttle_events\":%" PRIu64,
               n->throttle_events[CAP_READ], n->throttle_events[CAP_WRITE]);
}

void capacity_table_json(capacity *c, const table_info *ti, buf *out)
{
    const ctable *t = table_find(c, ti->schema.table_id, NULL);
    cap_counters sum;
    memset(&sum, 0, sizeof sum);
    if (t != NULL)
        sum_table(t, &sum);
    buf_printf(out, "{\"table\":\"%s\",\"billing_mode\":\"%s\",", ti->schema.name,
               billing_mode_name(ti->billing));
    buf_printf(out, "\"provisioned\":{\"read\":%" PRId64 ",\"write\":%" PRId64 "},",
               ti->read_capacity, ti->write_capacity);
    counters_json(out, &sum);
    buf_printf(out, ",\"throttled_requests\":%" PRIu64 ",\"partitions\":[",
               t != NULL ? t->throttled_requests : 0);
    for (size_t j = 0; t != NULL && j < t->n_parts; j++) {
        const cpart *p = &t->parts[j];
        buf_printf(out, "%s{\"id\":%" PRIu64 ",", j ? "," : "", p->id);
        counters_json(out, &p->n);
        uint64_t h;
        unsigned pct;
        if (hot_of(p, &h, &pct) && pct >= CAP_HOT_SHARE)
            buf_printf(out, ",\"hot_key\":{\"hash\":\"%016" PRIx64 "\",\"percent\":%u}}", h, pct);
        else
            buf_printf(out, ",\"hot_key\":null}");
    }
    buf_printf(out, "]}");
}
