"""Attacks on routes.auth found in review (issue 12): the identity field forged under a CGI
spelling, two credentials in one request, and a public JWKS document taken as an HS256
secret; each test plays the attack and asserts what the client or the backend sees."""

import base64
import json
import subprocess

from cryptography.hazmat.primitives.asymmetric import ec

from harness import BIN, echo_backend, free_port, pool_yaml, raw
from test_auth_jwt import htpasswd, jwk

KEY = "sk-acme-0123456789abcdef"


def _head(port, fields):
    return raw(port, b"GET /x HTTP/1.1\r\nHost: x\r\n" + b"".join(
        n + b": " + v + b"\r\n" for n, v in fields) + b"Connection: close\r\n\r\n")


def test_cgi_spelling_of_the_identity_field_is_dropped(env):
    """X_Tenant reaches a WSGI/PHP/Rack backend as HTTP_X_TENANT, the same variable as the
    proxy's X-Tenant: a client's copy under either spelling must not reach the backend; nor
    may an X_API_Key the guard never read (the backend would read it as HTTP_X_API_KEY)."""
    be = echo_backend(env)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n  - pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n")
    for name in (b"X_Tenant", b"x_tenant", b"X-TENANT", b"X_tenant"):
        data = _head(p.port, [(b"X-API-Key", KEY.encode()), (name, b"admin"),
                              (b"X_API_Key", b"sk-forged")])
        assert data.startswith(b"HTTP/1.1 200"), data
        assert b"X-Tenant: acme\r\n" in data, data
        assert b"admin" not in data and b"sk-forged" not in data, (name, data)


def test_two_credentials_in_one_request_are_refused(env):
    """The guard verifies one credential; a backend that gets the credentials too
    (pass_credentials) may read another. Two Authorization fields, two X-API-Key fields, or
    an X-API-Key beside a different Authorization: 401, never the backend."""
    be = echo_backend(env)
    keys = env.write("keys.txt", f"acme {KEY}\nbeta sk-beta-0123456789abcdef\n")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n  - pool: p\n"
                  f"    auth: {{api_keys_file: {keys}, pass_credentials: true}}\n")
    good = (b"Authorization", b"Bearer " + KEY.encode())
    ok = _head(p.port, [good])
    assert ok.startswith(b"HTTP/1.1 200") and b"X-Tenant: acme\r\n" in ok, ok
    # the same key both ways is one credential
    ok = _head(p.port, [good, (b"X-API-Key", KEY.encode())])
    assert ok.startswith(b"HTTP/1.1 200"), ok
    for fields in ([good, (b"Authorization", b"Bearer forged-admin-token")],
                   [good, (b"authorization", b"Basic YWRtaW46YWRtaW4=")],
                   [(b"X-API-Key", KEY.encode()), (b"X-API-Key", b"forged-admin-key")],
                   [good, (b"X-API-Key", b"forged-admin-key")],
                   [(b"X-API-Key", KEY.encode()), (b"Authorization", b"Bearer forged")]):
        data = _head(p.port, fields)
        assert data.startswith(b"HTTP/1.1 401"), (fields, data)
        assert b"forged" not in data and b"YWRt" not in data, data


def test_a_public_key_document_is_never_an_hs256_secret(env):
    """keys_file given a JWKS document (public: the issuer publishes it) must not turn it
    into an HMAC secret anyone could sign HS256 tokens with."""
    be_port = free_port()
    k = ec.generate_private_key(ec.SECP256R1())
    doc = json.dumps({"keys": [jwk(k, "k1")]})
    jwks = env.write("jwks.json", doc)
    conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port]) +
                     f"routes:\n  - pool: p\n    auth: {{jwt: {{keys_file: {jwks}}}}}\n")
    r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
    assert r.returncode == 2 and "jwks_file" in r.stderr, r.stderr


def test_identity_field_cannot_be_forged_through_a_route_without_auth(env):
    """A backend behind an auth route believes X-Tenant. A route without auth in front of
    the same backend must not let a client's X-Tenant (or X_Tenant, or another auth route's
    name) through; the auth route still sets its own."""
    be = echo_backend(env)
    keys = env.write("keys.txt", f"acme {KEY}\n")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                  "  - match: {path_prefix: /a}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "  - match: {path_prefix: /b}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}, identity_header: X-Org}}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n    tenant_header: X-Tenant\n")
    forged = [(b"X-Tenant", b"admin"), (b"X_Tenant", b"admin"), (b"x-org", b"admin")]
    data = raw(p.port, b"GET /open HTTP/1.1\r\nHost: x\r\n" + b"".join(
        n + b": " + v + b"\r\n" for n, v in forged) + b"Connection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200"), data
    assert b"admin" not in data, data
    data = raw(p.port, b"GET /a HTTP/1.1\r\nHost: x\r\nX-API-Key: " + KEY.encode() +
               b"\r\nX-Org: admin\r\nConnection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200") and b"X-Tenant: acme\r\n" in data, data
    assert b"admin" not in data, data
    data = raw(p.port, b"GET /b HTTP/1.1\r\nHost: x\r\nX-API-Key: " + KEY.encode() +
               b"\r\nX-Tenant: admin\r\nConnection: close\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200") and b"X-Org: acme\r\n" in data, data
    assert b"admin" not in data, data


def test_password_guessing_is_rate_limited_before_the_hash(env):
    """A wrong Basic password costs a full bcrypt; a guesser must meet the route's per_ip
    limit before the guard pays for its guesses: 429 once the address's allowance is
    spent, not 401 after 401."""
    be = echo_backend(env)
    users = htpasswd(env, "users", [("alice", "wonder land")])
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n  - pool: p\n"
                  f"    auth: {{basic: {{users_file: {users}}}}}\n"
                  "    rate_limit: {per_ip: 3/m, burst: 3}\n")
    guess = b"Basic " + base64.b64encode(b"alice:guess")
    codes = [_head(p.port, [(b"Authorization", guess)])[9:12] for _ in range(6)]
    assert codes == [b"401"] * 3 + [b"429"] * 3, codes
