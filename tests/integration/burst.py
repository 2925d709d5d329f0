#!/usr/bin/python3
"""Split for heat under an on-demand burst, and a hot key that is reported, not split
(issue #7, "Must show").

Usage: burst.py STRATAD [STRATA] [--rate R] [--ceiling W] [--heat S] [--seconds T]
                [--initial N] [--csv FILE] [--plot FILE.png]

 1. Three nodes form a cluster whose partitions have a write ceiling of W WCU (the
    `partition_max_wcu` setting scales DynamoDB's 1,000 down to what this machine can
    drive) and split for heat after S seconds hot. An on-demand table starts with N
    partitions: N x W WCU.
 2. Writers (raw HTTP, SigV4-signed by botocore, spread over the three nodes) put new
    items of uniform keys at a rate rising from R/4 to R over 10 s, then R until T s:
    R is well past N x W, so at first many writes are refused
    (ProvisionedThroughputExceededException); a refused write is not retried (it was
    not acknowledged), a 5xx is (the same item, as SDKs do).
 3. Checks: the share of throttled requests over 5 s falls below 1% within 60 s of the
    start and is below 1% over the last 10 s; the table has more partitions; every
    acknowledged write is there (a 4-segment strongly consistent Scan); the replicas of
    every partition agree (digests).
 4. A hot key: a second table gets writes to one partition key at twice the ceiling for
    S + 6 s: it is throttled, reported as a hot key (`strata table stats` and
    /admin/table-stats), logged as blocking a split, and not split.
 5. Split for size, on a second cluster (split_size_mb = 1, no split for heat): 4 MiB of
    20 KB items in a table of 2 partitions end in at least 4, every item read back once,
    replicas agreeing.
Per-second figures (offered, acknowledged, throttled, partitions) go to --csv; --plot
draws them with gnuplot (tests/bench/burst/run.sh). Waits poll with deadlines; the
writers pace themselves with sleeps (load generation, not synchronisation).
"""
import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import botocore.auth
import botocore.awsrequest
import botocore.credentials

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import split as S  # noqa: E402  (the cluster scaffolding of the split test)

TABLE = "burst"
HOT_TABLE = "hotkey"
CREDS = botocore.credentials.Credentials("x", "x")
NODES = []
log = S.log


def signed_put(host, table, key, value):
    body = json.dumps({"TableName": table,
                       "Item": {"pk": {"S": key}, "v": {"S": value}}}).encode()
    req = botocore.awsrequest.AWSRequest(
        method="POST", url="http://%s/" % host, data=body,
        headers={"Content-Type": "application/x-amz-json-1.0",
                 "X-Amz-Target": "DynamoDB_20120810.PutItem"})
    botocore.auth.SigV4Auth(CREDS, "dynamodb", "us-east-1").add_auth(req)
    return body, dict(req.headers.items())


