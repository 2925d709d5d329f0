/*
 * Deterministic simulation of a whole Strata Raft cluster in one process.
 *
 * N nodes (3 or 5), each a raft_host (cluster/raft/raft_host.h) driving G groups, with
 * simulated time, network and disks, all chosen by one seed (xoshiro256**, no rand(), no
 * wall clock): `sim --seed N` replays one seed exactly.
 *
 *   network: per-message delay (1-8 ms) and loss, one-way link cuts, node isolation,
 *            heals. Each link delivers in order, like the one TCP connection per peer of
 *            the rpc/ transport; messages of different links interleave freely.
 *            --wild-net adds reordering within a link and duplication. C-Raft 0.22 does
 *            not tolerate those: a stale AppendEntries rejection arriving late can set the
 *            leader's next_index to match_index for that follower, after which the leader
 *            only sends it heartbeats and it never catches up (seen with seed 1035 of
 *            --seeds 1001-1400: a convergence failure, never a safety one). So the
 *            default model matches the real transport, and --wild-net shows the issue.
 *   disk:    operations complete in order after a random sync delay; only then are they
 *            durable. A crash drops every operation not yet synced (and its callback).
 *   nodes:   crash (host destroyed, disk keeps what was synced) and restart (host rebuilt
 *            from the simulated disk; the state machine restarts from its durable copy and
 *            the host replays the log above it).
 *   engine:  every 10-30 ms each replica's state machine makes its state durable (now and
 *            then) and compacts its log up to that point (raft_host_compact, 8 trailing
 *            entries), so logs stay short under load and a replica that was down or cut
 *            off falls behind the compacted log. It then catches up through fsm.install:
 *            an out-of-band copy of the source's engine snapshot (frozen at the first
 *            request, lost if the source restarts) in chunks of 16 indexes, each request
 *            and chunk a simulated message that may be lost; a request is retried after
 *            40 ms, and after 5 tries the copy is reported failed (the host retries it).
 *            The copied commands are checked against the global record, and the copy must
 *            not move a replica backwards.
 *   engine:  the state machine answers RAFT_HOST_APPLY_BUSY to 3% of applies and resumes the
 *            group on a later simulated event (1-20 ms), checking that nothing of the
 *            group is applied meanwhile and that it restarts at the refused index.
 *   clients: writes `key := unique write id` and strong reads, sent to the node they
 *            believe leads (hint), or a random node.
 *   moves:   (--moves) one spare node more, and replica moves one at a time until 4 s, as
 *            stratad does them: join_group on a node without a replica, add it as a learner,
 *            wait until the leader's member_match reaches its commit index (entries, or an
 *            install), promote it, remove a random current replica (the leader, sometimes),
 *            and 50-350 ms later stop and drop the removed replica (log, engine state). Each
 *            step is read off the leader's configuration, so moves survive crashes, cuts and
 *            leader changes; a restarted joined replica comes back with join_group.
 *   transfers: (--transfers) every 10-60 ms until the faults end, the leader of a random
 *            group hands its leadership to a random other node (raft_host_transfer), to a
 *            caught-up voter (raft_host_transfer_ready) most of the time, to anyone the
 *            rest (refused, or a lagging target the core waits for), during the faults,
 *            the writes and (with --moves) the configuration changes.
 *
 * Checks (any failure prints the seed and the last events):
 *   1. at most one leader per term per group (sampled after every event);
 *   2. every node applies indexes in order, and a node's applied command at an index never
 *      differs from any other node's (checked at every apply, against a global record);
 *   3. no acknowledged write lost: after faults stop and the cluster heals, every node's
 *      applied log holds each acknowledged write at the index it was acknowledged with;
 *   4. convergence: after the quiet period, every replica of every group has applied the
 *      same sequence (same length and digest);
 *   5. strong reads are linearizable per key: a read returns a write whose log index is >=
 *      that of every write acknowledged before the read began and >= that of every read of
 *      the key completed before it began, and that write is in the final log at that index;
 *   6. (--moves) a replica whose committed configuration leaves it out or makes it a learner
 *      is never candidate or leader; every move completes; at the end each group's
 *      configuration is committed, has the initial number of voters and no learner, and is
 *      exactly the set of nodes holding a replica (checks 3 and 4 run over those).
 *   7. (--transfers) every started transfer's callback fires exactly once, and a transfer
 *      reported done (ERR_NONE) left its old leader not leading.
 * `--inject stale-read|lying-disk|bad-copy` plants a bug (reads without a barrier, an
 * fsync that lies, an engine snapshot missing its last write) that the checks must catch.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/raft/raft_host.h"

#define MAX_NODES     6 /* 5 voters + 1 spare with --moves */
#define MAX_GROUPS    3
#define NKEYS         4
#define FAULT_END_MS  3000
#define CLIENT_END_MS 4000
#define SIM_END_MS    6000
#define TRACE_LEN     48
#define COPY_CHUNK    16 /* indexes per snapshot chunk */
#define COPY_RETRY_MS 40
#define COPY_ATTEMPTS 5
#define COMPACT_GAP   12   /* compact once the durable index is this far past the last point */
#define MOVE_END_MS   4000 /* --moves: no move starts after this (running ones finish) */

/* Deliberate bugs for `--inject`: each must make the checks fail on some seed. */
enum { INJECT_NONE, INJECT_STALE_READ, INJECT_LYING_DISK, INJECT_BAD_COPY };
static int g_inject;
static bool g_wild_net;
static bool g_moves;
static bool g_transfers;

/* ---- PRNG: splitmix64 seeding xoshiro256** ---- */

