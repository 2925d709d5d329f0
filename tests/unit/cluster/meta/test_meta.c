/*
 * Unit tests of the meta state machine (cluster/meta.h): record encoding, every command,
 * every rule and the errors of invalid transitions, all-or-nothing apply, determinism.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "cluster/meta.h"

/* Encodes and applies `c`; returns meta_apply's result, error in *err. */
static int run(meta_state *s, const meta_cmd *c, strata_err *err)
{
    buf b;
    buf_init(&b, 0);
    strata_err_clear(err);
    int rc = meta_encode(c, &b, err);
    assert_int_equal(rc, 0);
    rc = meta_apply(s, b.data, b.len, err);
    buf_free(&b);
    return rc;
}

/* The registration of node `id` (no incarnation, no format). */
static meta_cmd reg_cmd(uint64_t id, const char *az, const char *host, meta_node_state st)
{
    meta_cmd c = {.kind = META_CMD_NODE_REGISTER, .now_ms = 100 + id};
    c.node.id = id;
    snprintf(c.node.client_addr, sizeof(c.node.client_addr), "10.0.0.%llu:8000",
             (unsigned long long)id);
    snprintf(c.node.peer_addr, sizeof(c.node.peer_addr), "10.0.0.%llu:7000",
             (unsigned long long)id);
    snprintf(c.node.az, sizeof(c.node.az), "%s", az);
    snprintf(c.node.host, sizeof(c.node.host), "%s", host);
    c.node.state = st;
    return c;
}

static int reg(meta_state *s, uint64_t id, const char *az, const char *host, meta_node_state st)
{
    meta_cmd c = reg_cmd(id, az, host, st);
    strata_err err;
    return run(s, &c, &err);
}

static int set_state(meta_state *s, uint64_t id, meta_node_state st, uint64_t now, strata_err *err)
{
    meta_cmd c = {.kind = META_CMD_NODE_STATE, .now_ms = now};
    c.node.id = id;
    c.node.state = st;
    return run(s, &c, err);
}

static void part(meta_partition *p, uint64_t id, uint32_t table, uint64_t lo, uint64_t hi,
                 uint64_t a, uint64_t b, uint64_t c)
{
    memset(p, 0, sizeof(*p));
    p->id = id;
    p->table_id = table;
    p->hash_lo = lo;
    p->hash_hi = hi;
    p->n_members = 3;
    p->members[0] = (meta_replica){a, META_VOTER};
    p->members[1] = (meta_replica){b, META_VOTER};
    p->members[2] = (meta_replica){c, META_VOTER};
    p->leader_hint = a;
}

static int create(meta_state *s, uint32_t id, const char *name, const meta_partition *parts,
                  size_t n, strata_err *err)
{
    meta_cmd c = {.kind = META_CMD_TABLE_CREATE,
                  .now_ms = 5000,
                  .table_id = id,
                  .name = name,
                  .name_len = strlen(name),
                  .schema = (const uint8_t *)"schema",
                  .schema_len = 6,
                  .parts = parts,
                  .n_parts = n};
    return run(s, &c, err);
}

static int pcmd(meta_state *s, meta_cmd_kind kind, uint64_t pid, uint64_t epoch, uint64_t node,
                strata_err *err)
{
    meta_cmd c = {.kind = kind, .partition_id = pid, .epoch = epoch, .node_id = node};
    return run(s, &c, err);
}

/* Nodes 1..6: AZ a (1,4), b (2,5), c (3,6); host hN per node except 4 shares host "h1". */
static meta_state *cluster6(void)
{
    meta_state *s = meta_new();
    assert_non_null(s);
    const char *az[] = {"a", "b", "c"};
    for (uint64_t i = 1; i <= 6; i++) {
        char host[16];
        snprintf(host, sizeof(host), "h%llu", (unsigned long long)(i == 4 ? 1 : i));
        assert_int_equal(reg(s, i, az[(i - 1) % 3], host, META_NODE_ACTIVE), 0);
    }
    return s;
}

/* Table 1 with two partitions (ids 1, 2) on nodes 1,2,3. */
static meta_state *cluster_with_table(void)
{
    meta_state *s = cluster6();
    meta_partition p[2];
    part(&p[0], 1, 1, 0, 999, 1, 2, 3);
    part(&p[1], 2, 1, 1000, UINT64_MAX, 1, 2, 3);
    strata_err err;
    assert_int_equal(create(s, 1, "t1", p, 2, &err), 0);
    return s;
}

static void test_record_roundtrip(void **state)
{
    (void)state;
    meta_partition p[1];
    part(&p[0], 7, 3, 0, UINT64_MAX, 1, 2, 3);
    meta_cmd cmds[10] = {
        {.kind = META_CMD_NODE_REGISTER, .now_ms = 1},
        {.kind = META_CMD_NODE_ADDRESS, .now_ms = 2},
        {.kind = META_CMD_NODE_STATE, .now_ms = 3},
        {.kind = META_CMD_TABLE_CREATE,
         .table_id = 3,
         .name = "tbl",
         .name_len = 3,
         .schema = (const uint8_t *)"xy",
         .schema_len = 2,
         .parts = p,
         .n_parts = 1},
        {.kind = META_CMD_TABLE_DROP, .table_id = 9},
        {.kind = META_CMD_SET_LEADER, .partition_id = 4, .node_id = 5},
        {.kind = META_CMD_SPLIT,
         .partition_id = 4,
         .epoch = 6,
         .split_hash = 1ull << 63,
         .new_partition_id = 77},
        {.kind = META_CMD_ADD_LEARNER, .partition_id = 4, .epoch = 2, .node_id = 9},
        {.kind = META_CMD_PROMOTE, .partition_id = 4, .epoch = 3, .node_id = 9},
        {.kind = META_CMD_REMOVE_REPLICA, .partition_id = 4, .epoch = 4, .node_id = 1},
    };
    for (int k = 0; k < 3; k++) {
        cmds[k].node.id = 42;
        strcpy(cmds[k].node.client_addr, "1.2.3.4:8000");
        strcpy(cmds[k].node.peer_addr, "1.2.3.4:7000");
        strcpy(cmds[k].node.az, "az-1");
        strcpy(cmds[k].node.host, "host-1");
        cmds[k].node.state = META_NODE_DRAINING;
    }
    cmds[0].node.incarnation = 0x0123456789abcdefull;
    for (size_t k = 0; k < 10; k++) {
        buf b;
        buf_init(&b, 0);
        strata_err err;
        assert_int_equal(meta_encode(&cmds[k], &b, &err), 0);
        meta_cmd d;
        assert_int_equal(meta_decode(b.data, b.len, &d, &err), 0);
        assert_int_equal(d.kind, cmds[k].kind);
        assert_int_equal(d.now_ms, cmds[k].now_ms);
        assert_int_equal(d.partition_id, cmds[k].partition_id);
        assert_int_equal(d.epoch, cmds[k].epoch);
        assert_int_equal(d.node_id, cmds[k].node_id);
        assert_int_equal(d.split_hash, cmds[k].split_hash);
        assert_int_equal(d.new_partition_id, cmds[k].new_partition_id);
        assert_int_equal(d.table_id, cmds[k].table_id);
        if (k < 3)
            assert_int_equal(d.node.id, 42);
        if (k < 2) {
            assert_string_equal(d.node.client_addr, "1.2.3.4:8000");
            assert_string_equal(d.node.peer_addr, "1.2.3.4:7000");
        }
        if (k == 0) {
            assert_string_equal(d.node.az, "az-1");
            assert_string_equal(d.node.host, "host-1");
        }
        if (k == 0 || k == 2)
            assert_int_equal(d.node.state, META_NODE_DRAINING);
        if (k == 0)
            assert_int_equal(d.node.incarnation, 0x0123456789abcdefull);
        if (k == 3) {
            assert_int_equal(d.name_len, 3);
            assert_memory_equal(d.name, "tbl", 3);
            assert_int_equal(d.schema_len, 2);
            assert_int_equal(d.n_parts, 1);
            assert_int_equal(d.parts[0].id, 7);
            assert_int_equal(d.parts[0].hash_hi, UINT64_MAX);
            assert_int_equal(d.parts[0].n_members, 3);
            assert_int_equal(d.parts[0].members[2].node, 3);
            assert_int_equal(d.parts[0].leader_hint, 1);
        }
        meta_cmd_free(&d);
        /* Every flipped byte and every truncation is caught. */
        for (size_t i = 0; i < b.len; i++) {
            b.data[i] ^= 0x5a;
            assert_int_equal(meta_decode(b.data, b.len, &d, &err), -1);
            assert_int_equal(err.code, ERR_CORRUPT);
            b.data[i] ^= 0x5a;
        }
        for (size_t n = 0; n < b.len; n++)
            assert_int_equal(meta_decode(b.data, n, &d, &err), -1);
        buf_free(&b);
    }
}

