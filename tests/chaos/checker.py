#!/usr/bin/python3
"""Chaos history checker.

Usage: checker.py HISTORY.jsonl [--budget N] [--json]

Reads a JSONL history written by workload.py / chaos.py and checks, per key:
  - linearizability of the strongly consistent operations (put, conditional update,
    delete, strong read, and the final strong reads) against a register with
    compare-and-set on a version attribute, by a WGL-style depth-first search with
    memoisation of (linearized set, state). The search is bounded: past --budget
    explored states a key is reported "undecided" instead of hanging;
  - no acknowledged write lost: the final strong read of every key after healing must
    be explained by a write that no acknowledged write definitely follows;
  - no read (strong or eventual) returns a value that was never written, or that was
    written only by an operation invoked after the read completed;
  - in a cluster, after healing: every partition's replicas reached one applied index
    ("not-converged" otherwise) and have identical digests there ("replica-divergence").
An operation with outcome "unknown" (timeout, connection lost after sending) may have
taken effect at any point after its invocation, or never. An operation with outcome
"fail" did not take effect; a failed conditional update whose error is
ConditionalCheckFailedException is still checked: its condition must have been false.

Exit status: 0 clean (possibly with undecided keys, which are reported), 1 anomalies,
2 bad input.

History lines (one JSON object each):
  {"type":"op","id":N,"client":C,"node":I,"kind":"put|cas|delete|read","key":K,
   "value":V,"expect":E,"consistent":bool,"final":bool,"call":T0,"ret":T1,
   "outcome":"ok|fail|unknown","error":"...","result":{"v":V,"ver":N}|null}
  {"type":"fault","kind":"kill9|pause|...","node":I,"target":"...","start":T0,
   "heal":TH,"end":T1,"detail":"..."}   (heal: when the fault was undone, e.g. restart
   or SIGCONT; end: when the node served again and had caught up)
  {"type":"meta",...}   (merged; "replicas": [{"partition":P,"members":[..],
   "converged":bool,"replicas":{"<node>":{"applied_index":A,"digest":"hex","items":K,
   "complete":bool,...}}}] after healing in a cluster)
Times are seconds (floats) from the start of the run.
"""
import bisect
import json
import sys
from collections import defaultdict

INF = float("inf")
CCF = "ConditionalCheckFailedException"


