/*
 * Crash test for storage/wal: a forked child appends from several groups (pipelined,
 * with term/vote changes and snapshots that let segments be removed) and reports every
 * completed operation through a pipe; the parent SIGKILLs it after a random number of
 * completions, then reopens the log and checks that every reported operation is there
 * and every entry is intact. The same directory goes through several kill/recover rounds,
 * the child continuing from the recovered state each time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include "tests/unit/wal/wal_test_util.h"

#define GROUPS   8
#define INFLIGHT 3
#ifndef ROUNDS
#define ROUNDS 12 /* more with -DROUNDS=n for a longer run */
#endif

enum { MSG_APPEND = 1, MSG_TERM, MSG_SNAP };

typedef struct {
    uint64_t kind, group, a, b;
} msg;

/* ---------------------------------------------------------------------------------- */
/* Child                                                                              */

typedef struct child_group child_group;

typedef struct {
    child_group *g;
    uint64_t last, term;
} append_op;

struct child_group {
    uint64_t id;
    uint64_t next; /* next index to append */
    uint64_t term;
    uint64_t appended; /* entries appended in this run */
    append_op ops[INFLIGHT];
};

static wal *cw;
static int out_fd;

static void report(uint64_t kind, uint64_t g, uint64_t a, uint64_t b)
{
    msg m = {kind, g, a, b};
    if (write(out_fd, &m, sizeof m) != (ssize_t)sizeof m)
        _exit(3);
}

static void issue(child_group *g, append_op *op);

static void term_done(void *data, int status, const strata_err *err)
{
    child_group *g = data;
    (void)err;
    if (status != 0)
        _exit(4);
    report(MSG_TERM, g->id, g->term, 0);
}

static void snap_done(void *data, int status, const strata_err *err)
{
    uint64_t *p = data;
    (void)err;
    if (status != 0)
        _exit(5);
    report(MSG_SNAP, p[0], p[1], 0);
    free(p);
}

static void append_done(void *data, int status, const strata_err *err)
{
    append_op *op = data;
    (void)err;
    if (status != 0)
        _exit(6);
    report(MSG_APPEND, op->g->id, op->last, op->term);
    issue(op->g, op);
}

static void issue(child_group *g, append_op *op)
{
    strata_err err;
    uint8_t bufs[3][300];
    wal_entry e[3];
    size_t n = 1 + (size_t)(g->next % 3);
    for (size_t i = 0; i < n; i++) {
        e[i].term = g->term;
        e[i].type = 1;
        e[i].len = tu_payload(g->id, g->next + i, g->term, bufs[i]);
        e[i].data = bufs[i];
    }
    op->g = g;
    op->last = g->next + n - 1;
    op->term = g->term;
    if (wal_append(cw, g->id, g->next, e, n, append_done, op, &err) != 0)
        _exit(7);
    g->next += n;
    g->appended += n;
    if (g->appended % 40 < n) {
        g->term++;
        if (wal_set_term_vote(cw, g->id, g->term, g->id % 3, term_done, g, &err) != 0)
            _exit(8);
    }
    if (g->appended % 25 < n && g->next > 30) {
        uint64_t *p = malloc(2 * sizeof *p);
        wal_snapshot s = {.index = g->next - 10, .term = 1, .keep_from = g->next - 20};
        p[0] = g->id;
        p[1] = s.keep_from;
        if (wal_set_snapshot(cw, g->id, &s, snap_done, p, &err) != 0)
            _exit(9);
    }
}

