/* `strata cluster status` formatting (node/cli/cluster_status.h): JSON text in, tables out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "node/cli/cli.h"
#include "node/cli/cluster_status.h"

#define NODES3                                                                                     \
    "\"nodes\":["                                                                                  \
    "{\"id\":1,\"az\":\"az1\",\"host\":\"h1\",\"state\":\"ACTIVE\",\"client\":\"127.0.0.1:8000\"," \
    "\"peer\":\"127.0.0.1:9000\",\"connected\":true},"                                             \
    "{\"id\":2,\"az\":\"az2\",\"host\":\"h2\",\"state\":\"ACTIVE\",\"client\":\"127.0.0.1:8001\"," \
    "\"peer\":\"127.0.0.1:9001\",\"connected\":true},"                                             \
    "{\"id\":3,\"az\":\"az3\",\"host\":\"host-three\",\"state\":\"ACTIVE\","                       \
    "\"client\":\"127.0.0.1:8002\",\"peer\":\"127.0.0.1:9002\",\"connected\":false}]"

/* Node 2's answer: two tables (Music with two partitions listed out of order, Books one). */
static const char node2[] =
    "{\"node_id\":2,\"ready\":true,\"meta_voter\":true,\"meta_leader\":1,\"meta_index\":12,"
    "\"meta_group\":{\"epoch\":3,\"seats\":3,\"members\":[{\"node\":1,\"role\":\"voter\"},"
    "{\"node\":2,\"role\":\"voter\"},{\"node\":3,\"role\":\"voter\"},"
    "{\"node\":4,\"role\":\"learner\"}]}," NODES3 ",\"partitions\":["
    "{\"id\":7,\"table_id\":2,\"table\":\"Books\",\"hash_lo\":\"0000000000000000\","
    "\"hash_hi\":\"ffffffffffffffff\",\"epoch\":1,\"leader\":0,\"members\":[1,3,2],"
    "\"local\":{\"state\":\"candidate\",\"term\":4,\"commit_index\":0,\"applied_index\":0,"
    "\"last_index\":0,\"failed\":false}},"
    "{\"id\":1,\"table_id\":1,\"table\":\"Music\",\"hash_lo\":\"0000000000000000\","
    "\"hash_hi\":\"7fffffffffffffff\",\"epoch\":2,\"leader\":2,\"members\":[1,2,3],"
    "\"local\":{\"state\":\"leader\",\"term\":3,\"commit_index\":120,\"applied_index\":119,"
    "\"last_index\":121,\"snapshot_index\":100,\"installs\":0,\"installing\":false,"
    "\"failed\":false}},"
    "{\"id\":2,\"table_id\":1,\"table\":\"Music\",\"hash_lo\":\"8000000000000000\","
    "\"hash_hi\":\"ffffffffffffffff\",\"epoch\":1,\"leader\":0,\"members\":[1,3,4]}]}";

/* Node 1's answer, for --all: it leads partition 2 (which node 2 does not know). */
static const char node1[] =
    "{\"node_id\":1,\"ready\":true,\"meta_voter\":true,\"meta_leader\":1,\"meta_index\":12," NODES3
    ",\"partitions\":["
    "{\"id\":1,\"table_id\":1,\"table\":\"Music\",\"hash_lo\":\"0000000000000000\","
    "\"hash_hi\":\"7fffffffffffffff\",\"epoch\":2,\"leader\":2,\"members\":[1,2,3],"
    "\"local\":{\"state\":\"follower\",\"term\":3,\"commit_index\":120,\"applied_index\":120,"
    "\"last_index\":120,\"snapshot_index\":64,\"installs\":2,\"installing\":true,"
    "\"failed\":true}},"
    "{\"id\":2,\"table_id\":1,\"table\":\"Music\",\"hash_lo\":\"8000000000000000\","
    "\"hash_hi\":\"ffffffffffffffff\",\"epoch\":1,\"leader\":1,\"members\":[1,3,4],"
    "\"local\":{\"state\":\"leader\",\"term\":5,\"commit_index\":9,\"applied_index\":9,"
    "\"last_index\":9,\"failed\":false}},"
    "{\"id\":7,\"table_id\":2,\"table\":\"Books\",\"hash_lo\":\"0000000000000000\","
    "\"hash_hi\":\"ffffffffffffffff\",\"epoch\":1,\"leader\":0,\"members\":[1,3,2]}]}";

