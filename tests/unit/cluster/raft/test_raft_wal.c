/*
 * One 3-replica Raft group on real disks: three raft_hosts in one process, each on its own
 * storage/wal in a temporary directory, all on ONE real libuv loop, connected by an
 * in-memory transport. Elect, submit, stop a follower, submit more, restart it from its
 * WAL and check it catches up to the same applied sequence. Then with compaction: the
 * state machine kept across restarts (like the engine), the leader compacts its log,
 * restarts from a WAL that starts at a snapshot point, and a follower that fell behind
 * the compacted log catches up through an out-of-band copy (fsm.install). Then a replica
 * moves: a fourth node joins with an empty WAL, is added as a learner, installs, is
 * promoted, an old replica is removed, and the joined one restarts from its WAL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "cluster/raft/raft_host.h"
#include "cluster/raft/raft_host_uv.h"
#include "cluster/raft/raft_wal.h"
#include "storage/wal/wal.h"

#define N           4 /* nodes 1-3 start the group; node 4 joins it (test_join_move) */
#define M           3
#define GROUP       7
#define MAX_APPLIED 64

typedef struct msg {
    struct msg *next;
    uint64_t from, to, group;
    uint8_t *bytes;
    size_t len;
} msg;

typedef struct {
    int id;
    bool up;
    char dir[64];
    wal *w;
    raft_wal_storage ws;
    raft_host_uv_clock clock;
    raft_host *host;
    uint64_t applied[MAX_APPLIED]; /* command values, by apply order */
    size_t napplied;
    uint64_t last_index;
    uint64_t install_token; /* an out-of-band copy to complete (0: none) */
    int install_from;
    int installs;
    bool joined; /* not an initial member: started with raft_host_join_group */
} tnode;

static uv_loop_t loop;
static tnode nodes[N + 1];
static msg *queue_head, *queue_tail;
static uv_timer_t pump;
static int closing;

static int tr_send(void *ctx, uint64_t to, uint64_t group, const void *b, size_t len)
{
    tnode *from = ctx;
    msg *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->from = (uint64_t)from->id;
    m->to = to;
    m->group = group;
    m->bytes = malloc(len);
    assert_non_null(m->bytes);
    memcpy(m->bytes, b, len);
    m->len = len;
    if (queue_tail != NULL)
        queue_tail->next = m;
    else
        queue_head = m;
    queue_tail = m;
    return 0;
}

/* Completes a pending out-of-band copy: the state is taken from the source node (a
 * stand-in for pulling the partition from its engine snapshot). */
static void complete_installs(void)
{
    for (int i = 1; i <= N; i++) {
        tnode *n = &nodes[i];
        if (n->install_token == 0 || !n->up)
            continue;
        const tnode *src = &nodes[n->install_from];
        memcpy(n->applied, src->applied, sizeof n->applied);
        n->napplied = src->napplied;
        n->last_index = src->last_index;
        uint64_t token = n->install_token;
        n->install_token = 0;
        n->installs++;
        strata_err err;
        assert_int_equal(raft_host_snapshot_installed(n->host, token, 0, n->last_index, &err), 0);
    }
}

/* Delivers queued messages; runs every millisecond on the loop. */
static void on_pump(uv_timer_t *t)
{
    (void)t;
    complete_installs();
    msg *m = queue_head;
    queue_head = queue_tail = NULL;
    while (m != NULL) {
        msg *next = m->next;
        if (m->to >= 1 && m->to <= N && nodes[m->to].up)
            raft_host_receive(nodes[m->to].host, m->from, m->group, m->bytes, m->len, NULL);
        free(m->bytes);
        free(m);
        m = next;
    }
}

static int fsm_apply(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                     void **result, size_t *result_len)
{
    tnode *n = ctx;
    uint64_t v;
    assert_int_equal(group, GROUP);
    assert_int_equal(len, sizeof v);
    assert_true(index > n->last_index);
    n->last_index = index;
    memcpy(&v, cmd, sizeof v);
    assert_true(n->napplied < MAX_APPLIED);
    n->applied[n->napplied++] = v;
    uint64_t *r = malloc(sizeof *r);
    *r = v * 10;
    *result = r;
    *result_len = sizeof *r;
    return 0;
}

static int fsm_install(void *ctx, uint64_t group, uint64_t index, uint64_t term, uint64_t from,
                       uint64_t token)
{
    tnode *n = ctx;
    (void)term;
    assert_int_equal(group, GROUP);
    assert_true(from >= 1 && from <= N && from != (uint64_t)n->id);
    assert_true(nodes[from].up && nodes[from].last_index >= index);
    n->install_from = (int)from;
    n->install_token = token; /* completed later, from the loop (never from here) */
    return 0;
}

