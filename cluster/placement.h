#ifndef STRATA_CLUSTER_PLACEMENT_H
#define STRATA_CLUSTER_PLACEMENT_H
/*
 * Placement: the meta leader's planner. Pure functions of a meta_state (cluster/meta.h)
 * that propose commands; they change nothing. Every plan obeys the rules meta_apply
 * enforces, at every step, when its steps are applied in order to the state it was
 * planned from.
 *
 *   - New partitions: 3 voters on ACTIVE nodes in 3 distinct AZs, never two on one host.
 *     AZs are chosen by the lowest replica load per node, nodes within an AZ by the lowest
 *     replica count (ties: lowest id), so replica counts within an AZ stay within 1 of
 *     each other (and across the cluster when AZs have equal numbers of nodes).
 *   - Leader hints: the replica with the fewest leader hints; placement_leaders then
 *     moves hints along chains of partitions until leader counts over ACTIVE nodes are
 *     within 1 (or no chain can improve them).
 *   - Leader load (placement_leaders_load): with per-partition loads, hints move (single
 *     moves or swaps between two nodes) so the most loaded ACTIVE node sheds load, leader
 *     counts staying as even as they were (within 1: the count balancer then has nothing
 *     to undo).
 *   - Replica load (placement_rebalance_load): the same within each AZ for replicas, by
 *     moves between nodes of one AZ (so only clusters with more nodes than AZs).
 *   - A move (partition, from, to) is three commands: ADD_LEARNER(to), PROMOTE(to) (only
 *     when `from` is a voter), REMOVE_REPLICA(from). Targets prefer `from`'s AZ, then the
 *     lowest replica count.
 *   - The meta group's seats (placement_meta_seats): one META_MEMBERS step at a time, a
 *     leaving voter's seat going to a node in an AZ the group lacks (see below).
 */
#include <stddef.h>
#include <stdint.h>

#include "cluster/meta.h"

typedef struct {
    uint64_t partition_id;
    uint64_t from;
    uint64_t to;
    bool promote; /* `from` is a voter: the learner is promoted before `from` leaves */
} placement_move;

typedef struct {
    uint64_t partition_id;
    uint64_t leader;
} placement_leader;

/* `n` partitions of table `table_id` with equal hash ranges (the last ending at
 * UINT64_MAX), ids first_id.., placed as above, written to out[0..n). ERR_VALIDATION
 * when fewer than 3 AZs (or no host-distinct choice) are available. */
int placement_new_table(const meta_state *s, uint32_t table_id, size_t n, uint64_t first_id,
                        meta_partition *out, strata_err *err);

/* Leader-hint changes that even out leaders over ACTIVE nodes (*out heap, free()). A hint
 * that is 0 or names a node that cannot lead (not ACTIVE: DRAINING, DOWN...) always
 * moves, to an ACTIVE voter (stays 0 if the partition has none). Apply the changes in
 * order: each is a META_CMD_SET_LEADER; only the whole list is balanced. */
int placement_leaders(const meta_state *s, placement_leader **out, size_t *n, strata_err *err);

/* Only the hints that must move (as above), each to the ACTIVE voter with the fewest
 * hints: what a drain needs before its replicas move, without any balancing shuffle. */
int placement_leaders_fix(const meta_state *s, placement_leader **out, size_t *n, strata_err *err);

/* Load-based leader balance. Loads are per partition, in any unit (the caller's: the
 * scheduler uses pstats.h's milli-units per second), and a node's load is the sum over
 * the partitions whose hint names it. */
typedef uint64_t (*placement_load_fn)(void *ctx, uint64_t partition_id);

typedef struct {
    uint64_t min_gap;     /* act only when hottest - coolest exceeds this (absolute) ... */
    unsigned gap_percent; /* ... and this percentage of the mean load per ACTIVE node */
    size_t max_changes;   /* hint changes per plan at most (a swap takes two) */
} placement_load_opts;

/*
 * Leader-hint changes (META_CMD_SET_LEADER each, *out heap, free()) that lower the load of
 * the most loaded ACTIVE node, or none. Only hints naming an ACTIVE voter are considered
 * and only ACTIVE voters get hints (hints that must move are placement_leaders_fix's).
 * While the hottest node h exceeds the coolest by more than the threshold of `o`, one
 * step moves load d from h to a node v (one of the partition's voters):
 *   - a swap: a partition p led by h goes to v and a partition q led by v, where h is a
 *     voter, comes to h (d = load(p) - load(q)); counts do not change; or
 *   - a move of p alone, when v leads fewer partitions than h (counts stay as even).
 * A step must satisfy 0 < d <= 2/3 (load(h) - load(v)): the pair ends closer than it
 * started, so the sum of squared node loads strictly falls and repeated plans on the same
 * loads settle; h sheds at least d/2 and at least a quarter of the threshold, so no step
 * moves a large load for a small gain nor shuffles small loads for nothing (with noisy
 * figures, hot partitions would wander between nodes). A skew made only of partitions
 * each lighter than that quarter is left alone. The step leaving the pair's larger load
 * smallest is taken (ties: single moves, then lower partition ids); planning stops when
 * the gap is within the threshold, no step relieves h, or max_changes would be exceeded.
 * The list holds the net changes, in partition order.
 */
