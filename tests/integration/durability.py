#!/usr/bin/python3
"""Durability across kill -9: every write stratad acknowledged is there after a restart.

Usage: durability.py STRATAD [ITEMS]
Starts stratad on a free port in a temporary data directory, creates tables through
boto3 (the real AWS SDK), writes items from several threads, kills stratad with
SIGKILL while writes are still in flight, restarts it on the same directory and checks
that every acknowledged item (and every acknowledged table) is there, then shuts down
with SIGTERM and checks the clean restart too.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import boto3
import botocore.config
import botocore.exceptions


def start(stratad, data_dir, log, args=("--initial-partitions", "4")):
    """stratad on a free port (single node); returns (process, "http://host:port")."""
    proc = subprocess.Popen([stratad, "--listen", "127.0.0.1:0", "--data-dir", data_dir]
                            + list(args), stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.match(r"stratad: serving on http://([0-9.]+):(\d+)", line)
        if m:
            return proc, "http://%s:%s" % (m.group(1), m.group(2))
    proc.kill()
    raise SystemExit("stratad did not start (see log)")


def client(url):
    cfg = botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=5,
                                 read_timeout=30)
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test", config=cfg)


def create_tables(c):
    c.create_table(TableName="durable", BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                         {"AttributeName": "sk", "AttributeType": "N"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                              {"AttributeName": "sk", "KeyType": "RANGE"}])
    c.create_table(TableName="second", BillingMode="PROVISIONED",
                   ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
                   AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}],
                   KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    # A table created, filled and deleted must stay deleted after the crash.
    c.create_table(TableName="gone", BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}])
    c.put_item(TableName="gone", Item={"k": {"S": "x"}})
    c.delete_table(TableName="gone")
    c.update_table(TableName="second",
                   ProvisionedThroughput={"ReadCapacityUnits": 7, "WriteCapacityUnits": 5})
    c.tag_resource(ResourceArn="arn:aws:dynamodb:us-east-1:000000000000:table/second",
                   Tags=[{"Key": "team", "Value": "strata"}])


def writer(url, wid, count, acked, stop):
    c = client(url)
    for i in range(count):
        if stop.is_set():
            return
        key = ("user%d" % (i % 50), wid * 1000000 + i)
        try:
            c.put_item(TableName="durable",
                       Item={"pk": {"S": key[0]}, "sk": {"N": str(key[1])},
                             "payload": {"S": "x" * (i % 300)}, "n": {"N": str(i)}})
        except (botocore.exceptions.EndpointConnectionError,
                botocore.exceptions.ConnectionClosedError,
                botocore.exceptions.ReadTimeoutError):
            return  # stratad died: this write was never acknowledged
        except botocore.exceptions.ClientError as e:
            print("unexpected error:", e, file=sys.stderr)
            return
        acked.append(key)


def check(url, acked):
    c = client(url)
    tables = c.list_tables()["TableNames"]
    assert tables == ["durable", "second"], tables
    missing = 0
    for pk, sk in acked:
        r = c.get_item(TableName="durable", Key={"pk": {"S": pk}, "sk": {"N": str(sk)}},
                       ConsistentRead=True)
        if "Item" not in r:
            missing += 1
    assert missing == 0, "%d of %d acknowledged items are missing" % (missing, len(acked))
    s = c.describe_table(TableName="second")["Table"]
    assert s["ProvisionedThroughput"]["ReadCapacityUnits"] == 7, s
    tags = c.list_tags_of_resource(ResourceArn=s["TableArn"])["Tags"]
    assert tags == [{"Key": "team", "Value": "strata"}], tags
    d = c.describe_table(TableName="durable")["Table"]
    assert d["TableStatus"] == "ACTIVE"
    assert d["ItemCount"] >= len(acked), (d["ItemCount"], len(acked))


def main():
    stratad = sys.argv[1]
    per_writer = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    work = tempfile.mkdtemp(prefix="strata-durability-")
    data_dir = os.path.join(work, "data")
    log = open(os.path.join(work, "stratad.log"), "w")
    ok = False
    try:
        proc, url = start(stratad, data_dir, log)
        create_tables(client(url))
        acked = []
        stop = threading.Event()
        threads = [threading.Thread(daemon=True, target=writer,
                                    args=(url, w, per_writer, acked, stop))
                   for w in range(4)]
        for t in threads:
            t.start()
        # Kill while writes are in flight: after some acknowledgements, before the end.
        deadline = time.time() + 60
        while len(acked) < per_writer and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
        print("acknowledged before kill -9: %d" % len(acked))
        assert len(acked) > 0

        proc, url = start(stratad, data_dir, log)
        check(url, acked)
        # More writes, then a clean shutdown and restart.
        c = client(url)
        for i in range(20):
            c.put_item(TableName="durable", Item={"pk": {"S": "after"}, "sk": {"N": str(i)}})
            acked.append(("after", i))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "stratad did not exit cleanly"
        proc, url = start(stratad, data_dir, log)
        check(url, acked)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        ok = True
        print("ok: %d acknowledged items survived kill -9 and restart" % len(acked))
    finally:
        if not ok:
            try:
                proc.kill()
            except Exception:
                pass
            log.close()
            sys.stderr.write(open(os.path.join(work, "stratad.log")).read()[-4000:])
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
