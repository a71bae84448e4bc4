"""Runs every test_* function of the tests/integration/test_*.py modules, each with a fresh
Env that is cleaned up whatever happens, and ends with the line 'N passed, N failed'
(', N skipped' after it when a test raised harness.Skip: it cannot run on this machine).
Usage: run.py [--bin PATH] [NAME-FILTER...]

Stopped by SIGTERM or SIGHUP (a CI job's time limit, a closed terminal) as by Ctrl-C: the
running test's processes, each in a session of its own that no signal to this one reaches, are
killed and its scratch directory removed before the runner exits (status 128 + the signal)."""

import importlib
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _stopped(signum, frame):
    print(f"stopped by signal {signum}: cleaning up", flush=True)
    raise SystemExit(128 + signum)  # through the running test's finally: env.cleanup()


def main():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stopped)
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "--bin":
        os.environ["ACCELNET"] = os.path.abspath(args[1])
        args = args[2:]
    import harness  # after ACCELNET is set
    harness.BIN = os.environ.get("ACCELNET", harness.BIN)
    passed = failed = skipped = 0
    failures = []
    for fname in sorted(os.listdir(HERE)):
        if not (fname.startswith("test_") and fname.endswith(".py")):
            continue
        mod = importlib.import_module(fname[:-3])
        for name in sorted(n for n in dir(mod) if n.startswith("test_")):
            full = f"{fname[5:-3]}.{name[5:]}"
            if args and not any(a in full for a in args):
                continue
            env = harness.Env(name)
            t0 = time.monotonic()
            try:
                getattr(mod, name)(env)
                env.finish()
                passed += 1
                print(f"ok   {full} ({time.monotonic() - t0:.1f}s)", flush=True)
            except harness.Skip as e:
                skipped += 1
                print(f"skip {full}: {e}", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
                failed += 1
                failures.append(full)
                print(f"FAIL {full}: {e}", flush=True)
                traceback.print_exc(limit=4)
                for p in env.procs:
                    print(f"--- {p.name} log ---\n{env.log(p)[-3000:]}", flush=True)
            finally:
                env.cleanup()
    if failures:
        print("failed: " + ", ".join(failures))
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
