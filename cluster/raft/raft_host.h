#ifndef STRATA_CLUSTER_RAFT_RAFT_HOST_H
#define STRATA_CLUSTER_RAFT_RAFT_HOST_H
/*
 * The multi-Raft host: drives every Raft group of one node (one group per partition
 * replica, plus the meta group 0) with C-Raft's pure core, raft_step().
 *
 * The host does no I/O and reads no clock of its own: everything outside is injected.
 *   - clock:     now() in milliseconds and arm(deadline): the host asks to be woken with
 *                raft_host_tick() at the earliest deadline of all its groups (ONE timer
 *                for the whole node). raft_host_uv.h binds it to a libuv timer; the
 *                simulation (tests/sim) binds it to simulated time.
 *   - storage:   persists term/vote and log entries; completions are callbacks.
 *   - transport: sends one encoded message (proto/raft.proto) to a peer node.
 *   - fsm:       applies committed commands and returns their result bytes.
 * So one process can run many hosts deterministically (tests/sim), and production uses
 * the same code on one libuv loop.
 *
 * Threading: none. Every function and every callback runs on the caller's thread (the
 * node's loop thread). Callbacks into user code (submit/read completions, fsm apply) may
 * call raft_host_submit / raft_host_read_barrier again, but never raft_host_destroy.
 *
 * Raft rules the host enforces for C-Raft:
 *   - A new term or vote is handed to storage first, and no message of that group is sent
 *     until storage reports it durable (messages wait in a per-group queue).
 *   - Entries are persisted with storage->append (a conflicting suffix is replaced); the
 *     completion becomes RAFT_PERSISTED_ENTRIES, clipped to what a later conflicting
 *     append has not replaced.
 *   - Commands are applied in log order, once committed AND durable locally.
 *
 * Limits of this version (stated plainly): no snapshots and no log compaction (every
 * group's log stays in memory and in storage; InstallSnapshot messages are dropped and
 * the fsm snapshot/restore hooks are never called); no membership changes after
 * creation (RAFT_CHANGE entries other than the bootstrap one are applied to the core
 * but cannot be submitted); timers are scanned linearly over groups on each tick.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/err.h"

typedef struct raft_host raft_host;

/* One log entry as the storage sees it. `type` is enum raft_entry_type (1 command,
 * 2 barrier, 3 configuration change); the layout matches wal_entry (storage/wal/wal.h). */
typedef struct {
    uint64_t term;
    uint8_t type;
    const void *data;
    size_t len;
} raft_host_entry;

/* Completion of a storage operation: status 0 durable, -1 failed (the group then stops:
 * its pending submits and reads fail with ERR_IO and it ignores later events). */
typedef void (*raft_storage_cb)(void *cb_data, int status);

/* What storage holds for a group at start. entries is one malloc'd block owned by the
 * host after a successful load (freed with free()); entries[i].data point inside it or
 * into other memory kept until the load is released with release(). */
typedef struct {
    uint64_t term;
    uint64_t vote;
    uint64_t start_index; /* index of entries[0]; 1 when there is no snapshot */
    raft_host_entry *entries;
    size_t n;
} raft_host_loaded;

/*
 * Durable per-group state. Every operation's callback must fire exactly once, in request
 * order across all groups of the host, unless the host is destroyed first (then
 * never). Callbacks must not fire from inside the call that requested them.
 * There is no separate truncate: C-Raft's core only ever truncates by appending over a
 * conflicting suffix, which append() does. There is no snapshot call yet (no snapshots).
 */
