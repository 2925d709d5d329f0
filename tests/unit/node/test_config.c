/* Unit tests of node/config: stratad's configuration file, flags and validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "node/config.h"

/* config_parse over "stratad" and the NULL-terminated arguments. */
static int parse_args(stratad_config *cfg, strata_err *err, ...)
{
    char *argv[40] = {"stratad"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *)) != NULL;) {
        assert_true(argc < 40);
        argv[argc++] = a;
    }
    va_end(ap);
    return config_parse(argc, argv, cfg, err);
}
#define parse(cfg, err, ...) parse_args(cfg, err, __VA_ARGS__, (char *)NULL)

/* Defaults, then `text` as file "t.conf", then validation. */
static int load(stratad_config *cfg, strata_err *err, const char *text)
{
    config_defaults(cfg);
    strcpy(cfg->config_file, "t.conf");
    if (config_apply_text(cfg, "t.conf", text, strlen(text), err) < 0)
        return -1;
    return config_validate(cfg, err);
}

/* Writes `text` to a fresh temporary file; its path in `path` (caller unlinks). */
static void write_temp(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/strata_test_config_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
}

#define CLUSTER_BASE                                                                               \
    "data_dir = /var/lib/strata\n"                                                                 \
    "node_id = 7\n"                                                                                \
    "az = az-1\n"                                                                                  \
    "peer_listen = 10.0.0.1:7000\n"

static void test_defaults(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    assert_int_equal(parse(&c, &err, "--data-dir", "/tmp/x"), 0);
    assert_string_equal(c.listen.host, "127.0.0.1");
    assert_int_equal(c.listen.port, 8000);
    assert_string_equal(c.advertise.host, "127.0.0.1"); /* dialable listen is advertised */
    assert_int_equal(c.advertise.port, 8000);
    assert_int_equal(c.initial_partitions, 4);
    assert_int_equal(c.level, LOG_INFO);
    assert_string_equal(c.data_dir, "/tmp/x");
    assert_string_equal(c.region, "us-east-1");
    assert_int_equal(c.node_id, 0);
    assert_string_equal(c.az, "");
    assert_string_equal(c.peer_listen.host, "");
    assert_int_equal(c.join_count, 0);
    assert_false(c.bootstrap);
    assert_false(config_cluster_mode(&c));
    assert_true(c.host_label[0] != '\0'); /* the hostname */
    assert_int_equal(c.source[CFG_DATA_DIR], -1);
    assert_int_equal(c.source[CFG_LISTEN], 0);
}

