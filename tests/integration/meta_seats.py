#!/usr/bin/python3
"""The meta group's seats move: the cluster map outlives the nodes it formed on.

Usage: meta_seats.py STRATAD STRATA
Five nodes: 1 (az1), 2 (az2) and 3 (az3) form the meta group; 4 (az3) and 5 (az1) join
outside it. A table with items. Then:
 a) `strata node drain 3`: node 4 takes node 3's seat (a learner first, promoted once
    caught up; the AZ node 3 leaves), node 3 leaves the group; `strata node remove 3`
    returns once node 3 runs no replica, the meta group's included, and node 3 stops.
 b) node 2 is killed (SIGKILL): the group (1, 2, 4) still has a majority, so a change of
    the map (TagResource through node 5, outside the group) is made and seen through node
    1. With the seats fixed at formation (1, 2, 3), nodes 2 and 3 gone left one voter of
    three and the change could not be made.
 c) node 2 stays down past --replace-after (DOWN after 10 s, then 5 s): node 5 takes its
    seat. Node 2, restarted, still holds its old seat in its own log and hears from no
    leader: it fetches the map, finds its seat gone, the leader confirms that the
    configuration leaves it out, and it leaves the group; a change of the map through it
    is made.
 d) node 4, which joined the group after formation ("meta joined" in its cluster file),
    restarts and comes back as a member without bootstrapping a group of its own; a map
    change made while it was down reaches it.
 e) node 5 drained and activated again at once: whether its seat started to move or not,
    the group ends with three voters and no learner (a seat taken while the leaving voter
    came back leaves one voter too many, which is taken out).
 f) every node killed at once (SIGKILL) and restarted: the cluster comes back with the
    same seats (late members rejoin their group, none bootstraps one), every partition
    elects a leader, the tags and items are there. (Partitions that had moved, with
    nothing of them flushed by any engine, used to stay without a replica for good: each
    node took its own for an empty one, to be fed by the others.)
After each step every live node shows the same members (GET /admin/cluster "meta_group"),
the members run the group and the others do not, and every item reads back strongly.
Every wait polls a condition with a deadline. KEEP=1 keeps the nodes' logs.
"""
import os
import signal
import subprocess
import sys
import tempfile

import harness

TABLE = "seats"
ITEMS = 40
DEADLINE_S = 90
AZS = ["az1", "az2", "az3", "az3", "az1"]


def log(*a):
    print(*a, flush=True)


def poll(cond, what, deadline_s=DEADLINE_S, interval=0.2):
    return harness.poll(cond, what, deadline_s, interval)


def client(cport):
    return harness.client(cport, 6)


class Cluster:
    """Nodes 1..len(azs), node i in azs[i - 1]; node 1 bootstraps the cluster."""

    def __init__(self, stratad, work, azs=AZS):
        self.stratad, self.work, self.azs = stratad, work, azs
        ports = harness.free_ports(2 * len(azs))
        self.cports, self.pports = ports[0::2], ports[1::2]
        self.procs = {}
        self.logs = {}

    def start(self, nid, env=None, extra=()):
        """Starts node nid, with `env` (a dict) added to the environment and `extra` to its
        command line."""
        i = nid - 1
        cmd = harness.node_command(self.stratad, nid, self.azs[i], self.cports[i], self.pports[i],
                                   self.pports[0], os.path.join(self.work, "d%d" % nid),
                                   ["--initial-partitions", "4", "--replace-after", "5",
                                    "--throttle", "false"] + list(extra))
        f = self.logs.setdefault(nid, open(os.path.join(self.work, "n%d.log" % nid), "a"))
        self.procs[nid] = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL,
                                           env=dict(os.environ, **(env or {})))

    def kill(self, nid, sig=signal.SIGKILL):
        p = self.procs.pop(nid)
        p.send_signal(sig)
        p.wait(timeout=30)

    def admin(self, nid):
        return harness.admin(self.cports[nid - 1])

    def stop(self, ok):
        """Stops every node; the work directory goes when `ok` (and KEEP is not set)."""
        harness.stop_all(list(self.procs.values()), self.work, ok and not os.environ.get("KEEP"),
                         log)
        for f in self.logs.values():
            f.close()

    def ready(self, nids):
        return all((self.admin(n) or {}).get("ready") for n in nids)

    def said(self, nid, text):
        """Whether node nid's log has `text`."""
        return self.said_count(nid, text) > 0

    def said_count(self, nid, text):
        """How many times node nid's log (over all its starts) has `text`."""
        with open(os.path.join(self.work, "n%d.log" % nid)) as f:
            return f.read().count(text)

    def cluster_file(self, nid):
        """Node nid's cluster file, as text."""
        with open(os.path.join(self.work, "d%d" % nid, "cluster")) as f:
            return f.read()


