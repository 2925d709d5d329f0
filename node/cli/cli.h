#ifndef STRATA_NODE_CLI_CLI_H
#define STRATA_NODE_CLI_CLI_H
/*
 * The `strata` command-line tool.
 *
 *   strata [--endpoint URL|HOST:PORT] [--timeout MS] COMMAND
 *     health                  GET / on the node; prints "ok" when it answers 2xx
 *     version                 prints the tool's version
 *     cluster status [--all]  GET /admin/cluster, printed as tables (cluster_status.h);
 *                             --all also asks every other node (2 s each) for the state
 *                             of its own replicas
 *     table stats NAME        a table's capacity figures per partition, summed over the
 *                             nodes (table_stats.h)
 *     node drain|remove|activate ID
 *                             POST /admin/node-state {"node": ID, "state": ...}
 *     leader rebalance        POST /admin/rebalance-leaders {}: balanced leader hints now
 *                             (the scheduler also keeps them balanced); prints how many
 *                             hints moved; partition leaders follow within seconds
 *
 * The endpoint defaults to $STRATA_ENDPOINT, else http://127.0.0.1:8000; a bare HOST:PORT
 * means http://HOST:PORT. Exit codes: 0 success; 1 the node answered but is unhealthy
 * (non-2xx, or for cluster status: not ready or not /admin/cluster JSON); 2 the node could
 * not be reached or did not answer in time; 64 usage error.
 * A node joins by starting with --join (no command).
 */
#include <stdio.h>

#define CLI_EXIT_OK          0
#define CLI_EXIT_UNHEALTHY   1
#define CLI_EXIT_UNREACHABLE 2
#define CLI_EXIT_USAGE       64

/* Runs the tool with its output on `out` and diagnostics on `errout`; returns the exit code. */
int strata_cli_main(int argc, char **argv, FILE *out, FILE *errout);

#endif
