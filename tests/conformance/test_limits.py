"""Limits: the 400 KB item, key sizes, and numbers (38 digits, 1E-130 .. 9.99..E+125,
overflow through ADD and SET arithmetic)."""
import pytest

from conftest import ddb_error

MAX_ITEM = 400 * 1024
TOO_BIG = "Item size has exceeded the maximum allowed size"
TOO_BIG_UPDATE = "Item size to update has exceeded the maximum allowed size"
OVERFLOW = "Number overflow. Attempting to store a number with magnitude larger than supported range"
UNDERFLOW = "Number underflow. Attempting to store a number with magnitude smaller than supported range"
TOO_PRECISE = "Attempting to store more than 38 significant digits in a Number"
MAX_N = "9.9999999999999999999999999999999999999E+125"


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def string_item(size, pk="big"):
    """{"pk": pk, "data": "x"*k} of exactly `size` bytes (names + values, UTF-8)."""
    fixed = len("pk") + len(pk) + len("data")
    return {"pk": S(pk), "data": S("x" * (size - fixed))}


def test_item_at_400kb_is_accepted(ddb, table):
    ddb.put_item(TableName=table, Item=string_item(MAX_ITEM))
    got = ddb.get_item(TableName=table, Key={"pk": S("big")}, ConsistentRead=True)["Item"]
    assert len(got["data"]["S"]) == MAX_ITEM - 9
    out = ddb.put_item(TableName=table, Item=string_item(MAX_ITEM), ReturnConsumedCapacity="TOTAL")
    assert out["ConsumedCapacity"]["CapacityUnits"] == 400.0


def test_item_one_byte_over_is_rejected(ddb, table):
    with ddb_error("ValidationException", TOO_BIG):
        ddb.put_item(TableName=table, Item=string_item(MAX_ITEM + 1))
    with ddb_error("ValidationException", TOO_BIG):
        ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": string_item(MAX_ITEM + 1)}}]})
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": S("big")})


def test_binary_item_boundary(ddb, table):
    fixed = len("pk") + len("bin") + len("b")
    ddb.put_item(TableName=table, Item={"pk": S("bin"), "b": {"B": b"\x01" * (MAX_ITEM - fixed)}})
    with ddb_error("ValidationException", TOO_BIG):
        ddb.put_item(TableName=table, Item={"pk": S("bin"), "b": {"B": b"\x01" * (MAX_ITEM - fixed + 1)}})


def test_item_boundary_with_many_attributes(ddb, table):
    # 400 attributes "a000".."a399", each 4 bytes of name + value: names count too.
    item = {"pk": S("many")}
    used = len("pk") + len("many")
    for i in range(399):
        item["a%03d" % i] = S("v" * 1000)
        used += 4 + 1000
    item["last"] = S("z" * (MAX_ITEM - used - 4))
    ddb.put_item(TableName=table, Item=item)
    item["last"] = S("z" * (MAX_ITEM - used - 4 + 1))
    with ddb_error("ValidationException", TOO_BIG):
        ddb.put_item(TableName=table, Item=item)


@pytest.mark.dynalite_differs("dynalite counts UTF-16 code units, not UTF-8 bytes")
def test_item_size_counts_utf8_bytes(ddb, table):
    fixed = len("pk") + len("utf8") + len("data")
    # "é" is 2 bytes in UTF-8: 10 + 2 * 204795 = 409600 bytes exactly.
    n = (MAX_ITEM - fixed) // 2
    assert fixed + 2 * n == MAX_ITEM
    ddb.put_item(TableName=table, Item={"pk": S("utf8"), "data": S("é" * n)})
    with ddb_error("ValidationException", TOO_BIG):
        ddb.put_item(TableName=table, Item={"pk": S("utf8"), "data": S("é" * n + "x")})


