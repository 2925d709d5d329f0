/* `strata table stats NAME` (see table_stats.h). */
#include "node/cli/table_stats.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "node/cli/cli.h"
#include "node/cli/client.h"
#include "node/cli/cluster_status.h"

#define PEER_TIMEOUT_MS 2000
#define NODES_MAX       4096
#define URL_MAX         512
#define PATH_MAX_LEN    (64 + 255)

typedef struct {
    double read, write;
    json_int_t read_throttles, write_throttles, throttled_requests;
} totals;

static double num(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);
    if (b != NULL)
        v = json_object_get(v, b);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static void add_totals(const json_t *o, totals *t)
{
    t->read += num(o, "consumed", "read");
    t->write += num(o, "consumed", "write");
    t->read_throttles += (json_int_t)num(o, "read_throttle_events", NULL);
    t->write_throttles += (json_int_t)num(o, "write_throttle_events", NULL);
    t->throttled_requests += (json_int_t)num(o, "throttled_requests", NULL);
}

static void print_partitions(const json_t *o, uint64_t node, FILE *out)
{
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(o, "partitions"), i, p)
    {
        const json_t *hot = json_object_get(p, "hot_key");
        char hot_text[64] = "-";
        if (json_is_object(hot))
            snprintf(hot_text, sizeof hot_text, "%s (%d%%)",
                     json_is_string(json_object_get(hot, "hash"))
                         ? json_string_value(json_object_get(hot, "hash"))
                         : "?",
                     (int)num(hot, "percent", NULL));
        fprintf(out, "%-10" PRIu64 " %-5" PRIu64 " %12g %12g %10lld %10lld  %s\n",
                (uint64_t)num(p, "id", NULL), node, num(p, "consumed", "read"),
                num(p, "consumed", "write"), (long long)num(p, "read_throttle_events", NULL),
                (long long)num(p, "write_throttle_events", NULL), hot_text);
    }
}

