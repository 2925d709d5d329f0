#!/usr/bin/python3
"""Chaos run: start stratad, run the workload, inject faults from a seeded schedule,
heal, read every key, check the history, print the report.

Usage: chaos.py --stratad BIN [--duration S] [--schedule short|long] [--seed N]
                [--clients N] [--keys N] [--out DIR] [--keep]
Exit status: 0 clean; 1 anomalies found by the checker; 3 stratad misbehaved (did not
start or restart, died on its own, could not serve the final reads).

The cluster is a list of Node objects; a fault kind is a function in FAULTS taking
(run, node, rng) that injects the fault, waits, heals it and returns a detail string.
Today the node list holds one local stratad; cluster runs add nodes (for example in
deploy/azsim.sh namespaces) and the partition faults.
"""
import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402
import workload  # noqa: E402

START_TIMEOUT_S = 30


class Misbehaved(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Node:
    """One local stratad process on a fixed port and data directory."""

    def __init__(self, index, stratad, data_dir, log_path, port):
        self.index, self.stratad, self.data_dir = index, stratad, data_dir
        self.log_path, self.port, self.host = log_path, port, "127.0.0.1"
        self.proc = None
        self.expect_dead = False

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.stratad, "--listen", "%s:%d" % (self.host, self.port),
             "--data-dir", self.data_dir], stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        self.expect_dead = False
        # Reads stdout in a thread so a silent stratad cannot block us past the deadline.
        ready = threading.Event()

        def watch(out=self.proc.stdout):
            for line in out:
                if re.match(r"stratad: serving on http://", line):
                    ready.set()
            out.close()
        threading.Thread(target=watch, daemon=True).start()
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            if ready.wait(0.02):
                return
            if self.proc.poll() is not None:
                raise Misbehaved("node %d exited with %s on start (log %s)"
                                 % (self.index, self.proc.returncode, self.log_path))
        raise Misbehaved("node %d did not serve within %ds" % (self.index, START_TIMEOUT_S))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.expect_dead = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Misbehaved("node %d ignored SIGTERM for 10s" % self.index)
            if self.proc.returncode != 0:
                raise Misbehaved("node %d exited with %s on SIGTERM"
                                 % (self.index, self.proc.returncode))


# ---- fault kinds: each injects, holds, heals; returns a detail string ----

def fault_kill9(run, node, rng):
    node.kill9()
    time.sleep(rng.uniform(0.0, 1.0))  # down for a while before the restart
    node.start()
    return "restarted"


def fault_pause(run, node, rng):
    hold = rng.uniform(1.0, 4.0)
    node.pause()
    try:
        run.stop.wait(hold)
    finally:
        node.resume()
    return "SIGSTOP for %.1fs" % hold


def fault_partition(run, node, rng):
    # Needs several nodes in deploy/azsim.sh namespaces and iptables DROP rules between
    # them (one AZ from the others, leader isolation, asymmetric, loss and delay with
    # netem); not meaningful against a single local node yet.
    raise NotImplementedError("partition faults need the replicated cluster (azsim)")


def sabotage_wipe(run, node, rng):
    # Not a fault a correct system survives: it loses every acknowledged write, and is
    # here to prove end to end that a run flags lost data (test_end_to_end.py).
    node.kill9()
    shutil.rmtree(node.data_dir)
    os.makedirs(node.data_dir)
    node.start()
    workload.create_table(node.host, node.port)
    return "restarted with an empty data directory"


FAULTS = {"kill9": fault_kill9, "pause": fault_pause}
# Chosen only by name (--faults wipe), never by default.
SABOTAGE = {"wipe": sabotage_wipe}
LATER_FAULTS = {"partition": fault_partition}

SCHEDULES = {
    # warm-up, gap between faults (min, max), total duration by default
    "short": {"duration": 60, "warmup": 4.0, "gap": (3.0, 7.0)},
    "long": {"duration": 1800, "warmup": 10.0, "gap": (5.0, 20.0)},
}


