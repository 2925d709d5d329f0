#ifndef STRATA_CLUSTER_CAPACITY_H
#define STRATA_CLUSTER_CAPACITY_H
/*
 * Capacity: DynamoDB's read and write capacity as token buckets, per partition, for the
 * partitions this node serves. Pure: no clock, no I/O; the caller passes the time (ms,
 * monotonic) and the table's current settings with every call, so UpdateTable (new
 * RCU/WCU, billing mode switch) takes effect on the next request without any hook.
 *
 * Units. Tokens are nano-units (CAP_NANO per capacity unit) so that a partition's share
 * of a small table (1 WCU over 4 partitions = 0.25 WCU/s) refills exactly: a rate of R
 * units/s is R * CAP_NANO / 1000 nano-units per ms. Callers charge what DynamoDB's
 * arithmetic says (partition_read_units / partition_write_units, cluster/partition.h).
 *
 * Buckets, for each kind (read, write) separately:
 *  - share (per partition): refilled at the table's rate / n_partitions, holding at most
 *    CAP_BURST_MS (300 s) of that rate: the burst credit DynamoDB keeps from unused
 *    capacity. On-demand tables keep 1 s (no burst credit: they scale instead).
 *  - pool (per table on this node): refilled at share x n_local (the partitions of the
 *    table served here), at most 300 s of that. Every charge is taken from it, so it holds
 *    exactly what the table's local partitions left unused: adaptive sharing borrows
 *    from it when a partition's own share is spent.
 *  - ceiling (per partition): 3000 RCU / 1000 WCU per second, at most 1 s of it; no table
 *    setting lifts it (split for heat is what relieves a partition at its ceiling).
 * Admission (capacity_admit): the ceiling has tokens, and the share or the pool has
 * tokens. Charging (capacity_charge) happens once the operation ran and its real size is
 * known; it takes from the ceiling and the pool, and from the share while it has tokens,
 * else from the other partitions' shares (borrowed; so unused capacity is spent once).
 * Buckets may go below zero (an operation is admitted while tokens remain, then charged
 * in full, as DynamoDB does); the debt is repaid by the refill, so over a window
 * the accepted units equal the refill within one operation per partition.
 * New buckets start full (a new table can take its burst at once, as on DynamoDB).
 * A provisioned table without units (0: catalog records built by tools and tests; the
 * API's CreateTable and UpdateTable require at least 1) is counted but never refused.
 *
 * On-demand tables: the rate is twice the table's previous peak (units consumed in one
 * second on this node), the peak starting at CAP_ONDEMAND_{READ,WRITE} (4,000 WCU /
 * 12,000 RCU) and never going down; the per-partition ceiling still applies.
 *
 * Per partition the module counts consumed units and throttle events (ReadThrottleEvents
 * / WriteThrottleEvents), and keeps a bounded space-saving sample (CAP_HOT_SLOTS) of the
 * key hashes charged, so a single partition key taking most of a partition's traffic can
 * be reported (capacity_hot_key) and so a later split for heat can read where the load
 * is (capacity_partition_stats). ThrottledRequests is counted per table by the API layer
 * (capacity_note_throttled_request), which knows what one request is.
 *
 * Cluster mode: each node has its own buckets for the partitions it serves (writes and
 * strong reads on the leader; eventual reads on the replica that answers them). Until the
 * cluster sets the node's share of a provisioned table (capacity_set_node_share), the
 * pool spans the table's partitions on this node only. Once set, the pool refills at
 * the table's rate x share / CAP_PPM (300 s of it held) and admission asks the pool
 * alone, with the ceiling: a partition may spend what the table left unused on any node
 * (adaptive sharing across nodes), and the nodes together stay within the table's rate
 * because their shares add up to one (cluster/capshare.h decides them every second
 * from every node's demand, which capacity_demand_collect measures).
 *
 * Threading: the event loop's thread only.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/catalog.h"
#include "cluster/split.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"

#define CAP_NANO           ((int64_t)1000000000) /* token units per capacity unit */
#define CAP_BURST_MS       300000                /* burst credit: 300 s of unused capacity */
#define CAP_PART_MAX_READ  3000                  /* per-partition ceiling, RCU */
#define CAP_PART_MAX_WRITE 1000                  /* per-partition ceiling, WCU */
#define CAP_ONDEMAND_READ  12000                 /* on-demand: the initial "previous peak" */
#define CAP_ONDEMAND_WRITE 4000
#define CAP_HOT_SLOTS      8  /* space-saving sample of key hashes per partition */
#define CAP_HOT_SHARE      50 /* percent of a partition's sampled traffic: a hot key */
#define CAP_HOT_MIN_UNITS  50 /* ... once it consumed this many units (not a stray one) */
#define CAP_HEAT_PERCENT   80 /* a second at this share of the ceiling (or refused by it): hot */
#define CAP_SPLIT_SAMPLES  256 /* recent charged key hashes kept per partition (split point) */
#define CAP_SPLIT_MIN_SAMPLES 32
#define CAP_PPM            1000000 /* node shares: parts per million of the table's rate */
#define CAP_RATE_MAX       1000000 /* units/s: shared rates are capped here (no overflow) */

