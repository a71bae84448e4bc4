"""bench/requests_tail.py: the slowest requests of an active-active run taken apart (never a test).

`bench/active.py --samples DIR` keeps, per run, the load generator's line for every request
(`loadgen open --samples`: when it was due, how late it was sent, its TTFT from when it was
due, and what its response head said: the simulator's X-Sim-Wait-Ms, X-Sim-Service-Ms,
X-Sim-Cached-Blocks, X-Sim-Prompt-Blocks, and the proxy's X-Accelnet-Llm decision) and each
instance's access log (JSON lines, under the request id the load generator sent: queue_ms,
backend, ttfb_ms). This joins the two on the id and splits each request's TTFT into

- lag: due to sent (the load generator's own delay);
- queue: the wait in the instance's queue for a slot (access log queue_ms);
- sim wait: the time the simulator held it waiting behind its slots (X-Sim-Wait-Ms);
- prefill: the simulator's planned time to its first token (X-Sim-Service-Ms: its fixed
  latency, 1 ms a block it did not hold, the jitter);
- rest: what is left (the proxy's own handling, the connections, the loops' delays),

and the queue split by why: a pick said "wait for the busy backend holding the prompt"
(`;waited` in X-Accelnet-Llm), or no slot this instance may fill was free at all; and, of
the queue, the part during which the backend the request went to held fewer than its
max_concurrency requests from all instances together (a slot there was free while it waited:
from every request's time at its backend, in at due + lag + queue, out at its end),

for all requests and for the slowest 10 % and 20 % by TTFT, so that two variants' tails can be
compared term by term. Usage: /usr/bin/python3 bench/requests_tail.py DIR [DIR ...]
"""

import bisect
import glob
import json
import os
import statistics
import sys

TERMS = ("lag", "queue", "sim_wait", "prefill", "rest")


def load(d):
    """Every answered request of run directory <d>: a list of dicts (the loadgen's fields and
    the access log's, joined)."""
    logs = {}
    for k, path in enumerate(sorted(glob.glob(os.path.join(d, "access-*.log")))):
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                rid = e.get("request_id") or ""
                if rid.startswith("lg-"):
                    e["instance"] = k
                    logs[int(rid[3:])] = e
    out = []
    with open(os.path.join(d, "samples.tsv")) as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(head, line.rstrip("\n").split("\t")))
            if r.get("status") != "200" or float(r["ttft_ms"]) < 0:
                continue
            i = int(r["i"])
            e = logs.get(i, {})
            q = e.get("queue_ms")
            llm = r.get("llm", "-")
            reason = "-"
            for part in llm.split(",")[0].split(";"):
                if part.startswith("reason="):
                    reason = part[7:]
            x = {"i": i, "target": int(r["target"]), "due_ms": float(r["due_ms"]),
                 "ttft": float(r["ttft_ms"]), "lag": float(r["send_lag_ms"]),
                 "queue": float(q) if q is not None else 0.0, "logged": bool(e),
                 "sim_wait": max(0, int(r["sim_wait_ms"])),
                 "prefill": max(0, int(r["sim_service_ms"])),
                 "cached": int(r["cached_blocks"]), "prompt": int(r["prompt_blocks"]),
                 "backend": e.get("backend") or r.get("served_by"), "reason": reason,
                 "instance": e.get("instance", int(r["target"])),
                 "affinity": ";waited" in llm.split(",")[0],
                 "llm": llm}
            x["missed"] = max(0, x["prompt"] - x["cached"])
            x["rest"] = x["ttft"] - x["lag"] - x["queue"] - x["sim_wait"] - x["prefill"]
            # when it reached its backend, and when it let the slot go (ms after the start)
            x["t_in"] = x["due_ms"] + x["lag"] + x["queue"]
            x["t_out"] = x["due_ms"] + float(r["end_ms"])
            out.append(x)
    idle_while_queued(out)
    return out


def _occupancy(rs):
    """A backend's (event times, requests held after each) from its requests' times there."""
    ev = sorted([(r["t_in"], 1) for r in rs] + [(r["t_out"], -1) for r in rs])
    occ, n = [], 0
    for _, d in ev:
        n += d
        occ.append(n)
    return [t for t, _ in ev], occ


