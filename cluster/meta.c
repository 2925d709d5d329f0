/*
 * The meta service's state machine (see meta.h for the contract).
 *
 * State lives in three sorted arrays: nodes by id, tables by id, partitions by
 * (table_id, hash_lo). Ids only grow, so a new table and its partitions always append.
 * Every command is validated completely before anything changes, so a rejected command
 * leaves the state as it was.
 */
#include "cluster/meta.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

struct meta_state {
    meta_node *nodes;
    size_t n_nodes, cap_nodes;
    meta_table *tables;
    size_t n_tables, cap_tables;
    meta_partition *parts;
    size_t n_parts, cap_parts;
    uint32_t next_table_id;
    uint64_t next_partition_id;
    meta_partition group; /* the meta group's members (meta_group) */
    uint32_t seats;
    uint32_t format; /* the cluster's record format (meta_format) */
};

meta_state *meta_new(void)
{
    meta_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->next_table_id = 1;
    s->next_partition_id = 1;
    s->format = 1;
    return s;
}

void meta_free(meta_state *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n_tables; i++)
        free(s->tables[i].schema);
    free(s->tables);
    free(s->nodes);
    free(s->parts);
    free(s);
}

const char *meta_node_state_name(meta_node_state st)
{
    switch (st) {
    case META_NODE_JOINING:
        return "JOINING";
    case META_NODE_ACTIVE:
        return "ACTIVE";
    case META_NODE_DRAINING:
        return "DRAINING";
    case META_NODE_DOWN:
        return "DOWN";
    case META_NODE_REMOVED:
        return "REMOVED";
    }
    return "UNKNOWN";
}

/* ------------------------------------------------------------------ lookups */

size_t meta_node_index(const meta_state *s, uint64_t id)
{
    size_t lo = 0, hi = s->n_nodes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->nodes[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_nodes && s->nodes[lo].id == id ? lo : SIZE_MAX;
}

const meta_node *meta_node_find(const meta_state *s, uint64_t id)
{
    size_t i = meta_node_index(s, id);
    return i == SIZE_MAX ? NULL : &s->nodes[i];
}

static size_t table_index(const meta_state *s, uint32_t id)
{
    size_t lo = 0, hi = s->n_tables;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->tables[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_tables && s->tables[lo].id == id ? lo : SIZE_MAX;
}

const meta_table *meta_table_find(const meta_state *s, uint32_t id)
{
    size_t i = table_index(s, id);
    return i == SIZE_MAX ? NULL : &s->tables[i];
}

const meta_table *meta_table_find_name(const meta_state *s, const char *name, size_t len)
{
    for (size_t i = 0; i < s->n_tables; i++)
        if (s->tables[i].name_len == len && memcmp(s->tables[i].name, name, len) == 0)
            return &s->tables[i];
    return NULL;
}

static size_t part_index(const meta_state *s, uint64_t id)
{
    for (size_t i = 0; i < s->n_parts; i++)
        if (s->parts[i].id == id)
            return i;
    return SIZE_MAX;
}

const meta_partition *meta_partition_find(const meta_state *s, uint64_t id)
{
    size_t i = part_index(s, id);
    return i == SIZE_MAX ? NULL : &s->parts[i];
}

/* First partition index with table_id >= t. */
static size_t parts_lower_bound(const meta_state *s, uint32_t t)
{
    size_t lo = 0, hi = s->n_parts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->parts[mid].table_id < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const meta_partition *meta_table_partitions(const meta_state *s, uint32_t table_id, size_t *n)
{
    size_t first = parts_lower_bound(s, table_id);
    size_t end = table_id == UINT32_MAX ? s->n_parts : parts_lower_bound(s, table_id + 1);
    *n = end - first;
    return *n ? &s->parts[first] : NULL;
}

const meta_partition *meta_partition_for_hash(const meta_state *s, uint32_t table_id, uint64_t hash)
{
    size_t n;
    const meta_partition *p = meta_table_partitions(s, table_id, &n);
    if (n == 0)
        return NULL;
    size_t lo = 0, hi = n; /* last partition with hash_lo <= hash */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p[mid].hash_lo <= hash)
            lo = mid;
        else
            hi = mid;
    }
    return &p[lo];
}

bool meta_partition_has(const meta_partition *p, uint64_t node, meta_role *role)
{
    for (uint32_t i = 0; i < p->n_members; i++)
        if (p->members[i].node == node) {
            if (role)
                *role = p->members[i].role;
            return true;
        }
    return false;
}

uint32_t meta_partition_voters(const meta_partition *p)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n_members; i++)
        n += p->members[i].role == META_VOTER;
    return n;
}

size_t meta_node_count(const meta_state *s)
{
    return s->n_nodes;
}
const meta_node *meta_node_at(const meta_state *s, size_t i)
{
    return i < s->n_nodes ? &s->nodes[i] : NULL;
}
size_t meta_table_count(const meta_state *s)
{
    return s->n_tables;
}
const meta_table *meta_table_at(const meta_state *s, size_t i)
{
    return i < s->n_tables ? &s->tables[i] : NULL;
}
size_t meta_partition_count(const meta_state *s)
{
    return s->n_parts;
}
const meta_partition *meta_partition_at(const meta_state *s, size_t i)
{
    return i < s->n_parts ? &s->parts[i] : NULL;
}

const meta_partition *meta_group(const meta_state *s)
{
    return &s->group;
}

uint32_t meta_group_seats(const meta_state *s)
{
    return s->seats;
}

uint32_t meta_format(const meta_state *s)
{
    return s->format;
}

uint32_t meta_format_ready(const meta_state *s)
{
    uint32_t f = 0;
    for (size_t i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].state != META_NODE_REMOVED && (f == 0 || s->nodes[i].format < f))
            f = s->nodes[i].format;
    return f != 0 ? f : s->format;
}

uint32_t meta_next_table_id(const meta_state *s)
{
    return s->next_table_id;
}
uint64_t meta_next_partition_id(const meta_state *s)
{
    return s->next_partition_id;
}

/* ------------------------------------------------------------------ rules */

/* Whether `id` is a used id given the next-id counter (which saturates at the maximum). */
static bool id_below(uint64_t id, uint64_t next)
{
    return id < next || (id == next && next == (uint64_t)-1) ||
           (id == next && next == UINT32_MAX && id == UINT32_MAX);
}

int meta_partition_check(const meta_state *s, const meta_partition *p, strata_err *err)
{
    if (p->n_members > META_MAX_MEMBERS)
        return strata_err_set(err, ERR_VALIDATION, "partition %llu has %u members (max %d)",
                              (unsigned long long)p->id, p->n_members, META_MAX_MEMBERS);
    const meta_node *nodes[META_MAX_MEMBERS];
    uint32_t voters = 0;
    for (uint32_t i = 0; i < p->n_members; i++) {
        const meta_replica *r = &p->members[i];
        nodes[i] = meta_node_find(s, r->node);
        if (nodes[i] == NULL)
            return strata_err_set(err, ERR_NOT_FOUND, "partition %llu: node %llu is unknown",
                                  (unsigned long long)p->id, (unsigned long long)r->node);
        if (r->role != META_VOTER && r->role != META_LEARNER)
            return strata_err_set(err, ERR_VALIDATION, "partition %llu: bad replica role",
                                  (unsigned long long)p->id);
        voters += r->role == META_VOTER;
        for (uint32_t j = 0; j < i; j++) {
            if (p->members[j].node == r->node)
                return strata_err_set(err, ERR_VALIDATION,
                                      "partition %llu: node %llu is a member twice",
                                      (unsigned long long)p->id, (unsigned long long)r->node);
            if (strcmp(nodes[j]->host, nodes[i]->host) == 0)
                return strata_err_set(
                    err, ERR_VALIDATION, "partition %llu: nodes %llu and %llu share host '%s'",
                    (unsigned long long)p->id, (unsigned long long)p->members[j].node,
                    (unsigned long long)r->node, nodes[i]->host);
        }
    }
    if (voters < META_REPLICAS)
        return strata_err_set(err, ERR_VALIDATION,
                              "partition %llu would have %u voters (at least %d)",
                              (unsigned long long)p->id, voters, META_REPLICAS);
    uint32_t distinct = 0;
    for (uint32_t i = 0; i < p->n_members; i++) {
        if (p->members[i].role != META_VOTER)
            continue;
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = p->members[j].role == META_VOTER && strcmp(nodes[j]->az, nodes[i]->az) == 0;
        distinct += !seen;
    }
    if (distinct < META_REPLICAS)
        return strata_err_set(err, ERR_VALIDATION,
                              "partition %llu: its voters would span %u AZs (need %d)",
                              (unsigned long long)p->id, distinct, META_REPLICAS);
    if (p->leader_hint != 0) {
        meta_role role;
        if (!meta_partition_has(p, p->leader_hint, &role) || role != META_VOTER)
            return strata_err_set(err, ERR_VALIDATION,
                                  "partition %llu: leader hint %llu is not a voter",
                                  (unsigned long long)p->id, (unsigned long long)p->leader_hint);
    }
    return 0;
}

