/* Unit tests for cluster/capshare.c: the demand message codec, refusal of malformed
 * messages (nothing recorded), freshness, and the shares: saturated tables shared by
 * demand, spare capacity by weight, shares that add up to the rate on every node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/capshare.h"

/* Node `from` tells `s` its wants for one table at now_ms (period: its second). */
static void hear(capshare *s, uint64_t from, uint32_t table, int64_t read, int64_t write,
                 uint64_t now_ms)
{
    capshare_want w = {.table_id = table, .milli = {[CAP_READ] = read, [CAP_WRITE] = write}};
    buf b;
    buf_init(&b, 0);
    capshare_encode(now_ms / 1000, &w, 1, &b);
    strata_err err;
    assert_int_equal(capshare_receive(s, from, b.data, b.len, now_ms, &err), 0);
    buf_free(&b);
}

/* Self's own figure for one table at now_ms (first wanted: taken as it is). */
static void own(capshare *s, uint64_t self, uint32_t table, int64_t read, int64_t write,
                uint64_t now_ms)
{
    capshare_want w = {.table_id = table, .milli = {[CAP_READ] = read, [CAP_WRITE] = write}};
    capshare_want out[4];
    capshare_own(s, self, &w, 1, out, 4, now_ms / 1000, now_ms);
}

/* Node `self`'s share at now_ms, from the figures of its second. */
static uint32_t share(const capshare *s, uint64_t self, uint32_t table, cap_kind k, int64_t rate,
                      const capshare_weight *w, size_t n, uint64_t now_ms)
{
    return capshare_share(s, self, table, k, rate, w, n, now_ms / 1000, now_ms);
}

/* Node 1's capshare_own at now_ms, labelled with its second. */
static size_t own_all(capshare *s, const capshare_want *raw, size_t n, capshare_want *out,
                      size_t max, uint64_t now_ms)
{
    return capshare_own(s, 1, raw, n, out, max, now_ms / 1000, now_ms);
}

static void test_want_of(void **state)
{
    (void)state;
    /* 3 units over 2 s: 1.5 units/s = 1500 milli; 0.5 unit over 1 s: 500. */
    cap_demand d = {.table_id = 4, .nano = {[CAP_READ] = CAP_NANO / 2, [CAP_WRITE] = 3 * CAP_NANO}};
    capshare_want w = capshare_want_of(&d, 2000);
    assert_int_equal(w.table_id, 4);
    assert_int_equal(w.milli[CAP_WRITE], 1500);
    assert_int_equal(w.milli[CAP_READ], 250);
    d.nano[CAP_READ] = -5; /* a give-back larger than the charges: no want, not negative */
    assert_int_equal(capshare_want_of(&d, 1000).milli[CAP_READ], 0);
}

static void test_saturated_by_demand(void **state)
{
    (void)state;
    capshare *s = capshare_new();
    capshare_weight w[3] = {{1, 64}, {2, 1}, {3, 1}};
    /* Table 7, 20 WCU (20000 milli). Node 1 wants 60, node 2 heard wanting 20, node 3 0. */
    hear(s, 2, 7, 0, 20000, 1000);
    hear(s, 3, 7, 0, 0, 1000);
    own(s, 1, 7, 0, 60000, 1500);
    uint32_t mine = share(s, 1, 7, CAP_WRITE, 20000, w, 3, 1500);
    assert_int_equal(mine, CAP_PPM * 3 / 4);
    /* Node 2's view of the same figures: its own want and node 1's. */
    capshare *s2 = capshare_new();
    hear(s2, 1, 7, 0, 60000, 1000);
    hear(s2, 3, 7, 0, 0, 1000);
    own(s2, 2, 7, 0, 20000, 1500);
    assert_int_equal(share(s2, 2, 7, CAP_WRITE, 20000, w, 3, 1500), CAP_PPM / 4);
    /* Reads are another kind: nobody wants any, so spare by weight (64 of 66). */
    assert_int_equal(share(s, 1, 7, CAP_READ, 5000, w, 3, 1500), (uint32_t)(CAP_PPM * 64.0 / 66.0));
    capshare_free(s2);
    capshare_free(s);
}

