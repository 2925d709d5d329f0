/*
 * Unit tests of nfq-delay's decision core (deploy/nfq-delay/delayq.h): rule parsing and
 * its errors, classification by source and destination network, delay ordering across
 * rules, loss, the bound on held packets, and release of everything on exit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "deploy/nfq-delay/delayq.h"

#define MS 1000000ull

/* A minimal IPv4 header from a.b.c.d style host-order addresses. */
static void ipv4(unsigned char *pkt, uint32_t src, uint32_t dst)
{
    memset(pkt, 0, 20);
    pkt[0] = 0x45;
    for (int i = 0; i < 4; i++) {
        pkt[12 + i] = (unsigned char)(src >> (24 - 8 * i));
        pkt[16 + i] = (unsigned char)(dst >> (24 - 8 * i));
    }
}

#define ADDR(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((c) << 8) | (d))

typedef struct {
    uint32_t ids[64];
    int n;
} released;

static void record(void *ctx, uint32_t id)
{
    released *r = ctx;
    assert_true(r->n < 64);
    r->ids[r->n++] = id;
}

static void add(delayq *q, const char *spec)
{
    dq_rule r;
    strata_err err;
    assert_int_equal(dq_parse_rule(spec, &r, &err), 0);
    assert_int_equal(dq_add_rule(q, &r, &err), 0);
}

static void test_parse_valid(void **state)
{
    (void)state;
    dq_rule r;
    strata_err err;
    assert_int_equal(dq_parse_rule("10.77.1.0/24,10.77.2.0/24,5", &r, &err), 0);
    assert_int_equal(r.src_net, ADDR(10, 77, 1, 0));
    assert_int_equal(r.src_mask, 0xffffff00u);
    assert_int_equal(r.dst_net, ADDR(10, 77, 2, 0));
    assert_int_equal(r.delay_ns, 5 * MS);
    assert_true(r.loss == 0);

    assert_int_equal(dq_parse_rule("10.77.1.9/24,0.0.0.0/0,0.25,12.5", &r, &err), 0);
    assert_int_equal(r.src_net, ADDR(10, 77, 1, 0)); /* host bits cleared */
    assert_int_equal(r.dst_mask, 0);
    assert_int_equal(r.delay_ns, 250000);
    assert_true(r.loss > 0.1249 && r.loss < 0.1251);

    assert_int_equal(dq_parse_rule("10.0.0.1,10.0.0.2,0,100", &r, &err), 0); /* bare = /32 */
    assert_int_equal(r.src_mask, 0xffffffffu);
    assert_true(r.loss == 1.0);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "10.0.0.0/8",
        "10.0.0.0/8,10.0.0.0/8",
        "10.0.0.0/8,10.0.0.0/8,5,1,9",
        "10.0.0.0/33,10.0.0.0/8,5",
        "10.0.0.0/,10.0.0.0/8,5",
        "10.0.0/8,10.0.0.0/8,5",
        "10.0.0.0/8,banana,5",
        "10.0.0.0/8,10.0.0.0/8,-1",
        "10.0.0.0/8,10.0.0.0/8,60001",
        "10.0.0.0/8,10.0.0.0/8,nan",
        "10.0.0.0/8,10.0.0.0/8,5x",
        "10.0.0.0/8,10.0.0.0/8,5,101",
        "10.0.0.0/8,10.0.0.0/8,5,",
        "10.0.0.0/8,10.0.0.0/8,,1",
        "1234567890123456789012345678901234,10.0.0.0/8,5",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dq_rule r;
        strata_err err;
        strata_err_clear(&err);
        assert_int_equal(dq_parse_rule(bad[i], &r, &err), -1);
        assert_int_equal(err.code, ERR_VALIDATION);
        assert_non_null(strstr(err.msg, "rule"));
    }
}

static void test_too_many_rules(void **state)
{
    (void)state;
    static delayq q;
    memset(&q, 0, sizeof q);
    for (int i = 0; i < DQ_MAX_RULES; i++)
        add(&q, "10.0.0.0/8,10.0.0.0/8,1");
    dq_rule r;
    strata_err err;
    assert_int_equal(dq_parse_rule("10.0.0.0/8,10.0.0.0/8,1", &r, &err), 0);
    assert_int_equal(dq_add_rule(&q, &r, &err), -1);
    assert_int_equal(err.code, ERR_LIMIT_EXCEEDED);
}

