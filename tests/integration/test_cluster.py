"""Many instances, one policy (issue 16, cluster:): three proxies sharing one Redis enforce
one per-tenant rate between them; with Redis stopped they keep serving, each at 1/3 of the
limit, and say so in their metrics; with Redis back they share again; a token budget spent
on one instance is spent on the others; balance: consistent-hash, prefix-affinity, llm with
kv_events and llm learning from routing (shared through a Redis stream) send one
conversation to one backend through any instance, and llm a new prompt to one backend through
instances that never talk; a backend's max_concurrency is dealt out
between the instances (never one free slot to two, the slots where the requests wait); a
password, a Redis that never answers, a Redis that refuses the slots' wakes, and a reload; bad
cluster: sections are refused with FILE:LINE:COL."""

# Alone under run.py -j: these count requests passed in a window against a rate (within 5 %, or
# a few requests), and the instances share it through Redis every sync_ms: on a machine full of
# other tests a late sync passes requests the limit would refuse. The others count routing
# choices and refusals, which load only slows.
SERIAL = {"test_three_instances_enforce_one_rate", "test_redis_stopped_local_limits_then_back",
          "test_token_budget_spent_on_one_is_spent_on_all", "test_password_and_a_wrong_one",
          "test_a_redis_that_never_answers_blocks_no_request"}

import http.client
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

from harness import (BIN, Skip, free_port, pool_yaml, prom_samples, metrics_text, sim_stats,
                     wait_until)

RATE = 20  # per second, per tenant, all instances together
BURST = 20
WINDOW = 15  # seconds of load in the rate test


