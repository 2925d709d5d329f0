/*
 * Placement planner (see placement.h). Plans run on a private copy of the partition map
 * ("sim") and per-node counters, so every planned step is checked with
 * meta_partition_check() against the membership it will really meet when applied.
 */
#include "cluster/placement.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    placement_move *v;
    size_t n, cap;
} move_list;

static int push_move(move_list *l, placement_move m, strata_err *err)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 16;
        placement_move *p = realloc(l->v, ncap * sizeof(*p));
        if (p == NULL)
            return strata_err_set(err, ERR_NOMEM, "placement: out of memory");
        l->v = p;
        l->cap = ncap;
    }
    l->v[l->n++] = m;
    return 0;
}

static bool is_active(const meta_state *s, size_t i)
{
    return meta_node_at(s, i)->state == META_NODE_ACTIVE;
}

/* Copies the partition map and counts members per node index. */
static int sim_init(const meta_state *s, meta_partition **sim, size_t **counts, strata_err *err)
{
    size_t np = meta_partition_count(s), nn = meta_node_count(s);
    *sim = malloc((np ? np : 1) * sizeof(meta_partition));
    *counts = calloc(nn ? nn : 1, sizeof(size_t));
    if (*sim == NULL || *counts == NULL) {
        free(*sim);
        free(*counts);
        return strata_err_set(err, ERR_NOMEM, "placement: out of memory");
    }
    for (size_t i = 0; i < np; i++) {
        (*sim)[i] = *meta_partition_at(s, i);
        for (uint32_t m = 0; m < (*sim)[i].n_members; m++) {
            size_t k = meta_node_index(s, (*sim)[i].members[m].node);
            if (k != SIZE_MAX)
                (*counts)[k]++;
        }
    }
    return 0;
}

static void add_member(meta_partition *p, uint64_t node, meta_role role)
{
    uint32_t at = 0;
    while (at < p->n_members && p->members[at].node < node)
        at++;
    memmove(&p->members[at + 1], &p->members[at], (p->n_members - at) * sizeof(meta_replica));
    p->members[at] = (meta_replica){.node = node, .role = role};
    p->n_members++;
}

static void drop_member(meta_partition *p, uint64_t node)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < p->n_members; i++)
        if (p->members[i].node != node)
            p->members[w++] = p->members[i];
    p->n_members = w;
    if (p->leader_hint == node)
        p->leader_hint = 0;
}

/* Runs the steps of move from -> to on *p, checking each; true (and *p updated) if all
 * steps keep the rules. */
static bool try_move(const meta_state *s, meta_partition *p, uint64_t from, uint64_t to)
{
    meta_role role;
    if (!meta_partition_has(p, from, &role) || meta_partition_has(p, to, NULL) ||
        p->n_members >= META_MAX_MEMBERS)
        return false;
    meta_partition q = *p;
    add_member(&q, to, META_LEARNER);
    if (meta_partition_check(s, &q, NULL))
        return false;
    if (role == META_VOTER) {
        for (uint32_t i = 0; i < q.n_members; i++)
            if (q.members[i].node == to)
                q.members[i].role = META_VOTER;
        if (meta_partition_check(s, &q, NULL))
            return false;
    }
    drop_member(&q, from);
    if (meta_partition_check(s, &q, NULL))
        return false;
    *p = q;
    return true;
}

/* ------------------------------------------------------------------ new table */

int placement_new_table(const meta_state *s, uint32_t table_id, size_t n, uint64_t first_id,
                        meta_partition *out, strata_err *err)
{
    if (n == 0 || n > META_MAX_TABLE_PARTS)
        return strata_err_set(err, ERR_VALIDATION, "a table needs 1..%d partitions",
                              META_MAX_TABLE_PARTS);
    size_t nn = meta_node_count(s);
    size_t *counts = calloc(nn + 1, sizeof(size_t));
    size_t *leads = calloc(nn + 1, sizeof(size_t));
    size_t *az_of = calloc(nn + 1, sizeof(size_t));    /* node index -> AZ index */
    size_t *az_first = calloc(nn + 1, sizeof(size_t)); /* AZ index -> a node index */
    size_t *az_load = calloc(nn + 1, sizeof(size_t));
    size_t *az_nodes = calloc(nn + 1, sizeof(size_t));
    size_t *order = calloc(nn + 1, sizeof(size_t));
    int rc = -1;
    if (!counts || !leads || !az_of || !az_first || !az_load || !az_nodes || !order) {
        strata_err_set(err, ERR_NOMEM, "placement: out of memory");
        goto done;
    }
    for (size_t i = 0; i < meta_partition_count(s); i++) {
        const meta_partition *p = meta_partition_at(s, i);
        for (uint32_t m = 0; m < p->n_members; m++)
            counts[meta_node_index(s, p->members[m].node)]++;
        if (p->leader_hint && meta_node_index(s, p->leader_hint) != SIZE_MAX)
            leads[meta_node_index(s, p->leader_hint)]++;
    }
    size_t n_az = 0;
    for (size_t i = 0; i < nn; i++) {
        if (!is_active(s, i))
            continue;
        size_t a = 0;
        while (a < n_az && strcmp(meta_node_at(s, az_first[a])->az, meta_node_at(s, i)->az))
            a++;
        if (a == n_az)
            az_first[n_az++] = i;
        az_of[i] = a;
        az_nodes[a]++;
        az_load[a] += counts[i];
    }
    if (n_az < META_REPLICAS) {
        strata_err_set(err, ERR_VALIDATION, "placement needs ACTIVE nodes in %d AZs (%zu)",
                       META_REPLICAS, n_az);
        goto done;
    }
    uint64_t width = UINT64_MAX / n;
    for (size_t k = 0; k < n; k++) {
        /* AZs by load per node (cross-multiplied), then by name. */
        for (size_t a = 0; a < n_az; a++)
            order[a] = a;
        for (size_t a = 1; a < n_az; a++) {
            size_t x = order[a], b = a;
            while (b > 0) {
                size_t y = order[b - 1];
                unsigned __int128 lx = (unsigned __int128)az_load[x] * az_nodes[y];
                unsigned __int128 ly = (unsigned __int128)az_load[y] * az_nodes[x];
                if (lx > ly || (lx == ly && strcmp(meta_node_at(s, az_first[x])->az,
                                                   meta_node_at(s, az_first[y])->az) > 0))
                    break;
                order[b] = y;
                b--;
            }
            order[b] = x;
        }
        meta_partition *p = &out[k];
        memset(p, 0, sizeof(*p));
        p->id = first_id + k;
        p->table_id = table_id;
        p->hash_lo = k * width;
        p->hash_hi = k + 1 == n ? UINT64_MAX : (k + 1) * width - 1;
        p->epoch = 1;
        size_t picked[META_REPLICAS];
        size_t n_picked = 0;
        for (size_t oa = 0; oa < n_az && n_picked < META_REPLICAS; oa++) {
            size_t best = SIZE_MAX;
            for (size_t i = 0; i < nn; i++) {
                if (!is_active(s, i) || az_of[i] != order[oa])
                    continue;
                bool host_used = false;
                for (size_t j = 0; j < n_picked; j++)
                    host_used |=
                        !strcmp(meta_node_at(s, picked[j])->host, meta_node_at(s, i)->host);
                if (!host_used && (best == SIZE_MAX || counts[i] < counts[best]))
                    best = i;
            }
            if (best != SIZE_MAX)
                picked[n_picked++] = best;
        }
        if (n_picked < META_REPLICAS) {
            strata_err_set(err, ERR_VALIDATION, "no 3 AZs with host-distinct ACTIVE nodes");
            goto done;
        }
        size_t leader = picked[0];
        for (size_t j = 0; j < n_picked; j++) {
            size_t i = picked[j];
            counts[i]++;
            az_load[az_of[i]]++;
            add_member(p, meta_node_at(s, i)->id, META_VOTER);
            if (leads[i] < leads[leader] || (leads[i] == leads[leader] && i < leader))
                leader = i;
        }
        leads[leader]++;
        p->leader_hint = meta_node_at(s, leader)->id;
    }
    rc = 0;
done:
    free(counts);
    free(leads);
    free(az_of);
    free(az_first);
    free(az_load);
    free(az_nodes);
    free(order);
    return rc;
}

