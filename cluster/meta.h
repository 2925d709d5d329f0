#ifndef STRATA_CLUSTER_META_H
#define STRATA_CLUSTER_META_H
/*
 * The meta service's state machine: the cluster map held by the meta Raft group.
 *
 * State: nodes (id, client and peer addresses, AZ, host label, state), tables (id, name,
 * an opaque schema blob, normally a catalog record) and the partition map (id, table,
 * hash range, replicas, leader hint, epoch).
 *
 * The state machine is pure and deterministic: no I/O, no clock. Every change is a
 * command record built by meta_encode() and applied by meta_apply(); time travels inside
 * commands (now_ms). A record is `u8 format | u8 kind | body | u64be xxh3(all before)`.
 * meta_apply() either applies a record completely or leaves the state untouched and says
 * why in `err`:
 *   ERR_CORRUPT            the record does not decode (checksum, format, bounds)
 *   ERR_VALIDATION         the command breaks a rule (bad transition, AZ/host rule, ...)
 *   ERR_NOT_FOUND          the node / table / partition it names does not exist
 *   ERR_RESOURCE_IN_USE    the id or name it creates exists already
 *   ERR_CONDITIONAL_CHECK  the partition epoch it was planned against is stale
 *   ERR_LIMIT_EXCEEDED     a bound (nodes, tables, partitions) would be passed
 *   ERR_NOMEM              allocation failed
 * Every replica of the meta group gets the same outcome for the same record, so a
 * rejected command is an ordinary (deterministic) result, not a failure of the group.
 *
 * Placement rules enforced on apply (the planner in cluster/placement.h follows them):
 *   - new replicas (table creation, learners, promotions) go to ACTIVE nodes only;
 *   - no two members (voters or learners) of a partition on one host;
 *   - a partition's voters always span min(#voters, 3) distinct AZs, so a move (add
 *     learner -> promote -> remove) keeps three AZs at every step;
 *   - a partition never has fewer than META_REPLICAS voters (a replica on a dead node is
 *     replaced by adding first, removing last).
 * Partition epochs start at 1 and move on with every membership change and split.
 * Pointers returned by lookups stay valid until the next meta_apply() or restore.
 * Placement is strict: three distinct AZs are required (no fallback to fewer).
 *
 * Formats (rolling upgrades). A record's first byte is the oldest format that reads it:
 *   1  every kind and field, but for those below
 *   2  NODE_STATE's state_base
 * A binary reads and writes up to META_FORMAT, and every node's registration (or a later
 * NODE_FORMAT, once its binary changed) says its own. The cluster's format, meta_format(),
 * is the newest any writer may use: it starts at 1 and rises by CLUSTER_FORMAT, which the
 * meta leader proposes once every node not REMOVED reads the next one (meta_format_ready);
 * it never falls. A registration or NODE_FORMAT below it is refused, so a binary too old
 * for the log never joins: mixing versions is safe as long as new fields and kinds wait
 * for their format (the meta leader refuses a proposed record above the cluster's format:
 * ERR_NEWER). A record of a format above META_FORMAT does not decode (ERR_CORRUPT,
 * meta_record_format tells why): the replica that meets one must stop applying, not skip
 * it. Binaries from before formats existed cannot be mixed with these. The cluster's
 * format also governs what partition replicas apply: a new partition log entry, SPLIT
 * version, write kind or write field waits for its format too. A replica that meets one
 * anyway stops applying that partition rather than apply another command than the leader
 * meant (cluster/partition_entry.h).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/buf.h"
#include "storage/base/err.h"

#define META_REPLICAS        3 /* voters per partition, in three distinct AZs */
#define META_MAX_MEMBERS     6 /* voters + learners of one partition during moves */
#define META_MAX_NODES       1024
#define META_MAX_TABLES      2500
#define META_MAX_TABLE_PARTS 4096 /* partitions of one table (create command, splits) */
#define META_MAX_PARTITIONS  (1u << 20)
#define META_ADDR_MAX        255 /* "host:port" addresses: 1..255 printable bytes */
#define META_LABEL_MAX       63  /* AZ and host labels: 1..63 printable bytes */
#define META_NAME_MAX        255 /* table names: 1..255 bytes */
#define META_SCHEMA_MAX      (1u << 20)
#define META_FORMAT           2 /* the newest record format this binary reads and writes */
#define META_SNAPSHOT_VERSION 1

typedef enum {
    META_NODE_JOINING = 1, /* registered, not yet given replicas */
    META_NODE_ACTIVE,      /* takes new replicas */
    META_NODE_DRAINING,    /* keeps its replicas until moved off; takes no new ones */
    META_NODE_DOWN,        /* unreachable; replaced after a deadline */
    META_NODE_REMOVED,     /* gone for good (terminal; its id is never reused) */
} meta_node_state;

