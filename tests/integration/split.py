#!/usr/bin/python3
"""Partition splits on real stratad processes (issue #7, "Splits", the mechanism).

Usage: split.py STRATAD [STRATA]
 1. Three nodes (az1..az3) form a cluster; a table of 4 partitions gets 600 items.
 2. While writers run through every node, every partition is split (POST /admin/split):
    clients see no error (boto3 with its standard retries), an eventual read through a node
    never misses a write that node acknowledged, the map shows 8 partitions,
    each with a leader, and every node serves the 8 ranges locally. Each SPLIT came after
    a flush hint that its leader applied (the routers' flush_hints counter).
 3. Every acknowledged write reads back (strong and eventual reads, through different
    nodes); a Query of each key returns it once; a 4-segment Scan (small pages) returns
    every item exactly once; the replicas of every partition agree (digests).
 4. All nodes restart: the same checks hold.
 5. A child is split again under load (with `strata partition split` when STRATA is
    given): the same checks hold. DescribeTable's ItemCount counts every item throughout.
 6. With no write load, a partition is split: its child gets no write (its leader's no-op
    lets it compact its log whole, at an index the engine applied). Meanwhile a process per
    node reads the keys of the child's half (eventually and strongly consistent in turn, raw
    HTTP): every read returns its item, the nodes' parent replicas answered some eventual
    ones while the child had no fresh local replica (the routers' reads_via_parent counter),
    and some strong ones went to the parent's leader (strong_via_parent). All nodes restart (a
    child compacted at a barrier's index could not: "the state machine is at 1 but the log
    starts at 3"): the same checks hold.
 7. Another idle split, and at once a fourth node (az1) joins: the scheduler moves
    replicas of parents and children (the idle one among them, maybe before its log is
    compacted whole) to it. A replica joining a child gets a copy: the child's log alone
    does not rebuild it, so the child's log is compacted whole early and an empty replica
    joins only once every member did; the same checks hold on all four nodes.
Every wait polls a condition with a deadline.
"""
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import boto3
import botocore.config

import harness

TABLE = "splits"
DEADLINE_S = 120


def log(*a):
    print(*a, flush=True)


def poll(cond, what, deadline_s=DEADLINE_S, interval=0.2):
    return harness.poll(cond, what, deadline_s, interval)


