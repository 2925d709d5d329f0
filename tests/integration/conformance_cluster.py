#!/usr/bin/python3
"""The conformance suite (tests/conformance/) through one node of a 3-node cluster.

Usage: conformance_cluster.py STRATAD [pytest args]
Starts three stratad in cluster mode (cluster.py's Cluster: 4 partitions a table, leaders
spread over the nodes) and runs every conformance test through node 2, which leads about
a third of each table's partitions: most requests are forwarded to another node's leader,
Query and Scan pages and batches gather items from partitions on all three, and every
answer (items, pagination keys, capacity units, DynamoDB's errors and messages) must be
the one a single node gives. Then all three stop with SIGTERM and must exit 0, and no
node may have logged a sanitizer report.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import check, log, run_on_cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "..", "conformance", "run.sh")
STOP_DEADLINE_S = 60
SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:")


def sanitizer_reports(cl):
    found = []
    for n in cl.nodes:
        with open(n.log_path, errors="replace") as f:
            if SANITIZER.search(f.read()):
                found.append(n.id)
    return found


def main():
    def body(cl):
        cl.start()
        via = cl.node(2)
        log("cluster ready; conformance suite through node 2 at %s" % via.url)
        rc = subprocess.call([RUN, "--endpoint", via.url, "--target", "stratad"] +
                             sys.argv[2:])
        router = (via.admin() or {}).get("router", {})
        log("node 2 forwarded %s writes and %s reads to other nodes" %
            (router.get("forwarded_writes"), router.get("forwarded_reads")))
        # Unless the suite was narrowed by pytest arguments, it must have crossed nodes.
        check(len(sys.argv) > 2 or (router.get("forwarded_writes", 0) > 0 and
                                    router.get("forwarded_reads", 0) > 0),
              "node 2 forwarded writes and reads: %s" % router)
        check(all(n.alive() for n in cl.nodes),
              "nodes died during the run: %s" % [n.id for n in cl.nodes if not n.alive()])
        status = {n.id: n.stop(STOP_DEADLINE_S) for n in cl.nodes}
        check(all(s == 0 for s in status.values()),
              "every node exits 0 on SIGTERM: %s" % status)
        bad = sanitizer_reports(cl)
        check(not bad, "sanitizer reports in the logs of nodes %s" % bad)
        check(rc == 0, "the conformance suite failed through node 2 (pytest exit %d)" % rc)
        log("ok: the conformance suite passes through node 2 of 3")
    return run_on_cluster(sys.argv[1], "strata-conformance-cluster-", body,
                          (subprocess.TimeoutExpired,))


if __name__ == "__main__":
    sys.exit(main())
