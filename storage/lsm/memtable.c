/*
 * Memtable: a skiplist of internal keys in an arena of large chunks. Only the loop thread
 * writes it; once sealed it is immutable and a flush worker may read it concurrently with
 * loop-thread readers. Nodes are never freed one by one: the whole arena goes at once
 * when the last reference (the engine, an iterator, a flush job) is dropped.
 *
 * Point reads (mem_get) go through a hash index from user key to its newest node, when
 * it has the key: a skiplist search of a full memtable misses the cache many times, and
 * every PutItem's apply reads its item first. The index is bounded
 * (INDEX_SLOTS_MAX), so growing it never stalls the loop for long: once full it stops
 * taking new keys but keeps the keys it has current, and a key it lacks is searched for.
 *
 * Writes use the index too. A new version of a key the index holds sorts just before that
 * key's newest node (same user key, higher sequence), so its neighbours are known without a
 * search: level 0 is doubly linked, and the predecessors on the levels above are found by
 * walking back from there (a few steps: a node reaches level i with probability 4^-i). On
 * a PutItem load that rewrites its items this replaces a dozen cache misses per write.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "storage/lsm/lsm_int.h"

#define MAX_HEIGHT  12
#define CHUNK_BYTES (1u << 20)
/* 64 Ki slots of 16 bytes (1 MiB), at most half used: rehashing 32 Ki keys is quick. */
#define INDEX_SLOTS_MIN 256
#define INDEX_SLOTS_MAX (1u << 16)
/* Steps back along level 0 that mem_add takes to find a new version's predecessors
 * before it searches from the top instead (a tall node far back). */
#define WALK_BACK_MAX 32

typedef struct mem_node mem_node;
struct mem_node {
    uint32_t klen; /* internal key length */
    uint32_t vlen;
    mem_node *prev;   /* on level 0; the head for the first node, NULL for the head */
    mem_node *next[]; /* height entries, then key bytes, then value bytes */
};

typedef struct {
    uint64_t hash;  /* of the user key */
    mem_node *node; /* newest node of that key; NULL: empty slot */
} index_slot;

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    _Alignas(16) uint8_t data[];
} chunk;

struct memtable {
    int refs;
    uint64_t id;
    chunk *chunks;
    size_t bytes;    /* handed out: what the memtable_bytes bound counts */
    size_t reserved; /* malloc'd: at most one chunk more than bytes */
    size_t count;
    size_t chunk_bytes;
    int height;
    uint32_t rnd;
    mem_node *head;
    rtomb *tombs;
    int ntombs, tomb_cap;
    u64map *log_indexes;
    u64map *forgets;   /* ranges whose log index was forgotten in this memtable (value 1) */
    index_slot *index; /* see the top of the file */
    size_t index_cap, index_used;
    bool index_complete; /* it holds every key of the memtable: a key it lacks is absent */
};

static void *mem_alloc(memtable *m, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    chunk *c = m->chunks;
    if (c == NULL || c->size - c->used < n) {
        size_t size = n > m->chunk_bytes / 4 ? n : m->chunk_bytes;
        c = malloc(sizeof *c + size);
        if (c == NULL)
            return NULL;
        c->size = size;
        c->used = 0;
        if (size == n && m->chunks != NULL) {
            /* A big entry gets its own chunk behind the current one, which stays open. */
            c->next = m->chunks->next;
            m->chunks->next = c;
        } else {
            c->next = m->chunks;
            m->chunks = c;
        }
        m->reserved += sizeof *c + size;
    }
    void *p = c->data + c->used;
    c->used += n;
    m->bytes += n;
    return p;
}

static uint8_t *node_key(const mem_node *x, int height)
{
    return (uint8_t *)&x->next[height];
}

/* The key bytes follow next[height], so finding them needs the height: it lives in the
 * top byte of klen (keys are far below 16 MiB), which keeps the node header at 8 bytes. */
#define HEIGHT_SHIFT 24
static int node_height(const mem_node *x)
{
    return (int)(x->klen >> HEIGHT_SHIFT);
}
static uint32_t node_klen(const mem_node *x)
{
    return x->klen & ((1u << HEIGHT_SHIFT) - 1);
}
static const uint8_t *nkey(const mem_node *x)
{
    return node_key(x, node_height(x));
}
static const uint8_t *nval(const mem_node *x)
{
    return nkey(x) + node_klen(x);
}

static uint64_t node_trailer(const mem_node *x)
{
    return trailer_get(nkey(x), node_klen(x));
}

