"""The wire protocol: authentication, unknown operations, malformed JSON, error body
shape, and the x-amzn-RequestId / x-amz-crc32 response headers."""
import json

import pytest

from conftest import (ENDPOINT, crc32_ok, error_message, error_type, http_request, raw_call,
                      sign_request)


def test_unsigned_request_is_missing_authentication_token():
    status, headers, body, raw = raw_call("ListTables", {}, signed=False)
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#MissingAuthenticationTokenException"
    assert error_message(body) == "Request is missing Authentication Token"
    assert crc32_ok(headers, raw)
    assert headers.get("x-amzn-requestid")


def test_incomplete_signature():
    status, headers, body, raw = raw_call("ListTables", {}, signed=False, headers={
        "Authorization": "AWS4-HMAC-SHA256 Credential=AKID/20261202/us-east-1/dynamodb/aws4_request",
        "X-Amz-Date": "20261202T000000Z"})
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#IncompleteSignatureException"
    assert error_message(body).startswith("Authorization header requires '")


@pytest.mark.parametrize("target", ["DynamoDB_20120810.NoSuchOperation", "DynamoDB_20120810",
                                    "Nonsense.ListTables", ""])
def test_unknown_operation(target):
    body = b"{}"
    headers = sign_request("ListTables", body)
    headers["X-Amz-Target"] = target
    status, rh, raw = http_request("POST", "/", body, headers)
    assert status == 400
    parsed = json.loads(raw)
    assert parsed == {"__type": "com.amazon.coral.service#UnknownOperationException"}
    assert crc32_ok(rh, raw)


def test_unknown_operation_is_checked_before_auth():
    status, _, body, _ = raw_call("NoSuchOperation", {}, signed=False)
    assert status == 400
    assert body == {"__type": "com.amazon.coral.service#UnknownOperationException"}


@pytest.mark.parametrize("payload", [b"{", b"{\"TableName\": }", b"not json", b"[1, 2"])
def test_malformed_json_is_serialization_exception(payload):
    status, headers, body, raw = raw_call("ListTables", payload)
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#SerializationException"
    assert crc32_ok(headers, raw)


def test_wrong_json_type_is_serialization_exception(table):
    status, _, body, _ = raw_call("GetItem", {"TableName": table, "Key": {"pk": {"S": "a"}},
                                              "ConsistentRead": {"x": 1}})
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#SerializationException"
    status, _, body, _ = raw_call("GetItem", {"TableName": 12, "Key": {"pk": {"S": "a"}}})
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#SerializationException"
    assert error_message(body) == "NUMBER_VALUE cannot be converted to String"


def test_success_headers_and_crc32(table):
    status, headers, body, raw = raw_call("PutItem", {"TableName": table,
                                                      "Item": {"pk": {"S": "h"}, "v": {"S": "é☃"}}})
    assert status == 200
    assert body == {}
    assert headers["content-type"].startswith("application/x-amz-json-1.0")
    assert crc32_ok(headers, raw)
    rid = headers["x-amzn-requestid"]
    assert rid and len(rid) >= 20
    status, headers2, body, raw = raw_call("GetItem", {"TableName": table,
                                                       "Key": {"pk": {"S": "h"}}})
    assert status == 200
    assert body["Item"]["v"] == {"S": "é☃"}
    assert crc32_ok(headers2, raw)
    assert headers2["x-amzn-requestid"] != rid, "every request gets its own id"


def test_error_body_shapes(table):
    status, headers, body, raw = raw_call("GetItem", {"TableName": "conf_missing_protocol",
                                                      "Key": {"pk": {"S": "a"}}})
    assert status == 400
    assert body["__type"] == "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"
    assert error_message(body) == "Requested resource not found"
    assert crc32_ok(headers, raw) and headers["x-amzn-requestid"]
    status, headers, body, raw = raw_call("GetItem", {"TableName": table, "Key": {"nope": {"S": "a"}}})
    assert status == 400
    assert body["__type"] == "com.amazon.coral.validate#ValidationException"
    assert error_message(body) == "The provided key element does not match the schema"
    assert crc32_ok(headers, raw) and headers["x-amzn-requestid"]
    status, headers, body, raw = raw_call("PutItem", {
        "TableName": table, "Item": {"pk": {"S": "c"}}, "ConditionExpression": "attribute_exists(pk)"})
    assert status == 400
    assert body["__type"] == "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"
    assert error_message(body) == "The conditional request failed"
    status, _, body, _ = raw_call("GetItem", {"Key": {"pk": {"S": "a"}}})
    assert status == 400 and error_type(body) == "ValidationException"
    assert error_message(body) in (
        "The parameter 'TableName' is required but was not present in the request",
        "1 validation error detected: Value null at 'tableName' failed to satisfy constraint: "
        "Member must not be null")


def test_keep_alive_serves_several_requests():
    import http.client
    import urllib.parse
    u = urllib.parse.urlparse(ENDPOINT)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        for _ in range(3):
            body = b"{}"
            conn.request("POST", "/", body=body, headers=sign_request("ListTables", body))
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 200
            assert "TableNames" in json.loads(data)
    finally:
        conn.close()


def test_boto3_checks_crc32(ddb, table):
    """botocore verifies x-amz-crc32 on every DynamoDB response and fails on a mismatch;
    a large response exercises it on a big body."""
    ddb.put_item(TableName=table, Item={"pk": {"S": "crc"}, "d": {"S": "q" * 300000}})
    got = ddb.get_item(TableName=table, Key={"pk": {"S": "crc"}})
    assert len(got["Item"]["d"]["S"]) == 300000


def test_health_check():
    status, _, _ = http_request("GET", "/", None, {})
    assert status == 200
