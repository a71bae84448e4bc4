"""access_log (issue 13): one line per request, JSON lines or combined, written off the
workers; per-route off, sampling, rotation on SIGUSR1, hostile bytes kept inside one line,
credentials never written."""

import json
import os
import re
import signal
import socket
import subprocess

from harness import BIN, echo_backend, free_port, pool_yaml, raw, request, wait_until

KEYS = "acme sk-acme-0123456789abcdef\n"
ACME = {"Authorization": "Bearer sk-acme-0123456789abcdef"}


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    assert not data or data.endswith(b"\n"), data[-200:]
    return data.decode("ascii").splitlines()


def _wait_lines(path, n):
    wait_until(lambda: len(_lines(path)) >= n, f"{n} lines in the access log")
    return _lines(path)


def _proxy(env, fmt="json", sample="1.0", routes_extra="", dead_port=None):
    be = echo_backend(env)
    keys = env.write("keys.txt", KEYS)
    log = os.path.join(env.dir, "access.log")
    pools = "pools:\n" + pool_yaml("p", [be.port])
    if dead_port:
        pools += pool_yaml("dead", [dead_port])
    p = env.proxy(pools +
                  "routes:\n"
                  "  - match: {path_prefix: /quiet/}\n    pool: p\n    access_log: false\n"
                  "  - match: {path_prefix: /t/}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "    rate_limit: {per_tenant: 60/m, burst: 1}\n"
                  + ("  - match: {path_prefix: /dead/}\n    pool: dead\n" if dead_port else "")
                  + routes_extra +
                  "  - match: {path_prefix: /}\n    pool: p\n",
                  extra=f"access_log: {{path: {log}, format: {fmt}, sample: {sample}}}\n")
    return p, log


def test_json_lines_carry_the_fields_and_never_credentials(env):
    dead = free_port()  # nothing listens there: 502
    p, log = _proxy(env, dead_port=dead)
    st, h, _ = request(p.port, "GET", "/a/b?c=d", headers={"User-Agent": "tester/1"})
    assert st == 200
    rid = h["x-request-id"][0]
    assert request(p.port, "GET", "/t/x", headers=ACME)[0] == 200
    assert request(p.port, "GET", "/t/x", headers=ACME)[0] == 429
    assert request(p.port, "GET", "/t/x", headers={"X-API-Key": "sk-wrong-0123456789ab"})[0] == 401
    assert request(p.port, "GET", "/dead/x")[0] == 502
    recs = [json.loads(line) for line in _wait_lines(log, 5)]
    assert len(recs) == 5, recs
    first = next(r for r in recs if r["request_id"] == rid)
    assert first["client"] == "127.0.0.1" and first["method"] == "GET"
    assert first["path"] == "/a/b?c=d" and first["status"] == 200
    assert first["pool"] == "p" and first["backend"].startswith("127.0.0.1:")
    assert first["route"] == "3" and first["user_agent"] == "tester/1"
    assert first["bytes_in"] > 0 and first["bytes_out"] > 0
    assert first["ttfb_ms"] is not None and first["total_ms"] >= first["ttfb_ms"] >= 0
    assert first["queue_ms"] == 0 and first["connect_ms"] is not None
    assert first["tenant"] is None
    by_status = {r["status"]: r for r in recs}
    assert set(by_status) == {200, 429, 401, 502}, recs
    assert by_status[429]["tenant"] == "acme" and by_status[429]["route"] == "1"
    assert by_status[401]["tenant"] is None
    assert by_status[502]["pool"] == "dead" and by_status[502]["ttfb_ms"] is None
    text = open(log).read()
    assert "sk-" not in text and "Bearer" not in text, text
    # nothing was dropped, and /metrics says so
    _, _, metrics = request(p.admin, "GET", "/metrics")
    assert b"\naccelnet_access_log_dropped_total 0\n" in metrics, metrics


