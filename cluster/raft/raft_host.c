/* The multi-Raft host: see raft_host.h for the contract. */
#include "cluster/raft/raft_host.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <raft.h>

/* Voters a group may have for raft_host_read_index's leadership checks; a larger group's
 * reads take a barrier entry instead. */
#define RI_VOTERS_MAX 7

/* One entry of a group's in-memory log (a copy: C-Raft's pure core keeps only terms). */
typedef struct {
    uint64_t term;
    uint8_t type;
    uint8_t *data; /* in one of the group's log chunks */
    size_t len;
} log_entry;

/* Entry payloads are copied into chunks, in the order they come. Entries leave the log
 * from the front (compaction), so a chunk is freed whole once no live entry can be in it:
 * one malloc per chunk rather than per entry, and a compaction frees a few chunks, not
 * the hundreds of thousands of small blocks that, freed one by one, slowed the loop for
 * about a second after each engine flush. A truncated suffix's bytes stay until then.
 * Chunks grow from LOG_CHUNK_MIN to LOG_CHUNK_MAX so that an idle group holds little. */
typedef struct log_chunk {
    struct log_chunk *next;
    uint64_t last_index; /* the highest index whose payload went here */
    size_t used, cap;
    uint8_t data[];
} log_chunk;
#define LOG_CHUNK_MIN (4u << 10)
#define LOG_CHUNK_MAX (64u << 10)
/* A submit orphaned by a step-down waits this many election timeouts for its index to be
 * applied here (see stepped_down). */
#define ORPHAN_TIMEOUTS 2
/* Voters remembered per configuration for unaware_promotee; larger ones are not tracked. */
#define TRACKED_VOTERS 16

/* A submit or read waiting for its log index to be applied. */
typedef struct pending {
    struct pending *next;
    uint64_t index;
    uint64_t term;
    uint64_t round; /* raft_host_read_index: the leadership check that must confirm it */
    uint64_t give_up_at; /* an orphaned submit: fails, outcome unknown, at this time (ms) */
    raft_host_done_cb cb;
    void *data;
} pending;

typedef struct {
    pending *head;
    pending *tail;
} pending_list;

/* A storage append in flight; `last` shrinks when a later append replaces its tail. */
typedef struct append_req {
    struct append_req *next;
    struct append_req *prev;
    struct group *g;
    uint64_t first;
    uint64_t last;
} append_req;

/* A message held back until a term/vote write is durable. */
typedef struct out_msg {
    struct out_msg *next;
    uint64_t to;
    uint8_t *buf;
    size_t len;
} out_msg;

typedef struct group {
    raft_host *h;
    uint64_t id;
    struct raft raft;
    bool failed;
    bool applying;
    bool apply_blocked; /* the fsm answered RAFT_HOST_APPLY_BUSY: wait for apply_resume */
    bool change_active; /* a raft_host_change is in progress (waiting for its barrier or for
                           its entry to be applied): one change at a time */
    bool stopped;       /* removed by raft_host_stop_group: a shell kept until its storage
                           completions in flight have arrived (they must not touch freed memory) */
    struct group *next_zombie;
    /* The last snapshot point (compaction, install or load): what an InstallSnapshot
     * message describes. snap_conf is the configuration at snap_conf_index, encoded. */
    uint64_t snap_index;
    uint64_t snap_term;
    uint64_t snap_conf_index;
    uint8_t *snap_conf;
    size_t snap_conf_len;
    unsigned snap_writes; /* set_snapshot calls in flight (the shell must outlive them) */
    /* An install from the leader: the core's metadata (its configuration is ours until
     * handed back with RAFT_PERSISTED_SNAPSHOT), the out-of-band copy's token (0 when
     * none is outstanding) and when to retry a failed copy (0 = no retry pending). */
    bool installing;
    bool install_begin; /* set by the step that started it: fsm.install is called after */
    struct raft_snapshot_metadata inst;
    uint64_t install_from;
    uint64_t install_token;
    uint64_t install_retry_at;
    uint64_t install_applied;
    uint8_t *inst_conf; /* inst.configuration encoded, for the snapshot point */
    size_t inst_conf_len;
    uint64_t installs;
    uint64_t stale_from;     /* during the step of a stale AppendEntries: its sender */
    uint64_t stale_rejected; /* ...and the index its answers reject */
    uint64_t stale_answers;  /* answers rewritten (stale_from, last_log_index) */
    log_entry *log; /* entries log_first .. log_first + log_n - 1 */
    size_t log_n;
    size_t log_cap;
    uint64_t log_first;
    log_chunk *chunks, *chunks_tail; /* the payloads, oldest first */
    uint64_t applied;
    uint64_t deadline; /* raft_timeout(); 0 = none */
    unsigned tv_pending;
    out_msg *out_head;
    out_msg *out_tail;
    append_req *appends; /* in request order */
    uint64_t deferred_persisted;
    pending_list submits; /* increasing index */
    /* Submits whose leader (this node) stepped down before their entry was applied: each
     * waits for this replica to apply its index, which tells whether the entry committed
     * (see resolve_orphans), or gives up. In the order they were orphaned. */
    pending_list orphans;
    pending_list reads_waiting;
    pending_list reads_inflight; /* covered by the barrier at barrier_index */
    uint64_t barrier_index;
    uint64_t barrier_term;
    uint64_t opened_term; /* the last term this replica led and opened (open_term) */
    /* The voters of the last configuration entry applied here (at conf_index, 0: none
     * since start) and, if prev_known, of the one in force before it. */
    uint64_t conf_index;
    uint64_t cur_voters[TRACKED_VOTERS], prev_voters[TRACKED_VOTERS];
    unsigned n_cur_voters, n_prev_voters;
    bool cur_known, prev_known;
    /* Reads without a log entry (raft_host_read_index): a read waits in ri_waiting for a
     * majority's answer to a leadership check sent after it arrived (round >= its own),
     * then in ri_applying for its read index to be applied. Rounds count up for the
     * group's life; answers are kept per voter for ri_term only. */
    pending_list ri_waiting;
    pending_list ri_applying;
    uint64_t ri_sent;      /* last round sent */
    uint64_t ri_confirmed; /* last round a majority of voters answered for ri_term */
    uint64_t ri_term;
    uint64_t ri_conf;      /* configuration_committed_index when ri_sent went out */
    uint64_t ri_conf_from; /* first round sent under ri_conf: earlier rounds' answers
                              were given under another voter set and count for nothing */
    uint64_t ri_sent_at; /* ms */
    bool ri_releasing;   /* ri_release is running (it sends the next round itself) */
    unsigned ri_nacks;
    struct {
        uint64_t id;
        uint64_t round;
    } ri_acks[RI_VOTERS_MAX];
    /* The received entries of the message being stepped, and whether the core kept them
     * for persistence (then their batch is ours to free, else the core freed it). */
    const struct raft_entry *recv_entries;
    unsigned recv_n;
    bool recv_kept;
    /* A raft_host_transfer in progress (transfer_cb NULL when none): it ends when this
     * node stops leading (done), or when the core gives up (raft_transferee back to 0,
     * an election timeout after it started) or the group stops (failed). */
    uint64_t transfer_to;
    raft_host_done_cb transfer_cb;
    void *transfer_data;
    /* A replica that joined empty (raft_host_join_group with nothing stored) may have been
     * a member before, been removed and had its replica dropped: it remembers nothing of
     * what it acknowledged then. The first configurations it is sent (a snapshot point
     * or log entries from before its removal) can name it a voter of an old group whose
     * other members lag, and with it those would make a second majority next to the
     * real one (tests/sim --rejoin). So until its log has caught up with a leader's
     * commit index (Raft's removal was then committed before that index, and the
     * configuration it holds is at least as new) under a configuration naming it, it
     * neither campaigns nor votes (see confirm_check). */
    bool unconfirmed;
    bool snap_marked;    /* the stored snapshot point says "unconfirmed" (see meta_encode) */
    uint64_t hold_until; /* an unconfirmed follower's swallowed election timeout: next check */
    uint64_t fast_until; /* campaign_soon: a short election timeout until a leader or this */
    unsigned fast_timeout; /* campaign_soon: the short timeout now (doubles per new term) */
    uint64_t fast_term;    /* campaign_soon: the term when fast_timeout was last set */
    uint64_t known_leader; /* as last reported to cfg.events.leader */
    /* A TimeoutNow that came while the entries it names were still being written (see
     * hold_timeout_now); stepped once they are. */
    bool tn_held;
    uint64_t tn_from;
    struct raft_timeout_now tn;
} group;

struct raft_host {
    raft_host_config cfg;
    group **slots; /* open addressing on group id */
    size_t nslots;
    size_t ngroups;
    uint64_t armed; /* deadline last passed to clock.arm; UINT64_MAX = none */
    bool ticking;
    unsigned depth;      /* > 0 while the host runs (and may be calling back into user code) */
    group *zombies;      /* stopped groups waiting for their storage completions */
    uint64_t next_token; /* install tokens: unique per host */
    bool trace;          /* LIBRAFT_TRACE is set: keep C-Raft's stderr tracer */
};

/* ---- group table ---- */

static size_t slot_of(const raft_host *h, uint64_t id)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (h->nslots - 1);
}

static group *find_group(const raft_host *h, uint64_t id)
{
    for (size_t i = slot_of(h, id);; i = (i + 1) & (h->nslots - 1)) {
        if (h->slots[i] == NULL)
            return NULL;
        if (h->slots[i]->id == id)
            return h->slots[i];
    }
}

static int insert_group(raft_host *h, group *g)
{
    if ((h->ngroups + 1) * 2 > h->nslots) {
        size_t n = h->nslots * 2;
        group **s = calloc(n, sizeof *s);
        if (s == NULL)
            return -1;
        group **old = h->slots;
        size_t oldn = h->nslots;
        h->slots = s;
        h->nslots = n;
        for (size_t i = 0; i < oldn; i++)
            if (old[i] != NULL)
                for (size_t j = slot_of(h, old[i]->id);; j = (j + 1) & (n - 1))
                    if (s[j] == NULL) {
                        s[j] = old[i];
                        break;
                    }
        free(old);
    }
    for (size_t j = slot_of(h, g->id);; j = (j + 1) & (h->nslots - 1))
        if (h->slots[j] == NULL) {
            h->slots[j] = g;
            break;
        }
    h->ngroups++;
    return 0;
}

/* Removes g from the table; the entries after it in its probe run are re-placed so
 * that lookups never stop early at the hole. */
static void remove_group(raft_host *h, group *g)
{
    size_t mask = h->nslots - 1, i = slot_of(h, g->id);
    while (h->slots[i] != g)
        i = (i + 1) & mask;
    h->slots[i] = NULL;
    h->ngroups--;
    for (size_t j = (i + 1) & mask; h->slots[j] != NULL; j = (j + 1) & mask) {
        group *m = h->slots[j];
        h->slots[j] = NULL;
        size_t k = slot_of(h, m->id);
        while (h->slots[k] != NULL)
            k = (k + 1) & mask;
        h->slots[k] = m;
    }
}

/* ---- helpers ---- */

static uint64_t now_ms(const raft_host *h)
{
    return h->cfg.clock.now(h->cfg.clock.ctx);
}

static uint64_t leader_of(const group *g)
{
    raft_id id = 0;
    const char *addr = NULL;
    raft_leader((struct raft *)&g->raft, &id, &addr);
    return id;
}

static void list_push(pending_list *l, pending *p)
{
    p->next = NULL;
    if (l->tail != NULL)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
}

/* Takes the first op off a non-empty list. */
static pending *list_pop(pending_list *l)
{
    pending *p = l->head;
    l->head = p->next;
    if (l->head == NULL)
        l->tail = NULL;
    return p;
}

/* Moves every op of `from` to the end of `to`. */
static void list_move_all(pending_list *to, pending_list *from)
{
    if (from->head == NULL)
        return;
    if (to->tail != NULL)
        to->tail->next = from->head;
    else
        to->head = from->head;
    to->tail = from->tail;
    from->head = from->tail = NULL;
}

static void finish_outcome(pending *p, const raft_host_outcome *o)
{
    raft_host_done_cb cb = p->cb;
    void *data = p->data;
    free(p);
    cb(data, o);
}

static void finish(pending *p, strata_code code, uint64_t hint, const void *res, size_t rlen)
{
    raft_host_outcome o = {
        .code = code, .leader_hint = hint, .index = p->index, .result = res, .result_len = rlen};
    finish_outcome(p, &o);
}

/* A submit whose index was applied with another entry: it certainly did not commit. */
static void finish_not_applied(pending *p, uint64_t hint)
{
    raft_host_outcome o = {
        .code = ERR_UNAVAILABLE, .leader_hint = hint, .index = p->index, .not_applied = true};
    finish_outcome(p, &o);
}

/* Fails every pending op in `l` (the list is detached first: callbacks may add new ops). */
static void fail_list(pending_list *l, strata_code code, uint64_t hint)
{
    pending *p = l->head;
    l->head = l->tail = NULL;
    while (p != NULL) {
        pending *next = p->next;
        finish(p, code, hint, NULL, 0);
        p = next;
    }
}

static void fail_reads(group *g, strata_code code, uint64_t hint)
{
    g->barrier_index = 0;
    fail_list(&g->reads_inflight, code, hint);
    fail_list(&g->reads_waiting, code, hint);
    fail_list(&g->ri_waiting, code, hint);
    fail_list(&g->ri_applying, code, hint);
}

static void fail_all_ops(group *g, strata_code code)
{
    uint64_t hint = g->failed ? 0 : leader_of(g);
    g->barrier_index = 0;
    fail_list(&g->submits, code, hint);
    fail_list(&g->orphans, code, hint);
    fail_reads(g, code, hint);
}

/* Ends the transfer in progress (if any) with `code`; the callback may call back in. */
static void transfer_end(group *g, strata_code code)
{
    raft_host_done_cb cb = g->transfer_cb;
    if (cb == NULL)
        return;
    raft_host_outcome o = {.code = code, .leader_hint = g->failed ? 0 : leader_of(g)};
    void *data = g->transfer_data;
    g->transfer_cb = NULL;
    g->transfer_data = NULL;
    g->transfer_to = 0;
    cb(data, &o);
}

/* After every step: has the transfer in progress ended? Leadership gone is success (the
 * target, or whoever won the election it started, leads); the core's transferee back
 * to 0 while this node still leads means it gave up. */
static void transfer_check(group *g)
{
    if (g->transfer_cb == NULL)
        return;
    if (g->failed)
        transfer_end(g, ERR_UNAVAILABLE);
    else if (raft_state(&g->raft) != RAFT_LEADER)
        transfer_end(g, ERR_NONE);
    else if (raft_transferee(&g->raft) == 0)
        transfer_end(g, ERR_UNAVAILABLE);
}

static void group_fail(group *g, strata_code code, const char *why)
{
    if (g->failed)
        return;
    fprintf(stderr, "raft_host: node %" PRIu64 " group %" PRIu64 " stopped: %s\n",
            g->h->cfg.node_id, g->id, why);
    g->failed = true;
    g->deadline = 0;
    fail_all_ops(g, code);
    transfer_end(g, ERR_UNAVAILABLE);
}

