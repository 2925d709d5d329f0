#ifndef STRATA_NODE_CLI_CLUSTER_STATUS_H
#define STRATA_NODE_CLI_CLUSTER_STATUS_H
/*
 * `strata cluster status`: turns the JSON of GET /admin/cluster (cluster/router.h,
 * router_status_json) into readable tables. No sockets here, so the formatting is tested
 * by feeding JSON text (tests/unit/node/test_cli_cluster.c).
 *
 * Output, in this order:
 *   - a header line: the answering node, ready or NOT READY, meta leader and index;
 *   - NODES: id, AZ, host, state, client and peer address, connected (as the answering
 *     node sees them);
 *   - one block per table (ordered by table id; partitions in the answer's order): id,
 *     hash range, epoch, leader, and one row per member with its Raft state (FAILED(..)
 *     when its group stopped on an error, +copying while it installs a snapshot), term,
 *     commit, applied and last index, snapshot index (and how many snapshots it copied
 *     in). A node's /admin/cluster only describes its own replicas ("local"), so a
 *     member's row is filled from that member's own view: the answering node's, plus any
 *     further views the caller fetched (`strata cluster status --all` asks every node). A
 *     member nobody asked shows "-", one that did not answer "no answer", one whose answer
 *     has no replica of the partition "not open". A node whose view still holds a replica
 *     of a partition the map no longer gives it (Raft still counts it until a committed
 *     configuration leaves it out) gets a row of its own, "N (leaving)";
 *   - SUMMARY: nodes up (connected as the answering node sees them, not REMOVED) out of
 *     all, tables, partitions, partitions without leader, partitions whose leader is not
 *     known to the views at hand, leaders per node.
 *
 * A stratad in single-node mode ({"mode":"single"}) prints one line saying so.
 *
 * The leader of a partition is the answer's "leader" (accurate when the answering node is
 * a member, a routing hint otherwise), except that a member reporting itself leader in its
 * own view wins (the highest term if several do). When the map's "leader_hint" (where
 * leader balancing is taking the leadership) names another node, the LEADER cell reads
 * "L (hint H)". "Without leader" needs a member's view
 * naming none; a 0 from a non-member alone counts as "leader unknown".
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "storage/base/err.h"

/* Another node's answer, for `--all`. */
typedef struct {
    uint64_t node_id;
    const char *json; /* its /admin/cluster body (NUL-terminated), or NULL: it did not answer */
} cli_cluster_view;

/* What the formatter learned, for the exit code and for deciding whom to ask. */
typedef struct {
    bool ready;
    uint64_t node_id;
    size_t nodes, nodes_up, tables, partitions;
    size_t leaderless;     /* a member's own view was available and names no leader */
    size_t leader_unknown; /* no member's view, and the answer's hint is empty */
} cli_cluster_summary;

/*
 * Prints the tables for `primary` (the answering node's body, NUL-terminated) and the
 * optional views of other nodes. ERR_CORRUPT when primary is not the expected JSON (a view
 * that is not is treated like one that did not answer); ERR_NOMEM when allocation fails.
 * `sum` may be NULL.
 */
int cli_cluster_print(const char *primary, const cli_cluster_view *views, size_t n_views, FILE *out,
                      cli_cluster_summary *sum, strata_err *err);

/*
 * The client addresses ("HOST:PORT") of every node in `primary` except the answering one,
 * for fetching their views: calls fn(ctx, node_id, addr) for each. ERR_CORRUPT as above.
 */
int cli_cluster_each_node(const char *primary,
                          void (*fn)(void *ctx, uint64_t node_id, const char *client_addr),
                          void *ctx, strata_err *err);

/*
 * The node that answered `body` (its own /admin/cluster answer) and how many replicas it
 * still runs: partitions of the map with a "local" part, and the meta group's when it is
 * a "meta_voter". After `node remove`, each is one its Raft group may still count as a
 * voter until a committed configuration leaves the node out ("lingering"). ERR_CORRUPT
 * when body is not the expected JSON.
 */
int cli_cluster_local_replicas(const char *body, uint64_t *node_id, size_t *n, strata_err *err);

#endif
