"""bench/fleettrace.py: the request traces of bench/fleets.py, multi-turn chat on any shape.

A shape (bench/fleets.py's SHAPES) says what the traffic is; this file turns it into a trace:
a list of chat-completion bodies, one a line, and the time each is due (seconds from the
start, one a line), which `loadgen open --bodies FILE --at TIMES` sends at those times.

- `n_system` system prompts of `system_blocks` (lo, hi) blocks of 64 bytes, sizes spread
  evenly over the range and not tied to popularity; a conversation picks one with weight
  1/rank^`zipf` (0: every prompt equally often);
- `turns` (lo, hi) turns, uniform; each turn's prompt is the conversation so far: the system
  prompt, every earlier turn's user message (`user_bytes`) and assistant reply
  (`reply_bytes`), then this turn's user message, as chattrace.py (scenario 9) writes them;
- conversations start as a Poisson process at rate / mean turns, so requests come at the
  rate asked for on average; with `burst` (on_s, off_s) only in the on-windows, at rate x
  (on + off) / on there (on/off arrivals: the same mean, in bursts); turn k+1 is due
  `think_s` (lo, hi) seconds after turn k (uniform: the time to read the answer and write
  the next message; an open loop cannot wait for the answer itself, and the thinking is
  longer than a served turn at every load a balancer keeps up with), so conversations
  interleave in time;
- the process starts long enough before time 0 that every conversation due then has begun
  (`max turns x max think`), so the trace opens on conversations under way; the trace is
  every request due in [0, seconds). One draw's count strays 10-20 % from rate x seconds
  over 40 s (a conversation brings several requests), so a trace is drawn until the requests
  due in its measured span (after the warm-up) are the rate asked x the span within 2 %
  (calibrated(): the same conversations, their starts scaled closer or further apart).
- each body is {"model", "messages", "stream", "max_tokens", "temperature"} plus, for some
  clients, "user", "top_p" and "stream_options" (streamed shapes only), the top-level fields
  shuffled per request as chattrace.py does (hashing a body's first bytes cannot follow
  the prompt); `max_tokens` is one of the shape's `max_tokens`, which the simulator streams.

The arithmetic (`arithmetic(shape)`, printed by `/usr/bin/python3 bench/fleettrace.py`):
the mean prompt in blocks; each simulator's all-miss slot time (its fixed latency, a prefill
of every block, the decode) and the fleet's all-miss capacity, the sum of slots / slot time;
the slot time when a request finds its conversation so far cached (only the new messages
prefilled) and the capacity that gives; and the live working set: at a moment in the steady
state, the blocks of every conversation still to send a turn (its prompt so far, the system
prompt counted once per prompt in use), against the fleet's cache and one server's.
"""

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chattrace  # noqa: E402  (the prompt text and the field order, as scenario 9's)

BLOCK_BYTES = chattrace.BLOCK_BYTES
MSG_OVERHEAD = chattrace.MSG_OVERHEAD


def system_sizes(shape):
    """The blocks of system prompt i (i = popularity rank), spread over the range."""
    lo, hi = shape["system_blocks"]
    n = shape["n_system"]
    sizes = [lo + round((hi - lo) * i / max(n - 1, 1)) for i in range(n)]
    random.Random(shape.get("seed", 1) * 101 + 9).shuffle(sizes)
    return sizes


def system_prompts(shape):
    """The shape's system prompts, each filling exactly its blocks of prompt text."""
    rng = random.Random(shape.get("seed", 1) * 101 + 10)
    tag = shape["name"]
    return [chattrace._text(rng, b * BLOCK_BYTES - len("system") - MSG_OVERHEAD,
                            f"[{tag} system prompt {i:02d}] You are the assistant of team {i}. ")
            for i, b in enumerate(system_sizes(shape))]


def zipf_weights(shape):
    return [1 / (k + 1) ** shape["zipf"] for k in range(shape["n_system"])]


def mean_turns(shape):
    return (shape["turns"][0] + shape["turns"][1]) / 2


def warm_s(shape):
    """How long before time 0 the conversations start: every one due then has begun."""
    return shape["turns"][1] * shape["think_s"][1] + 5


def _in_burst(shape, t):
    on, off = shape["burst"]
    return (t % (on + off)) < on


