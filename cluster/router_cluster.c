/*
 * router_cluster.c: the router's cluster mode (router.h, "Cluster mode").
 *
 * One raft_host drives every group of the node: group 0 is the meta service, every
 * other group one partition replica. Storage is the node's WAL (raft_wal), messages go
 * over rpc (one connection per peer), the engine is the node's LSM.
 *
 * Peer messages (rpc types):
 *   MSG_RAFT          u64be group | encoded raft message                (fire and forget)
 *   MSG_JOIN          a NODE_REGISTER meta record of the caller -> members text, or
 *                     empty while the bootstrap node still waits for voters
 *   MSG_META_PROPOSE  a meta record -> u8 code | varint index | message
 *   MSG_META_FETCH    (empty) -> varint applied index | meta_state_encode bytes
 *   MSG_META_SYNC     (empty) -> varint index: served by the meta leader once a
 *                     leadership check sent after the question passed and it applied
 *                     everything committed before (raft_host_read_index); the caller's
 *                     map is then current once it reflects that index
 *   MSG_DROP_CHECK    varint meta index | u32be table -> u8 1 once this node's map
 *                     reflects that index and it runs no replica of the table (any more),
 *                     0 if not so within DROP_CHECK_MS (see "Fencing a dropped table")
 *   MSG_PART_WRITE    varint partition | varint epoch | command -> varint index | result
 *   MSG_PART_READ     varint partition | u8 consistent | varint min index | u64be hash_lo |
 *                     u64be hash_hi (the range the caller expects the replica to serve) |
 *                     raw read request -> raw result
 *   MSG_GROUP_STATUS  varint partition -> u8 bits: caught up (for promoting a learner),
 *                     feeds a joiner a whole state and holds a child at its first state
 *                     (before an empty replica joins), the caller is out of the leader's
 *                     configuration (before it drops a replica the map took away); with
 *                     the first-state bit, the child's range record (split.h) follows
 *   MSG_PART_STATS    item counts and sizes of the partitions the sender leads
 *                     (cluster/pstats.h), every STATS_PUSH_MS        (fire and forget)
 *   MSG_CAP_DEMAND    the capacity units each table wanted on the sender over the last
 *                     second (cluster/capshare.h), every second      (fire and forget)
 *   MSG_LEAVING       (empty) the sender is stopping: hand it no leadership, send it no
 *                     eventual reads                                 (fire and forget)
 *   MSG_SNAP_CHUNK    varint partition | varint session | start key -> a chunk of the
 *                     session's copy (cluster/snap_chunk.h)
 *
 * Snapshots. The log of a partition is compacted (raft_host_compact) up to what the
 * engine holds durably. A replica that needs compacted entries copies the partition from
 * a live replica's engine snapshot (one lsm snapshot per copy session, taken together
 * with the applied index it reflects) in chunks of at most SNAP_CHUNK_BYTES, then tells
 * the host it holds the state up to that index. An engine key (table 0, 'I', partition)
 * marks a copy in progress: a replica restarted with the mark has a partial state, and
 * applies nothing until a new copy completes.
 * A request refused before anything was proposed, or whose entry is known never to
 * commit (raft_host's not_applied: a leader change put another entry at its index), is
 * answered with ERR_UNAVAILABLE and a message starting with RETRY_PREFIX (and the leader
 * as known there): the caller may send it again elsewhere. Any other failure of a write
 * may hide a commit and is never retried here.
 *
 * Every operation (write, read, meta change) is an `op`: it is attempted, and retried
 * after a backoff while the failure is known to be harmless and its deadline has not
 * passed. Ops never complete from inside the router_* call that started them.
 */
#include "cluster/router_internal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cluster/meta.h"
#include "cluster/placement.h"
#include "cluster/capshare.h"
#include "cluster/cluster_file.h"
#include "cluster/held_msgs.h"
#include "cluster/pstats.h"
#include "cluster/snap_chunk.h"
#include "cluster/partition_entry.h"
#include "cluster/split.h"
#include "cluster/raft/raft_host_uv.h"
#include "cluster/raft/raft_wal.h"
#include "rpc/rpc.h"
#include "storage/data/key.h"
#include "storage/lsm/lsm.h"
#include "storage/wal/wal.h"

enum {
    MSG_RAFT = 1,
    MSG_JOIN = 2,
    MSG_META_PROPOSE = 3,
    MSG_META_FETCH = 4,
    MSG_PART_WRITE = 5,
    MSG_PART_READ = 6,
    MSG_SNAP_CHUNK = 7,
    MSG_GROUP_STATUS = 8,
    MSG_PART_STATS = 9,
    MSG_CAP_DEMAND = 10,
    MSG_LEAVING = 11,
    MSG_META_SYNC = 13,
    MSG_DROP_CHECK = 14,
    /* 12 was MSG_CHILD_SEED (the record now comes with MSG_GROUP_STATUS): not reused */
};

#define META_GROUP           0
#define MAX_META_VOTERS      5                /* at formation */
#define MAX_META_LIST        META_MAX_MEMBERS /* voters to ask: one more while a seat moves */
#define MAX_KNOWN_NODES      CLUSTER_FILE_MAX_NODES /* asked when no voter answers */
#define OP_DEADLINE_MS       8000 /* a request's whole budget, retries included */
#define ATTEMPT_DEADLINE_MS  3000 /* one rpc attempt */
#define TICK_MS              100
#define META_FETCH_MS        500
#define CATALOG_SYNC_MS      2000 /* a catalog sync gives up (the caller goes on) after this */
#define SILENT_MEMBER_MS     5000 /* a meta member that did not answer is asked last this long */
#define DROP_CHECK_MS        2000 /* a MSG_DROP_CHECK question is answered within this */
#define DROP_CHECKS_MAX      1024 /* such questions held at once; more are answered "not yet" */
#define STATS_PUSH_MS        2000 /* partition statistics to the other nodes */
#define CAP_SHARE_SETTLE_MS  300  /* capacity shares: computed this long into each wall-clock
                                   * second, when every node's figures sent at its start
                                   * have arrived (cluster/capshare.h) */
#define CAP_LEADER_WEIGHT    64   /* a partition led here, against 1 per replica held: where
                                   * a table's unused capacity waits as burst credit */
#define JOIN_CALL_MS         1000
#define BACKOFF_MIN_MS       5
#define BACKOFF_MAX_MS       100 /* also bounds the wait on a leaderless partition */
#define HINT_SLOTS           4096 /* leader-hint cache (a cache: collisions overwrite) */
#define RETRY_PREFIX         "retry:"
#define CLUSTER_FILE         "cluster"
#define IDENTITY_FILE         "node-identity"
#define READ_ARENA_LIMIT     (64u << 20)
#define SNAP_CHUNK_BYTES     (1u << 20)
#define SNAP_SESSION_IDLE_MS 60000
#define COMPACT_EVERY_MS     1000
#define CHANGE_PENDING_SAY_MS 30000      /* a configuration change pending this long is said */
#define COMPACT_MIN_ENTRIES  1024       /* compact once the engine holds this many more entries */
/* Log entries a loop turn compacts away, over all groups: dropping an entry frees its
 * copy (about 1 us apiece on a large heap), and after the engine's first flush a node
 * has hundreds of thousands to drop: at once, that stalled every group for 150-250 ms. */
#define COMPACT_STEP_ENTRIES 1024
#define COMPACT_MAX_LAG      (1u << 18) /* entries kept for a slow member before it must copy */
/* The loop's lag: how late a timer of this period fires (shown by GET /admin/cluster). */
#define LAG_PROBE_MS         20
#define LAG_SLOW_MS          50
#define REJECT_REPORT_MS     10000      /* refused peer handshakes are logged at most this often */
#define DOWN_AFTER_MS        10000      /* unreachable from the meta leader this long: DOWN */
#define REPLACE_AFTER_MS     300000
/* Leadership follows the map's leader hints (see follow_map_leaders). */
#define TRANSFER_SETTLE_MS      2000 /* a node leads this long before handing leadership over */
#define TRANSFER_GAP_MS         100  /* between two transfers started by one node */
#define TRANSFER_MAX_LAG        32   /* entries the target may lag when the transfer starts */
#define TRANSFER_BACKOFF_MS     1000 /* after a failed transfer; doubles, up to the max */
#define TRANSFER_BACKOFF_MAX_MS 16000
#define LEADER_PLAN_MS          1000 /* the scheduler re-plans balanced hints at most this often */
/* Leader balance by load (schedule_leaders_load). A plan at most every LOAD_PLAN_MS: several
 * stats windows (STATS_PUSH_MS), so the loads it reads are whole windows measured after
 * the last plan's transfers, not one noisy window. It acts on a gap between the hottest
 * and the coolest node above LOAD_MIN_GAP (milli-units/s of pstats.h's load: 50 read units
 * per second, about 17 write units; below that where leaders sit does not matter) and
 * LOAD_GAP_PERCENT of the mean node load, with at most LOAD_MAX_CHANGES hint changes. */
#define LOAD_PLAN_MS     10000
#define LOAD_MIN_GAP     50000
#define LOAD_GAP_PERCENT 25
#define LOAD_MAX_CHANGES 4
/* Replica balance by load (schedule_replicas_load): the same thresholds and period, at
 * most LOAD_MAX_MOVES moves a plan (one swap), and after a plan ends LOAD_MOVE_SETTLE_MS
 * before the next: a move copies a whole replica, so the cluster runs a while on the new
 * placement (and its figures) before anything else moves for load. */
#define LOAD_MAX_MOVES      2
#define LOAD_MOVE_SETTLE_MS 30000

#define META_HEARTBEAT_MS    20   /* the meta group's (see start_meta_group) */
#define SPLIT_PROPOSE_MS     2000 /* a parent's leader proposes a SPLIT again after this long */
#define SPLIT_ATTEMPTS       8    /* re-proposals of a map split that lost its child id */
#define AUTO_SPLIT_RETRY_MS  2000 /* a partition's leader asks for a split at most this often */
#define HOT_KEY_SAY_MS       60000 /* a hot key that blocks a split is logged this often */
#define SPLIT_HINT_WAIT_MS 1000 /* a leader proposes its SPLIT after this long regardless */
#define JOIN_CHECK_MS     250 /* an empty replica asks the members again this often */
#define STATUS_CAUGHT_UP  1   /* MSG_GROUP_STATUS answer bits */
#define STATUS_FEEDS_WHOLE 2
#define STATUS_HOLDS_WHOLE 4
#define STATUS_RELEASED    8
#define STATUS_FIRST_STATE 16
#define RELEASE_ASK_MS     500 /* a replica the map took away asks its leader this often */
#define META_ORPHAN_MS     2000 /* a meta replica without a leader this long fetches the map */
#define SEAT_TRANSFER_MS   1000 /* a leaving meta leader tries a hand-over this often */
#define LOG_SWEEP_MS       5000 /* logs of dropped partitions are looked for this often */
/* The result of a write whose key the partition no longer owns (a split moved it): not
 * applied, so the router sends it again to the partition that owns it now. 0xFF starts
 * no protobuf message (field 31, wire type 7), so no PartitionWriteResult looks like it. */
static const uint8_t MOVED_RESULT[2] = {0xFF, 'M'};

/* Where a SPLIT entry of a partition's log stands on this replica (apply_split). */
typedef enum {
    SPLIT_NONE = 0,
    SPLIT_WRITE,   /* write the range records (range id = the parent, the entry's index),
                      shrink the parent and let its log go on */
    SPLIT_FLUSH,   /* flushing: the records must be durable before the child starts */
    SPLIT_REFLUSH, /* that flush failed (or could not start): flush again */
    SPLIT_READY,   /* durable: create the child */
} split_state;

typedef struct lpart {
    uint64_t id;
    partition_desc desc; /* the range this replica serves as of its applied state */
    partition_stats stats;
    bool busy;     /* apply refused by the engine: resume once it is writable */
    bool poisoned; /* a snapshot copy was cut short: the state is partial, apply nothing */
    /* Leadership transfer toward the map's hint: the term in which this node last took
     * the lead and when (0: not leading), and when a failed transfer may be tried again. */
    uint64_t lead_term, lead_since, transfer_retry_at;
    unsigned transfer_failures;
    bool handing_off; /* stopping: this node led it and is handing it over (rcluster_hand_off) */
    /* The map took the replica away: whether its leader said that the Raft configuration
     * no longer counts this node (STATUS_RELEASED), and when it was last asked. */
    bool released;
    uint64_t release_asked_at;
    /* Leader: since when a configuration change has been pending (0: none), and when
     * that was last said (follow_map_configs). */
    uint64_t change_pending_since, change_pending_said;
    bool child;    /* created by a split: its log does not rebuild its state (compact_all) */
    /* Counting the range's items again (stats_recount), a batch per loop turn: an
     * iterator at the point it began, what it counted so far, and what the entries
     * applied since then changed. */
    lsm_iter *recount;
    partition_stats recount_sum, recount_delta;
    split_state split;
    uint64_t split_index; /* the SPLIT entry being applied */
    split_cmd split_cmd;
    partition_desc split_child;     /* from SPLIT_FLUSH on: the child's range */
    partition_stats split_share;    /* and its share of the parent's figures */
    uint64_t split_proposed; /* leader: when it last proposed a SPLIT (ms) */
    uint64_t hint_at;        /* leader: when its flush hint for the next SPLIT went in */
    uint64_t hint_flush;     /* the hint flush its last hint entry joined (0: none) */
    uint64_t auto_split_at;  /* leader: when it last asked for an automatic split (ms) */
    uint64_t hot_key_said;   /* leader: when it last reported a hot key that blocks one */
    bool child_flushing;     /* child: flushing before its first compaction */
    uint64_t child_compact;  /* child: durable up to here, compact (all) at it */
    bool child_noop;         /* child leader: its no-op entry is in flight */
    /* Load (pstats.h), sampled every STATS_PUSH_MS: the capacity counters at the last
     * sample (cap_kind order), when it was taken (0: never), the rate since the one
     * before, in milli-units per second. */
    int64_t load_nano[2];
    uint64_t load_at;
    uint64_t load;
} lpart;

/* A question to a partition's member whether this node's replica may go (ask_release). */
typedef struct {
    struct rcluster *c;
    uint64_t pid;
} release_probe;

/* Raft messages for a child replica this node is about to start (cluster/held_msgs.h):
 * enough for a few splits at once; after 2 s the leader has sent again anyway. */
static const held_limits EARLY_LIMITS = {.max_msgs = 64, .max_bytes = 1u << 20, .keep_ms = 2000};

/* An empty replica about to join a partition asks the partition's other members whether
 * the log they could send it rebuilds the state (start_replica, join_allowed). */
typedef struct join_check {
    struct join_check *next;
    struct rcluster *c;
    uint64_t pid;
    uint64_t asked_ms;    /* when the round of questions went out */
    uint64_t answered_ms; /* when its last answer came (0: still waiting) */
    unsigned pending;     /* answers still to come */
    bool refused;      /* a member may send entry 1 of a child, or did not answer */
    unsigned whole;    /* voters that answered STATUS_HOLDS_WHOLE */
    uint64_t first_state; /* a member that answered STATUS_FIRST_STATE (0: none) */
    split_range first_rg; /* and the record it sent with it */
} join_check;

/* One question of a join_check's round: to whom it went. */
typedef struct {
    join_check *jc;
    uint64_t node;
    bool voter;
} join_ask;

/* A copy of a child's first state into this node, which its SPLIT listed but which never
 * applied it (seed_child). */
typedef struct child_seed {
    struct child_seed *next;
    struct rcluster *c;
    uint64_t pid;
    uint64_t tried_ms; /* when the last copy started or ended */
    uint64_t from;     /* the node copied from (0: no copy under way) */
    uint64_t session;  /* the copy session at the source (serve_snap_chunk) */
    split_range rg;    /* the source's range record: the child's range and members */
    buf next_key;      /* where the next chunk starts (empty: the first) */
    bool in_flight;    /* a chunk request or the final flush is under way */
    bool unflushed;    /* the copy is written but its flush failed: flush again (seeds_step) */
} child_seed;

/* A snapshot copy into this node (fsm.install). */
typedef struct install {
    struct install *next;
    struct rcluster *c;
    uint64_t pid, token, from, session;
    uint64_t applied; /* the index the source's state reflects */
    buf next_key;     /* where the next chunk starts (empty: the partition's start) */
    uint8_t *chunk;   /* a chunk waiting for the engine (back-pressure) */
    size_t chunk_len;
    bool in_flight;
    bool dead; /* given up (closing, group stopped): free when the call returns */
} install;

/* A snapshot copy out of this node: an engine snapshot held for one requester. */
typedef struct session {
    struct session *next;
    uint64_t peer, pid, id;
    uint64_t applied;
    partition_desc desc; /* the range as of `applied` */
    const lsm_snapshot *snap;
    uint64_t last_used;
} session;

typedef enum { OP_WRITE = 1, OP_READ, OP_META } op_kind;

typedef struct op op;
typedef void (*op_meta_done)(rcluster *c, op *o, const strata_err *err);
typedef struct drop_fence drop_fence;

struct op {
    op *prev, *next; /* c->live */
    op *retry_next;  /* c->retry_head: ops waiting for their next attempt */
    rcluster *c;
    op_kind kind;
    uint64_t pid;
    uint32_t table_id;
    uint64_t hash;          /* OP_WRITE, OP_READ with rekey: the key's hash (also the hot-key sample) */
    bool rekey;             /* OP_READ (GET, QUERY): find the partition by hash each attempt */
    uint64_t exp_lo, exp_hi; /* OP_READ: the range the caller planned against (SCAN) */
    uint64_t deadline;
    uint64_t retry_at;
    unsigned attempt;
    bool via_parent; /* an attempt of a write or strong read went to the partition a split
                        cut the key from (split_parent_owning) */
    bool in_flight;  /* an attempt (rpc call, submit, read check) is outstanding */
    bool waiting;    /* OP_META: committed, waiting for the local map to hold it */
    bool refused;    /* OP_META: ...and the change was refused (ERR_BUSY), not made */
    uint64_t wait_index;
    uint64_t asked;    /* OP_META: the node the attempt in flight went to */
    drop_fence *fence; /* OP_META dropping a table: the replicas that must stop first */
    router_cb wcb; /* OP_WRITE, OP_META */
    router_read_cb rcb;
    void *ctx;
    const partition_read_req *req; /* OP_READ */
    arena *arena;
    size_t len;
    uint8_t data[]; /* OP_WRITE: the command; OP_META: the meta record */
};

/* What this node knows of a partition beyond the map: its leader, and the highest log
 * index of a write routed through here (eventual reads must not go below it, so a client
 * reads its own writes through one node). */
typedef struct {
    uint64_t pid;
    uint64_t leader;
    uint64_t seen;
} hint;

typedef cluster_node_addr member;

typedef struct {
    uint64_t id;
    bool connected;
    bool leaving; /* it said it is stopping (MSG_LEAVING); cleared when its connection goes */
    uint64_t down_since; /* meta leader: when it last saw the node unreachable, 0 if reachable */
} peer_state;

/* One address given with `join`, dialled as a seed peer (RPC_SEED_ID_MIN + index). */
typedef struct {
    rcluster *c;
    bool busy; /* a join call is outstanding */
} join_slot;

struct rcluster {
    uv_loop_t *loop;
    router_ops sm; /* the partition state machine */
    uint64_t self;
    meta_node me; /* this node's registration */
    char *data_dir;
    bool bootstrap;
    int expect;
    join_slot *join;
    size_t n_join;
    uint64_t busy_change_logged_ms; /* the last "configuration change refused: busy" said */

    held_msgs early; /* Raft messages for children about to start */
    lsm *engine;
    /* Engine flushes started by flush hints: one at a time, numbered from 1; the last
     * one started and the last one done. */
    uint64_t hint_flush_started, hint_flush_done;
    wal *log;
    raft_wal_storage rws;
    raft_host *host;
    raft_host_uv_clock clock;
    bool clock_open;
    rpc *rpc;
    uint64_t rejects_logged_ms; /* on_reject: the last refused handshake logged, */
    uint64_t rejects_unlogged;  /* and those refused since, unlogged */

    /* The cluster map. */
    bool formed; /* the meta voters are known */
    strata_err refused; /* a join the cluster refused (join_refusal), or a binary too old
                           for the cluster's log (stop_too_old, stop_on_newer): the node
                           must stop */
    member members[MAX_META_LIST];
    size_t n_members;
    member known[MAX_KNOWN_NODES]; /* other nodes of the map (see fetch_target) */
    size_t n_known;
    bool voter;       /* this node runs a replica of the meta group (voter or learner) */
    bool meta_joined; /* ... that joined after formation (see "The meta group's seats") */
    bool file_rewrite;       /* the cluster file was damaged: a join answer writes it again */
    bool cluster_file_stale; /* the file lags the above: a write failed (cluster_file_save) */
    uint64_t meta_leaderless_since; /* when its replica last lost sight of a leader; 0 */
    uint64_t meta_release_asked_at;
    uint64_t seat_transfer_at;
    uint64_t log_swept_at; /* sweep_logs */
    meta_state *meta;
    uint64_t meta_index;       /* last meta command reflected in `meta` */
    uint64_t meta_leader_hint; /* for nodes outside the meta group */
    bool fetch_in_flight;
    uint64_t fetch_target; /* the node the fetch in flight asked */
    uint64_t last_fetch;
    bool register_in_flight;
    bool format_in_flight; /* a NODE_FORMAT of this node's (reconcile_format) */
    catalog *cat;
    /* Catalog syncs (rcluster_sync_catalog): callers that asked after the check in flight
     * was sent (`sync_next`), those the check in flight covers (`sync_round`), and those
     * that know the index their map must reach (`sync_wait`). */
    struct catalog_sync *sync_next, *sync_round, *sync_wait;
    /* MSG_DROP_CHECK questions waiting for this node's map or replicas to catch up. */
    struct drop_check *drop_checks;
    size_t n_drop_checks;
    bool sync_in_flight;
    unsigned sync_asks;   /* redirections followed by the round in flight */
    uint64_t sync_target; /* the node the round in flight asked */
    uint64_t silent_member; /* a meta member that did not answer lately (pick_member) */
    uint64_t silent_until;

    meta_node joiners[MAX_META_VOTERS];
    size_t n_joiners;

    lpart *parts; /* sorted by id */
    size_t n_parts, cap_parts;
    hint hints[HINT_SLOTS];
    peer_state *peers;
    size_t n_peers, cap_peers;
    uint32_t *drops; /* tables whose data this node must still delete */
    size_t n_drops, cap_drops;
    unsigned read_rr; /* round-robin over replicas for eventual reads */
    /* Since start, shown by GET /admin/cluster ("router"): how often each path ran. */
    struct {
        uint64_t retries;          /* attempts rescheduled (no leader, stale map, no answer) */
        uint64_t woken_by_leader;  /* of those, run early because a leader became known */
        uint64_t reads_via_parent; /* eventual reads of a new child's key served by its parent */
        uint64_t strong_via_parent; /* strong reads of a new child's key sent to its parent */
        uint64_t flush_hints;       /* SPLIT flush hints applied here (apply_flush_hint) */
        uint64_t early_delivered;   /* Raft messages kept for a child until it started */
        uint64_t forwarded_writes;  /* write attempts sent to another node's leader */
        uint64_t forwarded_reads;   /* read attempts sent to another node's replica */
    } counters;

    op *live; /* every op alive */
    install *installs;
    session *sessions;
    join_check *join_checks;
    child_seed *seeds;
    uint64_t last_compact;
    uv_check_t compactor; /* runs while a compaction pass goes on (compact_step) */
    size_t compact_next;  /* the pass's next replica, an index into parts */
    size_t memtable_bytes;
    int background_cpu_pct;
    uint32_t log_hold_ops;
    uint64_t replace_after_ms;   /* replicas of a node DOWN this long are re-created */
    uint64_t split_size_bytes;   /* automatic splits (router_cluster_config); 0: never */
    uint64_t split_heat_ms;
    bool test_exit_on_split; /* router_cluster_config's test hooks */
    unsigned test_seed_abandons;
    bool test_exit_mid_copy;
    unsigned heartbeat_ms; /* the partition groups' (raft_host's default: 100) */
    bool sched_busy;             /* the scheduler waits for its last command or probe */
    unsigned transfers;          /* leadership transfers in flight from this node */
    uint64_t last_transfer;      /* when this node last started one */
    placement_leader *lead_plan; /* meta leader: hint changes still to propose, in order */
    size_t lead_plan_n, lead_plan_next;
    uint64_t lead_planned; /* when the last balancing plan was made */
    uint64_t load_planned; /* when the last plan by load was made (schedule_leaders_load) */
    placement_move *rload_plan; /* meta leader: replica moves by load, started in order */
    size_t rload_n, rload_next;
    placement_move rload_cur; /* the one started last, while rload_moving */
    bool rload_moving;
    uint64_t rload_planned; /* when the last replica plan by load was tried */
    uint64_t rload_ended;   /* when the last one ended (0: none yet) */
    op *retry_head;
    size_t n_ops;
    uv_timer_t tick, kick, retry;
    /* Loop lag since start: a timer every LAG_PROBE_MS, how late it fired. A turn that
     * runs long delays every group and every request on the node. */
    uv_timer_t lag_probe;
    uint64_t lag_due_ns;  /* when the probe should fire next */
    uint64_t lag_max_us;  /* the longest delay seen */
    uint64_t lags_slow;   /* delays over LAG_SLOW_MS */
    uv_idle_t recount; /* runs while a replica's stats are being counted again */
    bool kick_armed;
    bool closing;
    bool handing_off;  /* stopping: leadership only leaves this node (rcluster_hand_off) */
    bool meta_handing; /* ... and it led the meta group */
    buf scratch;
    capacity *cap; /* token buckets of the partitions this node serves (router.h) */
    pstats *heard;              /* partition statistics from their leaders (MSG_PART_STATS) */
    uint64_t last_stats_push;
    capshare *shares;     /* every node's capacity wants per table (MSG_CAP_DEMAND) */
    cap_demand *demand;   /* CAPSHARE_MAX_ENTRIES: this node's, collected every second */
    capshare_want *wants; /* the same as wants per second */
    capshare_want *sent;  /* this node's figures as sent (capshare_own) */
    capshare_weight *weights; /* one table's weights per node (META_MAX_NODES + 1) */
    uint64_t last_collect;             /* when capacity demand was last collected */
    uint64_t sent_period, set_period; /* wall-clock seconds: figures sent, shares set */
};

static void kick(rcluster *c);
static void fetch_meta(rcluster *c);
static void op_run(op *o);
static void reconcile(rcluster *c);

/* ------------------------------------------------------------------ small helpers */

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint64_t now_ms(const rcluster *c)
{
    return uv_now(c->loop);
}

/* Capacity (router.h): the pool of a table on this node spans the partitions it leads. */
static uint32_t cap_local(const rcluster *c, const table_info *t)
{
    uint32_t n = 0;
    for (size_t i = 0; i < t->n_partitions; i++)
        if (raft_host_is_leader(c->host, t->partitions[i].id))
            n++;
    return n > 0 ? n : 1;
}

static int cap_admit(rcluster *c, uint32_t table_id, uint64_t pid, cap_kind k, int64_t reserve_nano,
                     strata_err *err)
{
    const table_info *t = catalog_find_id(c->cat, table_id);
    return router_admit(c->cap, t, pid, t != NULL ? cap_local(c, t) : 1, k, reserve_nano, now_ms(c),
                        err);
}

capacity *rcluster_capacity(rcluster *c)
{
    return c->cap;
}

/* Wall-clock milliseconds: the time meta commands carry (compared across nodes, e.g. how
 * long a node has been DOWN). */
static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int parse_hostport(const char *s, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s)
        return -1;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
        s++;
        hl -= 2;
    }
    if (hl >= cap)
        return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535)
        return -1;
    *port = (int)p;
    return 0;
}

static lpart *lpart_find(const rcluster *c, uint64_t id)
{
    size_t lo = 0, hi = c->n_parts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->parts[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n_parts && c->parts[lo].id == id ? &c->parts[lo] : NULL;
}

static lpart *lpart_add(rcluster *c, uint64_t id, strata_err *err)
{
    if (c->n_parts == c->cap_parts) {
        size_t cap = c->cap_parts ? c->cap_parts * 2 : 64;
        lpart *p = realloc(c->parts, cap * sizeof *p);
        if (p == NULL) {
            strata_err_set(err, ERR_NOMEM, "out of memory");
            return NULL;
        }
        c->parts = p;
        c->cap_parts = cap;
    }
    size_t i = c->n_parts;
    while (i > 0 && c->parts[i - 1].id > id)
        i--;
    memmove(&c->parts[i + 1], &c->parts[i], (c->n_parts - i) * sizeof *c->parts);
    c->n_parts++;
    memset(&c->parts[i], 0, sizeof c->parts[i]);
    c->parts[i].id = id;
    return &c->parts[i];
}

static void recount_stop(lpart *lp)
{
    if (lp->recount != NULL)
        lsm_iter_free(lp->recount);
    lp->recount = NULL;
}

static void lpart_remove(rcluster *c, lpart *p)
{
    recount_stop(p);
    size_t i = (size_t)(p - c->parts);
    memmove(&c->parts[i], &c->parts[i + 1], (c->n_parts - i - 1) * sizeof *c->parts);
    c->n_parts--;
}

/* What the cache knows of `pid` (all zero when the slot holds another partition). */
static hint hint_of(const rcluster *c, uint64_t pid)
{
    const hint *h = &c->hints[pid % HINT_SLOTS];
    return h->pid == pid ? *h : (hint){.pid = pid};
}

/* The slot of `pid`, taken over from whatever partition held it. */
static hint *hint_slot(rcluster *c, uint64_t pid)
{
    hint *h = &c->hints[pid % HINT_SLOTS];
    if (h->pid != pid)
        *h = (hint){.pid = pid};
    return h;
}

static uint64_t hint_get(const rcluster *c, uint64_t pid)
{
    return hint_of(c, pid).leader;
}

static void hint_set(rcluster *c, uint64_t pid, uint64_t leader)
{
    hint_slot(c, pid)->leader = leader;
}

static uint64_t seen_get(const rcluster *c, uint64_t pid)
{
    return hint_of(c, pid).seen;
}

static void seen_note(rcluster *c, uint64_t pid, uint64_t index)
{
    hint *h = hint_slot(c, pid);
    if (index > h->seen)
        h->seen = index;
}

static peer_state *peer_find(const rcluster *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_peers; i++)
        if (c->peers[i].id == id)
            return &c->peers[i];
    return NULL;
}

/* Dials `id` at `addr` unless it is a peer already. */
static void peer_ensure(rcluster *c, uint64_t id, const char *addr)
{
    if (id == c->self || peer_find(c, id) != NULL)
        return;
    char host[META_ADDR_MAX + 1];
    int port;
    strata_err err;
    if (parse_hostport(addr, host, sizeof host, &port) < 0 ||
        rpc_add_peer(c->rpc, id, host, port, &err) < 0) {
        fprintf(stderr, "stratad: cannot dial node %" PRIu64 " at %s\n", id, addr);
        return;
    }
    if (c->n_peers == c->cap_peers) {
        size_t cap = c->cap_peers ? c->cap_peers * 2 : 16;
        peer_state *p = realloc(c->peers, cap * sizeof *p);
        if (p == NULL)
            return;
        c->peers = p;
        c->cap_peers = cap;
    }
    c->peers[c->n_peers++] = (peer_state){.id = id, .connected = false};
}

/* A node this node can send a request to now: itself, or a connected peer. */
static bool node_usable(const rcluster *c, uint64_t id)
{
    if (id == c->self)
        return true;
    const peer_state *p = peer_find(c, id);
    return p != NULL && p->connected;
}

/* Whether a node is stopping: this one once its hand-off began, a peer once it said so
 * (MSG_LEAVING). */
static bool node_stopping(const rcluster *c, uint64_t id)
{
    if (id == c->self)
        return c->handing_off;
    const peer_state *p = peer_find(c, id);
    return p != NULL && p->leaving;
}

/* A node that can take a partition's leadership or an eventual read: usable, and not
 * stopping. A stopping node still leads what it has not handed over yet. */
static bool node_staying(const rcluster *c, uint64_t id)
{
    return node_usable(c, id) && !node_stopping(c, id);
}

/* "retry:leader=N ..." -> N (0 when unknown); -1 if not a retry message. */
static int64_t retry_hint(const strata_err *err)
{
    if (err == NULL || err->code != ERR_UNAVAILABLE ||
        strncmp(err->msg, RETRY_PREFIX, strlen(RETRY_PREFIX)) != 0)
        return -1;
    const char *l = strstr(err->msg, "leader=");
    return l != NULL ? (int64_t)strtoull(l + 7, NULL, 10) : 0;
}

/* ------------------------------------------------------------------ the cluster file */

/* Writes `data` as the file `name` of the data directory, replacing it atomically
 * (a temporary file, fsync, rename, fsync of the directory). */
static int write_file_durably(rcluster *c, const char *name, const buf *data, strata_err *err)
{
    char tmp_name[64];
    snprintf(tmp_name, sizeof tmp_name, "%s.tmp", name);
    char *path = router_path_join(c->data_dir, name);
    char *tmp = router_path_join(c->data_dir, tmp_name);
    int rc = -1;
    int fd = tmp != NULL && path != NULL && !data->failed
                 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)
                 : -1;
    if (fd >= 0) {
        ssize_t w = write(fd, data->data, data->len);
        if (w == (ssize_t)data->len && fsync(fd) == 0 && close(fd) == 0) {
            fd = -1;
            if (rename(tmp, path) == 0) {
                int dfd = open(c->data_dir, O_RDONLY | O_DIRECTORY);
                if (dfd >= 0 && fsync(dfd) == 0)
                    rc = 0;
                if (dfd >= 0)
                    close(dfd);
            }
        }
        if (fd >= 0)
            close(fd);
    }
    if (rc < 0)
        strata_err_set(err, ERR_IO, "cannot write %s: %s", path ? path : name, strerror(errno));
    free(path);
    free(tmp);
    return rc;
}

/* DATA_DIR/cluster (cluster_file.h), from c->members, c->known and c->meta_joined. */
static int cluster_file_write(rcluster *c, strata_err *err)
{
    cluster_file f = {
        .n_members = c->n_members, .n_nodes = c->n_known, .meta_joined = c->meta_joined};
    memcpy(f.members, c->members, c->n_members * sizeof *c->members);
    memcpy(f.nodes, c->known, c->n_known * sizeof *c->known);
    buf b;
    buf_init(&b, CLUSTER_FILE_MAX_BYTES);
    cluster_file_encode(&f, &b);
    int rc = write_file_durably(c, CLUSTER_FILE, &b, err);
    buf_free(&b);
    if (rc == 0)
        c->cluster_file_stale = false;
    return rc;
}

/* Writes the cluster file after `what` changed, where the change stands even if the file
 * cannot follow: a failed write is said once and tried again every tick until it succeeds
 * (a restart before then finds the previous file, which still names nodes to ask). The
 * tick's retry passes no `what`: the first failure was said already. */
static void cluster_file_save(rcluster *c, const char *what)
{
    assert(what != NULL || c->cluster_file_stale);
    bool was_stale = c->cluster_file_stale;
    strata_err err;
    if (cluster_file_write(c, &err) == 0) {
        if (was_stale)
            fprintf(stderr, "stratad: cluster file written again\n");
        return;
    }
    c->cluster_file_stale = true;
    if (!was_stale)
        fprintf(stderr, "stratad: %s; %s (trying again every %d ms)\n", what, err.msg, TICK_MS);
}

/* 1 when read (into c->members, c->known, c->meta_joined), 0 when there is no file, -1
 * when it is damaged or cannot be read. */
static int cluster_file_read(rcluster *c, strata_err *err)
{
    char *path = router_path_join(c->data_dir, CLUSTER_FILE);
    char *text = malloc(CLUSTER_FILE_MAX_BYTES + 1);
    cluster_file *f = malloc(sizeof *f);
    FILE *fp = path != NULL ? fopen(path, "r") : NULL;
    int rc = -1;
    strata_err why;
    if (path == NULL || text == NULL || f == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
    } else if (fp == NULL) {
        rc = errno == ENOENT
                 ? 0
                 : strata_err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    } else {
        /* One byte more than a file may have: a longer one fails to decode. */
        size_t n = fread(text, 1, CLUSTER_FILE_MAX_BYTES + 1, fp);
        if (ferror(fp))
            strata_err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
        else if (cluster_file_decode(text, n, f, &why) < 0)
            strata_err_set(err, ERR_CORRUPT, "%s is damaged: %s", path, why.msg);
        else
            rc = 1;
    }
    if (rc == 1) {
        memcpy(c->members, f->members, f->n_members * sizeof *f->members);
        c->n_members = f->n_members;
        memcpy(c->known, f->nodes, f->n_nodes * sizeof *f->nodes);
        c->n_known = f->n_nodes;
        c->meta_joined = f->meta_joined;
    }
    if (fp != NULL)
        fclose(fp);
    free(f);
    free(text);
    free(path);
    return rc;
}

/* ------------------------------------------------------------------ the node's identity */

/*
 * IDENTITY_FILE names the node a data directory belongs to and a random incarnation,
 * made at the directory's first start before anything else is written:
 *   strata-node 1 \n node <id> \n incarnation <16 hex> \n xxh3 <16 hex of the above> \n
 * A directory started under another --node-id is refused once it joined a cluster (it
 * has a cluster file); before, it takes the new id. The incarnation goes with
 * every join request and this node's registration, so that the cluster can refuse a
 * join under a member's id from another directory (join_refusal).
 */
static int identity_create(rcluster *c, strata_err *err);

static bool file_exists(const rcluster *c, const char *name)
{
    char *path = router_path_join(c->data_dir, name);
    struct stat st;
    bool exists = path == NULL || stat(path, &st) == 0 || errno != ENOENT; /* on doubt: yes */
    free(path);
    return exists;
}

static int identity_parse(rcluster *c, const char *text, const char *path, strata_err *err)
{
    unsigned long long id, incarnation, sum;
    int used = 0;
    if (sscanf(text, "strata-node 1 node %llu incarnation %16llx %n", &id, &incarnation, &used) !=
            2 ||
        used == 0 || sscanf(text + used, "xxh3 %16llx", &sum) != 1 ||
        sum != XXH3_64bits(text, (size_t)used))
        return strata_err_set(err, ERR_CORRUPT, "%s is damaged (checksum or format)", path);
    if (id != c->self && !file_exists(c, CLUSTER_FILE)) {
        /* It never joined a cluster (a refused join, say): nothing in it is node id's. */
        fprintf(stderr,
                "stratad: %s held the identity of node %llu, which never joined a cluster: it "
                "is node %" PRIu64 "'s now\n",
                c->data_dir, id, c->self);
        return identity_create(c, err);
    }
    if (id != c->self)
        return strata_err_set(err, ERR_VALIDATION,
                              "the data directory %s belongs to node %llu, not to node %" PRIu64
                              " (--node-id): start it as node %llu, or give node %" PRIu64
                              " a directory of its own",
                              c->data_dir, id, c->self, id, c->self);
    c->me.incarnation = incarnation;
    return 0;
}

static int identity_create(rcluster *c, strata_err *err)
{
    uint64_t incarnation = 0;
    while (incarnation == 0)
        if (getrandom(&incarnation, sizeof incarnation, 0) != (ssize_t)sizeof incarnation)
            return strata_err_set(err, ERR_IO, "getrandom: %s", strerror(errno));
    buf b;
    buf_init(&b, 0);
    buf_printf(&b, "strata-node 1\nnode %" PRIu64 "\nincarnation %016" PRIx64 "\n", c->self,
               incarnation);
    buf_printf(&b, "xxh3 %016" PRIx64 "\n", (uint64_t)XXH3_64bits(b.data, b.len));
    int rc = write_file_durably(c, IDENTITY_FILE, &b, err);
    buf_free(&b);
    if (rc == 0)
        c->me.incarnation = incarnation;
    return rc;
}

/* Reads the data directory's identity, or makes it on the directory's first start. */
static int identity_open(rcluster *c, strata_err *err)
{
    char *path = router_path_join(c->data_dir, IDENTITY_FILE);
    if (path == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    int rc;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        char text[256];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        rc = identity_parse(c, text, path, err);
    } else if (errno != ENOENT) {
        rc = strata_err_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
    } else {
        rc = identity_create(c, err);
    }
    free(path);
    return rc;
}

/* ------------------------------------------------------------------ the catalog mirror */

/* A table's partitions in the catalog are the map's: splits change the map only, so
 * the catalog's copy (what router_table_partitions and router_partition_for_hash
 * answer, and what a Scan plans with) is replaced by the map's after every change. */
static void catalog_sync_parts(rcluster *c, uint32_t table_id)
{
    const table_info *t = catalog_find_id(c->cat, table_id);
    size_t n;
    const meta_partition *mp = meta_table_partitions(c->meta, table_id, &n);
    if (t == NULL || n == 0)
        return;
    bool same = t->n_partitions == n;
    for (size_t i = 0; same && i < n; i++)
        same = t->partitions[i].id == mp[i].id && t->partitions[i].hash_lo == mp[i].hash_lo &&
               t->partitions[i].hash_hi == mp[i].hash_hi;
    if (same)
        return;
    partition_desc *np = calloc(n, sizeof *np);
    strata_err err;
    if (np == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        np[i] = (partition_desc){
            .id = mp[i].id, .table_id = table_id, .hash_lo = mp[i].hash_lo, .hash_hi = mp[i].hash_hi};
    /* In place: reads in flight point into the table's schema. */
    if (catalog_set_partitions(c->cat, table_id, np, n, &err) < 0)
        fprintf(stderr, "stratad: table %u: cannot follow the map's partitions: %s\n", table_id,
                err.msg);
    free(np);
}

/* The catalog holds the record of every table of the map. Rebuilt from the map when a
 * whole map was fetched; kept in step command by command on meta voters. */
static int catalog_rebuild(rcluster *c)
{
    catalog *n = catalog_new();
    if (n == NULL)
        return -1;
    for (size_t i = 0; i < meta_table_count(c->meta); i++) {
        const meta_table *t = meta_table_at(c->meta, i);
        strata_err err;
        if (catalog_apply(n, t->schema, t->schema_len, &err) < 0)
            fprintf(stderr, "stratad: table %u: bad catalog record: %s\n", t->id, err.msg);
    }
    catalog_bump_ids(n, meta_next_table_id(c->meta), meta_next_partition_id(c->meta));
    catalog_free(c->cat);
    c->cat = n;
    for (size_t i = 0; i < meta_table_count(c->meta); i++)
        catalog_sync_parts(c, meta_table_at(c->meta, i)->id);
    return 0;
}

/* ------------------------------------------------------------------ ops */

static op *op_new(rcluster *c, op_kind kind, const void *data, size_t len)
{
    op *o = calloc(1, sizeof *o + len);
    if (o == NULL)
        return NULL;
    o->c = c;
    o->kind = kind;
    o->deadline = now_ms(c) + OP_DEADLINE_MS;
    o->len = len;
    if (len && data != NULL)
        memcpy(o->data, data, len);
    o->next = c->live;
    if (c->live != NULL)
        c->live->prev = o;
    c->live = o;
    c->n_ops++;
    return o;
}

static void fence_release(drop_fence *f);

static void op_free(op *o)
{
    rcluster *c = o->c;
    if (o->fence != NULL)
        fence_release(o->fence);
    if (o->prev != NULL)
        o->prev->next = o->next;
    else
        c->live = o->next;
    if (o->next != NULL)
        o->next->prev = o->prev;
    c->n_ops--;
    free(o);
}

static void op_fail(op *o, const strata_err *err)
{
    if (o->kind == OP_READ)
        o->rcb(o->ctx, err, NULL);
    else if (o->wcb != NULL)
        o->wcb(o->ctx, err, NULL, 0);
    op_free(o);
}

static void op_fail_code(op *o, strata_code code, const char *msg)
{
    strata_err err;
    strata_err_set(&err, code, "%s", msg);
    op_fail(o, &err);
}

static void schedule_retry_timer(rcluster *c);
static void on_retry_timer(uv_timer_t *t);

/* Queues the op's next attempt after a backoff, or fails it once its deadline passed. */
static void op_retry(op *o, uint64_t leader_hint)
{
    rcluster *c = o->c;
    o->in_flight = false;
    if (leader_hint != 0 && o->kind != OP_META)
        hint_set(c, o->pid, leader_hint);
    else if (leader_hint != 0)
        c->meta_leader_hint = leader_hint;
    o->attempt++;
    c->counters.retries++;
    uint64_t now = now_ms(c);
    if (c->closing || now >= o->deadline) {
        op_fail_code(o, ERR_UNAVAILABLE,
                     c->closing ? "The server is shutting down"
                                : "No replica of the partition answered in time; retry");
        return;
    }
    uint64_t backoff = BACKOFF_MIN_MS << (o->attempt < 6 ? o->attempt : 6);
    if (backoff > BACKOFF_MAX_MS)
        backoff = BACKOFF_MAX_MS;
    o->retry_at = now + backoff;
    o->retry_next = c->retry_head;
    c->retry_head = o;
    schedule_retry_timer(c);
}

/* raft_host's events.leader: a local replica learned its group's leader. Ops backing off
 * on that group (no leader known, a leader that just changed) go at once, not at the end
 * of their backoff: after an election or a split's first one, writes resume as soon as
 * the leader is known here. Called inside the host: only reschedules. */
static void on_group_leader(void *ctx, uint64_t group, uint64_t leader)
{
    rcluster *c = ctx;
    if (leader == 0 || c->closing)
        return;
    bool woke = false;
    for (op *o = c->retry_head; o != NULL; o = o->retry_next) {
        bool waits = group == META_GROUP ? o->kind == OP_META
                                         : o->kind != OP_META && o->pid == group;
        if (waits && o->retry_at != 0) {
            o->retry_at = 0;
            woke = true;
            c->counters.woken_by_leader++;
        }
    }
    if (woke)
        uv_timer_start(&c->retry, on_retry_timer, 0, 0);
}

/* Runs the op at the next loop iteration (never inside the call that created it). */
static void op_start(op *o)
{
    rcluster *c = o->c;
    o->retry_at = 0;
    o->retry_next = c->retry_head;
    c->retry_head = o;
    /* Due now: no need to scan the queue for the earliest deadline (the hot path). */
    if (!c->closing)
        uv_timer_start(&c->retry, on_retry_timer, 0, 0);
}

static void on_retry_timer(uv_timer_t *t)
{
    rcluster *c = t->data;
    uint64_t now = now_ms(c);
    op *due = NULL;
    op **pp = &c->retry_head;
    while (*pp != NULL) {
        op *o = *pp;
        if (o->retry_at <= now) {
            *pp = o->retry_next;
            o->retry_next = due;
            due = o;
        } else {
            pp = &o->retry_next;
        }
    }
    while (due != NULL) {
        op *o = due;
        due = o->retry_next;
        o->retry_next = NULL;
        op_run(o);
    }
    schedule_retry_timer(c);
}

static void schedule_retry_timer(rcluster *c)
{
    if (c->retry_head == NULL || c->closing)
        return;
    uint64_t first = UINT64_MAX;
    for (const op *o = c->retry_head; o != NULL; o = o->retry_next)
        if (o->retry_at < first)
            first = o->retry_at;
    uint64_t now = now_ms(c);
    uv_timer_start(&c->retry, on_retry_timer, first > now ? first - now : 0, 0);
}

/* The node that leads partition `pid` as far as this node knows, else the next voter in
 * turn that can be reached; 0 when none can. */
static uint64_t pick_leader(rcluster *c, const meta_partition *mp, unsigned attempt)
{
    if (lpart_find(c, mp->id) != NULL) {
        uint64_t l = raft_host_leader(c->host, mp->id);
        if (l != 0 && node_usable(c, l))
            return l;
    }
    uint64_t h = hint_get(c, mp->id);
    if (h != 0 && meta_partition_has(mp, h, NULL) && node_usable(c, h) && attempt % 4 != 3)
        return h;
    if (mp->leader_hint != 0 && node_usable(c, mp->leader_hint) && attempt == 0)
        return mp->leader_hint;
    for (uint32_t k = 0; k < mp->n_members; k++) {
        const meta_replica *m = &mp->members[(attempt + k) % mp->n_members];
        if (m->role == META_VOTER && node_usable(c, m->node))
            return m->node;
    }
    return 0;
}

/* ------------------------------------------------------------------ writes */

static bool is_moved(const void *result, size_t len)
{
    return len == sizeof MOVED_RESULT && memcmp(result, MOVED_RESULT, len) == 0;
}

static void on_local_write(void *data, const raft_host_outcome *out)
{
    op *o = data;
    o->in_flight = false;
    if (out->code == ERR_NONE && is_moved(out->result, out->result_len)) {
        fetch_meta(o->c); /* the map names the key's new partition (or soon will) */
        op_retry(o, 0);
        return;
    }
    if (out->code == ERR_NONE) {
        seen_note(o->c, o->pid, out->index);
        o->wcb(o->ctx, NULL, out->result, out->result_len);
        op_free(o);
        return;
    }
    if (out->code == ERR_UNAVAILABLE && out->not_applied) {
        op_retry(o, out->leader_hint); /* another entry took its place: never applied */
        return;
    }
    op_fail_code(o, out->code == ERR_UNAVAILABLE ? ERR_UNAVAILABLE : ERR_INTERNAL,
                 out->code == ERR_UNAVAILABLE
                     ? "Leadership of the partition changed; the write may or may not have "
                       "been applied"
                     : "The partition's replica failed");
}

static void on_remote_write(void *ctx, int status, const strata_err *err, const uint8_t *data,
                            size_t len)
{
    op *o = ctx;
    o->in_flight = false;
    if (status == 0) {
        rd r;
        rd_init(&r, data, len);
        uint64_t index = rd_varint(&r);
        if (r.failed) {
            op_fail_code(o, ERR_INTERNAL, "malformed answer from the partition leader");
            return;
        }
        seen_note(o->c, o->pid, index);
        o->wcb(o->ctx, NULL, data + (len - rd_left(&r)), rd_left(&r));
        op_free(o);
        return;
    }
    int64_t h = retry_hint(err);
    if (h >= 0) {
        op_retry(o, (uint64_t)h);
        return;
    }
    if (err->code == ERR_UNAVAILABLE) {
        op_fail_code(o, ERR_UNAVAILABLE,
                     "The partition leader did not answer; the write may or may not have been "
                     "applied");
        return;
    }
    op_fail(o, err);
}

/*
 * The partition a split is cutting `hash` out of, while this node's replica of it still
 * owns the key: the map splits first, and the child exists only once the parent's log
 * has applied its SPLIT (and then elected a leader), a few hundred ms under load. A write
 * sent to the parent meanwhile is applied there before the SPLIT (so the child starts
 * with it) or comes back MOVED after (apply checks every key against the range).
 */
static const meta_partition *split_parent_owning(const rcluster *c, const meta_partition *mp,
                                                 uint64_t hash)
{
    if (mp->hash_lo == 0)
        return NULL;
    const meta_partition *left = meta_partition_for_hash(c->meta, mp->table_id, mp->hash_lo - 1);
    if (left == NULL || left->table_id != mp->table_id || left->hash_hi + 1 != mp->hash_lo)
        return NULL;
    const lpart *lp = lpart_find(c, left->id);
    if (lp == NULL || lp->desc.table_id != mp->table_id || hash < lp->desc.hash_lo ||
        hash > lp->desc.hash_hi)
        return NULL;
    return left;
}

/* The partition a write or a strong read of one key is sent to: once per op, the parent
 * split_parent_owning names (the child may have no leader yet: writes to it were refused,
 * strong reads of its half waited about 100 ms for its first one); else mp. The parent
 * answers only while the key is in its range when the op runs there (a write is applied
 * before the SPLIT or comes back MOVED; a strong read is served only if the key is still
 * in the leader's range once confirmed and its read index applied, else it comes back),
 * and the op goes on to mp. */
static const meta_partition *via_parent_once(op *o, const meta_partition *mp)
{
    const meta_partition *parent = o->via_parent ? NULL : split_parent_owning(o->c, mp, o->hash);
    if (parent == NULL)
        return mp;
    o->via_parent = true;
    return parent;
}

static void write_attempt(op *o)
{
    rcluster *c = o->c;
    /* By hash at every attempt: a split may have moved the key since the last one. */
    const meta_partition *mp = meta_partition_for_hash(c->meta, o->table_id, o->hash);
    if (mp == NULL) {
        op_fail_code(o, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
        return;
    }
    mp = via_parent_once(o, mp);
    o->pid = mp->id;
    uint64_t target = pick_leader(c, mp, o->attempt);
    strata_err err;
    if (target == 0) {
        op_retry(o, 0);
        return;
    }
    if (target == c->self) {
        if (raft_host_is_leader(c->host, o->pid) &&
            cap_admit(c, o->table_id, o->pid, CAP_WRITE, router_write_reserve(o->len), &err) < 0) {
            op_fail(o, &err); /* throttled where the write would execute */
            return;
        }
        if (raft_host_submit(c->host, o->pid, o->data, o->len, on_local_write, o, &err) < 0) {
            uint64_t l = raft_host_leader(c->host, o->pid);
            op_retry(o, l != c->self ? l : 0);
            return;
        }
        o->in_flight = true;
        return;
    }
    buf_reset(&c->scratch);
    buf_put_varint(&c->scratch, o->pid);
    buf_put_varint(&c->scratch, mp->epoch);
    buf_append(&c->scratch, o->data, o->len);
    if (c->scratch.failed ||
        rpc_call(c->rpc, target, MSG_PART_WRITE, c->scratch.data, c->scratch.len,
                 ATTEMPT_DEADLINE_MS, on_remote_write, o, &err) < 0) {
        op_retry(o, 0); /* not sent: harmless to try again */
        return;
    }
    c->counters.forwarded_writes++;
    o->in_flight = true;
}

/* ------------------------------------------------------------------ reads */

/* The replica serves exactly the range the read was planned against. */
static bool range_matches(const partition_desc *d, uint64_t lo, uint64_t hi)
{
    return d->hash_lo == lo && d->hash_hi == hi;
}

/* Whether a replica serving `d` answers `req`, planned against [lo, hi]: a read of one
 * partition key (GET, Query) wherever the replica owns the key (its answer does not
 * depend on the rest of the range: the map may already show a split the replica has
 * not applied yet, or the other way round); any other read (Scan) only if the replica
 * serves exactly the planned range. */
static bool read_fits(const partition_desc *d, const partition_read_req *req, uint64_t lo,
                      uint64_t hi)
{
    const av *pk = req->kind == PARTITION_GET    ? av_map_get(req->key, req->ks.hash_name,
                                                              req->ks.hash_name_len)
                   : req->kind == PARTITION_QUERY ? req->hash_value
                                                  : NULL;
    if (pk == NULL || !key_type_ok(pk->type))
        return range_matches(d, lo, hi); /* (no key to hash: partition_read refuses it) */
    uint64_t h = key_hash(pk);
    return h >= d->hash_lo && h <= d->hash_hi;
}

/* read_fits for a read of this node's router, whose key hash (GET, Query) it knows. */
static bool op_fits(const op *o, const partition_desc *d)
{
    if (o->rekey)
        return o->hash >= d->hash_lo && o->hash <= d->hash_hi;
    return range_matches(d, o->exp_lo, o->exp_hi);
}

static void read_local(op *o, const lpart *lp)
{
    partition_read_res res;
    strata_err err;
    if (!op_fits(o, &lp->desc)) {
        op_retry(o, 0); /* this replica is before or after a split the map shows */
        return;
    }
    if (cap_admit(o->c, lp->desc.table_id, lp->id, CAP_READ, router_read_reserve(o->req), &err) <
            0 ||
        o->c->sm.read(o->c->engine, &lp->desc, o->req, o->arena, &res, &err) < 0) {
        op_fail(o, &err);
        return;
    }
    router_charge_read(o->c->cap, lp->id, o->req, &res, now_ms(o->c));
    o->rcb(o->ctx, NULL, &res);
    op_free(o);
}

static void on_local_read_confirmed(void *data, const raft_host_outcome *out)
{
    op *o = data;
    o->in_flight = false;
    const lpart *lp = lpart_find(o->c, o->pid);
    if (out->code == ERR_NONE && lp != NULL) {
        read_local(o, lp);
        return;
    }
    op_retry(o, out->leader_hint != o->c->self ? out->leader_hint : 0);
}

static void on_remote_read(void *ctx, int status, const strata_err *err, const uint8_t *data,
                           size_t len)
{
    op *o = ctx;
    o->in_flight = false;
    if (status < 0) {
        int64_t h = retry_hint(err);
        if (h >= 0 || err->code == ERR_UNAVAILABLE || err->code == ERR_BUSY) {
            op_retry(o, h > 0 ? (uint64_t)h : 0); /* reads are harmless to repeat */
            return;
        }
        op_fail(o, err);
        return;
    }
    partition_read_res res;
    strata_err e;
    if (partition_read_res_decode(data, len, o->arena, &res, &e) < 0 ||
        partition_read_finish(o->req, o->arena, &res, &e) < 0) {
        op_fail(o, &e);
        return;
    }
    o->rcb(o->ctx, NULL, &res);
    op_free(o);
}

/* A local replica that may serve an eventually consistent read: it follows a known
 * leader, has applied everything it knows to be committed, and at least `min_index`
 * (the last write the asking router saw). `st` receives its figures. */
static bool replica_fresh_stats(const rcluster *c, uint64_t pid, uint64_t min_index,
                                raft_host_group_stats *st)
{
    const lpart *lp = lpart_find(c, pid);
    if (lp == NULL || raft_host_group_info(c->host, pid, st, NULL) < 0)
        return false;
    return !st->failed && !st->installing && !lp->poisoned && st->leader != 0 &&
           st->applied_index >= st->commit_index && st->commit_index > 0 &&
           st->applied_index >= min_index;
}

static bool local_replica_fresh(const rcluster *c, uint64_t pid, uint64_t min_index)
{
    raft_host_group_stats st;
    return replica_fresh_stats(c, pid, min_index, &st);
}

static uint64_t pick_replica(rcluster *c, const meta_partition *mp, unsigned attempt)
{
    unsigned start = c->read_rr++;
    for (uint32_t k = 0; k < mp->n_members; k++) {
        const meta_replica *m = &mp->members[(start + attempt + k) % mp->n_members];
        if (m->node != c->self && node_staying(c, m->node))
            return m->node;
    }
    return 0;
}

/*
 * An eventually consistent read of a key the map has just given a split's child, while
 * no local replica of the child can serve it (it may not exist yet: see
 * split_parent_owning) and this node's replica of the parent still owns the key: that
 * replica serves it, as it would have a moment before. Not once this router saw a write
 * of the child (its reads must not go back before it).
 */
static bool read_via_parent(op *o, const meta_partition *mp, uint64_t min_index)
{
    rcluster *c = o->c;
    if (min_index != 0 || local_replica_fresh(c, mp->id, 0))
        return false;
    const meta_partition *parent = split_parent_owning(c, mp, o->hash);
    if (parent == NULL || !local_replica_fresh(c, parent->id, seen_get(c, parent->id)))
        return false;
    const lpart *lp = lpart_find(c, parent->id);
    c->counters.reads_via_parent++;
    o->pid = parent->id;
    o->exp_lo = lp->desc.hash_lo;
    o->exp_hi = lp->desc.hash_hi;
    read_local(o, lp);
    return true;
}

static void read_attempt(op *o)
{
    rcluster *c = o->c;
    const meta_partition *mp = o->rekey ? meta_partition_for_hash(c->meta, o->table_id, o->hash)
                                        : meta_partition_find(c->meta, o->pid);
    if (mp == NULL || mp->table_id != o->table_id) {
        op_fail_code(o, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
        return;
    }
    if (o->rekey) { /* one key: whichever partition owns it now (or its parent, strong) */
        const meta_partition *asked = o->req->consistent ? via_parent_once(o, mp) : mp;
        c->counters.strong_via_parent += asked != mp;
        mp = asked;
        o->pid = mp->id;
        o->exp_lo = mp->hash_lo;
        o->exp_hi = mp->hash_hi;
    } else if (!range_matches(&(partition_desc){.hash_lo = mp->hash_lo, .hash_hi = mp->hash_hi},
                              o->exp_lo, o->exp_hi)) {
        /* A scan of a range a split has cut since it was planned: the caller plans again. */
        op_fail_code(o, ERR_UNAVAILABLE,
                     ROUTER_MOVED_PREFIX " the partition was split; plan the read again");
        return;
    }
    bool strong = o->req->consistent;
    uint64_t target;
    uint64_t min_index = seen_get(c, o->pid);
    if (o->rekey && !strong && read_via_parent(o, mp, min_index))
        return;
    /* (Not a replica the map took away, which runs on until Raft leaves it out: it may
     * have stopped hearing from the leader a moment ago without knowing yet.) */
    if (!strong && meta_partition_has(mp, c->self, NULL) &&
        local_replica_fresh(c, o->pid, min_index) && op_fits(o, &lpart_find(c, o->pid)->desc)) {
        read_local(o, lpart_find(c, o->pid));
        return;
    }
    target = strong ? pick_leader(c, mp, o->attempt) : pick_replica(c, mp, o->attempt);
    if (target == 0 && !strong)
        target = pick_leader(c, mp, o->attempt);
    strata_err err;
    if (target == 0) {
        op_retry(o, 0);
        return;
    }
    if (target == c->self) {
        if (raft_host_read_index(c->host, o->pid, on_local_read_confirmed, o, &err) < 0) {
            uint64_t l = raft_host_leader(c->host, o->pid);
            op_retry(o, l != c->self ? l : 0);
            return;
        }
        o->in_flight = true;
        return;
    }
    buf_reset(&c->scratch);
    buf_put_varint(&c->scratch, o->pid);
    buf_put_u8(&c->scratch, strong ? 1 : 0);
    buf_put_varint(&c->scratch, min_index);
    buf_put_u64be(&c->scratch, o->exp_lo);
    buf_put_u64be(&c->scratch, o->exp_hi);
    if (partition_read_req_encode(o->req, &c->scratch, &err) < 0) {
        op_fail(o, &err);
        return;
    }
    if (c->scratch.failed ||
        rpc_call(c->rpc, target, MSG_PART_READ, c->scratch.data, c->scratch.len,
                 ATTEMPT_DEADLINE_MS, on_remote_read, o, &err) < 0) {
        op_retry(o, 0);
        return;
    }
    c->counters.forwarded_reads++;
    o->in_flight = true;
}

/* ------------------------------------------------------------------ meta changes */

/* `node`, taken for the meta leader, did not answer (hung, or cut off while its connection
 * stays up): the next questions go to another member, which answers or names the leader,
 * instead of to the same silent node again. */
static void forget_silent_leader(rcluster *c, uint64_t node)
{
    if (c->meta_leader_hint == node)
        c->meta_leader_hint = 0;
    c->silent_member = node;
    c->silent_until = now_ms(c) + SILENT_MEMBER_MS;
}

/* A meta member to ask when the leader is not known: the one at `turn` (modulo their
 * count), or the next one when that one stayed silent lately. */
static uint64_t pick_member(const rcluster *c, uint64_t turn)
{
    if (c->n_members == 0)
        return 0;
    uint64_t id = c->members[turn % c->n_members].id;
    if (id == c->silent_member && now_ms(c) < c->silent_until && c->n_members > 1)
        id = c->members[(turn + 1) % c->n_members].id;
    return id;
}

/* The meta leader as this node knows it, 0 if not known. A node outside the group never
 * names itself: a hint naming this node was learnt while it was a member (others named it
 * the leader then), and after it left, its meta changes went to itself and failed at
 * every attempt until their deadline, and it sent every node that asked it back to
 * itself. */
static uint64_t meta_leader(const rcluster *c)
{
    if (c->voter) {
        uint64_t l = raft_host_leader(c->host, META_GROUP);
        if (l != 0)
            return l;
    }
    return c->voter || c->meta_leader_hint != c->self ? c->meta_leader_hint : 0;
}

static void fetch_meta(rcluster *c);

/* A meta change committed at `index` with outcome `code`: wait until this node's map
 * holds it, so the caller's next lookup sees it. */
static void meta_committed(op *o, strata_code code, const char *msg, uint64_t index)
{
    rcluster *c = o->c;
    if (code != ERR_NONE && code != ERR_BUSY) {
        op_fail_code(o, code, msg);
        return;
    }
    /* A change refused because the table changed first (ERR_BUSY) also waits until this
     * node's map holds that change: the caller builds it again from there. */
    o->refused = code == ERR_BUSY;
    o->waiting = true;
    o->wait_index = index;
    if (c->meta_index >= index) {
        kick(c);
        return;
    }
    if (!c->voter)
        fetch_meta(c);
}

static void on_local_meta(void *data, const raft_host_outcome *out)
{
    op *o = data;
    o->in_flight = false;
    if (out->code != ERR_NONE) {
        op_fail_code(o, ERR_UNAVAILABLE,
                     "Leadership of the cluster map changed; the change may or may not have "
                     "been made");
        return;
    }
    const uint8_t *r = out->result;
    char msg[STRATA_ERR_MSG_MAX];
    size_t ml = out->result_len > 1 ? out->result_len - 1 : 0;
    if (ml >= sizeof msg)
        ml = sizeof msg - 1;
    if (ml)
        memcpy(msg, r + 1, ml);
    msg[ml] = '\0';
    meta_committed(o, out->result_len ? (strata_code)r[0] : ERR_NONE, msg, out->index);
}

static void on_remote_meta(void *ctx, int status, const strata_err *err, const uint8_t *data,
                           size_t len)
{
    op *o = ctx;
    o->in_flight = false;
    if (status < 0) {
        int64_t h = retry_hint(err);
        if (h == 0 && o->c->meta_leader_hint == o->asked)
            o->c->meta_leader_hint = 0; /* it does not lead and knows no leader: ask a member */
        if (h >= 0) {
            op_retry(o, (uint64_t)h);
            return;
        }
        forget_silent_leader(o->c, o->asked);
        op_fail_code(o, ERR_UNAVAILABLE,
                     "The cluster map's leader did not answer; the change may or may not have "
                     "been made");
        return;
    }
    rd r;
    rd_init(&r, data, len);
    uint8_t code = rd_u8(&r);
    uint64_t index = rd_varint(&r);
    char msg[STRATA_ERR_MSG_MAX];
    size_t ml = rd_left(&r) < sizeof msg - 1 ? rd_left(&r) : sizeof msg - 1;
    const uint8_t *m = rd_bytes(&r, ml);
    if (r.failed || code >= ERR_CODE_COUNT) {
        op_fail_code(o, ERR_INTERNAL, "malformed answer from the cluster map's leader");
        return;
    }
    memcpy(msg, m, ml);
    msg[ml] = '\0';
    meta_committed(o, (strata_code)code, msg, index);
}

static void meta_attempt(op *o)
{
    rcluster *c = o->c;
    /* Every fourth attempt asks a member instead (as pick_leader does): a stale leader
     * hint never holds a change until its deadline. */
    uint64_t target = o->attempt % 4 != 3 ? meta_leader(c) : 0;
    if (target == 0 || !node_usable(c, target))
        target = c->n_members ? c->members[o->attempt % c->n_members].id : 0;
    strata_err err;
    if (target == 0 || !node_usable(c, target)) {
        op_retry(o, 0);
        return;
    }
    if (target == c->self) {
        if (!c->voter ||
            raft_host_submit(c->host, META_GROUP, o->data, o->len, on_local_meta, o, &err) < 0) {
            uint64_t l = c->voter ? raft_host_leader(c->host, META_GROUP) : 0;
            op_retry(o, l != c->self ? l : 0);
            return;
        }
        o->in_flight = true;
        return;
    }
    o->asked = target;
    if (rpc_call(c->rpc, target, MSG_META_PROPOSE, o->data, o->len, ATTEMPT_DEADLINE_MS,
                 on_remote_meta, o, &err) < 0) {
        op_retry(o, 0);
        return;
    }
    o->in_flight = true;
}

static void op_run(op *o)
{
    if (o->c->closing) {
        op_fail_code(o, ERR_UNAVAILABLE, "The server is shutting down");
        return;
    }
    switch (o->kind) {
    case OP_WRITE:
        write_attempt(o);
        break;
    case OP_READ:
        read_attempt(o);
        break;
    case OP_META:
        meta_attempt(o);
        break;
    }
}

static void fence_ask(drop_fence *f, uint64_t index);
static bool fence_holds(const drop_fence *f);

/* Completes meta ops whose change this node's map now holds (a table's drop once its
 * replicas stopped, see "Fencing a dropped table"). */
static void finish_meta_waiters(rcluster *c)
{
    for (op *o = c->live, *next; o != NULL; o = next) {
        next = o->next;
        if (o->kind != OP_META || !o->waiting)
            continue;
        bool fenced = true;
        if (o->fence != NULL && !o->refused && c->meta_index >= o->wait_index) {
            fence_ask(o->fence, o->wait_index);
            fenced = fence_holds(o->fence);
        }
        if (c->meta_index >= o->wait_index && fenced) {
            strata_err busy;
            if (o->refused)
                strata_err_set(&busy, ERR_BUSY, "the table changed while this change was made");
            if (o->wcb != NULL)
                o->wcb(o->ctx, o->refused ? &busy : NULL, NULL, 0);
            op_free(o);
            next = c->live; /* the callback may have started or ended other ops */
        } else if (now_ms(c) >= o->deadline) {
            op_fail_code(o, ERR_UNAVAILABLE,
                         !fenced ? "The table was deleted, but not every partition confirmed "
                                   "that it stopped"
                                 : "The change was made but this node's map has not caught up yet");
            next = c->live;
        }
    }
}

/* ------------------------------------------------------------------ catalog syncs */

/*
 * A caller of rcluster_sync_catalog. Its map is current once it reflects `index`, the
 * meta leader's applied index after a leadership check that started after the call: no
 * table change acknowledged before the call can be missing from it then.
 */
typedef struct catalog_sync {
    router_sync_cb cb;
    void *ctx;
    uint64_t index;    /* valid in sync_wait */
    uint64_t deadline; /* monotonic ms: the caller goes on with the map it has */
    struct catalog_sync *next;
} catalog_sync;

static void sync_start_round(rcluster *c);

/* Moves every caller of `*from` to the front of `*to`, setting their index. */
static void syncs_move(catalog_sync **from, catalog_sync **to, uint64_t index)
{
    while (*from != NULL) {
        catalog_sync *s = *from;
        *from = s->next;
        s->index = index;
        s->next = *to;
        *to = s;
    }
}

/* Calls back the callers of `*list` for which `done` holds (all when `all`), unlinked first:
 * a callback may ask again. Runs from the loop (on_kick, on_tick), never inside the host. */
static void syncs_finish(rcluster *c, catalog_sync **list, bool all)
{
    catalog_sync *ready = NULL;
    for (catalog_sync **pp = list; *pp != NULL;) {
        catalog_sync *s = *pp;
        if (all || c->meta_index >= s->index || now_ms(c) >= s->deadline) {
            *pp = s->next;
            s->next = ready;
            ready = s;
        } else {
            pp = &s->next;
        }
    }
    while (ready != NULL) {
        catalog_sync *s = ready;
        ready = s->next;
        s->cb(s->ctx);
        free(s);
    }
}

/* Callers whose map is current (or who waited long enough) go on; a node outside the meta
 * group that still lags fetches the map from the meta leader. */
static void finish_catalog_syncs(rcluster *c)
{
    syncs_finish(c, &c->sync_wait, false);
    if (c->sync_wait != NULL && !c->voter && !c->fetch_in_flight)
        fetch_meta(c);
}

/* The leader's confirmed index for the round in flight, or 0 when none could be had (the
 * round's callers then go on at their deadline, or now if it passed). */
static void sync_round_done(rcluster *c, uint64_t index)
{
    c->sync_in_flight = false;
    if (index == 0) { /* no meta leader answered: go on with the map as it is */
        for (catalog_sync *s = c->sync_round; s != NULL; s = s->next)
            s->deadline = 0;
        index = UINT64_MAX;
    }
    syncs_move(&c->sync_round, &c->sync_wait, index);
    sync_start_round(c);
    kick(c); /* finish_catalog_syncs runs from the loop */
}

static void on_sync_local(void *data, const raft_host_outcome *out)
{
    rcluster *c = data;
    sync_round_done(c, out->code == ERR_NONE ? c->meta_index : 0);
}

static bool sync_ask(rcluster *c, uint64_t target);

static void on_sync_answer(void *ctx, int status, const strata_err *err, const uint8_t *data,
                           size_t len)
{
    rcluster *c = ctx;
    if (c->closing) {
        c->sync_in_flight = false;
        return;
    }
    uint64_t index = 0;
    if (status == 0) {
        rd r;
        rd_init(&r, data, len);
        index = rd_varint(&r);
        if (r.failed)
            index = 0;
        else
            c->meta_leader_hint = c->sync_target; /* where a lagging map is fetched from */
    } else {
        /* Asked a node that does not lead the meta group: ask the one it names, twice at most. */
        int64_t h = retry_hint(err);
        if (h > 0) {
            c->meta_leader_hint = (uint64_t)h;
            if (++c->sync_asks <= 2 && sync_ask(c, (uint64_t)h))
                return;
        } else {
            forget_silent_leader(c, c->sync_target);
        }
    }
    sync_round_done(c, index);
}

/* Sends the round's question to `target` (the meta leader as known here). */
static bool sync_ask(rcluster *c, uint64_t target)
{
    strata_err err;
    if (c->voter && target == c->self) {
        if (!raft_host_is_leader(c->host, META_GROUP))
            return false;
        return raft_host_read_index(c->host, META_GROUP, on_sync_local, c, &err) == 0;
    }
    c->sync_target = target;
    return target != 0 && rpc_call(c->rpc, target, MSG_META_SYNC, NULL, 0, CATALOG_SYNC_MS,
                                   on_sync_answer, c, &err) == 0;
}

/* Sends one leadership check for every caller that asked since the last one was sent. */
static void sync_start_round(rcluster *c)
{
    if (c->sync_in_flight || c->sync_next == NULL || c->closing)
        return;
    syncs_move(&c->sync_next, &c->sync_round, 0);
    c->sync_in_flight = true;
    c->sync_asks = 0;
    uint64_t target = meta_leader(c);
    if (target == 0 && c->n_members > 0) /* not known here: a member will name it */
        target = pick_member(c, now_ms(c));
    if (!sync_ask(c, target))
        sync_round_done(c, 0);
}

void rcluster_sync_catalog(rcluster *c, router_sync_cb cb, void *ctx)
{
    catalog_sync *s = calloc(1, sizeof *s);
    if (s == NULL) {
        cb(ctx); /* out of memory: go on with the map as it is */
        return;
    }
    s->cb = cb;
    s->ctx = ctx;
    s->deadline = now_ms(c) + CATALOG_SYNC_MS;
    if (c->closing) { /* rcluster_close calls it back */
        s->next = c->sync_wait;
        c->sync_wait = s;
        return;
    }
    s->next = c->sync_next;
    c->sync_next = s;
    sync_start_round(c);
}

/* ------------------------------------------------------------------ drop fences */

/*
 * Fencing a dropped table. A drop takes the table out of the map at once, but a replica
 * stops only when its node's copy of the map shows the drop: a heartbeat later on the
 * meta voters, up to META_FETCH_MS on the other nodes. Until then a partition whose
 * replicas all lag still commits writes, and a node whose copy lags too still routes
 * writes of that table's name there: after the table was dropped and created again, such
 * a write was acknowledged and then lost with the old partition. So a drop is answered
 * only once a majority of the voters of each of the table's partitions say (MSG_DROP_CHECK)
 * that their map holds the drop and they run no replica of the table: no entry can commit
 * in those groups any more, and a write routed there by a stale map finds no partition
 * (ResourceNotFound, after which the API syncs its catalog and tries again).
 *
 * The partitions are the table's in this node's map when the drop is proposed. A
 * partition a split created since is covered as long as it lives on its parent's nodes
 * (the check is by table, not by partition), which holds until the cluster moves it.
 */
typedef struct {
    uint64_t id;
    bool confirmed;    /* said its map holds the drop and it runs none of the table */
    bool asking;       /* a question is in flight */
    uint64_t retry_at; /* after a failed question: not asked again before (monotonic ms) */
} fence_node;

typedef struct {
    uint32_t n_voters;
    uint64_t voters[META_MAX_MEMBERS];
} fence_part;

struct drop_fence {
    rcluster *c;
    op *owner; /* NULL once the op ended: the last answer frees the fence */
    uint32_t table_id;
    unsigned asking; /* questions in flight */
    fence_part *parts;
    size_t n_parts;
    fence_node *nodes;
    size_t n_nodes;
};

typedef struct {
    drop_fence *f;
    size_t node; /* index into f->nodes */
} fence_question;

static void fence_free(drop_fence *f)
{
    free(f->parts);
    free(f->nodes);
    free(f);
}

static void fence_release(drop_fence *f)
{
    f->owner = NULL;
    if (f->asking == 0)
        fence_free(f);
}

static bool fence_has_node(const drop_fence *f, uint64_t id)
{
    for (size_t i = 0; i < f->n_nodes; i++)
        if (f->nodes[i].id == id)
            return true;
    return false;
}

/* The fence of dropping table `table_id`: its partitions' voters as this map has them.
 * NULL when out of memory (the drop then goes unfenced, as before fences existed). */
static drop_fence *fence_new(rcluster *c, uint32_t table_id)
{
    size_t n;
    const meta_partition *mp = meta_table_partitions(c->meta, table_id, &n);
    drop_fence *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->c = c;
    f->table_id = table_id;
    f->parts = calloc(n ? n : 1, sizeof *f->parts);
    f->nodes = calloc(n * META_MAX_MEMBERS + 1, sizeof *f->nodes);
    if (f->parts == NULL || f->nodes == NULL) {
        fence_free(f);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        fence_part *fp = &f->parts[f->n_parts++];
        for (uint32_t k = 0; k < mp[i].n_members; k++) {
            const meta_replica *r = &mp[i].members[k];
            if (r->role != META_VOTER)
                continue;
            fp->voters[fp->n_voters++] = r->node;
            if (!fence_has_node(f, r->node))
                f->nodes[f->n_nodes++].id = r->node;
        }
    }
    return f;
}

static bool runs_table(const rcluster *c, uint32_t table_id)
{
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].desc.table_id == table_id)
            return true;
    return false;
}

static bool fence_confirmed(const drop_fence *f, uint64_t id)
{
    for (size_t i = 0; i < f->n_nodes; i++)
        if (f->nodes[i].id == id)
            return f->nodes[i].confirmed;
    return false;
}

/* Whether a majority of every partition's voters stopped the table. */
static bool fence_holds(const drop_fence *f)
{
    for (size_t i = 0; i < f->n_parts; i++) {
        const fence_part *fp = &f->parts[i];
        uint32_t n = 0;
        for (uint32_t k = 0; k < fp->n_voters; k++)
            n += fence_confirmed(f, fp->voters[k]);
        if (2 * n <= fp->n_voters)
            return false;
    }
    return true;
}

static void on_fence_answer(void *ctx, int status, const strata_err *err, const uint8_t *data,
                            size_t len)
{
    fence_question *q = ctx;
    drop_fence *f = q->f;
    fence_node *fn = &f->nodes[q->node];
    free(q);
    f->asking--;
    fn->asking = false;
    if (status == 0 && len >= 1 && data[0] == 1)
        fn->confirmed = true;
    else if (status < 0 && err != NULL && err->code == ERR_UNKNOWN_OPERATION)
        fn->confirmed = true; /* a node of an older version, which cannot tell: as before */
    else if (status < 0)
        fn->retry_at = now_ms(f->c) + TICK_MS; /* not at once: it may fail at once again */
    if (f->owner == NULL) {
        if (f->asking == 0)
            fence_free(f);
        return;
    }
    kick(f->c); /* finish_meta_waiters looks again (an answer of 0 is asked again there) */
}

/* Asks every node that has not confirmed yet and is not being asked. This node answers
 * for itself: reconcile stopped its replicas of a dropped table just before. */
static void fence_ask(drop_fence *f, uint64_t index)
{
    rcluster *c = f->c;
    buf msg;
    buf_init(&msg, 0);
    buf_put_varint(&msg, index);
    buf_put_u32be(&msg, f->table_id);
    for (size_t i = 0; i < f->n_nodes; i++) {
        fence_node *fn = &f->nodes[i];
        if (fn->confirmed || fn->asking || now_ms(c) < fn->retry_at)
            continue;
        if (fn->id == c->self) {
            fn->confirmed = c->meta_index >= index && !runs_table(c, f->table_id);
            continue;
        }
        if (!node_usable(c, fn->id))
            continue; /* asked again on a later pass */
        fence_question *q = malloc(sizeof *q);
        if (q == NULL || msg.failed) {
            free(q);
            break;
        }
        *q = (fence_question){f, i};
        strata_err err;
        /* The node answers within DROP_CHECK_MS; the call's deadline leaves it a second. */
        if (rpc_call(c->rpc, fn->id, MSG_DROP_CHECK, msg.data, msg.len, DROP_CHECK_MS + 1000,
                     on_fence_answer, q, &err) < 0) {
            free(q);
            continue;
        }
        fn->asking = true;
        f->asking++;
    }
    buf_free(&msg);
}

static void respond_retry(rpc_responder *resp, uint64_t leader, const char *why);

/* A MSG_DROP_CHECK question held until this node can answer it. */
typedef struct drop_check {
    rpc_responder *resp;
    uint64_t index;
    uint32_t table_id;
    uint64_t deadline;
    struct drop_check *next;
} drop_check;

static void serve_drop_check(rcluster *c, const uint8_t *data, size_t len, rpc_responder *resp)
{
    rd r;
    rd_init(&r, data, len);
    uint64_t index = rd_varint(&r);
    uint32_t table_id = rd_u32be(&r);
    if (r.failed) {
        rpc_respond_error(resp, ERR_VALIDATION, "malformed drop check");
        return;
    }
    drop_check *d = c->n_drop_checks < DROP_CHECKS_MAX ? malloc(sizeof *d) : NULL;
    if (d == NULL) {
        uint8_t not_yet = 0;
        rpc_respond(resp, &not_yet, 1, NULL);
        return;
    }
    c->n_drop_checks++;
    *d = (drop_check){.resp = resp,
                      .index = index,
                      .table_id = table_id,
                      .deadline = now_ms(c) + DROP_CHECK_MS,
                      .next = c->drop_checks};
    c->drop_checks = d;
    if (c->meta_index < index)
        fetch_meta(c); /* outside the meta group: catch up now rather than at the next fetch */
    kick(c); /* answered from reconcile, after its replicas followed the map */
}

/* Answers the questions this node can answer now (or whose time is up); a node outside
 * the meta group that lags fetches the map. Runs from reconcile. */
static void finish_drop_checks(rcluster *c)
{
    bool lagging = false;
    for (drop_check **pp = &c->drop_checks; *pp != NULL;) {
        drop_check *d = *pp;
        bool reached = c->meta_index >= d->index;
        bool done = reached && !runs_table(c, d->table_id);
        if (!done && now_ms(c) < d->deadline) {
            lagging |= !reached;
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        c->n_drop_checks--;
        uint8_t answer = done;
        rpc_respond(d->resp, &answer, 1, NULL);
        free(d);
    }
    if (lagging)
        fetch_meta(c);
}

/* The endpoint is closing: every question still held is answered (the asker retries). */
static void drop_checks_abandon(rcluster *c)
{
    while (c->drop_checks != NULL) {
        drop_check *d = c->drop_checks;
        c->drop_checks = d->next;
        c->n_drop_checks--;
        respond_retry(d->resp, 0, "shutting down");
        free(d);
    }
}

static int propose_meta(rcluster *c, const meta_cmd *cmd, router_cb cb, void *ctx, strata_err *err)
{
    buf b;
    buf_init(&b, 0);
    if (meta_encode(cmd, &b, err) < 0) {
        buf_free(&b);
        return -1;
    }
    op *o = op_new(c, OP_META, b.data, b.len);
    buf_free(&b);
    if (o == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    o->wcb = cb;
    o->ctx = ctx;
    if (cmd->kind == META_CMD_TABLE_DROP && (o->fence = fence_new(c, cmd->table_id)) != NULL)
        o->fence->owner = o;
    op_start(o);
    return 0;
}

/* ------------------------------------------------------------------ state machines */

static void on_engine_writable(void *arg, const strata_err *err)
{
    (void)err;
    kick(arg); /* resume from the loop: this may run inside lsm_write's caller */
}

/* An entry of a newer binary (partition_entry.h, Formats in meta.h): skipping it, or
 * answering it with an error, would leave this replica apart from the newer ones, so the
 * replica stops applying the partition here (the host fails the group), and the node
 * stops (rcluster_refused): its binary is too old for the cluster's log. */
static int stop_on_newer(rcluster *c, const lpart *lp, uint64_t index, const char *what)
{
    fprintf(stderr,
            "stratad: partition %" PRIu64 " entry %" PRIu64 " is %s, which this binary cannot "
            "read: a node of a newer version wrote it. This replica stops here rather than "
            "skip it\n",
            lp->id, index, what);
    if (c->refused.code == ERR_NONE)
        strata_err_set(&c->refused, ERR_NEWER,
                       "partition %" PRIu64 " entry %" PRIu64 " is %s: start this node with a "
                       "binary of the cluster's version or newer",
                       lp->id, index, what);
    return -1;
}

/* A SPLIT entry: the replica records both ranges and shrinks the parent, which goes on;
 * once the records are durable it creates the child (splits_step, from the loop: the
 * host's groups cannot be started from inside apply). Until the parent has shrunk the
 * entry is refused (BUSY) and retried; once the parent's range no longer holds the split
 * hash, the entry is done (also when it is replayed after a restart). A further SPLIT
 * waits (BUSY) until the child of the one before exists. A command that does not decode
 * is ignored everywhere; one of a newer version stops the replica (stop_on_newer). */
static int apply_split(rcluster *c, lpart *lp, uint64_t index, const void *cmd, size_t len)
{
    split_cmd sc;
    strata_err err;
    if (split_cmd_decode(cmd, len, &sc, &err) < 0) {
        if (err.code == ERR_NEWER)
            return stop_on_newer(c, lp, index, "a SPLIT of a newer version");
        fprintf(stderr, "stratad: partition %" PRIu64 " entry %" PRIu64 ": %s (ignored)\n",
                lp->id, index, err.msg);
        return 0;
    }
    if (!split_hash_valid(lp->desc.hash_lo, lp->desc.hash_hi, sc.split_hash))
        return 0;
    if (lp->split != SPLIT_NONE && lp->split_index != index)
        return RAFT_HOST_APPLY_BUSY; /* split_finish resumes */
    if (c->test_exit_on_split) {
        fprintf(stderr,
                "stratad: partition %" PRIu64 " entry %" PRIu64
                ": SPLIT, and STRATA_TEST_EXIT_ON_SPLIT is set: exiting\n",
                lp->id, index);
        _exit(86);
    }
    if (lp->split == SPLIT_NONE) {
        lp->split = SPLIT_WRITE;
        lp->split_index = index;
        lp->split_cmd = sc;
    }
    kick(c);
    return RAFT_HOST_APPLY_BUSY;
}

/* An entry that changes no data (a child leader's no-op, a flush hint): records its index
 * in the engine (an empty batch), so that a child that gets no write still has a durable
 * index past 1 to compact its log at. */
static int apply_noop(rcluster *c, lpart *lp, uint64_t index)
{
    strata_err err;
    lsm_batch *b = lsm_batch_new();
    int rc = b != NULL ? lsm_write(c->engine, b, lp->id, index, &err) : -1;
    lsm_batch_free(b);
    if (rc == 0)
        return 0;
    if (b != NULL && err.code == ERR_BUSY) {
        lp->busy = true;
        lsm_on_writable(c->engine, on_engine_writable, c);
        return RAFT_HOST_APPLY_BUSY;
    }
    return -1;
}

static void on_hint_flushed(void *arg, const strata_err *err)
{
    rcluster *c = arg;
    (void)err; /* a failed flush is sticky: the SPLIT's own flush reports it */
    c->hint_flush_done = c->hint_flush_started;
    kick(c); /* a leader waiting to propose its SPLIT */
}

static bool hint_flush_running(const rcluster *c)
{
    return c->hint_flush_done != c->hint_flush_started;
}

/* A flush hint (partition_entry.h), appended by a parent's leader before its SPLIT
 * (follow_map_splits) so that the flush the SPLIT waits for (split_write) finds a small
 * memtable: recorded like a no-op, and the engine flushes unless a hint's flush is running
 * already (it shrinks the memtable just as well). */
static int apply_flush_hint(rcluster *c, lpart *lp, uint64_t index)
{
    int rc = apply_noop(c, lp, index);
    if (rc != 0)
        return rc;
    if (!hint_flush_running(c)) {
        c->hint_flush_started++;
        lsm_flush(c->engine, on_hint_flushed, c);
    }
    lp->hint_flush = c->hint_flush_started;
    c->counters.flush_hints++;
    return 0;
}

static int apply_partition(rcluster *c, uint64_t group, uint64_t index, const void *cmd, size_t len,
                           void **result, size_t *result_len)
{
    lpart *lp = lpart_find(c, group);
    if (lp == NULL)
        return -1;
    if (lp->poisoned)
        return RAFT_HOST_APPLY_BUSY; /* partial state: only a completed copy may follow */
    pentry_kind kind = pentry_kind_of(cmd, len);
    switch (kind) {
    case PENTRY_SPLIT:
        return apply_split(c, lp, index, cmd, len);
    case PENTRY_CHILD_NOOP:
        return apply_noop(c, lp, index);
    case PENTRY_FLUSH_HINT:
        return apply_flush_hint(c, lp, index);
    case PENTRY_NEWER:
        return stop_on_newer(c, lp, index, "an entry of a newer binary");
    case PENTRY_WRITE:
    case PENTRY_BARE_WRITE:
        break;
    }
    bool has_hash = kind == PENTRY_WRITE;
    uint64_t h = has_hash ? pentry_write_hash(cmd) : 0;
    if (has_hash) {
        if (h < lp->desc.hash_lo || h > lp->desc.hash_hi) {
            uint8_t *m = malloc(sizeof MOVED_RESULT);
            if (m == NULL)
                return -1;
            memcpy(m, MOVED_RESULT, sizeof MOVED_RESULT);
            *result = m;
            *result_len = sizeof MOVED_RESULT;
            return 0;
        }
        cmd = (const uint8_t *)cmd + PENTRY_WRITE_HEADER;
        len -= PENTRY_WRITE_HEADER;
    }
    buf res;
    buf_init(&res, 0);
    strata_err err;
    strata_err_clear(&err);
    if (c->sm.apply(c->engine, &lp->desc, cmd, len, index, &res, &err) < 0) {
        buf_free(&res);
        if (err.code == ERR_BUSY) {
            lp->busy = true;
            lsm_on_writable(c->engine, on_engine_writable, c);
            return RAFT_HOST_APPLY_BUSY;
        }
        if (err.code == ERR_NEWER)
            return stop_on_newer(c, lp, index, "a write command of a newer version");
        fprintf(stderr, "stratad: partition %" PRIu64 " cannot apply entry %" PRIu64 ": %s\n",
                group, index, err.msg);
        return -1;
    }
    if (c->sm.result_stats != NULL) {
        partition_stats d = {0, 0};
        c->sm.result_stats(res.data, res.len, &d);
        lp->stats.item_count += d.item_count;
        lp->stats.size_bytes += d.size_bytes;
        lp->recount_delta.item_count += d.item_count; /* (meaningless unless counting) */
        lp->recount_delta.size_bytes += d.size_bytes;
        if (lp->stats.item_count < 0)
            lp->stats.item_count = 0;
        if (lp->stats.size_bytes < 0)
            lp->stats.size_bytes = 0;
    }
    if (res.failed) {
        buf_free(&res);
        return -1;
    }
    /* The leader admitted the write: it pays for it once it is known what it wrote (on
     * a leader change, the new leader pays for what it applies). The key's hash feeds
     * hot-key reporting and the split point. */
    if (raft_host_is_leader(c->host, group))
        capacity_charge(c->cap, lp->desc.table_id, group, CAP_WRITE,
                        (int64_t)c->sm.write_units(res.data, res.len) * CAP_NANO,
                        router_write_reserve(has_hash ? len + PENTRY_WRITE_HEADER : len), has_hash,
                        h, now_ms(c));
    *result = res.data; /* the host frees it */
    *result_len = res.len;
    return 0;
}

static void drop_later(rcluster *c, uint32_t table_id)
{
    for (size_t i = 0; i < c->n_drops; i++)
        if (c->drops[i] == table_id)
            return; /* queued already */
    if (c->n_drops == c->cap_drops) {
        size_t cap = c->cap_drops ? c->cap_drops * 2 : 8;
        uint32_t *d = realloc(c->drops, cap * sizeof *d);
        if (d == NULL)
            return; /* the data stays: harmless, only space */
        c->drops = d;
        c->cap_drops = cap;
    }
    c->drops[c->n_drops++] = table_id;
}

/* Keeps the catalog in step with one applied meta command. */
static void mirror_catalog(rcluster *c, const meta_cmd *cmd, const char *dropped_name,
                           size_t dropped_len)
{
    strata_err err;
    if (cmd->kind == META_CMD_TABLE_CREATE || cmd->kind == META_CMD_TABLE_SCHEMA) {
        if (catalog_apply(c->cat, cmd->schema, cmd->schema_len, &err) < 0)
            fprintf(stderr, "stratad: table %u: bad catalog record: %s\n", cmd->table_id, err.msg);
        catalog_sync_parts(c, cmd->table_id);
    } else if (cmd->kind == META_CMD_SPLIT) {
        const meta_partition *mp = meta_partition_find(c->meta, cmd->partition_id);
        if (mp != NULL)
            catalog_sync_parts(c, mp->table_id);
        catalog_bump_ids(c->cat, meta_next_table_id(c->meta), meta_next_partition_id(c->meta));
    } else if (cmd->kind == META_CMD_TABLE_DROP && dropped_name != NULL) {
        buf b;
        buf_init(&b, 0);
        if (catalog_encode_drop(dropped_name, dropped_len, &b, &err) == 0)
            catalog_apply(c->cat, b.data, b.len, &err);
        buf_free(&b);
        drop_later(c, cmd->table_id);
    }
}

static int apply_meta(rcluster *c, uint64_t index, const void *data, size_t len, void **result,
                      size_t *result_len)
{
    meta_cmd cmd;
    strata_err err;
    strata_err_clear(&err);
    /* An entry the map holds already: this replica joined the group, or lost sight of its
     * leader, with a map fetched from another member (meta_seat_take, on_fetched). Its
     * outcome is not known here. */
    if (index <= c->meta_index) {
        static const char skipped[] = "the map held this change already; outcome unknown here";
        uint8_t *out = malloc(sizeof skipped);
        if (out == NULL)
            return -1;
        out[0] = (uint8_t)ERR_UNAVAILABLE;
        memcpy(out + 1, skipped, sizeof skipped - 1);
        *result = out;
        *result_len = sizeof skipped;
        return 0;
    }
    if (meta_record_format(data, len) > META_FORMAT) {
        fprintf(stderr,
                "stratad: meta entry %" PRIu64 " is of format %u, and this binary reads up to "
                "%d: a node of a newer version wrote it. This node's meta replica stops here "
                "rather than skip it; start the node with a binary of the cluster's version\n",
                index, meta_record_format(data, len), META_FORMAT);
        if (c->refused.code == ERR_NONE)
            strata_err_set(&c->refused, ERR_NEWER,
                           "meta entry %" PRIu64 " is of format %u, newer than this binary's "
                           "%d: start this node with a binary of the cluster's version or newer",
                           index, meta_record_format(data, len), META_FORMAT);
        return -1; /* the group stops: skipping would leave this map behind the others' */
    }
    int rc = meta_decode(data, len, &cmd, &err);
    char name[META_NAME_MAX + 1];
    size_t name_len = 0;
    if (rc == 0 && cmd.kind == META_CMD_TABLE_DROP) {
        const meta_table *t = meta_table_find(c->meta, cmd.table_id);
        if (t != NULL) {
            name_len = t->name_len;
            memcpy(name, t->name, name_len);
        }
    }
    if (rc == 0)
        rc = meta_apply_cmd(c->meta, &cmd, &err);
    if (rc == 0)
        mirror_catalog(c, &cmd, name_len ? name : NULL, name_len);
    if (rc == 0 && cmd.kind == META_CMD_CLUSTER_FORMAT)
        fprintf(stderr, "stratad: every node reads meta format %u: the cluster writes it now\n",
                cmd.format);
    if (err.code == ERR_NOMEM) {
        meta_cmd_free(&cmd);
        return -1; /* not a deterministic outcome: the group must stop */
    }
    meta_cmd_free(&cmd);
    c->meta_index = index;
    size_t ml = rc == 0 ? 0 : strlen(err.msg);
    uint8_t *out = malloc(1 + ml);
    if (out == NULL)
        return -1;
    out[0] = (uint8_t)(rc == 0 ? ERR_NONE : err.code);
    memcpy(out + 1, err.msg, ml);
    *result = out;
    *result_len = 1 + ml;
    kick(c);
    return 0;
}

static int fsm_apply(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                     void **result, size_t *result_len)
{
    rcluster *c = ctx;
    if (group == META_GROUP)
        return apply_meta(c, index, cmd, len, result, result_len);
    return apply_partition(c, group, index, cmd, len, result, result_len);
}

/* ------------------------------------------------------------------ snapshots */

/* Engine key marking a snapshot copy in progress into partition `pid` (table 0 is no
 * table's: the catalog's namespace). */
static size_t install_mark_key(uint8_t k[13], uint64_t pid)
{
    memset(k, 0, 4);
    k[4] = 'I';
    put_be(k + 5, pid, 8);
    return 13;
}

static bool install_marked(rcluster *c, uint64_t pid)
{
    uint8_t k[13];
    buf v;
    buf_init(&v, 0);
    int found = lsm_get(c->engine, NULL, k, install_mark_key(k, pid), &v, NULL);
    buf_free(&v);
    return found != 0; /* an engine error counts as marked: never apply on doubt */
}

/* Engine key of a replica's range record (split.h): table 0 | 'R' | partition. */
static size_t range_key(uint8_t k[13], uint64_t pid)
{
    memset(k, 0, 4);
    k[4] = 'R';
    put_be(k + 5, pid, 8);
    return 13;
}

/* 1 with *out when the replica has a range record, 0 when not, -1 on an engine error or
 * a damaged record (the caller waits: never start a replica on doubt). */
static int range_read(rcluster *c, uint64_t pid, split_range *out)
{
    uint8_t k[13];
    buf v;
    buf_init(&v, 0);
    strata_err err;
    int found = lsm_get(c->engine, NULL, k, range_key(k, pid), &v, &err);
    int rc = found < 0 ? -1 : found == 0 ? 0 : 1;
    if (rc == 1 && split_range_decode(v.data, v.len, out, &err) < 0) {
        fprintf(stderr, "stratad: partition %" PRIu64 ": %s\n", pid, err.msg);
        rc = -1;
    }
    buf_free(&v);
    return rc;
}

static int range_put(lsm_batch *b, uint64_t pid, const split_range *r, strata_err *err)
{
    uint8_t k[13];
    buf v;
    buf_init(&v, 0);
    int rc = split_range_encode(r, &v, err);
    if (rc == 0)
        rc = lsm_batch_put(b, k, range_key(k, pid), v.data, v.len, err);
    buf_free(&v);
    return rc;
}

/* Puts into `b` the deletes of what a replica `pid` that goes away leaves in the catalog:
 * its range record and the mark of a copy it was in the middle of. */
static int replica_keys_delete(lsm_batch *b, uint64_t pid, strata_err *err)
{
    uint8_t rk[13], mk[13];
    if (lsm_batch_delete(b, rk, range_key(rk, pid), err) < 0)
        return -1;
    return lsm_batch_delete(b, mk, install_mark_key(mk, pid), err);
}

/* Forgets a replica's range record and copy mark (the replica went away). A failure
 * leaves a record that a later replica of the same id on this node would start from. */
static void range_forget(rcluster *c, uint64_t pid)
{
    lsm_batch *b = lsm_batch_new();
    strata_err err;
    if (b != NULL && replica_keys_delete(b, pid, &err) == 0)
        lsm_write(c->engine, b, 0, 0, &err);
    lsm_batch_free(b);
}

static split_range range_of(const partition_desc *d)
{
    return (split_range){.table_id = d->table_id, .hash_lo = d->hash_lo, .hash_hi = d->hash_hi};
}

#define RECOUNT_BATCH 4096 /* items a loop turn counts, over all recounts */

/*
 * A replica's item count and size (DescribeTable's ItemCount and TableSizeBytes) are kept
 * up to date by every apply, and counted again from the engine whenever the range or its
 * data changed otherwise: at start, after a copy, at a split. Not in one go: a partition
 * may hold gigabytes, and the loop serves every other partition meanwhile. lp->stats
 * keeps its value (an estimate at a split) until the count is complete.
 */
static void recount_step(rcluster *c)
{
    size_t budget = RECOUNT_BATCH;
    bool more = false;
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        lsm_iter *it = lp->recount;
        if (it == NULL)
            continue;
        for (; budget > 0 && lsm_iter_valid(it); budget--, lsm_iter_next(it)) {
            size_t vlen;
            lsm_iter_value(it, &vlen);
            lp->recount_sum.item_count++;
            lp->recount_sum.size_bytes += (int64_t)vlen;
        }
        if (lsm_iter_valid(it)) {
            more = true;
            continue;
        }
        if (lsm_iter_status(it, NULL) == 0) {
            partition_stats s = {lp->recount_sum.item_count + lp->recount_delta.item_count,
                                 lp->recount_sum.size_bytes + lp->recount_delta.size_bytes};
            lp->stats = (partition_stats){s.item_count > 0 ? s.item_count : 0,
                                          s.size_bytes > 0 ? s.size_bytes : 0};
        }
        recount_stop(lp); /* a read error keeps the figures it had */
    }
    if (!more)
        uv_idle_stop(&c->recount);
}

static void on_recount(uv_idle_t *h)
{
    recount_step(h->data);
}

/* Counts lp's range again from now on (see recount_step), from the start if a count was
 * under way: the range or its data changed. */
static void stats_recount(rcluster *c, lpart *lp)
{
    recount_stop(lp);
    uint8_t lo[12], hi[12];
    router_partition_bounds(&lp->desc, lo, hi);
    lsm_iter_options o = {.lower = lo, .lower_len = 12, .upper = hi, .upper_len = 12};
    lp->recount = lsm_iter_new(c->engine, &o, NULL);
    if (lp->recount == NULL)
        return; /* out of memory: the figures stay as they are */
    lp->recount_sum = lp->recount_delta = (partition_stats){0, 0};
    lsm_iter_first(lp->recount);
    if (!c->closing)
        uv_idle_start(&c->recount, on_recount);
}

static void install_free(rcluster *c, install *in)
{
    for (install **pp = &c->installs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == in) {
            *pp = in->next;
            break;
        }
    buf_free(&in->next_key);
    free(in->chunk);
    free(in);
}

/* The copy ends: tells the host (from a loop callback, as it requires). */
static void install_finish(install *in, int status)
{
    rcluster *c = in->c;
    strata_err err;
    if (status != 0)
        fprintf(stderr,
                "stratad: snapshot copy of partition %" PRIu64 " from node %" PRIu64
                " failed; the leader will offer it again\n",
                in->pid, in->from);
    raft_host_snapshot_installed(c->host, in->token, status, in->applied, &err);
    install_free(c, in);
}

static void on_install_flushed(void *arg, const strata_err *err)
{
    install *in = arg;
    rcluster *c = in->c;
    in->in_flight = false;
    if (in->dead || c->closing) {
        install_free(c, in);
        return;
    }
    lpart *lp = lpart_find(c, in->pid);
    if (err != NULL && err->code != ERR_NONE) {
        install_finish(in, -1);
        return;
    }
    if (lp != NULL) {
        lp->poisoned = false;
        stats_recount(c, lp);
    }
    fprintf(stderr,
            "stratad: partition %" PRIu64 " copied from node %" PRIu64 " up to entry %" PRIu64 "\n",
            in->pid, in->from, in->applied);
    install_finish(in, 0);
}

/* Decodes a chunk (cluster/snap_chunk.h) into `ch` and puts its items into `b`. */
static int snap_chunk_to_batch(const uint8_t *data, size_t len, snap_chunk *ch, lsm_batch *b,
                               strata_err *err)
{
    if (snap_chunk_decode(data, len, ch, err) < 0)
        return -1;
    const uint8_t *k, *v;
    size_t kl, vl, pos = 0;
    while (snap_chunk_item_next(ch, &pos, &k, &kl, &v, &vl))
        if (lsm_batch_put(b, k, kl, v, vl, err) < 0)
            return -1;
    return 0;
}

/* Asks `from` for the chunk of copy session `sid` of `pid` that starts at `next_key`
 * (empty: the first, which opens the session there). */
static int snap_chunk_call(rcluster *c, uint64_t from, uint64_t pid, uint64_t sid,
                           const buf *next_key, rpc_call_cb cb, void *ctx)
{
    buf b;
    buf_init(&b, 0);
    buf_put_varint(&b, pid);
    buf_put_varint(&b, sid);
    buf_append(&b, next_key->data, next_key->len);
    strata_err err;
    int rc = b.failed ? -1
                      : rpc_call(c->rpc, from, MSG_SNAP_CHUNK, b.data, b.len, ATTEMPT_DEADLINE_MS,
                                 cb, ctx, &err);
    buf_free(&b);
    return rc;
}

static void install_request(install *in);

static void exit_mid_copy(void *arg, const strata_err *err)
{
    (void)err;
    fprintf(stderr,
            "stratad: partition %" PRIu64 ": a chunk of its copy written and flushed, and "
            "STRATA_TEST_EXIT_MID_COPY is set: exiting\n",
            ((install *)arg)->pid);
    _exit(86);
}

/* Writes the chunk in in->chunk to the engine; the last one also records the source's
 * applied index for the partition and clears the mark. */
static void install_apply_chunk(install *in)
{
    rcluster *c = in->c;
    snap_chunk ch;
    lsm_batch *b = lsm_batch_new();
    strata_err err = {0};
    int rc = b != NULL ? snap_chunk_to_batch(in->chunk, in->chunk_len, &ch, b, &err) : -1;
    if (rc == 0 && ch.applied < in->applied)
        rc = -1;
    uint8_t mk[13];
    lpart *lp = lpart_find(c, in->pid);
    partition_desc src = lp != NULL ? lp->desc : (partition_desc){0};
    bool done = rc == 0 && ch.done;
    if (rc == 0) {
        src.hash_lo = ch.hash_lo;
        src.hash_hi = ch.hash_hi;
    }
    split_range rg = range_of(&src);
    if (rc == 0 && lp == NULL)
        rc = -1;
    if (rc == 0 && done)
        rc = lsm_batch_delete(b, mk, install_mark_key(mk, in->pid), &err);
    /* The copy states the source's range as of its applied index: a split applied there
     * before the copy shrank it, and this replica now serves the same. */
    if (rc == 0 && done)
        rc = range_put(b, in->pid, &rg, &err);
    if (rc == 0)
        rc = lsm_write(c->engine, b, in->pid, done ? ch.applied : 0, &err);
    lsm_batch_free(b);
    if (rc < 0 && err.code == ERR_BUSY) {
        lsm_on_writable(c->engine, on_engine_writable, c); /* reconcile() retries */
        return;
    }
    if (rc < 0) {
        install_finish(in, -1);
        return;
    }
    in->applied = ch.applied;
    if (done && (lp->desc.hash_lo != ch.hash_lo || lp->desc.hash_hi != ch.hash_hi)) {
        fprintf(stderr,
                "stratad: partition %" PRIu64 " copied with its range as of the copy (split)\n",
                in->pid);
        lp->desc = src;
    }
    if (done)
        lp->split = SPLIT_NONE; /* the copy holds whatever a pending SPLIT would have made */
    buf_reset(&in->next_key);
    buf_append(&in->next_key, ch.next, ch.next_len);
    free(in->chunk);
    in->chunk = NULL;
    if (done) {
        in->in_flight = true;
        lsm_flush(c->engine, on_install_flushed, in); /* installed means durable */
        return;
    }
    if (c->test_exit_mid_copy) {
        in->in_flight = true;
        lsm_flush(c->engine, exit_mid_copy, in);
        return;
    }
    install_request(in);
}

static void on_chunk(void *ctx, int status, const strata_err *err, const uint8_t *data, size_t len)
{
    install *in = ctx;
    rcluster *c = in->c;
    (void)err;
    in->in_flight = false;
    if (in->dead || c->closing) {
        install_free(c, in);
        return;
    }
    if (status < 0 || (in->chunk = malloc(len ? len : 1)) == NULL) {
        install_finish(in, -1);
        return;
    }
    memcpy(in->chunk, data, len);
    in->chunk_len = len;
    install_apply_chunk(in);
}

static void install_request(install *in)
{
    in->in_flight =
        snap_chunk_call(in->c, in->from, in->pid, in->session, &in->next_key, on_chunk, in) == 0;
    if (!in->in_flight)
        install_finish(in, -1);
}

/* fsm.install: this replica needs the state of a compacted log. Marks the partition,
 * wipes its range and starts pulling it from `from`. */
static int fsm_install(void *ctx, uint64_t group, uint64_t index, uint64_t term, uint64_t from,
                       uint64_t token)
{
    rcluster *c = ctx;
    (void)term;
    lpart *lp = lpart_find(c, group);
    if (lp == NULL || group == META_GROUP || c->closing || from == c->self)
        return -1;
    install *in = calloc(1, sizeof *in);
    lsm_batch *b = lsm_batch_new();
    uint8_t lo[12], hi[12], mk[13];
    router_partition_bounds(&lp->desc, lo, hi);
    strata_err err;
    int rc = in != NULL && b != NULL ? 0 : -1;
    if (rc == 0)
        rc = lsm_batch_put(b, mk, install_mark_key(mk, group), "1", 1, &err);
    if (rc == 0)
        rc = lsm_batch_delete_range(b, lo, 12, hi, 12, &err);
    if (rc == 0)
        rc = lsm_write(c->engine, b, 0, 0, &err);
    lsm_batch_free(b);
    if (rc < 0) {
        free(in);
        return -1; /* the host asks again later */
    }
    lp->poisoned = true;
    lp->stats = (partition_stats){0, 0};
    *in = (install){.c = c, .pid = group, .token = token, .from = from, .applied = index};
    in->session = XXH3_64bits_withSeed(&token, sizeof token, now_ms(c) ^ (c->self << 32));
    buf_init(&in->next_key, 0);
    in->next = c->installs;
    c->installs = in;
    fprintf(stderr,
            "stratad: partition %" PRIu64
            " is behind a compacted log: copying it from node %" PRIu64 "\n",
            group, from);
    if (snap_chunk_call(c, from, in->pid, in->session, &in->next_key, on_chunk, in) < 0) {
        install_free(c, in);
        return -1;
    }
    in->in_flight = true;
    return 0;
}

/* Chunks refused by the engine, and copies of replicas that went away. */
static void installs_step(rcluster *c)
{
    for (install *in = c->installs, *next; in != NULL; in = next) {
        next = in->next;
        if (in->in_flight)
            continue;
        if (lpart_find(c, in->pid) == NULL || in->dead)
            install_free(c, in);
        else if (in->chunk != NULL)
            install_apply_chunk(in);
    }
}

static void session_free(rcluster *c, session *s)
{
    for (session **pp = &c->sessions; *pp != NULL; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    lsm_snapshot_release(c->engine, s->snap);
    free(s);
}

static session *session_open(rcluster *c, uint64_t peer, uint64_t pid, uint64_t id, strata_err *err)
{
    raft_host_group_stats st;
    lpart *lp = lpart_find(c, pid);
    if (lp == NULL || lp->poisoned || raft_host_group_info(c->host, pid, &st, NULL) < 0 ||
        st.failed || st.installing) {
        strata_err_set(err, ERR_UNAVAILABLE, "no complete replica of partition %" PRIu64 " here",
                       pid);
        return NULL;
    }
    session *s = calloc(1, sizeof *s);
    if (s == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    /* Taken in the same loop turn as the applied index: the two agree. */
    *s = (session){.peer = peer,
                   .pid = pid,
                   .id = id,
                   .applied = st.applied_index,
                   .desc = lp->desc,
                   .snap = lsm_snapshot_new(c->engine)};
    s->next = c->sessions;
    c->sessions = s;
    return s;
}

static void serve_snap_chunk(rcluster *c, uint64_t peer, const uint8_t *data, size_t len,
                             rpc_responder *resp)
{
    rd r;
    rd_init(&r, data, len);
    uint64_t pid = rd_varint(&r);
    uint64_t id = rd_varint(&r);
    size_t start_len = rd_left(&r);
    const uint8_t *start = rd_bytes(&r, start_len);
    lpart *lp = lpart_find(c, pid);
    if (r.failed || lp == NULL) {
        rpc_respond_error(resp, ERR_UNAVAILABLE, "no replica of that partition here");
        return;
    }
    session *s = c->sessions;
    while (s != NULL && !(s->peer == peer && s->pid == pid && s->id == id))
        s = s->next;
    strata_err err;
    if (s == NULL && start_len > 0) {
        rpc_respond_error(resp, ERR_NOT_FOUND, "snapshot session expired");
        return;
    }
    if (s == NULL && (s = session_open(c, peer, pid, id, &err)) == NULL) {
        rpc_respond_error(resp, err.code, err.msg);
        return;
    }
    s->last_used = now_ms(c);
    uint8_t lo[12], hi[12];
    router_partition_bounds(&s->desc, lo, hi);
    lsm_iter_options o = {
        .snapshot = s->snap, .lower = lo, .lower_len = 12, .upper = hi, .upper_len = 12};
    lsm_iter *it = lsm_iter_new(c->engine, &o, &err);
    if (it == NULL) {
        rpc_respond_error(resp, err.code, err.msg);
        return;
    }
    buf items, out, last;
    buf_init(&items, 0);
    buf_init(&out, 0);
    buf_init(&last, 0);
    if (start_len > 0)
        lsm_iter_seek(it, start, start_len);
    else
        lsm_iter_first(it);
    /* A copy: the iterator's key memory changes when it moves. */
    for (; lsm_iter_valid(it) && items.len < SNAP_CHUNK_BYTES; lsm_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = lsm_iter_key(it, &kl);
        const uint8_t *v = lsm_iter_value(it, &vl);
        snap_chunk_item_put(&items, k, kl, v, vl);
        buf_reset(&last);
        buf_append(&last, k, kl);
    }
    bool done = !lsm_iter_valid(it);
    int rc = lsm_iter_status(it, &err);
    /* The next chunk starts just after the last key: that key followed by a 0 byte. */
    if (!done)
        buf_put_u8(&last, 0);
    snap_chunk ch = {.applied = s->applied,
                     .hash_lo = s->desc.hash_lo,
                     .hash_hi = s->desc.hash_hi,
                     .done = done,
                     .next = last.data,
                     .next_len = done ? 0 : last.len,
                     .items = items.data,
                     .items_len = items.len};
    snap_chunk_encode(&ch, &out);
    lsm_iter_free(it);
    if (rc < 0)
        rpc_respond_error(resp, err.code, err.msg);
    else if (out.failed || items.failed || last.failed)
        rpc_respond_error(resp, ERR_NOMEM, "out of memory");
    else
        rpc_respond(resp, out.data, out.len, NULL);
    buf_free(&items);
    buf_free(&out);
    buf_free(&last);
    if (done || rc < 0)
        session_free(c, s);
}

/* How far a replica may compact its log: what its engine holds durably, but on a leader
 * not past the log of a reachable member that is behind, while that lag stays under
 * COMPACT_MAX_LAG entries. A member catching up (or copying a partition) is then not
 * overtaken by the next compaction, which would send it back for another copy, again and
 * again on a large partition. An unreachable member holds nothing back: it copies the
 * partition when it returns. */
static uint64_t compact_point(rcluster *c, uint64_t pid, uint64_t durable)
{
    raft_host_member m[META_MAX_MEMBERS + 2];
    size_t n;
    bool pending;
    if (!raft_host_is_leader(c->host, pid) ||
        raft_host_configuration(c->host, pid, m, META_MAX_MEMBERS + 2, &n, &pending, NULL) < 0)
        return durable;
    uint64_t upto = durable;
    for (size_t i = 0; i < n && i < META_MAX_MEMBERS + 2; i++) {
        uint64_t match = 0;
        if (m[i].id == c->self || !node_usable(c, m[i].id) ||
            raft_host_member_match(c->host, pid, m[i].id, &match, NULL) < 0)
            continue;
        if (match < upto && durable - match < COMPACT_MAX_LAG)
            upto = match;
    }
    return upto;
}

typedef struct {
    rcluster *c;
    uint64_t pid, index;
} split_flush;

static void on_child_flushed(void *arg, const strata_err *err)
{
    split_flush *f = arg;
    lpart *lp = lpart_find(f->c, f->pid);
    if (lp != NULL) {
        lp->child_flushing = false;
        /* The engine's durable index counts only entries it applied (writes, the no-op),
         * not barriers: a restart starts the state machine there, so the log must not
         * start above it. */
        if (err == NULL || err->code == ERR_NONE)
            lp->child_compact = lsm_durable_index(f->c->engine, f->pid);
    }
    free(f);
}

static void on_child_noop(void *data, const raft_host_outcome *out)
{
    split_flush *f = data;
    (void)out;
    lpart *lp = lpart_find(f->c, f->pid);
    if (lp != NULL)
        lp->child_noop = false;
    free(f);
}

/* The leader of a child that applied no entry past its first submits a no-op, so the
 * child gets an engine index above 1 to compact at even without writes. */
static void child_noop(rcluster *c, lpart *lp)
{
    if (lp->child_noop || lsm_applied_index(c->engine, lp->id) >= 2 ||
        !raft_host_is_leader(c->host, lp->id))
        return;
    split_flush *f = malloc(sizeof *f);
    if (f == NULL)
        return;
    *f = (split_flush){.c = c, .pid = lp->id};
    if (raft_host_submit(c->host, lp->id, pentry_child_noop, PENTRY_MARKER_LEN, on_child_noop, f,
                         NULL) < 0) {
        free(f);
        return;
    }
    lp->child_noop = true;
}

/*
 * A compaction pass, COMPACT_STEP_ENTRIES log entries per loop turn: each replica's log is
 * compacted up to what the engine holds durably (what its slow members still need kept),
 * a longer way in several steps. A check handle runs it after each poll, so a pass never
 * keeps the loop from sleeping; the tick's timer guarantees turns on an idle node. The
 * parts may change between turns: a replica skipped or visited twice costs nothing.
 */
static void compact_step(uv_check_t *h)
{
    rcluster *c = h->data;
    uint64_t budget = COMPACT_STEP_ENTRIES;
    while (budget > 0 && c->compact_next < c->n_parts) {
        lpart *lp = &c->parts[c->compact_next];
        raft_host_group_stats st;
        uint64_t upto = 0;
        if (!lp->poisoned && raft_host_group_info(c->host, lp->id, &st, NULL) == 0 &&
            !st.installing && !st.failed) {
            upto = compact_point(c, lp->id, lsm_durable_index(c->engine, lp->id));
            if (upto > st.applied_index || upto < st.snapshot_index + COMPACT_MIN_ENTRIES)
                upto = 0;
        }
        if (upto != 0 && upto - st.snapshot_index > budget) {
            /* Part of the way now; the same replica goes on at the next turn, unless this
             * step made no progress (the host refused the point): then the next one. */
            raft_host_group_stats after;
            raft_host_compact(c->host, lp->id, st.snapshot_index + budget, NULL);
            if (raft_host_group_info(c->host, lp->id, &after, NULL) < 0 ||
                after.snapshot_index <= st.snapshot_index)
                c->compact_next++;
            return;
        }
        if (upto != 0) {
            raft_host_compact(c->host, lp->id, upto, NULL);
            budget -= upto - st.snapshot_index;
        }
        c->compact_next++;
    }
    if (c->compact_next >= c->n_parts)
        uv_check_stop(h);
}

/* Periodic: starts a compaction pass (compact_step), ends idle sessions. */
static void snapshots_tick(rcluster *c)
{
    uint64_t now = now_ms(c);
    for (session *s = c->sessions, *next; s != NULL; s = next) {
        next = s->next;
        if (now - s->last_used > SNAP_SESSION_IDLE_MS)
            session_free(c, s);
    }
    /* A child's log does not rebuild its state (the parent's log made it): compacting it
     * whole early sends every replica that joins later a copy instead (a replica joins
     * only once every member has: join_allowed). The point must be above index 1 (Raft
     * sends a follower that lacks entry 1 entries from 1, not the snapshot; C-Raft 0.22
     * sends nothing at all for a point at 1), durable (the engine is flushed first), and
     * an index the engine applied: the no-op gives a child without writes one. */
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        raft_host_group_stats st;
        if (!lp->child || lp->poisoned || lp->child_flushing ||
            raft_host_group_info(c->host, lp->id, &st, NULL) < 0 || st.installing || st.failed ||
            st.snapshot_index >= 2)
            continue;
        child_noop(c, lp);
        if (lp->child_compact >= 2) {
            raft_host_compact_all(c->host, lp->id, lp->child_compact, NULL);
            lp->child_compact = 0;
        } else if (lsm_applied_index(c->engine, lp->id) >= 2) {
            split_flush *f = malloc(sizeof *f);
            if (f == NULL)
                continue;
            *f = (split_flush){.c = c, .pid = lp->id};
            lp->child_flushing = true;
            lsm_flush(c->engine, on_child_flushed, f);
        }
    }
    if (now - c->last_compact < COMPACT_EVERY_MS || uv_is_active((uv_handle_t *)&c->compactor))
        return;
    c->last_compact = now;
    c->compact_next = 0;
    uv_check_start(&c->compactor, compact_step);
}

/* ------------------------------------------------------------------ replica moves */

/*
 * Moving a replica (node drain): the meta leader's scheduler changes the map one step at
 * a time (ADD_LEARNER, PROMOTE once the learner caught up, REMOVE_REPLICA), and the
 * leader of each partition makes its Raft configuration follow the map, one change at a
 * time (add as learner, promote, remove). The map is the intent; Raft follows it.
 */

/* The single Raft configuration change that brings `cur` one step closer to the map's
 * members of `mp` (placement_config_next: add a missing member as learner, else promote,
 * else remove), in `out`, which has room for n + 1 members. Returns false when they
 * already agree, and for a configuration larger than any map names: changes only ever
 * add up to META_MAX_MEMBERS, so that one was never proposed. */
static bool next_config(const meta_partition *mp, const raft_host_member *cur, size_t n,
                        raft_host_member *out, size_t *out_n)
{
    if (n > META_MAX_MEMBERS)
        return false;
    meta_partition config = {.n_members = (uint32_t)n};
    for (size_t i = 0; i < n; i++)
        config.members[i] =
            (meta_replica){.node = cur[i].id, .role = cur[i].voter ? META_VOTER : META_LEARNER};
    if (!placement_config_next(mp, &config))
        return false;
    for (uint32_t i = 0; i < config.n_members; i++)
        out[i] = (raft_host_member){.id = config.members[i].node,
                                    .voter = config.members[i].role == META_VOTER};
    *out_n = config.n_members;
    return true;
}

typedef struct {
    rcluster *c;
    uint64_t pid;
} config_change;

static void on_config_changed(void *data, const raft_host_outcome *out)
{
    config_change *ch = data;
    if (out->code != ERR_NONE && !ch->c->closing)
        fprintf(stderr,
                "stratad: %s %" PRIu64 ": configuration change (entry %" PRIu64
                ") did not commit, leader now %" PRIu64 "; the leader retries\n",
                ch->pid == META_GROUP ? "group" : "partition", ch->pid, out->index,
                out->leader_hint);
    free(ch);
}

/* A change that stays uncommitted holds every later one of its partition back (a move
 * half done, a replica too few): said every CHANGE_PENDING_SAY_MS while it lasts. */
static void change_pending_note(rcluster *c, lpart *lp)
{
    uint64_t now = now_ms(c);
    if (lp->change_pending_since == 0) {
        lp->change_pending_since = lp->change_pending_said = now;
        return;
    }
    if (now - lp->change_pending_said < CHANGE_PENDING_SAY_MS)
        return;
    lp->change_pending_said = now;
    raft_host_group_stats st;
    if (raft_host_group_info(c->host, lp->id, &st, NULL) != 0)
        return;
    fprintf(stderr,
            "stratad: partition %" PRIu64 ": a configuration change has been pending for %" PRIu64
            " s (leader in term %" PRIu64 ", commit %" PRIu64 ", last %" PRIu64 ")\n",
            lp->id, (now - lp->change_pending_since) / 1000, st.term, st.commit_index,
            st.last_index);
}

/* Proposes `next` as the configuration of `group` (partition or meta group), which this
 * node leads; a refusal is said, ERR_BUSY only once in a while (a promoted replica has
 * yet to hear of it, and the change is tried again every tick). */
static void propose_config(rcluster *c, uint64_t group, const raft_host_member *next, size_t nn)
{
    char what[48];
    if (group == META_GROUP)
        snprintf(what, sizeof what, "meta group");
    else
        snprintf(what, sizeof what, "partition %" PRIu64, group);
    strata_err err;
    config_change *ch = malloc(sizeof *ch);
    if (ch == NULL)
        return; /* next tick */
    *ch = (config_change){c, group};
    if (raft_host_change(c->host, group, next, nn, on_config_changed, ch, &err) == 0) {
        fprintf(stderr, "stratad: %s: configuration change to %zu members\n", what, nn);
        return;
    }
    free(ch);
    uint64_t now = uv_now(c->loop);
    if (err.code != ERR_BUSY || now >= c->busy_change_logged_ms + 10000) {
        if (err.code == ERR_BUSY)
            c->busy_change_logged_ms = now;
        fprintf(stderr, "stratad: %s: configuration change refused: %s\n", what, err.msg);
    }
}

/* On partition leaders: Raft configurations follow the map. */
static void follow_map_configs(rcluster *c)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        const meta_partition *mp = meta_partition_find(c->meta, lp->id);
        raft_host_member cur[META_MAX_MEMBERS + 2], next[META_MAX_MEMBERS + 2];
        size_t n, nn;
        bool pending;
        if (mp == NULL || !raft_host_is_leader(c->host, lp->id) ||
            raft_host_configuration(c->host, lp->id, cur, META_MAX_MEMBERS + 2, &n, &pending,
                                    NULL) < 0) {
            lp->change_pending_since = 0;
            continue;
        }
        if (pending) {
            change_pending_note(c, lp);
            continue;
        }
        lp->change_pending_since = 0;
        if (next_config(mp, cur, n, next, &nn))
            propose_config(c, lp->id, next, nn);
    }
}

static void on_split_proposed(void *data, const raft_host_outcome *out)
{
    rcluster *c = data;
    if (out->code != ERR_NONE && !c->closing)
        fprintf(stderr, "stratad: a SPLIT entry did not commit; the leader proposes it again\n");
}

static void on_hint_proposed(void *data, const raft_host_outcome *out)
{
    (void)data;
    (void)out; /* lost: follow_map_splits sends another after SPLIT_HINT_WAIT_MS */
}

/* Whether the leader of `lp` may propose its SPLIT now: once a flush hint it appended
 * has been applied here and the flush it joined is done (the other replicas flush at
 * about the same time), or SPLIT_HINT_WAIT_MS after the hint regardless. Appends the
 * hint when none is under way. */
static bool split_hint_done(rcluster *c, lpart *lp, uint64_t now)
{
    if (lp->hint_at != 0) {
        bool flushed = lp->hint_flush != 0 && c->hint_flush_done >= lp->hint_flush;
        if (!flushed && now - lp->hint_at < SPLIT_HINT_WAIT_MS)
            return false;
        lp->hint_at = 0; /* the next SPLIT of this partition sends a hint of its own */
        return true;
    }
    lp->hint_flush = 0; /* set when the hint is applied here */
    if (raft_host_submit(c->host, lp->id, pentry_flush_hint, PENTRY_MARKER_LEN, on_hint_proposed,
                         NULL, NULL) < 0)
        return true; /* propose the SPLIT without one */
    lp->hint_at = now;
    return false;
}

/* On partition leaders: a local range wider than the map's means the map split the
 * partition; the leader carries that split into the partition's log, the highest child
 * first (the map may have split the range again meanwhile: the child that owns the top
 * of the local range is cut off first, then the next). The members are the group's
 * current configuration, carried in the entry. */
static void follow_map_splits(rcluster *c)
{
    uint64_t now = now_ms(c);
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        const meta_partition *mp = meta_partition_find(c->meta, lp->id);
        if (mp == NULL || lp->split != SPLIT_NONE || lp->poisoned ||
            mp->hash_hi >= lp->desc.hash_hi || now - lp->split_proposed < SPLIT_PROPOSE_MS ||
            !raft_host_is_leader(c->host, lp->id))
            continue;
        const meta_partition *ch = meta_partition_for_hash(c->meta, lp->desc.table_id,
                                                           lp->desc.hash_hi);
        if (ch == NULL || ch->id == lp->id || ch->hash_hi != lp->desc.hash_hi ||
            !split_hash_valid(lp->desc.hash_lo, lp->desc.hash_hi, ch->hash_lo))
            continue;
        raft_host_member cur[META_MAX_MEMBERS + 2];
        size_t n;
        bool pending;
        if (raft_host_configuration(c->host, lp->id, cur, META_MAX_MEMBERS + 2, &n, &pending,
                                    NULL) < 0 ||
            pending || n == 0 || n > SPLIT_MAX_MEMBERS)
            continue;
        if (!split_hint_done(c, lp, now))
            continue;
        split_cmd sc = {.child_id = ch->id, .split_hash = ch->hash_lo, .n_members = (uint32_t)n};
        for (size_t k = 0; k < n; k++)
            sc.members[k] = (split_member){.node = cur[k].id, .voter = cur[k].voter};
        buf b;
        buf_init(&b, 0);
        strata_err err;
        if (split_cmd_encode(&sc, &b, &err) == 0 &&
            raft_host_submit(c->host, lp->id, b.data, b.len, on_split_proposed, c, &err) == 0) {
            lp->split_proposed = now;
            fprintf(stderr,
                    "stratad: partition %" PRIu64 ": proposing its split at %016" PRIx64
                    " (child %" PRIu64 ")\n",
                    lp->id, ch->hash_lo, ch->id);
        }
        buf_free(&b);
    }
}

/* ------------------------------------------------------------------ automatic splits */

static void on_auto_split(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    (void)ctx;
    if (err != NULL)
        fprintf(stderr, "stratad: automatic split refused: %s\n", err->msg);
    else
        fprintf(stderr, "stratad: automatic split: %.*s\n", (int)len, (const char *)res);
}

/* Whether partition `lp`, led here, should split now, and where: for size once it holds
 * split_size_bytes, for heat once it has been hot split_heat_ms (capacity_hot_ms). The cut
 * divides its recent traffic evenly (split_weighted; the middle of the range when too
 * little was sampled). A partition whose traffic one partition key dominates is not
 * split, as no cut can divide a key: the hot key is reported (log here; metrics and
 * `strata table stats` through capacity). */
static bool auto_split_point(rcluster *c, lpart *lp, uint64_t now, uint64_t *at, const char **why)
{
    bool big = c->split_size_bytes != 0 && /* size_bytes is kept >= 0 */
               (uint64_t)lp->stats.size_bytes >= c->split_size_bytes;
    bool hot = c->split_heat_ms != 0 && capacity_hot_ms(c->cap, lp->id, now) >= c->split_heat_ms;
    if (!big && !hot)
        return false;
    uint64_t hash = 0;
    split_point point =
        capacity_split_point(c->cap, lp->id, lp->desc.hash_lo, lp->desc.hash_hi, &hash);
    if (point == SPLIT_POINT_HOT_KEY) {
        if (now - lp->hot_key_said >= HOT_KEY_SAY_MS) {
            lp->hot_key_said = now;
            fprintf(stderr,
                    "stratad: partition %" PRIu64 " is %s, but one partition key (hash %016" PRIx64
                    ") takes most of its traffic: a hot key, not split\n",
                    lp->id, hot ? "hot" : "large", hash);
        }
        return false;
    }
    strata_err err;
    if (point == SPLIT_POINT_FOUND)
        *at = hash;
    else if (split_middle(lp->desc.hash_lo, lp->desc.hash_hi, at, &err) < 0)
        return false;
    *why = hot ? "heat" : "size";
    return true;
}

/* Split for size and for heat: each partition leader watches the partitions it leads
 * and asks the meta group to split one (the path of `strata partition split`, so the
 * map's epoch check settles races), at most once per AUTO_SPLIT_RETRY_MS each. */
static void auto_splits(rcluster *c)
{
    if ((c->split_size_bytes == 0 && c->split_heat_ms == 0) || c->closing || c->host == NULL)
        return;
    uint64_t now = now_ms(c);
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        if (lp->split != SPLIT_NONE || lp->poisoned || now - lp->auto_split_at < AUTO_SPLIT_RETRY_MS ||
            lp->desc.hash_lo == lp->desc.hash_hi || !raft_host_is_leader(c->host, lp->id))
            continue;
        /* Only a replica whose range is the map's: otherwise a split is under way. */
        const meta_partition *mp = meta_partition_find(c->meta, lp->id);
        size_t n_table = 0;
        if (mp == NULL || mp->hash_lo != lp->desc.hash_lo || mp->hash_hi != lp->desc.hash_hi ||
            meta_table_partitions(c->meta, lp->desc.table_id, &n_table) == NULL ||
            n_table >= META_MAX_TABLE_PARTS)
            continue;
        uint64_t at;
        const char *why;
        if (!auto_split_point(c, lp, now, &at, &why))
            continue;
        lp->auto_split_at = now;
        strata_err err;
        fprintf(stderr, "stratad: partition %" PRIu64 ": split for %s at %016" PRIx64 "\n", lp->id,
                why, at);
        if (rcluster_split(c, lp->id, true, at, on_auto_split, c, &err) < 0)
            fprintf(stderr, "stratad: partition %" PRIu64 ": split for %s: %s\n", lp->id, why,
                    err.msg);
    }
}

/* Whether a replica joining `pid` empty may be fed by this node: a child's log from index 1
 * lacks the parent's data, so a replica of a child whose log still holds entry 1 (not yet
 * compacted whole) must not be the leader that feeds a joiner. A child's record without a
 * started replica (a restart in progress) counts as such a replica; no replica at all, or
 * one of a partition whose log rebuilds it (its first configuration, a copy), does not. A
 * replica that applied no SPLIT yet cannot lead the child against members that hold its
 * committed entries past 1 (Raft's election rule), so it needs no answer of its own. */
static bool replica_feeds_whole(rcluster *c, uint64_t pid)
{
    lpart *lp = lpart_find(c, pid);
    if (lp == NULL) {
        split_range rg;
        int have = range_read(c, pid, &rg);
        return have == 0 || (have == 1 && rg.n_members == 0);
    }
    raft_host_group_stats st;
    return !lp->child || (raft_host_group_info(c->host, pid, &st, NULL) == 0 &&
                          st.snapshot_index >= 2 && st.first_index > 2);
}

/* Whether this node runs a replica of `pid` whose log ends past a child's entry 1 and
 * never sends it: a partition that is not a child, or a child compacted whole. A
 * majority of voters like it keeps a replica that makes the child late (with only entry
 * 1 in its log) from ever leading it (join_allowed). */
static bool replica_holds_whole(rcluster *c, uint64_t pid)
{
    lpart *lp = lpart_find(c, pid);
    raft_host_group_stats st;
    return lp != NULL && raft_host_group_info(c->host, pid, &st, NULL) == 0 && !st.failed &&
           (!lp->child || (st.snapshot_index >= 2 && st.first_index > 2));
}

/* Whether a learner here may become a voter: it is fresh (local_replica_fresh) and
 * confirmed. An empty replica stays unconfirmed, neither voting nor campaigning, until its
 * log reached a leader's commit index (raft_host.c, group.unconfirmed); its applied index
 * says nothing of that, since a copy of the partition can put it past the log's end. A
 * voter that cannot vote makes the group's majority out of fewer replicas: promoted too
 * early under a lossy link, with the source of the move gone, two of four voters were
 * left and the partition never elected a leader again. */
static bool replica_promotable(const rcluster *c, uint64_t pid)
{
    raft_host_group_stats st;
    if (pid == META_GROUP) /* no lpart, no copies: its log, applied up to the commit */
        return c->voter && raft_host_group_info(c->host, pid, &st, NULL) == 0 && !st.failed &&
               st.leader != 0 && st.commit_index > 0 && st.applied_index >= st.commit_index &&
               !st.unconfirmed;
    return replica_fresh_stats(c, pid, 0, &st) && !st.unconfirmed;
}

/* Whether the configuration of `pid` this node holds is committed (no change pending)
 * and leaves `node` out. */
static bool config_leaves_out(const rcluster *c, uint64_t pid, uint64_t node)
{
    raft_host_member cur[META_MAX_MEMBERS + 2];
    size_t n;
    bool pending;
    if (raft_host_configuration(c->host, pid, cur, META_MAX_MEMBERS + 2, &n, &pending, NULL) < 0 ||
        pending || n > META_MAX_MEMBERS + 2)
        return false;
    for (size_t i = 0; i < n; i++)
        if (cur[i].id == node)
            return false;
    return true;
}

/* Whether `node` is out of the configuration of `pid` for good: this node leads the
 * partition and its committed configuration leaves `node` out. */
static bool node_released(const rcluster *c, uint64_t pid, uint64_t node)
{
    return node != 0 && raft_host_is_leader(c->host, pid) && config_leaves_out(c, pid, node);
}

/* Whether this node's replica of `pid` is a child that its SPLIT made here and that still
 * holds its first state: it applied nothing past entry 1 (its configuration), so no
 * leader of the child has committed anything yet, and its data is the parent's at the
 * split, the same on every replica the SPLIT made. `rg` receives its range record. */
static bool replica_first_state(rcluster *c, uint64_t pid, split_range *rg)
{
    lpart *lp = lpart_find(c, pid);
    raft_host_group_stats st;
    return lp != NULL && lp->child && !lp->poisoned && lp->split == SPLIT_NONE &&
           raft_host_group_info(c->host, pid, &st, NULL) == 0 && !st.failed && !st.installing &&
           st.applied_index == 1 && st.snapshot_index < 2 && range_read(c, pid, rg) == 1 &&
           rg->n_members > 0;
}

static bool record_lists(const split_range *rg, uint64_t node)
{
    for (uint32_t k = 0; k < rg->n_members; k++)
        if (rg->members[k].node == node)
            return true;
    return false;
}

/* Whether `node`, which asks, may copy this node's replica of `pid` as the child's first
 * state (seed_child): the replica is at it and its record `rg` lists `node`. */
static bool first_state_for(rcluster *c, uint64_t pid, uint64_t node, split_range *rg)
{
    return replica_first_state(c, pid, rg) && record_lists(rg, node);
}

/* MSG_GROUP_STATUS: varint partition -> u8 bits. STATUS_CAUGHT_UP: replica_promotable
 * (promotion). STATUS_FEEDS_WHOLE: replica_feeds_whole, STATUS_HOLDS_WHOLE:
 * replica_holds_whole (an empty replica's join, join_allowed). STATUS_RELEASED:
 * node_released for the caller (it may drop a replica the map took away).
 * STATUS_FIRST_STATE: first_state_for the caller (it may copy the child, seed_child),
 * followed by the replica's range record. */
static void serve_group_status(rcluster *c, uint64_t peer, const uint8_t *data, size_t len,
                               rpc_responder *resp)
{
    rd r;
    rd_init(&r, data, len);
    uint64_t pid = rd_varint(&r);
    uint8_t bits = 0;
    if (!r.failed && replica_promotable(c, pid))
        bits |= STATUS_CAUGHT_UP;
    if (!r.failed && replica_feeds_whole(c, pid))
        bits |= STATUS_FEEDS_WHOLE;
    if (!r.failed && replica_holds_whole(c, pid))
        bits |= STATUS_HOLDS_WHOLE;
    if (!r.failed && node_released(c, pid, peer))
        bits |= STATUS_RELEASED;
    split_range rg;
    buf out;
    buf_init(&out, 0);
    buf_put_u8(&out, bits);
    if (!r.failed && first_state_for(c, pid, peer, &rg)) {
        strata_err err;
        size_t at = out.len;
        if (split_range_encode(&rg, &out, &err) == 0)
            out.data[0] |= STATUS_FIRST_STATE;
        else
            out.len = at; /* the copy waits for the next question */
    }
    if (out.failed)
        rpc_respond_error(resp, ERR_NOMEM, "out of memory");
    else
        rpc_respond(resp, out.data, out.len, NULL);
    buf_free(&out);
}

static void on_sched_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    rcluster *c = ctx;
    (void)res;
    (void)len;
    c->sched_busy = false;
    if (err != NULL && !c->closing)
        fprintf(stderr, "stratad: scheduler step refused: %s\n", err->msg);
}

static void sched_propose(rcluster *c, meta_cmd *cmd)
{
    strata_err err;
    cmd->now_ms = wall_ms();
    if (propose_meta(c, cmd, on_sched_done, c, &err) == 0)
        c->sched_busy = true;
}

typedef struct {
    rcluster *c;
    uint64_t pid, node, epoch;
} promote_probe;

/* ---- the meta group's seats, on the meta leader (see "The meta group's seats") ---- */

static int transfer_begin(rcluster *c, uint64_t group, uint64_t target);

/* The seats' planner sees nodes as this meta leader does. */
static bool seat_reachable(void *ctx, uint64_t node)
{
    return node_usable(ctx, node);
}

static bool seat_staying(void *ctx, uint64_t node)
{
    return node_staying(ctx, node);
}

static placement_seat_view seat_view(rcluster *c)
{
    return (placement_seat_view){.self = c->self,
                                 .now_ms = wall_ms(),
                                 .replace_after_ms = c->replace_after_ms,
                                 .reachable = seat_reachable,
                                 .staying = seat_staying,
                                 .ctx = c};
}

static bool seat_leaving(rcluster *c, const meta_node *n)
{
    placement_seat_view v = seat_view(c);
    return placement_seat_leaving(&v, n);
}

/* Proposes a planned step, saying why in the log. */
static void seat_propose(rcluster *c, const placement_seat_step *st)
{
    const meta_node *nd = meta_node_find(c->meta, st->node);
    const char *state = nd != NULL ? meta_node_state_name(nd->state) : "unknown";
    switch (st->reason) {
    case PLACEMENT_SEAT_RECORD:
        break;
    case PLACEMENT_SEAT_DROP:
        fprintf(stderr, "stratad: meta group: node %" PRIu64 " is %s: no seat for it\n", st->node,
                state);
        break;
    case PLACEMENT_SEAT_GIVE_UP:
        fprintf(stderr, "stratad: meta group: node %" PRIu64 " (%s) gives its seat up\n", st->node,
                state);
        break;
    case PLACEMENT_SEAT_TAKE:
        fprintf(stderr, "stratad: meta group: node %" PRIu64 " takes a seat (a learner first)\n",
                st->node);
        break;
    case PLACEMENT_SEAT_SHRINK:
        fprintf(stderr,
                "stratad: meta group: node %" PRIu64 " is REMOVED and nobody can take "
                "its seat: the group shrinks\n",
                st->node);
        break;
    case PLACEMENT_SEAT_PROMOTE:
        fprintf(stderr, "stratad: meta group: node %" PRIu64 " caught up: promoting it\n",
                st->node);
        break;
    }
    meta_cmd cmd = {.kind = META_CMD_META_MEMBERS,
                    .epoch = st->epoch,
                    .seats = st->seats,
                    .parts = &st->next,
                    .n_parts = 1};
    sched_propose(c, &cmd);
}

/* The learner `node`, probed at `epoch`, caught up: it becomes a voter. */
static void seat_promote(rcluster *c, uint64_t node, uint64_t epoch)
{
    placement_seat_step st = placement_seat_promote(c->meta, node, epoch);
    if (st.action == PLACEMENT_SEAT_PROPOSE)
        seat_propose(c, &st);
}

/* This meta leader gives its seat up: leadership goes to a voter that caught up (one try
 * per SEAT_TRANSFER_MS). While the map names this node, to one whose node stays (not
 * drained: else the two would hand it back and forth); once the map no longer does (its
 * removal is the configuration change to make), to any voter the map keeps, drained or
 * not (with every node drained, none stays, and the change would wait for good). */
static void seat_hand_over(rcluster *c, const meta_partition *g)
{
    uint64_t now = now_ms(c);
    if (c->seat_transfer_at != 0 && now - c->seat_transfer_at < SEAT_TRANSFER_MS)
        return;
    bool named = meta_partition_has(g, c->self, NULL);
    for (uint32_t k = 0; k < g->n_members; k++) {
        uint64_t v = g->members[k].node;
        if (v == c->self || g->members[k].role != META_VOTER ||
            (named && seat_leaving(c, meta_node_find(c->meta, v))) || !node_staying(c, v) ||
            !raft_host_transfer_ready(c->host, META_GROUP, v, TRANSFER_MAX_LAG, NULL))
            continue;
        c->seat_transfer_at = now;
        if (transfer_begin(c, META_GROUP, v) == 0)
            fprintf(stderr,
                    "stratad: meta group: handing leadership to node %" PRIu64
                    " (this node gives its seat up)\n",
                    v);
        return;
    }
}

static bool probe_learner(rcluster *c, const meta_partition *mp, uint64_t node);

/* One step of the seats' moves (schedule), as placement_meta_seats plans it against the
 * group's committed configuration. True when it proposed or probed. */
static bool schedule_meta_seats(rcluster *c)
{
    raft_host_member cur[META_MAX_MEMBERS + 2];
    size_t n;
    bool pending;
    if (raft_host_configuration(c->host, META_GROUP, cur, META_MAX_MEMBERS + 2, &n, &pending,
                                NULL) < 0 ||
        pending || n > META_MAX_MEMBERS)
        return false;
    meta_partition config = {.id = META_GROUP, .n_members = (uint32_t)n};
    for (size_t i = 0; i < n; i++)
        config.members[i] =
            (meta_replica){.node = cur[i].id, .role = cur[i].voter ? META_VOTER : META_LEARNER};
    placement_seat_view v = seat_view(c);
    placement_seat_step st = placement_meta_seats(c->meta, &config, &v);
    switch (st.action) {
    case PLACEMENT_SEAT_WAIT:
        return false;
    case PLACEMENT_SEAT_HAND_OVER:
        seat_hand_over(c, meta_group(c->meta));
        return false;
    case PLACEMENT_SEAT_PROBE:
        return probe_learner(c, meta_group(c->meta), st.node);
    case PLACEMENT_SEAT_PROPOSE:
        seat_propose(c, &st);
        return true;
    }
    return false;
}

/* On the meta leader: the group's Raft configuration follows the map's seats, one change
 * at a time (as follow_map_configs for partitions). A change that would take this leader
 * out waits until it handed its leadership over. */
static void follow_meta_config(rcluster *c)
{
    const meta_partition *g = meta_group(c->meta);
    raft_host_member cur[META_MAX_MEMBERS + 2], next[META_MAX_MEMBERS + 2];
    size_t n, nn;
    bool pending;
    if (!c->voter || c->closing || g->n_members == 0 || !raft_host_is_leader(c->host, META_GROUP) ||
        raft_host_configuration(c->host, META_GROUP, cur, META_MAX_MEMBERS + 2, &n, &pending,
                                NULL) < 0 ||
        pending || n > META_MAX_MEMBERS || !next_config(g, cur, n, next, &nn))
        return;
    bool keeps_self = false;
    for (size_t i = 0; i < nn; i++)
        keeps_self = keeps_self || next[i].id == c->self;
    if (keeps_self)
        propose_config(c, META_GROUP, next, nn);
    else
        seat_hand_over(c, g);
}

static void on_group_status(void *ctx, int status, const strata_err *err, const uint8_t *data,
                            size_t len)
{
    promote_probe *p = ctx;
    rcluster *c = p->c;
    (void)err;
    c->sched_busy = false;
    if (status == 0 && len >= 1 && (data[0] & STATUS_CAUGHT_UP) && !c->closing &&
        p->pid == META_GROUP) {
        seat_promote(c, p->node, p->epoch);
    } else if (status == 0 && len >= 1 && (data[0] & STATUS_CAUGHT_UP) && !c->closing) {
        meta_cmd cmd = {.kind = META_CMD_PROMOTE,
                        .partition_id = p->pid,
                        .epoch = p->epoch,
                        .node_id = p->node};
        sched_propose(c, &cmd);
    }
    free(p);
}

/* The cluster's meta format rises once every node reads the next (Formats, meta.h). Not
 * before every member of the meta group registered: a cluster just formed, whose nodes
 * of an older version had yet to say so, would refuse them. */
static bool schedule_format(rcluster *c)
{
    uint32_t ready = meta_format_ready(c->meta);
    raft_host_member m[META_MAX_MEMBERS + 2]; /* as the other callers */
    size_t n;
    bool pending;
    if (ready <= meta_format(c->meta) ||
        raft_host_configuration(c->host, META_GROUP, m, sizeof m / sizeof m[0], &n, &pending,
                                NULL) < 0 ||
        n > sizeof m / sizeof m[0])
        return false;
    for (size_t i = 0; i < n; i++)
        if (meta_node_find(c->meta, m[i].id) == NULL)
            return false;
    meta_cmd cmd = {.kind = META_CMD_CLUSTER_FORMAT, .format = ready};
    sched_propose(c, &cmd);
    return true;
}

/* Node liveness as the meta leader sees it: an ACTIVE node unreachable for DOWN_AFTER_MS
 * -> DOWN; reachable again -> ACTIVE. A DRAINING node stays DRAINING while unreachable
 * (its replicas move off all the same, and its seat): marked DOWN, it would come back
 * ACTIVE and take replicas again, the operator's drain forgotten. Returns true when it
 * proposed something. */
static bool schedule_liveness(rcluster *c)
{
    uint64_t now = now_ms(c);
    for (size_t i = 0; i < meta_node_count(c->meta); i++) {
        const meta_node *n = meta_node_at(c->meta, i);
        peer_state *ps = peer_find(c, n->id);
        if (n->id == c->self || ps == NULL)
            continue;
        if (ps->connected)
            ps->down_since = 0;
        else if (ps->down_since == 0)
            ps->down_since = now;
        meta_node_state want = n->state;
        if (n->state == META_NODE_ACTIVE && !ps->connected && now - ps->down_since >= DOWN_AFTER_MS)
            want = META_NODE_DOWN;
        else if (n->state == META_NODE_DOWN && ps->connected)
            want = META_NODE_ACTIVE;
        if (want != n->state) {
            meta_cmd cmd = {.kind = META_CMD_NODE_STATE};
            cmd.node.id = n->id;
            cmd.node.state = want;
            if (meta_format(c->meta) >= 2) /* every node reads the base (see meta.h) */
                cmd.state_base = n->state;
            fprintf(stderr, "stratad: node %" PRIu64 " is %s\n", n->id,
                    want == META_NODE_DOWN ? "unreachable: marking it DOWN" : "back: ACTIVE");
            sched_propose(c, &cmd);
            return true;
        }
    }
    return false;
}

/* Starts the first step (ADD_LEARNER) of the first of `moves` whose partition is not
 * already moving. */
static bool start_move(rcluster *c, placement_move *moves, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const meta_partition *mp = meta_partition_find(c->meta, moves[i].partition_id);
        if (mp == NULL || mp->n_members != meta_partition_voters(mp) ||
            meta_partition_voters(mp) != META_REPLICAS)
            continue;
        meta_cmd cmd;
        strata_err err;
        if (placement_move_cmd(c->meta, &moves[i], 0, &cmd, &err) == 0) {
            fprintf(stderr,
                    "stratad: moving partition %" PRIu64 " from node %" PRIu64 " to node %" PRIu64
                    "\n",
                    moves[i].partition_id, moves[i].from, moves[i].to);
            sched_propose(c, &cmd);
            return true;
        }
    }
    return false;
}

/* Asks the learner's node whether its replica caught up; PROMOTE follows if it did. The
 * learner may be on this node (the meta leader's own): rpc has no connection to itself,
 * so that one is answered here. */
static bool probe_learner(rcluster *c, const meta_partition *mp, uint64_t node)
{
    if (node == c->self) {
        if (!replica_promotable(c, mp->id))
            return false;
        meta_cmd cmd = {.kind = META_CMD_PROMOTE,
                        .partition_id = mp->id,
                        .epoch = mp->epoch,
                        .node_id = node};
        sched_propose(c, &cmd);
        return true;
    }
    promote_probe *p = malloc(sizeof *p);
    if (p == NULL)
        return false;
    *p = (promote_probe){.c = c, .pid = mp->id, .node = node, .epoch = mp->epoch};
    buf b;
    buf_init(&b, 0);
    buf_put_varint(&b, mp->id);
    strata_err err;
    int rc = b.failed ? -1
                      : rpc_call(c->rpc, node, MSG_GROUP_STATUS, b.data, b.len, ATTEMPT_DEADLINE_MS,
                                 on_group_status, p, &err);
    buf_free(&b);
    if (rc < 0) {
        free(p);
        return false;
    }
    c->sched_busy = true;
    return true;
}

/* ---- leadership: the map's leader hints, and partition leaders following them ---- */

/*
 * Leader balance (issue #6: leaders spread evenly over nodes). The map's leader hint of a
 * partition is the intent, like its members: the meta leader's scheduler keeps the hints
 * on ACTIVE nodes and balanced (placement_leaders), and the leader of each partition hands
 * its leadership to the hinted voter (raft_host_transfer) when that is safe:
 *   - the partition is settled: the map has exactly its three voters and no learner, and
 *     the Raft configuration equals it with no change pending (never during a move);
 *   - this node has led for TRANSFER_SETTLE_MS (an election just happened: let the
 *     cluster settle instead of fighting it), one transfer at a time per node, at most one
 *     start per TRANSFER_GAP_MS, and a partition whose transfer failed backs off;
 *   - the target is ACTIVE in the map (never DOWN, DRAINING or REMOVED), connected to
 *     this node (a dead node is not DOWN in the map for DOWN_AFTER_MS), and caught up
 *     (match index within TRANSFER_MAX_LAG of the log: the core refuses writes until the
 *     target matches, so a lagging target would stall them).
 * The core gives up after an election timeout with this node still leading.
 */

/* Plans hint changes: with `balance` placement_leaders (evens counts out), else only
 * the hints that must move (placement_leaders_fix). */
static void lead_plan_make(rcluster *c, bool balance)
{
    strata_err err;
    free(c->lead_plan);
    c->lead_plan = NULL;
    c->lead_plan_n = c->lead_plan_next = 0;
    int rc = balance ? placement_leaders(c->meta, &c->lead_plan, &c->lead_plan_n, &err)
                     : placement_leaders_fix(c->meta, &c->lead_plan, &c->lead_plan_n, &err);
    if (rc != 0) {
        c->lead_plan = NULL;
        c->lead_plan_n = 0;
    }
}

/* Whether every ACTIVE node answers the meta leader: balancing waits while one does not
 * (it may be dying: no leaderships are planned onto it, and none are shuffled meanwhile). */
static bool active_nodes_connected(const rcluster *c)
{
    for (size_t i = 0; i < meta_node_count(c->meta); i++) {
        const meta_node *n = meta_node_at(c->meta, i);
        if (n->state == META_NODE_ACTIVE && !node_usable(c, n->id))
            return false;
    }
    return true;
}

/* Proposes the next hint change of the current plan (making one when it is used up:
 * `balance` false only fixes hints that must move). A plan is followed in order, as only
 * the whole of it is balanced; a step whose node can no longer lead drops the plan.
 * Returns true when it proposed something. */
static bool lead_plan_step(rcluster *c);

static bool schedule_leaders(rcluster *c, bool balance)
{
    uint64_t now = now_ms(c);
    if (c->lead_plan_next >= c->lead_plan_n) {
        if (balance && (now - c->lead_planned < LEADER_PLAN_MS || !active_nodes_connected(c)))
            return false;
        lead_plan_make(c, balance);
        if (balance)
            c->lead_planned = now;
    }
    return lead_plan_step(c);
}

/* Load of a partition for placement_leaders_load: this node's own figure when it leads
 * the partition, else the one its leader sent lately (pstats); a partition with neither
 * counts as `missing` (its leader changed, or is gone): no plan is made on half the
 * picture. */
typedef struct {
    rcluster *c;
    uint64_t since; /* figures heard before this are stale */
    size_t missing;
} load_view;

static uint64_t partition_load(void *ctx, uint64_t pid)
{
    load_view *v = ctx;
    const lpart *lp = lpart_find(v->c, pid);
    uint64_t load = 0;
    if (lp != NULL && lp->load_at >= v->since && raft_host_is_leader(v->c->host, pid))
        return lp->load;
    if (!pstats_get_load(v->c->heard, pid, v->since, &load))
        v->missing++;
    return load;
}

/* Whether a plan by load is due: LOAD_PLAN_MS after the last one (*planned, stamped now)
 * and every ACTIVE node answering; *v is then the view of fresh loads to plan with. */
static bool load_plan_due(rcluster *c, uint64_t *planned, load_view *v)
{
    uint64_t now = now_ms(c);
    if (now - *planned < LOAD_PLAN_MS || !active_nodes_connected(c))
        return false;
    *planned = now;
    *v = (load_view){.c = c, .since = now > 3 * STATS_PUSH_MS ? now - 3 * STATS_PUSH_MS : 0};
    return true;
}

/* When the count-balanced plan has nothing to do: hint changes that spread the load of
 * leaders (placement_leaders_load, LOAD_* above), proposed through the same plan as
 * schedule_leaders. Returns true when it proposed something. */
static bool schedule_leaders_load(rcluster *c)
{
    load_view v;
    if (c->lead_plan_next < c->lead_plan_n || !load_plan_due(c, &c->load_planned, &v))
        return false;
    placement_load_opts o = {
        .min_gap = LOAD_MIN_GAP, .gap_percent = LOAD_GAP_PERCENT, .max_changes = LOAD_MAX_CHANGES};
    placement_leader *plan;
    size_t n;
    strata_err err;
    if (placement_leaders_load(c->meta, partition_load, &v, &o, &plan, &n, &err) != 0)
        return false;
    if (v.missing > 0 || n == 0) {
        free(plan);
        return false;
    }
    fprintf(stderr, "stratad: leader load plan: %zu hint change(s)\n", n);
    free(c->lead_plan);
    c->lead_plan = plan;
    c->lead_plan_n = n;
    c->lead_plan_next = 0;
    return lead_plan_step(c);
}

/* Proposes the next change of the current plan; see schedule_leaders. */
static bool lead_plan_step(rcluster *c)
{
    while (c->lead_plan_next < c->lead_plan_n) {
        placement_leader *pl = &c->lead_plan[c->lead_plan_next++];
        const meta_partition *mp = meta_partition_find(c->meta, pl->partition_id);
        const meta_node *nd = meta_node_find(c->meta, pl->leader);
        meta_role role;
        if (mp == NULL || nd == NULL || nd->state != META_NODE_ACTIVE ||
            !meta_partition_has(mp, pl->leader, &role) || role != META_VOTER) {
            c->lead_plan_next = c->lead_plan_n; /* the map moved on: plan again */
            return false;
        }
        if (mp->leader_hint == pl->leader)
            continue;
        meta_cmd cmd = {.kind = META_CMD_SET_LEADER, .partition_id = mp->id, .node_id = pl->leader};
        fprintf(stderr, "stratad: partition %" PRIu64 ": leader hint %" PRIu64 " -> %" PRIu64 "\n",
                mp->id, mp->leader_hint, pl->leader);
        strata_err err;
        cmd.now_ms = wall_ms();
        if (propose_meta(c, &cmd, on_sched_done, c, &err) == 0)
            c->sched_busy = true;
        return true;
    }
    return false;
}

typedef struct {
    rcluster *c;
    uint64_t pid, target;
} transfer_req;

static void on_transfer_done(void *data, const raft_host_outcome *out)
{
    transfer_req *t = data;
    rcluster *c = t->c;
    c->transfers--;
    lpart *lp = lpart_find(c, t->pid);
    if (out->code == ERR_NONE) {
        if (lp != NULL)
            lp->transfer_failures = 0;
    } else if (lp != NULL && !c->closing) {
        unsigned f = lp->transfer_failures < 5 ? lp->transfer_failures : 5;
        uint64_t backoff = (uint64_t)TRANSFER_BACKOFF_MS << f;
        lp->transfer_failures++;
        lp->transfer_retry_at =
            now_ms(c) + (backoff < TRANSFER_BACKOFF_MAX_MS ? backoff : TRANSFER_BACKOFF_MAX_MS);
        fprintf(stderr,
                "stratad: partition %" PRIu64 ": leadership did not move to node %" PRIu64
                "; retrying later\n",
                t->pid, t->target);
    }
    free(t);
}

/* Whether the map and the Raft configuration of lp's partition agree, with nothing
 * moving: three voters, no learner, no change pending. */
static bool partition_settled(rcluster *c, const lpart *lp, const meta_partition *mp)
{
    raft_host_member cur[META_MAX_MEMBERS + 2], next[META_MAX_MEMBERS + 2];
    size_t n, nn;
    bool pending;
    return mp->n_members == META_REPLICAS && meta_partition_voters(mp) == META_REPLICAS &&
           raft_host_configuration(c->host, lp->id, cur, META_MAX_MEMBERS + 2, &n, &pending,
                                   NULL) == 0 &&
           n == META_REPLICAS && !pending && !next_config(mp, cur, n, next, &nn);
}

/* The node this leader should hand lp's leadership to now, 0 if none (see above). */
static uint64_t transfer_target(rcluster *c, const lpart *lp, uint64_t now)
{
    const meta_partition *mp = meta_partition_find(c->meta, lp->id);
    if (mp == NULL || mp->leader_hint == 0 || mp->leader_hint == c->self ||
        now - lp->lead_since < TRANSFER_SETTLE_MS || now < lp->transfer_retry_at)
        return 0;
    const meta_node *nd = meta_node_find(c->meta, mp->leader_hint);
    if (nd == NULL || nd->state != META_NODE_ACTIVE || !node_staying(c, nd->id) ||
        !partition_settled(c, lp, mp) ||
        !raft_host_transfer_ready(c->host, lp->id, nd->id, TRANSFER_MAX_LAG, NULL))
        return 0;
    return nd->id;
}

/* Starts handing `group` to `target` (on_transfer_done ends it); -1 when it cannot start
 * now (out of memory, or raft_host_transfer's rules: a change or transfer in progress). */
static int transfer_begin(rcluster *c, uint64_t group, uint64_t target)
{
    transfer_req *t = malloc(sizeof *t);
    if (t == NULL)
        return -1;
    *t = (transfer_req){.c = c, .pid = group, .target = target};
    strata_err err;
    c->transfers++; /* before the call: its callback may fire inside it */
    if (raft_host_transfer(c->host, group, target, on_transfer_done, t, &err) < 0) {
        c->transfers--;
        free(t);
        return -1;
    }
    return 0;
}

static void start_transfer(rcluster *c, lpart *lp, uint64_t target, uint64_t now)
{
    c->last_transfer = now;
    if (transfer_begin(c, lp->id, target) < 0) {
        lp->transfer_retry_at = now + TRANSFER_BACKOFF_MS;
        return;
    }
    fprintf(stderr, "stratad: partition %" PRIu64 ": handing leadership to node %" PRIu64 "\n",
            lp->id, target);
}

/*
 * Graceful stop (router_hand_off). Every group led here goes to a caught-up voter on
 * another connected node (hand_off_target): a lagging target holds writes back until it
 * matches (the core refuses new entries during a transfer), and the transfer gives up
 * after an election timeout if it never does. Several transfers run at once, unlike
 * leader balancing's one at a time: the node is leaving, and each partition's writes wait
 * only for its own.
 */
/* The voters of `group` on other connected nodes that are not stopping too, into out[]
 * (cap entries); their count. None while a configuration change is pending (a transfer
 * would be refused). */
static size_t other_voters(rcluster *c, uint64_t group, uint64_t *out, size_t cap)
{
    raft_host_member m[META_MAX_MEMBERS + 2];
    size_t n, k = 0;
    bool pending;
    if (raft_host_configuration(c->host, group, m, META_MAX_MEMBERS + 2, &n, &pending, NULL) != 0 ||
        pending)
        return 0;
    for (size_t i = 0; i < n && i < META_MAX_MEMBERS + 2 && k < cap; i++)
        if (m[i].id != c->self && m[i].voter && node_staying(c, m[i].id))
            out[k++] = m[i].id;
    return k;
}

/* How many of this node's groups each other node leads or is being handed (as known
 * here): hand-off targets are spread by it. */
typedef struct {
    uint64_t node;
    size_t groups;
} lead_count;

typedef struct {
    lead_count *v;
    size_t n, cap;
} lead_tally;

static void tally_add(lead_tally *t, uint64_t node)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].node == node) {
            t->v[i].groups++;
            return;
        }
    if (t->n < t->cap)
        t->v[t->n++] = (lead_count){node, 1};
}

static size_t tally_get(const lead_tally *t, uint64_t node)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].node == node)
            return t->v[i].groups;
    return 0;
}

/* The voter to hand `group` to: of those caught up (within TRANSFER_MAX_LAG entries, so
 * writes hardly wait), the one leading fewest of this node's groups, so that a stopping
 * node's partitions spread over the others rather than all landing on one; if none is
 * caught up, the most caught up. 0 if none at all. */
static uint64_t hand_off_target(rcluster *c, uint64_t group, lead_tally *tally)
{
    uint64_t v[META_MAX_MEMBERS + 2];
    size_t n = other_voters(c, group, v, META_MAX_MEMBERS + 2);
    uint64_t best = 0, best_match = 0, spread = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t match;
        if (raft_host_member_match(c->host, group, v[i], &match, NULL) != 0)
            continue;
        if (best == 0 || match > best_match) {
            best = v[i];
            best_match = match;
        }
        if (raft_host_transfer_ready(c->host, group, v[i], TRANSFER_MAX_LAG, NULL) &&
            (spread == 0 || tally_get(tally, v[i]) < tally_get(tally, spread)))
            spread = v[i];
    }
    uint64_t target = spread != 0 ? spread : best;
    if (target != 0)
        tally_add(tally, target);
    return target;
}

/* 1 while `group`, led here since the hand-off began (*handing), is being handed over:
 * led here still, or no longer but its new leader not yet heard from (it may not have won
 * its election yet). 0 once another node is known to lead it (*handed counts it), or when
 * nobody can take it: no voter of it on another connected node that stays (when the whole
 * cluster stops, the others go too). */
static size_t hand_off_group(rcluster *c, uint64_t group, bool *handing, size_t *handed,
                             lead_tally *tally)
{
    if (!raft_host_is_leader(c->host, group)) {
        uint64_t leader = raft_host_leader(c->host, group);
        bool heard = leader != 0 && leader != c->self;
        *handed += *handing && heard;
        uint64_t v[META_MAX_MEMBERS + 2];
        return *handing && !heard && other_voters(c, group, v, META_MAX_MEMBERS + 2) > 0;
    }
    *handing = true;
    if (raft_host_transferee(c->host, group) != 0)
        return 1;
    uint64_t target = hand_off_target(c, group, tally);
    /* No target, or a change in progress, say: its followers elect after the stop. */
    return target != 0 && transfer_begin(c, group, target) == 0;
}

/* Tells every peer this node is stopping, so that none hands it a leadership (when
 * several nodes stop at once they would otherwise pass their groups among themselves
 * until the hand-off's time ran out) or sends it eventual reads. */
static void say_leaving(rcluster *c, uint64_t peer)
{
    strata_err err;
    if (rpc_send(c->rpc, peer, MSG_LEAVING, NULL, 0, &err) < 0)
        fprintf(stderr, "stratad: cannot tell node %" PRIu64 " this node is stopping: %s\n", peer,
                err.msg);
}

size_t rcluster_hand_off(rcluster *c, size_t *handed)
{
    if (!c->handing_off)
        for (size_t i = 0; i < c->n_peers; i++)
            say_leaving(c, c->peers[i].id);
    c->handing_off = true;
    /* Out of memory: no tally, the targets are then the most caught up. */
    lead_tally tally = {.cap = c->n_parts + 1};
    tally.v = malloc(tally.cap * sizeof *tally.v);
    if (tally.v == NULL)
        tally.cap = 0;
    for (size_t i = 0; i < c->n_parts; i++) {
        uint64_t to = raft_host_transferee(c->host, c->parts[i].id);
        uint64_t leader = to != 0 ? to : raft_host_leader(c->host, c->parts[i].id);
        if (leader != 0 && leader != c->self)
            tally_add(&tally, leader);
    }
    size_t n = 0;
    size_t left = c->voter ? hand_off_group(c, META_GROUP, &c->meta_handing, &n, &tally) : 0;
    for (size_t i = 0; i < c->n_parts; i++)
        left += hand_off_group(c, c->parts[i].id, &c->parts[i].handing_off, &n, &tally);
    free(tally.v);
    if (handed != NULL)
        *handed = n;
    return left;
}

/* On partition leaders: leadership follows the map's leader hint (see above). */
static void follow_map_leaders(rcluster *c)
{
    uint64_t now = now_ms(c);
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        raft_host_group_stats st;
        if (raft_host_group_info(c->host, lp->id, &st, NULL) != 0 || st.failed ||
            st.state != 3 /* RAFT_LEADER */) {
            lp->lead_term = 0;
            continue;
        }
        if (st.term != lp->lead_term) {
            lp->lead_term = st.term;
            lp->lead_since = now;
            lp->transfer_failures = 0;
            lp->transfer_retry_at = 0;
        }
        if (c->transfers > 0 || now - c->last_transfer < TRANSFER_GAP_MS || c->closing ||
            c->handing_off)
            continue;
        uint64_t target = transfer_target(c, lp, now);
        if (target != 0)
            start_transfer(c, lp, target, now);
    }
}

/*
 * Replica balance by load (issue #7): when nothing else is to do, placement_rebalance_load
 * plans moves within an AZ off its most loaded node (a single move, or a swap of a hot
 * replica for a cooler one when counts are even) and the scheduler carries them out one
 * at a time, as the other moves: ADD_LEARNER, PROMOTE, REMOVE_REPLICA. Two things differ:
 *   - the removal takes the planned source (rload_cur.from), not the busiest voter: in
 *     the first move of a swap the receiver holds one replica more than the source, so
 *     the busiest voter would be the new replica;
 *   - the second move of a swap starts before count balancing runs: after the first one
 *     the two counts are two apart and placement_rebalance would move a replica back.
 * Every move is checked again against the map before it starts (placement_move_ready)
 * and a plan is dropped at its first move that cannot start or did not complete. The plan
 * lives only on the meta leader: a new meta leader starts without it, so a move in flight
 * then loses its preferred source (the removal falls back to the busiest voter: maybe the
 * new replica, a wasted copy) and half a swap may be evened out by count balancing. Both
 * are safe (every removal keeps the rules: three voters in three AZs, distinct hosts),
 * only not load-wise; the next plan by load sees the result.
 */

/* Forgets the plan (this node no longer leads the meta group). */
static void rload_forget(rcluster *c)
{
    free(c->rload_plan);
    c->rload_plan = NULL;
    c->rload_n = c->rload_next = 0;
    c->rload_moving = false;
}

/* The plan is over (done, or dropped at move rload_next - 1): the settle time starts. */
static void rload_end(rcluster *c)
{
    c->rload_next = c->rload_n;
    c->rload_ended = now_ms(c) ? now_ms(c) : 1; /* 0 means "never" */
}

/* Follows the move in flight: once its partition settles, the move is over; a move that
 * did not complete drops the rest of the plan (half a swap must not be completed the
 * other way round). The plan's end starts the settle time. */
static void rload_track(rcluster *c)
{
    if (!c->rload_moving)
        return;
    placement_move_state st = placement_move_progress(c->meta, &c->rload_cur);
    if (st == PLACEMENT_MOVE_RUNNING)
        return;
    c->rload_moving = false;
    if (st == PLACEMENT_MOVE_UNDONE)
        fprintf(stderr,
                "stratad: partition %" PRIu64 ": the move by load did not complete; plan dropped\n",
                c->rload_cur.partition_id);
    if (st == PLACEMENT_MOVE_UNDONE || c->rload_next >= c->rload_n)
        rload_end(c);
}

/* Starts the plan's next move (ADD_LEARNER) when none is in flight; a move the map no
 * longer allows drops the plan. Returns true when it proposed something. */
static bool rload_continue(rcluster *c)
{
    if (c->rload_moving || c->rload_next >= c->rload_n)
        return false;
    placement_move *m = &c->rload_plan[c->rload_next++];
    meta_cmd cmd;
    strata_err err;
    if (!placement_move_ready(c->meta, m) || placement_move_cmd(c->meta, m, 0, &cmd, &err) != 0) {
        fprintf(stderr,
                "stratad: partition %" PRIu64 ": the move by load no longer fits the map; "
                "plan dropped\n",
                m->partition_id);
        rload_end(c);
        return false;
    }
    fprintf(stderr,
            "stratad: moving partition %" PRIu64 " from node %" PRIu64 " to node %" PRIu64
            " (load)\n",
            m->partition_id, m->from, m->to);
    c->rload_cur = *m;
    c->rload_moving = true;
    sched_propose(c, &cmd);
    return true;
}

/* Plans replica moves by load (LOAD_PLAN_MS apart, LOAD_MOVE_SETTLE_MS after the last
 * plan ended, every ACTIVE node answering, fresh loads for every partition) and starts the
 * first. Returns true when it proposed something. */
static bool schedule_replicas_load(rcluster *c)
{
    load_view v;
    if (c->rload_moving || c->rload_next < c->rload_n || c->lead_plan_next < c->lead_plan_n ||
        (c->rload_ended != 0 && now_ms(c) - c->rload_ended < LOAD_MOVE_SETTLE_MS) ||
        !load_plan_due(c, &c->rload_planned, &v))
        return false;
    placement_load_opts o = {
        .min_gap = LOAD_MIN_GAP, .gap_percent = LOAD_GAP_PERCENT, .max_changes = LOAD_MAX_MOVES};
    placement_move *plan;
    size_t n;
    strata_err err;
    if (placement_rebalance_load(c->meta, partition_load, &v, &o, &plan, &n, &err) != 0)
        return false;
    if (v.missing > 0 || n == 0) {
        free(plan);
        return false;
    }
    fprintf(stderr, "stratad: replica load plan: %zu move(s)\n", n);
    free(c->rload_plan);
    c->rload_plan = plan;
    c->rload_n = n;
    c->rload_next = 0;
    return rload_continue(c);
}

/* A learner on a node that is no longer ACTIVE (drained, or marked DOWN, after the learner
 * was added) can never be promoted (PROMOTE takes ACTIVE nodes only), and no other move
 * starts on a partition with a learner: the move is abandoned (the learner removed), else
 * the partition would keep it for ever and a drain would never end. */
static bool abandon_move(rcluster *c, const meta_partition *mp, uint64_t learner)
{
    const meta_node *nd = meta_node_find(c->meta, learner);
    if (nd != NULL && nd->state == META_NODE_ACTIVE)
        return false;
    fprintf(stderr,
            "stratad: partition %" PRIu64 ": node %" PRIu64 " is %s: the move to it is abandoned\n",
            mp->id, learner, nd != NULL ? meta_node_state_name(nd->state) : "unknown");
    meta_cmd cmd = {.kind = META_CMD_REMOVE_REPLICA,
                    .partition_id = mp->id,
                    .epoch = mp->epoch,
                    .node_id = learner};
    sched_propose(c, &cmd);
    return true;
}

/* One step of the meta leader's scheduler, one meta command (or probe) at a time: node
 * liveness, then leader hints off nodes that cannot lead (before their replicas move, so
 * a draining node hands its leaderships over), then moves in progress (promote a
 * caught-up learner, remove the extra voter), then new moves: off draining nodes, off
 * nodes down past replace_after, the rest of a plan by load, and toward even replica
 * counts (a node that joined); last, when nothing else is to do, balanced leader hints
 * (counts first, then load), then replicas by load. */
static void schedule(rcluster *c)
{
    if (!c->voter || c->closing)
        return;
    if (!raft_host_is_leader(c->host, META_GROUP)) {
        if (c->rload_n > 0 || c->rload_moving)
            rload_forget(c);
        return;
    }
    if (c->sched_busy)
        return;
    rload_track(c);
    if (schedule_format(c) || schedule_liveness(c) || schedule_meta_seats(c))
        return;
    if (schedule_leaders(c, false))
        return;
    for (size_t i = 0; i < meta_partition_count(c->meta); i++) {
        const meta_partition *mp = meta_partition_at(c->meta, i);
        for (uint32_t k = 0; k < mp->n_members; k++) {
            if (mp->members[k].role != META_LEARNER)
                continue;
            if (abandon_move(c, mp, mp->members[k].node))
                return;
            if (node_usable(c, mp->members[k].node) && probe_learner(c, mp, mp->members[k].node))
                return;
        }
        if (meta_partition_voters(mp) > META_REPLICAS &&
            mp->n_members == meta_partition_voters(mp)) {
            uint64_t victim = placement_removal(
                c->meta, mp,
                c->rload_moving && c->rload_cur.partition_id == mp->id ? c->rload_cur.from : 0);
            if (victim != 0) {
                meta_cmd cmd = {.kind = META_CMD_REMOVE_REPLICA,
                                .partition_id = mp->id,
                                .epoch = mp->epoch,
                                .node_id = victim};
                sched_propose(c, &cmd);
                return;
            }
        }
    }
    placement_move *moves = NULL;
    size_t n = 0;
    strata_err err;
    for (size_t i = 0; i < meta_node_count(c->meta); i++) {
        const meta_node *nd = meta_node_at(c->meta, i);
        if (nd->state != META_NODE_DRAINING ||
            placement_drain(c->meta, nd->id, &moves, &n, &err) < 0)
            continue;
        bool started = start_move(c, moves, n);
        free(moves);
        if (started)
            return;
    }
    if (placement_replace_down(c->meta, wall_ms(), c->replace_after_ms, &moves, &n, &err) == 0) {
        bool started = start_move(c, moves, n);
        free(moves);
        if (started)
            return;
    }
    if (rload_continue(c)) /* before count balancing: see "Replica balance by load" */
        return;
    if (placement_rebalance(c->meta, &moves, &n, &err) == 0) {
        bool started = start_move(c, moves, n);
        free(moves);
        if (started)
            return;
    }
    if (schedule_leaders(c, true) || schedule_leaders_load(c))
        return;
    schedule_replicas_load(c);
}

/* ------------------------------------------------------------------ transport */

static int transport_send(void *ctx, uint64_t to, uint64_t group, const void *msg, size_t len)
{
    rcluster *c = ctx;
    if (c->rpc == NULL)
        return 0;
    buf_reset(&c->scratch);
    buf_put_u64be(&c->scratch, group);
    buf_append(&c->scratch, msg, len);
    if (!c->scratch.failed)
        rpc_send(c->rpc, to, MSG_RAFT, c->scratch.data, c->scratch.len, NULL);
    return 0; /* best effort: Raft retries */
}

/* ------------------------------------------------------------------ serving peers */

static void respond_retry(rpc_responder *resp, uint64_t leader, const char *why)
{
    char msg[128];
    snprintf(msg, sizeof msg, RETRY_PREFIX "leader=%" PRIu64 " %s", leader, why);
    rpc_respond_error(resp, ERR_UNAVAILABLE, msg);
}

static void on_served_write(void *data, const raft_host_outcome *out)
{
    rpc_responder *resp = data;
    if (out->code == ERR_NONE && is_moved(out->result, out->result_len)) {
        respond_retry(resp, 0, "the key moved to another partition (split); not applied");
        return;
    }
    if (out->code == ERR_NONE) {
        buf b;
        buf_init(&b, 10 + out->result_len);
        buf_put_varint(&b, out->index);
        buf_append(&b, out->result, out->result_len);
        rpc_respond(resp, b.data, b.len, NULL);
        buf_free(&b);
    } else if (out->code == ERR_UNAVAILABLE && out->not_applied) {
        respond_retry(resp, out->leader_hint, "leadership changed; not applied");
    } else {
        rpc_respond_error(resp, out->code == ERR_UNAVAILABLE ? ERR_UNAVAILABLE : ERR_INTERNAL,
                          "leadership lost or replica failed; outcome unknown");
    }
}

static void serve_write(rcluster *c, const uint8_t *data, size_t len, rpc_responder *resp)
{
    rd r;
    rd_init(&r, data, len);
    uint64_t pid = rd_varint(&r);
    uint64_t epoch = rd_varint(&r);
    if (r.failed || pid == META_GROUP) {
        rpc_respond_error(resp, ERR_CORRUPT, "malformed partition write");
        return;
    }
    const uint8_t *entry = data + (len - rd_left(&r));
    if (pentry_kind_of(entry, rd_left(&r)) == PENTRY_NEWER) {
        /* A newer router's entry that this leader could not apply: appending it would stop
         * every replica of an older binary (stop_on_newer), this one first. */
        rpc_respond_error(resp, ERR_NEWER, "this leader's binary cannot read the entry");
        return;
    }
    const meta_partition *mp = meta_partition_find(c->meta, pid);
    if (mp != NULL && epoch < mp->epoch) {
        respond_retry(resp, 0, "stale partition epoch");
        return;
    }
    strata_err err;
    lpart *lp = lpart_find(c, pid);
    if (raft_host_is_leader(c->host, pid) && lp != NULL &&
        cap_admit(c, lp->desc.table_id, pid, CAP_WRITE, router_write_reserve(rd_left(&r)), &err) <
            0) {
        rpc_respond_error(resp, err.code, err.msg); /* throttled: nothing was proposed */
        return;
    }
    if (!raft_host_is_leader(c->host, pid) ||
        raft_host_submit(c->host, pid, entry, rd_left(&r), on_served_write, resp, &err) < 0)
        respond_retry(resp, raft_host_leader(c->host, pid), "not the leader");
}

typedef struct {
    rcluster *c;
    rpc_responder *resp;
    uint64_t pid;
    uint64_t exp_lo, exp_hi; /* the range the caller planned against */
    arena arena;
    partition_read_req req;
} served_read;

/* The request names this partition's table and that table's key schema: a request
 * built against another schema must not reach partition_read. */
static bool read_matches_table(const rcluster *c, const lpart *lp, const partition_read_req *req)
{
    const table_info *t = catalog_find_id(c->cat, lp->desc.table_id);
    if (t == NULL || req->table_id != lp->desc.table_id)
        return false;
    partition_key_schema ks;
    catalog_key_schema(&t->schema, &ks);
    return ks.hash_type == req->ks.hash_type && ks.range_type == req->ks.range_type &&
           ks.hash_name_len == req->ks.hash_name_len &&
           memcmp(ks.hash_name, req->ks.hash_name, ks.hash_name_len) == 0 &&
           ks.range_name_len == req->ks.range_name_len &&
           (ks.range_name_len == 0 ||
            memcmp(ks.range_name, req->ks.range_name, ks.range_name_len) == 0);
}

static void served_read_run(served_read *s)
{
    lpart *lp = lpart_find(s->c, s->pid);
    partition_read_res res;
    strata_err err;
    buf out;
    buf_init(&out, 0);
    if (lp == NULL) {
        respond_retry(s->resp, 0, "no replica here");
    } else if (!read_fits(&lp->desc, &s->req, s->exp_lo, s->exp_hi)) {
        respond_retry(s->resp, 0, "the replica's range differs (split)");
    } else if (!read_matches_table(s->c, lp, &s->req)) {
        rpc_respond_error(s->resp, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    } else if (cap_admit(s->c, lp->desc.table_id, lp->id, CAP_READ, router_read_reserve(&s->req),
                         &err) < 0 ||
               partition_read(s->c->engine, &lp->desc, &s->req, &s->arena, &res, &err) < 0) {
        rpc_respond_error(s->resp, err.code, err.msg); /* throttled, or the read failed */
    } else {
        router_charge_read(s->c->cap, lp->id, &s->req, &res, now_ms(s->c));
        if (partition_read_res_encode(&res, &out, &err) < 0)
            rpc_respond_error(s->resp, err.code, err.msg);
        else if (rpc_respond(s->resp, out.data, out.len, &err) < 0)
            fprintf(stderr, "stratad: read answer dropped: %s\n", err.msg);
    }
    buf_free(&out);
    arena_free(&s->arena);
    free(s);
}

static void on_served_read_confirmed(void *data, const raft_host_outcome *out)
{
    served_read *s = data;
    if (out->code != ERR_NONE) {
        respond_retry(s->resp, out->leader_hint, "leadership not confirmed");
        arena_free(&s->arena);
        free(s);
        return;
    }
    served_read_run(s);
}

static void serve_read(rcluster *c, const uint8_t *data, size_t len, rpc_responder *resp)
{
    rd r;
    rd_init(&r, data, len);
    uint64_t pid = rd_varint(&r);
    uint8_t strong = rd_u8(&r);
    uint64_t min_index = rd_varint(&r);
    uint64_t exp_lo = rd_u64be(&r), exp_hi = rd_u64be(&r);
    served_read *s = calloc(1, sizeof *s);
    if (s == NULL) {
        rpc_respond_error(resp, ERR_NOMEM, "out of memory");
        return;
    }
    s->c = c;
    s->resp = resp;
    s->pid = pid;
    s->exp_lo = exp_lo;
    s->exp_hi = exp_hi;
    arena_init(&s->arena, READ_ARENA_LIMIT);
    strata_err err;
    if (r.failed || pid == META_GROUP ||
        partition_read_req_decode(data + (len - rd_left(&r)), rd_left(&r), &s->arena, &s->req,
                                  &err) < 0) {
        rpc_respond_error(resp, ERR_CORRUPT, "malformed partition read");
        arena_free(&s->arena);
        free(s);
        return;
    }
    if (!strong) {
        if (local_replica_fresh(c, pid, min_index))
            served_read_run(s);
        else {
            respond_retry(resp, raft_host_leader(c->host, pid), "replica not caught up");
            arena_free(&s->arena);
            free(s);
        }
        return;
    }
    if (!raft_host_is_leader(c->host, pid) ||
        raft_host_read_index(c->host, pid, on_served_read_confirmed, s, &err) < 0) {
        respond_retry(resp, raft_host_leader(c->host, pid), "not the leader");
        arena_free(&s->arena);
        free(s);
    }
}

static void on_served_meta(void *data, const raft_host_outcome *out)
{
    rpc_responder *resp = data;
    if (out->code != ERR_NONE) {
        rpc_respond_error(resp, ERR_UNAVAILABLE, "meta leadership lost; outcome unknown");
        return;
    }
    buf b;
    buf_init(&b, 0);
    const uint8_t *res = out->result;
    buf_put_u8(&b, out->result_len ? res[0] : ERR_NONE);
    buf_put_varint(&b, out->index);
    if (out->result_len > 1)
        buf_append(&b, res + 1, out->result_len - 1);
    rpc_respond(resp, b.data, b.len, NULL);
    buf_free(&b);
}

static void serve_meta_propose(rcluster *c, const uint8_t *data, size_t len, rpc_responder *resp)
{
    strata_err err;
    if (c->voter && c->meta_index > 0 && meta_record_format(data, len) > meta_format(c->meta)) {
        /* Above the cluster's format (Formats, meta.h): some node could not apply it, and
         * would stop at it (apply_meta). The proposer's binary broke the gate. */
        rpc_respond_error(resp, ERR_NEWER, "a meta record above the cluster's format");
        return;
    }
    if (!c->voter || !raft_host_is_leader(c->host, META_GROUP) ||
        raft_host_submit(c->host, META_GROUP, data, len, on_served_meta, resp, &err) < 0)
        respond_retry(resp, meta_leader(c), "not the meta leader");
}

static void serve_meta_fetch(rcluster *c, rpc_responder *resp)
{
    if (!c->voter) {
        respond_retry(resp, meta_leader(c), "not a meta voter");
        return;
    }
    buf b;
    buf_init(&b, 0);
    strata_err err;
    buf_put_varint(&b, c->meta_index);
    if (meta_state_encode(c->meta, &b, &err) < 0)
        rpc_respond_error(resp, err.code, err.msg);
    else
        rpc_respond(resp, b.data, b.len, NULL);
    buf_free(&b);
}

typedef struct {
    rcluster *c;
    rpc_responder *resp;
} served_sync;

static void on_served_sync(void *data, const raft_host_outcome *out)
{
    served_sync *ss = data;
    if (out->code != ERR_NONE) {
        respond_retry(ss->resp, out->leader_hint, "meta leadership not confirmed");
    } else {
        buf b;
        buf_init(&b, 10);
        buf_put_varint(&b, ss->c->meta_index);
        rpc_respond(ss->resp, b.data, b.len, NULL);
        buf_free(&b);
    }
    free(ss);
}

static void serve_meta_sync(rcluster *c, rpc_responder *resp)
{
    strata_err err;
    served_sync *ss = malloc(sizeof *ss);
    if (ss == NULL) {
        rpc_respond_error(resp, ERR_NOMEM, "out of memory");
        return;
    }
    *ss = (served_sync){c, resp};
    if (!c->voter || !raft_host_is_leader(c->host, META_GROUP) ||
        raft_host_read_index(c->host, META_GROUP, on_served_sync, ss, &err) < 0) {
        free(ss);
        respond_retry(resp, meta_leader(c), "not the meta leader");
    }
}

static int start_meta_group(rcluster *c, strata_err *err);

/* The bootstrap node forms the cluster once `expect` nodes (itself included) asked. */
static void maybe_form(rcluster *c)
{
    if (c->formed || !c->bootstrap || (int)c->n_joiners + 1 < c->expect)
        return;
    member m[MAX_META_VOTERS];
    size_t n = 0;
    m[n].id = c->self;
    snprintf(m[n].addr, sizeof m[n].addr, "%s", c->me.peer_addr);
    n++;
    for (size_t i = 0; i < c->n_joiners && n < (size_t)c->expect; i++, n++) {
        m[n].id = c->joiners[i].id;
        snprintf(m[n].addr, sizeof m[n].addr, "%s", c->joiners[i].peer_addr);
    }
    /* Same order on every member: by node id. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && m[j].id < m[j - 1].id; j--) {
            member t = m[j];
            m[j] = m[j - 1];
            m[j - 1] = t;
        }
    memcpy(c->members, m, n * sizeof *m);
    c->n_members = n;
    strata_err err;
    if (cluster_file_write(c, &err) < 0 || start_meta_group(c, &err) < 0) {
        fprintf(stderr, "stratad: cannot form the cluster: %s\n", err.msg);
        c->n_members = 0;
        return;
    }
    fprintf(stderr, "stratad: cluster formed with %zu meta voters\n", n);
}

/* The registration a join as node `id` would take the place of: this node's own, the
 * map's, or a joiner's of the cluster being formed; NULL for a new id. */
static const meta_node *known_node(const rcluster *c, uint64_t id)
{
    if (id == c->self)
        return &c->me;
    const meta_node *n = c->formed ? meta_node_find(c->meta, id) : NULL;
    for (size_t i = 0; n == NULL && i < c->n_joiners; i++)
        if (c->joiners[i].id == id)
            n = &c->joiners[i];
    return n;
}

/* Whether `n` may join: a registered id joins again only from the data directory it
 * registered from (the same incarnation; a join retried after a lost answer is one).
 * Another directory under a member's id (an empty one: a replaced disk; or a second
 * process given the same --node-id) would hold replicas that forgot what they
 * acknowledged, and a replica that votes without its log can elect a leader that lacks
 * committed entries. A removed id is never used again. 0 when allowed, else -1 with
 * the reason in `why`. */
static int join_refusal(const rcluster *c, const meta_node *n, strata_err *why)
{
    unsigned format = n->format != 0 ? n->format : 1;
    if (c->formed && format < meta_format(c->meta))
        return strata_err_set(why, ERR_RESOURCE_IN_USE,
                              "node %" PRIu64 " reads meta records up to format %u, and the "
                              "cluster writes format %u: start it with a binary of the "
                              "cluster's version or newer",
                              n->id, format, meta_format(c->meta));
    const meta_node *known = known_node(c, n->id);
    if (known != NULL && known->state == META_NODE_REMOVED)
        return strata_err_set(why, ERR_RESOURCE_IN_USE,
                              "node %" PRIu64 " was removed from the cluster, and a removed id "
                              "is never used again: start this node with a new --node-id",
                              n->id);
    if (known == NULL || known->incarnation == 0 || n->incarnation == 0 ||
        known->incarnation == n->incarnation)
        return 0;
    return strata_err_set(why, ERR_RESOURCE_IN_USE,
                          "node %" PRIu64 " is a member of the cluster with another data "
                          "directory: a node that lost its data, or a second process given the "
                          "same --node-id, cannot take its place. Start this one with a new "
                          "--node-id; the old node's replicas are re-created elsewhere once it "
                          "is DOWN for --replace-after, then `strata node remove %" PRIu64
                          "` retires it",
                          n->id, n->id);
}

static void serve_join(rcluster *c, const uint8_t *data, size_t len, rpc_responder *resp)
{
    meta_cmd cmd;
    strata_err err;
    if (meta_decode(data, len, &cmd, &err) < 0 || cmd.kind != META_CMD_NODE_REGISTER) {
        rpc_respond_error(resp, ERR_VALIDATION, "malformed join request");
        return;
    }
    if (join_refusal(c, &cmd.node, &err) < 0) {
        fprintf(stderr, "stratad: refused a join as node %" PRIu64 " from %s: %s\n", cmd.node.id,
                cmd.node.peer_addr, err.msg);
        meta_cmd_free(&cmd);
        rpc_respond_error(resp, err.code, err.msg);
        return;
    }
    if (!c->formed && c->bootstrap) {
        if (known_node(c, cmd.node.id) == NULL && c->n_joiners < MAX_META_VOTERS)
            c->joiners[c->n_joiners++] = cmd.node;
        maybe_form(c);
    }
    meta_cmd_free(&cmd);
    buf b;
    buf_init(&b, 0);
    if (c->formed)
        cluster_node_list_encode(c->members, c->n_members, &b);
    rpc_respond(resp, b.data, b.len, NULL);
    buf_free(&b);
}

static void on_request(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len,
                       rpc_responder *resp)
{
    rcluster *c = ctx;
    if (c->closing) {
        respond_retry(resp, 0, "shutting down");
        return;
    }
    switch (type) {
    case MSG_JOIN:
        serve_join(c, data, len, resp);
        return;
    case MSG_META_PROPOSE:
        serve_meta_propose(c, data, len, resp);
        return;
    case MSG_META_FETCH:
        serve_meta_fetch(c, resp);
        return;
    case MSG_META_SYNC:
        serve_meta_sync(c, resp);
        return;
    case MSG_DROP_CHECK:
        serve_drop_check(c, data, len, resp);
        return;
    case MSG_PART_WRITE:
        serve_write(c, data, len, resp);
        return;
    case MSG_PART_READ:
        serve_read(c, data, len, resp);
        return;
    case MSG_SNAP_CHUNK:
        serve_snap_chunk(c, peer, data, len, resp);
        return;
    case MSG_GROUP_STATUS:
        serve_group_status(c, peer, data, len, resp);
        return;
    }
    rpc_respond_error(resp, ERR_UNKNOWN_OPERATION, "unknown request type");
}

/* Whether `group` is the child of a SPLIT a local parent replica is applying, with this
 * node among its members, or a partition of the map that this node holds no replica of
 * yet and whose range a local replica still covers: the child of a SPLIT that replica
 * has yet to apply (it may lag the others). */
static bool child_starting(const rcluster *c, uint64_t group)
{
    const meta_partition *mp = meta_partition_find(c->meta, group);
    bool awaited =
        mp != NULL && meta_partition_has(mp, c->self, NULL) && lpart_find(c, group) == NULL;
    for (size_t i = 0; i < c->n_parts; i++) {
        const lpart *lp = &c->parts[i];
        if (awaited && lp->desc.table_id == mp->table_id && lp->desc.hash_lo <= mp->hash_lo &&
            mp->hash_hi <= lp->desc.hash_hi)
            return true;
        if (lp->split == SPLIT_NONE || lp->split_cmd.child_id != group)
            continue;
        for (uint32_t k = 0; k < lp->split_cmd.n_members; k++)
            if (lp->split_cmd.members[k].node == c->self)
                return true;
    }
    return false;
}

typedef struct {
    rcluster *c;
    uint64_t group;
} early_target;

static void deliver_early(void *arg, uint64_t from, const uint8_t *data, size_t len)
{
    early_target *to = arg;
    if (!to->c->closing && raft_host_receive(to->c->host, from, to->group, data, len, NULL) == 0)
        to->c->counters.early_delivered++;
}

/* Hands the kept messages of `group`, which has just started here, to its replica. */
static void early_deliver(rcluster *c, uint64_t group)
{
    early_target to = {c, group};
    held_deliver(&c->early, group, now_ms(c), deliver_early, &to);
}

/* A node that bootstraps a cluster hears no Raft message before it formed it (the
 * joiners start their groups after it). One it does hear comes from an existing cluster
 * that counts this node as a member: the directory that held its cluster file was lost or
 * replaced, and the node must neither vote nor form a second, empty cluster out of the
 * nodes that would join it. It stops (rcluster_refused). */
static void lost_bootstrap(rcluster *c, uint64_t peer)
{
    if (c->refused.code != ERR_NONE)
        return;
    strata_err_set(&c->refused, ERR_RESOURCE_IN_USE,
                   "node %" PRIu64 " sends Raft messages of an existing cluster that counts node "
                   "%" PRIu64 " as a member, but %s has no cluster file: the directory was lost "
                   "or replaced. Start this machine with a new --node-id and --join a member of "
                   "that cluster (not --bootstrap)",
                   peer, c->self, c->data_dir);
}

static void on_message(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len)
{
    rcluster *c = ctx;
    if (type == MSG_PART_STATS && !c->closing) {
        strata_err err;
        if (pstats_receive(c->heard, data, len, now_ms(c), &err) < 0)
            fprintf(stderr, "stratad: partition statistics from node %" PRIu64 ": %s\n", peer,
                    err.msg);
        return;
    }
    if (type == MSG_LEAVING) {
        peer_state *p = peer_find(c, peer);
        if (p != NULL)
            p->leaving = true;
        return;
    }
    if (type == MSG_CAP_DEMAND && !c->closing) {
        strata_err err;
        if (capshare_receive(c->shares, peer, data, len, now_ms(c), &err) < 0)
            fprintf(stderr, "stratad: capacity demand from node %" PRIu64 ": %s\n", peer,
                    err.msg);
        return;
    }
    if (c->closing || type != MSG_RAFT || len < 8 || c->host == NULL)
        return;
    if (!c->formed && c->bootstrap) {
        lost_bootstrap(c, peer);
        return;
    }
    uint64_t group = 0;
    for (int i = 0; i < 8; i++)
        group = group << 8 | data[i];
    strata_err err;
    if (raft_host_receive(c->host, peer, group, data + 8, len - 8, &err) < 0 &&
        err.code == ERR_NOT_FOUND && child_starting(c, group))
        (void)held_keep(&c->early, group, peer, data + 8, len - 8, now_ms(c));
}

static void on_peer_state(void *ctx, uint64_t peer, bool connected)
{
    rcluster *c = ctx;
    peer_state *p = peer_find(c, peer);
    if (p == NULL)
        return;
    p->connected = connected;
    /* A stopping peer says so again on its next connection; a restarted one does not. */
    if (!connected)
        p->leaving = false;
    else if (c->handing_off)
        say_leaving(c, peer); /* what went out on the broken connection may be lost */
}

/* A refused peer handshake is logged, at most once every REJECT_REPORT_MS (a stranger
 * can make them as fast as it connects), with the count of those not logged. */
static void on_reject(void *ctx, uint64_t node, const char *addr, const char *why)
{
    rcluster *c = ctx;
    uint64_t now = uv_now(c->loop);
    if (c->rejects_logged_ms != 0 && now - c->rejects_logged_ms < REJECT_REPORT_MS) {
        c->rejects_unlogged++;
        return;
    }
    char who[64] = "";
    if (node != 0)
        snprintf(who, sizeof who, "node %" PRIu64 " at ", node);
    fprintf(stderr, "stratad: peer connection with %s%s refused: %s", who, addr, why);
    if (c->rejects_unlogged > 0)
        fprintf(stderr, " (and %" PRIu64 " more refused since the last report)",
                c->rejects_unlogged);
    fputc('\n', stderr);
    c->rejects_logged_ms = now != 0 ? now : 1;
    c->rejects_unlogged = 0;
}

int rcluster_set_peer_secrets(rcluster *c, const rpc_secrets *s, strata_err *err)
{
    return rpc_set_secrets(c->rpc, s, err);
}

/* ------------------------------------------------------------------ joining and the map */

/* Every router waits for the map to show a change (a split, a move): its commit reaches
 * the other voters with the leader's next heartbeat, so make that soon. */
static int meta_heartbeat(rcluster *c, strata_err *err)
{
    unsigned hb = c->heartbeat_ms < META_HEARTBEAT_MS ? c->heartbeat_ms : META_HEARTBEAT_MS;
    return raft_host_set_heartbeat(c->host, META_GROUP, hb, err);
}

static int start_meta_group(rcluster *c, strata_err *err)
{
    uint64_t ids[MAX_META_LIST];
    c->voter = c->meta_joined;
    for (size_t i = 0; i < c->n_members; i++) {
        ids[i] = c->members[i].id;
        c->voter = c->voter || ids[i] == c->self;
        peer_ensure(c, c->members[i].id, c->members[i].addr);
    }
    for (size_t i = 0; i < c->n_known; i++)
        peer_ensure(c, c->known[i].id, c->known[i].addr);
    c->formed = true;
    if (!c->voter)
        return 0;
    int rc = c->meta_joined ? raft_host_join_group(c->host, META_GROUP, 0, err)
                            : raft_host_start_group(c->host, META_GROUP, ids, c->n_members, 0, err);
    if (rc < 0)
        return -1;
    return meta_heartbeat(c, err);
}

/*
 * Whether the members of a join answer (c->members) name this node. A node that rewrites a
 * damaged cluster file (c->file_rewrite) and finds itself among them is a voter of a group
 * that formed long ago: its replica starts from the state in its log, as one that joined
 * later would, and never bootstraps. A bootstrap there (were that state lost) would put a
 * configuration of today's voters at index 1, where the group's log holds the one it
 * formed with, and the two logs would pass Raft's consistency check while they differ.
 */
static bool member_of_answer(const rcluster *c)
{
    for (size_t i = 0; i < c->n_members; i++)
        if (c->members[i].id == c->self)
            return true;
    return false;
}

static void on_join_answer(void *ctx, int status, const strata_err *err, const uint8_t *data,
                           size_t len)
{
    join_slot *slot = ctx;
    rcluster *c = slot->c;
    slot->busy = false;
    if (status < 0 && err != NULL && err->code == ERR_RESOURCE_IN_USE && !c->formed &&
        c->refused.code == ERR_NONE) {
        c->refused = *err; /* the node stops (rcluster_refused) */
        return;
    }
    if (status < 0 || len == 0 || c->closing || c->formed)
        return;
    strata_err e;
    if (cluster_node_list_decode((const char *)data, len, c->members, MAX_META_LIST, &c->n_members,
                                 &e) < 0) {
        fprintf(stderr, "stratad: bad join answer: %s\n", e.msg);
        return;
    }
    if (c->file_rewrite)
        c->meta_joined = member_of_answer(c);
    if (cluster_file_write(c, &e) < 0 || start_meta_group(c, &e) < 0) {
        fprintf(stderr, "stratad: cannot join: %s\n", e.msg);
        c->formed = false;
        return;
    }
    fprintf(stderr, "stratad: joined the cluster (%zu meta voters%s)%s\n", c->n_members,
            c->voter ? ", this node among them" : "",
            c->file_rewrite ? "; its cluster file is written again" : "");
    c->file_rewrite = false;
    /* The seed connections are not needed any more (their calls fail now; each sees
     * c->formed and stops). */
    for (size_t i = 0; i < c->n_join; i++)
        rpc_remove_peer(c->rpc, RPC_SEED_ID_MIN + i, NULL);
}

static void ask_to_join(rcluster *c)
{
    buf b;
    buf_init(&b, 0);
    meta_cmd cmd = {.kind = META_CMD_NODE_REGISTER, .now_ms = wall_ms(), .node = c->me};
    strata_err err;
    if (meta_encode(&cmd, &b, &err) < 0) {
        buf_free(&b);
        return;
    }
    for (size_t i = 0; i < c->n_join; i++) {
        if (c->join[i].busy)
            continue;
        if (rpc_call(c->rpc, RPC_SEED_ID_MIN + i, MSG_JOIN, b.data, b.len, JOIN_CALL_MS,
                     on_join_answer, &c->join[i], &err) == 0)
            c->join[i].busy = true;
    }
    buf_free(&b);
}

static void on_fetched(void *ctx, int status, const strata_err *err, const uint8_t *data,
                       size_t len)
{
    rcluster *c = ctx;
    c->fetch_in_flight = false;
    if (status < 0) {
        int64_t h = retry_hint(err);
        if (h > 0)
            c->meta_leader_hint = (uint64_t)h;
        else
            forget_silent_leader(c, c->fetch_target);
        return;
    }
    if (c->closing)
        return;
    rd r;
    rd_init(&r, data, len);
    uint64_t index = rd_varint(&r);
    if (r.failed || index <= c->meta_index)
        return;
    strata_err e;
    meta_state *s = meta_state_decode(data + (len - rd_left(&r)), rd_left(&r), &e);
    if (s == NULL) {
        fprintf(stderr, "stratad: bad cluster map from a meta voter: %s\n", e.msg);
        return;
    }
    meta_free(c->meta);
    c->meta = s;
    c->meta_index = index;
    catalog_rebuild(c);
    kick(c);
}

/* Whether this node's meta replica has known no leader for META_ORPHAN_MS: a member
 * taken out of the group while it was away hears from no leader again (the leader sends
 * only to its configuration), and its own map still names it. It then fetches the map
 * like a node outside the group, and leaves (reconcile_meta_seat) once the map says it is
 * out and the leader confirms it. A member cut off from the others fetches nothing newer. */
static bool meta_orphaned(rcluster *c)
{
    if (!c->voter || raft_host_leader(c->host, META_GROUP) != 0) {
        c->meta_leaderless_since = 0;
        return false;
    }
    uint64_t now = now_ms(c);
    if (c->meta_leaderless_since == 0)
        c->meta_leaderless_since = now;
    return now - c->meta_leaderless_since >= META_ORPHAN_MS;
}

/* Where to fetch the map from: the leader when known and connected, else a connected
 * member in turn, else a connected node of the others this node knew (c->known): when
 * every member it knows is gone, the whole group may have been replaced while it was away
 * (its restarted replica, with no leader to say what is committed, applies nothing, so
 * its own map is empty), and the other nodes answer with the map (a member) or the leader
 * (retry_hint). With nobody connected, a member other than this node: the call waits for
 * its connection. */
static uint64_t fetch_target(rcluster *c, uint64_t turn)
{
    uint64_t h = c->meta_leader_hint;
    if (h != 0 && h != c->self && node_usable(c, h))
        return h;
    for (size_t i = 0; i < c->n_members; i++) {
        uint64_t id = pick_member(c, turn + i);
        if (id != c->self && node_usable(c, id))
            return id;
    }
    for (size_t i = 0; i < c->n_known; i++) {
        uint64_t id = c->known[(turn + i) % c->n_known].id;
        if (id != c->self && node_usable(c, id))
            return id;
    }
    uint64_t id = pick_member(c, turn);
    return id != c->self ? id : pick_member(c, turn + 1);
}

/* Nodes outside the meta group follow the map by fetching it; so do orphaned members. */
static void fetch_meta(rcluster *c)
{
    if ((c->voter && !meta_orphaned(c)) || !c->formed || c->fetch_in_flight || c->n_members == 0)
        return;
    uint64_t target = fetch_target(c, c->last_fetch / META_FETCH_MS);
    c->last_fetch = now_ms(c);
    c->fetch_target = target;
    strata_err err;
    if (rpc_call(c->rpc, target, MSG_META_FETCH, NULL, 0, ATTEMPT_DEADLINE_MS, on_fetched, c,
                 &err) == 0)
        c->fetch_in_flight = true;
}

static void on_registered(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    rcluster *c = ctx;
    (void)res;
    (void)len;
    c->register_in_flight = false;
    if (err != NULL && err->code != ERR_RESOURCE_IN_USE && !c->closing)
        fprintf(stderr, "stratad: registering this node: %s (retrying)\n", err->msg);
}

/* A binary older than the cluster's meta format cannot follow the map's log (Formats,
 * meta.h): the node stops (rcluster_refused), saying `what` to do. */
static void stop_too_old(rcluster *c, const char *what)
{
    if (c->refused.code == ERR_NONE)
        strata_err_set(&c->refused, ERR_VALIDATION,
                       "this binary reads meta records up to format %u, and the cluster writes "
                       "format %u since every node read it: %s",
                       c->me.format, meta_format(c->meta), what);
}

static void register_self(rcluster *c)
{
    if (!c->formed || c->register_in_flight || meta_node_find(c->meta, c->self) != NULL)
        return;
    if (meta_leader(c) == 0 && c->voter)
        return; /* no meta leader yet: wait for the election */
    if (c->meta_index > 0 && c->me.format < meta_format(c->meta)) {
        /* Let in by a member whose map was older than the rise (join_refusal). */
        stop_too_old(c, "start this node with a binary of the cluster's version or newer");
        return;
    }
    meta_cmd cmd = {.kind = META_CMD_NODE_REGISTER, .now_ms = wall_ms(), .node = c->me};
    strata_err err;
    if (propose_meta(c, &cmd, on_registered, c, &err) == 0)
        c->register_in_flight = true;
}

static void on_format_said(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    rcluster *c = ctx;
    (void)res;
    (void)len;
    c->format_in_flight = false;
    if (err != NULL && !c->closing)
        fprintf(stderr, "stratad: saying this binary's meta format: %s (retrying)\n", err->msg);
}

/* The map says which record format this node's binary reads (Formats, meta.h): after an
 * upgrade, NODE_FORMAT says it again. A binary older than the cluster's format (a
 * downgrade) cannot follow the log: the node stops. */
static void reconcile_format(rcluster *c)
{
    const meta_node *me = c->formed && c->meta_index > 0 ? meta_node_find(c->meta, c->self) : NULL;
    if (me == NULL || me->format == c->me.format || c->format_in_flight)
        return;
    if (c->me.format < meta_format(c->meta)) {
        stop_too_old(c, "a node cannot go back to an older version");
        return;
    }
    meta_cmd cmd = {.kind = META_CMD_NODE_FORMAT, .now_ms = wall_ms(), .node = c->me};
    strata_err err;
    if (propose_meta(c, &cmd, on_format_said, c, &err) == 0)
        c->format_in_flight = true;
}

static void delete_replica_data(rcluster *c, const partition_desc *d);

/* A local replica of the same table, other than `id`, whose range meets [lo, hi], or
 * whose split is about to start `id`. */
static bool local_overlap(const rcluster *c, uint64_t id, uint32_t table_id, uint64_t lo,
                          uint64_t hi)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        const lpart *lp = &c->parts[i];
        const partition_desc *d = &lp->desc;
        if (lp->id != id && d->table_id == table_id && d->hash_lo <= hi && lo <= d->hash_hi)
            return true;
        /* lp shrank for a split that makes `id`, which starts once the records are
         * durable (split_write). */
        if (lp->split > SPLIT_WRITE && lp->split_cmd.child_id == id)
            return true;
    }
    return false;
}

/* True when the engine holds any item in the range of `d`. */
static bool range_has_data(rcluster *c, const partition_desc *d)
{
    uint8_t lo[12], hi[12];
    router_partition_bounds(d, lo, hi);
    lsm_iter_options o = {.lower = lo, .lower_len = 12, .upper = hi, .upper_len = 12};
    lsm_iter *it = lsm_iter_new(c->engine, &o, NULL);
    if (it == NULL)
        return true; /* on doubt: the replica waits for a copy */
    lsm_iter_first(it);
    bool any = lsm_iter_valid(it) || lsm_iter_status(it, NULL) < 0;
    lsm_iter_free(it);
    return any;
}

/* Starts the Raft group of a new local replica `lp` (desc set), from its range record
 * `rg` when it has one. A child created by a split (record with members) bootstraps with
 * the members the SPLIT carried, as on every replica that applied it; a member of a
 * partition's first configuration (epoch 1) bootstraps it identically; any other replica
 * (added later, or restarted after moves) joins and waits for the leader. */
static int start_replica_group(rcluster *c, lpart *lp, const meta_partition *mp, meta_role role,
                               const split_range *rg, strata_err *err)
{
    uint64_t voters[SPLIT_MAX_MEMBERS];
    size_t nv = 0;
    uint64_t id = lp->id;
    uint64_t applied = lsm_durable_index(c->engine, id);
    if (rg != NULL && rg->n_members > 0) {
        /* A child holds its state as of its first entry (the configuration) from the
         * split's flush: never below that, also when its log starts later. */
        if (applied == 0)
            applied = 1;
        bool self_voter = false;
        for (uint32_t k = 0; k < rg->n_members; k++)
            if (rg->members[k].voter) {
                voters[nv++] = rg->members[k].node;
                self_voter = self_voter || rg->members[k].node == c->self;
            }
        return self_voter ? raft_host_start_group(c->host, id, voters, nv, applied, err)
                          : raft_host_join_group(c->host, id, applied, err);
    }
    for (uint32_t k = 0; k < mp->n_members; k++)
        if (mp->members[k].role == META_VOTER)
            voters[nv++] = mp->members[k].node;
    return mp->epoch == 1 && role == META_VOTER
               ? raft_host_start_group(c->host, id, voters, nv, applied, err)
               : raft_host_join_group(c->host, id, applied, err);
}

static void join_check_free(rcluster *c, join_check *jc)
{
    for (join_check **pp = &c->join_checks; *pp != NULL; pp = &(*pp)->next)
        if (*pp == jc) {
            *pp = jc->next;
            break;
        }
    free(jc);
}

static void on_join_status(void *ctx, int status, const strata_err *err, const uint8_t *data,
                           size_t len)
{
    join_ask *a = ctx;
    join_check *jc = a->jc;
    (void)err;
    jc->pending--;
    if (status != 0 || len < 1 || !(data[0] & STATUS_FEEDS_WHOLE))
        jc->refused = true;
    else if (a->voter && (data[0] & STATUS_HOLDS_WHOLE))
        jc->whole++;
    split_range rg;
    strata_err derr;
    if (status == 0 && len > 1 && (data[0] & STATUS_FIRST_STATE) &&
        split_range_decode(data + 1, len - 1, &rg, &derr) == 0 && rg.n_members > 0 &&
        record_lists(&rg, jc->c->self)) {
        jc->first_state = a->node;
        jc->first_rg = rg;
    }
    free(a);
    if (jc->pending == 0 && !jc->c->closing) {
        jc->answered_ms = now_ms(jc->c);
        kick(jc->c); /* reconcile again with the answers */
    }
}

/* More than half of mp's voters answered that they hold it whole. */
static bool join_majority_whole(const meta_partition *mp, unsigned whole)
{
    unsigned voters = 0;
    for (uint32_t k = 0; k < mp->n_members; k++)
        voters += mp->members[k].role == META_VOTER;
    return whole >= voters / 2 + 1;
}

/* A replica that starts empty and joins `mp` is fed by whichever member leads: if that is
 * a replica of a child whose log still holds entry 1, it sends the log from index 1, which
 * rebuilds the child without its parent's data. So the replica joins only once every
 * reachable member answered that it would send a copy instead (replica_feeds_whole; a
 * child's replicas compact its log whole early, snapshots_tick), and a majority of the
 * voters that it holds the partition whole (replica_holds_whole). The majority matters
 * for the members that have not made the child yet: they have no replica to refuse with,
 * and make it later from the SPLIT with entry 1 in its log; Raft's election rule keeps
 * them from leading it only against a majority whose logs end past index 1 (the sim's
 * seed 1558 of --splits 1001-2000: the first member to apply the SPLIT crashed before
 * its flush, and the joiner found nobody holding the child). One round of questions at
 * a time, at most every JOIN_CHECK_MS; a member that does not answer refuses. An
 * unreachable member is not asked (nor counted in the majority): it leads nobody now, and
 * a child's replica compacts its log whole once it applies an entry, before it can lead
 * a joiner in practice. The same round tells whether a member holds the child at its
 * first state for this node to copy (STATUS_FIRST_STATE): `*seed_from` receives one such
 * member of the last round, once (else 0), and `seed_rg` the record it sent. */
static bool join_allowed(rcluster *c, const meta_partition *mp, uint64_t *seed_from,
                         split_range *seed_rg)
{
    join_check *jc = c->join_checks;
    while (jc != NULL && jc->pid != mp->id)
        jc = jc->next;
    uint64_t now = now_ms(c);
    *seed_from = 0;
    if (jc != NULL && jc->pending > 0)
        return false;
    if (jc != NULL) {
        *seed_from = jc->first_state;
        *seed_rg = jc->first_rg;
        jc->first_state = 0;
    }
    if (jc != NULL && !jc->refused && jc->answered_ms != 0 &&
        now - jc->answered_ms < JOIN_CHECK_MS && join_majority_whole(mp, jc->whole)) {
        join_check_free(c, jc); /* a fresh round said yes */
        return true;
    }
    if (jc != NULL && now - jc->asked_ms < JOIN_CHECK_MS)
        return false;
    if (jc == NULL) {
        jc = calloc(1, sizeof *jc);
        if (jc == NULL)
            return false;
        *jc = (join_check){.next = c->join_checks, .c = c, .pid = mp->id};
        c->join_checks = jc;
    }
    jc->asked_ms = now;
    jc->answered_ms = 0;
    jc->refused = false;
    jc->whole = 0;
    buf b;
    buf_init(&b, 0);
    buf_put_varint(&b, mp->id);
    for (uint32_t k = 0; k < mp->n_members && !b.failed; k++) {
        uint64_t node = mp->members[k].node;
        join_ask *a;
        strata_err err;
        if (node == c->self || !node_usable(c, node))
            continue;
        if ((a = malloc(sizeof *a)) == NULL) {
            jc->refused = true;
            continue;
        }
        *a = (join_ask){jc, node, mp->members[k].role == META_VOTER};
        if (rpc_call(c->rpc, node, MSG_GROUP_STATUS, b.data, b.len, ATTEMPT_DEADLINE_MS,
                     on_join_status, a, &err) < 0) {
            free(a);
            jc->refused = true;
        } else {
            jc->pending++;
        }
    }
    jc->refused = jc->refused || b.failed;
    buf_free(&b);
    if (jc->pending > 0 || jc->refused)
        return false;
    /* Nobody else to ask (nobody else reachable): no majority of voters can answer. */
    join_check_free(c, jc);
    return false;
}

/* ---- a child's first state, copied to a member its SPLIT listed but did not make ---- */

/*
 * A node listed in a SPLIT may never apply it: it stored the entry but crashed before
 * applying it, or was down, and by the time it came back the parent's leader had
 * compacted its log past the entry, so it got a copy of the parent taken after the
 * split (fsm.install), which holds neither the child's data nor its record. The child
 * then has fewer replicas than its SPLIT listed; if the nodes that applied the SPLIT are
 * no majority of the child's voters, the child never elects a leader, never compacts its
 * log whole, and join_allowed never lets the others join it empty: its range is
 * unavailable for good. (The simulator, tests/sim, found this: "(c)" in its header.)
 *
 * So such a node copies the child's first state from a replica the SPLIT made while that
 * replica has applied nothing past entry 1 (replica_first_state): its data is then the
 * parent's at the split, the same on every replica the SPLIT made. It learns of such a
 * replica from the round of questions it sends before joining empty anyway (join_allowed,
 * STATUS_FIRST_STATE), whose answer brings the replica's record. The copy goes under the
 * child's range with the source's range record (the SPLIT's members), durably, and the
 * node then starts the child from that record (start_replica), bootstrapping the same
 * configuration at index 1, exactly as if it had applied the SPLIT: Raft sees one more
 * replica that made the child, as when one applies the SPLIT late. If the source applies
 * anything more before the copy starts (its copy session would say so), the copy is
 * abandoned: the child has a leader then, and the node joins it empty (join_allowed)
 * once the child's replicas compacted its log whole.
 */

static void seed_free(rcluster *c, child_seed *s)
{
    for (child_seed **pp = &c->seeds; *pp != NULL; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    buf_free(&s->next_key);
    free(s);
}

/* Ends a copy that cannot go on; the partial data stays until the next copy or an empty
 * join wipes it (start_replica: data without a record is stale). */
static void seed_abandon(child_seed *s, const char *why)
{
    fprintf(stderr,
            "stratad: partition %" PRIu64 ": copy of its first state from node %" PRIu64
            " abandoned: %s\n",
            s->pid, s->from, why);
    s->from = 0;
    s->tried_ms = now_ms(s->c); /* start over after JOIN_CHECK_MS */
    kick(s->c);
}

static void seed_request(child_seed *s);

static void on_seed_flushed(void *arg, const strata_err *err)
{
    child_seed *s = arg;
    rcluster *c = s->c;
    s->in_flight = false;
    if (c->closing)
        return;
    if (err != NULL && err->code != ERR_NONE) {
        /* The record is in the memtable now: abandoning would let start_replica start the
         * child from it although it is not durable. The replica waits for a flush that
         * succeeds instead (a failed engine stops the node: node/main.c). */
        fprintf(stderr,
                "stratad: partition %" PRIu64 ": flushing the copy of its first state failed: "
                "%s; flushing again\n",
                s->pid, err->msg);
        s->unflushed = true;
        s->tried_ms = now_ms(c);
        return;
    }
    fprintf(stderr,
            "stratad: partition %" PRIu64 ": its SPLIT was not applied here; copied its first "
            "state from node %" PRIu64 ", it starts as the SPLIT would have started it\n",
            s->pid, s->from);
    seed_free(c, s);
    kick(c); /* start_replica starts the child from its record */
}

/* Writes one chunk of the copy (as install_apply_chunk). Every chunk must say the source
 * is at entry 1 with the record's range; the last one also writes the record, and the
 * engine then holds the child's state at index 1, made durable before the child starts. */
static void seed_apply_chunk(child_seed *s, const uint8_t *data, size_t len)
{
    rcluster *c = s->c;
    const meta_partition *mp = meta_partition_find(c->meta, s->pid);
    if (mp == NULL || !meta_partition_has(mp, c->self, NULL) || lpart_find(c, s->pid) != NULL) {
        seed_abandon(s, "the map no longer gives this node the child, or it started");
        return;
    }
    snap_chunk ch;
    lsm_batch *b = lsm_batch_new();
    strata_err err;
    int rc = b != NULL ? snap_chunk_to_batch(data, len, &ch, b, &err)
                       : strata_err_set(&err, ERR_NOMEM, "out of memory");
    if (rc == 0 && (ch.applied != 1 || ch.hash_lo != s->rg.hash_lo || ch.hash_hi != s->rg.hash_hi))
        rc = strata_err_set(&err, ERR_UNAVAILABLE, "the source's child went past entry 1");
    bool done = rc == 0 && ch.done;
    bool cut = done && c->test_seed_abandons > 0; /* router_cluster_config's test hook */
    if (rc == 0 && done && !cut)
        rc = range_put(b, s->pid, &s->rg, &err);
    if (rc == 0)
        rc = lsm_write(c->engine, b, done && !cut ? s->pid : 0, done && !cut ? 1 : 0, &err);
    lsm_batch_free(b);
    if (rc == 0 && cut) {
        c->test_seed_abandons--;
        rc = strata_err_set(&err, ERR_UNAVAILABLE, "cut short (STRATA_TEST_SEED_ABANDON)");
    }
    if (rc < 0) {
        seed_abandon(s, err.msg); /* ERR_BUSY too: the next round starts over */
        return;
    }
    buf_reset(&s->next_key);
    buf_append(&s->next_key, ch.next, ch.next_len);
    if (done) {
        s->in_flight = true;
        lsm_flush(c->engine, on_seed_flushed, s);
        return;
    }
    seed_request(s);
}

static void on_seed_chunk(void *ctx, int status, const strata_err *err, const uint8_t *data,
                          size_t len)
{
    child_seed *s = ctx;
    s->in_flight = false;
    if (s->c->closing)
        return;
    if (status < 0) {
        seed_abandon(s, err != NULL ? err->msg : "the request failed");
        return;
    }
    seed_apply_chunk(s, data, len);
}

static void seed_request(child_seed *s)
{
    s->in_flight =
        snap_chunk_call(s->c, s->from, s->pid, s->session, &s->next_key, on_seed_chunk, s) == 0;
    if (!s->in_flight)
        seed_abandon(s, "cannot ask the source");
}

/* Starts the copy from `from`, whose record `rg` lists this node: wipes the range first
 * (leftovers of an earlier replica or copy). */
static void seed_start(child_seed *s, uint64_t from, const split_range *rg)
{
    rcluster *c = s->c;
    partition_desc d = {
        .id = s->pid, .table_id = rg->table_id, .hash_lo = rg->hash_lo, .hash_hi = rg->hash_hi};
    uint8_t lo[12], hi[12];
    router_partition_bounds(&d, lo, hi);
    lsm_batch *b = lsm_batch_new();
    strata_err err;
    int rc = b != NULL ? lsm_batch_delete_range(b, lo, 12, hi, 12, &err) : -1;
    if (rc == 0)
        rc = lsm_write(c->engine, b, 0, 0, &err);
    lsm_batch_free(b);
    if (rc < 0)
        return; /* the next round */
    s->from = from;
    s->rg = *rg;
    s->session = XXH3_64bits_withSeed(&s->pid, sizeof s->pid, now_ms(c) ^ (c->self << 32));
    buf_reset(&s->next_key);
    fprintf(stderr,
            "stratad: partition %" PRIu64 ": this node missed the SPLIT that lists it; copying "
            "the child's first state from node %" PRIu64 "\n",
            s->pid, from);
    seed_request(s);
}

/* For start_replica, about to join `mp` empty with no record: whether a copy of the
 * child's first state is under way here (the replica waits for it). */
static bool seed_busy(const rcluster *c, uint64_t pid)
{
    for (const child_seed *s = c->seeds; s != NULL; s = s->next)
        if (s->pid == pid)
            return s->from != 0 || s->in_flight;
    return false;
}

/* For start_replica: `from` answered join_allowed's round that it holds `mp` as a child at
 * its first state, with its record `rg`, which lists this node (STATUS_FIRST_STATE).
 * Starts the copy, at most every JOIN_CHECK_MS. */
static void seed_child(rcluster *c, const meta_partition *mp, uint64_t from, const split_range *rg)
{
    child_seed *s = c->seeds;
    while (s != NULL && s->pid != mp->id)
        s = s->next;
    uint64_t now = now_ms(c);
    if ((s != NULL && now - s->tried_ms < JOIN_CHECK_MS) ||
        local_overlap(c, mp->id, rg->table_id, rg->hash_lo, rg->hash_hi))
        return;
    if (s == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL)
            return;
        *s = (child_seed){.next = c->seeds, .c = c, .pid = mp->id};
        buf_init(&s->next_key, 0);
        c->seeds = s;
    }
    s->tried_ms = now;
    seed_start(s, from, rg);
}

/* Forgets the copies of replicas that started or that the map took away; flushes again
 * a copy whose flush failed, every JOIN_CHECK_MS. */
static void seeds_step(rcluster *c)
{
    for (child_seed *s = c->seeds, *next; s != NULL; s = next) {
        next = s->next;
        if (s->unflushed && !s->in_flight && now_ms(c) - s->tried_ms >= JOIN_CHECK_MS) {
            s->unflushed = false;
            s->in_flight = true;
            lsm_flush(c->engine, on_seed_flushed, s);
            continue;
        }
        const meta_partition *mp = meta_partition_find(c->meta, s->pid);
        bool wanted =
            mp != NULL && meta_partition_has(mp, c->self, NULL) && lpart_find(c, s->pid) == NULL;
        if (!wanted && !s->in_flight && s->from == 0)
            seed_free(c, s);
    }
}

/* A replica as bootstrapped: term 1, no vote cast, nothing but the configuration in its
 * log. For a new table's partition the node the map names its leader stands for election
 * at once (raft_host_campaign_soon) rather than after an election timeout, during which
 * the new table would refuse every write (retried by the router: the first writes took
 * 1.0 to 1.5 s). Only then: a replica that has known a leader may hear from one any
 * moment, and a campaign would only disturb it. A split's child has its own rule (the
 * parent's leader campaigns: split_finish). */
static bool never_led(rcluster *c, uint64_t pid)
{
    raft_host_group_stats st;
    return raft_host_group_info(c->host, pid, &st, NULL) == 0 && st.term <= 1 && st.vote == 0 &&
           st.last_index <= 1 && st.leader == 0;
}

/* Whether this node's log holds `pid`'s entries from the first on: a replica that ran here
 * and restarts from its log, not an empty one that must be fed (join_allowed). Its engine
 * may hold nothing of it durably: after the whole cluster stopped at once (a power cut)
 * before any engine flush, every replica of a partition that moved (its epoch past 1, so
 * none bootstraps) is so, and each waited for the others to hold it whole, which none
 * did: the partition never restarted. */
static bool log_from_start(const rcluster *c, uint64_t pid)
{
    wal_group_info gi;
    return wal_group_state(c->log, pid, &gi, NULL) == 0 && gi.last_index > 0 && gi.first_index <= 1;
}

/* A replica's partition: its range record's table and range when it has one (`rg`), else
 * the map's. */
static partition_desc replica_desc(const meta_partition *mp, const split_range *rg)
{
    partition_desc d = {
        .id = mp->id, .table_id = mp->table_id, .hash_lo = mp->hash_lo, .hash_hi = mp->hash_hi};
    if (rg != NULL) {
        d.table_id = rg->table_id;
        d.hash_lo = rg->hash_lo;
        d.hash_hi = rg->hash_hi;
    }
    return d;
}

/* Starts a replica the map gives this node. Its range is its record's (the range as of
 * its applied state), else the map's, recorded now. It waits while a local replica of
 * the same table still serves part of that range: a parent that has not applied the
 * SPLIT yet creates the child itself; starting it before would let the late parent
 * write over the child. A replica without a record that finds stale data in its range
 * (its parent was replaced by a copy taken after the split, or leftovers of an earlier
 * replica) wipes it first and starts empty, like any replica added by a move: the log
 * rebuilds an original partition, and a child's replicas compact the child's log whole
 * early (snapshots_tick), and an empty replica joins only once they all did
 * (join_allowed), so a replica joining a child gets a full copy. One that its SPLIT
 * listed copies the child's first state instead while a replica the SPLIT made is still
 * at it (seed_child), and then starts from the record that copy brings. */
static void start_replica(rcluster *c, const meta_partition *mp, meta_role role)
{
    split_range rg;
    int have = range_read(c, mp->id, &rg);
    if (have < 0)
        return;
    partition_desc d = replica_desc(mp, have == 1 ? &rg : NULL);
    if (local_overlap(c, mp->id, d.table_id, d.hash_lo, d.hash_hi))
        return;
    bool bootstraps = (have && rg.n_members > 0) || (mp->epoch == 1 && role == META_VOTER);
    if (!bootstraps && lsm_durable_index(c->engine, mp->id) == 0 && !log_from_start(c, mp->id)) {
        /* No record at all: maybe a listed node that missed the child's SPLIT (seed_child). */
        if (!have && seed_busy(c, mp->id))
            return;
        uint64_t seed_from;
        split_range seed_rg;
        bool allowed = join_allowed(c, mp, &seed_from, &seed_rg);
        if (!have && seed_from != 0) {
            seed_child(c, mp, seed_from, &seed_rg);
            return;
        }
        if (!allowed)
            return;
    }
    strata_err err;
    if (!have) {
        rg = range_of(&d);
        bool stale = mp->epoch > 1 && lsm_durable_index(c->engine, mp->id) == 0 &&
                     range_has_data(c, &d);
        uint8_t lo[12], hi[12];
        router_partition_bounds(&d, lo, hi);
        lsm_batch *b = lsm_batch_new();
        int rc = b != NULL ? 0 : strata_err_set(&err, ERR_NOMEM, "out of memory");
        if (rc == 0 && stale)
            rc = lsm_batch_delete_range(b, lo, 12, hi, 12, &err);
        if (rc == 0)
            rc = range_put(b, mp->id, &rg, &err);
        if (rc == 0)
            rc = lsm_write(c->engine, b, 0, 0, &err);
        lsm_batch_free(b);
        if (rc < 0)
            return; /* next reconcile */
        if (stale)
            fprintf(stderr,
                    "stratad: partition %" PRIu64 ": stale data in its range wiped; it starts "
                    "empty and catches up from its leader\n",
                    mp->id);
    }
    lpart *lp = lpart_add(c, mp->id, &err);
    if (lp == NULL)
        return;
    lp->desc = d;
    lp->child = have && rg.n_members > 0;
    if (install_marked(c, mp->id)) {
        lp->poisoned = true;
        fprintf(stderr,
                "stratad: partition %" PRIu64 " holds a partial snapshot copy: it "
                "applies nothing until a copy completes\n",
                mp->id);
    } else {
        stats_recount(c, lp);
    }
    if (start_replica_group(c, lp, mp, role, have ? &rg : NULL, &err) < 0) {
        fprintf(stderr, "stratad: cannot start partition %" PRIu64 ": %s\n", mp->id, err.msg);
        lpart_remove(c, lpart_find(c, mp->id));
        return;
    }
    bool original = mp->epoch == 1 && !(have && rg.n_members > 0); /* not a split's child */
    if (original && mp->leader_hint == c->self && never_led(c, mp->id))
        (void)raft_host_campaign_soon(c->host, mp->id, &err);
}

/* ------------------------------------------------------------------ splits (local) */

static void on_split_flushed(void *arg, const strata_err *err)
{
    split_flush *f = arg;
    rcluster *c = f->c;
    lpart *lp = lpart_find(c, f->pid);
    if (lp != NULL && lp->split == SPLIT_FLUSH && lp->split_index == f->index) {
        bool ok = (err == NULL || err->code == ERR_NONE) &&
                  lsm_durable_index(c->engine, f->pid) >= f->index;
        lp->split = ok ? SPLIT_READY : SPLIT_REFLUSH;
    }
    free(f);
    kick(c);
}

static void ignore_outcome(void *data, const raft_host_outcome *out)
{
    (void)data;
    (void)out;
}

static void split_flush_start(rcluster *c, lpart *lp)
{
    split_flush *f = malloc(sizeof *f);
    if (f == NULL) {
        lp->split = SPLIT_REFLUSH; /* the next reconcile tries again */
        return;
    }
    *f = (split_flush){.c = c, .pid = lp->id, .index = lp->split_index};
    lp->split = SPLIT_FLUSH;
    lsm_flush(c->engine, on_split_flushed, f);
}

static partition_stats stats_share(partition_stats s, const partition_desc *d, uint64_t from);

/*
 * SPLIT_WRITE: the parent's new range record and the child's (range and the members it
 * bootstraps with), written under the parent's range id at the SPLIT's index. The parent
 * then serves the lower half and its log goes on at once; the child waits for a flush.
 * Once that is durable, everything the parent applied before the split is too, so a
 * restart never replays a parent entry over the child's range, and the child's log
 * (which exists only from its start on) never outlives the records that start it. The
 * engine's durable state is a prefix of its writes (memtables flush in order): a crash
 * before the flush loses the records and the parent's later entries together, and the
 * parent replays them, the SPLIT included. Meanwhile no replica of the child starts
 * here from the map (local_overlap).
 */
static bool split_write(rcluster *c, lpart *lp)
{
    const split_cmd *sc = &lp->split_cmd;
    split_range parent = range_of(&lp->desc);
    parent.hash_hi = sc->split_hash - 1;
    split_range child = range_of(&lp->desc);
    child.hash_lo = sc->split_hash;
    child.n_members = sc->n_members;
    memcpy(child.members, sc->members, sc->n_members * sizeof *sc->members);
    lsm_batch *b = lsm_batch_new();
    strata_err err;
    int rc = b != NULL ? 0 : strata_err_set(&err, ERR_NOMEM, "out of memory");
    if (rc == 0)
        rc = range_put(b, lp->id, &parent, &err);
    if (rc == 0)
        rc = range_put(b, sc->child_id, &child, &err);
    if (rc == 0)
        rc = lsm_write(c->engine, b, lp->id, lp->split_index, &err);
    lsm_batch_free(b);
    if (rc < 0) {
        if (err.code == ERR_BUSY)
            lsm_on_writable(c->engine, on_engine_writable, c);
        else
            fprintf(stderr, "stratad: partition %" PRIu64 ": split records: %s (retrying)\n",
                    lp->id, err.msg);
        return false;
    }
    lp->split_child = lp->desc;
    lp->split_child.id = sc->child_id;
    lp->split_child.hash_lo = sc->split_hash;
    lp->split_share = stats_share(lp->stats, &lp->desc, sc->split_hash);
    lp->desc.hash_hi = sc->split_hash - 1;
    lp->stats.item_count -= lp->split_share.item_count;
    lp->stats.size_bytes -= lp->split_share.size_bytes;
    stats_recount(c, lp);
    capacity_heat_reset(c->cap, lp->id); /* half the range: its heat is measured anew */
    fprintf(stderr,
            "stratad: partition %" PRIu64 " split at %016" PRIx64 " (entry %" PRIu64
            "): child %" PRIu64 "\n",
            lp->id, sc->split_hash, lp->split_index, sc->child_id);
    uint64_t pid = lp->id;
    split_flush_start(c, lp);
    raft_host_apply_resume(c->host, pid); /* the SPLIT entry completes: see apply_split */
    /* The other replicas learn that the SPLIT committed from the leader's next message,
     * a heartbeat when no write comes (a read-only load splits too): send one now, a
     * barrier entry, so that they make the child without waiting for it. */
    if (raft_host_is_leader(c->host, pid))
        (void)raft_host_read_barrier(c->host, pid, ignore_outcome, NULL, &err);
    return true;
}

/* The part of a replica's figures in [from, hi] of its range `d`: keys hash evenly. */
static partition_stats stats_share(partition_stats s, const partition_desc *d, uint64_t from)
{
    long double whole = (long double)(d->hash_hi - d->hash_lo) + 1;
    long double part = (long double)(d->hash_hi - from) + 1;
    return (partition_stats){(int64_t)((long double)s.item_count * part / whole),
                             (int64_t)((long double)s.size_bytes * part / whole)};
}

/* SPLIT_READY: creates the child replica (unless it exists) with the carried members,
 * its figures first its share of the parent's, and lets a later SPLIT entry of the
 * parent, refused until now, go on. */
static void split_finish(rcluster *c, uint64_t pid)
{
    lpart *lp = lpart_find(c, pid);
    split_cmd sc = lp->split_cmd;
    partition_desc child = lp->split_child;
    partition_stats share = lp->split_share;
    bool in_child = false;
    for (uint32_t k = 0; k < sc.n_members; k++)
        in_child = in_child || sc.members[k].node == c->self;
    strata_err err;
    if (in_child && lpart_find(c, child.id) == NULL) {
        split_range rg = range_of(&child);
        rg.n_members = sc.n_members;
        memcpy(rg.members, sc.members, sc.n_members * sizeof *sc.members);
        lpart *ch = lpart_add(c, child.id, &err);
        if (ch == NULL)
            return;
        ch->desc = child;
        ch->child = true;
        if (start_replica_group(c, ch, NULL, META_VOTER, &rg, &err) < 0) {
            fprintf(stderr, "stratad: cannot start child partition %" PRIu64 ": %s\n", child.id,
                    err.msg);
            lpart_remove(c, lpart_find(c, child.id));
            return;
        }
        ch = lpart_find(c, child.id);
        ch->stats = share;
        stats_recount(c, ch);
        /* The parent's leader stands for election at once: until the child has a leader,
         * every write to its half of the range is refused and retried. */
        if (raft_host_is_leader(c->host, pid))
            (void)raft_host_campaign_soon(c->host, child.id, &err);
    }
    lp = lpart_find(c, pid); /* lpart_add may have moved it */
    lp->split = SPLIT_NONE;
    raft_host_apply_resume(c->host, pid);
    if (in_child)
        early_deliver(c, child.id);
}

static void splits_step(rcluster *c)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        if (lp->split == SPLIT_WRITE && split_write(c, lp)) {
            kick(c); /* its log went on: anything may have changed */
            return;
        }
        if (lp->split == SPLIT_REFLUSH)
            split_flush_start(c, lp);
        else if (lp->split == SPLIT_READY) {
            split_finish(c, lp->id);
            kick(c); /* c->parts may have moved: the next reconcile goes on */
            return;
        }
    }
}

/*
 * Dropping a replica the map took away. The map changes first and the partition's leader
 * then takes the replica out of the Raft configuration (follow_map_configs), which can
 * wait: a promoted replica has yet to hear of its promotion, a lossy link, no leader for a
 * while. Until then the configuration still counts the replica: stopped early, it leaves
 * a majority to be made of fewer replicas, and a replica of the same partition added here
 * again meanwhile starts empty and may not vote (seen under a lossy link: four voters, the
 * new one unconfirmed, the old source emptied and added back, and no leader ever again).
 * So a follower keeps its replica running, voting and acknowledging entries, until its
 * own committed configuration leaves it out, or the partition's leader answers that its
 * committed configuration does (STATUS_RELEASED; every member of the map is asked, every
 * RELEASE_ASK_MS). A leader removes itself and steps down first (reconcile_groups).
 */

/* Reads the answer to a release_probe (freed here; *c and *pid say whose it was): whether
 * it says that the asker is out of the group, and the node is not closing. */
static bool says_released(void *probe, int status, const uint8_t *data, size_t len, rcluster **c,
                          uint64_t *pid)
{
    release_probe *p = probe;
    *c = p->c;
    *pid = p->pid;
    free(p);
    return status == 0 && len >= 1 && (data[0] & STATUS_RELEASED) && !(*c)->closing;
}

static void on_release_status(void *ctx, int status, const strata_err *err, const uint8_t *data,
                              size_t len)
{
    rcluster *c;
    uint64_t pid;
    (void)err;
    if (!says_released(ctx, status, data, len, &c, &pid))
        return;
    lpart *lp = lpart_find(c, pid);
    const meta_partition *mp = meta_partition_find(c->meta, pid);
    if (lp != NULL && mp != NULL && !meta_partition_has(mp, c->self, NULL)) {
        lp->released = true;
        kick(c);
    }
}

/* Asks every other member of `mp` whether its committed configuration of the partition
 * leaves this node out (STATUS_RELEASED); `cb` hears each answer, its ctx a malloc'd
 * release_probe it frees. */
static void ask_members_released(rcluster *c, const meta_partition *mp, rpc_call_cb cb)
{
    buf b;
    buf_init(&b, 0);
    buf_put_varint(&b, mp->id);
    for (uint32_t k = 0; k < mp->n_members && !b.failed; k++) {
        uint64_t node = mp->members[k].node;
        release_probe *p = malloc(sizeof *p);
        strata_err err;
        if (p == NULL)
            break;
        *p = (release_probe){.c = c, .pid = mp->id};
        if (node == c->self || !node_usable(c, node) ||
            rpc_call(c->rpc, node, MSG_GROUP_STATUS, b.data, b.len, ATTEMPT_DEADLINE_MS, cb, p,
                     &err) < 0)
            free(p);
    }
    buf_free(&b);
}

static void ask_release(rcluster *c, lpart *lp, const meta_partition *mp)
{
    uint64_t now = now_ms(c);
    if (lp->release_asked_at != 0 && now - lp->release_asked_at < RELEASE_ASK_MS)
        return;
    lp->release_asked_at = now;
    ask_members_released(c, mp, on_release_status);
}

/* Whether this node may stop and delete its replica `lp`, which the map no longer gives
 * it (see "Dropping a replica the map took away"). */
static bool replica_releasable(rcluster *c, lpart *lp, const meta_partition *mp)
{
    raft_host_group_stats st;
    if (mp == NULL || lp->released) /* a dropped table's partitions go whole */
        return true;
    if (raft_host_group_info(c->host, lp->id, &st, NULL) < 0 || st.failed)
        return true; /* it acknowledges nothing any more */
    if (config_leaves_out(c, lp->id, c->self))
        return true;
    ask_release(c, lp, mp);
    return false;
}

/* Starts the replicas the map gives this node and stops those it took away. */
static void reconcile_groups(rcluster *c)
{
    for (size_t i = 0; i < meta_partition_count(c->meta); i++) {
        const meta_partition *mp = meta_partition_at(c->meta, i);
        meta_role role;
        if (!meta_partition_has(mp, c->self, &role) || lpart_find(c, mp->id) != NULL)
            continue;
        /* A replica that left this node a moment ago: its index is forgotten in memory but
         * not yet on disk (the flush is on its way), so lsm_durable_index would still name
         * the old replica's index. Start it once the forget is durable. */
        if (lsm_applied_index(c->engine, mp->id) == 0 && lsm_durable_index(c->engine, mp->id) != 0)
            continue;
        start_replica(c, mp, role);
    }
    for (size_t i = 0; i < c->n_parts;) {
        lpart *lp = &c->parts[i];
        const meta_partition *mp = meta_partition_find(c->meta, lp->id);
        /* A child created by a SPLIT entry before this node's map shows the split has
         * an id the map has not handed out yet: not a dropped partition. */
        if ((mp != NULL && meta_partition_has(mp, c->self, NULL)) ||
            (mp == NULL && lp->id >= meta_next_partition_id(c->meta))) {
            lp->released = false; /* the map gives it (back): ask again once it does not */
            lp->release_asked_at = 0;
            i++;
            continue;
        }
        /* A leader moved away first takes itself out of the Raft configuration
         * (follow_map_configs) and steps down once that commits; stopping it before would
         * leave the others a configuration that still counts it. A follower waits for the
         * same (replica_releasable). */
        if (mp != NULL && raft_host_is_leader(c->host, lp->id)) {
            i++;
            continue;
        }
        if (!replica_releasable(c, lp, mp)) {
            i++;
            continue;
        }
        uint64_t id = lp->id;
        for (install *in = c->installs; in != NULL; in = in->next)
            if (in->pid == id)
                in->dead = true;
        raft_host_stop_group(c->host, id, NULL);
        wal_drop_group(c->log, id, NULL, NULL, NULL);
        if (mp != NULL)
            delete_replica_data(c, &lp->desc); /* moved away; a dropped table goes whole */
        else if (meta_table_find(c->meta, lp->desc.table_id) == NULL)
            drop_later(c, lp->desc.table_id); /* a node outside the meta group applies no
                                               * TABLE_DROP: its map is fetched */
        range_forget(c, id);
        lpart_remove(c, lp);
    }
}

/*
 * The meta group's seats. The map names the group's members (meta_group in meta.h); the
 * meta leader moves a seat as it moves a partition's replica (schedule_meta_seats, with
 * the steps planned by placement_meta_seats: a learner added on the best free node,
 * promoted once caught up, the leaving voter removed) and makes the group's Raft configuration
 * follow the map (follow_meta_config). Each node follows the map for its own seat
 * (reconcile_meta_seat):
 *   - named and not running the group: it starts an empty replica (raft_host_join_group,
 *     remembered as "meta joined" in the cluster file so that a restart does not bootstrap
 *     it) that the leader fills from its log. Its map stays the one it fetched; entries the
 *     map holds already are not applied again (apply_meta);
 *   - not named and running the group: once the configuration leaves it out (its own
 *     committed one, or the leader's answer to MSG_GROUP_STATUS with STATUS_RELEASED), it
 *     stops the replica, drops its log and follows the map by fetching, as any node
 *     outside the group. Until then it votes on: a configuration of four voters with one
 *     gone needs every other one;
 *   - the voters to ask for the map (c->members, the cluster file) become the map's.
 * A member taken out while it was away learns it by fetching (meta_orphaned), from the
 * members it knows or, when none answers, the other nodes it knew (fetch_target).
 */

static member member_of(const meta_node *nd)
{
    member m = {.id = nd->id};
    snprintf(m.addr, sizeof m.addr, "%s", nd->peer_addr);
    return m;
}

static bool same_members(const member *a, size_t na, const member *b, size_t nb)
{
    for (size_t i = 0; na == nb && i < na; i++)
        if (a[i].id != b[i].id || strcmp(a[i].addr, b[i].addr) != 0)
            return false;
    return na == nb;
}

/* c->members := the map's voters, with their peer addresses; the cluster file with them. */
static void members_follow_map(rcluster *c, const meta_partition *g)
{
    member m[MAX_META_LIST];
    size_t n = 0;
    for (uint32_t k = 0; k < g->n_members && n < MAX_META_LIST; k++) {
        if (g->members[k].role != META_VOTER)
            continue;
        const meta_node *nd = meta_node_find(c->meta, g->members[k].node);
        if (nd == NULL)
            return;
        m[n++] = member_of(nd);
    }
    if (n == 0 || same_members(m, n, c->members, c->n_members))
        return;
    memcpy(c->members, m, n * sizeof *m);
    c->n_members = n;
    cluster_file_save(c, "the meta voters changed");
}

/* c->known := up to MAX_KNOWN_NODES other nodes of the map (not REMOVED), with their peer
 * addresses; the cluster file with them when they changed. Not from a map not applied yet
 * (index 0): a restarted member's map stays empty until a leader speaks. */
static void known_follow_map(rcluster *c)
{
    member m[MAX_KNOWN_NODES];
    size_t n = 0;
    for (size_t i = 0; i < meta_node_count(c->meta) && n < MAX_KNOWN_NODES; i++) {
        const meta_node *nd = meta_node_at(c->meta, i);
        if (nd->id != c->self && nd->state != META_NODE_REMOVED)
            m[n++] = member_of(nd);
    }
    if (c->meta_index == 0 || same_members(m, n, c->known, c->n_known))
        return;
    memcpy(c->known, m, n * sizeof *m);
    c->n_known = n;
    cluster_file_save(c, "the cluster's nodes changed");
}

/* Takes the seat the map gives this node: an empty replica joins the group. */
static void meta_seat_take(rcluster *c)
{
    strata_err err;
    c->meta_joined = true;
    if (cluster_file_write(c, &err) < 0 || raft_host_join_group(c->host, META_GROUP, 0, &err) < 0 ||
        meta_heartbeat(c, &err) < 0) {
        raft_host_stop_group(c->host, META_GROUP, NULL);
        c->meta_joined = false;
        fprintf(stderr, "stratad: cannot join the meta group: %s (retrying)\n", err.msg);
        return;
    }
    c->voter = true;
    c->meta_leaderless_since = 0;
    fprintf(stderr, "stratad: joining the meta group (the map gives this node a seat)\n");
}

/* Gives the seat up: the replica stops and its log goes; the map is fetched from now on. */
static void meta_seat_leave(rcluster *c)
{
    strata_err err;
    if (raft_host_stop_group(c->host, META_GROUP, &err) < 0 && err.code != ERR_NOT_FOUND) {
        fprintf(stderr, "stratad: cannot leave the meta group: %s (retrying)\n", err.msg);
        return;
    }
    wal_drop_group(c->log, META_GROUP, NULL, NULL, NULL);
    c->voter = false;
    c->meta_joined = false;
    c->meta_leaderless_since = 0;
    cluster_file_save(c, "this node left the meta group");
    fprintf(stderr, "stratad: left the meta group (the map moved this node's seat)\n");
}

static void on_seat_release(void *ctx, int status, const strata_err *err, const uint8_t *data,
                            size_t len)
{
    rcluster *c;
    uint64_t group;
    (void)err;
    if (!says_released(ctx, status, data, len, &c, &group) || !c->voter ||
        meta_partition_has(meta_group(c->meta), c->self, NULL))
        return;
    meta_seat_leave(c);
}

/* Whether the configuration leaves this node out: its own committed one says so now;
 * else the members of the map are asked (every RELEASE_ASK_MS) and an answer that says so
 * leaves the group (on_seat_release). */
static bool meta_seat_released(rcluster *c, const meta_partition *g)
{
    if (config_leaves_out(c, META_GROUP, c->self))
        return true;
    uint64_t now = now_ms(c);
    if (c->meta_release_asked_at != 0 && now - c->meta_release_asked_at < RELEASE_ASK_MS)
        return false;
    c->meta_release_asked_at = now;
    ask_members_released(c, g, on_seat_release); /* g->id is META_GROUP */
    return false;
}

static void reconcile_meta_seat(rcluster *c)
{
    const meta_partition *g = meta_group(c->meta);
    if (!c->formed || g->n_members == 0)
        return; /* not recorded yet: the members the group formed with hold the seats */
    members_follow_map(c, g);
    known_follow_map(c);
    bool named = meta_partition_has(g, c->self, NULL);
    if (named && !c->voter)
        meta_seat_take(c);
    else if (!named && c->voter && !raft_host_is_leader(c->host, META_GROUP) &&
             meta_seat_released(c, g))
        meta_seat_leave(c);
}

/* One engine range delete [lo, hi), recording no log index; with `forget`, the engine
 * also forgets partition `pid`'s applied index, atomically with the delete. ERR_BUSY under
 * back-pressure. */
static int engine_delete_range(rcluster *c, const uint8_t *lo, size_t lo_len, const uint8_t *hi,
                               size_t hi_len, bool forget, uint64_t pid, strata_err *err)
{
    lsm_batch *b = lsm_batch_new();
    if (b == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    int rc = lsm_batch_delete_range(b, lo, lo_len, hi, hi_len, err);
    if (rc == 0)
        rc = forget ? lsm_write_forget(c->engine, b, pid, err) : lsm_write(c->engine, b, 0, 0, err);
    lsm_batch_free(b);
    return rc;
}

static void on_forget_flushed(void *arg, const strata_err *err)
{
    (void)err;
    kick(arg); /* reconcile may now start a replica of a range it forgot */
}

/* Deletes a replica's data once the map moved it to other nodes, and the replica's
 * applied index with it: a replica of the same partition added here later must start
 * from nothing, not claim the old index over deleted data. The replica's group is stopped
 * first, so nothing writes the range again. A failure (engine busy) keeps data and index
 * together, which is a consistent (old) replica: only space stays used. */
static void delete_replica_data(rcluster *c, const partition_desc *d)
{
    uint8_t lo[12], hi[12];
    router_partition_bounds(d, lo, hi);
    strata_err err;
    if (engine_delete_range(c, lo, 12, hi, 12, true, d->id, &err) < 0) {
        fprintf(stderr, "stratad: partition %" PRIu64 " moved away; its data stays for now\n",
                d->id);
        return;
    }
    lsm_flush(c->engine, on_forget_flushed, c); /* until then the forget is not durable */
}

/* Deletes the data of dropped tables (an engine range delete; repeated harmlessly when
 * the drop is applied again after a restart). */
static void delete_dropped(rcluster *c)
{
    while (c->n_drops > 0) {
        uint64_t t = c->drops[c->n_drops - 1];
        uint8_t lo[4], hi[4];
        put_be(lo, t, 4);
        put_be(hi, t + 1, 4);
        strata_err err;
        if (engine_delete_range(c, lo, 4, hi, 4, false, 0, &err) < 0 && err.code == ERR_BUSY)
            return; /* next tick */
        c->n_drops--;
    }
}

/* The ids of the groups the log holds (malloc'd, *n of them), NULL when none or out of
 * memory. */
static uint64_t *log_group_ids(const rcluster *c, size_t *n)
{
    *n = wal_groups(c->log, NULL, 0);
    uint64_t *ids = *n ? malloc(*n * sizeof *ids) : NULL;
    if (ids != NULL)
        *n = wal_groups(c->log, ids, *n);
    return ids;
}

/*
 * Logs that no replica here runs, found every LOG_SWEEP_MS; they would pin their log
 * segments for good.
 *
 * A dropped table's partition: the node was down when its table was dropped (its map,
 * replayed or fetched at start, no longer lists it, so reconcile_groups never met it), or
 * it left the meta group without its log's drop reaching the disk. The map hands out
 * partition ids in order and takes a partition away only with its table, so an id below
 * meta_next_partition_id that the map lacks is a dropped table's, however old this node's
 * copy of the map: its log goes, and the table's data too when the partition's range
 * record names it.
 *
 * A replica the map moved away while the node was down (restart_leftover).
 */
static void restart_leftover(rcluster *c, const meta_partition *mp);

static void sweep_logs(rcluster *c)
{
    size_t n;
    uint64_t *ids = c->formed && c->meta_index != 0 ? log_group_ids(c, &n) : NULL;
    for (size_t i = 0; ids != NULL && i < n; i++) {
        uint64_t id = ids[i];
        if (id != META_GROUP && lpart_find(c, id) != NULL)
            continue;
        const meta_partition *mp = id == META_GROUP ? NULL : meta_partition_find(c->meta, id);
        if (mp != NULL) {
            restart_leftover(c, mp);
            continue;
        }
        bool gone = id == META_GROUP ? !c->voter : id < meta_next_partition_id(c->meta);
        if (!gone)
            continue;
        split_range rg;
        if (id != META_GROUP && range_read(c, id, &rg) == 1 &&
            meta_table_find(c->meta, rg.table_id) == NULL)
            drop_later(c, rg.table_id);
        wal_drop_group(c->log, id, NULL, NULL, NULL);
        fprintf(stderr,
                "stratad: log group %" PRIu64 " belongs to no replica any more (%s): "
                "dropped\n",
                id, id == META_GROUP ? "the meta group, left" : "a dropped table");
    }
    free(ids);
}

/*
 * A replica the map moved away while this node was down: the map lists the partition
 * without this node, so reconcile_groups starts nothing for it, and its log and data
 * would stay. It cannot simply be dropped: the partition's Raft configuration may still
 * count it (the leader could not commit the change without it, see "Dropping a replica
 * the map took away"), and a voter that loses its log may vote twice in a term.
 *   - One that can restart by itself (its state in the engine, or its log from the first
 *     entry) restarts as any restarted replica does (start_replica) and votes again;
 *     reconcile_groups then lets it go the usual way once the configuration leaves it
 *     out, log and data. Should the map give the partition back to this node first, it
 *     simply runs on. A local replica that now serves part of its range makes
 *     start_replica wait. (Its epoch is past 1, since the map moved it: it never
 *     bootstraps.)
 *   - Any other (its state lost with the engine's memtable: a copy from its leader that a
 *     crash interrupted, since an installed copy is flushed at once and a log is compacted
 *     only up to what the engine holds durably; it would have to be fed, which no member
 *     does for a replica the map left out) asks the partition's members
 *     (ask_members_released); once one answers that its committed configuration leaves
 *     this node out, what the copy left goes (forget_lost_copy), then the log.
 */

/* pid's entry in the map while the map leaves this node out, no local replica runs it
 * and its log group is still here; else NULL (given back, restarted or dropped). */
static const meta_partition *leftover_log(rcluster *c, uint64_t pid)
{
    wal_group_info gi;
    const meta_partition *mp = meta_partition_find(c->meta, pid);
    if (mp == NULL || meta_partition_has(mp, c->self, NULL) || lpart_find(c, pid) != NULL ||
        wal_group_state(c->log, pid, &gi, NULL) < 0)
        return NULL;
    return mp;
}

static void on_lost_copy_forgotten(void *arg, const strata_err *err)
{
    rcluster *c = ((release_probe *)arg)->c;
    uint64_t pid = ((release_probe *)arg)->pid;
    free(arg);
    if ((err != NULL && err->code != ERR_NONE) || c->closing)
        return; /* the next sweep asks again */
    if (leftover_log(c, pid) == NULL)
        return; /* given back, restarted or dropped meanwhile */
    wal_drop_group(c->log, pid, NULL, NULL, NULL);
    fprintf(stderr,
            "stratad: log group %" PRIu64 " belongs to no replica any more (a replica "
            "moved away while this node was down, its state lost): what its copy left "
            "deleted, its log dropped\n",
            pid);
}

/* Deletes what an interrupted copy into `mp`'s replica left in the engine (the items of
 * its range that reached a table file, its range record, its copy mark), and drops the
 * replica's log once that is durable: a crash in between finds the log again, and the
 * next sweep asks and deletes again. The range is the record's (the copy wrote within
 * it), else the map's. A local replica that meets that range (a split's child started
 * here since) keeps its data: it wiped the range's stale items when it started. */
static void forget_lost_copy(rcluster *c, const meta_partition *mp)
{
    split_range rg;
    int have = range_read(c, mp->id, &rg);
    if (have < 0)
        return;
    partition_desc d = replica_desc(mp, have == 1 ? &rg : NULL);
    uint8_t lo[12], hi[12];
    router_partition_bounds(&d, lo, hi);
    lsm_batch *b = lsm_batch_new();
    release_probe *p = malloc(sizeof *p);
    strata_err err;
    int rc = b != NULL && p != NULL ? 0 : strata_err_set(&err, ERR_NOMEM, "out of memory");
    if (rc == 0 && !local_overlap(c, mp->id, d.table_id, d.hash_lo, d.hash_hi))
        rc = lsm_batch_delete_range(b, lo, 12, hi, 12, &err);
    if (rc == 0)
        rc = replica_keys_delete(b, mp->id, &err);
    if (rc == 0)
        rc = lsm_write_forget(c->engine, b, mp->id, &err);
    lsm_batch_free(b);
    if (rc < 0) {
        free(p); /* the next sweep asks again */
        return;
    }
    *p = (release_probe){.c = c, .pid = mp->id};
    lsm_flush(c->engine, on_lost_copy_forgotten, p);
}

static void on_leftover_status(void *ctx, int status, const strata_err *err, const uint8_t *data,
                               size_t len)
{
    rcluster *c;
    uint64_t pid;
    (void)err;
    if (!says_released(ctx, status, data, len, &c, &pid))
        return;
    const meta_partition *mp = leftover_log(c, pid);
    if (mp == NULL)
        return; /* given back, restarted or dropped meanwhile */
    forget_lost_copy(c, mp);
}

static void restart_leftover(rcluster *c, const meta_partition *mp)
{
    if (meta_partition_has(mp, c->self, NULL))
        return;
    if (lsm_durable_index(c->engine, mp->id) == 0 && !log_from_start(c, mp->id)) {
        ask_members_released(c, mp, on_leftover_status);
        return;
    }
    start_replica(c, mp, META_LEARNER);
    if (lpart_find(c, mp->id) != NULL)
        fprintf(stderr,
                "stratad: partition %" PRIu64 " moved away while this node was down: its "
                "replica restarts from its log until its Raft group lets it go\n",
                mp->id);
}

/* Groups in the log that no replica here runs. */
static size_t unclaimed_logs(const rcluster *c)
{
    size_t n, out = 0;
    uint64_t *ids = log_group_ids(c, &n);
    for (size_t i = 0; ids != NULL && i < n; i++)
        out += ids[i] == META_GROUP ? !c->voter : lpart_find(c, ids[i]) == NULL;
    free(ids);
    return out;
}

static void reconcile(rcluster *c)
{
    if (c->closing)
        return;
    for (size_t i = 0; i < meta_node_count(c->meta); i++) {
        const meta_node *n = meta_node_at(c->meta, i);
        if (n->state != META_NODE_REMOVED)
            peer_ensure(c, n->id, n->peer_addr);
    }
    reconcile_groups(c);
    reconcile_meta_seat(c);
    splits_step(c);
    installs_step(c);
    seeds_step(c);
    delete_dropped(c);
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].busy) {
            c->parts[i].busy = false;
            raft_host_apply_resume(c->host, c->parts[i].id);
        }
    finish_meta_waiters(c);
    finish_catalog_syncs(c);
    finish_drop_checks(c);
}

static void on_kick(uv_timer_t *t)
{
    rcluster *c = t->data;
    c->kick_armed = false;
    reconcile(c);
}

/* Runs reconcile() at the next loop iteration: callers may be inside the host. */
static void kick(rcluster *c)
{
    if (c->kick_armed || c->closing)
        return;
    c->kick_armed = true;
    uv_timer_start(&c->kick, on_kick, 0, 0);
}

static bool partition_in_map(void *ctx, uint64_t pid)
{
    return meta_partition_find(((rcluster *)ctx)->meta, pid) != NULL;
}

/* The partition's load over the window since its last sample (pstats.h's figure, from
 * the capacity it consumed here). Every replica samples, so a new leader's first figure
 * covers one window, part of which it did not lead (it reads low once). */
static void sample_load(rcluster *c, lpart *lp, uint64_t now)
{
    cap_counters k = {0};
    if (!capacity_partition_stats(c->cap, lp->id, &k))
        memset(&k, 0, sizeof k);
    if (lp->load_at != 0 && now > lp->load_at)
        lp->load = pstats_load_rate(k.consumed_nano[CAP_READ] - lp->load_nano[CAP_READ],
                                    k.consumed_nano[CAP_WRITE] - lp->load_nano[CAP_WRITE],
                                    now - lp->load_at);
    lp->load_nano[CAP_READ] = k.consumed_nano[CAP_READ];
    lp->load_nano[CAP_WRITE] = k.consumed_nano[CAP_WRITE];
    lp->load_at = now;
}

/* Tells every other node the figures of the partitions this node leads (in messages of
 * at most PSTATS_MAX_ENTRIES; with their loads, sampled here on every replica), and
 * forgets figures of partitions no longer in the map. */
static void push_stats(rcluster *c)
{
    uint64_t now = now_ms(c);
    if (now - c->last_stats_push < STATS_PUSH_MS || !c->formed || c->host == NULL)
        return;
    c->last_stats_push = now;
    pstats_prune(c->heard, partition_in_map, c);
    pstats_entry *e = malloc((c->n_parts ? c->n_parts : 1) * sizeof *e);
    if (e == NULL)
        return;
    size_t n = 0;
    for (size_t i = 0; i < c->n_parts; i++) {
        sample_load(c, &c->parts[i], now);
        if (!c->parts[i].poisoned && raft_host_is_leader(c->host, c->parts[i].id))
            e[n++] = (pstats_entry){c->parts[i].id, c->parts[i].stats, c->parts[i].load};
    }
    buf b;
    buf_init(&b, 0);
    for (size_t at = 0; at < n; at += PSTATS_MAX_ENTRIES) {
        size_t k = n - at < PSTATS_MAX_ENTRIES ? n - at : PSTATS_MAX_ENTRIES;
        buf_reset(&b);
        pstats_encode(e + at, k, &b);
        for (size_t j = 0; !b.failed && j < meta_node_count(c->meta); j++) {
            const meta_node *nd = meta_node_at(c->meta, j);
            if (nd->id != c->self && nd->state != META_NODE_REMOVED)
                rpc_send(c->rpc, nd->id, MSG_PART_STATS, b.data, b.len, NULL);
        }
    }
    buf_free(&b);
    free(e);
}

/* ------------------------------------------------------------------ capacity shares */

/* Where table t's unused capacity waits (capshare.h): every node holding a replica of it
 * weighs 1 per replica and CAP_LEADER_WEIGHT per leader hint, as the map says (the same
 * figures on every node). Returns the number of weights written to c->weights. */
static size_t table_weights(rcluster *c, const table_info *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n_partitions; i++) {
        const meta_partition *mp = meta_partition_find(c->meta, t->partitions[i].id);
        for (uint32_t m = 0; mp != NULL && m < mp->n_members; m++) {
            uint64_t node = mp->members[m].node;
            size_t j = 0;
            while (j < n && c->weights[j].node != node)
                j++;
            if (j == n) {
                if (n == META_MAX_NODES + 1)
                    continue;
                c->weights[n++] = (capshare_weight){.node = node};
            }
            c->weights[j].weight += node == mp->leader_hint ? CAP_LEADER_WEIGHT : 1;
        }
    }
    return n;
}

static void send_wants(rcluster *c, uint64_t period, size_t n)
{
    buf b;
    buf_init(&b, 0);
    capshare_encode(period, c->sent, n, &b);
    for (size_t j = 0; !b.failed && j < meta_node_count(c->meta); j++) {
        const meta_node *nd = meta_node_at(c->meta, j);
        if (nd->id != c->self && nd->state != META_NODE_REMOVED)
            rpc_send(c->rpc, nd->id, MSG_CAP_DEMAND, b.data, b.len, NULL);
    }
    buf_free(&b);
}

/* Sets this node's share of every provisioned table from every node's wants. */
static void set_shares(rcluster *c, uint64_t period, uint64_t now)
{
    const table_info *t = NULL;
    while ((t = catalog_next(c->cat, t ? t->schema.name : NULL, t ? t->schema.name_len : 0)) !=
           NULL) {
        if (t->billing == BILLING_PAY_PER_REQUEST)
            continue;
        size_t nw = table_weights(c, t);
        for (int k = 0; k < 2; k++) {
            int64_t rate = k == CAP_READ ? t->read_capacity : t->write_capacity;
            uint32_t ppm = capshare_share(c->shares, c->self, t->schema.table_id, (cap_kind)k,
                                          rate * 1000, c->weights, nw, period, now);
            capacity_set_node_share(c->cap, t->schema.table_id, (cap_kind)k, ppm, now);
        }
    }
}

/* One message carries every table's figures. */
_Static_assert(CAPSHARE_MAX_ENTRIES >= CATALOG_MAX_TABLES, "a demand message per table set");

/* At the start of every wall-clock second: tells the other nodes what each table wanted
 * here over the second before; CAP_SHARE_SETTLE_MS later, takes this node's share of
 * every provisioned table from every node's figures of that second (capshare.h). */
static void share_capacity(rcluster *c)
{
    if (!c->formed || c->rpc == NULL)
        return;
    uint64_t now = now_ms(c), wall = wall_ms(), period = wall / 1000;
    if (period != c->sent_period) {
        uint64_t span = c->last_collect != 0 ? now - c->last_collect : 1000;
        c->last_collect = now;
        c->sent_period = period;
        size_t n = capacity_demand_collect(c->cap, c->demand, CAPSHARE_MAX_ENTRIES);
        for (size_t i = 0; i < n; i++)
            c->wants[i] = capshare_want_of(&c->demand[i], span);
        capshare_expire(c->shares, now);
        size_t n_sent = capshare_own(c->shares, c->self, c->wants, n, c->sent,
                                     CAPSHARE_MAX_ENTRIES, period, now);
        if (n_sent > 0)
            send_wants(c, period, n_sent);
    }
    if (period != c->set_period && wall % 1000 >= CAP_SHARE_SETTLE_MS) {
        c->set_period = period;
        set_shares(c, period, now);
    }
}

static void on_lag_probe(uv_timer_t *t)
{
    rcluster *c = t->data;
    uint64_t now = uv_hrtime();
    if (now > c->lag_due_ns) {
        uint64_t late_us = (now - c->lag_due_ns) / 1000;
        if (late_us > c->lag_max_us)
            c->lag_max_us = late_us;
        if (late_us > LAG_SLOW_MS * 1000u)
            c->lags_slow++;
    }
    c->lag_due_ns = now + LAG_PROBE_MS * 1000000ull;
}

static void on_tick(uv_timer_t *t)
{
    rcluster *c = t->data;
    if (c->closing)
        return;
    if (!c->formed)
        ask_to_join(c);
    if ((!c->voter || meta_orphaned(c)) && now_ms(c) - c->last_fetch >= META_FETCH_MS)
        fetch_meta(c);
    if (c->cluster_file_stale)
        cluster_file_save(c, NULL);
    register_self(c);
    reconcile_format(c);
    snapshots_tick(c);
    reconcile(c);
    if (now_ms(c) - c->log_swept_at >= LOG_SWEEP_MS) {
        c->log_swept_at = now_ms(c);
        sweep_logs(c);
    }
    follow_map_configs(c);
    follow_meta_config(c);
    follow_map_leaders(c);
    follow_map_splits(c);
    auto_splits(c);
    schedule(c);
    push_stats(c);
    share_capacity(c);
}

/* ------------------------------------------------------------------ the router's calls */

const catalog *rcluster_catalog(const rcluster *c)
{
    return c->cat;
}

static int table_create_cmd(rcluster *c, const uint8_t *rec, size_t len, const catalog_change *ch,
                            meta_cmd *cmd, meta_partition **parts, strata_err *err)
{
    catalog *tmp = catalog_new();
    if (tmp == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    int rc = catalog_apply(tmp, rec, len, err);
    const table_info *t = rc == 0 ? catalog_find(tmp, ch->name, ch->name_len) : NULL;
    if (rc == 0 && t == NULL)
        rc = strata_err_set(err, ERR_INTERNAL, "catalog record without its table");
    if (rc == 0) {
        *parts = calloc(t->n_partitions, sizeof **parts);
        if (*parts == NULL)
            rc = strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    if (rc == 0)
        rc = placement_new_table(c->meta, t->schema.table_id, t->n_partitions, t->partitions[0].id,
                                 *parts, err);
    if (rc == 0) {
        /* The map's partitions are the catalog's, with the planner's replicas. */
        for (size_t i = 0; i < t->n_partitions; i++) {
            (*parts)[i].id = t->partitions[i].id;
            (*parts)[i].hash_lo = t->partitions[i].hash_lo;
            (*parts)[i].hash_hi = t->partitions[i].hash_hi;
        }
        *cmd = (meta_cmd){.kind = META_CMD_TABLE_CREATE,
                          .now_ms = wall_ms(),
                          .table_id = t->schema.table_id,
                          .name = ch->name,
                          .name_len = ch->name_len,
                          .schema = rec,
                          .schema_len = len,
                          .parts = *parts,
                          .n_parts = t->n_partitions};
    } else if (err->code == ERR_VALIDATION) {
        char why[STRATA_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        strata_err_set(err, ERR_UNAVAILABLE,
                       "The cluster cannot place a new table yet (%s); retry once three "
                       "availability zones have nodes",
                       why);
    }
    catalog_free(tmp);
    return rc;
}

/* Two nodes creating tables at once both stamp the next free ids from their copy of the
 * map: the meta group applies the first create and refuses the other ("id is used"). The
 * loser stamps ids above the ones it tried (and above the map's, once it has caught up)
 * and proposes again, so concurrent creates of different tables all succeed. A create
 * that lost on its name is answered with that error. */
#define CREATE_ATTEMPTS 8

typedef struct {
    rcluster *c;
    uint8_t *rec;
    size_t len;
    router_cb cb;
    void *ctx;
    int attempts;
} create_op;

static int create_propose(create_op *co, strata_err *err);

/* Replaces the record by the same table with ids above those it carried and at least
 * the map's next free ones. */
static int restamp_ids(create_op *co, strata_err *err)
{
    catalog *tmp = catalog_new();
    if (tmp == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    catalog_change ch;
    int rc = catalog_record_peek(co->rec, co->len, &ch, err);
    if (rc == 0)
        rc = catalog_apply(tmp, co->rec, co->len, err);
    const table_info *t = rc == 0 ? catalog_find(tmp, ch.name, ch.name_len) : NULL;
    if (rc == 0 && t == NULL)
        rc = strata_err_set(err, ERR_INTERNAL, "catalog record without its table");
    table_info copy;
    if (rc == 0)
        rc = catalog_table_copy(t, &copy, err);
    catalog_free(tmp);
    if (rc < 0)
        return -1;
    uint32_t tid = meta_next_table_id(co->c->meta);
    uint64_t pid = meta_next_partition_id(co->c->meta);
    if (tid <= copy.schema.table_id)
        tid = copy.schema.table_id + 1;
    if (copy.n_partitions > 0 && pid <= copy.partitions[copy.n_partitions - 1].id)
        pid = copy.partitions[copy.n_partitions - 1].id + 1;
    copy.schema.table_id = tid;
    for (size_t i = 0; i < copy.n_partitions; i++)
        copy.partitions[i].id = pid + i;
    buf b;
    buf_init(&b, 0);
    rc = catalog_encode_table(&copy, &b, err);
    catalog_table_free(&copy);
    if (rc < 0) {
        buf_free(&b);
        return -1;
    }
    free(co->rec);
    co->rec = b.data;
    co->len = b.len;
    return 0;
}

static void create_op_free(create_op *co)
{
    free(co->rec);
    free(co);
}

static void on_create_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    create_op *co = ctx;
    catalog_change ch;
    strata_err perr;
    bool id_clash = err != NULL && err->code == ERR_RESOURCE_IN_USE && !co->c->closing &&
                    co->attempts < CREATE_ATTEMPTS &&
                    catalog_record_peek(co->rec, co->len, &ch, &perr) == 0 &&
                    meta_table_find_name(co->c->meta, ch.name, ch.name_len) == NULL;
    if (id_clash && restamp_ids(co, &perr) == 0 && create_propose(co, &perr) == 0)
        return;
    /* Another node created the table first (with the same ids, or after them): the
     * caller hears what DynamoDB says, not which of the map's checks refused. */
    strata_err exists;
    if (err != NULL && err->code == ERR_RESOURCE_IN_USE &&
        catalog_record_peek(co->rec, co->len, &ch, &perr) == 0 &&
        meta_table_find_name(co->c->meta, ch.name, ch.name_len) != NULL) {
        strata_err_set(&exists, ERR_RESOURCE_IN_USE, "Table already exists: %.*s", (int)ch.name_len,
                       ch.name);
        err = &exists;
    }
    co->cb(co->ctx, err, res, len);
    create_op_free(co);
}

static int create_propose(create_op *co, strata_err *err)
{
    catalog_change ch;
    if (catalog_record_peek(co->rec, co->len, &ch, err) < 0)
        return -1;
    meta_cmd cmd;
    meta_partition *parts = NULL;
    if (table_create_cmd(co->c, co->rec, co->len, &ch, &cmd, &parts, err) < 0) {
        free(parts); /* placement may refuse after the array was allocated */
        return -1;
    }
    co->attempts++;
    int rc = propose_meta(co->c, &cmd, on_create_done, co, err);
    free(parts);
    return rc;
}

static int create_table(rcluster *c, const uint8_t *rec, size_t len, router_cb cb, void *ctx,
                        strata_err *err)
{
    create_op *co = calloc(1, sizeof *co);
    uint8_t *copy = len ? malloc(len) : NULL;
    if (co == NULL || copy == NULL) {
        free(co);
        free(copy);
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    }
    memcpy(copy, rec, len);
    *co = (create_op){.c = c, .rec = copy, .len = len, .cb = cb, .ctx = ctx};
    if (create_propose(co, err) < 0) {
        create_op_free(co);
        return -1;
    }
    return 0;
}

int rcluster_catalog_write(rcluster *c, const uint8_t *rec, size_t len, router_cb cb, void *ctx,
                           strata_err *err)
{
    if (c->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "The server is shutting down");
    catalog_change ch;
    if (catalog_record_peek(rec, len, &ch, err) < 0)
        return -1;
    const meta_table *t = meta_table_find_name(c->meta, ch.name, ch.name_len);
    meta_cmd cmd;
    if (ch.drop) {
        if (t == NULL)
            return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
        cmd = (meta_cmd){.kind = META_CMD_TABLE_DROP, .now_ms = wall_ms(), .table_id = t->id};
    } else if (t != NULL) {
        /* The caller built rec from the catalog, which mirrors this map: t's blob. */
        cmd = (meta_cmd){.kind = META_CMD_TABLE_SCHEMA,
                         .now_ms = wall_ms(),
                         .table_id = t->id,
                         .schema = rec,
                         .schema_len = len,
                         .schema_base = meta_schema_hash(t)};
    } else {
        return create_table(c, rec, len, cb, ctx, err);
    }
    return propose_meta(c, &cmd, cb, ctx, err);
}

int rcluster_write(rcluster *c, uint32_t table_id, uint64_t hash, const uint8_t *cmd, size_t len,
                   router_cb cb, void *ctx, strata_err *err)
{
    if (c->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "The server is shutting down");
    const meta_partition *mp = meta_partition_for_hash(c->meta, table_id, hash);
    if (mp == NULL)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    /* The log entry carries the key's hash: a replica that no longer owns it (a split
     * applied before this entry) refuses it unapplied, and the router sends it on. */
    op *o = op_new(c, OP_WRITE, NULL, PENTRY_WRITE_HEADER + len);
    if (o == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    pentry_write_header(o->data, hash);
    memcpy(o->data + PENTRY_WRITE_HEADER, cmd, len);
    o->pid = mp->id;
    o->hash = hash;
    o->table_id = table_id;
    o->wcb = cb;
    o->ctx = ctx;
    op_start(o);
    return 0;
}

int rcluster_read(rcluster *c, uint32_t table_id, uint64_t partition_id,
                  const partition_read_req *req, arena *a, router_read_cb cb, void *ctx,
                  strata_err *err)
{
    if (c->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "The server is shutting down");
    const meta_partition *mp = meta_partition_find(c->meta, partition_id);
    if (mp == NULL || mp->table_id != table_id)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "Requested resource not found");
    op *o = op_new(c, OP_READ, NULL, 0);
    if (o == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    o->pid = partition_id;
    o->table_id = table_id;
    o->exp_lo = mp->hash_lo;
    o->exp_hi = mp->hash_hi;
    /* A GET or Query reads one partition key: it follows the key through splits. */
    const av *pk = req->kind == PARTITION_GET    ? av_map_get(req->key, req->ks.hash_name,
                                                              req->ks.hash_name_len)
                   : req->kind == PARTITION_QUERY ? req->hash_value
                                                  : NULL;
    if (pk != NULL) {
        o->rekey = true;
        o->hash = key_hash(pk);
    }
    o->req = req;
    o->arena = a;
    o->rcb = cb;
    o->ctx = ctx;
    op_start(o);
    return 0;
}

/* An operator's leader rebalance: the balanced plan made from this node's map, proposed
 * one SET_LEADER after the other (through the meta leader, like any meta command). */
typedef struct {
    rcluster *c;
    router_cb cb;
    void *ctx;
    placement_leader *plan;
    size_t n, next;
} rebalance_req;

static void rebalance_step(rebalance_req *r);

static void on_rebalance_step(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    rebalance_req *r = ctx;
    (void)res;
    (void)len;
    /* A step refused by the map (the partition moved meanwhile) is skipped: the scheduler
     * keeps the hints balanced anyway. Closing ends the whole request. */
    if (err != NULL && r->c->closing) {
        r->cb(r->ctx, err, NULL, 0);
        free(r->plan);
        free(r);
        return;
    }
    rebalance_step(r);
}

static void rebalance_step(rebalance_req *r)
{
    while (r->next < r->n) {
        placement_leader *pl = &r->plan[r->next++];
        meta_cmd cmd = {.kind = META_CMD_SET_LEADER,
                        .now_ms = wall_ms(),
                        .partition_id = pl->partition_id,
                        .node_id = pl->leader};
        strata_err err;
        if (propose_meta(r->c, &cmd, on_rebalance_step, r, &err) == 0)
            return;
    }
    char text[32];
    int len = snprintf(text, sizeof text, "%zu", r->n);
    r->cb(r->ctx, NULL, (const uint8_t *)text, (size_t)len);
    free(r->plan);
    free(r);
}

int rcluster_rebalance_leaders(rcluster *c, router_cb cb, void *ctx, strata_err *err)
{
    if (!c->formed)
        return strata_err_set(err, ERR_UNAVAILABLE, "this node does not know the cluster map yet");
    rebalance_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    *r = (rebalance_req){.c = c, .cb = cb, .ctx = ctx};
    if (placement_leaders(c->meta, &r->plan, &r->n, err) != 0) {
        free(r);
        return -1;
    }
    /* Partition leaders that gave up on a transfer here try again at once. */
    for (size_t i = 0; i < c->n_parts; i++)
        c->parts[i].transfer_retry_at = 0;
    rebalance_step(r);
    return 0;
}

int rcluster_node_state(rcluster *c, uint64_t node, const char *state, router_cb cb, void *ctx,
                        strata_err *err)
{
    meta_node_state st;
    if (strcasecmp(state, "DRAINING") == 0)
        st = META_NODE_DRAINING;
    else if (strcasecmp(state, "REMOVED") == 0)
        st = META_NODE_REMOVED;
    else if (strcasecmp(state, "ACTIVE") == 0)
        st = META_NODE_ACTIVE;
    else
        return strata_err_set(err, ERR_VALIDATION,
                              "state must be DRAINING, REMOVED or ACTIVE, not '%s'", state);
    if (meta_node_find(c->meta, node) == NULL)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND, "node %" PRIu64 " is not in the cluster",
                              node);
    meta_cmd cmd = {.kind = META_CMD_NODE_STATE, .now_ms = wall_ms()};
    cmd.node.id = node;
    cmd.node.state = st;
    return propose_meta(c, &cmd, cb, ctx, err);
}

/* A partition's figures as its leader knows them: this node's replica when it leads,
 * else what the leader told us lately, else this node's replica (possibly behind), else
 * nothing. */
static partition_stats partition_figures(const rcluster *c, uint64_t pid)
{
    const lpart *lp = lpart_find(c, pid);
    partition_stats st = {0, 0};
    uint64_t now = now_ms(c);
    if (lp != NULL && c->host != NULL && raft_host_is_leader(c->host, pid))
        return lp->stats;
    if (pstats_get(c->heard, pid, now > 3 * STATS_PUSH_MS ? now - 3 * STATS_PUSH_MS : 0, &st))
        return st;
    return lp != NULL ? lp->stats : st;
}

/* A split of the map (router_split): proposed with the map's next partition id; another
 * command that took that id first makes the meta group refuse it (ERR_RESOURCE_IN_USE),
 * and it is proposed again with a fresh id. */
typedef struct {
    rcluster *c;
    uint64_t pid, epoch, split, child;
    router_cb cb;
    void *ctx;
    int attempts;
} split_op;

static int split_propose(split_op *so, strata_err *err);

static void on_split_done(void *ctx, const strata_err *err, const uint8_t *res, size_t len)
{
    split_op *so = ctx;
    strata_err perr;
    (void)res;
    (void)len;
    if (err != NULL && err->code == ERR_RESOURCE_IN_USE && !so->c->closing &&
        so->attempts < SPLIT_ATTEMPTS && split_propose(so, &perr) == 0)
        return;
    if (err != NULL) {
        so->cb(so->ctx, err, NULL, 0);
    } else {
        char out[160];
        int n = snprintf(out, sizeof out,
                         "{\"partition\":%" PRIu64 ",\"child\":%" PRIu64
                         ",\"split_hash\":\"%016" PRIx64 "\"}",
                         so->pid, so->child, so->split);
        so->cb(so->ctx, NULL, (const uint8_t *)out, (size_t)n);
    }
    free(so);
}

static int split_propose(split_op *so, strata_err *err)
{
    uint64_t id = meta_next_partition_id(so->c->meta);
    so->child = id > so->child ? id : so->child + 1;
    so->attempts++;
    meta_cmd cmd = {.kind = META_CMD_SPLIT,
                    .now_ms = wall_ms(),
                    .partition_id = so->pid,
                    .epoch = so->epoch,
                    .split_hash = so->split,
                    .new_partition_id = so->child};
    return propose_meta(so->c, &cmd, on_split_done, so, err);
}

int rcluster_split(rcluster *c, uint64_t partition_id, bool has_hash, uint64_t hash, router_cb cb,
                   void *ctx, strata_err *err)
{
    if (c->closing)
        return strata_err_set(err, ERR_UNAVAILABLE, "The server is shutting down");
    const meta_partition *mp = meta_partition_find(c->meta, partition_id);
    if (mp == NULL)
        return strata_err_set(err, ERR_RESOURCE_NOT_FOUND,
                              "partition %" PRIu64 " is not in the cluster map", partition_id);
    uint64_t split = hash;
    if (!has_hash && split_middle(mp->hash_lo, mp->hash_hi, &split, err) < 0)
        return -1;
    if (!split_hash_valid(mp->hash_lo, mp->hash_hi, split))
        return strata_err_set(err, ERR_VALIDATION,
                              "split hash %016" PRIx64 " is not inside (%016" PRIx64
                              ", %016" PRIx64 "] of partition %" PRIu64,
                              split, mp->hash_lo, mp->hash_hi, partition_id);
    split_op *so = calloc(1, sizeof *so);
    if (so == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    *so = (split_op){
        .c = c, .pid = partition_id, .epoch = mp->epoch, .split = split, .cb = cb, .ctx = ctx};
    if (split_propose(so, err) < 0) {
        free(so);
        return -1;
    }
    return 0;
}

partition_stats rcluster_table_stats(const rcluster *c, uint32_t table_id)
{
    partition_stats sum = {0, 0};
    size_t n;
    const meta_partition *mp = meta_table_partitions(c->meta, table_id, &n);
    for (size_t i = 0; i < n; i++) {
        partition_stats st = partition_figures(c, mp[i].id);
        sum.item_count += st.item_count;
        sum.size_bytes += st.size_bytes;
    }
    return sum;
}

size_t rcluster_inflight(const rcluster *c)
{
    return c->n_ops;
}

bool rcluster_refused(const rcluster *c, strata_err *why)
{
    if (c->refused.code == ERR_NONE)
        return false;
    if (why != NULL)
        *why = c->refused;
    return true;
}

bool rcluster_storage_failed(const rcluster *c, strata_err *why)
{
    return router_log_or_engine_failed(c->log, c->engine, why) ||
           raft_wal_storage_refused(&c->rws, why);
}

bool rcluster_ready(const rcluster *c)
{
    /* A draining node still takes requests (it routes them like any node). */
    const meta_node *n = c->formed ? meta_node_find(c->meta, c->self) : NULL;
    return n != NULL && n->state != META_NODE_JOINING && n->state != META_NODE_REMOVED;
}

static const char *raft_state_name(int st)
{
    switch (st) {
    case 1:
        return "follower";
    case 2:
        return "candidate";
    case 3:
        return "leader";
    default:
        return "unavailable";
    }
}

static void json_str(buf *out, const char *s)
{
    buf_put_u8(out, '"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            buf_printf(out, "\\%c", ch);
        else if (ch < 0x20)
            buf_printf(out, "\\u%04x", ch);
        else
            buf_put_u8(out, ch);
    }
    buf_put_u8(out, '"');
}

/* The peer link to node `id` as this node's rpc layer counts it since start (nothing for
 * this node itself): a send refused because the queue to that node was full is a Raft
 * message lost until the next heartbeat retries it. */
static void link_stats_json(rcluster *c, uint64_t id, buf *out)
{
    rpc_peer_stats st;
    if (id == c->self || rpc_peer_stats_get(c->rpc, id, &st, NULL) != 0)
        return;
    buf_printf(out,
               ",\"link\":{\"frames_sent\":%" PRIu64 ",\"writes\":%" PRIu64
               ",\"frames_received\":%" PRIu64 ",\"queued_bytes\":%" PRIu64
               ",\"busy_rejects\":%" PRIu64 ",\"connects\":%" PRIu64
               ",\"connect_failures\":%" PRIu64 ",\"handshake_rejects\":%" PRIu64
               ",\"auth_failures\":%" PRIu64 ",\"authenticated\":%s,\"call_timeouts\":%" PRIu64
               ",\"call_failures\":%" PRIu64 "}",
               st.frames_sent, st.writes, st.frames_received, st.queued_bytes, st.busy_rejects,
               st.connects, st.connect_failures, st.handshake_rejects, st.auth_failures,
               st.authenticated ? "true" : "false", st.call_timeouts, st.call_failures);
}

void rcluster_status_json(rcluster *c, buf *out)
{
    buf_printf(out,
               "{\"node_id\":%" PRIu64 ",\"ready\":%s,\"meta_voter\":%s,\"meta_leader\":%" PRIu64
               ",\"meta_index\":%" PRIu64 ",",
               c->self, rcluster_ready(c) ? "true" : "false", c->voter ? "true" : "false",
               meta_leader(c), c->meta_index);
    const meta_partition *g = meta_group(c->meta);
    buf_printf(out, "\"meta_format\":%u,", meta_format(c->meta));
    buf_printf(out, "\"meta_group\":{\"epoch\":%" PRIu64 ",\"seats\":%u,\"members\":[", g->epoch,
               meta_group_seats(c->meta));
    for (uint32_t k = 0; k < g->n_members; k++)
        buf_printf(out, "%s{\"node\":%" PRIu64 ",\"role\":\"%s\"}", k ? "," : "",
                   g->members[k].node, g->members[k].role == META_VOTER ? "voter" : "learner");
    buf_printf(out, "]},");
    buf_printf(out,
               "\"router\":{\"retries\":%" PRIu64 ",\"woken_by_leader\":%" PRIu64
               ",\"reads_via_parent\":%" PRIu64 ",\"strong_via_parent\":%" PRIu64
               ",\"flush_hints\":%" PRIu64 ",\"early_delivered\":%" PRIu64
               ",\"forwarded_writes\":%" PRIu64 ",\"forwarded_reads\":%" PRIu64 "},",
               c->counters.retries, c->counters.woken_by_leader, c->counters.reads_via_parent,
               c->counters.strong_via_parent, c->counters.flush_hints, c->counters.early_delivered,
               c->counters.forwarded_writes, c->counters.forwarded_reads);
    buf_printf(out, "\"loop\":{\"lag_max_ms\":%.1f,\"lags_over_%dms\":%" PRIu64 "},",
               (double)c->lag_max_us / 1000.0, LAG_SLOW_MS, c->lags_slow);
    lsm_stats es;
    lsm_get_stats(c->engine, &es);
    buf_printf(out,
               "\"engine\":{\"flushes\":%" PRIu64 ",\"compactions\":%" PRIu64
               ",\"write_stalls\":%" PRIu64 ",\"paced_ms\":%" PRIu64
               ",\"memtables\":%d,\"memtable_bytes\":%zu,\"level0_files\":%d},",
               es.flushes, es.compactions, es.write_stalls, es.paced_ms, es.memtables,
               es.memtable_bytes, es.files[0]);
    wal_stats ws;
    wal_get_stats(c->log, &ws);
    buf_printf(out,
               "\"log\":{\"groups\":%zu,\"unclaimed\":%zu,\"segments\":%" PRIu64 ",\"ops\":%" PRIu64
               ",\"batches\":%" PRIu64 ",\"syncs\":%" PRIu64 ",\"holds\":%" PRIu64 "},",
               wal_groups(c->log, NULL, 0), unclaimed_logs(c), ws.segments, ws.ops, ws.batches,
               ws.syncs, ws.holds);
    rpc_stats rs;
    rpc_stats_get(c->rpc, &rs);
    buf_printf(out,
               "\"rpc\":{\"peer_secrets\":%zu,\"peer_secret_optional\":%s,"
               "\"unauthenticated\":%zu,\"accepted\":%" PRIu64 ",\"refused\":%" PRIu64
               ",\"handshake_rejects\":%" PRIu64 ",\"auth_failures\":%" PRIu64
               ",\"handshake_timeouts\":%" PRIu64 ",\"corrupt_frames\":%" PRIu64 "},",
               rs.secrets, rs.secrets_optional ? "true" : "false", rs.unauthenticated, rs.accepted,
               rs.refused, rs.handshake_rejects, rs.auth_failures, rs.handshake_timeouts,
               rs.corrupt_frames);
    buf_printf(out, "\"nodes\":[");
    for (size_t i = 0; i < meta_node_count(c->meta); i++) {
        const meta_node *n = meta_node_at(c->meta, i);
        buf_printf(out, "%s{\"id\":%" PRIu64 ",\"az\":", i ? "," : "", n->id);
        json_str(out, n->az);
        buf_printf(out, ",\"host\":");
        json_str(out, n->host);
        buf_printf(out,
                   ",\"state\":\"%s\",\"format\":%u,\"client\":", meta_node_state_name(n->state),
                   n->format);
        json_str(out, n->client_addr);
        buf_printf(out, ",\"peer\":");
        json_str(out, n->peer_addr);
        size_t replicas = 0;
        for (size_t k = 0; k < meta_partition_count(c->meta); k++)
            replicas += meta_partition_has(meta_partition_at(c->meta, k), n->id, NULL);
        buf_printf(out, ",\"connected\":%s,\"stopping\":%s,\"replicas\":%zu",
                   node_usable(c, n->id) ? "true" : "false",
                   node_stopping(c, n->id) ? "true" : "false", replicas);
        link_stats_json(c, n->id, out);
        buf_put_u8(out, '}');
    }
    buf_printf(out, "],\"partitions\":[");
    for (size_t i = 0; i < meta_partition_count(c->meta); i++) {
        const meta_partition *mp = meta_partition_at(c->meta, i);
        const meta_table *t = meta_table_find(c->meta, mp->table_id);
        buf_printf(out, "%s{\"id\":%" PRIu64 ",\"table_id\":%u,\"table\":", i ? "," : "", mp->id,
                   mp->table_id);
        json_str(out, t != NULL ? t->name : "");
        uint64_t leader =
            lpart_find(c, mp->id) ? raft_host_leader(c->host, mp->id) : hint_get(c, mp->id);
        buf_printf(out,
                   ",\"hash_lo\":\"%016" PRIx64 "\",\"hash_hi\":\"%016" PRIx64
                   "\",\"epoch\":%" PRIu64 ",\"leader\":%" PRIu64 ",\"leader_hint\":%" PRIu64
                   ",\"members\":[",
                   mp->hash_lo, mp->hash_hi, mp->epoch, leader, mp->leader_hint);
        for (uint32_t k = 0; k < mp->n_members; k++)
            buf_printf(out, "%s%" PRIu64, k ? "," : "", mp->members[k].node);
        buf_printf(out, "]");
        raft_host_group_stats st;
        if (lpart_find(c, mp->id) != NULL && raft_host_group_info(c->host, mp->id, &st, NULL) == 0)
            buf_printf(out,
                       ",\"local\":{\"state\":\"%s\",\"term\":%" PRIu64 ",\"commit_index\":%" PRIu64
                       ",\"applied_index\":%" PRIu64 ",\"last_index\":%" PRIu64
                       ",\"snapshot_index\":%" PRIu64 ",\"installs\":%" PRIu64
                       ",\"installing\":%s,\"failed\":%s,\"lingering\":%s}",
                       raft_state_name(st.state), st.term, st.commit_index, st.applied_index,
                       st.last_index, st.snapshot_index, st.installs,
                       st.installing ? "true" : "false", st.failed ? "true" : "false",
                       meta_partition_has(mp, c->self, NULL) ? "false" : "true");
        buf_printf(out, "}");
    }
    buf_printf(out, "]}");
}

/* xxh3 over every key and value of a local replica (GET /admin/digests): replicas of a
 * partition at the same applied index must have the same digest. */
static uint64_t replica_digest(rcluster *c, const lpart *lp, uint64_t *items)
{
    uint8_t lo[12], hi[12];
    router_partition_bounds(&lp->desc, lo, hi);
    lsm_iter_options o = {.lower = lo, .lower_len = 12, .upper = hi, .upper_len = 12};
    lsm_iter *it = lsm_iter_new(c->engine, &o, NULL);
    XXH3_state_t *st = XXH3_createState();
    *items = 0;
    if (it == NULL || st == NULL) {
        lsm_iter_free(it);
        XXH3_freeState(st);
        return 0;
    }
    XXH3_64bits_reset(st);
    for (lsm_iter_first(it); lsm_iter_valid(it); lsm_iter_next(it)) {
        size_t kl, vl;
        const void *k = lsm_iter_key(it, &kl);
        const void *v = lsm_iter_value(it, &vl);
        uint64_t lens[2] = {kl, vl};
        XXH3_64bits_update(st, lens, sizeof lens);
        XXH3_64bits_update(st, k, kl);
        XXH3_64bits_update(st, v, vl);
        (*items)++;
    }
    uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    lsm_iter_free(it);
    return d;
}

/* The local replica whose range holds item key `k` (klen >= 12), or NULL. */
static const lpart *lpart_holding(const rcluster *c, const uint8_t *k)
{
    uint32_t table = (uint32_t)(get_be64(k) >> 32);
    uint64_t hash = get_be64(k + 4);
    for (size_t i = 0; i < c->n_parts; i++) {
        const partition_desc *d = &c->parts[i].desc;
        if (d->table_id == table && hash >= d->hash_lo && hash <= d->hash_hi)
            return &c->parts[i];
    }
    return NULL;
}

/* Item keys in the engine that no local replica's range holds (GET /admin/digests): what a
 * replica that left this node, or a dropped table, left behind. One pass over the item
 * keys (tables from 1 on; table 0 is the catalog's), skipping each local replica's range
 * with one seek. UINT64_MAX when the engine cannot be read. */
static uint64_t stray_items(rcluster *c)
{
    static const uint8_t first_table[4] = {0, 0, 0, 1};
    lsm_iter_options o = {.lower = first_table, .lower_len = sizeof first_table};
    lsm_iter *it = lsm_iter_new(c->engine, &o, NULL);
    if (it == NULL)
        return UINT64_MAX;
    uint64_t n = 0;
    lsm_iter_first(it);
    while (lsm_iter_valid(it)) {
        size_t kl;
        const uint8_t *k = lsm_iter_key(it, &kl);
        const lpart *lp = kl >= 12 ? lpart_holding(c, k) : NULL;
        if (lp == NULL) {
            n++;
            lsm_iter_next(it);
            continue;
        }
        uint8_t lo[12], hi[12];
        router_partition_bounds(&lp->desc, lo, hi);
        lsm_iter_seek(it, hi, sizeof hi);
    }
    if (lsm_iter_status(it, NULL) < 0)
        n = UINT64_MAX;
    lsm_iter_free(it);
    return n;
}

void rcluster_digests_json(rcluster *c, buf *out)
{
    buf_printf(out, "{\"node_id\":%" PRIu64 ",\"stray_items\":%" PRIu64 ",\"replicas\":[", c->self,
               stray_items(c));
    for (size_t i = 0; i < c->n_parts; i++) {
        lpart *lp = &c->parts[i];
        raft_host_group_stats st;
        if (raft_host_group_info(c->host, lp->id, &st, NULL) < 0)
            continue;
        uint64_t items;
        uint64_t d = replica_digest(c, lp, &items);
        buf_printf(out,
                   "%s{\"partition\":%" PRIu64 ",\"applied_index\":%" PRIu64
                   ",\"commit_index\":%" PRIu64 ",\"items\":%" PRIu64 ",\"digest\":\"%016" PRIx64
                   "\",\"complete\":%s}",
                   i ? "," : "", lp->id, st.applied_index, st.commit_index, items, d,
                   lp->poisoned || st.installing ? "false" : "true");
    }
    buf_printf(out, "]}");
}

/* ------------------------------------------------------------------ open / close */

static int open_storage(rcluster *c, strata_err *err)
{
    if (router_mkdir_p(c->data_dir, err) < 0 || identity_open(c, err) < 0)
        return -1;
    /* Both are made at the first start, before the node joins (the cluster file): a
     * joined directory without one lost what its replicas acknowledged, and starting
     * them again empty would let them vote without it. */
    const char *missing = !file_exists(c, "engine") ? "engine"
                          : !file_exists(c, "log")  ? "log"
                                                    : NULL;
    if (missing != NULL && file_exists(c, CLUSTER_FILE))
        return strata_err_set(err, ERR_CORRUPT,
                              "%s joined a cluster (it has a cluster file) but its %s directory "
                              "is missing: what its replicas acknowledged is lost, and they must "
                              "not vote again. Start this machine as a new node (a new "
                              "--node-id, an empty directory)",
                              c->data_dir, missing);
    char *lsm_dir = router_path_join(c->data_dir, "engine");
    char *wal_dir = router_path_join(c->data_dir, "log");
    int rc = lsm_dir && wal_dir ? 0 : strata_err_set(err, ERR_NOMEM, "out of memory");
    if (rc == 0) {
        lsm_options lo = {.dir = lsm_dir,
                          .memtable_bytes = c->memtable_bytes,
                          .background_cpu_pct = c->background_cpu_pct};
        rc = lsm_open(&lo, c->loop, &c->engine, err);
    }
    if (rc == 0) {
        wal_options wo = {.dir = wal_dir, .hold_ops = c->log_hold_ops};
        rc = wal_open(&wo, c->loop, &c->log, err);
    }
    free(lsm_dir);
    free(wal_dir);
    return rc;
}

static int open_host(rcluster *c, const router_cluster_config *cc, strata_err *err)
{
    raft_host_config hc = {
        .node_id = c->self,
        .transport = {.ctx = c, .send = transport_send},
        .fsm = {.ctx = c, .apply = fsm_apply, .install = fsm_install},
        .events = {.ctx = c, .leader = on_group_leader},
        .election_timeout_ms = cc->election_timeout_ms,
        .heartbeat_timeout_ms = cc->heartbeat_timeout_ms,
        .seed = c->self * 0x9e3779b97f4a7c15ull,
    };
    raft_wal_storage_init(&c->rws, c->log, &hc.storage);
    raft_host_uv_clock_init(&c->clock, c->loop);
    c->clock_open = true;
    hc.clock = raft_host_uv_clock_iface(&c->clock);
    c->host = raft_host_create(&hc, err);
    if (c->host == NULL)
        return -1;
    raft_host_uv_clock_bind(&c->clock, c->host);
    return 0;
}

static int open_rpc(rcluster *c, const router_cluster_config *cc, strata_err *err)
{
    rpc_options ro = {
        .node_id = c->self,
        .cluster_id = cc->cluster_name ? cc->cluster_name : "strata",
        .listen_host = cc->peer_listen_host,
        .listen_port = cc->peer_listen_port,
        .seed = c->self,
        .secrets = cc->peer_secrets,
    };
    rpc_handlers h = {.on_message = on_message,
                      .on_request = on_request,
                      .on_peer_state = on_peer_state,
                      .on_reject = on_reject,
                      .ctx = c};
    c->rpc = rpc_open(c->loop, &ro, &h, err);
    return c->rpc != NULL ? 0 : -1;
}

/*
 * Repairing the cluster file. Its damage (a checksum that does not match, a malformed
 * line) loses nothing the cluster does not know: the members and nodes it lists are the
 * map's, and "meta joined" only forbids a bootstrap. So a node started with --join asks
 * the cluster again, as at its first start, and writes the file from the answer
 * (on_join_answer); its engine and log, and so its replicas, stay as they are. Until that
 * write the damaged file stays in place, so that a restart before it goes the same way.
 * A node started with --bootstrap is refused: it could not tell the cluster it belongs to
 * from the one it would form. A file that cannot be read at all (permissions, a
 * directory in its place) is an operator's to fix, and refused too.
 */
static int cluster_file_trouble(rcluster *c, const router_cluster_config *cc, strata_err *err)
{
    if (err->code != ERR_CORRUPT)
        return -1;
    if (cc->n_join == 0) {
        strata_err why = *err;
        return strata_err_set(err, ERR_CORRUPT,
                              "%s. Its data is kept when it starts with --join HOST:PORT of a "
                              "member of its cluster instead of --bootstrap: it then writes the "
                              "file again from the cluster's answer",
                              why.msg);
    }
    fprintf(stderr, "stratad: %s; asking the cluster through --join for its members\n", err->msg);
    c->file_rewrite = true;
    return 0;
}

/* A --bootstrap start without a cluster file (have 0) on a directory whose log holds
 * the meta group's state: it was a member, and only that file is gone. It must not wait
 * for peers to tell it so (lost_bootstrap, whose advice is for a lost directory). 0 when
 * the log holds no such state (a first start), -1 otherwise. */
static int meta_state_without_file(rcluster *c, strata_err *err)
{
    wal_group_info info;
    if (wal_group_state(c->log, META_GROUP, &info, NULL) < 0)
        return 0;
    return strata_err_set(err, ERR_VALIDATION,
                          "%s has no cluster file, but its log holds meta group state: the "
                          "directory belongs to a cluster. Its data is kept when it starts "
                          "with --join HOST:PORT of a member instead of --bootstrap: it then "
                          "writes the file again from the cluster's answer",
                          c->data_dir);
}

/* The join addresses become "seed" peers (their node ids are not known yet). */
static int add_seeds(rcluster *c, const router_cluster_config *cc, strata_err *err)
{
    c->join = calloc(cc->n_join ? cc->n_join : 1, sizeof *c->join);
    if (c->join == NULL)
        return strata_err_set(err, ERR_NOMEM, "out of memory");
    c->n_join = cc->n_join;
    for (size_t i = 0; i < cc->n_join; i++) {
        c->join[i].c = c;
        char host[META_ADDR_MAX + 1];
        int port;
        if (parse_hostport(cc->join[i], host, sizeof host, &port) < 0 ||
            rpc_add_peer(c->rpc, RPC_SEED_ID_MIN + i, host, port, err) < 0)
            return strata_err_set(err, ERR_VALIDATION, "bad join address '%s'", cc->join[i]);
    }
    return 0;
}

static void fill_me(rcluster *c, const router_cluster_config *cc)
{
    c->me.id = c->self;
    snprintf(c->me.client_addr, sizeof c->me.client_addr, "%s", cc->client_addr);
    snprintf(c->me.peer_addr, sizeof c->me.peer_addr, "%s", cc->peer_addr);
    snprintf(c->me.az, sizeof c->me.az, "%s", cc->az);
    snprintf(c->me.host, sizeof c->me.host, "%s", cc->host_label);
    c->me.state = META_NODE_ACTIVE;
    c->me.format = cc->test_meta_format >= 1 && cc->test_meta_format <= META_FORMAT
                       ? cc->test_meta_format
                       : META_FORMAT;
}

rcluster *rcluster_open(const router_config *cfg, strata_err *err)
{
    const router_cluster_config *cc = cfg->cluster;
    if (cc->node_id == 0 || cc->node_id >= RPC_SEED_ID_MIN || cc->az == NULL ||
        cc->host_label == NULL || cc->client_addr == NULL || cc->peer_addr == NULL ||
        cc->peer_listen_host == NULL) {
        strata_err_set(err, ERR_VALIDATION, "cluster mode needs node id, AZ, host and addresses");
        return NULL;
    }
    rcluster *c = calloc(1, sizeof *c);
    if (c == NULL) {
        strata_err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->loop = cfg->loop;
    c->sm = cfg->ops;
    if (c->sm.read == NULL)
        c->sm.read = partition_read;
    if (c->sm.write_units == NULL)
        c->sm.write_units = router_default_write_units;
    c->self = cc->node_id;
    c->memtable_bytes = cc->memtable_bytes;
    c->background_cpu_pct = cc->background_cpu_pct;
    c->log_hold_ops = cc->log_hold_ops;
    c->replace_after_ms = cc->replace_after_ms ? cc->replace_after_ms : REPLACE_AFTER_MS;
    c->split_size_bytes = cc->split_size_bytes;
    c->split_heat_ms = cc->split_heat_ms;
    c->test_exit_on_split = cc->test_exit_on_split;
    c->test_seed_abandons = cc->test_seed_abandons;
    c->test_exit_mid_copy = cc->test_exit_mid_copy;
    c->heartbeat_ms = cc->heartbeat_timeout_ms ? cc->heartbeat_timeout_ms : 100;
    c->bootstrap = cc->bootstrap;
    c->expect = cc->bootstrap_expect > 0 ? cc->bootstrap_expect : 3;
    if (c->expect > MAX_META_VOTERS)
        c->expect = MAX_META_VOTERS;
    fill_me(c, cc);
    c->data_dir = strdup(cfg->data_dir);
    c->meta = meta_new();
    c->cat = catalog_new();
    c->cap = capacity_new();
    c->heard = pstats_new();
    c->shares = capshare_new();
    c->demand = malloc(CAPSHARE_MAX_ENTRIES * sizeof *c->demand);
    c->wants = malloc(CAPSHARE_MAX_ENTRIES * sizeof *c->wants);
    c->sent = malloc(CAPSHARE_MAX_ENTRIES * sizeof *c->sent);
    c->weights = malloc((META_MAX_NODES + 1) * sizeof *c->weights);
    buf_init(&c->scratch, 0);
    uv_timer_init(c->loop, &c->tick);
    uv_timer_init(c->loop, &c->kick);
    uv_timer_init(c->loop, &c->retry);
    uv_idle_init(c->loop, &c->recount);
    c->recount.data = c;
    uv_check_init(c->loop, &c->compactor);
    c->compactor.data = c;
    uv_timer_init(c->loop, &c->lag_probe);
    c->lag_probe.data = c;
    c->tick.data = c->kick.data = c->retry.data = c;
    held_init(&c->early, EARLY_LIMITS);
    int rc = c->data_dir && c->meta && c->cat && c->cap && c->heard && c->shares && c->demand &&
                     c->wants && c->sent && c->weights
                 ? 0
                 : strata_err_set(err, ERR_NOMEM, "out of memory");
    if (rc == 0)
        rc = open_storage(c, err);
    if (rc == 0)
        rc = open_host(c, cc, err);
    if (rc == 0)
        rc = open_rpc(c, cc, err);
    int have = rc == 0 ? cluster_file_read(c, err) : -1;
    if (have < 0 && rc == 0)
        have = cluster_file_trouble(c, cc, err);
    else if (have == 0 && c->bootstrap && rc == 0)
        have = meta_state_without_file(c, err);
    if (have < 0)
        rc = -1;
    else if (have == 1)
        rc = start_meta_group(c, err); /* a restart: the join addresses are not needed */
    else if (c->bootstrap)
        maybe_form(c); /* bootstrap_expect 1: a cluster of one meta voter */
    else
        rc = add_seeds(c, cc, err);
    if (rc < 0) {
        rcluster_close(c);
        return NULL;
    }
    uv_timer_start(&c->tick, on_tick, 0, TICK_MS);
    c->lag_due_ns = uv_hrtime() + LAG_PROBE_MS * 1000000ull;
    uv_timer_start(&c->lag_probe, on_lag_probe, LAG_PROBE_MS, LAG_PROBE_MS);
    return c;
}

static void flag_cb(void *arg)
{
    *(bool *)arg = true;
}

static void flag_lsm_cb(void *arg, const strata_err *err)
{
    (void)err;
    *(bool *)arg = true;
}

static void run_until(rcluster *c, bool *flag)
{
    while (!*flag)
        uv_run(c->loop, UV_RUN_ONCE);
}

/* Fails every op that is not waiting on a callback of the host or rpc (those complete
 * when the host is destroyed or rpc closed). */
static void fail_parked_ops(rcluster *c)
{
    c->retry_head = NULL;
    for (op *o = c->live, *next; o != NULL; o = next) {
        next = o->next;
        if (!o->in_flight) {
            op_fail_code(o, ERR_UNAVAILABLE, "The server is shutting down");
            next = c->live;
        }
    }
}

void rcluster_close(rcluster *c)
{
    if (c == NULL)
        return;
    c->closing = true;
    uv_timer_stop(&c->tick);
    uv_timer_stop(&c->kick);
    uv_timer_stop(&c->retry);
    fail_parked_ops(c);
    drop_checks_abandon(c);
    if (c->host != NULL)
        raft_wal_storage_detach(&c->rws);
    if (c->log != NULL) {
        /* Entries already handed to the log become durable (and their completions run)
         * before the host goes. */
        bool closed = false;
        wal_close(c->log, flag_cb, &closed);
        run_until(c, &closed);
        c->log = NULL;
    }
    if (c->host != NULL) {
        raft_host_destroy(c->host); /* pending submits and barriers fail now */
        c->host = NULL;
    }
    if (c->rpc != NULL) {
        rpc_close(c->rpc); /* outstanding calls fail now */
        c->rpc = NULL;
    }
    fail_parked_ops(c); /* ops that retried from those callbacks */
    /* Catalog syncs still waiting go on with the map as it is (their callers answer, and
     * may ask again: those are answered here too). */
    while (c->sync_next != NULL || c->sync_round != NULL || c->sync_wait != NULL) {
        syncs_finish(c, &c->sync_next, true);
        syncs_finish(c, &c->sync_round, true);
        syncs_finish(c, &c->sync_wait, true);
    }
    if (c->clock_open)
        raft_host_uv_clock_close(&c->clock, NULL, NULL);
    uv_close((uv_handle_t *)&c->tick, NULL);
    uv_close((uv_handle_t *)&c->kick, NULL);
    uv_close((uv_handle_t *)&c->retry, NULL);
    uv_close((uv_handle_t *)&c->recount, NULL);
    uv_close((uv_handle_t *)&c->compactor, NULL);
    uv_close((uv_handle_t *)&c->lag_probe, NULL);
    for (size_t i = 0; i < c->n_parts; i++)
        recount_stop(&c->parts[i]); /* before the engine closes */
    while (c->sessions != NULL)
        session_free(c, c->sessions);
    if (c->engine != NULL) {
        bool done = false;
        lsm_flush(c->engine, flag_lsm_cb, &done);
        run_until(c, &done);
        done = false;
        lsm_close(c->engine, flag_lsm_cb, &done);
        run_until(c, &done);
    }
    uv_run(c->loop, UV_RUN_NOWAIT); /* close callbacks */
    assert(c->live == NULL);
    while (c->installs != NULL)
        install_free(c, c->installs);
    while (c->join_checks != NULL) /* rpc_close answered every question */
        join_check_free(c, c->join_checks);
    while (c->seeds != NULL) /* and the engine's close ran every flush callback */
        seed_free(c, c->seeds);
    meta_free(c->meta);
    catalog_free(c->cat);
    capacity_free(c->cap);
    pstats_free(c->heard);
    capshare_free(c->shares);
    free(c->demand);
    free(c->wants);
    free(c->sent);
    free(c->weights);
    buf_free(&c->scratch);
    free(c->parts);
    held_clear(&c->early);
    free(c->lead_plan);
    free(c->rload_plan);
    free(c->peers);
    free(c->drops);
    free(c->join);
    free(c->data_dir);
    free(c);
}
