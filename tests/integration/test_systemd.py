"""Running under systemd (issue 16, packaging): readiness and draining told over the sd_notify
protocol (a unix datagram socket named by NOTIFY_SOCKET, a path or an abstract "@name"),
listening sockets taken over from the service manager (LISTEN_FDS / LISTEN_PID /
LISTEN_FDNAMES), and the unit files as `systemd-analyze verify` sees them. A Python socket
plays systemd's part: no systemd runs here."""

import fcntl
import os
import shutil
import socket
import subprocess

from harness import BIN, Skip, free_port, pool_yaml, port_open, request, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNITS = os.path.join(ROOT, "packaging", "systemd")


def _conf(env, sim, port, admin_port=None, name="p.yaml"):
    text = f"workers: 2\nlisten: [127.0.0.1:{port}]\n"
    if admin_port:
        text += f"admin: {{address: 127.0.0.1:{admin_port}}}\n"
    return env.write(name, text + "pools:\n" + pool_yaml("p", [sim.port]) +
                     "routes:\n  - pool: p\n")


def _notify_socket(env, abstract):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"accelnet-test-{os.getpid()}-{free_port()}"
        s.bind("\0" + name)
        value = "@" + name
    else:
        value = os.path.join(env.dir, "notify")
        s.bind(value)
    s.settimeout(15)
    return s, value


def _ready_then_stopping(env, abstract):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    port, admin_port = free_port(), free_port()
    conf = _conf(env, sim, port, admin_port)
    ns, value = _notify_socket(env, abstract)
    with ns:
        p = env.start([BIN, "proxy", "-c", conf], "proxy", environ={"NOTIFY_SOCKET": value})
        msg = ns.recv(4096).decode()
        # the moment systemd is told "ready", every listener already answers
        assert "READY=1" in msg.split("\n"), msg
        assert port_open(port) and port_open(admin_port)
        st, _, _ = request(port, "GET", "/")
        assert st == 200
        p.terminate()
        msg = ns.recv(4096).decode()
        assert "STOPPING=1" in msg.split("\n"), msg
        assert p.wait(15) == 0


def test_notify_ready_once_listening_and_stopping_on_drain(env):
    _ready_then_stopping(env, abstract=False)


def test_notify_to_an_abstract_socket(env):
    _ready_then_stopping(env, abstract=True)


def test_a_notify_socket_that_is_gone_is_logged_not_fatal(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    port = free_port()
    conf = _conf(env, sim, port)
    env.start([BIN, "proxy", "-c", conf], "proxy", wait_port=port,
              environ={"NOTIFY_SOCKET": os.path.join(env.dir, "nobody-here")})
    st, _, _ = request(port, "GET", "/")
    assert st == 200
    p = env.procs[-1]
    wait_until(lambda: "cannot notify the service manager" in env.log(p), "the warning")


def _listening(addr=("127.0.0.1", 0), listen=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(addr)
    if listen:
        s.listen(64)
    return s


def _activated(env, conf, sock, name="proxy", pid="$$", names=None):
    """Start the proxy as systemd would: <sock> as descriptor 3, LISTEN_FDS=1 and LISTEN_PID
    set to the proxy's own pid (the shell's, which exec keeps; bash, as dash takes no
    descriptor above 9 in a redirection)."""
    high = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD, 10)  # never 3 itself
    try:
        script = (f"LISTEN_PID={pid} LISTEN_FDS=1 " +
                  (f"LISTEN_FDNAMES={names} " if names else "") +
                  f'exec "$0" proxy -c "$1" 3<&{high} {high}<&-')
        return env.start(["bash", "-c", script, BIN, conf], name, pass_fds=(high,))
    finally:
        os.close(high)


def test_socket_activation_serves_on_the_passed_socket_across_restarts(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    lsock = _listening()
    port = lsock.getsockname()[1]
    conf = _conf(env, sim, port)
    with lsock:
        # the address is already bound (without SO_REUSEPORT): a proxy that tried to bind
        # it itself would fail to start, so answering proves it uses the passed socket
        p = _activated(env, conf, lsock, names="http")
        wait_until(lambda: "listening on" in env.log(p), "the proxy to listen")
        assert "socket from the service manager" in env.log(p), env.log(p)
        for _ in range(20):  # on both workers' dup()s of the one socket
            st, _, _ = request(port, "GET", "/")
            assert st == 200
        assert env.stop(p) == 0
        # no process runs: the socket, still held here as systemd holds it, queues a client
        waiting = socket.create_connection(("127.0.0.1", port), timeout=15)
        with waiting:
            waiting.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            p2 = _activated(env, conf, lsock, name="proxy2")
            got = b""
            while True:
                chunk = waiting.recv(65536)
                if not chunk:
                    break
                got += chunk
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
        assert env.stop(p2) == 0


def test_a_passed_socket_no_listener_names_stops_the_start(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    lsock = _listening()
    conf = _conf(env, sim, free_port())
    with lsock:
        p = _activated(env, conf, lsock, names="web")
        assert p.wait(15) == 1
    log = env.log(p)
    assert "passed a socket (web) on 127.0.0.1:" in log and "no listen: address" in log, log


def test_a_passed_socket_that_is_not_listening_is_refused(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    lsock = _listening(listen=False)
    conf = _conf(env, sim, lsock.getsockname()[1])
    with lsock:
        p = _activated(env, conf, lsock)
        assert p.wait(15) == 1
    assert "fd 3 is not listening" in env.log(p), env.log(p)


def test_sockets_meant_for_another_process_are_left_alone(env):
    # LISTEN_PID names another process (a parent's variables inherited): the proxy binds
    # its own listeners and does not touch descriptor 3
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    lsock = _listening()
    port = free_port()
    conf = _conf(env, sim, port)
    with lsock:
        p = _activated(env, conf, lsock, pid="1")
        wait_until(lambda: port_open(port), "the proxy on its own port")
        st, _, _ = request(port, "GET", "/")
        assert st == 200
        assert "socket from the service manager" not in env.log(p)


def test_units_pass_systemd_analyze_verify(env):
    tool = shutil.which("systemd-analyze")
    if not tool:
        raise Skip("systemd-analyze is not installed (Debian package systemd)")
    # the units name /usr/bin/accelnet (where the .deb puts it), which verify wants to
    # exist: check copies that name the binary under test, as `make install` writes them
    binary = os.path.abspath(BIN)
    for unit in ("accelnet.service", "accelnet.socket"):
        with open(os.path.join(UNITS, unit)) as f:
            text = f.read()
        env.write(unit, text.replace("/usr/bin/accelnet", binary))
    r = subprocess.run([tool, "verify", "--man=no", "accelnet.socket", "accelnet.service"],
                       cwd=env.dir, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), (r.returncode, r.stdout, r.stderr)
