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
#include "rpc/rpc.h"
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
 *   appends the result bytes to `result`; -1 only when the engine fails, or with
 *   ERR_NEWER for a command of a newer binary (the replica then stops: Formats in
 *   cluster/partition_entry.h).
 * result_stats (may be NULL): the change of the partition's item count and size caused
 *   by a command, from its result bytes (for ItemCount / TableSizeBytes).
 * read (may be NULL: partition_read): runs a read on the local engine.
 * write_units (may be NULL: partition_result_decode + partition_write_units, and 1 for
 *   bytes that do not decode): the write capacity units a command consumed, from its
 *   result bytes (charged to the partition's capacity, cluster/capacity.h).
 */
typedef struct {
    int (*apply)(struct lsm *engine, const partition_desc *p, const uint8_t *cmd, size_t cmd_len,
                 uint64_t log_index, buf *result, strata_err *err);
    void (*result_stats)(const uint8_t *result, size_t len, partition_stats *delta);
    int (*read)(struct lsm *engine, const partition_desc *p, const partition_read_req *req, arena *a,
                partition_read_res *res, strata_err *err);
    uint64_t (*write_units)(const uint8_t *result, size_t len);
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
 * The outcome of a read: `err` is NULL and `res` holds what partition_read() returns for
 * the request (allocated from the caller's arena), or `err` says why not (table gone,
 * router closing, no replica reachable) and `res` is NULL. Valid during the call only
 * (the arena's memory stays the caller's).
 */
typedef void (*router_read_cb)(void *ctx, const strata_err *err, partition_read_res *res);

typedef struct router router;

/*
 * Cluster mode (router_config.cluster != NULL; cluster/router_cluster.c). The node runs
 * one Raft host: group 0 is the meta service (the cluster map: nodes, tables and their
 * catalog records, partitions with their three replicas), every other group is one
 * partition's replica set. Every group's log lives in the node's one WAL (group commit);
 * every group's messages to a peer go over one rpc connection.
 *
 * Forming a cluster: the node started with `bootstrap` collects join requests until
 * `bootstrap_expect` nodes (itself included) are known, then all of them start the meta
 * group with those voters. A node started with `join` asks those addresses until it is
 * told the meta members; nodes beyond the meta voters follow the map by fetching it.
 * Each node then registers itself (address, AZ, host) through the meta leader. The list
 * of the meta voters is kept in DATA_DIR/cluster, so a restart needs neither flag. The
 * group keeps its size at formation: the map records its seats, and the meta leader moves
 * a seat off a node that is drained, removed or long DOWN, as it moves a partition's
 * replica; the list follows the map.
 *
 * Routing: a write goes to the partition leader (retried on another replica while no
 * replica has accepted it, within a deadline); an outcome that may or may not have been
 * committed (leader lost, connection broken) is ERR_UNAVAILABLE, never retried. A strong
 * read goes to the leader, which confirms its leadership first (raft_host_read_index: a
 * majority of the replicas answers that it still leads, no log entry); an eventual read
 * is served by this node when it holds an up-to-date replica, else by the replicas in
 * turn. Table changes (router_catalog_write) go through the meta group; the callback runs
 * once this node's copy of the map holds the change.
 */
typedef struct {
    uint64_t node_id;              /* > 0 */
    const char *az;                /* availability zone label */
    const char *host_label;        /* the machine: no two replicas share one */
    const char *client_addr;       /* advertised HOST:PORT of the DynamoDB API */
    const char *peer_listen_host;  /* peer (rpc) listen address */
    int peer_listen_port;
    const char *peer_addr;         /* advertised HOST:PORT of the peer port */
    bool bootstrap;                /* form a new cluster */
    int bootstrap_expect;          /* meta voters to wait for (3 or 5; 0 = 3) */
    const char *const *join;       /* HOST:PORT peer addresses of members */
    size_t n_join;
    const char *cluster_name;      /* checked in every connection's handshake; NULL = "strata" */
    /* The cluster's peer secrets: every peer connection proves one both ways (rpc/rpc.h,
     * Authentication). count 0: none, and a peer that requires one is refused (one that is
     * optional is taken). */
    rpc_secrets peer_secrets;
    unsigned election_timeout_ms;  /* 0 = 1000 */
    unsigned heartbeat_timeout_ms; /* 0 = 100 */
    size_t memtable_bytes;         /* engine memtable bytes; 0 = the engine's default */
    int background_cpu_pct;        /* engine pacing (lsm_options); 0 = the engine's default */
    uint32_t log_hold_ops;         /* the log's hold under load (wal_options.hold_ops); 0: never */
    uint64_t replace_after_ms;     /* a node DOWN this long has its replicas re-created
                                      elsewhere; 0 = 300000 */
    /* Automatic splits, decided by each partition's leader (0: never): for size, once the
     * partition holds this many bytes; for heat, once it has been hot (cluster/capacity.h,
     * capacity_hot_ms) this long. The split point divides the partition's recent traffic
     * evenly; when one partition key holds most of it, no split (a hot key, reported). */
    uint64_t split_size_bytes;
    uint64_t split_heat_ms;
    /* A test hook (STRATA_TEST_EXIT_ON_SPLIT, node/main.c): the process exits at once
     * when a replica here applies a SPLIT, as a crash between storing a committed entry
     * and applying it would. Tests use it to make a node miss a SPLIT for sure. */
    bool test_exit_on_split;
    /* A test hook (STRATA_TEST_SEED_ABANDON=N, node/main.c): the first N copies of a
     * child's first state that this node makes (seed_child) are abandoned at their last
     * chunk, its items written but not the range record, as a copy cut short would be. */
    unsigned test_seed_abandons;
    /* A test hook (STRATA_TEST_EXIT_MID_COPY, node/main.c): the process exits once the
     * first chunk of a replica's copy from its leader (not the last one) is written and
     * flushed, as a crash in the middle of a copy of a partition larger than the memtable
     * would, leaving part of it in table files. */
    bool test_exit_mid_copy;
    /* A test hook (STRATA_TEST_META_FORMAT=N, node/main.c): the node says its binary reads
     * meta records up to format N (1..META_FORMAT) instead of META_FORMAT, as a node of an
     * older version would, so that tests can upgrade and downgrade a cluster (see Formats
     * in cluster/meta.h). 0: META_FORMAT. */
    uint8_t test_meta_format;
} router_cluster_config;

typedef struct {
    uv_loop_t *loop;
    const char *data_dir;      /* the engine and the log live under it */
    const router_cluster_config *cluster; /* NULL: one node serves every partition */
    router_ops ops;            /* the partition state machine */
    const char *region;        /* for ARNs; "us-east-1" if NULL */
    uint64_t wal_segment_size; /* log segment bytes; 0 = the log's default (64 MiB) */
    size_t memtable_bytes;     /* engine memtable bytes; 0 = the engine's default */
    int background_cpu_pct;    /* engine pacing (lsm_options); 0 = the engine's default */
    uint32_t log_hold_ops;     /* the log's hold under load (wal_options.hold_ops); 0: never */
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
 * In a cluster this node's catalog follows the meta group and may lag it by a moment
 * (a heartbeat on meta voters, up to a fetch interval elsewhere): a table created
 * through another node may be missing here for that long. router_catalog_may_lag says
 * whether that can happen (false on one node). router_sync_catalog calls `cb` once,
 * later, from the loop, when this node's catalog holds every table change the meta
 * group committed before the call (the meta leader confirms its leadership and its
 * applied index, and this node's copy catches up to it), or when that cannot be confirmed
 * (no meta leader answers within about two seconds): the caller then goes on with the
 * catalog it has. For answers that rest on a table's absence (ResourceNotFoundException):
 * after `cb` they are no staler than the request. Concurrent callers share one check;
 * on one node `cb` runs at the next loop turn.
 */
typedef void (*router_sync_cb)(void *ctx);
bool router_catalog_may_lag(const router *r);
void router_sync_catalog(router *r, router_sync_cb cb, void *ctx);

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
 * Schedules `req` (partition_read's request, cluster/partition.h) on partition
 * `partition_id` of table `table_id` (find it with router_partition_for_hash or
 * router_table_partitions): `cb` is called exactly once, later, from the event loop,
 * never from inside router_read. req->consistent asks for a strongly consistent read
 * (the leader confirms it still leads first); otherwise any replica answers. `req` and
 * everything it points to must stay valid until `cb`; the result is allocated from `a`.
 * The request's filter and projection callbacks always run on this node (a replica on
 * another node reads raw items and this node finishes them: partition_read_finish).
 * Returns -1 with `err` (cb never called) when the table or partition does not exist
 * (ERR_RESOURCE_NOT_FOUND) or the router is closing (ERR_UNAVAILABLE).
 */
int router_read(router *r, uint32_t table_id, uint64_t partition_id, const partition_read_req *req,
                arena *a, router_read_cb cb, void *ctx, strata_err *err);

/* A read planned against a partition's hash range that a split has changed since (a
 * Scan: GET and Query follow their key by themselves) fails with ERR_UNAVAILABLE and a
 * message starting with ROUTER_MOVED_PREFIX: nothing was read, and the caller plans that
 * part again from router_partition_for_hash (the map already shows the split then). */
#define ROUTER_MOVED_PREFIX "moved:"
bool router_err_moved(const strata_err *err);

/* Fan-out helpers. The returned pointers stay valid until the next catalog change,
 * which only happens from a callback: do not keep them across callbacks, keep ids. */
/* The partitions of a table in hash order; -1 (ERR_RESOURCE_NOT_FOUND) if no table. */
int router_table_partitions(const router *r, uint32_t table_id, const partition_desc **parts,
                            size_t *n, strata_err *err);
/* The partition of a table that owns `hash`; NULL if no such table. */
const partition_desc *router_partition_for_hash(const router *r, uint32_t table_id, uint64_t hash);

/* Sum of the partitions' statistics for ItemCount / TableSizeBytes. */
partition_stats router_table_stats(const router *r, uint32_t table_id);

/*
 * Capacity (cluster/capacity.h). Where a partition operation executes (one node: here;
 * a cluster: on the partition leader for writes and strong reads, on the answering
 * replica for eventual reads) it is first admitted against the partition's token
 * buckets and, once it ran, charged with DynamoDB's units (writes: write_units of the
 * result; reads: partition_read_units of bytes_read and req->consistent). A refused
 * operation fails with ERR_THROUGHPUT_EXCEEDED and DynamoDB's message, before anything
 * is logged or read: from router_write/router_read (-1) on one node, through the
 * callback in a cluster; callers handle both. The table's settings are read from the
 * catalog at every admission, so UpdateTable takes effect on the next request.
 * router_capacity is the node's capacity state, for metrics and for the API layer's
 * ThrottledRequests count (capacity_note_throttled_request). Never NULL.
 */
struct capacity;
struct capacity *router_capacity(router *r);

/* Region for ARNs (router_config.region). */
const char *router_region(const router *r);

/* Counts of operations in flight (for tests and shutdown). */
size_t router_inflight(const router *r);

/* True once the node can serve requests: always on one node; in a cluster, once this
 * node knows the cluster map and is registered in it, until it is removed. */
bool router_ready(const router *r);

/* True once the node's log or engine has failed for good (an I/O error, the disk full),
 * or in a cluster the log refused a Raft group's request (raft_wal_storage_refused): the
 * node can no longer keep its replicas. `why` receives the first error. */
bool router_storage_failed(const router *r, strata_err *why);

/* True once the cluster refused this node's join for good: its --node-id is a member's,
 * registered from another data directory (a replaced disk, or a second process given
 * the same id), or a removed node's; or once its binary is too old for the cluster (an
 * older meta format than the cluster's, or a meta or partition log entry of a newer
 * binary: Formats, cluster/meta.h). The node must stop; `why` says what to do. The
 * data directory's identity (node id, random incarnation) is kept in its file
 * "node-identity", made at the first start; a directory that joined a cluster fails
 * router_open when started under another --node-id. */
bool router_refused(const router *r, strata_err *why);

/* Graceful stop, before router_close (stratad on SIGTERM). In a cluster, hands the
 * leadership of every Raft group this node leads (its partitions, the meta group) to a
 * voter on another connected node, the most caught up, and from then on leader balancing
 * never hands one back: the node's stop then costs no election timeout (a second or two
 * in which its partitions refuse writes and the router retries them). Call it again until
 * it returns 0 or the caller's deadline passes: each call starts the transfers not yet
 * started (again for one the core gave up) and returns the number of groups being handed
 * over: still led here, or whose new leader has not been heard from yet. A group with no
 * voter to take it (the others are down) is left: its followers elect once the node is
 * gone. *handed (may be NULL) receives the number of groups this node led since the
 * hand-off began that another node is now known to lead. 0 at once on one node. */
size_t router_hand_off(router *r, size_t *handed);

/* Replaces the peer secrets for the peer connections made from now on (rpc_set_secrets:
 * to move the cluster to a new one, node by node; those up stay up). ERR_VALIDATION on one
 * node, for secrets rpc/ refuses, to turn them on or off, or to change `optional`. */
int router_set_peer_secrets(router *r, const rpc_secrets *s, strata_err *err);

/* Appends the node's view of the cluster as a JSON object (GET /admin/cluster):
 * {"node_id", "ready", "meta_leader", "nodes": [...], "partitions": [...]}; see the
 * README's Cluster section. On one node: {"node_id":0,"ready":true,"mode":"single"}. */
void router_status_json(router *r, buf *out);

/* Sets a node's state in the cluster map (an operator's command: "DRAINING" moves every
 * replica off it, "REMOVED" retires it once it holds none, "ACTIVE" cancels a drain).
 * `cb` runs once this node's map holds the change. ERR_VALIDATION for an unknown state or
 * on one node (no cluster). */
int router_node_state(router *r, uint64_t node, const char *state, router_cb cb, void *ctx,
                      strata_err *err);

/* Rebalances partition leaders (an operator's command): plans balanced leader hints from
 * this node's map (placement_leaders: even leader counts over ACTIVE nodes) and proposes
 * them; partition leaders then hand their leadership to the hinted voters (the scheduler
 * does the same by itself, this does it now). `cb` runs once this node's map holds every
 * change (inside the call when there is none), with `result` the number of hints changed
 * as decimal text. ERR_VALIDATION on one node (no cluster), ERR_UNAVAILABLE before the
 * node knows the cluster map. */
int router_rebalance_leaders(router *r, router_cb cb, void *ctx, strata_err *err);

/* Splits partition `partition_id` of the cluster map (an operator's command): the child
 * gets [hash, hash_hi] (has_hash false: the upper half of the range), the parent keeps
 * the rest; the parent's replicas then carry the split into the partition's log and
 * create the child (router_cluster.c). `cb` runs once this node's map holds the split,
 * with result = {"partition":P,"child":C,"split_hash":"HEX"} (JSON text). ERR_VALIDATION
 * for a hash outside (hash_lo, hash_hi] or on one node; ERR_CONDITIONAL_CHECK when the
 * partition changed meanwhile (retry). */
int router_split(router *r, uint64_t partition_id, bool has_hash, uint64_t hash, router_cb cb,
                 void *ctx, strata_err *err);

/* Appends {"node_id", "stray_items", "replicas": [{"partition", "applied_index",
 * "commit_index", "items", "digest", "complete"}]} (GET /admin/digests): an xxh3 over
 * every key and value of each local replica, for checking that replicas converged, and
 * how many item keys the engine holds outside every local replica (what a replica that
 * left, or a dropped table, left behind). Reads every item: not for hot paths. On one
 * node: {"node_id":0,"stray_items":0,"replicas":[]}. */
void router_digests_json(router *r, buf *out);

#endif
