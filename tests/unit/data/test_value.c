/* Unit tests for storage/data/value: names, order, equality, lookup, sorting, copy, size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/data/value.h"

static arena A;

static int setup(void **state)
{
    (void)state;
    arena_init(&A, 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    arena_free(&A);
    return 0;
}

static av S(const char *s)
{
    av v = {.type = AV_S};
    v.u.bytes.ptr = (const uint8_t *)s;
    v.u.bytes.len = (uint32_t)strlen(s);
    return v;
}

static av B(const void *p, size_t n)
{
    av v = {.type = AV_B};
    v.u.bytes.ptr = p;
    v.u.bytes.len = (uint32_t)n;
    return v;
}

static av N(const char *s)
{
    av v = {.type = AV_N};
    strata_err err;
    if (num_parse(s, strlen(s), &v.u.n, &err) != 0)
        fail_msg("bad number %s: %s", s, err.msg);
    return v;
}

static av BOOL(bool b)
{
    av v = {.type = AV_BOOL};
    v.u.boolean = b;
    return v;
}

static av NUL(void)
{
    av v = {.type = AV_NULL};
    return v;
}

static av list_of(av_type t, int n, ...)
{
    av v = {.type = t};
    v.u.list.elems = arena_alloc(&A, sizeof(av) * (size_t)(n ? n : 1));
    v.u.list.count = (uint32_t)n;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        v.u.list.elems[i] = va_arg(ap, av);
    va_end(ap);
    return v;
}

/* map_of(n, "name", value, "name", value, ...): unsorted as given. */
static av map_of(int n, ...)
{
    av v = {.type = AV_M};
    v.u.map.attrs = arena_alloc(&A, sizeof(av_attr) * (size_t)(n ? n : 1));
    v.u.map.count = (uint32_t)n;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *name = va_arg(ap, const char *);
        v.u.map.attrs[i].name = name;
        v.u.map.attrs[i].name_len = (uint32_t)strlen(name);
        v.u.map.attrs[i].value = va_arg(ap, av);
    }
    va_end(ap);
    return v;
}

static void type_names(void **state)
{
    (void)state;
    static const char *names[] = {"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"};
    for (int t = AV_S; t <= AV_BS; t++) {
        assert_string_equal(av_type_name((av_type)t), names[t - 1]);
        assert_int_equal(av_type_from_name(names[t - 1], strlen(names[t - 1])), t);
    }
    assert_null(av_type_name((av_type)0));
    assert_null(av_type_name((av_type)11));
    assert_int_equal(av_type_from_name("s", 1), 0);
    assert_int_equal(av_type_from_name("BOOLEAN", 7), 0);
    assert_int_equal(av_type_from_name("", 0), 0);
    assert_int_equal(av_type_from_name("SSS", 2), AV_SS);
    assert_true(av_is_set(AV_SS) && av_is_set(AV_NS) && av_is_set(AV_BS));
    assert_false(av_is_set(AV_L) || av_is_set(AV_M) || av_is_set(AV_S));
}

static void scalar_order(void **state)
{
    (void)state;
    av a = S("a"), ab = S("ab"), b = S("b"), empty = S("");
    assert_true(av_cmp_scalar(&a, &ab) < 0);
    assert_true(av_cmp_scalar(&ab, &b) < 0);
    assert_true(av_cmp_scalar(&empty, &a) < 0);
    assert_int_equal(av_cmp_scalar(&a, &a), 0);
    /* UTF-8 bytewise: U+00E9 (C3 A9) sorts after 'z'. */
    av z = S("z"), e = S("\xc3\xa9");
    assert_true(av_cmp_scalar(&z, &e) < 0);
    uint8_t x00[] = {0x00}, xff[] = {0xff}, x0000[] = {0x00, 0x00};
    av b0 = B(x00, 1), bf = B(xff, 1), b00 = B(x0000, 2), be = B(NULL, 0);
    assert_true(av_cmp_scalar(&b0, &bf) < 0);
    assert_true(av_cmp_scalar(&b0, &b00) < 0);
    assert_true(av_cmp_scalar(&be, &b0) < 0);
    av n2 = N("2"), n10 = N("10"), nm = N("-3"), n10b = N("10.000");
    assert_true(av_cmp_scalar(&n2, &n10) < 0);
    assert_true(av_cmp_scalar(&nm, &n2) < 0);
    assert_int_equal(av_cmp_scalar(&n10, &n10b), 0);
}

