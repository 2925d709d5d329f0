#ifndef STRATA_CLUSTER_PARTITION_H
#define STRATA_CLUSTER_PARTITION_H
/*
 * The partition state machine: the one place where items are written and read.
 *
 * A partition is (table_id, [hash_lo, hash_hi]) of the node's engine; its id is the
 * engine's range_id, under which every write records the log index that produced it.
 *
 * WRITES are commands: the API layer (node/api_item.c, node/api_batch.c) validates a
 * request, encodes it with partition_write_encode() and hands the bytes to the router,
 * which appends them to the partition's log and, once durable, calls partition_apply()
 * with the entry's log index. partition_apply() is deterministic: the same command on the
 * same state produces the same engine writes and the same result bytes on every replica
 * (conditions and update expressions are carried as text and evaluated here; the time
 * travels in the command). The router returns the result bytes to the API layer, which
 * decodes them with partition_result_decode().
 *
 * A command that fails a condition or a rule (ConditionalCheckFailed, item too large
 * after an update, ...) is NOT an apply failure: partition_apply() returns 0 and the
 * failure is in the result. So is a command that does not decode or was routed to the
 * wrong partition (table id or key hash outside p: ERR_INTERNAL in the result).
 * partition_apply() returns -1 only when the engine fails or the command is a newer
 * binary's, with nothing applied and nothing appended to `result`: ERR_BUSY (engine
 * back-pressure: apply the same entry again after lsm_on_writable), ERR_IO / ERR_NOMEM /
 * the engine's sticky error (the replica cannot continue past that entry), or
 * ERR_NEWER for a command with a kind or a field this binary does not know
 * (protobuf's unknown fields): applying the rest of it would leave this replica apart from
 * the newer ones, so the replica stops there (Formats, cluster/partition_entry.h).
 * A command that writes nothing (failed condition, an update that leaves no item) records
 * no log index in the engine; replaying it is harmless.
 *
 * Result bytes may be EMPTY (a successful command with nothing to report, e.g. deleting a
 * missing item): partition_result_decode() accepts them.
 *
 * Replaying a command already applied (log index <= the engine's durable index for the
 * range) is allowed and harmless: the router skips those, but the state machine would
 * produce the same state again.
 *
 * READS are synchronous functions on the local engine (partition_read()); the router
 * calls them on the loop thread for the partition that owns the key or hash range.
 * Filters and projections are callbacks supplied by the API layer, which has parsed the
 * expressions already.
 *
 * Threading: loop thread only (the engine handle belongs to the loop).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/arena.h"
#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "storage/data/value.h"

struct lsm; /* the engine handle of storage/lsm/lsm.h */

/* What the state machine needs to know of the partition it applies to. */
typedef struct {
    uint64_t id; /* partition id == the engine's range_id for (range_id, log_index) */
    uint32_t table_id;
    uint64_t hash_lo; /* first partition-key hash (key_hash) owned, inclusive */
    uint64_t hash_hi; /* last partition-key hash owned, INCLUSIVE (UINT64_MAX = to the end) */
} partition_desc;

/* A table's primary key. range_type == 0 (and range_name NULL) without a sort key. */
typedef struct {
    const char *hash_name;
    uint32_t hash_name_len;
    av_type hash_type; /* AV_S, AV_N or AV_B */
    const char *range_name;
    uint32_t range_name_len;
    av_type range_type; /* 0, AV_S, AV_N or AV_B */
} partition_key_schema;

/* ------------------------------------------------------------------ writes */

typedef enum {
    PARTITION_PUT = 1,
    PARTITION_UPDATE = 2,
    PARTITION_DELETE = 3,
} partition_write_kind;

typedef enum {
    PARTITION_RETURN_NONE = 0,
    PARTITION_RETURN_ALL_OLD = 1,
    PARTITION_RETURN_UPDATED_OLD = 2,
    PARTITION_RETURN_ALL_NEW = 3,
    PARTITION_RETURN_UPDATED_NEW = 4,
} partition_return;

typedef struct {
    const char *placeholder; /* "#n", NUL-terminated */
    const char *name;        /* NUL-terminated */
} partition_name;

