#!/usr/bin/python3
"""Turning the peer secret on in a running cluster, one node restart at a time (rpc/rpc.h,
Turning authentication on), with no moment where two nodes refuse each other.

Usage: peer_auth_on.py STRATAD STRATA
Nodes 1-3 (az1-az3) start without a secret; a table with items.
 a) Round 1: each node in turn is stopped and started again with the secret and
    --peer-secret-optional true. It rejoins and serves while the others still have no
    secret: its links to them are up and not authenticated ("unauthenticated" in
    /admin/cluster, the link's "authenticated" false), and its Hello says it is optional.
    A SIGHUP reads node 1's secret again and leaves it optional.
    Links between two nodes that both have the secret are proved.
 b) After round 1 every link was made with the secret on both ends: none unauthenticated.
    But an optional node still lets in a stranger who sends no nonce (it answers a
    request): optional is for the changeover only.
 c) Round 2: each node in turn is started again without --peer-secret-optional. It rejoins;
    in the end every link is authenticated and the stranger is refused (counted).
After every restart each node reads every item back strongly and a write succeeds.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import os
import signal
import sys

import meta_seats as S
import peer as P

AZS = ["az1", "az2", "az3"]
SECRET = b"the cluster's peer secret, turned on: 0123"


def log(*a):
    print(*a, flush=True)


def rpc_stats(cl, nid):
    return S.poll(lambda: (cl.admin(nid) or {}).get("rpc"), "node %d's rpc stats" % nid)


def links(cl, nid):
    """{peer id: its link's "authenticated"} as node nid reports them."""
    a = S.poll(lambda: cl.admin(nid), "node %d's view" % nid)
    return {n["id"]: n["link"]["authenticated"] for n in a["nodes"] if "link" in n}


def restart(cl, nid, items, extra):
    """Stops node nid (SIGTERM: it hands its leaderships over), starts it with `extra`,
    waits until it is ready and every link of every node is up, then checks the cluster
    serves (through every node)."""
    cl.kill(nid, signal.SIGTERM)
    cl.start(nid, extra=extra)
    S.poll(lambda: cl.ready([1, 2, 3]), "node %d ready again" % nid)
    S.poll(lambda: all(all(x["connected"] for x in (cl.admin(n) or {"nodes": [{}]})["nodes"]
                           if x.get("id") != n) for n in (1, 2, 3)),
           "every node connected to every other")
    S.serves_on(cl, [1, 2, 3], items, nid)


def stranger(cl, nid):
    """A peer without the secret (its Hello has no nonce) asks node nid something; whether
    it got an answer."""
    c = P.Peer(cl.pports[nid - 1])
    try:
        f = c.read_frame()
        if f is None or f[0] != P.FRAME_HELLO:
            return False
        answer = c.request(999, b"x")
        if answer is None:
            return False
        code, _ = P.error_of(answer)
        return code == P.strata_code("ERR_UNKNOWN_OPERATION")
    except ConnectionResetError:
        return False
    finally:
        c.close()


def node_hello(cl, nid):
    """The Hello node nid sends to a peer that greets it with a nonce (fields by number)."""
    c = P.Peer(cl.pports[nid - 1], P.hello(nonce=os.urandom(32)))
    try:
        f = c.read_frame()
        assert f is not None and f[0] == P.FRAME_HELLO, f
        return P.parse_hello(f[3])
    finally:
        c.close()


def steps(cl, cli):
    items = S.start_with_table(cl, [1, 2, 3])
    log("nodes 1-3 formed a cluster without a secret")

    def secret(n):
        path = os.path.join(cl.work, "secret-n%d" % n)
        with open(path, "wb") as f:
            f.write(SECRET + b"\n")
        os.chmod(path, 0o600)
        return path

    for n in (1, 2, 3):
        restart(cl, n, items, ["--peer-secret-file", secret(n), "--peer-secret-optional", "true"])
        st = rpc_stats(cl, n)
        assert st["peer_secrets"] == 1 and st["peer_secret_optional"], st
        have = links(cl, n)
        # Nodes before it in the round have the secret: those links are proved.
        want = {m: m < n for m in (1, 2, 3) if m != n}
        assert have == want, "round 1, node %d: links %s, want %s" % (n, have, want)
        # Its connections both ways with each node without the secret (and none else).
        unproved = sum(1 for v in want.values() if not v)
        def counted():
            s = rpc_stats(cl, n)
            return s if s["unauthenticated"] >= 2 * unproved else None
        st = S.poll(counted, "node %d's unproved connections counted" % n)
        assert unproved or st["unauthenticated"] == 0, (n, st)
        assert cl.said(n, "peer secret optional: peers without it are taken too")
        if n == 1:
            assert rpc_stats(cl, 2)["peer_secrets"] == 0
            h = node_hello(cl, 1)
            assert len(h.get(4, b"")) == 32 and h.get(5) == 1, "node 1's Hello: %r" % h
            # SIGHUP reads the secret file again and keeps the node optional.
            cl.procs[1].send_signal(signal.SIGHUP)
            S.poll(lambda: cl.said(1, "SIGHUP: 1 peer secret read again"),
                   "node 1 read its secret again")
            assert not cl.said(1, "peer secrets kept as they were")
            assert rpc_stats(cl, 1)["peer_secret_optional"]
        log("a) node %d has the secret, optional: serves; links %s" % (n, have))

    for n in (1, 2, 3):
        assert rpc_stats(cl, n)["unauthenticated"] == 0
        assert all(links(cl, n).values()), links(cl, n)
    assert stranger(cl, 2), "an optional node refused a peer without a secret"
    log("b) every link proved; an optional node still answers a stranger without a nonce")

    for n in (1, 2, 3):
        restart(cl, n, items, ["--peer-secret-file", secret(n)])
        assert not rpc_stats(cl, n)["peer_secret_optional"]
        log("c) node %d requires the secret now" % n)
    for n in (1, 2, 3):
        assert rpc_stats(cl, n)["unauthenticated"] == 0
        assert all(links(cl, n).values()), links(cl, n)
    before = rpc_stats(cl, 2)["handshake_rejects"]
    assert not stranger(cl, 2), "a stranger without a nonce was let in"
    S.poll(lambda: rpc_stats(cl, 2)["handshake_rejects"] > before, "the stranger counted")
    log("   every link proved; a stranger without a nonce is refused")


def main():
    return S.run("peer_auth_on", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
