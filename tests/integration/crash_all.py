#!/usr/bin/python3
"""The whole cluster killed at once (kill -9 of all three nodes) under load loses nothing.

Usage: crash_all.py STRATAD [ROUNDS]
A power cut takes every replica of every partition and the whole meta group at the same
moment: each node must come back from its own log and engine alone. Three stratad in
cluster mode (cluster.py's Cluster; small memtables, so engines flush and logs compact
between the crashes and a restart replays a log above a flushed engine). Then ROUNDS
(default 3) times, while clients work through all three nodes:
 - writers put items with distinct keys;
 - incrementers add 1 to a few counters (UpdateItem ADD): a replayed entry applied twice
   would count one increment twice;
 - a table worker creates a table, then deletes it, one name after another;
all three nodes are killed with SIGKILL together, in the middle of that, and started again.
Each time, once every node is ready and every partition has a leader:
 - every acknowledged put reads back strongly with its value;
 - every counter is at least its acknowledged increments and at most its attempted ones
   (an increment whose answer was lost may or may not have been applied);
 - a table whose CreateTable was acknowledged exists unless its DeleteTable was attempted;
   one whose DeleteTable was acknowledged does not.
At the end, with the clients stopped, the replicas of every partition converge (one applied
index, one digest: GET /admin/digests).
Clients use single attempts, so they see every error; between the crashes only HTTP
500/503 and lost connections are allowed, never a 4xx other than the expected ones.
"""
import os
import random
import sys
import threading
import time

import botocore.exceptions

import cluster as C

COUNTERS = 8
RESTART_DEADLINE_S = 120   # every node ready and every partition led again (ASan)
CONVERGE_DEADLINE_S = 60


class Work:
    """The clients and what each of them knows of its operations' outcomes."""

    def __init__(self, cl):
        self.cl = cl
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acked = {}                      # key -> value
        self.count_acked = [0] * COUNTERS    # increments acknowledged
        self.count_tried = [0] * COUNTERS    # increments sent (acknowledged or not)
        self.tables = {}                     # name -> {"created": bool, "delete": None|"tried"|"acked"}
        self.errors = {}
        self.bad = []
        self.threads = []
        self.next_table = 0                  # table names are never reused across rounds

    def note_error(self, e, nid):
        """Counts a failed request; the ones a crash cannot explain go to `bad`."""
        if isinstance(e, botocore.exceptions.ClientError):
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            kind = "HTTP %s %s" % (status, e.response.get("Error", {}).get("Code"))
            if status not in (500, 503):
                self.bad.append("node %d: %s" % (nid, e))
        else:
            kind = type(e).__name__
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def writer(self, wid):
        cs = [C.client(n.url, False) for n in self.cl.nodes]
        i = 0
        while not self.stop.is_set():
            nid = (wid + i) % len(cs) + 1
            # 1 KB values: a round's puts fill a 256 KiB memtable, so engines flush and
            # logs compact between the crashes.
            key, value = "p%d-%d" % (wid, i), "v%d-%d-%s" % (wid, i, "x" * 1000)
            i += 1
            try:
                cs[nid - 1].put_item(TableName=C.TABLE, Item={"pk": {"S": key}, "v": {"S": value}})
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
                self.note_error(e, nid)
                continue
            with self.lock:
                self.acked[key] = value

    def incrementer(self, wid):
        cs = [C.client(n.url, False) for n in self.cl.nodes]
        rng = random.Random(wid)
        i = 0
        while not self.stop.is_set():
            nid = (wid + i) % len(cs) + 1
            i += 1
            k = rng.randrange(COUNTERS)
            with self.lock:
                self.count_tried[k] += 1
            try:
                cs[nid - 1].update_item(TableName=C.TABLE, Key={"pk": {"S": "counter-%d" % k}},
                                        UpdateExpression="ADD n :one",
                                        ExpressionAttributeValues={":one": {"N": "1"}})
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
                self.note_error(e, nid)
                continue
            with self.lock:
                self.count_acked[k] += 1

    def table_step(self, c, name, nid, create):
        """One CreateTable or DeleteTable; True when acknowledged."""
        try:
            if create:
                c.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                               AttributeDefinitions=[{"AttributeName": "k",
                                                      "AttributeType": "S"}],
                               KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}])
            else:
                c.delete_table(TableName=name)
            return True
        except botocore.exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            # A retried step whose first attempt was applied before the crash.
            if code in ("ResourceInUseException", "ResourceNotFoundException"):
                with self.lock:
                    self.errors[code] = self.errors.get(code, 0) + 1
                return None
            self.note_error(e, nid)
        except botocore.exceptions.BotoCoreError as e:
            self.note_error(e, nid)
        return False

    def table_worker(self):
        cs = [C.client(n.url, False) for n in self.cl.nodes]
        while not self.stop.is_set():
            i = self.next_table
            self.next_table += 1
            name = "crash_t%d" % i
            nid = i % len(cs) + 1
            with self.lock:
                self.tables[name] = {"created": None, "delete": None}
            while not self.stop.is_set():  # until the create's outcome is known
                got = self.table_step(cs[nid - 1], name, nid, True)
                if got is not False:
                    break
                nid = nid % len(cs) + 1
                time.sleep(0.05)
            with self.lock:
                # None: a retry found the table, so some attempt created it (and no delete
                # was sent yet); False: stopped before any attempt was known to work.
                self.tables[name]["created"] = got is not False
            if got is False:
                return
            with self.lock:
                self.tables[name]["delete"] = "tried"
            if self.table_step(cs[nid - 1], name, nid, False):
                with self.lock:
                    self.tables[name]["delete"] = "acked"

    def start(self):
        self.stop.clear()
        self.threads = ([threading.Thread(target=self.writer, args=(w,), daemon=True)
                         for w in range(4)] +
                        [threading.Thread(target=self.incrementer, args=(w,), daemon=True)
                         for w in range(3)] +
                        [threading.Thread(target=self.table_worker, daemon=True)])
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


