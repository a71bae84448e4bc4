"""`accelnet top` (issue 13): one frame with --once against a proxy under traffic, the live
view under a pseudo-terminal (frames drawn in place, q and SIGINT quit, the terminal put
back), the admin token, an endpoint that is not there, and a hostile /status server (junk,
huge, deeply nested, wrong types, escape sequences): a clean one-line error or a frame,
never a crash."""

import os
import pty
import select
import signal
import socket
import struct
import subprocess
import fcntl
import termios
import threading

from harness import BIN, complete, free_port, pool_yaml, port_open, wait_until


def _top(args, timeout=30):
    r = subprocess.run([BIN, "top"] + args, capture_output=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    assert "Sanitizer" not in err and "runtime error" not in err, err[-4000:]
    return r.returncode, out, err


def _backend_row(out, address):
    rows = [ln.split() for ln in out.splitlines() if ln.strip().startswith(address)]
    assert len(rows) == 1, out
    # BACKEND STATE REQ/S ERR/S REQUESTS ERRORS TTFB50 TTFB99 LAT_MS INFL SLOTS
    return rows[0]


def test_once_shows_pool_backend_and_counts(env):
    a, b = env.sim("a", latency_ms=1), env.sim("b", latency_ms=1)
    px = env.proxy("pools:\n" + pool_yaml("gpus", [a.port, b.port]))
    for _ in range(6):
        st, _, _ = complete(px.port)
        assert st == 200
    # traffic while top takes its two reads, so the rate is measured, not assumed
    stop = threading.Event()

    def load():
        while not stop.is_set():
            complete(px.port)
    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        rc, out, err = _top(["--admin", f"127.0.0.1:{px.admin}", "--once",
                             "--interval-ms", "500"])
    finally:
        stop.set()
        t.join()
    assert rc == 0, err
    assert "POOL gpus (round-robin)" in out, out
    assert "\033" not in out, out  # --once prints plain text for scripts
    total_rate = 0.0
    for sim in (a, b):
        row = _backend_row(out, f"127.0.0.1:{sim.port}")
        assert row[1] == "up", row
        assert int(row[4]) >= 3, row  # requests: round-robin gave each at least 3 of the 6
        assert row[5] == "0", row     # no errors
        total_rate += float(row[2])
    assert total_rate > 0, out


def test_token_sent_as_bearer(env):
    sim = env.sim("a", latency_ms=1)
    token = env.write("admin.token", "s3cret-token\n")
    os.chmod(token, 0o600)
    admin = free_port()
    port = free_port()
    path = env.write("proxy2.yaml", f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"admin:\n  address: 127.0.0.1:{admin}\n  token_file: {token}\n"
                     "pools:\n" + pool_yaml("p", [sim.port]))
    env.start([BIN, "proxy", "-c", path], "proxy2", wait_port=port)
    wait_until(lambda: port_open(admin), "admin port")
    rc, out, err = _top(["--admin", f"127.0.0.1:{admin}", "--once", "--interval-ms", "100"])
    assert rc == 1 and out == "", (rc, out)
    assert err.count("\n") == 1 and "401" in err and "--token-file" in err, err
    wrong = env.write("wrong.token", "nope\n")
    rc, out, err = _top(["--admin", f"127.0.0.1:{admin}", "--token-file", wrong, "--once",
                         "--interval-ms", "100"])
    assert rc == 1 and "wrong token" in err and "nope" not in err, err
    rc, out, err = _top(["--admin", f"127.0.0.1:{admin}", "--token-file", token, "--once",
                         "--interval-ms", "100"])
    assert rc == 0 and "POOL p" in out and f"127.0.0.1:{sim.port}" in out, (out, err)
    assert "s3cret" not in out + err


def test_unreachable_admin_is_one_line_exit_1(env):
    port = free_port()
    rc, out, err = _top(["--admin", f"127.0.0.1:{port}", "--once"])
    assert rc == 1 and out == "", (rc, out)
    assert err.count("\n") == 1 and "cannot reach" in err and str(port) in err, err
    rc, _, err = _top(["--admin", "nonsense"])
    assert rc == 2 and "HOST:PORT" in err, err
    rc, _, err = _top(["--admin", f"127.0.0.1:{port}", "--interval-ms", "5"])
    assert rc == 2 and "--interval-ms" in err, err


def _read_pty(fd, until, timeout=15):
    got = b""
    wait_until_done = [False]

    def more():
        nonlocal got
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                got += os.read(fd, 65536)
            except OSError:  # EIO: the child closed its side
                wait_until_done[0] = True
        return until(got) or wait_until_done[0]
    wait_until(more, "top's output on the pty", timeout)
    return got


def _top_on_pty(env, px, slave):
    """accelnet top refreshing every 200 ms with <slave> as its terminal."""
    p = subprocess.Popen([BIN, "top", "--admin", f"127.0.0.1:{px.admin}", "--interval-ms",
                          "200"], stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True)
    env.procs.append(p)
    p.name, p.log_path = "top", os.devnull
    return p


def _live(env, px, quit):
    master, slave = pty.openpty()
    env.on_cleanup.append(lambda: os.close(master))
    before = termios.tcgetattr(slave)
    p = _top_on_pty(env, px, slave)
    clear = b"\033[H\033[2J"
    got = _read_pty(master, lambda g: g.count(clear) >= 3)
    assert got.startswith(b"\033[?1049h\033[?25l"), got[:100]
    assert b"POOL p" in got, got
    # in place of the terminal's echo and line mode while it runs
    during = termios.tcgetattr(slave)
    assert not during[3] & (termios.ICANON | termios.ECHO), during
    quit(p, master)
    assert p.wait(timeout=10) == 0
    rest = _read_pty(master, lambda g: g.endswith(b"\033[?25h\033[?1049l"))
    assert (got + rest).endswith(b"\033[?25h\033[?1049l"), (got + rest)[-200:]
    assert b"Sanitizer" not in got + rest and b"runtime error" not in got + rest
    after = termios.tcgetattr(slave)
    assert after == before, (before, after)
    os.close(slave)


def test_live_view_under_a_pty_quits_on_q(env):
    sim = env.sim("a", latency_ms=1)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]))
    complete(px.port)
    _live(env, px, lambda p, master: os.write(master, b"q"))


