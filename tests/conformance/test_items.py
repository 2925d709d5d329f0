"""Single-item operations: PutItem, GetItem, UpdateItem, DeleteItem with conditions,
ReturnValues, ReturnValuesOnConditionCheckFailure, ProjectionExpression, ConsistentRead
and ReturnConsumedCapacity."""
import re

import pytest

from conftest import ddb_error, error_message, error_type, raw_call

CCF = "The conditional request failed"


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def test_put_get_roundtrip_all_types(ddb, table):
    item = {
        "pk": S("all"), "s": S("héllo ☃"), "n": N("-12.5"), "b": {"B": b"\x00\x01\xff"},
        "t": {"BOOL": True}, "f": {"BOOL": False}, "z": {"NULL": True},
        "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2.5"]}, "bs": {"BS": [b"x", b"y"]},
        "l": {"L": [S("x"), N(1), {"L": []}, {"M": {}}]},
        "m": {"M": {"inner": {"M": {"deep": S("v")}}, "e": S("")}},
        "empty_s": S(""), "empty_b": {"B": b""},
    }
    out = ddb.put_item(TableName=table, Item=item)
    assert "Attributes" not in out
    got = ddb.get_item(TableName=table, Key={"pk": S("all")})["Item"]
    norm = dict(got)
    for k in ("ss", "ns", "bs"):
        t = next(iter(item[k]))
        assert sorted(got[k][t]) == sorted(item[k][t])
        norm[k] = item[k]
    assert norm == {**item, "n": N("-12.5")}


def test_get_missing_item_returns_no_item(ddb, table):
    out = ddb.get_item(TableName=table, Key={"pk": S("nope")})
    assert "Item" not in out


def test_numbers_are_returned_normalised(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("n"), "a": N("1.50"), "b": N("0001"),
                                        "c": N("1e2"), "d": N("-0.0"), "e": N("12.000")})
    got = ddb.get_item(TableName=table, Key={"pk": S("n")})["Item"]
    assert got["a"] == N("1.5")
    assert got["b"] == N("1")
    assert got["c"] == N("100")
    assert got["d"] == N("0")
    assert got["e"] == N("12")


def test_put_overwrites_and_return_values(ddb, table):
    first = {"pk": S("k"), "v": N(1), "x": S("old")}
    out = ddb.put_item(TableName=table, Item=first, ReturnValues="ALL_OLD")
    assert "Attributes" not in out
    out = ddb.put_item(TableName=table, Item={"pk": S("k"), "v": N(2)}, ReturnValues="ALL_OLD")
    assert out["Attributes"] == first
    out = ddb.put_item(TableName=table, Item={"pk": S("k"), "v": N(3)}, ReturnValues="NONE")
    assert "Attributes" not in out
    assert ddb.get_item(TableName=table, Key={"pk": S("k")})["Item"] == {"pk": S("k"), "v": N(3)}


@pytest.mark.parametrize("rv", ["UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"])
def test_put_return_values_restricted(ddb, table, rv):
    with ddb_error("ValidationException", "ReturnValues can only be ALL_OLD or NONE"):
        ddb.put_item(TableName=table, Item={"pk": S("k")}, ReturnValues=rv)


@pytest.mark.dynalite_differs("dynalite accepts any ReturnValues on DeleteItem")
@pytest.mark.parametrize("rv", ["UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"])
def test_delete_return_values_restricted(ddb, table, rv):
    with ddb_error("ValidationException", "ReturnValues can only be ALL_OLD or NONE"):
        ddb.delete_item(TableName=table, Key={"pk": S("k")}, ReturnValues=rv)


