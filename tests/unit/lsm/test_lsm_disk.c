/* Unit tests for storage/lsm on-disk formats and crash safety: table files (build, read,
 * bloom, reverse), the manifest codec, flipped bytes in every file, and a child process
 * killed with SIGKILL at random points while writing, flushing and compacting. */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/unit/lsm/helpers.h"

#include "storage/lsm/lsm_int.h"

static void table_roundtrip_and_bloom(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/000001.sst", dir);
    strata_err err = {0};
    table_opts o = {.block_bytes = 256, .bloom_bits_per_key = 10};
    table_builder *tb = tb_new(path, &o, &err);
    assert_non_null(tb);
    buf k;
    buf_init(&k, 0);
    char uk[32], v[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(uk, sizeof uk, "key%05d", i * 2);
        snprintf(v, sizeof v, "value%d", i);
        ikey_build(&k, uk, strlen(uk), 100 + (uint64_t)i, TYPE_PUT);
        assert_int_equal(tb_add(tb, k.data, k.len, (uint8_t *)v, strlen(v), &err), 0);
    }
    uint64_t size;
    assert_int_equal(tb_finish(tb, &size, &err), 0);
    table *t = table_open(path, "000001.sst", 1, &err);
    assert_non_null(t);
    assert_int_equal(table_file_size(t), size);
    cache *c = cache_new(1 << 20);
    buf val;
    buf_init(&val, 0);
    uint64_t seq;
    int type;
    int false_pos = 0;
    for (int i = 0; i < 2000; i++) {
        snprintf(uk, sizeof uk, "key%05d", i * 2);
        assert_int_equal(table_get(t, c, uk, strlen(uk), SEQ_MAX, &seq, &type, &val, &err), 1);
        assert_int_equal(seq, 100 + (uint64_t)i);
        snprintf(v, sizeof v, "value%d", i);
        assert_int_equal(val.len, strlen(v));
        assert_memory_equal(val.data, v, val.len);
        /* Not visible to an older snapshot. */
        assert_int_equal(table_get(t, c, uk, strlen(uk), 99 + (uint64_t)i, &seq, &type, &val, &err),
                         0);
        snprintf(uk, sizeof uk, "key%05d", i * 2 + 1);
        assert_int_equal(table_get(t, c, uk, strlen(uk), SEQ_MAX, &seq, &type, &val, &err), 0);
        false_pos += table_may_contain(t, uk, strlen(uk));
    }
    assert_true(false_pos < 2000 / 20); /* ~1% expected at 10 bits per key */
    /* Forward and reverse iteration see every entry in order. */
    iter *it = table_iter_new(t, c);
    int n = 0;
    for (it->first(it); it->valid(it); it->next(it))
        n++;
    assert_int_equal(n, 2000);
    n = 0;
    for (it->last(it); it->valid(it); it->prev(it)) {
        size_t kn;
        const uint8_t *key = it->key(it, &kn);
        snprintf(uk, sizeof uk, "key%05d", (1999 - n) * 2);
        assert_memory_equal(key, uk, kn - TRAILER_SIZE);
        n++;
    }
    assert_int_equal(n, 2000);
    ikey_build(&k, "key00501", 8, SEQ_MAX, TYPE_PUT);
    it->seek(it, k.data, k.len);
    assert_true(it->valid(it));
    size_t kn;
    assert_memory_equal(it->key(it, &kn), "key00502", 8);
    it->prev(it);
    assert_memory_equal(it->key(it, &kn), "key00500", 8);
    assert_int_equal(it->status(it, NULL), 0);
    it->destroy(it);
    table_close(t);
    cache_free(c);
    buf_free(&k);
    buf_free(&val);
    rm_rf(dir);
}

