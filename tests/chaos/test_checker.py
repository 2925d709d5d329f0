"""Unit tests of checker.py on hand-made histories (run with Debian's python3-pytest)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

_next_id = [0]


def op(kind, call, ret, outcome="ok", key="k", value=None, expect=None, result="none",
       consistent=True, final=False, error=None, client=0):
    _next_id[0] += 1
    o = {"type": "op", "id": _next_id[0], "client": client, "node": 0, "kind": kind,
         "key": key, "call": call, "ret": ret, "outcome": outcome, "consistent": consistent,
         "final": final}
    if value is not None:
        o["value"] = value
    if expect is not None:
        o["expect"] = expect
    if kind == "read":
        o["result"] = None if result == "none" else {"v": result[0], "ver": result[1]}
    if error:
        o["error"] = error
    return o


def put(call, ret, v, **kw):
    return op("put", call, ret, value=v, **kw)


def cas(call, ret, expect, v, **kw):
    return op("cas", call, ret, value=v, expect=expect, **kw)


def ccf(call, ret, expect, v, **kw):
    return op("cas", call, ret, outcome="fail", value=v, expect=expect,
              error="ConditionalCheckFailedException", **kw)


def rd(call, ret, res="none", **kw):
    return op("read", call, ret, result=res, **kw)


def kinds(ops):
    anomalies, undecided, _ = checker.check(ops)
    assert not undecided
    return sorted({a["kind"] for a in anomalies})


# ---- histories that must pass ----

def test_empty_and_sequential():
    assert kinds([]) == []
    assert kinds([put(0, 1, "a"), rd(2, 3, ("a", 0)), cas(4, 5, 0, "b"), rd(6, 7, ("b", 1)),
                  op("delete", 8, 9), rd(10, 11)]) == []


def test_concurrent_overlaps_either_order():
    # Two overlapping puts; reads after both see either, as long as they agree.
    h = [put(0, 10, "a", client=1), put(1, 9, "b", client=2),
         rd(11, 12, ("a", 0)), rd(13, 14, ("a", 0))]
    assert kinds(h) == []
    h = [put(0, 10, "a", client=1), put(1, 9, "b", client=2),
         rd(11, 12, ("b", 0)), rd(13, 14, ("b", 0))]
    assert kinds(h) == []
    # A read overlapping a put may see the old or the new value.
    assert kinds([put(0, 1, "a"), put(2, 6, "b"), rd(3, 4, ("a", 0)),
                  rd(5, 7, ("b", 0))]) == []


def test_unknown_outcome_maybe_applied():
    # The timed-out put applied late (after a later read saw the old value)...
    h = [put(0, 1, "a"), put(2, 3, "b", outcome="unknown"), rd(4, 5, ("a", 0)),
         rd(6, 7, ("b", 0), final=True)]
    assert kinds(h) == []
    # ...or never.
    h = [put(0, 1, "a"), put(2, 3, "b", outcome="unknown"), rd(4, 5, ("a", 0), final=True)]
    assert kinds(h) == []


def test_cas_failures_and_unknown_cas():
    h = [put(0, 1, "a"), ccf(2, 3, 5, "x"), cas(4, 5, 0, "b"), ccf(6, 7, 0, "y"),
         cas(8, 9, 1, "c", outcome="unknown"), rd(10, 11, ("c", 2), final=True)]
    assert kinds(h) == []
    # A conditional update of an absent item fails.
    assert kinds([ccf(0, 1, 0, "x"), rd(2, 3)]) == []


def test_definite_fail_does_not_count():
    h = [put(0, 1, "a"), put(2, 3, "b", outcome="fail", error="ConnectionRefused"),
         rd(4, 5, ("a", 0), final=True)]
    assert kinds(h) == []


def test_eventual_read_may_be_stale():
    h = [put(0, 1, "a"), put(2, 3, "b"), rd(4, 5, ("a", 0), consistent=False)]
    assert kinds(h) == []


# ---- histories that must be flagged ----

def test_stale_strong_read():
    h = [put(0, 1, "a"), put(2, 3, "b"), rd(4, 5, ("a", 0))]
    assert kinds(h) == ["not-linearizable"]


def test_reads_disagree_on_order():
    # Two reads after both puts must agree on which one won.
    h = [put(0, 10, "a", client=1), put(1, 9, "b", client=2),
         rd(11, 12, ("a", 0)), rd(13, 14, ("b", 0))]
    assert kinds(h) == ["not-linearizable"]


def test_lost_write():
    h = [put(0, 1, "a"), cas(2, 3, 0, "b"), rd(10, 11, ("a", 0), final=True)]
    assert kinds(h) == ["lost-write", "not-linearizable"]
    h = [put(0, 1, "a"), rd(10, 11, final=True)]
    assert kinds(h) == ["lost-write", "not-linearizable"]
    # An acknowledged delete resurrected.
    h = [put(0, 1, "a"), op("delete", 2, 3), rd(10, 11, ("a", 0), final=True)]
    assert kinds(h) == ["lost-write", "not-linearizable"]


def test_phantom_value():
    assert kinds([put(0, 1, "a"), rd(2, 3, ("zz", 0))]) == ["not-linearizable", "phantom-read"]
    # Eventual reads are not linearized but must still return written values.
    assert kinds([put(0, 1, "a"), rd(2, 3, ("zz", 0), consistent=False)]) == ["phantom-read"]
    # A value read before its write was even invoked.
    assert kinds([rd(0, 1, ("a", 0), consistent=False), put(2, 3, "a")]) == ["phantom-read"]
    # A value from a write known to have failed.
    h = [put(0, 1, "a", outcome="fail", error="x"), rd(2, 3, ("a", 0), consistent=False)]
    assert kinds(h) == ["phantom-read"]


def test_cas_violation():
    # The update succeeded although the version was 1, not 0.
    h = [put(0, 1, "a"), cas(2, 3, 0, "b"), cas(4, 5, 0, "c")]
    assert kinds(h) == ["not-linearizable"]
    # The condition was reported false although it held.
    h = [put(0, 1, "a"), ccf(2, 3, 0, "b")]
    assert kinds(h) == ["not-linearizable"]


def test_budget_reports_undecided():
    # Many concurrent unknown writes, then reads no order can explain (v0, v1, v0 again):
    # proving that means trying every subset of the unknown writes, so a small budget
    # must give up with "undecided" rather than hang, and a big one finds the violation.
    h = [put(0, 100, "v%d" % i, client=i, outcome="unknown") for i in range(14)]
    h += [rd(101 + 2 * i, 102 + 2 * i, ("v%d" % (i % 2), 0)) for i in range(3)]
    verdict, info = checker.check_linearizable(h, budget=0)
    assert verdict == "undecided", info
    verdict, _ = checker.check_linearizable(h, budget=10 ** 6)
    assert verdict == "violation"


def write_history(path, ops, faults=()):
    with open(path, "w") as f:
        for o in ops:
            f.write(json.dumps(o) + "\n")
        for fl in faults:
            f.write(json.dumps(fl) + "\n")


def test_cli_exit_status(tmp_path):
    good = [put(0, 1, "a"), rd(2, 3, ("a", 0)), put(2.5, 3.5, "b"),
            rd(4, 5, ("b", 0), final=True)]
    fault = {"type": "fault", "kind": "kill9", "node": 0, "start": 1.5, "end": 1.8}
    write_history(tmp_path / "g.jsonl", good, [fault])
    r = subprocess.run([sys.executable, checker.__file__, str(tmp_path / "g.jsonl")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    assert "verdict: PASS" in r.stdout and "first write after healing in 1.700s" in r.stdout
    assert "every key written again 2.00s after the start" in r.stdout
    write_history(tmp_path / "b.jsonl", good + [rd(6, 7, ("q", 0))])
    r = subprocess.run([sys.executable, checker.__file__, str(tmp_path / "b.jsonl")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "verdict: FAIL" in r.stdout


# ---- after healing, in a cluster: replica digests ----

def replicas(parts):
    """meta with a "replicas" record: parts is [(converged, {node: (applied, digest)})]."""
    return {"replicas": [
        {"partition": i + 1, "members": [1, 2, 3], "converged": conv,
         "replicas": {str(n): {"applied_index": a, "digest": d, "items": 1, "complete": True}
                      for n, (a, d) in reps.items()}}
        for i, (conv, reps) in enumerate(parts)]}


def test_replicas_equal_pass():
    meta = replicas([(True, {1: (7, "aa"), 2: (7, "aa"), 3: (7, "aa")}),
                     (True, {1: (3, "bb"), 2: (3, "bb"), 3: (3, "bb")})])
    assert checker.check_replicas(meta) == []
    assert checker.check_replicas({}) == [] and checker.check_replicas(None) == []


def test_replica_divergence_flagged():
    meta = replicas([(True, {1: (7, "aa"), 2: (7, "aa"), 3: (7, "ab")})])
    a = checker.check_replicas(meta)
    assert [x["kind"] for x in a] == ["replica-divergence"]
    assert "n3: applied 7 digest ab" in a[0]["detail"]
    # The CLI reads the replicas from the history's meta record and exits 1.
    anomalies, _, _ = checker.check([], meta=meta)
    assert [x["kind"] for x in anomalies] == ["replica-divergence"]


def test_not_converged_flagged(tmp_path):
    meta = replicas([(False, {1: (9, "aa"), 2: (7, "bb")})])
    a = checker.check_replicas(meta)
    assert [x["kind"] for x in a] == ["not-converged"]
    assert "member(s) [3]" in a[0]["detail"]
    path = tmp_path / "h.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(dict(type="meta", **meta)) + "\n")
    r = subprocess.run([sys.executable, checker.__file__, str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "[not-converged] key partition 1" in r.stdout


def test_keys_writable_time():
    # Key a is written again 0.5 s after the fault start, key b only 3 s after.
    ops = [put(0, 0.1, "a1", key="a"), put(0, 0.1, "b1", key="b"),
           put(1.2, 1.5, "a2", key="a"), put(1.1, 4.0, "b2", key="b"),
           put(0.9, 1.3, "b0", key="b", outcome="unknown")]
    faults = [{"kind": "kill9", "start": 1.0, "heal": 2.0, "end": 2.5}]
    assert checker.keys_writable_times(ops, faults) == [(3.0, "b")]
    assert checker.recovery_times(ops, faults) == [2.0]
