#!/usr/bin/python3
"""A 3-node cluster of real stratad processes on loopback, driven through boto3.

Usage: cluster.py STRATAD [WRITES_PER_PHASE]
Starts three stratad in cluster mode (node 1 bootstraps, 2 and 3 join; AZs az1..az3, host
labels h1..h3) on free ports in a temporary directory, then checks:
 a) a write through node 1 is seen by strongly consistent reads through nodes 2 and 3,
    and by eventually consistent reads on every node within a deadline;
 b) writers on every node (distinct keys, each write recorded as acknowledged or failed)
    while the leader of a partition is killed with SIGKILL: a new leader appears (the time
    is measured), writes resume (those waiting for the partition's leader as soon as the
    new one is known: the routers' woken_by_leader counter grows), clients only ever see
    retryable errors (HTTP 500/503, or a refused connection to the killed node), and every
    acknowledged write reads back strongly with its value;
 c) the killed node restarts, its replicas catch up (applied_index reaches the leader's
    commit_index), strong reads through it return every acknowledged write, and an
    eventually consistent read through it sees the last one;
 d) all three stop with SIGTERM (exit status 0), start again on the same directories, and
    every acknowledged write is still there;
 e) node 3 is killed, the others write until their logs are compacted past where node 3's
    end (small memtables: STRATA_MEMTABLE_BYTES), node 3 restarts and copies its partitions
    from live replicas (its log says so), and every partition's replicas end at one applied
    index with one digest (GET /admin/digests); node 2's engine reports its flushes (GET
    /admin/cluster "engine": flushes, compactions, write_stalls, paced_ms, memtables);
 f) CreateTable of different tables through the three nodes at once, round after round:
    every one succeeds (each node stamps the next free table id from its copy of the map;
    the loser of a clash re-stamps and proposes again) and every table has its own id;
    TagResource through the three nodes at once keeps every tag; DeleteTable of one table
    through the three at once deletes it, the others get ResourceNotFoundException;
 g) the node leading the most partitions stops with SIGTERM while writers write through the
    other two: it hands its leadership over first (its log says so), so the partitions it
    led have leaders on the others the moment it has exited, no client write fails, every
    acknowledged write reads back; it restarts and catches up;
 h) a node stopped with SIGTERM while the other two are frozen (SIGSTOP) waits for the
    hand-off only its bounded time, logs the groups it could not hand over, exits 0;
 i) holding every table of a) to f), once their leaders are within 1 of even again (the
    balancing after h)'s restart done), the node leading the most partitions stops with
    SIGTERM alone, idle: the other two then lead within 2 of even (its partitions spread,
    fewest first); then the other two stop with SIGTERM at once: each exits 0 and neither
    hands leaderships to the other (no "not handed over in time" or "did not move" in
    their logs, each hand-off wait under an election timeout).
New table: every partition has a leader less than an election timeout (1 s) after
CreateTable returns (the node the map names its leader campaigns at once).
Leader balance: after the table is created, after the killed node restarted (c) and after
the whole cluster restarted (d), the partitions' leaders end within 1 of even over the three
nodes (leaders follow the map's balanced leader hints once the replicas are caught up).
Peer links: every node reports its link to each other node (GET /admin/cluster "link"),
with frames both ways; nodes 1 and 2 count node 3's lost connection (e) and the new one.
Loop lag: node 2, stopped for 0.4 s, reports the delay of its loop (GET /admin/cluster
"loop": one more delay over 50 ms, the longest at least 300 ms).
Ends with a summary: writes acknowledged, errors by type, leader failover time, the
longest loop lag a node reports (GET /admin/cluster "loop").
Every wait polls a condition with a deadline.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3
import botocore.config
import botocore.exceptions

import harness

TABLE = "cluster_kv"
NODES = 3
START_DEADLINE_S = 90      # a node serves and the cluster is ready (ASan builds are slow)
LEADERS_DEADLINE_S = 60    # every partition of a new table has a leader
FAILOVER_DEADLINE_S = 20   # contract: ~2 election timeouts of 1 s; generous under ASan
CATCHUP_DEADLINE_S = 60
EVENTUAL_DEADLINE_S = 20
ELECTION_TIMEOUT_S = 1.0   # stratad's (cluster/router.h): a replica waits [1, 2) s


def log(*args):
    print(*args, flush=True)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def free_ports(n):
    """n distinct free TCP ports: all bound at once, so none repeats."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def poll(cond, deadline_s, what, interval=0.1):
    """Calls cond() until it returns a true value (returned), or fails after deadline_s."""
    end = time.time() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        if time.time() >= end:
            raise Failure("timed out after %ss: %s" % (deadline_s, what))
        time.sleep(interval)