/* Runs the formatter into a string (malloc'd); returns cli_cluster_print's result. */
static int format(const char *primary, const cli_cluster_view *views, size_t n, char **text,
                  cli_cluster_summary *sum, strata_err *err)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    assert_non_null(f);
    int rc = cli_cluster_print(primary, views, n, f, sum, err);
    assert_int_equal(fclose(f), 0);
    return rc;
}

static void assert_text(const char *got, const char *want)
{
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "--- got:\n%s--- want:\n%s", got, want);
        fail();
    }
}

static void one_node_view(void **state)
{
    (void)state;
    char *text = NULL;
    cli_cluster_summary sum;
    strata_err err;
    assert_int_equal(format(node2, NULL, 0, &text, &sum, &err), 0);
    assert_text(
        text,
        "Cluster as node 2 sees it: ready, meta leader 1, meta index 12, meta voter yes\n"
        "Meta group: 3 seats, members 1, 2, 3, 4 (learner)\n"
        "\n"
        "NODES\n"
        "  ID  AZ   HOST        STATE   CLIENT          PEER            CONNECTED\n"
        "  1   az1  h1          ACTIVE  127.0.0.1:8000  127.0.0.1:9000  yes\n"
        "  2   az2  h2          ACTIVE  127.0.0.1:8001  127.0.0.1:9001  yes\n"
        "  3   az3  host-three  ACTIVE  127.0.0.1:8002  127.0.0.1:9002  no\n"
        "\n"
        "TABLE Music (id 1, 2 partitions)\n"
        "  PARTITION  HASH RANGE                         EPOCH  LEADER  MEMBER  RAFT    TERM  "
        "COMMIT  APPLIED  LAST  SNAPSHOT\n"
        "  1          0000000000000000-7fffffffffffffff  2      2       1       -\n"
        "                                                               2*      leader  3     "
        "120     119      121   100\n"
        "                                                               3       -\n"
        "  2          8000000000000000-ffffffffffffffff  1      ?       1       -\n"
        "                                                               3       -\n"
        "                                                               4       -\n"
        "\n"
        "TABLE Books (id 2, 1 partition)\n"
        "  PARTITION  HASH RANGE                         EPOCH  LEADER  MEMBER  RAFT       TERM  "
        "COMMIT  APPLIED  LAST  SNAPSHOT\n"
        "  7          0000000000000000-ffffffffffffffff  1      none    1       -\n"
        "                                                               3       -\n"
        "                                                               2       candidate  4     "
        "0       0        0\n"
        "\n"
        "  (* leader; ? not known here. Raft columns for node 2's replicas only; --all asks "
        "every node)\n"
        "\n"
        "SUMMARY nodes up 2/3, tables 2, partitions 3, without leader 1, leader unknown 1, "
        "leaders per node 1:0 2:1 3:0\n");
    assert_true(sum.ready);
    assert_int_equal(sum.node_id, 2);
    assert_int_equal(sum.nodes, 3);
    assert_int_equal(sum.nodes_up, 2);
    assert_int_equal(sum.tables, 2);
    assert_int_equal(sum.partitions, 3);
    assert_int_equal(sum.leaderless, 1);
    assert_int_equal(sum.leader_unknown, 1);
    free(text);
}

/* --all: node 1 answered, node 3 did not; node 1's own view fills its rows (one failed and
 * copying a snapshot) and names the leader of partition 2, which node 2 did not know; node 1
 * has no replica of Books open. */
