/* Unit tests of cluster/capacity: token buckets, burst credit, adaptive sharing,
 * ceilings, on-demand, live setting changes, counters and hot keys. Exact figures: the
 * module has no clock, every test drives the time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/capacity.h"

#define U CAP_NANO /* one capacity unit */

static cap_table_conf prov(int64_t rcu, int64_t wcu, uint32_t n)
{
    return (cap_table_conf){.rcu = rcu, .wcu = wcu, .n_partitions = n, .n_local = n};
}

/* One operation of `units` on a partition at `now`: 1 admitted, 0 throttled. */
static int op(capacity *c, const cap_table_conf *conf, uint64_t part, cap_kind k, int64_t nano,
              uint64_t now)
{
    strata_err err;
    if (capacity_admit(c, 1, part, conf, k, 0, now, &err) < 0) {
        assert_int_equal(err.code, ERR_THROUGHPUT_EXCEEDED);
        return 0;
    }
    capacity_charge(c, 1, part, k, nano, 0, true, part * 7919, now);
    return 1;
}

/* Operations admitted at one instant until the first refusal. */
static int drain(capacity *c, const cap_table_conf *conf, uint64_t part, cap_kind k, int64_t nano,
                 uint64_t now)
{
    int n = 0;
    while (op(c, conf, part, k, nano, now))
        n++;
    return n;
}

/* Operations admitted trying every millisecond of (from, to]. */
static int over(capacity *c, const cap_table_conf *conf, uint64_t part, cap_kind k, int64_t nano,
                uint64_t from, uint64_t to)
{
    int n = 0;
    for (uint64_t t = from + 1; t <= to; t++)
        n += op(c, conf, part, k, nano, t);
    return n;
}

static void test_burst_credit(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = prov(1, 2, 1);
    /* A new table holds 300 s of its rate: 600 writes of 1 WCU at once. */
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 1000), 600);
    /* 500 ms later: 1 WCU more. */
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 1500), 1);
    /* Idle for an hour: the credit stops at 300 s (600), not 7200. */
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 1500 + 3600000), 600);
    /* Reads have their own buckets: 1 RCU x 300 s; eventual reads cost 0.5. */
    assert_int_equal(drain(c, &conf, 1, CAP_READ, capacity_nano(0.5), 1000), 600);
    cap_counters n;
    assert_true(capacity_partition_stats(c, 1, &n));
    assert_int_equal(n.consumed_nano[CAP_WRITE], 1201 * U);
    assert_int_equal(n.consumed_nano[CAP_READ], 300 * U);
    assert_int_equal(n.throttle_events[CAP_WRITE], 3);
    assert_int_equal(n.throttle_events[CAP_READ], 1);
    capacity_free(c);
}

static void test_steady_rate(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = prov(1, 2, 1);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 600);
    /* A client trying every millisecond for 10 s gets exactly 2 WCU/s. */
    assert_int_equal(over(c, &conf, 1, CAP_WRITE, U, 0, 10000), 20);
    /* 3 WCU items: admitted while tokens remain, then the debt is repaid. */
    int ok = over(c, &conf, 1, CAP_WRITE, 3 * U, 10000, 40000);
    assert_int_equal(ok, 20);
    capacity_free(c);
}

static void test_adaptive_sharing(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    /* 2 WCU over 4 partitions: 0.5 WCU/s and 150 units of credit each. */
    cap_table_conf conf = prov(1, 2, 4);
    /* All four busy at once: each gets its own 150. */
    int got[4] = {0, 0, 0, 0};
    for (int round = 0; round < 200; round++)
        for (int p = 0; p < 4; p++)
            got[p] += op(c, &conf, 11 + (uint64_t)p, CAP_WRITE, U, 0);
    for (int p = 0; p < 4; p++)
        assert_int_equal(got[p], 150);
    capacity_free(c);

    c = capacity_new();
    /* A hot partition takes its own 150 and borrows the 450 the others left unused. */
    assert_int_equal(drain(c, &conf, 10, CAP_WRITE, U, 0), 600);
    /* What was lent is gone: the others cannot spend it again. */
    assert_int_equal(drain(c, &conf, 11, CAP_WRITE, U, 0), 0);
    assert_int_equal(drain(c, &conf, 12, CAP_WRITE, U, 0), 0);
    /* Alone, the hot partition runs at the table's whole rate (2/s), not its share. */
    assert_int_equal(over(c, &conf, 10, CAP_WRITE, U, 0, 10000), 20);
    /* The table's total holds: two busy partitions share 2/s. */
    int ok = 0;
    for (uint64_t t = 10001; t <= 20000; t++) {
        ok += op(c, &conf, 10, CAP_WRITE, U, t);
        ok += op(c, &conf, 11, CAP_WRITE, U, t);
    }
    assert_true(ok >= 20 && ok <= 21);
    capacity_free(c);
}

