/*
 * Deterministic simulation of a whole Strata Raft cluster in one process.
 *
 * N nodes (3 or 5), each a raft_host (cluster/raft/raft_host.h) driving G groups, with
 * simulated time, network and disks, all chosen by one seed (xoshiro256**, no rand(), no
 * wall clock): `sim --seed N` replays one seed exactly.
 *
 *   network: per-message delay (1-8 ms) and loss, one-way link cuts, node isolation,
 *            heals. Each link delivers in order, like the one TCP connection per peer of
 *            the rpc/ transport; messages of different links interleave freely.
 *            --wild-net adds reordering within a link and duplication. C-Raft 0.22 does
 *            not tolerate those: a stale AppendEntries rejection arriving late can set the
 *            leader's next_index to match_index for that follower, after which the leader
 *            only sends it heartbeats and it never catches up (seen with seed 1035 of
 *            --seeds 1001-1400: a convergence failure, never a safety one). So the
 *            default model matches the real transport, and --wild-net shows the issue.
 *   disk:    operations complete in order after a random sync delay; only then are they
 *            durable. A crash drops every operation not yet synced (and its callback).
 *   nodes:   crash (host destroyed, disk keeps what was synced) and restart (host rebuilt
 *            from the simulated disk; the state machine restarts from its durable copy and
 *            the host replays the log above it); pause (300-1200 ms: the node's timers,
 *            disk completions and incoming messages wait until it resumes, as for a
 *            stopped process or a long VM stall; client requests still reach it, so a
 *            leader that others have replaced meanwhile is asked to read before it can
 *            have heard of its successor).
 *   engine:  every 10-30 ms each replica's state machine makes its state durable (now and
 *            then) and compacts its log up to that point (raft_host_compact, 8 trailing
 *            entries), so logs stay short under load and a replica that was down or cut
 *            off falls behind the compacted log. It then catches up through fsm.install:
 *            an out-of-band copy of the source's engine snapshot (frozen at the first
 *            request, lost if the source restarts) in chunks of 16 indexes, each request
 *            and chunk a simulated message that may be lost; a request is retried after
 *            40 ms, and after 5 tries the copy is reported failed (the host retries it).
 *            The copied commands are checked against the global record, and the copy must
 *            not move a replica backwards.
 *   engine:  the state machine answers RAFT_HOST_APPLY_BUSY to 3% of applies and resumes the
 *            group on a later simulated event (1-20 ms), checking that nothing of the
 *            group is applied meanwhile and that it restarts at the refused index.
 *   clients: writes `key := unique write id` and strong reads, sent to the node they
 *            believe leads (hint), or a random node. A strong read is a leadership check
 *            (raft_host_read_index, as stratad's) or, one in four, a barrier entry.
 *   moves:   (--moves) one spare node more, and replica moves one at a time until 4 s, as
 *            stratad does them: join_group on a node without a replica, add it as a learner,
 *            wait until the leader's member_match reaches its commit index (entries, or an
 *            install), promote it, remove a random current replica (the leader, sometimes),
 *            and 50-350 ms later stop and drop the removed replica (log, engine state). Each
 *            step is read off the leader's configuration, so moves survive crashes, cuts and
 *            leader changes; a restarted joined replica comes back with join_group.
 *   learner-says: (--learner-says, implies --moves) a learner is promoted on its own node's
 *            word, as stratad's scheduler does (MSG_GROUP_STATUS, replica_promotable): it
 *            follows a known leader, copies no snapshot, applied all it knows committed, and
 *            is confirmed. Without "confirmed" (--inject early-promote, stratad before
 *            issue #6's fix) a copy that put the applied index past the log's end promotes a
 *            replica that cannot vote yet, and seed 905 ends without a leader.
 *   rejoin:  (--rejoin, implies --moves) as stratad when a drained node is re-activated: a
 *            replica dropped by a move 5-35 ms after its removal is moved straight back to
 *            the node it left, which joins empty; compaction points are 4 times sparser, so
 *            the point the leader sends it often predates its removal and names it a voter
 *            of the old group (issue #6/#8: without the host's "unconfirmed" rule, seeds 89
 *            and 283 of 1-300 elect it next to the real majority).
 *   transfers: (--transfers) every 10-60 ms until the faults end, the leader of a random
 *            group hands its leadership to a random other node (raft_host_transfer), to a
 *            caught-up voter (raft_host_transfer_ready) most of the time, to anyone the
 *            rest (refused, or a lagging target the core waits for), during the faults,
 *            the writes and (with --moves) the configuration changes.
 *   splits:  (--splits) partition splits as stratad makes them (cluster/router_cluster.c,
 *            cluster/split.h), during the faults and (with --moves) the replica moves. 16
 *            keys have 64-bit hashes; each group serves a hash range, the initial groups
 *            tile the space. Writes carry their key's hash; a replica whose range no longer
 *            holds it answers MOVED without applying it, and the client (which routes by the
 *            ranges it knows, refreshed from the "map" only on a MOVED) sends the same write
 *            to the owner; strong reads check the range once confirmed, as stratad.
 *            Every 60-300 ms until the faults end, the leader of a random group whose
 *            committed configuration is its voters only (no learner, not being moved)
 *            proposes a SPLIT entry carrying a new child id, the split hash (the range's
 *            middle, or a key's hash so that key moves) and its configuration; sometimes its
 *            last proposal again (same child and hash: the second copy is a no-op); children
 *            split too, up to MAX_GROUPS groups. Applying the entry at index i (if the range
 *            still holds the hash, else it is a no-op) shrinks the range to [lo, split-1]
 *            at once (stratad: the range records' write) and the parent goes on, not yet
 *            durably; 1-20 ms later (the flush) in one durable step: the parent's state at i,
 *            and, on a node the entry lists, the child's record (its members) and its state:
 *            the parent's state at i filtered to [split, hi]. The child group then starts
 *            with exactly the listed voters; a further SPLIT of the parent waits (BUSY) until
 *            then. A crash before loses the split with the parent's later entries, which
 *            replay. A restart starts the child again from its record. A child's log is
 *            compacted whole (raft_host_compact_all) once it applied past index 2 after a
 *            flush. The "map" (the first replica to apply a split records the ranges)
 *            gives a listed node that never applied the entry (its parent was copied past
 *            it, or removed and dropped by a move) the child, which it joins with the map's
 *            range once no local replica overlaps it, as stratad's start_replica does.
 *            stratad before (a) and (b) failed here (--as-stratad): such a joiner, and a replica a
 *            move adds to a child, is sent the child's log from index 1 whenever the leader
 *            has not compacted it whole yet (a child without writes may never be), and
 *            rebuilds the child on EMPTY data; and stratad compacts a child at the host's
 *            applied index (which counts barrier entries) while a restart starts it at the
 *            engine's durable index (commands only): "the state machine is at 1 but the
 *            log starts at 3". The sim models a fix by default: (a) a child is compacted at
 *            its durable (command) index, and a child's leader submits a no-op command so
 *            a child without writes passes index 1 too; (b) a joiner waits until every
 *            replica made by the SPLIT has compacted the child whole durably (so any leader
 *            sends it a copy), and a majority of the SPLIT's voters has (so a listed node
 *            that makes the child later, with only entry 1, cannot lead it) - moves of a
 *            child wait for the same; (c) while no replica applied anything past the
 *            child's first entry, a listed node that missed the SPLIT copies the child's
 *            first state from a node that made it and starts the child as the SPLIT would
 *            have (else a child whose makers are no quorum never gets a leader, so never
 *            gets compacted, and (b) waits forever). stratad does all three ((c):
 *            seed_child in cluster/router_cluster.c; without it 10 of --splits 1-2000
 *            ended with such a child, "final member N is a learner or holds no replica").
 *
 *   seats:   (--seats) group 0 is the meta group and the cluster map its state: its log
 *            carries META entries (stratad's meta records: node registrations, node
 *            states, the seats), which every replica applies to its own map, refusing a
 *            command planned against an older map as stratad does; copies carry the map,
 *            and check 4 compares the maps too. Three seats over six nodes, two in each of
 *            three AZs (--nodes 5: five seats over eight nodes). Every 100-500 ms until 3 s
 *            an operator drains a random node or calls its drain off, through the leader;
 *            the leader marks a node unreachable for 200 ms DOWN (its seat goes after 300
 *            ms more) and ACTIVE again once it answers (each mark naming the state it saw,
 *            so that it cannot undo a drain that lands first), as stratad's liveness does:
 *            a replica that lets a mark end a drain fails the run (without the check of
 *            the base state in meta.c, seeds 63, 108 and 249 of 1-300 do). The last node
 *            registers as a node of an older version would (meta format 1) and says its
 *            binary's format (NODE_FORMAT) once upgraded, at a time the seed picks within
 *            1.5 s; the leader raises the cluster's format once every node reads it, and
 *            marks name their base state only from then on (Formats, cluster/meta.h). A
 *            META entry of a format above the cluster's, or a map that breaks meta_check
 *            (a node reading less than the cluster writes), fails the run.
 *            It plans the seats' next step against its map and committed configuration
 *            (cluster/placement.h, placement_meta_seats, as stratad's schedule_meta_seats:
 *            a learner on the best ACTIVE node, probed and promoted on its own word, the
 *            leaving voter removed, the leader handing over when its own node is drained)
 *            and makes the configuration follow the map; a node the map names joins
 *            empty, and one it no longer names drops its replica once the committed
 *            configuration leaves it out. Runs end at 8 s: a learner catches up only once
 *            the writes stop. The first versions (the map an oracle, other draws) found
 *            two ways for the seats to stop moving for good: seeds 22, 23 and 30 of 1-100
 *            a meta leader on a drained node waiting for a voter that stays to hand over
 *            to while every voter was drained (nodes 1-3 drained to be replaced): the
 *            other voters' seats now move first; seeds 2483, 3422 and 10170 of 1-20000 a
 *            leader the map had taken out waiting the same way with every node drained:
 *            it now hands over to any voter the map keeps.
 *
 * Checks (any failure prints the seed and the last events):
 *   1. at most one leader per term per group (sampled after every event);
 *   2. every node applies indexes in order, and a node's applied command at an index never
 *      differs from any other node's (checked at every apply, against a global record);
 *   3. no acknowledged write lost: after faults stop and the cluster heals, every node's
 *      applied log holds each acknowledged write at the index it was acknowledged with;
 *   4. convergence: after the quiet period, every replica of every group has applied the
 *      same sequence (same length and digest);
 *   5. strong reads are linearizable per key: a read returns a write whose log index is >=
 *      that of every write acknowledged before the read began and >= that of every read of
 *      the key completed before it began, and that write is in the final log at that index;
 *   6. (--moves) a replica whose committed configuration leaves it out or makes it a learner
 *      is never candidate or leader; every move completes; at the end each group's
 *      configuration is committed, has the initial number of voters and no learner, and is
 *      exactly the set of nodes holding a replica (checks 3 and 4 run over those).
 *   7. (--transfers) every started transfer's callback fires exactly once, and a transfer
 *      reported done (ERR_NONE) left its old leader not leading.
 *   9. a write reported as never to commit in a group (raft_host's not_applied, after a
 *      leader change) is applied there by no replica, before the report or after it (with
 *      --splits a write is re-sent to a child after a MOVED answer: each group apart).
 *   8. (--splits) writes: every replica applies write w to key k as the same version of k
 *      (a per-key history, global), so a child that did not start from its parent's state,
 *      or a replica that missed a write, is caught at its next write to the key; no write
 *      is applied at two versions (a MOVED write is re-sent and applied once); strong
 *      reads return a version >= that of every write acknowledged, and every read
 *      completed, before they began, and the history's write at that version; at the end
 *      every acknowledged write is in the history, every replica of a key's owner holds
 *      the whole history of the key and no replica holds a key outside its range, every
 *      replica of a group has the same range, and the ranges of all groups tile the hash
 *      space (no gap, no overlap). Check 2 compares commands (also MOVED ones and SPLIT
 *      entries), check 4 also the ranges and key versions.
 *  10. (--seats) the seats settle: the map's members are group 0's replicas, all voters, as
 *      many as its seats, and no drained node keeps a seat while an ACTIVE node has none;
 *      the cluster's meta format rose to META_FORMAT once the node registered as of an
 *      older version was upgraded, and no META entry was of a format above the cluster's.
 * `--inject stale-read|lying-disk|bad-copy|split-no-flush|no-seed|early-promote|early-drop`
 * plants a bug (reads without a barrier, an fsync that lies, an engine snapshot missing its
 * last write, a child started from the parent's last durable state instead of its state
 * at the split: no flush; no fix (c) of --splits, as stratad before seed_child; a learner
 * promoted before it is confirmed, with --learner-says; a moved replica dropped as soon as
 * its removal is decided rather than once a committed configuration leaves it out, as
 * stratad did when the map took it away) that the checks must catch. `--expect-fail 'A|B'`
 * inverts the verdict for such runs: exit 0 only if some seed failed and every failure's
 * message contains A or B (the checks meant to catch it).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cluster/meta.h"
#include "cluster/placement.h"
#include "cluster/raft/raft_host.h"

#define MAX_NODES       8 /* 5 voters + 1 spare with --moves, + 3 with --seats */
#define INIT_GROUPS   3  /* groups at start: 1..3 */
#define MAX_GROUPS    16 /* --splits: children take ids up to this bound */
#define NKEYS         16 /* bound; 4 keys without --splits, 16 spread over the hash space with */
#define FAULT_END_MS  3000
#define CLIENT_END_MS 4000
#define SIM_END_MS    6000
/* --seats: a learner catches up only once the writes stop (CLIENT_END_MS): each copy of
 * the group's state takes long enough for the leader to compact past it again, so the
 * seats' last moves need time after that. */
#define SEATS_END_MS    8000
#define TRACE_LEN     48
#define COPY_CHUNK    16 /* indexes per snapshot chunk */
#define SEAT_DOWN_MS    200 /* --seats: an ACTIVE node unreachable this long is marked DOWN */
#define UPGRADE_BY_MS   1500 /* --seats: the older node is upgraded before this */
#define SEAT_REPLACE_MS 300 /* --seats: a voter DOWN this long gives its seat up */
#define COPY_RETRY_MS 40
#define COPY_ATTEMPTS 5
#define COMPACT_GAP   12   /* compact once the durable index is this far past the last point */
#define MOVE_END_MS   4000 /* --moves: no move starts after this (running ones finish) */
#define MAX_HOPS      8    /* --splits: a client op follows at most this many MOVED answers */
#define WRITE_LEN     17   /* --splits write: u8 key | u64 write id | u64 key hash */
#define SPLIT_MARK    (1ull << 62) /* check 2's record of a SPLIT entry: mark | child id */
#define NOP_KEY       0xFF         /* a write command with this key changes nothing */
#define NOP_MARK      (1ull << 61) /* check 2's record of a no-op */
#define META_MARK       (1ull << 60) /* check 2's record of a META entry: mark | hash */
#define WID_APPLIED     1ull         /* check 9: a replica applied the write (bit of its group) */
#define WID_NOT_APPLIED 2ull         /* check 9: the write was reported never to commit there */
_Static_assert(2 * MAX_GROUPS <= 64, "check 9 keeps two bits per group in a uint64_t");

/* Deliberate bugs for `--inject`: each must make the checks fail on some seed. */
enum {
    INJECT_NONE,
    INJECT_STALE_READ,
    INJECT_LYING_DISK,
    INJECT_BAD_COPY,
    INJECT_SPLIT_NO_FLUSH,
    INJECT_NO_SEED,
    INJECT_EARLY_PROMOTE,
    INJECT_EARLY_DROP
};
static int g_inject;
static bool g_wild_net;
static bool g_moves;
static bool g_transfers;
static bool g_rejoin;
static bool g_learner_says;
static bool g_splits;
static bool g_as_stratad;
static bool g_seats;
/* --expect-fail "A|B": the run must fail, and every failure's message must contain one of
 * these substrings. A planted bug must be caught by the check meant for it: a run that
 * fails some other way (another check, a crash of the simulator) is not that catch. */
#define MAX_EXPECT 8
static const char *g_expect[MAX_EXPECT];
static int g_nexpect;
static uint64_t g_unexpected; /* failures whose message matched no g_expect entry */

/* ---- PRNG: splitmix64 seeding xoshiro256** ---- */