def test_live_view_under_a_pty_quits_on_sigint(env):
    sim = env.sim("a", latency_ms=1)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]))
    _live(env, px, lambda p, master: p.send_signal(signal.SIGINT))


class _Hostile:
    """A one-thread HTTP server answering every connection with the next canned answer."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                c.settimeout(5)
                try:
                    c.recv(65536)
                    c.sendall(self.answers.pop(0) if self.answers else b"")
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def _http(body, status=b"200 OK"):
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\n\r\n" + body)


def test_hostile_status_is_a_clean_error_never_a_crash(env):
    fails = {
        "junk": _http(b"<html>not json</html>"),
        "escapes": _http(b"\x1b]0;evil\x07\x1b[2J"),
        "huge": _http(b"[" + b"1," * (10 << 20) + b"1]"),
        "deep": _http(b"[" * 200000 + b"]" * 200000),
        "deep objects": _http(b'{"pools":' + b'{"a":' * 100000 + b"1" + b"}" * 100001),
        "no pools": _http(b'{"pools": 3}'),
        "not http": b"\x00\x01garbage\r\n\r\n{}",
        "closed": b"",
        "500": _http(b"{}", b"500 Internal Server Error"),
        "no body end": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
        "truncated": _http(b'{"pools":[{"name":"p","backends":[')[:-10],
    }
    for what, answer in fails.items():
        srv = _Hostile([answer, answer])
        env.on_cleanup.append(srv.close)
        rc, out, err = _top(["--admin", f"127.0.0.1:{srv.port}", "--once",
                             "--interval-ms", "100"])
        assert rc == 1 and out == "", (what, rc, out, err[-500:])
        assert err.startswith("accelnet top: ") and err.count("\n") == 1, (what, err[-500:])
        assert "\033" not in err and "\x07" not in err, (what, err)
    # well-formed JSON of the wrong shape draws what it can: absent or mistyped is "-"
    odd = (b'{"pools":[7,"x",{"name":5,"backends":{"a":1}},{"name":"p\\u001b[2J",'
           b'"queue":[1],"backends":[3,{"address":"\\u001b]0;evil\\u0007x","requests":"many",'
           b'"up":"yes","ttfb_ms":{"p50":-4},"inflight":1e308},'
           b'{"address":"b","requests":9}]}]}')
    srv = _Hostile([_http(odd), _http(odd.replace(b'"requests":9', b'"requests":4'))])
    env.on_cleanup.append(srv.close)
    rc, out, err = _top(["--admin", f"127.0.0.1:{srv.port}", "--once", "--interval-ms", "100"])
    assert rc == 0, (rc, err)
    assert "\033" not in out and "\x07" not in out, out
    assert "POOL p?[2J" in out, out
    row = _backend_row(out, "b")
    assert row[2] == "-" and row[4] == "4", row  # a counter that went back has no rate


def test_live_view_fits_a_small_window(env):
    sim = env.sim("a", latency_ms=1)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]))
    master, slave = pty.openpty()
    env.on_cleanup.append(lambda: os.close(master))
    env.on_cleanup.append(lambda: os.close(slave))
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 4, 30, 0, 0))
    p = _top_on_pty(env, px, slave)
    clear = b"\033[H\033[2J"
    got = _read_pty(master, lambda g: g.count(clear) >= 2)
    os.write(master, b"q")
    assert p.wait(timeout=10) == 0
    frame = got.split(clear)[1]
    lines = frame.replace(b"\r", b"").rstrip(b"\n").split(b"\n")
    assert len(lines) <= 3 and all(len(ln) <= 30 for ln in lines), lines
    assert lines[0].startswith(b"accelnet top - 127.0.0"), lines
