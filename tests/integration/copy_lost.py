#!/usr/bin/python3
"""A copy cut short by a crash, on a replica the map then moves away (router_cluster.c's
restart_leftover, its state-lost case: forget_lost_copy).

A replica added on a node gets its partition's state as a copy from the leader when the
leader's log is compacted. A crash in the middle of that copy leaves the node a log group
with no entry, and, when the partition is larger than a memtable, part of the copy in
table files. If the map gives the partition to other nodes while the node is down, no
replica of it starts there again: the node must find that log group and that data itself
and let them go.

Usage: copy_lost.py STRATAD STRATA
 1. Four nodes (small memtables, so that logs compact): the meta group's voters 1 (az1),
    2 (az2) and 3 (az1), and 5 (az3); a table of one partition P, whose az3 replica is
    node 5's, holding about 2.4 MiB (3 chunks of a copy) in over 1,024 entries; the log of
    P's leader is compacted.
 2. Node 4 (az3) joins with STRATA_TEST_EXIT_MID_COPY=1: it exits (status 86) once the
    first chunk of a copy is written and flushed. `strata node drain 5` moves P's az3
    replica toward node 4 (no meta seat moves: node 5 has none), which starts copying P
    and exits.
 3. `strata node activate 5`: with node 4 down, P's members are nodes 1 or 3, 2 and 5
    again.
 4. Node 4 restarts without the hook, outside the meta group: the map it fetches leaves it
    out of P. Its replica of P cannot restart (nothing of it is durable but part of a
    copy): once a member of P says that P's configuration leaves node 4 out, node 4
    deletes what the copy left and drops the log group. Node 4 ends running no replica,
    with no log group unclaimed and no item in its engine (GET /admin/digests
    "stray_items"), and its log says so.
 5. `strata node drain 5` again: P moves to node 4, which copies it whole this time; every
    item reads back through node 4, the replicas of P agree, and nodes 4 and 5 hold
    nothing else.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' directories.
"""
import os
import subprocess
import sys
import tempfile
import threading

import harness

TABLE = "lost"
DEADLINE_S = 120
HOOK = "STRATA_TEST_EXIT_MID_COPY"
HOOK_EXIT = 86
ITEMS = 2400  # of about 1 KiB: 3 chunks of a copy (1 MiB each), over 1,024 log entries


def log(*a):
    print(*a, flush=True)


def poll(cond, what, deadline_s=DEADLINE_S, interval=0.2):
    return harness.poll(cond, what, deadline_s, interval)


class Node:
    def __init__(self, work, nid, az, cport, pport, seed_pport):
        self.id, self.az, self.cport, self.pport, self.seed = nid, az, cport, pport, seed_pport
        self.url = "http://127.0.0.1:%d" % cport
        self.dir = os.path.join(work, "n%d" % nid)
        os.makedirs(self.dir)
        self.log = os.path.join(self.dir, "log")
        self.proc = None

    def start(self, stratad, env_extra=None):
        cmd = harness.node_command(stratad, self.id, self.az, self.cport, self.pport, self.seed,
                                   os.path.join(self.dir, "data"),
                                   ["--initial-partitions", "1", "--replace-after", "3",
                                    "--split-size-mb", "0", "--split-heat", "0"])
        env = dict(os.environ, STRATA_MEMTABLE_BYTES="262144", **(env_extra or {}))
        with open(self.log, "a") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)

    def admin(self, path="/admin/cluster"):
        return harness.admin(self.cport, path)

    def text(self):
        with open(self.log) as f:
            return f.read()


def partition(node):
    """TABLE's one partition as node's GET /admin/cluster shows it, or None."""
    parts = [p for p in (node.admin() or {}).get("partitions", []) if p["table"] == TABLE]
    return parts[0] if len(parts) == 1 else None


def node_state(node, nid):
    for n in (node.admin() or {}).get("nodes", []):
        if n["id"] == nid:
            return n["state"]
    return None


def value(i):
    return "v%05d-" % i + "x" * 1000


def put_all(nodes):
    """ITEMS puts of about 1 KiB, one entry each, through four threads."""
    errors = []

    def writer(w):
        c = harness.client(nodes[w % len(nodes)].cport, 10)
        for i in range(w, ITEMS, 4):
            try:
                c.put_item(TableName=TABLE, Item={"pk": {"S": "k%05d" % i},
                                                  "v": {"S": value(i)}})
            except Exception as e:  # any error fails the test below
                errors.append(repr(e)[:300])
    ts = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, "put errors: %s" % errors[:3]