def test_update_past_400kb_is_rejected(ddb, table):
    ddb.put_item(TableName=table, Item=string_item(MAX_ITEM - 100))
    # Adding "e" (1) + 99 bytes lands exactly on the limit.
    ddb.update_item(TableName=table, Key={"pk": S("big")}, UpdateExpression="SET e = :v",
                    ExpressionAttributeValues={":v": S("y" * 99)})
    with ddb_error("ValidationException", TOO_BIG_UPDATE):
        ddb.update_item(TableName=table, Key={"pk": S("big")}, UpdateExpression="SET f = :v",
                        ExpressionAttributeValues={":v": S("y")})


def test_key_size_limits(ddb, table_factory):
    t = table_factory(range_key=("sk", "S"))
    ddb.put_item(TableName=t, Item={"pk": S("h" * 2048), "sk": S("r" * 1024)})
    got = ddb.get_item(TableName=t, Key={"pk": S("h" * 2048), "sk": S("r" * 1024)})
    assert "Item" in got
    with ddb_error("ValidationException", "One or more parameter values were invalid: Size of "
                   "hashkey has exceeded the maximum size limit of2048 bytes"):
        ddb.put_item(TableName=t, Item={"pk": S("h" * 2049), "sk": S("r")})
    with ddb_error("ValidationException", "One or more parameter values were invalid: Aggregated "
                   "size of all range keys has exceeded the size limit of 1024 bytes"):
        ddb.put_item(TableName=t, Item={"pk": S("h"), "sk": S("r" * 1025)})
    with ddb_error("ValidationException", "One or more parameter values were invalid: Size of "
                   "hashkey has exceeded the maximum size limit of2048 bytes"):
        ddb.get_item(TableName=t, Key={"pk": S("h" * 2049), "sk": S("r")})


@pytest.mark.parametrize("value,expected", [
    ("12345678901234567890123456789012345678", "12345678901234567890123456789012345678"),
    ("-1.2345678901234567890123456789012345678", "-1.2345678901234567890123456789012345678"),
    ("1E-130", "0." + "0" * 129 + "1"),
    ("-1E-130", "-0." + "0" * 129 + "1"),
    (MAX_N, "99999999999999999999999999999999999999" + "0" * 88),
    ("-" + MAX_N, "-99999999999999999999999999999999999999" + "0" * 88),
    ("1000000000000000000000000000000000000000", "1000000000000000000000000000000000000000"),
    ("0.000000000000000000000000000000000000000012300", "0.0000000000000000000000000000000000000000123"),
])
def test_numbers_at_limits_accepted(ddb, table, value, expected):
    ddb.put_item(TableName=table, Item={"pk": S("num"), "n": N(value)})
    got = ddb.get_item(TableName=table, Key={"pk": S("num")})["Item"]["n"]["N"]
    assert got == expected


@pytest.mark.parametrize("value,message", [
    ("123456789012345678901234567890123456789", TOO_PRECISE),
    ("1.23456789012345678901234567890123456789", TOO_PRECISE),
    ("1E+126", OVERFLOW),
    ("-1E+126", OVERFLOW),
    ("9.99999999999999999999999999999999999999E+125", TOO_PRECISE),
    ("1E-131", UNDERFLOW),
    ("-1E-131", UNDERFLOW),
])
def test_numbers_beyond_limits_rejected(ddb, table, value, message):
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?" + message.replace(".", r"\.")):
        ddb.put_item(TableName=table, Item={"pk": S("num"), "n": N(value)})


def test_number_set_limits(ddb, table):
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?" + OVERFLOW.replace(".", r"\.")):
        ddb.put_item(TableName=table, Item={"pk": S("ns"), "n": {"NS": ["1", "1E+126"]}})


