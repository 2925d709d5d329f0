#!/usr/bin/python3
"""A partition log entry of a newer binary is never skipped: the gate's last line
(cluster/partition_entry.h, Formats in cluster/meta.h).

Usage: newer_entry.py STRATAD STRATA
Three nodes (az1-az3) and a table with items. A test client speaks the peer protocol
(rpc/frame.h: a Hello, then requests) to the leader of one of the table's partitions, as
the router of a newer node would when it forwards a write (MSG_PART_WRITE).
 a) entries framed as no binary of this version frames them (a first byte kept for later
    formats, a no-op marker with a payload): the leader refuses them (ERR_NEWER) and
    appends nothing; every node runs on and every item reads back strongly.
 b) a write command with a field this binary does not know (protobuf field 99), framed
    as today's: the leader cannot tell without decoding it and appends it. Each replica
    that applies it stops there rather than skip the field, and its node exits non-zero
    saying to start it with a binary of the cluster's version: the leader and at least
    one follower (a follower that never heard of the commit holds the entry unapplied).
 c) the stopped nodes restarted: a leader is elected, the same entry is applied again
    and stops at least two nodes again. A node left running has its replica applied
    below the entry, never past it: nothing skips it.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import os
import re
import socket
import struct
import sys

import xxhash

import meta_seats as S

AZS = ["az1", "az2", "az3"]
NODES = [1, 2, 3]

FRAME_MAGIC = 0x53545250
FRAME_HELLO, FRAME_REQUEST, FRAME_RESPONSE, FRAME_ERROR = 1, 3, 4, 5
MSG_PART_WRITE = 5


def strata_code(name):
    """The value of `name` in storage/base/err.h's strata_code (ERR_NONE = 0, then in
    order)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "storage",
                        "base", "err.h")
    with open(path) as f:
        text = f.read()
    body = text[text.index("typedef enum {"):text.index("} strata_code;")]
    names = re.findall(r"^\s+(ERR_\w+)", body, re.M)
    return names.index(name)


ERR_NEWER = strata_code("ERR_NEWER")
CLUSTER_ID = "strata"  # the cluster name when --cluster-name is not given
STOP_TEXT = "is a write command of a newer version: start this node with a binary of " \
            "the cluster's version or newer"


def log(*a):
    print(*a, flush=True)


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def frame(ftype, msg_type, corr, payload):
    head = struct.pack(">IBBHIQI", FRAME_MAGIC, 1, ftype, 0, msg_type, corr, len(payload))
    return head + struct.pack(">Q", xxhash.xxh3_64_intdigest(head + payload)) + payload


def read_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "the node closed the peer connection"
        data += chunk
    return data


def read_frame(s):
    head = read_exact(s, 32)
    magic, _, ftype, _, msg_type, corr, length, sum_ = struct.unpack(">IBBHIQIQ", head)
    payload = read_exact(s, length)
    assert magic == FRAME_MAGIC, "bad magic"
    assert sum_ == xxhash.xxh3_64_intdigest(head[:24] + payload), "bad checksum"
    return ftype, msg_type, corr, payload


class Peer:
    """A connection to a node's peer port that says it is node `me` of the cluster."""

    def __init__(self, pport, me=99):
        self.s = socket.create_connection(("127.0.0.1", pport), timeout=S.DEADLINE_S)
        hello = b"\x0a" + varint(len(CLUSTER_ID)) + CLUSTER_ID.encode() + b"\x10" + \
            varint(me) + b"\x18\x01"
        self.s.sendall(frame(FRAME_HELLO, 0, 0, hello))
        ftype = read_frame(self.s)[0]
        assert ftype == FRAME_HELLO, "no Hello back (frame type %d)" % ftype
        self.corr = 0

    def send_write(self, pid, epoch, entry):
        """Sends MSG_PART_WRITE of `entry` to partition pid."""
        self.corr += 1
        self.s.sendall(frame(FRAME_REQUEST, MSG_PART_WRITE, self.corr,
                             varint(pid) + varint(epoch) + entry))

    def write(self, pid, epoch, entry):
        """send_write, then its answer: (frame type, payload)."""
        self.send_write(pid, epoch, entry)
        while True:
            ftype, _, corr, payload = read_frame(self.s)
            if corr == self.corr and ftype in (FRAME_RESPONSE, FRAME_ERROR):
                return ftype, payload

    def close(self):
        self.s.close()


