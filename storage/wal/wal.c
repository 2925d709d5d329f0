/*
 * The node's shared write-ahead log. See wal.h for the contract.
 *
 * On-disk format (all integers big-endian):
 *
 *   segment header (32 bytes): magic u64, version u32, zero u32, seq u64,
 *                              xxh3 of the first 24 bytes u64
 *   record (8-byte aligned):   xxh3 u64 over bytes [8, 32 + len), len u32, kind u8,
 *                              zero[3], group u64, batch u64, payload[len], zero padding
 *
 * Payloads:
 *   ENTRIES    first_index u64, count u32, count x (term u64, type u8, len u32, bytes)
 *   TERM_VOTE  term u64, vote u64
 *   TRUNCATE   from_index u64
 *   SNAPSHOT   index u64, term u64, keep_from u64, meta_len u32, meta bytes
 *   DROP       (empty)
 *
 * `batch` numbers the write batches. A batch is written and fdatasync'ed before the next
 * one starts, and a segment is synced before the next segment is created, so a valid
 * record of batch b proves every batch below b reached the disk. Recovery uses that, and
 * the shape of the damage (sectors of zeros), to tell a torn tail (only the last, unsynced
 * batch is damaged) from corruption.
 *
 * The same apply_* functions update a group's state when an operation is requested and
 * when recovery replays its record, so the two cannot disagree.
 */
#include "storage/wal/wal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xxhash.h>

#include "storage/base/buf.h"

#define SEG_MAGIC       0x5354524154574131ULL /* "STRATWA1" */
#define SEG_VERSION     1
#define SEG_HDR         32
#define REC_HDR         32
#define ENTRIES_HDR     12 /* first_index + count */
#define ENTRY_HDR       13 /* term + type + len */
#define RECORD_SOFT_MAX (1u << 20)
#define META_MAX        (1u << 20)
#define SEG_MIN         (64u << 10)
#define SEG_DEFAULT     (64ULL << 20)
/* The longest a spare segment's zero fill is spread over (see zero_fill). */
#define SPARE_FILL_MAX_MS 10000
#define SEG_FILE_MAX    (1ULL << 30)
#define PENDING_DEFAULT ((size_t)256 << 20)
/* Writes cover whole blocks of this size (the page size, within these bounds). */
#define BLOCK_MIN 4096
#define BLOCK_MAX 65536

enum { REC_ENTRIES = 1, REC_TERM_VOTE, REC_TRUNCATE, REC_SNAPSHOT, REC_DROP, REC_KIND_MAX };

/* ---------------------------------------------------------------------------------- */
/* Small helpers                                                                      */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static size_t record_size(size_t payload)
{
    return align8(REC_HDR + payload);
}

/* An open-addressing map from u64 to u64 (no deletion: maps are freed whole). */
typedef struct {
    uint64_t *keys;
    uint64_t *vals;
    uint8_t *used;
    size_t cap; /* power of two, or 0 */
    size_t count;
} u64map;

static size_t map_slot(const u64map *m, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 17) & (m->cap - 1);
}

static uint64_t *map_get(const u64map *m, uint64_t key)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = map_slot(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (!m->used[i])
            return NULL;
        if (m->keys[i] == key)
            return &m->vals[i];
    }
}

static int map_grow(u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    u64map n = {calloc(cap, 8), calloc(cap, 8), calloc(cap, 1), cap, 0};
    if (!n.keys || !n.vals || !n.used) {
        free(n.keys), free(n.vals), free(n.used);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i])
            continue;
        size_t j = map_slot(&n, m->keys[i]);
        while (n.used[j])
            j = (j + 1) & (cap - 1);
        n.used[j] = 1, n.keys[j] = m->keys[i], n.vals[j] = m->vals[i];
        n.count++;
    }
    free(m->keys), free(m->vals), free(m->used);
    *m = n;
    return 0;
}

/* Returns the value slot for key, inserting `init` if absent; NULL when out of memory. */
static uint64_t *map_put(u64map *m, uint64_t key, uint64_t init)
{
    uint64_t *v = map_get(m, key);
    if (v)
        return v;
    if ((m->count + 1) * 10 > m->cap * 7 && map_grow(m) != 0)
        return NULL;
    size_t i = map_slot(m, key);
    while (m->used[i])
        i = (i + 1) & (m->cap - 1);
    m->used[i] = 1, m->keys[i] = key, m->vals[i] = init;
    m->count++;
    return &m->vals[i];
}

