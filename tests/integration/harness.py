"""What the integration scripts share: free loopback ports, waiting on a condition, and
a cluster of stratad processes started and stopped by hand.

Imported by the scripts next to it (Python puts a script's own directory on sys.path).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_ports(n):
    """n TCP ports free on 127.0.0.1 at the time of the call."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def poll(cond, what, deadline_s, interval):
    """cond()'s first true value, asked every `interval` s; AssertionError naming `what`
    once `deadline_s` passed. Tests wait on events this way, never on a bare sleep."""
    end = time.time() + deadline_s
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for: " + what)


def admin(cport, path="/admin/cluster"):
    """GET `path` (JSON) of the node serving clients on `cport`, or None."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (cport, path), timeout=5) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def client(cport, attempts, pool=10):
    """A boto3 DynamoDB client of the node serving clients on `cport`: `attempts` in all
    per request (1: an error is never turned into a second write)."""
    import boto3
    import botocore.config
    return boto3.client("dynamodb", endpoint_url="http://127.0.0.1:%d" % cport,
                        region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x",
                        config=botocore.config.Config(retries={"total_max_attempts": attempts},
                                                      max_pool_connections=pool))


def node_command(stratad, nid, az, cport, pport, seed_pport, data_dir, extra=()):
    """stratad's command line for node `nid` (host label h<nid>): node 1 bootstraps a cluster
    of three meta voters, the others join through `seed_pport`."""
    cmd = [stratad, "--node-id", str(nid), "--az", az, "--host-label", "h%d" % nid,
           "--listen", "127.0.0.1:%d" % cport, "--peer-listen", "127.0.0.1:%d" % pport,
           "--data-dir", data_dir] + list(extra)
    cmd += (["--bootstrap", "--bootstrap-expect", "3"] if nid == 1
            else ["--join", "127.0.0.1:%d" % seed_pport])
    return cmd


def stop_all(procs, work, ok, log):
    """SIGTERM to every process (SIGKILL after 20 s); `work` removed when `ok`, else kept
    for its logs."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        log("logs kept in " + os.path.abspath(work))


def stop_nodes(nodes, ok, log, work):
    """SIGTERM to every node's process still running (n.proc; n.killed marks one stopped on
    purpose), each must exit with 0 within 60 s; on a failure every node's log (n.log) tail
    goes to stderr. `work` is removed unless KEEP=1. Returns ok, false if a node did not
    stop cleanly."""
    for n in nodes:
        if n.proc and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGTERM)
    for n in nodes:
        if n.proc:
            try:
                rc = n.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                n.proc.kill()
                rc = "hung"
            if rc not in (0, None) and ok and not getattr(n, "killed", False):
                log("node %d exited with %s on SIGTERM" % (n.id, rc))
                ok = False
    if not ok:
        for n in nodes:
            if os.path.exists(n.log):
                with open(n.log) as f:
                    sys.stderr.write("---- node %d ----\n%s" % (n.id, f.read()[-3000:]))
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    else:
        log("kept " + work)
    return ok


def strata(cli, node, *args):
    """The strata CLI's output for `args` through node (n.url); it must exit with 0 (node
    remove waits up to 60 s)."""
    r = subprocess.run([cli, "--endpoint", node.url] + list(args), capture_output=True,
                       text=True, timeout=90)
    assert r.returncode == 0, "strata %s: %s %s" % (" ".join(args), r.stdout, r.stderr)
    return r.stdout.strip()


def digests_agree(nodes):
    """Whether every replica on `nodes` (n.admin(path)) is complete and every partition's
    replicas have the same applied index and digest (GET /admin/digests)."""
    seen = {}
    for n in nodes:
        d = n.admin("/admin/digests")
        if d is None:
            return False
        for rep in d["replicas"]:
            if not rep["complete"]:
                return False
            seen.setdefault(rep["partition"], set()).add((rep["applied_index"], rep["digest"]))
    return bool(seen) and all(len(v) == 1 for v in seen.values())


def holdings(node):
    """(local replica ids, log groups no local replica runs, engine items outside every
    local replica) of node (n.admin(path)), None if it does not answer."""
    a, d = node.admin(), node.admin("/admin/digests")
    if a is None or d is None:
        return None
    return (sorted(p["id"] for p in a["partitions"] if "local" in p), a["log"]["unclaimed"],
            d["stray_items"])