static void test_decode_rejects_bad_fields(void **state)
{
    (void)state;
    /* A well-checksummed record with a bad kind, bad format, bad state, trailing bytes. */
    const uint8_t bodies[][8] = {
        {1, 0, 0},                           /* kind 0 */
        {1, META_CMD_KIND_MAX + 1, 0},       /* kind past the last */
        {META_FORMAT + 1, 5, 0, 0, 0, 0, 1}, /* a format newer than this binary's */
        {0, 5, 0, 0, 0, 0, 1},               /* format 0 */
        {1, 3, 0, 1, 9},                     /* NODE_STATE with state 9 */
        {1, 5, 0, 0, 0, 0, 1, 7},            /* TABLE_DROP with a trailing byte */
        {1, 3, 0, 1, 2, 2},                  /* format 1 NODE_STATE with a base */
    };
    const size_t lens[] = {3, 3, 7, 7, 5, 8, 6};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        buf b;
        buf_init(&b, 0);
        buf_append(&b, bodies[k], lens[k]);
        buf_put_u64be(&b, XXH3_64bits(b.data, b.len));
        meta_cmd d;
        strata_err err;
        assert_int_equal(meta_decode(b.data, b.len, &d, &err), -1);
        assert_int_equal(err.code, ERR_CORRUPT);
        buf_free(&b);
    }
    meta_state *s = meta_new();
    strata_err err;
    assert_int_equal(meta_apply(s, (const uint8_t *)"garbage-garbage", 15, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    meta_free(s);
}

static void test_node_register(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    assert_int_equal(reg(s, 5, "az1", "h5", META_NODE_JOINING), 0);
    assert_int_equal(reg(s, 2, "az2", "h2", META_NODE_ACTIVE), 0);
    const meta_node *n = meta_node_find(s, 5);
    assert_non_null(n);
    assert_string_equal(n->az, "az1");
    assert_string_equal(n->host, "h5");
    assert_string_equal(n->client_addr, "10.0.0.5:8000");
    assert_int_equal(n->state, META_NODE_JOINING);
    assert_int_equal(n->state_since_ms, 105);
    assert_int_equal(meta_node_count(s), 2);
    assert_int_equal(meta_node_at(s, 0)->id, 2); /* id order */
    assert_null(meta_node_find(s, 3));

    meta_cmd c = {.kind = META_CMD_NODE_REGISTER};
    strcpy(c.node.client_addr, "a:1");
    strcpy(c.node.peer_addr, "a:2");
    strcpy(c.node.az, "z");
    strcpy(c.node.host, "h");
    c.node.state = META_NODE_ACTIVE;
    strata_err err;
    c.node.id = 5; /* duplicate */
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_RESOURCE_IN_USE);
    c.node.id = 0;
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    c.node.id = 9;
    c.node.state = META_NODE_DRAINING;
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_non_null(strstr(err.msg, "JOINING or ACTIVE"));
    c.node.state = META_NODE_ACTIVE;
    strcpy(c.node.az, "");
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    strcpy(c.node.az, "z z");
    assert_int_equal(run(s, &c, &err), -1);
    strcpy(c.node.az, "z");
    strcpy(c.node.peer_addr, "");
    assert_int_equal(run(s, &c, &err), -1);
    strcpy(c.node.peer_addr, "a:2");
    assert_int_equal(run(s, &c, &err), 0);
    assert_int_equal(meta_node_count(s), 3);
    meta_free(s);
}

static void test_node_address(void **state)
{
    (void)state;
    meta_state *s = cluster6();
    meta_cmd c = {.kind = META_CMD_NODE_ADDRESS};
    c.node.id = 3;
    strcpy(c.node.client_addr, "new:8000");
    strcpy(c.node.peer_addr, "new:7000");
    strata_err err;
    assert_int_equal(run(s, &c, &err), 0);
    assert_string_equal(meta_node_find(s, 3)->client_addr, "new:8000");
    assert_string_equal(meta_node_find(s, 3)->peer_addr, "new:7000");
    assert_string_equal(meta_node_find(s, 3)->az, "c"); /* AZ and host never change */
    c.node.id = 99;
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    c.node.id = 3;
    strcpy(c.node.client_addr, "bad\x01");
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    meta_free(s);
}

