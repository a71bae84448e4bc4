"""bench/fleetmodel.py: a discrete-event model of bench/fleets.py's fleets, for trying a
balancing rule in seconds instead of an hour (issue 27).

The live bench (bench/fleets.py) runs `accelnet sim` servers and real proxies on a shared
two-core machine: an hour for the table, and its figures move with whatever else runs. To
find *why* a rule loses affinity, and to try another, this file replays the same traces
(bench/fleettrace.py, the same seeds) through a model of the same fleet, in virtual time:

- a server is `accelnet sim`'s block model: <slots> requests in service, the rest queued
  inside it in arrival order; at admission the prompt's longest cached run of leading blocks
  is touched and the rest inserted into a block LRU of cache_blocks (block 0 most recent),
  the last partial block never cached; first token after latency + us_per_block x uncached
  blocks (+- jitter), then one token every token_ms;
- a prompt's blocks are named as the sim's chain hashes would be: the system prompt's blocks
  shared by every conversation on it, then the conversation's own (turn k+1 starts with turn
  k's whole blocks), then one partial block of its own;
- a balancer sees what the proxy sees: slots taken, its own prefix index (policy/prefix_index.c's
  clock-stamped estimate of the same size, filled when a request is sent, as llm_picked does:
  `--opt at_pick=0` fills it at the first token as the proxy did before, `--opt ix=2` makes
  it an exact LRU of what was routed, `ix=3` the servers' own caches; cache-aware: a block
  LRU), per-backend costs (the fitted line
  is replaced by the truth: the first cause of issue 27, the fit's timing, is fixed and the
  fit converges), and for `llm` the proxy's queue with its grants (admission.c: a freed slot
  first looks among the first 32 waiters for one whose prefix it holds, then serves the line;
  a waiter stops waiting for its home after max_wait_ms).

It measures what bench/fleets.py reports: goodput within the SLO (first token within 2 s),
TTFT p50/p90/p99 and block hits over the measured span, and, per rule, the spread of picks
over the servers. It predicts; the live bench decides. Agreement is checked by running both
on the same shape and rule (docs/benchmarks.md says how close they were).

The shapes are bench/fleets.py's, and `chat9`: scenario 9 (bench/bench.py's chat fleet and
bench/chattrace.py's trace, SLO 1 s, 20 s from a cold fleet).

Usage: /usr/bin/python3 bench/fleetmodel.py [--shape independent] [--loads 1.0,1.25,1.5]
                                            [--rules llm,haproxy] [--seeds 1,2,3]
"""
import argparse
import collections
import heapq
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleettrace  # noqa: E402

SLO_MS = 2000.0
WARMUP_S = 10.0
SECONDS = 40.0
LOOK_BEHIND = 32
NEW_SLACK = 1.10


class LRU:
    """A block LRU as kvcache.c keeps it."""

    def __init__(self, cap):
        self.cap, self.d = cap, collections.OrderedDict()

    def match(self, blocks):
        k = 0
        for b in blocks:
            if b not in self.d:
                break
            k += 1
        return k

    def admit(self, blocks):
        """Touch or insert blocks (block 0 most recent of all); returns the hit count."""
        hit = self.match(blocks)
        keep = blocks[:self.cap]
        for b in reversed(keep):
            if b in self.d:
                self.d.move_to_end(b)
            else:
                self.d[b] = None
        while len(self.d) > self.cap:
            self.d.popitem(last=False)
        return hit


