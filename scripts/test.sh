#!/usr/bin/env bash
# Build everything and run every test: unit and black-box tests on the normal build, the same
# again under AddressSanitizer + UBSan, the unit tests and the threaded black-box tests under
# ThreadSanitizer, and a short run of each libFuzzer target.
# Ends with the line 'N passed, N failed'; exits non-zero if anything failed.
set -u
cd "$(dirname "$0")/.." || exit 1

scripts/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
jobs=$(nproc)
if ! make -j"$jobs" all unit bench || ! make -j"$jobs" SAN=1 all unit bench ||
	! make -j"$jobs" TSAN=1 all unit || ! make -j"$jobs" fuzz; then
	echo "build failed"
	echo "0 passed, 1 failed"
	exit 1
fi

passed=0
failed=0
tally() { # add the last 'N passed, N failed' line of a log to the totals
	local line
	line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
	if [[ "$line" =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
		passed=$((passed + BASH_REMATCH[1]))
		failed=$((failed + BASH_REMATCH[2]))
	else
		failed=$((failed + 1))
	fi
}

log=$(mktemp)
failures=$(mktemp)
trap 'rm -f "$log" "$failures"' EXIT
# what failed, named: the lines of a log that say so, kept for the recap at the end (a CI page
# that shows only the tail of the output still names the failure)
note_failures() { # PASS-NAME LOG
	grep -E '^FAIL |^failed: |^\[  FAILED  \] [^0-9]| exited [0-9]+$|^(layering check|layering check self-test|format-check) failed$|did not finish' "$2" |
		sed "s/^/[$1] /" >>"$failures"
}

echo "== normal build =="
tests/run.sh build | tee "$log"
tally "$log"
note_failures normal "$log"

# The tree's shape (format-check, the layering check and its self-test) does not depend on the
# build: it counts once, with the normal build. ACCELNET_FORMAT_CHECK=0 makes tests/run.sh skip
# format-check; ACCELNET_LAYERS_CHECK=0 asks the same for the two layering tests. The tests of the
# machine's tools with accelnet (testssl, Chromium, promtool on deploy/, packaging: modules marked
# ENVIRONMENT) run once too: ACCELNET_ENVIRONMENT_TESTS=0.
echo "== AddressSanitizer + UBSan build =="
ACCELNET_FORMAT_CHECK=0 ACCELNET_LAYERS_CHECK=0 ACCELNET_ENVIRONMENT_TESTS=0 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	tests/run.sh build-san | tee "$log"
tally "$log"
note_failures asan "$log"

# ThreadSanitizer: the unit tests and the integration tests of what threads share (the access
# log ring, the admission inbox and queues, the cache store, cluster sync and the prefix feed,
# generations across a reload). Races inside libzmq, which is not built with TSan, are
# suppressed (tests/tsan/suppressions.txt); a proxy that exits while workers still run
# (shutdown_ms passed) leaves them unjoined on purpose, so thread leaks are not reported.
echo "== ThreadSanitizer build =="
ACCELNET_FORMAT_CHECK=0 ACCELNET_LAYERS_CHECK=0 ACCELNET_ENVIRONMENT_TESTS=0 \
	ACCELNET_TEST_FILTER="access_log. queue. sched. cache_review. cluster. reload." \
	TSAN_OPTIONS="halt_on_error=1 report_thread_leaks=0 suppressions=$PWD/tests/tsan/suppressions.txt" \
	tests/run.sh build-tsan | tee "$log"
tally "$log"
note_failures tsan "$log"

echo "== fuzz targets (${FUZZ_SECONDS:-10} s each) =="
tests/fuzz/run.sh "${FUZZ_SECONDS:-10}" | tee "$log"
tally "$log"
note_failures fuzz "$log"

if [ -s "$failures" ]; then
	echo "== what failed =="
	cat "$failures"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