static bool label_ok(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static bool state_ok(int st)
{
    return st >= META_NODE_JOINING && st <= META_NODE_REMOVED;
}

static bool transition_ok(meta_node_state from, meta_node_state to)
{
    switch (from) {
    case META_NODE_JOINING:
        return to == META_NODE_ACTIVE || to == META_NODE_DOWN || to == META_NODE_REMOVED;
    case META_NODE_ACTIVE:
        return to == META_NODE_DRAINING || to == META_NODE_DOWN;
    case META_NODE_DRAINING: /* stays DRAINING while unreachable, so never DOWN */
        return to == META_NODE_ACTIVE || to == META_NODE_REMOVED;
    case META_NODE_DOWN:
        return to == META_NODE_ACTIVE || to == META_NODE_DRAINING || to == META_NODE_REMOVED;
    case META_NODE_REMOVED:
        return false;
    }
    return false;
}

static size_t node_replicas(const meta_state *s, uint64_t node)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_parts; i++)
        n += meta_partition_has(&s->parts[i], node, NULL);
    return n;
}

static int need_active(const meta_state *s, uint64_t id, strata_err *err)
{
    const meta_node *n = meta_node_find(s, id);
    if (n == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "node %llu is unknown", (unsigned long long)id);
    if (n->state != META_NODE_ACTIVE)
        return strata_err_set(err, ERR_VALIDATION,
                              "node %llu is %s: only ACTIVE nodes take "
                              "new replicas",
                              (unsigned long long)id, meta_node_state_name(n->state));
    return 0;
}

/* ------------------------------------------------------------------ apply */

static int grow(void **arr, size_t *cap, size_t need, size_t elem, strata_err *err)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*arr, ncap * elem);
    if (p == NULL)
        return strata_err_set(err, ERR_NOMEM, "meta state: out of memory");
    *arr = p;
    *cap = ncap;
    return 0;
}

/* A node whose binary reads only formats below the cluster's cannot follow the log. */
static int refuse_too_old(const meta_state *s, uint64_t id, unsigned format, strata_err *err)
{
    return strata_err_set(err, ERR_VALIDATION,
                          "node %llu reads meta records up to format %u, and the cluster writes "
                          "format %u: it needs a newer binary",
                          (unsigned long long)id, format, s->format);
}

static int apply_node_register(meta_state *s, const meta_cmd *c, strata_err *err)
{
    const meta_node *in = &c->node;
    if (in->id == 0)
        return strata_err_set(err, ERR_VALIDATION, "node id 0 is reserved");
    if (meta_node_find(s, in->id))
        return strata_err_set(err, ERR_RESOURCE_IN_USE, "node %llu is already registered",
                              (unsigned long long)in->id);
    if (!label_ok(in->client_addr, META_ADDR_MAX) || !label_ok(in->peer_addr, META_ADDR_MAX))
        return strata_err_set(err, ERR_VALIDATION,
                              "node %llu: addresses must be 1..%d "
                              "printable bytes",
                              (unsigned long long)in->id, META_ADDR_MAX);
    if (!label_ok(in->az, META_LABEL_MAX) || !label_ok(in->host, META_LABEL_MAX))
        return strata_err_set(err, ERR_VALIDATION,
                              "node %llu: AZ and host must be 1..%d "
                              "printable bytes",
                              (unsigned long long)in->id, META_LABEL_MAX);
    if (in->state != META_NODE_JOINING && in->state != META_NODE_ACTIVE)
        return strata_err_set(err, ERR_VALIDATION,
                              "node %llu must register as JOINING or "
                              "ACTIVE",
                              (unsigned long long)in->id);
    uint8_t format = in->format ? in->format : 1;
    if (format < s->format)
        return refuse_too_old(s, in->id, format, err);
    if (s->n_nodes >= META_MAX_NODES)
        return strata_err_set(err, ERR_LIMIT_EXCEEDED, "too many nodes (max %d)", META_MAX_NODES);
    if (grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof(meta_node), err))
        return -1;
    size_t at = 0;
    while (at < s->n_nodes && s->nodes[at].id < in->id)
        at++;
    memmove(&s->nodes[at + 1], &s->nodes[at], (s->n_nodes - at) * sizeof(meta_node));
    s->nodes[at] = *in;
    s->nodes[at].state_since_ms = c->now_ms;
    s->nodes[at].format = format;
    s->n_nodes++;
    return 0;
}

/* *at := the index of node `id`, which must be registered and not REMOVED. */
static int live_node_index(const meta_state *s, uint64_t id, size_t *at, strata_err *err)
{
    *at = meta_node_index(s, id);
    if (*at == SIZE_MAX)
        return strata_err_set(err, ERR_NOT_FOUND, "node %llu is unknown", (unsigned long long)id);
    if (s->nodes[*at].state == META_NODE_REMOVED)
        return strata_err_set(err, ERR_VALIDATION, "node %llu is removed", (unsigned long long)id);
    return 0;
}

static int apply_node_address(meta_state *s, const meta_cmd *c, strata_err *err)
{
    size_t i;
    if (live_node_index(s, c->node.id, &i, err) < 0)
        return -1;
    if (!label_ok(c->node.client_addr, META_ADDR_MAX) ||
        !label_ok(c->node.peer_addr, META_ADDR_MAX))
        return strata_err_set(err, ERR_VALIDATION,
                              "node %llu: addresses must be 1..%d "
                              "printable bytes",
                              (unsigned long long)c->node.id, META_ADDR_MAX);
    memcpy(s->nodes[i].client_addr, c->node.client_addr, sizeof(s->nodes[i].client_addr));
    memcpy(s->nodes[i].peer_addr, c->node.peer_addr, sizeof(s->nodes[i].peer_addr));
    return 0;
}

static int apply_node_format(meta_state *s, const meta_cmd *c, strata_err *err)
{
    size_t i;
    if (live_node_index(s, c->node.id, &i, err) < 0)
        return -1;
    if (c->node.format == 0)
        return strata_err_set(err, ERR_VALIDATION, "meta format 0 does not exist");
    if (c->node.format < s->format)
        return refuse_too_old(s, c->node.id, c->node.format, err);
    s->nodes[i].format = c->node.format;
    return 0;
}

/* Raises the cluster's format once every node not REMOVED reads it; it never falls. */
static int apply_cluster_format(meta_state *s, const meta_cmd *c, strata_err *err)
{
    if (c->format <= s->format)
        return strata_err_set(err, ERR_VALIDATION, "the cluster writes meta format %u already",
                              s->format);
    if (c->format > meta_format_ready(s))
        return strata_err_set(err, ERR_BUSY,
                              "a node reads meta records up to format %u only, not %u",
                              meta_format_ready(s), c->format);
    s->format = c->format;
    return 0;
}

static int apply_node_state(meta_state *s, const meta_cmd *c, strata_err *err)
{
    size_t i = meta_node_index(s, c->node.id);
    if (i == SIZE_MAX)
        return strata_err_set(err, ERR_NOT_FOUND, "node %llu is unknown",
                              (unsigned long long)c->node.id);
    meta_node *n = &s->nodes[i];
    if (c->state_base != 0 && n->state != c->state_base)
        return strata_err_set(err, ERR_BUSY, "node %llu is %s now, not %s as this change planned",
                              (unsigned long long)n->id, meta_node_state_name(n->state),
                              meta_node_state_name(c->state_base));
    if (!state_ok((int)c->node.state) || !transition_ok(n->state, c->node.state))
        return strata_err_set(err, ERR_VALIDATION, "node %llu cannot go from %s to %s",
                              (unsigned long long)n->id, meta_node_state_name(n->state),
                              meta_node_state_name(c->node.state));
    if (c->node.state == META_NODE_REMOVED) {
        size_t held = node_replicas(s, n->id);
        if (held)
            return strata_err_set(err, ERR_VALIDATION,
                                  "node %llu still holds %zu replicas: "
                                  "drain or replace them first",
                                  (unsigned long long)n->id, held);
    }
    n->state = c->node.state;
    n->state_since_ms = c->now_ms;
    return 0;
}