static void test_flags(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    assert_int_equal(parse(&c, &err, "--listen", "0.0.0.0:0", "--data-dir=/d",
                           "--initial-partitions", "8", "--log-level=debug", "--region=eu-west-1"),
                     0);
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(c.listen.port, 0);
    assert_string_equal(c.advertise.host, ""); /* single node: nothing dialable to advertise */
    assert_int_equal(c.initial_partitions, 8);
    assert_true(c.throttle); /* the default */
    assert_int_equal(c.level, LOG_DEBUG);
    assert_string_equal(c.region, "eu-west-1");
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--throttle", "false"), 0);
    assert_false(c.throttle);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--throttle=maybe"), -1);
    /* Splits and ceilings: DynamoDB's figures by default, 0 turns a split kind off, and
     * they do not make a node a cluster node. */
    assert_int_equal(c.partition_max_rcu, 3000);
    assert_int_equal(c.partition_max_wcu, 1000);
    assert_int_equal(c.split_size_mb, 10240);
    assert_int_equal(c.split_heat_s, 5);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--partition-max-wcu", "20",
                           "--partition-max-rcu=60", "--split-size-mb", "0", "--split-heat=0"),
                     0);
    assert_int_equal(c.partition_max_wcu, 20);
    assert_int_equal(c.partition_max_rcu, 60);
    assert_int_equal(c.split_size_mb, 0);
    assert_int_equal(c.split_heat_s, 0);
    assert_false(config_cluster_mode(&c));
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--partition-max-wcu", "0"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--partition-max-rcu", "1000001"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--split-heat", "86401"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--split-size-mb", "16777217"), -1);
    /* Engine pacing: a share of one CPU. */
    assert_int_equal(c.background_cpu_pct, 20);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--background-cpu-pct", "100"), 0);
    assert_int_equal(c.background_cpu_pct, 100);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--background-cpu-pct", "0"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--background-cpu-pct", "101"), -1);
    /* The log's hold under load: 0 turns it off. */
    assert_int_equal(c.log_hold_ops, 12);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--log-hold-ops", "0"), 0);
    assert_int_equal(c.log_hold_ops, 0);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--log-hold-ops=1000000"), 0);
    assert_int_equal(c.log_hold_ops, 1000000);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--log-hold-ops", "1000001"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--log-hold-ops", "-1"), -1);
    /* Client connections. */
    assert_int_equal(c.max_connections, 10000);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--max-connections=64"), 0);
    assert_int_equal(c.max_connections, 64);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--max-connections", "0"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir=/d", "--max-connections", "1000001"), -1);
    assert_int_equal(parse(&c, &err, "--listen=[::1]:9000", "--data-dir", "d"), 0);
    assert_string_equal(c.listen.host, "::1");
    assert_int_equal(c.listen.port, 9000);
    assert_int_equal(parse(&c, &err, "--listen=:9000", "--data-dir", "d"), 0);
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(parse(&c, &err, "--help"), 0);
    assert_true(c.help);
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--print-config"), 0);
    assert_true(c.print_config);

    /* Every cluster flag. */
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--node-id", "9223372036854775808",
                           "--az=eu-1a", "--host-label", "rack4.box7", "--listen", "0.0.0.0:8000",
                           "--advertise", "db1.example:8000", "--peer-listen=[::]:7000",
                           "--peer-advertise", "[fd00::1]:7000", "--join=db2:7000, db3:7000"),
                     0);
    assert_int_equal(c.node_id, CONFIG_NODE_ID_MAX);
    assert_string_equal(c.az, "eu-1a");
    assert_string_equal(c.host_label, "rack4.box7");
    assert_string_equal(c.advertise.host, "db1.example");
    assert_string_equal(c.peer_listen.host, "::");
    assert_string_equal(c.peer_advertise.host, "fd00::1");
    assert_int_equal(c.peer_advertise.port, 7000);
    assert_int_equal(c.join_count, 2);
    assert_string_equal(c.join[0].host, "db2");
    assert_string_equal(c.join[1].host, "db3");
    assert_int_equal(c.join[1].port, 7000);
    assert_false(c.bootstrap);
    assert_true(config_cluster_mode(&c));

    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--node-id", "1", "--az", "a",
                           "--peer-listen", "10.0.0.1:7000", "--bootstrap"),
                     0);
    assert_true(c.bootstrap);
    assert_string_equal(c.peer_advertise.host, "10.0.0.1"); /* defaulted from peer_listen */
    assert_int_equal(c.source[CFG_PEER_ADVERTISE], 0);
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--node-id", "1", "--az", "a",
                           "--peer-listen", "10.0.0.1:7000", "--bootstrap=no", "--join=h:1"),
                     0);
    assert_false(c.bootstrap);
}

static void test_bad_flags(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    static const struct {
        const char *a, *b, *want;
    } cases[] = {
        {"--bogus", NULL, "unknown flag '--bogus'"},
        {"--data_dir=x", NULL, "unknown flag"}, /* flags use '-' */
        {"stray", NULL, "unknown argument 'stray'"},
        {"--listen", "nohost", "--listen: 'nohost' is not HOST:PORT"},
        {"--listen", "h:70000", "--listen:"},
        {"--listen", "h:", "--listen:"},
        {"--listen", "::1:80", "--listen:"}, /* IPv6 needs brackets */
        {"--listen", "a b:80", "--listen:"},
        {"--initial-partitions", "0", "--initial-partitions: '0' is not a number in 1..256"},
        {"--initial-partitions", "x", "--initial-partitions:"},
        {"--initial-partitions", "257", "--initial-partitions:"},
        {"--log-level", "loud", "--log-level: 'loud' is not error, warn, info or debug"},
        {"--node-id", "0", "--node-id: '0' is not a number in 1..9223372036854775808"},
        {"--node-id", "9223372036854775809", "--node-id:"},
        {"--node-id", "18446744073709551616", "--node-id:"},
        {"--node-id", "-1", "--node-id:"},
        {"--node-id", "1x", "--node-id:"},
        {"--az", "", "--az: wants 1 to 63 characters"},
        {"--az", "a z", "--az: character ' ' not allowed"},
        {"--region", "eu_west", "--region: character '_' not allowed"},
        {"--host-label", "a/b", "--host-label:"},
        {"--advertise", "0.0.0.0:80", "--advertise: '0.0.0.0:80' is a wildcard address"},
        {"--advertise", "[::]:80", "--advertise:"},
        {"--advertise", "h:0", "--advertise: 'h:0' has port 0"},
        {"--peer-advertise", ":7000", "--peer-advertise:"},
        {"--join", "a:1,,b:2", "--join: empty entry"},
        {"--join", "a:1,a:1", "--join: 'a:1' is listed twice"},
        {"--join", "0.0.0.0:1", "--join:"},
        {"--bootstrap=maybe", NULL, "--bootstrap: 'maybe' is not true or false"},
        {"--config", NULL, "--config wants a file"},
        {"--data-dir", NULL, "--data-dir wants a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cases[i].b ? parse(&c, &err, "--data-dir", "d", cases[i].a, cases[i].b)
                            : parse(&c, &err, "--data-dir", "d", cases[i].a);
        if (rc != -1 || strstr(err.msg, cases[i].want) == NULL)
            fail_msg("case %zu (%s %s): rc %d, message '%s'", i, cases[i].a,
                     cases[i].b ? cases[i].b : "", rc, rc ? err.msg : "");
        assert_int_equal(err.code, ERR_VALIDATION);
    }
    /* 33 join peers is one too many. */
    char list[33 * 16] = "";
    for (int i = 0; i < 33; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%sh%d:1", i ? "," : "", i);
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--join", list), -1);
    assert_non_null(strstr(err.msg, "more than 32 peers"));
    list[strrchr(list, ',') - list] = '\0';
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--join", list, "--node-id", "1", "--az",
                           "a", "--peer-listen", "h:2"),
                     0);
    assert_int_equal(c.join_count, 32);
    /* No data dir at all. */
    assert_int_equal(parse_args(&c, &err, (char *)NULL), -1);
    assert_non_null(
        strstr(err.msg, "command line: missing required key 'data_dir' (or --data-dir)"));
}

