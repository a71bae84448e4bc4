"""Rewriting what is forwarded (issue 26, docs/forwarding.md): routes[].rewrite (strip_prefix,
prefix, regex, host), request_headers and response_headers on routes and pools with
%{...} variables, the upstream credential of a pool or backend (api_key_file), and what the
access log shows of them."""

import json
import os
import signal
import subprocess

from harness import BIN, LenientBackend, free_port, request, wait_until


class KeyedBackend(LenientBackend):
    """A LenientBackend that requires its own key, as vLLM's --api-key does: a request without
    it (or with another) is answered 401, as vLLM answers; with it, as LenientBackend."""

    def __init__(self, key, header="authorization", bearer=True):
        self.key = key
        self.header = header
        self.bearer = bearer
        super().__init__()

    def _answer(self, n, req):
        head = req.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
        got = [line.partition(":")[2].strip() for line in head[1:]
               if line.partition(":")[0].strip().lower() == self.header]
        want = ("Bearer " + self.key) if self.bearer else self.key
        if got != [want]:
            body = b'{"error": "Unauthorized"}'
            self.refused = getattr(self, "refused", 0) + 1
            return (b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body), False)
        return super()._answer(n, req)


def keyed_backend(env, key, **opts):
    be = KeyedBackend(key, **opts)
    env.on_cleanup.append(be.close)
    return be


def key_file(env, name, key, mode=0o600):
    path = env.write(name, key + "\n")
    os.chmod(path, mode)
    return path


def seen(body):
    return json.loads(body)


def check(env, text):
    path = env.write("check.yaml", text)
    return subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True,
                          timeout=30), path


POST_JSON = {"Content-Type": "application/json"}


def test_two_vllm_backends_each_with_its_own_key_under_a_and_b(env):
    """The must-show: /a/ and /b/ mounted onto two vLLM-like backends' /v1/, each requiring
    its own --api-key; CORS headers added to the responses; the client's key never reaches
    a backend. A backend answers 401 to any other key, so keys that crossed would fail."""
    a = keyed_backend(env, "key-of-a-0123")
    b = keyed_backend(env, "key-of-b-4567")
    ka = key_file(env, "a.key", "key-of-a-0123")
    kb = key_file(env, "b.key", "key-of-b-4567")
    p = env.proxy(
        "pools:\n"
        f"  - name: a\n    backends: [{{address: 127.0.0.1:{a.port}}}]\n"
        f"    api_key_file: {ka}\n"
        f"  - name: b\n    backends: [{{address: 127.0.0.1:{b.port}}}]\n"
        f"    api_key_file: {kb}\n"
        "routes:\n"
        "  - name: gpu-a\n    match: {path_prefix: /a/}\n    pool: a\n"
        "    rewrite: {strip_prefix: /a, prefix: /v1}\n"
        "    response_headers:\n"
        "      set: {Access-Control-Allow-Origin: '*', Access-Control-Expose-Headers: X-Request-Id}\n"
        "  - name: gpu-b\n    match: {path_prefix: /b/}\n    pool: b\n"
        "    rewrite: {strip_prefix: /b, prefix: /v1}\n"
        "    response_headers:\n"
        "      set: {Access-Control-Allow-Origin: '*', Access-Control-Expose-Headers: X-Request-Id}\n")
    client = {"Authorization": "Bearer client-secret-key", "X-API-Key": "client-secret-key",
              "Proxy-Authorization": "Basic Y2xpZW50OnNlY3JldA==", **POST_JSON}
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 3})
    st, h, data = request(p.port, "POST", "/a/completions?x=1", body=body, headers=client)
    assert st == 200, data
    sa = seen(data)
    assert sa["target"] == "/v1/completions?x=1", sa
    assert sa["headers"]["authorization"] == ["Bearer key-of-a-0123"], sa["headers"]
    assert "x-api-key" not in sa["headers"] and "proxy-authorization" not in sa["headers"]
    assert h["access-control-allow-origin"] == ["*"], h
    assert h["access-control-expose-headers"] == ["X-Request-Id"], h
    st, h, data = request(p.port, "POST", "/b/chat/completions", body=body, headers=client)
    assert st == 200, data
    sb = seen(data)
    assert sb["target"] == "/v1/chat/completions", sb
    assert sb["headers"]["authorization"] == ["Bearer key-of-b-4567"], sb["headers"]
    assert h["access-control-allow-origin"] == ["*"], h
    # a GET too (vLLM's /v1/models), and no request ever reached a backend without its key
    st, _, data = request(p.port, "GET", "/b/models", headers=client)
    assert st == 200 and seen(data)["target"] == "/v1/models", data
    assert not getattr(a, "refused", 0) and not getattr(b, "refused", 0)
    assert len(a.seen) == 1 and len(b.seen) == 2
    for s in a.seen + b.seen:
        assert "client-secret-key" not in json.dumps(s["headers"]), s