static void test_spare_by_weight(void **state)
{
    (void)state;
    capshare *s = capshare_new();
    capshare_weight w[3] = {{1, 2}, {2, 1}, {3, 1}};
    /* Rate 100 units/s; node 2 wants 20, node 3 nothing; node 1 wants 40: 40 spare,
     * shared 2:1:1 -> node 1 gets 40 + 20 = 60%, node 2 20 + 10 = 30%, node 3 10%. */
    hear(s, 2, 9, 20000, 0, 0);
    own(s, 1, 9, 40000, 0, 0);
    assert_int_equal(share(s, 1, 9, CAP_READ, 100000, w, 3, 0), CAP_PPM * 60 / 100);
    capshare *s2 = capshare_new(), *s3 = capshare_new();
    hear(s2, 1, 9, 40000, 0, 0);
    own(s2, 2, 9, 20000, 0, 0);
    hear(s3, 1, 9, 40000, 0, 0);
    hear(s3, 2, 9, 20000, 0, 0);
    uint32_t p2 = share(s2, 2, 9, CAP_READ, 100000, w, 3, 0);
    uint32_t p3 = share(s3, 3, 9, CAP_READ, 100000, w, 3, 0);
    assert_int_equal(p2, CAP_PPM * 30 / 100);
    assert_int_equal(p3, CAP_PPM * 10 / 100);
    /* Every node's view agrees: the shares add up to the whole rate. */
    assert_int_equal(CAP_PPM * 60 / 100 + p2 + p3, CAP_PPM);
    /* A node missing from the weights gets its want alone. */
    capshare *s5 = capshare_new();
    hear(s5, 1, 9, 40000, 0, 0);
    hear(s5, 2, 9, 20000, 0, 0);
    own(s5, 5, 9, 10000, 0, 0);
    assert_int_equal(share(s5, 5, 9, CAP_READ, 100000, w, 3, 0), CAP_PPM * 10 / 100);
    /* No weights at all: the spare (30) in equal parts of the nodes heard and self. */
    assert_int_equal(share(s5, 5, 9, CAP_READ, 100000, NULL, 0, 0), CAP_PPM * 20 / 100);
    capshare_free(s5);
    /* A table without a rate is never limited. */
    assert_int_equal(share(s, 1, 9, CAP_READ, 0, w, 3, 0), CAP_PPM);
    capshare_free(s2);
    capshare_free(s3);
    capshare_free(s);
}

static void test_freshness(void **state)
{
    (void)state;
    capshare *s = capshare_new();
    capshare_weight w[2] = {{1, 1}, {2, 1}};
    /* Figures of second 1 (period rules aside: see test_periods), node 2's arriving at
     * 1000 ms, node 1's own made at 1000 + CAPSHARE_FRESH_MS. */
    hear(s, 2, 3, 0, 30000, 1000);
    capshare_want mine = {.table_id = 3, .milli = {0, 10000}}, out[1];
    capshare_own(s, 1, &mine, 1, out, 1, 1, 1000 + CAPSHARE_FRESH_MS);
    /* Saturated while node 2's figure is fresh: 10 of 40. */
    assert_int_equal(capshare_share(s, 1, 3, CAP_WRITE, 20000, w, 2, 1, 1000 + CAPSHARE_FRESH_MS),
                     CAP_PPM / 4);
    /* Stale: node 2 is down or idle; node 1 wants 10 of 20 and half the spare 10. */
    assert_int_equal(capshare_share(s, 1, 3, CAP_WRITE, 20000, w, 2, 1, 1001 + CAPSHARE_FRESH_MS),
                     CAP_PPM * 3 / 4);
    /* A newer message replaces the figure; other tables are separate. */
    hear(s, 2, 3, 0, 10000, 2000 + CAPSHARE_FRESH_MS);
    hear(s, 2, 4, 0, 99000, 2000 + CAPSHARE_FRESH_MS);
    assert_int_equal(capshare_count(s), 3);
    capshare_own(s, 1, &mine, 1, out, 1, (2000 + CAPSHARE_FRESH_MS) / 1000,
                 2000 + CAPSHARE_FRESH_MS);
    assert_int_equal(share(s, 1, 3, CAP_WRITE, 20000, w, 2, 2000 + CAPSHARE_FRESH_MS), CAP_PPM / 2);
    capshare_expire(s, 3000 + 2 * CAPSHARE_FRESH_MS + 1);
    assert_int_equal(capshare_count(s), 0);
    capshare_free(s);
}

/* Self's figures: averaged over the periods, sent while wanted, once at zero, then gone. */
static void test_own_smoothing(void **state)
{
    (void)state;
    capshare *s = capshare_new();
    capshare_want raw[2] = {{.table_id = 3, .milli = {0, 8000}},
                            {.table_id = 5, .milli = {400, 0}}};
    capshare_want out[4];
    assert_int_equal(own_all(s, raw, 2, out, 4, 1000), 2);
    assert_int_equal(out[0].table_id, 3);
    assert_int_equal(out[0].milli[CAP_WRITE], 8000); /* first wanted: as it is */
    assert_int_equal(out[1].milli[CAP_READ], 400);
    /* Next period table 3 wants 0 and table 5 is not named: halves. */
    raw[0].milli[CAP_WRITE] = 0;
    assert_int_equal(own_all(s, raw, 1, out, 4, 2000), 2);
    assert_int_equal(out[0].milli[CAP_WRITE], 4000);
    assert_int_equal(out[1].milli[CAP_READ], 200);
    /* Only `max` are written (the rest next time); the figures still move. */
    assert_int_equal(own_all(s, NULL, 0, out, 1, 3000), 1);
    assert_int_equal(out[0].milli[CAP_WRITE], 2000);
    /* Fading: table 5 reaches 0 first, sent once at zero, then forgotten. */
    for (uint64_t t = 4000; t < 12000; t += 1000)
        own_all(s, NULL, 0, out, 4, t);
    assert_int_equal(capshare_count(s), 1); /* table 3: 2000 >> 8 = 7 */
    size_t n = 0;
    for (uint64_t t = 12000; capshare_count(s) > 0; t += 1000)
        n = own_all(s, NULL, 0, out, 4, t);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].table_id, 3);
    assert_int_equal(out[0].milli[CAP_WRITE], 0);
    assert_int_equal(own_all(s, NULL, 0, out, 4, 99000), 0);
    capshare_free(s);
}