static void test_node_transitions(void **state)
{
    (void)state;
    /* allowed[from][to], states 1..5 */
    static const bool allowed[6][6] = {
        [META_NODE_JOINING] =
            {[META_NODE_ACTIVE] = 1, [META_NODE_DOWN] = 1, [META_NODE_REMOVED] = 1},
        [META_NODE_ACTIVE] = {[META_NODE_DRAINING] = 1, [META_NODE_DOWN] = 1},
        [META_NODE_DRAINING] = {[META_NODE_ACTIVE] = 1, [META_NODE_REMOVED] = 1},
        [META_NODE_DOWN] =
            {[META_NODE_ACTIVE] = 1, [META_NODE_DRAINING] = 1, [META_NODE_REMOVED] = 1},
    };
    /* Paths that reach each state from JOINING. */
    static const meta_node_state path[6][3] = {
        [META_NODE_JOINING] = {0},
        [META_NODE_ACTIVE] = {META_NODE_ACTIVE},
        [META_NODE_DRAINING] = {META_NODE_ACTIVE, META_NODE_DRAINING},
        [META_NODE_DOWN] = {META_NODE_DOWN},
        [META_NODE_REMOVED] = {META_NODE_REMOVED},
    };
    for (int from = 1; from <= 5; from++) {
        for (int to = 1; to <= 5; to++) {
            meta_state *s = meta_new();
            assert_int_equal(reg(s, 1, "a", "h", META_NODE_JOINING), 0);
            strata_err err;
            for (int k = 0; k < 3 && path[from][k]; k++)
                assert_int_equal(set_state(s, 1, path[from][k], 10, &err), 0);
            assert_int_equal(meta_node_find(s, 1)->state, from);
            int rc = set_state(s, 1, (meta_node_state)to, 777, &err);
            if (allowed[from][to]) {
                assert_int_equal(rc, 0);
                assert_int_equal(meta_node_find(s, 1)->state, to);
                assert_int_equal(meta_node_find(s, 1)->state_since_ms, 777);
            } else {
                assert_int_equal(rc, -1);
                assert_int_equal(err.code, ERR_VALIDATION);
                assert_non_null(strstr(err.msg, "cannot go from"));
                assert_int_equal(meta_node_find(s, 1)->state, from);
            }
            meta_free(s);
        }
    }
    meta_state *s = meta_new();
    strata_err err;
    assert_int_equal(set_state(s, 4, META_NODE_ACTIVE, 1, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    meta_free(s);
}

static void test_remove_needs_no_replicas(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    strata_err err;
    assert_int_equal(set_state(s, 1, META_NODE_DRAINING, 1, &err), 0);
    assert_int_equal(set_state(s, 1, META_NODE_REMOVED, 2, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_non_null(strstr(err.msg, "still holds 2 replicas"));
    assert_int_equal(set_state(s, 5, META_NODE_DRAINING, 1, &err), 0);
    assert_int_equal(set_state(s, 5, META_NODE_REMOVED, 2, &err), 0);
    assert_int_equal(reg(s, 5, "b", "h5", META_NODE_ACTIVE), -1); /* ids are never reused */
    meta_free(s);
}

static void test_table_create_and_queries(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    const meta_table *t = meta_table_find(s, 1);
    assert_non_null(t);
    assert_int_equal(t->name_len, 2);
    assert_memory_equal(t->schema, "schema", 6);
    assert_ptr_equal(meta_table_find_name(s, "t1", 2), t);
    assert_null(meta_table_find_name(s, "t2", 2));
    size_t n;
    const meta_partition *p = meta_table_partitions(s, 1, &n);
    assert_int_equal(n, 2);
    assert_int_equal(p[0].epoch, 1);
    assert_int_equal(p[1].hash_lo, 1000);
    assert_ptr_equal(meta_partition_for_hash(s, 1, 0), &p[0]);
    assert_ptr_equal(meta_partition_for_hash(s, 1, 999), &p[0]);
    assert_ptr_equal(meta_partition_for_hash(s, 1, 1000), &p[1]);
    assert_ptr_equal(meta_partition_for_hash(s, 1, UINT64_MAX), &p[1]);
    assert_null(meta_partition_for_hash(s, 2, 5));
    assert_ptr_equal(meta_partition_find(s, 2), &p[1]);
    assert_int_equal(meta_next_table_id(s), 2);
    assert_int_equal(meta_next_partition_id(s), 3);
    assert_int_equal(meta_partition_voters(&p[0]), 3);
    strata_err err;
    assert_int_equal(meta_check(s, &err), 0);
    meta_free(s);
}

static void test_table_create_rules(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    uint64_t before = meta_state_digest(s);
    meta_partition p[2];
    strata_err err;

    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 3);
    assert_int_equal(create(s, 1, "t2", p, 1, &err), -1); /* id used */
    assert_int_equal(err.code, ERR_RESOURCE_IN_USE);
    assert_int_equal(create(s, 2, "t1", p, 1, &err), -1); /* name used */
    assert_int_equal(err.code, ERR_RESOURCE_IN_USE);
    assert_int_equal(create(s, 2, "t2", p, 0, &err), -1); /* no partitions */
    assert_int_equal(err.code, ERR_VALIDATION);

    part(&p[0], 2, 2, 0, UINT64_MAX, 1, 2, 3); /* partition id used */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    assert_non_null(strstr(err.msg, "used"));
    assert_int_equal(err.code, ERR_RESOURCE_IN_USE); /* stamped on a map behind: again */

    part(&p[0], 3, 2, 0, 10, 1, 2, 3); /* gap */
    part(&p[1], 4, 2, 12, UINT64_MAX, 1, 2, 3);
    assert_int_equal(create(s, 2, "t2", p, 2, &err), -1);
    assert_non_null(strstr(err.msg, "cover"));
    part(&p[0], 3, 2, 1, UINT64_MAX, 1, 2, 3); /* does not start at 0 */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    part(&p[0], 3, 2, 0, 100, 1, 2, 3); /* does not end at 2^64-1 */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);

    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 4); /* 1 and 4: same AZ and same host */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    assert_non_null(strstr(err.msg, "host"));
    part(&p[0], 3, 2, 0, UINT64_MAX, 2, 3, 5); /* 2 and 5 share AZ b */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    assert_non_null(strstr(err.msg, "AZ"));
    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 9); /* unknown node */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    part(&p[0], 3, 2, 0, UINT64_MAX, 3, 2, 1); /* members out of order */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 3);
    p[0].n_members = 2; /* two replicas */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 3);
    p[0].members[2].role = META_LEARNER;
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 3);
    p[0].leader_hint = 5; /* not a member */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    assert_non_null(strstr(err.msg, "leader"));

    assert_int_equal(set_state(s, 3, META_NODE_DRAINING, 1, &err), 0);
    before = meta_state_digest(s);
    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 3); /* 3 is draining */
    assert_int_equal(create(s, 2, "t2", p, 1, &err), -1);
    assert_non_null(strstr(err.msg, "ACTIVE"));
    assert_int_equal(err.code, ERR_BUSY);           /* the proposer's map was behind: place again */
    assert_int_equal(meta_state_digest(s), before); /* nothing changed on any error */
    part(&p[0], 3, 2, 0, UINT64_MAX, 1, 2, 6);
    assert_int_equal(create(s, 2, "t2", p, 1, &err), 0);
    assert_int_equal(meta_check(s, &err), 0);
    meta_free(s);
}

