/*
 * Death tests for memory that is poisoned instead of freed (storage/base/poison.h): runs
 * `fn` in a child process with stderr silenced, where AddressSanitizer must abort it.
 * Only meaningful under ASan (STRATA_ASAN, from poison.h: gcc and clang both): callers
 * define their child functions only under it and use EXPECT_ASAN_DEATH. Include it after
 * cmocka.h.
 */
#ifndef STRATA_TESTS_ASAN_DEATH_H
#define STRATA_TESTS_ASAN_DEATH_H

#include <fcntl.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/base/poison.h"

/* True when `fn(arg)` did not return normally: it died (ASan's report) or exited
 * non-zero. `fn` may _exit(0) itself to say the test would prove nothing. */
static inline bool dies_in_child(void (*fn)(void *arg), void *arg)
{
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2); /* the report is expected */
        fn(arg);
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return false;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The body of a death test: `fn` (defined only under STRATA_ASAN) must die in a child;
 * without ASan the test is skipped and `fn` is not named. */
#ifdef STRATA_ASAN
#define EXPECT_ASAN_DEATH(fn) assert_true(dies_in_child((fn), NULL))
#else
#define EXPECT_ASAN_DEATH(fn) skip()
#endif

#endif
