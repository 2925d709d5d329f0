/* Unit tests for storage/data/json.c: hand-picked inputs at every rule's edge, each
 * checked against the expected verdict AND against jansson's json_loadb (which the
 * parser must agree with; tests/fuzz/json compares the two on generated inputs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/data/json.h"

static size_t jansson_flags(int flags)
{
    return ((flags & STRATA_JSON_REJECT_DUPLICATES) ? JSON_REJECT_DUPLICATES : 0) |
           ((flags & STRATA_JSON_DECODE_ANY) ? JSON_DECODE_ANY : 0) |
           ((flags & STRATA_JSON_ALLOW_NUL) ? JSON_ALLOW_NUL : 0);
}

/* Parses `text` both ways; expects acceptance `ok` and, if accepted, equal values. */
static void expect(const char *text, size_t len, int flags, bool ok)
{
    strata_err err;
    json_t *got = strata_json_parse(text, len, flags, &err);
    json_error_t jerr;
    json_t *want = json_loadb(text, len, jansson_flags(flags), &jerr);
    if ((got != NULL) != ok)
        fail_msg("'%.*s' (flags %d): expected %s, got %s", (int)len, text, flags,
                 ok ? "accepted" : "refused", got ? "accepted" : err.msg);
    if ((want != NULL) != ok)
        fail_msg("'%.*s': jansson disagrees (%s)", (int)len, text, want ? "ok" : jerr.text);
    if (ok)
        assert_true(json_equal(got, want));
    else
        assert_int_equal(err.code, ERR_VALIDATION);
    json_decref(got);
    json_decref(want);
}

static void ok(const char *text)
{
    expect(text, strlen(text), STRATA_JSON_DECODE_ANY, true);
}

static void bad(const char *text)
{
    expect(text, strlen(text), STRATA_JSON_DECODE_ANY, false);
}

static void structure(void **state)
{
    (void)state;
    ok("{}");
    ok(" [ ] ");
    ok("{\"a\":[1,{\"b\":null}],\"c\":true,\"d\":false}");
    ok("\t\r\n{\"a\" : 1 }\n");
    bad("");
    bad("   ");
    bad("{");
    bad("{\"a\"}");
    bad("{\"a\":}");
    bad("{\"a\":1,}");
    bad("[1,]");
    bad("[,1]");
    bad("{1:2}");
    bad("[1] [2]");
    bad("[1]x");
    bad("tru");
    bad("truex");
    bad("nul");
    bad("[True]");
    /* Only an object or an array at the top without DECODE_ANY. */
    expect("1", 1, 0, false);
    expect("\"s\"", 3, 0, false);
    expect("[1]", 3, 0, true);
}

static void numbers(void **state)
{
    (void)state;
    ok("0");
    ok("-0");
    ok("-0.0");
    ok("12.5e-3");
    ok("1E+2");
    ok("9223372036854775807");
    ok("-9223372036854775808");
    ok("1e-400"); /* underflow is 0, as jansson */
    ok("0.000000000000000000000000000000000000000000000000000000000000000000000000001");
    bad("9223372036854775808");
    bad("-9223372036854775809");
    bad("1e400");
    bad("-1e400");
    bad("01");
    bad("-");
    bad("+1");
    bad(".5");
    bad("1.");
    bad("1.e5");
    bad("1e");
    bad("1e+");
    bad("0x10");
    bad("NaN");
    bad("Infinity");
    strata_err err;
    json_t *v = strata_json_parse("[7, 7.0]", 8, 0, &err);
    assert_true(json_is_integer(json_array_get(v, 0)));
    assert_true(json_is_real(json_array_get(v, 1)));
    json_decref(v);
}

