/*
 * DynamoDB JSON. Parsing follows how DynamoDB's front end behaves: the body is first
 * deserialized into typed structures (shape problems are SerializationException, and they
 * win), then validated (ValidationException). We do both in one walk: shape errors stop
 * the walk, the first validation error is remembered and reported only if the whole value
 * turns out to be well-shaped.
 */
#include "storage/data/ddbjson.h"

#include <assert.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/base64.h"

typedef struct {
    arena *a;
    strata_err *err;  /* the caller's: receives the final error */
    strata_err first; /* first validation error seen */
    bool invalid;     /* `first` is set */
    bool placeholders; /* the top-level names are placeholders (":v"), checked elsewhere */
} parser;

#define MSG_EMPTY_AV                                                                               \
    "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
#define MSG_MULTI_AV                                                                               \
    "Supplied AttributeValue has more than one datatypes set, must contain exactly one of "        \
    "the supported datatypes"
#define MSG_NESTING AV_NESTING_MSG
#define MSG_NULL_FALSE                                                                             \
    "One or more parameter values were invalid: Null attribute value types must have the "         \
    "value of true"
/* Attribute names are at least one character long, at the top of an item and in every
 * map inside a value (DynamoDB's naming rules). */
#define MSG_EMPTY_NAME      "One or more parameter values were invalid: Empty attribute name"
#define MSG_LIST_UNEXPECTED "Start of list found where not expected"
#define MSG_MAP_UNEXPECTED  "Start of structure or map found where not expected."

