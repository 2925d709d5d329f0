#!/usr/bin/python3
"""Rolling upgrades: the cluster's meta record format rises only once every node reads it,
and no binary older than it joins or comes back.

Usage: meta_format.py STRATAD STRATA
Node 3 starts as a node of an older version would: STRATA_TEST_META_FORMAT=1 makes it say
its binary reads meta records up to format 1 (this binary's is 2; see Formats in
cluster/meta.h). Nodes 1, 2 and 3 (az1, az2, az3) form the cluster.
 a) the cluster writes format 1 (GET /admin/cluster "meta_format" on every node), node 3's
    format is 1 and the others' 2; a table takes items through node 3 and they read back
    strongly through node 1.
 b) node 3 restarts as this version ("upgraded"): its NODE_FORMAT says 2, and the meta
    leader moves the cluster to format 2; every node sees it and says so in its log.
 c) node 4 (az3), of the older version, asks to join: refused, it stops with a non-zero
    status and says why. It never enters the map.
 d) node 2 restarts as the older version ("downgraded"): it stops with a non-zero status
    and says it cannot go back. Restarted as this version, it serves the items again.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import sys

import meta_seats as S

AZS = ["az1", "az2", "az3", "az3"]
OLD = {"STRATA_TEST_META_FORMAT": "1"}


def log(*a):
    print(*a, flush=True)


def formats(cl, nids):
    """{node: (cluster format, {node: format})} as each of `nids` sees it."""
    out = {}
    for n in nids:
        a = cl.admin(n)
        if a is None or "meta_format" not in a:
            return None
        out[n] = (a["meta_format"], {d["id"]: d["format"] for d in a["nodes"]})
    return out


def seen(cl, nids, cluster, nodes):
    """Every node of `nids` sees the cluster at format `cluster`, and nodes' formats as
    `nodes` ({id: format})."""
    f = formats(cl, nids)
    return f is not None and all(v == (cluster, nodes) for v in f.values())


def stops(cl, nid, text):
    """Node nid's process exits non-zero and its log says `text`."""
    p = cl.procs.pop(nid)
    rc = p.wait(timeout=S.DEADLINE_S)
    assert rc != 0, "node %d exited with 0" % nid
    S.poll(lambda: cl.said(nid, text), "node %d says %r" % (nid, text))
    log("node %d stopped with status %d" % (nid, rc))


def steps(cl, cli):
    cl.start(1)
    cl.start(2)
    cl.start(3, OLD)
    S.poll(lambda: cl.ready([1, 2, 3]), "nodes 1-3 ready")

    log("a) node 3 reads format 1: the cluster writes format 1")
    S.poll(lambda: seen(cl, [1, 2, 3], 1, {1: 2, 2: 2, 3: 1}), "format 1, node 3 at 1")
    c3 = S.client(cl.cports[2])
    items = {"k%d" % i: "v%d" % i for i in range(S.ITEMS)}
    S.make_table(c3, S.TABLE, items)
    S.read_all(S.client(cl.cports[0]), items)
    assert not any(cl.said(n, "writes it now") for n in (1, 2, 3)), "format moved too early"

    log("b) node 3 upgraded: the cluster moves to format 2")
    cl.kill(3)
    cl.start(3)
    S.poll(lambda: seen(cl, [1, 2, 3], 2, {1: 2, 2: 2, 3: 2}), "format 2 everywhere")
    for n in (1, 2, 3):
        assert cl.said(n, "every node reads meta format 2: the cluster writes it now"), n

    log("c) node 4, of the older version, asks to join: refused")
    cl.start(4, OLD)
    stops(cl, 4, "reads meta records up to format 1, and the cluster writes format 2")
    assert all(4 not in f[1] for f in formats(cl, [1, 2, 3]).values()), "node 4 in the map"

    log("d) node 2 downgraded: it stops; upgraded again, it serves")
    cl.kill(2)
    cl.start(2, OLD)
    stops(cl, 2, "a node cannot go back to an older version")
    cl.start(2)
    S.poll(lambda: cl.ready([1, 2, 3]), "nodes 1-3 ready again")
    S.poll(lambda: seen(cl, [1, 2, 3], 2, {1: 2, 2: 2, 3: 2}), "format 2 after node 2's return")
    S.read_all(S.client(cl.cports[1]), items)


def main():
    return S.run("meta_format", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
