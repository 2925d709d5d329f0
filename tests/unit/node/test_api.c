/*
 * Unit tests of node/api and node/api_table: a real HTTP server, router, engine and log
 * (in a temporary directory) run on a loop thread; the test thread is a blocking HTTP
 * client that checks statuses, headers and DynamoDB's JSON shapes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/partition.h"
#include "cluster/router.h"
#include "node/api.h"
#include "node/api_internal.h"
#include "node/http/http.h"

/* ---- server on a loop thread ---- */

typedef struct {
    char dir[64];
    uv_loop_t loop;
    uv_async_t stop;
    router *r;
    api_server *api;
    http_server *http;
    int port;
    pthread_t thread;
} server;

static server srv;

static void on_stop(uv_async_t *h)
{
    (void)h;
    http_server_stop(srv.http, NULL, NULL);
    uv_close((uv_handle_t *)&srv.stop, NULL);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&srv.loop, UV_RUN_DEFAULT);
    return NULL;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int start_server(void **state)
{
    (void)state;
    strcpy(srv.dir, "/tmp/strata-api-XXXXXX");
    assert_non_null(mkdtemp(srv.dir));
    uv_loop_init(&srv.loop);
    strata_err err;
    router_config rc = {
        .loop = &srv.loop,
        .data_dir = srv.dir,
        .ops = {.apply = partition_apply},
        .wal_segment_size = 1 << 20,
    };
    srv.r = router_open(&rc, &err);
    if (srv.r == NULL)
        fail_msg("router_open: %s", err.msg);
    api_config ac = {.loop = &srv.loop, .router = srv.r, .initial_partitions = 3};
    srv.api = api_server_new(&ac, &err);
    assert_non_null(srv.api);
    http_server_options ho;
    http_server_options_default(&ho);
    ho.host = "127.0.0.1";
    ho.port = 0;
    ho.handler = api_handle;
    ho.handler_data = srv.api;
    if (http_server_start(&srv.loop, &ho, &srv.http, &err) < 0)
        fail_msg("http_server_start: %s", err.msg);
    srv.port = http_server_port(srv.http);
    api_server_set_endpoint(srv.api, "127.0.0.1:1234");
    uv_async_init(&srv.loop, &srv.stop, on_stop);
    assert_int_equal(pthread_create(&srv.thread, NULL, loop_main, NULL), 0);
    return 0;
}

