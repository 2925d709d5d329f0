/*
 * Arbitrary bytes in arbitrary chunkings into the frame decoder. The first 4 input bytes
 * choose the chunking (a PRNG seed) and the frame bound; the rest is the stream. Every
 * frame the decoder accepts must respect the bound and must re-encode to a frame that
 * decodes to the same fields (the codec is a bijection on valid frames).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/frame.h"

static void check_round_trip(const rpc_frame *f)
{
    size_t len = RPC_FRAME_HEADER_SIZE + f->len;
    uint8_t *wire = malloc(len);
    assert(wire != NULL);
    if (f->len > 0)
        memcpy(wire + RPC_FRAME_HEADER_SIZE, f->payload, f->len);
    rpc_frame g = *f;
    g.payload = wire + RPC_FRAME_HEADER_SIZE;
    rpc_frame_write_header(wire, &g);
    rpc_decoder d;
    rpc_decoder_init(&d, f->len);
    const uint8_t *p = wire;
    size_t n = len;
    rpc_frame h;
    int rc = rpc_decoder_feed(&d, &p, &n, &h, NULL);
    assert(rc == 1 && n == 0);
    assert(h.type == f->type && h.msg_type == f->msg_type && h.corr_id == f->corr_id);
    assert(h.len == f->len);
    assert(f->len == 0 || memcmp(h.payload, f->payload, f->len) == 0);
    rpc_decoder_free(&d);
    free(wire);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t seed = data[0] | (uint32_t)data[1] << 8;
    size_t max_payload = (size_t)(data[2] | (uint32_t)data[3] << 8);
    data += 4;
    size -= 4;

    rpc_decoder d;
    rpc_decoder_init(&d, max_payload);
    size_t pos = 0;
    int failed = 0;
    while (pos < size) {
        seed = seed * 1103515245u + 12345u;
        size_t chunk = 1 + (seed >> 16) % 97;
        if (chunk > size - pos)
            chunk = size - pos;
        /* A private copy per chunk, so ASan catches reads past the chunk. */
        uint8_t *copy = malloc(chunk);
        assert(copy != NULL);
        memcpy(copy, data + pos, chunk);
        const uint8_t *p = copy;
        size_t n = chunk;
        rpc_frame f;
        strata_err e;
        int rc;
        while ((rc = rpc_decoder_feed(&d, &p, &n, &f, &e)) == 1) {
            assert(f.len <= max_payload);
            assert(f.type >= RPC_FRAME_HELLO && f.type <= RPC_FRAME_PROOF);
            check_round_trip(&f);
        }
        free(copy);
        if (rc < 0) {
            assert(e.code == ERR_CORRUPT || e.code == ERR_NOMEM);
            failed = 1;
            break;
        }
        assert(n == 0);
        pos += chunk;
    }
    assert(d.buf_cap <= max_payload);
    (void)failed;
    rpc_decoder_free(&d);
    return 0;
}