def test_put_conditions(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("c"), "v": N(1)},
                 ConditionExpression="attribute_not_exists(pk)")
    with ddb_error("ConditionalCheckFailedException", CCF):
        ddb.put_item(TableName=table, Item={"pk": S("c"), "v": N(2)},
                     ConditionExpression="attribute_not_exists(pk)")
    ddb.put_item(TableName=table, Item={"pk": S("c"), "v": N(2)},
                 ConditionExpression="v = :one", ExpressionAttributeValues={":one": N(1)})
    with ddb_error("ConditionalCheckFailedException", CCF):
        ddb.put_item(TableName=table, Item={"pk": S("c"), "v": N(3)},
                     ConditionExpression="#v > :x AND attribute_type(#v, :t)",
                     ExpressionAttributeNames={"#v": "v"},
                     ExpressionAttributeValues={":x": N(5), ":t": S("N")})
    assert ddb.get_item(TableName=table, Key={"pk": S("c")})["Item"]["v"] == N(2)


def test_condition_functions_and_operators(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("f"), "name": S("strata db"), "n": N(10),
                                        "tags": {"SS": ["a", "b"]}, "l": {"L": [N(1), N(2)]},
                                        "m": {"M": {"x": S("y")}}})
    ok = [
        ("begins_with(#nm, :p)", {":p": S("str")}),
        ("contains(#nm, :p)", {":p": S("db")}),
        ("contains(tags, :p)", {":p": S("a")}),
        ("size(#nm) = :p", {":p": N(9)}),
        ("size(l) < :p", {":p": N(3)}),
        ("n BETWEEN :a AND :b", {":a": N(10), ":b": N(11)}),
        ("n IN (:a, :b)", {":a": N(1), ":b": N(10)}),
        ("NOT n <> :a", {":a": N(10)}),
        ("(n >= :a OR n < :a) AND m.x = :b", {":a": N(3), ":b": S("y")}),
        ("l[1] = :a", {":a": N(2)}),
        ("attribute_exists(m.x) AND attribute_not_exists(m.z)", None),
        ("attribute_type(tags, :t)", {":t": S("SS")}),
    ]
    for cond, values in ok:
        args = dict(TableName=table, Key={"pk": S("f")}, UpdateExpression="SET touched = :one",
                    ConditionExpression=cond, ExpressionAttributeNames=None,
                    ExpressionAttributeValues={":one": N(1), **(values or {})})
        if "#nm" in cond:
            args["ExpressionAttributeNames"] = {"#nm": "name"}
        else:
            del args["ExpressionAttributeNames"]
        ddb.update_item(**args)
    bad = [
        ("n > :a", {":a": N(10)}),
        ("n BETWEEN :a AND :b", {":a": N(11), ":b": N(12)}),
        ("n IN (:a, :b)", {":a": N(1), ":b": N(2)}),
        ("contains(tags, :p)", {":p": S("z")}),
        ("attribute_exists(nothing)", None),
        ("n = :a", {":a": S("10")}),   # a string never equals a number
    ]
    for cond, values in bad:
        with ddb_error("ConditionalCheckFailedException", CCF):
            ddb.update_item(TableName=table, Key={"pk": S("f")},
                            UpdateExpression="SET touched = :one", ConditionExpression=cond,
                            ExpressionAttributeValues={":one": N(1), **(values or {})})


def test_delete_item(ddb, table):
    item = {"pk": S("d"), "v": N(1)}
    ddb.put_item(TableName=table, Item=item)
    with ddb_error("ConditionalCheckFailedException", CCF):
        ddb.delete_item(TableName=table, Key={"pk": S("d")}, ConditionExpression="v = :two",
                        ExpressionAttributeValues={":two": N(2)})
    out = ddb.delete_item(TableName=table, Key={"pk": S("d")}, ReturnValues="ALL_OLD",
                          ConditionExpression="v = :one", ExpressionAttributeValues={":one": N(1)})
    assert out["Attributes"] == item
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": S("d")})
    # Deleting what is not there succeeds and returns nothing.
    out = ddb.delete_item(TableName=table, Key={"pk": S("d")}, ReturnValues="ALL_OLD")
    assert "Attributes" not in out
    with ddb_error("ConditionalCheckFailedException", CCF):
        ddb.delete_item(TableName=table, Key={"pk": S("d")},
                        ConditionExpression="attribute_exists(pk)")


