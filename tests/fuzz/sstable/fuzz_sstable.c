/* libFuzzer: arbitrary bytes as a table file. Opening, iterating both ways, seeking and
 * point reads must never crash or read out of bounds; damage is ERR_CORRUPT.
 *
 * Random bytes rarely pass the checksums, so inputs starting with 'B' are wrapped instead:
 * the rest becomes the content of one data block inside an otherwise valid file (correct
 * checksums, an index entry pointing at it, a footer), which drives the block decoder
 * itself with hostile entries and restart arrays. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <xxhash.h>

#include "storage/lsm/lsm_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put_block(buf *f, const uint8_t *p, size_t n)
{
    size_t mark = f->len;
    buf_append(f, p, n);
    buf_put_u8(f, 0); /* raw */
    buf_put_u64be(f, XXH3_64bits(f->data + mark, n + 1));
}

/* A file whose single data block holds `p` verbatim. */
static void wrap(buf *f, const uint8_t *p, size_t n)
{
    put_block(f, p, n);
    buf idx;
    buf_init(&idx, 0);
    uint8_t key[9] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    buf_put_varint(&idx, 0);
    buf_put_varint(&idx, sizeof key);
    uint8_t h[20];
    buf hb = {.data = h, .cap = sizeof h, .limit = sizeof h};
    buf_put_varint(&hb, 0);
    buf_put_varint(&hb, n);
    buf_put_varint(&idx, hb.len);
    buf_append(&idx, key, sizeof key);
    buf_append(&idx, h, hb.len);
    buf_put_u32be(&idx, 0);
    buf_put_u32be(&idx, 1);
    uint64_t ioff = f->len;
    put_block(f, idx.data, idx.len);
    size_t foot = f->len;
    buf_put_u64be(f, 0x5354524154535354ull);
    buf_put_u32be(f, 1);
    buf_put_u32be(f, 0);
    buf_put_u64be(f, ioff);
    buf_put_u64be(f, idx.len);
    buf_put_u64be(f, 0);
    buf_put_u64be(f, 0);
    buf_put_u64be(f, 1);
    buf_put_u64be(f, XXH3_64bits(f->data + foot, 56));
    buf_free(&idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    strata_err err;
    buf wrapped;
    buf_init(&wrapped, 0);
    if (size > 0 && data[0] == 'B') {
        wrap(&wrapped, data + 1, size - 1);
        if (wrapped.failed) {
            buf_free(&wrapped);
            return 0;
        }
        data = wrapped.data;
        size = wrapped.len;
    }
    table *t = table_open_mem(data, size, &err);
    if (t == NULL) {
        buf_free(&wrapped);
        return 0;
    }
    cache *c = cache_new(1 << 16);
    iter *it = table_iter_new(t, c);
    int n = 0;
    for (it->first(it); it->valid(it) && n < 100000; it->next(it), n++) {
        size_t kn, vn;
        const uint8_t *k = it->key(it, &kn);
        const uint8_t *v = it->value(it, &vn);
        (void)k;
        (void)v;
    }
    n = 0;
    for (it->last(it); it->valid(it) && n < 100000; it->prev(it), n++) {
    }
    buf k, val;
    buf_init(&k, 0);
    buf_init(&val, 0);
    const char *probes[] = {"", "a", "key", "zzzz"};
    for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
        size_t pn = __builtin_strlen(probes[i]);
        ikey_build(&k, probes[i], pn, SEQ_MAX, TYPE_PUT);
        it->seek(it, k.data, k.len);
        if (it->valid(it))
            it->prev(it);
        uint64_t seq;
        int type;
        table_get(t, c, probes[i], pn, SEQ_MAX, &seq, &type, &val, &err);
    }
    it->status(it, &err);
    it->destroy(it);
    buf_free(&k);
    buf_free(&val);
    cache_free(c);
    table_close(t);
    buf_free(&wrapped);
    return 0;
}