def idle_while_queued(reqs, cap=4):
    """Splits each queued request's wait, from every request's time at its backend (all
    instances together), into "idle_wait": the backend it went to held fewer than <cap> (a
    slot there was free while it waited), "other_free": it was full but another backend had
    a free slot, and "all_full": every backend was full."""
    by = {}
    for r in reqs:
        by.setdefault(r["backend"], []).append(r)
    occ = {b: _occupancy(rs) for b, rs in by.items()}
    # the fleet's timeline: the times where any backend's count changes
    allt = sorted({t for times, _ in occ.values() for t in times})
    counts = {b: [] for b in occ}
    for b, (times, o) in occ.items():
        k, cur = 0, 0
        for t in allt:
            while k < len(times) and times[k] <= t:
                cur = o[k]
                k += 1
            counts[b].append(cur)
    for b, rs in by.items():  # those waiting for the same backend when it began to wait
        q = sorted((r["t_in"] - r["queue"], r["t_in"], r["instance"]) for r in rs
                   if r["queue"] > 0.05)
        for r in rs:
            r["ahead_here"] = r["ahead_elsewhere"] = 0
            if r["queue"] <= 0.05:
                continue
            a = r["t_in"] - r["queue"]
            for s0, s1, inst in q:
                if s0 >= a:
                    break
                if s1 > a:
                    r["ahead_here" if inst == r["instance"] else "ahead_elsewhere"] += 1
    for r in reqs:
        r["idle_wait"] = r["other_free"] = r["all_full"] = 0.0
        a, z = r["t_in"] - r["queue"], r["t_in"]
        if z - a <= 0.05:
            continue
        k = bisect.bisect_right(allt, a)
        t = a
        while True:
            nxt = allt[k] if k < len(allt) and allt[k] < z else z
            i = k - 1
            own = counts[r["backend"]][i] if i >= 0 else 0
            span = nxt - t
            if own < cap:
                r["idle_wait"] += span
            elif any((counts[b][i] if i >= 0 else 0) < cap for b in counts):
                r["other_free"] += span
            else:
                r["all_full"] += span
            if nxt >= z:
                break
            t = nxt
            k += 1


def summarize(reqs, share):
    """The slowest <share> of <reqs> by TTFT (1.0: all): each term's mean, the share queued,
    the mean blocks missed, the reasons."""
    if not reqs:
        return {}
    s = sorted(reqs, key=lambda r: r["ttft"])
    tail = s[int(len(s) * (1 - share)):] if share < 1 else s
    out = {"n": len(tail), "ttft_from": tail[0]["ttft"], "ttft": statistics.mean(
        r["ttft"] for r in tail)}
    for t in TERMS:
        out[t] = statistics.mean(r[t] for r in tail)
    out["queued_share"] = sum(r["queue"] > 0.05 for r in tail) / len(tail)
    queued = [r["queue"] for r in tail if r["queue"] > 0.05]
    out["queue_when_queued"] = statistics.mean(queued) if queued else 0.0
    for k in ("idle_wait", "other_free", "all_full"):
        out[k] = statistics.mean(r.get(k, 0.0) for r in tail)
    q = [r for r in tail if r["queue"] > 0.05]
    aff = [r for r in q if r["affinity"]]
    out["affinity_share"] = len(aff) / len(q) if q else 0.0
    out["queue_affinity"] = sum(r["queue"] for r in aff) / len(tail)
    out["queue_noslot"] = sum(r["queue"] for r in q if not r["affinity"]) / len(tail)
    for k in ("ahead_here", "ahead_elsewhere"):  # over those that queued
        v = [r[k] for r in tail if r["queue"] > 0.05]
        out[k] = statistics.mean(v) if v else 0.0
    out["missed"] = statistics.mean(r["missed"] for r in tail)
    out["prompt"] = statistics.mean(r["prompt"] for r in tail)
    out["hit_share"] = 1 - sum(r["missed"] for r in tail) / max(1, sum(r["prompt"] for r in tail))
    reasons = {}
    for r in tail:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    out["reasons"] = {k: round(v / len(tail), 3) for k, v in
                      sorted(reasons.items(), key=lambda kv: -kv[1])}
    out["unlogged"] = sum(not r["logged"] for r in tail)
    return out


def decompose(d):
    """{"all": ..., "p80+": ..., "p90+": ...} of run directory <d>."""
    reqs = load(d)
    return {"all": summarize(reqs, 1.0), "p80+": summarize(reqs, 0.2),
            "p90+": summarize(reqs, 0.1)}


def rows(named):
    """Table rows of [(name, decompose(...)), ...]."""
    out = []
    for name, dec in named:
        for sl in ("all", "p80+", "p90+"):
            s = dec.get(sl)
            if not s:
                continue
            out.append([name, sl, str(s["n"]), f"{s['ttft_from']:.0f}", f"{s['ttft']:.0f}"]
                       + [f"{s[t]:.1f}" for t in TERMS]
                       + [f"{s['queued_share'] * 100:.0f} %", f"{s['queue_when_queued']:.0f}",
                          f"{s['idle_wait']:.1f} / {s['other_free']:.1f} / {s['all_full']:.1f}",
                          f"{s['ahead_here']:.2f} / {s['ahead_elsewhere']:.2f}",
                          f"{s['queue_affinity']:.1f} / {s['queue_noslot']:.1f} "
                          f"({s['affinity_share'] * 100:.0f} % of queued)",
                          f"{s['missed']:.1f}/{s['prompt']:.0f}",
                          " ".join(f"{k} {v * 100:.0f}%" for k, v in
                                   list(s["reasons"].items())[:3])])
    return (["run", "slice", "n", "TTFT from ms", "TTFT mean", "lag", "queue", "sim wait",
             "prefill", "rest", "queued", "queue if queued",
             "of queue: its backend not full / full, another not / all full",
             "queued for its backend before it: here / at other instances",
             "queue: waiting for a busy home (llm wait) / for any slot here", "missed/prompt blocks",
             "reasons"], out)


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench
    named = [(os.path.basename(d.rstrip("/")), decompose(d)) for d in sys.argv[1:]]
    print(bench.table(*rows(named)))


if __name__ == "__main__":
    main()
