"""The response cache and who asks (issue 24, findings 1 and 6; docs/cache.md, "Credentialed
requests"; docs/security.md, "The cache and identity").

Every request with an identity -- an API key, a JWT, a Basic user, a client certificate
(routes.auth.client_cert, or only a verified certificate on the listener, whose subject the
origin gets) -- or a credential field is credentialed: it bypasses the cache unless the route
says `authorized: true`, and then an answer not marked public is stored for that identity
only. Tenants alice and bob each use their own credential; the origin answers per tenant (from
the identity header, or the certificate subject, it gets) and counts what reaches it.

And the herd: 1,000 concurrent cold requests for one key, each on its own `Connection: close`
connection, cost one backend fetch, with one worker and with two."""

import collections
import json
import socket
import threading

from cryptography.hazmat.primitives.asymmetric import ec

from harness import BIN, free_port, pool_yaml, read_all, request, wait_until
from test_auth_jwt import AUD, ISS, basic, claims, htpasswd, jwk, token
from test_cache import (Origin, Reply, _collect, _herd, _raise_nofile, cs, get, is_hit,
                        parse_response, start)
from test_mtls import Pki, _ctx, _server

PAGE = "/me"
COMPLETIONS = "/v1/completions"
PROMPT = json.dumps({"model": "m", "prompt": "my account", "temperature": 0}).encode()


def _who(req):
    """Who the origin believes asked: the identity header the proxy sets, else the client
    certificate's subject, else nobody."""
    return req.headers.get("x-tenant") or req.headers.get("x-client-subject") or "nobody"


def _origin(env, cc="max-age=60"):
    """An origin answering the page and a completion per tenant, with Cache-Control <cc>."""
    o = Origin(env)
    o.paths[PAGE] = lambda req: Reply(headers=[("Cache-Control", cc)],
                                      body=b"private page of " + _who(req).encode())
    o.paths[COMPLETIONS] = lambda req: Reply(
        headers=[("Cache-Control", cc), ("Content-Type", "application/json")],
        body=b'{"text": "completion for ' + _who(req).encode() + b'"}')
    return o


class Mtls:
    """A proxy with a TLS listener asking for client certificates (client_ca), one route /
    with <cache> and <auth> (none: the listener's certificate alone), and alice's and bob's
    certificates (CN alice, CN bob) from the client CA."""

    def __init__(self, env, origin, cache, auth="{client_cert: {tenant_from: subject_cn}}",
                 extra=""):
        pki = Pki(env)
        ca = pki.ca("client-ca", "client root")
        self.certs = {name: pki.issue(name, f"/O=Example/CN={name}", ca)[:2]
                      for name in ("alice", "bob")}
        sca, full, key = _server(pki)
        self.server_ca = sca[0]
        self.port = free_port()
        route = f"  - match: {{path_prefix: /}}\n    pool: o\n    cache: {cache}\n"
        if auth:
            route += f"    auth: {auth}\n"
        route += extra
        text = (f"workers: 1\nlisten:\n  - address: 127.0.0.1:{self.port}\n"
                f"    tls: {{cert: {full}, key: {key}, client_ca: {ca[0]}}}\n"
                "cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [origin.port])
                + "routes:\n" + route)
        path = env.write(f"proxy-{self.port}.yaml", text)
        self.px = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=self.port)

    def request(self, who, method="GET", path=PAGE, body=None):
        """(status, headers, body) of one request over a new connection with <who>'s
        certificate."""
        s = _ctx(self.server_ca, self.certs[who]).wrap_socket(
            socket.create_connection(("127.0.0.1", self.port), timeout=10),
            server_hostname="localhost")
        try:
            head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            if body is not None:
                head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            s.sendall(head.encode() + b"\r\n" + (body or b""))
            return parse_response(read_all(s))
        finally:
            s.close()


def _page(m, who):
    return m.request(who)


def _completion(m, who):
    return m.request(who, "POST", COMPLETIONS, PROMPT)


