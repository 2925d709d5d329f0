#include "deploy/nfq-delay/delayq.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define IPV4_HEADER_MIN 20

/* Uniform in [0, 1). Loss needs no cryptographic quality, only independence per packet. */
static double next_uniform(delayq *q)
{
    uint64_t x = q->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    q->rng = x;
    return (double)(x >> 11) / (double)(1ull << 53);
}

/* "10.77.1.0/24" (or a bare address, /32) -> network and mask in host order; 0 or -1. */
static int parse_cidr(const char *s, size_t n, uint32_t *net, uint32_t *mask)
{
    char text[32];
    if (n == 0 || n >= sizeof text)
        return -1;
    memcpy(text, s, n);
    text[n] = '\0';

    long len = 32;
    char *slash = strchr(text, '/');
    if (slash) {
        char *end;
        *slash = '\0';
        errno = 0;
        len = strtol(slash + 1, &end, 10);
        if (errno || end == slash + 1 || *end != '\0' || len < 0 || len > 32)
            return -1;
    }
    struct in_addr in;
    if (inet_pton(AF_INET, text, &in) != 1)
        return -1;
    *mask = len == 0 ? 0 : ~0u << (32 - len);
    *net = ntohl(in.s_addr) & *mask;
    return 0;
}

static int parse_bounded(const char *s, size_t n, double max, double *out)
{
    char text[32];
    if (n == 0 || n >= sizeof text)
        return -1;
    memcpy(text, s, n);
    text[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    /* !(v >= 0) also rejects NaN. */
    if (errno || *end != '\0' || !(v >= 0) || v > max)
        return -1;
    *out = v;
    return 0;
}

int dq_parse_rule(const char *spec, dq_rule *r, strata_err *err)
{
    const char *field[4];
    size_t flen[4];
    int n = 0;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        if (n == 4)
            return strata_err_set(err, ERR_VALIDATION, "rule '%s': more than 4 fields", spec);
        field[n] = p;
        flen[n] = comma ? (size_t)(comma - p) : strlen(p);
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (n < 3)
        return strata_err_set(err, ERR_VALIDATION,
                              "rule '%s': want SRC/LEN,DST/LEN,DELAY_MS[,LOSS_PCT]", spec);

    memset(r, 0, sizeof *r);
    if (parse_cidr(field[0], flen[0], &r->src_net, &r->src_mask) < 0)
        return strata_err_set(err, ERR_VALIDATION, "rule '%s': bad source network", spec);
    if (parse_cidr(field[1], flen[1], &r->dst_net, &r->dst_mask) < 0)
        return strata_err_set(err, ERR_VALIDATION, "rule '%s': bad destination network", spec);
    double delay_ms, loss_pct = 0;
    if (parse_bounded(field[2], flen[2], DQ_MAX_DELAY_MS, &delay_ms) < 0)
        return strata_err_set(err, ERR_VALIDATION, "rule '%s': delay wants 0..60000 ms", spec);
    if (n == 4 && parse_bounded(field[3], flen[3], 100, &loss_pct) < 0)
        return strata_err_set(err, ERR_VALIDATION, "rule '%s': loss wants 0..100 %%", spec);
    r->delay_ns = (uint64_t)(delay_ms * 1e6 + 0.5);
    r->loss = loss_pct / 100.0;
    return 0;
}

int dq_add_rule(delayq *q, const dq_rule *r, strata_err *err)
{
    if (q->nrules == DQ_MAX_RULES)
        return strata_err_set(err, ERR_LIMIT_EXCEEDED, "more than %d rules", DQ_MAX_RULES);
    q->rules[q->nrules++] = *r;
    return 0;
}

int dq_init(delayq *q, uint32_t max_pending, uint64_t seed, strata_err *err)
{
    if (max_pending < 1 || max_pending > DQ_MAX_PENDING_CAP)
        return strata_err_set(err, ERR_VALIDATION, "max pending wants 1..%u", DQ_MAX_PENDING_CAP);
    for (int i = 0; i < q->nrules; i++) {
        dq_rule *r = &q->rules[i];
        assert(r->ring == NULL);
        r->ring = calloc(max_pending, sizeof *r->ring);
        if (r->ring == NULL) {
            dq_free(q);
            return strata_err_set(err, ERR_NOMEM, "cannot hold %u packets", max_pending);
        }
        r->cap = max_pending;
        r->head = r->count = 0;
    }
    q->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    return 0;
}

void dq_free(delayq *q)
{
    for (int i = 0; i < q->nrules; i++) {
        free(q->rules[i].ring);
        q->rules[i].ring = NULL;
        q->rules[i].cap = q->rules[i].count = q->rules[i].head = 0;
    }
}

static dq_rule *find_rule(delayq *q, uint32_t src, uint32_t dst)
{
    for (int i = 0; i < q->nrules; i++) {
        dq_rule *r = &q->rules[i];
        if ((src & r->src_mask) == r->src_net && (dst & r->dst_mask) == r->dst_net)
            return r;
    }
    return NULL;
}

dq_action dq_classify(delayq *q, uint32_t id, const unsigned char *pkt, size_t len, uint64_t now_ns)
{
    if (len < IPV4_HEADER_MIN || (pkt[0] >> 4) != 4) {
        q->unmatched++;
        return DQ_ACCEPT;
    }
    uint32_t src, dst;
    memcpy(&src, pkt + 12, 4);
    memcpy(&dst, pkt + 16, 4);
    dq_rule *r = find_rule(q, ntohl(src), ntohl(dst));
    if (r == NULL) {
        q->unmatched++;
        return DQ_ACCEPT;
    }
    r->seen++;
    if (r->loss > 0 && next_uniform(q) < r->loss) {
        r->lost++;
        return DQ_DROP;
    }
    if (r->delay_ns == 0)
        return DQ_ACCEPT;
    if (r->count == r->cap) {
        r->overflow++;
        return DQ_DROP;
    }
    assert(r->cap > 0);
    dq_held *slot = &r->ring[(r->head + r->count) % r->cap];
    slot->id = id;
    slot->due_ns = now_ns + r->delay_ns;
    r->count++;
    r->delayed++;
    return DQ_HELD;
}

uint64_t dq_release(delayq *q, uint64_t now_ns, void (*accept)(void *ctx, uint32_t id), void *ctx)
{
    uint64_t next = 0;
    for (int i = 0; i < q->nrules; i++) {
        dq_rule *r = &q->rules[i];
        while (r->count > 0 && r->ring[r->head].due_ns <= now_ns) {
            accept(ctx, r->ring[r->head].id);
            r->head = (r->head + 1) % r->cap;
            r->count--;
        }
        if (r->count > 0 && (next == 0 || r->ring[r->head].due_ns < next))
            next = r->ring[r->head].due_ns;
    }
    return next;
}

uint64_t dq_held_count(const delayq *q)
{
    uint64_t n = 0;
    for (int i = 0; i < q->nrules; i++)
        n += q->rules[i].count;
    return n;
}
