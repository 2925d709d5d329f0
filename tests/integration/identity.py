#!/usr/bin/python3
"""A member's id cannot be taken by another data directory.

Usage: identity.py STRATAD
A replica that lost its data but keeps its node id would vote in its Raft groups without
what it acknowledged, and could elect a leader that lacks committed writes. Every data
directory has an identity (node id and a random incarnation, file "node-identity", made at
its first start); a node registers with its incarnation, and a join under a member's id
from another directory is refused. Three stratad in cluster mode (cluster.py's Cluster), a
table with items, then:
 a) a second process given node 2's id, an empty directory and other ports, joining
    through node 1: it stops with exit status 1 and says why; node 1 logs the refusal;
    node 2 still serves (a write through it, read back strongly through node 1);
 b) node 3 stops (SIGTERM) and starts again on an empty directory (a replaced disk): it
    stops with exit status 1 and says why; that directory, which never joined, then
    starts under a new id (as the refusal advises);
 c) node 3's real directory started as node 4: refused at once ("belongs to node 3");
    with its identity file damaged, its cluster file damaged (started with --bootstrap) or
    unreadable, or without its log directory: refused at once too, naming the file;
 d) node 3 on its own directory again: it rejoins, catches up, and every item reads back
    strongly through it;
 e) node 1, which bootstrapped the cluster, restarted with the same command (--bootstrap)
    on an empty directory: the others' Raft messages tell it that a cluster exists, and it
    stops with exit status 1 instead of waiting to form a second one; on its own directory
    again it catches up;
 f) a damaged cluster file is written again from the cluster: node 3 (a meta voter,
    started with --join) restarts on a damaged one, says so, rewrites it from the join
    answer and catches up; the file reads at its next restart and says "meta joined" (its
    meta replica starts from its log, never from a bootstrap); that replica still votes
    (with node 2 stopped, a table is created through node 3). Node 1 with --bootstrap
    on a damaged file, then on none, is refused at once with the advice to use --join;
    with --join it rewrites its file, catches up, and restarts on it with --bootstrap.
"""
import os
import shutil
import subprocess
import sys

import cluster as C

ITEMS = 50
EXIT_DEADLINE_S = 60
MEMBER_MSG = "is a member of the cluster with another data directory"


def run_until_exit(cmd, log_path, what):
    """Runs cmd, which must exit with status 1 within the deadline; returns its output."""
    with open(log_path, "w") as logf:
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rc = p.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise C.Failure("%s still running after %d s" % (what, EXIT_DEADLINE_S))
    with open(log_path, errors="replace") as f:
        out = f.read()
    C.check(rc == 1, "%s exited with %d (want 1): %s" % (what, rc, out[-500:]))
    return out


def refused(cmd, log_path, what, says):
    """Runs cmd, which must exit with status 1 within the deadline and say `says`."""
    out = run_until_exit(cmd, log_path, what)
    C.check(says in out, "%s says why it stops: %s" % (what, out[-500:]))


def damage_after(path, marker, new, other):
    """Changes the character after `marker` in the file to `new` (`other` if it was
    `new` already): one character changed, which its checksum must catch."""
    with open(path, "rb") as f:
        text = bytearray(f.read())
    at = text.index(marker) + len(marker)
    text[at] = ord(new) if text[at] != ord(new) else ord(other)
    with open(path, "wb") as f:
        f.write(text)


def put_items(c, prefix, n):
    for i in range(n):
        c.put_item(TableName=C.TABLE, Item={"pk": {"S": "%s%d" % (prefix, i)},
                                            "v": {"S": "v%d" % i}})
    return {"%s%d" % (prefix, i): "v%d" % i for i in range(n)}


