/*
 * GET /metrics and GET /admin/table-stats/<TableName>: this node's capacity figures
 * (cluster/capacity.h) for operators and scrapers. Both read only this node's state: in
 * a cluster each node reports the partitions it serves, so a table's totals are the sums
 * over nodes (what a Prometheus `sum by (table)` gives).
 */
#include <string.h>

#include "cluster/capacity.h"
#include "node/api_internal.h"
#include "node/http/http.h"

#define METRICS_PATH     "/metrics"
#define TABLE_STATS_PATH "/admin/table-stats/"

static void answer(http_request *http, int status, const char *type, const buf *b)
{
    http_header h[1] = {{"Content-Type", type}};
    if (b->failed) {
        static const char oom[] = "out of memory\n";
        http_respond(http, 500, h, 1, oom, sizeof oom - 1);
        return;
    }
    http_respond(http, status, h, 1, b->data, b->len);
}

static void serve_metrics(http_request *http, router *r)
{
    buf b;
    buf_init(&b, 0);
    capacity_metrics_text(router_capacity(r), router_catalog(r), &b);
    answer(http, 200, "text/plain; version=0.0.4", &b);
    buf_free(&b);
}

static void serve_table_stats(http_request *http, router *r, const char *name)
{
    buf b;
    buf_init(&b, 0);
    const table_info *t = catalog_find(router_catalog(r), name, strlen(name));
    int status = 200;
    if (t == NULL) {
        status = 404;
        buf_printf(&b, "{\"message\":\"Requested resource not found: Table: %s not found\"}",
                   catalog_valid_table_name(name, strlen(name)) ? name : "?");
    } else {
        capacity_table_json(router_capacity(r), t, &b);
    }
    answer(http, status, "application/json", &b);
    buf_free(&b);
}

bool api_serve_metrics(http_request *http, router *r)
{
    const char *path = http_request_path(http);
    if (strcmp(path, METRICS_PATH) == 0) {
        serve_metrics(http, r);
        return true;
    }
    if (strncmp(path, TABLE_STATS_PATH, strlen(TABLE_STATS_PATH)) == 0) {
        serve_table_stats(http, r, path + strlen(TABLE_STATS_PATH));
        return true;
    }
    return false;
}
