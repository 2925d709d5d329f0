/*
 * DynamoDB JSON parser fuzzing: bytes -> jansson -> ddbjson_to_item; every accepted item
 * must survive the item codec and the JSON writer unchanged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/codec.h"
#include "storage/data/ddbjson.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)data, size, 0, &jerr);
    if (j == NULL)
        return 0;
    arena a;
    arena_init(&a, 64 << 20);
    av item;
    strata_err err;
    if (ddbjson_to_item(j, &a, &item, &err) == 0) {
        buf enc, text;
        buf_init(&enc, 0);
        buf_init(&text, 0);
        item_encode(&item, &enc);
        check(!enc.failed);
        av back;
        check(item_decode(enc.data, enc.len, &a, &back, &err) == 0);
        check(av_equal(&item, &back));
        check(item_size(&item) == item_size(&back));

        ddbjson_write_item(&item, &text);
        check(!text.failed);
        json_t *j2 = json_loadb((const char *)text.data, text.len, 0, &jerr);
        check(j2 != NULL);
        av again;
        check(ddbjson_to_item(j2, &a, &again, &err) == 0);
        check(av_equal(&item, &again));
        json_t *o = ddbjson_from_item(&item);
        check(o != NULL && json_equal(o, j2));
        json_decref(o);
        json_decref(j2);
        buf_free(&enc);
        buf_free(&text);
    } else {
        check(err.code == ERR_VALIDATION || err.code == ERR_SERIALIZATION || err.code == ERR_NOMEM);
    }
    json_decref(j);
    arena_free(&a);
    return 0;
}
