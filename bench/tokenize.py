#!/usr/bin/python3
"""The tokenizer's cost: µs per 1,000 tokens, cold and warm, accelnet's (build/tokbench) against
Hugging Face's `tokenizers` (its npm package, the Rust library) on the same strings: the
10,000 per file that tests/integration/test_tokenize.py generates, for its three files
(fetched into its cache, $ACCELNET_TOK_CACHE or ~/.cache/accelnet/tokenizers).

Cold: a tokenizer just loaded, its caches empty, one pass over the strings. Warm: the fastest
of five more passes over the same strings. Both on one thread: `tokenizers` through
encodeBatch with TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1 (one call for all the
strings, so node's per-call cost is not counted), and, for the per-request view, through
one awaited encode() per string (that includes node's cost of a call). Loading is not timed.

Growing conversations (--turns, or after the table): 8 conversations of 32 turns each, where
turn k is turn k-1 with the assistant's answer and a new user message (about 250 tokens
each, prose and code), sent interleaved (every conversation's turn 1, then every turn 2...),
rendered by the model's chat template (`accelnet tokenize --chat --text`) and encoded without
the post-processor's ids, as the router encodes a chat, for Qwen 3 and Llama 3. accelnet
(`tokbench --turns`, one thread, one scratch): the segment cache off (every turn tokenized
whole), on (each turn finds the last turn's segments), and on again over the same turns (a
retry); `tokenizers`: one awaited encode() per turn, a tokenizer just loaded (cold) and the
same one again (warm). µs per decision (per turn), and for the longest turn alone.

usage: bench/tokenize.py [--bin-dir build] [--turns]   (make bench builds build/tokbench)
Prints Markdown tables."""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import test_tokenize as tt  # noqa: E402  (the strings and the cache of the test)

HF_JS = r"""
const { Tokenizer } = require(process.argv[2]);
const lines = require('fs').readFileSync(0, 'utf8').split('\n').filter((l) => l.length)
  .map((l) => JSON.parse(l));
const now = () => Number(process.hrtime.bigint()) / 1e9;
(async () => {
  const t = await Tokenizer.fromFile(process.argv[3]);
  let t0 = now();
  const enc = await t.encodeBatch(lines);
  const cold = now() - t0;
  const tokens = enc.reduce((a, e) => a + e.getIds().length, 0);
  let warm = 1e9;
  for (let p = 0; p < 5; p++) {
    t0 = now();
    await t.encodeBatch(lines);
    warm = Math.min(warm, now() - t0);
  }
  const t2 = await Tokenizer.fromFile(process.argv[3]);
  t0 = now();
  for (const l of lines) await t2.encode(l);
  const coldOne = now() - t0;
  let warmOne = 1e9;
  for (let p = 0; p < 2; p++) {
    t0 = now();
    for (const l of lines) await t2.encode(l);
    warmOne = Math.min(warmOne, now() - t0);
  }
  console.log(JSON.stringify({tokens, cold, warm, coldOne, warmOne}));
})();
"""


HF_TURNS_JS = r"""
const { Tokenizer } = require(process.argv[2]);
const lines = require('fs').readFileSync(0, 'utf8').split('\n').filter((l) => l.length)
  .map((l) => JSON.parse(l));
const now = () => Number(process.hrtime.bigint()) / 1e9;
let longest = 0;
lines.forEach((l, i) => { if (l.length > lines[longest].length) longest = i; });
(async () => {
  const t = await Tokenizer.fromFile(process.argv[3]);
  const res = [];
  for (let p = 0; p < 3; p++) {
    let one = 0, tokens = 0;
    const t0 = now();
    for (let i = 0; i < lines.length; i++) {
      const t1 = now();
      const e = await t.encode(lines[i], null, {addSpecialTokens: false});
      if (i === longest) one = now() - t1;
      tokens += e.getIds().length;
    }
    res.push({s: now() - t0, one, tokens});
  }
  const warm = res.slice(1).reduce((a, r) => (r.s < a.s ? r : a));
  console.log(JSON.stringify({tokens: res[0].tokens, cold: res[0].s, coldOne: res[0].one,
                              warm: warm.s, warmOne: warm.one}));
})();
"""

TURN_MODELS = ["qwen3", "llama3"]
N_CONVS, N_TURNS = 8, 32


def _message(rnd):
    """About 250 tokens of prose (mostly English), code and now and then another language."""
    out = []
    while sum(len(p) for p in out) < 1000:
        k = rnd.random()
        if k < 0.7:
            out.append(" ".join(rnd.choice(tt.WORDS["en"]) for _ in range(rnd.randint(8, 20)))
                       + rnd.choice([".", "?", "!", ":"]))
        elif k < 0.9:
            out.append(rnd.choice(tt.CODE).strip())
        else:
            lang = rnd.choice([w for w in tt.WORDS if w != "en"])
            out.append(" ".join(rnd.choice(tt.WORDS[lang]) for _ in range(rnd.randint(4, 10))))
    return rnd.choice([" ", "\n", "\n\n"]).join(out)


