/*
 * Placement properties over randomized clusters (3-12 nodes over 3-4 AZs, some nodes
 * sharing a host, many tables): AZ and host distinctness, replica balance, leader spread,
 * drain / replacement / rebalance plans that keep every rule at every step (each step is
 * applied through meta_apply and the whole state re-checked), determinism, and leader
 * balance by load (hints to ACTIVE voters only, counts kept even, each plan lowering the
 * sum of squared node loads, repeated plans settling), and the meta group's seat steps
 * (each applied through meta_apply).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/meta.h"
#include "cluster/placement.h"

static uint64_t rng_state;
static uint64_t cur_seed;
static const char *phase = "";

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int run(meta_state *s, const meta_cmd *c, strata_err *err)
{
    buf b;
    buf_init(&b, 0);
    strata_err_clear(err);
    assert_int_equal(meta_encode(c, &b, err), 0);
    int rc = meta_apply(s, b.data, b.len, err);
    buf_free(&b);
    return rc;
}

static void check_ok(const meta_state *s)
{
    strata_err err;
    strata_err_clear(&err);
    if (meta_check(s, &err))
        fail_msg("meta_check: %s", err.msg);
}

static void reg(meta_state *s, uint64_t id, const char *az, const char *host)
{
    meta_cmd c = {.kind = META_CMD_NODE_REGISTER, .now_ms = id};
    c.node.id = id;
    snprintf(c.node.client_addr, sizeof(c.node.client_addr), "n%llu:8000", (unsigned long long)id);
    snprintf(c.node.peer_addr, sizeof(c.node.peer_addr), "n%llu:7000", (unsigned long long)id);
    snprintf(c.node.az, sizeof(c.node.az), "%s", az);
    snprintf(c.node.host, sizeof(c.node.host), "%s", host);
    c.node.state = META_NODE_ACTIVE;
    strata_err err;
    assert_int_equal(run(s, &c, &err), 0);
}

static void set_state(meta_state *s, uint64_t id, meta_node_state st, uint64_t now)
{
    meta_cmd c = {.kind = META_CMD_NODE_STATE, .now_ms = now};
    c.node.id = id;
    c.node.state = st;
    strata_err err;
    if (run(s, &c, &err))
        fail_msg("set_state: %s", err.msg);
}

static size_t replicas_of(const meta_state *s, uint64_t node)
{
    size_t n = 0;
    for (size_t i = 0; i < meta_partition_count(s); i++)
        n += meta_partition_has(meta_partition_at(s, i), node, NULL);
    return n;
}

static size_t leaders_of(const meta_state *s, uint64_t node)
{
    size_t n = 0;
    for (size_t i = 0; i < meta_partition_count(s); i++)
        n += meta_partition_at(s, i)->leader_hint == node;
    return n;
}

/* max - min of replica counts over ACTIVE nodes of `az` (all AZs when NULL). */
static size_t spread(const meta_state *s, const char *az, bool leaders)
{
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < meta_node_count(s); i++) {
        const meta_node *n = meta_node_at(s, i);
        if (n->state != META_NODE_ACTIVE || (az && strcmp(az, n->az)))
            continue;
        size_t c = leaders ? leaders_of(s, n->id) : replicas_of(s, n->id);
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
    }
    return lo == SIZE_MAX ? 0 : hi - lo;
}

/* Whether all ACTIVE nodes of `az` are on one host: no replica can move between them
 * (learner and source would share the host), so balance there is only within 2. */
static bool az_single_host(const meta_state *s, const char *az)
{
    const char *host = NULL;
    for (size_t i = 0; i < meta_node_count(s); i++) {
        const meta_node *a = meta_node_at(s, i);
        if (a->state != META_NODE_ACTIVE || strcmp(a->az, az))
            continue;
        if (host && strcmp(host, a->host))
            return false;
        host = a->host;
    }
    return true;
}

/* strict: within 1 whatever the hosts (new placements pick one node per AZ). */
static void check_az_balance(const meta_state *s, bool strict)
{
    for (size_t i = 0; i < meta_node_count(s); i++)
        if (spread(s, meta_node_at(s, i)->az, false) >
            (!strict && az_single_host(s, meta_node_at(s, i)->az) ? 2u : 1u))
            fail_msg("seed %llu (%s): replica counts in AZ %s differ by %zu",
                     (unsigned long long)cur_seed, phase, meta_node_at(s, i)->az,
                     spread(s, meta_node_at(s, i)->az, false));
}

static void apply_moves(meta_state *s, const placement_move *mv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (int step = 0; step < placement_move_steps(&mv[i]); step++) {
            meta_cmd c;
            strata_err err;
            assert_int_equal(placement_move_cmd(s, &mv[i], step, &c, &err), 0);
            if (run(s, &c, &err))
                fail_msg("move %zu step %d (partition %llu %llu -> %llu): %s", i, step,
                         (unsigned long long)mv[i].partition_id, (unsigned long long)mv[i].from,
                         (unsigned long long)mv[i].to, err.msg);
            check_ok(s); /* every rule holds after every step */
        }
    }
}

static void apply_leaders(meta_state *s)
{
    placement_leader *l;
    size_t n;
    strata_err err;
    assert_int_equal(placement_leaders(s, &l, &n, &err), 0);
    for (size_t i = 0; i < n; i++) {
        meta_cmd c = {
            .kind = META_CMD_SET_LEADER, .partition_id = l[i].partition_id, .node_id = l[i].leader};
        if (run(s, &c, &err))
            fail_msg("set leader: %s", err.msg);
    }
    free(l);
}

static void create_table(meta_state *s, const char *name, size_t nparts)
{
    meta_partition *p = calloc(nparts, sizeof(*p));
    assert_non_null(p);
    strata_err err;
    uint32_t tid = meta_next_table_id(s);
    if (placement_new_table(s, tid, nparts, meta_next_partition_id(s), p, &err))
        fail_msg("placement_new_table: %s", err.msg);
    meta_cmd c = {.kind = META_CMD_TABLE_CREATE,
                  .now_ms = 1000,
                  .table_id = tid,
                  .name = name,
                  .name_len = strlen(name),
                  .parts = p,
                  .n_parts = nparts};
    if (run(s, &c, &err))
        fail_msg("create %s: %s", name, err.msg);
    free(p);
}

/* ---- load-based leader balance (placement_leaders_load) ---- */

static size_t apply_leader_list(meta_state *s, placement_leader *l, size_t n);

#define MAX_PID 4096
static uint64_t part_load[MAX_PID]; /* by partition id */

static uint64_t load_of(void *ctx, uint64_t pid)
{
    (void)ctx;
    return pid < MAX_PID ? part_load[pid] : 0;
}

/* A node's load: of the partitions it leads (hint), or with `replicas` of those it holds. */
static uint64_t node_load_of(const meta_state *s, uint64_t node, bool replicas)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        if (replicas ? meta_partition_has(p, node, NULL) : p->leader_hint == node)
            sum += load_of(NULL, p->id);
    }
    return sum;
}

static uint64_t node_load(const meta_state *s, uint64_t node)
{
    return node_load_of(s, node, false);
}

static uint64_t replica_load(const meta_state *s, uint64_t node)
{
    return node_load_of(s, node, true);
}

/* Sum of squared loads of ACTIVE nodes: every plan must lower it. */
static unsigned __int128 load_energy(const meta_state *s, bool replicas)
{
    unsigned __int128 e = 0;
    for (size_t i = 0; i < meta_node_count(s); i++)
        if (meta_node_at(s, i)->state == META_NODE_ACTIVE) {
            uint64_t l = node_load_of(s, meta_node_at(s, i)->id, replicas);
            e += (unsigned __int128)l * l;
        }
    return e;
}