def test_each_rewrite_form_on_the_normal_path_with_the_query_kept(env):
    be = LenientBackend()
    env.on_cleanup.append(be.close)
    p = env.proxy(
        "pools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "routes:\n"
        "  - match: {path_prefix: /s/}\n    pool: p\n    rewrite: {strip_prefix: /s}\n"
        "  - match: {path_prefix: /p/}\n    pool: p\n    rewrite: {prefix: /v1}\n"
        "  - match: {path_prefix: /r/}\n    pool: p\n"
        "    rewrite: {regex: {match: '^/r/(\\w+)/(.*)$', replace: '/v1/$2/$1$$'}}\n"
        "  - match: {path_prefix: /both/}\n    pool: p\n"
        "    rewrite: {strip_prefix: /both/, prefix: /v1/, regex: {match: 'old', replace: new}}\n"
        "  - match: {path_prefix: /h/}\n    pool: p\n    rewrite: {host: 'internal.example:8000'}\n"
        "  - match: {path_prefix: /bad/}\n    pool: p\n"
        "    rewrite: {regex: {match: '^/bad/(.*)$', replace: 'x$1'}}\n"
        "  - match: {path_prefix: /}\n    pool: p\n")

    def target(path, headers=None):
        st, _, data = request(p.port, "GET", path, headers=headers)
        assert st == 200, (path, st, data)
        return seen(data)

    assert target("/s/x/y?q=1&r=/s/")["target"] == "/x/y?q=1&r=/s/"
    assert target("/s/")["target"] == "/"
    assert target("/p/x")["target"] == "/v1/p/x"
    assert target("/r/abc/d/e?z=%41")["target"] == "/v1/d/e/abc$?z=%41"
    assert target("/both/old/x")["target"] == "/v1/new/x"
    # the normal form first (issue 24): what is rewritten is what the route matched
    assert target("/x/../s//%61b")["target"] == "/ab"
    s = target("/h/x", headers={"Host": "public.example"})
    assert s["headers"]["host"] == ["internal.example:8000"] and s["target"] == "/h/x", s
    # no rewrite: as it came
    assert target("/other?a=b")["target"] == "/other?a=b"
    # a rewrite that makes no path: a clear 502, never a bad request line upstream
    n = len(be.seen)
    st, _, data = request(p.port, "GET", "/bad/y")
    assert st == 502 and b"rewrite" in data, (st, data)
    assert len(be.seen) == n
    wait_until(lambda: "rewrite of '/bad/y' makes no path" in env.log(p),
               "the rewrite's log line")


def _header_backend(env):
    """A backend that answers with the request it read as its body, and with fields of its own
    (X-Internal, Server, Access-Control-Allow-Origin) the response_headers edit."""
    from harness import ScriptedBackend

    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nX-Internal: secret\r\nX_Internal: too\r\nServer: upstream\r\n"
                b"Access-Control-Allow-Origin: https://evil.example\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(req), req), False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    return be


def _fields(raw_head):
    out = {}
    for line in raw_head.decode("latin-1").split("\r\n\r\n")[0].split("\r\n")[1:]:
        k, _, v = line.partition(":")
        out.setdefault(k.strip().lower(), []).append(v.strip())
    return out


