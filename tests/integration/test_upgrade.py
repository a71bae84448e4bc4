"""Binary upgrade (issue 16): SIGUSR2 starts the executable at the path the proxy was
started from on the running process's listening sockets (passed as a service manager
passes them); once the new process serves, the old one drains and exits. A new process that
cannot start changes nothing."""

SERIAL = True  # load, timing or fixed ports: run alone under run.py -j

import os
import signal
import subprocess

from harness import free_port, pool_yaml, port_open, read_until, request, served_by, \
    sim_stats, wait_until
from test_reload import (HeldStreams, _config, _open_stream, _pools, _simple, _start,
                         _stream_done)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split(") ")[1][0] != "Z"


def _new_pid(env, px):
    line = next(ln for ln in env.log(px).splitlines() if "the new process (pid" in ln)
    return int(line.split("the new process (pid ")[1].split(")")[0])


def test_upgrade_under_load_loses_nothing(env):
    a, b = env.sim("a", latency_ms=0, token_ms=0, slots=64), \
        env.sim("b", latency_ms=0, token_ms=0, slots=64)
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    port, admin = free_port(), free_port()
    px = _start(env, _config(port, admin, pool_yaml("one", [a.port]) +
                             pool_yaml("two", [b.port]) + pool_yaml("sse", [held.port])))
    wait_until(lambda: port_open(admin), "admin port")
    streams = [_open_stream(port) for _ in range(20)]
    env.on_cleanup.append(lambda: [s.close() for s in streams])
    firsts = [read_until(s, lambda g: b"data: 0" in g) for s in streams]

    wrk = subprocess.Popen(["wrk", "-t2", "-c32", "-d600s", f"http://127.0.0.1:{port}/load"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    env.on_cleanup.append(lambda: wrk.poll() is None and wrk.kill())
    wait_until(lambda: sim_stats(a.port)["requests"] >= 500, "wrk to be under way")

    px.send_signal(signal.SIGUSR2)
    wait_until(lambda: "the new process (pid" in env.log(px) or px.poll() is not None,
               "the new process to serve")
    new = _new_pid(env, px)
    assert new != px.pid and _pid_alive(new), env.log(px)[-2000:]
    env.on_cleanup.append(lambda: _pid_alive(new) and os.kill(new, signal.SIGKILL))
    # the new process says where it listens before it tells the old one it serves
    assert "sockets of the process upgraded" in env.log(px), env.log(px)[-2000:]
    # the old process still serves its streams; the new one takes the new requests
    assert px.poll() is None and held.open == 20, (px.poll(), held.open)
    seen = sim_stats(a.port)["requests"]
    wait_until(lambda: sim_stats(a.port)["requests"] >= seen + 500, "wrk on the new process")
    st, hdrs, _ = request(admin, "GET", "/status")
    assert st == 200, st
    held.release()
    for s, first in zip(streams, firsts):
        read_until(s, _stream_done, first)
    assert px.wait(timeout=30) == 0, env.log(px)[-2000:]
    seen = sim_stats(a.port)["requests"]
    wait_until(lambda: sim_stats(a.port)["requests"] >= seen + 500, "wrk after the old exits")
    wrk.send_signal(signal.SIGINT)
    out, err = wrk.communicate(timeout=60)
    assert "requests in" in out, out + err
    assert "Socket errors" not in out and "Non-2xx" not in out, out
    total = int(out.split(" requests in")[0].split()[-1])
    st, hdrs, _ = request(port, "GET", "/x")
    assert st == 200 and served_by(hdrs) == "a", (st, hdrs)
    os.kill(new, signal.SIGTERM)
    wait_until(lambda: not _pid_alive(new), "the new process to exit on SIGTERM")
    print(f"upgrade under wrk: {total} requests, 0 errors; 20 SSE streams finished on the "
          "old process")


def test_an_upgrade_that_cannot_start_changes_nothing(env):
    a, held, port, admin, text, px = _simple(env)
    with open(px.path, "w") as f:
        f.write(text + "pools: [\n")
    px.send_signal(signal.SIGUSR2)
    wait_until(lambda: "this one serves on" in env.log(px), "the upgrade to fail")
    line = [ln for ln in env.log(px).splitlines() if "this one serves on" in ln][-1]
    assert "exited with status 2" in line, line
    assert f"{px.path}:" in env.log(px)  # the new process said where the config is wrong
    st, hdrs, _ = request(port, "GET", "/x")
    assert st == 200 and served_by(hdrs) == "a"
    assert px.poll() is None


def _socket_inodes(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            out.add(link)
    return out


def test_the_new_process_gets_the_listening_sockets_and_nothing_else(env):
    """Of the old process's sockets, the new one holds exactly the listening ones (2 workers'
    and the admin endpoint's): not its Redis connection (hiredis opens it without
    close-on-exec), nor a client's, a backend's or the access log's."""
    from test_cluster import _redis
    r = _redis(env)
    a = env.sim("a", latency_ms=0)
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    port, admin = free_port(), free_port()
    extra = (f"cluster: {{redis: 127.0.0.1:{r.port}}}\n"
             f"access_log: {{path: {os.path.join(env.dir, 'access.log')}}}\n")
    px = _start(env, _config(port, admin, _pools(a.port, held.port), extra))
    wait_until(lambda: "redis" in env.log(px).lower() and port_open(admin), "the proxy")
    stream = _open_stream(port)  # a client and a backend connection of the old process
    env.on_cleanup.append(stream.close)
    read_until(stream, lambda g: b"data: 0" in g)
    old = _socket_inodes(px.pid)
    px.send_signal(signal.SIGUSR2)
    wait_until(lambda: "the new process (pid" in env.log(px), "the new process to serve")
    new = _new_pid(env, px)
    env.on_cleanup.append(lambda: _pid_alive(new) and os.kill(new, signal.SIGKILL))
    shared = old & _socket_inodes(new)
    assert len(shared) == 3, (len(shared), sorted(shared))
    held.release()
    assert px.wait(timeout=30) == 0
    os.kill(new, signal.SIGTERM)
    wait_until(lambda: not _pid_alive(new), "the new process to exit")


def _cmdline(pid):
    """A process's command line; b"" once it has gone (any process of the machine's, listed a
    moment before, may end before it is read: ENOENT or ESRCH)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_sigterm_while_an_upgrade_starts_stops_both(env):
    """SIGTERM right after SIGUSR2: the service stops; the process that was starting is told
    to stop too, and does not serve on alone."""
    a = env.sim("a", latency_ms=0)
    port, admin = free_port(), free_port()
    px = _start(env, _config(port, admin, _pools(a.port, a.port)))
    wait_until(lambda: port_open(admin), "admin port")
        # both at once: the new process (about 50 ms from ready) is still starting at SIGTERM
    px.send_signal(signal.SIGUSR2)
    px.send_signal(signal.SIGTERM)
    assert px.wait(timeout=30) == 0
    assert "upgrade: started" in env.log(px) and "told to stop" in env.log(px), env.log(px)
    started = set(int(p) for p in os.listdir("/proc") if p.isdigit())
    wait_until(lambda: not port_open(port), "nothing to accept on the port")
    left = [p for p in started if px.path.encode() in _cmdline(p)]
    assert not left, left
