#include "node/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The longest line of a configuration file, and the largest file, we accept. */
#define LINE_MAX_BYTES 8192
#define FILE_MAX_BYTES (1 << 20)

static const char *const key_names[CFG_KEY_COUNT] = {
    [CFG_NODE_ID] = "node_id",
    [CFG_AZ] = "az",
    [CFG_HOST_LABEL] = "host_label",
    [CFG_DATA_DIR] = "data_dir",
    [CFG_LISTEN] = "listen",
    [CFG_PEER_LISTEN] = "peer_listen",
    [CFG_ADVERTISE] = "advertise",
    [CFG_PEER_ADVERTISE] = "peer_advertise",
    [CFG_JOIN] = "join",
    [CFG_BOOTSTRAP] = "bootstrap",
    [CFG_BOOTSTRAP_EXPECT] = "bootstrap_expect",
    [CFG_REPLACE_AFTER] = "replace_after",
    [CFG_PEER_SECRET_FILE] = "peer_secret_file",
    [CFG_PEER_SECRET_OPTIONAL] = "peer_secret_optional",
    [CFG_INITIAL_PARTITIONS] = "initial_partitions",
    [CFG_THROTTLE] = "throttle",
    [CFG_PARTITION_MAX_RCU] = "partition_max_rcu",
    [CFG_PARTITION_MAX_WCU] = "partition_max_wcu",
    [CFG_SPLIT_SIZE] = "split_size_mb",
    [CFG_SPLIT_HEAT] = "split_heat",
    [CFG_BACKGROUND_CPU] = "background_cpu_pct",
    [CFG_LOG_HOLD_OPS] = "log_hold_ops",
    [CFG_MAX_CONNECTIONS] = "max_connections",
    [CFG_REGION] = "region",
    [CFG_LOG_LEVEL] = "log_level",
};

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *config_key_name(config_key k)
{
    assert(k >= 0 && k < CFG_KEY_COUNT);
    return key_names[k];
}

bool config_is_cluster_key(config_key k)
{
    switch (k) {
    case CFG_NODE_ID:
    case CFG_AZ:
    case CFG_HOST_LABEL:
    case CFG_PEER_LISTEN:
    case CFG_PEER_ADVERTISE:
    case CFG_JOIN:
    case CFG_BOOTSTRAP:
    case CFG_BOOTSTRAP_EXPECT:
    case CFG_REPLACE_AFTER:
    case CFG_PEER_SECRET_FILE:
    case CFG_PEER_SECRET_OPTIONAL:
        return true;
    default:
        return false;
    }
}

bool config_cluster_mode(const stratad_config *cfg)
{
    for (int k = 0; k < CFG_KEY_COUNT; k++)
        if (config_is_cluster_key((config_key)k) && cfg->source[k] != 0)
            return true;
    return false;
}

void config_cluster_keys_given(const stratad_config *cfg, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    for (int k = 0; k < CFG_KEY_COUNT; k++) {
        if (!config_is_cluster_key((config_key)k) || cfg->source[k] == 0)
            continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", key_names[k]);
        if (w < 0 || (size_t)w >= cap - n)
            return;
        n += (size_t)w;
    }
}

void config_usage(FILE *f)
{
    fprintf(f, "usage: stratad [--config FILE] [--data-dir DIR] [--listen HOST:PORT]\n"
               "               [--initial-partitions N] [--throttle true|false]\n"
               "               [--partition-max-rcu N] [--partition-max-wcu N]\n"
               "               [--split-size-mb N] [--split-heat SECONDS]\n"
               "               [--background-cpu-pct N] [--log-hold-ops N]\n"
               "               [--max-connections N]\n"
               "               [--log-level error|warn|info|debug]\n"
               "               [--region NAME] [--print-config] [--help]\n"
               "  cluster:     [--node-id N] [--az NAME] [--host-label NAME]\n"
               "               [--peer-listen HOST:PORT] [--advertise HOST:PORT]\n"
               "               [--peer-advertise HOST:PORT] [--join HOST:PORT,...] [--bootstrap]\n"
               "               [--bootstrap-expect N] [--replace-after SECONDS]\n"
               "               [--peer-secret-file FILE] [--peer-secret-optional true|false]\n"
               "Every flag is also a key of the --config file (node_id = 1); flags win.\n"
               "See deploy/strata.conf.sample.\n");
}

config_fd_plan config_plan_fds(uint64_t soft, uint64_t hard, uint32_t max_connections)
{
    config_fd_plan p = {.soft = soft, .max_connections = max_connections, .reduced = false};
    uint64_t need = (uint64_t)max_connections + CONFIG_FD_RESERVE;
    if (p.soft < need)
        p.soft = hard < need ? (hard > soft ? hard : soft) : need;
    if (p.soft >= need)
        return p;
    uint64_t room =
        p.soft >= 2 * (uint64_t)CONFIG_FD_RESERVE ? p.soft - CONFIG_FD_RESERVE : p.soft / 2;
    if (room >= max_connections)
        return p;
    p.max_connections = room == 0 ? 1 : (uint32_t)room;
    p.reduced = true;
    return p;
}

