#!/usr/bin/python3
"""Provisioned capacity in a 3-node cluster of real stratad processes, through boto3.

Usage: capacity_cluster.py STRATAD [STRATA_CLI]
Starts three stratad in cluster mode (cluster.py's Cluster), creates a provisioned table
(WCU 20, 4 partitions whose leaders spread over the nodes) and checks:
 a) the burst credit (300 s x 20 WCU) is spent, then a writer through every node keeps
    the table saturated: the accepted write units per second over a measured window are
    20 within 5% (each node spends its share of the table, cluster/capshare.h);
 b) a write refused for capacity is ProvisionedThroughputExceededException (HTTP 400,
    DynamoDB's message) through every node, whether the leader is local or remote;
 c) the three nodes' GET /metrics together count the consumed write units and throttle
    events (ConsumedWriteCapacityUnits, WriteThrottleEvents per table and partition), and
    `strata table stats` (when STRATA_CLI is given) prints the table's sums;
 d) UpdateTable to 200 WCU takes effect without restart: the measured rate passes 100;
 e) adaptive sharing across nodes (cluster/capshare.h): one hot key, written through
    every node, gets the table's whole 20 WCU within 5% although its partition's leader
    serves one partition of four; eventually consistent reads of it through every node
    (each served by any replica) get the table's 5 RCU within 5%, not a share per replica.
Every wait polls a condition with a deadline; rates are measured over measured windows.
"""
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

import botocore.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, check, client, log, poll, run_on_cluster  # noqa: E402

TABLE = "capacity_kv"
WCU = 20
KB = 1024
LEADERS_DEADLINE_S = 60
PROVISIONED_MSG = ("The level of configured provisioned throughput for the table was "
                   "exceeded. Consider increasing your provisioning level with the "
                   "UpdateTable API.")


def code_of(e):
    return (getattr(e, "response", None) or {}).get("Error", {}).get("Code")


class Load:
    """One thread per node running self.run(node) until stopped; errors end a run."""

    def __init__(self, cl):
        self.cl = cl
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors = []

    def run_for(self, seconds, what):
        """Runs the threads for `seconds`; returns the time they ran."""
        self.stop.clear()
        threads = [threading.Thread(daemon=True, target=self.run, args=(n,))
                   for n in self.cl.nodes]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while time.monotonic() - t0 < seconds and not self.errors:
            time.sleep(0.05)
        self.stop.set()
        for t in threads:
            t.join()
        check(not self.errors, "%s met errors: %s" % (what, self.errors[:3]))
        return time.monotonic() - t0