/* Cluster mode: the node's share of the table's rate, set from outside (capshare.h). */
static void test_node_share(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    /* 10 WCU over 4 partitions; this node serves one: 2.5/s and 750 units of credit. */
    cap_table_conf conf = prov(10, 10, 4);
    conf.n_local = 1;
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 750);
    assert_int_equal(over(c, &conf, 1, CAP_WRITE, U, 0, 4000), 10);
    /* The cluster gives this node the whole table: 10/s here. */
    capacity_set_node_share(c, 1, CAP_WRITE, CAP_PPM, 4000);
    assert_int_equal(over(c, &conf, 1, CAP_WRITE, U, 4000, 8000), 40);
    /* A quarter again: 2.5/s, and the credit held is 300 s of the share (750). */
    capacity_set_node_share(c, 1, CAP_WRITE, CAP_PPM / 4, 8000);
    assert_int_equal(over(c, &conf, 1, CAP_WRITE, U, 8000, 12000), 10);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 12000 + 3600000), 750);
    /* With a share the pool alone admits: another partition's own bucket (full, never
     * touched) does not, so replicas serving one partition on several nodes cannot each
     * spend its share. */
    assert_int_equal(drain(c, &conf, 2, CAP_WRITE, U, 12000 + 3600000), 0);
    /* A share above one is one: reads (first touched now) hold 300 s of 10 RCU. */
    capacity_set_node_share(c, 1, CAP_READ, 2 * CAP_PPM, 12000 + 3600000);
    assert_int_equal(drain(c, &conf, 1, CAP_READ, U, 12000 + 3600000), 3000);
    assert_int_equal(over(c, &conf, 1, CAP_READ, U, 3612000, 3616000), 40);
    /* A share that drops keeps the credit held (300 s of the whole table at most): demand
     * moving between nodes must not lose burst credit. */
    uint64_t later = 3616000 + 3600000;
    capacity_set_node_share(c, 1, CAP_READ, CAP_PPM / 4, later);
    assert_int_equal(drain(c, &conf, 1, CAP_READ, U, later), 3000);
    assert_int_equal(over(c, &conf, 1, CAP_READ, U, later, later + 4000), 10);
    /* Unknown tables are left alone. */
    capacity_set_node_share(c, 99, CAP_WRITE, CAP_PPM, 0);
    capacity_free(c);

    /* On demand: shares do not apply (splits, not shares, give such a table room). */
    c = capacity_new();
    cap_table_conf od = {.on_demand = true, .n_partitions = 4, .n_local = 1};
    assert_int_equal(op(c, &od, 1, CAP_WRITE, U, 0), 1);
    capacity_set_node_share(c, 1, CAP_WRITE, 1, 0);
    assert_int_equal(drain(c, &od, 1, CAP_WRITE, U, 0) + 1, CAP_PART_MAX_WRITE);
    capacity_free(c);
}