/* group_fail for a storage request refused at once: the line names the cause storage gave
 * (a full disk, a failed log), not only the request. err may be NULL. */
static void group_fail_refused(group *g, strata_code code, const char *what, const strata_err *err)
{
    char why[STRATA_ERR_MSG_MAX + 64];
    snprintf(why, sizeof why, "%s: %s", what,
             err != NULL && err->code != ERR_NONE ? err->msg : "no reason given");
    group_fail(g, code, why);
}

static log_entry *log_at(group *g, uint64_t index)
{
    if (index < g->log_first || index >= g->log_first + g->log_n)
        return NULL;
    return &g->log[index - g->log_first];
}

/* Forgets the entries from `from` on; their payloads' bytes stay in their chunk. */
static void log_truncate(group *g, uint64_t from)
{
    if (from <= g->log_first)
        g->log_n = 0;
    else if (from - g->log_first < g->log_n)
        g->log_n = (size_t)(from - g->log_first);
}

/* Room for the payload of entry `index` in the newest chunk, or a new one. */
static uint8_t *log_payload(group *g, uint64_t index, size_t len)
{
    size_t need = ((len ? len : 1) + 7) & ~(size_t)7;
    log_chunk *c = g->chunks_tail;
    if (c == NULL || c->cap - c->used < need) {
        size_t cap = c == NULL                    ? LOG_CHUNK_MIN
                     : c->cap * 2 > LOG_CHUNK_MAX ? LOG_CHUNK_MAX
                                                  : c->cap * 2;
        if (cap < need)
            cap = need;
        log_chunk *n = malloc(sizeof *n + cap);
        if (n == NULL)
            return NULL;
        *n = (log_chunk){.cap = cap};
        if (c != NULL)
            c->next = n;
        else
            g->chunks = n;
        g->chunks_tail = c = n;
    }
    uint8_t *p = c->data + c->used;
    c->used += need;
    if (index > c->last_index)
        c->last_index = index;
    return p;
}

/* Frees the chunks, oldest first, that hold nothing at or above `first`. */
static void log_free_chunks_below(group *g, uint64_t first)
{
    while (g->chunks != NULL && g->chunks->last_index < first) {
        log_chunk *c = g->chunks;
        g->chunks = c->next;
        free(c);
    }
    if (g->chunks == NULL)
        g->chunks_tail = NULL;
}

/* Forgets every entry and frees the payloads' memory. */
static void log_free(group *g)
{
    log_truncate(g, 0);
    log_free_chunks_below(g, UINT64_MAX);
    free(g->log);
    g->log = NULL;
    g->log_cap = 0;
}

/* Copies n entries to the log at `index` (replacing the suffix from index). */
static int log_put(group *g, uint64_t index, const struct raft_entry *e, unsigned n)
{
    if (g->log_n == 0)
        g->log_first = index;
    if (index < g->log_first || index > g->log_first + g->log_n)
        return -1;
    log_truncate(g, index);
    if (g->log_n + n > g->log_cap) {
        size_t cap = g->log_cap ? g->log_cap : 64;
        while (cap < g->log_n + n)
            cap *= 2;
        log_entry *nl = realloc(g->log, cap * sizeof *nl);
        if (nl == NULL)
            return -1;
        g->log = nl;
        g->log_cap = cap;
    }
    for (unsigned i = 0; i < n; i++) {
        log_entry *le = &g->log[g->log_n];
        le->term = e[i].term;
        le->type = (uint8_t)e[i].type;
        le->len = e[i].buf.len;
        le->data = log_payload(g, index + i, le->len);
        if (le->data == NULL)
            return -1;
        if (le->len)
            memcpy(le->data, e[i].buf.base, le->len);
        g->log_n++;
    }
    return 0;
}

/* Views of log entries [index, index + n) for storage and encoding; NULL on error. */
static raft_host_entry *log_view(group *g, uint64_t index, size_t n)
{
    raft_host_entry *v = malloc((n ? n : 1) * sizeof *v);
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        log_entry *le = log_at(g, index + i);
        if (le == NULL) {
            free(v);
            return NULL;
        }
        v[i] = (raft_host_entry){le->term, le->type, le->data, le->len};
    }
    return v;
}

static void rearm(raft_host *h, uint64_t deadline)
{
    if (deadline != 0 && deadline < h->armed && !h->ticking) {
        h->armed = deadline;
        h->cfg.clock.arm(h->cfg.clock.ctx, deadline);
    }
}

/* ---- stepping ---- */

static void process_update(group *g, struct raft_update *up);
static void apply_committed(group *g);
static void deliver_deferred(group *g);
static void install_call(group *g);
static int install_adopt(group *g, uint64_t applied, strata_err *err);
static uint64_t group_deadline(const group *g);
static void fast_election_check(group *g);
static void open_term(group *g);
static void install_from_update(group *g, struct raft_update *up);
static int fill_install_snapshot(group *g, struct raft_message *m);

/* Reports a change of the leader known here to cfg.events.leader. */
static void note_leader(group *g)
{
    uint64_t leader = g->failed ? 0 : leader_of(g);
    if (leader == g->known_leader)
        return;
    g->known_leader = leader;
    const raft_host_events *ev = &g->h->cfg.events;
    if (ev->leader != NULL)
        ev->leader(ev->ctx, g->id, leader);
}

/*
 * C-Raft 0.22 checks, at every timeout of a leader, that each follower sent it something
 * since the previous check, and sends one that did not back to probe mode, where new
 * entries wait for the next heartbeat. Under steady writes no heartbeat is due, so the
 * check runs alone once per election timeout and sends nothing; when the group goes
 * quiet just then, before the followers answer anything, the next heartbeat timeout finds
 * no contact since and demotes both followers. The group's next write then waited up to
 * a heartbeat timeout (100 ms: under a PutItem load at 16 connections, 2-26 writes in
 * 5 s took over 60 ms, up to 104 ms; none with this change, at most 21 ms).
 * So a leader's timeout runs with a heartbeat timeout of 1 ms: every check also sends
 * every follower a heartbeat, whose answer is the contact the next check looks for. It
 * costs a heartbeat per follower per election timeout beyond those already due.
 */
static int step_raft(group *g, struct raft_event *ev, struct raft_update *up)
{
    unsigned heartbeat = g->raft.heartbeat_timeout;
    bool leader_timeout = ev->type == RAFT_TIMEOUT && raft_state(&g->raft) == RAFT_LEADER;
    if (leader_timeout)
        raft_set_heartbeat_timeout(&g->raft, 1);
    int rv = raft_step(&g->raft, ev, up);
    if (leader_timeout)
        raft_set_heartbeat_timeout(&g->raft, heartbeat);
    return rv;
}

static int group_step(group *g, struct raft_event *ev)
{
    struct raft_update up;
    if (g->failed)
        return -1;
    ev->time = now_ms(g->h);
    int rv = step_raft(g, ev, &up);
    if (rv != 0) {
        char why[128];
        snprintf(why, sizeof why, "raft_step(%d): %s", (int)ev->type, raft_strerror(rv));
        /* NOTLEADER (or CANTCHANGE: a configuration change is pending) on submit, and
         * NOTLEADER / BADID / NOTFOUND on a transfer, are ordinary answers, not failures
         * of the group; the core changed nothing. */
        if (ev->type == RAFT_SUBMIT && (rv == RAFT_NOTLEADER || rv == RAFT_CANTCHANGE))
            return -1;
        if (ev->type == RAFT_TRANSFER &&
            (rv == RAFT_NOTLEADER || rv == RAFT_BADID || rv == RAFT_NOTFOUND))
            return -1;
        group_fail(g, ERR_INTERNAL, why);
        return -1;
    }
    process_update(g, &up);
    fast_election_check(g);
    note_leader(g);
    /* After the update is fully handled (the core's message batch is reused by any
     * later step): install() may complete at once and step again. */
    if (g->install_begin && !g->failed) {
        g->install_begin = false;
        install_call(g);
    }
    deliver_deferred(g);
    apply_committed(g);
    if (!g->failed) {
        g->deadline = group_deadline(g);
        rearm(g->h, g->deadline);
    }
    transfer_check(g);
    open_term(g);
    return 0;
}

static void send_now(group *g, uint64_t to, const uint8_t *buf, size_t len)
{
    raft_host *h = g->h;
    (void)h->cfg.transport.send(h->cfg.transport.ctx, to, g->id, buf, len);
}

static void flush_out(group *g)
{
    while (g->out_head != NULL && g->tv_pending == 0) {
        out_msg *m = g->out_head;
        g->out_head = m->next;
        if (g->out_head == NULL)
            g->out_tail = NULL;
        if (!g->failed)
            send_now(g, m->to, m->buf, m->len);
        free(m->buf);
        free(m);
    }
}

static void zombie_reap(group *g);

static void tv_done(void *data, int status)
{
    group *g = data;
    raft_host *h = g->h;
    assert(g->tv_pending > 0);
    g->tv_pending--;
    if (g->stopped) {
        zombie_reap(g);
        return;
    }
    h->depth++;
    if (status != 0)
        group_fail(g, ERR_IO, "term/vote write failed");
    flush_out(g);
    h->depth--;
}

static void release_timeout_now(group *g);

static void persisted(group *g, uint64_t index)
{
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_PERSISTED_ENTRIES;
    ev.persisted_entries.index = index;
    group_step(g, &ev);
    release_timeout_now(g);
}

/* C-Raft accepts RAFT_PERSISTED_ENTRIES only as leader or follower (a candidate issues
 * no writes but may still have some in flight): hold the index until then. */
static void deliver_deferred(group *g)
{
    uint64_t idx = g->deferred_persisted;
    if (idx == 0 || g->failed)
        return;
    int st = raft_state(&g->raft);
    if (st != RAFT_LEADER && st != RAFT_FOLLOWER)
        return;
    g->deferred_persisted = 0;
    if (idx > g->raft.last_stored && idx <= raft_last_index(&g->raft))
        persisted(g, idx);
}

static void append_done_in(group *g, uint64_t first, uint64_t last, int status);

static void append_done(void *data, int status)
{
    append_req *r = data;
    group *g = r->g;
    raft_host *h = g->h;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        g->appends = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    uint64_t first = r->first, last = r->last;
    free(r);
    if (g->stopped) {
        zombie_reap(g);
        return;
    }
    h->depth++;
    append_done_in(g, first, last, status);
    h->depth--;
}

static void append_done_in(group *g, uint64_t first, uint64_t last, int status)
{
    if (g->failed)
        return;
    if (status != 0) {
        group_fail(g, ERR_IO, "log append failed");
        return;
    }
    if (last < first || last <= g->raft.last_stored || last > raft_last_index(&g->raft))
        return;
    int st = raft_state(&g->raft);
    if (st != RAFT_LEADER && st != RAFT_FOLLOWER) {
        if (last > g->deferred_persisted)
            g->deferred_persisted = last;
        return;
    }
    persisted(g, last);
}

/*
 * Works around a C-Raft 0.22 bug: a follower appending received entries records a
 * configuration entry as uncommitted at the index of the FIRST new entry of the batch
 * (replicationAppend passes `index`, not `index + i`). The configuration itself is right
 * (the batch's last one), its index is not: the core would then ignore its commit
 * (RAFT_CONFIGURATION must name that index), so the change stayed pending for ever (a
 * leader elected later could never change the configuration), and a truncation between
 * the two indexes would not roll it back. The host holds the entries: it puts the index
 * of the batch's last configuration entry right (a leader's own submits, one entry at a
 * time, are recorded correctly).
 */
static void fix_uncommitted_index(group *g, uint64_t index, unsigned n)
{
    if (g->raft.configuration_uncommitted_index != index)
        return;
    for (unsigned j = n; j-- > 1;) {
        log_entry *le = log_at(g, index + j);
        if (le != NULL && le->type == RAFT_CHANGE) {
            g->raft.configuration_uncommitted_index = index + j;
            return;
        }
    }
}

static void persist_entries(group *g, struct raft_update *up)
{
    raft_host *h = g->h;
    uint64_t index = up->entries.index;
    unsigned n = up->entries.n;
    strata_err err;

    if (g->recv_entries != NULL && up->entries.batch >= g->recv_entries &&
        up->entries.batch < g->recv_entries + g->recv_n)
        g->recv_kept = true;
    int put = log_put(g, index, up->entries.batch, n);
    /* A new leader with uncommitted entries appends a barrier the core allocated itself
     * (r->barrier); like submitted entries, it is the host's to free once copied. */
    if (up->entries.batch == &g->raft.barrier) {
        struct raft_entry *b = &g->raft.barrier;
        raft_free(b->batch != NULL ? b->batch : b->buf.base);
        b->batch = NULL;
        b->buf.base = NULL;
    }
    if (put != 0) {
        group_fail(g, ERR_NOMEM, "log copy failed");
        return;
    }
    fix_uncommitted_index(g, index, n);
    /* Earlier appends in flight lose whatever this one replaces. */
    for (append_req *r = g->appends; r != NULL; r = r->next)
        if (r->last >= index)
            r->last = index - 1;
    if (g->deferred_persisted >= index)
        g->deferred_persisted = index - 1;

    append_req *r = calloc(1, sizeof *r);
    raft_host_entry *v = log_view(g, index, n);
    if (r == NULL || v == NULL) {
        free(r);
        free(v);
        group_fail(g, ERR_NOMEM, "append request");
        return;
    }
    r->g = g;
    r->first = index;
    r->last = index + n - 1;
    append_req **tail = &g->appends;
    append_req *prev = NULL;
    while (*tail != NULL) {
        prev = *tail;
        tail = &(*tail)->next;
    }
    r->prev = prev;
    *tail = r;
    int rc = h->cfg.storage.append(h->cfg.storage.ctx, g->id, index, v, n, append_done, r, &err);
    free(v);
    if (rc != 0) {
        *tail = NULL;
        free(r);
        group_fail_refused(g, err.code == ERR_NONE ? ERR_IO : err.code, "storage append refused",
                           &err);
    }
}

static void queue_or_send(group *g, uint64_t to, uint8_t *buf, size_t len)
{
    if (g->tv_pending == 0 && g->out_head == NULL) {
        send_now(g, to, buf, len);
        free(buf);
        return;
    }
    out_msg *m = calloc(1, sizeof *m);
    if (m == NULL) {
        free(buf); /* dropped: Raft retries */
        return;
    }
    m->to = to;
    m->buf = buf;
    m->len = len;
    if (g->out_tail != NULL)
        g->out_tail->next = m;
    else
        g->out_head = m;
    g->out_tail = m;
}

/* An AppendEntries result leaves only with fields C-Raft may have left unset made
 * right: the answer to a stale AppendEntries (receive_in) is a rejection of its index,
 * and no success claims more than this replica has stored (a rejection's last index is a
 * hint, which C-Raft takes from the log, stored or not). */