/* A write request, already validated by the API layer. Strings are NUL-terminated;
 * NULL (or "") means absent. */
typedef struct {
    partition_write_kind kind;
    uint32_t table_id;
    partition_key_schema ks;
    const av *key;               /* AV_M holding exactly the key attributes */
    const av *item;              /* PUT: the whole item */
    const char *condition;       /* ConditionExpression */
    const char *update;          /* UpdateExpression */
    const partition_name *names; /* ExpressionAttributeNames */
    uint32_t nnames;
    const av *values; /* ExpressionAttributeValues: AV_M ":v" -> value */
    /* Legacy parameters: the JSON text of the request's parameter (json_dumps with
     * JSON_ENCODE_ANY), converted at apply time by expr_legacy_expected /
     * expr_legacy_attribute_updates. Never together with condition/update/names/values. */
    const char *expected_json;             /* Expected */
    const char *conditional_operator_json; /* ConditionalOperator, e.g. "\"OR\"" */
    const char *attribute_updates_json;    /* AttributeUpdates */
    partition_return return_values;
    bool return_old_on_condition_failure; /* ReturnValuesOnConditionCheckFailure=ALL_OLD */
    uint64_t now_ms;
} partition_write;

/* Encodes a write command (proto/partition.proto, PartitionWrite) into `out`. */
int partition_write_encode(const partition_write *w, buf *out, strata_err *err);

/* Applies one command at `log_index`; appends the encoded PartitionWriteResult to
 * `result`. See the top of this file for the return value. */
int partition_apply(struct lsm *engine, const partition_desc *p, const uint8_t *cmd, size_t len,
                    uint64_t log_index, buf *result, strata_err *err);

/* The decoded result of a write. */
typedef struct {
    strata_code code;                 /* ERR_NONE when applied */
    char message[STRATA_ERR_MSG_MAX]; /* DynamoDB's message when code != ERR_NONE */
    const av *attributes;             /* NULL, or the map to return as Attributes (success)
                                         or as Item (ConditionalCheckFailed with ALL_OLD) */
    uint64_t old_size;                /* item_size before the command (0: no item) */
    uint64_t new_size;                /* item_size after the command (0: no item); equals
                                         old_size when nothing was written (failures) */
} partition_write_result;

int partition_result_decode(const uint8_t *res, size_t len, arena *a, partition_write_result *out,
                            strata_err *err);

/* The change a command made to its partition's item count (-1, 0, +1) and byte size,
 * from its result bytes (for router_ops.result_stats). Zeros if the bytes do not decode. */
void partition_result_delta(const uint8_t *res, size_t len, int64_t *items, int64_t *bytes);

/* Write capacity units of a result: max(old, new) size in 1 KB units rounded up, min 1. */
uint64_t partition_write_units(const partition_write_result *r);

/* ------------------------------------------------------------------ reads */

typedef enum {
    PARTITION_GET = 1,   /* one item by its full key */
    PARTITION_QUERY = 2, /* one partition key, optional sort-key predicate, either order */
    PARTITION_SCAN = 3,  /* every item whose key hash lies in [hash_lo, hash_hi], hash order */
} partition_read_kind;

typedef enum {
    PARTITION_SK_ANY = 0, /* no sort-key condition */
    PARTITION_SK_EQ,
    PARTITION_SK_LT,
    PARTITION_SK_LE,
    PARTITION_SK_GT,
    PARTITION_SK_GE,
    PARTITION_SK_BETWEEN, /* sk1 <= sk <= sk2 */
    PARTITION_SK_BEGINS_WITH,
} partition_sk_op;

/* Filter callback: 1 keeps the item, 0 drops it, -1 is an error (err filled). */
typedef int (*partition_filter_fn)(void *ctx, const av *item, strata_err *err);
/* Projection callback: fills *out (allocated from `a`) with the projected item. */
typedef int (*partition_project_fn)(void *ctx, arena *a, const av *item, av *out, strata_err *err);

#define PARTITION_PAGE_BYTES (1024 * 1024) /* Query/Scan read at most 1 MB per page */

