#!/usr/bin/python3
"""A cluster with a peer secret (--peer-secret-file): its peer port lets in only those who
prove they know it.

Usage: peer_auth.py STRATAD STRATA
Nodes 1-3 (az1-az3) share a secret; a table with items. A test client of the peer protocol
(peer.py) against node 2's peer port:
 a) a good Hello without a nonce (a node with no secret): closed, counted as a rejected
    handshake and not as a failed proof.
 b) a made-up proof: closed, counted ("auth_failures").
 c) the right secret: the node's own proof checks out against the documented layout
    (rpc/rpc.c, proof_compute), ours is taken, and a request gets its answer.
 d) that proof again on a new connection with the same nonce of ours (a replay), and the
    node's own proof sent back to it (a reflection): both closed and counted; neither is
    good outside its connection and its direction. The five refusals make one log line;
    refused again until the next report, 10 s after it, the node logs how many it held
    back.
 e) node 4 (az1), started with another secret, joins through node 1: node 1 refuses its
    proofs, both log why, and node 4 stays out of the map; restarted with the cluster's
    secret it joins.
 f) a secret file its group or others may read: stratad refuses to start (exit 2).
 g) the cluster moves to a new secret without a restart, node by node in the three steps
    of rpc/rpc.h (each node's file rewritten, then SIGHUP): {old, new}, {new, old}, {new}.
    After each step node 2 proves with the first and takes a proof with either; in the
    middle of the second step node 3 is killed and restarted, its file one step behind,
    and rejoins; at the end node 1 is restarted, every one of its links made anew on the
    new secret alone, and a proof with the old one is refused.
 h) a SIGHUP while the file is bad (others may read it) keeps the secret in use.
Each node has its own copy of the file, as on machines of their own. Then every node
reads every item back strongly and a write through node 2 succeeds.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import os
import re
import signal
import subprocess
import sys

import meta_seats as S
import peer as P

AZS = ["az1", "az2", "az3", "az1"]
TARGET = 2
SECRET = b"the cluster's peer secret: 0123456789"
OTHER = b"another cluster's secret: 9876543210"
NEW = b"the cluster's next peer secret: 2468"


def log(*a):
    print(*a, flush=True)


def secret_file(cl, name, secret, mode=0o600, *more):
    """Writes file `name` in the work directory: `secret`, then `more`, a line each."""
    path = os.path.join(cl.work, name)
    with open(path, "wb") as f:
        f.write(b"".join(s + b"\n" for s in (secret,) + more))
    os.chmod(path, mode)
    return path


def node_file(cl, nid, *secrets, mode=0o600):
    return secret_file(cl, "secret-n%d" % nid, secrets[0], mode, *secrets[1:])


def rpc_stats(cl, nid=TARGET):
    return S.poll(lambda: (cl.admin(nid) or {}).get("rpc"), "node %d's rpc stats" % nid)


def counted(cl, before, rejects, auth, nid=TARGET):
    """Polls until node nid's handshake rejects and failed proofs grew by at least
    `rejects` and `auth` since `before`; then checks the failed proofs grew by exactly
    `auth` (nothing else hammers this node's port)."""
    after = S.poll(lambda: (lambda s: s["handshake_rejects"] >= before["handshake_rejects"] +
                            rejects and s["auth_failures"] >= before["auth_failures"] + auth
                            and s)(rpc_stats(cl, nid)), "rejects counted on node %d" % nid)
    assert after["auth_failures"] == before["auth_failures"] + auth, (before, after)
    return after


def open_handshake(cl, nonce):
    """Dials node TARGET saying a Hello with `nonce`; (connection, the node's id, its nonce,
    its proof)."""
    c = P.Peer(cl.pports[TARGET - 1], P.hello(nonce=nonce))
    f = c.read_frame()
    assert f is not None and f[0] == P.FRAME_HELLO, f
    h = P.parse_hello(f[3])
    assert len(h.get(4, b"")) == 32, "the node's Hello has no 32-byte nonce: %r" % h
    f = c.read_frame()
    assert f is not None and f[0] == P.FRAME_PROOF, f
    return c, h[2], h[4], f[3]


def a_to_d(cl):
    before = rpc_stats(cl)
    assert before["peer_secrets"] == 1, before

    c = P.Peer(cl.pports[TARGET - 1])
    assert c.closed(), "a Hello without a nonce was let in"
    c.close()
    before = counted(cl, before, 1, 0)
    log("a) a Hello without a nonce: closed, counted")

    nonce = os.urandom(32)
    c, node, theirs, _ = open_handshake(cl, nonce)
    c.send(P.frame(P.FRAME_PROOF, 0, 0, os.urandom(32)))
    assert c.closed(), "a made-up proof was taken"
    c.close()
    before = counted(cl, before, 1, 1)
    log("b) a made-up proof: closed, counted")

    c, node, theirs, their_proof = open_handshake(cl, nonce)
    assert node == TARGET, node
    want = P.proof(SECRET, "A", node, 99, nonce, theirs)
    assert their_proof == want, "the node's proof is not the documented one"
    ours = P.proof(SECRET, "D", 99, node, nonce, theirs)
    c.send(P.frame(P.FRAME_PROOF, 0, 0, ours))
    code, msg = P.error_of(c.request(999, b"x"))
    assert code == P.strata_code("ERR_UNKNOWN_OPERATION"), (code, msg)
    c.close()
    log("c) the right secret: the node's proof checks out, ours is taken, a request is "
        "answered (%s)" % msg)

    c, _, theirs2, their_proof2 = open_handshake(cl, nonce)
    assert theirs2 != theirs, "the node used a nonce twice"
    c.send(P.frame(P.FRAME_PROOF, 0, 0, ours))
    assert c.closed(), "a replayed proof was taken"
    c.close()
    c, _, _, their_proof3 = open_handshake(cl, os.urandom(32))
    c.send(P.frame(P.FRAME_PROOF, 0, 0, their_proof3))
    assert c.closed(), "the node's own proof was taken back"
    c.close()
    counted(cl, before, 2, 2)
    log("d) a replayed proof and a reflected one: closed, counted")
    # Five refused in about a second: the node logs the first and holds the rest back for
    # its next report (at most one every 10 s).
    lines = cl.said_count(TARGET, "peer connection with")
    assert 1 <= lines <= 2, "node %d logged %d refusals" % (TARGET, lines)
    log("   node %d logged %d line(s) of refusals for five" % (TARGET, lines))
    # Refused again until the next report (10 s after the first): it counts those held back.
    S.poll(lambda: refuse_once(cl) and held_back(cl) is not None, "the next refusal report",
           deadline_s=30, interval=0.5)
    assert held_back(cl) >= 3, held_back(cl)  # b) and d) at least, after the logged one
    log("   the next report counts the %d refusals held back since" % held_back(cl))


def refuse_once(cl):
    """A Hello without a nonce to node TARGET, refused."""
    c = P.Peer(cl.pports[TARGET - 1])
    assert c.closed(), "a Hello without a nonce was let in"
    c.close()
    return True


def held_back(cl):
    """N of the first "(and N more refused since the last report)" in node TARGET's log."""
    with open(os.path.join(cl.work, "n%d.log" % TARGET)) as f:
        m = re.search(r"\(and (\d+) more refused since the last report\)", f.read())
    return int(m.group(1)) if m else None


def node_handshake(cl, node_key, our_key):
    """A handshake with node TARGET: checks that it proves with `node_key`, proves `our_key`;
    whether the node took it (a request answered) or closed the connection."""
    nonce = os.urandom(32)
    c, node, theirs, their_proof = open_handshake(cl, nonce)
    assert their_proof == P.proof(node_key, "A", node, 99, nonce, theirs), \
        "node %d does not prove with %r" % (TARGET, node_key)
    c.send(P.frame(P.FRAME_PROOF, 0, 0, P.proof(our_key, "D", 99, node, nonce, theirs)))
    answer = c.request(999, b"x")
    c.close()
    return answer is not None


def hup(cl, nid, count):
    """SIGHUP to node nid; waits until it says it read `count` secrets again."""
    said = "SIGHUP: %d peer secret%s read again" % (count, "" if count == 1 else "s")
    before = cl.said_count(nid, said)
    cl.procs[nid].send_signal(signal.SIGHUP)
    S.poll(lambda: cl.said_count(nid, said) > before, "node %d read its secrets again" % nid)


def g_rotate(cl, items):
    steps = [(SECRET, NEW), (NEW, SECRET), (NEW,)]
    for k, secrets in enumerate(steps):
        for n in (1, 2, 3, 4):
            node_file(cl, n, *secrets)
            hup(cl, n, len(secrets))
            if k == 1 and n == 2:
                # Nodes 1 and 2 prove the new secret, 3 and 4 the old one: node 3, its file
                # still {old, new}, restarts and makes every link anew.
                cl.kill(3)
                cl.start(3, extra=["--peer-secret-file", node_file(cl, 3, *steps[0])])
                S.poll(lambda: cl.ready([3]), "node 3 ready again")
                S.read_all(S.client(cl.cports[2]), items)
                log("   node 3 restarted in the middle of step 2, a step behind: rejoins")
        held = rpc_stats(cl)["peer_secrets"]
        assert held == len(secrets), "step %d: node %d holds %d secrets" % (k + 1, TARGET, held)
        for key in (SECRET, NEW):
            took = node_handshake(cl, secrets[0], key)
            assert took == (key in secrets), "step %d: key %r taken: %s" % (k + 1, key, took)
        log("g) step %d (%d secret(s)): node 2 proves with the first, takes %s" % (
            k + 1, len(secrets), "either" if len(secrets) == 2 else "only it"))
    cl.kill(1)
    cl.start(1, extra=["--peer-secret-file", node_file(cl, 1, NEW)])
    S.poll(lambda: cl.ready([1]), "node 1 ready again")
    S.read_all(S.client(cl.cports[0]), items)
    log("   node 1 restarted on the new secret alone: every link made anew, it rejoins")


def h_bad_hup(cl):
    node_file(cl, TARGET, SECRET, mode=0o644)
    before = cl.said_count(TARGET, "peer secrets kept as they were")
    cl.procs[TARGET].send_signal(signal.SIGHUP)
    S.poll(lambda: cl.said_count(TARGET, "peer secrets kept as they were") > before,
           "node %d keeps its secrets" % TARGET)
    assert node_handshake(cl, NEW, NEW) and not node_handshake(cl, NEW, SECRET)
    log("h) a SIGHUP with a file others may read: the secret in use is kept")
    node_file(cl, TARGET, NEW)


def e_wrong_secret(cl, right, wrong):
    before = rpc_stats(cl, 1)
    cl.start(4, extra=["--peer-secret-file", wrong])
    counted_on_1 = S.poll(lambda: (lambda s: s["auth_failures"] >= before["auth_failures"] + 2
                                   and s)(rpc_stats(cl, 1)), "node 4's proofs refused by node 1")
    a1 = cl.admin(1)
    assert 4 not in [n["id"] for n in a1["nodes"]], "node 4 is in the map"
    assert not cl.ready([4]), "node 4 is ready"
    why = "refused: wrong proof of the peer secret"
    S.poll(lambda: cl.said(1, "node 4 at 127.0.0.1") and cl.said(1, why) and cl.said(4, why),
           "nodes 1 and 4 log the refusal")
    log("e) node 4 with another secret: %d proofs refused by node 1, not in the map" % (
        counted_on_1["auth_failures"] - before["auth_failures"]))
    cl.kill(4)
    cl.start(4, extra=["--peer-secret-file", right(4)])
    S.poll(lambda: cl.ready([4]), "node 4 ready with the cluster's secret")
    S.poll(lambda: 4 in [n["id"] for n in cl.admin(1)["nodes"]], "node 4 in node 1's map")
    log("   restarted with the cluster's secret: it joins")


def f_loose_file(cl):
    loose = secret_file(cl, "loose-secret", SECRET, 0o644)
    out = subprocess.run([cl.stratad, "--data-dir", os.path.join(cl.work, "loose"),
                          "--node-id", "9", "--az", "az1", "--peer-listen", "127.0.0.1:0",
                          "--peer-advertise", "127.0.0.1:1", "--bootstrap",
                          "--peer-secret-file", loose],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "chmod 600" in out.stderr, (out.returncode, out.stderr)
    log("f) a secret file others may read: %s" % out.stderr.strip().splitlines()[0])


def steps(cl, cli):
    def right(n):
        return node_file(cl, n, SECRET)
    wrong = secret_file(cl, "other-secret", OTHER)
    items = S.start_with_table(cl, [1, 2, 3], lambda n: ["--peer-secret-file", right(n)])
    for n in (1, 2, 3):
        S.read_all(S.client(cl.cports[n - 1]), items)
    log("nodes 1-3 formed a cluster with the secret; every item reads back through each")

    a_to_d(cl)
    e_wrong_secret(cl, right, wrong)
    f_loose_file(cl)
    g_rotate(cl, items)
    h_bad_hup(cl)

    S.serves_on(cl, [1, 2, 3, 4], items, TARGET)


def main():
    return S.run("peer_auth", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
