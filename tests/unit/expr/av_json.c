/* Test helpers: DynamoDB JSON <-> av (see av_json.h). */
#include <stdlib.h>
#include <string.h>

#include "storage/data/base64.h"
#include "tests/unit/expr/av_json.h"

static int scalar_from(arena *a, av_type t, const json_t *j, av *out)
{
    out->type = t;
    if (!json_is_string(j))
        return -1;
    const char *s = json_string_value(j);
    size_t len = json_string_length(j);
    if (t == AV_S) {
        out->u.bytes.ptr = (const uint8_t *)arena_memdup(a, s, len ? len : 1);
        out->u.bytes.len = (uint32_t)len;
        return 0;
    }
    if (t == AV_N)
        return num_parse(s, len, &out->u.n, NULL);
    uint8_t *bytes = arena_alloc(a, b64_max_decoded_len(len) + 1);
    size_t n;
    if (bytes == NULL || !b64_decode(s, len, bytes, &n))
        return -1;
    out->u.bytes.ptr = bytes;
    out->u.bytes.len = (uint32_t)n;
    return 0;
}

static int value_from(arena *a, const json_t *j, av *out);

static int map_from(arena *a, const json_t *j, av *out)
{
    if (!json_is_object(j))
        return -1;
    size_t n = json_object_size(j);
    av_attr *attrs = arena_zalloc(a, (n ? n : 1) * sizeof(av_attr));
    if (attrs == NULL)
        return -1;
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach((json_t *)j, key, val)
    {
        attrs[i].name = arena_strndup(a, key, strlen(key));
        attrs[i].name_len = (uint32_t)strlen(key);
        if (value_from(a, val, &attrs[i].value) != 0)
            return -1;
        i++;
    }
    out->type = AV_M;
    out->u.map.attrs = attrs;
    out->u.map.count = (uint32_t)n;
    return av_map_sort(out, NULL);
}

static int value_from(arena *a, const json_t *j, av *out)
{
    if (!json_is_object(j) || json_object_size(j) != 1)
        return -1;
    const char *key = json_object_iter_key(json_object_iter((json_t *)j));
    const json_t *v = json_object_get(j, key);
    av_type t = av_type_from_name(key, strlen(key));
    switch (t) {
    case AV_S:
    case AV_N:
    case AV_B:
        return scalar_from(a, t, v, out);
    case AV_BOOL:
        if (!json_is_boolean(v))
            return -1;
        out->type = AV_BOOL;
        out->u.boolean = json_is_true(v);
        return 0;
    case AV_NULL:
        out->type = AV_NULL;
        return 0;
    case AV_M:
        return map_from(a, v, out);
    case AV_L:
    case AV_SS:
    case AV_NS:
    case AV_BS: {
        if (!json_is_array(v))
            return -1;
        size_t n = json_array_size(v);
        av *elems = arena_zalloc(a, (n ? n : 1) * sizeof(av));
        if (elems == NULL)
            return -1;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(v, i);
            int rc = t == AV_L    ? value_from(a, e, &elems[i])
                     : t == AV_SS ? scalar_from(a, AV_S, e, &elems[i])
                     : t == AV_NS ? scalar_from(a, AV_N, e, &elems[i])
                                  : scalar_from(a, AV_B, e, &elems[i]);
            if (rc != 0)
                return -1;
        }
        out->type = t;
        out->u.list.elems = elems;
        out->u.list.count = (uint32_t)n;
        return t == AV_L ? 0 : av_set_sort(out, NULL);
    }
    default:
        return -1;
    }
}

av *tj_from_json(arena *a, const json_t *j, int as_item)
{
    av *out = arena_zalloc(a, sizeof(av));
    if (out == NULL)
        return NULL;
    int rc = as_item ? map_from(a, j, out) : value_from(a, j, out);
    return rc == 0 ? out : NULL;
}

av *tj_parse(arena *a, const char *text, int as_item)
{
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    if (j == NULL)
        return NULL;
    av *out = tj_from_json(a, j, as_item);
    json_decref(j);
    return out;
}

static json_t *to_json(const av *v);

static json_t *scalar_json(const av *v)
{
    if (v->type == AV_S)
        return json_stringn((const char *)v->u.bytes.ptr, v->u.bytes.len);
    if (v->type == AV_N) {
        char bytes[NUM_TEXT_MAX];
        size_t n = num_format(&v->u.n, bytes, sizeof(bytes));
        return json_stringn(bytes, n);
    }
    size_t n = b64_encoded_len(v->u.bytes.len);
    char *bytes = malloc(n + 1);
    b64_encode(v->u.bytes.ptr, v->u.bytes.len, bytes);
    json_t *s = json_stringn(bytes, n);
    free(bytes);
    return s;
}

static json_t *map_json(const av *m)
{
    json_t *o = json_object();
    for (uint32_t i = 0; i < m->u.map.count; i++) {
        const av_attr *at = &m->u.map.attrs[i];
        char *k = strndup(at->name, at->name_len);
        json_object_set_new(o, k, to_json(&at->value));
        free(k);
    }
    return o;
}

static json_t *to_json(const av *v)
{
    json_t *inner;
    switch (v->type) {
    case AV_S:
    case AV_N:
    case AV_B:
        inner = scalar_json(v);
        break;
    case AV_BOOL:
        inner = json_boolean(v->u.boolean);
        break;
    case AV_NULL:
        inner = json_true();
        break;
    case AV_M:
        inner = map_json(v);
        break;
    default:
        inner = json_array();
        for (uint32_t i = 0; i < v->u.list.count; i++)
            json_array_append_new(inner, v->type == AV_L ? to_json(&v->u.list.elems[i])
                                                         : scalar_json(&v->u.list.elems[i]));
        break;
    }
    json_t *o = json_object();
    json_object_set_new(o, av_type_name(v->type), inner);
    return o;
}

char *tj_dump_item(const av *item)
{
    json_t *o = map_json(item);
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}
