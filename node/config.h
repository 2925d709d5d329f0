#ifndef STRATA_NODE_CONFIG_H
#define STRATA_NODE_CONFIG_H
/*
 * stratad's configuration: a file of `key = value` lines (--config FILE) and command-line
 * flags, flags overriding the file. Every key has a flag of the same name with '-' for '_'
 * (node_id -> --node-id); both "--flag value" and "--flag=value" are accepted.
 *
 *   node_id            1..2^63, this node's id in the cluster                    (cluster)
 *   az                 availability zone name, [A-Za-z0-9._-]{1,63}               (cluster)
 *   host_label         the machine, [A-Za-z0-9._-]{1,255}; default: the hostname  (cluster)
 *   data_dir           where the engine and the log live                          (required)
 *   listen             client address HOST:PORT, default 127.0.0.1:8000 (port 0 picks one)
 *   peer_listen        peer (replication) address HOST:PORT                       (cluster)
 *   advertise          client address others use; default: listen
 *   peer_advertise     peer address others use; default: peer_listen              (cluster)
 *   join               peers to join, comma-separated HOST:PORT list (at most 32) (cluster)
 *   bootstrap          true for the first node of a new cluster (no join)         (cluster)
 *   bootstrap_expect   meta voters the bootstrap node waits for, 1..5 (default 3)  (cluster)
 *   replace_after      seconds a node may stay DOWN before its replicas are re-created
 *                      elsewhere, 1..604800 (default 300; read by the meta leader) (cluster)
 *   peer_secret_file   a file holding the cluster's peer secret: every peer connection
 *                      proves, both ways, that it knows it (rpc/rpc.h, Authentication).
 *                      All nodes need the same one; a second line while it is replaced.
 *                      Read by config_read_peer_secrets, again on SIGHUP          (cluster)
 *   peer_secret_optional  true: with peer_secret_file, also take peers that have no
 *                      secret (unauthenticated links), to turn authentication on in a
 *                      running cluster one restart at a time (rpc/rpc.h). Default false
 *                                                                               (cluster)
 *   initial_partitions partitions of a new table, 1..256 (default 4)
 *   throttle           true: tables get DynamoDB's capacity limits and throttling
 *                      (ProvisionedThroughputExceededException); false: consumed capacity
 *                      is still counted and reported, nothing is refused, as in DynamoDB
 *                      Local (benchmarks against peers that never throttle). Default true
 *   partition_max_rcu  per-partition ceilings, units per second, 1..1000000 (default 3000
 *   partition_max_wcu  and 1000, DynamoDB's); lower ones scale split tests down
 *   split_size_mb      a partition whose data reaches this many MiB is split, 0..16777216
 *                      (0: never; default 10240, DynamoDB's 10 GB)       (read in a cluster)
 *   split_heat         a partition hot this many seconds in a row (consumption at 80% of its
 *                      ceiling, or refused by it) is split, 0..86400 (0: never; default 5)
 *                                                                        (read in a cluster)
 *   background_cpu_pct the share of one CPU, in percent, the engine's flushes and compactions
 *                      take while nothing waits for them, 1..100 (default 20; 100: never
 *                      paced; see storage/lsm/lsm.h, Pacing)
 *   log_hold_ops       when a batch of the log has been synced and this many operations
 *                      already wait, the next batch waits 1 ms to gather more, 0..1000000
 *                      (0: never; default 12; see storage/wal/wal.h, Group commit)
 *   max_connections    open client connections, 1..1000000 (default 10000); further ones
 *                      are accepted and closed at once. Lowered at start when the open-file
 *                      limit cannot make room for them (config_plan_fds)
 *   region             region in ARNs, [A-Za-z0-9-]{1,63} (default us-east-1)
 *   log_level          error | warn | info | debug (default info)
 * Flags only: --config FILE, --print-config, --help.
 *
 * Once a cluster setting is given the node is configured for a cluster, and then node_id, az,
 * peer_listen and exactly one of join / bootstrap are required; an advertise address is required
 * when its listen address is a wildcard (0.0.0.0, ::) or has port 0. Advertised and joined
 * addresses must be dialable: a non-wildcard host and a port in 1..65535.
 *
 * File syntax: one `key = value` per line; blank lines and lines starting with '#' are
 * ignored; an unquoted value ends at '#' (a trailing comment) and is trimmed; a value may
 * be double-quoted, with \" and \\ escapes. Unknown or repeated keys are errors.
 *
 * Errors are ERR_VALIDATION with a message naming the source: "FILE:LINE: key 'k': why" for
 * a file, "--flag: why" for a flag, "FILE: missing required key 'k'" for a missing value.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "storage/base/err.h"

typedef enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

typedef enum {
    CFG_NODE_ID = 0,
    CFG_AZ,
    CFG_HOST_LABEL,
    CFG_DATA_DIR,
    CFG_LISTEN,
    CFG_PEER_LISTEN,
    CFG_ADVERTISE,
    CFG_PEER_ADVERTISE,
    CFG_JOIN,
    CFG_BOOTSTRAP,
    CFG_BOOTSTRAP_EXPECT,
    CFG_REPLACE_AFTER,
    CFG_PEER_SECRET_FILE,
    CFG_PEER_SECRET_OPTIONAL,
    CFG_INITIAL_PARTITIONS,
    CFG_THROTTLE,
    CFG_PARTITION_MAX_RCU,
    CFG_PARTITION_MAX_WCU,
    CFG_SPLIT_SIZE,
    CFG_SPLIT_HEAT,
    CFG_BACKGROUND_CPU,
    CFG_LOG_HOLD_OPS,
    CFG_MAX_CONNECTIONS,
    CFG_REGION,
    CFG_LOG_LEVEL,
    CFG_KEY_COUNT
} config_key;

#define CONFIG_JOIN_MAX    32
#define CONFIG_NODE_ID_MAX (UINT64_C(1) << 63)

typedef struct {
    char host[256]; /* without brackets for IPv6; "" when unset */
    int port;
} config_addr;