def conversations(shape, rate, seconds, seed=1):
    """The plan: (due time, conversation, turn) for every request due in [0, seconds), in due
    order, and each conversation's shape (system prompt, turns, message sizes, habits)."""
    rng = random.Random(seed * 1000003 + shape.get("seed", 1))
    weights = zipf_weights(shape)
    conv_rate = rate / mean_turns(shape)
    burst = shape.get("burst")
    peak = conv_rate * ((burst[0] + burst[1]) / burst[0] if burst else 1.0)
    convs, events = [], []
    t = -warm_s(shape)
    while True:
        t += rng.expovariate(peak)
        if t >= seconds:
            break
        if burst and not _in_burst(shape, t):
            continue
        tmax = shape["turns"][1]
        c = {"id": len(convs), "start": t,
             "system": rng.choices(range(shape["n_system"]), weights)[0],
             "turns": rng.randint(*shape["turns"]),
             "user": [rng.randint(*shape["user_bytes"]) for _ in range(tmax)],
             "reply": [rng.randint(*shape["reply_bytes"]) for _ in range(tmax)],
             "sends_user": rng.random() < 0.5, "sends_top_p": rng.random() < 0.3,
             "usage": rng.random() < 0.3, "seed": rng.getrandbits(32)}
        convs.append(c)
        due, c["due"] = t, []
        for k in range(c["turns"]):
            c["due"].append(due)
            if 0 <= due < seconds:
                events.append((due, c["id"], k))
            due += rng.uniform(*shape["think_s"])
    events.sort()
    return convs, events


def calibrated(shape, rate, seconds, seed=1, measured_from=0.0):
    """conversations() whose requests due in [measured_from, seconds) are rate x that span,
    within 2 %: a conversation brings several requests, so one draw's count strays 10-20 %
    from the mean over 40 s; the same seed is drawn again with the start rate scaled (the
    conversations stay the same, their starts closer or further apart) until it fits.
    Returns (convs, events, the start rate's factor)."""
    target, f, best = rate * (seconds - measured_from), 1.0, None
    for _ in range(20):
        convs, events = conversations(shape, rate * f, seconds, seed)
        n = sum(1 for e in events if e[0] >= measured_from)
        if best is None or abs(n - target) < abs(best[0] - target):
            best = (n, convs, events, f)
        if abs(n - target) <= 0.02 * target:
            break
        f *= (target / max(n, 1)) ** 0.7  # damped: the count is a step function of f
    return best[1], best[2], best[3]


def prompt_bytes(c, k, sys_blocks):
    """The simulator's prompt text bytes of turn k (0-based) of conversation c."""
    b = sys_blocks * BLOCK_BYTES
    for i in range(k):
        b += (len("user") + MSG_OVERHEAD + c["user"][i] + len("assistant") + MSG_OVERHEAD
              + c["reply"][i])
    return b + len("user") + MSG_OVERHEAD + c["user"][k]


