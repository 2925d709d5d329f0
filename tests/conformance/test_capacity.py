"""Provisioned throughput: throttling at the configured rate, burst credit, the
ProvisionedThroughputExceededException shape, UnprocessedItems/UnprocessedKeys when a
batch is partly throttled, UpdateTable raising the rate live, and (stratad only) the
capacity metrics at GET /metrics and /admin/table-stats/NAME.

DynamoDB keeps up to 300 s of unused capacity as burst credit, and a new table starts
with it; these tests spend it first (large items: few requests), then measure. The
clients never retry (conftest.make_client), so every throttle is seen.

Rates are measured by the client over a measured window (no fixed sleeps): the units
accepted while a writer keeps the table saturated, divided by the elapsed time.
"""
import json
import re
import time

import pytest

from botocore.exceptions import ClientError

from conftest import ENDPOINT, ddb_error, http_request, unique_name, wait_active

PROVISIONED_MSG = ("The level of configured provisioned throughput for the table was "
                   "exceeded. Consider increasing your provisioning level with the "
                   "UpdateTable API.")
KB = 1024


def S(v):
    return {"S": v}


@pytest.fixture
def provisioned(ddb, request):
    """provisioned(rcu, wcu) -> a new provisioned table with key pk (S)."""
    made = []

    def make(rcu, wcu):
        name = unique_name(request.node.name)
        ddb.create_table(TableName=name,
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         ProvisionedThroughput={"ReadCapacityUnits": rcu,
                                                "WriteCapacityUnits": wcu})
        wait_active(ddb, name)
        made.append(name)
        leaders_settled(name)
        return name

    yield make
    for name in made:
        try:
            ddb.delete_table(TableName=name)
        except Exception:
            pass


def leaders_settled(name, deadline_s=60):
    """In a cluster, a partition's buckets live on its leader's node and a new leader
    starts with fresh credit: wait until every partition of the table is led by the node
    the map wants (leader == leader_hint), so leader balancing does not move buckets
    during a measurement. Nothing to wait for on one node."""
    deadline = time.monotonic() + deadline_s
    while True:
        status, _, body = http_request("GET", "/admin/cluster", b"", {})
        info = json.loads(body) if status == 200 else {}
        parts = [p for p in info.get("partitions", []) if p.get("table") == name]
        if not info.get("nodes") or (parts and all(
                p["leader"] != 0 and p["leader"] == p.get("leader_hint", p["leader"])
                for p in parts)):
            return
        assert time.monotonic() < deadline, "leaders of %s did not settle" % name
        time.sleep(0.1)


def stratad_only(target):
    if target != "stratad":
        pytest.skip("timing and metrics of stratad's token buckets")