class Node:
    def __init__(self, cluster, nid, cport, pport):
        self.cluster, self.id, self.cport, self.pport = cluster, nid, cport, pport
        self.dir = os.path.join(cluster.work, "n%d" % nid)
        self.log_path = os.path.join(self.dir, "stratad.log")
        self.url = "http://127.0.0.1:%d" % cport
        self.proc = None
        self.killed = False  # set before SIGKILL: Popen.poll() races with wait()
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)

    def command(self):
        c = self.cluster
        cmd = [c.stratad, "--node-id", str(self.id), "--az", "az%d" % ((self.id - 1) % 3 + 1),
               "--host-label", "h%d" % self.id, "--listen", "127.0.0.1:%d" % self.cport,
               "--peer-listen", "127.0.0.1:%d" % self.pport,
               "--data-dir", os.path.join(self.dir, "data"), "--initial-partitions", "4"]
        if self.id == 1:
            cmd += ["--bootstrap", "--bootstrap-expect", str(NODES)]
        else:
            cmd += ["--join", "127.0.0.1:%d" % c.nodes[0].pport]
        return cmd

    def start(self):
        logf = open(self.log_path, "a")
        logf.write("==== %s\n" % " ".join(self.command()))
        logf.flush()
        self.log_offset = logf.tell()
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        logf.close()
        self.killed = False

    def serving(self):
        """True once this run of stratad printed its serving line; fails if it exited."""
        if self.proc.poll() is not None:
            raise Failure("node %d exited with status %d while starting" %
                          (self.id, self.proc.returncode))
        with open(self.log_path) as f:
            f.seek(self.log_offset)
            return re.search(r"stratad: serving on http://", f.read()) is not None

    def alive(self):
        return self.proc is not None and not self.killed and self.proc.poll() is None

    def admin(self, path="/admin/cluster"):
        """GET `path` (JSON) as a dict, or None when the node does not answer."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=3) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def kill9(self):
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout=60):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)\n"


class Cluster:
    def __init__(self, stratad, work):
        self.stratad, self.work = stratad, work
        ports = free_ports(2 * NODES)
        self.nodes = []
        for i in range(NODES):
            self.nodes.append(Node(self, i + 1, ports[i], ports[NODES + i]))

    def node(self, nid):
        return self.nodes[nid - 1]

    def live(self):
        return [n for n in self.nodes if n.alive()]

    def start(self, nodes=None):
        nodes = nodes or self.nodes
        for n in nodes:
            n.start()
        for n in nodes:
            poll(n.serving, START_DEADLINE_S, "node %d serves" % n.id)
        for n in nodes:
            poll(lambda: (n.admin() or {}).get("ready") is True, START_DEADLINE_S,
                 "node %d reports ready" % n.id)

    def partitions(self, table=TABLE):
        """The table's partitions as the first live node that answers sees them."""
        for n in self.live():
            a = n.admin()
            if a is not None:
                return [p for p in a.get("partitions", []) if p.get("table") == table]
        return []

    def local_views(self, pid):
        """{node id: partition entry with 'local'} for partition pid, from every live member."""
        views = {}
        for n in self.live():
            for p in (n.admin() or {}).get("partitions", []):
                if p.get("id") == pid and "local" in p:
                    views[n.id] = p
        return views

    def leader_of(self, pid, exclude=()):
        """The node that itself reports being partition pid's leader (not in exclude), or None."""
        for nid, p in self.local_views(pid).items():
            if nid not in exclude and p["local"].get("state") == "leader":
                return nid
        return None

    def kill_all(self):
        for n in self.nodes:
            if n.alive():
                n.proc.kill()
                n.proc.wait()


def client(url, retries):
    """retries=False: one attempt, so the test sees every error a request meets."""
    if retries:
        r = {"mode": "standard", "total_max_attempts": 10}
    else:
        r = {"total_max_attempts": 1}
    cfg = botocore.config.Config(retries=r, connect_timeout=3, read_timeout=15)
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test", config=cfg)


