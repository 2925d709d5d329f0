"""Expression parameter rules shared by every operation, and the legacy (pre-expression)
parameters that old clients still send."""
import pytest

from conftest import ddb_error, error_message, error_type, raw_call


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
    with ddb_error("ValidationException", "ExpressionAttributeValues contains invalid key: Syntax "
                   "error; key: \"\""):
        ddb.put_item(TableName=table, Item={"pk": S("a")}, ConditionExpression="a = :v",
                     ExpressionAttributeValues={":v": S("x"), "": S("y")})


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


def test_legacy_key_conditions_with_filter_expression(ddb, table_hr):
    """KeyConditions may come with a FilterExpression and its own placeholders (only
    KeyConditionExpression cannot mix with the legacy parameters)."""
    for i in range(6):
        ddb.put_item(TableName=table_hr, Item={"pk": S("kf"), "sk": N(i), "v": N(i % 3)})
    out = ddb.query(TableName=table_hr, KeyConditions={
        "pk": {"ComparisonOperator": "EQ", "AttributeValueList": [S("kf")]},
        "sk": {"ComparisonOperator": "GE", "AttributeValueList": [N(1)]}},
        FilterExpression="#v = :v", ExpressionAttributeNames={"#v": "v"},
        ExpressionAttributeValues={":v": N(1)})
    assert [it["sk"]["N"] for it in out["Items"]] == ["1", "4"]
    assert out["ScannedCount"] == 5


@pytest.mark.dynalite_differs("dynalite holds AttributesToGet to 255 names")
def test_legacy_parameters_have_no_expression_limits(ddb, table):
    """The 4 KB, 300-operator and 100-operand limits are the expression parameters'; the
    legacy parameters that mean the same are not held to them."""
    key = {"pk": S("big")}
    ddb.update_item(TableName=table, Key=key,
                    AttributeUpdates={"a%d" % i: {"Action": "PUT", "Value": N(i)}
                                      for i in range(400)})
    got = ddb.get_item(TableName=table, Key=key, ConsistentRead=True,
                       AttributesToGet=["a%d" % i for i in range(500)])["Item"]
    assert len(got) == 400 and got["a399"] == N(399)
    ddb.put_item(TableName=table, Item={**key, "x": N(150)},
                 Expected={"b%d" % i: {"Exists": False} for i in range(200)})
    ddb.put_item(TableName=table, Item={**key, "x": N(2)},
                 Expected={"x": {"ComparisonOperator": "IN",
                                 "AttributeValueList": [N(i) for i in range(101, 300)]}})
    got = ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert got == {**key, "x": N(2)}


def test_empty_legacy_parameters(ddb, table):
    """An empty Expected, AttributeUpdates, QueryFilter or ScanFilter means no condition,
    no change, no filter; empty KeyConditions and AttributesToGet are errors."""
    ddb.put_item(TableName=table, Item={"pk": S("e1")}, Expected={})
    out = ddb.update_item(TableName=table, Key={"pk": S("e2")}, AttributeUpdates={},
                          ReturnValues="ALL_NEW")
    assert out["Attributes"] == {"pk": S("e2")}
    kc = {"pk": {"ComparisonOperator": "EQ", "AttributeValueList": [S("e1")]}}
    assert ddb.query(TableName=table, KeyConditions=kc, QueryFilter={})["Count"] == 1
    assert ddb.scan(TableName=table, ScanFilter={})["Count"] == 2
    with ddb_error("ValidationException", "Conditions can be of length 1 or 2 only"):
        ddb.query(TableName=table, KeyConditions={})
    # boto3 refuses an empty AttributesToGet itself; DynamoDB's own answer:
    status, _, err, _ = raw_call("Query", {"TableName": table, "KeyConditions": kc,
                                           "AttributesToGet": []})
    assert status == 400 and error_type(err) == "ValidationException"
    assert error_message(err) == (
        "1 validation error detected: Value '[]' at 'attributesToGet' failed to satisfy "
        "constraint: Member must have length greater than or equal to 1")

