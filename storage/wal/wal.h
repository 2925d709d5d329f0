#ifndef STRATA_WAL_WAL_H
#define STRATA_WAL_WAL_H
/*
 * The node's shared write-ahead log.
 *
 * One append-only log per node holds the Raft log of every group on the node (one group
 * per partition replica) and is also the engine's write-ahead log. Records of all groups
 * are interleaved in segment files named by sequence number (<dir>/<seq as 16 hex>.wal),
 * each preallocated to `segment_size` bytes.
 *
 * Threading: one libuv loop thread owns a `wal`; every function below must be called on
 * that thread, and every callback runs on it. Writes and fdatasync run on libuv worker
 * threads (uv_queue_work), never on the loop. At most one write batch, one segment
 * removal and one segment preparation are queued at a time (a preparation holds its
 * thread for up to 10 s, paced); as the pool is shared, other users must not hold all
 * its threads with long jobs (or raise UV_THREADPOOL_SIZE), else commits wait behind
 * them.
 *
 * Group commit: every operation requested during one loop iteration, from any number of
 * groups, is written together and made durable with ONE fdatasync, just before the loop
 * blocks for I/O (a uv_prepare handle); a batch that fills a segment and goes on in the
 * next one takes one fdatasync per segment. While one batch is being synced, new operations
 * accumulate for the next batch. Callbacks fire in request order, once the fdatasync
 * covering the operation has returned (status 0) or when the log has failed (-1).
 *
 * Under load the next batch waits a little. When a batch has been synced and `hold_ops`
 * or more operations already wait, writes arrive faster than the log syncs them and more
 * will come within a millisecond: the next batch is held WAL_HOLD_MS to take them. Fewer,
 * larger syncs: where the host charges a guest's I/O to its CPU quota, syncing less often
 * under a load that keeps both CPUs busy shortens the stops that every write in flight
 * waits through (tests/bench/cluster/README.md). A light load never waits: with a few
 * writers, each waiting for its own write, the batch already holds all there is, and
 * holding it would only add to every one.
 *
 * Per group the log holds what a Raft host (C-Raft 0.22, raft_step) must persist:
 *   - entries [first_index, last_index], each with (term, type, payload bytes);
 *   - the current term and vote;
 *   - the snapshot point (index, term, opaque metadata such as an encoded configuration)
 *     and `keep_from`: the first index still needed; entries below it may be forgotten
 *     (raft keeps some "trailing" entries below the snapshot index).
 * The WAL knows nothing of Raft: `type` and `meta` are opaque bytes for the host.
 *
 * Mapping to raft_step: RAFT_UPDATE_CURRENT_TERM / VOTED_FOR -> wal_set_term_vote (send
 * no message before its callback); RAFT_UPDATE_ENTRIES (index, batch, n) -> wal_append
 * (index may be <= last_index: the conflicting suffix is replaced); its callback ->
 * RAFT_PERSISTED_ENTRIES. A snapshot taken or installed -> wal_set_snapshot. On start,
 * wal_group_state + wal_read_entries give RAFT_START its term, vote, snapshot metadata,
 * start_index and entries.
 *
 * The engine keeps no log of its own: it replays, per partition, the entries above the
 * index it has made durable (wal_read_entries). So the host must keep `keep_from` at
 * most that index + 1 as well as what Raft still needs.
 *
 * Durability and recovery: wal_open scans the segments in order and verifies every
 * record's xxh3 checksum. A torn or garbage tail (the last, unsynced batch) is truncated
 * and zeroed so that later appends are clean. A bad record followed by valid records is
 * corruption: wal_open fails with ERR_CORRUPT naming the file and offset, and nothing is
 * silently dropped. The one exception is what a torn write of the last batch looks like:
 * the records after the damage belong to the same or the next batch, and the damage
 * holds a whole 512-byte sector of zeros (segments are preallocated, so sectors never
 * written read back as zeros). Damage with no valid record after it cannot be told from
 * a torn write and is truncated like one. An operation whose callback never fired may be
 * recovered fully, not at all, or, for a large append split into several records, as a
 * prefix of its entries: all of which Raft tolerates.
 *
 * Block-aligned writes: every write covers whole blocks (pages) of the segment file. The
 * already written part of the tail block is written again, with the same bytes, in front
 * of each batch, and zeros after it up to the block's end (what the preallocated segment
 * holds there anyway). A write starting or ending inside a block whose page is not cached
 * (evicted under memory pressure) would make the kernel read the block from disk first,
 * on the write path between the batch and its fdatasync. Rewriting durable bytes with the
 * same bytes relies on sector-atomic writes, as recovery's torn-tail rules already do.
 *
 * Memory: the WAL does not keep payloads in RAM, and recovery reads one segment at a
 * time. Per group it keeps one small index record (segment, offset, index range; 40
 * bytes) per append record still needed; wal_read_entries reads the payloads from disk
 * on demand. The index shrinks as `keep_from` advances.
 *
 * The next segment file is created and preallocated ahead of need (on a worker thread)
 * once the current one is half full, so rolling over costs the write path nothing; a
 * crash leaves it without a header and recovery removes it. Its zeros are written at a
 * pace that has it ready about when a quarter of the current segment is left, so that
 * they do not crowd the write path's syncs.
 *
 * Space: segments are deleted oldest first (on a worker thread) once, for every group
 * with records in them, the entries there are below the group's durable `keep_from` (or
 * the group was dropped). Term/vote and snapshot records that would pin an old segment
 * are re-logged automatically. A group that never advances keep_from pins its segments.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "storage/base/err.h"

typedef struct wal wal;

typedef struct {
    const char *dir;          /* directory for the segments; created if missing */
    uint64_t segment_size;    /* bytes per segment file; 0 = 64 MiB; min 64 KiB */
    size_t max_pending_bytes; /* requested but unwritten bytes before ERR_BUSY; 0 = 256 MiB */
    /* The zero fill of a segment prepared ahead is spread over this long (a knob for
     * tests); 0 = half the time the current segment took to fill halfway, at most 10 s. */
    uint64_t spare_fill_ms;
    /* Operations that must be waiting, when a batch has been synced, for the next batch to
     * be held (see Group commit); 0 = never held (stratad's default, log_hold_ops, is 12). */
    uint32_t hold_ops;
} wal_options;

