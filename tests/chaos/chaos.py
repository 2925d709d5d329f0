#!/usr/bin/python3
"""Chaos run: start stratad (one node, or a cluster of --cluster N nodes, each in its own
network namespace as root, else on loopback), run the workload, inject faults from a
seeded schedule, heal, read every key, compare the replicas of every partition, check the
history, print the report.

Usage: chaos.py --stratad BIN [--strata CLI] [--cluster N] [--net auto|netns|loopback]
                [--duration S] [--schedule short|long] [--seed N] [--clients N]
                [--keys N] [--faults K,K] [--out DIR] [--keep]
Exit status: 0 clean; 1 anomalies found by the checker; 3 stratad misbehaved (did not
start or restart, died on its own, could not serve the final reads, a restarted replica
did not catch up, a drain or the re-spread after it did not finish); 143 SIGTERM.

The cluster is a list of Node objects; a fault kind is a function in FAULTS taking
(run, node, rng) that injects the fault, waits, heals it (calling run.healed() at the
moment it heals) and returns a detail string. At most one fault is active at a time, and
it hits one node or one AZ: every fault waits, before it returns, until its nodes serve
again and (in a cluster) their replicas have caught up, so the cluster always keeps a
majority of every group (one replica per AZ). Network faults are iptables rules (and a
delayer) inside the nodes' namespaces, see netns.py.
"""
import argparse
import json
import os
import random
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402
import netns  # noqa: E402
import workload  # noqa: E402

START_TIMEOUT_S = 30        # single node: serving line
CLUSTER_START_S = 90        # a cluster node serves and reports ready (ASan builds are slow)
LEADERS_DEADLINE_S = 60     # every partition of the new table has a leader
CATCHUP_DEADLINE_S = 90     # a restarted node's replicas reach their leaders' commit index
CONVERGE_DEADLINE_S = 90    # after healing: all replicas of every partition at one index
STOP_DEADLINE_S = 30        # SIGTERM to exit
LAG_DEADLINE_S = 30         # kill9-lag: longest wait for a leader to compact past the node
MEMTABLE_BYTES = "262144"   # STRATA_MEMTABLE_BYTES: engines flush and logs compact early
DRAIN_DEADLINE_S = 120      # drain-join: a drained node holds no replica
SPREAD_DEADLINE_S = 150     # drain-join: after activate, replicas even again in its AZ


class Misbehaved(Exception):
    pass


def free_ports(n):
    """n distinct free loopback ports, all bound at once so that none repeats."""
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


def poll(cond, deadline_s, interval=0.1):
    """Calls cond() until it returns a true value (returned) or deadline_s passed (None)."""
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= end:
            return None
        time.sleep(interval)