typedef struct {
    uint64_t s[4];
} prng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(prng *p)
{
    uint64_t *s = p->s;
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static uint64_t rnd(prng *p, uint64_t n) /* [0, n) */
{
    return n ? next_u64(p) % n : 0;
}

static bool chance(prng *p, unsigned per_mille)
{
    return rnd(p, 1000) < per_mille;
}

/* ---- events ---- */

enum {
    EV_DELIVER,
    EV_DISK,
    EV_TIMER,
    EV_CLIENT,
    EV_FAULT,
    EV_HEAL_ALL,
    EV_RESUME,
    EV_FLUSH,
    EV_COPY_REQ,
    EV_COPY_CHUNK,
    EV_COPY_TIMEOUT,
    EV_MOVE,
    EV_TRANSFER
};

typedef struct {
    uint64_t time;
    uint64_t seq;
    int type;
    int node;
    int from;
    uint64_t group;
    uint64_t gen;
    uint8_t *bytes;
    size_t len;
    uint64_t a, b; /* copy events: session and chunk (or request generation) */
} event;

typedef struct {
    uint64_t time;
    int type;
    int node;
    int from;
    uint64_t a;
} trace_rec;

/* ---- simulated disk ---- */

typedef struct {
    uint64_t term;
    uint8_t type;
    uint8_t *data;
    size_t len;
} dentry;

typedef struct {
    bool has;
    uint64_t term;
    uint64_t vote;
    uint64_t start; /* index of log[0] */
    dentry *log;    /* indexes start .. start + n - 1 */
    size_t n;
    size_t cap;
    uint64_t snap_index; /* snapshot point, 0 if none */
    uint64_t snap_term;
    uint8_t *meta;
    size_t meta_len;
} dgroup;

enum { OP_TERM_VOTE, OP_APPEND, OP_SNAPSHOT };

typedef struct dop {
    struct dop *next;
    int kind;
    uint64_t group;
    uint64_t term, vote;
    uint64_t first;
    dentry *ents;
    size_t n;
    bool dropped;            /* its group's replica was dropped: completes, writes nothing */
    raft_host_snapshot snap; /* OP_SNAPSHOT; meta is a copy owned here */
    raft_storage_cb cb;
    void *cb_data;
} dop;

/* ---- nodes, clients ---- */

typedef struct {
    uint64_t *wid; /* applied write id by index (0: not a command) */
    size_t cap;
    uint64_t applied; /* last applied index */
    uint64_t kv_wid[NKEYS];
    uint64_t kv_idx[NKEYS];
    uint64_t busy_index;  /* the index refused with RAFT_HOST_APPLY_BUSY, until resumed */
    uint64_t retry_index; /* after the resume: the next apply must be this index */
} fsm_group;

struct sim;

typedef struct {
    struct sim *sim;
    int id; /* 1-based */
    bool up;
    uint64_t incarnation;
    raft_host *host;
    uint64_t timer_gen;
    dgroup disk[MAX_GROUPS];
    dop *pending_head, *pending_tail;
    uint64_t disk_busy_until;
    fsm_group fsm[MAX_GROUPS];   /* the engine's live state */
    fsm_group dur[MAX_GROUPS];   /* what the engine has made durable: a crash returns to it */
    bool installing[MAX_GROUPS]; /* an out-of-band copy is under way */
    bool hosted[MAX_GROUPS];     /* the node has a replica of the group (--moves changes it) */
    bool joined[MAX_GROUPS];     /* that replica was added by a move: restart with join_group */
} node;

/* --moves: one replica move at a time. Each step is read off the leader's configuration,
 * so it survives leader changes, crashes and lost callbacks: add `to` as a learner, wait
 * until it caught up (raft_host_member_match), promote it, remove `from`, then (a little
 * later, so the removed replica lingers) stop and drop the replica on `from`. */
enum { MV_IDLE, MV_ADD, MV_CATCH_UP, MV_PROMOTE, MV_REMOVE, MV_DROP };

typedef struct {
    int phase;
    int group, from, to;
    uint64_t drop_at;
    bool inflight; /* a raft_host_change callback is outstanding */
    uint64_t inflight_since;
} mover;

/* An out-of-band snapshot copy (fsm.install): the destination pulls the source's engine
 * snapshot, frozen at the first request, in chunks of COPY_CHUNK indexes; each request
 * and chunk is a simulated message that may be lost, and a request unanswered within
 * COPY_RETRY_MS is sent again (COPY_ATTEMPTS times, then the copy is reported failed). */
typedef struct {
    bool active;
    int dest, src, group;
    uint64_t dest_inc;
    uint64_t index, token;
    uint64_t next_chunk, nchunks;
    unsigned attempts;
    uint64_t req_gen;
    bool frozen; /* the source's snapshot, lost if the source restarts */
    uint64_t src_inc;
    fsm_group snap;
    fsm_group recv; /* assembled at the destination */
} copy_session;

typedef struct {
    struct sim *sim;
    bool is_read;
    int group;
    int key;
    uint64_t wid;
    int node;
    uint64_t start;
    uint64_t min_idx; /* reads: the lowest acceptable index */
    bool done;
    bool ok;
    uint64_t idx;      /* write: acknowledged index; read: index of the write returned */
    uint64_t read_wid; /* read: write id returned */
} cop;

typedef struct sim {
    uint64_t seed;
    prng rng;
    int nnodes;
    int ngroups;
    uint64_t now;
    uint64_t seq;
    event *heap;
    size_t nheap, capheap;
    node nodes[MAX_NODES + 1];
    bool link_down[MAX_NODES + 1][MAX_NODES + 1];
    uint64_t link_last[MAX_NODES + 1][MAX_NODES + 1]; /* last delivery time per link */
    bool wild_net;
    uint64_t leader_hint[MAX_GROUPS];
    /* checks */
    uint64_t *term_leader[MAX_GROUPS]; /* by term: node that led it */
    size_t term_cap[MAX_GROUPS];
    uint64_t *global_wid[MAX_GROUPS]; /* first applied write id seen at each index */
    uint8_t *global_set[MAX_GROUPS];
    size_t global_cap[MAX_GROUPS];
    uint64_t acked_max_idx[MAX_GROUPS][NKEYS];
    uint64_t read_max_idx[MAX_GROUPS][NKEYS];
    cop **ops;
    size_t nops, capops;
    copy_session *sess;
    size_t nsess, capsess;
    uint64_t next_wid;
    bool failed;
    char why[512];
    trace_rec trace[TRACE_LEN];
    size_t ntrace;
    bool verbose;
    int inject; /* deliberate bug, to show the checks can fail (INJECT_*) */
    bool moves;
    int nvoters; /* voters per group (the initial members are nodes 1..nvoters) */
    mover mv;
    bool transfers;
    uint64_t transfers_pending; /* started, callback not fired yet */
    /* stats */
    uint64_t events, msgs, acked, reads_ok, crashes, busy, snap_points, compactions, installs,
        install_failures, chunks, moves_done, changes, self_removals, transfers_started,
        transfers_done, transfers_failed, transfers_refused;
} sim;

static void fail(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(sim *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    s->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (p == NULL) {
        fprintf(stderr, "sim: out of memory\n");
        exit(2);
    }
    return p;
}

static void grow_u64(uint64_t **a, size_t *cap, size_t need)
{
    if (need < *cap)
        return;
    size_t n = *cap ? *cap : 64;
    while (n <= need)
        n *= 2;
    uint64_t *b = xcalloc(n, sizeof *b);
    if (*a != NULL && *cap)
        memcpy(b, *a, *cap * sizeof *b);
    free(*a);
    *a = b;
    *cap = n;
}

/* ---- event heap ---- */

static bool ev_less(const event *a, const event *b)
{
    return a->time != b->time ? a->time < b->time : a->seq < b->seq;
}

static void push(sim *s, event e)
{
    if (s->nheap == s->capheap) {
        s->capheap = s->capheap ? s->capheap * 2 : 1024;
        event *n = xcalloc(s->capheap, sizeof *n);
        if (s->nheap)
            memcpy(n, s->heap, s->nheap * sizeof *n);
        free(s->heap);
        s->heap = n;
    }
    e.seq = s->seq++;
    size_t i = s->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static event pop(sim *s)
{
    event top = s->heap[0];
    event last = s->heap[--s->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const event *best = &last;
        if (l < s->nheap && ev_less(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (r < s->nheap && ev_less(&s->heap[r], best))
            m = r;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->nheap > 0)
        s->heap[i] = last;
    return top;
}

/* ---- disk ---- */

static void dentries_free(dentry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].data);
    free(e);
}

static void disk_apply_snapshot(dgroup *d, dop *op)
{
    const raft_host_snapshot *sp = &op->snap;
    d->snap_index = sp->index;
    d->snap_term = sp->term;
    free(d->meta);
    d->meta = (uint8_t *)sp->meta;
    d->meta_len = sp->meta_len;
    op->snap.meta = NULL;
    uint64_t keep = sp->replace_log ? d->start + d->n : sp->keep_from;
    size_t drop = keep > d->start ? (size_t)(keep - d->start) : 0;
    if (drop > d->n)
        drop = d->n;
    for (size_t i = 0; i < drop; i++)
        free(d->log[i].data);
    if (d->n > drop) /* (a joined replica's first write may be an installed point: no log) */
        memmove(d->log, d->log + drop, (d->n - drop) * sizeof *d->log);
    d->n -= drop;
    d->start += drop;
    if (sp->replace_log || (d->n == 0 && d->start <= sp->index))
        d->start = sp->index + 1; /* installed, or a point beyond the log: it restarts there */
}

static void disk_apply(dgroup *d, dop *op)
{
    if (!d->has)
        d->start = 1;
    d->has = true;
    if (op->kind == OP_TERM_VOTE) {
        d->term = op->term;
        d->vote = op->vote;
        return;
    }
    if (op->kind == OP_SNAPSHOT) {
        disk_apply_snapshot(d, op);
        return;
    }
    /* Replace from op->first (keep start .. first-1). */
    if (d->n == 0)
        d->start = op->first;
    size_t keep = op->first > d->start ? (size_t)(op->first - d->start) : 0;
    if (keep > d->n)
        keep = d->n; /* a gap cannot happen: the host appends contiguously */
    for (size_t i = keep; i < d->n; i++)
        free(d->log[i].data);
    d->n = keep;
    if (d->n + op->n > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < d->n + op->n)
            cap *= 2;
        dentry *nl = xcalloc(cap, sizeof *nl);
        if (d->n)
            memcpy(nl, d->log, d->n * sizeof *nl);
        free(d->log);
        d->log = nl;
        d->cap = cap;
    }
    for (size_t i = 0; i < op->n; i++) {
        d->log[d->n++] = op->ents[i];
        op->ents[i].data = NULL;
    }
}

static void disk_enqueue(node *nd, dop *op)
{
    sim *s = nd->sim;
    if (nd->pending_tail != NULL)
        nd->pending_tail->next = op;
    else
        nd->pending_head = op;
    nd->pending_tail = op;
    /* In-order completion: each sync ends after the previous one. */
    uint64_t t = s->now + 1 + rnd(&s->rng, 4);
    if (t < nd->disk_busy_until)
        t = nd->disk_busy_until;
    nd->disk_busy_until = t;
    push(s, (event){.time = t, .type = EV_DISK, .node = nd->id, .gen = nd->incarnation});
}

static int st_load(void *ctx, uint64_t group, raft_host_loaded *out, strata_err *err)
{
    node *nd = ctx;
    dgroup *d = &nd->disk[group];
    if (!d->has)
        return strata_err_set(err, ERR_NOT_FOUND, "nothing stored");
    out->term = d->term;
    out->vote = d->vote;
    out->start_index = d->start;
    out->n = d->n;
    out->snapshot_index = d->snap_index;
    out->snapshot_term = d->snap_term;
    out->snapshot_meta = d->meta;
    out->snapshot_meta_len = d->meta_len;
    out->entries = xcalloc(d->n, sizeof *out->entries);
    for (size_t i = 0; i < d->n; i++)
        out->entries[i] =
            (raft_host_entry){d->log[i].term, d->log[i].type, d->log[i].data, d->log[i].len};
    return 0;
}

static int st_term_vote(void *ctx, uint64_t group, uint64_t term, uint64_t vote, raft_storage_cb cb,
                        void *cb_data, strata_err *err)
{
    (void)err;
    node *nd = ctx;
    dop *op = xcalloc(1, sizeof *op);
    op->kind = OP_TERM_VOTE;
    op->group = group;
    op->term = term;
    op->vote = vote;
    op->cb = cb;
    op->cb_data = cb_data;
    disk_enqueue(nd, op);
    return 0;
}

static int st_append(void *ctx, uint64_t group, uint64_t first, const raft_host_entry *e, size_t n,
                     raft_storage_cb cb, void *cb_data, strata_err *err)
{
    (void)err;
    node *nd = ctx;
    dop *op = xcalloc(1, sizeof *op);
    op->kind = OP_APPEND;
    op->group = group;
    op->first = first;
    op->n = n;
    op->ents = xcalloc(n, sizeof *op->ents);
    for (size_t i = 0; i < n; i++) {
        op->ents[i].term = e[i].term;
        op->ents[i].type = e[i].type;
        op->ents[i].len = e[i].len;
        op->ents[i].data = xcalloc(e[i].len ? e[i].len : 1, 1);
        if (e[i].len)
            memcpy(op->ents[i].data, e[i].data, e[i].len);
    }
    op->cb = cb;
    op->cb_data = cb_data;
    disk_enqueue(nd, op);
    return 0;
}

static int st_set_snapshot(void *ctx, uint64_t group, const raft_host_snapshot *sp,
                           raft_storage_cb cb, void *cb_data, strata_err *err)
{
    (void)err;
    node *nd = ctx;
    dop *op = xcalloc(1, sizeof *op);
    op->kind = OP_SNAPSHOT;
    op->group = group;
    op->snap = *sp;
    uint8_t *m = xcalloc(sp->meta_len ? sp->meta_len : 1, 1);
    if (sp->meta_len)
        memcpy(m, sp->meta, sp->meta_len);
    op->snap.meta = m;
    op->cb = cb;
    op->cb_data = cb_data;
    nd->sim->snap_points++;
    disk_enqueue(nd, op);
    return 0;
}

static void dop_free(dop *op)
{
    dentries_free(op->ents, op->n);
    free((void *)op->snap.meta);
    free(op);
}

static void disk_complete(node *nd)
{
    dop *op = nd->pending_head;
    if (op == NULL)
        return;
    nd->pending_head = op->next;
    if (nd->pending_head == NULL)
        nd->pending_tail = NULL;
    if (!op->dropped)
        disk_apply(&nd->disk[op->group], op);
    raft_storage_cb cb = op->cb;
    void *data = op->cb_data;
    dop_free(op);
    if (cb != NULL)
        cb(data, 0);
}

static void disk_drop_pending(node *nd)
{
    while (nd->pending_head != NULL) {
        dop *op = nd->pending_head;
        nd->pending_head = op->next;
        dop_free(op);
    }
    nd->pending_tail = NULL;
    nd->disk_busy_until = 0;
}

/* ---- transport and clock ---- */

static int tr_send(void *ctx, uint64_t to, uint64_t group, const void *msg, size_t len)
{
    node *nd = ctx;
    sim *s = nd->sim;
    if (to < 1 || to > (uint64_t)s->nnodes)
        return -1;
    s->msgs++;
    int copies = 1;
    if (s->now < FAULT_END_MS) {
        if (s->link_down[nd->id][to] || chance(&s->rng, 20))
            return 0;
        if (s->wild_net && chance(&s->rng, 10))
            copies = 2;
    }
    for (int c = 0; c < copies; c++) {
        uint8_t *b = xcalloc(len, 1);
        memcpy(b, msg, len);
        uint64_t t = s->now + 1 + rnd(&s->rng, 8);
        /* One connection per peer (the rpc/ transport is TCP): a link delivers in order.
         * --wild-net lifts this (independent delays and duplicates). */
        if (!s->wild_net) {
            if (t < s->link_last[nd->id][to])
                t = s->link_last[nd->id][to];
            s->link_last[nd->id][to] = t;
        }
        push(s, (event){.time = t,
                        .type = EV_DELIVER,
                        .node = (int)to,
                        .from = nd->id,
                        .group = group,
                        .bytes = b,
                        .len = len});
    }
    return 0;
}

static uint64_t ck_now(void *ctx)
{
    node *nd = ctx;
    return nd->sim->now;
}

static void ck_arm(void *ctx, uint64_t deadline)
{
    node *nd = ctx;
    nd->timer_gen++;
    uint64_t t = deadline > nd->sim->now ? deadline : nd->sim->now;
    push(nd->sim, (event){.time = t, .type = EV_TIMER, .node = nd->id, .gen = nd->timer_gen});
}

/* ---- state machine: key := write id ---- */

static int fsm_apply(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                     void **result, size_t *result_len)
{
    node *nd = ctx;
    sim *s = nd->sim;
    fsm_group *f = &nd->fsm[group];
    if (len != 9) {
        fail(s, "node %d group %" PRIu64 ": bad command length %zu", nd->id, group, len);
        return 0;
    }
    const uint8_t *c = cmd;
    int key = c[0];
    uint64_t wid;
    memcpy(&wid, c + 1, 8);
    if (index <= f->applied)
        fail(s, "node %d group %" PRIu64 ": applied %" PRIu64 " after %" PRIu64, nd->id, group,
             index, f->applied);
    if (nd->installing[group])
        fail(s, "node %d group %" PRIu64 ": apply of %" PRIu64 " during a snapshot install", nd->id,
             group, index);
    /* Back-pressure: the engine is sometimes full. The host must then apply nothing of
     * the group until the resume (a later simulated event), and restart at this index. */
    if (f->busy_index != 0)
        fail(s, "node %d group %" PRIu64 ": apply of %" PRIu64 " while blocked at %" PRIu64, nd->id,
             group, index, f->busy_index);
    if (f->retry_index != 0 && index != f->retry_index)
        fail(s, "node %d group %" PRIu64 ": resumed at %" PRIu64 ", refused %" PRIu64, nd->id,
             group, index, f->retry_index);
    f->retry_index = 0;
    if (chance(&s->rng, 30)) {
        f->busy_index = index;
        s->busy++;
        push(s, (event){.time = s->now + 1 + rnd(&s->rng, 20),
                        .type = EV_RESUME,
                        .node = nd->id,
                        .group = group,
                        .gen = nd->incarnation});
        return RAFT_HOST_APPLY_BUSY;
    }
    f->applied = index;
    grow_u64(&f->wid, &f->cap, index);
    f->wid[index] = wid;
    /* Every replica must apply the same command at the same index. */
    grow_u64(&s->global_wid[group], &s->global_cap[group], index);
    if (s->global_wid[group][index] == 0)
        s->global_wid[group][index] = wid;
    else if (s->global_wid[group][index] != wid)
        fail(s,
             "group %" PRIu64 " index %" PRIu64 ": node %d applied write %" PRIu64
             ", another replica applied %" PRIu64,
             group, index, nd->id, wid, s->global_wid[group][index]);
    uint64_t *prev = malloc(8);
    if (prev != NULL) {
        *prev = f->kv_wid[key % NKEYS];
        *result = prev;
        *result_len = 8;
    }
    f->kv_wid[key % NKEYS] = wid;
    f->kv_idx[key % NKEYS] = index;
    return 0;
}

/* ---- engine durability and out-of-band snapshot copies ---- */

static void fsm_free(fsm_group *f)
{
    free(f->wid);
    memset(f, 0, sizeof *f);
}

/* dst := src (deep), without the back-pressure bookkeeping. */
static void fsm_copy(fsm_group *dst, const fsm_group *src)
{
    fsm_free(dst);
    *dst = *src;
    dst->wid = NULL;
    dst->cap = 0;
    dst->busy_index = dst->retry_index = 0;
    if (src->wid != NULL) {
        dst->wid = xcalloc(src->cap, sizeof *dst->wid);
        memcpy(dst->wid, src->wid, src->cap * sizeof *dst->wid);
        dst->cap = src->cap;
    }
}

/* A simulated message on the copy path: same links, losses and ordering as Raft's. */
static bool net_time(sim *s, int from, int to, uint64_t *t)
{
    if (s->now < FAULT_END_MS && (s->link_down[from][to] || chance(&s->rng, 20)))
        return false;
    *t = s->now + 1 + rnd(&s->rng, 8);
    if (*t < s->link_last[from][to])
        *t = s->link_last[from][to];
    s->link_last[from][to] = *t;
    return true;
}

static void copy_request(sim *s, copy_session *c)
{
    uint64_t id = (uint64_t)(c - s->sess), t;
    c->req_gen++;
    if (net_time(s, c->dest, c->src, &t))
        push(s, (event){.time = t,
                        .type = EV_COPY_REQ,
                        .node = c->src,
                        .from = c->dest,
                        .a = id,
                        .b = c->next_chunk});
    push(s, (event){.time = s->now + COPY_RETRY_MS,
                    .type = EV_COPY_TIMEOUT,
                    .node = c->dest,
                    .a = id,
                    .b = c->req_gen});
}

static int fsm_install(void *ctx, uint64_t group, uint64_t index, uint64_t term, uint64_t from,
                       uint64_t token)
{
    (void)term;
    node *nd = ctx;
    sim *s = nd->sim;
    /* The engine's back-pressure state is moot: the snapshot supersedes the refused entry. */
    nd->fsm[group].busy_index = nd->fsm[group].retry_index = 0;
    nd->installing[group] = true;
    if (from < 1 || from > (uint64_t)s->nnodes || from == (uint64_t)nd->id || chance(&s->rng, 50))
        return -1; /* cannot start (sometimes on purpose): the host retries */
    if (s->nsess == s->capsess) {
        s->capsess = s->capsess ? s->capsess * 2 : 16;
        copy_session *n = xcalloc(s->capsess, sizeof *n);
        if (s->nsess)
            memcpy(n, s->sess, s->nsess * sizeof *n);
        free(s->sess);
        s->sess = n;
    }
    copy_session *c = &s->sess[s->nsess++];
    memset(c, 0, sizeof *c);
    *c = (copy_session){.active = true,
                        .dest = nd->id,
                        .src = (int)from,
                        .group = (int)group,
                        .dest_inc = nd->incarnation,
                        .index = index,
                        .token = token};
    copy_request(s, c);
    return 0;
}

/* At the source: answer from its frozen engine snapshot (frozen by the first request). */
static void copy_serve(sim *s, node *src, copy_session *c, uint64_t chunk)
{
    if (!c->active || !src->up)
        return;
    if (!c->frozen || c->src_inc != src->incarnation) {
        const fsm_group *live = &src->fsm[c->group];
        if (chunk != 0 || src->installing[c->group] || live->applied < c->index)
            return; /* snapshot lost with a restart, or not far enough yet: no answer */
        fsm_copy(&c->snap, live);
        if (s->inject == INJECT_BAD_COPY && c->snap.applied > 0)
            c->snap.wid[c->snap.applied] = 0; /* the engine snapshot misses its last write */
        c->frozen = true;
        c->src_inc = src->incarnation;
        c->nchunks = (c->snap.applied + 1 + COPY_CHUNK - 1) / COPY_CHUNK;
    }
    uint64_t t;
    s->chunks++;
    if (net_time(s, src->id, c->dest, &t))
        push(s, (event){.time = t,
                        .type = EV_COPY_CHUNK,
                        .node = c->dest,
                        .from = src->id,
                        .a = (uint64_t)(c - s->sess),
                        .b = chunk});
}

/* Every copied command must be the one the cluster agreed on at its index. */
static void check_copied(sim *s, const copy_session *c)
{
    const fsm_group *f = &c->recv;
    for (uint64_t i = 1; i <= f->applied && !s->failed; i++) {
        if (f->wid[i] == 0)
            continue;
        grow_u64(&s->global_wid[c->group], &s->global_cap[c->group], i);
        uint64_t *gw = &s->global_wid[c->group][i];
        if (*gw == 0)
            *gw = f->wid[i];
        else if (*gw != f->wid[i])
            fail(s, "group %d index %" PRIu64 ": copied write %" PRIu64 ", applied %" PRIu64,
                 c->group, i, f->wid[i], *gw);
    }
}

static void copy_finish(sim *s, node *nd, copy_session *c)
{
    fsm_group *live = &nd->fsm[c->group];
    c->active = false;
    check_copied(s, c);
    if (c->recv.applied < live->applied)
        fail(s, "node %d group %d: install to %" PRIu64 " but %" PRIu64 " was applied", nd->id,
             c->group, c->recv.applied, live->applied);
    /* The installed state is durable before the host hears of it (raft_host.h). */
    fsm_copy(live, &c->recv);
    fsm_copy(&nd->dur[c->group], &c->recv);
    nd->installing[c->group] = false;
    s->installs++;
    strata_err err;
    if (raft_host_snapshot_installed(nd->host, c->token, 0, c->recv.applied, &err) != 0)
        fail(s, "node %d group %d: install completion refused: %s", nd->id, c->group, err.msg);
}

/* At the destination: a chunk arrived (the bytes are the frozen snapshot's range). */
static void copy_receive(sim *s, node *nd, copy_session *c, uint64_t chunk)
{
    if (!c->active || !nd->up || nd->incarnation != c->dest_inc || chunk != c->next_chunk)
        return;
    fsm_group *r = &c->recv;
    uint64_t lo = chunk * COPY_CHUNK, hi = lo + COPY_CHUNK - 1;
    if (hi > c->snap.applied)
        hi = c->snap.applied;
    grow_u64(&r->wid, &r->cap, hi);
    for (uint64_t i = lo; i <= hi; i++)
        r->wid[i] = c->snap.wid != NULL && i < c->snap.cap ? c->snap.wid[i] : 0;
    c->next_chunk++;
    c->attempts = 0;
    if (c->next_chunk < c->nchunks) {
        copy_request(s, c);
        return;
    }
    r->applied = c->snap.applied; /* the last chunk carries the key/value heads too */
    memcpy(r->kv_wid, c->snap.kv_wid, sizeof r->kv_wid);
    memcpy(r->kv_idx, c->snap.kv_idx, sizeof r->kv_idx);
    copy_finish(s, nd, c);
}

static void copy_timeout(sim *s, node *nd, copy_session *c, uint64_t gen)
{
    if (!c->active || !nd->up || nd->incarnation != c->dest_inc || gen != c->req_gen)
        return;
    if (++c->attempts < COPY_ATTEMPTS) {
        copy_request(s, c);
        return;
    }
    c->active = false;
    s->install_failures++;
    strata_err err;
    if (raft_host_snapshot_installed(nd->host, c->token, -1, 0, &err) != 0)
        fail(s, "node %d group %d: install failure refused: %s", nd->id, c->group, err.msg);
}

/* The engine makes its state durable now and then; the log below it may then go. */
static void flush(sim *s)
{
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        for (int g = 0; nd->up && g < s->ngroups; g++) {
            if (!chance(&s->rng, 500))
                continue;
            fsm_copy(&nd->dur[g], &nd->fsm[g]);
            raft_host_group_stats st;
            strata_err err;
            if (raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0 ||
                nd->dur[g].applied < st.snapshot_index + COMPACT_GAP)
                continue;
            s->compactions++;
            if (raft_host_compact(nd->host, (uint64_t)g, nd->dur[g].applied, &err) != 0 &&
                err.code != ERR_UNAVAILABLE)
                fail(s, "node %d group %d: compact at %" PRIu64 ": %s", i, g, nd->dur[g].applied,
                     err.msg);
        }
    }
}

/* ---- nodes ---- */

static void node_start(sim *s, node *nd)
{
    strata_err err;
    raft_host_config cfg = {
        .node_id = (uint64_t)nd->id,
        .storage = {.ctx = nd,
                    .load = st_load,
                    .set_term_vote = st_term_vote,
                    .append = st_append,
                    .set_snapshot = st_set_snapshot},
        .transport = {.ctx = nd, .send = tr_send},
        .clock = {.ctx = nd, .now = ck_now, .arm = ck_arm},
        .fsm = {.ctx = nd, .apply = fsm_apply, .install = fsm_install},
        .election_timeout_ms = 150,
        .heartbeat_timeout_ms = 30,
        .seed = s->seed * 31 + nd->incarnation,
        .snapshot_trailing = 8,
        .install_snapshot_timeout_ms = 300,
    };
    nd->host = raft_host_create(&cfg, &err);
    if (nd->host == NULL) {
        fail(s, "node %d: create: %s", nd->id, err.msg);
        return;
    }
    nd->up = true;
    uint64_t members[MAX_NODES];
    for (int i = 0; i < s->nvoters; i++)
        members[i] = (uint64_t)i + 1;
    for (int g = 0; g < s->ngroups; g++) {
        int rc = 0;
        if (!nd->hosted[g])
            continue;
        if (nd->joined[g])
            rc = raft_host_join_group(nd->host, (uint64_t)g, nd->fsm[g].applied, &err);
        else
            rc = raft_host_start_group(nd->host, (uint64_t)g, members, (size_t)s->nvoters,
                                       nd->fsm[g].applied, &err);
        if (rc != 0)
            fail(s, "node %d group %d: start: %s", nd->id, g, err.msg);
    }
}

/* A crash loses what the engine had not made durable. */
static void fsm_reset(node *nd)
{
    for (int g = 0; g < MAX_GROUPS; g++) {
        fsm_copy(&nd->fsm[g], &nd->dur[g]);
        nd->installing[g] = false;
    }
}

static void node_crash(sim *s, node *nd)
{
    if (s->inject == INJECT_LYING_DISK && !s->failed && s->now < FAULT_END_MS)
        for (int g = 0; g < MAX_GROUPS; g++) {
            dgroup *d = &nd->disk[g];
            size_t drop = d->n > 4 ? 3 : 0; /* "synced" but lost: fsync lied */
            for (size_t i = d->n - drop; i < d->n; i++)
                free(d->log[i].data);
            d->n -= drop;
        }
    nd->up = false;
    nd->incarnation++;
    nd->timer_gen++;
    disk_drop_pending(nd);
    raft_host *h = nd->host;
    nd->host = NULL;
    raft_host_destroy(h); /* pending client ops fail here */
    fsm_reset(nd);
}

/* ---- clients ---- */

static void op_done(void *data, const raft_host_outcome *o)
{
    cop *p = data;
    sim *s = p->sim;
    p->done = true;
    if (o->leader_hint != 0)
        s->leader_hint[p->group] = o->leader_hint;
    if (o->code != ERR_NONE)
        return;
    p->ok = true;
    node *nd = &s->nodes[p->node];
    fsm_group *f = &nd->fsm[p->group];
    if (!p->is_read) {
        p->idx = o->index;
        s->acked++;
        if (o->index > f->applied || f->wid[o->index] != p->wid)
            fail(s, "write %" PRIu64 " acknowledged at index %" PRIu64 " but not applied there",
                 p->wid, o->index);
        if (o->index > s->acked_max_idx[p->group][p->key])
            s->acked_max_idx[p->group][p->key] = o->index;
        return;
    }
    s->reads_ok++;
    p->read_wid = f->kv_wid[p->key];
    p->idx = f->kv_idx[p->key];
    if (p->idx < p->min_idx)
        fail(s,
             "stale read on node %d group %d key %d: index %" PRIu64 " (write %" PRIu64
             "), but index %" PRIu64 " was acknowledged/read before the read began",
             p->node, p->group, p->key, p->idx, p->read_wid, p->min_idx);
    if (p->idx > s->read_max_idx[p->group][p->key])
        s->read_max_idx[p->group][p->key] = p->idx;
}

static void client_op(sim *s)
{
    cop *p = xcalloc(1, sizeof *p);
    if (s->nops == s->capops) {
        s->capops = s->capops ? s->capops * 2 : 256;
        cop **n = xcalloc(s->capops, sizeof *n);
        if (s->nops)
            memcpy(n, s->ops, s->nops * sizeof *n);
        free(s->ops);
        s->ops = n;
    }
    s->ops[s->nops++] = p;
    p->sim = s;
    p->group = (int)rnd(&s->rng, (uint64_t)s->ngroups);
    p->key = (int)rnd(&s->rng, NKEYS);
    p->is_read = chance(&s->rng, 400);
    p->start = s->now;
    uint64_t hint = s->leader_hint[p->group];
    p->node =
        hint != 0 && chance(&s->rng, 800) ? (int)hint : 1 + (int)rnd(&s->rng, (uint64_t)s->nnodes);
    node *nd = &s->nodes[p->node];
    if (!nd->up) {
        p->done = true;
        return;
    }
    strata_err err;
    int rc;
    if (p->is_read) {
        uint64_t a = s->acked_max_idx[p->group][p->key], b = s->read_max_idx[p->group][p->key];
        p->min_idx = a > b ? a : b;
        if (s->inject == INJECT_STALE_READ) {
            raft_host_outcome o = {.code = ERR_NONE};
            op_done(p, &o); /* no barrier: the local state may be stale */
            return;
        }
        rc = raft_host_read_barrier(nd->host, (uint64_t)p->group, op_done, p, &err);
    } else {
        uint8_t cmd[9];
        p->wid = ++s->next_wid;
        cmd[0] = (uint8_t)p->key;
        memcpy(cmd + 1, &p->wid, 8);
        rc = raft_host_submit(nd->host, (uint64_t)p->group, cmd, sizeof cmd, op_done, p, &err);
    }
    if (rc != 0) {
        p->done = true;
        uint64_t l = raft_host_leader(nd->host, (uint64_t)p->group);
        s->leader_hint[p->group] = l;
    }
}

/* ---- faults ---- */

static int count_down(sim *s)
{
    int n = 0;
    for (int i = 1; i <= s->nnodes; i++)
        n += !s->nodes[i].up;
    return n;
}

static void fault(sim *s)
{
    uint64_t what = rnd(&s->rng, 10);
    int n = 1 + (int)rnd(&s->rng, (uint64_t)s->nnodes);
    node *nd = &s->nodes[n];
    if (what < 3) {
        if (nd->up && count_down(s) < (s->nvoters - 1) / 2 + 1) {
            s->crashes++;
            node_crash(s, nd);
        } else if (!nd->up) {
            node_start(s, nd);
        }
    } else if (what < 5) {
        if (!nd->up)
            node_start(s, nd);
    } else if (what < 7) {
        for (int i = 1; i <= s->nnodes; i++) /* isolate n */
            s->link_down[n][i] = s->link_down[i][n] = i != n;
    } else if (what < 8) {
        int m = 1 + (int)rnd(&s->rng, (uint64_t)s->nnodes);
        s->link_down[n][m] = true; /* one-way cut */
    } else {
        memset(s->link_down, 0, sizeof s->link_down);
    }
}

/* ---- replica moves (--moves) ---- */

/* The up node leading `g` in the highest term, 0 if none. */
static int group_leader(sim *s, int g)
{
    int best = 0;
    uint64_t term = 0;
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        raft_host_group_stats st;
        if (!nd->up || raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0)
            continue;
        if (st.state == 3 && !st.failed && st.term > term) {
            term = st.term;
            best = i;
        }
    }
    return best;
}

