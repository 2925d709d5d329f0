#!/usr/bin/python3
"""A split that two of its three listed nodes miss (issue #7's splits; tests/sim's "(c)").

A node listed in a SPLIT misses it when it stored the entry but never applied it (it
crashed first) and, by the time it came back, the parent's leader had compacted its log
past the entry: it gets a copy of the parent taken after the split, which holds neither
the child's data nor its range record. Before seed_child (cluster/router_cluster.c), a
child made by one node only of three never elected a leader, and its half of the table
stayed unavailable for good.

Usage: split_missed.py STRATAD
 1. Three nodes (small memtables, so logs compact early), a table of one partition P and
    300 items; L leads P. The two others restart with STRATA_TEST_EXIT_ON_SPLIT=1: a
    node with it exits the moment it applies a SPLIT (a crash between storing the entry
    and applying it). Then D (one of them) is killed.
 2. Items while D is down, until L has compacted P's log past D's last entry.
 3. P splits. The SPLIT commits on L and F (the other one), F exits applying it (status
    86), L applies it alone: the child C has one replica, of three voters.
 4. D restarts with STRATA_TEST_SEED_ABANDON=1 instead: it copies P from L, taken after
    the split (its log says so), so it never applies the SPLIT either. It copies C's first
    state from L instead; the hook cuts the first copy short at its last chunk (items
    written, no range record), so D abandons it (its log says so), asks again and copies
    it whole the second time (its log says so). It starts C as the SPLIT would have, and C
    elects a leader: writes to C's half succeed, and every item (C's half included) reads
    back through D.
 5. More items, until P's log is compacted past F's last entry. F restarts (no hook): it
    copies P too, and joins C empty once C's log is compacted whole (it has a leader and
    applied its no-op by then), getting a copy of C.
 6. Every acknowledged write reads back (strong and eventual, through every node), a
    4-segment scan returns each item once, the replicas agree (digests), and every node
    serves P and C.
Every wait polls a condition with a deadline.
"""
import os
import signal
import sys
import tempfile
import time

import harness
import split as sp

HOOK = "STRATA_TEST_EXIT_ON_SPLIT"
HOOK_EXIT = 86
SEED_HOOK = "STRATA_TEST_SEED_ABANDON"


