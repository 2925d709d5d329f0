#!/usr/bin/python3
"""A node whose disk fills up stops; the cluster goes on; freed, the node catches up.

Usage: diskfull.py STRATAD
Needs root (it mounts a tmpfs); otherwise it reports a skip (exit 77).
 1. Three stratad in cluster mode (cluster.py's scaffolding, small memtables so engines
    flush often); node 3's data directory is a tmpfs of 80 MiB: its first log segment
    (64 MiB, preallocated) fits, and 16 MiB of engine tables; the next segment does not.
 2. Writers put 350 KB items through nodes 1 and 2 (boto3, standard retries) until node 3
    has stopped, and some more after. Node 3 stops by itself, exit status 1, its log
    naming the failure ("storage failed: ... No space left on device"): a node that can
    make nothing durable must not look alive to its peers. No client write fails.
 3. Node 3 started again on the still full disk stops the same way (it does not hang
    half-started).
 4. The tmpfs grows to 400 MiB and node 3 starts again: it becomes ready, every
    partition's replicas end at one applied index with one digest (GET /admin/digests),
    and every acknowledged write reads back, strongly and through node 3, with its value.
 5. One stratad in single-node mode on a 72 MiB tmpfs, written until it stops: exit status
    1 with the reason, the write in flight was not acknowledged (HTTP 500), and once the
    tmpfs has room every acknowledged write reads back after a restart.
Every wait polls a condition with a deadline.
"""
import base64
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as C  # noqa: E402  (Cluster, Node, client, create_table, poll, check)

ITEM_BYTES = 350 * 1000
FILL_DEADLINE_S = 180   # ~80 MiB through three replicas under ASan
STOP_DEADLINE_S = 60
AFTER_STOP_WRITES = 20


def mount_tmpfs(path, size):
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", path],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stderr.strip()