def test_request_and_response_headers_add_set_remove_with_variables(env):
    be = _header_backend(env)
    p = env.proxy(
        "pools:\n"
        f"  - name: gpu\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "    request_headers: {set: {X-Pool: 'pool %{pool}'}}\n"
        "    response_headers: {add: {X-Pool-Seen: '%{pool}'}}\n"
        "routes:\n"
        "  - name: chat\n    match: {path_prefix: /}\n    pool: gpu\n"
        "    request_headers:\n"
        "      add: {X-Added: 'from %{client_addr} rid %{request_id} route %{route} 100%%'}\n"
        "      set: {X-Set: fixed}\n"
        "      remove: [X-Drop, Cookie]\n"
        "    response_headers:\n"
        "      add: {X-Served-By: '%{backend}'}\n"
        "      set: {Server: accelnet, Access-Control-Allow-Origin: '*'}\n"
        "      remove: [X-Internal]\n")
    st, h, data = request(p.port, "GET", "/x", headers={
        "X-Set": "client", "X-Drop": "1", "X_Drop": "2", "Cookie": "a=b",
        "X-Added": "client-value", "X-Pool": "client", "X-Keep": "k"})
    assert st == 200, data
    f = _fields(data)
    rid = h["x-request-id"][0]
    assert f["x-added"] == ["client-value", f"from 127.0.0.1 rid {rid} route chat 100%"], f
    assert f["x-set"] == ["fixed"] and f["x-pool"] == ["pool gpu"], f
    assert "x-drop" not in f and "x_drop" not in f and "cookie" not in f, f
    assert f["x-keep"] == ["k"], f
    assert h["server"] == ["accelnet"] and h["access-control-allow-origin"] == ["*"], h
    assert "x-internal" not in h and "x_internal" not in h, h
    assert h["x-served-by"] == [f"127.0.0.1:{be.port}"] and h["x-pool-seen"] == ["gpu"], h