static void map_free(u64map *m)
{
    free(m->keys), free(m->vals), free(m->used);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------------------------- */
/* State                                                                              */

/* Where one ENTRIES record lives and which of its entries are still live. */
typedef struct {
    uint64_t rec_first; /* first index stored in the record */
    uint64_t lo, hi;    /* live entries [lo, hi] */
    uint64_t seq;       /* segment */
    uint64_t off;       /* record offset in the segment */
    uint32_t len;       /* record size including header and padding */
} run;

typedef struct {
    uint64_t id;
    bool dropped;
    uint64_t term, vote;
    uint64_t snap_index, snap_term, keep_from;
    uint8_t *meta;
    size_t meta_len;
    uint64_t last_index;
    run *runs; /* live runs are runs[head, nruns), ordered by index */
    size_t head, nruns, cap_runs;
    /* Where the latest term/vote and snapshot records are, to know what pins a segment. */
    bool has_tv, has_snap;
    uint64_t tv_seq, tv_batch, snap_seq, snap_batch;
    uint64_t durable_keep; /* keep_from of a snapshot record known to be synced */
    uint64_t drop_batch;   /* batch of the last DROP record, 0 if none */
    uint64_t gap_at;       /* recovery: entries below this index were not found */
} group;

typedef struct {
    uint64_t seq;
    uint64_t cap;  /* file size */
    u64map groups; /* group id -> highest live entry index here (0: records, no entries) */
} segment;

/* A contiguous piece of a batch written to one segment. */
typedef struct {
    uint64_t seq;
    uint64_t file_off;
    size_t buf_off;
    size_t len;
    bool create;  /* the segment file is created (and preallocated) first... */
    int spare_fd; /* ...unless it was prepared ahead: then its open descriptor, else -1 */
    uint64_t cap; /* the segment's size: a write's zero padding stops there */
} chunk;

typedef struct {
    wal_cb cb;
    void *data;
} pending_cb;

typedef struct {
    buf data;
    chunk *chunks;
    size_t nchunks, cap_chunks;
    pending_cb *cbs;
    size_t ncbs, cap_cbs;
    uint64_t number;
    uint64_t ops;
    bool check_removal; /* carries records that may let old segments go */
    /* filled by the worker */
    int status;
    strata_err err;
    uint64_t syncs;
    uint64_t unaligned; /* chunks written from inside a block the log did not hold */
} batch;

struct wal {
    uv_loop_t *loop;
    char *dir;
    int dir_fd, lock_fd;
    uint64_t seg_size;
    size_t max_pending;

    u64map groups; /* id -> group* */
    segment *segs; /* contiguous seqs, oldest first */
    size_t nsegs, cap_segs;

    /* Logical tail: where the next record goes. cur_seq 0 means no segment yet. */
    uint64_t cur_seq, cur_off, cur_cap;
    uint64_t cur_started_ms; /* loop time when records began to go to cur_seq */
    uint64_t next_seq;
    /* Everything up to (durable_seq, durable_off) is on disk and synced. */
    uint64_t durable_seq, durable_off;
    uint64_t synced_batch;

    /* pending takes new operations, flight is being written; done holds a synced
     * batch while its callbacks run, after the next batch has already been launched. */
    batch batches[3];
    batch *pending, *flight, *done;
    bool in_flight;
    int tail_fd; /* owned by the worker while a batch is in flight */
    /* The tail segment's last, partly written block (see write_chunk), owned like tail_fd:
     * bytes [blk_off, blk_off + blk_len) of segment blk_seq (0: none held). */
    uint8_t *blk;
    size_t blk_size;
    uint64_t blk_seq, blk_off;
    size_t blk_len;

    uv_prepare_t prepare;
    uv_timer_t hold;   /* active while it holds the next batch (see wal.h, Group commit) */
    uint32_t hold_ops; /* 0: never held */
    uv_work_t write_req, remove_req, spare_req;
    /* The next segment, created and preallocated ahead of need (off the write path). */
    enum { SPARE_NONE, SPARE_CREATING, SPARE_READY } spare_state;
    uint64_t spare_seq;
    int spare_fd;
    uint64_t spare_fill_ms;   /* wal_options.spare_fill_ms */
    uint64_t spare_budget_ms; /* the fill under way is spread over this long... */
    atomic_bool spare_hurry;  /* ...unless a batch waits for it or the log closes */
    bool removing;
    uint64_t rm_first, rm_count, rm_done;

    bool failed;
    strata_err fail_err;
    bool closing, close_started;
    void (*close_cb)(void *);
    void *close_data;

    wal_stats stats;
    uint8_t *scratch; /* recovery: one segment's bytes */
};

/* ---------------------------------------------------------------------------------- */
/* Groups and their runs                                                              */

static group *group_find(const wal *w, uint64_t id)
{
    uint64_t *v = map_get(&w->groups, id);
    return v ? (group *)(uintptr_t)*v : NULL;
}

static void group_reset(group *g)
{
    free(g->meta);
    free(g->runs);
    uint64_t id = g->id, drop_batch = g->drop_batch;
    memset(g, 0, sizeof *g);
    g->id = id;
    g->drop_batch = drop_batch;
    g->keep_from = 1;
}

static group *group_get(wal *w, uint64_t id, strata_err *err)
{
    group *g = group_find(w, id);
    if (g) {
        if (g->dropped) {
            group_reset(g);
        }
        return g;
    }
    g = calloc(1, sizeof *g);
    uint64_t *slot = g ? map_put(&w->groups, id, (uint64_t)(uintptr_t)g) : NULL;
    if (!slot) {
        free(g);
        strata_err_set(err, ERR_NOMEM, "wal: out of memory for group %" PRIu64, id);
        return NULL;
    }
    g->id = id;
    g->keep_from = 1;
    return g;
}

static uint64_t group_first_index(const group *g)
{
    return g->head < g->nruns ? g->runs[g->head].lo : g->last_index + 1;
}

static int runs_push(group *g, const run *r)
{
    if (g->head > 0 && g->head * 2 >= g->nruns) {
        memmove(g->runs, g->runs + g->head, (g->nruns - g->head) * sizeof *g->runs);
        g->nruns -= g->head;
        g->head = 0;
    }
    if (g->nruns == g->cap_runs) {
        size_t cap = g->cap_runs ? g->cap_runs * 2 : 4;
        run *p = realloc(g->runs, cap * sizeof *p);
        if (!p)
            return -1;
        g->runs = p;
        g->cap_runs = cap;
    }
    g->runs[g->nruns++] = *r;
    return 0;
}

static segment *segment_find(const wal *w, uint64_t seq)
{
    if (w->nsegs == 0 || seq < w->segs[0].seq || seq - w->segs[0].seq >= w->nsegs)
        return NULL;
    return &w->segs[seq - w->segs[0].seq];
}

/* Notes that `g` has a record in segment `seq` whose highest entry index is `max`. */
static int segment_note(wal *w, uint64_t seq, uint64_t gid, uint64_t max)
{
    segment *s = segment_find(w, seq);
    assert(s != NULL);
    uint64_t *v = map_put(&s->groups, gid, 0);
    if (!v)
        return -1;
    if (max > *v)
        *v = max;
    return 0;
}

/* Lowers, in every segment, the highest live entry index of g below `from`. */
static void segments_drop_from(wal *w, uint64_t gid, uint64_t from)
{
    for (size_t i = 0; i < w->nsegs; i++) {
        uint64_t *v = map_get(&w->segs[i].groups, gid);
        if (v && *v >= from)
            *v = from - 1;
    }
}

static void truncate_from(wal *w, group *g, uint64_t from)
{
    if (from > g->last_index)
        return;
    while (g->nruns > g->head && g->runs[g->nruns - 1].lo >= from)
        g->nruns--;
    if (g->nruns > g->head && g->runs[g->nruns - 1].hi >= from)
        g->runs[g->nruns - 1].hi = from - 1;
    g->last_index = from - 1;
    segments_drop_from(w, g->id, from);
}

static void trim_front(group *g)
{
    while (g->head < g->nruns && g->runs[g->head].hi < g->keep_from)
        g->head++;
    if (g->head < g->nruns && g->runs[g->head].lo < g->keep_from)
        g->runs[g->head].lo = g->keep_from;
    if (g->head == g->nruns)
        g->head = g->nruns = 0;
}

/* ---------------------------------------------------------------------------------- */
/* Applying records to group state (shared by requests and recovery)                  */

static int apply_entries(wal *w, group *g, uint64_t first, uint32_t count, uint64_t seq,
                         uint64_t off, uint32_t len)
{
    if (first <= g->last_index) {
        truncate_from(w, g, first);
    } else if (first > g->last_index + 1) {
        /* Only recovery gets here: the records before were in removed segments. */
        truncate_from(w, g, 1);
        g->gap_at = first;
        g->last_index = first - 1;
    }
    run r = {first, first, first + count - 1, seq, off, len};
    if (runs_push(g, &r) != 0)
        return -1;
    g->last_index = r.hi;
    return segment_note(w, seq, g->id, r.hi);
}

static void apply_term_vote(group *g, uint64_t term, uint64_t vote, uint64_t seq, uint64_t batch_no)
{
    g->term = term;
    g->vote = vote;
    g->has_tv = true;
    g->tv_seq = seq;
    g->tv_batch = batch_no;
}

static int apply_snapshot(wal *w, group *g, uint64_t index, uint64_t term, uint64_t keep,
                          const void *meta, size_t meta_len, uint64_t seq, uint64_t batch_no,
                          uint64_t synced_batch)
{
    uint8_t *copy = NULL;
    if (meta_len > 0) {
        copy = malloc(meta_len);
        if (!copy)
            return -1;
        memcpy(copy, meta, meta_len);
    }
    free(g->meta);
    g->meta = copy;
    g->meta_len = meta_len;
    if (index > g->last_index) {
        truncate_from(w, g, 1);
        g->last_index = index;
    }
    /* The previous snapshot record becomes the durable fallback if it was synced. */
    if (g->has_snap && g->snap_batch <= synced_batch)
        g->durable_keep = g->keep_from;
    g->snap_index = index;
    g->snap_term = term;
    if (keep > g->keep_from)
        g->keep_from = keep;
    g->has_snap = true;
    g->snap_seq = seq;
    g->snap_batch = batch_no;
    trim_front(g);
    return 0;
}

static void apply_drop(wal *w, group *g, uint64_t batch_no)
{
    segments_drop_from(w, g->id, 1);
    g->drop_batch = batch_no;
    group_reset(g);
    g->dropped = true;
}

/* ---------------------------------------------------------------------------------- */
/* Placing records in the pending batch                                               */

static int batch_add_chunk(batch *b, const chunk *c)
{
    if (b->nchunks == b->cap_chunks) {
        size_t cap = b->cap_chunks ? b->cap_chunks * 2 : 8;
        chunk *p = realloc(b->chunks, cap * sizeof *p);
        if (!p)
            return -1;
        b->chunks = p;
        b->cap_chunks = cap;
    }
    b->chunks[b->nchunks++] = *c;
    return 0;
}

static int batch_add_cb(batch *b, wal_cb cb, void *data)
{
    if (b->ncbs == b->cap_cbs) {
        size_t cap = b->cap_cbs ? b->cap_cbs * 2 : 64;
        pending_cb *p = realloc(b->cbs, cap * sizeof *p);
        if (!p)
            return -1;
        b->cbs = p;
        b->cap_cbs = cap;
    }
    b->cbs[b->ncbs++] = (pending_cb){cb, data};
    return 0;
}

static int segments_push(wal *w, uint64_t seq, uint64_t cap)
{
    if (w->nsegs == w->cap_segs) {
        size_t n = w->cap_segs ? w->cap_segs * 2 : 8;
        segment *p = realloc(w->segs, n * sizeof *p);
        if (!p)
            return -1;
        w->segs = p;
        w->cap_segs = n;
    }
    assert(w->nsegs == 0 || w->segs[w->nsegs - 1].seq + 1 == seq);
    w->segs[w->nsegs++] = (segment){.seq = seq, .cap = cap};
    return 0;
}

static void encode_segment_header(uint8_t *p, uint64_t seq)
{
    put64(p, SEG_MAGIC);
    put32(p + 8, SEG_VERSION);
    put32(p + 12, 0);
    put64(p + 16, seq);
    put64(p + 24, XXH3_64bits(p, 24));
}

/*
 * Reserves room for a record of rec_len bytes at the logical tail (rolling to a new
 * segment when it does not fit) and returns its location. The bytes are zeroed.
 */
static int place_record(wal *w, size_t rec_len, uint64_t *seq, uint64_t *off, size_t *boff)
{
    batch *b = w->pending;
    bool roll = w->cur_seq == 0 || w->cur_off + rec_len > w->cur_cap;
    assert(rec_len + SEG_HDR <= w->seg_size || !roll);
    if (!buf_reserve(&b->data, rec_len + SEG_HDR))
        return -1;
    if (roll) {
        uint64_t s = w->next_seq;
        chunk c = {s, 0, b->data.len, SEG_HDR, true, -1, w->seg_size};
        if (segments_push(w, s, w->seg_size) != 0)
            return -1;
        if (batch_add_chunk(b, &c) != 0) {
            w->nsegs--;
            return -1;
        }
        w->next_seq++;
        b->check_removal = true;
        encode_segment_header(b->data.data + b->data.len, s);
        b->data.len += SEG_HDR;
        w->cur_seq = s;
        w->cur_off = SEG_HDR;
        w->cur_cap = w->seg_size;
        w->cur_started_ms = uv_now(w->loop);
    } else if (b->nchunks == 0 || b->chunks[b->nchunks - 1].seq != w->cur_seq) {
        chunk c = {w->cur_seq, w->cur_off, b->data.len, 0, false, -1, w->cur_cap};
        if (batch_add_chunk(b, &c) != 0)
            return -1;
    }
    *seq = w->cur_seq;
    *off = w->cur_off;
    *boff = b->data.len;
    memset(b->data.data + b->data.len, 0, rec_len);
    b->data.len += rec_len;
    b->chunks[b->nchunks - 1].len += rec_len;
    w->cur_off += rec_len;
    return 0;
}

static void seal_record(uint8_t *rec, uint8_t kind, uint64_t gid, uint64_t batch_no,
                        size_t payload_len)
{
    put32(rec + 8, (uint32_t)payload_len);
    rec[12] = kind;
    put64(rec + 16, gid);
    put64(rec + 24, batch_no);
    put64(rec, XXH3_64bits(rec + 8, REC_HDR - 8 + payload_len));
}

/* ---------------------------------------------------------------------------------- */
/* The write path                                                                     */

static void fire(batch *b, int status, const strata_err *err)
{
    for (size_t i = 0; i < b->ncbs; i++)
        if (b->cbs[i].cb)
            b->cbs[i].cb(b->cbs[i].data, status, status == 0 ? NULL : err);
}

static void batch_clear(batch *b)
{
    for (size_t i = 0; i < b->nchunks; i++)
        if (b->chunks[i].spare_fd >= 0)
            close(b->chunks[i].spare_fd); /* a failed batch did not get to use it */
    buf_reset(&b->data);
    b->nchunks = b->ncbs = 0;
    b->ops = 0;
    b->check_removal = false;
    b->status = 0;
    b->syncs = 0;
    b->unaligned = 0;
}

static void fail_log(wal *w, const strata_err *err)
{
    if (!w->failed) {
        w->failed = true;
        w->fail_err = *err;
    }
    batch *b = w->pending;
    /* Callbacks may request more; those are refused now that the log has failed, so
     * the batch does not grow while it is being failed. */
    fire(b, -1, &w->fail_err);
    batch_clear(b);
}

static void maybe_finish_close(wal *w);
static void maybe_remove_segments(wal *w);
static void start_flush(wal *w);
static void maybe_prepare_spare(wal *w);
static void launch(wal *w);
static void launch_or_hold(wal *w);

static int io_fail(batch *b, const char *what, const char *path, int e)
{
    b->status = -1;
    return strata_err_set(&b->err, ERR_IO, "wal: %s %s: %s", what, path, strerror(e));
}

static void segment_path(const char *dir, uint64_t seq, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%016" PRIx64 ".wal", dir, seq);
}

/* pwritev until every byte is written; -1 with errno set, or EIO for a zero-byte write. */
static int pwritev_all(int fd, struct iovec *iov, int n, off_t off)
{
    while (n > 0) {
        ssize_t k = pwritev(fd, iov, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return -1;
        }
        off += k;
        while (n > 0 && (size_t)k >= iov->iov_len) {
            k -= (ssize_t)iov->iov_len;
            iov++, n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
    return 0;
}

/*
 * Worker thread: writes one chunk so that the write covers whole blocks of the file: the
 * bytes of its first block already written (held in w->blk) go again in front of it, and
 * zeros (what the preallocated segment holds there anyway) after it up to the end of its
 * last block. A write that starts or ends inside a block makes the kernel read that block
 * first unless its page is cached; under memory pressure (on the machines the benchmarks
 * ran on, proactive reclaim pages out cold pages of the very segment being appended to)
 * that read falls between a batch and its fdatasync: a disk round trip on the write path
 * of about one batch in four there. Writing the durable prefix again with the same bytes is safe
 * under the sector-atomic writes the recovery rules already assume (PostgreSQL writes its partial
 * WAL page again the same way). Only the first write after opening may start inside a
 * block the log does not hold (recovery loads it, but a read error leaves it unknown).
 */
static int write_chunk(wal *w, batch *b, const chunk *c)
{
    static const uint8_t zeros[BLOCK_MAX];
    uint64_t start = c->file_off - c->file_off % w->blk_size;
    size_t prefix = (size_t)(c->file_off - start);
    bool held =
        prefix == 0 || (w->blk_seq == c->seq && w->blk_off == start && w->blk_len == prefix);
    uint64_t end = c->file_off + c->len;
    uint64_t padded = end % w->blk_size ? end + (w->blk_size - end % w->blk_size) : end;
    assert(end <= c->cap);
    if (padded > c->cap)
        padded = c->cap;
    struct iovec iov[3];
    int n = 0;
    if (held && prefix > 0)
        iov[n++] = (struct iovec){w->blk, prefix};
    iov[n++] = (struct iovec){(void *)(b->data.data + c->buf_off), c->len};
    if (held && padded > end)
        iov[n++] = (struct iovec){(void *)zeros, (size_t)(padded - end)};
    b->unaligned += !held;
    if (pwritev_all(w->tail_fd, iov, n, (off_t)(held ? start : c->file_off)) != 0)
        return -1;
    /* The new tail block's bytes (only now: iov[0] may point at the old ones): from the
     * chunk, after the held prefix when the chunk ends in the block it started in.
     * Unknown if that prefix was not held. */
    uint64_t tail_off = end - end % w->blk_size;
    size_t tail_len = (size_t)(end - tail_off);
    if (tail_off < c->file_off && !held) {
        w->blk_seq = 0;
    } else {
        size_t from_chunk = tail_off >= c->file_off ? tail_len : (size_t)(end - c->file_off);
        memcpy(w->blk + tail_len - from_chunk, b->data.data + c->buf_off + c->len - from_chunk,
               from_chunk);
        w->blk_seq = c->seq;
        w->blk_off = tail_off;
        w->blk_len = tail_len;
    }
    return 0;
}

/* Worker thread: writes the batch's chunks and makes them durable with one fdatasync
 * per segment touched (normally one). A full segment is synced before the next one is
 * created, which recovery relies on. */
static void work_write(uv_work_t *req)
{
    wal *w = req->data;
    batch *b = w->flight;
    char path[4096];
    bool dirty = false, created = false;
    for (size_t i = 0; i < b->nchunks; i++) {
        chunk *c = &b->chunks[i];
        if (c->create) {
            if (w->tail_fd >= 0) {
                if (dirty && fdatasync(w->tail_fd) != 0) {
                    segment_path(w->dir, c->seq - 1, path, sizeof path);
                    io_fail(b, "fdatasync", path, errno);
                    return;
                }
                b->syncs += dirty;
                close(w->tail_fd);
                w->tail_fd = -1;
            }
            dirty = false;
            if (c->spare_fd >= 0) {
                w->tail_fd = c->spare_fd; /* created, preallocated and in the directory */
                c->spare_fd = -1;
            } else {
                segment_path(w->dir, c->seq, path, sizeof path);
                int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd < 0) {
                    io_fail(b, "create", path, errno);
                    return;
                }
                w->tail_fd = fd;
                int e = posix_fallocate(fd, 0, (off_t)w->seg_size);
                if (e != 0) {
                    io_fail(b, "preallocate", path, e);
                    return;
                }
                created = true;
            }
        }
        if (write_chunk(w, b, c) != 0) {
            w->blk_seq = 0;
            segment_path(w->dir, c->seq, path, sizeof path);
            io_fail(b, "write", path, errno);
            return;
        }
        dirty = true;
    }
    if (dirty) {
        if (fdatasync(w->tail_fd) != 0) {
            segment_path(w->dir, b->chunks[b->nchunks - 1].seq, path, sizeof path);
            io_fail(b, "fdatasync", path, errno);
            return;
        }
        b->syncs++;
    }
    if (created && fsync(w->dir_fd) != 0)
        io_fail(b, "fsync", w->dir, errno);
}

/*
 * A batch is durable. The next batch (what accumulated meanwhile) is launched before
 * this one's callbacks run, so the disk syncs it while the loop applies and answers
 * this one; otherwise the disk would idle for all that work on every batch.
 */
static void after_write(uv_work_t *req, int status)
{
    wal *w = req->data;
    batch *b = w->flight;
    (void)status; /* uv_queue_work requests are never cancelled here */
    w->in_flight = false;
    bool check = b->check_removal;
    if (b->status != 0) {
        strata_err e = b->err;
        w->failed = true;
        w->fail_err = e;
        fire(b, -1, &e);
        fail_log(w, &e);
        batch_clear(b);
    } else {
        const chunk *last = &b->chunks[b->nchunks - 1];
        w->durable_seq = last->seq;
        w->durable_off = last->file_off + last->len;
        w->synced_batch = b->number;
        w->stats.batches++;
        w->stats.syncs += b->syncs;
        w->stats.unaligned_writes += b->unaligned;
        w->stats.bytes_written += b->data.len;
        w->stats.ops += b->ops;
        assert(w->done->nchunks == 0 && w->done->ncbs == 0);
        w->flight = w->done; /* the idle batch: launch() swaps it in as pending */
        w->done = b;
        maybe_prepare_spare(w);
        if (w->pending->nchunks > 0)
            launch_or_hold(w);
        fire(b, 0, NULL);
        batch_clear(b);
    }
    if (check)
        maybe_remove_segments(w);
    maybe_prepare_spare(w);
    if (w->pending->nchunks > 0 && !w->failed)
        start_flush(w);
    maybe_finish_close(w);
}

/* Monotonic ms; libuv's clock, safe on a worker thread (uv_now is the loop's). */
static uint64_t mono_ms(void)
{
    return uv_hrtime() / 1000000;
}

/* Sleeps until `until` (monotonic ms), in short naps so that a hurry ends it early. */
static void pace_until(uint64_t until, atomic_bool *hurry)
{
    for (uint64_t now = mono_ms(); now < until && !atomic_load(hurry); now = mono_ms())
        uv_sleep(until - now < 10 ? (unsigned)(until - now) : 10);
}

/*
 * Writes zeros over the whole file and syncs them. fallocate alone leaves "unwritten"
 * extents, and the first write into each one changes the file's metadata, so every
 * fdatasync on the write path would also commit the filesystem's journal: measured on
 * ext4 here, 0.22 ms per fdatasync against 0.15 ms once the blocks are written.
 *
 * The zeros go out a step (1/256 of the file, 4 KiB to 1 MiB) at a time, each written
 * back before the next, spread evenly over budget_ms: the write path's fdatasyncs share
 * the disk with them, and all of a node's replicas, and those of its peers, fill their
 * spares at about the same moment. At full speed a 64 MiB fill took 0.1-1.3 s during
 * which PutItem's p99 doubled. A hurry (a batch waiting for this file, or the log
 * closing) ends the pacing: the rest goes at full speed.
 */
static int zero_fill(int fd, uint64_t size, uint64_t budget_ms, atomic_bool *hurry)
{
    static const uint8_t zeros[1 << 16];
    uint64_t step = size / 256;
    step = step < 4096 ? 4096 : step > (1 << 20) ? (1 << 20) : step - step % 4096;
    uint64_t start = mono_ms();
    for (uint64_t at = 0; at < size; at += step) {
        if (at > 0 && budget_ms > 0)
            pace_until(start + (uint64_t)((double)budget_ms * (double)at / (double)size), hurry);
        uint64_t end = at + step < size ? at + step : size;
        for (uint64_t o = at; o < end;) {
            size_t n = end - o < sizeof zeros ? (size_t)(end - o) : sizeof zeros;
            ssize_t k = pwrite(fd, zeros, n, (off_t)o);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                return -1;
            o += (uint64_t)k;
        }
        if (sync_file_range(fd, (off_t)at, (off_t)(end - at),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                SYNC_FILE_RANGE_WAIT_AFTER) != 0)
            return -1;
    }
    return fdatasync(fd);
}

/* Worker thread: creates the next segment file, fills it with zeros and makes its
 * directory entry durable, so that rolling to it costs the write path nothing and its
 * syncs are data-only. A crash leaves a file without a segment header, which recovery
 * removes. */
static void work_spare(uv_work_t *req)
{
    wal *w = req->data;
    char path[4096];
    segment_path(w->dir, w->spare_seq, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && (zero_fill(fd, w->seg_size, w->spare_budget_ms, &w->spare_hurry) != 0 ||
                    fsync(w->dir_fd) != 0)) {
        close(fd);
        fd = -1; /* the write path will create it itself */
    }
    w->spare_fd = fd;
}

static void after_spare(uv_work_t *req, int status)
{
    wal *w = req->data;
    (void)status;
    w->spare_state = w->spare_fd >= 0 ? SPARE_READY : SPARE_NONE;
    if (w->pending->nchunks > 0 && !w->failed)
        start_flush(w);
    maybe_finish_close(w);
}

/* Starts preparing the next segment once the current one is half full, or the first
 * one as soon as the log opens without any. Its fill is spread over half the time the
 * current segment took to fill halfway: it is ready about when a quarter is left. */
static void maybe_prepare_spare(wal *w)
{
    if (w->spare_state != SPARE_NONE || (w->cur_seq != 0 && w->cur_off < w->cur_cap / 2) ||
        w->failed || w->closing)
        return;
    assert(w->next_seq == w->cur_seq + 1);
    w->spare_seq = w->next_seq;
    w->spare_fd = -1;
    w->spare_state = SPARE_CREATING;
    uint64_t took = w->cur_seq != 0 ? uv_now(w->loop) - w->cur_started_ms : 0;
    w->spare_budget_ms = w->spare_fill_ms ? w->spare_fill_ms : took / 2;
    if (w->spare_budget_ms > SPARE_FILL_MAX_MS && !w->spare_fill_ms)
        w->spare_budget_ms = SPARE_FILL_MAX_MS;
    atomic_store(&w->spare_hurry, false);
    w->spare_req.data = w;
    if (uv_queue_work(w->loop, &w->spare_req, work_spare, after_spare) != 0)
        w->spare_state = SPARE_NONE;
}

/* Gives the batch's new segment the prepared file if there is one. False when that file
 * is still being prepared: the batch must wait (both would create the same file). */
static bool take_spare(wal *w, batch *b)
{
    for (size_t i = 0; i < b->nchunks; i++) {
        chunk *c = &b->chunks[i];
        if (!c->create || w->spare_state == SPARE_NONE || c->seq != w->spare_seq)
            continue;
        if (w->spare_state == SPARE_CREATING) {
            if (!atomic_exchange(&w->spare_hurry, true))
                w->stats.spares_hurried++;
            return false;
        }
        c->spare_fd = w->spare_fd;
        w->spare_fd = -1;
        w->spare_state = SPARE_NONE;
    }
    return true;
}

/* Hands the pending batch to a worker, unless its new segment is still being prepared
 * (after_spare flushes then). */
static void launch(wal *w)
{
    assert(!w->in_flight && w->pending->nchunks > 0 && !w->failed);
    if (!take_spare(w, w->pending))
        return;
    batch *b = w->pending;
    w->pending = w->flight;
    w->flight = b;
    w->pending->number = b->number + 1;
    w->in_flight = true;
    w->write_req.data = w;
    int rc = uv_queue_work(w->loop, &w->write_req, work_write, after_write);
    if (rc != 0) {
        /* Cannot happen with a live loop; fail rather than lose the callbacks. */
        strata_err e;
        strata_err_set(&e, ERR_IO, "wal: uv_queue_work: %s", uv_strerror(rc));
        w->in_flight = false;
        fire(b, -1, &e);
        batch_clear(b);
        fail_log(w, &e);
    }
}

static bool holding(const wal *w)
{
    return uv_is_active((const uv_handle_t *)&w->hold);
}

/* Nothing can launch or fail the log during a hold (on_prepare waits for it, and no batch
 * is in flight), and wal_close stops the timer: what was held goes now. */
static void on_hold_over(uv_timer_t *t)
{
    launch(t->data);
}

/* The next batch right after a synced one: held WAL_HOLD_MS when hold_ops operations or
 * more already wait in it (see wal.h, Group commit), else launched at once. */
static void launch_or_hold(wal *w)
{
    assert(!w->in_flight && !holding(w));
    if (w->hold_ops != 0 && w->pending->ops >= w->hold_ops && !w->closing) {
        w->stats.holds++;
        uv_timer_start(&w->hold, on_hold_over, WAL_HOLD_MS, 0);
        return;
    }
    launch(w);
}

static void on_prepare(uv_prepare_t *h)
{
    wal *w = h->data;
    uv_prepare_stop(h);
    if (holding(w) || w->in_flight || w->pending->nchunks == 0 || w->failed)
        return;
    launch(w);
}

static void start_flush(wal *w)
{
    if (!w->in_flight)
        uv_prepare_start(&w->prepare, on_prepare);
}

/* Common checks and bookkeeping for a new operation. */
static int op_begin(wal *w, size_t bytes, strata_err *err)
{
    if (w->failed)
        return strata_err_set(err, ERR_IO, "wal: log failed earlier: %s", w->fail_err.msg);
    if (w->closing)
        return strata_err_set(err, ERR_IO, "wal: log is closing");
    if (w->pending->data.len + bytes > w->max_pending)
        return strata_err_set(err, ERR_BUSY, "wal: %zu bytes already waiting to be written",
                              w->pending->data.len);
    return 0;
}

static int op_end(wal *w, wal_cb cb, void *data, strata_err *err)
{
    /* The caller reserved room for this callback in op_reserve_cb. */
    batch *b = w->pending;
    b->cbs[b->ncbs++] = (pending_cb){cb, data};
    b->ops++;
    start_flush(w);
    (void)err;
    return 0;
}

static int op_reserve_cb(wal *w, strata_err *err)
{
    batch *b = w->pending;
    if (batch_add_cb(b, NULL, NULL) != 0)
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory");
    b->ncbs--;
    return 0;
}

/* Out of memory half-way through a request: the pending batch holds part of it and the
 * group state has moved, so nothing pending may be written. The log stops (fail-stop),
 * as it does on an I/O error. */
static int fail_midway(wal *w, strata_err *err)
{
    strata_err e;
    strata_err_set(&e, ERR_NOMEM, "wal: out of memory in the middle of a request");
    fail_log(w, &e);
    if (err)
        *err = e;
    return -1;
}

static int put_simple_record(wal *w, group *g, uint8_t kind, const uint8_t *payload, size_t len,
                             uint64_t *seq_out, strata_err *err)
{
    uint64_t seq, off;
    size_t boff;
    if (place_record(w, record_size(len), &seq, &off, &boff) != 0)
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory");
    if (segment_note(w, seq, g->id, 0) != 0)
        return fail_midway(w, err);
    uint8_t *rec = w->pending->data.data + boff;
    if (len)
        memcpy(rec + REC_HDR, payload, len);
    seal_record(rec, kind, g->id, w->pending->number, len);
    if (kind != REC_TRUNCATE)
        w->pending->check_removal = true;
    *seq_out = seq;
    return 0;
}

int wal_append(wal *w, uint64_t gid, uint64_t first_index, const wal_entry *entries, size_t n,
               wal_cb cb, void *data, strata_err *err)
{
    if (n == 0 || n > UINT32_MAX)
        return strata_err_set(err, ERR_VALIDATION, "wal: append of %zu entries", n);
    size_t max_entry = w->seg_size - SEG_HDR - REC_HDR - ENTRIES_HDR - ENTRY_HDR - 8;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (entries[i].len > max_entry || (entries[i].len && !entries[i].data))
            return strata_err_set(err, ERR_VALIDATION,
                                  "wal: entry of %zu bytes (at most %zu in a segment)",
                                  entries[i].len, max_entry);
        total += entries[i].len + ENTRY_HDR;
    }
    if (op_begin(w, total, err) != 0)
        return -1;
    group *existing = group_find(w, gid);
    uint64_t snap = existing && !existing->dropped ? existing->snap_index : 0;
    uint64_t last = existing && !existing->dropped ? existing->last_index : 0;
    if (first_index <= snap || first_index > last + 1 || first_index + n < first_index)
        return strata_err_set(err, ERR_VALIDATION,
                              "wal: group %" PRIu64 ": append at %" PRIu64
                              " outside (snapshot %" PRIu64 ", last %" PRIu64 " + 1]",
                              gid, first_index, snap, last);
    if (op_reserve_cb(w, err) != 0)
        return -1;
    group *g = group_get(w, gid, err);
    if (!g)
        return -1;
    /* Pack entries into records of about RECORD_SOFT_MAX bytes (one entry at least). */
    size_t i = 0;
    while (i < n) {
        size_t payload = ENTRIES_HDR + ENTRY_HDR + entries[i].len, j = i + 1;
        size_t limit = w->seg_size - SEG_HDR - REC_HDR - 8;
        if (limit > RECORD_SOFT_MAX)
            limit = RECORD_SOFT_MAX;
        while (j < n && payload + ENTRY_HDR + entries[j].len <= limit)
            payload += ENTRY_HDR + entries[j++].len;
        uint64_t seq, off;
        size_t boff, rec_len = record_size(payload);
        if (place_record(w, rec_len, &seq, &off, &boff) != 0)
            return fail_midway(w, err);
        uint8_t *rec = w->pending->data.data + boff, *p = rec + REC_HDR;
        uint64_t idx = first_index + i;
        put64(p, idx);
        put32(p + 8, (uint32_t)(j - i));
        p += ENTRIES_HDR;
        for (size_t k = i; k < j; k++) {
            put64(p, entries[k].term);
            p[8] = entries[k].type;
            put32(p + 9, (uint32_t)entries[k].len);
            if (entries[k].len)
                memcpy(p + ENTRY_HDR, entries[k].data, entries[k].len);
            p += ENTRY_HDR + entries[k].len;
        }
        seal_record(rec, REC_ENTRIES, gid, w->pending->number, payload);
        if (apply_entries(w, g, idx, (uint32_t)(j - i), seq, off, (uint32_t)rec_len) != 0)
            return fail_midway(w, err);
        i = j;
    }
    return op_end(w, cb, data, err);
}

int wal_set_term_vote(wal *w, uint64_t gid, uint64_t term, uint64_t vote, wal_cb cb, void *data,
                      strata_err *err)
{
    if (op_begin(w, 16, err) != 0)
        return -1;
    group *existing = group_find(w, gid);
    if (existing && !existing->dropped && term < existing->term)
        return strata_err_set(err, ERR_VALIDATION,
                              "wal: group %" PRIu64 ": term %" PRIu64 " below %" PRIu64, gid, term,
                              existing->term);
    if (op_reserve_cb(w, err) != 0)
        return -1;
    group *g = group_get(w, gid, err);
    if (!g)
        return -1;
    uint8_t p[16];
    put64(p, term);
    put64(p + 8, vote);
    uint64_t seq;
    if (put_simple_record(w, g, REC_TERM_VOTE, p, sizeof p, &seq, err) != 0)
        return -1;
    apply_term_vote(g, term, vote, seq, w->pending->number);
    return op_end(w, cb, data, err);
}

int wal_truncate(wal *w, uint64_t gid, uint64_t from_index, wal_cb cb, void *data, strata_err *err)
{
    if (op_begin(w, 8, err) != 0)
        return -1;
    group *existing = group_find(w, gid);
    uint64_t snap = existing && !existing->dropped ? existing->snap_index : 0;
    if (from_index <= snap)
        return strata_err_set(err, ERR_VALIDATION,
                              "wal: group %" PRIu64 ": truncate from %" PRIu64
                              " at or below snapshot %" PRIu64,
                              gid, from_index, snap);
    if (op_reserve_cb(w, err) != 0)
        return -1;
    group *g = group_get(w, gid, err);
    if (!g)
        return -1;
    uint8_t p[8];
    put64(p, from_index);
    uint64_t seq;
    if (put_simple_record(w, g, REC_TRUNCATE, p, sizeof p, &seq, err) != 0)
        return -1;
    truncate_from(w, g, from_index);
    return op_end(w, cb, data, err);
}

static int log_snapshot(wal *w, group *g, uint64_t index, uint64_t term, uint64_t keep,
                        const void *meta, size_t meta_len, strata_err *err)
{
    uint64_t seq, off;
    size_t boff, len = 28 + meta_len;
    if (place_record(w, record_size(len), &seq, &off, &boff) != 0)
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory");
    if (segment_note(w, seq, g->id, 0) != 0)
        return fail_midway(w, err);
    uint8_t *rec = w->pending->data.data + boff, *p = rec + REC_HDR;
    put64(p, index);
    put64(p + 8, term);
    put64(p + 16, keep);
    put32(p + 24, (uint32_t)meta_len);
    if (meta_len)
        memcpy(p + 28, meta, meta_len);
    seal_record(rec, REC_SNAPSHOT, g->id, w->pending->number, len);
    w->pending->check_removal = true;
    if (apply_snapshot(w, g, index, term, keep, meta, meta_len, seq, w->pending->number,
                       w->synced_batch) != 0)
        return fail_midway(w, err);
    return 0;
}

int wal_set_snapshot(wal *w, uint64_t gid, const wal_snapshot *snap, wal_cb cb, void *data,
                     strata_err *err)
{
    if (snap->meta_len > META_MAX || (snap->meta_len && !snap->meta))
        return strata_err_set(err, ERR_VALIDATION, "wal: snapshot metadata of %zu bytes",
                              snap->meta_len);
    if (snap->keep_from > snap->index + 1)
        return strata_err_set(err, ERR_VALIDATION,
                              "wal: keep_from %" PRIu64 " above snapshot index %" PRIu64 " + 1",
                              snap->keep_from, snap->index);
    if (op_begin(w, 28 + snap->meta_len, err) != 0)
        return -1;
    group *existing = group_find(w, gid);
    if (existing && !existing->dropped && snap->index < existing->snap_index)
        return strata_err_set(err, ERR_VALIDATION,
                              "wal: group %" PRIu64 ": snapshot %" PRIu64 " below %" PRIu64, gid,
                              snap->index, existing->snap_index);
    if (op_reserve_cb(w, err) != 0)
        return -1;
    group *g = group_get(w, gid, err);
    if (!g)
        return -1;
    uint64_t keep = snap->keep_from > g->keep_from ? snap->keep_from : g->keep_from;
    if (log_snapshot(w, g, snap->index, snap->term, keep, snap->meta, snap->meta_len, err))
        return -1;
    return op_end(w, cb, data, err);
}

int wal_drop_group(wal *w, uint64_t gid, wal_cb cb, void *data, strata_err *err)
{
    if (op_begin(w, 0, err) != 0 || op_reserve_cb(w, err) != 0)
        return -1;
    group *g = group_get(w, gid, err);
    if (!g)
        return -1;
    uint64_t seq;
    if (put_simple_record(w, g, REC_DROP, NULL, 0, &seq, err) != 0)
        return -1;
    apply_drop(w, g, w->pending->number);
    return op_end(w, cb, data, err);
}

/* ---------------------------------------------------------------------------------- */
/* Segment removal                                                                    */

/*
 * Whether the oldest segment `s` may go: for every group with records in it, those
 * entries are below a durable keep_from (or a durable DROP covers them), and its latest
 * term/vote and snapshot records are durable and elsewhere. Sets *relog when the only
 * obstacle is such metadata records living in `s`, which can be written again.
 */
static bool segment_removable(wal *w, const segment *s, bool *relog)
{
    bool metadata_here = false;
    *relog = false;
    for (size_t i = 0; i < s->groups.cap; i++) {
        if (!s->groups.used[i])
            continue;
        const group *g = group_find(w, s->groups.keys[i]);
        assert(g != NULL);
        if (g->drop_batch > w->synced_batch)
            return false;
        if (g->dropped)
            continue;
        uint64_t keep =
            g->has_snap && g->snap_batch <= w->synced_batch ? g->keep_from : g->durable_keep;
        if (s->groups.vals[i] >= keep && s->groups.vals[i] != 0)
            return false;
        if ((g->has_tv && g->tv_batch > w->synced_batch) ||
            (g->has_snap && g->snap_batch > w->synced_batch))
            return false;
        if ((g->has_tv && g->tv_seq == s->seq) || (g->has_snap && g->snap_seq == s->seq))
            metadata_here = true;
    }
    /* Re-logging is worth it only when nothing else holds the segment. */
    *relog = metadata_here;
    return !metadata_here;
}

/* Writes again the term/vote and snapshot records of groups whose latest copy lives in
 * segment `s`, so that `s` can be removed once they are durable. */
static void relog_metadata(wal *w, const segment *s)
{
    strata_err err;
    bool any = false;
    for (size_t i = 0; i < s->groups.cap; i++) {
        if (!s->groups.used[i])
            continue;
        group *g = group_find(w, s->groups.keys[i]);
        if (g->dropped)
            continue;
        uint64_t seq;
        if (g->has_tv && g->tv_seq == s->seq) {
            uint8_t p[16];
            put64(p, g->term);
            put64(p + 8, g->vote);
            if (put_simple_record(w, g, REC_TERM_VOTE, p, sizeof p, &seq, &err) != 0)
                return; /* out of memory: try again after the next batch */
            apply_term_vote(g, g->term, g->vote, seq, w->pending->number);
            any = true;
        }
        if (g->has_snap && g->snap_seq == s->seq) {
            if (log_snapshot(w, g, g->snap_index, g->snap_term, g->keep_from, g->meta, g->meta_len,
                             &err) != 0)
                return;
            any = true;
        }
    }
    if (any)
        start_flush(w);
}

static void work_remove(uv_work_t *req)
{
    wal *w = req->data;
    char path[4096];
    w->rm_done = 0;
    for (uint64_t i = 0; i < w->rm_count; i++) {
        segment_path(w->dir, w->rm_first + i, path, sizeof path);
        /* Oldest first, stopping at a failure, so the segments left stay contiguous. */
        if (unlink(path) != 0 && errno != ENOENT)
            break;
        w->rm_done++;
    }
    if (w->rm_done > 0)
        (void)fsync(w->dir_fd);
}

static void after_remove(uv_work_t *req, int status)
{
    wal *w = req->data;
    (void)status;
    w->removing = false;
    assert(w->nsegs > 0 && w->segs[0].seq == w->rm_first);
    for (uint64_t i = 0; i < w->rm_done; i++)
        map_free(&w->segs[i].groups);
    memmove(w->segs, w->segs + w->rm_done, (w->nsegs - w->rm_done) * sizeof *w->segs);
    w->nsegs -= w->rm_done;
    w->stats.segments_removed += w->rm_done;
    if (w->rm_done == w->rm_count)
        maybe_remove_segments(w);
    maybe_finish_close(w);
}

static void maybe_remove_segments(wal *w)
{
    if (w->removing || w->failed || w->closing)
        return;
    size_t count = 0;
    /* Only segments wholly synced, and never the one receiving appends. */
    while (count < w->nsegs && w->segs[count].seq < w->durable_seq &&
           w->segs[count].seq < w->cur_seq) {
        bool relog;
        if (!segment_removable(w, &w->segs[count], &relog)) {
            if (relog && count == 0)
                relog_metadata(w, &w->segs[count]);
            break;
        }
        count++;
    }
    if (count == 0)
        return;
    w->removing = true;
    w->rm_first = w->segs[0].seq;
    w->rm_count = count;
    w->remove_req.data = w;
    if (uv_queue_work(w->loop, &w->remove_req, work_remove, after_remove) != 0)
        w->removing = false;
}

/* ---------------------------------------------------------------------------------- */
/* Reading entries back                                                               */

/* An open segment kept across the records of one read. */
typedef struct {
    int fd;
    uint64_t seq;
} seg_reader;

static int read_record(wal *w, seg_reader *sr, const run *r, uint8_t *out, uint64_t gid,
                       strata_err *err)
{
    char path[4096];
    segment_path(w->dir, r->seq, path, sizeof path);
    if (sr->fd < 0 || sr->seq != r->seq) {
        if (sr->fd >= 0)
            close(sr->fd);
        sr->fd = open(path, O_RDONLY | O_CLOEXEC);
        sr->seq = r->seq;
        if (sr->fd < 0)
            return strata_err_set(err, ERR_IO, "wal: open %s: %s", path, strerror(errno));
    }
    size_t got = 0;
    while (got < r->len) {
        ssize_t n = pread(sr->fd, out + got, r->len - got, (off_t)(r->off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return strata_err_set(err, ERR_IO, "wal: read %s at %" PRIu64 ": %s", path, r->off,
                                  n < 0 ? strerror(errno) : "short read");
        got += (size_t)n;
    }
    uint32_t len = get32(out + 8);
    if (record_size(len) != r->len || out[12] != REC_ENTRIES || get64(out + 16) != gid ||
        get64(out) != XXH3_64bits(out + 8, REC_HDR - 8 + len) ||
        get64(out + REC_HDR) != r->rec_first)
        return strata_err_set(err, ERR_CORRUPT, "wal: %s offset %" PRIu64 ": record damaged", path,
                              r->off);
    return 0;
}

int wal_read_entries(wal *w, uint64_t gid, uint64_t from, uint64_t to, size_t max_bytes,
                     wal_entry **out, size_t *n_out, strata_err *err)
{
    *out = NULL;
    *n_out = 0;
    const group *g = group_find(w, gid);
    if (!g || g->dropped)
        return strata_err_set(err, ERR_NOT_FOUND, "wal: no group %" PRIu64, gid);
    if (from > to || from < group_first_index(g) || to > g->last_index)
        return strata_err_set(err, ERR_NOT_FOUND,
                              "wal: group %" PRIu64 ": entries %" PRIu64 "..%" PRIu64
                              " not in [%" PRIu64 ", %" PRIu64 "]",
                              gid, from, to, group_first_index(g), g->last_index);
    /* Binary search for the run holding `from`. */
    size_t lo = g->head, hi = g->nruns;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->runs[mid].lo <= from)
            lo = mid;
        else
            hi = mid;
    }
    buf payloads, list;
    buf_init(&payloads, 0);
    buf_init(&list, 0);
    uint8_t *rec = NULL;
    size_t rec_cap = 0, count = 0, bytes = 0;
    bool full = false;
    int rc = 0;
    seg_reader sr = {-1, 0};
    for (size_t i = lo; i < g->nruns && !full && g->runs[i].lo <= to; i++) {
        const run *r = &g->runs[i];
        if (r->seq > w->durable_seq ||
            (r->seq == w->durable_seq && r->off + r->len > w->durable_off)) {
            rc = strata_err_set(err, ERR_BUSY,
                                "wal: group %" PRIu64 ": entry %" PRIu64 " is not written yet", gid,
                                r->lo);
            break;
        }
        if (r->len > rec_cap) {
            uint8_t *p = realloc(rec, r->len);
            if (!p) {
                rc = strata_err_set(err, ERR_NOMEM, "wal: out of memory");
                break;
            }
            rec = p, rec_cap = r->len;
        }
        if ((rc = read_record(w, &sr, r, rec, gid, err)) != 0)
            break;
        rd in;
        rd_init(&in, rec + REC_HDR, get32(rec + 8));
        uint64_t idx = rd_u64be(&in);
        uint32_t cnt = rd_u32be(&in);
        for (uint32_t k = 0; k < cnt && !in.failed; k++, idx++) {
            uint64_t term = rd_u64be(&in);
            uint8_t type = rd_u8(&in);
            uint32_t len = rd_u32be(&in);
            const uint8_t *p = rd_bytes(&in, len);
            if (in.failed || idx < r->lo || idx < from)
                continue;
            if (idx > r->hi || idx > to)
                break;
            if (max_bytes && count > 0 && bytes + len > max_bytes) {
                full = true;
                break;
            }
            wal_entry e = {term, type, (const void *)(uintptr_t)payloads.len, len};
            buf_append(&payloads, p, len);
            buf_append(&list, &e, sizeof e);
            count++, bytes += len;
        }
        if (in.failed) {
            rc = strata_err_set(err, ERR_CORRUPT,
                                "wal: segment %" PRIu64 " offset %" PRIu64 ": bad entries record",
                                r->seq, r->off);
            break;
        }
    }
    free(rec);
    if (sr.fd >= 0)
        close(sr.fd);
    if (rc == 0 && (payloads.failed || list.failed))
        rc = strata_err_set(err, ERR_NOMEM, "wal: out of memory");
    if (rc == 0) {
        wal_entry *block = malloc(list.len + payloads.len + 1);
        if (!block) {
            rc = strata_err_set(err, ERR_NOMEM, "wal: out of memory");
        } else {
            uint8_t *data = (uint8_t *)block + list.len;
            if (list.len)
                memcpy(block, list.data, list.len);
            if (payloads.len)
                memcpy(data, payloads.data, payloads.len);
            for (size_t i = 0; i < count; i++)
                block[i].data = data + (uintptr_t)block[i].data;
            *out = block;
            *n_out = count;
        }
    }
    buf_free(&payloads);
    buf_free(&list);
    return rc;
}

/* ---------------------------------------------------------------------------------- */
/* State queries                                                                      */

size_t wal_groups(const wal *w, uint64_t *ids, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < w->groups.cap; i++) {
        if (!w->groups.used[i])
            continue;
        const group *g = (const group *)(uintptr_t)w->groups.vals[i];
        if (g->dropped)
            continue;
        if (n < cap)
            ids[n] = g->id;
        n++;
    }
    return n;
}