/* What each table wanted: consumed, plus what its share refused (not its ceiling). */
static void test_demand_collect(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    capacity_set_ceilings(c, 0, 5);
    cap_table_conf conf = prov(10, 1000, 1);
    strata_err err;
    cap_demand d[4];
    assert_int_equal(capacity_demand_collect(c, d, 4), 0);
    /* The ceiling (5/s) refuses: no share would help, so that is not wanted. */
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 5);
    assert_int_equal(capacity_admit(c, 1, 1, &conf, CAP_WRITE, 2 * U, 0, &err), -1);
    assert_int_equal(op(c, &conf, 1, CAP_READ, U / 2, 0), 1);
    assert_int_equal(capacity_demand_collect(c, d, 4), 1);
    assert_int_equal(d[0].table_id, 1);
    assert_int_equal(d[0].nano[CAP_WRITE], 5 * U);
    assert_int_equal(d[0].nano[CAP_READ], U / 2);
    /* The table's share refuses (its 300 units of credit spent): the reservation counts. */
    capacity_free(c);
    c = capacity_new();
    conf = prov(10, 1, 1);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 300);
    assert_int_equal(capacity_admit(c, 1, 1, &conf, CAP_WRITE, 3 * U, 0, &err), -1);
    assert_int_equal(err.code, ERR_THROUGHPUT_EXCEEDED);
    assert_int_equal(capacity_demand_collect(c, d, 4), 1);
    /* 300 consumed and 3 refused (drain's own refusal reserved nothing). */
    assert_int_equal(d[0].nano[CAP_WRITE], 303 * U);
    /* Idle: nothing. */
    assert_int_equal(capacity_demand_collect(c, d, 4), 0);
    /* Refusals count up to the units consumed plus one: 100 refused reservations of 1 unit
     * with nothing consumed are 1 unit wanted; with 2 consumed, 2 + 3. */
    for (int i = 0; i < 100; i++)
        assert_int_equal(capacity_admit(c, 1, 1, &conf, CAP_WRITE, U, 0, &err), -1);
    assert_int_equal(capacity_demand_collect(c, d, 4), 1);
    assert_int_equal(d[0].nano[CAP_WRITE], U);
    assert_int_equal(over(c, &conf, 1, CAP_WRITE, U, 0, 2000), 2);
    for (int i = 0; i < 100; i++)
        assert_int_equal(capacity_admit(c, 1, 1, &conf, CAP_WRITE, U, 2000, &err), -1);
    assert_int_equal(capacity_demand_collect(c, d, 4), 1);
    assert_int_equal(d[0].nano[CAP_WRITE], 2 * U + 3 * U);
    capacity_free(c);
}

static void test_partition_ceiling(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    /* 40,000 WCU over 4 partitions is 10,000 per partition, but one serves 1,000/s. */
    cap_table_conf conf = prov(40000, 40000, 4);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 1000);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 500), 500);
    /* Reads: 3,000 RCU per partition. */
    assert_int_equal(drain(c, &conf, 1, CAP_READ, U, 0), 3000);
    /* Another partition has its own ceiling. */
    assert_int_equal(drain(c, &conf, 2, CAP_WRITE, U, 0), 1000);
    capacity_free(c);
}

/* throttle = false: nothing is refused, consumption is still counted. */
static void test_lenient(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    capacity_set_enforcing(c, false);
    cap_table_conf conf = prov(1, 1, 1);
    int ok = 0;
    for (int i = 0; i < 5000; i++)
        ok += op(c, &conf, 1, CAP_WRITE, U, 0);
    assert_int_equal(ok, 5000);
    cap_counters n;
    assert_true(capacity_partition_stats(c, 1, &n));
    assert_int_equal(n.throttle_events[CAP_WRITE], 0);
    capacity_set_enforcing(c, true);
    assert_false(op(c, &conf, 1, CAP_WRITE, U, 0));
    capacity_free(c);
}

