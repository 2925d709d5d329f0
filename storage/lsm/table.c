/*
 * Sorted table files.
 *
 * File layout: data blocks, a bloom filter block, an index block, a 64-byte footer. Every
 * block on disk is `payload | type (u8) | xxh3_64(payload | type) (u64 BE)`, where type 0
 * is raw and type 1 is lz4 (payload = raw length (u32 BE) | lz4 bytes). A decoded block
 * holds entries `shared (varint) | unshared (varint) | vlen (varint) | key suffix | value`,
 * with the key prefix-compressed against the previous entry except at restart points,
 * then the restart offsets (u32 BE each) and their count (u32 BE). The index block maps
 * the last internal key of each data block to its handle (offset, payload size varints).
 * The footer: magic, version, index and filter handles, entry count, xxh3 of the rest.
 *
 * Readers check every checksum before using a byte, and every offset and length against
 * its bounds, so a damaged or hostile file yields ERR_CORRUPT, never a crash or bad data.
 */
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "storage/lsm/lsm_int.h"

#define TABLE_MAGIC      0x5354524154535354ull /* "STRATSST" */
#define TABLE_VERSION    1
#define FOOTER_SIZE      64
#define BLOCK_TRAILER    9
#define RESTART_INTERVAL 16
#define MAX_BLOCK_RAW    (64u * 1024 * 1024)
#define WRITE_CHUNK      (1u << 20)

uint64_t lsm_xxh3(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static uint64_t get_u64(const uint8_t *p)
{
    return ((uint64_t)get_u32(p) << 32) | get_u32(p + 4);
}

/* Bounded varint decode: returns the new position, or NULL when malformed. */
static const uint8_t *varint_dec(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
        uint8_t b = *p++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = r;
            return p;
        }
    }
    return NULL;
}

void ikey_build(buf *b, const void *ukey, size_t n, uint64_t seq, int type)
{
    buf_reset(b);
    buf_append(b, ukey, n);
    uint8_t t[8];
    trailer_put(t, trailer_pack(seq, type));
    buf_append(b, t, 8);
}

/* ---- Bloom filter over user keys ---- */
static int bloom_k(int bits_per_key)
{
    int k = (int)(bits_per_key * 0.69);
    return k < 1 ? 1 : k > 30 ? 30 : k;
}

static bool bloom_check(const uint8_t *bits, size_t nbits, int k, uint64_t h)
{
    uint64_t delta = (h >> 33) | (h << 31);
    for (int i = 0; i < k; i++) {
        uint64_t bit = h % nbits;
        if ((bits[bit / 8] & (1u << (bit % 8))) == 0)
            return false;
        h += delta;
    }
    return true;
}

static void bloom_set(uint8_t *bits, size_t nbits, int k, uint64_t h)
{
    uint64_t delta = (h >> 33) | (h << 31);
    for (int i = 0; i < k; i++) {
        uint64_t bit = h % nbits;
        bits[bit / 8] |= (uint8_t)(1u << (bit % 8));
        h += delta;
    }
}

/* ---- Decoded blocks ---- */
void block_unref(block *b)
{
    if (b != NULL && --b->refs == 0) {
        free(b->data);
        free(b);
    }
}

/* Takes ownership of data. */
static block *block_parse(uint8_t *data, size_t len)
{
    if (len < 4 || len > MAX_BLOCK_RAW)
        return NULL;
    uint32_t n = get_u32(data + len - 4);
    if (n == 0 || (uint64_t)n * 4 > len - 4)
        return NULL;
    size_t restarts = len - 4 - (size_t)n * 4;
    uint32_t prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t off = get_u32(data + restarts + 4 * i);
        if (off >= restarts || (i > 0 && off <= prev) || (i == 0 && off != 0))
            return NULL;
        prev = off;
    }
    block *b = malloc(sizeof *b);
    if (b == NULL)
        return NULL;
    b->data = data;
    b->len = len;
    b->nrestarts = n;
    b->restarts = restarts;
    b->refs = 1;
    b->charge = len + sizeof *b + 64;
    return b;
}

