#ifndef STRATA_CLUSTER_RAFT_RAFT_WAL_H
#define STRATA_CLUSTER_RAFT_RAFT_WAL_H
/*
 * raft_host's storage interface on the node's shared WAL (storage/wal/wal.h): term/vote
 * -> wal_set_term_vote, append -> wal_append (a conflicting suffix is replaced),
 * set_snapshot -> wal_set_snapshot (keep_from advances, so the WAL can delete segments;
 * an installed snapshot first truncates any stored entries above its index), load ->
 * wal_group_state + wal_read_entries, including the snapshot point and its metadata.
 * Completions arrive in request order, as raft_host requires, once the WAL's
 * group-commit fdatasync covering them has returned.
 *
 * Shutdown: call raft_wal_storage_detach() before wal_close(): later requests from the
 * host fail with ERR_UNAVAILABLE instead of touching a closing WAL; callbacks of requests
 * already made still fire (wal_close completes them), so destroy the host only after
 * wal_close's callback.
 */
#include <stdbool.h>

#include "cluster/raft/raft_host.h"
#include "storage/wal/wal.h"

typedef struct {
    wal *w;
    bool detached;
    bool refused;       /* the WAL refused a request (see raft_wal_storage_refused) */
    strata_err refusal; /* the first refusal */
} raft_wal_storage;

/* Fills `out` for use as raft_host_config.storage; `s` must outlive the host. */
void raft_wal_storage_init(raft_wal_storage *s, wal *w, raft_host_storage *out);
void raft_wal_storage_detach(raft_wal_storage *s);

/* True once the WAL refused one of the host's requests for want of disk or memory (it
 * failed, ERR_BUSY with max_pending_bytes waiting because the disk cannot keep up,
 * ERR_NOMEM): the host has then stopped that group for good, so the node must stop too
 * (node/main.c). `why` (may be NULL) receives the first such refusal. Refusals after
 * detach, and ERR_VALIDATION (a request outside the group's log), do not count. */
bool raft_wal_storage_refused(const raft_wal_storage *s, strata_err *why);

#endif