def seats(a):
    """{node: role} of the meta group as one node's map has it."""
    return {m["node"]: m["role"] for m in a["meta_group"]["members"]}


def settled(cl, live, voters):
    """Every live node's map gives the seats to `voters` (no learner), members run the
    group, the others do not, and every live node is ready."""
    want = {v: "voter" for v in voters}
    for n in live:
        a = cl.admin(n)
        if a is None or not a["ready"] or seats(a) != want or a["meta_voter"] != (n in voters):
            return False
    return True


def all_led(cl, live):
    """Every partition of the map has a replica that says it leads, on some live node."""
    views = [cl.admin(n) for n in live]
    if any(v is None for v in views):
        return False
    led = {p["id"] for v in views for p in v["partitions"]
           if (p.get("local") or {}).get("state") == "leader"}
    return all(p["id"] in led for p in views[0]["partitions"])


def make_table(c, name, items):
    """Creates table `name` (hash key pk) through client c, waits until it is ACTIVE and
    puts `items` ({pk: v}); its ARN."""
    c.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    arn = poll(lambda: (lambda t: t["TableStatus"] == "ACTIVE" and t["TableArn"])(
        c.describe_table(TableName=name)["Table"]), "table %s ACTIVE" % name)
    for k, v in items.items():
        c.put_item(TableName=name, Item={"pk": {"S": k}, "v": {"S": v}})
    return arn


def start_with_table(cl, nids, extra=()):
    """Starts nodes `nids` (`extra` added to their command lines; a function of the node
    id gives each its own), waits until they are ready, and makes table TABLE with ITEMS
    items through the first; the items ({pk: v})."""
    for n in nids:
        cl.start(n, extra=extra(n) if callable(extra) else extra)
    poll(lambda: cl.ready(nids), "nodes %s ready" % nids)
    items = {"k%d" % i: "v%d" % i for i in range(ITEMS)}
    make_table(client(cl.cports[nids[0] - 1]), TABLE, items)
    return items


def serves_on(cl, nids, items, writer):
    """Nodes `nids` all run, each reads every item back strongly, and a write through node
    `writer` succeeds."""
    for n in nids:
        assert cl.procs[n].poll() is None, "node %d stopped" % n
        read_all(client(cl.cports[n - 1]), items)
    client(cl.cports[writer - 1]).put_item(TableName=TABLE,
                                           Item={"pk": {"S": "after"}, "v": {"S": "x"}})
    log("every item reads back through nodes %s; a write through node %d succeeds" % (
        list(nids), writer))


def read_all(c, items):
    for k, v in items.items():
        got = c.get_item(TableName=TABLE, Key={"pk": {"S": k}}, ConsistentRead=True)
        assert got.get("Item", {}).get("v", {}).get("S") == v, "item %s: %r" % (k, got)


def strata(cli, cl, nid, *args):
    out = subprocess.run([cli, "--endpoint", "127.0.0.1:%d" % cl.cports[nid - 1]] + list(args),
                         capture_output=True, text=True, timeout=120)
    log("strata %s: %s%s" % (" ".join(args), out.stdout.strip(), out.stderr.strip()))
    assert out.returncode == 0, "strata %s exited with %d" % (" ".join(args), out.returncode)
    return out.stdout


def tags(c, arn):
    return {t["Key"]: t["Value"] for t in c.list_tags_of_resource(ResourceArn=arn)["Tags"]}


def dump(cl):
    """What each live node says of the meta group and its partitions (on a failure)."""
    for n in sorted(cl.procs):
        a = cl.admin(n)
        if a is None:
            log("node %d: no answer" % n)
            continue
        log("node %d: ready %s, meta voter %s, leader %s, index %s, seats %s" % (
            n, a["ready"], a["meta_voter"], a["meta_leader"], a["meta_index"], seats(a)))
        for p in a["partitions"]:
            loc = p.get("local") or {}
            log("  p%d members %s leader hint %s: %s term %s commit %s applied %s last %s" % (
                p["id"], p["members"], p["leader"], loc.get("state"), loc.get("term"),
                loc.get("commit_index"), loc.get("applied_index"), loc.get("last_index")))


