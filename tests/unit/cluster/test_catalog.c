/* Unit tests of cluster/catalog: records, lookups, partitions, tags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/catalog.h"

static void make_table(table_info *t, uint32_t id, const char *name, size_t parts,
                       uint64_t first_part)
{
    memset(t, 0, sizeof *t);
    t->schema.table_id = id;
    snprintf(t->schema.name, sizeof t->schema.name, "%s", name);
    t->schema.name_len = strlen(name);
    strcpy(t->schema.hash.name, "pk");
    t->schema.hash.name_len = 2;
    t->schema.hash.type = AV_S;
    t->schema.has_range = true;
    strcpy(t->schema.range.name, "sk");
    t->schema.range.name_len = 2;
    t->schema.range.type = AV_N;
    t->attr_defs[0] = t->schema.hash;
    t->attr_defs[1] = t->schema.range;
    t->n_attr_defs = 2;
    t->status = TABLE_ACTIVE;
    strcpy(t->uuid, "0f8fad5b-d9cb-469f-a165-70867728950e");
    t->creation_time = 1700000000.125;
    t->billing = BILLING_PROVISIONED;
    t->read_capacity = 5;
    t->write_capacity = 7;
    assert_int_equal(catalog_split_even(t, parts, first_part, NULL), 0);
}

static void apply_table(catalog *c, const table_info *t)
{
    buf b;
    buf_init(&b, 0);
    strata_err err;
    assert_int_equal(catalog_encode_table(t, &b, &err), 0);
    assert_int_equal(catalog_apply(c, b.data, b.len, &err), 0);
    buf_free(&b);
}

static void test_roundtrip(void **state)
{
    (void)state;
    catalog *c = catalog_new();
    table_info t;
    make_table(&t, 1, "orders", 4, 1);
    assert_int_equal(catalog_table_set_tag(&t, "env", "prod", NULL), 0);
    assert_int_equal(catalog_table_set_tag(&t, "app", "x", NULL), 0);
    apply_table(c, &t);
    const table_info *got = catalog_find(c, "orders", 6);
    assert_non_null(got);
    assert_int_equal(got->schema.table_id, 1);
    assert_string_equal(got->schema.hash.name, "pk");
    assert_int_equal(got->schema.range.type, AV_N);
    assert_true(got->schema.has_range);
    assert_string_equal(got->uuid, t.uuid);
    assert_true(got->creation_time == 1700000000.125);
    assert_int_equal(got->read_capacity, 5);
    assert_int_equal(got->write_capacity, 7);
    assert_int_equal(got->n_tags, 2);
    assert_string_equal(got->tags[0].key, "app"); /* sorted */
    assert_int_equal(got->n_partitions, 4);
    assert_int_equal(catalog_next_table_id(c), 2);
    assert_int_equal(catalog_next_partition_id(c), 5);
    assert_ptr_equal(catalog_find_id(c, 1), got);
    const table_info *owner = NULL;
    assert_non_null(catalog_find_partition(c, 3, &owner));
    assert_ptr_equal(owner, got);
    assert_null(catalog_find_partition(c, 9, NULL));
    assert_null(catalog_find(c, "order", 5));
    catalog_table_free(&t);
    catalog_free(c);
}

static void test_split_even(void **state)
{
    (void)state;
    table_info t;
    make_table(&t, 3, "tbl", 4, 10);
    assert_int_equal(t.partitions[0].hash_lo, 0);
    assert_int_equal(t.partitions[0].hash_hi, 0x3fffffffffffffffull);
    assert_int_equal(t.partitions[1].hash_lo, 0x4000000000000000ull);
    assert_int_equal(t.partitions[3].hash_hi, UINT64_MAX);
    assert_int_equal(t.partitions[2].id, 12);
    assert_int_equal(t.partitions[2].table_id, 3);
    assert_int_equal(catalog_partition_for_hash(&t, 0)->id, 10);
    assert_int_equal(catalog_partition_for_hash(&t, 0x3fffffffffffffffull)->id, 10);
    assert_int_equal(catalog_partition_for_hash(&t, 0x4000000000000000ull)->id, 11);
    assert_int_equal(catalog_partition_for_hash(&t, UINT64_MAX)->id, 13);
    catalog_table_free(&t);
    make_table(&t, 3, "tbl", 3, 1);
    for (size_t i = 1; i < 3; i++)
        assert_int_equal(t.partitions[i].hash_lo, t.partitions[i - 1].hash_hi + 1);
    assert_int_equal(t.partitions[2].hash_hi, UINT64_MAX);
    catalog_table_free(&t);
    make_table(&t, 3, "tbl", 1, 1);
    assert_int_equal(t.partitions[0].hash_lo, 0);
    assert_int_equal(t.partitions[0].hash_hi, UINT64_MAX);
    strata_err err;
    assert_int_equal(catalog_split_even(&t, 0, 1, &err), -1);
    catalog_table_free(&t);
}

