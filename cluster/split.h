#ifndef STRATA_CLUSTER_SPLIT_H
#define STRATA_CLUSTER_SPLIT_H
/*
 * Partition splits: the pure parts (no I/O), used by cluster/router_cluster.c.
 *
 * A split is decided in the cluster map first (META_CMD_SPLIT: the parent keeps
 * [lo, split-1], the child gets [split, hi]); the parent's leader then carries it into
 * the parent's own Raft log as a SPLIT command, so every replica shrinks its local range
 * and creates the child group at the same log index. This module holds:
 *
 *  - the SPLIT command carried in a partition log. It shares the log with the partition
 *    state machine's write commands (protobuf, cluster/partition.h), so it starts with
 *    SPLIT_CMD_MAGIC, a byte no protobuf message starts with (field 31, wire type 7 is
 *    invalid): split_cmd_is() tells them apart without decoding.
 *      0xFF 'S' | u8 version | varint child id | u64be split hash | u8 n members |
 *      (varint node id | u8 voter)* | u64be xxh3(all before)
 *    Every version keeps the magic, the version byte after it and the checksum at the
 *    end, so that a replica tells a newer binary's SPLIT (ERR_NEWER from
 *    split_cmd_decode: it stops, cluster/partition_entry.h) from a damaged one.
 *    The members are the parent's Raft configuration as its leader saw it when it
 *    proposed: followers apply the command later, after configuration entries of their
 *    own maybe, so only what the command carries is the same on every replica.
 *
 *  - the local range record a replica keeps in its engine for each partition replica it
 *    holds: the range it serves as of its applied state (which may differ from the map's
 *    for a while around a split), and, for a child created by a split, the members it was
 *    bootstrapped with (so a restart bootstraps it again identically).
 *      u8 version | u32be table id | u64be hash_lo | u64be hash_hi | u8 n members |
 *      (varint node id | u8 voter)* | u64be xxh3(all before)
 *
 *  - split points: the middle of a range, or the point that divides sampled traffic
 *    (or data) evenly, which refuses to cut when one partition key holds most of it.
 *
 * Decoders check bounds and the checksum; ERR_CORRUPT on anything malformed.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/buf.h"
#include "storage/base/err.h"

#define SPLIT_CMD_MAGIC0    0xFF
#define SPLIT_CMD_MAGIC1    'S'
#define SPLIT_VERSION       1
#define SPLIT_MAX_MEMBERS   8 /* >= META_MAX_MEMBERS + 2 (a configuration during a move) */

typedef struct {
    uint64_t node;
    bool voter;
} split_member;

typedef struct {
    uint64_t child_id;   /* > 0 */
    uint64_t split_hash; /* the child owns [split_hash, parent's hash_hi] */
    uint32_t n_members;  /* 1..SPLIT_MAX_MEMBERS, at least one voter */
    split_member members[SPLIT_MAX_MEMBERS];
} split_cmd;

typedef struct {
    uint32_t table_id;
    uint64_t hash_lo, hash_hi; /* inclusive, lo <= hi */
    uint32_t n_members;        /* 0: not a split child (started from the map) */
    split_member members[SPLIT_MAX_MEMBERS];
} split_range;

/* True when `cmd` is a SPLIT command (by its first two bytes; it may still not decode). */
bool split_cmd_is(const uint8_t *cmd, size_t len);
int split_cmd_encode(const split_cmd *c, buf *out, strata_err *err);
int split_cmd_decode(const uint8_t *b, size_t len, split_cmd *out, strata_err *err);

int split_range_encode(const split_range *r, buf *out, strata_err *err);
int split_range_decode(const uint8_t *b, size_t len, split_range *out, strata_err *err);

/* The default split hash of [lo, hi]: the child gets the upper half [mid + 1, hi]
 * (mid = lo + (hi - lo) / 2). ERR_VALIDATION when the range holds one hash only. */
int split_middle(uint64_t lo, uint64_t hi, uint64_t *split, strata_err *err);
/* Checks a requested split hash for [lo, hi]: lo < split <= hi. */
bool split_hash_valid(uint64_t lo, uint64_t hi, uint64_t split);

/* One sampled operation: the key hash it touched and its weight (e.g. capacity units). */
typedef struct {
    uint64_t hash;
    int64_t weight;
} split_sample;

typedef enum {
    SPLIT_POINT_TOO_FEW = 0, /* fewer than min_samples inside the range (or one hash only) */
    SPLIT_POINT_FOUND,       /* *out: the split hash, lo < *out <= hi */
    SPLIT_POINT_HOT_KEY,     /* *out: the one key hash holding >= hot_percent of the weight */
} split_point;

/*
 * The split hash of [lo, hi] that divides the weight of the samples inside it most
 * evenly: the child [*out, hi] and the parent [lo, *out - 1] each get about half. A cut
 * falls between two sampled hashes (half-way), never on one: a partition key is never
 * cut (all its items share its hash). When a single hash holds at least hot_percent of
 * the weight, splitting cannot relieve it: SPLIT_POINT_HOT_KEY names it instead.
 * Samples outside [lo, hi] or without weight are ignored. Reorders `s` (sorts it in
 * place); weights must be small enough that their sum fits in int64_t.
 */
split_point split_weighted(split_sample *s, size_t n, uint64_t lo, uint64_t hi, size_t min_samples,
                           unsigned hot_percent, uint64_t *out);

#endif
