#ifndef STRATA_DATA_NUMBER_H
#define STRATA_DATA_NUMBER_H
/*
 * DynamoDB numbers: exact decimals, never binary floating point.
 *
 * Up to 38 significant digits; a non-zero magnitude lies in
 * [1E-130, 9.9999999999999999999999999999999999999E+125]. Leading and trailing zeros
 * are not significant. Arithmetic is exact: a result that needs more than 38
 * significant digits, or falls outside the range, is an error with DynamoDB's message
 * ("Number overflow. Attempting to store a number with magnitude larger than supported
 * range", also for a result past 38 digits; "Number underflow. ..."), never a rounded
 * value. Parsing says "Attempting to store more than 38 significant digits in a Number"
 * of an input past 38 digits.
 *
 * Representation (normalized, so equal numbers have equal bytes):
 *   value = (neg ? -1 : 1) * 0.d[0] d[1] ... d[ndigits-1] * 10^exp
 *   with d[0] != 0 and d[ndigits-1] != 0; zero is ndigits == 0, neg == false, exp == 0.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/err.h"

#define NUM_MAX_DIGITS 38
#define NUM_MIN_EXP    (-129) /* 1E-130 = 0.1 * 10^-129 */
#define NUM_MAX_EXP    126    /* 9.99..E+125 = 0.999.. * 10^126 */
/* Longest canonical text: sign, "0.", 129 zeros, 38 digits, NUL; with margin. */
#define NUM_TEXT_MAX 192

typedef struct {
    int16_t exp;
    uint8_t ndigits;
    bool neg;
    uint8_t d[NUM_MAX_DIGITS]; /* each 0..9 */
} num;

/* Parses DynamoDB's number syntax ([+-]digits[.digits][(e|E)[+-]digits], also ".5",
 * "5."); whitespace, "NaN", "Infinity" and hex are invalid. Errors are
 * ERR_VALIDATION with DynamoDB's message. */
int num_parse(const char *s, size_t len, num *out, strata_err *err);

/* Writes the canonical text DynamoDB returns (plain notation, no exponent, no
 * trailing zeros, "-" only for negatives). Returns its length; `cap` must be at least
 * NUM_TEXT_MAX. */
size_t num_format(const num *n, char *out, size_t cap);

int num_cmp(const num *a, const num *b); /* <0, 0, >0 by numeric value */
bool num_is_zero(const num *n);
int num_add(const num *a, const num *b, num *out, strata_err *err);
int num_sub(const num *a, const num *b, num *out, strata_err *err);
void num_from_i64(int64_t v, num *out);
/* 0 and *out set if `n` is an integer within int64; -1 otherwise. */
int num_to_i64(const num *n, int64_t *out);

#endif
