/*
 * Memory kept for reuse instead of being given back to malloc (an arena's spare chunks,
 * the HTTP server's spare requests) is poisoned under AddressSanitizer, so that a use of
 * it after its owner let go is still reported. Without ASan both macros do nothing.
 */
#ifndef STRATA_BASE_POISON_H
#define STRATA_BASE_POISON_H

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ASAN 1
#endif
#endif

#ifdef STRATA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif
