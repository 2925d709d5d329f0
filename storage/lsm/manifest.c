/*
 * The manifest: the whole durable state of the engine in one small file, rewritten in full
 * at every change (flush, compaction) and replaced atomically: write MANIFEST.tmp, fsync,
 * rename over MANIFEST, fsync the directory. A crash leaves either the old or the new one.
 *
 * Layout (integers varint unless noted): magic (u64 BE), format (u32 BE), next_file,
 * last_seq, file count, per file {level (u8), number, size, min_seq, max_seq, clean_seq,
 * smallest, largest}, tombstone count, per tombstone {start, end, seq}, range count, per
 * range {range_id, durable log index}, then xxh3_64 of everything before (u64 BE). Byte
 * strings are a varint length then the bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/lsm/lsm_int.h"

#define MANIFEST_MAGIC   0x53545241544d414eull /* "STRATMAN" */
#define MANIFEST_VERSION 1
#define MAX_COUNT        (1u << 24)

static void put_bytes(buf *b, const uint8_t *p, size_t n)
{
    buf_put_varint(b, n);
    buf_append(b, p, n);
}

static void put_file(buf *out, int level, const file_meta *f)
{
    buf_put_u8(out, (uint8_t)level);
    buf_put_varint(out, f->number);
    buf_put_varint(out, f->size);
    buf_put_varint(out, f->min_seq);
    buf_put_varint(out, f->max_seq);
    buf_put_varint(out, f->clean_seq);
    put_bytes(out, f->smallest, f->smallest_len);
    put_bytes(out, f->largest, f->largest_len);
}

static bool is_deleted(const file_meta *f, const uint64_t *deleted, int ndeleted)
{
    for (int i = 0; i < ndeleted; i++)
        if (deleted[i] == f->number)
            return true;
    return false;
}

void manifest_encode(buf *out, uint64_t next_file, uint64_t last_seq, const version *v,
                     const uint64_t *deleted, int ndeleted, file_meta *const *added,
                     const int *added_level, int nadded, const rtomb *tombs, int ntombs,
                     const u64map *durable)
{
    size_t start = out->len;
    buf_put_u64be(out, MANIFEST_MAGIC);
    buf_put_u32be(out, MANIFEST_VERSION);
    buf_put_varint(out, next_file);
    buf_put_varint(out, last_seq);
    uint64_t n = (uint64_t)nadded;
    for (int l = 0; v && l < LSM_LEVELS; l++)
        for (int i = 0; i < v->nfiles[l]; i++)
            n += is_deleted(v->files[l][i], deleted, ndeleted) ? 0 : 1;
    buf_put_varint(out, n);
    for (int l = 0; v && l < LSM_LEVELS; l++)
        for (int i = 0; i < v->nfiles[l]; i++)
            if (!is_deleted(v->files[l][i], deleted, ndeleted))
                put_file(out, l, v->files[l][i]);
    for (int i = 0; i < nadded; i++)
        put_file(out, added_level[i], added[i]);
    buf_put_varint(out, (uint64_t)ntombs);
    for (int i = 0; i < ntombs; i++) {
        put_bytes(out, tombs[i].start, tombs[i].start_len);
        put_bytes(out, tombs[i].end, tombs[i].end_len);
        buf_put_varint(out, tombs[i].seq);
    }
    buf_put_varint(out, durable ? u64map_count(durable) : 0);
    size_t pos = 0;
    uint64_t k, val;
    while (durable && u64map_next(durable, &pos, &k, &val)) {
        buf_put_varint(out, k);
        buf_put_varint(out, val);
    }
    if (!out->failed)
        buf_put_u64be(out, lsm_xxh3(out->data + start, out->len - start));
}

static const uint8_t *get_bytes(rd *r, uint32_t *len, size_t max)
{
    uint64_t n = rd_varint(r);
    if (n > max) {
        r->failed = true;
        return NULL;
    }
    *len = (uint32_t)n;
    return rd_bytes(r, (size_t)n);
}

void manifest_clear(manifest *m)
{
    free(m->files);
    free(m->tombs);
    u64map_free(m->durable);
    memset(m, 0, sizeof *m);
}