class Writer:
    """Writes distinct items (uniform keys) with BatchWriteItem and counts what was
    accepted, in write units (items of `size` bytes cost ceil(size / 1 KB))."""

    def __init__(self, ddb, table, size=100):
        self.ddb, self.table, self.size = ddb, table, size
        self.n = 0
        self.units_each = max(1, -(-(size + 40) // KB))

    def batch(self, count=25):
        """One BatchWriteItem; returns (accepted, unprocessed, throttled_whole)."""
        reqs = []
        for _ in range(count):
            self.n += 1
            reqs.append({"PutRequest": {"Item": {"pk": S("w%08d" % self.n),
                                                 "v": S("x" * self.size)}}})
        try:
            out = self.ddb.batch_write_item(RequestItems={self.table: reqs})
        except Exception as e:
            if (getattr(e, "response", None) or {}).get("Error", {}).get("Code") == \
                    "ProvisionedThroughputExceededException":
                return 0, count, True
            raise
        left = len(out["UnprocessedItems"].get(self.table, []))
        return count - left, left, False

    def drain(self, deadline_s=60):
        """Spends the burst credit: writes until a whole batch is throttled."""
        deadline = time.monotonic() + deadline_s
        accepted = 0
        while True:
            ok, _, whole = self.batch()
            accepted += ok
            if whole:
                return accepted
            assert time.monotonic() < deadline, "burst credit never ran out"

    def saturate(self, seconds):
        """Keeps the table saturated for `seconds`; returns (units accepted, elapsed)."""
        units = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            ok, _, _ = self.batch()
            units += ok * self.units_each
        return units, time.monotonic() - t0


def test_throttle_error_shape(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1)
    Writer(ddb, name, size=9 * KB).drain()
    with ddb_error("ProvisionedThroughputExceededException", PROVISIONED_MSG) as e:
        ddb.put_item(TableName=name, Item={"pk": S("one-more")})
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # The raw body is DynamoDB's error shape.
    body = json.dumps({"TableName": name, "Item": {"pk": S("raw")}}).encode()
    status, _, data = http_request("POST", "/", body, {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.PutItem",
        "Authorization": "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/dynamodb/"
                         "aws4_request, SignedHeaders=host;x-amz-date, Signature=00",
        "X-Amz-Date": "20240101T000000Z"})
    assert status == 400
    err = json.loads(data)
    assert err["__type"] == ("com.amazonaws.dynamodb.v20120810#"
                             "ProvisionedThroughputExceededException")
    assert err["message"] == PROVISIONED_MSG


def test_steady_rate_within_5_percent(ddb, provisioned, target):
    stratad_only(target)
    wcu = 20
    name = provisioned(1, wcu)
    w = Writer(ddb, name, size=9 * KB)  # 10 WCU an item: the 6,000 of credit in 600 items
    w.drain()
    w = Writer(ddb, name, size=100)  # 1 WCU an item
    w.n = 10 ** 6
    # The last large items were admitted while a little credit was left and are repaid
    # first (at most one 10-WCU item per partition: 40 WCU, 2 s at 20 WCU/s): small items
    # for 3 s, so the window starts with at most 1 WCU of debt per partition.
    w.saturate(3.0)
    units, elapsed = w.saturate(10.0)
    rate = units / elapsed
    print("accepted %.2f WCU/s over %.1f s, provisioned %d" % (rate, elapsed, wcu))
    assert abs(rate - wcu) <= 0.05 * wcu, "accepted %.2f WCU/s, provisioned %d" % (rate, wcu)


def test_burst_credit(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1)
    w = Writer(ddb, name, size=100)
    t0 = time.monotonic()
    got = w.drain()
    took = time.monotonic() - t0
    # 300 s of 1 WCU at once (plus what refilled meanwhile, and one item of debt per
    # partition).
    assert 300 <= got <= 300 + took + 8, "absorbed %d writes at once" % got
    # Idle: credit builds up again at the provisioned rate.
    t1 = time.monotonic()
    while time.monotonic() - t1 < 4.0:
        time.sleep(0.1)
    again = w.drain()
    idle = time.monotonic() - t1
    assert 1 <= again <= idle + 8, "absorbed %d after %.1f s idle" % (again, idle)


def test_batch_write_unprocessed_items(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1)
    # 300 units of credit: about 30 items of 10 WCU, so the second batch of 25 is cut.
    partial = whole = False
    for b in range(10):
        reqs = [{"PutRequest": {"Item": {"pk": S("b%d-%d" % (b, i)), "v": S("x" * 9 * KB)}}}
                for i in range(25)]
        try:
            out = ddb.batch_write_item(RequestItems={name: reqs})
        except ClientError as e:
            assert e.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
            assert e.response["Error"]["Message"] == PROVISIONED_MSG
            whole = True
            break
        left = out["UnprocessedItems"].get(name, [])
        if 0 < len(left) < 25:
            partial = True
            # The WriteRequests come back as sent, and only those that were not written.
            assert all(r in reqs for r in left)
            keys = [r["PutRequest"]["Item"]["pk"] for r in left]
            for r in reqs:
                got = ddb.get_item(TableName=name, Key={"pk": r["PutRequest"]["Item"]["pk"]})
                assert ("Item" in got) == (r["PutRequest"]["Item"]["pk"] not in keys)
    assert partial, "no batch came back partly processed"
    assert whole, "a fully throttled batch must fail as a whole"


def test_batch_get_unprocessed_keys(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1000)
    item = "x" * (15 * KB)  # 4 RCU a strong read
    for start in range(0, 100, 25):
        out = ddb.batch_write_item(RequestItems={name: [
            {"PutRequest": {"Item": {"pk": S("g%03d" % i), "v": S(item)}}}
            for i in range(start, start + 25)]})
        assert out["UnprocessedItems"] == {}
    keys = [{"pk": S("g%03d" % i)} for i in range(100)]
    out = ddb.batch_get_item(RequestItems={name: {"Keys": keys, "ConsistentRead": True}})
    got = len(out["Responses"].get(name, []))
    left = out["UnprocessedKeys"].get(name, {}).get("Keys", [])
    # 300 RCU of credit: about 75 reads of 4 RCU.
    assert 70 <= got <= 85, got
    assert got + len(left) == 100
    assert out["UnprocessedKeys"][name]["ConsistentRead"] is True
    # Then everything is throttled: the whole request fails.
    with ddb_error("ProvisionedThroughputExceededException", PROVISIONED_MSG):
        for _ in range(5):
            ddb.batch_get_item(RequestItems={name: {"Keys": keys, "ConsistentRead": True}})


def test_update_table_raises_rate_live(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1)
    w = Writer(ddb, name, size=9 * KB)
    w.drain()
    ddb.update_table(TableName=name,
                     ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 200})
    wait_active(ddb, name)
    w = Writer(ddb, name, size=100)
    w.n = 10 ** 6
    units, elapsed = w.saturate(1.5)
    assert units / elapsed > 100, "%.1f WCU/s after raising WCU to 200" % (units / elapsed)
    # And lowering it takes effect as well (the credit kept is 300 s of the new rate).
    ddb.update_table(TableName=name,
                     ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1})
    wait_active(ddb, name)
    w.drain()
    units, elapsed = w.saturate(2.0)
    assert units / elapsed < 6, "%.1f WCU/s after lowering WCU to 1" % (units / elapsed)


