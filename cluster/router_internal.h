#ifndef STRATA_CLUSTER_ROUTER_INTERNAL_H
#define STRATA_CLUSTER_ROUTER_INTERNAL_H
/*
 * Private to cluster/router.c and cluster/router_cluster.c: the cluster mode of the
 * router (see router.h's "Cluster mode"). router.c keeps the public entry points and
 * hands every call to these functions when the router was opened with a cluster
 * configuration. Same contracts as the router_* functions of the same names.
 */
#include "cluster/router.h"

typedef struct rcluster rcluster;

/* Shared file helpers (router.c): creates a directory and its parents; "dir/name"
 * (malloc'd, NULL when out of memory). */
int router_mkdir_p(const char *path, strata_err *err);
char *router_path_join(const char *dir, const char *name);
/* The engine key range [lo, hi) of a partition (table id | key hash), and the count of
 * its items and value bytes in the engine (for ItemCount / TableSizeBytes). */
void router_partition_bounds(const partition_desc *p, uint8_t lo[12], uint8_t hi[12]);
struct lsm;
int router_count_partition(struct lsm *engine, const partition_desc *p, partition_stats *out,
                           strata_err *err);

/* Capacity (router.h, "Capacity"), the same on one node and in a cluster: admission of
 * an operation on a partition of table `t` (NULL: admitted; the caller reports the
 * missing table) with `n_local` of its partitions served here; the charge of a read that
 * ran (units from bytes_read, the hot-key sample from a GET's or Query's partition key);
 * the default router_ops.write_units. */
#include "cluster/capacity.h"
int router_admit(capacity *cap, const table_info *t, uint64_t partition_id, uint32_t n_local,
                 cap_kind k, int64_t reserve_nano, uint64_t now_ms, strata_err *err);
/* Reservations (capacity_admit): a write's estimate from its command's length (about the
 * item's size for a put), a read's minimum (1 unit strong, 0.5 eventual). */
int64_t router_write_reserve(size_t cmd_len);
int64_t router_read_reserve(const partition_read_req *req);
int router_admit_read(capacity *cap, const table_info *t, uint64_t partition_id, uint32_t n_local,
                      const partition_read_req *req, uint64_t now_ms, strata_err *err);
void router_charge_read(capacity *cap, uint64_t partition_id, const partition_read_req *req,
                        const partition_read_res *res, uint64_t now_ms);
uint64_t router_default_write_units(const uint8_t *result, size_t len);
capacity *rcluster_capacity(rcluster *c);

rcluster *rcluster_open(const router_config *cfg, strata_err *err);
void rcluster_close(rcluster *c);
const catalog *rcluster_catalog(const rcluster *c);
int rcluster_catalog_write(rcluster *c, const uint8_t *rec, size_t len, router_cb cb, void *ctx,
                           strata_err *err);
int rcluster_write(rcluster *c, uint32_t table_id, uint64_t hash, const uint8_t *cmd, size_t len,
                   router_cb cb, void *ctx, strata_err *err);
int rcluster_read(rcluster *c, uint32_t table_id, uint64_t partition_id,
                  const partition_read_req *req, arena *a, router_read_cb cb, void *ctx,
                  strata_err *err);
void rcluster_sync_catalog(rcluster *c, router_sync_cb cb, void *ctx);
partition_stats rcluster_table_stats(const rcluster *c, uint32_t table_id);
size_t rcluster_inflight(const rcluster *c);
bool rcluster_ready(const rcluster *c);
bool rcluster_storage_failed(const rcluster *c, strata_err *why);
bool rcluster_refused(const rcluster *c, strata_err *why);
size_t rcluster_hand_off(rcluster *c, size_t *handed);
int rcluster_set_peer_secrets(rcluster *c, const rpc_secrets *s, strata_err *err);
struct wal;
/* Whether the node's log or engine (either may be NULL) has failed; the first error in why. */
bool router_log_or_engine_failed(const struct wal *log, const struct lsm *engine, strata_err *why);
void rcluster_status_json(rcluster *c, buf *out);
void rcluster_digests_json(rcluster *c, buf *out);
int rcluster_split(rcluster *c, uint64_t partition_id, bool has_hash, uint64_t hash, router_cb cb,
                   void *ctx, strata_err *err);
int rcluster_node_state(rcluster *c, uint64_t node, const char *state, router_cb cb, void *ctx,
                        strata_err *err);
int rcluster_rebalance_leaders(rcluster *c, router_cb cb, void *ctx, strata_err *err);

#endif