static void test_order_and_drop(void **state)
{
    (void)state;
    catalog *c = catalog_new();
    const char *names[] = {"zeta", "alpha", "Mid", "beta"};
    uint64_t part = 1;
    for (int i = 0; i < 4; i++) {
        table_info t;
        make_table(&t, (uint32_t)i + 1, names[i], 2, part);
        part += 2;
        apply_table(c, &t);
        catalog_table_free(&t);
    }
    assert_int_equal(catalog_count(c), 4);
    const char *want[] = {"Mid", "alpha", "beta", "zeta"};
    int i = 0;
    for (const table_info *t = catalog_next(c, NULL, 0); t != NULL;
         t = catalog_next(c, t->schema.name, t->schema.name_len))
        assert_string_equal(t->schema.name, want[i++]);
    assert_int_equal(i, 4);
    assert_string_equal(catalog_next(c, "alpha", 5)->schema.name, "beta");
    assert_string_equal(catalog_next(c, "b", 1)->schema.name, "beta");
    assert_null(catalog_next(c, "zeta", 4));

    buf b;
    buf_init(&b, 0);
    catalog_change ch;
    assert_int_equal(catalog_encode_drop("beta", 4, &b, NULL), 0);
    assert_int_equal(catalog_record_peek(b.data, b.len, &ch, NULL), 0);
    assert_true(ch.drop);
    assert_int_equal(ch.name_len, 4);
    assert_memory_equal(ch.name, "beta", 4);
    assert_int_equal(catalog_apply(c, b.data, b.len, NULL), 0);
    assert_null(catalog_find(c, "beta", 4));
    assert_int_equal(catalog_count(c), 3);
    /* Ids are never reused after a drop. */
    assert_int_equal(catalog_next_table_id(c), 5);
    assert_int_equal(catalog_next_partition_id(c), 9);
    buf_free(&b);
    catalog_free(c);
}

static void test_replace_and_peek(void **state)
{
    (void)state;
    catalog *c = catalog_new();
    table_info t;
    make_table(&t, 7, "events", 2, 20);
    apply_table(c, &t);
    t.read_capacity = 50;
    buf b;
    buf_init(&b, 0);
    assert_int_equal(catalog_encode_table(&t, &b, NULL), 0);
    catalog_change ch;
    assert_int_equal(catalog_record_peek(b.data, b.len, &ch, NULL), 0);
    assert_false(ch.drop);
    assert_int_equal(ch.table_id, 7);
    assert_int_equal(ch.max_partition_id, 21);
    assert_memory_equal(ch.name, "events", 6);
    assert_int_equal(catalog_apply(c, b.data, b.len, NULL), 0);
    assert_int_equal(catalog_count(c), 1);
    assert_int_equal(catalog_find(c, "events", 6)->read_capacity, 50);
    assert_int_equal(catalog_next_table_id(c), 8);
    catalog_bump_ids(c, 100, 200);
    assert_int_equal(catalog_next_table_id(c), 100);
    assert_int_equal(catalog_next_partition_id(c), 200);
    catalog_bump_ids(c, 1, 1);
    assert_int_equal(catalog_next_table_id(c), 100);
    buf_free(&b);
    catalog_table_free(&t);
    catalog_free(c);
}

static void test_corrupt_records(void **state)
{
    (void)state;
    catalog *c = catalog_new();
    table_info t;
    make_table(&t, 1, "tbl", 2, 1);
    buf b;
    buf_init(&b, 0);
    assert_int_equal(catalog_encode_table(&t, &b, NULL), 0);
    strata_err err;
    /* Every single-byte flip is caught (header, checksum or payload). */
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x20;
        assert_int_equal(catalog_apply(c, b.data, b.len, &err), -1);
        assert_int_equal(err.code, ERR_CORRUPT);
        b.data[i] ^= 0x20;
    }
    /* Every truncation too. */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(catalog_apply(c, b.data, n, &err), -1);
    assert_int_equal(catalog_count(c), 0);
    assert_int_equal(catalog_apply(c, b.data, b.len, &err), 0);
    buf_free(&b);
    catalog_table_free(&t);
    catalog_free(c);
}

static void test_copy_and_tags(void **state)
{
    (void)state;
    table_info t, copy;
    make_table(&t, 1, "tbl", 2, 1);
    assert_int_equal(catalog_table_set_tag(&t, "b", "1", NULL), 0);
    assert_int_equal(catalog_table_set_tag(&t, "a", "2", NULL), 0);
    assert_int_equal(catalog_table_set_tag(&t, "b", "3", NULL), 0);
    assert_int_equal(t.n_tags, 2);
    assert_string_equal(t.tags[1].value, "3");
    assert_int_equal(catalog_table_copy(&t, &copy, NULL), 0);
    catalog_table_remove_tag(&copy, "a");
    catalog_table_remove_tag(&copy, "missing");
    assert_int_equal(copy.n_tags, 1);
    assert_int_equal(t.n_tags, 2);
    assert_ptr_not_equal(copy.partitions, t.partitions);
    assert_int_equal(copy.partitions[1].id, t.partitions[1].id);
    catalog_table_free(&copy);
    catalog_table_free(&t);
}

static void test_names(void **state)
{
    (void)state;
    assert_true(catalog_valid_table_name("abc", 3));
    assert_true(catalog_valid_table_name("a.b-c_D9", 8));
    assert_false(catalog_valid_table_name("ab", 2));
    assert_false(catalog_valid_table_name("a b", 3));
    assert_false(catalog_valid_table_name("abc/", 4));
    char big[300];
    memset(big, 'x', sizeof big);
    assert_true(catalog_valid_table_name(big, 255));
    assert_false(catalog_valid_table_name(big, 256));
    assert_string_equal(table_status_name(TABLE_DELETING), "DELETING");
    assert_string_equal(billing_mode_name(BILLING_PAY_PER_REQUEST), "PAY_PER_REQUEST");
    table_info t;
    make_table(&t, 1, "tbl", 1, 1);
    partition_key_schema ks;
    catalog_key_schema(&t.schema, &ks);
    assert_int_equal(ks.hash_name_len, 2);
    assert_int_equal(ks.range_type, AV_N);
    t.schema.has_range = false;
    catalog_key_schema(&t.schema, &ks);
    assert_null(ks.range_name);
    assert_int_equal(ks.range_type, 0);
    catalog_table_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),       cmocka_unit_test(test_split_even),
        cmocka_unit_test(test_order_and_drop),  cmocka_unit_test(test_replace_and_peek),
        cmocka_unit_test(test_corrupt_records), cmocka_unit_test(test_copy_and_tags),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