typedef struct {
    uint64_t s[4];
} prng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(prng *p)
{
    uint64_t *s = p->s;
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static uint64_t rnd(prng *p, uint64_t n) /* [0, n) */
{
    return n ? next_u64(p) % n : 0;
}

static bool chance(prng *p, unsigned per_mille)
{
    return rnd(p, 1000) < per_mille;
}

/* ---- events ---- */

enum {
    EV_DELIVER,
    EV_DISK,
    EV_TIMER,
    EV_CLIENT,
    EV_FAULT,
    EV_HEAL_ALL,
    EV_RESUME,
    EV_FLUSH,
    EV_COPY_REQ,
    EV_COPY_CHUNK,
    EV_COPY_TIMEOUT,
    EV_MOVE,
    EV_TRANSFER,
    EV_SPLIT,   /* --splits: a SPLIT entry's records are durable on a node: finish it */
    EV_PROPOSE, /* --splits: a leader proposes a split */
    EV_RESEND,  /* --splits: a client sends an op again after a MOVED answer */
    EV_SEATS,   /* --seats: a step of the meta group's seats */
    EV_DRAIN    /* --seats: an operator drains a node, or calls a drain off */
};

typedef struct {
    uint64_t time;
    uint64_t seq;
    int type;
    int node;
    int from;
    uint64_t group;
    uint64_t gen;
    uint8_t *bytes;
    size_t len;
    uint64_t a, b; /* copy events: session and chunk (or request generation) */
} event;

typedef struct {
    uint64_t time;
    int type;
    int node;
    int from;
    uint64_t a;
} trace_rec;

/* ---- simulated disk ---- */

typedef struct {
    uint64_t term;
    uint8_t type;
    uint8_t *data;
    size_t len;
} dentry;

typedef struct {
    bool has;
    uint64_t term;
    uint64_t vote;
    uint64_t start; /* index of log[0] */
    dentry *log;    /* indexes start .. start + n - 1 */
    size_t n;
    size_t cap;
    uint64_t snap_index; /* snapshot point, 0 if none */
    uint64_t snap_term;
    uint8_t *meta;
    size_t meta_len;
} dgroup;

enum { OP_TERM_VOTE, OP_APPEND, OP_SNAPSHOT };

typedef struct dop {
    struct dop *next;
    int kind;
    uint64_t group;
    uint64_t term, vote;
    uint64_t first;
    dentry *ents;
    size_t n;
    bool dropped;            /* its group's replica was dropped: completes, writes nothing */
    raft_host_snapshot snap; /* OP_SNAPSHOT; meta is a copy owned here */
    raft_storage_cb cb;
    void *cb_data;
} dop;

/* ---- nodes, clients ---- */

/* A SPLIT entry (--splits): 'S' | u64 child | u64 split hash | u8 n | (u8 node, u8 voter)*n.
 * The members are the parent's configuration as the proposing leader saw it. */
typedef struct {
    uint64_t child, hash;
    int n;
    uint8_t node[MAX_NODES + 2];
    bool voter[MAX_NODES + 2];
} split_entry;

typedef struct {
    uint64_t *wid; /* applied write id by index (0: not a command) */
    size_t cap;
    uint64_t applied; /* last applied index */
    uint64_t kv_wid[NKEYS];
    uint64_t kv_idx[NKEYS];
    uint64_t kv_ver[NKEYS]; /* --splits: writes applied to the key (its history's length) */
    uint64_t lo, hi;        /* --splits: the hash range served as of `applied` */
    uint64_t busy_index;  /* the index refused with RAFT_HOST_APPLY_BUSY, until resumed */
    uint64_t retry_index; /* after the resume: the next apply must be this index */
    uint64_t split_index; /* --splits: the SPLIT entry at this index shrank the range; its
                             records are being made durable, the child waits (EV_SPLIT) */
    uint64_t split_gen;
    split_entry split;
    /* --seats, group 0: the cluster map the replica's META entries built
     * (meta_state_encode bytes; NULL: nothing yet) */
    uint8_t *map;
    size_t map_len;
} fsm_group;

struct sim;

typedef struct {
    struct sim *sim;
    int id; /* 1-based */
    bool up;
    uint64_t paused_until; /* ms: its timers, disk and incoming messages wait until then */
    uint64_t incarnation;
    raft_host *host;
    uint64_t timer_gen;
    dgroup disk[MAX_GROUPS];
    dop *pending_head, *pending_tail;
    uint64_t disk_busy_until;
    fsm_group fsm[MAX_GROUPS];   /* the engine's live state */
    fsm_group dur[MAX_GROUPS];   /* what the engine has made durable: a crash returns to it */
    bool installing[MAX_GROUPS]; /* an out-of-band copy is under way */
    bool hosted[MAX_GROUPS];     /* the node has a replica of the group (--moves changes it) */
    bool joined[MAX_GROUPS];     /* that replica was added by a move: restart with join_group */
    /* --splits: the child's durable record (the members its SPLIT carried), written with
     * the parent's state at the split: a restart starts the child again from it. */
    bool child[MAX_GROUPS];
    split_entry rec[MAX_GROUPS];
    /* --splits, while fsm[g].split_index: the child's first state and the parent's state
     * at the SPLIT (what the flush makes durable). */
    fsm_group split_child[MAX_GROUPS];
    fsm_group split_dur[MAX_GROUPS];
    bool split_wait[MAX_GROUPS]; /* a later SPLIT was refused until the child exists */
} node;

/* --moves: one replica move at a time. Each step is read off the leader's configuration,
 * so it survives leader changes, crashes and lost callbacks: add `to` as a learner, wait
 * until it caught up (raft_host_member_match), promote it, remove `from`, then (a little
 * later, so the removed replica lingers) stop and drop the replica on `from`. */
enum { MV_IDLE, MV_ADD, MV_CATCH_UP, MV_PROMOTE, MV_REMOVE, MV_DROP };
/* A configuration change proposed one at a time (propose_change). */
typedef struct {
    bool inflight; /* a raft_host_change callback is outstanding */
    uint64_t since;
} change_slot;
static const char *const mv_phase_name[] = {"idle", "add", "catch-up", "promote", "remove", "drop"};

typedef struct {
    int phase;
    int group, from, to;
    uint64_t drop_at;
    change_slot change;
    bool dropped_early; /* --inject early-drop: `from` was dropped before its removal */
} mover;

/* An out-of-band snapshot copy (fsm.install): the destination pulls the source's engine
 * snapshot, frozen at the first request, in chunks of COPY_CHUNK indexes; each request
 * and chunk is a simulated message that may be lost, and a request unanswered within
 * COPY_RETRY_MS is sent again (COPY_ATTEMPTS times, then the copy is reported failed). */
typedef struct {
    bool active;
    int dest, src, group;
    uint64_t dest_inc;
    uint64_t index, token;
    uint64_t next_chunk, nchunks;
    unsigned attempts;
    uint64_t req_gen;
    bool frozen; /* the source's snapshot, lost if the source restarts */
    uint64_t src_inc;
    fsm_group snap;
    fsm_group recv; /* assembled at the destination */
} copy_session;

typedef struct {
    struct sim *sim;
    bool is_read;
    int group;
    int key;
    uint64_t wid;
    int node;
    uint64_t start;
    uint64_t min_idx; /* reads: the lowest acceptable index */
    bool done;
    bool ok;
    uint64_t idx;      /* write: acknowledged index; read: index of the write returned */
    uint64_t read_wid; /* read: write id returned */
    /* --splits */
    size_t id;      /* in sim.ops */
    uint64_t hash;  /* the key's hash */
    uint64_t ver;   /* write: the key version it became; read: the version returned */
    uint64_t min_ver;
    int hops;       /* MOVED answers followed */
} cop;

/* --splits: a group's range as the "map" knows it (recorded by the first replica that
 * completes the split creating it), and the client's (possibly stale) copy. */
typedef struct {
    bool created;
    bool child; /* made by a split */
    uint64_t lo, hi;
    uint64_t born_hi; /* a child: its range's end when the split made it */
    uint64_t pend_child, pend_hash; /* the last split proposed for it (re-proposed at times) */
    split_entry made_by; /* a child: its SPLIT's members (the voters its election needs) */
    bool sealed;         /* a child: child_sealed said so once */
} range_rec;

typedef struct sim {
    uint64_t seed;
    prng rng;
    int nnodes;
    int ngroups;
    uint64_t now;
    uint64_t seq;
    event *heap;
    size_t nheap, capheap;
    node nodes[MAX_NODES + 1];
    bool link_down[MAX_NODES + 1][MAX_NODES + 1];
    uint64_t link_last[MAX_NODES + 1][MAX_NODES + 1]; /* last delivery time per link */
    bool wild_net;
    uint64_t leader_hint[MAX_GROUPS];
    /* checks */
    uint64_t *term_leader[MAX_GROUPS]; /* by term: node that led it */
    size_t term_cap[MAX_GROUPS];
    uint64_t *global_wid[MAX_GROUPS]; /* first applied write id seen at each index */
    uint8_t *global_set[MAX_GROUPS];
    size_t global_cap[MAX_GROUPS];
    uint64_t acked_max_idx[MAX_GROUPS][NKEYS];
    uint64_t read_max_idx[MAX_GROUPS][NKEYS];
    cop **ops;
    size_t nops, capops;
    copy_session *sess;
    size_t nsess, capsess;
    uint64_t next_wid;
    bool failed;
    char why[512];
    trace_rec trace[TRACE_LEN];
    size_t ntrace;
    bool verbose;
    int inject; /* deliberate bug, to show the checks can fail (INJECT_*) */
    bool moves;
    bool rejoin; /* --rejoin: a removed replica's node gets it back right after the drop */
    bool learner_says; /* --learner-says: promote on the learner's own word, as stratad */
    int nvoters; /* voters per group (the initial members are nodes 1..nvoters) */
    mover mv;
    uint64_t leader_term[MAX_GROUPS]; /* the highest term the mover has seen a leader in */
    bool transfers;
    uint64_t transfers_pending; /* started, callback not fired yet */
    /* --splits */
    bool splits;
    bool as_stratad; /* model stratad before fixes (a) and (b) of the header */
    int nkeys;
    uint64_t key_hash[NKEYS];
    range_rec map[MAX_GROUPS];
    range_rec client_map[MAX_GROUPS];
    bool owed[MAX_NODES + 1][MAX_GROUPS]; /* listed in the SPLIT, child not started there yet */
    uint64_t *hist[NKEYS]; /* the key's write history: hist[k][v] = write id of version v */
    size_t hist_cap[NKEYS];
    uint64_t hist_n[NKEYS];
    uint64_t *wid_at; /* write id -> key << 40 | version where it was applied */
    size_t wid_at_cap;
    uint64_t *wid_fate; /* check 9: write id -> per group, WID_APPLIED and WID_NOT_APPLIED
                           bits at 2 * group */
    size_t wid_fate_cap;
    uint64_t acked_max_ver[NKEYS], read_max_ver[NKEYS];
    uint64_t split_seq; /* tells EV_SPLIT events of earlier SPLITs apart */
    /* --seats */
    bool seats;
    meta_state *meta;   /* the cluster map as a replica of group 0 has it (map_of) */
    change_slot seat_change; /* group 0's configuration following the map */
    bool meta_inflight; /* a change of the map by the leader is outstanding */
    uint64_t meta_inflight_since;
    uint64_t seat_handover_at;
    uint64_t unreachable_since[MAX_NODES + 1]; /* as the leader marks nodes DOWN (0: seen) */
    uint64_t upgrade_at; /* when the last node, registered as of meta format 1, is upgraded */
    /* stats */
    uint64_t events, msgs, acked, reads_ok, crashes, busy, snap_points, compactions, installs,
        install_failures, chunks, moves_done, changes, self_removals, transfers_started,
        transfers_done, transfers_failed, transfers_refused, splits_proposed, splits_done,
        split_applies, moved, rejoins, compact_alls, seeded, rejoins_started, not_applied,
        seat_steps, seat_promotions, seat_handovers, drains, marks;
} sim;

static void fail(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(sim *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    s->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (p == NULL) {
        fprintf(stderr, "sim: out of memory\n");
        exit(2);
    }
    return p;
}

static void grow_u64(uint64_t **a, size_t *cap, size_t need)
{
    if (need < *cap)
        return;
    size_t n = *cap ? *cap : 64;
    while (n <= need)
        n *= 2;
    uint64_t *b = xcalloc(n, sizeof *b);
    if (*a != NULL && *cap)
        memcpy(b, *a, *cap * sizeof *b);
    free(*a);
    *a = b;
    *cap = n;
}

/* ---- event heap ---- */

static bool ev_less(const event *a, const event *b)
{
    return a->time != b->time ? a->time < b->time : a->seq < b->seq;
}

static void push(sim *s, event e)
{
    if (s->nheap == s->capheap) {
        s->capheap = s->capheap ? s->capheap * 2 : 1024;
        event *n = xcalloc(s->capheap, sizeof *n);
        if (s->nheap)
            memcpy(n, s->heap, s->nheap * sizeof *n);
        free(s->heap);
        s->heap = n;
    }
    e.seq = s->seq++;
    size_t i = s->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static event pop(sim *s)
{
    event top = s->heap[0];
    event last = s->heap[--s->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const event *best = &last;
        if (l < s->nheap && ev_less(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (r < s->nheap && ev_less(&s->heap[r], best))
            m = r;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->nheap > 0)
        s->heap[i] = last;
    return top;
}

/* ---- disk ---- */

static void dentries_free(dentry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].data);
    free(e);
}

static void disk_apply_snapshot(dgroup *d, dop *op)
{
    const raft_host_snapshot *sp = &op->snap;
    d->snap_index = sp->index;
    d->snap_term = sp->term;
    free(d->meta);
    d->meta = (uint8_t *)sp->meta;
    d->meta_len = sp->meta_len;
    op->snap.meta = NULL;
    uint64_t keep = sp->replace_log ? d->start + d->n : sp->keep_from;
    size_t drop = keep > d->start ? (size_t)(keep - d->start) : 0;
    if (drop > d->n)
        drop = d->n;
    for (size_t i = 0; i < drop; i++)
        free(d->log[i].data);
    if (d->n > drop) /* (a joined replica's first write may be an installed point: no log) */
        memmove(d->log, d->log + drop, (d->n - drop) * sizeof *d->log);
    d->n -= drop;
    d->start += drop;
    if (sp->replace_log || (d->n == 0 && d->start <= sp->index))
        d->start = sp->index + 1; /* installed, or a point beyond the log: it restarts there */
}

static void disk_apply(dgroup *d, dop *op)
{
    if (!d->has)
        d->start = 1;
    d->has = true;
    if (op->kind == OP_TERM_VOTE) {
        d->term = op->term;
        d->vote = op->vote;
        return;
    }
    if (op->kind == OP_SNAPSHOT) {
        disk_apply_snapshot(d, op);
        return;
    }
    /* Replace from op->first (keep start .. first-1). */
    if (d->n == 0)
        d->start = op->first;
    size_t keep = op->first > d->start ? (size_t)(op->first - d->start) : 0;
    if (keep > d->n)
        keep = d->n; /* a gap cannot happen: the host appends contiguously */
    for (size_t i = keep; i < d->n; i++)
        free(d->log[i].data);
    d->n = keep;
    if (d->n + op->n > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < d->n + op->n)
            cap *= 2;
        dentry *nl = xcalloc(cap, sizeof *nl);
        if (d->n)
            memcpy(nl, d->log, d->n * sizeof *nl);
        free(d->log);
        d->log = nl;
        d->cap = cap;
    }
    for (size_t i = 0; i < op->n; i++) {
        d->log[d->n++] = op->ents[i];
        op->ents[i].data = NULL;
    }
}

static void disk_enqueue(node *nd, dop *op)
{
    sim *s = nd->sim;
    if (nd->pending_tail != NULL)
        nd->pending_tail->next = op;
    else
        nd->pending_head = op;
    nd->pending_tail = op;
    /* In-order completion: each sync ends after the previous one. */
    uint64_t t = s->now + 1 + rnd(&s->rng, 4);
    if (t < nd->disk_busy_until)
        t = nd->disk_busy_until;
    nd->disk_busy_until = t;
    push(s, (event){.time = t, .type = EV_DISK, .node = nd->id, .gen = nd->incarnation});
}

static int st_load(void *ctx, uint64_t group, raft_host_loaded *out, strata_err *err)
{
    node *nd = ctx;
    dgroup *d = &nd->disk[group];
    if (!d->has)
        return strata_err_set(err, ERR_NOT_FOUND, "nothing stored");
    out->term = d->term;
    out->vote = d->vote;
    out->start_index = d->start;
    out->n = d->n;
    out->snapshot_index = d->snap_index;
    out->snapshot_term = d->snap_term;
    out->snapshot_meta = d->meta;
    out->snapshot_meta_len = d->meta_len;
    out->entries = xcalloc(d->n, sizeof *out->entries);
    for (size_t i = 0; i < d->n; i++)
        out->entries[i] =
            (raft_host_entry){d->log[i].term, d->log[i].type, d->log[i].data, d->log[i].len};
    return 0;
}

static int st_term_vote(void *ctx, uint64_t group, uint64_t term, uint64_t vote, raft_storage_cb cb,
                        void *cb_data, strata_err *err)
{
    (void)err;
    node *nd = ctx;
    dop *op = xcalloc(1, sizeof *op);
    op->kind = OP_TERM_VOTE;
    op->group = group;
    op->term = term;
    op->vote = vote;
    op->cb = cb;
    op->cb_data = cb_data;
    disk_enqueue(nd, op);
    return 0;
}

static int st_append(void *ctx, uint64_t group, uint64_t first, const raft_host_entry *e, size_t n,
                     raft_storage_cb cb, void *cb_data, strata_err *err)
{
    (void)err;
    node *nd = ctx;
    dop *op = xcalloc(1, sizeof *op);
    op->kind = OP_APPEND;
    op->group = group;
    op->first = first;
    op->n = n;
    op->ents = xcalloc(n, sizeof *op->ents);
    for (size_t i = 0; i < n; i++) {
        op->ents[i].term = e[i].term;
        op->ents[i].type = e[i].type;
        op->ents[i].len = e[i].len;
        op->ents[i].data = xcalloc(e[i].len ? e[i].len : 1, 1);
        if (e[i].len)
            memcpy(op->ents[i].data, e[i].data, e[i].len);
    }
    op->cb = cb;
    op->cb_data = cb_data;
    disk_enqueue(nd, op);
    return 0;
}

static int st_set_snapshot(void *ctx, uint64_t group, const raft_host_snapshot *sp,
                           raft_storage_cb cb, void *cb_data, strata_err *err)
{
    (void)err;
    node *nd = ctx;
    dop *op = xcalloc(1, sizeof *op);
    op->kind = OP_SNAPSHOT;
    op->group = group;
    op->snap = *sp;
    uint8_t *m = xcalloc(sp->meta_len ? sp->meta_len : 1, 1);
    if (sp->meta_len)
        memcpy(m, sp->meta, sp->meta_len);
    op->snap.meta = m;
    op->cb = cb;
    op->cb_data = cb_data;
    nd->sim->snap_points++;
    disk_enqueue(nd, op);
    return 0;
}

static void dop_free(dop *op)
{
    dentries_free(op->ents, op->n);
    free((void *)op->snap.meta);
    free(op);
}

static void disk_complete(node *nd)
{
    dop *op = nd->pending_head;
    if (op == NULL)
        return;
    nd->pending_head = op->next;
    if (nd->pending_head == NULL)
        nd->pending_tail = NULL;
    if (!op->dropped)
        disk_apply(&nd->disk[op->group], op);
    raft_storage_cb cb = op->cb;
    void *data = op->cb_data;
    dop_free(op);
    if (cb != NULL)
        cb(data, 0);
}

static void disk_drop_pending(node *nd)
{
    while (nd->pending_head != NULL) {
        dop *op = nd->pending_head;
        nd->pending_head = op->next;
        dop_free(op);
    }
    nd->pending_tail = NULL;
    nd->disk_busy_until = 0;
}

/* ---- transport and clock ---- */

static int tr_send(void *ctx, uint64_t to, uint64_t group, const void *msg, size_t len)
{
    node *nd = ctx;
    sim *s = nd->sim;
    if (to < 1 || to > (uint64_t)s->nnodes)
        return -1;
    s->msgs++;
    int copies = 1;
    if (s->now < FAULT_END_MS) {
        if (s->link_down[nd->id][to] || chance(&s->rng, 20))
            return 0;
        if (s->wild_net && chance(&s->rng, 10))
            copies = 2;
    }
    for (int c = 0; c < copies; c++) {
        uint8_t *b = xcalloc(len, 1);
        memcpy(b, msg, len);
        uint64_t t = s->now + 1 + rnd(&s->rng, 8);
        /* One connection per peer (the rpc/ transport is TCP): a link delivers in order.
         * --wild-net lifts this (independent delays and duplicates). */
        if (!s->wild_net) {
            if (t < s->link_last[nd->id][to])
                t = s->link_last[nd->id][to];
            s->link_last[nd->id][to] = t;
        }
        push(s, (event){.time = t,
                        .type = EV_DELIVER,
                        .node = (int)to,
                        .from = nd->id,
                        .group = group,
                        .bytes = b,
                        .len = len});
    }
    return 0;
}

static uint64_t ck_now(void *ctx)
{
    node *nd = ctx;
    return nd->sim->now;
}

static void ck_arm(void *ctx, uint64_t deadline)
{
    node *nd = ctx;
    nd->timer_gen++;
    uint64_t t = deadline > nd->sim->now ? deadline : nd->sim->now;
    push(nd->sim, (event){.time = t, .type = EV_TIMER, .node = nd->id, .gen = nd->timer_gen});
}

/* ---- state machine: key := write id ---- */

static bool in_range(const fsm_group *f, uint64_t h)
{
    return f->lo <= h && h <= f->hi;
}

static void fsm_copy(fsm_group *dst, const fsm_group *src);
static void fsm_free(fsm_group *f);

/* Check 2: every replica applies the same command (write id, or SPLIT_MARK | child) at
 * each index of a group. */
static void record_index(sim *s, node *nd, uint64_t group, uint64_t index, uint64_t id)
{
    fsm_group *f = &nd->fsm[group];
    f->applied = index;
    grow_u64(&f->wid, &f->cap, index);
    f->wid[index] = id;
    grow_u64(&s->global_wid[group], &s->global_cap[group], index);
    if (s->global_wid[group][index] == 0)
        s->global_wid[group][index] = id;
    else if (s->global_wid[group][index] != id)
        fail(s,
             "group %" PRIu64 " index %" PRIu64 ": node %d applied command %" PRIx64
             ", another replica applied %" PRIx64,
             group, index, nd->id, id, s->global_wid[group][index]);
}

/* Check 8: write `wid` becomes version `ver` of `key`, the same on every replica, and a
 * write is applied at one version only. */
static void record_version(sim *s, node *nd, uint64_t group, int key, uint64_t ver, uint64_t wid)
{
    grow_u64(&s->hist[key], &s->hist_cap[key], ver);
    uint64_t *h = &s->hist[key][ver];
    if (*h == 0)
        *h = wid;
    else if (*h != wid)
        fail(s,
             "key %d version %" PRIu64 ": node %d group %" PRIu64 " applied write %" PRIu64
             ", the history has write %" PRIu64 " (a replica's state lacks writes)",
             key, ver, nd->id, group, wid, *h);
    if (ver > s->hist_n[key])
        s->hist_n[key] = ver;
    grow_u64(&s->wid_at, &s->wid_at_cap, wid);
    uint64_t at = (uint64_t)key << 40 | ver;
    if (s->wid_at[wid] == 0)
        s->wid_at[wid] = at;
    else if (s->wid_at[wid] != at)
        fail(s,
             "write %" PRIu64 " applied twice: as key %d version %" PRIu64
             " (node %d group %" PRIu64
             "), and as key %" PRIu64 " version %" PRIu64,
             wid, key, ver, nd->id, group, s->wid_at[wid] >> 40,
             s->wid_at[wid] & (uint64_t)0xFFFFFFFFFF);
}

static size_t split_encode(const split_entry *e, uint8_t *b, size_t cap)
{
    size_t len = 18 + 2 * (size_t)e->n;
    if (len > cap)
        return 0;
    b[0] = 'S';
    memcpy(b + 1, &e->child, 8);
    memcpy(b + 9, &e->hash, 8);
    b[17] = (uint8_t)e->n;
    for (int i = 0; i < e->n; i++) {
        b[18 + 2 * i] = e->node[i];
        b[19 + 2 * i] = e->voter[i];
    }
    return len;
}

static bool split_decode(const uint8_t *b, size_t len, split_entry *e)
{
    if (len < 18 || b[0] != 'S' || b[17] == 0 || b[17] > MAX_NODES + 2 ||
        len != 18 + 2 * (size_t)b[17])
        return false;
    memset(e, 0, sizeof *e);
    memcpy(&e->child, b + 1, 8);
    memcpy(&e->hash, b + 9, 8);
    e->n = b[17];
    for (int i = 0; i < e->n; i++) {
        e->node[i] = b[18 + 2 * i];
        e->voter[i] = b[19 + 2 * i] != 0;
    }
    return e->child > 0 && e->child < MAX_GROUPS;
}

static void filter_state(sim *s, fsm_group *f, uint64_t lo, uint64_t hi);

/* A SPLIT entry: if the range still holds the split hash, the replica (stratad's
 * split_write) writes the range records, shrinks the range and goes on at once; the
 * child starts once the records are durable (EV_SPLIT: a flush). Its first state is the
 * parent's at the entry. A further SPLIT waits (BUSY) until then. Once the range has
 * shrunk, the entry is a no-op (also when a restart or a joined replica replays it). */
static int apply_split(sim *s, node *nd, uint64_t group, uint64_t index, const uint8_t *cmd,
                       size_t len)
{
    fsm_group *f = &nd->fsm[group];
    split_entry e;
    if (!split_decode(cmd, len, &e)) {
        fail(s, "node %d group %" PRIu64 " index %" PRIu64 ": bad SPLIT entry", nd->id, group,
             index);
        return 0;
    }
    if (!(f->lo < e.hash && e.hash <= f->hi)) {
        record_index(s, nd, group, index, SPLIT_MARK | e.child);
        return 0;
    }
    if (f->split_index != 0) {
        f->busy_index = index;
        nd->split_wait[group] = true;
        return RAFT_HOST_APPLY_BUSY;
    }
    /* The child starts from the parent's state at the split. The planted bug starts it
     * from what the engine last made durable (no flush first). */
    fsm_group *child = &nd->split_child[group];
    fsm_copy(child, s->inject == INJECT_SPLIT_NO_FLUSH ? &nd->dur[group] : f);
    filter_state(s, child, e.hash, f->hi);
    free(child->wid);
    child->wid = NULL;
    child->cap = 0;
    child->applied = 1; /* the child's own log: its configuration at index 1 */
    grow_u64(&child->wid, &child->cap, 1);
    int c = (int)e.child;
    range_rec *m = &s->map[c];
    if (!m->created) {
        /* The first replica to apply it records it in the "map". */
        *m = (range_rec){.created = true,
                         .child = true,
                         .lo = e.hash,
                         .hi = f->hi,
                         .born_hi = f->hi,
                         .made_by = e};
        if (s->map[group].hi >= e.hash) /* (a later split of g may have been recorded first) */
            s->map[group].hi = e.hash - 1;
        s->splits_done++;
        for (int k = 0; k < e.n; k++)
            s->owed[e.node[k]][c] = true;
    } else if (m->lo != e.hash || m->born_hi != f->hi) {
        fail(s,
             "node %d group %" PRIu64 " index %" PRIu64 ": child %d gets [%016" PRIx64
             ", %016" PRIx64 "], another replica made [%016" PRIx64 ", %016" PRIx64 "]",
             nd->id, group, index, c, e.hash, f->hi, m->lo, m->born_hi);
    }
    filter_state(s, f, f->lo, e.hash - 1);
    record_index(s, nd, group, index, SPLIT_MARK | e.child);
    fsm_copy(&nd->split_dur[group], f);
    f->split_index = index;
    f->split = e;
    f->split_gen = ++s->split_seq;
    s->split_applies++;
    push(s, (event){.time = s->now + 1 + rnd(&s->rng, 20),
                    .type = EV_SPLIT,
                    .node = nd->id,
                    .group = group,
                    .gen = nd->incarnation,
                    .a = f->split_gen});
    return 0;
}

/* --seats: a replica's map as a meta_state (empty before its first META entry); NULL
 * (and the run failed) when its bytes do not decode. */
static meta_state *map_open(sim *s, const fsm_group *f)
{
    strata_err err;
    meta_state *m = f->map != NULL ? meta_state_decode(f->map, f->map_len, &err) : meta_new();
    if (m == NULL)
        fail(s, "seats: a replica's map does not decode: %s",
             f->map != NULL ? err.msg : "out of memory");
    return m;
}

/* --seats: a META entry of group 0 ('M' | a meta record, as stratad's meta log holds
 * them): the replica's map applies it; a command the map refuses (planned against an
 * older map, say) changes nothing, as in stratad. Check 2 records the record's hash. */
static int apply_meta(sim *s, node *nd, uint64_t index, const uint8_t *rec, size_t len)
{
    fsm_group *f = &nd->fsm[0];
    meta_state *m = map_open(s, f);
    if (m == NULL)
        return 0;
    strata_err err;
    meta_cmd c;
    if (meta_decode(rec, len, &c, &err) != 0) {
        fail(s, "node %d: META entry at %" PRIu64 ": %s", nd->id, index, err.msg);
        meta_free(m);
        return 0;
    }
    /* Rolling upgrades: no writer uses a format some node may not read yet. */
    if (meta_record_format(rec, len) > meta_format(m))
        fail(s, "node %d: META entry at %" PRIu64 " is of format %u, the cluster's is %u", nd->id,
             index, meta_record_format(rec, len), meta_format(m));
    /* Only an operator ends a drain: a liveness mark (it names the state it was planned
     * from) that lands after a drain must be refused. */
    const meta_node *was = meta_node_find(m, c.node.id);
    uint64_t drained = c.kind == META_CMD_NODE_STATE && c.state_base != 0 && was != NULL &&
                               was->state == META_NODE_DRAINING
                           ? c.node.id
                           : 0;
    if (meta_apply_cmd(m, &c, &err) != 0 && err.code == ERR_NOMEM)
        fail(s, "node %d: META entry at %" PRIu64 ": %s", nd->id, index, err.msg);
    meta_cmd_free(&c);
    if (drained != 0 && meta_node_find(m, drained)->state != META_NODE_DRAINING)
        fail(s, "node %d: a liveness mark at %" PRIu64 " ended node %" PRIu64 "'s drain", nd->id,
             index, drained);
    if (meta_check(m, &err) != 0) /* every rule of the map, the formats' among them */
        fail(s, "node %d: the map after META entry %" PRIu64 ": %s", nd->id, index, err.msg);
    buf b;
    buf_init(&b, 0);
    if (meta_state_encode(m, &b, &err) != 0)
        fail(s, "node %d: map encode: %s", nd->id, err.msg);
    free(f->map);
    f->map = b.data; /* the map keeps the encoding's buffer */
    f->map_len = b.len;
    meta_free(m);
    record_index(s, nd, 0, index, META_MARK | (XXH3_64bits(rec, len) & 0xFFFFFFFFFFull));
    return 0;
}

static int fsm_apply(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                     void **result, size_t *result_len)
{
    node *nd = ctx;
    sim *s = nd->sim;
    fsm_group *f = &nd->fsm[group];
    const uint8_t *c = cmd;
    bool is_split = s->splits && len > WRITE_LEN && c[0] == 'S';
    bool is_meta = s->seats && group == 0 && len > 9 && c[0] == 'M';
    if (len != (s->splits ? WRITE_LEN : 9) && !is_split && !is_meta) {
        fail(s, "node %d group %" PRIu64 ": bad command length %zu", nd->id, group, len);
        return 0;
    }
    if (index <= f->applied)
        fail(s, "node %d group %" PRIu64 ": applied %" PRIu64 " after %" PRIu64, nd->id, group,
             index, f->applied);
    if (nd->installing[group])
        fail(s, "node %d group %" PRIu64 ": apply of %" PRIu64 " during a snapshot install", nd->id,
             group, index);
    /* Back-pressure: the engine is sometimes full. The host must then apply nothing of
     * the group until the resume (a later simulated event), and restart at this index. */
    if (f->busy_index != 0)
        fail(s, "node %d group %" PRIu64 ": apply of %" PRIu64 " while blocked at %" PRIu64, nd->id,
             group, index, f->busy_index);
    if (f->retry_index != 0 && index != f->retry_index)
        fail(s, "node %d group %" PRIu64 ": resumed at %" PRIu64 ", refused %" PRIu64, nd->id,
             group, index, f->retry_index);
    f->retry_index = 0;
    if (chance(&s->rng, 30)) {
        f->busy_index = index;
        s->busy++;
        push(s, (event){.time = s->now + 1 + rnd(&s->rng, 20),
                        .type = EV_RESUME,
                        .node = nd->id,
                        .group = group,
                        .gen = nd->incarnation});
        return RAFT_HOST_APPLY_BUSY;
    }
    if (is_split)
        return apply_split(s, nd, group, index, c, len);
    if (is_meta)
        return apply_meta(s, nd, index, c + 1, len - 1);
    if (s->splits && c[0] == NOP_KEY) {
        record_index(s, nd, group, index, NOP_MARK);
        return 0;
    }
    int key = c[0] % NKEYS;
    uint64_t wid, hash = 0;
    memcpy(&wid, c + 1, 8);
    if (s->splits)
        memcpy(&hash, c + 9, 8);
    record_index(s, nd, group, index, wid);
    grow_u64(&s->wid_fate, &s->wid_fate_cap, wid);
    if (s->wid_fate[wid] & (WID_NOT_APPLIED << (2 * group)))
        fail(s, "write %" PRIu64 " reported never to commit, applied at index %" PRIu64, wid,
             index);
    s->wid_fate[wid] |= WID_APPLIED << (2 * group);
    if (s->splits && !in_range(f, hash)) {
        /* Not applied: the key moved to a child; the client sends it there. */
        uint8_t *m = malloc(2);
        if (m != NULL) {
            m[0] = 0xFF;
            m[1] = 'M';
            *result = m;
            *result_len = 2;
        }
        return 0;
    }
    uint64_t *res = malloc(16); /* the previous write id, and the key's new version */
    if (s->splits) {
        f->kv_ver[key]++;
        record_version(s, nd, group, key, f->kv_ver[key], wid);
    }
    if (res != NULL) {
        res[0] = f->kv_wid[key];
        res[1] = f->kv_ver[key];
        *result = res;
        *result_len = 16;
    }
    f->kv_wid[key] = wid;
    f->kv_idx[key] = index;
    return 0;
}

/* ---- engine durability and out-of-band snapshot copies ---- */

static void fsm_free(fsm_group *f)
{
    free(f->wid);
    free(f->map);
    memset(f, 0, sizeof *f);
}

/* dst's map := a copy of src's. */
static void map_copy(fsm_group *dst, const fsm_group *src)
{
    free(dst->map);
    dst->map = NULL;
    dst->map_len = 0;
    if (src->map != NULL) {
        dst->map = xcalloc(src->map_len, 1);
        memcpy(dst->map, src->map, src->map_len);
        dst->map_len = src->map_len;
    }
}

/* dst := src (deep), without the back-pressure bookkeeping. */
static void fsm_copy(fsm_group *dst, const fsm_group *src)
{
    fsm_free(dst);
    *dst = *src;
    dst->wid = NULL;
    dst->cap = 0;
    dst->map = NULL;
    map_copy(dst, src);
    dst->busy_index = dst->retry_index = 0;
    dst->split_index = 0; /* a SPLIT in progress is the live replica's, not its state's */
    if (src->wid != NULL) {
        dst->wid = xcalloc(src->cap, sizeof *dst->wid);
        memcpy(dst->wid, src->wid, src->cap * sizeof *dst->wid);
        dst->cap = src->cap;
    }
}

/* A simulated message on the copy path: same links, losses and ordering as Raft's. */
static bool net_time(sim *s, int from, int to, uint64_t *t)
{
    if (s->now < FAULT_END_MS && (s->link_down[from][to] || chance(&s->rng, 20)))
        return false;
    *t = s->now + 1 + rnd(&s->rng, 8);
    if (*t < s->link_last[from][to])
        *t = s->link_last[from][to];
    s->link_last[from][to] = *t;
    return true;
}

static void copy_request(sim *s, copy_session *c)
{
    uint64_t id = (uint64_t)(c - s->sess), t;
    c->req_gen++;
    if (net_time(s, c->dest, c->src, &t))
        push(s, (event){.time = t,
                        .type = EV_COPY_REQ,
                        .node = c->src,
                        .from = c->dest,
                        .a = id,
                        .b = c->next_chunk});
    push(s, (event){.time = s->now + COPY_RETRY_MS,
                    .type = EV_COPY_TIMEOUT,
                    .node = c->dest,
                    .a = id,
                    .b = c->req_gen});
}

static int fsm_install(void *ctx, uint64_t group, uint64_t index, uint64_t term, uint64_t from,
                       uint64_t token)
{
    (void)term;
    node *nd = ctx;
    sim *s = nd->sim;
    /* The engine's back-pressure state is moot: the snapshot supersedes the refused entry. */
    nd->fsm[group].busy_index = nd->fsm[group].retry_index = 0;
    nd->fsm[group].split_index = 0; /* the copy holds whatever a pending SPLIT would make */
    nd->split_wait[group] = false;
    nd->installing[group] = true;
    if (from < 1 || from > (uint64_t)s->nnodes || from == (uint64_t)nd->id || chance(&s->rng, 50))
        return -1; /* cannot start (sometimes on purpose): the host retries */
    if (s->nsess == s->capsess) {
        s->capsess = s->capsess ? s->capsess * 2 : 16;
        copy_session *n = xcalloc(s->capsess, sizeof *n);
        if (s->nsess)
            memcpy(n, s->sess, s->nsess * sizeof *n);
        free(s->sess);
        s->sess = n;
    }
    copy_session *c = &s->sess[s->nsess++];
    memset(c, 0, sizeof *c);
    *c = (copy_session){.active = true,
                        .dest = nd->id,
                        .src = (int)from,
                        .group = (int)group,
                        .dest_inc = nd->incarnation,
                        .index = index,
                        .token = token};
    copy_request(s, c);
    return 0;
}

/* At the source: answer from its frozen engine snapshot (frozen by the first request). */
static void copy_serve(sim *s, node *src, copy_session *c, uint64_t chunk)
{
    if (!c->active || !src->up)
        return;
    if (!c->frozen || c->src_inc != src->incarnation) {
        const fsm_group *live = &src->fsm[c->group];
        if (chunk != 0 || src->installing[c->group] || live->applied < c->index)
            return; /* snapshot lost with a restart, or not far enough yet: no answer */
        fsm_copy(&c->snap, live);
        if (s->inject == INJECT_BAD_COPY && c->snap.applied > 0)
            c->snap.wid[c->snap.applied] = 0; /* the engine snapshot misses its last write */
        c->frozen = true;
        c->src_inc = src->incarnation;
        c->nchunks = (c->snap.applied + 1 + COPY_CHUNK - 1) / COPY_CHUNK;
    }
    uint64_t t;
    s->chunks++;
    if (net_time(s, src->id, c->dest, &t))
        push(s, (event){.time = t,
                        .type = EV_COPY_CHUNK,
                        .node = c->dest,
                        .from = src->id,
                        .a = (uint64_t)(c - s->sess),
                        .b = chunk});
}

/* Every copied command must be the one the cluster agreed on at its index. */
static void check_copied(sim *s, const copy_session *c)
{
    const fsm_group *f = &c->recv;
    for (uint64_t i = 1; i <= f->applied && !s->failed; i++) {
        if (f->wid[i] == 0)
            continue;
        grow_u64(&s->global_wid[c->group], &s->global_cap[c->group], i);
        uint64_t *gw = &s->global_wid[c->group][i];
        if (*gw == 0)
            *gw = f->wid[i];
        else if (*gw != f->wid[i])
            fail(s, "group %d index %" PRIu64 ": copied write %" PRIu64 ", applied %" PRIu64,
                 c->group, i, f->wid[i], *gw);
    }
}

static void copy_finish(sim *s, node *nd, copy_session *c)
{
    fsm_group *live = &nd->fsm[c->group];
    c->active = false;
    check_copied(s, c);
    if (c->recv.applied < live->applied)
        fail(s, "node %d group %d: install to %" PRIu64 " but %" PRIu64 " was applied", nd->id,
             c->group, c->recv.applied, live->applied);
    /* The installed state is durable before the host hears of it (raft_host.h). */
    fsm_copy(live, &c->recv);
    fsm_copy(&nd->dur[c->group], &c->recv);
    nd->installing[c->group] = false;
    s->installs++;
    strata_err err;
    if (raft_host_snapshot_installed(nd->host, c->token, 0, c->recv.applied, &err) != 0)
        fail(s, "node %d group %d: install completion refused: %s", nd->id, c->group, err.msg);
}

/* At the destination: a chunk arrived (the bytes are the frozen snapshot's range). */
static void copy_receive(sim *s, node *nd, copy_session *c, uint64_t chunk)
{
    if (!c->active || !nd->up || nd->incarnation != c->dest_inc || chunk != c->next_chunk)
        return;
    fsm_group *r = &c->recv;
    uint64_t lo = chunk * COPY_CHUNK, hi = lo + COPY_CHUNK - 1;
    if (hi > c->snap.applied)
        hi = c->snap.applied;
    grow_u64(&r->wid, &r->cap, hi);
    for (uint64_t i = lo; i <= hi; i++)
        r->wid[i] = c->snap.wid != NULL && i < c->snap.cap ? c->snap.wid[i] : 0;
    c->next_chunk++;
    c->attempts = 0;
    if (c->next_chunk < c->nchunks) {
        copy_request(s, c);
        return;
    }
    r->applied = c->snap.applied; /* the last chunk carries the key/value heads too */
    memcpy(r->kv_wid, c->snap.kv_wid, sizeof r->kv_wid);
    memcpy(r->kv_idx, c->snap.kv_idx, sizeof r->kv_idx);
    memcpy(r->kv_ver, c->snap.kv_ver, sizeof r->kv_ver);
    r->lo = c->snap.lo; /* the range as of the copy: a split applied at the source shrank it */
    r->hi = c->snap.hi;
    map_copy(r, &c->snap);
    copy_finish(s, nd, c);
}

static void copy_timeout(sim *s, node *nd, copy_session *c, uint64_t gen)
{
    if (!c->active || !nd->up || nd->incarnation != c->dest_inc || gen != c->req_gen)
        return;
    if (++c->attempts < COPY_ATTEMPTS) {
        copy_request(s, c);
        return;
    }
    c->active = false;
    s->install_failures++;
    strata_err err;
    if (raft_host_snapshot_installed(nd->host, c->token, -1, 0, &err) != 0)
        fail(s, "node %d group %d: install failure refused: %s", nd->id, c->group, err.msg);
}

/* The engine makes its state durable now and then; the log below it may then go. */
static void reconcile_children(sim *s, node *nd);
static void child_nop(sim *s, node *nd, int c);

static void flush(sim *s)
{
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        for (int g = 0; nd->up && g < s->ngroups; g++) {
            /* Not while a SPLIT's records await their flush: that flush (EV_SPLIT) makes
             * the parent durable at the split and then starts the child, as in stratad
             * (where any flush would do; a restart then starts the child from its record,
             * as after EV_SPLIT). */
            if (!chance(&s->rng, 500) || !nd->hosted[g] || nd->fsm[g].split_index != 0)
                continue;
            fsm_copy(&nd->dur[g], &nd->fsm[g]);
            raft_host_group_stats st;
            strata_err err;
            if (raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0)
                continue;
            /* A child's log does not rebuild its state (the parent's log did): stratad
             * compacts it whole once it applied past index 2 and flushed, so a replica
             * joining later gets a copy (snapshots_tick). */
            uint64_t at = s->as_stratad ? st.applied_index : nd->dur[g].applied;
            if (nd->child[g] && st.snapshot_index < 2 && at >= 2 && !st.installing) {
                s->compact_alls++;
                if (raft_host_compact_all(nd->host, (uint64_t)g, at, &err) != 0 &&
                    err.code != ERR_UNAVAILABLE)
                    fail(s, "node %d group %d: compact_all at %" PRIu64 ": %s", i, g,
                         nd->dur[g].applied, err.msg);
                continue;
            }
            /* --rejoin: fewer compaction points, so that the point a leader sends a replica
             * joining back often predates the change that removed it. */
            if (nd->dur[g].applied < st.snapshot_index + COMPACT_GAP * (s->rejoin ? 4 : 1))
                continue;
            s->compactions++;
            if (raft_host_compact(nd->host, (uint64_t)g, nd->dur[g].applied, &err) != 0 &&
                err.code != ERR_UNAVAILABLE)
                fail(s, "node %d group %d: compact at %" PRIu64 ": %s", i, g, nd->dur[g].applied,
                     err.msg);
        }
        if (s->splits && nd->up)
            reconcile_children(s, nd);
        for (int g = 0; s->splits && nd->up && g < s->ngroups; g++)
            child_nop(s, nd, g);
    }
}

/* ---- nodes ---- */

/* Starts a child created by a SPLIT on this node, from its record: with the listed voters
 * (identically on every listed node), or joining if the entry listed this node as a
 * learner. Its state holds the parent's data as of the child's first entry (stratad:
 * applied is at least 1). */
static int start_child(node *nd, int g, strata_err *err)
{
    const split_entry *r = &nd->rec[g];
    uint64_t voters[MAX_NODES + 2];
    size_t nv = 0;
    bool self_voter = false;
    for (int k = 0; k < r->n; k++)
        if (r->voter[k]) {
            voters[nv++] = r->node[k];
            self_voter = self_voter || r->node[k] == nd->id;
        }
    uint64_t applied = nd->fsm[g].applied ? nd->fsm[g].applied : 1;
    return self_voter ? raft_host_start_group(nd->host, (uint64_t)g, voters, nv, applied, err)
                      : raft_host_join_group(nd->host, (uint64_t)g, applied, err);
}

static void node_start(sim *s, node *nd)
{
    strata_err err;
    raft_host_config cfg = {
        .node_id = (uint64_t)nd->id,
        .storage = {.ctx = nd,
                    .load = st_load,
                    .set_term_vote = st_term_vote,
                    .append = st_append,
                    .set_snapshot = st_set_snapshot},
        .transport = {.ctx = nd, .send = tr_send},
        .clock = {.ctx = nd, .now = ck_now, .arm = ck_arm},
        .fsm = {.ctx = nd, .apply = fsm_apply, .install = fsm_install},
        .election_timeout_ms = 150,
        .heartbeat_timeout_ms = 30,
        .seed = s->seed * 31 + nd->incarnation,
        .snapshot_trailing = 8,
        .install_snapshot_timeout_ms = 300,
    };
    nd->host = raft_host_create(&cfg, &err);
    if (nd->host == NULL) {
        fail(s, "node %d: create: %s", nd->id, err.msg);
        return;
    }
    nd->up = true;
    uint64_t members[MAX_NODES];
    for (int i = 0; i < s->nvoters; i++)
        members[i] = (uint64_t)i + 1;
    for (int g = 0; g < s->ngroups; g++) {
        int rc = 0;
        if (!nd->hosted[g])
            continue;
        if (nd->child[g])
            rc = start_child(nd, g, &err);
        else if (nd->joined[g])
            rc = raft_host_join_group(nd->host, (uint64_t)g, nd->fsm[g].applied, &err);
        else
            rc = raft_host_start_group(nd->host, (uint64_t)g, members, (size_t)s->nvoters,
                                       nd->fsm[g].applied, &err);
        if (rc != 0)
            fail(s, "node %d group %d: start: %s", nd->id, g, err.msg);
    }
}

/* A crash loses what the engine had not made durable. */
static void fsm_reset(node *nd)
{
    for (int g = 0; g < MAX_GROUPS; g++) {
        fsm_copy(&nd->fsm[g], &nd->dur[g]);
        nd->installing[g] = false;
        nd->split_wait[g] = false;
        fsm_free(&nd->split_child[g]);
        fsm_free(&nd->split_dur[g]);
    }
}

static void node_crash(sim *s, node *nd)
{
    if (s->inject == INJECT_LYING_DISK && !s->failed && s->now < FAULT_END_MS)
        for (int g = 0; g < MAX_GROUPS; g++) {
            dgroup *d = &nd->disk[g];
            size_t drop = d->n > 4 ? 3 : 0; /* "synced" but lost: fsync lied */
            for (size_t i = d->n - drop; i < d->n; i++)
                free(d->log[i].data);
            d->n -= drop;
        }
    nd->up = false;
    nd->paused_until = 0;
    nd->incarnation++;
    nd->timer_gen++;
    disk_drop_pending(nd);
    raft_host *h = nd->host;
    nd->host = NULL;
    raft_host_destroy(h); /* pending client ops fail here */
    fsm_reset(nd);
}

/* ---- clients ---- */

/* --splits: the group the client believes owns hash h (its copy of the map). */
static int route(sim *s, uint64_t h)
{
    for (int g = 0; g < s->ngroups; g++)
        if (s->client_map[g].created && s->client_map[g].lo <= h && h <= s->client_map[g].hi)
            return g;
    return 0;
}

static bool is_moved(const raft_host_outcome *o)
{
    const uint8_t *r = o->result;
    return o->result_len == 2 && r[0] == 0xFF && r[1] == 'M';
}

/* A MOVED answer: the client refreshes its map and sends the op again (a little later:
 * a round trip), to the group that owns the key now. */
static void op_moved(sim *s, cop *p)
{
    s->moved++;
    if (++p->hops > MAX_HOPS) {
        p->done = true;
        return;
    }
    memcpy(s->client_map, s->map, sizeof s->client_map);
    push(s, (event){.time = s->now + 1 + rnd(&s->rng, 3), .type = EV_RESEND, .a = p->id});
}

static void split_read_done(sim *s, cop *p, const fsm_group *f)
{
    s->reads_ok++;
    int k = p->key;
    p->read_wid = f->kv_wid[k];
    p->ver = f->kv_ver[k];
    if (p->ver < p->min_ver)
        fail(s,
             "stale read on node %d group %d key %d: version %" PRIu64 " (write %" PRIu64
             "), but version %" PRIu64 " was acknowledged/read before the read began",
             p->node, p->group, k, p->ver, p->read_wid, p->min_ver);
    else if (p->ver > s->hist_n[k] || (p->ver > 0 && s->hist[k][p->ver] != p->read_wid))
        fail(s, "read on node %d group %d key %d: write %" PRIu64 " as version %" PRIu64
             ", not in the key's history", p->node, p->group, k, p->read_wid, p->ver);
    if (p->ver > s->read_max_ver[k])
        s->read_max_ver[k] = p->ver;
}

static void op_done(void *data, const raft_host_outcome *o)
{
    cop *p = data;
    sim *s = p->sim;
    p->done = true;
    if (o->leader_hint != 0)
        s->leader_hint[p->group] = o->leader_hint;
    if (o->code == ERR_UNAVAILABLE && o->not_applied && !p->is_read) {
        grow_u64(&s->wid_fate, &s->wid_fate_cap, p->wid);
        if (s->wid_fate[p->wid] & (WID_APPLIED << (2 * p->group)))
            fail(s, "write %" PRIu64 " reported never to commit, but already applied", p->wid);
        s->wid_fate[p->wid] |= WID_NOT_APPLIED << (2 * p->group);
        s->not_applied++;
    }
    if (o->code != ERR_NONE)
        return;
    node *nd = &s->nodes[p->node];
    fsm_group *f = &nd->fsm[p->group];
    if (!p->is_read) {
        if (o->index > f->applied || f->wid[o->index] != p->wid)
            fail(s, "write %" PRIu64 " acknowledged at index %" PRIu64 " but not applied there",
                 p->wid, o->index);
        if (s->splits && is_moved(o)) {
            p->done = false;
            op_moved(s, p);
            return;
        }
        p->ok = true;
        p->idx = o->index;
        s->acked++;
        if (o->index > s->acked_max_idx[p->group][p->key])
            s->acked_max_idx[p->group][p->key] = o->index;
        if (s->splits) {
            if (o->result_len == 16)
                memcpy(&p->ver, (const uint8_t *)o->result + 8, 8);
            if (p->ver == 0 || p->ver > s->hist_n[p->key] || s->hist[p->key][p->ver] != p->wid)
                fail(s, "write %" PRIu64 " acknowledged as version %" PRIu64 " of key %d, not in "
                     "the key's history", p->wid, p->ver, p->key);
            if (p->ver > s->acked_max_ver[p->key])
                s->acked_max_ver[p->key] = p->ver;
        }
        return;
    }
    if (s->splits) {
        /* stratad checks the range once the read is confirmed: a split moved the key away. */
        if (!in_range(f, p->hash)) {
            p->done = false;
            op_moved(s, p);
            return;
        }
        p->ok = true;
        split_read_done(s, p, f);
        return;
    }
    p->ok = true;
    s->reads_ok++;
    p->read_wid = f->kv_wid[p->key];
    p->idx = f->kv_idx[p->key];
    if (p->idx < p->min_idx)
        fail(s,
             "stale read on node %d group %d key %d: index %" PRIu64 " (write %" PRIu64
             "), but index %" PRIu64 " was acknowledged/read before the read began",
             p->node, p->group, p->key, p->idx, p->read_wid, p->min_idx);
    if (p->idx > s->read_max_idx[p->group][p->key])
        s->read_max_idx[p->group][p->key] = p->idx;
}

/* Sends op p (again, after a MOVED) to the node believed to lead its group, or a random
 * one. A refusal (not the leader) ends it: the client does not retry those. */
static void op_send(sim *s, cop *p)
{
    uint64_t hint = s->leader_hint[p->group];
    p->node =
        hint != 0 && chance(&s->rng, 800) ? (int)hint : 1 + (int)rnd(&s->rng, (uint64_t)s->nnodes);
    node *nd = &s->nodes[p->node];
    if (!nd->up) {
        p->done = true;
        return;
    }
    strata_err err;
    int rc;
    if (p->is_read) {
        if (s->inject == INJECT_STALE_READ) {
            raft_host_outcome o = {.code = ERR_NONE};
            op_done(p, &o); /* no barrier: the local state may be stale */
            return;
        }
        rc = chance(&s->rng, 250)
                 ? raft_host_read_barrier(nd->host, (uint64_t)p->group, op_done, p, &err)
                 : raft_host_read_index(nd->host, (uint64_t)p->group, op_done, p, &err);
    } else {
        uint8_t cmd[WRITE_LEN];
        cmd[0] = (uint8_t)p->key;
        memcpy(cmd + 1, &p->wid, 8);
        memcpy(cmd + 9, &p->hash, 8);
        rc = raft_host_submit(nd->host, (uint64_t)p->group, cmd, s->splits ? WRITE_LEN : 9,
                              op_done, p, &err);
    }
    if (rc != 0) {
        p->done = true;
        uint64_t l = raft_host_leader(nd->host, (uint64_t)p->group);
        s->leader_hint[p->group] = l;
    }
}

static void client_op(sim *s)
{
    cop *p = xcalloc(1, sizeof *p);
    if (s->nops == s->capops) {
        s->capops = s->capops ? s->capops * 2 : 256;
        cop **n = xcalloc(s->capops, sizeof *n);
        if (s->nops)
            memcpy(n, s->ops, s->nops * sizeof *n);
        free(s->ops);
        s->ops = n;
    }
    p->id = s->nops;
    s->ops[s->nops++] = p;
    p->sim = s;
    if (s->splits) {
        p->key = (int)rnd(&s->rng, (uint64_t)s->nkeys);
        p->hash = s->key_hash[p->key];
        p->group = route(s, p->hash);
    } else {
        p->group = (int)rnd(&s->rng, (uint64_t)s->ngroups);
        p->key = (int)rnd(&s->rng, (uint64_t)s->nkeys);
    }
    p->is_read = chance(&s->rng, 400);
    p->start = s->now;
    if (p->is_read) {
        uint64_t a = s->acked_max_idx[p->group][p->key], b = s->read_max_idx[p->group][p->key];
        p->min_idx = a > b ? a : b;
        a = s->acked_max_ver[p->key];
        b = s->read_max_ver[p->key];
        p->min_ver = a > b ? a : b;
    } else {
        p->wid = ++s->next_wid;
    }
    op_send(s, p);
}

/* EV_RESEND: a MOVED op goes to the owner the client knows now. */
static void op_resend(sim *s, cop *p)
{
    p->group = route(s, p->hash);
    op_send(s, p);
}

/* ---- faults ---- */

static int count_down(sim *s)
{
    int n = 0;
    for (int i = 1; i <= s->nnodes; i++)
        n += !s->nodes[i].up;
    return n;
}

static void fault(sim *s)
{
    uint64_t what = rnd(&s->rng, 11);
    int n = 1 + (int)rnd(&s->rng, (uint64_t)s->nnodes);
    node *nd = &s->nodes[n];
    if (what < 3) {
        if (nd->up && count_down(s) < (s->nvoters - 1) / 2 + 1) {
            s->crashes++;
            node_crash(s, nd);
        } else if (!nd->up) {
            node_start(s, nd);
        }
    } else if (what < 5) {
        if (!nd->up)
            node_start(s, nd);
    } else if (what < 7) {
        for (int i = 1; i <= s->nnodes; i++) /* isolate n */
            s->link_down[n][i] = s->link_down[i][n] = i != n;
    } else if (what < 8) {
        int m = 1 + (int)rnd(&s->rng, (uint64_t)s->nnodes);
        s->link_down[n][m] = true; /* one-way cut */
    } else if (what == 10) {
        if (nd->up && nd->paused_until <= s->now)
            nd->paused_until = s->now + 300 + rnd(&s->rng, 900);
    } else {
        memset(s->link_down, 0, sizeof s->link_down);
    }
}

/* ---- replica moves (--moves) ---- */

/* The up node leading `g` in the highest term, 0 if none. */
static int group_leader(sim *s, int g)
{
    int best = 0;
    uint64_t term = 0;
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        raft_host_group_stats st;
        if (!nd->up || raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0)
            continue;
        if (st.state == 3 && !st.failed && st.term > term) {
            term = st.term;
            best = i;
        }
    }
    return best;
}

