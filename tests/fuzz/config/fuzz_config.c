/*
 * libFuzzer harness of node/config's file parser: any bytes are parsed without a crash, and
 * a configuration that validates prints to text that parses back to the same values.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/config.h"

static bool same_addr(const config_addr *a, const config_addr *b)
{
    return strcmp(a->host, b->host) == 0 && a->port == b->port;
}

static bool same(const stratad_config *a, const stratad_config *b)
{
    if (a->node_id != b->node_id || strcmp(a->az, b->az) != 0 ||
        strcmp(a->host_label, b->host_label) != 0 || strcmp(a->data_dir, b->data_dir) != 0 ||
        !same_addr(&a->listen, &b->listen) || !same_addr(&a->peer_listen, &b->peer_listen) ||
        !same_addr(&a->advertise, &b->advertise) ||
        !same_addr(&a->peer_advertise, &b->peer_advertise) || a->join_count != b->join_count ||
        a->bootstrap != b->bootstrap || a->initial_partitions != b->initial_partitions ||
        a->level != b->level || strcmp(a->region, b->region) != 0 ||
        strcmp(a->peer_secret_file, b->peer_secret_file) != 0 ||
        a->peer_secret_optional != b->peer_secret_optional ||
        config_cluster_mode(a) != config_cluster_mode(b))
        return false;
    for (int i = 0; i < a->join_count; i++)
        if (!same_addr(&a->join[i], &b->join[i]))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stratad_config a, b;
    strata_err err;
    config_defaults(&a);
    if (config_apply_text(&a, "fuzz", (const char *)data, size, &err) < 0 ||
        config_validate(&a, &err) < 0)
        return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        abort();
    config_print(&a, f);
    fclose(f);
    config_defaults(&b);
    if (config_apply_text(&b, "printed", text, len, &err) < 0 || config_validate(&b, &err) < 0) {
        fprintf(stderr, "printed configuration does not parse: %s\n%s", err.msg, text);
        abort();
    }
    if (!same(&a, &b)) {
        fprintf(stderr, "printed configuration parses to other values:\n%s", text);
        abort();
    }
    free(text);
    return 0;
}
