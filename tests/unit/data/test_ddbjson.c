/* Unit tests for storage/data/ddbjson: DynamoDB JSON parsing rules, messages, output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/data/base64.h"
#include "storage/data/ddbjson.h"
#include "tests/unit/data/gen.h"

static json_t *load(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);
    if (j == NULL)
        fail_msg("bad test JSON %s: %s", text, jerr.text);
    return j;
}

/* Parses an item; on success returns its compact JSON text (static buffer). */
static const char *item_ok(const char *text)
{
    static char out[8192];
    json_t *j = load(text);
    arena a;
    arena_init(&a, 0);
    av item;
    strata_err err;
    strata_err_clear(&err);
    if (ddbjson_to_item(j, &a, &item, &err) != 0)
        fail_msg("%s failed: %s", text, err.msg);
    json_decref(j); /* the item must not depend on the JSON tree */
    buf b;
    buf_init(&b, 0);
    ddbjson_write_item(&item, &b);
    assert_false(b.failed);
    assert_true(b.len < sizeof out);
    memcpy(out, b.data, b.len);
    out[b.len] = '\0';
    buf_free(&b);
    arena_free(&a);
    return out;
}

static void item_err(const char *text, strata_code code, const char *msg)
{
    json_t *j = load(text);
    arena a;
    arena_init(&a, 0);
    av item;
    strata_err err;
    strata_err_clear(&err);
    if (ddbjson_to_item(j, &a, &item, &err) == 0)
        fail_msg("%s parsed but should fail", text);
    if (err.code != code || strcmp(err.msg, msg) != 0)
        fail_msg("%s: got %s '%s', want %s '%s'", text, strata_code_name(err.code), err.msg,
                 strata_code_name(code), msg);
    json_decref(j);
    arena_free(&a);
}

#define VE ERR_VALIDATION
#define SE ERR_SERIALIZATION

static void parses_every_type(void **state)
{
    (void)state;
    assert_string_equal(
        item_ok("{\"s\":{\"S\":\"x\"},\"n\":{\"N\":\"-01.50\"},\"b\":{\"B\":\"AAH/\"},"
                "\"t\":{\"BOOL\":true},\"f\":{\"BOOL\":false},\"z\":{\"NULL\":true},"
                "\"m\":{\"M\":{\"k\":{\"S\":\"v\"}}},\"l\":{\"L\":[{\"N\":\"1\"},{\"S\":\"\"}]},"
                "\"ss\":{\"SS\":[\"b\",\"a\"]},\"ns\":{\"NS\":[\"10\",\"9\",\"-1e2\"]},"
                "\"bs\":{\"BS\":[\"Ag==\",\"AQ==\"]}}"),
        "{\"b\":{\"B\":\"AAH/\"},\"bs\":{\"BS\":[\"AQ==\",\"Ag==\"]},\"f\":{\"BOOL\":false},"
        "\"l\":{\"L\":[{\"N\":\"1\"},{\"S\":\"\"}]},\"m\":{\"M\":{\"k\":{\"S\":\"v\"}}},"
        "\"n\":{\"N\":\"-1.5\"},\"ns\":{\"NS\":[\"-100\",\"9\",\"10\"]},\"s\":{\"S\":\"x\"},"
        "\"ss\":{\"SS\":[\"a\",\"b\"]},\"t\":{\"BOOL\":true},\"z\":{\"NULL\":true}}");
    /* Empty strings and binaries are values; empty lists and maps too. */
    assert_string_equal(item_ok("{\"a\":{\"S\":\"\"},\"b\":{\"B\":\"\"},\"l\":{\"L\":[]},"
                                "\"m\":{\"M\":{}}}"),
                        "{\"a\":{\"S\":\"\"},\"b\":{\"B\":\"\"},\"l\":{\"L\":[]},"
                        "\"m\":{\"M\":{}}}");
    /* Unknown members and null members are ignored. */
    assert_string_equal(item_ok("{\"a\":{\"S\":\"x\",\"N\":null,\"Foo\":1}}"),
                        "{\"a\":{\"S\":\"x\"}}");
    assert_string_equal(item_ok("{}"), "{}");
    /* Escapes and UTF-8 survive. */
    assert_string_equal(item_ok("{\"q\\\"\\n\":{\"S\":\"\\u0001\\t\\\\/\xc3\xa9\"}}"),
                        "{\"q\\\"\\n\":{\"S\":\"\\u0001\\t\\\\/\xc3\xa9\"}}");
}

