#!/usr/bin/env bash
# Build everything and run every test: unit and black-box tests on the normal build, the same
# again under AddressSanitizer + UBSan, the unit tests and the threaded black-box tests under
# ThreadSanitizer, and a short run of each libFuzzer target.
# Ends with the line 'N passed, N failed'; exits non-zero if anything failed.
#
# The passes overlap, since the black-box tests mostly wait on sockets and clocks: once the
# normal build is done its tests start, while the sanitizer, ThreadSanitizer and fuzz builds
# compile one after another beside them; each pass starts as soon as its build is done, the
# fuzz targets last, two at a time. ACCELNET_BUILD_NICE=N runs the builds at nice N (default 0:
# on a machine shared with other work, a nice build waits behind it), the fuzz build and targets
# at N + 5 (below).
# The passes' tests share the machine through one turn (ACCELNET_TEST_LOCK,
# tests/integration/run.py): a test marked SERIAL still runs alone among the tests of every
# pass (the builds, the fuzz targets and the tool tests marked ENVIRONMENT load the machine
# beside it, as other work on it would). Each pass runs its SERIAL tests first, in one turn:
# the normal pass's while the sanitizer build compiles, the sanitizer pass's while the
# ThreadSanitizer build does, the ThreadSanitizer pass's beside the fuzz targets, so the time
# they hold the machine alone is time the builds would have taken from the other tests anyway,
# and the machine is emptied for them three times, not once per module. Each pass keeps its
# output (build lines first) and is printed whole, in the order above, with the seconds since
# the start at which it was built and ran.
set -u
cd "$(dirname "$0")/.." || exit 1

scripts/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
jobs=$(nproc)
nice=${ACCELNET_BUILD_NICE:-0}
# Every compile goes through ccache (scripts/deps.sh installs it), its cache kept between runs
# beside the tokenizer test's (~/.cache/accelnet): the four builds are some 420 CPU seconds of a
# cold run's 1,770, and a run after another on the same machine recompiles only the files that
# changed. A fresh clone lies in a new directory each time: the cache's key leaves the directory
# out (CCACHE_BASEDIR, CCACHE_NOHASHDIR; the Makefile's paths are relative), so an object taken
# from the cache may name an earlier clone's directory in its debug information (what a
# sanitizer's stack trace shows before src/...). ACCELNET_CCACHE=0 compiles without it.
cc=()
if [ "${ACCELNET_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
	export CCACHE_DIR=${CCACHE_DIR:-${HOME:-/root}/.cache/accelnet/ccache}
	export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-3G}
	cc=(CC="ccache gcc" CXX="ccache g++" FUZZ_CC="ccache clang" FUZZ_CXX="ccache clang++")
fi
t0=$(date +%s)
work=$(mktemp -d)
mkdir "$work/lock"
export ACCELNET_TEST_LOCK=$work/lock
stop_tree() { # PID: SIGTERM to it and all it started (run.py cleans up its tests on SIGTERM)
	local child children
	children=$(ps -o pid= --ppid "$1")
	kill -TERM "$1" 2>/dev/null
	for child in $children; do
		stop_tree "$child"
	done
}
stop() { # the passes still running, when the script ends early
	local p
	for p in $(jobs -p); do
		stop_tree "$p"
	done
	wait
}
trap 'stop; rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
since() { echo $(($(date +%s) - t0)); }

# The other builds, in order, each leaving its status in $work/NAME.built. Their debug
# information is line tables only (-g1): what the sanitizers' and libFuzzer's stack traces
# print (file:line), at four fifths of the compile time of -g. They start with the normal
# build, not after it: the sanitizer pass is the run's longest, and its build, done after the
# normal one beside the normal pass's tests, was ready only at 298 s of an 1104 s run
# (2026-12-07); the normal pass, which had 250 s to spare, starts its tests a minute later.
(
	build() { # NAME MAKE-ARGS...
		local name=$1
		shift
		nice -n "$nice" make -j"$jobs" "$@" >"$work/$name.build" 2>&1
		echo "$? $(since)" >"$work/$name.built"
	}
	build san "${cc[@]}" SAN=1 CFLAGS="-O1 -g1" all unit bench
	build tsan "${cc[@]}" TSAN=1 CFLAGS="-O1 -g1" all unit
	nice=$((nice + 5)) build fuzz "${cc[@]}" FUZZ_DEBUG=-g1 fuzz
) &

echo "== normal build =="
if ! make -j"$jobs" "${cc[@]}" all unit bench; then
	echo "build failed"
	echo "0 passed, 1 failed"
	exit 1
fi

# In a pass: wait for build NAME, print its lines; fails (counting one failure) if it did.
built() { # NAME
	while [ ! -e "$work/$1.built" ]; do
		sleep 1
	done
	cat "$work/$1.build"
	local rc at
	read -r rc at <"$work/$1.built"
	if [ "$rc" -ne 0 ]; then
		echo "build failed"
		echo "0 passed, 1 failed"
		return 1
	fi
	echo "(built at $at s; tests from $(since) s)"
}

