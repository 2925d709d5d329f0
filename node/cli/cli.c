/* The `strata` command-line tool: argument parsing and commands (see cli.h). */
#include "node/cli/cli.h"

#include <stdlib.h>
#include <string.h>

#include "node/cli/client.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

#define DEFAULT_ENDPOINT   "http://127.0.0.1:8000"
#define DEFAULT_TIMEOUT_MS 5000
#define BODY_ECHO_MAX      200

typedef struct {
    const char *endpoint;
    int timeout_ms;
    const char *command;
} cli_args;

static void usage(FILE *f)
{
    fprintf(f, "usage: strata [--endpoint URL] [--timeout MS] COMMAND\n"
               "\n"
               "commands:\n"
               "  health    check that the node answers (GET /); prints ok\n"
               "  version   print the version of this tool\n"
               "\n"
               "The endpoint defaults to $STRATA_ENDPOINT, else " DEFAULT_ENDPOINT ".\n"
               "Exit codes: 0 ok, 1 unhealthy, 2 unreachable, 64 usage error.\n");
}

/* Matches "--name VALUE" or "--name=VALUE"; advances *i past what it used. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] == '\0' && *i + 1 < argc) {
        (*i)++;
        return argv[*i];
    }
    return NULL;
}

static int parse_args(int argc, char **argv, cli_args *args, FILE *errout)
{
    const char *env = getenv("STRATA_ENDPOINT");
    args->endpoint = env && env[0] ? env : DEFAULT_ENDPOINT;
    args->timeout_ms = DEFAULT_TIMEOUT_MS;
    args->command = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            args->command = "help";
        } else if ((v = option_value(argc, argv, &i, "--endpoint")) != NULL) {
            args->endpoint = v;
        } else if ((v = option_value(argc, argv, &i, "--timeout")) != NULL) {
            char *end;
            long ms = strtol(v, &end, 10);
            if (*end != '\0' || ms <= 0 || ms > 3600 * 1000) {
                fprintf(errout, "strata: bad --timeout %s (milliseconds)\n", v);
                return -1;
            }
            args->timeout_ms = (int)ms;
        } else if (argv[i][0] == '-') {
            fprintf(errout, "strata: unknown option %s\n", argv[i]);
            return -1;
        } else if (args->command == NULL) {
            args->command = argv[i];
        } else {
            fprintf(errout, "strata: unexpected argument %s\n", argv[i]);
            return -1;
        }
    }
    if (args->command == NULL) {
        fprintf(errout, "strata: no command\n");
        return -1;
    }
    return 0;
}

static int cmd_health(const cli_args *args, FILE *out, FILE *errout)
{
    cli_endpoint ep;
    strata_err err;
    if (cli_endpoint_parse(args->endpoint, &ep, &err) != 0) {
        fprintf(errout, "strata: %s\n", err.msg);
        return CLI_EXIT_USAGE;
    }
    cli_response r;
    if (cli_http_request(&ep, "GET", "/", NULL, 0, NULL, 0, args->timeout_ms, &r, &err) != 0) {
        fprintf(errout, "unreachable: %s: %s\n", args->endpoint, err.msg);
        return CLI_EXIT_UNREACHABLE;
    }
    int code = CLI_EXIT_OK;
    if (r.status >= 200 && r.status < 300) {
        fprintf(out, "ok\n");
    } else {
        fprintf(out, "unhealthy: HTTP %d %s: %.*s\n", r.status, http_status_reason(r.status),
                BODY_ECHO_MAX, r.body);
        code = CLI_EXIT_UNHEALTHY;
    }
    cli_response_free(&r);
    return code;
}

int strata_cli_main(int argc, char **argv, FILE *out, FILE *errout)
{
    cli_args args;
    if (parse_args(argc, argv, &args, errout) != 0) {
        usage(errout);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(args.command, "help") == 0) {
        usage(out);
        return CLI_EXIT_OK;
    }
    if (strcmp(args.command, "version") == 0) {
        fprintf(out, "strata %s\n", STRATA_VERSION);
        return CLI_EXIT_OK;
    }
    if (strcmp(args.command, "health") == 0)
        return cmd_health(&args, out, errout);
    fprintf(errout, "strata: unknown command %s\n", args.command);
    usage(errout);
    return CLI_EXIT_USAGE;
}