static void test_every_key_in_file(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    const char *text = "# a full configuration\n"
                       "\n"
                       "node_id = 42\n"
                       "az = us-east-1a\n"
                       "host_label = host-a.rack1\n"
                       "data_dir = \"/srv/strata data/#1\"\n"
                       "listen = 0.0.0.0:8000\n"
                       "peer_listen = 0.0.0.0:7000\n"
                       "advertise = 10.1.2.3:8000\n"
                       "peer_advertise = 10.1.2.3:7000\n"
                       "join = 10.1.2.4:7000, 10.1.2.5:7000 ,[fd00::6]:7000\n"
                       "bootstrap = false\n"
                       "initial_partitions = 16\n"
                       "region = eu-central-1\n"
                       "log_level = warn\n";
    if (load(&c, &err, text) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.node_id, 42);
    assert_string_equal(c.az, "us-east-1a");
    assert_string_equal(c.host_label, "host-a.rack1");
    assert_string_equal(c.data_dir, "/srv/strata data/#1");
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(c.listen.port, 8000);
    assert_string_equal(c.peer_listen.host, "0.0.0.0");
    assert_int_equal(c.peer_listen.port, 7000);
    assert_string_equal(c.advertise.host, "10.1.2.3");
    assert_int_equal(c.advertise.port, 8000);
    assert_string_equal(c.peer_advertise.host, "10.1.2.3");
    assert_int_equal(c.peer_advertise.port, 7000);
    assert_int_equal(c.join_count, 3);
    assert_string_equal(c.join[0].host, "10.1.2.4");
    assert_string_equal(c.join[1].host, "10.1.2.5");
    assert_string_equal(c.join[2].host, "fd00::6");
    assert_false(c.bootstrap);
    assert_int_equal(c.initial_partitions, 16);
    assert_string_equal(c.region, "eu-central-1");
    assert_int_equal(c.level, LOG_WARN);
    assert_int_equal(c.source[CFG_NODE_ID], 3);
    assert_int_equal(c.source[CFG_LOG_LEVEL], 15);
    char keys[256];
    config_cluster_keys_given(&c, keys, sizeof keys);
    assert_string_equal(keys, "node_id, az, host_label, peer_listen, peer_advertise, join, "
                              "bootstrap");
}

