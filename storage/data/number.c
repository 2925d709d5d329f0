/*
 * Exact decimal numbers with DynamoDB's limits. Digits are kept one per byte: numbers
 * have at most 38 of them, so simple digit loops are both fast enough and obviously
 * correct, and no floating point is ever involved.
 */
#include "storage/data/number.h"

#include <assert.h>
#include <string.h>

#define MSG_NOT_NUMERIC "The parameter cannot be converted to a numeric value"
#define MSG_OVERFLOW                                                                               \
    "Number overflow. Attempting to store a number with magnitude larger than supported "          \
    "range"
#define MSG_UNDERFLOW                                                                              \
    "Number underflow. Attempting to store a number with magnitude smaller than supported "        \
    "range"
#define MSG_PRECISION "Attempting to store more than 38 significant digits in a Number"

/* An explicit exponent beyond this is out of range whatever the digits (the digits of an
 * input can shift it by at most the input's length); saturating keeps the arithmetic on
 * attacker-supplied exponents ("1e99999999999999999999") free of overflow. */
#define EXP_SATURATE 1000000000000000L

static void set_zero(num *n)
{
    n->exp = 0;
    n->ndigits = 0;
    n->neg = false;
}

bool num_is_zero(const num *n)
{
    return n->ndigits == 0;
}

static int not_numeric(const char *s, size_t len, strata_err *err)
{
    if (len == 0)
        return strata_err_set(err, ERR_VALIDATION, MSG_NOT_NUMERIC);
    return strata_err_set(err, ERR_VALIDATION, MSG_NOT_NUMERIC ": %.*s",
                          (int)(len > 256 ? 256 : len), s);
}

/* Range and precision checks shared by parsing and arithmetic, in DynamoDB's order. */
static int check_limits(long exp, size_t significant, strata_err *err)
{
    if (exp > NUM_MAX_EXP)
        return strata_err_set(err, ERR_VALIDATION, MSG_OVERFLOW);
    if (exp < NUM_MIN_EXP)
        return strata_err_set(err, ERR_VALIDATION, MSG_UNDERFLOW);
    if (significant > NUM_MAX_DIGITS)
        return strata_err_set(err, ERR_VALIDATION, MSG_PRECISION);
    return 0;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int num_parse(const char *s, size_t len, num *out, strata_err *err)
{
    size_t i = 0;
    bool neg = false;
    if (i < len && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }

    /* Mantissa: digits from the first non-zero one are significant candidates. */
    uint8_t d[NUM_MAX_DIGITS];
    size_t seen = 0;    /* digits from the first non-zero digit on, zeros included */
    size_t last_nz = 0; /* `seen` just after the last non-zero digit */
    long exp = 0;       /* decimal exponent of 0.d... before the e-part */
    size_t mantissa_digits = 0;
    bool in_fraction = false;
    for (; i < len; i++) {
        char c = s[i];
        if (c == '.') {
            if (in_fraction)
                return not_numeric(s, len, err);
            in_fraction = true;
            continue;
        }
        if (!is_digit(c))
            break;
        mantissa_digits++;
        if (seen == 0 && c == '0') {
            if (in_fraction)
                exp--; /* a zero between the point and the first non-zero digit */
            continue;
        }
        if (seen < NUM_MAX_DIGITS)
            d[seen] = (uint8_t)(c - '0');
        seen++;
        if (c != '0')
            last_nz = seen;
        if (!in_fraction)
            exp++;
    }
    if (mantissa_digits == 0)
        return not_numeric(s, len, err);

    if (i < len) {
        if (s[i] != 'e' && s[i] != 'E')
            return not_numeric(s, len, err);
        i++;
        bool eneg = false;
        if (i < len && (s[i] == '+' || s[i] == '-')) {
            eneg = s[i] == '-';
            i++;
        }
        if (i == len)
            return not_numeric(s, len, err);
        long e = 0;
        for (; i < len; i++) {
            if (!is_digit(s[i]))
                return not_numeric(s, len, err);
            if (e < EXP_SATURATE)
                e = e * 10 + (s[i] - '0');
        }
        exp += eneg ? -e : e;
    }

    if (last_nz == 0) { /* zero, whatever its sign or exponent */
        set_zero(out);
        return 0;
    }
    if (check_limits(exp, last_nz, err) != 0)
        return -1;
    out->neg = neg;
    out->exp = (int16_t)exp;
    out->ndigits = (uint8_t)last_nz;
    memcpy(out->d, d, last_nz);
    return 0;
}

size_t num_format(const num *n, char *out, size_t cap)
{
    assert(cap >= NUM_TEXT_MAX);
    (void)cap;
    size_t k = 0;
    if (n->ndigits == 0) {
        out[0] = '0';
        out[1] = '\0';
        return 1;
    }
    if (n->neg)
        out[k++] = '-';
    int exp = n->exp;
    int nd = n->ndigits;
    if (exp <= 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int z = 0; z < -exp; z++)
            out[k++] = '0';
        for (int j = 0; j < nd; j++)
            out[k++] = (char)('0' + n->d[j]);
    } else if (exp >= nd) {
        for (int j = 0; j < nd; j++)
            out[k++] = (char)('0' + n->d[j]);
        for (int z = 0; z < exp - nd; z++)
            out[k++] = '0';
    } else {
        for (int j = 0; j < nd; j++) {
            if (j == exp)
                out[k++] = '.';
            out[k++] = (char)('0' + n->d[j]);
        }
    }
    out[k] = '\0';
    return k;
}