def all_read_back(node):
    c = harness.client(node.cport, 10)
    for b in range(0, ITEMS, 100):
        keys = [{"pk": {"S": "k%05d" % i}} for i in range(b, min(b + 100, ITEMS))]
        got, req = {}, {TABLE: {"Keys": keys, "ConsistentRead": True}}
        while req:
            r = c.batch_get_item(RequestItems=req)
            for it in r["Responses"].get(TABLE, []):
                got[it["pk"]["S"]] = it["v"]["S"]
            req = r.get("UnprocessedKeys")
        for i in range(b, min(b + 100, ITEMS)):
            assert got.get("k%05d" % i) == value(i), "item k%05d lost" % i


def main():
    stratad, cli = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="strata-copy-lost-")
    ports = harness.free_ports(10)
    azs = ["az1", "az2", "az1", "az3", "az3"]
    nodes = [Node(work, i + 1, azs[i], ports[2 * i], ports[2 * i + 1], ports[1])
             for i in range(5)]
    n4, n5 = nodes[3], nodes[4]
    first = nodes[:3] + [n5]
    ok = False
    try:
        for n in nodes[:3]:  # the meta group's voters: the first three to join
            n.start(stratad)
        poll(lambda: all((n.admin() or {}).get("ready") for n in nodes[:3]), "3 nodes ready")
        n5.start(stratad)
        poll(lambda: (n5.admin() or {}).get("ready") and node_state(nodes[0], 5) == "ACTIVE",
             "node 5 joined")
        harness.client(nodes[0].cport, 10).create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        poll(lambda: (partition(nodes[0]) or {}).get("leader"), "P has a leader")
        put_all(first)
        pid = partition(nodes[0])["id"]
        members = sorted(partition(nodes[0])["members"])
        assert 5 in members and 4 not in members, "P's members: %s" % members

        def leader_compacted():
            for n in first:
                loc = (partition(n) or {}).get("local", {})
                if loc.get("state") == "leader":
                    return loc.get("snapshot_index", 0) > 0
            return False
        poll(leader_compacted, "P's leader compacted its log")
        log("1: P (partition %d) holds %d items of 1 KiB; its leader's log is compacted"
            % (pid, ITEMS))

        n4.start(stratad, {HOOK: "1"})
        poll(lambda: node_state(nodes[0], 4) == "ACTIVE", "node 4 joined")
        log(harness.strata(cli, nodes[0], "node", "drain", "5"))
        poll(lambda: n4.proc.poll() is not None, "node 4 exits in the middle of its copy")
        assert n4.proc.returncode == HOOK_EXIT, "node 4 exited with %s" % n4.proc.returncode
        assert "STRATA_TEST_EXIT_MID_COPY is set: exiting" in n4.text(), n4.text()[-2000:]
        log("2: node 4 exited in the middle of its copy of P (a chunk written and flushed)")

        log(harness.strata(cli, nodes[0], "node", "activate", "5"))
        poll(lambda: node_state(nodes[0], 4) == "DOWN", "node 4 DOWN", 60)
        poll(lambda: sorted((partition(nodes[0]) or {}).get("members", [])) == members,
             "P's members are %s again" % members, 60)
        log("3: node 4 DOWN; P's members are %s again" % members)

        n4.start(stratad)
        seen = [None]

        def let_go():
            seen[0] = harness.holdings(n4)
            return seen[0] == ([], 0, 0)
        try:
            poll(let_go, "node 4 lets its lost copy of P go")
        except AssertionError:
            raise AssertionError("node 4 back: (replicas, unclaimed log groups, stray items) "
                                 "%s, not ([], 0, 0)" % (seen[0],))
        text = n4.text()
        assert "its state lost): what its copy left deleted, its log dropped" in text, \
            text[-3000:]
        assert "restarts from its log until its Raft group lets it go" not in text, \
            "node 4 restarted a replica that had nothing to restart from"
        log("4: node 4 back: its log group of P and what its copy left are gone")

        log(harness.strata(cli, nodes[0], "node", "drain", "5"))
        poll(lambda: harness.holdings(n4) == ([pid], 0, 0) and harness.holdings(n5) == ([], 0, 0),
             "P moved to node 4; node 5 holds nothing")
        now = [n for n in nodes if n.id in members and n.id != 5] + [n4]
        poll(lambda: harness.digests_agree(now), "P's replicas agree")
        all_read_back(n4)
        log("5: P copied whole to node 4: its replicas agree, %d items read back through it"
            % ITEMS)
        ok = True
        log("copy_lost: ok")
    finally:
        ok = harness.stop_nodes(nodes, ok, log, work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