int wal_group_state(const wal *w, uint64_t gid, wal_group_info *out, strata_err *err)
{
    const group *g = group_find(w, gid);
    if (!g || g->dropped)
        return strata_err_set(err, ERR_NOT_FOUND, "wal: no group %" PRIu64, gid);
    *out = (wal_group_info){
        .term = g->term,
        .vote = g->vote,
        .snapshot_index = g->snap_index,
        .snapshot_term = g->snap_term,
        .snapshot_meta = g->meta,
        .snapshot_meta_len = g->meta_len,
        .keep_from = g->keep_from,
        .first_index = group_first_index(g),
        .last_index = g->last_index,
    };
    return 0;
}

bool wal_failed(const wal *w, strata_err *why)
{
    if (w->failed && why != NULL)
        *why = w->fail_err;
    return w->failed;
}

void wal_get_stats(const wal *w, wal_stats *out)
{
    *out = w->stats;
    out->segments = w->nsegs;
    out->prepared = w->spare_state != SPARE_NONE;
    out->spare_ready = w->spare_state == SPARE_READY;
    out->first_seq = w->nsegs ? w->segs[0].seq : 0;
    out->last_seq = w->nsegs ? w->segs[w->nsegs - 1].seq : 0;
}

/* ---------------------------------------------------------------------------------- */
/* Recovery                                                                           */