static int member_role(const raft_host_member *m, size_t n, uint64_t id) /* -1 absent, 0, 1 */
{
    for (size_t i = 0; i < n; i++)
        if (m[i].id == id)
            return m[i].voter ? 1 : 0;
    return -1;
}

/* The replica on nd is gone for good (like stratad after a move: raft_host_stop_group,
 * wal_drop_group, the partition's data dropped). */
static void drop_replica(sim *s, node *nd, int g)
{
    strata_err err;
    if (nd->up && raft_host_stop_group(nd->host, (uint64_t)g, &err) != 0)
        fail(s, "node %d group %d: stop: %s", nd->id, g, err.msg);
    for (dop *op = nd->pending_head; op != NULL; op = op->next)
        if (op->group == (uint64_t)g)
            op->dropped = true;
    dgroup *d = &nd->disk[g];
    for (size_t k = 0; k < d->n; k++)
        free(d->log[k].data);
    free(d->log);
    free(d->meta);
    memset(d, 0, sizeof *d);
    fsm_free(&nd->fsm[g]);
    fsm_free(&nd->dur[g]);
    nd->installing[g] = false;
    for (size_t k = 0; k < s->nsess; k++)
        if (s->sess[k].dest == nd->id && s->sess[k].group == g)
            s->sess[k].active = false;
    nd->hosted[g] = false;
    nd->joined[g] = false;
}