/* keep_state: the state machine survived (like the engine's durable state). */
static void node_up(tnode *n, bool keep_state)
{
    strata_err err;
    wal_options wo = {.dir = n->dir, .segment_size = 1 << 20};
    assert_int_equal(wal_open(&wo, &loop, &n->w, &err), 0);
    raft_host_config cfg = {
        .node_id = (uint64_t)n->id,
        .transport = {.ctx = n, .send = tr_send},
        .fsm = {.ctx = n, .apply = fsm_apply, .install = fsm_install},
        .election_timeout_ms = 150,
        .heartbeat_timeout_ms = 30,
        .seed = (uint64_t)n->id,
        .snapshot_trailing = 2,
        .install_snapshot_timeout_ms = 200,
    };
    raft_wal_storage_init(&n->ws, n->w, &cfg.storage);
    raft_host_uv_clock_init(&n->clock, &loop);
    cfg.clock = raft_host_uv_clock_iface(&n->clock);
    n->host = raft_host_create(&cfg, &err);
    assert_non_null(n->host);
    raft_host_uv_clock_bind(&n->clock, n->host);
    if (!keep_state) {
        n->napplied = 0;
        n->last_index = 0;
    }
    n->install_token = 0;
    n->up = true;
    uint64_t members[M] = {1, 2, 3};
    if (n->joined)
        assert_int_equal(raft_host_join_group(n->host, GROUP, n->last_index, &err), 0);
    else
        assert_int_equal(raft_host_start_group(n->host, GROUP, members, M, n->last_index, &err), 0);
}

static void on_closed(void *data)
{
    (void)data;
    closing--;
}

/* Stops a node cleanly: no more messages in, the WAL finishes what was requested (its
 * callbacks still reach the host), then the host and its timer go. */
static void node_down(tnode *n)
{
    n->up = false;
    raft_wal_storage_detach(&n->ws);
    closing = 1;
    wal_close(n->w, on_closed, NULL);
    while (closing > 0)
        uv_run(&loop, UV_RUN_ONCE);
    raft_host_destroy(n->host);
    n->host = NULL;
    closing = 1;
    raft_host_uv_clock_close(&n->clock, on_closed, NULL);
    while (closing > 0)
        uv_run(&loop, UV_RUN_ONCE);
}

/* Runs the loop until cond() holds, failing after 10 s. */
static void run_until(bool (*cond)(void))
{
    uint64_t deadline = uv_now(&loop) + 10000;
    while (!cond()) {
        assert_true(uv_now(&loop) < deadline);
        uv_run(&loop, UV_RUN_ONCE);
    }
}

static int leader_id(void)
{
    int leader = 0;
    for (int i = 1; i <= N; i++)
        if (nodes[i].up && raft_host_is_leader(nodes[i].host, GROUP)) {
            assert_int_equal(leader, 0); /* one leader at a time in this quiet test */
            leader = i;
        }
    return leader;
}

static bool has_leader(void)
{
    return leader_id() != 0;
}

static int acked, failed_acks;
static uint64_t expected_results[MAX_APPLIED];

static void on_submitted(void *data, const raft_host_outcome *o)
{
    uint64_t v = (uint64_t)(uintptr_t)data;
    if (o->code != ERR_NONE) {
        failed_acks++;
        return;
    }
    assert_int_equal(o->result_len, sizeof(uint64_t));
    uint64_t r;
    memcpy(&r, o->result, sizeof r);
    assert_int_equal(r, v * 10); /* the apply result reaches the submitter */
    expected_results[acked++] = r;
}

static void submit_values(uint64_t from, uint64_t to)
{
    run_until(has_leader);
    int l = leader_id();
    int before = acked;
    for (uint64_t v = from; v <= to; v++) {
        strata_err err;
        assert_int_equal(raft_host_submit(nodes[l].host, GROUP, &v, sizeof v, on_submitted,
                                          (void *)(uintptr_t)v, &err),
                         0);
    }
    uint64_t deadline = uv_now(&loop) + 10000;
    while (acked - before < (int)(to - from + 1)) {
        assert_int_equal(failed_acks, 0);
        assert_true(uv_now(&loop) < deadline);
        uv_run(&loop, UV_RUN_ONCE);
    }
}

