#ifndef STRATA_NODE_CLI_TABLE_STATS_H
#define STRATA_NODE_CLI_TABLE_STATS_H
/*
 * `strata table stats NAME`: a table's capacity figures (cluster/capacity.h) from GET
 * /admin/table-stats/NAME. Every node counts only the partitions it serves, so in a
 * cluster the command asks every node (the addresses from GET /admin/cluster, 2 s each)
 * and sums; a node that does not answer is named and left out.
 *
 * Output: a line with the table, its billing mode and provisioned units; a line with the
 * consumed units, throttle events and throttled requests summed over the nodes; then one
 * row per partition and node: consumed read and write units, throttle events, and the
 * hot key (the hash of a partition key taking at least half of the partition's sampled
 * units, and its share) or "-".
 */
#include <stdint.h>
#include <stdio.h>

#include "storage/base/err.h"

/* One node's /admin/table-stats body (NUL-terminated), or NULL when it did not answer. */
typedef struct {
    uint64_t node_id;
    const char *json;
} cli_table_view;

/* Prints the figures of `n` views (n >= 1; views[0] is the node asked first).
 * ERR_CORRUPT when no view holds the expected JSON. */
int cli_table_stats_print(const cli_table_view *views, size_t n, FILE *out, strata_err *err);

/* The command: asks the node at `endpoint` (a URL or HOST:PORT) and, in a cluster, every
 * other node; prints as above. Returns a CLI_EXIT_* code (cli.h). */
int cli_table_stats(const char *endpoint, const char *table, int timeout_ms, FILE *out,
                    FILE *errout);

#endif