def test_update_creates_item(ddb, table):
    out = ddb.update_item(TableName=table, Key={"pk": S("u")}, UpdateExpression="SET a = :a",
                          ExpressionAttributeValues={":a": N(1)}, ReturnValues="ALL_NEW")
    assert out["Attributes"] == {"pk": S("u"), "a": N(1)}
    # An update with no UpdateExpression creates the bare key.
    ddb.update_item(TableName=table, Key={"pk": S("bare")})
    assert ddb.get_item(TableName=table, Key={"pk": S("bare")})["Item"] == {"pk": S("bare")}


def test_update_return_values(ddb, table):
    key = {"pk": S("r")}
    ddb.put_item(TableName=table, Item={"pk": S("r"), "a": N(1), "b": N(2), "c": S("keep")})
    upd = dict(TableName=table, Key=key, UpdateExpression="SET a = a + :one, d = :d REMOVE b",
               ExpressionAttributeValues={":one": N(1), ":d": S("new")})
    out = ddb.update_item(ReturnValues="NONE", **upd)
    assert "Attributes" not in out
    out = ddb.update_item(ReturnValues="UPDATED_OLD", **upd)
    assert out["Attributes"] == {"a": N(2), "d": S("new")}
    out = ddb.update_item(ReturnValues="UPDATED_NEW", **upd)
    assert out["Attributes"] == {"a": N(4), "d": S("new")}
    out = ddb.update_item(ReturnValues="ALL_OLD", **upd)
    assert out["Attributes"] == {"pk": S("r"), "a": N(4), "c": S("keep"), "d": S("new")}
    out = ddb.update_item(ReturnValues="ALL_NEW", **upd)
    assert out["Attributes"] == {"pk": S("r"), "a": N(6), "c": S("keep"), "d": S("new")}


def test_update_expression_actions(ddb, table):
    key = {"pk": S("x")}
    ddb.put_item(TableName=table, Item={"pk": S("x"), "l": {"L": [N(1)]}, "n": N(5),
                                        "s": {"SS": ["a", "b", "c"]}, "s2": {"SS": ["a", "b", "c"]},
                                        "m": {"M": {"q": N(1)}}})
    out = ddb.update_item(
        TableName=table, Key=key, ReturnValues="ALL_NEW",
        UpdateExpression="SET l = list_append(l, :more), m.r = :r, cnt = if_not_exists(cnt, :zero) + :one, "
                         "n = n - :two ADD s :add, tot :five DELETE s2 :del REMOVE m.q",
        ExpressionAttributeValues={":more": {"L": [N(2), N(3)]}, ":r": S("R"), ":zero": N(0),
                                   ":one": N(1), ":two": N(2), ":add": {"SS": ["d"]},
                                   ":five": N(5), ":del": {"SS": ["a", "zz"]}})
    a = out["Attributes"]
    assert a["l"] == {"L": [N(1), N(2), N(3)]}
    assert a["m"] == {"M": {"r": S("R")}}
    assert a["cnt"] == N(1)
    assert a["n"] == N(3)
    assert sorted(a["s"]["SS"]) == ["a", "b", "c", "d"]
    assert sorted(a["s2"]["SS"]) == ["b", "c"]
    assert a["tot"] == N(5)
    # SET past the end of a list appends; REMOVE of a list element shifts the rest.
    out = ddb.update_item(TableName=table, Key=key, ReturnValues="ALL_NEW",
                          UpdateExpression="SET l[10] = :x", ExpressionAttributeValues={":x": S("end")})
    assert out["Attributes"]["l"] == {"L": [N(1), N(2), N(3), S("end")]}
    out = ddb.update_item(TableName=table, Key=key, ReturnValues="ALL_NEW",
                          UpdateExpression="REMOVE l[0]")
    assert out["Attributes"]["l"] == {"L": [N(2), N(3), S("end")]}
    # Deleting every element of a set removes the attribute.
    out = ddb.update_item(TableName=table, Key=key, ReturnValues="ALL_NEW",
                          UpdateExpression="DELETE s2 :all",
                          ExpressionAttributeValues={":all": {"SS": ["b", "c"]}})
    assert "s2" not in out["Attributes"]