/* group_leader, provided it leads in the highest term the mover has seen a leader in and
 * no up member of its configuration has seen a later term: a leader cut off (or frozen)
 * since an older term still believes it leads while the others elect, and its
 * configuration may be long superseded. The mover steps by what the leader's
 * configuration shows, so it must not read a stale one (it once took a move as done from
 * a stale leader's view, promoted voter and all). A node outside the configuration
 * (joining empty, say) may hold any term. */
static int current_leader(sim *s, int g)
{
    int l = group_leader(s, g);
    raft_host_group_stats lst;
    raft_host_member m[MAX_NODES + 1];
    size_t n = 0;
    bool unc;
    if (l == 0 || raft_host_group_info(s->nodes[l].host, (uint64_t)g, &lst, NULL) != 0 ||
        raft_host_configuration(s->nodes[l].host, (uint64_t)g, m, MAX_NODES + 1, &n, &unc, NULL) !=
            0 ||
        n > MAX_NODES + 1 || lst.term < s->leader_term[g])
        return 0;
    s->leader_term[g] = lst.term;
    for (size_t k = 0; k < n; k++) {
        raft_host_group_stats st;
        int i = (int)m[k].id;
        if (i >= 1 && i <= s->nnodes && s->nodes[i].up &&
            raft_host_group_info(s->nodes[i].host, (uint64_t)g, &st, NULL) == 0 &&
            st.term > lst.term)
            return 0;
    }
    return l;
}