def put_items(nodes, acked, prefix, n):
    """n items in batches of 25 through `nodes` in turn; items a batch leaves unprocessed
    (back-pressure: the small memtables flush often) are sent again."""
    for b in range(0, n, 25):
        items = {"%s%05d" % (prefix, i): value(i) for i in range(b, min(b + 25, n))}
        req = {sp.TABLE: [{"PutRequest": {"Item": {"pk": {"S": k}, "v": {"S": v}}}}
                          for k, v in items.items()]}
        end = time.time() + sp.DEADLINE_S
        while req:
            assert time.time() < end, "batch never fully processed: %s" % req
            req = sp.client(nodes[b // 25 % len(nodes)].url).batch_write_item(
                RequestItems=req).get("UnprocessedItems")
        acked.update(items)


def write_until(nodes, acked, prefix, cond, what, deadline_s=300):
    """Batches of 25 items through `nodes` in turn until cond() holds."""
    end, n = time.time() + deadline_s, 0
    while not cond():
        assert time.time() < end, "timed out writing until: " + what
        put_items(nodes, acked, "%s%d-" % (prefix, n), 25)
        n += 1
    return n * 25


def value(i):
    return "v%d-" % i + "x" * 200  # big enough that the small memtables flush often


def local_state(node, pid):
    for p in sp.table_parts(node):
        if p["id"] == pid:
            return p.get("local", {})
    return {}


def leader_of(node, pid):
    for p in sp.table_parts(node):
        if p["id"] == pid:
            return p.get("leader", 0)
    return 0


def settled_leader(node, pid):
    """pid's leader once it is the map's leader hint (the scheduler moves leaderships to
    their hints: before that, the leader may change under the test), else 0."""
    for p in sp.table_parts(node):
        if p["id"] == pid and p.get("leader") and p.get("leader") == p.get("leader_hint"):
            return p["leader"]
    return 0


def log_size(node):
    return os.path.getsize(node.log) if os.path.exists(node.log) else 0


def log_since(node, offset):
    with open(node.log, errors="replace") as f:
        f.seek(offset)
        return f.read()


def compacted_past(node, pid, index):
    """node's log of pid starts past `index` (raft_host keeps 128 entries below the
    compaction point): a replica whose log ends at `index` needs a copy."""
    return local_state(node, pid).get("snapshot_index", 0) > index + 128


def start_with_hook(node, stratad, hook=HOOK):
    os.environ[hook] = "1"
    try:
        node.start(stratad)
    finally:
        del os.environ[hook]


def caught_up(nodes, pid):
    """Every node's replica of pid applied the leader's commit index."""
    states = [local_state(n, pid) for n in nodes]
    if not all(s.get("state") in ("leader", "follower") for s in states):
        return False
    commit = max(s.get("commit_index", 0) for s in states)
    return all(s.get("applied_index", 0) >= commit for s in states)


def main():
    stratad = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="strata-split-missed-")
    os.environ["STRATA_MEMTABLE_BYTES"] = "262144"  # engines flush, logs compact early
    ports = harness.free_ports(6)
    nodes = [sp.Node(work, i + 1, "az%d" % (i + 1), ports[2 * i], ports[2 * i + 1], ports[1])
             for i in range(3)]
    for n in nodes:
        n.initial_partitions = 1
    ok = False
    try:
        # 1. The cluster, P and its leader L; the others restart with the hook.
        for n in nodes:
            n.start(stratad)
        sp.poll(lambda: all((n.admin() or {}).get("ready") for n in nodes), "3 nodes ready")
        sp.client(nodes[0].url).create_table(
            TableName=sp.TABLE, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        sp.poll(lambda: sp.settled(nodes, 1), "1 partition led and served everywhere")
        pid = sp.table_parts(nodes[0])[0]["id"]
        acked = {}
        put_items(nodes, acked, "a", 300)
        lid = sp.poll(lambda: settled_leader(nodes[0], pid), "P led by its hinted node")
        L = nodes[lid - 1]
        F, D = [n for n in nodes if n is not L]
        for n in (F, D):
            n.stop()
            start_with_hook(n, stratad)
        sp.poll(lambda: all((n.admin() or {}).get("ready") for n in nodes), "3 nodes ready again")
        sp.poll(lambda: caught_up(nodes, pid), "P's replicas caught up")
        sp.poll(lambda: leader_of(L, pid) == L.id, "node %d leading P again" % L.id, 30)
        sp.log("1) P=%d led by node %d; nodes %d and %d run with %s" % (pid, L.id, F.id, D.id,
                                                                         HOOK))

        # 2. D down; L's log of P moves on and is compacted past D's end.
        d_end = local_state(D, pid).get("last_index", 0)
        D.proc.send_signal(signal.SIGKILL)
        D.proc.wait(timeout=30)
        nb = write_until([L, F], acked, "b", lambda: compacted_past(L, pid, d_end),
                         "L compacts P's log past %d" % d_end)

        # 3. The split: F exits applying it; L makes the child alone.
        cid = sp.split(L, pid)
        sp.poll(lambda: F.proc.poll() is not None, "node %d exits applying the SPLIT" % F.id, 60)
        assert F.proc.returncode == HOOK_EXIT, "node %d exited with %s, not %d (see %s)" % (
            F.id, F.proc.returncode, HOOK_EXIT, F.log)
        sp.poll(lambda: local_state(L, cid).get("state") in ("follower", "candidate"),
                "node %d starts child %d" % (L.id, cid), 60)
        f_end = local_state(L, pid).get("last_index", 0)  # F stored no more than L had
        sp.log("2-3) node %d down for %d writes; split %d -> %d: node %d exited applying the "
               "SPLIT, node %d made the child alone" % (D.id, nb, pid, cid, F.id, L.id))

        # 4. D returns: a copy of P past the split, then C's first state from L, the first
        # attempt cut short by the hook.
        d_log = log_size(D)
        start_with_hook(D, stratad, SEED_HOOK)
        sp.poll(lambda: leader_of(L, cid) != 0 and leader_of(D, cid) != 0,
                "child %d elects a leader (two of its three voters made it)" % cid, 90)
        text = log_since(D, d_log)
        assert "partition %d is behind a compacted log" % pid in text, \
            "node %d did not copy P (so it may have applied the SPLIT itself)" % D.id
        cut = text.find("partition %d: copy of its first state from node %d abandoned: cut "
                        "short" % (cid, L.id))
        assert cut >= 0, "node %d did not abandon its first copy (the hook)" % D.id
        assert "partition %d: its SPLIT was not applied here; copied its first state" % cid \
            in text[cut:], "node %d did not copy the child's first state again" % D.id
        put_items([L, D], acked, "c", 300)
        for k, v in acked.items():
            got = sp.client(D.url).get_item(TableName=sp.TABLE, Key={"pk": {"S": k}},
                                            ConsistentRead=True)
            assert got.get("Item", {}).get("v", {}).get("S") == v, (k, got)
        sp.log("4) node %d copied P after the split and the child's first state from node %d "
               "(the second copy: the hook cut the first short); the child has a leader, %d "
               "items read back through node %d" % (D.id, L.id, len(acked), D.id))

        # 5. P's log moves past F's end; F returns and joins the child empty.
        nd = write_until([L, D], acked, "d", lambda: compacted_past(L, pid, f_end),
                         "L compacts P's log past %d" % f_end)
        f_log = log_size(F)
        F.start(stratad)
        sp.poll(lambda: sp.settled(nodes, 2), "P and the child led and served everywhere", 120)
        sp.poll(lambda: caught_up(nodes, pid) and caught_up(nodes, cid), "replicas caught up")
        text = log_since(F, f_log)
        assert "partition %d is behind a compacted log" % pid in text, \
            "node %d did not copy P" % F.id
        sp.log("5) %d more writes; node %d copied P and joined the child" % (nd, F.id))

        # 6. Everything there, everywhere.
        sp.check_all(nodes, acked, "after the missed split")
        ok = True
        sp.log("split_missed: ok")
    finally:
        ok = sp.finish(nodes, work, ok)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