/* ------------------------------------------------------------------ leaders */

static bool can_lead(const meta_state *s, const meta_partition *p, uint64_t node)
{
    meta_role role;
    const meta_node *n = meta_node_find(s, node);
    return n && n->state == META_NODE_ACTIVE && meta_partition_has(p, node, &role) &&
           role == META_VOTER;
}

/* One improving chain: from some node u to a node v with leads[v] + 2 <= leads[u], moving
 * one leadership along each partition of the path. Returns false when none exists. */
static bool shift_one_leader(const meta_state *s, meta_partition *sim, size_t np, size_t *leads,
                             size_t *prev_node, size_t *prev_part, bool *seen, size_t *queue)
{
    size_t nn = meta_node_count(s);
    for (size_t u = 0; u < nn; u++) {
        if (!is_active(s, u) || leads[u] < 2)
            continue;
        memset(seen, 0, nn * sizeof(bool));
        size_t qh = 0, qt = 0, best = SIZE_MAX;
        queue[qt++] = u;
        seen[u] = true;
        while (qh < qt) {
            size_t x = queue[qh++];
            uint64_t xid = meta_node_at(s, x)->id;
            for (size_t pi = 0; pi < np; pi++) {
                if (sim[pi].leader_hint != xid)
                    continue;
                for (uint32_t m = 0; m < sim[pi].n_members; m++) {
                    uint64_t yid = sim[pi].members[m].node;
                    size_t y = meta_node_index(s, yid);
                    if (y == SIZE_MAX || seen[y] || !can_lead(s, &sim[pi], yid))
                        continue;
                    seen[y] = true;
                    prev_node[y] = x;
                    prev_part[y] = pi;
                    queue[qt++] = y;
                    if (leads[y] + 2 <= leads[u] && (best == SIZE_MAX || leads[y] < leads[best]))
                        best = y;
                }
            }
        }
        if (best == SIZE_MAX)
            continue;
        leads[u]--;
        leads[best]++;
        for (size_t y = best; y != u; y = prev_node[y])
            sim[prev_part[y]].leader_hint = meta_node_at(s, y)->id;
        return true;
    }
    return false;
}

/* Starts a plan of hint changes: no changes yet, *sim a copy of the partition map. */
static int hint_plan_init(const meta_state *s, meta_partition **sim, placement_leader **out,
                          size_t *n, strata_err *err)
{
    size_t *counts;
    *out = NULL;
    *n = 0;
    if (sim_init(s, sim, &counts, err))
        return -1;
    free(counts);
    return 0;
}

/* The hints of `sim` that differ from s's and are not 0, in partition order (*out heap). */
static int hint_changes(const meta_state *s, const meta_partition *sim, placement_leader **out,
                        size_t *n, strata_err *err)
{
    size_t np = meta_partition_count(s), changed = 0;
    for (size_t pi = 0; pi < np; pi++)
        changed += sim[pi].leader_hint != meta_partition_at(s, pi)->leader_hint &&
                   sim[pi].leader_hint != 0;
    placement_leader *res = malloc((changed ? changed : 1) * sizeof(*res));
    if (res == NULL)
        return strata_err_set(err, ERR_NOMEM, "placement: out of memory");
    for (size_t pi = 0; pi < np; pi++)
        if (sim[pi].leader_hint != meta_partition_at(s, pi)->leader_hint && sim[pi].leader_hint)
            res[(*n)++] = (placement_leader){sim[pi].id, sim[pi].leader_hint};
    *out = res;
    return 0;
}

/* Hints that must move (0, or a node that cannot lead) go to the voter that can lead
 * with the fewest hints; with `balance`, chains of moves then even out the counts. */
