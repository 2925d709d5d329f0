/*
 * Differential fuzzing of storage/data/json.c against jansson's json_loadb: for every
 * input and every flag combination the two must agree on accepting it, and on the value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/json.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

static void compare(const uint8_t *data, size_t size, int ours, size_t theirs)
{
    json_error_t jerr;
    json_t *want = json_loadb((const char *)data, size, theirs, &jerr);
    strata_err err;
    json_t *got = strata_json_parse(data, size, ours, &err);
    check((want == NULL) == (got == NULL));
    if (want != NULL) {
        check(json_equal(want, got));
        /* json_equal ignores object key order and int/real sameness is by type already;
         * also compare the compact text, which shows order and every byte of strings. */
        char *a = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        char *b = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        check(a != NULL && b != NULL && strcmp(a, b) == 0);
        free(a);
        free(b);
    } else {
        check(err.code == ERR_VALIDATION || err.code == ERR_NOMEM);
    }
    json_decref(want);
    json_decref(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* jansson swallows a NUL byte right after a number ("[1\0]" loads as [1]); a NUL
     * outside a string is invalid JSON, which ours refuses. Compare only inputs
     * without NUL bytes; parse the others for crashes and leaks alone. */
    if (memchr(data, 0, size) != NULL) {
        strata_err err;
        json_decref(strata_json_parse(data, size, STRATA_JSON_DECODE_ANY, &err));
        return 0;
    }
    compare(data, size, 0, 0);
    compare(data, size, STRATA_JSON_REJECT_DUPLICATES, JSON_REJECT_DUPLICATES);
    compare(data, size, STRATA_JSON_DECODE_ANY, JSON_DECODE_ANY);
    compare(data, size, STRATA_JSON_ALLOW_NUL | STRATA_JSON_REJECT_DUPLICATES,
            JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES);
    compare(data, size, STRATA_JSON_ALLOW_NUL | STRATA_JSON_DECODE_ANY,
            JSON_ALLOW_NUL | JSON_DECODE_ANY);
    return 0;
}