static void sanitize_result(group *g, struct raft_message *m)
{
    struct raft_append_entries_result *r = &m->append_entries_result;
    bool fixed = false;
    if (g->stale_from != 0 && m->server_id == g->stale_from) {
        fixed = r->rejected != g->stale_rejected || r->last_log_index != g->raft.last_stored;
        r->rejected = g->stale_rejected;
        r->last_log_index = g->raft.last_stored;
    } else if (r->rejected == 0 && r->last_log_index > g->raft.last_stored) {
        r->last_log_index = g->raft.last_stored;
        fixed = true;
    }
    if (fixed)
        g->stale_answers++;
}

static void send_messages(group *g, struct raft_update *up)
{
    raft_host *h = g->h;
    for (unsigned i = 0; i < up->messages.n; i++) {
        struct raft_message *m = &up->messages.batch[i];
        raft_host_entry *v = NULL;
        uint8_t *buf;
        size_t len;
        if (m->type == RAFT_INSTALL_SNAPSHOT && fill_install_snapshot(g, m) != 0)
            continue; /* dropped: the leader retries after install_snapshot_timeout */
        if (m->type == RAFT_APPEND_ENTRIES_RESULT)
            sanitize_result(g, m);
        if (m->type == RAFT_APPEND_ENTRIES && m->append_entries.n_entries > 0) {
            v = log_view(g, m->append_entries.prev_log_index + 1, m->append_entries.n_entries);
            if (v == NULL)
                continue; /* not in memory: dropped, the leader will retry */
        }
        if (raft_msg_encode(g->id, h->cfg.node_id, m, v, &buf, &len, NULL) == 0)
            queue_or_send(g, m->server_id, buf, len);
        if (m->type == RAFT_INSTALL_SNAPSHOT)
            raft_configuration_close(&m->install_snapshot.conf);
        free(v);
    }
}

/* A stored vote with this bit (never set by a node id) marks a replica that joined empty
 * and is not confirmed yet (group.unconfirmed). Storage keeps operations in order, so the
 * entries it appends after the mark restart unconfirmed too, also when there is no
 * snapshot point to carry META_UNCONFIRMED (a log replayed from index 1); a vote
 * written before this bit existed reads as confirmed. */
#define VOTE_UNCONFIRMED (1ull << 63)

static uint64_t stored_vote(const group *g)
{
    return raft_voted_for(&g->raft) | (g->unconfirmed ? VOTE_UNCONFIRMED : 0);
}

/* Writes the current term and vote (with the mark while unconfirmed); messages wait for
 * it (tv_pending). */
static int write_term_vote(group *g, strata_err *err)
{
    raft_host *h = g->h;
    g->tv_pending++;
    if (h->cfg.storage.set_term_vote(h->cfg.storage.ctx, g->id, raft_current_term(&g->raft),
                                     stored_vote(g), tv_done, g, err) != 0) {
        g->tv_pending--;
        return -1;
    }
    return 0;
}

/* This node no longer leads: reads fail (a deposed leader serves none), while submits
 * become orphans, kept until this replica applies their index (resolve_orphans) or for
 * ORPHAN_TIMEOUTS election timeouts: after a leadership transfer, or a step-down with
 * the entries already on the followers, the next leader commits them within a few
 * heartbeats, and their submitters hear of the success instead of an unknown outcome. */
static void stepped_down(group *g)
{
    uint64_t give_up = now_ms(g->h) + ORPHAN_TIMEOUTS * (uint64_t)g->h->cfg.election_timeout_ms;
    for (pending *p = g->submits.head; p != NULL; p = p->next)
        p->give_up_at = give_up;
    list_move_all(&g->orphans, &g->submits);
    fail_reads(g, ERR_UNAVAILABLE, leader_of(g));
}

/* Entry `index` of `term` was committed and applied here (with result res). An orphan at
 * that index learns whether it was its own entry. An orphan above it of a lower term is
 * dead too: every log holding the committed entry has terms >= `term` after it, and every
 * future leader's log holds it, so no entry of a lower term above it can ever commit (the
 * next leader's first entry settles the orphans it did not carry). An orphan below it was
 * skipped by an installed snapshot: its outcome cannot be known. Detached first:
 * callbacks may submit again. */
static void resolve_orphans(group *g, uint64_t index, uint64_t term, const void *res, size_t rlen)
{
    pending_list done = {NULL, NULL}, keep = {NULL, NULL};
    while (g->orphans.head != NULL) {
        pending *p = list_pop(&g->orphans);
        list_push(p->index <= index || p->term < term ? &done : &keep, p);
    }
    g->orphans = keep;
    uint64_t hint = leader_of(g);
    while (done.head != NULL) {
        pending *p = list_pop(&done);
        if (p->index == index && p->term == term)
            finish(p, ERR_NONE, hint, res, rlen);
        else if (p->index >= index)
            finish_not_applied(p, hint);
        else
            finish(p, ERR_UNAVAILABLE, hint, NULL, 0);
    }
}

/* Orphans whose wait is over fail with their outcome unknown. */
static void expire_orphans(group *g, uint64_t now)
{
    pending_list done = {NULL, NULL};
    while (g->orphans.head != NULL && g->orphans.head->give_up_at <= now)
        list_push(&done, list_pop(&g->orphans));
    fail_list(&done, ERR_UNAVAILABLE, leader_of(g));
}

static void process_update(group *g, struct raft_update *up)
{
    strata_err err;

    if (up->flags & (RAFT_UPDATE_CURRENT_TERM | RAFT_UPDATE_VOTED_FOR)) {
        if (write_term_vote(g, &err) != 0) {
            group_fail_refused(g, ERR_IO, "storage refused term/vote", &err);
            return;
        }
    }
    if (up->flags & RAFT_UPDATE_ENTRIES)
        persist_entries(g, up);
    if (up->flags & RAFT_UPDATE_SNAPSHOT)
        install_from_update(g, up);
    if (g->failed)
        return;
    if (up->flags & RAFT_UPDATE_MESSAGES)
        send_messages(g, up);
    if ((up->flags & RAFT_UPDATE_STATE) && raft_state(&g->raft) != RAFT_LEADER)
        stepped_down(g);
}

/* Submits one entry of `type` at the current term; returns its index or 0. */
static uint64_t submit_entry(group *g, enum raft_entry_type type, const void *cmd, size_t len)
{
    struct raft_event ev;
    struct raft_entry e;
    if (raft_state(&g->raft) != RAFT_LEADER)
        return 0;
    uint64_t index = raft_last_index(&g->raft) + 1;
    /* The core asserts batch != NULL; the host copies the entry during the step. */
    void *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return 0;
    if (len)
        memcpy(copy, cmd, len);
    e.term = raft_current_term(&g->raft);
    e.type = type;
    e.buf.base = copy;
    e.buf.len = len;
    e.batch = copy;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_SUBMIT;
    ev.submit.entries = &e;
    ev.submit.n = 1;
    int rc = group_step(g, &ev);
    free(copy);
    return rc == 0 ? index : 0;
}

/*
 * A new leader appends an entry of its term at once (Raft's no-op; C-Raft 0.22 appends
 * its barrier only when the leader holds uncommitted entries). Without it, the entries
 * of older terms that the new leader never had stay in other replicas' logs, unresolved,
 * while the partition is idle: a deposed leader's orphans there learn that their writes
 * were not applied only from an entry at their index, and gave up after ORPHAN_TIMEOUTS
 * with the outcome unknown. Runs after the step that made this replica leader is fully
 * handled (a nested step).
 */
static void open_term(group *g)
{
    if (g->failed || raft_state(&g->raft) != RAFT_LEADER)
        return;
    uint64_t term = raft_current_term(&g->raft);
    if (g->opened_term == term)
        return;
    g->opened_term = term;
    log_entry *last = log_at(g, raft_last_index(&g->raft));
    if (last != NULL && last->term == term)
        return; /* the core's own barrier, or a submit already */
    (void)submit_entry(g, RAFT_BARRIER, NULL, 0);
}

static void maybe_start_barrier(group *g)
{
    if (g->barrier_index != 0 || g->reads_waiting.head == NULL || g->failed)
        return;
    uint64_t term = raft_current_term(&g->raft);
    /* The waiting reads are covered by a barrier submitted after they arrived. */
    g->reads_inflight = g->reads_waiting;
    g->reads_waiting.head = g->reads_waiting.tail = NULL;
    g->barrier_term = term;
    g->barrier_index = (uint64_t)-1; /* busy while submitting */
    uint64_t idx = submit_entry(g, RAFT_BARRIER, NULL, 0);
    if (idx == 0) {
        g->barrier_index = 0;
        fail_list(&g->reads_inflight, ERR_UNAVAILABLE, leader_of(g));
        return;
    }
    if (g->barrier_index == (uint64_t)-1)
        g->barrier_index = idx;
    for (pending *p = g->reads_inflight.head; p != NULL; p = p->next) {
        p->index = idx;
        p->term = term;
    }
}

/* ---- reads without a log entry: leadership checks (raft_host_read_index) ----
 *
 * Raft's "read index": a leader that has committed an entry of its term knows every
 * committed entry (Raft's leader completeness), so its commit index when a read arrives
 * covers every write acknowledged before. If a majority of voters then answers a check
 * sent after that moment with the leader's own term, no newer leader had been elected
 * when the check went out: any node in both that majority and a newer leader's voters
 * answered before it voted. So the read may return the state at any applied index at or
 * above that commit index. It costs one message to and from each follower, batched for
 * all the reads that arrive while a check is out, and no log entry, write or fsync. */

static bool is_voter(const struct raft_server *sv)
{
    return sv->role == RAFT_VOTER;
}

/* The conditions of the argument above, and a voter set small enough for ri_acks. */
static bool ri_usable(group *g)
{
    if (raft_state(&g->raft) != RAFT_LEADER || g->raft.configuration_uncommitted_index != 0)
        return false;
    uint64_t commit = raft_commit_index(&g->raft);
    const log_entry *le = log_at(g, commit);
    uint64_t term = le != NULL ? le->term : commit == g->snap_index ? g->snap_term : 0;
    if (term != raft_current_term(&g->raft))
        return false;
    unsigned voters = 0;
    for (unsigned i = 0; i < g->raft.configuration.n; i++)
        voters += is_voter(&g->raft.configuration.servers[i]);
    return voters > 0 && voters <= RI_VOTERS_MAX;
}

static uint64_t ri_acked(const group *g, uint64_t id)
{
    for (unsigned i = 0; i < g->ri_nacks; i++)
        if (g->ri_acks[i].id == id)
            return g->ri_acks[i].round;
    return 0;
}

static void ri_ack(group *g, uint64_t id, uint64_t round)
{
    for (unsigned i = 0; i < g->ri_nacks; i++)
        if (g->ri_acks[i].id == id) {
            if (round > g->ri_acks[i].round)
                g->ri_acks[i].round = round;
            return;
        }
    if (g->ri_nacks < RI_VOTERS_MAX) {
        g->ri_acks[g->ri_nacks].id = id;
        g->ri_acks[g->ri_nacks].round = round;
        g->ri_nacks++;
    }
}

/* Completes the confirmed reads whose read index is applied (in index order). */
static void ri_applied(group *g)
{
    while (g->ri_applying.head != NULL && g->ri_applying.head->index <= g->applied)
        finish(list_pop(&g->ri_applying), ERR_NONE, g->h->cfg.node_id, NULL, 0);
}

static void ri_send_round(group *g);

/* The reads a confirmed round covers go on to wait for their index to be applied; then
 * the next round goes out if reads came meanwhile. */
static void ri_release(group *g)
{
    g->ri_releasing = true;
    while (g->ri_waiting.head != NULL && g->ri_waiting.head->round <= g->ri_confirmed)
        list_push(&g->ri_applying, list_pop(&g->ri_waiting));
    ri_applied(g);
    g->ri_releasing = false;
    if (g->ri_waiting.head != NULL && g->ri_sent <= g->ri_confirmed && !g->failed &&
        raft_state(&g->raft) == RAFT_LEADER)
        ri_send_round(g);
}

/* The highest round a majority of voters has answered (the leader answers every round it
 * sends); reads up to it are released. */
static void ri_advance(group *g)
{
    if (g->ri_term != raft_current_term(&g->raft) || raft_state(&g->raft) != RAFT_LEADER)
        return;
    /* Answers are counted in the configuration the round was sent under; after a change
     * only those to the next round (a retry) and later ones are (ri_conf_from). */
    if (g->raft.configuration_uncommitted_index != 0 ||
        g->raft.configuration_committed_index != g->ri_conf)
        return;
    uint64_t rounds[RI_VOTERS_MAX];
    unsigned n = 0;
    const struct raft_configuration *c = &g->raft.configuration;
    for (unsigned i = 0; i < c->n; i++) {
        if (!is_voter(&c->servers[i]))
            continue;
        if (n == RI_VOTERS_MAX)
            return; /* not usable: the reads waiting fail with the leadership */
        uint64_t id = c->servers[i].id;
        rounds[n++] = id == g->h->cfg.node_id ? g->ri_sent : ri_acked(g, id);
    }
    if (n == 0)
        return;
    /* Sorted high to low, the (n/2+1)-th is the highest round a majority has reached. */
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && rounds[j] > rounds[j - 1]; j--) {
            uint64_t t = rounds[j];
            rounds[j] = rounds[j - 1];
            rounds[j - 1] = t;
        }
    uint64_t reached = rounds[n / 2];
    if (reached <= g->ri_confirmed)
        return;
    g->ri_confirmed = reached;
    ri_release(g);
}

/* Sends the next round to every other voter. */
static void ri_send_round(group *g)
{
    raft_host *h = g->h;
    uint64_t term = raft_current_term(&g->raft);
    assert(g->ri_term == term);
    g->ri_sent++;
    g->ri_sent_at = now_ms(h);
    if (g->ri_conf_from == 0 || g->raft.configuration_committed_index != g->ri_conf) {
        g->ri_conf = g->raft.configuration_committed_index;
        g->ri_conf_from = g->ri_sent;
        g->ri_nacks = 0;
    }
    raft_host_check chk = {.result = false, .term = term, .seq = g->ri_sent};
    const struct raft_configuration *c = &g->raft.configuration;
    for (unsigned i = 0; i < c->n; i++) {
        const struct raft_server *sv = &c->servers[i];
        uint8_t *buf;
        size_t len;
        if (!is_voter(sv) || sv->id == h->cfg.node_id)
            continue;
        if (raft_msg_encode_check(g->id, h->cfg.node_id, &chk, &buf, &len, NULL) == 0)
            queue_or_send(g, sv->id, buf, len); /* a lost one: the round is sent again */
    }
    g->deadline = group_deadline(g);
    rearm(h, g->deadline);
    ri_advance(g); /* a group of one voter */
}

/* A round unanswered for a heartbeat timeout (a message lost, a follower slow) is sent
 * again as a new round, which covers the reads of the old one too. */
static uint64_t ri_retry_at(const group *g)
{
    if (g->ri_sent <= g->ri_confirmed || g->ri_waiting.head == NULL)
        return 0;
    return g->ri_sent_at + g->h->cfg.heartbeat_timeout_ms;
}