static void test_table_drop(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    meta_partition p[1];
    strata_err err;
    part(&p[0], 3, 2, 0, UINT64_MAX, 4, 5, 6);
    assert_int_equal(create(s, 2, "t2", p, 1, &err), 0);
    meta_cmd c = {.kind = META_CMD_TABLE_DROP, .table_id = 1};
    assert_int_equal(run(s, &c, &err), 0);
    assert_null(meta_table_find(s, 1));
    assert_null(meta_partition_find(s, 1));
    assert_int_equal(meta_partition_count(s), 1);
    assert_int_equal(meta_partition_at(s, 0)->id, 3);
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    part(&p[0], 4, 1, 0, UINT64_MAX, 1, 2, 3); /* the dropped id is not reused */
    assert_int_equal(create(s, 1, "t1", p, 1, &err), -1);
    assert_int_equal(err.code, ERR_RESOURCE_IN_USE);
    p[0].table_id = 3;
    assert_int_equal(create(s, 3, "t1", p, 1, &err), 0); /* the name can be reused */
    assert_int_equal(meta_check(s, &err), 0);
    meta_free(s);
}

/* A schema change names the blob it was built from: made on another, it is refused
 * (ERR_BUSY), so changes made at once from one state cannot lose one another. A record
 * without a base (written before the field) replaces any blob. */
static void test_table_schema_base(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    strata_err err;
    uint64_t base = meta_schema_hash(meta_table_find(s, 1));
    meta_cmd a = {.kind = META_CMD_TABLE_SCHEMA,
                  .table_id = 1,
                  .schema = (const uint8_t *)"tags a",
                  .schema_len = 6,
                  .schema_base = base};
    meta_cmd b = a;
    b.schema = (const uint8_t *)"tags b";
    assert_int_equal(run(s, &a, &err), 0);
    assert_int_equal(run(s, &b, &err), -1); /* built on the blob a replaced */
    assert_int_equal(err.code, ERR_BUSY);
    assert_memory_equal(meta_table_find(s, 1)->schema, "tags a", 6);
    b.schema_base = meta_schema_hash(meta_table_find(s, 1));
    assert_int_equal(run(s, &b, &err), 0);
    assert_memory_equal(meta_table_find(s, 1)->schema, "tags b", 6);
    a.schema_base = 0;
    assert_int_equal(run(s, &a, &err), 0);
    assert_memory_equal(meta_table_find(s, 1)->schema, "tags a", 6);
    /* The base survives encoding; a record that ends before it decodes with none. */
    buf rec;
    buf_init(&rec, 0);
    b.now_ms = 5;
    assert_int_equal(meta_encode(&b, &rec, &err), 0);
    meta_cmd d;
    assert_int_equal(meta_decode(rec.data, rec.len, &d, &err), 0);
    assert_true(d.schema_base == b.schema_base);
    meta_cmd_free(&d);
    /* The same record as written before the field: no base, its checksum over the rest. */
    size_t body = rec.len - 16;
    uint64_t sum = XXH3_64bits(rec.data, body);
    for (int i = 0; i < 8; i++)
        rec.data[body + (size_t)i] = (uint8_t)(sum >> (56 - 8 * i));
    assert_int_equal(meta_decode(rec.data, body + 8, &d, &err), 0);
    assert_true(d.schema_base == 0);
    assert_int_equal(d.schema_len, 6);
    meta_cmd_free(&d);
    buf_free(&rec);
    meta_free(s);
}

static void test_set_leader(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    strata_err err;
    assert_int_equal(pcmd(s, META_CMD_SET_LEADER, 1, 0, 3, &err), 0);
    assert_int_equal(meta_partition_find(s, 1)->leader_hint, 3);
    assert_int_equal(meta_partition_find(s, 1)->epoch, 1); /* a hint does not move epochs */
    assert_int_equal(pcmd(s, META_CMD_SET_LEADER, 1, 0, 5, &err), -1);
    assert_non_null(strstr(err.msg, "not a voter"));
    assert_int_equal(pcmd(s, META_CMD_SET_LEADER, 9, 0, 1, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    assert_int_equal(set_state(s, 2, META_NODE_DOWN, 1, &err), 0);
    assert_int_equal(pcmd(s, META_CMD_SET_LEADER, 1, 0, 2, &err), -1);
    assert_non_null(strstr(err.msg, "DOWN"));
    meta_free(s);
}

static void test_split(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    strata_err err;
    meta_cmd c = {.kind = META_CMD_SPLIT,
                  .partition_id = 2,
                  .epoch = 1,
                  .split_hash = 1ull << 63,
                  .new_partition_id = 3};
    assert_int_equal(run(s, &c, &err), 0);
    size_t n;
    const meta_partition *p = meta_table_partitions(s, 1, &n);
    assert_int_equal(n, 3);
    assert_int_equal(p[1].id, 2);
    assert_int_equal(p[1].hash_lo, 1000);
    assert_int_equal(p[1].hash_hi, (1ull << 63) - 1);
    assert_int_equal(p[1].epoch, 2);
    assert_int_equal(p[2].id, 3);
    assert_int_equal(p[2].hash_lo, 1ull << 63);
    assert_int_equal(p[2].hash_hi, UINT64_MAX);
    assert_int_equal(p[2].epoch, 2);
    assert_int_equal(p[2].n_members, 3);
    assert_int_equal(meta_partition_for_hash(s, 1, 1ull << 63)->id, 3);
    assert_int_equal(meta_partition_for_hash(s, 1, (1ull << 63) - 1)->id, 2);
    assert_int_equal(meta_next_partition_id(s), 4);
    assert_int_equal(meta_check(s, &err), 0);

    uint64_t before = meta_state_digest(s);
    c.new_partition_id = 4; /* stale epoch */
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_CONDITIONAL_CHECK);
    c.epoch = 2;
    c.split_hash = 5000;
    c.new_partition_id = 3; /* id used */
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_RESOURCE_IN_USE);
    c.new_partition_id = 4;
    c.split_hash = 1000; /* at the low end: the parent would be empty */
    assert_int_equal(run(s, &c, &err), -1);
    assert_non_null(strstr(err.msg, "not inside"));
    c.split_hash = (1ull << 63); /* past the parent's end */
    assert_int_equal(run(s, &c, &err), -1);
    c.partition_id = 99;
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    assert_int_equal(meta_state_digest(s), before);
    c.partition_id = 2;
    c.split_hash = 1001; /* the smallest legal split */
    assert_int_equal(run(s, &c, &err), 0);
    assert_int_equal(meta_partition_find(s, 2)->hash_hi, 1000);
    assert_int_equal(meta_check(s, &err), 0);
    meta_free(s);
}