def create_table(c, cl):
    c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    created = time.monotonic()
    poll(lambda: c.describe_table(TableName=TABLE)["Table"]["TableStatus"] == "ACTIVE",
         LEADERS_DEADLINE_S, "table ACTIVE")

    def all_led():
        ps = cl.partitions()
        return ps and all(len(p["members"]) == 3 and cl.leader_of(p["id"]) for p in ps)
    poll(all_led, LEADERS_DEADLINE_S, "every partition of %s has a leader" % TABLE, 0.02)
    led_s = time.monotonic() - created
    # The node the map names a new partition's leader stands for election at once: no
    # replica waits out an election timeout (1 s) before the table takes writes.
    check(led_s < ELECTION_TIMEOUT_S,
          "every partition of a new table has a leader within an election timeout "
          "(%.2f s)" % led_s)
    ps = cl.partitions()
    az_of = {n["id"]: n["az"] for n in cl.node(1).admin()["nodes"]}
    for p in ps:
        azs = {az_of.get(m) for m in p["members"]}
        check(len(azs) == 3, "partition %d has replicas in 3 AZs: %s" % (p["id"], p))
    log("table %s: %d partitions, leaders %s, all led %.3f s after CreateTable" %
        (TABLE, len(ps), {p["id"]: cl.leader_of(p["id"]) for p in ps}, led_s))


def leaders_even(cl, what):
    """Polls until every partition has a leader and the counts per node are within 1 of
    even over the three nodes."""
    got = [None]

    def even():
        ps = cl.partitions()
        counts = {n.id: 0 for n in cl.nodes}
        for p in ps:
            lead = cl.leader_of(p["id"])
            if lead is None:
                return False
            counts[lead] += 1
        got[0] = counts
        return bool(ps) and max(counts.values()) - min(counts.values()) <= 1
    try:
        poll(even, LEADERS_DEADLINE_S + 30, "leaders within 1 of even %s" % what, 0.3)
    except Failure as e:
        raise Failure("%s (last counts: %s)" % (e, got[0]))
    log("leaders %s: %s" % (what, " ".join("%d:%d" % kv for kv in sorted(got[0].items()))))


def get(c, key, consistent):
    r = c.get_item(TableName=TABLE, Key={"pk": {"S": key}}, ConsistentRead=consistent)
    return r.get("Item", {}).get("v", {}).get("S")


def part_a(cl):
    c1 = client(cl.node(1).url, True)
    c1.put_item(TableName=TABLE, Item={"pk": {"S": "a-key"}, "v": {"S": "a-value"}})
    for nid in (2, 3):
        got = get(client(cl.node(nid).url, True), "a-key", True)
        check(got == "a-value", "strong read through node %d: %r" % (nid, got))
    for n in cl.nodes:
        c = client(n.url, True)
        poll(lambda: get(c, "a-key", False) == "a-value", EVENTUAL_DEADLINE_S,
             "eventual read on node %d sees the write" % n.id)
    log("a) ok: write via node 1, strong reads via nodes 2 and 3, eventual reads on all")


class Load:
    """Writers with distinct keys; each write is recorded as acknowledged or failed."""

    def __init__(self, cl, threads_per_node=2, via=None):
        """Writers through the nodes `via` (node ids; default all), threads_per_node each."""
        self.cl = cl
        via = via or [n.id for n in cl.nodes]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked = {}       # key -> value, acknowledged writes
        self.ack_times = []   # when each acknowledgement arrived
        self.errors = {}      # error class -> count
        self.bad = []         # errors that must never happen
        self.threads = [threading.Thread(daemon=True, target=self.writer, args=(w, via[w % len(via)]))
                        for w in range(threads_per_node * len(via))]

    def record_error(self, kind, detail=None):
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if detail is not None:
                self.bad.append(detail)

    def writer(self, wid, nid):
        clients = {n.id: client(n.url, False) for n in self.cl.nodes}
        i = 0
        while not self.stop.is_set():
            key, value = "w%d-%d" % (wid, i), "v%d-%d-%s" % (wid, i, "x" * (i % 200))
            i += 1
            node = self.cl.node(nid)
            try:
                clients[nid].put_item(TableName=TABLE,
                                      Item={"pk": {"S": key}, "v": {"S": value}})
            except botocore.exceptions.ReadTimeoutError as e:
                self.record_error("read timeout", "node %d: %s" % (nid, e))
                continue
            except (botocore.exceptions.ConnectionError,
                    botocore.exceptions.HTTPClientError) as e:
                if node.alive():
                    self.record_error("connection error (live node)",
                                      "node %d: %s" % (nid, e))
                else:
                    # A client of the killed node moves on to the next node.
                    self.record_error("connection refused (killed node)")
                    nid = nid % NODES + 1
                continue
            except botocore.exceptions.ClientError as e:
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                code = e.response.get("Error", {}).get("Code")
                kind = "HTTP %s %s" % (status, code)
                self.record_error(kind, None if status in (500, 503) else
                                  "node %d: %s" % (nid, e))
                continue
            with self.lock:
                self.acked[key] = value
                self.ack_times.append(time.time())

    def acks_since(self, t):
        with self.lock:
            return sum(1 for x in self.ack_times if x >= t)

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


