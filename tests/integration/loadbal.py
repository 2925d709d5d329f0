#!/usr/bin/python3
"""Leader balance by load on real stratad processes (issue #7: "the scheduler moves
leaders so that load stays even across nodes").

Usage: loadbal.py STRATAD
 1. Three nodes (az1..az3) form a cluster; a table of 6 partitions: the count balancer
    gives every node two leaderships (polled until the actual leaders follow the hints).
 2. Writers put items, through every node, only into the two partitions led by one node
    X (keys picked by their hash: xxh3 of the key's encoding, as stratad routes them).
 3. The meta leader hears the partitions' loads (MSG_PART_STATS, version 2) and moves
    leader hints by load: within a deadline the two hot partitions are led by two
    different nodes, every node still leads two partitions (counts stay even), and the
    leaders follow the hints.
 4. While the load goes on for longer than one load-planning period, the hot partitions
    stay on two nodes (no flapping back). Every write succeeded throughout, and the write
    units charged (/admin/table-stats) are all the hot partitions'.
Every wait polls a condition with a deadline.
"""
import argparse
import ctypes
import ctypes.util
import itertools
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import burst as B  # noqa: E402  (run_cluster: three nodes started, stopped, cleaned)
import split as S  # noqa: E402  (the cluster scaffolding of the split test)

TABLE = "loadbal"
PARTS = 6
SPREAD_DEADLINE_S = 60  # load plans run every 10 s (LOAD_PLAN_MS): a few chances
WATCH_S = 15            # longer than LOAD_PLAN_MS: a flapping plan would show


def xxh3_of_key(xxh, key):
    """key_hash() of an S partition key: XXH3-64 of its key encoding (the bytes, 0x00
    escaped as 0x00 0xFF, then 0x00 0x01)."""
    enc = key.encode().replace(b"\x00", b"\x00\xff") + b"\x00\x01"
    return xxh.XXH3_64bits(enc, len(enc))


def load_xxhash():
    name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
    lib = ctypes.CDLL(name)
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def parts(node):
    return [p for p in (node.admin() or {}).get("partitions", []) if p["table"] == TABLE]


def leaders_settled(nodes):
    """Every node's map: PARTS partitions whose leader is their hint, two per node."""
    for n in nodes:
        ps = parts(n)
        if len(ps) != PARTS or not all(p["leader"] and p["leader"] == p["leader_hint"]
                                       for p in ps):
            return None
        counts = {}
        for p in ps:
            counts[p["leader"]] = counts.get(p["leader"], 0) + 1
        if sorted(counts.values()) != [2, 2, 2]:
            return None
    return parts(nodes[0])


def keys_for(xxh, part, n):
    lo, hi = int(part["hash_lo"], 16), int(part["hash_hi"], 16)
    keys, i = [], 0
    while len(keys) < n:
        k = "hot-%d" % i
        if lo <= xxh3_of_key(xxh, k) <= hi:
            keys.append(k)
        i += 1
    return keys


class Writers(S.Load):
    """Puts into the hot keys through every node (no readers: the load is the writes);
    every error is recorded and end() fails on any (boto3's standard retries ride over
    leadership transfers)."""

    def __init__(self, nodes, keys):
        self.stop, self.errors, self.ok, self.lock = False, [], 0, threading.Lock()
        self.keys = keys
        self.clients = [S.client(n.url) for n in nodes]
        self.ts = [threading.Thread(daemon=True, target=self.put_loop, args=(w,))
                   for w in range(6)]
        for t in self.ts:
            t.start()

    def put_loop(self, w):
        for i in itertools.count(w, 7):
            if self.stop:
                return
            item = {"pk": {"S": self.keys[i % len(self.keys)]}, "v": {"S": "x" * 100}}
            try:
                self.clients[i % len(self.clients)].put_item(TableName=TABLE, Item=item)
            except Exception as e:
                with self.lock:
                    self.errors.append(repr(e)[:300])
                continue
            with self.lock:
                self.ok += 1


def spread_state(nodes, hot):
    """(leaders of the hot partitions, leader counts) when every node agrees, the leaders
    are the hints and counts are 2/2/2; else None."""
    ps = leaders_settled(nodes)
    if ps is None:
        return None
    return {p["id"]: p["leader"] for p in ps if p["id"] in hot}


def balance(nodes, c, work):
    xxh = load_xxhash()
    c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    ps = S.poll(lambda: leaders_settled(nodes), "6 partitions, two leaders per node")
    x = ps[0]["leader"]
    hot = [p for p in ps if p["leader"] == x]
    assert len(hot) == 2
    hot_ids = {p["id"] for p in hot}
    keys = keys_for(xxh, hot[0], 20) + keys_for(xxh, hot[1], 20)
    S.log("node %d leads partitions %s: writing only to them" % (x, sorted(hot_ids)))

    t0 = time.time()
    w = Writers(nodes, keys)
    try:
        def spread():
            st = spread_state(nodes, hot_ids)
            return st if st and len(set(st.values())) == 2 else None
        st = S.poll(spread, "the hot partitions led by two nodes", SPREAD_DEADLINE_S, 0.5)
        spread_s = time.time() - t0
        S.log("spread after %.1f s (%d writes): hot partitions led by %s" % (spread_s, w.ok, st))
        # Watch one planning period and more: the hot ones stay on two nodes, counts even.
        # A transfer in flight may briefly show a leader that is not its hint.
        end, seen_ok = time.time() + WATCH_S, 0
        while time.time() < end:
            now = spread_state(nodes, hot_ids)
            if now is not None:
                assert len(set(now.values())) == 2, "hot partitions back on one node: %s" % now
                seen_ok += 1
            time.sleep(0.5)
        assert seen_ok > 0, "the leaders never settled while watching"
        writes = w.ok
    finally:
        w.end()
    # The keys were the hot partitions' (the hash mapping above is stratad's): the write
    # units charged, summed over nodes, are all theirs.
    units = {}
    for n in nodes:
        for p in (n.admin("/admin/table-stats/" + TABLE) or {}).get("partitions", []):
            units[p["id"]] = units.get(p["id"], 0) + float(p["consumed"]["write"])
    cold = {pid: u for pid, u in units.items() if pid not in hot_ids and u > 0}
    assert not cold and all(units.get(pid, 0) > 0 for pid in hot_ids), units
    S.log("loadbal: %d writes, no error; spread in %.1f s, stable for %d s"
          % (writes, spread_s, WATCH_S))


def main():
    args = argparse.Namespace(stratad=os.path.abspath(sys.argv[1]), keep=False)
    return 0 if B.run_cluster(args, "strata-loadbal-", PARTS, [], balance) else 1


if __name__ == "__main__":
    sys.exit(main())
