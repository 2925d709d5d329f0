/*
 * Data model throughput: item encode, item decode, DynamoDB JSON -> item (jansson parse
 * plus ddbjson_to_item) and item -> JSON text, on a realistic mix of items: 80% small
 * (~200 B: keys, a few numbers, a flag, a small map and set) and 20% large (~4 KB: nested
 * maps and lists of strings, numbers and sets).
 *
 * Prints, per operation, items/s and MB/s (median of RUNS runs) and per-item latency
 * percentiles over all runs.
 *   bench_data [items] [runs]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage/data/codec.h"
#include "storage/data/ddbjson.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void put_word(buf *b, int len)
{
    for (int i = 0; i < len; i++)
        buf_put_u8(b, (uint8_t)('a' + rnd() % 26));
}

static void put_number(buf *b)
{
    switch (rnd() % 3) {
    case 0:
        buf_printf(b, "%llu", (unsigned long long)(rnd() % 100000));
        break;
    case 1:
        buf_printf(b, "%llu.%02llu", (unsigned long long)(rnd() % 10000),
                   (unsigned long long)(rnd() % 100));
        break;
    default:
        buf_printf(b, "-%llu%llu", (unsigned long long)(rnd() % 1000000000),
                   (unsigned long long)(rnd() % 1000000000));
    }
}

/* DynamoDB JSON text of a small item (~200 bytes stored). */
static void small_item_json(buf *b, int id)
{
    buf_printf(b, "{\"pk\":{\"S\":\"user#%08d\"},\"sk\":{\"S\":\"order#", id);
    put_word(b, 10);
    buf_printf(b, "\"},\"amount\":{\"N\":\"");
    put_number(b);
    buf_printf(b, "\"},\"qty\":{\"N\":\"%d\"},\"paid\":{\"BOOL\":%s},", (int)(rnd() % 50),
               rnd() % 2 ? "true" : "false");
    buf_printf(b, "\"status\":{\"S\":\"SHIPPED\"},\"note\":{\"S\":\"");
    put_word(b, 60);
    buf_printf(b, "\"},\"tags\":{\"SS\":[\"");
    put_word(b, 5);
    buf_printf(b, "\",\"");
    put_word(b, 6);
    buf_printf(b, "\"]},\"addr\":{\"M\":{\"city\":{\"S\":\"");
    put_word(b, 8);
    buf_printf(b, "\"},\"zip\":{\"N\":\"%d\"},\"line\":{\"S\":\"", (int)(rnd() % 99999));
    put_word(b, 24);
    buf_printf(b, "\"}}}}");
}

/* DynamoDB JSON text of a large item (~4 KB stored). */
static void large_item_json(buf *b, int id)
{
    buf_printf(b, "{\"pk\":{\"S\":\"doc#%08d\"},\"sk\":{\"N\":\"%d\"},\"title\":{\"S\":\"", id,
               (int)(rnd() % 100000));
    put_word(b, 60);
    buf_printf(b, "\"},\"body\":{\"S\":\"");
    put_word(b, 1700);
    buf_printf(b, "\"},\"scores\":{\"NS\":[");
    for (int i = 0; i < 20; i++) {
        buf_printf(b, "%s\"%d.%d\"", i ? "," : "", i, (int)(rnd() % 1000));
    }
    buf_printf(b, "]},\"blob\":{\"B\":\"");
    for (int i = 0; i < 100; i++)
        buf_printf(b, "QUJD");
    buf_printf(b, "\"},\"sections\":{\"L\":[");
    for (int s = 0; s < 8; s++) {
        buf_printf(b, "%s{\"M\":{\"heading\":{\"S\":\"", s ? "," : "");
        put_word(b, 20);
        buf_printf(b, "\"},\"weight\":{\"N\":\"");
        put_number(b);
        buf_printf(b, "\"},\"visible\":{\"BOOL\":true},\"words\":{\"SS\":[");
        for (int w = 0; w < 6; w++) {
            buf_printf(b, "%s\"", w ? "," : "");
            put_word(b, 6 + w);
            buf_printf(b, "\"");
        }
        buf_printf(b, "]},\"meta\":{\"M\":{\"rev\":{\"N\":\"%d\"},\"by\":{\"S\":\"", s);
        put_word(b, 12);
        buf_printf(b, "\"},\"note\":{\"NULL\":true},\"hist\":{\"L\":[{\"N\":\"1\"},{\"N\":\"2\"},"
                      "{\"S\":\"");
        put_word(b, 100);
        buf_printf(b, "\"}]}}}}}");
    }
    buf_printf(b, "]}}");
}

typedef struct {
    char *json;
    size_t json_len;
    uint8_t *enc;
    size_t enc_len;
    av item;
} sample;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { OP_ENCODE, OP_DECODE, OP_JANSSON, OP_FROM_JSON, OP_TO_JSON, OP_COUNT };
static const char *op_names[OP_COUNT] = {"item encode", "item decode", "(jansson parse)",
                                         "JSON -> item", "item -> JSON"};

static arena scratch;
static buf out_buf;