static void ri_retry(group *g, uint64_t now)
{
    uint64_t at = ri_retry_at(g);
    if (at != 0 && at <= now && raft_state(&g->raft) == RAFT_LEADER)
        ri_send_round(g);
}

/* A check from the leader of `c->term` (answered with this replica's term, after any
 * term write in flight: queue_or_send keeps the order), or an answer to one of ours. */
static void ri_receive(group *g, uint64_t from, const raft_host_check *c)
{
    uint64_t term = raft_current_term(&g->raft);
    if (!c->result) {
        raft_host_check r = {.result = true, .term = term, .seq = c->seq, .ok = term == c->term};
        uint8_t *buf;
        size_t len;
        if (raft_msg_encode_check(g->id, g->h->cfg.node_id, &r, &buf, &len, NULL) == 0)
            queue_or_send(g, from, buf, len);
        return;
    }
    if (!c->ok || c->term != term || g->ri_term != term || c->seq > g->ri_sent ||
        c->seq < g->ri_conf_from || raft_state(&g->raft) != RAFT_LEADER)
        return; /* stale, or this leader is deposed: its core learns that from Raft */
    ri_ack(g, from, c->seq);
    ri_advance(g);
}

static int conf_decode(const uint8_t *bytes, size_t len, struct raft_configuration *out);

/* A configuration entry at `index` is applied here: its voters become the ones in force,
 * the previous ones are remembered. */
static void track_voters(group *g, uint64_t index, const log_entry *le)
{
    struct raft_configuration c;
    g->prev_known = g->conf_index != 0 && g->cur_known;
    memcpy(g->prev_voters, g->cur_voters, sizeof g->prev_voters);
    g->n_prev_voters = g->n_cur_voters;
    g->conf_index = index;
    g->cur_known = conf_decode(le->data, le->len, &c) == 0;
    g->n_cur_voters = 0;
    for (unsigned i = 0; g->cur_known && i < c.n; i++) {
        if (c.servers[i].role != RAFT_VOTER)
            continue;
        if (g->n_cur_voters == TRACKED_VOTERS)
            g->cur_known = false;
        else
            g->cur_voters[g->n_cur_voters++] = c.servers[i].id;
    }
    raft_configuration_close(&c);
}

/* At start: the configuration entries the state machine already holds are not applied
 * again, so their voters are taken from the log (those still in it): a restarted leader
 * then knows whom the configuration in force promoted, as one that never stopped does. */
static void track_voters_from_log(group *g)
{
    uint64_t last = g->log_first + g->log_n;
    for (uint64_t i = g->log_first; i < last && i <= g->applied; i++) {
        log_entry *le = log_at(g, i);
        if (le->type == RAFT_CHANGE)
            track_voters(g, i, le);
    }
}

/* The RAFT_CHANGE entry at `index` is committed and durable here: if it is the core's
 * pending configuration, tell the core (it then counts it committed, and a leader that
 * is no longer a voter in it steps down). Any other configuration entry is already
 * superseded (a later one is pending): the core would ignore it. */
static void conf_committed(group *g, uint64_t index, const log_entry *le)
{
    if (g->failed || g->raft.configuration_uncommitted_index != index)
        return;
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_CONFIGURATION;
    ev.configuration.index = index;
    if (conf_decode(le->data, le->len, &ev.configuration.conf) != 0) {
        group_fail(g, ERR_CORRUPT, "bad configuration entry");
        return;
    }
    group_step(g, &ev); /* the core takes the configuration over */
}

/* The core's pending configuration may be at or below the applied index: restored from
 * the log at start (the core cannot know it was committed) while the state machine was
 * already past it, or received again after an install ahead of the log. Entries there
 * are not applied again, so the commit is reported here once it is known. */
static void conf_catch_up(group *g, uint64_t limit)
{
    uint64_t u = g->raft.configuration_uncommitted_index;
    if (u == 0 || u > g->applied || u > limit)
        return;
    log_entry *le = log_at(g, u);
    if (le != NULL && le->type == RAFT_CHANGE) {
        log_entry copy = *le;
        conf_committed(g, u, &copy);
    }
}

static int apply_one(group *g, uint64_t index, log_entry *le)
{
    raft_host *h = g->h;
    void *res = NULL;
    size_t rlen = 0;

    if (le->type == RAFT_COMMAND && index > g->applied) {
        int rc = h->cfg.fsm.apply(h->cfg.fsm.ctx, g->id, index, le->data, le->len, &res, &rlen);
        if (rc == RAFT_HOST_APPLY_BUSY) {
            /* Not applied: keep the entry and wait for raft_host_apply_resume. */
            free(res);
            g->apply_blocked = true;
            return -1;
        }
        if (rc != 0) {
            free(res);
            group_fail(g, ERR_INTERNAL, "state machine apply failed");
            return -1;
        }
    }
    if (index > g->applied)
        g->applied = index;

    /* The submitters waiting here (the entry's own, or earlier ones whose entries were
     * replaced), detached first: a committed configuration may depose this leader, which
     * fails the ops still listed, and the change's own submitter must hear of success. */
    pending_list here = {NULL, NULL};
    while (g->submits.head != NULL && g->submits.head->index <= index)
        list_push(&here, list_pop(&g->submits));
    if (le->type == RAFT_CHANGE) {
        track_voters(g, index, le);
        conf_committed(g, index, le);
    }
    uint64_t hint = leader_of(g);
    while (here.head != NULL) {
        pending *p = here.head;
        here.head = p->next;
        if (p->index == index && p->term == le->term)
            finish(p, ERR_NONE, h->cfg.node_id, res, rlen);
        else if (p->index == index)
            finish_not_applied(p, hint);
        else
            finish(p, ERR_UNAVAILABLE, hint, NULL, 0);
    }
    if (g->orphans.head != NULL)
        resolve_orphans(g, index, le->term, res, rlen);
    free(res);

    if (le->type == RAFT_BARRIER && g->barrier_index == index) {
        strata_code code = le->term == g->barrier_term ? ERR_NONE : ERR_UNAVAILABLE;
        g->barrier_index = 0;
        pending_list done = g->reads_inflight;
        g->reads_inflight.head = g->reads_inflight.tail = NULL;
        fail_list(&done, code, leader_of(g));
        maybe_start_barrier(g);
    }
    ri_applied(g);
    return 0;
}

static void apply_committed(group *g)
{
    if (g->applying || g->failed || g->apply_blocked || g->installing)
        return;
    g->applying = true;
    for (;;) {
        uint64_t limit = raft_commit_index(&g->raft);
        if (limit > g->raft.last_stored)
            limit = g->raft.last_stored;
        conf_catch_up(g, limit);
        uint64_t next = g->applied + 1;
        /* Entries at or below the restart point are already in the state machine. */
        if (next > limit || g->failed)
            break;
        log_entry *le = log_at(g, next);
        if (le == NULL) {
            group_fail(g, ERR_INTERNAL, "committed entry missing from the log");
            break;
        }
        log_entry copy = *le; /* the log may grow (realloc) while applying */
        if (apply_one(g, next, &copy) != 0)
            break;
    }
    g->applying = false;
}

/* ---- snapshots: compaction points and out-of-band installs ---- */

/* The configuration in `bytes` (C-Raft's encoding, as in RAFT_CHANGE entries), decoded
 * with C-Raft's allocator. The decoder runs strlen() over addresses without a bound:
 * give it a zero-padded copy. */
static int conf_decode(const uint8_t *bytes, size_t len, struct raft_configuration *out)
{
    raft_configuration_init(out);
    if (len == 0 || len > 1 << 20)
        return -1;
    uint8_t *copy = calloc(1, len + 64);
    if (copy == NULL)
        return -1;
    memcpy(copy, bytes, len);
    struct raft_buffer b = {copy, len};
    int rv = raft_configuration_decode(&b, out);
    free(copy);
    if (rv != 0 || out->n == 0) {
        if (rv == 0)
            raft_configuration_close(out);
        raft_configuration_init(out);
        return -1;
    }
    return 0;
}

/* *out (malloc'd) = the encoded configuration. */
static int conf_encode(const struct raft_configuration *c, uint8_t **out, size_t *len)
{
    struct raft_buffer b;
    if (raft_configuration_encode(c, &b) != 0)
        return -1;
    *out = malloc(b.len ? b.len : 1);
    if (*out != NULL)
        memcpy(*out, b.base, b.len);
    *len = b.len;
    raft_free(b.base);
    return *out == NULL ? -1 : 0;
}

/* Snapshot metadata as storage keeps it (opaque there): the configuration index as 8
 * little-endian bytes, then the encoded configuration. The index's top bit (never set by
 * a real index) marks a point installed by an unconfirmed replica (group.unconfirmed), so
 * that it restarts unconfirmed; points written before this bit existed read as
 * confirmed. */
#define META_UNCONFIRMED (1ull << 63)

static uint8_t *meta_encode(uint64_t conf_index, const uint8_t *conf, size_t conf_len, size_t *len)
{
    uint8_t *m = malloc(8 + conf_len);
    if (m == NULL)
        return NULL;
    for (int i = 0; i < 8; i++)
        m[i] = (uint8_t)(conf_index >> (8 * i));
    memcpy(m + 8, conf, conf_len);
    *len = 8 + conf_len;
    return m;
}

static int meta_decode(const uint8_t *m, size_t len, uint64_t *conf_index,
                       struct raft_configuration *conf)
{
    if (m == NULL || len <= 8)
        return -1;
    uint64_t ci = 0;
    for (int i = 0; i < 8; i++)
        ci |= (uint64_t)m[i] << (8 * i);
    *conf_index = ci;
    return conf_decode(m + 8, len - 8, conf);
}

/* Replaces the group's snapshot point; `conf` (malloc'd) is taken over. */
static void set_snap_point(group *g, uint64_t index, uint64_t term, uint64_t conf_index,
                           uint8_t *conf, size_t conf_len)
{
    free(g->snap_conf);
    g->snap_index = index;
    g->snap_term = term;
    g->snap_conf_index = conf_index;
    g->snap_conf = conf;
    g->snap_conf_len = conf_len;
}

/* The configuration in force at `index` (<= applied): the last RAFT_CHANGE entry at or
 * below it still in the log above the snapshot point, else the snapshot's. The bytes
 * stay owned by the log / the group. */
static int conf_at(group *g, uint64_t index, uint64_t *conf_index, const uint8_t **conf,
                   size_t *len)
{
    uint64_t low = g->snap_index + 1 > g->log_first ? g->snap_index + 1 : g->log_first;
    for (uint64_t i = index; i >= low && i > 0; i--) {
        log_entry *le = log_at(g, i);
        if (le != NULL && le->type == RAFT_CHANGE) {
            *conf_index = i;
            *conf = le->data;
            *len = le->len;
            return 0;
        }
    }
    if (g->snap_conf == NULL)
        return -1;
    *conf_index = g->snap_conf_index;
    *conf = g->snap_conf;
    *len = g->snap_conf_len;
    return 0;
}

/* Forgets the in-memory entries below keep_from. */
static void log_drop_prefix(group *g, uint64_t keep_from)
{
    if (keep_from <= g->log_first)
        return;
    size_t drop = (size_t)(keep_from - g->log_first);
    if (drop > g->log_n)
        drop = g->log_n;
    memmove(g->log, g->log + drop, (g->log_n - drop) * sizeof *g->log);
    g->log_n -= drop;
    g->log_first += drop;
    log_free_chunks_below(g, g->log_first);
}

static void snap_write_done(void *data, int status)
{
    group *g = data;
    raft_host *h = g->h;
    assert(g->snap_writes > 0);
    g->snap_writes--;
    if (g->stopped) {
        zombie_reap(g);
        return;
    }
    if (status != 0) {
        h->depth++;
        group_fail(g, ERR_IO, "snapshot point write failed");
        h->depth--;
    }
}

static int write_snap_point(group *g, const raft_host_snapshot *sp, raft_storage_cb cb,
                            strata_err *err)
{
    raft_host *h = g->h;
    g->snap_writes++;
    if (h->cfg.storage.set_snapshot(h->cfg.storage.ctx, g->id, sp, cb, g, err) != 0) {
        g->snap_writes--;
        return -1;
    }
    return 0;
}

static int compact_at(group *g, uint64_t index, unsigned trailing, strata_err *err);

static int compact_in(raft_host *h, uint64_t group_id, uint64_t index, unsigned trailing,
                      strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
    if (h->cfg.storage.set_snapshot == NULL)
        return strata_err_set(err, ERR_VALIDATION, "storage has no set_snapshot");
    if (g->failed || g->installing)
        return strata_err_set(err, ERR_UNAVAILABLE, "group %" PRIu64 " %s", group_id,
                              g->failed ? "stopped" : "is installing a snapshot");
    if (g->applying)
        return strata_err_set(err, ERR_VALIDATION, "raft_host_compact called from apply()");
    if (index > g->applied)
        return strata_err_set(err, ERR_VALIDATION,
                              "compaction index %" PRIu64 " above applied %" PRIu64, index,
                              g->applied);
    /* After an install the state machine may be ahead of the log (a live source): the
     * point must be an entry this replica holds, committed and durable. */
    if (index > raft_commit_index(&g->raft))
        index = raft_commit_index(&g->raft);
    if (index > g->raft.last_stored)
        index = g->raft.last_stored;
    if (index <= g->snap_index || log_at(g, index) == NULL)
        return 0;
    return compact_at(g, index, trailing, err);
}

/* Records the compaction point `index` (in the log, above the last point): the core
 * forgets the same entries as the host (both keep `trailing` below the point). */
static int compact_at(group *g, uint64_t index, unsigned trailing, strata_err *err)
{
    log_entry *le = log_at(g, index);
    uint64_t conf_index;
    const uint8_t *cb;
    size_t clen;
    if (le == NULL || conf_at(g, index, &conf_index, &cb, &clen) != 0)
        return strata_err_set(err, ERR_INTERNAL, "compaction index %" PRIu64 " not in the log",
                              index);
    uint64_t term = le->term;
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    uint8_t *conf = malloc(clen ? clen : 1);
    size_t mlen = 0;
    uint8_t *meta =
        meta_encode(conf_index | (g->unconfirmed ? META_UNCONFIRMED : 0), cb, clen, &mlen);
    if (conf == NULL || meta == NULL ||
        conf_decode(cb, clen, &ev.snapshot.metadata.configuration)) {
        free(conf);
        free(meta);
        return strata_err_set(err, ERR_NOMEM, "compaction");
    }
    memcpy(conf, cb, clen);
    uint64_t keep_from = index > trailing ? index - trailing + 1 : 1;
    ev.type = RAFT_SNAPSHOT;
    ev.snapshot.metadata.index = index;
    ev.snapshot.metadata.term = term;
    ev.snapshot.metadata.configuration_index = conf_index;
    ev.snapshot.trailing = trailing;
    if (group_step(g, &ev) != 0) {
        free(conf);
        free(meta);
        return strata_err_set(err, ERR_UNAVAILABLE, "group %" PRIu64 " stopped", g->id);
    }
    set_snap_point(g, index, term, conf_index, conf, clen);
    g->snap_marked = g->unconfirmed;
    if (keep_from > g->log_first)
        log_drop_prefix(g, keep_from);
    raft_host_snapshot sp = {.index = index,
                             .term = term,
                             .keep_from = keep_from,
                             .replace_log = false,
                             .meta = meta,
                             .meta_len = mlen};
    int rc = write_snap_point(g, &sp, snap_write_done, err);
    free(meta);
    if (rc != 0) {
        group_fail_refused(g, ERR_IO, "storage refused the snapshot point", err);
        return -1;
    }
    return 0;
}

