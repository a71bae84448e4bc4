"""KV events after a gap, through the engine's replay socket (issue 30): vLLM's publisher keeps
its last batches (buffer_steps) and answers a DEALER's [empty, first sequence number wanted]
on its replay_endpoint (a ROUTER) with [empty, seq, payload] each, then [empty, -1, empty].
With backends.kv_events_replay the proxy asks it for the batches a gap lost and applies them
before the one that showed the gap: the index stays exact, nothing is cleared, routing never
falls back to learning. An answer that cannot fill the gap (the engine keeps too few
batches, answers garbage, endlessly, hugely or not at all) clears the index as without a
replay, and the proxy neither hangs nor grows."""

import json
import re
import threading
import time

from harness import free_port, request, sim_stats, status, wait_until
from test_engine import Publisher, _engine, stored
from test_tokenize import _tiny

SKIP = 20  # the sequence number the simulator loses (after a slow start's resets)
HIT = re.compile(r'pick="[^"]*";reason=[a-z-]+;blocks=(\d+)[^,]*(?:, "[^"]*";hit=(\d+))?')


def _sim_proxy(env, **sim_opts):
    """A simulator of the tiny tokenizer (a token a byte, blocks of 4, a cache of 40 blocks)
    that loses batch SKIP and keeps a replay socket, behind a balance: llm proxy taking its
    events with kv_events_replay: (sim, proxy, backends(), mirrored(), ask(k))."""
    tok = env.write("tokenizer.json", json.dumps(_tiny()))
    ev, rp = free_port(), free_port()
    sim = env.sim("s0", latency_ms=1, jitter=0, tokens=1, token_ms=0, prefill_us_per_block=0,
                  cache_blocks=40, tokenizer=tok, block_size=4,
                  kv_events=f"tcp://127.0.0.1:{ev}", kv_events_skip=SKIP,
                  kv_events_replay=f"tcp://127.0.0.1:{rp}", **sim_opts)
    addr = f"127.0.0.1:{sim.port}"
    px = env.proxy(f"models:\n  tiny: {{tokenizer: {tok}, block_size: 4}}\n"
                   "pools:\n  - name: gpu\n    balance: llm\n"
                   "    llm: {cache_blocks: 4096, explain: true}\n    backends:\n"
                   f"      - {{address: {addr}, kv_events: 'tcp://127.0.0.1:{ev}',\n"
                   f"         kv_events_replay: 'tcp://127.0.0.1:{rp}'}}\n", workers=1)

    def backends():
        return status(px.admin)["pools"][0]["backends"][0]["kv_events"]

    tries = [0]

    def heard():  # a reset every 10 tries (0.2 s) until its AllBlocksCleared comes back
        if tries[0] % 10 == 0:
            assert request(sim.port, "POST", "/reset_prefix_cache")[0] == 200
        tries[0] += 1
        return backends()["applied"]["cleared"]

    wait_until(heard, "AllBlocksCleared from the simulator")
    # the proxy counts from the first batch it took: the lost one must come after
    assert sim_stats(sim.port)["kv_events_next_seq"] < SKIP - 1, "subscribed after batch SKIP"

    def mirrored(blocks=True):
        """Every batch the simulator numbered taken, and (<blocks>) the same blocks."""
        st, now = sim_stats(sim.port), backends()
        return (now["next_seq"] == st["kv_events_next_seq"]
                and (not blocks or now["blocks"] == st["cache_blocks_used"]))

    def ask(k):
        """Completion k (prompts sharing prefixes, 24 to 120 tokens): (predicted, reported)
        cached blocks."""
        prompt = f"system prompt {k % 3}: be brief. " * (1 + k % 4) + f"question {k}"
        st, hdrs, data = request(px.port, "POST", "/v1/completions",
                                 json.dumps({"model": "tiny", "max_tokens": 1,
                                             "prompt": prompt}),
                                 {"Content-Type": "application/json"})
        assert st == 200, (st, data)
        m = HIT.search(hdrs["x-accelnet-llm"][0])
        assert m, hdrs["x-accelnet-llm"]
        return int(m.group(2) or 0), int(hdrs["x-sim-cached-blocks"][0])
    return sim, px, backends, mirrored, ask


