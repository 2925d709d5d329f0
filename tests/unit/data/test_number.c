/* Unit tests for storage/data/number: parsing, limits, formatting, comparison, arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/data/number.h"

static num parse_ok(const char *s)
{
    num n;
    strata_err err;
    strata_err_clear(&err);
    if (num_parse(s, strlen(s), &n, &err) != 0)
        fail_msg("parse of '%s' failed: %s", s, err.msg);
    return n;
}

static void expect_canonical(const char *in, const char *want)
{
    num n = parse_ok(in);
    char out[NUM_TEXT_MAX];
    size_t len = num_format(&n, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("'%s' formatted as '%s', want '%s'", in, out, want);
    assert_int_equal(len, strlen(want));
}

static void expect_parse_error(const char *in, const char *want_msg)
{
    num n;
    strata_err err;
    strata_err_clear(&err);
    if (num_parse(in, strlen(in), &n, &err) == 0)
        fail_msg("'%s' parsed but should fail", in);
    assert_int_equal(err.code, ERR_VALIDATION);
    if (strcmp(err.msg, want_msg) != 0)
        fail_msg("'%s': message '%s', want '%s'", in, err.msg, want_msg);
}

#define NOT_NUMERIC "The parameter cannot be converted to a numeric value"
#define OVERFLOW_MSG                                                                               \
    "Number overflow. Attempting to store a number with magnitude larger than supported range"
#define UNDERFLOW_MSG                                                                              \
    "Number underflow. Attempting to store a number with magnitude smaller than supported "        \
    "range"
#define PRECISION_MSG "Attempting to store more than 38 significant digits in a Number"

/* "0." then 129 zeros then `last`: the canonical text of last * 1E-130. */
static void tiny_number(char *out, char last)
{
    strcpy(out, "0.");
    memset(out + 2, '0', 129);
    out[131] = last;
    out[132] = '\0';
}

static void canonical_formatting(void **state)
{
    (void)state;
    expect_canonical("0", "0");
    expect_canonical("-0", "0");
    expect_canonical("+0.000", "0");
    expect_canonical("0e500", "0");
    expect_canonical("00012", "12");
    expect_canonical("+7", "7");
    expect_canonical("1.50", "1.5");
    expect_canonical("-1.50", "-1.5");
    expect_canonical(".5", "0.5");
    expect_canonical("5.", "5");
    expect_canonical("1e3", "1000");
    expect_canonical("1E+3", "1000");
    expect_canonical("1.234e2", "123.4");
    expect_canonical("1234e-2", "12.34");
    expect_canonical("1234e-4", "0.1234");
    expect_canonical("1234e-6", "0.001234");
    expect_canonical("100", "100");
    expect_canonical("0.0100", "0.01");
    expect_canonical("-123.456000", "-123.456");
    char tiny[NUM_TEXT_MAX];
    tiny_number(tiny, '1');
    expect_canonical("1E-130", tiny);
    expect_canonical("9.9999999999999999999999999999999999999E+125",
                     "99999999999999999999999999999999999999000000000000000000000000000000"
                     "0000000000000000000000000000000000000000000000000000000000");
    /* 38 digits, leading and trailing zeros do not count. */
    expect_canonical("00012345678901234567890123456789012345678000",
                     "12345678901234567890123456789012345678000");
    expect_canonical("0.00012345678901234567890123456789012345678",
                     "0.00012345678901234567890123456789012345678");
}

static void syntax_errors(void **state)
{
    (void)state;
    expect_parse_error("", NOT_NUMERIC);
    expect_parse_error("abc", NOT_NUMERIC ": abc");
    expect_parse_error("NaN", NOT_NUMERIC ": NaN");
    expect_parse_error("Infinity", NOT_NUMERIC ": Infinity");
    expect_parse_error("-Infinity", NOT_NUMERIC ": -Infinity");
    expect_parse_error("0x10", NOT_NUMERIC ": 0x10");
    expect_parse_error(" 1", NOT_NUMERIC ":  1");
    expect_parse_error("1 ", NOT_NUMERIC ": 1 ");
    expect_parse_error("1e", NOT_NUMERIC ": 1e");
    expect_parse_error("1e+", NOT_NUMERIC ": 1e+");
    expect_parse_error("e5", NOT_NUMERIC ": e5");
    expect_parse_error(".", NOT_NUMERIC ": .");
    expect_parse_error("-", NOT_NUMERIC ": -");
    expect_parse_error("+-1", NOT_NUMERIC ": +-1");
    expect_parse_error("1.2.3", NOT_NUMERIC ": 1.2.3");
    expect_parse_error("1e5.5", NOT_NUMERIC ": 1e5.5");
    expect_parse_error("1,5", NOT_NUMERIC ": 1,5");
}