def _redis(env, port=None, extra=()):
    """redis-server on a free loopback port, nothing saved; killed by env.cleanup."""
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(exe):
        raise Skip("no redis-server (scripts/deps.sh installs it)")
    port = port or free_port()
    p = env.start([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", env.dir, *extra], "redis", wait_port=port)
    p.port = port
    return p


def _instances(env, redis_port, body, n=3, sync_ms=100, extra=""):
    """<n> proxies with the same pools and routes (<body>) and cluster: on <redis_port>."""
    procs = []
    for i in range(n):
        port, admin = free_port(), free_port()
        text = (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
                f"admin:\n  address: 127.0.0.1:{admin}\n"
                f"cluster: {{redis: 127.0.0.1:{redis_port}, sync_ms: {sync_ms}, "
                f"timeout_ms: 300{extra}}}\n" + body)
        path = env.write(f"proxy{i}.yaml", text)
        p = env.start([BIN, "proxy", "-c", path], f"proxy{i}", wait_port=port)
        p.port, p.admin = port, admin
        procs.append(p)
    return procs


def _cluster(p):
    got = prom_samples(metrics_text(p.admin))
    return {k[0]: v for k, v in got.items() if k[0].startswith("accelnet_cluster_")}


def _all_see(procs, up, instances=None):
    def ok():
        for p in procs:
            c = _cluster(p)
            if c.get("accelnet_cluster_redis_up") != up:
                return False
            if instances and c.get("accelnet_cluster_instances") != instances:
                return False
        return True
    wait_until(ok, f"every instance to show accelnet_cluster_redis_up {up}", timeout=20)


def _route(extra=""):
    return ("routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
            f"    rate_limit: {{per_tenant: {RATE}/s, burst: {BURST}{extra}}}\n")


def _load(procs, seconds, tenant="t1"):
    """One client per instance sending <tenant>'s requests one after another (far faster than
    the rate) for <seconds>: (passed, statuses seen, the seconds it took: from the first
    request sent to the last, so that a client thread that starts late or a last answer that
    comes late on a loaded machine does not count as time the limiter had to refill)."""
    passed = [0] * len(procs)
    seen = set()
    sent = []  # the time each request was sent
    start = threading.Barrier(len(procs) + 1)

    def run(i, port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        start.wait()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sent.append(time.monotonic())
            c.request("GET", "/x", headers={"X-Tenant": tenant})
            r = c.getresponse()
            r.read()
            seen.add(r.status)
            if r.status == 200:
                passed[i] += 1
            time.sleep(0.003)
        c.close()

    ts = [threading.Thread(target=run, args=(i, p.port)) for i, p in enumerate(procs)]
    for t in ts:
        t.start()
    start.wait()
    for t in ts:
        t.join()
    return passed, seen, max(sent) - min(sent)


def _setup(env, body=None, **sim_opts):
    sim = env.sim("a", latency_ms=0, token_ms=0, **sim_opts)
    redis = _redis(env)
    procs = _instances(env, redis.port, "pools:\n" + pool_yaml("p", [sim.port]) +
                       (body or _route()))
    _all_see(procs, 1, instances=3)
    return sim, redis, procs


def test_three_instances_enforce_one_rate(env):
    sim, redis, procs = _setup(env)
    passed, seen, took = _load(procs, WINDOW)
    want = RATE * took + BURST
    total = sum(passed)
    assert abs(total - want) <= 0.05 * want, (total, want, passed)
    assert seen == {200, 429}, seen
    # each instance passed a part: one rate between them, not one each
    assert all(n > 0 for n in passed), passed
    for p in procs:
        assert _cluster(p)["accelnet_cluster_sync_failures_total"] == 0


def test_redis_stopped_local_limits_then_back(env):
    sim, redis, procs = _setup(env)
    passed, seen, took = _load(procs, 4)
    env.stop(redis, signal.SIGKILL)
    _all_see(procs, 0)
    for p in procs:
        assert _cluster(p)["accelnet_cluster_instances"] == 3  # as Redis last counted
        assert "enforced here alone at 1/3" in env.log(p), env.log(p)
    # they keep serving, each at a third of the rate: about one rate together, never three
    passed, seen, took = _load(procs, 8)
    total = sum(passed)
    assert seen <= {200, 429} and 200 in seen, seen
    assert total <= RATE * took + BURST + 3, (total, took, passed)
    assert total >= 0.9 * RATE * took, (total, took, passed)
    assert all(n > 0 for n in passed), passed
    # Redis back (empty) on the same port: they share again, without charging the outage
    _redis(env, port=redis.port)
    _all_see(procs, 1, instances=3)
    for p in procs:
        assert "limits are shared through Redis" in env.log(p).split("enforced here alone")[-1]
    passed, seen, took = _load(procs, 8)
    total = sum(passed)
    assert 0.95 * RATE * took <= total <= 1.05 * (RATE * took + BURST), (total, took, passed)


def test_token_budget_spent_on_one_is_spent_on_all(env):
    # one token a second: the test's own time hardly refills it
    route = ("routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
             "    rate_limit: {tokens_per_minute: 60, token_burst: 600, "
             "default_max_tokens: 100}\n")
    # the sim answers max_tokens tokens: a request costs what it reserved
    sim, redis, procs = _setup(env, route, tokens=100)
    body = json.dumps({"prompt": "hi", "max_tokens": 100})

    def post(p):
        c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        c.request("POST", "/v1/completions", body=body,
                  headers={"Content-Type": "application/json", "X-Tenant": "big"})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status

    # 108 tokens a request (the prompt's estimate, 8, and max_tokens): a burst of 600 is five;
    # three instances each with its own budget would pass three times that
    passed, t0 = [0, 0, 0], time.monotonic()
    i = 0
    while time.monotonic() - t0 < 3:
        if post(procs[i % 3]) == 200:
            passed[i % 3] += 1
        i += 1
        time.sleep(0.02)
    assert 4 <= sum(passed) <= 7, passed
    assert i > 60  # far more were asked


def test_password_and_a_wrong_one(env):
    sim = env.sim("a", latency_ms=0, token_ms=0)
    redis = _redis(env, extra=("--requirepass", "s3cret-pw"))
    good = env.write("pw", "s3cret-pw\n")
    bad = env.write("badpw", "guess\n")
    body = "pools:\n" + pool_yaml("p", [sim.port]) + _route()
    ok = _instances(env, redis.port, body, n=1, extra=f", password_file: {good}")
    _all_see(ok, 1, instances=1)
    no = _instances(env, redis.port, body, n=1, extra=f", password_file: {bad}")
    wait_until(lambda: "enforced here alone" in env.log(no[0]), "the refusal in the log")
    log = env.log(no[0])
    assert "WRONGPASS" in log or "invalid password" in log, log
    assert "guess" not in log and "s3cret" not in log  # the password is never logged
    assert _cluster(no[0])["accelnet_cluster_redis_up"] == 0
    # it serves all the same, with its limits its own
    passed, seen, took = _load(no, 2)
    assert seen == {200, 429}, seen


def test_a_redis_that_never_answers_blocks_no_request(env):
    """A peer that accepts and then says nothing (a hung Redis, a black hole): the sync times
    out on its own thread; the requests never wait on it."""
    sim = env.sim("a", latency_ms=0, token_ms=0)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    env.on_cleanup.append(hole.close)
    procs = _instances(env, hole.getsockname()[1], "pools:\n" + pool_yaml("p", [sim.port]) +
                       _route(), n=1)
    wait_until(lambda: _cluster(procs[0])["accelnet_cluster_sync_failures_total"] >= 1,
               "a timed-out connect")
    assert _cluster(procs[0])["accelnet_cluster_redis_up"] == 0
    passed, seen, took = _load(procs, 3)
    assert seen == {200, 429}, seen
    # alone (Redis never counted anyone): the whole limit
    assert abs(passed[0] - (RATE * took + BURST)) <= 0.05 * (RATE * took + BURST), (passed, took)


def _debt_ms(redis):
    """The longest debt of a shared bucket in <redis> now: its key's PTTL, which is the debt
    plus a second (cluster.c's charge script)."""
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    keys = subprocess.run([cli, "-p", str(redis.port), "--scan", "--pattern", "accelnet:rl:*"],
                          capture_output=True, text=True, check=True).stdout.split()
    return max([int(subprocess.run([cli, "-p", str(redis.port), "PTTL", k],
                                   capture_output=True, text=True, check=True).stdout) - 1000
                for k in keys] or [0])


def test_a_reload_keeps_the_shared_budget(env):
    """SIGHUP builds the limits afresh, but the budget lives in Redis: a tenant that spent
    its burst has still spent it after a reload, and the instance stays one of three."""
    sim, redis, procs = _setup(env, _route().replace(f"{RATE}/s, burst: {BURST}",
                                                     "1/m, burst: 3"))
    p = procs[0]
    # spend the whole burst (3 minutes' worth) through the three instances (each may spend a
    # third of what the shared bucket holds)
    k = [0]

    def spent():
        k[0] += 1
        _get_status(procs[k[0] % 3], "t9")
        return _debt_ms(redis) >= 170000
    wait_until(spent, "the shared bucket spent")
    path = os.path.join(env.dir, "proxy0.yaml")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("sync_ms: 100", "sync_ms: 50"))
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "(configuration generation 1)" in env.log(p), "generation 1")
    wait_until(lambda: _cluster(p).get("accelnet_cluster_redis_up") == 1, "the new sync")
    # the new generation's buckets learn the shared one at their first sync: refused (a key
    # new to it holds a third of the burst until then: one request may pass first)
    got = [_get_status(p, "t9") for _ in range(5)]
    assert got.count(200) <= 1 and got[-1] == 429, got
    assert all(_get_status(o, "t9") == 429 for o in procs[1:])
    _all_see(procs, 1, instances=3)


def _get_status(p, tenant):
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    c.request("GET", "/x", headers={"X-Tenant": tenant})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def _served_by(p, body):
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    assert r.status == 200, r.status
    return r.getheader("X-Served-By")


def test_affinity_holds_across_instances(env):
    """consistent-hash (by a header) and prefix-affinity (by the prompt's prefix) pick by
    hashing over the pool's backends: the same backends give the same choice on every
    instance, so a conversation sent through any of them lands on one backend."""
    sims = [env.sim(n, latency_ms=0, token_ms=0) for n in "abcd"]
    ports = [s.port for s in sims]
    redis = _redis(env)
    body = ("pools:\n" + pool_yaml("ch", ports, balance="consistent-hash",
                                   extra="    hash: {key: 'header:X-Session'}") +
            pool_yaml("pa", ports, balance="prefix-affinity") +
            "routes:\n  - match: {path_prefix: /ch/}\n    pool: ch\n"
            "  - match: {path_prefix: /v1/}\n    pool: pa\n")
    procs = _instances(env, redis.port, body)
    _all_see(procs, 1, instances=3)
    for conv in range(8):
        msgs = [{"role": "system", "content": f"conversation {conv} " + "x" * 300}]
        where = set()
        for turn in range(6):
            msgs.append({"role": "user", "content": f"turn {turn}"})
            where.add(_served_by(procs[turn % 3], {"model": "m", "messages": msgs}))
        assert len(where) == 1, (conv, where)
    for sess in range(8):
        where = set()
        for turn in range(6):
            p = procs[turn % 3]
            c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
            c.request("GET", f"/ch/t{turn}", headers={"X-Session": f"s{sess}"})
            r = c.getresponse()
            r.read()
            c.close()
            where.add(r.getheader("X-Served-By"))
        assert len(where) == 1, (sess, where)


def _chat(k, turns=1):
    system = f"System prompt {k}: " + f"you are assistant number {k}, answer with care. " * 12
    msgs = [{"role": "system", "content": system}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"question {t}"})
    return {"model": "m", "messages": msgs}