static size_t want_applied;
static bool all_up_applied(void)
{
    for (int i = 1; i <= N; i++)
        if (nodes[i].up && nodes[i].napplied < want_applied)
            return false;
    return true;
}

static bool read_ok;
static void on_read(void *data, const raft_host_outcome *o)
{
    (void)data;
    read_ok = o->code == ERR_NONE;
}
static bool read_done_flag(void)
{
    return read_ok;
}

static void test_elect_submit_restart_catch_up(void **state)
{
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &pump);
    uv_timer_start(&pump, on_pump, 1, 1);
    for (int i = 1; i <= M; i++) {
        nodes[i].id = i;
        snprintf(nodes[i].dir, sizeof nodes[i].dir, "/tmp/strata_raft_walXXXXXX");
        assert_non_null(mkdtemp(nodes[i].dir));
        node_up(&nodes[i], false);
    }

    /* Elect and replicate. */
    submit_values(1, 10);
    want_applied = 10;
    run_until(all_up_applied);

    /* A strong read on the leader succeeds; on a follower it is refused with a hint. */
    int l = leader_id();
    strata_err err;
    assert_int_equal(raft_host_read_barrier(nodes[l].host, GROUP, on_read, NULL, &err), 0);
    run_until(read_done_flag);
    int f = l % M + 1;
    assert_int_equal(raft_host_read_barrier(nodes[f].host, GROUP, on_read, NULL, &err), -1);
    assert_int_equal(err.code, ERR_UNAVAILABLE);
    assert_int_equal(raft_host_leader(nodes[f].host, GROUP), (uint64_t)l);

    /* Stop a follower, keep writing with the remaining majority. */
    node_down(&nodes[f]);
    submit_values(11, 15);

    /* Restart it from its WAL: it replays its log and catches up from the leader. */
    node_up(&nodes[f], false);
    want_applied = 15;
    run_until(all_up_applied);
    for (int i = 1; i <= M; i++) {
        assert_int_equal(nodes[i].napplied, 15);
        for (size_t k = 0; k < 15; k++)
            assert_int_equal(nodes[i].applied[k], k + 1);
    }
    raft_host_group_stats st;
    assert_int_equal(raft_host_group_info(nodes[f].host, GROUP, &st, &err), 0);
    assert_false(st.failed);
    assert_true(st.last_stored >= 16); /* bootstrap entry + 15 commands (+ barriers) */

    for (int i = 1; i <= M; i++) {
        node_down(&nodes[i]);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", nodes[i].dir);
        assert_int_equal(system(cmd), 0);
    }
    uv_timer_stop(&pump);
    uv_close((uv_handle_t *)&pump, NULL);
    on_pump(&pump); /* free undelivered messages */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void check_all_applied(size_t n)
{
    for (int i = 1; i <= M; i++) {
        assert_int_equal(nodes[i].napplied, n);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(nodes[i].applied[k], k + 1);
    }
}

/* Compacts every up node's log at what it has applied. */
static void compact_all(void)
{
    for (int i = 1; i <= N; i++) {
        if (!nodes[i].up)
            continue;
        raft_host_group_stats st;
        strata_err err;
        assert_int_equal(raft_host_group_info(nodes[i].host, GROUP, &st, &err), 0);
        assert_int_equal(raft_host_compact(nodes[i].host, GROUP, st.applied_index, &err), 0);
        assert_int_equal(raft_host_group_info(nodes[i].host, GROUP, &st, &err), 0);
        assert_true(st.snapshot_index > 0);
        assert_true(st.first_index > 1);
    }
}

static bool snapshot_points_durable(void)
{
    for (int i = 1; i <= N; i++) {
        wal_group_info gi;
        if (nodes[i].up && (wal_group_state(nodes[i].w, GROUP, &gi, NULL) != 0 ||
                            gi.snapshot_index == 0 || gi.keep_from <= 1))
            return false;
    }
    return true;
}

