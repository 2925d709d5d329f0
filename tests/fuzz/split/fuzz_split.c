/*
 * Split commands (from a partition's log) and range records (from the engine), both
 * cluster/split.h: any bytes are refused or decode to a value that encodes back to the
 * same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    if (split_cmd_decode(data, size, &c, &err) == 0) {
        check(split_cmd_is(data, size));
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