int manifest_decode(const uint8_t *data, size_t len, manifest *m, strata_err *err)
{
    memset(m, 0, sizeof *m);
    if (len < 20 ||
        lsm_xxh3(data, len - 8) != ((uint64_t)data[len - 8] << 56 | (uint64_t)data[len - 7] << 48 |
                                    (uint64_t)data[len - 6] << 40 | (uint64_t)data[len - 5] << 32 |
                                    (uint64_t)data[len - 4] << 24 | (uint64_t)data[len - 3] << 16 |
                                    (uint64_t)data[len - 2] << 8 | data[len - 1]))
        return strata_err_set(err, ERR_CORRUPT, "MANIFEST: checksum mismatch (%zu bytes)", len);
    rd r;
    rd_init(&r, data, len - 8);
    if (rd_u64be(&r) != MANIFEST_MAGIC || rd_u32be(&r) != MANIFEST_VERSION)
        return strata_err_set(err, ERR_CORRUPT, "MANIFEST: bad magic or version at offset 0");
    m->next_file = rd_varint(&r);
    m->last_seq = rd_varint(&r);
    uint64_t n = rd_varint(&r);
    if (r.failed || n > MAX_COUNT || n > rd_left(&r))
        goto bad;
    m->nfiles = (int)n;
    m->files = calloc(n ? n : 1, sizeof *m->files);
    if (m->files == NULL)
        goto nomem;
    for (uint64_t i = 0; i < n; i++) {
        struct mf_file *f = &m->files[i];
        f->level = rd_u8(&r);
        f->number = rd_varint(&r);
        f->size = rd_varint(&r);
        f->min_seq = rd_varint(&r);
        f->max_seq = rd_varint(&r);
        f->clean_seq = rd_varint(&r);
        f->smallest = get_bytes(&r, &f->smallest_len, LSM_MAX_KEY + TRAILER_SIZE);
        f->largest = get_bytes(&r, &f->largest_len, LSM_MAX_KEY + TRAILER_SIZE);
        if (r.failed || f->level >= LSM_LEVELS || f->number == 0 || f->number >= m->next_file ||
            f->smallest_len < TRAILER_SIZE || f->largest_len < TRAILER_SIZE ||
            f->min_seq > f->max_seq ||
            ikey_cmp(f->smallest, f->smallest_len, f->largest, f->largest_len) > 0)
            goto bad;
    }
    n = rd_varint(&r);
    if (r.failed || n > MAX_COUNT || n > rd_left(&r))
        goto bad;
    m->ntombs = (int)n;
    m->tombs = calloc(n ? n : 1, sizeof *m->tombs);
    if (m->tombs == NULL)
        goto nomem;
    for (uint64_t i = 0; i < n; i++) {
        rtomb *t = &m->tombs[i];
        t->start = (uint8_t *)get_bytes(&r, &t->start_len, LSM_MAX_KEY);
        t->end = (uint8_t *)get_bytes(&r, &t->end_len, LSM_MAX_KEY);
        t->seq = rd_varint(&r);
        if (r.failed || ukey_cmp(t->start, t->start_len, t->end, t->end_len) >= 0)
            goto bad;
    }
    n = rd_varint(&r);
    if (r.failed || n > MAX_COUNT || n > rd_left(&r))
        goto bad;
    m->durable = u64map_new();
    if (m->durable == NULL)
        goto nomem;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = rd_varint(&r), v = rd_varint(&r);
        if (r.failed)
            goto bad;
        if (!u64map_max(m->durable, k, v))
            goto nomem;
    }
    if (r.failed || rd_left(&r) != 0)
        goto bad;
    return 0;
bad:;
    size_t off = (size_t)(r.p - data);
    manifest_clear(m);
    return strata_err_set(err, ERR_CORRUPT, "MANIFEST: malformed record at offset %zu", off);
nomem:
    manifest_clear(m);
    return strata_err_set(err, ERR_NOMEM, "MANIFEST: out of memory");
}

static int fsync_dir(const char *dir, strata_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return strata_err_set(err, ERR_IO, "open %s: %s", dir, strerror(errno));
    if (fsync(fd) < 0) {
        int e = errno;
        close(fd);
        return strata_err_set(err, ERR_IO, "fsync %s: %s", dir, strerror(e));
    }
    close(fd);
    return 0;
}

int manifest_write_file(const char *dir, const uint8_t *data, size_t len, bool *renamed,
                        strata_err *err)
{
    *renamed = false;
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/MANIFEST.tmp", dir);
    snprintf(final, sizeof final, "%s/MANIFEST", dir);
    /* The table files this manifest names must be durably linked first. */
    if (fsync_dir(dir, err) < 0)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return strata_err_set(err, ERR_IO, "create %s: %s", tmp, strerror(errno));
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int werr = errno;
            close(fd);
            unlink(tmp);
            return strata_err_set(err, ERR_IO, "write %s: %s", tmp, strerror(werr));
        }
        done += (size_t)w;
    }
    int rc = fsync(fd);
    int e = errno;
    if (close(fd) < 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc < 0) {
        unlink(tmp);
        return strata_err_set(err, ERR_IO, "fsync %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, final) < 0) {
        e = errno;
        unlink(tmp);
        return strata_err_set(err, ERR_IO, "rename %s: %s", tmp, strerror(e));
    }
    *renamed = true;
    return fsync_dir(dir, err);
}
