/* The `strata` command-line tool: argument parsing and commands (see cli.h). */
#include "node/cli/cli.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "node/cli/client.h"
#include "node/cli/cluster_status.h"
#include "node/cli/table_stats.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

#define DEFAULT_ENDPOINT   "http://127.0.0.1:8000"
#define DEFAULT_TIMEOUT_MS 5000
#define BODY_ECHO_MAX      200
#define ENDPOINT_MAX       512
#define PEER_TIMEOUT_MS    2000 /* per other node under --all: a dead node must not stall it */
#define PEERS_MAX          4096 /* nodes asked under --all */
#define REMOVE_WAIT_S      60   /* node remove: the longest wait for its last replicas */
#define REMOVE_POLL_MS     200

typedef struct {
    const char *endpoint;
    int timeout_ms;
    int wait_s; /* node remove: --wait */
    const char *command;
    const char *subcommand;
    bool all;            /* cluster status: also ask every other node for its replicas */
    const char *node_id; /* node drain|remove|activate ID; partition split ID */
    const char *hash;    /* partition split ID [HASH] */
    const char *table;   /* table stats NAME */
} cli_args;

static void usage(FILE *f)
{
    fprintf(f, "usage: strata [--endpoint URL|HOST:PORT] [--timeout MS] COMMAND\n"
               "\n"
               "commands:\n"
               "  health                  check that the node answers (GET /); prints ok\n"
               "  version                 print the version of this tool\n"
               "  cluster status [--all]  nodes, partitions, leaders and replica state as the\n"
               "                          node sees them (GET /admin/cluster); --all also asks\n"
               "                          every other node for the state of its replicas\n"
               "  node drain ID           move every replica off node ID (it keeps serving);\n"
               "                          `cluster status` shows its replicas reach 0\n"
               "  node remove ID [--wait S]\n"
               "                          retire node ID once it holds no replica; waits up to\n"
               "                          S seconds (default 60) until the node runs none\n"
               "                          (Raft lets go of it), so that it can be stopped\n"
               "  node activate ID        cancel a drain\n"
               "  leader rebalance        even out partition leaders over the ACTIVE nodes now\n"
               "                          (POST /admin/rebalance-leaders; the cluster also does\n"
               "                          it by itself)\n"
               "  table stats NAME        consumed capacity, throttle events and hot keys of a\n"
               "                          table, per partition, summed over the nodes\n"
               "  partition split ID [HASH]\n"
               "                          split partition ID of the cluster map: the new\n"
               "                          partition gets [HASH, end] (16 hex digits; default:\n"
               "                          the upper half of its range); prints the child's id\n"
               "\n"
               "The endpoint defaults to $STRATA_ENDPOINT, else " DEFAULT_ENDPOINT ".\n"
               "Exit codes: 0 ok, 1 unhealthy (or cluster not ready), 2 unreachable,\n"
               "64 usage error.\n");
}