typedef struct {
    uint64_t id; /* > 0 */
    char client_addr[META_ADDR_MAX + 1];
    char peer_addr[META_ADDR_MAX + 1];
    char az[META_LABEL_MAX + 1];
    char host[META_LABEL_MAX + 1];
    meta_node_state state;
    uint64_t state_since_ms; /* now_ms of the command that set `state` */
    /* Random, from the node's data directory (its identity file, made at the first
     * start): a join under a registered id from another directory (an empty one: a
     * replaced disk, or a second process given the same --node-id) is refused, since a
     * replica that forgot what it acknowledged must not vote. 0: registered before the
     * field existed (nothing to compare). */
    uint64_t incarnation;
    /* The newest record format its binary reads (see Formats); 1 for a registration
     * without it. */
    uint8_t format;
} meta_node;

typedef enum { META_VOTER = 1, META_LEARNER = 2 } meta_role;

typedef struct {
    uint64_t node;
    meta_role role;
} meta_replica;

typedef struct {
    uint64_t id; /* > 0, unique for the life of the cluster */
    uint32_t table_id;
    uint64_t hash_lo, hash_hi; /* both inclusive, as partition_desc */
    uint64_t epoch;
    uint64_t leader_hint; /* a voter's node id, or 0 when unknown */
    uint32_t n_members;
    meta_replica members[META_MAX_MEMBERS]; /* in node-id order */
} meta_partition;

typedef struct {
    uint32_t id; /* > 0 */
    char name[META_NAME_MAX + 1];
    size_t name_len;
    uint8_t *schema; /* opaque (a catalog record), heap */
    size_t schema_len;
    uint64_t created_ms;
} meta_table;

typedef enum {
    META_CMD_NODE_REGISTER = 1, /* node: all fields; state JOINING or ACTIVE */
    META_CMD_NODE_ADDRESS,      /* node.id, node.client_addr, node.peer_addr */
    META_CMD_NODE_STATE,        /* node.id, node.state, state_base */
    META_CMD_TABLE_CREATE,      /* table_id, name, schema, parts (a full hash cover) */
    META_CMD_TABLE_DROP,        /* table_id */
    META_CMD_SET_LEADER,        /* partition_id, node_id (a voter) */
    META_CMD_SPLIT,             /* partition_id, epoch, split_hash, new_partition_id */
    META_CMD_ADD_LEARNER,       /* partition_id, epoch, node_id */
    META_CMD_PROMOTE,           /* partition_id, epoch, node_id (a learner) */
    META_CMD_REMOVE_REPLICA,    /* partition_id, epoch, node_id */
    META_CMD_TABLE_SCHEMA,      /* table_id, schema (replaces the blob; UpdateTable, tags),
                                   schema_base */
    META_CMD_META_MEMBERS,      /* epoch, seats, parts[0] (the meta group's new members) */
    META_CMD_NODE_FORMAT,       /* node.id, node.format */
    META_CMD_CLUSTER_FORMAT,    /* format */
    META_CMD_KIND_MAX = META_CMD_CLUSTER_FORMAT,
} meta_cmd_kind;

/* A command. Only the fields its kind lists are encoded. After meta_decode, name and
 * schema point into the record and parts is heap (release with meta_cmd_free). */
typedef struct {
    meta_cmd_kind kind;
    uint64_t now_ms; /* the proposer's clock */
    meta_node node;
    uint32_t table_id;
    const char *name;
    size_t name_len;
    const uint8_t *schema;
    size_t schema_len;
    /* TABLE_SCHEMA: meta_schema_hash() of the blob the change was built from; the change
     * is refused (ERR_BUSY) if the table holds another by then, so that two changes made
     * at once from one state cannot lose one another. 0: replaces any (records written
     * before the field existed). */
    uint64_t schema_base;
    /* NODE_STATE: the state the change was planned from; the change is refused
     * (ERR_BUSY) if the node has another by then. The meta leader marks nodes DOWN and
     * ACTIVE again from what it saw, and an operator's drain committed in between must
     * not be undone by that stale plan. 0: from any state (an operator's command, and
     * records written before the field existed). */
    meta_node_state state_base;
    const meta_partition *parts; /* TABLE_CREATE: epoch is set to 1 on apply */
    size_t n_parts;
    uint64_t partition_id;
    uint64_t epoch; /* the epoch the command was planned against */
    uint64_t node_id;
    uint64_t split_hash; /* the child owns [split_hash, hash_hi]; lo < split_hash <= hi */
    uint64_t new_partition_id;
    uint32_t seats; /* META_MEMBERS: the voters the meta group keeps (1, 3 or 5) */
    uint32_t format; /* CLUSTER_FORMAT: the cluster's next format */
} meta_cmd;

typedef struct meta_state meta_state;

meta_state *meta_new(void);
void meta_free(meta_state *s);

/* Record encoding / decoding. meta_encode appends to `out`, with the oldest format that
 * reads the command as its first byte. meta_decode checks the checksum and the format
 * (not the rules: that is meta_apply's job). */
int meta_encode(const meta_cmd *c, buf *out, strata_err *err);
int meta_decode(const uint8_t *rec, size_t len, meta_cmd *out, strata_err *err);
void meta_cmd_free(meta_cmd *c);
/* A record's format byte (0 for an empty record): above META_FORMAT, a newer binary
 * wrote it and this one cannot apply it. */
unsigned meta_record_format(const uint8_t *rec, size_t len);

