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

usage: bench/tokenize.py [--bin-dir build]   (make bench builds build/tokbench)
Prints a Markdown table."""

import argparse
import json
import os
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build"))
    args = ap.parse_args()
    mods = tt._fetch()
    tmp = tempfile.mkdtemp(prefix="accelnet-tokbench-")
    js = os.path.join(tmp, "hf.js")
    with open(js, "w") as f:
        f.write(HF_JS)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")
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
    print("\nµs per 1,000 tokens, one thread; loading not timed.")


if __name__ == "__main__":
    main()
