#!/usr/bin/env bash
# Run the unit tests and the black-box tests of one build directory (default: build).
# Ends with 'tests: N passed, N failed'.
# The black-box tests, the long part, start first and print as they go; the shape checks and
# the unit tests run beside them, their lines printed after the black-box ones.
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}
passed=0
failed=0
quick=$(mktemp)
out=$(mktemp)
trap 'rm -f "$quick" "$out"' EXIT

# The tree's shape, one test each: the layering check, its self-test on tests/layers/, and
# .clang-format (`make format-check`). ACCELNET_LAYERS_CHECK=0 and ACCELNET_FORMAT_CHECK=0 skip
# them, counting nothing (scripts/test.sh runs them once, not once per build).
shape() { # NAME COMMAND...
	local name=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
	else
		echo "$name failed"
		failed=$((failed + 1))
	fi
}

# With ACCELNET_TEST_LOCK (scripts/test.sh runs its passes at once) a unit test binary takes
# its turn as a black-box module does (tests/integration/run.py): it shares the machine with
# the other passes' tests, but waits while a pass's SERIAL tests run alone.
shared() { # COMMAND...
	if [ -z "${ACCELNET_TEST_LOCK:-}" ]; then
		"$@"
		return
	fi
	exec 8>>"$ACCELNET_TEST_LOCK/gate" 9>>"$ACCELNET_TEST_LOCK/room"
	flock -x 8 && flock -s 9 && flock -u 8
	"$@" 8>&- 9>&-
}

# The shape checks and the unit tests, in the background: their lines into $quick, ended by
# 'quick: PASSED FAILED'.
quick_tests() {
	if [ "${ACCELNET_LAYERS_CHECK:-1}" = 0 ]; then
		echo "layering check skipped (ACCELNET_LAYERS_CHECK=0)"
	else
		shape "layering check" /usr/bin/python3 scripts/check-layers.py
		shape "layering check self-test" /usr/bin/python3 scripts/check-layers.py --self-test
	fi
	if [ "${ACCELNET_FORMAT_CHECK:-1}" = 0 ]; then
		echo "format-check skipped (ACCELNET_FORMAT_CHECK=0)"
	else
		shape "format-check" make -s --no-print-directory format-check
	fi

	for t in "$build"/tests/test_*; do
		said=$(shared "$t" 2>&1)
		rc=$?
		echo "$said" | grep -E '^\[ +(PASSED|FAILED|ERROR|LINE) +\]|^\[==========\] tests' || true
		p=$(echo "$said" | sed -n -E 's/^\[  PASSED  \] ([0-9]+) test\(s\)\./\1/p' | tail -n 1)
		f=$(echo "$said" | sed -n -E 's/^\[  FAILED  \] ([0-9]+) test\(s\), listed below:/\1/p' | tail -n 1)
		passed=$((passed + ${p:-0}))
		failed=$((failed + ${f:-0}))
		if [ "$rc" -ne 0 ] && [ -z "$f" ]; then
			echo "$t exited $rc"
			echo "$said" | tail -n 20
			failed=$((failed + 1))
		fi
	done
	echo "quick: $passed $failed"
}
quick_tests >"$quick" 2>&1 &
unit=$!

# In parallel runner processes (ACCELNET_TEST_JOBS, default 4: the tests mostly wait on
# sockets; ACCELNET_PORT_SLOT_BASE, the first of their port ranges, when passes run at once);
# ACCELNET_ENVIRONMENT_TESTS=0 leaves out the tests of the machine's tools.
envflag=
[ "${ACCELNET_ENVIRONMENT_TESTS:-1}" = 0 ] && envflag=--no-environment
# ACCELNET_TEST_FILTER: only the integration tests whose names hold one of its words.
# shellcheck disable=SC2086
/usr/bin/python3 tests/integration/run.py --bin "$build/accelnet" -j "${ACCELNET_TEST_JOBS:-4}" \
	$envflag ${ACCELNET_TEST_FILTER:-} | tee "$out"
line=$(tail -n 1 "$out")
wait "$unit"
grep -v '^quick: ' "$quick"
if [[ "$(tail -n 1 "$quick")" =~ ^quick:\ ([0-9]+)\ ([0-9]+)$ ]]; then
	passed=$((passed + BASH_REMATCH[1]))
	failed=$((failed + BASH_REMATCH[2]))
else
	echo "unit tests did not finish"
	failed=$((failed + 1))
fi
if [[ "$line" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed(,\ ([0-9]+)\ skipped)?$ ]]; then
	passed=$((passed + BASH_REMATCH[1]))
	failed=$((failed + BASH_REMATCH[2]))
else
	echo "integration tests did not finish"
	failed=$((failed + 1))
fi
echo "tests: $passed passed, $failed failed"
