/*
 * The engine: write path, read path, snapshots, versions, background jobs.
 *
 * State is owned by the loop thread. A background job (flush or compaction) runs on a
 * libuv worker with everything it reads pinned and immutable: a sealed memtable, the
 * version it started from (files, range tombstones), a copy of the snapshot list and of
 * the durable index map. The worker writes the new table files and the new manifest
 * (the base version edited by the job) and never touches a reference count; the loop then
 * installs the new version. One job runs at a time, so the base version is still the
 * current one when the job finishes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/lsm/lsm_int.h"

#define MiB (1024u * 1024)

/* Pacing (see lsm.h): a job works PACE_SLICE_NS of wall time, then sleeps in proportion,
 * at most PACE_SLEEP_MAX_MS at once so that urgency is noticed quickly. Entries between
 * two looks at the clock: */
#define PACE_SLICE_NS     1000000ull
#define PACE_SLEEP_MAX_MS 10
#define PACE_CHECK_EVERY  64

typedef struct waiter {
    struct waiter *next;
    lsm_cb cb;
    void *arg;
    uint64_t target; /* flush: memtable id that must be flushed */
} waiter;

struct lsm_snapshot {
    struct lsm_snapshot *prev, *next;
    uint64_t seq;
};

typedef struct job job;

struct lsm {
    lsm_options o;
    char *dir;
    uv_loop_t *loop;
    table_opts topts;

    memtable *mem;     /* mutable, or NULL */
    memtable **sealed; /* oldest first */
    int nsealed;
    uint64_t next_mem_id;

    version *current;
    cache *cache;
    uint64_t last_seq;
    uint64_t next_file;
    u64map *durable; /* as in the manifest */
    u64map *applied; /* highest index written, memtables included */

    lsm_snapshot snaps; /* sentinel of a list, oldest first */
    int nsnaps;
    int niters;

    job *running;
    int reaping; /* flushed memtables being freed on a worker (see reap_memtable) */
    bool closing;
    lsm_cb close_cb;
    void *close_arg;
    strata_err bg_err; /* sticky */
    int force_compact;
    int level_cursor[LSM_LEVELS];

    waiter *flush_waiters, *compact_waiters, *write_waiters;
    /* lsm_flush callers whose data is in the mutable memtable, which waits to be sealed
     * until sealing it leaves a slot free (see lsm_flush); never set while mem is NULL. */
    waiter *seal_waiters;
    /* Whether the running job must go at full speed (see lsm.h, "Pacing"); written on the
     * loop by note_urgency, read by the worker. */
    atomic_bool bg_urgent;
    lsm_stats st;
};

/* ---- Batches ---- */
enum { OP_PUT = 1, OP_DEL = 2, OP_RANGE = 3 };

struct lsm_batch {
    buf b;
    size_t count;
};

lsm_batch *lsm_batch_new(void)
{
    lsm_batch *b = calloc(1, sizeof *b);
    if (b)
        buf_init(&b->b, 0);
    return b;
}

void lsm_batch_free(lsm_batch *b)
{
    if (b == NULL)
        return;
    buf_free(&b->b);
    free(b);
}

void lsm_batch_clear(lsm_batch *b)
{
    buf_reset(&b->b);
    b->count = 0;
}

size_t lsm_batch_count(const lsm_batch *b)
{
    return b->count;
}

size_t lsm_batch_bytes(const lsm_batch *b)
{
    return b->b.len;
}

static int batch_append(lsm_batch *b, int op, const void *k, size_t kn, const void *v, size_t vn,
                        strata_err *err)
{
    size_t mark = b->b.len;
    buf_put_u8(&b->b, (uint8_t)op);
    buf_put_varint(&b->b, kn);
    buf_append(&b->b, k, kn);
    if (op != OP_DEL) {
        buf_put_varint(&b->b, vn);
        buf_append(&b->b, v, vn);
    }
    if (b->b.failed) {
        b->b.failed = false;
        b->b.len = mark;
        return strata_err_set(err, ERR_NOMEM, "out of memory growing a write batch");
    }
    b->count++;
    return 0;
}

int lsm_batch_put(lsm_batch *b, const void *key, size_t klen, const void *val, size_t vlen,
                  strata_err *err)
{
    if (klen > LSM_MAX_KEY)
        return strata_err_set(err, ERR_VALIDATION, "key of %zu bytes is over the %u limit", klen,
                              LSM_MAX_KEY);
    if (vlen > LSM_MAX_VALUE)
        return strata_err_set(err, ERR_VALIDATION, "value of %zu bytes is over the %u limit", vlen,
                              LSM_MAX_VALUE);
    return batch_append(b, OP_PUT, key, klen, val, vlen, err);
}

int lsm_batch_delete(lsm_batch *b, const void *key, size_t klen, strata_err *err)
{
    if (klen > LSM_MAX_KEY)
        return strata_err_set(err, ERR_VALIDATION, "key of %zu bytes is over the %u limit", klen,
                              LSM_MAX_KEY);
    return batch_append(b, OP_DEL, key, klen, NULL, 0, err);
}

int lsm_batch_delete_range(lsm_batch *b, const void *start, size_t slen, const void *end,
                           size_t elen, strata_err *err)
{
    if (slen > LSM_MAX_KEY || elen > LSM_MAX_KEY)
        return strata_err_set(err, ERR_VALIDATION, "range bound over the %u byte limit",
                              LSM_MAX_KEY);
    if (ukey_cmp(start, slen, end, elen) >= 0)
        return strata_err_set(err, ERR_VALIDATION, "delete_range needs start < end");
    return batch_append(b, OP_RANGE, start, slen, end, elen, err);
}

/* ---- Files and versions ---- */
static void file_path(const lsm *db, uint64_t number, char *out, size_t n)
{
    snprintf(out, n, "%s/%06llu.sst", db->dir, (unsigned long long)number);
}

static void file_unref(file_meta *f)
{
    if (--f->refs > 0)
        return;
    if (f->obsolete) {
        char path[4096];
        file_path(f->db, f->number, path, sizeof path);
        cache_erase_file(f->db->cache, f->number);
        unlink(path);
    }
    table_close(f->t);
    free(f->smallest);
    free(f->largest);
    free(f);
}

static void tombs_free(rtomb *t, int n)
{
    for (int i = 0; i < n; i++)
        free(t[i].start);
    free(t);
}

static void version_unref(version *v)
{
    if (v == NULL || --v->refs > 0)
        return;
    for (int l = 0; l < LSM_LEVELS; l++) {
        for (int i = 0; i < v->nfiles[l]; i++)
            file_unref(v->files[l][i]);
        free(v->files[l]);
    }
    tombs_free(v->tombs, v->ntombs);
    free(v);
}

bool file_overlaps(const file_meta *f, const uint8_t *lo, size_t lon, const uint8_t *hi, size_t hin)
{
    if (hi && ukey_cmp(f->smallest, f->smallest_len - TRAILER_SIZE, hi, hin) > 0)
        return false;
    if (lo && ukey_cmp(f->largest, f->largest_len - TRAILER_SIZE, lo, lon) < 0)
        return false;
    return true;
}

/* Overlap with the half-open range [start, end) of a tombstone. */
static bool file_overlaps_tomb(const file_meta *f, const rtomb *t)
{
    return ukey_cmp(f->smallest, f->smallest_len - TRAILER_SIZE, t->end, t->end_len) < 0 &&
           ukey_cmp(f->largest, f->largest_len - TRAILER_SIZE, t->start, t->start_len) >= 0;
}

static bool file_inside_tomb(const file_meta *f, const rtomb *t)
{
    return ukey_cmp(f->smallest, f->smallest_len - TRAILER_SIZE, t->start, t->start_len) >= 0 &&
           ukey_cmp(f->largest, f->largest_len - TRAILER_SIZE, t->end, t->end_len) < 0;
}

static int cmp_l0(const void *a, const void *b)
{
    const file_meta *x = *(file_meta *const *)a, *y = *(file_meta *const *)b;
    return x->max_seq > y->max_seq ? -1 : x->max_seq < y->max_seq ? 1 : 0;
}

static int cmp_by_key(const void *a, const void *b)
{
    const file_meta *x = *(file_meta *const *)a, *y = *(file_meta *const *)b;
    return ikey_cmp(x->smallest, x->smallest_len, y->smallest, y->smallest_len);
}

static void version_sort(version *v)
{
    for (int l = 0; l < LSM_LEVELS; l++)
        if (v->nfiles[l] > 1)
            qsort(v->files[l], (size_t)v->nfiles[l], sizeof(file_meta *),
                  l == 0 ? cmp_l0 : cmp_by_key);
}

static bool version_add(version *v, int level, file_meta *f)
{
    file_meta **p = realloc(v->files[level], (size_t)(v->nfiles[level] + 1) * sizeof *p);
    if (p == NULL)
        return false;
    v->files[level] = p;
    p[v->nfiles[level]++] = f;
    f->refs++;
    return true;
}

static bool tomb_copy(rtomb *dst, const rtomb *src)
{
    uint8_t *p = malloc(src->start_len + src->end_len + 1);
    if (p == NULL)
        return false;
    memcpy(p, src->start, src->start_len);
    memcpy(p + src->start_len, src->end, src->end_len);
    *dst = (rtomb){.start = p,
                   .start_len = src->start_len,
                   .end = p + src->start_len,
                   .end_len = src->end_len,
                   .seq = src->seq};
    return true;
}

/* ---- Snapshots ---- */
const lsm_snapshot *lsm_snapshot_new(lsm *db)
{
    lsm_snapshot *s = malloc(sizeof *s);
    if (s == NULL)
        return NULL;
    s->seq = db->last_seq;
    s->prev = db->snaps.prev;
    s->next = &db->snaps;
    db->snaps.prev->next = s;
    db->snaps.prev = s;
    db->nsnaps++;
    return s;
}