static int stop_server(void **state)
{
    (void)state;
    uv_async_send(&srv.stop);
    pthread_join(srv.thread, NULL);
    router_close(srv.r);
    api_server_free(srv.api);
    uv_run(&srv.loop, UV_RUN_NOWAIT);
    uv_loop_close(&srv.loop);
    nftw(srv.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---- a blocking HTTP client ---- */

typedef struct {
    int status;
    char request_id[128];
    char crc[32];
    char content_type[64];
    char *body;
    size_t body_len;
    json_t *json;
} response;

static void response_free(response *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

static void header_value(const char *head, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    const char *p = strcasestr(head, name);
    if (p == NULL)
        return;
    p += strlen(name);
    while (*p == ' ' || *p == ':')
        p++;
    size_t n = strcspn(p, "\r\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* Sends one request on a fresh connection; extra_headers is "Name: value\r\n"... */
static void http_call_to(const char *method, const char *path, const char *extra_headers,
                         const char *body, response *out)
{
    memset(out, 0, sizeof *out);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    size_t blen = body ? strlen(body) : 0;
    char *req = NULL;
    int n = asprintf(&req,
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     method, path, extra_headers ? extra_headers : "", blen, body ? body : "");
    assert_true(n > 0);
    assert_int_equal(write(fd, req, (size_t)n), n);
    free(req);
    size_t cap = 1 << 16, len = 0;
    char *resp = malloc(cap);
    for (;;) {
        if (len + 1 >= cap)
            resp = realloc(resp, cap *= 2);
        ssize_t got = read(fd, resp + len, cap - len - 1);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    resp[len] = '\0';
    char *end = strstr(resp, "\r\n\r\n");
    assert_non_null(end);
    *end = '\0';
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d", &out->status), 1);
    header_value(resp, "\nx-amzn-RequestId", out->request_id, sizeof out->request_id);
    header_value(resp, "\nx-amz-crc32", out->crc, sizeof out->crc);
    header_value(resp, "\nContent-Type", out->content_type, sizeof out->content_type);
    out->body_len = len - (size_t)(end + 4 - resp);
    out->body = malloc(out->body_len + 1);
    memcpy(out->body, end + 4, out->body_len);
    out->body[out->body_len] = '\0';
    free(resp);
    out->json = json_loadb(out->body, out->body_len, 0, NULL);
    /* Every answer carries a request id and the CRC-32 of its body. */
    assert_true(strlen(out->request_id) > 0);
    char want[32];
    snprintf(want, sizeof want, "%u", http_crc32(out->body, out->body_len));
    assert_string_equal(out->crc, want);
}

static void http_call(const char *method, const char *extra_headers, const char *body,
                      response *out)
{
    http_call_to(method, "/", extra_headers, body, out);
}

#define AUTH                                                                                       \
    "X-Amz-Date: 20240101T000000Z\r\n"                                                             \
    "Authorization: AWS4-HMAC-SHA256 Credential=x/20240101/us-east-1/dynamodb/aws4_request, "      \
    "SignedHeaders=host, Signature=00\r\n"

/* A DynamoDB call with the usual headers. */
static void ddb(const char *op, const char *body, response *out)
{
    char headers[512];
    snprintf(
        headers, sizeof headers,
        "Content-Type: application/x-amz-json-1.0\r\nX-Amz-Target: DynamoDB_20120810.%s\r\n" AUTH,
        op);
    http_call("POST", headers, body, out);
}

static const char *jstr(json_t *o, const char *path)
{
    /* path: "a.b.c" through objects */
    char parts[256];
    snprintf(parts, sizeof parts, "%s", path);
    json_t *cur = o;
    for (char *tok = strtok(parts, "."); tok != NULL && cur != NULL; tok = strtok(NULL, "."))
        cur = json_object_get(cur, tok);
    return json_string_value(cur);
}

static void expect_error(response *r, int status, const char *type, const char *message)
{
    if (r->status != status)
        fail_msg("status %d, body %s", r->status, r->body);
    assert_non_null(r->json);
    const char *t = jstr(r->json, "__type");
    assert_non_null(t);
    assert_string_equal(t, type);
    if (message != NULL) {
        const char *m = jstr(r->json, "message");
        if (m == NULL || strcmp(m, message) != 0)
            fail_msg("message '%s', wanted '%s'", m ? m : "(none)", message);
    }
}

#define VALIDATION "com.amazon.coral.validate#ValidationException"
#define DDB(x)     "com.amazonaws.dynamodb.v20120810#" x

static void create(const char *name, response *r)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"TableName\":\"%s\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
             "\"AttributeType\":\"S\"},{\"AttributeName\":\"sk\",\"AttributeType\":\"N\"}],"
             "\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":\"HASH\"},{\"AttributeName\":"
             "\"sk\",\"KeyType\":\"RANGE\"}],\"ProvisionedThroughput\":{\"ReadCapacityUnits\":5,"
             "\"WriteCapacityUnits\":5}}",
             name);
    ddb("CreateTable", body, r);
}

/* ---- tests ---- */

static void test_health(void **state)
{
    (void)state;
    response r;
    http_call("GET", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    response_free(&r);
}

static void test_protocol_errors(void **state)
{
    (void)state;
    response r;
    http_call("POST", "Content-Type: application/x-amz-json-1.0\r\n" AUTH, "{}", &r);
    expect_error(&r, 400, "com.amazon.coral.service#UnknownOperationException", NULL);
    response_free(&r);
    ddb("NoSuchOperation", "{}", &r);
    expect_error(&r, 400, "com.amazon.coral.service#UnknownOperationException", NULL);
    response_free(&r);
    http_call("POST",
              "Content-Type: text/plain\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n" AUTH,
              "{}", &r);
    expect_error(&r, 400, "com.amazon.coral.service#UnknownOperationException", NULL);
    response_free(&r);
    ddb("ListTables", "{not json", &r);
    expect_error(&r, 400, "com.amazon.coral.service#SerializationException", NULL);
    response_free(&r);
    ddb("ListTables", "[1,2]", &r);
    expect_error(&r, 400, "com.amazon.coral.service#SerializationException", NULL);
    response_free(&r);
    ddb("ListTables", "", &r);
    expect_error(&r, 400, "com.amazon.coral.service#SerializationException", NULL);
    response_free(&r);
    http_call("POST",
              "Content-Type: application/x-amz-json-1.0\r\n"
              "X-Amz-Target: DynamoDB_20120810.ListTables\r\n",
              "{}", &r);
    expect_error(&r, 400, "com.amazon.coral.service#MissingAuthenticationTokenException",
                 "Request is missing Authentication Token");
    response_free(&r);
    /* The JSON syntax is checked before the operation, authentication after it. */
    ddb("NoSuchOperation", "{bad", &r);
    expect_error(&r, 400, "com.amazon.coral.service#SerializationException", NULL);
    response_free(&r);
    http_call("POST", "X-Amz-Target: DynamoDB_20120810.ListTables\r\n", NULL, &r);
    expect_error(&r, 400, "com.amazon.coral.service#MissingAuthenticationTokenException",
                 "Request is missing Authentication Token");
    response_free(&r);
    ddb("DescribeTable", "{\"TableName\": 5}", &r);
    expect_error(&r, 400, "com.amazon.coral.service#SerializationException", NULL);
    response_free(&r);
}

#define INCOMPLETE  "com.amazon.coral.service#IncompleteSignatureException"
#define REQUIRES(p) "Authorization header requires '" p "' parameter. "
#define REQUIRES_DATE                                                                              \
    "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "

/* ListTables with this Authorization header (and X-Amz-Date when `date`). */
static void call_with_auth(const char *auth, bool date, response *r)
{
    char headers[1024];
    snprintf(headers, sizeof headers,
             "Content-Type: application/x-amz-json-1.0\r\n"
             "X-Amz-Target: DynamoDB_20120810.ListTables\r\n%sAuthorization: %s\r\n",
             date ? "X-Amz-Date: 20240101T000000Z\r\n" : "", auth);
    http_call("POST", headers, "{}", r);
}

static void test_incomplete_signature(void **state)
{
    (void)state;
#define CRED "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/dynamodb/aws4_request"
    response r;
    /* The conformance suite's case: only the credential. */
    call_with_auth(CRED, true, &r);
    expect_error(&r, 400, INCOMPLETE,
                 REQUIRES("Signature") REQUIRES("SignedHeaders") "Authorization=" CRED);
    response_free(&r);
#undef CRED
    /* One parameter missing, in any position. */
    call_with_auth("AWS4-HMAC-SHA256 SignedHeaders=host, Signature=ab", true, &r);
    expect_error(&r, 400, INCOMPLETE,
                 REQUIRES("Credential") "Authorization=AWS4-HMAC-SHA256 SignedHeaders=host, "
                                        "Signature=ab");
    response_free(&r);
    call_with_auth("AWS4-HMAC-SHA256 Credential=a/b,Signature=ab", true, &r);
    expect_error(&r, 400, INCOMPLETE,
                 REQUIRES("SignedHeaders") "Authorization=AWS4-HMAC-SHA256 Credential=a/b,"
                                           "Signature=ab");
    response_free(&r);
    /* A name without '=' is not the parameter; names are case-sensitive. */
    call_with_auth("AWS4-HMAC-SHA256 Credential=a, SignedHeaders=h, Signature", true, &r);
    expect_error(&r, 400, INCOMPLETE, NULL);
    assert_non_null(strstr(jstr(r.json, "message"), REQUIRES("Signature")));
    response_free(&r);
    call_with_auth("AWS4-HMAC-SHA256 credential=a, signedheaders=h, signature=s", true, &r);
    expect_error(&r, 400, INCOMPLETE,
                 REQUIRES("Credential") REQUIRES("Signature")
                     REQUIRES("SignedHeaders") "Authorization=AWS4-HMAC-SHA256 credential=a, "
                                               "signedheaders=h, signature=s");
    response_free(&r);
    /* Not SigV4: another algorithm, a bearer token, the algorithm glued to a parameter. */
    call_with_auth("AWS AKID:c2lnbmF0dXJl", true, &r);
    expect_error(&r, 400, INCOMPLETE,
                 REQUIRES("Credential") REQUIRES("Signature")
                     REQUIRES("SignedHeaders") "Authorization=AWS AKID:c2lnbmF0dXJl");
    response_free(&r);
    call_with_auth("AWS4-HMAC-SHA512 Credential=a, SignedHeaders=h, Signature=s", true, &r);
    expect_error(&r, 400, INCOMPLETE, NULL);
    response_free(&r);
    call_with_auth("AWS4-HMAC-SHA256Credential=a, SignedHeaders=h, Signature=s", true, &r);
    expect_error(&r, 400, INCOMPLETE, NULL);
    response_free(&r);
    call_with_auth("Bearer abc", true, &r);
    expect_error(&r, 400, INCOMPLETE, NULL);
    response_free(&r);
    /* No X-Amz-Date nor Date. */
    call_with_auth("AWS4-HMAC-SHA256 Credential=a, SignedHeaders=h, Signature=s", false, &r);
    expect_error(&r, 400, INCOMPLETE,
                 REQUIRES_DATE "Authorization=AWS4-HMAC-SHA256 Credential=a, SignedHeaders=h, "
                               "Signature=s");
    response_free(&r);
    /* A Date header is enough, and any credentials in a well-formed header are accepted. */
    http_call("POST",
              "Content-Type: application/x-amz-json-1.0\r\n"
              "X-Amz-Target: DynamoDB_20120810.ListTables\r\n"
              "Date: Mon, 01 Jan 2024 00:00:00 GMT\r\n"
              "Authorization: AWS4-HMAC-SHA256 Credential=anyone/x, SignedHeaders=host;x, "
              "Signature=zz\r\n",
              "{}", &r);
    assert_int_equal(r.status, 200);
    response_free(&r);
    call_with_auth("AWS4-HMAC-SHA256\tCredential=k/d/r/s/aws4_request,SignedHeaders=host;"
                   "x-amz-date,Signature=0123",
                   true, &r);
    assert_int_equal(r.status, 200);
    response_free(&r);
    /* The operation is checked before authentication, authentication before the body. */
    http_call("POST",
              "X-Amz-Target: DynamoDB_20120810.NoSuch\r\nX-Amz-Date: 20240101T000000Z\r\n"
              "Authorization: Bearer x\r\n",
              "{}", &r);
    expect_error(&r, 400, "com.amazon.coral.service#UnknownOperationException", NULL);
    response_free(&r);
    http_call("POST",
              "X-Amz-Target: DynamoDB_20120810.ListTables\r\nX-Amz-Date: 20240101T000000Z\r\n"
              "Authorization: Bearer x\r\n",
              "[1]", &r);
    expect_error(&r, 400, INCOMPLETE, NULL);
    response_free(&r);
}

/* The check itself: bounded output, long headers cut short. */
/* POST /admin/split takes the split hash as 1-16 hex digits and nothing else (no sign,
 * no spaces: strtoull alone would take "-1" as the last hash). */
static void test_admin_split_hash(void **state)
{
    (void)state;
    static const char *const bad[] = {"-1", " 1", "+1", "", "x1", "11111111111111111"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"partition\":1,\"hash\":\"%s\"}", bad[i]);
        response r;
        http_call_to("POST", "/admin/split", "Content-Type: application/json\r\n", body, &r);
        expect_error(&r, 400, VALIDATION,
                     "expected {\"partition\": id, \"hash\": \"16 hex digits\" (optional)}");
        response_free(&r);
    }
}

static void test_check_authorization(void **state)
{
    (void)state;
    char msg[STRATA_ERR_MSG_MAX];
    assert_int_equal(api_check_authorization("AWS4-HMAC-SHA256 Credential=a, SignedHeaders=b, "
                                             "Signature=c",
                                             true, msg, sizeof msg),
                     0);
    assert_int_equal(api_check_authorization("AWS4-HMAC-SHA256", true, msg, sizeof msg), -1);
    assert_string_equal(msg, REQUIRES("Credential") REQUIRES("Signature")
                                 REQUIRES("SignedHeaders") "Authorization=AWS4-HMAC-SHA256");
    assert_int_equal(api_check_authorization("", false, msg, sizeof msg), -1);
    assert_string_equal(msg, REQUIRES("Credential") REQUIRES("Signature") REQUIRES("SignedHeaders")
                                 REQUIRES_DATE "Authorization=");
    assert_int_equal(api_check_authorization(" ,,  ,", true, msg, sizeof msg), -1);
    /* "==" and "=" tokens name nothing. */
    assert_int_equal(
        api_check_authorization("AWS4-HMAC-SHA256 = == =Signature", true, msg, sizeof msg), -1);
    /* Parameters repeated are still present. */
    assert_int_equal(api_check_authorization("AWS4-HMAC-SHA256 Signature=1 Signature=2 "
                                             "Credential= SignedHeaders=",
                                             true, msg, sizeof msg),
                     0);
    /* Long header: cut short, still terminated, within the buffer. */
    char big[4096];
    memset(big, 'A', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(api_check_authorization(big, true, msg, sizeof msg), -1);
    assert_int_equal(strlen(msg), sizeof msg - 1);
    char tiny[8];
    assert_int_equal(api_check_authorization(big, false, tiny, sizeof tiny), -1);
    assert_true(strlen(tiny) < sizeof tiny);
    /* Over HTTP a long header still answers a valid JSON error. */
    response r;
    char *hdr = malloc(3000);
    assert_non_null(hdr);
    memcpy(hdr, "AWS4-HMAC-SHA256 Credential=", 28);
    memset(hdr + 28, 'k', 2971 - 28);
    hdr[2971] = '\0';
    char headers[3200];
    snprintf(headers, sizeof headers,
             "X-Amz-Target: DynamoDB_20120810.ListTables\r\nX-Amz-Date: 20240101T000000Z\r\n"
             "Authorization: %s\r\n",
             hdr);
    free(hdr);
    http_call("POST", headers, "{}", &r);
    expect_error(&r, 400, INCOMPLETE, NULL);
    assert_true(strlen(jstr(r.json, "message")) < STRATA_ERR_MSG_MAX);
    response_free(&r);
}

static void test_request_ids_unique(void **state)
{
    (void)state;
    response a, b;
    ddb("ListTables", "{}", &a);
    ddb("ListTables", "{}", &b);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.content_type, "application/x-amz-json-1.0");
    assert_int_equal(strlen(a.request_id), 52);
    assert_string_not_equal(a.request_id, b.request_id);
    response_free(&a);
    response_free(&b);
}

static void test_create_describe(void **state)
{
    (void)state;
    response r;
    create("music", &r);
    if (r.status != 200)
        fail_msg("%s", r.body);
    json_t *d = json_object_get(r.json, "TableDescription");
    assert_non_null(d);
    assert_string_equal(jstr(d, "TableName"), "music");
    assert_string_equal(jstr(d, "TableStatus"), "ACTIVE");
    assert_string_equal(jstr(d, "TableArn"), "arn:aws:dynamodb:us-east-1:000000000000:table/music");
    assert_int_equal(strlen(jstr(d, "TableId")), 36);
    assert_true(json_is_number(json_object_get(d, "CreationDateTime")));
    assert_int_equal(json_integer_value(json_object_get(d, "ItemCount")), 0);
    assert_int_equal(json_integer_value(json_object_get(d, "TableSizeBytes")), 0);
    assert_string_equal(jstr(d, "BillingModeSummary.BillingMode"), "PROVISIONED");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "ProvisionedThroughput"),
                                                        "ReadCapacityUnits")),
                     5);
    assert_int_equal(json_array_size(json_object_get(d, "KeySchema")), 2);
    assert_int_equal(json_array_size(json_object_get(d, "AttributeDefinitions")), 2);
    assert_true(json_is_false(json_object_get(d, "DeletionProtectionEnabled")));
    response_free(&r);

    create("music", &r);
    expect_error(&r, 400, DDB("ResourceInUseException"), "Table already exists: music");
    response_free(&r);

    ddb("DescribeTable", "{\"TableName\":\"music\"}", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(r.json, "Table.TableStatus"), "ACTIVE");
    response_free(&r);

    ddb("DescribeTable", "{\"TableName\":\"nope\"}", &r);
    expect_error(&r, 400, DDB("ResourceNotFoundException"),
                 "Requested resource not found: Table: nope not found");
    response_free(&r);
    ddb("DescribeTimeToLive", "{\"TableName\":\"music\"}", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(r.json, "TimeToLiveDescription.TimeToLiveStatus"), "DISABLED");
    response_free(&r);
    ddb("DescribeTimeToLive", "{\"TableName\":\"nope\"}", &r);
    expect_error(&r, 400, DDB("ResourceNotFoundException"), NULL);
    response_free(&r);
}