static uint64_t group_deadline(const group *g)
{
    uint64_t d = raft_timeout((struct raft *)&g->raft);
    if (d != 0 && g->hold_until > d && g->unconfirmed &&
        raft_state((struct raft *)&g->raft) == RAFT_FOLLOWER)
        d = g->hold_until; /* a swallowed election timeout (tick_in) */
    if (g->install_retry_at != 0 && (d == 0 || g->install_retry_at < d))
        d = g->install_retry_at;
    uint64_t ri = ri_retry_at(g);
    if (ri != 0 && (d == 0 || ri < d))
        d = ri;
    if (g->orphans.head != NULL && (d == 0 || g->orphans.head->give_up_at < d))
        d = g->orphans.head->give_up_at;
    return d;
}

/* Asks the state machine to copy the snapshot's state out of band (a new token each
 * attempt, so a late completion of an abandoned attempt is recognised). */
static void install_call(group *g)
{
    raft_host *h = g->h;
    g->install_retry_at = 0;
    /* A replica that restarted with its engine ahead of its log (the log lost what the
     * engine had made durable) may already hold the snapshot's state: no copy then. */
    if (g->applied >= g->inst.index) {
        install_adopt(g, g->applied, NULL);
        return;
    }
    g->install_token = ++h->next_token;
    uint64_t from = leader_of(g) != 0 ? leader_of(g) : g->install_from;
    if (h->cfg.fsm.install(h->cfg.fsm.ctx, g->id, g->inst.index, g->inst.term, from,
                           g->install_token) != 0) {
        g->install_token = 0;
        g->install_retry_at = now_ms(h) + h->cfg.election_timeout_ms;
    }
}

/* RAFT_UPDATE_SNAPSHOT: the core dropped its log for the leader's snapshot point and
 * waits for RAFT_PERSISTED_SNAPSHOT. The host's log goes too; in-flight appends are
 * obsolete (the core ignores their completions while installing, but must not see
 * them afterwards either). */
static void install_from_update(group *g, struct raft_update *up)
{
    if (up->snapshot.chunk.base != NULL)
        raft_free(up->snapshot.chunk.base);
    g->inst = up->snapshot.metadata;
    g->installing = true;
    g->install_begin = true;
    g->install_from = leader_of(g);
    g->apply_blocked = false; /* the refused entry is superseded by the snapshot */
    for (append_req *r = g->appends; r != NULL; r = r->next)
        r->last = 0;
    g->deferred_persisted = 0;
    log_truncate(g, 0);
    g->log_first = g->inst.index + 1;
    log_free_chunks_below(g, g->log_first);
    if (conf_encode(&g->inst.configuration, &g->inst_conf, &g->inst_conf_len) != 0)
        group_fail(g, ERR_NOMEM, "snapshot configuration");
}

static void install_persisted(void *data, int status)
{
    group *g = data;
    raft_host *h = g->h;
    assert(g->snap_writes > 0);
    g->snap_writes--;
    if (g->stopped) {
        zombie_reap(g);
        return;
    }
    if (g->failed)
        return;
    h->depth++;
    if (status != 0) {
        group_fail(g, ERR_IO, "snapshot point write failed");
        h->depth--;
        return;
    }
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_PERSISTED_SNAPSHOT;
    ev.persisted_snapshot.metadata = g->inst; /* the core takes the configuration */
    ev.persisted_snapshot.offset = 0;
    ev.persisted_snapshot.last = true;
    raft_configuration_init(&g->inst.configuration);
    set_snap_point(g, g->inst.index, g->inst.term, g->inst.configuration_index, g->inst_conf,
                   g->inst_conf_len);
    g->inst_conf = NULL;
    g->installing = false;
    g->installs++;
    if (g->install_applied > g->applied)
        g->applied = g->install_applied;
    if (group_step(g, &ev) != 0)
        raft_configuration_close(&ev.persisted_snapshot.metadata.configuration);
    h->depth--;
}

static int snapshot_installed_in(raft_host *h, uint64_t token, int status, uint64_t applied,
                                 strata_err *err)
{
    group *g = NULL;
    for (size_t i = 0; token != 0 && g == NULL && i < h->nslots; i++)
        if (h->slots[i] != NULL && h->slots[i]->installing && !h->slots[i]->failed &&
            h->slots[i]->install_token == token)
            g = h->slots[i];
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no snapshot install with token %" PRIu64, token);
    g->install_token = 0;
    if (status != 0) {
        g->install_retry_at = now_ms(h) + h->cfg.election_timeout_ms;
        g->deadline = group_deadline(g);
        rearm(h, g->deadline);
        return 0;
    }
    return install_adopt(g, applied, err);
}

/* The state machine holds the snapshot's state (copied, or already there): record the
 * point durably, then tell the core (install_persisted). */
static int install_adopt(group *g, uint64_t applied, strata_err *err)
{
    g->install_applied = applied > g->inst.index ? applied : g->inst.index;
    size_t mlen = 0;
    uint64_t ci = g->inst.configuration_index | (g->unconfirmed ? META_UNCONFIRMED : 0);
    g->snap_marked = g->unconfirmed;
    uint8_t *meta = meta_encode(ci, g->inst_conf, g->inst_conf_len, &mlen);
    if (meta == NULL) {
        group_fail(g, ERR_NOMEM, "snapshot point");
        return strata_err_set(err, ERR_NOMEM, "snapshot point");
    }
    raft_host_snapshot sp = {.index = g->inst.index,
                             .term = g->inst.term,
                             .keep_from = g->inst.index + 1,
                             .replace_log = true,
                             .meta = meta,
                             .meta_len = mlen};
    strata_err serr;
    int rc = write_snap_point(g, &sp, install_persisted, &serr);
    free(meta);
    if (rc != 0) {
        group_fail_refused(g, ERR_IO, "storage refused the snapshot point", &serr);
        if (err != NULL)
            *err = serr;
        return -1;
    }
    return 0;
}

/* Fills an outgoing InstallSnapshot: the core sets the point; the configuration comes
 * from the group's snapshot point (the data moves out of band). */
static int fill_install_snapshot(group *g, struct raft_message *m)
{
    struct raft_install_snapshot *a = &m->install_snapshot;
    if (g->snap_conf == NULL || a->last_index != g->snap_index)
        return -1;
    if (conf_decode(g->snap_conf, g->snap_conf_len, &a->conf) != 0)
        return -1;
    a->conf_index = g->snap_conf_index;
    a->data.base = NULL;
    a->data.len = 0;
    return 0;
}

/* ---- public API ---- */

raft_host *raft_host_create(const raft_host_config *cfg, strata_err *err)
{
    if (cfg->node_id == 0 || cfg->storage.load == NULL || cfg->storage.set_term_vote == NULL ||
        cfg->storage.append == NULL || cfg->transport.send == NULL || cfg->clock.now == NULL ||
        cfg->clock.arm == NULL || cfg->fsm.apply == NULL) {
        strata_err_set(err, ERR_VALIDATION, "raft host: node id and interfaces are required");
        return NULL;
    }
    raft_host *h = calloc(1, sizeof *h);
    if (h == NULL) {
        strata_err_set(err, ERR_NOMEM, "raft host");
        return NULL;
    }
    h->cfg = *cfg;
    const char *trace = getenv("LIBRAFT_TRACE");
    h->trace = trace != NULL && trace[0] != '\0';
    if (h->cfg.election_timeout_ms == 0)
        h->cfg.election_timeout_ms = 1000;
    if (h->cfg.heartbeat_timeout_ms == 0)
        h->cfg.heartbeat_timeout_ms = 100;
    if (h->cfg.snapshot_trailing == 0)
        h->cfg.snapshot_trailing = 128;
    if (h->cfg.install_snapshot_timeout_ms == 0)
        h->cfg.install_snapshot_timeout_ms = 30000;
    if (h->cfg.heartbeat_timeout_ms >= h->cfg.election_timeout_ms) {
        free(h);
        strata_err_set(err, ERR_VALIDATION, "heartbeat timeout must be below election timeout");
        return NULL;
    }
    h->nslots = 16;
    h->slots = calloc(h->nslots, sizeof *h->slots);
    if (h->slots == NULL) {
        free(h);
        strata_err_set(err, ERR_NOMEM, "raft host");
        return NULL;
    }
    h->armed = UINT64_MAX;
    return h;
}

/* Frees everything of g but the shell that storage completions still in flight point to
 * (the struct and its append_req list). Pending ops fail with ERR_UNAVAILABLE. */
static void group_release(group *g)
{
    g->failed = true; /* no more steps, even from the callbacks fired below */
    g->deadline = 0;
    fail_all_ops(g, ERR_UNAVAILABLE);
    transfer_end(g, ERR_UNAVAILABLE);
    while (g->out_head != NULL) {
        out_msg *m = g->out_head;
        g->out_head = m->next;
        free(m->buf);
        free(m);
    }
    g->out_tail = NULL;
    log_free(g);
    if (g->installing)
        raft_configuration_close(&g->inst.configuration);
    g->installing = false;
    g->install_token = 0;
    free(g->inst_conf);
    g->inst_conf = NULL;
    free(g->snap_conf);
    g->snap_conf = NULL;
    raft_close(&g->raft, NULL);
}

static void group_free_shell(group *g)
{
    while (g->appends != NULL) {
        append_req *r = g->appends;
        g->appends = r->next;
        free(r);
    }
    free(g);
}

/* A stopped group is freed once no storage completion can reach it any more. */
static void zombie_reap(group *g)
{
    if (g->tv_pending > 0 || g->appends != NULL || g->snap_writes > 0)
        return;
    raft_host *h = g->h;
    for (group **z = &h->zombies; *z != NULL; z = &(*z)->next_zombie)
        if (*z == g) {
            *z = g->next_zombie;
            break;
        }
    free(g);
}

void raft_host_destroy(raft_host *h)
{
    if (h == NULL)
        return;
    h->depth++;
    for (size_t i = 0; i < h->nslots; i++)
        if (h->slots[i] != NULL)
            h->slots[i]->failed = true; /* no more steps from callbacks */
    for (size_t i = 0; i < h->nslots; i++)
        if (h->slots[i] != NULL) {
            group_release(h->slots[i]);
            group_free_shell(h->slots[i]);
        }
    /* Storage callbacks never fire after destroy (see raft_host.h): free the shells. */
    while (h->zombies != NULL) {
        group *z = h->zombies;
        h->zombies = z->next_zombie;
        group_free_shell(z);
    }
    free(h->slots);
    free(h);
}

int raft_host_stop_group(raft_host *h, uint64_t group_id, strata_err *err)
{
    if (h->depth > 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "raft_host_stop_group called from inside a host callback");
    group *g = find_group(h, group_id);
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
    /* Out of the table first: a callback fired below that submits again gets NOT_FOUND,
     * and a new group with the same id may start at once. */
    remove_group(h, g);
    g->stopped = true;
    g->next_zombie = h->zombies;
    h->zombies = g;
    h->depth++;
    group_release(g);
    h->depth--;
    zombie_reap(g);
    return 0;
}

void raft_host_apply_resume(raft_host *h, uint64_t group_id)
{
    group *g = find_group(h, group_id);
    if (g == NULL || !g->apply_blocked)
        return;
    g->apply_blocked = false;
    h->depth++;
    apply_committed(g);
    h->depth--;
}

static void noop_cb(void *data, int status)
{
    (void)data;
    (void)status;
}

static void release_loaded(raft_host *h, raft_host_loaded *ld)
{
    if (h->cfg.storage.release != NULL)
        h->cfg.storage.release(h->cfg.storage.ctx, ld);
    else
        free(ld->entries);
}

/* A stored snapshot point: the group's, and the core's RAFT_START metadata. The state
 * machine must hold at least what the log no longer does. */
static int load_snapshot_point(group *g, const raft_host_loaded *ld, uint64_t applied,
                               struct raft_snapshot_metadata *m, strata_err *err)
{
    uint64_t ci = 0;
    if (ld->start_index == 0 || ld->start_index > ld->snapshot_index + 1 ||
        ld->snapshot_term == 0 ||
        meta_decode(ld->snapshot_meta, ld->snapshot_meta_len, &ci, &m->configuration) != 0)
        return strata_err_set(err, ERR_CORRUPT, "group %" PRIu64 ": bad snapshot point", g->id);
    uint8_t *conf = malloc(ld->snapshot_meta_len - 8);
    if (conf == NULL || applied + 1 < ld->start_index) {
        free(conf);
        raft_configuration_close(&m->configuration);
        if (conf == NULL)
            return strata_err_set(err, ERR_NOMEM, "snapshot point");
        return strata_err_set(err, ERR_VALIDATION,
                              "group %" PRIu64 ": the state machine is at %" PRIu64
                              " but the log starts at %" PRIu64 " (snapshot %" PRIu64 ")",
                              g->id, applied, ld->start_index, ld->snapshot_index);
    }
    memcpy(conf, (const uint8_t *)ld->snapshot_meta + 8, ld->snapshot_meta_len - 8);
    g->snap_marked = (ci & META_UNCONFIRMED) != 0;
    ci &= ~META_UNCONFIRMED;
    set_snap_point(g, ld->snapshot_index, ld->snapshot_term, ci, conf, ld->snapshot_meta_len - 8);
    m->index = ld->snapshot_index;
    m->term = ld->snapshot_term;
    m->configuration_index = ci;
    return 0;
}

/* Writes the bootstrap state of a new replica: term 1 and the configuration at index 1. */
static int bootstrap(raft_host *h, group *g, const uint64_t *members, size_t n,
                     struct raft_buffer *conf_buf, strata_err *err)
{
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (size_t i = 0; i < n; i++) {
        char addr[24];
        snprintf(addr, sizeof addr, "%" PRIu64, members[i]);
        if (members[i] == 0 || raft_configuration_add(&conf, members[i], addr, RAFT_VOTER) != 0) {
            raft_configuration_close(&conf);
            return strata_err_set(err, ERR_VALIDATION, "bad or duplicate member %" PRIu64,
                                  members[i]);
        }
    }
    int rv = raft_configuration_encode(&conf, conf_buf);
    raft_configuration_close(&conf);
    if (rv != 0)
        return strata_err_set(err, ERR_NOMEM, "configuration encode");
    raft_host_entry e = {1, RAFT_CHANGE, conf_buf->base, conf_buf->len};
    /* Durability of these two is not awaited: a crash before they are synced leaves no
     * state, and the same bootstrap is simply written again. */
    if (h->cfg.storage.set_term_vote(h->cfg.storage.ctx, g->id, 1, 0, noop_cb, NULL, err) != 0 ||
        h->cfg.storage.append(h->cfg.storage.ctx, g->id, 1, &e, 1, noop_cb, NULL, err) != 0) {
        raft_free(conf_buf->base);
        return -1;
    }
    return 0;
}

