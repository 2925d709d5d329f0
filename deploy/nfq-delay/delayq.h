#ifndef STRATA_DEPLOY_DELAYQ_H
#define STRATA_DEPLOY_DELAYQ_H
/*
 * The decision core of nfq-delay, free of netlink so it can be unit tested: rules that
 * say how long to hold (and how often to drop) IPv4 packets between two networks, and
 * the bounded queues of held packet ids.
 *
 * A rule is "SRC/LEN,DST/LEN,DELAY_MS[,LOSS_PCT]": DELAY_MS in 0..60000 (fractions
 * allowed), LOSS_PCT in 0..100 (default 0). A packet is classified by the first rule whose
 * source and destination networks contain its addresses. Each rule has one FIFO of held
 * packets: its delay is constant, so the FIFO is sorted by release time and the next
 * packet to release is one of the FIFO heads. A FIFO holds at most `max_pending`
 * packets; a packet arriving at a full FIFO is dropped (tail drop), so memory is bounded
 * by rules x max_pending x 16 bytes.
 */
#include <stddef.h>
#include <stdint.h>

#include "storage/base/err.h"

#define DQ_MAX_RULES       64
#define DQ_MAX_PENDING_CAP (1u << 20)
#define DQ_MAX_DELAY_MS    60000.0

typedef struct {
    uint32_t id;
    uint64_t due_ns;
} dq_held;

typedef struct {
    uint32_t src_net, src_mask; /* host byte order */
    uint32_t dst_net, dst_mask;
    uint64_t delay_ns;
    double loss; /* drop probability in [0, 1] */

    dq_held *ring; /* FIFO of `cap` slots, allocated by dq_init */
    uint32_t cap, head, count;

    uint64_t seen, delayed, lost, overflow;
} dq_rule;

typedef struct {
    dq_rule rules[DQ_MAX_RULES];
    int nrules;
    uint64_t unmatched; /* packets no rule matched (or not IPv4) */
    uint64_t rng;       /* xorshift64 state, never 0 */
} delayq;

typedef enum {
    DQ_ACCEPT, /* let it through now */
    DQ_DROP,   /* lost, or its FIFO is full */
    DQ_HELD,   /* queued: dq_release will hand it back when due */
} dq_action;

/* Parses one rule spec into `r` (queue fields zeroed); ERR_VALIDATION naming the bad part. */
int dq_parse_rule(const char *spec, dq_rule *r, strata_err *err);

/* Adds a parsed rule (at most DQ_MAX_RULES); ERR_LIMIT_EXCEEDED beyond. */
int dq_add_rule(delayq *q, const dq_rule *r, strata_err *err);

/* Allocates every rule's FIFO of `max_pending` (1..DQ_MAX_PENDING_CAP) slots and seeds the
 * loss generator; call after the last dq_add_rule. ERR_VALIDATION or ERR_NOMEM. */
int dq_init(delayq *q, uint32_t max_pending, uint64_t seed, strata_err *err);

void dq_free(delayq *q);

/* Decides the fate of packet `id`, whose first `len` bytes (the IPv4 header at least)
 * are `pkt`, arriving at `now_ns` (monotonic). */
dq_action dq_classify(delayq *q, uint32_t id, const unsigned char *pkt, size_t len,
                      uint64_t now_ns);

/* Calls accept(ctx, id) for every held packet due by `now_ns`, in release order per rule;
 * returns the earliest release time still held, or 0 when nothing is held. */
uint64_t dq_release(delayq *q, uint64_t now_ns, void (*accept)(void *ctx, uint32_t id), void *ctx);

/* Packets currently held over all rules. */
uint64_t dq_held_count(const delayq *q);

#endif
