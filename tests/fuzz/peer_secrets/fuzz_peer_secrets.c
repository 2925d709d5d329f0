/*
 * libFuzzer harness of node/config's peer secret file reader (config_read_peer_secrets):
 * any bytes, written to a file only this process may read, give one or two secrets that
 * keep the file's rules (bounds, one line each, no trailing whitespace), or an error with
 * nothing kept, never a crash.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/config.h"

static char dir[] = "/tmp/fuzz_peer_secrets_XXXXXX";
static char path[64];

static void remove_file(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static config_peer_secrets out;
    if (path[0] == '\0') {
        if (mkdtemp(dir) == NULL)
            abort();
        snprintf(path, sizeof path, "%s/secret", dir);
        atexit(remove_file);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size > 0 && write(fd, data, size) != (ssize_t)size))
        abort();
    close(fd);
    strata_err err;
    if (config_read_peer_secrets(path, &out, &err) < 0) {
        if (out.count != 0 || err.code != ERR_VALIDATION)
            abort();
        return 0;
    }
    if (out.count < 1 || out.count > CONFIG_PEER_SECRETS)
        abort();
    for (int i = 0; i < out.count; i++) {
        if (out.len[i] < CONFIG_PEER_SECRET_MIN || out.len[i] > CONFIG_PEER_SECRET_MAX ||
            memchr(out.key[i], '\n', out.len[i]) != NULL || isspace(out.key[i][out.len[i] - 1]))
            abort();
        if (memmem(data, size, out.key[i], out.len[i]) == NULL)
            abort();
    }
    return 0;
}