static int check_new_part(const meta_state *s, const meta_cmd *c, size_t i, strata_err *err)
{
    const meta_partition *p = &c->parts[i];
    if (p->table_id != c->table_id)
        return strata_err_set(err, ERR_VALIDATION, "partition %llu belongs to table %u, not %u",
                              (unsigned long long)p->id, p->table_id, c->table_id);
    /* Stamped from a map where these ids were free, before a split or another table
     * took them: the proposer stamps again (ERR_RESOURCE_IN_USE, as for a table id). */
    if (i == 0 && p->id != 0 && p->id < s->next_partition_id)
        return strata_err_set(err, ERR_RESOURCE_IN_USE,
                              "partition id %llu is used (next free id %llu)",
                              (unsigned long long)p->id, (unsigned long long)s->next_partition_id);
    uint64_t min_id = i ? c->parts[i - 1].id + 1 : s->next_partition_id;
    if (p->id < min_id || p->id == 0 || (i && c->parts[i - 1].id == UINT64_MAX))
        return strata_err_set(err, ERR_VALIDATION,
                              "partition id %llu is used or out of order "
                              "(next free id %llu)",
                              (unsigned long long)p->id, (unsigned long long)min_id);
    /* Ids above next_partition_id are free, except once the counter saturates. */
    if (p->id == UINT64_MAX && meta_partition_find(s, p->id))
        return strata_err_set(err, ERR_RESOURCE_IN_USE, "partition id %llu is used",
                              (unsigned long long)p->id);
    for (uint32_t m = 1; m < p->n_members; m++)
        if (p->members[m - 1].node >= p->members[m].node)
            return strata_err_set(err, ERR_VALIDATION,
                                  "partition %llu: members must be "
                                  "distinct and in node-id order",
                                  (unsigned long long)p->id);
    uint64_t want_lo = i ? c->parts[i - 1].hash_hi + 1 : 0;
    if (p->hash_lo != want_lo || p->hash_hi < p->hash_lo ||
        (i + 1 == c->n_parts && p->hash_hi != UINT64_MAX) ||
        (i + 1 < c->n_parts && p->hash_hi == UINT64_MAX))
        return strata_err_set(err, ERR_VALIDATION,
                              "partition %llu: hash ranges must cover "
                              "0..2^64-1 in order without gaps",
                              (unsigned long long)p->id);
    if (p->n_members != META_REPLICAS || meta_partition_voters(p) != META_REPLICAS)
        return strata_err_set(err, ERR_VALIDATION, "partition %llu must have exactly %d voters",
                              (unsigned long long)p->id, META_REPLICAS);
    for (uint32_t m = 0; m < p->n_members; m++)
        if (need_active(s, p->members[m].node, err)) {
            /* The proposer placed the table on its copy of the map, where the node was
             * still ACTIVE (marked DOWN or DRAINING since): it places it again once its
             * copy holds this refusal (ERR_BUSY), rather than fail the CreateTable. */
            if (err->code == ERR_VALIDATION)
                err->code = ERR_BUSY;
            return -1;
        }
    return meta_partition_check(s, p, err);
}

static int apply_table_create(meta_state *s, const meta_cmd *c, strata_err *err)
{
    if (c->table_id == 0 || c->table_id < s->next_table_id ||
        table_index(s, c->table_id) != SIZE_MAX)
        return strata_err_set(err, ERR_RESOURCE_IN_USE, "table id %u is used (next free id %u)",
                              c->table_id, s->next_table_id);
    if (c->name_len == 0 || c->name_len > META_NAME_MAX || memchr(c->name, 0, c->name_len))
        return strata_err_set(err, ERR_VALIDATION, "table name must be 1..%d bytes without NUL",
                              META_NAME_MAX);
    if (meta_table_find_name(s, c->name, c->name_len))
        return strata_err_set(err, ERR_RESOURCE_IN_USE, "table %.*s exists already",
                              (int)c->name_len, c->name);
    if (c->schema_len > META_SCHEMA_MAX)
        return strata_err_set(err, ERR_VALIDATION, "table schema too large");
    if (c->n_parts == 0 || c->n_parts > META_MAX_TABLE_PARTS)
        return strata_err_set(err, ERR_VALIDATION, "a table needs 1..%d partitions",
                              META_MAX_TABLE_PARTS);
    if (s->n_tables >= META_MAX_TABLES)
        return strata_err_set(err, ERR_LIMIT_EXCEEDED, "too many tables (max %d)", META_MAX_TABLES);
    if (s->n_parts + c->n_parts > META_MAX_PARTITIONS)
        return strata_err_set(err, ERR_LIMIT_EXCEEDED, "too many partitions");
    for (size_t i = 0; i < c->n_parts; i++)
        if (check_new_part(s, c, i, err))
            return -1;
    uint8_t *schema = malloc(c->schema_len ? c->schema_len : 1);
    if (schema == NULL ||
        grow((void **)&s->tables, &s->cap_tables, s->n_tables + 1, sizeof(meta_table), err) ||
        grow((void **)&s->parts, &s->cap_parts, s->n_parts + c->n_parts, sizeof(meta_partition),
             err)) {
        free(schema);
        return strata_err_set(err, ERR_NOMEM, "meta state: out of memory");
    }
    if (c->schema_len)
        memcpy(schema, c->schema, c->schema_len);
    /* Ids only grow: the new table and its partitions sort after everything else. */
    meta_table *t = &s->tables[s->n_tables++];
    memset(t, 0, sizeof(*t));
    t->id = c->table_id;
    memcpy(t->name, c->name, c->name_len);
    t->name_len = c->name_len;
    t->schema = schema;
    t->schema_len = c->schema_len;
    t->created_ms = c->now_ms;
    for (size_t i = 0; i < c->n_parts; i++) {
        meta_partition *p = &s->parts[s->n_parts++];
        *p = c->parts[i];
        p->epoch = 1;
    }
    s->next_table_id = c->table_id + 1 > c->table_id ? c->table_id + 1 : c->table_id;
    uint64_t last = c->parts[c->n_parts - 1].id;
    s->next_partition_id = last == UINT64_MAX ? last : last + 1;
    return 0;
}

uint64_t meta_schema_hash(const meta_table *t)
{
    uint64_t h = XXH3_64bits(t->schema, t->schema_len);
    return h ? h : 1;
}