static void deep_equality(void **state)
{
    (void)state;
    av a = map_of(2, "a", N("1"), "b", list_of(AV_L, 2, S("x"), BOOL(true)));
    av b = map_of(2, "a", N("1.0"), "b", list_of(AV_L, 2, S("x"), BOOL(true)));
    assert_true(av_equal(&a, &b));
    av c = map_of(2, "a", N("1"), "b", list_of(AV_L, 2, S("x"), BOOL(false)));
    assert_false(av_equal(&a, &c));
    av d = map_of(1, "a", N("1"));
    assert_false(av_equal(&a, &d));
    av e = map_of(2, "a", N("1"), "c", list_of(AV_L, 2, S("x"), BOOL(true)));
    assert_false(av_equal(&a, &e));
    av s1 = S("1"), n1 = N("1");
    assert_false(av_equal(&s1, &n1));
    av nul1 = NUL(), nul2 = NUL();
    assert_true(av_equal(&nul1, &nul2));
    /* Sets compare as sets: order of input does not matter once normalized. */
    av ss1 = list_of(AV_SS, 3, S("b"), S("a"), S("c"));
    av ss2 = list_of(AV_SS, 3, S("c"), S("b"), S("a"));
    assert_int_equal(av_set_sort(&ss1, NULL), 0);
    assert_int_equal(av_set_sort(&ss2, NULL), 0);
    assert_true(av_equal(&ss1, &ss2));
    av ns1 = list_of(AV_NS, 2, N("1"), N("2"));
    av ns2 = list_of(AV_NS, 2, N("2.0"), N("1.00"));
    assert_int_equal(av_set_sort(&ns2, NULL), 0);
    assert_true(av_equal(&ns1, &ns2));
    av l1 = list_of(AV_L, 2, S("a"), S("b")), l2 = list_of(AV_L, 2, S("b"), S("a"));
    assert_false(av_equal(&l1, &l2)); /* lists are ordered */
    av ss3 = list_of(AV_SS, 2, S("a"), S("b"));
    assert_false(av_equal(&ss1, &ss3));
    av l3 = list_of(AV_L, 2, S("a"), S("b"));
    assert_false(av_equal(&l3, &ss3)); /* L is not SS */
}