def load(path):
    ops, faults, meta = [], [], {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: %s" % (path, lineno, e))
            t = rec.get("type")
            if t == "op":
                ops.append(rec)
            elif t == "fault":
                faults.append(rec)
            elif t == "meta":
                meta.update(rec)
    return ops, faults, meta


def _state_of(result):
    if result is None:
        return None
    return (result["v"], int(result["ver"]))


def _is_ccf(op):
    return op["kind"] == "cas" and op["outcome"] == "fail" and CCF in (op.get("error") or "")


def _takes_part(op):
    """Whether op belongs in the linearizability check of its key."""
    if op["kind"] == "read":
        return op["outcome"] == "ok" and op.get("consistent", False)
    if op["outcome"] in ("ok", "unknown"):
        return True
    return _is_ccf(op)


def _step(state, op):
    """Applies op to the register state; returns (allowed, new state)."""
    kind, outcome = op["kind"], op["outcome"]
    if kind == "read":
        return state == _state_of(op.get("result")), state
    if kind == "put":
        return True, (op["value"], 0)
    if kind == "delete":
        return True, None
    if kind == "cas":
        holds = state is not None and state[1] == int(op["expect"])
        if outcome == "fail":  # ConditionalCheckFailed: the condition was false
            return not holds, state
        # ok, or unknown and linearized: it applied, so the condition held. An unknown
        # one whose condition was false is the same as one never linearized.
        if not holds:
            return False, state
        return True, (op["value"], int(op["expect"]) + 1)
    raise ValueError("unknown op kind %r" % kind)


def check_linearizable(ops, budget=200000):
    """WGL-style search over one key's ops. Returns ("ok"|"violation"|"undecided", info).

    Definite ops (ok or definite fail) must all be linearized, each between its call and
    return; unknown ops have no return and may be linearized at any point after their
    call, or left out. The search is a depth-first one, earliest deadline first, that
    memoises (linearized set, state) so that no configuration is explored twice. The
    linearized definite ops are kept as lo (all ops before it in call order are done)
    plus a small mask of the window after it, so memory stays proportional to the
    concurrency rather than to the length of the history. It gives up ("undecided")
    after budget + 20 * len(ops) explored configurations. info on a violation names the
    first definite op that the deepest attempt could not place.
    """
    defs = sorted((o for o in ops if o["outcome"] != "unknown"), key=lambda o: o["call"])
    unks = sorted((o for o in ops if o["outcome"] == "unknown"), key=lambda o: o["call"])
    n_def = len(defs)
    if n_def == 0:
        return "ok", {}
    budget += 20 * len(ops)
    d_call = [o["call"] for o in defs]
    d_ret = [o["ret"] for o in defs]
    u_call = [o["call"] for o in unks]

    def candidates(lo, wmask, umask):
        """Definite ops (by index) that may come next, earliest return first, then the
        unknown ones (as -1 - index) invoked before that return."""
        cands, minret, i = [], INF, lo
        while i < n_def and d_call[i] <= minret:
            if not (wmask >> (i - lo)) & 1:
                cands.append(i)
                if d_ret[i] < minret:
                    minret = d_ret[i]
            i += 1
        cands.sort(key=lambda j: d_ret[j])
        for u in range(len(unks)):
            if u_call[u] > minret:
                break
            if not (umask >> u) & 1:
                cands.append(-1 - u)
        return cands

    seen = set()
    steps = 0
    best_lo, best_wmask = 0, 0
    # Frames: [state, lo, wmask, umask, candidates, next candidate].
    stack = [[None, 0, 0, 0, candidates(0, 0, 0), 0]]
    while stack:
        top = stack[-1]
        state, lo, wmask, umask, cands, ci = top
        if lo == n_def:
            return "ok", {"explored": steps}
        if ci >= len(cands):
            stack.pop()
            continue
        top[5] = ci + 1
        j = cands[ci]
        allowed, new_state = _step(state, defs[j] if j >= 0 else unks[-1 - j])
        if not allowed:
            continue
        new_lo, new_wmask, new_umask = lo, wmask, umask
        if j >= 0:
            new_wmask |= 1 << (j - lo)
            while new_wmask & 1:
                new_wmask >>= 1
                new_lo += 1
        else:
            new_umask |= 1 << (-1 - j)
        memo = (new_lo, new_wmask, new_umask, new_state)
        if memo in seen:
            continue
        seen.add(memo)
        steps += 1
        if steps > budget:
            return "undecided", {"explored": steps, "ops": len(ops)}
        if new_lo > best_lo:
            best_lo, best_wmask = new_lo, new_wmask
        stack.append([new_state, new_lo, new_wmask, new_umask,
                      candidates(new_lo, new_wmask, new_umask), 0])
    # Not linearizable: report the earliest-returning definite op left unplaced by the
    # attempt that got furthest.
    stuck = [defs[i] for i in range(best_lo, n_def) if not (best_wmask >> (i - best_lo)) & 1]
    first = min(stuck, key=lambda o: o["ret"]) if stuck else None
    return "violation", {"explored": steps, "linearized": best_lo + bin(best_wmask).count("1"),
                         "of": n_def, "stuck_op": first}


def _describe(op):
    if op is None:
        return "?"
    s = "op %s client %s %s" % (op.get("id"), op.get("client"), op["kind"])
    if op["kind"] in ("put", "cas"):
        s += " value=%s" % op.get("value")
    if op["kind"] == "cas":
        s += " expect ver=%s" % op.get("expect")
    if op["kind"] == "read":
        s += " %s read -> %s" % ("strong" if op.get("consistent") else "eventual",
                                 json.dumps(op.get("result")))
    s += " [%s, %.3f..%s]" % (op["outcome"], op["call"],
                              "inf" if op["ret"] is None else "%.3f" % op["ret"])
    return s


def check_phantoms(ops):
    """Every value read was written (by an op not known to have failed) and the write
    was invoked before the read returned."""
    anomalies = []
    written = {}
    for o in ops:
        if o["kind"] in ("put", "cas") and o["outcome"] in ("ok", "unknown"):
            ver = 0 if o["kind"] == "put" else int(o["expect"]) + 1
            written[(o["key"], o["value"])] = (o, ver)
    for o in ops:
        if o["kind"] != "read" or o["outcome"] != "ok" or o.get("result") is None:
            continue
        v, ver = o["result"]["v"], int(o["result"]["ver"])
        w = written.get((o["key"], v))
        if w is None:
            anomalies.append({"kind": "phantom-read", "key": o["key"],
                              "detail": "read of a value never written: " + _describe(o)})
        elif w[0]["call"] > o["ret"]:
            anomalies.append({"kind": "phantom-read", "key": o["key"],
                              "detail": "read of a value written only later: %s; writer %s"
                              % (_describe(o), _describe(w[0]))})
        elif w[1] != ver:
            anomalies.append({"kind": "phantom-read", "key": o["key"],
                              "detail": "read of value with version %d, written with %d: %s"
                              % (ver, w[1], _describe(o))})
    return anomalies


def check_lost_writes(ops):
    """The final strong read of each key must be explained by a write (or delete, or the
    initial absence) that no acknowledged write definitely follows."""
    anomalies = []
    by_key = defaultdict(list)
    for o in ops:
        by_key[o["key"]].append(o)
    for key, kops in by_key.items():
        finals = [o for o in kops if o.get("final") and o["kind"] == "read"
                  and o["outcome"] == "ok"]
        if not finals:
            continue
        fin = max(finals, key=lambda o: o["call"])
        seen = _state_of(fin.get("result"))
        acked = [o for o in kops if o["kind"] in ("put", "cas", "delete")
                 and o["outcome"] == "ok" and o["ret"] <= fin["call"]]
        # Candidate sources of what the final read saw; each has a completion time.
        if seen is None:
            sources = [-INF] + [o["ret"] if o["outcome"] == "ok" else INF for o in kops
                                if o["kind"] == "delete" and o["outcome"] != "fail"]
        else:
            sources = [o["ret"] if o["outcome"] == "ok" else INF for o in kops
                       if o["kind"] in ("put", "cas") and o["outcome"] != "fail"
                       and o["value"] == seen[0]]
        if not sources:
            continue  # a phantom: reported by check_phantoms
        latest = max(sources)
        later = [o for o in acked if o["call"] > latest]
        if later:
            w = max(later, key=lambda o: o["call"])
            anomalies.append({"kind": "lost-write", "key": key,
                              "detail": "acknowledged %s is not visible: final %s"
                              % (_describe(w), _describe(fin))})
    return anomalies


def check_replicas(meta):
    """After healing, in a cluster: the replicas of every partition reached one applied
    index (complete, every member present) and have the same digest there."""
    anomalies = []
    for p in (meta or {}).get("replicas") or []:
        reps = p.get("replicas", {})
        desc = ", ".join("n%s: applied %s digest %s items %s%s" % (
            nid, r.get("applied_index"), r.get("digest"), r.get("items"),
            "" if r.get("complete") else " (incomplete)") for nid, r in sorted(reps.items()))
        where = "partition %s" % p.get("partition")
        if not p.get("converged"):
            missing = [m for m in p.get("members", []) if str(m) not in reps]
            anomalies.append({"kind": "not-converged", "key": where,
                              "detail": "replicas not at one applied index after healing: %s%s"
                              % (desc or "none", "; no answer from member(s) %s" % missing
                                 if missing else "")})
        elif len(set(r.get("digest") for r in reps.values())) > 1:
            anomalies.append({"kind": "replica-divergence", "key": where,
                              "detail": "same applied index, different contents: " + desc})
    return anomalies


def check(ops, budget=200000, meta=None):
    """All checks over a history's ops (and, given the run's meta, its replica digests).
    Returns (anomalies, undecided keys, stats)."""
    anomalies = check_phantoms(ops) + check_lost_writes(ops) + check_replicas(meta)
    undecided = []
    by_key = defaultdict(list)
    for o in ops:
        if _takes_part(o):
            by_key[o["key"]].append(o)
    stats = {}
    for key in sorted(by_key):
        verdict, info = check_linearizable(by_key[key], budget)
        stats[key] = (verdict, len(by_key[key]), info.get("explored", 0))
        if verdict == "violation":
            anomalies.append({"kind": "not-linearizable", "key": key,
                              "detail": "linearized %d of %d definite ops; cannot place %s"
                              % (info["linearized"], info["of"],
                                 _describe(info["stuck_op"]))})
        elif verdict == "undecided":
            undecided.append(key)
    return anomalies, undecided, stats


def _is_write_ok(o):
    return o["kind"] in ("put", "cas", "delete") and o["outcome"] == "ok" and not o.get("final")


def recovery_times(ops, faults):
    """Per fault: seconds from its healing (restart, SIGCONT; its end when the record has
    no heal time) to the first acknowledged write completing after it, or None if there
    was none."""
    ok_rets = sorted(o["ret"] for o in ops if _is_write_ok(o))
    out = []
    for f in faults:
        heal = f.get("heal", f["end"])
        i = bisect.bisect_left(ok_rets, heal)
        out.append(ok_rets[i] - heal if i < len(ok_rets) else None)
    return out


def keys_writable_times(ops, faults):
    """Per fault: (seconds, key) - from the fault's start until every key had an
    acknowledged write invoked after that start, the slowest key; (None, key) when a key
    written before never was again. In a cluster this is how long the partitions the
    fault hit stayed unwritable; keys not written for a while by chance add noise."""
    by_key = defaultdict(list)
    for o in ops:
        if _is_write_ok(o):
            by_key[o["key"]].append((o["call"], o["ret"]))
    for v in by_key.values():
        v.sort()
    out = []
    for f in faults:
        worst, worst_key = 0.0, None
        for key, ws in by_key.items():
            if ws[0][0] > f["start"]:
                continue  # never written before the fault
            i = bisect.bisect_left(ws, (f["start"], -INF))
            if i == len(ws):
                worst, worst_key = None, key
                break
            t = min(r for c, r in ws[i:i + 50]) - f["start"]
            if t > worst:
                worst, worst_key = t, key
        out.append((worst, worst_key))
    return out


def report(ops, faults, meta, anomalies, undecided, stats, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p("== chaos report ==")
    if meta:
        p("run: %s" % ", ".join("%s=%s" % (k, meta[k]) for k in sorted(meta)
                                if k not in ("type", "replicas")))
    counts = defaultdict(lambda: defaultdict(int))
    by_node = defaultdict(lambda: defaultdict(int))
    for o in ops:
        kind = o["kind"]
        if kind == "read":
            kind = "final-read" if o.get("final") else (
                "strong-read" if o.get("consistent") else "eventual-read")
        outcome = o["outcome"]
        if _is_ccf(o):
            outcome = "fail(condition)"
        counts[kind][outcome] += 1
        by_node[o.get("node")][outcome] += 1
    p("operations: %d" % len(ops))
    for kind in sorted(counts):
        p("  %-14s %s" % (kind, "  ".join("%s=%d" % (k, v)
                                          for k, v in sorted(counts[kind].items()))))
    p("operations by node served:")
    for node in sorted(by_node, key=str):
        p("  node %-4s %s" % (node, "  ".join("%s=%d" % (k, v)
                                            for k, v in sorted(by_node[node].items()))))
    p("faults: %d" % len(faults))
    for f, rec, (kw, kkey) in zip(faults, recovery_times(ops, faults),
                                  keys_writable_times(ops, faults)):
        heal = f.get("heal", f["end"])
        p("  %-9s node %s%s  %7.2fs .. heal %7.2fs .. %7.2fs (recovered %.2fs after healing)"
          % (f["kind"], f.get("node"), " (%s)" % f["target"] if f.get("target") else "",
             f["start"], heal, f["end"], f["end"] - heal))
        p("            first write after healing %s; every key written again %s"
          % ("in %.3fs" % rec if rec is not None else "never",
             "%.2fs after the start (slowest %s)" % (kw, kkey) if kw is not None
             else "never (key %s)" % kkey))
        if f.get("detail"):
            p("            %s" % f["detail"])
    reps = (meta or {}).get("replicas")
    if reps is not None:
        p("replicas after healing: %d partitions" % len(reps))
        for r in reps:
            vals = r.get("replicas", {})
            p("  partition %-4s %s  %s" % (
                r.get("partition"), "converged" if r.get("converged") else "NOT converged",
                "  ".join("n%s@%s=%s/%s" % (nid, v.get("applied_index"),
                                             (v.get("digest") or "?")[:8], v.get("items"))
                          for nid, v in sorted(vals.items()))))
    p("keys checked for linearizability: %d" % len(stats))
    for key, (verdict, n, explored) in sorted(stats.items()):
        p("  %-8s %-10s %5d ops  %7d states explored" % (key, verdict, n, explored))
    if undecided:
        p("undecided (search budget exceeded): %s" % ", ".join(undecided))
    p("anomalies: %d" % len(anomalies))
    for a in anomalies:
        p("  [%s] key %s: %s" % (a["kind"], a["key"], a["detail"]))
    p("verdict: %s" % ("FAIL" if anomalies else "PASS"))


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Check a chaos history.")
    ap.add_argument("history")
    ap.add_argument("--budget", type=int, default=200000,
                    help="states explored per key before reporting it undecided")
    args = ap.parse_args(argv)
    try:
        ops, faults, meta = load(args.history)
    except (OSError, ValueError) as e:
        print("checker: %s" % e, file=sys.stderr)
        return 2
    anomalies, undecided, stats = check(ops, args.budget, meta)
    report(ops, faults, meta, anomalies, undecided, stats)
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