static void all_views(void **state)
{
    (void)state;
    cli_cluster_view views[] = {{.node_id = 1, .json = node1}, {.node_id = 3, .json = NULL}};
    char *text = NULL;
    cli_cluster_summary sum;
    strata_err err;
    assert_int_equal(format(node2, views, 2, &text, &sum, &err), 0);
    assert_text(
        text,
        "Cluster as node 2 sees it: ready, meta leader 1, meta index 12, meta voter yes\n"
        "Meta group: 3 seats, members 1, 2, 3, 4 (learner)\n"
        "\n"
        "NODES\n"
        "  ID  AZ   HOST        STATE   CLIENT          PEER            CONNECTED\n"
        "  1   az1  h1          ACTIVE  127.0.0.1:8000  127.0.0.1:9000  yes\n"
        "  2   az2  h2          ACTIVE  127.0.0.1:8001  127.0.0.1:9001  yes\n"
        "  3   az3  host-three  ACTIVE  127.0.0.1:8002  127.0.0.1:9002  no\n"
        "\n"
        "TABLE Music (id 1, 2 partitions)\n"
        "  PARTITION  HASH RANGE                         EPOCH  LEADER  MEMBER  RAFT              "
        "        TERM  COMMIT  APPLIED  LAST  SNAPSHOT\n"
        "  1          0000000000000000-7fffffffffffffff  2      2       1       "
        "FAILED(follower)+copying  3     120     120      120   64 (2 copied in)\n"
        "                                                               2*      leader            "
        "        3     120     119      121   100\n"
        "                                                               3       no answer\n"
        "  2          8000000000000000-ffffffffffffffff  1      1       1*      leader            "
        "        5     9       9        9\n"
        "                                                               3       no answer\n"
        "                                                               4       -\n"
        "\n"
        "TABLE Books (id 2, 1 partition)\n"
        "  PARTITION  HASH RANGE                         EPOCH  LEADER  MEMBER  RAFT       TERM  "
        "COMMIT  APPLIED  LAST  SNAPSHOT\n"
        "  7          0000000000000000-ffffffffffffffff  1      none    1       not open\n"
        "                                                               3       no answer\n"
        "                                                               2       candidate  4     "
        "0       0        0\n"
        "\n"
        "  (* leader; none: no member knows a leader)\n"
        "\n"
        "SUMMARY nodes up 2/3, tables 2, partitions 3, without leader 1, leader unknown 0, "
        "leaders per node 1:1 2:1 3:0\n");
    assert_int_equal(sum.leader_unknown, 0);
    free(text);
}

static void not_ready_and_empty(void **state)
{
    (void)state;
    const char j[] = "{\"node_id\":4,\"ready\":false,\"meta_voter\":false,\"meta_leader\":0,"
                     "\"meta_index\":0,\"nodes\":[],\"partitions\":[]}";
    char *text = NULL;
    cli_cluster_summary sum;
    strata_err err;
    assert_int_equal(format(j, NULL, 0, &text, &sum, &err), 0);
    assert_text(text, "Cluster as node 4 sees it: NOT READY, no meta leader, meta index 0, meta "
                      "voter no\n"
                      "\n"
                      "NODES\n"
                      "  ID  AZ  HOST  STATE  CLIENT  PEER  CONNECTED\n"
                      "\n"
                      "No tables.\n"
                      "\n"
                      "SUMMARY nodes up 0/0, tables 0, partitions 0, without leader 0, leader "
                      "unknown 0, leaders per node -\n");
    assert_false(sum.ready);
    free(text);
}

static void single_node(void **state)
{
    (void)state;
    char *text = NULL;
    cli_cluster_summary sum;
    strata_err err;
    assert_int_equal(
        format("{\"node_id\":0,\"ready\":true,\"mode\":\"single\"}", NULL, 0, &text, &sum, &err),
        0);
    assert_text(text, "Single node, not a cluster: ready\n");
    assert_true(sum.ready);
    free(text);
}