static void move_done_cb(void *data, const raft_host_outcome *o)
{
    sim *s = data;
    (void)o;
    s->mv.inflight = false;
}

/* Proposes `m` on the leader unless a change is outstanding. */
static void move_propose(sim *s, int leader, const raft_host_member *m, size_t n)
{
    mover *mv = &s->mv;
    if (mv->inflight && s->now < mv->inflight_since + 1000)
        return;
    strata_err err;
    mv->inflight = true;
    mv->inflight_since = s->now;
    s->changes++;
    if (raft_host_change(s->nodes[leader].host, (uint64_t)mv->group, m, n, move_done_cb, s, &err) !=
        0) {
        mv->inflight = false;
        if (err.code != ERR_UNAVAILABLE && err.code != ERR_BUSY)
            fail(s, "group %d: change refused: %s", mv->group, err.msg);
    }
}

static void move_start(sim *s)
{
    mover *mv = &s->mv;
    int g = (int)rnd(&s->rng, (uint64_t)s->ngroups);
    int spare[MAX_NODES], nspare = 0, held[MAX_NODES], nheld = 0;
    for (int i = 1; i <= s->nnodes; i++) {
        if (s->nodes[i].hosted[g])
            held[nheld++] = i;
        else
            spare[nspare++] = i;
    }
    if (nspare == 0 || nheld == 0)
        return;
    *mv = (mover){.phase = MV_ADD,
                  .group = g,
                  .from = held[rnd(&s->rng, (uint64_t)nheld)],
                  .to = spare[rnd(&s->rng, (uint64_t)nspare)]};
    node *to = &s->nodes[mv->to];
    to->hosted[g] = true;
    to->joined[g] = true;
    strata_err err;
    if (to->up && raft_host_join_group(to->host, (uint64_t)g, to->fsm[g].applied, &err) != 0)
        fail(s, "node %d group %d: join: %s", mv->to, g, err.msg);
}