typedef enum { CAP_READ = 0, CAP_WRITE = 1 } cap_kind;

/* A table's settings as of now (from its catalog entry). */
typedef struct {
    bool on_demand;
    int64_t rcu, wcu;      /* provisioned units per second (ignored on demand) */
    uint32_t n_partitions; /* the table's partitions: each gets 1/n of the rate (>= 1) */
    uint32_t n_local;      /* of them, served on this node: the pool's size (>= 1) */
} cap_table_conf;

/* cap_table_conf from a catalog entry; n_local as given (clamped to 1..n_partitions). */
cap_table_conf capacity_conf_of(const table_info *t, uint32_t n_local);

typedef struct {
    int64_t consumed_nano[2];    /* by cap_kind, since the partition was first seen here */
    uint64_t throttle_events[2]; /* by cap_kind */
} cap_counters;

typedef struct capacity capacity;

capacity *capacity_new(void);
void capacity_free(capacity *c);

/* The per-partition ceilings in units per second (0: DynamoDB's, CAP_PART_MAX_READ /
 * CAP_PART_MAX_WRITE). Lower ones scale split-for-heat tests down to what a test
 * machine can drive. */
void capacity_set_ceilings(capacity *c, int64_t rcu, int64_t wcu);

/* On by default. Off (the `throttle = false` setting): capacity_admit never refuses,
 * consumption is still counted and reported (metrics, hot keys). */
void capacity_set_enforcing(capacity *c, bool on);

/*
 * Decides whether an operation of kind `k` on partition `part_id` of table `table_id`
 * may run at `now_ms`. 0: go ahead; `reserve_nano` (an estimate of its units, e.g. the
 * minimum) is taken at once, so operations admitted together before any of them
 * finished cannot all spend the same tokens; call capacity_charge with its real units
 * and the reservation once it ran. -1 with err: ERR_THROUGHPUT_EXCEEDED with DynamoDB's message
 * (the throttle event is counted), or ERR_NOMEM when state for a new table or partition cannot be
 * allocated.
 */
int capacity_admit(capacity *c, uint32_t table_id, uint64_t part_id, const cap_table_conf *conf,
                   cap_kind k, int64_t reserve_nano, uint64_t now_ms, strata_err *err);

/* Charges `nano` (units x CAP_NANO) to an operation that ran, less the `reserved_nano`
 * its admission took (a reservation above the real units is given back); from the
 * partition's share while it has tokens, else from the shares the table's other
 * partitions left (borrowed). `key_hash` feeds the hot-key sample when `has_key`.
 * Unknown table or partition (never admitted here): nothing happens. */
void capacity_charge(capacity *c, uint32_t table_id, uint64_t part_id, cap_kind k, int64_t nano,
                     int64_t reserved_nano, bool has_key, uint64_t key_hash, uint64_t now_ms);

/* This node's share of a provisioned table's rate for kind `k`, in parts per million
 * (clamped to CAP_PPM), from now_ms on; the credit its pool accrued until then counts at
 * the old share, and the pool keeps its tokens up to 300 s of the new one. Nothing
 * happens for a table this node has no state for (it gets a share at the next call). */
