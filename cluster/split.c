/* split.c: the SPLIT command, the local range record and the split point (split.h). */
#include "cluster/split.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void put_members(buf *out, const split_member *m, uint32_t n)
{
    buf_put_u8(out, (uint8_t)n);
    for (uint32_t i = 0; i < n; i++) {
        buf_put_varint(out, m[i].node);
        buf_put_u8(out, m[i].voter ? 1 : 0);
    }
}

/* Reads a member list; `need_voter`: at least one voter and one member (a command). */
static int get_members(rd *r, split_member *m, uint32_t *n, bool need_voter)
{
    uint32_t cnt = rd_u8(r);
    if (r->failed || cnt > SPLIT_MAX_MEMBERS || (need_voter && cnt == 0))
        return -1;
    bool voter = false;
    for (uint32_t i = 0; i < cnt; i++) {
        m[i].node = rd_varint(r);
        uint8_t v = rd_u8(r);
        if (r->failed || m[i].node == 0 || v > 1)
            return -1;
        for (uint32_t j = 0; j < i; j++)
            if (m[j].node == m[i].node)
                return -1;
        m[i].voter = v == 1;
        voter = voter || m[i].voter;
    }
    *n = cnt;
    return need_voter && !voter ? -1 : 0;
}

/* Appends the checksum of everything from `start` on. */
static void put_sum(buf *out, size_t start)
{
    if (!out->failed)
        buf_put_u64be(out, XXH3_64bits(out->data + start, out->len - start));
}

/* Checks the trailing checksum; *body_len = the bytes before it. */
static int check_sum(const uint8_t *b, size_t len, size_t *body_len)
{
    if (len < 8)
        return -1;
    rd r;
    rd_init(&r, b + len - 8, 8);
    if (rd_u64be(&r) != XXH3_64bits(b, len - 8))
        return -1;
    *body_len = len - 8;
    return 0;
}

bool split_cmd_is(const uint8_t *cmd, size_t len)
{
    return len >= 2 && cmd[0] == SPLIT_CMD_MAGIC0 && cmd[1] == SPLIT_CMD_MAGIC1;
}

int split_cmd_encode(const split_cmd *c, buf *out, strata_err *err)
{
    bool voter = false;
    for (uint32_t i = 0; i < c->n_members && i < SPLIT_MAX_MEMBERS; i++)
        voter = voter || c->members[i].voter;
    if (c->child_id == 0 || c->n_members == 0 || c->n_members > SPLIT_MAX_MEMBERS || !voter)
        return strata_err_set(err, ERR_INTERNAL, "bad split command");
    size_t start = out->len;
    buf_put_u8(out, SPLIT_CMD_MAGIC0);
    buf_put_u8(out, SPLIT_CMD_MAGIC1);
    buf_put_u8(out, SPLIT_VERSION);
    buf_put_varint(out, c->child_id);
    buf_put_u64be(out, c->split_hash);
    put_members(out, c->members, c->n_members);
    put_sum(out, start);
    return out->failed ? strata_err_set(err, ERR_NOMEM, "out of memory") : 0;
}

int split_cmd_decode(const uint8_t *b, size_t len, split_cmd *out, strata_err *err)
{
    size_t body;
    if (!split_cmd_is(b, len) || check_sum(b, len, &body) < 0)
        return strata_err_set(err, ERR_CORRUPT, "bad split command (magic or checksum)");
    rd r;
    rd_init(&r, b + 2, body - 2);
    memset(out, 0, sizeof *out);
    uint8_t v = rd_u8(&r);
    if (!r.failed && v > SPLIT_VERSION)
        return strata_err_set(err, ERR_NEWER,
                              "SPLIT command of version %u: this binary reads version %d", v,
                              SPLIT_VERSION);
    out->child_id = rd_varint(&r);
    out->split_hash = rd_u64be(&r);
    if (r.failed || v != SPLIT_VERSION || out->child_id == 0 ||
        get_members(&r, out->members, &out->n_members, true) < 0 || rd_left(&r) != 0)
        return strata_err_set(err, ERR_CORRUPT, "bad split command");
    return 0;
}