def part_a(cl, work, acked):
    n1, n2 = cl.node(1), cl.node(2)
    cport, pport = C.free_ports(2)
    d = os.path.join(work, "impostor")
    os.makedirs(d)
    cmd = [cl.stratad, "--node-id", "2", "--az", "az2", "--host-label", "h9",
           "--listen", "127.0.0.1:%d" % cport, "--peer-listen", "127.0.0.1:%d" % pport,
           "--data-dir", d, "--join", "127.0.0.1:%d" % n1.pport]
    out = run_until_exit(cmd, os.path.join(work, "impostor.log"), "a second node 2")
    C.check(MEMBER_MSG in out and "the cluster refused this node" in out,
            "the second node 2 says why it stops: %s" % out[-500:])
    C.check("refused a join as node 2" in C.log_since_start(n1), "node 1 logs the refusal")
    C.check(n2.alive() and (n2.admin() or {}).get("ready") is True, "node 2 still serves")
    acked.update(put_items(C.client(n2.url, True), "a", 5))
    C.read_back(cl, acked, [1])
    C.log("a) ok: a second process as node 2 was refused and stopped; node 2 serves")


def stop_and_empty(cl, node):
    """Stops `node` (SIGTERM) and puts an empty directory in place of its data directory,
    which is kept aside: returns (data, kept)."""
    problems = C.stop_all(cl, nodes=[node])
    C.check(not problems, "; ".join(problems))
    data = os.path.join(node.dir, "data")
    kept = data + ".saved"
    os.rename(data, kept)
    os.makedirs(data)
    return data, kept


def restore_and_rejoin(cl, node, data, kept, acked):
    """Puts `node`'s own data directory back, starts it, and checks that it catches up
    and reads back every acknowledged item."""
    shutil.rmtree(data)
    os.rename(kept, data)
    cl.start([node])
    C.poll(lambda: C.caught_up(cl, node.id), C.CATCHUP_DEADLINE_S,
           "node %d's replicas reach their leaders' commit_index" % node.id, 0.2)
    C.read_back(cl, acked, [node.id])


def part_bcd(cl, work, acked):
    n3 = cl.node(3)
    data, saved = stop_and_empty(cl, n3)
    out = run_until_exit(n3.command(), os.path.join(work, "wiped.log"),
                         "node 3 on an empty directory")
    C.check(MEMBER_MSG in out, "node 3 on an empty directory says why it stops: %s" % out[-500:])
    # That directory never joined a cluster: it may serve another id (as the refusal
    # advises), here one that asks a seed where nobody listens.
    cmd = n3.command()
    cmd[cmd.index("--node-id") + 1] = "5"
    cmd[cmd.index("--join") + 1] = "127.0.0.1:%d" % C.free_ports(1)[0]
    log_path = os.path.join(work, "renamed.log")
    with open(log_path, "w") as logf:
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def renamed():
        if p.poll() is not None:
            raise C.Failure("the refused directory as node 5 exited with %d" % p.returncode)
        with open(log_path, errors="replace") as f:
            out = f.read()
        return "it is node 5's now" in out and "serving on" in out
    C.poll(renamed, C.START_DEADLINE_S, "the refused directory serves as node 5")
    p.terminate()
    p.wait(timeout=60)
    C.log("b) ok: node 3 restarted on an empty directory was refused and stopped; that "
          "directory then started as node 5")

    cmd = [a if a != data else saved for a in n3.command()]
    cmd[cmd.index("--node-id") + 1] = "4"
    refused(cmd, os.path.join(work, "wrongid.log"), "node 3's directory as node 4",
            "belongs to node 3, not to node 4")
    C.log("c) ok: node 3's directory started as node 4 was refused")

    # Its identity file damaged (kept aside): refused at start, naming the file.
    ident, ident_saved = os.path.join(saved, "node-identity"), os.path.join(work, "n3-identity")
    shutil.copyfile(ident, ident_saved)
    damage_after(ident, b"incarnation ", "0", "1")  # one hex digit changed
    cmd = [a if a != data else saved for a in n3.command()]
    refused(cmd, os.path.join(work, "badident.log"), "node 3 with a damaged identity",
            "node-identity is damaged (checksum or format)")
    os.replace(ident_saved, ident)
    C.log("c) ok: node 3 with a damaged identity file was refused")
    refuse_bad_cluster_file(cmd, saved, work)

    # Its log directory gone (kept aside): refused at start as well.
    log_dir, log_saved = os.path.join(saved, "log"), os.path.join(work, "n3-log.saved")
    os.rename(log_dir, log_saved)
    refused(cmd, os.path.join(work, "nolog.log"), "node 3 without its log",
            "but its log directory is missing")
    os.rename(log_saved, log_dir)
    C.log("c) ok: node 3 without its log directory was refused")
    restore_and_rejoin(cl, n3, data, saved, acked)
    C.log("d) ok: node 3 on its own directory rejoined, caught up, %d items read back through it" %
          len(acked))