class StampIndex:
    """The proxy's prefix index as policy/prefix_index.c keeps it: each block stamped with
    a clock reading when last used; one the clock has passed by <cap> counts as gone. The
    clock moves a tick per new block and, for a refreshed block of age a, a / cap (it passes
    the blocks younger than it); with <old>, as before issue 27's fix, new blocks only (under
    hits a block then outlives its place in the server's LRU). No set associativity."""

    def __init__(self, cap, old=False):
        self.cap, self.clock, self.d, self.old = cap, 0, {}, old

    def _fresh(self, b):
        s = self.d.get(b)
        return s is not None and self.clock - s < self.cap

    def match(self, blocks):
        k = 0
        for b in blocks:
            if not self._fresh(b):
                break
            k += 1
        return k

    def admit(self, blocks):
        hit = self.match(blocks)
        now, fresh, moved = self.clock, 0, 0
        for b in blocks[:self.cap]:
            at = self.d.get(b)
            if at is None or now - at >= self.cap:
                fresh += 1
            elif not self.old:
                moved += max(now - at, 0)
            self.d[b] = now + fresh + moved // self.cap
        self.clock += fresh + (moved + self.cap // 2) // self.cap
        return hit


class Server:
    def __init__(self, i, spec):
        self.i, self.spec = i, spec
        self.cache = LRU(spec["cache_blocks"])
        self.active, self.queue = 0, collections.deque()
        self.hits = self.misses = 0

    def all_miss_ms(self, nblocks, tokens):
        s = self.spec
        return s["latency_ms"] + nblocks * s["us_per_block"] / 1000 + tokens * s["token_ms"]


class Req:
    __slots__ = ("id", "t", "blocks", "tokens", "conv", "turn", "server", "first",
                 "queued", "work", "measured", "why", "pred_hit", "home", "declined")

    def __init__(self, rid, t, blocks, tokens, conv, turn, measured):
        self.id, self.t, self.blocks, self.tokens = rid, t, blocks, tokens
        self.conv, self.turn, self.measured = conv, turn, measured
        self.server = self.first = self.queued = self.declined = None
        self.work = 0.0
        self.why = ""
        self.pred_hit = 0
        self.home = None


# Scenario 9 (bench/bench.py CHAT_FLEET, bench/chattrace.py): 8 servers of 4 slots and 544
# blocks, 16 system prompts filling 70 % of the fleet's cache, SLO 1 s, 20 s runs measured
# whole from a cold fleet (bench.py --only 9 --chat-seconds 20)
CHAT9 = dict(name="chat9", stream=True, slo_ms=1000.0, seconds=20.0, warmup_s=0.0,
             sims=[dict(slots=4, cache_blocks=544, latency_ms=20, us_per_block=1000,
                        token_ms=5)] * 8)


def prompt_blocks(c, k, sysb, nbytes, block_bytes):
    """Turn k of conversation c as the sim's chain hashes name its blocks: the system prompt's
    (shared), the conversation's own, then one partial block of this turn's."""
    blocks = [("s", c["system"], j) if j < sysb else ("c", c["id"], j)
              for j in range(nbytes // block_bytes)]
    if nbytes % block_bytes:
        blocks.append(("p", c["id"], k))
    return blocks


def chat_trace(rate, seed):
    import chattrace
    sizes = chattrace.system_sizes()
    convs, events = chattrace.conversations(rate, CHAT9["seconds"], seed)
    out = []
    for n, (due, cid, k) in enumerate(events):
        c = convs[cid]
        sysb = sizes[c["system"]]
        blocks = prompt_blocks(c, k, sysb, chattrace.prompt_bytes(c, k, sysb),
                               chattrace.BLOCK_BYTES)
        out.append(Req(n, due, blocks, chattrace.MAX_TOKENS[(c["seed"] + k) % 3], cid, k,
                       True))
    return out


def chat_capacity():
    import chattrace
    f = CHAT9["sims"][0]
    ms, _ = chattrace.all_miss_ms(f["latency_ms"], f["us_per_block"], f["token_ms"])
    return len(CHAT9["sims"]) * f["slots"] * 1000 / ms


def trace(shape, rate, seed):
    """The requests of bench/fleets.py's trace at <rate> (the same calibrated draw)."""
    if shape["name"] == "chat9":
        return chat_trace(rate, seed)
    sizes = fleettrace.system_sizes(shape)
    convs, events, _ = fleettrace.calibrated(shape, rate, SECONDS, seed, WARMUP_S)
    out = []
    for n, (due, cid, k) in enumerate(events):
        c = convs[cid]
        sysb = sizes[c["system"]]
        blocks = prompt_blocks(c, k, sysb, fleettrace.prompt_bytes(c, k, sysb),
                               fleettrace.BLOCK_BYTES)
        out.append(Req(n, due, blocks, fleettrace.max_tokens(shape, c, k), cid, k,
                       due >= WARMUP_S))
    return out


# ---- the rules ------------------------------------------------------------------------


class Rule:
    """A balancer: pick(req, now, home_only) -> server index, 'wait' (queue for a busy one)
    or None (no free slot: queue)."""
    capped = True       # the proxy holds requests beyond each server's slots
    proxy_queue = True  # ... in its own queue (else they queue inside the servers)

    def __init__(self, fleet, opts):
        self.f, self.o = fleet, opts

    def first_token(self, r, s):
        pass

    def picked(self, r, s):
        pass

    def done(self, r, s):
        pass


class LeastConn(Rule):
    """HAProxy leastconn + maxconn 4 (and accelnet least-connections): the free server with
    the fewest requests, ties by the draw; a freed slot serves the head of the line."""

    def pick(self, r, now, home_only=False):
        free = [s for s in self.f.servers if s.active < s.spec["slots"]]
        if not free:
            return None
        m = min(s.active for s in free)
        return self.f.rng.choice([s for s in free if s.active == m]).i


class CacheAware(Rule):
    """A simple cache-aware router of the kind the reviewers wrote (SGLang's router's rule):
    no proxy queue; the server holding the longest prefix unless the load is unbalanced
    (max - min > 2 requests and max > 1.5 x min), then the least loaded; a request with no
    match to speak of (under half its blocks) goes to the least loaded."""
    capped = False
    proxy_queue = False

    def __init__(self, fleet, opts):
        super().__init__(fleet, opts)
        self.index = [LRU(s.spec["cache_blocks"]) for s in fleet.servers]

    def pick(self, r, now, home_only=False):
        sv = self.f.servers
        load = [s.active + len(s.queue) for s in sv]
        least = min(range(len(sv)), key=lambda i: (load[i], self.f.rng.random()))
        if max(load) - min(load) > 2 and max(load) > 1.5 * min(load):
            return least
        hits = [self.index[i].match(r.blocks) for i in range(len(sv))]
        best = max(range(len(sv)), key=lambda i: (hits[i], -load[i]))
        return best if hits[best] * 2 >= len(r.blocks) else least

    def picked(self, r, s):
        self.index[s].admit(r.blocks)


class Llm(Rule):
    """accelnet's balance: llm as lb_llm.c and admission.c have it (the model's constants
    are the servers' true ones)."""

    def __init__(self, fleet, opts):
        super().__init__(fleet, opts)
        n = len(fleet.servers)
        old = bool(opts.get("old", 0))
        ix = int(opts.get("ix", 1 if old else 0))  # 0: the clock, 1: the old clock, 2: an LRU
        # 3: the servers' own caches (an engine's KV events, without their delay)
        self.index = [s.cache if ix == 3 else LRU(s.spec["cache_blocks"]) if ix == 2 else
                      StampIndex(s.spec["cache_blocks"], ix == 1) for s in fleet.servers]
        self.ix_kind = ix
        # the index learns a prompt when it is sent (llm_picked), as the proxy does since
        # scenario 9's hits were looked into; at_pick=0: at its first token, as before
        self.at_pick = bool(opts.get("at_pick", 0 if old else 1))
        self.work = [[] for _ in range(n)]
        self.placed = [0] * n
        self.decode = [s.spec["token_ms"] * 24 * 1000 for s in fleet.servers]
        self.max_wait = opts.get("max_wait_ms", 2000)
        # declined=1: max_wait_ms counts from the first free slot the request declined for
        # its home (admission.c now); 0: from when it joined the line (before)
        self.declined = bool(opts.get("declined", 1))
        # old=1: as lb_llm.c and prefix_index.c were before issue 27's fix (no count of the
        # requests queued for a backend, no queue share of a missed block's work, an index
        # clock that only new blocks move)
        self.qaware = not opts.get("old", 0)
        self.qwait = self.qaware and opts.get("qwait", 1)  # count those waiting for a home
        # the queue's share of a miss: 2, those queued for that server at 1/slots and those
        # queued for none at 1/S (lb_llm.c now); 1, the whole queue at 1/S (before)
        self.qshare = self.qaware and opts.get("qshare", 2)
        self.waiting_for = [0] * n
        self.why = collections.Counter()

    def base(self, i):
        return self.f.servers[i].spec["latency_ms"] * 1000

    def block(self, i):
        return self.f.servers[i].spec["us_per_block"]

    def service(self, i):
        w = self.work[i]
        return sum(w) / len(w) if w else self.base(i) + self.decode[i]

    def expect(self, i, r, hit):
        s = self.f.servers[i]
        slots = s.spec["slots"]
        wait = 0.0
        if s.active >= slots:
            ahead = self.waiting_for[i] - (1 if getattr(r, "home", None) == i else 0)
            wait = (s.active - slots + 1 + (ahead if self.qwait else 0)) * \
                self.service(i) / slots
        miss = max(len(r.blocks) - hit, 0)
        cost = wait + self.base(i) + self.block(i) * miss
        if self.qshare == 2:  # those waiting for i: 1/slots of it; the homeless: 1/S
            tot = sum(x.spec["slots"] for x in self.f.servers)
            homeless = max(len(self.f.queue) - sum(self.waiting_for), 0)
            mine = self.waiting_for[i] - (1 if getattr(r, "home", None) == i else 0)
            cost += self.block(i) * miss * (mine / slots + homeless / tot)
        elif self.qshare:  # the work this adds delays whoever waits: 1/S of it each
            tot = sum(x.spec["slots"] for x in self.f.servers)
            cost += self.block(i) * miss * len(self.f.queue) / tot
        return cost

    def pick(self, r, now, home_only=False):
        sv = self.f.servers
        n = len(sv)
        hits = [self.index[i].match(r.blocks) for i in range(n)]
        r.pred_hit = hits
        start = self.f.rng.randrange(n)
        best = free_best = None
        bu = fu = 0.0
        for k in range(n):
            i = (start + k) % n
            us = self.expect(i, r, hits[i])
            if best is None or us < bu or (us == bu and sv[i].active < sv[best].active):
                best, bu = i, us
            if sv[i].active < sv[i].spec["slots"] and (
                    free_best is None or us < fu or
                    (us == fu and sv[i].active < sv[free_best].active)):
                free_best, fu = i, us
        since = r.declined if self.declined else r.queued
        waited = (now - since) * 1000 if since is not None else 0
        if home_only:
            return best if best == free_best and best is not None and hits[best] else "wait"
        if free_best is None:
            return None
        if best != free_best and waited < self.max_wait:
            self.set_home(r, best)
            if self.declined and r.declined is None:
                r.declined = now  # its clock starts: a free slot passed up
                self.f.at(now + (self.max_wait + 1) / 1000, "maxwait", r)
            return "wait"
        if not any(hits):
            for k in range(n):
                i = (start + k) % n
                if (sv[i].active < sv[i].spec["slots"] and self.placed[i] <
                        self.placed[free_best] and
                        self.expect(i, r, 0) <= fu * NEW_SLACK):
                    free_best = i
        return free_best

    def set_home(self, r, i):
        if r.home is not None:
            self.waiting_for[r.home] -= 1
        r.home = i
        if i is not None:
            self.waiting_for[i] += 1

    def picked(self, r, s):
        self.set_home(r, None)
        hit = self.index[s].match(r.blocks)
        self.placed[s] += len(r.blocks)
        if self.ix_kind != 3 and self.at_pick:
            self.index[s].admit(r.blocks)
        r.work = self.base(s) + self.block(s) * (len(r.blocks) - hit) + self.decode[s]
        self.work[s].append(r.work)

    def first_token(self, r, s):
        if self.ix_kind != 3 and not self.at_pick:
            self.index[s].admit(r.blocks)

    def done(self, r, s):
        self.work[s].remove(r.work)


class LlmOld(Llm):
    """balance: llm as it was before issue 27's fix."""

    def __init__(self, fleet, opts):
        super().__init__(fleet, dict(opts, old=1))


class Sticky(Rule):
    """An oracle for the arithmetic: each conversation keeps the server its first turn was
    sent to, chosen by the least committed work per unit of speed; queued in the servers."""
    capped = False
    proxy_queue = False

    def __init__(self, fleet, opts):
        super().__init__(fleet, opts)
        self.home, self.load = {}, [0.0] * len(fleet.servers)

    def pick(self, r, now, home_only=False):
        if r.conv not in self.home:
            sv = self.f.servers
            i = min(range(len(sv)), key=lambda i: (self.load[i] + 1) * sv[i].spec["us_per_block"])
            self.home[r.conv] = i
        self.load[self.home[r.conv]] += 1
        return self.home[r.conv]


RULES = {"sticky": Sticky, "llm": Llm, "llm-old": LlmOld, "haproxy": LeastConn, "cache-aware": CacheAware}


# ---- the fleet and its events ----------------------------------------------------------


class Fleet:
    def __init__(self, shape, rule, opts, seed):
        self.shape = shape
        self.servers = [Server(i, s) for i, s in enumerate(shape["sims"])]
        self.rng = random.Random(seed * 7919 + 17)
        self.rule = RULES[rule](self, opts)
        self.ev, self.seq = [], 0
        self.queue = []  # the proxy's line, in order
        self.picks = [0] * len(self.servers)

    def at(self, t, kind, *args):
        self.seq += 1
        heapq.heappush(self.ev, (t, self.seq, kind, args))

    # the server
    def server_take(self, s, r, now):
        """A request reaches server s: served now or queued inside it."""
        self.picks[s.i] += 1
        ix = getattr(self.rule, "index", None)
        r.pred_hit = ix[s.i].match(r.blocks) if ix else 0  # what the balancer expected
        self.rule.picked(r, s.i)
        if s.active < s.spec["slots"]:
            self.server_start(s, r, now)
        else:
            s.queue.append(r)

    def server_start(self, s, r, now):
        s.active += 1
        hit = s.cache.admit(r.blocks)
        r.why = hit  # what the server held
        full = len(r.blocks) - (1 if r.blocks and r.blocks[-1][0] == "p" else 0)
        h = min(hit, full)
        if r.measured:
            s.hits += h
            s.misses += full - h
        sp = s.spec
        ttft = (sp["latency_ms"] + sp["us_per_block"] * (len(r.blocks) - h) / 1000)
        ttft *= 1 + self.rng.uniform(-0.1, 0.1)
        end = now + (ttft + r.tokens * sp["token_ms"]) / 1000
        # a stream's first token; a whole answer's first byte comes with its end
        self.at(now + ttft / 1000 if self.shape["stream"] else end, "first", s.i, r)
        self.at(end, "end", s.i, r)

    # the proxy
    def send(self, r, i, now):
        r.server = i
        self.server_take(self.servers[i], r, now)

    def arrive(self, r, now):
        ru = self.rule
        if not ru.proxy_queue or not ru.capped:
            self.send(r, ru.pick(r, now), now)
            return
        i = ru.pick(r, now)
        if isinstance(i, int):
            self.send(r, i, now)
            return
        r.queued = now
        self.queue.append(r)
        if isinstance(ru, Llm) and not ru.declined:
            self.at(now + (ru.max_wait + 1) / 1000, "maxwait", r)
        self.grant(now, self_=r)

    def grant(self, now, self_=None):
        ru = self.rule
        while self.queue:
            head = self.queue[0]
            i = ru.pick(head, now)
            if isinstance(i, int):
                self.queue.pop(0)
                self.send(head, i, now)
                continue
            if i == "wait" and self_ is None:
                found = None
                for home_only in (True, False):
                    cands = self.queue[:LOOK_BEHIND] if home_only else \
                        self.queue[1:1 + LOOK_BEHIND]
                    for w in cands:
                        j = ru.pick(w, now, home_only)
                        if isinstance(j, int):
                            found = (w, j)
                            break
                        if j is None:
                            break
                    if found:
                        break
                if found:
                    self.queue.remove(found[0])
                    self.send(found[0], found[1], now)
                    continue
            break

    def run(self, reqs):
        for r in reqs:
            self.at(r.t, "arrive", r)
        while self.ev:
            now, _, kind, args = heapq.heappop(self.ev)
            if kind == "arrive":
                self.arrive(args[0], now)
            elif kind == "first":
                i, r = args
                r.first = now
                self.rule.first_token(r, i)
            elif kind == "end":
                i, r = args
                s = self.servers[i]
                s.active -= 1
                self.rule.done(r, i)
                if s.queue:
                    self.server_start(s, s.queue.popleft(), now)
                if self.rule.proxy_queue:
                    self.grant(now)
            elif kind == "maxwait":
                r = args[0]
                if r in self.queue:
                    i = self.rule.pick(r, now)
                    if isinstance(i, int):
                        self.queue.remove(r)
                        self.send(r, i, now)


def pct(vals, p):
    if not vals:
        return float("nan")
    v = sorted(vals)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def run_one(shape, rule, load, seed, opts):
    chat = shape["name"] == "chat9"
    cap = chat_capacity() if chat else fleettrace.arithmetic(shape)["capacity"]
    slo = shape.get("slo_ms", SLO_MS)
    span = shape["seconds"] - shape["warmup_s"] if chat else SECONDS - WARMUP_S
    reqs = trace(shape, cap * load, seed)
    f = Fleet(shape, rule, opts, seed)
    f.run(reqs)
    m = [r for r in reqs if r.measured]
    ttft = [((r.first - r.t) * 1000 if r.first is not None else 1e9) for r in m]
    good = sum(1 for x in ttft if x <= slo) / span
    hits = sum(s.hits for s in f.servers)
    tot = hits + sum(s.misses for s in f.servers)
    real = sum(r.why for r in m)
    return {"load": load, "rule": rule, "offered": len(m) / span,
            "predicted_hits": sum(r.pred_hit for r in m) / real if real else float("nan"),
            "goodput": good, "p50": pct(ttft, 50), "p90": pct(ttft, 90),
            "p99": pct(ttft, 99), "hits": hits / max(tot, 1),
            "slo": pct(ttft, 99) <= slo, "picks": f.picks}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="independent")
    ap.add_argument("--loads", default="0.5,1.0,1.25,1.5")
    ap.add_argument("--rules", default="llm-old,llm,haproxy,cache-aware",
                    help="of: " + ", ".join(RULES))
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--opt", action="append", default=[],
                    help="KEY=VALUE for the rule: llm's old=1 (as before issue 27's fix), "
                    "max_wait_ms=N, at_pick=0|1, ix=0|1|2|3, qwait=0|1, qshare=0|1")
    a = ap.parse_args()
    import fleets  # the shapes
    shape = CHAT9 if a.shape == "chat9" else fleets.SHAPES[a.shape]
    opts = {}
    for kv in a.opt:
        k, v = kv.split("=", 1)
        opts[k] = float(v)
    print(f"{'load':>5} {'rule':<14} {'offered':>7} {'good':>6} {'p50':>7} {'p90':>7} "
          f"{'p99':>7} {'hits':>5} slo pred/held picks")
    for load in [float(x) for x in a.loads.split(",")]:
        for rule in a.rules.split(","):
            rs = [run_one(shape, rule, load, int(s), opts) for s in a.seeds.split(",")]
            med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
            print(f"{load:5.2f} {rule:<14} {med('offered'):7.1f} {med('goodput'):6.1f} "
                  f"{med('p50'):7.0f} {med('p90'):7.0f} {med('p99'):7.0f} "
                  f"{med('hits'):5.0%} {sum(x['slo'] for x in rs)}/{len(rs)} "
                  f"{med('predicted_hits'):9.2f} {rs[0]['picks']}")


if __name__ == "__main__":
    main()