class Node:
    def __init__(self, work, nid, az, cport, pport, seed_pport):
        self.id, self.az, self.cport, self.pport = nid, az, cport, pport
        self.url = "http://127.0.0.1:%d" % cport
        self.dir = os.path.join(work, "n%d" % nid)
        os.makedirs(self.dir)
        self.log = os.path.join(self.dir, "log")
        self.seed = seed_pport
        self.proc = None
        self.initial_partitions = 4
        self.extra = []  # more stratad flags (tests that import this module)
        self.preexec = None  # run in the child before stratad (e.g. resource limits)

    def start(self, stratad):
        cmd = [stratad, "--node-id", str(self.id), "--az", self.az, "--host-label",
               "h%d" % self.id, "--listen", "127.0.0.1:%d" % self.cport, "--peer-listen",
               "127.0.0.1:%d" % self.pport, "--data-dir", os.path.join(self.dir, "data"),
               "--initial-partitions", str(self.initial_partitions)] + self.extra
        cmd += ["--bootstrap"] if self.id == 1 else ["--join", "127.0.0.1:%d" % self.seed]
        with open(self.log, "a") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=self.preexec)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        assert rc == 0, "node %d exited with %d (see %s)" % (self.id, rc, self.log)

    def admin(self, path="/admin/cluster", body=None):
        try:
            data = json.dumps(body).encode() if body is not None else None
            req = urllib.request.Request(self.url + path, data=data, headers={
                "Content-Type": "application/x-amz-json-1.0"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return {"http_error": e.code, "body": e.read().decode(errors="replace")}
        except (OSError, ValueError):
            return None


SANITIZER = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def finish(nodes, work, ok):
    """A test's end: kills the nodes still running; a sanitizer report in a node's log
    fails the run; the work directory goes when the run passed, else stays with the logs'
    tails printed. Returns whether the run passed."""
    for n in nodes:
        if n.proc is not None and n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait()
    for n in nodes:
        text = open(n.log, errors="replace").read() if os.path.exists(n.log) else ""
        if any(s in text for s in SANITIZER):
            log("node %d: a sanitizer report in %s" % (n.id, n.log))
            ok = False
    if ok:
        shutil.rmtree(work, ignore_errors=True)
        return True
    log("logs kept in", work)
    for n in nodes:
        if os.path.exists(n.log):
            with open(n.log, errors="replace") as f:
                log("--- node %d log tail\n%s" % (n.id, "".join(f.readlines()[-40:])))
    return False


def client(url):
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x",
                        config=botocore.config.Config(retries={"max_attempts": 10,
                                                               "mode": "standard"}))


def table_parts(node):
    a = node.admin()
    return [p for p in (a or {}).get("partitions", []) if p["table"] == TABLE]


def settled(nodes, n):
    """n partitions with a leader in every node's map, each served locally with the
    map's range on every node (3 nodes: every node holds every partition)."""
    for node in nodes:
        parts = table_parts(node)
        if len(parts) != n or not all(p["leader"] for p in parts):
            return False
        if not all("local" in p and p["local"]["state"] in ("leader", "follower") for p in parts):
            return False
    return True


digests_agree = harness.digests_agree  # also S.digests_agree for burst.py and loadmove.py


def scan_all(c, consistent=False):
    keys = []
    for seg in range(4):
        kw = {"TableName": TABLE, "Segment": seg, "TotalSegments": 4, "Limit": 97,
              "ConsistentRead": consistent}
        while True:
            r = c.scan(**kw)
            keys += [it["pk"]["S"] for it in r["Items"]]
            if "LastEvaluatedKey" not in r:
                break
            kw["ExclusiveStartKey"] = r["LastEvaluatedKey"]
    return keys


def check_all(nodes, acked, what):
    strong, eventual = client(nodes[2].url), client(nodes[1].url)
    lost = [k for k, v in acked.items()
            if strong.get_item(TableName=TABLE, Key={"pk": {"S": k}},
                               ConsistentRead=True).get("Item", {}).get("v", {}).get("S") != v]
    assert not lost, "%s: %d acknowledged writes lost (strong), e.g. %s" % (what, len(lost),
                                                                            lost[:5])

    def eventual_ok():
        return all(eventual.get_item(TableName=TABLE, Key={"pk": {"S": k}})
                   .get("Item", {}).get("v", {}).get("S") == v for k, v in acked.items())
    poll(eventual_ok, what + ": eventual reads see every acknowledged write", 60, 1)
    q = client(nodes[0].url)
    for k in list(acked)[::7]:
        r = q.query(TableName=TABLE, KeyConditionExpression="pk = :k",
                    ExpressionAttributeValues={":k": {"S": k}})
        assert r["Count"] == 1 and r["Items"][0]["v"]["S"] == acked[k], (what, k, r)
    keys = scan_all(client(nodes[0].url))
    dup = len(keys) - len(set(keys))
    assert dup == 0, "%s: scan returned %d duplicates" % (what, dup)
    assert set(keys) == set(acked), "%s: scan missed %d, extra %d" % (
        what, len(set(acked) - set(keys)), len(set(keys) - set(acked)))
    poll(lambda: digests_agree(nodes), what + ": replicas agree (digests)", 60, 0.5)
    if len(nodes) == 3:  # ItemCount counts the node's own replicas: all of them with 3 nodes
        poll(lambda: all(client(n.url).describe_table(TableName=TABLE)["Table"]["ItemCount"] ==
                         len(acked) for n in nodes), what + ": ItemCount on every node", 30, 0.5)
    log("%s: %d items: strong/eventual reads, queries, 4-segment scan and digests agree"
        % (what, len(acked)))


class Load:
    """Writers through every node, a strong reader, an eventually consistent reader per
    node and a strongly consistent scanner; every error is recorded (there must be none):
    a strong read that misses a write acknowledged before it started, an eventual read
    through a node that misses a write that node acknowledged before (a router's reads
    never go back behind its writes, splits or not), a scan that misses one or returns an
    item twice."""

    def __init__(self, nodes, acked, tag):
        self.stop, self.errors, self.lock = False, [], threading.Lock()
        self.acked = acked
        self.clients = [client(n.url) for n in nodes]
        self.by_node = [[] for _ in nodes]  # (key, value) acknowledged through each node
        self.reads = self.scans = self.eventual = 0
        self.ts = [threading.Thread(target=self.writer, args=(w, tag)) for w in range(4)]
        self.ts.append(threading.Thread(target=self.reader))
        self.ts += [threading.Thread(target=self.eventual_reader, args=(n,))
                    for n in range(len(nodes))]
        self.ts.append(threading.Thread(target=self.scanner))
        for t in self.ts:
            t.daemon = True  # a failed check must end the test, not wait for them
            t.start()

    def reader(self):
        i = 0
        while not self.stop:
            with self.lock:
                k, v = list(self.acked.items())[(i * 7919) % len(self.acked)]
            i += 1
            try:
                got = self.clients[i % len(self.clients)].get_item(
                    TableName=TABLE, Key={"pk": {"S": k}}, ConsistentRead=True)
                if got.get("Item", {}).get("v", {}).get("S") != v:
                    with self.lock:
                        self.errors.append("strong read of %s: %s" % (k, got.get("Item")))
                self.reads += 1
            except Exception as e:
                with self.lock:
                    self.errors.append(repr(e)[:300])

    def eventual_reader(self, n):
        c, i = client(self.clients[n].meta.endpoint_url), 0
        while not self.stop:
            with self.lock:
                mine = self.by_node[n]
                if not mine:
                    time.sleep(0.01)  # polls: no write acknowledged through node n yet
                    continue
                # Mostly the newest writes: those a lagging replica would miss.
                k, v = mine[-1 - (i * 7919) % min(len(mine), 50)]
            i += 1
            try:
                got = c.get_item(TableName=TABLE, Key={"pk": {"S": k}})
                if got.get("Item", {}).get("v", {}).get("S") != v:
                    with self.lock:
                        self.errors.append("eventual read of %s through node %d: %s"
                                           % (k, n + 1, got.get("Item")))
                self.eventual += 1
            except Exception as e:
                with self.lock:
                    self.errors.append(repr(e)[:300])

    def scanner(self):
        i = 0
        while not self.stop:
            with self.lock:
                before = set(self.acked)
            i += 1
            try:
                keys = scan_all(self.clients[i % len(self.clients)], consistent=True)
                missed = before - set(keys)
                if missed or len(keys) != len(set(keys)):
                    with self.lock:
                        self.errors.append("scan: %d missed, %d duplicates" %
                                           (len(missed), len(keys) - len(set(keys))))
                self.scans += 1
            except Exception as e:
                with self.lock:
                    self.errors.append(repr(e)[:300])

    def writer(self, w, tag):
        i = 0
        while not self.stop:
            k, v = "%s%d-%d" % (tag, w, i), str(i)
            i += 1
            try:
                self.clients[w % len(self.clients)].put_item(
                    TableName=TABLE, Item={"pk": {"S": k}, "v": {"S": v}})
                with self.lock:
                    self.acked[k] = v
                    self.by_node[w % len(self.clients)].append((k, v))
            except Exception as e:
                with self.lock:
                    self.errors.append(repr(e)[:300])

    def end(self):
        self.stop = True
        for t in self.ts:
            t.join()
        assert not self.errors, "client errors during splits: %s" % self.errors[:5]


def child_reader(port, keys, stop, out):
    """Process body of ChildReads: GetItems of `keys` (key -> value) through one node until
    `stop` is set, eventually and strongly consistent in turn; puts (reads, retried,
    errors) on `out`."""
    conn, i, reads, retried, errors = None, 0, 0, 0, []
    headers = {"Content-Type": "application/x-amz-json-1.0",
               "X-Amz-Target": "DynamoDB_20120810.GetItem",
               "X-Amz-Date": "20261203T000000Z",
               "Authorization": "AWS4-HMAC-SHA256 Credential=x/20261203/us-east-1/dynamodb"
                                "/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"}
    order = sorted(keys)
    while not stop.is_set() and len(errors) < 20:
        k = order[i % len(order)]
        strong = i % 2 == 1
        i += 1
        try:
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/", json.dumps({"TableName": TABLE, "Key": {"pk": {"S": k}},
                                                  "ConsistentRead": strong}), headers)
            r = conn.getresponse()
            body = r.read()
            if r.status in (500, 503):
                retried += 1
                continue
            got = json.loads(body).get("Item", {}).get("v", {}).get("S")
            if r.status != 200 or got != keys[k]:
                errors.append("%s read of %s through :%d: %d %s"
                              % ("strong" if strong else "eventual", k, port, r.status,
                                 body[:200]))
            reads += 1
        except (OSError, http.client.HTTPException, ValueError) as e:
            errors.append("through :%d: %r" % (port, e))
            conn.close()
            conn = None
    out.put((reads, retried, errors))