/* One load plan, checked (every hint to an ACTIVE voter, at most max_changes, leader
 * counts no less even, load energy strictly lower when anything changed) and applied;
 * returns the number of changes. */
static size_t load_round(meta_state *s, const placement_load_opts *o)
{
    placement_leader *l;
    size_t n;
    strata_err err;
    size_t spread_before = spread(s, NULL, true);
    unsigned __int128 e_before = load_energy(s, false);
    assert_int_equal(placement_leaders_load(s, load_of, NULL, o, &l, &n, &err), 0);
    assert_true(n <= o->max_changes);
    for (size_t i = 0; i < n; i++) {
        const meta_node *nd = meta_node_find(s, l[i].leader);
        meta_role role;
        assert_non_null(nd);
        if (nd->state != META_NODE_ACTIVE)
            fail_msg("seed %llu: hint to node %llu, not ACTIVE", (unsigned long long)cur_seed,
                     (unsigned long long)l[i].leader);
        assert_true(
            meta_partition_has(meta_partition_find(s, l[i].partition_id), l[i].leader, &role));
        assert_int_equal(role, META_VOTER);
    }
    apply_leader_list(s, l, n);
    check_ok(s);
    size_t spread_after = spread(s, NULL, true);
    if (spread_after > (spread_before > 1 ? spread_before : 1))
        fail_msg("seed %llu: leader count spread %zu -> %zu", (unsigned long long)cur_seed,
                 spread_before, spread_after);
    if (n > 0 && !(load_energy(s, false) < e_before))
        fail_msg("seed %llu: a load plan did not lower the load energy",
                 (unsigned long long)cur_seed);
    return n;
}

/* Plans (round: load_round or replica_load_round) until a plan is empty; fails if that
 * takes more than max_rounds. */
static size_t settle(meta_state *s, const placement_load_opts *o, size_t max_rounds,
                     size_t (*round)(meta_state *, const placement_load_opts *))
{
    for (size_t r = 0; r < max_rounds; r++)
        if (round(s, o) == 0)
            return r;
    fail_msg("seed %llu: load plans did not settle in %zu rounds", (unsigned long long)cur_seed,
             max_rounds);
    return max_rounds;
}

static size_t load_settle(meta_state *s, const placement_load_opts *o, size_t max_rounds)
{
    return settle(s, o, max_rounds, load_round);
}

/* One replica-load plan, checked (moves within an AZ between ACTIVE nodes, never the
 * hinted leader's replica, at most max_changes, every step legal: apply_moves, replica
 * counts per AZ no less even, energy strictly lower when anything moved) and applied;
 * returns the number of moves. */
static size_t replica_load_round(meta_state *s, const placement_load_opts *o)
{
    placement_move *mv;
    size_t n;
    strata_err err;
    size_t az_spread[64];
    size_t nn = meta_node_count(s) < 64 ? meta_node_count(s) : 64;
    for (size_t i = 0; i < nn; i++)
        az_spread[i] = spread(s, meta_node_at(s, i)->az, false);
    unsigned __int128 e_before = load_energy(s, true);
    assert_int_equal(placement_rebalance_load(s, load_of, NULL, o, &mv, &n, &err), 0);
    assert_true(n <= o->max_changes);
    for (size_t i = 0; i < n; i++) {
        const meta_node *from = meta_node_find(s, mv[i].from), *to = meta_node_find(s, mv[i].to);
        assert_non_null(from);
        assert_non_null(to);
        if (to->state != META_NODE_ACTIVE || strcmp(from->az, to->az))
            fail_msg("seed %llu: replica move %llu -> %llu leaves the AZ or goes to a node "
                     "that is not ACTIVE",
                     (unsigned long long)cur_seed, (unsigned long long)mv[i].from,
                     (unsigned long long)mv[i].to);
        assert_int_not_equal(meta_partition_find(s, mv[i].partition_id)->leader_hint, mv[i].from);
    }
    apply_moves(s, mv, n);
    free(mv);
    for (size_t i = 0; i < nn; i++) {
        size_t after = spread(s, meta_node_at(s, i)->az, false);
        if (after > (az_spread[i] > 1 ? az_spread[i] : 1))
            fail_msg("seed %llu: replica spread in AZ %s %zu -> %zu", (unsigned long long)cur_seed,
                     meta_node_at(s, i)->az, az_spread[i], after);
    }
    if (n > 0 && !(load_energy(s, true) < e_before))
        fail_msg("seed %llu: a replica load plan did not lower the energy",
                 (unsigned long long)cur_seed);
    return n;
}

static size_t replica_load_settle(meta_state *s, const placement_load_opts *o, size_t max_rounds)
{
    return settle(s, o, max_rounds, replica_load_round);
}

/* Random loads (a few hot partitions) over whatever the scenario left. */
static void random_load_rounds(meta_state *s)
{
    memset(part_load, 0, sizeof part_load);
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        uint64_t pid = meta_partition_at(s, i)->id;
        if (pid < MAX_PID)
            part_load[pid] = rnd() % 4 == 0 ? 1000 + rnd() % 100000 : rnd() % 100;
    }
    placement_load_opts o = {.min_gap = 500, .gap_percent = 10, .max_changes = 1 + rnd() % 8};
    load_settle(s, &o, 1000);
    replica_load_settle(s, &o, 1000);
}

/* Brute-force oracle: can every replica of node x move somewhere? A target is an ACTIVE
 * node, not a member, on a host no member uses, in x's AZ or in an AZ no other voter
 * uses. */
static bool drain_possible(const meta_state *s, uint64_t x, size_t n_az)
{
    (void)n_az;
    const meta_node *nx = meta_node_find(s, x);
    for (size_t pi = 0; pi < meta_partition_count(s); pi++) {
        const meta_partition *p = meta_partition_at(s, pi);
        if (!meta_partition_has(p, x, NULL))
            continue;
        bool found = false;
        for (size_t i = 0; i < meta_node_count(s) && !found; i++) {
            const meta_node *t = meta_node_at(s, i);
            if (t->state != META_NODE_ACTIVE || meta_partition_has(p, t->id, NULL))
                continue;
            bool ok = true;
            for (uint32_t m = 0; m < p->n_members; m++) {
                const meta_node *o = meta_node_find(s, p->members[m].node);
                if (!strcmp(o->host, t->host))
                    ok = false;
                if (o->id != x && p->members[m].role == META_VOTER && !strcmp(o->az, t->az))
                    ok = false;
            }
            found = ok;
        }
        if (!found)
            return false;
    }
    (void)nx;
    return true;
}