def test_update_errors(ddb, table):
    key = {"pk": S("e")}
    ddb.put_item(TableName=table, Item={"pk": S("e"), "s": S("str")})
    with ddb_error("ValidationException", "One or more parameter values were invalid: Cannot update "
                   "attribute pk. This attribute is part of the key"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET pk = :v",
                        ExpressionAttributeValues={":v": S("other")})
    with ddb_error("ValidationException", "An operand in the update expression has an incorrect "
                   "data type"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="ADD s :one",
                        ExpressionAttributeValues={":one": N(1)})
    with ddb_error("ValidationException", "An operand in the update expression has an incorrect "
                   "data type"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET s = s + :one",
                        ExpressionAttributeValues={":one": N(1)})
    with ddb_error("ValidationException", "The document path provided in the update expression "
                   "is invalid for update"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET nothere.x = :one",
                        ExpressionAttributeValues={":one": N(1)})
    with ddb_error("ValidationException", "Invalid UpdateExpression: An expression attribute value "
                   "used in expression is not defined; attribute value: :undefined"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET a = :undefined")
    with ddb_error("ValidationException", "Value provided in ExpressionAttributeValues unused in "
                   "expressions: keys: {:unused}"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET a = :v",
                        ExpressionAttributeValues={":v": N(1), ":unused": N(2)})
    with ddb_error("ValidationException", "Value provided in ExpressionAttributeNames unused in "
                   "expressions: keys: {#unused}"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET a = :v",
                        ExpressionAttributeNames={"#unused": "x"},
                        ExpressionAttributeValues={":v": N(1)})
    with ddb_error("ValidationException", "Invalid UpdateExpression: Two document paths overlap "
                   "with each other; must remove or rewrite one of these paths; path one: [a], "
                   "path two: [a]"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET a = :v REMOVE a",
                        ExpressionAttributeValues={":v": N(1)})
    with ddb_error("ValidationException", "Invalid UpdateExpression: The \"SET\" section can only "
                   "be used once in an update expression;"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET a = :v SET b = :v",
                        ExpressionAttributeValues={":v": N(1)})
    with ddb_error("ValidationException", "Invalid UpdateExpression: Attribute name is a reserved "
                   "keyword; reserved keyword: name"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET name = :v",
                        ExpressionAttributeValues={":v": N(1)})
    with ddb_error("ValidationException", "Invalid ConditionExpression: An expression attribute "
                   "name used in the document path is not defined; attribute name: #nope"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET a = :v",
                        ConditionExpression="attribute_exists(#nope)",
                        ExpressionAttributeValues={":v": N(1)})
    with ddb_error("ValidationException", match=r"Invalid UpdateExpression: Incorrect operand type "
                   r"for operator or function; operator: ADD, operand type: BOOLEAN"
                   r"(, typeSet: ALLOWED_FOR_ADD_OPERAND)?"):
        ddb.update_item(TableName=table, Key=key, UpdateExpression="ADD a :v",
                        ExpressionAttributeValues={":v": {"BOOL": True}})


def test_key_validation_errors(ddb, table_hr):
    t = table_hr
    with ddb_error("ValidationException", "The provided key element does not match the schema"):
        ddb.get_item(TableName=t, Key={"pk": S("a")})
    with ddb_error("ValidationException", "The provided key element does not match the schema"):
        ddb.get_item(TableName=t, Key={"pk": S("a"), "sk": S("not a number")})
    with ddb_error("ValidationException", "The provided key element does not match the schema"):
        ddb.delete_item(TableName=t, Key={"pk": S("a"), "sk": N(1), "extra": N(1)})
    with ddb_error("ValidationException", "One or more parameter values were invalid: Missing the "
                   "key sk in the item"):
        ddb.put_item(TableName=t, Item={"pk": S("a")})
    with ddb_error("ValidationException", "One or more parameter values were invalid: Type "
                   "mismatch for key sk expected: N actual: S"):
        ddb.put_item(TableName=t, Item={"pk": S("a"), "sk": S("1")})
    with ddb_error("ValidationException", "One or more parameter values are not valid. The "
                   "AttributeValue for a key attribute cannot contain an empty string value. "
                   "Key: pk"):
        ddb.put_item(TableName=t, Item={"pk": S(""), "sk": N(1)})


@pytest.mark.dynalite_differs("dynalite words the empty-key error of GetItem differently")
def test_get_with_empty_string_key(ddb, table):
    with ddb_error("ValidationException", "One or more parameter values are not valid. The "
                   "AttributeValue for a key attribute cannot contain an empty string value. "
                   "Key: pk"):
        ddb.get_item(TableName=table, Key={"pk": S("")})


def test_attribute_value_errors(ddb, table):
    cases = [
        ({"x": {"SS": []}}, "One or more parameter values were invalid: An string set  may not be empty"),
        ({"x": {"NS": []}}, "One or more parameter values were invalid: An number set  may not be empty"),
        ({"x": {"BS": []}}, "One or more parameter values were invalid: Binary sets should not be empty"),
        ({"x": {"NULL": False}}, "One or more parameter values were invalid: Null attribute value "
                                 "types must have the value of true"),
        ({"x": {}}, "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"),
        ({"x": {"S": "a", "N": "1"}}, "Supplied AttributeValue has more than one datatypes set, "
                                      "must contain exactly one of the supported datatypes"),
        ({"x": {"NS": ["1", "1"]}}, "Input collection contains duplicates"),
    ]
    for extra, message in cases:
        with ddb_error("ValidationException", match=r"(1 validation error detected: )?" + re.escape(message)):
            ddb.put_item(TableName=table, Item={"pk": S("v"), **extra})
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?The parameter "
                   r"cannot be converted to a numeric value(: abc)?"):
        ddb.put_item(TableName=table, Item={"pk": S("v"), "x": N("abc")})
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?One or more "
                   r"parameter values were invalid: Input collection \[.*\] contains duplicates\."):
        ddb.put_item(TableName=table, Item={"pk": S("v"), "x": {"SS": ["a", "a"]}})
    # Binary sets print their base64 elements, and "of type BS" with no space before it.
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?One or more "
                   r"parameter values were invalid: Input collection \[YQ==, YQ==\]of type BS "
                   r"contains duplicates\."):
        ddb.put_item(TableName=table, Item={"pk": S("v"), "x": {"BS": [b"a", b"a"]}})