# The tree's shape (format-check, the layering check and its self-test) does not depend on the
# build: it counts once, with the normal build. ACCELNET_FORMAT_CHECK=0 makes tests/run.sh skip
# format-check; ACCELNET_LAYERS_CHECK=0 asks the same for the two layering tests. The tests of the
# machine's tools with accelnet (testssl, Chromium, promtool on deploy/, packaging: modules marked
# ENVIRONMENT) run once too: ACCELNET_ENVIRONMENT_TESTS=0. Each pass's runners take ports from
# slots of their own (run.py: 11 in all): normal 0-4 (five: the TLS scan holds one of them for
# minutes), sanitizer 5-8, ThreadSanitizer 9-10.
# The sanitizer pass's tokenizer comparisons (test_tokenize, test_tokenize_chat) run accelnet on
# the first 300 strings and conversations of each (ACCELNET_TOK_SAMPLE) and the long ones,
# against the same lines of the whole reference: the normal pass compares all of them (10,000
# strings a file). What is left of the module's CPU under the sanitizer is mostly loading the
# seven tokenizer files (1-3 s each there; 58 CPU s for the two modules at 300, 70 at 1,000).
# The suite runs on both event loops (tune.io): the normal pass on io_uring (ACCELNET_IO=auto:
# io_uring where the kernel lets a process set up a ring, epoll where it refuses, as a
# container's seccomp profile may), the sanitizer and ThreadSanitizer passes on epoll, the
# default. The io_uring back end's own tests run in every pass whatever it runs on: test_loop and test_net_ring (unit: each back end, the ring's
# receives and sends), test_event_loop (it serves, falls back, refuses, lets a client that never
# reads go) and test_splice's io_uring cases. (A sanitizer pass on io_uring, 2026-12-07, failed
# once on an HTTP/2 flood: a socket closed while bytes arrived stayed open in the kernel, its
# poll's removal refused by io_uring; fixed since by cancelling the poll, after which the whole
# suite passed on io_uring under the sanitizers too.)
(
	built san || exit 0
	ACCELNET_FORMAT_CHECK=0 ACCELNET_LAYERS_CHECK=0 ACCELNET_ENVIRONMENT_TESTS=0 \
		ACCELNET_TEST_JOBS=4 ACCELNET_PORT_SLOT_BASE=5 ACCELNET_IO=epoll \
		ACCELNET_TOK_SAMPLE=300 \
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		tests/run.sh build-san
	echo "(done at $(since) s)"
) >"$work/asan.log" 2>&1 &
asan=$!

# ThreadSanitizer: the unit tests and the integration tests of what threads share (the access
# log ring, the admission inbox and queues, the cache store, cluster sync and the prefix feed,
# generations across a reload). Races inside libzmq, which is not built with TSan, are
# suppressed (tests/tsan/suppressions.txt); a proxy that exits while workers still run
# (shutdown_ms passed) leaves them unjoined on purpose, so thread leaks are not reported.
(
	built tsan || exit 0
	ACCELNET_FORMAT_CHECK=0 ACCELNET_LAYERS_CHECK=0 ACCELNET_ENVIRONMENT_TESTS=0 \
		ACCELNET_TEST_JOBS=2 ACCELNET_PORT_SLOT_BASE=9 ACCELNET_IO=epoll \
		ACCELNET_TEST_FILTER="access_log. queue. sched. cache_review. cluster. reload." \
		TSAN_OPTIONS="halt_on_error=1 report_thread_leaks=0 suppressions=$PWD/tests/tsan/suppressions.txt" \
		tests/run.sh build-tsan
	echo "(done at $(since) s)"
) >"$work/tsan.log" 2>&1 &
tsan=$!

# The fuzz targets, ${FUZZ_SECONDS:-2} s each, and their build, at the builds' priority less 5:
# each keeps a CPU busy where the tests mostly wait, and no pass waits on them (they were done
# at 444 s of a 984 s run at the same priority as the sanitizer pass, the run's longest, whose
# tests they slowed), so they take the CPU the tests leave. CI's run is a smoke test of each
# target from its corpus (31 targets, two at a time: every second given each is a minute of
# CPU taken from the other passes on 2 cores); a change to a parser is fuzzed for minutes by
# whoever makes it (`make fuzz && tests/fuzz/run.sh 300`).
(
	built fuzz || exit 0
	nice -n $((nice + 5)) tests/fuzz/run.sh "${FUZZ_SECONDS:-2}"
	echo "(done at $(since) s)"
) >"$work/fuzz.log" 2>&1 &
fuzz=$!

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

# what failed, named: the lines of a log that say so, kept for the recap at the end (a CI page
# that shows only the tail of the output still names the failure)
note_failures() { # PASS-NAME LOG
	grep -E '^FAIL |^failed: |^\[  FAILED  \] [^0-9]| exited [0-9]+$|^(layering check|layering check self-test|format-check|build) failed$|did not finish' "$2" |
		sed "s/^/[$1] /" >>"$work/failures"
}

echo "== normal build (io_uring where allowed): tests from $(since) s =="
ACCELNET_IO=auto ACCELNET_TEST_JOBS=5 tests/run.sh build | tee "$work/normal.log"
echo "(done at $(since) s)"
tally "$work/normal.log"
note_failures normal "$work/normal.log"

echo "== AddressSanitizer + UBSan build =="
wait "$asan"
cat "$work/asan.log"
tally "$work/asan.log"
note_failures asan "$work/asan.log"

echo "== ThreadSanitizer build =="
wait "$tsan"
cat "$work/tsan.log"
tally "$work/tsan.log"
note_failures tsan "$work/tsan.log"

echo "== fuzz targets (${FUZZ_SECONDS:-2} s each) =="
wait "$fuzz"
cat "$work/fuzz.log"
tally "$work/fuzz.log"
note_failures fuzz "$work/fuzz.log"

if [ -s "$work/failures" ]; then
	echo "== what failed =="
	cat "$work/failures"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