static void test_syntax(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    /* CRLF, tabs, indentation, trailing comments, escapes, no final newline. */
    const char *text = "  data_dir\t=\t\"/a \\\"b\\\" \\\\c\"   # comment\r\n"
                       "\t# indented comment\r\n"
                       "region=ap-south-1# glued comment\n"
                       "log_level =   debug   \n"
                       "   \n"
                       "initial_partitions = 2";
    if (load(&c, &err, text) < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(c.data_dir, "/a \"b\" \\c");
    assert_string_equal(c.region, "ap-south-1");
    assert_int_equal(c.level, LOG_DEBUG);
    assert_int_equal(c.initial_partitions, 2);
    assert_int_equal(c.source[CFG_INITIAL_PARTITIONS], 6);
    /* An empty file is fine (then data_dir is missing). */
    assert_int_equal(load(&c, &err, ""), -1);
    assert_string_equal(err.msg, "t.conf: missing required key 'data_dir' (or --data-dir)");
}

static void test_file_errors(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"data_dir = d\nbogus = 1\n", "t.conf:2: unknown key 'bogus'"},
        {"data-dir = d\n", "t.conf:1: unknown key 'data-dir'"},
        {"data_dir = d\n\nregion = a\nregion = b\n",
         "t.conf:4: key 'region' repeated (first set at line 3)"},
        {"data_dir d\n", "t.conf:1: expected 'key = value'"},
        {"= d\n", "t.conf:1: unknown key ''"},
        {"data_dir =\n", "t.conf:1: key 'data_dir': empty value"},
        {"data_dir = # nothing\n", "t.conf:1: key 'data_dir': empty value"},
        {"data_dir = \"d\n", "t.conf:1: key 'data_dir': unterminated quoted value"},
        {"data_dir = \"d\" x\n", "t.conf:1: key 'data_dir': text after the closing quote"},
        {"data_dir = \"a\\nb\"\n", "t.conf:1: key 'data_dir': only \\\" and \\\\ escapes"},
        {"data_dir = a\"b\n", "t.conf:1: key 'data_dir': a quote inside an unquoted value"},
        {"data_dir = \"\"\n", "t.conf:1: key 'data_dir': wants a directory"},
        {"data_dir = \"a\tb\"\n", "t.conf:1: key 'data_dir': control characters"},
        {"data_dir = d\nnode_id = 0\n", "t.conf:2: key 'node_id': '0' is not a number"},
        {"data_dir = d\nnode_id = 9223372036854775809\n", "t.conf:2: key 'node_id':"},
        {"data_dir = d\naz = a z\n", "t.conf:2: key 'az': character ' ' not allowed"},
        {"data_dir = d\nhost_label = a:b\n", "t.conf:2: key 'host_label': character ':'"},
        {"data_dir = d\nlisten = x\n", "t.conf:2: key 'listen': 'x' is not HOST:PORT"},
        {"data_dir = d\npeer_listen = x:99999\n", "t.conf:2: key 'peer_listen':"},
        {"data_dir = d\nadvertise = 0.0.0.0:1\n", "t.conf:2: key 'advertise': '0.0.0.0:1' is a "
                                                  "wildcard"},
        {"data_dir = d\npeer_advertise = h:0\n",
         "t.conf:2: key 'peer_advertise': 'h:0' has port 0"},
        {"data_dir = d\njoin = a:1,\n", "t.conf:2: key 'join': empty entry"},
        {"data_dir = d\njoin = a:1, [::]:2\n", "t.conf:2: key 'join': '[::]:2' is a wildcard"},
        {"data_dir = d\nbootstrap = 2\n", "t.conf:2: key 'bootstrap': '2' is not true or false"},
        {"data_dir = d\ninitial_partitions = 300\n", "t.conf:2: key 'initial_partitions':"},
        {"data_dir = d\nregion = \"\"\n", "t.conf:2: key 'region': wants 1 to 63 characters"},
        {"data_dir = d\nlog_level = INFO\n", "t.conf:2: key 'log_level': 'INFO' is not error"},
        /* Cross-key and missing values. */
        {"data_dir = d\nnode_id = 1\n", "t.conf: missing required key 'az' (or --az): cluster"},
        {"data_dir = d\naz = a\n", "t.conf: missing required key 'node_id' (or --node-id)"},
        {"data_dir = d\nnode_id = 1\naz = a\n", "t.conf: missing required key 'peer_listen'"},
        {CLUSTER_BASE, "t.conf: missing required key 'join' (or --join): cluster settings are "
                       "given; set join to existing nodes' peer addresses, or bootstrap = true"},
        {CLUSTER_BASE "join = a:1\nbootstrap = yes\n",
         "t.conf:6: key 'bootstrap': bootstrap and join exclude each other (join set by "
         "t.conf:5: key 'join')"},
        {CLUSTER_BASE "join = a:1, 10.0.0.1:7000\n",
         "t.conf:5: key 'join': lists this node's own peer address"},
        {"host_label = h\n", "t.conf: missing required key 'data_dir'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = load(&c, &err, cases[i].text);
        if (rc != -1 || strstr(err.msg, cases[i].want) == NULL)
            fail_msg("case %zu: rc %d, message '%s', want '%s'", i, rc, rc ? err.msg : "",
                     cases[i].want);
        assert_int_equal(err.code, ERR_VALIDATION);
    }
    /* A line that is too long, and a NUL byte. */
    size_t big = 9000;
    char *text = malloc(big + 1);
    assert_non_null(text);
    memset(text, 'a', big);
    memcpy(text, "data_dir = ", 11);
    text[big] = '\0';
    assert_int_equal(load(&c, &err, text), -1);
    assert_non_null(strstr(err.msg, "t.conf:1: line longer than 8192 bytes"));
    free(text);
    config_defaults(&c);
    assert_int_equal(config_apply_text(&c, "t.conf", "region = a\nx\0y = 1\n", 16, &err), -1);
    assert_string_equal(err.msg, "t.conf:2: NUL byte in the line");
}