@pytest.mark.dynalite_differs("dynalite accepts an empty attribute name")
def test_empty_attribute_name(ddb, table):
    """Attribute names are at least one character long: at the top of an item and in a
    map at any depth."""
    for item in ({"pk": S("v"), "": S("x")},
                 {"pk": S("v"), "m": {"M": {"a": {"L": [{"M": {"": N(1)}}]}}}}):
        with ddb_error("ValidationException", match=r".*Empty attribute name"):
            ddb.put_item(TableName=table, Item=item)
    with ddb_error("ValidationException", match=r".*Empty attribute name"):
        ddb.get_item(TableName=table, Key={"pk": S("v"), "": S("x")})
    # Inside a value of ExpressionAttributeValues too (an empty placeholder is another
    # error, test_expressions.py).
    with ddb_error("ValidationException", match=r".*Empty attribute name.*"):
        ddb.put_item(TableName=table, Item={"pk": S("v")}, ConditionExpression="a = :v",
                     ExpressionAttributeValues={":v": {"M": {"": S("x")}}})


def test_strings_may_hold_nul(ddb, table):
    """U+0000 is a character like any other in DynamoDB strings: in keys, values, sets,
    lists, expression values and legacy parameters, and it is part of the key."""
    key = {"pk": S("nul\x00key")}
    ddb.put_item(TableName=table, Item={**key, "s": S("a\x00b"), "ss": {"SS": ["x\x00", "x"]},
                                        "l": {"L": [S("\x00")]}})
    got = ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert got["s"] == S("a\x00b") and got["l"] == {"L": [S("\x00")]}
    assert sorted(got["ss"]["SS"]) == ["x", "x\x00"]
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": S("nul")}, ConsistentRead=True)
    ddb.update_item(TableName=table, Key=key, UpdateExpression="SET t = :v",
                    ConditionExpression="s = :old",
                    ExpressionAttributeValues={":v": S("q\x00"), ":old": S("a\x00b")})
    ddb.update_item(TableName=table, Key=key,
                    AttributeUpdates={"u": {"Action": "PUT", "Value": S("z\x00z")}},
                    Expected={"s": {"Value": S("a\x00b")}})
    got = ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert got["t"] == S("q\x00") and got["u"] == S("z\x00z")
    with ddb_error("ConditionalCheckFailedException", CCF):
        ddb.put_item(TableName=table, Item=key, ConditionExpression="s = :v",
                     ExpressionAttributeValues={":v": S("a")})