def _tenants_never_share(m, o, ask, path, own_hits):
    """alice asks twice, then bob twice, then alice again: each gets his own answer, never
    the other's; with <own_hits>, each one's second answer is a hit of his own."""
    mine = {"alice": [], "bob": []}
    for who in ("alice", "alice", "bob", "bob", "alice"):
        st, h, b = ask(m, who)
        assert st == 200 and who.encode() in b and b"nobody" not in b, (who, st, b, h)
        other = b"bob" if who == "alice" else b"alice"
        assert other not in b, (who, b, h)
        mine[who].append(is_hit(h))
    if own_hits:
        assert mine == {"alice": [False, True, True], "bob": [False, True]}, mine
        assert o.count(path, "POST" if path == COMPLETIONS else "GET") == 2
    else:
        assert not any(mine["alice"] + mine["bob"]), mine
        assert o.count(path, "POST" if path == COMPLETIONS else "GET") == 5


def test_mtls_tenants_never_get_each_others_cached_page(env):
    o = _origin(env)
    m = Mtls(env, o, "true")
    _tenants_never_share(m, o, _page, PAGE, own_hits=False)
    assert cs(_page(m, "bob")[1]) == "accelnet; fwd=bypass"


def test_mtls_tenants_never_get_each_others_cached_completion(env):
    o = _origin(env)
    m = Mtls(env, o, "{inference: true}")
    _tenants_never_share(m, o, _completion, COMPLETIONS, own_hits=False)


def test_mtls_authorized_true_gives_each_tenant_his_own_hits(env):
    # stored as RFC 9111 3.5 allows a credentialed request's answer (s-maxage here), and only
    # for the identity that asked
    o = _origin(env, cc="s-maxage=60")
    m = Mtls(env, o, "{authorized: true, inference: true}")
    _tenants_never_share(m, o, _page, PAGE, own_hits=True)
    _tenants_never_share(m, o, _completion, COMPLETIONS, own_hits=True)


def test_mtls_authorized_true_does_not_store_a_plain_max_age_answer(env):
    # max-age alone does not let a shared cache store a credentialed request's answer (3.5)
    o = _origin(env, cc="max-age=60")
    m = Mtls(env, o, "{authorized: true}")
    _tenants_never_share(m, o, _page, PAGE, own_hits=False)
    assert cs(_page(m, "alice")[1]) == 'accelnet; fwd=miss; detail="Authorization"'


def test_a_public_answer_is_shared_across_tenants(env):
    # the origin says the answer is for anyone: then one tenant's copy answers the other
    o = Origin(env)
    o.paths["/news"] = lambda req: Reply(headers=[("Cache-Control", "public, max-age=60")],
                                         body=b"news for everyone")
    m = Mtls(env, o, "{authorized: true}")
    assert m.request("alice", path="/news")[2] == b"news for everyone"
    st, h, b = m.request("bob", path="/news")
    assert b == b"news for everyone" and is_hit(h) and o.count("/news") == 1, h


def test_a_listener_certificate_without_route_auth_is_a_credential(env):
    # no routes.auth: the origin still gets the verified certificate's subject
    # (X-Client-Subject) and may answer by it without saying Vary
    o = _origin(env)
    m = Mtls(env, o, "true", auth=None)
    _tenants_never_share(m, o, _page, PAGE, own_hits=False)
    o2 = _origin(env, cc="s-maxage=60")
    m2 = Mtls(env, o2, "{authorized: true}", auth=None)
    _tenants_never_share(m2, o2, _page, PAGE, own_hits=True)


def test_a_certificates_tenant_has_its_own_limits_and_cached_answers(env):
    # the other places that ask who a request is read the identity the guard proved, a
    # certificate's included: each tenant has his own rate bucket, and a hit is still counted
    # against it (the cache stage runs after the limits)
    o = _origin(env, cc="s-maxage=60")
    m = Mtls(env, o, "{authorized: true}",
             extra="    rate_limit: {per_tenant: 2/h, burst: 2}\n")
    assert m.request("alice")[2] == b"private page of alice"
    st, h, b = m.request("alice")
    assert b == b"private page of alice" and is_hit(h), h
    assert m.request("alice")[0] == 429
    st, h, b = m.request("bob")
    assert st == 200 and b == b"private page of bob" and not is_hit(h), (st, b, h)
    assert o.count(PAGE) == 2


