"""Issue 24's fixes, reviewed as their attackers would (the cache and who asks; the control
plane). Each test here is an attack that worked before its fix."""

from test_cache import Origin, Reply, cs, get, is_hit, start

PAGE = "/page"


def _revalidating_origin(env, on_304):
    """An origin whose PAGE is stored stale at once (max-age=0, an ETag), and whose 304 to a
    revalidation carries the fields <on_304>(req) gives (a list of pairs)."""
    o = Origin(env)

    def page(req):
        if req.headers.get("if-none-match") == '"v1"':
            return Reply(status=304, headers=[("ETag", '"v1"')] + on_304(req))
        return Reply(headers=[("Cache-Control", "max-age=0"), ("ETag", '"v1"')],
                     body=b"the public page")

    o.paths[PAGE] = page
    return o


def test_304_set_cookie_not_merged_into_the_shared_copy(env):
    """A 304 answering alice's revalidation sets her session cookie: the stored copy that
    everyone gets must not take it (a 200 with Set-Cookie is never stored, cookies: false).
    Before: bob's hit answered `Set-Cookie: session=alice-secret`."""
    o = _revalidating_origin(env, lambda req: [
        ("Cache-Control", "max-age=60"),
        ("Set-Cookie", "session=" + req.headers.get("x-who", "nobody") + "-secret")])
    px = start(env, o)
    s, h, b = get(px, PAGE, headers={"X-Who": "first"})
    assert s == 200 and b == b"the public page", (s, h)
    s, h, b = get(px, PAGE, headers={"X-Who": "alice"})  # stale: revalidated, 304
    assert s == 200 and b == b"the public page", (s, h)
    for _ in range(2):
        s, h, b = get(px, PAGE, headers={"X-Who": "bob"})
        assert s == 200 and b == b"the public page", (s, h)
        assert not any("alice" in v for v in h.get("set-cookie", [])), (cs(h), h)


def test_304_private_not_merged_into_the_shared_copy(env):
    """A 304 that says `private` (and a per-user field) to alice's revalidation: the copy that
    answers everyone must not become hers. Before: bob's hit answered `X-User: alice`."""
    o = _revalidating_origin(env, lambda req: [
        ("Cache-Control", "private, max-age=60"),
        ("X-User", req.headers.get("x-who", "nobody"))])
    px = start(env, o)
    get(px, PAGE, headers={"X-Who": "first"})
    get(px, PAGE, headers={"X-Who": "alice"})
    s, h, b = get(px, PAGE, headers={"X-Who": "bob"})
    assert s == 200 and b == b"the public page", (s, h)
    assert h.get("x-user", []) != ["alice"], (cs(h), h)


# --- admin.state_file: its directory ----------------------------------------------------