static int member_role(const raft_host_member *m, size_t n, uint64_t id) /* -1 absent, 0, 1 */
{
    for (size_t i = 0; i < n; i++)
        if (m[i].id == id)
            return m[i].voter ? 1 : 0;
    return -1;
}

/* The replica on nd is gone for good (like stratad after a move: raft_host_stop_group,
 * wal_drop_group, the partition's data dropped). */
static void drop_replica(sim *s, node *nd, int g)
{
    strata_err err;
    if (nd->up && raft_host_stop_group(nd->host, (uint64_t)g, &err) != 0)
        fail(s, "node %d group %d: stop: %s", nd->id, g, err.msg);
    for (dop *op = nd->pending_head; op != NULL; op = op->next)
        if (op->group == (uint64_t)g)
            op->dropped = true;
    dgroup *d = &nd->disk[g];
    for (size_t k = 0; k < d->n; k++)
        free(d->log[k].data);
    free(d->log);
    free(d->meta);
    memset(d, 0, sizeof *d);
    fsm_free(&nd->fsm[g]);
    fsm_free(&nd->dur[g]);
    nd->installing[g] = false;
    for (size_t k = 0; k < s->nsess; k++)
        if (s->sess[k].dest == nd->id && s->sess[k].group == g)
            s->sess[k].active = false;
    nd->hosted[g] = false;
    nd->joined[g] = false;
    nd->child[g] = false; /* stratad forgets the range record too */
}

