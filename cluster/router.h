#ifndef STRATA_CLUSTER_ROUTER_H
#define STRATA_CLUSTER_ROUTER_H
/*
 * The router: the one partition-operation interface the API layer (node/) calls.
 *
 * Today the router serves every partition of one node from the node's engine
 * (storage/lsm) and log (storage/wal). Later it routes the same calls to the leaders of
 * 3-replica Raft groups on other nodes; callers must not assume anything that would stop
 * being true then:
 *  - Everything is asynchronous: results arrive through callbacks, on the event-loop
 *    thread, never from inside the call that started the operation.
 *  - Write commands are opaque bytes (partition_write_encode, cluster/partition.h)
 *    interpreted by the partition state machine through the router_ops given at open
 *    time. They are self-contained and deterministic: a command is applied on every
 *    replica and re-applied on restart, so anything time-dependent travels inside it.
 *
 * Write path: router_write() appends the command to the log as an entry of the
 * partition's group; once the entry is durable (fdatasync), the router applies it with
 * ops.apply(engine, ..., log_index) and calls back with the apply result. Nothing is
 * acknowledged before it is on disk. Entries of one partition are applied in log order.
 *
 * Read path: router_read() calls back, on the node holding the partition, with the
 * engine and the partition; the caller runs partition_read() there.
 *
 * Recovery (router_open): the catalog is rebuilt from the engine and log group
 * ROUTER_CATALOG_GROUP, then every partition's log entries above the engine's durable
 * index for that partition are re-applied through ops.apply, before router_open returns
 * (it may run the loop while the engine pushes back). Item counts are then recounted
 * from the engine. A timer lets the log forget entries the engine has made durable.
 *
 * Back-pressure: when the engine refuses a write (ERR_BUSY), the apply queue waits for
 * it and retries the same entry; nothing is skipped or reordered.
 *
 * Threading: the router belongs to the event-loop thread; no call is thread-safe.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "cluster/catalog.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"

/* Log group of the catalog's records. Partition ids start at 1. */
#define ROUTER_CATALOG_GROUP 0

struct lsm; /* storage/lsm/lsm.h: the node's engine */

/* Per-partition statistics (approximate): ItemCount and TableSizeBytes are their sums. */
typedef struct {
    int64_t item_count;
    int64_t size_bytes;
} partition_stats;

/*
 * The partition state machine (cluster/partition.c), injected so the router can be
 * tested alone. stratad passes partition_apply and a result_stats built on
 * partition_result_decode.
 *
 * apply: exactly cluster/partition.h's partition_apply(): applies one command at
 *   `log_index` (engine writes carry range_id = p->id and log_index), deterministic,
 *   appends the result bytes to `result`; -1 only when the engine fails.
 * result_stats (may be NULL): the change of the partition's item count and size caused
 *   by a command, from its result bytes (for ItemCount / TableSizeBytes).
 */
typedef struct {
    int (*apply)(struct lsm *engine, const partition_desc *p, const uint8_t *cmd, size_t cmd_len,
                 uint64_t log_index, buf *result, strata_err *err);
    void (*result_stats)(const uint8_t *result, size_t len, partition_stats *delta);
} router_ops;

/*
 * The outcome of a write. `err` is NULL on success (the command was applied; a failed
 * condition is reported inside `result` by the state machine), else the reason it was
 * not applied: ERR_RESOURCE_NOT_FOUND when the table went away, ERR_UNAVAILABLE when the
 * router is closing, or an internal code the API reports as InternalServerError.
 * `result` holds the state machine's result bytes; it and `err` are valid only during
 * the callback.
 */
typedef void (*router_cb)(void *ctx, const strata_err *err, const uint8_t *result,
                          size_t result_len);

/*
 * A read, run on the loop thread on the node holding the partition. `err` is NULL and
 * `engine`/`p` are set: call partition_read(engine, p, ...) synchronously inside the
 * callback (do not keep engine or p afterwards). Or `err` is set (table gone, router
 * closing) and engine/p are NULL.
 */