static int plan_leaders(const meta_state *s, bool balance, placement_leader **out, size_t *n,
                        strata_err *err)
{
    meta_partition *sim;
    if (hint_plan_init(s, &sim, out, n, err))
        return -1;
    size_t nn = meta_node_count(s), np = meta_partition_count(s);
    size_t *leads = calloc(nn + 1, sizeof(size_t));
    size_t *prev_node = calloc(nn + 1, sizeof(size_t));
    size_t *prev_part = calloc(nn + 1, sizeof(size_t));
    size_t *queue = calloc(nn + 1, sizeof(size_t));
    bool *seen = calloc(nn + 1, sizeof(bool));
    int rc = -1;
    if (!leads || !prev_node || !prev_part || !queue || !seen) {
        strata_err_set(err, ERR_NOMEM, "placement: out of memory");
        goto done;
    }
    for (size_t pi = 0; pi < np; pi++) {
        meta_partition *p = &sim[pi];
        if (p->leader_hint && can_lead(s, p, p->leader_hint)) {
            leads[meta_node_index(s, p->leader_hint)]++;
            continue;
        }
        size_t best = SIZE_MAX;
        for (uint32_t m = 0; m < p->n_members; m++) {
            size_t i = meta_node_index(s, p->members[m].node);
            if (can_lead(s, p, p->members[m].node) && (best == SIZE_MAX || leads[i] < leads[best]))
                best = i;
        }
        p->leader_hint = best == SIZE_MAX ? 0 : meta_node_at(s, best)->id;
        if (best != SIZE_MAX)
            leads[best]++;
    }
    /* Each shift lowers the sum of squared leader counts, so this ends. */
    while (balance && shift_one_leader(s, sim, np, leads, prev_node, prev_part, seen, queue))
        ;
    rc = hint_changes(s, sim, out, n, err);
done:
    free(sim);
    free(leads);
    free(prev_node);
    free(prev_part);
    free(queue);
    free(seen);
    return rc;
}

int placement_leaders(const meta_state *s, placement_leader **out, size_t *n, strata_err *err)
{
    return plan_leaders(s, true, out, n, err);
}

int placement_leaders_fix(const meta_state *s, placement_leader **out, size_t *n, strata_err *err)
{
    return plan_leaders(s, false, out, n, err);
}

/* ------------------------------------------------------------------ leader load */

/* One candidate step of placement_leaders_load: p (led by h) goes to v and, for a swap,
 * q (led by v) comes to h. */
typedef struct {
    size_t p, q;  /* partition indexes; q == SIZE_MAX: a single move */
    size_t v;     /* node index */
    uint64_t d;   /* load moved from h to v */
    uint64_t top; /* the larger of the pair's loads afterwards: smaller is better */
} load_step;

typedef struct {
    const meta_state *s;
    meta_partition *sim;
    const uint64_t *pload; /* by partition index */
    uint64_t *nload;       /* by node index, ACTIVE nodes only */
    size_t *leads;         /* by node index, ACTIVE nodes only */
    uint64_t min_gain;     /* a step lowers the hot node's load at least this much */
} load_plan;

/* The node index of p's hint when that hint may lead, else SIZE_MAX. */
static size_t led_by(const load_plan *lp, size_t pi)
{
    const meta_partition *p = &lp->sim[pi];
    if (p->leader_hint == 0 || !can_lead(lp->s, p, p->leader_hint))
        return SIZE_MAX;
    return meta_node_index(lp->s, p->leader_hint);
}

/* Whether `c` beats `best` (see placement.h: lower top, then single moves, then ids). */
static bool step_better(const load_step *c, const load_step *best)
{
    if (best->p == SIZE_MAX || c->top != best->top)
        return best->p == SIZE_MAX || c->top < best->top;
    bool c_single = c->q == SIZE_MAX, b_single = best->q == SIZE_MAX;
    if (c_single != b_single)
        return c_single;
    if (c->p != best->p)
        return c->p < best->p;
    return c->q < best->q;
}

/* Offers the step moving d from h to v if it narrows the pair's gap with d at most 2/3
 * of it and gains at least min_gain (placement.h). */
static void consider(const load_plan *lp, size_t h, load_step c, load_step *best)
{
    uint64_t lh = lp->nload[h], lv = lp->nload[c.v];
    if (c.d == 0 || lv >= lh || (unsigned __int128)c.d * 3 > (unsigned __int128)(lh - lv) * 2)
        return;
    c.top = lh - c.d > lv + c.d ? lh - c.d : lv + c.d;
    if (lh - c.top < lp->min_gain)
        return;
    if (step_better(&c, best))
        *best = c;
}

/* The best step relieving node h (best.p == SIZE_MAX: none); swaps only when `swaps`. */
static load_step best_step(const load_plan *lp, size_t h, bool swaps)
{
    const meta_state *s = lp->s;
    size_t np = meta_partition_count(s);
    uint64_t hid = meta_node_at(s, h)->id;
    load_step best = {.p = SIZE_MAX, .q = SIZE_MAX};
    for (size_t pi = 0; pi < np; pi++) {
        if (led_by(lp, pi) != h)
            continue;
        const meta_partition *p = &lp->sim[pi];
        for (uint32_t m = 0; m < p->n_members; m++) {
            uint64_t vid = p->members[m].node;
            size_t v = meta_node_index(s, vid);
            if (vid == hid || v == SIZE_MAX || !can_lead(s, p, vid))
                continue;
            if (lp->leads[v] < lp->leads[h])
                consider(lp, h, (load_step){.p = pi, .q = SIZE_MAX, .v = v, .d = lp->pload[pi]},
                         &best);
            for (size_t qi = 0; swaps && qi < np; qi++) {
                if (led_by(lp, qi) != v || lp->pload[qi] >= lp->pload[pi] ||
                    !can_lead(s, &lp->sim[qi], hid))
                    continue;
                consider(lp, h,
                         (load_step){.p = pi, .q = qi, .v = v, .d = lp->pload[pi] - lp->pload[qi]},
                         &best);
            }
        }
    }
    return best;
}

/* Hottest and coolest ACTIVE nodes of AZ `az` (NULL: any; ties: lowest index); false
 * with fewer than two. */