static void test_create_validation(void **state)
{
    (void)state;
    response r;
    ddb("CreateTable", "{\"TableName\":\"ab\"}", &r);
    expect_error(&r, 400, VALIDATION,
                 "3 validation errors detected: Value null at 'attributeDefinitions' failed to "
                 "satisfy constraint: Member must not be null; Value 'ab' at 'tableName' failed "
                 "to satisfy constraint: Member must have length greater than or equal to 3; "
                 "Value null at 'keySchema' failed to satisfy constraint: Member must not be "
                 "null");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"t1\",\"AttributeDefinitions\":[{\"AttributeName\":\"x\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "1 validation error detected: Value 't1' at 'tableName' failed to satisfy "
                 "constraint: Member must have length greater than or equal to 3");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"x\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "One or more parameter values were invalid: Some index key attributes are not "
                 "defined in AttributeDefinitions. Keys: [pk], AttributeDefinitions: [x]");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"},{\"AttributeName\":\"x\",\"AttributeType\":\"S\"}],"
        "\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":\"HASH\"}],\"BillingMode\":"
        "\"PAY_PER_REQUEST\"}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "One or more parameter values were invalid: Number of attributes in KeySchema "
                 "does not exactly match number of attributes defined in AttributeDefinitions");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}],\"BillingMode\":\"PAY_PER_REQUEST\",\"ProvisionedThroughput\":{"
        "\"ReadCapacityUnits\":1,\"WriteCapacityUnits\":1}}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "One or more parameter values were invalid: Neither ReadCapacityUnits nor "
                 "WriteCapacityUnits can be specified when BillingMode is PAY_PER_REQUEST");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}]}",
        &r);
    expect_error(&r, 400, VALIDATION, "No provisioned throughput specified for the table");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"X\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"RANGE\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "1 validation error detected: Value 'X' at "
                 "'attributeDefinitions.1.member.attributeType' failed to satisfy constraint: "
                 "Member must satisfy enum value set: [B, N, S]");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"RANGE\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "Invalid KeySchema: The first KeySchemaElement is not a HASH key type");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}],\"BillingMode\":\"PAY_PER_REQUEST\",\"GlobalSecondaryIndexes\":[{"
        "\"IndexName\":\"g\"}]}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "One or more parameter values were invalid: GlobalSecondaryIndexes are not "
                 "supported yet");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}],\"ProvisionedThroughput\":{\"ReadCapacityUnits\":0,"
        "\"WriteCapacityUnits\":1}}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "1 validation error detected: Value '0' at "
                 "'provisionedThroughput.readCapacityUnits' failed to satisfy constraint: Member "
                 "must have value greater than or equal to 1");
    response_free(&r);
    /* Order: members in DynamoDB's order; pattern before length; write before read. */
    ddb("CreateTable",
        "{\"TableName\":\"a!\",\"AttributeDefinitions\":[],\"KeySchema\":[{\"AttributeName\":"
        "\"pk\",\"KeyType\":\"HASH\"}],\"ProvisionedThroughput\":{\"ReadCapacityUnits\":1,"
        "\"WriteCapacityUnits\":0}}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "3 validation errors detected: Value 'a!' at 'tableName' failed to satisfy "
                 "constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+; "
                 "Value 'a!' at 'tableName' failed to satisfy constraint: Member must have length "
                 "greater than or equal to 3; Value '0' at "
                 "'provisionedThroughput.writeCapacityUnits' failed to satisfy constraint: Member "
                 "must have value greater than or equal to 1");
    response_free(&r);
    ddb("CreateTable",
        "{\"TableName\":\"tbl\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"},{\"AttributeName\":\"sk\",\"KeyType\":\"RANGE\"}],\"BillingMode\":"
        "\"PAY_PER_REQUEST\"}",
        &r);
    expect_error(&r, 400, VALIDATION,
                 "Invalid KeySchema: Some index key attribute have no definition");
    response_free(&r);
    ddb("CreateTable", "{\"TableName\":\"bad name!\",\"AttributeDefinitions\":[],\"KeySchema\":[]}",
        &r);
    expect_error(&r, 400, VALIDATION, NULL);
    assert_non_null(strstr(jstr(r.json, "message"), "regular expression pattern"));
    response_free(&r);
}