/* Replaces a table's schema blob (UpdateTable, tags): the partition map is unchanged. */
static int apply_table_schema(meta_state *s, const meta_cmd *c, strata_err *err)
{
    size_t i = table_index(s, c->table_id);
    if (i == SIZE_MAX)
        return strata_err_set(err, ERR_NOT_FOUND, "table %u does not exist", c->table_id);
    if (c->schema_base != 0 && meta_schema_hash(&s->tables[i]) != c->schema_base)
        return strata_err_set(err, ERR_BUSY, "table %u changed since this change was made",
                              c->table_id);
    if (c->schema_len > META_SCHEMA_MAX)
        return strata_err_set(err, ERR_VALIDATION, "schema of %zu bytes is over %u", c->schema_len,
                              META_SCHEMA_MAX);
    uint8_t *schema = malloc(c->schema_len ? c->schema_len : 1);
    if (schema == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    if (c->schema_len)
        memcpy(schema, c->schema, c->schema_len);
    free(s->tables[i].schema);
    s->tables[i].schema = schema;
    s->tables[i].schema_len = c->schema_len;
    return 0;
}

static int apply_table_drop(meta_state *s, const meta_cmd *c, strata_err *err)
{
    size_t i = table_index(s, c->table_id);
    if (i == SIZE_MAX)
        return strata_err_set(err, ERR_NOT_FOUND, "table %u does not exist", c->table_id);
    size_t n;
    const meta_partition *p = meta_table_partitions(s, c->table_id, &n);
    if (n) {
        size_t first = (size_t)(p - s->parts);
        memmove(&s->parts[first], &s->parts[first + n],
                (s->n_parts - first - n) * sizeof(meta_partition));
        s->n_parts -= n;
    }
    free(s->tables[i].schema);
    memmove(&s->tables[i], &s->tables[i + 1], (s->n_tables - i - 1) * sizeof(meta_table));
    s->n_tables--;
    return 0;
}

/* The partition a partition command names, with its epoch checked. */
static meta_partition *part_for_cmd(meta_state *s, const meta_cmd *c, bool check_epoch,
                                    strata_err *err)
{
    size_t i = part_index(s, c->partition_id);
    if (i == SIZE_MAX) {
        strata_err_set(err, ERR_NOT_FOUND, "partition %llu does not exist",
                       (unsigned long long)c->partition_id);
        return NULL;
    }
    if (check_epoch && s->parts[i].epoch != c->epoch) {
        strata_err_set(err, ERR_CONDITIONAL_CHECK, "partition %llu is at epoch %llu, not %llu",
                       (unsigned long long)c->partition_id, (unsigned long long)s->parts[i].epoch,
                       (unsigned long long)c->epoch);
        return NULL;
    }
    return &s->parts[i];
}

static int apply_set_leader(meta_state *s, const meta_cmd *c, strata_err *err)
{
    meta_partition *p = part_for_cmd(s, c, false, err);
    if (p == NULL)
        return -1;
    meta_role role;
    if (!meta_partition_has(p, c->node_id, &role) || role != META_VOTER)
        return strata_err_set(err, ERR_VALIDATION, "node %llu is not a voter of partition %llu",
                              (unsigned long long)c->node_id, (unsigned long long)p->id);
    const meta_node *n = meta_node_find(s, c->node_id);
    if (n->state != META_NODE_ACTIVE && n->state != META_NODE_DRAINING)
        return strata_err_set(err, ERR_VALIDATION, "node %llu is %s and cannot lead",
                              (unsigned long long)n->id, meta_node_state_name(n->state));
    p->leader_hint = c->node_id;
    return 0;
}

static int apply_split(meta_state *s, const meta_cmd *c, strata_err *err)
{
    meta_partition *p = part_for_cmd(s, c, true, err);
    if (p == NULL)
        return -1;
    if (c->split_hash <= p->hash_lo || c->split_hash > p->hash_hi)
        return strata_err_set(err, ERR_VALIDATION,
                              "split point %llu is not inside partition "
                              "%llu's range (%llu, %llu]",
                              (unsigned long long)c->split_hash, (unsigned long long)p->id,
                              (unsigned long long)p->hash_lo, (unsigned long long)p->hash_hi);
    if (c->new_partition_id < s->next_partition_id || c->new_partition_id == 0 ||
        part_index(s, c->new_partition_id) != SIZE_MAX)
        return strata_err_set(err, ERR_RESOURCE_IN_USE,
                              "partition id %llu is used (next free "
                              "id %llu)",
                              (unsigned long long)c->new_partition_id,
                              (unsigned long long)s->next_partition_id);
    size_t in_table = 0;
    if (s->n_parts >= META_MAX_PARTITIONS ||
        (meta_table_partitions(s, p->table_id, &in_table) != NULL &&
         in_table >= META_MAX_TABLE_PARTS))
        return strata_err_set(err, ERR_LIMIT_EXCEEDED, "too many partitions");
    size_t at = (size_t)(p - s->parts);
    if (grow((void **)&s->parts, &s->cap_parts, s->n_parts + 1, sizeof(meta_partition), err))
        return -1;
    p = &s->parts[at];
    meta_partition child = *p;
    child.id = c->new_partition_id;
    child.hash_lo = c->split_hash;
    child.epoch = p->epoch + 1;
    p->hash_hi = c->split_hash - 1;
    p->epoch++;
    memmove(&s->parts[at + 2], &s->parts[at + 1], (s->n_parts - at - 1) * sizeof(meta_partition));
    s->parts[at + 1] = child;
    s->n_parts++;
    s->next_partition_id = child.id == UINT64_MAX ? child.id : child.id + 1;
    return 0;
}

static void insert_member(meta_partition *p, uint64_t node, meta_role role)
{
    assert(p->n_members < META_MAX_MEMBERS);
    uint32_t at = 0;
    while (at < p->n_members && p->members[at].node < node)
        at++;
    memmove(&p->members[at + 1], &p->members[at], (p->n_members - at) * sizeof(meta_replica));
    p->members[at] = (meta_replica){.node = node, .role = role};
    p->n_members++;
}

static int apply_membership(meta_state *s, const meta_cmd *c, strata_err *err)
{
    meta_partition *p = part_for_cmd(s, c, true, err);
    if (p == NULL)
        return -1;
    meta_partition next = *p;
    meta_role role;
    bool member = meta_partition_has(p, c->node_id, &role);
    if (c->kind == META_CMD_ADD_LEARNER) {
        if (need_active(s, c->node_id, err))
            return -1;
        if (member)
            return strata_err_set(err, ERR_VALIDATION,
                                  "node %llu is already a member of "
                                  "partition %llu",
                                  (unsigned long long)c->node_id, (unsigned long long)p->id);
        if (p->n_members >= META_MAX_MEMBERS)
            return strata_err_set(err, ERR_VALIDATION, "partition %llu has %d members already",
                                  (unsigned long long)p->id, META_MAX_MEMBERS);
        insert_member(&next, c->node_id, META_LEARNER);
    } else if (c->kind == META_CMD_PROMOTE) {
        if (!member || role != META_LEARNER)
            return strata_err_set(err, ERR_VALIDATION,
                                  "node %llu is not a learner of "
                                  "partition %llu",
                                  (unsigned long long)c->node_id, (unsigned long long)p->id);
        if (need_active(s, c->node_id, err))
            return -1;
        for (uint32_t i = 0; i < next.n_members; i++)
            if (next.members[i].node == c->node_id)
                next.members[i].role = META_VOTER;
    } else {
        if (!member)
            return strata_err_set(err, ERR_VALIDATION,
                                  "node %llu is not a member of "
                                  "partition %llu",
                                  (unsigned long long)c->node_id, (unsigned long long)p->id);
        uint32_t w = 0;
        for (uint32_t i = 0; i < next.n_members; i++)
            if (next.members[i].node != c->node_id)
                next.members[w++] = next.members[i];
        next.n_members = w;
        if (next.leader_hint == c->node_id)
            next.leader_hint = 0;
    }
    if (meta_partition_check(s, &next, err))
        return -1;
    next.epoch++;
    *p = next;
    return 0;
}

/* The form of a meta group member list: known nodes in id order, at least one voter, at
 * most META_MAX_MEMBERS; a REMOVED node only as a voter (it was removed while it held the
 * seat, which the meta leader then takes away). */
static int group_form_check(const meta_state *s, const meta_partition *g, strata_err *err)
{
    if (g->n_members == 0 || g->n_members > META_MAX_MEMBERS)
        return strata_err_set(err, ERR_VALIDATION, "the meta group needs 1 to %d members, not %u",
                              META_MAX_MEMBERS, g->n_members);
    for (uint32_t i = 0; i < g->n_members; i++) {
        const meta_replica *r = &g->members[i];
        const meta_node *n = meta_node_find(s, r->node);
        if (n == NULL)
            return strata_err_set(err, ERR_NOT_FOUND, "meta group: node %llu is unknown",
                                  (unsigned long long)r->node);
        if (n->state == META_NODE_REMOVED && r->role == META_LEARNER)
            return strata_err_set(err, ERR_VALIDATION, "meta group: node %llu is REMOVED",
                                  (unsigned long long)r->node);
        if (r->role != META_VOTER && r->role != META_LEARNER)
            return strata_err_set(err, ERR_VALIDATION, "meta group: bad member role");
        if (i > 0 && g->members[i - 1].node >= r->node)
            return strata_err_set(err, ERR_VALIDATION, "meta group: members out of order");
    }
    if (meta_partition_voters(g) == 0)
        return strata_err_set(err, ERR_VALIDATION, "the meta group needs a voter");
    return 0;
}

/* After the first record, `next` differs from `cur` in exactly one member: a learner
 * added or promoted (on an ACTIVE node), or a member removed. */
static int group_step_check(const meta_state *s, const meta_partition *cur,
                            const meta_partition *next, strata_err *err)
{
    unsigned changes = 0;
    for (uint32_t i = 0; i < next->n_members; i++) {
        const meta_replica *r = &next->members[i];
        meta_role was;
        if (!meta_partition_has(cur, r->node, &was)) {
            if (r->role != META_LEARNER)
                return strata_err_set(err, ERR_VALIDATION,
                                      "meta group: node %llu must join as a learner",
                                      (unsigned long long)r->node);
        } else if (was == r->role) {
            continue;
        } else if (r->role == META_LEARNER) {
            return strata_err_set(err, ERR_VALIDATION, "meta group: voters are not demoted");
        }
        if (need_active(s, r->node, err))
            return -1;
        changes++;
    }
    for (uint32_t i = 0; i < cur->n_members; i++)
        changes += !meta_partition_has(next, cur->members[i].node, NULL);
    if (changes != 1)
        return strata_err_set(err, ERR_VALIDATION,
                              "meta group: one member changes at a time, not %u", changes);
    return 0;
}

static int apply_meta_members(meta_state *s, const meta_cmd *c, strata_err *err)
{
    if (c->n_parts != 1 || c->parts == NULL)
        return strata_err_set(err, ERR_VALIDATION, "meta group: one member list expected");
    if (c->epoch != s->group.epoch)
        return strata_err_set(err, ERR_CONDITIONAL_CHECK,
                              "the meta group is at epoch %llu, not %llu",
                              (unsigned long long)s->group.epoch, (unsigned long long)c->epoch);
    if (c->seats != 1 && c->seats != 3 && c->seats != 5)
        return strata_err_set(err, ERR_VALIDATION, "the meta group keeps 1, 3 or 5 voters, not %u",
                              c->seats);
    if (s->group.epoch != 0 && c->seats != s->seats)
        return strata_err_set(err, ERR_VALIDATION, "the meta group keeps %u voters, not %u",
                              s->seats, c->seats);
    meta_partition next = c->parts[0];
    if (group_form_check(s, &next, err) ||
        (s->group.epoch != 0 && group_step_check(s, &s->group, &next, err)))
        return -1;
    next.id = 0;
    next.table_id = 0;
    next.hash_lo = next.hash_hi = 0;
    next.leader_hint = 0;
    next.epoch = s->group.epoch + 1;
    s->group = next;
    s->seats = c->seats;
    return 0;
}

int meta_apply_cmd(meta_state *s, const meta_cmd *c, strata_err *err)
{
    switch (c->kind) {
    case META_CMD_NODE_REGISTER:
        return apply_node_register(s, c, err);
    case META_CMD_NODE_ADDRESS:
        return apply_node_address(s, c, err);
    case META_CMD_NODE_STATE:
        return apply_node_state(s, c, err);
    case META_CMD_TABLE_CREATE:
        return apply_table_create(s, c, err);
    case META_CMD_TABLE_DROP:
        return apply_table_drop(s, c, err);
    case META_CMD_TABLE_SCHEMA:
        return apply_table_schema(s, c, err);
    case META_CMD_SET_LEADER:
        return apply_set_leader(s, c, err);
    case META_CMD_SPLIT:
        return apply_split(s, c, err);
    case META_CMD_ADD_LEARNER:
    case META_CMD_PROMOTE:
    case META_CMD_REMOVE_REPLICA:
        return apply_membership(s, c, err);
    case META_CMD_META_MEMBERS:
        return apply_meta_members(s, c, err);
    case META_CMD_NODE_FORMAT:
        return apply_node_format(s, c, err);
    case META_CMD_CLUSTER_FORMAT:
        return apply_cluster_format(s, c, err);
    }
    return strata_err_set(err, ERR_VALIDATION, "unknown meta command %d", (int)c->kind);
}

int meta_apply(meta_state *s, const uint8_t *rec, size_t len, strata_err *err)
{
    meta_cmd c;
    if (meta_decode(rec, len, &c, err))
        return -1;
    int rc = meta_apply_cmd(s, &c, err);
    meta_cmd_free(&c);
    return rc;
}

int meta_fsm_apply(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                   void **result, size_t *result_len)
{
    (void)group;
    (void)index;
    strata_err err;
    strata_err_clear(&err);
    meta_apply((meta_state *)ctx, cmd, len, &err);
    size_t mlen = strlen(err.msg);
    uint8_t *res = malloc(1 + mlen);
    if (res != NULL) {
        res[0] = (uint8_t)err.code;
        memcpy(res + 1, err.msg, mlen);
    }
    *result = res;
    *result_len = res ? 1 + mlen : 0;
    return 0;
}

/* ------------------------------------------------------------------ records */

static void put_str(buf *b, const char *s, size_t n)
{
    buf_put_varint(b, n);
    buf_append(b, s, n);
}

static void put_members(buf *b, const meta_partition *p)
{
    buf_put_u8(b, (uint8_t)p->n_members);
    for (uint32_t m = 0; m < p->n_members; m++) {
        buf_put_varint(b, p->members[m].node);
        buf_put_u8(b, (uint8_t)p->members[m].role);
    }
}

/* The oldest format that reads `c` (see Formats in meta.h). */
static unsigned record_format(const meta_cmd *c)
{
    return c->kind == META_CMD_NODE_STATE && c->state_base != 0 ? 2 : 1;
}

int meta_encode(const meta_cmd *c, buf *out, strata_err *err)
{
    if ((int)c->kind < 1 || c->kind > META_CMD_KIND_MAX)
        return strata_err_set(err, ERR_VALIDATION, "unknown meta command %d", (int)c->kind);
    size_t start = out->len;
    const meta_node *n = &c->node;
    size_t cl = strnlen(n->client_addr, sizeof(n->client_addr));
    size_t pl = strnlen(n->peer_addr, sizeof(n->peer_addr));
    size_t al = strnlen(n->az, sizeof(n->az));
    size_t hl = strnlen(n->host, sizeof(n->host));
    if (cl > META_ADDR_MAX || pl > META_ADDR_MAX || al > META_LABEL_MAX || hl > META_LABEL_MAX)
        return strata_err_set(err, ERR_VALIDATION, "node labels must be NUL-terminated");
    buf_put_u8(out, (uint8_t)record_format(c));
    buf_put_u8(out, (uint8_t)c->kind);
    buf_put_varint(out, c->now_ms);
    switch (c->kind) {
    case META_CMD_NODE_REGISTER:
        buf_put_varint(out, n->id);
        put_str(out, n->client_addr, cl);
        put_str(out, n->peer_addr, pl);
        put_str(out, n->az, al);
        put_str(out, n->host, hl);
        buf_put_u8(out, (uint8_t)n->state);
        buf_put_u64be(out, n->incarnation);
        buf_put_u8(out, n->format);
        break;
    case META_CMD_NODE_ADDRESS:
        buf_put_varint(out, n->id);
        put_str(out, n->client_addr, cl);
        put_str(out, n->peer_addr, pl);
        break;
    case META_CMD_NODE_STATE:
        buf_put_varint(out, n->id);
        buf_put_u8(out, (uint8_t)n->state);
        if (c->state_base != 0)
            buf_put_u8(out, (uint8_t)c->state_base);
        break;
    case META_CMD_TABLE_CREATE:
        if (c->name_len > META_NAME_MAX || c->schema_len > META_SCHEMA_MAX ||
            c->n_parts > META_MAX_TABLE_PARTS)
            return strata_err_set(err, ERR_VALIDATION, "table create command over its bounds");
        buf_put_u32be(out, c->table_id);
        put_str(out, c->name, c->name_len);
        buf_put_varint(out, c->schema_len);
        buf_append(out, c->schema, c->schema_len);
        buf_put_varint(out, c->n_parts);
        for (size_t i = 0; i < c->n_parts; i++) {
            const meta_partition *p = &c->parts[i];
            if (p->n_members > META_MAX_MEMBERS)
                return strata_err_set(err, ERR_VALIDATION, "too many members");
            buf_put_varint(out, p->id);
            buf_put_u64be(out, p->hash_lo);
            buf_put_u64be(out, p->hash_hi);
            buf_put_varint(out, p->leader_hint);
            put_members(out, p);
        }
        break;
    case META_CMD_TABLE_DROP:
        buf_put_u32be(out, c->table_id);
        break;
    case META_CMD_TABLE_SCHEMA:
        if (c->schema_len > META_SCHEMA_MAX)
            return strata_err_set(err, ERR_VALIDATION, "table schema command over its bounds");
        buf_put_u32be(out, c->table_id);
        buf_put_varint(out, c->schema_len);
        buf_append(out, c->schema, c->schema_len);
        buf_put_u64be(out, c->schema_base);
        break;
    case META_CMD_SET_LEADER:
        buf_put_varint(out, c->partition_id);
        buf_put_varint(out, c->node_id);
        break;
    case META_CMD_SPLIT:
        buf_put_varint(out, c->partition_id);
        buf_put_varint(out, c->epoch);
        buf_put_u64be(out, c->split_hash);
        buf_put_varint(out, c->new_partition_id);
        break;
    case META_CMD_ADD_LEARNER:
    case META_CMD_PROMOTE:
    case META_CMD_REMOVE_REPLICA:
        buf_put_varint(out, c->partition_id);
        buf_put_varint(out, c->epoch);
        buf_put_varint(out, c->node_id);
        break;
    case META_CMD_META_MEMBERS:
        if (c->n_parts != 1 || c->parts == NULL || c->parts[0].n_members > META_MAX_MEMBERS)
            return strata_err_set(err, ERR_VALIDATION, "meta group command: one member list");
        buf_put_varint(out, c->epoch);
        buf_put_varint(out, c->seats);
        put_members(out, &c->parts[0]);
        break;
    case META_CMD_NODE_FORMAT:
        buf_put_varint(out, n->id);
        buf_put_u8(out, n->format);
        break;
    case META_CMD_CLUSTER_FORMAT:
        buf_put_varint(out, c->format);
        break;
    }
    if (!out->failed)
        buf_put_u64be(out, XXH3_64bits(out->data + start, out->len - start));
    if (out->failed)
        return strata_err_set(err, ERR_NOMEM, "meta record: buffer full or out of memory");
    return 0;
}

/* A string of at most `max` bytes, without NUL, copied NUL-terminated into dst. */
static bool rd_label(rd *r, char *dst, size_t max)
{
    uint64_t n = rd_varint(r);
    if (r->failed || n > max || n > rd_left(r)) {
        r->failed = true;
        return false;
    }
    const uint8_t *p = rd_bytes(r, (size_t)n);
    if (p == NULL || memchr(p, 0, (size_t)n)) {
        r->failed = true;
        return false;
    }
    memcpy(dst, p, (size_t)n);
    dst[n] = 0;
    return true;
}

static bool decode_members(rd *r, meta_partition *p)
{
    uint8_t n = rd_u8(r);
    if (n > META_MAX_MEMBERS)
        return false;
    p->n_members = n;
    for (uint32_t m = 0; m < n; m++) {
        p->members[m].node = rd_varint(r);
        uint8_t role = rd_u8(r);
        if (role != META_VOTER && role != META_LEARNER)
            return false;
        p->members[m].role = (meta_role)role;
    }
    return !r->failed;
}

static bool decode_body(rd *r, unsigned version, meta_cmd *c)
{
    meta_node *n = &c->node;
    switch (c->kind) {
    case META_CMD_NODE_REGISTER: {
        n->id = rd_varint(r);
        if (!rd_label(r, n->client_addr, META_ADDR_MAX) ||
            !rd_label(r, n->peer_addr, META_ADDR_MAX) || !rd_label(r, n->az, META_LABEL_MAX) ||
            !rd_label(r, n->host, META_LABEL_MAX))
            return false;
        uint8_t st = rd_u8(r);
        if (!state_ok(st))
            return false;
        n->state = (meta_node_state)st;
        /* Records written before the incarnation, or the format, existed end here. */
        if (rd_left(r) > 0)
            n->incarnation = rd_u64be(r);
        if (rd_left(r) > 0)
            n->format = rd_u8(r);
        return true;
    }
    case META_CMD_NODE_ADDRESS:
        n->id = rd_varint(r);
        return rd_label(r, n->client_addr, META_ADDR_MAX) &&
               rd_label(r, n->peer_addr, META_ADDR_MAX);
    case META_CMD_NODE_STATE: {
        n->id = rd_varint(r);
        uint8_t st = rd_u8(r);
        if (!state_ok(st))
            return false;
        n->state = (meta_node_state)st;
        /* Operators' commands end here; a state_base needs format 2. */
        if (version >= 2 && rd_left(r) > 0) {
            uint8_t base = rd_u8(r);
            if (!state_ok(base))
                return false;
            c->state_base = (meta_node_state)base;
        }
        return true;
    }
    case META_CMD_TABLE_CREATE: {
        c->table_id = rd_u32be(r);
        uint64_t nl = rd_varint(r);
        if (r->failed || nl > META_NAME_MAX || nl > rd_left(r))
            return false;
        c->name = (const char *)rd_bytes(r, (size_t)nl);
        c->name_len = (size_t)nl;
        uint64_t sl = rd_varint(r);
        if (r->failed || sl > META_SCHEMA_MAX || sl > rd_left(r))
            return false;
        c->schema = rd_bytes(r, (size_t)sl);
        c->schema_len = (size_t)sl;
        uint64_t np = rd_varint(r);
        /* Each partition takes at least 19 bytes (all varints one byte, no members): bound
         * before allocating. */
        if (r->failed || np > META_MAX_TABLE_PARTS || np * 19 > rd_left(r))
            return false;
        meta_partition *parts = calloc(np ? np : 1, sizeof(meta_partition));
        if (parts == NULL)
            return false;
        c->parts = parts;
        c->n_parts = (size_t)np;
        for (size_t i = 0; i < np; i++) {
            parts[i].id = rd_varint(r);
            parts[i].table_id = c->table_id;
            parts[i].hash_lo = rd_u64be(r);
            parts[i].hash_hi = rd_u64be(r);
            parts[i].leader_hint = rd_varint(r);
            parts[i].epoch = 1;
            if (!decode_members(r, &parts[i]))
                return false;
        }
        return true;
    }
    case META_CMD_TABLE_DROP:
        c->table_id = rd_u32be(r);
        return true;
    case META_CMD_TABLE_SCHEMA: {
        c->table_id = rd_u32be(r);
        uint64_t sl = rd_varint(r);
        if (r->failed || sl > META_SCHEMA_MAX || sl > rd_left(r))
            return false;
        c->schema = rd_bytes(r, (size_t)sl);
        c->schema_len = (size_t)sl;
        /* Records written before schema_base existed end here. */
        if (rd_left(r) > 0)
            c->schema_base = rd_u64be(r);
        return true;
    }
    case META_CMD_SET_LEADER:
        c->partition_id = rd_varint(r);
        c->node_id = rd_varint(r);
        return true;
    case META_CMD_SPLIT:
        c->partition_id = rd_varint(r);
        c->epoch = rd_varint(r);
        c->split_hash = rd_u64be(r);
        c->new_partition_id = rd_varint(r);
        return true;
    case META_CMD_ADD_LEARNER:
    case META_CMD_PROMOTE:
    case META_CMD_REMOVE_REPLICA:
        c->partition_id = rd_varint(r);
        c->epoch = rd_varint(r);
        c->node_id = rd_varint(r);
        return true;
    case META_CMD_META_MEMBERS: {
        c->epoch = rd_varint(r);
        uint64_t seats = rd_varint(r);
        if (r->failed || seats > 5)
            return false;
        c->seats = (uint32_t)seats;
        meta_partition *g = calloc(1, sizeof *g);
        if (g == NULL)
            return false;
        c->parts = g;
        c->n_parts = 1;
        return decode_members(r, g);
    }
    case META_CMD_NODE_FORMAT:
        n->id = rd_varint(r);
        n->format = rd_u8(r);
        return true;
    case META_CMD_CLUSTER_FORMAT: {
        uint64_t f = rd_varint(r);
        if (r->failed || f == 0 || f > UINT8_MAX)
            return false;
        c->format = (uint32_t)f;
        return true;
    }
    }
    return false;
}

int meta_decode(const uint8_t *rec, size_t len, meta_cmd *out, strata_err *err)
{
    memset(out, 0, sizeof(*out));
    if (len < 2 + 1 + 8)
        return strata_err_set(err, ERR_CORRUPT, "meta record too short (%zu bytes)", len);
    size_t plen = len - 8;
    rd tail;
    rd_init(&tail, rec + plen, 8);
    if (XXH3_64bits(rec, plen) != rd_u64be(&tail))
        return strata_err_set(err, ERR_CORRUPT, "meta record checksum mismatch");
    rd r;
    rd_init(&r, rec, plen);
    uint8_t version = rd_u8(&r);
    uint8_t kind = rd_u8(&r);
    if (version > META_FORMAT)
        return strata_err_set(err, ERR_CORRUPT,
                              "meta record of format %u, newer than this binary's (%d): a node "
                              "of a newer version wrote it",
                              version, META_FORMAT);
    if (version == 0)
        return strata_err_set(err, ERR_CORRUPT, "meta record of format 0");
    if (kind < 1 || kind > META_CMD_KIND_MAX)
        return strata_err_set(err, ERR_CORRUPT, "meta record kind %u unknown", kind);
    out->kind = (meta_cmd_kind)kind;
    out->now_ms = rd_varint(&r);
    if (!decode_body(&r, version, out) || r.failed || rd_left(&r) != 0) {
        meta_cmd_free(out);
        return strata_err_set(err, ERR_CORRUPT, "meta record (kind %u) is malformed", kind);
    }
    return 0;
}

unsigned meta_record_format(const uint8_t *rec, size_t len)
{
    return len > 0 ? rec[0] : 0;
}

void meta_cmd_free(meta_cmd *c)
{
    /* Decoded parts are heap; parts given by a caller to meta_encode are not ours, but
     * meta_cmd_free is only for decoded commands. */
    free((void *)c->parts);
    c->parts = NULL;
    c->n_parts = 0;
}

/* ------------------------------------------------------------------ state digest */

int meta_state_encode(const meta_state *s, buf *out, strata_err *err)
{
    size_t start = out->len;
    buf_put_u8(out, META_SNAPSHOT_VERSION);
    buf_put_u32be(out, s->next_table_id);
    buf_put_u64be(out, s->next_partition_id);
    buf_put_varint(out, s->n_nodes);
    for (size_t i = 0; i < s->n_nodes; i++) {
        const meta_node *n = &s->nodes[i];
        buf_put_varint(out, n->id);
        put_str(out, n->client_addr, strlen(n->client_addr));
        put_str(out, n->peer_addr, strlen(n->peer_addr));
        put_str(out, n->az, strlen(n->az));
        put_str(out, n->host, strlen(n->host));
        buf_put_u8(out, (uint8_t)n->state);
        buf_put_varint(out, n->state_since_ms);
    }
    buf_put_varint(out, s->n_tables);
    for (size_t i = 0; i < s->n_tables; i++) {
        const meta_table *t = &s->tables[i];
        buf_put_u32be(out, t->id);
        put_str(out, t->name, t->name_len);
        buf_put_varint(out, t->schema_len);
        buf_append(out, t->schema, t->schema_len);
        buf_put_varint(out, t->created_ms);
    }
    buf_put_varint(out, s->n_parts);
    for (size_t i = 0; i < s->n_parts; i++) {
        const meta_partition *p = &s->parts[i];
        buf_put_varint(out, p->id);
        buf_put_u32be(out, p->table_id);
        buf_put_u64be(out, p->hash_lo);
        buf_put_u64be(out, p->hash_hi);
        buf_put_varint(out, p->epoch);
        buf_put_varint(out, p->leader_hint);
        put_members(out, p);
    }
    /* The nodes' incarnations, after everything a state of an older version holds. */
    buf_put_varint(out, s->n_nodes);
    for (size_t i = 0; i < s->n_nodes; i++)
        buf_put_u64be(out, s->nodes[i].incarnation);
    /* The meta group's members, after the incarnations. */
    buf_put_varint(out, s->group.epoch);
    buf_put_varint(out, s->seats);
    put_members(out, &s->group);
    /* The formats, after the meta group's members. */
    buf_put_varint(out, s->format);
    buf_put_varint(out, s->n_nodes);
    for (size_t i = 0; i < s->n_nodes; i++)
        buf_put_u8(out, s->nodes[i].format);
    if (!out->failed)
        buf_put_u64be(out, XXH3_64bits(out->data + start, out->len - start));
    if (out->failed)
        return strata_err_set(err, ERR_NOMEM, "meta state encoding: out of memory");
    return 0;
}

static bool decode_nodes(rd *r, meta_state *s)
{
    uint64_t n = rd_varint(r);
    if (r->failed || n > META_MAX_NODES || n > rd_left(r))
        return false;
    s->nodes = calloc(n ? n : 1, sizeof(meta_node));
    if (s->nodes == NULL)
        return false;
    s->cap_nodes = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        meta_node *nd = &s->nodes[i];
        nd->id = rd_varint(r);
        if (!rd_label(r, nd->client_addr, META_ADDR_MAX) ||
            !rd_label(r, nd->peer_addr, META_ADDR_MAX) || !rd_label(r, nd->az, META_LABEL_MAX) ||
            !rd_label(r, nd->host, META_LABEL_MAX))
            return false;
        uint8_t st = rd_u8(r);
        nd->state_since_ms = rd_varint(r);
        if (r->failed || !state_ok(st) || nd->id == 0 || (i && nd->id <= s->nodes[i - 1].id))
            return false;
        nd->state = (meta_node_state)st;
        s->n_nodes++;
    }
    return true;
}