def refuse_bad_cluster_file(cmd, saved, work):
    """Node 3's cluster file (the meta members and other nodes it asks for the map at a
    restart) damaged, with --bootstrap instead of --join (nobody to ask for it again), then
    unreadable (a directory in its place): node 3 must stop and name the file, not start
    without knowing its cluster. The file is put back after."""
    path, kept = os.path.join(saved, "cluster"), os.path.join(work, "n3-cluster")
    shutil.copyfile(path, kept)
    damage_after(path, b"members ", "7", "8")  # a member's id changed
    at = cmd.index("--join")
    refused(cmd[:at] + ["--bootstrap"] + cmd[at + 2:], os.path.join(work, "badcluster.log"),
            "node 3 with a damaged cluster file and --bootstrap", "%s is damaged" % path)
    os.remove(path)
    os.mkdir(path)
    refused(cmd, os.path.join(work, "dircluster.log"),
            "node 3 with a directory for its cluster file", "cannot read %s" % path)
    os.rmdir(path)
    os.replace(kept, path)
    C.log("c) ok: node 3 with a damaged or unreadable cluster file was refused")


def part_e(cl, work, acked):
    """Node 1 bootstrapped the cluster; on an empty directory, with the same --bootstrap
    command, it must not wait to form a second cluster: the others' Raft messages tell it
    that one exists, and it stops."""
    n1 = cl.node(1)
    data, saved = stop_and_empty(cl, n1)
    out = run_until_exit(n1.command(), os.path.join(work, "bootstrap.log"),
                         "node 1 (--bootstrap) on an empty directory")
    C.check("sends Raft messages of an existing cluster" in out,
            "node 1 on an empty directory says why it stops: %s" % out[-500:])
    restore_and_rejoin(cl, n1, data, saved, acked)
    C.log("e) ok: node 1 (--bootstrap) on an empty directory stopped; on its own it caught up")


def members_line(path):
    with open(path) as f:
        return [line for line in f if line.startswith("members ")]


def rewritten(cl, node, path, members, acked):
    """`node`, started, wrote its cluster file again: it said so, the file names the same
    meta members, it catches up and reads back every acknowledged item, and on a restart
    with the same command it reads the file without complaint."""
    out = C.log_since_start(node)
    C.check("its cluster file is written again" in out,
            "node %d says it writes its cluster file again: %s" % (node.id, out[-800:]))
    C.check(members_line(path) == members, "node %d's file names the members %s, not %s" %
            (node.id, members, members_line(path)))
    C.poll(lambda: C.caught_up(cl, node.id), C.CATCHUP_DEADLINE_S,
           "node %d's replicas reach their leaders' commit_index" % node.id, 0.2)
    C.read_back(cl, acked, [node.id])
    problems = C.stop_all(cl, nodes=[node])
    C.check(not problems, "; ".join(problems))
    cl.start([node])
    out = C.log_since_start(node)
    C.check("damaged" not in out and "joined the cluster" not in out,
            "node %d restarts on its rewritten file: %s" % (node.id, out[-800:]))
    C.poll(lambda: C.caught_up(cl, node.id), C.CATCHUP_DEADLINE_S,
           "node %d's replicas reach their leaders' commit_index" % node.id, 0.2)


