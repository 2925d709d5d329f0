/*
 * CRC-32 as zlib computes it (polynomial 0x04C11DB7, reflected, init and final xor
 * 0xFFFFFFFF), for the x-amz-crc32 response header the AWS SDKs verify.
 *
 * Slicing-by-8: eight 256-entry tables let the loop consume 8 bytes per step, which
 * matters for 16 MB BatchGetItem responses (about 4x faster than one table).
 */
#include "node/http/http.h"

#include <pthread.h>
#include <string.h>

#define CRC32_POLY_REFLECTED 0xEDB88320u

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_build(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32_POLY_REFLECTED : c >> 1;
        crc_table[0][i] = c;
    }
    /* Table t holds the CRC of byte i followed by t zero bytes. */
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t http_crc32_update(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_table_once, crc_table_build);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = load_le32(p) ^ c;
        uint32_t hi = load_le32(p + 4);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^
            crc_table[2][(hi >> 8) & 0xFF] ^ crc_table[1][(hi >> 16) & 0xFF] ^
            crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

uint32_t http_crc32(const void *p, size_t n)
{
    return http_crc32_update(0, p, n);
}
