#ifndef STRATA_RPC_RPC_H
#define STRATA_RPC_RPC_H
/*
 * Peer endpoint: moves opaque, typed messages between the nodes of one cluster over TCP,
 * on one libuv loop. rpc/ knows nothing of DynamoDB or Raft: a message is a 32-bit type
 * chosen by the caller plus bytes (frame format in rpc/frame.h).
 *
 * Connections. Each endpoint listens on one address and dials one outbound connection to
 * every peer added with rpc_add_peer. That connection carries everything this node sends
 * to the peer (messages of every group, requests) and the peer's responses to them. What
 * the peer sends to us arrives on the connection it dialled, and our responses go back on
 * it. Each side first sends a strata.Hello (cluster id, node id, protocol version); a
 * connection whose Hello names another cluster, another protocol version or (outbound)
 * another node than the one dialled is closed before any other frame is delivered.
 *
 * Authentication. With a peer secret (options.secrets) a connection also proves, both
 * ways, that the other side knows the same secret before anything else passes: each
 * Hello carries a fresh 32-byte random nonce, and each side then sends a PROOF frame,
 * HMAC-SHA256 keyed with the secret over a label of its role (dialler or acceptor), the
 * cluster id, both node ids and both nonces. A wrong proof, a Hello without a nonce (a
 * node with no secret) or a Hello with one while we have none closes the connection
 * (handshake_rejects; auth_failures for a wrong proof). The secret itself never crosses
 * the wire, a proof is worth nothing on another connection (fresh nonces) or in the other
 * direction (the role), and none is sent before the other side's Hello named this
 * cluster. It keeps out whoever can reach the peer port without the secret; it does not
 * encrypt nor guard against someone who can change traffic on the path (that needs TLS).
 * Without a secret anyone who names the cluster in a Hello is taken for a peer.
 *
 * Turning authentication on in a running cluster. With secrets.optional an endpoint that
 * has a secret also takes a peer that has none (its Hello carries no nonce): that
 * connection is set up without proofs and is not authenticated (rpc_stats.unauthenticated,
 * rpc_peer_stats.authenticated); its own Hello says so (Hello.auth_optional), so that a
 * node without a secret answers it instead of refusing. Two peers that both have a secret
 * still prove it, optional or not, and a wrong proof is still refused. So a cluster turns
 * authentication on node by node without a moment where two nodes refuse each other:
 * restart every node with the secret and `optional`, then every node without `optional`.
 * Optional keeps out nobody (a stranger just sends no nonce): it is for the changeover only.
 *
 * Replacing the secret. An endpoint holds one or two secrets: it proves with the first and
 * takes a proof made with either. So a cluster moves from secret A to B without a moment
 * where two of its nodes refuse each other, one node at a time at each step: {A, B}
 * everywhere, then {B, A}, then {B}. rpc_set_secrets changes them on a running endpoint
 * (for connections made from then on; those up stay up).
 *
 * Reconnect. A failed connect, a connect + handshake slower than connect_timeout_ms, a
 * corrupt frame or a closed socket closes the outbound connection; it is re-dialled after
 * a backoff that doubles from backoff_min_ms to backoff_max_ms, with jitter in
 * [backoff/2, backoff] drawn from a PRNG seeded with options.seed (deterministic tests).
 * A successful handshake resets the backoff.
 *
 * Ordering and delivery. Frames to one peer are written in the order they were queued.
 * Everything queued for a peer during one loop iteration goes out in one uv_write with
 * one buffer per frame. rpc_send is fire-and-forget: messages queued while the peer is
 * unreachable wait (within the queue bound) and go out after the next handshake; frames
 * already handed to a socket that then breaks are lost.
 *
 * Back-pressure. Bytes queued for a peer (waiting or being written) are bounded by
 * max_queued_bytes; rpc_send and rpc_call fail with ERR_BUSY rather than exceed it.
 *
 * Calls. rpc_call sends a request and runs its callback exactly once: with the response,
 * with the error the remote handler returned (its code and message), or with
 * ERR_UNAVAILABLE when the deadline passes, the connection the request was written on
 * breaks, the peer is removed, or the endpoint is closed. A response arriving after that
 * is dropped.
 *
 * Threading: not thread-safe; every function must be called on the loop's thread.
 * Callbacks run on the loop thread and may call any rpc_* function, rpc_close included.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "storage/base/err.h"

#define RPC_PROTOCOL_VERSION 1
#define RPC_CLUSTER_ID_MAX   128
#define RPC_HOST_MAX         64
#define RPC_SECRET_MIN       16 /* bytes of a peer secret */
#define RPC_SECRET_MAX       4096
#define RPC_SECRETS_MAX      2

