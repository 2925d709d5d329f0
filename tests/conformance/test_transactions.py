"""TransactWriteItems and TransactGetItems (not in dynalite)."""
import pytest

from conftest import ddb_error, error_type, raw_call

pytestmark = [
    pytest.mark.dynalite_differs("dynalite has no transactions"),
    pytest.mark.stratad_missing("transactions: TransactWriteItems/TransactGetItems not "
                                "implemented yet (later issue)"),
]


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def test_transact_write_and_get(ddb, table_factory):
    a, b = table_factory(), table_factory()
    ddb.put_item(TableName=a, Item={"pk": S("upd"), "n": N(1)})
    ddb.put_item(TableName=a, Item={"pk": S("del")})
    ddb.put_item(TableName=b, Item={"pk": S("chk"), "ok": {"BOOL": True}})
    ddb.transact_write_items(TransactItems=[
        {"Put": {"TableName": a, "Item": {"pk": S("new"), "v": S("x")},
                 "ConditionExpression": "attribute_not_exists(pk)"}},
        {"Update": {"TableName": a, "Key": {"pk": S("upd")}, "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": N(1)}}},
        {"Delete": {"TableName": a, "Key": {"pk": S("del")}}},
        {"ConditionCheck": {"TableName": b, "Key": {"pk": S("chk")},
                            "ConditionExpression": "ok = :t",
                            "ExpressionAttributeValues": {":t": {"BOOL": True}}}}])
    out = ddb.transact_get_items(TransactItems=[
        {"Get": {"TableName": a, "Key": {"pk": S("upd")}}},
        {"Get": {"TableName": a, "Key": {"pk": S("del")}}},
        {"Get": {"TableName": a, "Key": {"pk": S("new")}, "ProjectionExpression": "v"}}])
    assert out["Responses"] == [{"Item": {"pk": S("upd"), "n": N(2)}}, {},
                                {"Item": {"v": S("x")}}]


def test_transact_write_cancelled(ddb, table):
    ddb.put_item(TableName=table, Item={"pk": S("a"), "n": N(1)})
    body = {"TransactItems": [
        {"Put": {"TableName": table, "Item": {"pk": S("b")}}},
        {"Update": {"TableName": table, "Key": {"pk": S("a")}, "UpdateExpression": "SET n = :two",
                    "ConditionExpression": "n = :five",
                    "ExpressionAttributeValues": {":two": N(2), ":five": N(5)},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}]}
    status, _, err, _ = raw_call("TransactWriteItems", body)
    assert status == 400
    assert error_type(err) == "TransactionCanceledException"
    assert err.get("message", err.get("Message")) == (
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[None, ConditionalCheckFailed]")
    reasons = err["CancellationReasons"]
    assert reasons[0] == {"Code": "None"}
    assert reasons[1]["Code"] == "ConditionalCheckFailed"
    assert reasons[1]["Message"] == "The conditional request failed"
    assert reasons[1]["Item"] == {"pk": S("a"), "n": N(1)}
    # Nothing was written.
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": S("b")})
    assert ddb.get_item(TableName=table, Key={"pk": S("a")})["Item"]["n"] == N(1)


def test_transact_write_errors(ddb, table):
    with ddb_error("ValidationException", "Transaction request cannot include multiple operations "
                   "on one item"):
        ddb.transact_write_items(TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": S("x")}}},
            {"Delete": {"TableName": table, "Key": {"pk": S("x")}}}])
    items = [{"Put": {"TableName": table, "Item": {"pk": S("k%03d" % i)}}} for i in range(101)]
    with ddb_error("ValidationException", match=r"1 validation error detected: Value (\S.*\S )?at "
                   r"'(transactItems|TransactItems)' failed to satisfy constraint: Member must "
                   r"have length less than or equal to 100"):
        ddb.transact_write_items(TransactItems=items)
    with ddb_error("ResourceNotFoundException", "Requested resource not found"):
        ddb.transact_write_items(TransactItems=[
            {"Put": {"TableName": "conf_missing_tx", "Item": {"pk": S("x")}}}])


def test_transact_client_request_token(ddb, table):
    args = dict(TransactItems=[{"Update": {
        "TableName": table, "Key": {"pk": S("tok")}, "UpdateExpression": "ADD n :one",
        "ExpressionAttributeValues": {":one": N(1)}}}], ClientRequestToken="conformance-token-1")
    ddb.transact_write_items(**args)
    ddb.transact_write_items(**args)   # the same token: applied once
    assert ddb.get_item(TableName=table, Key={"pk": S("tok")},
                        ConsistentRead=True)["Item"]["n"] == N(1)
    args["TransactItems"][0]["Update"]["ExpressionAttributeValues"] = {":one": N(5)}
    with ddb_error("IdempotentParameterMismatchException", match=r".+"):
        ddb.transact_write_items(**args)
