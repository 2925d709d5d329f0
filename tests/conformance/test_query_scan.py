"""Query and Scan: key conditions, filters, Limit, ScanIndexForward, Select, pagination
over 10,000 items, the 1 MB page read before the filter, parallel Scan segments."""
import pytest

from conftest import BIG_N, MANY_PKS, ddb_error, retry_throttled


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def query_all(ddb, **args):
    """Follow LastEvaluatedKey; returns (items, pages)."""
    items, pages = [], []
    start = None
    for _ in range(100000):
        a = dict(args)
        if start:
            a["ExclusiveStartKey"] = start
        out = ddb.query(**a)
        pages.append(out)
        items.extend(out.get("Items", []))
        start = out.get("LastEvaluatedKey")
        if not start:
            return items, pages
    raise AssertionError("pagination does not end")


def scan_all(ddb, **args):
    items, pages = [], []
    start = None
    for _ in range(100000):
        a = dict(args)
        if start:
            a["ExclusiveStartKey"] = start
        out = ddb.scan(**a)
        pages.append(out)
        items.extend(out.get("Items", []))
        start = out.get("LastEvaluatedKey")
        if not start:
            return items, pages
    raise AssertionError("pagination does not end")


@pytest.fixture
def small(table_factory, ddb):
    """pk "a": sk 0..19 (N) with v = sk % 3; pk "b": sk 0..4."""
    name = table_factory(range_key=("sk", "N"))
    for i in range(20):
        ddb.put_item(TableName=name, Item={"pk": S("a"), "sk": N(i), "v": N(i % 3)})
    for i in range(5):
        ddb.put_item(TableName=name, Item={"pk": S("b"), "sk": N(i), "v": N(0)})
    return name


def sks(items):
    return [int(it["sk"]["N"]) for it in items]


@pytest.mark.parametrize("cond,values,expected", [
    ("pk = :p", {}, list(range(20))),
    ("pk = :p AND sk = :x", {":x": N(7)}, [7]),
    ("pk = :p AND sk < :x", {":x": N(3)}, [0, 1, 2]),
    ("pk = :p AND sk <= :x", {":x": N(3)}, [0, 1, 2, 3]),
    ("pk = :p AND sk > :x", {":x": N(16)}, [17, 18, 19]),
    ("pk = :p AND sk >= :x", {":x": N(17)}, [17, 18, 19]),
    ("pk = :p AND sk BETWEEN :x AND :y", {":x": N(5), ":y": N(8)}, [5, 6, 7, 8]),
    ("pk = :p AND sk BETWEEN :x AND :y", {":x": N(-1.5), ":y": N(0.5)}, [0]),
    ("(pk = :p) AND (sk > :x)", {":x": N(18)}, [19]),
    ("sk < :x AND pk = :p", {":x": N(2)}, [0, 1]),
])
def test_query_key_conditions_numeric(ddb, small, cond, values, expected):
    out = ddb.query(TableName=small, KeyConditionExpression=cond,
                    ExpressionAttributeValues={":p": S("a"), **values})
    assert sks(out["Items"]) == expected
    assert out["Count"] == out["ScannedCount"] == len(expected)


def test_query_string_sort_key_and_begins_with(ddb, table_factory):
    name = table_factory(range_key=("sk", "S"))
    for sk in ["a", "ab", "abc", "abd", "b", "B", "ba", "é", "z"]:
        ddb.put_item(TableName=name, Item={"pk": S("p"), "sk": S(sk)})
    def q(cond, **vals):
        out = ddb.query(TableName=name, KeyConditionExpression="pk = :p AND " + cond,
                        ExpressionAttributeValues={":p": S("p"), **vals})
        return [it["sk"]["S"] for it in out["Items"]]
    assert q("begins_with(sk, :x)", **{":x": S("ab")}) == ["ab", "abc", "abd"]
    # Strings order by UTF-8 bytes: "B" < "a" < "z" < "é".
    assert q("sk > :x", **{":x": S("b")}) == ["ba", "z", "é"]
    assert q("sk BETWEEN :x AND :y", **{":x": S("B"), ":y": S("ab")}) == ["B", "a", "ab"]
    with ddb_error("ValidationException", match=r"Invalid KeyConditionExpression: Incorrect "
                   r"operand type for operator or function; operator or function: begins_with, "
                   r"operand type: N"):
        q("begins_with(sk, :x)", **{":x": N(1)})


def test_query_filter_count_scanned_count(ddb, small):
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p",
                    FilterExpression="v = :z", ExpressionAttributeValues={":p": S("a"), ":z": N(0)})
    assert sks(out["Items"]) == [0, 3, 6, 9, 12, 15, 18]
    assert out["Count"] == 7
    assert out["ScannedCount"] == 20
    # Limit bounds the items read, before the filter.
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Limit=5,
                    FilterExpression="v = :z", ExpressionAttributeValues={":p": S("a"), ":z": N(0)})
    assert sks(out["Items"]) == [0, 3]
    assert out["Count"] == 2 and out["ScannedCount"] == 5
    assert out["LastEvaluatedKey"] == {"pk": S("a"), "sk": N(4)}