static uint64_t scenario(uint64_t seed, bool verbose)
{
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    cur_seed = seed;
    phase = "create";
    meta_state *s = meta_new();
    size_t n_az = 3 + rnd() % 2;
    size_t n_nodes = 3 + rnd() % 10;
    if (n_nodes < n_az)
        n_nodes = n_az;
    bool equal_azs = rnd() % 2;
    size_t az_size[4] = {0};
    uint64_t id = 1;
    for (size_t i = 0; i < n_nodes; i++, id++) {
        size_t a = equal_azs || i < n_az ? i % n_az : rnd() % n_az;
        char az[48], host[96];
        snprintf(az, sizeof(az), "az%zu", a);
        /* Now and then two nodes of one AZ share a host. */
        if (az_size[a] > 0 && rnd() % 4 == 0)
            snprintf(host, sizeof(host), "az%zu-h%zu", a, az_size[a] - 1);
        else
            snprintf(host, sizeof(host), "az%zu-h%zu", a, az_size[a]);
        az_size[a]++;
        reg(s, id, az, host);
    }
    equal_azs = true;
    for (size_t a = 1; a < n_az; a++)
        equal_azs &= az_size[a] == az_size[0];

    size_t n_tables = 5 + rnd() % 25;
    for (size_t t = 0; t < n_tables; t++) {
        char name[16];
        snprintf(name, sizeof(name), "tbl%zu", t);
        create_table(s, name, 1 + rnd() % 8);
        check_ok(s);
        check_az_balance(s, true);
        if (equal_azs && spread(s, NULL, false) > 1)
            fail_msg("seed %llu: replica spread %zu with equal AZs", (unsigned long long)seed,
                     spread(s, NULL, false));
    }
    apply_leaders(s);
    check_ok(s);
    if (spread(s, NULL, true) > 1)
        fail_msg("seed %llu: leader spread %zu", (unsigned long long)seed, spread(s, NULL, true));

    /* A split keeps replicas; a drop frees them. */
    {
        const meta_partition *p = meta_partition_at(s, rnd() % meta_partition_count(s));
        meta_cmd c = {.kind = META_CMD_SPLIT,
                      .partition_id = p->id,
                      .epoch = p->epoch,
                      .split_hash = p->hash_lo + (p->hash_hi - p->hash_lo) / 2 + 1,
                      .new_partition_id = meta_next_partition_id(s)};
        strata_err err;
        if (run(s, &c, &err))
            fail_msg("split: %s", err.msg);
        check_ok(s);
    }

    /* A new node joins (on its own host); rebalance evens counts within its AZ. */
    phase = "join";
    {
        char az[48], host[96];
        size_t a = rnd() % n_az;
        snprintf(az, sizeof(az), "az%zu", a);
        snprintf(host, sizeof(host), "az%zu-new", a);
        uint64_t nid = id++;
        reg(s, nid, az, host);
        placement_move *mv;
        size_t n;
        strata_err err;
        assert_int_equal(placement_rebalance(s, &mv, &n, &err), 0);
        assert_true(n > 0);
        apply_moves(s, mv, n);
        free(mv);
        assert_true(replicas_of(s, nid) > 0);
        check_az_balance(s, false);
        /* A second plan right after finds nothing left to do. */
        assert_int_equal(placement_rebalance(s, &mv, &n, &err), 0);
        assert_int_equal(n, 0);
        free(mv);
    }

    /* Drain one node. */
    {
        uint64_t x = 1 + rnd() % n_nodes;
        set_state(s, x, META_NODE_DRAINING, 2000);
        placement_move *mv;
        size_t n;
        strata_err err;
        bool possible = drain_possible(s, x, n_az);
        int rc = placement_drain(s, x, &mv, &n, &err);
        if (!possible || replicas_of(s, x) == 0) {
            if (replicas_of(s, x) > 0) {
                assert_int_equal(rc, -1);
                assert_int_equal(err.code, ERR_VALIDATION);
                assert_non_null(strstr(err.msg, "no ACTIVE node"));
            }
            set_state(s, x, META_NODE_ACTIVE, 2001);
        } else {
            if (rc)
                fail_msg("seed %llu: drain of %llu: %s", (unsigned long long)seed,
                         (unsigned long long)x, err.msg);
            apply_moves(s, mv, n);
            free(mv);
            assert_int_equal(replicas_of(s, x), 0);
            set_state(s, x, META_NODE_REMOVED, 2002);
        }
        check_ok(s);
    }

    /* A node goes down; it is replaced only once the deadline has passed. */
    {
        uint64_t y = 1 + rnd() % n_nodes;
        const meta_node *ny = meta_node_find(s, y);
        if (ny->state == META_NODE_ACTIVE) {
            set_state(s, y, META_NODE_DOWN, 10000);
            placement_move *mv;
            size_t n;
            strata_err err;
            assert_int_equal(placement_replace_down(s, 10500, 1000, &mv, &n, &err), 0);
            assert_int_equal(n, 0);
            free(mv);
            bool possible = drain_possible(s, y, n_az);
            int rc = placement_replace_down(s, 11000, 1000, &mv, &n, &err);
            if (possible && rc == 0) {
                apply_moves(s, mv, n);
                free(mv);
                assert_int_equal(replicas_of(s, y), 0);
                set_state(s, y, META_NODE_REMOVED, 11001);
            } else if (replicas_of(s, y) > 0) {
                if (possible)
                    fail_msg("seed %llu: replace %llu: %s", (unsigned long long)seed,
                             (unsigned long long)y, err.msg);
                assert_int_equal(rc, -1);
            }
            check_ok(s);
        }
    }
    apply_leaders(s);
    check_ok(s);
    uint64_t digest = meta_state_digest(s);
    {
        /* The snapshot of the final state restores to the same state. */
        buf b;
        buf_init(&b, 0);
        strata_err err;
        assert_int_equal(meta_state_encode(s, &b, &err), 0);
        meta_state *r = meta_state_decode(b.data, b.len, &err);
        if (r == NULL)
            fail_msg("seed %llu: snapshot: %s", (unsigned long long)seed, err.msg);
        assert_int_equal(meta_state_digest(r), digest);
        meta_free(r);
        buf_free(&b);
    }
    phase = "load";
    random_load_rounds(s); /* after the digest: the determinism test compares the rest */
    if (verbose)
        printf("seed %llu: %zu AZs, %zu nodes, %zu partitions, digest %016llx\n",
               (unsigned long long)seed, n_az, meta_node_count(s), meta_partition_count(s),
               (unsigned long long)digest);
    meta_free(s);
    return digest;
}

static void test_randomized_clusters(void **state)
{
    (void)state;
    /* META_PLACEMENT_SEEDS=n runs more clusters (for soak runs by hand). */
    const char *env = getenv("META_PLACEMENT_SEEDS");
    uint64_t seeds = env ? strtoull(env, NULL, 10) : 150;
    for (uint64_t seed = 1; seed <= seeds; seed++)
        scenario(seed, seed <= 3);
}

static void test_determinism(void **state)
{
    (void)state;
    for (uint64_t seed = 500; seed < 510; seed++)
        assert_int_equal(scenario(seed, false), scenario(seed, false));
    assert_int_not_equal(scenario(1, false), scenario(2, false));
}

static void test_needs_three_azs(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "b", "h3");
    meta_partition p[1];
    strata_err err;
    assert_int_equal(placement_new_table(s, 1, 1, 1, p, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_non_null(strstr(err.msg, "3 AZs"));
    reg(s, 4, "c", "h4");
    set_state(s, 4, META_NODE_DRAINING, 1); /* draining nodes take no new replicas */
    assert_int_equal(placement_new_table(s, 1, 1, 1, p, &err), -1);
    set_state(s, 4, META_NODE_ACTIVE, 2);
    assert_int_equal(placement_new_table(s, 1, 1, 1, p, &err), 0);
    assert_int_equal(p[0].hash_lo, 0);
    assert_int_equal(p[0].hash_hi, UINT64_MAX);
    assert_int_equal(placement_new_table(s, 1, 0, 1, p, &err), -1);
    meta_free(s);
}

static void test_even_ranges(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "c", "h3");
    meta_partition p[7];
    strata_err err;
    assert_int_equal(placement_new_table(s, 4, 7, 10, p, &err), 0);
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(p[i].id, 10 + i);
        assert_int_equal(p[i].table_id, 4);
        assert_int_equal(p[i].n_members, 3);
        if (i)
            assert_int_equal(p[i].hash_lo, p[i - 1].hash_hi + 1);
    }
    assert_int_equal(p[6].hash_hi, UINT64_MAX);
    /* Leaders rotate over the three nodes. */
    size_t leads[4] = {0};
    for (size_t i = 0; i < 7; i++)
        leads[p[i].leader_hint]++;
    assert_true(leads[1] >= 2 && leads[2] >= 2 && leads[3] >= 2);
    meta_free(s);
}