/* Missing or mistyped fields print as "?"; a long value is cut, never overflows. */
static void tolerant_fields(void **state)
{
    (void)state;
    char long_host[400];
    memset(long_host, 'x', sizeof long_host - 1);
    long_host[sizeof long_host - 1] = '\0';
    char j[1024];
    snprintf(j, sizeof j,
             "{\"node_id\":1,\"ready\":true,\"nodes\":[{\"id\":\"one\",\"host\":\"%s\"}],"
             "\"partitions\":[{\"id\":3,\"table_id\":1,\"members\":\"bad\"}]}",
             long_host);
    char *text = NULL;
    strata_err err;
    assert_int_equal(format(j, NULL, 0, &text, NULL, &err), 0);
    assert_non_null(strstr(text, "  ?   ?   xxxx"));
    assert_null(strstr(text, long_host)); /* cut at the cell bound */
    assert_non_null(strstr(text, "TABLE ? (id 1, 1 partition)"));
    assert_non_null(strstr(text, "  3          ?-?         ?      ?\n"));
    free(text);
}

static void not_cluster_json(void **state)
{
    (void)state;
    const char *bad[] = {"", "not json", "[]", "{\"nodes\":[]}",
                         "{\"partitions\":[],\"nodes\":{}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *text = NULL;
        strata_err err;
        assert_int_equal(format(bad[i], NULL, 0, &text, NULL, &err), -1);
        assert_int_equal(err.code, ERR_CORRUPT);
        free(text);
    }
}

typedef struct {
    char seen[256];
} each_ctx;

static void collect(void *ctx, uint64_t node_id, const char *addr)
{
    each_ctx *c = ctx;
    size_t n = strlen(c->seen);
    snprintf(c->seen + n, sizeof c->seen - n, "%llu=%s;", (unsigned long long)node_id, addr);
}