static void type_descriptor_errors(void **state)
{
    (void)state;
    item_err("{\"a\":{}}", VE,
             "Supplied AttributeValue is empty, must contain exactly one of the supported "
             "datatypes");
    item_err("{\"a\":{\"X\":\"y\"}}", VE,
             "Supplied AttributeValue is empty, must contain exactly one of the supported "
             "datatypes");
    item_err("{\"a\":{\"S\":null}}", VE,
             "Supplied AttributeValue is empty, must contain exactly one of the supported "
             "datatypes");
    item_err("{\"a\":null}", VE,
             "Supplied AttributeValue is empty, must contain exactly one of the supported "
             "datatypes");
    item_err("{\"a\":{\"S\":\"x\",\"N\":\"1\"}}", VE,
             "Supplied AttributeValue has more than one datatypes set, must contain exactly "
             "one of the supported datatypes");
    item_err("{\"a\":{\"s\":\"x\"}}", VE,
             "Supplied AttributeValue is empty, must contain exactly one of the supported "
             "datatypes");
}

static void shape_errors(void **state)
{
    (void)state;
    item_err("[]", SE, "Start of list found where not expected");
    item_err("\"x\"", SE, "Expected map or null");
    item_err("{\"a\":\"x\"}", SE, "Expected null");
    item_err("{\"a\":[]}", SE, "Start of list found where not expected");
    item_err("{\"a\":{\"S\":1}}", SE, "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"S\":100000}}", SE, "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"S\":10000000000}}", SE, "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"S\":1.5}}", SE, "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"S\":true}}", SE,
             "class java.lang.Boolean can not be converted to an String");
    item_err("{\"a\":{\"S\":{}}}", SE, "Start of structure or map found where not expected.");
    item_err("{\"a\":{\"N\":5}}", SE, "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"BOOL\":\"yes\"}}", SE, "'YES' can not be converted to an Boolean");
    item_err("{\"a\":{\"BOOL\":1}}", SE,
             "class java.lang.Short can not be converted to an Boolean");
    item_err("{\"a\":{\"M\":[]}}", SE, "Start of list found where not expected");
    item_err("{\"a\":{\"M\":\"x\"}}", SE, "Expected map or null");
    item_err("{\"a\":{\"L\":{}}}", SE, "Start of structure or map found where not expected.");
    item_err("{\"a\":{\"L\":1}}", SE, "Expected list or null");
    item_err("{\"a\":{\"SS\":\"a\"}}", SE, "Expected list or null");
    item_err("{\"a\":{\"SS\":[1]}}", SE, "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"B\":5}}", SE, "class java.lang.Short can not be converted to a Blob");
    /* A shape error anywhere wins over an earlier validation error. */
    item_err("{\"a\":{\"N\":\"x\"},\"b\":{\"S\":5}}", SE,
             "NUMBER_VALUE cannot be converted to String");
    item_err("{\"a\":{\"L\":[{}, {\"S\":[]}]}}", SE, "Start of list found where not expected");
}

static void base64_rules(void **state)
{
    (void)state;
    item_err("{\"a\":{\"B\":\"abc\"}}", SE,
             "'abc' can not be converted to a Blob: Base64 encoded length is expected a "
             "multiple of 4 bytes but found: 3");
    item_err("{\"a\":{\"B\":\"ab!c\"}}", SE,
             "'ab!c' can not be converted to a Blob: Invalid Base64 character: '!'");
    item_err("{\"a\":{\"B\":\"a=bc\"}}", SE,
             "'a=bc' can not be converted to a Blob: Invalid Base64 character: '='");
    item_err("{\"a\":{\"B\":\"QR==\"}}", SE,
             "'QR==' can not be converted to a Blob: Invalid last non-pad Base64 character "
             "dectected");
    item_err("{\"a\":{\"BS\":[\"QQ==\",\"QQ\"]}}", SE,
             "'QQ' can not be converted to a Blob: Base64 encoded length is expected a "
             "multiple of 4 bytes but found: 2");
    assert_string_equal(item_ok("{\"a\":{\"B\":\"QQ==\"}}"), "{\"a\":{\"B\":\"QQ==\"}}");

    /* Every byte string has one encoding, and it round-trips. */
    uint8_t bytes[300], back[300];
    char text[400];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 37 + 11);
    for (size_t n = 0; n < sizeof bytes; n++) {
        b64_encode(bytes, n, text);
        size_t len = b64_encoded_len(n), got;
        assert_true(b64_decode(text, len, back, &got));
        assert_int_equal(got, n);
        assert_memory_equal(back, bytes, n);
    }
    size_t got;
    assert_false(b64_decode("Q===", 4, back, &got));
    assert_false(b64_decode("=QQQ", 4, back, &got));
    assert_false(b64_decode("QQ=Q", 4, back, &got));
    assert_false(b64_decode("QQ==QQ==", 8, back, &got));
}