def test_llm_with_kv_events_holds_affinity_across_instances(env):
    """balance: llm with kv_events: every instance subscribes to every engine's KV events,
    so each holds the same index, and a conversation whose turns arrive at different
    instances follows its cached prefix to one backend. A missed block costs the simulators
    10 ms (the prompts are ~10 blocks): the cache is worth more than the noise of a busy or
    sanitized build, whose TTFT scatter at 1 ms a block can fit the per-block cost at 0 (then
    a cached prefix rightly counts for nothing)."""
    ports = [free_port() for _ in range(3)]
    sims = [env.sim(f"s{i}", latency_ms=1, jitter=0, tokens=1, token_ms=0, cache_blocks=4096,
                    block_bytes=64, prefill_us_per_block=10000,
                    kv_events=f"tcp://127.0.0.1:{ports[i]}") for i in range(3)]
    lines = ["pools:", "  - name: gpu", "    balance: llm",
             "    llm: {block_bytes: 64, cache_blocks: 4096}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4, "
              f"kv_events: 'tcp://127.0.0.1:{p}'}}" for s, p in zip(sims, ports)]
    redis = _redis(env)
    procs = _instances(env, redis.port, "\n".join(lines) + "\n")

    def blocks(p):
        st = json.loads(_get(p.admin, "/status"))
        return {b["address"]: b["kv_events"]["blocks"] for b in st["pools"][0]["backends"]}

    # the subscriptions reach the sims some time after the start: warm-up prompts (through
    # every instance) until each instance has heard stored blocks from every simulator
    k = [0]

    def all_heard():
        k[0] += 1
        _served_by(procs[k[0] % 3], _chat(1000 + k[0]))
        return all(all(blocks(p).values()) for p in procs)
    wait_until(all_heard, "every instance hearing every simulator's KV events", timeout=30)
    for conv in range(6):
        before = {p.port: blocks(p) for p in procs}
        home = _served_by(procs[conv % 3], _chat(conv))
        addr = next(f"127.0.0.1:{s.port}" for s in sims if s.name == f"sim-{home}")
        # the engine's stored events reach every instance: then the next turns, elsewhere
        wait_until(lambda: all(blocks(p)[addr] > before[p.port][addr] for p in procs),
                   "the stored blocks in every instance's index")
        for turn in range(1, 4):
            got = _served_by(procs[(conv + turn) % 3], _chat(conv, turns=turn + 1))
            assert got == home, (conv, turn, got, home)


