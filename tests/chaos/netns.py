"""Network namespaces for the chaos runner: one namespace per node on a bridge, so that
faults can be injected at the network level (iptables DROP inside a node's namespace,
random loss with -m statistic, delay with tc netem or deploy/nfq-delay).

Layout of run R (R = the runner's pid, so that names are unique per run and a later run
can tell whether their owner is still alive):
  schaos-R-hub   namespace holding bridge br0 and the hub ends of every veth pair
  schaos-R-nI    node I: eth0 = 10.78.K.I/24, lo up; stratad listens on 0.0.0.0
  schaosR        the root namespace's end of one more veth pair (10.78.K.254/24), its
                 peer on the bridge: the runner's clients reach every node over it
K is a /24 of 10.78 no other interface of the root namespace uses (10.77 is azsim's).
Deleting the namespaces deletes everything: a veth goes with its peer, the bridge with
the hub. Faults only ever add rules inside node namespaces and only match the nodes'
addresses, so client traffic (from 10.78.K.254) is never dropped or delayed.

Contract: Net.available() says whether this process can do it (root, ip, a namespace
can be created) and why not; Net(...).up() builds it, down() removes it (idempotent,
also after a failed up()); cleanup_stale() removes what runs that are no longer alive
left behind (a run killed with SIGKILL cannot clean up after itself).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import time

PREFIX = "schaos"
SUBNET = "10.78"
NS_RE = re.compile(r"^%s-(\d+)-(hub|n\d+)$" % PREFIX)


def die_with_runner():
    """preexec_fn: the child gets SIGKILL when the runner dies (even by SIGKILL), so a
    killed run leaves no process behind. Best effort: only where prctl exists."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def sh(*cmd, check=True, timeout=20):
    """Runs a command; returns its stdout. Raises RuntimeError with stderr on failure."""
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode,
                                                r.stderr.strip()[:300]))
    return r.stdout


def in_ns(ns, *cmd, check=True):
    return sh("ip", "netns", "exec", ns, *cmd, check=check)


