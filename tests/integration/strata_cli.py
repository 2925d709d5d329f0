#!/usr/bin/python3
"""`strata cluster status` against three real stratad on loopback.

Usage: strata_cli.py STRATAD STRATA
Starts node 1 (bootstrap, expecting 3 nodes) on free ports in a temporary directory and
checks, polling every condition with a deadline:
 a) node 1 alone is not ready: `strata cluster status` exits 1 and says NOT READY;
 b) once nodes 2 and 3 joined: exit 0, the nodes table lists all three with their AZs,
    host labels and addresses, "nodes up 3/3";
 c) after CreateTable (boto3): the table block shows its 4 partitions, each with 3 members,
    and `--all` reaches "without leader 0, leader unknown 0" with a Raft state on every
    member row and one leader per partition in "leaders per node";
 d) node 3 killed with SIGKILL: asking node 3 exits 2 (unreachable); `--all` through node
    1 shows "no answer" for node 3's replicas and exits 0; node 1 eventually reports
    "nodes up 2/3" with every partition led by node 1 or 2 (leaders per node ... 3:0).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import boto3
import botocore.config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, check, free_ports, poll  # noqa: E402  (the shared helpers)

START_DEADLINE_S = 90   # ASan builds start slowly
LEADERS_DEADLINE_S = 60
DOWN_DEADLINE_S = 30
TABLE = "cli_status"


class Cluster:
    def __init__(self, stratad, strata, work):
        self.stratad, self.strata, self.work = stratad, strata, work
        ports = free_ports(6)
        self.cports, self.pports = ports[:3], ports[3:]
        self.procs = {}

    def start(self, nid):
        d = os.path.join(self.work, "n%d" % nid)
        os.makedirs(d, exist_ok=True)
        cmd = [self.stratad, "--node-id", str(nid), "--az", "az%d" % nid,
               "--host-label", "h%d" % nid,
               "--listen", "127.0.0.1:%d" % self.cports[nid - 1],
               "--peer-listen", "127.0.0.1:%d" % self.pports[nid - 1],
               "--data-dir", os.path.join(d, "data"), "--initial-partitions", "4"]
        if nid == 1:
            cmd += ["--bootstrap", "--bootstrap-expect", "3"]
        else:
            cmd += ["--join", "127.0.0.1:%d" % self.pports[0]]
        with open(os.path.join(d, "stratad.log"), "a") as logf:
            self.procs[nid] = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL)

    def status(self, nid, *extra):
        """Runs `strata cluster status` against node nid: (exit code, stdout, stderr)."""
        for n, p in self.procs.items():
            if p.poll() is not None and p.returncode != -signal.SIGKILL:
                raise Failure("node %d exited with status %d" % (n, p.returncode))
        r = subprocess.run([self.strata, "cluster", "status", "--endpoint",
                            "127.0.0.1:%d" % self.cports[nid - 1], "--timeout", "3000"]
                           + list(extra), capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def stop(self):
        """SIGTERM, then SIGKILL after 20 s; says which node needed the SIGKILL."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for nid, p in sorted(self.procs.items()):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                say("node %d ignored SIGTERM for 20 s: killed" % nid)

    def log_tails(self):
        for nid in sorted(self.procs):
            path = os.path.join(self.work, "n%d" % nid, "stratad.log")
            with open(path, errors="replace") as f:
                lines = f.readlines()[-15:]
            print("---- node %d log tail\n%s" % (nid, "".join(lines)), flush=True)


T0 = time.time()


def say(msg):
    print("[%5.1fs] %s" % (time.time() - T0, msg), flush=True)


def summary(out):
    m = re.search(r"^SUMMARY (.*)$", out, re.M)
    check(m is not None, "no SUMMARY line in:\n" + out)
    return m.group(1)


def step_not_ready(c):
    c.start(1)
    # Node 1 serves (answers /admin/cluster) but waits for two more nodes.
    code, out, err = poll(lambda: (lambda r: r if r[0] != 2 else None)(c.status(1)),
                          START_DEADLINE_S, "node 1 answers")
    check(code == 1, "node 1 alone: exit %d (want 1)\n%s%s" % (code, out, err))
    check("NOT READY" in out and "not ready" in err, "node 1 alone:\n" + out + err)
    say("a) node 1 alone: exit 1, NOT READY")


