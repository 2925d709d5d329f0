/* Helpers shared by the WAL tests: temporary directories, running the loop until a
 * condition holds (with a deadline), and deterministic entry payloads. */
#ifndef STRATA_TEST_WAL_UTIL_H
#define STRATA_TEST_WAL_UTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "storage/wal/wal.h"

static inline char *tu_tmpdir(void)
{
    char tmpl[] = "/tmp/strata-wal-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static inline void tu_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[4096 + 256 + 2];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' || strlen(dir) > 4096)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static inline int tu_count_segments(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strlen(e->d_name) == 20 && strcmp(e->d_name + 16, ".wal") == 0)
            n++;
    closedir(d);
    return n;
}

static inline double tu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs the loop until *flag becomes true; false if 10 seconds pass first. */
static inline bool tu_run_until(uv_loop_t *loop, const bool *flag)
{
    double deadline = tu_now() + 10;
    while (!*flag) {
        if (tu_now() > deadline)
            return false;
        uv_run(loop, UV_RUN_ONCE);
    }
    return true;
}

/* Runs the loop until *count reaches want; false after 10 seconds. */
static inline bool tu_run_count(uv_loop_t *loop, const int *count, int want)
{
    double deadline = tu_now() + 10;
    while (*count < want) {
        if (tu_now() > deadline)
            return false;
        uv_run(loop, UV_RUN_ONCE);
    }
    return true;
}

/* The payload of entry (group, index, term): deterministic, length 1..300. */
static inline size_t tu_payload(uint64_t group, uint64_t index, uint64_t term, uint8_t *out)
{
    uint64_t x = group * 0x9E3779B97F4A7C15ULL ^ index * 0xC2B2AE3D27D4EB4FULL ^ term;
    size_t len = 1 + (size_t)(x % 300);
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[i] = (uint8_t)x;
    }
    return len;
}

static void tu_close_done(void *data)
{
    *(bool *)data = true;
}

/* Closes the WAL and runs the loop until it is closed. */
static inline bool tu_close(wal *w, uv_loop_t *loop)
{
    bool done = false;
    wal_close(w, tu_close_done, &done);
    return tu_run_until(loop, &done);
}

#endif
