"""A hostile review of issue 26's forwarding (docs/forwarding.md): a rewrite may only send a
path in the normal form the route judged; where a route and its pool set the same field the
route's value alone is sent; the client's credentials never reach a pool holding a key, nor
may a route write the field that carries it."""

import json
import os
import subprocess

from harness import BIN, LenientBackend, request


def test_a_rewrite_that_makes_a_dot_segment_or_encoded_slash_is_never_sent(env):
    """'/$1' of '/p../admin' is '/../admin', which a backend resolves to '/admin': a path the
    proxy never judged. Answered 502 as any rewrite that makes no path; the backend sees none."""
    be = LenientBackend()
    env.on_cleanup.append(be.close)
    p = env.proxy(
        "pools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "routes:\n"
        "  - match: {path_prefix: /p}\n    pool: p\n"
        "    rewrite: {regex: {match: '^/p([^/]*)/(.*)$', replace: '/$1/$2'}}\n"
        "  - match: {path_prefix: /}\n    pool: p\n")
    st, _, data = request(p.port, "GET", "/pv1/models")
    assert st == 200 and json.loads(data)["target"] == "/v1/models", (st, data)
    n = len(be.seen)
    for path in ("/p../admin", "/p%2e%2E/admin", "/p./admin", "/p../"):
        st, _, data = request(p.port, "GET", path)
        assert st == 502 and b"rewrite" in data, (path, st, data)
    assert len(be.seen) == n, be.seen[n:]
    # a segment that only starts with dots is an ordinary name
    st, _, data = request(p.port, "GET", "/p..x/y")
    assert st == 200 and json.loads(data)["target"] == "/..x/y", (st, data)


def test_a_field_set_by_route_and_pool_is_sent_once_with_the_routes_value(env):
    be = LenientBackend()
    env.on_cleanup.append(be.close)
    p = env.proxy(
        "pools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "    request_headers: {set: {X-Team: pool, X-Only-Pool: p, X-Gone: pool}}\n"
        "    response_headers: {set: {X-Served: pool, Cache-Tag: pool}}\n"
        "routes:\n"
        "  - match: {path_prefix: /}\n    pool: p\n"
        "    request_headers: {set: {x_team: route}, remove: [X-Gone]}\n"
        "    response_headers: {set: {X-Served: route}}\n")
    st, h, data = request(p.port, "GET", "/x", headers={"X-Team": "client"})
    assert st == 200, data
    got = json.loads(data)["headers"]
    team = [v for k, v in got.items() if k.replace("_", "-") == "x-team"]
    assert team == [["route"]], got
    assert got["x-only-pool"] == ["p"] and "x-gone" not in got, got
    assert h["x-served"] == ["route"] and h["cache-tag"] == ["pool"], h


def test_a_pool_with_a_key_drops_the_clients_api_key_in_every_spelling(env):
    """Azure OpenAI's `api-key` is a credential field LiteLLM and others read beside (or before)
    Authorization: a client could have the backend take its own key in place of the proxy's.
    A pool holding a key drops it as it drops Authorization and X-API-Key, in any case and
    with '_' for '-'."""
    be = LenientBackend()
    env.on_cleanup.append(be.close)
    key = env.write("p.key", "pool-key-1\n")
    os.chmod(key, 0o600)
    p = env.proxy(
        "pools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        f"    api_key_file: {key}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
    st, _, data = request(p.port, "GET", "/v1/models", headers={
        "api-key": "client-key", "API_KEY": "client-key2", "x_api_key": "client-key3",
        "AUTHORIZATION": "Bearer client-key4"})
    assert st == 200, data
    got = json.loads(data)["headers"]
    assert "client-key" not in json.dumps(got), got
    assert got["authorization"] == ["Bearer pool-key-1"], got


def test_a_route_may_not_write_the_field_that_carries_its_pools_key(env):
    """A pool's request_headers may not write its key's field (refused since 092e149); a
    route's could, and the backend got two credentials (the route's first). Refused at
    load too, for the route's pool and for its spillover pool, with FILE:LINE:COL."""
    key = env.write("p.key", "pool-key-1\n")
    os.chmod(key, 0o600)
    base = ("listen: [127.0.0.1:1]\npools:\n"
            "  - name: plain\n    backends: [127.0.0.1:9101]\n"
            f"  - name: keyed\n    backends: [127.0.0.1:9102]\n    api_key_file: {key}\n"
            "    api_key_header: x-api-key\n"
            "routes:\n  - match: {path_prefix: /}\n")
    for pools, hdr in (("    pool: keyed\n", "add: {X_Api_Key: from-route}"),
                       ("    pool: plain\n    spillover: {pool: keyed}\n",
                        "set: {x-api-key: from-route}")):
        path = env.write("r.yaml", base + pools + f"    request_headers: {{{hdr}}}\n")
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True,
                           timeout=30)
        line = (base + pools).count("\n") + 1
        assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
        assert r.stderr.startswith(f"{path}:{line}:22: routes: request_headers may not write "
                                   "x-api-key, which carries the api key of pool 'keyed'"), \
            r.stderr
