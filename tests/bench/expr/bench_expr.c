/*
 * bench_expr: throughput and latency of parsing and evaluating typical expressions.
 *
 * For each workload (parse / evaluate a condition, a filter and an update), RUNS runs
 * of BATCHES batches of BATCH operations are timed; per-operation latency samples are
 * batch time / BATCH (single operations are too short to time one by one). Printed:
 * the median over runs of ops/s, p50 and p99. A parse includes what a request pays:
 * a fresh ctx with its names and values, the parse and the unused-placeholder check.
 *
 *   bench_expr [runs]      (default 5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "storage/data/ddbjson.h"
#include "storage/expr/expr.h"

#define BATCH   64
#define BATCHES 400

typedef struct {
    const char *name;
    expr_kind kind;
    const char *text;
    const char *names;  /* JSON object */
    const char *values; /* DynamoDB JSON map */
} workload;

static const char *item_json =
    "{\"pk\":{\"S\":\"user#1234\"},\"sk\":{\"S\":\"order#2024-05-01\"},"
    "\"version\":{\"N\":\"17\"},\"status\":{\"S\":\"SHIPPED\"},\"price\":{\"N\":\"129.95\"},"
    "\"tags\":{\"SS\":[\"books\",\"gift\",\"prime\"]},\"count\":{\"N\":\"3\"},"
    "\"items\":{\"L\":[{\"M\":{\"sku\":{\"S\":\"A1\"},\"qty\":{\"N\":\"1\"}}},"
    "{\"M\":{\"sku\":{\"S\":\"B2\"},\"qty\":{\"N\":\"2\"}}}]},"
    "\"address\":{\"M\":{\"city\":{\"S\":\"Lisbon\"},\"zip\":{\"S\":\"1000-001\"}}},"
    "\"tmp\":{\"BOOL\":true},\"seen\":{\"NS\":[\"1\",\"2\"]}}";

static const workload workloads[] = {
    {"condition", EXPR_CONDITION,
     "attribute_not_exists(pk) OR (#v = :expected AND size(#t) < :max)",
     "{\"#v\":\"version\",\"#t\":\"tags\"}",
     "{\":expected\":{\"N\":\"17\"},\":max\":{\"N\":\"10\"}}"},
    {"filter", EXPR_FILTER,
     "#st IN (:a, :b, :c) AND price BETWEEN :lo AND :hi AND contains(tags, :t) AND "
     "address.city = :city",
     "{\"#st\":\"status\"}",
     "{\":a\":{\"S\":\"NEW\"},\":b\":{\"S\":\"PAID\"},\":c\":{\"S\":\"SHIPPED\"},"
     "\":lo\":{\"N\":\"10\"},\":hi\":{\"N\":\"500\"},\":t\":{\"S\":\"gift\"},"
     "\":city\":{\"S\":\"Lisbon\"}}"},
    {"update", EXPR_UPDATE,
     "SET #c = if_not_exists(#c, :zero) + :one, updated = :now, #i = list_append(#i, :new), "
     "address.zip = :zip REMOVE tmp ADD seen :s",
     "{\"#c\":\"count\",\"#i\":\"items\"}",
     "{\":zero\":{\"N\":\"0\"},\":one\":{\"N\":\"1\"},\":now\":{\"N\":\"1717171717\"},"
     "\":new\":{\"L\":[{\"M\":{\"sku\":{\"S\":\"C3\"},\"qty\":{\"N\":\"5\"}}}]},"
     "\":zip\":{\"S\":\"1000-002\"},\":s\":{\"NS\":[\"3\"]}}"},
};

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static expr *parse_one(const workload *w, arena *a, const json_t *names, const json_t *values)
{
    strata_err err;
    expr_ctx *c = expr_ctx_new(a);
    av vals;
    if (c == NULL || expr_ctx_set_names_json(c, names, &err) != 0 ||
        ddbjson_to_item(values, a, &vals, &err) != 0 || expr_ctx_set_values(c, &vals, &err) != 0)
        return NULL;
    expr *e = expr_parse(c, w->kind, w->text, strlen(w->text), &err);
    if (e == NULL || expr_ctx_check_unused(c, &err) != 0) {
        fprintf(stderr, "%s: %s\n", w->name, err.msg);
        return NULL;
    }
    return e;
}

/* One op of the evaluation workload. Returns 0 on success. */
static int eval_one(const workload *w, const expr *e, const av *item, arena *scratch)
{
    strata_err err;
    if (w->kind == EXPR_UPDATE) {
        av out;
        arena_reset(scratch);
        return expr_update_apply(e, item, scratch, &out, &err);
    }
    bool result;
    if (expr_condition_eval(e, item, &result, &err) != 0 || !result)
        return -1;
    return 0;
}

static void run(const workload *w, bool eval, int runs, const av *item, const json_t *names,
                const json_t *values)
{
    double *rate = calloc((size_t)runs, sizeof(double));
    double *p50 = calloc((size_t)runs, sizeof(double));
    double *p99 = calloc((size_t)runs, sizeof(double));
    double *lat = calloc(BATCHES, sizeof(double));
    arena pa, scratch;
    arena_init(&pa, 0);
    arena_init(&scratch, 0);
    expr *e = parse_one(w, &pa, names, values);
    if (e == NULL)
        exit(1);
    for (int r = 0; r < runs; r++) {
        double total = 0;
        for (int b = 0; b < BATCHES; b++) {
            double t0 = now_sec();
            for (int i = 0; i < BATCH; i++) {
                if (eval) {
                    if (eval_one(w, e, item, &scratch) != 0) {
                        fprintf(stderr, "%s: evaluation failed\n", w->name);
                        exit(1);
                    }
                } else {
                    arena_reset(&scratch);
                    if (parse_one(w, &scratch, names, values) == NULL)
                        exit(1);
                }
            }
            double dt = now_sec() - t0;
            total += dt;
            lat[b] = dt / BATCH * 1e9;
        }
        rate[r] = BATCH * BATCHES / total;
        qsort(lat, BATCHES, sizeof(double), cmp_double);
        p50[r] = lat[BATCHES / 2];
        p99[r] = lat[BATCHES * 99 / 100];
    }
    printf("%-10s %-5s %12.0f ops/s   p50 %8.0f ns   p99 %8.0f ns   (median of %d runs)\n", w->name,
           eval ? "eval" : "parse", median(rate, runs), median(p50, runs), median(p99, runs), runs);
    arena_free(&pa);
    arena_free(&scratch);
    free(rate);
    free(p50);
    free(p99);
    free(lat);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    if (runs < 1)
        runs = 1;
    arena a;
    arena_init(&a, 0);
    strata_err err;
    json_t *ij = json_loads(item_json, 0, NULL);
    av item;
    if (ij == NULL || ddbjson_to_item(ij, &a, &item, &err) != 0) {
        fprintf(stderr, "bad item\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++) {
        json_t *names = json_loads(workloads[i].names, 0, NULL);
        json_t *values = json_loads(workloads[i].values, 0, NULL);
        run(&workloads[i], false, runs, &item, names, values);
        run(&workloads[i], true, runs, &item, names, values);
        json_decref(names);
        json_decref(values);
    }
    json_decref(ij);
    arena_free(&a);
    return 0;
}
