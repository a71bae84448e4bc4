"""bench/chattrace.py: the request trace of scenario 9, chat traffic on shared system prompts.

A trace is the list of chat-completion bodies a load generator sends, in order, at a fixed
rate (`loadgen open --bodies FILE`). It is made of conversations:

- 16 system prompts of 128 to 256 blocks of 64 bytes (8 to 16 KiB; 3,072 blocks in all);
  a conversation picks one with Zipf-like popularity (weight 1/rank^0.8: the most popular
  gets 23 % of conversations, the least 2.5 %; sizes are not tied to rank);
- 2 to 6 turns (uniform); each turn's prompt is the conversation so far: the system prompt,
  then for every earlier turn the user's message and the assistant's reply (both 100-400
  bytes, uniform), then this turn's user message;
- conversations start as a Poisson process at rate/4 (4 turns on average, so requests come
  at the rate asked for), and turn k+1 is due 1 to 4 s (uniform) after turn k; the process
  starts 25 s before the trace does, so the trace opens in the steady state (conversations
  already under way), and the trace is the first rate x seconds requests from time 0 on.

Each body is {"model", "messages", "stream": true, "max_tokens", "temperature"} plus, for
some clients, "user", "top_p" and "stream_options", with the top-level fields in an order
drawn for each request: the first bytes of a body are as often "max_tokens" or a user id as
the system prompt, so a balancer hashing the body's first bytes cannot follow the prompt.

The simulator's prompt text (src/http/prompt.h) is each message's role, 0x1e, its content,
0x1d: a system prompt of n blocks has n*64 - 8 content bytes, so it fills exactly n blocks
and the conversation's later messages start on a block boundary. Contents are ASCII words
(no escapes), so a content's JSON bytes are its text.

The control (shared=False) is the same generator, except that every conversation gets a
system prompt of its own (the size the shared pick would have had, different text): nothing
is shared between conversations, only a conversation's own turns share their start.

Run it alone for the trace's arithmetic: /usr/bin/python3 bench/chattrace.py
"""

import json
import random

BLOCK_BYTES = 64
N_SYSTEM = 16
SYSTEM_BLOCKS = [128 + round(128 * i / (N_SYSTEM - 1)) for i in range(N_SYSTEM)]  # 3072 in all
ZIPF_S = 0.8
TURNS = (2, 6)
MESSAGE_BYTES = (100, 400)
THINK_S = (1.0, 4.0)
MAX_TOKENS = (12, 16, 20)  # the simulator streams max_tokens tokens: 16 on average
WARM_S = 25.0  # 5 gaps of at most 4 s: every conversation due at 0 has started by then
MSG_OVERHEAD = 2  # 0x1e after the role, 0x1d after the content

WORDS = ("the of and to in is that for it as with was on be by at this from or an are not "
         "but have which all were when we there can been has more if will one would what out "
         "about up them into only some could time these two may then do first any like my now "
         "over such our man me even most made after also did many before must through back "
         "years where much your way well down should because each just those people how too "
         "little state good very make world still own see men work long get here between both "
         "life being under never day same another know while last might us great old year off "
         "come since against go came right used take three cluster token prompt cache model "
         "answer question context policy kernel tensor batch queue latency replica shard").split()


def _text(rng, n, head=""):
    """<n> bytes of ASCII words, starting with <head>."""
    out, size = [head] if head else [], len(head)
    while size < n:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + (1 if len(out) > 1 else 0)
    return " ".join(out)[:n]


def system_sizes():
    """The blocks of system prompt i (i = popularity rank): sizes not tied to rank."""
    sizes = SYSTEM_BLOCKS[:]
    random.Random(9).shuffle(sizes)
    return sizes


def system_prompts():
    """The 16 shared system prompts: each fills exactly its blocks of the prompt text."""
    rng = random.Random(10)
    return [_text(rng, b * BLOCK_BYTES - len("system") - MSG_OVERHEAD,
                  f"[system prompt {i:02d}] You are the assistant of team {i}; answer briefly. ")
            for i, b in enumerate(system_sizes())]


def zipf_weights():
    return [1 / (k + 1) ** ZIPF_S for k in range(N_SYSTEM)]