static void strings(void **state)
{
    (void)state;
    ok("\"\"");
    ok("\"plain\"");
    ok("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"");
    ok("\"\\u00e9\\u20AC\\ud83d\\ude00\"");
    ok("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""); /* the same, raw */
    ok("\"\xf4\x8f\xbf\xbf\"");                     /* U+10FFFF */
    bad("\"\\u0000\"");
    bad("\"\\ud800\"");        /* lone high surrogate */
    bad("\"\\ud800\\u0041\""); /* high surrogate, then not a low one */
    bad("\"\\udc00\"");        /* lone low surrogate */
    bad("\"\\x41\"");
    bad("\"\\u12\"");
    bad("\"\\u12g4\"");
    bad("\"tab\there\"");
    bad("\"unterminated");
    bad("\"\xc0\xaf\"");         /* overlong '/' */
    bad("\"\xe0\x80\xaf\"");     /* overlong */
    bad("\"\xed\xa0\x80\"");     /* UTF-8 encoded surrogate */
    bad("\"\xf4\x90\x80\x80\""); /* above U+10FFFF */
    bad("\"\xc3\"");             /* truncated */
    bad("\"\x80\"");
    bad("\xef\xbb\xbf[]"); /* a byte order mark is not JSON */
    /* A NUL byte inside a string, raw, is a control character. */
    expect("\"a\0b\"", 5, STRATA_JSON_DECODE_ANY, false);
    strata_err err;
    json_t *v = strata_json_parse("\"a\\u00e9\\n\"", 11, STRATA_JSON_DECODE_ANY, &err);
    assert_non_null(v);
    assert_int_equal(json_string_length(v), 4);
    assert_memory_equal(json_string_value(v), "a\xc3\xa9\n", 4);
    json_decref(v);
}

static void objects_and_keys(void **state)
{
    (void)state;
    const char *dup = "{\"a\":1,\"a\":2}";
    expect(dup, strlen(dup), 0, true);
    expect(dup, strlen(dup), STRATA_JSON_REJECT_DUPLICATES, false);
    /* The same key spelled two ways is a duplicate too. */
    const char *dup2 = "{\"\\u0061\":1,\"a\":2}";
    expect(dup2, strlen(dup2), STRATA_JSON_REJECT_DUPLICATES, false);
    strata_err err;
    json_t *v = strata_json_parse(dup, strlen(dup), 0, &err);
    assert_int_equal(json_integer_value(json_object_get(v, "a")), 2); /* the last wins */
    json_decref(v);
    bad("{\"a\\u0000b\":1}");
    /* ALLOW_NUL lets "\u0000" into values (DynamoDB strings may hold it), never keys. */
    const char *nul_value = "{\"S\":\"a\\u0000b\"}", *nul_key = "{\"a\\u0000b\":1}";
    expect(nul_value, strlen(nul_value), 0, false);
    expect(nul_value, strlen(nul_value), STRATA_JSON_ALLOW_NUL, true);
    expect(nul_key, strlen(nul_key), STRATA_JSON_ALLOW_NUL, false);
    v = strata_json_parse(nul_value, strlen(nul_value), STRATA_JSON_ALLOW_NUL, &err);
    assert_int_equal(json_string_length(json_object_get(v, "S")), 3);
    assert_memory_equal(json_string_value(json_object_get(v, "S")), "a\0b", 3);
    json_decref(v);
    /* An escaped key followed by a value with escapes: the key is kept apart. */
    v = strata_json_parse("{\"k\\n\":\"v\\t\"}", 13, 0, &err);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "k\n")), "v\t");
    json_decref(v);
    /* A long escaped key (beyond the small copy buffer). */
    char big[400];
    int n = snprintf(big, sizeof big, "{\"%0300d\\n\":[\"\\t\"]}", 7);
    expect(big, (size_t)n, 0, true);
}

static void nesting_depth(void **state)
{
    (void)state;
    /* jansson counts every value, scalars included, up to 2048. */
    size_t max = STRATA_JSON_MAX_DEPTH;
    char *s = malloc(2 * max + 8);
    for (size_t depth = max - 1; depth <= max + 1; depth++) {
        size_t n = 0;
        for (size_t i = 0; i < depth; i++)
            s[n++] = '[';
        s[n++] = '1';
        for (size_t i = 0; i < depth; i++)
            s[n++] = ']';
        expect(s, n, 0, depth + 1 <= max);
        n = 0;
        for (size_t i = 0; i < depth; i++)
            s[n++] = '[';
        for (size_t i = 0; i < depth; i++)
            s[n++] = ']';
        expect(s, n, 0, depth <= max);
    }
    free(s);
}

static void input_is_not_read_past_its_length(void **state)
{
    (void)state;
    /* "[1]" followed by garbage that is outside the length given. */
    expect("[1]garbage", 3, 0, true);
    expect("[12345", 3, 0, false);
    expect("\"abc\"", 3, STRATA_JSON_DECODE_ANY, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(structure),     cmocka_unit_test(numbers),
        cmocka_unit_test(strings),       cmocka_unit_test(objects_and_keys),
        cmocka_unit_test(nesting_depth), cmocka_unit_test(input_is_not_read_past_its_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