/* ---- Block iterator ---- */
typedef struct {
    block *b;
    size_t cur;  /* offset of the current entry */
    size_t next; /* offset after it */
    buf key;
    const uint8_t *val;
    size_t vlen;
    bool valid;
    bool corrupt;
    bool borrowed; /* the table's index block: never referenced (workers share it) */
} biter;

static void bi_init(biter *bi)
{
    memset(bi, 0, sizeof *bi);
    buf_init(&bi->key, 0);
}

static void bi_set(biter *bi, block *b)
{
    if (bi->b && !bi->borrowed)
        block_unref(bi->b);
    bi->b = b;
    bi->valid = false;
}

static void bi_free(biter *bi)
{
    if (bi->b && !bi->borrowed)
        block_unref(bi->b);
    bi->b = NULL;
    buf_free(&bi->key);
}

static uint32_t restart_at(const block *b, uint32_t i)
{
    return get_u32(b->data + b->restarts + 4 * i);
}

/* Decodes the entry at bi->next; false at the end or on corruption. */
static bool bi_parse(biter *bi)
{
    const block *b = bi->b;
    if (bi->next >= b->restarts) {
        bi->valid = false;
        return false;
    }
    const uint8_t *p = b->data + bi->next, *end = b->data + b->restarts;
    uint64_t shared, unshared, vlen;
    if ((p = varint_dec(p, end, &shared)) == NULL || (p = varint_dec(p, end, &unshared)) == NULL ||
        (p = varint_dec(p, end, &vlen)) == NULL || shared > bi->key.len ||
        unshared > (uint64_t)(end - p) || vlen > (uint64_t)(end - p) - unshared) {
        bi->valid = false;
        bi->corrupt = true;
        return false;
    }
    bi->key.len = shared;
    buf_append(&bi->key, p, unshared);
    if (bi->key.failed || bi->key.len < TRAILER_SIZE) {
        bi->valid = false;
        bi->corrupt = true;
        return false;
    }
    bi->cur = bi->next;
    bi->val = p + unshared;
    bi->vlen = vlen;
    bi->next = (size_t)(bi->val + vlen - b->data);
    bi->valid = true;
    return true;
}

static void bi_to_restart(biter *bi, uint32_t i)
{
    bi->key.len = 0;
    bi->next = restart_at(bi->b, i);
}

static void bi_first(biter *bi)
{
    bi_to_restart(bi, 0);
    bi_parse(bi);
}

static void bi_last(biter *bi)
{
    bi_to_restart(bi, bi->b->nrestarts - 1);
    while (bi_parse(bi) && bi->next < bi->b->restarts) {
    }
}

static void bi_next(biter *bi)
{
    bi_parse(bi);
}

static void bi_prev(biter *bi)
{
    size_t orig = bi->cur;
    uint32_t lo = 0, hi = bi->b->nrestarts;
    /* Last restart strictly before orig. */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (restart_at(bi->b, mid) < orig)
            lo = mid;
        else
            hi = mid;
    }
    if (restart_at(bi->b, lo) >= orig) {
        bi->valid = false;
        return;
    }
    bi_to_restart(bi, lo);
    while (bi_parse(bi) && bi->next < orig) {
    }
    if (bi->valid && bi->next != orig) {
        bi->valid = false;
        bi->corrupt = true;
    }
}

static void bi_seek(biter *bi, const uint8_t *k, size_t n)
{
    const block *b = bi->b;
    uint32_t lo = 0, hi = b->nrestarts - 1;
    /* Binary search for the last restart whose key is < target. */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        bi_to_restart(bi, mid);
        if (!bi_parse(bi))
            return;
        if (ikey_cmp(bi->key.data, bi->key.len, k, n) < 0)
            lo = mid;
        else
            hi = mid - 1;
    }
    bi_to_restart(bi, lo);
    while (bi_parse(bi)) {
        if (ikey_cmp(bi->key.data, bi->key.len, k, n) >= 0)
            return;
    }
}

/* ---- Reader ---- */
struct table {
    int fd;
    const uint8_t *mem; /* table_open_mem */
    uint64_t size;
    uint64_t number;
    char name[64];
    block *index;
    uint8_t *filter;
    size_t filter_bits;
    int filter_k;
    uint64_t entries;
    uint64_t data_end; /* data blocks end here (filter or index start) */
};