def crash_all(cl):
    """SIGKILL to every node, back to back, before waiting for any."""
    for n in cl.nodes:
        n.killed = True
        n.proc.kill()
    for n in cl.nodes:
        n.proc.wait()


def restart(cl):
    t0 = time.time()
    cl.start()

    def all_led():
        ps = cl.partitions()
        return ps and all(cl.leader_of(p["id"]) for p in ps)
    C.poll(all_led, RESTART_DEADLINE_S, "every partition has a leader after the crash", 0.2)
    return time.time() - t0


def counter_values(c):
    vals = []
    for k in range(COUNTERS):
        r = c.get_item(TableName=C.TABLE, Key={"pk": {"S": "counter-%d" % k}}, ConsistentRead=True)
        vals.append(int(r.get("Item", {}).get("n", {}).get("N", "0")))
    return vals


def verify(cl, work, what):
    """The checks after a crash and restart, with the clients stopped."""
    acked, lo, hi, tables = work.acked, work.count_acked, work.count_tried, work.tables
    C.read_back(cl, acked, [1, 2, 3])
    c = C.client(cl.node(2).url, True)
    vals = counter_values(c)
    for k in range(COUNTERS):
        C.check(lo[k] <= vals[k] <= hi[k],
                "%s: counter-%d is %d, acknowledged increments %d, attempted %d" %
                (what, k, vals[k], lo[k], hi[k]))
    names = set()
    start = None
    while True:
        page = c.list_tables(**({"ExclusiveStartTableName": start} if start else {}))
        names.update(page["TableNames"])
        start = page.get("LastEvaluatedTableName")
        if not start:
            break
    for name, t in tables.items():
        if t["created"] and t["delete"] is None:
            C.check(name in names, "%s: table %s was created (acknowledged) and is missing" %
                    (what, name))
        if t["delete"] == "acked":
            C.check(name not in names, "%s: table %s was deleted (acknowledged) and is listed" %
                    (what, name))
    return len(acked), sum(lo), vals, len(tables)


def main():
    os.environ["STRATA_MEMTABLE_BYTES"] = "262144"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3

    def body(cl):
        cl.start()
        C.create_table(C.client(cl.node(1).url, True), cl)
        work = Work(cl)
        for r in range(1, rounds + 1):
            work.start()
            # Crash once the load has acknowledged a fresh batch of writes.
            base = len(work.acked)
            C.poll(lambda: len(work.acked) >= base + 400, 60,
                   "round %d: 400 more acknowledged puts" % r)
            # Engines flushed since this round's start (counted from each start of a node).
            flushes = [(n.admin() or {}).get("engine", {}).get("flushes", 0) for n in cl.nodes]
            crash_all(cl)
            work.finish()
            C.check(all(f > 0 for f in flushes),
                    "round %d: every engine flushed before the crash: %s" % (r, flushes))
            took = restart(cl)
            puts, incs, vals, tables = verify(cl, work, "round %d" % r)
            C.log("round %d ok: all 3 killed at once (engine flushes before %s), ready and led "
                  "again in %.2f s; %d puts, %d increments acknowledged, counters %s, %d tables "
                  "created or tried" % (r, flushes, took, puts, incs, vals, tables))
        C.poll(lambda: C.digests_agree(cl), CONVERGE_DEADLINE_S,
               "every partition's replicas at one applied index and digest", 0.5)
        C.check(not work.bad, "errors a crash does not explain: %s" % work.bad[:5])
        C.log("ok: %d rounds; replicas converged; client errors: %s" %
              (rounds, ", ".join("%s %d" % kv for kv in sorted(work.errors.items())) or "none"))
    return C.run_on_cluster(sys.argv[1], "strata-crash-all-", body)


if __name__ == "__main__":
    sys.exit(main())