typedef struct {
    uint32_t len;
    uint8_t kind;
    uint64_t group;
    uint64_t batch;
    size_t size; /* whole record, aligned */
} rec_hdr;

/* Reads the written part of the tail segment's last block, so the first write after
 * opening covers whole blocks too (write_chunk). A failed read leaves the block unknown:
 * that write is then unaligned, which costs time, not correctness. */
static void load_tail_block(wal *w, uint64_t seq, uint64_t end_off)
{
    uint64_t off = end_off - end_off % w->blk_size;
    size_t len = (size_t)(end_off - off), got = 0;
    while (got < len) {
        ssize_t k = pread(w->tail_fd, w->blk + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        got += (size_t)k;
    }
    w->blk_seq = seq;
    w->blk_off = off;
    w->blk_len = len;
}

static bool is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* Whether a whole, checksummed record starts at `off` of the `size` bytes at `p`. */
static bool record_at(const uint8_t *p, size_t size, size_t off, rec_hdr *h)
{
    if (off + REC_HDR > size)
        return false;
    const uint8_t *r = p + off;
    h->len = get32(r + 8);
    h->kind = r[12];
    if (h->kind == 0 || h->kind >= REC_KIND_MAX || r[13] || r[14] || r[15])
        return false;
    if (h->len > size - off - REC_HDR)
        return false;
    h->group = get64(r + 16);
    h->batch = get64(r + 24);
    h->size = record_size(h->len);
    if (h->size > size - off)
        return false;
    return get64(r) == XXH3_64bits(r + 8, REC_HDR - 8 + h->len);
}

/* Scans [from, size) at every aligned offset for valid records; returns how many were
 * found, the highest batch among them and (if first is not NULL) where the first is. */
static size_t scan_valid(const uint8_t *p, size_t size, size_t from, uint64_t *max_batch,
                         size_t *first)
{
    size_t found = 0;
    rec_hdr h;
    for (size_t off = align8(from); off + REC_HDR <= size;) {
        if (get64(p + off) != 0 && record_at(p, size, off, &h)) {
            if (found++ == 0 && first)
                *first = off;
            if (h.batch > *max_batch)
                *max_batch = h.batch;
            off += h.size;
        } else {
            off += 8;
        }
    }
    return found;
}

/*
 * Whether the damage between a stop at `from` and the next valid record at `to` looks
 * like a torn write: segments are preallocated, so sectors the disk never wrote read back
 * as zeros, and at least one whole (512-byte, aligned) sector of zeros must end by `to`
 * and reach past `from`. A flipped bit or overwritten bytes leave no such sector: then
 * the valid record after the damage makes it corruption.
 */
static bool looks_torn(const uint8_t *p, size_t from, size_t to)
{
    for (size_t s = from & ~(size_t)511; s + 512 <= to; s += 512)
        if (s + 512 > from && is_zero(p + s, 512))
            return true;
    return false;
}

static int corrupt(const char *path, uint64_t off, const char *why, strata_err *err)
{
    return strata_err_set(err, ERR_CORRUPT, "wal: %s offset %" PRIu64 ": %s", path, off, why);
}

/* Replays one record into the group state. Its checksum has been verified. */
static int replay(wal *w, const uint8_t *r, const rec_hdr *h, uint64_t seq, uint64_t off,
                  const char *path, strata_err *err)
{
    rd in;
    rd_init(&in, r + REC_HDR, h->len);
    group *g = group_get(w, h->group, err);
    if (!g)
        return -1;
    int rc = 0;
    switch (h->kind) {
    case REC_ENTRIES: {
        uint64_t first = rd_u64be(&in);
        uint32_t count = rd_u32be(&in);
        for (uint32_t i = 0; i < count && !in.failed; i++) {
            rd_u64be(&in);
            rd_u8(&in);
            rd_bytes(&in, rd_u32be(&in));
        }
        if (in.failed || count == 0 || rd_left(&in) != 0 || first == 0 || first + count < first)
            return corrupt(path, off, "malformed entries record", err);
        rc = apply_entries(w, g, first, count, seq, off, (uint32_t)h->size);
        break;
    }
    case REC_TERM_VOTE: {
        uint64_t term = rd_u64be(&in), vote = rd_u64be(&in);
        if (in.failed || rd_left(&in) != 0)
            return corrupt(path, off, "malformed term/vote record", err);
        apply_term_vote(g, term, vote, seq, h->batch);
        rc = segment_note(w, seq, g->id, 0);
        break;
    }
    case REC_TRUNCATE: {
        uint64_t from = rd_u64be(&in);
        if (in.failed || rd_left(&in) != 0 || from == 0)
            return corrupt(path, off, "malformed truncate record", err);
        truncate_from(w, g, from);
        rc = segment_note(w, seq, g->id, 0);
        break;
    }
    case REC_SNAPSHOT: {
        uint64_t index = rd_u64be(&in), term = rd_u64be(&in), keep = rd_u64be(&in);
        uint32_t meta_len = rd_u32be(&in);
        const uint8_t *meta = rd_bytes(&in, meta_len);
        if (in.failed || rd_left(&in) != 0 || keep > index + 1)
            return corrupt(path, off, "malformed snapshot record", err);
        rc = apply_snapshot(w, g, index, term, keep, meta, meta_len, seq, h->batch, UINT64_MAX);
        if (rc == 0)
            rc = segment_note(w, seq, g->id, 0);
        break;
    }
    case REC_DROP:
        if (h->len != 0)
            return corrupt(path, off, "malformed drop record", err);
        apply_drop(w, g, h->batch);
        rc = segment_note(w, seq, g->id, 0);
        break;
    }
    if (rc != 0)
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory during recovery");
    return 0;
}

static int read_file(const char *path, uint8_t **data, size_t *size, strata_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_err_set(err, ERR_IO, "wal: open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return strata_err_set(err, ERR_IO, "wal: stat %s: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > SEG_FILE_MAX) {
        close(fd);
        return corrupt(path, 0, "segment file too large", err);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *p = realloc(*data, n ? n : 1);
    if (!p) {
        close(fd);
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory reading %s", path);
    }
    *data = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, p + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            close(fd);
            return strata_err_set(err, ERR_IO, "wal: read %s: %s", path,
                                  r < 0 ? strerror(errno) : "short read");
        }
        got += (size_t)r;
    }
    close(fd);
    *size = n;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The sequence numbers of the segment files in the directory, sorted. */
static int list_segments(wal *w, uint64_t **out, size_t *n, strata_err *err)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return strata_err_set(err, ERR_IO, "wal: opendir %s: %s", w->dir, strerror(errno));
    uint64_t *seqs = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strlen(name) != 20 || strcmp(name + 16, ".wal") != 0)
            continue;
        uint64_t seq = 0;
        bool hex = true;
        for (int i = 0; i < 16; i++) {
            char c = name[i];
            int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (v < 0)
                hex = false;
            seq = seq << 4 | (uint64_t)(v & 15);
        }
        if (!hex || seq == 0)
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            uint64_t *p = realloc(seqs, cap * sizeof *p);
            if (!p) {
                free(seqs);
                closedir(d);
                return strata_err_set(err, ERR_NOMEM, "wal: out of memory");
            }
            seqs = p;
        }
        seqs[count++] = seq;
    }
    closedir(d);
    if (count > 1)
        qsort(seqs, count, sizeof *seqs, cmp_u64);
    *out = seqs;
    *n = count;
    return 0;
}

