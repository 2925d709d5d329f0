/* The entries of a partition group's log (cluster/partition_entry.h). */
#include "cluster/partition_entry.h"

#include "cluster/split.h"
#include "storage/base/buf.h"

#define WRITE_BYTE     0xFE
#define MARK_BYTE      0xFF /* starts no protobuf message: field 31, wire type 7 is invalid */
#define FIRST_RESERVED 0x80 /* a PartitionWrite's first byte is below */

const uint8_t pentry_child_noop[PENTRY_MARKER_LEN] = {MARK_BYTE, 'N'};
const uint8_t pentry_flush_hint[PENTRY_MARKER_LEN] = {MARK_BYTE, 'F'};

_Static_assert(SPLIT_CMD_MAGIC0 == MARK_BYTE, "a SPLIT is one of the 0xFF entries");

pentry_kind pentry_kind_of(const uint8_t *e, size_t len)
{
    if (len == 0 || e[0] < FIRST_RESERVED)
        return PENTRY_BARE_WRITE; /* an empty one decodes to nothing: answered, not applied */
    if (e[0] == WRITE_BYTE)
        return len >= PENTRY_WRITE_HEADER ? PENTRY_WRITE : PENTRY_NEWER;
    if (e[0] != MARK_BYTE || len < 2)
        return PENTRY_NEWER;
    if (split_cmd_is(e, len))
        return PENTRY_SPLIT;
    if (len == PENTRY_MARKER_LEN && e[1] == pentry_child_noop[1])
        return PENTRY_CHILD_NOOP;
    if (len == PENTRY_MARKER_LEN && e[1] == pentry_flush_hint[1])
        return PENTRY_FLUSH_HINT;
    return PENTRY_NEWER;
}

void pentry_write_header(uint8_t out[PENTRY_WRITE_HEADER], uint64_t hash)
{
    out[0] = WRITE_BYTE;
    for (int i = 0; i < 8; i++)
        out[1 + i] = (uint8_t)(hash >> (56 - 8 * i));
}

uint64_t pentry_write_hash(const uint8_t *e)
{
    rd r;
    rd_init(&r, e + 1, 8);
    return rd_u64be(&r);
}
