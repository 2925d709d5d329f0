#!/usr/bin/python3
"""Replica balance by load on real stratad processes (issue #7: "the scheduler moves
replicas so that load stays even across nodes").

Usage: loadmove.py STRATAD [--keep]   (--keep: the data and logs stay)
 1. Six nodes, two per AZ (az1: nodes 1 and 4, az2: 2 and 5, az3: 3 and 6), form a
    cluster; a table of 6 partitions: every node holds 3 replicas, one per partition of
    three, and leads one partition (polled until the leaders follow the hints).
 2. Two partitions that have their az1 replica on the same node X (and are not led by
    X) get all the writes, through every node, each key written by one writer only.
 3. The meta leader hears their loads and moves replicas by load within az1: within a
    deadline the two hot partitions have their az1 replicas on two different nodes
    (a swap: every node still holds 3 replicas), every partition has 3 voters in 3 AZs
    on 3 hosts, and the leaders follow the hints.
 4. While the load goes on for longer than one load-planning period, the hot replicas
    stay apart in az1 (no flapping). Every write succeeded (boto3's standard retries),
    every acknowledged write reads back strongly through two nodes, and the replicas of
    every partition agree (digests).
Every wait polls a condition with a deadline.
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import burst as B  # noqa: E402  (run_cluster: nodes started, stopped, cleaned)
import loadbal as L  # noqa: E402  (key hashes as stratad routes them)
import split as S  # noqa: E402  (nodes, clients, polls, digests)

TABLE = "loadmove"
PARTS = 6
AZS = ["az1", "az2", "az3", "az1", "az2", "az3"]
MOVE_DEADLINE_S = 75  # the first plan by load needs whole stats windows, then a copy
WATCH_S = 12          # longer than LOAD_PLAN_MS: a flapping plan would show
KEYS_PER_WRITER = 20


def cluster_map(node):
    a = node.admin()
    if not a:
        return None
    return {"nodes": {n["id"]: n for n in a["nodes"]},
            "parts": [p for p in a["partitions"] if p["table"] == TABLE]}


def placement_ok(m):
    """Every partition settled on 3 voters in 3 AZs on 3 hosts; None otherwise."""
    for p in m["parts"]:
        mem = p["members"]
        if len(mem) != 3:
            return False
        assert len({m["nodes"][i]["az"] for i in mem}) == 3, "AZ rule broken: %s" % p
        assert len({m["nodes"][i]["host"] for i in mem}) == 3, "host rule broken: %s" % p
    return True


LAST = {}  # the last map that did not settle, by node: shown when a wait times out


def settled(nodes):
    """Node 1's map when every node sees PARTS partitions, 3 voters each in 3 AZs, and 3
    replicas per node, and the replicas it holds are led by their hints; else None."""
    for n in nodes:
        m = cluster_map(n)
        LAST.clear()
        LAST[n.id] = m
        if m is None or len(m["parts"]) != PARTS or not placement_ok(m):
            return None
        if not all(p["leader"] == p["leader_hint"] for p in m["parts"] if "local" in p):
            return None  # the replicas' view of leaders (others show a routing guess)
        if sorted(x["replicas"] for x in m["nodes"].values()) != [3] * 6:
            return None
    LAST.clear()
    return cluster_map(nodes[0])


def poll_settled(nodes, cond, what, deadline_s):
    try:
        return S.poll(cond, what, deadline_s, 0.5)
    except AssertionError:
        for nid, m in LAST.items():
            S.log("node %d's map: nodes %s" % (nid, [(i, x["az"], x["state"], x["replicas"])
                                                     for i, x in m["nodes"].items()]))
            for p in m["parts"]:
                S.log("  partition %d: members %s leader %d hint %d" % (
                    p["id"], p["members"], p["leader"], p["leader_hint"]))
        raise


def az1_node(m, pid):
    p = next(p for p in m["parts"] if p["id"] == pid)
    return next(i for i in p["members"] if m["nodes"][i]["az"] == "az1")


class Writers:
    """Six writers, through every node, each over its own keys of the hot partitions (so
    the last acknowledged value of a key is its value); every error is recorded."""

    def __init__(self, nodes, keys):
        self.stop, self.errors, self.acked, self.lock = False, [], {}, threading.Lock()
        self.ok = 0
        self.clients = [S.client(n.url) for n in nodes]
        self.ts = [threading.Thread(daemon=True, target=self.put_loop, args=(w, keys[w::6]))
                   for w in range(6)]
        for t in self.ts:
            t.start()

    def put_loop(self, w, keys):
        i = 0
        while not self.stop:
            k, v = keys[i % len(keys)], "%d-%d-%s" % (w, i, "x" * 100)
            try:
                self.clients[(w + i) % len(self.clients)].put_item(
                    TableName=TABLE, Item={"pk": {"S": k}, "v": {"S": v}})
                with self.lock:
                    self.acked[k] = v
                    self.ok += 1
            except Exception as e:
                with self.lock:
                    self.errors.append(repr(e)[:300])
            i += 1

    def end(self):
        self.stop = True
        for t in self.ts:
            t.join()


def read_back(nodes, acked):
    for via in (nodes[1], nodes[5]):
        c = S.client(via.url)
        lost = [k for k, v in acked.items()
                if c.get_item(TableName=TABLE, Key={"pk": {"S": k}}, ConsistentRead=True)
                .get("Item", {}).get("v", {}).get("S") != v]
        assert not lost, "%d acknowledged writes not read back via node %d: %s" % (
            len(lost), via.id, lost[:5])


def body(nodes, c, work):
    xxh = L.load_xxhash()
    S.poll(lambda: [x["state"] for x in (nodes[0].admin() or {}).get("nodes", [])] ==
           ["ACTIVE"] * len(nodes), "every node ACTIVE")
    c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    m = poll_settled(nodes, lambda: settled(nodes), "6 partitions settled, 3 replicas per node",
                     60)
    # X: an az1 node holding two partitions it does not lead (it leads one of its three).
    for x in (1, 4):
        hot = [p for p in m["parts"] if x in p["members"] and p["leader_hint"] != x][:2]
        if len(hot) == 2:
            break
    assert len(hot) == 2, m
    hot_ids = sorted(p["id"] for p in hot)
    keys = L.keys_for(xxh, hot[0], 3 * KEYS_PER_WRITER) + L.keys_for(xxh, hot[1],
                                                                      3 * KEYS_PER_WRITER)
    S.log("partitions %s have their az1 replica on node %d: writing only to them"
          % (hot_ids, x))

    t0 = time.time()
    w = Writers(nodes, keys)
    try:
        def spread():
            m = settled(nodes)
            return m if m and az1_node(m, hot_ids[0]) != az1_node(m, hot_ids[1]) else None
        m = poll_settled(nodes, spread, "the hot partitions' az1 replicas on two nodes",
                         MOVE_DEADLINE_S)
        move_s = time.time() - t0
        S.log("spread after %.1f s (%d writes): az1 replicas of %s on nodes %d and %d"
              % (move_s, w.ok, hot_ids, az1_node(m, hot_ids[0]),
                 az1_node(m, hot_ids[1])))
        end, seen = time.time() + WATCH_S, 0
        while time.time() < end:
            m = cluster_map(nodes[0])
            if m and placement_ok(m):
                assert az1_node(m, hot_ids[0]) != az1_node(m, hot_ids[1]), \
                    "hot replicas back on one az1 node: %s" % m["parts"]
                seen += 1
            time.sleep(0.5)
        assert seen > 0, "the map never settled while watching"
    finally:
        w.end()
    assert not w.errors, "client errors during the moves: %s" % w.errors[:5]
    read_back(nodes, w.acked)
    S.poll(lambda: S.digests_agree(nodes), "replicas agree (digests)", 60, 0.5)
    moves = sum(open(n.log, errors="replace").read().count("(load)") for n in nodes)
    assert moves >= 1, "no move by load in the logs: the spread came from elsewhere"
    S.log("loadmove: %d keys, %d writes acknowledged, no error; spread in %.1f s by %d "
          "move(s) by load, stable for %d s; strong reads and digests agree"
          % (len(w.acked), w.ok, move_s, moves, WATCH_S))


def main():
    args = argparse.Namespace(stratad=os.path.abspath(sys.argv[1]), keep="--keep" in sys.argv)
    return 0 if B.run_cluster(args, "strata-loadmove-", PARTS, [], body, AZS) else 1


if __name__ == "__main__":
    sys.exit(main())
