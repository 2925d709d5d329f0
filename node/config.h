#ifndef STRATA_NODE_CONFIG_H
#define STRATA_NODE_CONFIG_H
/*
 * stratad's command line:
 *   --listen HOST:PORT        client address (default 127.0.0.1:8000; port 0 picks one)
 *   --data-dir DIR            where the engine and the log live (required)
 *   --initial-partitions N    partitions of a new table, 1..256 (default 4)
 *   --log-level LEVEL         error | warn | info | debug (default info)
 *   --region NAME             region in ARNs (default us-east-1)
 * Both "--flag value" and "--flag=value" are accepted.
 */
#include <stdbool.h>
#include <stdio.h>

#include "storage/base/err.h"

typedef enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

typedef struct {
    char host[256];
    int port;
    char data_dir[4096];
    int initial_partitions;
    log_level level;
    char region[64];
    int help; /* --help was given */
} stratad_config;

/* Fills `cfg` from argv; ERR_VALIDATION with a message naming the bad flag. */
int config_parse(int argc, char **argv, stratad_config *cfg, strata_err *err);
void config_usage(FILE *f);

/* Parses "host:port", "[v6]:port" or ":port"; 0 or -1. */
int config_parse_listen(const char *s, char *host, size_t host_cap, int *port);

#endif
