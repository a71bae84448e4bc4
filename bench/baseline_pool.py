#!/usr/bin/python3
"""bench/baseline_pool.py RESULTS_JSON...: pool the same-round ratios of accelnet to
accelnet-base (bench/run --baseline) over several runs of scenarios 1, 2 and 5, and print
their medians. One run's five rounds on a 2-core machine spread by +-20%; pooling several
runs is what makes a 3% claim checkable."""
import json
import statistics
import sys


def ratios(paths, key):
    cpu, p99 = [], []
    for path in paths:
        with open(path) as f:
            sc = json.load(f)["scenarios"].get(key)
        if not sc or "accelnet-base" not in sc["rounds"]:
            continue
        for new, old in zip(sc["rounds"]["accelnet"], sc["rounds"]["accelnet-base"]):
            if sc["kind"] == "sse":
                cpu.append((new["cpu_s"] / new["token_delay_ms"]["n"])
                           / (old["cpu_s"] / old["token_delay_ms"]["n"]))
                p99.append(new["token_delay_ms"]["p99"] / old["token_delay_ms"]["p99"])
            else:
                cpu.append(new["cpu_us_per_req"] / old["cpu_us_per_req"])
                p99.append(new["p99_ms"] / old["p99_ms"])
    return cpu, p99


def main():
    print("| scenario | rounds | CPU/req ÷ base (median) | p99 ÷ base (median) | CPU ratio range |")
    print("|---|---|---|---|---|")
    for key in ("1", "2", "5"):
        cpu, p99 = ratios(sys.argv[1:], key)
        if cpu:
            print(f"| {key} | {len(cpu)} | {statistics.median(cpu):.3f} | "
                  f"{statistics.median(p99):.3f} | {min(cpu):.2f}-{max(cpu):.2f} |")


if __name__ == "__main__":
    main()
