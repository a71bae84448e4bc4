"""routes.auth with API keys (issue 12): who gets in, what the backend hears, what is never
written down."""

import subprocess

from harness import BIN, echo_backend, free_port, pool_yaml, request

KEYS = ("# tenants and their keys\n"
        "acme sk-acme-0123456789abcdef\n"
        # sha256("sk-beta-0123456789abcdef"), stored hashed
        "beta sha256:fa61dcfef54660e1d703ff4408b68c3bd558da267cab3e43b819de66a28487b7\n")


def _auth_proxy(env, be):
    keys = env.write("keys.txt", KEYS)
    return env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                     "routes:\n"
                     f"  - match: {{path_prefix: /acme-only/}}\n    pool: p\n"
                     f"    auth: {{api_keys_file: {keys}, tenants: [acme]}}\n"
                     f"  - match: {{path_prefix: /v1/}}\n    pool: p\n"
                     f"    auth: {{api_keys_file: {keys}}}\n"
                     f"  - match: {{path_prefix: /}}\n    pool: p\n",
                     extra="", workers=2)


def test_api_keys_let_in_only_who_belongs(env):
    be = echo_backend(env)
    p = _auth_proxy(env, be)
    # no key, a wrong key, a malformed header: 401 with a Bearer challenge
    for headers in ({}, {"Authorization": "Bearer sk-nobody-0123456789ab"},
                    {"X-API-Key": "sk-acme-0123456789abcdeX"}, {"Authorization": "Basic YTpi"}):
        st, h, body = request(p.port, "GET", "/v1/models", headers=headers)
        assert st == 401, (headers, st, body)
        assert h["www-authenticate"][0].startswith("Bearer"), h
    # the right key, either way of presenting it; the stored-hashed one too
    for headers, tenant in (({"Authorization": "Bearer sk-acme-0123456789abcdef"}, b"acme"),
                            ({"X-API-Key": "sk-acme-0123456789abcdef"}, b"acme"),
                            ({"Authorization": "bearer sk-beta-0123456789abcdef"}, b"beta")):
        st, h, body = request(p.port, "GET", "/v1/models",
                              headers=dict(headers, **{"X-Tenant": "admin"}))
        assert st == 200, (headers, st, body)
        assert b"X-Tenant: " + tenant + b"\r\n" in body, body  # who the proxy authenticated
        assert b"admin" not in body  # the client's own claim is dropped
        assert b"sk-" not in body  # the credential does not travel on
    # a known tenant the route does not admit: 403
    st, _, _ = request(p.port, "GET", "/acme-only/x",
                       headers={"Authorization": "Bearer sk-beta-0123456789abcdef"})
    assert st == 403
    st, _, _ = request(p.port, "GET", "/acme-only/x",
                       headers={"Authorization": "Bearer sk-acme-0123456789abcdef"})
    assert st == 200
    # a route without auth is open, and passes Authorization on untouched
    st, _, body = request(p.port, "GET", "/open", headers={"Authorization": "Bearer xyz"})
    assert st == 200 and b"Authorization: Bearer xyz\r\n" in body


def test_credentials_never_reach_the_log(env):
    be = echo_backend(env)
    keys = env.write("keys.txt", KEYS)
    port = free_port()
    conf = env.write("p.yaml", f"workers: 1\nlisten: [127.0.0.1:{port}]\npools:\n" +
                     pool_yaml("p", [be.port]) +
                     f"routes:\n  - pool: p\n    auth: {{api_keys_file: {keys}}}\n")
    p = env.start([BIN, "proxy", "-c", conf, "--log-level", "debug"], "proxy", wait_port=port)
    for key in ("sk-acme-0123456789abcdef", "sk-wrong-0123456789abcdef"):
        request(port, "GET", "/", headers={"Authorization": "Bearer " + key})
        request(port, "GET", "/", headers={"X-API-Key": key})
    env.stop(p)
    log = env.log(p)
    assert "sk-" not in log, log[-2000:]
    assert "401" in log  # the refusals are logged, without what was presented