static void range_and_precision_limits(void **state)
{
    (void)state;
    parse_ok("1E-130");
    parse_ok("-1E-130");
    parse_ok("9.9999999999999999999999999999999999999E+125");
    parse_ok("-9.9999999999999999999999999999999999999E+125");
    parse_ok("12345678901234567890123456789012345678");   /* 38 digits */
    parse_ok("1234567890123456789012345678901234567800"); /* trailing zeros */
    expect_parse_error("1E-131", UNDERFLOW_MSG);
    expect_parse_error("0.9E-130", UNDERFLOW_MSG);
    expect_parse_error("1E+126", OVERFLOW_MSG);
    expect_parse_error("-1E+126", OVERFLOW_MSG);
    expect_parse_error("1e99999999999999999999", OVERFLOW_MSG);
    expect_parse_error("1e-99999999999999999999", UNDERFLOW_MSG);
    /* Long inputs whose digits and exponent cancel out are exact, not saturated. */
    size_t big = 200000;
    char *s = malloc(big + 32);
    s[0] = '1';
    memset(s + 1, '0', big);
    strcpy(s + 1 + big, "e-199990");
    expect_canonical(s, "10000000000");
    strcpy(s, "0.");
    memset(s + 2, '0', big);
    strcpy(s + 2 + big, "1e200001");
    expect_canonical(s, "1");
    strcpy(s + 2 + big, "1e199870"); /* 1E-131 */
    expect_parse_error(s, UNDERFLOW_MSG);
    free(s);
    expect_parse_error("123456789012345678901234567890123456789", PRECISION_MSG); /* 39 */
    expect_parse_error("1.00000000000000000000000000000000000001", PRECISION_MSG);
    expect_parse_error("9.99999999999999999999999999999999999999E+125", PRECISION_MSG);
}

static int cmp_text(const char *a, const char *b)
{
    num x = parse_ok(a), y = parse_ok(b);
    return num_cmp(&x, &y);
}

static void numeric_comparison(void **state)
{
    (void)state;
    assert_int_equal(cmp_text("1", "1.0"), 0);
    assert_int_equal(cmp_text("0", "-0"), 0);
    assert_true(cmp_text("2", "10") < 0);
    assert_true(cmp_text("-2", "-10") > 0);
    assert_true(cmp_text("-1", "0") < 0);
    assert_true(cmp_text("0", "1E-130") < 0);
    assert_true(cmp_text("-1E-130", "0") < 0);
    assert_true(cmp_text("0.5", "0.05") > 0);
    assert_true(cmp_text("1.5", "1.25") > 0);
    assert_true(cmp_text("1.25", "1.2") > 0);
    assert_true(cmp_text("-1.25", "-1.2") < 0);
    assert_true(cmp_text("9.9999999999999999999999999999999999999E+125", "1E+125") > 0);
    num z = parse_ok("-0.0");
    assert_true(num_is_zero(&z));
    assert_false(z.neg);
}

