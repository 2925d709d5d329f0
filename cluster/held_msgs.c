/* held_msgs: see held_msgs.h. A singly linked list in arrival order: a node holds a few
 * dozen messages at most, briefly, so a walk per delivery is cheap. */
#include "cluster/held_msgs.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct held_msg {
    held_msg *next;
    uint64_t group, from, at;
    size_t len;
    uint8_t data[];
};

void held_init(held_msgs *h, held_limits lim)
{
    *h = (held_msgs){.lim = lim};
}

static void drop_first(held_msgs *h)
{
    held_msg *m = h->first;
    h->first = m->next;
    if (h->first == NULL)
        h->last = NULL;
    h->n--;
    h->bytes -= m->len;
    free(m);
}

void held_clear(held_msgs *h)
{
    while (h->first != NULL)
        drop_first(h);
    assert(h->n == 0 && h->bytes == 0);
}

static bool expired(const held_msgs *h, const held_msg *m, uint64_t now_ms)
{
    return now_ms > m->at && now_ms - m->at > h->lim.keep_ms;
}

bool held_keep(held_msgs *h, uint64_t group, uint64_t from, const uint8_t *data, size_t len,
               uint64_t now_ms)
{
    while (h->first != NULL && expired(h, h->first, now_ms))
        drop_first(h);
    if (len > h->lim.max_bytes || h->lim.max_msgs == 0)
        return false;
    while (h->first != NULL && (h->n >= h->lim.max_msgs || h->bytes + len > h->lim.max_bytes))
        drop_first(h);
    held_msg *m = malloc(sizeof *m + len);
    if (m == NULL)
        return false;
    *m = (held_msg){.group = group, .from = from, .at = now_ms, .len = len};
    if (len > 0)
        memcpy(m->data, data, len);
    if (h->last != NULL)
        h->last->next = m;
    else
        h->first = m;
    h->last = m;
    h->n++;
    h->bytes += len;
    return true;
}

size_t held_deliver(held_msgs *h, uint64_t group, uint64_t now_ms, held_fn fn, void *arg)
{
    /* Unlink the group's messages first: fn may keep new ones while it runs. */
    held_msg *mine = NULL, **mine_tail = &mine, *prev = NULL;
    for (held_msg *m = h->first, *next; m != NULL; m = next) {
        next = m->next;
        if (m->group != group) {
            prev = m;
            continue;
        }
        if (prev != NULL)
            prev->next = next;
        else
            h->first = next;
        if (h->last == m)
            h->last = prev;
        h->n--;
        h->bytes -= m->len;
        m->next = NULL;
        *mine_tail = m;
        mine_tail = &m->next;
    }
    size_t delivered = 0;
    while (mine != NULL) {
        held_msg *m = mine;
        mine = m->next;
        if (!expired(h, m, now_ms)) {
            fn(arg, m->from, m->data, m->len);
            delivered++;
        }
        free(m);
    }
    return delivered;
}