static void test_on_demand(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = {.on_demand = true, .n_partitions = 16, .n_local = 16};
    /* Previous peak 4,000 WCU: twice that (8,000) at once, though 16 partitions could
     * take 16,000 under their ceilings. 500 per partition, round robin. */
    int ok = 0;
    for (int round = 0; round < 1000; round++)
        for (uint64_t p = 1; p <= 16; p++)
            ok += op(c, &conf, p, CAP_WRITE, U, 0);
    assert_int_equal(ok, 8000);
    /* One second later the peak is 8,000: up to 16,000 absorbed, the ceilings bind. */
    ok = 0;
    for (int round = 0; round < 2000; round++)
        for (uint64_t p = 1; p <= 16; p++)
            ok += op(c, &conf, p, CAP_WRITE, U, 1000);
    assert_true(ok > 8000);
    assert_true(ok <= 16000);
    /* The ceiling applies on demand too: one partition, 1,000 WCU per second. */
    capacity *d = capacity_new();
    cap_table_conf one = {.on_demand = true, .n_partitions = 4, .n_local = 4};
    assert_int_equal(drain(d, &one, 1, CAP_WRITE, U, 0), 1000);
    strata_err err;
    assert_int_equal(capacity_admit(d, 1, 1, &one, CAP_WRITE, 0, 0, &err), -1);
    assert_int_equal(err.code, ERR_THROUGHPUT_EXCEEDED);
    assert_non_null(strstr(err.msg, "Throughput exceeds the current capacity"));
    capacity_free(d);
    capacity_free(c);
}

static void test_update_live(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = prov(1, 1, 1);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 300);
    strata_err err;
    assert_int_equal(capacity_admit(c, 1, 1, &conf, CAP_WRITE, 0, 0, &err), -1);
    assert_string_equal(err.msg, "The level of configured provisioned throughput for the table was "
                                 "exceeded. Consider increasing your provisioning level with the "
                                 "UpdateTable API.");
    /* UpdateTable to 100 WCU at t = 1 s: the second before counted at 1 WCU, the next
     * second at 100. */
    conf.wcu = 100;
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 1000), 1);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 2000), 100);
    /* A provisioned table without units (not settable through the API) is not limited. */
    cap_table_conf none = prov(0, 0, 1);
    assert_int_equal(capacity_admit(c, 2, 9, &none, CAP_WRITE, 5000 * U, 0, &err), 0);
    assert_int_equal(capacity_admit(c, 2, 9, &none, CAP_WRITE, 5000 * U, 0, &err), 0);
    /* Switch to on-demand: full on-demand buckets, the ceiling (1,000) binds. */
    cap_table_conf od = {.on_demand = true, .n_partitions = 1, .n_local = 1};
    assert_int_equal(drain(c, &od, 1, CAP_WRITE, U, 3000), 1000);
    /* Back to provisioned, 1 WCU, once the ceiling refilled: full again, 300 s of the
     * new rate. */
    conf.wcu = 1;
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 4000), 300);
    capacity_free(c);
}

static void test_unseen_partitions_lend(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = prov(1, 2, 4); /* 0.5 WCU/s and 150 credit per partition */
    /* Only partition 1 is ever touched: it borrows the other three's credit. */
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 600);
    /* A partition seen later gets what is left of the unseen shares: nothing. */
    assert_int_equal(drain(c, &conf, 2, CAP_WRITE, U, 0), 0);
    /* 10 s later: 20 units over the table, all of them for partition 2 if it asks. */
    assert_int_equal(drain(c, &conf, 2, CAP_WRITE, U, 10000), 20);
    capacity_free(c);
}

static void test_reservation(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = prov(1, 1, 1);
    strata_err err;
    /* 300 units of credit; operations admitted together, none finished yet: each takes
     * its 10-unit estimate at once, so only 30 get in. */
    int in = 0;
    while (capacity_admit(c, 1, 1, &conf, CAP_WRITE, 10 * U, 0, &err) == 0)
        in++;
    assert_int_equal(in, 30);
    /* They turn out to cost 8 each: 60 units come back, 60 more writes of 1 unit. */
    for (int i = 0; i < 30; i++)
        capacity_charge(c, 1, 1, CAP_WRITE, 8 * U, 10 * U, false, 0, 0);
    assert_int_equal(capacity_share_tokens(c, 1, CAP_WRITE), 60 * U);
    assert_int_equal(drain(c, &conf, 1, CAP_WRITE, U, 0), 60);
    cap_counters n;
    assert_true(capacity_partition_stats(c, 1, &n));
    assert_int_equal(n.consumed_nano[CAP_WRITE], 300 * U);
    capacity_free(c);
}