bool config_host_is_wildcard(const char *host)
{
    return host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
}

/* A host name or IPv4 literal: letters, digits, '.', '-', '_'. */
static bool host_name_ok(const char *h, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)h[i]) && h[i] != '.' && h[i] != '-' && h[i] != '_')
            return false;
    return true;
}

/* An IPv6 literal (inside brackets): hex digits, ':', '.', and a %zone. */
static bool host_v6_ok(const char *h, size_t len)
{
    if (len == 0 || memchr(h, ':', len) == NULL)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)h[i]) && h[i] != ':' && h[i] != '.' && h[i] != '%')
            return false;
    return true;
}

int config_parse_listen(const char *s, char *host, size_t host_cap, int *port)
{
    const char *h = s, *colon;
    size_t hlen;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        h = s + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
        if (!host_v6_ok(h, hlen))
            return -1;
    } else {
        colon = strchr(s, ':');
        if (colon == NULL || strchr(colon + 1, ':') != NULL) /* IPv6 needs brackets */
            return -1;
        hlen = (size_t)(colon - s);
        if (!host_name_ok(h, hlen))
            return -1;
        if (hlen == 0) {
            h = "0.0.0.0";
            hlen = strlen(h);
        }
    }
    if (hlen >= host_cap)
        return -1;
    const char *p = colon + 1;
    if (*p == '\0' || strlen(p) > 5)
        return -1;
    long v = 0;
    for (; *p != '\0'; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v > 65535)
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)v;
    return 0;
}

/* ---- values ---------------------------------------------------------------------------- */

/* Each parser fills `why` (a reason without the key's name) and returns -1 on a bad value. */

static int parse_name(const char *v, char *out, size_t cap, const char *extra, char *why,
                      size_t why_cap)
{
    size_t n = strlen(v);
    if (n == 0 || n >= cap) {
        snprintf(why, why_cap, "wants 1 to %zu characters", cap - 1);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)v[i]) && strchr(extra, v[i]) == NULL) {
            snprintf(why, why_cap, "character '%c' not allowed (letters, digits and \"%s\")",
                     isprint((unsigned char)v[i]) ? v[i] : '?', extra);
            return -1;
        }
    }
    memcpy(out, v, n + 1);
    return 0;
}

/* A path: 1 to cap - 1 bytes, no control characters; `what` names it in messages. */
static int parse_path(const char *v, char *out, size_t cap, const char *what, char *why,
                      size_t why_cap)
{
    size_t len = strlen(v);
    if (len == 0 || len >= cap) {
        snprintf(why, why_cap, "wants %s (1 to %zu bytes)", what, cap - 1);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (iscntrl((unsigned char)v[i])) {
            snprintf(why, why_cap, "control characters are not allowed");
            return -1;
        }
    }
    memcpy(out, v, len + 1);
    return 0;
}

static int parse_addr(const char *v, config_addr *a, bool dialable, char *why, size_t why_cap)
{
    config_addr t;
    if (config_parse_listen(v, t.host, sizeof t.host, &t.port) < 0) {
        snprintf(why, why_cap, "'%s' is not HOST:PORT (IPv6 as [ADDR]:PORT, port 0..65535)", v);
        return -1;
    }
    if (dialable && (config_host_is_wildcard(t.host) || v[0] == ':')) {
        snprintf(why, why_cap, "'%s' is a wildcard address; others need a real host to reach", v);
        return -1;
    }
    if (dialable && t.port == 0) {
        snprintf(why, why_cap, "'%s' has port 0; others need a real port", v);
        return -1;
    }
    *a = t;
    return 0;
}

static int parse_join(const char *v, stratad_config *cfg, char *why, size_t why_cap)
{
    config_addr list[CONFIG_JOIN_MAX];
    int n = 0;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        char item[300];
        if (len == 0) {
            snprintf(why, why_cap, "empty entry in the list (HOST:PORT,HOST:PORT,...)");
            return -1;
        }
        if (len >= sizeof item) {
            snprintf(why, why_cap, "entry %d is too long", n + 1);
            return -1;
        }
        if (n == CONFIG_JOIN_MAX) {
            snprintf(why, why_cap, "more than %d peers", CONFIG_JOIN_MAX);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_addr(item, &list[n], true, why, why_cap) < 0)
            return -1;
        for (int i = 0; i < n; i++) {
            if (strcmp(list[i].host, list[n].host) == 0 && list[i].port == list[n].port) {
                snprintf(why, why_cap, "'%s' is listed twice", item);
                return -1;
            }
        }
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    memcpy(cfg->join, list, sizeof list[0] * (size_t)n);
    cfg->join_count = n;
    return 0;
}