def test_combined_format(env):
    p, log = _proxy(env, fmt="combined")
    st, h, body = request(p.port, "GET", "/x/y", headers={"User-Agent": "curl/8"})
    assert st == 200
    line, = _wait_lines(log, 1)
    m = re.fullmatch(r'127\.0\.0\.1 - - \[(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)\] '
                     r'"GET /x/y HTTP/1\.1" 200 (\d+) "-" "curl/8" rt=(\d+\.\d{3}) '
                     r'rid=(\w+) pool=p backend=\S+ trace=[0-9a-f]{32}', line)
    assert m, line
    assert int(m.group(2)) == len(body)
    assert m.group(4) == h["x-request-id"][0]


def test_route_off_and_sample_zero_write_nothing(env):
    p, log = _proxy(env)
    assert request(p.port, "GET", "/quiet/x")[0] == 200
    assert request(p.port, "GET", "/loud")[0] == 200
    lines = _wait_lines(log, 1)
    env.stop(p)
    lines = _lines(log)
    assert len(lines) == 1 and json.loads(lines[0])["path"] == "/loud", lines


def test_without_routes_every_request_is_logged(env):
    # no routes: everything to the first pool, under a route that logs like any other
    be = echo_backend(env)
    log = os.path.join(env.dir, "access.log")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]),
                  extra=f"access_log: {{path: {log}, format: json}}\n")
    assert request(p.port, "GET", "/no/routes")[0] == 200
    rec = json.loads(_wait_lines(log, 1)[0])
    assert rec["path"] == "/no/routes" and rec["route"] == "0" and rec["pool"] == "p", rec


def test_sample_zero(env):
    p, log = _proxy(env, sample="0")
    for _ in range(5):
        assert request(p.port, "GET", "/x")[0] == 200
    env.stop(p)  # the writer drains every ring before the process ends
    assert _lines(log) == []


def test_sigusr1_reopens_after_mv(env):
    p, log = _proxy(env)
    assert request(p.port, "GET", "/before")[0] == 200
    _wait_lines(log, 1)
    os.rename(log, log + ".1")
    os.kill(p.pid, signal.SIGUSR1)
    wait_until(lambda: os.path.exists(log), "the access log opened again")
    assert request(p.port, "GET", "/after")[0] == 200
    new = _wait_lines(log, 1)
    assert [json.loads(x)["path"] for x in new] == ["/after"]
    assert [json.loads(x)["path"] for x in _lines(log + ".1")] == ["/before"]
    assert p.poll() is None  # SIGUSR1 does not stop the proxy


def test_hostile_bytes_stay_inside_one_line(env):
    for fmt in ("json", "combined"):
        p, log = _proxy(env, fmt=fmt)
        ua = 'x" \\ \t \xc3\xa9 "}{"status":999'  # a header value cannot hold CR or LF
        path = '/a"b{"status":1}?\\c%0a'  # a \ or %0a is refused in the path, not the query
        with socket.create_connection(("127.0.0.1", p.port)) as s:
            s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nUser-Agent: " +
                      ua.encode("latin-1") + b"\r\nConnection: close\r\n\r\n")
            got = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        assert got.startswith(b"HTTP/1.1 200"), got
        long_path = "/" + "q" * 5000
        st = raw(p.port, f"GET {long_path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                 .encode())
        assert st.startswith(b"HTTP/1.1 "), st
        lines = _wait_lines(log, 2)
        env.stop(p)
        lines = _lines(log)
        assert len(lines) == 2, lines
        # two workers, two rings: the lines need not come in the order of the requests
        lines.sort(key=lambda x: "qqqq" in x)
        if fmt == "json":
            rec = json.loads(lines[0])
            assert rec["path"] == path and rec["status"] == 200, lines
            assert rec["user_agent"] == ua  # each byte, escaped as \u00XX when not ASCII
            cut = json.loads(lines[1])
            assert cut["path"].endswith("...") and len(cut["path"]) < 300
        else:
            assert lines[0].count('"') - lines[0].count('\\"') == 6, lines[0]
            assert "\\x09" in lines[0] and "\\xc3\\xa9" in lines[0]
        os.unlink(log)


def test_bad_access_log_configs_are_refused(env):
    from harness import BIN
    import subprocess
    for body, msg in (("{path: rel/a.log}", "expected an absolute file path"),
                      ("{path: stderr, format: xml}", "expected json or combined"),
                      ("{path: stderr, sample: 1.5}", "expected a number from 0 to 1"),
                      ("{format: json}", "'path' is required"),
                      ("{path: stderr, colour: red}", "colour"),
                      ("{path: /a.log, syslog_socket: /dev/log}",
                       "syslog_socket is for path: syslog"),
                      ("{path: syslog, syslog_socket: dev/log}", "expected an absolute path")):
        conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [1]) +
                         "routes:\n  - match: {path_prefix: /}\n    pool: p\n" +
                         f"access_log: {body}\n")
        r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr and "p.yaml:" in r.stderr, (body, r.stderr)