def test_llm_learned_prefixes_are_shared_through_redis(env):
    """balance: llm without kv_events learns from the prompts it routes; through Redis each
    instance learns what the others routed, so a conversation whose turns arrive at different
    instances goes to one backend."""
    # simulators with a prefix cache: a prompt they hold answers in 5 ms, others in 200
    sims = [env.sim(f"s{i}", latency_ms=200, cache_hit_ms=5, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(3)]
    lines = ["pools:", "  - name: gpu", "    balance: llm", "    llm: {block_bytes: 64}",
             "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4}}" for s in sims]
    redis = _redis(env)
    procs = _instances(env, redis.port, "\n".join(lines) + "\n")
    _all_see(procs, 1, instances=3)
    asked = [0]

    def settled():
        """Every prompt answered has been sent, and taken in by the two other instances."""
        cs = [_cluster(p) for p in procs]
        sent = sum(c["accelnet_cluster_prefixes_sent_total"] for c in cs)
        got = sum(c["accelnet_cluster_prefixes_received_total"] for c in cs)
        return sent == asked[0] and got == 2 * sent

    def turn(p, body):
        at = _served_by(p, body)
        asked[0] += 1
        wait_until(settled, "the prompt reaching the other instances")
        return at
    def index_of(p, name):
        st = json.loads(_get(p.admin, "/status"))
        addr = next(f"127.0.0.1:{x.port}" for x in sims if x.name == f"sim-{name}")
        return next(b["llm_index_blocks"] for b in st["pools"][0]["backends"]
                    if b["address"] == addr)
    homes = set()
    for conv in range(6):
        home = turn(procs[conv % 3], _chat(conv))
        if home not in homes:  # the others learned it: their index of that backend grew
            assert all(index_of(p, home) > 0 for p in procs), home
        # the other two have taken the prompt in: the next turns go through them
        for t in range(1, 4):
            at = turn(procs[(conv + t) % 3], _chat(conv, turns=t + 1))
            assert at == home, (conv, t, at, home)
        homes.add(home)
    for p in procs:
        c = _cluster(p)
        assert c["accelnet_cluster_prefixes_sent_total"] >= 6, c


def test_llm_learned_prefixes_are_shared_whole(env):
    """A prompt longer than one feed entry (64 blocks) reaches the other instances whole: their
    index of its backend holds every block of it, as the instance that routed it does, so a
    long shared prompt's later turns weigh the same on every instance (before, the others
    learned its first 64 blocks only, and an instance's own longer match elsewhere won)."""
    sims = [env.sim(f"s{i}", latency_ms=0, token_ms=0, tokens=1) for i in range(2)]
    lines = ["pools:", "  - name: gpu", "    balance: llm", "    llm: {block_bytes: 16}",
             "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4}}" for s in sims]
    redis = _redis(env)
    procs = _instances(env, redis.port, "\n".join(lines) + "\n", n=2)
    _all_see(procs, 1, instances=2)
    body = {"model": "m", "messages": [{"role": "system", "content": "w" * (16 * 200)},
                                       {"role": "user", "content": "hello"}]}
    home = _served_by(procs[0], body)
    addr = next(f"127.0.0.1:{x.port}" for x in sims if x.name == f"sim-{home}")

    def index(p):
        st = json.loads(_get(p.admin, "/status"))
        return next(b["llm_index_blocks"] for b in st["pools"][0]["backends"]
                    if b["address"] == addr)
    own = index(procs[0])
    assert own > 200, own
    wait_until(lambda: index(procs[1]) == own,
               f"the other instance's index of {home} to hold all {own} blocks")


def test_llm_a_prompt_reaches_the_other_instances_while_it_is_prefilled(env):
    """An instance shares a prompt when it sends it, not when its answer comes: an engine
    takes a prompt in as it arrives, so the same prefix sent meanwhile through another
    instance belongs on the same backend. Shared only at the answer (as before), the others
    learned it a whole prefill late, and through three instances scenario 9 kept 60 % of its
    blocks cached where one instance kept 82 % (docs/benchmarks.md, active-active)."""
    sims = [env.sim(f"s{i}", latency_ms=4000, token_ms=0, tokens=1) for i in range(2)]
    lines = ["pools:", "  - name: gpu", "    balance: llm", "    llm: {block_bytes: 16}",
             "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4}}" for s in sims]
    redis = _redis(env)
    procs = _instances(env, redis.port, "\n".join(lines) + "\n", n=2, sync_ms=10)
    _all_see(procs, 1, instances=2)
    system = "a long shared system prompt " * 20

    def body(q):
        return {"model": "m", "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": q}]}

    def held(p):
        st = json.loads(_get(p.admin, "/status"))
        return {b["address"]: b["llm_index_blocks"] for b in st["pools"][0]["backends"]}
    got = {}
    first = threading.Thread(target=lambda: got.update(first=_served_by(procs[0], body("a"))))
    first.start()
    try:
        # the other instance learns the prompt's home while its prefill (4 s) runs
        wait_until(lambda: any(held(procs[1]).values()),
                   "the other instance to learn the prompt", timeout=3.0)
        assert first.is_alive(), "answered already: the test proves nothing"
        second = _served_by(procs[1], body("b"))
    finally:
        first.join()
    assert second == got["first"], (got, second)