def test_query_limit_and_direction(ddb, small):
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Limit=3,
                    ExpressionAttributeValues={":p": S("a")})
    assert sks(out["Items"]) == [0, 1, 2]
    assert out["LastEvaluatedKey"] == {"pk": S("a"), "sk": N(2)}
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Limit=3,
                    ScanIndexForward=False, ExpressionAttributeValues={":p": S("a")})
    assert sks(out["Items"]) == [19, 18, 17]
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Limit=3,
                    ScanIndexForward=False, ExclusiveStartKey=out["LastEvaluatedKey"],
                    ExpressionAttributeValues={":p": S("a")})
    assert sks(out["Items"]) == [16, 15, 14]
    items, pages = query_all(ddb, TableName=small, KeyConditionExpression="pk = :p", Limit=7,
                             ScanIndexForward=False, ExpressionAttributeValues={":p": S("b")})
    assert sks(items) == [4, 3, 2, 1, 0]


def test_query_limit_equal_to_remaining_returns_last_key(ddb, small):
    """A page that stops at Limit carries LastEvaluatedKey even if nothing is left;
    the next page is then empty."""
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Limit=5,
                    ExpressionAttributeValues={":p": S("b")})
    assert out["Count"] == 5
    assert out["LastEvaluatedKey"] == {"pk": S("b"), "sk": N(4)}
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Limit=5,
                    ExclusiveStartKey=out["LastEvaluatedKey"],
                    ExpressionAttributeValues={":p": S("b")})
    assert out["Count"] == 0 and out["Items"] == []
    assert "LastEvaluatedKey" not in out


def test_query_select(ddb, small):
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Select="COUNT",
                    ExpressionAttributeValues={":p": S("a")})
    assert "Items" not in out
    assert out["Count"] == 20 and out["ScannedCount"] == 20
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p", Select="COUNT",
                    FilterExpression="v = :one", ExpressionAttributeValues={":p": S("a"), ":one": N(1)})
    assert out["Count"] == 7 and out["ScannedCount"] == 20
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p AND sk = :s",
                    Select="SPECIFIC_ATTRIBUTES", ProjectionExpression="v",
                    ExpressionAttributeValues={":p": S("a"), ":s": N(4)})
    assert out["Items"] == [{"v": N(1)}]
    out = ddb.query(TableName=small, KeyConditionExpression="pk = :p AND sk = :s",
                    Select="ALL_ATTRIBUTES", ExpressionAttributeValues={":p": S("a"), ":s": N(4)})
    assert out["Items"] == [{"pk": S("a"), "sk": N(4), "v": N(1)}]