static void test_init_bounds(void **state)
{
    (void)state;
    static delayq q;
    memset(&q, 0, sizeof q);
    add(&q, "10.0.0.0/8,10.0.0.0/8,1");
    strata_err err;
    assert_int_equal(dq_init(&q, 0, 1, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_int_equal(dq_init(&q, DQ_MAX_PENDING_CAP + 1, 1, &err), -1);
    assert_int_equal(dq_init(&q, 8, 1, &err), 0);
    dq_free(&q);
}

static void test_classify_and_release(void **state)
{
    (void)state;
    static delayq q;
    memset(&q, 0, sizeof q);
    add(&q, "10.77.1.0/24,10.77.2.0/24,5");  /* AZ1 -> AZ2: 5 ms */
    add(&q, "10.77.1.0/24,10.77.3.0/24,20"); /* AZ1 -> AZ3: 20 ms */
    add(&q, "10.77.1.0/24,10.77.4.0/24,0");  /* AZ1 -> AZ4: no delay */
    strata_err err;
    assert_int_equal(dq_init(&q, 16, 42, &err), 0);

    unsigned char pkt[20];
    uint64_t t0 = 1000 * MS;
    ipv4(pkt, ADDR(10, 77, 1, 1), ADDR(10, 77, 3, 3));
    assert_int_equal(dq_classify(&q, 1, pkt, sizeof pkt, t0), DQ_HELD);
    ipv4(pkt, ADDR(10, 77, 1, 1), ADDR(10, 77, 2, 2));
    assert_int_equal(dq_classify(&q, 2, pkt, sizeof pkt, t0 + 1 * MS), DQ_HELD);
    assert_int_equal(dq_classify(&q, 3, pkt, sizeof pkt, t0 + 2 * MS), DQ_HELD);
    ipv4(pkt, ADDR(10, 77, 1, 1), ADDR(10, 77, 4, 4));
    assert_int_equal(dq_classify(&q, 4, pkt, sizeof pkt, t0), DQ_ACCEPT);
    ipv4(pkt, ADDR(10, 77, 1, 1), ADDR(10, 77, 1, 7)); /* same AZ: no rule */
    assert_int_equal(dq_classify(&q, 5, pkt, sizeof pkt, t0), DQ_ACCEPT);
    ipv4(pkt, ADDR(10, 77, 2, 2), ADDR(10, 77, 3, 3)); /* other source */
    assert_int_equal(dq_classify(&q, 6, pkt, sizeof pkt, t0), DQ_ACCEPT);
    assert_int_equal(q.unmatched, 2);
    assert_int_equal(dq_held_count(&q), 3);

    released out = {0};
    /* Nothing due yet: the next due time is packet 2's. */
    assert_int_equal(dq_release(&q, t0 + 5 * MS, record, &out), t0 + 6 * MS);
    assert_int_equal(out.n, 0);
    assert_int_equal(dq_release(&q, t0 + 6 * MS, record, &out), t0 + 7 * MS);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.ids[0], 2);
    assert_int_equal(dq_release(&q, t0 + 19 * MS, record, &out), t0 + 20 * MS);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.ids[1], 3);
    assert_int_equal(dq_release(&q, t0 + 20 * MS, record, &out), 0);
    assert_int_equal(out.n, 3);
    assert_int_equal(out.ids[2], 1);
    assert_int_equal(dq_held_count(&q), 0);
    dq_free(&q);
}

static void test_not_ipv4_is_accepted(void **state)
{
    (void)state;
    static delayq q;
    memset(&q, 0, sizeof q);
    add(&q, "0.0.0.0/0,0.0.0.0/0,5");
    strata_err err;
    assert_int_equal(dq_init(&q, 4, 1, &err), 0);
    unsigned char pkt[40] = {0x60}; /* IPv6 */
    assert_int_equal(dq_classify(&q, 1, pkt, sizeof pkt, 0), DQ_ACCEPT);
    ipv4(pkt, 1, 2);
    assert_int_equal(dq_classify(&q, 2, pkt, 19, 0), DQ_ACCEPT); /* truncated */
    assert_int_equal(dq_classify(&q, 3, NULL, 0, 0), DQ_ACCEPT);
    assert_int_equal(q.unmatched, 3);
    dq_free(&q);
}

static void test_bound_drops_overflow(void **state)
{
    (void)state;
    static delayq q;
    memset(&q, 0, sizeof q);
    add(&q, "0.0.0.0/0,0.0.0.0/0,1");
    strata_err err;
    assert_int_equal(dq_init(&q, 3, 1, &err), 0);
    unsigned char pkt[20];
    ipv4(pkt, 1, 2);
    for (uint32_t id = 0; id < 3; id++)
        assert_int_equal(dq_classify(&q, id, pkt, sizeof pkt, id), DQ_HELD);
    assert_int_equal(dq_classify(&q, 99, pkt, sizeof pkt, 3), DQ_DROP);
    assert_int_equal(q.rules[0].overflow, 1);
    released out = {0};
    dq_release(&q, 1 * MS, record, &out); /* frees one slot; the ring wraps */
    assert_int_equal(out.n, 1);
    assert_int_equal(dq_classify(&q, 7, pkt, sizeof pkt, 1 * MS), DQ_HELD);
    assert_int_equal(dq_release(&q, UINT64_MAX, record, &out), 0);
    assert_int_equal(out.n, 4);
    uint32_t want[] = {0, 1, 2, 7};
    for (int i = 0; i < 4; i++)
        assert_int_equal(out.ids[i], want[i]);
    dq_free(&q);
}

static void test_loss(void **state)
{
    (void)state;
    static delayq q;
    memset(&q, 0, sizeof q);
    add(&q, "10.0.0.0/8,10.0.0.0/8,0,30");
    add(&q, "0.0.0.0/0,0.0.0.0/0,0,100");
    strata_err err;
    assert_int_equal(dq_init(&q, 4, 12345, &err), 0);
    unsigned char pkt[20];
    ipv4(pkt, ADDR(10, 0, 0, 1), ADDR(10, 0, 0, 2));
    int dropped = 0;
    for (uint32_t id = 0; id < 10000; id++)
        dropped += dq_classify(&q, id, pkt, sizeof pkt, 0) == DQ_DROP;
    assert_true(dropped > 2700 && dropped < 3300);
    assert_int_equal(q.rules[0].lost, (uint64_t)dropped);
    ipv4(pkt, ADDR(192, 168, 0, 1), ADDR(10, 0, 0, 2));
    for (uint32_t id = 0; id < 100; id++)
        assert_int_equal(dq_classify(&q, id, pkt, sizeof pkt, 0), DQ_DROP);
    dq_free(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),          cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_too_many_rules),       cmocka_unit_test(test_init_bounds),
        cmocka_unit_test(test_classify_and_release), cmocka_unit_test(test_not_ipv4_is_accepted),
        cmocka_unit_test(test_bound_drops_overflow), cmocka_unit_test(test_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