class ChildReads:
    """GetItems, eventually and strongly consistent in turn, through every node (one process
    each, raw keep-alive HTTP: many more per second than boto3 threads) of the keys in the
    half of partition `pid` that its next split gives to the child: the reads a node's
    replica of the parent answers while the child has no fresh local replica yet, and the
    strong ones the parent's leader answers while the child has no leader yet. Each read
    must return the acknowledged item; 500 and 503 are retried (as clients do); any other
    answer is an error."""

    def __init__(self, nodes, pid, acked):
        p = [p for p in table_parts(nodes[0]) if p["id"] == pid][0]
        lo, hi = int(p["hash_lo"], 16), int(p["hash_hi"], 16)
        half = (hi - lo + 1) // 2
        assert half & (half - 1) == 0, "partition %d: range %x-%x not a power of two" % (
            pid, lo, hi)
        self.split_hash = lo + half
        # Scan segments cut the hash space into equal ranges: this one is the child's half.
        keys = set()
        kw = {"TableName": TABLE, "Segment": self.split_hash // half,
              "TotalSegments": 2 ** 64 // half, "ConsistentRead": True}
        c = client(nodes[0].url)
        while True:
            r = c.scan(**kw)
            keys |= {it["pk"]["S"] for it in r["Items"]}
            if "LastEvaluatedKey" not in r:
                break
            kw["ExclusiveStartKey"] = r["LastEvaluatedKey"]
        self.keys = {k: acked[k] for k in keys}
        assert len(self.keys) > 10, "only %d keys in the child half" % len(self.keys)
        self.stop, self.out = multiprocessing.Event(), multiprocessing.Queue()
        self.procs = [multiprocessing.Process(target=child_reader,
                                              args=(n.cport, self.keys, self.stop, self.out))
                      for n in nodes]
        for pr in self.procs:
            pr.start()

    def end(self):
        self.stop.set()
        results = [self.out.get(timeout=60) for _ in self.procs]
        for pr in self.procs:
            pr.join()
        self.reads = sum(r[0] for r in results)
        self.retried = sum(r[1] for r in results)
        errors = [e for r in results for e in r[2]]
        assert not errors, "reads of the child's keys: %s" % errors[:5]


def router_counters(nodes):
    """The routers' counters (GET /admin/cluster "router") summed over the nodes."""
    total = {}
    for n in nodes:
        for k, v in ((n.admin() or {}).get("router") or {}).items():
            total[k] = total.get(k, 0) + v
    return total


def split(node, pid):
    r = node.admin("/admin/split", {"partition": pid})
    assert r is not None and "child" in r, "split of %d refused: %s" % (pid, r)
    return r["child"]


def main():
    stratad = os.path.abspath(sys.argv[1])
    cli = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    work = tempfile.mkdtemp(prefix="strata-split-")
    ports = harness.free_ports(8)
    nodes = [Node(work, i + 1, "az%d" % (i % 3 + 1), ports[2 * i], ports[2 * i + 1], ports[1])
             for i in range(4)]
    fourth = nodes.pop()
    ok = False
    try:
        for n in nodes:
            n.start(stratad)
        poll(lambda: all((n.admin() or {}).get("ready") for n in nodes), "3 nodes ready")
        c = client(nodes[0].url)
        c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                       AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                       KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        poll(lambda: settled(nodes, 4), "4 partitions led and served everywhere")
        acked = {}
        for b in range(0, 600, 25):
            client(nodes[b // 25 % 3].url).batch_write_item(RequestItems={TABLE: [
                {"PutRequest": {"Item": {"pk": {"S": "p%04d" % i}, "v": {"S": "v%d" % i}}}}
                for i in range(b, b + 25)]})
        acked.update({"p%04d" % i: "v%d" % i for i in range(600)})

        load = Load(nodes, acked, "a")
        poll(lambda: len(acked) > 700, "writes flowing before the splits")
        t0 = time.time()
        parents = [p["id"] for p in table_parts(nodes[0])]
        children = [split(nodes[i % 3], pid) for i, pid in enumerate(parents)]
        poll(lambda: settled(nodes, 8), "8 partitions led and served everywhere")
        split_s = time.time() - t0
        hints = router_counters(nodes).get("flush_hints", 0)
        assert hints >= len(parents), "%d splits, only %d flush hints applied" % (
            len(parents), hints)
        before = len(acked)
        poll(lambda: len(acked) > before + 100, "writes keep flowing after the splits")
        load.end()
        counters = router_counters(nodes)
        log("split: 4 partitions -> 8 under load in %.1f s; %d writes acknowledged, %d strong "
            "and %d eventual reads, %d consistent 4-segment scans during the run, 0 client "
            "errors; routers: %s" % (split_s, len(acked), load.reads, load.eventual, load.scans,
                                     counters))
        check_all(nodes, acked, "after the splits")

        for n in nodes:
            n.stop()
        for n in nodes:
            n.start(stratad)
        poll(lambda: all((n.admin() or {}).get("ready") for n in nodes), "3 nodes ready again")
        poll(lambda: settled(nodes, 8), "8 partitions led after the restart")
        check_all(nodes, acked, "after restarting every node")

        load = Load(nodes, acked, "b")
        poll(lambda: len(acked) > before + 300, "writes flowing before the second split")
        t0 = time.time()
        if cli is not None:
            r = subprocess.run([cli, "--endpoint", nodes[1].url, "partition", "split",
                                str(children[0])], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, "strata partition split: %s %s" % (r.stdout, r.stderr)
            grandchild = json.loads(r.stdout)["child"]
        else:
            grandchild = split(nodes[1], children[0])
        poll(lambda: settled(nodes, 9), "9 partitions led and served everywhere")
        split2_s = time.time() - t0
        before = len(acked)
        poll(lambda: len(acked) > before + 100, "writes keep flowing after the second split")
        load.end()
        log("split of child %d (-> %d) under load in %.1f s, 0 client errors"
            % (children[0], grandchild, split2_s))
        check_all(nodes, acked, "after splitting a child")

        def compacted_whole(pid):
            for n in nodes:
                p = [p for p in table_parts(n) if p["id"] == pid]
                if not p or p[0].get("local", {}).get("snapshot_index", 0) < 2:
                    return False
            return True
        # Eventual reads of the keys the next split gives to its child, through every
        # node, while the split happens (reads do not make it any less idle: no writes).
        child_reads = ChildReads(nodes, parents[1], acked)
        via_before = router_counters(nodes).get("reads_via_parent", 0)
        strong_before = router_counters(nodes).get("strong_via_parent", 0)
        idle = split(nodes[2], parents[1])
        poll(lambda: settled(nodes, 10), "10 partitions led and served everywhere")
        child_reads.end()
        child = [p for p in table_parts(nodes[0]) if p["id"] == idle][0]
        assert int(child["hash_lo"], 16) == child_reads.split_hash, (child,
                                                                     child_reads.split_hash)
        via = router_counters(nodes).get("reads_via_parent", 0) - via_before
        strong_via = router_counters(nodes).get("strong_via_parent", 0) - strong_before
        # The paths under test ran: parents answered reads of the new child's keys.
        assert via > 0, "no eventual read of the child's keys went to a parent replica"
        assert strong_via > 0, "no strong read of the child's keys went to the parent"
        log("idle split of %d (-> %d): %d eventual and strong reads of the %d keys of the "
            "child's half through every node, all right (%d answers 5xx, retried); the "
            "parent's replica answered %d eventual ones, %d strong ones went to the parent"
            % (parents[1], idle, child_reads.reads, len(child_reads.keys), child_reads.retried,
               via, strong_via))
        poll(lambda: compacted_whole(idle), "idle child %d compacted whole everywhere" % idle)
        for n in nodes:
            n.stop()
        for n in nodes:
            n.start(stratad)
        poll(lambda: all((n.admin() or {}).get("ready") for n in nodes), "3 nodes ready again")
        poll(lambda: settled(nodes, 10), "10 partitions led after the restart (idle child)")
        check_all(nodes, acked, "after an idle split and a restart")
        idle2 = split(nodes[0], parents[2])
        t0 = time.time()
        fourth.start(stratad)
        nodes.append(fourth)

        def moved():
            a = nodes[0].admin() or {}
            reps = {n["id"]: n["replicas"] for n in a.get("nodes", [])}
            parts = [p for p in a.get("partitions", []) if p["table"] == TABLE]
            return (reps.get(4, 0) >= 4 and abs(reps.get(1, 0) - reps.get(4, 0)) <= 1 and
                    all(len(p["members"]) == 3 for p in parts))
        poll(lambda: len(table_parts(nodes[0])) == 11, "the second idle split in the map")
        poll(moved, "replicas spread to node 4 (children among them)", 120)
        log("idle children %d, %d; node 4 holds %s" % (idle, idle2, sorted(
            p["id"] for p in table_parts(nodes[0]) if any(
                m == 4 for m in p["members"]))))
        log("join: node 4 received %d replicas (children among them, by copy) in %.1f s"
            % ((nodes[0].admin() or {"nodes": []})["nodes"][3]["replicas"], time.time() - t0))
        check_all(nodes, acked, "after moving replicas to a new node")
        ok = True
        log("PASS")
    finally:
        ok = finish(nodes, work, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
