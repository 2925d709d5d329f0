/*
 * partition_apply on arbitrary command bytes against a real engine (in a temporary
 * directory, created once), then partition_result_decode of what it answered and of the
 * input itself. A command that does not decode, or decodes into nonsense (wrong key
 * schema, bad expressions, garbage item bytes), must be answered, never crash, and the
 * result must always decode; only a command with a kind or field this binary does not
 * know is refused unanswered (ERR_NEWER).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "cluster/partition.h"
#include "storage/lsm/lsm.h"

static lsm *db;
static uv_loop_t loop;
static uint64_t log_index;

static char dir[] = "/tmp/strata-fuzz-partition-XXXXXX";

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void setup(void)
{
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(cleanup);
    uv_loop_init(&loop);
    lsm_options o = {.dir = dir, .memtable_bytes = 4 << 20, .no_compaction = true};
    strata_err err;
    if (lsm_open(&o, &loop, &db, &err) < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (db == NULL)
        setup();
    partition_desc p = {.id = 1, .table_id = 1, .hash_lo = 0, .hash_hi = UINT64_MAX};
    buf res;
    buf_init(&res, 0);
    strata_err err;
    if (partition_apply(db, &p, data, size, ++log_index, &res, &err) == 0) {
        arena a;
        arena_init(&a, 0);
        partition_write_result r;
        if (partition_result_decode(res.data, res.len, &a, &r, &err) < 0)
            abort(); /* what apply answers always decodes */
        partition_result_decode(data, size, &a, &r, &err);
        int64_t di, db_;
        partition_result_delta(data, size, &di, &db_);
        arena_free(&a);
    } else if (err.code == ERR_BUSY) {
        uv_run(&loop, UV_RUN_NOWAIT); /* let the flush make room */
    } else if (err.code != ERR_NEWER || res.len != 0) {
        abort(); /* only the engine, or a newer binary's command, fails an apply */
    }
    buf_free(&res);
    /* Keep the memtable bounded: flush from time to time. */
    if ((log_index & 4095) == 0)
        uv_run(&loop, UV_RUN_NOWAIT);
    return 0;
}
