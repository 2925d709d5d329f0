#ifndef STRATA_CLUSTER_SNAP_CHUNK_H
#define STRATA_CLUSTER_SNAP_CHUNK_H
/*
 * One chunk of a partition replica's copy (cluster/router_cluster.c: the answer to
 * MSG_SNAP_CHUNK, read by a replica behind a compacted log and by a node copying a
 * child's first state). A copy session at the source holds an engine snapshot taken
 * together with the applied index it reflects; each chunk carries that index, the
 * source's range as of it, and up to about SNAP_CHUNK_BYTES of items in key order:
 *
 *   varint applied | u64be hash_lo | u64be hash_hi | u8 done | varint next-key length |
 *   next key | (varint key length | key | varint value length | value)*
 *
 * `next` is where the following chunk starts (the last key sent and a 0 byte), empty in
 * the last chunk (done = 1). The rpc frame around it carries the checksum.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/buf.h"
#include "storage/base/err.h"

typedef struct {
    uint64_t applied;          /* the source's applied index, as of its copy session */
    uint64_t hash_lo, hash_hi; /* the source's range as of that index; lo <= hi */
    bool done;                 /* the last chunk */
    const uint8_t *next;       /* where the next chunk starts: next_len bytes */
    size_t next_len;
    const uint8_t *items; /* the items (snap_chunk_item_next): items_len bytes */
    size_t items_len;
} snap_chunk;

/* Appends one item to `items` (the body of a chunk being built). */
void snap_chunk_item_put(buf *items, const void *key, size_t klen, const void *val, size_t vlen);
/* Appends the chunk `c` (its header, then c->items) to `out`. */
void snap_chunk_encode(const snap_chunk *c, buf *out);

/* Decodes a chunk; every item is checked, so that snap_chunk_item_next cannot fail after.
 * The pointers in `out` point into `b`. ERR_CORRUPT on anything malformed (truncated,
 * hash_lo > hash_hi, a bad varint, a next key in the last chunk or none in another). */
int snap_chunk_decode(const uint8_t *b, size_t len, snap_chunk *out, strata_err *err);
/* The item at *pos (start at 0) of a decoded chunk: true with key and value, advancing
 * *pos; false after the last. */
bool snap_chunk_item_next(const snap_chunk *c, size_t *pos, const uint8_t **key, size_t *klen,
                          const uint8_t **val, size_t *vlen);

#endif
