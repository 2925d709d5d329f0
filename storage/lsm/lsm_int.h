#ifndef STRATA_LSM_INT_H
#define STRATA_LSM_INT_H
/*
 * Private to storage/lsm (and its tests and fuzz harnesses): internal keys, the internal
 * iterator interface, memtables, table files, the block cache, versions and the manifest.
 *
 * An internal key is the user key followed by an 8-byte little-endian trailer
 * (seq << 8 | type). Internal keys sort by user key ascending, then trailer descending, so
 * the newest version of a user key comes first and a seek to (key, snapshot_seq) lands on
 * the newest version visible at that snapshot.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "storage/lsm/lsm.h"

enum { TYPE_DEL = 0, TYPE_PUT = 1 };
#define SEQ_MAX      ((1ull << 56) - 1)
#define TRAILER_SIZE 8

static inline uint64_t trailer_pack(uint64_t seq, int type)
{
    return (seq << 8) | (uint64_t)type;
}

static inline void trailer_put(uint8_t *p, uint64_t t)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(t >> (8 * i));
}

static inline uint64_t trailer_get(const uint8_t *ikey, size_t n)
{
    const uint8_t *p = ikey + n - TRAILER_SIZE;
    uint64_t t = 0;
    for (int i = 7; i >= 0; i--)
        t = (t << 8) | p[i];
    return t;
}

static inline uint64_t ikey_seq(const uint8_t *ikey, size_t n)
{
    return trailer_get(ikey, n) >> 8;
}

static inline int ikey_type(const uint8_t *ikey, size_t n)
{
    return (int)(trailer_get(ikey, n) & 0xff);
}

/* memcmp order, shorter prefix first. */
static inline int ukey_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

static inline int ikey_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = ukey_cmp(a, an - TRAILER_SIZE, b, bn - TRAILER_SIZE);
    if (c != 0)
        return c;
    uint64_t ta = trailer_get(a, an), tb = trailer_get(b, bn);
    return ta > tb ? -1 : ta < tb ? 1 : 0;
}

/* Builds (ukey, seq, type) into b (reset first). */
void ikey_build(buf *b, const void *ukey, size_t n, uint64_t seq, int type);

/* ---- Internal iterators: over internal keys, forward and reverse ---- */
typedef struct iter iter;
struct iter {
    void (*first)(iter *it);
    void (*last)(iter *it);
    void (*seek)(iter *it, const uint8_t *ikey, size_t n); /* first >= ikey */
    void (*next)(iter *it);
    void (*prev)(iter *it);
    bool (*valid)(const iter *it);
    const uint8_t *(*key)(const iter *it, size_t *n);
    const uint8_t *(*value)(const iter *it, size_t *n);
    int (*status)(const iter *it, strata_err *err);
    void (*destroy)(iter *it);
};

/* ---- Range tombstones: delete [start, end) for entries with seq < seq ---- */
typedef struct {
    uint8_t *start, *end;
    uint32_t start_len, end_len;
    uint64_t seq;
} rtomb;

static inline bool rtomb_covers(const rtomb *t, const void *ukey, size_t n)
{
    return ukey_cmp(t->start, t->start_len, ukey, n) <= 0 &&
           ukey_cmp(ukey, n, t->end, t->end_len) < 0;
}

/* ---- Memtable: an arena-backed skiplist; written only by the loop thread ---- */
typedef struct memtable memtable;
typedef struct u64map u64map;

/* Arena chunks of chunk_bytes (clamped to 4 KiB..1 MiB): the overshoot past a bound. */
memtable *mem_new(size_t chunk_bytes);
void mem_ref(memtable *m);
void mem_unref(memtable *m);
int mem_refs(const memtable *m); /* references held */
/* Copies the entry in; false on OOM. */
bool mem_add(memtable *m, uint64_t seq, int type, const void *key, size_t klen, const void *val,
             size_t vlen);
bool mem_add_rtomb(memtable *m, uint64_t seq, const void *s, size_t sn, const void *e, size_t en);
/* Newest entry of ukey with seq <= snap: 1 found (*seq_out, *type_out, value pointer into
 * the arena), 0 none. */
int mem_get(memtable *m, const void *ukey, size_t n, uint64_t snap, uint64_t *seq_out,
            int *type_out, const uint8_t **val, size_t *vlen);
size_t mem_bytes(const memtable *m);    /* entry bytes */
size_t mem_reserved(const memtable *m); /* allocated bytes */
size_t mem_count(const memtable *m);
const rtomb *mem_rtombs(const memtable *m, int *n);
iter *mem_iter_new(memtable *m); /* holds a reference */
/* For flush workers: the job holds the reference (refcounts are loop-thread only). */
iter *mem_iter_new_unpinned(memtable *m);
u64map *mem_log_indexes(memtable *m);
/* Ranges whose log index lsm_write_forget dropped while this memtable was mutable. */
u64map *mem_forgets(memtable *m);
uint64_t mem_id(const memtable *m);
void mem_set_id(memtable *m, uint64_t id);

/* ---- A small u64 -> u64 hash map (range_id -> log index) ---- */
u64map *u64map_new(void);
void u64map_free(u64map *m);
bool u64map_max(u64map *m, uint64_t k, uint64_t v); /* sets k to max(old, v) */
void u64map_del(u64map *m, uint64_t k);             /* no-op if absent */
uint64_t u64map_get(const u64map *m, uint64_t k);
size_t u64map_count(const u64map *m);
/* Iterates: *pos starts at 0; returns false at the end. */
bool u64map_next(const u64map *m, size_t *pos, uint64_t *k, uint64_t *v);
u64map *u64map_copy(const u64map *m);

