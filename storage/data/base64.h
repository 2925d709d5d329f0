#ifndef STRATA_DATA_BASE64_H
#define STRATA_DATA_BASE64_H
/*
 * Standard base64 (RFC 4648, alphabet A-Z a-z 0-9 + /, '=' padding), as DynamoDB JSON
 * carries B and BS values.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/buf.h"

/* Length of the encoding of n bytes. */
size_t b64_encoded_len(size_t n);
/* Writes the encoding of p[0..n) to out (b64_encoded_len(n) bytes, no NUL). */
void b64_encode(const uint8_t *p, size_t n, char *out);
/* Appends the encoding to a buffer. */
void b64_encode_buf(const uint8_t *p, size_t n, buf *out);

/* Decodes strictly: length a multiple of 4, only alphabet characters, '=' only as the
 * final one or two characters, and zero bits in the unused low bits of the last
 * character (so every byte string has exactly one accepted encoding). `out` needs
 * room for b64_max_decoded_len(n) bytes. Returns false if `s` is not such an encoding. */
size_t b64_max_decoded_len(size_t n);
bool b64_decode(const char *s, size_t n, uint8_t *out, size_t *out_len);

#endif