static void validation_errors(void **state)
{
    (void)state;
    item_err("{\"a\":{\"N\":\"x1\"}}", VE,
             "The parameter cannot be converted to a numeric value: x1");
    item_err("{\"a\":{\"N\":\"\"}}", VE, "The parameter cannot be converted to a numeric value");
    item_err("{\"a\":{\"N\":\"1E+126\"}}", VE,
             "Number overflow. Attempting to store a number with magnitude larger than "
             "supported range");
    item_err("{\"a\":{\"N\":\"1E-131\"}}", VE,
             "Number underflow. Attempting to store a number with magnitude smaller than "
             "supported range");
    item_err("{\"a\":{\"N\":\"123456789012345678901234567890123456789\"}}", VE,
             "Attempting to store more than 38 significant digits in a Number");
    item_err("{\"a\":{\"NS\":[\"1\",\"NaN\"]}}", VE,
             "The parameter cannot be converted to a numeric value: NaN");
    item_err("{\"a\":{\"NS\":[\"1\",null]}}", VE,
             "The parameter cannot be converted to a numeric value");
    item_err("{\"a\":{\"SS\":[]}}", VE,
             "One or more parameter values were invalid: An string set  may not be empty");
    item_err("{\"a\":{\"NS\":[]}}", VE,
             "One or more parameter values were invalid: An number set  may not be empty");
    item_err("{\"a\":{\"BS\":[]}}", VE,
             "One or more parameter values were invalid: Binary sets should not be empty");
    item_err("{\"a\":{\"SS\":[\"a\",\"b\",\"a\"]}}", VE,
             "One or more parameter values were invalid: Input collection [a, b, a] contains "
             "duplicates.");
    item_err("{\"a\":{\"NS\":[\"1\",\"1.0\"]}}", VE, "Input collection contains duplicates");
    item_err("{\"a\":{\"BS\":[\"QQ==\",\"QQ==\"]}}", VE,
             "One or more parameter values were invalid: Input collection [QQ==, QQ==]of type BS "
             "contains duplicates.");
    item_err("{\"a\":{\"NULL\":false}}", VE,
             "One or more parameter values were invalid: Null attribute value types must have "
             "the value of true");
    /* An empty attribute name, at the top or in a map at any depth. */
    item_err("{\"\":{\"S\":\"x\"}}", VE,
             "One or more parameter values were invalid: Empty attribute name");
    item_err("{\"a\":{\"L\":[{\"M\":{\"\":{\"N\":\"1\"}}}]}}", VE,
             "One or more parameter values were invalid: Empty attribute name");
    /* ExpressionAttributeValues: the top-level names are placeholders, checked by the
     * expression layer; maps inside the values follow the item's rule. */
    {
        arena a;
        arena_init(&a, 0);
        av m;
        strata_err e;
        json_t *j = load("{\"\":{\"S\":\"x\"}}");
        assert_int_equal(ddbjson_to_values(j, &a, &m, &e), 0);
        assert_int_equal(m.u.map.count, 1);
        json_decref(j);
        j = load("{\":v\":{\"M\":{\"\":{\"S\":\"x\"}}}}");
        assert_int_equal(ddbjson_to_values(j, &a, &m, &e), -1);
        assert_string_equal(e.msg,
                            "One or more parameter values were invalid: Empty attribute name");
        json_decref(j);
        arena_free(&a);
    }
    /* ... but a shape error anywhere wins. */
    item_err("{\"\":{\"S\":\"x\"},\"b\":{\"S\":1}}", SE,
             "NUMBER_VALUE cannot be converted to String");
    /* The first validation error in document order is the one reported. */
    item_err("{\"a\":{\"L\":[{\"N\":\"bad\"},{\"SS\":[]}]}}", VE,
             "The parameter cannot be converted to a numeric value: bad");
    /* Empty strings are fine in a string set. */
    assert_string_equal(item_ok("{\"a\":{\"SS\":[\"\",\"x\"]}}"), "{\"a\":{\"SS\":[\"\",\"x\"]}}");
}

/* {"a": {"L": [ ... depth lists ... ]}} */
static char *nested_lists(int depth)
{
    size_t cap = (size_t)depth * 16 + 64;
    char *s = malloc(cap);
    size_t k = (size_t)sprintf(s, "{\"a\":");
    for (int i = 0; i < depth; i++)
        k += (size_t)sprintf(s + k, "{\"L\":[");
    k += (size_t)sprintf(s + k, "{\"N\":\"1\"}");
    for (int i = 0; i < depth; i++)
        k += (size_t)sprintf(s + k, "]}");
    sprintf(s + k, "}");
    return s;
}