class Writers(Load):
    """One thread per node writing 25-item batches of distinct keys; counts accepted
    write units (items of `size` bytes cost ceil(size / 1 KB))."""

    def __init__(self, cl, size):
        super().__init__(cl)
        self.size = size
        self.units_each = max(1, -(-(size + 40) // KB))
        self.units = 0
        self.whole_throttles = 0
        self.n = 0

    def next_keys(self, count):
        with self.lock:
            start = self.n
            self.n += count
        return ["s%d-%08d" % (self.size, i) for i in range(start, start + count)]

    def run(self, node):
        c = client(node.url, False)
        while not self.stop.is_set():
            reqs = [{"PutRequest": {"Item": {"pk": {"S": k}, "v": {"S": "x" * self.size}}}}
                    for k in self.next_keys(25)]
            try:
                out = c.batch_write_item(RequestItems={TABLE: reqs})
                ok = 25 - len(out["UnprocessedItems"].get(TABLE, []))
                with self.lock:
                    self.units += ok * self.units_each
            except botocore.exceptions.ClientError as e:
                if code_of(e) != "ProvisionedThroughputExceededException":
                    self.errors.append(str(e))
                    return
                with self.lock:
                    self.whole_throttles += 1
                time.sleep(0.01)

    def window(self, seconds):
        """Runs the writers for `seconds`; returns (units accepted, elapsed)."""
        with self.lock:
            u0 = self.units
        elapsed = self.run_for(seconds, "writers")
        with self.lock:
            return self.units - u0, elapsed


def create_table(c, cl):
    c.create_table(TableName=TABLE,
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                   ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": WCU})
    poll(lambda: c.describe_table(TableName=TABLE)["Table"]["TableStatus"] == "ACTIVE",
         LEADERS_DEADLINE_S, "table ACTIVE")

    def all_led():
        ps = cl.partitions(TABLE)
        return ps and all(len(p["members"]) == 3 and cl.leader_of(p["id"]) for p in ps)
    poll(all_led, LEADERS_DEADLINE_S, "every partition of %s has a leader" % TABLE, 0.2)

    # A new leader starts with fresh buckets: measure once leader balancing is done
    # (every partition led by its hinted node).
    def settled():
        ps = cl.partitions(TABLE)
        return ps and all(p["leader_hint"] and cl.leader_of(p["id"]) == p["leader_hint"]
                          for p in ps)
    poll(settled, LEADERS_DEADLINE_S, "leaders of %s follow their hints" % TABLE, 0.2)
    leaders = {p["id"]: cl.leader_of(p["id"]) for p in cl.partitions(TABLE)}
    log("table %s: leaders %s" % (TABLE, leaders))
    return leaders


def drain(cl):
    """Spends the burst credit with 10-WCU items until writes are refused and a second
    admits no more than twice the rate (the credit would admit thousands)."""
    w = Writers(cl, 9 * KB)
    t0 = time.monotonic()
    while True:
        units, _ = w.window(1.0)
        if units <= 2 * WCU and w.whole_throttles > 0:
            break
        check(time.monotonic() - t0 < 120, "burst credit never ran out")
    log("burst credit spent in %.1f s" % (time.monotonic() - t0))


def part_a(cl):
    drain(cl)
    w = Writers(cl, 100)
    w.window(3.0)  # repays what the last large items were admitted with (<= 2 s)
    units, elapsed = w.window(12.0)
    rate = units / elapsed
    log("a) saturated: %d WCU in %.2f s = %.2f WCU/s (provisioned %d)" %
        (units, elapsed, rate, WCU))
    check(abs(rate - WCU) <= 0.05 * WCU, "accepted %.2f WCU/s, provisioned %d" % (rate, WCU))
    return units


def part_b(cl):
    for n in cl.nodes:
        c = client(n.url, False)
        for i in range(30):  # some request through this node meets an empty bucket
            try:
                c.put_item(TableName=TABLE, Item={"pk": {"S": "b-%d-%d" % (n.id, i)},
                                                  "v": {"S": "x" * 9 * KB}})
            except botocore.exceptions.ClientError as e:
                check(code_of(e) == "ProvisionedThroughputExceededException",
                      "node %d: %s" % (n.id, e))
                check(e.response["Error"]["Message"] == PROVISIONED_MSG, str(e))
                check(e.response["ResponseMetadata"]["HTTPStatusCode"] == 400, str(e))
                break
        else:
            raise Failure("node %d: no write refused for capacity" % n.id)
    log("b) ProvisionedThroughputExceededException through every node")


def metric_sum(cl, name, partitions):
    total = 0.0
    pat = (r'^%s\{table="%s",partition="\d+"\} (\S+)$' if partitions
           else r'^%s\{table="%s"\} (\S+)$') % (name, TABLE)
    for n in cl.nodes:
        with urllib.request.urlopen(n.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        total += sum(float(v) for v in re.findall(pat, text, re.M))
    return total


def part_c(cl, cli):
    consumed = metric_sum(cl, "ConsumedWriteCapacityUnits", False)
    per_part = metric_sum(cl, "ConsumedWriteCapacityUnits", True)
    throttles = metric_sum(cl, "WriteThrottleEvents", False)
    requests = metric_sum(cl, "ThrottledRequests", False)
    log("c) metrics over the nodes: consumed %.0f WCU (partitions %.0f), %d write throttle "
        "events, %d throttled requests" % (consumed, per_part, throttles, requests))
    check(consumed >= 300 * WCU, "consumed %.0f < the burst credit alone" % consumed)
    check(consumed == per_part, "table and partition sums differ")
    check(throttles > 0 and requests >= 3, "throttles not counted")
    if cli:
        out = subprocess.run([cli, "--endpoint", cl.node(1).url, "table", "stats", TABLE],
                             capture_output=True, text=True, timeout=30)
        log(out.stdout.rstrip())
        check(out.returncode == 0, "strata table stats: %s" % out.stderr)
        m = re.search(r"consumed: read \S+, write (\S+) units", out.stdout)
        check(m and float(m.group(1)) >= consumed, "strata table stats: %s" % out.stdout)
        check(len(re.findall(r"^\d+ +\d+ ", out.stdout, re.M)) >= 4, "one row per partition")


class HotKey(Load):
    """One thread per node hitting one key: PutItem (1 WCU) or eventually consistent
    GetItem (0.5 RCU); counts the accepted operations."""

    def __init__(self, cl, op):
        super().__init__(cl)
        self.op = op
        self.ok = self.refused = 0

    def run(self, node):
        c = client(node.url, False)
        item = {"pk": {"S": "hot"}, "v": {"S": "x" * 100}}
        while not self.stop.is_set():
            try:
                if self.op == "put":
                    c.put_item(TableName=TABLE, Item=item)
                else:
                    c.get_item(TableName=TABLE, Key={"pk": {"S": "hot"}}, ConsistentRead=False)
                with self.lock:
                    self.ok += 1
            except botocore.exceptions.ClientError as e:
                if code_of(e) != "ProvisionedThroughputExceededException":
                    self.errors.append(str(e))
                    return
                with self.lock:
                    self.refused += 1
                time.sleep(0.01)

    def window(self, seconds):
        """Runs for `seconds`; returns (operations accepted, refused, elapsed)."""
        with self.lock:
            ok0, refused0 = self.ok, self.refused
        elapsed = self.run_for(seconds, self.op)
        with self.lock:
            return self.ok - ok0, self.refused - refused0, elapsed


def saturated_rate(cl, op, units_each, provisioned):
    """Spends the credit (windows until some are refused), lets the shares follow the
    demand, then measures the accepted units per second over 12 s."""
    h = HotKey(cl, op)
    t0 = time.monotonic()
    while h.window(1.0)[1] == 0:
        check(time.monotonic() - t0 < 90, "%s: the credit never ran out" % op)
    h.window(3.0)
    ok, refused, elapsed = h.window(12.0)
    rate = ok * units_each / elapsed
    log("e) one hot key, %s through every node: %.2f units/s (provisioned %d), %d refused" %
        (op, rate, provisioned, refused))
    check(abs(rate - provisioned) <= 0.05 * provisioned,
          "%s of one key: %.2f units/s, provisioned %d" % (op, rate, provisioned))


def part_e(cl):
    saturated_rate(cl, "put", 1, WCU)
    saturated_rate(cl, "get", 0.5, 5)


def part_d(cl):
    c = client(cl.node(2).url, True)
    c.update_table(TableName=TABLE,
                   ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 200})
    poll(lambda: c.describe_table(TableName=TABLE)["Table"]["TableStatus"] == "ACTIVE", 30,
         "table ACTIVE after UpdateTable")
    units, elapsed = Writers(cl, 100).window(3.0)
    log("d) after UpdateTable to 200 WCU: %.1f WCU/s" % (units / elapsed))
    check(units / elapsed > 100, "%.1f WCU/s after raising WCU to 200" % (units / elapsed))


def main():
    cli = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None

    def body(cl):
        cl.start()
        create_table(client(cl.node(1).url, True), cl)
        part_a(cl)
        part_b(cl)
        part_c(cl, cli)
        part_e(cl)
        part_d(cl)
        log("capacity in a cluster: ok")
    return run_on_cluster(sys.argv[1], "strata-capacity-", body)


if __name__ == "__main__":
    sys.exit(main())