void lsm_snapshot_release(lsm *db, const lsm_snapshot *snap)
{
    lsm_snapshot *s = (lsm_snapshot *)snap;
    if (s == NULL)
        return;
    s->prev->next = s->next;
    s->next->prev = s->prev;
    db->nsnaps--;
    free(s);
}

uint64_t lsm_snapshot_seq(const lsm_snapshot *snap)
{
    return snap->seq;
}

static uint64_t *snapshot_array(lsm *db, int *n)
{
    uint64_t *a = malloc(((size_t)db->nsnaps + 1) * sizeof *a);
    if (a == NULL)
        return NULL;
    int i = 0;
    for (lsm_snapshot *s = db->snaps.next; s != &db->snaps; s = s->next)
        a[i++] = s->seq; /* appended in seq order, so sorted */
    *n = i;
    return a;
}

/* True if some snapshot s has lo <= s < hi (it needs data of seq >= lo hidden at hi). */
static bool snapshot_between(lsm *db, uint64_t lo, uint64_t hi)
{
    for (lsm_snapshot *s = db->snaps.next; s != &db->snaps; s = s->next)
        if (s->seq >= lo && s->seq < hi)
            return true;
    return false;
}

/* ---- Background jobs ---- */
enum { JOB_FLUSH, JOB_COMPACT };

struct job {
    uv_work_t req;
    lsm *db;
    int kind;
    memtable *mem;      /* flush input (referenced) */
    version *base;      /* referenced */
    file_meta **inputs; /* compaction inputs, merged */
    int ninputs;
    int out_level;
    uint64_t *drops; /* file numbers removed (inputs and whole-file drops) */
    int ndrops;
    file_meta *moved; /* trivial move of one file to out_level */
    uint64_t *snaps;
    int nsnaps;
    rtomb *tombs; /* tombstones the job applies (shallow) */
    int ntombs;
    uint64_t next_file;
    u64map *durable;
    table_opts topts;
    uint64_t file_bytes;
    /* results */
    file_meta **added;
    int *added_level;
    int nadded;
    rtomb *new_tombs; /* owned */
    int new_ntombs;
    uint64_t bytes_written;
    uint64_t slice_start; /* uv_hrtime when the current slice of work began */
    uint64_t paced_ns;    /* slept, pacing */
    strata_err err;
};

static void job_free(job *j)
{
    if (j->mem)
        mem_unref(j->mem);
    version_unref(j->base);
    free(j->inputs);
    free(j->drops);
    free(j->snaps);
    free(j->tombs);
    u64map_free(j->durable);
    for (int i = 0; i < j->nadded; i++) {
        if (j->added[i]->refs == 0) {
            table_close(j->added[i]->t);
            free(j->added[i]->smallest);
            free(j->added[i]->largest);
            free(j->added[i]);
        }
    }
    free(j->added);
    free(j->added_level);
    tombs_free(j->new_tombs, j->new_ntombs);
    free(j);
}

static bool job_drops(const job *j, uint64_t number)
{
    for (int i = 0; i < j->ndrops; i++)
        if (j->drops[i] == number)
            return true;
    return false;
}

/* Newest tombstone covering ukey above seq, or 0 (for clean_seq and dropping). */
static uint64_t min_covering_tomb(const rtomb *tombs, int n, const uint8_t *ukey, size_t un,
                                  uint64_t seq)
{
    uint64_t best = 0;
    for (int i = 0; i < n; i++)
        if (tombs[i].seq > seq && rtomb_covers(&tombs[i], ukey, un) &&
            (best == 0 || tombs[i].seq < best))
            best = tombs[i].seq;
    return best;
}

static bool deeper_has_key(const job *j, const uint8_t *ukey, size_t un)
{
    for (int l = j->out_level + 1; l < LSM_LEVELS; l++)
        for (int i = 0; i < j->base->nfiles[l]; i++)
            if (file_overlaps(j->base->files[l][i], ukey, un, ukey, un))
                return true;
    /* A flush writes level 0 above everything: older files may hold the key. */
    return j->kind == JOB_FLUSH;
}

typedef struct {
    table_builder *tb;
    file_meta *f;
    buf path;
} output;

static int output_open(job *j, output *o)
{
    char path[4096];
    file_meta *f = calloc(1, sizeof *f);
    if (f == NULL)
        return strata_err_set(&j->err, ERR_NOMEM, "out of memory");
    f->number = j->next_file++;
    f->min_seq = SEQ_MAX;
    f->db = j->db;
    file_path(j->db, f->number, path, sizeof path);
    o->tb = tb_new(path, &j->topts, &j->err);
    if (o->tb == NULL) {
        free(f);
        return -1;
    }
    o->f = f;
    return 0;
}

static int output_close(job *j, output *o, uint64_t clean_seq)
{
    file_meta *f = o->f;
    char path[4096], name[64];
    file_path(j->db, f->number, path, sizeof path);
    snprintf(name, sizeof name, "%06llu.sst", (unsigned long long)f->number);
    o->f = NULL;
    if (tb_entries(o->tb) == 0) {
        tb_abandon(o->tb);
        o->tb = NULL;
        free(f->smallest);
        free(f->largest);
        free(f);
        return 0;
    }
    int rc = tb_finish(o->tb, &f->size, &j->err);
    o->tb = NULL;
    if (rc == 0)
        f->t = table_open(path, name, f->number, &j->err);
    if (rc < 0 || f->t == NULL) {
        unlink(path);
        free(f->smallest);
        free(f->largest);
        free(f);
        return -1;
    }
    f->clean_seq = clean_seq;
    j->bytes_written += f->size;
    file_meta **a = realloc(j->added, (size_t)(j->nadded + 1) * sizeof *a);
    int *al = realloc(j->added_level, (size_t)(j->nadded + 1) * sizeof *al);
    if (a)
        j->added = a;
    if (al)
        j->added_level = al;
    if (a == NULL || al == NULL) {
        table_close(f->t);
        unlink(path);
        free(f->smallest);
        free(f->largest);
        free(f);
        return strata_err_set(&j->err, ERR_NOMEM, "out of memory");
    }
    j->added[j->nadded] = f;
    j->added_level[j->nadded++] = j->out_level;
    return 0;
}

static int set_key(uint8_t **p, uint32_t *len, const uint8_t *k, size_t n)
{
    uint8_t *q = realloc(*p, n);
    if (q == NULL)
        return -1;
    memcpy(q, k, n);
    *p = q;
    *len = (uint32_t)n;
    return 0;
}

/* Keeps a job that nothing waits for to background_cpu_pct of one CPU: once a slice of
 * work is done, sleeps for the rest of the slice's share. Wall time, not CPU time: a job
 * that loses its CPU to others is counted as working, so it backs off further exactly
 * when the machine is busiest. */
static void job_pace(job *j)
{
    int pct = j->db->o.background_cpu_pct;
    if (pct >= 100)
        return;
    uint64_t now = uv_hrtime();
    uint64_t worked = now - j->slice_start;
    if (worked < PACE_SLICE_NS)
        return;
    if (!atomic_load_explicit(&j->db->bg_urgent, memory_order_relaxed)) {
        uint64_t rest_ms = worked * (uint64_t)(100 - pct) / (uint64_t)pct / 1000000u;
        if (rest_ms > PACE_SLEEP_MAX_MS)
            rest_ms = PACE_SLEEP_MAX_MS;
        if (rest_ms > 0) {
            uv_sleep((unsigned int)rest_ms);
            uint64_t woke = uv_hrtime();
            j->paced_ns += woke - now;
            now = woke;
        }
    }
    j->slice_start = now;
}

/* Merges `in` into output files, dropping what no reader can see. */
static int write_outputs(job *j, iter *in)
{
    output o = {0};
    buf cur;
    buf_init(&cur, 0);
    int last_stripe = -1; /* stripe of the newest entry seen for `cur` */
    uint64_t max_tomb = 0;
    for (int i = 0; i < j->ntombs; i++)
        if (j->tombs[i].seq > max_tomb)
            max_tomb = j->tombs[i].seq;
    uint64_t clean = max_tomb;
    int rc = 0;
    bool have_key = false;
    unsigned since_pace = 0;
    j->slice_start = uv_hrtime();

    for (in->first(in); in->valid(in); in->next(in)) {
        if (++since_pace == PACE_CHECK_EVERY) {
            since_pace = 0;
            job_pace(j);
        }
        size_t kn, vn;
        const uint8_t *k = in->key(in, &kn);
        const uint8_t *v = in->value(in, &vn);
        size_t un = kn - TRAILER_SIZE;
        uint64_t seq = ikey_seq(k, kn);
        int type = ikey_type(k, kn);
        bool new_key = !have_key || ukey_cmp(cur.data, cur.len, k, un) != 0;
        if (new_key) {
            /* Cut files only between user keys, so levels never split one key's versions. */
            if (o.tb && tb_size_estimate(o.tb) >= j->file_bytes) {
                if (output_close(j, &o, clean) < 0) {
                    rc = -1;
                    break;
                }
                clean = max_tomb;
            }
            buf_reset(&cur);
            buf_append(&cur, k, un);
            if (cur.failed) {
                rc = strata_err_set(&j->err, ERR_NOMEM, "out of memory");
                break;
            }
            have_key = true;
            last_stripe = -1;
        }
        int stripe = snap_stripe(j->snaps, j->nsnaps, seq);
        if (stripe == last_stripe)
            continue; /* a newer version in the same snapshot stripe hides it */
        last_stripe = stripe;
        uint64_t t = j->ntombs ? min_covering_tomb(j->tombs, j->ntombs, k, un, seq) : 0;
        if (t) {
            /* Droppable unless a snapshot s with seq <= s < t still sees it. */
            bool needed = false;
            for (int i = stripe; i < j->nsnaps && j->snaps[i] < t; i++)
                if (j->snaps[i] >= seq) {
                    needed = true;
                    break;
                }
            if (!needed) {
                /* Everything older in this stripe is covered too. */
                continue;
            }
            if (t - 1 < clean)
                clean = t - 1;
        }
        if (type == TYPE_DEL && stripe == 0 && !deeper_has_key(j, k, un))
            continue; /* nothing older below it, no snapshot before it */
        if (o.tb == NULL && output_open(j, &o) < 0) {
            rc = -1;
            break;
        }
        file_meta *f = o.f;
        if (f->smallest == NULL && set_key(&f->smallest, &f->smallest_len, k, kn) < 0) {
            rc = strata_err_set(&j->err, ERR_NOMEM, "out of memory");
            break;
        }
        if (tb_add(o.tb, k, kn, v, vn, &j->err) < 0) {
            rc = -1;
            break;
        }
        if (set_key(&f->largest, &f->largest_len, k, kn) < 0) {
            rc = strata_err_set(&j->err, ERR_NOMEM, "out of memory");
            break;
        }
        if (seq < f->min_seq)
            f->min_seq = seq;
        if (seq > f->max_seq)
            f->max_seq = seq;
    }
    if (rc == 0 && in->status(in, &j->err) < 0)
        rc = -1;
    if (rc == 0 && o.tb)
        rc = output_close(j, &o, clean);
    if (o.tb) {
        tb_abandon(o.tb);
        free(o.f->smallest);
        free(o.f->largest);
        free(o.f);
    }
    buf_free(&cur);
    return rc;
}

