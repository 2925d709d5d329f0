/* Unit tests of node/config: stratad's command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "node/config.h"

static int parse(stratad_config *cfg, strata_err *err, int argc, ...)
{
    char *argv[16] = {"stratad"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 1; i <= argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return config_parse(argc + 1, argv, cfg, err);
}

static void test_defaults(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    assert_int_equal(parse(&c, &err, 2, "--data-dir", "/tmp/x"), 0);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8000);
    assert_int_equal(c.initial_partitions, 4);
    assert_int_equal(c.level, LOG_INFO);
    assert_string_equal(c.data_dir, "/tmp/x");
    assert_string_equal(c.region, "us-east-1");
}

static void test_flags(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    assert_int_equal(parse(&c, &err, 7, "--listen", "0.0.0.0:0", "--data-dir=/d",
                           "--initial-partitions", "8", "--log-level=debug", "--region=eu-west-1"),
                     0);
    assert_string_equal(c.host, "0.0.0.0");
    assert_int_equal(c.port, 0);
    assert_int_equal(c.initial_partitions, 8);
    assert_int_equal(c.level, LOG_DEBUG);
    assert_string_equal(c.region, "eu-west-1");
    assert_int_equal(parse(&c, &err, 3, "--listen=[::1]:9000", "--data-dir", "d"), 0);
    assert_string_equal(c.host, "::1");
    assert_int_equal(c.port, 9000);
    assert_int_equal(parse(&c, &err, 1, "--help"), 0);
    assert_true(c.help);
}

static void test_bad(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    assert_int_equal(parse(&c, &err, 0), -1);
    assert_non_null(strstr(err.msg, "--data-dir"));
    assert_int_equal(parse(&c, &err, 1, "--data-dir"), -1);
    assert_int_equal(parse(&c, &err, 3, "--data-dir", "d", "--bogus"), -1);
    assert_non_null(strstr(err.msg, "--bogus"));
    assert_int_equal(parse(&c, &err, 4, "--data-dir", "d", "--listen", "nohost"), -1);
    assert_int_equal(parse(&c, &err, 4, "--data-dir", "d", "--listen", "h:70000"), -1);
    assert_int_equal(parse(&c, &err, 4, "--data-dir", "d", "--listen", "h:"), -1);
    assert_int_equal(parse(&c, &err, 4, "--data-dir", "d", "--initial-partitions", "0"), -1);
    assert_int_equal(parse(&c, &err, 4, "--data-dir", "d", "--initial-partitions", "x"), -1);
    assert_int_equal(parse(&c, &err, 4, "--data-dir", "d", "--log-level", "loud"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
