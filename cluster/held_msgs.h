/* held_msgs: messages kept for a Raft group this node is about to start, handed over once
 * it starts. The router keeps here what arrives for a split's child before the child's
 * replica exists (the other replicas may elect its leader first), so that the leader's
 * first AppendEntries is not lost and resent only a heartbeat later.
 *
 * Pure: no I/O, the caller passes the time. Bounded: at most lim.max_msgs messages and
 * lim.max_bytes payload bytes, each kept at most lim.keep_ms; making room drops the oldest
 * first, and a message larger than max_bytes is never kept. Not thread-safe. */
#ifndef STRATA_CLUSTER_HELD_MSGS_H
#define STRATA_CLUSTER_HELD_MSGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t max_msgs, max_bytes;
    uint64_t keep_ms;
} held_limits;

typedef struct held_msg held_msg;

typedef struct {
    held_limits lim;
    held_msg *first, *last; /* arrival order */
    size_t n, bytes;
} held_msgs;

/* Receives one delivered message; data lives until fn returns. */
typedef void (*held_fn)(void *arg, uint64_t from, const uint8_t *data, size_t len);

void held_init(held_msgs *h, held_limits lim);
/* Forgets every message. */
void held_clear(held_msgs *h);
/* Keeps a copy of a message of `group` from node `from`, after dropping the expired ones
 * and as many of the oldest as it needs room; false if it is not kept (larger than
 * max_bytes, or out of memory). */
bool held_keep(held_msgs *h, uint64_t group, uint64_t from, const uint8_t *data, size_t len,
               uint64_t now_ms);
/* Takes every unexpired message of `group` out and calls fn for each, oldest first; returns
 * how many. Messages kept while fn runs (for any group) stay for a later call. */
size_t held_deliver(held_msgs *h, uint64_t group, uint64_t now_ms, held_fn fn, void *arg);

#endif
