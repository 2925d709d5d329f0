/*
 * Block cache: decoded data blocks keyed by (file number, offset), evicted least recently
 * used first once the charged bytes pass the capacity. Loop thread only. The cache holds
 * one reference on each block; a reader holding another keeps an evicted block alive
 * until it lets go, so the bound can be passed by the blocks readers pin at that moment.
 */
#include <stdlib.h>

#include "storage/lsm/lsm_int.h"

typedef struct centry centry;
struct centry {
    uint64_t file, off;
    block *b;
    centry *hnext;       /* hash chain */
    centry *prev, *next; /* LRU list: head is most recent */
};

struct cache {
    size_t capacity, charge;
    centry **table;
    size_t nbuckets, count;
    centry lru; /* sentinel */
    uint64_t hits, misses;
};

static size_t bucket_of(const cache *c, uint64_t file, uint64_t off)
{
    uint64_t h = (file * 0x9e3779b97f4a7c15ull) ^ (off * 0xc2b2ae3d27d4eb4full);
    h ^= h >> 29;
    return (size_t)h & (c->nbuckets - 1);
}

cache *cache_new(size_t capacity)
{
    cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->capacity = capacity;
    c->nbuckets = 1024;
    c->table = calloc(c->nbuckets, sizeof *c->table);
    if (c->table == NULL) {
        free(c);
        return NULL;
    }
    c->lru.prev = c->lru.next = &c->lru;
    return c;
}

static void lru_unlink(centry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push(cache *c, centry *e)
{
    e->next = c->lru.next;
    e->prev = &c->lru;
    c->lru.next->prev = e;
    c->lru.next = e;
}

static void remove_entry(cache *c, centry *e)
{
    centry **pp = &c->table[bucket_of(c, e->file, e->off)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    c->charge -= e->b->charge;
    c->count--;
    block_unref(e->b);
    free(e);
}

void cache_free(cache *c)
{
    if (c == NULL)
        return;
    while (c->lru.next != &c->lru)
        remove_entry(c, c->lru.next);
    free(c->table);
    free(c);
}

block *cache_lookup(cache *c, uint64_t file, uint64_t off)
{
    for (centry *e = c->table[bucket_of(c, file, off)]; e != NULL; e = e->hnext) {
        if (e->file == file && e->off == off) {
            lru_unlink(e);
            lru_push(c, e);
            e->b->refs++;
            c->hits++;
            return e->b;
        }
    }
    c->misses++;
    return NULL;
}

static void grow(cache *c)
{
    size_t n = c->nbuckets * 2;
    centry **t = calloc(n, sizeof *t);
    if (t == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < c->nbuckets; i++) {
        for (centry *e = c->table[i], *nx; e != NULL; e = nx) {
            nx = e->hnext;
            uint64_t h = (e->file * 0x9e3779b97f4a7c15ull) ^ (e->off * 0xc2b2ae3d27d4eb4full);
            h ^= h >> 29;
            size_t bkt = (size_t)h & (n - 1);
            e->hnext = t[bkt];
            t[bkt] = e;
        }
    }
    free(c->table);
    c->table = t;
    c->nbuckets = n;
}

void cache_insert(cache *c, uint64_t file, uint64_t off, block *b)
{
    if (b->charge > c->capacity)
        return; /* would evict everything for one block */
    centry *e = malloc(sizeof *e);
    if (e == NULL)
        return; /* not caching is always correct */
    e->file = file;
    e->off = off;
    e->b = b;
    b->refs++;
    size_t bkt = bucket_of(c, file, off);
    e->hnext = c->table[bkt];
    c->table[bkt] = e;
    lru_push(c, e);
    c->charge += b->charge;
    c->count++;
    while (c->charge > c->capacity && c->lru.prev != e)
        remove_entry(c, c->lru.prev);
    if (c->count > c->nbuckets)
        grow(c);
}

void cache_erase_file(cache *c, uint64_t file)
{
    for (centry *e = c->lru.next, *nx; e != &c->lru; e = nx) {
        nx = e->next;
        if (e->file == file)
            remove_entry(c, e);
    }
}

size_t cache_charge(const cache *c)
{
    return c->charge;
}

void cache_stats(const cache *c, uint64_t *hits, uint64_t *misses)
{
    *hits = c->hits;
    *misses = c->misses;
}
