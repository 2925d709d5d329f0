#!/usr/bin/python3
"""A burst of heavy requests does not take a node from everyone else.

Usage: overload.py STRATAD [CLIENTS]
Starts stratad (one node) on a free port in a temporary directory, fills a table with
items of 350 KB (a Scan answers about 1 MB), then:
 1. CLIENTS connections (default 400) each send one signed Scan and reset the connection
    at once (SO_LINGER 0), as clients that time out and leave do. While the node works
    through them, a separate client asks ListTables again and again: every answer must
    come within LIGHT_LIMIT_S. Before heavy operations were admitted in bounded numbers
    (node/api.c), the node read and encoded every abandoned Scan first, and ListTables
    waited for all of them (about 40 s for 640 under AddressSanitizer).
 2. The node gets through the burst: a Scan of its own is answered within 120 s.
 3. The same burst from clients that wait for their answers: every one gets its Scan
    answered (200) or refused with a retryable 503, and ListTables stays as quick.
Every wait polls with a deadline.
"""
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config
import botocore.credentials
import botocore.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import durability  # noqa: E402  (its start(): one stratad on a free port)

LIGHT_LIMIT_S = 3.0  # a ListTables answer while heavy requests are queued
CREDS = botocore.credentials.Credentials("x", "x")
TABLE = "heavy"


def log(msg):
    sys.stdout.write("%s\n" % msg)
    sys.stdout.flush()


def start(stratad, data_dir, logf):
    proc, url = durability.start(stratad, data_dir, logf,
                                 ("--initial-partitions", "2", "--throttle", "false"))
    host, port = url[len("http://"):].rsplit(":", 1)
    return proc, host, int(port)


def signed_scan(host, port):
    """The bytes of one SigV4-signed Scan request."""
    body = json.dumps({"TableName": TABLE}).encode()
    req = botocore.awsrequest.AWSRequest(
        method="POST", url="http://%s:%d/" % (host, port), data=body,
        headers={"Content-Type": "application/x-amz-json-1.0",
                 "X-Amz-Target": "DynamoDB_20120810.Scan"})
    botocore.auth.SigV4Auth(CREDS, "dynamodb", "us-east-1").add_auth(req)
    head = "POST / HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n" % (host, port, len(body))
    head += "".join("%s: %s\r\n" % kv for kv in req.headers.items()
                    if kv[0].lower() not in ("host", "content-length"))
    return head.encode() + b"\r\n" + body


def light_latencies(host, port, stop, out):
    """ListTables over and over until stop is set: (seconds, HTTP status) each."""
    c = client(host, port)
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            status = c.list_tables()["ResponseMetadata"]["HTTPStatusCode"]
        except botocore.exceptions.ClientError as e:
            status = e.response["ResponseMetadata"]["HTTPStatusCode"]
        except botocore.exceptions.BotoCoreError as e:
            status = str(e)
        out.append((time.monotonic() - t0, status))


def burst(host, port, n, wait):
    """n connections, one Scan each; reset at once, or wait for the status line."""
    scan = signed_scan(host, port)
    socks, statuses = [], []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=120)
        s.sendall(scan)
        if wait:
            socks.append(s)
        else:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
    for s in socks:
        try:
            line = s.makefile("rb").readline()
            statuses.append(int(line.split()[1]) if line else "closed")
        except OSError as e:
            statuses.append(str(e))
        finally:
            s.close()
    return statuses


def while_bursting(host, port, n, wait):
    stop, lat = threading.Event(), []
    t = threading.Thread(target=light_latencies, args=(host, port, stop, lat), daemon=True)
    t.start()
    t0 = time.monotonic()
    statuses = burst(host, port, n, wait)
    took = time.monotonic() - t0
    # Keep asking until the node has worked through the burst: a Scan of our own answers.
    c = client(host, port)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            c.scan(TableName=TABLE, Limit=1)
            break
        except botocore.exceptions.ClientError as e:
            if e.response["ResponseMetadata"]["HTTPStatusCode"] != 503:
                raise
    else:
        raise SystemExit("FAIL: the node did not get through the burst in 120 s")
    stop.set()
    t.join()
    return statuses, took, lat


def client(host, port):
    cfg = botocore.config.Config(retries={"max_attempts": 1}, read_timeout=120)
    return boto3.client("dynamodb", endpoint_url="http://%s:%d" % (host, port),
                        region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x", config=cfg)


def check_light(lat, what):
    worst = max(t for t, _ in lat)
    bad = [s for _, s in lat if s != 200]
    if bad or worst > LIGHT_LIMIT_S:
        raise SystemExit("FAIL: %s: ListTables %d times, worst %.2f s (limit %.1f), non-200: %s"
                         % (what, len(lat), worst, LIGHT_LIMIT_S, bad[:5]))
    return worst


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    stratad = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    work = tempfile.mkdtemp(prefix="strata-overload-")
    logf = open(os.path.join(work, "stratad.log"), "w")
    proc = None
    try:
        proc, host, port = start(stratad, os.path.join(work, "data"), logf)
        c = client(host, port)
        c.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                       AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                       KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        big = "x" * (350 * 1024)
        for i in range(4):
            c.put_item(TableName=TABLE, Item={"pk": {"S": "k%d" % i}, "v": {"S": big}})

        _, took, lat = while_bursting(host, port, n, wait=False)
        worst = check_light(lat, "%d abandoned Scans" % n)
        log("1) ok: %d Scans sent and abandoned in %.1f s; ListTables meanwhile %d times, "
            "worst %.2f s" % (n, took, len(lat), worst))

        statuses, took, lat = while_bursting(host, port, n, wait=True)
        worst = check_light(lat, "%d waiting Scans" % n)
        odd = [s for s in statuses if s not in (200, 503)]
        if odd:
            raise SystemExit("FAIL: waiting Scans answered %s" % odd[:5])
        log("3) ok: %d Scans waited: %d answered, %d refused (503) in %.1f s; ListTables "
            "meanwhile %d times, worst %.2f s" % (n, statuses.count(200), statuses.count(503),
                                                   took, len(lat), worst))
        proc.terminate()
        rc = proc.wait(timeout=60)
        proc = None
        if rc != 0:
            raise SystemExit("FAIL: stratad exited %d on SIGTERM" % rc)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        logf.close()
        text = open(os.path.join(work, "stratad.log")).read()
        if "ERROR: AddressSanitizer" in text or "runtime error" in text:
            sys.stderr.write(text[-4000:])
            shutil.rmtree(work, ignore_errors=True)
            raise SystemExit("FAIL: a sanitizer report in stratad's log")
        shutil.rmtree(work, ignore_errors=True)
    log("overload: ok")


if __name__ == "__main__":
    main()