def node_urls():
    """Every node's URL: the endpoint alone, or in a cluster each node (each counts the
    partitions it serves, so figures are summed over nodes)."""
    status, _, body = http_request("GET", "/admin/cluster", b"", {})
    nodes = json.loads(body).get("nodes", []) if status == 200 else []
    return ["http://" + n["client"] for n in nodes] or [ENDPOINT]


def node_get(url, path):
    return http_request("GET", path, b"", {}, endpoint=url)


def metrics_text():
    texts = []
    for url in node_urls():
        status, headers, body = node_get(url, "/metrics")
        assert status == 200
        assert headers["content-type"].startswith("text/plain")
        texts.append(body.decode())
    return "\n".join(texts)


def metric(text, name, **labels):
    """The sum of the metric's values with exactly these labels (over nodes)."""
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    found = re.findall(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(want)), text, re.M)
    return sum(float(v) for v in found) if found else None


def table_stats(name):
    """/admin/table-stats of every node: (summed write units, throttle events, partitions)."""
    write = throttles = 0
    parts = []
    for url in node_urls():
        status, _, body = node_get(url, "/admin/table-stats/" + name)
        assert status == 200
        stats = json.loads(body)
        assert stats["table"] == name
        write += stats["consumed"]["write"]
        throttles += stats["write_throttle_events"]
        parts += stats["partitions"]
        billing = stats["billing_mode"]
    return billing, write, throttles, parts


def test_metrics_endpoint(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1)
    w = Writer(ddb, name, size=100)
    got = w.drain()
    with pytest.raises(ClientError):
        ddb.put_item(TableName=name, Item={"pk": S("over")})
    ddb.get_item(TableName=name, Key={"pk": S("w00000001")}, ConsistentRead=True)
    text = metrics_text()
    assert metric(text, "ConsumedWriteCapacityUnits", table=name) >= got
    assert metric(text, "ConsumedReadCapacityUnits", table=name) == 1
    assert metric(text, "WriteThrottleEvents", table=name) >= 2
    assert metric(text, "ThrottledRequests", table=name) >= 2  # the batch and the put
    assert metric(text, "ProvisionedWriteCapacityUnits", table=name) >= 1
    parts = re.findall(r'^ConsumedWriteCapacityUnits\{table="%s",partition="\d+"\} (\S+)$'
                       % re.escape(name), text, re.M)
    assert len(parts) >= 2 and sum(float(p) for p in parts) == \
        metric(text, "ConsumedWriteCapacityUnits", table=name)
    billing, write, throttles, _ = table_stats(name)
    assert billing == "PROVISIONED"
    assert write >= got and throttles >= 2
    status, _, _ = http_request("GET", "/admin/table-stats/no_such_table", b"", {})
    assert status == 404


def test_hot_key_reported(ddb, table_factory, target):
    stratad_only(target)
    name = table_factory()
    for i in range(60):
        ddb.put_item(TableName=name, Item={"pk": S("hot"), "n": {"N": str(i)}})
    for i in range(10):
        ddb.put_item(TableName=name, Item={"pk": S("cold%d" % i)})
    _, _, _, parts = table_stats(name)
    hot = [p for p in parts if p["hot_key"]]
    assert len(hot) == 1 and hot[0]["hot_key"]["percent"] >= 50, parts
    assert 'HotKeyPercent{table="%s"' % name in metrics_text()


def test_update_table_switches_to_on_demand_live(ddb, provisioned, target):
    stratad_only(target)
    name = provisioned(1, 1)
    Writer(ddb, name, size=9 * KB).drain()
    ddb.update_table(TableName=name, BillingMode="PAY_PER_REQUEST")
    t = wait_active(ddb, name)
    assert t["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    leaders_settled(name)
    w = Writer(ddb, name, size=100)
    w.n = 10 ** 6
    units, elapsed = w.saturate(1.0)
    assert units / elapsed > 100, "%.1f WCU/s after switching to on-demand" % (units / elapsed)


def test_on_demand_partition_ceiling(ddb, table_factory, target):
    """One partition key takes at most a partition's 1,000 WCU a second, on-demand too."""
    stratad_only(target)
    name = table_factory(range_key=("sk", "N"))
    big = "x" * (99 * KB)  # 100 WCU an item
    reqs = [{"PutRequest": {"Item": {"pk": S("hot"), "sk": {"N": str(i)}, "v": S(big)}}}
            for i in range(25)]
    out = ddb.batch_write_item(RequestItems={name: reqs})
    left = out["UnprocessedItems"].get(name, [])
    assert 0 < len(left) < 25, "2,500 WCU at once on one partition key: %d left" % len(left)
    with ddb_error("ProvisionedThroughputExceededException",
                   match=r"Throughput exceeds the current capacity of your table or index\..*"):
        for i in range(25):
            ddb.put_item(TableName=name, Item={"pk": S("hot"), "sk": {"N": str(100 + i)},
                                               "v": S(big)})
