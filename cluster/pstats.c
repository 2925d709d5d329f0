/* Partition statistics heard from other nodes (contract in pstats.h): a sorted array. */
#include "cluster/pstats.h"

#include <stdlib.h>
#include <string.h>

#define PSTATS_VERSION_1 1 /* no load */
#define PSTATS_VERSION   2

typedef struct {
    pstats_entry e;
    uint64_t heard_ms;
} slot;

struct pstats {
    slot *v; /* sorted by partition */
    size_t n, cap;
};

pstats *pstats_new(void)
{
    return calloc(1, sizeof(pstats));
}

void pstats_free(pstats *s)
{
    if (s == NULL)
        return;
    free(s->v);
    free(s);
}

void pstats_encode(const pstats_entry *entries, size_t n, buf *out)
{
    buf_put_u8(out, PSTATS_VERSION);
    buf_put_varint(out, n);
    for (size_t i = 0; i < n; i++) {
        buf_put_varint(out, entries[i].partition);
        buf_put_varint(
            out, (uint64_t)(entries[i].stats.item_count > 0 ? entries[i].stats.item_count : 0));
        buf_put_varint(
            out, (uint64_t)(entries[i].stats.size_bytes > 0 ? entries[i].stats.size_bytes : 0));
        buf_put_varint(out, entries[i].load);
    }
}

uint64_t pstats_load_rate(int64_t read_nano, int64_t write_nano, uint64_t ms)
{
    if (ms == 0)
        return 0;
    /* nano-units over ms -> milli-units per second: x 1000 (per s) / 1e6 (nano -> milli). */
    unsigned __int128 w =
        (unsigned __int128)(read_nano > 0 ? read_nano : 0) +
        (unsigned __int128)(write_nano > 0 ? write_nano : 0) * PSTATS_WRITE_WEIGHT;
    unsigned __int128 r = w / ((unsigned __int128)ms * 1000);
    return r > UINT64_MAX ? UINT64_MAX : (uint64_t)r;
}

/* Index of the first slot with partition >= p. */
static size_t lower_bound(const pstats *s, uint64_t p)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->v[mid].e.partition < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int record(pstats *s, const pstats_entry *e, uint64_t now_ms, strata_err *err)
{
    size_t i = lower_bound(s, e->partition);
    if (i == s->n || s->v[i].e.partition != e->partition) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 64;
            slot *v = realloc(s->v, cap * sizeof *v);
            if (v == NULL)
                return strata_err_set(err, ERR_NOMEM, "out of memory");
            s->v = v;
            s->cap = cap;
        }
        memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
        s->n++;
    }
    s->v[i] = (slot){.e = *e, .heard_ms = now_ms};
    return 0;
}

/* Decodes the whole message first, so a malformed one records nothing. */
int pstats_receive(pstats *s, const uint8_t *data, size_t len, uint64_t now_ms, strata_err *err)
{
    rd r;
    rd_init(&r, data, len);
    uint8_t version = rd_u8(&r);
    uint64_t n = rd_varint(&r);
    bool v1 = version == PSTATS_VERSION_1;
    if (r.failed || (!v1 && version != PSTATS_VERSION) || n > PSTATS_MAX_ENTRIES || n > rd_left(&r))
        return strata_err_set(err, ERR_CORRUPT, "malformed partition statistics");
    pstats_entry *e = calloc(n ? (size_t)n : 1, sizeof *e);
    if (e == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !r.failed; i++) {
        e[i].partition = rd_varint(&r);
        uint64_t items = rd_varint(&r), bytes = rd_varint(&r);
        if (items > INT64_MAX || bytes > INT64_MAX)
            r.failed = true;
        e[i].stats = (partition_stats){(int64_t)items, (int64_t)bytes};
        e[i].load = v1 ? 0 : rd_varint(&r);
    }
    int rc = 0;
    if (r.failed || rd_left(&r) != 0)
        rc = strata_err_set(err, ERR_CORRUPT, "malformed partition statistics");
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = record(s, &e[i], now_ms, err);
    free(e);
    return rc;
}

/* The slot of `partition` heard at or after since_ms, NULL if none. */
static const slot *fresh(const pstats *s, uint64_t partition, uint64_t since_ms)
{
    size_t i = lower_bound(s, partition);
    if (i == s->n || s->v[i].e.partition != partition || s->v[i].heard_ms < since_ms)
        return NULL;
    return &s->v[i];
}

bool pstats_get(const pstats *s, uint64_t partition, uint64_t since_ms, partition_stats *out)
{
    const slot *sl = fresh(s, partition, since_ms);
    if (sl != NULL)
        *out = sl->e.stats;
    return sl != NULL;
}

bool pstats_get_load(const pstats *s, uint64_t partition, uint64_t since_ms, uint64_t *load)
{
    const slot *sl = fresh(s, partition, since_ms);
    if (sl != NULL)
        *load = sl->e.load;
    return sl != NULL;
}

void pstats_prune(pstats *s, bool (*keep)(void *ctx, uint64_t partition), void *ctx)
{
    size_t w = 0;
    for (size_t i = 0; i < s->n; i++)
        if (keep(ctx, s->v[i].e.partition))
            s->v[w++] = s->v[i];
    s->n = w;
}

size_t pstats_count(const pstats *s)
{
    return s->n;
}