def list_namespaces():
    out = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _owner_alive(pid):
    """Whether pid is a live chaos runner (a run still using its namespaces)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"chaos" in f.read()
    except OSError:
        return False


def _kill_ns_processes(ns):
    """SIGKILL every process of namespace ns and wait until they are gone (a process
    keeps an unnamed namespace, and its ports, alive)."""
    pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).split() if p.isdigit()]
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    end = time.monotonic() + 10
    while pids and time.monotonic() < end:
        pids = [p for p in pids if os.path.exists("/proc/%d" % p)]
        time.sleep(0.02)


def _delete_namespaces(names):
    for ns in names:
        _kill_ns_processes(ns)
    for ns in names:
        sh("ip", "netns", "del", ns, check=False)


def cleanup_stale():
    """Deletes the namespaces (and their processes) of earlier runs whose runner is dead.
    Called before this run creates any: names with our own pid are an earlier process's
    that had the same pid. Returns the names removed."""
    stale = []
    for ns in list_namespaces():
        m = NS_RE.match(ns)
        if m and (int(m.group(1)) == os.getpid() or not _owner_alive(int(m.group(1)))):
            stale.append(ns)
    _delete_namespaces(stale)
    return stale


class Net:
    """One run's namespaces. nodes: {node id: az number}."""

    PORT, PEER_PORT = 8000, 7000

    @staticmethod
    def available():
        """(True, how delay is done) or (False, why network faults are not possible)."""
        if os.geteuid() != 0:
            return False, "not root"
        if not shutil.which("ip") or not shutil.which("iptables"):
            return False, "ip or iptables missing"
        probe = "%s-%d-hub" % (PREFIX, os.getpid())
        try:
            sh("ip", "netns", "add", probe)
        except (RuntimeError, OSError) as e:
            return False, "cannot create a network namespace (%s)" % e
        try:
            in_ns(probe, "iptables", "-w", "-A", "OUTPUT", "-m", "statistic", "--mode",
                  "random", "--probability", "0.5", "-d", "10.0.0.1", "-j", "DROP")
        except (RuntimeError, OSError) as e:
            return False, "iptables inside a namespace fails (%s)" % e
        finally:
            sh("ip", "netns", "del", probe, check=False)
        return True, ""

    def __init__(self, nodes, nfq_delay=None):
        self.pid = os.getpid()
        self.nodes = dict(nodes)
        self.hub = "%s-%d-hub" % (PREFIX, self.pid)
        self.root_if = "%s%d" % (PREFIX, self.pid)  # at most 6 + 7 characters
        self.k = None
        self.netem = None
        self.nfq_delay = nfq_delay  # path of the nfq-delay binary, or None
        self.delayers = {}          # node id -> Popen of its nfq-delay
        self.created = []

    def ns(self, nid):
        return "%s-%d-n%d" % (PREFIX, self.pid, nid)

    def addr(self, nid):
        return "%s.%d.%d" % (SUBNET, self.k, nid)

    def wrap(self, nid, cmd):
        """cmd run inside node nid's namespace (ip netns exec execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns(nid)] + list(cmd)

    def _free_k(self):
        used = set(re.findall(r"inet %s\.(\d+)\." % re.escape(SUBNET),
                              sh("ip", "-4", "-o", "addr", "show")))
        for i in range(250):
            k = (self.pid + i) % 250 + 1
            if str(k) not in used:
                return k
        raise RuntimeError("no free /24 in %s.0.0/16" % SUBNET)

    def _make_ns(self, name):
        self.created.append(name)  # first: down() after a failure here still finds it
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def up(self):
        self.k = self._free_k()
        try:
            self._make_ns(self.hub)
            sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.hub, "link", "set", "br0", "up")
            # The root namespace's end: made inside the hub, then moved to the root (pid 1's
            # namespace), so a failure leaves nothing in the root that the hub does not own.
            sh("ip", "-n", self.hub, "link", "add", "r0", "type", "veth", "peer", "name",
               self.root_if, "netns", "1")
            sh("ip", "-n", self.hub, "link", "set", "r0", "master", "br0", "up")
            sh("ip", "addr", "add", "%s.%d.254/24" % (SUBNET, self.k), "dev", self.root_if)
            sh("ip", "link", "set", self.root_if, "up")
            for nid in sorted(self.nodes):
                ns = self.ns(nid)
                self._make_ns(ns)
                sh("ip", "-n", self.hub, "link", "add", "v%d" % nid, "type", "veth", "peer",
                   "name", "eth0", "netns", ns)
                sh("ip", "-n", self.hub, "link", "set", "v%d" % nid, "master", "br0", "up")
                sh("ip", "-n", ns, "addr", "add", "%s/24" % self.addr(nid), "dev", "eth0")
                sh("ip", "-n", ns, "link", "set", "eth0", "up")
            self.netem = self._netem_works()
            self._check_reachable()
        except Exception:
            self.down()
            raise

    def _check_reachable(self):
        """Every node address answers from the root namespace: a TCP connect to a port
        nothing listens on is refused at once when the path works, and times out when a
        firewall of this machine drops bridge traffic."""
        for nid in sorted(self.nodes):
            try:
                socket.create_connection((self.addr(nid), 9), timeout=3).close()
            except ConnectionRefusedError:
                continue
            except OSError as e:
                raise RuntimeError("%s (node %d) unreachable from the root namespace: %s"
                                   % (self.addr(nid), nid, e))

    def _netem_works(self):
        ns = self.ns(min(self.nodes))
        r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo",
                            "root", "netem", "delay", "1ms"], capture_output=True)
        if r.returncode != 0:
            return False
        in_ns(ns, "tc", "qdisc", "del", "dev", "lo", "root", check=False)
        return True

    def delay_method(self):
        if self.netem:
            return "netem"
        return "nfq-delay" if self.nfq_delay else None

    def down(self):
        """Kills what runs in our namespaces and deletes them (the veths and the bridge go
        with them). Safe to call twice."""
        self.heal()
        mine = [ns for ns in list_namespaces() if NS_RE.match(ns)
                and int(NS_RE.match(ns).group(1)) == self.pid]
        _delete_namespaces(sorted(set(mine) | set(self.created)))
        self.created = []
        sh("ip", "link", "del", self.root_if, check=False)  # gone with the hub already

    # ---- faults: rules only inside node namespaces, only matching node addresses ----

    def _rule(self, nid, chain, peer, *target):
        flag = "-s" if chain == "INPUT" else "-d"
        in_ns(self.ns(nid), "iptables", "-w", "-A", chain, flag, self.addr(peer), *target)

    def cut(self, group, others, direction="both"):
        """Drops packets between every node of group and every node of others: "both",
        "out" (group -> others only) or "in" (others -> group only)."""
        for g in group:
            for o in others:
                if direction in ("both", "out"):
                    self._rule(g, "OUTPUT", o, "-j", "DROP")
                if direction in ("both", "in"):
                    self._rule(g, "INPUT", o, "-j", "DROP")

    def loss(self, group, others, pct):
        """Drops pct % of the packets between group and others, each way."""
        p = "%.3f" % (pct / 100.0)
        for g in group:
            for o in others:
                for chain in ("OUTPUT", "INPUT"):
                    self._rule(g, chain, o, "-m", "statistic", "--mode", "random",
                               "--probability", p, "-j", "DROP")

    def delay(self, group, others, ms, log_dir):
        """Delays every packet from group to others by ms (one way: a round trip between
        group and others costs ms more)."""
        for g in group:
            if self.netem:
                self._delay_netem(g, others, ms)
            else:
                self._delay_nfq(g, others, ms, log_dir)

    def _delay_netem(self, g, others, ms):
        ns = self.ns(g)
        # Band 1 (unshaped) gets every priority; filters steer the peers to band 2.
        in_ns(ns, "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "prio",
              "bands", "2", "priomap", *(["0"] * 16))
        in_ns(ns, "tc", "qdisc", "add", "dev", "eth0", "parent", "1:2", "handle", "20:",
              "netem", "delay", "%dms" % ms, "limit", "100000")
        for o in others:
            in_ns(ns, "tc", "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip",
                  "prio", "1", "u32", "match", "ip", "dst", "%s/32" % self.addr(o),
                  "flowid", "1:2")

    def _delay_nfq(self, g, others, ms, log_dir):
        if not self.nfq_delay:
            raise RuntimeError("no netem and no nfq-delay binary")
        log_path = os.path.join(log_dir, "nfq-delay-n%d.log" % g)
        log = open(log_path, "a")
        proc = subprocess.Popen(self.wrap(g, [self.nfq_delay, "--queue", "0", "--rule",
                                              "%s/32,%s.%d.0/24,%d,0" % (
                                                  self.addr(g), SUBNET, self.k, ms)]),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                preexec_fn=die_with_runner)
        log.close()
        self.delayers[g] = proc
        end = time.monotonic() + 10
        while True:  # its "queue" line says it is bound to the queue
            with open(log_path, errors="replace") as f:
                if re.search(r"^nfq-delay: queue", f.read(), re.M):
                    break
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("nfq-delay in %s did not start (%s)" % (self.ns(g),
                                                                          log_path))
            time.sleep(0.02)
        # --queue-bypass: packets flow if nfq-delay is gone.
        for o in others:
            self._rule(g, "OUTPUT", o, "-j", "NFQUEUE", "--queue-num", "0",
                       "--queue-bypass")

    def heal(self):
        """Removes every fault: rules first (nothing new is queued), then the delayers
        (SIGTERM makes nfq-delay accept what it holds), then qdiscs."""
        for nid in self.nodes:
            ns = self.ns(nid)
            if not os.path.exists("/run/netns/" + ns):
                continue
            in_ns(ns, "iptables", "-w", "-F", "INPUT", check=False)
            in_ns(ns, "iptables", "-w", "-F", "OUTPUT", check=False)
        for proc in self.delayers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.delayers = {}
        if self.netem:
            for nid in self.nodes:
                if os.path.exists("/run/netns/" + self.ns(nid)):
                    in_ns(self.ns(nid), "tc", "qdisc", "del", "dev", "eth0", "root",
                          check=False)


def find_nfq_delay(stratad, out_dir):
    """The nfq-delay binary: meson builds it next to the tests of the build tree stratad
    comes from; else it is compiled here with cc, as deploy/azsim.sh does. None when
    neither works (no libnetfilter-queue-dev)."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(stratad)))
    cand = os.path.join(build, "tests", "integration", "azsim", "nfq-delay")
    if os.access(cand, os.X_OK):
        return cand
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    try:
        flags = sh("pkg-config", "--cflags", "--libs", "libnetfilter_queue").split()
        out = os.path.join(out_dir, "nfq-delay")
        sh("cc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
           "-I" + repo, os.path.join(repo, "deploy/nfq-delay/nfq-delay.c"),
           os.path.join(repo, "deploy/nfq-delay/delayq.c"),
           os.path.join(repo, "storage/base/err.c"), "-o", out, *flags, timeout=120)
        return out
    except (RuntimeError, OSError):
        return None