typedef struct {
    partition_read_kind kind;
    uint32_t table_id;
    partition_key_schema ks;
    const av *key;                 /* GET: AV_M with exactly the key attributes */
    const av *hash_value;          /* QUERY: the partition key value */
    partition_sk_op sk_op;         /* QUERY */
    const av *sk1, *sk2;           /* QUERY: operands of sk_op */
    bool forward;                  /* QUERY: ScanIndexForward (SCAN is always forward) */
    uint64_t hash_lo, hash_hi;     /* SCAN: inclusive hash range (intersected with p) */
    const av *exclusive_start_key; /* QUERY/SCAN: resume strictly after this key, or NULL */
    uint32_t limit;                /* QUERY/SCAN: max items evaluated (0 = no limit) */
    size_t max_bytes;              /* QUERY/SCAN: page size before filter; 0 = 1 MB */
    bool consistent;               /* ConsistentRead: only affects capacity units */
    bool count_only;               /* Select=COUNT: no items in the result */
    partition_filter_fn filter;    /* NULL keeps every item */
    void *filter_ctx;
    partition_project_fn project; /* NULL returns whole items */
    void *project_ctx;
} partition_read_req;

typedef struct {
    av *items;                    /* matching items (projected); none when count_only */
    uint32_t count;               /* items after the filter (Count) */
    uint32_t scanned_count;       /* items read before the filter (ScannedCount) */
    const av *last_evaluated_key; /* key map of the last item read when the page ended on
                                     `limit` or `max_bytes`, even if nothing follows (as
                                     DynamoDB does); NULL when the range was read to its end */
    uint64_t bytes_read;          /* sum of item_size of items read (capacity units) */
    bool found;                   /* GET: the item exists (then items[0], count == 1) */
} partition_read_res;

/* Executes a read; every allocation of the result comes from `a`. The page stops at
 * `limit` items read or once `max_bytes` of items have been read (the item that crosses
 * the limit is included, as DynamoDB does). */
int partition_read(struct lsm *engine, const partition_desc *p, const partition_read_req *req,
                   arena *a, partition_read_res *res, strata_err *err);

/* Read capacity units for `bytes` read: 4 KB units rounded up (min 1), halved when
 * eventually consistent. Returned as a double because DynamoDB reports 0.5. */
double partition_read_units(uint64_t bytes, bool consistent);

/* ------------------------------------------------------------------ reads over the wire */
/*
 * In cluster mode a read may run on another node (the leader for strong reads, any
 * replica for eventual ones). A partition_read_req carries C callbacks (filter, project),
 * so it cannot travel as is. Instead:
 *
 *   coordinator: partition_read_req_encode(req)                 -> bytes
 *   remote:      partition_read_req_decode(bytes) -> raw req; partition_read(raw req);
 *                partition_read_res_encode(raw res)             -> bytes
 *   coordinator: partition_read_res_decode(bytes) -> raw res;
 *                partition_read_finish(req, raw res)            -> what partition_read(req)
 *                                                                  would have returned
 *
 * A RAW read has no filter, no projection and no count_only: every item read is returned
 * whole, with the same limit, page size, ExclusiveStartKey, LastEvaluatedKey,
 * scanned_count and bytes_read. Because filters and projections never change which items
 * are read (partition_read applies them after reading), finishing a raw result gives
 * exactly the Count, ScannedCount, LastEvaluatedKey and items of the full request.
 *
 * Messages are proto/partition.proto's PartitionReadRequest / PartitionReadResult, items
 * and keys in the item codec. Both decoders treat their input as hostile: anything
 * malformed or out of bounds is ERR_CORRUPT, never a crash, whatever the bytes. The
 * encoders refuse (ERR_INTERNAL) what the decoders would refuse, so a valid request is
 * never lost on the way.
 *
 * What the request decoder cannot check: that table_id and ks are the table's. The
 * remote node must compare them with its catalog before partition_read, which trusts
 * ks to describe the stored items (a schema saying N for a stored S sort key makes it
 * compare an S with an N, which is undefined).
 *
 * Bounds. A raw page reads items while less than max_bytes (<= 1 MB) has been read, so
 * it holds at most 1 MB plus one item (400 KB) of items by item_size, and at most that
 * many items (every stored item has a key, so item_size >= 2). On the wire an item of
 * k attributes takes at most item_size + 3k + 4 bytes (codec tags and varints, protobuf
 * framing), which is at most 4.5 x item_size (k <= item_size - 1; worst case a 1-byte
 * name with a 1-byte S value: size 2, 9 bytes), hence the 5x wire bound below.
 * Request values: keys (GET key, ExclusiveStartKey) within DynamoDB's key limits, key
 * condition operands at most one item each.
 */