def test_bad_keys_files_are_refused_with_their_place(env):
    be_port = free_port()
    cases = [
        ("acme\n", "keys.txt:1: expected 'TENANT KEY'"),
        ("# ok\nacme short\n", "keys.txt:2: the key is shorter than 16 bytes"),
        ("acme sha256:1234\n", "keys.txt:1: a sha256: key needs exactly 64 hex digits"),
        ("", "no keys"),
    ]
    for text, want in cases:
        keys = env.write("keys.txt", text)
        conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port])
                         + f"routes:\n  - pool: p\n    auth: {{api_keys_file: {keys}}}\n")
        r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert r.returncode == 2 and want in r.stderr, (text, r.stderr)
        assert "short" not in text or "acme short" not in r.stderr  # no key in the message
    conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port]) +
                     "routes:\n  - pool: p\n    auth: {api_keys_file: /nonexistent/keys}\n")
    r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
    assert r.returncode == 2 and f"{conf}:" in r.stderr and "/nonexistent/keys" in r.stderr
    conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port]) +
                     "routes:\n  - pool: p\n    auth: {api_keys_file: /etc/hostname, jwt: {}}\n")
    r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
    assert r.returncode == 2 and f"{conf}:9:" in r.stderr and "give one of keys_file" in r.stderr, \
        r.stderr


def test_rate_limits_per_address_and_per_tenant(env):
    from harness import wait_until
    be = echo_backend(env)
    keys = env.write("keys.txt", KEYS)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n"
                  "  - match: {path_prefix: /ip/}\n    pool: p\n"
                  "    rate_limit: {per_ip: 2/s, burst: 3}\n"
                  "  - match: {path_prefix: /t/}\n    pool: p\n"
                  f"    auth: {{api_keys_file: {keys}}}\n"
                  "    rate_limit: {per_tenant: 60/m, burst: 2}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n")
    # per address: a burst of 3, then 429 with Retry-After; other routes are not limited
    got = [request(p.port, "GET", "/ip/x") for _ in range(4)]
    assert [g[0] for g in got] == [200, 200, 200, 429], [g[0] for g in got]
    assert got[3][1]["retry-after"] == ["1"], got[3][1]
    assert request(p.port, "GET", "/open")[0] == 200
    # the bucket refills at the rate: a request goes through again once its turn comes
    wait_until(lambda: request(p.port, "GET", "/ip/x")[0] == 200, "the per-address refill")
    # per tenant: acme spends its burst; beta, from the same address, still gets in
    acme = {"Authorization": "Bearer sk-acme-0123456789abcdef"}
    beta = {"X-API-Key": "sk-beta-0123456789abcdef"}
    assert [request(p.port, "GET", "/t/x", headers=acme)[0] for _ in range(3)] == [200, 200, 429]
    assert request(p.port, "GET", "/t/x", headers=beta)[0] == 200
    # a refused key is refused before the limits: 401, not 429
    assert request(p.port, "GET", "/t/x", headers={"X-API-Key": "sk-no-0123456789abcdef"})[0] == 401


def test_bad_rate_limits_are_refused(env):
    be_port = free_port()
    for rl, want in (("{per_ip: 100}", "a rate such as 100/s"), ("{per_ip: 0/s}", "a rate"),
                     ("{burst: 5}", "give per_ip or per_tenant"),
                     ("{per_ip: 1/s, token_burst: 100}", "token_burst needs tokens_per_minute"),
                     ("{per_route: 5/x}", "a rate such as"), ("{concurrency: 0}", "expected 1 to 1000000")):
        conf = env.write("p.yaml", "listen: [127.0.0.1:1]\npools:\n" + pool_yaml("p", [be_port])
                         + f"routes:\n  - pool: p\n    rate_limit: {rl}\n")
        r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert r.returncode == 2 and want in r.stderr and f"{conf}:" in r.stderr, (rl, r.stderr)
