/* The cluster file's text: see cluster_file.h. */
#include "cluster/cluster_file.h"

#include <assert.h>
#include <inttypes.h>
#include <string.h>
#include <xxhash.h>

#define HEADER     "strata-cluster 1\n"
#define SUM_PREFIX "xxh3 "
#define SUM_DIGITS 16
#define LIST_MAX                                                                                   \
    (CLUSTER_FILE_MAX_NODES > CLUSTER_FILE_MAX_MEMBERS ? CLUSTER_FILE_MAX_NODES                    \
                                                       : CLUSTER_FILE_MAX_MEMBERS)

void cluster_node_list_encode(const cluster_node_addr *list, size_t n, buf *out)
{
    for (size_t i = 0; i < n; i++)
        buf_printf(out, "%s%" PRIu64 "@%s", i ? "," : "", list[i].id, list[i].addr);
}

void cluster_file_encode(const cluster_file *f, buf *out)
{
    size_t start = out->len;
    buf_printf(out, HEADER "members ");
    cluster_node_list_encode(f->members, f->n_members, out);
    buf_printf(out, "\n");
    if (f->n_nodes > 0) {
        buf_printf(out, "nodes ");
        cluster_node_list_encode(f->nodes, f->n_nodes, out);
        buf_printf(out, "\n");
    }
    if (f->meta_joined)
        buf_printf(out, "meta joined\n");
    if (out->failed)
        return;
    uint64_t sum = XXH3_64bits(out->data + start, out->len - start);
    buf_printf(out, SUM_PREFIX "%016" PRIx64 "\n", sum);
}

/* An address byte: printable, not a space, not the lists' separator. */
static bool addr_byte_ok(char ch)
{
    return ch > ' ' && ch <= '~' && ch != ',';
}

/* One "ID@ADDR" of text[0..len). */
static int entry_decode(const char *text, size_t len, cluster_node_addr *out)
{
    size_t i = 0;
    uint64_t id = 0;
    for (; i < len && text[i] >= '0' && text[i] <= '9'; i++) {
        unsigned d = (unsigned)(text[i] - '0');
        if (id > (UINT64_MAX - d) / 10)
            return -1;
        id = id * 10 + d;
    }
    if (id == 0 || i >= len || text[i] != '@')
        return -1;
    const char *addr = text + i + 1;
    size_t alen = len - i - 1;
    if (alen == 0 || alen > META_ADDR_MAX)
        return -1;
    for (size_t k = 0; k < alen; k++)
        if (!addr_byte_ok(addr[k]))
            return -1;
    out->id = id;
    memcpy(out->addr, addr, alen);
    out->addr[alen] = '\0';
    return 0;
}

int cluster_node_list_decode(const char *text, size_t len, cluster_node_addr *out, size_t max,
                             size_t *n_out, strata_err *err)
{
    cluster_node_addr list[LIST_MAX];
    assert(max <= LIST_MAX);
    size_t n = 0;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && text[j] != ',')
            j++;
        if (n == max)
            return strata_err_set(err, ERR_CORRUPT, "a node list of more than %zu", max);
        if (entry_decode(text + i, j - i, &list[n]) < 0)
            return strata_err_set(err, ERR_CORRUPT, "entry %zu of a node list is not ID@ADDR",
                                  n + 1);
        n++;
        if (j == len)
            break;
        i = j + 1;
    }
    memcpy(out, list, n * sizeof *list);
    *n_out = n;
    return 0;
}

/* The value of 16 lowercase hex digits, as the encoder writes them; false if any is not
 * one. An uppercase digit is refused too: then no changed byte of a file reads. */
static bool hex64(const char *p, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < SUM_DIGITS; i++) {
        char ch = p[i];
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            d = (unsigned)(ch - 'a' + 10);
        else
            return false;
        v = v << 4 | d;
    }
    *out = v;
    return true;
}

/* Where the checksum line starts: the first line that begins with SUM_PREFIX. It must be
 * the last line and match every byte before it. */
static int find_checksum(const char *text, size_t len, size_t *at, strata_err *err)
{
    size_t pl = strlen(SUM_PREFIX);
    for (size_t i = strlen(HEADER); i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t ll = nl != NULL ? (size_t)(nl - (text + i)) : len - i;
        if (ll >= pl && memcmp(text + i, SUM_PREFIX, pl) == 0) {
            uint64_t want;
            if (ll != pl + SUM_DIGITS || nl == NULL || i + ll + 1 != len ||
                !hex64(text + i + pl, &want))
                return strata_err_set(err, ERR_CORRUPT, "a malformed checksum line");
            if (want != XXH3_64bits(text, i))
                return strata_err_set(err, ERR_CORRUPT, "its checksum does not match");
            *at = i;
            return 0;
        }
        if (nl == NULL)
            break;
        i += ll + 1;
    }
    return strata_err_set(err, ERR_CORRUPT, "no checksum line");
}

/* Line `line` (ll bytes, no newline) into f: a list, the joined flag, or skipped. */
static int line_decode(const char *line, size_t ll, cluster_file *f, bool *members, bool *nodes,
                       strata_err *err)
{
    if (ll >= 8 && memcmp(line, "members ", 8) == 0) {
        if (*members)
            return strata_err_set(err, ERR_CORRUPT, "two members lines");
        *members = true;
        return cluster_node_list_decode(line + 8, ll - 8, f->members, CLUSTER_FILE_MAX_MEMBERS,
                                        &f->n_members, err);
    }
    if (ll >= 6 && memcmp(line, "nodes ", 6) == 0) {
        if (*nodes)
            return strata_err_set(err, ERR_CORRUPT, "two nodes lines");
        *nodes = true;
        return cluster_node_list_decode(line + 6, ll - 6, f->nodes, CLUSTER_FILE_MAX_NODES,
                                        &f->n_nodes, err);
    }
    if (ll == 11 && memcmp(line, "meta joined", 11) == 0)
        f->meta_joined = true;
    return 0; /* a line of a later build */
}

int cluster_file_decode(const char *text, size_t len, cluster_file *out, strata_err *err)
{
    size_t hl = strlen(HEADER);
    if (len > CLUSTER_FILE_MAX_BYTES)
        return strata_err_set(err, ERR_CORRUPT, "longer than %d bytes", CLUSTER_FILE_MAX_BYTES);
    if (len < hl || memcmp(text, HEADER, hl) != 0)
        return strata_err_set(err, ERR_CORRUPT, "not a cluster file (header)");
    size_t end = 0;
    if (find_checksum(text, len, &end, err) < 0)
        return -1;
    cluster_file f;
    memset(&f, 0, sizeof f);
    bool members = false, nodes = false;
    for (size_t i = hl; i < end;) {
        const char *nl = memchr(text + i, '\n', end - i);
        assert(nl != NULL); /* the checksum line starts after a newline */
        size_t ll = (size_t)(nl - (text + i));
        if (line_decode(text + i, ll, &f, &members, &nodes, err) < 0)
            return -1;
        i += ll + 1;
    }
    if (!members)
        return strata_err_set(err, ERR_CORRUPT, "no members line");
    *out = f;
    return 0;
}
