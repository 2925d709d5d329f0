/* The `strata` CLI (node/cli) against a real node/http server on loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "node/cli/cli.h"
#include "node/cli/client.h"
#include "tests/unit/node/http/harness.h"

typedef struct {
    int code;
    char out[4096];
    char err[4096];
} run_result;

/* Runs the tool with a NULL-terminated argument list, capturing both streams. */
static run_result run(const char *arg0, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a != NULL && argc < 15; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    run_result r;
    memset(&r, 0, sizeof r);
    FILE *out = fmemopen(r.out, sizeof r.out - 1, "w");
    FILE *err = fmemopen(r.err, sizeof r.err - 1, "w");
    r.code = strata_cli_main(argc, argv, out, err);
    fclose(out);
    fclose(err);
    return r;
}

static void endpoint_parsing(void **state)
{
    (void)state;
    cli_endpoint ep;
    strata_err err;
    assert_int_equal(cli_endpoint_parse("http://127.0.0.1:8000", &ep, &err), 0);
    assert_string_equal(ep.host, "127.0.0.1");
    assert_string_equal(ep.port, "8000");
    assert_string_equal(ep.base_path, "");
    assert_int_equal(cli_endpoint_parse("http://node-a/prefix/", &ep, &err), 0);
    assert_string_equal(ep.host, "node-a");
    assert_string_equal(ep.port, "80");
    assert_string_equal(ep.base_path, "/prefix");
    assert_int_equal(cli_endpoint_parse("http://[::1]:9000/x", &ep, &err), 0);
    assert_string_equal(ep.host, "::1");
    assert_string_equal(ep.port, "9000");
    const char *bad[] = {"127.0.0.1:8000", "https://a",      "http://",
                         "http://a:0",     "http://a:70000", "http://a:12x",
                         "http://[::1",    "http://:80",     "http://[::1]x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (cli_endpoint_parse(bad[i], &ep, &err) != -1)
            fail_msg("accepted %s", bad[i]);
        assert_int_equal(err.code, ERR_VALIDATION);
    }
}

static void version_and_usage(void **state)
{
    (void)state;
    run_result r = run("strata", "version", NULL);
    assert_int_equal(r.code, CLI_EXIT_OK);
    assert_non_null(strstr(r.out, "strata 0."));
    r = run("strata", NULL);
    assert_int_equal(r.code, CLI_EXIT_USAGE);
    assert_non_null(strstr(r.err, "usage:"));
    r = run("strata", "frobnicate", NULL);
    assert_int_equal(r.code, CLI_EXIT_USAGE);
    r = run("strata", "--timeout", "abc", "health", NULL);
    assert_int_equal(r.code, CLI_EXIT_USAGE);
    r = run("strata", "--endpoint", "ftp://x", "health", NULL);
    assert_int_equal(r.code, CLI_EXIT_USAGE);
    r = run("strata", "--help", NULL);
    assert_int_equal(r.code, CLI_EXIT_OK);
    assert_non_null(strstr(r.out, "health"));
}

static void health_ok_and_unhealthy(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    http_server_options_default(&o);
    harness_start(&h, &o, MODE_STATUS);
    harness_set_status(&h, 200);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", h.port);
    run_result r = run("strata", "--endpoint", ep, "health", NULL);
    assert_int_equal(r.code, CLI_EXIT_OK);
    assert_string_equal(r.out, "ok\n");
    harness_stop(&h);

    harness_start(&h, &o, MODE_STATUS);
    harness_set_status(&h, 503);
    snprintf(ep, sizeof ep, "--endpoint=http://127.0.0.1:%d/", h.port);
    r = run("strata", ep, "health", NULL);
    assert_int_equal(r.code, CLI_EXIT_UNHEALTHY);
    assert_non_null(strstr(r.out, "HTTP 503 Service Unavailable: status"));
    harness_stop(&h);
}

static void health_unreachable_and_timeout(void **state)
{
    (void)state;
    /* A port nobody listens on: bind one, then close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    socklen_t len = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &len);
    close(fd);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", ntohs(sin.sin_port));
    run_result r = run("strata", "--endpoint", ep, "health", NULL);
    assert_int_equal(r.code, CLI_EXIT_UNREACHABLE);
    assert_non_null(strstr(r.err, "unreachable"));

    /* A node that never answers: the deadline ends the wait. */
    harness h;
    http_server_options o;
    http_server_options_default(&o);
    harness_start(&h, &o, MODE_DEFER);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", h.port);
    uint64_t t0 = now_ms();
    r = run("strata", "--endpoint", ep, "--timeout", "200", "health", NULL);
    assert_int_equal(r.code, CLI_EXIT_UNREACHABLE);
    assert_non_null(strstr(r.err, "no answer in time"));
    assert_true(now_ms() - t0 < 3000);
    assert_int_equal(harness_nheld(&h), 1);
    harness_answer(&h, 0);
    harness_stop(&h);
}

static void client_posts_a_body(void **state)
{
    (void)state;
    harness h;
    http_server_options o;
    http_server_options_default(&o);
    harness_start(&h, &o, MODE_ECHO);
    cli_endpoint ep;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/base", h.port);
    assert_int_equal(cli_endpoint_parse(url, &ep, NULL), 0);
    http_header hs[] = {{"X-Amz-Target", "DynamoDB_20120810.ListTables"}};
    cli_response r;
    strata_err err;
    assert_int_equal(cli_http_request(&ep, "POST", "/x?q=1", hs, 1, "{}", 2, 2000, &r, &err), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "M=POST|P=/base/x|Q=q=1|"));
    assert_non_null(strstr(r.body, "T=DynamoDB_20120810.ListTables|"));
    assert_non_null(strstr(r.body, "L=2|B={}"));
    cli_response_free(&r);
    harness_stop(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(endpoint_parsing),        cmocka_unit_test(version_and_usage),
        cmocka_unit_test(health_ok_and_unhealthy), cmocka_unit_test(health_unreachable_and_timeout),
        cmocka_unit_test(client_posts_a_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