static bool decode_tables(rd *r, meta_state *s)
{
    uint64_t n = rd_varint(r);
    if (r->failed || n > META_MAX_TABLES || n > rd_left(r))
        return false;
    s->tables = calloc(n ? n : 1, sizeof(meta_table));
    if (s->tables == NULL)
        return false;
    s->cap_tables = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        meta_table *t = &s->tables[i];
        t->id = rd_u32be(r);
        uint64_t nl = rd_varint(r);
        if (r->failed || nl == 0 || nl > META_NAME_MAX || nl > rd_left(r))
            return false;
        memcpy(t->name, rd_bytes(r, (size_t)nl), (size_t)nl);
        t->name_len = (size_t)nl;
        uint64_t sl = rd_varint(r);
        if (r->failed || sl > META_SCHEMA_MAX || sl > rd_left(r))
            return false;
        t->schema = malloc(sl ? sl : 1);
        if (t->schema == NULL)
            return false;
        s->n_tables++;
        memcpy(t->schema, rd_bytes(r, (size_t)sl), (size_t)sl);
        t->schema_len = (size_t)sl;
        t->created_ms = rd_varint(r);
        if (r->failed || t->id == 0 || !id_below(t->id, s->next_table_id) ||
            memchr(t->name, 0, nl) || (i && t->id <= s->tables[i - 1].id))
            return false;
        for (size_t j = 0; j < i; j++)
            if (s->tables[j].name_len == nl && memcmp(s->tables[j].name, t->name, nl) == 0)
                return false;
    }
    return true;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A state encoded before the incarnations existed ends before them: all 0 then. */
