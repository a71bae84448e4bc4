"""The test runner itself (run.py): stopped by SIGTERM in the middle of a test, as a CI job's
time limit stops it, it leaves nothing behind. The test's processes run in sessions of their
own (harness.Env.start), so no signal to the runner reaches them: Chromium's whole tree, the
simulators and the proxy would run on, and the scratch directory stay, unless the runner cleans
up on its way out.

The runner under test runs the Chromium test of the dashboard (the most processes of any),
with a marker in its environment that the processes it starts inherit (Chromium's zygote
and renderers are found by their process group), and a TMPDIR of its own that must be left
empty. Skipped, saying so, when Debian's chromium is not installed."""

ENVIRONMENT = True  # a test of the machine's tools with accelnet (run.py --no-environment)

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

from browser import chromium
from harness import BIN, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))


def _stat(pid):
    """(state, process group) of process <pid>, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def _ours(mark):
    """PIDs of the live processes (zombies are dead) whose environment holds <mark>, and of
    those in their process groups: Chromium's zygote and what it forks (renderers, GPU
    process) start with an environment of their own."""
    marked, groups, live = [], set(), {}
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        st = _stat(pid)
        if not st or st[0] == "Z":
            continue
        live[pid] = st[1]
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read():
                    marked.append(pid)
                    groups.add(st[1])
        except OSError:  # gone meanwhile, or not ours
            pass
    return sorted(set(marked) | {pid for pid, g in live.items() if g in groups})


def _names(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")[:120].decode(errors="replace")
            out.append(f"{pid} {cmd}")
        except OSError:
            pass
    return out


def test_sigterm_leaves_nothing(env):
    if not chromium():
        print("skip: no chromium (Debian package chromium; scripts/deps.sh installs it)")
        return
    mark = uuid.uuid4().hex
    # the runner's TMPDIR, where its test's directory and Chromium's go (short: browser.py)
    tmp = tempfile.mkdtemp(prefix="run-")
    env.on_cleanup.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
    log = open(os.path.join(env.dir, "runner.log"), "wb")
    runner = subprocess.Popen([sys.executable, os.path.join(HERE, "run.py"), "--bin", BIN,
                               "dashboard.page_draws"],
                              env=dict(os.environ, TMPDIR=tmp, ACCELNET_TEST_MARK=mark),
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True)  # a group of its own, not this test's

    def runner_log():
        with open(log.name, "rb") as f:
            return f.read().decode(errors="replace")[-3000:]

    def browsing():
        if runner.poll() is not None:
            raise AssertionError(f"the runner ended before its chromium had a page:\n"
                                 f"{runner_log()}")
        return any("--type=renderer" in n for n in _names(_ours(mark.encode())))
    try:
        wait_until(browsing, "the runner's test to start chromium's renderer", timeout=60)
        runner.send_signal(signal.SIGTERM)
        rc = runner.wait(60)
        assert rc == 128 + signal.SIGTERM, f"runner: {rc}\n{runner_log()}"
        assert "stopped by signal 15" in runner_log(), runner_log()
        wait_until(lambda: not _ours(mark.encode()), "the test's processes to be gone", 15)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        log.close()
        left = _names(_ours(mark.encode()))
        for line in left:  # not left to the next test either
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except OSError:
                pass
        assert not left, "left running:\n" + "\n".join(left)
    assert os.listdir(tmp) == [], f"left in TMPDIR: {os.listdir(tmp)}"