def run(name, azs, steps):
    """Runs steps(cl, cli) on a Cluster of `azs` in a new work directory (the script's
    arguments: STRATAD STRATA); on a failure what each node says, then the exception. Every
    node is stopped in the end. The script's exit status."""
    stratad, cli = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    cl = Cluster(stratad, tempfile.mkdtemp(prefix="strata-%s-" % name), azs)
    ok = False
    try:
        steps(cl, cli)
        ok = True
        log(name + ": PASS")
    except Exception:
        dump(cl)
        raise
    finally:
        cl.stop(ok)
    return 0 if ok else 1


def steps(cl, cli):
    for n in (1, 2, 3):
        cl.start(n)
    poll(lambda: cl.ready([1, 2, 3]), "nodes 1-3 ready")
    for n in (4, 5):
        cl.start(n)
    poll(lambda: settled(cl, [1, 2, 3, 4, 5], {1, 2, 3}), "seats recorded as 1, 2, 3")
    c1 = client(cl.cports[0])
    items = {"k%d" % i: "v%d" % i for i in range(ITEMS)}
    arn = make_table(c1, TABLE, items)

    log("a) drain node 3: node 4 takes its seat")
    strata(cli, cl, 1, "node", "drain", "3")
    poll(lambda: settled(cl, [1, 2, 3, 4, 5], {1, 2, 4}), "seats 1, 2, 4")
    poll(lambda: not any(3 in p["members"] for p in cl.admin(1)["partitions"]),
         "node 3 drained of partition replicas")
    out = strata(cli, cl, 1, "node", "remove", "3", "--wait", "60")
    assert "runs no replica" in out, out
    cl.kill(3, signal.SIGTERM)
    read_all(client(cl.cports[3]), items)

    log("b) node 2 killed: the group (1, 2, 4) still changes the map")
    cl.kill(2)
    c5 = client(cl.cports[4])
    c5.tag_resource(ResourceArn=arn, Tags=[{"Key": "step", "Value": "b"}])
    poll(lambda: tags(c1, arn).get("step") == "b", "the tag seen through node 1", 10)

    log("c) node 2 down past replace-after: node 5 takes its seat; node 2 comes back out")
    poll(lambda: settled(cl, [1, 4, 5], {1, 4, 5}), "seats 1, 4, 5")
    cl.start(2)
    poll(lambda: settled(cl, [1, 2, 4, 5], {1, 4, 5}), "node 2 back, out of the group")
    assert cl.said(2, "left the meta group"), "node 2 never said it left"
    c2 = client(cl.cports[1])
    read_all(c2, items)
    # Out of the group, node 2 sends its map changes to the group's leader (the one it
    # knew as a member may have been itself).
    c2.tag_resource(ResourceArn=arn, Tags=[{"Key": "step", "Value": "c"}])
    poll(lambda: tags(c1, arn).get("step") == "c", "node 2's tag seen through node 1", 10)

    log("d) node 4 (joined the group late) restarts as a member")
    assert "meta joined" in cl.cluster_file(4), "node 4's cluster file lacks 'meta joined'"
    cl.kill(4)
    c5.tag_resource(ResourceArn=arn, Tags=[{"Key": "step", "Value": "d"}])
    cl.start(4)
    poll(lambda: settled(cl, [1, 2, 4, 5], {1, 4, 5}), "node 4 back in the group")
    c4 = client(cl.cports[3])
    poll(lambda: tags(c4, arn).get("step") == "d", "the tag seen through node 4", 10)
    read_all(c4, items)
    assert not cl.said(4, "cluster formed"), "node 4 formed a cluster of its own"

    log("e) node 5 drained and at once activated again: three voters in the end")
    strata(cli, cl, 1, "node", "drain", "5")
    strata(cli, cl, 1, "node", "activate", "5")
    end = poll(lambda: (lambda a: a and a["ready"] and len(seats(a)) == 3 and
                        set(seats(a).values()) == {"voter"} and seats(a))(cl.admin(1)),
               "three voters, no learner")
    poll(lambda: settled(cl, [1, 2, 4, 5], set(end)), "every node agrees on %s" % end)
    log("seats after e): %s" % sorted(end))

    log("f) every node killed at once and restarted: the same seats, nothing lost")
    for n in (1, 2, 4, 5):
        cl.kill(n)
    for n in (1, 2, 4, 5):
        cl.start(n)
    poll(lambda: settled(cl, [1, 2, 4, 5], set(end)), "the cluster back with seats %s" % end)
    poll(lambda: all_led(cl, [1, 2, 4, 5]), "every partition led after the restart")
    c2 = client(cl.cports[1])
    assert tags(c2, arn).get("step") == "d", tags(c2, arn)
    read_all(c2, items)


def main():
    return run("meta_seats", AZS, steps)


if __name__ == "__main__":
    sys.exit(main())
