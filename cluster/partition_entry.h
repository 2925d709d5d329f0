#ifndef STRATA_CLUSTER_PARTITION_ENTRY_H
#define STRATA_CLUSTER_PARTITION_ENTRY_H
/*
 * The entries of a partition group's Raft log: how cluster/router_cluster.c frames them,
 * and how a replica tells which is which before it applies one. Pure, no I/O.
 *
 *   write        0xFE | u64be key hash | PartitionWrite (proto/partition.proto)
 *   bare write   a PartitionWrite alone (logs of the first versions). A PartitionWrite
 *                begins with the tag of a field below 16 (its kind, never 0), so with a
 *                byte below 0x80.
 *   split        0xFF 'S' | ... (cluster/split.h)
 *   child no-op  0xFF 'N', exactly two bytes: a split child's leader records an index
 *   flush hint   0xFF 'F', exactly two bytes: every replica flushes before a SPLIT
 *
 * Every other entry is of a newer binary (PENTRY_NEWER): bytes 0x80-0xFD, 0xFF followed
 * by another byte, an 'N' or 'F' entry of another length, a 0xFE entry too short for its
 * hash. They are kept for entries of later formats.
 *
 * Formats (cluster/meta.h, "Formats"): every replica must apply every entry alike, so a
 * replica that meets an entry it cannot read in full stops applying that partition rather
 * than skip the entry or answer it with an error a newer replica would not give. The
 * reading side is here (PENTRY_NEWER), in split_cmd_decode (a SPLIT of a newer version)
 * and in partition_apply (a PartitionWrite with a kind or a field this binary does not
 * know). The writing side: a new entry, SPLIT version, write kind or PartitionWrite field
 * is proposed only once the cluster's meta format (meta_format) is one whose readers all
 * know it. In between, a partition leader refuses a forwarded entry that it classifies
 * PENTRY_NEWER (ERR_NEWER) rather than append what it could not apply.
 */
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PENTRY_WRITE,
    PENTRY_BARE_WRITE,
    PENTRY_SPLIT,
    PENTRY_CHILD_NOOP,
    PENTRY_FLUSH_HINT,
    PENTRY_NEWER,
} pentry_kind;

#define PENTRY_WRITE_HEADER 9 /* 0xFE and the key's hash, before the PartitionWrite */
#define PENTRY_MARKER_LEN   2 /* a child no-op or a flush hint */

extern const uint8_t pentry_child_noop[PENTRY_MARKER_LEN];
extern const uint8_t pentry_flush_hint[PENTRY_MARKER_LEN];

/* What the entry `e` of `len` bytes is. Any bytes are accepted. */
pentry_kind pentry_kind_of(const uint8_t *e, size_t len);

/* Writes the header of a write entry for a key of hash `hash`. */
void pentry_write_header(uint8_t out[PENTRY_WRITE_HEADER], uint64_t hash);

/* The key hash of a PENTRY_WRITE entry (its PartitionWrite starts PENTRY_WRITE_HEADER
 * bytes in). */
uint64_t pentry_write_hash(const uint8_t *e);

#endif