static bool local_overlap(sim *s, node *nd, int c);
static bool child_sealed(sim *s, int c);

/* --splits: a group missing a replica - a listed node that has not started the child, or a
 * joined one that has no state yet (it cannot vote until a leader sends it a copy) - is
 * not moved (a scheduler repairs a group before it moves it). Moving it anyway can leave
 * it leaderless for good: with one voter missing, promoting the learner makes a quorum of
 * all the others, and if the leader is lost before the learner learns of its promotion,
 * nobody left can win an election (seen with seeds 841 and 906 of --splits --moves). */
static bool group_incomplete(sim *s, int g)
{
    for (int i = 1; i <= s->nnodes; i++)
        if (s->owed[i][g] || (s->nodes[i].hosted[g] && s->nodes[i].joined[g] &&
                              s->nodes[i].fsm[g].applied == 0))
            return true;
    return false;
}

static void change_done(void *data, const raft_host_outcome *o)
{
    change_slot *slot = data;
    (void)o;
    slot->inflight = false;
}

/* Proposes `m` as group g's configuration on `leader`, unless `slot` has a change
 * outstanding (for less than a second: a lost callback does not stop the mover). */
static void propose_change(sim *s, change_slot *slot, int leader, int g,
                           const raft_host_member *m, size_t n)
{
    if (slot->inflight && s->now < slot->since + 1000)
        return;
    strata_err err;
    slot->inflight = true;
    slot->since = s->now;
    s->changes++;
    if (raft_host_change(s->nodes[leader].host, (uint64_t)g, m, n, change_done, slot, &err) != 0) {
        slot->inflight = false;
        if (err.code != ERR_UNAVAILABLE && err.code != ERR_BUSY)
            fail(s, "group %d: change refused: %s", g, err.msg);
    }
}

/* Proposes `m` on the leader unless a change is outstanding. */
static void move_propose(sim *s, int leader, const raft_host_member *m, size_t n)
{
    propose_change(s, &s->mv.change, leader, s->mv.group, m, n);
}

/* Starts a move of a random group to a random spare node, or (back >= 1, --rejoin) of
 * group `back_g` to node `back`, the one it was just dropped from. */
static void move_start(sim *s, int back_g, int back)
{
    mover *mv = &s->mv;
    int g = back > 0 ? back_g : (int)rnd(&s->rng, (uint64_t)s->ngroups);
    int spare[MAX_NODES], nspare = 0, held[MAX_NODES], nheld = 0;
    if (s->splits && (!s->map[g].created || !child_sealed(s, g) || group_incomplete(s, g)))
        return;
    if (s->seats && g == 0)
        return; /* group 0's members follow its seats */
    for (int i = 1; i <= s->nnodes; i++) {
        if (s->nodes[i].hosted[g])
            held[nheld++] = i;
        else if (!s->owed[i][g] && !(s->splits && local_overlap(s, &s->nodes[i], g)))
            spare[nspare++] = i; /* (owed: it gets the child from its SPLIT or the map; an
                                    overlapping local replica: stratad waits for it) */
    }
    if (back > 0) {
        nspare = 0;
        if (!s->nodes[back].hosted[g] && !s->owed[back][g])
            spare[nspare++] = back;
    }
    if (nspare == 0 || nheld == 0)
        return;
    *mv = (mover){.phase = MV_ADD,
                  .group = g,
                  .from = held[rnd(&s->rng, (uint64_t)nheld)],
                  .to = spare[rnd(&s->rng, (uint64_t)nspare)]};
    s->rejoins_started += back > 0;
    node *to = &s->nodes[mv->to];
    to->hosted[g] = true;
    to->joined[g] = true;
    to->fsm[g].lo = to->dur[g].lo = s->map[g].lo; /* stratad: the map's range */
    to->fsm[g].hi = to->dur[g].hi = s->map[g].hi;
    strata_err err;
    if (to->up && raft_host_join_group(to->host, (uint64_t)g, to->fsm[g].applied, &err) != 0)
        fail(s, "node %d group %d: join: %s", mv->to, g, err.msg);
}

/* --learner-says: stratad's rule for promoting a learner (router_cluster.c,
 * replica_promotable, asked by rpc there): its own node says the replica follows a known
 * leader, copies no snapshot, applied all it knows committed, and is confirmed (an empty
 * replica neither votes nor campaigns until its log reached a leader's commit index).
 * A copy of the partition can put the applied index past the log's end, so "applied all
 * it knows committed" alone can promote a replica that cannot vote: --inject
 * early-promote leaves out "confirmed", as stratad did before. */
static bool learner_says_caught_up(sim *s, int to, int g)
{
    node *nd = &s->nodes[to];
    raft_host_group_stats st;
    if (!nd->up || nd->paused_until > s->now ||
        raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0)
        return false;
    return !st.failed && !st.installing && st.leader != 0 && st.commit_index > 0 &&
           st.applied_index >= st.commit_index &&
           (!st.unconfirmed || s->inject == INJECT_EARLY_PROMOTE);
}