def make_schedule(rng, name, duration, kinds):
    """Seeded list of (at seconds, fault kind, node index); faults end before duration."""
    sch = SCHEDULES[name]
    out, t = [], sch["warmup"]
    while t < duration - 8:
        out.append((t, rng.choice(kinds)))
        t += rng.uniform(*sch["gap"]) + 4.0  # a fault lasts up to ~4s
    return out


class Run:
    def __init__(self, args):
        self.args = args
        self.stop = threading.Event()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="short")
    ap.add_argument("--duration", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--keys", type=int, default=5)
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help="comma-separated fault kinds (%s)" % ", ".join(FAULTS))
    ap.add_argument("--budget", type=int, default=300000)
    ap.add_argument("--out", help="directory for history and logs (default: temporary)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    duration = args.duration or SCHEDULES[args.schedule]["duration"]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    kinds = [k for k in args.faults.split(",") if k]
    for k in kinds:
        if k not in FAULTS and k not in SABOTAGE:
            ap.error("unknown or not yet available fault kind %r" % k)
    rng = random.Random(seed)
    out_dir = args.out or tempfile.mkdtemp(prefix="strata-chaos-")
    os.makedirs(out_dir, exist_ok=True)
    print("chaos: seed %d, schedule %s, %.0fs, output in %s"
          % (seed, args.schedule, duration, out_dir), flush=True)

    run = Run(args)
    nodes = [Node(0, args.stratad, os.path.join(out_dir, "n0"), os.path.join(out_dir, "n0.log"),
                  free_port())]
    os.makedirs(nodes[0].data_dir, exist_ok=True)
    hist_path = os.path.join(out_dir, "history.jsonl")
    hist = workload.History(hist_path, time.monotonic())
    hist.write({"type": "meta", "seed": seed, "schedule": args.schedule,
                "duration": duration, "clients": args.clients, "keys": args.keys,
                "nodes": len(nodes)})
    status = 0
    clients = []
    try:
        for n in nodes:
            n.start()
        workload.create_table(nodes[0].host, nodes[0].port)
        addrs = [(n.host, n.port) for n in nodes]
        keys = ["k%d" % i for i in range(args.keys)]
        clients = [workload.Client(i, addrs, keys, hist, run.stop, rng.randrange(1 << 31))
                   for i in range(args.clients)]
        for c in clients:
            c.start()
        t_start = hist.now()
        for at, kind in make_schedule(rng, args.schedule, duration, kinds):
            if run.stop.wait(max(0.0, t_start + at - hist.now())):
                break
            node = rng.choice(nodes)
            if not node.alive():
                raise Misbehaved("node %d died on its own (exit %s)"
                                 % (node.index, node.proc.returncode))
            t0 = hist.now()
            detail = FAULTS.get(kind, SABOTAGE.get(kind))(run, node, rng)
            t1 = hist.now()
            hist.write({"type": "fault", "kind": kind, "node": node.index, "start": t0,
                        "end": t1, "detail": detail})
            print("chaos: %7.2fs %s node %d: %s" % (t0, kind, node.index, detail), flush=True)
        run.stop.wait(max(0.0, t_start + duration - hist.now()))
        run.stop.set()
        for c in clients:
            c.join(10)
        for n in nodes:
            if not n.alive():
                raise Misbehaved("node %d died on its own (exit %s)"
                                 % (n.index, n.proc.returncode))
        missing = workload.final_reads(addrs, keys, hist)
        if missing:
            raise Misbehaved("final strong reads failed for keys %s" % ", ".join(missing))
        for n in nodes:
            n.stop()
    except Misbehaved as e:
        print("chaos: stratad misbehaved: %s" % e, flush=True)
        status = 3
    finally:
        run.stop.set()
        for c in clients:
            c.join(10)
        for n in nodes:
            if n.alive():
                n.proc.send_signal(signal.SIGCONT)
                n.proc.kill()
                n.proc.wait()
        hist.close()

    ops, faults, meta = checker.load(hist_path)
    anomalies, undecided, stats = checker.check(ops, args.budget)
    checker.report(ops, faults, meta, anomalies, undecided, stats)
    if anomalies and status == 0:
        status = 1
    print("chaos: history %s (seed %d) exit %d" % (hist_path, seed, status))
    if status == 0 and not args.out and not args.keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
