/* `strata cluster status`: /admin/cluster JSON to tables (see cluster_status.h). */
#include "node/cli/cluster_status.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ aligned tables */

#define TBL_MAX_COLS 12
#define CELL_MAX     96 /* longer values (a long host name) are cut, so a line stays bounded */
#define TBL_MAX_ROWS (1u << 20)

typedef struct {
    size_t ncols;
    char (*cells)[CELL_MAX]; /* nrows * ncols */
    size_t nrows, cap;
} table;

static void table_init(table *t, size_t ncols)
{
    memset(t, 0, sizeof *t);
    t->ncols = ncols;
}

static void table_free(table *t)
{
    free(t->cells);
    t->cells = NULL;
}

/* A new row of empty cells, or NULL when memory (or the row bound) runs out. */
static char (*table_row(table *t))[CELL_MAX]
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        if (cap > TBL_MAX_ROWS)
            return NULL;
        void *p = realloc(t->cells, cap * t->ncols * CELL_MAX);
        if (p == NULL)
            return NULL;
        t->cells = p;
        t->cap = cap;
    }
    char(*row)[CELL_MAX] = t->cells + t->nrows * t->ncols;
    memset(row, 0, t->ncols * CELL_MAX);
    t->nrows++;
    return row;
}

static void cellf(char *cell, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cellf(char *cell, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cell, CELL_MAX, fmt, ap);
    va_end(ap);
}

/* Columns padded to their widest cell, two spaces apart, no trailing blanks. */
static void table_print(const table *t, const char *indent, FILE *out)
{
    size_t width[TBL_MAX_COLS] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t n = strlen(t->cells[r * t->ncols + c]);
            if (n > width[c])
                width[c] = n;
        }
    char line[TBL_MAX_COLS * (CELL_MAX + 2) + 64];
    for (size_t r = 0; r < t->nrows; r++) {
        size_t len = 0;
        for (size_t c = 0; c < t->ncols; c++) {
            int w = (int)(c + 1 < t->ncols ? width[c] + 2 : 0);
            len += (size_t)snprintf(line + len, sizeof line - len, "%-*s", w,
                                    t->cells[r * t->ncols + c]);
        }
        while (len > 0 && line[len - 1] == ' ')
            len--;
        fprintf(out, "%s%.*s\n", indent, (int)len, line);
    }
}

/* ------------------------------------------------------------------ JSON access */

/* Tolerant readers: a missing or mistyped field prints as "?" instead of failing. */
static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "?";
}

static bool ju64(const json_t *o, const char *key, uint64_t *v)
{
    const json_t *j = json_object_get(o, key);
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *v = (uint64_t)json_integer_value(j);
    return true;
}

static void cell_u64(char *cell, const json_t *o, const char *key)
{
    uint64_t v;
    if (ju64(o, key, &v))
        cellf(cell, "%" PRIu64, v);
    else
        cellf(cell, "?");
}

static uint64_t ju64_or0(const json_t *o, const char *key)
{
    uint64_t v = 0;
    return ju64(o, key, &v) ? v : 0;
}