/* Figures of one period: every node's share comes from the same snapshot, even when a
 * node's newer figure has already arrived; too old a figure stands in no more. */
static void test_periods(void **state)
{
    (void)state;
    capshare_weight w[2] = {{1, 1}, {2, 1}};
    capshare *s1 = capshare_new(), *s2 = capshare_new();
    /* Second 10: node 1 wants 30, node 2 wants 10; the rate is 20. */
    own(s1, 1, 4, 0, 30000, 10000);
    hear(s2, 1, 4, 0, 30000, 10000);
    own(s2, 2, 4, 0, 10000, 10000);
    hear(s1, 2, 4, 0, 10000, 10000);
    uint32_t p1 = share(s1, 1, 4, CAP_WRITE, 20000, w, 2, 10300);
    uint32_t p2 = share(s2, 2, 4, CAP_WRITE, 20000, w, 2, 10300);
    assert_int_equal(p1, CAP_PPM * 3 / 4);
    assert_int_equal(p1 + p2, CAP_PPM);
    /* A clock one second ahead stands in; two seconds ahead does not (no figure: the
     * rate by weight, half). */
    assert_int_equal(capshare_share(s1, 1, 4, CAP_WRITE, 20000, w, 2, 9, 10300), CAP_PPM * 3 / 4);
    assert_int_equal(capshare_share(s1, 1, 4, CAP_WRITE, 20000, w, 2, 8, 10300), CAP_PPM / 2);
    /* Figures from CAPSHARE_LATE seconds before stand in; one more second, they do not. */
    assert_int_equal(capshare_share(s1, 1, 4, CAP_WRITE, 20000, w, 2, 10 + CAPSHARE_LATE, 10300),
                     CAP_PPM * 3 / 4);
    assert_int_equal(capshare_share(s1, 1, 4, CAP_WRITE, 20000, w, 2, 11 + CAPSHARE_LATE, 10300),
                     CAP_PPM / 2);
    /* Node 1 sends again (second 11 + CAPSHARE_LATE): alone now, its 30 above the rate. */
    capshare_want again = {.table_id = 4, .milli = {0, 30000}}, out[1];
    capshare_own(s1, 1, &again, 1, out, 1, 11 + CAPSHARE_LATE, 10300);
    assert_int_equal(capshare_share(s1, 1, 4, CAP_WRITE, 20000, w, 2, 11 + CAPSHARE_LATE, 10300),
                     CAP_PPM);
    capshare_free(s1);
    capshare_free(s2);
}

static void refused(const uint8_t *bytes, size_t len)
{
    capshare *s = capshare_new();
    strata_err err;
    assert_int_equal(capshare_receive(s, 2, bytes, len, 0, &err), -1);
    assert_int_equal(err.code, ERR_CORRUPT);
    assert_int_equal(capshare_count(s), 0);
    capshare_free(s);
}

static void test_malformed(void **state)
{
    (void)state;
    capshare_want w[2] = {{.table_id = 1, .milli = {5, 6}}, {.table_id = 2, .milli = {7, 8}}};
    buf b;
    buf_init(&b, 0);
    capshare_encode(7, w, 2, &b);
    for (size_t cut = 0; cut < b.len; cut++)
        refused(b.data, cut); /* truncated anywhere */
    buf_put_u8(&b, 0);
    refused(b.data, b.len); /* trailing byte */
    b.data[0] = 2;
    refused(b.data, b.len - 1); /* unknown version */
    buf_reset(&b);
    buf_put_u8(&b, 1);
    buf_put_varint(&b, 7);
    buf_put_varint(&b, 1);
    buf_put_varint(&b, (uint64_t)UINT32_MAX + 1); /* no such table id */
    buf_put_varint(&b, 0);
    buf_put_varint(&b, 0);
    refused(b.data, b.len);
    buf_reset(&b);
    buf_put_u8(&b, 1);
    buf_put_varint(&b, 7);
    buf_put_varint(&b, 1);
    buf_put_varint(&b, 1);
    buf_put_varint(&b, (uint64_t)CAPSHARE_MAX_MILLI + 1); /* an absurd want */
    buf_put_varint(&b, 0);
    refused(b.data, b.len);
    buf_reset(&b);
    buf_put_u8(&b, 1);
    buf_put_varint(&b, 7);
    buf_put_varint(&b, CAPSHARE_MAX_ENTRIES + 1); /* more entries than a message holds */
    refused(b.data, b.len);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_want_of),         cmocka_unit_test(test_saturated_by_demand),
        cmocka_unit_test(test_spare_by_weight), cmocka_unit_test(test_freshness),
        cmocka_unit_test(test_own_smoothing),   cmocka_unit_test(test_periods),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