static void test_hot_key_and_metrics(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    cap_table_conf conf = prov(100, 100, 1);
    for (int i = 0; i < 100; i++) {
        uint64_t h = i % 10 < 8 ? 42 : (uint64_t)i; /* 80% on one key */
        assert_int_equal(capacity_admit(c, 1, 5, &conf, CAP_WRITE, 0, 0, NULL), 0);
        capacity_charge(c, 1, 5, CAP_WRITE, U, 0, true, h, 0);
    }
    uint64_t hash;
    unsigned pct;
    assert_true(capacity_hot_key(c, 5, &hash, &pct));
    assert_int_equal(hash, 42);
    assert_true(pct >= 78 && pct <= 80);
    capacity_note_throttled_request(c, 1);

    catalog *cat = catalog_new();
    table_info t;
    memset(&t, 0, sizeof t);
    t.schema.table_id = 1;
    strcpy(t.schema.name, "Hot");
    t.schema.name_len = 3;
    strcpy(t.schema.hash.name, "pk");
    t.schema.hash.name_len = 2;
    t.schema.hash.type = AV_S;
    t.attr_defs[0] = t.schema.hash;
    t.n_attr_defs = 1;
    t.read_capacity = 100;
    t.write_capacity = 100;
    assert_int_equal(catalog_split_even(&t, 1, 5, NULL), 0);
    buf rec;
    buf_init(&rec, 0);
    assert_int_equal(catalog_encode_table(&t, &rec, NULL), 0);
    assert_int_equal(catalog_apply(cat, rec.data, rec.len, NULL), 0);
    buf out;
    buf_init(&out, 0);
    capacity_metrics_text(c, cat, &out);
    buf_put_u8(&out, 0);
    const char *m = (const char *)out.data;
    assert_non_null(strstr(m, "ConsumedWriteCapacityUnits{table=\"Hot\"} 100\n"));
    assert_non_null(strstr(m, "ConsumedWriteCapacityUnits{table=\"Hot\",partition=\"5\"} 100\n"));
    assert_non_null(strstr(m, "ThrottledRequests{table=\"Hot\"} 1\n"));
    assert_non_null(strstr(m, "ProvisionedWriteCapacityUnits{table=\"Hot\"} 100\n"));
    assert_non_null(
        strstr(m, "HotKeyPercent{table=\"Hot\",partition=\"5\",key_hash=\"000000000000002a\"}"));
    buf_reset(&out);
    capacity_table_json(c, catalog_find_id(cat, 1), &out);
    buf_put_u8(&out, 0);
    assert_non_null(strstr((const char *)out.data, "\"consumed\":{\"read\":0,\"write\":100}"));
    /* Dropped tables lose their state. */
    buf_reset(&rec);
    assert_int_equal(catalog_encode_drop("Hot", 3, &rec, NULL), 0);
    assert_int_equal(catalog_apply(cat, rec.data, rec.len, NULL), 0);
    buf_reset(&out);
    capacity_metrics_text(c, cat, &out);
    cap_counters n;
    assert_false(capacity_partition_stats(c, 5, &n));
    buf_free(&out);
    buf_free(&rec);
    catalog_table_free(&t);
    catalog_free(cat);
    capacity_free(c);
}

/* One write of 1 WCU on partition 3 at `now` with key hash `h`: 1 admitted, 0 refused. */
static int put(capacity *c, const cap_table_conf *conf, uint64_t h, uint64_t now)
{
    if (capacity_admit(c, 1, 3, conf, CAP_WRITE, 0, now, NULL) < 0)
        return 0;
    capacity_charge(c, 1, 3, CAP_WRITE, U, 0, true, h, now);
    return 1;
}

/* Writes every `every` ms over (from, to], keys spread over the hash space (or one key). */
static int writes(capacity *c, const cap_table_conf *conf, uint64_t from, uint64_t to,
                  uint64_t every, bool one_key)
{
    int n = 0;
    for (uint64_t t = from + every; t <= to; t += every)
        n += put(c, conf, one_key ? 0x5555 : t * 0x9E3779B97F4A7C15ull, t);
    return n;
}