/* Matches "--name VALUE" or "--name=VALUE"; advances *i past what it used. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] == '\0' && *i + 1 < argc) {
        (*i)++;
        return argv[*i];
    }
    return NULL;
}

static int parse_args(int argc, char **argv, cli_args *args, FILE *errout)
{
    const char *env = getenv("STRATA_ENDPOINT");
    args->endpoint = env && env[0] ? env : DEFAULT_ENDPOINT;
    args->timeout_ms = DEFAULT_TIMEOUT_MS;
    args->wait_s = REMOVE_WAIT_S;
    bool wait_given = false;
    args->command = NULL;
    args->subcommand = NULL;
    args->all = false;
    args->node_id = NULL;
    args->table = NULL;
    args->hash = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            args->command = "help";
        } else if ((v = option_value(argc, argv, &i, "--endpoint")) != NULL) {
            args->endpoint = v;
        } else if ((v = option_value(argc, argv, &i, "--timeout")) != NULL) {
            char *end;
            long ms = strtol(v, &end, 10);
            if (*end != '\0' || ms <= 0 || ms > 3600 * 1000) {
                fprintf(errout, "strata: bad --timeout %s (milliseconds)\n", v);
                return -1;
            }
            args->timeout_ms = (int)ms;
        } else if ((v = option_value(argc, argv, &i, "--wait")) != NULL) {
            char *end;
            long sec = strtol(v, &end, 10);
            if (*end != '\0' || sec < 0 || sec > 24 * 3600) {
                fprintf(errout, "strata: bad --wait %s (seconds)\n", v);
                return -1;
            }
            args->wait_s = (int)sec;
            wait_given = true;
        } else if (strcmp(argv[i], "--all") == 0) {
            args->all = true;
        } else if (argv[i][0] == '-') {
            fprintf(errout, "strata: unknown option %s\n", argv[i]);
            return -1;
        } else if (args->command == NULL) {
            args->command = argv[i];
        } else if (args->subcommand == NULL &&
                   (strcmp(args->command, "cluster") == 0 || strcmp(args->command, "node") == 0 ||
                    strcmp(args->command, "leader") == 0 || strcmp(args->command, "table") == 0 ||
                    strcmp(args->command, "partition") == 0)) {
            args->subcommand = argv[i];
        } else if (args->table == NULL && strcmp(args->command, "table") == 0) {
            args->table = argv[i];
        } else if (args->node_id == NULL && (strcmp(args->command, "node") == 0 ||
                                             strcmp(args->command, "partition") == 0)) {
            args->node_id = argv[i];
        } else if (args->hash == NULL && strcmp(args->command, "partition") == 0) {
            args->hash = argv[i];
        } else {
            fprintf(errout, "strata: unexpected argument %s\n", argv[i]);
            return -1;
        }
    }
    if (args->command == NULL) {
        fprintf(errout, "strata: no command\n");
        return -1;
    }
    if (wait_given && (strcmp(args->command, "node") != 0 || args->subcommand == NULL ||
                       strcmp(args->subcommand, "remove") != 0)) {
        fprintf(errout, "strata: --wait belongs to node remove\n");
        return -1;
    }
    if (args->all && strcmp(args->command, "cluster") != 0) {
        fprintf(errout, "strata: --all belongs to cluster status\n");
        return -1;
    }
    return 0;
}

/* Accepts "http://HOST:PORT[/path]" or a bare "HOST:PORT" (as the other tools print it). */
static int endpoint_parse(const char *endpoint, cli_endpoint *ep, strata_err *err)
{
    if (strstr(endpoint, "://") != NULL)
        return cli_endpoint_parse(endpoint, ep, err);
    char url[ENDPOINT_MAX];
    if ((size_t)snprintf(url, sizeof url, "http://%s", endpoint) >= sizeof url)
        return strata_err_set(err, ERR_VALIDATION, "endpoint %s: too long", endpoint);
    return cli_endpoint_parse(url, ep, err);
}

