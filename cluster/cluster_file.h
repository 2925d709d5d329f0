#ifndef STRATA_CLUSTER_CLUSTER_FILE_H
#define STRATA_CLUSTER_CLUSTER_FILE_H
/*
 * The cluster file (DATA_DIR/cluster): what a node needs to find its cluster again when
 * it restarts, before its map is known. router_cluster.c writes it atomically whenever it
 * changes (a temporary file, fsync, rename, fsync of the directory) and reads it at start;
 * a damaged one is written again from the cluster when the node starts with --join.
 * Text, one item a line:
 *
 *   strata-cluster 1
 *   members LIST        the meta voters to ask for the map: those the group formed with,
 *                       then those the map names
 *   nodes LIST          (optional) up to CLUSTER_FILE_MAX_NODES other nodes of the map,
 *                       asked when no member answers: the whole group may have moved
 *                       while this node was away
 *   meta joined         (optional) this node's meta replica must not bootstrap at a
 *                       restart: it joined the group after it formed, or the file was
 *                       written again from a join answer after it was found damaged
 *   xxh3 HEX            XXH3-64 of every byte before this line, 16 lowercase hex digits
 *
 * LIST: "ID@HOST:PORT,..." with ids > 0 and addresses of 1..META_ADDR_MAX printable
 * bytes without ',' or ' '. The answer to a join (MSG_JOIN) is a LIST too. Unknown lines
 * are skipped, so a later build can add some; builds before 2026-12-06 write no "nodes"
 * line and skip it. Pure: no I/O.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/meta.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"

#define CLUSTER_FILE_MAX_MEMBERS META_MAX_MEMBERS
#define CLUSTER_FILE_MAX_NODES   16
#define CLUSTER_FILE_MAX_BYTES   8192 /* both lists full with the longest addresses fit */

typedef struct {
    uint64_t id;
    char addr[META_ADDR_MAX + 1];
} cluster_node_addr;

typedef struct {
    cluster_node_addr members[CLUSTER_FILE_MAX_MEMBERS];
    size_t n_members; /* >= 1 */
    cluster_node_addr nodes[CLUSTER_FILE_MAX_NODES];
    size_t n_nodes;
    bool meta_joined;
} cluster_file;

/* Appends the file's text (out->failed on out of memory). */
void cluster_file_encode(const cluster_file *f, buf *out);

/* Reads the file's text. -1 with ERR_CORRUPT when it is damaged: over
 * CLUSTER_FILE_MAX_BYTES, another header, a checksum that does not match, no "members"
 * line or two, a malformed list, bytes after the checksum line. */
int cluster_file_decode(const char *text, size_t len, cluster_file *out, strata_err *err);

/* Appends list[0..n) as a LIST. */
void cluster_node_list_encode(const cluster_node_addr *list, size_t n, buf *out);

/* Reads a LIST of 1..max entries into out[0..*n) (out untouched on failure). -1 with
 * ERR_CORRUPT when it is malformed, empty or longer. */
int cluster_node_list_decode(const char *text, size_t len, cluster_node_addr *out, size_t max,
                             size_t *n, strata_err *err);

#endif
