/*
 * nfq-delay: network delay and loss for kernels without the netem qdisc.
 *
 * iptables sends the packets to slow down to an NFQUEUE; this program receives each
 * queued packet's id and IPv4 header, finds the first rule whose source and destination
 * networks match, drops the packet with the rule's loss probability, and otherwise holds
 * the verdict until the rule's delay has passed, then issues ACCEPT. The kernel keeps the
 * packet itself while we wait: we only store (id, release time), copying at most the
 * IPv4 header out of the kernel.
 *
 *   nfq-delay --queue N [--max-pending N] --rule SRC/LEN,DST/LEN,DELAY_MS[,LOSS_PCT] ...
 *
 * The decisions (rules, loss, bounded FIFOs) are in delayq.h; this file is the netlink
 * loop. --max-pending bounds each rule's FIFO (default 4096). Packets matching no rule
 * are accepted at once. SIGTERM or SIGINT accepts everything still held and exits 0;
 * statistics go to stderr.
 *
 * Runs in one network namespace (a netlink queue belongs to the namespace that opened it).
 * iptables should use --queue-bypass so traffic still flows when this program is absent.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "deploy/nfq-delay/delayq.h"

#define DEFAULT_MAX_PENDING 4096

typedef struct {
    struct nfq_q_handle *queue;
    delayq q;
} delayer;

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die_usage(const char *why)
{
    fprintf(stderr,
            "nfq-delay: %s\n"
            "usage: nfq-delay --queue N [--max-pending N] "
            "--rule SRC/LEN,DST/LEN,DELAY_MS[,LOSS_PCT] ...\n",
            why);
    exit(2);
}

static void verdict(delayer *d, uint32_t id, uint32_t v)
{
    /* A failed verdict leaves the packet queued until the queue is destroyed, which
     * then drops it: nothing better to do than report it. */
    if (nfq_set_verdict(d->queue, id, v, 0, NULL) < 0)
        fprintf(stderr, "nfq-delay: verdict for packet %u failed: %s\n", id, strerror(errno));
}

static void accept_packet(void *ctx, uint32_t id)
{
    verdict(ctx, id, NF_ACCEPT);
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data)
{
    (void)qh;
    (void)msg;
    delayer *d = data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (ph == NULL)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    unsigned char *pkt = NULL;
    int len = nfq_get_payload(nfa, &pkt);
    switch (dq_classify(&d->q, id, pkt, len > 0 ? (size_t)len : 0, now_ns())) {
    case DQ_ACCEPT:
        verdict(d, id, NF_ACCEPT);
        break;
    case DQ_DROP:
        verdict(d, id, NF_DROP);
        break;
    case DQ_HELD:
        break;
    }
    return 0;
}

/* Reads every message waiting on the netlink socket; -1 on a fatal socket error. */
static int drain_socket(struct nfq_handle *h, int fd)
{
    static char buf[65536] __attribute__((aligned));
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            nfq_handle_packet(h, buf, (int)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (n < 0 && errno == ENOBUFS) /* the kernel dropped messages; carry on */
            continue;
        fprintf(stderr, "nfq-delay: recv: %s\n", n == 0 ? "socket closed" : strerror(errno));
        return -1;
    }
}

static void parse_args(int argc, char **argv, delayer *d, int *queue_num)
{
    long max_pending = DEFAULT_MAX_PENDING;
    strata_err err;
    *queue_num = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            die_usage("missing value");
        const char *v = argv[++i];
        char *end;
        if (strcmp(a, "--queue") == 0) {
            long q = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || q < 0 || q > 65535)
                die_usage("--queue wants 0..65535");
            *queue_num = (int)q;
        } else if (strcmp(a, "--max-pending") == 0) {
            max_pending = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || max_pending < 1 ||
                max_pending > (long)DQ_MAX_PENDING_CAP)
                die_usage("--max-pending wants 1..1048576");
        } else if (strcmp(a, "--rule") == 0) {
            dq_rule r;
            if (dq_parse_rule(v, &r, &err) < 0 || dq_add_rule(&d->q, &r, &err) < 0)
                die_usage(err.msg);
        } else {
            die_usage("unknown option");
        }
    }
    if (*queue_num < 0)
        die_usage("--queue is required");
    uint64_t seed = ((uint64_t)getpid() << 32) ^ now_ns();
    if (dq_init(&d->q, (uint32_t)max_pending, seed, &err) < 0) {
        fprintf(stderr, "nfq-delay: %s\n", err.msg);
        exit(1);
    }
}