static int parse_bool(const char *v, bool *out, char *why, size_t why_cap)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    snprintf(why, why_cap, "'%s' is not true or false", v);
    return -1;
}

/* Strict decimal: digits only, within lo..hi. */
static int parse_uint(const char *v, uint64_t lo, uint64_t hi, uint64_t *out, char *why,
                      size_t why_cap)
{
    uint64_t x = 0;
    bool ok = v[0] != '\0';
    for (const char *p = v; ok && *p != '\0'; p++) {
        if (!isdigit((unsigned char)*p) || x > (UINT64_MAX - 9) / 10)
            ok = false;
        else
            x = x * 10 + (uint64_t)(*p - '0');
    }
    if (!ok || x < lo || x > hi) {
        snprintf(why, why_cap, "'%s' is not a number in %llu..%llu", v, (unsigned long long)lo,
                 (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int set_key(stratad_config *cfg, config_key k, const char *v, char *why, size_t why_cap)
{
    uint64_t n;
    switch (k) {
    case CFG_NODE_ID:
        if (parse_uint(v, 1, CONFIG_NODE_ID_MAX, &n, why, why_cap) < 0)
            return -1;
        cfg->node_id = n;
        return 0;
    case CFG_AZ:
        return parse_name(v, cfg->az, sizeof cfg->az, "._-", why, why_cap);
    case CFG_HOST_LABEL:
        return parse_name(v, cfg->host_label, sizeof cfg->host_label, "._-", why, why_cap);
    case CFG_DATA_DIR:
        return parse_path(v, cfg->data_dir, sizeof cfg->data_dir, "a directory", why, why_cap);
    case CFG_PEER_SECRET_FILE:
        return parse_path(v, cfg->peer_secret_file, sizeof cfg->peer_secret_file, "a file", why,
                          why_cap);
    case CFG_LISTEN:
        return parse_addr(v, &cfg->listen, false, why, why_cap);
    case CFG_PEER_LISTEN:
        return parse_addr(v, &cfg->peer_listen, false, why, why_cap);
    case CFG_ADVERTISE:
        return parse_addr(v, &cfg->advertise, true, why, why_cap);
    case CFG_PEER_ADVERTISE:
        return parse_addr(v, &cfg->peer_advertise, true, why, why_cap);
    case CFG_JOIN:
        return parse_join(v, cfg, why, why_cap);
    case CFG_BOOTSTRAP:
        return parse_bool(v, &cfg->bootstrap, why, why_cap);
    case CFG_PEER_SECRET_OPTIONAL:
        return parse_bool(v, &cfg->peer_secret_optional, why, why_cap);
    case CFG_BOOTSTRAP_EXPECT:
        if (parse_uint(v, 1, 5, &n, why, why_cap) < 0)
            return -1;
        cfg->bootstrap_expect = (int)n;
        return 0;
    case CFG_REPLACE_AFTER:
        if (parse_uint(v, 1, 604800, &n, why, why_cap) < 0)
            return -1;
        cfg->replace_after_s = (uint32_t)n;
        return 0;
    case CFG_INITIAL_PARTITIONS:
        if (parse_uint(v, 1, 256, &n, why, why_cap) < 0)
            return -1;
        cfg->initial_partitions = (int)n;
        return 0;
    case CFG_THROTTLE:
        return parse_bool(v, &cfg->throttle, why, why_cap);
    case CFG_PARTITION_MAX_RCU:
    case CFG_PARTITION_MAX_WCU:
        if (parse_uint(v, 1, 1000000, &n, why, why_cap) < 0)
            return -1;
        *(k == CFG_PARTITION_MAX_RCU ? &cfg->partition_max_rcu : &cfg->partition_max_wcu) =
            (uint32_t)n;
        return 0;
    case CFG_SPLIT_SIZE:
        if (parse_uint(v, 0, 16777216, &n, why, why_cap) < 0)
            return -1;
        cfg->split_size_mb = (uint32_t)n;
        return 0;
    case CFG_SPLIT_HEAT:
        if (parse_uint(v, 0, 86400, &n, why, why_cap) < 0)
            return -1;
        cfg->split_heat_s = (uint32_t)n;
        return 0;
    case CFG_BACKGROUND_CPU:
        if (parse_uint(v, 1, 100, &n, why, why_cap) < 0)
            return -1;
        cfg->background_cpu_pct = (uint32_t)n;
        return 0;
    case CFG_LOG_HOLD_OPS:
        if (parse_uint(v, 0, 1000000, &n, why, why_cap) < 0)
            return -1;
        cfg->log_hold_ops = (uint32_t)n;
        return 0;
    case CFG_MAX_CONNECTIONS:
        if (parse_uint(v, 1, 1000000, &n, why, why_cap) < 0)
            return -1;
        cfg->max_connections = (uint32_t)n;
        return 0;
    case CFG_REGION:
        return parse_name(v, cfg->region, sizeof cfg->region, "-", why, why_cap);
    case CFG_LOG_LEVEL:
        for (int i = 0; i < 4; i++) {
            if (strcmp(v, level_names[i]) == 0) {
                cfg->level = (log_level)i;
                return 0;
            }
        }
        snprintf(why, why_cap, "'%s' is not error, warn, info or debug", v);
        return -1;
    case CFG_KEY_COUNT:
        break;
    }
    assert(0 && "unknown key");
    return -1;
}

/* ---- the file ---------------------------------------------------------------------------- */

void config_defaults(stratad_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->listen.host, "127.0.0.1");
    cfg->listen.port = 8000;
    cfg->initial_partitions = 4;
    cfg->throttle = true;
    cfg->partition_max_rcu = 3000;
    cfg->partition_max_wcu = 1000;
    cfg->split_size_mb = 10240;
    cfg->split_heat_s = 5;
    cfg->background_cpu_pct = 20;
    cfg->log_hold_ops = 12;
    cfg->max_connections = 10000;
    cfg->bootstrap_expect = 3;
    cfg->replace_after_s = 300;
    cfg->level = LOG_INFO;
    strcpy(cfg->region, "us-east-1");
}

static int find_key(const char *name, size_t len)
{
    for (int k = 0; k < CFG_KEY_COUNT; k++)
        if (strlen(key_names[k]) == len && memcmp(key_names[k], name, len) == 0)
            return k;
    return -1;
}

/* Unquotes / trims the value part of a line into out; NULL on success, else the reason. */
static const char *line_value(const char *p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p < end && *p == '"') {
        for (p++;; p++) {
            if (p == end)
                return "unterminated quoted value";
            if (*p == '"')
                break;
            if (*p == '\\') {
                if (p + 1 == end || (p[1] != '"' && p[1] != '\\'))
                    return "only \\\" and \\\\ escapes are allowed in a quoted value";
                p++;
            }
            if (n + 1 >= cap)
                return "value too long";
            out[n++] = *p;
        }
        for (p++; p < end && (*p == ' ' || *p == '\t'); p++)
            ;
        if (p < end && *p != '#')
            return "text after the closing quote";
    } else {
        const char *hash = memchr(p, '#', (size_t)(end - p));
        const char *stop = hash ? hash : end;
        while (stop > p && (stop[-1] == ' ' || stop[-1] == '\t'))
            stop--;
        if (stop - p == 0)
            return "empty value (quote it as \"\" if you mean it)";
        if ((size_t)(stop - p) >= cap)
            return "value too long";
        n = (size_t)(stop - p);
        memcpy(out, p, n);
        if (memchr(out, '"', n) != NULL)
            return "a quote inside an unquoted value";
    }
    out[n] = '\0';
    return NULL;
}

int config_apply_text(stratad_config *cfg, const char *name, const char *text, size_t len,
                      strata_err *err)
{
    int line_of[CFG_KEY_COUNT] = {0};
    char value[LINE_MAX_BYTES];
    char why[512];
    if (len == 0) /* text may be NULL then */
        return 0;
    const char *p = text, *end = text + len;
    for (int line = 1; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *next = nl ? nl + 1 : end;
        size_t llen = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (llen > 0 && p[llen - 1] == '\r')
            llen--;
        if (llen >= LINE_MAX_BYTES)
            return strata_err_set(err, ERR_VALIDATION, "%s:%d: line longer than %d bytes", name,
                                  line, LINE_MAX_BYTES);
        const char *eol = p + llen;
        if (memchr(p, '\0', llen) != NULL)
            return strata_err_set(err, ERR_VALIDATION, "%s:%d: NUL byte in the line", name, line);
        const char *s = p;
        while (s < eol && isspace((unsigned char)*s))
            s++;
        if (s == eol || *s == '#') {
            p = next;
            continue;
        }
        const char *eq = memchr(s, '=', (size_t)(eol - s));
        if (eq == NULL)
            return strata_err_set(err, ERR_VALIDATION, "%s:%d: expected 'key = value', got '%.*s'",
                                  name, line, (int)(eol - s > 60 ? 60 : eol - s), s);
        const char *kend = eq;
        while (kend > s && isspace((unsigned char)kend[-1]))
            kend--;
        int k = find_key(s, (size_t)(kend - s));
        if (k < 0)
            return strata_err_set(err, ERR_VALIDATION, "%s:%d: unknown key '%.*s'", name, line,
                                  (int)(kend - s > 60 ? 60 : kend - s), s);
        if (line_of[k] != 0)
            return strata_err_set(err, ERR_VALIDATION,
                                  "%s:%d: key '%s' repeated (first set at line %d)", name, line,
                                  key_names[k], line_of[k]);
        line_of[k] = line;
        const char *bad = line_value(eq + 1, eol, value, sizeof value);
        if (bad != NULL)
            return strata_err_set(err, ERR_VALIDATION, "%s:%d: key '%s': %s", name, line,
                                  key_names[k], bad);
        if (set_key(cfg, (config_key)k, value, why, sizeof why) < 0)
            return strata_err_set(err, ERR_VALIDATION, "%s:%d: key '%s': %s", name, line,
                                  key_names[k], why);
        cfg->source[k] = line;
        p = next;
    }
    return 0;
}

void config_peer_secrets_wipe(config_peer_secrets *s)
{
    explicit_bzero(s, sizeof *s);
}

/* Reads `path`, a regular file only its owner may read, into buf (cap bytes, one more
 * than the file may hold): *n bytes, cap when the file is longer than it may be. */
static int read_secret_file(const char *path, uint8_t *buf, size_t cap, size_t *n, strata_err *err)
{
    *n = 0;
    FILE *f = fopen(path, "rbe");
    if (f == NULL)
        return strata_err_set(err, ERR_IO, "peer secret file %s: %s", path, strerror(errno));
    setvbuf(f, NULL, _IONBF, 0); /* no stdio buffer left holding the secret */
    struct stat st;
    int rc = 0;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        rc = strata_err_set(err, ERR_VALIDATION, "peer secret file %s: not a regular file", path);
    else if ((st.st_mode & 077) != 0)
        rc = strata_err_set(err, ERR_VALIDATION,
                            "peer secret file %s: its group or others may read or write it "
                            "(mode %04o); chmod 600 it",
                            path, (unsigned)(st.st_mode & 07777));
    else if ((*n = fread(buf, 1, cap, f)) < cap && ferror(f))
        rc = strata_err_set(err, ERR_IO, "peer secret file %s: cannot read it", path);
    fclose(f);
    return rc;
}

/* Splits the file's text into out's secrets, a line each (see config.h). */
static int split_secrets(const char *path, const uint8_t *text, size_t n, config_peer_secrets *out,
                         strata_err *err)
{
    size_t line = 0;
    for (size_t at = 0; at < n;) {
        const uint8_t *nl = memchr(text + at, '\n', n - at);
        size_t end = nl != NULL ? (size_t)(nl - text) : n, len = end - at;
        line++;
        while (len > 0 && isspace(text[at + len - 1]))
            len--;
        if (len > 0 && out->count == CONFIG_PEER_SECRETS)
            return strata_err_set(err, ERR_VALIDATION,
                                  "peer secret file %s: line %zu: at most %d secrets (the "
                                  "cluster's, and the next one while it is replaced)",
                                  path, line, CONFIG_PEER_SECRETS);
        if (len > 0 && (len < CONFIG_PEER_SECRET_MIN || len > CONFIG_PEER_SECRET_MAX))
            return strata_err_set(err, ERR_VALIDATION,
                                  "peer secret file %s: line %zu: a secret has %d to %d bytes "
                                  "(trailing whitespace aside), not %zu",
                                  path, line, CONFIG_PEER_SECRET_MIN, CONFIG_PEER_SECRET_MAX, len);
        if (len > 0) {
            memcpy(out->key[out->count], text + at, len);
            out->len[out->count++] = len;
        }
        at = end + 1;
    }
    if (out->count == 0)
        return strata_err_set(err, ERR_VALIDATION, "peer secret file %s: no secret in it", path);
    return 0;
}

int config_read_peer_secrets(const char *path, config_peer_secrets *out, strata_err *err)
{
    /* Two of the longest secrets, their newlines and some whitespace; a file longer than
     * that holds more than two secrets can. One byte more tells it. */
    static const size_t most = CONFIG_PEER_SECRETS * (CONFIG_PEER_SECRET_MAX + 1) + 64;
    uint8_t *buf = malloc(most + 1);
    memset(out, 0, sizeof *out);
    if (buf == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    size_t n;
    int rc = read_secret_file(path, buf, most + 1, &n, err);
    if (rc == 0 && n > most)
        rc = strata_err_set(err, ERR_VALIDATION,
                            "peer secret file %s: over %zu bytes, more than %d secrets hold", path,
                            most, CONFIG_PEER_SECRETS);
    if (rc == 0)
        rc = split_secrets(path, buf, n, out, err);
    if (rc < 0)
        config_peer_secrets_wipe(out);
    explicit_bzero(buf, most + 1);
    free(buf);
    return rc;
}

int config_apply_file(stratad_config *cfg, const char *path, strata_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return strata_err_set(err, ERR_VALIDATION, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(FILE_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        return strata_err_set(err, ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, FILE_MAX_BYTES + 1, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    int rc;
    if (rerr != 0)
        rc = strata_err_set(err, ERR_VALIDATION, "%s: cannot read: %s", path, strerror(rerr));
    else if (n > FILE_MAX_BYTES)
        rc = strata_err_set(err, ERR_VALIDATION, "%s: larger than %d bytes", path, FILE_MAX_BYTES);
    else
        rc = config_apply_text(cfg, path, buf, n, err);
    free(buf);
    if (rc == 0 && strlen(path) < sizeof cfg->config_file)
        strcpy(cfg->config_file, path);
    return rc;
}

/* ---- validation ------------------------------------------------------------------------- */

/* "FILE:LINE: key 'k'", "--flag" or "default 'k'": where key k's value came from. */
static void where(const stratad_config *cfg, config_key k, char *buf, size_t cap)
{
    int src = cfg->source[k];
    if (src > 0) {
        snprintf(buf, cap, "%s:%d: key '%s'", cfg->config_file, src, key_names[k]);
    } else if (src < 0) {
        snprintf(buf, cap, "--");
        for (size_t i = 0; key_names[k][i] != '\0' && i + 3 < cap; i++) {
            buf[i + 2] = key_names[k][i] == '_' ? '-' : key_names[k][i];
            buf[i + 3] = '\0';
        }
    } else {
        snprintf(buf, cap, "default '%s'", key_names[k]);
    }
}

static int missing(const stratad_config *cfg, config_key k, const char *because, strata_err *err)
{
    char flag[64] = "--";
    for (size_t i = 0; key_names[k][i] != '\0'; i++) {
        flag[i + 2] = key_names[k][i] == '_' ? '-' : key_names[k][i];
        flag[i + 3] = '\0';
    }
    return strata_err_set(err, ERR_VALIDATION, "%s: missing required key '%s' (or %s)%s%s",
                          cfg->config_file[0] ? cfg->config_file : "command line", key_names[k],
                          flag, because[0] ? ": " : "", because);
}

/* The advertise address: given, or the listen one when that is dialable. */
static int resolve_advertise(stratad_config *cfg, config_key adv_key, config_key listen_key,
                             config_addr *adv, const config_addr *listen, bool required,
                             strata_err *err)
{
    if (cfg->source[adv_key] != 0 || listen->host[0] == '\0')
        return 0;
    bool dialable = !config_host_is_wildcard(listen->host) && listen->port != 0;
    if (!dialable && required) {
        char w[4200];
        where(cfg, listen_key, w, sizeof w);
        return strata_err_set(err, ERR_VALIDATION,
                              "%s: '%s:%d' is a wildcard address or port 0, so key '%s' (--%s) "
                              "is required: the address other nodes and clients use",
                              w, listen->host, listen->port, key_names[adv_key],
                              adv_key == CFG_ADVERTISE ? "advertise" : "peer-advertise");
    }
    /* Single node on a wildcard or port 0: nothing to advertise; stratad reports the
     * address it bound. */
    if (dialable)
        *adv = *listen;
    return 0;
}

int config_validate(stratad_config *cfg, strata_err *err)
{
    if (cfg->data_dir[0] == '\0')
        return missing(cfg, CFG_DATA_DIR, "", err);
    bool cluster = config_cluster_mode(cfg);
    if (cluster) {
        static const char because[] = "cluster settings are given";
        if (cfg->node_id == 0)
            return missing(cfg, CFG_NODE_ID, because, err);
        if (cfg->az[0] == '\0')
            return missing(cfg, CFG_AZ, because, err);
        if (cfg->peer_listen.host[0] == '\0')
            return missing(cfg, CFG_PEER_LISTEN, because, err);
        if (cfg->bootstrap && cfg->join_count > 0) {
            char w1[4200], w2[4200];
            where(cfg, CFG_BOOTSTRAP, w1, sizeof w1);
            where(cfg, CFG_JOIN, w2, sizeof w2);
            return strata_err_set(err, ERR_VALIDATION,
                                  "%s: bootstrap and join exclude each other (join set by %s): "
                                  "bootstrap starts a new cluster, join enters an existing one",
                                  w1, w2);
        }
        if (!cfg->bootstrap && cfg->join_count == 0)
            return missing(cfg, CFG_JOIN,
                           "cluster settings are given; set join to existing "
                           "nodes' peer addresses, or bootstrap = true on the "
                           "first node",
                           err);
        if (cfg->peer_secret_optional && cfg->peer_secret_file[0] == '\0')
            return missing(cfg, CFG_PEER_SECRET_FILE,
                           "peer_secret_optional is true: it takes peers without the "
                           "secret besides those with it",
                           err);
    }
    if (resolve_advertise(cfg, CFG_ADVERTISE, CFG_LISTEN, &cfg->advertise, &cfg->listen, cluster,
                          err) < 0)
        return -1;
    if (resolve_advertise(cfg, CFG_PEER_ADVERTISE, CFG_PEER_LISTEN, &cfg->peer_advertise,
                          &cfg->peer_listen, cluster, err) < 0)
        return -1;
    if (cluster) {
        for (int i = 0; i < cfg->join_count; i++) {
            if (strcmp(cfg->join[i].host, cfg->peer_advertise.host) == 0 &&
                cfg->join[i].port == cfg->peer_advertise.port) {
                char w[4200];
                where(cfg, CFG_JOIN, w, sizeof w);
                return strata_err_set(err, ERR_VALIDATION,
                                      "%s: lists this node's own peer address; join names the "
                                      "other nodes",
                                      w);
            }
        }
    }
    if (cfg->host_label[0] == '\0') {
        char h[256] = "";
        char why[256];
        /* An unusual hostname is not fatal: the label only tells machines apart. */
        if (gethostname(h, sizeof h - 1) != 0 ||
            parse_name(h, cfg->host_label, sizeof cfg->host_label, "._-", why, sizeof why) < 0)
            strcpy(cfg->host_label, "localhost");
    }
    return 0;
}

/* ---- flags ------------------------------------------------------------------------------- */

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

/* Applies argv's flags over cfg; the --config value is skipped (read earlier). */
static int apply_flags(int argc, char **argv, stratad_config *cfg, strata_err *err)
{
    char why[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool m;
        const char *v;
        if (strcmp(a, "--print-config") == 0) {
            cfg->print_config = true;
            continue;
        }
        if ((v = flag_value(argc, argv, &i, "--config", &m)) != NULL || m)
            continue;
        /* --bootstrap alone means true; a value only with '='. */
        if (strcmp(a, "--bootstrap") == 0) {
            cfg->bootstrap = true;
            cfg->source[CFG_BOOTSTRAP] = -1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return strata_err_set(err, ERR_VALIDATION, "unknown argument '%s'", a);
        const char *name = a + 2;
        size_t nlen = strcspn(name, "=");
        char key[64];
        if (nlen >= sizeof key)
            return strata_err_set(err, ERR_VALIDATION, "unknown flag '%.*s'", 64, a);
        for (size_t j = 0; j < nlen; j++)
            key[j] = name[j] == '-' ? '_' : name[j];
        int k = memchr(name, '_', nlen) ? -1 : find_key(key, nlen);
        if (k < 0)
            return strata_err_set(err, ERR_VALIDATION, "unknown flag '--%.*s'", (int)nlen, name);
        char flag[70];
        snprintf(flag, sizeof flag, "--%.*s", (int)nlen, name);
        v = flag_value(argc, argv, &i, flag, &m);
        if (v == NULL)
            return strata_err_set(err, ERR_VALIDATION, "%s wants a value", flag);
        if (set_key(cfg, (config_key)k, v, why, sizeof why) < 0)
            return strata_err_set(err, ERR_VALIDATION, "%s: %s", flag, why);
        cfg->source[k] = -1;
    }
    return 0;
}

int config_parse(int argc, char **argv, stratad_config *cfg, strata_err *err)
{
    config_defaults(cfg);
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        bool m;
        const char *v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cfg->help = true;
            return 0;
        }
        if ((v = flag_value(argc, argv, &i, "--config", &m)) != NULL || m) {
            if (v == NULL || v[0] == '\0')
                return strata_err_set(err, ERR_VALIDATION, "--config wants a file");
            file = v;
        }
    }
    if (file != NULL && config_apply_file(cfg, file, err) < 0)
        return -1;
    if (apply_flags(argc, argv, cfg, err) < 0)
        return -1;
    return config_validate(cfg, err);
}

/* ---- printing ---------------------------------------------------------------------------- */

static void print_addr(FILE *f, const config_addr *a)
{
    if (strchr(a->host, ':') != NULL)
        fprintf(f, "[%s]:%d", a->host, a->port);
    else
        fprintf(f, "%s:%d", a->host, a->port);
}

static void print_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void print_key(FILE *f, const stratad_config *cfg, config_key k)
{
    bool unset = false;
    switch (k) {
    case CFG_NODE_ID:
        unset = cfg->node_id == 0;
        break;
    case CFG_AZ:
        unset = cfg->az[0] == '\0';
        break;
    case CFG_PEER_LISTEN:
        unset = cfg->peer_listen.host[0] == '\0';
        break;
    case CFG_PEER_ADVERTISE:
        unset = cfg->peer_advertise.host[0] == '\0';
        break;
    case CFG_ADVERTISE:
        unset = cfg->advertise.host[0] == '\0';
        break;
    case CFG_JOIN:
        unset = cfg->join_count == 0;
        break;
    case CFG_PEER_SECRET_FILE:
        unset = cfg->peer_secret_file[0] == '\0';
        break;
    default:
        break;
    }
    /* A defaulted host label or a false bootstrap or peer_secret_optional are printed as
     * comments, so the printed file does not turn a single node into a cluster one when
     * read back. */
    if (k == CFG_HOST_LABEL && cfg->source[k] == 0) {
        fprintf(f, "# %s = \"%s\" (default: the hostname)\n", key_names[k], cfg->host_label);
        return;
    }
    if ((k == CFG_BOOTSTRAP && !cfg->bootstrap) ||
        (k == CFG_PEER_SECRET_OPTIONAL && !cfg->peer_secret_optional)) {
        fprintf(f, "# %s = false\n", key_names[k]);
        return;
    }
    if (k == CFG_BOOTSTRAP_EXPECT && cfg->source[k] == 0) {
        fprintf(f, "# %s = %d (default)\n", key_names[k], cfg->bootstrap_expect);
        return;
    }
    if (k == CFG_REPLACE_AFTER && cfg->source[k] == 0) {
        fprintf(f, "# %s = %u (default)\n", key_names[k], cfg->replace_after_s);
        return;
    }
    if (unset) {
        fprintf(f, "# %s = (not set)\n", key_names[k]);
        return;
    }
    fprintf(f, "%s = ", key_names[k]);
    switch (k) {
    case CFG_NODE_ID:
        fprintf(f, "%llu", (unsigned long long)cfg->node_id);
        break;
    case CFG_AZ:
        print_quoted(f, cfg->az);
        break;
    case CFG_HOST_LABEL:
        print_quoted(f, cfg->host_label);
        break;
    case CFG_DATA_DIR:
        print_quoted(f, cfg->data_dir);
        break;
    case CFG_LISTEN:
        print_addr(f, &cfg->listen);
        break;
    case CFG_PEER_LISTEN:
        print_addr(f, &cfg->peer_listen);
        break;
    case CFG_ADVERTISE:
        print_addr(f, &cfg->advertise);
        break;
    case CFG_PEER_ADVERTISE:
        print_addr(f, &cfg->peer_advertise);
        break;
    case CFG_JOIN:
        for (int i = 0; i < cfg->join_count; i++) {
            if (i > 0)
                fputs(", ", f);
            print_addr(f, &cfg->join[i]);
        }
        break;
    case CFG_BOOTSTRAP:
        fputs(cfg->bootstrap ? "true" : "false", f);
        break;
    case CFG_BOOTSTRAP_EXPECT:
        fprintf(f, "%d", cfg->bootstrap_expect);
        break;
    case CFG_REPLACE_AFTER:
        fprintf(f, "%u", cfg->replace_after_s);
        break;
    case CFG_PEER_SECRET_FILE:
        print_quoted(f, cfg->peer_secret_file);
        break;
    case CFG_PEER_SECRET_OPTIONAL:
        fputs(cfg->peer_secret_optional ? "true" : "false", f);
        break;
    case CFG_INITIAL_PARTITIONS:
        fprintf(f, "%d", cfg->initial_partitions);
        break;
    case CFG_THROTTLE:
        fputs(cfg->throttle ? "true" : "false", f);
        break;
    case CFG_PARTITION_MAX_RCU:
        fprintf(f, "%u", cfg->partition_max_rcu);
        break;
    case CFG_PARTITION_MAX_WCU:
        fprintf(f, "%u", cfg->partition_max_wcu);
        break;
    case CFG_SPLIT_SIZE:
        fprintf(f, "%u", cfg->split_size_mb);
        break;
    case CFG_SPLIT_HEAT:
        fprintf(f, "%u", cfg->split_heat_s);
        break;
    case CFG_BACKGROUND_CPU:
        fprintf(f, "%u", cfg->background_cpu_pct);
        break;
    case CFG_LOG_HOLD_OPS:
        fprintf(f, "%u", cfg->log_hold_ops);
        break;
    case CFG_MAX_CONNECTIONS:
        fprintf(f, "%u", cfg->max_connections);
        break;
    case CFG_REGION:
        print_quoted(f, cfg->region);
        break;
    case CFG_LOG_LEVEL:
        fputs(level_names[cfg->level], f);
        break;
    case CFG_KEY_COUNT:
        assert(0);
    }
    fputc('\n', f);
}

void config_print(const stratad_config *cfg, FILE *f)
{
    if (cfg->config_file[0])
        fprintf(f, "# stratad effective configuration (file %s, then flags)\n", cfg->config_file);
    else
        fprintf(f, "# stratad effective configuration (flags and defaults)\n");
    for (int k = 0; k < CFG_KEY_COUNT; k++)
        print_key(f, cfg, (config_key)k);
    if (config_cluster_mode(cfg))
        fprintf(f, "# a cluster node (cluster settings are given)\n");
}