typedef struct {
    void *ctx;
    /* Fills *out; returns 0, or -1 with ERR_NOT_FOUND when nothing is stored for the group
     * (a new replica), or another error. */
    int (*load)(void *ctx, uint64_t group, raft_host_loaded *out, strata_err *err);
    /* Frees what load returned (may be NULL: the host then free()s out->entries). */
    void (*release)(void *ctx, raft_host_loaded *loaded);
    int (*set_term_vote)(void *ctx, uint64_t group, uint64_t term, uint64_t vote,
                         raft_storage_cb cb, void *cb_data, strata_err *err);
    /* Appends entries first_index..first_index+n-1, replacing any stored entries from
     * first_index on. The entries are copied before return. */
    int (*append)(void *ctx, uint64_t group, uint64_t first_index, const raft_host_entry *e,
                  size_t n, raft_storage_cb cb, void *cb_data, strata_err *err);
} raft_host_storage;

/* Sends `len` bytes (an encoded strata.raft.RaftMessage) to node `to`. The transport
 * copies the bytes before returning. Delivery is best effort: Raft retries. */
typedef struct {
    void *ctx;
    int (*send)(void *ctx, uint64_t to, uint64_t group, const void *msg, size_t len);
} raft_host_transport;

typedef struct {
    void *ctx;
    uint64_t (*now)(void *ctx);                /* milliseconds, monotonic */
    void (*arm)(void *ctx, uint64_t deadline); /* call raft_host_tick at deadline (ms);
                                                  replaces any earlier deadline */
} raft_host_clock;

/*
 * The state machine. apply() is called once per committed RAFT_COMMAND entry, in index
 * order, with index > the group's `applied_index` at start. It must be deterministic.
 * It may return result bytes (malloc'd, *result freed by the host with free()); a
 * non-zero return stops the group (treated like a storage failure).
 * snapshot/restore are STUBS for now: never called (no snapshots yet); may be NULL.
 */
typedef struct {
    void *ctx;
    int (*apply)(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                 void **result, size_t *result_len);
    int (*snapshot)(void *ctx, uint64_t group, void **data, size_t *len);
    int (*restore)(void *ctx, uint64_t group, const void *data, size_t len);
} raft_host_fsm;

typedef struct {
    uint64_t node_id; /* this node's id (= C-Raft server id), > 0 */
    raft_host_storage storage;
    raft_host_transport transport;
    raft_host_clock clock;
    raft_host_fsm fsm;
    unsigned election_timeout_ms;  /* 0 = 1000 */
    unsigned heartbeat_timeout_ms; /* 0 = 100; must be < election timeout */
    uint64_t seed;                 /* seeds each group's election-timer randomness */
} raft_host_config;

/* Outcome of a submit or a read barrier, passed to its callback. */
typedef struct {
    strata_code code;     /* ERR_NONE; ERR_UNAVAILABLE (retryable: not leader, leadership
                             lost, group stopped or host closing: a submitted command may
                             or may not have been committed); ERR_IO (storage failed) */
    uint64_t leader_hint; /* node id of the leader as known here, 0 if unknown */
    uint64_t index;       /* log index of the command / barrier (0 if none) */
    const void *result;   /* apply result (submit only); valid during the callback */
    size_t result_len;
} raft_host_outcome;

typedef void (*raft_host_done_cb)(void *data, const raft_host_outcome *out);

typedef struct {
    int state; /* enum raft_state: 0 unavailable, 1 follower, 2 candidate, 3 leader */
    uint64_t term;
    uint64_t vote;
    uint64_t leader; /* 0 if unknown */
    uint64_t commit_index;
    uint64_t applied_index;
    uint64_t last_index;        /* last entry in the log */
    uint64_t last_stored;       /* last entry known durable */
    bool failed;                /* stopped after a storage/fsm/core error */
    unsigned term_vote_writes;  /* term/vote writes in flight (messages wait for them) */
    unsigned queued_messages;   /* messages held until those writes are durable */
    unsigned appends_in_flight; /* entry writes in flight */
} raft_host_group_stats;

/* Creates a host. The config's interfaces must outlive it. ERR_VALIDATION, ERR_NOMEM. */
raft_host *raft_host_create(const raft_host_config *cfg, strata_err *err);

/* Frees every group. Pending submit and read callbacks fire with ERR_UNAVAILABLE
 * ("host closing"); no storage or transport call is made; storage callbacks that have
 * not fired yet must never fire afterwards (the caller drops them). */
