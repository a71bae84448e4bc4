"""The event loops' back end (tune.io): `epoll` and `io_uring` each serve, and say which one
runs in the log and in accelnet_event_loop; `auto` falls back to epoll when io_uring is refused
(no_uring.py: a seccomp filter failing io_uring_setup with EPERM, as a container's profile
does), while `io_uring` asked for by name and refused stops the start with the reason; a
value that names no back end is refused by `accelnet check` with its place. CI runs the whole
suite on epoll, the default (scripts/test.sh says why io_uring's whole-suite pass is not in it)."""

import os
import subprocess
import sys

from harness import (BIN, Skip, complete, free_port, metrics_text, pool_yaml, port_open,
                     wait_until)

NO_URING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no_uring.py")


def _proxy(env, io, refuse_uring=False):
    """A proxy with tune.io = <io> before one sim, ACCELNET_IO cleared (the pass may set it)."""
    sim = env.sim("a", latency_ms=0, jitter=0, token_ms=0)
    port, admin = free_port(), free_port()
    path = env.write("proxy.yaml", f"workers: 2\nlisten: [127.0.0.1:{port}]\n"
                     f"admin: {{address: 127.0.0.1:{admin}}}\ntune: {{io: {io}}}\n"
                     "pools:\n" + pool_yaml("p", [sim.port]) +
                     "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
    argv = [BIN, "proxy", "-c", path]
    if refuse_uring:
        argv = [sys.executable, NO_URING] + argv
    p = env.start(argv, "proxy", environ={"ACCELNET_IO": ""})
    p.port, p.admin = port, admin
    return p


def _exited(env, p):
    """Skip where the machine cannot give the test what it needs."""
    log = env.log(p)
    if "cannot install the seccomp filter" in log:
        raise Skip("seccomp filters cannot be installed here")
    if "event loop: io_uring was asked for" in log:
        raise Skip("this kernel refuses io_uring: " + log.strip().splitlines()[-1])
    raise AssertionError(f"the proxy exited with {p.returncode}:\n{log}")


def _serves_on(env, p, backend, line):
    def up():
        if p.poll() is not None:
            _exited(env, p)
        return port_open(p.port) and port_open(p.admin)
    wait_until(up, "the proxy's ports")
    assert complete(p.port)[0] == 200
    m = metrics_text(p.admin)
    assert f'accelnet_event_loop{{backend="{backend}"}} 1' in m, m
    other = "epoll" if backend == "io_uring" else "io_uring"
    assert f'accelnet_event_loop{{backend="{other}"}} 0' in m, m
    assert env.log(p).count("event loop: ") == 1 and line in env.log(p), env.log(p)


def test_epoll_and_io_uring_each_serve(env):
    for io in ("epoll", "io_uring"):
        p = _proxy(env, io)
        _serves_on(env, p, io, f"event loop: {io}\n")
        p.terminate()
        p.wait()


def test_auto_falls_back_to_epoll_when_io_uring_is_refused(env):
    p = _proxy(env, "auto", refuse_uring=True)
    _serves_on(env, p, "epoll", "event loop: epoll (io_uring refused: Operation not permitted)")


def test_io_uring_asked_for_and_refused_stops_the_start(env):
    p = _proxy(env, "io_uring", refuse_uring=True)
    assert p.wait(timeout=15) != 0
    log = env.log(p)
    if "cannot install the seccomp filter" in log:
        raise Skip("seccomp filters cannot be installed here")
    assert "event loop: io_uring was asked for (tune.io) and cannot be set up: " \
        "Operation not permitted" in log, log


def test_check_refuses_an_unknown_back_end(env):
    path = env.write("bad.yaml", "listen: [127.0.0.1:1]\ntune:\n  io: uring\n"
                     "pools:\n" + pool_yaml("p", [1]) +
                     "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=15)
    assert r.returncode == 2, r
    assert f"{path}:3:7: tune: io 'uring': expected auto, epoll or io_uring" in r.stderr, r.stderr