static void each_other_node(void **state)
{
    (void)state;
    each_ctx c = {{0}};
    strata_err err;
    assert_int_equal(cli_cluster_each_node(node2, collect, &c, &err), 0);
    assert_string_equal(c.seen, "1=127.0.0.1:8000;3=127.0.0.1:8002;");
    assert_int_equal(cli_cluster_each_node("nope", collect, &c, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
}

/* `node remove` waits on this: node 2 runs three replicas (partitions 7 and 1, not 2, and
 * the meta group's); node 1 runs three; a node with no "local" part, outside the meta
 * group, runs none. */
static void local_replicas_counted(void **state)
{
    (void)state;
    uint64_t id = 0;
    size_t n = 99;
    strata_err err;
    assert_int_equal(cli_cluster_local_replicas(node2, &id, &n, &err), 0);
    assert_int_equal(id, 2);
    assert_int_equal(n, 3);
    assert_int_equal(cli_cluster_local_replicas(node1, &id, &n, &err), 0);
    assert_int_equal(id, 1);
    assert_int_equal(n, 3);
    static const char none[] =
        "{\"node_id\":4,\"ready\":true,\"meta_voter\":false," NODES3 ",\"partitions\":["
        "{\"id\":2,\"table_id\":1,\"table\":\"Music\",\"members\":[1,3,2]}]}";
    assert_int_equal(cli_cluster_local_replicas(none, &id, &n, &err), 0);
    assert_int_equal(id, 4);
    assert_int_equal(n, 0);
    assert_int_equal(cli_cluster_local_replicas("{\"nodes\":[]}", &id, &n, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
}

/* The command line: usage errors and an unreachable node, through strata_cli_main. */
static int run(char **argv, int argc, char *errbuf, size_t cap)
{
    char outbuf[4096];
    FILE *out = fmemopen(outbuf, sizeof outbuf, "w");
    FILE *errout = fmemopen(errbuf, cap, "w");
    int code = strata_cli_main(argc, argv, out, errout);
    fclose(out);
    fclose(errout);
    return code;
}

/* A replica the map moved away but Raft still counts: node 2 still runs partition 2
 * (members 1, 3, 4), so its row follows the members', marked leaving. */
static void leaving_replica(void **state)
{
    (void)state;
    static const char node2_leaving[] =
        "{\"node_id\":2,\"ready\":true,\"meta_voter\":true,\"meta_leader\":1,\"meta_index\":"
        "12," NODES3 ",\"partitions\":["
        "{\"id\":2,\"table_id\":1,\"table\":\"Music\",\"hash_lo\":\"0000000000000000\","
        "\"hash_hi\":\"ffffffffffffffff\",\"epoch\":3,\"leader\":1,\"members\":[1,3,4],"
        "\"local\":{\"state\":\"follower\",\"term\":5,\"commit_index\":9,\"applied_index\":9,"
        "\"last_index\":9,\"snapshot_index\":0,\"installs\":0,\"installing\":false,"
        "\"failed\":false,\"lingering\":true}}]}";
    char *text = NULL;
    cli_cluster_summary sum;
    strata_err err;
    assert_int_equal(format(node2_leaving, NULL, 0, &text, &sum, &err), 0);
    assert_non_null(strstr(
        text,
        "TABLE Music (id 1, 1 partition)\n"
        "  PARTITION  HASH RANGE                         EPOCH  LEADER  MEMBER       RAFT      "
        "TERM  COMMIT  APPLIED  LAST  SNAPSHOT\n"
        "  2          0000000000000000-ffffffffffffffff  3      1       1*           -\n"
        "                                                               3            -\n"
        "                                                               4            -\n"
        "                                                               2 (leaving)  follower  "
        "5     9       9        9     0\n"));
    assert_int_equal(sum.partitions, 1);
    free(text);
}

/*
 * `node remove` against a scripted node on loopback: it accepts the state change, then
 * reports `lingering` replicas of its own for that many /admin/cluster answers, then none
 * (or stops answering, with `vanish`). One request per connection, as the CLI sends.
 */
typedef struct {
    int fd;
    int lingering; /* answers that still list a local replica */
    bool vanish;   /* after the first /admin/cluster, close without answering */
    int cluster_gets, state_posts, short_writes;
} scripted_node;

static const char one_local[] = "{\"node_id\":1,\"ready\":true," NODES3 ",\"partitions\":["
                                "{\"id\":2,\"table_id\":1,\"table\":\"Music\",\"members\":[2,3,4],"
                                "\"local\":{\"state\":\"follower\",\"lingering\":true}}]}";
static const char no_local[] =
    "{\"node_id\":1,\"ready\":true," NODES3 ",\"partitions\":["
    "{\"id\":2,\"table_id\":1,\"table\":\"Music\",\"members\":[2,3,4]}]}";

static void *scripted_serve(void *arg)
{
    scripted_node *sn = arg;
    for (;;) {
        int c = accept(sn->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* the test closed the listener */
        char req[4096] = "";
        ssize_t got = 0, k;
        while (got < (ssize_t)sizeof req - 1 &&
               (k = read(c, req + got, sizeof req - 1 - (size_t)got)) > 0) {
            got += k;
            req[got] = '\0';
            char *head_end = strstr(req, "\r\n\r\n");
            const char *cl = strcasestr(req, "Content-Length:");
            if (head_end != NULL &&
                (cl == NULL || got - (head_end + 4 - req) >= strtol(cl + 15, NULL, 10)))
                break;
        }
        const char *body = "{}";
        if (strncmp(req, "POST /admin/node-state", 22) == 0) {
            sn->state_posts++;
        } else if (strncmp(req, "GET /admin/cluster", 18) == 0) {
            sn->cluster_gets++;
            if (sn->vanish && sn->cluster_gets > 1) {
                close(c);
                continue;
            }
            /* The first GET finds the node's address; the waits start after it. */
            body = sn->cluster_gets <= 1 + sn->lingering ? one_local : no_local;
        }
        char resp[8192];
        int n = snprintf(resp, sizeof resp,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        /* No cmocka assertion off the test's thread: a short write shows as a CLI failure. */
        if (write(c, resp, (size_t)n) != n)
            sn->short_writes++;
        close(c);
    }
}

static int remove_against(scripted_node *sn, const char *wait, char *outbuf, size_t outcap,
                          char *errbuf, size_t errcap)
{
    sn->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(sn->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(sn->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(sn->fd, 16), 0);
    assert_int_equal(getsockname(sn->fd, (struct sockaddr *)&a, &alen), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, scripted_serve, sn), 0);
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%u", ntohs(a.sin_port));
    char *argv[] = {"strata", "--endpoint", ep,           "node", "remove",
                    "1",      "--wait",     (char *)wait, NULL};
    FILE *out = fmemopen(outbuf, outcap, "w");
    FILE *errout = fmemopen(errbuf, errcap, "w");
    int code = strata_cli_main(wait != NULL ? 8 : 6, argv, out, errout);
    fclose(out);
    fclose(errout);
    shutdown(sn->fd, SHUT_RDWR); /* wakes the accept */
    close(sn->fd);
    pthread_join(t, NULL);
    return code;
}

/* The command returns only once the removed node runs no replica: three answers with a
 * lingering replica, then one without. */
static void remove_waits_for_replicas(void **state)
{
    (void)state;
    char out[512] = "", err[512] = "";
    scripted_node sn = {.lingering = 3};
    assert_int_equal(remove_against(&sn, NULL, out, sizeof out, err, sizeof err), CLI_EXIT_OK);
    assert_int_equal(sn.state_posts, 1);
    assert_int_equal(sn.short_writes, 0);
    assert_int_equal(sn.cluster_gets, 1 + 3 + 1);
    assert_string_equal(out, "node 1: REMOVED; it runs no replica and can be stopped\n");

    scripted_node gone = {.lingering = 3, .vanish = true};
    assert_int_equal(remove_against(&gone, NULL, out, sizeof out, err, sizeof err), CLI_EXIT_OK);
    assert_non_null(strstr(out, "node 1: REMOVED; it does not answer"));

    /* A node whose replica never lets go: after --wait, exit 1 and say what is left. */
    scripted_node stuck = {.lingering = 1 << 30};
    memset(out, 0, sizeof out);
    assert_int_equal(remove_against(&stuck, "1", out, sizeof out, err, sizeof err),
                     CLI_EXIT_UNHEALTHY);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "node 1: REMOVED, but after 1 s it still runs 1 replica that "
                                "Raft may count"));
    assert_true(stuck.cluster_gets >= 5); /* it kept asking, every 200 ms */
}

static void command_line(void **state)
{
    (void)state;
    char e[4096];
    char *no_sub[] = {"strata", "cluster", NULL};
    assert_int_equal(run(no_sub, 2, e, sizeof e), CLI_EXIT_USAGE);
    char *bad_sub[] = {"strata", "cluster", "drain", NULL};
    assert_int_equal(run(bad_sub, 3, e, sizeof e), CLI_EXIT_USAGE);
    assert_non_null(strstr(e, "only cluster status exists"));
    char *all_health[] = {"strata", "--all", "health", NULL};
    assert_int_equal(run(all_health, 3, e, sizeof e), CLI_EXIT_USAGE);
    /* Port 1 on loopback: nobody listens there. A bare HOST:PORT is accepted. */
    char *down[] = {"strata", "cluster", "status", "--endpoint", "127.0.0.1:1", NULL};
    assert_int_equal(run(down, 5, e, sizeof e), CLI_EXIT_UNREACHABLE);
    assert_non_null(strstr(e, "unreachable: 127.0.0.1:1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_node_view),
        cmocka_unit_test(all_views),
        cmocka_unit_test(not_ready_and_empty),
        cmocka_unit_test(single_node),
        cmocka_unit_test(tolerant_fields),
        cmocka_unit_test(not_cluster_json),
        cmocka_unit_test(each_other_node),
        cmocka_unit_test(local_replicas_counted),
        cmocka_unit_test(remove_waits_for_replicas),
        cmocka_unit_test(command_line),
        cmocka_unit_test(leaving_replica),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