static bool tomb_obsolete(const job *j, const rtomb *t)
{
    for (int l = 0; l < LSM_LEVELS; l++) {
        for (int i = 0; i < j->base->nfiles[l]; i++) {
            const file_meta *f = j->base->files[l][i];
            if (job_drops(j, f->number) || f == j->moved)
                continue;
            if (file_overlaps_tomb(f, t) && f->min_seq < t->seq && f->clean_seq < t->seq)
                return false;
        }
    }
    for (int i = 0; i < j->nadded; i++) {
        const file_meta *f = j->added[i];
        if (file_overlaps_tomb(f, t) && f->min_seq < t->seq && f->clean_seq < t->seq)
            return false;
    }
    if (j->moved && file_overlaps_tomb(j->moved, t) && j->moved->min_seq < t->seq &&
        j->moved->clean_seq < t->seq)
        return false;
    return true;
}

static void job_work(uv_work_t *req)
{
    job *j = req->data;
    iter *in = NULL;
    if (j->kind == JOB_FLUSH) {
        in = mem_iter_new_unpinned(j->mem);
    } else if (j->ninputs > 0) {
        iter **kids = calloc((size_t)j->ninputs, sizeof *kids);
        int n = 0;
        for (int i = 0; kids && i < j->ninputs; i++) {
            kids[n] = table_iter_new(j->inputs[i]->t, NULL);
            if (kids[n] == NULL)
                break;
            n++;
        }
        if (kids && n == j->ninputs) {
            in = merge_iter_new(kids, n);
        } else if (kids) {
            for (int i = 0; i < n; i++)
                kids[i]->destroy(kids[i]);
            free(kids);
        }
    }
    if ((j->kind == JOB_FLUSH || j->ninputs > 0) && in == NULL) {
        strata_err_set(&j->err, ERR_NOMEM, "out of memory starting a background job");
        return;
    }
    int rc = in ? write_outputs(j, in) : 0;
    if (in)
        in->destroy(in);
    if (rc < 0)
        goto fail;

    /* Tombstones: the base version's plus the flushed memtable's, minus those with no data
     * left under them. */
    int mt = 0;
    const rtomb *memt = j->kind == JOB_FLUSH ? mem_rtombs(j->mem, &mt) : NULL;
    int total = j->base->ntombs + mt;
    j->new_tombs = calloc((size_t)total + 1, sizeof(rtomb));
    if (j->new_tombs == NULL) {
        strata_err_set(&j->err, ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < total; i++) {
        const rtomb *t = i < j->base->ntombs ? &j->base->tombs[i] : &memt[i - j->base->ntombs];
        if (tomb_obsolete(j, t))
            continue;
        if (!tomb_copy(&j->new_tombs[j->new_ntombs], t)) {
            strata_err_set(&j->err, ERR_NOMEM, "out of memory");
            goto fail;
        }
        j->new_ntombs++;
    }

    if (j->kind == JOB_FLUSH) {
        /* Forgets first: the memtable's indexes were all recorded after them. Older
         * memtables flushed before this one, so their indexes go too. */
        u64map *mf = mem_forgets(j->mem);
        size_t pos = 0;
        uint64_t k, v;
        while (u64map_next(mf, &pos, &k, &v))
            u64map_del(j->durable, k);
        u64map *mi = mem_log_indexes(j->mem);
        pos = 0;
        while (u64map_next(mi, &pos, &k, &v)) {
            if (!u64map_max(j->durable, k, v)) {
                strata_err_set(&j->err, ERR_NOMEM, "out of memory");
                goto fail;
            }
        }
    }

    uint64_t last_seq = 0;
    for (int l = 0; l < LSM_LEVELS; l++)
        for (int i = 0; i < j->base->nfiles[l]; i++)
            if (j->base->files[l][i]->max_seq > last_seq)
                last_seq = j->base->files[l][i]->max_seq;
    for (int i = 0; i < j->nadded; i++)
        if (j->added[i]->max_seq > last_seq)
            last_seq = j->added[i]->max_seq;
    for (int i = 0; i < j->new_ntombs; i++)
        if (j->new_tombs[i].seq > last_seq)
            last_seq = j->new_tombs[i].seq;

    /* A trivial move is a delete plus an add of the same file at its new level. */
    file_meta **added = j->added;
    int *levels = j->added_level;
    int nadded = j->nadded;
    file_meta *mv[1];
    int mvl[1];
    if (j->moved) {
        mv[0] = j->moved;
        mvl[0] = j->out_level;
        added = mv;
        levels = mvl;
        nadded = 1;
    }
    buf m;
    buf_init(&m, 0);
    manifest_encode(&m, j->next_file, last_seq, j->base, j->drops, j->ndrops, added, levels, nadded,
                    j->new_tombs, j->new_ntombs, j->durable);
    if (m.failed) {
        buf_free(&m);
        strata_err_set(&j->err, ERR_NOMEM, "out of memory encoding the manifest");
        goto fail;
    }
    bool renamed;
    rc = manifest_write_file(j->db->dir, m.data, m.len, &renamed, &j->err);
    buf_free(&m);
    /* Once the new MANIFEST is in place it names the outputs (and no longer names a
     * compaction's inputs): deleting them would lose data on the next open. The job
     * still fails, so the error is sticky and nothing more is written. */
    if (rc == 0 || renamed)
        return;
fail:
    for (int i = 0; i < j->nadded; i++) {
        char path[4096];
        file_path(j->db, j->added[i]->number, path, sizeof path);
        unlink(path);
    }
}

static void maybe_schedule(lsm *db);
static void seal(lsm *db);
static void finish_close(lsm *db);

static void call_waiters(waiter **list, const strata_err *err)
{
    waiter *w = *list;
    *list = NULL;
    while (w) {
        waiter *n = w->next;
        w->cb(w->arg, err);
        free(w);
        w = n;
    }
}

/* No memtable can take a write until a flush finishes. */
static bool memtables_full(lsm *db)
{
    bool full = db->mem && mem_bytes(db->mem) >= db->o.memtable_bytes;
    if (db->mem && !full)
        return false;
    return db->nsealed + (full ? 1 : 0) >= db->o.max_memtables;
}

static bool writes_blocked(lsm *db)
{
    if (db->bg_err.code != ERR_NONE)
        return false; /* writes fail at once rather than wait */
    return db->current->nfiles[0] >= db->o.l0_stop_files || memtables_full(db);
}

static void install(lsm *db, job *j)
{
    version *v = calloc(1, sizeof *v);
    bool ok = v != NULL;
    if (ok) {
        v->refs = 1;
        for (int l = 0; l < LSM_LEVELS && ok; l++)
            for (int i = 0; i < db->current->nfiles[l] && ok; i++) {
                file_meta *f = db->current->files[l][i];
                if (!job_drops(j, f->number))
                    ok = version_add(v, l, f);
            }
        for (int i = 0; i < j->nadded && ok; i++)
            ok = version_add(v, j->added_level[i], j->added[i]);
        if (j->moved && ok)
            ok = version_add(v, j->out_level, j->moved);
    }
    if (!ok) {
        /* The manifest already says the new state: only a reopen can get back in step.
         * The job's new files stay the job's (job_free frees those nobody holds): hold
         * them while the half-built version lets go of the ones it took. */
        for (int i = 0; i < j->nadded; i++)
            j->added[i]->refs++;
        version_unref(v);
        for (int i = 0; i < j->nadded; i++)
            j->added[i]->refs--;
        strata_err_set(&db->bg_err, ERR_NOMEM, "out of memory installing a version");
        return;
    }
    version_sort(v);
    v->tombs = j->new_tombs;
    v->ntombs = j->new_ntombs;
    j->new_tombs = NULL;
    j->new_ntombs = 0;
    for (int l = 0; l < LSM_LEVELS; l++)
        for (int i = 0; i < db->current->nfiles[l]; i++) {
            file_meta *f = db->current->files[l][i];
            if (job_drops(j, f->number) && f != j->moved)
                f->obsolete = true;
        }
    version_unref(db->current);
    db->current = v;
    db->next_file = j->next_file;
    u64map_free(db->durable);
    db->durable = j->durable;
    j->durable = NULL;
    if (j->kind == JOB_FLUSH) {
        db->st.flushes++;
        db->st.bytes_flushed += j->bytes_written;
        /* The flushed memtable is the oldest sealed one. */
        mem_unref(db->sealed[0]);
        memmove(db->sealed, db->sealed + 1, (size_t)(db->nsealed - 1) * sizeof *db->sealed);
        db->nsealed--;
        uint64_t id = mem_id(j->mem);
        waiter **pp = &db->flush_waiters;
        while (*pp) {
            waiter *w = *pp;
            if (w->target <= id) {
                *pp = w->next;
                strata_err ok_err = {0};
                w->cb(w->arg, &ok_err);
                free(w);
            } else {
                pp = &w->next;
            }
        }
    } else {
        db->st.compactions++;
        db->st.bytes_compacted += j->bytes_written;
    }
}

/* Whether the running job must go at full speed: someone waits for background work, or
 * writes are about to stall on it (see lsm.h, "Pacing"). */
static bool background_urgent(const lsm *db)
{
    if (db->closing || db->flush_waiters || db->seal_waiters || db->compact_waiters ||
        db->write_waiters || db->force_compact > 0)
        return true;
    bool mem_half = db->mem && mem_bytes(db->mem) * 2 >= db->o.memtable_bytes;
    if (mem_half && db->nsealed + 1 >= db->o.max_memtables)
        return true;
    return db->current->nfiles[0] * 2 >= db->o.l0_stop_files;
}

static void note_urgency(lsm *db)
{
    if (db->running)
        atomic_store_explicit(&db->bg_urgent, background_urgent(db), memory_order_relaxed);
}

/* A flushed memtable held by nothing else is freed on a worker: freeing 64 MiB (chunks
 * handed back with munmap, the index, the log-index maps) took 6.5 ms of the loop. */
typedef struct {
    uv_work_t req;
    lsm *db;
    memtable *mem;
} reaper;

static void reap_work(uv_work_t *req)
{
    reaper *r = req->data;
    mem_unref(r->mem); /* the last reference: no other thread can see the memtable */
}

static void reap_done(uv_work_t *req, int status)
{
    reaper *r = req->data;
    lsm *db = r->db;
    (void)status;
    free(r);
    if (--db->reaping == 0 && db->closing && db->running == NULL)
        finish_close(db);
}

/* Takes the job's reference to its flushed memtable; frees it on a worker if it was the
 * last one (else an iterator still reads it and frees it when done, on the loop). */
static void reap_memtable(lsm *db, job *j)
{
    memtable *m = j->mem;
    if (m == NULL || mem_refs(m) != 1)
        return;
    reaper *r = malloc(sizeof *r);
    if (r == NULL)
        return; /* job_free frees it here */
    *r = (reaper){.db = db, .mem = m};
    r->req.data = r;
    if (uv_queue_work(db->loop, &r->req, reap_work, reap_done) != 0) {
        free(r);
        return;
    }
    j->mem = NULL;
    db->reaping++;
}

static void job_done(uv_work_t *req, int status)
{
    job *j = req->data;
    lsm *db = j->db;
    (void)status;
    db->running = NULL;
    db->st.paced_ms += j->paced_ns / 1000000u;
    if (j->err.code != ERR_NONE) {
        db->bg_err = j->err;
    } else {
        install(db, j);
        reap_memtable(db, j);
    }
    job_free(j);
    if (db->bg_err.code != ERR_NONE) {
        call_waiters(&db->seal_waiters, &db->bg_err);
        call_waiters(&db->flush_waiters, &db->bg_err);
        call_waiters(&db->compact_waiters, &db->bg_err);
        call_waiters(&db->write_waiters, &db->bg_err);
    }
    if (db->closing) {
        if (db->reaping == 0)
            finish_close(db);
        return;
    }
    if (db->seal_waiters && db->nsealed + 1 < db->o.max_memtables)
        seal(db);
    if (db->write_waiters && !writes_blocked(db)) {
        strata_err ok_err = {0};
        call_waiters(&db->write_waiters, &ok_err);
    }
    maybe_schedule(db);
}

static job *job_new(lsm *db, int kind)
{
    job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    j->req.data = j;
    j->db = db;
    j->kind = kind;
    j->base = db->current;
    db->current->refs++;
    j->next_file = db->next_file;
    j->topts = db->topts;
    j->file_bytes = db->o.table_file_bytes;
    j->snaps = snapshot_array(db, &j->nsnaps);
    j->durable = u64map_copy(db->durable);
    if (j->snaps == NULL || j->durable == NULL) {
        job_free(j);
        return NULL;
    }
    return j;
}

static bool job_add_input(job *j, file_meta *f)
{
    file_meta **p = realloc(j->inputs, (size_t)(j->ninputs + 1) * sizeof *p);
    uint64_t *d = realloc(j->drops, (size_t)(j->ndrops + 1) * sizeof *d);
    if (p)
        j->inputs = p;
    if (d)
        j->drops = d;
    if (p == NULL || d == NULL)
        return false;
    j->inputs[j->ninputs++] = f;
    j->drops[j->ndrops++] = f->number;
    return true;
}

static bool job_add_drop(job *j, uint64_t number)
{
    uint64_t *d = realloc(j->drops, (size_t)(j->ndrops + 1) * sizeof *d);
    if (d == NULL)
        return false;
    j->drops = d;
    j->drops[j->ndrops++] = number;
    return true;
}

static uint64_t level_bytes(const version *v, int l)
{
    uint64_t n = 0;
    for (int i = 0; i < v->nfiles[l]; i++)
        n += v->files[l][i]->size;
    return n;
}

static uint64_t level_target(const lsm *db, int l)
{
    uint64_t t = db->o.level1_bytes;
    for (int i = 1; i < l; i++)
        t *= 10;
    return t;
}

/* Adds `f` from `level` and the overlapping files of level + 1 (or of `level` itself for
 * an in-place rewrite). */
static bool pick_level_file(job *j, int level, file_meta *f, bool in_place)
{
    j->out_level = in_place ? level : level + 1;
    if (!job_add_input(j, f))
        return false;
    if (in_place)
        return true;
    const version *v = j->base;
    const uint8_t *lo = f->smallest, *hi = f->largest;
    size_t lon = f->smallest_len - TRAILER_SIZE, hin = f->largest_len - TRAILER_SIZE;
    for (int i = 0; i < v->nfiles[level + 1]; i++) {
        file_meta *g = v->files[level + 1][i];
        if (file_overlaps(g, lo, lon, hi, hin) && !job_add_input(j, g))
            return false;
    }
    return true;
}

static bool pick_l0(job *j)
{
    const version *v = j->base;
    j->out_level = 1;
    const uint8_t *lo = NULL, *hi = NULL;
    size_t lon = 0, hin = 0;
    for (int i = 0; i < v->nfiles[0]; i++) {
        file_meta *f = v->files[0][i];
        if (!job_add_input(j, f))
            return false;
        size_t sn = f->smallest_len - TRAILER_SIZE, ln = f->largest_len - TRAILER_SIZE;
        if (lo == NULL || ukey_cmp(f->smallest, sn, lo, lon) < 0) {
            lo = f->smallest;
            lon = sn;
        }
        if (hi == NULL || ukey_cmp(f->largest, ln, hi, hin) > 0) {
            hi = f->largest;
            hin = ln;
        }
    }
    for (int i = 0; i < v->nfiles[1]; i++) {
        file_meta *g = v->files[1][i];
        if (file_overlaps(g, lo, lon, hi, hin) && !job_add_input(j, g))
            return false;
    }
    return true;
}

/* Decides the next compaction; NULL if none (or out of memory: retried next time). */
static job *pick_compaction(lsm *db, bool force)
{
    version *v = db->current;
    job *j = job_new(db, JOB_COMPACT);
    if (j == NULL)
        return NULL;
    j->tombs = calloc((size_t)v->ntombs + 1, sizeof(rtomb));
    if (j->tombs == NULL)
        goto none;
    if (v->ntombs)
        memcpy(j->tombs, v->tombs, (size_t)v->ntombs * sizeof(rtomb));
    j->ntombs = v->ntombs;

    /* 1. Whole files under a newer range tombstone go without being rewritten. */
    for (int t = 0; t < v->ntombs; t++) {
        const rtomb *tb = &v->tombs[t];
        for (int l = 0; l < LSM_LEVELS; l++)
            for (int i = 0; i < v->nfiles[l]; i++) {
                file_meta *f = v->files[l][i];
                if (f->max_seq < tb->seq && file_inside_tomb(f, tb) &&
                    !snapshot_between(db, f->min_seq, tb->seq) && !job_drops(j, f->number)) {
                    if (!job_add_drop(j, f->number))
                        goto none;
                    db->st.files_dropped_whole++;
                }
            }
    }
    if (j->ndrops > 0)
        return j;

    /* 2. Level 0 into level 1. */
    if (v->nfiles[0] >= db->o.l0_compaction_files || (force && v->nfiles[0] > 0))
        return pick_l0(j) ? j : (job_free(j), NULL);

    /* 3. The level most over its target. */
    int best = -1;
    double best_score = 1.0;
    for (int l = 1; l < LSM_LEVELS - 1; l++) {
        double score = (double)level_bytes(v, l) / (double)level_target(db, l);
        if (score > best_score) {
            best = l;
            best_score = score;
        }
    }
    if (best > 0) {
        int idx = db->level_cursor[best]++ % v->nfiles[best];
        file_meta *f = v->files[best][idx];
        bool overlap = false;
        for (int i = 0; i < v->nfiles[best + 1]; i++)
            overlap |=
                file_overlaps(v->files[best + 1][i], f->smallest, f->smallest_len - TRAILER_SIZE,
                              f->largest, f->largest_len - TRAILER_SIZE);
        if (!overlap && v->ntombs == 0) {
            j->moved = f;
            j->out_level = best + 1;
            return job_add_drop(j, f->number) ? j : (job_free(j), NULL);
        }
        return pick_level_file(j, best, f, false) ? j : (job_free(j), NULL);
    }

    /* 4. A file still holding data under a range tombstone. */
    for (int t = 0; t < v->ntombs; t++) {
        const rtomb *tb = &v->tombs[t];
        for (int l = 0; l < LSM_LEVELS; l++)
            for (int i = 0; i < v->nfiles[l]; i++) {
                file_meta *f = v->files[l][i];
                if (!file_overlaps_tomb(f, tb) || f->min_seq >= tb->seq ||
                    f->clean_seq >= tb->seq || snapshot_between(db, f->min_seq, tb->seq))
                    continue;
                if (l == 0)
                    return pick_l0(j) ? j : (job_free(j), NULL);
                return pick_level_file(j, l, f, true) ? j : (job_free(j), NULL);
            }
    }
none:
    job_free(j);
    return NULL;
}

static job *flush_job(lsm *db)
{
    job *j = job_new(db, JOB_FLUSH);
    if (j == NULL)
        return NULL;
    j->mem = db->sealed[0];
    mem_ref(j->mem);
    j->out_level = 0;
    int mt;
    const rtomb *memt = mem_rtombs(j->mem, &mt);
    j->tombs = calloc((size_t)mt + 1, sizeof(rtomb));
    if (j->tombs == NULL) {
        job_free(j);
        return NULL;
    }
    /* Older tombstones cannot cover a newer memtable: only its own apply. */
    if (mt)
        memcpy(j->tombs, memt, (size_t)mt * sizeof(rtomb));
    j->ntombs = mt;
    return j;
}

static void maybe_schedule(lsm *db)
{
    if (db->running || db->closing || db->bg_err.code != ERR_NONE)
        return;
    job *j = NULL;
    bool may_compact = !db->o.no_compaction || db->force_compact > 0;
    /* A flush is urgent only once the memtables are full (writes are refused). Until then
     * a due compaction goes first: with one job at a time, a steady stream of flushes
     * would otherwise starve compaction, letting level 0 pile up to the stop limit and
     * level 1 grow without bound. */
    if (db->nsealed > 0 && (memtables_full(db) || !may_compact)) {
        j = flush_job(db);
    } else if (may_compact) {
        j = pick_compaction(db, db->force_compact > 0);
        if (j == NULL && db->nsealed > 0)
            j = flush_job(db);
    }
    if (j == NULL && db->nsealed > 0) {
        /* With a memtable sealed, flush_job was tried and fails only for want of memory:
         * whoever waits for a flush hears it now rather than never (the next write, seal
         * or job end tries again). */
        strata_err e;
        strata_err_set(&e, ERR_NOMEM, "out of memory starting a flush");
        call_waiters(&db->flush_waiters, &e);
        return;
    }
    if (j == NULL) {
        if (db->nsealed == 0 && db->force_compact > 0) {
            db->force_compact = 0;
            strata_err ok_err = {0};
            call_waiters(&db->compact_waiters, &ok_err);
        }
        return;
    }
    db->running = j;
    note_urgency(db);
    int rc = uv_queue_work(db->loop, &j->req, job_work, job_done);
    if (rc != 0) {
        db->running = NULL;
        strata_err_set(&db->bg_err, ERR_IO, "uv_queue_work: %s", uv_strerror(rc));
        job_free(j);
    }
}

/* ---- Write path ---- */
/* Seals the mutable memtable without starting its flush: a caller that will wait for the
 * flush adds its waiter first, so the job starts knowing it is urgent. */
static void seal_only(lsm *db)
{
    if (db->mem == NULL)
        return;
    mem_set_id(db->mem, ++db->next_mem_id);
    db->sealed[db->nsealed++] = db->mem;
    db->mem = NULL;
    /* Whoever waited for this memtable to be sealed now waits for its flush. */
    for (waiter *w = db->seal_waiters; w != NULL; w = w->next)
        w->target = db->next_mem_id;
    waiter **tail = &db->seal_waiters;
    while (*tail)
        tail = &(*tail)->next;
    *tail = db->flush_waiters;
    db->flush_waiters = db->seal_waiters;
    db->seal_waiters = NULL;
}

static void seal(lsm *db)
{
    seal_only(db);
    maybe_schedule(db);
}

static int make_room(lsm *db, strata_err *err)
{
    if (db->bg_err.code != ERR_NONE) {
        if (err)
            *err = db->bg_err;
        return -1;
    }
    if (db->current->nfiles[0] >= db->o.l0_stop_files) {
        db->st.write_stalls++;
        return strata_err_set(err, ERR_BUSY, "level 0 has %d files; compaction is behind",
                              db->current->nfiles[0]);
    }
    if (db->mem && mem_bytes(db->mem) >= db->o.memtable_bytes)
        seal(db);
    if (db->mem == NULL) {
        if (db->nsealed >= db->o.max_memtables) {
            db->st.write_stalls++;
            return strata_err_set(err, ERR_BUSY, "memtables full; flush is behind");
        }
        db->mem = mem_new(db->o.memtable_bytes / 16);
        if (db->mem == NULL)
            return strata_err_set(err, ERR_NOMEM, "out of memory creating a memtable");
    }
    return 0;
}

int lsm_write(lsm *db, const lsm_batch *b, uint64_t range_id, uint64_t log_index, strata_err *err)
{
    if (make_room(db, err) < 0)
        return -1;
    rd r;
    rd_init(&r, b->b.data, b->b.len);
    uint64_t seq = db->last_seq;
    while (rd_left(&r) > 0) {
        uint8_t op = rd_u8(&r);
        uint64_t kn = rd_varint(&r);
        const uint8_t *k = rd_bytes(&r, (size_t)kn);
        uint64_t vn = 0;
        const uint8_t *v = NULL;
        if (op != OP_DEL) {
            vn = rd_varint(&r);
            v = rd_bytes(&r, (size_t)vn);
        }
        bool ok = !r.failed;
        seq++;
        if (ok && op == OP_RANGE)
            ok = mem_add_rtomb(db->mem, seq, k, (size_t)kn, v, (size_t)vn);
        else if (ok)
            ok = mem_add(db->mem, seq, op == OP_PUT ? TYPE_PUT : TYPE_DEL, k, (size_t)kn, v,
                         (size_t)vn);
        if (!ok) {
            /* Part of the batch is in the memtable: stop taking writes (and never flush
             * it); the replicated log replays after a reopen. */
            strata_err_set(&db->bg_err, ERR_NOMEM, "out of memory applying a write batch");
            if (err)
                *err = db->bg_err;
            return -1;
        }
    }
    if (log_index > 0 && (!u64map_max(mem_log_indexes(db->mem), range_id, log_index) ||
                          !u64map_max(db->applied, range_id, log_index))) {
        strata_err_set(&db->bg_err, ERR_NOMEM, "out of memory recording a log index");
        if (err)
            *err = db->bg_err;
        return -1;
    }
    db->last_seq = seq;
    note_urgency(db);
    return 0;
}

int lsm_write_forget(lsm *db, const lsm_batch *b, uint64_t range_id, strata_err *err)
{
    if (lsm_write(db, b, 0, 0, err) < 0)
        return -1;
    /* The write made sure a mutable memtable exists; the forget joins the batch in it. */
    u64map_del(mem_log_indexes(db->mem), range_id);
    u64map_del(db->applied, range_id);
    if (!u64map_max(mem_forgets(db->mem), range_id, 1)) {
        strata_err_set(&db->bg_err, ERR_NOMEM, "out of memory forgetting a log index");
        if (err)
            *err = db->bg_err;
        return -1;
    }
    return 0;
}

void lsm_on_writable(lsm *db, lsm_cb cb, void *arg)
{
    if (!writes_blocked(db) || db->closing) {
        cb(arg, &db->bg_err);
        return;
    }
    waiter *w = calloc(1, sizeof *w);
    if (w == NULL) {
        strata_err e;
        strata_err_set(&e, ERR_NOMEM, "out of memory");
        cb(arg, &e);
        return;
    }
    w->cb = cb;
    w->arg = arg;
    w->next = db->write_waiters;
    db->write_waiters = w;
    note_urgency(db);
}

/* ---- Read path ---- */
static bool tomb_hides(const rtomb *t, int n, const void *key, size_t klen, uint64_t eseq,
                       uint64_t snap)
{
    for (int i = 0; i < n; i++)
        if (t[i].seq > eseq && t[i].seq <= snap && rtomb_covers(&t[i], key, klen))
            return true;
    return false;
}

static bool mem_hides(memtable *m, const void *key, size_t klen, uint64_t eseq, uint64_t snap)
{
    int n;
    const rtomb *t = mem_rtombs(m, &n);
    return n > 0 && tomb_hides(t, n, key, klen, eseq, snap);
}

int lsm_get(lsm *db, const lsm_snapshot *snap, const void *key, size_t klen, buf *value_out,
            strata_err *err)
{
    uint64_t seq = snap ? snap->seq : db->last_seq;
    uint64_t eseq = 0;
    int type = TYPE_DEL, found = 0;
    memtable *mems[64];
    int nm = 0;
    if (db->mem)
        mems[nm++] = db->mem;
    for (int i = db->nsealed - 1; i >= 0 && nm < 64; i--)
        mems[nm++] = db->sealed[i];
    for (int i = 0; i < nm && !found; i++) {
        const uint8_t *v;
        size_t vn;
        found = mem_get(mems[i], key, klen, seq, &eseq, &type, &v, &vn);
        if (found < 0)
            return strata_err_set(err, ERR_NOMEM, "out of memory");
        if (found && type == TYPE_PUT) {
            buf_reset(value_out);
            buf_append(value_out, v, vn);
            if (value_out->failed)
                return strata_err_set(err, ERR_NOMEM, "out of memory copying a value");
        }
    }
    version *v = db->current;
    for (int i = 0; i < v->nfiles[0] && !found; i++) {
        file_meta *f = v->files[0][i];
        if (f->min_seq > seq || !file_overlaps(f, key, klen, key, klen))
            continue;
        found = table_get(f->t, db->cache, key, klen, seq, &eseq, &type, value_out, err);
        if (found < 0)
            return -1;
    }
    for (int l = 1; l < LSM_LEVELS && !found; l++) {
        int lo = 0, hi = v->nfiles[l];
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            const file_meta *f = v->files[l][mid];
            if (ukey_cmp(f->largest, f->largest_len - TRAILER_SIZE, key, klen) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < v->nfiles[l] && file_overlaps(v->files[l][lo], key, klen, key, klen)) {
            found = table_get(v->files[l][lo]->t, db->cache, key, klen, seq, &eseq, &type,
                              value_out, err);
            if (found < 0)
                return -1;
        }
    }
    if (!found || type != TYPE_PUT)
        return 0;
    if (v->ntombs && tomb_hides(v->tombs, v->ntombs, key, klen, eseq, seq))
        return 0;
    for (int i = 0; i < nm; i++)
        if (mem_hides(mems[i], key, klen, eseq, seq))
            return 0;
    return 1;
}

/* ---- Iterators ---- */
struct lsm_iter {
    lsm *db;
    version *v;
    memtable **mems;
    int nmems;
    iter *in;
    uint64_t seq;
    rtomb *tombs; /* shallow copies of the pinned sources' tombstones */
    int ntombs;
    buf lower, upper;
    bool has_lower, has_upper;
    bool valid;
    bool forward;
    buf saved_key, saved_val; /* reverse: the current entry */
    strata_err err;
};

static bool it_hidden(const lsm_iter *it, const uint8_t *ukey, size_t un, uint64_t eseq)
{
    return it->ntombs > 0 && tomb_hides(it->tombs, it->ntombs, ukey, un, eseq, it->seq);
}

static bool it_check(lsm_iter *it)
{
    if (it->err.code == ERR_NONE && it->in->status(it->in, &it->err) == 0)
        return true;
    it->valid = false;
    return false;
}

static bool past_upper(const lsm_iter *it, const uint8_t *k, size_t n)
{
    return it->has_upper && ukey_cmp(k, n, it->upper.data, it->upper.len) >= 0;
}

static bool before_lower(const lsm_iter *it, const uint8_t *k, size_t n)
{
    return it->has_lower && ukey_cmp(k, n, it->lower.data, it->lower.len) < 0;
}

/* Forward: from the internal position, the first visible live user key (skipping any
 * entries of `skip` when given). */
static void find_next(lsm_iter *it, bool skipping, buf *skip)
{
    iter *in = it->in;
    for (; in->valid(in); in->next(in)) {
        size_t kn;
        const uint8_t *k = in->key(in, &kn);
        size_t un = kn - TRAILER_SIZE;
        uint64_t tr = trailer_get(k, kn);
        uint64_t seq = tr >> 8;
        if (seq > it->seq)
            continue;
        if (skipping && ukey_cmp(k, un, skip->data, skip->len) <= 0)
            continue;
        if (past_upper(it, k, un))
            break;
        if ((tr & 0xff) == TYPE_DEL || it_hidden(it, k, un, seq)) {
            buf_reset(skip);
            buf_append(skip, k, un);
            skipping = true;
            continue;
        }
        it->valid = true;
        it_check(it);
        return;
    }
    it->valid = false;
    it_check(it);
}

/* Reverse: the internal iterator ends just before the entries of the user key returned,
 * which is copied into saved_key / saved_val. */
static void find_prev(lsm_iter *it)
{
    iter *in = it->in;
    int type = TYPE_DEL;
    while (in->valid(in)) {
        size_t kn;
        const uint8_t *k = in->key(in, &kn);
        size_t un = kn - TRAILER_SIZE;
        uint64_t tr = trailer_get(k, kn);
        uint64_t seq = tr >> 8;
        if (seq <= it->seq) {
            if (type != TYPE_DEL && ukey_cmp(k, un, it->saved_key.data, it->saved_key.len) < 0)
                break; /* passed the newest visible entry of the saved key */
            if (before_lower(it, k, un))
                break;
            type = (int)(tr & 0xff);
            if (type == TYPE_DEL || it_hidden(it, k, un, seq)) {
                type = TYPE_DEL;
                buf_reset(&it->saved_key);
                buf_reset(&it->saved_val);
            } else {
                size_t vn;
                const uint8_t *v = in->value(in, &vn);
                buf_reset(&it->saved_key);
                buf_append(&it->saved_key, k, un);
                buf_reset(&it->saved_val);
                buf_append(&it->saved_val, v, vn);
                if (it->saved_key.failed || it->saved_val.failed) {
                    strata_err_set(&it->err, ERR_NOMEM, "out of memory in an iterator");
                    it->valid = false;
                    return;
                }
            }
        }
        in->prev(in);
    }
    it->valid = type != TYPE_DEL;
    if (!it->valid) {
        buf_reset(&it->saved_key);
        buf_reset(&it->saved_val);
    }
    it_check(it);
}

static void seek_internal(lsm_iter *it, const void *ukey, size_t n, uint64_t seq, int type)
{
    buf k;
    buf_init(&k, 0);
    ikey_build(&k, ukey, n, seq, type);
    if (k.failed) {
        strata_err_set(&it->err, ERR_NOMEM, "out of memory in an iterator");
        it->valid = false;
    } else {
        it->in->seek(it->in, k.data, k.len);
    }
    buf_free(&k);
}

void lsm_iter_seek(lsm_iter *it, const void *key, size_t klen)
{
    if (it->err.code)
        return;
    it->forward = true;
    if (before_lower(it, key, klen)) {
        key = it->lower.data;
        klen = it->lower.len;
    }
    seek_internal(it, key, klen, it->seq, TYPE_PUT);
    if (it->err.code == ERR_NONE)
        find_next(it, false, &it->saved_key);
}

void lsm_iter_first(lsm_iter *it)
{
    if (it->err.code)
        return;
    if (it->has_lower) {
        lsm_iter_seek(it, it->lower.data, it->lower.len);
        return;
    }
    it->forward = true;
    it->in->first(it->in);
    find_next(it, false, &it->saved_key);
}

void lsm_iter_seek_for_prev(lsm_iter *it, const void *key, size_t klen)
{
    if (it->err.code)
        return;
    it->forward = false;
    buf_reset(&it->saved_key);
    if (it->has_upper && ukey_cmp(key, klen, it->upper.data, it->upper.len) >= 0) {
        /* The last key < upper: everything from (upper, newest) on is out. */
        seek_internal(it, it->upper.data, it->upper.len, SEQ_MAX, TYPE_PUT);
    } else {
        /* (key, 0) sorts after every real entry of key. */
        seek_internal(it, key, klen, 0, TYPE_DEL);
    }
    if (it->err.code)
        return;
    if (it->in->valid(it->in))
        it->in->prev(it->in);
    else
        it->in->last(it->in);
    find_prev(it);
}

void lsm_iter_last(lsm_iter *it)
{
    if (it->err.code)
        return;
    if (it->has_upper) {
        lsm_iter_seek_for_prev(it, it->upper.data, it->upper.len);
        return;
    }
    it->forward = false;
    buf_reset(&it->saved_key);
    it->in->last(it->in);
    find_prev(it);
}

void lsm_iter_next(lsm_iter *it)
{
    if (!it->valid)
        return;
    iter *in = it->in;
    if (!it->forward) {
        /* The internal iterator is before the current key's entries: step into them and
         * skip them (saved_key holds the key). */
        it->forward = true;
        if (!in->valid(in))
            in->first(in);
        else
            in->next(in);
    } else {
        size_t kn;
        const uint8_t *k = in->key(in, &kn);
        buf_reset(&it->saved_key);
        buf_append(&it->saved_key, k, kn - TRAILER_SIZE);
        in->next(in);
    }
    find_next(it, true, &it->saved_key);
}

void lsm_iter_prev(lsm_iter *it)
{
    if (!it->valid)
        return;
    iter *in = it->in;
    if (it->forward) {
        /* Walk back past every entry of the current key. */
        size_t kn;
        const uint8_t *k = in->key(in, &kn);
        buf_reset(&it->saved_key);
        buf_append(&it->saved_key, k, kn - TRAILER_SIZE);
        for (;;) {
            in->prev(in);
            if (!in->valid(in))
                break;
            k = in->key(in, &kn);
            if (ukey_cmp(k, kn - TRAILER_SIZE, it->saved_key.data, it->saved_key.len) < 0)
                break;
        }
        it->forward = false;
        if (!in->valid(in)) {
            it->valid = false;
            buf_reset(&it->saved_key);
            it_check(it);
            return;
        }
    }
    find_prev(it);
}

bool lsm_iter_valid(const lsm_iter *it)
{
    return it->valid && it->err.code == ERR_NONE;
}

const void *lsm_iter_key(const lsm_iter *it, size_t *len)
{
    if (!it->forward) {
        *len = it->saved_key.len;
        return it->saved_key.data;
    }
    size_t kn;
    const uint8_t *k = it->in->key(it->in, &kn);
    *len = kn - TRAILER_SIZE;
    return k;
}

const void *lsm_iter_value(const lsm_iter *it, size_t *len)
{
    if (!it->forward) {
        *len = it->saved_val.len;
        return it->saved_val.data;
    }
    return it->in->value(it->in, len);
}

int lsm_iter_status(const lsm_iter *it, strata_err *err)
{
    if (it->err.code == ERR_NONE)
        return 0;
    if (err)
        *err = it->err;
    return -1;
}

void lsm_iter_free(lsm_iter *it)
{
    if (it == NULL)
        return;
    if (it->in)
        it->in->destroy(it->in);
    for (int i = 0; i < it->nmems; i++)
        mem_unref(it->mems[i]);
    free(it->mems);
    version_unref(it->v);
    free(it->tombs);
    buf_free(&it->lower);
    buf_free(&it->upper);
    buf_free(&it->saved_key);
    buf_free(&it->saved_val);
    it->db->niters--;
    free(it);
}

lsm_iter *lsm_iter_new(lsm *db, const lsm_iter_options *o, strata_err *err)
{
    lsm_iter *it = calloc(1, sizeof *it);
    if (it == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory creating an iterator");
        return NULL;
    }
    db->niters++;
    it->db = db;
    buf_init(&it->lower, 0);
    buf_init(&it->upper, 0);
    buf_init(&it->saved_key, 0);
    buf_init(&it->saved_val, 0);
    it->forward = true;
    it->seq = o && o->snapshot ? o->snapshot->seq : db->last_seq;
    if (o && o->lower) {
        it->has_lower = true;
        buf_append(&it->lower, o->lower, o->lower_len);
    }
    if (o && o->upper) {
        it->has_upper = true;
        buf_append(&it->upper, o->upper, o->upper_len);
    }
    version *v = db->current;
    it->v = v;
    v->refs++;
    int nm = (db->mem ? 1 : 0) + db->nsealed;
    int nkids = nm + v->nfiles[0] + LSM_LEVELS - 1;
    iter **kids = calloc((size_t)nkids + 1, sizeof *kids);
    it->mems = calloc((size_t)nm + 1, sizeof *it->mems);
    int ntombs;
    if (kids == NULL || it->mems == NULL || it->lower.failed || it->upper.failed)
        goto nomem;
    if (db->mem)
        it->mems[it->nmems++] = db->mem;
    for (int i = db->nsealed - 1; i >= 0; i--)
        it->mems[it->nmems++] = db->sealed[i];
    for (int i = 0; i < it->nmems; i++)
        mem_ref(it->mems[i]);
    ntombs = v->ntombs;
    for (int i = 0; i < it->nmems; i++) {
        int n;
        mem_rtombs(it->mems[i], &n);
        ntombs += n;
    }
    it->tombs = calloc((size_t)ntombs + 1, sizeof(rtomb));
    if (it->tombs == NULL)
        goto nomem;
    if (v->ntombs)
        memcpy(it->tombs, v->tombs, (size_t)v->ntombs * sizeof(rtomb));
    it->ntombs = v->ntombs;
    for (int i = 0; i < it->nmems; i++) {
        int n;
        const rtomb *t = mem_rtombs(it->mems[i], &n);
        /* The mutable memtable may gain tombstones later; those have seq > it->seq. */
        if (n)
            memcpy(it->tombs + it->ntombs, t, (size_t)n * sizeof(rtomb));
        it->ntombs += n;
    }
    int n = 0;
    for (int i = 0; i < it->nmems; i++)
        if ((kids[n] = mem_iter_new(it->mems[i])) != NULL)
            n++;
    for (int i = 0; i < v->nfiles[0]; i++)
        if ((kids[n] = table_iter_new(v->files[0][i]->t, db->cache)) != NULL)
            n++;
    for (int l = 1; l < LSM_LEVELS; l++)
        if (v->nfiles[l] > 0 &&
            (kids[n] = level_iter_new(v->files[l], v->nfiles[l], db->cache)) != NULL)
            n++;
    int want = it->nmems + v->nfiles[0];
    for (int l = 1; l < LSM_LEVELS; l++)
        want += v->nfiles[l] > 0;
    if (n != want) {
        for (int i = 0; i < n; i++)
            kids[i]->destroy(kids[i]);
        free(kids);
        kids = NULL;
        goto nomem;
    }
    it->in = merge_iter_new(kids, n);
    if (it->in == NULL)
        goto nomem;
    return it;
nomem:
    free(kids);
    lsm_iter_free(it);
    strata_err_set(err, ERR_NOMEM, "out of memory creating an iterator");
    return NULL;
}

/* ---- Durability and maintenance ---- */
uint64_t lsm_durable_index(lsm *db, uint64_t range_id)
{
    return u64map_get(db->durable, range_id);
}

uint64_t lsm_applied_index(lsm *db, uint64_t range_id)
{
    return u64map_get(db->applied, range_id);
}

void lsm_durable_foreach(lsm *db, void (*fn)(void *arg, uint64_t range_id, uint64_t index),
                         void *arg)
{
    size_t pos = 0;
    uint64_t k, v;
    while (u64map_next(db->durable, &pos, &k, &v))
        fn(arg, k, v);
}

static bool add_waiter(waiter **list, lsm_cb cb, void *arg, uint64_t target)
{
    waiter *w = calloc(1, sizeof *w);
    if (w == NULL)
        return false;
    w->cb = cb;
    w->arg = arg;
    w->target = target;
    w->next = *list;
    *list = w;
    return true;
}

/* Adds a waiter for background work, which then goes at full speed. */
static bool add_bg_waiter(lsm *db, waiter **list, lsm_cb cb, void *arg, uint64_t target)
{
    if (!add_waiter(list, cb, arg, target))
        return false;
    note_urgency(db);
    return true;
}

void lsm_flush(lsm *db, lsm_cb cb, void *arg)
{
    strata_err e = {0};
    if (db->bg_err.code != ERR_NONE || db->closing) {
        if (db->closing)
            strata_err_set(&e, ERR_UNAVAILABLE, "engine is closing");
        cb(arg, db->bg_err.code ? &db->bg_err : &e);
        return;
    }
    if (db->mem && mem_count(db->mem) == 0 && u64map_count(mem_log_indexes(db->mem)) == 0 &&
        u64map_count(mem_forgets(db->mem)) == 0) {
        mem_unref(db->mem);
        db->mem = NULL;
    }
    /* Sealing the memtable into the last free slot while an older one waits for its flush
     * would leave nothing to write to until that flush ends: every write would stall. It
     * stays mutable instead, and is sealed as soon as a flush frees a slot (job_done). */
    if (db->mem && db->nsealed > 0 && db->nsealed + 1 >= db->o.max_memtables) {
        if (!add_bg_waiter(db, &db->seal_waiters, cb, arg, 0)) {
            strata_err_set(&e, ERR_NOMEM, "out of memory");
            cb(arg, &e);
            return;
        }
        maybe_schedule(db);
        return;
    }
    /* A mutable memtable exists only if a slot was free for it, so sealing always fits. */
    if (db->mem)
        seal_only(db);
    if (db->nsealed == 0) {
        cb(arg, &e);
        return;
    }
    if (!add_bg_waiter(db, &db->flush_waiters, cb, arg, mem_id(db->sealed[db->nsealed - 1]))) {
        strata_err_set(&e, ERR_NOMEM, "out of memory");
        cb(arg, &e);
        maybe_schedule(db); /* the sealed memtable still needs its flush */
        return;
    }
    maybe_schedule(db);
}

void lsm_compact(lsm *db, lsm_cb cb, void *arg)
{
    strata_err e = {0};
    if (db->bg_err.code != ERR_NONE || db->closing) {
        if (db->closing)
            strata_err_set(&e, ERR_UNAVAILABLE, "engine is closing");
        cb(arg, db->bg_err.code ? &db->bg_err : &e);
        return;
    }
    if (db->mem && mem_count(db->mem) > 0)
        seal_only(db);
    if (!add_bg_waiter(db, &db->compact_waiters, cb, arg, 0)) {
        strata_err_set(&e, ERR_NOMEM, "out of memory");
        cb(arg, &e);
        maybe_schedule(db); /* the sealed memtable still needs its flush */
        return;
    }
    db->force_compact++;
    maybe_schedule(db);
}

bool lsm_failed(const lsm *db, strata_err *why)
{
    if (db->bg_err.code != ERR_NONE && why != NULL)
        *why = db->bg_err;
    return db->bg_err.code != ERR_NONE;
}

void lsm_get_stats(lsm *db, lsm_stats *out)
{
    *out = db->st;
    out->memtable_bytes = 0;
    out->memtables = 0;
    if (db->mem) {
        out->memtable_bytes += mem_reserved(db->mem);
        out->memtables++;
    }
    for (int i = 0; i < db->nsealed; i++) {
        out->memtable_bytes += mem_reserved(db->sealed[i]);
        out->memtables++;
    }
    out->block_cache_bytes = cache_charge(db->cache);
    cache_stats(db->cache, &out->cache_hits, &out->cache_misses);
    out->table_meta_bytes = 0;
    for (int l = 0; l < LSM_LEVELS; l++) {
        out->files[l] = db->current->nfiles[l];
        out->level_bytes[l] = level_bytes(db->current, l);
        for (int i = 0; i < db->current->nfiles[l]; i++)
            out->table_meta_bytes += table_meta_bytes(db->current->files[l][i]->t);
    }
    out->last_seq = db->last_seq;
    out->range_tombstones = db->current->ntombs;
    out->snapshots = db->nsnaps;
    out->iterators = db->niters;
}

/* ---- Open and close ---- */
static int read_file(const char *path, uint8_t **out, size_t *len, strata_err *err)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        if (errno == ENOENT)
            return 0;
        return strata_err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
    }
    buf b;
    buf_init(&b, 256u * MiB);
    uint8_t tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, fp)) > 0)
        buf_append(&b, tmp, n);
    int bad = ferror(fp);
    fclose(fp);
    if (bad || b.failed) {
        buf_free(&b);
        return strata_err_set(err, bad ? ERR_IO : ERR_NOMEM, "read %s failed", path);
    }
    *out = buf_steal(&b, len);
    if (*out == NULL)
        *out = malloc(1);
    return 1;
}

