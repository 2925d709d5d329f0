/*
 * stratad: one Strata node. Opens the router (engine + log, recovering both), serves the
 * DynamoDB API over HTTP, and shuts down cleanly on SIGTERM / SIGINT. SIGHUP reads the
 * peer secret file again.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "cluster/capacity.h"
#include "cluster/partition.h"
#include "cluster/router.h"
#include "node/api.h"
#include "node/config.h"
#include "node/http/http.h"
#include "rpc/rpc.h"

typedef struct {
    uv_loop_t *loop;
    http_server *http;
    uv_signal_t sigterm, sigint;
    uv_signal_t sighup;           /* reads the peer secret file again */
    const char *peer_secret_file; /* NULL: none */
    bool peer_secret_optional;    /* peers without the secret are taken too */
    uv_timer_t storage_check;
    uv_timer_t hand_off;
    uint64_t hand_off_start;
    router *r;
    bool replicated; /* cluster mode */
    bool stopping;
    bool handed_off; /* the leadership of its groups has left the node, or the wait ended */
    log_level level;
    uint32_t max_connections;  /* client connections allowed (config_plan_fds) */
    uint64_t refused_reported; /* connections refused, as of the last report */
    uint64_t refused_report_ms;
} node;

/* How often the node checks that its log and engine still work. */
#define STORAGE_CHECK_MS 200
/* Refused client connections are reported at most this often. */
#define REFUSED_REPORT_MS 10000
/* A stopping node hands its leadership over (router_hand_off) before it goes: it looks
 * every HAND_OFF_POLL_MS whether that is done, and waits at most HAND_OFF_MAX_MS (the core
 * gives a transfer up after an election timeout, 1 s; the next call starts another). */
#define HAND_OFF_POLL_MS 5
#define HAND_OFF_MAX_MS  1500

/* ItemCount / TableSizeBytes bookkeeping from a write's result. */
static void result_stats(const uint8_t *result, size_t len, partition_stats *delta)
{
    partition_result_delta(result, len, &delta->item_count, &delta->size_bytes);
}

/* The router's cluster configuration, with the strings it points to. */
typedef struct {
    router_cluster_config rc;
    char client[300], peer[300];
    char join_text[CONFIG_JOIN_MAX][300];
    const char *join[CONFIG_JOIN_MAX];
    config_peer_secrets peer_secrets;
} cluster_settings;

_Static_assert(CONFIG_PEER_SECRET_MIN == RPC_SECRET_MIN &&
                   CONFIG_PEER_SECRET_MAX == RPC_SECRET_MAX &&
                   CONFIG_PEER_SECRETS == RPC_SECRETS_MAX,
               "the configuration accepts the peer secrets rpc/ accepts");

/* rpc/'s view of the secrets read from the file (pointing into `ps`). */
static rpc_secrets rpc_secrets_of(const config_peer_secrets *ps, bool optional)
{
    rpc_secrets rs = {.count = (size_t)ps->count, .optional = optional};
    for (int i = 0; i < ps->count; i++) {
        rs.key[i] = ps->key[i];
        rs.len[i] = ps->len[i];
    }
    return rs;
}

static void addr_text(char *out, size_t cap, const config_addr *a)
{
    if (strchr(a->host, ':') != NULL)
        snprintf(out, cap, "[%s]:%d", a->host, a->port);
    else
        snprintf(out, cap, "%s:%d", a->host, a->port);
}