static void test_list_tables(void **state)
{
    (void)state;
    response r;
    const char *names[] = {"lt-c", "lt-a", "lt-b", "lt-d"};
    for (int i = 0; i < 4; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"TableName\":\"%s\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
                 "\"AttributeType\":\"B\"}],\"KeySchema\":[{\"AttributeName\":\"pk\","
                 "\"KeyType\":\"HASH\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}",
                 names[i]);
        ddb("CreateTable", body, &r);
        assert_int_equal(r.status, 200);
        response_free(&r);
    }
    ddb("ListTables", "{\"ExclusiveStartTableName\":\"lt-\",\"Limit\":3}", &r);
    assert_int_equal(r.status, 200);
    json_t *names_out = json_object_get(r.json, "TableNames");
    assert_int_equal(json_array_size(names_out), 3);
    assert_string_equal(json_string_value(json_array_get(names_out, 0)), "lt-a");
    assert_string_equal(jstr(r.json, "LastEvaluatedTableName"), "lt-c");
    response_free(&r);
    ddb("ListTables", "{\"ExclusiveStartTableName\":\"lt-c\",\"Limit\":3}", &r);
    names_out = json_object_get(r.json, "TableNames");
    assert_string_equal(json_string_value(json_array_get(names_out, 0)), "lt-d");
    response_free(&r);
    ddb("ListTables", "{\"Limit\":0}", &r);
    expect_error(&r, 400, VALIDATION,
                 "1 validation error detected: Value '0' at 'limit' failed to satisfy "
                 "constraint: Member must have value greater than or equal to 1");
    response_free(&r);
    ddb("ListTables", "{\"Limit\":101}", &r);
    expect_error(&r, 400, VALIDATION, NULL);
    response_free(&r);
}

