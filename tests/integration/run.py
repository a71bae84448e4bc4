"""Runs every test_* function of the tests/integration/test_*.py modules, each with a fresh
Env that is cleaned up whatever happens, and ends with the line 'N passed, N failed'
(', N skipped' after it when a test raised harness.Skip: it cannot run on this machine).
Usage: run.py [--bin PATH] [-j N] [--no-environment] [NAME-FILTER...]

With -j N (N > 1) modules run in N runner processes at once, each module whole in one of
them, its lines printed together when it ends. A module that sets SERIAL = True (it loads the
machine, measures under load, or needs fixed ports or machine-wide state) runs after the
others, alone among them: the ENVIRONMENT modules still running (below) go on beside it. Each
runner process takes its ports from a range of its own (harness.free_port), so two never pick
the same one. A module that sets ENVIRONMENT = True tests accelnet with the
machine's tools (testssl, Chromium, Prometheus, packaging, systemd); --no-environment leaves
those out (the sanitizer pass: they exercise nothing ASan would see that the other tests do not).

Passes that run at once (scripts/test.sh: the normal, sanitizer and ThreadSanitizer builds)
share one turn through ACCELNET_TEST_LOCK, a folder: a SERIAL module waits until no test of any
pass runs, and none starts while it runs (its turn is first in line: modules that come later
wait behind it), while the other modules share the machine. An ENVIRONMENT module takes no
turn: like the builds that run beside the tests, it loads the machine (a TLS scan, a package
build) and times nothing. Each pass takes its ports from its own runner slots
(ACCELNET_PORT_SLOT_BASE: the first slot of its -j N, at most 9 in all).

At the end it lists the modules by CPU seconds (user + system, of the runner and every process
it started), the costliest first: where a run's time goes, which load on the machine disturbs
less than wall time.

Stopped by SIGTERM or SIGHUP (a CI job's time limit, a closed terminal) as by Ctrl-C: the
running test's processes, each in a session of its own that no signal to this one reaches, are
killed and its scratch directory removed before the runner exits (status 128 + the signal);
with -j the signal is passed to every runner process, which does the same."""

import contextlib
import fcntl
import importlib
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$")
children = []
SLOTS = 9  # harness.free_port: 10000 + slot x 2500 stays below the ephemeral range


