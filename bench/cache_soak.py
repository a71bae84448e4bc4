#!/usr/bin/python3
"""Soak and stress the response cache (issue 15's review): accelnet (the SAN build by default)
in front of a hostile origin, many clients, purges, an origin that fails and restarts; every
answer checked byte for byte; the proxy's log read for sanitizer reports, crashes and
assertions after a SIGTERM (LeakSanitizer runs at exit).

Usage: bench/cache_soak.py [--bin build-san/accelnet] [--seconds 60] [--clients 48]
                           [--workers 2] [--memory 1MiB] [--wrk SECONDS]

The origin (a raw-socket threaded server here) embeds the path, a version and the length in
every body ("<PATH vV n=N>" then bytes that are a function of the path), so a crossed, cut
or padded answer is detected. Paths:
  /hot/K     max-age=1 (some with stale-while-revalidate), ETag per version; the version
             changes every 2 s (revalidations answered 304 or 200)
  /cold/K    max-age=60, random sizes, Content-Length or chunked: evictions in a tiny store
  /flip/K    max-age=1, stale-if-error=60: the origin answers 503 every other 3 s
  /vary/K    Vary: X-V (20 variants); the body names the X-V it answered
  /cookie/K  Set-Cookie (not stored)
  /slow/K    max-age=1, a Content-Length body trickled in pieces: coalesced waits
  /badlen/K  Content-Length says more than is sent, then the connection closes
  /badchunk/K a malformed chunked body
  /interim/K 100 and 103 before the 200
  /bighead/K 12 KiB of fields
The origin is also killed (listener and connections closed) for a second every 7 s.
Clients: keep-alive GETs, HEAD, Range (from 0), If-None-Match, pipelined pairs, HTTP/1.0,
clients that disconnect mid-answer; a purger posts /cache/purge (prefix, uri, all) meanwhile.
Answers allowed to fail: 5xx and cut connections where the origin misbehaves or is down
(never a hit cut short, never a wrong body). Prints the figures and exits 1 on any error.
"""

import argparse
import hashlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- bodies -------------------------------------------------------------------------------

_fill_cache = {}


