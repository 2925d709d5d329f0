/*
 * Blocking HTTP/1.1 client for the CLI (see client.h). Sockets are non-blocking so that
 * every step (connect, send, receive) waits with poll() against one deadline.
 */
#include "node/cli/client.h"

#include <errno.h>
#include <http_parser.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "storage/base/buf.h"

static int copy_field(char *dst, size_t cap, const char *src, size_t len)
{
    if (len == 0 || len >= cap)
        return -1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

int cli_endpoint_parse(const char *url, cli_endpoint *ep, strata_err *err)
{
    memset(ep, 0, sizeof *ep);
    if (strncasecmp(url, "https://", 8) == 0)
        return strata_err_set(err, ERR_VALIDATION, "endpoint %s: https is not supported", url);
    if (strncasecmp(url, "http://", 7) != 0)
        return strata_err_set(err, ERR_VALIDATION, "endpoint %s: must start with http://", url);
    const char *p = url + 7;
    const char *slash = strchr(p, '/');
    const char *end = slash ? slash : p + strlen(p);
    const char *host = p, *host_end, *port = NULL;
    if (*p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(end - host));
        if (host_end == NULL)
            return strata_err_set(err, ERR_VALIDATION, "endpoint %s: unclosed [", url);
        if (host_end + 1 < end) {
            if (host_end[1] != ':')
                return strata_err_set(err, ERR_VALIDATION, "endpoint %s: bad port", url);
            port = host_end + 2;
        }
    } else {
        host_end = memchr(p, ':', (size_t)(end - p));
        if (host_end != NULL)
            port = host_end + 1;
        else
            host_end = end;
    }
    if (copy_field(ep->host, sizeof ep->host, host, (size_t)(host_end - host)) != 0)
        return strata_err_set(err, ERR_VALIDATION, "endpoint %s: bad host", url);
    if (port != NULL) {
        size_t n = (size_t)(end - port);
        if (n == 0 || n > 5 || strspn(port, "0123456789") < n)
            return strata_err_set(err, ERR_VALIDATION, "endpoint %s: bad port", url);
        long v = strtol(port, NULL, 10);
        if (v < 1 || v > 65535)
            return strata_err_set(err, ERR_VALIDATION, "endpoint %s: bad port", url);
        snprintf(ep->port, sizeof ep->port, "%ld", v);
    } else {
        snprintf(ep->port, sizeof ep->port, "80");
    }
    if (slash != NULL) {
        size_t n = strlen(slash);
        while (n > 0 && slash[n - 1] == '/')
            n--;
        if (n >= sizeof ep->base_path)
            return strata_err_set(err, ERR_VALIDATION, "endpoint %s: path too long", url);
        memcpy(ep->base_path, slash, n);
        ep->base_path[n] = '\0';
    }
    return 0;
}

int64_t cli_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - cli_mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, (int)left);
        if (n > 0)
            return 1;
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

static int connect_by_deadline(const cli_endpoint *ep, int64_t deadline, strata_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int rc = getaddrinfo(ep->host, ep->port, &hints, &res);
    if (rc != 0)
        return strata_err_set(err, ERR_UNAVAILABLE, "%s: %s", ep->host, gai_strerror(rc));
    int fd = -1;
    int last_errno = ECONNREFUSED;
    bool timed_out = false;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, deadline);
            int so_err = 0;
            socklen_t len = sizeof so_err;
            if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &len) == 0 && so_err == 0)
                break;
            if (w == 0)
                timed_out = true;
            last_errno = so_err ? so_err : errno;
        } else {
            last_errno = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (timed_out)
            return strata_err_set(err, ERR_UNAVAILABLE, "connect to %s:%s: timed out", ep->host,
                                  ep->port);
        return strata_err_set(err, ERR_UNAVAILABLE, "connect to %s:%s: %s", ep->host, ep->port,
                              strerror(last_errno));
    }
    return fd;
}

static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline, strata_err *err)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r == 0)
                return strata_err_set(err, ERR_UNAVAILABLE, "send: timed out");
            if (r < 0)
                return strata_err_set(err, ERR_IO, "send: %s", strerror(errno));
            continue;
        }
        return strata_err_set(err, ERR_IO, "send: %s", strerror(errno));
    }
    return 0;
}