#define WAL_HOLD_MS 1

/* One log entry. On append the WAL copies `data` before returning. */
typedef struct {
    uint64_t term;
    uint8_t type; /* opaque to the WAL (the host stores enum raft_entry_type) */
    const void *data;
    size_t len; /* at most about segment_size - 128 bytes per entry */
} wal_entry;

/*
 * Completion of an asynchronous operation. status 0: durable. status -1: the log has
 * failed (err says why, e.g. fdatasync returned EIO); the WAL then refuses every later
 * operation, since the state of the file after a failed fdatasync is unknown.
 */
typedef void (*wal_cb)(void *data, int status, const strata_err *err);

/* Recovered or current state of one group. */
typedef struct {
    uint64_t term;           /* 0 if never set */
    uint64_t vote;           /* 0 if none */
    uint64_t snapshot_index; /* 0 if no snapshot */
    uint64_t snapshot_term;
    const void *snapshot_meta; /* owned by the WAL; valid until the next call that */
    size_t snapshot_meta_len;  /*   changes this group's snapshot, or wal_close */
    uint64_t keep_from;        /* entries below this index are no longer kept */
    uint64_t first_index;      /* first entry held; last_index + 1 if none */
    uint64_t last_index;       /* last entry held, or the snapshot index if none */
} wal_group_info;

typedef struct {
    uint64_t batches; /* write batches written and synced */
    uint64_t syncs;   /* fdatasync calls on segments */
    uint64_t bytes_written;
    uint64_t ops;      /* operations completed */
    uint64_t segments; /* segments holding the log */
    uint64_t prepared; /* 1 while the next segment file is created ahead of need */
    uint64_t spare_ready;    /* 1 once that file is ready */
    uint64_t spares_hurried; /* preparations a batch had to wait for (paced no longer) */
    uint64_t segments_removed;
    uint64_t first_seq;      /* oldest live segment (0 if none) */
    uint64_t last_seq;       /* segment receiving appends (0 if none) */
    uint64_t tail_truncated; /* bytes of torn tail dropped by recovery */
    /* Writes that began inside a block whose written bytes the log did not hold, so the
     * kernel may have to read the block first (see "Block-aligned writes"). 0 normally. */
    uint64_t unaligned_writes;
    uint64_t holds; /* batches held to gather more operations (see Group commit) */
} wal_stats;