static bool load_extremes(const load_plan *lp, const char *az, size_t *hot, size_t *cool,
                          uint64_t *total, size_t *n_active)
{
    *hot = *cool = SIZE_MAX;
    *total = 0;
    *n_active = 0;
    for (size_t i = 0; i < meta_node_count(lp->s); i++) {
        if (!is_active(lp->s, i) || (az != NULL && strcmp(meta_node_at(lp->s, i)->az, az)))
            continue;
        (*n_active)++;
        *total += lp->nload[i];
        if (*hot == SIZE_MAX || lp->nload[i] > lp->nload[*hot])
            *hot = i;
        if (*cool == SIZE_MAX || lp->nload[i] < lp->nload[*cool])
            *cool = i;
    }
    return *n_active >= 2;
}

/* Whether the load is uneven enough to act on (placement_load_opts); sets the least
 * gain of a step, a quarter of the threshold. */
static bool load_uneven(load_plan *lp, const placement_load_opts *o, const char *az, size_t *hot)
{
    size_t cool, n_active;
    uint64_t total;
    if (!load_extremes(lp, az, hot, &cool, &total, &n_active))
        return false;
    uint64_t gap = lp->nload[*hot] - lp->nload[cool];
    unsigned __int128 rel = (unsigned __int128)(total / n_active) * o->gap_percent / 100;
    uint64_t threshold = rel > o->min_gap ? (uint64_t)rel : o->min_gap;
    lp->min_gain = threshold / 4;
    return gap > threshold;
}

int placement_leaders_load(const meta_state *s, placement_load_fn load, void *ctx,
                           const placement_load_opts *o, placement_leader **out, size_t *n,
                           strata_err *err)
{
    meta_partition *sim;
    if (hint_plan_init(s, &sim, out, n, err))
        return -1;
    size_t nn = meta_node_count(s), np = meta_partition_count(s);
    load_plan lp = {.s = s, .sim = sim};
    uint64_t *pload = calloc(np + 1, sizeof(uint64_t));
    lp.nload = calloc(nn + 1, sizeof(uint64_t));
    lp.leads = calloc(nn + 1, sizeof(size_t));
    int rc = -1;
    if (!pload || !lp.nload || !lp.leads) {
        strata_err_set(err, ERR_NOMEM, "placement: out of memory");
        goto done;
    }
    lp.pload = pload;
    for (size_t pi = 0; pi < np; pi++) {
        pload[pi] = load(ctx, sim[pi].id);
        size_t h = led_by(&lp, pi);
        if (h == SIZE_MAX)
            continue;
        lp.leads[h]++;
        /* Saturating: loads near UINT64_MAX only make that node the hottest. */
        lp.nload[h] = lp.nload[h] > UINT64_MAX - pload[pi] ? UINT64_MAX : lp.nload[h] + pload[pi];
    }
    size_t steps = 0, h;
    while (steps < o->max_changes && load_uneven(&lp, o, NULL, &h)) {
        load_step st = best_step(&lp, h, steps + 2 <= o->max_changes);
        if (st.p == SIZE_MAX)
            break;
        size_t v = st.v;
        sim[st.p].leader_hint = meta_node_at(s, v)->id;
        if (st.q != SIZE_MAX) {
            sim[st.q].leader_hint = meta_node_at(s, h)->id;
            steps++;
        } else {
            lp.leads[h]--;
            lp.leads[v]++;
        }
        steps++;
        lp.nload[h] -= st.d;
        lp.nload[v] += st.d;
    }
    rc = hint_changes(s, sim, out, n, err);
done:
    free(sim);
    free(pload);
    free(lp.nload);
    free(lp.leads);
    return rc;
}

/* ------------------------------------------------------------------ replica load */

/* Three voters, no learner: a partition a move may start on (as the scheduler requires). */
static bool settled(const meta_partition *p)
{
    return p->n_members == META_REPLICAS && meta_partition_voters(p) == META_REPLICAS;
}

/* Whether partition pi may give its replica on node `from` to node `to` of the same AZ in
 * this plan: settled, not moved yet, `from` not its leader, and the move legal (*after:
 * the partition once moved). */
static bool replica_movable(const load_plan *lp, const bool *moved, size_t pi, uint64_t from,
                            uint64_t to, meta_partition *after)
{
    const meta_partition *p = &lp->sim[pi];
    if (moved[pi] || !settled(p) || p->leader_hint == from || !meta_partition_has(p, from, NULL))
        return false;
    *after = *p;
    return try_move(lp->s, after, from, to);
}

/* The best replica step off node h to another ACTIVE node of its AZ (best.p == SIZE_MAX:
 * none); swaps only when `swaps`. */
static load_step best_replica_step(const load_plan *lp, const size_t *counts, const bool *moved,
                                   size_t h, bool swaps)
{
    const meta_state *s = lp->s;
    size_t np = meta_partition_count(s), nn = meta_node_count(s);
    const meta_node *nh = meta_node_at(s, h);
    load_step best = {.p = SIZE_MAX, .q = SIZE_MAX};
    meta_partition after;
    for (size_t pi = 0; pi < np; pi++) {
        for (size_t v = 0; v < nn; v++) {
            const meta_node *nv = meta_node_at(s, v);
            if (v == h || !is_active(s, v) || strcmp(nv->az, nh->az) ||
                !replica_movable(lp, moved, pi, nh->id, nv->id, &after))
                continue;
            if (counts[v] < counts[h])
                consider(lp, h, (load_step){.p = pi, .q = SIZE_MAX, .v = v, .d = lp->pload[pi]},
                         &best);
            for (size_t qi = 0; swaps && qi < np; qi++)
                if (qi != pi && lp->pload[qi] < lp->pload[pi] &&
                    replica_movable(lp, moved, qi, nv->id, nh->id, &after))
                    consider(
                        lp, h,
                        (load_step){.p = pi, .q = qi, .v = v, .d = lp->pload[pi] - lp->pload[qi]},
                        &best);
        }
    }
    return best;
}

/* The next replica step of the plan (appended to *l), in the first AZ that is uneven and
 * has one; false when none. */