/* members == NULL: a joining replica (raft_host_join_group), never bootstrapped here. */
static int start_group_in(raft_host *h, uint64_t group_id, const uint64_t *members, size_t n,
                          uint64_t applied_index, strata_err *err)
{
    bool join = members == NULL, member = false;
    for (size_t i = 0; i < n; i++)
        member |= members[i] == h->cfg.node_id;
    if (!join && (n == 0 || !member))
        return strata_err_set(err, ERR_VALIDATION, "group %" PRIu64 ": this node must be a member",
                              group_id);
    if (find_group(h, group_id) != NULL)
        return strata_err_set(err, ERR_VALIDATION, "group %" PRIu64 " already started", group_id);

    group *g = calloc(1, sizeof *g);
    if (g == NULL)
        return strata_err_set(err, ERR_NOMEM, "raft group");
    g->h = h;
    g->id = group_id;
    g->applied = applied_index;
    char addr[24];
    snprintf(addr, sizeof addr, "%" PRIu64, h->cfg.node_id);
    if (raft_init(&g->raft, NULL, NULL, h->cfg.node_id, addr) != 0) {
        free(g);
        return strata_err_set(err, ERR_NOMEM, "raft_init");
    }
    /* C-Raft formats every trace message (snprintf into a static buffer) whenever a
     * tracer is set, enabled or not: about 4% of a follower's CPU under a write load. No
     * tracer, no formatting; LIBRAFT_TRACE=1 keeps C-Raft's own stderr tracing. */
    if (!h->trace)
        g->raft.tracer = NULL;
    raft_set_election_timeout(&g->raft, h->cfg.election_timeout_ms);
    raft_set_heartbeat_timeout(&g->raft, h->cfg.heartbeat_timeout_ms);
    raft_set_pre_vote(&g->raft, true);
    raft_set_install_snapshot_timeout(&g->raft, h->cfg.install_snapshot_timeout_ms);
    uint64_t s = h->cfg.seed ^ (group_id * 0x9E3779B97F4A7C15ull) ^ (h->cfg.node_id << 32);
    s = (s ^ (s >> 31)) * 0xBF58476D1CE4E5B9ull;
    raft_seed(&g->raft, (unsigned)(s ^ (s >> 29)));

    /* The state to start from: what storage holds, or a fresh bootstrap. */
    raft_host_loaded ld;
    memset(&ld, 0, sizeof ld);
    struct raft_buffer conf_buf = {NULL, 0};
    bool loaded = false;
    strata_err lerr;
    struct raft_snapshot_metadata smeta;
    memset(&smeta, 0, sizeof smeta);
    if (h->cfg.storage.load(h->cfg.storage.ctx, group_id, &ld, &lerr) == 0) {
        loaded = true;
        if (ld.snapshot_index != 0 && load_snapshot_point(g, &ld, applied_index, &smeta, err)) {
            release_loaded(h, &ld);
            raft_close(&g->raft, NULL);
            free(g);
            return -1;
        }
    } else if (lerr.code == ERR_NOT_FOUND && join) {
        ld.start_index = 1; /* empty, term 0: the leader's entries or snapshot will come */
    } else if (lerr.code == ERR_NOT_FOUND) {
        if (bootstrap(h, g, members, n, &conf_buf, err) != 0) {
            raft_close(&g->raft, NULL);
            free(g);
            return -1;
        }
        ld.term = 1;
        ld.start_index = 1;
    } else {
        raft_close(&g->raft, NULL);
        free(g);
        if (err != NULL)
            *err = lerr;
        return -1;
    }

    /* Nothing stored (or only a term and vote), or a vote or a snapshot point stored while
     * unconfirmed: see group.unconfirmed. */
    bool vote_marked = loaded && (ld.vote & VOTE_UNCONFIRMED) != 0;
    ld.vote &= ~VOTE_UNCONFIRMED;
    g->unconfirmed = g->snap_marked || vote_marked ||
                     (join && (!loaded || (ld.n == 0 && ld.snapshot_index == 0)));
    size_t ne = loaded ? ld.n : join ? 0 : 1;
    struct raft_entry *ents = raft_calloc(ne ? ne : 1, sizeof *ents);
    int rc = ents == NULL ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < ne; i++) {
        const void *src = loaded ? ld.entries[i].data : conf_buf.base;
        size_t len = loaded ? ld.entries[i].len : conf_buf.len;
        ents[i].term = loaded ? ld.entries[i].term : 1;
        ents[i].type = loaded ? (enum raft_entry_type)ld.entries[i].type : RAFT_CHANGE;
        ents[i].buf.len = len;
        ents[i].buf.base = raft_malloc(len ? len : 1);
        ents[i].batch = ents[i].buf.base;
        if (ents[i].buf.base == NULL)
            rc = -1;
        else if (len)
            memcpy(ents[i].buf.base, src, len);
    }
    uint64_t term = ld.term, vote = ld.vote, start = ld.start_index ? ld.start_index : 1;
    g->log_first = start;
    if (rc == 0 && ne > 0)
        rc = log_put(g, start, ents, (unsigned)ne);
    if (rc == 0)
        track_voters_from_log(g);
    bool has_snap = loaded && ld.snapshot_index != 0;
    if (loaded)
        release_loaded(h, &ld);
    if (conf_buf.base != NULL)
        raft_free(conf_buf.base);
    if (rc != 0 || insert_group(h, g) != 0) {
        for (size_t i = 0; ents != NULL && i < ne; i++)
            raft_free(ents[i].buf.base);
        raft_free(ents);
        log_free(g);
        free(g->snap_conf);
        if (has_snap)
            raft_configuration_close(&smeta.configuration);
        raft_close(&g->raft, NULL);
        free(g);
        return strata_err_set(err, ERR_NOMEM, "raft group start");
    }

    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_START;
    ev.start.term = term;
    ev.start.voted_for = vote;
    ev.start.start_index = start;
    ev.start.entries = ne ? ents : NULL;
    ev.start.n_entries = (unsigned)ne;
    ev.start.metadata = has_snap ? &smeta : NULL; /* the core takes its configuration */
    if (term == 0 && (ne > 0 || has_snap))
        ev.start.term = 1; /* entries imply a bootstrap term */
    rc = group_step(g, &ev);
    if (rc == 0) {
        /* The pure core copied what it needs (terms); the host owns the payloads. */
        for (size_t i = 0; i < ne; i++)
            raft_free(ents[i].buf.base);
        raft_free(ents);
    }
    if (rc != 0)
        return strata_err_set(err, ERR_INTERNAL, "group %" PRIu64 " failed to start", group_id);
    /* Unconfirmed without a marked vote (it joined empty now): mark it before any entry. */
    if (g->unconfirmed && !vote_marked && !g->failed && write_term_vote(g, &lerr) != 0)
        group_fail_refused(g, ERR_IO, "storage refused term/vote", &lerr);
    return 0;
}

int raft_host_start_group(raft_host *h, uint64_t group_id, const uint64_t *members, size_t n,
                          uint64_t applied_index, strata_err *err)
{
    h->depth++;
    int rc = start_group_in(h, group_id, members, n, applied_index, err);
    h->depth--;
    return rc;
}

/* Whether to give an InstallSnapshot to the core. Not while installing one (the core
 * would ignore it and leak its configuration), not without the hooks to install, and
 * never to a leader of the same term (the core asserts that cannot happen). */
static bool snapshot_acceptable(group *g, const struct raft_message *m)
{
    const raft_host_config *c = &g->h->cfg;
    if (c->storage.set_snapshot == NULL || c->fsm.install == NULL || g->installing)
        return false;
    return !(raft_state(&g->raft) == RAFT_LEADER &&
             m->install_snapshot.term == raft_current_term(&g->raft));
}

/*
 * An AppendEntries that starts below this replica's snapshot point (a leader's probing
 * can step back that far; seen in tests/sim with replica moves, seed 612) would
 * make C-Raft 0.22 append its entries over the compacted part of its log (it takes the
 * entries it holds no term for as new) and the host then fail on a gap. Entries up to
 * the point are committed, so the leader's are the ones already here (any leader whose
 * message the term check lets through holds every committed entry): the message is
 * trimmed to what a leader probing from the point would send. With no entry left it is
 * a heartbeat at the point, its commit index capped there so that it commits nothing
 * this replica has not checked against the leader's log.
 */
static void trim_below_snapshot(group *g, struct raft_message *m)
{
    struct raft_append_entries *a = &m->append_entries;
    if (m->type != RAFT_APPEND_ENTRIES || g->snap_index == 0 || g->installing ||
        a->prev_log_index >= g->snap_index)
        return;
    uint64_t skip = g->snap_index - a->prev_log_index;
    if (skip >= a->n_entries) {
        a->entries = NULL;
        a->n_entries = 0;
        if (a->leader_commit > g->snap_index)
            a->leader_commit = g->snap_index;
    } else {
        a->entries += skip;
        a->n_entries -= (unsigned)skip;
    }
    a->prev_log_index = g->snap_index;
    a->prev_log_term = g->snap_term;
}

/* The snapshot point again, without the "unconfirmed" mark (the replica was confirmed):
 * a restart must not make it unconfirmed again, since a group whose voters all restart
 * unconfirmed could never elect a leader. */
static void snap_unmark(group *g)
{
    if (!g->snap_marked || g->h->cfg.storage.set_snapshot == NULL || g->snap_conf == NULL)
        return;
    size_t mlen = 0;
    uint8_t *meta = meta_encode(g->snap_conf_index, g->snap_conf, g->snap_conf_len, &mlen);
    if (meta == NULL) {
        group_fail(g, ERR_NOMEM, "snapshot point");
        return;
    }
    raft_host_snapshot sp = {.index = g->snap_index,
                             .term = g->snap_term,
                             .keep_from = g->log_first < g->snap_index + 1 ? g->log_first
                                                                           : g->snap_index + 1,
                             .replace_log = false,
                             .meta = meta,
                             .meta_len = mlen};
    strata_err err;
    int rc = write_snap_point(g, &sp, snap_write_done, &err);
    free(meta);
    if (rc != 0)
        group_fail_refused(g, ERR_IO, "storage refused the snapshot point", &err);
    else
        g->snap_marked = false;
}

static bool conf_names(const struct raft_configuration *c, uint64_t id)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].id == id)
            return true;
    return false;
}

/*
 * After an AppendEntries of term `term` from `from` (its last entry `last` of term
 * `last_term`, the leader's commit index `commit`) was stepped: an unconfirmed replica is
 * confirmed when it follows `from` in that term, its log ends at `last` and holds the
 * same entry there (so, by Log Matching, it is the leader's log up to `last`), `last`
 * reaches the leader's commit index, and its configuration names it. Its configuration
 * is then the leader's at `last`: at least as new as every configuration committed when
 * the leader sent the message, so newer than any that removed it before.
 */
static void confirm_check(group *g, uint64_t from, uint64_t term, uint64_t last, uint64_t last_term,
                          uint64_t commit)
{
    if (!g->unconfirmed || g->failed || g->installing || raft_state(&g->raft) != RAFT_FOLLOWER ||
        leader_of(g) != from || raft_current_term(&g->raft) != term || last < commit ||
        raft_last_index(&g->raft) != last)
        return;
    const log_entry *le = log_at(g, last);
    uint64_t t = le != NULL ? le->term : last != 0 && last == g->snap_index ? g->snap_term : 0;
    if (t == 0 || t != last_term || !conf_names(&g->raft.configuration, g->h->cfg.node_id))
        return;
    g->unconfirmed = false;
    g->hold_until = 0;
    snap_unmark(g);
    strata_err err;
    if (!g->failed && write_term_vote(g, &err) != 0) /* the vote without the mark */
        group_fail_refused(g, ERR_IO, "storage refused term/vote", &err);
}

/* Steps a message the host makes up on behalf of `from` (from's id as its address, as
 * raft_msg_decode gives). */
static void step_as_from(group *g, uint64_t from, struct raft_message *m)
{
    char addr[24];
    snprintf(addr, sizeof addr, "%" PRIu64, from);
    m->server_id = from;
    m->server_address = addr;
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_RECEIVE;
    ev.receive.message = m;
    (void)group_step(g, &ev);
}

/*
 * The core answers a pre-vote with the request's own term, so a pre-candidate never
 * learns that a voter holds a higher term. A voter whose term rose in an election it
 * could not win (its requests lost, after a transfer's TimeoutNow say) keeps that term
 * and a log too short to win: it refuses every pre-vote for a lower term, the others
 * never reach its term, and when its vote is needed the group never elects again
 * (test_pre_vote_learns_higher_term). Raft adopts a higher term seen in any
 * message; so a pre-vote request showing its sender's term (the request's, less one)
 * above ours is handed to the core as that sender's refusal, which makes a pre-candidate
 * take the term (a refusal grants nothing; the core ignores it in any other state).
 */
static void adopt_pre_vote_term(group *g, uint64_t from, const struct raft_request_vote *rv)
{
    if (g->failed || raft_state(&g->raft) != RAFT_CANDIDATE ||
        rv->term < raft_current_term(&g->raft) + 3)
        return; /* the core takes a result's term only if above its own plus one */
    struct raft_message m;
    memset(&m, 0, sizeof m);
    m.type = RAFT_REQUEST_VOTE_RESULT;
    m.request_vote_result.version = 2;
    m.request_vote_result.term = rv->term - 1;
    m.request_vote_result.vote_granted = false;
    m.request_vote_result.pre_vote = true;
    step_as_from(g, from, &m);
}

/*
 * A leader hands leadership over by sending TimeoutNow once the target's answers show
 * its log; the core sends it at most once per transfer, and the target's core ignores
 * it while it is still writing entries the message names (measured under a steady write
 * load: every failed transfer had its TimeoutNow arrive with the last entries in flight,
 * and the partition refused writes for the whole election timeout the leader then waits).
 * So the host holds such a message until those entries are written, then steps it: one
 * write's delay instead of a failed transfer. The core still checks term and log then.
 */
static bool hold_timeout_now(group *g, uint64_t from, const struct raft_message *m)
{
    uint64_t last = raft_last_index(&g->raft);
    if (m->type != RAFT_TIMEOUT_NOW || raft_state(&g->raft) != RAFT_FOLLOWER ||
        m->timeout_now.last_log_index != last || g->raft.last_stored >= last)
        return false;
    g->tn_held = true;
    g->tn_from = from;
    g->tn = m->timeout_now;
    return true;
}

static void release_timeout_now(group *g)
{
    if (!g->tn_held || g->failed || g->raft.last_stored < g->tn.last_log_index)
        return;
    g->tn_held = false;
    struct raft_message m;
    memset(&m, 0, sizeof m);
    m.type = RAFT_TIMEOUT_NOW;
    m.timeout_now = g->tn;
    step_as_from(g, g->tn_from, &m);
}

