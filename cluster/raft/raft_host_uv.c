/* libuv clock for raft_host: see raft_host_uv.h. */
#include "cluster/raft/raft_host_uv.h"

static uint64_t uv_clock_now(void *ctx)
{
    raft_host_uv_clock *c = ctx;
    return uv_now(c->timer.loop);
}

static void on_timer(uv_timer_t *t)
{
    raft_host_uv_clock *c = t->data;
    if (c->host != NULL)
        raft_host_tick(c->host);
}

static void uv_clock_arm(void *ctx, uint64_t deadline)
{
    raft_host_uv_clock *c = ctx;
    uint64_t now = uv_now(c->timer.loop);
    uv_timer_start(&c->timer, on_timer, deadline > now ? deadline - now : 0, 0);
}

void raft_host_uv_clock_init(raft_host_uv_clock *c, uv_loop_t *loop)
{
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    c->host = NULL;
    c->close_cb = NULL;
    c->close_data = NULL;
}

raft_host_clock raft_host_uv_clock_iface(raft_host_uv_clock *c)
{
    return (raft_host_clock){.ctx = c, .now = uv_clock_now, .arm = uv_clock_arm};
}

void raft_host_uv_clock_bind(raft_host_uv_clock *c, raft_host *h)
{
    c->host = h;
}

static void on_close(uv_handle_t *hd)
{
    raft_host_uv_clock *c = hd->data;
    if (c->close_cb != NULL)
        c->close_cb(c->close_data);
}

void raft_host_uv_clock_close(raft_host_uv_clock *c, void (*cb)(void *), void *data)
{
    c->host = NULL;
    c->close_cb = cb;
    c->close_data = data;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_close);
}