def test_query_errors(ddb, small):
    def q(**a):
        return ddb.query(TableName=small, **a)
    with ddb_error("ValidationException", "Either the KeyConditions or KeyConditionExpression "
                   "parameter must be specified in the request."):
        q()
    with ddb_error("ValidationException", "Query condition missed key schema element: pk"):
        q(KeyConditionExpression="sk = :s", ExpressionAttributeValues={":s": N(1)})
    with ddb_error("ValidationException", "Query key condition not supported"):
        q(KeyConditionExpression="pk > :p", ExpressionAttributeValues={":p": S("a")})
    with ddb_error("ValidationException", "Query condition missed key schema element: pk"):
        q(KeyConditionExpression="v = :p", ExpressionAttributeValues={":p": S("a")})
    with ddb_error("ValidationException", "Invalid KeyConditionExpression: An expression attribute "
                   "value used in expression is not defined; attribute value: :missing"):
        q(KeyConditionExpression="pk = :missing")
    with ddb_error("ValidationException", "Value provided in ExpressionAttributeValues unused in "
                   "expressions: keys: {:unused}"):
        q(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": S("a"), ":unused": N(1)})
    with ddb_error("ValidationException", "One or more parameter values were invalid: Condition "
                   "parameter type does not match schema type"):
        q(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": N(1)})
    with ddb_error("ValidationException", "Invalid operator used in KeyConditionExpression: OR"):
        q(KeyConditionExpression="pk = :p OR sk = :s",
          ExpressionAttributeValues={":p": S("a"), ":s": N(1)})
    with ddb_error("ValidationException", "1 validation error detected: Value '0' at 'limit' "
                   "failed to satisfy constraint: Member must have value greater than or equal to 1"):
        q(KeyConditionExpression="pk = :p", Limit=0, ExpressionAttributeValues={":p": S("a")})
    with ddb_error("ValidationException", "Filter Expression can only contain non-primary key "
                   "attributes: Primary key attribute: sk"):
        q(KeyConditionExpression="pk = :p", FilterExpression="sk > :s",
          ExpressionAttributeValues={":p": S("a"), ":s": N(1)})
    with ddb_error("ValidationException", "The provided starting key is invalid"):
        q(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": S("a")},
          ExclusiveStartKey={"pk": S("a")})
    with ddb_error("ValidationException", "The table does not have the specified index: nope"):
        q(IndexName="nope", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": S("a")})
    # A start key of another partition key: without a sort key condition it lies outside
    # the query; with one, the sort key is checked first, then the partition key.
    with ddb_error("ValidationException", "The provided starting key is outside query "
                   "boundaries based on provided conditions"):
        q(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": S("a")},
          ExclusiveStartKey={"pk": S("b"), "sk": N(1)})
    with ddb_error("ValidationException", "The provided starting key does not match the range "
                   "key predicate"):
        q(KeyConditionExpression="pk = :p AND sk < :s",
          ExpressionAttributeValues={":p": S("a"), ":s": N(1)},
          ExclusiveStartKey={"pk": S("b"), "sk": N(5)})
    with ddb_error("ValidationException", "The query can return at most one row and cannot be "
                   "restarted"):
        q(KeyConditionExpression="pk = :p AND sk < :s",
          ExpressionAttributeValues={":p": S("a"), ":s": N(9)},
          ExclusiveStartKey={"pk": S("b"), "sk": N(5)})


def test_query_10000_items_one_partition(ddb, one_partition_table):
    """10,000 items of ~230 bytes in one partition key: ~2.3 MB, so the pages end at 1 MB."""
    items, pages = query_all(ddb, TableName=one_partition_table,
                             KeyConditionExpression="pk = :p",
                             ExpressionAttributeValues={":p": S("one")})
    assert sks(items) == list(range(BIG_N))
    assert len(pages) >= 3, "2.3 MB of items must take at least three 1 MB pages"
    for page in pages[:-1]:
        assert page["LastEvaluatedKey"] == {"pk": S("one"), "sk": page["Items"][-1]["sk"]}
        # ~1 MB of ~230-byte items per page.
        assert 3500 <= page["Count"] <= 5000
    total = sum(p["Count"] for p in pages)
    assert total == BIG_N
    # Backwards with Limit: the same items in reverse.
    items, pages = query_all(ddb, TableName=one_partition_table, Limit=999,
                             KeyConditionExpression="pk = :p", ScanIndexForward=False,
                             ExpressionAttributeValues={":p": S("one")}, ProjectionExpression="sk")
    assert sks(items) == list(range(BIG_N - 1, -1, -1))
    assert all(p["Count"] <= 999 for p in pages)


def test_query_1mb_page_is_read_before_the_filter(ddb, one_partition_table):
    """A filter that matches nothing still stops each page after 1 MB of items read:
    Count 0, ScannedCount ~4500, LastEvaluatedKey set."""
    out = ddb.query(TableName=one_partition_table, KeyConditionExpression="pk = :p",
                    FilterExpression="attribute_exists(nothing)",
                    ExpressionAttributeValues={":p": S("one")})
    assert out["Count"] == 0 and out["Items"] == []
    assert 3500 <= out["ScannedCount"] <= 5000
    assert "LastEvaluatedKey" in out
    items, pages = query_all(ddb, TableName=one_partition_table, KeyConditionExpression="pk = :p",
                             FilterExpression="even = :t",
                             ExpressionAttributeValues={":p": S("one"), ":t": {"BOOL": True}})
    assert sks(items) == list(range(0, BIG_N, 2))
    assert sum(p["ScannedCount"] for p in pages) == BIG_N
    assert sum(p["Count"] for p in pages) == BIG_N // 2


def test_query_1mb_page_with_large_items(ddb, table_hr):
    """Items of 150,000 bytes: a 1 MB page holds 6 or 7 of them."""
    # 147 WCU each: 20 of them pass one partition's 1,000 WCU a second, so throttles are
    # retried (retry_throttled), as an SDK would.
    for i in range(20):
        retry_throttled(ddb.put_item, TableName=table_hr,
                        Item={"pk": S("big"), "sk": N(i), "d": S("x" * 149990)})
    out = ddb.query(TableName=table_hr, KeyConditionExpression="pk = :p",
                    FilterExpression="attribute_exists(nothing)",
                    ExpressionAttributeValues={":p": S("big")})
    assert out["Count"] == 0
    assert out["ScannedCount"] in (6, 7)
    assert out["LastEvaluatedKey"]["sk"] == N(out["ScannedCount"] - 1)
    items, pages = query_all(ddb, TableName=table_hr, KeyConditionExpression="pk = :p",
                             ExpressionAttributeValues={":p": S("big")})
    assert sks(items) == list(range(20))
    assert len(pages) == 3 or len(pages) == 4


def test_query_across_many_partitions(ddb, many_partitions_table):
    per = BIG_N // MANY_PKS
    total = 0
    for p in range(0, MANY_PKS, 7):
        items, pages = query_all(ddb, TableName=many_partitions_table, Limit=37,
                                 KeyConditionExpression="pk = :p",
                                 ExpressionAttributeValues={":p": S("p%03d" % p)})
        assert [it["pk"]["S"] for it in items] == ["p%03d" % p] * per
        assert sks(items) == list(range(per))
        assert [len(pg["Items"]) for pg in pages[:2]] == [37, 37]
        total += len(items)
    assert total == per * len(range(0, MANY_PKS, 7))


def test_scan_10000_items_paginated(ddb, many_partitions_table):
    items, pages = scan_all(ddb, TableName=many_partitions_table)
    keys = [(it["pk"]["S"], int(it["sk"]["N"])) for it in items]
    assert len(keys) == BIG_N
    assert len(set(keys)) == BIG_N
    assert len(pages) >= 3
    for page in pages[:-1]:
        assert 3500 <= page["Count"] <= 5000
        last = page["Items"][-1]
        assert page["LastEvaluatedKey"] == {"pk": last["pk"], "sk": last["sk"]}
    # Within one partition key the items come in sort-key order.
    by_pk = {}
    for pk, sk in keys:
        by_pk.setdefault(pk, []).append(sk)
    assert all(v == sorted(v) for v in by_pk.values())
    items, pages = scan_all(ddb, TableName=many_partitions_table, Limit=1000, Select="COUNT")
    assert sum(p["Count"] for p in pages) == BIG_N
    assert all(p["Count"] <= 1000 for p in pages)


def test_scan_filter(ddb, many_partitions_table):
    items, pages = scan_all(ddb, TableName=many_partitions_table, FilterExpression="n < :x",
                            ExpressionAttributeValues={":x": N(250)}, ProjectionExpression="n")
    assert sorted(int(it["n"]["N"]) for it in items) == list(range(250))
    assert sum(p["ScannedCount"] for p in pages) == BIG_N
    assert sum(p["Count"] for p in pages) == 250


def test_scan_segments(ddb, many_partitions_table):
    seen = []
    for seg in range(4):
        items, _ = scan_all(ddb, TableName=many_partitions_table, Segment=seg, TotalSegments=4,
                            ProjectionExpression="pk, sk")
        seen.extend((it["pk"]["S"], int(it["sk"]["N"])) for it in items)
        assert 0 < len(items) < BIG_N
    assert len(seen) == BIG_N
    assert len(set(seen)) == BIG_N
    # A partition key lives in exactly one segment.
    per = {}
    for seg in range(4):
        items, _ = scan_all(ddb, TableName=many_partitions_table, Segment=seg, TotalSegments=4,
                            ProjectionExpression="pk")
        for it in items:
            per.setdefault(it["pk"]["S"], set()).add(seg)
    assert all(len(s) == 1 for s in per.values())


def test_scan_limit_applies_before_filter(ddb, small):
    items, pages = scan_all(ddb, TableName=small, Limit=4, FilterExpression="v = :one",
                            ExpressionAttributeValues={":one": N(1)})
    assert all(p["ScannedCount"] <= 4 for p in pages)
    assert sum(p["ScannedCount"] for p in pages) == 25
    assert sorted(sks(items)) == [1, 4, 7, 10, 13, 16, 19]
    with ddb_error("ValidationException", "The provided starting key is invalid: The provided "
                   "key element does not match the schema"):
        ddb.scan(TableName=small, ExclusiveStartKey={"pk": S("a")})


def test_scan_errors(ddb, small):
    with ddb_error("ValidationException", "The Segment parameter is zero-based and must be less "
                   "than parameter TotalSegments: Segment: 4 is not less than TotalSegments: 4"):
        ddb.scan(TableName=small, Segment=4, TotalSegments=4)
    with ddb_error("ValidationException", "The TotalSegments parameter is required but was not "
                   "present in the request when Segment parameter is present"):
        ddb.scan(TableName=small, Segment=1)
    with ddb_error("ValidationException", "The Segment parameter is required but was not present "
                   "in the request when parameter TotalSegments is present"):
        ddb.scan(TableName=small, TotalSegments=2)


@pytest.mark.dynalite_differs("dynalite has no upper bound on TotalSegments")
def test_scan_total_segments_bound(ddb, small):
    with ddb_error("ValidationException", "1 validation error detected: Value '1000001' at "
                   "'totalSegments' failed to satisfy constraint: Member must have value less "
                   "than or equal to 1000000"):
        ddb.scan(TableName=small, Segment=0, TotalSegments=1000001)