static bool decode_incarnations(rd *r, meta_state *s)
{
    if (rd_left(r) == 0)
        return true;
    uint64_t n = rd_varint(r);
    if (r->failed || n != s->n_nodes || n * 8 > rd_left(r))
        return false;
    for (size_t i = 0; i < n; i++)
        s->nodes[i].incarnation = rd_u64be(r);
    return !r->failed;
}

/* A state encoded before the meta group's members were recorded ends before them. */
static bool decode_group(rd *r, meta_state *s)
{
    if (rd_left(r) == 0)
        return true;
    s->group.epoch = rd_varint(r);
    uint64_t seats = rd_varint(r);
    if (r->failed || seats > 5)
        return false;
    s->seats = (uint32_t)seats;
    return decode_members(r, &s->group);
}

/* A state encoded before formats existed ends before them: format 1 everywhere then. */
static bool decode_formats(rd *r, meta_state *s)
{
    for (size_t i = 0; i < s->n_nodes; i++)
        s->nodes[i].format = 1;
    if (rd_left(r) == 0)
        return true;
    uint64_t f = rd_varint(r);
    uint64_t n = rd_varint(r);
    if (r->failed || f == 0 || f > UINT8_MAX || n != s->n_nodes || n > rd_left(r))
        return false;
    s->format = (uint32_t)f;
    for (size_t i = 0; i < n; i++)
        s->nodes[i].format = rd_u8(r);
    return !r->failed;
}