class Load:
    """Writers at a total rate rate_fn(t) (t: seconds since start), keys unique per
    writer (or one key for a hot-key load). Counts per second since start."""

    def __init__(self, nodes, table, rate_fn, seconds, workers, one_key=None):
        self.nodes, self.table, self.rate_fn = nodes, table, rate_fn
        self.seconds, self.workers, self.one_key = seconds, workers, one_key
        self.lock = threading.Lock()
        self.sec = {}  # second -> [acknowledged, throttled, errors]
        self.acked = {}
        self.other = []  # unexpected answers (status, body), a few

    def count(self, t, slot):
        s = int(t)
        with self.lock:
            self.sec.setdefault(s, [0, 0, 0])[slot] += 1

    def put(self, conn, host, key, value):
        """0 acknowledged, 1 throttled, 2 failed after retries."""
        for attempt in range(8):
            body, headers = signed_put(host, self.table, key, value)
            try:
                conn.request("POST", "/", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                time.sleep(0.05 * (1 << attempt))
                continue
            if r.status == 200:
                return 0
            if r.status == 400 and b"ProvisionedThroughputExceeded" in data:
                return 1
            if r.status < 500:
                with self.lock:
                    if len(self.other) < 5:
                        self.other.append((r.status, data[:300]))
                return 2
            time.sleep(0.05 * (1 << attempt))  # 5xx: retried, as SDKs do
        return 2

    def writer(self, w):
        node = self.nodes[w % len(self.nodes)]
        host = "127.0.0.1:%d" % node.cport
        conn = http.client.HTTPConnection("127.0.0.1", node.cport, timeout=10)
        n = 0
        nxt = self.start + w * self.workers / max(self.rate_fn(0), 1) / self.workers
        while True:
            now = time.time()
            t = now - self.start
            if t >= self.seconds:
                break
            nxt += self.workers / max(self.rate_fn(t), 1)
            if nxt < now - 1:
                nxt = now  # far behind: no backlog burst
            if nxt > now:
                time.sleep(nxt - now)
            key = self.one_key or "w%d-%d" % (w, n)
            value = "%d-%d" % (w, n)
            n += 1
            t_sent = time.time() - self.start
            res = self.put(conn, host, key, value)
            self.count(t_sent, res)
            if res == 0 and self.one_key is None:
                with self.lock:
                    self.acked[key] = value
        conn.close()

    def run(self):
        self.start = time.time()
        ts = [threading.Thread(daemon=True, target=self.writer, args=(w,))
              for w in range(self.workers)]
        for t in ts:
            t.start()
        return ts

    def share(self, a, b):
        """Throttled share of requests sent in seconds [a, b)."""
        ok = th = er = 0
        for s in range(a, b):
            o, t, e = self.sec.get(s, [0, 0, 0])
            ok, th, er = ok + o, th + t, er + e
        return th / max(ok + th + er, 1), ok + th + er


def partitions_of(node, table):
    a = node.admin()
    return len([p for p in (a or {}).get("partitions", []) if p["table"] == table])


def create_table(c, name):
    c.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    S.TABLE = name
    n = c.describe_table(TableName=name)["Table"]
    S.poll(lambda: S.settled(NODES, len(S.table_parts(NODES[0])) or -1),
           "table %s's partitions led and served everywhere" % name)
    assert n["TableStatus"] in ("ACTIVE", "CREATING")


def burst(args, nodes, c):
    create_table(c, TABLE)
    start_parts = partitions_of(nodes[0], TABLE)
    assert start_parts == args.initial, start_parts
    rate = args.rate
    load = Load(nodes, TABLE, lambda t: rate * min(1.0, 0.25 + 0.75 * t / 10), args.seconds,
                args.workers)
    parts = []  # (t, partitions)
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            parts.append((time.time() - load.start, partitions_of(nodes[0], TABLE)))
            stop.wait(0.5)

    ts = load.run()
    mon = threading.Thread(daemon=True, target=monitor)
    mon.start()
    for t in ts:
        t.join()
    stop.set()
    mon.join()
    secs = int(args.seconds)
    rows = []
    for s in range(secs):
        o, th, e = load.sec.get(s, [0, 0, 0])
        p = [n for (t, n) in parts if int(t) == s]
        rows.append((s, o + th + e, o, th, e, max(p) if p else (rows[-1][5] if rows else 0)))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("second,requests,acknowledged,throttled,errors,partitions\n")
            for r in rows:
                f.write(",".join(str(x) for x in r) + "\n")
    for r in rows:
        log("t=%3ds requests %5d ok %5d throttled %5d errors %d partitions %d" % r)
    early, n_early = load.share(0, 10)
    below = None
    for s in range(5, min(60, secs) + 1):
        sh, n = load.share(s - 5, s)
        if n > 0 and sh < 0.01:
            below = s
            break
    last, n_last = load.share(secs - 10, secs)
    end_parts = partitions_of(nodes[0], TABLE)
    errors = sum(v[2] for v in load.sec.values())
    total = sum(sum(v) for v in load.sec.values())
    log("burst: %d requests, %d acknowledged, throttled share %.1f%% in the first 10 s, "
        "below 1%% (5 s window) at %s s, %.2f%% over the last 10 s; partitions %d -> %d; "
        "%d errors" % (total, len(load.acked), 100 * early, below, 100 * last, start_parts,
                       end_parts, errors))
    assert early > 0.05, "the burst never exceeded the initial partitions (%.3f)" % early
    assert below is not None, "throttled share did not fall below 1% within 60 s"
    assert last < 0.01, "throttled share over the last 10 s: %.3f" % last
    assert end_parts > start_parts
    assert errors == 0 and not load.other, "errors: %d %s" % (errors, load.other)
    # Every acknowledged write is there, once.
    S.TABLE = TABLE
    keys = S.scan_all(c, consistent=True)
    assert len(keys) == len(set(keys)), "a key scanned twice"
    missing = [k for k in load.acked if k not in set(keys)]
    assert not missing, "%d acknowledged writes missing, e.g. %s" % (len(missing), missing[:3])
    S.poll(lambda: S.digests_agree(nodes), "replicas agree (digests)")
    log("burst: all %d acknowledged writes found by Scan; replicas agree" % len(load.acked))
    return below, end_parts


def hot_key(args, nodes, c, strata):
    create_table(c, HOT_TABLE)
    create_parts = partitions_of(nodes[0], HOT_TABLE)
    seconds = args.heat + 6
    load = Load(nodes, HOT_TABLE, lambda t: 2 * args.ceiling, seconds, 4, one_key="the-hot-key")
    for t in load.run():
        t.join()
    th, n = load.share(0, int(seconds))
    assert th > 0.2, "the hot key was not throttled (%.3f of %d)" % (th, n)

    def reported():
        for node in nodes:
            st = node.admin("/admin/table-stats/" + HOT_TABLE)
            for p in (st or {}).get("partitions", []):
                if p.get("hot_key"):
                    return p["hot_key"]
        return None
    hot = S.poll(reported, "hot key reported", 20)
    if strata:
        out = subprocess.run([strata, "--endpoint", nodes[0].url, "table", "stats", HOT_TABLE],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and hot["hash"] in out.stdout, out.stdout + out.stderr
    said = any("a hot key, not split" in open(n.log).read() for n in nodes)
    end_parts = partitions_of(nodes[0], HOT_TABLE)
    log("hot key: %.0f%% of %d writes throttled, reported as %s (%d%%), partitions %d -> %d, "
        "logged: %s" % (100 * th, n, hot["hash"], hot["percent"], create_parts, end_parts, said))
    assert end_parts == create_parts, "a single hot key made the table split"
    assert said, "no node logged the hot key that blocks a split"


def run_cluster(args, prefix, initial, extra, body, azs=("az1", "az2", "az3")):
    """Starts a node per entry of `azs`, in that AZ (stratad flags `extra`, tables of
    `initial` partitions), runs body(nodes, client, work) and stops them; the work
    directory is removed on success unless --keep. True when body returned and every
    node stopped cleanly."""
    work = tempfile.mkdtemp(prefix=prefix)
    ports = harness.free_ports(2 * len(azs))
    nodes = [S.Node(work, i + 1, az, ports[2 * i], ports[2 * i + 1], ports[1])
             for i, az in enumerate(azs)]
    NODES[:] = nodes
    ok = False
    try:
        for n in nodes:
            n.initial_partitions = initial
            n.extra = extra
            n.start(args.stratad)
        S.poll(lambda: all((n.admin() or {}).get("ready") for n in nodes),
               "%d nodes ready" % len(nodes))
        body(nodes, S.client(nodes[0].url), work)
        ok = True
    finally:
        for n in nodes:
            if n.proc is not None and n.proc.poll() is None:
                try:
                    n.stop()
                except AssertionError as e:
                    log(str(e))
                    ok = False
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log("data and logs kept in " + work)
    return ok


def size_split(nodes, c, work):
    """Split for size only (1 MiB, heat off, DynamoDB's ceilings): 4 MiB of 20 KB items
    into a table of 2 partitions; the partitions split until each holds less than 1 MiB,
    and every item stays readable."""
    create_table(c, "big")
    value = "x" * 20000
    for b in range(0, 200, 25):
        req = {"big": [{"PutRequest": {"Item": {"pk": {"S": "b%04d" % i}, "v": {"S": value}}}}
                       for i in range(b, b + 25)]}
        while req:  # 500 WCU a batch: the ceilings throttle some (UnprocessedItems)
            req = S.client(nodes[b // 25 % 3].url).batch_write_item(
                RequestItems=req).get("UnprocessedItems")
            if req:
                time.sleep(0.2)  # back off, as the SDK guides advise
    S.TABLE = "big"
    parts = S.poll(lambda: len(S.table_parts(nodes[0])) >= 4 and
                   S.settled(nodes, len(S.table_parts(nodes[0]))) and
                   len(S.table_parts(nodes[0])), "split for size to >= 4 partitions")
    keys = S.scan_all(c, consistent=True)
    missing = sorted(set("b%04d" % i for i in range(200)) - set(keys))
    got = [k for k in missing
           if "Item" in c.get_item(TableName="big", Key={"pk": {"S": k}}, ConsistentRead=True)]
    assert len(keys) == len(set(keys)), "a key scanned twice"
    assert not missing, "%d items missing from Scan (%s), %d of them found by GetItem" % (
        len(missing), missing[:5], len(got))
    S.poll(lambda: S.digests_agree(nodes), "replicas agree (digests)")
    sizes = c.describe_table(TableName="big")["Table"]
    log("size: 200 items of 20 KB (%d bytes) in 2 partitions -> %d partitions; every item "
        "read back once; replicas agree" % (sizes.get("TableSizeBytes", 0), parts))


def plot(csv, png, args):
    gp = shutil.which("gnuplot")
    if gp is None:
        log("gnuplot not installed: no plot (STRATA_BENCH_DEPS=1 deploy/install-deps.sh)")
        return
    script = f"""
set terminal pngcairo size 1000,600
set output '{png}'
set datafile separator ','
set title 'On-demand burst: {args.rate}/s writes, partitions of {args.ceiling} WCU, split for heat after {args.heat} s'
set xlabel 'seconds'
set ylabel 'requests per second'
set y2label 'partitions'
set ytics nomirror
set y2tics
set key top left
plot '{csv}' using 1:3 with lines lw 2 title 'acknowledged', \\
     '{csv}' using 1:4 with lines lw 2 title 'throttled', \\
     '{csv}' using 1:6 axes x1y2 with steps lw 2 title 'partitions'
"""
    r = subprocess.run([gp], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        log("gnuplot failed: " + r.stderr)
    else:
        log("plot: " + png)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stratad")
    ap.add_argument("strata", nargs="?")
    ap.add_argument("--rate", type=int, default=240, help="writes per second at the top")
    ap.add_argument("--ceiling", type=int, default=20, help="WCU per partition")
    ap.add_argument("--heat", type=int, default=3, help="seconds hot before a split")
    ap.add_argument("--seconds", type=float, default=70)
    ap.add_argument("--initial", type=int, default=2, help="partitions of the new table")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--csv")
    ap.add_argument("--plot")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--no-size", action="store_true", help="skip the split-for-size cluster")
    args = ap.parse_args()

    def burst_and_hot_key(nodes, c, work):
        if args.csv is None and args.plot:
            args.csv = os.path.join(work, "burst.csv")
        below, parts = burst(args, nodes, c)
        if args.plot:
            plot(args.csv, args.plot, args)
        hot_key(args, nodes, c, args.strata)
        log("burst: PASS (throttled share below 1%% at %d s, %d partitions)" % (below, parts))

    ok = run_cluster(args, "strata-burst-", args.initial,
                     ["--partition-max-wcu", str(args.ceiling), "--split-heat", str(args.heat)],
                     burst_and_hot_key)
    if ok and not args.no_size:
        ok = run_cluster(args, "strata-size-", 2, ["--split-size-mb", "1", "--split-heat", "0"],
                         size_split)
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
