"""Sessions (issue 28, pools[].session): a conversation named by a header, a cookie or the
Responses API's previous_response_id stays on the backend that served it; through three
instances sharing one Redis (cluster:) too; it moves when that backend is down or full, and
stays where it moved. Nothing a client sends reaches a backend outside the pool, or one the
balancer could not pick (the operator's policy decides: docs/security.md)."""

SERIAL = True  # three proxies and a Redis: run alone under run.py -j

import json
import os
import re
import signal
import socket
import subprocess
import threading

from harness import BIN, ScriptedBackend, request, wait_until
from harness import status as admin_status
from test_cluster import _cluster, _instances, _redis


class ResponsesBackend(ScriptedBackend):
    """Answers /v1/responses as the Responses API does, with an id naming this backend
    ("resp_NAME_N"): a JSON body, or with "stream": true the events response.created and
    response.completed. Other paths get a small JSON body. Requests with an X-Hold field wait
    for self.gate. self.seen lists (path, headers, body) of every request."""

    def __init__(self, name):
        self.name = name
        self.seen = []
        self.gate = threading.Event()
        self.held = 0
        self.conns = []
        self.dead = False
        super().__init__(self._answer)

    def _conn(self, conn):
        self.conns.append(conn)
        super()._conn(conn)

    def down(self):
        """Gone: no more connections, and the open ones closed."""
        self.dead = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # (wakes the accept: close alone does not)
        except OSError:
            pass
        self.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _answer(self, n, req):
        if self.dead:
            return b"", True
        head, _, body = req.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        self.seen.append((path, hdrs, body))
        if "x-hold" in hdrs:
            self.held += 1
            self.gate.wait(30)
        rid = f"resp_{self.name}_{n}"
        doc = json.loads(body) if body else {}
        if path.startswith("/v1/responses") and doc.get("stream"):
            created = {"type": "response.created", "sequence_number": 0,
                       "response": {"id": rid, "object": "response", "status": "in_progress"}}
            done = {"type": "response.completed", "sequence_number": 1,
                    "response": {"id": rid, "object": "response", "status": "completed"}}
            data = (f"event: response.created\ndata: {json.dumps(created)}\n\n"
                    f"event: response.completed\ndata: {json.dumps(done)}\n\n").encode()
            ctype = b"text/event-stream"
        else:
            data = json.dumps({"id": rid, "object": "response", "backend": self.name,
                               "output": [{"id": f"msg_{n}", "type": "message"}]}).encode()
            ctype = b"application/json"
        return (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nX-Backend: %s\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (ctype, self.name.encode(), len(data), data),
                False)


def _backends(env, n):
    bes = [ResponsesBackend(f"b{i}") for i in range(n)]
    for be in bes:
        env.on_cleanup.append(be.close)
    return bes


def _pool(bes, session, balance="round-robin", name="p", extra=""):
    lines = [f"  - name: {name}", f"    balance: {balance}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{be.port}{extra}}}" for be in bes]
    lines.append(f"    session: {session}")
    return "\n".join(lines) + "\n"


def _post(port, path, doc, headers=None):
    status, hdrs, data = request(port, "POST", path, body=json.dumps(doc),
                                 headers=dict({"Content-Type": "application/json"},
                                              **(headers or {})))
    return status, hdrs.get("x-backend", ["?"])[0], data


def _turn(port, prev=None, stream=False):
    """One turn of a conversation: (the backend that answered, the answer's id)."""
    doc = {"model": "m", "input": "hi"}
    if prev:
        doc["previous_response_id"] = prev
    if stream:
        doc["stream"] = True
    status, be, data = _post(port, "/v1/responses", doc)
    assert status == 200, (status, data)
    m = re.search(rb'"id": "(resp_[^"]+)"', data)
    return be, m.group(1).decode()