static void print_stats(const delayq *q)
{
    for (int i = 0; i < q->nrules; i++) {
        const dq_rule *r = &q->rules[i];
        fprintf(stderr, "nfq-delay: rule %d: seen %llu delayed %llu lost %llu overflow %llu\n", i,
                (unsigned long long)r->seen, (unsigned long long)r->delayed,
                (unsigned long long)r->lost, (unsigned long long)r->overflow);
    }
    fprintf(stderr, "nfq-delay: unmatched %llu\n", (unsigned long long)q->unmatched);
}

int main(int argc, char **argv)
{
    static delayer d;
    int queue_num;
    parse_args(argc, argv, &d, &queue_num);

    /* Signals arrive only inside ppoll, so the stop flag is checked at one place. */
    sigset_t blocked, during_poll;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigprocmask(SIG_BLOCK, &blocked, &during_poll);
    sigdelset(&during_poll, SIGTERM);
    sigdelset(&during_poll, SIGINT);
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct nfq_handle *h = nfq_open();
    if (h == NULL) {
        fprintf(stderr, "nfq-delay: nfq_open: %s\n", strerror(errno));
        return 1;
    }
    d.queue = nfq_create_queue(h, (uint16_t)queue_num, on_packet, &d);
    if (d.queue == NULL) {
        fprintf(stderr, "nfq-delay: cannot bind queue %d: %s\n", queue_num, strerror(errno));
        nfq_close(h);
        return 1;
    }
    /* The IPv4 header is all we read; the kernel keeps the rest of the packet. The
     * kernel queue must fit everything we may hold, or it drops before we see it. */
    uint32_t kernel_max = (uint32_t)d.q.nrules * d.q.rules[0].cap + 1024;
    if (d.q.nrules == 0)
        kernel_max = 1024;
    if (nfq_set_mode(d.queue, NFQNL_COPY_PACKET, 64) < 0 ||
        nfq_set_queue_maxlen(d.queue, kernel_max) < 0) {
        fprintf(stderr, "nfq-delay: cannot configure queue %d\n", queue_num);
        nfq_destroy_queue(d.queue);
        nfq_close(h);
        return 1;
    }
    int fd = nfq_fd(h);
    int one = 1;
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
    int rcvbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);

    fprintf(stderr, "nfq-delay: queue %d, %d rules\n", queue_num, d.q.nrules);
    int rc = 0;
    while (!stop_requested) {
        uint64_t now = now_ns();
        uint64_t next = dq_release(&d.q, now, accept_packet, &d);
        struct timespec timeout, *tp = NULL;
        if (next != 0) {
            uint64_t wait = next > now ? next - now : 0;
            timeout.tv_sec = (time_t)(wait / 1000000000u);
            timeout.tv_nsec = (long)(wait % 1000000000u);
            tp = &timeout;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = ppoll(&pfd, 1, tp, &during_poll);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "nfq-delay: poll: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (n > 0 && drain_socket(h, fd) < 0) {
            rc = 1;
            break;
        }
    }
    /* Let everything still held through rather than dropping it on the way out. */
    dq_release(&d.q, UINT64_MAX, accept_packet, &d);
    print_stats(&d.q);
    nfq_destroy_queue(d.queue);
    nfq_close(h);
    dq_free(&d.q);
    return rc;
}