# --- the same for the other identities (a regression guard) -------------------------------


def _proxy(env, o, cache, auth):
    return env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                     + f"routes:\n  - match: {{path_prefix: /}}\n    pool: o\n"
                     f"    cache: {cache}\n    auth: {auth}\n", workers=1)


def _credentials(env):
    """(auth YAML, {tenant: headers}) for API keys, JWT and Basic."""
    keys = env.write("keys", "alice alice-key-0123456789abcdef\nbob bob-key-0123456789abcdefgh\n")
    ek = ec.generate_private_key(ec.SECP256R1())
    jwks = env.write("jwks.json", json.dumps({"keys": [jwk(ek, "e1")]}))
    users = htpasswd(env, "users", [("alice", "alice-pw"), ("bob", "bob-pw")])
    return [
        (f"{{api_keys_file: {keys}}}",
         {"alice": {"X-API-Key": "alice-key-0123456789abcdef"},
          "bob": {"Authorization": "Bearer bob-key-0123456789abcdefgh"}}),
        (f"{{jwt: {{jwks_file: {jwks}, audience: {AUD}, issuer: '{ISS}'}}}}",
         {w: {"Authorization": "Bearer " + token(ek, "ES256", claims(w), kid="e1")}
          for w in ("alice", "bob")}),
        (f"{{basic: {{users_file: {users}}}}}",
         {w: basic(w, w + "-pw") for w in ("alice", "bob")}),
    ]


class Plain:
    """Requests with each tenant's credential fields on a plain listener."""

    def __init__(self, px, creds):
        self.px, self.creds = px, creds

    def request(self, who, method="GET", path=PAGE, body=None):
        headers = dict(self.creds[who])
        if body is not None:
            headers["Content-Type"] = "application/json"
        return get(self.px, path, method=method, headers=headers, body=body)


def test_keys_tokens_and_basic_users_never_get_each_others_cached_answers(env):
    for auth, creds in _credentials(env):
        for cache, cc, own in (("true", "max-age=60", False),
                               ("{inference: true}", "max-age=60", False),
                               ("{authorized: true, inference: true}", "s-maxage=60", True)):
            o = _origin(env, cc=cc)
            m = Plain(_proxy(env, o, cache, auth), creds)
            _tenants_never_share(m, o, _page, PAGE, own_hits=own)
            _tenants_never_share(m, o, _completion, COMPLETIONS, own_hits=own)


def test_one_tenants_two_credentials_share_his_hits(env):
    # the scope is the identity the guard proved, not the credential's bytes: alice's two
    # keys (or a new token) find her copy
    keys = env.write("keys", "alice alice-key-0123456789abcdef\nalice alice-key2-0123456789abcde\n"
                             "bob bob-key-0123456789abcdefgh\n")
    o = _origin(env, cc="s-maxage=60")
    px = _proxy(env, o, "{authorized: true}", f"{{api_keys_file: {keys}}}")
    get(px, PAGE, headers={"X-API-Key": "alice-key-0123456789abcdef"})
    st, h, b = get(px, PAGE, headers={"X-API-Key": "alice-key2-0123456789abcde"})
    assert b == b"private page of alice" and is_hit(h), h
    st, h, b = get(px, PAGE, headers={"X-API-Key": "bob-key-0123456789abcdefgh"})
    assert b == b"private page of bob" and not is_hit(h), h