/* One step of the current move, decided from the leader's latest configuration. */
static void move_step(sim *s)
{
    mover *mv = &s->mv;
    if (mv->phase == MV_IDLE) {
        if (s->now < MOVE_END_MS && chance(&s->rng, 300))
            move_start(s, 0, 0);
        return;
    }
    if (mv->phase == MV_DROP) {
        if (s->now >= mv->drop_at) {
            if (!mv->dropped_early)
                drop_replica(s, &s->nodes[mv->from], mv->group);
            mv->phase = MV_IDLE;
            s->moves_done++;
            /* --rejoin: the node that just lost the replica gets it back at once (a drained
             * node re-activated, replicas moving back): it joins empty while the leader's
             * last snapshot point likely predates its removal. */
            if (s->rejoin && s->now < MOVE_END_MS)
                move_start(s, mv->group, mv->from);
        }
        return;
    }
    int l = current_leader(s, mv->group);
    if (l == 0)
        return;
    raft_host *h = s->nodes[l].host;
    raft_host_member m[MAX_NODES + 1];
    size_t n = 0;
    bool unc = false;
    if (raft_host_configuration(h, (uint64_t)mv->group, m, MAX_NODES, &n, &unc, NULL) != 0 ||
        n > MAX_NODES || unc)
        return;
    uint64_t to = (uint64_t)mv->to, from = (uint64_t)mv->from;
    int to_role = member_role(m, n, to), from_role = member_role(m, n, from);
    /* Steps follow the configuration, also backwards should a leader's view have run
     * ahead of what a later leader holds. */
    if ((mv->phase == MV_CATCH_UP || mv->phase == MV_PROMOTE) && to_role < 0)
        mv->phase = MV_ADD;
    if (mv->phase == MV_ADD) {
        if (to_role >= 0) {
            mv->phase = MV_CATCH_UP;
        } else {
            m[n++] = (raft_host_member){to, false};
            move_propose(s, l, m, n);
        }
    }
    if (mv->phase == MV_CATCH_UP) {
        raft_host_group_stats st;
        uint64_t match = 0;
        if (s->learner_says
                ? learner_says_caught_up(s, mv->to, mv->group)
                : raft_host_group_info(h, (uint64_t)mv->group, &st, NULL) == 0 &&
                      raft_host_member_match(h, (uint64_t)mv->group, to, &match, NULL) == 0 &&
                      match >= st.commit_index)
            mv->phase = MV_PROMOTE;
        else
            return;
    }
    if (mv->phase == MV_PROMOTE) {
        if (to_role == 1) {
            mv->phase = MV_REMOVE;
        } else {
            for (size_t i = 0; i < n; i++)
                if (m[i].id == to)
                    m[i].voter = true;
            move_propose(s, l, m, n);
            return;
        }
    }
    if (mv->phase == MV_REMOVE) {
        if (from_role < 0) {
            mv->phase = MV_DROP;
            mv->drop_at = s->now + (s->rejoin ? 5 + rnd(&s->rng, 30) : 50 + rnd(&s->rng, 300));
            return;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (m[i].id != from)
                m[k++] = m[i];
        s->self_removals += l == mv->from && !mv->change.inflight;
        move_propose(s, l, m, k);
        /* --inject early-drop: the replica goes as soon as its removal is decided (as
         * stratad dropped a replica once the map no longer gave it to the node), not once
         * a committed configuration leaves it out; the removal itself goes on as before. */
        if (s->inject == INJECT_EARLY_DROP && l != mv->from && !mv->dropped_early) {
            drop_replica(s, &s->nodes[mv->from], mv->group);
            mv->dropped_early = true;
        }
    }
}

/* ---- splits (--splits) ---- */

static void split_proposed(void *data, const raft_host_outcome *o)
{
    (void)data;
    (void)o;
}

/* dst := the part of src in [lo, hi]: the keys there keep their values and versions, the
 * others are forgotten (the state is filtered by range). */
static void filter_state(sim *s, fsm_group *f, uint64_t lo, uint64_t hi)
{
    f->lo = lo;
    f->hi = hi;
    for (int k = 0; k < s->nkeys; k++)
        if (!in_range(f, s->key_hash[k]))
            f->kv_wid[k] = f->kv_idx[k] = f->kv_ver[k] = 0;
}

/* EV_SPLIT: the SPLIT entry at f->split_index is durable on nd (stratad: the flush after
 * split_write, then split_finish): the parent's state at the split, and (on a node the
 * entry lists) the child's record and first state; then the child starts, and a later
 * SPLIT of the parent refused meanwhile goes on. */
static void split_finish(sim *s, node *nd, int g, uint64_t gen)
{
    fsm_group *f = &nd->fsm[g];
    if (f->split_index == 0 || f->split_gen != gen)
        return; /* superseded: a copy (install) or a restart came first */
    const split_entry e = f->split;
    int c = (int)e.child;
    /* No flush of the group meanwhile (see flush): the durable state is still older. */
    if (s->inject != INJECT_SPLIT_NO_FLUSH)
        fsm_copy(&nd->dur[g], &nd->split_dur[g]);
    bool listed = false;
    for (int k = 0; k < e.n; k++)
        listed = listed || e.node[k] == nd->id;
    if (listed && !nd->hosted[c]) {
        nd->rec[c] = e;
        nd->child[c] = true;
        nd->hosted[c] = true;
        nd->joined[c] = false;
        s->owed[nd->id][c] = false;
        fsm_copy(&nd->fsm[c], &nd->split_child[g]);
        fsm_copy(&nd->dur[c], &nd->split_child[g]);
        strata_err err;
        if (start_child(nd, c, &err) != 0)
            fail(s, "node %d: child %d: start: %s", nd->id, c, err.msg);
    }
    fsm_free(&nd->split_child[g]);
    fsm_free(&nd->split_dur[g]);
    f->split_index = 0;
    if (nd->split_wait[g]) {
        nd->split_wait[g] = false;
        f->retry_index = f->busy_index;
        f->busy_index = 0;
        raft_host_apply_resume(nd->host, (uint64_t)g);
    }
}

/* True when a replica on nd other than group c serves part of c's range (as of its
 * applied state): a parent that has not applied the SPLIT yet creates the child itself. */
static bool local_overlap(sim *s, node *nd, int c)
{
    for (int g = 0; g < s->ngroups; g++) {
        if (g == c || !nd->hosted[g])
            continue;
        if (nd->fsm[g].lo <= s->map[c].hi && s->map[c].lo <= nd->fsm[g].hi)
            return true;
        /* A SPLIT making c here (shrunk, its flush to come) will start it. */
        if (nd->fsm[g].split_index != 0 && (int)nd->fsm[g].split.child == c)
            return true;
    }
    return false;
}

/* A replica of child c that has compacted the child's log whole, durably: as a leader it
 * sends a copy, never entry 1; as a voter its log ends past index 1. */
static bool holds_child_whole(const node *nd, int c)
{
    const dgroup *d = &nd->disk[c];
    return nd->child[c] && d->has && d->snap_index >= 2 && d->start > 2;
}

/* The fix modeled for the flaw the sim found (see the header): a replica that starts a
 * child without its parent's data (joined: from the map, or a move) waits until no
 * replica that may lead the child still holds the child's entry 1 - every replica made by
 * the SPLIT has compacted the child's log whole, durably - so whoever leads sends it a
 * copy, never the log from index 1 (which would rebuild the child on empty data). The
 * listed nodes that have not applied the SPLIT yet make the child later with only entry
 * 1 in its log: Raft's election rule keeps them from leading only once a majority of the
 * listed voters holds the child whole (their logs end past index 1). Without that rule a
 * joiner could start while no replica had made the child at all (seed 1558 of --splits
 * 1001-2000: the first node to apply the SPLIT crashed before its flush, a listed node
 * whose parent was copied past the split joined, the others made the child later from
 * entry 1 and fed the joiner that log). Sealed once, a child stays sealed: its log past
 * index 1 is committed and durable on a majority. */
static bool child_sealed(sim *s, int c)
{
    range_rec *m = &s->map[c];
    if (s->as_stratad || !m->child || m->sealed)
        return true;
    int voters = 0, whole = 0;
    for (int k = 0; k < m->made_by.n; k++) {
        int id = m->made_by.node[k];
        if (!m->made_by.voter[k] || id < 1 || id > s->nnodes)
            continue;
        voters++;
        whole += holds_child_whole(&s->nodes[id], c);
    }
    if (whole < voters / 2 + 1)
        return false;
    for (int i = 1; i <= s->nnodes; i++) {
        const node *nd = &s->nodes[i];
        if (nd->child[c] && !holds_child_whole(nd, c))
            return false;
        /* About to make the child (its records written, the flush to come): stratad's
         * replica_feeds_whole reads the record. */
        for (int g = 0; nd->up && g < s->ngroups; g++)
            if (nd->hosted[g] && nd->fsm[g].split_index != 0 && (int)nd->fsm[g].split.child == c)
                return false;
    }
    m->sealed = true;
    return true;
}

/* The other half of the fix: a child that gets no write would never pass index 1, so
 * never be compacted whole; its leader submits a no-op command. */
static void child_nop(sim *s, node *nd, int c)
{
    const fsm_group *f = &nd->fsm[c];
    if (s->as_stratad || !nd->child[c] || f->applied >= 2 ||
        !raft_host_is_leader(nd->host, (uint64_t)c))
        return;
    uint8_t cmd[WRITE_LEN] = {NOP_KEY};
    raft_host_submit(nd->host, (uint64_t)c, cmd, sizeof cmd, split_proposed, s, NULL);
}

/* The fix's third part: while no replica of the child applied anything past its first
 * entry, a listed node that missed the SPLIT copies the child's first state (the parent's
 * data at the split) from a node that made it, and starts the child exactly as the SPLIT
 * would have (so a child whose makers alone are no quorum still gets one). Returns false
 * when there is no such source (now). */
static bool child_seed(sim *s, node *nd, int c)
{
    for (int i = 1; i <= s->nnodes; i++) {
        node *src = &s->nodes[i];
        if (!src->up || !src->child[c] || src->fsm[c].applied != 1 || src->installing[c] ||
            s->link_down[nd->id][i] || s->link_down[i][nd->id])
            continue;
        nd->rec[c] = src->rec[c];
        nd->child[c] = true;
        nd->hosted[c] = true;
        nd->joined[c] = false;
        s->owed[nd->id][c] = false;
        fsm_copy(&nd->fsm[c], &src->fsm[c]); /* durable before the child starts */
        fsm_copy(&nd->dur[c], &src->fsm[c]);
        s->seeded++;
        strata_err err;
        if (start_child(nd, c, &err) != 0)
            fail(s, "node %d: child %d: start: %s", nd->id, c, err.msg);
        return true;
    }
    return false;
}

/* stratad's reconcile (start_replica): a node the map gives a child, listed in its SPLIT
 * but which never applied it (its parent was copied past it, or removed and dropped),
 * joins the child empty, with the map's range, once no local replica overlaps it (with the
 * fix: seeded while the child is at its first state, else once the child is sealed). */
static void reconcile_children(sim *s, node *nd)
{
    for (int c = 0; c < s->ngroups; c++) {
        if (!s->owed[nd->id][c] || nd->hosted[c] || !s->map[c].created || local_overlap(s, nd, c))
            continue;
        if (!s->as_stratad && s->inject != INJECT_NO_SEED && child_seed(s, nd, c))
            continue;
        if (!child_sealed(s, c))
            continue;
        s->owed[nd->id][c] = false;
        nd->hosted[c] = true;
        nd->joined[c] = true;
        fsm_free(&nd->fsm[c]);
        fsm_free(&nd->dur[c]);
        nd->fsm[c].lo = nd->dur[c].lo = s->map[c].lo;
        nd->fsm[c].hi = nd->dur[c].hi = s->map[c].hi;
        s->rejoins++;
        strata_err err;
        if (raft_host_join_group(nd->host, (uint64_t)c, 0, &err) != 0)
            fail(s, "node %d group %d: join: %s", nd->id, c, err.msg);
    }
}


/* EV_PROPOSE: the leader of a random group carries a split into its log with the
 * configuration it sees (stratad: follow_map_splits), as a new child or, at times, the
 * last proposal again. */
static void split_propose(sim *s)
{
    int g = (int)rnd(&s->rng, (uint64_t)s->ngroups);
    int l = group_leader(s, g);
    if (!s->map[g].created || l == 0 || (s->mv.phase != MV_IDLE && s->mv.group == g))
        return;
    node *nd = &s->nodes[l];
    const fsm_group *f = &nd->fsm[g];
    raft_host_member m[MAX_NODES + 2];
    size_t n = 0;
    bool unc = true;
    if (f->split_index != 0 || f->lo >= f->hi ||
        raft_host_configuration(nd->host, (uint64_t)g, m, MAX_NODES + 2, &n, &unc, NULL) != 0 ||
        unc || n != (size_t)s->nvoters)
        return;
    for (size_t k = 0; k < n; k++)
        if (!m[k].voter)
            return;
    split_entry e = {.n = (int)n};
    for (size_t k = 0; k < n; k++) {
        e.node[k] = (uint8_t)m[k].id;
        e.voter[k] = true;
    }
    range_rec *r = &s->map[g];
    if (r->pend_child != 0 && !s->map[r->pend_child].created && chance(&s->rng, 300)) {
        e.child = r->pend_child;
        e.hash = r->pend_hash;
    } else {
        if (s->ngroups >= MAX_GROUPS)
            return;
        /* The middle of the range, or a key's hash (that key moves to the child). */
        uint64_t k = rnd(&s->rng, (uint64_t)s->nkeys);
        e.hash = f->lo + (f->hi - f->lo) / 2 + 1;
        if (chance(&s->rng, 500) && f->lo < s->key_hash[k] && s->key_hash[k] <= f->hi)
            e.hash = s->key_hash[k];
        e.child = (uint64_t)s->ngroups++;
        r->pend_child = e.child;
        r->pend_hash = e.hash;
    }
    uint8_t cmd[64];
    size_t len = split_encode(&e, cmd, sizeof cmd);
    strata_err err;
    if (len > 0 && raft_host_submit(nd->host, (uint64_t)g, cmd, len, split_proposed, s, &err) == 0)
        s->splits_proposed++;
}

/* ---- checks ---- */

static void check_leaders(sim *s)
{
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        if (!nd->up)
            continue;
        for (int g = 0; g < s->ngroups; g++) {
            raft_host_group_stats st;
            if (raft_host_group_info(nd->host, (uint64_t)g, &st, NULL) != 0)
                continue;
            if (st.failed)
                fail(s, "node %d group %d stopped", i, g);
            /* A replica whose committed configuration makes it a learner, or leaves it
             * out, never campaigns. */
            raft_host_member m[MAX_NODES];
            size_t n = 0;
            bool unc = true;
            if (st.state != 1 &&
                raft_host_configuration(nd->host, (uint64_t)g, m, MAX_NODES, &n, &unc, NULL) == 0 &&
                !unc && n <= MAX_NODES && member_role(m, n, (uint64_t)i) != 1)
                fail(s, "node %d group %d: state %d but not a voter in its configuration", i, g,
                     st.state);
            if (st.state != 3)
                continue;
            grow_u64(&s->term_leader[g], &s->term_cap[g], st.term);
            uint64_t *l = &s->term_leader[g][st.term];
            if (*l == 0)
                *l = (uint64_t)i;
            else if (*l != (uint64_t)i)
                fail(s, "group %d term %" PRIu64 ": two leaders, nodes %" PRIu64 " and %d", g,
                     st.term, *l, i);
        }
    }
}

static uint64_t digest(const fsm_group *f)
{
    uint64_t d = f->applied ? XXH3_64bits(f->wid, (f->applied + 1) * sizeof *f->wid) : 0;
    /* --splits: the range and the keys' heads too (a child's log alone says little). */
    uint64_t st[2 + 2 * NKEYS] = {f->lo, f->hi};
    memcpy(st + 2, f->kv_wid, sizeof f->kv_wid);
    memcpy(st + 2 + NKEYS, f->kv_ver, sizeof f->kv_ver);
    d ^= f->map != NULL ? XXH3_64bits(f->map, f->map_len) : 0; /* --seats: the map */
    return d ^ XXH3_64bits(st, sizeof st);
}

/* Check 8 at the end: ranges tile the hash space and every replica has its group's; the
 * owner of each key holds its whole history, nobody else holds it; acknowledged writes and
 * returned reads are in the history. */
