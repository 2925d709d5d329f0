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
 *   - storage:   persists term/vote, log entries and snapshot points; completions are
 *                callbacks.
 *   - transport: sends one encoded message (proto/raft.proto) to a peer node.
 *   - fsm:       applies committed commands and returns their result bytes (or asks to
 *                wait: RAFT_HOST_APPLY_BUSY); copies a snapshot's state out of band.
 * So one process can run many hosts deterministically (tests/sim), and production uses
 * the same code on one libuv loop.
 *
 * Threading: none. Every function and every callback runs on the caller's thread (the
 * node's loop thread). Callbacks into user code (submit/read completions, fsm apply and
 * install) may call raft_host_submit / raft_host_read_barrier again, but never
 * raft_host_destroy or raft_host_stop_group (refused), nor complete an install.
 *
 * Raft rules the host enforces for C-Raft:
 *   - A new term or vote is handed to storage first, and no message of that group is sent
 *     until storage reports it durable (messages wait in a per-group queue).
 *   - Entries are persisted with storage->append (a conflicting suffix is replaced); the
 *     completion becomes RAFT_PERSISTED_ENTRIES, clipped to what a later conflicting
 *     append has not replaced.
 *   - Commands are applied in log order, once committed AND durable locally.
 *   - A new leader whose log ends in an older term appends a barrier at once (C-Raft 0.22
 *     does only when it holds uncommitted entries), so that writes the old leader was
 *     waiting on are settled (committed, or known not applied) without a new write.
 *
 * Snapshots are points, not data: raft_host_compact() records a compaction point (index,
 * term, configuration) that the state machine says is durable in its engine, and the
 * log below it (minus `snapshot_trailing` entries) is dropped in memory and, once the
 * point is durable, in storage. A follower that needs dropped entries receives an
 * InstallSnapshot carrying only that metadata; the state moves out of band (fsm.install,
 * e.g. a chunked copy of the partition from the leader's engine snapshot) and the host
 * completes the install with the core once raft_host_snapshot_installed() reports it.
 *
 * Limits of this version (stated plainly): compaction happens only when the caller asks
 * (no policy inside); an install copies the whole state again after any failure of the
 * copy (no resume of a partial copy; that is the state machine's business); the
 * configuration used for a compaction point is found by scanning the log backwards;
 * membership changes are one at a time and change at most one voter each (no joint
 * consensus; raft_host_change); the fsm snapshot/restore hooks are never called (kept for
 * compatibility; the data path is fsm.install); timers are scanned linearly over groups
 * on each tick, and install tokens over groups.
 *
 * Membership (moving a replica: join_group on the target, change to add it as a learner,
 * wait until member_match shows it caught up, change to promote it, change to remove the
 * old voter, stop_group on the old node): a configuration takes effect on each replica as
 * soon as its entry is in that replica's log (Raft's single-server changes). A replica
 * whose latest configuration does not contain it (joined and not yet told), or makes it a
 * learner, never campaigns; a leader that removes itself (or makes itself a learner) leads
 * until the change is committed, then steps down and never campaigns. A removed follower,
 * though, usually never learns of its removal (the leader stops replicating to it as soon
 * as the change is in the leader's log): it keeps asking for pre-votes, which are refused
 * (its log lacks the change) and disturb nobody, until raft_host_stop_group - so stop it
 * once the removal is committed.
 *
 * Rejoining (issue #6/#8): a node removed from a group and whose replica was dropped may
 * later get it back (join_group on an empty replica, then a move). It remembers nothing
 * of what it acknowledged before, and the first configuration it is sent (the leader's
 * snapshot point, or old log entries) may predate its removal and name it a voter of the
 * old group: with a lagging member of that group it could win an election next to the
 * real majority and overwrite committed entries. So a replica that starts empty through
 * join_group is "unconfirmed": it never campaigns (nor takes over on a transfer) and
 * ignores vote requests, until an AppendEntries of its leader's current term leaves its
 * log ending at the message's last entry (matching it), at or beyond the leader's commit
 * index, under a configuration that names it. The leader holds the change that re-added
 * the node, so its commit index is at least the index of the change that removed it
 * (changes are one at a time), and the replica's configuration is then newer. The state
 * survives restarts: the replica's stored vote carries a mark from the moment it starts
 * empty (written before any entry, and storage keeps operations in order), and a snapshot
 * point installed while unconfirmed carries one too; both are written again without it
 * once confirmed.
 * Not covered: a leader just restarted knows its commit index only from its snapshot
 * point until it commits an entry of its term, so a lower bound it sends then may be
 * older than the removal.
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
    uint64_t start_index; /* index of entries[0]; 1 when there is no snapshot, else at most
                             snapshot_index + 1 (entries below may be kept: "trailing") */
    raft_host_entry *entries;
    size_t n;
    /* The last snapshot point recorded with set_snapshot (all 0/NULL if none); meta is
     * the host's opaque bytes, valid until release(). */
    uint64_t snapshot_index;
    uint64_t snapshot_term;
    const void *snapshot_meta;
    size_t snapshot_meta_len;
} raft_host_loaded;

/* A snapshot point for storage->set_snapshot. */
typedef struct {
    uint64_t index;     /* last index the snapshot covers; never decreases */
    uint64_t term;      /* term of that entry */
    uint64_t keep_from; /* first log index still needed (<= index + 1): entries below it may
                           be forgotten */
    bool replace_log;   /* installed from the leader: drop EVERY stored entry (also those
                           above index); the log continues at index + 1 */
    const void *meta;   /* opaque host bytes (configuration); copied before return */
    size_t meta_len;
} raft_host_snapshot;

/*
 * Durable per-group state. Every operation's callback must fire exactly once, in request
 * order across all groups of the host, unless the host is destroyed first (then
 * never). Callbacks must not fire from inside the call that requested them. What a crash
 * keeps is a prefix of the operations in request order (the node's WAL is one ordered
 * log): an operation that survived implies every one requested before it did, also
 * those whose callbacks had not fired. Term, vote and snapshot metadata are opaque
 * values to storage, kept as given (the host marks some with top bits).
 * There is no separate truncate: C-Raft's core only ever truncates by appending over a
 * conflicting suffix, which append() does, or replaces the log with an installed
 * snapshot point (set_snapshot with replace_log).
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
    /* Records a snapshot point (log compaction, or a snapshot installed from the leader);
     * load() returns the last one. May be NULL: then the host neither compacts nor
     * installs snapshots (raft_host_compact fails, InstallSnapshot messages are dropped). */
    int (*set_snapshot)(void *ctx, uint64_t group, const raft_host_snapshot *snap,
                        raft_storage_cb cb, void *cb_data, strata_err *err);
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

/* apply() may answer this (back-pressure, e.g. the engine's memtables are full): the
 * command was NOT applied; the host keeps it and applies nothing more of that group
 * (applied_index unchanged, submits and reads wait) until raft_host_apply_resume(). */
#define RAFT_HOST_APPLY_BUSY 1

/*
 * The state machine. apply() is called once per committed RAFT_COMMAND entry, in index
 * order, with index > the group's `applied_index` at start. It must be deterministic.
 * It may return result bytes (malloc'd, *result freed by the host with free()); it
 * returns 0, RAFT_HOST_APPLY_BUSY (see above; *result is ignored), or another non-zero
 * value, which stops the group (treated like a storage failure).
 * After an install, apply() continues above the installed state's applied_index.
 * At start (raft_host_start_group's applied_index), the state machine must hold at
 * least every command below the first entry storage kept (it said so by compacting).
 * snapshot/restore are never called (compatibility stubs); may be NULL.
 */
typedef struct {
    void *ctx;
    int (*apply)(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                 void **result, size_t *result_len);
    int (*snapshot)(void *ctx, uint64_t group, void **data, size_t *len);
    int (*restore)(void *ctx, uint64_t group, const void *data, size_t len);
    /*
     * This follower lacks entries the leader has compacted away: the leader `from_node`
     * sent its snapshot point (index, term) and the state must come OUT OF BAND (the
     * Raft message carries no data). install() starts an asynchronous copy (in stratad:
     * pull the partition's key range from an engine snapshot on from_node, in bounded
     * chunks) and returns 0, or non-zero if it cannot start (retried later). Later, from
     * a loop callback and never from inside install() or another host callback, it calls
     * raft_host_snapshot_installed(h, token, status, applied_index) exactly once:
     *   status 0: the state machine now holds a state reflecting every command up to
     *   applied_index (>= index: a live source may be ahead, which is fine as those
     *   entries are committed) AND that state is durable in the engine;
     *   status != 0: the copy failed (source gone...): the host calls install() again
     *   (new token, from the leader it then knows) after an election timeout.
     * Until then the group applies nothing (its log restarts after index). A copy that
     * is abandoned (raft_host_stop_group, raft_host_destroy) is never completed: its
     * token is then unknown to the host (raft_host_snapshot_installed returns -1).
     * May be NULL only if storage.set_snapshot is NULL.
     */
    int (*install)(void *ctx, uint64_t group, uint64_t index, uint64_t term, uint64_t from_node,
                   uint64_t token);
} raft_host_fsm;

/* Optional notifications (a NULL function is not called). leader(): the leader this node
 * knows for `group` changed to `leader` (0: none known any more); called from inside the
 * host's processing, so it must not call back into the host, only note or schedule. It
 * lets a caller waiting for a leader go on at once rather than poll. */
typedef struct {
    void *ctx;
    void (*leader)(void *ctx, uint64_t group, uint64_t leader);
} raft_host_events;

typedef struct {
    uint64_t node_id; /* this node's id (= C-Raft server id), > 0 */
    raft_host_storage storage;
    raft_host_transport transport;
    raft_host_clock clock;
    raft_host_fsm fsm;
    raft_host_events events;
    unsigned election_timeout_ms;         /* 0 = 1000 */
    unsigned heartbeat_timeout_ms;        /* 0 = 100; must be < election timeout */
    uint64_t seed;                        /* seeds each group's election-timer randomness */
    unsigned snapshot_trailing;           /* entries kept below a compaction point, so a follower
                                             slightly behind gets entries, not a snapshot; 0 = 128 */
    unsigned install_snapshot_timeout_ms; /* a leader re-sends InstallSnapshot to a follower
                                             silent this long; 0 = 30000 */
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
    bool not_applied; /* ERR_UNAVAILABLE of a submit only: another command took its
                         index, so it certainly was not (and never will be) committed;
                         submitting it again is safe */
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
    bool apply_blocked;         /* the fsm answered RAFT_HOST_APPLY_BUSY; awaiting resume */
    unsigned term_vote_writes;  /* term/vote writes in flight (messages wait for them) */
    unsigned queued_messages;   /* messages held until those writes are durable */
    unsigned appends_in_flight; /* entry writes in flight */
    uint64_t snapshot_index;    /* last snapshot point (compaction or install), 0 if none */
    uint64_t snapshot_term;
    uint64_t first_index; /* first entry still held in the log */
    bool installing;      /* an out-of-band snapshot copy is in progress */
    uint64_t installs;    /* snapshots installed since start */
    uint64_t stale_answers; /* AppendEntries results corrected before they left: answers
                               to a stale AppendEntries, or a last index past what is
                               stored (sanitize_result in raft_host.c says why) */
    bool unconfirmed;     /* joined empty and not yet confirmed by a leader's log: it neither
                             votes nor campaigns (raft_host.c, group.unconfirmed) */
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
 * the state machine and are not applied again (0 for an in-memory state machine). If
 * storage holds a snapshot point, the log may start after index 1: applied_index must
 * then be at least the first stored entry - 1 (else ERR_VALIDATION: the engine lost what
 * it said was durable), and may be beyond the log's end (an installed state ahead of it).
 * ERR_VALIDATION (bad members, group exists), ERR_CORRUPT (bad snapshot metadata),
 * ERR_NOMEM, or the storage's error.
 */
int raft_host_start_group(raft_host *h, uint64_t group, const uint64_t *members, size_t n,
                          uint64_t applied_index, strata_err *err);

/*
 * Removes `group` from the host (its table was dropped or the replica moved away).
 * Pending submit and read callbacks fire with ERR_UNAVAILABLE INSIDE this call (the host
 * has no loop to defer them to), after the group has left the table: a callback that
 * submits to it again gets ERR_NOT_FOUND, and raft_host_start_group may start the id
 * afresh. Storage completions already in flight for it are ignored when they arrive
 * (they must still arrive or be dropped by the storage as usual); later messages for it
 * are dropped as an unknown group. Storage is not touched: to forget the replica's log
 * for good, drop it there too (wal_drop_group).
 * Call it from a loop callback, never from inside one of the host's own callbacks
 * (fsm, submit/read completion, transport, clock): that is refused with ERR_VALIDATION.
 * ERR_NOT_FOUND for an unknown group.
 */
int raft_host_stop_group(raft_host *h, uint64_t group, strata_err *err);

/* The state machine can take commands again after answering RAFT_HOST_APPLY_BUSY for
 * `group`: applies again from the entry it refused, on (inside this call: submit and
 * read callbacks may fire). A no-op when the group is unknown or not blocked. Call it
 * from any loop callback, including a host callback of ANOTHER group, but not from
 * inside apply() itself (ignored there: the group would stay blocked). */
void raft_host_apply_resume(raft_host *h, uint64_t group);

/*
 * Log compaction: the state machine says every command up to `index` is durable in the
 * engine (index <= the group's applied index), so the log below it is no longer needed
 * for recovery. The host records a snapshot point (index, its term, the configuration
 * then) with storage->set_snapshot, keeps `snapshot_trailing` entries below it, and
 * forgets the rest (in memory now; storage drops it once the point is durable). A
 * follower that later needs a forgotten entry gets the snapshot point and copies the
 * state out of band (fsm.install). An index at or below the current snapshot point is a
 * no-op (returns 0). ERR_NOT_FOUND unknown group; ERR_UNAVAILABLE group stopped, or
 * installing a snapshot (retry later); ERR_VALIDATION index above applied, or no
 * storage->set_snapshot; or the storage's error. Call from a loop callback or a host
 * callback of another group; from inside the group's own apply() or completion callbacks
 * it is refused (ERR_VALIDATION).
 */
int raft_host_compact(raft_host *h, uint64_t group, uint64_t index, strata_err *err);
/* The same, keeping no entry below the point: every follower that lacks an entry up to
 * `index` gets the snapshot point (a copy). A partition created by a split uses it early
 * (above index 1: a follower lacking entry 1 is sent entries from 1, not the snapshot),
 * because its log alone does not rebuild its state (the parent's log did). */
int raft_host_compact_all(raft_host *h, uint64_t group, uint64_t index, strata_err *err);

/* Completes an fsm.install() copy (see raft_host_fsm). Returns -1 with ERR_NOT_FOUND for a
 * token the host does not wait for (stale, group stopped). Storage and the core are
 * updated asynchronously: the group applies again once the snapshot point is durable. */
int raft_host_snapshot_installed(raft_host *h, uint64_t token, int status, uint64_t applied_index,
                                 strata_err *err);

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
 * raft_host_outcome. If this node stops leading before the command is applied, the
 * submit still waits, for two election timeouts at most, for this replica to apply the
 * command's index (as a follower): a leadership transfer or a step-down with the entry
 * already on a majority then ends in ERR_NONE with the result computed here, and an
 * entry the next leader replaced ends in ERR_UNAVAILABLE with not_applied. Only a wait
 * that runs out ends in ERR_UNAVAILABLE with the outcome unknown.
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

/*
 * Linearizable read without a log entry (Raft's read index), same contract as
 * raft_host_read_barrier: cb fires once, with ERR_NONE when this node has applied every
 * command committed before the call and a majority of voters answered a leadership check
 * sent after it with this node's term (so no newer leader had been elected then); with
 * ERR_UNAVAILABLE if leadership was lost first. Reads that arrive while a check is out
 * share the next one: a message to and from each follower per round, no disk write.
 * A leader that has not yet committed an entry of its term, a pending configuration
 * change or more than 7 voters take the barrier entry instead. Errors as
 * raft_host_submit.
 */
int raft_host_read_index(raft_host *h, uint64_t group, raft_host_done_cb cb, void *data,
                         strata_err *err);

bool raft_host_is_leader(const raft_host *h, uint64_t group);
/*
 * Makes this replica stand for election after a hundredth of a heartbeat timeout (C-Raft
 * draws it from [t, 2t); doubling at each new term while no leader is known, up to a
 * heartbeat timeout) rather than a whole election timeout: for a group just created by a
 * split, on the node that led the parent, so that the new range has a leader in
 * milliseconds instead of a second or two of refused writes. The usual timeout returns
 * once the group has a leader, or after one election timeout. Nothing changes for a group
 * that has a leader, is not a follower, or is an unconfirmed replica. ERR_NOT_FOUND for a
 * group not started here.
 */
int raft_host_campaign_soon(raft_host *h, uint64_t group, strata_err *err);

/*
 * Sets one group's heartbeat timeout (1 ms up to below the election timeout). A follower
 * learns that an entry committed only from the leader's next message, a heartbeat when
 * the group is otherwise idle: a group whose commits other work waits to see (stratad's
 * meta group: the cluster map) tells its followers sooner. ERR_NOT_FOUND for a group not
 * started here, ERR_VALIDATION for a value out of range.
 */
int raft_host_set_heartbeat(raft_host *h, uint64_t group, unsigned heartbeat_ms,
                            strata_err *err);
/* The leader's node id as known here (this node if leader), 0 if unknown/no group. */
uint64_t raft_host_leader(const raft_host *h, uint64_t group);
/* ERR_NOT_FOUND for an unknown group. */
int raft_host_group_info(const raft_host *h, uint64_t group, raft_host_group_stats *out,
                         strata_err *err);

/* ---- membership ---- */

/* One server of a configuration. voter false = learner: it receives the log (entries or
 * a snapshot install) but neither votes nor counts for commitment (C-Raft RAFT_STANDBY). */
typedef struct {
    uint64_t id;
    bool voter;
} raft_host_member;

/*
 * Proposes `m` (n servers, ids > 0 and distinct, at least one voter) as the group's new
 * configuration, as a RAFT_CHANGE entry. Leader only. Safety rules enforced (-1 with
 * ERR_VALIDATION otherwise): the voter sets of the current and the new configuration
 * differ by at most one server (add a learner, promote one, remove one, demote one...).
 * One change at a time: -1 with ERR_BUSY while an earlier change (from this call or a
 * previous leader) is not yet committed and applied here, and while the voter that the
 * configuration in force promoted has not yet received it (C-Raft's servers vote only
 * as voters of their own configuration; see unaware_promotee), unless the new
 * configuration takes that voter's vote away again: retry later. A leader that has not yet
 * committed an entry of its own term first commits a barrier (Raft's rule for
 * single-server changes), so the entry may be appended a round trip later.
 * On 0, cb fires exactly once: ERR_NONE with the entry's index once the change is
 * committed and applied on this node (the configuration is then committed), or
 * ERR_UNAVAILABLE (leadership lost: the change may or may not have been committed; read
 * raft_host_configuration on the new leader), ERR_BUSY (another change got in first) or
 * ERR_IO, as for a submit; a failure may be reported inside this call (the barrier could
 * not be appended). Errors on -1: ERR_UNAVAILABLE (not leader), ERR_NOT_FOUND,
 * ERR_VALIDATION, ERR_BUSY, ERR_NOMEM. Same calling rules as raft_host_submit.
 * The change is Raft's: it takes effect on each replica when its entry reaches that
 * replica's log, committed or not. A learner should be promoted only once it has caught up
 * (raft_host_member_match): a lagging voter leaves one failure less to tolerate.
 */
int raft_host_change(raft_host *h, uint64_t group, const raft_host_member *m, size_t n,
                     raft_host_done_cb cb, void *data, strata_err *err);

/*
 * The group's latest configuration as this replica knows it (the last RAFT_CHANGE entry in
 * its log, committed or not, else the snapshot's): up to `cap` servers are written to
 * `out`, and *n is set to the total (so cap 0 asks for the size). *uncommitted: a change
 * is pending (its entry is not yet committed and applied here). A replica that joined
 * and has not heard from the leader yet has an empty configuration (*n = 0).
 * ERR_NOT_FOUND for an unknown group.
 */
int raft_host_configuration(const raft_host *h, uint64_t group, raft_host_member *out, size_t cap,
                            size_t *n, bool *uncommitted, strata_err *err);

/*
 * Starts a replica of `group` that is NOT in the group's initial configuration (a learner
 * being added): if storage has nothing for the group, no bootstrap entry is written and
 * the replica starts empty, as a follower that never campaigns, and waits for the
 * leader's entries or snapshot (fsm.install) once a change adds it. It stays unconfirmed
 * (no campaign, no vote: see "Rejoining" above) until it has caught up with a leader's
 * commit index. If storage holds the
 * group (a joined replica restarting), it starts from that, as start_group does.
 * applied_index as for raft_host_start_group. Errors as raft_host_start_group.
 * Use it, not start_group, to restart a replica that joined: start_group would bootstrap
 * a fresh replica with the initial configuration if nothing had been made durable yet.
 */
int raft_host_join_group(raft_host *h, uint64_t group, uint64_t applied_index, strata_err *err);

/*
 * On the leader: the highest log index known to be replicated on `member` (C-Raft's
 * progress match index; 0 until it answered). A learner has caught up when it reaches the
 * leader's commit index (raft_host_group_info). ERR_UNAVAILABLE not leader, ERR_NOT_FOUND
 * unknown group or member not in the configuration.
 */
int raft_host_member_match(const raft_host *h, uint64_t group, uint64_t member, uint64_t *match,
                           strata_err *err);

/* ---- leadership transfer ---- */

/*
 * Whether `target` is a fit leadership-transfer target for `group` now: this node leads,
 * no transfer and no configuration change (raft_host_change, or an uncommitted one of an
 * earlier leader) is in progress, `target` is another VOTER of the current configuration,
 * and its match index (raft_host_member_match) is within `max_lag` entries of this
 * leader's last index. false with the reason in `err` otherwise: ERR_UNAVAILABLE (not
 * leader, or leadership already moving), ERR_BUSY (a transfer or change in progress, or
 * the target is behind), ERR_VALIDATION (not another voter), ERR_NOT_FOUND.
 * Liveness of the target is the caller's business (a connected peer, a node the cluster
 * map lets lead): the host only knows the Raft view.
 */
bool raft_host_transfer_ready(const raft_host *h, uint64_t group, uint64_t target, uint64_t max_lag,
                              strata_err *err);

/*
 * Hands leadership of `group` to `target` (C-Raft's RAFT_TRANSFER: once the target's log
 * matches the leader's, the leader sends it TimeoutNow and it campaigns at once, and the
 * other voters grant the vote even though they have a leader). The same rules as
 * raft_host_transfer_ready with any lag (-1 with its errors); pick a caught-up target:
 * while a transfer is in progress the core refuses every new entry (submits, read
 * barriers and changes fail with ERR_UNAVAILABLE naming the target), so a target that
 * lags stalls writes until it catches up or the transfer gives up.
 * On 0, cb fires exactly once (outcome index 0):
 *   ERR_NONE: this node no longer leads (leader_hint: the new leader as known here, 0
 *   until it is heard from; normally the target, but another voter may win the election
 *   the target started);
 *   ERR_UNAVAILABLE: the transfer ended with this node still leading (the core gives up
 *   one election timeout after the call if the target did not take over), or the group
 *   stopped or failed, or the host closed.
 * When this node steps down, its pending reads fail and its pending submits wait for
 * their outcome, as for any leadership change (raft_host_submit): after a transfer they
 * normally succeed, committed by the new leader. Same calling rules as raft_host_submit.
 */
int raft_host_transfer(raft_host *h, uint64_t group, uint64_t target, raft_host_done_cb cb,
                       void *data, strata_err *err);

/* The target of the transfer in progress on this node for `group`, 0 if none. */
uint64_t raft_host_transferee(const raft_host *h, uint64_t group);

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
/* A decoded InstallSnapshot's configuration (out->install_snapshot.conf) is freed by
 * raft_msg_free unless it was handed to raft_step (which takes it over in every case):
 * tell the decoder so. The message never carries snapshot data (data.base is NULL). */
void raft_msg_conf_consumed(raft_msg_decoded *owner);
/* The host's own messages, next to C-Raft's: the leadership check of raft_host_read_index
 * (result false: "do you still follow me in `term`?", from the leader, with its round
 * `seq`) and its answer (result true: the follower's term, the round, ok when the terms
 * matched). raft_msg_decode gives them with out->type RAFT_HOST_MSG_CHECK; raft_msg_check
 * then fills *out (it returns false for C-Raft's messages). */
#define RAFT_HOST_MSG_CHECK 200
typedef struct {
    bool result;
    bool ok;
    uint64_t term;
    uint64_t seq;
} raft_host_check;
int raft_msg_encode_check(uint64_t group, uint64_t from, const raft_host_check *c, uint8_t **out,
                          size_t *out_len, strata_err *err);
bool raft_msg_check(const raft_msg_decoded *owner, raft_host_check *out);

#endif