def test_missing_table_item_ops(ddb):
    t = "conf_no_such_table_items"
    for call in (lambda: ddb.get_item(TableName=t, Key={"pk": S("a")}),
                 lambda: ddb.put_item(TableName=t, Item={"pk": S("a")}),
                 lambda: ddb.update_item(TableName=t, Key={"pk": S("a")}),
                 lambda: ddb.delete_item(TableName=t, Key={"pk": S("a")}),
                 lambda: ddb.query(TableName=t, KeyConditionExpression="pk = :a",
                                   ExpressionAttributeValues={":a": S("a")}),
                 lambda: ddb.scan(TableName=t)):
        with ddb_error("ResourceNotFoundException", "Requested resource not found"):
            call()


def test_return_values_on_condition_check_failure(ddb, table):
    """boto3 of Debian bookworm predates this parameter: sent raw."""
    ddb.put_item(TableName=table, Item={"pk": S("rv"), "v": N(1)})
    for op, body in (
            ("PutItem", {"Item": {"pk": S("rv"), "v": N(2)}}),
            ("UpdateItem", {"Key": {"pk": S("rv")}, "UpdateExpression": "SET v = :v",
                            "ExpressionAttributeValues": {":v": N(2), ":none": N(0)}}),
            ("DeleteItem", {"Key": {"pk": S("rv")}})):
        body = dict(body, TableName=table, ConditionExpression="attribute_not_exists(pk)")
        if op == "UpdateItem":
            body["ConditionExpression"] = "v = :none"
        status, _, err, _ = raw_call(op, dict(body, ReturnValuesOnConditionCheckFailure="NONE"))
        assert status == 400 and error_type(err) == "ConditionalCheckFailedException"
        assert error_message(err) == CCF
        assert "Item" not in err


@pytest.mark.dynalite_differs("dynalite ignores ReturnValuesOnConditionCheckFailure")
def test_return_values_on_condition_check_failure_all_old(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("rv"), "v": N(1)})
    for op, body in (
            ("PutItem", {"Item": {"pk": S("rv"), "v": N(2)},
                         "ConditionExpression": "attribute_not_exists(pk)"}),
            ("UpdateItem", {"Key": {"pk": S("rv")}, "UpdateExpression": "SET v = :v",
                            "ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": N(2)}}),
            ("DeleteItem", {"Key": {"pk": S("rv")}, "ConditionExpression": "v > :v",
                            "ExpressionAttributeValues": {":v": N(2)}})):
        status, _, err, _ = raw_call(op, dict(body, TableName=table,
                                              ReturnValuesOnConditionCheckFailure="ALL_OLD"))
        assert status == 400 and error_type(err) == "ConditionalCheckFailedException"
        assert error_message(err) == CCF
        assert err["Item"] == {"pk": S("rv"), "v": N(1)}
    # Nothing to return when the item does not exist.
    status, _, err, _ = raw_call("DeleteItem", {
        "TableName": table, "Key": {"pk": S("absent")}, "ConditionExpression": "attribute_exists(pk)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"})
    assert status == 400 and error_type(err) == "ConditionalCheckFailedException"
    assert "Item" not in err


