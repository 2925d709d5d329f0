"""The AWS CLI (/usr/bin/aws) against the endpoint, driven through subprocess."""
import json
import os
import re
import subprocess

import pytest

from conftest import ENDPOINT, drop_table, unique_name, wait_active

AWS = "/usr/bin/aws"

pytestmark = pytest.mark.skipif(not os.path.exists(AWS), reason="no /usr/bin/aws")


def aws(*args, check=True):
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDCONFORMANCE",
               AWS_SECRET_ACCESS_KEY="conformance-secret", AWS_DEFAULT_REGION="us-east-1",
               AWS_PAGER="", AWS_MAX_ATTEMPTS="1", AWS_RETRY_MODE="standard",
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    env.pop("AWS_PROFILE", None)
    cmd = [AWS, "--endpoint-url", ENDPOINT, "--no-cli-pager", "--output", "json",
           "dynamodb", *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, "aws %s failed (%d): %s" % (args[0], p.returncode, p.stderr)
    return p


def out(p):
    return json.loads(p.stdout) if p.stdout.strip() else {}


@pytest.fixture
def cli_table(ddb):
    name = unique_name("cli")
    yield name
    drop_table(ddb, name)


def test_cli_item_lifecycle(ddb, cli_table):
    t = cli_table
    d = out(aws("create-table", "--table-name", t,
                "--attribute-definitions", "AttributeName=pk,AttributeType=S",
                "AttributeName=sk,AttributeType=N",
                "--key-schema", "AttributeName=pk,KeyType=HASH", "AttributeName=sk,KeyType=RANGE",
                "--billing-mode", "PAY_PER_REQUEST"))
    assert d["TableDescription"]["TableName"] == t
    wait_active(ddb, t)

    def item(i):
        return {"pk": {"S": "cli"}, "sk": {"N": str(i)}, "v": {"S": "val%d" % i}}
    aws("put-item", "--table-name", t, "--item", json.dumps(item(3)))
    # The rest in one call: every CLI start costs about a second.
    aws("batch-write-item", "--request-items", json.dumps(
        {t: [{"PutRequest": {"Item": item(i)}} for i in range(7) if i != 3]}))
    got = out(aws("get-item", "--table-name", t, "--key",
                  json.dumps({"pk": {"S": "cli"}, "sk": {"N": "3"}}), "--consistent-read"))
    assert got["Item"] == {"pk": {"S": "cli"}, "sk": {"N": "3"}, "v": {"S": "val3"}}

    q = out(aws("query", "--table-name", t, "--key-condition-expression", "pk = :p AND sk >= :s",
                "--expression-attribute-values", json.dumps({":p": {"S": "cli"}, ":s": {"N": "4"}})))
    assert [it["sk"]["N"] for it in q["Items"]] == ["4", "5", "6"]
    assert q["Count"] == 3

    # --max-items 3 pages with a NextToken the CLI builds from LastEvaluatedKey.
    seen, token, pages = [], None, 0
    while True:
        args = ["scan", "--table-name", t, "--max-items", "3"]
        if token:
            args += ["--starting-token", token]
        s = out(aws(*args))
        pages += 1
        assert len(s["Items"]) <= 3
        seen += [it["sk"]["N"] for it in s["Items"]]
        token = s.get("NextToken")
        if not token:
            break
        assert pages < 20
    assert sorted(seen, key=int) == [str(i) for i in range(7)]
    assert pages == 3

    u = out(aws("update-item", "--table-name", t, "--key",
                json.dumps({"pk": {"S": "cli"}, "sk": {"N": "3"}}),
                "--update-expression", "SET v = :v ADD c :one",
                "--expression-attribute-values", json.dumps({":v": {"S": "new"}, ":one": {"N": "1"}}),
                "--return-values", "ALL_NEW"))
    assert u["Attributes"] == {"pk": {"S": "cli"}, "sk": {"N": "3"}, "v": {"S": "new"},
                               "c": {"N": "1"}}

    dl = out(aws("delete-item", "--table-name", t, "--key",
                 json.dumps({"pk": {"S": "cli"}, "sk": {"N": "3"}}), "--return-values", "ALL_OLD"))
    assert dl["Attributes"]["v"] == {"S": "new"}
    assert "Item" not in ddb.get_item(TableName=t, Key={"pk": {"S": "cli"}, "sk": {"N": "3"}})

    d = out(aws("delete-table", "--table-name", t))
    assert d["TableDescription"]["TableName"] == t


def test_cli_errors(cli_table):
    p = aws("describe-table", "--table-name", cli_table, check=False)
    assert p.returncode == 254
    assert re.search(r"An error occurred \(ResourceNotFoundException\) when calling the "
                     r"DescribeTable operation( \(reached max retries: 0\))?: Requested resource "
                     r"not found: Table: %s not found" % cli_table, p.stderr), p.stderr
    p = aws("put-item", "--table-name", cli_table, "--item", '{"pk": {"S": "x"}}', check=False)
    assert p.returncode == 254
    assert re.search(r"\(ResourceNotFoundException\) when calling the PutItem operation"
                     r"( \(reached max retries: 0\))?: Requested resource not found$",
                     p.stderr.strip()), p.stderr
