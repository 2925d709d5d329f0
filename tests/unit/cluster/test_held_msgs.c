/* Unit tests for cluster/held_msgs.c: delivery of one group's messages in arrival order
 * (the others stay), the count, byte and age bounds (oldest dropped first, too large never
 * kept), expiry at delivery, and messages kept while a delivery runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/held_msgs.h"

static const held_limits LIMITS = {.max_msgs = 4, .max_bytes = 100, .keep_ms = 1000};

/* What a delivery handed over: "from:payload" entries joined by commas. */
typedef struct {
    char got[256];
    held_msgs *h; /* set: keep one message for group 9 from inside the callback */
} seen;

static void record(void *arg, uint64_t from, const uint8_t *data, size_t len)
{
    seen *s = arg;
    size_t n = strlen(s->got);
    snprintf(s->got + n, sizeof s->got - n, "%s%llu:%.*s", n ? "," : "", (unsigned long long)from,
             (int)len, (const char *)data);
    if (s->h != NULL)
        assert_true(held_keep(s->h, 9, 5, (const uint8_t *)"late", 4, 0));
}

static void keep(held_msgs *h, uint64_t group, uint64_t from, const char *text, uint64_t now)
{
    assert_true(held_keep(h, group, from, (const uint8_t *)text, strlen(text), now));
}

static void delivers_one_groups_messages_in_order(void **state)
{
    (void)state;
    held_msgs h;
    held_init(&h, LIMITS);
    keep(&h, 7, 1, "a", 0);
    keep(&h, 8, 2, "b", 0);
    keep(&h, 7, 3, "c", 0);
    seen s = {0};
    assert_int_equal(held_deliver(&h, 7, 10, record, &s), 2);
    assert_string_equal(s.got, "1:a,3:c");
    assert_int_equal(h.n, 1);
    assert_int_equal(h.bytes, 1);
    memset(&s, 0, sizeof s);
    assert_int_equal(held_deliver(&h, 7, 10, record, &s), 0); /* delivered once only */
    assert_int_equal(held_deliver(&h, 8, 10, record, &s), 1);
    assert_string_equal(s.got, "2:b");
    assert_int_equal(h.n, 0);
    keep(&h, 7, 4, "d", 20); /* the list still appends after being emptied */
    keep(&h, 7, 5, "e", 20);
    memset(&s, 0, sizeof s);
    assert_int_equal(held_deliver(&h, 7, 20, record, &s), 2);
    assert_string_equal(s.got, "4:d,5:e");
    held_clear(&h);
}

static void count_bound_drops_the_oldest(void **state)
{
    (void)state;
    held_msgs h;
    held_init(&h, LIMITS);
    const char *texts[] = {"1", "2", "3", "4", "5", "6"};
    for (int i = 0; i < 6; i++)
        keep(&h, 7, 1, texts[i], 0);
    assert_int_equal(h.n, LIMITS.max_msgs);
    seen s = {0};
    assert_int_equal(held_deliver(&h, 7, 0, record, &s), 4);
    assert_string_equal(s.got, "1:3,1:4,1:5,1:6");
    held_clear(&h);
}

static void byte_bound_drops_the_oldest_and_refuses_the_too_large(void **state)
{
    (void)state;
    held_msgs h;
    held_init(&h, LIMITS);
    uint8_t big[101];
    memset(big, 'x', sizeof big);
    assert_false(held_keep(&h, 7, 1, big, sizeof big, 0)); /* over max_bytes on its own */
    assert_int_equal(h.n, 0);
    assert_true(held_keep(&h, 7, 1, big, 60, 0));
    assert_true(held_keep(&h, 7, 2, big, 30, 0));
    assert_int_equal(h.bytes, 90);
    assert_true(held_keep(&h, 8, 3, big, 40, 0)); /* 130 > 100: the 60 goes */
    assert_int_equal(h.n, 2);
    assert_int_equal(h.bytes, 70);
    assert_true(held_keep(&h, 7, 4, big, 100, 0)); /* exactly max_bytes: all else goes */
    assert_int_equal(h.n, 1);
    assert_int_equal(h.bytes, 100);
    assert_false(held_keep(&h, 7, 5, big, 101, 0)); /* refused, and nothing dropped for it */
    assert_int_equal(h.n, 1);
    held_clear(&h);
    assert_int_equal(h.bytes, 0);
}

static void old_messages_expire(void **state)
{
    (void)state;
    held_msgs h;
    held_init(&h, LIMITS);
    keep(&h, 7, 1, "old", 0);
    keep(&h, 8, 2, "mid", 500);
    keep(&h, 7, 3, "new", 1001); /* "old" is past keep_ms: dropped while keeping */
    assert_int_equal(h.n, 2);
    seen s = {0};
    /* At 1501 "mid" has expired too, but it is group 8's; group 7 gets "new" only. */
    assert_int_equal(held_deliver(&h, 7, 1501, record, &s), 1);
    assert_string_equal(s.got, "3:new");
    memset(&s, 0, sizeof s);
    assert_int_equal(held_deliver(&h, 8, 1501, record, &s), 0); /* expired at delivery */
    assert_int_equal(h.n, 0);
    keep(&h, 7, 4, "edge", 2000);
    assert_int_equal(held_deliver(&h, 7, 3000, record, &s), 1); /* exactly keep_ms: kept */
    held_clear(&h);
}

static void kept_during_delivery_waits_for_the_next(void **state)
{
    (void)state;
    held_msgs h;
    held_init(&h, LIMITS);
    keep(&h, 9, 1, "a", 0);
    keep(&h, 9, 2, "b", 0);
    seen s = {.h = &h};
    assert_int_equal(held_deliver(&h, 9, 0, record, &s), 2);
    assert_string_equal(s.got, "1:a,2:b");
    assert_int_equal(h.n, 2); /* the two "late" ones */
    memset(&s, 0, sizeof s);
    assert_int_equal(held_deliver(&h, 9, 0, record, &s), 2);
    assert_string_equal(s.got, "5:late,5:late");
    held_clear(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(delivers_one_groups_messages_in_order),
        cmocka_unit_test(count_bound_drops_the_oldest),
        cmocka_unit_test(byte_bound_drops_the_oldest_and_refuses_the_too_large),
        cmocka_unit_test(old_messages_expire),
        cmocka_unit_test(kept_during_delivery_waits_for_the_next),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