static void test_wildcard_needs_advertise(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    /* Cluster node: a wildcard client listen needs advertise; the error names listen's line. */
    assert_int_equal(load(&c, &err, CLUSTER_BASE "bootstrap = true\nlisten = 0.0.0.0:8000\n"), -1);
    assert_non_null(strstr(err.msg, "t.conf:6: key 'listen': '0.0.0.0:8000' is a wildcard address "
                                    "or port 0, so key 'advertise' (--advertise) is required"));
    assert_int_equal(load(&c, &err,
                          CLUSTER_BASE "bootstrap = true\nlisten = [::]:8000\n"
                                       "advertise = db1:8000\n"),
                     0);
    assert_string_equal(c.advertise.host, "db1");
    /* Port 0 cannot be advertised either. */
    assert_int_equal(load(&c, &err, CLUSTER_BASE "bootstrap = true\nlisten = 10.0.0.1:0\n"), -1);
    assert_non_null(strstr(err.msg, "key 'advertise' (--advertise) is required"));
    /* The same for the peer address. */
    assert_int_equal(load(&c, &err,
                          "data_dir = d\nnode_id = 1\naz = a\nbootstrap = on\n"
                          "peer_listen = :7000\n"),
                     -1);
    assert_non_null(strstr(err.msg,
                           "t.conf:5: key 'peer_listen': '0.0.0.0:7000' is a wildcard "
                           "address or port 0, so key 'peer_advertise' (--peer-advertise)"));
    /* The default client listen (127.0.0.1:8000) is dialable, so it is advertised. */
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--node-id", "1", "--az", "a",
                           "--peer-listen", "0.0.0.0:7000", "--peer-advertise", "p:7000",
                           "--bootstrap"),
                     0);
    assert_string_equal(c.advertise.host, "127.0.0.1");
    /* A flag-given wildcard is named as the flag. */
    assert_int_equal(parse(&c, &err, "--data-dir", "d", "--node-id", "1", "--az", "a",
                           "--peer-listen", "0.0.0.0:7000", "--peer-advertise", "p:7000",
                           "--bootstrap", "--listen", "0.0.0.0:1"),
                     -1);
    assert_non_null(strstr(err.msg, "--listen: '0.0.0.0:1' is a wildcard"));
    /* A single node on a wildcard needs nothing. */
    assert_int_equal(load(&c, &err, "data_dir = d\nlisten = 0.0.0.0:8000\n"), 0);
    assert_string_equal(c.advertise.host, "");
}

