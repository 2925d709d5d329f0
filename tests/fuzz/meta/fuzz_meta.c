/*
 * libFuzzer harness for meta records (cluster/meta.c), which arrive from the meta group's
 * Raft log: meta_decode / meta_apply must reject any malformed record without crashing,
 * and whatever applies must leave a state that passes meta_check (every placement rule).
 * The checksum would stop almost every mutation early, so the input is also read as a
 * sequence of length-prefixed payloads that get a correct checksum appended and are
 * applied one after the other to a small cluster (6 nodes, 3 AZs, one table).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/meta.h"

/* Aborts with the failed condition's line, so a crash says which property broke. */
#define must(ok) must_at((ok), __LINE__)
static void must_at(int ok, int line)
{
    if (!ok) {
        fprintf(stderr, "fuzz_meta: property at line %d broken\n", line);
        abort();
    }
}

static meta_state *small_state(void)
{
    meta_state *s = meta_new();
    if (s == NULL)
        return NULL;
    static const char *az[] = {"a", "b", "c"};
    buf b;
    buf_init(&b, 0);
    for (uint64_t i = 1; i <= 6; i++) {
        meta_cmd c = {.kind = META_CMD_NODE_REGISTER, .now_ms = i};
        c.node.id = i;
        snprintf(c.node.client_addr, sizeof(c.node.client_addr), "n%llu:1", (unsigned long long)i);
        snprintf(c.node.peer_addr, sizeof(c.node.peer_addr), "n%llu:2", (unsigned long long)i);
        snprintf(c.node.az, sizeof(c.node.az), "%s", az[(i - 1) % 3]);
        snprintf(c.node.host, sizeof(c.node.host), "h%llu", (unsigned long long)i);
        c.node.state = META_NODE_ACTIVE;
        buf_reset(&b);
        must(meta_encode(&c, &b, NULL) == 0 && meta_apply(s, b.data, b.len, NULL) == 0);
    }
    meta_partition p[2];
    memset(p, 0, sizeof(p));
    for (int k = 0; k < 2; k++) {
        p[k].id = 1 + k;
        p[k].table_id = 1;
        p[k].hash_lo = k ? 1000 : 0;
        p[k].hash_hi = k ? UINT64_MAX : 999;
        p[k].n_members = 3;
        for (int m = 0; m < 3; m++)
            p[k].members[m] = (meta_replica){(uint64_t)(1 + m + 3 * k), META_VOTER};
        p[k].leader_hint = 1 + 3 * k;
    }
    meta_cmd c = {.kind = META_CMD_TABLE_CREATE,
                  .table_id = 1,
                  .name = "t",
                  .name_len = 1,
                  .parts = p,
                  .n_parts = 2};
    buf_reset(&b);
    must(meta_encode(&c, &b, NULL) == 0 && meta_apply(s, b.data, b.len, NULL) == 0);
    buf_free(&b);
    return s;
}

static void apply_one(meta_state *s, const uint8_t *rec, size_t len)
{
    meta_cmd c;
    strata_err err;
    if (meta_decode(rec, len, &c, &err) == 0) {
        /* What decodes re-encodes, and the re-encoding decodes. */
        buf b;
        buf_init(&b, 0);
        must(meta_encode(&c, &b, &err) == 0);
        meta_cmd d;
        must(meta_decode(b.data, b.len, &d, &err) == 0 && d.kind == c.kind);
        meta_cmd_free(&d);
        buf_free(&b);
        meta_cmd_free(&c);
    } else {
        must(err.code == ERR_CORRUPT || err.code == ERR_NOMEM);
    }
    uint64_t before = meta_state_digest(s);
    if (meta_apply(s, rec, len, &err) != 0)
        must(meta_state_digest(s) == before); /* a rejected record changes nothing */
    must(meta_check(s, &err) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The input as a snapshot: rejected, or a state that passes every check and
     * survives a re-encoding unchanged (varints may be non-minimal in the input, so the
     * bytes may differ). */
    meta_state *snap = meta_state_decode(data, size, NULL);
    if (snap != NULL) {
        must(meta_check(snap, NULL) == 0);
        buf b;
        buf_init(&b, 0);
        must(meta_state_encode(snap, &b, NULL) == 0);
        meta_state *again = meta_state_decode(b.data, b.len, NULL);
        must(again != NULL && meta_state_digest(again) == meta_state_digest(snap));
        meta_free(again);
        buf_free(&b);
        meta_free(snap);
    }
    meta_state *s = small_state();
    if (s == NULL)
        return 0;
    apply_one(s, data, size);
    uint8_t *rec = malloc(size + 8);
    size_t off = 0;
    while (rec != NULL && off + 2 <= size) {
        size_t n = (size_t)data[off] << 8 | data[off + 1];
        off += 2;
        if (n > size - off)
            n = size - off;
        memcpy(rec, data + off, n);
        uint64_t sum = XXH3_64bits(rec, n);
        for (int i = 0; i < 8; i++)
            rec[n + i] = (uint8_t)(sum >> (56 - 8 * i));
        apply_one(s, rec, n + 8);
        off += n;
    }
    free(rec);
    meta_free(s);
    return 0;
}