int placement_leaders_load(const meta_state *s, placement_load_fn load, void *ctx,
                           const placement_load_opts *o, placement_leader **out, size_t *n,
                           strata_err *err);

/*
 * Replica moves (*out heap, free()) that even out replica load within each AZ: a node's
 * load is the sum of the loads of the partitions it holds a replica of (every replica
 * applies every write; the figure is the partition's). Same rules as
 * placement_leaders_load, per AZ (threshold against the AZ's mean): a step moves the
 * replica of a partition p from the AZ's hottest ACTIVE node h to an ACTIVE node v of the
 * same AZ, alone when v holds fewer replicas than h, or swapped with the replica of a
 * lighter partition q from v to h (two moves, counts unchanged). Only partitions with
 * three voters and no learner move, at most once per plan, never off the node their hint
 * names (leadership is placement_leaders_load's), and every move keeps the AZ and host
 * rules at every step (placement_move_cmd). max_changes counts moves. A cluster with one
 * node per AZ (three nodes) never gets any.
 */
int placement_rebalance_load(const meta_state *s, placement_load_fn load, void *ctx,
                             const placement_load_opts *o, placement_move **out, size_t *n,
                             strata_err *err);

/* Moves that take every replica off `node` (normally DRAINING). */
int placement_drain(const meta_state *s, uint64_t node, placement_move **out, size_t *n,
                    strata_err *err);

/* Moves that replace every replica on nodes DOWN for at least `deadline_ms` at now_ms. */
int placement_replace_down(const meta_state *s, uint64_t now_ms, uint64_t deadline_ms,
                           placement_move **out, size_t *n, strata_err *err);

/* Moves that even out replica counts over ACTIVE nodes (e.g. after a node joins): until
 * no move from a node with count >= c + 2 to a node with count c is allowed. Between two
 * nodes of one AZ on one host (no direct move is legal) a replica goes through a third
 * node of that AZ on another host. Counts within an AZ end within 1 unless the AZ's
 * nodes share a single host. */
int placement_rebalance(const meta_state *s, placement_move **out, size_t *n, strata_err *err);

/*
 * Carrying out a plan made earlier, one move at a time (the scheduler's replica moves by
 * load): the map may have changed since, so each move is checked again before it starts,
 * its progress is read from the map, and the removal of its extra voter takes its source.
 */

/* Whether move m can start now: its partition has exactly META_REPLICAS voters and no
 * learner, `from` is one of them and not its leader hint, `to` is ACTIVE and not a member,
 * and every step of the move keeps the rules on the current map. */
bool placement_move_ready(const meta_state *s, const placement_move *m);

typedef enum {
    PLACEMENT_MOVE_RUNNING = 1, /* a learner or an extra voter: steps remain */
    PLACEMENT_MOVE_DONE,        /* three voters, `to` among them and `from` not */
    PLACEMENT_MOVE_UNDONE,      /* three voters otherwise (a step was refused or another
                                   voter left), or the partition is gone */
} placement_move_state;

/* Where a started move stands in the map. */
placement_move_state placement_move_progress(const meta_state *s, const placement_move *m);

/* The voter to remove from partition p (more than META_REPLICAS voters, the move's
 * learner promoted), 0 when none may go. Only voters whose removal keeps the rules are
 * candidates; among them `prefer` (a planned move's source; 0: none), else a node that
 * is not ACTIVE (draining, down, removed), else the one on the node holding the most
 * replicas (ties: the highest id) -- the source of a count-balancing move. */
uint64_t placement_removal(const meta_state *s, const meta_partition *p, uint64_t prefer);

/* Number of commands of a move (2 or 3) and its step-th command (0-based), built
 * against the partition's current epoch in `s`: apply step i before building step i+1. */
int placement_move_steps(const placement_move *m);
int placement_move_cmd(const meta_state *s, const placement_move *m, int step, meta_cmd *out,
                       strata_err *err);