def _past_the_gap(sim, backends, mirrored, ask, exact=True):
    """Requests, each after the events of the one before, until the batch SKIP was lost and
    the proxy has taken a batch past it, and a few more: the (predicted, reported) pairs.
    <exact>: the index is expected to hold the cache's blocks all along."""
    wait_until(mirrored, "the index mirroring the cache")
    pairs, k = [], 0
    while sim_stats(sim.port)["kv_events_next_seq"] <= SKIP + 1:
        # the request after the lost batch is routed before the proxy can know of the gap
        # (the next batch shows it): its prediction is not counted
        known = mirrored()
        pair = ask(k)
        if known:
            pairs.append(pair)
        k += 1
        wait_until(lambda: mirrored() or sim_stats(sim.port)["kv_events_dropped"],
                   "the batch taken, or lost")
        assert k < 100, "the simulator never lost its batch"
    assert sim_stats(sim.port)["kv_events_dropped"] > 0
    wait_until(lambda: mirrored(exact), "the index mirroring the cache past the gap")
    for _ in range(12):  # prompts sharing prefixes: hits the index must predict
        pairs.append(ask(k))
        k += 1
        wait_until(lambda: mirrored(exact), "the index mirroring the cache")
    return pairs


def test_a_gap_is_filled_by_the_replay_socket(env):
    sim, px, backends, mirrored, ask = _sim_proxy(env)
    pairs = _past_the_gap(sim, backends, mirrored, ask)
    b = backends()
    assert b["replays"]["filled"] == 1, b
    assert sum(b["replays"].values()) == 1 and b["gaps"] == 0, b
    assert sim_stats(sim.port)["kv_events_replays"] == 1
    log = env.log(px)
    assert "learns from the prompts" not in log and "batches missed replayed" in log, log
    # the index stayed exact through the gap: every prediction is the hit the engine reports
    assert all(p == r for p, r in pairs), pairs
    assert sum(r for _, r in pairs) > 10, pairs


def test_a_replay_that_cannot_fill_the_gap_falls_back(env):
    """The engine keeps one batch: by the time the gap is seen the lost one is gone, and the
    answer starts past it: cleared and learning, as without a replay."""
    sim, px, backends, mirrored, ask = _sim_proxy(env, kv_events_buffer=1)
    _past_the_gap(sim, backends, mirrored, ask, exact=False)
    b = backends()
    assert b["replays"]["not_kept"] == 1 and b["replays"]["filled"] == 0, b
    assert b["gaps"] == 1, b
    wait_until(lambda: "balance: llm learns from the prompts sent there" in env.log(px),
               "the fall back to the learned index, logged")
    assert "the engine no longer keeps the batches missed" in env.log(px)


def test_the_simulator_answers_replays_as_vllm(env):
    """vLLM's wire: [empty, START] from a DEALER gets [empty, seq, payload] for each kept batch
    from START on, then [empty, -1, empty]; a request of another shape gets nothing."""
    import msgpack
    import zmq
    ev, rp = free_port(), free_port()
    sim = env.sim("s0", cache_blocks=8, kv_events=f"tcp://127.0.0.1:{ev}",
                  kv_events_replay=f"tcp://127.0.0.1:{rp}", kv_events_buffer=3)
    for _ in range(5):  # with the first, six batches of one AllBlocksCleared each
        assert request(sim.port, "POST", "/reset_prefix_cache")[0] == 200
    wait_until(lambda: sim_stats(sim.port)["kv_events_next_seq"] == 6, "six batches")
    d = zmq.Context.instance().socket(zmq.DEALER)
    env.on_cleanup.append(lambda: d.close(0))
    d.setsockopt(zmq.RCVTIMEO, 15000)
    d.connect(f"tcp://127.0.0.1:{rp}")
    d.send_multipart([(0).to_bytes(8, "big")])  # no empty frame: not vLLM's shape, ignored
    d.send_multipart([b"", (4).to_bytes(8, "big")])
    got = [d.recv_multipart() for _ in range(3)]
    assert [f[:2] for f in got] == [[b"", (4).to_bytes(8, "big")], [b"", (5).to_bytes(8, "big")],
                                    [b"", b"\xff" * 8]], got
    assert got[2][2] == b"" and msgpack.unpackb(got[0][2])[1] == [{"type": "AllBlocksCleared"}]
    d.send_multipart([b"", (0).to_bytes(8, "big")])  # older than kept: what is kept
    got = [d.recv_multipart()[1] for _ in range(4)]
    assert got == [q.to_bytes(8, "big") for q in (3, 4, 5)] + [b"\xff" * 8], got
    assert sim_stats(sim.port)["kv_events_replays"] == 2


class ReplayPeer:
    """A replay socket (ROUTER) answering each request with <answer>(ident, start), a list of
    multipart messages (the identity is prepended), or a generator sending until closed."""

    def __init__(self, answer):
        import zmq
        self.zmq, self.answer = zmq, answer
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.requests, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            frames = self.sock.recv_multipart()
            self.requests.append(frames[1:])
            for msg in self.answer(frames[2] if len(frames) == 3 else b""):
                if self.stop.is_set():
                    break
                try:
                    self.sock.send_multipart([frames[0]] + msg, self.zmq.NOBLOCK)
                except self.zmq.Again:
                    time.sleep(0.001)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close(0)


def _batch(events):
    import msgpack
    return msgpack.packb([time.time(), events, 0])


END = [b"", b"\xff" * 8, b""]


def test_hostile_replay_peers_fall_back_without_a_hang(env):
    """Six engines, each losing batch 2; their replay sockets answer as vLLM does (from the
    first number wanted, then the end), with garbage frames, with an endless stream of a batch
    already taken, with one frame over the proxy's 16 MiB bound, or never (twice: the last
    engine's publisher goes away meanwhile). The first keeps its index; the others are
    cleared (the held batch applied after, but for the one whose connection was lost), each
    once, counted by outcome, while /status keeps answering."""
    kept = {}  # seq -> payload, as vLLM's buffer

    def vllm(start):
        s = int.from_bytes(start, "big")
        return [[b"", q.to_bytes(8, "big"), p] for q, p in sorted(kept.items()) if q >= s] + [END]

    def garbage(start):
        return [[b"junk"], [b"", b"\x00\x01", b"x"]]

    def endless(start):
        while True:
            yield [b"", (0).to_bytes(8, "big"), kept[0]]

    def huge(start):
        return [[b"", start, b"x" * (17 << 20)], END]

    def silent(start):
        return []

    answers = [vllm, garbage, endless, huge, silent, silent]  # the last: its publisher goes
    pubs, peers = [Publisher() for _ in answers], [ReplayPeer(a) for a in answers]
    for x in pubs + peers:
        env.on_cleanup.append(x.close)
    engs = [_engine(env, f"e{i}", lambda e: b"") for i in range(len(answers))]
    px = env.proxy("pools:\n  - name: gpu\n    balance: least-connections\n    backends:\n" +
                   "".join(f"      - {{address: 127.0.0.1:{e.port}, "
                           f"kv_events: 'tcp://127.0.0.1:{p.port}', "
                           f"kv_events_replay: 'tcp://127.0.0.1:{r.port}'}}\n"
                           for e, p, r in zip(engs, pubs, peers)), workers=1)
    for p in pubs:
        p.wait_subscriber()

    def state():
        by = {b["address"]: b["kv_events"] for b in status(px.admin)["pools"][0]["backends"]}
        return [by[f"127.0.0.1:{e.port}"] for e in engs]

    batches = [[stored([1, 2])], [stored([3], parent=2)], [stored([4], parent=3)],
               [stored([5], parent=4)]]
    for q, ev in enumerate(batches):
        kept[q] = _batch(ev)
    for p in pubs:
        p.send(batches[0])
        p.send(batches[1])
    wait_until(lambda: all(s["next_seq"] == 2 for s in state()), "batches 0 and 1 taken")
    for p in pubs:  # batch 2 lost on the way
        p.send(batches[3], seq=3)
    outcomes = ["filled", "malformed", "timeout", "timeout", "timeout", "abandoned"]
    wait_until(lambda: peers[5].requests, "the last replay asked for")
    pubs[5].close()  # the connection lost during the replay: abandoned, the held batch too
    t0 = time.monotonic()
    while not all(sum(s["replays"].values()) == 1 for s in state()):
        assert time.monotonic() - t0 < 15, state()  # (each answer is bounded in time)
        time.sleep(0.05)
    now = state()
    for s, want in zip(now, outcomes):
        assert s["replays"][want] == 1, (want, s)
        assert s["next_seq"] == (2 if want == "abandoned" else 4), s
    assert now[0]["gaps"] == 0 and now[0]["blocks"] == 5, now[0]  # 1..5, nothing cleared
    for s in now[1:]:
        assert s["gaps"] == 1 and s["blocks"] == 0, s  # cleared (the held batch: no parent)
    # the request each got: vLLM's [empty, 8-byte big-endian number], from the first missed
    for r in peers:
        assert r.requests[0] == [b"", (2).to_bytes(8, "big")], r.requests
    # the publishers go on: every backend takes its next batch as before
    for p in pubs[:5]:
        p.send([stored([9])])
    wait_until(lambda: all(s["next_seq"] == 5 for s in state()[:5]), "batch 4 taken")
    assert px.poll() is None


