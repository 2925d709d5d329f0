#!/usr/bin/python3
"""A flood of client connections cannot take a node's file descriptors.

Usage: fdlimit.py STRATAD
Under a default open-file limit of 1024, a client holding a thousand connections used to
make the next table file of the engine fail to open ("Too many open files"), and the node
stopped: its storage had failed. stratad now plans its descriptors at start
(config_plan_fds, node/config.h): it raises the soft limit when the hard one allows, else
serves fewer client connections, so that the engine, the log and the peers keep theirs.
 1. Three nodes with small memtables (engines flush often, opening a table file each
    time). Node 1 runs under RLIMIT_NOFILE 1024 (hard 1024 too): it says at start that it
    serves at most 512 client connections. Nodes 2 and 3 run under soft 1024, hard 4096:
    they raise the soft limit to 2000 + 1280 and serve max_connections
    (--max-connections 2000) without a word.
 2. FLOOD connections to node 1 are opened and held. Writes through node 2 (about 4 MB,
    so every engine flushes many times, node 1's too) all succeed, node 1 stays up, and
    its log reports the refused connections.
 3. The flood ends: writes and strongly consistent reads through node 1 succeed, and
    every acknowledged item reads back through it.
Every wait polls a condition with a deadline.
"""
import os
import resource
import socket
import sys
import tempfile

import harness
import split as sp

FLOOD = 1100
ITEMS = 200
VALUE = "v" * 20000
RESERVE = 1280  # CONFIG_FD_RESERVE


def limit_files(soft, hard):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_files(pid):
    """A process's soft RLIMIT_NOFILE."""
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def text(node):
    with open(node.log) as f:
        return f.read()


def main():
    stratad = os.path.abspath(sys.argv[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FLOOD + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        soft = min(want, hard)
    if soft < want:
        raise SystemExit("fdlimit: needs %d descriptors, the hard limit is %d" % (want, hard))
    work = tempfile.mkdtemp(prefix="strata-fdlimit-")
    ports = harness.free_ports(6)
    nodes = [sp.Node(work, i + 1, "az%d" % (i + 1), ports[2 * i], ports[2 * i + 1], ports[1])
             for i in range(3)]
    nodes[0].preexec = limit_files(1024, 1024)
    for n in nodes[1:]:
        n.preexec = limit_files(1024, 4096)
        n.extra = ["--max-connections", "2000"]
    os.environ["STRATA_MEMTABLE_BYTES"] = "262144"
    flood = []
    ok = False
    try:
        for n in nodes:
            n.start(stratad)
        sp.poll(lambda: all((n.admin() or {}).get("ready") for n in nodes), "3 nodes ready")
        said = "serving at most 512 client connections, not max_connections 10000"
        assert said in text(nodes[0]), "node 1 did not say: " + said
        for n in nodes[1:]:
            assert "serving at most" not in text(n), "node %d capped its connections" % n.id
            assert open_files(n.proc.pid) == 2000 + RESERVE, "node %d: soft limit %d" % (
                n.id, open_files(n.proc.pid))
        c2 = sp.client(nodes[1].url)
        c2.create_table(TableName=sp.TABLE, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
        sp.poll(lambda: sp.settled(nodes, 4), "4 partitions led and served everywhere")

        for _ in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", nodes[0].cport), timeout=10)
            flood.append(s)
        tables_before = len(os.listdir(os.path.join(nodes[0].dir, "data", "engine")))
        for i in range(ITEMS):
            c2.put_item(TableName=sp.TABLE, Item={"pk": {"S": "k%04d" % i}, "v": {"S": VALUE}})
        assert nodes[0].proc.poll() is None, "node 1 exited during the flood (see its log)"
        sp.poll(lambda: "refused" in text(nodes[0]) and "max_connections is 512" in text(
            nodes[0]), "node 1 reports the refused connections")
        log1 = text(nodes[0])
        assert "storage failed" not in log1 and "Too many open files" not in log1, log1[-2000:]
        tables_after = len(os.listdir(os.path.join(nodes[0].dir, "data", "engine")))
        assert tables_after > tables_before, "node 1's engine opened no file during the flood"
        sp.log("fdlimit: 2) ok: %d connections held to node 1 (%s), %d items of %d KB "
               "written through node 2; node 1's engine directory %d -> %d files" % (
                   FLOOD, [l for l in log1.splitlines() if "refused" in l][0].split(": ", 1)[1],
                   ITEMS, len(VALUE) // 1000, tables_before, tables_after))
        for s in flood:
            s.close()
        flood = []

        c1 = sp.client(nodes[0].url)
        c1.put_item(TableName=sp.TABLE, Item={"pk": {"S": "after"}, "v": {"S": "x"}})
        for i in list(range(ITEMS)) + ["after"]:
            key = "k%04d" % i if i != "after" else i
            got = c1.get_item(TableName=sp.TABLE, Key={"pk": {"S": key}}, ConsistentRead=True)
            assert "Item" in got, "item %s missing through node 1" % key
        assert nodes[0].proc.poll() is None, "node 1 exited"
        sp.log("fdlimit: 3) ok: through node 1 after the flood, a write and %d strong reads"
               % (ITEMS + 1))
        for n in nodes:
            n.stop()
        ok = True
    finally:
        for s in flood:
            s.close()
        ok = sp.finish(nodes, work, ok)
    if not ok:
        raise SystemExit(1)
    sp.log("fdlimit: ok")


if __name__ == "__main__":
    main()