/* The slot of user key k (hash h): the one holding it, or the empty one where it would
 * go. The index is never more than half full, so there is always an empty slot. */
static index_slot *index_find(const memtable *m, uint64_t h, const uint8_t *k, size_t n)
{
    size_t mask = m->index_cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        index_slot *slot = &m->index[i];
        if (slot->node == NULL)
            return slot;
        if (slot->hash == h &&
            ukey_cmp(nkey(slot->node), node_klen(slot->node) - TRAILER_SIZE, k, n) == 0)
            return slot;
    }
}

/* Room for one more key: false when the index is at its bound or memory is short. */
static bool index_reserve(memtable *m)
{
    if ((m->index_used + 1) * 2 <= m->index_cap)
        return true;
    size_t cap = m->index_cap ? m->index_cap * 2 : INDEX_SLOTS_MIN;
    if (cap > INDEX_SLOTS_MAX)
        return false;
    index_slot *grown = calloc(cap, sizeof *grown);
    if (grown == NULL)
        return false;
    for (size_t i = 0; i < m->index_cap; i++) {
        if (m->index[i].node == NULL)
            continue;
        size_t j = (size_t)m->index[i].hash & (cap - 1);
        while (grown[j].node != NULL)
            j = (j + 1) & (cap - 1);
        grown[j] = m->index[i];
    }
    m->reserved += (cap - m->index_cap) * sizeof *grown;
    free(m->index);
    m->index = grown;
    m->index_cap = cap;
    return true;
}

/* Node x (user key k, hash h) was added: it becomes its key's entry if it sorts before
 * the one there (higher sequence), or the key's first entry if the index has room. */
static void index_add(memtable *m, mem_node *x, const uint8_t *k, size_t n, uint64_t h)
{
    index_slot *slot = m->index_cap ? index_find(m, h, k, n) : NULL;
    if (slot != NULL && slot->node != NULL) {
        if (node_trailer(x) > node_trailer(slot->node))
            slot->node = x;
        return;
    }
    size_t cap = m->index_cap;
    if (!index_reserve(m)) {
        m->index_complete = false;
        return;
    }
    if (m->index_cap != cap) /* grown: the slots moved */
        slot = index_find(m, h, k, n);
    *slot = (index_slot){h, x};
    m->index_used++;
}

/* mem_get through the index: 1 found (*found set), 0 absent, -1 the index cannot tell
 * (the key is not in it but may be in the memtable, or its newest entry is above snap). */
static int index_get(const memtable *m, const uint8_t *k, size_t n, uint64_t snap,
                     const mem_node **found)
{
    const index_slot *slot = NULL;
    if (m->index_cap > 0)
        slot = index_find(m, XXH3_64bits(k, n), k, n);
    if (slot == NULL || slot->node == NULL)
        return m->index_complete ? 0 : -1;
    if ((node_trailer(slot->node) >> 8) > snap)
        return -1;
    *found = slot->node;
    return 1;
}

memtable *mem_new(size_t chunk_bytes)
{
    memtable *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->chunk_bytes = chunk_bytes < 4096          ? 4096
                     : chunk_bytes > CHUNK_BYTES ? CHUNK_BYTES
                                                 : chunk_bytes;
    m->refs = 1;
    m->height = 1;
    m->rnd = 0x9e3779b9u;
    m->log_indexes = u64map_new();
    m->forgets = u64map_new();
    m->head = mem_alloc(m, sizeof(mem_node) + MAX_HEIGHT * sizeof(mem_node *));
    if (m->head == NULL || m->log_indexes == NULL || m->forgets == NULL) {
        mem_unref(m);
        return NULL;
    }
    memset(m->head, 0, sizeof(mem_node) + MAX_HEIGHT * sizeof(mem_node *));
    m->head->klen = (uint32_t)MAX_HEIGHT << HEIGHT_SHIFT;
    m->index_complete = true;
    return m;
}

void mem_ref(memtable *m)
{
    m->refs++;
}

int mem_refs(const memtable *m)
{
    return m->refs;
}

void mem_unref(memtable *m)
{
    if (m == NULL || --m->refs > 0)
        return;
    for (chunk *c = m->chunks, *n; c != NULL; c = n) {
        n = c->next;
        free(c);
    }
    for (int i = 0; i < m->ntombs; i++)
        free(m->tombs[i].start);
    free(m->tombs);
    u64map_free(m->log_indexes);
    u64map_free(m->forgets);
    free(m->index);
    free(m);
}