/* One step of the current move, decided from the leader's latest configuration. */
static void move_step(sim *s)
{
    mover *mv = &s->mv;
    if (mv->phase == MV_IDLE) {
        if (s->now < MOVE_END_MS && chance(&s->rng, 300))
            move_start(s);
        return;
    }
    if (mv->phase == MV_DROP) {
        if (s->now >= mv->drop_at) {
            drop_replica(s, &s->nodes[mv->from], mv->group);
            mv->phase = MV_IDLE;
            s->moves_done++;
        }
        return;
    }
    int l = group_leader(s, mv->group);
    if (l == 0)
        return;
    raft_host *h = s->nodes[l].host;
    raft_host_member m[MAX_NODES + 1];
    size_t n = 0;
    bool unc = false;
    if (raft_host_configuration(h, (uint64_t)mv->group, m, MAX_NODES, &n, &unc, NULL) != 0 ||
        n > MAX_NODES || unc)
        return;
    uint64_t to = (uint64_t)mv->to, from = (uint64_t)mv->from;
    int to_role = member_role(m, n, to), from_role = member_role(m, n, from);
    if (mv->phase == MV_ADD) {
        if (to_role >= 0) {
            mv->phase = MV_CATCH_UP;
        } else {
            m[n++] = (raft_host_member){to, false};
            move_propose(s, l, m, n);
        }
    }
    if (mv->phase == MV_CATCH_UP) {
        raft_host_group_stats st;
        uint64_t match = 0;
        if (raft_host_group_info(h, (uint64_t)mv->group, &st, NULL) == 0 &&
            raft_host_member_match(h, (uint64_t)mv->group, to, &match, NULL) == 0 &&
            match >= st.commit_index)
            mv->phase = MV_PROMOTE;
        else
            return;
    }
    if (mv->phase == MV_PROMOTE) {
        if (to_role == 1) {
            mv->phase = MV_REMOVE;
        } else {
            for (size_t i = 0; i < n; i++)
                if (m[i].id == to)
                    m[i].voter = true;
            move_propose(s, l, m, n);
            return;
        }
    }
    if (mv->phase == MV_REMOVE) {
        if (from_role < 0) {
            mv->phase = MV_DROP;
            mv->drop_at = s->now + 50 + rnd(&s->rng, 300);
            return;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (m[i].id != from)
                m[k++] = m[i];
        s->self_removals += l == mv->from && !mv->inflight;
        move_propose(s, l, m, k);
    }
}

/* ---- checks ---- */

static void check_leaders(sim *s)
{
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        if (!nd->up)
            continue;
        for (int g = 0; g < s->ngroups; g++) {
            raft_host_group_stats st;
            if (raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0)
                continue;
            if (st.failed)
                fail(s, "node %d group %d stopped", i, g);
            /* A replica whose committed configuration makes it a learner, or leaves it
             * out, never campaigns. */
            raft_host_member m[MAX_NODES];
            size_t n = 0;
            bool unc = true;
            if (st.state != 1 &&
                raft_host_configuration(nd->host, (uint64_t)g, m, MAX_NODES, &n, &unc, NULL) == 0 &&
                !unc && n <= MAX_NODES && member_role(m, n, (uint64_t)i) != 1)
                fail(s, "node %d group %d: state %d but not a voter in its configuration", i, g,
                     st.state);
            if (st.state != 3)
                continue;
            grow_u64(&s->term_leader[g], &s->term_cap[g], st.term);
            uint64_t *l = &s->term_leader[g][st.term];
            if (*l == 0)
                *l = (uint64_t)i;
            else if (*l != (uint64_t)i)
                fail(s, "group %d term %" PRIu64 ": two leaders, nodes %" PRIu64 " and %d", g,
                     st.term, *l, i);
        }
    }
}