def conversations(rate, seconds, seed=1):
    """The plan: (due time, conversation, turn) for the first rate*seconds requests due at 0
    or later, in due order, and each conversation's shape (system prompt index, turns, the
    sizes of its user messages and replies, its client's habits)."""
    rng = random.Random(seed)
    weights = zipf_weights()
    convs, events = [], []
    t = -WARM_S
    mean_turns = (TURNS[0] + TURNS[1]) / 2
    n = int(rate * seconds)
    horizon = seconds * 1.5 + 10
    while t < horizon:
        t += rng.expovariate(rate / mean_turns)
        c = {"id": len(convs), "system": rng.choices(range(N_SYSTEM), weights)[0],
             "turns": rng.randint(*TURNS),
             "user": [rng.randint(*MESSAGE_BYTES) for _ in range(TURNS[1])],
             "reply": [rng.randint(*MESSAGE_BYTES) for _ in range(TURNS[1])],
             "sends_user": rng.random() < 0.5, "sends_top_p": rng.random() < 0.3,
             "usage": rng.random() < 0.3, "seed": rng.getrandbits(32)}
        convs.append(c)
        due = t
        for k in range(c["turns"]):
            if due >= 0:
                events.append((due, c["id"], k))
            due += rng.uniform(*THINK_S)
    events.sort()
    return convs, events[:n]


def prompt_bytes(c, k, sys_blocks):
    """The simulator's prompt text bytes of turn k (0-based) of conversation c."""
    b = sys_blocks * BLOCK_BYTES
    for i in range(k):
        b += len("user") + MSG_OVERHEAD + c["user"][i] + len("assistant") + MSG_OVERHEAD + c["reply"][i]
    return b + len("user") + MSG_OVERHEAD + c["user"][k]


def all_miss_ms(latency_ms, us_per_block, token_ms, rate=100.0, seconds=300.0):
    """The mean time a request holds a slot when nothing is cached: the fixed part, a
    prefill of every prompt block (a last partial block is one more: the simulator charges
    it), then max_tokens tokens (mean over a long trace). Also the mean prompt in blocks."""
    sizes = system_sizes()
    convs, events = conversations(rate, seconds)
    total = blocks = 0.0
    for i, (_, cid, k) in enumerate(events):
        c = convs[cid]
        nb = -(-prompt_bytes(c, k, sizes[c["system"]]) // BLOCK_BYTES)
        blocks += nb
        total += latency_ms + nb * us_per_block / 1000 + MAX_TOKENS[(c["seed"] + k) % 3] * token_ms
    return total / len(events), blocks / len(events)


def trace_blocks(rate, seconds):
    """The prompt blocks of every request of the trace, a last partial block counted (shared
    or control: the same), for checking the simulators' blocks_hit + blocks_missed against."""
    sizes = system_sizes()
    convs, events = conversations(rate, seconds)
    return sum(-(-prompt_bytes(convs[cid], k, sizes[convs[cid]["system"]]) // BLOCK_BYTES)
               for _, cid, k in events)


def write_trace(path, rate, seconds, shared=True):
    """Write the bodies, one per line; returns how many."""
    systems = system_prompts()
    convs, events = conversations(rate, seconds)
    own = {}
    with open(path, "w") as f:
        for _, cid, k in events:
            c = convs[cid]
            rng = random.Random(c["seed"] * 7 + k)
            if shared:
                system = systems[c["system"]]
            else:
                if cid not in own:
                    own[cid] = _text(random.Random(c["seed"]), len(systems[c["system"]]),
                                     f"[conversation {cid}] You are the assistant of user "
                                     f"{c['seed']}; answer briefly. ")
                system = own[cid]
            msgs = [{"role": "system", "content": system}]
            for i in range(k + 1):
                msgs.append({"role": "user", "content": _text(random.Random(c["seed"] + 31 * i),
                                                              c["user"][i])})
                if i < k:
                    msgs.append({"role": "assistant", "content": _text(
                        random.Random(c["seed"] + 31 * i + 17), c["reply"][i])})
            fields = [("model", "chat-model"), ("messages", msgs), ("stream", True),
                      ("max_tokens", MAX_TOKENS[(c["seed"] + k) % 3]),
                      ("temperature", rng.choice((0, 0.2, 0.7, 1.0)))]
            if c["sends_user"]:
                fields.append(("user", f"user-{c['seed']:08x}"))
            if c["sends_top_p"]:
                fields.append(("top_p", rng.choice((0.9, 0.95))))
            if c["usage"]:
                fields.append(("stream_options", {"include_usage": True}))
            rng.shuffle(fields)
            f.write(json.dumps(dict(fields), separators=(",", ":")) + "\n")
    return len(events)


if __name__ == "__main__":
    ms, blocks = all_miss_ms(20, 1000, 5)
    w = zipf_weights()
    print(f"system prompts: {N_SYSTEM}, {sum(SYSTEM_BLOCKS)} blocks "
          f"({sum(SYSTEM_BLOCKS) * BLOCK_BYTES / 1024:.0f} KiB); most popular "
          f"{w[0] / sum(w) * 100:.1f} %, least {w[-1] / sum(w) * 100:.1f} %")
    print(f"mean prompt {blocks:.1f} blocks; all-miss slot time {ms:.1f} ms "
          f"(20 ms + blocks x 1 ms + 16 tokens x 5 ms); 8 x 4 slots: {32000 / ms:.1f} req/s")
