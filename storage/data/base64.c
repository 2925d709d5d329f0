#include "storage/data/base64.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0..63 for an alphabet character, 0xff otherwise. */
static uint8_t decode_char(char ch)
{
    uint8_t c = (uint8_t)ch;
    if (c >= 'A' && c <= 'Z')
        return (uint8_t)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (uint8_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (uint8_t)(c - '0' + 52);
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return 0xff;
}

size_t b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void b64_encode(const uint8_t *p, size_t n, char *out)
{
    size_t i = 0, k = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[k++] = alphabet[v >> 18];
        out[k++] = alphabet[(v >> 12) & 63];
        out[k++] = alphabet[(v >> 6) & 63];
        out[k++] = alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        out[k++] = alphabet[v >> 18];
        out[k++] = alphabet[(v >> 12) & 63];
        out[k++] = '=';
        out[k++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        out[k++] = alphabet[v >> 18];
        out[k++] = alphabet[(v >> 12) & 63];
        out[k++] = alphabet[(v >> 6) & 63];
        out[k++] = '=';
    }
}

void b64_encode_buf(const uint8_t *p, size_t n, buf *out)
{
    size_t len = b64_encoded_len(n);
    if (!buf_reserve(out, len))
        return;
    b64_encode(p, n, (char *)out->data + out->len);
    out->len += len;
}

size_t b64_max_decoded_len(size_t n)
{
    return n / 4 * 3;
}

bool b64_decode(const char *s, size_t n, uint8_t *out, size_t *out_len)
{
    if (n % 4 != 0)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        bool last = i + 4 == n;
        uint8_t c0 = decode_char(s[i]), c1 = decode_char(s[i + 1]);
        if (c0 == 0xff || c1 == 0xff)
            return false;
        if (last && s[i + 2] == '=') {
            if (s[i + 3] != '=' || (c1 & 15) != 0)
                return false;
            out[k++] = (uint8_t)(c0 << 2 | c1 >> 4);
            break;
        }
        uint8_t c2 = decode_char(s[i + 2]);
        if (c2 == 0xff)
            return false;
        if (last && s[i + 3] == '=') {
            if ((c2 & 3) != 0)
                return false;
            out[k++] = (uint8_t)(c0 << 2 | c1 >> 4);
            out[k++] = (uint8_t)(c1 << 4 | c2 >> 2);
            break;
        }
        uint8_t c3 = decode_char(s[i + 3]);
        if (c3 == 0xff)
            return false;
        out[k++] = (uint8_t)(c0 << 2 | c1 >> 4);
        out[k++] = (uint8_t)(c1 << 4 | c2 >> 2);
        out[k++] = (uint8_t)(c2 << 6 | c3);
    }
    *out_len = k;
    return true;
}
