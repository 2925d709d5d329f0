#ifndef STRATA_LSM_LSM_H
#define STRATA_LSM_LSM_H
/*
 * The node's ordered key-value engine: a log-structured merge tree.
 *
 * Keys and values are opaque byte strings; keys are ordered by memcmp (a shorter key that
 * is a prefix of a longer one sorts first). All partition replicas of a node live in one
 * engine; a partition is a contiguous key range.
 *
 * Durability. The engine has NO write-ahead log of its own: writes are made durable by the
 * replicated log before they reach the engine, and a crash loses the memtables. Every write
 * batch carries (range_id, log_index). When a memtable is flushed, the engine records in
 * its manifest, per range_id, the highest log_index of that memtable's batches, and
 * lsm_durable_index() reports it after open, so recovery replays only the log tail above
 * it. Everything reported durable (lsm_durable_index, an lsm_flush callback) survives a
 * crash; nothing else is promised, except the order: memtables flush one at a time,
 * oldest first, so what survives a crash is always a prefix of the writes (a write that
 * survives means every earlier write did too; the cluster's splits rely on it).
 *
 * Threading. One libuv loop thread owns the engine: every function here must be called on
 * that thread, and every callback runs on it. Flushes and compactions run on libuv worker
 * threads (uv_queue_work), and a flushed memtable is freed on one, so they never block
 * the loop; lsm_write and lsm_get never wait for
 * them (lsm_get may read a data block from a table file: a pread, usually page-cached).
 *
 * Memory. Memtables are bounded: one memtable grows to memtable_bytes and is then sealed
 * and flushed; at most max_memtables exist (the mutable one plus sealed ones waiting for
 * flush). When all are full and the flush is behind, or level 0 has l0_stop_files files,
 * lsm_write fails with ERR_BUSY and applies nothing (back-pressure); the caller retries
 * after lsm_on_writable's callback. Data blocks are cached in an LRU cache bounded by
 * block_cache_bytes. Total memory is about max_memtables * (memtable_bytes + 1 MiB, the
 * most a memtable's point-read index takes) + block_cache_bytes + the index and bloom
 * blocks of open table files (reported in stats).
 *
 * Shape. Leveled compaction: level 0 holds flushed files (overlapping); levels 1..6 hold
 * non-overlapping files, each level ~10x the previous. One background job (a flush or a
 * compaction) runs at a time. Range tombstones live in the manifest (not in table files)
 * until compaction has removed the data under them; whole files under a tombstone are
 * dropped without being rewritten.
 *
 * Pacing. A flush or compaction is CPU work that nothing waits for most of the time, and
 * a burst of it takes a core from the loop threads serving requests. So a job is paced to
 * background_cpu_pct of one CPU, unless it is urgent: an lsm_flush, lsm_compact or
 * lsm_on_writable caller waits, the engine is closing, the mutable memtable is half full
 * with no free slot to seal it into, or level 0 is half way to l0_stop_files. Then it runs
 * at full speed (a paced job that becomes urgent speeds up within a few milliseconds).
 *
 * Errors. Corruption found in a table file or the manifest (xxh3 checksum or format
 * mismatch) is reported as ERR_CORRUPT naming the file and offset; corrupt data is never
 * returned. An I/O error in a background flush or compaction is sticky: later writes and
 * flushes fail with that error (reads keep working); reopen to recover.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "storage/base/buf.h"
#include "storage/base/err.h"

#define LSM_MAX_KEY   (16u * 1024)        /* bytes, per key */
#define LSM_MAX_VALUE (16u * 1024 * 1024) /* bytes, per value */
#define LSM_LEVELS    7                   /* level 0 (overlapping files) to level 6 */

typedef struct lsm lsm;
typedef struct lsm_batch lsm_batch;
typedef struct lsm_snapshot lsm_snapshot;
typedef struct lsm_iter lsm_iter;

