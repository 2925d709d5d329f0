#ifndef STRATA_DATA_KEY_H
#define STRATA_DATA_KEY_H
/*
 * Order-preserving, self-delimiting encodings of key values, and the engine's storage key.
 *
 * Key value encoding (the type comes from the table's schema and is not encoded):
 *   S, B: the bytes with each 0x00 written as 0x00 0xFF, then the terminator 0x00 0x01.
 *   N:    zero is 0x80. A positive number is 0xC0, the exponent byte (exp - NUM_MIN_EXP),
 *         then its digits in pairs as bytes 1..100 (10*d1 + d2 + 1; a final odd digit
 *         pairs with 0), then 0x00. A negative number is 0x40 followed by the same bytes
 *         complemented (255 - b; so pairs are 155..254 and the terminator 0xFF).
 * For two values a, b of the same type, memcmp order of enc(a) and enc(b) is the sign of
 * av_cmp_scalar(a, b), and because each encoding is self-delimiting, the order of
 * enc(a1) enc(a2) vs enc(b1) enc(b2) is that of (a1, a2) vs (b1, b2).
 *
 * Storage key of an item (DESIGN.md, "Keys and data"):
 *   table_id (u32 BE) | key_hash(pk) (u64 BE) | enc(pk) | enc(sk)   (sk if the table has one)
 * Within a table, items sort by partition-key hash, then partition key, then sort key.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/arena.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "storage/data/value.h"

#define STORAGE_KEY_PREFIX_LEN 12 /* table_id + hash */

/* Whether `t` may be a key attribute's type: S, N or B. Check it on untrusted input
 * before key_encode_value or key_hash, which assert it. */
static inline bool key_type_ok(av_type t)
{
    return t == AV_S || t == AV_N || t == AV_B;
}

/* Key value encoding of an S, N or B value (asserts on other types). */
void key_encode_value(const av *v, buf *out);
/* Decodes one key value of type `t` from the front of p[0..n); *used gets its length.
 * S/B bytes are copied into `a`. ERR_CORRUPT on malformed input. */
int key_decode_value(const uint8_t *p, size_t n, av_type t, arena *a, av *out, size_t *used,
                     strata_err *err);

/* The partition hash used for routing: xxh3_64 of enc(pk). */
uint64_t key_hash(const av *pk);

/* Appends the storage key of an item with partition key `pk` and sort key `sk` (NULL if
 * the table has none). */
void storage_key_build(uint32_t table_id, const av *pk, const av *sk, buf *out);

/* Splits a storage key. `sk_type` is 0 if the table has no sort key; `sk` may then be
 * NULL. Checks that the hash matches the partition key. ERR_CORRUPT on malformed keys. */
int storage_key_parse(const uint8_t *p, size_t n, av_type pk_type, av_type sk_type, arena *a,
                      uint32_t *table_id, uint64_t *hash, av *pk, av *sk, strata_err *err);

/*
 * Range bounds [lo, hi) for the engine (buffers are reset first):
 *  - storage_key_range_hash: every item of `table_id` whose hash h has
 *    hash_first <= h <= hash_last (inclusive, so the full range 0..UINT64_MAX can be said).
 *    Returns false, with hi empty, when there is no upper bound (table 0xFFFFFFFF and
 *    hash_last UINT64_MAX).
 *  - storage_key_range_partition: every item with partition key `pk`.
 *  - storage_key_range_sk_prefix: items with partition key `pk` whose S or B sort key
 *    begins with `prefix` (begins_with in a KeyConditionExpression).
 * For sort-key comparisons, append key_encode_value(sk) to the partition prefix
 * (storage_key_build); key_successor turns an inclusive bound into an exclusive one.
 */
bool storage_key_range_hash(uint32_t table_id, uint64_t hash_first, uint64_t hash_last, buf *lo,
                            buf *hi);
void storage_key_range_partition(uint32_t table_id, const av *pk, buf *lo, buf *hi);
void storage_key_range_sk_prefix(uint32_t table_id, const av *pk, const av *prefix, buf *lo,
                                 buf *hi);

/* Replaces b with the smallest byte string greater than every string that has b as a
 * prefix (increment the last byte that is not 0xFF, dropping the 0xFF bytes after it).
 * If b is all 0xFF (or empty) there is none: b becomes empty and the function returns
 * false, meaning "no upper bound". */
bool key_prefix_successor(buf *b);

#endif
