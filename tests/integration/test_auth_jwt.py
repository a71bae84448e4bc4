"""routes.auth with JWT and HTTP Basic, several methods on one route, and OpenAI-shaped error
bodies on routes marked api: openai (issue 12). Tokens are made here (python3-cryptography
for RSA and EC keys, hmac for HS256); users files with htpasswd -B."""

import base64
import hashlib
import hmac
import json
import signal
import subprocess
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from harness import BIN, echo_backend, free_port, pool_yaml, request, wait_until

AUD, ISS = "accelnet-test", "https://issuer.test"


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _int_b64u(n, size=None):
    return b64u(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))


def token(key, alg, claims, kid=None, header=None):
    """A JWS compact token over <claims>, signed with <key> (an RSA or EC private key, or
    bytes for HS256)."""
    h = {"alg": alg, "typ": "JWT"}
    if kid:
        h["kid"] = kid
    h.update(header or {})
    signing = (b64u(json.dumps(h).encode()) + "." + b64u(json.dumps(claims).encode())).encode()
    if alg == "HS256":
        sig = hmac.new(key, signing, hashlib.sha256).digest()
    elif alg == "RS256":
        sig = key.sign(signing, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "ES256":
        r, s = decode_dss_signature(key.sign(signing, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        sig = b""
    return signing.decode() + "." + b64u(sig)


def jwk(key, kid):
    pub = key.public_key().public_numbers()
    if isinstance(key, rsa.RSAPrivateKey):
        return {"kty": "RSA", "kid": kid, "use": "sig", "n": _int_b64u(pub.n),
                "e": _int_b64u(pub.e)}
    return {"kty": "EC", "kid": kid, "crv": "P-256", "x": _int_b64u(pub.x, 32),
            "y": _int_b64u(pub.y, 32)}


def claims(sub, **kw):
    c = {"sub": sub, "aud": AUD, "iss": ISS, "exp": int(time.time()) + 300}
    c.update(kw)
    return c


def bearer(t):
    return {"Authorization": "Bearer " + t}


def htpasswd(env, name, users):
    path = env.dir + "/" + name
    for i, (user, pw) in enumerate(users):
        subprocess.run(["htpasswd", "-bB"] + ([] if i else ["-c"]) + [path, user, pw],
                       check=True, capture_output=True)
    return path


def basic(user, pw):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}


def openai_error(h, body, type_, code):
    assert h["content-type"] == ["application/json"], h
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["param"] is None, e
    assert (e["type"], e["code"]) == (type_, code), e
    assert e["message"], e
    return e


def test_jwt_tokens_let_in_who_belongs(env):
    be = echo_backend(env)
    rk = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ek = ec.generate_private_key(ec.SECP256R1())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = env.write("jwks.json", json.dumps({"keys": [jwk(rk, "r1"), jwk(ek, "e1")]}))
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                  "  - match: {path_prefix: /acme-only/}\n    pool: p\n    api: openai\n"
                  f"    auth: {{jwt: {{jwks_file: {jwks}, audience: {AUD}, issuer: '{ISS}'}},"
                  " tenants: [acme]}\n"
                  "  - match: {path_prefix: /v1/}\n    pool: p\n    api: openai\n"
                  f"    auth: {{jwt: {{jwks_file: {jwks}, audience: {AUD}, issuer: '{ISS}'}}}}\n")
    good_rs = token(rk, "RS256", claims("acme"), kid="r1")
    good_es = token(ek, "ES256", claims("beta"), kid="e1")
    for t, tenant in ((good_rs, b"acme"), (good_es, b"beta")):
        st, h, body = request(p.port, "GET", "/v1/models",
                              headers=dict(bearer(t), **{"X-Tenant": "admin"}))
        assert st == 200, (st, body)
        assert b"X-Tenant: " + tenant + b"\r\n" in body, body
        assert b"admin" not in body and t.encode()[:20] not in body  # no claim, no token
    pem = rk.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    now = int(time.time())
    refused = {
        "expired": token(rk, "RS256", claims("acme", exp=now - 120), kid="r1"),
        "not yet": token(rk, "RS256", claims("acme", nbf=now + 600), kid="r1"),
        "audience": token(rk, "RS256", claims("acme", aud="someone-else"), kid="r1"),
        "issuer": token(rk, "RS256", claims("acme", iss="https://evil.test"), kid="r1"),
        "other key": token(other, "RS256", claims("acme"), kid="r1"),
        "alg none": token(None, "none", claims("acme")),
        "confusion": token(pem, "HS256", claims("acme"), kid="r1"),
        "unknown kid": token(rk, "RS256", claims("acme"), kid="zz"),
        "truncated": good_rs[:-10],
        "oversized": token(rk, "RS256", claims("acme", pad="x" * 9000), kid="r1"),
    }
    for what, t in refused.items():
        st, h, body = request(p.port, "GET", "/v1/models", headers=bearer(t))
        assert st == 401, (what, st, body)
        assert h["www-authenticate"] == ['Bearer realm="accelnet"'], (what, h)
        openai_error(h, body, "invalid_request_error", "invalid_api_key")
    st, h, body = request(p.port, "GET", "/v1/models")
    assert st == 401
    openai_error(h, body, "invalid_request_error", "invalid_api_key")
    # a token of a tenant the route does not admit: 403
    st, h, body = request(p.port, "GET", "/acme-only/x", headers=bearer(good_es))
    assert st == 403, (st, body)
    openai_error(h, body, "permission_error", None)
    assert request(p.port, "GET", "/acme-only/x", headers=bearer(good_rs))[0] == 200


def test_basic_and_several_methods_on_one_route(env):
    be = echo_backend(env)
    users = htpasswd(env, "users", [("alice", "wonder land"), ("bob", "hunter2")])
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    secret = b"an HS256 secret of at least 32 bytes, for the test"
    sec = env.write("hs.key", secret.decode() + "\n")
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + "routes:\n"
                  "  - match: {path_prefix: /basic/}\n    pool: p\n"
                  f"    auth: {{basic: {{users_file: {users}}}}}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}, basic: {{users_file: {users}}},"
                  f" jwt: {{keys_file: {sec}}}}}\n")
    hs = token(secret, "HS256", {"sub": "carol", "exp": int(time.time()) + 60})
    for headers, tenant in ((basic("alice", "wonder land"), b"alice"),
                            (basic("bob", "hunter2"), b"bob"),
                            (basic("bob", "hunter2"), b"bob"),  # again: the remembered digest
                            ({"X-API-Key": "sk-acme-0123456789abcdef"}, b"acme"),
                            (bearer("sk-acme-0123456789abcdef"), b"acme"),
                            (bearer(hs), b"carol")):
        st, h, body = request(p.port, "GET", "/x", headers=headers)
        assert st == 200, (headers, st, body)
        assert b"X-Tenant: " + tenant + b"\r\n" in body, body
        assert b"Authorization" not in body, body
    for headers in (basic("alice", "wonder lan"), basic("mallory", "hunter2"),
                    {"Authorization": "Basic !!!"}, {}, bearer("sk-wrong-0123456789abcdef"),
                    bearer(hs[:-3] + "AAA")):
        st, h, body = request(p.port, "GET", "/x", headers=headers)
        assert st == 401, (headers, st)
        assert sorted(h["www-authenticate"]) == [
            'Basic realm="accelnet", charset="UTF-8"', 'Bearer realm="accelnet"'], h
        assert h["content-type"] == ["text/plain"]
    # a Basic-only route challenges with Basic alone, and takes no bearer token
    st, h, _ = request(p.port, "GET", "/basic/x", headers=bearer("sk-acme-0123456789abcdef"))
    assert st == 401 and h["www-authenticate"] == ['Basic realm="accelnet", charset="UTF-8"'], h
    st, _, body = request(p.port, "GET", "/basic/x", headers=basic("alice", "wonder land"))
    assert st == 200 and b"X-Tenant: alice\r\n" in body