typedef void (*router_read_fn)(void *ctx, const strata_err *err, struct lsm *engine,
                               const partition_desc *p);

typedef struct router router;

typedef struct {
    uv_loop_t *loop;
    const char *data_dir;      /* the engine and the log live under it */
    router_ops ops;            /* the partition state machine */
    const char *region;        /* for ARNs; "us-east-1" if NULL */
    uint64_t wal_segment_size; /* log segment bytes; 0 = the log's default (64 MiB) */
    size_t memtable_bytes;     /* engine memtable bytes; 0 = the engine's default */
} router_config;

/* Opens engine and log under cfg->data_dir (created if missing) and recovers (see
 * above). Returns NULL with `err` on failure. */
router *router_open(const router_config *cfg, strata_err *err);
/* Stops accepting work; answers reads still queued (ERR_UNAVAILABLE); lets writes
 * already in the log become durable, applies them and answers them; flushes the engine
 * (a clean shutdown replays nothing) and closes engine and log. Runs the loop itself
 * until all that is done: call it after the caller's own handles are stopped. */
void router_close(router *r);

/* The catalog as of the last applied record. Read-only for callers. */
const catalog *router_catalog(const router *r);

/*
 * Submits a catalog record (catalog_encode_table/_drop). On durability it is applied
 * to the catalog and stored in the engine, then `cb` is called (result empty). Dropping
 * a table also deletes its data (an engine range delete of its table id) and retires
 * its partitions. Records are applied in submission order, interleaved with partition
 * writes in submission order too. `cb` may be NULL. A record that does not decode gets
 * ERR_CORRUPT in cb and changes nothing.
 * Returns -1 (cb never called) only if the router is closing (ERR_UNAVAILABLE) or the
 * log refuses (ERR_BUSY under back-pressure, ERR_IO once the log failed).
 */
int router_catalog_write(router *r, const uint8_t *rec, size_t len, router_cb cb, void *ctx,
                         strata_err *err);

/*
 * Submits a write command for the partition of table `table_id` that owns
 * `hash` (key_hash of the item's partition key). Returns 0 and calls `cb` exactly once
 * later, or returns -1 with `err` (and never calls cb): ERR_RESOURCE_NOT_FOUND when
 * the table does not exist, ERR_UNAVAILABLE/ERR_BUSY when the router cannot take more
 * work. If the table is dropped while the command is in flight, cb gets
 * ERR_RESOURCE_NOT_FOUND and the command is not applied.
 */
int router_write(router *r, uint32_t table_id, uint64_t hash, const uint8_t *cmd, size_t len,
                 router_cb cb, void *ctx, strata_err *err);

/*
 * Schedules a read of partition `partition_id` of table `table_id` (find it with
 * router_partition_for_hash or router_table_partitions): `fn` is called exactly once,
 * later, from the event loop, never from inside router_read. `consistent` asks for a
 * strongly consistent read (always the case on one node). Returns -1 with `err` (fn
 * never called) when the table or partition does not exist (ERR_RESOURCE_NOT_FOUND)
 * or the router is closing (ERR_UNAVAILABLE).
 */
int router_read(router *r, uint32_t table_id, uint64_t partition_id, bool consistent,
                router_read_fn fn, void *ctx, strata_err *err);

/* Fan-out helpers. The returned pointers stay valid until the next catalog change,
 * which only happens from a callback: do not keep them across callbacks, keep ids. */
/* The partitions of a table in hash order; -1 (ERR_RESOURCE_NOT_FOUND) if no table. */
int router_table_partitions(const router *r, uint32_t table_id, const partition_desc **parts,
                            size_t *n, strata_err *err);
/* The partition of a table that owns `hash`; NULL if no such table. */
const partition_desc *router_partition_for_hash(const router *r, uint32_t table_id, uint64_t hash);

/* Sum of the partitions' statistics for ItemCount / TableSizeBytes. */
partition_stats router_table_stats(const router *r, uint32_t table_id);

/* Region for ARNs (router_config.region). */
const char *router_region(const router *r);

/* Counts of operations in flight (for tests and shutdown). */
size_t router_inflight(const router *r);

#endif
