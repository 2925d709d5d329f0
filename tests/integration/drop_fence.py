#!/usr/bin/python3
"""A table deleted and created again loses no write acknowledged after the delete.

Usage: drop_fence.py STRATAD
Five nodes: 1-3 (az1..az3) form the meta group, 4 (az1) and 5 (az2) join outside it, so
their copies of the cluster map follow the meta group by fetching it (every 500 ms).
Partitions of a table whose replicas are nodes 3, 4 and 5 have a majority of lagging
replicas. Each round:
 1. DeleteTable through node 1, then CreateTable of the same name and key through node 1.
 2. At once, WRITERS threads put PUTS items each through nodes 4 and 5, all starting
    together: their copies of the map still lag by some 350 ms, and route the puts to the
    dropped table's partitions. (A put that meets a stopped replica there waits; all
    starting together, those routed to partitions led by node 4 or 5 go at once.)
 3. Every acknowledged put must read back strongly through node 1.
Without the fence (DeleteTable answered before a majority of each partition's voters
stopped it, cluster/router_cluster.c "Fencing a dropped table"), writes led by node 4 or 5
went to the old partition, were acknowledged and vanished with it.
With the meta leader frozen (SIGSTOP), a node asked about a table it does not know, or for
ListTables, first asks the meta leader whether its copy of the map is current: it gets no
answer, and answers from its copy after at most 2 s per node it asks (one ask, and at most
two more when a node names another as leader: under 7 s), never hangs or errs otherwise;
its later questions go to another member (at most one more wait, while the others elect a
new meta leader), not to the silent one again.
Then with replicas down: node 5 killed, DeleteTable still answers at once (nodes 3 and 4
are a majority of every partition). With node 4 killed too, partitions of nodes 3, 4 and 5
cannot confirm: DeleteTable answers 503 (ServiceUnavailable) once its 8 s budget is spent,
and the table is gone all the same. Nodes 4 and 5, restarted after that drop (which they
missed), start no replica of the dropped table (their logs drop its groups), their engines
end holding none of its items (nodes 4 and 5 run with small memtables, and 1,000 items of
1 KiB went into each table they missed the drop of, so part of them had reached table
files), and the table made again takes writes through them.
Every wait polls a condition with a deadline.
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import boto3
import botocore.config

import harness

TABLE = "fenced"
ROUNDS = 6
WRITERS = 32
PUTS = 2
FILL_ITEMS = 1000
DEADLINE_S = 60


def log(*a):
    print(*a, flush=True)


def poll(cond, what, deadline_s=DEADLINE_S, interval=0.05):
    return harness.poll(cond, what, deadline_s, interval)


def client(cport):
    # No retries: an error is counted, never turned into a second write.
    return harness.client(cport, 1, WRITERS)


def create(c):
    c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])


def active(c):
    try:
        return c.describe_table(TableName=TABLE)["Table"]["TableStatus"] == "ACTIVE"
    except c.exceptions.ResourceNotFoundException:
        return False


def fill(cport, prefix):
    """FILL_ITEMS items of about 1 KiB into TABLE through node `cport`: on nodes 4 and 5
    (small memtables) part of them reaches table files, which a drop must delete."""
    c = harness.client(cport, 10)
    for b in range(0, FILL_ITEMS, 25):
        req = {TABLE: [{"PutRequest": {"Item": {"pk": {"S": "%s%05d" % (prefix, i)},
                                                "v": {"S": "x" * 1000}}}}
                       for i in range(b, b + 25)]}
        end = time.time() + DEADLINE_S
        while req:
            assert time.time() < end, "batch never fully processed"
            req = c.batch_write_item(RequestItems=req).get("UnprocessedItems")


def lagging_majorities(cport):
    """Partitions of TABLE whose members include nodes 4 and 5 (as node `cport` sees them)."""
    a = harness.admin(cport) or {}
    return [p["id"] for p in a.get("partitions", [])
            if p.get("table") == TABLE and {4, 5} <= set(p.get("members", []))]


def main():
    stratad = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="strata-fence-")
    ports = harness.free_ports(10)
    cports, pports = ports[0::2], ports[1::2]
    azs = ["az1", "az2", "az3", "az1", "az2"]
    procs, cmds, logs, envs = [], [], [], []
    ok = False
    try:
        for i in range(5):
            cmd = harness.node_command(stratad, i + 1, azs[i], cports[i], pports[i], pports[0],
                                       os.path.join(work, "d%d" % i),
                                       ["--initial-partitions", "8", "--throttle", "false"])
            cmds.append(cmd)
            logs.append(open(os.path.join(work, "n%d.log" % (i + 1)), "w"))
            envs.append(dict(os.environ, STRATA_MEMTABLE_BYTES="262144") if i >= 3 else None)
            procs.append(subprocess.Popen(cmd, stdout=logs[i], stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=envs[i]))
            if i == 2:  # the first three form the meta group; 4 and 5 join it later
                poll(lambda: all((harness.admin(p) or {}).get("ready") for p in cports[:3]),
                     "3 nodes ready")
        poll(lambda: all((harness.admin(p) or {}).get("ready") for p in cports), "5 nodes ready")
        assert [harness.admin(p)["meta_voter"] for p in cports] == [True] * 3 + [False] * 2
        src = client(cports[0])
        lag = [client(cports[3]), client(cports[4])]
        create(src)
        poll(lambda: active(src), "table ACTIVE")
        parts = poll(lambda: lagging_majorities(cports[3]),
                     "a partition with replicas on nodes 4 and 5")
        log("partitions with a majority outside the meta group: %s" % parts)

        acked, errors, lost, lock = [], [], [], threading.Lock()

        def writer(w, r, go):
            c = lag[w % 2]
            go.wait()
            for i in range(PUTS):
                k = "r%d-w%d-%d" % (r, w, i)
                try:
                    c.put_item(TableName=TABLE, Item={"pk": {"S": k}})
                    with lock:
                        acked.append(k)
                except Exception as e:  # refused or unknown: not acknowledged, not checked
                    with lock:
                        errors.append(type(e).__name__)

        delete_s = []
        for r in range(ROUNDS):
            # Both lagging nodes know the table before it goes (DescribeTable syncs them).
            for c in lag:
                poll(lambda: active(c), "table ACTIVE through nodes 4 and 5")
            first = len(acked)
            t0 = time.time()
            src.delete_table(TableName=TABLE)
            delete_s.append(time.time() - t0)
            go = threading.Event()
            ts = [threading.Thread(target=writer, args=(w, r, go)) for w in range(WRITERS)]
            for t in ts:
                t.start()
            create(src)
            go.set()
            for t in ts:
                t.join()
            poll(lambda: active(src), "table ACTIVE again")
            for k in acked[first:]:
                got = src.get_item(TableName=TABLE, Key={"pk": {"S": k}}, ConsistentRead=True)
                if "Item" not in got:
                    lost.append(k)
            log("round %d: %d puts acknowledged through nodes 4 and 5, %d lost so far"
                % (r, len(acked) - first, len(lost)))
        assert not lost, "%d of %d acknowledged writes lost, e.g. %s" % (len(lost), len(acked),
                                                                         lost[:5])
        assert len(acked) >= ROUNDS * WRITERS, "too few writes acknowledged: %d" % len(acked)
        delete_s.sort()
        log("drop fence: %d rounds, %d puts acknowledged, 0 lost, %d refused (%s); DeleteTable "
            "p50 %.1f ms, max %.1f ms" % (ROUNDS, len(acked), len(errors),
                                          ", ".join(sorted(set(errors))) or "none",
                                          1000 * delete_s[len(delete_s) // 2],
                                          1000 * delete_s[-1]))

        # The meta leader frozen: catalog syncs give up in bounded time.
        leader = (harness.admin(cports[0]) or {}).get("meta_leader")
        assert leader in (1, 2, 3), "meta leader %r" % leader
        os.kill(procs[leader - 1].pid, signal.SIGSTOP)
        try:
            for i in range(5):
                if i + 1 == leader:
                    continue
                c = client(cports[i])
                took = []
                for _ in range(3):
                    t0 = time.time()
                    try:
                        c.get_item(TableName="nosuch", Key={"pk": {"S": "k"}})
                        raise AssertionError("GetItem of a table that does not exist answered")
                    except c.exceptions.ResourceNotFoundException:
                        pass
                    took.append(time.time() - t0)
                    t0 = time.time()
                    names = c.list_tables()["TableNames"]
                    took.append(time.time() - t0)
                    assert names == [TABLE], names
                # The silent leader costs one wait of 2 s, or two while the others elect a
                # new one; then the node asks another member (forget_silent_leader).
                assert all(t < 7 for t in took) and all(t < 1.9 for t in took[2:]), (i + 1, took)
                log("meta leader (node %d) frozen: node %d answered 3 GetItem of a missing "
                    "table and 3 ListTables in %s s" % (leader, i + 1,
                                                         " ".join("%.2f" % t for t in took)))
        finally:
            os.kill(procs[leader - 1].pid, signal.SIGCONT)
        poll(lambda: all((harness.admin(p) or {}).get("ready") for p in cports),
             "5 nodes ready again")

        # Replicas down. Node 5 killed: nodes 3 and 4 confirm for the partitions on 3, 4, 5.
        for c in lag:
            poll(lambda: active(c), "table ACTIVE through nodes 4 and 5")
        fill(cports[0], "fill-a")
        procs[4].kill()
        procs[4].wait()
        t0 = time.time()
        src.delete_table(TableName=TABLE)
        one_down_s = time.time() - t0
        assert one_down_s < 5, "DeleteTable took %.1f s with one node down" % one_down_s
        create(src)
        poll(lambda: active(src), "table ACTIVE after node 5 was killed")
        fill(cports[0], "fill-b")
        procs[3].kill()
        procs[3].wait()
        t0 = time.time()
        try:
            src.delete_table(TableName=TABLE)
            raise AssertionError("DeleteTable answered with two of three replicas down")
        except botocore.exceptions.ClientError as e:
            code = e.response["Error"]["Code"]
            status = e.response["ResponseMetadata"]["HTTPStatusCode"]
            assert (code, status) == ("ServiceUnavailable", 503), (code, status)
        two_down_s = time.time() - t0
        try:
            src.describe_table(TableName=TABLE)
            raise AssertionError("the table outlived a DeleteTable answered 503")
        except src.exceptions.ResourceNotFoundException:
            pass
        log("replicas down: DeleteTable in %.2f s with node 5 down; with nodes 4 and 5 down, "
            "503 after %.1f s and the table gone" % (one_down_s, two_down_s))

        # Nodes 4 and 5 restart after a drop they missed (down through it): they start no
        # replica of the dropped table again, and the table made anew takes their writes.
        for i in (3, 4):
            procs[i] = subprocess.Popen(cmds[i], stdout=logs[i], stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=envs[i])
        poll(lambda: all((harness.admin(p) or {}).get("ready") for p in cports),
             "5 nodes ready after nodes 4 and 5 restarted")
        create(src)
        for c in [src] + lag:
            poll(lambda: active(c), "table ACTIVE through nodes 1, 4 and 5")
        keys = ["restart-%d" % i for i in range(40)]
        retrying = [boto3.client("dynamodb", endpoint_url="http://127.0.0.1:%d" % p,
                                 region_name="us-east-1", aws_access_key_id="x",
                                 aws_secret_access_key="x",
                                 config=botocore.config.Config(
                                     retries={"mode": "standard", "total_max_attempts": 10}))
                    for p in cports[3:5]]
        for i, k in enumerate(keys):  # (the new partitions may still be electing leaders)
            retrying[i % 2].put_item(TableName=TABLE, Item={"pk": {"S": k}})
        missing = [k for k in keys if "Item" not in src.get_item(
            TableName=TABLE, Key={"pk": {"S": k}}, ConsistentRead=True)]
        assert not missing, "puts through restarted nodes 4 and 5 lost: %s" % missing
        current = {p["id"] for p in harness.admin(cports[0])["partitions"]}
        for i in (3, 4):
            local = {rep["partition"] for rep in harness.admin(cports[i], "/admin/digests")
                     ["replicas"]}
            assert local <= current, "node %d runs replicas %s outside the map %s" % (
                i + 1, sorted(local - current), sorted(current))
        # Nor do their logs keep the dropped partitions' groups (which would pin their
        # segments for good), nor their engines the dropped table's items: every group in a
        # log and every item in an engine is one of a replica the node runs.
        def stray(i):
            return (harness.admin(cports[i], "/admin/digests") or {}).get("stray_items")
        for i in (3, 4):
            seen = [None]

            def clean():
                seen[0] = (harness.admin(cports[i])["log"]["unclaimed"], stray(i))
                return seen[0] == (0, 0)
            try:
                poll(clean, "node %d's log and engine hold only replicas it runs" % (i + 1), 30)
            except AssertionError:
                raise AssertionError("node %d: (unclaimed log groups, stray items) %s, not "
                                     "(0, 0)" % (i + 1, seen[0]))
        log("restart after the drop: nodes 4 and 5 run no replica of the dropped table and "
            "their logs and engines hold none; %d puts through them read back" % len(keys))
        ok = True
    finally:
        harness.stop_all(procs, work, ok, log)
    log("PASS")


if __name__ == "__main__":
    main()