/* Compares magnitudes, ignoring signs. */
static int cmp_abs(const num *a, const num *b)
{
    if (a->ndigits == 0 || b->ndigits == 0)
        return (a->ndigits != 0) - (b->ndigits != 0);
    if (a->exp != b->exp)
        return a->exp < b->exp ? -1 : 1;
    int nd = a->ndigits < b->ndigits ? a->ndigits : b->ndigits;
    for (int j = 0; j < nd; j++) {
        if (a->d[j] != b->d[j])
            return a->d[j] < b->d[j] ? -1 : 1;
    }
    return (a->ndigits > b->ndigits) - (a->ndigits < b->ndigits);
}

int num_cmp(const num *a, const num *b)
{
    int sa = a->ndigits == 0 ? 0 : (a->neg ? -1 : 1);
    int sb = b->ndigits == 0 ? 0 : (b->neg ? -1 : 1);
    if (sa != sb)
        return sa < sb ? -1 : 1;
    if (sa == 0)
        return 0;
    int c = cmp_abs(a, b);
    return sa < 0 ? -c : c;
}

/*
 * Exact addition on a digit array wide enough for any two in-range numbers: positions
 * run from the power 10^(NUM_MAX_EXP) (room for a carry) down to 10^(NUM_MIN_EXP-38).
 */
#define POS_HIGH (NUM_MAX_EXP)                  /* power of slot 0 */
#define POS_LOW  (NUM_MIN_EXP - NUM_MAX_DIGITS) /* power of the last slot */
#define SLOTS    (POS_HIGH - POS_LOW + 1)

/* Slot of digit j of n: its power is exp - 1 - j. */
static int slot_of(const num *n, int j)
{
    return POS_HIGH - (n->exp - 1 - j);
}

static int add_signed(const num *a, const num *b, bool negate_b, num *out, strata_err *err)
{
    bool bneg = negate_b ? !b->neg : b->neg;
    if (a->ndigits == 0) {
        *out = *b;
        out->neg = b->ndigits ? bneg : false;
        return 0;
    }
    if (b->ndigits == 0) {
        *out = *a;
        return 0;
    }
    int8_t acc[SLOTS];
    memset(acc, 0, sizeof acc);
    const num *big = a, *small = b;
    bool big_neg = a->neg, small_neg = bneg;
    if (cmp_abs(a, b) < 0) {
        big = b;
        small = a;
        big_neg = bneg;
        small_neg = a->neg;
    }
    for (int j = 0; j < big->ndigits; j++)
        acc[slot_of(big, j)] = (int8_t)big->d[j];
    int sign = big_neg == small_neg ? 1 : -1;
    for (int j = 0; j < small->ndigits; j++)
        acc[slot_of(small, j)] = (int8_t)(acc[slot_of(small, j)] + sign * small->d[j]);
    /* |big| >= |small|, so a subtraction never borrows past the top. */
    for (int k = SLOTS - 1; k > 0; k--) {
        if (acc[k] < 0) {
            acc[k] = (int8_t)(acc[k] + 10);
            acc[k - 1]--;
        } else if (acc[k] > 9) {
            acc[k] = (int8_t)(acc[k] - 10);
            acc[k - 1]++;
        }
    }
    int first = 0;
    while (first < SLOTS && acc[first] == 0)
        first++;
    if (first == SLOTS) {
        set_zero(out);
        return 0;
    }
    int last = SLOTS - 1;
    while (acc[last] == 0)
        last--;
    long exp = (long)(POS_HIGH - first) + 1;
    size_t nd = (size_t)(last - first + 1);
    /* Slot 0 is 10^126, one above the largest in-range digit: a carry there overflows.
     * A result past 38 digits (1E+50 + 1) is refused too, and DynamoDB words that one as
     * an overflow as well, not as the precision error a parsed number gets. */
    if (nd > NUM_MAX_DIGITS)
        return strata_err_set(err, ERR_VALIDATION, MSG_OVERFLOW);
    if (check_limits(exp, nd, err) != 0)
        return -1;
    out->neg = big_neg;
    out->exp = (int16_t)exp;
    out->ndigits = (uint8_t)nd;
    for (size_t j = 0; j < nd; j++)
        out->d[j] = (uint8_t)acc[first + (int)j];
    return 0;
}

int num_add(const num *a, const num *b, num *out, strata_err *err)
{
    return add_signed(a, b, false, out, err);
}

int num_sub(const num *a, const num *b, num *out, strata_err *err)
{
    return add_signed(a, b, true, out, err);
}

void num_from_i64(int64_t v, num *out)
{
    set_zero(out);
    if (v == 0)
        return;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint8_t tmp[20];
    int n = 0;
    while (mag) {
        tmp[n++] = (uint8_t)(mag % 10);
        mag /= 10;
    }
    out->neg = v < 0;
    out->exp = (int16_t)n;
    int nd = 0;
    for (int j = n - 1; j >= 0; j--)
        out->d[nd++] = tmp[j];
    while (out->d[nd - 1] == 0)
        nd--;
    out->ndigits = (uint8_t)nd;
}

int num_to_i64(const num *n, int64_t *out)
{
    if (n->ndigits == 0) {
        *out = 0;
        return 0;
    }
    if (n->exp < n->ndigits || n->exp > 19)
        return -1; /* a fraction, or at least 10^19 */
    uint64_t mag = 0;
    for (int j = 0; j < n->exp; j++) {
        uint64_t digit = j < n->ndigits ? n->d[j] : 0;
        if (mag > (UINT64_MAX - digit) / 10)
            return -1;
        mag = mag * 10 + digit;
    }
    if (n->neg) {
        if (mag > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)mag;
    }
    return 0;
}