static void test_compaction_restart_and_install(void **state)
{
    (void)state;
    acked = failed_acks = 0;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &pump);
    uv_timer_start(&pump, on_pump, 1, 1);
    for (int i = 1; i <= M; i++) {
        memset(&nodes[i], 0, sizeof nodes[i]);
        nodes[i].id = i;
        snprintf(nodes[i].dir, sizeof nodes[i].dir, "/tmp/strata_raft_walXXXXXX");
        assert_non_null(mkdtemp(nodes[i].dir));
        node_up(&nodes[i], false);
    }
    submit_values(1, 10);
    want_applied = 10;
    run_until(all_up_applied);
    int l = leader_id();
    int f = l % M + 1;

    /* A follower stops; the others go on, then compact well past it. */
    node_down(&nodes[f]);
    submit_values(11, 30);
    compact_all();
    run_until(snapshot_points_durable);

    /* The leader restarts from a WAL that begins at its snapshot point. */
    node_down(&nodes[l]);
    node_up(&nodes[l], true);
    submit_values(31, 35);
    want_applied = 35;
    run_until(all_up_applied);
    /* (The WAL may still hold entries below its keep_from: compact again, so the entries
     * the follower lacks are surely gone from the leader's log.) */
    compact_all();

    /* The follower comes back: the entries it lacks are gone, so it copies the state out
     * of band, then follows the log again. */
    node_up(&nodes[f], true);
    run_until(all_up_applied);
    assert_int_equal(nodes[f].installs, 1);
    submit_values(36, 40);
    want_applied = 40;
    run_until(all_up_applied);
    check_all_applied(40);
    raft_host_group_stats st;
    strata_err err;
    assert_int_equal(raft_host_group_info(nodes[f].host, GROUP, &st, &err), 0);
    assert_int_equal(st.installs, 1);
    assert_false(st.failed);
    assert_true(st.snapshot_index >= 30);

    /* And it restarts from the installed snapshot point. */
    node_down(&nodes[f]);
    node_up(&nodes[f], true);
    submit_values(41, 45);
    want_applied = 45;
    run_until(all_up_applied);
    check_all_applied(45);

    for (int i = 1; i <= M; i++) {
        node_down(&nodes[i]);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", nodes[i].dir);
        assert_int_equal(system(cmd), 0);
    }
    uv_timer_stop(&pump);
    uv_close((uv_handle_t *)&pump, NULL);
    on_pump(&pump);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static int change_code = -1;
static void on_change(void *data, const raft_host_outcome *o)
{
    (void)data;
    change_code = (int)o->code;
}
static bool change_done(void)
{
    return change_code >= 0;
}

/* Proposes `m` at the leader and waits for it to be committed. ERR_BUSY means retry
 * later (raft_host_change): the replica the last change promoted may not have heard of
 * it yet, which on a loaded machine it sometimes has not (a CI run failed so). */
static void change_to(const raft_host_member *m, size_t n)
{
    run_until(has_leader);
    strata_err err;
    change_code = -1;
    uint64_t deadline = uv_now(&loop) + 10000;
    while (raft_host_change(nodes[leader_id()].host, GROUP, m, n, on_change, NULL, &err) != 0) {
        if (err.code != ERR_BUSY)
            fail_msg("raft_host_change: %s", err.msg);
        assert_true(uv_now(&loop) < deadline);
        uv_run(&loop, UV_RUN_ONCE);
        run_until(has_leader);
    }
    run_until(change_done);
    assert_int_equal(change_code, ERR_NONE);
}

static int mover_l, mover_to;
static bool learner_caught_up(void)
{
    raft_host_group_stats st;
    uint64_t match = 0;
    return raft_host_group_info(nodes[mover_l].host, GROUP, &st, NULL) == 0 &&
           raft_host_member_match(nodes[mover_l].host, GROUP, (uint64_t)mover_to, &match, NULL) ==
               0 &&
           match >= st.commit_index && nodes[mover_to].napplied >= want_applied;
}