static void final_split_checks(sim *s)
{
    int order[MAX_GROUPS], n = 0;
    for (int g = 0; g < s->ngroups; g++)
        if (s->map[g].created)
            order[n++] = g;
    for (int a = 1; a < n; a++) /* by range start */
        for (int b = a; b > 0 && s->map[order[b]].lo < s->map[order[b - 1]].lo; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    uint64_t next = 0;
    for (int a = 0; a < n && !s->failed; a++) {
        const range_rec *r = &s->map[order[a]];
        if (r->lo != next || r->hi < r->lo)
            fail(s, "ranges do not tile the hash space: group %d has [%016" PRIx64 ", %016" PRIx64
                 "], expected a start at %016" PRIx64, order[a], r->lo, r->hi, next);
        next = r->hi + 1;
        if ((a == n - 1) != (r->hi == UINT64_MAX))
            fail(s, "ranges do not tile the hash space: group %d ends at %016" PRIx64 " (%d of %d)",
                 order[a], r->hi, a + 1, n);
    }
    for (int g = 0; g < s->ngroups && !s->failed; g++) {
        for (int i = 1; i <= s->nnodes && !s->failed; i++) {
            const node *nd = &s->nodes[i];
            if (!nd->hosted[g])
                continue;
            if (!s->map[g].created)
                fail(s, "node %d holds group %d, which no split created", i, g);
            const fsm_group *f = &nd->fsm[g];
            if (f->lo != s->map[g].lo || f->hi != s->map[g].hi)
                fail(s, "node %d group %d serves [%016" PRIx64 ", %016" PRIx64 "], the map says "
                     "[%016" PRIx64 ", %016" PRIx64 "]", i, g, f->lo, f->hi, s->map[g].lo,
                     s->map[g].hi);
            for (int k = 0; k < s->nkeys && !s->failed; k++) {
                uint64_t want = in_range(f, s->key_hash[k]) ? s->hist_n[k] : 0;
                uint64_t wid = want ? s->hist[k][want] : 0;
                if (f->kv_ver[k] != want || f->kv_wid[k] != wid)
                    fail(s, "node %d group %d key %d: version %" PRIu64 " (write %" PRIu64
                         "), expected %" PRIu64 " (write %" PRIu64 ")%s", i, g, k, f->kv_ver[k],
                         f->kv_wid[k], want, wid, want ? "" : ": the key is not in its range");
            }
        }
    }
    for (size_t k = 0; k < s->nops && !s->failed; k++) {
        const cop *p = s->ops[k];
        if (!p->ok || (p->is_read && p->ver == 0))
            continue;
        uint64_t want = p->is_read ? p->read_wid : p->wid;
        if (p->ver > s->hist_n[p->key] || s->hist[p->key][p->ver] != want)
            fail(s, "%s %" PRIu64 " (key %d version %" PRIu64 ") is not in the key's history",
                 p->is_read ? "write returned by a read" : "acknowledged write", want, p->key,
                 p->ver);
    }
}

static void final_checks(sim *s)
{
    if (s->mv.phase != MV_IDLE)
        fail(s, "move of group %d from node %d to node %d stuck in phase %s", s->mv.group,
             s->mv.from, s->mv.to, mv_phase_name[s->mv.phase]);
    for (int g = 0; g < s->ngroups && !s->failed; g++) {
        int r = 1;
        if (s->splits && !s->map[g].created)
            continue; /* a child id proposed in a SPLIT that never committed */
        while (r < s->nnodes && !s->nodes[r].hosted[g])
            r++;
        const fsm_group *ref = &s->nodes[r].fsm[g];
        /* The replicas are exactly the final configuration: nvoters voters, no learner. */
        raft_host_member m[MAX_NODES];
        size_t n = 0;
        bool unc = true;
        if (s->nodes[r].up && (raft_host_configuration(s->nodes[r].host, (uint64_t)g, m, MAX_NODES,
                                                       &n, &unc, NULL) != 0 ||
                               unc || n != (size_t)s->nvoters))
            fail(s, "group %d: final configuration on node %d has %zu servers%s", g, r, n,
                 unc ? " (uncommitted)" : "");
        for (size_t k = 0; k < n && !s->failed; k++)
            if (!m[k].voter || m[k].id < 1 || m[k].id > (uint64_t)s->nnodes ||
                !s->nodes[m[k].id].hosted[g])
                fail(s, "group %d: final member %" PRIu64 " is a learner or holds no replica", g,
                     m[k].id);
        for (int i = 1; i <= s->nnodes; i++) {
            const fsm_group *f = &s->nodes[i].fsm[g];
            if (!s->nodes[i].up)
                fail(s, "node %d is down at the end", i);
            else if (!s->nodes[i].hosted[g])
                continue;
            else if (f->applied != ref->applied || digest(f) != digest(ref))
                fail(s,
                     "group %d did not converge: node %d applied %" PRIu64 " (digest %016" PRIx64
                     "), node %d applied %" PRIu64 " (digest %016" PRIx64 ")",
                     g, r, ref->applied, digest(ref), i, f->applied, digest(f));
        }
    }
    if (s->splits && !s->failed)
        final_split_checks(s);
    for (size_t k = 0; k < s->nops && !s->failed; k++) {
        cop *p = s->ops[k];
        if (!p->ok || (s->splits && p->is_read)) /* (--splits: reads checked by version) */
            continue;
        for (int i = 1; i <= s->nnodes && !s->failed; i++) {
            const fsm_group *f = &s->nodes[i].fsm[p->group];
            uint64_t idx = p->idx;
            if (!s->nodes[i].hosted[p->group])
                continue;
            uint64_t want = p->is_read ? p->read_wid : p->wid;
            if (p->is_read && idx == 0)
                continue; /* read of a never-written key */
            if (idx > f->applied || f->wid[idx] != want)
                fail(s, "%s %" PRIu64 " at group %d index %" PRIu64 " missing on node %d",
                     p->is_read ? "write returned by a read" : "acknowledged write", want, p->group,
                     idx, i);
        }
    }
}

/* ---- leadership transfers (--transfers) ---- */

typedef struct {
    sim *s;
    node *from;
    int group;
    uint64_t incarnation;
} transfer_ctx;

static void transfer_cb(void *data, const raft_host_outcome *o)
{
    transfer_ctx *t = data;
    sim *s = t->s;
    if (s->transfers_pending == 0)
        fail(s, "a transfer callback fired twice (or unasked)");
    else
        s->transfers_pending--;
    if (o->code == ERR_NONE) {
        s->transfers_done++;
        /* Done means the old leader stepped down (checked only while its host lives: a
         * crash fails the callback instead). */
        if (t->from->up && t->from->incarnation == t->incarnation &&
            raft_host_is_leader(t->from->host, (uint64_t)t->group))
            fail(s, "transfer on group %d reported done while node %d still leads", t->group,
                 t->from->id);
    } else {
        s->transfers_failed++;
    }
    free(t);
}

static void transfer_try(sim *s)
{
    int g = (int)rnd(&s->rng, (uint64_t)s->ngroups);
    int l = group_leader(s, g);
    if (l == 0)
        return;
    node *nd = &s->nodes[l];
    uint64_t target = 1 + rnd(&s->rng, (uint64_t)s->nnodes);
    if (chance(&s->rng, 800) && !raft_host_transfer_ready(nd->host, (uint64_t)g, target, 4, NULL))
        return;
    transfer_ctx *t = xcalloc(1, sizeof *t);
    *t = (transfer_ctx){.s = s, .from = nd, .group = g, .incarnation = nd->incarnation};
    s->transfers_pending++;
    strata_err err;
    if (raft_host_transfer(nd->host, (uint64_t)g, target, transfer_cb, t, &err) != 0) {
        s->transfers_pending--;
        s->transfers_refused++;
        free(t);
        return;
    }
    s->transfers_started++;
}

/* ---- the meta group's seats (--seats) ---- */

static void meta_submitted(void *data, const raft_host_outcome *o)
{
    sim *s = data;
    (void)o;
    s->meta_inflight = false;
}

static void operator_submitted(void *data, const raft_host_outcome *o)
{
    (void)data;
    (void)o;
}

/* Proposes a change of the map on node l (a META entry of group 0). The leader's own
 * changes go one at a time (`mine`), as stratad's scheduler; an operator's go at once. */
static void map_propose(sim *s, int l, const meta_cmd *c, bool mine)
{
    if (mine && s->meta_inflight && s->now < s->meta_inflight_since + 1000)
        return;
    buf b;
    buf_init(&b, 0);
    buf_put_u8(&b, 'M');
    strata_err err;
    if (meta_encode(c, &b, &err) != 0) {
        fail(s, "seats: a META entry does not encode: %s", err.msg);
    } else if (raft_host_submit(s->nodes[l].host, 0, b.data, b.len,
                                mine ? meta_submitted : operator_submitted, s, NULL) == 0 &&
               mine) {
        s->meta_inflight = true;
        s->meta_inflight_since = s->now;
    }
    buf_free(&b);
}

/* s->meta := the map as group 0's replica on node l has applied it (what its leader
 * plans against, and what the other nodes fetch); false if there is none. */
static bool map_of(sim *s, int l)
{
    meta_free(s->meta);
    s->meta = l != 0 && s->nodes[l].hosted[0] ? map_open(s, &s->nodes[l].fsm[0]) : NULL;
    return s->meta != NULL;
}

/* Registers the first node missing from the map (AZs a, b, c in turn, a host each),
 * through leader l. True when one was missing. */
static bool seats_register(sim *s, int l)
{
    static const char *az[] = {"a", "b", "c"};
    for (int i = 1; i <= s->nnodes; i++) {
        if (meta_node_find(s->meta, (uint64_t)i) != NULL)
            continue;
        meta_cmd c = {.kind = META_CMD_NODE_REGISTER, .now_ms = s->now};
        c.node.id = (uint64_t)i;
        snprintf(c.node.client_addr, sizeof c.node.client_addr, "n%d:1", i);
        snprintf(c.node.peer_addr, sizeof c.node.peer_addr, "n%d:2", i);
        snprintf(c.node.az, sizeof c.node.az, "%s", az[(i - 1) % 3]);
        snprintf(c.node.host, sizeof c.node.host, "h%d", i);
        c.node.state = META_NODE_ACTIVE;
        c.node.format = i == s->nnodes ? 1 : META_FORMAT; /* the last: an older version */
        map_propose(s, l, &c, true);
        return true;
    }
    return false;
}

/* The last node registered as one of an older version would (meta format 1). Upgraded at
 * upgrade_at, it says its binary's format once it is up (NODE_FORMAT, as stratad's
 * reconcile_format); then the cluster's format may rise. True when it proposed. */
static bool seats_upgrade(sim *s, int l)
{
    const meta_node *nd = meta_node_find(s->meta, (uint64_t)s->nnodes);
    if (nd == NULL || nd->format == META_FORMAT || s->now < s->upgrade_at ||
        !s->nodes[s->nnodes].up)
        return false;
    meta_cmd c = {.kind = META_CMD_NODE_FORMAT, .now_ms = s->now};
    c.node.id = nd->id;
    c.node.format = META_FORMAT;
    map_propose(s, l, &c, true);
    return true;
}

/* The cluster's meta format rises once every node reads the next, as stratad's
 * schedule_format. True when it proposed the rise. */
static bool seats_format(sim *s, int l)
{
    uint32_t ready = meta_format_ready(s->meta);
    if (ready <= meta_format(s->meta))
        return false;
    meta_cmd c = {.kind = META_CMD_CLUSTER_FORMAT, .now_ms = s->now, .format = ready};
    map_propose(s, l, &c, true);
    return true;
}

/* EV_DRAIN: an operator drains a random node (ACTIVE or DOWN), or calls its drain off,
 * through the leader, from the map it reads there (an operator's command names no base
 * state, and may land after the leader's own changes). */
static void drain_flip(sim *s)
{
    int l = current_leader(s, 0);
    uint64_t id = 1 + rnd(&s->rng, (uint64_t)s->nnodes);
    if (!map_of(s, l))
        return;
    const meta_node *n = meta_node_find(s->meta, id);
    if (n == NULL)
        return;
    meta_cmd c = {.kind = META_CMD_NODE_STATE, .now_ms = s->now};
    c.node.id = id;
    c.node.state = n->state == META_NODE_DRAINING ? META_NODE_ACTIVE : META_NODE_DRAINING;
    map_propose(s, l, &c, false);
    s->drains++;
}

/* The leader's view of the nodes: up and not frozen. */
static bool seat_reachable(void *ctx, uint64_t id)
{
    sim *s = ctx;
    return id >= 1 && id <= (uint64_t)s->nnodes && s->nodes[id].up &&
           s->nodes[id].paused_until <= s->now;
}

/* Each node follows the map for its own seat, as stratad's reconcile_meta_seat: a node
 * the map names joins with an empty replica; one it no longer names drops its replica
 * once the committed configuration leaves it out. */
static void seats_reconcile(sim *s, const raft_host_member *cfg, size_t n)
{
    const meta_partition *g = meta_group(s->meta);
    if (g->n_members == 0)
        return;
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        bool named = meta_partition_has(g, (uint64_t)i, NULL);
        strata_err err;
        if (named && !nd->hosted[0]) {
            nd->hosted[0] = nd->joined[0] = true;
            nd->fsm[0].lo = nd->dur[0].lo = s->map[0].lo; /* a dropped replica forgot it */
            nd->fsm[0].hi = nd->dur[0].hi = s->map[0].hi;
            if (nd->up && raft_host_join_group(nd->host, 0, nd->fsm[0].applied, &err) != 0)
                fail(s, "node %d group 0: join: %s", i, err.msg);
        } else if (!named && nd->hosted[0] && member_role(cfg, n, (uint64_t)i) < 0) {
            drop_replica(s, nd, 0);
        }
    }
}

/* The leader of group 0 gives its seat up: leadership goes to a voter that caught up (one
 * try per 100 ms), as stratad's seat_hand_over: while the map names the leader, one whose
 * node is ACTIVE; once it does not, any the map keeps. */
static void seats_hand_over(sim *s, int l)
{
    const meta_partition *g = meta_group(s->meta);
    if (s->now < s->seat_handover_at + 100)
        return;
    bool named = meta_partition_has(g, (uint64_t)l, NULL);
    for (uint32_t k = 0; k < g->n_members; k++) {
        uint64_t v = g->members[k].node;
        if (v == (uint64_t)l || g->members[k].role != META_VOTER || !seat_reachable(s, v) ||
            (named && meta_node_find(s->meta, v)->state != META_NODE_ACTIVE) ||
            !raft_host_transfer_ready(s->nodes[l].host, 0, v, 4, NULL))
            continue;
        s->seat_handover_at = s->now;
        transfer_ctx *t = xcalloc(1, sizeof *t);
        *t = (transfer_ctx){
            .s = s, .from = &s->nodes[l], .group = 0, .incarnation = s->nodes[l].incarnation};
        s->transfers_pending++;
        strata_err err;
        if (raft_host_transfer(s->nodes[l].host, 0, v, transfer_cb, t, &err) != 0) {
            s->transfers_pending--;
            free(t);
            return;
        }
        s->seat_handovers++;
        return;
    }
}

/* Proposes `m` as group 0's configuration on leader l, or hands leadership over first
 * when `m` leaves l out (as stratad's follow_meta_config). */
static void seats_follow(sim *s, int l, const raft_host_member *m, size_t n)
{
    if (member_role(m, n, (uint64_t)l) < 0) {
        seats_hand_over(s, l);
        return;
    }
    propose_change(s, &s->seat_change, l, 0, m, n);
}

/* The leader's liveness marks, as stratad's schedule_liveness (one per step): an ACTIVE
 * node unreachable for SEAT_DOWN_MS is marked DOWN, a DOWN one reachable again ACTIVE, each
 * planned from the state it saw. True when it marked one. */
static bool seats_liveness(sim *s, int l)
{
    for (int i = 1; i <= s->nnodes; i++) {
        bool up = seat_reachable(s, (uint64_t)i);
        if (up || i == l)
            s->unreachable_since[i] = 0;
        else if (s->unreachable_since[i] == 0)
            s->unreachable_since[i] = s->now;
        const meta_node *nd = meta_node_find(s->meta, (uint64_t)i);
        meta_node_state want = nd->state;
        if (nd->state == META_NODE_ACTIVE && s->unreachable_since[i] != 0 &&
            s->now - s->unreachable_since[i] >= SEAT_DOWN_MS)
            want = META_NODE_DOWN;
        else if (nd->state == META_NODE_DOWN && up)
            want = META_NODE_ACTIVE;
        if (want == nd->state)
            continue;
        meta_cmd c = {.kind = META_CMD_NODE_STATE, .now_ms = s->now};
        if (meta_format(s->meta) >= 2) /* as stratad: once every node reads it */
            c.state_base = nd->state;
        c.node.id = (uint64_t)i;
        c.node.state = want;
        map_propose(s, l, &c, true);
        s->marks++;
        return true;
    }
    return false;
}

/* EV_SEATS: group 0 is the meta group, and the cluster map its state. Its configuration
 * follows the map's seats, and the leader's planner (placement_meta_seats, as stratad's
 * schedule_meta_seats) changes the seats one step at a time as nodes are drained, drains
 * called off, and nodes crash, freeze and come back. */
static void seats_step(sim *s)
{
    int l = current_leader(s, 0);
    raft_host_member m[MAX_NODES + 1];
    size_t n = 0;
    bool unc = true;
    if (l == 0 || raft_host_configuration(s->nodes[l].host, 0, m, MAX_NODES, &n, &unc, NULL) != 0 ||
        unc || n > MAX_NODES || !map_of(s, l))
        return;
    seats_reconcile(s, m, n);
    const meta_partition *g = meta_group(s->meta);
    bool busy = s->meta_inflight && s->now < s->meta_inflight_since + 1000;
    if (busy || seats_register(s, l) || seats_upgrade(s, l) || seats_format(s, l) ||
        seats_liveness(s, l))
        return;
    if (n > META_MAX_MEMBERS) { /* changes add only up to it (placement_config_next) */
        fail(s, "group 0: %zu members in its configuration, more than a map names", n);
        return;
    }
    meta_partition config = {.n_members = (uint32_t)n};
    for (size_t k = 0; k < n; k++)
        config.members[k] =
            (meta_replica){.node = m[k].id, .role = m[k].voter ? META_VOTER : META_LEARNER};
    meta_partition next = config;
    if (g->n_members != 0 && placement_config_next(g, &next)) { /* as stratad's next_config */
        for (uint32_t k = 0; k < next.n_members; k++)
            m[k] = (raft_host_member){next.members[k].node, next.members[k].role == META_VOTER};
        seats_follow(s, l, m, next.n_members);
        return;
    }
    placement_seat_view v = {.self = (uint64_t)l,
                             .now_ms = s->now,
                             .replace_after_ms = SEAT_REPLACE_MS,
                             .reachable = seat_reachable,
                             .staying = seat_reachable,
                             .ctx = s};
    placement_seat_step st = placement_meta_seats(s->meta, &config, &v);
    if (st.action == PLACEMENT_SEAT_PROBE && learner_says_caught_up(s, (int)st.node, 0)) {
        st = placement_seat_promote(s->meta, st.node, g->epoch);
        s->seat_promotions += st.action == PLACEMENT_SEAT_PROPOSE;
    }
    if (st.action == PLACEMENT_SEAT_HAND_OVER)
        seats_hand_over(s, l);
    if (st.action != PLACEMENT_SEAT_PROPOSE)
        return;
    meta_cmd c = {.kind = META_CMD_META_MEMBERS,
                  .now_ms = s->now,
                  .epoch = st.epoch,
                  .seats = st.seats,
                  .parts = &st.next,
                  .n_parts = 1};
    map_propose(s, l, &c, true);
    s->seat_steps++;
}

/* Check 10 (--seats): the seats settled. The map's members are group 0's replicas, all
 * voters, as many as its seats; no drained node keeps a seat while an ACTIVE node has
 * none (any such node is a candidate). */
static void final_seat_checks(sim *s)
{
    int r = 1;
    while (r < s->nnodes && !s->nodes[r].hosted[0])
        r++;
    if (!map_of(s, r)) {
        fail(s, "seats: no replica of group 0 to read the map from");
        return;
    }
    const meta_partition *g = meta_group(s->meta);
    if (g->n_members == 0 || meta_group_seats(s->meta) != (uint32_t)s->nvoters) {
        fail(s, "seats: never recorded (%u seats)", meta_group_seats(s->meta));
        return;
    }
    uint64_t drained = 0, idle = 0;
    for (int i = 1; i <= s->nnodes; i++) {
        meta_role role;
        bool named = meta_partition_has(g, (uint64_t)i, &role);
        const meta_node *nd = meta_node_find(s->meta, (uint64_t)i);
        if (named != s->nodes[i].hosted[0] || (named && role != META_VOTER))
            fail(s, "seats: node %d is %s in the map but %s group 0", i,
                 !named               ? "not a member"
                 : role == META_VOTER ? "a voter"
                                      : "a learner",
                 s->nodes[i].hosted[0] ? "hosts" : "does not host");
        if (named && nd->state != META_NODE_ACTIVE)
            drained = (uint64_t)i;
        if (!named && nd->state == META_NODE_ACTIVE)
            idle = (uint64_t)i;
    }
    if (meta_partition_voters(g) != meta_group_seats(s->meta))
        fail(s, "seats: %u voters for %u seats", meta_partition_voters(g),
             meta_group_seats(s->meta));
    if (drained != 0 && idle != 0)
        fail(s,
             "seats: drained node %" PRIu64 " keeps its seat; ACTIVE node %" PRIu64
             " could take it",
             drained, idle);
    if (meta_format(s->meta) != META_FORMAT)
        fail(s, "seats: the cluster's meta format is %u, not %d", meta_format(s->meta),
             META_FORMAT);
}

/* ---- main loop ---- */

static const char *ev_name(int t)
{
    static const char *names[] = {"deliver",    "disk",   "timer",    "client", "fault",
                                  "heal",       "resume", "flush",    "copy",   "copy-data",
                                  "copy-retry", "move",   "transfer", "split",  "propose",
                                  "resend",     "seats",  "drain"};
    return t >= 0 && t <= EV_DRAIN ? names[t] : "?";
}

static void record(sim *s, const event *e)
{
    trace_rec *r = &s->trace[s->ntrace++ % TRACE_LEN];
    *r = (trace_rec){e->time, e->type, e->node, e->from, e->group};
}

/* "1 2 3l*" : the node's latest configuration (l = learner, * = uncommitted). */
static const char *conf_text(const node *nd, int g)
{
    static char text[64];
    raft_host_member m[MAX_NODES];
    size_t n = 0, off = 0;
    bool unc = false;
    text[0] = 0;
    if (!nd->up || raft_host_configuration(nd->host, (uint64_t)g, m, MAX_NODES, &n, &unc, NULL))
        return "-";
    for (size_t i = 0; i < n && i < MAX_NODES && off < sizeof text - 8; i++)
        off += (size_t)snprintf(text + off, sizeof text - off, "%s%" PRIu64 "%s", i ? " " : "",
                                m[i].id, m[i].voter ? "" : "l");
    if (unc && off < sizeof text - 2)
        snprintf(text + off, sizeof text - off, "*");
    return text;
}