class Node:
    """One local stratad process on a fixed port and data directory (single-node mode)."""

    # The run's clock (History.now), set once the history exists: every line a node
    # writes is logged with the run time it was read at, to line it up with the faults.
    clock = None

    def __init__(self, index, stratad, data_dir, log_path, port):
        self.index, self.stratad, self.data_dir = index, stratad, data_dir
        self.log_path, self.port, self.host = log_path, port, "127.0.0.1"
        self.proc = None
        self.log_offset = 0

    def command(self):
        return [self.stratad, "--listen", "%s:%d" % (self.host, self.port),
                "--data-dir", self.data_dir]

    def env(self):
        return None

    def start_timeout(self):
        return START_TIMEOUT_S

    def start(self):
        """Starts the process and waits for its serving line (both streams go to the log,
        each line after the run time it was read at: "[  96.470] stratad: ...")."""
        with open(self.log_path, "a") as log:
            log.write("==== %s\n" % " ".join(self.command()))
            self.log_offset = log.tell()
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env(), text=True, errors="replace",
                                     preexec_fn=netns.die_with_runner)
        # Reads the output in a thread so a silent stratad cannot block us past the deadline.
        ready = threading.Event()

        def watch(out=self.proc.stdout, path=self.log_path, clock=Node.clock):
            with open(path, "a") as f:
                for line in out:
                    f.write("[%8.3f] %s" % (clock(), line) if clock else line)
                    f.flush()
                    if re.match(r"stratad: serving on http://", line):
                        ready.set()
            out.close()
        threading.Thread(target=watch, daemon=True).start()
        end = time.monotonic() + self.start_timeout()
        while time.monotonic() < end:
            if ready.wait(0.02):
                return
            if self.proc.poll() is not None:
                raise Misbehaved("node %d exited with %s on start (log %s)"
                                 % (self.index, self.proc.returncode, self.log_path))
        raise Misbehaved("node %d did not serve within %ds" % (self.index,
                                                                self.start_timeout()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def terminate(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self):
        try:
            self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Misbehaved("node %d ignored SIGTERM for %ds" % (self.index, STOP_DEADLINE_S))
        if self.proc.returncode != 0:
            raise Misbehaved("node %d exited with %s on SIGTERM (log %s)"
                             % (self.index, self.proc.returncode, self.log_path))

    def log_since_start(self):
        try:
            with open(self.log_path, errors="replace") as f:
                f.seek(self.log_offset)
                return f.read()
        except OSError:
            return ""


class ClusterNode(Node):
    """One stratad of a loopback cluster: node id = index (1..N), AZ az1..az3 round robin,
    host label hN, fixed client and peer ports; node 1 bootstraps, the others join it.
    Every node has the run's peer secret (`secret`, a file). A restart passes the same
    flags again (the data directory remembers the cluster)."""

    def __init__(self, index, stratad, data_dir, log_path, port, peer_port, bootstrap_peer,
                 n_nodes, secret):
        super().__init__(index, stratad, data_dir, log_path, port)
        self.peer_port, self.bootstrap_peer, self.n_nodes = peer_port, bootstrap_peer, n_nodes
        self.az = (index - 1) % 3 + 1
        self.secret = secret

    def command(self):
        cmd = [self.stratad, "--node-id", str(self.index),
               "--az", "az%d" % self.az, "--host-label", "h%d" % self.index,
               "--listen", "%s:%d" % (self.host, self.port),
               "--peer-listen", "%s:%d" % (self.host, self.peer_port),
               "--data-dir", self.data_dir, "--peer-secret-file", self.secret]
        if self.index == 1:
            return cmd + ["--bootstrap", "--bootstrap-expect", str(min(self.n_nodes, 3))]
        return cmd + ["--join", "%s:%d" % (self.host, self.bootstrap_peer)]

    def env(self):
        env = dict(os.environ)
        env["STRATA_MEMTABLE_BYTES"] = MEMTABLE_BYTES
        return env

    def start_timeout(self):
        return CLUSTER_START_S

    def request(self, path, body=None, timeout=5):
        """GET path on the client port, or POST body (a dict) to it: the answer as a dict,
        or None when the node does not answer."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request("http://%s:%d%s" % (self.host, self.port, path), data=data,
                                     headers={"Content-Type": "application/x-amz-json-1.0"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def get(self, path, timeout=5):
        return self.request(path, timeout=timeout)

    def post(self, path, body, timeout=10):
        return self.request(path, body, timeout)

    def local_parts(self, table):
        """{partition id: entry} of the table's partitions this node holds a replica of."""
        a = self.get("/admin/cluster") or {}
        return {p["id"]: p for p in a.get("partitions", [])
                if p.get("table") == table and "local" in p}


class NetNode(ClusterNode):
    """A cluster node in its own network namespace (netns.Net): same flags, but it listens
    on every address of its namespace, advertises its bridge address, and every node
    uses the same ports. The runner reaches it at its bridge address."""

    def __init__(self, index, stratad, data_dir, log_path, net, n_nodes, secret):
        super().__init__(index, stratad, data_dir, log_path, net.PORT, net.PEER_PORT,
                         net.PEER_PORT, n_nodes, secret)
        self.net, self.host = net, net.addr(index)

    def command(self):
        cmd = [self.stratad, "--node-id", str(self.index),
               "--az", "az%d" % self.az, "--host-label", "h%d" % self.index,
               "--listen", "0.0.0.0:%d" % self.port,
               "--advertise", "%s:%d" % (self.host, self.port),
               "--peer-listen", "0.0.0.0:%d" % self.peer_port,
               "--peer-advertise", "%s:%d" % (self.host, self.peer_port),
               "--data-dir", self.data_dir, "--peer-secret-file", self.secret]
        if self.index == 1:
            cmd += ["--bootstrap", "--bootstrap-expect", str(min(self.n_nodes, 3))]
        else:
            cmd += ["--join", "%s:%d" % (self.net.addr(1), self.peer_port)]
        return self.net.wrap(self.index, cmd)


# ---- cluster state, from /admin/cluster of every live node ----

def views(run):
    """{node id: /admin/cluster} of the live nodes that answer; a paused node (the one a
    fault holds, run.faulty) is not asked: it would only time out."""
    out = {}
    for n in run.nodes:
        if n.alive() and n is not run.faulty:
            a = n.get("/admin/cluster")
            if a is not None:
                out[n.index] = a
    return out


def leader_views(run):
    """{partition id: (leader node id, its "local" entry)} of the chaos table, as the
    leaders themselves report it. A leader cut off by a network fault still believes it
    leads: of two claims the higher term wins."""
    out = {}
    for nid, a in views(run).items():
        for p in a.get("partitions", []):
            loc = p.get("local")
            if p.get("table") == workload.TABLE and loc and loc.get("state") == "leader":
                old = out.get(p["id"])
                if old is None or loc.get("term", 0) > old[1].get("term", 0):
                    out[p["id"]] = (nid, loc)
    return out


def leaders(run):
    """{partition id: (leader node id, its commit index)} of the chaos table."""
    return {pid: (nid, loc["commit_index"]) for pid, (nid, loc) in leader_views(run).items()}


def table_partitions(run):
    for a in views(run).values():
        parts = [p for p in a.get("partitions", []) if p.get("table") == workload.TABLE]
        if parts:
            return parts
    return []


def wait_ready(run, node):
    if not poll(lambda: not node.alive() or
                (node.get("/admin/cluster") or {}).get("ready") is True,
                CLUSTER_START_S, 0.1):
        raise Misbehaved("node %d not ready within %ds (log %s)"
                         % (node.index, CLUSTER_START_S, node.log_path))
    if not node.alive():
        raise Misbehaved("node %d died on its own (exit %s; log %s)"
                         % (node.index, node.proc.returncode, node.log_path))


def wait_leaders(run):
    def all_led():
        parts = table_partitions(run)
        return parts and set(p["id"] for p in parts) <= set(leaders(run))
    if not poll(all_led, LEADERS_DEADLINE_S, 0.1):
        raise Misbehaved("not every partition of the table has a leader after %ds"
                         % LEADERS_DEADLINE_S)


def lagging(run, node, progress):
    """{partition id: why} for each of node's replicas that has not applied what its
    leader had committed when `progress` (a CatchUp) first saw that leader (leaders are
    asked first, then the node); a node that answers with no replica at all is lagging
    too. A replica that reached its target counts as caught up from then on: under load
    the leaders' commit indexes move on while the node applies, and a check that needed
    every replica at the latest one in the same poll got slower as partitions multiplied
    (16 s once, with 10+ partitions)."""
    led = leaders(run)
    mine = node.local_parts(workload.TABLE)
    if not mine:
        return {0: "no replica reported"}
    behind = {}
    for pid, p in mine.items():
        loc = p["local"]
        if pid in progress.done:
            continue
        if pid not in led:
            behind[pid] = "no leader (%s, members %s)" % (loc.get("state"), p.get("members"))
            continue
        target = progress.target.setdefault(pid, led[pid][1])
        if loc.get("installing") or loc.get("failed"):
            behind[pid] = "installing" if loc.get("installing") else "failed"
        elif loc["applied_index"] < target:
            behind[pid] = "applied %d < %d committed on leader %d (%s, members %s)" % (
                loc["applied_index"], target, led[pid][0], loc.get("state"),
                p.get("members"))
        else:
            progress.done.add(pid)
    return behind


class CatchUp:
    """What wait_back has seen of a node's replicas: the commit index each must reach
    (its leader's, when first seen), and those that reached it."""

    def __init__(self):
        self.target, self.done = {}, set()


def wait_back(run, node):
    """After a fault is healed: the node is ready and each of its replicas has applied
    what its leader had committed when the wait first saw it (lagging). Returns the
    seconds it took."""
    t0 = time.monotonic()
    wait_ready(run, node)
    progress = CatchUp()
    if not poll(lambda: not node.alive() or not lagging(run, node, progress),
                CATCHUP_DEADLINE_S, 0.1):
        raise Misbehaved("node %d: replicas did not catch up with their leaders within %ds: %s"
                         % (node.index, CATCHUP_DEADLINE_S, lagging(run, node, progress)))
    run.check_alive()
    return time.monotonic() - t0


def copies_in_log(text):
    """Partitions copied (snapshot installs) as reported by stratad in a log slice."""
    return re.findall(r"partition (\d+) copied from node (\d+)", text)


class Failover:
    """Measures, while a fault holds `node` (or every node of `group`, a list of ids), how
    long the partitions it led took to get a leader elsewhere (as the nodes report it)."""

    def __init__(self, run, node, group=None):
        self.run, self.node = run, node
        self.group = set(group or [node.index])
        self.led = sorted(pid for pid, (nid, _) in leader_views(run).items()
                          if nid in self.group) if run.cluster else []
        self.t0 = time.monotonic()
        self.after = {}

    def check(self):
        if len(self.after) == len(self.led):
            return
        now = time.monotonic() - self.t0
        for pid, (nid, _) in leader_views(self.run).items():
            if pid in self.led and pid not in self.after and nid not in self.group:
                self.after[pid] = now

    def hold(self, seconds):
        """Waits seconds (or until the run stops), checking for new leaders meanwhile."""
        end = time.monotonic() + seconds
        while not self.run.stop.is_set() and time.monotonic() < end:
            self.check()
            self.run.stop.wait(min(0.1, max(0.0, end - time.monotonic())))

    def describe(self):
        if not self.led:
            return ""
        return "; led %s: %s" % (", ".join("p%d" % p for p in self.led), ", ".join(
            "p%d new leader after %.1fs" % (p, self.after[p]) if p in self.after
            else "p%d no new leader before healing" % p for p in self.led))


def pick_target(run, rng):
    """The node a fault hits and why: in a cluster, half of the time the leader of a
    random partition of the table (found through /admin/cluster), else a random node."""
    if run.cluster and rng.random() < 0.5:
        led = leaders(run)
        if led:
            pid = rng.choice(sorted(led))
            return run.node(led[pid][0]), "leader of partition %d" % pid
    return rng.choice(run.nodes), "random"


def converge(run):
    """After healing: polls every node's /admin/digests until, for every partition of the
    table, each member reports a complete replica at the same applied index (or the
    deadline passes). Returns one record per partition for the checker."""
    def snapshot():
        parts = table_partitions(run)
        dig = {n.index: n.get("/admin/digests") for n in run.nodes}
        recs = []
        for p in parts:
            reps = {}
            for nid, d in dig.items():
                for r in (d or {}).get("replicas", []):
                    if r.get("partition") == p["id"]:
                        reps[str(nid)] = {k: r.get(k) for k in
                                          ("applied_index", "commit_index", "items",
                                           "digest", "complete")}
            ok = (set(reps) == set(str(m) for m in p["members"])
                  and all(r["complete"] for r in reps.values())
                  and len(set(r["applied_index"] for r in reps.values())) == 1)
            recs.append({"partition": p["id"], "members": p["members"], "converged": ok,
                         "replicas": reps})
        return recs
    last = [None]

    def done():
        last[0] = snapshot()
        return last[0] and all(r["converged"] for r in last[0])
    t0 = time.monotonic()
    poll(done, CONVERGE_DEADLINE_S, 0.2)
    return last[0] or [], time.monotonic() - t0


# ---- fault kinds: each injects, holds, heals (run.healed()); returns a detail string ----

def fault_kill9(run, node, rng):
    fo = Failover(run, node)
    node.kill9()
    down = rng.uniform(0.2, 2.0) if run.cluster else rng.uniform(0.0, 1.0)
    fo.hold(down)  # down for a while before the restart: the fault itself
    run.healed()
    node.start()
    if not run.cluster:
        return "down %.1fs, restarted" % down
    back = wait_back(run, node)
    copies = copies_in_log(node.log_since_start())
    return "down %.1fs, restarted, ready and caught up in %.1fs, %d partition copies%s" % (
        down, back, len(copies), fo.describe())


def fault_kill9_cluster_file(run, node, rng):
    # SIGKILL, one bit of the node's cluster file (the meta members it asks for the map at
    # a restart) changed, down 0.2-2 s, restart with the same command (--join): the node
    # must write the file again from the cluster's answer, keep its data and catch up.
    fo = Failover(run, node)
    node.kill9()
    path = os.path.join(node.data_dir, "cluster")
    with open(path, "rb") as f:
        text = bytearray(f.read())
    at, bit = rng.randrange(len(text)), rng.randrange(8)
    text[at] ^= 1 << bit
    with open(path, "wb") as f:
        f.write(text)
    down = rng.uniform(0.2, 2.0)
    fo.hold(down)
    run.healed()
    node.start()
    back = wait_back(run, node)
    if "its cluster file is written again" not in node.log_since_start():
        raise Misbehaved("node %d did not write its damaged cluster file again (log %s)"
                         % (node.index, node.log_path))
    return ("bit %d of byte %d of %d in its cluster file changed, down %.1fs, restarted, "
            "wrote the file again, ready and caught up in %.1fs%s"
            % (bit, at, len(text), down, back, fo.describe()))


HANDED_RE = re.compile(r"handed the leadership of (\d+) Raft groups to other nodes in (\d+) ms")


def fault_stop(run, node, rng):
    # A graceful stop (SIGTERM): the node answers what it took, hands its leadership over
    # (a cluster), closes its log and engine and exits 0; restarted after a while. What it
    # acknowledged must survive, and its partitions change leader without waiting out an
    # election timeout (the detail shows how soon the others report new leaders).
    fo = Failover(run, node)
    node.terminate()
    node.wait_stopped()
    stopped = time.monotonic() - fo.t0
    handed = HANDED_RE.findall(node.log_since_start())
    down = rng.uniform(0.2, 2.0) if run.cluster else rng.uniform(0.0, 1.0)
    fo.hold(down)
    run.healed()
    node.start()
    if not run.cluster:
        return "stopped in %.2fs, down %.1fs, restarted" % (stopped, down)
    back = wait_back(run, node)
    return "stopped in %.2fs (%s), down %.1fs, restarted, ready and caught up in %.1fs%s" % (
        stopped, "handed %s Raft groups over in %s ms" % handed[-1] if handed else
        "led nothing", down, back, fo.describe())


def compacted_past(run, marks):
    """Partitions (of marks: {pid: index}) whose leader compacted its log past the index."""
    return sorted(pid for pid, (nid, loc) in leader_views(run).items()
                  if pid in marks and loc.get("snapshot_index", 0) > marks[pid])


def fault_kill9_lag(run, node, rng):
    # Down while the filler writes until a leader compacted its log past this replica's
    # last entry: on restart it must copy that partition (snapshot) instead of replaying
    # the log. One is enough: waiting for every partition takes ~4000 items, too long
    # for the short schedule under ASan.
    marks = {pid: p["local"]["last_index"] for pid, p in node.local_parts(workload.TABLE).items()}
    fo = Failover(run, node)
    node.kill9()
    if run.filler:
        run.filler.set_burst(True)
    try:
        end = time.monotonic() + LAG_DEADLINE_S
        past = None
        while not past and not run.stop.is_set() and time.monotonic() < end:
            fo.hold(0.2)
            past = compacted_past(run, marks)
    finally:
        if run.filler:
            run.filler.set_burst(False)
    behind = compacted_past(run, marks)
    down = time.monotonic() - fo.t0
    run.healed()
    node.start()
    back = wait_back(run, node)
    copies = copies_in_log(node.log_since_start())
    return ("down %.1fs until %s of %d leaders compacted past it%s, ready and caught up in "
            "%.1fs, %d partition copies%s%s" % (
                down, len(behind), len(marks), "" if past else " (deadline)", back,
                len(copies), "" if not copies else
                " (%s)" % ", ".join("p%s from n%s" % c for c in copies), fo.describe()))


def fault_split_kill9(run, node, rng):
    # A partition of the table splits (POST /admin/split through another node) and within
    # 50 ms, while the SPLIT may still be on its way through the parent's log, node dies
    # (kill -9), down 0.2-2 s. A replica that crashes between storing the SPLIT and
    # applying it, or before the SPLIT's flush, makes the child late: from the SPLIT
    # replayed, from a copy of the child's first state (seed_child), or by joining it.
    # The node must catch up, the child must get a leader, and the workload's keys stay
    # linearizable across the MOVED answers.
    before = {p["id"] for p in table_partitions(run)}
    via = rng.choice([n for n in run.nodes if n is not node and n.alive()])
    pid = rng.choice(sorted(before))
    r = via.post("/admin/split", {"partition": pid})
    if r is None or "child" not in r:
        raise Misbehaved("split of partition %d through node %d refused: %s"
                         % (pid, via.index, r))
    run.stop.wait(rng.uniform(0.0, 0.05))
    fo = Failover(run, node)
    node.kill9()
    down = rng.uniform(0.2, 2.0)
    fo.hold(down)
    run.healed()
    node.start()
    back = wait_back(run, node)
    t0 = time.monotonic()
    child = r["child"]
    if not poll_alive(run, lambda: child in {p["id"] for p in table_partitions(run)},
                      LEADERS_DEADLINE_S):
        raise Misbehaved("child %d of partition %d not in the map" % (child, pid))
    wait_leaders(run)
    led = time.monotonic() - t0
    text = node.log_since_start()
    seeded = len(re.findall(r"copied its first state from node", text))
    return ("split p%d -> p%d through n%d, then down %.1fs, ready and caught up in %.1fs, "
            "every partition led %.1fs later, %d partition copies, %d first states copied%s"
            % (pid, child, via.index, down, back, led, len(copies_in_log(text)), seeded,
               fo.describe()))


def fault_pause(run, node, rng):
    # In a cluster, longer than the election timeout (1 s): the node's groups elect anew.
    hold = rng.uniform(1.5, 4.0) if run.cluster else rng.uniform(1.0, 4.0)
    fo = Failover(run, node)
    node.pause()
    run.faulty = node
    try:
        fo.hold(hold)
    finally:
        node.resume()
        run.faulty = None
        run.healed()
    if not run.cluster:
        return "SIGSTOP for %.1fs" % hold
    back = wait_back(run, node)
    return "SIGSTOP for %.1fs, caught up in %.1fs%s" % (hold, back, fo.describe())


# ---- network faults: rules inside the nodes' namespaces (netns.Net), root only ----

def _net_fault(run, group, inject, hold, detail, on_heal=None):
    """Injects a network fault between the nodes of group (ids) and the others, holds it
    for hold seconds watching for new leaders, heals every network fault (then calls
    on_heal), then waits until each node of group is ready and caught up. Returns the
    detail string."""
    fo = Failover(run, run.node(group[0]), group)
    try:
        inject()
        fo.hold(hold)
    finally:
        run.net.heal()
        run.healed()
        if on_heal is not None:
            on_heal()
    back = max(wait_back(run, run.node(nid)) for nid in group)
    return "%s for %.1fs, caught up in %.1fs%s" % (detail, hold, back, fo.describe())


def _others(run, group):
    return [n.index for n in run.nodes if n.index not in group]


def _names(ids):
    return ",".join("n%d" % i for i in sorted(ids))


def fault_partition_az(run, node, rng):
    # The node's whole AZ is cut off from the other AZs, both ways; every group keeps its
    # two replicas outside it (one replica per AZ), so a majority.
    group = [n.index for n in run.nodes if n.az == node.az]
    others = _others(run, group)
    return _net_fault(run, group, lambda: run.net.cut(group, others), rng.uniform(2.0, 5.0),
                      "az%d (%s) cut off from %s" % (node.az, _names(group), _names(others)))


def fault_isolate_leader(run, node, rng):
    # node is a partition's leader (pick_leader): cut off from every other node while
    # clients still reach it. It keeps believing it leads until it hears of a higher
    # term; a strong read it served from its stale state would be flagged by the checker.
    # Clients move away from a node after an error, so probers (client ids 100..) keep
    # sending strong reads to it for as long as it is cut off.
    group = [node.index]
    others = _others(run, group)
    stop = threading.Event()
    probers = [workload.Prober(100 + i, (node.index, node.host, node.port), run.keys,
                               run.hist, stop) for i in range(3)]

    def inject():
        run.net.cut(group, others)
        for p in probers:
            p.start()

    def on_heal():
        stop.set()
        for p in probers:
            if p.is_alive():
                p.join(5)
    try:
        detail = _net_fault(run, group, inject, rng.uniform(2.5, 5.0),
                            "n%d isolated from %s (clients still reach it)"
                            % (node.index, _names(others)), on_heal)
    finally:
        on_heal()
    counts = {k: sum(p.counts[k] for p in probers) for k in ("ok", "unknown", "fail")}
    return "%s; probe strong reads through n%d until healed: %s" % (
        detail, node.index, " ".join("%s=%d" % kv for kv in sorted(counts.items())))


def fault_asymmetric(run, node, rng):
    direction = rng.choice(("out", "in"))
    group = [node.index]
    others = _others(run, group)
    what = ("n%d -> %s dropped (it hears them, they do not hear it)" if direction == "out"
            else "%s -> n%d dropped (they hear it, it does not hear them)")
    return _net_fault(run, group, lambda: run.net.cut(group, others, direction),
                      rng.uniform(2.0, 5.0), what % ((node.index, _names(others))
                                                     if direction == "out"
                                                     else (_names(others), node.index)))


def fault_loss(run, node, rng):
    pct = rng.uniform(20.0, 40.0)
    group = [node.index]
    others = _others(run, group)
    return _net_fault(run, group, lambda: run.net.loss(group, others, pct),
                      rng.uniform(3.0, 6.0), "%.0f%% loss each way between n%d and %s" % (
                          pct, node.index, _names(others)))


def fault_delay(run, node, rng):
    # Half of the time the node's whole AZ. The delay stays well below the 1 s election
    # timeout: leaders keep leading, but every replication round trip gets slower.
    group = [node.index] if rng.random() < 0.5 else \
        [n.index for n in run.nodes if n.az == node.az]
    others = _others(run, group)
    ms = rng.randint(50, 300)
    return _net_fault(run, group,
                      lambda: run.net.delay(group, others, ms, run.out_dir),
                      rng.uniform(3.0, 6.0), "%s -> %s delayed %d ms (%s)" % (
                          _names(group), _names(others), ms, run.net.delay_method()))


# ---- drain and join under load: the strata CLI (node drain / node activate) ----

def replica_counts(run):
    """{node id: (state, replicas)} as the first node that answers sees the cluster."""
    for a in views(run).values():
        nodes = a.get("nodes", [])
        if nodes:
            return {n["id"]: (n.get("state"), n.get("replicas")) for n in nodes}
    return {}


def strata_cli(run, via, *args):
    cmd = [run.strata, "--endpoint", "http://%s:%d" % (via.host, via.port)] + list(args)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Misbehaved("%s: %s" % (" ".join(cmd), e))
    if r.returncode != 0:
        raise Misbehaved("%s: exit %d: %s %s" % (" ".join(args), r.returncode,
                                                 r.stdout.strip(), r.stderr.strip()))
    return r.stdout.strip()


def poll_alive(run, cond, deadline_s):
    """poll(cond), but a node dying meanwhile ends it at once (Misbehaved)."""
    ok = poll(lambda: any(not n.alive() for n in run.nodes) or cond(), deadline_s, 0.2)
    run.check_alive()
    return ok


def spread(run, node):
    """True when node is ACTIVE again and the replicas of its AZ are even between its
    nodes (within one), node holding some, and no move is half done: the AZ holds one
    replica of every partition (a learner being added counts before its source left)."""
    counts = replica_counts(run)
    mine = [counts.get(n.index) for n in run.nodes if n.az == node.az]
    if any(c is None or c[1] is None for c in mine):
        return False
    reps = [c[1] for c in mine]
    return counts[node.index][0] == "ACTIVE" and counts[node.index][1] > 0 and \
        max(reps) - min(reps) <= 1 and sum(reps) == len(table_partitions(run))


def _wait_drained(run, node, why=""):
    """Polls until node holds no replica (DRAIN_DEADLINE_S); `why` goes in the failure."""
    if not poll_alive(run, lambda: replica_counts(run).get(node.index, (None, -1))[1] == 0,
                      DRAIN_DEADLINE_S):
        raise Misbehaved("node %d still holds replicas %ds after the drain began%s (%s)"
                         % (node.index, DRAIN_DEADLINE_S, why, replica_counts(run)))


def _activate_and_spread(run, via, node):
    """strata node activate through via, then polls until node's AZ is even again
    (SPREAD_DEADLINE_S)."""
    strata_cli(run, via, "node", "activate", str(node.index))
    if not poll_alive(run, lambda: spread(run, node), SPREAD_DEADLINE_S):
        raise Misbehaved("node %d: replicas not spread again %ds after activate (%s)"
                         % (node.index, SPREAD_DEADLINE_S, replica_counts(run)))


def fault_drain_join(run, node, rng):
    # node shares its AZ with another node (pick_drainable), so its replicas have
    # somewhere to go without breaking the one-replica-per-AZ rule. Drain through
    # another node, wait until it holds none; then activate it again and wait until its
    # AZ's replicas are even again. Client errors during the drain are reported: a
    # drain is meant to cause none.
    via = next(n for n in run.nodes if n is not node)
    before = replica_counts(run).get(node.index, (None, None))[1]
    t0 = run.hist.now()
    strata_cli(run, via, "node", "drain", str(node.index))
    _wait_drained(run, node)
    t1 = run.hist.now()
    errs = run.hist.errors_between(t0, t1)
    run.healed()
    _activate_and_spread(run, via, node)
    t2 = run.hist.now()
    back = wait_back(run, node)
    counts = replica_counts(run)
    run.drain_errors += len(errs)
    return ("drained n%d (%s replicas -> 0) in %.1fs, client errors during the drain: %d%s; "
            "activated, replicas even again in %.1fs (%s), caught up in %.1fs" % (
                node.index, before, t1 - t0, len(errs),
                "" if not errs else " (%s)" % ", ".join(
                    "%s x%d" % kv for kv in sorted(_error_kinds(errs).items())),
                t2 - t1, ", ".join("n%d %s" % (n.index, counts[n.index][1])
                                   for n in run.nodes if n.az == node.az and
                                   n.index in counts), back))


def fault_move_loss(run, node, rng):
    # Replica moves over a lossy link: node's AZ mate is drained, so its replicas move to
    # node (learner added, copied, promoted, source removed) while node loses packets each
    # way for the first seconds of the moves. Every move must still finish once the link
    # heals (a long run once saw a move stall after such a loss, its partition without a
    # leader). Then the mate is activated again and the AZ must even out.
    mate = next(n for n in run.nodes if n.az == node.az and n is not node)
    via = next(n for n in run.nodes if n is not node and n is not mate)
    pct = rng.uniform(20.0, 40.0)
    hold = rng.uniform(3.0, 6.0)
    before = replica_counts(run).get(mate.index, (None, None))[1]
    fo = Failover(run, node, [node.index])
    t0 = run.hist.now()
    # The drain goes in first: under the loss the command itself could time out (503, its
    # outcome unknown) when the meta leader is the target. The moves take longer than
    # the command, so the loss still meets them.
    strata_cli(run, via, "node", "drain", str(mate.index))
    try:
        run.net.loss([node.index], _others(run, [node.index]), pct)
        fo.hold(hold)
    finally:
        run.net.heal()
        run.healed()
    _wait_drained(run, mate, ", %.0f%% loss on n%d for the first %.1fs" % (
        pct, node.index, hold))
    t1 = run.hist.now()
    _activate_and_spread(run, via, mate)
    back = max(wait_back(run, node), wait_back(run, mate))
    return ("n%d drained (%s replicas) toward n%d with %.0f%% loss each way between n%d and "
            "%s for %.1fs: drained in %.1fs; activated, even again and caught up in %.1fs%s"
            % (mate.index, before, node.index, pct, node.index,
               _names(_others(run, [node.index])), hold, t1 - t0, back, fo.describe()))


def _error_kinds(errs):
    out = {}
    for e in errs:
        k = "%s %s" % (e["kind"], (e.get("error") or "?").split(":")[0])
        out[k] = out.get(k, 0) + 1
    return out


def sabotage_wipe(run, node, rng):
    # Not a fault a correct system survives: it loses every acknowledged write, and is
    # here to prove end to end that a run flags lost data (test_end_to_end.py).
    node.kill9()
    shutil.rmtree(node.data_dir)
    os.makedirs(node.data_dir)
    run.healed()
    node.start()
    workload.create_table(node.host, node.port)
    # One recorded strong read of every key at once, before the clients overwrite them:
    # the loss is then always observed, however the workload's timing falls.
    conn = workload.Conn(node.host, node.port, 3)
    for key in run.keys:
        workload.run_op(conn, run.hist, -1, node.index, "read", key, consistent=True)
    conn.close()
    return "restarted with an empty data directory"


FAULTS = {"kill9": fault_kill9, "pause": fault_pause, "stop": fault_stop}
CLUSTER_FAULTS = {"kill9": fault_kill9, "kill9-lag": fault_kill9_lag, "pause": fault_pause,
                  "stop": fault_stop, "drain-join": fault_drain_join,
                  "split-kill9": fault_split_kill9,
                  "kill9-cluster-file": fault_kill9_cluster_file}
# Need a network namespace per node (--net netns): root only.
NET_FAULTS = {"partition-az": fault_partition_az, "isolate-leader": fault_isolate_leader,
              "asymmetric": fault_asymmetric, "loss": fault_loss, "delay": fault_delay,
              "move-loss": fault_move_loss}
# Need two nodes in one AZ (--cluster 4 or more): the drained node's replicas go there.
NEEDS_SHARED_AZ = {"drain-join", "move-loss"}
# Chosen only by name (--faults wipe), never by default; single node only.
SABOTAGE = {"wipe": sabotage_wipe}

SCHEDULES = {
    # warm-up, gap between faults (min, max), total duration by default. Without
    # --duration a schedule always runs one whole round (every kind once), even when
    # that takes longer than its duration.
    "short": {"duration": 60, "warmup": 4.0, "gap": (2.0, 4.0)},
    "long": {"duration": 1800, "warmup": 10.0, "gap": (5.0, 20.0)},
}


def make_schedule(rng, name, duration, kinds, min_faults=0):
    """Seeded list of (at seconds, fault kind). Kinds come in shuffled rounds, so every
    kind occurs once before any occurs twice; at least min_faults entries."""
    sch = SCHEDULES[name]
    out, t, bag = [], sch["warmup"], []
    while t < duration - 8 or len(out) < min_faults:
        if not bag:
            bag = list(kinds)
            rng.shuffle(bag)
        out.append((t, bag.pop()))
        t += rng.uniform(*sch["gap"]) + 4.0  # a short fault lasts up to ~4s
    return out


def pick_leader(run, rng):
    """isolate-leader: the leader of a random partition of the table."""
    led = leaders(run)
    if led:
        pid = rng.choice(sorted(led))
        return run.node(led[pid][0]), "leader of partition %d" % pid
    return rng.choice(run.nodes), "random (no leader known)"


def pick_drainable(run, rng):
    """drain-join: a random node of an AZ that has another node."""
    node = rng.choice([n for n in run.nodes if sum(1 for m in run.nodes if m.az == n.az) > 1])
    return node, "shares az%d" % node.az


def pick_joiner(run, rng):
    """kill9-cluster-file: a node started with --join (node 1 bootstraps, and a damaged
    file is refused there: tests/integration/identity.py), half of the time the leader of
    a random partition."""
    node, why = pick_target(run, rng)
    if node.index == 1:
        node, why = rng.choice(run.nodes[1:]), "random (node 1 bootstraps)"
    return node, why


PICKERS = {"isolate-leader": pick_leader, "drain-join": pick_drainable,
           "move-loss": pick_drainable, "kill9-cluster-file": pick_joiner}


class Run:
    def __init__(self, args, hist):
        self.args, self.hist = args, hist
        self.cluster = args.cluster > 1
        self.stop = threading.Event()
        self.nodes = []
        self.filler = None
        self.heal_at = None
        self.faulty = None  # the node a pause holds: not asked for /admin/cluster
        self.net = None     # netns.Net when nodes run in network namespaces
        self.strata = None  # the strata CLI (drain-join)
        self.out_dir = None
        self.drain_errors = 0
        self.keys = []

    def node(self, nid):
        return next(n for n in self.nodes if n.index == nid)

    def healed(self):
        self.heal_at = self.hist.now()

    def check_alive(self):
        for n in self.nodes:
            if not n.alive():
                raise Misbehaved("node %d died on its own (exit %s; log %s)"
                                 % (n.index, n.proc.returncode if n.proc else None, n.log_path))


def fresh_dir(path, log_path):
    """An empty data directory and log: a reused --out must not restart an old cluster
    (its nodes remember other ports)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    if os.path.exists(log_path):
        os.remove(log_path)


def make_nodes(args, out_dir, net=None):
    if args.cluster <= 1:
        d, log = os.path.join(out_dir, "n0"), os.path.join(out_dir, "n0.log")
        fresh_dir(d, log)
        return [Node(0, args.stratad, d, log, free_ports(1)[0])]
    ports = free_ports(2 * args.cluster)
    # The cluster's peer secret, readable by its owner alone (as stratad requires).
    secret = os.path.join(out_dir, "peer-secret")
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, os.urandom(32).hex().encode() + b"\n")
    os.close(fd)
    os.chmod(secret, 0o600)
    nodes = []
    for i in range(1, args.cluster + 1):
        d, log = os.path.join(out_dir, "n%d" % i), os.path.join(out_dir, "n%d.log" % i)
        fresh_dir(d, log)
        if net is not None:
            nodes.append(NetNode(i, args.stratad, d, log, net, args.cluster, secret))
        else:
            nodes.append(ClusterNode(i, args.stratad, d, log,
                                     ports[i - 1], ports[args.cluster + i - 1],
                                     ports[args.cluster], args.cluster, secret))
    return nodes


def all_active(run):
    """Every node sees every node ACTIVE: placement can use three AZs."""
    for a in views(run).values():
        states = {n.get("id"): n.get("state") for n in a.get("nodes", [])}
        if set(states) != set(n.index for n in run.nodes) or \
                any(st != "ACTIVE" for st in states.values()):
            return False
    return len(views(run)) == len(run.nodes)


def start_cluster(run):
    for n in run.nodes:
        n.start()
    for n in run.nodes:
        wait_ready(run, n)
    # CreateTable before placement sees three ACTIVE nodes gets a retryable 503 (and
    # leaked its partition array on a SIGTERM-checked ASan build, see the README): wait.
    if not poll(lambda: all_active(run), CLUSTER_START_S, 0.1):
        raise Misbehaved("not every node ACTIVE within %ds" % CLUSTER_START_S)
    try:
        workload.create_table(run.nodes[0].host, run.nodes[0].port,
                              deadline_s=LEADERS_DEADLINE_S)
    except (RuntimeError, OSError) as e:
        raise Misbehaved(str(e))
    wait_leaders(run)


def run_schedule(run, rng, kinds, duration, fault_fns, whole_round):
    """Runs the seeded schedule; with whole_round, every kind once even past duration."""
    hist = run.hist
    t_start = hist.now()
    last_end = t_start
    min_gap = SCHEDULES[run.args.schedule]["gap"][0]
    done = 0
    for at, kind in make_schedule(rng, run.args.schedule, duration, kinds,
                                  len(kinds) if whole_round else 0):
        # A fault that overran (a slow restart) pushes the next one back.
        when = max(t_start + at, last_end + min_gap)
        if when > t_start + duration - 8 and not (whole_round and done < len(kinds)):
            break
        if run.stop.wait(max(0.0, when - hist.now())):
            break
        run.check_alive()
        node, target = PICKERS.get(kind, pick_target)(run, rng)
        run.heal_at = None
        t0 = hist.now()
        failed = None
        try:
            detail = fault_fns.get(kind, SABOTAGE.get(kind))(run, node, rng)
        except (Misbehaved, RuntimeError) as e:
            # RuntimeError: a network command (ip, iptables, tc, nfq-delay) failed.
            failed, detail = Misbehaved(str(e)), "FAILED: %s" % e
        t1 = last_end = hist.now()
        done += 1
        heal = run.heal_at if run.heal_at is not None else t1
        # Recorded even when the node did not come back, so the report shows the fault.
        hist.write({"type": "fault", "kind": kind, "node": node.index, "target": target,
                    "start": t0, "heal": heal, "end": t1, "detail": detail})
        print("chaos: %7.2fs %s node %d (%s): %s" % (t0, kind, node.index, target, detail),
              flush=True)
        if failed is not None:
            raise failed
    run.stop.wait(max(0.0, t_start + duration - hist.now()))


def finish(run, hist, keys):
    """After the workload: final strong reads; in a cluster, replica convergence and digests."""
    addrs = [(n.index, n.host, n.port) for n in run.nodes]
    missing = workload.final_reads(addrs, keys, hist)
    if missing:
        raise Misbehaved("final strong reads failed for keys %s" % ", ".join(missing))
    if run.cluster:
        recs, took = converge(run)
        copies = sum(len(copies_in_log(open(n.log_path, errors="replace").read()))
                     for n in run.nodes)
        hist.write({"type": "meta", "replicas": recs, "converge_s": round(took, 2),
                    "snapshot_copies": copies,
                    "filler": dict(run.filler.counts) if run.filler else None})
        print("chaos: replicas %s after %.1fs" % (
            "converged" if recs and all(r["converged"] for r in recs) else "NOT converged",
            took), flush=True)


class Terminated(BaseException):
    """SIGTERM (meson's test timeout): unwinds through every finally, so the nodes are
    killed and the namespaces deleted."""


def _on_sigterm(signum, frame):
    raise Terminated()


def setup_net(args, out_dir):
    """(netns.Net that is up, or None; why not, or ""). Also removes what runs killed
    earlier left behind."""
    if os.geteuid() == 0 and shutil.which("ip"):
        stale = netns.cleanup_stale()
        if stale:
            print("chaos: removed %d stale namespaces of dead runs (%s)"
                  % (len(stale), ", ".join(stale)), flush=True)
    if args.net == "loopback" or args.cluster <= 1:
        return None, "--net loopback" if args.cluster > 1 else ""
    ok, why = netns.Net.available()
    if not ok:
        if args.net == "netns":
            raise Misbehaved("--net netns: %s" % why)
        return None, why
    net = netns.Net({i: (i - 1) % 3 + 1 for i in range(1, args.cluster + 1)},
                    nfq_delay=None)
    try:
        net.up()  # removes what it made when it fails
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        if args.net == "netns":
            raise Misbehaved("--net netns: %s" % e)
        return None, "setting up the namespaces failed: %s" % e
    if not net.netem:
        net.nfq_delay = netns.find_nfq_delay(args.stratad, out_dir)
    return net, ""


def available_kinds(args, run, net_why):
    """{kind: fault function} this run can inject, and notes on the kinds it cannot."""
    if args.cluster <= 1:
        return dict(FAULTS), []
    fns, notes = dict(CLUSTER_FAULTS), []
    if run.net is not None:
        fns.update(NET_FAULTS)
        if run.net.delay_method() is None:
            del fns["delay"]
            notes.append("delay skipped: no netem qdisc and no nfq-delay "
                         "(libnetfilter-queue-dev)")
    else:
        notes.append("network faults (%s) skipped: nodes on loopback (%s)"
                     % (", ".join(NET_FAULTS), net_why))
    shared = [k for k in sorted(NEEDS_SHARED_AZ) if k in fns]
    if not any(n.az == m.az for n in run.nodes for m in run.nodes if n is not m):
        for k in shared:
            del fns[k]
        notes.append("%s skipped: no AZ has two nodes (--cluster 4 or more)"
                     % ", ".join(shared))
    elif not (run.strata and os.access(run.strata, os.X_OK)):
        for k in shared:
            del fns[k]
        notes.append("%s skipped: no strata CLI at %s (--strata)"
                     % (", ".join(shared), run.strata))
    return fns, notes


def dump_admin(run, out_dir):
    """Every live node's GET /admin/cluster into out_dir/admin-nI.json: the state a
    misbehaviour left, for its diagnosis."""
    for n in run.nodes:
        if not isinstance(n, ClusterNode) or not n.alive():
            continue
        a = n.get("/admin/cluster")
        if a is None:
            continue
        path = os.path.join(out_dir, "admin-n%d.json" % n.index)
        with open(path, "w") as f:
            json.dump(a, f, indent=1)
        print("chaos: node %d's /admin/cluster in %s" % (n.index, path), flush=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--strata", help="the strata CLI (drain-join); default: cli/strata "
                    "next to stratad")
    ap.add_argument("--cluster", type=int, default=1,
                    help="nodes: 1 = one stratad in single-node mode (default), 3..9 = a "
                         "cluster in three AZs (node i in az((i-1) mod 3 + 1))")
    ap.add_argument("--net", choices=("auto", "netns", "loopback"), default="auto",
                    help="cluster: a network namespace per node (root; network faults), "
                         "loopback, or netns when possible (default)")
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    ap.add_argument("--duration", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--clients", type=int, help="default 4, or 6 in a cluster")
    ap.add_argument("--keys", type=int, help="default 5, or 12 in a cluster")
    ap.add_argument("--faults", help="comma-separated fault kinds (single node: %s; "
                    "cluster: %s; with --net netns also %s)" % (
                        ", ".join(FAULTS), ", ".join(CLUSTER_FAULTS), ", ".join(NET_FAULTS)))
    ap.add_argument("--fill-rate", type=float, default=100.0,
                    help="cluster: background filler items a second (0: none)")
    ap.add_argument("--budget", type=int, default=300000)
    ap.add_argument("--out", help="directory for history and logs (default: temporary)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    cluster = args.cluster > 1
    if args.cluster != 1 and not 3 <= args.cluster <= 9:
        ap.error("--cluster takes 1 or 3..9")
    args.clients = args.clients or (6 if cluster else 4)
    args.keys = args.keys or (12 if cluster else 5)
    duration = args.duration or SCHEDULES[args.schedule]["duration"]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    requested = [k for k in (args.faults or "").split(",") if k]
    known = set(FAULTS) | set(CLUSTER_FAULTS) | set(NET_FAULTS) | set(SABOTAGE)
    for k in requested:
        if k not in known or (k in SABOTAGE and cluster) or \
                (not cluster and k not in FAULTS and k not in SABOTAGE):
            ap.error("unknown or not available fault kind %r" % k)
    rng = random.Random(seed)
    out_dir = args.out or tempfile.mkdtemp(prefix="strata-chaos-")
    os.makedirs(out_dir, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_sigterm)

    hist_path = os.path.join(out_dir, "history.jsonl")
    hist = workload.History(hist_path, time.monotonic())
    Node.clock = hist.now
    run = Run(args, hist)
    run.out_dir = out_dir
    run.strata = args.strata or os.path.join(os.path.dirname(os.path.abspath(args.stratad)),
                                             "cli", "strata")
    status = 0
    clients = []
    try:
        try:
            run.net, net_why = setup_net(args, out_dir)
        except (RuntimeError, OSError) as e:
            raise Misbehaved("network namespaces: %s" % e)
        run.nodes = make_nodes(args, out_dir, run.net)
        fault_fns, notes = available_kinds(args, run, net_why)
        missing = [k for k in requested if k not in fault_fns and k not in SABOTAGE]
        if missing:
            raise Misbehaved("fault kinds %s not available here: %s"
                             % (", ".join(missing), "; ".join(notes)))
        kinds = requested or list(fault_fns)
        print("chaos: seed %d, schedule %s, %.0fs, %s%s, output in %s"
              % (seed, args.schedule, duration,
                 "cluster of %d" % args.cluster if cluster else "single node",
                 "" if not cluster else (" in network namespaces (10.78.%d.0/24, delay by %s)"
                                         % (run.net.k, run.net.delay_method())
                                         if run.net else " on loopback"), out_dir), flush=True)
        for note in notes:
            print("chaos: %s" % note, flush=True)
        hist.write({"type": "meta", "seed": seed, "schedule": args.schedule,
                    "duration": duration, "clients": args.clients, "keys": args.keys,
                    "nodes": len(run.nodes), "faults": ",".join(kinds),
                    "net": "netns" if run.net else ("loopback" if cluster else "-"),
                    "skipped": "; ".join(notes)})
        if cluster:
            start_cluster(run)
        else:
            run.nodes[0].start()
            workload.create_table(run.nodes[0].host, run.nodes[0].port)
        addrs = [(n.index, n.host, n.port) for n in run.nodes]
        keys = run.keys = ["k%d" % i for i in range(args.keys)]
        # In a cluster a client starts on node i mod N, so that every node serves, and
        # gives up on a request after 3 s (then moves on): a request sent to a paused
        # leader waits for it (the router cannot retry a write whose fate it does not
        # know), and a longer timeout would stall every client behind such requests.
        timeout = 3.0 if cluster else 1.5
        clients = [workload.Client(i, addrs, keys, hist, run.stop, rng.randrange(1 << 31),
                                   timeout=timeout, start=i % len(addrs) if cluster else None)
                   for i in range(args.clients)]
        if cluster and args.fill_rate > 0:
            run.filler = workload.Filler(addrs, run.stop, args.fill_rate)
            run.filler.start()
        for c in clients:
            c.start()
        print("chaos: %.1fs cluster up, workload running" % hist.now(), flush=True)
        run_schedule(run, rng, kinds, duration, fault_fns, args.duration is None)
        run.stop.set()
        for c in clients:
            c.join(15)
        if run.filler:
            run.filler.join(15)
        run.check_alive()
        finish(run, hist, keys)
        for n in run.nodes:
            n.terminate()
        for n in run.nodes:
            n.wait_stopped()
    except Misbehaved as e:
        print("chaos: stratad misbehaved: %s" % e, flush=True)
        dump_admin(run, out_dir)
        status = 3
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleanup runs to its end
        run.stop.set()
        for c in clients:
            c.join(15)
        for n in run.nodes:
            if n.alive():
                n.proc.send_signal(signal.SIGCONT)
                n.proc.kill()
                n.proc.wait()
        if run.net is not None:
            run.net.down()
        hist.close()

    ops, faults, meta = checker.load(hist_path)
    anomalies, undecided, stats = checker.check(ops, args.budget, meta)
    checker.report(ops, faults, meta, anomalies, undecided, stats)
    if anomalies and status == 0:
        status = 1
    print("chaos: history %s (seed %d) exit %d" % (hist_path, seed, status))
    if status == 0 and not args.out and not args.keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Terminated:
        print("chaos: terminated (SIGTERM); nodes killed, namespaces deleted", flush=True)
        sys.exit(143)