void capacity_set_node_share(capacity *c, uint32_t table_id, cap_kind k, uint32_t ppm,
                             uint64_t now_ms);

/* What one table wanted on this node since the last collect, by cap_kind: the units it
 * consumed plus the reservations of operations refused for want of capacity units (a
 * share could have served them; refusals by the partition ceiling are left out: no
 * share lifts a ceiling). Refusals count up to the units consumed plus one: clients
 * retry refused operations as fast as their back-off lets them, so their count says
 * more about the client than about demand; capped, a node's want grows at most
 * twofold (plus a unit) from one collect to the next while it is refused. */
typedef struct {
    uint32_t table_id;
    int64_t nano[2];
} cap_demand;

/* Writes the demand of up to `max` tables that wanted something into out[] and starts
 * their counts over; returns how many. */
size_t capacity_demand_collect(capacity *c, cap_demand *out, size_t max);

/* Units to nano-units: DynamoDB's fractional read units (0.5) are exact. */
int64_t capacity_nano(double units);

/* One request that was refused as a whole (ThrottledRequests). */
void capacity_note_throttled_request(capacity *c, uint32_t table_id);

/* The counters of one partition served here; false if it was never seen. */
bool capacity_partition_stats(const capacity *c, uint64_t part_id, cap_counters *out);

/* The partition's hottest key hash and its share (percent) of the partition's sampled
 * units; false when nothing was sampled or the key has consumed fewer than
 * CAP_HOT_MIN_UNITS units. */
bool capacity_hot_key(const capacity *c, uint64_t part_id, uint64_t *key_hash, unsigned *percent);

/*
 * Heat, for split for heat. Time is cut into windows of at least a second; a window is
 * hot when the partition consumed at least CAP_HEAT_PERCENT of its ceiling's rate in it
 * (either kind), or was refused by the ceiling (demand above it; with throttling off,
 * consumption above it). A window of two seconds or more held an idle second: not hot.
 */
/* How long a partition served here has been hot without a break, up to its current
 * window (0: not hot, or never seen). */
uint64_t capacity_hot_ms(capacity *c, uint64_t part_id, uint64_t now_ms);
/* Where the partition's recent traffic (the last CAP_SPLIT_SAMPLES key hashes charged,
 * weighted by units) would cut [lo, hi], its current range: split_weighted (split.h)
 * with CAP_SPLIT_MIN_SAMPLES and CAP_HOT_SHARE; *hash is the split hash or the hot key. */
split_point capacity_split_point(const capacity *c, uint64_t part_id, uint64_t lo, uint64_t hi,
                                 uint64_t *hash);
/* Starts a partition's heat over: after a split its traffic is a new story. */
void capacity_heat_reset(capacity *c, uint64_t part_id);

/* Tokens left (nano-units) in a partition's share bucket, as of its last refill (tests). */
int64_t capacity_share_tokens(const capacity *c, uint64_t part_id, cap_kind k);

/*
 * Appends the metrics of every table of `cat` this node has state for, in Prometheus
 * text format, named after DynamoDB's CloudWatch metrics:
 *   ConsumedReadCapacityUnits / ConsumedWriteCapacityUnits (counters, units),
 *   ReadThrottleEvents / WriteThrottleEvents / ThrottledRequests (counters),
 *   ProvisionedReadCapacityUnits / ProvisionedWriteCapacityUnits (gauges, provisioned
 *   tables), HotKeyPercent (gauge, per partition with a hot key, label key_hash),
 * each with {table="..."} and, per partition, {table="...",partition="<id>"}. State of
 * tables no longer in `cat` is dropped first.
 */
void capacity_metrics_text(capacity *c, const catalog *cat, buf *out);

/* The same figures for one table as a JSON object (the `strata table stats` command):
 * {"table", "billing_mode", "provisioned": {"read","write"}, "consumed": {"read","write"},
 *  "read_throttle_events", "write_throttle_events", "throttled_requests",
 *  "partitions": [{"id","consumed":{"read","write"},"read_throttle_events",
 *  "write_throttle_events","hot_key":{"hash","percent"}|null}]}. */
void capacity_table_json(capacity *c, const table_info *t, buf *out);

#endif