static uint64_t digest(const fsm_group *f)
{
    return f->applied ? XXH3_64bits(f->wid, (f->applied + 1) * sizeof *f->wid) : 0;
}

static void final_checks(sim *s)
{
    if (s->mv.phase != MV_IDLE)
        fail(s, "move of group %d from node %d to node %d stuck in phase %d", s->mv.group,
             s->mv.from, s->mv.to, s->mv.phase);
    for (int g = 0; g < s->ngroups && !s->failed; g++) {
        int r = 1;
        while (r < s->nnodes && !s->nodes[r].hosted[g])
            r++;
        const fsm_group *ref = &s->nodes[r].fsm[g];
        /* The replicas are exactly the final configuration: nvoters voters, no learner. */
        raft_host_member m[MAX_NODES];
        size_t n = 0;
        bool unc = true;
        if (s->nodes[r].up && (raft_host_configuration(s->nodes[r].host, (uint64_t)g, m, MAX_NODES,
                                                       &n, &unc, NULL) != 0 ||
                               unc || n != (size_t)s->nvoters))
            fail(s, "group %d: final configuration on node %d has %zu servers%s", g, r, n,
                 unc ? " (uncommitted)" : "");
        for (size_t k = 0; k < n && !s->failed; k++)
            if (!m[k].voter || m[k].id < 1 || m[k].id > (uint64_t)s->nnodes ||
                !s->nodes[m[k].id].hosted[g])
                fail(s, "group %d: final member %" PRIu64 " is a learner or holds no replica", g,
                     m[k].id);
        for (int i = 1; i <= s->nnodes; i++) {
            const fsm_group *f = &s->nodes[i].fsm[g];
            if (!s->nodes[i].up)
                fail(s, "node %d is down at the end", i);
            else if (!s->nodes[i].hosted[g])
                continue;
            else if (f->applied != ref->applied || digest(f) != digest(ref))
                fail(s,
                     "group %d did not converge: node %d applied %" PRIu64 " (digest %016" PRIx64
                     "), node %d applied %" PRIu64 " (digest %016" PRIx64 ")",
                     g, r, ref->applied, digest(ref), i, f->applied, digest(f));
        }
    }
    for (size_t k = 0; k < s->nops && !s->failed; k++) {
        cop *p = s->ops[k];
        if (!p->ok)
            continue;
        for (int i = 1; i <= s->nnodes && !s->failed; i++) {
            const fsm_group *f = &s->nodes[i].fsm[p->group];
            uint64_t idx = p->idx;
            if (!s->nodes[i].hosted[p->group])
                continue;
            uint64_t want = p->is_read ? p->read_wid : p->wid;
            if (p->is_read && idx == 0)
                continue; /* read of a never-written key */
            if (idx > f->applied || f->wid[idx] != want)
                fail(s, "%s %" PRIu64 " at group %d index %" PRIu64 " missing on node %d",
                     p->is_read ? "write returned by a read" : "acknowledged write", want, p->group,
                     idx, i);
        }
    }
}