/*
 * The meta group's seats: the next step of the meta leader's scheduler. The map records
 * the group's members (meta_group) and how many voters it keeps (meta_group_seats: 1, 3
 * or 5); the Raft configuration follows the map one change at a time (the caller's), and
 * the map changes one META_MEMBERS command at a time, each planned here against the
 * configuration as committed:
 *   - Nothing recorded yet: the configuration is recorded as it stands (epoch 0), with
 *     seats for its voters (1; 2-3 -> 3; 4+ -> 5), once every member is registered.
 *   - The leader's own node gives its seat up: it hands leadership over first, to a
 *     voter that stays; while none does (every voter leaving, say: nodes drained to be
 *     replaced), the other voters' seats move first, the leader's last.
 *   - The configuration lags the map: wait.
 *   - A learner is probed (on an ACTIVE, reachable node: the caller promotes it once it
 *     caught up) or, on a node no longer ACTIVE, taken out.
 *   - With more voters than seats, a leaving one goes (another than the leader), else the
 *     extra voter: one whose AZ another voter shares, the highest id among equals.
 *   - A leaving voter, or a seat short, gets a learner on the best candidate: an ACTIVE,
 *     staying node, not a member, in an AZ (then on a host) no staying voter has, the
 *     lowest id among equals.
 *   - With nobody to take it, a REMOVED voter's seat goes anyway (the group shrinks);
 *     a DRAINING or DOWN one keeps it.
 * A voter is leaving when its node is DRAINING or REMOVED (or unknown), or DOWN for at
 * least replace_after_ms (as its partition replicas are re-created then).
 */
typedef enum {
    PLACEMENT_SEAT_WAIT = 0,  /* nothing to do now */
    PLACEMENT_SEAT_PROPOSE,   /* propose META_MEMBERS(next, epoch, seats) */
    PLACEMENT_SEAT_HAND_OVER, /* the leader's node gives its seat up: transfer leadership */
    PLACEMENT_SEAT_PROBE,     /* ask learner `node` whether it caught up */
} placement_seat_action;

typedef enum {
    PLACEMENT_SEAT_RECORD = 1, /* the first record of the seats */
    PLACEMENT_SEAT_DROP,       /* learner `node` is no longer ACTIVE: no seat for it */
    PLACEMENT_SEAT_GIVE_UP,    /* voter `node` leaves (leaving, or one too many) */
    PLACEMENT_SEAT_TAKE,       /* `node` takes a seat, as a learner first */
    PLACEMENT_SEAT_SHRINK,     /* REMOVED voter `node` goes; nobody takes its seat */
    PLACEMENT_SEAT_PROMOTE,    /* learner `node` caught up: it becomes a voter */
} placement_seat_reason;

typedef struct {
    uint64_t self;             /* the meta leader's node */
    uint64_t now_ms;           /* wall clock, as the nodes' state_since_ms */
    uint64_t replace_after_ms; /* a DOWN voter leaves its seat after this long */
    /* As the leader sees them: `reachable` (true for self), and `staying`: reachable and
     * not stopping. */
    bool (*reachable)(void *ctx, uint64_t node);
    bool (*staying)(void *ctx, uint64_t node);
    void *ctx;
} placement_seat_view;

typedef struct {
    placement_seat_action action;
    placement_seat_reason reason; /* PROPOSE */
    uint64_t node;                /* PROBE, and the node a PROPOSE adds or takes out */
    meta_partition next;          /* PROPOSE: the group's members after the step */
    uint64_t epoch;               /* PROPOSE: planned against (0: the first record) */
    uint32_t seats;               /* PROPOSE */
} placement_seat_step;

/* Whether node `n` (NULL: unknown) gives its meta seat up at v->now_ms. */
bool placement_seat_leaving(const placement_seat_view *v, const meta_node *n);

/* The step, given the group's committed Raft configuration `config` (its members, with
 * META_VOTER or META_LEARNER roles, in any order; the caller waits while a change is
 * pending). */
placement_seat_step placement_meta_seats(const meta_state *s, const meta_partition *config,
                                         const placement_seat_view *v);

/* The one change that brings a group's configuration `config` (members with roles, in any
 * order) a step closer to the map's members `g`: add a missing member as a learner (at the
 * end), else promote a learner the map makes a voter, else remove a member the map lacks.
 * False, `config` unchanged, when they agree. */
bool placement_config_next(const meta_partition *g, meta_partition *config);

/* After a PROBE at the group's `epoch` found learner `node` caught up: the PROPOSE that
 * makes it a voter, or WAIT if the map changed since (another epoch, not a learner). */
placement_seat_step placement_seat_promote(const meta_state *s, uint64_t node, uint64_t epoch);

#endif
