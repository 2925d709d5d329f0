/* Frame codec: round trips, stream reassembly, and every kind of corruption. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rpc/frame.h"

#define MAX_PAYLOAD (1u << 20)

/* Encodes one frame into a fresh allocation; *len gets its size. */
static uint8_t *encode(uint8_t type, uint32_t msg_type, uint64_t corr, const uint8_t *payload,
                       uint32_t plen, size_t *len)
{
    *len = RPC_FRAME_HEADER_SIZE + plen;
    uint8_t *out = malloc(*len);
    assert_non_null(out);
    if (plen > 0)
        memcpy(out + RPC_FRAME_HEADER_SIZE, payload, plen);
    rpc_frame f = {.type = type,
                   .msg_type = msg_type,
                   .corr_id = corr,
                   .payload = out + RPC_FRAME_HEADER_SIZE,
                   .len = plen};
    rpc_frame_write_header(out, &f);
    return out;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + seed);
    return p;
}

static void test_round_trip_sizes(void **state)
{
    (void)state;
    static const uint32_t sizes[] = {0, 1, 31, 32, 100, 4096, 70000, MAX_PAYLOAD};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *pl = pattern(sizes[i], (unsigned)i);
        size_t len;
        uint8_t *wire =
            encode(RPC_FRAME_REQUEST, 0xdeadbeef, 0x0102030405060708ull, pl, sizes[i], &len);
        rpc_decoder d;
        rpc_decoder_init(&d, MAX_PAYLOAD);
        const uint8_t *p = wire;
        size_t n = len;
        rpc_frame f;
        strata_err e;
        assert_int_equal(rpc_decoder_feed(&d, &p, &n, &f, &e), 1);
        assert_int_equal(n, 0);
        assert_int_equal(f.type, RPC_FRAME_REQUEST);
        assert_int_equal(f.msg_type, 0xdeadbeef);
        assert_true(f.corr_id == 0x0102030405060708ull);
        assert_int_equal(f.len, sizes[i]);
        if (sizes[i] > 0)
            assert_memory_equal(f.payload, pl, sizes[i]);
        assert_false(rpc_decoder_mid_frame(&d));
        assert_int_equal(rpc_decoder_feed(&d, &p, &n, &f, &e), 0);
        rpc_decoder_free(&d);
        free(wire);
        free(pl);
    }
}

/* Several frames back to back, fed in chunks of every size from 1 to 67 bytes. */
static void test_chunked_stream(void **state)
{
    (void)state;
    enum { FRAMES = 20 };
    size_t total = 0, lens[FRAMES];
    uint8_t *frames[FRAMES];
    for (int i = 0; i < FRAMES; i++) {
        uint8_t *pl = pattern((size_t)i * 37, (unsigned)i);
        frames[i] = encode((uint8_t)(RPC_FRAME_MESSAGE + i % 4), (uint32_t)i, (uint64_t)i * 7, pl,
                           (uint32_t)(i * 37), &lens[i]);
        free(pl);
        total += lens[i];
    }
    uint8_t *stream = malloc(total);
    size_t off = 0;
    for (int i = 0; i < FRAMES; i++) {
        memcpy(stream + off, frames[i], lens[i]);
        off += lens[i];
    }
    for (size_t chunk = 1; chunk <= 67; chunk++) {
        rpc_decoder d;
        rpc_decoder_init(&d, MAX_PAYLOAD);
        int got = 0;
        for (size_t pos = 0; pos < total; pos += chunk) {
            const uint8_t *p = stream + pos;
            size_t n = total - pos < chunk ? total - pos : chunk;
            rpc_frame f;
            strata_err e;
            int rc;
            while ((rc = rpc_decoder_feed(&d, &p, &n, &f, &e)) == 1) {
                assert_int_equal(f.msg_type, got);
                assert_true(f.corr_id == (uint64_t)got * 7);
                assert_int_equal(f.len, got * 37);
                uint8_t *want = pattern(f.len, (unsigned)got);
                if (f.len > 0)
                    assert_memory_equal(f.payload, want, f.len);
                free(want);
                got++;
            }
            assert_int_equal(rc, 0);
            assert_int_equal(n, 0);
        }
        assert_int_equal(got, FRAMES);
        assert_false(rpc_decoder_mid_frame(&d));
        rpc_decoder_free(&d);
    }
    for (int i = 0; i < FRAMES; i++)
        free(frames[i]);
    free(stream);
}

/* Flipping any single bit of a frame is detected, whatever follows it in the stream. */
static void test_every_bit_flip(void **state)
{
    (void)state;
    uint8_t *pl = pattern(50, 3);
    size_t len;
    uint8_t *wire = encode(RPC_FRAME_MESSAGE, 9, 11, pl, 50, &len);
    /* Padding so a flipped length that grows (but stays in bounds) still completes. */
    size_t padded = len + MAX_PAYLOAD;
    uint8_t *buf = calloc(1, padded);
    for (size_t bit = 0; bit < len * 8; bit++) {
        memcpy(buf, wire, len);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        rpc_decoder d;
        rpc_decoder_init(&d, MAX_PAYLOAD);
        const uint8_t *p = buf;
        size_t n = padded;
        rpc_frame f;
        strata_err e;
        int rc = rpc_decoder_feed(&d, &p, &n, &f, &e);
        assert_int_equal(rc, -1);
        assert_int_equal(e.code, ERR_CORRUPT);
        /* Sticky: the stream cannot be resynchronised. */
        n = padded;
        p = buf;
        assert_int_equal(rpc_decoder_feed(&d, &p, &n, &f, &e), -1);
        rpc_decoder_free(&d);
    }
    free(buf);
    free(wire);
    free(pl);
}

