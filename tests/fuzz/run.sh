#!/usr/bin/env bash
# Run each libFuzzer target (built by `make fuzz`) for N seconds (default 10) from its seed
# corpus, FUZZ_JOBS of them at once (default 2: each is one CPU-bound process). A target
# passes when it finds no crash. Its line is printed in name order, whatever order they end
# in. Ends with 'fuzz: N passed, N failed'.
set -u
cd "$(dirname "$0")/../.." || exit 1
secs=${1:-10}
jobs=${FUZZ_JOBS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one() { # NAME: fuzz it in $work/NAME, leaving 'ok' or 'FAIL' in $work/NAME.said
	local name=$1 dir=$work/$1
	mkdir "$dir"
	cp -r "tests/fuzz/corpus/$name/." "$dir/" 2>/dev/null
	if "build-fuzz/fuzz_$name" -max_total_time="$secs" -max_len=4096 -timeout=10 \
		-rss_limit_mb=1024 -artifact_prefix="$dir/" "$dir" >"$work/$name.log" 2>&1; then
		echo ok >"$work/$name.said"
	else
		echo FAIL >"$work/$name.said"
	fi
}

names=()
for bin in build-fuzz/fuzz_*; do
	names+=("${bin#build-fuzz/fuzz_}")
done
running=0
for name in "${names[@]}"; do
	if [ "$running" -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	one "$name" &
	running=$((running + 1))
done
wait

passed=0
failed=0
for name in "${names[@]}"; do
	if [ "$(cat "$work/$name.said" 2>/dev/null)" = ok ]; then
		echo "ok   fuzz.$name ($(grep -o 'cov: [0-9]*' "$work/$name.log" | tail -n 1))"
		passed=$((passed + 1))
	else
		echo "FAIL fuzz.$name"
		tail -n 30 "$work/$name.log"
		failed=$((failed + 1))
	fi
done
echo "fuzz: $passed passed, $failed failed"