/* ---- leadership transfers (--transfers) ---- */

typedef struct {
    sim *s;
    node *from;
    int group;
    uint64_t incarnation;
} transfer_ctx;

static void transfer_cb(void *data, const raft_host_outcome *o)
{
    transfer_ctx *t = data;
    sim *s = t->s;
    if (s->transfers_pending == 0)
        fail(s, "a transfer callback fired twice (or unasked)");
    else
        s->transfers_pending--;
    if (o->code == ERR_NONE) {
        s->transfers_done++;
        /* Done means the old leader stepped down (checked only while its host lives: a
         * crash fails the callback instead). */
        if (t->from->up && t->from->incarnation == t->incarnation &&
            raft_host_is_leader(t->from->host, (uint64_t)t->group))
            fail(s, "transfer on group %d reported done while node %d still leads", t->group,
                 t->from->id);
    } else {
        s->transfers_failed++;
    }
    free(t);
}

static void transfer_try(sim *s)
{
    int g = (int)rnd(&s->rng, (uint64_t)s->ngroups);
    int l = group_leader(s, g);
    if (l == 0)
        return;
    node *nd = &s->nodes[l];
    uint64_t target = 1 + rnd(&s->rng, (uint64_t)s->nnodes);
    if (chance(&s->rng, 800) && !raft_host_transfer_ready(nd->host, (uint64_t)g, target, 4, NULL))
        return;
    transfer_ctx *t = xcalloc(1, sizeof *t);
    *t = (transfer_ctx){.s = s, .from = nd, .group = g, .incarnation = nd->incarnation};
    s->transfers_pending++;
    strata_err err;
    if (raft_host_transfer(nd->host, (uint64_t)g, target, transfer_cb, t, &err) != 0) {
        s->transfers_pending--;
        s->transfers_refused++;
        free(t);
        return;
    }
    s->transfers_started++;
}

/* ---- main loop ---- */

static const char *ev_name(int t)
{
    static const char *names[] = {"deliver",    "disk",   "timer",   "client", "fault",
                                  "heal",       "resume", "flush",   "copy",   "copy-data",
                                  "copy-retry", "move",   "transfer"};
    return t >= 0 && t <= EV_TRANSFER ? names[t] : "?";
}

static void record(sim *s, const event *e)
{
    trace_rec *r = &s->trace[s->ntrace++ % TRACE_LEN];
    *r = (trace_rec){e->time, e->type, e->node, e->from, e->group};
}

/* "1 2 3l*" : the node's latest configuration (l = learner, * = uncommitted). */
static const char *conf_text(const node *nd, int g)
{
    static char buf[64];
    raft_host_member m[MAX_NODES];
    size_t n = 0, off = 0;
    bool unc = false;
    buf[0] = 0;
    if (!nd->up || raft_host_configuration(nd->host, (uint64_t)g, m, MAX_NODES, &n, &unc, NULL))
        return "-";
    for (size_t i = 0; i < n && i < MAX_NODES && off < sizeof buf - 8; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%" PRIu64 "%s", i ? " " : "",
                                m[i].id, m[i].voter ? "" : "l");
    if (unc && off < sizeof buf - 2)
        snprintf(buf + off, sizeof buf - off, "*");
    return buf;
}

static void print_trace(const sim *s)
{
    size_t n = s->ntrace < TRACE_LEN ? s->ntrace : TRACE_LEN;
    fprintf(stderr, "last %zu events:\n", n);
    for (size_t i = s->ntrace - n; i < s->ntrace; i++) {
        const trace_rec *r = &s->trace[i % TRACE_LEN];
        fprintf(stderr, "  t=%" PRIu64 " %-7s node=%d from=%d group=%" PRIu64 "\n", r->time,
                ev_name(r->type), r->node, r->from, r->a);
    }
    for (int i = 1; i <= s->nnodes; i++)
        for (int g = 0; g < s->ngroups; g++) {
            raft_host_group_stats st = {0};
            if (s->nodes[i].up)
                raft_host_group_info(s->nodes[i].host, (uint64_t)g, &st, NULL);
            fprintf(stderr,
                    "  node %d group %d: %s state=%d term=%" PRIu64 " commit=%" PRIu64
                    " applied=%" PRIu64 " last=%" PRIu64 " stored=%" PRIu64
                    " tv=%u queued=%u appends=%u host-applied=%" PRIu64 " snap=%" PRIu64
                    " first=%" PRIu64 " conf=%s\n",
                    i, g, s->nodes[i].up ? "up" : "DOWN", st.state, st.term, st.commit_index,
                    s->nodes[i].fsm[g].applied, st.last_index, st.last_stored, st.term_vote_writes,
                    st.queued_messages, st.appends_in_flight, st.applied_index, st.snapshot_index,
                    st.first_index, conf_text(&s->nodes[i], g));
        }
}