static void test_drain_impossible_with_three_single_node_azs(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "c", "h3");
    reg(s, 4, "a", "h1"); /* same host as node 1 */
    create_table(s, "t", 4);
    set_state(s, 1, META_NODE_DRAINING, 5);
    placement_move *mv;
    size_t n;
    strata_err err;
    if (replicas_of(s, 1) > 0) {
        assert_int_equal(placement_drain(s, 1, &mv, &n, &err), -1);
        assert_non_null(strstr(err.msg, "AZ or host"));
    }
    reg(s, 5, "a", "h5");
    assert_int_equal(placement_drain(s, 1, &mv, &n, &err), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(mv[i].to, 5); /* the only node of AZ a on another host */
    apply_moves(s, mv, n);
    free(mv);
    assert_int_equal(replicas_of(s, 1), 0);
    assert_int_equal(placement_drain(s, 99, &mv, &n, &err), -1);
    assert_int_equal(err.code, ERR_NOT_FOUND);
    meta_free(s);
}

static void test_rebalance_through_third_node(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "c", "h3");
    reg(s, 7, "a", "h7");
    create_table(s, "t", 3); /* AZ a: node 1 gets 2 replicas, node 7 gets 1 */
    assert_int_equal(replicas_of(s, 1), 2);
    assert_int_equal(replicas_of(s, 7), 1);
    reg(s, 4, "a", "h1"); /* joins on node 1's host: 1 -> 4 is never legal */
    placement_move *mv;
    size_t n;
    strata_err err;
    assert_int_equal(placement_rebalance(s, &mv, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(mv[0].from, 1);
    assert_int_equal(mv[0].to, 7);
    assert_int_equal(mv[1].from, 7);
    assert_int_equal(mv[1].to, 4);
    apply_moves(s, mv, n);
    free(mv);
    assert_int_equal(replicas_of(s, 1), 1);
    assert_int_equal(replicas_of(s, 4), 1);
    assert_int_equal(replicas_of(s, 7), 1);
    meta_free(s);
}

static void test_leaders_leave_unfit_nodes(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "c", "h3");
    create_table(s, "t", 9);
    assert_int_equal(leaders_of(s, 1), 3);
    assert_int_equal(leaders_of(s, 2), 3);
    assert_int_equal(leaders_of(s, 3), 3);
    set_state(s, 1, META_NODE_DRAINING, 10);
    set_state(s, 2, META_NODE_DOWN, 11);
    apply_leaders(s);
    assert_int_equal(leaders_of(s, 3), 9); /* the only ACTIVE voter leads everything */
    set_state(s, 1, META_NODE_ACTIVE, 12);
    set_state(s, 2, META_NODE_ACTIVE, 13);
    apply_leaders(s);
    assert_int_equal(leaders_of(s, 1), 3);
    assert_int_equal(leaders_of(s, 2), 3);
    assert_int_equal(leaders_of(s, 3), 3);
    meta_free(s);
}

static size_t apply_leader_list(meta_state *s, placement_leader *l, size_t n)
{
    strata_err err;
    for (size_t i = 0; i < n; i++) {
        meta_cmd c = {
            .kind = META_CMD_SET_LEADER, .partition_id = l[i].partition_id, .node_id = l[i].leader};
        if (run(s, &c, &err))
            fail_msg("set leader: %s", err.msg);
    }
    free(l);
    return n;
}

/* placement_leaders_fix moves only the hints that must move (off a DRAINING node here),
 * never shuffles the others; placement_leaders then evens out; a balanced map plans
 * nothing. */