def test_session_header_and_cookie_stick(env):
    bes = _backends(env, 3)
    px = env.proxy("pools:\n" + _pool(bes, "{header: X-Session-Id, cookie: sid}")
                   + "routes:\n  - pool: p\n")
    for how in ("header", "cookie"):
        homes = {}
        for turn in range(4):
            for s in range(12):
                h = ({"X-Session-Id": f"conv-{s}"} if how == "header"
                     else {"Cookie": f"theme=dark; sid=conv-{s}; x=1"})
                status, be, _ = _post(px.port, "/v1/chat/completions", {"model": "m"}, h)
                assert status == 200
                assert homes.setdefault(s, be) == be, (how, s, turn, homes[s], be)
        # round-robin placed the new sessions: they are spread, not all on one backend
        assert len(set(homes.values())) == 3, homes
    # a request without a session is the balancer's: round-robin still turns
    got = {_post(px.port, "/v1/chat/completions", {"model": "m"})[1] for _ in range(6)}
    assert len(got) == 3, got


def test_session_responses_api_single_instance(env):
    """previous_response_id: each answer's id is learned from the JSON body, or from the
    stream's response.created event, and the next turn goes where that answer came from."""
    bes = _backends(env, 3)
    px = env.proxy("pools:\n" + _pool(bes, "{header: '', responses_api: true}")
                   + "routes:\n  - pool: p\n")
    for stream in (False, True):
        convs = [_turn(px.port, stream=stream) for _ in range(9)]
        assert len({be for be, _ in convs}) == 3
        for _ in range(3):
            nxt = []
            for be, rid in convs:
                got, rid2 = _turn(px.port, prev=rid, stream=stream)
                assert got == be, (stream, rid, be, got)
                nxt.append((got, rid2))
            convs = nxt


def test_session_responses_api_with_sims(env):
    """accelnet sim answers /v1/responses with an id naming it: conversations through the
    proxy stay on their sim."""
    sims = [env.sim(f"s{i}", latency_ms=1, token_ms=1) for i in range(3)]
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   + "".join(f"      - {{address: 127.0.0.1:{s.port}}}\n" for s in sims)
                   + "    session: {header: '', responses_api: true}\nroutes:\n  - pool: p\n")

    def turn(prev=None):
        doc = {"model": "m", "input": "hi", "max_tokens": 2}
        if prev:
            doc["previous_response_id"] = prev
        status, hdrs, data = request(px.port, "POST", "/v1/responses", body=json.dumps(doc),
                                     headers={"Content-Type": "application/json"})
        assert status == 200, (status, data)
        rid = json.loads(data)["id"]
        return rid.split("_")[1], rid

    convs = [turn() for _ in range(6)]
    assert len({s for s, _ in convs}) == 3, convs
    for _ in range(3):
        nxt = []
        for home, rid in convs:
            got, rid2 = turn(rid)
            assert got == home, (rid, got)
            nxt.append((got, rid2))
        convs = nxt


def _sessions_received(procs):
    return sum(_cluster(p).get("accelnet_cluster_sessions_received_total", 0) for p in procs)


def test_sessions_three_instances_one_redis(env):
    """The must-show at small scale: 100 conversations with previous_response_id, each turn
    through another of three instances sharing one Redis, stay on their backend (>= 99%);
    when a backend goes away its conversations move, and stay where they moved."""
    bes = _backends(env, 3)
    redis = _redis(env)
    body = ("pools:\n" + _pool(bes, "{header: '', responses_api: true, ttl_s: 600}")
            + "routes:\n  - pool: p\n")
    procs = _instances(env, redis.port, body, sync_ms=20)
    convs = [_turn(procs[i % 3].port) for i in range(100)]
    learned = 100
    stayed = turns = 0

    def synced():
        # every answer's id, learned by one instance, has reached the two others
        wait_until(lambda: _sessions_received(procs) >= 2 * learned,
                   f"{2 * learned} sessions received through Redis", timeout=20)

    for k in range(1, 4):
        synced()
        nxt = []
        for i, (be, rid) in enumerate(convs):
            got, rid2 = _turn(procs[(i + k) % 3].port, prev=rid)
            stayed += got == be
            turns += 1
            nxt.append((got, rid2))
        learned += 100
        convs = nxt
    assert stayed >= 0.99 * turns, f"{stayed} of {turns} turns stayed on their backend"

    # b0 goes away: its conversations move to another backend (the proxy marks it and picks
    # again), and their next turns stay on the new one
    gone = bes[0]
    gone.down()
    synced()
    moved = {}
    nxt = []
    kept = others = 0
    for i, (be, rid) in enumerate(convs):
        got, rid2 = _turn(procs[i % 3].port, prev=rid)
        assert got != gone.name, (rid, got)
        if be == gone.name:
            moved[i] = got
        else:  # the conversations of the backends still up stay where they are
            others += 1
            kept += got == be
        nxt.append((got, rid2))
    learned += 100
    convs = nxt
    assert moved, "no conversation was on b0"
    assert kept >= 0.99 * others, f"{kept} of {others} left their live backend"
    synced()
    stayed = 0
    for i, (be, rid) in enumerate(convs):
        got, _ = _turn(procs[(i + 1) % 3].port, prev=rid)
        stayed += got == be
    assert stayed >= 99, f"{stayed} of 100 stayed after the move"