static int load_manifest(lsm *db, strata_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/MANIFEST", db->dir);
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = read_file(path, &data, &len, err);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        db->next_file = 1;
        return 0;
    }
    manifest m;
    if (manifest_decode(data, len, &m, err) < 0) {
        free(data);
        return -1;
    }
    db->next_file = m.next_file;
    db->last_seq = m.last_seq;
    u64map_free(db->durable);
    db->durable = m.durable;
    m.durable = NULL;
    version *v = db->current;
    rc = 0;
    for (int i = 0; i < m.nfiles && rc == 0; i++) {
        const struct mf_file *mf = &m.files[i];
        char name[64];
        snprintf(name, sizeof name, "%06llu.sst", (unsigned long long)mf->number);
        file_meta *f = calloc(1, sizeof *f);
        if (f == NULL) {
            rc = strata_err_set(err, ERR_NOMEM, "out of memory");
            break;
        }
        f->db = db;
        f->number = mf->number;
        f->size = mf->size;
        f->min_seq = mf->min_seq;
        f->max_seq = mf->max_seq;
        f->clean_seq = mf->clean_seq;
        if (set_key(&f->smallest, &f->smallest_len, mf->smallest, mf->smallest_len) < 0 ||
            set_key(&f->largest, &f->largest_len, mf->largest, mf->largest_len) < 0) {
            free(f->smallest);
            free(f->largest);
            free(f);
            rc = strata_err_set(err, ERR_NOMEM, "out of memory");
            break;
        }
        file_path(db, f->number, path, sizeof path);
        f->t = table_open(path, name, f->number, err);
        if (f->t && table_file_size(f->t) != f->size) {
            rc = strata_err_set(err, ERR_CORRUPT, "%s: size %llu, manifest says %llu", name,
                                (unsigned long long)table_file_size(f->t),
                                (unsigned long long)f->size);
        }
        if (f->t == NULL)
            rc = -1;
        if (!version_add(v, mf->level, f)) {
            table_close(f->t);
            free(f->smallest);
            free(f->largest);
            free(f);
            rc = rc ? rc : strata_err_set(err, ERR_NOMEM, "out of memory");
        }
        if (mf->max_seq > db->last_seq)
            db->last_seq = mf->max_seq;
    }
    if (rc == 0) {
        v->tombs = calloc((size_t)m.ntombs + 1, sizeof(rtomb));
        if (v->tombs == NULL)
            rc = strata_err_set(err, ERR_NOMEM, "out of memory");
        for (int i = 0; rc == 0 && i < m.ntombs; i++) {
            if (!tomb_copy(&v->tombs[i], &m.tombs[i]))
                rc = strata_err_set(err, ERR_NOMEM, "out of memory");
            else
                v->ntombs++;
            if (m.tombs[i].seq > db->last_seq)
                db->last_seq = m.tombs[i].seq;
        }
    }
    version_sort(v);
    manifest_clear(&m);
    free(data);
    return rc;
}

