"""Runs every test_* function of the tests/integration/test_*.py modules, each with a fresh
Env that is cleaned up whatever happens, and ends with the line 'N passed, N failed'
(', N skipped' after it when a test raised harness.Skip: it cannot run on this machine).
Usage: run.py [--bin PATH] [-j N] [--no-environment] [--durations-out FILE] [NAME-FILTER...]

A module's tests that must run alone among the tests (they load the machine, measure under
load, or need fixed ports or machine-wide state) are its SERIAL ones: SERIAL = True for all of
them, or SERIAL = {"test_name", ...} for those named (the module says why beside it); the
others share the machine. A run takes its SERIAL tests first, in one turn of its own: alone
among the tests (the sequential run included, when passes run at once), then the rest.

With -j N (N > 1) the shared tests of a module run whole in one of N runner processes, its
SERIAL tests in another, each part's lines printed together when it ends; the costliest parts
start first, by the seconds their tests took in a recorded run of that build (durations/ beside
this file; --durations-out FILE writes this run's into FILE, keeping the tests it did not run),
so that no long part starts last. The SERIAL parts run one after another, beside one
ENVIRONMENT module at most (below; it takes no turn, and the costliest must start early: a TLS
scan of minutes), as beside the builds of other passes. Each runner process takes its
ports from a range of its own (harness.free_port), so two never pick the same one. A module
that sets ENVIRONMENT = True tests accelnet with the machine's tools (testssl, Chromium,
Prometheus, packaging, systemd); --no-environment leaves those out (the sanitizer pass: they
exercise nothing ASan would see that the other tests do not).

Passes that run at once (scripts/test.sh: the normal, sanitizer and ThreadSanitizer builds)
share one turn through ACCELNET_TEST_LOCK, a folder: a pass's SERIAL turn waits until no test
of any pass runs, and none starts while it lasts (it is first in line: tests that ask later
wait behind it), while the shared parts share the machine. Each pass takes its SERIAL turn
once, for all its SERIAL tests, so the machine is emptied for them once per pass, not once per
module. An ENVIRONMENT module takes no turn: like the builds that run beside the tests, it
loads the machine (a TLS scan, a package build) and times nothing. Each pass takes its ports
from its own runner slots (ACCELNET_PORT_SLOT_BASE: the first slot of its -j N, at most 11 in
all).

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
SUMMARY = re.compile(r"(?<![0-9])(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$")
PASSED = re.compile(r"^ok +(\S+) \(([0-9.]+)s\)$")
children = []
SLOTS = 11  # harness.free_port: 10000 + slot x 2000 stays below the ephemeral range
HELD = "ACCELNET_TEST_TURN_HELD"  # set for a runner whose run holds the SERIAL turn for it


@contextlib.contextmanager
def turn(alone):
    """Hold the machine: alone (a pass's SERIAL tests) or shared with the other shared tests of
    any pass (ACCELNET_TEST_LOCK; nothing to hold without it). A turn waiting first holds the
    gate, so that no turn asked later gets in before it."""
    folder = os.environ.get("ACCELNET_TEST_LOCK")
    if not folder:
        yield
        return
    with open(os.path.join(folder, "gate"), "a") as gate, \
            open(os.path.join(folder, "room"), "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


def part_turn(mod, part):
    """The turn one part of a module takes in its own runner: none for an ENVIRONMENT module,
    nor for a SERIAL part whose run holds the turn for it."""
    if getattr(mod, "ENVIRONMENT", False) or (part == "serial" and os.environ.get(HELD)):
        return contextlib.nullcontext()
    return turn(part == "serial")


def _stopped(signum, frame):
    print(f"stopped by signal {signum}: cleaning up", flush=True)
    for c in children:
        if c.poll() is None:
            c.send_signal(signum)
    for c in children:
        c.wait()
    raise SystemExit(128 + signum)  # through the running test's finally: env.cleanup()


def modules(environment, only=None):
    """The test modules to run, as (file name, module), in name order: <only> alone when given
    (a runner of a -j run imports the one it runs: importing all 70 takes half a CPU second)."""
    out = []
    for fname in sorted(os.listdir(HERE)):
        if fname.startswith("test_") and fname.endswith(".py") and only in (None, fname):
            mod = importlib.import_module(fname[:-3])
            if environment or not getattr(mod, "ENVIRONMENT", False):
                out.append((fname, mod))
    return out


def serial_names(mod):
    """The names of <mod>'s tests that run alone: all of them (SERIAL = True) or those its
    SERIAL set names."""
    serial = getattr(mod, "SERIAL", False)
    if serial is True:
        return {n for n in dir(mod) if n.startswith("test_")}
    unknown = set(serial or ()) - set(dir(mod))
    if unknown:
        sys.exit(f"run.py: {mod.__name__}.SERIAL names no test {sorted(unknown)}")
    return set(serial or ())


def tests_of(fname, mod, filters, part=None):
    """The names of <mod>'s tests that <filters> name (all, without filters), in name order:
    of its SERIAL part or its shared one (<part>), or both."""
    serial = serial_names(mod)
    out = []
    for name in sorted(n for n in dir(mod) if n.startswith("test_")):
        if filters and not any(a in f"{fname[5:-3]}.{name[5:]}" for a in filters):
            continue
        if part is None or (name in serial) == (part == "serial"):
            out.append(name)
    return out


def read_durations(path):
    """{module.test: seconds} from a durations file (nothing when there is none)."""
    out = {}
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            words = line.split()
            if len(words) == 2 and not line.startswith("#"):
                out[words[0]] = float(words[1])
    return out


def durations_file():
    """The durations recorded for the build under test: durations/NAME.txt for a binary in
    NAME/ (build, build-san, build-tsan), the normal build's for any other."""
    binary = os.path.abspath(os.environ.get("ACCELNET", "build/accelnet"))
    name = os.path.basename(os.path.dirname(binary))
    path = os.path.join(HERE, "durations", name + ".txt")
    return path if os.path.exists(path) else os.path.join(HERE, "durations", "build.txt")


def write_durations(path, seen):
    """Write the seconds of the tests this run passed into <path>, keeping its other lines."""
    keep = read_durations(path)
    keep.update(seen)
    head = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        head = [line for line in f if line.startswith("#")]
    with open(path + ".tmp", "w") as f:
        f.writelines(head)
        f.writelines(f"{k} {v:.1f}\n" for k, v in sorted(keep.items()))
    os.replace(path + ".tmp", path)


def cpu_seconds(ru):
    """user + system seconds of a resource.struct_rusage"""
    return ru.ru_utime + ru.ru_stime


def note_cost(tally, fname, wall, cpu):
    """Keep a module's wall and CPU seconds (its processes' included) for the run's list."""
    tally["cost"].append((cpu, wall, fname[5:-3]))


def print_costs(tally):
    """The modules by CPU seconds (user + system of the runner and every process it started
    and reaped), the costliest first: where a CI run's time goes on a loaded machine."""
    sums = {}
    for c, w, n in tally["cost"]:  # a module run in two parts counts once
        c0, w0 = sums.get(n, (0, 0))
        sums[n] = (c0 + c, w0 + w)
    costs = sorted(((c, w, n) for n, (c, w) in sums.items()), reverse=True)
    if not costs:
        return
    total = sum(c for c, _, _ in costs)
    print(f"cpu: {total:.0f} s in {len(costs)} modules; the costliest: "
          + ", ".join(f"{n} {c:.1f}s ({w:.0f}s wall)" for c, w, n in costs[:12]))


def own_usage():
    """CPU seconds of this process and of the children it has reaped, so far"""
    return (cpu_seconds(resource.getrusage(resource.RUSAGE_SELF))
            + cpu_seconds(resource.getrusage(resource.RUSAGE_CHILDREN)))


def run_module(fname, mod, names, harness, tally):
    """Run the tests <names> of one module in this process, printing a line for each."""
    for name in names:
        full = f"{fname[5:-3]}.{name[5:]}"
        env = harness.Env(name)
        t0 = time.monotonic()
        try:
            getattr(mod, name)(env)
            env.finish()
            tally["passed"] += 1
            took = time.monotonic() - t0
            tally["durations"][full] = took
            print(f"ok   {full} ({took:.1f}s)", flush=True)
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


def parts(mods, filters):
    """The parts to run, as (file name, module, 'serial' or 'shared', test names)."""
    out = []
    for fname, mod in mods:
        for part in ("serial", "shared"):
            names = tests_of(fname, mod, filters, part)
            if names:
                out.append((fname, mod, part, names))
    return out


def run_parallel(mods, filters, jobs, tally):
    """Run each part of each module in a runner process of its own, at most <jobs> at once:
    the SERIAL parts first, one after another in one turn alone (beside the ENVIRONMENT
    modules), then the shared ones, the costliest first; their summaries go into <tally>."""
    known = read_durations(durations_file())

    def cost(p):
        return sum(known.get(f"{p[0][5:-3]}.{n[5:]}", 1.0) for n in p[3])
    todo = sorted(parts(mods, filters), key=cost, reverse=True)
    serial = [p for p in todo if p[2] == "serial"]
    environment = [p for p in todo if p[2] == "shared" and getattr(p[1], "ENVIRONMENT", False)]
    shared = [p for p in todo if p not in serial and p not in environment]
    base = int(os.environ.get("ACCELNET_PORT_SLOT_BASE", "0"))
    if base < 0 or base + jobs > SLOTS:
        sys.exit(f"run.py: runner slots {base}..{base + jobs - 1}: there are {SLOTS} "
                 f"(0..{SLOTS - 1})")
    free = list(range(base, base + jobs))
    running = {}  # pid -> (process, module, slot, output file, start)

    def start(p, held=False):
        fname, part = p[0], p[2]
        out = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, ACCELNET_PORT_SLOT=str(free.pop(0)))
        env.pop(HELD, None)
        if held:
            env[HELD] = "1"
        proc = subprocess.Popen([sys.executable, __file__, "--module", fname, "--part", part]
                                + filters, stdout=out, stderr=subprocess.STDOUT, env=env)
        children.append(proc)
        running[proc.pid] = (proc, fname, int(env["ACCELNET_PORT_SLOT"]), out, time.monotonic())
        return proc.pid

    def reap():
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            return pid
        p, fname, slot, out, t0 = running.pop(pid)
        note_cost(tally, fname, time.monotonic() - t0, cpu_seconds(usage))
        p.returncode = os.waitstatus_to_exitcode(status)
        children.remove(p)
        free.append(slot)
        out.seek(0)
        text = out.read()
        out.close()
        lines = text.rstrip("\n").split("\n")
        # a test's server thread dying as the module ends can leave its traceback's last line
        # unfinished before the summary (both go to the same pipe): read the summary off the
        # line's end, the rest stays a line of its own
        m = SUMMARY.search(lines[-1])
        if m and m.start():
            lines[-1:] = [lines[-1][:m.start()], lines[-1][m.start():]]
        # the module's own lines; its summary and list of failures go into the run's
        for line in lines[:-1] if m else lines:
            if line and not line.startswith("failed: "):
                print(line)
            ok = PASSED.match(line)
            if ok:
                tally["durations"][ok.group(1)] = float(ok.group(2))
        if not m:
            print(f"FAIL {fname[5:-3]}: its runner ended without a summary (exit {p.returncode})")
            tally["failed"] += 1
            tally["failures"].append(fname[5:-3])
            return pid
        tally["passed"] += int(m.group(1))
        tally["failed"] += int(m.group(2))
        tally["skipped"] += int(m.group(3) or 0)
        for line in lines:
            if line.startswith("FAIL "):
                tally["failures"].append(line[5:].split(":", 1)[0])
        sys.stdout.flush()
        return pid

    def start_environment():  # one at most beside the SERIAL parts: the costliest, a TLS scan
        if environment and free and not any(f in env_names for _, f, _, _, _ in running.values()):
            start(environment.pop(0))

    # the SERIAL parts, one after another in this run's turn alone, beside the builds and one
    # of the tools' scans (of minutes: it must start early), as beside the other passes' builds
    env_names = {p[0] for p in environment}
    if serial:
        start_environment()
        with turn(True):
            for p in serial:
                while not free:
                    reap()
                pid = start(p, held=True)
                while pid in running:
                    reap()
                    start_environment()
    for p in environment + shared:
        while not free:
            reap()
        start(p)
    while running:
        reap()