static void test_truncated(void **state)
{
    (void)state;
    uint8_t *pl = pattern(100, 1);
    size_t len;
    uint8_t *wire = encode(RPC_FRAME_RESPONSE, 1, 2, pl, 100, &len);
    for (size_t cut = 0; cut < len; cut++) {
        rpc_decoder d;
        rpc_decoder_init(&d, MAX_PAYLOAD);
        const uint8_t *p = wire;
        size_t n = cut;
        rpc_frame f;
        strata_err e;
        assert_int_equal(rpc_decoder_feed(&d, &p, &n, &f, &e), 0);
        assert_int_equal(n, 0);
        assert_int_equal(rpc_decoder_mid_frame(&d), cut > 0);
        /* The rest completes it. */
        n = len - cut;
        assert_int_equal(rpc_decoder_feed(&d, &p, &n, &f, &e), 1);
        assert_memory_equal(f.payload, pl, 100);
        rpc_decoder_free(&d);
    }
    free(wire);
    free(pl);
}

/* Rewrites a header field and recomputes the checksum, so only the field is wrong. */
static int decode_with_header(uint8_t *wire, size_t len, size_t max, strata_err *e)
{
    rpc_decoder d;
    rpc_decoder_init(&d, max);
    const uint8_t *p = wire;
    size_t n = len;
    rpc_frame f;
    int rc = rpc_decoder_feed(&d, &p, &n, &f, e);
    /* Never allocates for a rejected header. */
    if (rc < 0)
        assert_int_equal(d.buf_cap, 0);
    rpc_decoder_free(&d);
    return rc;
}

static void test_bad_header_fields(void **state)
{
    (void)state;
    strata_err e;
    size_t len;
    uint8_t *wire = encode(RPC_FRAME_MESSAGE, 1, 0, (const uint8_t *)"abc", 3, &len);

    /* Oversized length: rejected from the header alone, with no allocation. */
    assert_int_equal(decode_with_header(wire, RPC_FRAME_HEADER_SIZE, 2, &e), -1);
    assert_int_equal(e.code, ERR_CORRUPT);
    assert_non_null(strstr(e.msg, "length"));

    uint8_t hdr[RPC_FRAME_HEADER_SIZE];
    memcpy(hdr, wire, sizeof hdr);
    hdr[20] = 0xff; /* 4 GiB-ish length */
    assert_int_equal(decode_with_header(hdr, sizeof hdr, MAX_PAYLOAD, &e), -1);

    memcpy(hdr, wire, sizeof hdr);
    hdr[0] = 'X';
    assert_int_equal(decode_with_header(hdr, sizeof hdr, MAX_PAYLOAD, &e), -1);
    assert_non_null(strstr(e.msg, "magic"));

    memcpy(hdr, wire, sizeof hdr);
    hdr[4] = 2;
    assert_int_equal(decode_with_header(hdr, sizeof hdr, MAX_PAYLOAD, &e), -1);
    assert_non_null(strstr(e.msg, "version"));

    static const uint8_t bad_types[] = {0, 7, 255};
    for (size_t i = 0; i < sizeof bad_types; i++) {
        memcpy(hdr, wire, sizeof hdr);
        hdr[5] = bad_types[i];
        assert_int_equal(decode_with_header(hdr, sizeof hdr, MAX_PAYLOAD, &e), -1);
        assert_non_null(strstr(e.msg, "type"));
    }

    memcpy(hdr, wire, sizeof hdr);
    hdr[7] = 1;
    assert_int_equal(decode_with_header(hdr, sizeof hdr, MAX_PAYLOAD, &e), -1);
    assert_non_null(strstr(e.msg, "flags"));

    /* Damaged payload with an intact header: checksum. */
    wire[RPC_FRAME_HEADER_SIZE + 1] ^= 0x40;
    assert_int_equal(decode_with_header(wire, len, MAX_PAYLOAD, &e), -1);
    assert_non_null(strstr(e.msg, "checksum"));
    free(wire);
}

/* A length exactly at the bound is fine; one past is not. */
static void test_length_bound(void **state)
{
    (void)state;
    strata_err e;
    size_t len;
    uint8_t *pl = pattern(64, 0);
    uint8_t *wire = encode(RPC_FRAME_MESSAGE, 1, 0, pl, 64, &len);
    assert_int_equal(decode_with_header(wire, len, 64, &e), 1);
    assert_int_equal(decode_with_header(wire, len, 63, &e), -1);
    free(wire);
    free(pl);
}

/* Garbage never crashes and fails once the first header is complete. */
static void test_random_garbage(void **state)
{
    (void)state;
    srand(7);
    uint8_t buf[4096];
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = (uint8_t)rand();
        rpc_decoder d;
        rpc_decoder_init(&d, 1024);
        const uint8_t *p = buf;
        size_t n = sizeof buf;
        rpc_frame f;
        strata_err e;
        int rc = rpc_decoder_feed(&d, &p, &n, &f, &e);
        assert_int_equal(rc, -1);
        assert_true(d.buf_cap <= 1024);
        rpc_decoder_free(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_sizes),  cmocka_unit_test(test_chunked_stream),
        cmocka_unit_test(test_every_bit_flip),    cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_header_fields), cmocka_unit_test(test_length_bound),
        cmocka_unit_test(test_random_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