static int receive_in(raft_host *h, uint64_t from, uint64_t group_id, const void *msg, size_t len,
                      strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
    if (g->failed)
        return strata_err_set(err, ERR_UNAVAILABLE, "group %" PRIu64 " stopped", group_id);
    struct raft_message m;
    raft_msg_decoded *owner = NULL;
    uint64_t mg, mf;
    if (raft_msg_decode(msg, len, &mg, &mf, &m, &owner, err) != 0)
        return -1;
    if (mg != group_id || mf != from || from == h->cfg.node_id) {
        raft_msg_free(owner);
        return strata_err_set(err, ERR_CORRUPT, "raft message header mismatch");
    }
    raft_host_check chk;
    if (raft_msg_check(owner, &chk)) {
        raft_msg_free(owner);
        ri_receive(g, from, &chk);
        return 0;
    }
    bool is_snap = m.type == RAFT_INSTALL_SNAPSHOT;
    struct raft_request_vote pre_vote = {0};
    if (m.type == RAFT_REQUEST_VOTE && m.request_vote.pre_vote)
        pre_vote = m.request_vote;
    if (is_snap && !snapshot_acceptable(g, &m)) {
        raft_msg_free(owner); /* the leader sends it again */
        return 0;
    }
    /* An AppendEntries or InstallSnapshot of a term older than ours gets a rejection.
     * C-Raft 0.22 answers a stale AppendEntries with results in its own, newer term whose
     * other fields it leaves unset (found by tests/sim, --splits seed 409853:
     * last_log_index was stack garbage, `rejected` sometimes 0). Such a result, arriving
     * at the sender after it was elected in that newer term, reads as a current answer: a
     * "success" set the follower's match index to the garbage, the leader counted the
     * follower for entries it did not hold, and took its later rejections for stale ones,
     * so the follower never caught up. The message is still stepped (the old leader must
     * hear of the newer term); send_messages rewrites what the step answers it. */
    uint64_t term_now = raft_current_term(&g->raft);
    bool stale = (m.type == RAFT_APPEND_ENTRIES && m.append_entries.term < term_now) ||
                 (is_snap && m.install_snapshot.term < term_now);
    uint64_t stale_at = m.type == RAFT_APPEND_ENTRIES ? m.append_entries.prev_log_index
                        : is_snap                     ? m.install_snapshot.last_index
                                                      : 0;
    /* An unconfirmed replica neither votes (pre-votes included) nor campaigns when told
     * to take over: the candidate or the leader goes on without it. */
    if (g->unconfirmed && (m.type == RAFT_REQUEST_VOTE || m.type == RAFT_TIMEOUT_NOW)) {
        raft_msg_free(owner);
        return 0;
    }
    if (hold_timeout_now(g, from, &m)) {
        raft_msg_free(owner);
        return 0;
    }
    /* What confirm_check needs, taken before trimming (which may lower the commit). */
    bool is_append = m.type == RAFT_APPEND_ENTRIES;
    const struct raft_append_entries *ae = &m.append_entries;
    uint64_t ae_term = is_append ? ae->term : 0, ae_commit = is_append ? ae->leader_commit : 0;
    uint64_t ae_last = is_append ? ae->prev_log_index + ae->n_entries : 0;
    uint64_t ae_last_term = !is_append          ? 0
                            : ae->n_entries > 0 ? ae->entries[ae->n_entries - 1].term
                                                : ae->prev_log_term;
    trim_below_snapshot(g, &m);
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_RECEIVE;
    ev.receive.message = &m;
    bool has_entries = m.type == RAFT_APPEND_ENTRIES && m.append_entries.n_entries > 0;
    g->recv_entries = has_entries ? m.append_entries.entries : NULL;
    g->recv_n = has_entries ? m.append_entries.n_entries : 0;
    g->recv_kept = false;
    g->stale_from = stale ? from : 0;
    g->stale_rejected = stale_at > 0 ? stale_at : 1;
    int rc = group_step(g, &ev);
    g->stale_from = 0;
    if (has_entries && !g->recv_kept)
        raft_msg_batch_consumed(owner);
    if (is_snap)
        raft_msg_conf_consumed(owner); /* the core closed it or handed it to the host */
    g->recv_entries = NULL;
    g->recv_n = 0;
    raft_msg_free(owner);
    if (rc != 0)
        return strata_err_set(err, ERR_UNAVAILABLE, "group %" PRIu64 " stopped", group_id);
    if (is_append)
        confirm_check(g, from, ae_term, ae_last, ae_last_term, ae_commit);
    if (pre_vote.pre_vote)
        adopt_pre_vote_term(g, from, &pre_vote);
    return 0;
}

int raft_host_receive(raft_host *h, uint64_t from, uint64_t group_id, const void *msg, size_t len,
                      strata_err *err)
{
    h->depth++;
    int rc = receive_in(h, from, group_id, msg, len, err);
    h->depth--;
    return rc;
}

static void tick_in(raft_host *h)
{
    uint64_t now = now_ms(h);
    h->armed = UINT64_MAX;
    h->ticking = true;
    for (size_t i = 0; i < h->nslots; i++) {
        group *g = h->slots[i];
        if (g == NULL || g->failed || g->deadline == 0 || g->deadline > now)
            continue;
        if (g->installing && g->install_retry_at != 0 && g->install_retry_at <= now)
            install_call(g); /* a failed out-of-band copy, tried again */
        ri_retry(g, now);
        if (g->failed)
            continue;
        expire_orphans(g, now);
        if (g->failed)
            continue;
        uint64_t t = raft_timeout(&g->raft);
        if (t != 0 && t <= now && g->unconfirmed && raft_state(&g->raft) == RAFT_FOLLOWER) {
            /* An unconfirmed follower's election timeout: the core would campaign (its
             * configuration may name it a voter). Swallowed; looked at again later. */
            g->hold_until = now + h->cfg.election_timeout_ms;
            g->deadline = group_deadline(g);
        } else if (t != 0 && t <= now) {
            struct raft_event ev;
            memset(&ev, 0, sizeof ev);
            ev.type = RAFT_TIMEOUT;
            group_step(g, &ev);
        } else {
            g->deadline = group_deadline(g);
        }
    }
    h->ticking = false;
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < h->nslots; i++) {
        group *g = h->slots[i];
        if (g != NULL && !g->failed && g->deadline != 0 && g->deadline < next)
            next = g->deadline;
    }
    if (next != UINT64_MAX) {
        /* A deadline already in the past (time did not move) is retried 1 ms later. */
        if (next <= now)
            next = now + 1;
        h->armed = next;
        h->cfg.clock.arm(h->cfg.clock.ctx, next);
    }
}

void raft_host_tick(raft_host *h)
{
    h->depth++;
    tick_in(h);
    h->depth--;
}

static group *usable_group(const raft_host *h, uint64_t group_id, strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL) {
        strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
        return NULL;
    }
    if (g->failed) {
        strata_err_set(err, ERR_UNAVAILABLE, "group %" PRIu64 " stopped", group_id);
        return NULL;
    }
    if (raft_state(&g->raft) != RAFT_LEADER) {
        strata_err_set(err, ERR_UNAVAILABLE, "not leader of group %" PRIu64 "; leader %" PRIu64,
                       group_id, leader_of(g));
        return NULL;
    }
    /* The core refuses every entry while it hands leadership over (so the target can
     * catch up): say so up front, naming the node that is about to lead. */
    if (raft_transferee(&g->raft) != 0) {
        strata_err_set(err, ERR_UNAVAILABLE,
                       "leadership of group %" PRIu64 " is moving; leader %" PRIu64, group_id,
                       (uint64_t)raft_transferee(&g->raft));
        return NULL;
    }
    return g;
}

/* Proposes one entry of `type` on the leader g; cb fires once it is applied (see submit). */
static int propose(group *g, enum raft_entry_type type, const void *cmd, size_t len,
                   raft_host_done_cb cb, void *data, strata_err *err)
{
    uint64_t group_id = g->id;
    pending *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_err_set(err, ERR_NOMEM, "submit");
    p->cb = cb;
    p->data = data;
    p->term = raft_current_term(&g->raft);
    p->index = raft_last_index(&g->raft) + 1;
    /* Registered before the step: the entry may commit within it (single voter). */
    list_push(&g->submits, p);
    if (submit_entry(g, type, cmd, len) == 0) {
        /* Remove p unless the failed step already completed it (the group failed): then
         * its callback has fired, and the call counts as accepted (0). */
        bool found = false;
        pending *prev = NULL;
        for (pending *q = g->submits.head; q != NULL; prev = q, q = q->next) {
            if (q != p)
                continue;
            if (prev != NULL)
                prev->next = q->next;
            else
                g->submits.head = q->next;
            if (g->submits.tail == q)
                g->submits.tail = prev;
            free(q);
            found = true;
            break;
        }
        if (!found)
            return 0;
        return strata_err_set(err, ERR_UNAVAILABLE, "submit to group %" PRIu64 " failed", group_id);
    }
    return 0;
}

static int submit_in(raft_host *h, uint64_t group_id, const void *cmd, size_t len,
                     raft_host_done_cb cb, void *data, strata_err *err)
{
    group *g = usable_group(h, group_id, err);
    if (g == NULL)
        return -1;
    return propose(g, RAFT_COMMAND, cmd, len, cb, data, err);
}

int raft_host_submit(raft_host *h, uint64_t group_id, const void *cmd, size_t len,
                     raft_host_done_cb cb, void *data, strata_err *err)
{
    h->depth++;
    int rc = submit_in(h, group_id, cmd, len, cb, data, err);
    h->depth--;
    return rc;
}

static int read_barrier_in(raft_host *h, uint64_t group_id, raft_host_done_cb cb, void *data,
                           strata_err *err)
{
    group *g = usable_group(h, group_id, err);
    if (g == NULL)
        return -1;
    pending *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_err_set(err, ERR_NOMEM, "read barrier");
    p->cb = cb;
    p->data = data;
    list_push(&g->reads_waiting, p);
    maybe_start_barrier(g);
    return 0;
}

int raft_host_read_barrier(raft_host *h, uint64_t group_id, raft_host_done_cb cb, void *data,
                           strata_err *err)
{
    h->depth++;
    int rc = read_barrier_in(h, group_id, cb, data, err);
    h->depth--;
    return rc;
}

static int read_index_in(raft_host *h, uint64_t group_id, raft_host_done_cb cb, void *data,
                         strata_err *err)
{
    group *g = usable_group(h, group_id, err);
    if (g == NULL)
        return -1;
    if (!ri_usable(g))
        return read_barrier_in(h, group_id, cb, data, err);
    pending *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_err_set(err, ERR_NOMEM, "read index");
    uint64_t term = raft_current_term(&g->raft);
    if (g->ri_term != term) {
        /* Leading in a new term: the reads of earlier terms failed when leadership was
         * lost, and so did their rounds: answers to them count for nothing now. */
        g->ri_term = term;
        g->ri_nacks = 0;
        g->ri_confirmed = g->ri_sent;
    }
    p->cb = cb;
    p->data = data;
    p->term = term;
    p->index = raft_commit_index(&g->raft);
    p->round = g->ri_sent + 1; /* the next round is sent after this moment */
    list_push(&g->ri_waiting, p);
    /* One round out at a time: reads that come meanwhile share the next. */
    if (g->ri_sent <= g->ri_confirmed && !g->ri_releasing)
        ri_send_round(g);
    return 0;
}

int raft_host_read_index(raft_host *h, uint64_t group_id, raft_host_done_cb cb, void *data,
                         strata_err *err)
{
    h->depth++;
    int rc = read_index_in(h, group_id, cb, data, err);
    h->depth--;
    return rc;
}

bool raft_host_is_leader(const raft_host *h, uint64_t group_id)
{
    group *g = find_group(h, group_id);
    return g != NULL && !g->failed && raft_state(&g->raft) == RAFT_LEADER;
}

uint64_t raft_host_leader(const raft_host *h, uint64_t group_id)
{
    group *g = find_group(h, group_id);
    return g == NULL || g->failed ? 0 : leader_of(g);
}

int raft_host_group_info(const raft_host *h, uint64_t group_id, raft_host_group_stats *out,
                         strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
    out->state = raft_state(&g->raft);
    out->term = raft_current_term(&g->raft);
    out->vote = raft_voted_for(&g->raft);
    out->leader = leader_of(g);
    out->commit_index = raft_commit_index(&g->raft);
    out->applied_index = g->applied;
    out->last_index = raft_last_index(&g->raft);
    out->last_stored = g->raft.last_stored;
    out->failed = g->failed;
    out->apply_blocked = g->apply_blocked;
    out->snapshot_index = g->snap_index;
    out->snapshot_term = g->snap_term;
    out->first_index = g->log_first;
    out->installing = g->installing;
    out->installs = g->installs;
    out->stale_answers = g->stale_answers;
    out->unconfirmed = g->unconfirmed;
    out->term_vote_writes = g->tv_pending;
    out->queued_messages = 0;
    for (out_msg *m = g->out_head; m != NULL; m = m->next)
        out->queued_messages++;
    out->appends_in_flight = 0;
    for (append_req *r = g->appends; r != NULL; r = r->next)
        out->appends_in_flight++;
    return 0;
}

int raft_host_compact(raft_host *h, uint64_t group_id, uint64_t index, strata_err *err)
{
    h->depth++;
    int rc = compact_in(h, group_id, index, h->cfg.snapshot_trailing, err);
    h->depth--;
    return rc;
}

int raft_host_compact_all(raft_host *h, uint64_t group_id, uint64_t index, strata_err *err)
{
    h->depth++;
    int rc = compact_in(h, group_id, index, 0, err);
    h->depth--;
    return rc;
}

int raft_host_snapshot_installed(raft_host *h, uint64_t token, int status, uint64_t applied_index,
                                 strata_err *err)
{
    h->depth++;
    int rc = snapshot_installed_in(h, token, status, applied_index, err);
    h->depth--;
    return rc;
}

/* ---- membership ---- */

/* A raft_host_change in progress: the encoded configuration and the caller's callback. */
typedef struct {
    group *g;
    uint8_t *conf; /* raft_malloc'd (raft_configuration_encode) */
    size_t conf_len;
    raft_host_done_cb cb;
    void *data;
} change_req;

static void change_free(change_req *c)
{
    raft_free(c->conf);
    free(c);
}

/* The change entry was applied (or failed): the group may take the next change. The
 * group is still allocated here: ops are failed before a group is freed. */
static void change_done(void *data, const raft_host_outcome *o)
{
    change_req *c = data;
    raft_host_done_cb cb = c->cb;
    void *cb_data = c->data;
    c->g->change_active = false;
    change_free(c);
    cb(cb_data, o);
}

static void change_fail(change_req *c, strata_code code, uint64_t hint)
{
    raft_host_outcome o = {.code = code, .leader_hint = hint};
    change_done(c, &o);
}

static bool is_voter_in(const struct raft_configuration *c, uint64_t id)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].id == id)
            return c->servers[i].role == RAFT_VOTER;
    return false;
}

/* Raft's single-server rule: the voter sets differ by at most one server, so any
 * majority of the old set and any majority of the new one intersect. */