/*
 * Opens (creating it if needed) the log in opts->dir and recovers every group's state.
 * Blocking: call it before the loop runs. Fails with ERR_IO (with path and errno text),
 * ERR_CORRUPT (file and offset), ERR_NOMEM or ERR_VALIDATION (bad options).
 */
int wal_open(const wal_options *opts, uv_loop_t *loop, wal **out, strata_err *err);

/*
 * Closes the log: operations already requested are written and synced and their
 * callbacks fire (status 0 unless the log fails); then files are closed, memory freed,
 * and `cb` runs on the loop (it may be NULL). The loop must keep running until then.
 * No other call may use `w` after wal_close.
 */
void wal_close(wal *w, void (*cb)(void *data), void *data);

/* The ids of the groups the log holds (not dropped), in no particular order: fills up to
 * `cap` ids and returns the total count (call with cap 0 to size the array). */
size_t wal_groups(const wal *w, uint64_t *ids, size_t cap);

/* The state of `group` including operations requested but not yet durable.
 * ERR_NOT_FOUND if the log holds nothing for it. */
int wal_group_state(const wal *w, uint64_t group, wal_group_info *out, strata_err *err);

/*
 * Reads entries [from, to] of `group` from disk (blocking: meant for startup, and for the
 * rare read of old entries). Stops early, after at least one entry, once the payloads
 * would exceed `max_bytes` (0 = no limit). On success *out is one malloc'd block holding
 * the *n entries and their payloads (the caller frees it with free()); *n may be less
 * than to - from + 1 only because of max_bytes. ERR_NOT_FOUND if from < first_index or
 * to > last_index; ERR_BUSY if an entry's append has not completed yet; ERR_CORRUPT if
 * the bytes on disk no longer match their checksum.
 */
int wal_read_entries(wal *w, uint64_t group, uint64_t from, uint64_t to, size_t max_bytes,
                     wal_entry **out, size_t *n, strata_err *err);

/*
 * Appends entries first_index .. first_index + n - 1 to `group` (created on first use).
 * first_index must be in (snapshot_index, last_index + 1]; if it is <= last_index the
 * group's entries from first_index on are replaced (Raft conflict). The entries are
 * copied before return. `cb` (may be NULL) fires once they are durable.
 * Fails (without calling cb) with ERR_VALIDATION for a bad index, n == 0 or an entry too
 * large, ERR_BUSY when max_pending_bytes are already waiting, ERR_IO once the log failed.
 */
int wal_append(wal *w, uint64_t group, uint64_t first_index, const wal_entry *entries, size_t n,
               wal_cb cb, void *data, strata_err *err);

/* Records the group's current term and vote (last one wins). Raft must not send messages
 * that depend on them before `cb` fires. term may not decrease (ERR_VALIDATION). */
int wal_set_term_vote(wal *w, uint64_t group, uint64_t term, uint64_t vote, wal_cb cb, void *data,
                      strata_err *err);

/* Drops the group's entries from `from_index` on (from_index > snapshot_index, else
 * ERR_VALIDATION). A from_index above last_index changes nothing but is still logged. */
int wal_truncate(wal *w, uint64_t group, uint64_t from_index, wal_cb cb, void *data,
                 strata_err *err);

typedef struct {
    uint64_t index;     /* last index covered by the snapshot; may not decrease */
    uint64_t term;      /* term of that entry */
    uint64_t keep_from; /* first index still needed, <= index + 1; kept monotonic */
    const void *meta;   /* opaque (e.g. encoded configuration); copied; may be NULL */
    size_t meta_len;    /* at most 1 MiB */
} wal_snapshot;

/*
 * Records a snapshot / compaction point. Entries below keep_from are forgotten (and
 * their segments become removable once this record is durable). If snap->index is
 * above last_index (a snapshot installed from the leader), every entry is dropped and
 * the log continues at snap->index + 1.
 */
int wal_set_snapshot(wal *w, uint64_t group, const wal_snapshot *snap, wal_cb cb, void *data,
                     strata_err *err);

/* Forgets the group entirely (its replica left this node): its records stop pinning
 * segments. Later operations on the same id start a new, empty group. */
int wal_drop_group(wal *w, uint64_t group, wal_cb cb, void *data, strata_err *err);

void wal_get_stats(const wal *w, wal_stats *out);

/* True once the log has failed (an I/O error, or the disk is full): every later
 * operation is refused for good; `why` (may be NULL) receives the first error. */
bool wal_failed(const wal *w, strata_err *why);

#endif