static void test_leaders_fix_only_unfit(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "c", "h3");
    reg(s, 4, "a", "h4");
    create_table(s, "t", 8);
    placement_leader *l;
    size_t n;
    strata_err err;
    apply_leaders(s);
    size_t before[5];
    for (uint64_t i = 1; i <= 4; i++)
        before[i] = leaders_of(s, i);
    set_state(s, 1, META_NODE_DRAINING, 10);
    assert_int_equal(placement_leaders_fix(s, &l, &n, &err), 0);
    assert_int_equal(n, before[1]);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(l[i].leader, 1);
    apply_leader_list(s, l, n);
    assert_int_equal(leaders_of(s, 1), 0);
    assert_int_equal(leaders_of(s, 4), before[4]); /* untouched: no balancing */
    assert_int_equal(placement_leaders_fix(s, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 0);
    /* Back to ACTIVE: balancing gives node 1 its share again, within 1 of even. */
    set_state(s, 1, META_NODE_ACTIVE, 11);
    assert_int_equal(placement_leaders(s, &l, &n, &err), 0);
    assert_true(apply_leader_list(s, l, n) > 0);
    size_t lo = SIZE_MAX, hi = 0;
    for (uint64_t i = 1; i <= 4; i++) {
        size_t k = leaders_of(s, i);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
    }
    assert_true(hi - lo <= 1);
    assert_int_equal(placement_leaders(s, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 0); /* stable */
    meta_free(s);
}

/* Nodes 1..n_nodes in AZs a, b, c, a, b... (host h<id>), a table "t" of nparts
 * partitions, leader counts balanced. */
static meta_state *nodes_table(uint64_t n_nodes, size_t nparts)
{
    meta_state *s = meta_new();
    for (uint64_t id = 1; id <= n_nodes; id++) {
        char az[2] = {(char)('a' + (id - 1) % 3), 0}, host[24];
        snprintf(host, sizeof host, "h%llu", (unsigned long long)id);
        reg(s, id, az, host);
    }
    create_table(s, "t", nparts);
    apply_leaders(s);
    return s;
}

/* Three nodes leading three partitions each, the ones of node 1 hot: the hot ones end on
 * three different nodes (swaps: counts stay 3/3/3), in few rounds, then nothing moves. */
static void test_leaders_load_spreads(void **state)
{
    (void)state;
    meta_state *s = nodes_table(3, 9);
    memset(part_load, 0, sizeof part_load);
    uint64_t hot[3];
    size_t n_hot = 0;
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        part_load[p->id] = p->leader_hint == 1 ? 100000 : 1000;
        if (p->leader_hint == 1)
            hot[n_hot++] = p->id;
    }
    assert_int_equal(n_hot, 3);
    placement_load_opts o = {.min_gap = 5000, .gap_percent = 20, .max_changes = 4};
    size_t rounds = load_settle(s, &o, 10);
    assert_true(rounds >= 1 && rounds <= 2);
    for (uint64_t node = 1; node <= 3; node++) {
        assert_int_equal(leaders_of(s, node), 3);
        assert_int_equal(node_load(s, node), 102000);
    }
    for (size_t i = 0; i < n_hot; i++)
        for (size_t j = i + 1; j < n_hot; j++)
            assert_int_not_equal(meta_partition_find(s, hot[i])->leader_hint,
                                 meta_partition_find(s, hot[j])->leader_hint);
    /* The count balancer has nothing to undo. */
    placement_leader *l;
    size_t n;
    strata_err err;
    assert_int_equal(placement_leaders(s, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 0);
    meta_free(s);
}

/* Even load, or a gap within the thresholds (absolute or relative to the mean), plans
 * nothing; just past both, it acts. */
static void test_leaders_load_even_is_stable(void **state)
{
    (void)state;
    meta_state *s = nodes_table(3, 6);
    placement_leader *l;
    size_t n;
    strata_err err;
    placement_load_opts o = {.min_gap = 100, .gap_percent = 25, .max_changes = 4};
    for (size_t i = 0; i < meta_partition_count(s); i++)
        part_load[meta_partition_at(s, i)->id] = 1000;
    assert_int_equal(placement_leaders_load(s, load_of, NULL, &o, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 0);
    /* Node 1's two partitions: 1000 -> 1250 each: its load 2500 against 2000, the mean
     * 2166: the gap (500) is within 25% of the mean (541). */
    for (size_t i = 0; i < meta_partition_count(s); i++)
        if (meta_partition_at(s, i)->leader_hint == 1)
            part_load[meta_partition_at(s, i)->id] = 1250;
    assert_int_equal(placement_leaders_load(s, load_of, NULL, &o, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 0);
    /* Below the absolute minimum: nothing either. */
    o.gap_percent = 0;
    o.min_gap = 500;
    assert_int_equal(placement_leaders_load(s, load_of, NULL, &o, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 0);
    /* Past both: a swap of a 1250 with a 1000 (d = 250 < gap 500) evens it out. */
    o.min_gap = 499;
    assert_int_equal(placement_leaders_load(s, load_of, NULL, &o, &l, &n, &err), 0);
    assert_int_equal(apply_leader_list(s, l, n), 2);
    assert_int_equal(node_load(s, 1), 2250);
    assert_int_equal(load_settle(s, &o, 5), 0);
    meta_free(s);
}

/* Unequal counts (4 partitions over 3 nodes): a single move where the receiver leads
 * fewer; the best split of two hot partitions over three nodes is kept, not flipped. */
static void test_leaders_load_counts_within_one(void **state)
{
    (void)state;
    meta_state *s = nodes_table(3, 4);
    uint64_t top = 0;
    for (uint64_t node = 1; node <= 3; node++)
        if (leaders_of(s, node) == 2)
            top = node;
    assert_true(top != 0);
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        part_load[p->id] = p->leader_hint == top ? 100000 : 0;
    }
    placement_load_opts o = {.min_gap = 1000, .gap_percent = 10, .max_changes = 1};
    assert_int_equal(load_round(s, &o), 1);
    assert_int_equal(node_load(s, top), 100000);
    assert_int_equal(leaders_of(s, top), 1);
    assert_true(spread(s, NULL, true) <= 1);
    /* 100000 / 100000 / 0: no step narrows a gap without opening an equal one. */
    o.max_changes = 8;
    assert_int_equal(load_settle(s, &o, 3), 0);
    meta_free(s);
}

/* Two hot partitions over three nodes (100000 / 100000 / a little): moving a hot one to
 * the third node would gain only the cold loads, so nothing wanders. */
static void test_leaders_load_no_wandering(void **state)
{
    (void)state;
    meta_state *s = nodes_table(3, 6);
    memset(part_load, 0, sizeof part_load);
    uint64_t hot_node[2] = {0, 0};
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        bool hot =
            p->leader_hint != 3 && p->leader_hint != hot_node[0] && p->leader_hint != hot_node[1];
        if (hot)
            hot_node[hot_node[0] ? 1 : 0] = p->leader_hint;
        /* node 3: two of 300 or 400; the hot ones' companions 900: a swap of a hot one with a
         * cold one of node 3 would lower the sum of squares, by little. */
        part_load[p->id] = hot ? 100000 : p->leader_hint == 3 ? 300 + 100 * (i % 2) : 900;
    }
    assert_true(hot_node[0] && hot_node[1]);
    placement_load_opts o = {.min_gap = 1000, .gap_percent = 10, .max_changes = 4};
    assert_int_equal(load_settle(s, &o, 2), 0);
    meta_free(s);
}

/* Six nodes, two per AZ: the replicas in AZ a of the hot partitions all on node 1 end
 * spread over nodes 1 and 4 (swaps: counts unchanged), within the AZ, leaders' replicas
 * untouched; then nothing moves. Three nodes (one per AZ): never a move. */
static void test_rebalance_load_within_az(void **state)
{
    (void)state;
    meta_state *s = nodes_table(6, 6);
    memset(part_load, 0, sizeof part_load);
    size_t n_hot = 0;
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        bool hot = meta_partition_has(p, 1, NULL) && p->leader_hint != 1;
        part_load[p->id] = hot ? 100000 : 1000;
        n_hot += hot;
    }
    assert_true(n_hot >= 2);
    assert_true(replica_load(s, 1) >= 200000);
    size_t held1 = replicas_of(s, 1), held4 = replicas_of(s, 4);
    uint64_t gap0 = replica_load(s, 1) - replica_load(s, 4);
    placement_load_opts o = {.min_gap = 5000, .gap_percent = 10, .max_changes = 4};
    assert_true(replica_load_settle(s, &o, 10) >= 1);
    uint64_t l1 = replica_load(s, 1), l4 = replica_load(s, 4);
    assert_true((l1 > l4 ? l1 - l4 : l4 - l1) < gap0 / 2);
    assert_int_equal(replicas_of(s, 1), held1);
    assert_int_equal(replicas_of(s, 4), held4);
    meta_free(s);

    s = nodes_table(3, 6);
    for (size_t i = 0; i < meta_partition_count(s); i++)
        part_load[meta_partition_at(s, i)->id] = i < 3 ? 100000 : 0;
    assert_int_equal(replica_load_round(s, &o), 0);
    meta_free(s);
}

/* Even load moves nothing; a node that is not ACTIVE receives no replica. */
static void test_rebalance_load_active_only(void **state)
{
    (void)state;
    meta_state *s = nodes_table(6, 6);
    for (size_t i = 0; i < meta_partition_count(s); i++)
        part_load[meta_partition_at(s, i)->id] = 1000;
    placement_load_opts o = {.min_gap = 100, .gap_percent = 10, .max_changes = 4};
    assert_int_equal(replica_load_round(s, &o), 0);
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        part_load[p->id] = meta_partition_has(p, 1, NULL) && p->leader_hint != 1 ? 90000 : 10;
    }
    /* Node 4 is node 1's only AZ companion: the other AZs may even out, AZ a not. */
    set_state(s, 4, META_NODE_DRAINING, 10);
    size_t held4 = replicas_of(s, 4);
    uint64_t l1 = replica_load(s, 1);
    replica_load_settle(s, &o, 10);
    assert_int_equal(replicas_of(s, 4), held4);
    assert_int_equal(replica_load(s, 1), l1);
    set_state(s, 4, META_NODE_ACTIVE, 11);
    assert_true(replica_load_round(s, &o) > 0);
    assert_true(replica_load(s, 1) < l1);
    meta_free(s);
}

/* A node that is not ACTIVE neither gets hints nor counts as the coolest. */
static void test_leaders_load_active_only(void **state)
{
    (void)state;
    meta_state *s = nodes_table(5, 10);
    set_state(s, 2, META_NODE_DOWN, 10);
    set_state(s, 5, META_NODE_DRAINING, 11);
    apply_leaders(s);
    assert_int_equal(leaders_of(s, 2), 0);
    assert_int_equal(leaders_of(s, 5), 0);
    memset(part_load, 0, sizeof part_load);
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        part_load[p->id] = p->leader_hint == 1 ? 50000 : 10;
    }
    placement_load_opts o = {.min_gap = 100, .gap_percent = 10, .max_changes = 2};
    assert_true(load_round(s, &o) > 0); /* load_round checks every hint is ACTIVE */
    load_settle(s, &o, 20);
    assert_int_equal(leaders_of(s, 2), 0);
    assert_int_equal(leaders_of(s, 5), 0);
    assert_true(node_load(s, 1) < (uint64_t)50000 * leaders_of(s, 1) || leaders_of(s, 1) == 0);
    meta_free(s);
}

