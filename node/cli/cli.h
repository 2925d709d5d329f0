#ifndef STRATA_NODE_CLI_CLI_H
#define STRATA_NODE_CLI_CLI_H
/*
 * The `strata` command-line tool.
 *
 *   strata [--endpoint URL] [--timeout MS] COMMAND
 *     health    GET / on the node; prints "ok" when it answers 2xx
 *     version   prints the tool's version
 *
 * The endpoint defaults to $STRATA_ENDPOINT, else http://127.0.0.1:8000.
 * Exit codes: 0 success; 1 the node answered but is unhealthy (non-2xx);
 * 2 the node could not be reached or did not answer in time; 64 usage error.
 */
#include <stdio.h>

#define CLI_EXIT_OK          0
#define CLI_EXIT_UNHEALTHY   1
#define CLI_EXIT_UNREACHABLE 2
#define CLI_EXIT_USAGE       64

/* Runs the tool with its output on `out` and diagnostics on `errout`; returns the exit code. */
int strata_cli_main(int argc, char **argv, FILE *out, FILE *errout);

#endif