static void test_update_table(void **state)
{
    (void)state;
    response r;
    create("upd", &r);
    response_free(&r);
    ddb("UpdateTable", "{\"TableName\":\"upd\"}", &r);
    expect_error(&r, 400, VALIDATION,
                 "At least one of ProvisionedThroughput, BillingMode, UpdateStreamEnabled, "
                 "GlobalSecondaryIndexUpdates or SSESpecification or ReplicaUpdates is required");
    response_free(&r);
    ddb("UpdateTable",
        "{\"TableName\":\"upd\",\"ProvisionedThroughput\":{\"ReadCapacityUnits\":5,"
        "\"WriteCapacityUnits\":5}}",
        &r);
    expect_error(&r, 400, VALIDATION, NULL);
    assert_non_null(strstr(jstr(r.json, "message"), "will not change"));
    response_free(&r);
    ddb("UpdateTable",
        "{\"TableName\":\"upd\",\"ProvisionedThroughput\":{\"ReadCapacityUnits\":10,"
        "\"WriteCapacityUnits\":5}}",
        &r);
    assert_int_equal(r.status, 200);
    json_t *pt =
        json_object_get(json_object_get(r.json, "TableDescription"), "ProvisionedThroughput");
    assert_int_equal(json_integer_value(json_object_get(pt, "ReadCapacityUnits")), 10);
    assert_non_null(json_object_get(pt, "LastIncreaseDateTime"));
    response_free(&r);
    ddb("UpdateTable",
        "{\"TableName\":\"upd\",\"ProvisionedThroughput\":{\"ReadCapacityUnits\":3,"
        "\"WriteCapacityUnits\":5}}",
        &r);
    assert_int_equal(r.status, 200);
    pt = json_object_get(json_object_get(r.json, "TableDescription"), "ProvisionedThroughput");
    assert_int_equal(json_integer_value(json_object_get(pt, "NumberOfDecreasesToday")), 1);
    assert_non_null(json_object_get(pt, "LastDecreaseDateTime"));
    response_free(&r);
    ddb("UpdateTable", "{\"TableName\":\"upd\",\"BillingMode\":\"PAY_PER_REQUEST\"}", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(r.json, "TableDescription.BillingModeSummary.BillingMode"),
                        "PAY_PER_REQUEST");
    response_free(&r);
    ddb("UpdateTable", "{\"TableName\":\"upd\",\"BillingMode\":\"PROVISIONED\"}", &r);
    expect_error(&r, 400, VALIDATION,
                 "One or more parameter values were invalid: ProvisionedThroughput must be "
                 "specified when BillingMode is PROVISIONED");
    response_free(&r);
    ddb("UpdateTable", "{\"TableName\":\"nope\",\"BillingMode\":\"PROVISIONED\"}", &r);
    expect_error(&r, 400, DDB("ResourceNotFoundException"),
                 "Requested resource not found: Table: nope not found");
    response_free(&r);
    ddb("DescribeTable", "{\"TableName\":\"upd\"}", &r);
    assert_string_equal(jstr(r.json, "Table.BillingModeSummary.BillingMode"), "PAY_PER_REQUEST");
    response_free(&r);
}

