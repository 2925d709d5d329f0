/* `strata table stats`: /admin/table-stats JSON of several nodes in, sums and rows out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "node/cli/table_stats.h"

static const char node1[] =
    "{\"table\":\"T\",\"billing_mode\":\"PROVISIONED\",\"provisioned\":{\"read\":5,\"write\":20},"
    "\"consumed\":{\"read\":1.5,\"write\":100},\"read_throttle_events\":0,"
    "\"write_throttle_events\":3,\"throttled_requests\":2,\"partitions\":["
    "{\"id\":7,\"consumed\":{\"read\":1.5,\"write\":100},\"read_throttle_events\":0,"
    "\"write_throttle_events\":3,\"hot_key\":{\"hash\":\"000000000000002a\",\"percent\":80}}]}";
static const char node2[] =
    "{\"table\":\"T\",\"billing_mode\":\"PROVISIONED\",\"provisioned\":{\"read\":5,\"write\":20},"
    "\"consumed\":{\"read\":0,\"write\":50},\"read_throttle_events\":0,"
    "\"write_throttle_events\":1,\"throttled_requests\":1,\"partitions\":["
    "{\"id\":8,\"consumed\":{\"read\":0,\"write\":50},\"read_throttle_events\":0,"
    "\"write_throttle_events\":1,\"hot_key\":null}]}";

static char *print(const cli_table_view *v, size_t n, int *rc)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    strata_err err;
    *rc = cli_table_stats_print(v, n, f, &err);
    fclose(f);
    return text;
}

static void test_sums_over_nodes(void **state)
{
    (void)state;
    cli_table_view v[3] = {{1, node1}, {2, node2}, {3, NULL}};
    int rc;
    char *text = print(v, 3, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(text, "table T: PROVISIONED (read 5, write 20 units/s)\n"));
    assert_non_null(strstr(text, "consumed: read 1.5, write 150 units; throttle events: read 0, "
                                 "write 4; throttled requests: 3\n"));
    assert_non_null(strstr(text, "000000000000002a (80%)"));
    assert_non_null(strstr(text, "node 3: no answer\n"));
    free(text);
}

static void test_no_answer(void **state)
{
    (void)state;
    cli_table_view v[1] = {{1, "not json"}};
    int rc;
    char *text = print(v, 1, &rc);
    assert_int_equal(rc, -1);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums_over_nodes),
        cmocka_unit_test(test_no_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