def test_route_without_auth_keys_a_credentialed_answer_by_its_credential(env):
    # no routes.auth: the origin reads Authorization itself; with authorized: true the
    # answer is stored for that credential only
    o = Origin(env)
    o.paths[PAGE] = lambda req: Reply(headers=[("Cache-Control", "s-maxage=60")],
                                      body=b"page for " + req.headers.get("authorization", "none").encode())
    px = env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                   + "routes:\n  - {match: {path_prefix: /}, pool: o, cache: {authorized: true}}\n",
                   workers=1)
    for who in ("alice", "alice", "bob", "bob"):
        st, h, b = get(px, PAGE, headers={"Authorization": "Bearer " + who})
        assert b == b"page for Bearer " + who.encode(), (who, b, h)
    assert o.count(PAGE) == 2
    st, h, b = get(px, PAGE)  # no credential: not theirs either
    assert b == b"page for none" and not is_hit(h), (b, h)


# --- the herd ----------------------------------------------------------------------------


def _in_flight(px):
    st, _, b = request(px.admin, "GET", "/debug/requests")
    assert st == 200, (st, b)
    return json.loads(b)["in_flight_count"]


def _herd_of_a_thousand(env, workers):
    _raise_nofile(4096)
    o = Origin(env)
    gate = threading.Event()
    body = bytes(i % 253 for i in range(20000))
    o.paths["/cold"] = lambda req: Reply(headers=[("Cache-Control", "max-age=600")], body=body,
                                         gate=gate)
    px = start(env, o, workers=workers)
    try:
        socks, got = _herd(px, "/cold", 1000, head_first=False)
        # the origin holds its answer until every request is in the proxy (and so on the one
        # fill, or its own)
        wait_until(lambda: _in_flight(px) == 1000, "all 1,000 requests in flight", 60)
    finally:
        gate.set()
    answers = _collect(socks, got)
    assert collections.Counter(st for st, _, _ in answers) == {200: 1000}
    assert all(b == body for _, _, b in answers)
    kinds = collections.Counter(cs(h) for _, h, _ in answers)
    assert o.count("/cold") == 1, (o.count("/cold"), kinds)
    assert kinds == {"accelnet; fwd=miss; stored": 1, "accelnet; fwd=miss; collapsed": 999}, kinds
    st, h, b = get(px, "/cold")
    assert b == body and is_hit(h) and o.count("/cold") == 1, h


def test_herd_of_a_thousand_close_requests_is_one_fetch_on_one_worker(env):
    _herd_of_a_thousand(env, 1)


def test_herd_of_a_thousand_close_requests_is_one_fetch_on_two_workers(env):
    _herd_of_a_thousand(env, 2)


def test_a_tenant_waiting_on_anothers_fill_gets_his_own_answer(env):
    # bob asks while alice's answer is being fetched: he waits on her fill (coalescing), and
    # when its head says it is hers only, he goes to the origin for his own
    o = Origin(env)
    gate = threading.Event()
    o.paths[PAGE] = lambda req: Reply(headers=[("Cache-Control", "s-maxage=60")],
                                      body=b"private page of " + _who(req).encode(), gate=gate)
    keys = env.write("keys", "alice alice-key-0123456789abcdef\nbob bob-key-0123456789abcdefgh\n")
    px = _proxy(env, o, "{authorized: true}", f"{{api_keys_file: {keys}}}")
    got = {}

    def ask(who, key):
        got[who] = get(px, PAGE, headers={"X-API-Key": key})

    try:
        alice = threading.Thread(target=ask, args=("alice", "alice-key-0123456789abcdef"))
        alice.start()
        wait_until(lambda: o.count(PAGE) == 1, "alice's fetch at the origin")
        bob = threading.Thread(target=ask, args=("bob", "bob-key-0123456789abcdefgh"))
        bob.start()
        wait_until(lambda: _in_flight(px) == 2, "bob's request in flight")
    finally:
        gate.set()
    alice.join()
    bob.join()
    assert got["alice"][2] == b"private page of alice", got["alice"]
    st, h, b = got["bob"]
    assert st == 200 and b == b"private page of bob", (st, b, h)
    assert o.count(PAGE) == 2
    for who, key in (("alice", "alice-key-0123456789abcdef"), ("bob", "bob-key-0123456789abcdefgh")):
        st, h, b = get(px, PAGE, headers={"X-API-Key": key})
        assert b == b"private page of " + who.encode(), (who, b, h)