static int corrupt(const table *t, uint64_t off, const char *what, strata_err *err)
{
    return strata_err_set(err, ERR_CORRUPT, "%s: %s at offset %llu", t->name, what,
                          (unsigned long long)off);
}

static int read_at(const table *t, uint8_t *dst, size_t n, uint64_t off, strata_err *err)
{
    if (off > t->size || n > t->size - off)
        return corrupt(t, off, "block handle out of range", err);
    if (t->mem) {
        memcpy(dst, t->mem + off, n);
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(t->fd, dst + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return strata_err_set(err, ERR_IO, "%s: read at offset %llu: %s", t->name,
                                  (unsigned long long)(off + done), strerror(errno));
        if (r == 0)
            return corrupt(t, off + done, "unexpected end of file", err);
        done += (size_t)r;
    }
    return 0;
}

/* Reads, verifies and decodes the block payload at (off, size): raw bytes (malloc'd). */
static uint8_t *read_raw_block(const table *t, uint64_t off, uint64_t size, size_t *len_out,
                               strata_err *err)
{
    if (size > MAX_BLOCK_RAW || off > t->size || size + BLOCK_TRAILER > t->size - off) {
        corrupt(t, off, "block handle out of range", err);
        return NULL;
    }
    size_t n = (size_t)size + BLOCK_TRAILER;
    uint8_t *p = malloc(n ? n : 1);
    if (p == NULL) {
        strata_err_set(err, ERR_NOMEM, "%s: out of memory reading a block", t->name);
        return NULL;
    }
    if (read_at(t, p, n, off, err) < 0) {
        free(p);
        return NULL;
    }
    if (XXH3_64bits(p, (size_t)size + 1) != get_u64(p + size + 1)) {
        free(p);
        corrupt(t, off, "block checksum mismatch", err);
        return NULL;
    }
    uint8_t type = p[size];
    if (type == 0) {
        *len_out = (size_t)size;
        return p;
    }
    uint32_t raw_len = size >= 4 ? get_u32(p) : 0;
    if (type != 1 || size < 4 || raw_len > MAX_BLOCK_RAW) {
        free(p);
        corrupt(t, off, "bad block type or length", err);
        return NULL;
    }
    uint8_t *raw = malloc(raw_len ? raw_len : 1);
    if (raw == NULL) {
        free(p);
        strata_err_set(err, ERR_NOMEM, "%s: out of memory reading a block", t->name);
        return NULL;
    }
    int got = LZ4_decompress_safe((const char *)p + 4, (char *)raw, (int)size - 4, (int)raw_len);
    free(p);
    if (got < 0 || (uint32_t)got != raw_len) {
        free(raw);
        corrupt(t, off, "lz4 block does not decode", err);
        return NULL;
    }
    *len_out = raw_len;
    return raw;
}

static block *read_block(const table *t, uint64_t off, uint64_t size, strata_err *err)
{
    size_t len;
    uint8_t *raw = read_raw_block(t, off, size, &len, err);
    if (raw == NULL)
        return NULL;
    block *b = block_parse(raw, len);
    if (b == NULL) {
        free(raw);
        corrupt(t, off, "malformed block", err);
    }
    return b;
}

static block *get_block(table *t, cache *c, uint64_t off, uint64_t size, strata_err *err)
{
    if (c) {
        block *b = cache_lookup(c, t->number, off);
        if (b)
            return b;
    }
    block *b = read_block(t, off, size, err);
    if (b && c)
        cache_insert(c, t->number, off, b);
    return b;
}

static table *table_load(table *t, strata_err *err)
{
    uint8_t f[FOOTER_SIZE];
    if (t->size < FOOTER_SIZE) {
        corrupt(t, 0, "file too short for a footer", err);
        goto fail;
    }
    if (read_at(t, f, FOOTER_SIZE, t->size - FOOTER_SIZE, err) < 0)
        goto fail;
    if (XXH3_64bits(f, FOOTER_SIZE - 8) != get_u64(f + FOOTER_SIZE - 8) ||
        get_u64(f) != TABLE_MAGIC || get_u32(f + 8) != TABLE_VERSION) {
        corrupt(t, t->size - FOOTER_SIZE, "footer checksum or magic mismatch", err);
        goto fail;
    }
    uint64_t ioff = get_u64(f + 16), isize = get_u64(f + 24);
    uint64_t foff = get_u64(f + 32), fsize = get_u64(f + 40);
    t->entries = get_u64(f + 48);
    t->index = read_block(t, ioff, isize, err);
    if (t->index == NULL)
        goto fail;
    t->data_end = ioff;
    if (fsize > 0) {
        size_t len;
        uint8_t *raw = read_raw_block(t, foff, fsize, &len, err);
        if (raw == NULL)
            goto fail;
        if (len < 9 || raw[len - 1] == 0 || raw[len - 1] > 30) {
            free(raw);
            corrupt(t, foff, "malformed bloom filter", err);
            goto fail;
        }
        t->filter = raw;
        t->filter_k = raw[len - 1];
        t->filter_bits = (len - 1) * 8;
        t->data_end = foff;
    }
    return t;
fail:
    table_close(t);
    return NULL;
}

table *table_open(const char *path, const char *name, uint64_t number, strata_err *err)
{
    table *t = calloc(1, sizeof *t);
    if (t == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory opening %s", name);
        return NULL;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->number = number;
    t->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (t->fd < 0) {
        strata_err_set(err, ERR_IO, "open %s: %s", path, strerror(errno));
        free(t);
        return NULL;
    }
    struct stat st;
    if (fstat(t->fd, &st) < 0) {
        strata_err_set(err, ERR_IO, "stat %s: %s", path, strerror(errno));
        table_close(t);
        return NULL;
    }
    t->size = (uint64_t)st.st_size;
    return table_load(t, err);
}

table *table_open_mem(const uint8_t *data, size_t len, strata_err *err)
{
    table *t = calloc(1, sizeof *t);
    if (t == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(t->name, sizeof t->name, "(memory)");
    t->fd = -1;
    t->mem = data;
    t->size = len;
    return table_load(t, err);
}

void table_close(table *t)
{
    if (t == NULL)
        return;
    if (t->fd >= 0)
        close(t->fd);
    block_unref(t->index);
    free(t->filter);
    free(t);
}

uint64_t table_file_size(const table *t)
{
    return t->size;
}

size_t table_meta_bytes(const table *t)
{
    return sizeof *t + (t->index ? t->index->len : 0) + t->filter_bits / 8;
}

uint64_t table_number(const table *t)
{
    return t->number;
}

bool table_may_contain(const table *t, const void *ukey, size_t n)
{
    if (t->filter == NULL)
        return true;
    return bloom_check(t->filter, t->filter_bits, t->filter_k, XXH3_64bits(ukey, n));
}

static bool decode_handle(const uint8_t *v, size_t n, uint64_t *off, uint64_t *size)
{
    const uint8_t *p = varint_dec(v, v + n, off);
    return p != NULL && varint_dec(p, v + n, size) != NULL;
}

int table_get(table *t, cache *c, const void *ukey, size_t n, uint64_t snap, uint64_t *seq_out,
              int *type_out, buf *val, strata_err *err)
{
    if (!table_may_contain(t, ukey, n))
        return 0;
    uint8_t stackbuf[256];
    uint8_t *k = n + TRAILER_SIZE <= sizeof stackbuf ? stackbuf : malloc(n + TRAILER_SIZE);
    if (k == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    if (n)
        memcpy(k, ukey, n);
    trailer_put(k + n, trailer_pack(snap, TYPE_PUT));
    size_t kn = n + TRAILER_SIZE;

    int rc = 0;
    biter ib, db;
    bi_init(&ib);
    bi_init(&db);
    ib.borrowed = true;
    bi_set(&ib, t->index);
    bi_seek(&ib, k, kn);
    if (ib.corrupt) {
        rc = corrupt(t, 0, "malformed index block", err);
        goto out;
    }
    if (!ib.valid)
        goto out;
    uint64_t off, size;
    if (!decode_handle(ib.val, ib.vlen, &off, &size)) {
        rc = corrupt(t, 0, "malformed index entry", err);
        goto out;
    }
    block *b = get_block(t, c, off, size, err);
    if (b == NULL) {
        rc = -1;
        goto out;
    }
    bi_set(&db, b);
    bi_seek(&db, k, kn);
    if (db.corrupt) {
        rc = corrupt(t, off, "malformed data block", err);
        goto out;
    }
    if (db.valid && ukey_cmp(db.key.data, db.key.len - TRAILER_SIZE, ukey, n) == 0) {
        uint64_t tr = trailer_get(db.key.data, db.key.len);
        *seq_out = tr >> 8;
        *type_out = (int)(tr & 0xff);
        buf_reset(val);
        buf_append(val, db.val, db.vlen);
        if (val->failed) {
            rc = strata_err_set(err, ERR_NOMEM, "out of memory copying a value");
            goto out;
        }
        rc = 1;
    }
out:
    bi_free(&ib);
    bi_free(&db);
    if (k != stackbuf)
        free(k);
    return rc;
}

/* ---- Two-level iterator: index block, then data blocks ---- */
typedef struct {
    iter base;
    table *t;
    cache *c;
    biter ib, db;
    bool data_ok; /* db holds the block ib points at */
    strata_err err;
} table_iter;

/* The error is already in ti->err: the iterator stops. */
static void ti_fail(table_iter *ti)
{
    ti->db.valid = false;
    ti->data_ok = false;
}

static bool ti_load(table_iter *ti)
{
    ti->data_ok = false;
    ti->db.valid = false;
    if (ti->ib.corrupt) {
        corrupt(ti->t, 0, "malformed index block", &ti->err);
        ti_fail(ti);
        return false;
    }
    if (!ti->ib.valid)
        return false;
    uint64_t off, size;
    if (!decode_handle(ti->ib.val, ti->ib.vlen, &off, &size) || off >= ti->t->data_end) {
        corrupt(ti->t, 0, "malformed index entry", &ti->err);
        ti_fail(ti);
        return false;
    }
    block *b = get_block(ti->t, ti->c, off, size, &ti->err);
    if (b == NULL) {
        ti_fail(ti);
        return false;
    }
    bi_set(&ti->db, b);
    ti->data_ok = true;
    return true;
}

static bool ti_check(table_iter *ti)
{
    if (ti->db.corrupt && ti->err.code == ERR_NONE)
        corrupt(ti->t, ti->db.cur, "malformed data block", &ti->err);
    if (ti->err.code != ERR_NONE) {
        ti->db.valid = false;
        return false;
    }
    return true;
}

static void ti_skip_forward(table_iter *ti)
{
    while (ti_check(ti) && !ti->db.valid) {
        bi_next(&ti->ib);
        if (!ti_load(ti))
            return;
        bi_first(&ti->db);
    }
}

static void ti_skip_backward(table_iter *ti)
{
    while (ti_check(ti) && !ti->db.valid) {
        bi_prev(&ti->ib);
        if (!ti_load(ti))
            return;
        bi_last(&ti->db);
    }
}

static void ti_first(iter *it)
{
    table_iter *ti = (table_iter *)it;
    if (ti->err.code)
        return;
    bi_first(&ti->ib);
    if (ti_load(ti))
        bi_first(&ti->db);
    ti_skip_forward(ti);
}

static void ti_last(iter *it)
{
    table_iter *ti = (table_iter *)it;
    if (ti->err.code)
        return;
    bi_last(&ti->ib);
    if (ti_load(ti))
        bi_last(&ti->db);
    ti_skip_backward(ti);
}

static void ti_seek(iter *it, const uint8_t *k, size_t n)
{
    table_iter *ti = (table_iter *)it;
    if (ti->err.code)
        return;
    bi_seek(&ti->ib, k, n);
    if (ti_load(ti))
        bi_seek(&ti->db, k, n);
    ti_skip_forward(ti);
}

static void ti_next(iter *it)
{
    table_iter *ti = (table_iter *)it;
    bi_next(&ti->db);
    ti_skip_forward(ti);
}

static void ti_prev(iter *it)
{
    table_iter *ti = (table_iter *)it;
    bi_prev(&ti->db);
    ti_skip_backward(ti);
}

static bool ti_valid(const iter *it)
{
    const table_iter *ti = (const table_iter *)it;
    return ti->data_ok && ti->db.valid;
}

static const uint8_t *ti_key(const iter *it, size_t *n)
{
    const table_iter *ti = (const table_iter *)it;
    *n = ti->db.key.len;
    return ti->db.key.data;
}

static const uint8_t *ti_value(const iter *it, size_t *n)
{
    const table_iter *ti = (const table_iter *)it;
    *n = ti->db.vlen;
    return ti->db.val;
}

static int ti_status(const iter *it, strata_err *err)
{
    const table_iter *ti = (const table_iter *)it;
    if (ti->err.code == ERR_NONE)
        return 0;
    if (err)
        *err = ti->err;
    return -1;
}

static void ti_destroy(iter *it)
{
    table_iter *ti = (table_iter *)it;
    bi_free(&ti->ib);
    bi_free(&ti->db);
    free(ti);
}

iter *table_iter_new(table *t, cache *c)
{
    table_iter *ti = calloc(1, sizeof *ti);
    if (ti == NULL)
        return NULL;
    ti->base = (iter){ti_first, ti_last, ti_seek,  ti_next,   ti_prev,
                      ti_valid, ti_key,  ti_value, ti_status, ti_destroy};
    ti->t = t;
    ti->c = c;
    bi_init(&ti->ib);
    bi_init(&ti->db);
    ti->ib.borrowed = true;
    bi_set(&ti->ib, t->index);
    return &ti->base;
}

/* ---- Builder ---- */
typedef struct {
    buf data;
    uint32_t *restarts;
    uint32_t nrestarts, cap;
    int interval, counter;
    buf last;
    uint64_t entries;
} block_writer;

static void bw_init(block_writer *w, int interval)
{
    memset(w, 0, sizeof *w);
    buf_init(&w->data, 0);
    buf_init(&w->last, 0);
    w->interval = interval;
}

static void bw_free(block_writer *w)
{
    buf_free(&w->data);
    buf_free(&w->last);
    free(w->restarts);
}

static void bw_reset(block_writer *w)
{
    buf_reset(&w->data);
    buf_reset(&w->last);
    w->nrestarts = 0;
    w->counter = 0;
    w->entries = 0;
}

static bool bw_add(block_writer *w, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    size_t shared = 0;
    if (w->counter < w->interval && w->entries > 0) {
        size_t m = kn < w->last.len ? kn : w->last.len;
        while (shared < m && w->last.data[shared] == k[shared])
            shared++;
    } else {
        if (w->nrestarts == w->cap) {
            uint32_t cap = w->cap ? w->cap * 2 : 64;
            uint32_t *r = realloc(w->restarts, cap * sizeof *r);
            if (r == NULL)
                return false;
            w->restarts = r;
            w->cap = cap;
        }
        w->restarts[w->nrestarts++] = (uint32_t)w->data.len;
        w->counter = 0;
    }
    buf_put_varint(&w->data, shared);
    buf_put_varint(&w->data, kn - shared);
    buf_put_varint(&w->data, vn);
    buf_append(&w->data, k + shared, kn - shared);
    buf_append(&w->data, v, vn);
    buf_reset(&w->last);
    buf_append(&w->last, k, kn);
    w->counter++;
    w->entries++;
    return !w->data.failed && !w->last.failed;
}

static bool bw_finish(block_writer *w)
{
    if (w->nrestarts == 0) {
        w->restarts = w->restarts ? w->restarts : malloc(64 * sizeof(uint32_t));
        if (w->restarts == NULL)
            return false;
        w->cap = w->cap ? w->cap : 64;
        w->restarts[w->nrestarts++] = 0;
    }
    for (uint32_t i = 0; i < w->nrestarts; i++)
        buf_put_u32be(&w->data, w->restarts[i]);
    buf_put_u32be(&w->data, w->nrestarts);
    return !w->data.failed;
}

struct table_builder {
    int fd;
    char *path;
    table_opts o;
    block_writer data, index;
    buf out;     /* pending file bytes */
    buf scratch; /* compression */
    uint64_t offset;
    uint64_t entries;
    uint64_t *hashes;
    size_t nhashes, hcap;
    buf last_ukey;
};

table_builder *tb_new(const char *path, const table_opts *o, strata_err *err)
{
    table_builder *tb = calloc(1, sizeof *tb);
    char *p = strdup(path);
    if (tb == NULL || p == NULL) {
        free(tb);
        free(p);
        strata_err_set(err, ERR_NOMEM, "out of memory creating %s", path);
        return NULL;
    }
    tb->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (tb->fd < 0) {
        strata_err_set(err, ERR_IO, "create %s: %s", path, strerror(errno));
        free(tb);
        free(p);
        return NULL;
    }
    tb->path = p;
    tb->o = *o;
    if (tb->o.block_bytes == 0)
        tb->o.block_bytes = 4096;
    bw_init(&tb->data, RESTART_INTERVAL);
    bw_init(&tb->index, 1);
    buf_init(&tb->out, 0);
    buf_init(&tb->scratch, 0);
    buf_init(&tb->last_ukey, 0);
    return tb;
}

static void tb_free(table_builder *tb)
{
    bw_free(&tb->data);
    bw_free(&tb->index);
    buf_free(&tb->out);
    buf_free(&tb->scratch);
    buf_free(&tb->last_ukey);
    free(tb->hashes);
    free(tb->path);
    free(tb);
}

void tb_abandon(table_builder *tb)
{
    if (tb == NULL)
        return;
    close(tb->fd);
    unlink(tb->path);
    tb_free(tb);
}

static int tb_flush_out(table_builder *tb, strata_err *err)
{
    size_t done = 0;
    while (done < tb->out.len) {
        ssize_t w = write(tb->fd, tb->out.data + done, tb->out.len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return strata_err_set(err, ERR_IO, "write %s: %s", tb->path, strerror(errno));
        done += (size_t)w;
    }
    buf_reset(&tb->out);
    return 0;
}

/* Appends a block (compressing if worth it) and returns its handle. */
static int tb_write_block(table_builder *tb, const uint8_t *raw, size_t len, bool compress,
                          uint64_t *off, uint64_t *size, strata_err *err)
{
    const uint8_t *payload = raw;
    size_t plen = len;
    uint8_t type = 0;
    if (compress && !tb->o.no_compression && len > 64) {
        int bound = LZ4_compressBound((int)len);
        buf_reset(&tb->scratch);
        if (buf_reserve(&tb->scratch, (size_t)bound + 4)) {
            put_u32(tb->scratch.data, (uint32_t)len);
            int c = LZ4_compress_default((const char *)raw, (char *)tb->scratch.data + 4, (int)len,
                                         bound);
            if (c > 0 && (size_t)c + 4 < len - len / 8) {
                payload = tb->scratch.data;
                plen = (size_t)c + 4;
                type = 1;
            }
        }
    }
    *off = tb->offset;
    *size = plen;
    /* The checksum covers payload and type, hashed where they land in the out buffer. */
    size_t mark = tb->out.len;
    buf_append(&tb->out, payload, plen);
    buf_put_u8(&tb->out, type);
    if (!tb->out.failed)
        buf_put_u64be(&tb->out, XXH3_64bits(tb->out.data + mark, plen + 1));
    if (tb->out.failed)
        return strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
    tb->offset += plen + BLOCK_TRAILER;
    if (tb->out.len >= WRITE_CHUNK)
        return tb_flush_out(tb, err);
    return 0;
}

static int tb_flush_data(table_builder *tb, strata_err *err)
{
    if (tb->data.entries == 0)
        return 0;
    if (!bw_finish(&tb->data))
        return strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
    uint64_t off, size;
    if (tb_write_block(tb, tb->data.data.data, tb->data.data.len, true, &off, &size, err) < 0)
        return -1;
    uint8_t h[20];
    buf hb = {.data = h, .len = 0, .cap = sizeof h, .limit = sizeof h};
    buf_put_varint(&hb, off);
    buf_put_varint(&hb, size);
    if (!bw_add(&tb->index, tb->data.last.data, tb->data.last.len, h, hb.len))
        return strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
    bw_reset(&tb->data);
    return 0;
}

int tb_add(table_builder *tb, const uint8_t *ikey, size_t klen, const uint8_t *val, size_t vlen,
           strata_err *err)
{
    size_t un = klen - TRAILER_SIZE;
    if (tb->o.bloom_bits_per_key >= 0 &&
        (tb->entries == 0 || ukey_cmp(tb->last_ukey.data, tb->last_ukey.len, ikey, un) != 0)) {
        if (tb->nhashes == tb->hcap) {
            size_t cap = tb->hcap ? tb->hcap * 2 : 1024;
            uint64_t *h = realloc(tb->hashes, cap * sizeof *h);
            if (h == NULL)
                return strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
            tb->hashes = h;
            tb->hcap = cap;
        }
        tb->hashes[tb->nhashes++] = XXH3_64bits(ikey, un);
        buf_reset(&tb->last_ukey);
        buf_append(&tb->last_ukey, ikey, un);
    }
    if (!bw_add(&tb->data, ikey, klen, val, vlen))
        return strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
    tb->entries++;
    if (tb->data.data.len >= tb->o.block_bytes)
        return tb_flush_data(tb, err);
    return 0;
}

uint64_t tb_entries(const table_builder *tb)
{
    return tb->entries;
}

uint64_t tb_size_estimate(const table_builder *tb)
{
    return tb->offset + tb->data.data.len;
}

int tb_finish(table_builder *tb, uint64_t *size_out, strata_err *err)
{
    if (tb_flush_data(tb, err) < 0)
        goto fail;
    uint64_t foff = 0, fsize = 0;
    if (tb->o.bloom_bits_per_key >= 0 && tb->nhashes > 0) {
        int bits_per_key = tb->o.bloom_bits_per_key ? tb->o.bloom_bits_per_key : 10;
        size_t nbits = tb->nhashes * (size_t)bits_per_key;
        nbits = nbits < 64 ? 64 : (nbits + 7) / 8 * 8;
        int k = bloom_k(bits_per_key);
        uint8_t *f = calloc(nbits / 8 + 1, 1);
        if (f == NULL) {
            strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
            goto fail;
        }
        for (size_t i = 0; i < tb->nhashes; i++)
            bloom_set(f, nbits, k, tb->hashes[i]);
        f[nbits / 8] = (uint8_t)k;
        int rc = tb_write_block(tb, f, nbits / 8 + 1, false, &foff, &fsize, err);
        free(f);
        if (rc < 0)
            goto fail;
    }
    uint64_t ioff, isize;
    if (!bw_finish(&tb->index)) {
        strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
        goto fail;
    }
    if (tb_write_block(tb, tb->index.data.data, tb->index.data.len, false, &ioff, &isize, err) < 0)
        goto fail;
    uint8_t f[FOOTER_SIZE] = {0};
    put_u64(f, TABLE_MAGIC);
    put_u32(f + 8, TABLE_VERSION);
    put_u64(f + 16, ioff);
    put_u64(f + 24, isize);
    put_u64(f + 32, foff);
    put_u64(f + 40, fsize);
    put_u64(f + 48, tb->entries);
    put_u64(f + 56, XXH3_64bits(f, FOOTER_SIZE - 8));
    buf_append(&tb->out, f, sizeof f);
    tb->offset += FOOTER_SIZE;
    if (tb->out.failed) {
        strata_err_set(err, ERR_NOMEM, "out of memory writing %s", tb->path);
        goto fail;
    }
    if (tb_flush_out(tb, err) < 0)
        goto fail;
    if (fdatasync(tb->fd) < 0) {
        strata_err_set(err, ERR_IO, "fsync %s: %s", tb->path, strerror(errno));
        goto fail;
    }
    if (close(tb->fd) < 0) {
        tb->fd = -1;
        strata_err_set(err, ERR_IO, "close %s: %s", tb->path, strerror(errno));
        unlink(tb->path);
        tb_free(tb);
        return -1;
    }
    *size_out = tb->offset;
    tb_free(tb);
    return 0;
fail:
    tb_abandon(tb);
    return -1;
}