typedef struct {
    buf body;
    bool complete;
    bool head; /* answering a HEAD: Content-Length but no body */
} parse_state;

static int on_headers_complete(http_parser *p)
{
    parse_state *st = p->data;
    return st->head ? 1 : 0; /* 1 tells http-parser there is no body */
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    parse_state *st = p->data;
    buf_append(&st->body, at, len);
    return st->body.failed ? -1 : 0;
}

static int on_message_complete(http_parser *p)
{
    parse_state *st = p->data;
    st->complete = true;
    return 0;
}

static int read_response(int fd, bool head, int64_t deadline, cli_response *out, strata_err *err)
{
    http_parser_settings settings;
    http_parser_settings_init(&settings);
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    settings.on_headers_complete = on_headers_complete;
    http_parser parser;
    http_parser_init(&parser, HTTP_RESPONSE);
    parse_state st = {.complete = false, .head = head};
    buf_init(&st.body, CLI_BODY_MAX);
    parser.data = &st;
    char chunk[16384];
    int rc = 0;
    while (!st.complete) {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wait_fd(fd, POLLIN, deadline);
            if (w == 0) {
                rc = strata_err_set(err, ERR_UNAVAILABLE, "no answer in time");
                break;
            }
            if (w < 0) {
                rc = strata_err_set(err, ERR_IO, "receive: %s", strerror(errno));
                break;
            }
            continue;
        }
        if (n < 0) {
            rc = strata_err_set(err, ERR_IO, "receive: %s", strerror(errno));
            break;
        }
        size_t used = http_parser_execute(&parser, &settings, chunk, (size_t)n);
        if (HTTP_PARSER_ERRNO(&parser) != HPE_OK || (n > 0 && used != (size_t)n && !st.complete)) {
            rc = strata_err_set(err, ERR_CORRUPT, "bad HTTP response: %s",
                                http_errno_description(HTTP_PARSER_ERRNO(&parser)));
            break;
        }
        if (n == 0 && !st.complete) {
            rc = strata_err_set(err, ERR_IO, "connection closed before the response ended");
            break;
        }
    }
    if (rc != 0) {
        buf_free(&st.body);
        return -1;
    }
    out->status = parser.status_code;
    buf_put_u8(&st.body, 0);
    if (st.body.failed) {
        buf_free(&st.body);
        return strata_err_set(err, ERR_NOMEM, "response body too large");
    }
    out->body_len = st.body.len - 1;
    out->body = (char *)buf_steal(&st.body, NULL);
    return 0;
}

int cli_http_request(const cli_endpoint *ep, const char *method, const char *path,
                     const http_header *headers, size_t nheaders, const void *body, size_t len,
                     int timeout_ms, cli_response *out, strata_err *err)
{
    memset(out, 0, sizeof *out);
    int64_t deadline = cli_mono_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
    buf req;
    buf_init(&req, 64 * 1024);
    bool v6 = strchr(ep->host, ':') != NULL;
    buf_printf(&req, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\n", method, ep->base_path,
               path[0] ? path : "/", v6 ? "[" : "", ep->host, v6 ? "]" : "", ep->port);
    for (size_t i = 0; i < nheaders; i++)
        buf_printf(&req, "%s: %s\r\n", headers[i].name, headers[i].value);
    buf_printf(&req, "User-Agent: strata-cli\r\nConnection: close\r\n");
    if (len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)
        buf_printf(&req, "Content-Length: %zu\r\n", len);
    buf_printf(&req, "\r\n");
    if (req.failed) {
        buf_free(&req);
        return strata_err_set(err, ERR_VALIDATION, "request head too large");
    }
    int fd = connect_by_deadline(ep, deadline, err);
    if (fd < 0) {
        buf_free(&req);
        return -1;
    }
    int rc = send_all(fd, req.data, req.len, deadline, err);
    buf_free(&req);
    if (rc == 0 && len > 0)
        rc = send_all(fd, body, len, deadline, err);
    if (rc == 0)
        rc = read_response(fd, strcmp(method, "HEAD") == 0, deadline, out, err);
    close(fd);
    return rc;
}

void cli_response_free(cli_response *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
}