def test_openai_error_bodies(env):
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    dead = free_port()
    be = echo_backend(env)
    p = env.proxy("pools:\n" + pool_yaml("dead", [dead]) + pool_yaml("p", [be.port]) +
                  "routes:\n"
                  "  - match: {path_prefix: /v1/dead/}\n    pool: dead\n    api: openai\n"
                  "  - match: {path_prefix: /v1/}\n    pool: p\n    api: openai\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "    rate_limit: {per_tenant: 60/m, burst: 1}\n"
                  "  - match: {path_prefix: /plain/}\n    pool: dead\n",
                  extra="limits: {max_body_bytes: 1000}\n")
    acme = {"X-API-Key": "sk-acme-0123456789abcdef"}
    st, h, body = request(p.port, "GET", "/v1/dead/x")
    assert st in (502, 503), (st, body)
    openai_error(h, body, "server_error", "service_unavailable" if st == 503 else None)
    st, h, body = request(p.port, "GET", "/v1/x", headers={"X-API-Key": "sk-no-0123456789abcdef"})
    assert st == 401
    openai_error(h, body, "invalid_request_error", "invalid_api_key")
    assert h["www-authenticate"] == ['Bearer realm="accelnet"']
    assert request(p.port, "GET", "/v1/x", headers=acme)[0] == 200
    st, h, body = request(p.port, "GET", "/v1/x", headers=acme)
    assert st == 429, st
    openai_error(h, body, "requests", "rate_limit_exceeded")
    assert h["retry-after"]
    st, h, body = request(p.port, "POST", "/v1/x", body=b"x" * 2000, headers=acme)
    assert st == 413, st
    openai_error(h, body, "invalid_request_error", None)
    # other routes keep the text bodies; no route: 404 as text
    st, h, body = request(p.port, "GET", "/plain/x")
    assert st in (502, 503) and h["content-type"] == ["text/plain"], (st, h)
    assert body.startswith(b"%d " % st)