static void test_flags_override_file(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, sizeof path,
               "data_dir = /from/file\n"
               "region = eu-west-1\n"
               "log_level = error\n"
               "initial_partitions = 3\n"
               "node_id = 5\n"
               "az = file-az\n"
               "peer_listen = 10.0.0.5:7000\n"
               "join = 10.0.0.6:7000\n");
    stratad_config c;
    strata_err err;
    if (parse(&c, &err, "--log-level", "debug", "--config", path, "--az=flag-az",
              "--join=10.0.0.7:7000,10.0.0.8:7000", "--listen", "127.0.0.1:9000") < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(c.config_file, path);
    assert_string_equal(c.data_dir, "/from/file"); /* file */
    assert_string_equal(c.region, "eu-west-1");
    assert_int_equal(c.initial_partitions, 3);
    assert_int_equal(c.node_id, 5);
    assert_int_equal(c.level, LOG_DEBUG); /* flags, wherever they are on the line */
    assert_string_equal(c.az, "flag-az");
    assert_int_equal(c.join_count, 2);
    assert_string_equal(c.join[1].host, "10.0.0.8");
    assert_int_equal(c.listen.port, 9000);
    assert_int_equal(c.source[CFG_DATA_DIR], 1);
    assert_int_equal(c.source[CFG_AZ], -1);
    /* --config=FILE works too; a flag can fix what the file leaves out. */
    char arg[80];
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&c, &err, arg, "--data-dir=/from/flag"), 0);
    assert_string_equal(c.data_dir, "/from/flag");
    /* Errors in the file name it even when flags are given. */
    unlink(path);
    assert_int_equal(parse(&c, &err, "--config", path), -1);
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_non_null(strstr(err.msg, path));
    write_temp(path, sizeof path, "data_dir = d\nnode_id = 5\nnode_id = 6\n");
    assert_int_equal(parse(&c, &err, "--config", path, "--node-id", "7"), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:3: key 'node_id' repeated", path);
    assert_non_null(strstr(err.msg, want));
    unlink(path);
    /* A missing required value names the file. */
    write_temp(path, sizeof path, "node_id = 5\naz = a\npeer_listen = h:1\nbootstrap = true\n");
    assert_int_equal(parse(&c, &err, "--config", path), -1);
    snprintf(want, sizeof want, "%s: missing required key 'data_dir' (or --data-dir)", path);
    assert_string_equal(err.msg, want);
    unlink(path);
}

/* Prints `c`, reads the text back and checks every value is the same. */
static void assert_round_trip(const stratad_config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    config_print(c, f);
    fclose(f);
    stratad_config b;
    strata_err err;
    config_defaults(&b);
    strcpy(b.config_file, "printed");
    if (config_apply_text(&b, "printed", text, len, &err) < 0 || config_validate(&b, &err) < 0)
        fail_msg("%s\n--- printed:\n%s", err.msg, text);
    assert_int_equal(b.node_id, c->node_id);
    assert_string_equal(b.az, c->az);
    assert_string_equal(b.host_label, c->host_label);
    assert_string_equal(b.data_dir, c->data_dir);
    const config_addr *aa[] = {&c->listen, &c->peer_listen, &c->advertise, &c->peer_advertise};
    const config_addr *ba[] = {&b.listen, &b.peer_listen, &b.advertise, &b.peer_advertise};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(ba[i]->host, aa[i]->host);
        assert_int_equal(ba[i]->port, aa[i]->port);
    }
    assert_int_equal(b.join_count, c->join_count);
    for (int i = 0; i < c->join_count; i++) {
        assert_string_equal(b.join[i].host, c->join[i].host);
        assert_int_equal(b.join[i].port, c->join[i].port);
    }
    assert_int_equal(b.bootstrap, c->bootstrap);
    assert_int_equal(b.initial_partitions, c->initial_partitions);
    assert_int_equal(b.level, c->level);
    assert_string_equal(b.region, c->region);
    assert_int_equal(config_cluster_mode(&b), config_cluster_mode(c));
    free(text);
}

