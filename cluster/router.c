/*
 * router.c: the single-node router. Every partition of the node is served from the
 * node's engine, made durable through the node's log.
 *
 * Every write (catalog record or partition command) goes through one FIFO, the apply
 * queue: appended to the log under its group, applied once its log write is durable.
 * The log calls back in request order, so the queue's head is always the oldest write;
 * applying strictly from the head keeps every group's entries in log order, and orders
 * catalog changes against the data writes around them. When the engine pushes back
 * (ERR_BUSY), the whole queue waits for lsm_on_writable.
 *
 * Engine keys of the catalog (table id 0, which no table uses):
 *   00000000 'T' <name>  -> the table's latest catalog record
 *   00000000 'M'         -> next table id (u32 BE) | next partition id (u64 BE)
 * written with range id ROUTER_CATALOG_GROUP and the record's log index.
 *
 * The log keeps entries until the engine has made them durable: a timer moves each
 * group's snapshot point (keep_from) up to lsm_durable_index().
 */
#include "cluster/router.h"
#include "cluster/router_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "cluster/capacity.h"
#include "storage/data/key.h"
#include "storage/lsm/lsm.h"
#include "storage/wal/wal.h"

#define ENTRY_TERM         1 /* no elections on one node: every entry has term 1 */
#define SNAPSHOT_TIMER_MS  1000
#define REPLAY_CHUNK_BYTES (8u << 20)

typedef struct pstate {
    uint64_t id; /* partition id = log group = engine range */
    uint32_t table_id;
    uint64_t next_index;     /* index of the next entry to append */
    uint64_t snapshot_index; /* keep_from - 1 as last told to the log */
    partition_stats stats;
} pstate;

typedef enum { JOB_CATALOG, JOB_PARTITION } job_kind;

typedef struct job {
    struct job *next;
    router *router;
    job_kind kind;
    uint64_t group;
    uint64_t index;
    int status; /* 0 waiting, 1 durable, -1 the log failed */
    strata_err log_err;
    router_cb cb;
    void *ctx;
    uint32_t table_id; /* JOB_PARTITION: for the capacity charge */
    uint64_t hash;     /* JOB_PARTITION: the item's key hash (hot-key sample) */
    int64_t reserved;  /* JOB_PARTITION: capacity taken at admission (nano-units) */
    size_t len;
    uint8_t cmd[]; /* copy of the command or record */
} job;

typedef struct read_job {
    struct read_job *next;
    uint32_t table_id;
    uint64_t partition_id;
    const partition_read_req *req;
    arena *arena;
    router_read_cb cb;
    void *ctx;
} read_job;

struct router {
    rcluster *cl; /* cluster mode: every call goes there (router_cluster.c) */
    uv_loop_t *loop;
    router_ops ops;
    char *region;
    lsm *engine;
    wal *log;
    catalog *cat;
    pstate *parts; /* sorted by id (ids only grow, so appends keep the order) */
    size_t n_parts, cap_parts;
    uint64_t catalog_next_index;
    uint64_t catalog_snapshot_index;
    job *head, *tail; /* the apply queue */
    size_t inflight;
    bool stalled; /* waiting for lsm_on_writable */
    bool closing;
    read_job *reads_head, *reads_tail;
    uv_idle_t read_idle;
    uv_timer_t snapshot_timer;
    uv_timer_t retry_timer; /* resumes the apply queue after the engine pushed back */
    buf result;             /* reused for apply results */
    lsm_batch *batch;       /* reused for catalog writes */
    capacity *cap;          /* token buckets of every partition (all are served here) */
};

/* ---- partition states ---- */