static int cluster_settings_fill(cluster_settings *cs, const stratad_config *cfg, strata_err *err)
{
    memset(cs, 0, sizeof *cs);
    addr_text(cs->client, sizeof cs->client, &cfg->advertise);
    addr_text(cs->peer, sizeof cs->peer, &cfg->peer_advertise);
    for (int i = 0; i < cfg->join_count; i++) {
        addr_text(cs->join_text[i], sizeof cs->join_text[i], &cfg->join[i]);
        cs->join[i] = cs->join_text[i];
    }
    cs->rc = (router_cluster_config){
        .node_id = cfg->node_id,
        .az = cfg->az,
        .host_label = cfg->host_label,
        .client_addr = cs->client,
        .peer_listen_host = cfg->peer_listen.host,
        .peer_listen_port = cfg->peer_listen.port,
        .peer_addr = cs->peer,
        .bootstrap = cfg->bootstrap,
        .bootstrap_expect = cfg->bootstrap_expect,
        .replace_after_ms = (uint64_t)cfg->replace_after_s * 1000,
        .split_size_bytes = (uint64_t)cfg->split_size_mb << 20,
        .split_heat_ms = (uint64_t)cfg->split_heat_s * 1000,
        .background_cpu_pct = (int)cfg->background_cpu_pct,
        .log_hold_ops = cfg->log_hold_ops,
        .join = cs->join,
        .n_join = (size_t)cfg->join_count,
    };
    /* A knob for tests: small memtables make the engine flush, and logs compact, early. */
    const char *mt = getenv("STRATA_MEMTABLE_BYTES");
    if (mt != NULL)
        cs->rc.memtable_bytes = (size_t)strtoull(mt, NULL, 10);
    /* A test hook: see router_cluster_config.test_exit_on_split. */
    const char *ex = getenv("STRATA_TEST_EXIT_ON_SPLIT");
    cs->rc.test_exit_on_split = ex != NULL && strcmp(ex, "1") == 0;
    /* A test hook: see router_cluster_config.test_seed_abandons. */
    const char *sa = getenv("STRATA_TEST_SEED_ABANDON");
    if (sa != NULL)
        cs->rc.test_seed_abandons = (unsigned)strtoul(sa, NULL, 10);
    /* A test hook: see router_cluster_config.test_exit_mid_copy. */
    const char *mc = getenv("STRATA_TEST_EXIT_MID_COPY");
    cs->rc.test_exit_mid_copy = mc != NULL && strcmp(mc, "1") == 0;
    /* A test hook: see router_cluster_config.test_meta_format. */
    const char *mf = getenv("STRATA_TEST_META_FORMAT");
    unsigned long f = mf != NULL ? strtoul(mf, NULL, 10) : 0;
    cs->rc.test_meta_format = f <= UINT8_MAX ? (uint8_t)f : 0;
    if (cfg->peer_secret_file[0] == '\0')
        return 0;
    if (config_read_peer_secrets(cfg->peer_secret_file, &cs->peer_secrets, err) < 0)
        return -1;
    cs->rc.peer_secrets = rpc_secrets_of(&cs->peer_secrets, cfg->peer_secret_optional);
    return 0;
}

/* In a cluster the router's own handles (peer connections, Raft timers) keep the loop
 * alive: stop it once the HTTP server is down and the leadership handed over;
 * router_close finishes their work. */
static void stop_when_done(node *n)
{
    if (n->http == NULL && n->handed_off)
        uv_stop(n->loop);
}

static void on_http_stopped(void *data)
{
    node *n = data;
    n->http = NULL;
    stop_when_done(n);
}

static void on_hand_off(uv_timer_t *t)
{
    node *n = t->data;
    size_t handed;
    size_t left = router_hand_off(n->r, &handed);
    uint64_t waited = uv_now(n->loop) - n->hand_off_start;
    if (left > 0 && waited < HAND_OFF_MAX_MS)
        return;
    uv_timer_stop(t);
    /* Also when none was handed (the others stopping too, say): how long the wait took. */
    if (handed > 0 || n->replicated)
        fprintf(stderr,
                "stratad: handed the leadership of %zu Raft groups to other nodes in %llu ms\n",
                handed, (unsigned long long)waited);
    if (left > 0)
        fprintf(stderr,
                "stratad: %zu Raft groups not handed over in time: their followers elect a "
                "leader once this node is gone\n",
                left);
    n->handed_off = true;
    stop_when_done(n);
}

