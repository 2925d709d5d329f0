#!/usr/bin/python3
"""Every meta voter drained at once: the group moves to the nodes that replace them.

Usage: meta_replace.py STRATAD STRATA
Six nodes: 1 (az1), 2 (az2) and 3 (az3) form the meta group; 4 (az1), 5 (az2) and 6
(az3) join outside it, as new machines brought in to replace the first three. A table
with items. Then:
 a) `strata node drain` 1, 2 and 3, one right after the other: the seats go to 4, 5 and 6,
    the meta leader (one of 1-3) handing its leadership over once a voter that stays has
    caught up, and the partitions' replicas move to 4-6. (Before, a meta leader whose own
    node was drained waited for a voter that stays to hand over to; with every voter
    drained there was none, so no seat ever moved, and stopping nodes 1-3 would have
    taken the cluster map with them.)
 b) `strata node remove` 1, 2 and 3 return once each runs no replica, and the three stop.
 c) through the new nodes only: a change of the map (TagResource through node 5), a new
    table (through node 6) with items, and every item of both tables reads back strongly
    through node 4.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import signal
import sys

import meta_seats as S

AZS = ["az1", "az2", "az3", "az1", "az2", "az3"]
OLD, NEW = [1, 2, 3], [4, 5, 6]


def log(*a):
    print(*a, flush=True)


def read_all(c, name, items):
    for k, v in items.items():
        got = c.get_item(TableName=name, Key={"pk": {"S": k}}, ConsistentRead=True)
        assert got.get("Item", {}).get("v", {}).get("S") == v, "%s %s: %r" % (name, k, got)


def steps(cl, cli):
    for n in OLD:
        cl.start(n)
    S.poll(lambda: cl.ready(OLD), "nodes 1-3 ready")
    for n in NEW:
        cl.start(n)
    S.poll(lambda: S.settled(cl, OLD + NEW, set(OLD)), "seats recorded as 1, 2, 3")
    items = {"k%d" % i: "v%d" % i for i in range(S.ITEMS)}
    arn = S.make_table(S.client(cl.cports[0]), S.TABLE, items)

    log("a) nodes 1, 2 and 3 drained at once: the seats go to 4, 5 and 6")
    for n in OLD:
        S.strata(cli, cl, 4, "node", "drain", str(n))
    S.poll(lambda: S.settled(cl, OLD + NEW, set(NEW)), "seats 4, 5, 6")
    S.poll(lambda: (lambda a: a is not None and not any(
        set(OLD) & set(p["members"]) for p in a["partitions"]))(cl.admin(4)),
        "nodes 1-3 drained of partition replicas", 120)
    handed = "this node gives its seat up"
    assert any(cl.said(n, handed) for n in OLD), "no drained meta leader handed over"

    log("b) nodes 1, 2 and 3 removed and stopped")
    for n in OLD:
        out = S.strata(cli, cl, 4, "node", "remove", str(n), "--wait", "120")
        assert "runs no replica" in out, out
    for n in OLD:
        cl.kill(n, signal.SIGTERM)

    log("c) the new nodes alone change the map, make a table and serve both")
    c4, c5, c6 = (S.client(cl.cports[n - 1]) for n in NEW)
    c5.tag_resource(ResourceArn=arn, Tags=[{"Key": "step", "Value": "c"}])
    S.poll(lambda: S.tags(c4, arn).get("step") == "c", "the tag seen through node 4", 10)
    more = {"m%d" % i: "w%d" % i for i in range(S.ITEMS)}
    S.make_table(c6, "after", more)
    read_all(c4, S.TABLE, items)
    read_all(c4, "after", more)
    S.poll(lambda: S.settled(cl, NEW, set(NEW)), "nodes 4-6 agree on the seats")


def main():
    return S.run("meta_replace", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