static void test_tags(void **state)
{
    (void)state;
    response r;
    create("tagged", &r);
    response_free(&r);
    const char *arn = "arn:aws:dynamodb:us-east-1:000000000000:table/tagged";
    char body[512];
    snprintf(body, sizeof body,
             "{\"ResourceArn\":\"%s\",\"Tags\":[{\"Key\":\"b\",\"Value\":\"1\"},{\"Key\":\"a\","
             "\"Value\":\"2\"}]}",
             arn);
    ddb("TagResource", body, &r);
    assert_int_equal(r.status, 200);
    response_free(&r);
    snprintf(body, sizeof body, "{\"ResourceArn\":\"%s\"}", arn);
    ddb("ListTagsOfResource", body, &r);
    assert_int_equal(r.status, 200);
    json_t *tags = json_object_get(r.json, "Tags");
    assert_int_equal(json_array_size(tags), 2);
    assert_string_equal(jstr(json_array_get(tags, 0), "Key"), "a");
    response_free(&r);
    snprintf(body, sizeof body, "{\"ResourceArn\":\"%s\",\"TagKeys\":[\"a\"]}", arn);
    ddb("UntagResource", body, &r);
    assert_int_equal(r.status, 200);
    response_free(&r);
    snprintf(body, sizeof body, "{\"ResourceArn\":\"%s\"}", arn);
    ddb("ListTagsOfResource", body, &r);
    assert_int_equal(json_array_size(json_object_get(r.json, "Tags")), 1);
    response_free(&r);
    ddb("ListTagsOfResource",
        "{\"ResourceArn\":\"arn:aws:dynamodb:us-east-1:000000000000:table/none\"}", &r);
    expect_error(&r, 400, DDB("ResourceNotFoundException"), NULL);
    response_free(&r);
    ddb("ListTagsOfResource", "{\"ResourceArn\":\"garbage\"}", &r);
    expect_error(&r, 400, VALIDATION, NULL);
    response_free(&r);
}

