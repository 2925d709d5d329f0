/* libFuzzer: arbitrary bytes as a manifest. Decoding must never crash or read out of
 * bounds. The checksum makes random input fail early, so the harness also decodes the
 * input with a valid checksum appended, to reach the record parser. */
#include <stdlib.h>
#include <string.h>

#include "storage/lsm/lsm_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    manifest m;
    strata_err err;
    if (manifest_decode(data, size, &m, &err) == 0)
        manifest_clear(&m);
    uint8_t *copy = malloc(size + 8);
    if (copy == NULL)
        return 0;
    if (size)
        memcpy(copy, data, size);
    uint64_t h = lsm_xxh3(data, size);
    for (int i = 0; i < 8; i++)
        copy[size + (size_t)i] = (uint8_t)(h >> (56 - 8 * i));
    if (manifest_decode(copy, size + 8, &m, &err) == 0)
        manifest_clear(&m);
    free(copy);
    return 0;
}