int split_range_encode(const split_range *rg, buf *out, strata_err *err)
{
    if (rg->hash_lo > rg->hash_hi || rg->n_members > SPLIT_MAX_MEMBERS)
        return strata_err_set(err, ERR_INTERNAL, "bad range record");
    size_t start = out->len;
    buf_put_u8(out, SPLIT_VERSION);
    buf_put_u32be(out, rg->table_id);
    buf_put_u64be(out, rg->hash_lo);
    buf_put_u64be(out, rg->hash_hi);
    put_members(out, rg->members, rg->n_members);
    put_sum(out, start);
    return out->failed ? strata_err_set(err, ERR_NOMEM, "out of memory") : 0;
}

int split_range_decode(const uint8_t *b, size_t len, split_range *out, strata_err *err)
{
    size_t body;
    if (check_sum(b, len, &body) < 0)
        return strata_err_set(err, ERR_CORRUPT, "bad range record (checksum)");
    rd r;
    rd_init(&r, b, body);
    memset(out, 0, sizeof *out);
    uint8_t v = rd_u8(&r);
    out->table_id = rd_u32be(&r);
    out->hash_lo = rd_u64be(&r);
    out->hash_hi = rd_u64be(&r);
    if (r.failed || v != SPLIT_VERSION || out->hash_lo > out->hash_hi ||
        get_members(&r, out->members, &out->n_members, false) < 0 || rd_left(&r) != 0)
        return strata_err_set(err, ERR_CORRUPT, "bad range record");
    return 0;
}

bool split_hash_valid(uint64_t lo, uint64_t hi, uint64_t split)
{
    return lo < split && split <= hi;
}

int split_middle(uint64_t lo, uint64_t hi, uint64_t *split, strata_err *err)
{
    if (hi <= lo)
        return strata_err_set(err, ERR_VALIDATION, "a range of one hash cannot be split");
    *split = lo + (hi - lo) / 2 + 1;
    return 0;
}

static int sample_cmp(const void *a, const void *b)
{
    uint64_t x = ((const split_sample *)a)->hash, y = ((const split_sample *)b)->hash;
    return x < y ? -1 : x > y;
}

/* Keeps the samples inside [lo, hi] with a positive weight (in place); their number. */
static size_t samples_inside(split_sample *s, size_t n, uint64_t lo, uint64_t hi)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i].hash >= lo && s[i].hash <= hi && s[i].weight > 0)
            s[w++] = s[i];
    return w;
}

split_point split_weighted(split_sample *s, size_t n, uint64_t lo, uint64_t hi, size_t min_samples,
                           unsigned hot_percent, uint64_t *out)
{
    n = samples_inside(s, n, lo, hi);
    if (n == 0 || n < min_samples)
        return SPLIT_POINT_TOO_FEW;
    qsort(s, n, sizeof *s, sample_cmp);
    /* Weights are bounded by the caller (units of one operation each, a few thousand
     * samples): the sums below cannot overflow. */
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += s[i].weight;
    /* One hash (one partition key) holding hot_percent of the weight: no cut helps. */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int64_t w = 0;
        while (j < n && s[j].hash == s[i].hash)
            w += s[j++].weight;
        if (w * 100 >= total * (int64_t)hot_percent) {
            *out = s[i].hash;
            return SPLIT_POINT_HOT_KEY;
        }
        i = j;
    }
    /* The boundary between two distinct hashes that leaves the weights most even; the
     * cut goes half-way between them, so keys not sampled fall on either side evenly. */
    int64_t left = 0, best_gap = INT64_MAX;
    uint64_t best = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j].hash == s[i].hash)
            left += s[j++].weight;
        if (j == n)
            break;
        int64_t gap = 2 * left - total;
        gap = gap < 0 ? -gap : gap;
        if (gap < best_gap) {
            best_gap = gap;
            best = s[i].hash + (s[j].hash - s[i].hash) / 2 + 1;
        }
        i = j;
    }
    if (best_gap == INT64_MAX || !split_hash_valid(lo, hi, best))
        return SPLIT_POINT_TOO_FEW; /* one distinct hash only (and under hot_percent) */
    *out = best;
    return SPLIT_POINT_FOUND;
}