def test_llm_a_new_prompt_goes_to_one_backend_through_instances_that_never_talk(env):
    """Two instances with no cluster: (as while Redis is away) each learn alone, yet a new
    prompt, one no backend holds, goes to the same backend through either: balance: llm ranks
    the backends about as quick and as loaded by a hash of the prompt's first block and each
    backend's address (rendezvous), where before each instance drew its own (or sent it where
    it had itself sent the fewest blocks), and the three instances of scenario 9 placed one
    new prompt on three backends while Redis was away (docs/benchmarks.md, active-active)."""
    sims = [env.sim(f"s{i}", latency_ms=100, jitter=0, token_ms=0, tokens=1) for i in range(4)]
    lines = ["pools:", "  - name: gpu", "    balance: llm", "    llm: {block_bytes: 64}",
             "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4}}" for s in sims]
    procs = []
    for i in range(2):
        port = free_port()
        path = env.write(f"alone{i}.yaml", f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
                         + "\n".join(lines) + "\n")
        procs.append(env.start([BIN, "proxy", "-c", path], f"proxy{i}", wait_port=port))
        procs[-1].port = port
    for k in range(6):  # each one new to both: neither has sent it before, nor heard of it
        a = _served_by(procs[0], _chat(k))
        b = _served_by(procs[1], _chat(k))
        assert a == b, (k, a, b)


