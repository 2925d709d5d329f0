#ifndef STRATA_DATA_VALUE_H
#define STRATA_DATA_VALUE_H
/*
 * DynamoDB attribute values and items.
 *
 * An `av` is a tree of values allocated from an arena (storage/base/arena.h); nothing in
 * it is freed on its own. An item is an `av` of type AV_M whose attributes are the
 * item's top-level attributes.
 *
 * Invariants every constructor in Strata establishes and every consumer may rely on:
 *  - AV_M attributes are sorted by name (bytewise, memcmp then length) and unique.
 *  - Sets (AV_SS, AV_NS, AV_BS) are non-empty, sorted by the element order of
 *    av_cmp_scalar (S and B bytewise, N numerically) and hold no duplicates.
 *    Their elements (u.list) are avs of the element type: AV_S in an SS, AV_N in an NS,
 *    AV_B in a BS.
 *  - AV_S holds UTF-8; AV_B raw bytes. Neither is NUL-terminated.
 *  - Nesting depth is at most AV_MAX_DEPTH levels, DynamoDB's way: the item is level 1,
 *    so one attribute value holds at most AV_MAX_DEPTH - 1 nested maps and lists
 *    (AV_MAX_NESTING). See av_check_nesting.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/arena.h"
#include "storage/base/err.h"
#include "storage/data/number.h"

#define AV_MAX_DEPTH      32
#define AV_MAX_NESTING    (AV_MAX_DEPTH - 1) /* M/L levels in one attribute value */
#define ITEM_MAX_SIZE     (400 * 1024)       /* bytes, by item_size() */
#define PARTITION_KEY_MAX 2048               /* bytes of a partition key value */
#define SORT_KEY_MAX      1024               /* bytes of a sort key value */

typedef enum {
    AV_S = 1,
    AV_N,
    AV_B,
    AV_BOOL,
    AV_NULL,
    AV_M,
    AV_L,
    AV_SS,
    AV_NS,
    AV_BS,
} av_type;

typedef struct av av;
typedef struct av_attr av_attr;

struct av {
    av_type type;
    union {
        struct {
            const uint8_t *ptr;
            uint32_t len;
        } bytes;      /* AV_S, AV_B */
        num n;        /* AV_N */
        bool boolean; /* AV_BOOL (AV_NULL carries no payload: NULL is always true) */
        struct {
            av *elems;
            uint32_t count;
        } list; /* AV_L, AV_SS, AV_NS, AV_BS */
        struct {
            av_attr *attrs;
            uint32_t count;
        } map; /* AV_M */
    } u;
};

struct av_attr {
    const char *name; /* UTF-8, not NUL-terminated */
    uint32_t name_len;
    av value;
};

/* "S", "N", ... as in DynamoDB JSON; NULL for an invalid type. */
const char *av_type_name(av_type t);
/* Parses "S", "N", ...; 0 if not a type descriptor. */
av_type av_type_from_name(const char *s, size_t len);
bool av_is_set(av_type t);

/* Order of two scalars of the same type (S, N or B): S and B bytewise, N numeric. */
int av_cmp_scalar(const av *a, const av *b);
/* DynamoDB's equality for `=` and `<>`: same type and same value, deep for M and L,
 * as sets for SS/NS/BS. */
bool av_equal(const av *a, const av *b);

/* Finds a top-level attribute of a map; NULL if absent. Binary search. */
const av *av_map_get(const av *map, const char *name, size_t name_len);
/* Sorts a map's attributes by name; fails (ERR_VALIDATION) on a duplicate name. */
int av_map_sort(av *map, strata_err *err);
/* Sorts a set's elements; fails (ERR_VALIDATION, DynamoDB's message) on duplicates or
 * an empty set. */
int av_set_sort(av *set, strata_err *err);
/* Deep copy into `a`. */
int av_copy(arena *a, const av *src, av *dst);

/* DynamoDB's size rules: a value's bytes, and an item's (attribute names + values).
 * Used for the 400 KB limit and for capacity units. */
size_t av_size(const av *v);
size_t item_size(const av *item);
/* DynamoDB's nesting limit for a value that is (or will be stored as) an attribute:
 * more than AV_MAX_NESTING nested M/L levels is ERR_VALIDATION "Nesting Levels have
 * exceeded supported limits: ...". item_check_nesting checks every attribute of an item;
 * use it on items built by updates. */
int av_check_nesting(const av *v, strata_err *err);
int item_check_nesting(const av *item, strata_err *err);
/* DynamoDB's message for it. */
#define AV_NESTING_MSG                                                                             \
    "Nesting Levels have exceeded supported limits: Attributes in the item have nested "           \
    "levels beyond supported limit"

/* The size of one number by those rules (base-100 digits + 1, + 1 if negative, <= 21). */
size_t av_num_size(const num *n);

/* DynamoDB's messages for an empty set of type t, and for a string or binary set (t) with
 * duplicates (`elements` as DynamoDB prints them: "[a, a]", base64 for BS). Both return
 * -1. NS duplicates are reported as "Input collection contains duplicates". */
int av_empty_set_error(av_type t, strata_err *err);
int av_duplicate_set_error(av_type t, const char *elements, strata_err *err);

#endif
