#ifndef STRATA_DATA_DDBJSON_H
#define STRATA_DATA_DDBJSON_H
/*
 * DynamoDB JSON <-> attribute values.
 *
 * Input: a jansson tree (the API layer parsed the request body). The result is
 * self-contained: strings, names and bytes are copied into the arena, so the json_t may
 * be released right after. Every rule DynamoDB applies to an AttributeValue is checked,
 * with DynamoDB's error type and message:
 *  - SerializationException (ERR_SERIALIZATION) when the JSON shape is wrong: a value
 *    that is not an object, a string member holding a number, a set that is not an
 *    array, invalid base64 for B/BS.
 *  - ValidationException (ERR_VALIDATION): no type descriptor ("Supplied AttributeValue
 *    is empty, must contain exactly one of the supported datatypes"), more than one,
 *    invalid or out-of-range numbers, empty sets, duplicate set members, NULL not true,
 *    more than AV_MAX_NESTING nested M/L levels in one value (AV_NESTING_MSG, "Nesting
 *    Levels have exceeded supported limits: ...").
 * As in DynamoDB, shape errors anywhere in the value win over validation errors, and
 * JSON nulls and unknown members inside an AttributeValue are ignored.
 *
 * Output: as a jansson tree, or written directly as JSON text into a buf (the fast path
 * for responses). Numbers are written in DynamoDB's canonical form, B as base64.
 */
#include <jansson.h>

#include "storage/base/arena.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "storage/data/value.h"

/* One AttributeValue object, e.g. {"S": "x"}. */
int ddbjson_to_value(const json_t *j, arena *a, av *out, strata_err *err);
/* An object of attribute name -> AttributeValue (an Item, a Key, ...), as an AV_M with
 * sorted names. Names are at least one character long, also in maps inside the values
 * ("One or more parameter values were invalid: Empty attribute name"). */
int ddbjson_to_item(const json_t *j, arena *a, av *out, strata_err *err);
/* ddbjson_to_item for ExpressionAttributeValues: the top-level names are placeholders,
 * which the expression layer checks with its own messages (an empty one included). */
int ddbjson_to_values(const json_t *j, arena *a, av *out, strata_err *err);

/* New references; NULL when out of memory (or if an S value or name is not valid UTF-8,
 * which validated input never produces). */
json_t *ddbjson_from_value(const av *v);
json_t *ddbjson_from_item(const av *item);

/* Appends JSON text. Check out->failed afterwards. */
void ddbjson_write_value(const av *v, buf *out);
void ddbjson_write_item(const av *item, buf *out);
/* Appends a JSON string literal (quotes and escapes) for UTF-8 text. */
void ddbjson_write_string(const char *s, size_t len, buf *out);

#endif
