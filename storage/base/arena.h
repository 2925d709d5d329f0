#ifndef STRATA_BASE_ARENA_H
#define STRATA_BASE_ARENA_H
/*
 * A bump allocator for request-scoped memory: parse a request, evaluate it, answer it,
 * then free everything at once. Allocations are 16-byte aligned and never freed one by
 * one. An arena has a byte limit, so a hostile request cannot grow it without bound:
 * past the limit, allocation returns NULL (callers report ERR_NOMEM or the DynamoDB
 * limit that applies).
 *
 * Arenas may be used on any thread (one arena by one thread at a time). Freed chunks of
 * the minimum size (16 KiB) are kept, at most 128 of them (2 MiB) process-wide, for the next
 * arena.
 */
#include <stddef.h>

typedef struct arena_chunk arena_chunk;

typedef struct {
    arena_chunk *head;  /* newest chunk first */
    size_t allocated;   /* bytes handed out, including alignment padding */
    size_t limit;       /* 0 means no limit */
} arena;

void arena_init(arena *a, size_t limit);
void *arena_alloc(arena *a, size_t size);            /* NULL when over the limit or OOM */
void *arena_zalloc(arena *a, size_t size);           /* zeroed */
void *arena_memdup(arena *a, const void *p, size_t size);
char *arena_strndup(arena *a, const char *s, size_t len); /* adds a NUL */
/* Grows the most recent allocation `p` of `old_size` to `new_size` (copying if needed). */
void *arena_realloc(arena *a, void *p, size_t old_size, size_t new_size);
void arena_reset(arena *a);   /* frees all but keeps one chunk for reuse */
void arena_free(arena *a);    /* frees everything */

#endif
