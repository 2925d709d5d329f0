/*
 * Split commands (from a partition's log) and range records (from the engine), both
 * cluster/split.h: any bytes are refused or decode to a value that encodes back to the
 * same bytes. Any bytes as a partition log entry (cluster/partition_entry.h): a SPLIT is
 * classified as one, and only a SPLIT; a newer binary's SPLIT is never decoded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/partition_entry.h"
#include "cluster/split.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

static void same_bytes(const buf *b, const uint8_t *data, size_t size)
{
    check(!b->failed && b->len == size && memcmp(b->data, data, size) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    strata_err err;
    split_cmd c;
    pentry_kind kind = pentry_kind_of(data, size);
    check((kind == PENTRY_SPLIT) == split_cmd_is(data, size));
    check(kind != PENTRY_WRITE || (size >= PENTRY_WRITE_HEADER && data[0] == 0xFE));
    check(kind != PENTRY_BARE_WRITE || size == 0 || data[0] < 0x80);
    int decoded = split_cmd_decode(data, size, &c, &err);
    check(decoded == 0 || err.code == ERR_CORRUPT || (err.code == ERR_NEWER && data[2] > SPLIT_VERSION));
    if (decoded == 0) {
        check(kind == PENTRY_SPLIT);
        check(c.n_members >= 1 && c.n_members <= SPLIT_MAX_MEMBERS);
        buf b;
        buf_init(&b, 0);
        check(split_cmd_encode(&c, &b, &err) == 0);
        same_bytes(&b, data, size);
        buf_free(&b);
    }
    split_range r;
    if (split_range_decode(data, size, &r, &err) == 0) {
        check(r.hash_lo <= r.hash_hi && r.n_members <= SPLIT_MAX_MEMBERS);
        buf b;
        buf_init(&b, 0);
        check(split_range_encode(&r, &b, &err) == 0);
        same_bytes(&b, data, size);
        buf_free(&b);
    }
    return 0;
}
