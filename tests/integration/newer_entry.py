#!/usr/bin/python3
"""A partition log entry of a newer binary is never skipped: the gate's last line
(cluster/partition_entry.h, Formats in cluster/meta.h).

Usage: newer_entry.py STRATAD STRATA
Three nodes (az1-az3) and a table with items. A test client speaks the peer protocol
(rpc/frame.h: a Hello, then requests) to the leader of one of the table's partitions, as
the router of a newer node would when it forwards a write (MSG_PART_WRITE).
 a) entries framed as no binary of this version frames them (a first byte kept for later
    formats, a no-op marker with a payload): the leader refuses them (ERR_NEWER) and
    appends nothing. A meta record of a format above the cluster's, proposed to the meta
    leader (MSG_META_PROPOSE), is refused the same way. Every node runs on and every item
    reads back strongly.
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
import struct
import sys

import meta_seats as S
import peer as P

AZS = ["az1", "az2", "az3"]
NODES = [1, 2, 3]

ERR_NEWER = P.strata_code("ERR_NEWER")
STOP_TEXT = "is a write command of a newer version: start this node with a binary of " \
            "the cluster's version or newer"


def log(*a):
    print(*a, flush=True)


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
    items = S.start_with_table(cl, NODES)
    pid, epoch, hash_lo, leader = a_partition(cl)
    log("partition %d (epoch %d, from hash %016x) led by node %d" % (pid, epoch, hash_lo, leader))
    peer = P.Peer(cl.pports[leader - 1])
    assert peer.greeted(), "no Hello from node %d" % leader

    log("a) entries of a newer framing: refused, nothing appended")
    for entry in (b"\xfdX", b"\xffN\x00", b"\xfe\x00\x01"):
        code, msg = P.error_of(peer.request(P.MSG_PART_WRITE, P.part_write(pid, epoch, entry)))
        assert code == ERR_NEWER, "entry %r: code %d (%s)" % (entry, code, msg)
        log("entry %r refused: %s" % (entry, msg))
    meta_leader = cl.admin(1)["meta_leader"]
    mpeer = P.Peer(cl.pports[meta_leader - 1])
    assert mpeer.greeted(), "no Hello from node %d" % meta_leader
    record = bytes([cl.admin(1)["meta_format"] + 1]) + b"\x01" * 16
    code, msg = P.error_of(mpeer.request(P.MSG_META_PROPOSE, record))
    assert code == ERR_NEWER, "meta record of a newer format: code %d (%s)" % (code, msg)
    log("meta record of format %d refused by the meta leader (node %d): %s" % (
        record[0], meta_leader, msg))
    mpeer.close()
    S.read_all(S.client(cl.cports[1]), items)
    assert all(cl.procs[n].poll() is None for n in NODES), "a node stopped"
    assert not any(cl.said(n, "cannot read") for n in NODES), "a replica met the entry"

    log("b) a write command with a field of a newer version: replicas that apply it stop")
    command = b"\x08\x01" + b"\x98\x06\x01"  # kind PUT, then field 99 (varint 1)
    peer.send_request(P.MSG_PART_WRITE,
                      P.part_write(pid, epoch, b"\xfe" + struct.pack(">Q", hash_lo) + command))
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