def make_body(path, version, n):
    """The body of <path> at <version>, <n> bytes: a tag, then bytes that depend on the path."""
    tag = b"<%s v%d n=%d>" % (path.encode(), version, n)
    key = path
    pat = _fill_cache.get(key)
    if pat is None:
        pat = hashlib.sha256(path.encode()).hexdigest().encode() * 64
        _fill_cache[key] = pat
    out = (tag + pat * (n // len(pat) + 2))[:n]
    return out


def size_of(path, version):
    h = int(hashlib.md5(b"%s %d" % (path.encode(), version)).hexdigest(), 16)
    kind = path.split("/")[1]
    if kind == "hot":
        return 2048 if h % 4 else 64 + h % 300000
    if kind == "cold":
        return [0, 64, 100, 2048, 16384, 65536, 200000][h % 7] + h % 97 if h % 7 else 0
    if kind == "slow":
        return 20000 + h % 50000
    if kind == "k2":
        return 2048
    return 64 + h % 5000


def tag_of(body):
    m = re.match(rb"<(\S+) v(\d+) n=(\d+)>", body)
    if not m:
        return None
    return m.group(1).decode(), int(m.group(2)), int(m.group(3))


# --- the origin ---------------------------------------------------------------------------

class Origin:
    def __init__(self, port):
        self.port = port
        self.down = False  # killed: nothing listens
        self.flip_503 = False
        self.count = 0
        self.lock = threading.Lock()
        self.conns = set()
        self.stop = False
        self.lsock = None
        self.listen()
        threading.Thread(target=self.flipper, daemon=True).start()

    def listen(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(1024)
        self.lsock = s
        threading.Thread(target=self.accept, args=(s,), daemon=True).start()

    def kill(self):
        s, self.lsock = self.lsock, None
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def flipper(self):
        t0 = time.monotonic()
        while not self.stop:
            time.sleep(0.25)
            t = time.monotonic() - t0
            self.flip_503 = int(t / 3) % 2 == 1

    def accept(self, s):
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.add(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                meth, target, _ = lines[0].split(" ", 2)
                hdrs = {}
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                n = int(hdrs.get("content-length", "0") or 0)
                while len(buf) < n:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                buf = buf[n:]
                with self.lock:
                    self.count += 1
                if not self.answer(c, meth, target, hdrs):
                    return
        except OSError:
            return
        finally:
            with self.lock:
                self.conns.discard(c)
            c.close()

    def answer(self, c, meth, target, hdrs):
        """Write the answer; False: the connection is to be closed."""
        path = target.split("?")[0]
        parts = path.split("/")
        kind = parts[1] if len(parts) > 2 else "other"
        version = int(time.time() / 2) if kind in ("hot", "slow", "flip") else 0
        extra = []
        cc = "max-age=60"
        if kind == "hot":
            k = int(parts[2])
            cc = "max-age=1, stale-while-revalidate=2" if k % 2 else "max-age=1"
        elif kind in ("flip", "slow"):
            cc = "max-age=1, stale-if-error=60"
        elif kind == "vary":
            extra.append(("Vary", "X-V"))
            version = int(hdrs.get("x-v", "0") or 0) if (hdrs.get("x-v", "0") or "0").isdigit() \
                else 999
        elif kind == "cookie":
            extra.append(("Set-Cookie", "s=%d" % random.randrange(1 << 30)))
        elif kind == "k2":
            cc = "max-age=3600"
        elif kind == "bighead":
            extra += [("X-Pad-%d" % i, "p" * 100) for i in range(60)]
        if kind == "flip" and self.flip_503:
            body = b"origin says 503"
            c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
            return True
        n = size_of(path, version)
        body = make_body(path, version, n)
        etag = '"%s-v%d"' % (path, version)
        extra.append(("ETag", etag))
        if kind in ("hot", "slow", "flip") and hdrs.get("if-none-match") == etag:
            c.sendall(("HTTP/1.1 304 Not Modified\r\nETag: %s\r\nCache-Control: %s\r\n\r\n"
                       % (etag, cc)).encode())
            return True
        h = int(hashlib.md5(path.encode()).hexdigest(), 16)
        chunked = kind in ("cold", "badchunk") and h % 2 == 0 or kind == "badchunk"
        head = "HTTP/1.1 200 OK\r\nCache-Control: %s\r\n" % cc
        for k, v in extra:
            head += "%s: %s\r\n" % (k, v)
        if kind == "interim":
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
                      b"Link: </x.css>; rel=preload\r\n\r\n")
        if kind == "badlen":
            c.sendall((head + "Content-Length: %d\r\n\r\n" % (n + 5000)).encode() + body)
            return False
        if meth == "HEAD":
            c.sendall((head + "Content-Length: %d\r\n\r\n" % n).encode())
            return True
        if chunked:
            c.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            out, i = b"", 0
            while i < n:
                k = random.randint(1, 30000)
                out += b"%x\r\n%s\r\n" % (len(body[i:i + k]), body[i:i + k])
                i += k
            if kind == "badchunk":
                c.sendall(out[:len(out) // 2] + b"zz\r\nnot a chunk\r\n")
                return False
            c.sendall(out + b"0\r\n\r\n")
            return True
        c.sendall((head + "Content-Length: %d\r\n\r\n" % n).encode())
        if kind == "slow":
            step = max(1, n // 8)
            for i in range(0, n, step):
                c.sendall(body[i:i + step])
                time.sleep(0.02)
            return True
        c.sendall(body)
        return True


# --- clients ------------------------------------------------------------------------------

class Cut(Exception):
    pass


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""
        self.last = None  # the Cache-Status of the answer being read

    def close(self):
        self.s.close()

    def fill(self):
        try:
            d = self.s.recv(262144)
        except ConnectionResetError:
            d = b""
        except socket.timeout:
            raise Cut("timeout (30 s without a byte)")
        if not d:
            raise Cut("closed")
        self.buf += d

    def read_head(self):
        while True:
            while b"\r\n\r\n" not in self.buf:
                self.fill()
            head, _, self.buf = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            hdrs = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hdrs.setdefault(k.strip().lower(), []).append(v.strip())
            if status >= 200:
                self.last = (hdrs.get("cache-status") or [""])[0]
                return status, hdrs

    def read_body(self, status, hdrs, meth, minor):
        if meth == "HEAD" or status in (204, 304):
            return b""
        if "transfer-encoding" in hdrs:
            out = b""
            while True:
                while b"\r\n" not in self.buf:
                    self.fill()
                line, _, self.buf = self.buf.partition(b"\r\n")
                n = int(line, 16)
                while len(self.buf) < n + 2:
                    self.fill()
                out += self.buf[:n]
                if self.buf[n:n + 2] != b"\r\n":
                    raise AssertionError("bad chunk end")
                self.buf = self.buf[n + 2:]
                if n == 0:
                    return out
        if "content-length" in hdrs:
            n = int(hdrs["content-length"][0])
            while len(self.buf) < n:
                self.fill()
            out, self.buf = self.buf[:n], self.buf[n:]
            return out
        while True:  # to the close
            try:
                self.fill()
            except Cut:
                out, self.buf = self.buf, b""
                return out


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.ok = 0
        self.hits = 0
        self.expected_fail = 0
        self.errors = []
        self.kinds = {}
        self.waiters_cut = 0

    def add(self, what, kind=None):
        with self.lock:
            if what == "ok":
                self.ok += 1
                if kind:
                    self.hits += 1
            elif what == "xfail":
                self.expected_fail += 1
            self.requests += 1

    def error(self, msg):
        with self.lock:
            self.requests += 1
            self.errors.append(msg)
            if len(self.errors) <= 20:
                print("ERROR:", msg, file=sys.stderr, flush=True)


HOSTILE = ("badlen", "badchunk")


def check(path, meth, req_hdrs, status, hdrs, body, origin_trouble):
    """None when the answer is right; else why not."""
    kind = path.split("/")[1]
    cstat = (hdrs.get("cache-status") or [""])[0]
    if status >= 500 or status == 408:
        if "hit" in cstat.split("; ")[1:2]:
            return f"{status} said to be a hit: {cstat}"
        if meth == "HEAD" and body:
            return f"{status} to a HEAD with a body"
        # the proxy's own honest answers (the origin down, out of rotation, or hostile)
        return None
    if status == 304:
        return None if ("if-none-match" in req_hdrs) else "304 without a conditional"
    if meth == "HEAD":
        return None if status == 200 else f"HEAD {status}"
    if status == 416:
        return None
    t = tag_of(body)
    if status == 206:
        cr = hdrs.get("content-range", [""])[0]
        m = re.match(r"bytes (\d+)-(\d+)/(\d+)", cr)
        if not m or int(m.group(1)) != 0:
            return f"206 with {cr!r}"
        if not t:
            return "206 without the tag at 0: %r" % body[:60]
        p, v, n = t
        if p != path:
            return f"crossed: asked {path}, got {p}"
        want = make_body(p, v, n)[:int(m.group(2)) + 1]
        return None if body == want and int(m.group(3)) == n else "206 body wrong"
    if status != 200:
        return f"status {status}"
    framed = "content-length" in hdrs or "transfer-encoding" in hdrs
    if kind in HOSTILE and framed:
        return f"a {kind} answer came whole: {len(body)} bytes ({cstat})"
    if kind in HOSTILE:
        return None  # to the close (HTTP/1.0 waiting on a fill): a cut cannot show
    if not t:
        if len(body) == 0 and size_of(path, 0) == 0:
            return None
        return "no tag: %r (%d bytes, %s)" % (body[:60], len(body), cstat)
    p, v, n = t
    if p != path:
        return f"crossed: asked {path}, got {p} ({cstat})"
    if kind == "vary" and str(v) != req_hdrs.get("x-v", "0"):
        return f"vary crossed: X-V {req_hdrs.get('x-v')} got v{v}"
    if not framed and len(body) < n and origin_trouble and body == make_body(p, v, n)[:len(body)]:
        return None  # to the close, cut with the origin: a cut cannot show
    if len(body) != n or body != make_body(p, v, n):
        return f"body wrong: {len(body)} bytes of {n} ({cstat})"
    return None


def pick_path(rng):
    r = rng.random()
    if r < 0.45:
        return "/hot/%d" % rng.randrange(4)
    if r < 0.65:
        return "/cold/%d" % rng.randrange(3000)
    if r < 0.72:
        return "/flip/%d" % rng.randrange(4)
    if r < 0.79:
        return "/vary/%d" % rng.randrange(3)
    if r < 0.84:
        return "/slow/%d" % rng.randrange(3)
    if r < 0.87:
        return "/cookie/%d" % rng.randrange(5)
    if r < 0.90:
        return "/badlen/%d" % rng.randrange(3)
    if r < 0.93:
        return "/badchunk/%d" % rng.randrange(3)
    if r < 0.96:
        return "/interim/%d" % rng.randrange(3)
    return "/bighead/%d" % rng.randrange(3)


def client(port, host, stats, origin, until, seed):
    rng = random.Random(seed)
    conn = None
    while time.monotonic() < until:
        path = pick_path(rng)
        meth = "HEAD" if rng.random() < 0.05 else "GET"
        minor = 0 if rng.random() < 0.05 else 1
        hdrs = {}
        r = rng.random()
        if r < 0.08:
            hdrs["Range"] = "bytes=0-%d" % rng.randrange(60, 5000)
        elif r < 0.16 and path.startswith(("/hot/", "/slow/", "/flip/")):
            hdrs["If-None-Match"] = '"%s-v%d"' % (path, int(time.time() / 2))
        if path.startswith("/vary/"):
            hdrs["X-V"] = str(rng.randrange(20))
        pipelined = minor == 1 and meth == "GET" and rng.random() < 0.08
        disconnect = rng.random() < 0.04
        trouble0 = origin.down
        try:
            if conn is None:
                conn = Conn(port)
            reqs = [(path, hdrs)]
            if pipelined:
                reqs.append(("/hot/%d" % rng.randrange(4), {}))
            data = b""
            for p, hd in reqs:
                data += ("%s %s HTTP/1.%d\r\nHost: %s\r\n" % (meth, p, minor, host)).encode()
                for k, v in hd.items():
                    data += ("%s: %s\r\n" % (k, v)).encode()
                data += b"\r\n"
            conn.s.sendall(data)
            if disconnect:
                if rng.random() < 0.5:
                    conn.s.recv(rng.randrange(1, 3000))
                conn.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                conn.close()
                conn = None
                stats.add("xfail")
                continue
            keep = minor == 1
            for p, hd in reqs:
                st, rh = conn.read_head()
                body = conn.read_body(st, rh, meth, minor)
                trouble = trouble0 or origin.down
                why = check(p, meth, {k.lower(): v for k, v in hd.items()}, st, rh, body,
                            trouble)
                if why:
                    stats.error(f"{meth} {p} {hd} HTTP/1.{minor}: {why}")
                else:
                    cstat = (rh.get("cache-status") or [""])[0]
                    stats.add("xfail" if st >= 500 else "ok", "; hit" in cstat)
                if "close" in [v.lower() for v in rh.get("connection", [])]:
                    keep = False
            if not keep:
                conn.close()
                conn = None
        except (Cut, ConnectionError, OSError) as e:
            last = conn.last if conn else None
            if conn:
                conn.close()
                conn = None
            kind = path.split("/")[1]
            if last and "collapsed" in last:
                stats.add("xfail")  # its fill failed (docs/cache.md: waiters are cut)
                with stats.lock:
                    stats.waiters_cut += 1
            elif kind in HOSTILE or kind in ("slow", "cookie", "cold", "interim", "bighead",
                                            "hot", "vary", "flip") and (trouble0 or origin.down
                                                                        or origin.recent):
                stats.add("xfail")
            else:
                stats.error(f"{meth} {path} {hdrs} HTTP/1.{minor}: cut: {e}")
        except Exception as e:  # noqa: BLE001 - a malformed answer is an error
            if conn:
                conn.close()
                conn = None
            stats.error(f"{meth} {path} {hdrs}: {type(e).__name__}: {e}")


def purger(admin, host, until, stats):
    rng = random.Random(7)
    n = 0
    while time.monotonic() < until:
        q = rng.choice(["prefix=/cold/&host=%s" % host, "uri=/hot/%d&host=%s" % (rng.randrange(4), host),
                        "all=1", "prefix=/vary/&host=%s" % host])
        try:
            urllib.request.urlopen(urllib.request.Request(
                "http://127.0.0.1:%d/cache/purge?%s" % (admin, q), method="POST"), timeout=10).read()
            n += 1
        except Exception as e:  # noqa: BLE001
            stats.error(f"purge {q}: {e}")
        time.sleep(0.1)
    stats.purges = n


def killer(origin, until):
    origin.recent = False
    while time.monotonic() < until - 2:
        time.sleep(7)
        origin.down = True
        origin.recent = True
        origin.kill()
        time.sleep(1)
        origin.listen()
        origin.down = False
        time.sleep(1.5)  # answers begun while it was down may still end
        origin.recent = False


SAN_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "invariant failed",
               "ThreadSanitizer", "Assertion")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-san", "accelnet"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory", default="1MiB")
    ap.add_argument("--wrk", type=float, default=0, help="then wrk this long on one hot key")
    ap.add_argument("--no-kill", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="accelnet-soak-")
    oport, port, admin = free_port(), free_port(), free_port()
    origin = Origin(oport)
    origin.recent = False
    cfg = os.path.join(d, "soak.yaml")
    with open(cfg, "w") as f:
        f.write(f"""workers: {a.workers}
listen: [127.0.0.1:{port}]
admin: {{address: 127.0.0.1:{admin}}}
timeouts: {{first_byte_ms: 5000, between_bytes_ms: 5000}}
cache: {{memory: {a.memory}, shards: 4}}
pools:
  - name: o
    fail_timeout_ms: 500
    backends: [{{address: 127.0.0.1:{oport}}}]
routes:
  - match: {{path_prefix: /}}
    pool: o
    cache: {{wait_ms: 2000, pass_s: 1}}
""")
    log = open(os.path.join(d, "proxy.log"), "wb")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1")
    px = subprocess.Popen([a.bin, "proxy", "-c", cfg], stdout=log, stderr=subprocess.STDOUT,
                          env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or px.poll() is not None:
                print(open(log.name).read())
                sys.exit("proxy did not start")
            time.sleep(0.05)
    host = "127.0.0.1:%d" % port
    stats = Stats()
    stats.purges = 0
    t0 = time.monotonic()
    until = t0 + a.seconds
    threads = [threading.Thread(target=client, args=(port, host, stats, origin, until, i))
               for i in range(a.clients)]
    threads.append(threading.Thread(target=purger, args=(admin, host, until, stats)))
    if not a.no_kill:
        threads.append(threading.Thread(target=killer, args=(origin, until), daemon=True))
    for t in threads:
        t.start()
    for t in threads[:a.clients + 1]:
        t.join()
    took = time.monotonic() - t0
    print(f"soak: {stats.requests} requests in {took:.0f} s ({a.clients} clients, "
          f"{a.workers} workers, cache.memory {a.memory}): {stats.ok} answered right "
          f"({stats.hits} hits), {stats.expected_fail} allowed failures (origin down or "
          f"hostile, client disconnects), {stats.purges} purges, {origin.count} origin "
          f"requests, {stats.waiters_cut} collapsed waiters cut with their failed fill, "
          f"{len(stats.errors)} errors", flush=True)
    if a.wrk:
        out = subprocess.run(["wrk", "-t1", "-c64", "-d%ds" % a.wrk, "--latency",
                              "http://%s/k2/0" % host], capture_output=True, text=True)
        print(out.stdout)
        m = re.search(r"(\d+) requests in", out.stdout)
        e = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out.stdout)
        if e:
            stats.errors.append("wrk: " + e.group(0))
        print(f"wrk: {m.group(1) if m else '?'} requests in {a.wrk:.0f} s")
    alive = px.poll() is None
    px.send_signal(signal.SIGTERM)
    try:
        rc = px.wait(60)
    except subprocess.TimeoutExpired:
        px.kill()
        rc = "hung at SIGTERM (killed)"
    text = open(log.name, errors="replace").read()
    bad = [m for m in SAN_MARKERS if m in text]
    print(f"proxy: alive at the end: {alive}; exit status {rc}; sanitizer/crash markers: "
          f"{bad or 'none'}; log {log.name} ({len(text)} bytes)")
    if bad or rc != 0 or not alive:
        print(text[-6000:])
    ok = not stats.errors and not bad and rc == 0 and alive
    origin.stop = True
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