/* The peer secrets (see Authentication): key[0] is the one this endpoint proves with; a
 * proof made with any of them is taken. count 0: no authentication. */
typedef struct {
    const uint8_t *key[RPC_SECRETS_MAX];
    size_t len[RPC_SECRETS_MAX]; /* each RPC_SECRET_MIN..RPC_SECRET_MAX */
    size_t count;
    bool optional; /* also take peers without a secret (see Turning authentication on) */
} rpc_secrets;
/* Peer ids from RPC_SEED_ID_MIN up name "seeds": addresses whose node id is not known
 * yet (a node joining a cluster knows only addresses). The handshake of a seed accepts
 * any node id of the same cluster, and everything on that connection stays under the
 * seed id. Real node ids must stay below it. */
#define RPC_SEED_ID_MIN ((UINT64_C(1) << 63) + 1)

typedef struct rpc rpc;
typedef struct rpc_responder rpc_responder;

typedef struct {
    uint64_t node_id;        /* this node; non-zero */
    const char *cluster_id;  /* non-empty, at most RPC_CLUSTER_ID_MAX bytes */
    const char *listen_host; /* numeric IPv4 or IPv6 address */
    int listen_port;         /* 0 picks a free port (see rpc_listen_port) */
    /* Limits; 0 selects the default. */
    size_t max_frame_bytes;      /* largest payload accepted or sent; default 16 MiB */
    size_t max_queued_bytes;     /* per peer and per inbound connection; default 64 MiB */
    uint32_t connect_timeout_ms; /* connect + handshake; default 2000 */
    /* Open inbound connections; further ones are accepted and closed at once, so that a
     * flood of connections to the peer port cannot take the node's file descriptors.
     * Default 256 (a peer keeps one open; more only while it reconnects). */
    uint32_t max_inbound;
    uint32_t backoff_min_ms;     /* default 50 */
    uint32_t backoff_max_ms;     /* default 5000 */
    uint64_t seed;               /* jitter PRNG seed */
    /* The cluster's peer secrets (see Authentication), copied; count 0: none. Every node
     * of the cluster needs one of them. */
    rpc_secrets secrets;
} rpc_options;

typedef struct {
    /* A fire-and-forget message from `peer`; `data` is valid during the call only. */
    void (*on_message)(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len);
    /* A request from `peer`. The handler must finish `r` exactly once, now or later,
     * with rpc_respond or rpc_respond_error. May be NULL: requests then get an
     * ERR_UNKNOWN_OPERATION error response. */
    void (*on_request)(void *ctx, uint64_t peer, uint32_t type, const uint8_t *data, size_t len,
                       rpc_responder *r);
    /* Optional: the outbound connection to `peer` finished its handshake (true) or
     * closed (false). Not called for rpc_remove_peer or rpc_close. */
    void (*on_peer_state)(void *ctx, uint64_t peer, bool connected);
    /* Optional: a connection's handshake was refused (handshake_rejects), in either
     * direction. `node`: the peer dialled, or the id the remote's Hello named (0 if none);
     * `addr`: the remote's address; `why`: the rule it broke. All valid during the call
     * only. For the operator's log: a node with the wrong secret says nothing else. */
    void (*on_reject)(void *ctx, uint64_t node, const char *addr, const char *why);
    void *ctx;
} rpc_handlers;

/* status 0: `data`/`len` is the response (valid during the call only), err is NULL.
 * status -1: err says why (the remote handler's error, or ERR_UNAVAILABLE). */
typedef void (*rpc_call_cb)(void *ctx, int status, const strata_err *err, const uint8_t *data,
                            size_t len);

/* Binds and listens. Returns NULL with ERR_VALIDATION for bad options, ERR_IO when the
 * address cannot be bound. */
rpc *rpc_open(uv_loop_t *loop, const rpc_options *opts, const rpc_handlers *handlers,
              strata_err *err);

/* Closes every connection and handle. Outstanding calls complete with ERR_UNAVAILABLE
 * before this returns; unanswered responders are released. The memory is freed once
 * the loop has run the close callbacks, so run the loop (e.g. uv_run DEFAULT) after. */
void rpc_close(rpc *r);

