"""BatchGetItem and BatchWriteItem: limits, duplicates, unprocessed parts."""
import time

import pytest

from conftest import ddb_error, unique_name


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def batch_get_all(ddb, request_items):
    """BatchGetItem, resending UnprocessedKeys; returns {table: [items]}."""
    got = {}
    deadline = time.monotonic() + 60
    while request_items:
        out = ddb.batch_get_item(RequestItems=request_items)
        for t, items in out["Responses"].items():
            got.setdefault(t, []).extend(items)
        request_items = out.get("UnprocessedKeys") or {}
        assert time.monotonic() < deadline
    return got


def put_n(ddb, table, n, prefix="k"):
    for start in range(0, n, 25):
        reqs = [{"PutRequest": {"Item": {"pk": S("%s%03d" % (prefix, i)), "v": N(i)}}}
                for i in range(start, min(n, start + 25))]
        out = ddb.batch_write_item(RequestItems={table: reqs})
        assert out["UnprocessedItems"] == {}


def test_batch_write_25_and_get_100(ddb, table):
    put_n(ddb, table, 100)
    keys = [{"pk": S("k%03d" % i)} for i in range(100)]
    got = batch_get_all(ddb, {table: {"Keys": keys}})
    assert sorted(int(it["v"]["N"]) for it in got[table]) == list(range(100))


def test_batch_get_missing_keys_and_projection(ddb, table):
    put_n(ddb, table, 3)
    out = ddb.batch_get_item(RequestItems={table: {
        "Keys": [{"pk": S("k000")}, {"pk": S("nope")}, {"pk": S("k002")}],
        "ProjectionExpression": "#v", "ExpressionAttributeNames": {"#v": "v"},
        "ConsistentRead": True}}, ReturnConsumedCapacity="TOTAL")
    assert sorted(out["Responses"][table], key=lambda i: i["v"]["N"]) == [{"v": N(0)}, {"v": N(2)}]
    assert out["UnprocessedKeys"] == {}
    (cap,) = out["ConsumedCapacity"]
    assert cap["TableName"] == table
    assert cap["CapacityUnits"] == 3.0


def test_batch_two_tables(ddb, table_factory):
    a, b = table_factory(), table_factory()
    out = ddb.batch_write_item(RequestItems={
        a: [{"PutRequest": {"Item": {"pk": S("x"), "t": S("a")}}}],
        b: [{"PutRequest": {"Item": {"pk": S("x"), "t": S("b")}}},
            {"PutRequest": {"Item": {"pk": S("y"), "t": S("b")}}}]},
        ReturnConsumedCapacity="TOTAL")
    assert out["UnprocessedItems"] == {}
    caps = {c["TableName"]: c["CapacityUnits"] for c in out["ConsumedCapacity"]}
    assert caps == {a: 1.0, b: 2.0}
    got = batch_get_all(ddb, {a: {"Keys": [{"pk": S("x")}]},
                              b: {"Keys": [{"pk": S("x")}, {"pk": S("y")}]}})
    assert got[a] == [{"pk": S("x"), "t": S("a")}]
    assert len(got[b]) == 2
    out = ddb.batch_write_item(RequestItems={b: [{"DeleteRequest": {"Key": {"pk": S("x")}}}]})
    assert "Item" not in ddb.get_item(TableName=b, Key={"pk": S("x")})


def test_batch_get_101_keys(ddb, table):
    keys = [{"pk": S("k%03d" % i)} for i in range(101)]
    with ddb_error("ValidationException", match=r"1 validation error detected: Value (\S.*\S )?at "
                   r"'(requestItems|RequestItems)\.%s\.member\.(keys|Keys)' failed to satisfy "
                   r"constraint: Member must have length less than or equal to 100" % table):
        ddb.batch_get_item(RequestItems={table: {"Keys": keys}})


def test_batch_get_101_keys_across_tables(ddb, table_factory):
    a, b = table_factory(), table_factory()
    with ddb_error("ValidationException", "Too many items requested for the BatchGetItem call"):
        ddb.batch_get_item(RequestItems={
            a: {"Keys": [{"pk": S("a%03d" % i)} for i in range(50)]},
            b: {"Keys": [{"pk": S("b%03d" % i)} for i in range(51)]}})


def test_batch_get_duplicates(ddb, table):
    with ddb_error("ValidationException", "Provided list of item keys contains duplicates"):
        ddb.batch_get_item(RequestItems={table: {"Keys": [{"pk": S("a")}, {"pk": S("a")}]}})


def test_batch_write_26_requests(ddb, table):
    reqs = [{"PutRequest": {"Item": {"pk": S("k%03d" % i)}}} for i in range(26)]
    with ddb_error("ValidationException", match=r"1 validation error detected: (Value '.*%s.+' "
                   r"at 'requestItems' failed to satisfy constraint: Map value must satisfy "
                   r"constraint: \[Member must have length less than or equal to 25, Member must "
                   r"have length greater than or equal to 1\]|Value at 'RequestItems\.%s\.member' "
                   r"failed to satisfy constraint: Member must have length less than or equal to 25)"
                   % (table, table)):
        ddb.batch_write_item(RequestItems={table: reqs})


@pytest.mark.parametrize("second", [
    {"PutRequest": {"Item": {"pk": S("dup"), "v": N(2)}}},
    {"DeleteRequest": {"Key": {"pk": S("dup")}}}])
def test_batch_write_duplicates(ddb, table, second):
    with ddb_error("ValidationException", "Provided list of item keys contains duplicates"):
        ddb.batch_write_item(RequestItems={table: [
            {"PutRequest": {"Item": {"pk": S("dup"), "v": N(1)}}}, second]})
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": S("dup")})


def test_batch_errors(ddb, table_hr):
    missing = unique_name("missing")
    with ddb_error("ResourceNotFoundException", "Requested resource not found"):
        ddb.batch_write_item(RequestItems={missing: [{"PutRequest": {"Item": {"pk": S("a")}}}]})
    with ddb_error("ResourceNotFoundException", "Requested resource not found"):
        ddb.batch_get_item(RequestItems={missing: {"Keys": [{"pk": S("a")}]}})
    with ddb_error("ValidationException", "The provided key element does not match the schema"):
        ddb.batch_get_item(RequestItems={table_hr: {"Keys": [{"pk": S("a")}]}})
    # A bad item fails the whole batch: nothing is written.
    with ddb_error("ValidationException", match=r".*Missing the key sk in the item|The provided "
                   r"key element does not match the schema"):
        ddb.batch_write_item(RequestItems={table_hr: [
            {"PutRequest": {"Item": {"pk": S("ok"), "sk": N(1)}}},
            {"PutRequest": {"Item": {"pk": S("bad")}}}]})
    assert "Item" not in ddb.get_item(TableName=table_hr, Key={"pk": S("ok"), "sk": N(1)})


@pytest.mark.dynalite_crashes("dynalite dies on a DeleteRequest key that misses the range key")
def test_batch_write_delete_bad_key(ddb, table_hr):
    with ddb_error("ValidationException", "The provided key element does not match the schema"):
        ddb.batch_write_item(RequestItems={table_hr: [{"DeleteRequest": {"Key": {"pk": S("a")}}}]})