def test_state_file_in_a_directory_others_can_write_is_refused(env):
    """A state file is believed as far as its directory is: where another user can rename
    names (a directory writable by group or others, not sticky), they can put back an old
    state file of the service user's (a backend since removed: a replay), or a root-owned
    one hard-linked from elsewhere. Before: such a file, owned by root with mode 0600, was
    applied (its backend added). Now it is refused whole; the same file in a directory
    only its owner writes is applied."""
    import os

    from test_ctl import _fast, _pool, _start, addr, backends
    from test_ctl_review import _state_doc
    a, evil = _fast(env, "a"), _fast(env, "evil")
    shared = os.path.join(env.dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    state = os.path.join(shared, "state.json")
    with open(state, "w") as f:
        f.write(_state_doc(addr(evil)))
    os.chmod(state, 0o600)
    px = _start(env, _pool("gpu", [a]), state_file=state, name="proxy-shared")
    assert addr(evil) not in backends(px)
    log = env.log(px)
    assert "refused" in log and f"state file {state}" in log, log
    env.stop(px)
    own = os.path.join(env.dir, "own")
    os.mkdir(own, 0o700)
    state = os.path.join(own, "state.json")
    with open(state, "w") as f:
        f.write(_state_doc(addr(evil)))
    os.chmod(state, 0o600)
    px = _start(env, _pool("gpu", [a]), state_file=state, name="proxy-own")
    assert backends(px)[addr(evil)]["weight"] == 7
    env.finish()


# --- KV events: a hostile publisher -------------------------------------------------------

# A publisher that speaks ZMTP 3.0 itself (libzmq's own PUB sends a multipart message only
# whole): it greets the subscriber as a PUB, says "ready", then sends FRAMES frames of 8
# bytes, each flagged MORE: one message that never ends.
ENDLESS = r"""
import socket, sys, threading, time
port, frames = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(1)
chunk = (b"\x01\x08" + b"A" * 8) * 10000
body = b"\x05READY\x0bSocket-Type" + (3).to_bytes(4, "big") + b"PUB"
while True:  # a connection the subscriber drops at once: take its next one
    c, _ = srv.accept()
    try:
        c.sendall(b"\xff" + b"\0" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" * 32)
        c.sendall(b"\x04" + bytes([len(body)]) + body)
        threading.Thread(target=lambda: [c.recv(65536) for _ in iter(int, 1)],
                         daemon=True).start()
        print("ready", flush=True)
        sent = 0
        while sent < frames:
            c.sendall(chunk)
            sent += 10000
        break
    except OSError:
        c.close()
print("sent", sent, flush=True)
time.sleep(600)
"""


def _unfixed_test_kv_endless_multipart_message_keeps_memory_bounded(env):
    """NOT FIXED (so not collected: rename it test_... once it is): a KV publisher that never ends its message (every frame flagged MORE): ZeroMQ keeps
    an unfinished message whole for the subscriber, and its high-water mark counts whole
    messages only, so 5 million 8-byte frames (50 MB on the wire) are all kept: the proxy
    grew from 12 MB to 325 MB, and a publisher that goes on takes all the memory there is.
    libzmq has no bound on a message's frames; a fix reads ZMTP itself (a ZMQ_STREAM socket)
    or relays the connection's bytes through a bounded reader."""
    import time

    from harness import free_port, status, wait_until
    from test_ctl_review import _asan, _rss_kib
    port = free_port()
    pub = env.start(["/usr/bin/python3", "-c", ENDLESS, str(port), str(5_000_000)],
                    "publisher")
    px = env.proxy(
        "pools:\n  - name: gpu\n    balance: least-connections\n    backends:\n"
        f"      - {{address: 127.0.0.1:9, kv_events: 'tcp://127.0.0.1:{port}'}}\n",
        workers=1)
    wait_until(lambda: "ready" in env.log(pub), "the publisher's subscriber")
    start_rss = _rss_kib(px.pid)
    wait_until(lambda: "sent" in env.log(pub), "the publisher's frames", timeout=120)
    time.sleep(1)  # what is on its way in the sockets' buffers
    peak = _rss_kib(px.pid)
    assert status(px.admin)["pools"][0]["backends"]
    bound = 2 * start_rss + 8 * 16 * 1024 + (256 * 1024 if _asan(px.pid) else 0)
    assert peak < bound, f"RSS grew from {start_rss} KiB to {peak} KiB (bound {bound})"
    assert px.poll() is None


# --- admin API: where backends may be added ------------------------------------------------


def test_admin_backend_networks_judge_a_mapped_address_as_ipv4(env):
    """admin.backend_networks [10.0.0.0/8, '::/0']: IPv4 only in 10/8, IPv6 anywhere. An
    IPv4-mapped IPv6 address ([::ffff:192.0.2.1]) is a connection to 192.0.2.1: it must be
    judged by the IPv4 blocks. Before: it matched ::/0 and was added (any IPv4 host, the
    cloud's metadata address 169.254.169.254 among them, behind the allow-list's back)."""
    from test_ctl import _fast, _pool, _start, api, backends
    a = _fast(env, "a")
    px = _start(env, _pool("gpu", [a], extra="    spare_backends: 4"),
                extra="  backend_networks: [10.0.0.0/8, '::/0']\n")
    for address in ["[::ffff:192.0.2.1]:80", "[::ffff:169.254.169.254]:80", "192.0.2.1:80"]:
        st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": address})
        assert st == 400 and "outside admin.backend_networks" in doc["error"], (address, doc)
    for address in ["[::ffff:10.1.2.3]:80", "[2001:db8::1]:80", "10.1.2.4:80"]:
        st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": address})
        assert st == 201, (address, doc)
    assert "[::ffff:192.0.2.1]:80" not in backends(px)
    env.finish()


def test_304_to_a_credentialed_request_not_merged_into_everyones_copy(env):
    """cache: {authorized: true}: the public copy goes stale and alice (Authorization) asks;
    the origin's 304 to her says `s-maxage=60` (storable for a credential, but not public)
    and names her. Her answer is hers alone (her scope): it must not be merged into the copy
    that everyone gets. Before: bob's hit answered `X-User: alice`."""
    o = _revalidating_origin(env, lambda req: [
        ("Cache-Control", "s-maxage=60"),
        ("X-User", req.headers.get("authorization", "nobody").split()[-1])])
    page = o.paths[PAGE]

    def public_page(req):
        r = page(req)
        if r.status == 200:
            r.headers = [("Cache-Control", "public, max-age=0"), ("ETag", '"v1"')]
        return r

    o.paths[PAGE] = public_page
    px = start(env, o, route_cache="{authorized: true}")
    s, h, b = get(px, PAGE)
    assert s == 200 and b == b"the public page", (s, h)
    get(px, PAGE, headers={"Authorization": "Bearer alice"})
    for who in ({}, {"Authorization": "Bearer bob"}):
        s, h, b = get(px, PAGE, headers=who)
        assert s == 200 and b == b"the public page", (s, h)
        assert h.get("x-user", []) != ["alice"], (who, cs(h), h)


# --- forwarding fields a client spells with underscores -------------------------------------


def test_forwarding_fields_with_underscores_are_dropped_too(env):
    """X-Forwarded-Host, X-Real-IP, Forwarded... are dropped from clients outside
    trusted_proxies, so that they cannot poison a stored answer (docs/cache.md) nor claim
    another address. CGI-style servers (Rack/Puma, PHP, WSGI) read X_Forwarded_Host as the
    same HTTP_X_FORWARDED_HOST. Before: the underscore spellings reached the origin, and an
    app building its links from the forwarded host had them cached for everyone."""
    from harness import lenient_backend, request
    be = lenient_backend(env)
    px = env.proxy("cache: {memory: 64MiB}\npools:\n  - name: o\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{be.port}}}\n"
                   "routes:\n  - {match: {path_prefix: /}, pool: o, cache: true}\n", workers=1)
    sent = {"X_Forwarded_Host": "evil.example", "X_Real_IP": "6.6.6.6",
            "x_forwarded_prefix": "/evil", "X_Client_IP": "6.6.6.6",
            "True_Client_IP": "6.6.6.6", "X-Forwarded_Port": "6666",
            "X_Forwarded_Proto": "ftp", "X_Forwarded_For": "6.6.6.6",
            "X_Request_Id": "forged"}
    st, _, _ = request(px.port, "GET", "/page", headers=sent)
    assert st == 200
    seen = be.seen[-1]["headers"]
    got = {k: v for k, v in seen.items() if k in {n.lower() for n in sent}}
    assert not got, got  # none of the spellings sent, and none of their values:
    assert not {v for vs in seen.values() for v in vs} & set(sent.values()), seen
    assert seen["x-forwarded-for"] == ["127.0.0.1"], seen