def step_ready(c):
    c.start(2)
    c.start(3)
    code, out, _ = poll(lambda: (lambda r: r if r[0] == 0 and "nodes up 3/3" in r[1] else None)(
        c.status(2)), START_DEADLINE_S, "node 2 reports a ready cluster of 3")
    for nid in (1, 2, 3):
        row = r"^  %d\s+az%d\s+h%d\s+ACTIVE\s+127\.0\.0\.1:%d\s+127\.0\.0\.1:%d\s+yes$" % (
            nid, nid, nid, c.cports[nid - 1], c.pports[nid - 1])
        check(re.search(row, out, re.M), "node row %d missing in:\n%s" % (nid, out))
    check("No tables." in out, "tables before CreateTable:\n" + out)
    say("b) ready: exit 0, 3 nodes listed, nodes up 3/3")


def create_table(c):
    ddb = boto3.client("dynamodb", endpoint_url="http://127.0.0.1:%d" % c.cports[0],
                       region_name="us-east-1", aws_access_key_id="local",
                       aws_secret_access_key="local",
                       config=botocore.config.Config(retries={"max_attempts": 10}))
    ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}])


def partition_rows(out):
    """{partition id: [member row lines]} of the table block of TABLE."""
    block = out.split("TABLE %s " % TABLE, 1)
    check(len(block) == 2, "no table block in:\n" + out)
    rows, current = {}, None
    for line in block[1].split("\n")[2:]:
        if not line.startswith("  ") or line.startswith("  ("):
            break
        m = re.match(r"^  (\d+)\s+[0-9a-f]{16}-[0-9a-f]{16}\s", line)
        if m:
            current = int(m.group(1))
            rows[current] = []
        check(current is not None, "member row before a partition row: " + line)
        rows[current].append(line)
    return rows


def step_table(c):
    create_table(c)

    def settled():
        code, out, _ = c.status(3, "--all")
        if code == 0 and "without leader 0, leader unknown 0" in summary(out):
            return out
        return None
    out = poll(settled, LEADERS_DEADLINE_S, "every partition has a leader (--all)")
    check(re.search(r"^TABLE %s \(id \d+, 4 partitions\)$" % TABLE, out, re.M),
          "table header:\n" + out)
    rows = partition_rows(out)
    check(len(rows) == 4, "4 partitions:\n" + out)
    for pid, lines in rows.items():
        check(len(lines) == 3, "partition %d has 3 member rows:\n%s" % (pid, out))
        states = [re.search(r"\b(leader|follower|candidate)\b\s+\d+", line) for line in lines]
        check(all(states), "a Raft state on every member row of %d:\n%s" % (pid, out))
        check(sum(1 for line in lines if re.search(r"\s\d+\*\s", line)) == 1,
              "one marked leader in partition %d:\n%s" % (pid, out))
    counts = [int(x) for x in re.findall(r" \d+:(\d+)", summary(out).split("leaders per node")[1])]
    check(sum(counts) == 4, "leaders per node add up to 4: " + summary(out))
    say("c) table: 4 partitions x 3 members, all with Raft state; %s" % summary(out))


def step_node_down(c):
    c.procs[3].send_signal(signal.SIGKILL)
    c.procs[3].wait()
    code, _, err = c.status(3)
    check(code == 2 and "unreachable" in err, "killed node: exit %d (want 2): %s" % (code, err))
    code, out, err = c.status(1, "--all")
    check(code == 0, "--all with a node down: exit %d\n%s" % (code, err))
    check(re.search(r"^\s+3\s+no answer$", out, re.M), "no answer rows for node 3:\n" + out)

    def down_seen():
        code, out, _ = c.status(1, "--all")
        s = summary(out)
        if (code == 0 and "nodes up 2/3" in s and "without leader 0, leader unknown 0" in s
                and s.endswith(" 3:0")):
            return out
        return None
    out = poll(down_seen, DOWN_DEADLINE_S,
               "node 1 sees 2/3 nodes up, every partition led by node 1 or 2")
    check(re.search(r"^  3\s+az3\s+h3\s+ACTIVE\s+\S+\s+\S+\s+no$", out, re.M),
          "node 3 not connected:\n" + out)
    say("d) node 3 killed: exit 2 against it; via node 1: %s" % summary(out))


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    stratad, strata = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="strata-cli-")
    c = Cluster(stratad, strata, work)
    ok = False
    try:
        step_not_ready(c)
        step_ready(c)
        step_table(c)
        step_node_down(c)
        ok = True
        say("strata_cli: all checks passed")
    except Failure as e:
        say("FAIL: %s" % e)
        c.log_tails()
    finally:
        c.stop()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say("work directory kept: %s" % work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