static void manifest_roundtrip_and_corruption(void **state)
{
    (void)state;
    u64map *d = u64map_new();
    u64map_max(d, 5, 50);
    u64map_max(d, 0, 7);
    u64map_max(d, 5, 40); /* max keeps 50 */
    file_meta f = {.number = 3, .size = 1000, .min_seq = 1, .max_seq = 9, .clean_seq = 4};
    uint8_t sk[9] = "a", lk[9] = "z";
    f.smallest = sk;
    f.smallest_len = 9;
    f.largest = lk;
    f.largest_len = 9;
    file_meta *added[1] = {&f};
    int lv[1] = {2};
    rtomb t = {
        .start = (uint8_t *)"b", .start_len = 1, .end = (uint8_t *)"c", .end_len = 1, .seq = 8};
    buf b;
    buf_init(&b, 0);
    manifest_encode(&b, 10, 9, NULL, NULL, 0, added, lv, 1, &t, 1, d);
    manifest m;
    strata_err err = {0};
    assert_int_equal(manifest_decode(b.data, b.len, &m, &err), 0);
    assert_int_equal(m.next_file, 10);
    assert_int_equal(m.nfiles, 1);
    assert_int_equal(m.files[0].level, 2);
    assert_int_equal(m.files[0].clean_seq, 4);
    assert_int_equal(m.ntombs, 1);
    assert_int_equal(m.tombs[0].seq, 8);
    assert_int_equal(u64map_get(m.durable, 5), 50);
    assert_int_equal(u64map_get(m.durable, 0), 7);
    manifest_clear(&m);
    /* Every flipped byte and every truncation is caught. */
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x20;
        assert_int_equal(manifest_decode(b.data, b.len, &m, &err), -1);
        assert_int_equal(err.code, ERR_CORRUPT);
        b.data[i] ^= 0x20;
    }
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(manifest_decode(b.data, n, &m, &err), -1);
    buf_free(&b);
    u64map_free(d);
}

/* ---- Flipped bytes in real files ---- */
#define NCK 3000

static void fill_db(uv_loop_t *loop, const char *dir)
{
    lsm_options o = {.dir = dir, .block_bytes = 1024};
    lsm *db = open_db(loop, &o);
    char k[32], v[64];
    for (int i = 0; i < NCK; i++) {
        snprintf(k, sizeof k, "key%06d", i);
        snprintf(v, sizeof v, "value-%06d-%s", i, i % 2 ? "odd" : "even-even-even");
        put1(db, k, v, 1, (uint64_t)i + 1);
        if (i % 1000 == 999)
            flush_db(loop, db); /* several files */
    }
    flush_db(loop, db);
    close_db(loop, db);
}

/* Opens and reads everything; returns the first error code (ERR_NONE if all is well).
 * Whatever is returned before an error must be correct. */
static strata_code check_all(uv_loop_t *loop, const char *dir)
{
    lsm_options o = {.dir = dir};
    lsm *db;
    strata_err err = {0};
    if (lsm_open(&o, loop, &db, &err) < 0)
        return err.code;
    strata_code code = ERR_NONE;
    lsm_iter *it = lsm_iter_new(db, NULL, &err);
    int i = 0;
    for (lsm_iter_first(it); lsm_iter_valid(it); lsm_iter_next(it), i++) {
        char k[32], v[64];
        snprintf(k, sizeof k, "key%06d", i);
        snprintf(v, sizeof v, "value-%06d-%s", i, i % 2 ? "odd" : "even-even-even");
        size_t kl, vl;
        const void *key = lsm_iter_key(it, &kl);
        const void *val = lsm_iter_value(it, &vl);
        assert_int_equal(kl, strlen(k));
        assert_memory_equal(key, k, kl);
        assert_int_equal(vl, strlen(v));
        assert_memory_equal(val, v, vl);
    }
    if (lsm_iter_status(it, &err) < 0) {
        code = err.code;
        assert_non_null(strstr(err.msg, ".sst")); /* names the file */
    } else {
        assert_int_equal(i, NCK);
    }
    lsm_iter_free(it);
    /* Point reads: the right value, or the corruption reported; never a wrong answer. */
    for (int j = 0; j < NCK && code == ERR_NONE; j += 7) {
        char k[32], v[64];
        snprintf(k, sizeof k, "key%06d", j);
        buf val;
        buf_init(&val, 0);
        int rc = lsm_get(db, NULL, k, strlen(k), &val, &err);
        if (rc < 0) {
            code = err.code;
        } else {
            assert_int_equal(rc, 1);
            snprintf(v, sizeof v, "value-%06d-%s", j, j % 2 ? "odd" : "even-even-even");
            assert_int_equal(val.len, strlen(v));
            assert_memory_equal(val.data, v, val.len);
        }
        buf_free(&val);
    }
    close_db(loop, db);
    return code;
}