static void test_delete_table(void **state)
{
    (void)state;
    response r;
    create("doomed", &r);
    response_free(&r);
    ddb("DeleteTable", "{\"TableName\":\"doomed\"}", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(r.json, "TableDescription.TableStatus"), "DELETING");
    response_free(&r);
    ddb("DescribeTable", "{\"TableName\":\"doomed\"}", &r);
    expect_error(&r, 400, DDB("ResourceNotFoundException"), NULL);
    response_free(&r);
    ddb("DeleteTable", "{\"TableName\":\"doomed\"}", &r);
    expect_error(&r, 400, DDB("ResourceNotFoundException"),
                 "Requested resource not found: Table: doomed not found");
    response_free(&r);
    create("doomed", &r);
    assert_int_equal(r.status, 200);
    response_free(&r);
}

/* Table changes are serialized: of several concurrent CreateTable calls for one name
 * exactly one succeeds, and every table gets its own id. */
static void test_concurrent_creates(void **state)
{
    (void)state;
    enum { N = 6 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
    }
    const char *body =
        "{\"TableName\":\"race\",\"AttributeDefinitions\":[{\"AttributeName\":\"pk\","
        "\"AttributeType\":\"S\"}],\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":"
        "\"HASH\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}";
    for (int i = 0; i < N; i++) {
        char *req = NULL;
        int n = asprintf(&req,
                         "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "X-Amz-Target: DynamoDB_20120810.CreateTable\r\n" AUTH
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
        assert_int_equal(write(fds[i], req, (size_t)n), n);
        free(req);
    }
    int ok = 0, in_use = 0;
    for (int i = 0; i < N; i++) {
        char resp[8192];
        size_t len = 0;
        ssize_t got;
        while ((got = read(fds[i], resp + len, sizeof resp - 1 - len)) > 0)
            len += (size_t)got;
        resp[len] = '\0';
        close(fds[i]);
        if (strncmp(resp, "HTTP/1.1 200", 12) == 0)
            ok++;
        else if (strstr(resp, "ResourceInUseException") != NULL)
            in_use++;
    }
    assert_int_equal(ok, 1);
    assert_int_equal(in_use, N - 1);
}

static void test_error_mapping(void **state)
{
    (void)state;
    assert_int_equal(api_error_status(ERR_VALIDATION), 400);
    assert_string_equal(api_error_type(ERR_VALIDATION), VALIDATION);
    assert_string_equal(api_error_type(ERR_SERIALIZATION),
                        "com.amazon.coral.service#SerializationException");
    assert_string_equal(api_error_type(ERR_MISSING_AUTH),
                        "com.amazon.coral.service#MissingAuthenticationTokenException");
    assert_string_equal(api_error_type(ERR_CONDITIONAL_CHECK),
                        DDB("ConditionalCheckFailedException"));
    assert_string_equal(api_error_type(ERR_THROUGHPUT_EXCEEDED),
                        DDB("ProvisionedThroughputExceededException"));
    assert_int_equal(api_error_status(ERR_CONDITIONAL_CHECK), 400);
    const strata_code internal[] = {ERR_INTERNAL, ERR_IO, ERR_CORRUPT, ERR_NOMEM, ERR_NOT_FOUND};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++) {
        assert_int_equal(api_error_status(internal[i]), 500);
        assert_string_equal(api_error_type(internal[i]), DDB("InternalServerError"));
    }
    assert_int_equal(api_error_status(ERR_UNAVAILABLE), 503);
    assert_int_equal(api_error_status(ERR_BUSY), 503);
}

