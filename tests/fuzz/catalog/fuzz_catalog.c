/*
 * libFuzzer harness for catalog records (cluster/catalog.c), which are read back from
 * the engine and the log on restart: catalog_record_peek and catalog_apply must reject
 * any malformed record without crashing, and a record that peeks fine must apply.
 * The checksum would stop almost every mutation early, so the harness also feeds the
 * payload with a correct checksum in front.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/catalog.h"

static void run(const uint8_t *rec, size_t len)
{
    catalog *c = catalog_new();
    if (c == NULL)
        return;
    catalog_change ch;
    strata_err err;
    int peek = catalog_record_peek(rec, len, &ch, &err);
    int applied = catalog_apply(c, rec, len, &err);
    if (peek == 0 && applied != 0 && err.code != ERR_NOMEM)
        abort(); /* the router relies on: peeks fine => applies */
    if (applied == 0 && !ch.drop) {
        const table_info *t = catalog_find(c, ch.name, ch.name_len);
        if (t == NULL || t->n_partitions == 0)
            abort();
        /* Encoding the decoded table and applying it again is stable. */
        buf b;
        buf_init(&b, 0);
        if (catalog_encode_table(t, &b, NULL) == 0 && catalog_apply(c, b.data, b.len, &err) != 0)
            abort();
        buf_free(&b);
    }
    catalog_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size);
    if (size < 1)
        return 0;
    /* data[0] picks the kind; the rest is the payload, with a valid header. */
    uint8_t *rec = malloc(size + 9);
    if (rec == NULL)
        return 0;
    rec[0] = 1;
    rec[1] = (uint8_t)(1 + (data[0] & 1));
    uint64_t sum = XXH3_64bits(data + 1, size - 1);
    for (int i = 0; i < 8; i++)
        rec[2 + i] = (uint8_t)(sum >> (56 - 8 * i));
    memcpy(rec + 10, data + 1, size - 1);
    run(rec, size + 9);
    free(rec);
    return 0;
}