static void test_replace_after_deadline(void **state)
{
    (void)state;
    meta_state *s = meta_new();
    reg(s, 1, "a", "h1");
    reg(s, 2, "b", "h2");
    reg(s, 3, "c", "h3");
    reg(s, 4, "b", "h4");
    create_table(s, "t", 4);
    size_t held = replicas_of(s, 2);
    assert_true(held > 0);
    set_state(s, 2, META_NODE_DOWN, 50000);
    placement_move *mv;
    size_t n;
    strata_err err;
    assert_int_equal(placement_replace_down(s, 50000 + 29999, 30000, &mv, &n, &err), 0);
    assert_int_equal(n, 0);
    free(mv);
    assert_int_equal(placement_replace_down(s, 50000 + 30000, 30000, &mv, &n, &err), 0);
    assert_int_equal(n, held);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(mv[i].from, 2);
        assert_int_equal(mv[i].to, 4);
        assert_true(mv[i].promote);
        assert_int_equal(placement_move_steps(&mv[i]), 3);
    }
    meta_cmd c;
    assert_int_equal(placement_move_cmd(s, &mv[0], 3, &c, &err), -1);
    apply_moves(s, mv, n);
    free(mv);
    assert_int_equal(replicas_of(s, 2), 0);
    set_state(s, 2, META_NODE_REMOVED, 80001);
    check_ok(s);
    meta_free(s);
}

/* One step of a move (placement_move_cmd), applied and checked. */
static void step(meta_state *s, const placement_move *m, int i)
{
    meta_cmd c;
    strata_err err;
    assert_int_equal(placement_move_cmd(s, m, i, &c, &err), 0);
    if (run(s, &c, &err))
        fail_msg("step %d of %llu -> %llu: %s", i, (unsigned long long)m->from,
                 (unsigned long long)m->to, err.msg);
    check_ok(s);
}

static size_t count_rebalance_moves(const meta_state *s)
{
    placement_move *mv;
    size_t n;
    strata_err err;
    assert_int_equal(placement_rebalance(s, &mv, &n, &err), 0);
    free(mv);
    return n;
}

/* A swap by load carried out as the scheduler does, one move and one step at a time:
 * each move is ready before it starts and RUNNING until its removal; the removal of the
 * extra voter must be told the planned source (by counts alone it would be the receiver,
 * which holds one more replica during the first half); between the two halves count
 * balancing would move a replica (why the second half goes first); after both, counts
 * are even and count balancing has nothing to do. */
static void test_load_swap_stepwise(void **state)
{
    (void)state;
    meta_state *s = nodes_table(6, 6);
    memset(part_load, 0, sizeof part_load);
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        part_load[p->id] = meta_partition_has(p, 1, NULL) && p->leader_hint != 1 ? 100000 : 1000;
    }
    assert_int_equal(count_rebalance_moves(s), 0);
    placement_load_opts o = {.min_gap = 5000, .gap_percent = 10, .max_changes = 2};
    placement_move *mv;
    size_t n;
    strata_err err;
    assert_int_equal(placement_rebalance_load(s, load_of, NULL, &o, &mv, &n, &err), 0);
    assert_int_equal(n, 2); /* counts are even (3 and 3 in every AZ): a swap */
    assert_int_equal(mv[0].from, mv[1].to);
    assert_int_equal(mv[0].to, mv[1].from);
    for (size_t i = 0; i < n; i++) {
        assert_true(placement_move_ready(s, &mv[i]));
        assert_int_equal(placement_move_progress(s, &mv[i]), PLACEMENT_MOVE_UNDONE);
        step(s, &mv[i], 0); /* ADD_LEARNER */
        assert_false(placement_move_ready(s, &mv[i]));
        assert_int_equal(placement_move_progress(s, &mv[i]), PLACEMENT_MOVE_RUNNING);
        step(s, &mv[i], 1); /* PROMOTE */
        assert_int_equal(placement_move_progress(s, &mv[i]), PLACEMENT_MOVE_RUNNING);
        const meta_partition *p = meta_partition_find(s, mv[i].partition_id);
        if (i == 0)
            assert_int_equal(placement_removal(s, p, 0), mv[i].to);
        assert_int_equal(placement_removal(s, p, mv[i].from), mv[i].from);
        step(s, &mv[i], 2); /* REMOVE_REPLICA */
        assert_int_equal(placement_move_progress(s, &mv[i]), PLACEMENT_MOVE_DONE);
        if (i == 0)
            assert_true(count_rebalance_moves(s) > 0);
    }
    assert_int_equal(count_rebalance_moves(s), 0);
    free(mv);
    meta_free(s);
}

/* A planned move that no longer fits the map is not ready; one whose learner left is
 * UNDONE; a removal never breaks the rules, whatever it is told to prefer, and takes a
 * node that is not ACTIVE first. */
static void test_planned_move_checks(void **state)
{
    (void)state;
    meta_state *s = nodes_table(6, 6);
    const meta_partition *p = NULL;
    for (size_t i = 0; i < meta_partition_count(s) && p == NULL; i++)
        if (meta_partition_has(meta_partition_at(s, i), 1, NULL) &&
            meta_partition_at(s, i)->leader_hint != 1)
            p = meta_partition_at(s, i);
    assert_non_null(p);
    uint64_t pid = p->id, hint = p->leader_hint;
    placement_move m = {.partition_id = pid, .from = 1, .to = 4, .promote = true};
    assert_true(placement_move_ready(s, &m));
    placement_move bad = m;
    bad.from = hint; /* the leader's replica */
    assert_false(placement_move_ready(s, &bad));
    bad = m;
    bad.to = 2; /* another AZ: two voters in AZ b after the removal */
    assert_false(placement_move_ready(s, &bad));
    bad.partition_id = 999999;
    assert_false(placement_move_ready(s, &bad));
    assert_int_equal(placement_move_progress(s, &bad), PLACEMENT_MOVE_UNDONE);
    set_state(s, 4, META_NODE_DRAINING, 10);
    assert_false(placement_move_ready(s, &m));
    set_state(s, 4, META_NODE_ACTIVE, 11);

    /* Started, then the learner taken away: UNDONE. */
    step(s, &m, 0);
    assert_int_equal(placement_move_progress(s, &m), PLACEMENT_MOVE_RUNNING);
    p = meta_partition_find(s, pid);
    meta_cmd c = {
        .kind = META_CMD_REMOVE_REPLICA, .partition_id = pid, .epoch = p->epoch, .node_id = 4};
    strata_err err;
    assert_int_equal(run(s, &c, &err), 0);
    assert_int_equal(placement_move_progress(s, &m), PLACEMENT_MOVE_UNDONE);

    /* Four voters: only the two of AZ a may go; a preferred voter of another AZ is not
     * taken; a DRAINING one is taken before the busiest. */
    step(s, &m, 0);
    step(s, &m, 1);
    p = meta_partition_find(s, pid);
    for (uint32_t k = 0; k < p->n_members; k++) {
        uint64_t id = p->members[k].node;
        uint64_t got = placement_removal(s, p, id);
        assert_int_equal(got, id == 1 || id == 4 ? id : placement_removal(s, p, 0));
        assert_true(placement_removal(s, p, 0) == 1 || placement_removal(s, p, 0) == 4);
    }
    uint64_t busiest = placement_removal(s, p, 0);
    uint64_t other = busiest == 1 ? 4 : 1;
    set_state(s, other, META_NODE_DRAINING, 12);
    p = meta_partition_find(s, pid);
    assert_int_equal(placement_removal(s, p, 0), other);
    meta_free(s);
}

/* ---- the meta group's seats (placement_meta_seats) ---- */

/* Liveness as a test sets it: bit i of `down` = node i unreachable, of `stopping` = node i
 * stopping. */
typedef struct {
    unsigned down, stopping;
} seat_world;

static bool world_reachable(void *ctx, uint64_t node)
{
    const seat_world *w = ctx;
    return !(w->down >> node & 1);
}

static bool world_staying(void *ctx, uint64_t node)
{
    const seat_world *w = ctx;
    return world_reachable(ctx, node) && !(w->stopping >> node & 1);
}

static placement_seat_view seat_view_of(uint64_t self, uint64_t now, seat_world *w)
{
    return (placement_seat_view){.self = self,
                                 .now_ms = now,
                                 .replace_after_ms = 300000,
                                 .reachable = world_reachable,
                                 .staying = world_staying,
                                 .ctx = w};
}

