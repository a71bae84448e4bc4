"""bench/run stopped in the middle (issue 26): Ctrl-C, a CI job's limit (SIGTERM) or a closed
terminal (SIGHUP) leaves none of the processes it started running: its nginx origin, the
proxies under test, the simulators and the load generators are each in a session of their
own, which no signal to the bench reaches, so the bench must kill them on its way out.

The bench runs --quick, its first scenario only, with a marker in its environment that every
process it starts inherits; once its origin and a proxy are up it gets the signal, and no
process carrying the marker may be left. Skipped where a package bench/run would install is
missing (nginx, HAProxy, Varnish, wrk, gnuplot); needs the normal build (bench/run builds
build/, a no-op once it is there)."""

ENVIRONMENT = True  # runs the bench's tools (nginx, HAProxy, wrk) on the normal build

import os
import signal
import subprocess
import uuid

from harness import Skip, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _marked(mark):
    """(pid, command line) of the live processes whose environment holds <mark>."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark not in f.read():
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, IndexError):  # gone meanwhile
            pass
    return out


def _stopped_bench_leaves_nothing(env, sig):
    # a test installs nothing: bench/run would, first (scripts/deps.sh's packages and these)
    for pkg in ("haproxy", "gnuplot-nox", "varnish", "nginx-light", "wrk"):
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                           text=True)
        if "install ok installed" not in r.stdout:
            raise Skip(f"no {pkg} (bench/run installs it)")
    mark = f"ACCELNET_BENCH_TEST={uuid.uuid4()}"
    environ = dict(os.environ, ACCELNET_BENCH_TEST=mark.split("=", 1)[1])
    log = open(os.path.join(env.dir, "bench.log"), "wb")
    bench = subprocess.Popen([os.path.join(ROOT, "bench", "run"), "--quick", "--only", "1",
                              "--out", os.path.join(env.dir, "out")],
                             stdout=log, stderr=subprocess.STDOUT, env=environ,
                             start_new_session=True)
    try:
        # its origin is up (the first scenario has begun) and a proxy under test is too
        wait_until(lambda: any(" proxy -c " in c for _, c in _marked(mark.encode())),
                   "the bench's first proxy", timeout=120)
        assert bench.poll() is None
        bench.send_signal(sig)
        bench.wait(60)
        wait_until(lambda: not _marked(mark.encode()), "the bench's processes to go",
                   timeout=10)
    except AssertionError:
        left = _marked(mark.encode())
        with open(log.name, errors="replace") as f:
            said = f.read()[-2000:]
        raise AssertionError(f"left running after {signal.Signals(sig).name}: {left}\n"
                             f"the bench said: {said}") from None
    finally:
        for pid, _ in _marked(mark.encode()):
            try:  # what a failed run left: never beyond this test
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if bench.poll() is None:
            bench.kill()
        bench.wait()
        log.close()


def test_bench_stopped_by_sigterm_leaves_nothing_running(env):
    _stopped_bench_leaves_nothing(env, signal.SIGTERM)


def test_bench_stopped_by_ctrl_c_leaves_nothing_running(env):
    _stopped_bench_leaves_nothing(env, signal.SIGINT)
