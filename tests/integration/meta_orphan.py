#!/usr/bin/python3
"""A meta member away while its whole group was replaced finds the new one on its return.

Usage: meta_orphan.py STRATAD STRATA
Seven nodes: 1 (az1), 2 (az2) and 3 (az3) form the meta group; 4 (az1), 5 (az2), 6 (az3)
and 7 (az2) join outside it. A table with items. Then:
 a) node 7 is drained (so that no partition loses two replicas below), then nodes 1 and
    7 are killed (SIGKILL); node 1 stays down past --replace-after: node 4 takes its seat.
 b) nodes 2 and 3 are drained (nodes 5 and 6 take their seats), removed and stopped: the
    group is now 4, 5 and 6, none of which node 1 knew as a member.
 c) node 1 restarts. Its log still gives the group as 1, 2 and 3, and 2 and 3 are gone
    for good: it hears from no leader, and none of the members it knows answers. It must
    ask the other nodes of its map, learn the new map, leave the group, and serve: every
    item reads back strongly through it, and a change of the map through it is made.
    (Before, such a node asked only the members it knew, for ever: it stayed out of date,
    never left the group, and every map change through it failed.)
    Node 7 restarts too: outside the group, it had asked only nodes 2 and 3 for the map,
    and must now find it the same way.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import signal
import sys

import meta_seats as S

AZS = ["az1", "az2", "az3", "az1", "az2", "az3", "az2"]


def log(*a):
    print(*a, flush=True)


def steps(cl, cli):
    for n in (1, 2, 3):
        cl.start(n)
    S.poll(lambda: cl.ready([1, 2, 3]), "nodes 1-3 ready")
    for n in (4, 5, 6, 7):
        cl.start(n)
    S.poll(lambda: S.settled(cl, range(1, 8), {1, 2, 3}), "seats recorded as 1, 2, 3")
    c4 = S.client(cl.cports[3])
    items = {"k%d" % i: "v%d" % i for i in range(S.ITEMS)}
    arn = S.make_table(c4, S.TABLE, items)

    log("a) nodes 1 and 7 killed, 1 down past replace-after: node 4 takes its seat")
    S.strata(cli, cl, 4, "node", "drain", "7")
    S.poll(lambda: not any(7 in p["members"] for p in cl.admin(4)["partitions"]),
           "node 7 holds no partition replica")
    cl.kill(1)
    cl.kill(7)
    S.poll(lambda: S.settled(cl, [2, 3, 4, 5, 6], {2, 3, 4}), "seats 2, 3, 4")

    log("b) nodes 2 and 3 drained, removed and stopped: the group is 4, 5, 6")
    S.strata(cli, cl, 4, "node", "drain", "2")
    S.strata(cli, cl, 4, "node", "drain", "3")
    S.poll(lambda: S.settled(cl, [2, 3, 4, 5, 6], {4, 5, 6}), "seats 4, 5, 6")
    S.poll(lambda: not any({1, 2, 3} & set(p["members"]) for p in cl.admin(4)["partitions"]),
           "nodes 1, 2 and 3 hold no partition replica")
    for n in (2, 3):
        out = S.strata(cli, cl, 4, "node", "remove", str(n), "--wait", "60")
        assert "runs no replica" in out, out
        cl.kill(n, signal.SIGTERM)
    c4.tag_resource(ResourceArn=arn, Tags=[{"Key": "step", "Value": "b"}])

    log("c) nodes 1 and 7 back: they find the new group through the other nodes")
    cl.start(1)
    cl.start(7)
    S.poll(lambda: S.settled(cl, [1, 4, 5, 6, 7], {4, 5, 6}),
           "nodes 1 and 7 back, 1 out of the group")
    assert cl.said(1, "left the meta group"), "node 1 never said it left"
    c1 = S.client(cl.cports[0])
    S.read_all(c1, items)
    assert S.tags(c1, arn).get("step") == "b", S.tags(c1, arn)
    c1.tag_resource(ResourceArn=arn, Tags=[{"Key": "step", "Value": "c"}])
    S.poll(lambda: S.tags(c4, arn).get("step") == "c", "node 1's tag seen through node 4", 10)
    c7 = S.client(cl.cports[6])
    S.read_all(c7, items)
    assert S.tags(c7, arn).get("step") == "c", S.tags(c7, arn)


def main():
    return S.run("meta_orphan", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