def test_sighup_reloads_jwks_and_users(env):
    be = echo_backend(env)
    k1 = ec.generate_private_key(ec.SECP256R1())
    k2 = ec.generate_private_key(ec.SECP256R1())
    jwks = env.write("jwks.json", json.dumps({"keys": [jwk(k1, "k1")]}))
    users = htpasswd(env, "users", [("alice", "first-pass")])
    port = free_port()
    conf = env.write("p.yaml", f"workers: 2\nlisten: [127.0.0.1:{port}]\npools:\n" +
                     pool_yaml("p", [be.port]) + "routes:\n  - pool: p\n"
                     f"    auth: {{jwt: {{jwks_file: {jwks}}}, basic: {{users_file: {users}}}}}\n")
    p = env.start([BIN, "proxy", "-c", conf], "proxy", wait_port=port)
    t1 = token(k1, "ES256", {"sub": "one", "exp": int(time.time()) + 600}, kid="k1")
    t2 = token(k2, "ES256", {"sub": "two", "exp": int(time.time()) + 600}, kid="k2")

    def st(headers):
        return request(port, "GET", "/", headers=headers)[0]

    assert (st(bearer(t1)), st(bearer(t2)), st(basic("alice", "first-pass"))) == (200, 401, 200)
    # k2 in, k1 out; alice's password changed
    env.write("jwks.json", json.dumps({"keys": [jwk(k2, "k2")]}))
    htpasswd(env, "users", [("alice", "second-pass")])
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: st(bearer(t2)) == 200, "the new key")
    assert st(bearer(t1)) == 401
    assert st(basic("alice", "first-pass")) == 401  # the remembered password is forgotten
    assert st(basic("alice", "second-pass")) == 200
    # a broken JWKS file, then a weak users file: nothing changes, the log says why
    env.write("jwks.json", '{"keys": [')
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "jwks.json:1:" in env.log(p), "the reload's error")
    env.write("jwks.json", json.dumps({"keys": [jwk(k1, "k1")]}))
    env.write("users", "alice:$apr1$abc$abcdefghijklmnopqrstuv\n")
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "users:1: an MD5 hash" in env.log(p), "the second reload's error")
    assert (st(bearer(t2)), st(bearer(t1)), st(basic("alice", "second-pass"))) == (200, 401, 200)
    assert "second-pass" not in env.log(p)


def test_credentials_never_reach_the_log(env):
    be = echo_backend(env)
    secret = "an HS256 secret of at least 32 bytes, for the test"
    sec = env.write("hs.key", secret)
    users = htpasswd(env, "users", [("alice", "s3cret-pw")])
    port = free_port()
    conf = env.write("p.yaml", f"workers: 1\nlisten: [127.0.0.1:{port}]\npools:\n" +
                     pool_yaml("p", [be.port]) + "routes:\n  - pool: p\n"
                     f"    auth: {{jwt: {{keys_file: {sec}}}, basic: {{users_file: {users}}}}}\n")
    p = env.start([BIN, "proxy", "-c", conf, "--log-level", "debug"], "proxy", wait_port=port)
    good = token(secret.encode(), "HS256", {"sub": "x", "exp": int(time.time()) + 60})
    bad = token(b"another secret of 32 bytes or more....", "HS256", {"sub": "x", "exp": 1})
    for h in (bearer(good), bearer(bad), basic("alice", "s3cret-pw"), basic("alice", "wr0ng-pw")):
        request(port, "GET", "/", headers=h)
    env.stop(p)
    log = env.log(p)
    for s in (good.split(".")[2], bad.split(".")[2], "s3cret-pw", "wr0ng-pw",
              basic("alice", "s3cret-pw")["Authorization"][6:], secret):
        assert s not in log, s
    assert "401" in log


def test_bad_auth_files_are_refused_with_their_place(env):
    be_port = free_port()
    weak = env.write("users", "alice:$2y$05$PeDX32ziOtreQzxoETytQu7.MQOHdKmnw6poSDhZ8LV7FCnlLlzWG\n"
                     "bob:plaintext\n")
    short = env.write("short.key", "too short\n")
    cases = [
        (f"basic: {{users_file: {weak}}}", f"{weak}:2: expected a bcrypt"),
        (f"jwt: {{keys_file: {short}}}", "32 to 512 bytes"),
        (f"jwt: {{keys_file: {short}, jwks_file: {short}}}", "give one of keys_file"),
        (f"jwt: {{keys_file: {short}, algorithms: [none]}}", "never none"),
        (f"jwt: {{jwks_file: {short}}}", "short.key:1:"),
        ("basic: {users_file: /nonexistent/users}", "/nonexistent/users"),
    ]
    for auth, want in cases:
        conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port]) +
                         f"routes:\n  - pool: p\n    auth: {{{auth}}}\n")
        r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert r.returncode == 2 and want in r.stderr, (auth, r.stderr)
        assert "too short" not in r.stderr and "plaintext" not in r.stderr  # no secret shown
    conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port]) +
                     "routes:\n  - pool: p\n    api: anthropic\n")
    r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
    assert r.returncode == 2 and f"{conf}:" in r.stderr and "openai or none" in r.stderr