/* Connections refused at max_connections are closed at once, which a client sees only as
 * a reset: the operator hears of them here. */
static void report_refusals(node *n)
{
    if (n->http == NULL || n->level < LOG_WARN)
        return;
    http_server_stats st;
    http_server_get_stats(n->http, &st);
    uint64_t now = uv_now(n->loop);
    if (st.connections_refused == n->refused_reported ||
        now - n->refused_report_ms < REFUSED_REPORT_MS)
        return;
    fprintf(stderr, "stratad: refused %llu client connections: %llu open, max_connections is %u\n",
            (unsigned long long)(st.connections_refused - n->refused_reported),
            (unsigned long long)st.connections_open, n->max_connections);
    n->refused_reported = st.connections_refused;
    n->refused_report_ms = now;
}

/* Applies config_plan_fds before anything opens a file. */
static void plan_open_files(node *n, const stratad_config *cfg)
{
    struct rlimit rl;
    n->max_connections = cfg->max_connections;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "stratad: getrlimit(RLIMIT_NOFILE): %s\n", strerror(errno));
        return;
    }
    config_fd_plan p = config_plan_fds(rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur,
                                       rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max,
                                       cfg->max_connections);
    if (p.soft != (uint64_t)rl.rlim_cur) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = (rlim_t)p.soft;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            /* Plan again with the limit we have. */
            p = config_plan_fds(was, was, cfg->max_connections);
            rl.rlim_cur = was;
        }
    }
    n->max_connections = p.max_connections;
    if (p.reduced && cfg->level >= LOG_WARN)
        fprintf(stderr,
                "stratad: the open-file limit is %llu (hard limit %llu): serving at most %u "
                "client connections, not max_connections %u, so that the engine, the log and "
                "the peers keep %llu (raise the limit: ulimit -n, or LimitNOFILE=)\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, p.max_connections,
                cfg->max_connections, (unsigned long long)(p.soft - p.max_connections));
}

/*
 * A log or engine that failed (an I/O error, the disk full) fails for good: after a
 * failed fdatasync nobody knows what the file holds; a log request refused (a disk too
 * slow for the load) stops its Raft group for good. A node that goes on running then
 * serves no replica, yet looks alive to its peers, so its partitions are never given a
 * third replica elsewhere. It stops as a crash would, which the cluster is built to
 * survive: every acknowledged write is on a majority of replicas, a restart replays the
 * log. The operator sees why, and restarts the node once the disk is fixed. The same
 * timer reports refused client connections.
 */
static void on_storage_check(uv_timer_t *t)
{
    node *n = t->data;
    strata_err why;
    report_refusals(n);
    if (router_refused(n->r, &why)) {
        fprintf(stderr, "stratad: the cluster refused this node: %s\nstratad: stopping now\n",
                why.msg);
        fflush(stdout);
        _exit(1);
    }
    if (!router_storage_failed(n->r, &why))
        return;
    fprintf(stderr,
            "stratad: storage failed: %s: %s\n"
            "stratad: stopping now; restart this node once its disk is fixed (%s)\n",
            strata_code_name(why.code), why.msg,
            n->replicated ? "the other replicas hold every acknowledged write"
                          : "every acknowledged write is in its log");
    fflush(stdout);
    _exit(1);
}

static void on_signal(uv_signal_t *h, int signum)
{
    node *n = h->data;
    (void)signum;
    if (n->stopping)
        return;
    n->stopping = true;
    fprintf(stderr, "stratad: shutting down\n");
    uv_signal_stop(&n->sigterm);
    uv_signal_stop(&n->sigint);
    if (n->http != NULL)
        http_server_stop(n->http, on_http_stopped, n);
    n->hand_off_start = uv_now(n->loop);
    uv_timer_start(&n->hand_off, on_hand_off, 0, HAND_OFF_POLL_MS);
}