static void test_heat(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    capacity_set_ceilings(c, 30, 10); /* 10 WCU per partition */
    cap_table_conf conf = {.on_demand = true, .n_partitions = 1, .n_local = 1};
    /* 20 writes/s against a ceiling of 10: refused, hot from the first full window on. */
    int ok = writes(c, &conf, 0, 6000, 50, false);
    assert_true(ok >= 60 && ok <= 75); /* ~10/s after the first second's full bucket */
    uint64_t hot = capacity_hot_ms(c, 3, 6000);
    assert_true(hot >= 4000 && hot <= 6000);
    uint64_t at = 0;
    assert_int_equal(capacity_split_point(c, 3, 0, UINT64_MAX, &at), SPLIT_POINT_FOUND);
    assert_true(at > 0x4000000000000000ull && at < 0xC000000000000000ull);
    /* Half the ceiling (5/s): cool after the next window closes. */
    writes(c, &conf, 6000, 9000, 200, false);
    assert_int_equal(capacity_hot_ms(c, 3, 9000), 0);
    /* Hot again, then idle: an idle window ends the run. */
    writes(c, &conf, 9000, 13000, 50, false);
    assert_true(capacity_hot_ms(c, 3, 13000) >= 2000);
    assert_int_equal(capacity_hot_ms(c, 3, 15500), 0);
    /* A restart of the story (after a split): nothing hot, nothing sampled. */
    writes(c, &conf, 15500, 19000, 50, false);
    assert_true(capacity_hot_ms(c, 3, 19000) >= 1000);
    capacity_heat_reset(c, 3);
    assert_int_equal(capacity_hot_ms(c, 3, 19000), 0);
    assert_int_equal(capacity_split_point(c, 3, 0, UINT64_MAX, &at), SPLIT_POINT_TOO_FEW);
    /* One key taking it all: hot, and a hot key, not a split point. */
    writes(c, &conf, 19000, 25000, 50, true);
    assert_true(capacity_hot_ms(c, 3, 25000) >= 4000);
    assert_int_equal(capacity_split_point(c, 3, 0, UINT64_MAX, &at), SPLIT_POINT_HOT_KEY);
    assert_int_equal(at, 0x5555);
    assert_int_equal(capacity_hot_ms(c, 99, 25000), 0); /* never seen */
    capacity_free(c);
}

/* With throttling off nothing is refused: consumption at the ceiling is what is hot. */
static void test_heat_lenient(void **state)
{
    (void)state;
    capacity *c = capacity_new();
    capacity_set_enforcing(c, false);
    capacity_set_ceilings(c, 0, 10); /* 0: DynamoDB's read ceiling */
    cap_table_conf conf = {.on_demand = true, .n_partitions = 1, .n_local = 1};
    assert_int_equal(writes(c, &conf, 0, 5000, 50, false), 100);
    assert_true(capacity_hot_ms(c, 3, 5000) >= 3000);
    /* 7/s is under 80% of 10: not hot. */
    capacity_free(c);
    c = capacity_new();
    capacity_set_enforcing(c, false);
    capacity_set_ceilings(c, 0, 10);
    writes(c, &conf, 0, 5000, 143, false);
    assert_int_equal(capacity_hot_ms(c, 3, 5000), 0);
    capacity_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_credit),
        cmocka_unit_test(test_steady_rate),
        cmocka_unit_test(test_adaptive_sharing),
        cmocka_unit_test(test_node_share),
        cmocka_unit_test(test_demand_collect),
        cmocka_unit_test(test_partition_ceiling),
        cmocka_unit_test(test_lenient),
        cmocka_unit_test(test_on_demand),
        cmocka_unit_test(test_update_live),
        cmocka_unit_test(test_unseen_partitions_lend),
        cmocka_unit_test(test_reservation),
        cmocka_unit_test(test_hot_key_and_metrics),
        cmocka_unit_test(test_heat),
        cmocka_unit_test(test_heat_lenient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