def _records(text):
    """The JSON access log lines among a process's output (its own log lines are not JSON)."""
    return [json.loads(x) for x in text.splitlines() if x.startswith('{"time":')]


def test_stderr_sink(env):
    be = echo_backend(env)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n  - match: {path_prefix: /}\n    pool: p\n",
                  extra="access_log: {path: stderr}\n")
    for path in ("/one", "/two"):
        assert request(p.port, "GET", path)[0] == 200
    wait_until(lambda: len(_records(env.log(p))) == 2, "two lines on the proxy's stderr")
    assert sorted(r["path"] for r in _records(env.log(p))) == ["/one", "/two"]


def _syslog_daemon(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(15)
    return s


SYSLOG_LINE = re.compile(r"<30>(\w{3} [ \d]\d \d\d:\d\d:\d\d) accelnet\[(\d+)\]: (.*)")


def test_syslog_sink_datagrams_and_a_daemon_restart(env):
    """path: syslog sends one RFC 3164 datagram per line (facility daemon, level info, ident
    accelnet[PID]) to syslog_socket; a daemon that restarts (a new socket at the same path)
    gets the lines after it."""
    sock = os.path.join(env.dir, "log.sock")
    daemon = _syslog_daemon(sock)
    be = echo_backend(env)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n  - match: {path_prefix: /}\n    pool: p\n",
                  extra=f"access_log: {{path: syslog, syslog_socket: {sock}, "
                        "format: combined}\n")
    st, h, _ = request(p.port, "GET", "/via/syslog")
    assert st == 200
    m = SYSLOG_LINE.fullmatch(daemon.recv(65536).decode())
    assert m, m
    assert int(m.group(2)) == p.pid
    assert '"GET /via/syslog HTTP/1.1" 200' in m.group(3)
    assert re.search(re.escape(h["x-request-id"][0] + " pool=p backend=" +
                               f"127.0.0.1:{be.port}") + " trace=[0-9a-f]{32}$",
                     m.group(3)), m.group(3)
    daemon.close()  # the daemon restarts: its socket is made anew
    os.unlink(sock)
    daemon = _syslog_daemon(sock)
    assert request(p.port, "GET", "/after/restart")[0] == 200
    m = SYSLOG_LINE.fullmatch(daemon.recv(65536).decode())
    assert m and "/after/restart" in m.group(3), m
    daemon.close()
    _, _, metrics = request(p.admin, "GET", "/metrics")
    assert b"\naccelnet_access_log_dropped_total 0\n" in metrics