static int random_height(memtable *m)
{
    int h = 1;
    for (;;) {
        m->rnd ^= m->rnd << 13;
        m->rnd ^= m->rnd >> 17;
        m->rnd ^= m->rnd << 5;
        if (h >= MAX_HEIGHT || (m->rnd & 3) != 0)
            return h;
        h++;
    }
}

static int node_cmp(const mem_node *x, const uint8_t *k, size_t n)
{
    return ikey_cmp(nkey(x), node_klen(x), k, n);
}

/* Last node < key at every level into prev (if not NULL); returns the first node >= key. */
static mem_node *find_ge(const memtable *m, const uint8_t *k, size_t n, mem_node **prev)
{
    mem_node *x = m->head;
    for (int level = m->height - 1; level >= 0; level--) {
        for (;;) {
            mem_node *nx = x->next[level];
            if (nx != NULL && node_cmp(nx, k, n) < 0)
                x = nx;
            else
                break;
        }
        if (prev)
            prev[level] = x;
    }
    return x->next[0];
}

static mem_node *find_last(const memtable *m)
{
    mem_node *x = m->head;
    for (int level = m->height - 1; level >= 0; level--)
        while (x->next[level] != NULL)
            x = x->next[level];
    return x == m->head ? NULL : x;
}

/* The predecessors on levels 0..h-1 of a node that goes just before `next` (a node with
 * the same user key and a lower sequence), by walking back from it; false when that
 * takes more than WALK_BACK_MAX steps. */
static bool preds_before(const mem_node *next, int h, mem_node **prev)
{
    mem_node *x = next->prev;
    int steps = 0;
    for (int level = 0; level < h; level++) {
        while (node_height(x) <= level) {
            if (++steps > WALK_BACK_MAX)
                return false;
            x = x->prev;
        }
        prev[level] = x;
    }
    return true;
}

bool mem_add(memtable *m, uint64_t seq, int type, const void *key, size_t klen, const void *val,
             size_t vlen)
{
    int h = random_height(m);
    size_t iklen = klen + TRAILER_SIZE;
    mem_node *x = mem_alloc(m, sizeof(mem_node) + (size_t)h * sizeof(mem_node *) + iklen + vlen);
    if (x == NULL)
        return false;
    x->klen = (uint32_t)iklen | ((uint32_t)h << HEIGHT_SHIFT);
    x->vlen = (uint32_t)vlen;
    uint8_t *k = node_key(x, h);
    if (klen)
        memcpy(k, key, klen);
    trailer_put(k + klen, trailer_pack(seq, type));
    if (vlen)
        memcpy(k + iklen, val, vlen);

    mem_node *prev[MAX_HEIGHT];
    uint64_t hash = XXH3_64bits(k, klen);
    index_slot *slot = m->index_cap ? index_find(m, hash, k, klen) : NULL;
    if (slot == NULL || slot->node == NULL || node_trailer(slot->node) >= trailer_pack(seq, type) ||
        h > m->height || !preds_before(slot->node, h, prev)) {
        slot = NULL;
        mem_node *ge = find_ge(m, k, iklen, prev);
        assert(ge == NULL || node_cmp(ge, k, iklen) != 0);
        (void)ge;
    }
    if (h > m->height) {
        for (int i = m->height; i < h; i++)
            prev[i] = m->head;
        m->height = h;
    }
    for (int i = 0; i < h; i++) {
        x->next[i] = prev[i]->next[i];
        prev[i]->next[i] = x;
    }
    x->prev = prev[0];
    if (x->next[0] != NULL)
        x->next[0]->prev = x;
    if (slot != NULL)
        slot->node = x; /* the key's newest node now */
    else
        index_add(m, x, k, klen, hash);
    m->count++;
    return true;
}

bool mem_add_rtomb(memtable *m, uint64_t seq, const void *s, size_t sn, const void *e, size_t en)
{
    if (m->ntombs == m->tomb_cap) {
        int cap = m->tomb_cap ? m->tomb_cap * 2 : 4;
        rtomb *t = realloc(m->tombs, (size_t)cap * sizeof *t);
        if (t == NULL)
            return false;
        m->tombs = t;
        m->tomb_cap = cap;
    }
    uint8_t *p = malloc(sn + en + 1);
    if (p == NULL)
        return false;
    if (sn)
        memcpy(p, s, sn);
    if (en)
        memcpy(p + sn, e, en);
    m->tombs[m->ntombs++] = (rtomb){
        .start = p, .start_len = (uint32_t)sn, .end = p + sn, .end_len = (uint32_t)en, .seq = seq};
    m->bytes += sn + en + sizeof(rtomb);
    m->count++;
    return true;
}