static void flip(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, off), 1);
    c ^= 0x10;
    assert_int_equal(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

static void flipped_bytes_are_detected(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    fill_db(&loop, dir);
    assert_int_equal(check_all(&loop, dir), ERR_NONE);
    DIR *d = opendir(dir);
    struct dirent *e;
    char names[16][64];
    int nn = 0;
    while ((e = readdir(d)) != NULL && nn < 16)
        if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof names[0])
            memcpy(names[nn++], e->d_name, strlen(e->d_name) + 1);
    closedir(d);
    assert_true(nn >= 2);
    uint32_t r = 99;
    for (int f = 0; f < nn; f++) {
        char path[256];
        int pn = snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        assert_true(pn > 0 && (size_t)pn < sizeof path);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        /* The last 200 bytes (footer, index, filter) entirely, then random positions. */
        int tries = 0;
        for (off_t off = st.st_size - 1; off >= 0 && tries < 320; tries++) {
            flip(path, off);
            strata_code code = check_all(&loop, dir);
            if (code != ERR_CORRUPT)
                fail_msg("%s: flip at %lld gave %d", names[f], (long long)off, code);
            flip(path, off);
            if (tries < 200) {
                off--;
            } else {
                r = r * 1103515245 + 12345;
                off = (off_t)((r >> 8) % (uint32_t)st.st_size);
            }
        }
    }
    assert_int_equal(check_all(&loop, dir), ERR_NONE);
    /* A missing table file is an I/O error at open, not silence. */
    for (int f = 0; f < nn; f++) {
        if (strstr(names[f], ".sst") == NULL)
            continue;
        char path[256];
        int pn = snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        assert_true(pn > 0 && (size_t)pn < sizeof path);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(check_all(&loop, dir), ERR_IO);
        break;
    }
    uv_loop_close(&loop);
    rm_rf(dir);
}

/* ---- SIGKILL at random points ---- */
#define CRASH_KEYS 500

/* Log entry i writes key (i % CRASH_KEYS); every 7th is a delete, every 97th a range
 * delete of 10 keys. The state after entries 1..D is a pure function of D. */
static void apply_entry(lsm_batch *b, uint64_t i)
{
    char k[32], k2[32], v[64];
    strata_err err = {0};
    int key = (int)(i % CRASH_KEYS);
    snprintf(k, sizeof k, "c%05d", key);
    if (i % 97 == 0) {
        snprintf(k2, sizeof k2, "c%05d", key + 10);
        lsm_batch_delete_range(b, k, strlen(k), k2, strlen(k2), &err);
    } else if (i % 7 == 0) {
        lsm_batch_delete(b, k, strlen(k), &err);
    } else {
        snprintf(v, sizeof v, "val-%llu-%0*d", (unsigned long long)i, (int)(i % 50), 0);
        lsm_batch_put(b, k, strlen(k), v, strlen(v), &err);
    }
}