static void handle(sim *s, event *e)
{
    node *nd = e->node >= 1 && e->node <= s->nnodes ? &s->nodes[e->node] : NULL;
    switch (e->type) {
    case EV_DELIVER:
        if (nd->up)
            raft_host_receive(nd->host, (uint64_t)e->from, e->group, e->bytes, e->len, NULL);
        free(e->bytes);
        break;
    case EV_DISK:
        if (nd->up && e->gen == nd->incarnation)
            disk_complete(nd);
        break;
    case EV_TIMER:
        if (nd->up && e->gen == nd->timer_gen)
            raft_host_tick(nd->host);
        break;
    case EV_CLIENT:
        client_op(s);
        if (s->now < CLIENT_END_MS)
            push(s, (event){.time = s->now + 1 + rnd(&s->rng, 6), .type = EV_CLIENT});
        break;
    case EV_FAULT:
        if (s->now >= FAULT_END_MS)
            break;
        fault(s);
        if (s->now < FAULT_END_MS)
            push(s, (event){.time = s->now + 50 + rnd(&s->rng, 250), .type = EV_FAULT});
        break;
    case EV_HEAL_ALL:
        memset(s->link_down, 0, sizeof s->link_down);
        for (int i = 1; i <= s->nnodes; i++)
            if (!s->nodes[i].up)
                node_start(s, &s->nodes[i]);
        break;
    case EV_FLUSH:
        flush(s);
        push(s, (event){.time = s->now + 10 + rnd(&s->rng, 20), .type = EV_FLUSH});
        break;
    case EV_COPY_REQ:
        copy_serve(s, nd, &s->sess[e->a], e->b);
        break;
    case EV_COPY_CHUNK:
        copy_receive(s, nd, &s->sess[e->a], e->b);
        break;
    case EV_COPY_TIMEOUT:
        copy_timeout(s, nd, &s->sess[e->a], e->b);
        break;
    case EV_MOVE:
        move_step(s);
        push(s, (event){.time = s->now + 5 + rnd(&s->rng, 20), .type = EV_MOVE});
        break;
    case EV_TRANSFER:
        if (s->now >= FAULT_END_MS)
            break;
        transfer_try(s);
        push(s, (event){.time = s->now + 10 + rnd(&s->rng, 50), .type = EV_TRANSFER});
        break;
    case EV_RESUME:
        if (nd->up && e->gen == nd->incarnation) {
            fsm_group *f = &nd->fsm[e->group];
            f->retry_index = f->busy_index;
            f->busy_index = 0;
            raft_host_apply_resume(nd->host, e->group);
        }
        break;
    }
}

static bool run_seed(uint64_t seed, int nodes_opt, bool verbose)
{
    sim *s = xcalloc(1, sizeof *s);
    s->seed = seed;
    s->verbose = verbose;
    s->inject = g_inject;
    s->wild_net = g_wild_net;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s->rng.s[i] = splitmix64(&x);
    s->moves = g_moves;
    s->nvoters = nodes_opt ? nodes_opt : (seed % 4 == 3 ? 5 : 3);
    s->nnodes = s->nvoters + (s->moves ? 1 : 0); /* a spare node for replicas to move to */
    s->ngroups = 1 + (int)rnd(&s->rng, MAX_GROUPS);
    for (int i = 1; i <= s->nnodes; i++) {
        s->nodes[i].sim = s;
        s->nodes[i].id = i;
        for (int g = 0; g < MAX_GROUPS; g++)
            s->nodes[i].hosted[g] = i <= s->nvoters;
    }
    for (int i = 1; i <= s->nnodes; i++)
        node_start(s, &s->nodes[i]);
    push(s, (event){.time = 100 + rnd(&s->rng, 100), .type = EV_CLIENT});
    push(s, (event){.time = 200 + rnd(&s->rng, 300), .type = EV_FAULT});
    push(s, (event){.time = FAULT_END_MS, .type = EV_HEAL_ALL});
    push(s, (event){.time = 20 + rnd(&s->rng, 20), .type = EV_FLUSH});
    if (s->moves)
        push(s, (event){.time = 300 + rnd(&s->rng, 200), .type = EV_MOVE});
    s->transfers = g_transfers;
    if (s->transfers)
        push(s, (event){.time = 300 + rnd(&s->rng, 200), .type = EV_TRANSFER});

    while (s->nheap > 0 && !s->failed) {
        event e = pop(s);
        if (e.time > SIM_END_MS) {
            free(e.bytes);
            break;
        }
        s->now = e.time;
        s->events++;
        record(s, &e);
        handle(s, &e);
        check_leaders(s);
    }
    if (!s->failed)
        final_checks(s);
    if (!s->failed && s->transfers_pending != 0)
        fail(s, "%" PRIu64 " transfer callbacks never fired", s->transfers_pending);

    bool ok = !s->failed;
    if (!ok) {
        fprintf(stderr, "FAIL seed %" PRIu64 " (%d nodes, %d groups) at t=%" PRIu64 " ms: %s\n",
                seed, s->nnodes, s->ngroups, s->now, s->why);
        print_trace(s);
        fprintf(stderr, "replay: sim --seed %" PRIu64 "\n", seed);
    } else if (verbose) {
        printf("seed %" PRIu64 ": %d nodes, %d groups, %" PRIu64 " events, %" PRIu64
               " messages, %" PRIu64 " writes acked, %" PRIu64 " strong reads, %" PRIu64
               " crashes, %" PRIu64 " busy applies, %" PRIu64 " compactions, %" PRIu64
               " snapshot points, %" PRIu64 " installs (%" PRIu64 " copies failed, %" PRIu64
               " chunks), %" PRIu64 " moves (%" PRIu64 " changes proposed, %" PRIu64
               " by a leader removing itself), transfers %" PRIu64 " started (%" PRIu64
               " done, %" PRIu64 " gave up, %" PRIu64 " refused); applied",
               seed, s->nnodes, s->ngroups, s->events, s->msgs, s->acked, s->reads_ok, s->crashes,
               s->busy, s->compactions, s->snap_points, s->installs, s->install_failures, s->chunks,
               s->moves_done, s->changes, s->self_removals, s->transfers_started, s->transfers_done,
               s->transfers_failed, s->transfers_refused);
        for (int g = 0; g < s->ngroups; g++) {
            int r = 1;
            while (r < s->nnodes && !s->nodes[r].hosted[g])
                r++;
            printf(" g%d=%" PRIu64 "/%016" PRIx64, g, s->nodes[r].fsm[g].applied,
                   digest(&s->nodes[r].fsm[g]));
        }
        printf("\n");
    }

    /* Teardown. */
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        if (nd->up)
            node_crash(s, nd);
        for (int g = 0; g < MAX_GROUPS; g++) {
            for (size_t k = 0; k < nd->disk[g].n; k++)
                free(nd->disk[g].log[k].data);
            free(nd->disk[g].log);
            free(nd->disk[g].meta);
            fsm_free(&nd->fsm[g]);
            fsm_free(&nd->dur[g]);
        }
    }
    while (s->nheap > 0) {
        event e = pop(s);
        free(e.bytes);
    }
    free(s->heap);
    for (size_t k = 0; k < s->nops; k++)
        free(s->ops[k]);
    free(s->ops);
    for (size_t k = 0; k < s->nsess; k++) {
        fsm_free(&s->sess[k].snap);
        fsm_free(&s->sess[k].recv);
    }
    free(s->sess);
    for (int g = 0; g < MAX_GROUPS; g++) {
        free(s->term_leader[g]);
        free(s->global_wid[g]);
        free(s->global_set[g]);
    }
    free(s);
    return ok;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: sim (--seed N | --seeds A-B) [--nodes 3|5] [--moves] [--transfers] [--inject "
            "stale-read|lying-disk|bad-copy] [-v]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t a = 1, b = 100;
    int nodes = 0;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            a = b = strtoull(argv[++i], NULL, 10);
            verbose = true;
        } else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%" SCNu64 "-%" SCNu64, &a, &b) != 2 || b < a)
                usage();
        } else if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc) {
            nodes = atoi(argv[++i]);
            if (nodes != 3 && nodes != 5)
                usage();
        } else if (strcmp(argv[i], "--inject") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "stale-read") == 0)
                g_inject = INJECT_STALE_READ;
            else if (strcmp(argv[i], "lying-disk") == 0)
                g_inject = INJECT_LYING_DISK;
            else if (strcmp(argv[i], "bad-copy") == 0)
                g_inject = INJECT_BAD_COPY;
            else
                usage();
        } else if (strcmp(argv[i], "--wild-net") == 0) {
            g_wild_net = true;
        } else if (strcmp(argv[i], "--moves") == 0) {
            g_moves = true;
        } else if (strcmp(argv[i], "--transfers") == 0) {
            g_transfers = true;
        } else if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else {
            usage();
        }
    }
    uint64_t failures = 0;
    for (uint64_t seed = a; seed <= b; seed++)
        if (!run_seed(seed, nodes, verbose))
            failures++;
    printf("sim: seeds %" PRIu64 "-%" PRIu64 ": %" PRIu64 " passed, %" PRIu64 " failed\n", a, b,
           b - a + 1 - failures, failures);
    return failures ? 1 : 0;
}