/* The skiplist search of mem_get: the newest node of ukey with seq <= snap, NULL if none,
 * the head if out of memory. */
static const mem_node *search_visible(memtable *m, const void *ukey, size_t n, uint64_t snap)
{
    uint8_t stackbuf[256];
    uint8_t *k = n + TRAILER_SIZE <= sizeof stackbuf ? stackbuf : malloc(n + TRAILER_SIZE);
    if (k == NULL)
        return m->head;
    if (n)
        memcpy(k, ukey, n);
    trailer_put(k + n, trailer_pack(snap, TYPE_PUT));
    mem_node *x = find_ge(m, k, n + TRAILER_SIZE, NULL);
    if (k != stackbuf)
        free(k);
    if (x == NULL || ukey_cmp(nkey(x), node_klen(x) - TRAILER_SIZE, ukey, n) != 0)
        return NULL;
    return x;
}

int mem_get(memtable *m, const void *ukey, size_t n, uint64_t snap, uint64_t *seq_out,
            int *type_out, const uint8_t **val, size_t *vlen)
{
    const mem_node *x = NULL;
    int known = index_get(m, ukey, n, snap, &x);
    if (known == 0)
        return 0;
    if (known < 0) {
        x = search_visible(m, ukey, n, snap);
        if (x == (const mem_node *)m->head)
            return -1;
        if (x == NULL)
            return 0;
    }
    uint64_t t = node_trailer(x);
    *seq_out = t >> 8;
    *type_out = (int)(t & 0xff);
    *val = nval(x);
    *vlen = x->vlen;
    return 1;
}

size_t mem_bytes(const memtable *m)
{
    return m->bytes;
}

size_t mem_reserved(const memtable *m)
{
    return m->reserved;
}

size_t mem_count(const memtable *m)
{
    return m->count;
}

const rtomb *mem_rtombs(const memtable *m, int *n)
{
    *n = m->ntombs;
    return m->tombs;
}

u64map *mem_log_indexes(memtable *m)
{
    return m->log_indexes;
}

u64map *mem_forgets(memtable *m)
{
    return m->forgets;
}

uint64_t mem_id(const memtable *m)
{
    return m->id;
}

void mem_set_id(memtable *m, uint64_t id)
{
    m->id = id;
}

/* ---- Iterator ---- */
typedef struct {
    iter base;
    memtable *m;
    mem_node *x;
} mem_iter;

static void mi_first(iter *it)
{
    mem_iter *mi = (mem_iter *)it;
    mi->x = mi->m->head->next[0];
}
static void mi_last(iter *it)
{
    mem_iter *mi = (mem_iter *)it;
    mi->x = find_last(mi->m);
}
static void mi_seek(iter *it, const uint8_t *k, size_t n)
{
    mem_iter *mi = (mem_iter *)it;
    mi->x = find_ge(mi->m, k, n, NULL);
}
static void mi_next(iter *it)
{
    mem_iter *mi = (mem_iter *)it;
    mi->x = mi->x->next[0];
}
static void mi_prev(iter *it)
{
    mem_iter *mi = (mem_iter *)it;
    mi->x = mi->x->prev == mi->m->head ? NULL : mi->x->prev;
}
static bool mi_valid(const iter *it)
{
    return ((const mem_iter *)it)->x != NULL;
}
static const uint8_t *mi_key(const iter *it, size_t *n)
{
    const mem_node *x = ((const mem_iter *)it)->x;
    *n = node_klen(x);
    return nkey(x);
}
static const uint8_t *mi_value(const iter *it, size_t *n)
{
    const mem_node *x = ((const mem_iter *)it)->x;
    *n = x->vlen;
    return nval(x);
}
static int mi_status(const iter *it, strata_err *err)
{
    (void)it;
    (void)err;
    return 0;
}
static void mi_destroy(iter *it)
{
    mem_iter *mi = (mem_iter *)it;
    mem_unref(mi->m);
    free(mi);
}

static void mi_destroy_unpinned(iter *it)
{
    free(it);
}

static iter *new_iter(memtable *m, bool pin)
{
    mem_iter *mi = calloc(1, sizeof *mi);
    if (mi == NULL)
        return NULL;
    mi->base =
        (iter){mi_first, mi_last, mi_seek,  mi_next,   mi_prev,
               mi_valid, mi_key,  mi_value, mi_status, pin ? mi_destroy : mi_destroy_unpinned};
    mi->m = m;
    if (pin)
        mem_ref(m);
    return &mi->base;
}