def _hits(admin, name="p"):
    """The pool's session_hits: requests sent to their conversation's remembered backend."""
    return next(p for p in admin_status(admin)["pools"] if p["name"] == name)["session_hits"]


def test_session_names_and_response_ids_are_apart(env):
    """F7: a session header naming another conversation's response id neither rides to that
    conversation's backend nor moves it; a previous_response_id naming another client's
    session header is no hit on that session either."""
    bes = _backends(env, 3)
    px = env.proxy("pools:\n" + _pool(bes, "{header: X-Session-Id, responses_api: true}",
                                      extra=", max_concurrency: 1")
                   + "routes:\n  - pool: p\n")
    home, rid = _turn(px.port)
    home_be = next(be for be in bes if be.name == home)
    # riding: the victim's response id as a session header names a new conversation
    before = _hits(px.admin)
    status, _, _ = _post(px.port, "/v1/chat/completions", {"model": "m"},
                         {"X-Session-Id": rid})
    assert status == 200 and _hits(px.admin) == before, "a session header rode a response id"
    # poisoning: with the victim's backend busy (its own next turn, held there), a session
    # header naming its response id is placed elsewhere: the victim's entry stays put
    t = threading.Thread(target=_post, args=(px.port, "/v1/responses",
                                             {"model": "m", "previous_response_id": rid},
                                             {"X-Hold": "1"}))
    t.start()
    try:
        wait_until(lambda: home_be.held == 1, "the victim's held turn at its backend")
        for _ in range(3):
            status, be, _ = _post(px.port, "/v1/chat/completions", {"model": "m"},
                                  {"X-Session-Id": rid})
            assert status == 200 and be != home, (status, be)
    finally:
        home_be.gate.set()
        t.join(30)
    for _ in range(3):
        got, _ = _turn(px.port, prev=rid)
        assert got == home, (got, home)
    # the reverse: a session header's name sent as previous_response_id is no hit on it
    _post(px.port, "/v1/chat/completions", {"model": "m"}, {"X-Session-Id": "conv-secret"})
    before = _hits(px.admin)
    _turn(px.port, prev="conv-secret")
    assert _hits(px.admin) == before, "a previous_response_id rode a session header's name"


def test_session_names_and_response_ids_are_apart_through_redis(env):
    """F7 through cluster: a response id learned on one instance, passed on through Redis,
    names no session header's conversation on another."""
    bes = _backends(env, 3)
    redis = _redis(env)
    body = ("pools:\n" + _pool(bes, "{header: X-Session-Id, responses_api: true}")
            + "routes:\n  - pool: p\n")
    a, b = _instances(env, redis.port, body, n=2, sync_ms=20)
    home, rid = _turn(a.port)
    wait_until(lambda: _sessions_received([b]) >= 1, "the response id passed to b", timeout=20)
    assert _turn(b.port, prev=rid)[0] == home  # (b knows it as a response id)
    before = _hits(b.admin)
    status, _, _ = _post(b.port, "/v1/chat/completions", {"model": "m"}, {"X-Session-Id": rid})
    assert status == 200 and _hits(b.admin) == before, "a session header rode a response id"


