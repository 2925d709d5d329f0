#!/usr/bin/python3
"""Hostile traffic on a node's peer port: the node closes what is not its cluster's, answers
malformed requests with an error, bounds what it accepts, and the cluster serves on.

Usage: peer_hostile.py STRATAD STRATA
Three nodes (az1-az3) and a table with items; a test client of the peer protocol
(peer.py) against node 2's peer port:
 a) a Hello of another cluster, of another protocol version, of another frame version,
    a frame whose checksum does not match, a header that announces a payload over the
    16 MiB bound, and bytes that are no frame at all: each connection is closed, and the
    node counts the rejected Hellos and damaged frames (GET /admin/cluster "rpc").
 b) a connection that says nothing is closed within the handshake deadline (2 s), and
    counted ("handshake_timeouts").
 c) after a good Hello: a request of an unknown type, a partition write whose payload
    ends inside its varint, one for the meta group, and one for a partition that does
    not exist are answered with errors, each on the same connection; a valid request
    sent one byte at a time is answered too.
 d) a flood of connections that each say a good Hello, 40 over the 256 the node keeps
    open, held open: those over the bound are closed at once (counted as "refused"), and
    every item reads back through the node meanwhile (its peer links were made before).
Then node 2, which has no peer secret, gets SIGHUP and says it has nothing to read again;
every node still runs, every item reads back strongly through each node, and a write
through node 2 succeeds.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import signal
import socket
import struct
import sys

import meta_seats as S
import peer as P

AZS = ["az1", "az2", "az3"]
NODES = [1, 2, 3]
TARGET = 2
MAX_INBOUND = 256  # rpc/rpc.c DEFAULT_MAX_INBOUND
MAX_FRAME = 16 << 20  # rpc/rpc.h max_frame_bytes' default


def log(*a):
    print(*a, flush=True)


def rpc_stats(cl):
    return S.poll(lambda: (cl.admin(TARGET) or {}).get("rpc"), "node %d's rpc stats" % TARGET)


def closed_after(cl, what, data, greet=P.hello()):
    """Sends `data` after `greet` (None: no Hello) and checks the node closes the
    connection."""
    c = P.Peer(cl.pports[TARGET - 1], greet)
    c.send(data)
    assert c.closed(), what
    c.close()
    log("closed: " + what)


def a_rejects(cl):
    before = rpc_stats(cl)
    good = P.frame(P.FRAME_REQUEST, 999, 1, b"")
    closed_after(cl, "another cluster's Hello", b"", P.hello(cluster_id="other"))
    closed_after(cl, "another protocol version", b"", P.hello(protocol=2))
    closed_after(cl, "another frame version", P.frame(P.FRAME_HELLO, 0, 0, P.hello(), 2), None)
    bad_sum = bytearray(good)
    bad_sum[30] ^= 1
    closed_after(cl, "a checksum that does not match", bytes(bad_sum))
    huge = struct.pack(">IBBHIQI", P.FRAME_MAGIC, 1, P.FRAME_REQUEST, 0, 999, 1, MAX_FRAME + 1)
    closed_after(cl, "a payload over the bound", huge + bytes(8) + bytes(4096))
    closed_after(cl, "bytes that are no frame", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4, None)
    after = S.poll(lambda: (lambda s: s["handshake_rejects"] >= before["handshake_rejects"] + 2
                            and s["corrupt_frames"] >= before["corrupt_frames"] + 4 and s)(
                                rpc_stats(cl)), "the rejects counted")
    log("rpc stats before %r, after %r" % (before, after))


def b_silent(cl):
    before = rpc_stats(cl)
    c = P.Peer(cl.pports[TARGET - 1], None, timeout=10)
    assert c.closed(), "a silent connection stays open"
    c.close()
    S.poll(lambda: rpc_stats(cl)["handshake_timeouts"] >= before["handshake_timeouts"] + 1,
           "the silent connection counted")
    log("closed and counted: a connection that says nothing")


def c_errors(cl):
    c = P.Peer(cl.pports[TARGET - 1])
    assert c.greeted(), "no Hello back"
    unknown = P.error_of(c.request(999, b"x"))
    assert unknown[0] == P.strata_code("ERR_UNKNOWN_OPERATION"), unknown
    for what, payload in (("a payload that ends inside its varint", b"\x80"),
                          ("a write for the meta group", P.part_write(0, 1, b"\x08\x01")),
                          ("a write for no partition", P.part_write(1 << 40, 1, b"\x08\x01"))):
        answer = c.request(P.MSG_PART_WRITE, payload)
        assert answer is not None, "connection closed on " + what
        code, msg = P.error_of(answer)
        log("%s: error %d (%s)" % (what, code, msg))
    # A valid request, one byte at a time: the stream decoder puts it together.
    c.corr += 1
    for b in P.frame(P.FRAME_REQUEST, 999, c.corr, b"slow"):
        c.send(bytes([b]))
    f = c.read_frame()
    assert f is not None and f[2] == c.corr and f[0] == P.FRAME_ERROR, f
    log("a request sent a byte at a time: answered")
    c.close()


def d_flood(cl, items):
    """MAX_INBOUND + 40 connections that each say a good Hello, held open: the node keeps
    at most MAX_INBOUND inbound connections (its peers' among them) and closes the rest at
    once. Its own links were made before, so the cluster serves through the flood."""
    before = rpc_stats(cl)
    conns, greeted = [], 0
    for _ in range(MAX_INBOUND + 40):
        try:
            c = P.Peer(cl.pports[TARGET - 1], timeout=10)
        except (ConnectionResetError, BrokenPipeError):
            continue  # closed before its Hello went out: refused
        conns.append(c)
    for c in conns:
        try:
            greeted += c.greeted()
        except (ConnectionResetError, socket.timeout):
            pass
    after = rpc_stats(cl)
    log("flood of %d connections: %d greeted, %d refused" % (
        MAX_INBOUND + 40, greeted, after["refused"] - before["refused"]))
    assert greeted <= MAX_INBOUND, greeted
    assert after["refused"] - before["refused"] >= 40, (before, after)
    S.read_all(S.client(cl.cports[TARGET - 1]), items)
    log("every item reads back through node %d while the flood holds its slots" % TARGET)
    for c in conns:
        c.close()


def steps(cl, cli):
    items = S.start_with_table(cl, NODES)

    log("a) what is not this cluster's, or not a frame: closed")
    a_rejects(cl)
    log("b) a connection that says nothing: closed at the handshake deadline")
    b_silent(cl)
    log("c) malformed requests after a good Hello: errors, the connection stays")
    c_errors(cl)
    log("d) a flood of connections")
    d_flood(cl, items)

    # Without a secret there is nothing to read again: SIGHUP (whose default action would
    # end the process) is answered with a word, and the node serves on.
    cl.procs[TARGET].send_signal(signal.SIGHUP)
    S.poll(lambda: cl.said(TARGET, "SIGHUP: no peer secret file to read again"),
           "node %d answers SIGHUP" % TARGET)
    log("SIGHUP to node %d, which has no peer secret: said so, runs on" % TARGET)
    S.serves_on(cl, NODES, items, TARGET)


def main():
    return S.run("peer_hostile", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