def a_partition(cl):
    """(id, epoch, hash_lo, leader) of a partition of S.TABLE, once node 1 sees its leader."""
    def find():
        a = cl.admin(1)
        for p in (a or {}).get("partitions", []):
            if p["table"] == S.TABLE and p["leader"] in NODES:
                return p["id"], p["epoch"], int(p["hash_lo"], 16), p["leader"]
        return None
    return S.poll(find, "a leader for a partition of %s" % S.TABLE)


def exited(cl, nids):
    """The nodes of `nids` whose process has exited (checked non-zero, and taken out of
    cl.procs)."""
    out = []
    for n in nids:
        p = cl.procs.get(n)
        if p is not None and p.poll() is not None:
            assert p.returncode != 0, "node %d exited with 0" % n
            log("node %d stopped with status %d" % (n, p.returncode))
            del cl.procs[n]
            out.append(n)
    return out


def stop_on_entry(cl, starts, enough):
    """Waits until `enough` of the running nodes exit, each saying STOP_TEXT as many
    times as it was started (`starts`: {node: starts}); the nodes that did."""
    gone = []
    S.poll(lambda: gone.extend(exited(cl, list(cl.procs))) or len(gone) >= enough,
           "%d nodes stop" % enough)
    for n in gone:
        S.poll(lambda: cl.said_count(n, STOP_TEXT) == starts[n],
               "node %d says %r %d times" % (n, STOP_TEXT, starts[n]))
    return gone


def entry_index(cl, nid):
    """The index of the entry node nid stopped at, from its log."""
    with open(os.path.join(cl.work, "n%d.log" % nid)) as f:
        return int(re.search(r"partition \d+ entry (\d+) is a write command", f.read()).group(1))


def unapplied(cl, pid, index):
    """Every node still running holds partition pid's replica applied below `index`."""
    for n in cl.procs:
        local = S.poll(lambda: next((p.get("local") for p in (cl.admin(n) or {}).get(
            "partitions", []) if p["id"] == pid), None), "node %d's replica of %d" % (n, pid))
        assert local["applied_index"] < index, "node %d applied past %d: %r" % (n, index, local)
        log("node %d runs on with partition %d applied to %d, below entry %d" % (
            n, pid, local["applied_index"], index))


def steps(cl, cli):
    for n in NODES:
        cl.start(n)
    S.poll(lambda: cl.ready(NODES), "nodes 1-3 ready")
    items = {"k%d" % i: "v%d" % i for i in range(S.ITEMS)}
    S.make_table(S.client(cl.cports[0]), S.TABLE, items)
    pid, epoch, hash_lo, leader = a_partition(cl)
    log("partition %d (epoch %d, from hash %016x) led by node %d" % (pid, epoch, hash_lo, leader))
    peer = Peer(cl.pports[leader - 1])

    log("a) entries of a newer framing: refused, nothing appended")
    for entry in (b"\xfdX", b"\xffN\x00", b"\xfe\x00\x01"):
        ftype, payload = peer.write(pid, epoch, entry)
        assert ftype == FRAME_ERROR, "entry %r was not refused" % entry
        code = struct.unpack(">I", payload[:4])[0]
        assert code == ERR_NEWER, "entry %r: code %d (%r)" % (entry, code, payload[4:])
        log("entry %r refused: %s" % (entry, payload[4:].decode()))
    S.read_all(S.client(cl.cports[1]), items)
    assert all(cl.procs[n].poll() is None for n in NODES), "a node stopped"
    assert not any(cl.said(n, "cannot read") for n in NODES), "a replica met the entry"

    log("b) a write command with a field of a newer version: replicas that apply it stop")
    command = b"\x08\x01" + b"\x98\x06\x01"  # kind PUT, then field 99 (varint 1)
    peer.send_write(pid, epoch, b"\xfe" + struct.pack(">Q", hash_lo) + command)
    peer.close()
    # The leader stops once the entry is committed, and so does every follower that hears
    # of the commit before the leader has gone: at least a majority. A follower that did
    # not hear of it holds the entry but cannot know it committed without a leader.
    # If only the leader stopped, the other two elect a leader, which holds the entry
    # (it was committed) and applies it: at least two nodes stop.
    starts = {n: 1 for n in NODES}
    gone = stop_on_entry(cl, starts, 2)
    index = entry_index(cl, gone[0])
    unapplied(cl, pid, index)

    log("c) the stopped nodes restarted: the entry stops them again, nothing skips it")
    for n in gone:
        cl.start(n)
        starts[n] += 1
    stop_on_entry(cl, starts, 2)
    unapplied(cl, pid, index)


def main():
    return S.run("newer_entry", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
