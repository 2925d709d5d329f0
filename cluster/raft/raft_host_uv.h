#ifndef STRATA_CLUSTER_RAFT_RAFT_HOST_UV_H
#define STRATA_CLUSTER_RAFT_RAFT_HOST_UV_H
/*
 * Binds a raft_host's clock to a libuv loop: ONE uv_timer for all the host's groups,
 * re-armed to the earliest group deadline; now() is uv_now(loop).
 *
 *   raft_host_uv_clock c;
 *   raft_host_uv_clock_init(&c, loop);
 *   cfg.clock = raft_host_uv_clock_iface(&c);
 *   h = raft_host_create(&cfg, &err);
 *   raft_host_uv_clock_bind(&c, h);
 *   ... raft_host_destroy(h); raft_host_uv_clock_close(&c, NULL); (loop runs to close)
 */
#include <uv.h>

#include "cluster/raft/raft_host.h"

typedef struct {
    uv_timer_t timer;
    raft_host *host;
    void (*close_cb)(void *);
    void *close_data;
} raft_host_uv_clock;

void raft_host_uv_clock_init(raft_host_uv_clock *c, uv_loop_t *loop);
raft_host_clock raft_host_uv_clock_iface(raft_host_uv_clock *c);
void raft_host_uv_clock_bind(raft_host_uv_clock *c, raft_host *h);
/* Stops the timer and closes its handle; cb (may be NULL) runs once it is closed. */
void raft_host_uv_clock_close(raft_host_uv_clock *c, void (*cb)(void *), void *data);

#endif