static void run_child(const char *dir, int fd)
{
    out_fd = fd;
    uv_loop_t loop;
    uv_loop_init(&loop);
    wal_options o = {.dir = dir, .segment_size = 64 << 10};
    strata_err err;
    if (wal_open(&o, &loop, &cw, &err) != 0) {
        fprintf(stderr, "child: wal_open: %s\n", err.msg);
        _exit(2);
    }
    static child_group groups[GROUPS];
    for (int i = 0; i < GROUPS; i++) {
        child_group *g = &groups[i];
        g->id = (uint64_t)i + 1;
        wal_group_info info;
        if (wal_group_state(cw, g->id, &info, &err) == 0) {
            g->next = info.last_index + 1;
            g->term = info.term ? info.term : 1;
        } else {
            g->next = 1;
            g->term = 1;
        }
        for (int k = 0; k < INFLIGHT; k++)
            issue(g, &g->ops[k]);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    _exit(1); /* never: the parent kills us */
}

/* ---------------------------------------------------------------------------------- */
/* Parent                                                                             */

typedef struct {
    uint64_t last_acked;
    uint64_t term_acked;
    uint64_t keep_acked;
} expect;

static void verify(const char *dir, expect *ex)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    wal_options o = {.dir = dir, .segment_size = 64 << 10};
    wal *w;
    strata_err err;
    if (wal_open(&o, &loop, &w, &err) != 0)
        fail_msg("reopen after kill: %s", err.msg);
    for (uint64_t g = 1; g <= GROUPS; g++) {
        wal_group_info info;
        if (wal_group_state(w, g, &info, &err) != 0) {
            assert_int_equal(ex[g].last_acked, 0);
            continue;
        }
        if (info.last_index < ex[g].last_acked)
            fail_msg("group %llu: last %llu < acknowledged %llu", (unsigned long long)g,
                     (unsigned long long)info.last_index, (unsigned long long)ex[g].last_acked);
        assert_true(info.term >= ex[g].term_acked);
        assert_true(info.keep_from >= ex[g].keep_acked);
        if (info.first_index > info.last_index)
            continue;
        wal_entry *e;
        size_t n;
        if (wal_read_entries(w, g, info.first_index, info.last_index, 0, &e, &n, &err) != 0)
            fail_msg("group %llu: read: %s", (unsigned long long)g, err.msg);
        assert_int_equal(n, info.last_index - info.first_index + 1);
        uint8_t want[300];
        uint64_t prev_term = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = tu_payload(g, info.first_index + i, e[i].term, want);
            assert_int_equal(e[i].len, len);
            assert_memory_equal(e[i].data, want, len);
            assert_true(e[i].term >= prev_term);
            prev_term = e[i].term;
        }
        free(e);
        ex[g].last_acked = info.last_index; /* what is there now must stay */
    }
    assert_true(tu_close(w, &loop));
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void killed_child_loses_nothing_acknowledged(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    expect ex[GROUPS + 1] = {{0}};
    srand((unsigned)time(NULL));
    unsigned total = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            run_child(dir, p[1]);
        }
        close(p[1]);
        int kill_after = 1 + rand() % 1500;
        int got = 0;
        bool killed = false;
        msg m;
        for (;;) {
            ssize_t r = read(p[0], &m, sizeof m);
            if (r < 0 && errno == EINTR)
                continue;
            if (r == 0)
                break;
            assert_int_equal(r, sizeof m); /* writes of 32 bytes to a pipe are atomic */
            assert_true(m.group >= 1 && m.group <= GROUPS);
            expect *e = &ex[m.group];
            if (m.kind == MSG_APPEND && m.a > e->last_acked)
                e->last_acked = m.a;
            if (m.kind == MSG_TERM && m.a > e->term_acked)
                e->term_acked = m.a;
            if (m.kind == MSG_SNAP && m.a > e->keep_acked)
                e->keep_acked = m.a;
            if (++got == kill_after && !killed) {
                kill(pid, SIGKILL);
                killed = true;
            }
        }
        close(p[0]);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
            fail_msg("child exited unexpectedly (status %d)", status);
        total += (unsigned)got;
        verify(dir, ex);
    }
    /* The log kept removing covered segments despite the crashes. */
    assert_true(tu_count_segments(dir) < 40);
    print_message("crash rounds: %d, operations acknowledged: %u, segments left: %d\n", ROUNDS,
                  total, tu_count_segments(dir));
    tu_rmdir(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(killed_child_loses_nothing_acknowledged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