typedef struct {
    uint64_t node_id; /* 0: not set */
    char az[64];
    char host_label[256];
    char data_dir[4096];
    config_addr listen;
    config_addr peer_listen;
    config_addr advertise;      /* "" when not given and listen is not dialable */
    config_addr peer_advertise; /* after config_validate: set when peer_listen is */
    config_addr join[CONFIG_JOIN_MAX];
    int join_count;
    bool bootstrap;
    int bootstrap_expect;
    uint32_t replace_after_s;
    char peer_secret_file[4096]; /* "" when not given */
    bool peer_secret_optional;
    int initial_partitions;
    bool throttle;
    uint32_t partition_max_rcu, partition_max_wcu;
    uint32_t split_size_mb; /* 0: no split for size */
    uint32_t split_heat_s;  /* 0: no split for heat */
    uint32_t background_cpu_pct;
    uint32_t log_hold_ops; /* 0: never held */
    uint32_t max_connections;
    log_level level;
    char region[64];

    /* Where each key's value came from: 0 default, > 0 line of the file, -1 a flag. */
    int source[CFG_KEY_COUNT];
    char config_file[4096]; /* "" when no --config */
    bool help;              /* --help was given */
    bool print_config;      /* --print-config was given */
} stratad_config;

/* Defaults, --config file, flags, then config_validate(). On --help only `help` is set. */
int config_parse(int argc, char **argv, stratad_config *cfg, strata_err *err);

/* The building blocks of config_parse, for tests and tools. */
void config_defaults(stratad_config *cfg);
/* Applies the `key = value` text of a file named `name` (for messages) over `cfg`. */
int config_apply_text(stratad_config *cfg, const char *name, const char *text, size_t len,
                      strata_err *err);
int config_apply_file(stratad_config *cfg, const char *path, strata_err *err);
/* Required keys, cross-key rules; fills the default advertise addresses and host_label. */
int config_validate(stratad_config *cfg, strata_err *err);

/*
 * Reads the peer secrets from `path`: one line, the cluster's secret, or two while it is
 * replaced (the node proves with the first and takes either: rpc/rpc.h, Replacing the
 * secret). The file must be a regular file that neither its group nor others may read or
 * write (as ssh wants of a private key: a secret lets anyone in the cluster's peer port),
 * and each line hold CONFIG_PEER_SECRET_MIN to CONFIG_PEER_SECRET_MAX bytes once trailing
 * whitespace is cut; blank lines do not count. ERR_VALIDATION says which rule failed,
 * ERR_IO that the file cannot be read; `out` is then empty (count 0). `head -c 32
 * /dev/urandom | base64 > FILE` makes a secret.
 */
#define CONFIG_PEER_SECRET_MIN 16
#define CONFIG_PEER_SECRET_MAX 4096
#define CONFIG_PEER_SECRETS    2
typedef struct {
    uint8_t key[CONFIG_PEER_SECRETS][CONFIG_PEER_SECRET_MAX];
    size_t len[CONFIG_PEER_SECRETS];
    int count;
} config_peer_secrets;

int config_read_peer_secrets(const char *path, config_peer_secrets *out, strata_err *err);
/* Wipes `s` (secrets do not linger in freed or reused memory). */
void config_peer_secrets_wipe(config_peer_secrets *s);

/* Writes the effective configuration in file syntax; it parses back to the same values. */
void config_print(const stratad_config *cfg, FILE *f);
void config_usage(FILE *f);

/*
 * The open-file budget, planned once at start from the process's RLIMIT_NOFILE (soft,
 * hard; RLIM_INFINITY is UINT64_MAX) and the configured max_connections. Client
 * connections must never take the descriptors the node needs for itself: the engine's
 * tables, the log's segments and peer connections (CONFIG_FD_RESERVE). Without the
 * reserve, a client holding a thousand connections under a default limit of 1024 makes the
 * next table file fail to open, and the node stops (its storage has failed).
 *
 * The soft limit is raised towards max_connections + CONFIG_FD_RESERVE, never above the
 * hard limit and never lowered. If that does not fit, client connections are capped at
 * the limit minus the reserve, or at half the limit when the limit is below twice the
 * reserve (a small max_connections may fit in that half), and `reduced` is set when the
 * cap is below max_connections (stratad says so at start).
 */
#define CONFIG_FD_RESERVE 1280

typedef struct {
    uint64_t soft;            /* the soft limit to set: >= the current one */
    uint32_t max_connections; /* client connections to allow: >= 1 */
    bool reduced;             /* below the configured max_connections */
} config_fd_plan;

config_fd_plan config_plan_fds(uint64_t soft, uint64_t hard, uint32_t max_connections);

const char *config_key_name(config_key k);
bool config_is_cluster_key(config_key k);
/* True when any cluster setting was given (not merely defaulted). */
bool config_cluster_mode(const stratad_config *cfg);
/* Comma-separated names of the cluster settings given, into buf (truncated to cap). */
void config_cluster_keys_given(const stratad_config *cfg, char *buf, size_t cap);

/* Parses "host:port", "[v6]:port" or ":port" (host 0.0.0.0); 0 or -1. */
int config_parse_listen(const char *s, char *host, size_t host_cap, int *port);
/* True for 0.0.0.0, :: and "" (any address). */
bool config_host_is_wildcard(const char *host);

#endif