static void test_print_round_trip(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    assert_int_equal(parse(&c, &err, "--data-dir", "/tmp/x"), 0);
    assert_round_trip(&c);
    assert_int_equal(
        parse(&c, &err, "--data-dir", "/a \"quoted\" \\ #dir", "--listen", "0.0.0.0:0"), 0);
    assert_round_trip(&c);
    if (load(&c, &err,
             "node_id = 9223372036854775808\naz = z\nhost_label = h1\ndata_dir = /d\n"
             "listen = [::]:8000\nadvertise = [fd00::1]:8000\npeer_listen = 0.0.0.0:7000\n"
             "peer_advertise = p1:7000\njoin = p2:7000, [fd00::3]:7000\ninitial_partitions = 9\n"
             "region = r-1\nlog_level = error\n") < 0)
        fail_msg("%s", err.msg);
    assert_round_trip(&c);
    if (load(&c, &err, CLUSTER_BASE "bootstrap = true\nlog_level = warn\n") < 0)
        fail_msg("%s", err.msg);
    assert_round_trip(&c);

    /* The printed text says what is unset and that cluster mode is not there yet. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_print(&c, f);
    fclose(f);
    assert_non_null(strstr(text, "node_id = 7\n"));
    assert_non_null(strstr(text, "bootstrap = true\n"));
    assert_non_null(strstr(text, "# join = (not set)\n"));
    assert_non_null(strstr(text, "peer_advertise = 10.0.0.1:7000\n"));
    assert_non_null(strstr(text, "a cluster node (cluster settings are given)"));
    free(text);
}

/* peer_secret_file is a cluster key; config_read_peer_secret checks what the file holds
 * and who may read it. */
static void test_peer_secret_file(void **state)
{
    (void)state;
    stratad_config c;
    strata_err err;
    if (load(&c, &err, CLUSTER_BASE "bootstrap = true\npeer_secret_file = /etc/strata/s\n") < 0)
        fail_msg("%s", err.msg);
    assert_string_equal(c.peer_secret_file, "/etc/strata/s");
    assert_false(c.peer_secret_optional);
    assert_round_trip(&c);
    /* peer_secret_optional: only with a secret file. */
    if (load(&c, &err,
             CLUSTER_BASE
             "bootstrap = true\npeer_secret_file = /s\npeer_secret_optional = true\n") < 0)
        fail_msg("%s", err.msg);
    assert_true(c.peer_secret_optional);
    assert_round_trip(&c);
    assert_int_equal(load(&c, &err, CLUSTER_BASE "bootstrap = true\npeer_secret_optional = true\n"),
                     -1);
    assert_non_null(strstr(err.msg, "missing required key 'peer_secret_file'"));
    assert_int_equal(parse(&c, &err, "--data-dir", "/d", "--peer-secret-optional", "maybe"), -1);
    assert_int_equal(parse(&c, &err, "--data-dir", "/d", "--peer-secret-file", "/s"), -1);
    assert_non_null(strstr(err.msg, "node_id")); /* a cluster key: cluster mode */

    char path[64];
    static config_peer_secrets out;
    write_temp(path, sizeof path, "0123456789abcdef-secret\n\n");
    assert_int_equal(config_read_peer_secrets(path, &out, &err), 0);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.len[0], 23);
    assert_memory_equal(out.key[0], "0123456789abcdef-secret", 23);

    /* Readable by others: refused, as ssh refuses such a key. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_non_null(strstr(err.msg, "chmod 600"));
    assert_int_equal(out.count, 0);
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    unlink(path);

    /* Two lines while the secret is replaced (blank lines and \r\n aside); not three. */
    write_temp(path, sizeof path, "\nthe cluster's new secret\r\n\n  the old one, still taken \n");
    assert_int_equal(config_read_peer_secrets(path, &out, &err), 0);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.len[0], 24);
    assert_memory_equal(out.key[0], "the cluster's new secret", 24);
    assert_int_equal(out.len[1], 26);
    assert_memory_equal(out.key[1], "  the old one, still taken", 26);
    unlink(path);
    write_temp(path, sizeof path, "0123456789abcdef\n0123456789abcdef\n0123456789abcdef\n");
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_non_null(strstr(err.msg, "line 3: at most 2 secrets"));
    assert_int_equal(out.count, 0);
    unlink(path);
    write_temp(path, sizeof path, " \n\t\n");
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_non_null(strstr(err.msg, "no secret"));
    unlink(path);

    /* Too short once the newline is cut (either line); too long; the longest accepted. */
    write_temp(path, sizeof path, "fifteen bytes..\n");
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_non_null(strstr(err.msg, "line 1: a secret has 16 to 4096 bytes"));
    assert_non_null(strstr(err.msg, "not 15"));
    unlink(path);
    write_temp(path, sizeof path, "0123456789abcdef\nfifteen bytes..\n");
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_non_null(strstr(err.msg, "line 2:"));
    unlink(path);
    char *big = malloc(CONFIG_PEER_SECRET_MAX + 2);
    memset(big, 'x', CONFIG_PEER_SECRET_MAX + 1);
    big[CONFIG_PEER_SECRET_MAX + 1] = '\0';
    write_temp(path, sizeof path, big);
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_non_null(strstr(err.msg, "not 4097"));
    unlink(path);
    big[CONFIG_PEER_SECRET_MAX] = '\n';
    write_temp(path, sizeof path, big);
    assert_int_equal(config_read_peer_secrets(path, &out, &err), 0);
    assert_int_equal(out.len[0], CONFIG_PEER_SECRET_MAX);
    unlink(path);
    free(big);
    /* A file longer than two secrets can be is refused, whatever it ends with. */
    size_t huge = 3 * CONFIG_PEER_SECRET_MAX;
    big = malloc(huge);
    memset(big, ' ', huge - 1);
    memset(big, 'x', 100);
    big[huge - 1] = '\0';
    write_temp(path, sizeof path, big);
    assert_int_equal(config_read_peer_secrets(path, &out, &err), -1);
    assert_non_null(strstr(err.msg, "more than 2 secrets hold"));
    unlink(path);
    free(big);

    /* Missing, or a directory. */
    assert_int_equal(config_read_peer_secrets("/nonexistent/s", &out, &err), -1);
    assert_int_equal(err.code, ERR_IO);
    assert_int_equal(config_read_peer_secrets("/tmp", &out, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    config_peer_secrets_wipe(&out);
}

static void test_helpers(void **state)
{
    (void)state;
    char host[8];
    int port;
    assert_int_equal(config_parse_listen("[::1]:80", host, sizeof host, &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(config_parse_listen("[::1]80", host, sizeof host, &port), -1);
    assert_int_equal(config_parse_listen("[]:80", host, sizeof host, &port), -1);
    assert_int_equal(config_parse_listen("verylonghost:80", host, sizeof host, &port), -1);
    assert_int_equal(config_parse_listen("h:+80", host, sizeof host, &port), -1);
    assert_int_equal(config_parse_listen("h:000080", host, sizeof host, &port), -1);
    assert_true(config_host_is_wildcard("0.0.0.0"));
    assert_true(config_host_is_wildcard("::"));
    assert_false(config_host_is_wildcard("::1"));
    assert_string_equal(config_key_name(CFG_PEER_ADVERTISE), "peer_advertise");
    assert_true(config_is_cluster_key(CFG_JOIN));
    assert_false(config_is_cluster_key(CFG_ADVERTISE));
    stratad_config c;
    config_defaults(&c);
    char keys[8];
    c.source[CFG_NODE_ID] = 1;
    c.source[CFG_PEER_LISTEN] = 2;
    config_cluster_keys_given(&c, keys, sizeof keys); /* truncated, still terminated */
    assert_string_equal(keys, "node_id");
}

/* The open-file budget: raise the soft limit when the hard one allows, else cap client
 * connections so that the engine, the log and the peers keep their descriptors. */
static void test_fd_plan(void **state)
{
    (void)state;
    const uint64_t inf = UINT64_MAX;
    /* Room enough: nothing changes. */
    config_fd_plan p = config_plan_fds(20000, 20000, 10000);
    assert_int_equal(p.soft, 20000);
    assert_int_equal(p.max_connections, 10000);
    assert_false(p.reduced);
    /* Debian's default for a login shell (1024, hard 1048576), or an unlimited hard limit:
     * raised to what is needed, not to the hard limit. */
    p = config_plan_fds(1024, 1048576, 10000);
    assert_int_equal(p.soft, 10000 + CONFIG_FD_RESERVE);
    assert_int_equal(p.max_connections, 10000);
    assert_false(p.reduced);
    p = config_plan_fds(1024, inf, 10000);
    assert_int_equal(p.soft, 10000 + CONFIG_FD_RESERVE);
    assert_false(p.reduced);
    /* Never lowered. */
    p = config_plan_fds(inf, inf, 10000);
    assert_true(p.soft == inf);
    assert_false(p.reduced);
    /* A hard limit in the way: as high as it goes, and the connections get what is left
     * after the reserve... */
    p = config_plan_fds(1024, 8192, 10000);
    assert_int_equal(p.soft, 8192);
    assert_int_equal(p.max_connections, 8192 - CONFIG_FD_RESERVE);
    assert_true(p.reduced);
    /* ...or half of a limit below twice the reserve. */
    p = config_plan_fds(1024, 1024, 10000);
    assert_int_equal(p.soft, 1024);
    assert_int_equal(p.max_connections, 512);
    assert_true(p.reduced);
    p = config_plan_fds(1, 1, 10000);
    assert_int_equal(p.max_connections, 1);
    assert_true(p.reduced);
    /* A small max_connections fits a small limit. */
    p = config_plan_fds(1024, 1024, 100);
    assert_int_equal(p.soft, 1024);
    assert_int_equal(p.max_connections, 100);
    assert_false(p.reduced);
    /* The reserve is exact: one connection too many is reduced. */
    p = config_plan_fds(4096, 4096, 4096 - CONFIG_FD_RESERVE);
    assert_false(p.reduced);
    p = config_plan_fds(4096, 4096, 4096 - CONFIG_FD_RESERVE + 1);
    assert_true(p.reduced);
    assert_int_equal(p.max_connections, 4096 - CONFIG_FD_RESERVE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_every_key_in_file),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_wildcard_needs_advertise),
        cmocka_unit_test(test_flags_override_file),
        cmocka_unit_test(test_print_round_trip),
        cmocka_unit_test(test_peer_secret_file),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_fd_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