/* A zero field means "the default" (in brackets). */
typedef struct {
    const char *dir;          /* created if missing; one engine per directory */
    size_t memtable_bytes;    /* one memtable's size before it is sealed [16 MiB] */
    int max_memtables;        /* mutable + sealed awaiting flush, >= 2 [2] */
    size_t block_cache_bytes; /* LRU cache of uncompressed data blocks [64 MiB] */
    int bloom_bits_per_key;   /* bloom filter bits per key; < 0 disables [10] */
    size_t block_bytes;       /* target uncompressed data block size [4 KiB] */
    size_t table_file_bytes;  /* target size of a compaction output file [64 MiB] */
    int l0_compaction_files;  /* level-0 file count that starts a compaction [4] */
    int l0_stop_files;        /* level-0 file count at which writes get ERR_BUSY [20] */
    uint64_t level1_bytes;    /* level 1 target size; x10 per deeper level [64 MiB] */
    bool no_compression;      /* store blocks raw instead of lz4 */
    bool no_compaction;       /* tests: never compact automatically */
    /* The share of one CPU, in percent, a flush or compaction takes while nothing waits
     * for it: it works in slices and sleeps in between, so that the loop threads it shares
     * the machine with are not starved by a burst. It runs unpaced while something does
     * wait (see "Pacing" above); 100 never paces. [20] */
    int background_cpu_pct;
} lsm_options;

/* Called on the loop thread; err->code is ERR_NONE on success. */
typedef void (*lsm_cb)(void *arg, const strata_err *err);

/* Opens (or creates) the engine in opts->dir and recovers it from its manifest: files not
 * named by the manifest are deleted. ERR_CORRUPT if the manifest or a table file it names
 * fails its checksum, ERR_IO on a system error, ERR_VALIDATION on bad options. */
int lsm_open(const lsm_options *opts, uv_loop_t *loop, lsm **out, strata_err *err);

/* Stops background work and frees the engine once the running job (if any) has finished;
 * then calls cb (may be NULL). Memtables are NOT flushed (call lsm_flush first for a
 * clean shutdown). Snapshots and iterators must have been released before. The caller
 * keeps running the loop until cb has run. */
void lsm_close(lsm *db, lsm_cb cb, void *arg);

/* ---- Write batches: applied atomically (all or nothing, one sequence range) ---- */
lsm_batch *lsm_batch_new(void); /* NULL on OOM */
void lsm_batch_free(lsm_batch *b);
void lsm_batch_clear(lsm_batch *b);
size_t lsm_batch_count(const lsm_batch *b); /* operations in the batch */
size_t lsm_batch_bytes(const lsm_batch *b); /* encoded size */
/* ERR_VALIDATION if a key or value is over its limit; ERR_NOMEM on OOM. */
int lsm_batch_put(lsm_batch *b, const void *key, size_t klen, const void *val, size_t vlen,
                  strata_err *err);
int lsm_batch_delete(lsm_batch *b, const void *key, size_t klen, strata_err *err);
/* Deletes every key k with start <= k < end (memcmp order), in O(1): a range tombstone
 * that reads honour and compaction later applies (whole files under it are dropped without
 * being rewritten). Meant for dropped tables and moved-away replicas, not per-item deletes:
 * each live range tombstone costs every read a check. ERR_VALIDATION unless start < end. */
int lsm_batch_delete_range(lsm_batch *b, const void *start, size_t slen, const void *end,
                           size_t elen, strata_err *err);

/* Applies the batch to the memtable, synchronously. (range_id, log_index) says which
 * replicated-log entry it is; the engine keeps, per range, the highest index (log_index 0
 * records nothing). Fails, applying nothing, with ERR_BUSY (back-pressure, see above), or
 * the sticky background error. */
int lsm_write(lsm *db, const lsm_batch *b, uint64_t range_id, uint64_t log_index, strata_err *err);
/* lsm_write(b) that also forgets range_id's log index: lsm_durable_index and
 * lsm_applied_index answer 0 for it until a later write records one. Atomic with b
 * across a crash (a reopen finds both or neither). For a replica that leaves this node:
 * b deletes its data, and a replica of the same range created here later starts from
 * nothing instead of claiming the old replica's index. */
int lsm_write_forget(lsm *db, const lsm_batch *b, uint64_t range_id, strata_err *err);

/* One-shot: cb runs once writes may succeed again (a memtable slot freed, or a background
 * error, which cb receives). If writes are not blocked now, cb runs before this returns. */
void lsm_on_writable(lsm *db, lsm_cb cb, void *arg);

/* ---- Reads ---- */
/* Point read at `snap` (NULL: the latest data). Returns 1 and sets *value_out (reset first)
 * when found, 0 when not found, -1 on error (ERR_CORRUPT, ERR_IO, ERR_NOMEM). */
int lsm_get(lsm *db, const lsm_snapshot *snap, const void *key, size_t klen, buf *value_out,
            strata_err *err);