def read_back(cl, acked, via):
    """Every acknowledged write, read strongly through the nodes `via` in turn."""
    clients = [client(cl.node(nid).url, True) for nid in via]
    wrong = []
    for i, (key, value) in enumerate(sorted(acked.items())):
        got = get(clients[i % len(clients)], key, True)
        if got != value:
            wrong.append((key, got))
    check(not wrong, "%d of %d acknowledged writes wrong or missing, e.g. %s" %
          (len(wrong), len(acked), wrong[:5]))


def errors_text(load):
    if not load.errors:
        return "none"
    return ", ".join("%s: %d" % kv for kv in sorted(load.errors.items()))


def woken_by_leader(cl, exclude):
    """The routers' woken_by_leader counters (GET /admin/cluster), summed over the live
    nodes but `exclude`."""
    return sum(((n.admin() or {}).get("router") or {}).get("woken_by_leader", 0)
               for n in cl.live() if n.id != exclude)


def part_b(cl, phase_writes):
    load = Load(cl)
    load.start()
    try:
        poll(lambda: len(load.acked) >= phase_writes, 120,
             "%d writes acknowledged before the kill" % phase_writes)
        ps = cl.partitions()
        victim_part = ps[0]["id"]
        victim = cl.leader_of(victim_part)
        check(victim is not None, "partition %d has a leader" % victim_part)
        acked_before = len(load.acked)
        woken_before = woken_by_leader(cl, exclude=victim)
        t_kill = time.time()
        cl.node(victim).kill9()
        log("b) killed node %d (leader of partition %d) after %d acknowledged writes" %
            (victim, victim_part, acked_before))
        new_leader = poll(lambda: cl.leader_of(victim_part, exclude=(victim,)),
                          FAILOVER_DEADLINE_S, "a new leader of partition %d" % victim_part,
                          0.02)
        failover_s = time.time() - t_kill
        log("b) new leader of partition %d: node %d after %.2f s" %
            (victim_part, new_leader, failover_s))
        t_new = time.time()
        # Writes must resume: every writer, whatever partition its keys hash to, goes on.
        poll(lambda: load.acks_since(t_new) >= phase_writes, 120,
             "%d writes acknowledged after the failover" % phase_writes)
        # Writes that waited for the partition's leader ran as soon as it was known, not
        # at the end of their backoff (the routers' woken_by_leader counter).
        woken = woken_by_leader(cl, exclude=victim) - woken_before
        check(woken > 0, "no write was woken by the new leader's election")
        log("b) %d waiting attempts ran as soon as the new leader was known" % woken)
    finally:
        load.finish()
    log("b) writes acknowledged %d; client errors: %s" % (len(load.acked), errors_text(load)))
    check(not load.bad, "non-retryable client errors: %s" % load.bad[:5])
    read_back(cl, load.acked, [n.id for n in cl.live()])
    log("b) ok: %d acknowledged writes read back strongly" % len(load.acked))
    return load, victim, failover_s


def caught_up(cl, nid):
    """True when every partition node nid is a member of has applied the leader's commit."""
    n = cl.node(nid)
    a = n.admin()
    if a is None or not a.get("ready"):
        return False
    mine = [p for p in a.get("partitions", []) if nid in p.get("members", [])]
    if not mine:
        return False
    for p in mine:
        if "local" not in p:
            return False
        leader = cl.leader_of(p["id"])
        if leader is None:
            return False
        if leader == nid:
            continue
        lv = cl.local_views(p["id"]).get(leader)
        if lv is None or p["local"]["applied_index"] < lv["local"]["commit_index"]:
            return False
    return True


def part_c(cl, load, victim):
    t0 = time.time()
    cl.start([cl.node(victim)])
    poll(lambda: caught_up(cl, victim), CATCHUP_DEADLINE_S,
         "node %d's replicas reach their leaders' commit_index" % victim, 0.2)
    catchup_s = time.time() - t0
    read_back(cl, load.acked, [victim])
    c = client(cl.node(victim).url, True)
    last = sorted(load.acked.items())[-1]
    poll(lambda: get(c, last[0], False) == last[1], EVENTUAL_DEADLINE_S,
         "eventual read through node %d" % victim)
    leaders_even(cl, "after node %d restarted" % victim)
    log("c) ok: node %d restarted, caught up in %.2f s, strong and eventual reads through it" %
        (victim, catchup_s))
    return catchup_s


