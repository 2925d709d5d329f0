#!/usr/bin/python3
"""CreateTable while a node's state changes or partitions split: no CreateTable fails.

Usage: create_race.py STRATAD [TABLES]
A node places a new table's replicas on its copy of the map, on ACTIVE nodes; the meta
group checks them again when it applies the change. A node drained (or marked DOWN) in
between used to fail the CreateTable with a ValidationException ("node 4 is DRAINING: only
ACTIVE nodes take new replicas"): 8 of 30 in this test, before. The change is now
refused as stale and placed again from the map that holds the drain.
Likewise a split that took the partition ids a new table was stamped with failed it
("partition id 249 is used or out of order"): 28 of 30 in the second phase, before;
the table is now stamped again with free ids.
Four nodes (az1: 1 and 4, az2: 2, az3: 3; tables of 8 partitions):
 1. while a thread switches node 4 between DRAINING and ACTIVE through node 2, TABLES
    (default 30) CreateTable calls through node 1, one at a time with a single attempt
    each, must all succeed, and each new table's partitions have three replicas in three
    AZs;
 2. while a thread splits the partitions of a table through node 2 (POST /admin/split),
    TABLES more CreateTable calls through node 1 must all succeed, each table with its
    own partition ids.
Every wait polls a condition with a deadline.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request

import boto3
import botocore.config
import botocore.exceptions

import harness

DEADLINE_S = 90


def log(*a):
    print(*a, flush=True)


def set_state(cport, node, state):
    """True when the change was made; False when refused (already in that state, say)."""
    req = urllib.request.Request("http://127.0.0.1:%d/admin/node-state" % cport,
                                 data=json.dumps({"node": node, "state": state}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
        return True
    except urllib.error.HTTPError:
        return False


def node_state(cport, node):
    for n in (harness.admin(cport) or {}).get("nodes", []):
        if n["id"] == node:
            return n["state"]
    return None


def create_tables(c, numbers):
    """CreateTable race<k> for each k, one at a time; every one must succeed."""
    failed = []
    for k in numbers:
        try:
            c.create_table(TableName="race%d" % k, BillingMode="PAY_PER_REQUEST",
                           AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                           KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        except botocore.exceptions.ClientError as e:
            failed.append(str(e))
    assert not failed, "%d of %d CreateTable failed, e.g. %s" % (len(failed), len(numbers),
                                                                 failed[:2])


def main():
    stratad = os.path.abspath(sys.argv[1])
    tables = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    work = tempfile.mkdtemp(prefix="strata-create-race-")
    ports = harness.free_ports(8)
    cports, pports = ports[0::2], ports[1::2]
    azs = ["az1", "az2", "az3", "az1"]
    procs = []
    ok = False
    try:
        for i in range(4):
            cmd = harness.node_command(stratad, i + 1, azs[i], cports[i], pports[i], pports[0],
                                       os.path.join(work, "d%d" % i), ["--initial-partitions", "8"])
            f = open(os.path.join(work, "n%d.log" % (i + 1)), "w")
            procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        harness.poll(lambda: all((harness.admin(p) or {}).get("ready") for p in cports),
                     "4 nodes ready", DEADLINE_S, 0.2)
        c1 = boto3.client("dynamodb", endpoint_url="http://127.0.0.1:%d" % cports[0],
                          region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x",
                          config=botocore.config.Config(retries={"total_max_attempts": 1}))
        stop = threading.Event()
        switches = [0]

        def toggle():
            states = ["DRAINING", "ACTIVE"]
            i = 0
            while not stop.is_set():
                switches[0] += set_state(cports[1], 4, states[i % 2])
                i += 1

        t = threading.Thread(target=toggle, daemon=True)
        t.start()
        try:
            create_tables(c1, range(tables))
        finally:
            stop.set()
            t.join()
        assert switches[0] >= 4, "node 4 switched state only %d times" % switches[0]
        a = harness.admin(cports[0])
        az_of = {n["id"]: n["az"] for n in a["nodes"]}
        parts = [p for p in a["partitions"] if p["table"].startswith("race")]
        assert len(parts) == 8 * tables, "%d partitions for %d tables" % (len(parts), tables)
        for p in parts:
            assert len({az_of[m] for m in p["members"]}) == 3, p
        log("create race: %d CreateTable while node 4 switched between DRAINING and ACTIVE "
            "%d times: all succeeded, every partition in 3 AZs" % (tables, switches[0]))

        set_state(cports[1], 4, "ACTIVE")
        harness.poll(lambda: node_state(cports[0], 4) == "ACTIVE", "node 4 ACTIVE again",
                     DEADLINE_S, 0.1)
        splits = [0]

        def splitter():
            while not stop.is_set():
                for p in (harness.admin(cports[1]) or {}).get("partitions", []):
                    if p["table"] != "race0" or stop.is_set():
                        continue
                    req = urllib.request.Request(
                        "http://127.0.0.1:%d/admin/split" % cports[1],
                        data=json.dumps({"partition": p["id"]}).encode(),
                        headers={"Content-Type": "application/json"})
                    try:
                        with urllib.request.urlopen(req, timeout=10) as r:
                            r.read()
                        splits[0] += 1
                    except OSError:
                        pass  # a partition splitting already, say
        stop.clear()
        t = threading.Thread(target=splitter, daemon=True)
        t.start()
        # (race0's partitions may be moving to or from node 4 still: splits wait for that)
        harness.poll(lambda: splits[0] > 0, "a first split of race0", DEADLINE_S, 0.05)
        try:
            create_tables(c1, range(tables, 2 * tables))
        finally:
            stop.set()
            t.join()
        assert splits[0] >= 2, "only %d splits" % splits[0]
        ids = [p["id"] for p in harness.admin(cports[0])["partitions"]]
        assert len(ids) == len(set(ids)), "partition ids used twice"
        log("create race: %d CreateTable while %d splits were made: all succeeded" %
            (tables, splits[0]))
        ok = True
    finally:
        harness.stop_all(procs, work, ok, log)
    log("PASS")


if __name__ == "__main__":
    main()