/* A table may hold META_MAX_TABLE_PARTS partitions: a split past that is refused. */
static void test_split_table_limit(void **state)
{
    (void)state;
    meta_state *s = cluster6();
    size_t n = META_MAX_TABLE_PARTS - 1;
    meta_partition *p = calloc(n, sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        part(&p[i], i + 1, 1, i * 1000, i + 1 == n ? UINT64_MAX : i * 1000 + 999, 1, 2, 3);
    strata_err err;
    assert_int_equal(create(s, 1, "big", p, n, &err), 0);
    free(p);
    meta_cmd c = {.kind = META_CMD_SPLIT,
                  .partition_id = n,
                  .epoch = 1,
                  .split_hash = 1ull << 62,
                  .new_partition_id = n + 1};
    assert_int_equal(run(s, &c, &err), 0); /* the 4096th */
    c.split_hash = 1ull << 61;
    c.new_partition_id = n + 2;
    c.epoch = 2;
    assert_int_equal(run(s, &c, &err), -1);
    assert_int_equal(err.code, ERR_LIMIT_EXCEEDED);
    meta_free(s);
}

static void test_replica_move(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table(); /* partition 1 on 1(a,h1) 2(b) 3(c) */
    strata_err err;
    /* Node 4 is in AZ a on host h1, like node 1: never a member alongside it. */
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 1, 4, &err), -1);
    assert_non_null(strstr(err.msg, "host"));
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 1, 2, &err), -1); /* member already */
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 1, 42, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 7, 5, &err), -1);
    assert_int_equal(err.code, ERR_CONDITIONAL_CHECK);
    assert_int_equal(set_state(s, 6, META_NODE_DRAINING, 1, &err), 0);
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 1, 6, &err), -1);
    assert_non_null(strstr(err.msg, "ACTIVE"));

    /* Move 2 -> 5 (both AZ b). */
    assert_int_equal(pcmd(s, META_CMD_PROMOTE, 1, 1, 5, &err), -1); /* not a learner */
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 1, 5, &err), 0);
    const meta_partition *p = meta_partition_find(s, 1);
    assert_int_equal(p->epoch, 2);
    meta_role role;
    assert_true(meta_partition_has(p, 5, &role));
    assert_int_equal(role, META_LEARNER);
    assert_int_equal(meta_partition_voters(p), 3);
    /* Removing voter 3 (AZ c) would leave AZs a, b only. */
    assert_int_equal(pcmd(s, META_CMD_REMOVE_REPLICA, 1, 2, 3, &err), -1);
    assert_non_null(strstr(err.msg, "voters"));
    assert_int_equal(pcmd(s, META_CMD_PROMOTE, 1, 2, 5, &err), 0);
    p = meta_partition_find(s, 1);
    assert_int_equal(meta_partition_voters(p), 4);
    /* With 4 voters (a, b, b, c), dropping c breaks the AZ rule; dropping a b does not. */
    assert_int_equal(pcmd(s, META_CMD_REMOVE_REPLICA, 1, 3, 3, &err), -1);
    assert_non_null(strstr(err.msg, "AZs"));
    assert_int_equal(pcmd(s, META_CMD_SET_LEADER, 1, 0, 2, &err), 0);
    assert_int_equal(pcmd(s, META_CMD_REMOVE_REPLICA, 1, 3, 2, &err), 0);
    p = meta_partition_find(s, 1);
    assert_int_equal(p->epoch, 4);
    assert_false(meta_partition_has(p, 2, NULL));
    assert_int_equal(p->leader_hint, 0); /* the removed leader is no longer hinted */
    assert_int_equal(meta_partition_voters(p), 3);
    /* Three voters: removing one more is refused. */
    assert_int_equal(pcmd(s, META_CMD_REMOVE_REPLICA, 1, 4, 5, &err), -1);
    assert_non_null(strstr(err.msg, "at least 3"));
    assert_int_equal(pcmd(s, META_CMD_REMOVE_REPLICA, 1, 4, 4, &err), -1); /* not a member */
    /* A learner can be removed without promotion. */
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, 4, 2, &err), 0);
    assert_int_equal(pcmd(s, META_CMD_REMOVE_REPLICA, 1, 5, 2, &err), 0);
    assert_int_equal(meta_partition_find(s, 1)->epoch, 6);
    assert_int_equal(meta_check(s, &err), 0);
    meta_free(s);
}

static void test_members_bound(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    const char *az[] = {"a", "b", "c"};
    for (uint64_t i = 1; i <= 9; i++) {
        char host[8];
        snprintf(host, sizeof(host), "h%llu", (unsigned long long)i);
        assert_int_equal(reg(s, i, az[(i - 1) % 3], host, META_NODE_ACTIVE), 0);
    }
    meta_partition p[1];
    strata_err err;
    part(&p[0], 1, 1, 0, UINT64_MAX, 1, 2, 3);
    assert_int_equal(create(s, 1, "t", p, 1, &err), 0);
    uint64_t epoch = 1;
    for (uint64_t n = 4; n <= 6; n++)
        assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, epoch++, n, &err), 0);
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 1, epoch, 7, &err), -1);
    assert_non_null(strstr(err.msg, "members"));
    meta_free(s);
}

static void build_history(meta_state *s, int variant)
{
    const char *az[] = {"a", "b", "c"};
    strata_err err;
    for (uint64_t i = 1; i <= 6; i++) {
        char host[8];
        snprintf(host, sizeof(host), "h%llu", (unsigned long long)i);
        assert_int_equal(reg(s, i, az[(i - 1) % 3], host, META_NODE_ACTIVE), 0);
    }
    meta_partition p[1];
    part(&p[0], 1, 1, 0, UINT64_MAX, 1, 2, 3);
    assert_int_equal(create(s, 1, "t", p, 1, &err), 0);
    meta_cmd c = {.kind = META_CMD_SPLIT,
                  .partition_id = 1,
                  .epoch = 1,
                  .split_hash = 77,
                  .new_partition_id = 2};
    assert_int_equal(run(s, &c, &err), 0);
    assert_int_equal(pcmd(s, META_CMD_ADD_LEARNER, 2, 2, variant ? 5 : 4, &err), 0);
    assert_int_equal(set_state(s, 6, META_NODE_DOWN, 9000, &err), 0);
}

static void test_determinism(void **state)
{
    (void)state;
    meta_state *a = meta_new(), *b = meta_new(), *c = meta_new();
    build_history(a, 0);
    build_history(b, 0);
    build_history(c, 1);
    assert_int_equal(meta_state_digest(a), meta_state_digest(b));
    assert_int_not_equal(meta_state_digest(a), meta_state_digest(c));
    buf x, y;
    buf_init(&x, 0);
    buf_init(&y, 0);
    strata_err err;
    assert_int_equal(meta_state_encode(a, &x, &err), 0);
    assert_int_equal(meta_state_encode(b, &y, &err), 0);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.data, y.data, x.len);
    buf_free(&x);
    buf_free(&y);
    meta_free(a);
    meta_free(b);
    meta_free(c);
}

