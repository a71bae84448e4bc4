"""The event loops' back end (tune.io): `epoll` and `io_uring` each serve, and say which one
runs in the log and in accelnet_event_loop; `auto` falls back to epoll when io_uring is refused
(no_uring.py: a seccomp filter failing io_uring_setup with EPERM, as a container's profile
does), while `io_uring` asked for by name and refused stops the start with the reason; a
value that names no back end is refused by `accelnet check` with its place; a client cut
for reading nothing has its socket closed on either (io_uring: the send in flight cancelled). CI runs the whole
suite on epoll, the default (scripts/test.sh says why io_uring's whole-suite pass is not in it)."""

import http.server
import os
import socket
import subprocess
import sys

from harness import (BIN, HttpBackend, Skip, complete, free_port, metrics_text, pool_yaml,
                     port_open, wait_until)

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


class _Answer15k(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # in one write: no wait for a delayed ACK between head and body
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 15000\r\n\r\n" + b"x" * 15000)

    def log_message(self, *args):
        pass


def _tcp_state(local_port, remote_port):
    """The state (hex, as /proc/net/tcp writes it: 01 established) of the IPv4 socket from
    <local_port> to <remote_port>, or None when there is none."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (int(fields[1].split(":")[1], 16) == local_port and
                    int(fields[2].split(":")[1], 16) == remote_port):
                return fields[3]
    return None


def test_a_client_that_never_reads_is_let_go_when_cut(env):
    # a client pipelines requests for 4.5 MB of answers and reads none: the proxy cuts it
    # (timeouts.send_ms) and its socket closes (FIN-WAIT, orphaned to the kernel's limits),
    # on io_uring too, where the answer's send in flight in the ring held it open for good
    backend = HttpBackend(_Answer15k)
    env.on_cleanup.append(backend.close)
    for io in ("epoll", "io_uring"):
        port = free_port()
        path = env.write("proxy.yaml", f"workers: 1\nlisten: [127.0.0.1:{port}]\n"
                         f"tune: {{io: {io}}}\ntimeouts: {{send_ms: 500}}\n"
                         "pools:\n" + pool_yaml("p", [backend.port]) +
                         "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
        p = env.start([BIN, "proxy", "-c", path], "proxy-" + io, wait_port=port,
                      environ={"ACCELNET_IO": ""})
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", port))
        c.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * 300)  # and never read
        mine = c.getsockname()[1]
        wait_until(lambda: _tcp_state(port, mine) != "01",
                   f"the proxy's socket to the client to close ({io})")
        c.close()
        p.terminate()
        p.wait()


def test_check_refuses_an_unknown_back_end(env):
    path = env.write("bad.yaml", "listen: [127.0.0.1:1]\ntune:\n  io: uring\n"
                     "pools:\n" + pool_yaml("p", [1]) +
                     "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=15)
    assert r.returncode == 2, r
    assert f"{path}:3:7: tune: io 'uring': expected auto, epoll or io_uring" in r.stderr, r.stderr
