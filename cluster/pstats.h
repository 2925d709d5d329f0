#ifndef STRATA_CLUSTER_PSTATS_H
#define STRATA_CLUSTER_PSTATS_H
/*
 * Partition statistics heard from other nodes. Every node tells the others, every few
 * seconds, the item count and size of the partitions it leads (MSG_PART_STATS in
 * router_cluster.c); every node keeps the latest figures per partition here. So
 * DescribeTable's ItemCount and TableSizeBytes count every partition of a table on any
 * node, not only the replicas the node holds (DynamoDB refreshes these figures about
 * every six hours; ours are seconds old), and the scheduler can later see partition sizes
 * (split for size) and partition loads (leader balance by load, placement_leaders_load).
 *
 * Pure data: no I/O, no clock (times are passed in). Message body, version 2 (sent):
 *   u8 version | varint n | (varint partition | varint items | varint bytes | varint load) * n
 * Version 1 (still accepted, from nodes not yet upgraded) has no load: it reads as 0.
 * n <= PSTATS_MAX_ENTRIES; the rpc frame around it carries the checksum.
 *
 * Load: the partition's recent consumed capacity as its leader charged it, in
 * milli-units per second, reads + PSTATS_WRITE_WEIGHT x writes. Writes weigh more because
 * every replica appends, syncs and applies them and the leader sends each to two
 * followers, while a read runs on one replica; a write unit (1 KB) also costs more than a
 * read unit (4 KB of a strong read) per unit, as DynamoDB's prices say.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/router.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"

#define PSTATS_MAX_ENTRIES  8192 /* per message; a node leading more sends several */
#define PSTATS_WRITE_WEIGHT 3    /* a write unit counts as this many read units of load */

typedef struct pstats pstats;

typedef struct {
    uint64_t partition;
    partition_stats stats;
    uint64_t load; /* milli-units per second, see above */
} pstats_entry;

pstats *pstats_new(void);
void pstats_free(pstats *s);

/* Appends the message body for entries[0..n), n <= PSTATS_MAX_ENTRIES (out->failed on
 * out of memory). */
void pstats_encode(const pstats_entry *entries, size_t n, buf *out);

/* Records every entry of a message (version 1 or 2) as heard at now_ms (the newest
 * figures win). -1 with ERR_CORRUPT and nothing recorded when the bytes are malformed
 * (unknown version, truncated, trailing bytes, more than PSTATS_MAX_ENTRIES, counts above
 * INT64_MAX); ERR_NOMEM. */
int pstats_receive(pstats *s, const uint8_t *data, size_t len, uint64_t now_ms, strata_err *err);

/* The figures of `partition` heard at or after since_ms; false if none. */
bool pstats_get(const pstats *s, uint64_t partition, uint64_t since_ms, partition_stats *out);

/* The load of `partition` heard at or after since_ms; false if none. */
bool pstats_get_load(const pstats *s, uint64_t partition, uint64_t since_ms, uint64_t *load);

/* The load figure (see above) of `read_nano` and `write_nano` consumed (nano-units, as
 * cluster/capacity.h counts them) over `ms` milliseconds; 0 when ms is 0. */
uint64_t pstats_load_rate(int64_t read_nano, int64_t write_nano, uint64_t ms);

/* Drops the partitions for which keep(ctx, partition) is false (dropped tables, ...). */
void pstats_prune(pstats *s, bool (*keep)(void *ctx, uint64_t partition), void *ctx);

size_t pstats_count(const pstats *s);

#endif