def run_sequential(mods, filters, part, harness, tally):
    """Run the parts in this process: the SERIAL ones first, in one turn alone; the shared
    ones after, each module in a turn of its own (none for an ENVIRONMENT module)."""
    todo = parts(mods, filters)
    if part:
        todo = [p for p in todo if p[2] == part]

    def run(fname, mod, names):
        t0, ru0 = time.monotonic(), own_usage()
        run_module(fname, mod, names, harness, tally)
        note_cost(tally, fname, time.monotonic() - t0, own_usage() - ru0)
    serial = [p for p in todo if p[2] == "serial"]
    if serial:
        alone = all(getattr(p[1], "ENVIRONMENT", False) for p in serial) or os.environ.get(HELD)
        with contextlib.nullcontext() if alone else turn(True):
            for fname, mod, _, names in serial:
                run(fname, mod, names)
    for fname, mod, part_, names in todo:
        if part_ == "shared":
            with part_turn(mod, "shared"):
                run(fname, mod, names)


def main():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stopped)
    args = sys.argv[1:]
    jobs, only, part, environment, durations_out = 1, None, None, True, None
    valued = ("--bin", "-j", "--module", "--part", "--durations-out")
    while args and args[0] in valued + ("--no-environment",):
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
        elif args[0] == "--module":
            only = args[1]
        elif args[0] == "--part":
            part = args[1]
        else:
            durations_out = args[1]
        args = args[2:]
    import harness  # after ACCELNET is set
    harness.BIN = os.environ.get("ACCELNET", harness.BIN)
    tally = {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "cost": [],
             "durations": {}}
    mods = modules(environment, only)
    if jobs > 1 and not only:
        run_parallel(mods, args, jobs, tally)
    else:
        run_sequential(mods, args, part, harness, tally)
    if not only:
        print_costs(tally)
    if durations_out:
        write_durations(durations_out, tally["durations"])
    if tally["failures"]:
        print("failed: " + ", ".join(tally["failures"]))
    print(f"{tally['passed']} passed, {tally['failed']} failed"
          + (f", {tally['skipped']} skipped" if tally["skipped"] else ""))
    return 1 if tally["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