def test_config_errors_name_their_place(env):
    from test_engine import _check
    base = "listen: [127.0.0.1:8080]\npools:\n  - name: a\n    backends:\n"
    path, r = _check(env, base + "      - {address: 127.0.0.1:9101, kv_events: 'tcp://h:5557', "
                     "kv_events_replay: 'h:5558'}\n")
    assert r.returncode == 2 and r.stderr.startswith(
        f"{path}:5:80: kv_events_replay: expected tcp://HOST:PORT"), r.stderr
    path, r = _check(env, base + "      - {address: 127.0.0.1:9101, "
                     "kv_events_replay: 'tcp://h:5558'}\n")
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:5:53: kv_events_replay:"), r.stderr
    assert "give kv_events too" in r.stderr
    path, r = _check(env, base + "      - {address: 127.0.0.1:9101, kv_events: 'tcp://h:5557', "
                     "kv_events_replay: 'tcp://h:5557'}\n")
    assert r.returncode == 2 and "another port" in r.stderr, r.stderr
    _, r = _check(env, base + "      - {address: 127.0.0.1:9101, kv_events: 'tcp://h:5557', "
                  "kv_events_replay: 'tcp://h:5558'}\n")
    assert r.returncode == 0, r.stderr


def test_config_refuses_a_replay_socket_of_another_engine(env):
    """A replay socket is one engine's: backend b giving a's kv_events_replay with kv_events
    of its own would have its gaps filled with a's engine's events, an index of blocks its
    engine never held; one backend's publisher as another's replay socket is a typo alike.
    Both refused at their place, in the same pool or another; the same engine in two pools
    (both addresses alike) is no clash."""
    from test_engine import _check

    def be(port, ev, rp):
        return (f"      - {{address: 127.0.0.1:{port}, kv_events: 'tcp://{ev}', "
                f"kv_events_replay: 'tcp://{rp}'}}\n")
    head = "listen: [127.0.0.1:8080]\npools:\n"
    a = "  - name: a\n    backends:\n" + be(9101, "h:5557", "h:5558")
    path, r = _check(env, head + a + be(9102, "g:5557", "h:5558"))
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:5:7:") and \
        "pool 'a': backend 127.0.0.1:9102 beside backend 127.0.0.1:9101 of pool 'a': its " \
        "kv_events_replay is also that backend's, whose kv_events differ" in r.stderr, r.stderr
    path, r = _check(env, head + a + "  - name: b\n    backends:\n" + be(9102, "g:5557", "h:5557"))
    assert r.returncode == 2 and "pool 'b': backend 127.0.0.1:9102 beside backend " \
        "127.0.0.1:9101 of pool 'a': one's kv_events is the other's kv_events_replay" \
        in r.stderr, r.stderr
    _, r = _check(env, head + a + "  - name: b\n    backends:\n" + be(9101, "h:5557", "h:5558"))
    assert r.returncode == 0, r.stderr


def test_a_storm_of_gaps_asks_for_few_replays(env):
    """A publisher whose every batch makes a gap, and a replay socket that has none of them
    (it answers the end at once): after a replay that did not fill its gap none is asked for
    a second (counted backoff, the index cleared as without one), so the storm costs the
    engine a connection a second, not one per batch (before: 200 gaps, 200 replays asked,
    each a new TCP connection; 2,774 in 3 s at full speed, TIME_WAIT on every one)."""
    pub, peer = Publisher(), ReplayPeer(lambda start: [END])
    env.on_cleanup.append(pub.close)
    env.on_cleanup.append(peer.close)
    e = _engine(env, "e0", lambda e: b"")
    px = env.proxy("pools:\n  - name: gpu\n    balance: least-connections\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{e.port}, "
                   f"kv_events: 'tcp://127.0.0.1:{pub.port}', "
                   f"kv_events_replay: 'tcp://127.0.0.1:{peer.port}'}}\n", workers=1)
    pub.wait_subscriber()
    pub.send([stored([1])])

    def kv():
        return status(px.admin)["pools"][0]["backends"][0]["kv_events"]
    wait_until(lambda: kv()["next_seq"] == 1, "batch 0 taken")
    for i in range(200):
        pub.send([stored([i + 2])], seq=2 * i + 2)
    wait_until(lambda: kv()["next_seq"] == 401, "the 200 batches taken")
    r = kv()["replays"]
    assert r["not_kept"] == len(peer.requests) and r["not_kept"] + r["backoff"] == 200, r
    assert r["backoff"] > r["not_kept"], r  # most not asked
    assert kv()["gaps"] == 200