def meta_votes_without(cl, absent, via, name):
    """With node `absent` stopped, the meta group commits a new table through node `via`:
    that needs the vote of every other voter, so of `via`'s own meta replica."""
    gone = cl.node(absent)
    problems = C.stop_all(cl, nodes=[gone])
    C.check(not problems, "; ".join(problems))
    c = C.client(cl.node(via).url, True)
    c.create_table(TableName=name, AttributeDefinitions=[
        {"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST")
    C.poll(lambda: c.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE",
           C.START_DEADLINE_S, "table %s ACTIVE with node %d stopped" % (name, absent))
    cl.start([gone])


def part_f(cl, work, acked):
    n1, n3 = cl.node(1), cl.node(3)
    problems = C.stop_all(cl, nodes=[n3])
    C.check(not problems, "; ".join(problems))
    path3 = os.path.join(n3.dir, "data", "cluster")
    members = members_line(path3)
    damage_after(path3, b"members ", "7", "8")
    cl.start([n3])
    C.check("%s is damaged" % path3 in C.log_since_start(n3), "node 3 names its damaged file")
    rewritten(cl, n3, path3, members, acked)
    with open(path3) as f:
        C.check("meta joined\n" in f.read(),
                "node 3's rewritten file forbids its meta replica a bootstrap (\"meta joined\")")
    C.check((n3.admin() or {}).get("meta_voter") is True, "node 3 is still a meta voter")
    meta_votes_without(cl, 2, 3, "after_rewrite")
    C.log("f) ok: node 3 on a damaged cluster file wrote it again from the cluster, caught "
          "up and still votes in the meta group")

    problems = C.stop_all(cl, nodes=[n1])
    C.check(not problems, "; ".join(problems))
    path1 = os.path.join(n1.dir, "data", "cluster")
    members = members_line(path1)
    damage_after(path1, b"members ", "7", "8")
    refused(n1.command(), os.path.join(work, "bootstrap-damaged.log"),
            "node 1 (--bootstrap) on a damaged cluster file", "instead of --bootstrap")
    os.remove(path1)
    refused(n1.command(), os.path.join(work, "bootstrap-nofile.log"),
            "node 1 (--bootstrap) without its cluster file",
            "has no cluster file, but its log holds meta group state")
    at = n1.command().index("--bootstrap")
    join = n1.command()[:at] + ["--join", "127.0.0.1:%d" % cl.node(2).pport]
    n1.command = lambda: join
    try:
        cl.start([n1])
    finally:
        del n1.command  # back to its --bootstrap command
    out = C.log_since_start(n1)
    C.check("joined the cluster (3 meta voters, this node among them)" in out,
            "node 1 with --join rejoins as a meta voter: %s" % out[-800:])
    acked.update(put_items(C.client(n1.url, True), "f", 5))
    # Without a damaged file to rewrite, the join answer writes the file as at a first join.
    with open(path1) as f:
        C.check(f.read().count("members ") == 1, "node 1's cluster file is written")
    C.check(members_line(path1) == members, "node 1's file names the members %s" % members)
    C.read_back(cl, acked, [1])
    # Its usual command again: with its file back, --bootstrap is a restart.
    problems = C.stop_all(cl, nodes=[n1])
    C.check(not problems, "; ".join(problems))
    cl.start([n1])
    C.poll(lambda: C.caught_up(cl, 1), C.CATCHUP_DEADLINE_S,
           "node 1's replicas reach their leaders' commit_index", 0.2)
    C.read_back(cl, acked, [1])
    C.log("f) ok: node 1 (--bootstrap) on a damaged or missing cluster file was refused at "
          "once; with --join it wrote the file again and caught up; with --bootstrap again "
          "it restarted on that file")


def main():
    def body(cl):
        cl.start()
        C.create_table(C.client(cl.node(1).url, True), cl)
        acked = put_items(C.client(cl.node(1).url, True), "k", ITEMS)
        part_a(cl, cl.work, acked)
        part_bcd(cl, cl.work, acked)
        part_e(cl, cl.work, acked)
        part_f(cl, cl.work, acked)
    return C.run_on_cluster(sys.argv[1], "strata-identity-", body)


if __name__ == "__main__":
    sys.exit(main())
