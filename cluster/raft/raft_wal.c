/* raft_host storage on storage/wal: see raft_wal.h. */
#include "cluster/raft/raft_wal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A raft_host completion carried through a wal_cb. */
typedef struct {
    raft_storage_cb cb;
    void *cb_data;
} completion;

static void on_wal_done(void *data, int status, const strata_err *err)
{
    (void)err;
    completion c = *(completion *)data;
    free(data);
    if (c.cb != NULL)
        c.cb(c.cb_data, status);
}

static completion *completion_new(raft_storage_cb cb, void *cb_data, strata_err *err)
{
    completion *c = malloc(sizeof *c);
    if (c == NULL) {
        strata_err_set(err, ERR_NOMEM, "raft wal completion");
        return NULL;
    }
    c->cb = cb;
    c->cb_data = cb_data;
    return c;
}

/* A request the WAL refused: the first one refused for want of disk or memory (ERR_IO,
 * ERR_BUSY, ERR_NOMEM) is remembered for raft_wal_storage_refused. ERR_VALIDATION (a
 * request outside the group's log: a bug) stops that group alone, as before: restarting
 * the node would not mend it. */
static int note_refusal(raft_wal_storage *s, strata_err *err)
{
    bool resources =
        err == NULL || err->code == ERR_IO || err->code == ERR_BUSY || err->code == ERR_NOMEM;
    if (!s->refused && resources) {
        s->refused = true;
        if (err != NULL)
            s->refusal = *err;
        else
            strata_err_set(&s->refusal, ERR_IO, "raft wal: a request was refused");
    }
    return -1;
}

static int ws_load(void *ctx, uint64_t group, raft_host_loaded *out, strata_err *err)
{
    raft_wal_storage *s = ctx;
    wal_group_info gi;
    if (s->detached)
        return strata_err_set(err, ERR_UNAVAILABLE, "raft wal storage detached");
    if (wal_group_state(s->w, group, &gi, err) != 0)
        return -1; /* ERR_NOT_FOUND for a new replica */
    wal_entry *we = NULL;
    size_t n = 0, bytes = 0;
    if (gi.last_index >= gi.first_index &&
        wal_read_entries(s->w, group, gi.first_index, gi.last_index, 0, &we, &n, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        bytes += we[i].len;
    /* One block: the entry array, then the payloads (freed by the host with free()). */
    raft_host_entry *e = malloc(n * sizeof *e + bytes + 1);
    if (e == NULL) {
        free(we);
        return strata_err_set(err, ERR_NOMEM, "raft wal load");
    }
    uint8_t *p = (uint8_t *)(e + n);
    for (size_t i = 0; i < n; i++) {
        if (we[i].len)
            memcpy(p, we[i].data, we[i].len);
        e[i] = (raft_host_entry){we[i].term, we[i].type, p, we[i].len};
        p += we[i].len;
    }
    free(we);
    out->term = gi.term;
    out->vote = gi.vote;
    out->start_index = gi.first_index;
    out->entries = e;
    out->n = n;
    /* The WAL keeps the metadata until this group's snapshot changes: the host copies
     * it while starting the group, before it can record another point. */
    out->snapshot_index = gi.snapshot_index;
    out->snapshot_term = gi.snapshot_term;
    out->snapshot_meta = gi.snapshot_meta;
    out->snapshot_meta_len = gi.snapshot_meta_len;
    return 0;
}

static int ws_term_vote(void *ctx, uint64_t group, uint64_t term, uint64_t vote, raft_storage_cb cb,
                        void *cb_data, strata_err *err)
{
    raft_wal_storage *s = ctx;
    if (s->detached)
        return strata_err_set(err, ERR_UNAVAILABLE, "raft wal storage detached");
    completion *c = completion_new(cb, cb_data, err);
    if (c == NULL)
        return note_refusal(s, err);
    if (wal_set_term_vote(s->w, group, term, vote, on_wal_done, c, err) != 0) {
        free(c);
        return note_refusal(s, err);
    }
    return 0;
}

static int ws_append(void *ctx, uint64_t group, uint64_t first_index, const raft_host_entry *e,
                     size_t n, raft_storage_cb cb, void *cb_data, strata_err *err)
{
    raft_wal_storage *s = ctx;
    if (s->detached)
        return strata_err_set(err, ERR_UNAVAILABLE, "raft wal storage detached");
    wal_entry *we = malloc((n ? n : 1) * sizeof *we);
    completion *c = completion_new(cb, cb_data, err);
    if (we == NULL || c == NULL) {
        free(we);
        free(c);
        strata_err_set(err, ERR_NOMEM, "raft wal append");
        return note_refusal(s, err);
    }
    for (size_t i = 0; i < n; i++)
        we[i] = (wal_entry){e[i].term, e[i].type, e[i].data, e[i].len};
    int rc = wal_append(s->w, group, first_index, we, n, on_wal_done, c, err);
    free(we); /* the WAL copied the entries */
    if (rc != 0) {
        free(c);
        return note_refusal(s, err);
    }
    return 0;
}

static int ws_set_snapshot(void *ctx, uint64_t group, const raft_host_snapshot *sp,
                           raft_storage_cb cb, void *cb_data, strata_err *err)
{
    raft_wal_storage *s = ctx;
    if (s->detached)
        return strata_err_set(err, ERR_UNAVAILABLE, "raft wal storage detached");
    /* An installed snapshot replaces the whole log: entries above its index are stale
     * (wal_set_snapshot drops the log only when the point is beyond its end). */
    wal_group_info gi;
    if (sp->replace_log && wal_group_state(s->w, group, &gi, NULL) == 0 &&
        gi.last_index > sp->index && wal_truncate(s->w, group, sp->index + 1, NULL, NULL, err) != 0)
        return note_refusal(s, err);
    completion *c = completion_new(cb, cb_data, err);
    if (c == NULL)
        return note_refusal(s, err);
    wal_snapshot ws = {.index = sp->index,
                       .term = sp->term,
                       .keep_from = sp->keep_from,
                       .meta = sp->meta,
                       .meta_len = sp->meta_len};
    if (wal_set_snapshot(s->w, group, &ws, on_wal_done, c, err) != 0) {
        free(c);
        return note_refusal(s, err);
    }
    return 0;
}

void raft_wal_storage_init(raft_wal_storage *s, wal *w, raft_host_storage *out)
{
    s->w = w;
    s->detached = false;
    s->refused = false;
    *out = (raft_host_storage){.ctx = s,
                               .load = ws_load,
                               .release = NULL,
                               .set_term_vote = ws_term_vote,
                               .append = ws_append,
                               .set_snapshot = ws_set_snapshot};
}

void raft_wal_storage_detach(raft_wal_storage *s)
{
    s->detached = true;
}

bool raft_wal_storage_refused(const raft_wal_storage *s, strata_err *why)
{
    if (s->refused && why != NULL)
        *why = s->refusal;
    return s->refused;
}