static bool decode_parts(rd *r, meta_state *s)
{
    uint64_t n = rd_varint(r);
    /* Each partition takes at least 24 bytes: bound before allocating. */
    if (r->failed || n > META_MAX_PARTITIONS || n * 24 > rd_left(r))
        return false;
    s->parts = calloc(n ? n : 1, sizeof(meta_partition));
    uint64_t *ids = calloc(n ? n : 1, sizeof(uint64_t));
    bool ok = s->parts != NULL && ids != NULL;
    s->cap_parts = n ? n : 1;
    for (size_t i = 0; ok && i < n; i++) {
        meta_partition *p = &s->parts[i];
        p->id = rd_varint(r);
        p->table_id = rd_u32be(r);
        p->hash_lo = rd_u64be(r);
        p->hash_hi = rd_u64be(r);
        p->epoch = rd_varint(r);
        p->leader_hint = rd_varint(r);
        ok = decode_members(r, p) && p->id != 0;
        if (ok && i)
            ok = p->table_id > p[-1].table_id ||
                 (p->table_id == p[-1].table_id && p->hash_lo > p[-1].hash_lo);
        if (ok)
            ids[s->n_parts++] = p->id;
    }
    if (ok && n) {
        qsort(ids, n, sizeof(uint64_t), cmp_u64);
        for (size_t i = 1; i < n && ok; i++)
            ok = ids[i] != ids[i - 1];
    }
    free(ids);
    return ok;
}