def _reloaded(env, px, gen, text=None, how="sighup"):
    """Reload <px> (SIGHUP, or `accelnet ctl reload`), its config file rewritten to <text>
    first if given; wait until generation <gen> is loaded."""
    path = os.path.join(env.dir, "proxy.yaml")
    if text is not None:
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.rename(path + ".tmp", path)  # a reload never reads a half-written file
    if how == "ctl":
        r = subprocess.run([BIN, "ctl", "--admin", f"127.0.0.1:{px.admin}", "reload"],
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
    else:
        px.send_signal(signal.SIGHUP)
    wait_until(lambda: f"(configuration generation {gen})" in env.log(px) or
               px.poll() is not None, f"generation {gen}")
    assert px.poll() is None, env.log(px)[-3000:]


def test_sessions_survive_reload(env):
    """A hot reload (ctl reload, SIGHUP) keeps the sessions: conversations named by a header
    and by previous_response_id stay on their backend after it; one whose turn was in flight
    at the reload stays where that turn went; a backend the new config leaves out loses its
    conversations to the others, and they stay where they moved."""
    bes = _backends(env, 3)
    px = env.proxy("pools:\n" + _pool(bes, "{header: X-Session-Id, responses_api: true}")
                   + "routes:\n  - pool: p\n")
    named = {}
    for s in range(9):
        _, be, _ = _post(px.port, "/v1/chat/completions", {"model": "m"},
                         {"X-Session-Id": f"conv-{s}"})
        named[s] = be
    convs = [_turn(px.port) for _ in range(9)]
    assert len(set(named.values())) == 3 and len({be for be, _ in convs}) == 3

    def check(gone=None):
        nonlocal convs
        for s, home in named.items():
            _, be, _ = _post(px.port, "/v1/chat/completions", {"model": "m"},
                             {"X-Session-Id": f"conv-{s}"})
            assert be == home or home == gone, (s, home, be)
            named[s] = be
        nxt = []
        for home, rid in convs:
            got, rid2 = _turn(px.port, prev=rid)
            assert got == home or home == gone, (rid, home, got)
            nxt.append((got, rid2))
        convs = nxt

    _reloaded(env, px, 1, how="ctl")
    check()
    _reloaded(env, px, 2)
    check()

    # a turn in flight across a reload: its answer's id, learned by the old configuration
    # after the reload, reaches the new one (a conversation not on b0, where the new
    # configuration's round-robin would send a conversation it does not know)
    home, rid = next(c for c in convs if c[0] != "b0")
    home_be = next(be for be in bes if be.name == home)
    home_be.gate.clear()
    held = []
    t = threading.Thread(target=lambda: held.append(
        _post(px.port, "/v1/responses", {"model": "m", "previous_response_id": rid},
              {"X-Hold": "1"})))
    t.start()
    try:
        wait_until(lambda: home_be.held >= 1, "the turn held at its backend")
        _reloaded(env, px, 3)
    finally:
        home_be.gate.set()
        t.join(30)
    status, be, data = held[0]
    assert status == 200 and be == home, (status, be)
    wait_until(lambda: "generation 2: its last request has ended; released" in env.log(px),
               "the old configuration released")
    rid_held = json.loads(data)["id"]
    for _ in range(3):
        got, rid_held = _turn(px.port, prev=rid_held)
        assert got == home, (got, home)

    # b2 leaves the pool: its conversations move, the others stay
    text = open(os.path.join(env.dir, "proxy.yaml")).read()
    text = text.replace(f"      - {{address: 127.0.0.1:{bes[2].port}}}\n", "")
    assert str(bes[2].port) not in text
    _reloaded(env, px, 4, text)
    check(gone="b2")
    assert "b2" not in named.values() and "b2" not in {be for be, _ in convs}
    check()


def test_session_escapes_a_full_backend(env):
    """A session whose backend is at its max_concurrency goes to another one at once (no
    wait in the queue), and stays there."""
    bes = _backends(env, 2)
    px = env.proxy("pools:\n" + _pool(bes, "{header: X-Session-Id}", extra=", max_concurrency: 1")
                   + "routes:\n  - pool: p\n")
    _, home, _ = _post(px.port, "/v1/chat/completions", {"model": "m"}, {"X-Session-Id": "s"})
    held = next(be for be in bes if be.name == home)
    other = next(be for be in bes if be.name != home)
    t = threading.Thread(target=_post, args=(px.port, "/v1/chat/completions", {"model": "m"},
                                             {"X-Session-Id": "s", "X-Hold": "1"}))
    t.start()
    try:
        wait_until(lambda: held.held == 1, "the held request at its backend")
        status, be, _ = _post(px.port, "/v1/chat/completions", {"model": "m"},
                              {"X-Session-Id": "s"})
        assert status == 200 and be == other.name, (status, be)
    finally:
        held.gate.set()
        t.join(30)
    # it stuck where it went
    for _ in range(3):
        assert _post(px.port, "/v1/chat/completions", {"model": "m"},
                     {"X-Session-Id": "s"})[1] == other.name
    pool = next(p for p in admin_status(px.admin)["pools"] if p["name"] == "p")
    assert pool["session_moves"] == 1 and pool["session_hits"] == 4, pool


def test_session_never_leaves_the_pool_or_its_eligible_backends(env):
    """Operator-authoritative policy: a session id, a previous_response_id learned in another
    pool, an X-Accelnet-* field or a body field naming a backend change nothing the operator
    did not configure: the backend outside the pool never hears a request, and a drained
    backend gets no session's request."""
    inside = _backends(env, 2)
    outside = ResponsesBackend("outside")
    env.on_cleanup.append(outside.close)
    out_addr = f"127.0.0.1:{outside.port}"
    px = env.proxy("pools:\n"
                   + _pool(inside, "{header: X-Session-Id, responses_api: true}")
                   + _pool([outside], "{responses_api: true}", name="q")
                   + "routes:\n  - match: {path_prefix: /q/}\n    pool: q\n"
                   + "  - pool: p\n")
    # an id learned in pool q names nothing in pool p
    _, be, data = _post(px.port, "/q/v1/responses", {"model": "m"})
    rid_q = json.loads(data)["id"]
    outside.seen.clear()
    tries = [
        ({"X-Session-Id": out_addr}, {"model": "m"}),
        ({"X-Session-Id": "../" + out_addr}, {"model": "m"}),
        ({"X-Accelnet-Backend": out_addr, "X-Accelnet-Pool": "q"}, {"model": "m"}),
        ({"X-Backend": out_addr, "Host": out_addr}, {"model": "m", "backend": out_addr}),
        ({}, {"model": "m", "previous_response_id": rid_q}),
        ({}, {"model": "m", "previous_response_id": out_addr}),
    ]
    for hdrs, doc in tries:
        for path in ("/v1/responses", "/v1/chat/completions"):
            status, be, _ = _post(px.port, path, doc, hdrs)
            assert status == 200 and be in ("b0", "b1"), (hdrs, doc, status, be)
    assert outside.seen == [], outside.seen

    # a session stuck to b0: drained by the operator, its requests go to b1
    _, home, _ = _post(px.port, "/v1/chat/completions", {"model": "m"}, {"X-Session-Id": "d"})
    home_be = next(b for b in inside if b.name == home)
    r = subprocess.run([BIN, "ctl", "--admin", f"127.0.0.1:{px.admin}", "drain", "p",
                        f"127.0.0.1:{home_be.port}"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for _ in range(4):
        _, be, _ = _post(px.port, "/v1/chat/completions", {"model": "m"}, {"X-Session-Id": "d"})
        assert be != home, be


def test_session_config_is_checked(env):
    bad = [
        ("{header: '', responses_api: false}", "nothing names a session"),
        ("{cookie: ''}", "'cookie' is empty"),
        ("{ttl_s: 0}", "out of range"),
        ("{max_entries: 1}", "out of range"),
        ("{colour: red}", "colour"),
    ]
    for session, want in bad:
        path = env.write("bad.yaml", "listen:\n  - address: 127.0.0.1:1\npools:\n"
                         "  - name: p\n    backends:\n      - {address: 127.0.0.1:2}\n"
                         f"    session: {session}\nroutes:\n  - pool: p\n")
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
        assert r.returncode != 0 and want in r.stderr + r.stdout, (session, r.stderr)


def test_policy_no_client_field_names_a_backend(env):
    """Operator-authoritative policy without sessions: fields that name a backend, a pool or
    an accelnet knob (X-Accelnet-*, X-Backend, Host, a body's "backend"/"pool") reach no
    backend the route's pool does not hold, whatever the balancer (a hashed key included)."""
    inside = _backends(env, 2)
    outside = ResponsesBackend("outside")
    env.on_cleanup.append(outside.close)
    out_addr = f"127.0.0.1:{outside.port}"
    pools = ("pools:\n"
             "  - name: p\n    balance: consistent-hash\n    hash: {key: 'header:X-User'}\n"
             "    backends:\n"
             + "".join(f"      - {{address: 127.0.0.1:{be.port}}}\n" for be in inside)
             + f"  - name: q\n    backends:\n      - {{address: {out_addr}}}\n"
             "routes:\n  - match: {path_prefix: /q/}\n    pool: q\n  - pool: p\n")
    px = env.proxy(pools)
    fields = {"X-Accelnet-Backend": out_addr, "X-Accelnet-Pool": "q", "X-Accelnet-Route": "0",
              "X-Backend": out_addr, "X-Upstream": out_addr, "Host": out_addr,
              "X-User": out_addr, "X-Forwarded-Host": out_addr}
    for k, v in fields.items():
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/q/x"):
            status, be, _ = _post(px.port, path, {"model": "m", "backend": out_addr,
                                                  "pool": "q"}, {k: v})
            assert status == 200 and be in ("b0", "b1"), (k, path, status, be)
    assert outside.seen == [], outside.seen


def test_policy_client_fields_steer_nothing_the_operator_did_not_configure(env):
    """Operator-authoritative policy, field by field: on a round-robin pool each request goes
    to the next backend whatever it carries: a session header or cookie on a pool without
    sessions (or with another header or cookie configured), a previous_response_id on a pool
    without responses_api, X-Accelnet-* fields naming a balancer, a session, a backend or
    explain, body fields naming them, kv_transfer_params or bootstrap fields on a pool that
    is not disaggregated (forwarded as the client wrote them: they place nothing)."""
    bes = _backends(env, 3)
    plain = "\n".join(["  - name: p", "    backends:"]
                      + [f"      - {{address: 127.0.0.1:{be.port}}}" for be in bes]) + "\n"
    px = env.proxy("pools:\n" + plain
                   + _pool(bes, "{header: X-Conversation, cookie: conv}", name="s")
                   + "routes:\n  - match: {path_prefix: /s/}\n    pool: s\n  - pool: p\n")
    addr = f"127.0.0.1:{bes[0].port}"
    _, _, data = _post(px.port, "/v1/responses", {"model": "m"})
    rid = json.loads(data)["id"]
    tries = [
        ({"X-Session-Id": "conv-1"}, {}),
        ({"Cookie": "sid=conv-1; session=conv-1; conversation=conv-1"}, {}),
        ({}, {"previous_response_id": rid}),
        ({"X-Accelnet-Session": "conv-1", "X-Accelnet-Balance": "consistent-hash",
          "X-Accelnet-Backend": addr, "X-Accelnet-Sticky": addr, "X-Accelnet-Llm": "on",
          "X-Accelnet-Explain": "true", "X-Backend": addr, "X-Upstream": addr,
          "X-Target-Backend": addr, "X-Session-Affinity": addr}, {}),
        ({}, {"backend": addr, "pool": "s", "balance": "consistent-hash",
              "session_id": "conv-1", "user": "conv-1", "cache_salt": "conv-1"}),
        ({}, {"kv_transfer_params": {"do_remote_prefill": True, "remote_host": addr,
                                     "remote_port": bes[0].port},
              "bootstrap_host": "127.0.0.1", "bootstrap_port": bes[0].port,
              "bootstrap_room": 7}),
    ]
    for prefix in ("", "/s"):
        for hdrs, extra in tries:
            for path in ("/v1/chat/completions", "/v1/responses"):
                got = []
                for _ in range(6):
                    status, h, _ = request(px.port, "POST", prefix + path,
                                           body=json.dumps(dict({"model": "m"}, **extra)),
                                           headers=dict({"Content-Type": "application/json"},
                                                        **hdrs))
                    assert status == 200 and "x-accelnet-llm" not in h, (hdrs, status, h)
                    got.append(h["x-backend"][0])
                # the balancer's turn: each backend twice, as with no such field
                assert sorted(got) == ["b0", "b0", "b1", "b1", "b2", "b2"], (prefix, hdrs,
                                                                            extra, got)
    # the configured ones do weigh in, on the pool that configured them
    homes = {_post(px.port, "/s/v1/chat/completions", {"model": "m"},
                   {"X-Conversation": "c"})[1] for _ in range(4)}
    homes |= {_post(px.port, "/s/v1/chat/completions", {"model": "m"},
                    {"Cookie": "conv=c2"})[1] for _ in range(4)}
    assert len(homes) <= 2, homes