int cli_table_stats_print(const cli_table_view *views, size_t n, FILE *out, strata_err *err)
{
    json_t **docs = calloc(n ? n : 1, sizeof *docs);
    if (docs == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    const json_t *first = NULL;
    totals t = {0};
    for (size_t i = 0; i < n; i++) {
        docs[i] = views[i].json ? json_loads(views[i].json, 0, NULL) : NULL;
        if (!json_is_object(docs[i]) || !json_is_string(json_object_get(docs[i], "table"))) {
            json_decref(docs[i]);
            docs[i] = NULL;
            continue;
        }
        if (first == NULL)
            first = docs[i];
        add_totals(docs[i], &t);
    }
    int rc = 0;
    if (first == NULL) {
        rc = strata_err_set(err, ERR_CORRUPT, "no node answered with table statistics");
    } else {
        const char *mode = json_string_value(json_object_get(first, "billing_mode"));
        fprintf(out, "table %s: %s", json_string_value(json_object_get(first, "table")),
                mode ? mode : "?");
        if (mode != NULL && strcmp(mode, "PROVISIONED") == 0)
            fprintf(out, " (read %g, write %g units/s)", num(first, "provisioned", "read"),
                    num(first, "provisioned", "write"));
        fprintf(out,
                "\nconsumed: read %g, write %g units; throttle events: read %lld, write %lld; "
                "throttled requests: %lld\n",
                t.read, t.write, (long long)t.read_throttles, (long long)t.write_throttles,
                (long long)t.throttled_requests);
        fprintf(out, "%-10s %-5s %12s %12s %10s %10s  %s\n", "PARTITION", "NODE", "READ", "WRITE",
                "READ_THR", "WRITE_THR", "HOT KEY");
        for (size_t i = 0; i < n; i++) {
            if (docs[i] != NULL)
                print_partitions(docs[i], views[i].node_id, out);
            else
                fprintf(out, "node %" PRIu64 ": no answer\n", views[i].node_id);
        }
    }
    for (size_t i = 0; i < n; i++)
        json_decref(docs[i]);
    free(docs);
    return rc;
}

/* ------------------------------------------------------------------ the command */

typedef struct {
    cli_table_view *views;
    cli_response *bodies;
    size_t n, cap;
    const char *path;
    bool failed;
} gather;

static int endpoint_of(const char *text, cli_endpoint *ep, strata_err *err)
{
    if (strstr(text, "://") != NULL)
        return cli_endpoint_parse(text, ep, err);
    char url[URL_MAX];
    if ((size_t)snprintf(url, sizeof url, "http://%s", text) >= sizeof url)
        return strata_err_set(err, ERR_VALIDATION, "endpoint %s: too long", text);
    return cli_endpoint_parse(url, ep, err);
}

static bool gather_grow(gather *g)
{
    size_t cap = g->cap ? g->cap * 2 : 8;
    if (cap > NODES_MAX)
        return false;
    cli_table_view *v = realloc(g->views, cap * sizeof *v);
    if (v != NULL)
        g->views = v;
    cli_response *b = realloc(g->bodies, cap * sizeof *b);
    if (b != NULL)
        g->bodies = b;
    if (v == NULL || b == NULL)
        return false;
    g->cap = cap;
    return true;
}

/* Asks one node; a node that does not answer 200 is kept as a NULL view. */
static void ask(gather *g, uint64_t node_id, const char *addr, int timeout_ms)
{
    if (g->failed || (g->n == g->cap && !gather_grow(g))) {
        g->failed = true;
        return;
    }
    cli_table_view *v = &g->views[g->n];
    cli_response *r = &g->bodies[g->n];
    g->n++;
    v->node_id = node_id;
    v->json = NULL;
    memset(r, 0, sizeof *r);
    cli_endpoint ep;
    if (endpoint_of(addr, &ep, NULL) != 0 ||
        cli_http_request(&ep, "GET", g->path, NULL, 0, NULL, 0, timeout_ms, r, NULL) != 0)
        return;
    if (r->status == 200)
        v->json = r->body;
}

static void ask_peer(void *ctx, uint64_t node_id, const char *client_addr)
{
    ask(ctx, node_id, client_addr, PEER_TIMEOUT_MS);
}

static uint64_t node_id_of(const char *cluster_json)
{
    json_t *o = json_loads(cluster_json, 0, NULL);
    uint64_t id = (uint64_t)num(o, "node_id", NULL);
    json_decref(o);
    return id;
}

int cli_table_stats(const char *endpoint, const char *table, int timeout_ms, FILE *out,
                    FILE *errout)
{
    cli_endpoint ep;
    strata_err err;
    char path[PATH_MAX_LEN];
    if (endpoint_of(endpoint, &ep, &err) != 0 ||
        (size_t)snprintf(path, sizeof path, "/admin/table-stats/%s", table) >= sizeof path) {
        fprintf(errout, "strata: bad endpoint or table name\n");
        return CLI_EXIT_USAGE;
    }
    cli_response map;
    if (cli_http_request(&ep, "GET", "/admin/cluster", NULL, 0, NULL, 0, timeout_ms, &map, &err) !=
        0) {
        fprintf(errout, "unreachable: %s: %s\n", endpoint, err.msg);
        return CLI_EXIT_UNREACHABLE;
    }
    gather g = {.path = path};
    uint64_t self = map.status == 200 ? node_id_of(map.body) : 0;
    ask(&g, self, endpoint, timeout_ms);
    if (map.status == 200 && self != 0)
        cli_cluster_each_node(map.body, ask_peer, &g, NULL);
    cli_response_free(&map);
    int code = CLI_EXIT_OK;
    if (g.failed) {
        fprintf(errout, "strata: too many nodes\n");
        code = CLI_EXIT_UNHEALTHY;
    } else if (g.views[0].json == NULL) {
        fprintf(errout, "strata: table %s: HTTP %d: %.200s\n", table, g.bodies[0].status,
                g.bodies[0].body ? g.bodies[0].body : "");
        code = CLI_EXIT_UNHEALTHY;
    } else if (cli_table_stats_print(g.views, g.n, out, &err) != 0) {
        fprintf(errout, "strata: %s\n", err.msg);
        code = CLI_EXIT_UNHEALTHY;
    }
    for (size_t i = 0; i < g.n; i++)
        cli_response_free(&g.bodies[i]);
    free(g.views);
    free(g.bodies);
    return code;
}