static int shape_error(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int shape_error(parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strata_err_setv(p->err, ERR_SERIALIZATION, fmt, ap);
    va_end(ap);
    return -1;
}

/* Records the first validation error; parsing goes on to look for shape errors. */
static void invalid(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void invalid(parser *p, const char *fmt, ...)
{
    if (p->invalid)
        return;
    va_list ap;
    va_start(ap, fmt);
    strata_err_setv(&p->first, ERR_VALIDATION, fmt, ap);
    va_end(ap);
    p->invalid = true;
}

static void invalid_from(parser *p, const strata_err *e)
{
    if (!p->invalid) {
        p->first = *e;
        p->invalid = true;
    }
}

static int nomem(parser *p)
{
    return strata_err_set(p->err, ERR_NOMEM, "out of memory parsing an item");
}

/* The message Jackson-style deserialization gives for a JSON value of the wrong kind
 * where `want` ("String", "Boolean", "Blob") was expected. */
static int scalar_shape_error(parser *p, const json_t *j, const char *want)
{
    const char *article = strcmp(want, "Blob") == 0 ? "a" : "an";
    if (json_is_object(j))
        return shape_error(p, MSG_MAP_UNEXPECTED);
    if (json_is_array(j))
        return shape_error(p, MSG_LIST_UNEXPECTED);
    if (json_is_boolean(j))
        return shape_error(p, "class java.lang.Boolean can not be converted to %s %s", article,
                           want);
    /* Current DynamoDB words a number where a string belongs this way (older releases
     * named the Java class, as for the other cases below). */
    if (json_is_number(j) && strcmp(want, "String") == 0)
        return shape_error(p, "NUMBER_VALUE cannot be converted to String");
    if (json_is_integer(j)) {
        json_int_t v = json_integer_value(j);
        const char *cls = v >= -32768 && v <= 32767          ? "java.lang.Short"
                          : v >= INT32_MIN && v <= INT32_MAX ? "java.lang.Integer"
                                                             : "java.lang.Long";
        return shape_error(p, "class %s can not be converted to %s %s", cls, article, want);
    }
    if (json_is_real(j))
        return shape_error(p, "class java.lang.Double can not be converted to %s %s", article,
                           want);
    if (json_is_string(j)) /* only for Boolean */
        return shape_error(p, "'%.200s' can not be converted to an Boolean", json_string_value(j));
    return shape_error(p, "Unexpected value type in payload");
}

static int copy_string(parser *p, const json_t *j, const uint8_t **ptr, uint32_t *len)
{
    size_t n = json_string_length(j);
    if (n > UINT32_MAX)
        return nomem(p);
    uint8_t *dst = arena_memdup(p->a, json_string_value(j), n);
    if (dst == NULL)
        return nomem(p);
    *ptr = dst;
    *len = (uint32_t)n;
    return 0;
}

static bool b64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

static int parse_blob(parser *p, const json_t *j, const uint8_t **ptr, uint32_t *len)
{
    if (!json_is_string(j))
        return scalar_shape_error(p, j, "Blob");
    const char *s = json_string_value(j);
    size_t n = json_string_length(j);
    int shown = n > 200 ? 200 : (int)n;
    if (n % 4 != 0)
        return shape_error(p,
                           "'%.*s' can not be converted to a Blob: Base64 encoded length is "
                           "expected a multiple of 4 bytes but found: %zu",
                           shown, s, n);
    for (size_t i = 0; i < n; i++) {
        bool pad_ok = s[i] == '=' && (i + 1 == n || s[i + 1] == '=');
        if (!b64_char(s[i]) && !pad_ok)
            return shape_error(p,
                               "'%.*s' can not be converted to a Blob: Invalid Base64 "
                               "character: '%c'",
                               shown, s, s[i]);
    }
    uint8_t *dst = arena_alloc(p->a, b64_max_decoded_len(n));
    if (dst == NULL)
        return nomem(p);
    size_t out_len;
    if (!b64_decode(s, n, dst, &out_len))
        return shape_error(p,
                           "'%.*s' can not be converted to a Blob: Invalid last non-pad Base64 "
                           "character dectected",
                           shown, s);
    *ptr = dst;
    *len = (uint32_t)out_len;
    return 0;
}

static int parse_number(parser *p, const json_t *j, num *n)
{
    if (!json_is_string(j))
        return scalar_shape_error(p, j, "String");
    strata_err e;
    if (num_parse(json_string_value(j), json_string_length(j), n, &e) != 0) {
        invalid_from(p, &e);
        memset(n, 0, sizeof *n);
    }
    return 0;
}

static int parse_bool(parser *p, const json_t *j, bool *b)
{
    if (!json_is_boolean(j)) {
        if (json_is_string(j)) {
            char up[201];
            size_t n = json_string_length(j);
            if (n > 200)
                n = 200;
            for (size_t i = 0; i < n; i++)
                up[i] = (char)toupper((unsigned char)json_string_value(j)[i]);
            up[n] = '\0';
            return shape_error(p, "'%s' can not be converted to an Boolean", up);
        }
        return scalar_shape_error(p, j, "Boolean");
    }
    *b = json_is_true(j);
    return 0;
}

static int parse_value(parser *p, const json_t *j, int depth, av *out);

static int parse_members(parser *p, const json_t *j, int depth, av *out)
{
    size_t n = json_object_size(j);
    av_attr *attrs = arena_alloc(p->a, (n ? n : 1) * sizeof(av_attr));
    if (attrs == NULL)
        return nomem(p);
    size_t k = 0;
    for (void *it = json_object_iter((json_t *)j); it != NULL;
         it = json_object_iter_next((json_t *)j, it)) {
        const char *name = json_object_iter_key(it);
        size_t name_len = json_object_iter_key_len(it);
        if (name_len > UINT32_MAX)
            return nomem(p);
        if (name_len == 0 && !(depth == 0 && p->placeholders))
            invalid(p, MSG_EMPTY_NAME);
        attrs[k].name = arena_memdup(p->a, name, name_len);
        if (attrs[k].name == NULL && name_len > 0)
            return nomem(p);
        attrs[k].name_len = (uint32_t)name_len;
        if (parse_value(p, json_object_iter_value(it), depth, &attrs[k].value) != 0)
            return -1;
        k++;
    }
    out->type = AV_M;
    out->u.map.attrs = attrs;
    out->u.map.count = (uint32_t)k;
    strata_err e;
    if (av_map_sort(out, &e) != 0)
        invalid_from(p, &e); /* only if the object had duplicate keys */
    return 0;
}

static int parse_map(parser *p, const json_t *j, int depth, av *out)
{
    if (json_is_array(j))
        return shape_error(p, MSG_LIST_UNEXPECTED);
    if (!json_is_object(j))
        return shape_error(p, "Expected map or null");
    out->type = AV_M;
    out->u.map.attrs = NULL;
    out->u.map.count = 0;
    if (depth >= AV_MAX_NESTING) {
        invalid(p, MSG_NESTING);
        return 0;
    }
    return parse_members(p, j, depth + 1, out);
}

static int parse_list(parser *p, const json_t *j, int depth, av *out)
{
    if (json_is_object(j))
        return shape_error(p, MSG_MAP_UNEXPECTED);
    if (!json_is_array(j))
        return shape_error(p, "Expected list or null");
    out->type = AV_L;
    out->u.list.elems = NULL;
    out->u.list.count = 0;
    if (depth >= AV_MAX_NESTING) {
        invalid(p, MSG_NESTING);
        return 0;
    }
    size_t n = json_array_size(j);
    av *elems = arena_alloc(p->a, (n ? n : 1) * sizeof(av));
    if (elems == NULL)
        return nomem(p);
    for (size_t i = 0; i < n; i++) {
        if (parse_value(p, json_array_get(j, i), depth + 1, &elems[i]) != 0)
            return -1;
    }
    out->u.list.elems = elems;
    out->u.list.count = (uint32_t)n;
    return 0;
}

/* "[a, b]" from the input strings in input order, as DynamoDB quotes a string set. */
static void describe_input_set(const json_t *j, char *out, size_t cap)
{
    size_t k = 0;
    out[k++] = '[';
    for (size_t i = 0; i < json_array_size(j) && k + 8 < cap; i++) {
        const json_t *e = json_array_get(j, i);
        if (i > 0) {
            out[k++] = ',';
            out[k++] = ' ';
        }
        size_t n = json_string_length(e);
        if (n > cap - k - 4)
            n = cap - k - 4;
        memcpy(out + k, json_string_value(e), n);
        k += n;
    }
    out[k++] = ']';
    out[k] = '\0';
}

static int parse_set(parser *p, const json_t *j, av_type t, av *out)
{
    if (json_is_object(j))
        return shape_error(p, MSG_MAP_UNEXPECTED);
    if (!json_is_array(j))
        return shape_error(p, "Expected list or null");
    size_t n = json_array_size(j);
    av *elems = arena_alloc(p->a, (n ? n : 1) * sizeof(av));
    if (elems == NULL)
        return nomem(p);
    bool null_member = false;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(j, i);
        av *v = &elems[i];
        memset(v, 0, sizeof *v);
        if (json_is_null(e)) {
            null_member = true;
            v->type = t == AV_NS ? AV_N : t == AV_SS ? AV_S : AV_B;
            continue;
        }
        int rc;
        if (t == AV_SS) {
            v->type = AV_S;
            rc = json_is_string(e) ? copy_string(p, e, &v->u.bytes.ptr, &v->u.bytes.len)
                                   : scalar_shape_error(p, e, "String");
        } else if (t == AV_NS) {
            v->type = AV_N;
            rc = parse_number(p, e, &v->u.n);
        } else {
            v->type = AV_B;
            rc = parse_blob(p, e, &v->u.bytes.ptr, &v->u.bytes.len);
        }
        if (rc != 0)
            return -1;
    }
    out->type = t;
    out->u.list.elems = elems;
    out->u.list.count = (uint32_t)n;
    if (null_member) {
        if (t == AV_NS)
            invalid(p, "The parameter cannot be converted to a numeric value");
        else
            invalid(p, "One or more parameter values were invalid: An AttributeValue may not "
                       "contain a null value in a set");
        out->u.list.count = 0;
        return 0;
    }
    if (p->invalid) {
        out->u.list.count = 0; /* elements may be placeholders; never sort them */
        return 0;
    }
    strata_err e;
    if (av_set_sort(out, &e) != 0) {
        if ((t == AV_SS || t == AV_BS) && n > 0) { /* BS: the base64 text as sent */
            char desc[400];
            describe_input_set(j, desc, sizeof desc);
            av_duplicate_set_error(t, desc, &e);
        }
        invalid_from(p, &e);
    }
    return 0;
}

static int parse_typed(parser *p, av_type t, const json_t *j, int depth, av *out)
{
    memset(out, 0, sizeof *out);
    out->type = t;
    switch (t) {
    case AV_S:
        if (!json_is_string(j))
            return scalar_shape_error(p, j, "String");
        return copy_string(p, j, &out->u.bytes.ptr, &out->u.bytes.len);
    case AV_N:
        return parse_number(p, j, &out->u.n);
    case AV_B:
        return parse_blob(p, j, &out->u.bytes.ptr, &out->u.bytes.len);
    case AV_BOOL:
        return parse_bool(p, j, &out->u.boolean);
    case AV_NULL: {
        bool b;
        if (parse_bool(p, j, &b) != 0)
            return -1;
        if (!b)
            invalid(p, MSG_NULL_FALSE);
        return 0;
    }
    case AV_M:
        return parse_map(p, j, depth, out);
    case AV_L:
        return parse_list(p, j, depth, out);
    case AV_SS:
    case AV_NS:
    case AV_BS:
        return parse_set(p, j, t, out);
    }
    return shape_error(p, "Unexpected value type in payload");
}

/* `depth`: number of M and L values enclosing this one. */
static int parse_value(parser *p, const json_t *j, int depth, av *out)
{
    memset(out, 0, sizeof *out);
    out->type = AV_NULL; /* placeholder until a type is found */
    if (json_is_array(j))
        return shape_error(p, MSG_LIST_UNEXPECTED);
    if (json_is_null(j)) {
        invalid(p, MSG_EMPTY_AV);
        return 0;
    }
    if (!json_is_object(j))
        return shape_error(p, "Expected null");
    int types = 0;
    for (void *it = json_object_iter((json_t *)j); it != NULL;
         it = json_object_iter_next((json_t *)j, it)) {
        const json_t *member = json_object_iter_value(it);
        if (json_is_null(member))
            continue; /* a null member is an absent member */
        av_type t = av_type_from_name(json_object_iter_key(it), json_object_iter_key_len(it));
        if (t == 0)
            continue; /* unknown members are ignored, as DynamoDB does */
        av tmp;
        if (parse_typed(p, t, member, depth, &tmp) != 0)
            return -1;
        if (types++ == 0)
            *out = tmp;
    }
    if (types == 0)
        invalid(p, MSG_EMPTY_AV);
    else if (types > 1)
        invalid(p, MSG_MULTI_AV);
    return 0;
}

static int finish(parser *p, int rc)
{
    if (rc != 0)
        return -1;
    if (p->invalid) {
        if (p->err != NULL)
            *p->err = p->first;
        return -1;
    }
    return 0;
}

int ddbjson_to_value(const json_t *j, arena *a, av *out, strata_err *err)
{
    parser p = {.a = a, .err = err, .invalid = false};
    return finish(&p, parse_value(&p, j, 0, out));
}

static int to_map(const json_t *j, arena *a, bool placeholders, av *out, strata_err *err)
{
    parser p = {.a = a, .err = err, .invalid = false, .placeholders = placeholders};
    int rc;
    if (json_is_array(j))
        rc = shape_error(&p, MSG_LIST_UNEXPECTED);
    else if (!json_is_object(j))
        rc = shape_error(&p, "Expected map or null");
    else
        rc = parse_members(&p, j, 0, out);
    return finish(&p, rc);
}

int ddbjson_to_item(const json_t *j, arena *a, av *out, strata_err *err)
{
    return to_map(j, a, false, out, err);
}

int ddbjson_to_values(const json_t *j, arena *a, av *out, strata_err *err)
{
    return to_map(j, a, true, out, err);
}

/* ---- output as jansson ---- */

static json_t *num_json(const num *n)
{
    char text[NUM_TEXT_MAX];
    size_t len = num_format(n, text, sizeof text);
    return json_stringn_nocheck(text, len);
}

static json_t *b64_json(const uint8_t *p, uint32_t n)
{
    size_t len = b64_encoded_len(n);
    char stack[256];
    char *text = len <= sizeof stack ? stack : malloc(len ? len : 1);
    if (text == NULL)
        return NULL;
    b64_encode(p, n, text);
    json_t *j = json_stringn_nocheck(text, len);
    if (text != stack)
        free(text);
    return j;
}

static json_t *payload_json(const av *v);

static json_t *map_json(const av *v)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    for (uint32_t i = 0; i < v->u.map.count; i++) {
        const av_attr *at = &v->u.map.attrs[i];
        json_t *val = ddbjson_from_value(&at->value);
        if (val == NULL ||
            json_object_setn_new(o, at->name_len ? at->name : "", at->name_len, val) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *payload_json(const av *v)
{
    switch (v->type) {
    case AV_S:
        return json_stringn(v->u.bytes.len ? (const char *)v->u.bytes.ptr : "", v->u.bytes.len);
    case AV_N:
        return num_json(&v->u.n);
    case AV_B:
        return b64_json(v->u.bytes.ptr, v->u.bytes.len);
    case AV_BOOL:
        return json_boolean(v->u.boolean);
    case AV_NULL:
        return json_true();
    case AV_M:
        return map_json(v);
    case AV_L:
    case AV_SS:
    case AV_NS:
    case AV_BS: {
        json_t *arr = json_array();
        if (arr == NULL)
            return NULL;
        for (uint32_t i = 0; i < v->u.list.count; i++) {
            const av *e = &v->u.list.elems[i];
            json_t *x = v->type == AV_L ? ddbjson_from_value(e) : payload_json(e);
            if (x == NULL || json_array_append_new(arr, x) != 0) {
                json_decref(arr);
                return NULL;
            }
        }
        return arr;
    }
    }
    return NULL;
}

json_t *ddbjson_from_value(const av *v)
{
    const char *name = av_type_name(v->type);
    json_t *payload = name ? payload_json(v) : NULL;
    if (payload == NULL)
        return NULL;
    json_t *o = json_object();
    if (o == NULL || json_object_set_new_nocheck(o, name, payload) != 0) {
        json_decref(o);
        if (o == NULL)
            json_decref(payload);
        return NULL;
    }
    return o;
}

json_t *ddbjson_from_item(const av *item)
{
    return map_json(item);
}

/* ---- output as text ---- */

/* True if byte c goes into a JSON string as it is. */
static bool plain_char(unsigned char c)
{
    return c >= 0x20 && c != '"' && c != '\\';
}

void ddbjson_write_string(const char *s, size_t len, buf *out)
{
    static const char hex[] = "0123456789abcdef";
    /* Most strings (names, values) need no escape: one reservation and one copy
     * instead of three appends. */
    size_t plain = 0;
    /* Eight bytes at a time (values are mostly long plain text): a word has a byte to
     * escape iff it has a byte below 0x20, a '"' or a '\\' (the classic "has zero
     * byte" / "has byte less than" tests, exact for whether any byte matches). */
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (len - plain >= 8) {
        uint64_t w;
        memcpy(&w, s + plain, 8);
        uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
        uint64_t hit = ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
                       ((backslash - ones) & ~backslash);
        if (hit & highs)
            break;
        plain += 8;
    }
    while (plain < len && plain_char((unsigned char)s[plain]))
        plain++;
    if (plain == len) {
        if (!buf_reserve(out, len + 2))
            return;
        uint8_t *p = out->data + out->len;
        p[0] = '"';
        if (len > 0) /* s may be NULL for an empty string */
            memcpy(p + 1, s, len);
        p[len + 1] = '"';
        out->len += len + 2;
        return;
    }
    buf_put_u8(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (plain_char(c))
            continue;
        buf_append(out, s + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 0};
        size_t n = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
        }
        buf_append(out, esc, n);
    }
    if (len > run) /* s may be NULL for an empty string */
        buf_append(out, s + run, len - run);
    buf_put_u8(out, '"');
}

static void write_payload(const av *v, buf *out);

static void write_map_body(const av *v, buf *out)
{
    buf_put_u8(out, '{');
    for (uint32_t i = 0; i < v->u.map.count; i++) {
        const av_attr *at = &v->u.map.attrs[i];
        if (i > 0)
            buf_put_u8(out, ',');
        ddbjson_write_string(at->name, at->name_len, out);
        buf_put_u8(out, ':');
        ddbjson_write_value(&at->value, out);
    }
    buf_put_u8(out, '}');
}

static void write_payload(const av *v, buf *out)
{
    switch (v->type) {
    case AV_S:
        ddbjson_write_string((const char *)v->u.bytes.ptr, v->u.bytes.len, out);
        return;
    case AV_N: {
        char text[NUM_TEXT_MAX + 2];
        text[0] = '"';
        size_t len = num_format(&v->u.n, text + 1, NUM_TEXT_MAX);
        text[len + 1] = '"';
        buf_append(out, text, len + 2);
        return;
    }
    case AV_B:
        buf_put_u8(out, '"');
        b64_encode_buf(v->u.bytes.ptr, v->u.bytes.len, out);
        buf_put_u8(out, '"');
        return;
    case AV_BOOL:
        if (v->u.boolean)
            buf_append(out, "true", 4);
        else
            buf_append(out, "false", 5);
        return;
    case AV_NULL:
        buf_append(out, "true", 4);
        return;
    case AV_M:
        write_map_body(v, out);
        return;
    case AV_L:
    case AV_SS:
    case AV_NS:
    case AV_BS:
        buf_put_u8(out, '[');
        for (uint32_t i = 0; i < v->u.list.count; i++) {
            if (i > 0)
                buf_put_u8(out, ',');
            if (v->type == AV_L)
                ddbjson_write_value(&v->u.list.elems[i], out);
            else
                write_payload(&v->u.list.elems[i], out);
        }
        buf_put_u8(out, ']');
        return;
    }
    out->failed = true;
}

void ddbjson_write_value(const av *v, buf *out)
{
    const char *name = av_type_name(v->type);
    if (name == NULL) {
        out->failed = true;
        return;
    }
    /* {"<type>": in one append; type names are at most 4 characters. */
    char head[16];
    size_t n = strlen(name);
    assert(n + 4 <= sizeof head);
    head[0] = '{';
    head[1] = '"';
    memcpy(head + 2, name, n);
    head[n + 2] = '"';
    head[n + 3] = ':';
    buf_append(out, head, n + 4);
    write_payload(v, out);
    buf_put_u8(out, '}');
}

void ddbjson_write_item(const av *item, buf *out)
{
    write_map_body(item, out);
}