static void model_at(uint64_t d, char (*vals)[64], bool *live)
{
    memset(live, 0, CRASH_KEYS * sizeof *live);
    for (uint64_t i = 1; i <= d; i++) {
        int key = (int)(i % CRASH_KEYS);
        if (i % 97 == 0) {
            for (int x = key; x < key + 10 && x < CRASH_KEYS; x++)
                live[x] = false;
        } else if (i % 7 == 0) {
            live[key] = false;
        } else {
            snprintf(vals[key], 64, "val-%llu-%0*d", (unsigned long long)i, (int)(i % 50), 0);
            live[key] = true;
        }
    }
}

typedef struct {
    lsm *db;
    int fd;
} child_ctx;

static void child_flushed(void *arg, const strata_err *err)
{
    child_ctx *c = arg;
    if (err->code != ERR_NONE)
        _exit(3);
    uint64_t d = lsm_durable_index(c->db, 1);
    if (write(c->fd, &d, sizeof d) != sizeof d)
        _exit(4);
}

static void child_wrote(void *arg, const strata_err *err)
{
    (void)arg;
    if (err->code != ERR_NONE)
        _exit(5);
}

static void child_run(const char *dir, int fd)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    lsm_options o = {.dir = dir,
                     .memtable_bytes = 16 * 1024,
                     .table_file_bytes = 16 * 1024,
                     .level1_bytes = 64 * 1024,
                     .block_bytes = 512,
                     .l0_compaction_files = 2};
    lsm *db;
    strata_err err;
    if (lsm_open(&o, &loop, &db, &err) < 0)
        _exit(2);
    child_ctx c = {db, fd};
    /* Replay from the durable index, as the node does from its log. */
    uint64_t i = lsm_durable_index(db, 1);
    lsm_batch *b = lsm_batch_new();
    for (;;) {
        i++;
        lsm_batch_clear(b);
        apply_entry(b, i);
        while (lsm_write(db, b, 1, i, &err) < 0) {
            if (err.code != ERR_BUSY)
                _exit(6);
            lsm_on_writable(db, child_wrote, NULL);
            uv_run(&loop, UV_RUN_ONCE);
        }
        if (i % 300 == 0)
            lsm_flush(db, child_flushed, &c);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
}

static void sigkill_never_loses_durable_data(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    uint32_t r = (uint32_t)getpid();
    uint64_t reported = 0;
    int compacted = 0;
    static char vals[CRASH_KEYS][64];
    static bool live[CRASH_KEYS];
    for (int round = 0; round < 8; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child_run(dir, p[1]);
            _exit(0);
        }
        close(p[1]);
        r = r * 1103515245 + 12345;
        usleep(150000 + (r >> 8) % 500000);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status));
        uint64_t d;
        while (read(p[0], &d, sizeof d) == sizeof d)
            if (d > reported)
                reported = d;
        close(p[0]);

        uv_loop_t loop;
        uv_loop_init(&loop);
        lsm_options o = {.dir = dir};
        lsm *db = open_db(&loop, &o);
        uint64_t durable = lsm_durable_index(db, 1);
        assert_true(durable >= reported); /* nothing reported durable is lost */
        model_at(durable, vals, live);
        char k[32], v[64];
        for (int x = 0; x < CRASH_KEYS; x++) {
            snprintf(k, sizeof k, "c%05d", x);
            int rc = get1(db, NULL, k, v, sizeof v);
            if (rc != (live[x] ? 1 : 0))
                fail_msg("round %d durable %llu key %s: got %d", round, (unsigned long long)durable,
                         k, rc);
            if (rc)
                assert_string_equal(v, vals[x]);
        }
        lsm_stats st;
        lsm_get_stats(db, &st);
        for (int l = 1; l < LSM_LEVELS; l++)
            compacted += st.files[l];
        close_db(&loop, db);
        uv_loop_close(&loop);
    }
    assert_true(reported > 0);
    assert_true(compacted > 0);   /* the child was compacting, not only flushing */
    rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_roundtrip_and_bloom),
        cmocka_unit_test(manifest_roundtrip_and_corruption),
        cmocka_unit_test(flipped_bytes_are_detected),
        cmocka_unit_test(sigkill_never_loses_durable_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