static int zero_range(int fd, const char *path, size_t from, size_t to, strata_err *err)
{
    static const uint8_t zeros[65536];
    while (from < to) {
        size_t n = to - from < sizeof zeros ? to - from : sizeof zeros;
        ssize_t r = pwrite(fd, zeros, n, (off_t)from);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return strata_err_set(err, ERR_IO, "wal: zero tail of %s: %s", path,
                                  r < 0 ? strerror(errno) : "short write");
        from += (size_t)r;
    }
    if (fdatasync(fd) != 0)
        return strata_err_set(err, ERR_IO, "wal: fdatasync %s: %s", path, strerror(errno));
    return 0;
}

/* Zeroes whatever non-zero bytes follow `from` in the segment at `path`. */
static int zero_tail(wal *w, const char *path, size_t from, strata_err *err)
{
    size_t size;
    if (read_file(path, &w->scratch, &size, err) != 0)
        return -1;
    size_t hw = size;
    while (hw > from && w->scratch[hw - 1] == 0)
        hw--;
    if (hw <= from)
        return 0;
    w->stats.tail_truncated += hw - from;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return strata_err_set(err, ERR_IO, "wal: open %s: %s", path, strerror(errno));
    int rc = zero_range(fd, path, from, hw, err);
    close(fd);
    return rc;
}