/* Nodes 1..n over AZs a, b, c in turn, each on a host of its own. */
static meta_state *seat_cluster(uint64_t n)
{
    static const char *az[] = {"a", "b", "c"};
    meta_state *s = meta_new();
    for (uint64_t i = 1; i <= n; i++) {
        char host[16];
        snprintf(host, sizeof host, "h%llu", (unsigned long long)i);
        reg(s, i, az[(i - 1) % 3], host);
    }
    return s;
}

/* A configuration with the given voters and learners (0-terminated lists). */
static meta_partition config_of(const uint64_t *voters, const uint64_t *learners)
{
    meta_partition g = {0};
    for (; *voters; voters++)
        g.members[g.n_members++] = (meta_replica){*voters, META_VOTER};
    for (; learners && *learners; learners++)
        g.members[g.n_members++] = (meta_replica){*learners, META_LEARNER};
    return g;
}

/* Applies a PROPOSE step through meta_apply (its rules check the plan). */
static void apply_seat(meta_state *s, placement_seat_step st)
{
    assert_int_equal(st.action, PLACEMENT_SEAT_PROPOSE);
    meta_cmd c = {.kind = META_CMD_META_MEMBERS,
                  .now_ms = 1,
                  .epoch = st.epoch,
                  .seats = st.seats,
                  .parts = &st.next,
                  .n_parts = 1};
    strata_err err;
    if (run(s, &c, &err))
        fail_msg("seat step refused: %s", err.msg);
}

/* seat_cluster(n) with the seats recorded (voters 1, 2 and 3; three seats), and a view
 * from node 1 of the world *w (all up). *cfg: the configuration as recorded. */
static meta_state *seated(uint64_t n, seat_world *w, placement_seat_view *v, meta_partition *cfg)
{
    meta_state *s = seat_cluster(n);
    *w = (seat_world){0};
    *v = seat_view_of(1, 1000, w);
    *cfg = config_of((const uint64_t[]){1, 2, 3, 0}, NULL);
    apply_seat(s, placement_meta_seats(s, cfg, v));
    return s;
}

static meta_role seat_role(const meta_state *s, uint64_t node)
{
    meta_role r;
    return meta_partition_has(meta_group(s), node, &r) ? r : 0;
}

static void test_seats_first_record(void **state)
{
    (void)state;
    static const struct {
        uint64_t voters[6];
        uint32_t seats;
    } cases[] = {{{1}, 1}, {{1, 2}, 3}, {{1, 2, 3}, 3}, {{1, 2, 3, 4}, 5}, {{1, 2, 3, 4, 5}, 5}};
    seat_world w = {0};
    placement_seat_view v = seat_view_of(1, 1000, &w);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        meta_state *s = seat_cluster(6);
        meta_partition cfg = config_of(cases[i].voters, (const uint64_t[]){6, 0});
        placement_seat_step st = placement_meta_seats(s, &cfg, &v);
        assert_int_equal(st.reason, PLACEMENT_SEAT_RECORD);
        assert_int_equal(st.epoch, 0);
        assert_int_equal(st.seats, cases[i].seats);
        apply_seat(s, st);
        assert_int_equal(meta_partition_voters(meta_group(s)), i + 1);
        assert_int_equal(seat_role(s, 6), META_LEARNER);
        meta_free(s);
    }
    /* A member not registered yet: wait for it. */
    meta_state *s = seat_cluster(2);
    meta_partition cfg = config_of((const uint64_t[]){1, 2, 3, 0}, NULL);
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);
    meta_free(s);
}

/* A drained voter's seat moves: a learner on the best candidate, probed, promoted, and
 * the drained voter goes; each step waits for the configuration to follow the map. */
static void test_seats_move_off_a_drained_voter(void **state)
{
    (void)state;
    seat_world w;
    placement_seat_view v;
    meta_partition cfg;
    meta_state *s = seated(6, &w, &v, &cfg); /* 1a 2b 3c 4a 5b 6c */
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);

    set_state(s, 2, META_NODE_DRAINING, 2000);
    /* Node 5 is in AZ b, which no staying voter has (2 leaves); node 4 shares AZ a with
     * voter 1. A stopping node 5 would not be chosen. */
    w.stopping = 1u << 5;
    placement_seat_step st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_TAKE);
    assert_int_equal(st.node, 4);
    w.stopping = 0;
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_TAKE);
    assert_int_equal(st.node, 5);
    apply_seat(s, st);
    assert_int_equal(seat_role(s, 5), META_LEARNER);

    /* The configuration lags: wait. Then the learner is probed, once reachable. */
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);
    cfg = config_of((const uint64_t[]){1, 2, 3, 0}, (const uint64_t[]){5, 0});
    w.down = 1u << 5;
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);
    w.down = 0;
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.action, PLACEMENT_SEAT_PROBE);
    assert_int_equal(st.node, 5);

    /* Caught up: promoted, unless the map moved on since the probe. */
    uint64_t epoch = meta_group(s)->epoch;
    assert_int_equal(placement_seat_promote(s, 5, epoch + 1).action, PLACEMENT_SEAT_WAIT);
    assert_int_equal(placement_seat_promote(s, 4, epoch).action, PLACEMENT_SEAT_WAIT);
    st = placement_seat_promote(s, 5, epoch);
    assert_int_equal(st.reason, PLACEMENT_SEAT_PROMOTE);
    apply_seat(s, st);
    assert_int_equal(seat_role(s, 5), META_VOTER);
    /* Until the configuration promotes it too, wait. */
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);

    /* Four voters, three seats: the drained one goes. */
    cfg = config_of((const uint64_t[]){1, 2, 3, 5, 0}, NULL);
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_GIVE_UP);
    assert_int_equal(st.node, 2);
    apply_seat(s, st);
    cfg = config_of((const uint64_t[]){1, 3, 5, 0}, NULL);
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);
    assert_int_equal(meta_group_seats(s), 3);
    meta_free(s);
}

/* A leaving voter that came back before its seat moved leaves a voter too many: one whose
 * AZ another voter shares goes, never the leader, the highest id among equals. */
static void test_seats_extra_voter(void **state)
{
    (void)state;
    seat_world w;
    placement_seat_view v;
    meta_partition cfg;
    meta_state *s = seated(6, &w, &v, &cfg); /* 1a 2b 3c 4a 5b 6c */
    set_state(s, 3, META_NODE_DRAINING, 2000);
    placement_seat_step st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.node, 6); /* AZ c, which no staying voter has */
    apply_seat(s, st);
    apply_seat(s, placement_seat_promote(s, 6, meta_group(s)->epoch));
    set_state(s, 3, META_NODE_ACTIVE, 3000); /* the drain is called off */
    cfg = config_of((const uint64_t[]){1, 2, 3, 6, 0}, NULL);
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_GIVE_UP);
    assert_int_equal(st.node, 6); /* 3 and 6 share AZ c: the highest id */
    /* Led by node 6, node 3 goes instead. */
    placement_seat_view v6 = seat_view_of(6, 1000, &w);
    st = placement_meta_seats(s, &cfg, &v6);
    assert_int_equal(st.node, 3);
    apply_seat(s, st);
    assert_int_equal(meta_partition_voters(meta_group(s)), 3);
    meta_free(s);
}

/* A candidate in an AZ no staying voter has beats one on a new host only. */
static void test_seats_candidate_prefers_a_new_az(void **state)
{
    (void)state;
    seat_world w;
    placement_seat_view v;
    meta_partition cfg;
    meta_state *s = seated(3, &w, &v, &cfg); /* 1a 2b 3c, hosts h1-h3 */
    reg(s, 4, "a", "h4"); /* AZ a has voter 1; a host of its own */
    reg(s, 5, "c", "h1"); /* AZ c loses its voter; voter 1's host */
    set_state(s, 3, META_NODE_DRAINING, 2000);
    placement_seat_step st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_TAKE);
    assert_int_equal(st.node, 5);
    meta_free(s);
}

