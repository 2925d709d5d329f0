#include "storage/base/arena.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/base/poison.h"

#define ARENA_ALIGN     16
#define ARENA_CHUNK_MIN (16 * 1024)
/* Freed chunks of the minimum size kept for the next arena (see take_spare), at most
 * this many (2 MiB): one per request in flight on a node serving about a hundred
 * connections. 16 sent most chunks back to malloc under 64 connections. */
#define ARENA_SPARE_MAX 128

struct arena_chunk {
    arena_chunk *next;
    size_t size; /* usable bytes in data[] */
    size_t used;
    _Alignas(ARENA_ALIGN) unsigned char data[];
};

void arena_init(arena *a, size_t limit)
{
    a->head = NULL;
    a->allocated = 0;
    a->limit = limit;
}

static size_t align_up(size_t n)
{
    return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

/*
 * Most arenas live for one request or one command and need one minimum-size chunk. Taking
 * it from malloc and giving it back every time was a measurable share of a node's CPU
 * (16 KiB is a large-bin request: glibc consolidates its fast bins for each), so freed
 * minimum-size chunks wait here for the next arena. Any thread may use arenas: a mutex
 * guards the list (uncontended, it costs far less than the malloc it saves).
 */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static arena_chunk *spare_chunks;
static int n_spare;

static arena_chunk *take_spare(void)
{
    pthread_mutex_lock(&spare_lock);
    arena_chunk *c = spare_chunks;
    if (c != NULL) {
        UNPOISON(c, sizeof *c + ARENA_CHUNK_MIN);
        spare_chunks = c->next;
        n_spare--;
    }
    pthread_mutex_unlock(&spare_lock);
    return c;
}

static void release_chunk(arena_chunk *c)
{
    if (c->size == ARENA_CHUNK_MIN) {
        pthread_mutex_lock(&spare_lock);
        bool keep = n_spare < ARENA_SPARE_MAX;
        if (keep) {
            c->next = spare_chunks;
            spare_chunks = c;
            n_spare++;
            POISON(c->data, ARENA_CHUNK_MIN); /* the header stays readable: the list */
        }
        pthread_mutex_unlock(&spare_lock);
        if (keep)
            return;
    }
    free(c);
}

static arena_chunk *new_chunk(size_t want)
{
    size_t size = want > ARENA_CHUNK_MIN ? want : ARENA_CHUNK_MIN;
    arena_chunk *c = size == ARENA_CHUNK_MIN ? take_spare() : NULL;
    if (c == NULL)
        c = malloc(sizeof *c + size);
    if (c == NULL)
        return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

void *arena_alloc(arena *a, size_t size)
{
    if (size > SIZE_MAX / 2)
        return NULL;
    size_t need = align_up(size ? size : 1);
    if (a->limit != 0 && a->allocated + need > a->limit)
        return NULL;
    arena_chunk *c = a->head;
    if (c == NULL || c->size - c->used < need) {
        /* Grow geometrically so a large request needs few chunks, but never ask malloc
         * for more than the limit leaves: memory held stays within about the limit. */
        size_t grow = c ? c->size * 2 : ARENA_CHUNK_MIN;
        if (a->limit != 0 && grow > a->limit - a->allocated)
            grow = a->limit - a->allocated;
        arena_chunk *n = new_chunk(need > grow ? need : grow);
        if (n == NULL)
            return NULL;
        n->next = c;
        a->head = c = n;
    }
    void *p = c->data + c->used;
    c->used += need;
    a->allocated += need;
    return p;
}

void *arena_zalloc(arena *a, size_t size)
{
    void *p = arena_alloc(a, size);
    if (p != NULL)
        memset(p, 0, size);
    return p;
}

void *arena_memdup(arena *a, const void *p, size_t size)
{
    void *q = arena_alloc(a, size);
    if (q != NULL && size > 0)
        memcpy(q, p, size);
    return q;
}

char *arena_strndup(arena *a, const char *s, size_t len)
{
    char *q = arena_alloc(a, len + 1);
    if (q == NULL)
        return NULL;
    if (len > 0)
        memcpy(q, s, len);
    q[len] = '\0';
    return q;
}

void *arena_realloc(arena *a, void *p, size_t old_size, size_t new_size)
{
    if (p == NULL)
        return arena_alloc(a, new_size);
    arena_chunk *c = a->head;
    size_t old_aligned = align_up(old_size ? old_size : 1);
    /* The last allocation of the newest chunk can grow in place. */
    if (c != NULL && (unsigned char *)p + old_aligned == c->data + c->used) {
        size_t new_aligned = align_up(new_size ? new_size : 1);
        size_t offset = (size_t)((unsigned char *)p - c->data);
        if (new_aligned <= c->size - offset &&
            (a->limit == 0 || a->allocated - old_aligned + new_aligned <= a->limit)) {
            c->used = offset + new_aligned;
            a->allocated = a->allocated - old_aligned + new_aligned;
            return p;
        }
    }
    if (new_size <= old_size)
        return p;
    void *q = arena_alloc(a, new_size);
    if (q != NULL)
        memcpy(q, p, old_size);
    return q;
}

void arena_reset(arena *a)
{
    arena_chunk *keep = NULL;
    arena_chunk *c = a->head;
    while (c != NULL) {
        arena_chunk *next = c->next;
        if (keep == NULL && c->size == ARENA_CHUNK_MIN) {
            keep = c;
            keep->next = NULL;
            keep->used = 0;
        } else {
            release_chunk(c);
        }
        c = next;
    }
    a->head = keep;
    a->allocated = 0;
}

void arena_free(arena *a)
{
    arena_chunk *c = a->head;
    while (c != NULL) {
        arena_chunk *next = c->next;
        release_chunk(c);
        c = next;
    }
    a->head = NULL;
    a->allocated = 0;
}
