#ifndef STRATA_CLUSTER_CATALOG_H
#define STRATA_CLUSTER_CATALOG_H
/*
 * The catalog: every table of the node with its schema, settings and partitions.
 *
 * The catalog is a deterministic state machine fed by catalog records. A record is the
 * complete new state of one table (an upsert by table name) or the removal of one table.
 * The router (cluster/router.h) makes records durable in log group ROUTER_CATALOG_GROUP
 * before they are applied, stores the applied state in the engine, and rebuilds the
 * catalog from the engine plus the log on restart. The API layer builds records with
 * catalog_encode_table()/catalog_encode_drop() and submits them with
 * router_catalog_write(); it never changes a table_info in place.
 *
 * Pointers returned by lookups stay valid until the next catalog_apply() (the event
 * loop owns the catalog; there are no other threads).
 *
 * Partitions: a table is cut into partitions at creation, each owning one contiguous
 * range of the 64-bit partition-key hash (key_hash() in storage/data/key.h): equal
 * ranges, the last one ending at UINT64_MAX. Partition ids are unique for the life of
 * the node (never reused) and are also the partition's log group id and its engine
 * range id. partition_desc is cluster/partition.h's: [hash_lo, hash_hi] both inclusive,
 * the last partition ending at UINT64_MAX.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/base/buf.h"
#include "storage/base/err.h"
#include "cluster/partition.h"
#include "storage/data/value.h"

#define TABLE_NAME_MAX         255
#define TABLE_NAME_MIN         3
#define ATTR_NAME_MAX          255 /* key attribute names: 1..255 bytes */
#define CATALOG_MAX_ATTR_DEFS  2   /* no indexes yet: only the key attributes */
#define CATALOG_MAX_TAGS       50
#define CATALOG_MAX_PARTITIONS 4096
#define CATALOG_MAX_TABLES     2500 /* DynamoDB's default per-account table quota */

typedef enum { KEY_HASH = 0, KEY_RANGE = 1 } key_role;

/* One key attribute: a name and a scalar type (AV_S, AV_N or AV_B). */
typedef struct {
    char name[ATTR_NAME_MAX + 1]; /* NUL-terminated */
    size_t name_len;
    av_type type;
} key_attr;

/* What the data path needs to know about a table: everything is a plain value. */
typedef struct {
    uint32_t table_id;             /* >= 1; 0 is reserved for the catalog's own keys */
    char name[TABLE_NAME_MAX + 1]; /* NUL-terminated */
    size_t name_len;
    key_attr hash; /* the partition key */
    bool has_range;
    key_attr range; /* the sort key, if has_range */
} table_schema;

typedef enum {
    TABLE_CREATING = 0,
    TABLE_ACTIVE,
    TABLE_UPDATING,
    TABLE_DELETING,
} table_status;

typedef enum { BILLING_PROVISIONED = 0, BILLING_PAY_PER_REQUEST } billing_mode;

typedef struct {
    char *key; /* NUL-terminated, heap */
    char *value;
} table_tag;

typedef struct {
    table_schema schema;
    table_status status;
    char uuid[37];        /* TableId */
    double creation_time; /* epoch seconds, fractional */
    billing_mode billing;
    double billing_last_update; /* epoch seconds; 0 = never switched */
    int64_t read_capacity;      /* provisioned RCU (0 for PAY_PER_REQUEST) */
    int64_t write_capacity;
    double last_increase_time; /* 0 = never */
    double last_decrease_time;
    int64_t decreases_today;
    bool deletion_protection;
    key_attr attr_defs[CATALOG_MAX_ATTR_DEFS]; /* AttributeDefinitions, sorted by name */
    size_t n_attr_defs;
    table_tag *tags; /* sorted by key */
    size_t n_tags;
    partition_desc *partitions; /* in hash order */
    size_t n_partitions;
} table_info;

typedef struct catalog catalog;

catalog *catalog_new(void);
void catalog_free(catalog *c);

/* Applies one record (from catalog_encode_*). Fails with ERR_CORRUPT on a record that
 * does not decode; the catalog is unchanged then. */
int catalog_apply(catalog *c, const uint8_t *rec, size_t len, strata_err *err);