meta_state *meta_state_decode(const uint8_t *data, size_t len, strata_err *err)
{
    if (len < 1 + 4 + 8 + 3 + 8) {
        strata_err_set(err, ERR_CORRUPT, "meta snapshot too short (%zu bytes)", len);
        return NULL;
    }
    size_t plen = len - 8;
    rd tail;
    rd_init(&tail, data + plen, 8);
    if (XXH3_64bits(data, plen) != rd_u64be(&tail)) {
        strata_err_set(err, ERR_CORRUPT, "meta snapshot checksum mismatch");
        return NULL;
    }
    meta_state *s = meta_new();
    if (s == NULL) {
        strata_err_set(err, ERR_NOMEM, "meta state: out of memory");
        return NULL;
    }
    rd r;
    rd_init(&r, data, plen);
    bool ok = rd_u8(&r) == META_SNAPSHOT_VERSION;
    s->next_table_id = rd_u32be(&r);
    s->next_partition_id = rd_u64be(&r);
    ok = ok && decode_nodes(&r, s) && decode_tables(&r, s) && decode_parts(&r, s) &&
         decode_incarnations(&r, s) && decode_group(&r, s) && decode_formats(&r, s) && !r.failed &&
         rd_left(&r) == 0;
    strata_err why;
    strata_err_clear(&why);
    if (!ok || meta_check(s, &why)) {
        strata_err_set(err, ERR_CORRUPT, "meta snapshot is malformed%s%s", why.msg[0] ? ": " : "",
                       why.msg);
        meta_free(s);
        return NULL;
    }
    return s;
}

int meta_fsm_snapshot(void *ctx, uint64_t group, void **data, size_t *len)
{
    (void)group;
    buf b;
    buf_init(&b, 0);
    if (meta_state_encode((const meta_state *)ctx, &b, NULL)) {
        buf_free(&b);
        return -1;
    }
    *data = buf_steal(&b, len);
    return *data ? 0 : -1;
}

int meta_fsm_restore(void *ctx, uint64_t group, const void *data, size_t len)
{
    (void)group;
    meta_state *fresh = meta_state_decode(data, len, NULL);
    if (fresh == NULL)
        return -1;
    meta_state *s = ctx, old = *s;
    *s = *fresh;
    *fresh = old;
    meta_free(fresh); /* frees the old contents */
    return 0;
}

uint64_t meta_state_digest(const meta_state *s)
{
    buf b;
    buf_init(&b, 0);
    uint64_t d = 0;
    if (meta_state_encode(s, &b, NULL) == 0)
        d = XXH3_64bits(b.data, b.len);
    buf_free(&b);
    return d;
}

int meta_check(const meta_state *s, strata_err *err)
{
    strata_err why;
    strata_err_clear(&why);
    if (s->group.epoch == 0 ? s->group.n_members != 0 || s->seats != 0
                            : (s->seats != 1 && s->seats != 3 && s->seats != 5) ||
                                  group_form_check(s, &s->group, &why) != 0)
        return strata_err_set(err, ERR_INTERNAL, "meta group: bad members%s%s",
                              why.msg[0] ? ": " : "", why.msg);
    for (size_t i = 1; i < s->n_nodes; i++)
        if (s->nodes[i - 1].id >= s->nodes[i].id)
            return strata_err_set(err, ERR_INTERNAL, "nodes out of order");
    for (size_t i = 0; i < s->n_nodes; i++) {
        const meta_node *n = &s->nodes[i];
        if (!label_ok(n->client_addr, META_ADDR_MAX) || !label_ok(n->peer_addr, META_ADDR_MAX) ||
            !label_ok(n->az, META_LABEL_MAX) || !label_ok(n->host, META_LABEL_MAX))
            return strata_err_set(err, ERR_INTERNAL, "node %llu: bad address or label",
                                  (unsigned long long)n->id);
        if (n->format == 0 || (n->state != META_NODE_REMOVED && n->format < s->format))
            return strata_err_set(err, ERR_INTERNAL,
                                  "node %llu reads meta format %u, the cluster writes %u",
                                  (unsigned long long)n->id, n->format, s->format);
    }
    if (s->format == 0)
        return strata_err_set(err, ERR_INTERNAL, "meta format 0");
    for (size_t i = 1; i < s->n_tables; i++)
        if (s->tables[i - 1].id >= s->tables[i].id)
            return strata_err_set(err, ERR_INTERNAL, "tables out of order");
    for (size_t i = 0; i < s->n_tables; i++)
        if (!id_below(s->tables[i].id, s->next_table_id))
            return strata_err_set(err, ERR_INTERNAL, "table id %u not below the counter",
                                  s->tables[i].id);
    for (size_t i = 0; i < s->n_tables; i++) {
        size_t n;
        const meta_partition *p = meta_table_partitions(s, s->tables[i].id, &n);
        if (n == 0 || p[0].hash_lo != 0 || p[n - 1].hash_hi != UINT64_MAX)
            return strata_err_set(err, ERR_INTERNAL,
                                  "table %u: partitions do not cover the "
                                  "hash space",
                                  s->tables[i].id);
        for (size_t j = 1; j < n; j++)
            if (p[j].hash_lo != p[j - 1].hash_hi + 1 || p[j].hash_lo > p[j].hash_hi)
                return strata_err_set(err, ERR_INTERNAL, "table %u: hash ranges broken",
                                      s->tables[i].id);
    }
    for (size_t i = 0; i < s->n_parts; i++) {
        const meta_partition *p = &s->parts[i];
        if (table_index(s, p->table_id) == SIZE_MAX)
            return strata_err_set(err, ERR_INTERNAL, "partition %llu without table",
                                  (unsigned long long)p->id);
        if (!id_below(p->id, s->next_partition_id) || p->epoch == 0)
            return strata_err_set(err, ERR_INTERNAL, "partition %llu: bad id or epoch",
                                  (unsigned long long)p->id);
        if (i &&
            (p->table_id < s->parts[i - 1].table_id ||
             (p->table_id == s->parts[i - 1].table_id && p->hash_lo <= s->parts[i - 1].hash_lo)))
            return strata_err_set(err, ERR_INTERNAL, "partitions out of order");
        for (uint32_t m = 1; m < p->n_members; m++)
            if (p->members[m - 1].node >= p->members[m].node)
                return strata_err_set(err, ERR_INTERNAL, "partition %llu: members out of order",
                                      (unsigned long long)p->id);
        for (uint32_t m = 0; m < p->n_members; m++) {
            const meta_node *n = meta_node_find(s, p->members[m].node);
            if (n != NULL && n->state == META_NODE_REMOVED)
                return strata_err_set(err, ERR_INTERNAL, "partition %llu on a removed node",
                                      (unsigned long long)p->id);
        }
        if (meta_partition_check(s, p, err))
            return -1;
    }
    return 0;
}