def blocks(nbytes):
    return -(-nbytes // BLOCK_BYTES)


def max_tokens(shape, c, k):
    m = shape["max_tokens"]
    return m[(c["seed"] + k) % len(m)]


def arithmetic(shape, rate=None, seconds=600.0):
    """The shape's figures (see the file's essay); <rate> for the working set: the all-miss
    capacity when not given."""
    sizes = system_sizes(shape)
    convs, events = conversations(shape, rate or 20.0, seconds)
    sims = shape["sims"]
    n = len(events)
    nb = [blocks(prompt_bytes(convs[cid], k, sizes[convs[cid]["system"]]))
          for _, cid, k in events]
    new = []  # blocks not in the conversation's previous prompt (all-hit prefill)
    for (_, cid, k), b in zip(events, nb):
        c = convs[cid]
        before = (blocks(prompt_bytes(c, k - 1, sizes[c["system"]])) - 1 if k
                  else sizes[c["system"]])
        new.append(b - before)
    toks = [max_tokens(shape, convs[cid], k) for _, cid, k in events]
    miss_ms = [sum(s["latency_ms"] + b * s["us_per_block"] / 1000 + t * s["token_ms"]
                   for b, t in zip(nb, toks)) / n for s in sims]
    hit_ms = [sum(s["latency_ms"] + b * s["us_per_block"] / 1000 + t * s["token_ms"]
                  for b, t in zip(new, toks)) / n for s in sims]
    cap = sum(s["slots"] * 1000 / ms for s, ms in zip(sims, miss_ms))
    hit_cap = sum(s["slots"] * 1000 / ms for s, ms in zip(sims, hit_ms))
    if rate is None:
        return arithmetic(shape, cap, seconds) | {"capacity": cap}
    # the live working set, sampled once a second over the second half
    live = []
    for t in range(int(seconds / 2), int(seconds)):
        used, hist = set(), 0
        for c in convs:
            if c["start"] > t or c["due"][-1] < t:
                continue
            k = max(i for i, d in enumerate(c["due"]) if d <= t)  # the last turn sent
            used.add(c["system"])
            # its prompt so far, and the reply that follows it, beyond the system prompt
            hist += (blocks(prompt_bytes(c, k, sizes[c["system"]]) + len("assistant")
                            + MSG_OVERHEAD + c["reply"][k]) - sizes[c["system"]])
        live.append(hist + sum(sizes[i] for i in used))
    fleet_cache = sum(s["cache_blocks"] for s in sims)
    ws = sum(live) / len(live)
    w = zipf_weights(shape)
    return {"mean_prompt_blocks": sum(nb) / n, "mean_new_blocks": sum(new) / n,
            "mean_max_tokens": sum(toks) / n, "all_miss_ms": miss_ms, "all_hit_ms": hit_ms,
            "all_hit_capacity": hit_cap, "rate": rate,
            "system_blocks": sum(sizes), "live_working_set_blocks": ws,
            "fleet_cache_blocks": fleet_cache, "working_set_per_fleet_cache": ws / fleet_cache,
            "working_set_per_server_cache": ws / max(s["cache_blocks"] for s in sims),
            "system_per_fleet_cache": sum(sizes) / fleet_cache,
            "top_prompt_share": w[0] / sum(w)}


def write_trace(shape, path, at_path, rate, seconds, seed=1, measured_from=0.0):
    """Write the bodies, one per line, to <path> and their due times to <at_path> (a
    calibrated() draw); returns how many requests, their prompt blocks in all, and the
    start rate's factor."""
    systems = system_prompts(shape)
    sizes = system_sizes(shape)
    convs, events, factor = calibrated(shape, rate, seconds, seed, measured_from)
    total_blocks = 0
    with open(path, "w") as f, open(at_path, "w") as fa:
        for due, cid, k in events:
            c = convs[cid]
            total_blocks += blocks(prompt_bytes(c, k, sizes[c["system"]]))
            rng = random.Random(c["seed"] * 7 + k)
            msgs = [{"role": "system", "content": systems[c["system"]]}]
            for i in range(k + 1):
                msgs.append({"role": "user", "content": chattrace._text(
                    random.Random(c["seed"] + 31 * i), c["user"][i])})
                if i < k:
                    msgs.append({"role": "assistant", "content": chattrace._text(
                        random.Random(c["seed"] + 31 * i + 17), c["reply"][i])})
            fields = [("model", "chat-model"), ("messages", msgs), ("stream", shape["stream"]),
                      ("max_tokens", max_tokens(shape, c, k)),
                      ("temperature", rng.choice((0, 0.2, 0.7, 1.0)))]
            if c["sends_user"]:
                fields.append(("user", f"user-{c['seed']:08x}"))
            if c["sends_top_p"]:
                fields.append(("top_p", rng.choice((0.9, 0.95))))
            if c["usage"] and shape["stream"]:
                fields.append(("stream_options", {"include_usage": True}))
            rng.shuffle(fields)
            f.write(json.dumps(dict(fields), separators=(",", ":")) + "\n")
            fa.write(f"{due:.6f}\n")
    return len(events), total_blocks, factor


def describe(shape):
    """The arithmetic in words, one line each (printed, and kept in the result JSON)."""
    a = arithmetic(shape)
    sims = shape["sims"]
    return [
        f"{shape['name']}: {shape['what']}",
        f"  fleet: {len(sims)} servers, {sum(s['slots'] for s in sims)} slots, caches "
        f"{'/'.join(str(s['cache_blocks']) for s in sims)} blocks of {BLOCK_BYTES} B "
        f"({a['fleet_cache_blocks']} in all)",
        f"  mean prompt {a['mean_prompt_blocks']:.0f} blocks, {a['mean_new_blocks']:.0f} new "
        f"a turn; all-miss slot time "
        f"{'/'.join(f'{m:.0f}' for m in a['all_miss_ms'])} ms: capacity "
        f"{a['capacity']:.1f} req/s (1.0x); all-hit "
        f"{'/'.join(f'{m:.0f}' for m in a['all_hit_ms'])} ms: "
        f"{a['all_hit_capacity'] / a['capacity']:.1f}x",
        f"  system prompts {a['system_blocks']} blocks "
        f"({a['system_per_fleet_cache'] * 100:.0f}% of the fleet's cache), the most popular "
        f"{a['top_prompt_share'] * 100:.0f}% of conversations; live working set at 1.0x "
        f"{a['live_working_set_blocks']:.0f} blocks = {a['working_set_per_fleet_cache']:.2f}x "
        f"the fleet's cache, {a['working_set_per_server_cache']:.1f}x the largest server's",
    ]


if __name__ == "__main__":
    import fleets
    for s in fleets.SHAPES.values():
        print("\n".join(describe(s)))