static void expect_sum(const char *a, const char *b, const char *want, bool subtract)
{
    num x = parse_ok(a), y = parse_ok(b), r;
    strata_err err;
    strata_err_clear(&err);
    int rc = subtract ? num_sub(&x, &y, &r, &err) : num_add(&x, &y, &r, &err);
    if (rc != 0)
        fail_msg("%s %c %s failed: %s", a, subtract ? '-' : '+', b, err.msg);
    char out[NUM_TEXT_MAX];
    num_format(&r, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("%s %c %s = %s, want %s", a, subtract ? '-' : '+', b, out, want);
}

static void expect_sum_error(const char *a, const char *b, const char *msg, bool subtract)
{
    num x = parse_ok(a), y = parse_ok(b), r;
    strata_err err;
    strata_err_clear(&err);
    int rc = subtract ? num_sub(&x, &y, &r, &err) : num_add(&x, &y, &r, &err);
    assert_int_equal(rc, -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_string_equal(err.msg, msg);
}

static void exact_arithmetic(void **state)
{
    (void)state;
    expect_sum("1", "2", "3", false);
    expect_sum("0.1", "0.2", "0.3", false);
    expect_sum("99", "1", "100", false);
    expect_sum("1", "-1", "0", false);
    expect_sum("-5", "3", "-2", false);
    expect_sum("3", "-5", "-2", false);
    expect_sum("100", "0.001", "100.001", false);
    expect_sum("1000", "1", "999", true);
    expect_sum("1", "1000", "-999", true);
    expect_sum("-1", "-1", "0", true);
    expect_sum("0", "-7.5", "7.5", true);
    expect_sum("0", "7.5", "7.5", false);
    expect_sum("7.5", "0", "7.5", true);
    expect_sum("1E+125", "1E+125",
               "200000000000000000000000000000000000000000000000000000000000"
               "000000000000000000000000000000000000000000000000000000000000"
               "000000",
               false);
    char tiny[NUM_TEXT_MAX];
    tiny_number(tiny, '2');
    expect_sum("1E-130", "1E-130", tiny, false);
    expect_sum("12345678901234567890123456789012345678", "1",
               "12345678901234567890123456789012345679", false);
    expect_sum("0.00000000000000000000000000000000000001",
               "-0.00000000000000000000000000000000000001", "0", false);
    /* 38 nines + 1 carries into 39 digits, but trailing zeros are not significant. */
    expect_sum("99999999999999999999999999999999999999", "1",
               "100000000000000000000000000000000000000", false);
    expect_sum_error("9.9999999999999999999999999999999999999E+125", "1E+125", OVERFLOW_MSG, false);
    expect_sum_error("-9.9999999999999999999999999999999999999E+125", "1E+125", OVERFLOW_MSG, true);
    /* Past 38 digits: DynamoDB calls a sum's lost precision an overflow. */
    expect_sum_error("12345678901234567890123456789012345678", "0.1", OVERFLOW_MSG, false);
    expect_sum_error("1E+100", "1", OVERFLOW_MSG, false);
    expect_sum_error("1E+50", "1", OVERFLOW_MSG, true);
    expect_sum_error("1.1E-130", "1E-130", UNDERFLOW_MSG, true);
    tiny_number(tiny, '1');
    expect_sum("1.1E-129", "1E-129", tiny, true); /* exactly 1E-130 */
}

static void int64_conversions(void **state)
{
    (void)state;
    static const int64_t vals[] = {
        0, 1, -1, 10, 100, -1000, 123456789, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        num n;
        num_from_i64(vals[i], &n);
        char out[NUM_TEXT_MAX], want[32];
        num_format(&n, out, sizeof out);
        snprintf(want, sizeof want, "%lld", (long long)vals[i]);
        assert_string_equal(out, want);
        int64_t back;
        assert_int_equal(num_to_i64(&n, &back), 0);
        assert_true(back == vals[i]);
    }
    int64_t v;
    num n = parse_ok("9223372036854775808");
    assert_int_equal(num_to_i64(&n, &v), -1);
    n = parse_ok("-9223372036854775809");
    assert_int_equal(num_to_i64(&n, &v), -1);
    n = parse_ok("1.5");
    assert_int_equal(num_to_i64(&n, &v), -1);
    n = parse_ok("1E+30");
    assert_int_equal(num_to_i64(&n, &v), -1);
    n = parse_ok("1.5E+1");
    assert_int_equal(num_to_i64(&n, &v), 0);
    assert_int_equal(v, 15);
}

/* Random numbers round-trip through text and agree with a reference in long double-free
 * integer arithmetic for small values. */
static void random_round_trip_and_integer_arithmetic(void **state)
{
    (void)state;
    srand(12345);
    for (int i = 0; i < 20000; i++) {
        int64_t a = ((int64_t)rand() << 20 ^ rand()) % 1000000000000LL - 500000000000LL;
        int64_t b = ((int64_t)rand() << 20 ^ rand()) % 1000000000000LL - 500000000000LL;
        num x, y, r;
        num_from_i64(a, &x);
        num_from_i64(b, &y);
        assert_int_equal(num_add(&x, &y, &r, NULL), 0);
        int64_t got;
        assert_int_equal(num_to_i64(&r, &got), 0);
        assert_true(got == a + b);
        assert_int_equal(num_sub(&x, &y, &r, NULL), 0);
        assert_int_equal(num_to_i64(&r, &got), 0);
        assert_true(got == a - b);
        int c = num_cmp(&x, &y);
        assert_int_equal(c, (a > b) - (a < b));
        char text[NUM_TEXT_MAX];
        size_t len = num_format(&x, text, sizeof text);
        num back;
        assert_int_equal(num_parse(text, len, &back, NULL), 0);
        assert_memory_equal(&back, &x, offsetof(num, d) + x.ndigits);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(canonical_formatting),
        cmocka_unit_test(syntax_errors),
        cmocka_unit_test(range_and_precision_limits),
        cmocka_unit_test(numeric_comparison),
        cmocka_unit_test(exact_arithmetic),
        cmocka_unit_test(int64_conversions),
        cmocka_unit_test(random_round_trip_and_integer_arithmetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