static int cmd_health(const cli_args *args, FILE *out, FILE *errout)
{
    cli_endpoint ep;
    strata_err err;
    if (endpoint_parse(args->endpoint, &ep, &err) != 0) {
        fprintf(errout, "strata: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    cli_response r;
    if (cli_http_request(&ep, "GET", "/", NULL, 0, NULL, 0, args->timeout_ms, &r, &err) != 0) {
        fprintf(errout, "unreachable: %s: %s\n", args->endpoint, err.msg);
        return CLI_EXIT_UNREACHABLE;
    }
    int code = CLI_EXIT_OK;
    if (r.status >= 200 && r.status < 300) {
        fprintf(out, "ok\n");
    } else {
        fprintf(out, "unhealthy: HTTP %d %s: %.*s\n", r.status, http_status_reason(r.status),
                BODY_ECHO_MAX, r.body);
        code = CLI_EXIT_UNHEALTHY;
    }
    cli_response_free(&r);
    return code;
}

/* The other nodes' answers for --all, gathered one after the other. */
typedef struct {
    cli_cluster_view *views;
    cli_response *bodies;
    size_t n, cap;
    bool failed; /* out of memory */
} peer_views;

static bool peer_views_grow(peer_views *pv)
{
    size_t cap = pv->cap ? pv->cap * 2 : 8;
    if (cap > PEERS_MAX)
        return false;
    cli_cluster_view *v = realloc(pv->views, cap * sizeof *v);
    if (v != NULL)
        pv->views = v;
    cli_response *b = realloc(pv->bodies, cap * sizeof *b);
    if (b != NULL)
        pv->bodies = b;
    if (v == NULL || b == NULL)
        return false;
    pv->cap = cap;
    return true;
}

static void fetch_peer(void *ctx, uint64_t node_id, const char *client_addr)
{
    peer_views *pv = ctx;
    if (pv->failed || (pv->n == pv->cap && !peer_views_grow(pv))) {
        pv->failed = true;
        return;
    }
    cli_cluster_view *v = &pv->views[pv->n];
    cli_response *r = &pv->bodies[pv->n];
    pv->n++;
    v->node_id = node_id;
    v->json = NULL;
    memset(r, 0, sizeof *r);
    cli_endpoint ep;
    if (endpoint_parse(client_addr, &ep, NULL) != 0 ||
        cli_http_request(&ep, "GET", "/admin/cluster", NULL, 0, NULL, 0, PEER_TIMEOUT_MS, r,
                         NULL) != 0)
        return; /* shown as "no answer" in its members' rows */
    if (r->status == 200)
        v->json = r->body;
}

static void peer_views_free(peer_views *pv)
{
    for (size_t i = 0; i < pv->n; i++)
        cli_response_free(&pv->bodies[i]);
    free(pv->views);
    free(pv->bodies);
}

static int print_cluster(const cli_args *args, const char *body, FILE *out, FILE *errout)
{
    strata_err err;
    peer_views pv = {0};
    int rc = 0;
    if (args->all)
        rc = cli_cluster_each_node(body, fetch_peer, &pv, &err);
    if (rc == 0 && pv.failed)
        rc = strata_err_set(&err, ERR_NOMEM, "too many nodes");
    cli_cluster_summary sum;
    if (rc == 0)
        rc = cli_cluster_print(body, pv.views, pv.n, out, &sum, &err);
    peer_views_free(&pv);
    if (rc != 0) {
        fprintf(errout, "strata: %s: %s\n", args->endpoint, err.msg);
        return CLI_EXIT_UNHEALTHY;
    }
    if (!sum.ready) {
        fprintf(errout, "strata: node %" PRIu64 " is not ready (no cluster map or meta leader)\n",
                sum.node_id);
        return CLI_EXIT_UNHEALTHY;
    }
    return CLI_EXIT_OK;
}

/* leader rebalance: POST /admin/rebalance-leaders {}. */
/* POSTs a JSON body to an operators' endpoint (/admin/...). CLI_EXIT_OK with *r filled
 * (any HTTP status: the caller reads it and frees *r), or the exit code of a bad endpoint
 * or an unreachable node, reported on errout. */
static int admin_post(const cli_args *args, const char *path, const char *body, size_t len,
                      cli_response *r, FILE *errout)
{
    cli_endpoint ep;
    strata_err err;
    if (endpoint_parse(args->endpoint, &ep, &err) != 0) {
        fprintf(errout, "strata: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    http_header h = {.name = "Content-Type", .value = "application/x-amz-json-1.0"};
    if (cli_http_request(&ep, "POST", path, &h, 1, body, len, args->timeout_ms, r, &err) != 0) {
        fprintf(errout, "unreachable: %s: %s\n", args->endpoint, err.msg);
        return CLI_EXIT_UNREACHABLE;
    }
    return CLI_EXIT_OK;
}

static int cmd_rebalance(const cli_args *args, FILE *out, FILE *errout)
{
    cli_response r;
    int code = admin_post(args, "/admin/rebalance-leaders", "{}", 2, &r, errout);
    if (code != CLI_EXIT_OK)
        return code;
    const char *moved = r.status == 200 ? strstr(r.body, "\"moved\":") : NULL;
    if (moved == NULL) {
        fprintf(errout, "strata: leader rebalance: HTTP %d: %.*s\n", r.status, BODY_ECHO_MAX,
                r.body);
        code = CLI_EXIT_UNHEALTHY;
    } else {
        unsigned long long n = strtoull(moved + strlen("\"moved\":"), NULL, 10);
        fprintf(out,
                "leader rebalance: %llu leader hint%s moved; partition leaders follow within "
                "seconds (`strata cluster status --all`: leaders per node)\n",
                n, n == 1 ? "" : "s");
    }
    cli_response_free(&r);
    return code;
}

static int cmd_leader(const cli_args *args, FILE *out, FILE *errout)
{
    if (args->subcommand == NULL || strcmp(args->subcommand, "rebalance") != 0) {
        fprintf(errout, "strata: leader needs a subcommand (rebalance)\n");
        usage(errout);
        return CLI_EXIT_USAGE;
    }
    return cmd_rebalance(args, out, errout);
}

static int cmd_cluster(const cli_args *args, FILE *out, FILE *errout)
{
    if (args->subcommand == NULL || strcmp(args->subcommand, "status") != 0) {
        if (args->subcommand == NULL)
            fprintf(errout, "strata: cluster needs a subcommand (status)\n");
        else
            fprintf(errout, "strata: cluster %s: unknown (only cluster status exists)\n",
                    args->subcommand);
        usage(errout);
        return CLI_EXIT_USAGE;
    }
    cli_endpoint ep;
    strata_err err;
    if (endpoint_parse(args->endpoint, &ep, &err) != 0) {
        fprintf(errout, "strata: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    cli_response r;
    if (cli_http_request(&ep, "GET", "/admin/cluster", NULL, 0, NULL, 0, args->timeout_ms, &r,
                         &err) != 0) {
        fprintf(errout, "unreachable: %s: %s\n", args->endpoint, err.msg);
        return CLI_EXIT_UNREACHABLE;
    }
    int code;
    if (r.status != 200) {
        fprintf(errout, "strata: %s: HTTP %d %s: %.*s\n", args->endpoint, r.status,
                http_status_reason(r.status), BODY_ECHO_MAX, r.body);
        code = CLI_EXIT_UNHEALTHY;
    } else {
        code = print_cluster(args, r.body, out, errout);
    }
    cli_response_free(&r);
    return code;
}

/* Asks a node for its own /admin/cluster: which node it is and how many replicas it runs.
 * false when it does not answer with that; *keep (may be NULL) gets the answer to free. */
static bool ask_node(const cli_endpoint *ep, int timeout_ms, uint64_t *node_id, size_t *replicas,
                     cli_response *keep)
{
    cli_response r;
    if (cli_http_request(ep, "GET", "/admin/cluster", NULL, 0, NULL, 0, timeout_ms, &r, NULL) != 0)
        return false;
    bool ok = r.status == 200 && cli_cluster_local_replicas(r.body, node_id, replicas, NULL) == 0;
    if (ok && keep != NULL)
        *keep = r;
    else
        cli_response_free(&r);
    return ok;
}

typedef struct {
    uint64_t id;
    char addr[ENDPOINT_MAX];
    bool found;
} node_addr;

static void match_node(void *ctx, uint64_t node_id, const char *client_addr)
{
    node_addr *na = ctx;
    if (node_id == na->id && strlen(client_addr) < sizeof na->addr) {
        strcpy(na->addr, client_addr);
        na->found = true;
    }
}

/* The client endpoint of node `id`: the one given when it is that node, else the address
 * that node's map entry gives. -1 when neither answers for it. */
static int node_endpoint(const cli_args *args, uint64_t id, cli_endpoint *ep)
{
    uint64_t self;
    size_t ignored;
    cli_response r;
    if (endpoint_parse(args->endpoint, ep, NULL) != 0 ||
        !ask_node(ep, args->timeout_ms, &self, &ignored, &r))
        return -1;
    node_addr na = {.id = id};
    int rc = self == id ? 0 : cli_cluster_each_node(r.body, match_node, &na, NULL);
    cli_response_free(&r);
    if (rc != 0 || self == id)
        return rc;
    return na.found ? endpoint_parse(na.addr, ep, NULL) : -1;
}

/*
 * After `node remove`: the map gives the node no replica, but a replica the map took away
 * runs on, and its Raft group counts it as a voter, until a committed configuration leaves
 * it out. Stopping the node in that window leaves the group four voters, one of them dead:
 * one more failure and it has no majority. So the command waits, asking the node itself,
 * until it runs no replica.
 */
static int wait_replicas_gone(const cli_args *args, uint64_t id, FILE *out, FILE *errout)
{
    cli_endpoint ep;
    if (node_endpoint(args, id, &ep) != 0) {
        fprintf(out,
                "node %" PRIu64 ": REMOVED (its address is not known here: whether it still "
                "runs replicas was not checked)\n",
                id);
        return CLI_EXIT_OK;
    }
    int64_t deadline = cli_mono_ms() + (int64_t)args->wait_s * 1000;
    for (;;) {
        uint64_t self;
        size_t left;
        if (!ask_node(&ep, PEER_TIMEOUT_MS, &self, &left, NULL) || self != id) {
            fprintf(out,
                    "node %" PRIu64 ": REMOVED; it does not answer (its Raft groups leave it out "
                    "without it)\n",
                    id);
            return CLI_EXIT_OK;
        }
        if (left == 0) {
            fprintf(out, "node %" PRIu64 ": REMOVED; it runs no replica and can be stopped\n", id);
            return CLI_EXIT_OK;
        }
        if (cli_mono_ms() >= deadline) {
            fprintf(errout,
                    "strata: node %" PRIu64 ": REMOVED, but after %d s it still runs %zu "
                    "replica%s that Raft may count: stop it once `strata cluster status --all` "
                    "shows no \"(leaving)\" row for it\n",
                    id, args->wait_s, left, left == 1 ? "" : "s");
            return CLI_EXIT_UNHEALTHY;
        }
        struct timespec pause = {.tv_nsec = REMOVE_POLL_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* node drain|remove|activate ID: POST /admin/node-state {"node": ID, "state": ...}. */
static int cmd_node(const cli_args *args, FILE *out, FILE *errout)
{
    static const char *const verbs[][2] = {
        {"drain", "DRAINING"}, {"remove", "REMOVED"}, {"activate", "ACTIVE"}};
    const char *state = NULL;
    for (size_t i = 0; args->subcommand != NULL && i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(args->subcommand, verbs[i][0]) == 0)
            state = verbs[i][1];
    char *end = NULL;
    unsigned long long id = args->node_id ? strtoull(args->node_id, &end, 10) : 0;
    if (state == NULL || id == 0 || *end != '\0') {
        fprintf(errout, "strata: node needs drain|remove|activate and a node id\n");
        usage(errout);
        return CLI_EXIT_USAGE;
    }
    char body[128];
    int n = snprintf(body, sizeof body, "{\"node\":%llu,\"state\":\"%s\"}", id, state);
    cli_response r;
    int code = admin_post(args, "/admin/node-state", body, (size_t)n, &r, errout);
    if (code != CLI_EXIT_OK)
        return code;
    if (r.status != 200) {
        fprintf(errout, "strata: node %s %llu: HTTP %d: %.*s\n", args->subcommand, id, r.status,
                BODY_ECHO_MAX, r.body);
        code = CLI_EXIT_UNHEALTHY;
    } else if (strcmp(state, "REMOVED") == 0) {
        code = wait_replicas_gone(args, id, out, errout);
    } else {
        fprintf(out, "node %llu: %s\n", id, state);
    }
    cli_response_free(&r);
    return code;
}

/* partition split ID [HASH]: POST /admin/split {"partition": ID[, "hash": HASH]}. */
static int cmd_partition(const cli_args *args, FILE *out, FILE *errout)
{
    char *end = NULL;
    unsigned long long id = args->node_id ? strtoull(args->node_id, &end, 10) : 0;
    size_t hl = args->hash ? strlen(args->hash) : 0;
    bool hex_ok = args->hash == NULL ||
                  (hl > 0 && hl <= 16 && strspn(args->hash, "0123456789abcdefABCDEF") == hl);
    if (args->subcommand == NULL || strcmp(args->subcommand, "split") != 0 || id == 0 ||
        *end != '\0' || !hex_ok) {
        fprintf(errout, "strata: partition needs split, a partition id and maybe a hash (hex)\n");
        usage(errout);
        return CLI_EXIT_USAGE;
    }
    char body[128];
    int n = args->hash ? snprintf(body, sizeof body, "{\"partition\":%llu,\"hash\":\"%s\"}", id,
                                  args->hash)
                       : snprintf(body, sizeof body, "{\"partition\":%llu}", id);
    cli_response r;
    int code = admin_post(args, "/admin/split", body, (size_t)n, &r, errout);
    if (code != CLI_EXIT_OK)
        return code;
    if (r.status != 200) {
        fprintf(errout, "strata: partition split %llu: HTTP %d: %.*s\n", id, r.status,
                BODY_ECHO_MAX, r.body);
        code = CLI_EXIT_UNHEALTHY;
    } else {
        fprintf(out, "%.*s\n", BODY_ECHO_MAX, r.body);
    }
    cli_response_free(&r);
    return code;
}

int strata_cli_main(int argc, char **argv, FILE *out, FILE *errout)
{
    cli_args args;
    if (parse_args(argc, argv, &args, errout) != 0) {
        usage(errout);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(args.command, "help") == 0) {
        usage(out);
        return CLI_EXIT_OK;
    }
    if (strcmp(args.command, "version") == 0) {
        fprintf(out, "strata %s\n", STRATA_VERSION);
        return CLI_EXIT_OK;
    }
    if (strcmp(args.command, "health") == 0)
        return cmd_health(&args, out, errout);
    if (strcmp(args.command, "cluster") == 0)
        return cmd_cluster(&args, out, errout);
    if (strcmp(args.command, "partition") == 0)
        return cmd_partition(&args, out, errout);
    if (strcmp(args.command, "node") == 0)
        return cmd_node(&args, out, errout);
    if (strcmp(args.command, "leader") == 0)
        return cmd_leader(&args, out, errout);
    if (strcmp(args.command, "table") == 0) {
        if (args.subcommand == NULL || strcmp(args.subcommand, "stats") != 0 ||
            args.table == NULL) {
            fprintf(errout, "strata: table needs stats and a table name\n");
            usage(errout);
            return CLI_EXIT_USAGE;
        }
        return cli_table_stats(args.endpoint, args.table, args.timeout_ms, out, errout);
    }
    fprintf(errout, "strata: unknown command %s\n", args.command);
    usage(errout);
    return CLI_EXIT_USAGE;
}