/* SIGHUP: the peer secret file again, for the connections made from now on (to replace
 * the cluster's secret node by node: rpc/rpc.h, Replacing the secret). On a bad file the
 * secrets stay as they were. */
static void on_sighup(uv_signal_t *h, int signum)
{
    node *n = h->data;
    (void)signum;
    if (n->peer_secret_file == NULL) {
        fprintf(stderr, "stratad: SIGHUP: no peer secret file to read again\n");
        return;
    }
    if (n->r == NULL) {
        fprintf(stderr, "stratad: SIGHUP: still starting, the peer secret file is read at "
                        "start\n");
        return;
    }
    config_peer_secrets *ps = malloc(sizeof *ps);
    strata_err err;
    int rc = ps != NULL ? 0 : strata_err_set(&err, ERR_NOMEM, "out of memory");
    if (rc == 0)
        rc = config_read_peer_secrets(n->peer_secret_file, ps, &err);
    if (rc == 0) {
        rpc_secrets rs = rpc_secrets_of(ps, n->peer_secret_optional);
        rc = router_set_peer_secrets(n->r, &rs, &err);
    }
    if (rc == 0)
        fprintf(stderr, "stratad: SIGHUP: %d peer secret%s read again from %s\n", ps->count,
                ps->count == 1 ? "" : "s", n->peer_secret_file);
    else
        fprintf(stderr, "stratad: SIGHUP: peer secrets kept as they were: %s\n", err.msg);
    if (ps != NULL) {
        config_peer_secrets_wipe(ps);
        free(ps);
    }
}