iter *mem_iter_new(memtable *m)
{
    return new_iter(m, true);
}

iter *mem_iter_new_unpinned(memtable *m)
{
    return new_iter(m, false);
}

/* ---- u64map: open addressing, linear probing; key 0 is stored out of line ---- */
struct u64map {
    uint64_t *keys, *vals;
    size_t cap, count;
    bool has_zero;
    uint64_t zero_val;
};

u64map *u64map_new(void)
{
    return calloc(1, sizeof(u64map));
}

void u64map_free(u64map *m)
{
    if (m == NULL)
        return;
    free(m->keys);
    free(m->vals);
    free(m);
}

static size_t slot_of(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static bool u64map_grow(u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    uint64_t *keys = calloc(cap, sizeof *keys), *vals = calloc(cap, sizeof *vals);
    if (keys == NULL || vals == NULL) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0)
            continue;
        size_t s = slot_of(m->keys[i], cap);
        while (keys[s] != 0)
            s = (s + 1) & (cap - 1);
        keys[s] = m->keys[i];
        vals[s] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return true;
}

bool u64map_max(u64map *m, uint64_t k, uint64_t v)
{
    if (k == 0) {
        if (!m->has_zero || m->zero_val < v)
            m->zero_val = v;
        if (!m->has_zero)
            m->count++;
        m->has_zero = true;
        return true;
    }
    if ((m->count + 1) * 4 > m->cap * 3 && !u64map_grow(m))
        return false;
    size_t s = slot_of(k, m->cap);
    while (m->keys[s] != 0 && m->keys[s] != k)
        s = (s + 1) & (m->cap - 1);
    if (m->keys[s] == 0) {
        m->keys[s] = k;
        m->vals[s] = v;
        m->count++;
    } else if (m->vals[s] < v) {
        m->vals[s] = v;
    }
    return true;
}

void u64map_del(u64map *m, uint64_t k)
{
    if (k == 0) {
        if (m->has_zero)
            m->count--;
        m->has_zero = false;
        m->zero_val = 0;
        return;
    }
    if (m->cap == 0)
        return;
    size_t mask = m->cap - 1;
    size_t s = slot_of(k, m->cap);
    while (m->keys[s] != 0 && m->keys[s] != k)
        s = (s + 1) & mask;
    if (m->keys[s] == 0)
        return;
    /* Backward shift: an entry after the hole moves into it unless its home slot lies
     * cyclically in (hole, i], where a lookup would stop before reaching the hole. */
    size_t hole = s;
    for (size_t i = (s + 1) & mask; m->keys[i] != 0; i = (i + 1) & mask) {
        size_t home = slot_of(m->keys[i], m->cap);
        bool stays = hole < i ? home > hole && home <= i : home > hole || home <= i;
        if (stays)
            continue;
        m->keys[hole] = m->keys[i];
        m->vals[hole] = m->vals[i];
        hole = i;
    }
    m->keys[hole] = 0;
    m->vals[hole] = 0;
    m->count--;
}

uint64_t u64map_get(const u64map *m, uint64_t k)
{
    if (k == 0)
        return m->has_zero ? m->zero_val : 0;
    if (m->cap == 0)
        return 0;
    size_t s = slot_of(k, m->cap);
    while (m->keys[s] != 0) {
        if (m->keys[s] == k)
            return m->vals[s];
        s = (s + 1) & (m->cap - 1);
    }
    return 0;
}

size_t u64map_count(const u64map *m)
{
    return m->count;
}

bool u64map_next(const u64map *m, size_t *pos, uint64_t *k, uint64_t *v)
{
    if (*pos == 0) {
        (*pos)++;
        if (m->has_zero) {
            *k = 0;
            *v = m->zero_val;
            return true;
        }
    }
    while (*pos - 1 < m->cap) {
        size_t i = (*pos)++ - 1;
        if (m->keys[i] != 0) {
            *k = m->keys[i];
            *v = m->vals[i];
            return true;
        }
    }
    return false;
}

u64map *u64map_copy(const u64map *m)
{
    u64map *c = u64map_new();
    if (c == NULL)
        return NULL;
    size_t pos = 0;
    uint64_t k, v;
    while (u64map_next(m, &pos, &k, &v)) {
        if (!u64map_max(c, k, v)) {
            u64map_free(c);
            return NULL;
        }
    }
    return c;
}