def test_projection_expression(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("p"), "a": N(1), "b": S("x"),
                                        "m": {"M": {"x": N(1), "y": {"L": [N(0), N(1), {"M": {"z": S("deep")}}]}}},
                                        "l": {"L": [S("l0"), S("l1"), S("l2")]}})
    out = ddb.get_item(TableName=table, Key={"pk": S("p")}, ProjectionExpression="a, #b",
                       ExpressionAttributeNames={"#b": "b"})
    assert out["Item"] == {"a": N(1), "b": S("x")}
    out = ddb.get_item(TableName=table, Key={"pk": S("p")},
                       ProjectionExpression="m.y[2].z, l[1], l[2], nothere")
    assert out["Item"] == {"m": {"M": {"y": {"L": [{"M": {"z": S("deep")}}]}}},
                           "l": {"L": [S("l1"), S("l2")]}}
    out = ddb.get_item(TableName=table, Key={"pk": S("p")}, ProjectionExpression="#m.#y[2].#z",
                       ExpressionAttributeNames={"#m": "m", "#y": "y", "#z": "z"})
    assert out["Item"] == {"m": {"M": {"y": {"L": [{"M": {"z": S("deep")}}]}}}}
    out = ddb.get_item(TableName=table, Key={"pk": S("p")}, ProjectionExpression="nothere")
    assert out["Item"] == {}
    with ddb_error("ValidationException", "Invalid ProjectionExpression: Two document paths "
                   "overlap with each other; must remove or rewrite one of these paths; path one: "
                   "[a], path two: [a]"):
        ddb.get_item(TableName=table, Key={"pk": S("p")}, ProjectionExpression="a, a")
    with ddb_error("ValidationException", "Invalid ProjectionExpression: Attribute name is a "
                   "reserved keyword; reserved keyword: name"):
        ddb.get_item(TableName=table, Key={"pk": S("p")}, ProjectionExpression="name")


@pytest.mark.dynalite_differs("dynalite words syntax errors as its own parser does")
def test_projection_syntax_error(ddb, table):
    with ddb_error("ValidationException", "Invalid ProjectionExpression: Syntax error; token: "
                   "\"!\", near: \"!!\""):
        ddb.get_item(TableName=table, Key={"pk": S("p")}, ProjectionExpression="!!! INVALID !!!")


def test_consistent_read(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("cr"), "v": N(1)})
    assert ddb.get_item(TableName=table, Key={"pk": S("cr")},
                        ConsistentRead=True)["Item"]["v"] == N(1)
    ddb.update_item(TableName=table, Key={"pk": S("cr")}, UpdateExpression="SET v = :v",
                    ExpressionAttributeValues={":v": N(2)})
    # A strongly consistent read sees the acknowledged write at once.
    assert ddb.get_item(TableName=table, Key={"pk": S("cr")},
                        ConsistentRead=True)["Item"]["v"] == N(2)


# --- consumed capacity ---------------------------------------------------------------------

def sized_item(pk, size):
    """An item of exactly `size` bytes by DynamoDB's rule (UTF-8 name + value lengths)."""
    fixed = len("pk") + len(pk.encode()) + len("d")
    assert size >= fixed
    return {"pk": S(pk), "d": S("x" * (size - fixed))}


def cap(out):
    return out["ConsumedCapacity"]


@pytest.mark.parametrize("size,wcu", [(1, 1.0), (1024, 1.0), (1025, 2.0), (4000, 4.0), (10240, 10.0)])
def test_write_capacity_units(ddb, table, size, wcu):
    size = max(size, 4)
    out = ddb.put_item(TableName=table, Item=sized_item("w", size), ReturnConsumedCapacity="TOTAL")
    assert cap(out)["TableName"] == table
    assert cap(out)["CapacityUnits"] == wcu
    out = ddb.delete_item(TableName=table, Key={"pk": S("w")}, ReturnConsumedCapacity="INDEXES")
    assert cap(out)["CapacityUnits"] == wcu
    assert cap(out)["Table"]["CapacityUnits"] == wcu


