#!/usr/bin/python3
"""Replica moves on real stratad processes: a node joins, a node drains under load.

Usage: membership.py STRATAD STRATA
 1. Three nodes (az1..az3) form a cluster; a table of 8 partitions gets 1,000 items.
 2. A fourth node (az1, its own host label) joins: the scheduler moves replicas to it until
    replica counts are even (the two az1 nodes end with 4 each).
 3. `strata node drain 1` while writers run through every node: node 1 ends with no
    replica, clients see no error (boto3 with its standard retries), every acknowledged
    write reads back strongly, every partition has a leader, and node 1 drops its local
    replicas (each once the Raft configuration leaves it out, GET /admin/digests); while
    it does, GET /admin/cluster marks "lingering" exactly the local replicas whose
    partition no longer lists the node.
 4. `strata node activate 1` and, as soon as a move toward node 1 began, `strata node drain
    1` again: the moves toward it are abandoned and the drain ends.
    `strata node activate 1`: node 1 gets its share of replicas back (the engine of node 1
    flushes often, STRATA_MEMTABLE_BYTES, so its old replicas had durable indexes): the
    new replicas agree with the others (digests), then node 1 drains again.
    `strata node remove 1`: returns once node 1 runs no replica; node 1 is REMOVED; every
    partition's replicas agree (digests).
 5. A fifth node (az1) joins and gets its share; it is killed: the meta leader
    marks it DOWN after 10 s and, past replace_after (--replace-after 5 here), re-creates its
    replicas on the other az1 node; every write is still there.
 6. Node 5, drained while down, restarts with its data: its replicas, moved away while it
    was down, restart from their logs until their Raft groups let them go; its log ends
    holding no group (GET /admin/cluster "log": "unclaimed" 0) and its engine no item
    (GET /admin/digests "stray_items" 0). Activated, it gets 4 replicas back, equal to
    their peers; no node's log or engine holds anything of a replica it does not run.
Leader balance: after the join, after the drain and after the replacement, partition
leaders end within 1 of even over the nodes holding replicas (leaders follow the map's
leader hints, which the scheduler keeps balanced); `strata leader rebalance` answers
through any node, and `cluster status --all` shows leaders per node.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' directories.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3
import botocore.config

import harness

TABLE = "moves"
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
        self.killed = False  # on purpose: its exit status is not checked

    def start(self, stratad):
        cmd = [stratad, "--node-id", str(self.id), "--az", self.az, "--host-label",
               "h%d" % self.id, "--listen", "127.0.0.1:%d" % self.cport, "--peer-listen",
               "127.0.0.1:%d" % self.pport, "--data-dir", os.path.join(self.dir, "data"),
               "--initial-partitions", "8", "--replace-after", "5"]
        cmd += ["--bootstrap"] if self.id == 1 else ["--join", "127.0.0.1:%d" % self.seed]
        env = dict(os.environ)
        if self.id == 1:  # flushes often: its replicas have durable indexes when they leave
            env["STRATA_MEMTABLE_BYTES"] = "262144"
        with open(self.log, "a") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)

    def admin(self, path="/admin/cluster"):
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None


def removed_id_refused(stratad, work, seed):
    """A new data directory under the removed node 1's id is refused: the process stops
    with exit status 1 and says why (the id is never used again)."""
    d = os.path.join(work, "n1-again")
    cport, pport = harness.free_ports(2)
    cmd = [stratad, "--node-id", "1", "--az", "az1", "--host-label", "h1", "--listen",
           "127.0.0.1:%d" % cport, "--peer-listen", "127.0.0.1:%d" % pport, "--data-dir", d,
           "--join", "127.0.0.1:%d" % seed.pport]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert p.returncode == 1 and "node 1 was removed from the cluster" in p.stdout, \
        "a new node 1 after the removal: exit %d, %s" % (p.returncode, p.stdout[-500:])
    log("remove: a new directory under node 1's id was refused (exit 1)")


def client(url):
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x",
                        config=botocore.config.Config(retries={"max_attempts": 10,
                                                               "mode": "standard"}))


def replicas(node, nid):
    a = node.admin()
    for n in (a or {}).get("nodes", []):
        if n["id"] == nid:
            return n["replicas"], n["state"]
    return None, None


def lingering(node):
    """Replicas node still runs though the map no longer lists it (GET /admin/cluster's
    "lingering"), after checking that flag against the map on every local replica; None
    if the node does not answer."""
    a = node.admin()
    if a is None:
        return None
    n = 0
    for p in a.get("partitions", []):
        if "local" in p:
            want = node.id not in p["members"]
            assert p["local"].get("lingering") == want, \
                "node %d partition %d: lingering %s, members %s" % (
                    node.id, p["id"], p["local"].get("lingering"), p["members"])
            n += want
    return n


def holds_only(counts, what):
    """Polls until each (node, n) of counts runs n replicas, none lingering, and its log
    and engine hold nothing of any other replica."""
    seen = {}

    def only():
        for node, n in counts:
            seen[node.id] = h = harness.holdings(node)
            if h is None or len(h[0]) != n or h[1:] != (0, 0) or lingering(node) != 0:
                return False
        return True
    try:
        poll(only, what)
    except AssertionError:
        raise AssertionError("%s; last seen (replicas, unclaimed log groups, stray items): %s"
                             % (what, seen))


def all_led(node):
    a = node.admin()
    parts = [p for p in (a or {}).get("partitions", []) if p["table"] == TABLE]
    return len(parts) == 8 and all(p["leader"] for p in parts)


def leader_counts(nodes, ids):
    """{node id: partitions of TABLE it leads} over `ids`, from each live node's own view
    (a replica reporting itself leader; the highest term wins), or None while some
    partition has no leader or a node does not answer."""
    best = {}
    for n in nodes:
        if n.proc is None or n.killed or n.proc.poll() is not None:
            continue
        a = n.admin()
        if a is None:
            return None
        for p in a.get("partitions", []):
            loc = p.get("local")
            if p["table"] == TABLE and loc and loc["state"] == "leader":
                if p["id"] not in best or best[p["id"]][0] < loc["term"]:
                    best[p["id"]] = (loc["term"], n.id)
    if len(best) != 8:
        return None
    counts = {i: 0 for i in ids}
    for _, nid in best.values():
        if nid not in counts:
            return None
        counts[nid] += 1
    return counts


def leaders_even(nodes, ids, what):
    """Polls until leaders are within 1 of even over `ids`; returns the counts."""
    got = [None]

    def even():
        c = leader_counts(nodes, ids)
        got[0] = c
        return c is not None and max(c.values()) - min(c.values()) <= 1
    try:
        poll(even, "leaders within 1 of even over nodes %s %s" % (ids, what), 90)
    except AssertionError:
        raise AssertionError("leaders not even %s: %s" % (what, got[0]))
    log("leaders %s: %s" % (what, " ".join("%d:%d" % kv for kv in sorted(got[0].items()))))
    return got[0]


def main():
    stratad, cli = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="strata-moves-")
    ports = harness.free_ports(10)
    azs = ["az1", "az2", "az3", "az1", "az1"]
    nodes = [Node(work, i + 1, azs[i], ports[2 * i], ports[2 * i + 1], ports[1])
             for i in range(5)]
    ok = False
    try:
        for n in nodes[:3]:
            n.start(stratad)
        poll(lambda: all((n.admin() or {}).get("ready") for n in nodes[:3]), "3 nodes ready")
        c = client(nodes[0].url)
        c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                       AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                       KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        poll(lambda: all_led(nodes[0]), "every partition has a leader")
        acked = {}
        for b in range(0, 1000, 25):
            c.batch_write_item(RequestItems={TABLE: [
                {"PutRequest": {"Item": {"pk": {"S": "p%04d" % i}, "v": {"S": "v%d" % i}}}}
                for i in range(b, b + 25)]})
        acked.update({"p%04d" % i: "v%d" % i for i in range(1000)})

        t0 = time.time()
        nodes[3].start(stratad)
        poll(lambda: replicas(nodes[1], 4)[0] == 4 and replicas(nodes[1], 1)[0] == 4,
             "replicas spread evenly after node 4 joined (4 each on the az1 nodes)")
        log("join: node 4 received 4 replicas in %.1f s; node 1 kept 4; az2/az3 nodes 8 each"
            % (time.time() - t0))
        leaders_even(nodes, [1, 2, 3, 4], "after node 4 joined")
        # A table created through one node is usable through any other as soon as its
        # creator shows it ACTIVE, node 4 (outside the meta group: its map follows by
        # fetching) included, even when the name was just deleted and created again with
        # another key ("c" twice: with the same key). A node whose map lacks the table, or
        # holds an old one (a key that does not match, a table dropped under the write),
        # asks the meta leader and runs the request again before it answers an error;
        # ListTables and DescribeTable ask first.
        # Without that, node 4 answered ResourceNotFoundException in 19 of 20 rounds of a
        # create-then-use sequence, and in 8 to 9 of 10 after a delete and create.
        for i, (via, at, key) in enumerate([(0, 3, "a"), (3, 1, "b"), (1, 3, "c"), (2, 3, "c")]):
            cv, ca = client(nodes[via].url), client(nodes[at].url)
            cv.create_table(TableName="fresh", BillingMode="PAY_PER_REQUEST",
                            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}])
            assert "fresh" in ca.list_tables()["TableNames"], "round %d: not listed" % i
            poll(lambda: cv.describe_table(TableName="fresh")["Table"]["TableStatus"] == "ACTIVE",
                 "table fresh (round %d) ACTIVE through node %d" % (i, via + 1), 30, 0.01)
            ca.put_item(TableName="fresh", Item={key: {"S": "k"}, "v": {"S": str(i)}})
            got = ca.get_item(TableName="fresh", Key={key: {"S": "k"}}, ConsistentRead=True)
            assert got["Item"]["v"]["S"] == str(i), got
            cv.delete_table(TableName="fresh")  # the replica counts below are the 8 of TABLE
            poll(lambda: "fresh" not in cv.list_tables()["TableNames"], "table fresh gone", 30,
                 0.01)
            try:  # and gone through the other node at once
                ca.describe_table(TableName="fresh")
                raise AssertionError("round %d: table fresh still described" % i)
            except ca.exceptions.ResourceNotFoundException:
                pass
        log("tables created (and created again) through one node were usable at once through "
            "another (4 rounds)")
        # Every node counts every partition (from their leaders' figures), not only the
        # replicas it holds: nodes 1 and 4 hold half of them each.
        poll(lambda: all(client(n.url).describe_table(TableName=TABLE)["Table"]["ItemCount"]
                         == 1000 for n in nodes[:4]), "ItemCount 1000 through every node", 30)
        out = harness.strata(cli, nodes[2], "leader", "rebalance")
        assert "leader rebalance:" in out, out
        log(out.strip())
        out = harness.strata(cli, nodes[0], "leader", "rebalance")
        assert "leader rebalance:" in out, out
        leaders_even(nodes, [1, 2, 3, 4], "after `strata leader rebalance`")

        stop, errors, lock = [False], [], threading.Lock()
        clients = [client(n.url) for n in nodes]

        def writer(w):
            i = 0
            while not stop[0]:
                k, v = "w%d-%d" % (w, i), str(i)
                i += 1
                try:
                    clients[w % 4].put_item(TableName=TABLE, Item={"pk": {"S": k}, "v": {"S": v}})
                    with lock:
                        acked[k] = v
                except Exception as e:  # every error counts: a drain must show none
                    with lock:
                        errors.append(repr(e)[:300])
        ts = [threading.Thread(daemon=True, target=writer, args=(w,)) for w in range(4)]
        for t in ts:
            t.start()
        poll(lambda: len(acked) > 1050, "writes flowing before the drain")
        t0 = time.time()
        log(harness.strata(cli, nodes[1], "node", "drain", "1"))
        poll(lambda: replicas(nodes[1], 1)[0] == 0, "node 1 drained")
        drain_s = time.time() - t0
        poll(lambda: all_led(nodes[1]), "every partition has a leader after the drain")
        after = len(acked)
        poll(lambda: len(acked) > after + 50, "writes keep flowing after the last move")
        stop[0] = True
        for t in ts:
            t.join()
        assert not errors, "client errors during the drain: %s" % errors[:5]
        r = client(nodes[2].url)
        lost = [k for k, v in acked.items()
                if r.get_item(TableName=TABLE, Key={"pk": {"S": k}},
                              ConsistentRead=True).get("Item", {}).get("v", {}).get("S") != v]
        assert not lost, "%d acknowledged writes lost, e.g. %s" % (len(lost), lost[:5])
        log("drain: node 1 emptied in %.1f s under load; %d writes acknowledged, 0 errors, "
            "0 lost" % (drain_s, len(acked)))
        # A replica the map took away runs on until the Raft configuration leaves it out,
        # then goes (its leader answers STATUS_RELEASED, or its own configuration says so):
        # node 1 must end with none, or drained nodes would keep every replica for ever.
        t0 = time.time()
        poll(lambda: lingering(nodes[0]) == 0 and
             (nodes[0].admin("/admin/digests") or {}).get("replicas") == [],
             "node 1 drops the replicas it no longer holds in the map")
        assert all(lingering(n) == 0 for n in nodes[1:4]), "members marked lingering"
        log("drain: node 1 dropped its last replica %.1f s after the map emptied it"
            % (time.time() - t0))

        leaders_even(nodes, [2, 3, 4], "after node 1 drained")
        # Activated, and drained again as soon as the first move toward it began: a learner
        # added on node 1 can no longer be promoted (only ACTIVE nodes take replicas), so
        # the scheduler abandons that move (the learner removed) and the drain ends. It used
        # to retry the promotion for ever, the partition kept its learner and the drain
        # never ended.
        log(harness.strata(cli, nodes[1], "node", "activate", "1"))
        poll(lambda: (replicas(nodes[1], 1)[0] or 0) > 0, "a move toward node 1 began", 60,
             0.02)
        log(harness.strata(cli, nodes[1], "node", "drain", "1"))
        poll(lambda: replicas(nodes[1], 1)[0] == 0, "node 1 drained with a move toward it begun")
        poll(lambda: lingering(nodes[0]) == 0 and
             (nodes[0].admin("/admin/digests") or {}).get("replicas") == [],
             "node 1 drops the replicas it no longer holds in the map (again)")
        log("activate then drain at once: the moves toward node 1 were abandoned")
        # Back again: the replicas it gets now must be copies of the current state, never
        # its old replicas' indexes over the data deleted when they left.
        t0 = time.time()
        log(harness.strata(cli, nodes[1], "node", "activate", "1"))
        poll(lambda: replicas(nodes[1], 1)[0] == 4, "node 1 gets 4 replicas back after activate")
        poll(lambda: harness.digests_agree(nodes[0:4]), "replicas agree after node 1 came back")
        log("activate: node 1 got 4 replicas back, all equal to their peers, in %.1f s"
            % (time.time() - t0))
        log(harness.strata(cli, nodes[1], "node", "drain", "1"))
        poll(lambda: replicas(nodes[1], 1)[0] == 0, "node 1 drained again")
        leaders_even(nodes, [2, 3, 4], "after node 1 drained again")
        # The command returns once node 1 runs no replica (each one's Raft group let go of
        # it), so that it can be stopped then: nothing of it may linger after it.
        out = harness.strata(cli, nodes[1], "node", "remove", "1")
        log(out)
        assert "runs no replica and can be stopped" in out, out
        assert lingering(nodes[0]) == 0, "node 1 still runs replicas after node remove"
        poll(lambda: replicas(nodes[1], 1)[1] == "REMOVED", "node 1 REMOVED")
        removed_id_refused(stratad, work, nodes[1])
        poll(lambda: harness.digests_agree(nodes[1:4]), "replicas of every partition agree")
        status = harness.strata(cli, nodes[1], "cluster", "status", "--all")
        log(status)
        assert "leaders per node 1:0 2:" in status, status

        nodes[4].start(stratad)
        poll(lambda: replicas(nodes[1], 5)[0] == 4 and replicas(nodes[1], 4)[0] == 4,
             "node 5 (az1) receives half of az1's replicas")
        t0 = time.time()
        nodes[4].proc.kill()
        nodes[4].proc.wait()
        nodes[4].killed = True
        poll(lambda: replicas(nodes[1], 5)[1] == "DOWN", "node 5 marked DOWN", 60)
        poll(lambda: replicas(nodes[1], 5)[0] == 0 and replicas(nodes[1], 4)[0] == 8,
             "node 5's replicas re-created on node 4", 120)
        poll(lambda: all_led(nodes[1]), "every partition has a leader after the replacement")
        lost = [k for k, v in acked.items()
                if r.get_item(TableName=TABLE, Key={"pk": {"S": k}},
                              ConsistentRead=True).get("Item", {}).get("v", {}).get("S") != v]
        assert not lost, "%d writes lost after the replacement" % len(lost)
        poll(lambda: harness.digests_agree(nodes[1:4]), "replicas agree after the replacement")
        leaders_even(nodes, [2, 3, 4], "after node 5's replicas were re-created")
        log("down: node 5 killed; DOWN and its replicas re-created on node 4 within %.1f s; "
            "%d writes all there" % (time.time() - t0, len(acked)))

        # Node 5 comes back with its data, drained while it was down so that the map
        # gives it nothing: its replicas, all moved away meanwhile, each restart from their
        # logs until their groups let them go, with their data, so that no log group stays
        # behind pinning log segments. Activated, it gets 4 replicas back: fresh copies.
        t0 = time.time()
        log(harness.strata(cli, nodes[1], "node", "drain", "5"))
        nodes[4].killed = False
        nodes[4].start(stratad)
        poll(lambda: replicas(nodes[1], 5)[1] == "DRAINING", "node 5 back, DRAINING", 60)

        holds_only([(nodes[4], 0)], "node 5 back: it runs no replica, its log and engine "
                   "hold none")
        with open(nodes[4].log) as f:
            text = f.read()
        restarted = text.count("moved away while this node was down: its replica restarts")
        lost = text.count("moved away while this node was down, its state lost")
        assert restarted + lost == 4, "node 5 let %d + %d old replicas go, not 4" % (
            restarted, lost)
        log("back: node 5, drained while down, let its 4 old replicas go (%d restarted from "
            "their logs, %d with their state lost) within %.1f s"
            % (restarted, lost, time.time() - t0))
        log(harness.strata(cli, nodes[1], "node", "activate", "5"))
        # (nodes 2 and 3 are alone in their AZs)
        holds_only([(nodes[1], 8), (nodes[2], 8), (nodes[3], 4), (nodes[4], 4)],
                   "node 5 activated: nodes 2-5 run 8, 8, 4 and 4 replicas, their logs and "
                   "engines nothing of others")
        poll(lambda: harness.digests_agree(nodes[1:5]), "replicas agree after node 5 came back")
        log("back: node 5 activated: 4 replicas, equal to their peers, in %.1f s"
            % (time.time() - t0))
        ok = True
        log("membership: ok")
    finally:
        ok = harness.stop_nodes(nodes, ok, log, work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