/* ---- Block cache: LRU over decoded data blocks, loop thread only ---- */
typedef struct block block;
struct block {
    uint8_t *data; /* uncompressed block */
    size_t len;
    uint32_t nrestarts;
    size_t restarts; /* offset of the restart array */
    int refs;
    size_t charge;
};
void block_unref(block *b);

typedef struct cache cache;
cache *cache_new(size_t capacity);
void cache_free(cache *c);
block *cache_lookup(cache *c, uint64_t file, uint64_t off);         /* referenced, or NULL */
void cache_insert(cache *c, uint64_t file, uint64_t off, block *b); /* takes a ref */
size_t cache_charge(const cache *c);
void cache_stats(const cache *c, uint64_t *hits, uint64_t *misses);
void cache_erase_file(cache *c, uint64_t file);

/* ---- Table files ---- */
typedef struct {
    size_t block_bytes;
    int bloom_bits_per_key;
    bool no_compression;
} table_opts;

typedef struct table_builder table_builder;
table_builder *tb_new(const char *path, const table_opts *o, strata_err *err);
/* Entries in strictly increasing internal-key order. */
int tb_add(table_builder *tb, const uint8_t *ikey, size_t klen, const uint8_t *val, size_t vlen,
           strata_err *err);
uint64_t tb_entries(const table_builder *tb);
uint64_t tb_size_estimate(const table_builder *tb);
/* Writes filter, index and footer, fsyncs and closes; *size_out is the file size. */
int tb_finish(table_builder *tb, uint64_t *size_out, strata_err *err);
void tb_abandon(table_builder *tb); /* closes and unlinks */

typedef struct table table;
/* Opens and verifies footer, index and filter. `name` is used in error messages. */
table *table_open(const char *path, const char *name, uint64_t number, strata_err *err);
/* Same, over bytes in memory (fuzzing): no file descriptor. */
table *table_open_mem(const uint8_t *data, size_t len, strata_err *err);
void table_close(table *t);
uint64_t table_file_size(const table *t);
size_t table_meta_bytes(const table *t);
uint64_t table_number(const table *t);
/* Newest entry of ukey with seq <= snap. 1 found (value appended to val after a reset),
 * 0 none, -1 error. `c` may be NULL (worker threads). */
int table_get(table *t, cache *c, const void *ukey, size_t n, uint64_t snap, uint64_t *seq_out,
              int *type_out, buf *val, strata_err *err);
iter *table_iter_new(table *t, cache *c);
bool table_may_contain(const table *t, const void *ukey, size_t n);

/* ---- Files and versions ---- */
typedef struct file_meta {
    uint64_t number, size;
    uint64_t min_seq, max_seq;
    uint64_t clean_seq;          /* no entry here is covered by a range tombstone of seq <= this */
    uint8_t *smallest, *largest; /* internal keys */
    uint32_t smallest_len, largest_len;
    table *t;      /* open reader */
    int refs;      /* versions holding it (loop thread) */
    bool obsolete; /* dropped from the current version: unlink at refs == 0 */
    struct lsm *db;
} file_meta;

typedef struct version {
    int refs;
    file_meta **files[LSM_LEVELS]; /* level 0 newest first; others by key */
    int nfiles[LSM_LEVELS];
    rtomb *tombs;
    int ntombs;
} version;

/* True if [smallest, largest] of f overlaps user keys [lo, hi] (NULL = unbounded). */
bool file_overlaps(const file_meta *f, const uint8_t *lo, size_t lon, const uint8_t *hi,
                   size_t hin);

/* ---- Manifest: the durable state, replaced atomically ---- */
typedef struct {
    uint64_t next_file;
    uint64_t last_seq;
    int nfiles;
    struct mf_file {
        int level;
        uint64_t number, size, min_seq, max_seq, clean_seq;
        const uint8_t *smallest, *largest;
        uint32_t smallest_len, largest_len;
    } * files;
    int ntombs;
    rtomb *tombs; /* point into the decoded bytes */
    u64map *durable;
} manifest;

/* Encodes into out (appended). */
/* Encodes v minus `deleted` (file numbers) plus `added` into out (appended). */
void manifest_encode(buf *out, uint64_t next_file, uint64_t last_seq, const version *v,
                     const uint64_t *deleted, int ndeleted, file_meta *const *added,
                     const int *added_level, int nadded, const rtomb *tombs, int ntombs,
                     const u64map *durable);
/* Decodes untrusted bytes; pointers in *m point into data. */
int manifest_decode(const uint8_t *data, size_t len, manifest *m, strata_err *err);
void manifest_clear(manifest *m);
/* Writes MANIFEST.tmp, fsyncs, renames to MANIFEST, fsyncs dir. *renamed tells whether
 * the new MANIFEST replaced the old one: after a failure with *renamed set, the files it
 * names may be the database's live files on the next open and must not be deleted. */
int manifest_write_file(const char *dir, const uint8_t *data, size_t len, bool *renamed,
                        strata_err *err);

/* ---- Iterators ---- */
iter *merge_iter_new(iter **children, int n); /* takes ownership of children */
iter *level_iter_new(file_meta **files, int n, cache *c);
/* Empty iterator carrying an error (or none). */
iter *error_iter_new(const strata_err *err);

/* Encoded snapshot list helper: index of the first snapshot >= seq ("stripe"). */
int snap_stripe(const uint64_t *snaps, int n, uint64_t seq);

uint64_t lsm_xxh3(const void *p, size_t n);

#endif