static void test_verr_format(void **state)
{
    (void)state;
    api_verr v;
    strata_err err;
    api_verr_init(&v);
    assert_int_equal(api_verr_finish(&v, &err), 0);
    api_verr_add(&v, "x", "m", "Member must be good");
    assert_int_equal(api_verr_finish(&v, &err), -1);
    assert_int_equal(err.code, ERR_VALIDATION);
    assert_string_equal(err.msg, "1 validation error detected: Value 'x' at 'm' failed to "
                                 "satisfy constraint: Member must be good");
    api_verr_add(&v, NULL, "n", "Member must not be null");
    api_verr_finish(&v, &err);
    assert_string_equal(err.msg, "2 validation errors detected: Value 'x' at 'm' failed to "
                                 "satisfy constraint: Member must be good; Value null at 'n' "
                                 "failed to satisfy constraint: Member must not be null");
    /* More than API_VERR_MAX are counted, and the message stays bounded. */
    for (int i = 0; i < 20; i++)
        api_verr_add(&v, "a long value to fill the message buffer quickly", "member",
                     "Member must have length less than or equal to 3");
    api_verr_finish(&v, &err);
    assert_true(strncmp(err.msg, "22 validation errors detected: ", 31) == 0);
    json_t *j = json_integer(7);
    api_verr_init(&v);
    api_verr_add_json(&v, j, "limit", "c");
    json_decref(j);
    api_verr_finish(&v, &err);
    assert_non_null(strstr(err.msg, "Value '7' at 'limit'"));
}

static void test_misc(void **state)
{
    (void)state;
    response r;
    ddb("DescribeLimits", "{}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "TableMaxReadCapacityUnits")),
                     40000);
    response_free(&r);
    ddb("DescribeEndpoints", "{}", &r);
    assert_int_equal(r.status, 200);
    json_t *e = json_array_get(json_object_get(r.json, "Endpoints"), 0);
    assert_string_equal(jstr(e, "Address"), "127.0.0.1:1234");
    response_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_incomplete_signature),
        cmocka_unit_test(test_check_authorization),
        cmocka_unit_test(test_admin_split_hash),
        cmocka_unit_test(test_request_ids_unique),
        cmocka_unit_test(test_create_describe),
        cmocka_unit_test(test_create_validation),
        cmocka_unit_test(test_list_tables),
        cmocka_unit_test(test_update_table),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_delete_table),
        cmocka_unit_test(test_concurrent_creates),
        cmocka_unit_test(test_error_mapping),
        cmocka_unit_test(test_verr_format),
        cmocka_unit_test(test_misc),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