/* Most bytes_read (sum of item_size) a raw page can hold: 1 MB plus the item crossing it. */
#define PARTITION_READ_PAGE_MAX ((uint64_t)PARTITION_PAGE_BYTES + ITEM_MAX_SIZE)
/* Largest encoded PartitionReadResult / PartitionReadRequest accepted. */
#define PARTITION_READ_RES_WIRE_MAX (5 * PARTITION_READ_PAGE_MAX + 64 * 1024)
#define PARTITION_READ_REQ_WIRE_MAX (3 * (size_t)ITEM_MAX_SIZE + 64 * 1024)

/* Appends the encoding of `req` WITHOUT its callbacks (filter, project, their ctx) and
 * with count_only cleared: the raw read the remote node runs. Only the values the kind
 * uses are sent (GET: key; QUERY: hash_value, sk1/sk2 as sk_op needs, start key; SCAN:
 * start key). ERR_INTERNAL for a request the decoder would refuse (bad kind or schema,
 * max_bytes over 1 MB, values of the wrong type or too large). */
int partition_read_req_encode(const partition_read_req *req, buf *out, strata_err *err);

/* Decodes a request into *out; every pointer (key, hash_value, sk1, sk2,
 * exclusive_start_key, the NUL-terminated ks names) is allocated from `a`.
 * filter/project/ctx are NULL, count_only false. Validates everything partition_read
 * relies on: kind, key schema (types S/N/B, names 1..255 bytes and distinct), sk_op in
 * range and consistent with the schema (no begins_with on N), operand types, exact key
 * maps, max_bytes <= 1 MB, sizes. ERR_CORRUPT on anything malformed. */
int partition_read_req_decode(const uint8_t *b, size_t len, arena *a, partition_read_req *out,
                              strata_err *err);

/* Appends the encoding of a read result (items with storage/data/codec.h's item
 * encoding; `count` items when items != NULL, none otherwise). Meant for RAW results but
 * accepts any partition_read output; ERR_INTERNAL if it breaks the bounds above. */
int partition_read_res_encode(const partition_read_res *res, buf *out, strata_err *err);

/* Decodes a result; items and last_evaluated_key are allocated from `a`. Checks the
 * bounds above and that the counts agree (items none or `count`; count <= scanned_count
 * <= bytes_read; found => one item): ERR_CORRUPT otherwise. */
int partition_read_res_decode(const uint8_t *b, size_t len, arena *a, partition_read_res *out,
                              strata_err *err);

/* Turns a RAW result (of partition_read on `req` without filter, project, count_only)
 * in place into what partition_read(req) returns for the full `req`:
 *  - QUERY/SCAN: the filter runs on every item read, in order (Count); count_only drops
 *    the items, otherwise the kept ones are projected; items is NULL when none is kept.
 *  - GET: no filter and count_only does not apply (as in partition_read): a found item
 *    is projected, count stays 1.
 * scanned_count, last_evaluated_key, bytes_read and found are unchanged. New items come
 * from `a`. First checks that `res` is a raw result for `req` (ERR_CORRUPT if not: item
 * count == scanned_count == count, sum of item sizes == bytes_read, last_evaluated_key
 * == the key of the last item). A filter or projection error is returned as is; *res is
 * then unspecified. */
int partition_read_finish(const partition_read_req *req, arena *a, partition_read_res *res,
                          strata_err *err);

#endif
