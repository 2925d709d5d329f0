/*
 * JSON text -> jansson values (contract in json.h): one recursive-descent pass over the
 * bytes. Strings without escapes go straight from the input to jansson; strings with
 * escapes are decoded into one scratch buffer reused for the whole parse.
 */
#include "storage/data/json.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/base/buf.h"

typedef struct {
    const uint8_t *start, *p, *end;
    int flags;
    int depth;
    buf scratch; /* decoded strings with escapes */
    strata_err *err;
} parser;

static json_t *parse_value(parser *ps);

static json_t *fail(parser *ps, const char *what)
{
    strata_err_set(ps->err, ERR_VALIDATION, "invalid JSON at byte %zu: %s",
                   (size_t)(ps->p - ps->start), what);
    return NULL;
}

static json_t *nomem(parser *ps)
{
    strata_err_set(ps->err, ERR_NOMEM, "out of memory parsing JSON");
    return NULL;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

/* Length of the well-formed UTF-8 sequence (2..4 bytes) at p, or 0: no overlong forms,
 * no surrogates, nothing above U+10FFFF (as jansson's utf8_check_full). */
static size_t utf8_seq(const uint8_t *p, const uint8_t *end)
{
    uint8_t c = p[0];
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* U+D800..U+DFFF */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *out)
{
    if (end - p < 4)
        return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static void put_utf8(buf *b, uint32_t cp)
{
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xC0 | cp >> 6);
        u[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xE0 | cp >> 12);
        u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (uint8_t)(0xF0 | cp >> 18);
        u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        u[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buf_append(b, u, n);
}

/* One escape after the backslash at ps->p[-1], appended decoded to the scratch buffer. */
static int parse_escape(parser *ps)
{
    if (ps->p >= ps->end)
        return fail(ps, "unterminated escape"), -1;
    uint8_t c = *ps->p++;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *at = c != 'u' && c != 0 ? memchr(from, c, sizeof from - 1) : NULL;
    if (at != NULL) {
        buf_append(&ps->scratch, &to[at - from], 1);
        return 0;
    }
    if (c != 'u')
        return fail(ps, "invalid escape"), -1;
    uint32_t cp;
    if (hex4(ps->p, ps->end, &cp) < 0)
        return fail(ps, "invalid \\u escape"), -1;
    ps->p += 4;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail(ps, "lone low surrogate"), -1;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo;
        if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
            hex4(ps->p + 2, ps->end, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
            return fail(ps, "lone high surrogate"), -1;
        ps->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0 && !(ps->flags & STRATA_JSON_ALLOW_NUL))
        return fail(ps, "\\u0000 is not allowed"), -1;
    put_utf8(&ps->scratch, cp);
    return 0;
}

/* The string whose opening quote is at ps->p: (*out, *len) point into the input when it has
 * no escapes, else into the scratch buffer (valid until the next string). */
static int parse_string(parser *ps, const char **out, size_t *len)
{
    const uint8_t *s = ++ps->p;
    bool escaped = false;
    for (;;) {
        if (ps->p >= ps->end)
            return fail(ps, "unterminated string"), -1;
        uint8_t c = *ps->p;
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(ps, "control character in string"), -1;
        if (c == '\\') {
            if (!escaped) {
                buf_reset(&ps->scratch);
                buf_append(&ps->scratch, s, (size_t)(ps->p - s));
                escaped = true;
            }
            ps->p++;
            if (parse_escape(ps) < 0)
                return -1;
            continue;
        }
        size_t n = 1;
        if (c >= 0x80 && (n = utf8_seq(ps->p, ps->end)) == 0)
            return fail(ps, "invalid UTF-8 in string"), -1;
        if (escaped)
            buf_append(&ps->scratch, ps->p, n);
        ps->p += n;
    }
    if (escaped) {
        if (ps->scratch.failed)
            return nomem(ps), -1;
        *out = (const char *)ps->scratch.data;
        *len = ps->scratch.len;
    } else {
        *out = (const char *)s;
        *len = (size_t)(ps->p - s);
    }
    ps->p++; /* the closing quote */
    return 0;
}

static bool is_digit(const parser *ps)
{
    return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9';
}

static json_t *parse_number(parser *ps)
{
    const uint8_t *s = ps->p;
    bool real = false;
    if (*ps->p == '-')
        ps->p++;
    if (!is_digit(ps))
        return fail(ps, "invalid number");
    if (*ps->p++ == '0' && is_digit(ps))
        return fail(ps, "leading zero in number");
    while (is_digit(ps))
        ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        real = true;
        if (!is_digit(ps))
            return fail(ps, "invalid number");
        while (is_digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        real = true;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (!is_digit(ps))
            return fail(ps, "invalid number");
        while (is_digit(ps))
            ps->p++;
    }
    /* strtoll/strtod need a NUL-terminated copy; numbers are short, long ones go to the
     * scratch buffer. */
    size_t n = (size_t)(ps->p - s);
    char small[64];
    char *text = small;
    if (n >= sizeof small) {
        buf_reset(&ps->scratch);
        buf_append(&ps->scratch, s, n);
        buf_append(&ps->scratch, "", 1);
        if (ps->scratch.failed)
            return nomem(ps);
        text = (char *)ps->scratch.data;
    } else {
        memcpy(small, s, n);
        small[n] = '\0';
    }
    errno = 0;
    json_t *v;
    if (!real) {
        long long i = strtoll(text, NULL, 10);
        if (errno == ERANGE)
            return fail(ps, i < 0 ? "too big negative integer" : "too big integer");
        v = json_integer(i);
    } else {
        double d = strtod(text, NULL);
        if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL))
            return fail(ps, "real number overflow");
        v = json_real(d);
    }
    return v != NULL ? v : nomem(ps);
}