static bool one_voter_change(const struct raft_configuration *a, const struct raft_configuration *b)
{
    unsigned diff = 0;
    for (unsigned i = 0; i < a->n; i++)
        diff += a->servers[i].role == RAFT_VOTER && !is_voter_in(b, a->servers[i].id);
    for (unsigned i = 0; i < b->n; i++)
        diff += b->servers[i].role == RAFT_VOTER && !is_voter_in(a, b->servers[i].id);
    return diff <= 1;
}

static bool was_voter(const group *g, uint64_t id)
{
    for (unsigned i = 0; i < g->n_prev_voters; i++)
        if (g->prev_voters[i] == id)
            return true;
    return false;
}

/*
 * C-Raft grants votes only as a voter of its own configuration: a voter that has not yet
 * received the entry that made it one refuses every vote. With one more voter lost no
 * majority is left that can elect, and without a leader nothing catches the unaware one
 * up: the group is stuck for good (found by the simulation: a move promoted a replica and
 * then removed the leader, or promoted another, before the first heard of it). So no
 * change goes in while the voter promoted by the configuration in force may not know
 * it, unless the change takes its vote away again. By induction every earlier promotion
 * was known before the change after it. A replica learns both configuration entries by
 * applying them, or at start from its log (track_voters_from_log); one that installed a
 * snapshot since, or whose log was compacted past them before a restart, knows nothing
 * and holds nothing up. Returns the unaware voter's id, or 0.
 */
static uint64_t unaware_promotee(const group *g, const struct raft_configuration *next)
{
    uint64_t ci = g->raft.configuration_committed_index;
    if (ci == 0 || g->conf_index != ci || !g->prev_known)
        return 0;
    const struct raft_configuration *cur = &g->raft.configuration;
    for (unsigned i = 0; i < cur->n; i++) {
        uint64_t id = cur->servers[i].id;
        raft_index match = 0;
        if (cur->servers[i].role != RAFT_VOTER || id == g->h->cfg.node_id || was_voter(g, id) ||
            !is_voter_in(next, id))
            continue;
        if (raft_match_index((struct raft *)&g->raft, id, &match) != 0 || match < ci)
            return id;
    }
    return 0;
}

/* Whether the leader has committed an entry of its own term. Until then a configuration
 * change is unsafe: an uncommitted change of an earlier leader might still win. */
static bool committed_in_term(group *g)
{
    uint64_t c = raft_commit_index(&g->raft), term = raft_current_term(&g->raft);
    log_entry *le = log_at(g, c);
    if (le != NULL)
        return le->term == term;
    return c == g->snap_index && g->snap_term == term;
}

/* Appends the change entry, re-checking what may have changed while it waited. */
static void change_propose(change_req *c)
{
    group *g = c->g;
    strata_err err;
    if (g->failed || raft_state(&g->raft) != RAFT_LEADER) {
        change_fail(c, ERR_UNAVAILABLE, g->failed ? 0 : leader_of(g));
        return;
    }
    struct raft_configuration next;
    if (conf_decode(c->conf, c->conf_len, &next) != 0) {
        change_fail(c, ERR_NOMEM, 0);
        return;
    }
    bool ok = one_voter_change(&g->raft.configuration, &next);
    ok = ok && g->raft.configuration_uncommitted_index == 0 && unaware_promotee(g, &next) == 0;
    raft_configuration_close(&next);
    if (!ok) {
        /* another change got in meanwhile, or the last promoted voter does not know yet */
        change_fail(c, ERR_BUSY, leader_of(g));
        return;
    }
    if (propose(g, RAFT_CHANGE, c->conf, c->conf_len, change_done, c, &err) != 0)
        change_fail(c, err.code, leader_of(g));
}

/* The barrier of this term is committed and applied (or leadership was lost). */
static void change_after_barrier(void *data, const raft_host_outcome *o)
{
    change_req *c = data;
    if (o->code != ERR_NONE) {
        change_fail(c, o->code, o->leader_hint);
        return;
    }
    change_propose(c);
}

/* Builds the C-Raft configuration for `m`; ERR_VALIDATION for bad members. */
static int conf_build(const raft_host_member *m, size_t n, struct raft_configuration *conf,
                      strata_err *err)
{
    unsigned voters = 0;
    raft_configuration_init(conf);
    if (n == 0 || n > 1024)
        return strata_err_set(err, ERR_VALIDATION, "a configuration needs 1..1024 servers");
    for (size_t i = 0; i < n; i++) {
        char addr[24];
        snprintf(addr, sizeof addr, "%" PRIu64, m[i].id);
        int rv = m[i].id == 0 ? RAFT_BADID
                              : raft_configuration_add(conf, m[i].id, addr,
                                                       m[i].voter ? RAFT_VOTER : RAFT_STANDBY);
        if (rv != 0) {
            raft_configuration_close(conf);
            raft_configuration_init(conf);
            return strata_err_set(err, rv == RAFT_NOMEM ? ERR_NOMEM : ERR_VALIDATION,
                                  "bad or duplicate member %" PRIu64, m[i].id);
        }
        voters += m[i].voter;
    }
    if (voters == 0) {
        raft_configuration_close(conf);
        raft_configuration_init(conf);
        return strata_err_set(err, ERR_VALIDATION, "a configuration needs a voter");
    }
    return 0;
}

static int change_in(raft_host *h, uint64_t group_id, const raft_host_member *m, size_t n,
                     raft_host_done_cb cb, void *data, strata_err *err)
{
    group *g = usable_group(h, group_id, err);
    if (g == NULL)
        return -1;
    if (g->change_active || g->raft.configuration_uncommitted_index != 0)
        return strata_err_set(err, ERR_BUSY, "group %" PRIu64 ": a configuration change is pending",
                              group_id);
    struct raft_configuration conf;
    if (conf_build(m, n, &conf, err) != 0)
        return -1;
    if (!one_voter_change(&g->raft.configuration, &conf)) {
        raft_configuration_close(&conf);
        return strata_err_set(err, ERR_VALIDATION,
                              "group %" PRIu64 ": a change may add or remove one voter at most",
                              group_id);
    }
    uint64_t unaware = unaware_promotee(g, &conf);
    if (unaware != 0) {
        raft_configuration_close(&conf);
        return strata_err_set(err, ERR_BUSY,
                              "group %" PRIu64 ": voter %" PRIu64
                              " has not yet received the configuration that made it a voter",
                              group_id, unaware);
    }
    change_req *c = calloc(1, sizeof *c);
    struct raft_buffer b = {NULL, 0};
    int rv = c == NULL ? RAFT_NOMEM : raft_configuration_encode(&conf, &b);
    raft_configuration_close(&conf);
    if (rv != 0) {
        free(c);
        return strata_err_set(err, ERR_NOMEM, "configuration change");
    }
    *c = (change_req){.g = g, .conf = b.base, .conf_len = b.len, .cb = cb, .data = data};
    g->change_active = true; /* cleared by change_done, or just below */
    if (committed_in_term(g)) {
        if (propose(g, RAFT_CHANGE, c->conf, c->conf_len, change_done, c, err) != 0) {
            g->change_active = false;
            change_free(c);
            return -1;
        }
        return 0;
    }
    /* A new leader: commit a barrier of this term first (shared with the reads). */
    pending *p = calloc(1, sizeof *p);
    if (p == NULL) {
        change_free(c);
        return strata_err_set(err, ERR_NOMEM, "configuration change");
    }
    p->cb = change_after_barrier;
    p->data = c;
    list_push(&g->reads_waiting, p);
    maybe_start_barrier(g);
    return 0;
}

int raft_host_change(raft_host *h, uint64_t group_id, const raft_host_member *m, size_t n,
                     raft_host_done_cb cb, void *data, strata_err *err)
{
    h->depth++;
    int rc = change_in(h, group_id, m, n, cb, data, err);
    h->depth--;
    return rc;
}

int raft_host_configuration(const raft_host *h, uint64_t group_id, raft_host_member *out,
                            size_t cap, size_t *n, bool *uncommitted, strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
    const struct raft_configuration *c = &g->raft.configuration;
    for (unsigned i = 0; i < c->n && i < cap; i++)
        out[i] = (raft_host_member){c->servers[i].id, c->servers[i].role == RAFT_VOTER};
    *n = c->n;
    *uncommitted = g->raft.configuration_uncommitted_index != 0;
    return 0;
}

int raft_host_join_group(raft_host *h, uint64_t group_id, uint64_t applied_index, strata_err *err)
{
    h->depth++;
    int rc = start_group_in(h, group_id, NULL, 0, applied_index, err);
    h->depth--;
    return rc;
}

int raft_host_member_match(const raft_host *h, uint64_t group_id, uint64_t member, uint64_t *match,
                           strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "no group %" PRIu64, group_id);
    if (g->failed || raft_state(&g->raft) != RAFT_LEADER)
        return strata_err_set(err, ERR_UNAVAILABLE, "not leader of group %" PRIu64, group_id);
    raft_index idx = 0;
    if (raft_match_index(&g->raft, member, &idx) != 0)
        return strata_err_set(err, ERR_NOT_FOUND,
                              "%" PRIu64 " is not in the configuration of group %" PRIu64, member,
                              group_id);
    *match = idx;
    return 0;
}

/* ---- leadership transfer ---- */

/* The checks shared by raft_host_transfer_ready and raft_host_transfer: leader, nothing
 * else in progress, target another voter, its match index within max_lag of the log. */
static group *transfer_group(const raft_host *h, uint64_t group_id, uint64_t target,
                             uint64_t max_lag, strata_err *err)
{
    group *g = usable_group(h, group_id, err);
    if (g == NULL)
        return NULL;
    if (g->transfer_cb != NULL) {
        strata_err_set(err, ERR_BUSY, "group %" PRIu64 ": a transfer is in progress", group_id);
        return NULL;
    }
    if (g->change_active || g->raft.configuration_uncommitted_index != 0) {
        strata_err_set(err, ERR_BUSY, "group %" PRIu64 ": a configuration change is pending",
                       group_id);
        return NULL;
    }
    if (target == h->cfg.node_id || !is_voter_in(&g->raft.configuration, target)) {
        strata_err_set(err, ERR_VALIDATION, "%" PRIu64 " is not another voter of group %" PRIu64,
                       target, group_id);
        return NULL;
    }
    raft_index match = 0;
    uint64_t last = raft_last_index(&g->raft);
    if (raft_match_index(&g->raft, target, &match) != 0 ||
        (last > match && last - match > max_lag)) {
        strata_err_set(err, ERR_BUSY,
                       "group %" PRIu64 ": %" PRIu64 " is behind (match %" PRIu64 ", last %" PRIu64
                       ")",
                       group_id, target, (uint64_t)match, last);
        return NULL;
    }
    return g;
}

bool raft_host_transfer_ready(const raft_host *h, uint64_t group_id, uint64_t target,
                              uint64_t max_lag, strata_err *err)
{
    return transfer_group(h, group_id, target, max_lag, err) != NULL;
}

static int transfer_in(raft_host *h, uint64_t group_id, uint64_t target, raft_host_done_cb cb,
                       void *data, strata_err *err)
{
    group *g = transfer_group(h, group_id, target, UINT64_MAX, err);
    if (g == NULL)
        return -1;
    g->transfer_to = target;
    g->transfer_cb = cb;
    g->transfer_data = data;
    struct raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_TRANSFER;
    ev.transfer.server_id = target;
    if (group_step(g, &ev) != 0) {
        /* The core refused (no state changed) or the group failed (the callback fired). */
        if (g->transfer_cb == NULL)
            return 0;
        g->transfer_cb = NULL;
        g->transfer_data = NULL;
        g->transfer_to = 0;
        return strata_err_set(err, ERR_UNAVAILABLE, "group %" PRIu64 ": transfer refused",
                              group_id);
    }
    return 0;
}

int raft_host_transfer(raft_host *h, uint64_t group_id, uint64_t target, raft_host_done_cb cb,
                       void *data, strata_err *err)
{
    h->depth++;
    int rc = transfer_in(h, group_id, target, cb, data, err);
    h->depth--;
    return rc;
}

/* Ends campaign_soon's short election timeout once the group has a leader (a leader's
 * quorum check must not use it) or its time is up. Until then it doubles at each new
 * term, up to the heartbeat timeout: a vote round that takes longer than the timeout (a
 * loaded node writes the term and vote first) must not be cut short again and again,
 * while pre-votes that find no one (no term) keep being retried soon. */
static void fast_election_check(group *g)
{
    if (g->fast_until == 0)
        return;
    if (leader_of(g) == 0 && now_ms(g->h) < g->fast_until) {
        uint64_t term = raft_current_term(&g->raft);
        if (term > g->fast_term && g->fast_timeout < g->h->cfg.heartbeat_timeout_ms) {
            g->fast_term = term;
            g->fast_timeout = g->fast_timeout * 2 < g->h->cfg.heartbeat_timeout_ms
                                  ? g->fast_timeout * 2
                                  : g->h->cfg.heartbeat_timeout_ms;
            raft_set_election_timeout(&g->raft, g->fast_timeout);
        }
        return;
    }
    g->fast_until = 0;
    raft_set_election_timeout(&g->raft, g->h->cfg.election_timeout_ms);
}

int raft_host_campaign_soon(raft_host *h, uint64_t group_id, strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL || g->failed)
        return strata_err_set(err, ERR_NOT_FOUND, "group %" PRIu64 " not started here", group_id);
    if (g->unconfirmed || leader_of(g) != 0 || raft_state(&g->raft) != RAFT_FOLLOWER)
        return 0;
    g->fast_until = now_ms(h) + h->cfg.election_timeout_ms;
    /* Short: the other replicas usually hold the group within milliseconds; until they
     * do, a pre-vote that finds no one costs a message and no term. A slow vote round
     * makes it longer (fast_election_check). A tenth of a heartbeat (10 to 20 ms) was
     * most of a split's pause once the replicas held the child. */
    unsigned soon = h->cfg.heartbeat_timeout_ms / 100;
    g->fast_timeout = soon > 0 ? soon : 1;
    g->fast_term = raft_current_term(&g->raft);
    raft_set_election_timeout(&g->raft, g->fast_timeout);
    g->deadline = group_deadline(g);
    rearm(h, g->deadline);
    return 0;
}

int raft_host_set_heartbeat(raft_host *h, uint64_t group_id, unsigned heartbeat_ms,
                            strata_err *err)
{
    group *g = find_group(h, group_id);
    if (g == NULL || g->failed)
        return strata_err_set(err, ERR_NOT_FOUND, "group %" PRIu64 " not started here", group_id);
    if (heartbeat_ms == 0 || heartbeat_ms >= h->cfg.election_timeout_ms)
        return strata_err_set(err, ERR_VALIDATION,
                              "heartbeat timeout must be 1 ms to below the election timeout");
    raft_set_heartbeat_timeout(&g->raft, heartbeat_ms);
    g->deadline = group_deadline(g);
    rearm(h, g->deadline);
    return 0;
}

uint64_t raft_host_transferee(const raft_host *h, uint64_t group_id)
{
    group *g = find_group(h, group_id);
    return g == NULL || g->failed ? 0 : g->transfer_to;
}