static bool replica_load_step(load_plan *lp, const placement_load_opts *o, size_t *counts,
                              bool *moved, bool swaps, move_list *l, bool *failed, strata_err *err)
{
    const meta_state *s = lp->s;
    for (size_t a = 0; a < meta_node_count(s); a++) {
        const char *az = meta_node_at(s, a)->az;
        bool first = true; /* each AZ once: at its first node */
        for (size_t b = 0; b < a && first; b++)
            first = strcmp(meta_node_at(s, b)->az, az) != 0;
        size_t h;
        if (!first || !load_uneven(lp, o, az, &h))
            continue;
        load_step st = best_replica_step(lp, counts, moved, h, swaps);
        if (st.p == SIZE_MAX)
            continue;
        uint64_t hid = meta_node_at(s, h)->id, vid = meta_node_at(s, st.v)->id;
        try_move(s, &lp->sim[st.p], hid, vid);
        moved[st.p] = true;
        *failed = push_move(l, (placement_move){lp->sim[st.p].id, hid, vid, true}, err) != 0;
        if (st.q != SIZE_MAX) {
            try_move(s, &lp->sim[st.q], vid, hid);
            moved[st.q] = true;
            *failed |= push_move(l, (placement_move){lp->sim[st.q].id, vid, hid, true}, err) != 0;
        } else {
            counts[h]--;
            counts[st.v]++;
        }
        lp->nload[h] -= st.d;
        lp->nload[st.v] += st.d;
        return !*failed;
    }
    return false;
}