def _turns(bin_dir, path):
    """The rendered prompts of the growing conversations, in the order they are sent."""
    rnd = random.Random(40)
    convs = [[{"role": "user", "content": _message(rnd)}] for _ in range(N_CONVS)]
    lines = []
    for turn in range(N_TURNS):
        for c in convs:
            if turn:
                c += [{"role": "assistant", "content": _message(rnd)},
                      {"role": "user", "content": _message(rnd)}]
            lines.append(json.dumps(json.dumps(c)) + "\n")
    r = subprocess.run([os.path.join(bin_dir, "accelnet"), "tokenize", "--tokenizer", path,
                        "--chat", "--text", "--lines"], input="".join(lines),
                       capture_output=True, text=True, check=True)
    return r.stdout


def turns_table(args, mods, tmp, env):
    js = os.path.join(tmp, "hf_turns.js")
    with open(js, "w") as f:
        f.write(HF_TURNS_JS)
    print(f"\n{N_CONVS} conversations of {N_TURNS} turns, interleaved; µs per decision (a "
          "turn), mean over all turns, and for the longest turn alone:\n")
    print("| file | turns | tokens (all turns) | longest turn (tokens) | accelnet, segment "
          "cache off | accelnet, on | accelnet, on, turns again | tokenizers cold "
          "(encode each) | tokenizers warm (encode each) | segment hits / misses |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in TURN_MODELS:
        path = tt._file(model)
        text = _turns(args.bin_dir, path)
        ours = json.loads(subprocess.run([os.path.join(args.bin_dir, "tokbench"), "--turns",
                                          path, "3"], input=text, capture_output=True,
                                         text=True, check=True).stdout)
        hf = json.loads(subprocess.run(["node", js, os.path.join(mods, "tokenizers"), path],
                                       input=text, capture_output=True, text=True, env=env,
                                       check=True).stdout)
        assert hf["tokens"] == ours["tokens"], (model, hf["tokens"], ours["tokens"])
        n = ours["texts"]

        def both(mean_us, one_us):
            return f"{mean_us:.0f} ({one_us:.0f})"
        print(f"| {model} | {n} | {ours['tokens']} | {ours['longest_tokens']} | "
              f"{both(ours['off_us'], ours['off_longest_us'])} | "
              f"{both(ours['on_us'], ours['on_longest_us'])} | "
              f"{both(ours['again_us'], ours['again_longest_us'])} | "
              f"{both(hf['cold'] * 1e6 / n, hf['coldOne'] * 1e6)} | "
              f"{both(hf['warm'] * 1e6 / n, hf['warmOne'] * 1e6)} | "
              f"{ours['segment_hits']} / {ours['segment_misses']} |")
    print("\nµs per decision (µs for the longest turn), one thread; loading and rendering "
          "not timed.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--turns", action="store_true",
                    help="only the growing conversations")
    args = ap.parse_args()
    mods = tt._fetch()
    tmp = tempfile.mkdtemp(prefix="accelnet-tokbench-")
    js = os.path.join(tmp, "hf.js")
    with open(js, "w") as f:
        f.write(HF_JS)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")
    if args.turns:
        turns_table(args, mods, tmp, env)
        return
    print("| file | strings | tokens | accelnet cold | accelnet warm | tokenizers cold "
          "(batch) | tokenizers warm (batch) | tokenizers cold (encode each) | "
          "tokenizers warm (encode each) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, model in enumerate(tt.MODELS):
        path = tt._file(model)
        strings = tt._strings(30 + i, tt._specials(path))
        text = "".join(json.dumps(s) + "\n" for s in strings)
        ours = json.loads(subprocess.run([os.path.join(args.bin_dir, "tokbench"), path],
                                         input=text, capture_output=True, text=True,
                                         check=True).stdout)
        hf = json.loads(subprocess.run(["node", js, os.path.join(mods, "tokenizers"), path],
                                       input=text, capture_output=True, text=True, env=env,
                                       check=True).stdout)
        assert hf["tokens"] == ours["tokens"], (model, hf["tokens"], ours["tokens"])
        k = hf["tokens"] / 1e3

        def us(s):
            return f"{s * 1e6 / k:.0f}"
        print(f"| {model} | {ours['texts']} | {ours['tokens']} | "
              f"{ours['cold_us_per_1k']:.0f} | {ours['warm_us_per_1k']:.0f} | "
              f"{us(hf['cold'])} | {us(hf['warm'])} | {us(hf['coldOne'])} | "
              f"{us(hf['warmOne'])} |")
    print("\nµs per 1,000 tokens, one thread; loading not timed; accelnet's segment cache "
          "off.")
    turns_table(args, mods, tmp, env)


if __name__ == "__main__":
    main()