static json_t *parse_literal(parser *ps, const char *word, json_t *value)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "invalid token");
    ps->p += n;
    return value;
}

/* After a member or element: 1 when a ',' announces another, 0 when `close` ends the
 * container, -1 (err set) otherwise. Consumes what it read. */
static int next_or_close(parser *ps, uint8_t close, const char *expected)
{
    skip_ws(ps);
    if (ps->p < ps->end && (*ps->p == ',' || *ps->p == close)) {
        bool more = *ps->p++ == ',';
        if (more)
            skip_ws(ps);
        return more ? 1 : 0;
    }
    fail(ps, expected);
    return -1;
}

static json_t *parse_object(parser *ps)
{
    json_t *obj = json_object();
    if (obj == NULL)
        return nomem(ps);
    ps->p++; /* '{' */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return obj;
    }
    for (;;) {
        const char *key;
        size_t klen;
        if (ps->p >= ps->end || *ps->p != '"' || parse_string(ps, &key, &klen) < 0) {
            if (ps->err->code == ERR_NONE)
                fail(ps, "string or '}' expected");
            goto bad;
        }
        if (memchr(key, '\0', klen) != NULL) { /* as jansson, even with ALLOW_NUL */
            fail(ps, "NUL byte in object key");
            goto bad;
        }
        if ((ps->flags & STRATA_JSON_REJECT_DUPLICATES) && json_object_getn(obj, key, klen)) {
            fail(ps, "duplicate object key");
            goto bad;
        }
        /* A key with escapes lives in the scratch buffer, which the value's strings
         * reuse: keep a copy. */
        char kbuf[128];
        char *kcopy = (char *)key;
        if (key == (const char *)ps->scratch.data) {
            kcopy = klen < sizeof kbuf ? kbuf : malloc(klen);
            if (kcopy == NULL) {
                nomem(ps);
                goto bad;
            }
            memcpy(kcopy, key, klen);
        }
        skip_ws(ps);
        json_t *v = NULL;
        if (ps->p >= ps->end || *ps->p != ':') {
            fail(ps, "':' expected");
        } else {
            ps->p++;
            skip_ws(ps);
            v = parse_value(ps);
        }
        int rc = v != NULL ? json_object_setn_new_nocheck(obj, kcopy, klen, v) : -1;
        if (kcopy != kbuf && kcopy != key)
            free(kcopy);
        if (rc < 0) {
            if (v != NULL)
                nomem(ps);
            goto bad;
        }
        int more = next_or_close(ps, '}', "',' or '}' expected");
        if (more == 0)
            return obj;
        if (more < 0)
            goto bad;
    }
bad:
    json_decref(obj);
    return NULL;
}

static json_t *parse_array(parser *ps)
{
    json_t *arr = json_array();
    if (arr == NULL)
        return nomem(ps);
    ps->p++; /* '[' */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return arr;
    }
    for (;;) {
        json_t *v = parse_value(ps);
        if (v == NULL)
            goto bad;
        if (json_array_append_new(arr, v) < 0) {
            nomem(ps);
            goto bad;
        }
        int more = next_or_close(ps, ']', "',' or ']' expected");
        if (more == 0)
            return arr;
        if (more < 0)
            goto bad;
    }
bad:
    json_decref(arr);
    return NULL;
}

/* Counts every value's depth, scalars included, as jansson does. */
static json_t *parse_value(parser *ps)
{
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end of input");
    if (++ps->depth > STRATA_JSON_MAX_DEPTH)
        return fail(ps, "maximum nesting depth reached");
    json_t *v;
    switch (*ps->p) {
    case '{':
        v = parse_object(ps);
        break;
    case '[':
        v = parse_array(ps);
        break;
    case '"': {
        const char *s;
        size_t n;
        if (parse_string(ps, &s, &n) < 0)
            return NULL;
        v = json_stringn_nocheck(s, n);
        if (v == NULL)
            return nomem(ps);
        break;
    }
    case 't':
        v = parse_literal(ps, "true", json_true());
        break;
    case 'f':
        v = parse_literal(ps, "false", json_false());
        break;
    case 'n':
        v = parse_literal(ps, "null", json_null());
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            v = parse_number(ps);
        else
            v = fail(ps, "invalid token");
        break;
    }
    ps->depth--;
    return v;
}

json_t *strata_json_parse(const void *text, size_t len, int flags, strata_err *err)
{
    strata_err_clear(err);
    parser ps = {
        .start = text, .p = text, .end = (const uint8_t *)text + len, .flags = flags, .err = err};
    buf_init(&ps.scratch, 0);
    skip_ws(&ps);
    json_t *v = NULL;
    if (!(flags & STRATA_JSON_DECODE_ANY) && (ps.p >= ps.end || (*ps.p != '{' && *ps.p != '[')))
        fail(&ps, "'[' or '{' expected");
    else
        v = parse_value(&ps);
    if (v != NULL) {
        skip_ws(&ps);
        if (ps.p != ps.end) {
            json_decref(v);
            v = fail(&ps, "end of input expected");
        }
    }
    buf_free(&ps.scratch);
    return v;
}
