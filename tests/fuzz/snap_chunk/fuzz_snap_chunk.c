/*
 * A chunk of a replica's copy (cluster/snap_chunk.h), as a peer sends it: any bytes are
 * refused or decode to a chunk whose items all iterate, and which encodes to bytes that
 * decode to the same chunk.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/snap_chunk.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

/* Walks the items; returns how many. */
static size_t count_items(const snap_chunk *c)
{
    size_t pos = 0, n = 0, kl, vl;
    const uint8_t *k, *v;
    while (snap_chunk_item_next(c, &pos, &k, &kl, &v, &vl)) {
        check(k >= c->items && k + kl <= c->items + c->items_len);
        check(v >= c->items && v + vl <= c->items + c->items_len);
        n++;
    }
    check(pos == c->items_len);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    snap_chunk c;
    strata_err err;
    if (snap_chunk_decode(data, size, &c, &err) != 0) {
        check(err.code == ERR_CORRUPT);
        return 0;
    }
    check(c.hash_lo <= c.hash_hi && c.done == (c.next_len == 0));
    size_t n = count_items(&c);
    buf b;
    buf_init(&b, 0);
    snap_chunk_encode(&c, &b);
    check(!b.failed);
    snap_chunk d;
    check(snap_chunk_decode(b.data, b.len, &d, &err) == 0);
    check(d.applied == c.applied && d.hash_lo == c.hash_lo && d.hash_hi == c.hash_hi &&
          d.done == c.done && d.next_len == c.next_len && d.items_len == c.items_len);
    check(memcmp(d.next, c.next, c.next_len) == 0 && memcmp(d.items, c.items, c.items_len) == 0);
    check(count_items(&d) == n);
    buf_free(&b);
    return 0;
}
