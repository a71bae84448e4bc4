#!/usr/bin/env bash
# Run each libFuzzer target (built by `make fuzz`) for N seconds (default 10) from its seed
# corpus. A target passes when it finds no crash. Ends with 'fuzz: N passed, N failed'.
set -u
cd "$(dirname "$0")/../.."
secs=${1:-10}
passed=0
failed=0
for bin in build-fuzz/fuzz_*; do
	name=${bin#build-fuzz/fuzz_}
	work=$(mktemp -d)
	cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null
	if "$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=1024 \
		-artifact_prefix="$work/" "$work" >"$work/log" 2>&1; then
		echo "ok   fuzz.$name ($(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1))"
		passed=$((passed + 1))
	else
		echo "FAIL fuzz.$name"
		tail -n 30 "$work/log"
		failed=$((failed + 1))
	fi
	rm -rf "$work"
done
echo "fuzz: $passed passed, $failed failed"
