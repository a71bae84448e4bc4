#!/usr/bin/python3
"""Every Unicode code point, in a few contexts each ("x" c "<" c " " c "1" c "\\n " c "'s"
c c "a"), 32 code points a string, encoded by `accelnet tokenize --lines` and by Hugging
Face's `tokenizers`, for each file of tests/integration/test_tokenize.py (its npm cache).
Too slow for CI (34,752 strings of ~10 MB per file); run it when libpcre2, libutf8proc or the
reference's version changes, and regenerate src/tok/uninew.c (scripts/gen-tok-unicode.py)
when it finds a difference. Prints, per file, how many strings differ and where they start.

usage: bench/tokenize_sweep.py [--bin build/accelnet]"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import test_tokenize as tt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "accelnet"))
    args = ap.parse_args()
    mods = tt._fetch()
    js = os.path.join(HERE, "..", "build", "tokenize_sweep.js")
    os.makedirs(os.path.dirname(js), exist_ok=True)
    with open(js, "w") as f:
        f.write(tt.REFERENCE_JS)
    cps = [c for c in range(0x110000) if not 0xd800 <= c <= 0xdfff]
    strs = []
    for i in range(0, len(cps), 32):
        strs.append("".join("x{0}<{0} {0}1{0}\n {0}'s{0}{0}a".format(chr(c))
                            for c in cps[i:i + 32]))
    text = "".join(json.dumps(s) + "\n" for s in strs)
    failed = 0
    for model in tt.MODELS:
        path = tt._file(model)
        ref = subprocess.run(["node", js, os.path.join(mods, "tokenizers"), path], input=text,
                             capture_output=True, text=True, check=True).stdout.split("\n")
        ours = subprocess.run([args.bin, "tokenize", "--tokenizer", path, "--lines"],
                              input=text, capture_output=True, text=True,
                              check=True).stdout.split("\n")
        bad = [i for i, (w, g) in enumerate(zip(ref, ours)) if w != g]
        failed += len(bad)
        print(f"{model}: {len(strs)} strings, {len(bad)} differ"
              + (f"; blocks from {', '.join(hex(cps[i * 32]) for i in bad[:20])}" if bad
                 else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