void raft_host_destroy(raft_host *h);

/*
 * Starts group `group` with voters `members` (node ids, this node among them).
 * Loads the group's state from storage; a group storage has never seen is bootstrapped
 * with the configuration entry at index 1 (identical on every member, so members
 * bootstrap independently). `applied_index`: commands up to it are already reflected in
 * the state machine and are not applied again (0 for an in-memory state machine).
 * ERR_VALIDATION (bad members, group exists), ERR_NOMEM, or the storage's error.
 */
int raft_host_start_group(raft_host *h, uint64_t group, const uint64_t *members, size_t n,
                          uint64_t applied_index, strata_err *err);

/* Feeds a message received from node `from` for `group`. Unknown groups, malformed or
 * inconsistent messages are dropped with -1 (ERR_NOT_FOUND / ERR_CORRUPT). */
int raft_host_receive(raft_host *h, uint64_t from, uint64_t group, const void *msg, size_t len,
                      strata_err *err);

/* The clock's deadline has passed: fires every due group timer and re-arms. */
void raft_host_tick(raft_host *h);

/*
 * Proposes `cmd` (copied) in `group`. On -1 the callback never fires: ERR_UNAVAILABLE
 * when this node is not the leader (raft_host_leader gives the hint), ERR_NOT_FOUND for
 * an unknown group, ERR_NOMEM. On 0, cb fires exactly once: ERR_NONE once the command is
 * committed and applied on this node (with its result), or a failure as described in
 * raft_host_outcome.
 */
int raft_host_submit(raft_host *h, uint64_t group, const void *cmd, size_t len,
                     raft_host_done_cb cb, void *data, strata_err *err);

/*
 * Linearizable read barrier. On 0, cb fires once: with ERR_NONE when this node, as leader
 * of the current term, has applied every command committed before the call (a barrier
 * entry of this term is committed and applied) - read the local state in the callback;
 * or with ERR_UNAVAILABLE if leadership was lost meanwhile (a deposed leader never
 * succeeds). Concurrent calls share one barrier entry. Errors as raft_host_submit.
 */
int raft_host_read_barrier(raft_host *h, uint64_t group, raft_host_done_cb cb, void *data,
                           strata_err *err);

bool raft_host_is_leader(const raft_host *h, uint64_t group);
/* The leader's node id as known here (this node if leader), 0 if unknown/no group. */
uint64_t raft_host_leader(const raft_host *h, uint64_t group);
/* ERR_NOT_FOUND for an unknown group. */
int raft_host_group_info(const raft_host *h, uint64_t group, raft_host_group_stats *out,
                         strata_err *err);

/* Encoding of C-Raft messages (proto/raft.proto), exposed for the transport and tests.
 * raft_msg_encode: *out malloc'd (free()). `entries` fills an AppendEntries body (its
 * n_entries entries, since the pure core does not carry payloads), may be NULL otherwise.
 * raft_msg_decode validates what C-Raft asserts on; *out must be freed with
 * raft_msg_free. ERR_CORRUPT for malformed bytes, ERR_NOMEM. */
struct raft_message;
int raft_msg_encode(uint64_t group, uint64_t from, const struct raft_message *m,
                    const raft_host_entry *entries, uint8_t **out, size_t *out_len,
                    strata_err *err);
typedef struct raft_msg_decoded raft_msg_decoded;
int raft_msg_decode(const void *bytes, size_t len, uint64_t *group, uint64_t *from,
                    struct raft_message *out, raft_msg_decoded **owner, strata_err *err);
void raft_msg_free(raft_msg_decoded *owner);
/* The decoded AppendEntries entries share one raft_malloc'd `batch` token that C-Raft
 * frees itself when it does not keep the entries for persistence: tell the decoder so
 * (after raft_step) and raft_msg_free will not free it again. */
void raft_msg_batch_consumed(raft_msg_decoded *owner);

#endif
