#!/usr/bin/python3
"""The meta group shrinks when a removed voter has nobody to take its seat, and grows back
when a node joins.

Usage: meta_shrink.py STRATAD STRATA
Nodes 1 (az1), 2 (az2) and 3 (az3) form the meta group; no table yet.
 a) `strata node drain 3` then `strata node remove 3`: no node outside the group can take
    node 3's seat, so draining keeps it; once node 3 is REMOVED the group shrinks to 1 and 2
    (the leader says so in its log), the remove returns once node 3 runs no replica, and
    node 3 stops.
 b) node 4 (az3) joins: it takes the seat the group is short of (1, 2, 4). Node 1 cannot
    write its cluster file meanwhile (a directory stands where its temporary file goes): it
    says so once, and once the way is clear it writes the file, with node 4, by itself.
 c) a table (three replicas in three AZs, node 4 holding the az3 ones) takes items through
    node 1, and they read back strongly through node 4.
 d) node 5 (az3) joins outside the group, and node 4 is drained: node 5 takes its seat and
    node 4 leaves the group, but cannot write its cluster file (a directory again), which
    so still says "meta joined". Killed (SIGKILL) before the way is clear, node 4 restarts
    on that file as a member with an empty replica: it must find its seat gone, leave the
    group again and say so in its file, while the group stays 1, 2, 5 and the items read
    back strongly through node 4.
After each step every live node shows the same seats and the members run the group.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import os
import signal
import sys

import meta_seats as S

AZS = ["az1", "az2", "az3", "az3", "az3"]


def log(*a):
    print(*a, flush=True)


def steps(cl, cli):
    for n in (1, 2, 3):
        cl.start(n)
    S.poll(lambda: S.settled(cl, [1, 2, 3], {1, 2, 3}), "seats recorded as 1, 2, 3")

    log("a) node 3 removed with nobody to take its seat: the group shrinks to 1, 2")
    S.strata(cli, cl, 1, "node", "drain", "3")
    out = S.strata(cli, cl, 1, "node", "remove", "3", "--wait", "60")
    assert "runs no replica" in out, out
    S.poll(lambda: S.settled(cl, [1, 2], {1, 2}), "seats 1, 2")
    shrank = "nobody can take its seat: the group shrinks"
    assert any(cl.said(n, shrank) for n in (1, 2, 3)), "no node said the group shrinks"
    cl.kill(3, signal.SIGTERM)

    log("b) node 4 joins and takes the seat the group is short of; node 1's cluster file "
        "cannot be written until later")
    blocker = os.path.join(cl.work, "d1", "cluster.tmp")
    os.mkdir(blocker)
    cl.start(4)
    S.poll(lambda: S.settled(cl, [1, 2, 4], {1, 2, 4}), "seats 1, 2, 4")
    S.poll(lambda: cl.said(1, "trying again every"), "node 1 says its cluster file lags")
    assert "4@" not in cl.cluster_file(1), cl.cluster_file(1)
    os.rmdir(blocker)
    S.poll(lambda: "4@" in cl.cluster_file(1), "node 1's cluster file names node 4")
    assert cl.said(1, "cluster file written again"), "node 1 did not say the file caught up"

    log("c) a table over nodes 1, 2 and 4")
    c1 = S.client(cl.cports[0])
    items = {"k%d" % i: "v%d" % i for i in range(S.ITEMS)}
    S.make_table(c1, S.TABLE, items)
    S.read_all(S.client(cl.cports[3]), items)
    parts = cl.admin(4)["partitions"]
    assert parts and all(sorted(p["members"]) == [1, 2, 4] for p in parts), parts

    log("d) node 4 leaves the group, cannot write its cluster file, is killed and restarts")
    cl.start(5)
    S.poll(lambda: cl.ready([5]), "node 5 ready")
    assert "meta joined" in cl.cluster_file(4), cl.cluster_file(4)
    blocker = os.path.join(cl.work, "d4", "cluster.tmp")
    os.mkdir(blocker)
    S.strata(cli, cl, 1, "node", "drain", "4")
    S.poll(lambda: S.settled(cl, [1, 2, 4, 5], {1, 2, 5}), "seats 1, 2, 5")
    S.poll(lambda: cl.said(4, "left the meta group"), "node 4 says it left the group")
    S.poll(lambda: cl.said(4, "trying again every"), "node 4 says its cluster file lags")
    assert "meta joined" in cl.cluster_file(4), cl.cluster_file(4)
    cl.kill(4)
    os.rmdir(blocker)
    before = cl.said_count(4, "left the meta group")
    cl.start(4)
    S.poll(lambda: cl.said_count(4, "left the meta group") > before, "node 4 leaves again")
    S.poll(lambda: "meta joined" not in cl.cluster_file(4), "node 4's file says it left")
    S.poll(lambda: S.settled(cl, [1, 2, 4, 5], {1, 2, 5}), "seats 1, 2, 5 after node 4's return")
    S.read_all(S.client(cl.cports[3]), items)


def main():
    return S.run("meta_shrink", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