def value_of(key):
    """Incompressible (the engine's tables are compressed), and known from the key."""
    raw = random.Random(key).randbytes(ITEM_BYTES * 3 // 4)
    return base64.b64encode(raw).decode()


class BigWriters:
    """Two writers (through nodes 1 and 2) put big items under fresh keys; every
    acknowledged key is kept, every error too."""

    def __init__(self, cl):
        self.acked, self.errors, self.lock = [], [], threading.Lock()
        self.stop = False
        self.ts = [threading.Thread(daemon=True, target=self.writer, args=(cl.node(i),))
                   for i in (1, 2)]
        for t in self.ts:
            t.start()

    def writer(self, node):
        c = C.client(node.url, True)
        i = 0
        while not self.stop:
            key = "big-%d-%d" % (node.id, i)
            i += 1
            try:
                c.put_item(TableName=C.TABLE, Item={"pk": {"S": key}, "v": {"S": value_of(key)}})
            except Exception as e:  # every failure is a finding
                with self.lock:
                    self.errors.append("%s: %r" % (key, e))
                continue
            with self.lock:
                self.acked.append(key)

    def count(self):
        with self.lock:
            return len(self.acked)

    def end(self):
        self.stop = True
        for t in self.ts:
            t.join(timeout=120)


def log_since_start(node):
    with open(node.log_path, errors="replace") as f:
        f.seek(node.log_offset)
        return f.read()


def wait_stopped(node, what):
    C.poll(lambda: node.proc.poll() is not None, STOP_DEADLINE_S, what, 0.2)
    text = log_since_start(node)
    C.check(node.proc.returncode == 1, "%s: exit status 1, not %d\n%s" %
            (what, node.proc.returncode, node.tail()))
    C.check("stratad: storage failed:" in text and "No space left on device" in text,
            "%s: the log names the failure\n%s" % (what, node.tail()))
    node.proc = None
    return next(l for l in text.splitlines() if l.startswith("stratad: storage failed:"))


def run(cl, data3):
    cl.start()
    C.create_table(C.client(cl.node(1).url, True), cl)
    n3 = cl.node(3)

    # 2. Fill node 3's disk through the other two nodes.
    t0 = time.time()
    w = BigWriters(cl)
    try:
        try:
            C.poll(lambda: n3.proc.poll() is not None, FILL_DEADLINE_S,
                   "node 3 stops once its disk is full", 0.2)
        except C.Failure as e:
            raise C.Failure("%s (%d writes acknowledged, %d failed)" %
                            (e, w.count(), len(w.errors)))
        stopped_after = w.count()
        C.poll(lambda: w.count() >= stopped_after + AFTER_STOP_WRITES, C.FAILOVER_DEADLINE_S * 3,
               "%d more writes after node 3 stopped" % AFTER_STOP_WRITES, 0.2)
    finally:
        w.end()
    why = wait_stopped(n3, "node 3 with a full disk")
    C.check(not w.errors, "no client write fails: %s" % "; ".join(w.errors[:5]))
    C.log("2) ok: node 3 stopped after %.1f s and %d writes (%d MB), %d writes after, "
          "0 errors; it said: %s" % (time.time() - t0, stopped_after,
                                     stopped_after * ITEM_BYTES >> 20,
                                     len(w.acked) - stopped_after, why))

    # 3. Still full: a restart stops again, with the reason.
    n3.start()
    why = wait_stopped(n3, "node 3 restarted on a full disk")
    C.log("3) ok: restarted on the full disk, it stopped again: %s" % why)

    # 4. Room again: it starts, catches up, and serves every acknowledged write.
    r = subprocess.run(["mount", "-o", "remount,size=400m", data3], capture_output=True, text=True)
    C.check(r.returncode == 0, "tmpfs grows: %s" % r.stderr)
    t1 = time.time()
    cl.start([n3])
    C.poll(lambda: C.digests_agree(cl), C.CATCHUP_DEADLINE_S * 2,
           "every partition's replicas agree (node 3 caught up)", 0.5)
    c3 = C.client(n3.url, True)
    for key in w.acked:
        it = c3.get_item(TableName=C.TABLE, Key={"pk": {"S": key}}, ConsistentRead=True)
        C.check(it.get("Item", {}).get("v", {}).get("S") == value_of(key),
                "acknowledged write %s reads back through node 3" % key)
    C.log("4) ok: node 3 caught up in %.1f s once the disk had room; all %d acknowledged "
          "writes read back through it" % (time.time() - t1, len(w.acked)))


def single_node(stratad, work):
    data = os.path.join(work, "single")
    os.makedirs(data)
    ok_mount, why = mount_tmpfs(data, "72m")
    C.check(ok_mount, "tmpfs for the single node: %s" % why)
    port = C.free_ports(1)[0]
    url = "http://127.0.0.1:%d" % port
    log_path = os.path.join(work, "single.log")
    cmd = [stratad, "--listen", "127.0.0.1:%d" % port, "--data-dir", data,
           "--initial-partitions", "4", "--throttle", "false"]

    def start():
        with open(log_path, "a") as logf:
            p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        def serves():
            C.check(p.poll() is None, "the single node exited while starting")
            try:
                return C.client(url, False).list_tables() is not None
            except Exception:
                return False
        C.poll(serves, C.START_DEADLINE_S, "the single node serves", 0.2)
        return p
    try:
        p = start()
        c = C.client(url, False)  # one attempt each: the failing write must show
        c.create_table(TableName=C.TABLE, BillingMode="PAY_PER_REQUEST",
                       AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                       KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        acked, refused = [], None
        for i in range(1000):
            key = "single-%d" % i
            try:
                c.put_item(TableName=C.TABLE, Item={"pk": {"S": key}, "v": {"S": value_of(key)}})
                acked.append(key)
            except Exception as e:
                refused = e
                break
        C.check(refused is not None, "the disk filled up")
        C.poll(lambda: p.poll() is not None, STOP_DEADLINE_S, "the single node stops", 0.2)
        with open(log_path, errors="replace") as f:
            text = f.read()
        C.check(p.returncode == 1 and "stratad: storage failed:" in text and
                "No space left on device" in text,
                "the single node stops with the reason (status %s)\n%s" % (p.returncode, text))
        # botocore's connection errors carry response=None (ConnectionClosedError when the
        # node died with the request in flight).
        response = getattr(refused, "response", None) or {}
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        C.check(status == 500 or isinstance(refused, (ConnectionError, OSError)) or
                "Connect" in type(refused).__name__,
                "the write in flight was refused, not acknowledged: %r" % refused)
        r = subprocess.run(["mount", "-o", "remount,size=400m", data], capture_output=True,
                           text=True)
        C.check(r.returncode == 0, "tmpfs grows: %s" % r.stderr)
        p = start()
        c = C.client(url, True)
        for key in acked:
            it = c.get_item(TableName=C.TABLE, Key={"pk": {"S": key}}, ConsistentRead=True)
            C.check(it.get("Item", {}).get("v", {}).get("S") == value_of(key),
                    "acknowledged write %s survives on the single node" % key)
        p.terminate()
        C.check(p.wait(timeout=60) == 0, "the single node stops cleanly on SIGTERM")
        said = next(l for l in text.splitlines() if l.startswith("stratad: storage failed:"))
        C.log("5) ok: single node stopped after %d writes (the next: %s); all read back "
              "after a restart; it said: %s" % (len(acked), type(refused).__name__, said))
    finally:
        subprocess.run(["pkill", "-KILL", "-f", "--data-dir %s" % data], capture_output=True)
        subprocess.run(["umount", data], capture_output=True)


def main():
    stratad = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        print("diskfull: skipped: mounting a tmpfs needs root")
        return 77
    os.environ["STRATA_MEMTABLE_BYTES"] = str(1 << 20)
    work = tempfile.mkdtemp(prefix="strata-diskfull-")
    cl = C.Cluster(stratad, work)
    data3 = os.path.join(cl.node(3).dir, "data")
    ok_mount, why = mount_tmpfs(data3, "80m")
    if not ok_mount:
        print("diskfull: skipped: cannot mount a tmpfs here: %s" % why)
        return 77
    ok = False
    try:
        run(cl, data3)
        cl.kill_all()
        single_node(stratad, work)
        ok = True
    except C.Failure as e:
        C.log("FAILED: %s" % e)
        for n in cl.nodes:
            C.log("---- node %d log tail\n%s" % (n.id, n.tail()))
    finally:
        cl.kill_all()
        subprocess.run(["umount", data3], capture_output=True)
        if ok:
            subprocess.run(["rm", "-rf", work])
    C.log("diskfull: %s" % ("PASS" if ok else "FAIL (work dir %s)" % work))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
