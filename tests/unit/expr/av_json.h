#ifndef STRATA_TESTS_EXPR_AV_JSON_H
#define STRATA_TESTS_EXPR_AV_JSON_H
/*
 * Test helpers: DynamoDB JSON text <-> av, so tables of test cases can be written as
 * readable JSON. Not the production converter (storage/data/ddbjson.h): small and
 * strict enough for tests, the fuzzer and the benchmark.
 */
#include <jansson.h>

#include "storage/base/arena.h"
#include "storage/data/value.h"

/* Parses a DynamoDB JSON value ({"S":"x"}) or, with `as_item`, an item/map
 * ({"a":{"S":"x"}}). NULL on any error. */
av *tj_parse(arena *a, const char *text, int as_item);
av *tj_from_json(arena *a, const json_t *j, int as_item);
/* Renders an item (AV_M) as compact DynamoDB JSON with sorted keys; caller frees. */
char *tj_dump_item(const av *item);

#endif
