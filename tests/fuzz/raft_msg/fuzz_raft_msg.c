/*
 * Fuzzes the Raft message decoder (cluster/raft/raft_msg.c) and what the host does with a
 * decoded message: decode, re-encode and decode again (fields must survive), then feed
 * the bytes to a fresh raft_host whose group has members 1, 2, 3 (so C-Raft's core sees
 * every message the decoder accepts, and must not assert on any). An InstallSnapshot the
 * host accepts is installed (the out-of-band copy "succeeds" at once). The host's own
 * leadership checks (raft_host_read_index) go through the same decoder and host.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <raft.h>

#include "cluster/raft/raft_host.h"

typedef struct io {
    struct io *next;
    raft_storage_cb cb;
    void *data;
} io;

static io *ios;
static uint64_t now_ms;

static uint64_t ck_now(void *c)
{
    (void)c;
    return now_ms;
}
static void ck_arm(void *c, uint64_t d)
{
    (void)c;
    (void)d;
}
static int st_load(void *c, uint64_t g, raft_host_loaded *o, strata_err *e)
{
    (void)c;
    (void)g;
    (void)o;
    return strata_err_set(e, ERR_NOT_FOUND, "empty");
}
static void push_io(raft_storage_cb cb, void *data)
{
    io *i = calloc(1, sizeof *i);
    if (i == NULL)
        abort();
    i->cb = cb;
    i->data = data;
    io **t = &ios;
    while (*t != NULL)
        t = &(*t)->next;
    *t = i;
}
static int st_tv(void *c, uint64_t g, uint64_t t, uint64_t v, raft_storage_cb cb, void *d,
                 strata_err *e)
{
    (void)c;
    (void)g;
    (void)t;
    (void)v;
    (void)e;
    push_io(cb, d);
    return 0;
}
static int st_append(void *c, uint64_t g, uint64_t f, const raft_host_entry *en, size_t n,
                     raft_storage_cb cb, void *d, strata_err *e)
{
    (void)c;
    (void)g;
    (void)f;
    (void)en;
    (void)n;
    (void)e;
    push_io(cb, d);
    return 0;
}
static int st_snap(void *c, uint64_t g, const raft_host_snapshot *sp, raft_storage_cb cb, void *d,
                   strata_err *e)
{
    (void)c;
    (void)g;
    (void)sp;
    (void)e;
    push_io(cb, d);
    return 0;
}
static uint64_t install_token, install_index;
static int fsm_install(void *c, uint64_t g, uint64_t index, uint64_t term, uint64_t from,
                       uint64_t token)
{
    (void)c;
    (void)g;
    (void)term;
    (void)from;
    install_token = token;
    install_index = index;
    return 0;
}
static void flush(bool run)
{
    while (ios != NULL) {
        io *i = ios;
        ios = i->next;
        if (run && i->cb != NULL)
            i->cb(i->data, 0);
        free(i);
    }
}
static int tr_send(void *c, uint64_t to, uint64_t g, const void *m, size_t l)
{
    (void)c;
    (void)to;
    (void)g;
    (void)m;
    (void)l;
    return 0;
}
static int fsm_apply(void *c, uint64_t g, uint64_t i, const void *cmd, size_t l, void **r,
                     size_t *rl)
{
    (void)c;
    (void)g;
    (void)i;
    (void)cmd;
    (void)l;
    (void)r;
    (void)rl;
    return 0;
}

/* Node 1 of group `group` (members 1, 2, 3) receives the message from `from`. */
static void through_host(uint64_t group, uint64_t from, const uint8_t *data, size_t size)
{
    raft_host_config cfg = {
        .node_id = 1,
        .storage = {.load = st_load,
                    .set_term_vote = st_tv,
                    .append = st_append,
                    .set_snapshot = st_snap},
        .transport = {.send = tr_send},
        .clock = {.now = ck_now, .arm = ck_arm},
        .fsm = {.apply = fsm_apply, .install = fsm_install},
        .election_timeout_ms = 100,
        .heartbeat_timeout_ms = 20,
    };
    now_ms = 1000;
    raft_host *h = raft_host_create(&cfg, NULL);
    uint64_t members[] = {1, 2, 3};
    if (h != NULL && raft_host_start_group(h, group, members, 3, 0, NULL) == 0) {
        flush(true);
        install_token = 0;
        raft_host_receive(h, from, group, data, size, NULL);
        flush(true);
        if (install_token != 0) {
            raft_host_snapshot_installed(h, install_token, 0, install_index, NULL);
            flush(true);
        }
        now_ms += 1000;
        raft_host_tick(h);
        flush(true);
    }
    raft_host_destroy(h);
    flush(false);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct raft_message m;
    raft_msg_decoded *owner;
    uint64_t group, from;
    if (raft_msg_decode(data, size, &group, &from, &m, &owner, NULL) != 0)
        return 0;

    /* Round trip. */
    uint8_t *buf;
    size_t len;
    raft_host_check chk;
    if (raft_msg_check(owner, &chk)) {
        /* The host's own leadership check or its answer. */
        if (raft_msg_encode_check(group, from, &chk, &buf, &len, NULL) != 0)
            abort();
        struct raft_message m2;
        raft_msg_decoded *owner2;
        uint64_t g2, f2;
        raft_host_check chk2;
        if (raft_msg_decode(buf, len, &g2, &f2, &m2, &owner2, NULL) != 0 || g2 != group ||
            f2 != from || !raft_msg_check(owner2, &chk2) || chk2.result != chk.result ||
            chk2.ok != chk.ok || chk2.term != chk.term || chk2.seq != chk.seq)
            abort();
        raft_msg_free(owner2);
        free(buf);
        raft_msg_free(owner);
        through_host(group, from, data, size);
        return 0;
    }
    raft_host_entry *v = NULL;
    if (m.type == RAFT_APPEND_ENTRIES && m.append_entries.n_entries > 0) {
        v = calloc(m.append_entries.n_entries, sizeof *v);
        for (unsigned i = 0; i < m.append_entries.n_entries; i++)
            v[i] = (raft_host_entry){
                m.append_entries.entries[i].term, (uint8_t)m.append_entries.entries[i].type,
                m.append_entries.entries[i].buf.base, m.append_entries.entries[i].buf.len};
    }
    if (raft_msg_encode(group, from, &m, v, &buf, &len, NULL) != 0)
        abort();
    struct raft_message m2;
    raft_msg_decoded *owner2;
    uint64_t g2, f2;
    if (raft_msg_decode(buf, len, &g2, &f2, &m2, &owner2, NULL) != 0 || g2 != group || f2 != from ||
        m2.type != m.type)
        abort();
    raft_msg_free(owner2);
    free(buf);
    free(v);
    raft_msg_free(owner);

    through_host(group, from, data, size);
    return 0;
}
