/*
 * The cluster file (cluster/cluster_file.h) as a damaged disk may leave it, and the join
 * answer's node list from a peer: any bytes are refused or read; what is read encodes to
 * a text that reads back the same.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_file.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

static void check_list(const cluster_node_addr *a, const cluster_node_addr *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        check(a[i].id == b[i].id && strcmp(a[i].addr, b[i].addr) == 0);
}

static void file_round_trip(const cluster_file *f)
{
    buf b;
    buf_init(&b, CLUSTER_FILE_MAX_BYTES);
    cluster_file_encode(f, &b);
    check(!b.failed);
    cluster_file g;
    strata_err err;
    check(cluster_file_decode((const char *)b.data, b.len, &g, &err) == 0);
    check(g.n_members == f->n_members && g.n_nodes == f->n_nodes &&
          g.meta_joined == f->meta_joined);
    check_list(f->members, g.members, f->n_members);
    check_list(f->nodes, g.nodes, f->n_nodes);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    cluster_file f;
    strata_err err;
    if (cluster_file_decode(text, size, &f, &err) == 0) {
        check(f.n_members >= 1 && f.n_members <= CLUSTER_FILE_MAX_MEMBERS);
        check(f.n_nodes <= CLUSTER_FILE_MAX_NODES);
        file_round_trip(&f);
    } else {
        check(err.code == ERR_CORRUPT);
    }
    cluster_node_addr list[CLUSTER_FILE_MAX_NODES];
    size_t n = 0;
    if (cluster_node_list_decode(text, size, list, CLUSTER_FILE_MAX_NODES, &n, &err) == 0) {
        check(n >= 1 && n <= CLUSTER_FILE_MAX_NODES);
        buf b;
        buf_init(&b, 0);
        cluster_node_list_encode(list, n, &b);
        check(!b.failed);
        cluster_node_addr again[CLUSTER_FILE_MAX_NODES];
        size_t m = 0;
        check(cluster_node_list_decode((const char *)b.data, b.len, again, CLUSTER_FILE_MAX_NODES,
                                       &m, &err) == 0 &&
              m == n);
        check_list(list, again, n);
        buf_free(&b);
    }
    return 0;
}