def _post_one(p):
    """One completion request to instance <p>: its status."""
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=30)
    c.request("POST", "/v1/completions", body=b'{"model": "m", "prompt": "hi"}',
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def _eligible(p):
    """How many backends instance <p> counts as eligible now (accelnet_backend_eligible)."""
    m = prom_samples(metrics_text(p.admin))
    return [v for k, v in m.items() if k[0] == "accelnet_backend_eligible"][0]


def _queue(p, what):
    """Instance <p>'s accelnet_pool_queue_<what>_total, summed over its pools."""
    m = prom_samples(metrics_text(p.admin))
    return sum(v for k, v in m.items() if k[0] == f"accelnet_pool_queue_{what}_total")


def test_a_backends_slots_are_counted_across_instances(env):
    """max_concurrency is the backend's: with cluster: each instance counts the requests the
    others have in flight to a backend (sent every sync), so a backend of one slot busy with
    one instance's request is full for the others, whose requests wait in their own queue
    for it (not inside the backend) and go once it is free again."""
    sim = env.sim("a", latency_ms=1500, token_ms=0, slots=1)
    redis, procs = _capped(env, sim, cap=1, n=2, sync_ms=50)
    got = []

    def send(p):
        got.append(_post_one(p))

    first = threading.Thread(target=send, args=(procs[0],))
    first.start()
    wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first request at the backend")
    wait_until(lambda: _eligible(procs[1]) == 0,
               "the other instance to count the backend's one slot as taken")
    second = threading.Thread(target=send, args=(procs[1],))
    second.start()
    wait_until(lambda: _queue(procs[1], "enqueued") == 1,
               "the other instance's request to wait in its queue")
    st = sim_stats(sim.port)
    assert st["active"] == 1 and st["waiting"] == 0 and st["completions"] == 0, st
    first.join()
    second.join()
    assert got == [200, 200], got
    assert _queue(procs[1], "granted") == 1
    assert sim_stats(sim.port)["completions"] == 2
    # Redis gone: each instance keeps a slot of its own (what the others held of late is
    # smoothed, never all of them), so every request is still answered
    redis.kill()
    redis.wait()
    _all_see(procs, 0)
    for p in procs:
        send(p)
    assert got == [200] * 4, got


def _capped(env, sim, cap, n, sync_ms, redis=None, queue_ms=20000):
    """<n> instances sharing a Redis (<redis>, or a new one), one pool of <sim> with
    max_concurrency <cap> and a queue of <queue_ms>."""
    redis = redis or _redis(env)
    procs = _instances(env, redis.port, "pools:\n" + pool_yaml(
        "p", [sim.port], extra=f"    queue: {{timeout_ms: {queue_ms}}}").replace(
        f"127.0.0.1:{sim.port}", f"127.0.0.1:{sim.port}, max_concurrency: {cap}") +
        "routes:\n  - pool: p\n", n=n, sync_ms=sync_ms)
    _all_see(procs, 1, instances=n)
    return redis, procs


def _post_all(procs, each=1, prompt="hi"):
    """<each> requests to every instance in <procs>, all sent at once: their statuses."""
    got = []
    go = threading.Barrier(len(procs) * each)

    def send(p):
        c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=60)
        go.wait()
        c.request("POST", "/v1/completions", body=json.dumps(
            {"model": "m", "prompt": prompt}).encode(),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        got.append(r.status)
    ts = [threading.Thread(target=send, args=(p,)) for p in procs for _ in range(each)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got


def test_two_instances_never_fill_one_free_slot_at_once(env):
    """Redis deals a backend's slots out between the instances, so a free slot is one
    instance's, never two's: requests sent at the same moment to three instances in front
    of a backend of two slots never put more than two inside it, though each instance sees
    the backend idle (before, each counted the others' requests of the last sync, saw two
    free slots and sent its own: three at once). The simulator has room for more than the
    cap, so that what passes the cap shows in its count of requests in service."""
    sim = env.sim("a", latency_ms=400, token_ms=0, slots=8)
    _, procs = _capped(env, sim, cap=2, n=3, sync_ms=200)
    for _ in range(2):
        got = _post_all(procs)
        assert got == [200] * 3, got
    st = sim_stats(sim.port)
    assert st["completions"] == 6, st
    assert st["max_active"] <= 2, st


def test_a_backends_slots_follow_the_waiting_requests(env):
    """The slots go where the requests wait: with every request at one instance, that
    instance is dealt all of a backend's slots (the others, idle, keep none), so it fills
    the backend alone as one instance would; sent to all three, all are served and the
    backend is never over its cap."""
    sim = env.sim("a", latency_ms=300, token_ms=0, slots=8)
    _, procs = _capped(env, sim, cap=3, n=3, sync_ms=20)
    got = _post_all(procs[:1], each=6)
    assert got == [200] * 6, got
    assert sim_stats(sim.port)["max_active"] == 3
    got = _post_all(procs, each=4)
    assert got == [200] * 12, got
    st = sim_stats(sim.port)
    assert st["completions"] == 18 and st["max_active"] == 3, st


def test_a_slot_let_go_reaches_another_instances_waiter_at_once(env):
    """A slot one instance lets go reaches a request waiting for it at another instance at
    once, not at the instances' next ticks: the one that lets it go tells Redis at once, and
    Redis wakes the one whose request waits. With sync_ms 10000 (a tick every 2.5 s) the
    waiting request's queue.timeout_ms of 1 s is ample; before, the slot reached it only at
    the holder's next tick and then the waiter's (0 to 5 s: 503 nine times in ten)."""
    sim = env.sim("a", latency_ms=300, token_ms=0, slots=8)
    redis, procs = _capped(env, sim, cap=1, n=2, sync_ms=10000, queue_ms=1000)
    got = []

    def send(p):
        got.append(_post_one(p))

    first = threading.Thread(target=send, args=(procs[0],))
    first.start()
    wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first request at the backend")
    wait_until(lambda: _eligible(procs[1]) == 0,
               "the other instance to count the backend's one slot as taken")
    second = threading.Thread(target=send, args=(procs[1],))
    second.start()
    first.join()
    second.join()
    assert got == [200, 200], got
    assert _queue(procs[1], "enqueued") == 1 and _queue(procs[1], "granted") == 1
    st = sim_stats(sim.port)
    assert st["completions"] == 2 and st["max_active"] == 1, st


def test_a_freed_slot_goes_to_the_oldest_waiter_at_any_instance(env):
    """The instances' queues are served as one line: a backend's slot freed at one instance
    goes to the request that has waited longest for it at any instance, not to a newer one
    waiting at the instance that let it go. Here the backend's one slot is busy with a
    request through A; a request waits for it at B, then another at A: B's, the older, is
    answered first (before, A's own queue took the slot back at once: A's first)."""
    sim = env.sim("a", latency_ms=400, token_ms=0, slots=8)
    redis, procs = _capped(env, sim, cap=1, n=2, sync_ms=10000)
    done = []

    def send(p, name):
        done.append((name, _post_one(p)))

    a, b = procs
    ts = []
    for p, name in ((a, "first"), (b, "older"), (a, "newer")):
        was = _queue(p, "enqueued")
        ts.append(threading.Thread(target=send, args=(p, name)))
        ts[-1].start()
        if name == "first":
            wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first at the backend")
        else:
            wait_until(lambda: _queue(p, "enqueued") == was + 1, f"the {name} one to wait")
    for t in ts:
        t.join()
    assert done == [("first", 200), ("older", 200), ("newer", 200)], done
    assert sim_stats(sim.port)["max_active"] == 1


def _acl_log(redis):
    """Redis's ACL LOG: its entries as dicts (redis-cli prints each key and value on a line)."""
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    out = subprocess.run([cli, "-p", str(redis.port), "ACL", "LOG"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    entries = []
    for k, v in zip(out[0::2], out[1::2]):
        if k == "count":
            entries.append({})
        if entries:
            entries[-1][k] = v
    return entries


def test_wakes_an_acl_refuses_are_said_once_and_the_slots_still_move(env):
    """A Redis user with no channels (Redis 7's default for a new user, resetchannels) cannot
    SUBSCRIBE to the wakes: each instance says once why (Redis's own reason), tries again less
    and less often (each try is a connect, an AUTH, a refused SUBSCRIBE and an entry in Redis's
    ACL LOG; before, one a second, forever, and never a word), and the slots still move
    between the instances at the ticks' pace: every request is served, the cap held. About
    5 s."""
    sim = env.sim("a", latency_ms=400, token_ms=0, slots=8)
    redis = _redis(env)
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    subprocess.run([cli, "-p", str(redis.port), "ACL", "SETUSER", "default", "resetchannels"],
                   check=True, capture_output=True)
    begun = time.monotonic()
    _, procs = _capped(env, sim, cap=1, n=2, sync_ms=1000, redis=redis)

    def said(p):
        return [l for l in env.log(p).splitlines() if "no wakes through Redis" in l]
    for p in procs:
        wait_until(lambda: said(p), "the instance to say why it has no wakes")
    for _ in range(3):  # (two requests one after the other through the one slot: 0.8 s at least)
        got = _post_all(procs)
        assert got == [200, 200], got
    elapsed = time.monotonic() - begun
    st = sim_stats(sim.port)
    assert st["completions"] == 6 and st["max_active"] == 1, st
    for p in procs:
        lines = said(p)
        assert len(lines) == 1 and "SUBSCRIBE refused" in lines[0], lines
    tries = sum(int(e.get("count", 0)) for e in _acl_log(redis)
                if e.get("context") == "toplevel" and " wake " in e.get("object", ""))
    # tries at 0, 1, 3, 7 s...: at most 2 + log2(1 + elapsed) an instance (one a second: more)
    assert 2 <= tries <= 2 * (2 + math.log2(1 + elapsed)), (tries, elapsed)


def _said_waiting(redis_port, key="accelnet:slotshare:p"):
    """The requests the instances told Redis wait for each backend of pool p, summed over
    the backends (each field of the slots hash: in flight, waiting, grant, expiry)."""
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    out = subprocess.run([cli, "-p", str(redis_port), "HGETALL", key], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    return sum(int(v.split()[1]) for v in out[1::2] if len(v.split()) == 4)


def test_a_request_waiting_for_any_backend_is_said_once(env):
    """A request that waits for no backend in particular (every slot of a round-robin pool
    taken) is told to the other instances as one request waiting, on one backend, not on
    each: counted on each of the pool's capped backends, one such request asked every
    backend's deal for a slot, and the others counted three waiting where one did."""
    sims = [env.sim(f"s{i}", latency_ms=2000, token_ms=0, slots=4) for i in range(3)]
    redis = _redis(env)
    pool = pool_yaml("p", [s.port for s in sims], extra="    queue: {timeout_ms: 20000}")
    for s in sims:
        pool = pool.replace(f"127.0.0.1:{s.port}", f"127.0.0.1:{s.port}, max_concurrency: 1")
    procs = _instances(env, redis.port, "pools:\n" + pool + "routes:\n  - pool: p\n", n=1,
                       sync_ms=20)
    _all_see(procs, 1, instances=1)
    got = []
    ts = [threading.Thread(target=lambda: got.append(_post_one(procs[0]))) for _ in range(4)]
    for t in ts:
        t.start()
    try:
        wait_until(lambda: sum(sim_stats(s.port)["active"] for s in sims) == 3,
                   "every backend's one slot taken")
        wait_until(lambda: _queue(procs[0], "enqueued") == 1, "the fourth request to queue")
        wait_until(lambda: _said_waiting(redis.port) > 0, "the waiting request said to Redis")
        syncs = _cluster(procs[0])["accelnet_cluster_syncs_total"]
        seen = set()

        def three_more_syncs():  # (it is said again every sync while it waits)
            seen.add(_said_waiting(redis.port))
            return _cluster(procs[0])["accelnet_cluster_syncs_total"] >= syncs + 3
        wait_until(three_more_syncs, "three more syncs")
        assert seen == {1}, seen
    finally:
        for t in ts:
            t.join()
    assert got == [200] * 4, got


def test_forged_slot_fields_hold_no_slot(env):
    """What a Redis writer puts in a pool's slots hash is read as the script writes it or not
    at all: a field naming a fake instance that holds every slot of the backend with an expiry
    further ahead than any instance writes, and fields that are not ours, are taken out, and
    the requests they would have kept waiting are served."""
    sim = env.sim("a", latency_ms=200, token_ms=0, slots=8)
    redis, procs = _capped(env, sim, cap=2, n=2, sync_ms=50)
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    key = "accelnet:slotshare:p"
    far = int(time.time() * 1000) + 30 * 86400 * 1000
    forged = {f"fake 127.0.0.1:{sim.port}": f"0 0 2 {far}",
              f"junk 127.0.0.1:{sim.port}": "2 2",
              "nospace": "0 0 2 1"}
    for k, v in forged.items():
        subprocess.run([cli, "-p", str(redis.port), "HSET", key, k, v], check=True,
                       capture_output=True)
    got = _post_all(procs, each=2)
    assert got == [200] * 4, got
    for k in forged:
        out = subprocess.run([cli, "-p", str(redis.port), "HEXISTS", key, k], check=True,
                             capture_output=True, text=True).stdout.strip()
        assert out == "0", (k, out)
    assert sim_stats(sim.port)["max_active"] <= 2


def _get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    body = c.getresponse().read()
    c.close()
    return body


def _check(env, text):
    path = env.write("bad.yaml", "listen: [127.0.0.1:1]\npools:\n  - name: p\n"
                     "    backends: [{address: 127.0.0.1:2}]\n" + text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def test_bad_cluster_sections_are_refused(env):
    cases = [
        ("cluster: {redis: localhost}\n", "5:18: cluster: redis 'localhost': expected HOST:PORT"),
        ("cluster: {redis: 'a b:1'}\n", "5:18: cluster: redis 'a b:1': the host is neither"),
        ("cluster: {redis: '127.0.0.1:0'}\n", "5:18: cluster: redis '127.0.0.1:0'"),
        ("cluster: {sync_ms: 100}\n", "5:10: cluster: 'redis' is required"),
        ("cluster: {redis: 127.0.0.1:6379, sync_ms: 5}\n", "5:43: 5 is out of range: expected 10 to 10000"),
        ("cluster: {redis: 127.0.0.1:6379, key_prefix: 'a b'}\n",
         "5:46: cluster: key_prefix 'a b': printable characters only"),
        ("cluster: {redis: 127.0.0.1:6379, password_file: /nonexistent/pw}\n",
         "5:49: cluster: password_file '/nonexistent/pw': No such file"),
        ("cluster: {redis: 127.0.0.1:6379, hosts: 3}\n", "5:34: cluster: unknown key 'hosts'"),
    ]
    for text, want in cases:
        rc, out = _check(env, text)
        assert rc == 2 and want in out, (text, rc, out)
    rc, out = _check(env, "cluster: {redis: 'redis.internal:6379', sync_ms: 50, "
                     "timeout_ms: 200, key_prefix: 'prod:'}\n")
    assert rc == 0, out