/* What a record changes, without applying it (the router uses this to store the
 * record under the table's name and to retire a dropped table's data). `name` points
 * into `rec`. A table record is fully decoded, so a record that peeks fine applies. */
typedef struct {
    bool drop;
    const char *name;
    size_t name_len;
    uint32_t table_id; /* table records: the ids the record carries */
    uint64_t max_partition_id;
} catalog_change;
int catalog_record_peek(const uint8_t *rec, size_t len, catalog_change *out, strata_err *err);

/* Moves the id counters forward to at least these values (recovery restores them, so
 * ids of dropped tables are never reused). */
void catalog_bump_ids(catalog *c, uint32_t next_table_id, uint64_t next_partition_id);

/* Replaces the partitions of table `table_id` in place (the cluster map split them): the
 * table_info itself stays where it is, so requests in flight that point into its schema
 * are not disturbed; pointers into the old partition array are invalid afterwards.
 * ERR_RESOURCE_NOT_FOUND, ERR_NOMEM. */
int catalog_set_partitions(catalog *c, uint32_t table_id, const partition_desc *parts, size_t n,
                           strata_err *err);

/* The record that sets table `t` (insert or replace, by name). The record carries the
 * table's ids, so the catalog's id counters move past them on apply. */
int catalog_encode_table(const table_info *t, buf *out, strata_err *err);
/* The record that removes table `name`. */
int catalog_encode_drop(const char *name, size_t name_len, buf *out, strata_err *err);

/* Lookups; NULL when absent. */
const table_info *catalog_find(const catalog *c, const char *name, size_t name_len);
const table_info *catalog_find_id(const catalog *c, uint32_t table_id);
/* The partition with this id, and its table (if `table` is not NULL); NULL if none. */
const partition_desc *catalog_find_partition(const catalog *c, uint64_t partition_id,
                                             const table_info **table);

/* Tables in name order (bytewise): the first table whose name is > `after` (or the
 * first table at all when `after` is NULL). NULL at the end. */
const table_info *catalog_next(const catalog *c, const char *after, size_t after_len);
size_t catalog_count(const catalog *c);

/* Ids a new table would get: the next table id and `n` fresh partition ids starting at
 * the returned value. They become "used" only when a record carrying them is applied. */
uint32_t catalog_next_table_id(const catalog *c);
uint64_t catalog_next_partition_id(const catalog *c);

/* Fills t->partitions (heap, owned by `t` until catalog_table_free) with `n` partitions
 * of equal hash ranges and ids first_id, first_id+1, ... */
int catalog_split_even(table_info *t, size_t n, uint64_t first_id, strata_err *err);

/* The partition of `t` that owns `hash` (binary search). Never NULL for a table with
 * partitions. */
const partition_desc *catalog_partition_for_hash(const table_info *t, uint64_t hash);

/* Deep copy (the copy's tags/partitions are heap, freed by catalog_table_free). Used to
 * build the next state of a table from the current one. */
int catalog_table_copy(const table_info *src, table_info *dst, strata_err *err);
void catalog_table_free(table_info *t);

/* Sets tag `key` (replacing a previous value) or removes it; keeps tags sorted. */
int catalog_table_set_tag(table_info *t, const char *key, const char *value, strata_err *err);
void catalog_table_remove_tag(table_info *t, const char *key);

/* The key schema in the state machine's form (pointers into `s`). */
void catalog_key_schema(const table_schema *s, partition_key_schema *out);
/* The same with the names copied into `a`, for a request that may outlive the next catalog
 * change: a read the router retries after the map (and the catalog) was rebuilt. -1 when
 * `a` is full. */
int catalog_key_schema_copy(const table_schema *s, arena *a, partition_key_schema *out);

/* "ACTIVE", "DELETING", ...; "PROVISIONED" / "PAY_PER_REQUEST". */
const char *table_status_name(table_status s);
const char *billing_mode_name(billing_mode m);

/* Checks a table name against DynamoDB's rules (3..255 of [a-zA-Z0-9_.-]). */
bool catalog_valid_table_name(const char *name, size_t len);

#endif