/* Replaces the peer secrets (copied) for the handshakes from now on. ERR_VALIDATION for
 * a bad length or count, to turn authentication on or off (count 0 against more, or the
 * other way round), or to change `optional`: connections up would keep what they were
 * set up with, so those changes take a restart (see Turning authentication on). */
int rpc_set_secrets(rpc *r, const rpc_secrets *s, strata_err *err);

/* The port actually bound (useful with listen_port 0). */
int rpc_listen_port(const rpc *r);

/* Adds a peer and starts dialling it. ERR_VALIDATION for a bad address, node id 0 or our
 * own id; ERR_RESOURCE_IN_USE if the node is already a peer. */
int rpc_add_peer(rpc *r, uint64_t node_id, const char *host, int port, strata_err *err);

/* Drops a peer: closes its connection, discards its queue, fails its calls with
 * ERR_UNAVAILABLE. ERR_NOT_FOUND if unknown. */
int rpc_remove_peer(rpc *r, uint64_t node_id, strata_err *err);

/* Queues a message. ERR_NOT_FOUND: unknown peer; ERR_VALIDATION: len over
 * max_frame_bytes; ERR_BUSY: the peer's queue bound would be exceeded. */
int rpc_send(rpc *r, uint64_t peer, uint32_t type, const void *data, size_t len, strata_err *err);

/* Sends a request; `cb` runs later (never inside rpc_call) unless rpc_call fails, in
 * which case it never runs. Same errors as rpc_send; deadline_ms must be > 0. */
int rpc_call(rpc *r, uint64_t peer, uint32_t type, const void *data, size_t len,
             uint32_t deadline_ms, rpc_call_cb cb, void *ctx, strata_err *err);

/* Finishes a request with a response; releases `resp`. If the requester's connection
 * is gone the response is dropped and this still returns 0. ERR_VALIDATION: len over
 * max_frame_bytes (an error response is sent instead); ERR_BUSY: that connection's
 * queue is full (the response is dropped and the caller times out). */
int rpc_respond(rpc_responder *resp, const void *data, size_t len, strata_err *err);

/* Finishes a request with an error (code and message reach the caller's callback). */
void rpc_respond_error(rpc_responder *resp, strata_code code, const char *msg);

/* The node that sent the request. */
uint64_t rpc_responder_peer(const rpc_responder *resp);

typedef struct {
    bool connected;       /* outbound handshake complete */
    uint64_t frames_sent; /* frames written to the socket (excluding Hello) */
    uint64_t bytes_sent;
    uint64_t frames_received; /* frames from this peer on any connection */
    uint64_t bytes_received;
    uint64_t writes;            /* uv_write calls: frames_sent / writes = batching */
    uint64_t queued_bytes;      /* now: waiting or being written */
    uint64_t busy_rejects;      /* rpc_send / rpc_call refused with ERR_BUSY */
    uint64_t connects;          /* completed outbound handshakes */
    uint64_t connect_failures;  /* failed or timed-out dials, lost connections */
    uint64_t handshake_rejects; /* Hello naming a foreign cluster/node/version, a
                                   failed proof */
    uint64_t auth_failures;     /* of those, a wrong proof of the peer secret */
    bool authenticated;         /* the outbound connection is up and proved the secret */
    uint64_t calls;             /* calls started */
    uint64_t call_timeouts;
    uint64_t call_failures; /* other failures (remote error, connection lost) */
} rpc_peer_stats;

/* ERR_NOT_FOUND if `peer` is unknown. */
int rpc_peer_stats_get(const rpc *r, uint64_t peer, rpc_peer_stats *out, strata_err *err);

typedef struct {
    uint64_t accepted;          /* inbound connections */
    uint64_t refused;           /* inbound connections closed at once: max_inbound open */
    uint64_t handshake_rejects; /* inbound Hello from a foreign cluster or bad version, a
                                   failed proof */
    uint64_t auth_failures;     /* of those, a wrong proof of the peer secret */
    uint64_t handshake_timeouts; /* inbound connections closed with no Hello in time */
    uint64_t corrupt_frames;    /* connections closed on a corrupt frame */
    size_t secrets;             /* peer secrets held now (0: no authentication; 2 while the
                                   cluster's secret is replaced) */
    bool secrets_optional;      /* peers without a secret are taken (secrets.optional) */
    size_t unauthenticated;     /* connections up (either way) set up without proofs */
} rpc_stats;

void rpc_stats_get(const rpc *r, rpc_stats *out);

#endif
