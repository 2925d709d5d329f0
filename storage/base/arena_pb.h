#ifndef STRATA_BASE_ARENA_PB_H
#define STRATA_BASE_ARENA_PB_H
/*
 * An arena as protobuf-c's allocator: everything an unpack allocates (the message, its
 * submessages, repeated fields, strings and bytes) comes from the arena and goes when
 * the arena is freed, in one step instead of a free per piece. Never pass such a message
 * to *__free_unpacked: its pieces are not freed one by one.
 */
#include <protobuf-c/protobuf-c.h>

#include "storage/base/arena.h"

static inline void *arena_pb_alloc(void *a, size_t size)
{
    return arena_alloc(a, size ? size : 1);
}

static inline void arena_pb_free(void *a, void *p)
{
    (void)a;
    (void)p;
}

static inline ProtobufCAllocator arena_pb_allocator(arena *a)
{
    return (ProtobufCAllocator){arena_pb_alloc, arena_pb_free, a};
}

#endif
