#ifndef STRATA_DATA_JSON_H
#define STRATA_DATA_JSON_H
/*
 * A JSON text parser that builds jansson values, for the hot paths (every request body,
 * every replicated write command). It accepts exactly what jansson's json_loadb accepts
 * with the same flags (RFC 8259: UTF-8 text, no "\u0000" anywhere unless
 * STRATA_JSON_ALLOW_NUL lets it into string values as JSON_ALLOW_NUL does, integers that
 * fit a long long, reals that do not overflow, nesting up to 2048 levels, nothing but
 * whitespace after the value) and builds equal values; tests/fuzz/json compares the two
 * on every input. It is several times faster than jansson's own parser, which reads its
 * input one character at a time through a stream layer.
 *
 * Strings and keys are checked here once and handed to jansson's *_nocheck
 * constructors. The input needs no terminating NUL and is never read past `len`.
 */
#include <stddef.h>

#include <jansson.h>

#include "storage/base/err.h"

#define STRATA_JSON_MAX_DEPTH 2048 /* as jansson's JSON_PARSER_DEFAULT_DEPTH */

enum {
    STRATA_JSON_REJECT_DUPLICATES = 1, /* a key twice in one object is an error */
    STRATA_JSON_DECODE_ANY = 2,        /* any value at the top, not only an object or array */
    STRATA_JSON_ALLOW_NUL = 4,         /* "\u0000" in string values (never in object keys) */
};

/* The value of `text` (a new reference), or NULL with `err` (ERR_VALIDATION naming the
 * byte offset and the fault, or ERR_NOMEM). */
json_t *strata_json_parse(const void *text, size_t len, int flags, strata_err *err);

#endif
