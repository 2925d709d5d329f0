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
 *            from the simulated disk, state machine replayed from the log).
 *   clients: writes `key := unique write id` and strong reads, sent to the node they
 *            believe leads (hint), or a random node.
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
 *      the key completed before it began, and that write is in the final log at that index.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/raft/raft_host.h"

#define MAX_NODES     5
#define MAX_GROUPS    3
#define NKEYS         4
#define FAULT_END_MS  3000
#define CLIENT_END_MS 4000
#define SIM_END_MS    6000
#define TRACE_LEN     48

/* Deliberate bugs for `--inject`: each must make the checks fail on some seed. */
enum { INJECT_NONE, INJECT_STALE_READ, INJECT_LYING_DISK };
static int g_inject;
static bool g_wild_net;

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

enum { EV_DELIVER, EV_DISK, EV_TIMER, EV_CLIENT, EV_FAULT, EV_HEAL_ALL };

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
    dentry *log; /* index 1 .. n */
    size_t n;
    size_t cap;
} dgroup;

typedef struct dop {
    struct dop *next;
    bool is_append;
    uint64_t group;
    uint64_t term, vote;
    uint64_t first;
    dentry *ents;
    size_t n;
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
    fsm_group fsm[MAX_GROUPS];
} node;

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
    uint64_t next_wid;
    bool failed;
    char why[512];
    trace_rec trace[TRACE_LEN];
    size_t ntrace;
    bool verbose;
    int inject; /* deliberate bug, to show the checks can fail (INJECT_*) */
    /* stats */
    uint64_t events, msgs, acked, reads_ok, crashes;
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