static void run_op(int op, sample *s)
{
    strata_err err;
    av out;
    switch (op) {
    case OP_ENCODE:
        buf_reset(&out_buf);
        item_encode(&s->item, &out_buf);
        break;
    case OP_DECODE:
        if (item_decode(s->enc, s->enc_len, &scratch, &out, &err) != 0)
            abort();
        break;
    case OP_JANSSON:
    case OP_FROM_JSON: {
        json_error_t jerr;
        json_t *j = json_loadb(s->json, s->json_len, 0, &jerr);
        if (j == NULL || (op == OP_FROM_JSON && ddbjson_to_item(j, &scratch, &out, &err) != 0))
            abort();
        json_decref(j);
        break;
    }
    case OP_TO_JSON:
        buf_reset(&out_buf);
        ddbjson_write_item(&s->item, &out_buf);
        break;
    }
}

enum { MIX, SMALL, LARGE };

/* Item i is large when i % 5 == 4 (20% of the mix). */
static bool in_class(int i, int cls)
{
    return cls == MIX || (cls == LARGE) == (i % 5 == 4);
}

static void bench_class(const char *label, sample *samples, int n, int cls, int runs)
{
    int count = 0;
    size_t enc_bytes = 0, json_bytes = 0, size_bytes = 0;
    for (int i = 0; i < n; i++) {
        if (!in_class(i, cls))
            continue;
        count++;
        enc_bytes += samples[i].enc_len;
        json_bytes += samples[i].json_len;
        size_bytes += item_size(&samples[i].item);
    }
    if (count == 0)
        return;
    printf("\n%s items: %d, avg DynamoDB size %.0f B, encoded %.0f B, JSON %.0f B\n", label, count,
           (double)size_bytes / count, (double)enc_bytes / count, (double)json_bytes / count);
    uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)count);
    double rates[64];
    int nr = runs < 64 ? runs : 64;
    for (int op = 0; op < OP_COUNT; op++) {
        /* Throughput: untimed inner loop, median over runs. */
        for (int r = 0; r < nr; r++) {
            uint64_t start = now_ns();
            for (int i = 0; i < n; i++) {
                if (!in_class(i, cls))
                    continue;
                run_op(op, &samples[i]);
                arena_reset(&scratch); /* one arena per request, as the server does */
            }
            arena_reset(&scratch);
            rates[r] = (double)count / ((double)(now_ns() - start) / 1e9);
        }
        qsort(rates, (size_t)nr, sizeof(double), cmp_double);
        double items_s = rates[nr / 2];
        size_t bytes = op == OP_ENCODE || op == OP_DECODE ? enc_bytes : json_bytes;
        double mb_s = items_s * ((double)bytes / count) / 1e6;
        /* Latency: one more pass, each item timed. */
        size_t nlat = 0;
        for (int i = 0; i < n; i++) {
            if (!in_class(i, cls))
                continue;
            uint64_t t0 = now_ns();
            run_op(op, &samples[i]);
            lat[nlat++] = now_ns() - t0;
            arena_reset(&scratch);
        }
        arena_reset(&scratch);
        qsort(lat, nlat, sizeof(uint64_t), cmp_u64);
        printf("  %-16s %10.0f items/s %8.1f MB/s   p50 %7.2f us  p99 %7.2f us  p99.9 %7.2f us\n",
               op_names[op], items_s, mb_s, lat[nlat / 2] / 1e3, lat[nlat * 99 / 100] / 1e3,
               lat[nlat * 999 / 1000] / 1e3);
    }
    free(lat);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (n <= 0 || runs <= 0)
        return 2;
    arena keep;
    arena_init(&keep, 0);
    arena_init(&scratch, 0);
    sample *samples = calloc((size_t)n, sizeof *samples);
    buf b;
    buf_init(&b, 0);
    buf_init(&out_buf, 0);
    for (int i = 0; i < n; i++) {
        buf_reset(&b);
        if (i % 5 == 4)
            large_item_json(&b, i);
        else
            small_item_json(&b, i);
        sample *s = &samples[i];
        s->json_len = b.len;
        s->json = malloc(b.len);
        memcpy(s->json, b.data, b.len);
        json_error_t jerr;
        json_t *j = json_loadb(s->json, s->json_len, 0, &jerr);
        strata_err err;
        if (j == NULL || ddbjson_to_item(j, &keep, &s->item, &err) != 0) {
            fprintf(stderr, "bad sample %d: %s\n", i, j ? err.msg : jerr.text);
            return 1;
        }
        json_decref(j);
        buf_reset(&b);
        item_encode(&s->item, &b);
        s->enc_len = b.len;
        s->enc = malloc(b.len);
        memcpy(s->enc, b.data, b.len);
    }
    printf("bench_data: %d items (80%% small, 20%% large), median of %d runs\n", n, runs);
    bench_class("small (~200 B)", samples, n, SMALL, runs);
    bench_class("large (~4 KB)", samples, n, LARGE, runs);
    bench_class("80/20 mix of", samples, n, MIX, runs);
    printf("MB/s counts encoded item bytes for encode/decode, JSON text bytes otherwise.\n");
    for (int i = 0; i < n; i++) {
        free(samples[i].json);
        free(samples[i].enc);
    }
    free(samples);
    buf_free(&b);
    buf_free(&out_buf);
    arena_free(&scratch);
    arena_free(&keep);
    return 0;
}
