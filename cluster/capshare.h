#ifndef STRATA_CLUSTER_CAPSHARE_H
#define STRATA_CLUSTER_CAPSHARE_H
/*
 * Capacity shares across nodes. A provisioned table's partitions are led by several
 * nodes, and its eventual reads are served by every replica, so no node alone sees the
 * table's whole traffic. Every node tells every other, once a second (MSG_CAP_DEMAND in
 * router_cluster.c), the units each table wanted on it over the last second
 * (capacity_demand_collect); every node keeps the latest figures here and gives itself
 * the share capshare_share computes, the same function of the same figures on every node,
 * so the shares add up to the table's rate:
 *
 *   - demand D = the wants of every node together, R = the table's rate;
 *   - D >= R: each node gets its want x R / D (the table is saturated: shares follow
 *     demand, and a hot partition's node gets most of the table);
 *   - D <  R: each node gets its want, plus R - D shared out by the nodes' weights
 *     (the caller's: e.g. the replicas and leaders of the table each node holds), so the
 *     unused part of the rate waits where traffic is likely to come, as burst credit.
 *
 * One snapshot everywhere. Shares add up to the rate only if every node computes from the
 * same figures, so figures are labelled with a period, the wall-clock second at which
 * they were sent: every node sends at the start of each second and computes its share
 * a little later (router_cluster.c: CAP_SHARE_SETTLE_MS), from the figures of that
 * period, its own included. Were each node to use its newest own figure against the
 * others' older ones, a change of demand would make the shares add up to less (falling)
 * or more (rising) than the rate until it settled. A figure of up to CAPSHARE_LATE
 * periods before (a message lost or late) or one after (a clock ahead) stands in; older
 * ones, or figures that arrived more than CAPSHARE_FRESH_MS ago, count as no demand (a
 * node that stopped sending is down or idle). Clocks need to agree to well within the
 * settle time, as NTP keeps them. A node cut off from the others counts them as idle: in
 * a network partition each side may spend up to the whole rate (the minority serves no
 * writes, as Raft wants; eventual reads go on): a rate limit is not worth refusing
 * requests on a guess about nodes it cannot hear.
 *
 * Pure: no I/O, no clock (times are passed in). Message body, version 1:
 *   u8 version | varint period | varint n |
 *   (varint table_id | varint read_milli | varint write_milli) * n
 * with n <= CAPSHARE_MAX_ENTRIES and wants in thousandths of a unit per second; the rpc
 * frame around it carries the checksum.
 */
#include <stddef.h>
#include <stdint.h>

#include "cluster/capacity.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"

#define CAPSHARE_MAX_ENTRIES 4096 /* tables per message: above CATALOG_MAX_TABLES (2500) */
#define CAPSHARE_FRESH_MS    3000 /* a node's figures count this long after they arrive */
#define CAPSHARE_MAX_MILLI   ((int64_t)1 << 50) /* wants above this are malformed */
#define CAPSHARE_LATE        2                  /* periods a figure may lag and still stand in */

typedef struct {
    uint32_t table_id;
    int64_t milli[2]; /* by cap_kind: thousandths of a unit per second, >= 0 */
} capshare_want;

/* A node's weight for a table when the unused part of its rate is shared out. */
typedef struct {
    uint64_t node;
    int64_t weight; /* >= 0 */
} capshare_weight;

typedef struct capshare capshare;

capshare *capshare_new(void);
void capshare_free(capshare *s);

/* Wants per second from what capacity_demand_collect measured over `period_ms`. */
capshare_want capshare_want_of(const cap_demand *d, uint64_t period_ms);

/* Appends the message body for wants[0..n) of `period`, n <= CAPSHARE_MAX_ENTRIES
 * (out->failed on out of memory). */
void capshare_encode(uint64_t period, const capshare_want *wants, size_t n, buf *out);

/* Records node `from`'s wants as heard at now_ms (`from` is not self: self's figures come
 * from capshare_own). A node's message names its tables with a want (and each once more
 * at zero after it stopped); tables it leaves out keep their figures until they are
 * stale. -1 with ERR_CORRUPT and nothing recorded when the bytes
 * are malformed (unknown version, truncated, trailing bytes, more than
 * CAPSHARE_MAX_ENTRIES, a table id above UINT32_MAX, a want above CAPSHARE_MAX_MILLI);
 * ERR_NOMEM. */
int capshare_receive(capshare *s, uint64_t from, const uint8_t *data, size_t len, uint64_t now_ms,
                     strata_err *err);

/* Folds this period's wants of node `self` (raw[0..n), sorted by table id: what
 * capacity_demand_collect measured, through capshare_want_of) into its figures, which
 * are averages over the last periods: each period half the old figure and half the new
 * one (a table first wanted starts at its figure), so one noisy second moves a share
 * little and every node sees about the same figures. Writes to out[] (at most `max`)
 * the figures to send: every table self wants, and once more at zero a table whose want
 * faded away. Returns how many. Self's figures are labelled `period`. */
size_t capshare_own(capshare *s, uint64_t self, const capshare_want *raw, size_t n,
                    capshare_want *out, size_t max, uint64_t period, uint64_t now_ms);

/* Node `self`'s share of table `table_id`'s rate for kind `k`, in parts per million
 * (CAP_PPM), as above, from the figures of `period` (self's from capshare_own, the
 * others' heard, with the stand-ins above): `rate_milli` is the table's rate, weights[0..n)
 * the nodes' weights (self's included; nodes missing from it weigh 0). Without any
 * weight, the spare goes in equal parts to self and the nodes heard. A rate of 0 or less
 * (no limit): CAP_PPM. */
uint32_t capshare_share(const capshare *s, uint64_t self, uint32_t table_id, cap_kind k,
                        int64_t rate_milli, const capshare_weight *weights, size_t n,
                        uint64_t period, uint64_t now_ms);

/* Drops figures older than CAPSHARE_FRESH_MS at now_ms (bounded memory). */
void capshare_expire(capshare *s, uint64_t now_ms);

size_t capshare_count(const capshare *s);

#endif
