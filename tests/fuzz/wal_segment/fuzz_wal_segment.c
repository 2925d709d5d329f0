/*
 * Fuzz harness: arbitrary bytes as WAL segment files -> recovery never crashes, and
 * whatever it accepts can be read back.
 *
 * Input: byte 0 bit 0 set means two segments: bytes 1-3 (big-endian) give where the
 * rest is cut between segment 1 and segment 2; otherwise the rest is segment 1.
 * Byte 0 bit 1 set means the harness first recomputes the segment header's and every
 * record's checksum (following the length fields), so that the fuzzer also reaches
 * replay with well-checksummed but otherwise arbitrary records.
 * Files go to a scratch directory on /dev/shm (fsync there is cheap).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>
#include <xxhash.h>

#include "storage/wal/wal.h"

static char dir[256];

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void fix_checksums(uint8_t *p, size_t n)
{
    if (n < 32)
        return;
    put64(p + 24, XXH3_64bits(p, 24));
    for (size_t off = 32; off + 32 <= n;) {
        size_t len = (size_t)p[off + 8] << 24 | (size_t)p[off + 9] << 16 |
                     (size_t)p[off + 10] << 8 | p[off + 11];
        if (len > n - off - 32)
            break;
        put64(p + off, XXH3_64bits(p + off + 8, 24 + len));
        off += (32 + len + 7) & ~(size_t)7;
    }
}

static void write_file(const char *name, const uint8_t *src, size_t n, int fix)
{
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        abort();
    if (n)
        memcpy(p, src, n);
    if (fix)
        fix_checksums(p, n);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (n && fwrite(p, 1, n, f) != n)
        abort();
    fclose(f);
    free(p);
}

static void remove_files(void)
{
    char path[512];
    const char *names[] = {"0000000000000001.wal", "0000000000000002.wal", "0000000000000003.wal"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
}

static void cleanup(void)
{
    char path[512];
    remove_files();
    snprintf(path, sizeof path, "%s/LOCK", dir);
    unlink(path);
    rmdir(dir);
}

static void closed(void *data)
{
    *(int *)data = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/strata-fuzz-wal-%d",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
        atexit(cleanup);
    }
    remove_files();
    int fix = size > 0 && (data[0] & 2);
    if (size >= 4 && (data[0] & 1)) {
        size_t cut = (size_t)data[1] << 16 | (size_t)data[2] << 8 | data[3];
        const uint8_t *rest = data + 4;
        size_t n = size - 4;
        if (cut > n)
            cut = n;
        write_file("0000000000000001.wal", rest, cut, fix);
        write_file("0000000000000002.wal", rest + cut, n - cut, fix);
    } else if (size > 0) {
        write_file("0000000000000001.wal", data + 1, size - 1, fix);
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    wal_options o = {.dir = dir, .segment_size = 64 << 10};
    wal *w;
    strata_err err;
    if (wal_open(&o, &loop, &w, &err) == 0) {
        size_t n = wal_groups(w, NULL, 0);
        uint64_t *ids = calloc(n ? n : 1, sizeof *ids);
        wal_groups(w, ids, n);
        for (size_t i = 0; i < n; i++) {
            wal_group_info info;
            if (wal_group_state(w, ids[i], &info, &err) != 0)
                abort(); /* listed groups exist */
            if (info.first_index > info.last_index)
                continue;
            wal_entry *e;
            size_t got;
            /* Accepted bytes were checksummed: reading them back must work. */
            if (wal_read_entries(w, ids[i], info.first_index, info.last_index, 1 << 20, &e, &got,
                                 &err) != 0)
                abort();
            free(e);
        }
        free(ids);
        int done = 0;
        wal_close(w, closed, &done);
        while (!done)
            uv_run(&loop, UV_RUN_ONCE);
    }
    uv_loop_close(&loop);
    return 0;
}
