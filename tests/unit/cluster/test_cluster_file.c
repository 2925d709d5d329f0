/* Unit tests for cluster/cluster_file.c: the cluster file's text round trip (with and
 * without the nodes line), a file of the builds before the nodes line, lines of a later
 * build skipped, and every kind of damage refused, down to any one bit changed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "cluster/cluster_file.h"

static cluster_file sample(size_t n_nodes, bool joined)
{
    cluster_file f;
    memset(&f, 0, sizeof f);
    f.n_members = 3;
    for (size_t i = 0; i < 3; i++) {
        f.members[i].id = i + 1;
        snprintf(f.members[i].addr, sizeof f.members[i].addr, "10.0.0.%zu:7001", i + 1);
    }
    f.n_nodes = n_nodes;
    for (size_t i = 0; i < n_nodes; i++) {
        f.nodes[i].id = i + 2;
        snprintf(f.nodes[i].addr, sizeof f.nodes[i].addr, "node-%zu.example:7001", i + 2);
    }
    f.meta_joined = joined;
    return f;
}

static void assert_same(const cluster_file *a, const cluster_file *b)
{
    assert_int_equal(a->n_members, b->n_members);
    assert_int_equal(a->n_nodes, b->n_nodes);
    assert_int_equal(a->meta_joined, b->meta_joined);
    for (size_t i = 0; i < a->n_members; i++) {
        assert_int_equal(a->members[i].id, b->members[i].id);
        assert_string_equal(a->members[i].addr, b->members[i].addr);
    }
    for (size_t i = 0; i < a->n_nodes; i++) {
        assert_int_equal(a->nodes[i].id, b->nodes[i].id);
        assert_string_equal(a->nodes[i].addr, b->nodes[i].addr);
    }
}

static int decode_text(const char *text, cluster_file *out, strata_err *err)
{
    return cluster_file_decode(text, strlen(text), out, err);
}

/* `body` followed by its checksum line. */
static void with_sum(const char *body, char *out, size_t cap)
{
    snprintf(out, cap, "%sxxh3 %016llx\n", body,
             (unsigned long long)XXH3_64bits(body, strlen(body)));
}

static void round_trip(void **state)
{
    (void)state;
    size_t counts[] = {0, 1, CLUSTER_FILE_MAX_NODES};
    for (size_t k = 0; k < 3; k++) {
        cluster_file f = sample(counts[k], k == 1), g;
        buf b;
        buf_init(&b, CLUSTER_FILE_MAX_BYTES);
        cluster_file_encode(&f, &b);
        assert_false(b.failed);
        strata_err err;
        assert_int_equal(cluster_file_decode((const char *)b.data, b.len, &g, &err), 0);
        assert_same(&f, &g);
        assert_int_equal(strstr((const char *)b.data, "\nnodes ") != NULL, counts[k] > 0);
        buf_free(&b);
    }
}

/* Both lists full, every address of META_ADDR_MAX bytes: within CLUSTER_FILE_MAX_BYTES. */
static void largest_file_fits(void **state)
{
    (void)state;
    cluster_file f = sample(CLUSTER_FILE_MAX_NODES, true), g;
    f.n_members = CLUSTER_FILE_MAX_MEMBERS;
    for (size_t i = 0; i < CLUSTER_FILE_MAX_MEMBERS; i++) {
        f.members[i].id = UINT64_MAX - i;
        memset(f.members[i].addr, 'm', META_ADDR_MAX);
        f.members[i].addr[META_ADDR_MAX] = '\0';
    }
    for (size_t i = 0; i < CLUSTER_FILE_MAX_NODES; i++) {
        f.nodes[i].id = UINT64_MAX - 100 - i;
        memset(f.nodes[i].addr, 'n', META_ADDR_MAX);
        f.nodes[i].addr[META_ADDR_MAX] = '\0';
    }
    buf b;
    buf_init(&b, CLUSTER_FILE_MAX_BYTES);
    cluster_file_encode(&f, &b);
    assert_false(b.failed);
    assert_true(b.len <= CLUSTER_FILE_MAX_BYTES);
    strata_err err;
    assert_int_equal(cluster_file_decode((const char *)b.data, b.len, &g, &err), 0);
    assert_same(&f, &g);
    buf_free(&b);
}

/* A file as the builds before the nodes line wrote it, and one with a line of a later
 * build: both read. */
static void older_and_newer_files(void **state)
{
    (void)state;
    char text[512];
    with_sum("strata-cluster 1\nmembers 1@a:1,2@b:2,3@c:3\nmeta joined\n", text, sizeof text);
    cluster_file f;
    strata_err err;
    assert_int_equal(decode_text(text, &f, &err), 0);
    assert_int_equal(f.n_members, 3);
    assert_int_equal(f.n_nodes, 0);
    assert_true(f.meta_joined);
    assert_string_equal(f.members[2].addr, "c:3");
    with_sum("strata-cluster 1\nmembers 7@x:1\nsomething later 42\nnodes 8@y:2\n", text,
             sizeof text);
    assert_int_equal(decode_text(text, &f, &err), 0);
    assert_int_equal(f.n_members, 1);
    assert_int_equal(f.members[0].id, 7);
    assert_int_equal(f.n_nodes, 1);
    assert_int_equal(f.nodes[0].id, 8);
    assert_false(f.meta_joined);
}