@pytest.mark.dynalite_differs("dynalite does not check the range of arithmetic results")
def test_arithmetic_overflow(ddb, table):
    key = {"pk": S("ovf")}
    ddb.put_item(TableName=table, Item={"pk": S("ovf"), "n": N(MAX_N), "m": N("-" + MAX_N)})
    with ddb_error("ValidationException", OVERFLOW):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="ADD n :v",
                        ExpressionAttributeValues={":v": N("1E+125")})
    with ddb_error("ValidationException", OVERFLOW):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET n = n + :v",
                        ExpressionAttributeValues={":v": N("1E+125")})
    with ddb_error("ValidationException", OVERFLOW):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET m = m - :v",
                        ExpressionAttributeValues={":v": N("1E+125")})
    # A result past 38 digits is refused with the same message (1E+50 - 1 cannot be held;
    # DynamoDB calls it an overflow, not the precision error of a parsed number).
    with ddb_error("ValidationException", OVERFLOW):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET p = :a - :b",
                        ExpressionAttributeValues={":a": N("1E+50"), ":b": N(1)})
    with ddb_error("ValidationException", OVERFLOW):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET p = :a + :b",
                        ExpressionAttributeValues={":a": N("1E+50"), ":b": N(1)})
    # The item is unchanged; a result right at the limit is fine.
    ddb.update_item(TableName=table, Key=key, UpdateExpression="SET n = n - :v",
                    ExpressionAttributeValues={":v": N(MAX_N)})
    got = ddb.get_item(TableName=table, Key=key)["Item"]
    assert got["n"] == N("0")
    assert got["m"] == N("-99999999999999999999999999999999999999" + "0" * 88)


def test_arithmetic_is_exact_decimal(ddb, table):
    key = {"pk": S("dec")}
    ddb.put_item(TableName=table, Item={"pk": S("dec"), "n": N("0.1")})
    for _ in range(2):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="ADD n :v",
                        ExpressionAttributeValues={":v": N("0.1")})
    assert ddb.get_item(TableName=table, Key=key)["Item"]["n"] == N("0.3")
    ddb.update_item(TableName=table, Key=key, UpdateExpression="SET n = n - :v",
                    ExpressionAttributeValues={":v": N("0.30000000000000000000000000000000000001")})
    assert ddb.get_item(TableName=table, Key=key)["Item"]["n"] == N(
        "-0.00000000000000000000000000000000000001")


def test_number_comparisons_are_numeric(ddb, table_factory):
    t = table_factory(range_key=("sk", "N"))
    values = ["-1E+125", "-10", "-9.5", "-0.001", "0", "1E-130", "0.5", "2", "10", "1E+2", "9E+125"]
    for v in values:
        ddb.put_item(TableName=t, Item={"pk": S("c"), "sk": N(v)})
    out = ddb.query(TableName=t, KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": S("c")})
    got = [it["sk"]["N"] for it in out["Items"]]
    assert len(got) == len(values) - 1 or len(got) == len(values)
    from decimal import Decimal
    assert got == sorted(got, key=Decimal)
    out = ddb.query(TableName=t, KeyConditionExpression="pk = :p AND sk BETWEEN :a AND :b",
                    ExpressionAttributeValues={":p": S("c"), ":a": N("-9.9"), ":b": N("1")})
    assert [Decimal(it["sk"]["N"]) for it in out["Items"]] == [
        Decimal("-9.5"), Decimal("-0.001"), Decimal(0), Decimal("1E-130"), Decimal("0.5")]


def nested(depth, leaf):
    v = leaf
    for i in range(depth):
        v = {"M": {"m": v}} if i % 2 else {"L": [v]}
    return v


@pytest.mark.dynalite_differs("dynalite does not bound nesting")
def test_nesting_depth(ddb, table):
    # Documents nest up to 32 levels; far deeper is refused.
    ddb.put_item(TableName=table, Item={"pk": S("nest"), "d": nested(20, S("leaf"))})
    got = ddb.get_item(TableName=table, Key={"pk": S("nest")})["Item"]["d"]
    assert got == nested(20, S("leaf"))
    with ddb_error("ValidationException", match=r".*Nesting Levels have exceeded supported limits.*"):
        ddb.put_item(TableName=table, Item={"pk": S("nest"), "d": nested(40, S("leaf"))})