static void test_join_move(void **state)
{
    (void)state;
    acked = failed_acks = 0;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &pump);
    uv_timer_start(&pump, on_pump, 1, 1);
    for (int i = 1; i <= N; i++) {
        memset(&nodes[i], 0, sizeof nodes[i]);
        nodes[i].id = i;
        nodes[i].joined = i > M;
        snprintf(nodes[i].dir, sizeof nodes[i].dir, "/tmp/strata_raft_walXXXXXX");
        assert_non_null(mkdtemp(nodes[i].dir));
        if (i <= M)
            node_up(&nodes[i], false);
    }
    submit_values(1, 10);
    want_applied = 10;
    run_until(all_up_applied);
    compact_all();
    run_until(snapshot_points_durable);

    /* Node 4 joins with an empty WAL and is added as a learner: the log it needs is
     * compacted away, so it installs, then follows. */
    node_up(&nodes[4], false);
    raft_host_member add[] = {{1, true}, {2, true}, {3, true}, {4, false}};
    change_to(add, 4);
    mover_l = leader_id();
    mover_to = 4;
    run_until(learner_caught_up);
    assert_int_equal(nodes[4].installs, 1);

    /* Promoted; then a follower's replica is removed and its node stopped. */
    raft_host_member all[] = {{1, true}, {2, true}, {3, true}, {4, true}};
    change_to(all, 4);
    int l = leader_id(), o = l % M + 1;
    raft_host_member three[3];
    size_t k = 0;
    for (int i = 1; i <= N; i++)
        if (i != o)
            three[k++] = (raft_host_member){(uint64_t)i, true};
    change_to(three, 3);
    node_down(&nodes[o]);
    submit_values(11, 15);
    want_applied = 15;
    run_until(all_up_applied);

    /* The joined replica restarts from its WAL (join_group loads it) and follows on. */
    node_down(&nodes[4]);
    node_up(&nodes[4], true);
    submit_values(16, 20);
    want_applied = 20;
    run_until(all_up_applied);
    for (int i = 1; i <= N; i++) {
        if (!nodes[i].up)
            continue;
        assert_int_equal(nodes[i].napplied, 20);
        for (size_t j = 0; j < 20; j++)
            assert_int_equal(nodes[i].applied[j], j + 1);
    }
    raft_host_member out[4];
    size_t n = 0;
    bool unc = true;
    strata_err err;
    assert_int_equal(raft_host_configuration(nodes[4].host, GROUP, out, 4, &n, &unc, &err), 0);
    assert_int_equal(n, 3);
    assert_false(unc);

    for (int i = 1; i <= N; i++) {
        if (nodes[i].up)
            node_down(&nodes[i]);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", nodes[i].dir);
        assert_int_equal(system(cmd), 0);
    }
    uv_timer_stop(&pump);
    uv_close((uv_handle_t *)&pump, NULL);
    on_pump(&pump);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void on_closed_flag(void *data)
{
    *(int *)data = 1;
}

static void on_stored(void *data, int status)
{
    (void)status;
    ++*(int *)data;
}

/* A request the WAL refuses (here: more bytes waiting than max_pending_bytes, a disk
 * that cannot keep up) stops the group in the host for good; the storage reports it so
 * that the node stops (node/main.c). A refusal after detach (shutdown), or of a request
 * outside the group's log, does not count. */
static void test_refusal_is_reported(void **state)
{
    (void)state;
    char dir[64] = "/tmp/strata-raftwal-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(uv_loop_init(&loop), 0);
    strata_err err, why;
    wal *w;
    wal_options wo = {.dir = dir, .segment_size = 1 << 20, .max_pending_bytes = 256};
    assert_int_equal(wal_open(&wo, &loop, &w, &err), 0);
    raft_wal_storage ws;
    raft_host_storage st;
    raft_wal_storage_init(&ws, w, &st);
    int done = 0;
    assert_int_equal(st.set_term_vote(st.ctx, 1, 1, 1, on_stored, &done, &err), 0);
    assert_false(raft_wal_storage_refused(&ws, &why));

    static uint8_t big[1024];
    raft_host_entry e = {1, 1, big, sizeof big};
    assert_int_equal(st.append(st.ctx, 1, 1, &e, 1, on_stored, &done, &err), -1);
    assert_int_equal(err.code, ERR_BUSY);
    assert_true(raft_wal_storage_refused(&ws, &why));
    assert_int_equal(why.code, ERR_BUSY);
    assert_non_null(strstr(why.msg, "waiting to be written"));
    while (done < 1)
        uv_run(&loop, UV_RUN_ONCE);

    raft_wal_storage ws2;
    raft_wal_storage_init(&ws2, w, &st);
    /* An append outside the group's log is a bug of that group's: not counted. */
    raft_host_entry small = {1, 1, big, 8};
    assert_int_equal(st.append(st.ctx, 1, 5, &small, 1, on_stored, &done, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_false(raft_wal_storage_refused(&ws2, NULL));
    raft_wal_storage_detach(&ws2);
    assert_int_equal(st.append(st.ctx, 1, 1, &e, 1, on_stored, &done, &err), -1);
    assert_int_equal(err.code, ERR_UNAVAILABLE);
    assert_false(raft_wal_storage_refused(&ws2, NULL));

    int closed = 0;
    wal_close(w, on_closed_flag, &closed);
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(uv_loop_close(&loop), 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elect_submit_restart_catch_up),
        cmocka_unit_test(test_compaction_restart_and_install),
        cmocka_unit_test(test_join_move),
        cmocka_unit_test(test_refusal_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
