#include "cluster/snap_chunk.h"

void snap_chunk_item_put(buf *items, const void *key, size_t klen, const void *val, size_t vlen)
{
    buf_put_varint(items, klen);
    buf_append(items, key, klen);
    buf_put_varint(items, vlen);
    buf_append(items, val, vlen);
}

void snap_chunk_encode(const snap_chunk *c, buf *out)
{
    buf_put_varint(out, c->applied);
    buf_put_u64be(out, c->hash_lo);
    buf_put_u64be(out, c->hash_hi);
    buf_put_u8(out, c->done ? 1 : 0);
    buf_put_varint(out, c->next_len);
    buf_append(out, c->next, c->next_len);
    buf_append(out, c->items, c->items_len);
}

/* One item at r: false (r->failed) when it does not fit. */
static bool item_read(rd *r, const uint8_t **key, size_t *klen, const uint8_t **val, size_t *vlen)
{
    uint64_t kl = rd_varint(r);
    *key = r->failed ? NULL : rd_bytes(r, (size_t)kl);
    uint64_t vl = rd_varint(r);
    *val = r->failed ? NULL : rd_bytes(r, (size_t)vl);
    *klen = (size_t)kl;
    *vlen = (size_t)vl;
    return !r->failed;
}

int snap_chunk_decode(const uint8_t *b, size_t len, snap_chunk *out, strata_err *err)
{
    rd r;
    rd_init(&r, b, len);
    out->applied = rd_varint(&r);
    out->hash_lo = rd_u64be(&r);
    out->hash_hi = rd_u64be(&r);
    uint8_t done = rd_u8(&r);
    uint64_t nk = rd_varint(&r);
    out->next = r.failed ? NULL : rd_bytes(&r, (size_t)nk);
    out->next_len = (size_t)nk;
    out->done = done == 1;
    out->items = r.p;
    out->items_len = r.failed ? 0 : rd_left(&r);
    const uint8_t *k, *v;
    size_t kl, vl;
    while (!r.failed && rd_left(&r) > 0)
        (void)item_read(&r, &k, &kl, &v, &vl);
    /* A chunk that is not the last names where the next one starts: an empty key would
     * open the session again, and the copy would never end. */
    if (r.failed || done > 1 || out->hash_lo > out->hash_hi || (out->done != (nk == 0)))
        return strata_err_set(err, ERR_CORRUPT, "a malformed snapshot chunk");
    return 0;
}

bool snap_chunk_item_next(const snap_chunk *c, size_t *pos, const uint8_t **key, size_t *klen,
                          const uint8_t **val, size_t *vlen)
{
    if (*pos >= c->items_len)
        return false;
    rd r;
    rd_init(&r, c->items + *pos, c->items_len - *pos);
    if (!item_read(&r, key, klen, val, vlen))
        return false; /* cannot happen after snap_chunk_decode */
    *pos = c->items_len - rd_left(&r);
    return true;
}