static void map_lookup_and_sort(void **state)
{
    (void)state;
    av m = map_of(5, "zeta", N("1"), "alpha", N("2"), "mid", N("3"), "al", N("4"), "", N("5"));
    strata_err err;
    assert_int_equal(av_map_sort(&m, &err), 0);
    assert_int_equal(m.u.map.attrs[0].name_len, 0);
    assert_memory_equal(m.u.map.attrs[1].name, "al", 2);
    assert_memory_equal(m.u.map.attrs[2].name, "alpha", 5);
    const av *v = av_map_get(&m, "mid", 3);
    assert_non_null(v);
    av three = N("3");
    assert_true(av_equal(v, &three));
    assert_non_null(av_map_get(&m, "", 0));
    assert_non_null(av_map_get(&m, "zeta", 4));
    assert_non_null(av_map_get(&m, "al", 2));
    assert_null(av_map_get(&m, "a", 1));
    assert_null(av_map_get(&m, "zz", 2));
    assert_null(av_map_get(&m, "alph", 4));
    av empty = map_of(0);
    assert_null(av_map_get(&empty, "a", 1));
    assert_int_equal(av_map_sort(&empty, NULL), 0);

    av dup = map_of(3, "b", N("1"), "a", N("2"), "b", N("3"));
    strata_err_clear(&err);
    assert_int_equal(av_map_sort(&dup, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_non_null(strstr(err.msg, "b"));
}

static void set_sort_rules(void **state)
{
    (void)state;
    strata_err err;
    av ns = list_of(AV_NS, 4, N("10"), N("-1"), N("2"), N("0.5"));
    assert_int_equal(av_set_sort(&ns, &err), 0);
    av want[] = {N("-1"), N("0.5"), N("2"), N("10")};
    for (int i = 0; i < 4; i++)
        assert_true(av_equal(&ns.u.list.elems[i], &want[i]));

    av ss = list_of(AV_SS, 3, S("a"), S("b"), S("a"));
    assert_int_equal(av_set_sort(&ss, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_string_equal(err.msg, "One or more parameter values were invalid: Input collection "
                                 "[a, a, b] contains duplicates.");

    av nsd = list_of(AV_NS, 2, N("1"), N("1.0"));
    assert_int_equal(av_set_sort(&nsd, &err), -1);
    assert_string_equal(err.msg, "Input collection contains duplicates");

    uint8_t x[] = {1, 2};
    av bsd = list_of(AV_BS, 2, B(x, 2), B(x, 2));
    assert_int_equal(av_set_sort(&bsd, &err), -1);
    assert_string_equal(err.msg, "One or more parameter values were invalid: Input collection "
                                 "[AQI=, AQI=]of type BS contains duplicates.");

    av e1 = list_of(AV_SS, 0), e2 = list_of(AV_NS, 0), e3 = list_of(AV_BS, 0);
    assert_int_equal(av_set_sort(&e1, &err), -1);
    assert_string_equal(
        err.msg, "One or more parameter values were invalid: An string set  may not be empty");
    assert_int_equal(av_set_sort(&e2, &err), -1);
    assert_string_equal(
        err.msg, "One or more parameter values were invalid: An number set  may not be empty");
    assert_int_equal(av_set_sort(&e3, &err), -1);
    assert_string_equal(
        err.msg, "One or more parameter values were invalid: Binary sets should not be empty");
    /* An empty string is a valid set member. */
    av sse = list_of(AV_SS, 2, S("x"), S(""));
    assert_int_equal(av_set_sort(&sse, &err), 0);
    assert_int_equal(sse.u.list.elems[0].u.bytes.len, 0);
}

static void deep_copy(void **state)
{
    (void)state;
    uint8_t bytes[] = {0, 1, 2, 255};
    av src = map_of(3, "a", list_of(AV_L, 3, S("x"), N("-1.5"), B(bytes, 4)), "b",
                    map_of(1, "c", list_of(AV_SS, 2, S("p"), S("q"))), "d", NUL());
    arena other;
    arena_init(&other, 0);
    av dst;
    assert_int_equal(av_copy(&other, &src, &dst), 0);
    assert_true(av_equal(&src, &dst));
    assert_ptr_not_equal(dst.u.map.attrs, src.u.map.attrs);
    assert_ptr_not_equal(dst.u.map.attrs[0].name, src.u.map.attrs[0].name);
    assert_ptr_not_equal(dst.u.map.attrs[0].value.u.list.elems[2].u.bytes.ptr, bytes);
    arena_free(&other);
    /* A copy that does not fit the arena's limit fails cleanly. */
    arena tiny;
    arena_init(&tiny, 32);
    assert_int_equal(av_copy(&tiny, &src, &dst), -1);
    arena_free(&tiny);
}

static size_t nsize(const char *s)
{
    av v = N(s);
    return av_size(&v);
}

static void number_sizes(void **state)
{
    (void)state;
    assert_int_equal(nsize("0"), 1);
    assert_int_equal(nsize("1"), 2);
    assert_int_equal(nsize("-1"), 3);
    assert_int_equal(nsize("10"), 2);
    assert_int_equal(nsize("99"), 2);
    assert_int_equal(nsize("100"), 2);
    assert_int_equal(nsize("101"), 3);
    assert_int_equal(nsize("123"), 3);
    assert_int_equal(nsize("1000"), 2);
    assert_int_equal(nsize("1001"), 3);
    assert_int_equal(nsize("12345"), 4);
    assert_int_equal(nsize("0.5"), 2);
    assert_int_equal(nsize("0.05"), 2);
    assert_int_equal(nsize("0.005"), 2);
    assert_int_equal(nsize("0.15"), 2);
    assert_int_equal(nsize("0.015"), 3);
    assert_int_equal(nsize("1.5"), 3);
    assert_int_equal(nsize("12.5"), 3);
    assert_int_equal(nsize("-1E-130"), 3);
    assert_int_equal(nsize("1E+125"), 2);
    assert_int_equal(nsize("12345678901234567890123456789012345678"), 20);
    assert_int_equal(nsize("1234567890123456789012345678901234567.8"), 21);
    assert_int_equal(nsize("-1234567890123456789012345678901234567.8"), 21); /* capped */
    assert_int_equal(nsize("-12345678901234567890123456789012345678"), 21);
}

static void item_sizes(void **state)
{
    (void)state;
    uint8_t bytes[5] = {0};
    av item = map_of(7, "id", S("f0ba8d6c"), "n", N("123"), "b", B(bytes, 5), "t", BOOL(true), "z",
                     NUL(), "é", S("ü"), "ss", list_of(AV_SS, 2, S("ab"), S("c")));
    assert_int_equal(av_map_sort(&item, NULL), 0);
    /* 2+8, 1+3, 1+5, 1+1, 1+1, 2+2, 2+3 */
    assert_int_equal(item_size(&item), 10 + 4 + 6 + 2 + 2 + 4 + 5);

    /* Documents: 3 bytes + content + 1 byte per element; names count inside maps. */
    av l = map_of(1, "a", list_of(AV_L, 2, S("x"), N("1")));
    assert_int_equal(item_size(&l), 1 + 3 + (1 + 1) + (2 + 1));
    av m = map_of(1, "m", map_of(1, "k", S("v")));
    assert_int_equal(item_size(&m), 1 + 3 + 1 + 1 + 1);
    av em = map_of(2, "l", list_of(AV_L, 0), "m", map_of(0));
    assert_int_equal(item_size(&em), 1 + 3 + 1 + 3);
    av nested = map_of(1, "a", list_of(AV_L, 1, map_of(1, "b", list_of(AV_L, 1, NUL()))));
    assert_int_equal(item_size(&nested), 1 + 3 + (3 + 1 + (3 + 1 + 1) + 1) + 1);
    av empty = map_of(0);
    assert_int_equal(item_size(&empty), 0);
    av ns = map_of(1, "ns", list_of(AV_NS, 2, N("1"), N("-1")));
    assert_int_equal(item_size(&ns), 2 + 2 + 3);
}

/* DynamoDB counts the item as level 1: an attribute holds at most 31 nested M/L. */
static void nesting_limit(void **state)
{
    (void)state;
    av v = S("x");
    for (int depth = 1; depth <= 33; depth++) {
        v = depth % 2 ? list_of(AV_L, 2, NUL(), v) : map_of(1, "k", v);
        strata_err err;
        int want = depth <= AV_MAX_NESTING ? 0 : -1;
        assert_int_equal(av_check_nesting(&v, &err), want);
        av item = map_of(2, "a", N("1"), "b", v);
        assert_int_equal(item_check_nesting(&item, &err), want);
        if (want != 0) {
            assert_int_equal(err.code, ERR_VALIDATION);
            assert_string_equal(err.msg, AV_NESTING_MSG);
        }
    }
    av flat = list_of(AV_SS, 1, S("a"));
    assert_int_equal(av_check_nesting(&flat, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(type_names),     cmocka_unit_test(scalar_order),
        cmocka_unit_test(deep_equality),  cmocka_unit_test(map_lookup_and_sort),
        cmocka_unit_test(set_sort_rules), cmocka_unit_test(deep_copy),
        cmocka_unit_test(number_sizes),   cmocka_unit_test(item_sizes),
        cmocka_unit_test(nesting_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