int placement_rebalance_load(const meta_state *s, placement_load_fn load, void *ctx,
                             const placement_load_opts *o, placement_move **out, size_t *n,
                             strata_err *err)
{
    *out = NULL;
    *n = 0;
    meta_partition *sim;
    size_t *counts;
    if (sim_init(s, &sim, &counts, err))
        return -1;
    size_t nn = meta_node_count(s), np = meta_partition_count(s);
    load_plan lp = {.s = s, .sim = sim};
    uint64_t *pload = calloc(np + 1, sizeof(uint64_t));
    bool *moved = calloc(np + 1, sizeof(bool));
    lp.nload = calloc(nn + 1, sizeof(uint64_t));
    move_list l = {0};
    bool failed = !pload || !moved || !lp.nload;
    if (failed) {
        strata_err_set(err, ERR_NOMEM, "placement: out of memory");
        goto done;
    }
    lp.pload = pload;
    for (size_t pi = 0; pi < np; pi++) {
        pload[pi] = load(ctx, sim[pi].id);
        for (uint32_t m = 0; m < sim[pi].n_members; m++) {
            size_t i = meta_node_index(s, sim[pi].members[m].node);
            if (i != SIZE_MAX)
                lp.nload[i] =
                    lp.nload[i] > UINT64_MAX - pload[pi] ? UINT64_MAX : lp.nload[i] + pload[pi];
        }
    }
    while (l.n < o->max_changes &&
           replica_load_step(&lp, o, counts, moved, l.n + 2 <= o->max_changes, &l, &failed, err))
        ;
done:
    free(sim);
    free(counts);
    free(pload);
    free(moved);
    free(lp.nload);
    if (failed) {
        free(l.v);
        return -1;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

/* ------------------------------------------------------------------ moves */

/* Moves every replica off the nodes marked in `evac` (by node index). */
static int evacuate(const meta_state *s, const bool *evac, placement_move **out, size_t *n,
                    strata_err *err)
{
    *out = NULL;
    *n = 0;
    meta_partition *sim;
    size_t *counts;
    if (sim_init(s, &sim, &counts, err))
        return -1;
    move_list l = {0};
    size_t nn = meta_node_count(s), np = meta_partition_count(s);
    int rc = 0;
    for (size_t pi = 0; pi < np && rc == 0; pi++) {
        meta_replica before[META_MAX_MEMBERS];
        uint32_t nb = sim[pi].n_members;
        memcpy(before, sim[pi].members, sizeof(before));
        for (uint32_t m = 0; m < nb && rc == 0; m++) {
            size_t f = meta_node_index(s, before[m].node);
            if (f == SIZE_MAX || !evac[f])
                continue;
            const char *from_az = meta_node_at(s, f)->az;
            size_t best = SIZE_MAX;
            meta_partition best_p = sim[pi];
            for (size_t t = 0; t < nn; t++) {
                if (!is_active(s, t) || evac[t])
                    continue;
                meta_partition q = sim[pi];
                if (!try_move(s, &q, before[m].node, meta_node_at(s, t)->id))
                    continue;
                bool same = !strcmp(meta_node_at(s, t)->az, from_az);
                bool best_same = best != SIZE_MAX && !strcmp(meta_node_at(s, best)->az, from_az);
                if (best == SIZE_MAX || (same && !best_same) ||
                    (same == best_same && counts[t] < counts[best])) {
                    best = t;
                    best_p = q;
                }
            }
            if (best == SIZE_MAX) {
                rc = strata_err_set(err, ERR_VALIDATION,
                                    "no ACTIVE node can take partition "
                                    "%llu's replica from node %llu without breaking the AZ "
                                    "or host rules",
                                    (unsigned long long)sim[pi].id,
                                    (unsigned long long)before[m].node);
                break;
            }
            rc = push_move(&l,
                           (placement_move){sim[pi].id, before[m].node, meta_node_at(s, best)->id,
                                            before[m].role == META_VOTER},
                           err);
            sim[pi] = best_p;
            counts[best]++;
            counts[f]--;
        }
    }
    free(sim);
    free(counts);
    if (rc) {
        free(l.v);
        return -1;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

int placement_drain(const meta_state *s, uint64_t node, placement_move **out, size_t *n,
                    strata_err *err)
{
    size_t i = meta_node_index(s, node);
    if (i == SIZE_MAX)
        return strata_err_set(err, ERR_NOT_FOUND, "node %llu is unknown", (unsigned long long)node);
    bool *evac = calloc(meta_node_count(s), sizeof(bool));
    if (evac == NULL)
        return strata_err_set(err, ERR_NOMEM, "placement: out of memory");
    evac[i] = true;
    int rc = evacuate(s, evac, out, n, err);
    free(evac);
    return rc;
}

int placement_replace_down(const meta_state *s, uint64_t now_ms, uint64_t deadline_ms,
                           placement_move **out, size_t *n, strata_err *err)
{
    size_t nn = meta_node_count(s);
    bool *evac = calloc(nn + 1, sizeof(bool));
    if (evac == NULL)
        return strata_err_set(err, ERR_NOMEM, "placement: out of memory");
    for (size_t i = 0; i < nn; i++) {
        const meta_node *nd = meta_node_at(s, i);
        evac[i] = nd->state == META_NODE_DOWN && now_ms >= nd->state_since_ms &&
                  now_ms - nd->state_since_ms >= deadline_ms;
    }
    int rc = evacuate(s, evac, out, n, err);
    free(evac);
    return rc;
}

/* One move from the fullest possible node to the emptiest possible one. */
static bool rebalance_one(const meta_state *s, meta_partition *sim, size_t *counts,
                          placement_move *mv)
{
    size_t nn = meta_node_count(s), np = meta_partition_count(s);
    /* Receivers by ascending count; donors by descending count (ties: lowest index). */
    for (size_t c = 0;; c++) {
        bool any_at_or_above = false;
        for (size_t u = 0; u < nn; u++) {
            if (!is_active(s, u))
                continue;
            if (counts[u] >= c)
                any_at_or_above = true;
            if (counts[u] != c)
                continue;
            for (size_t d = SIZE_MAX;;) {
                /* next donor below d in (count desc, index asc) order */
                size_t next = SIZE_MAX;
                for (size_t o = 0; o < nn; o++) {
                    if (!is_active(s, o) || counts[o] < c + 2)
                        continue;
                    bool after_d =
                        d == SIZE_MAX || counts[o] < counts[d] || (counts[o] == counts[d] && o > d);
                    bool before_next = next == SIZE_MAX || counts[o] > counts[next] ||
                                       (counts[o] == counts[next] && o < next);
                    if (after_d && before_next)
                        next = o;
                }
                if (next == SIZE_MAX)
                    break;
                d = next;
                uint64_t from = meta_node_at(s, d)->id, to = meta_node_at(s, u)->id;
                for (size_t pi = 0; pi < np; pi++) {
                    meta_role role;
                    if (!meta_partition_has(&sim[pi], from, &role))
                        continue;
                    meta_partition q = sim[pi];
                    if (!try_move(s, &q, from, to))
                        continue;
                    *mv = (placement_move){q.id, from, to, role == META_VOTER};
                    sim[pi] = q;
                    counts[d]--;
                    counts[u]++;
                    return true;
                }
            }
        }
        if (!any_at_or_above)
            return false;
    }
}

/* Moves the first replica of `from` that can legally go to `to` (in sim). */
static bool move_any(const meta_state *s, meta_partition *sim, size_t *counts, size_t from_i,
                     size_t to_i, placement_move *mv)
{
    uint64_t from = meta_node_at(s, from_i)->id, to = meta_node_at(s, to_i)->id;
    for (size_t pi = 0; pi < meta_partition_count(s); pi++) {
        meta_role role;
        if (!meta_partition_has(&sim[pi], from, &role))
            continue;
        meta_partition q = sim[pi];
        if (!try_move(s, &q, from, to))
            continue;
        *mv = (placement_move){q.id, from, to, role == META_VOTER};
        sim[pi] = q;
        counts[from_i]--;
        counts[to_i]++;
        return true;
    }
    return false;
}

/* Two nodes of one AZ on one host cannot pass a replica directly (the learner would
 * share the host with its source), so the replica goes donor -> w and another one
 * w -> receiver, through a node w of the same AZ on another host. */
static bool rebalance_chain(const meta_state *s, meta_partition *sim, size_t *counts,
                            placement_move mv[2])
{
    size_t nn = meta_node_count(s);
    for (size_t u = 0; u < nn; u++) {
        const meta_node *nu = meta_node_at(s, u);
        if (!is_active(s, u))
            continue;
        for (size_t o = 0; o < nn; o++) {
            const meta_node *no = meta_node_at(s, o);
            if (!is_active(s, o) || counts[o] < counts[u] + 2 || strcmp(no->az, nu->az) ||
                strcmp(no->host, nu->host))
                continue;
            for (size_t w = 0; w < nn; w++) {
                const meta_node *nw = meta_node_at(s, w);
                if (!is_active(s, w) || strcmp(nw->az, nu->az) || !strcmp(nw->host, nu->host))
                    continue;
                size_t saved_o = counts[o], saved_w = counts[w];
                meta_partition *copy = malloc(meta_partition_count(s) * sizeof(*copy) + 1);
                if (copy == NULL)
                    return false;
                memcpy(copy, sim, meta_partition_count(s) * sizeof(*copy));
                if (move_any(s, sim, counts, o, w, &mv[0])) {
                    if (move_any(s, sim, counts, w, u, &mv[1])) {
                        free(copy);
                        return true;
                    }
                    memcpy(sim, copy, meta_partition_count(s) * sizeof(*copy));
                    counts[o] = saved_o;
                    counts[w] = saved_w;
                }
                free(copy);
            }
        }
    }
    return false;
}

int placement_rebalance(const meta_state *s, placement_move **out, size_t *n, strata_err *err)
{
    *out = NULL;
    *n = 0;
    meta_partition *sim;
    size_t *counts;
    if (sim_init(s, &sim, &counts, err))
        return -1;
    move_list l = {0};
    placement_move mv;
    int rc = 0;
    placement_move pair[2];
    /* Each move (or chain of two) lowers the sum of squared counts, so this ends. */
    for (;;) {
        if (rebalance_one(s, sim, counts, &mv)) {
            rc = push_move(&l, mv, err);
        } else if (rebalance_chain(s, sim, counts, pair)) {
            rc = push_move(&l, pair[0], err);
            if (rc == 0)
                rc = push_move(&l, pair[1], err);
        } else {
            break;
        }
        if (rc)
            break;
    }
    free(sim);
    free(counts);
    if (rc) {
        free(l.v);
        return -1;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

bool placement_move_ready(const meta_state *s, const placement_move *m)
{
    const meta_partition *p = meta_partition_find(s, m->partition_id);
    const meta_node *to = meta_node_find(s, m->to);
    meta_role role;
    if (p == NULL || to == NULL || to->state != META_NODE_ACTIVE || !settled(p) ||
        !meta_partition_has(p, m->from, &role) || role != META_VOTER || p->leader_hint == m->from)
        return false;
    meta_partition after = *p;
    return try_move(s, &after, m->from, m->to); /* also: `to` not a member */
}

placement_move_state placement_move_progress(const meta_state *s, const placement_move *m)
{
    const meta_partition *p = meta_partition_find(s, m->partition_id);
    if (p == NULL)
        return PLACEMENT_MOVE_UNDONE;
    if (!settled(p))
        return PLACEMENT_MOVE_RUNNING;
    return meta_partition_has(p, m->to, NULL) && !meta_partition_has(p, m->from, NULL)
               ? PLACEMENT_MOVE_DONE
               : PLACEMENT_MOVE_UNDONE;
}

/* Whether removing voter `node` from p keeps the rules. */
static bool removal_allowed(const meta_state *s, const meta_partition *p, uint64_t node)
{
    meta_role role;
    if (!meta_partition_has(p, node, &role) || role != META_VOTER)
        return false;
    meta_partition next = *p;
    drop_member(&next, node);
    return meta_partition_check(s, &next, NULL) == 0;
}

uint64_t placement_removal(const meta_state *s, const meta_partition *p, uint64_t prefer)
{
    if (prefer != 0 && removal_allowed(s, p, prefer))
        return prefer;
    uint64_t best = 0;
    size_t best_count = 0;
    for (uint32_t k = 0; k < p->n_members; k++) {
        uint64_t id = p->members[k].node;
        if (!removal_allowed(s, p, id))
            continue;
        const meta_node *n = meta_node_find(s, id);
        if (n != NULL && n->state != META_NODE_ACTIVE)
            return id; /* a draining, down or removed node's replica goes first */
        size_t count = 0;
        for (size_t i = 0; i < meta_partition_count(s); i++)
            count += meta_partition_has(meta_partition_at(s, i), id, NULL);
        if (count > best_count || (count == best_count && id > best)) {
            best = id;
            best_count = count;
        }
    }
    return best;
}

int placement_move_steps(const placement_move *m)
{
    return m->promote ? 3 : 2;
}

int placement_move_cmd(const meta_state *s, const placement_move *m, int step, meta_cmd *out,
                       strata_err *err)
{
    const meta_partition *p = meta_partition_find(s, m->partition_id);
    if (p == NULL)
        return strata_err_set(err, ERR_NOT_FOUND, "partition %llu does not exist",
                              (unsigned long long)m->partition_id);
    if (step < 0 || step >= placement_move_steps(m))
        return strata_err_set(err, ERR_VALIDATION, "move step %d out of range", step);
    memset(out, 0, sizeof(*out));
    out->partition_id = m->partition_id;
    out->epoch = p->epoch;
    if (step == 0) {
        out->kind = META_CMD_ADD_LEARNER;
        out->node_id = m->to;
    } else if (step == 1 && m->promote) {
        out->kind = META_CMD_PROMOTE;
        out->node_id = m->to;
    } else {
        out->kind = META_CMD_REMOVE_REPLICA;
        out->node_id = m->from;
    }
    return 0;
}

/* ------------------------------------------------------------ the meta group's seats */

bool placement_seat_leaving(const placement_seat_view *v, const meta_node *n)
{
    return n == NULL || n->state == META_NODE_DRAINING || n->state == META_NODE_REMOVED ||
           (n->state == META_NODE_DOWN && v->now_ms >= n->state_since_ms &&
            v->now_ms - n->state_since_ms >= v->replace_after_ms);
}

/* g with `node` as `role` (added, or its role changed) or, with role 0, without it;
 * members stay in node-id order. */
static meta_partition seat_change(const meta_partition *g, uint64_t node, meta_role role)
{
    meta_partition next = *g;
    uint32_t w = 0;
    for (uint32_t k = 0; k < g->n_members; k++)
        if (g->members[k].node != node)
            next.members[w++] = g->members[k];
    next.n_members = w;
    if (role != 0 && w < META_MAX_MEMBERS) {
        uint32_t at = 0;
        while (at < w && next.members[at].node < node)
            at++;
        memmove(&next.members[at + 1], &next.members[at], (w - at) * sizeof *next.members);
        next.members[at] = (meta_replica){.node = node, .role = role};
        next.n_members++;
    }
    return next;
}

static placement_seat_step seat_propose(placement_seat_reason why, uint64_t node,
                                        const meta_partition *next, uint64_t epoch, uint32_t seats)
{
    return (placement_seat_step){.action = PLACEMENT_SEAT_PROPOSE,
                                 .reason = why,
                                 .node = node,
                                 .next = *next,
                                 .epoch = epoch,
                                 .seats = seats};
}

/* The first record: the configuration as it stands, once every member is registered. */
static placement_seat_step seat_record_first(const meta_state *s, const meta_partition *config)
{
    placement_seat_step wait = {.action = PLACEMENT_SEAT_WAIT};
    meta_partition g = {0};
    uint32_t voters = 0;
    for (uint32_t k = 0; k < config->n_members; k++) {
        const meta_replica *m = &config->members[k];
        if (meta_node_find(s, m->node) == NULL)
            return wait;
        g = seat_change(&g, m->node, m->role);
        voters += m->role == META_VOTER;
    }
    if (voters == 0)
        return wait;
    return seat_propose(PLACEMENT_SEAT_RECORD, 0, &g, 0, voters >= 4 ? 5 : voters >= 2 ? 3 : 1);
}

bool placement_config_next(const meta_partition *g, meta_partition *config)
{
    for (uint32_t k = 0; k < g->n_members; k++) /* add */
        if (!meta_partition_has(config, g->members[k].node, NULL) &&
            config->n_members < META_MAX_MEMBERS) {
            config->members[config->n_members++] =
                (meta_replica){.node = g->members[k].node, .role = META_LEARNER};
            return true;
        }
    for (uint32_t k = 0; k < config->n_members; k++) { /* promote */
        meta_role role;
        if (config->members[k].role == META_LEARNER &&
            meta_partition_has(g, config->members[k].node, &role) && role == META_VOTER) {
            config->members[k].role = META_VOTER;
            return true;
        }
    }
    for (uint32_t k = 0; k < config->n_members; k++) /* remove */
        if (!meta_partition_has(g, config->members[k].node, NULL)) {
            memmove(&config->members[k], &config->members[k + 1],
                    (config->n_members - k - 1) * sizeof *config->members);
            config->n_members--;
            return true;
        }
    return false;
}

/* Whether the configuration still has to follow the map (the caller's changes first). */
static bool config_lags(const meta_partition *g, const meta_partition *config)
{
    meta_partition next = *config;
    return placement_config_next(g, &next);
}

/* The node that should take a seat (see placement.h), 0 if none. */
static uint64_t seat_candidate(const meta_state *s, const meta_partition *g,
                               const placement_seat_view *v)
{
    uint64_t best = 0;
    int best_score = -1;
    for (size_t i = 0; i < meta_node_count(s); i++) {
        const meta_node *nd = meta_node_at(s, i);
        if (nd->state != META_NODE_ACTIVE || !v->staying(v->ctx, nd->id) ||
            meta_partition_has(g, nd->id, NULL))
            continue;
        bool az_new = true, host_new = true;
        for (uint32_t k = 0; k < g->n_members; k++) {
            const meta_node *m = meta_node_find(s, g->members[k].node);
            if (g->members[k].role != META_VOTER || placement_seat_leaving(v, m))
                continue;
            az_new = az_new && strcmp(m->az, nd->az) != 0;
            host_new = host_new && strcmp(m->host, nd->host) != 0;
        }
        int score = 2 * az_new + host_new;
        if (score > best_score) {
            best = nd->id;
            best_score = score;
        }
    }
    return best;
}

/* A voter to take out when the group has one more than its seats and none is leaving:
 * another than the leader, one whose AZ another voter shares first, the highest id among
 * equals. */
static uint64_t seat_extra(const meta_state *s, const meta_partition *g, uint64_t self)
{
    uint64_t pick = 0;
    bool pick_shared = false;
    for (uint32_t k = 0; k < g->n_members; k++) {
        const meta_node *a = meta_node_find(s, g->members[k].node);
        if (a == NULL || a->id == self || g->members[k].role != META_VOTER)
            continue;
        bool shared = false;
        for (uint32_t j = 0; j < g->n_members && !shared; j++) {
            const meta_node *b = meta_node_find(s, g->members[j].node);
            shared = j != k && b != NULL && g->members[j].role == META_VOTER &&
                     strcmp(a->az, b->az) == 0;
        }
        if (shared || !pick_shared) {
            pick = a->id;
            pick_shared = shared;
        }
    }
    return pick;
}

/* Whether a voter other than the leader stays (can take the leadership over). */
static bool seat_successor(const meta_state *s, const meta_partition *g,
                           const placement_seat_view *v)
{
    for (uint32_t k = 0; k < g->n_members; k++) {
        uint64_t node = g->members[k].node;
        if (node != v->self && g->members[k].role == META_VOTER &&
            !placement_seat_leaving(v, meta_node_find(s, node)) && v->staying(v->ctx, node))
            return true;
    }
    return false;
}

placement_seat_step placement_meta_seats(const meta_state *s, const meta_partition *config,
                                         const placement_seat_view *v)
{
    placement_seat_step wait = {.action = PLACEMENT_SEAT_WAIT};
    const meta_partition *g = meta_group(s);
    if (g->n_members == 0)
        return seat_record_first(s, config);
    if (placement_seat_leaving(v, meta_node_find(s, v->self)) && seat_successor(s, g, v))
        return (placement_seat_step){.action = PLACEMENT_SEAT_HAND_OVER};
    if (config_lags(g, config))
        return wait;
    uint32_t seats = meta_group_seats(s);
    uint64_t leaving = 0;
    for (uint32_t k = 0; k < g->n_members; k++) {
        uint64_t node = g->members[k].node;
        const meta_node *nd = meta_node_find(s, node);
        if (g->members[k].role == META_LEARNER) {
            if (nd != NULL && nd->state == META_NODE_ACTIVE)
                return v->reachable(v->ctx, node)
                           ? (placement_seat_step){.action = PLACEMENT_SEAT_PROBE, .node = node}
                           : wait;
            meta_partition next = seat_change(g, node, 0);
            return seat_propose(PLACEMENT_SEAT_DROP, node, &next, g->epoch, seats);
        }
        if (leaving == 0 && node != v->self && placement_seat_leaving(v, nd))
            leaving = node;
    }
    uint32_t voters = meta_partition_voters(g);
    if (leaving == 0 && voters > seats)
        leaving = seat_extra(s, g, v->self); /* a leaving voter came back before its seat moved */
    if (leaving != 0 && voters > seats) {
        meta_partition next = seat_change(g, leaving, 0);
        return seat_propose(PLACEMENT_SEAT_GIVE_UP, leaving, &next, g->epoch, seats);
    }
    if (leaving == 0 && voters >= seats)
        return wait;
    uint64_t cand = seat_candidate(s, g, v);
    if (cand != 0 && g->n_members < META_MAX_MEMBERS) {
        meta_partition next = seat_change(g, cand, META_LEARNER);
        return seat_propose(PLACEMENT_SEAT_TAKE, cand, &next, g->epoch, seats);
    }
    const meta_node *ln = leaving != 0 ? meta_node_find(s, leaving) : NULL;
    if (ln != NULL && ln->state == META_NODE_REMOVED && voters > 1) {
        meta_partition next = seat_change(g, leaving, 0);
        return seat_propose(PLACEMENT_SEAT_SHRINK, leaving, &next, g->epoch, seats);
    }
    return wait;
}

placement_seat_step placement_seat_promote(const meta_state *s, uint64_t node, uint64_t epoch)
{
    const meta_partition *g = meta_group(s);
    meta_role role;
    if (g->epoch != epoch || !meta_partition_has(g, node, &role) || role != META_LEARNER)
        return (placement_seat_step){.action = PLACEMENT_SEAT_WAIT};
    meta_partition next = seat_change(g, node, META_VOTER);
    return seat_propose(PLACEMENT_SEAT_PROMOTE, node, &next, g->epoch, meta_group_seats(s));
}