/* A parsed /admin/cluster answer: an object with "nodes" and "partitions" arrays. */
static json_t *parse_view(const char *text)
{
    if (text == NULL)
        return NULL;
    json_t *root = json_loads(text, 0, NULL);
    if (root == NULL)
        return NULL;
    if (!json_is_object(root) || !json_is_array(json_object_get(root, "nodes")) ||
        !json_is_array(json_object_get(root, "partitions"))) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ------------------------------------------------------------------ member views */

typedef struct {
    uint64_t node_id;
    json_t *root; /* NULL: did not answer (or answered garbage) */
} view;

typedef struct {
    view *v; /* [0] is the answering node */
    size_t n;
} views;

typedef enum { MEMBER_NOT_ASKED, MEMBER_NO_ANSWER, MEMBER_NO_REPLICA, MEMBER_FOUND } member_kind;

/* The "local" object that node `member` reports for partition `part_id`. */
static member_kind member_local(const views *vs, uint64_t member, uint64_t part_id,
                                const json_t **local)
{
    for (size_t i = 0; i < vs->n; i++) {
        if (vs->v[i].node_id != member)
            continue;
        if (vs->v[i].root == NULL)
            return MEMBER_NO_ANSWER;
        const json_t *parts = json_object_get(vs->v[i].root, "partitions");
        size_t k;
        const json_t *p;
        json_array_foreach(parts, k, p)
        {
            uint64_t id;
            const json_t *l = json_object_get(p, "local");
            if (ju64(p, "id", &id) && id == part_id && json_is_object(l)) {
                *local = l;
                return MEMBER_FOUND;
            }
        }
        return MEMBER_NO_REPLICA;
    }
    return MEMBER_NOT_ASKED;
}

/*
 * The partition's leader: a member reporting itself leader (highest term) beats the hint.
 * *seen: some member's own view of the partition was available, so a 0 means "no leader"
 * rather than "this node does not know" (a non-member only has a routing hint).
 */
static uint64_t partition_leader(const views *vs, const json_t *p, bool *seen)
{
    uint64_t leader = ju64_or0(p, "leader"), best_term = 0, id = ju64_or0(p, "id");
    const json_t *members = json_object_get(p, "members");
    size_t k;
    const json_t *m;
    json_array_foreach(members, k, m)
    {
        const json_t *l = NULL;
        uint64_t mid = json_is_integer(m) ? (uint64_t)json_integer_value(m) : 0;
        if (member_local(vs, mid, id, &l) != MEMBER_FOUND)
            continue;
        *seen = true;
        uint64_t term = ju64_or0(l, "term");
        if (strcmp(jstr(l, "state"), "leader") == 0 && term >= best_term) {
            best_term = term;
            leader = mid;
        }
    }
    return leader;
}

/* ------------------------------------------------------------------ sections */

static void print_header(const json_t *root, bool ready, FILE *out)
{
    const json_t *voter = json_object_get(root, "meta_voter");
    uint64_t idx, meta_leader = ju64_or0(root, "meta_leader");
    fprintf(out, "Cluster as node %" PRIu64 " sees it: %s", ju64_or0(root, "node_id"),
            ready ? "ready" : "NOT READY");
    if (meta_leader != 0)
        fprintf(out, ", meta leader %" PRIu64, meta_leader);
    else
        fprintf(out, ", no meta leader");
    if (ju64(root, "meta_index", &idx))
        fprintf(out, ", meta index %" PRIu64, idx);
    if (json_is_boolean(voter))
        fprintf(out, ", meta voter %s", json_is_true(voter) ? "yes" : "no");
    fprintf(out, "\n");
    /* The meta group's seats as the map records them (none before the first record). */
    const json_t *g = json_object_get(root, "meta_group");
    const json_t *members = json_object_get(g, "members");
    if (!json_is_array(members) || json_array_size(members) == 0)
        return;
    fprintf(out, "Meta group: %" PRIu64 " seats, members", ju64_or0(g, "seats"));
    size_t i;
    const json_t *m;
    json_array_foreach(members, i, m)
    {
        fprintf(out, "%s %" PRIu64 "%s", i ? "," : "", ju64_or0(m, "node"),
                strcmp(jstr(m, "role"), "learner") == 0 ? " (learner)" : "");
    }
    fprintf(out, "\n");
}

static int print_nodes(const json_t *nodes, FILE *out, cli_cluster_summary *sum, strata_err *err)
{
    table t;
    table_init(&t, 7);
    const char *head[] = {"ID", "AZ", "HOST", "STATE", "CLIENT", "PEER", "CONNECTED"};
    char(*row)[CELL_MAX] = table_row(&t);
    if (row == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory formatting nodes");
    for (size_t c = 0; c < 7; c++)
        cellf(row[c], "%s", head[c]);
    size_t i;
    const json_t *n;
    json_array_foreach(nodes, i, n)
    {
        if ((row = table_row(&t)) == NULL) {
            table_free(&t);
            return strata_err_set(err, ERR_NOMEM, "out of memory formatting nodes");
        }
        const json_t *conn = json_object_get(n, "connected");
        cell_u64(row[0], n, "id");
        cellf(row[1], "%s", jstr(n, "az"));
        cellf(row[2], "%s", jstr(n, "host"));
        cellf(row[3], "%s", jstr(n, "state"));
        cellf(row[4], "%s", jstr(n, "client"));
        cellf(row[5], "%s", jstr(n, "peer"));
        cellf(row[6], "%s", json_is_boolean(conn) ? (json_is_true(conn) ? "yes" : "no") : "?");
        sum->nodes++;
        /* A DRAINING node still serves; a REMOVED one is gone from the cluster. */
        if (json_is_true(conn) && strcmp(jstr(n, "state"), "REMOVED") != 0)
            sum->nodes_up++;
    }
    fprintf(out, "\nNODES\n");
    table_print(&t, "  ", out);
    table_free(&t);
    return 0;
}

/* The Raft cells (state, term, commit, applied, last, snapshot) of one member's row. */
static void member_cells(const views *vs, uint64_t member, uint64_t part_id, char (*row)[CELL_MAX])
{
    const json_t *l = NULL;
    switch (member_local(vs, member, part_id, &l)) {
    case MEMBER_NOT_ASKED:
        cellf(row[0], "-");
        return;
    case MEMBER_NO_ANSWER:
        cellf(row[0], "no answer");
        return;
    case MEMBER_NO_REPLICA:
        cellf(row[0], "not open");
        return;
    case MEMBER_FOUND:
        break;
    }
    /* failed: the group stopped on an error; installing: copying a snapshot from the leader. */
    cellf(row[0], "%s%s%s%s", json_is_true(json_object_get(l, "failed")) ? "FAILED(" : "",
          jstr(l, "state"), json_is_true(json_object_get(l, "failed")) ? ")" : "",
          json_is_true(json_object_get(l, "installing")) ? "+copying" : "");
    cell_u64(row[1], l, "term");
    cell_u64(row[2], l, "commit_index");
    cell_u64(row[3], l, "applied_index");
    cell_u64(row[4], l, "last_index");
    uint64_t snap, installs;
    if (!ju64(l, "snapshot_index", &snap))
        return; /* a node from before snapshots */
    if (ju64(l, "installs", &installs) && installs > 0)
        cellf(row[5], "%" PRIu64 " (%" PRIu64 " copied in)", snap, installs);
    else
        cellf(row[5], "%" PRIu64, snap);
}

/* Whether the JSON array of node ids holds `node`. */
static bool listed(const json_t *members, uint64_t node)
{
    size_t k;
    const json_t *m;
    json_array_foreach(members, k, m)
    {
        if (json_is_integer(m) && (uint64_t)json_integer_value(m) == node)
            return true;
    }
    return false;
}

/* One partition: its own columns on the first member's row, then one row per member, then
 * one per replica that is leaving (its node is no longer a member). */
static int partition_rows(table *t, const views *vs, const json_t *p, uint64_t leader, bool seen)
{
    uint64_t id = ju64_or0(p, "id");
    const json_t *members = json_object_get(p, "members");
    size_t n = json_array_size(members);
    for (size_t k = 0; k < (n ? n : 1); k++) {
        char(*row)[CELL_MAX] = table_row(t);
        if (row == NULL)
            return -1;
        if (k == 0) {
            cell_u64(row[0], p, "id");
            cellf(row[1], "%s-%s", jstr(p, "hash_lo"), jstr(p, "hash_hi"));
            cell_u64(row[2], p, "epoch");
            /* The map's hint is where leadership is headed (leader balance): shown when
             * it differs from the leader. */
            uint64_t hint = ju64_or0(p, "leader_hint");
            if (leader != 0 && hint != 0 && hint != leader)
                cellf(row[3], "%" PRIu64 " (hint %" PRIu64 ")", leader, hint);
            else if (leader != 0)
                cellf(row[3], "%" PRIu64, leader);
            else
                cellf(row[3], "%s", seen ? "none" : "?");
        }
        const json_t *m = json_array_get(members, k);
        if (!json_is_integer(m))
            continue;
        uint64_t mid = (uint64_t)json_integer_value(m);
        cellf(row[4], "%" PRIu64 "%s", mid, mid == leader ? "*" : "");
        member_cells(vs, mid, id, row + 5);
    }
    /* A replica the map has taken from its node but Raft still counts: it keeps running
     * until a committed configuration leaves it out (README, "Moving replicas"). */
    for (size_t i = 0; i < vs->n; i++) {
        const json_t *l;
        uint64_t nid = vs->v[i].node_id;
        if (listed(members, nid) || member_local(vs, nid, id, &l) != MEMBER_FOUND)
            continue;
        char(*row)[CELL_MAX] = table_row(t);
        if (row == NULL)
            return -1;
        cellf(row[4], "%" PRIu64 " (leaving)", nid);
        member_cells(vs, nid, id, row + 5);
    }
    return 0;
}

/* Leaders per node, counted in the order of the nodes table. */
typedef struct {
    uint64_t *ids;
    size_t *count;
    size_t n;
} leader_tally;

static void tally_leader(leader_tally *lt, uint64_t leader)
{
    for (size_t i = 0; i < lt->n; i++)
        if (lt->ids[i] == leader)
            lt->count[i]++;
}

static int print_table(const views *vs, const json_t *parts, uint64_t table_id, leader_tally *lt,
                       FILE *out, cli_cluster_summary *sum, strata_err *err)
{
    table t;
    table_init(&t, 11);
    const char *head[] = {"PARTITION", "HASH RANGE", "EPOCH",   "LEADER", "MEMBER",  "RAFT",
                          "TERM",      "COMMIT",     "APPLIED", "LAST",   "SNAPSHOT"};
    char(*row)[CELL_MAX] = table_row(&t);
    if (row == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory formatting partitions");
    for (size_t c = 0; c < 11; c++)
        cellf(row[c], "%s", head[c]);
    const char *name = "?";
    size_t count = 0, i;
    const json_t *p;
    json_array_foreach(parts, i, p)
    {
        if (ju64_or0(p, "table_id") != table_id)
            continue;
        name = jstr(p, "table");
        bool seen = false;
        uint64_t leader = partition_leader(vs, p, &seen);
        if (partition_rows(&t, vs, p, leader, seen) != 0) {
            table_free(&t);
            return strata_err_set(err, ERR_NOMEM, "out of memory formatting partitions");
        }
        count++;
        sum->partitions++;
        if (leader == 0 && seen)
            sum->leaderless++;
        else if (leader == 0)
            sum->leader_unknown++;
        else
            tally_leader(lt, leader);
    }
    fprintf(out, "\nTABLE %s (id %" PRIu64 ", %zu partition%s)\n", name, table_id, count,
            count == 1 ? "" : "s");
    table_print(&t, "  ", out);
    table_free(&t);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct table ids of the partitions, ascending; *n set to their count. */
static uint64_t *table_ids(const json_t *parts, size_t *n)
{
    size_t np = json_array_size(parts);
    uint64_t *ids = malloc((np ? np : 1) * sizeof *ids);
    if (ids == NULL)
        return NULL;
    for (size_t i = 0; i < np; i++)
        ids[i] = ju64_or0(json_array_get(parts, i), "table_id");
    qsort(ids, np, sizeof *ids, cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < np; i++)
        if (k == 0 || ids[k - 1] != ids[i])
            ids[k++] = ids[i];
    *n = k;
    return ids;
}

static int print_tables(const views *vs, leader_tally *lt, FILE *out, cli_cluster_summary *sum,
                        strata_err *err)
{
    const json_t *parts = json_object_get(vs->v[0].root, "partitions");
    size_t n = 0;
    uint64_t *ids = table_ids(parts, &n);
    if (ids == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory formatting tables");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = print_table(vs, parts, ids[i], lt, out, sum, err);
    free(ids);
    sum->tables = n;
    if (rc == 0 && n == 0)
        fprintf(out, "\nNo tables.\n");
    else if (rc == 0 && vs->n == 1)
        fprintf(out,
                "\n  (* leader; ? not known here. Raft columns for node %" PRIu64
                "'s replicas only; --all asks every node)\n",
                vs->v[0].node_id);
    else if (rc == 0)
        fprintf(out, "\n  (* leader; none: no member knows a leader)\n");
    return rc;
}

static void print_summary(const leader_tally *lt, const cli_cluster_summary *sum, FILE *out)
{
    fprintf(out,
            "\nSUMMARY nodes up %zu/%zu, tables %zu, partitions %zu, without leader %zu, "
            "leader unknown %zu, leaders per node",
            sum->nodes_up, sum->nodes, sum->tables, sum->partitions, sum->leaderless,
            sum->leader_unknown);
    for (size_t i = 0; i < lt->n; i++)
        fprintf(out, " %" PRIu64 ":%zu", lt->ids[i], lt->count[i]);
    fprintf(out, "%s\n", lt->n == 0 ? " -" : "");
}

/* ------------------------------------------------------------------ entry points */

static int tally_init(leader_tally *lt, const json_t *nodes)
{
    lt->n = json_array_size(nodes);
    lt->ids = calloc(lt->n ? lt->n : 1, sizeof *lt->ids);
    lt->count = calloc(lt->n ? lt->n : 1, sizeof *lt->count);
    if (lt->ids == NULL || lt->count == NULL)
        return -1;
    for (size_t i = 0; i < lt->n; i++)
        lt->ids[i] = ju64_or0(json_array_get(nodes, i), "id");
    return 0;
}

static void views_free(views *vs)
{
    for (size_t i = 0; vs->v != NULL && i < vs->n; i++)
        json_decref(vs->v[i].root);
    free(vs->v);
}

static int views_load(views *vs, const char *primary, const cli_cluster_view *others, size_t n,
                      strata_err *err)
{
    vs->n = n + 1;
    vs->v = calloc(vs->n, sizeof *vs->v);
    if (vs->v == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory reading the cluster view");
    vs->v[0].root = parse_view(primary);
    if (vs->v[0].root == NULL)
        return strata_err_set(err, ERR_CORRUPT, "the answer is not /admin/cluster JSON");
    vs->v[0].node_id = ju64_or0(vs->v[0].root, "node_id");
    for (size_t i = 0; i < n; i++) {
        vs->v[i + 1].node_id = others[i].node_id;
        vs->v[i + 1].root = parse_view(others[i].json);
    }
    return 0;
}

static int print_all(const views *vs, FILE *out, cli_cluster_summary *sum, strata_err *err)
{
    const json_t *root = vs->v[0].root;
    print_header(root, sum->ready, out);
    if (print_nodes(json_object_get(root, "nodes"), out, sum, err) != 0)
        return -1;
    leader_tally lt;
    int rc = tally_init(&lt, json_object_get(root, "nodes"));
    if (rc != 0)
        rc = strata_err_set(err, ERR_NOMEM, "out of memory counting leaders");
    if (rc == 0)
        rc = print_tables(vs, &lt, out, sum, err);
    if (rc == 0)
        print_summary(&lt, sum, out);
    free(lt.ids);
    free(lt.count);
    return rc;
}

/* A stratad without cluster flags answers {"node_id":0,"ready":true,"mode":"single"}. */
static bool single_node(const char *primary, FILE *out, cli_cluster_summary *sum)
{
    json_t *root = json_loads(primary, 0, NULL);
    bool single = json_is_object(root) && strcmp(jstr(root, "mode"), "single") == 0;
    if (single) {
        sum->ready = json_is_true(json_object_get(root, "ready"));
        fprintf(out, "Single node, not a cluster: %s\n", sum->ready ? "ready" : "NOT READY");
    }
    json_decref(root);
    return single;
}

int cli_cluster_print(const char *primary, const cli_cluster_view *others, size_t n_others,
                      FILE *out, cli_cluster_summary *sum, strata_err *err)
{
    cli_cluster_summary local;
    if (sum == NULL)
        sum = &local;
    memset(sum, 0, sizeof *sum);
    if (single_node(primary, out, sum))
        return 0;
    views vs = {0};
    int rc = views_load(&vs, primary, others, n_others, err);
    if (rc == 0) {
        sum->ready = json_is_true(json_object_get(vs.v[0].root, "ready"));
        sum->node_id = vs.v[0].node_id;
        rc = print_all(&vs, out, sum, err);
    }
    views_free(&vs);
    return rc;
}

int cli_cluster_each_node(const char *primary,
                          void (*fn)(void *ctx, uint64_t node_id, const char *client_addr),
                          void *ctx, strata_err *err)
{
    json_t *root = parse_view(primary);
    if (root == NULL)
        return strata_err_set(err, ERR_CORRUPT, "the answer is not /admin/cluster JSON");
    uint64_t self = ju64_or0(root, "node_id");
    size_t i;
    const json_t *n;
    json_array_foreach(json_object_get(root, "nodes"), i, n)
    {
        uint64_t id;
        const char *addr = json_string_value(json_object_get(n, "client"));
        if (ju64(n, "id", &id) && id != self && addr != NULL)
            fn(ctx, id, addr);
    }
    json_decref(root);
    return 0;
}

int cli_cluster_local_replicas(const char *body, uint64_t *node_id, size_t *n, strata_err *err)
{
    json_t *root = parse_view(body);
    if (root == NULL)
        return strata_err_set(err, ERR_CORRUPT, "the answer is not /admin/cluster JSON");
    *node_id = ju64_or0(root, "node_id");
    *n = 0;
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(root, "partitions"), i, p)
    {
        if (json_is_object(json_object_get(p, "local")))
            (*n)++;
    }
    if (json_is_true(json_object_get(root, "meta_voter")))
        (*n)++; /* its replica of the meta group */
    json_decref(root);
    return 0;
}