/* The configuration follows the map one change at a time: add (a learner), promote,
 * remove, in that order, but for a full configuration; nothing once they agree. */
static void test_config_next(void **state)
{
    (void)state;
    meta_partition map = config_of((const uint64_t[]){1, 2, 4, 0}, (const uint64_t[]){5, 0});
    meta_partition cfg = config_of((const uint64_t[]){1, 2, 3, 0}, (const uint64_t[]){4, 0});
    assert_true(placement_config_next(&map, &cfg)); /* 5 added as a learner */
    assert_int_equal(cfg.n_members, 5);
    assert_int_equal(cfg.members[4].node, 5);
    assert_int_equal(cfg.members[4].role, META_LEARNER);
    assert_true(placement_config_next(&map, &cfg)); /* 4 promoted */
    assert_int_equal(cfg.members[3].role, META_VOTER);
    assert_true(placement_config_next(&map, &cfg)); /* 3 removed */
    assert_int_equal(cfg.n_members, 4);
    assert_false(meta_partition_has(&cfg, 3, NULL));
    meta_partition same = cfg;
    assert_false(placement_config_next(&map, &cfg));
    assert_memory_equal(&same, &cfg, sizeof cfg);
    /* A configuration of META_MAX_MEMBERS takes no one more: the member the map lacks goes
     * first, and the missing one is added after that. */
    map = config_of((const uint64_t[]){1, 2, 3, 0}, (const uint64_t[]){4, 5, 7, 0});
    cfg = config_of((const uint64_t[]){1, 2, 3, 0}, (const uint64_t[]){4, 5, 6, 0});
    assert_int_equal(cfg.n_members, META_MAX_MEMBERS);
    assert_true(placement_config_next(&map, &cfg)); /* 6 removed */
    assert_int_equal(cfg.n_members, META_MAX_MEMBERS - 1);
    assert_false(meta_partition_has(&cfg, 6, NULL));
    assert_true(placement_config_next(&map, &cfg)); /* 7 added */
    assert_true(meta_partition_has(&cfg, 7, NULL));
    assert_false(placement_config_next(&map, &cfg));
}

/* Every voter drained (nodes 1-3, to be replaced by 4-6): the leader cannot hand over to
 * a voter that stays, so the other voters' seats move first; once one stays, the leader
 * hands over, and the new leader moves the old one's seat. */
static void test_seats_all_voters_drained(void **state)
{
    (void)state;
    seat_world w;
    placement_seat_view v;
    meta_partition cfg;
    meta_state *s = seated(6, &w, &v, &cfg); /* 1a 2b 3c 4a 5b 6c */
    for (uint64_t i = 1; i <= 3; i++)
        set_state(s, i, META_NODE_DRAINING, 2000);
    placement_seat_step st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_TAKE);
    assert_int_equal(st.node, 4); /* no voter stays: every AZ is new, the lowest id */
    apply_seat(s, st);
    apply_seat(s, placement_seat_promote(s, 4, meta_group(s)->epoch));
    /* Node 4 stays: the leader hands over to it... */
    cfg = config_of((const uint64_t[]){1, 2, 3, 4, 0}, NULL);
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_HAND_OVER);
    /* ... unless it is stopping: then another leaving voter's seat goes. */
    w.stopping = 1u << 4;
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_GIVE_UP);
    assert_int_equal(st.node, 2);
    w.stopping = 0;
    /* Led by node 4, the old leader's seat goes, then the others move. */
    placement_seat_view v4 = seat_view_of(4, 1000, &w);
    st = placement_meta_seats(s, &cfg, &v4);
    assert_int_equal(st.reason, PLACEMENT_SEAT_GIVE_UP);
    assert_int_equal(st.node, 1);
    apply_seat(s, st);
    cfg = config_of((const uint64_t[]){2, 3, 4, 0}, NULL);
    st = placement_meta_seats(s, &cfg, &v4);
    assert_int_equal(st.reason, PLACEMENT_SEAT_TAKE);
    assert_int_equal(st.node, 5); /* AZ a is node 4's: b and c are new, the lowest id */
    apply_seat(s, st);
    meta_free(s);
}

/* DOWN gives a seat up only past replace_after; a learner on a node no longer ACTIVE is
 * dropped; a leaving leader hands over; with nobody to take a seat, only a REMOVED voter
 * goes. */
static void test_seats_down_removed_and_leader(void **state)
{
    (void)state;
    seat_world w;
    placement_seat_view v;
    meta_partition cfg;
    meta_state *s = seated(4, &w, &v, &cfg); /* 1a 2b 3c 4a */

    set_state(s, 3, META_NODE_DOWN, 10000);
    w.down = 1u << 3;
    v.now_ms = 10000 + 299999;
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);
    v.now_ms = 10000 + 300000;
    placement_seat_step st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_TAKE);
    assert_int_equal(st.node, 4);
    apply_seat(s, st);

    /* The learner's node goes DOWN before it caught up: no seat for it. */
    set_state(s, 4, META_NODE_DOWN, 20000);
    cfg = config_of((const uint64_t[]){1, 2, 3, 0}, (const uint64_t[]){4, 0});
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_DROP);
    assert_int_equal(st.node, 4);
    apply_seat(s, st);

    /* Nobody can take node 3's seat (node 4 is DOWN): a DOWN voter keeps it... */
    cfg = config_of((const uint64_t[]){1, 2, 3, 0}, NULL);
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_WAIT);
    /* ... a REMOVED one does not (the group shrinks to two voters). */
    set_state(s, 3, META_NODE_REMOVED, 30000);
    st = placement_meta_seats(s, &cfg, &v);
    assert_int_equal(st.reason, PLACEMENT_SEAT_SHRINK);
    assert_int_equal(st.node, 3);
    apply_seat(s, st);
    assert_int_equal(meta_partition_voters(meta_group(s)), 2);

    /* The leader's own node drained: it hands leadership over first. */
    set_state(s, 1, META_NODE_DRAINING, 40000);
    cfg = config_of((const uint64_t[]){1, 2, 0}, NULL);
    assert_int_equal(placement_meta_seats(s, &cfg, &v).action, PLACEMENT_SEAT_HAND_OVER);
    meta_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needs_three_azs),
        cmocka_unit_test(test_even_ranges),
        cmocka_unit_test(test_drain_impossible_with_three_single_node_azs),
        cmocka_unit_test(test_rebalance_through_third_node),
        cmocka_unit_test(test_leaders_leave_unfit_nodes),
        cmocka_unit_test(test_leaders_fix_only_unfit),
        cmocka_unit_test(test_replace_after_deadline),
        cmocka_unit_test(test_leaders_load_spreads),
        cmocka_unit_test(test_leaders_load_even_is_stable),
        cmocka_unit_test(test_leaders_load_counts_within_one),
        cmocka_unit_test(test_leaders_load_active_only),
        cmocka_unit_test(test_leaders_load_no_wandering),
        cmocka_unit_test(test_rebalance_load_within_az),
        cmocka_unit_test(test_rebalance_load_active_only),
        cmocka_unit_test(test_load_swap_stepwise),
        cmocka_unit_test(test_planned_move_checks),
        cmocka_unit_test(test_randomized_clusters),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_seats_first_record),
        cmocka_unit_test(test_seats_move_off_a_drained_voter),
        cmocka_unit_test(test_seats_extra_voter),
        cmocka_unit_test(test_seats_candidate_prefers_a_new_az),
        cmocka_unit_test(test_seats_all_voters_drained),
        cmocka_unit_test(test_config_next),
        cmocka_unit_test(test_seats_down_removed_and_leader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