int main(int argc, char **argv)
{
    stratad_config cfg;
    strata_err err;
    if (config_parse(argc, argv, &cfg, &err) < 0) {
        /* Configuration errors exit 2, apart from runtime failures (1). */
        fprintf(stderr, "stratad: %s\nstratad: see stratad --help\n", err.msg);
        return 2;
    }
    if (cfg.help) {
        config_usage(stdout);
        return 0;
    }
    if (cfg.print_config) {
        config_print(&cfg, stdout);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);

    node n = {0};
    n.loop = uv_default_loop();
    /* Before anything slow (the router's recovery): SIGHUP's default action ends the
     * process, and a reload sent to a node still starting must not. */
    uv_signal_init(n.loop, &n.sighup);
    n.sighup.data = &n;
    n.peer_secret_file =
        config_cluster_mode(&cfg) && cfg.peer_secret_file[0] != '\0' ? cfg.peer_secret_file : NULL;
    n.peer_secret_optional = cfg.peer_secret_optional;
    uv_signal_start(&n.sighup, on_sighup, SIGHUP);
    uv_unref((uv_handle_t *)&n.sighup);
    n.level = cfg.level;
    plan_open_files(&n, &cfg);
    router_config rc = {
        .loop = n.loop,
        .data_dir = cfg.data_dir,
        .ops = {.apply = partition_apply, .result_stats = result_stats, .read = partition_read},
        .region = cfg.region,
        .background_cpu_pct = (int)cfg.background_cpu_pct,
        .log_hold_ops = cfg.log_hold_ops,
    };
    cluster_settings cs;
    if (config_cluster_mode(&cfg)) {
        if (cluster_settings_fill(&cs, &cfg, &err) < 0) {
            fprintf(stderr, "stratad: %s\n", err.msg);
            return 2;
        }
        rc.cluster = &cs.rc;
    }
    router *r = router_open(&rc, &err);
    /* rpc/ keeps its own copy of the peer secrets. */
    if (rc.cluster != NULL)
        config_peer_secrets_wipe(&cs.peer_secrets);
    if (r == NULL) {
        fprintf(stderr, "stratad: cannot open %s: %s: %s\n", cfg.data_dir,
                strata_code_name(err.code), err.msg);
        return 1;
    }
    capacity_set_enforcing(router_capacity(r), cfg.throttle);
    capacity_set_ceilings(router_capacity(r), cfg.partition_max_rcu, cfg.partition_max_wcu);

    http_server_options ho;
    http_server_options_default(&ho);
    ho.host = cfg.listen.host;
    ho.port = cfg.listen.port;
    ho.handler = api_handle;
    ho.max_connections = n.max_connections;
    api_config ac = {
        .loop = n.loop,
        .router = r,
        .initial_partitions = cfg.initial_partitions,
        .region = cfg.region,
        .log_level = (int)cfg.level,
    };
    char endpoint[300];
    ac.endpoint = endpoint;
    snprintf(endpoint, sizeof endpoint, "%s:%d", cfg.listen.host, cfg.listen.port);
    api_server *api = api_server_new(&ac, &err);
    if (api == NULL) {
        fprintf(stderr, "stratad: %s\n", err.msg);
        router_close(r);
        return 1;
    }
    ho.handler_data = api;
    if (http_server_start(n.loop, &ho, &n.http, &err) < 0) {
        fprintf(stderr, "stratad: cannot listen on %s:%d: %s\n", cfg.listen.host, cfg.listen.port,
                err.msg);
        api_server_free(api);
        router_close(r);
        return 1;
    }
    int port = http_server_port(n.http);
    /* DescribeEndpoints reports the advertised address, else the one actually bound (port 0
     * picks one). */
    if (cfg.advertise.host[0] != '\0')
        snprintf(endpoint, sizeof endpoint, "%s:%d", cfg.advertise.host, cfg.advertise.port);
    else
        snprintf(endpoint, sizeof endpoint, "%s:%d", cfg.listen.host, port);
    api_server_set_endpoint(api, endpoint);

    uv_signal_init(n.loop, &n.sigterm);
    uv_signal_init(n.loop, &n.sigint);
    n.sigterm.data = n.sigint.data = &n;
    uv_signal_start(&n.sigterm, on_signal, SIGTERM);
    uv_signal_start(&n.sigint, on_signal, SIGINT);
    n.r = r;
    n.replicated = rc.cluster != NULL;
    uv_timer_init(n.loop, &n.storage_check);
    n.storage_check.data = &n;
    uv_timer_start(&n.storage_check, on_storage_check, STORAGE_CHECK_MS, STORAGE_CHECK_MS);
    uv_unref((uv_handle_t *)&n.storage_check);
    uv_timer_init(n.loop, &n.hand_off);
    n.hand_off.data = &n;

    if (cfg.level >= LOG_INFO)
        fprintf(stderr, "stratad: data in %s, %d partitions per new table\n", cfg.data_dir,
                cfg.initial_partitions);
    if (rc.cluster != NULL && cfg.level >= LOG_INFO)
        fprintf(stderr, "stratad: node %llu in AZ %s on host %s, peers on %s\n",
                (unsigned long long)cfg.node_id, cfg.az, cfg.host_label, cs.peer);
    /* At every level: a node left optional lets in peers without the secret. */
    if (rc.cluster != NULL && n.peer_secret_optional)
        fprintf(stderr, "stratad: peer secret optional: peers without it are taken too; once "
                        "every node has the secret, restart each without "
                        "--peer-secret-optional\n");
    printf("stratad: serving on http://%s:%d\n", cfg.listen.host, port);
    fflush(stdout);

    uv_run(n.loop, UV_RUN_DEFAULT);

    uv_close((uv_handle_t *)&n.sigterm, NULL);
    uv_close((uv_handle_t *)&n.sigint, NULL);
    uv_close((uv_handle_t *)&n.sighup, NULL);
    uv_close((uv_handle_t *)&n.storage_check, NULL);
    uv_close((uv_handle_t *)&n.hand_off, NULL);
    router_close(r);
    api_server_free(api);
    uv_run(n.loop, UV_RUN_NOWAIT);
    uv_loop_close(n.loop);
    fprintf(stderr, "stratad: stopped\n");
    return 0;
}