static void nesting_limit(void **state)
{
    (void)state;
    /* The item is level 1: 31 nested lists are accepted, 32 are not. */
    char *ok = nested_lists(31);
    item_ok(ok);
    free(ok);
    char *deep = nested_lists(32);
    item_err(deep, VE,
             "Nesting Levels have exceeded supported limits: Attributes in the item have "
             "nested levels beyond supported limit");
    free(deep);
    char *very = nested_lists(1000);
    item_err(very, VE, AV_NESTING_MSG);
    free(very);
    /* A single value (an ExpressionAttributeValue) follows the same count. */
    for (int depth = 30; depth <= 33; depth++) {
        char *text = nested_lists(depth);
        text[strlen(text) - 1] = '\0'; /* drop the item's closing brace */
        json_t *j = load(text + 5);    /* and its {"a": */
        free(text);
        arena a;
        arena_init(&a, 0);
        av v;
        strata_err err;
        int rc = ddbjson_to_value(j, &a, &v, &err);
        assert_int_equal(rc, depth <= AV_MAX_NESTING ? 0 : -1);
        if (rc == 0)
            assert_int_equal(av_check_nesting(&v, NULL), 0);
        else
            assert_string_equal(err.msg, AV_NESTING_MSG);
        json_decref(j);
        arena_free(&a);
    }
}

static void single_value_and_json_output(void **state)
{
    (void)state;
    arena a;
    arena_init(&a, 0);
    av v;
    strata_err err;
    json_t *j = load("{\"N\":\"100.0\"}");
    assert_int_equal(ddbjson_to_value(j, &a, &v, &err), 0);
    json_decref(j);
    assert_int_equal(v.type, AV_N);
    json_t *o = ddbjson_from_value(&v);
    char *text = json_dumps(o, JSON_COMPACT);
    assert_string_equal(text, "{\"N\":\"100\"}");
    free(text);
    json_decref(o);
    /* Empty values and names may have NULL pointers. */
    av_attr attr = {.name = NULL, .name_len = 0};
    attr.value.type = AV_S;
    av item = {.type = AV_M};
    item.u.map.attrs = &attr;
    item.u.map.count = 1;
    buf b;
    buf_init(&b, 0);
    ddbjson_write_item(&item, &b);
    assert_int_equal(b.len, strlen("{\"\":{\"S\":\"\"}}"));
    assert_memory_equal(b.data, "{\"\":{\"S\":\"\"}}", b.len);
    buf_free(&b);
    o = ddbjson_from_item(&item);
    assert_non_null(o);
    json_decref(o);
    j = load("\"x\"");
    assert_int_equal(ddbjson_to_value(j, &a, &v, &err), -1);
    assert_int_equal(err.code, ERR_SERIALIZATION);
    json_decref(j);
    arena_free(&a);
}

/* Random items: text writer, jansson output and parser agree and round-trip. */
static void random_round_trips(void **state)
{
    (void)state;
    gen_rng r = {2024};
    buf b;
    buf_init(&b, 0);
    for (int i = 0; i < 2000; i++) {
        arena a;
        arena_init(&a, 0);
        av item, back;
        gen_item(&r, &a, 5, &item);
        buf_reset(&b);
        ddbjson_write_item(&item, &b);
        assert_false(b.failed);
        json_error_t jerr;
        json_t *j = json_loadb((const char *)b.data, b.len, 0, &jerr);
        if (j == NULL)
            fail_msg("writer produced invalid JSON: %s: %.*s", jerr.text, (int)b.len, b.data);
        strata_err err;
        if (ddbjson_to_item(j, &a, &back, &err) != 0)
            fail_msg("re-parse failed: %s", err.msg);
        assert_true(av_equal(&item, &back));
        json_t *o = ddbjson_from_item(&item);
        assert_non_null(o);
        assert_true(json_equal(o, j));
        char *dumped = json_dumps(o, JSON_COMPACT);
        assert_int_equal(strlen(dumped), b.len);
        assert_memory_equal(dumped, b.data, b.len);
        free(dumped);
        json_decref(o);
        json_decref(j);
        arena_free(&a);
    }
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_every_type),
        cmocka_unit_test(type_descriptor_errors),
        cmocka_unit_test(shape_errors),
        cmocka_unit_test(base64_rules),
        cmocka_unit_test(validation_errors),
        cmocka_unit_test(nesting_limit),
        cmocka_unit_test(single_value_and_json_output),
        cmocka_unit_test(random_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
