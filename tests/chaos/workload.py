"""Chaos workload: client threads running single-item operations against a node list and
recording every operation (invocation, completion, outcome, result) into a history.

Raw HTTP (http.client) speaking the DynamoDB JSON protocol, for speed: the signature is
not verified by stratad yet, so a well-formed Authorization header is enough.

Outcomes: "ok"; "fail" when the operation certainly did not take effect (an error
response from the server other than a 5xx, or a refused connection before anything was
sent); "unknown" when it may or may not have taken effect (timeout, connection lost
after the request was sent, 5xx).
"""
import http.client
import json
import random
import socket
import threading
import time

TABLE = "chaos"
AUTH = ("AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=0")


class Refused(Exception):
    """The connection was refused: nothing was sent."""


class Conn:
    """One keep-alive HTTP connection to a node, reopened after any error."""

    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def call(self, target, body):
        """Returns (status, decoded body). Raises Refused, or another exception when the
        outcome is unknown."""
        if self.conn is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                c.connect()
            except (ConnectionRefusedError, socket.timeout, OSError) as e:
                c.close()
                raise Refused(str(e))
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conn = c
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0",
                   "X-Amz-Target": "DynamoDB_20120810." + target,
                   "X-Amz-Date": "20260101T000000Z", "Authorization": AUTH}
        try:
            self.conn.request("POST", "/", payload, headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.close()
            raise
        try:
            return resp.status, json.loads(data or b"{}")
        except ValueError:
            return resp.status, {"__type": "BadJson", "raw": data[:200].decode("latin-1")}


def create_table(host, port, deadline_s=30):
    """Creates the table and waits until it is ACTIVE. A 503 (a cluster not ready to
    place it yet) is retried until the deadline."""
    c = Conn(host, port, 5)
    end = time.monotonic() + deadline_s
    while True:
        st, body = c.call("CreateTable", {
            "TableName": TABLE, "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}]})
        if st == 200 or "ResourceInUse" in body.get("__type", ""):
            break
        if st != 503 or time.monotonic() >= end:
            raise RuntimeError("CreateTable: %s %s" % (st, body))
        time.sleep(0.1)
    while time.monotonic() < end:
        st, body = c.call("DescribeTable", {"TableName": TABLE})
        if st == 200 and body["Table"]["TableStatus"] == "ACTIVE":
            c.close()
            return
        time.sleep(0.05)
    raise RuntimeError("table not ACTIVE in %ds" % deadline_s)


def _error_name(body):
    return body.get("__type", "").split("#")[-1] or "Unknown"


class History:
    """Thread-safe JSONL history; times are seconds since t0 (monotonic)."""

    def __init__(self, path, t0):
        self.f = open(path, "w")
        self.t0 = t0
        self.lock = threading.Lock()
        self.next_id = 0
        self.errors = []

    def now(self):
        return time.monotonic() - self.t0

    def new_id(self):
        with self.lock:
            self.next_id += 1
            return self.next_id

    def write(self, rec):
        line = json.dumps(rec, sort_keys=True)
        with self.lock:
            self.f.write(line + "\n")
            # Kept for errors_between(): the runner reports client errors during a drain.
            if rec.get("type") == "op" and rec.get("outcome") != "ok" and \
                    "ConditionalCheckFailed" not in rec.get("error", ""):
                self.errors.append(rec)

    def errors_between(self, t0, t1):
        """Operations (not final reads) that failed or ended unknown, invoked or returned
        within [t0, t1], except ConditionalCheckFailed."""
        with self.lock:
            return [r for r in self.errors if not r.get("final")
                    and r["ret"] >= t0 and r["call"] <= t1]

    def close(self):
        with self.lock:
            self.f.close()


def run_op(conn, hist, client, node, kind, key, value=None, expect=None, consistent=True,
           final=False):
    """Runs one operation and records it; returns the recorded op."""
    k = {"k": {"S": key}}
    if kind == "put":
        target, body = "PutItem", {"TableName": TABLE, "Item": {
            "k": {"S": key}, "v": {"S": value}, "ver": {"N": "0"}}}
    elif kind == "cas":
        target, body = "UpdateItem", {
            "TableName": TABLE, "Key": k, "UpdateExpression": "SET v = :v, ver = :n",
            "ConditionExpression": "ver = :e",
            "ExpressionAttributeValues": {":v": {"S": value}, ":n": {"N": str(expect + 1)},
                                          ":e": {"N": str(expect)}}}
    elif kind == "delete":
        target, body = "DeleteItem", {"TableName": TABLE, "Key": k}
    elif kind == "read":
        target, body = "GetItem", {"TableName": TABLE, "Key": k, "ConsistentRead": consistent}
    else:
        raise ValueError(kind)
    rec = {"type": "op", "id": hist.new_id(), "client": client, "node": node, "kind": kind,
           "key": key, "consistent": consistent, "final": final}
    if value is not None:
        rec["value"] = value
    if expect is not None:
        rec["expect"] = expect
    rec["call"] = hist.now()
    try:
        status, resp = conn.call(target, body)
        rec["ret"] = hist.now()
        if status == 200:
            rec["outcome"] = "ok"
            if kind == "read":
                item = resp.get("Item")
                rec["result"] = None if item is None else {
                    "v": item["v"]["S"], "ver": int(item["ver"]["N"])}
        else:
            rec["outcome"] = "unknown" if status >= 500 else "fail"
            rec["error"] = "%d %s" % (status, _error_name(resp))
    except Refused as e:
        rec["ret"] = hist.now()
        rec["outcome"], rec["error"] = "fail", "refused: %s" % e
    except Exception as e:  # timeout or connection lost with the request sent
        rec["ret"] = hist.now()
        rec["outcome"], rec["error"] = "unknown", "%s: %s" % (type(e).__name__, e)
    hist.write(rec)
    return rec


class Client(threading.Thread):
    """One workload client: a random mix of operations over the key set. It sticks to one
    node (start, or a random one) over a keep-alive connection and moves to another node
    after an error. nodes is a list of (node id, host, port); every op records the id of
    the node it was sent to."""

    MIX = (("put", 25), ("cas", 30), ("delete", 5), ("strong", 25), ("eventual", 15))

    def __init__(self, cid, nodes, keys, hist, stop, seed, timeout=1.5, think_s=0.005,
                 start=None):
        super().__init__(name="chaos-client-%d" % cid, daemon=True)
        self.cid, self.nodes, self.keys, self.hist, self.stop = cid, nodes, keys, hist, stop
        self.rng = random.Random(seed)
        self.timeout, self.think_s, self.start_at = timeout, think_s, start
        self.seq = 0
        self.last_ver = {}  # key -> version last seen, the usual CAS expectation

    def pick(self):
        r = self.rng.randrange(sum(w for _, w in self.MIX))
        for name, w in self.MIX:
            if r < w:
                return name
            r -= w

    def other_node(self, cur):
        """A node other than cur (cur itself when there is only one)."""
        if len(self.nodes) == 1:
            return cur
        return (cur + 1 + self.rng.randrange(len(self.nodes) - 1)) % len(self.nodes)

    def run(self):
        cur = self.start_at if self.start_at is not None else self.rng.randrange(len(self.nodes))
        node, host, port = self.nodes[cur]
        conn = Conn(host, port, self.timeout)
        while not self.stop.is_set():
            key = self.rng.choice(self.keys)
            what = self.pick()
            self.seq += 1
            value = "c%d-%d" % (self.cid, self.seq)
            if what == "put":
                rec = run_op(conn, self.hist, self.cid, node, "put", key, value)
            elif what == "cas":
                expect = self.last_ver.get(key, 0)
                if self.rng.random() < 0.1:
                    expect += self.rng.choice((-1, 1, 2))  # sometimes a stale guess
                rec = run_op(conn, self.hist, self.cid, node, "cas", key, value,
                             expect=max(expect, 0))
                if rec["outcome"] == "ok":
                    self.last_ver[key] = rec["expect"] + 1
            elif what == "delete":
                rec = run_op(conn, self.hist, self.cid, node, "delete", key)
            else:
                rec = run_op(conn, self.hist, self.cid, node, "read", key,
                             consistent=(what == "strong"))
                if rec["outcome"] == "ok" and rec["result"] is not None:
                    self.last_ver[key] = rec["result"]["ver"]
            if rec["outcome"] != "ok" and "ConditionalCheckFailed" not in rec.get("error", ""):
                # Back off a little on errors, and move to another node.
                conn.close()
                cur = self.other_node(cur)
                node, host, port = self.nodes[cur]
                conn = Conn(host, port, self.timeout)
                self.stop.wait(0.05)
            elif self.think_s:
                self.stop.wait(self.rng.random() * self.think_s)
        conn.close()


class Prober(threading.Thread):
    """Strong reads of every key in turn through one node, recorded like a client's, that
    never move to another node: while that node is cut off from its peers (isolate-leader)
    they ask exactly the node that may still believe it leads. Runs until stop is set."""

    def __init__(self, cid, node, keys, hist, stop, timeout=1.0):
        super().__init__(name="chaos-prober-%d" % cid, daemon=True)
        self.cid, self.node, self.keys, self.hist, self.stop = cid, node, keys, hist, stop
        self.timeout = timeout
        self.counts = {"ok": 0, "fail": 0, "unknown": 0}

    def run(self):
        nid, host, port = self.node
        conn = Conn(host, port, self.timeout)
        i = self.cid
        while not self.stop.is_set():
            key = self.keys[i % len(self.keys)]
            i += 1
            rec = run_op(conn, self.hist, self.cid, nid, "read", key, consistent=True)
            self.counts[rec["outcome"]] += 1
            if rec["outcome"] != "ok":
                conn.close()
                conn = Conn(host, port, self.timeout)
                self.stop.wait(0.02)
        conn.close()


class Filler(threading.Thread):
    """Background volume, outside the checked history: BatchWriteItem of 25 padded items
    over a bounded key set ("fill-N", overwritten in turn), round robin over the nodes, at about `rate` items a
    second. It makes engines flush and Raft logs compact during a run, so that a replica
    that stays down long enough has to copy a partition (snapshot) instead of replaying
    the log. set_burst(True) lifts the rate limit until set_burst(False).
    The items land in the partitions whose replica digests are compared at the end."""

    BATCH = 25
    KEYS = 8000  # fill-1..fill-8000, overwritten in turn: ~6 MB, so a long run stays small

    def __init__(self, nodes, stop, rate, pad_bytes=700, timeout=10.0):
        super().__init__(name="chaos-filler", daemon=True)
        self.nodes, self.stop, self.rate = nodes, stop, rate
        self.pad = "x" * pad_bytes
        self.timeout = timeout
        self.cv = threading.Condition()
        self.counts = {"ok": 0, "unprocessed": 0, "error": 0}
        self.bursting = False
        self.seq = 0

    def acked(self):
        with self.cv:
            return self.counts["ok"]

    def set_burst(self, on):
        """on: write as fast as the cluster takes it; off: back to the paced rate."""
        with self.cv:
            self.bursting = on
            self.cv.notify_all()

    def _batch(self):
        items = []
        for _ in range(self.BATCH):
            self.seq = self.seq % self.KEYS + 1
            items.append({"PutRequest": {"Item": {
                "k": {"S": "fill-%d" % self.seq}, "v": {"S": self.pad}, "ver": {"N": "0"}}}})
        return {"RequestItems": {TABLE: items}}

    def run(self):
        i, t_next = 0, time.monotonic()
        conns = [Conn(h, p, self.timeout) for _, h, p in self.nodes]
        while not self.stop.is_set():
            with self.cv:
                bursting = self.bursting
            if not bursting:
                # Paced: one batch every BATCH / rate seconds.
                t_next = max(t_next, time.monotonic() - 1.0)
                if self.stop.wait(max(0.0, t_next - time.monotonic())):
                    break
                t_next += self.BATCH / float(self.rate)
            i = (i + 1) % len(conns)
            try:
                status, resp = conns[i].call("BatchWriteItem", self._batch())
            except Exception:
                status, resp = 0, {}
            with self.cv:
                if status == 200:
                    left = len(resp.get("UnprocessedItems", {}).get(TABLE, []))
                    self.counts["ok"] += self.BATCH - left
                    self.counts["unprocessed"] += left
                else:
                    self.counts["error"] += 1
                self.cv.notify_all()
            if status != 200:
                self.stop.wait(0.1)
        for c in conns:
            c.close()


def final_reads(nodes, keys, hist, deadline_s=30, timeout=3):
    """After healing: one successful strong read of every key (retried until the
    deadline), through each node in turn; nodes is a list of (node id, host, port).
    Returns the keys that could not be read."""
    missing = []
    for key in keys:
        end = time.monotonic() + deadline_s
        ok = False
        while time.monotonic() < end and not ok:
            for node, host, port in nodes:
                conn = Conn(host, port, timeout)
                rec = run_op(conn, hist, -1, node, "read", key, consistent=True, final=True)
                conn.close()
                if rec["outcome"] == "ok":
                    ok = True
                    break
            if not ok:
                time.sleep(0.1)
        if not ok:
            missing.append(key)
    return missing
