/*
 * Stored-item decoder fuzzing: any bytes either fail cleanly or decode to an item whose
 * re-encoding is stable. The same bytes also go through the key decoder.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/codec.h"
#include "storage/data/key.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    arena a;
    arena_init(&a, 64 << 20);
    av item;
    strata_err err;
    if (item_decode(data, size, &a, &item, &err) == 0) {
        buf e1, e2;
        buf_init(&e1, 0);
        buf_init(&e2, 0);
        item_encode(&item, &e1);
        check(!e1.failed);
        av back;
        check(item_decode(e1.data, e1.len, &a, &back, &err) == 0);
        check(av_equal(&item, &back));
        item_encode(&back, &e2);
        check(e1.len == e2.len && memcmp(e1.data, e2.data, e1.len) == 0);
        buf_free(&e1);
        buf_free(&e2);
    } else {
        check(err.code == ERR_CORRUPT || err.code == ERR_NOMEM);
    }

    if (size > 0) {
        static const av_type types[] = {AV_S, AV_N, AV_B};
        av v;
        size_t used;
        if (key_decode_value(data + 1, size - 1, types[data[0] % 3], &a, &v, &used, &err) == 0) {
            check(used <= size - 1);
            buf k;
            buf_init(&k, 0);
            key_encode_value(&v, &k);
            check(k.len == used && memcmp(k.data, data + 1, used) == 0);
            buf_free(&k);
        }
    }
    arena_free(&a);
    return 0;
}
