/* Unit tests of cluster/partition_entry: which entry of a partition log is which, and
 * which are a newer binary's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/partition.h"
#include "cluster/partition_entry.h"
#include "cluster/split.h"

static void test_markers_and_split(void **state)
{
    (void)state;
    assert_int_equal(pentry_kind_of(pentry_child_noop, PENTRY_MARKER_LEN), PENTRY_CHILD_NOOP);
    assert_int_equal(pentry_kind_of(pentry_flush_hint, PENTRY_MARKER_LEN), PENTRY_FLUSH_HINT);
    split_cmd c = {.child_id = 9, .split_hash = 1ull << 63, .n_members = 1};
    c.members[0] = (split_member){.node = 1, .voter = true};
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(split_cmd_encode(&c, &b, &err), 0);
    assert_int_equal(pentry_kind_of(b.data, b.len), PENTRY_SPLIT);
    buf_free(&b);
}

/* What this binary's router writes for a PutItem, with and without the hash header. */
static void test_writes(void **state)
{
    (void)state;
    av key = {.type = AV_M};
    partition_write w = {.kind = PARTITION_DELETE, .table_id = 1, .key = &key};
    for (int kind = PARTITION_PUT; kind <= PARTITION_DELETE; kind++) {
        w.kind = (partition_write_kind)kind;
        buf cmd;
        buf_init(&cmd, 0);
        strata_err err;
        assert_int_equal(partition_write_encode(&w, &cmd, &err), 0);
        assert_int_equal(pentry_kind_of(cmd.data, cmd.len), PENTRY_BARE_WRITE);
        uint8_t e[PENTRY_WRITE_HEADER + 256];
        assert_true(cmd.len <= sizeof e - PENTRY_WRITE_HEADER);
        pentry_write_header(e, 0x0123456789abcdefull);
        memcpy(e + PENTRY_WRITE_HEADER, cmd.data, cmd.len);
        assert_int_equal(pentry_kind_of(e, PENTRY_WRITE_HEADER + cmd.len), PENTRY_WRITE);
        assert_int_equal(pentry_write_hash(e), 0x0123456789abcdefull);
        buf_free(&cmd);
    }
    uint8_t h[PENTRY_WRITE_HEADER];
    pentry_write_header(h, UINT64_MAX);
    assert_int_equal(pentry_kind_of(h, sizeof h), PENTRY_WRITE); /* an empty command */
    assert_int_equal(pentry_write_hash(h), UINT64_MAX);
    assert_int_equal(pentry_kind_of(NULL, 0), PENTRY_BARE_WRITE);
}

/* Everything else that does not start as a protobuf message of this binary's is kept for
 * later formats: the replica stops on it. */
static void test_newer(void **state)
{
    (void)state;
    uint8_t e[PENTRY_WRITE_HEADER + 2] = {0};
    for (unsigned first = 0x80; first <= 0xFD; first++) {
        e[0] = (uint8_t)first;
        for (size_t len = 1; len <= sizeof e; len++)
            assert_int_equal(pentry_kind_of(e, len), PENTRY_NEWER);
    }
    e[0] = 0xFE; /* a write too short for its hash */
    for (size_t len = 1; len < PENTRY_WRITE_HEADER; len++)
        assert_int_equal(pentry_kind_of(e, len), PENTRY_NEWER);
    e[0] = 0xFF;
    assert_int_equal(pentry_kind_of(e, 1), PENTRY_NEWER);
    for (unsigned second = 0; second <= 0xFF; second++) {
        e[1] = (uint8_t)second;
        bool marker = second == 'N' || second == 'F';
        assert_int_equal(pentry_kind_of(e, 2) == PENTRY_NEWER, !marker && second != 'S');
        /* A marker with a payload: a newer binary's. */
        if (marker)
            assert_int_equal(pentry_kind_of(e, 3), PENTRY_NEWER);
    }
    for (unsigned first = 0; first < 0x80; first++) {
        e[0] = (uint8_t)first;
        assert_int_equal(pentry_kind_of(e, sizeof e), PENTRY_BARE_WRITE);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_markers_and_split),
        cmocka_unit_test(test_writes),
        cmocka_unit_test(test_newer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
