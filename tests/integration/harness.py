"""Helpers for the black-box tests: start accelnet, simulators and nginx on free loopback
ports, wait until they answer (never a blind sleep), talk HTTP to them, and stop everything
even when a test fails."""

import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time

BIN = os.environ.get("ACCELNET", "build/accelnet")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


class Skip(Exception):
    """Raised by a test that cannot run on this machine (a tool missing, an image that cannot
    be fetched): run.py counts it as skipped and prints the reason, never as passed."""


PORT_SLOT = os.environ.get("ACCELNET_PORT_SLOT")  # set by run.py -j for each runner process
PORT_SPAN = 2000
_port_next = [0]


def free_port():
    """A loopback port nothing listens on. A runner process of a parallel run (run.py -j)
    takes ports in turn from a range of its own, 10000 + slot x 2000 on (below the kernel's
    ephemeral range, which starts at 32768), so that two runners never pick the same port
    between the check and its use; alone, the kernel picks one."""
    if PORT_SLOT is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    base = 10000 + int(PORT_SLOT) * PORT_SPAN
    for _ in range(PORT_SPAN):
        port = base + _port_next[0] % PORT_SPAN
        _port_next[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port in this runner's range")


def wait_until(pred, what, timeout=15.0):
    """Poll pred() until it is true; a readiness check with a generous deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Env:
    """One test's processes and scratch directory."""

    def __init__(self, name):
        self.dir = tempfile.mkdtemp(prefix=f"accelnet-{name}-")
        self.procs = []
        self.on_cleanup = []  # callables run after the processes are gone (netns, mounts)

    def start(self, argv, name, wait_port=None, environ=None, pass_fds=()):
        """Start <argv> in a session of its own (killed as a group by cleanup()), with
        <environ> added to this process's environment and <pass_fds> left open in it."""
        log = open(os.path.join(self.dir, f"{name}.log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             pass_fds=pass_fds,
                             env=dict(os.environ, **environ) if environ else None)
        p.log_path = log.name
        p.name = name
        self.procs.append(p)
        if wait_port:
            def up():
                if p.poll() is not None:
                    raise AssertionError(f"{name} exited with {p.returncode}:\n{self.log(p)}")
                return port_open(wait_port)
            wait_until(up, f"{name} on port {wait_port}")
        return p

    def log(self, p):
        with open(p.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def sim(self, name, **opts):
        port = free_port()
        # ACCELNET_SIM_BIN: another build's simulator (to run a new sim option against an
        # old proxy, say)
        argv = [os.environ.get("ACCELNET_SIM_BIN", BIN), "sim", "--listen", f"127.0.0.1:{port}",
                "--name", name]
        for k, v in opts.items():
            argv += ["--" + k.replace("_", "-")] + ([] if v is True else [str(v)])
        p = self.start(argv, f"sim-{name}", wait_port=port)
        p.port = port
        return p

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def proxy(self, yaml_body, workers=2, admin=True, extra="", environ=None):
        """Start accelnet proxy; yaml_body holds pools/routes (<environ>: variables added to
        its environment). Returns the process with .port and .admin set."""
        port = free_port()
        admin_port = free_port()
        text = f"workers: {workers}\nlisten:\n  - address: 127.0.0.1:{port}\n"
        if admin:
            text += f"admin:\n  address: 127.0.0.1:{admin_port}\n"
        text += extra + yaml_body
        path = self.write("proxy.yaml", text)
        p = self.start([BIN, "proxy", "-c", path], "proxy", wait_port=port, environ=environ)
        p.port = port
        p.admin = admin_port
        if admin:
            wait_until(lambda: port_open(admin_port), "admin port")
        return p

    def nginx(self, server_block):
        port = free_port()
        root = os.path.join(self.dir, "www")
        os.makedirs(root, exist_ok=True)
        conf = f"""
daemon off;
master_process off;
worker_processes 1;
error_log {self.dir}/nginx-error.log;
pid {self.dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    log_format combined_conn '$connection $request';
    access_log {self.dir}/nginx-access.log combined_conn;
    client_body_temp_path {self.dir}/body;
    proxy_temp_path {self.dir}/proxy;
    fastcgi_temp_path {self.dir}/fcgi;
    uwsgi_temp_path {self.dir}/uwsgi;
    scgi_temp_path {self.dir}/scgi;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        {server_block}
    }}
}}
"""
        path = self.write("nginx.conf", conf)
        p = self.start([NGINX, "-c", path, "-e", f"{self.dir}/nginx-error.log"], "nginx",
                       wait_port=port)
        p.port = port
        p.root = root
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def finish(self):
        """Stop what still runs as a user would (SIGTERM) and fail if any accelnet process
        crashed, or reported a sanitizer error or a leak on its way out."""
        problems = []
        for p in reversed(self.procs):
            if p.poll() is None:
                self.stop(p)
            text = self.log(p)
            for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:",
                           "invariant failed", "WARNING: ThreadSanitizer"):
                if marker in text:
                    problems.append(f"{p.name}: {marker}\n{text[-4000:]}")
                    break
            if p.name != "nginx" and p.returncode is not None and p.returncode < 0 \
                    and p.returncode not in (-signal.SIGKILL, -signal.SIGTERM):
                problems.append(f"{p.name} died of signal {-p.returncode}")
        if problems:
            raise AssertionError("\n".join(problems))

    def cleanup(self):
        for p in reversed(self.procs):
            # the whole process group: a wrapper (strace, timeout) may have exited and left
            # the accelnet it ran behind
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            if p.poll() is None:
                p.wait()
        for fn in reversed(self.on_cleanup):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup goes on whatever fails
                print(f"cleanup: {e}")
        shutil.rmtree(self.dir, ignore_errors=True)


def request(port, method="GET", path="/", body=None, headers=None, timeout=15, source=None):
    """One request on a fresh connection (from loopback address <source>, if given): (status,
    headers as a dict of lists, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(source, 0) if source else None)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {}
        for k, v in r.getheaders():
            hdrs.setdefault(k.lower(), []).append(v)
        return r.status, hdrs, data
    finally:
        c.close()


def complete(port, body=None, path="/v1/completions"):
    return request(port, "POST", path, body=body or json.dumps({"prompt": "hi"}),
                   headers={"Content-Type": "application/json"})


def served_by(hdrs):
    return hdrs.get("x-served-by", ["?"])[0]


def rss_kib(pid):
    """The resident memory of process <pid>, in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"process {pid} shows no VmRSS")


def read_all(s, got=b""):
    """Read from socket <s> until the peer closes; returns <got> plus everything read (kept
    in a bytearray: adding each read to a bytes copied it all again, quadratic in the size,
    seconds per MiB read 4 KiB at a time)."""
    out = bytearray(got)
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            return bytes(out)
        if not b:
            return bytes(out)
        out += b


def read_until(s, done, got=b""):
    """Read from socket <s> until done(bytes so far) holds; failing if the peer closes first."""
    while not done(got):
        b = s.recv(65536)
        assert b, got
        got += b
    return got


def raw(port, data, timeout=15, source=None):
    """Send raw bytes (from loopback address <source>, if given), read until the server
    closes; returns all bytes read."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0) if source else None) as s:
        s.sendall(data)
        return read_all(s)


def headers_seen(echoed):
    """The fields of the request an echo backend got (its answer's body <echoed>), as a dict
    of lists with lower-case names."""
    head = echoed.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    seen = {}
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        seen.setdefault(k.strip().lower(), []).append(v.strip())
    return seen


def sim_stats(port):
    st, _, body = request(port, "GET", "/sim/stats")
    assert st == 200
    return json.loads(body)


def metrics_text(admin_port):
    """The proxy's /metrics, as text."""
    st, _, body = request(admin_port, "GET", "/metrics")
    assert st == 200
    return body.decode()


def prom_samples(text):
    """{(name, ((label, value), ...)): value} of the sample lines of Prometheus <text>, labels
    sorted, values unescaped (a quote, comma or backslash in a value read right)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
        out[(name, tuple(sorted((k, re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], v))
                                for k, v in pairs)))] = float(value)
    return out


def promtool_clean(text):
    """`promtool check metrics` says nothing of <text>."""
    assert shutil.which("promtool"), "no promtool: scripts/deps.sh installs Debian prometheus"
    r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=30, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
        r.stdout + r.stderr


def status(admin_port):
    st, _, body = request(admin_port, "GET", "/status")
    assert st == 200
    return json.loads(body)


def backend_state(admin_port, address):
    for pool in status(admin_port)["pools"]:
        for b in pool["backends"]:
            if b["address"] == address:
                return b
    raise AssertionError(f"no backend {address} in /status")


def pool_yaml(name, ports, balance="round-robin", weights=None, health=None, extra=""):
    lines = [f"  - name: {name}", f"    balance: {balance}", "    backends:"]
    for i, port in enumerate(ports):
        w = f", weight: {weights[i]}" if weights else ""
        lines.append(f"      - {{address: 127.0.0.1:{port}{w}}}")
    if health:
        lines.append(f"    health: {health}")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


class HttpBackend:
    """A threaded HTTP/1.1 server on a free loopback port answering with <handler> (an
    http.server.BaseHTTPRequestHandler subclass). close() stops it."""

    def __init__(self, handler):
        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class ScriptedBackend:
    """A backend that answers the n-th request it reads (on any connection) with
    script(n, request_bytes) -> (bytes to send, close afterwards?). Runs in a thread."""

    def __init__(self, script):
        self.script = script
        self.count = 0
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import threading
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn):
        try:
            self._exchange(conn)
        except OSError:  # the proxy cut the connection (a reset): it ends here, quietly
            pass

    def _exchange(self, conn):
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = conn.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = buf[:length], buf[length:]
                self.count += 1
                out, close = self.script(self.count, head + b"\r\n\r\n" + body)
                try:
                    conn.sendall(out)
                except OSError:
                    return
                if close:
                    return

    def close(self):
        self.sock.close()


def echo_backend(env):
    """A backend answering every request with the bytes of the request it read (so a test sees
    exactly what the proxy forwarded); closed when the test ends."""
    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(req), req), False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    return be


class LenientBackend(ScriptedBackend):
    """A backend that reads requests the way uvicorn/FastAPI (what vLLM and SGLang run on) and
    other lenient servers do, so that a test can see where the proxy and such a backend
    disagree: the path is percent-decoded before routing (and, with merge_slashes, runs of
    '/' merged as nginx does; with dots, '.' and '..' segments resolved), and a JSON body is
    read with Python's json.loads (the last of two equal keys wins; NaN and Infinity are
    accepted). Each request is answered 200 with a JSON body saying what the backend saw:
    {"path", "target", "model", "max_tokens", "temperature", "json_error", "headers"} and an
    OpenAI-style "usage" that counts max_tokens as generated. self.seen lists those dicts."""

    def __init__(self, merge_slashes=False, dots=False):
        self.seen = []
        self.merge_slashes = merge_slashes
        self.dots = dots
        super().__init__(self._answer)

    def _path(self, target):
        import posixpath
        import urllib.parse
        path = urllib.parse.unquote(target.split("?", 1)[0])
        if self.merge_slashes:
            path = re.sub("/+", "/", path)
        if self.dots:
            path = posixpath.normpath(path) if path != "/" else path
        return path

    def _answer(self, n, req):
        head, _, body = req.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        target = lines[0].split(" ")[1]
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.setdefault(k.strip().lower(), []).append(v.strip())
        seen = {"path": self._path(target), "target": target, "model": None,
                "max_tokens": None, "temperature": None, "json_error": None,
                "headers": headers}
        if body:
            try:
                doc = json.loads(body)
                if isinstance(doc, dict):
                    seen["model"] = doc.get("model")
                    mt = doc.get("max_tokens", doc.get("max_completion_tokens"))
                    seen["max_tokens"] = mt
                    t = doc.get("temperature")
                    seen["temperature"] = t if t is None or t == t and abs(t) != float("inf") \
                        else str(t)
            except ValueError as e:
                seen["json_error"] = str(e)
        self.seen.append(seen)
        gen = seen["max_tokens"] if isinstance(seen["max_tokens"], int) else 16
        out = dict(seen, usage={"prompt_tokens": 1, "completion_tokens": gen,
                                "total_tokens": gen + 1})
        data = json.dumps(out).encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(data), data), False)


def lenient_backend(env, **opts):
    """A LenientBackend closed when the test ends."""
    be = LenientBackend(**opts)
    env.on_cleanup.append(be.close)
    return be


def gated_backend(env):
    """A backend that holds every request until the test opens its gate (be.gate.set()),
    then answers each at once with a small JSON completion: a slot is held exactly as long
    as the test needs, whatever the machine's load (a test of order, not of time).
    be.order lists the value of each request's X-Tag field (None without one) in the order
    the requests arrived."""
    gate = threading.Event()
    order = []

    def script(n, req):
        m = re.search(rb"\r\nx-tag: *([^\r]*)", req, re.I)
        order.append(m.group(1).decode() if m else None)
        gate.wait(60)
        body = b'{"choices":[{"text":"ok"}]}'
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body), False)
    be = ScriptedBackend(script)
    be.gate = gate
    be.order = order
    env.on_cleanup.append(gate.set)
    env.on_cleanup.append(be.close)
    return be