/* Files the manifest does not name are leftovers of a crash mid-job. */
static void remove_orphans(lsm *db)
{
    DIR *d = opendir(db->dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        unsigned long long num;
        bool orphan = strcmp(e->d_name, "MANIFEST.tmp") == 0;
        int end = 0;
        /* Exactly "<digits>.sst": never another file that merely starts like one. */
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
            sscanf(e->d_name, "%llu.sst%n", &num, &end) == 1 && end > 0 &&
            e->d_name[end] == '\0') {
            orphan = true;
            for (int l = 0; l < LSM_LEVELS; l++)
                for (int i = 0; i < db->current->nfiles[l]; i++)
                    if (db->current->files[l][i]->number == num)
                        orphan = false;
        }
        if (orphan) {
            snprintf(path, sizeof path, "%s/%s", db->dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

static void db_free(lsm *db)
{
    mem_unref(db->mem);
    for (int i = 0; i < db->nsealed; i++)
        mem_unref(db->sealed[i]);
    free(db->sealed);
    version_unref(db->current);
    cache_free(db->cache);
    u64map_free(db->durable);
    u64map_free(db->applied);
    while (db->snaps.next && db->snaps.next != &db->snaps)
        lsm_snapshot_release(db, db->snaps.next);
    free(db->dir);
    free(db);
}

int lsm_open(const lsm_options *opts, uv_loop_t *loop, lsm **out, strata_err *err)
{
    if (opts == NULL || opts->dir == NULL || opts->dir[0] == '\0')
        return strata_err_set(err, ERR_VALIDATION, "lsm_open: no directory");
    if (opts->max_memtables == 1 || opts->max_memtables < 0 || opts->max_memtables > 16 ||
        opts->l0_compaction_files < 0 || opts->l0_stop_files < 0)
        return strata_err_set(err, ERR_VALIDATION, "lsm_open: bad memtable or level-0 limits");
    if (opts->background_cpu_pct < 0 || opts->background_cpu_pct > 100)
        return strata_err_set(err, ERR_VALIDATION, "lsm_open: background_cpu_pct is not 1..100");
    lsm *db = calloc(1, sizeof *db);
    if (db == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    db->o = *opts;
    db->o.dir = NULL;
    /* 16 MiB, not RocksDB's 64: a node's write path got slower as its memtable grew (it
     * touches a bigger, colder memory: the memtable, and the Raft log held until the flush
     * lets it be compacted), and recovered after each flush. With 16 MiB PutItem through a
     * 3-node cluster ran at ~19k/s, p99 7.7 ms, against ~17k/s, p99 8.4 ms (bench_timeline,
     * 30 s, 4 rounds alternated); a random fill of the engine alone was no slower
     * (bench_lsm, with the level 1 below); and the memory bound drops by 96 MiB.
     * tests/bench/cluster/README.md, "A smaller memtable". */
    if (!db->o.memtable_bytes)
        db->o.memtable_bytes = 16 * MiB;
    if (!db->o.max_memtables)
        db->o.max_memtables = 2;
    if (!db->o.block_cache_bytes)
        db->o.block_cache_bytes = 64 * MiB;
    if (!db->o.bloom_bits_per_key)
        db->o.bloom_bits_per_key = 10;
    if (!db->o.block_bytes)
        db->o.block_bytes = 4096;
    if (!db->o.table_file_bytes)
        db->o.table_file_bytes = 64 * MiB;
    if (!db->o.l0_compaction_files)
        db->o.l0_compaction_files = 4;
    if (!db->o.l0_stop_files)
        db->o.l0_stop_files = 20;
    if (!db->o.background_cpu_pct)
        db->o.background_cpu_pct = 20;
    if (db->o.l0_stop_files <= db->o.l0_compaction_files)
        db->o.l0_stop_files = db->o.l0_compaction_files + 1;
    /* Level 1 about as big as the level-0 files that start a compaction (4 x 16 MiB), so
     * that merging them rewrites little more than they hold; with 256 MiB under 16 MiB
     * memtables a random fill of 5M keys ran 255k and 285k puts/s, with 64 MiB 338k and
     * 306k (bench_lsm, its options edited; 64 MiB memtables and 256 MiB: 302k, 337k). */
    if (!db->o.level1_bytes)
        db->o.level1_bytes = 64ull * MiB;
    db->topts = (table_opts){.block_bytes = db->o.block_bytes,
                             .bloom_bits_per_key = db->o.bloom_bits_per_key,
                             .no_compression = db->o.no_compression};
    db->loop = loop;
    db->snaps.next = db->snaps.prev = &db->snaps;
    db->dir = strdup(opts->dir);
    db->sealed = calloc((size_t)db->o.max_memtables + 1, sizeof *db->sealed);
    db->current = calloc(1, sizeof *db->current);
    db->cache = cache_new(db->o.block_cache_bytes);
    db->durable = u64map_new();
    db->applied = u64map_new();
    if (!db->dir || !db->sealed || !db->current || !db->cache || !db->durable || !db->applied) {
        db_free(db);
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    db->current->refs = 1;
    if (mkdir(opts->dir, 0755) < 0 && errno != EEXIST) {
        strata_err_set(err, ERR_IO, "mkdir %s: %s", opts->dir, strerror(errno));
        db_free(db);
        return -1;
    }
    if (load_manifest(db, err) < 0) {
        db_free(db);
        return -1;
    }
    remove_orphans(db);
    u64map_free(db->applied);
    db->applied = u64map_copy(db->durable);
    if (db->applied == NULL) {
        db_free(db);
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    *out = db;
    return 0;
}

static void finish_close(lsm *db)
{
    strata_err e;
    strata_err_set(&e, ERR_UNAVAILABLE, "engine closed");
    call_waiters(&db->seal_waiters, &e);
    call_waiters(&db->flush_waiters, &e);
    call_waiters(&db->compact_waiters, &e);
    call_waiters(&db->write_waiters, &e);
    lsm_cb cb = db->close_cb;
    void *arg = db->close_arg;
    db_free(db);
    if (cb) {
        strata_err ok_err = {0};
        cb(arg, &ok_err);
    }
}

void lsm_close(lsm *db, lsm_cb cb, void *arg)
{
    if (db == NULL)
        return;
    db->closing = true;
    db->close_cb = cb;
    db->close_arg = arg;
    note_urgency(db);
    if (db->running == NULL && db->reaping == 0)
        finish_close(db);
}
