/*
 * Capacity demand messages (cluster/capshare.h) from a peer: any bytes are refused with
 * nothing recorded, or recorded whole; every share computed from what was recorded is
 * within [0, CAP_PPM].
 */
#include <stdint.h>
#include <stdlib.h>

#include "cluster/capshare.h"

static void check(int cond)
{
    if (!cond)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    capshare *s = capshare_new();
    check(s != NULL);
    strata_err err;
    int rc = capshare_receive(s, 2, data, size, 1, &err);
    check(rc == 0 || capshare_count(s) == 0);
    check(capshare_count(s) <= CAPSHARE_MAX_ENTRIES);
    capshare_weight w[2] = {{1, 64}, {2, 1}};
    for (uint32_t table = 0; table < 4; table++)
        for (int k = 0; k < 2; k++)
            check(capshare_share(s, 1, table, (cap_kind)k, 20000, w, 2, 5, 1) <= CAP_PPM);
    capshare_free(s);
    return 0;
}