static pstate *pstate_find(const router *r, uint64_t id)
{
    size_t lo = 0, hi = r->n_parts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->parts[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_parts && r->parts[lo].id == id ? &r->parts[lo] : NULL;
}

static pstate *pstate_add(router *r, uint64_t id, uint32_t table_id, strata_err *err)
{
    pstate *p = pstate_find(r, id);
    if (p != NULL)
        return p;
    if (r->n_parts == r->cap_parts) {
        size_t cap = r->cap_parts ? r->cap_parts * 2 : 64;
        pstate *parts = realloc(r->parts, cap * sizeof *parts);
        if (parts == NULL) {
            strata_err_set(err, ERR_NOMEM, "out of memory");
            return NULL;
        }
        r->parts = parts;
        r->cap_parts = cap;
    }
    size_t i = r->n_parts;
    while (i > 0 && r->parts[i - 1].id > id)
        i--;
    memmove(&r->parts[i + 1], &r->parts[i], (r->n_parts - i) * sizeof *r->parts);
    r->n_parts++;
    p = &r->parts[i];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->table_id = table_id;
    p->next_index = 1;
    wal_group_info info;
    if (r->log != NULL && wal_group_state(r->log, id, &info, NULL) == 0) {
        p->next_index = info.last_index + 1;
        p->snapshot_index = info.keep_from > 0 ? info.keep_from - 1 : 0;
    }
    return p;
}

/* The partition `id` through its state (table id), without scanning the catalog. */
static const partition_desc *find_partition(const router *r, uint64_t id)
{
    const pstate *ps = pstate_find(r, id);
    if (ps == NULL)
        return NULL;
    const table_info *t = catalog_find_id(r->cat, ps->table_id);
    for (size_t i = 0; t != NULL && i < t->n_partitions; i++)
        if (t->partitions[i].id == id)
            return &t->partitions[i];
    return NULL;
}

static void pstate_remove(router *r, uint64_t id)
{
    pstate *p = pstate_find(r, id);
    if (p == NULL)
        return;
    size_t i = (size_t)(p - r->parts);
    memmove(&r->parts[i], &r->parts[i + 1], (r->n_parts - i - 1) * sizeof *r->parts);
    r->n_parts--;
}

/* ---- engine keys ---- */

static size_t catalog_key(uint8_t *out, char tag, const char *name, size_t len)
{
    memset(out, 0, 4);
    out[4] = (uint8_t)tag;
    memcpy(out + 5, name, len);
    return 5 + len;
}

static void put_u32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put_u64be(uint8_t *p, uint64_t v)
{
    put_u32be(p, (uint32_t)(v >> 32));
    put_u32be(p + 4, (uint32_t)v);
}

static uint64_t get_u64be(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The engine key range [lo, hi) of a partition: table id | hash. */
void router_partition_bounds(const partition_desc *p, uint8_t lo[12], uint8_t hi[12])
{
    put_u32be(lo, p->table_id);
    put_u64be(lo + 4, p->hash_lo);
    if (p->hash_hi == UINT64_MAX) {
        put_u32be(hi, p->table_id + 1);
        put_u64be(hi + 4, 0);
    } else {
        put_u32be(hi, p->table_id);
        put_u64be(hi + 4, p->hash_hi + 1);
    }
}

/* ---- applying catalog records ---- */

/*
 * Applies a catalog record at `index`: first the engine write (which may be refused
 * with ERR_BUSY, leaving everything unchanged so the caller can retry), then the
 * catalog in memory, then the partition states and log groups.
 */
static int apply_catalog_record(router *r, const uint8_t *rec, size_t len, uint64_t index,
                                strata_err *err)
{
    catalog_change ch;
    if (catalog_record_peek(rec, len, &ch, err) < 0)
        return -1;
    if (ch.name_len == 0 || ch.name_len > TABLE_NAME_MAX)
        return strata_err_set(err, ERR_CORRUPT, "catalog record: bad table name length %zu",
                              ch.name_len);
    lsm_batch_clear(r->batch);
    uint8_t key[5 + TABLE_NAME_MAX];
    size_t klen = catalog_key(key, 'T', ch.name, ch.name_len);
    const table_info *old = catalog_find(r->cat, ch.name, ch.name_len);
    if (ch.drop) {
        if (lsm_batch_delete(r->batch, key, klen, err) < 0)
            return -1;
        if (old != NULL) {
            uint8_t lo[4], hi[4];
            put_u32be(lo, old->schema.table_id);
            put_u32be(hi, old->schema.table_id + 1);
            if (lsm_batch_delete_range(r->batch, lo, 4, hi, 4, err) < 0)
                return -1;
        }
    } else if (lsm_batch_put(r->batch, key, klen, rec, len, err) < 0) {
        return -1;
    }
    uint32_t next_table = catalog_next_table_id(r->cat);
    uint64_t next_part = catalog_next_partition_id(r->cat);
    if (!ch.drop) {
        if (ch.table_id >= next_table)
            next_table = ch.table_id + 1;
        if (ch.max_partition_id >= next_part)
            next_part = ch.max_partition_id + 1;
    }
    uint8_t meta_key[5], meta[12];
    catalog_key(meta_key, 'M', "", 0);
    put_u32be(meta, next_table);
    put_u64be(meta + 4, next_part);
    if (lsm_batch_put(r->batch, meta_key, sizeof meta_key, meta, sizeof meta, err) < 0)
        return -1;
    if (lsm_write(r->engine, r->batch, ROUTER_CATALOG_GROUP, index, err) < 0)
        return -1;

    if (ch.drop && old != NULL) {
        /* Retire the partitions: their log groups and states go away with the table. */
        for (size_t i = 0; i < old->n_partitions; i++) {
            pstate_remove(r, old->partitions[i].id);
            if (r->log != NULL)
                wal_drop_group(r->log, old->partitions[i].id, NULL, NULL, NULL);
        }
    }
    if (catalog_apply(r->cat, rec, len, err) < 0)
        return -1;
    if (!ch.drop) {
        const table_info *t = catalog_find(r->cat, ch.name, ch.name_len);
        for (size_t i = 0; t != NULL && i < t->n_partitions; i++)
            if (pstate_add(r, t->partitions[i].id, t->schema.table_id, err) == NULL)
                return -1;
    }
    return 0;
}

/* ---- the apply queue ---- */

static void drain(router *r);

static void on_retry(uv_timer_t *t)
{
    router *r = t->data;
    r->stalled = false;
    drain(r);
}

/* The engine accepts writes again. Resume from the loop, not from inside this callback:
 * lsm_on_writable may call it synchronously, from inside drain(). */
static void on_writable(void *arg, const strata_err *err)
{
    router *r = arg;
    (void)err;
    uv_timer_start(&r->retry_timer, on_retry, r->closing ? 0 : 1, 0);
}

/* Applies one durable job. Returns 1 if the engine pushed back (retry later). */
static int apply_job(router *r, job *j)
{
    strata_err err;
    strata_err_clear(&err);
    buf_reset(&r->result);
    if (j->status < 0) {
        if (j->cb != NULL)
            j->cb(j->ctx, &j->log_err, NULL, 0);
        return 0;
    }
    if (j->kind == JOB_CATALOG) {
        if (apply_catalog_record(r, j->cmd, j->len, j->index, &err) < 0) {
            if (err.code == ERR_BUSY)
                return 1;
            if (j->cb)
                j->cb(j->ctx, &err, NULL, 0);
            return 0;
        }
        if (j->cb)
            j->cb(j->ctx, NULL, NULL, 0);
        return 0;
    }
    const partition_desc *p = find_partition(r, j->group);
    pstate *ps = pstate_find(r, j->group);
    if (p == NULL || ps == NULL) {
        strata_err_set(&err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
        j->cb(j->ctx, &err, NULL, 0);
        return 0;
    }
    if (r->ops.apply(r->engine, p, j->cmd, j->len, j->index, &r->result, &err) < 0) {
        if (err.code == ERR_BUSY)
            return 1;
        j->cb(j->ctx, &err, r->result.data, r->result.len);
        return 0;
    }
    if (r->ops.result_stats != NULL) {
        partition_stats d = {0, 0};
        r->ops.result_stats(r->result.data, r->result.len, &d);
        ps->stats.item_count += d.item_count;
        ps->stats.size_bytes += d.size_bytes;
        if (ps->stats.item_count < 0)
            ps->stats.item_count = 0;
        if (ps->stats.size_bytes < 0)
            ps->stats.size_bytes = 0;
    }
    uint64_t units = r->ops.write_units(r->result.data, r->result.len);
    capacity_charge(r->cap, j->table_id, j->group, CAP_WRITE, (int64_t)units * CAP_NANO,
                    j->reserved, true, j->hash, uv_now(r->loop));
    j->cb(j->ctx, NULL, r->result.data, r->result.len);
    return 0;
}

static void drain(router *r)
{
    while (!r->stalled && r->head != NULL && r->head->status != 0) {
        job *j = r->head;
        if (apply_job(r, j) == 1) {
            r->stalled = true;
            lsm_on_writable(r->engine, on_writable, r);
            return;
        }
        r->head = j->next;
        if (r->head == NULL)
            r->tail = NULL;
        r->inflight--;
        free(j);
    }
}

static void on_durable(void *data, int status, const strata_err *err)
{
    job *j = data;
    router *r = j->router;
    j->status = status == 0 ? 1 : -1;
    if (status != 0) {
        if (err != NULL)
            j->log_err = *err;
        else
            strata_err_set(&j->log_err, ERR_IO, "log write failed");
    }
    drain(r);
}

static job *job_new(router *r, job_kind kind, uint64_t group, const uint8_t *cmd, size_t len,
                    router_cb cb, void *ctx)
{
    job *j = malloc(sizeof *j + len);
    if (j == NULL)
        return NULL;
    memset(j, 0, sizeof *j);
    j->router = r;
    j->kind = kind;
    j->group = group;
    j->cb = cb;
    j->ctx = ctx;
    j->len = len;
    memcpy(j->cmd, cmd, len);
    return j;
}

static int enqueue(router *r, job_kind kind, uint64_t group, uint64_t *next_index,
                   const uint8_t *cmd, size_t len, router_cb cb, void *ctx, strata_err *err)
{
    if (r->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "The server is shutting down");
    job *j = job_new(r, kind, group, cmd, len, cb, ctx);
    if (j == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    j->index = *next_index;
    wal_entry e = {.term = ENTRY_TERM, .type = 0, .data = cmd, .len = len};
    if (wal_append(r->log, group, j->index, &e, 1, on_durable, j, err) < 0) {
        free(j);
        return -1;
    }
    (*next_index)++;
    if (r->tail != NULL)
        r->tail->next = j;
    else
        r->head = j;
    r->tail = j;
    r->inflight++;
    return 0;
}

int router_catalog_write(router *r, const uint8_t *rec, size_t len, router_cb cb, void *ctx,
                         strata_err *err)
{
    if (r->cl != NULL)
        return rcluster_catalog_write(r->cl, rec, len, cb, ctx, err);
    return enqueue(r, JOB_CATALOG, ROUTER_CATALOG_GROUP, &r->catalog_next_index, rec, len, cb, ctx,
                   err);
}

int router_write(router *r, uint32_t table_id, uint64_t hash, const uint8_t *cmd, size_t len,
                 router_cb cb, void *ctx, strata_err *err)
{
    assert(cb != NULL);
    if (r->cl != NULL)
        return rcluster_write(r->cl, table_id, hash, cmd, len, cb, ctx, err);
    const partition_desc *p = router_partition_for_hash(r, table_id, hash);
    if (p == NULL)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    pstate *ps = pstate_find(r, p->id);
    if (ps == NULL)
        return strata_err_set(err, ERR_INTERNAL, "partition %llu has no state",
                              (unsigned long long)p->id);
    const table_info *t = catalog_find_id(r->cat, table_id);
    int64_t reserve = router_write_reserve(len);
    if (router_admit(r->cap, t, p->id, t != NULL ? (uint32_t)t->n_partitions : 1, CAP_WRITE,
                     reserve, uv_now(r->loop), err) < 0)
        return -1;
    if (enqueue(r, JOB_PARTITION, p->id, &ps->next_index, cmd, len, cb, ctx, err) < 0)
        return -1;
    r->tail->table_id = table_id;
    r->tail->hash = hash;
    r->tail->reserved = reserve;
    return 0;
}

/* ---- capacity (shared with router_cluster.c) ---- */

int router_admit(capacity *cap, const table_info *t, uint64_t partition_id, uint32_t n_local,
                 cap_kind k, int64_t reserve_nano, uint64_t now_ms, strata_err *err)
{
    if (t == NULL)
        return 0; /* the caller reports the missing table */
    cap_table_conf conf = capacity_conf_of(t, n_local);
    return capacity_admit(cap, t->schema.table_id, partition_id, &conf, k, reserve_nano, now_ms,
                          err);
}

int64_t router_write_reserve(size_t cmd_len)
{
    uint64_t units = (cmd_len + 1023) / 1024;
    return (int64_t)(units > 0 ? units : 1) * CAP_NANO;
}

int64_t router_read_reserve(const partition_read_req *req)
{
    return capacity_nano(partition_read_units(0, req->consistent));
}

int router_admit_read(capacity *cap, const table_info *t, uint64_t partition_id, uint32_t n_local,
                      const partition_read_req *req, uint64_t now_ms, strata_err *err)
{
    return router_admit(cap, t, partition_id, n_local, CAP_READ, router_read_reserve(req), now_ms,
                        err);
}

void router_charge_read(capacity *cap, uint64_t partition_id, const partition_read_req *req,
                        const partition_read_res *res, uint64_t now_ms)
{
    uint64_t hash = 0;
    bool has_key = false;
    const av *pk = NULL;
    if (req->kind == PARTITION_GET && req->key != NULL && req->key->type == AV_M)
        pk = av_map_get(req->key, req->ks.hash_name, req->ks.hash_name_len);
    else if (req->kind == PARTITION_QUERY)
        pk = req->hash_value;
    if (pk != NULL) {
        hash = key_hash(pk);
        has_key = true;
    }
    int64_t nano = capacity_nano(partition_read_units(res->bytes_read, req->consistent));
    capacity_charge(cap, req->table_id, partition_id, CAP_READ, nano, router_read_reserve(req),
                    has_key, hash, now_ms);
}

uint64_t router_default_write_units(const uint8_t *result, size_t len)
{
    arena a;
    arena_init(&a, 0);
    partition_write_result r;
    uint64_t units = 1;
    if (partition_result_decode(result, len, &a, &r, NULL) == 0)
        units = partition_write_units(&r);
    arena_free(&a);
    return units;
}

/* ---- reads ---- */

/* Reads are admitted where they run, one after the other, so each one sees what the
 * reads before it consumed (a batch of 100 reads queued together stops at the credit). */
static int admit_read(router *r, const partition_desc *p, const partition_read_req *req,
                      strata_err *err)
{
    const table_info *t = catalog_find_id(r->cat, p->table_id);
    return router_admit_read(r->cap, t, p->id, t != NULL ? (uint32_t)t->n_partitions : 1, req,
                             uv_now(r->loop), err);
}

static void run_reads(uv_idle_t *h)
{
    router *r = h->data;
    /* Take the current list: reads scheduled by these callbacks run next iteration. */
    read_job *list = r->reads_head;
    r->reads_head = r->reads_tail = NULL;
    uv_idle_stop(&r->read_idle);
    while (list != NULL) {
        read_job *rj = list;
        list = rj->next;
        r->inflight--;
        const partition_desc *p = find_partition(r, rj->partition_id);
        strata_err err;
        partition_read_res res;
        if (r->closing) {
            strata_err_set(&err, ERR_UNAVAILABLE, "The server is shutting down");
            rj->cb(rj->ctx, &err, NULL);
        } else if (p == NULL || p->table_id != rj->table_id) {
            strata_err_set(&err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
            rj->cb(rj->ctx, &err, NULL);
        } else if (admit_read(r, p, rj->req, &err) < 0 ||
                   r->ops.read(r->engine, p, rj->req, rj->arena, &res, &err) < 0) {
            rj->cb(rj->ctx, &err, NULL);
        } else {
            router_charge_read(r->cap, p->id, rj->req, &res, uv_now(r->loop));
            rj->cb(rj->ctx, NULL, &res);
        }
        free(rj);
    }
}

int router_read(router *r, uint32_t table_id, uint64_t partition_id, const partition_read_req *req,
                arena *a, router_read_cb cb, void *ctx, strata_err *err)
{
    /* One replica: every read is strongly consistent. */
    assert(cb != NULL && req != NULL && a != NULL);
    if (r->cl != NULL)
        return rcluster_read(r->cl, table_id, partition_id, req, a, cb, ctx, err);
    if (r->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "The server is shutting down");
    const partition_desc *p = find_partition(r, partition_id);
    if (p == NULL || p->table_id != table_id)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    read_job *rj = calloc(1, sizeof *rj);
    if (rj == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    rj->table_id = table_id;
    rj->partition_id = partition_id;
    rj->req = req;
    rj->arena = a;
    rj->cb = cb;
    rj->ctx = ctx;
    if (r->reads_tail != NULL)
        r->reads_tail->next = rj;
    else
        r->reads_head = rj;
    r->reads_tail = rj;
    r->inflight++;
    uv_idle_start(&r->read_idle, run_reads);
    return 0;
}

/* ---- lookups ---- */

bool router_err_moved(const strata_err *err)
{
    return err != NULL && err->code == ERR_UNAVAILABLE &&
           strncmp(err->msg, ROUTER_MOVED_PREFIX, strlen(ROUTER_MOVED_PREFIX)) == 0;
}

const catalog *router_catalog(const router *r)
{
    return r->cl != NULL ? rcluster_catalog(r->cl) : r->cat;
}

bool router_catalog_may_lag(const router *r)
{
    return r->cl != NULL;
}

/* One node: the catalog is the node's own, so a sync only defers `cb` to the loop. */
typedef struct {
    uv_timer_t timer;
    router_sync_cb cb;
    void *ctx;
} local_sync;

static void local_sync_closed(uv_handle_t *h)
{
    free(h->data);
}

static void local_sync_fire(uv_timer_t *t)
{
    local_sync *ls = t->data;
    ls->cb(ls->ctx);
    uv_close((uv_handle_t *)&ls->timer, local_sync_closed);
}

void router_sync_catalog(router *r, router_sync_cb cb, void *ctx)
{
    if (r->cl != NULL) {
        rcluster_sync_catalog(r->cl, cb, ctx);
        return;
    }
    local_sync *ls = malloc(sizeof *ls);
    if (ls == NULL || uv_timer_init(r->loop, &ls->timer) != 0) {
        free(ls);
        cb(ctx); /* out of memory: the catalog is current anyway */
        return;
    }
    ls->cb = cb;
    ls->ctx = ctx;
    ls->timer.data = ls;
    uv_timer_start(&ls->timer, local_sync_fire, 0, 0);
}

int router_table_partitions(const router *r, uint32_t table_id, const partition_desc **parts,
                            size_t *n, strata_err *err)
{
    const table_info *t = catalog_find_id(router_catalog(r), table_id);
    if (t == NULL)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    *parts = t->partitions;
    *n = t->n_partitions;
    return 0;
}

const partition_desc *router_partition_for_hash(const router *r, uint32_t table_id, uint64_t hash)
{
    const table_info *t = catalog_find_id(router_catalog(r), table_id);
    return t != NULL ? catalog_partition_for_hash(t, hash) : NULL;
}

partition_stats router_table_stats(const router *r, uint32_t table_id)
{
    if (r->cl != NULL)
        return rcluster_table_stats(r->cl, table_id);
    partition_stats sum = {0, 0};
    const table_info *t = catalog_find_id(r->cat, table_id);
    for (size_t i = 0; t != NULL && i < t->n_partitions; i++) {
        const pstate *ps = pstate_find(r, t->partitions[i].id);
        if (ps != NULL) {
            sum.item_count += ps->stats.item_count;
            sum.size_bytes += ps->stats.size_bytes;
        }
    }
    return sum;
}

capacity *router_capacity(router *r)
{
    return r->cl != NULL ? rcluster_capacity(r->cl) : r->cap;
}

const char *router_region(const router *r)
{
    return r->region;
}

size_t router_inflight(const router *r)
{
    return r->cl != NULL ? rcluster_inflight(r->cl) : r->inflight;
}

bool router_ready(const router *r)
{
    return r->cl == NULL || rcluster_ready(r->cl);
}

bool router_log_or_engine_failed(const wal *log, const lsm *engine, strata_err *why)
{
    return (log != NULL && wal_failed(log, why)) || (engine != NULL && lsm_failed(engine, why));
}

bool router_storage_failed(const router *r, strata_err *why)
{
    if (r->cl != NULL)
        return rcluster_storage_failed(r->cl, why);
    return router_log_or_engine_failed(r->log, r->engine, why);
}

bool router_refused(const router *r, strata_err *why)
{
    return r->cl != NULL && rcluster_refused(r->cl, why);
}

size_t router_hand_off(router *r, size_t *handed)
{
    if (r->cl != NULL)
        return rcluster_hand_off(r->cl, handed);
    if (handed != NULL)
        *handed = 0;
    return 0;
}

int router_set_peer_secrets(router *r, const rpc_secrets *s, strata_err *err)
{
    if (r->cl == NULL)
        return strata_err_set(err, ERR_VALIDATION, "a single node has no peers");
    return rcluster_set_peer_secrets(r->cl, s, err);
}

int router_node_state(router *r, uint64_t node, const char *state, router_cb cb, void *ctx,
                      strata_err *err)
{
    if (r->cl == NULL)
        return strata_err_set(err, ERR_VALIDATION, "This node is not part of a cluster");
    return rcluster_node_state(r->cl, node, state, cb, ctx, err);
}

int router_rebalance_leaders(router *r, router_cb cb, void *ctx, strata_err *err)
{
    if (r->cl == NULL)
        return strata_err_set(err, ERR_VALIDATION, "This node is not part of a cluster");
    return rcluster_rebalance_leaders(r->cl, cb, ctx, err);
}

int router_split(router *r, uint64_t partition_id, bool has_hash, uint64_t hash, router_cb cb,
                 void *ctx, strata_err *err)
{
    if (r->cl == NULL)
        return strata_err_set(err, ERR_VALIDATION, "This node is not part of a cluster");
    return rcluster_split(r->cl, partition_id, has_hash, hash, cb, ctx, err);
}

void router_digests_json(router *r, buf *out)
{
    if (r->cl != NULL)
        rcluster_digests_json(r->cl, out);
    else
        buf_printf(out, "{\"node_id\":0,\"stray_items\":0,\"replicas\":[]}");
}

void router_status_json(router *r, buf *out)
{
    if (r->cl != NULL)
        rcluster_status_json(r->cl, out);
    else
        buf_printf(out, "{\"node_id\":0,\"ready\":true,\"mode\":\"single\"}");
}

/* ---- log compaction ---- */

static void advance_snapshot(router *r, uint64_t group, uint64_t *snapshot_index)
{
    uint64_t durable = lsm_durable_index(r->engine, group);
    if (durable <= *snapshot_index)
        return;
    wal_snapshot s = {.index = durable, .term = ENTRY_TERM, .keep_from = durable + 1};
    if (wal_set_snapshot(r->log, group, &s, NULL, NULL, NULL) == 0)
        *snapshot_index = durable;
}

static void on_snapshot_timer(uv_timer_t *t)
{
    router *r = t->data;
    advance_snapshot(r, ROUTER_CATALOG_GROUP, &r->catalog_snapshot_index);
    for (size_t i = 0; i < r->n_parts; i++)
        advance_snapshot(r, r->parts[i].id, &r->parts[i].snapshot_index);
}

/* ---- recovery ---- */

/* Runs the loop until the engine accepts writes again (recovery happens before the
 * caller runs the loop). */
static void on_writable_flag(void *arg, const strata_err *err)
{
    (void)err;
    *(bool *)arg = true;
}

static void wait_writable(router *r)
{
    bool ready = false;
    lsm_on_writable(r->engine, on_writable_flag, &ready);
    while (!ready)
        uv_run(r->loop, UV_RUN_ONCE);
}

static int load_catalog(router *r, strata_err *err)
{
    uint8_t lo[5] = {0, 0, 0, 0, 'M'};
    uint8_t hi[5] = {0, 0, 0, 0, 'U'};
    lsm_iter_options o = {.lower = lo, .lower_len = 5, .upper = hi, .upper_len = 5};
    lsm_iter *it = lsm_iter_new(r->engine, &o, err);
    if (it == NULL)
        return -1;
    int rc = 0;
    for (lsm_iter_first(it); lsm_iter_valid(it); lsm_iter_next(it)) {
        size_t klen, vlen;
        const uint8_t *k = lsm_iter_key(it, &klen);
        const uint8_t *v = lsm_iter_value(it, &vlen);
        if (klen == 5 && k[4] == 'M') {
            if (vlen != 12) {
                rc = strata_err_set(err, ERR_CORRUPT, "catalog meta record has %zu bytes", vlen);
                break;
            }
            uint32_t tid = (uint32_t)(get_u64be(v) >> 32);
            catalog_bump_ids(r->cat, tid, get_u64be(v + 4));
        } else if (klen > 5 && k[4] == 'T') {
            if (catalog_apply(r->cat, v, vlen, err) < 0) {
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0 && lsm_iter_status(it, err) < 0)
        rc = -1;
    lsm_iter_free(it);
    return rc;
}

/* Calls fn for every entry of `group` above `from - 1` in the log. */
static int replay_group(router *r, uint64_t group,
                        int (*fn)(router *, uint64_t group, const wal_entry *e, uint64_t index,
                                  strata_err *),
                        strata_err *err)
{
    wal_group_info info;
    if (wal_group_state(r->log, group, &info, NULL) < 0)
        return 0; /* nothing logged */
    uint64_t from = lsm_durable_index(r->engine, group) + 1;
    if (from < info.first_index)
        from = info.first_index;
    while (from <= info.last_index) {
        wal_entry *entries;
        size_t n;
        if (wal_read_entries(r->log, group, from, info.last_index, REPLAY_CHUNK_BYTES, &entries, &n,
                             err) < 0)
            return -1;
        for (size_t i = 0; i < n; i++) {
            for (;;) {
                strata_err e;
                strata_err_clear(&e);
                if (fn(r, group, &entries[i], from + i, &e) == 0)
                    break;
                if (e.code != ERR_BUSY) {
                    free(entries);
                    if (err != NULL)
                        *err = e;
                    return -1;
                }
                wait_writable(r);
            }
        }
        free(entries);
        from += n;
    }
    return 0;
}

static int replay_catalog_entry(router *r, uint64_t group, const wal_entry *e, uint64_t index,
                                strata_err *err)
{
    (void)group;
    return apply_catalog_record(r, e->data, e->len, index, err);
}

static int replay_partition_entry(router *r, uint64_t group, const wal_entry *e, uint64_t index,
                                  strata_err *err)
{
    const partition_desc *p = find_partition(r, group);
    if (p == NULL)
        return 0;
    buf_reset(&r->result);
    return r->ops.apply(r->engine, p, e->data, e->len, index, &r->result, err);
}

/* Counts a partition's items and value bytes from the engine. */
int router_count_partition(lsm *engine, const partition_desc *p, partition_stats *out,
                           strata_err *err)
{
    uint8_t lo[12], hi[12];
    router_partition_bounds(p, lo, hi);
    lsm_iter_options o = {.lower = lo, .lower_len = 12, .upper = hi, .upper_len = 12};
    lsm_iter *it = lsm_iter_new(engine, &o, err);
    if (it == NULL)
        return -1;
    out->item_count = 0;
    out->size_bytes = 0;
    for (lsm_iter_first(it); lsm_iter_valid(it); lsm_iter_next(it)) {
        size_t klen, vlen;
        lsm_iter_key(it, &klen);
        lsm_iter_value(it, &vlen);
        out->item_count++;
        out->size_bytes += (int64_t)vlen;
    }
    int rc = lsm_iter_status(it, err);
    lsm_iter_free(it);
    return rc;
}

static int recover(router *r, strata_err *err)
{
    if (load_catalog(r, err) < 0)
        return -1;
    /* Partition states for the tables the engine knows, before the catalog log's tail
     * (which may add or drop tables) is replayed. */
    for (const table_info *t = catalog_next(r->cat, NULL, 0); t != NULL;
         t = catalog_next(r->cat, t->schema.name, t->schema.name_len))
        for (size_t i = 0; i < t->n_partitions; i++)
            if (pstate_add(r, t->partitions[i].id, t->schema.table_id, err) == NULL)
                return -1;
    if (replay_group(r, ROUTER_CATALOG_GROUP, replay_catalog_entry, err) < 0)
        return -1;
    wal_group_info info;
    r->catalog_next_index = 1;
    if (wal_group_state(r->log, ROUTER_CATALOG_GROUP, &info, NULL) == 0) {
        r->catalog_next_index = info.last_index + 1;
        r->catalog_snapshot_index = info.keep_from > 0 ? info.keep_from - 1 : 0;
    }
    for (size_t i = 0; i < r->n_parts; i++) {
        uint64_t id = r->parts[i].id;
        if (replay_group(r, id, replay_partition_entry, err) < 0)
            return -1;
    }
    /* Groups in the log that no table owns any more (dropped before a crash). */
    size_t n = wal_groups(r->log, NULL, 0);
    uint64_t *ids = n ? calloc(n, sizeof *ids) : NULL;
    if (n && ids == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    n = wal_groups(r->log, ids, n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != ROUTER_CATALOG_GROUP && pstate_find(r, ids[i]) == NULL)
            wal_drop_group(r->log, ids[i], NULL, NULL, NULL);
    free(ids);
    for (size_t i = 0; i < r->n_parts; i++) {
        const partition_desc *p = find_partition(r, r->parts[i].id);
        if (p != NULL && router_count_partition(r->engine, p, &r->parts[i].stats, err) < 0)
            return -1;
    }
    return 0;
}

/* ---- open / close ---- */

int router_mkdir_p(const char *path, strata_err *err)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp)
        return strata_err_set(err, ERR_IO, "bad data directory '%s'", path);
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == '\0') {
            char saved = tmp[i];
            tmp[i] = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return strata_err_set(err, ERR_IO, "mkdir %s: %s", tmp, strerror(errno));
            tmp[i] = saved;
        }
    }
    return 0;
}

char *router_path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void flag_cb(void *arg)
{
    *(bool *)arg = true;
}

static void flag_lsm_cb(void *arg, const strata_err *err)
{
    (void)err;
    *(bool *)arg = true;
}

static void close_handle_cb(uv_handle_t *h)
{
    (void)h;
}

router *router_open(const router_config *cfg, strata_err *err)
{
    router *r = calloc(1, sizeof *r);
    if (r == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->loop = cfg->loop;
    r->ops = cfg->ops;
    if (r->ops.write_units == NULL)
        r->ops.write_units = router_default_write_units;
    if (cfg->cluster != NULL) {
        r->region = strdup(cfg->region ? cfg->region : "us-east-1");
        r->cl = r->region != NULL ? rcluster_open(cfg, err) : NULL;
        if (r->cl == NULL) {
            if (r->region == NULL)
                strata_err_set(err, ERR_NOMEM, "out of memory");
            free(r->region);
            free(r);
            return NULL;
        }
        return r;
    }
    if (r->ops.read == NULL)
        r->ops.read = partition_read;
    r->region = strdup(cfg->region ? cfg->region : "us-east-1");
    r->cat = catalog_new();
    r->batch = lsm_batch_new();
    r->cap = capacity_new();
    buf_init(&r->result, 0);
    char *lsm_dir = router_path_join(cfg->data_dir, "engine");
    char *wal_dir = router_path_join(cfg->data_dir, "log");
    bool ok = r->region && r->cat && r->batch && r->cap && lsm_dir && wal_dir;
    if (!ok)
        strata_err_set(err, ERR_NOMEM, "out of memory");
    if (ok && router_mkdir_p(cfg->data_dir, err) < 0)
        ok = false;
    if (ok) {
        lsm_options lo = {.dir = lsm_dir,
                          .memtable_bytes = cfg->memtable_bytes,
                          .background_cpu_pct = cfg->background_cpu_pct};
        ok = lsm_open(&lo, r->loop, &r->engine, err) == 0;
    }
    if (ok) {
        wal_options wo = {
            .dir = wal_dir, .segment_size = cfg->wal_segment_size, .hold_ops = cfg->log_hold_ops};
        ok = wal_open(&wo, r->loop, &r->log, err) == 0;
    }
    free(lsm_dir);
    free(wal_dir);
    if (ok)
        ok = recover(r, err) == 0;
    if (!ok) {
        router_close(r);
        return NULL;
    }
    uv_idle_init(r->loop, &r->read_idle);
    r->read_idle.data = r;
    uv_timer_init(r->loop, &r->snapshot_timer);
    r->snapshot_timer.data = r;
    uv_timer_init(r->loop, &r->retry_timer);
    r->retry_timer.data = r;
    uv_timer_start(&r->snapshot_timer, on_snapshot_timer, SNAPSHOT_TIMER_MS, SNAPSHOT_TIMER_MS);
    uv_unref((uv_handle_t *)&r->snapshot_timer);
    return r;
}

void router_close(router *r)
{
    if (r == NULL)
        return;
    if (r->cl != NULL) {
        rcluster_close(r->cl);
        free(r->region);
        free(r);
        return;
    }
    r->closing = true;
    bool handles = r->read_idle.data == r;
    if (handles) {
        /* Answer reads still queued, then stop the handles. */
        if (r->reads_head != NULL)
            run_reads(&r->read_idle);
        uv_close((uv_handle_t *)&r->read_idle, close_handle_cb);
        uv_close((uv_handle_t *)&r->snapshot_timer, close_handle_cb);
    }
    if (r->log != NULL) {
        /* Writes already in the log complete (and are applied and answered) first. */
        bool closed = false;
        wal_close(r->log, flag_cb, &closed);
        while (!closed)
            uv_run(r->loop, UV_RUN_ONCE);
        r->log = NULL; /* freed: the last applies below must not touch it */
        /* A stalled apply queue waits for the engine. */
        while (r->head != NULL)
            uv_run(r->loop, UV_RUN_ONCE);
    }
    if (handles)
        uv_close((uv_handle_t *)&r->retry_timer, close_handle_cb);
    if (r->engine != NULL) {
        bool done = false;
        lsm_flush(r->engine, flag_lsm_cb, &done);
        while (!done)
            uv_run(r->loop, UV_RUN_ONCE);
        done = false;
        lsm_close(r->engine, flag_lsm_cb, &done);
        while (!done)
            uv_run(r->loop, UV_RUN_ONCE);
    }
    if (handles)
        uv_run(r->loop, UV_RUN_NOWAIT); /* runs the close callbacks */
    lsm_batch_free(r->batch);
    buf_free(&r->result);
    capacity_free(r->cap);
    catalog_free(r->cat);
    free(r->parts);
    free(r->region);
    free(r);
}
