"""The response cache attacked (issue 15's review): answers a client could get crossed,
truncated or doubled, by a hostile or failing origin, by races between workers, by a client
that reads slowly. Each test reproduces a bug that was found and fixed, as a client sees it.

The origin (test_cache.Origin) embeds the path in each body, so that a crossed answer shows."""

import socket
import threading
import time

from harness import pool_yaml, read_all, wait_until
from test_cache import Origin, Reply, cached, cs, get, host, parse_response, start


def test_stale_if_error_answer_larger_than_one_write_is_sent_whole_once(env):
    # The origin is gone and out of rotation: admission finds no backend, and the stale copy
    # answers from the admission stage. A body the client cannot take in one
    # write made the exchange wait there, and the next write event ran admission again:
    # another connect, another failure, and a 502 written after part of the stale body.
    o = Origin(env)
    body = b"".join(b"%08d stale body line of /big\n" % i for i in range(300000))  # 9 MiB
    o.paths["/big"] = cached(body, ("Age", "100"), cc="max-age=10, stale-if-error=600")
    px = start(env, o, cache="{memory: 256MiB, max_object: 32MiB, shards: 1}")
    st, h, b = get(px, "/big")
    assert st == 200 and b == body, st
    o.close()
    # the first answer after that takes the backend out of rotation; then admission finds
    # no backend at all, and the stale copy answers from there
    st, h, b = get(px, "/big")
    assert st == 200 and b == body and cs(h).endswith("; detail=stale-if-error"), (st, h)
    s = socket.create_connection(("127.0.0.1", px.port), timeout=30)
    s.sendall(b"GET /big HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host(px))
    time.sleep(0.5)  # the proxy fills the socket and waits for the client to read
    got = read_all(s)
    s.close()
    st, h, b = parse_response(got)
    assert st == 200 and cs(h).endswith("; detail=stale-if-error"), (st, h)
    assert b == body, (len(b), len(body), got[-300:])


def test_the_proxys_own_error_answer_to_a_head_has_no_body(env):
    # Found by the soak: a 502/503 of the proxy's own (the origin gone) to a HEAD carried its
    # text body, which a keep-alive client reads as the start of the next answer.
    o = Origin(env)
    px = start(env, o)
    o.close()
    for _ in range(2):  # a failed connect (502), then no backend in rotation (503)
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        s.sendall(b"HEAD /a HTTP/1.1\r\nHost: %s\r\n\r\n"
                  b"GET /b HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                  % (host(px), host(px)))
        got = read_all(s)
        s.close()
        first, sep, rest = got.partition(b"\r\n\r\n")
        assert first.split(b" ")[1] in (b"502", b"503") and b"Content-Length: " in first, got
        assert rest.startswith(b"HTTP/1.1 50"), got  # the GET's answer, right after the head
        st, h, b = parse_response(rest)
        assert st in (502, 503) and b.startswith(b"%d " % st), got


class SocketOrigin:
    """A listening socket on a free port, each connection served by self.serve(conn) on a
    thread of its own; closed when the test ends."""

    def __init__(self, env, backlog):
        self.lock = threading.Lock()
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(backlog)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()
        env.on_cleanup.append(self.ls.close)

    def accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()


class TrickleOrigin(SocketOrigin):
    """An origin answering every GET with max-age=60 and a Content-Length body (the path, then
    filler) written in <pieces> writes a moment apart, so that requests coalesced on its fill
    (on every worker) catch up with it and wait, again and again, until its last byte."""

    def __init__(self, env, size=60000, pieces=40):
        self.size, self.pieces = size, pieces
        self.count = 0
        super().__init__(env, 512)

    def body(self, path):
        return (path.encode() + b" " + b"0123456789abcdef" * (self.size // 16 + 1))[:self.size]

    def serve(self, c):
        with c:
            got = b""
            while b"\r\n\r\n" not in got:
                d = c.recv(4096)
                if not d:
                    return
                got += d
            path = got.split(b" ")[1].decode()
            with self.lock:
                self.count += 1
            body = self.body(path)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sendall(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n" % len(body))
            step = len(body) // self.pieces
            for i in range(0, len(body), step):
                c.sendall(body[i:i + step])
                time.sleep(0.002)


def test_waiters_on_another_workers_fill_get_every_byte(env):
    # A waiter streaming a fill read how many bytes were there, then the fill's state: a
    # fill on another worker that got its last bytes and ended in between was taken as
    # ended with the bytes read before, and the answer ended short of its Content-Length
    # (the client hung, or read the next answer as the rest of this one).
    o = TrickleOrigin(env)
    px = env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                   + "routes:\n  - {match: {path_prefix: /}, pool: o, cache: true}\n",
                   workers=4)
    bad = []

    def one(path):
        try:
            s = socket.create_connection(("127.0.0.1", px.port), timeout=30)
            s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                      % (path.encode(), host(px)))
            got = read_all(s)
            s.close()
            st, h, b = parse_response(got)
            if st != 200 or b != o.body(path):
                bad.append((path, st, len(b)))
        except (AssertionError, OSError) as e:
            bad.append((path, repr(e)[:200]))

    for rnd in range(12):
        threads = [threading.Thread(target=one, args=("/k%d/%d" % (rnd, k),))
                   for k in range(4) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not bad, bad[:5]
    assert o.count <= 12 * 4 * 2, o.count  # coalesced (a waiter may miss the fill's start)


def test_vary_on_the_identity_header_never_gives_one_tenant_anothers_answer(env):
    # An origin behind the proxy's auth answers per tenant, and says so as it should, with
    # Vary: X-Tenant (the field the proxy sets). The stored variant was keyed by the value the
    # origin saw (the proxy's), a later request's by the value the client sent: mallory, with
    # her own key, sending X-Tenant: alice got alice's answer from the cache.
    o = Origin(env)
    o.paths["/me"] = lambda req: Reply(
        headers=[("Cache-Control", "max-age=60"), ("Vary", "X-Tenant")],
        body=b"private data of " + req.headers.get("x-tenant", "nobody").encode())
    keys = env.write("keys", "alice alice-key-0123456789abcdef\n"
                             "mallory mallory-key-0123456789abcd\n")
    px = env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                   + "routes:\n  - match: {path_prefix: /}\n    pool: o\n    cache: true\n"
                   f"    auth: {{api_keys_file: {keys}}}\n", workers=1)
    st, h, b = get(px, "/me", headers={"X-API-Key": "alice-key-0123456789abcdef"})
    assert st == 200 and b == b"private data of alice", (st, b)
    for extra in ({"X-Tenant": "alice"}, {"X_Tenant": "alice"}, {}):
        st, h, b = get(px, "/me", headers={"X-API-Key": "mallory-key-0123456789abcd", **extra})
        assert st == 200 and b == b"private data of mallory", (extra, st, b, h)
    st, h, b = get(px, "/me", headers={"X-API-Key": "alice-key-0123456789abcdef"})
    assert st == 200 and b == b"private data of alice", (st, b)


def test_authorized_answers_are_stored_only_as_rfc_9111_3_5_allows_on_auth_routes(env):
    # routes.cache.authorized lets requests with Authorization be answered from the cache,
    # their answers stored only when public, s-maxage or must-revalidate (RFC 9111 3.5). The
    # check read the request as forwarded: on an auth route the credential is not forwarded,
    # so every answer was stored, and one user's was given to another.
    o = Origin(env)
    o.paths["/mine"] = lambda req: Reply(
        headers=[("Cache-Control", "max-age=60")],
        body=b"account of " + req.headers.get("x-tenant", "nobody").encode())
    o.paths["/shared"] = lambda req: Reply(
        headers=[("Cache-Control", "public, max-age=60")], body=b"for everyone")
    keys = env.write("keys", "alice alice-key-0123456789abcdef\n"
                             "bob bob-key-0123456789abcdefgh\n")
    px = env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                   + "routes:\n  - match: {path_prefix: /}\n    pool: o\n"
                   "    cache: {authorized: true}\n"
                   f"    auth: {{api_keys_file: {keys}}}\n", workers=1)
    alice = {"Authorization": "Bearer alice-key-0123456789abcdef"}
    bob = {"Authorization": "Bearer bob-key-0123456789abcdefgh"}
    st, h, b = get(px, "/mine", headers=alice)
    assert st == 200 and b == b"account of alice", (st, b)
    assert "stored" not in cs(h) and "Authorization" in cs(h), h
    st, h, b = get(px, "/mine", headers=bob)
    assert st == 200 and b == b"account of bob", (st, b, h)
    assert o.count("/mine") == 2
    # public: stored, and answered to either
    assert get(px, "/shared", headers=alice)[2] == b"for everyone"
    st, h, b = get(px, "/shared", headers=bob)
    assert b == b"for everyone" and cs(h).startswith("accelnet; hit"), h
    assert o.count("/shared") == 1


def test_a_stored_404_is_a_404_to_a_conditional_request(env):
    # A server ignores preconditions when its answer would be other than 2xx (RFC 9110
    # 13.2.1): a stored 404 with an ETag was answered 304 to a request whose If-None-Match
    # named that ETag (a client with the 404 cached took it as "still not found", but a 304
    # says the selected representation is unchanged: there is none).
    o = Origin(env)
    o.paths["/gone"] = lambda req: Reply(404, [("Cache-Control", "max-age=60"),
                                              ("ETag", '"nf"')], b"not found: /gone")
    px = start(env, o)
    assert get(px, "/gone")[0] == 404
    st, h, b = get(px, "/gone", headers={"If-None-Match": '"nf"'})
    assert st == 404 and b == b"not found: /gone" and cs(h).startswith("accelnet; hit"), (st, h)
    assert o.count("/gone") == 1


class RawOrigin(SocketOrigin):
    """An origin that answers its N-th request (from 1) with the bytes answer(n) and keeps the
    connection open for the next."""

    def __init__(self, env, answer):
        self.answer, self.count = answer, 0
        super().__init__(env, 64)

    def serve(self, c):
        with c:
            got = b""
            while True:
                while b"\r\n\r\n" not in got:
                    d = c.recv(4096)
                    if not d:
                        return
                    got += d
                got = got.partition(b"\r\n\r\n")[2]
                with self.lock:
                    self.count += 1
                    n = self.count
                c.sendall(self.answer(n))


def test_a_background_refresh_reads_a_final_head_behind_an_interim_one(env):
    # A stale-while-revalidate refresh skipped a 103 Early Hints and then waited for more
    # bytes to parse the final head that had come with it: none came, and the refresh timed
    # out; each later one the same (behind an origin that sends 103, never refreshed).
    def answer(n):
        if n == 1:
            return (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=10, stale-while-revalidate=600"
                    b"\r\nAge: 100\r\nContent-Length: 9\r\n\r\nversion 1")
        return (b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 9\r\n\r\n"
                b"version 2")
    o = RawOrigin(env, answer)
    px = env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                   + "routes:\n  - {match: {path_prefix: /}, pool: o, cache: true}\n",
                   workers=1)
    assert get(px, "/r")[2] == b"version 1"
    st, h, b = get(px, "/r")
    assert b == b"version 1" and cs(h).startswith("accelnet; hit; ttl=-"), h  # and refreshes
    wait_until(lambda: get(px, "/r")[2] == b"version 2", "the refreshed copy", timeout=10)
    st, h, b = get(px, "/r")
    assert b == b"version 2" and cs(h).startswith("accelnet; hit"), h
    assert o.count == 2