def _check_fails(env, body, where, text):
    r, path = check(env, "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                         "    backends: [127.0.0.1:9101]\n" + body)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith(f"{path}:{where}: "), r.stderr
    assert text in r.stderr, r.stderr


def test_forbidden_and_bad_values_refused_by_check_with_their_place(env):
    route = "routes:\n  - match: {path_prefix: /}\n    pool: a\n"
    _check_fails(env, route + "    request_headers: {set: {Connection: close}}\n", "8:29",
                 "'Connection' may not be added, set or removed: a hop-by-hop")
    _check_fails(env, route + "    response_headers:\n      remove: [Transfer-Encoding]\n",
                 "9:16", "'Transfer-Encoding' may not be")
    _check_fails(env, route + "    request_headers: {add: {Content_Length: '1'}}\n", "8:29",
                 "'Content_Length' may not be")
    _check_fails(env, route + "    request_headers: {set: {Host: x}}\n", "8:29",
                 "Host is set by routes[].rewrite.host")
    _check_fails(env, route + "    request_headers: {remove: [Proxy-Authorization]}\n", "8:32",
                 "(Proxy-*)")
    _check_fails(env, route + "    request_headers: {set: {X-Request-Id: x}}\n", "8:29",
                 "a field the proxy writes itself")
    _check_fails(env, route + "    request_headers: {set: {X-A: \"a\\r\\nX-B: b\"}}\n", "8:34",
                 "no control byte")
    _check_fails(env, route + "    request_headers: {set: {X-A: '%{nope}'}}\n", "8:34",
                 "'%' starts a variable")
    _check_fails(env, route + "    request_headers: {set: {X-A: '%{backend}'}}\n", "8:34",
                 "%{backend} is known only in response_headers")
    _check_fails(env, route + "    rewrite: {regex: {match: '(', replace: /}}\n", "8:30",
                 "regex.match: missing closing parenthesis")
    _check_fails(env, route + "    rewrite: {regex: {match: '^/(a)', replace: /$2}}\n", "8:48",
                 "names $2 but match has 1 group")
    _check_fails(env, route + "    rewrite: {prefix: 'v1'}\n", "8:23",
                 "prefix must be a path starting with '/'")
    _check_fails(env, route + "    rewrite: {prefix: '/v1?x=1'}\n", "8:23",
                 "prefix must be a path")
    kf = key_file(env, "k", "key")
    r, path = check(env, "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                         "    backends: [127.0.0.1:9101]\n"
                         f"    api_key_file: {kf}\n"
                         "    request_headers: {set: {Authorization: 'Bearer other'}}\n" + route)
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:6:22: "), r.stderr
    assert "may not write Authorization, which carries the pool's api key" in r.stderr
    r, _ = check(env, "listen: [127.0.0.1:8080]\npools:\n  - name: a\n"
                      "    backends: [127.0.0.1:9101]\n"
                      "    api_key_file: /nonexistent/key\n" + route)
    assert r.returncode == 2 and ":5:19: api_key_file /nonexistent/key:" in r.stderr, r.stderr


def test_key_file_read_again_on_sighup(env):
    be = keyed_backend(env, "first-key")
    kf = key_file(env, "pool.key", "first-key")
    p = env.proxy(
        "pools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        f"    api_key_file: {kf}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
    assert request(p.port, "GET", "/v1/models")[0] == 200
    be.key = "second-key"  # the backend restarted with another --api-key
    assert request(p.port, "GET", "/v1/models")[0] == 401  # the backend's own answer
    with open(kf, "w") as f:
        f.write("second-key\n")
    p.send_signal(signal.SIGHUP)
    # every worker on the new generation: the old one released
    wait_until(lambda: "generation 0: its last request has ended; released" in env.log(p),
               "the reload")
    assert request(p.port, "GET", "/v1/models")[0] == 200
    assert seen(request(p.port, "GET", "/v1/models")[2])["headers"]["authorization"] == \
        ["Bearer second-key"]
    # a key file gone: the reload is refused by its name, and the key in use stays
    os.unlink(kf)
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: f"api_key_file {kf}: No such file or directory" in env.log(p),
               "the refused reload")
    assert request(p.port, "GET", "/v1/models")[0] == 200


def test_key_never_in_logs_status_or_api(env):
    key = "sk-upstream-SECRET-0123456789"
    be = keyed_backend(env, key)
    kf = key_file(env, "pool.key", key, mode=0o644)
    log = os.path.join(env.dir, "access.log")
    p = env.proxy(
        "pools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        f"    api_key_file: {kf}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n",
        extra=f"access_log: {{path: {log}, format: json}}\n")
    for path in ("/v1/models", "/v1/completions?k=1"):
        assert request(p.port, "GET", path, headers={"Authorization": "Bearer client"})[0] == 200
    p.send_signal(signal.SIGHUP)  # a reload reads it again, and says nothing of it either
    wait_until(lambda: "loaded (configuration generation 1)" in env.log(p), "the reload")
    wait_until(lambda: os.path.exists(log) and len(open(log).read().splitlines()) >= 2,
               "two access log lines")
    texts = [open(log).read(), env.log(p)]
    for path in ("/status", "/api/backends", "/api/pools", "/metrics", "/dashboard.json"):
        texts.append(request(p.admin, "GET", path)[2].decode("latin-1"))
    for t in texts:
        assert key not in t and "SECRET" not in t, t[:2000]
    # the key file can be read by others: said once, by its name
    assert f"api_key_file {kf} can be read by other users" in texts[1], texts[1]


def test_backend_key_and_header_of_its_own_through_a_retry(env):
    """Two backends of one pool, each with its own key under x-api-key: the pool's key for
    one, a backend's own for the other. The first backend is down: the retry goes to the
    second with the second's key, never the first's (the key is the attempt's, not the
    head's), and the target the route rewrote once."""
    dead = free_port()
    b = keyed_backend(env, "key-two", header="x-api-key", bearer=False)
    k1 = key_file(env, "one.key", "key-one")
    k2 = key_file(env, "two.key", "key-two")
    p = env.proxy(
        "pools:\n"
        "  - name: p\n    balance: round-robin\n"
        f"    api_key_file: {k1}\n    api_key_header: x-api-key\n"
        "    backends:\n"
        f"      - {{address: 127.0.0.1:{dead}}}\n"
        f"      - {{address: 127.0.0.1:{b.port}, api_key_file: {k2}}}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n    rewrite: {prefix: /v1}\n")
    for _ in range(4):
        st, _, data = request(p.port, "GET", "/models",
                              headers={"X-API-Key": "client-key", "X_API_Key": "client-key"})
        assert st == 200, data
        assert seen(data)["target"] == "/v1/models", data  # rewritten once, retry or not
        assert seen(data)["headers"]["x-api-key"] == ["key-two"], data
        assert "x_api_key" not in seen(data)["headers"]
    assert not getattr(b, "refused", 0)


def test_access_log_names_route_model_tokens_and_both_targets(env):
    be = lenient_backend_for(env)
    log = os.path.join(env.dir, "access.log")
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    p = env.proxy(
        "pools:\n"
        f"  - name: gpu\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "routes:\n"
        "  - name: gpu-a\n    match: {path_prefix: /a/}\n    pool: gpu\n    api: openai\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "    rewrite: {strip_prefix: /a, prefix: /v1}\n",
        extra=f"access_log: {{path: {log}, format: json}}\n")
    body = json.dumps({"model": "llama-3", "prompt": "hi", "max_tokens": 5})
    st, h, data = request(p.port, "POST", "/a/completions?x=1", body=body,
                          headers={"Authorization": "Bearer sk-acme-0123456789abcdef",
                                   **POST_JSON})
    assert st == 200, data
    wait_until(lambda: os.path.exists(log) and open(log).read().strip(), "a log line")
    rec = json.loads(open(log).read().splitlines()[0])
    assert rec["route"] == "gpu-a" and rec["path"] == "/a/completions?x=1", rec
    assert rec["forwarded_path"] == "/v1/completions?x=1", rec
    assert rec["tenant"] == "acme" and rec["backend"] == f"127.0.0.1:{be.port}", rec
    assert rec["prompt_tokens"] == 1 and rec["completion_tokens"] == 5, rec
    assert rec["cache"] is None and isinstance(rec["upstream_ms"], float), rec
    assert rec["request_id"] == h["x-request-id"][0]


def lenient_backend_for(env):
    be = LenientBackend()
    env.on_cleanup.append(be.close)
    return be


def test_response_headers_on_cache_hits_too(env):
    """A stored response is edited when it is served, as a relayed one is: a field removed
    from the backend's never comes back on a hit, and a variable is this request's. A
    rewritten route caches as any other."""
    from harness import ScriptedBackend

    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nX-Internal: secret\r\n"
                b"Content-Length: 2\r\n\r\nok", False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    p = env.proxy(
        "cache: {status_header: true}\npools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n    cache: true\n"
        "    rewrite: {prefix: /v1}\n"
        "    response_headers:\n      set: {X-Rid: '%{request_id}'}\n      remove: [X-Internal]\n")
    for i in range(2):
        st, h, data = request(p.port, "GET", "/doc")
        assert st == 200 and data == b"ok", (st, data)
        assert "x-internal" not in h, h
        assert h["x-rid"] == h["x-request-id"], h
        assert ("hit" in h["cache-status"][0]) == (i == 1), h
    assert be.count == 1


def test_spillover_pool_with_a_key_never_gets_the_clients(env):
    """The route's pool holds no key, its spillover pool does: a request that moves there
    carries the spillover backend's key alone, never the client's beside it."""
    spare = keyed_backend(env, "spare-key")
    ks = key_file(env, "spare.key", "spare-key")
    p = env.proxy(
        "pools:\n"
        f"  - name: gpu\n    backends: [{{address: 127.0.0.1:{free_port()}, max_concurrency: 1}}]\n"
        f"  - name: spare\n    backends: [{{address: 127.0.0.1:{spare.port}}}]\n"
        f"    api_key_file: {ks}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n    spillover: {pool: spare}\n")
    st, _, data = request(p.port, "GET", "/v1/models",
                          headers={"Authorization": "Bearer client-key"})
    assert st == 200, data
    assert seen(data)["headers"]["authorization"] == ["Bearer spare-key"], data
    assert not getattr(spare, "refused", 0)


def test_response_headers_on_the_proxys_own_answers(env):
    """A browser reads a 401 or a 502 only with its CORS fields: the proxy's own answers on a
    route carry the route's and pool's set and add fields too."""
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    p = env.proxy(
        "pools:\n"
        f"  - name: gone\n    backends: [{{address: 127.0.0.1:{free_port()}}}]\n"
        "    response_headers: {add: {X-Pool: '%{pool}'}}\n"
        "routes:\n"
        "  - match: {path_prefix: /locked/}\n    pool: gone\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "    response_headers: {set: {Access-Control-Allow-Origin: '*'}}\n"
        "  - match: {path_prefix: /}\n    pool: gone\n    api: openai\n"
        "    response_headers: {set: {Access-Control-Allow-Origin: '*'}}\n")
    st, h, _ = request(p.port, "GET", "/locked/x")
    assert st == 401 and h["access-control-allow-origin"] == ["*"], (st, h)
    assert h["x-pool"] == ["gone"] and "www-authenticate" in h, h
    st, h, body = request(p.port, "POST", "/v1/completions", body="{}", headers=POST_JSON)
    assert st == 502 and h["access-control-allow-origin"] == ["*"], (st, h)
    assert json.loads(body)["error"]["type"] == "server_error", body


class SlowKeyedBackend(KeyedBackend):
    """A KeyedBackend that holds its first answer until released (a hedge is sent meanwhile)."""

    def __init__(self, key):
        import threading
        self.release = threading.Event()
        super().__init__(key)

    def _answer(self, n, req):
        if n == 1:
            self.release.wait(10)
        return super()._answer(n, req)


def test_a_hedged_copy_carries_its_own_backends_key(env):
    slow = SlowKeyedBackend("key-slow")
    env.on_cleanup.append(slow.release.set)
    env.on_cleanup.append(slow.close)
    fast = keyed_backend(env, "key-fast")
    ks = key_file(env, "slow.key", "key-slow")
    kf = key_file(env, "fast.key", "key-fast")
    p = env.proxy(
        "pools:\n"
        "  - name: p\n    balance: round-robin\n    hedge_after_ms: 50\n"
        "    backends:\n"
        f"      - {{address: 127.0.0.1:{slow.port}, api_key_file: {ks}}}\n"
        f"      - {{address: 127.0.0.1:{fast.port}, api_key_file: {kf}}}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n", workers=1)
    st, _, data = request(p.port, "GET", "/v1/models")
    slow.release.set()
    assert st == 200, data
    assert seen(data)["headers"]["authorization"] == ["Bearer key-fast"], data
    # the first attempt went to the slow one (else no copy would have gone), with its key
    wait_until(lambda: len(slow.seen) + getattr(slow, "refused", 0) == 1, "the slow answer")
    assert len(slow.seen) == 1 and not getattr(fast, "refused", 0), slow.seen
    assert slow.seen[0]["headers"]["authorization"] == ["Bearer key-slow"]


def test_a_background_refresh_carries_the_key(env):
    """stale-while-revalidate: the refresh the proxy sends on its own goes with the key."""
    from harness import ScriptedBackend
    keys = []

    def script(n, req):
        keys.append(_fields(req).get("authorization"))
        return (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=10, stale-while-revalidate=600\r\n"
                b"Age: 100\r\nContent-Length: 2\r\n\r\nok", False)  # stale at once
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    kf = key_file(env, "p.key", "refresh-key")
    p = env.proxy(
        "cache: {status_header: true}\npools:\n"
        f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        f"    api_key_file: {kf}\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n    cache: true\n")
    assert request(p.port, "GET", "/doc")[0] == 200
    st, h, _ = request(p.port, "GET", "/doc")
    assert st == 200 and "ttl=-" in h["cache-status"][0], h  # served stale, refreshed behind
    wait_until(lambda: len(keys) == 2, "the background refresh")
    assert keys == [["Bearer refresh-key"], ["Bearer refresh-key"]], keys