/* `s` encoded into `enc` (appended) and decoded again, as a snapshot is restored. */
static meta_state *round_trip(const meta_state *s, buf *enc)
{
    strata_err err;
    assert_int_equal(meta_state_encode(s, enc, &err), 0);
    meta_state *t = meta_state_decode(enc->data, enc->len, &err);
    assert_non_null(t);
    return t;
}

/* `enc` (a record or a state: checksum last) without the `cut` bytes before its checksum,
 * checksummed again: what a version before the last field wrote. */
static void strip_before_checksum(buf *enc, size_t cut)
{
    size_t plen = enc->len - 8 - cut;
    uint64_t sum = XXH3_64bits(enc->data, plen);
    enc->len = plen;
    buf_put_u64be(enc, sum);
}

static int set_state_from(meta_state *s, uint64_t id, meta_node_state base, meta_node_state st,
                          strata_err *err)
{
    meta_cmd c = {.kind = META_CMD_NODE_STATE, .now_ms = 50, .state_base = base};
    c.node.id = id;
    c.node.state = st;
    return run(s, &c, err);
}

/* The meta leader plans DOWN and "back: ACTIVE" from the state it saw; an operator's drain
 * committed before that plan must survive it. */
static void test_node_state_planned_from_a_stale_state(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    strata_err err;
    assert_int_equal(reg(s, 1, "a", "h1", META_NODE_ACTIVE), 0);
    /* Planned ACTIVE -> DOWN; the drain lands first. */
    assert_int_equal(set_state(s, 1, META_NODE_DRAINING, 10, &err), 0);
    assert_int_equal(set_state_from(s, 1, META_NODE_ACTIVE, META_NODE_DOWN, &err), -1);
    assert_int_equal(err.code, ERR_BUSY);
    assert_non_null(strstr(err.msg, "is DRAINING now, not ACTIVE"));
    assert_int_equal(meta_node_find(s, 1)->state, META_NODE_DRAINING);
    assert_int_equal(meta_node_find(s, 1)->state_since_ms, 10);
    /* Planned DOWN -> ACTIVE ("back") for a DOWN node an operator drained meanwhile. */
    assert_int_equal(reg(s, 2, "b", "h2", META_NODE_ACTIVE), 0);
    assert_int_equal(set_state_from(s, 2, META_NODE_ACTIVE, META_NODE_DOWN, &err), 0);
    assert_int_equal(set_state(s, 2, META_NODE_DRAINING, 20, &err), 0);
    assert_int_equal(set_state_from(s, 2, META_NODE_DOWN, META_NODE_ACTIVE, &err), -1);
    assert_int_equal(err.code, ERR_BUSY);
    assert_int_equal(meta_node_find(s, 2)->state, META_NODE_DRAINING);
    /* A plan that still holds goes through; an operator's command (no base) from any. */
    assert_int_equal(set_state(s, 2, META_NODE_ACTIVE, 30, &err), 0);
    assert_int_equal(set_state_from(s, 2, META_NODE_ACTIVE, META_NODE_DOWN, &err), 0);
    assert_int_equal(meta_node_find(s, 2)->state, META_NODE_DOWN);

    /* The base travels in the record; a record without it (written before it existed)
     * still decodes, with base 0. */
    meta_cmd c = {.kind = META_CMD_NODE_STATE, .now_ms = 7, .state_base = META_NODE_DOWN};
    c.node.id = 2;
    c.node.state = META_NODE_ACTIVE;
    buf with, without;
    buf_init(&with, 0);
    buf_init(&without, 0);
    assert_int_equal(meta_encode(&c, &with, &err), 0);
    c.state_base = 0;
    assert_int_equal(meta_encode(&c, &without, &err), 0);
    assert_int_equal(with.len, without.len + 1);
    meta_cmd d;
    assert_int_equal(meta_decode(with.data, with.len, &d, &err), 0);
    assert_int_equal(d.state_base, META_NODE_DOWN);
    assert_int_equal(d.node.state, META_NODE_ACTIVE);
    meta_cmd_free(&d);
    assert_int_equal(meta_decode(without.data, without.len, &d, &err), 0);
    assert_int_equal(d.state_base, 0);
    meta_cmd_free(&d);
    with.data[with.len - 9] = 9; /* not a state */
    strip_before_checksum(&with, 0);
    assert_int_equal(meta_decode(with.data, with.len, &d, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    buf_free(&with);
    buf_free(&without);
    meta_free(s);
}

static int say_format(meta_state *s, uint64_t id, uint8_t format, strata_err *err)
{
    meta_cmd c = {.kind = META_CMD_NODE_FORMAT, .now_ms = 60};
    c.node.id = id;
    c.node.format = format;
    return run(s, &c, err);
}

static int raise_format(meta_state *s, uint32_t format, strata_err *err)
{
    meta_cmd c = {.kind = META_CMD_CLUSTER_FORMAT, .now_ms = 70, .format = format};
    return run(s, &c, err);
}

/* Rolling upgrades (Formats in meta.h): the cluster's format rises only once every node
 * not REMOVED reads it, never falls, and no binary older than it joins or comes back. */
static void test_formats(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    strata_err err;
    assert_int_equal(meta_format(s), 1);
    assert_int_equal(meta_format_ready(s), 1); /* no node */
    /* reg() says no format: read as 1, as registrations before the field. */
    assert_int_equal(reg(s, 1, "a", "h1", META_NODE_ACTIVE), 0);
    assert_int_equal(reg(s, 2, "b", "h2", META_NODE_ACTIVE), 0);
    assert_int_equal(meta_node_find(s, 1)->format, 1);
    assert_int_equal(say_format(s, 1, 2, &err), 0); /* node 1 upgraded */
    assert_int_equal(meta_format_ready(s), 1);
    assert_int_equal(raise_format(s, 2, &err), -1);
    assert_int_equal(err.code, ERR_BUSY); /* node 2 reads format 1 only */
    assert_int_equal(meta_format(s), 1);
    assert_int_equal(say_format(s, 2, 3, &err), 0);
    assert_int_equal(meta_format_ready(s), 2); /* the oldest */
    assert_int_equal(raise_format(s, 2, &err), 0);
    assert_int_equal(meta_format(s), 2);
    assert_int_equal(meta_check(s, &err), 0);
    /* Never falls, nor "rises" to where it is. */
    assert_int_equal(raise_format(s, 2, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(raise_format(s, 1, &err), -1);
    assert_int_equal(meta_format(s), 2);
    /* A binary older than the cluster's format neither joins nor comes back. */
    assert_int_equal(reg(s, 3, "c", "h3", META_NODE_ACTIVE), -1);
    assert_null(meta_node_find(s, 3));
    assert_int_equal(say_format(s, 1, 1, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_non_null(strstr(err.msg, "up to format 1, and the cluster writes format 2"));
    assert_int_equal(meta_node_find(s, 1)->format, 2);
    assert_int_equal(say_format(s, 1, 0, &err), -1);
    assert_int_equal(say_format(s, 9, 2, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    meta_cmd c = reg_cmd(3, "c", "h3", META_NODE_ACTIVE);
    c.node.format = 2;
    assert_int_equal(run(s, &c, &err), 0);
    /* A REMOVED node's format counts no more. */
    assert_int_equal(say_format(s, 1, 3, &err), 0);
    assert_int_equal(say_format(s, 3, 3, &err), 0);
    assert_int_equal(meta_format_ready(s), 3);
    assert_int_equal(say_format(s, 3, 2, &err), 0);
    assert_int_equal(set_state(s, 3, META_NODE_DRAINING, 90, &err), 0);
    assert_int_equal(set_state(s, 3, META_NODE_REMOVED, 91, &err), 0);
    assert_int_equal(meta_format_ready(s), 3);
    assert_int_equal(say_format(s, 3, 3, &err), -1); /* removed */
    assert_int_equal(raise_format(s, 3, &err), 0);
    assert_int_equal(meta_check(s, &err), 0);

    /* The formats travel in the state; a state from before them reads as format 1. */
    buf b;
    buf_init(&b, 0);
    meta_state *t = round_trip(s, &b);
    assert_int_equal(meta_format(t), 3);
    assert_int_equal(meta_node_find(t, 2)->format, 3);
    assert_int_equal(meta_node_find(t, 3)->format, 2);
    assert_int_equal(meta_state_digest(t), meta_state_digest(s));
    meta_free(t);
    strip_before_checksum(&b, 2 + 3); /* format, count, three nodes */
    t = meta_state_decode(b.data, b.len, &err);
    assert_non_null(t);
    assert_int_equal(meta_format(t), 1);
    assert_int_equal(meta_node_find(t, 1)->format, 1);
    meta_free(t);
    buf_free(&b);

    /* A record says the oldest format that reads it: 2 for a NODE_STATE with a base, 1
     * otherwise; one newer than this binary's does not decode, and says why. */
    meta_cmd n = {.kind = META_CMD_NODE_STATE, .now_ms = 7, .state_base = META_NODE_ACTIVE};
    n.node.id = 1;
    n.node.state = META_NODE_DOWN;
    buf_init(&b, 0);
    assert_int_equal(meta_encode(&n, &b, &err), 0);
    assert_int_equal(meta_record_format(b.data, b.len), 2);
    buf_reset(&b);
    n.state_base = 0;
    assert_int_equal(meta_encode(&n, &b, &err), 0);
    assert_int_equal(meta_record_format(b.data, b.len), 1);
    b.data[0] = META_FORMAT + 1;
    strip_before_checksum(&b, 0);
    assert_int_equal(meta_record_format(b.data, b.len), META_FORMAT + 1);
    meta_cmd d;
    assert_int_equal(meta_decode(b.data, b.len, &d, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "newer than this binary's"));
    assert_int_equal(meta_record_format(b.data, 0), 0);
    /* The new kinds round-trip. */
    buf_reset(&b);
    assert_int_equal(
        meta_encode(&(meta_cmd){.kind = META_CMD_CLUSTER_FORMAT, .format = 7}, &b, &err), 0);
    assert_int_equal(meta_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.kind, META_CMD_CLUSTER_FORMAT);
    assert_int_equal(d.format, 7);
    buf_reset(&b);
    meta_cmd f = {.kind = META_CMD_NODE_FORMAT};
    f.node.id = 300;
    f.node.format = 4;
    assert_int_equal(meta_encode(&f, &b, &err), 0);
    assert_int_equal(meta_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.node.id, 300);
    assert_int_equal(d.node.format, 4);
    buf_free(&b);
    meta_free(s);
}

/* A node's incarnation goes with its registration and the state; records and states
 * written before it existed read as 0. */
static void test_incarnation(void **state)
{
    (void)state;
    meta_cmd c = {.kind = META_CMD_NODE_REGISTER, .now_ms = 5};
    c.node.id = 7;
    strcpy(c.node.client_addr, "a:1");
    strcpy(c.node.peer_addr, "a:2");
    strcpy(c.node.az, "az1");
    strcpy(c.node.host, "h1");
    c.node.state = META_NODE_ACTIVE;
    c.node.incarnation = 99;
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(meta_encode(&c, &b, &err), 0);
    meta_state *s = meta_new();
    assert_int_equal(meta_apply(s, b.data, b.len, &err), 0);
    assert_int_equal(meta_node_find(s, 7)->incarnation, 99);
    strip_before_checksum(&b, 8 + 1); /* the incarnation and the format */
    meta_cmd d;
    assert_int_equal(meta_decode(b.data, b.len, &d, &err), 0);
    assert_int_equal(d.node.incarnation, 0);
    assert_string_equal(d.node.host, "h1");
    buf_free(&b);

    buf_init(&b, 0);
    meta_state *t = round_trip(s, &b);
    assert_int_equal(meta_node_find(t, 7)->incarnation, 99);
    meta_free(t);
    /* Without the sections after the partitions: the meta group's (3 bytes when not
     * recorded: epoch 0, seats 0, no member), the incarnations' (a varint count of 1 and
     * one u64) and the formats' (format, count, one byte). */
    strip_before_checksum(&b, 3 + 9 + 3);
    t = meta_state_decode(b.data, b.len, &err);
    assert_non_null(t);
    assert_int_equal(meta_node_find(t, 7)->incarnation, 0);
    meta_free(t);
    buf_free(&b);
    meta_free(s);
}

static int seats_cmd(meta_state *s, uint64_t epoch, uint32_t seats, const meta_replica *m,
                     uint32_t n, strata_err *err)
{
    meta_partition g = {.n_members = n};
    memcpy(g.members, m, n * sizeof *m);
    meta_cmd c = {
        .kind = META_CMD_META_MEMBERS, .epoch = epoch, .seats = seats, .parts = &g, .n_parts = 1};
    return run(s, &c, err);
}

#define V(n) ((meta_replica){(n), META_VOTER})
#define L(n) ((meta_replica){(n), META_LEARNER})

/* The meta group's seats: the first record takes any list; later ones change one member
 * at a time (learners join, are promoted on ACTIVE nodes, members leave); the epoch and
 * the seats are checked; the state carries them, old states read as not recorded. */
static void test_meta_group(void **state)
{
    (void)state;
    meta_state *s = cluster6();
    strata_err err;
    assert_int_equal(meta_group(s)->n_members, 0);
    assert_int_equal(meta_group_seats(s), 0);
    const meta_replica first[] = {V(1), V(2), V(3)};
    assert_int_equal(seats_cmd(s, 1, 3, first, 3, &err), -1);
    assert_int_equal(err.code, ERR_CONDITIONAL_CHECK);
    assert_int_equal(seats_cmd(s, 0, 2, first, 3, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    const meta_replica unknown[] = {V(1), V(9)};
    assert_int_equal(seats_cmd(s, 0, 3, unknown, 2, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    const meta_replica unsorted[] = {V(2), V(1)};
    assert_int_equal(seats_cmd(s, 0, 3, unsorted, 2, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    const meta_replica no_voter[] = {L(1)};
    assert_int_equal(seats_cmd(s, 0, 1, no_voter, 1, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(seats_cmd(s, 0, 3, first, 3, &err), 0);
    assert_int_equal(meta_group(s)->epoch, 1);
    assert_int_equal(meta_group_seats(s), 3);
    assert_int_equal(meta_partition_voters(meta_group(s)), 3);

    /* One member at a time, joining as a learner on an ACTIVE node, seats fixed. */
    const meta_replica as_voter[] = {V(1), V(2), V(3), V(5)};
    assert_int_equal(seats_cmd(s, 1, 3, as_voter, 4, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    const meta_replica two_steps[] = {V(1), V(2), L(5)};
    assert_int_equal(seats_cmd(s, 1, 3, two_steps, 3, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    const meta_replica add5[] = {V(1), V(2), V(3), L(5)};
    assert_int_equal(seats_cmd(s, 1, 5, add5, 4, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(set_state(s, 6, META_NODE_DRAINING, 900, &err), 0);
    const meta_replica add6[] = {V(1), V(2), V(3), L(6)};
    assert_int_equal(seats_cmd(s, 1, 3, add6, 4, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(seats_cmd(s, 1, 3, add5, 4, &err), 0);
    const meta_replica demote[] = {V(1), V(2), L(3), L(5)};
    assert_int_equal(seats_cmd(s, 2, 3, demote, 4, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    const meta_replica promote5[] = {V(1), V(2), V(3), V(5)};
    assert_int_equal(seats_cmd(s, 2, 3, promote5, 4, &err), 0);
    const meta_replica drop3[] = {V(1), V(2), V(5)};
    assert_int_equal(seats_cmd(s, 3, 3, drop3, 3, &err), 0);
    assert_int_equal(meta_group(s)->epoch, 4);
    assert_true(meta_partition_has(meta_group(s), 5, NULL));
    assert_false(meta_partition_has(meta_group(s), 3, NULL));

    /* A member may become REMOVED (the leader then takes it out); not rejoin as one. */
    assert_int_equal(set_state(s, 1, META_NODE_DRAINING, 1000, &err), 0);
    assert_int_equal(set_state(s, 1, META_NODE_REMOVED, 1001, &err), 0);
    assert_int_equal(meta_check(s, &err), 0);

    /* The state carries the seats; digests agree after a round trip. */
    buf b;
    buf_init(&b, 0);
    meta_state *t = round_trip(s, &b);
    assert_int_equal(meta_group(t)->epoch, 4);
    assert_int_equal(meta_group_seats(t), 3);
    assert_int_equal(meta_group(t)->n_members, 3);
    assert_int_equal(meta_state_digest(t), meta_state_digest(s));
    meta_free(t);
    buf_free(&b);

    const meta_replica drop1[] = {V(2), V(5)};
    assert_int_equal(seats_cmd(s, 4, 3, drop1, 2, &err), 0);
    const meta_replica empty[] = {V(2)};
    assert_int_equal(seats_cmd(s, 5, 3, empty, 0, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    meta_free(s);
}

static void test_snapshot(void **state)
{
    (void)state;
    meta_state *a = meta_new();
    build_history(a, 1);
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(meta_state_encode(a, &b, &err), 0);
    meta_state *c = meta_state_decode(b.data, b.len, &err);
    assert_non_null(c);
    assert_int_equal(meta_state_digest(c), meta_state_digest(a));
    assert_int_equal(meta_check(c, &err), 0);
    /* The restored state keeps working: ids continue, rules hold. */
    assert_int_equal(meta_next_partition_id(c), 3);
    assert_int_equal(pcmd(c, META_CMD_PROMOTE, 2, 3, 5, &err), 0);
    meta_free(c);
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x21;
        assert_null(meta_state_decode(b.data, b.len, &err));
        assert_int_equal(err.code, ERR_CORRUPT);
        b.data[i] ^= 0x21;
    }
    for (size_t n = 0; n < b.len; n++)
        assert_null(meta_state_decode(b.data, n, &err));

    /* The fsm hooks: restore replaces the whole state; a bad snapshot changes nothing. */
    void *snap;
    size_t snap_len;
    assert_int_equal(meta_fsm_snapshot(a, 0, &snap, &snap_len), 0);
    meta_state *d = cluster_with_table();
    assert_int_equal(meta_fsm_restore(d, 0, snap, snap_len), 0);
    assert_int_equal(meta_state_digest(d), meta_state_digest(a));
    ((uint8_t *)snap)[3] ^= 1;
    assert_int_equal(meta_fsm_restore(d, 0, snap, snap_len), -1);
    assert_int_equal(meta_state_digest(d), meta_state_digest(a));
    free(snap);
    meta_free(d);
    buf_free(&b);
    meta_free(a);
}

static void test_fsm_apply(void **state)
{
    (void)state;
    meta_state *s = cluster_with_table();
    meta_cmd c = {.kind = META_CMD_TABLE_DROP, .table_id = 77};
    buf b;
    buf_init(&b, 0);
    assert_int_equal(meta_encode(&c, &b, NULL), 0);
    void *res;
    size_t len;
    assert_int_equal(meta_fsm_apply(s, 0, 1, b.data, b.len, &res, &len), 0);
    assert_true(len > 1);
    assert_int_equal(((uint8_t *)res)[0], ERR_NOT_FOUND);
    free(res);
    buf_reset(&b);
    c.table_id = 1;
    assert_int_equal(meta_encode(&c, &b, NULL), 0);
    assert_int_equal(meta_fsm_apply(s, 0, 2, b.data, b.len, &res, &len), 0);
    assert_int_equal(len, 1);
    assert_int_equal(((uint8_t *)res)[0], ERR_NONE);
    free(res);
    assert_null(meta_table_find(s, 1));
    buf_free(&b);
    meta_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_roundtrip),
        cmocka_unit_test(test_decode_rejects_bad_fields),
        cmocka_unit_test(test_node_register),
        cmocka_unit_test(test_node_address),
        cmocka_unit_test(test_node_transitions),
        cmocka_unit_test(test_node_state_planned_from_a_stale_state),
        cmocka_unit_test(test_remove_needs_no_replicas),
        cmocka_unit_test(test_table_create_and_queries),
        cmocka_unit_test(test_table_create_rules),
        cmocka_unit_test(test_table_drop),
        cmocka_unit_test(test_table_schema_base),
        cmocka_unit_test(test_set_leader),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_table_limit),
        cmocka_unit_test(test_replica_move),
        cmocka_unit_test(test_members_bound),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_incarnation),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_meta_group),
        cmocka_unit_test(test_fsm_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