/* Whether any segment after index i holds a valid record (reads them). */
static int later_segments_valid(wal *w, const uint64_t *seqs, size_t n, size_t i, bool *any,
                                uint64_t *max_batch, strata_err *err)
{
    char path[4096];
    *any = false;
    for (size_t j = i + 1; j < n; j++) {
        size_t size;
        segment_path(w->dir, seqs[j], path, sizeof path);
        if (read_file(path, &w->scratch, &size, err) != 0)
            return -1;
        if (scan_valid(w->scratch, size, SEG_HDR, max_batch, NULL) > 0)
            *any = true;
    }
    return 0;
}

/*
 * Replays every segment. Sets the logical tail, the next batch number, and truncates a
 * torn tail (zeroing it and removing the segments after it).
 */
static int recover(wal *w, strata_err *err)
{
    uint64_t *seqs = NULL;
    size_t n = 0;
    if (list_segments(w, &seqs, &n, err) != 0)
        return -1;
    char path[4096];
    uint64_t last_batch = 0;
    size_t tail_i = SIZE_MAX; /* segment where the log ends, if it ends in a torn tail */
    size_t tail_off = 0, end_off = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i > 0 && seqs[i] != seqs[i - 1] + 1) {
            segment_path(w->dir, seqs[i - 1] + 1, path, sizeof path);
            rc = corrupt(path, 0, "segment missing", err);
            break;
        }
        segment_path(w->dir, seqs[i], path, sizeof path);
        size_t size;
        if ((rc = read_file(path, &w->scratch, &size, err)) != 0)
            break;
        const uint8_t *p = w->scratch;
        if (segments_push(w, seqs[i], size) != 0) {
            rc = strata_err_set(err, ERR_NOMEM, "wal: out of memory");
            break;
        }
        size_t off = 0;
        bool bad = true; /* a damaged header counts as a bad record at offset 0 */
        if (size >= SEG_HDR && get64(p) == SEG_MAGIC && get32(p + 8) == SEG_VERSION &&
            get64(p + 16) == seqs[i] && get64(p + 24) == XXH3_64bits(p, 24)) {
            off = SEG_HDR;
            rec_hdr h;
            while (off + REC_HDR <= size) {
                if (is_zero(p + off, REC_HDR)) {
                    bad = false;
                    break;
                }
                if (!record_at(p, size, off, &h) || h.batch < last_batch)
                    break;
                if ((rc = replay(w, p + off, &h, seqs[i], off, path, err)) != 0)
                    break;
                last_batch = h.batch;
                off += h.size;
            }
            if (rc != 0)
                break;
            if (off + REC_HDR > size)
                bad = false; /* segment full */
        }
        end_off = off;
        /* A stop point: the end of this segment's records, or damage. */
        uint64_t after_batch = 0;
        size_t next_valid = 0;
        size_t after =
            scan_valid(p, size, off + (off == 0 ? SEG_HDR : 0), &after_batch, &next_valid);
        if (after > 0 && after_batch >= last_batch + 2) {
            rc = corrupt(path, off, "damaged record followed by records of later batches", err);
            break;
        }
        /* Valid records of the same or the next batch after the damage: a torn write of
         * the last batch only if the damage has the shape of unwritten sectors. */
        if (after > 0 && !looks_torn(p, off, next_valid)) {
            rc = corrupt(path, off, "damaged record followed by valid records", err);
            break;
        }
        if (after == 0 && !bad)
            continue; /* a clean end of segment; the log may go on in the next one */
        /* Damage with nothing synced after it in this segment: a torn tail, provided no
         * later segment holds a valid record (the worker syncs a segment before
         * creating the next one). */
        bool any;
        uint64_t later_batch = 0;
        if ((rc = later_segments_valid(w, seqs, n, i, &any, &later_batch, err)) != 0)
            break;
        if (any) {
            segment_path(w->dir, seqs[i], path, sizeof path);
            rc = corrupt(path, off, "damaged record followed by later segments", err);
            break;
        }
        tail_i = i;
        tail_off = off;
        break;
    }
    /* Even a clean end may leave bytes of an unsynced batch further on: zero them too,
     * so that later appends never meet stale records. */
    if (rc == 0 && tail_i == SIZE_MAX && n > 0 && w->nsegs == n) {
        tail_i = n - 1;
        tail_off = end_off;
    }
    if (rc == 0 && tail_i != SIZE_MAX) {
        /* Remove the segments after the torn tail, and the tail segment itself if even
         * its header is damaged; zero the damaged bytes of the tail segment. */
        size_t keep = tail_off == 0 ? tail_i : tail_i + 1;
        for (size_t j = n; j-- > keep;) {
            segment_path(w->dir, seqs[j], path, sizeof path);
            size_t size;
            if ((rc = read_file(path, &w->scratch, &size, err)) != 0)
                break;
            while (size > 0 && w->scratch[size - 1] == 0)
                size--;
            w->stats.tail_truncated += size; /* a prepared, unused segment counts 0 */
            if (unlink(path) != 0 && errno != ENOENT) {
                rc = strata_err_set(err, ERR_IO, "wal: unlink %s: %s", path, strerror(errno));
                break;
            }
        }
        if (rc == 0 && fsync(w->dir_fd) != 0)
            rc = strata_err_set(err, ERR_IO, "wal: fsync %s: %s", w->dir, strerror(errno));
        if (rc == 0 && keep == tail_i + 1) {
            segment_path(w->dir, seqs[tail_i], path, sizeof path);
            rc = zero_tail(w, path, tail_off, err);
        }
        /* Segments past `keep` were never replayed except the torn one, whose records
         * before tail_off were; drop the bookkeeping of removed segments. */
        while (rc == 0 && w->nsegs > keep) {
            w->nsegs--;
            map_free(&w->segs[w->nsegs].groups);
        }
        end_off = tail_off;
        if (keep == tail_i && keep > 0) {
            /* The log now ends at the end of the previous segment's records. Re-find it. */
            segment_path(w->dir, seqs[keep - 1], path, sizeof path);
            size_t size;
            if (rc == 0 && (rc = read_file(path, &w->scratch, &size, err)) == 0) {
                size_t off = SEG_HDR;
                rec_hdr h;
                while (off + REC_HDR <= size && record_at(w->scratch, size, off, &h))
                    off += h.size;
                end_off = off;
            }
        }
    }
    free(seqs);
    if (rc != 0)
        return -1;
    /* Entries missing below a gap must have been below keep_from (removed segments). */
    for (size_t i = 0; i < w->groups.cap; i++) {
        if (!w->groups.used[i])
            continue;
        group *g = (group *)(uintptr_t)w->groups.vals[i];
        if (!g->dropped && g->gap_at > g->keep_from && g->gap_at > g->snap_index + 1)
            return strata_err_set(err, ERR_CORRUPT,
                                  "wal: group %" PRIu64 ": entries %" PRIu64 "..%" PRIu64
                                  " are missing (removed segment?)",
                                  g->id, g->keep_from, g->gap_at - 1);
        g->gap_at = 0;
        if (g->has_snap)
            g->durable_keep = g->keep_from;
    }
    /* Anything of a later batch past the end was zeroed or removed above, so numbering
     * resumes right after the last batch replayed. */
    w->synced_batch = last_batch;
    w->pending->number = last_batch + 1;
    /* After a torn tail the removed segments' numbers are reused, keeping them
     * contiguous. */
    w->next_seq = w->nsegs > 0 ? w->segs[w->nsegs - 1].seq + 1 : 1;
    if (w->nsegs > 0) {
        segment *t = &w->segs[w->nsegs - 1];
        w->cur_seq = t->seq;
        w->cur_off = end_off;
        w->cur_cap = t->cap;
        w->cur_started_ms = uv_now(w->loop); /* a pace for its spare from here on */
        w->durable_seq = t->seq;
        w->durable_off = end_off;
        segment_path(w->dir, t->seq, path, sizeof path);
        w->tail_fd = open(path, O_RDWR | O_CLOEXEC);
        if (w->tail_fd < 0)
            return strata_err_set(err, ERR_IO, "wal: open %s: %s", path, strerror(errno));
        load_tail_block(w, t->seq, end_off);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Open and close                                                                     */

static void wal_free(wal *w)
{
    for (size_t i = 0; i < w->groups.cap; i++) {
        if (!w->groups.used[i])
            continue;
        group *g = (group *)(uintptr_t)w->groups.vals[i];
        free(g->runs);
        free(g->meta);
        free(g);
    }
    map_free(&w->groups);
    for (size_t i = 0; i < w->nsegs; i++)
        map_free(&w->segs[i].groups);
    free(w->segs);
    for (int i = 0; i < 3; i++) {
        buf_free(&w->batches[i].data);
        free(w->batches[i].chunks);
        free(w->batches[i].cbs);
    }
    if (w->tail_fd >= 0)
        close(w->tail_fd);
    if (w->spare_fd >= 0)
        close(w->spare_fd); /* its file has no header: the next recovery removes it */
    if (w->dir_fd >= 0)
        close(w->dir_fd);
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    free(w->scratch);
    free(w->blk);
    free(w->dir);
    free(w);
}

int wal_open(const wal_options *opts, uv_loop_t *loop, wal **out, strata_err *err)
{
    *out = NULL;
    if (!opts || !opts->dir || !*opts->dir || strlen(opts->dir) > 4000)
        return strata_err_set(err, ERR_VALIDATION, "wal: a directory is required");
    uint64_t seg_size = opts->segment_size ? opts->segment_size : SEG_DEFAULT;
    if (seg_size < SEG_MIN || seg_size > SEG_FILE_MAX || seg_size % 8 != 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "wal: segment size %" PRIu64 " not a multiple of 8 in [%u, %llu]",
                              seg_size, SEG_MIN, (unsigned long long)SEG_FILE_MAX);
    wal *w = calloc(1, sizeof *w);
    if (!w)
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory");
    w->loop = loop;
    w->dir_fd = w->lock_fd = w->tail_fd = w->spare_fd = -1;
    w->seg_size = seg_size;
    w->max_pending = opts->max_pending_bytes ? opts->max_pending_bytes : PENDING_DEFAULT;
    w->spare_fill_ms = opts->spare_fill_ms;
    w->hold_ops = opts->hold_ops;
    atomic_init(&w->spare_hurry, false);
    long page = sysconf(_SC_PAGESIZE);
    w->blk_size = page < BLOCK_MIN ? BLOCK_MIN : page > BLOCK_MAX ? BLOCK_MAX : (size_t)page;
    w->blk = malloc(w->blk_size);
    w->dir = strdup(opts->dir);
    w->pending = &w->batches[0];
    w->flight = &w->batches[1];
    w->done = &w->batches[2];
    for (int i = 0; i < 3; i++)
        buf_init(&w->batches[i].data, 0);
    w->next_seq = 1;
    if (!w->dir || !w->blk) {
        wal_free(w);
        return strata_err_set(err, ERR_NOMEM, "wal: out of memory");
    }
    char path[4096];
    if (mkdir(w->dir, 0755) != 0 && errno != EEXIST) {
        strata_err_set(err, ERR_IO, "wal: mkdir %s: %s", w->dir, strerror(errno));
        goto fail;
    }
    w->dir_fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->dir_fd < 0) {
        strata_err_set(err, ERR_IO, "wal: open %s: %s", w->dir, strerror(errno));
        goto fail;
    }
    snprintf(path, sizeof path, "%s/LOCK", w->dir);
    w->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (w->lock_fd < 0) {
        strata_err_set(err, ERR_IO, "wal: open %s: %s", path, strerror(errno));
        goto fail;
    }
    if (flock(w->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        strata_err_set(err, errno == EWOULDBLOCK ? ERR_BUSY : ERR_IO,
                       "wal: lock %s: %s (another process has this log open?)", path,
                       strerror(errno));
        goto fail;
    }
    if (recover(w, err) != 0)
        goto fail;
    free(w->scratch);
    w->scratch = NULL;
    uv_prepare_init(loop, &w->prepare);
    w->prepare.data = w;
    uv_timer_init(loop, &w->hold);
    w->hold.data = w;
    maybe_remove_segments(w);
    maybe_prepare_spare(w);
    *out = w;
    return 0;
fail:
    wal_free(w);
    return -1;
}

static void on_closed(uv_handle_t *h)
{
    wal *w = h->data;
    void (*cb)(void *) = w->close_cb;
    void *data = w->close_data;
    wal_free(w);
    if (cb)
        cb(data);
}

/* The handles close one after the other, the log freed after the last: libuv promises
 * no order among close callbacks. */
static void on_hold_closed(uv_handle_t *h)
{
    wal *w = h->data;
    uv_close((uv_handle_t *)&w->prepare, on_closed);
}

static void maybe_finish_close(wal *w)
{
    if (!w->closing || w->close_started || w->in_flight || w->removing ||
        w->spare_state == SPARE_CREATING || (w->pending->nchunks > 0 && !w->failed))
        return;
    w->close_started = true;
    uv_close((uv_handle_t *)&w->hold, on_hold_closed);
}

void wal_close(wal *w, void (*cb)(void *data), void *data)
{
    w->closing = true;
    atomic_store(&w->spare_hurry, true); /* a paced spare fill must not hold up the close */
    w->close_cb = cb;
    w->close_data = data;
    uv_timer_stop(&w->hold); /* a held batch goes now: the close goes first */
    if (w->pending->nchunks > 0 && !w->failed)
        start_flush(w);
    maybe_finish_close(w);
}