def stop_all(cl, deadline_s=60, nodes=None):
    """SIGTERM to every node (or those of `nodes`) at once; returns the problems (exit
    status not 0, still running)."""
    nodes = cl.nodes if nodes is None else nodes
    for n in nodes:
        n.proc.send_signal(signal.SIGTERM)
    end = time.time() + deadline_s
    problems = []
    for n in nodes:
        try:
            rc = n.proc.wait(timeout=max(0.1, end - time.time()))
            if rc != 0:
                problems.append("node %d exited with %d on SIGTERM (want 0)" % (n.id, rc))
        except subprocess.TimeoutExpired:
            problems.append("node %d still running %d s after SIGTERM" % (n.id, deadline_s))
            n.proc.kill()
            n.proc.wait()
    return problems


def log_since_start(node):
    with open(node.log_path, errors="replace") as f:
        return f.read()[node.log_offset:]


def part_d(cl, load):
    # A node that does not stop cleanly is a failure, reported after the data check so
    # that one run says both.
    problems = stop_all(cl)
    for p in problems:
        log("d) " + p)
    cl.start()
    c = client(cl.node(1).url, True)
    check(TABLE in c.list_tables()["TableNames"], "table %s after restart" % TABLE)
    poll(lambda: all(cl.leader_of(p["id"]) for p in cl.partitions()), LEADERS_DEADLINE_S,
         "every partition has a leader after the restart", 0.2)
    acked = dict(load.acked)
    acked["a-key"] = "a-value"
    read_back(cl, acked, [1, 2, 3])
    log("d) all 3 restarted after SIGTERM; %d writes still there" % len(acked))
    leaders_even(cl, "after all 3 restarted")
    check(not problems, "; ".join(problems))
    log("d) ok: all 3 stopped cleanly with SIGTERM")


def digests_agree(cl):
    """True when every partition's replicas are at one applied index with one digest."""
    return harness.digests_agree(cl.nodes)


def part_e(cl):
    """A replica behind a compacted log catches up by copying its partitions."""
    victim = cl.node(3)
    # Where node 3's logs end: the leaders must compact beyond that (plus the 128
    # entries they keep below a compaction point) for node 3 to need a copy.
    before = {p["id"]: max(p["local"]["last_index"], p["local"]["snapshot_index"])
              for p in victim.admin()["partitions"] if "local" in p}
    victim.kill9()
    c = client(cl.node(2).url, True)
    written = 0

    def compacted_past():
        views = [cl.local_views(pid) for pid in before]
        return all(any(v["local"]["snapshot_index"] > before[pid] + 200 for v in view.values())
                   for pid, view in zip(before, views))
    deadline = time.time() + 300
    while not compacted_past():
        check(time.time() < deadline, "logs compacted while node 3 is down")
        items = [{"PutRequest": {"Item": {"pk": {"S": "e%06d" % (written + i)},
                                          "v": {"S": "x" * 500}}}} for i in range(25)]
        c.batch_write_item(RequestItems={TABLE: items})
        written += 25
    t0 = time.time()
    cl.start([victim])
    poll(lambda: caught_up(cl, 3), CATCHUP_DEADLINE_S, "node 3 catches up after compaction", 0.2)
    with open(victim.log_path) as f:
        copies = f.read()[victim.log_offset:].count(" copied from node ")
    check(copies > 0, "node 3 copied partitions from a live replica (log says so)")
    poll(lambda: digests_agree(cl), CATCHUP_DEADLINE_S,
         "every partition's replicas at one applied index with one digest", 0.5)
    engine = cl.node(2).admin()["engine"]
    keys = {"flushes", "compactions", "write_stalls", "paced_ms", "memtables",
            "memtable_bytes", "level0_files"}
    check(keys <= set(engine) and engine["flushes"] > 0,
          "node 2 reports its engine's flushes (GET /admin/cluster \"engine\"): %s" % engine)
    log("e) ok: %d items written while node 3 was down; it copied %d partitions in %.2f s; "
        "replicas' digests agree; node 2's engine: %s" % (written, copies, time.time() - t0,
                                                          engine))


def check_links(cl):
    """Every node reports its peer links (GET /admin/cluster, "link" on each other node):
    traffic both ways on each, and on nodes 1 and 2, which stayed up since (d), the loss
    of node 3's connection when it was killed in (e) and the connection made again."""
    for n in cl.live():
        view = {m["id"]: m for m in n.admin()["nodes"]}
        check("link" not in view[n.id], "node %d reports no link to itself" % n.id)
        for other in cl.live():
            if other.id == n.id:
                continue
            link = view[other.id].get("link") or {}
            check(link.get("frames_sent", 0) > 0 and link.get("frames_received", 0) > 0,
                  "node %d's link to node %d carried frames both ways: %s" %
                  (n.id, other.id, link))
            if other.id == 3:
                check(link["connect_failures"] >= 1 and link["connects"] >= 2,
                      "node %d's link to node 3 counts the loss and the new connection: %s"
                      % (n.id, link))
    log("links: node 1 -> node 3: %s" %
        next(m["link"] for m in cl.node(1).admin()["nodes"] if m["id"] == 3))