/* The cluster's format (see Formats), and the newest it may rise to now: the oldest
 * format among the nodes not REMOVED (meta_format when there are none). */
uint32_t meta_format(const meta_state *s);
uint32_t meta_format_ready(const meta_state *s);

/* Decodes and applies one record, all or nothing (see the error list above). */
int meta_apply(meta_state *s, const uint8_t *rec, size_t len, strata_err *err);
/* The same for an already decoded command. */
int meta_apply_cmd(meta_state *s, const meta_cmd *c, strata_err *err);

/* raft_host_fsm.apply for the meta group (ctx = meta_state *). Always returns 0: a
 * rejected command is a result. *result is `u8 strata_code | message bytes`. */
int meta_fsm_apply(void *ctx, uint64_t group, uint64_t index, const void *cmd, size_t len,
                   void **result, size_t *result_len);

/* Lookups: NULL when absent. */
const meta_node *meta_node_find(const meta_state *s, uint64_t id);
const meta_table *meta_table_find(const meta_state *s, uint32_t id);
const meta_table *meta_table_find_name(const meta_state *s, const char *name, size_t len);
/* The hash a TABLE_SCHEMA command names as its base (never 0). */
uint64_t meta_schema_hash(const meta_table *t);
const meta_partition *meta_partition_find(const meta_state *s, uint64_t id);
/* The partitions of a table, in hash order (contiguous in the state); *n = 0 if none. */
const meta_partition *meta_table_partitions(const meta_state *s, uint32_t table_id, size_t *n);
/* The partition of `table_id` owning `hash`; NULL if the table does not exist. */
const meta_partition *meta_partition_for_hash(const meta_state *s, uint32_t table_id,
                                              uint64_t hash);
bool meta_partition_has(const meta_partition *p, uint64_t node, meta_role *role);
uint32_t meta_partition_voters(const meta_partition *p);
/* Checks one partition's membership against the rules above (members known and
 * distinct, hosts distinct, >= META_REPLICAS voters spanning min(#voters, 3) AZs, leader
 * hint 0 or a voter). The planner uses it to check every step it plans. */
int meta_partition_check(const meta_state *s, const meta_partition *p, strata_err *err);

/*
 * The meta group's own members, partition-shaped (id 0, table 0, no range): the meta
 * leader moves the group's seats as it moves a partition's replicas, the map first (one
 * META_MEMBERS step at a time: add a learner, promote it, remove a member), and the
 * group's Raft configuration follows. Epoch 0 and no members: not recorded yet (a map
 * made before the record existed, or just formed); the Raft configuration then rules.
 * META_MEMBERS rules: the epoch it was planned against; 1..META_MAX_MEMBERS known nodes
 * in id order, at least one voter, no REMOVED learner; seats 1, 3 or 5, fixed by the
 * first record; after the first, exactly one member differs (a learner added, on an
 * ACTIVE node; a learner promoted, on an ACTIVE node; or a member removed). Unlike a
 * partition's, the group has no AZ or host rule (a one-AZ test cluster has a meta group
 * too), and a voter's node may become REMOVED: the meta leader takes its seat away next.
 */
const meta_partition *meta_group(const meta_state *s);
uint32_t meta_group_seats(const meta_state *s); /* 0 while not recorded */

/* Iteration by index (nodes in id order, tables in id order, partitions in
 * (table_id, hash_lo) order). */
size_t meta_node_count(const meta_state *s);
const meta_node *meta_node_at(const meta_state *s, size_t i);
size_t meta_node_index(const meta_state *s, uint64_t id); /* SIZE_MAX when absent */
size_t meta_table_count(const meta_state *s);
const meta_table *meta_table_at(const meta_state *s, size_t i);
size_t meta_partition_count(const meta_state *s);
const meta_partition *meta_partition_at(const meta_state *s, size_t i);

/* Ids the next table / partition would get (ids are never reused). */
uint32_t meta_next_table_id(const meta_state *s);
uint64_t meta_next_partition_id(const meta_state *s);

/* Canonical encoding of the whole state (appended to `out`, with an xxh3 trailer) and
 * its xxh3 digest: two states built from the same commands have the same bytes. The
 * encoding is the meta group's snapshot. */
int meta_state_encode(const meta_state *s, buf *out, strata_err *err);
uint64_t meta_state_digest(const meta_state *s);
/* Rebuilds a state from meta_state_encode's bytes; ERR_CORRUPT unless the bytes decode
 * and the state passes meta_check. */
meta_state *meta_state_decode(const uint8_t *data, size_t len, strata_err *err);

/* raft_host_fsm.snapshot / .restore for the meta group (ctx = meta_state *). restore
 * replaces the state's contents only when the snapshot decodes; -1 otherwise. */
int meta_fsm_snapshot(void *ctx, uint64_t group, void **data, size_t *len);
int meta_fsm_restore(void *ctx, uint64_t group, const void *data, size_t len);

/* Checks every invariant of the state (placement rules, hash covers, sorting); used by
 * tests and fuzzing. 0 when all hold. */
int meta_check(const meta_state *s, strata_err *err);

const char *meta_node_state_name(meta_node_state st);

#endif
