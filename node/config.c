#include "node/config.h"

#include <stdlib.h>
#include <string.h>

void config_usage(FILE *f)
{
    fprintf(f, "usage: stratad --data-dir DIR [--listen HOST:PORT] [--initial-partitions N]\n"
               "               [--log-level error|warn|info|debug] [--region NAME]\n");
}

int config_parse_listen(const char *s, char *host, size_t host_cap, int *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL)
        return -1;
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0) {
        h = "0.0.0.0";
        hlen = strlen(h);
    }
    if (hlen >= host_cap)
        return -1;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p < 0 || p > 65535)
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)p;
    return 0;
}

/* The value of flag `name` at argv[*i] ("--name value" or "--name=value"), or NULL. */
static const char *flag_value(int argc, char **argv, int *i, const char *name, bool *matched)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    *matched = false;
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=') {
        *matched = true;
        return a + n + 1;
    }
    if (a[n] != '\0')
        return NULL;
    *matched = true;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

int config_parse(int argc, char **argv, stratad_config *cfg, strata_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->host, "127.0.0.1");
    cfg->port = 8000;
    cfg->initial_partitions = 4;
    cfg->level = LOG_INFO;
    strcpy(cfg->region, "us-east-1");
    for (int i = 1; i < argc; i++) {
        bool m;
        const char *v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cfg->help = 1;
            return 0;
        }
        if ((v = flag_value(argc, argv, &i, "--listen", &m)) != NULL || m) {
            if (v == NULL || config_parse_listen(v, cfg->host, sizeof cfg->host, &cfg->port) < 0)
                return strata_err_set(err, ERR_VALIDATION, "--listen wants HOST:PORT");
        } else if ((v = flag_value(argc, argv, &i, "--data-dir", &m)) != NULL || m) {
            if (v == NULL || v[0] == '\0' || strlen(v) >= sizeof cfg->data_dir)
                return strata_err_set(err, ERR_VALIDATION, "--data-dir wants a directory");
            strcpy(cfg->data_dir, v);
        } else if ((v = flag_value(argc, argv, &i, "--initial-partitions", &m)) != NULL || m) {
            char *end = NULL;
            long n = v ? strtol(v, &end, 10) : 0;
            if (v == NULL || *end != '\0' || n < 1 || n > 256)
                return strata_err_set(err, ERR_VALIDATION,
                                      "--initial-partitions wants a number in 1..256");
            cfg->initial_partitions = (int)n;
        } else if ((v = flag_value(argc, argv, &i, "--log-level", &m)) != NULL || m) {
            static const char *const names[] = {"error", "warn", "info", "debug"};
            int found = -1;
            for (int k = 0; v != NULL && k < 4; k++)
                if (strcmp(v, names[k]) == 0)
                    found = k;
            if (found < 0)
                return strata_err_set(err, ERR_VALIDATION,
                                      "--log-level wants error, warn, info or debug");
            cfg->level = (log_level)found;
        } else if ((v = flag_value(argc, argv, &i, "--region", &m)) != NULL || m) {
            if (v == NULL || v[0] == '\0' || strlen(v) >= sizeof cfg->region)
                return strata_err_set(err, ERR_VALIDATION, "--region wants a name");
            strcpy(cfg->region, v);
        } else {
            return strata_err_set(err, ERR_VALIDATION, "unknown argument '%s'", argv[i]);
        }
    }
    if (cfg->data_dir[0] == '\0')
        return strata_err_set(err, ERR_VALIDATION, "--data-dir is required");
    return 0;
}