static void damage_refused(void **state)
{
    (void)state;
    const char *bodies[] = {
        "strata-cluster 2\nmembers 1@a:1\n",                    /* another version */
        "strata-cluster 1\n",                                   /* no members line */
        "strata-cluster 1\nmembers \n",                         /* an empty list */
        "strata-cluster 1\nmembers 1@a:1,\n",                   /* a trailing comma */
        "strata-cluster 1\nmembers 0@a:1\n",                    /* id 0 */
        "strata-cluster 1\nmembers 1a:1\n",                     /* no @ */
        "strata-cluster 1\nmembers 1@\n",                       /* no address */
        "strata-cluster 1\nmembers 1@a b\n",                    /* a space in an address */
        "strata-cluster 1\nmembers 18446744073709551616@a:1\n", /* id over 64 bits */
        "strata-cluster 1\nmembers 1@a:1\nmembers 2@b:1\n",     /* two members lines */
        "strata-cluster 1\nmembers 1@a:1\nnodes 2@b:1\nnodes 3@c:1\n",
        "strata-cluster 1\nmembers 1@a,2@b,3@c,4@d,5@e,6@f,7@g\n", /* too many members */
    };
    char text[512];
    cluster_file f;
    strata_err err;
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        with_sum(bodies[i], text, sizeof text);
        if (decode_text(text, &f, &err) == 0)
            fail_msg("accepted: %s", bodies[i]);
        assert_int_equal(err.code, ERR_CORRUPT);
    }
    /* A bit changed, the checksum line cut, bytes after it, no checksum at all. */
    with_sum("strata-cluster 1\nmembers 1@a:1\n", text, sizeof text);
    char bad[512];
    snprintf(bad, sizeof bad, "%s", text);
    bad[20] ^= 1;
    assert_int_equal(decode_text(bad, &f, &err), -1);
    snprintf(bad, sizeof bad, "%.*s", (int)strlen(text) - 2, text);
    assert_int_equal(decode_text(bad, &f, &err), -1);
    snprintf(bad, sizeof bad, "%sx", text);
    assert_int_equal(decode_text(bad, &f, &err), -1);
    assert_int_equal(decode_text("strata-cluster 1\nmembers 1@a:1\n", &f, &err), -1);
    assert_int_equal(decode_text("", &f, &err), -1);
    assert_int_equal(decode_text(text, &f, &err), 0); /* the undamaged one reads */
}

/* Whatever one bit of a written file is changed to, the file is refused, never read as
 * another: a node that finds its file damaged asks the cluster again (router_cluster.c),
 * but one that read a changed file would ask the wrong nodes, or bootstrap. */
static void every_bit_changed_refused(void **state)
{
    (void)state;
    cluster_file f = sample(2, true), got;
    buf b;
    buf_init(&b, 0);
    cluster_file_encode(&f, &b);
    assert_false(b.failed);
    strata_err err;
    assert_int_equal(cluster_file_decode((const char *)b.data, b.len, &got, &err), 0);
    for (size_t i = 0; i < b.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            b.data[i] ^= (uint8_t)(1u << bit);
            if (cluster_file_decode((const char *)b.data, b.len, &got, &err) == 0)
                fail_msg("accepted with bit %d of byte %zu changed", bit, i);
            assert_int_equal(err.code, ERR_CORRUPT);
            b.data[i] ^= (uint8_t)(1u << bit);
        }
    buf_free(&b);
}

/* The join answer's list: read whole or not at all. */
static void node_list(void **state)
{
    (void)state;
    cluster_node_addr list[2] = {{5, "h:1"}, {9, "[::1]:7001"}};
    buf b;
    buf_init(&b, 0);
    cluster_node_list_encode(list, 2, &b);
    cluster_node_addr got[CLUSTER_FILE_MAX_MEMBERS] = {{77, "untouched"}};
    size_t n = 0;
    strata_err err;
    assert_int_equal(cluster_node_list_decode((const char *)b.data, b.len, got, 1, &n, &err), -1);
    assert_int_equal(got[0].id, 77);
    assert_int_equal(cluster_node_list_decode((const char *)b.data, b.len, got, 2, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(got[1].addr, "[::1]:7001");
    assert_int_equal(cluster_node_list_decode("", 0, got, 2, &n, &err), -1);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(largest_file_fits),
        cmocka_unit_test(older_and_newer_files),
        cmocka_unit_test(damage_refused),
        cmocka_unit_test(every_bit_changed_refused),
        cmocka_unit_test(node_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
