"""Expression parameter rules shared by every operation, and the legacy (pre-expression)
parameters that old clients still send."""
import pytest

from conftest import ddb_error


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def test_placeholders_without_expression(ddb, table):
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?"
                   r"ExpressionAttributeValues can only be specified when using expressions"
                   r"(: ConditionExpression is null)?"):
        ddb.put_item(TableName=table, Item={"pk": S("a")},
                     ExpressionAttributeValues={":v": S("x")})
    with ddb_error("ValidationException", match=r"(1 validation error detected: )?"
                   r"ExpressionAttributeNames can only be specified when using expressions"):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, ExpressionAttributeNames={"#a": "a"})


def test_empty_placeholder_maps(ddb, table):
    with ddb_error("ValidationException", "ExpressionAttributeValues must not be empty"):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, ConditionExpression="attribute_exists(a)",
                     ExpressionAttributeValues={})
    with ddb_error("ValidationException", "ExpressionAttributeNames must not be empty"):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, ConditionExpression="attribute_exists(a)",
                     ExpressionAttributeNames={})
    with ddb_error("ValidationException", "ExpressionAttributeValues contains invalid key: Syntax "
                   "error; key: \"v\""):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, ConditionExpression="a = :v",
                     ExpressionAttributeValues={":v": S("x"), "v": S("y")})


def test_expression_and_legacy_together(ddb, table):
    with ddb_error("ValidationException", "Can not use both expression and non-expression "
                   "parameters in the same request: Non-expression parameters: {Expected} "
                   "Expression parameters: {ConditionExpression}"):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, Expected={"pk": {"Exists": False}},
                     ConditionExpression="attribute_not_exists(pk)")
    with ddb_error("ValidationException", "Can not use both expression and non-expression "
                   "parameters in the same request: Non-expression parameters: {AttributesToGet} "
                   "Expression parameters: {ProjectionExpression}"):
        ddb.get_item(TableName=table, Key={"pk": S("a")}, AttributesToGet=["pk"],
                     ProjectionExpression="pk")


def test_condition_expression_errors(ddb, table):
    def put(cond, values=None, names=None):
        args = dict(TableName=table, Item={"pk": S("a")}, ConditionExpression=cond)
        if values:
            args["ExpressionAttributeValues"] = values
        if names:
            args["ExpressionAttributeNames"] = names
        ddb.put_item(**args)
    with ddb_error("ValidationException", "Invalid ConditionExpression: The expression can not be "
                   "empty;"):
        put("")
    with ddb_error("ValidationException", "Invalid ConditionExpression: An expression attribute "
                   "value used in expression is not defined; attribute value: :x"):
        put("a = :x")
    with ddb_error("ValidationException", "Invalid ConditionExpression: Invalid function name; "
                   "function: nosuchfn"):
        put("nosuchfn(a)")
    with ddb_error("ValidationException", "Invalid ConditionExpression: The function is not "
                   "allowed to be used this way in an expression; function: size"):
        put("size(a)")
    with ddb_error("ValidationException", "Invalid ConditionExpression: Incorrect number of "
                   "operands for operator or function; operator or function: attribute_exists, "
                   "number of operands: 2"):
        put("attribute_exists(a, b)")
    with ddb_error("ValidationException", "Invalid ConditionExpression: The BETWEEN operator "
                   "requires upper bound to be greater than or equal to lower bound; lower bound "
                   "operand: AttributeValue: {N:2}, upper bound operand: AttributeValue: {N:1}"):
        put("a BETWEEN :hi AND :lo", {":hi": N(2), ":lo": N(1)})
    with ddb_error("ValidationException", "Invalid ConditionExpression: Attribute name is a "
                   "reserved keyword; reserved keyword: status"):
        put("status = :v", {":v": S("x")})


@pytest.mark.dynalite_differs("dynalite does not bound IN operands")
def test_in_operand_limit(ddb, table):
    values = {":v%d" % i: N(i) for i in range(101)}
    with ddb_error("ValidationException", "Invalid ConditionExpression: The IN operator is "
                   "provided with too many operands; number of operands: 101"):
        ddb.put_item(TableName=table, Item={"pk": S("a")},
                     ConditionExpression="a IN (%s)" % ", ".join(sorted(values)),
                     ExpressionAttributeValues=values)
    values.pop(":v100")
    ddb.put_item(TableName=table, Item={"pk": S("a")},
                 ConditionExpression="attribute_not_exists(a) OR a IN (%s)" % ", ".join(sorted(values)),
                 ExpressionAttributeValues=values)


@pytest.mark.dynalite_differs("dynalite does not bound expression length")
def test_expression_length_limit(ddb, table):
    long_cond = " OR ".join("a = :v" for _ in range(700))
    assert len(long_cond) > 4096
    with ddb_error("ValidationException", match=r"(Invalid ConditionExpression: )?Expression "
                   r"size has exceeded the maximum allowed size.*"):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, ConditionExpression=long_cond,
                     ExpressionAttributeValues={":v": N(1)})


# --- legacy parameters -------------------------------------------------------------------

def test_legacy_attributes_to_get_and_expected(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("l"), "a": N(1), "b": N(2)},
                 Expected={"pk": {"Exists": False}})
    with ddb_error("ConditionalCheckFailedException", "The conditional request failed"):
        ddb.put_item(TableName=table, Item={"pk": S("l")}, Expected={"pk": {"Exists": False}})
    ddb.put_item(TableName=table, Item={"pk": S("l"), "a": N(5), "b": N(2)},
                 Expected={"a": {"Value": N(1)}, "b": {"ComparisonOperator": "GT",
                                                        "AttributeValueList": [N(1)]}},
                 ConditionalOperator="AND")
    out = ddb.get_item(TableName=table, Key={"pk": S("l")}, AttributesToGet=["a"])
    assert out["Item"] == {"a": N(5)}


def test_legacy_attribute_updates(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("u"), "n": N(1), "gone": S("x")})
    out = ddb.update_item(TableName=table, Key={"pk": S("u")}, ReturnValues="ALL_NEW",
                          AttributeUpdates={"n": {"Action": "ADD", "Value": N(2)},
                                            "s": {"Action": "PUT", "Value": S("new")},
                                            "gone": {"Action": "DELETE"}})
    assert out["Attributes"] == {"pk": S("u"), "n": N(3), "s": S("new")}


def test_legacy_key_conditions_and_filters(ddb, table_hr):
    for i in range(10):
        ddb.put_item(TableName=table_hr, Item={"pk": S("k"), "sk": N(i), "v": N(i % 2)})
    out = ddb.query(TableName=table_hr, KeyConditions={
        "pk": {"ComparisonOperator": "EQ", "AttributeValueList": [S("k")]},
        "sk": {"ComparisonOperator": "BETWEEN", "AttributeValueList": [N(2), N(6)]}},
        QueryFilter={"v": {"ComparisonOperator": "EQ", "AttributeValueList": [N(0)]}})
    assert [it["sk"]["N"] for it in out["Items"]] == ["2", "4", "6"]
    assert out["ScannedCount"] == 5
    out = ddb.scan(TableName=table_hr, ScanFilter={
        "sk": {"ComparisonOperator": "IN", "AttributeValueList": [N(1), N(8)]}})
    assert sorted(it["sk"]["N"] for it in out["Items"]) == ["1", "8"]
    assert out["ScannedCount"] == 10