def test_write_capacity_uses_larger_of_old_and_new(ddb, table):
    ddb.put_item(TableName=table, Item=sized_item("big", 3000))
    out = ddb.put_item(TableName=table, Item=sized_item("big", 100), ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 3.0
    out = ddb.update_item(TableName=table, Key={"pk": S("big")}, UpdateExpression="SET d = :d",
                          ExpressionAttributeValues={":d": S("x" * 5000)},
                          ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 5.0
    # Deleting a missing item still costs one unit.
    out = ddb.delete_item(TableName=table, Key={"pk": S("none")}, ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 1.0
    # So does a write whose condition fails? No capacity is returned with the error;
    # the write of a new small item is one unit.
    out = ddb.update_item(TableName=table, Key={"pk": S("fresh")}, UpdateExpression="SET a = :a",
                          ExpressionAttributeValues={":a": N(1)}, ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 1.0


@pytest.mark.parametrize("size,strong,eventual", [
    (100, 1.0, 0.5), (4096, 1.0, 0.5), (4097, 2.0, 1.0), (12288, 3.0, 1.5), (12289, 4.0, 2.0)])
def test_read_capacity_units(ddb, table, size, strong, eventual):
    ddb.put_item(TableName=table, Item=sized_item("r", size))
    out = ddb.get_item(TableName=table, Key={"pk": S("r")}, ConsistentRead=True,
                       ReturnConsumedCapacity="TOTAL")
    assert cap(out) ["TableName"] == table
    assert cap(out)["CapacityUnits"] == strong
    out = ddb.get_item(TableName=table, Key={"pk": S("r")}, ReturnConsumedCapacity="INDEXES")
    assert cap(out)["CapacityUnits"] == eventual
    assert cap(out)["Table"]["CapacityUnits"] == eventual
    # A projection does not reduce the charge: the whole item is read.
    out = ddb.get_item(TableName=table, Key={"pk": S("r")}, ConsistentRead=True,
                       ProjectionExpression="pk", ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == strong


def test_read_capacity_missing_item_and_none(ddb, table):
    out = ddb.get_item(TableName=table, Key={"pk": S("none")}, ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 0.5
    out = ddb.get_item(TableName=table, Key={"pk": S("none")}, ConsistentRead=True,
                       ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 1.0
    out = ddb.get_item(TableName=table, Key={"pk": S("none")}, ReturnConsumedCapacity="NONE")
    assert "ConsumedCapacity" not in out
    out = ddb.put_item(TableName=table, Item={"pk": S("x")})
    assert "ConsumedCapacity" not in out


def test_query_scan_capacity(ddb, table_hr):
    # Ten items of 1000 bytes each: 10000 bytes -> 3 x 4 KB.
    for i in range(10):
        item = {"pk": S("q"), "sk": N(i)}
        fixed = 2 + 1 + 2 + 1 + 1   # "pk" + "q" + "sk" + number(1 byte + 1) + "d"
        item["d"] = S("x" * (1000 - fixed))
        ddb.put_item(TableName=table_hr, Item=item)
    out = ddb.query(TableName=table_hr, KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": S("q")}, ConsistentRead=True,
                    ReturnConsumedCapacity="TOTAL")
    assert out["Count"] == 10
    assert cap(out)["CapacityUnits"] == 3.0
    out = ddb.query(TableName=table_hr, KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": S("q")}, ReturnConsumedCapacity="INDEXES")
    assert cap(out)["CapacityUnits"] == 1.5
    assert cap(out)["Table"]["CapacityUnits"] == 1.5
    out = ddb.scan(TableName=table_hr, ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 1.5


@pytest.mark.dynalite_differs("dynalite ignores ConsistentRead on Scan")
def test_scan_consistent_capacity(ddb, table_hr):
    for i in range(10):
        ddb.put_item(TableName=table_hr, Item={"pk": S("q"), "sk": N(i), "d": S("x" * 993)})
    out = ddb.scan(TableName=table_hr, ConsistentRead=True, ReturnConsumedCapacity="TOTAL")
    assert cap(out)["CapacityUnits"] == 3.0