/* A consistent point-in-time view; writes continue. Release every snapshot you take:
 * compaction keeps old versions alive for it. NULL on OOM. */
const lsm_snapshot *lsm_snapshot_new(lsm *db);
void lsm_snapshot_release(lsm *db, const lsm_snapshot *snap);
uint64_t lsm_snapshot_seq(const lsm_snapshot *snap);

typedef struct {
    const lsm_snapshot *snapshot; /* NULL: the data as of lsm_iter_new */
    const void *lower;            /* inclusive lower bound, or NULL */
    size_t lower_len;
    const void *upper; /* exclusive upper bound, or NULL */
    size_t upper_len;
} lsm_iter_options;

/* An iterator sees a fixed point in time and pins the files and memtables it reads, so
 * writes, flushes and compactions may continue. Not positioned until a seek. Free every
 * iterator before lsm_close. `o` may be NULL; bounds are copied. */
lsm_iter *lsm_iter_new(lsm *db, const lsm_iter_options *o, strata_err *err);
void lsm_iter_free(lsm_iter *it);
void lsm_iter_first(lsm_iter *it);                                       /* smallest key >= lower */
void lsm_iter_last(lsm_iter *it);                                        /* largest key < upper */
void lsm_iter_seek(lsm_iter *it, const void *key, size_t klen);          /* first >= key */
void lsm_iter_seek_for_prev(lsm_iter *it, const void *key, size_t klen); /* last <= key */
void lsm_iter_next(lsm_iter *it);
void lsm_iter_prev(lsm_iter *it);
bool lsm_iter_valid(const lsm_iter *it); /* false at either end or after an error */
/* Valid until the iterator next moves. */
const void *lsm_iter_key(const lsm_iter *it, size_t *len);
const void *lsm_iter_value(const lsm_iter *it, size_t *len);
/* 0, or -1 with the error that stopped the iterator (e.g. ERR_CORRUPT). */
int lsm_iter_status(const lsm_iter *it, strata_err *err);

/* ---- Durability and maintenance ---- */
/* Highest log index of range_id durable in table files (0 if none). */
uint64_t lsm_durable_index(lsm *db, uint64_t range_id);
/* Highest log index of range_id written to the engine (memtable included). */
uint64_t lsm_applied_index(lsm *db, uint64_t range_id);
/* Calls fn for every range with a durable index (recovery: what to replay from). */
void lsm_durable_foreach(lsm *db, void (*fn)(void *arg, uint64_t range_id, uint64_t index),
                         void *arg);

/* Seals the memtable and calls cb once everything written before this call is durable in
 * table files and the manifest (or with the error that prevented it). cb runs before this
 * returns when there is nothing to flush, or on a sticky error or a closing engine. While
 * an older memtable waits for its flush and sealing would take the last free slot, the
 * memtable stays mutable and is sealed when that flush ends: a flush never stalls writes. */
void lsm_flush(lsm *db, lsm_cb cb, void *arg);
/* Flushes, then compacts until level 0 is empty, no level is over its target and no range
 * tombstone has data left to drop (snapshots permitting); then calls cb. For tests and
 * maintenance; works even with no_compaction. */
void lsm_compact(lsm *db, lsm_cb cb, void *arg);

typedef struct {
    size_t memtable_bytes;    /* arena bytes of all memtables */
    int memtables;            /* mutable + sealed */
    size_t block_cache_bytes; /* charged bytes in the block cache */
    size_t table_meta_bytes;  /* index + bloom blocks held for open files */
    int files[LSM_LEVELS];
    uint64_t level_bytes[LSM_LEVELS];
    uint64_t last_seq;
    uint64_t flushes, compactions, files_dropped_whole;
    uint64_t bytes_flushed, bytes_compacted; /* table bytes written */
    uint64_t write_stalls;                   /* lsm_write calls refused with ERR_BUSY */
    uint64_t paced_ms;                       /* background jobs slept this long, pacing */
    uint64_t cache_hits, cache_misses;
    int range_tombstones; /* live in files (manifest) */
    int snapshots, iterators;
} lsm_stats;
void lsm_get_stats(lsm *db, lsm_stats *out);

/* True once a background job or a write has failed for good (a flush that could not
 * write its table, the disk full, out of memory): writes are refused from then on;
 * `why` (may be NULL) receives the error. */
bool lsm_failed(const lsm *db, strata_err *why);

#endif
