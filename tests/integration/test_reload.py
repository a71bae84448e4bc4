"""Hot reload (issue 16): SIGHUP reads the config file again and builds the new
configuration beside the running one on the same listening sockets; new requests use it at
once, what is in flight (long SSE streams included) finishes on the old one, and a bad file
changes nothing."""

# Alone under run.py -j: the twenty reloads run wrk and 200 streams (a load on every other test),
# and the kept-alive clients must send within a second of the drain's start (h1.c's
# DRAIN_IDLE_MS), which a machine full of other tests may delay. The others wait on what the
# proxy says (its log, its counts), which load only slows.
SERIAL = {"test_twenty_reloads_under_load_lose_no_request_and_no_stream",
          "test_requests_sent_on_kept_alive_connections_as_the_reload_happens_are_answered",
          "test_the_first_connection_after_a_reload_meets_the_new_configuration"}

import os
import signal
import socket
import subprocess
import threading

from harness import (BIN, free_port, metrics_text, pool_yaml, port_open, read_until, request, served_by,
                     sim_stats, status, wait_until)


class HeldStreams:
    """An SSE backend whose streams send one event, then wait until release() before sending
    the rest and ending; it counts the requests it has open at once."""

    EVENTS = 10

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.go = threading.Event()
        self.lock = threading.Lock()
        self.open = self.most = self.count = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn):
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            with self.lock:
                self.count += 1
                self.open += 1
                self.most = max(self.most, self.open)
            done = False
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: close\r\n\r\n")
                conn.sendall(self._chunk(b"data: 0\n\n"))
                self.go.wait()
                for i in range(1, self.EVENTS):
                    conn.sendall(self._chunk(b"data: %d\n\n" % i))
                # done before the last bytes go: the proxy may send the next request at once
                done = self._done()
                conn.sendall(self._chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            except OSError:
                if not done:
                    self._done()

    def _done(self):
        with self.lock:
            self.open -= 1
        return True

    @staticmethod
    def _chunk(data):
        return b"%x\r\n%s\r\n" % (len(data), data)

    def release(self):
        self.go.set()

    def close(self):
        self.go.set()
        self.sock.close()


def _config(port, admin, pools, extra=""):
    return (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
            f"admin:\n  address: 127.0.0.1:{admin}\n"
            "timeouts: {between_bytes_ms: 300000}\n" + extra + "pools:\n" + pools +
            "routes:\n  - match: {path_prefix: /sse/}\n    pool: sse\n"
            "  - match: {path_prefix: /two/}\n    pool: two\n  - pool: one\n")


def _pools(port, sse_port):
    """Pools one and two on <port>, sse on <sse_port> (for _config's routes)."""
    return pool_yaml("one", [port]) + pool_yaml("two", [port]) + pool_yaml("sse", [sse_port])


def _simple(env):
    """A simulator, a held SSE backend and a proxy in front of them (_pools, _config):
    (sim, held, port, admin port, config text, proxy)."""
    a = env.sim("a", latency_ms=0)
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    port, admin = free_port(), free_port()
    text = _config(port, admin, _pools(a.port, held.port))
    return a, held, port, admin, text, _start(env, text)


def _start(env, text):
    path = env.write("proxy.yaml", text)
    port = int(text.split("address: 127.0.0.1:")[1].split("\n")[0])
    px = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    px.path, px.port = path, port
    return px


def _reload(env, px, text, gen):
    """Write <text> and SIGHUP; wait until generation <gen> says it is loaded."""
    with open(px.path + ".tmp", "w") as f:
        f.write(text)
    os.rename(px.path + ".tmp", px.path)  # a reload never reads a half-written file
    px.send_signal(signal.SIGHUP)
    wait_until(lambda: f"(configuration generation {gen})" in env.log(px) or
               px.poll() is not None, f"generation {gen}")
    assert px.poll() is None, env.log(px)[-3000:]


def _open_stream(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    body = b'{"stream": true}'
    s.sendall(b"POST /sse/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return s


def _stream_done(got):
    return b"data: [DONE]" in got and got.endswith(b"0\r\n\r\n")


def test_twenty_reloads_under_load_lose_no_request_and_no_stream(env):
    """The must-show: under wrk load plus 200 open SSE streams, 20 reloads alternating two
    configs that move a backend between pools, and one bad config among them, lose no
    request and drop no stream."""
    a, b = env.sim("a", latency_ms=0, token_ms=0, slots=64), \
        env.sim("b", latency_ms=0, token_ms=0, slots=64)
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    port, admin = free_port(), free_port()
    sse = pool_yaml("sse", [held.port])
    configs = [_config(port, admin, pool_yaml("one", [a.port]) + pool_yaml("two", [b.port]) +
                       sse),
               _config(port, admin, pool_yaml("one", [b.port]) + pool_yaml("two", [a.port]) +
                       sse)]
    px = _start(env, configs[0])
    wait_until(lambda: port_open(admin), "admin port")

    streams = [_open_stream(port) for _ in range(200)]
    env.on_cleanup.append(lambda: [s.close() for s in streams])
    firsts = [read_until(s, lambda g: b"data: 0" in g) for s in streams]
    assert held.open == 200, held.open

    wrk = subprocess.Popen(["wrk", "-t2", "-c32", "-d600s", f"http://127.0.0.1:{port}/load"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    env.on_cleanup.append(lambda: wrk.poll() is None and wrk.kill())

    def served():
        return sim_stats(a.port)["requests"] + sim_stats(b.port)["requests"]

    wait_until(lambda: served() >= 500, "wrk to be under way")
    bad_seen = 0
    for i in range(1, 21):
        if i == 10:  # a bad config in the middle of the run changes nothing
            with open(px.path, "w") as f:
                f.write(configs[i % 2] + "pools: [\n")
            px.send_signal(signal.SIGHUP)
            wait_until(lambda: env.log(px).count("the running configuration stays") > bad_seen,
                       "the bad config to be refused")
            bad_seen += 1
            st, hdrs, _ = request(port, "GET", "/check")
            assert st == 200 and served_by(hdrs) == ("b" if i % 2 == 0 else "a"), \
                (st, served_by(hdrs))
        _reload(env, px, configs[i % 2], i)
        # new requests see the new config at once: pool one is now on the other backend
        st, hdrs, _ = request(port, "GET", "/check")
        assert st == 200 and served_by(hdrs) == ("a" if i % 2 == 0 else "b"), \
            (i, st, served_by(hdrs))
        seen = served()
        wait_until(lambda: served() >= seen + 200, "wrk requests under the new config")

    assert wrk.poll() is None, "wrk stopped before the reloads were done"
    assert held.open == 200, f"only {held.open} of 200 streams still open after 20 reloads"
    held.release()
    for s, first in zip(streams, firsts):
        got = read_until(s, _stream_done, first)
        events = [ln for ln in got.split(b"\n") if ln.startswith(b"data: ")]
        assert events == [b"data: %d" % k for k in range(HeldStreams.EVENTS)] + \
            [b"data: [DONE]"], got[-300:]

    wrk.send_signal(signal.SIGINT)
    out, err = wrk.communicate(timeout=60)
    assert "requests in" in out, out + err
    assert "Socket errors" not in out and "Non-2xx" not in out, out
    total = int(out.split(" requests in")[0].split()[-1])
    # every old configuration is released once its last stream has ended
    wait_until(lambda: env.log(px).count("its last request has ended; released") == 20,
               "the 20 old configurations to be released")
    log = env.log(px)
    assert log.count(f"{px.path}:") == 1, log[-3000:]  # the bad config's FILE:LINE:COL
    m = metrics_text(admin)
    assert "accelnet_config_generation 20" in m and "accelnet_config_reloads_total 20" in m \
        and "accelnet_config_reload_failures_total 1" in m, m
    print(f"20 reloads (and 1 bad config) under wrk: {total} requests, 0 errors; "
          "200 SSE streams held across them, 200 complete")


def test_bad_config_changes_nothing_and_says_where(env):
    a, held, port, admin, good, px = _simple(env)
    for bad, where in [(good + "pools: [\n", ":"),
                       (good.replace("pool: two", "pool: nowhere"), "nowhere"),
                       (good.replace("workers: 2", "workers: -1"), "1:10: expected a number")]:
        with open(px.path, "w") as f:
            f.write(bad)
        before = env.log(px).count("the running configuration stays")
        px.send_signal(signal.SIGHUP)
        wait_until(lambda: env.log(px).count("the running configuration stays") > before,
                   "the bad config to be refused")
        line = [ln for ln in env.log(px).splitlines()
                if "the running configuration stays" in ln][-1]
        assert f"{px.path}:" in line and where in line, line
        st, hdrs, _ = request(port, "GET", "/x")
        assert st == 200 and served_by(hdrs) == "a"
        assert status(admin)["pools"][0]["name"] == "one"
    assert "configuration generation 1" not in env.log(px)
    m = metrics_text(admin)
    assert "accelnet_config_reload_failures_total 3" in m, m
    assert "accelnet_config_reloads_total 0" in m and "accelnet_config_generation 0" in m


def test_a_slot_held_by_the_old_configuration_still_counts(env):
    """max_concurrency (an accelerator's slots) holds across a reload: a request the old
    configuration still serves keeps its slot, so a new request queues for it instead of
    reaching the backend beside it, and gets it when the old one ends."""
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    a = env.sim("a", latency_ms=0)
    port, admin = free_port(), free_port()
    sse = (f"  - name: sse\n    backends:\n      - {{address: 127.0.0.1:{held.port}, "
           "max_concurrency: 1}\n    queue: {max: 10, timeout_ms: 60000}\n")
    text = _config(port, admin, pool_yaml("one", [a.port]) + pool_yaml("two", [a.port]) + sse)
    px = _start(env, text)
    first = _open_stream(port)
    env.on_cleanup.append(first.close)
    got1 = read_until(first, lambda g: b"data: 0" in g)
    _reload(env, px, text, 1)
    second = _open_stream(port)
    env.on_cleanup.append(second.close)
    sse_pool = lambda: next(p for p in status(admin)["pools"] if p["name"] == "sse")  # noqa
    wait_until(lambda: sse_pool()["queue"]["length"] == 1, "the new request to queue")
    assert held.count == 1 and held.open == 1
    held.release()
    read_until(first, _stream_done, got1)
    read_until(second, _stream_done)
    assert held.count == 2 and held.most == 1, (held.count, held.most)
    wait_until(lambda: "configuration generation 0: its last request has ended" in env.log(px),
               "the old configuration to be released")


def test_backend_state_is_carried_and_listeners_follow_the_config(env):
    """A backend the health checks took down stays down across a reload (its state is
    carried, not started afresh); a listener added by a reload serves at once, one removed
    stops; the admin endpoint keeps its port."""
    a = env.sim("a", latency_ms=0)
    dead = free_port()  # nothing listens: its checks fail
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    port, admin, extra_port = free_port(), free_port(), free_port()
    # a check of the live simulator may wait on a loaded machine: 2 s before it counts as
    # failed, not the interval (100 ms: with fall 1 one slow answer took the live backend down
    # too); the dead one's checks fail at once, refused
    health = "{path: /health, interval_ms: 100, timeout_ms: 2000, fall: 1, rise: 1000}"
    pools = (pool_yaml("one", [a.port, dead], health=health) + pool_yaml("two", [a.port]) +
             pool_yaml("sse", [held.port]))
    text = _config(port, admin, pools)
    px = _start(env, text)
    dead_name = f"127.0.0.1:{dead}"

    def dead_up():
        return next(b for p in status(admin)["pools"] for b in p["backends"]
                    if b["address"] == dead_name)["up"]
    wait_until(lambda: dead_up() is False, "the dead backend to be marked down")
    more = text.replace("listen:\n", f"listen:\n  - address: 127.0.0.1:{extra_port}\n")
    _reload(env, px, more, 1)
    assert dead_up() is False  # carried: rise 1000 would take 100 s to bring it back
    for p in (port, extra_port):
        st, hdrs, _ = request(p, "GET", "/x")
        assert st == 200 and served_by(hdrs) == "a", (p, st)
    _reload(env, px, text, 2)
    wait_until(lambda: not port_open(extra_port), "the removed listener to close")
    st, _, _ = request(port, "GET", "/x")
    assert st == 200
    assert dead_up() is False


def _sse_pool(port, cap="", timeout_ms=60000):
    return (f"  - name: sse\n    queue: {{timeout_ms: {timeout_ms}}}\n"
            f"    backends:\n      - {{address: 127.0.0.1:{port}{cap}}}\n")


def _queued(admin, gen_pool="sse"):
    return sum(p["queue"]["length"] for p in status(admin)["pools"] if p["name"] == gen_pool)


def test_a_request_queued_by_the_old_configuration_gets_the_slot_the_new_one_frees(env):
    """A kept-alive client of the old configuration sends a request during the drain; it
    queues there for a slot the new configuration holds, and gets it when that ends (not a
    503 at queue.timeout_ms)."""
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    a = env.sim("a", latency_ms=0)
    port, admin = free_port(), free_port()
    text = _config(port, admin, pool_yaml("one", [a.port]) + pool_yaml("two", [a.port]) +
                   _sse_pool(held.port, ", max_concurrency: 1"))
    px = _start(env, text)
    old = socket.create_connection(("127.0.0.1", port), timeout=60)
    env.on_cleanup.append(old.close)
    old.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    read_until(old, lambda g: b"\r\n\r\n" in g)
    _reload(env, px, text, 1)
    new = _open_stream(port)  # the new configuration takes the only slot
    env.on_cleanup.append(new.close)
    got_new = read_until(new, lambda g: b"data: 0" in g)
    body = b'{"stream": true}'
    old.sendall(b"POST /sse/late HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body))
    # it waits in the old configuration's queue (the admin endpoint shows the new one's)
    assert held.count == 1
    held.release()
    read_until(new, _stream_done, got_new)
    got = read_until(old, _stream_done)
    assert got.startswith(b"HTTP/1.1 200") and b"Connection: close" in got.split(b"\r\n\r\n")[0]
    assert held.count == 2 and held.most == 1


def test_a_cap_added_by_a_reload_counts_the_old_requests(env):
    """The old configuration had no max_concurrency; the new one has 1: a request of the new
    one waits while the old one's stream runs, and gets the slot when it ends."""
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    a = env.sim("a", latency_ms=0)
    port, admin = free_port(), free_port()

    def text(cap):
        return _config(port, admin, pool_yaml("one", [a.port]) + pool_yaml("two", [a.port]) +
                       _sse_pool(held.port, cap))
    px = _start(env, text(""))
    first = _open_stream(port)
    env.on_cleanup.append(first.close)
    got1 = read_until(first, lambda g: b"data: 0" in g)
    _reload(env, px, text(", max_concurrency: 1"), 1)
    second = _open_stream(port)
    env.on_cleanup.append(second.close)
    wait_until(lambda: _queued(admin) == 1, "the new request to queue")
    assert held.count == 1
    held.release()
    read_until(first, _stream_done, got1)
    assert read_until(second, _stream_done).startswith(b"HTTP/1.1 200")
    assert held.count == 2 and held.most == 1


def test_requests_sent_on_kept_alive_connections_as_the_reload_happens_are_answered(env):
    """Clients idle on kept-alive connections (for longer than the drain's grace) send a
    POST right after the reload: each is answered by the old configuration, with
    Connection: close, none is cut."""
    a, held, port, admin, text, px = _simple(env)
    for gen in range(1, 4):
        conns = []
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", port), timeout=30)
            env.on_cleanup.append(c.close)
            c.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            read_until(c, lambda g: b"\r\n\r\n" in g)
            conns.append(c)
        _reload(env, px, text, gen)  # the old configuration now drains
        for c in conns:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        for c in conns:
            got = read_until(c, lambda g: b"\r\n\r\n" in g)
            head = got.split(b"\r\n\r\n")[0]
            assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head, head


def _whole_response(got):
    """Has <got> one whole response with a Content-Length body?"""
    if b"\r\n\r\n" not in got:
        return False
    head, body = got.split(b"\r\n\r\n", 1)
    n = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
    return bool(n) and len(body) >= int(n[0].split(b":")[1])


def test_a_kept_alive_admin_connection_is_closed_after_its_answer(env):
    """A scraper's kept-alive admin connection does not go on reading the old configuration
    for as long as the old one drains: idle, it is closed at the reload (one busy with a
    request is closed after its answer), and the next connection sees the new one."""
    a, held, port, admin, text, px = _simple(env)
    wait_until(lambda: port_open(admin), "admin port")
    stream = _open_stream(port)  # keeps the old configuration alive
    env.on_cleanup.append(stream.close)
    read_until(stream, lambda g: b"data: 0" in g)
    c = socket.create_connection(("127.0.0.1", admin), timeout=10)
    env.on_cleanup.append(c.close)
    ask = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    c.sendall(ask)
    read_until(c, _whole_response)
    _reload(env, px, text, 1)
    # idle, it is closed (with nothing of a request pending: that would be answered first)
    assert c.recv(100) == b""
    st, _, _ = request(admin, "GET", "/status")
    assert st == 200 and status(admin)["process"][0]["config_generation"] == 1
    held.release()


def test_discovered_backends_survive_a_reload_while_dns_is_down(env):
    """A reload while the DNS server cannot answer keeps the discovered backends (their last
    answer), as discovery itself does when a resolution fails."""
    from test_discovery import Dns
    a = env.sim("a", latency_ms=0)
    dns = Dns(env, ["127.0.0.1 gpu.test"])
    port, admin = free_port(), free_port()
    pools = ("  - name: one\n    backends:\n"
             f"      - {{address: 'gpu.test:{a.port}', discover: a}}\n" +
             pool_yaml("two", [a.port]) + pool_yaml("sse", [a.port]))
    text = _config(port, admin, pools, extra=f"discovery:\n  resolvers: [127.0.0.1:{dns.port}]\n")
    px = _start(env, text)
    wait_until(lambda: request(port, "GET", "/x")[0] == 200, "the name to be resolved")
    dns.proc.kill()
    dns.proc.wait()
    _reload(env, px, text, 1)
    assert [request(port, "GET", "/x")[0] for _ in range(5)] == [200] * 5
    # and once the new configuration has tried to resolve it (and failed), still
    wait_until(lambda: "could not be resolved" in env.log(px), "a failed resolution")
    assert [request(port, "GET", "/x")[0] for _ in range(5)] == [200] * 5


def test_timed_certificate_reload_after_a_reload_to_more_workers(env):
    """listen.tls.reload_s keeps working across reloads that change the worker count (each
    configuration keeps its own list of replaced key material: no write past the first
    one's worker count, which ASan would catch)."""
    import shutil
    held = HeldStreams()
    env.on_cleanup.append(held.close)
    port, admin, tport = free_port(), free_port(), free_port()
    pem, key = os.path.join(env.dir, "live.pem"), os.path.join(env.dir, "live.key")
    certs = []
    for i in range(3):
        k, c = os.path.join(env.dir, f"c{i}.key"), os.path.join(env.dir, f"c{i}.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", k, "-out", c, "-days",
                        "2", "-subj", f"/CN=c{i}"], check=True, capture_output=True)
        certs.append((c, k))

    def swap(i):
        for src, dst in ((certs[i][1], key), (certs[i][0], pem)):
            shutil.copy(src, dst + ".tmp")
            os.replace(dst + ".tmp", dst)

    def text(workers):
        return (f"workers: {workers}\nlisten:\n  - address: 127.0.0.1:{port}\n"
                f"  - address: 127.0.0.1:{tport}\n"
                f"    tls: {{cert: {pem}, key: {key}, reload_s: 1}}\n"
                f"admin:\n  address: 127.0.0.1:{admin}\n"
                "timeouts: {between_bytes_ms: 300000}\npools:\n" +
                pool_yaml("sse", [held.port]) + "routes:\n  - pool: sse\n")
    swap(0)
    px = _start(env, text(2))
    swap(1)
    wait_until(lambda: "read again and in use" in env.log(px), "the first timed reload")
    stream = _open_stream(port)  # keeps the first configuration alive
    env.on_cleanup.append(stream.close)
    read_until(stream, lambda g: b"data: 0" in g)
    _reload(env, px, text(16), 1)
    swap(2)
    wait_until(lambda: env.log(px).count("read again and in use") >= 2 or
               px.poll() is not None, "the second timed reload")
    assert px.poll() is None, env.log(px)[-3000:]
    held.release()
    wait_until(lambda: "configuration generation 0: its last request has ended" in env.log(px),
               "the first configuration to be released")


def test_accelnet_reload_says_what_happened(env):
    """`accelnet reload` (the admin API's POST /api/reload) reloads as SIGHUP does: exit 0
    when the new configuration is in use; exit 1 with FILE:LINE:COL when the file is
    refused, and the running one stays."""
    a = env.sim("a", latency_ms=0)
    port, admin = free_port(), free_port()
    text = _config(port, admin, _pools(a.port, a.port))
    px = _start(env, text)
    wait_until(lambda: port_open(admin), "admin port")
    ok = subprocess.run([BIN, "reload", "--admin", f"127.0.0.1:{admin}"], capture_output=True,
                        text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "(configuration generation 1)" in env.log(px)
    with open(px.path, "w") as f:
        f.write(text + "pools: [\n")
    bad = subprocess.run([BIN, "reload", "--admin", f"127.0.0.1:{admin}"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 1 and f"{px.path}:" in bad.stderr, bad.stdout + bad.stderr
    assert "(configuration generation 2)" not in env.log(px)
    st, hdrs, _ = request(port, "GET", "/x")
    assert st == 200 and served_by(hdrs) == "a"


def test_the_first_connection_after_a_reload_meets_the_new_configuration(env):
    """Once a reload has answered (the admin API's POST /api/reload, as `accelnet reload`
    uses it), the very next client connection is served by the new configuration: the old
    workers have stopped accepting by then (they share the listening sockets with the new
    ones, so a worker slow to see its drain would take it). Forty reloads, each followed at
    once by a fresh connection."""
    a, b = env.sim("a", latency_ms=0), env.sim("b", latency_ms=0)
    port, admin = free_port(), free_port()
    configs = [_config(port, admin, pool_yaml("one", [a.port]) + pool_yaml("two", [b.port]) +
                       pool_yaml("sse", [a.port])),
               _config(port, admin, pool_yaml("one", [b.port]) + pool_yaml("two", [a.port]) +
                       pool_yaml("sse", [a.port]))]
    px = _start(env, configs[0])
    wait_until(lambda: port_open(admin), "admin port")
    # new connections all the time: the workers are often in the middle of accepting
    wrk = subprocess.Popen(["wrk", "-t1", "-c16", "-d600s", "-H", "Connection: close",
                            f"http://127.0.0.1:{port}/load"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    env.on_cleanup.append(lambda: wrk.poll() is None and wrk.kill())
    wait_until(lambda: sim_stats(a.port)["requests"] >= 200, "wrk to be under way")
    wrong = []
    for i in range(1, 41):
        with open(px.path + ".tmp", "w") as f:
            f.write(configs[i % 2])
        os.rename(px.path + ".tmp", px.path)
        st, _, _ = request(admin, "POST", "/api/reload")
        assert st == 200, st
        st, hdrs, _ = request(port, "GET", "/check")
        want = "a" if i % 2 == 0 else "b"
        if st != 200 or served_by(hdrs) != want:
            wrong.append((i, st, served_by(hdrs)))
    assert not wrong, f"served under the old configuration after its reload: {wrong}"