static void disk_apply(dgroup *d, dop *op)
{
    d->has = true;
    if (!op->is_append) {
        d->term = op->term;
        d->vote = op->vote;
        return;
    }
    /* Replace from op->first (keep 1 .. first-1). */
    size_t keep = op->first - 1;
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
    out->start_index = 1;
    out->n = d->n;
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
    op->is_append = true;
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

static void disk_complete(node *nd)
{
    dop *op = nd->pending_head;
    if (op == NULL)
        return;
    nd->pending_head = op->next;
    if (nd->pending_head == NULL)
        nd->pending_tail = NULL;
    disk_apply(&nd->disk[op->group], op);
    raft_storage_cb cb = op->cb;
    void *data = op->cb_data;
    dentries_free(op->ents, op->n);
    free(op);
    if (cb != NULL)
        cb(data, 0);
}

static void disk_drop_pending(node *nd)
{
    while (nd->pending_head != NULL) {
        dop *op = nd->pending_head;
        nd->pending_head = op->next;
        dentries_free(op->ents, op->n);
        free(op);
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

/* ---- nodes ---- */

static void node_start(sim *s, node *nd)
{
    strata_err err;
    raft_host_config cfg = {
        .node_id = (uint64_t)nd->id,
        .storage = {.ctx = nd, .load = st_load, .set_term_vote = st_term_vote, .append = st_append},
        .transport = {.ctx = nd, .send = tr_send},
        .clock = {.ctx = nd, .now = ck_now, .arm = ck_arm},
        .fsm = {.ctx = nd, .apply = fsm_apply},
        .election_timeout_ms = 150,
        .heartbeat_timeout_ms = 30,
        .seed = s->seed * 31 + nd->incarnation,
    };
    memset(nd->fsm, 0, sizeof nd->fsm);
    for (int g = 0; g < MAX_GROUPS; g++)
        nd->fsm[g].wid = NULL;
    nd->host = raft_host_create(&cfg, &err);
    if (nd->host == NULL) {
        fail(s, "node %d: create: %s", nd->id, err.msg);
        return;
    }
    nd->up = true;
    uint64_t members[MAX_NODES];
    for (int i = 0; i < s->nnodes; i++)
        members[i] = (uint64_t)i + 1;
    for (int g = 0; g < s->ngroups; g++)
        if (raft_host_start_group(nd->host, (uint64_t)g, members, (size_t)s->nnodes, 0, &err) != 0)
            fail(s, "node %d group %d: start: %s", nd->id, g, err.msg);
}

static void fsm_reset(node *nd)
{
    for (int g = 0; g < MAX_GROUPS; g++) {
        free(nd->fsm[g].wid);
        memset(&nd->fsm[g], 0, sizeof nd->fsm[g]);
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
        if (nd->up && count_down(s) < (s->nnodes - 1) / 2 + 1) {
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
    for (int g = 0; g < s->ngroups && !s->failed; g++) {
        const fsm_group *ref = &s->nodes[1].fsm[g];
        for (int i = 1; i <= s->nnodes; i++) {
            const fsm_group *f = &s->nodes[i].fsm[g];
            if (!s->nodes[i].up)
                fail(s, "node %d is down at the end", i);
            else if (f->applied != ref->applied || digest(f) != digest(ref))
                fail(s,
                     "group %d did not converge: node 1 applied %" PRIu64 " (digest %016" PRIx64
                     "), node %d applied %" PRIu64 " (digest %016" PRIx64 ")",
                     g, ref->applied, digest(ref), i, f->applied, digest(f));
        }
    }
    for (size_t k = 0; k < s->nops && !s->failed; k++) {
        cop *p = s->ops[k];
        if (!p->ok)
            continue;
        for (int i = 1; i <= s->nnodes && !s->failed; i++) {
            const fsm_group *f = &s->nodes[i].fsm[p->group];
            uint64_t idx = p->idx;
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

/* ---- main loop ---- */

static const char *ev_name(int t)
{
    static const char *names[] = {"deliver", "disk", "timer", "client", "fault", "heal"};
    return t >= 0 && t <= EV_HEAL_ALL ? names[t] : "?";
}

static void record(sim *s, const event *e)
{
    trace_rec *r = &s->trace[s->ntrace++ % TRACE_LEN];
    *r = (trace_rec){e->time, e->type, e->node, e->from, e->group};
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
                    " tv=%u queued=%u appends=%u\n",
                    i, g, s->nodes[i].up ? "up" : "DOWN", st.state, st.term, st.commit_index,
                    s->nodes[i].fsm[g].applied, st.last_index, st.last_stored, st.term_vote_writes,
                    st.queued_messages, st.appends_in_flight);
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
    s->nnodes = nodes_opt ? nodes_opt : (seed % 4 == 3 ? 5 : 3);
    s->ngroups = 1 + (int)rnd(&s->rng, MAX_GROUPS);
    for (int i = 1; i <= s->nnodes; i++) {
        s->nodes[i].sim = s;
        s->nodes[i].id = i;
    }
    for (int i = 1; i <= s->nnodes; i++)
        node_start(s, &s->nodes[i]);
    push(s, (event){.time = 100 + rnd(&s->rng, 100), .type = EV_CLIENT});
    push(s, (event){.time = 200 + rnd(&s->rng, 300), .type = EV_FAULT});
    push(s, (event){.time = FAULT_END_MS, .type = EV_HEAL_ALL});

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

    bool ok = !s->failed;
    if (!ok) {
        fprintf(stderr, "FAIL seed %" PRIu64 " (%d nodes, %d groups) at t=%" PRIu64 " ms: %s\n",
                seed, s->nnodes, s->ngroups, s->now, s->why);
        print_trace(s);
        fprintf(stderr, "replay: sim --seed %" PRIu64 "\n", seed);
    } else if (verbose) {
        printf("seed %" PRIu64 ": %d nodes, %d groups, %" PRIu64 " events, %" PRIu64
               " messages, %" PRIu64 " writes acked, %" PRIu64 " strong reads, %" PRIu64
               " crashes; applied",
               seed, s->nnodes, s->ngroups, s->events, s->msgs, s->acked, s->reads_ok, s->crashes);
        for (int g = 0; g < s->ngroups; g++)
            printf(" g%d=%" PRIu64 "/%016" PRIx64, g, s->nodes[1].fsm[g].applied,
                   digest(&s->nodes[1].fsm[g]));
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
    fprintf(stderr, "usage: sim (--seed N | --seeds A-B) [--nodes 3|5] [--inject "
                    "stale-read|lying-disk] [-v]\n");
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
            else
                usage();
        } else if (strcmp(argv[i], "--wild-net") == 0) {
            g_wild_net = true;
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