def test_syslog_with_no_daemon_lines_are_counted_dropped(env):
    """No daemon at start: the proxy refuses to start, saying so; the daemon gone later: lines
    are dropped, counted, and a warning names the socket."""
    sock = os.path.join(env.dir, "log.sock")
    conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [1]) +
                     "routes:\n  - match: {path_prefix: /}\n    pool: p\n"
                     f"access_log: {{path: syslog, syslog_socket: {sock}}}\n")
    r = subprocess.run([BIN, "proxy", "-c", conf], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, r
    assert f"access log syslog: cannot connect to {sock}: No such file or directory" in r.stderr, \
        r.stderr
    daemon = _syslog_daemon(sock)
    be = echo_backend(env)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n  - match: {path_prefix: /}\n    pool: p\n",
                  extra=f"access_log: {{path: syslog, syslog_socket: {sock}}}\n")
    assert request(p.port, "GET", "/a")[0] == 200
    assert json.loads(SYSLOG_LINE.fullmatch(daemon.recv(65536).decode()).group(3))["path"] == "/a"
    daemon.close()
    os.unlink(sock)
    for _ in range(3):
        assert request(p.port, "GET", "/lost")[0] == 200
    wait_until(lambda: b"\naccelnet_access_log_dropped_total 3\n" in
               request(p.admin, "GET", "/metrics")[2], "3 lines counted as dropped")
    assert f"access log syslog {sock}: " in env.log(p), env.log(p)
    assert p.poll() is None


def test_unwritable_path_is_refused_at_start(env):
    os.makedirs(os.path.join(env.dir, "a-directory"))
    for path, why in ((os.path.join(env.dir, "missing", "access.log"),
                       "No such file or directory"),
                      (os.path.join(env.dir, "a-directory"), "Is a directory")):
        conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [1]) +
                         "routes:\n  - match: {path_prefix: /}\n    pool: p\n"
                         f"access_log: {{path: {path}}}\n")
        r = subprocess.run([BIN, "proxy", "-c", conf], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode != 0 and f"access log {path}: {why}" in r.stderr, r.stderr


def test_full_disk_drops_and_counts_lines(env):
    """Every write fails with ENOSPC (/dev/full): requests are served, each line is counted
    in accelnet_access_log_dropped_total, one warning says why, the exit is clean."""
    be = echo_backend(env)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n  - match: {path_prefix: /}\n    pool: p\n",
                  extra="access_log: {path: /dev/full}\n")
    for _ in range(5):
        assert request(p.port, "GET", "/x")[0] == 200
    wait_until(lambda: b"\naccelnet_access_log_dropped_total 5\n" in
               request(p.admin, "GET", "/metrics")[2], "5 lines counted as dropped")
    assert "access log /dev/full: No space left on device" in env.log(p), env.log(p)
    assert b'"access_log_dropped":5' in request(p.admin, "GET", "/status")[2].replace(b" ", b"")
    assert env.stop(p) == 0
    assert "access log /dev/full: 5 lines dropped" in env.log(p), env.log(p)


def test_sigusr1_when_the_path_cannot_be_opened_keeps_the_old_file(env):
    """Rotation to a path that cannot be opened (its directory moved away): the proxy says so
    and goes on writing to the file it has."""
    d = os.path.join(env.dir, "logs")
    os.makedirs(d)
    log = os.path.join(d, "access.log")
    be = echo_backend(env)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n  - match: {path_prefix: /}\n    pool: p\n",
                  extra=f"access_log: {{path: {log}}}\n")
    assert request(p.port, "GET", "/before")[0] == 200
    _wait_lines(log, 1)
    moved = os.path.join(env.dir, "logs.old")
    os.rename(d, moved)
    os.kill(p.pid, signal.SIGUSR1)
    wait_until(lambda: f"access log {log}: cannot open it again: No such file or directory"
               in env.log(p), "the error")
    assert request(p.port, "GET", "/after")[0] == 200
    lines = _wait_lines(os.path.join(moved, "access.log"), 2)
    assert [json.loads(x)["path"] for x in lines] == ["/before", "/after"]
    assert p.poll() is None