def check_loop_lag(cl):
    """A node whose loop is held up reports it: node 2 is stopped (SIGSTOP) for 0.4 s, and
    then GET /admin/cluster "loop" counts one more delay over 50 ms and a longest delay of
    at least 300 ms."""
    n = cl.node(2)
    before = n.admin()["loop"]
    n.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(0.4)  # the stall under test, not a wait for an event
    finally:
        n.proc.send_signal(signal.SIGCONT)

    def stall_counted():
        loop = (n.admin() or {}).get("loop") or before
        return loop if loop["lags_over_50ms"] > before["lags_over_50ms"] else None
    after = poll(stall_counted, 10, "node 2 reports its 0.4 s stall")
    check(after["lag_max_ms"] >= 300,
          "node 2's longest loop delay covers the 0.4 s stall: %s (before %s)" % (after, before))
    log("loop lag: node 2 stopped for 0.4 s reports %s (before %s)" % (after, before))


def part_f(cl, rounds=4):
    clients = [client(n.url, True) for n in cl.nodes]
    errors, names = [], []

    def create(c, name):
        try:
            c.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                           AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                           KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}])
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            errors.append("%s: %s" % (name, e))
    for r in range(rounds):
        batch = ["concurrent-%d-%d" % (r, i) for i in range(len(clients))]
        names += batch
        ts = [threading.Thread(daemon=True, target=create, args=(c, n))
              for c, n in zip(clients, batch)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    check(not errors, "concurrent CreateTable failed: %s" % errors[:3])
    ids = {clients[0].describe_table(TableName=n)["Table"]["TableId"] for n in names}
    check(len(ids) == len(names), "%d tables share %d ids" % (len(names), len(ids)))
    log("f) ok: %d tables created %d at a time through the 3 nodes, all with their own id" %
        (len(names), len(clients)))

    # One name through the three at once: one creates it, the others hear DynamoDB's
    # answer, whichever of the map's checks refused them.
    for r in range(3):
        name, got = "same-%d" % r, []

        def create_same(c):
            try:
                c.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                               AttributeDefinitions=[{"AttributeName": "k",
                                                      "AttributeType": "S"}],
                               KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}])
                got.append("created")
            except botocore.exceptions.ClientError as e:
                got.append("%s: %s" % (e.response["Error"]["Code"], e.response["Error"]["Message"]))
        ts = [threading.Thread(daemon=True, target=create_same, args=(c,)) for c in clients]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        refused = "ResourceInUseException: Table already exists: %s" % name
        check(got.count("created") == 1 and got.count(refused) == len(clients) - 1,
              "CreateTable of one name through 3 nodes at once: %s" % got)
    log("f) ok: one name created through the 3 nodes at once, 3 times: one created it, the "
        "others were told 'Table already exists'")

    # Table changes at once through every node: each one is made on the state the
    # others left (the map refuses a change built on an older one, and it is made again),
    # so none is lost; a table deleted by several at once is deleted by one, and the
    # others are told it is not there.
    arn = clients[0].describe_table(TableName=names[0])["Table"]["TableArn"]
    per_node = 4

    def tag(c, nid):
        for i in range(per_node):
            try:
                c.tag_resource(ResourceArn=arn, Tags=[{"Key": "n%d-%d" % (nid, i), "Value": "v"}])
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
                errors.append("TagResource: %s" % e)
    ts = [threading.Thread(daemon=True, target=tag, args=(c, i + 1)) for i, c in enumerate(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "concurrent TagResource failed: %s" % errors[:3])
    for c in clients:
        keys = {t["Key"] for t in c.list_tags_of_resource(ResourceArn=arn)["Tags"]}
        check(len(keys) == per_node * len(clients),
              "%d of %d tags made at once survive" % (len(keys), per_node * len(clients)))
    outcomes = []

    def delete(c):
        try:
            c.delete_table(TableName=names[1])
            outcomes.append("deleted")
        except botocore.exceptions.ClientError as e:
            outcomes.append(e.response["Error"]["Code"])
    ts = [threading.Thread(daemon=True, target=delete, args=(c,)) for c in clients]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(outcomes.count("deleted") >= 1 and
          all(o in ("deleted", "ResourceNotFoundException") for o in outcomes),
          "DeleteTable through 3 nodes at once: %s" % outcomes)
    log("f) ok: %d tags made at once through the 3 nodes all kept; DeleteTable at once: %s" %
        (per_node * len(clients), sorted(outcomes)))


def run_on_cluster(stratad, prefix, body, errors=()):
    """Calls body(cl) with a Cluster (not started) of `stratad` in a new temporary
    directory. A Failure, a boto error or one of `errors` it raises is the test's failure:
    logged, with the tail of every node's log. The nodes are killed and the directory
    removed in any case. Returns the exit status: 0 when body returned."""
    work = tempfile.mkdtemp(prefix=prefix)
    cl = Cluster(os.path.abspath(stratad), work)
    ok = False
    try:
        body(cl)
        ok = True
    except (Failure, botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError) + tuple(errors) as e:
        log("FAIL: %s" % e)
    finally:
        cl.kill_all()
        if not ok:
            for n in cl.nodes:
                sys.stderr.write("---- node %d log tail ----\n%s" % (n.id, n.tail()))
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def part_g(cl, phase_writes):
    """SIGTERM to the node leading the most partitions, under writes through the others:
    it hands its leadership over before it goes."""
    ps = cl.partitions()
    leads = {}
    for p in ps:
        leads.setdefault(cl.leader_of(p["id"]), []).append(p["id"])
    victim = max((nid for nid in leads if nid is not None), key=lambda nid: len(leads[nid]))
    led = leads[victim]
    node = cl.node(victim)
    load = Load(cl, via=[n.id for n in cl.nodes if n.id != victim])
    load.start()
    try:
        poll(lambda: len(load.acked) >= phase_writes, 120,
             "%d writes acknowledged before the stop" % phase_writes)
        rc = node.stop()
        check(rc == 0, "node %d exited with %d on SIGTERM (want 0)" % (victim, rc))
        # One look, no waiting: before it exited, every partition it led had a new leader
        # that had been heard from (without the hand-off: an election timeout from now).
        after = {pid: cl.leader_of(pid, exclude=(victim,)) for pid in led}
        check(all(after.values()), "the partitions node %d led have leaders on the other "
              "nodes as soon as it has stopped: %s" % (victim, after))
        m = re.findall(r"handed the leadership of (\d+) Raft groups to other nodes in "
                       r"(\d+) ms", log_since_start(node))
        check(m and int(m[-1][0]) >= len(led), "node %d logs handing over the leadership of "
              "its %d partitions: %s" % (victim, len(led), m))
        t = time.time()
        poll(lambda: load.acks_since(t) >= phase_writes, 120,
             "%d writes acknowledged after the stop" % phase_writes)
    finally:
        load.finish()
    check(not load.errors, "client errors through the other nodes: %s" % errors_text(load))
    read_back(cl, load.acked, [n.id for n in cl.live()])
    log("g) node %d (leader of partitions %s) stopped with SIGTERM: handed %s Raft groups over "
        "in %s ms, new leaders %s; %d writes through the others, no error" %
        (victim, led, m[-1][0], m[-1][1], after, len(load.acked)))
    cl.start([node])
    poll(lambda: caught_up(cl, victim), CATCHUP_DEADLINE_S,
         "node %d's replicas reach their leaders' commit_index" % victim, 0.2)
    log("g) ok: node %d restarted and caught up" % victim)


def part_h(cl):
    """SIGTERM while both other nodes are frozen (SIGSTOP): no voter can take the lead, so
    the node waits for the hand-off only its bounded time (1.5 s), says so, and exits 0."""
    victim = max(cl.nodes, key=lambda n: sum(1 for p in cl.partitions()
                                             if cl.leader_of(p["id"]) == n.id))
    others = [n for n in cl.nodes if n is not victim]
    for n in others:
        n.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.time()
        rc = victim.stop()
        took = time.time() - t0
    finally:
        for n in others:
            n.proc.send_signal(signal.SIGCONT)
    check(rc == 0, "node %d exited with %d on SIGTERM (want 0)" % (victim.id, rc))
    late = re.findall(r"(\d+) Raft groups not handed over in time", log_since_start(victim))
    check(late, "node %d says which groups it could not hand over" % victim.id)
    log("h) node %d, the others frozen: stopped in %.2f s, %s Raft groups not handed over" %
        (victim.id, took, late[-1]))
    cl.start([victim])
    poll(lambda: caught_up(cl, victim.id), CATCHUP_DEADLINE_S,
         "node %d's replicas reach their leaders' commit_index" % victim.id, 0.2)
    log("h) ok: node %d restarted and caught up" % victim.id)


def leads(cl):
    """{live node id: how many partitions, of every table, it reports leading}."""
    return {n.id: sum(1 for p in (n.admin() or {}).get("partitions", [])
                      if p.get("local", {}).get("state") == "leader") for n in cl.live()}


def part_i(cl):
    """The cluster, holding the 12 tables a) to f) leave, stops: first the node leading the
    most partitions alone, while idle: it spreads them over the other two (fewest first),
    which then lead within 2 of even; then the other two with SIGTERM at once: each tells
    the other it is going, so neither hands its groups to the other (they would pass them
    around until the hand-off's 1.5 s ran out, then say which groups they could not hand
    over)."""
    # Idle: the leader balancing that follows h)'s restart has finished (its transfers,
    # still in flight, would otherwise add to the hand-off's and skew the spread).
    groups = len((cl.nodes[0].admin() or {}).get("partitions", []))
    got = [None]

    def settled():
        got[0] = leads(cl)
        return (len(got[0]) == 3 and sum(got[0].values()) == groups and
                max(got[0].values()) - min(got[0].values()) <= 1)
    try:
        poll(settled, LEADERS_DEADLINE_S + 30, "leaders of every table within 1 of even", 0.3)
    except Failure as e:
        raise Failure("%s (last counts: %s of %d)" % (e, got[0], groups))
    before = got[0]
    victim = cl.node(max(before, key=before.get))
    rc = victim.stop()
    check(rc == 0, "node %d exited with %d on SIGTERM (want 0)" % (victim.id, rc))
    after = leads(cl)  # one look: the hand-off waited for every new leader
    check(sum(after.values()) == groups and max(after.values()) - min(after.values()) <= 2,
          "node %d's partitions spread over the others: leaders %s before, %s after" %
          (victim.id, before, after))
    log("i) node %d stopped alone: partitions led %s -> %s" % (victim.id, before, after))
    rest = cl.live()
    marks = {n.id: len(log_since_start(n)) for n in rest}
    t0 = time.time()
    problems = stop_all(cl, nodes=rest)
    took = time.time() - t0
    waits = {}
    for n in rest:
        text = log_since_start(n)[marks[n.id]:]
        late = re.findall(r"\d+ Raft groups not handed over in time", text)
        moved = re.findall(r"partition \d+: leadership did not move to node \d+", text)
        handed = re.findall(r"handed the leadership of \d+ Raft groups to other nodes in "
                            r"(\d+) ms", text)
        # A group handed to a stopping node that then cannot hand it on waits out an
        # election timeout (the transfer's bound) at least: the node's wait shows it.
        waits[n.id] = int(handed[-1]) if handed else None
        if late or moved or waits[n.id] is None or waits[n.id] >= ELECTION_TIMEOUT_S * 1000:
            problems.append("node %d, stopped with the other, handed leaderships to a stopping "
                            "node: %s, hand-off wait %s ms" % (n.id, (late + moved)[:3],
                                                                waits[n.id]))
    check(not problems, "; ".join(problems))
    log("i) ok: nodes %s, %d partitions, stopped with SIGTERM at once in %.2f s, hand-off "
        "waits %s ms" % ([n.id for n in rest], groups, took, waits))


def main():
    # Small memtables: engines flush and logs compact within the test (part e).
    os.environ["STRATA_MEMTABLE_BYTES"] = "262144"
    phase_writes = int(sys.argv[2]) if len(sys.argv) > 2 else 300

    def body(cl):
        log("nodes: %s" % ", ".join("%d client %d peer %d" % (n.id, n.cport, n.pport)
                                    for n in cl.nodes))
        t0 = time.time()
        cl.start()
        log("cluster ready in %.2f s" % (time.time() - t0))
        create_table(client(cl.node(1).url, True), cl)
        leaders_even(cl, "after CreateTable")
        part_a(cl)
        load, victim, failover_s = part_b(cl, phase_writes)
        catchup_s = part_c(cl, load, victim)
        part_d(cl, load)
        part_e(cl)
        part_f(cl)
        loops = {n.id: (n.admin() or {}).get("loop") for n in cl.live()}
        check(all(v and "lag_max_ms" in v for v in loops.values()),
              "every node reports its loop lag: %s" % loops)
        check_links(cl)
        check_loop_lag(cl)
        part_g(cl, phase_writes)  # last: node link counters restart with the node
        part_h(cl)
        part_i(cl)
        log("summary: writes acknowledged %d; client errors: %s; leader failover %.2f s; "
            "restarted node caught up in %.2f s; longest loop lag since the restart (d) "
            "%.1f ms" % (len(load.acked), errors_text(load), failover_s, catchup_s,
                         max(v["lag_max_ms"] for v in loops.values())))
    return run_on_cluster(sys.argv[1], "strata-cluster-", body)


if __name__ == "__main__":
    sys.exit(main())
