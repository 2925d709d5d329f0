#ifndef STRATA_DATA_CODEC_H
#define STRATA_DATA_CODEC_H
/*
 * The stored form of an item: compact, versioned, and cheap to decode (it runs on every
 * read).
 *
 * Layout (format version 1):
 *   item   := version(u8 = 1) map-body
 *   value  := tag(u8 = av_type) payload
 *   S, B   := varint len, bytes
 *   N      := number
 *   BOOL   := u8 0 or 1
 *   NULL   := (nothing)
 *   M      := map-body := varint count, count * (varint name_len, name, value)
 *   L      := varint count, count * value
 *   SS, BS := varint count, count * (varint len, bytes)
 *   NS     := varint count, count * number
 *   number := u8 (ndigits | 0x80 if negative); if ndigits > 0: u8 (exp - NUM_MIN_EXP),
 *             then the digits two per byte (high nibble first, a final odd digit padded
 *             with a zero nibble)
 *
 * The encoding of a value is canonical: equal items (av_equal) have equal encodings,
 * because maps and sets are sorted and numbers normalized.
 *
 * Integrity (checksums) belongs to the record or block that holds the item; the decoder
 * still treats its input as untrusted: every length, count, tag, digit and ordering is
 * checked, nesting is limited (AV_MAX_DEPTH M/L levels in an attribute value: one more
 * than DynamoDB accepts, so a stored item is never unreadable because of an off-by-one
 * elsewhere), and any violation is ERR_CORRUPT.
 */
#include <stddef.h>
#include <stdint.h>

#include "storage/base/arena.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "storage/data/value.h"

#define ITEM_FORMAT_VERSION 1

/* Appends the encoding of `item` (an AV_M satisfying value.h's invariants) to `out`.
 * Check out->failed afterwards. */
void item_encode(const av *item, buf *out);
/* Bytes item_encode appends. */
size_t item_encoded_size(const av *item);
/* Appends the encoding of one value (without version byte). */
void av_encode(const av *v, buf *out);

/* Decodes an item. Zero-copy: S/B payloads and attribute names of `out` point into
 * p[0..n), which must outlive `out`; the tree itself is allocated from `a`. Errors:
 * ERR_CORRUPT for malformed input, ERR_NOMEM when `a` is exhausted. */
int item_decode(const uint8_t *p, size_t n, arena *a, av *out, strata_err *err);
/* As item_decode, but first copies the bytes into `a`, so `out` depends only on `a`. */
int item_decode_copy(const uint8_t *p, size_t n, arena *a, av *out, strata_err *err);

#endif
