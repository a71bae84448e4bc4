"""Headless Chromium (Debian's chromium) driven over the DevTools protocol, for the tests of
pages the admin listener serves: open a page, read values from it, collect what a user's
console would show as an error (uncaught exceptions, console.error, failed loads, CSP
refusals), take a screenshot.

The DevTools websocket is spoken by the small client below (RFC 6455, text frames only,
standard library only), so the tests need nothing beyond Debian's python3 and chromium.

Chromium leaves a directory in TMPDIR for its single-instance socket (org.chromium.Chromium.*)
unless it shuts down by itself, which a test's cleanup (SIGKILL to its process group) does not
let it: it gets a TMPDIR of its own, removed with the test's. Chromium refuses to start when
that socket's path is longer than a socket address holds (108 bytes), so TMPDIR must be short."""

import base64
import hashlib
import json
import os
import shutil
import socket
import struct
import tempfile
import time
import urllib.parse
import urllib.request

from harness import wait_until

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WAIT_S = 60  # for an answer or the load event, however many other events arrive meanwhile


def chromium():
    """The path of Debian's chromium, or None."""
    return shutil.which("chromium")


class WebSocket:
    """A client websocket for text messages (what the DevTools protocol uses)."""

    def __init__(self, url, timeout=30):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise AssertionError(f"websocket {url}: closed during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        if not head.startswith(b"HTTP/1.1 101") or accept.encode() not in head:
            raise AssertionError(f"websocket {url}: refused:\n{head.decode(errors='replace')}")

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("websocket: closed by the browser")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text):
        self._frame(0x1, text.encode())

    def recv(self):
        """The next text message (fragments joined; pings answered)."""
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            op = b0 & 0x0F
            if op == 0x9:
                self._frame(0xA, data)
                continue
            if op == 0x8:
                raise AssertionError("websocket: the browser closed the connection")
            if op in (0x1, 0x2, 0x0):
                parts.append(data)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        try:
            self._frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Browser:
    """One headless Chromium with one page, started in <env> (stopped with it)."""

    def __init__(self, env, width=1440, height=1000):
        profile = os.path.join(env.dir, "chromium-profile")
        os.makedirs(profile)
        argv = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
        tmp = tempfile.mkdtemp(prefix="chromium-")
        env.on_cleanup.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
        self.proc = env.start(argv, "chromium", environ={"TMPDIR": tmp})
        port_file = os.path.join(profile, "DevToolsActivePort")

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"chromium exited with {self.proc.returncode}:\n"
                                     f"{env.log(self.proc)[-3000:]}")
            with open(port_file) as f:
                return len(f.read().split()) >= 2
        wait_until(ready, "chromium's DevTools port", timeout=60)
        with open(port_file) as f:
            port = int(f.read().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        assert pages, "chromium shows no page"
        self.ws = WebSocket(pages[0]["webSocketDebuggerUrl"])
        self.next_id = 0
        self.events = []
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")

    def call(self, method, params=None):
        """Send one DevTools command and return its result; events that arrive meanwhile
        are kept in self.events."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + WAIT_S
        while True:
            msg = self._next(deadline, method)
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def open(self, url):
        """Load <url> and wait for its load event (a new document: not a change of #hash)."""
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        r = self.call("Page.navigate", {"url": url})
        assert "errorText" not in r, f"{url}: {r['errorText']}"
        deadline = time.monotonic() + WAIT_S
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            msg = self._next(deadline, f"the load event of {url}")
            if "method" in msg:
                self.events.append(msg)

    def _next(self, deadline, what):
        """The next message; failing past <deadline> (a page logging every second would
        otherwise keep a wait for something that never comes alive for ever)."""
        if time.monotonic() > deadline:
            raise AssertionError(f"chromium: no {what} within {WAIT_S} s")
        return json.loads(self.ws.recv())

    def go(self, url):
        """Go to <url> as a user typing it would, without waiting (as for a new #hash)."""
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expr):
        """The value of the JavaScript expression <expr> in the page (JSON-able)."""
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            raise AssertionError(f"evaluating {expr!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self):
        """What the console showed as errors since the last clear_errors(): one line each."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + d.get("exception", {}).get("description",
                                                                      d.get("text", "")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                ent = p["entry"]
                out.append(f"log ({ent.get('source')}): {ent.get('text')} {ent.get('url', '')}")
        return out

    def clear_errors(self):
        self.call("Runtime.evaluate", {"expression": "0"})  # drain what is pending
        self.events.clear()

    def screenshot(self, path):
        r = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        return path

    def close(self):
        try:
            self.call("Browser.close")
        except (AssertionError, OSError):
            pass
        self.ws.close()