static void print_trace(const sim *s)
{
    size_t n = s->ntrace < TRACE_LEN ? s->ntrace : TRACE_LEN;
    fprintf(stderr, "last %zu events:\n", n);
    for (size_t i = s->ntrace - n; i < s->ntrace; i++) {
        const trace_rec *r = &s->trace[i % TRACE_LEN];
        fprintf(stderr, "  t=%" PRIu64 " %-7s node=%d from=%d group=%" PRIu64 "\n", r->time,
                ev_name(r->type), r->node, r->from, r->a);
    }
    for (int i = 1; i <= s->nnodes; i++)
        for (int g = 0; g < s->ngroups; g++) {
            raft_host_group_stats st = {0};
            if (s->splits && !s->nodes[i].hosted[g])
                continue;
            if (s->splits)
                fprintf(stderr, "  node %d group %d: range [%016" PRIx64 ", %016" PRIx64 "]%s%s\n",
                        i, g, s->nodes[i].fsm[g].lo, s->nodes[i].fsm[g].hi,
                        s->nodes[i].child[g] ? " child" : "",
                        s->nodes[i].joined[g] ? " joined" : "");
            if (s->nodes[i].up)
                raft_host_group_info(s->nodes[i].host, (uint64_t)g, &st, NULL);
            fprintf(stderr,
                    "  node %d group %d: %s state=%d term=%" PRIu64 " commit=%" PRIu64
                    " applied=%" PRIu64 " last=%" PRIu64 " stored=%" PRIu64
                    " tv=%u queued=%u appends=%u host-applied=%" PRIu64 " snap=%" PRIu64
                    " first=%" PRIu64 " conf=%s\n",
                    i, g, s->nodes[i].up ? "up" : "DOWN", st.state, st.term, st.commit_index,
                    s->nodes[i].fsm[g].applied, st.last_index, st.last_stored, st.term_vote_writes,
                    st.queued_messages, st.appends_in_flight, st.applied_index, st.snapshot_index,
                    st.first_index, conf_text(&s->nodes[i], g));
        }
}

static void handle(sim *s, event *e)
{
    node *nd = e->node >= 1 && e->node <= s->nnodes ? &s->nodes[e->node] : NULL;
    /* A paused node's timers, disk and incoming messages wait for it, in their order. */
    if (nd != NULL && nd->paused_until > s->now &&
        (e->type == EV_DELIVER || e->type == EV_DISK || e->type == EV_TIMER)) {
        event later = *e;
        later.time = nd->paused_until;
        push(s, later);
        return;
    }
    switch (e->type) {
    case EV_DELIVER:
        if (nd->up)
            raft_host_receive(nd->host, (uint64_t)e->from, e->group, e->bytes, e->len, NULL);
        free(e->bytes);
        break;
    case EV_DISK:
        if (nd->up && e->gen == nd->incarnation)
            disk_complete(nd);
        break;
    case EV_TIMER:
        if (nd->up && e->gen == nd->timer_gen)
            raft_host_tick(nd->host);
        break;
    case EV_CLIENT:
        client_op(s);
        if (s->now < CLIENT_END_MS)
            push(s, (event){.time = s->now + 1 + rnd(&s->rng, 6), .type = EV_CLIENT});
        break;
    case EV_FAULT:
        if (s->now >= FAULT_END_MS)
            break;
        fault(s);
        if (s->now < FAULT_END_MS)
            push(s, (event){.time = s->now + 50 + rnd(&s->rng, 250), .type = EV_FAULT});
        break;
    case EV_HEAL_ALL:
        memset(s->link_down, 0, sizeof s->link_down);
        for (int i = 1; i <= s->nnodes; i++)
            if (!s->nodes[i].up)
                node_start(s, &s->nodes[i]);
        break;
    case EV_FLUSH:
        flush(s);
        push(s, (event){.time = s->now + 10 + rnd(&s->rng, 20), .type = EV_FLUSH});
        break;
    case EV_COPY_REQ:
        copy_serve(s, nd, &s->sess[e->a], e->b);
        break;
    case EV_COPY_CHUNK:
        copy_receive(s, nd, &s->sess[e->a], e->b);
        break;
    case EV_COPY_TIMEOUT:
        copy_timeout(s, nd, &s->sess[e->a], e->b);
        break;
    case EV_MOVE:
        move_step(s);
        push(s, (event){.time = s->now + 5 + rnd(&s->rng, 20), .type = EV_MOVE});
        break;
    case EV_TRANSFER:
        if (s->now >= FAULT_END_MS)
            break;
        transfer_try(s);
        push(s, (event){.time = s->now + 10 + rnd(&s->rng, 50), .type = EV_TRANSFER});
        break;
    case EV_SPLIT:
        if (nd->up && e->gen == nd->incarnation)
            split_finish(s, nd, (int)e->group, e->a);
        break;
    case EV_PROPOSE:
        if (s->now >= FAULT_END_MS)
            break;
        split_propose(s);
        push(s, (event){.time = s->now + 60 + rnd(&s->rng, 240), .type = EV_PROPOSE});
        break;
    case EV_RESEND:
        op_resend(s, s->ops[e->a]);
        break;
    case EV_SEATS:
        seats_step(s);
        push(s, (event){.time = s->now + 5 + rnd(&s->rng, 20), .type = EV_SEATS});
        break;
    case EV_DRAIN:
        if (s->now >= FAULT_END_MS)
            break; /* the seats have 3 s to settle: a move is a copy of the group's state */
        drain_flip(s);
        push(s, (event){.time = s->now + 100 + rnd(&s->rng, 400), .type = EV_DRAIN});
        break;
    case EV_RESUME:
        if (nd->up && e->gen == nd->incarnation) {
            fsm_group *f = &nd->fsm[e->group];
            f->retry_index = f->busy_index;
            f->busy_index = 0;
            raft_host_apply_resume(nd->host, e->group);
        }
        break;
    }
}

static bool expected_failure(const char *why)
{
    for (int i = 0; i < g_nexpect; i++)
        if (strstr(why, g_expect[i]) != NULL)
            return true;
    return false;
}

/* Splits "A|B" (argv memory, modified in place) into g_expect; false if malformed. */
static bool parse_expect(char *list)
{
    for (char *p = strtok(list, "|"); p != NULL; p = strtok(NULL, "|")) {
        if (g_nexpect == MAX_EXPECT)
            return false;
        g_expect[g_nexpect++] = p;
    }
    return g_nexpect > 0;
}

static bool run_seed(uint64_t seed, int nodes_opt, bool verbose)
{
    sim *s = xcalloc(1, sizeof *s);
    s->seed = seed;
    s->verbose = verbose;
    s->inject = g_inject;
    s->wild_net = g_wild_net;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s->rng.s[i] = splitmix64(&x);
    s->moves = g_moves || g_rejoin;
    s->rejoin = g_rejoin;
    s->learner_says = g_learner_says;
    s->seats = g_seats;
    /* From the seed, not the generator: the other draws stay as they were. */
    s->upgrade_at = splitmix64(&x) % UPGRADE_BY_MS;
    s->nvoters = nodes_opt ? nodes_opt : s->seats ? 3 : (seed % 4 == 3 ? 5 : 3);
    /* A spare node for replicas to move to; --seats: a second node in every AZ. */
    s->nnodes = s->nvoters + (s->seats ? 3 : s->moves ? 1 : 0);
    s->ngroups = 1 + (int)rnd(&s->rng, INIT_GROUPS);
    s->splits = g_splits;
    s->as_stratad = g_as_stratad;
    s->nkeys = s->splits ? NKEYS : 4;
    /* --splits: the initial groups tile the hash space in equal parts. */
    for (int k = 0; k < s->nkeys; k++) {
        uint64_t id = (uint64_t)k;
        s->key_hash[k] = XXH3_64bits(&id, sizeof id);
    }
    for (int g = 0; g < s->ngroups; g++) {
        uint64_t w = UINT64_MAX / (uint64_t)s->ngroups;
        s->map[g] = (range_rec){.created = true,
                                .lo = w * (uint64_t)g,
                                .hi = g == s->ngroups - 1 ? UINT64_MAX : w * (uint64_t)(g + 1) - 1};
    }
    memcpy(s->client_map, s->map, sizeof s->client_map);
    for (int i = 1; i <= s->nnodes; i++) {
        s->nodes[i].sim = s;
        s->nodes[i].id = i;
        for (int g = 0; g < s->ngroups; g++) {
            s->nodes[i].hosted[g] = i <= s->nvoters;
            s->nodes[i].fsm[g].lo = s->nodes[i].dur[g].lo = s->map[g].lo;
            s->nodes[i].fsm[g].hi = s->nodes[i].dur[g].hi = s->map[g].hi;
        }
    }
    for (int i = 1; i <= s->nnodes; i++)
        node_start(s, &s->nodes[i]);
    push(s, (event){.time = 100 + rnd(&s->rng, 100), .type = EV_CLIENT});
    push(s, (event){.time = 200 + rnd(&s->rng, 300), .type = EV_FAULT});
    push(s, (event){.time = FAULT_END_MS, .type = EV_HEAL_ALL});
    push(s, (event){.time = 20 + rnd(&s->rng, 20), .type = EV_FLUSH});
    if (s->moves)
        push(s, (event){.time = 300 + rnd(&s->rng, 200), .type = EV_MOVE});
    s->transfers = g_transfers;
    if (s->transfers)
        push(s, (event){.time = 300 + rnd(&s->rng, 200), .type = EV_TRANSFER});
    if (s->splits)
        push(s, (event){.time = 200 + rnd(&s->rng, 300), .type = EV_PROPOSE});
    if (s->seats) {
        push(s, (event){.time = 100 + rnd(&s->rng, 100), .type = EV_SEATS});
        push(s, (event){.time = 300 + rnd(&s->rng, 300), .type = EV_DRAIN});
    }

    while (s->nheap > 0 && !s->failed) {
        event e = pop(s);
        if (e.time > (s->seats ? SEATS_END_MS : SIM_END_MS)) {
            free(e.bytes);
            break;
        }
        s->now = e.time;
        s->events++;
        record(s, &e);
        handle(s, &e);
        check_leaders(s);
    }
    if (!s->failed)
        final_checks(s);
    if (!s->failed && s->seats)
        final_seat_checks(s);
    if (!s->failed && s->transfers_pending != 0)
        fail(s, "%" PRIu64 " transfer callbacks never fired", s->transfers_pending);

    bool ok = !s->failed;
    if (!ok) {
        fprintf(stderr, "FAIL seed %" PRIu64 " (%d nodes, %d groups) at t=%" PRIu64 " ms: %s\n",
                seed, s->nnodes, s->ngroups, s->now, s->why);
        print_trace(s);
        fprintf(stderr, "replay: sim --seed %" PRIu64 "\n", seed);
        if (g_nexpect > 0 && !expected_failure(s->why)) {
            g_unexpected++;
            fprintf(stderr, "seed %" PRIu64 ": not one of the expected failures\n", seed);
        }
    } else if (verbose) {
        printf("seed %" PRIu64 ": %d nodes, %d groups, %" PRIu64 " events, %" PRIu64
               " messages, %" PRIu64 " writes acked, %" PRIu64 " strong reads, %" PRIu64
               " crashes, %" PRIu64 " busy applies, %" PRIu64 " compactions, %" PRIu64
               " snapshot points, %" PRIu64 " installs (%" PRIu64 " copies failed, %" PRIu64
               " chunks), %" PRIu64 " moves (%" PRIu64 " changes proposed, %" PRIu64
               " by a leader removing itself, %" PRIu64
               " back to a node just dropped), transfers %" PRIu64 " started (%" PRIu64
               " done, %" PRIu64 " gave up, %" PRIu64 " refused), %" PRIu64
               " writes known not applied; applied",
               seed, s->nnodes, s->ngroups, s->events, s->msgs, s->acked, s->reads_ok, s->crashes,
               s->busy, s->compactions, s->snap_points, s->installs, s->install_failures, s->chunks,
               s->moves_done, s->changes, s->self_removals, s->rejoins_started,
               s->transfers_started, s->transfers_done, s->transfers_failed, s->transfers_refused,
               s->not_applied);
        if (s->seats)
            printf(", seats: %" PRIu64 " drains or drains called off, %" PRIu64
                   " DOWN or back marks, %" PRIu64 " steps (%" PRIu64 " promotions), %" PRIu64
                   " hand-overs",
                   s->drains, s->marks, s->seat_steps, s->seat_promotions, s->seat_handovers);
        if (s->splits)
            printf(", splits %" PRIu64 " proposed, %" PRIu64 " made (%" PRIu64
                   " applied on replicas, %" PRIu64 " children joined from the map, %" PRIu64
                   " seeded with a copy of their first state, %" PRIu64
                   " whole compactions), %" PRIu64 " MOVED answers",
                   s->splits_proposed, s->splits_done, s->split_applies, s->rejoins, s->seeded,
                   s->compact_alls, s->moved);
        for (int g = 0; g < s->ngroups; g++) {
            int r = 1;
            if (s->splits && !s->map[g].created)
                continue;
            while (r < s->nnodes && !s->nodes[r].hosted[g])
                r++;
            printf(" g%d=%" PRIu64 "/%016" PRIx64, g, s->nodes[r].fsm[g].applied,
                   digest(&s->nodes[r].fsm[g]));
        }
        printf("\n");
    }

    /* Teardown. */
    for (int i = 1; i <= s->nnodes; i++) {
        node *nd = &s->nodes[i];
        if (nd->up)
            node_crash(s, nd);
        for (int g = 0; g < MAX_GROUPS; g++) {
            for (size_t k = 0; k < nd->disk[g].n; k++)
                free(nd->disk[g].log[k].data);
            free(nd->disk[g].log);
            free(nd->disk[g].meta);
            fsm_free(&nd->fsm[g]);
            fsm_free(&nd->dur[g]);
            fsm_free(&nd->split_child[g]);
            fsm_free(&nd->split_dur[g]);
        }
    }
    while (s->nheap > 0) {
        event e = pop(s);
        free(e.bytes);
    }
    free(s->heap);
    for (size_t k = 0; k < s->nops; k++)
        free(s->ops[k]);
    free(s->ops);
    for (size_t k = 0; k < s->nsess; k++) {
        fsm_free(&s->sess[k].snap);
        fsm_free(&s->sess[k].recv);
    }
    free(s->sess);
    for (int g = 0; g < MAX_GROUPS; g++) {
        free(s->term_leader[g]);
        free(s->global_wid[g]);
        free(s->global_set[g]);
    }
    for (int k = 0; k < NKEYS; k++)
        free(s->hist[k]);
    free(s->wid_at);
    free(s->wid_fate);
    meta_free(s->meta);
    free(s);
    return ok;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: sim (--seed N | --seeds A-B) [--nodes 3|5] [--moves] [--rejoin] "
        "[--learner-says] [--transfers] [--splits [--as-stratad]] [--seats] "
        "[--inject stale-read|lying-disk|bad-copy|split-no-flush|no-seed|early-promote|early-drop] "
        "[--expect-fail 'MESSAGE|...'] [-v]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t a = 1, b = 100;
    int nodes = 0;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            a = b = strtoull(argv[++i], NULL, 10);
            verbose = true;
        } else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%" SCNu64 "-%" SCNu64, &a, &b) != 2 || b < a)
                usage();
        } else if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc) {
            nodes = atoi(argv[++i]);
            if (nodes != 3 && nodes != 5)
                usage();
        } else if (strcmp(argv[i], "--inject") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "stale-read") == 0)
                g_inject = INJECT_STALE_READ;
            else if (strcmp(argv[i], "lying-disk") == 0)
                g_inject = INJECT_LYING_DISK;
            else if (strcmp(argv[i], "bad-copy") == 0)
                g_inject = INJECT_BAD_COPY;
            else if (strcmp(argv[i], "split-no-flush") == 0)
                g_inject = INJECT_SPLIT_NO_FLUSH;
            else if (strcmp(argv[i], "no-seed") == 0)
                g_inject = INJECT_NO_SEED;
            else if (strcmp(argv[i], "early-promote") == 0)
                g_inject = INJECT_EARLY_PROMOTE;
            else if (strcmp(argv[i], "early-drop") == 0)
                g_inject = INJECT_EARLY_DROP;
            else
                usage();
        } else if (strcmp(argv[i], "--wild-net") == 0) {
            g_wild_net = true;
        } else if (strcmp(argv[i], "--moves") == 0) {
            g_moves = true;
        } else if (strcmp(argv[i], "--rejoin") == 0) {
            g_rejoin = true;
        } else if (strcmp(argv[i], "--learner-says") == 0) {
            g_learner_says = g_moves = true;
        } else if (strcmp(argv[i], "--transfers") == 0) {
            g_transfers = true;
        } else if (strcmp(argv[i], "--splits") == 0) {
            g_splits = true;
        } else if (strcmp(argv[i], "--as-stratad") == 0) {
            g_as_stratad = true;
        } else if (strcmp(argv[i], "--seats") == 0) {
            g_seats = true;
        } else if (strcmp(argv[i], "--expect-fail") == 0 && i + 1 < argc) {
            if (!parse_expect(argv[++i]))
                usage();
        } else if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else {
            usage();
        }
    }
    if (g_seats && g_splits)
        usage(); /* group 0 would split */
    uint64_t failures = 0;
    for (uint64_t seed = a; seed <= b; seed++)
        if (!run_seed(seed, nodes, verbose))
            failures++;
    printf("sim: seeds %" PRIu64 "-%" PRIu64 ": %" PRIu64 " passed, %" PRIu64 " failed\n", a, b,
           b - a + 1 - failures, failures);
    if (g_nexpect > 0) {
        /* Inverted: the planted bug must be caught, and only by the expected checks. */
        bool caught = failures > 0 && g_unexpected == 0;
        printf("sim: expected failures %s (%" PRIu64 " failed, %" PRIu64 " of them otherwise)\n",
               caught ? "seen" : "NOT seen", failures, g_unexpected);
        return caught ? 0 : 1;
    }
    return failures ? 1 : 0;
}