@contextlib.contextmanager
def turn(mod):
    """Hold the machine for one module: alone when it is SERIAL, else shared with every other
    module of any pass (ACCELNET_TEST_LOCK; nothing to hold without it, nor for an ENVIRONMENT
    module). A module waiting for its turn first holds the gate, so that no module that asks
    later gets in before it."""
    folder = os.environ.get("ACCELNET_TEST_LOCK")
    serial = getattr(mod, "SERIAL", False)
    if not folder or getattr(mod, "ENVIRONMENT", False):
        yield
        return
    with open(os.path.join(folder, "gate"), "a") as gate, \
            open(os.path.join(folder, "room"), "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(room, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        if not serial:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


def _stopped(signum, frame):
    print(f"stopped by signal {signum}: cleaning up", flush=True)
    for c in children:
        if c.poll() is None:
            c.send_signal(signum)
    for c in children:
        c.wait()
    raise SystemExit(128 + signum)  # through the running test's finally: env.cleanup()


def modules(environment):
    """The test modules to run, as (file name, module), in name order."""
    out = []
    for fname in sorted(os.listdir(HERE)):
        if fname.startswith("test_") and fname.endswith(".py"):
            mod = importlib.import_module(fname[:-3])
            if environment or not getattr(mod, "ENVIRONMENT", False):
                out.append((fname, mod))
    return out


def cpu_seconds(ru):
    """user + system seconds of a resource.struct_rusage"""
    return ru.ru_utime + ru.ru_stime


def note_cost(tally, fname, wall, cpu):
    """Keep a module's wall and CPU seconds (its processes' included) for the run's list."""
    tally["cost"].append((cpu, wall, fname[5:-3]))


def print_costs(tally):
    """The modules by CPU seconds (user + system of the runner and every process it started
    and reaped), the costliest first: where a CI run's time goes on a loaded machine."""
    costs = sorted(tally["cost"], reverse=True)
    if not costs:
        return
    total = sum(c for c, _, _ in costs)
    print(f"cpu: {total:.0f} s in {len(costs)} modules; the costliest: "
          + ", ".join(f"{n} {c:.1f}s ({w:.0f}s wall)" for c, w, n in costs[:12]))


def own_usage():
    """CPU seconds of this process and of the children it has reaped, so far"""
    return (cpu_seconds(resource.getrusage(resource.RUSAGE_SELF))
            + cpu_seconds(resource.getrusage(resource.RUSAGE_CHILDREN)))


def run_module(fname, mod, filters, harness, tally):
    """Run the tests of one module in this process, printing a line for each."""
    for name in sorted(n for n in dir(mod) if n.startswith("test_")):
        full = f"{fname[5:-3]}.{name[5:]}"
        if filters and not any(a in full for a in filters):
            continue
        env = harness.Env(name)
        t0 = time.monotonic()
        try:
            getattr(mod, name)(env)
            env.finish()
            tally["passed"] += 1
            print(f"ok   {full} ({time.monotonic() - t0:.1f}s)", flush=True)
        except harness.Skip as e:
            tally["skipped"] += 1
            print(f"skip {full}: {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
            tally["failed"] += 1
            tally["failures"].append(full)
            print(f"FAIL {full}: {e}", flush=True)
            traceback.print_exc(limit=4)
            for p in env.procs:
                print(f"--- {p.name} log ---\n{env.log(p)[-3000:]}", flush=True)
        finally:
            env.cleanup()


def has_tests(fname, mod, filters):
    """Does the module hold a test that one of <filters> names (any, without filters)?"""
    return not filters or any(a in f"{fname[5:-3]}.{n[5:]}" for n in dir(mod)
                              if n.startswith("test_") for a in filters)


def run_parallel(mods, filters, jobs, tally):
    """Run each module in a runner process of its own, at most <jobs> at once (SERIAL ones
    alone, after the rest), adding their summaries to <tally>."""
    wanted = [(f, m) for f, m in mods if has_tests(f, m, filters)]
    # the long ones (the tools' scans and builds) first, so that none of them ends the run
    queue = [f for f, m in sorted(wanted, key=lambda fm: not getattr(fm[1], "ENVIRONMENT", False))
             if not getattr(m, "SERIAL", False)]
    serial = [f for f, m in wanted if getattr(m, "SERIAL", False)]
    base = int(os.environ.get("ACCELNET_PORT_SLOT_BASE", "0"))
    if base < 0 or base + jobs > SLOTS:
        sys.exit(f"run.py: runner slots {base}..{base + jobs - 1}: there are {SLOTS} "
                 f"(0..{SLOTS - 1})")
    free = list(range(base, base + jobs))
    running = {}  # pid -> (process, module, slot, output file, start)

    def start(fname, slot):
        out = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, ACCELNET_PORT_SLOT=str(slot))
        p = subprocess.Popen([sys.executable, __file__, "--module", fname] + filters,
                             stdout=out, stderr=subprocess.STDOUT, env=env)
        children.append(p)
        running[p.pid] = (p, fname, slot, out, time.monotonic())

    def reap():
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            return
        p, fname, slot, out, t0 = running.pop(pid)
        note_cost(tally, fname, time.monotonic() - t0, cpu_seconds(usage))
        p.returncode = os.waitstatus_to_exitcode(status)
        children.remove(p)
        free.append(slot)
        out.seek(0)
        text = out.read()
        out.close()
        lines = text.rstrip("\n").split("\n")
        m = SUMMARY.match(lines[-1])
        # the module's own lines; its summary and list of failures go into the run's
        for line in lines[:-1] if m else lines:
            if line and not line.startswith("failed: "):
                print(line)
        if not m:
            print(f"FAIL {fname[5:-3]}: its runner ended without a summary (exit {p.returncode})")
            tally["failed"] += 1
            tally["failures"].append(fname[5:-3])
            return
        tally["passed"] += int(m.group(1))
        tally["failed"] += int(m.group(2))
        tally["skipped"] += int(m.group(3) or 0)
        for line in lines:
            if line.startswith("FAIL "):
                tally["failures"].append(line[5:].split(":", 1)[0])
        sys.stdout.flush()

    environment = {f for f, m in wanted if getattr(m, "ENVIRONMENT", False)}

    def others_running():  # modules that are not ENVIRONMENT ones (those take no turn)
        return any(f not in environment for _, f, _, _, _ in running.values())

    for fname in queue:
        if not free:
            reap()
        start(fname, free.pop(0))
    # the SERIAL ones alone among the tests, but beside the tools' scans and builds still
    # running (a TLS scan of minutes), as beside the other passes' builds
    for fname in serial:
        while others_running() or not free:
            reap()
        start(fname, free.pop(0))
    while running:
        reap()


def main():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stopped)
    args = sys.argv[1:]
    jobs, only, environment = 1, None, True
    while args and args[0] in ("--bin", "-j", "--module", "--no-environment"):
        if args[0] == "--no-environment":
            environment = False
            args = args[1:]
            continue
        if len(args) < 2:
            sys.exit(f"run.py: {args[0]} needs a value")
        if args[0] == "--bin":
            os.environ["ACCELNET"] = os.path.abspath(args[1])
        elif args[0] == "-j":
            jobs = int(args[1])
        else:
            only = args[1]
        args = args[2:]
    import harness  # after ACCELNET is set
    harness.BIN = os.environ.get("ACCELNET", harness.BIN)
    tally = {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "cost": []}
    mods = modules(environment)
    if only:
        mods = [(f, m) for f, m in mods if f == only]
    if jobs > 1 and not only:
        run_parallel(mods, args, jobs, tally)
    else:
        for fname, mod in mods:
            if not has_tests(fname, mod, args):
                continue
            with turn(mod):
                t0, ru0 = time.monotonic(), own_usage()
                run_module(fname, mod, args, harness, tally)
                note_cost(tally, fname, time.monotonic() - t0, own_usage() - ru0)
    if not only:
        print_costs(tally)
    if tally["failures"]:
        print("failed: " + ", ".join(tally["failures"]))
    print(f"{tally['passed']} passed, {tally['failed']} failed"
          + (f", {tally['skipped']} skipped" if tally["skipped"] else ""))
    return 1 if tally["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
