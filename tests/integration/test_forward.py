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
