"""Purging the response cache through the admin API (POST /cache/purge, docs/cache.md "Purge"):
by URI, by prefix, by tag (Cache-Tag, or the field cache.tag_header names), everything; as a
query or a form body; refused without the token, to browsers without a token, with another
method, with parameters it cannot read, and where no cache is configured.

Each test runs its own origin: a threaded HTTP/1.1 server that counts the requests per target
and answers `Cache-Control: max-age=3600` with the tags the test gives each path, so a stored
response stays fresh for the whole test: a request after a purge that reaches the origin (its
count goes up, `Cache-Status: accelnet; fwd=miss`) was purged; one answered from the store
(`Cache-Status: accelnet; hit`, count unchanged) was not."""

import collections
import http.server
import json
import os
import threading
import urllib.parse

from harness import (BIN, HttpBackend, free_port, metrics_text, pool_yaml, port_open,
                     prom_samples, request, wait_until)


class Origin:
    """count[target] requests seen; tags[path] -> list of Cache-Tag field values."""

    def __init__(self, tag_field="Cache-Tag"):
        self.count = collections.Counter()
        self.tags = {}
        self.lock = threading.Lock()
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                with origin.lock:
                    origin.count[self.path] += 1
                    seen = origin.count[self.path]
                body = f"{self.path} #{seen}".encode()
                self.send_response(200)
                self.send_header("Cache-Control", "max-age=3600")
                self.send_header("Content-Type", "text/plain")
                for v in origin.tags.get(self.path.split("?")[0], []):
                    self.send_header(tag_field, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer

        self.http = HttpBackend(Handler)
        self.port = self.http.port


def _proxy(env, origin, cache="cache: {memory: 16MiB}\n", token=None, routes=None):
    """A proxy whose every route caches, in front of <origin>; with <token>, admin needs it."""
    port, admin_port = free_port(), free_port()
    admin = f"admin:\n  address: 127.0.0.1:{admin_port}\n"
    if token:
        path = env.write("admin.token", token + "\n")
        os.chmod(path, 0o600)
        admin += f"  token_file: {path}\n"
    routes = routes or "  - match: {path_prefix: /}\n    pool: web\n    cache: true\n"
    text = (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n" + admin + cache +
            "pools:\n" + pool_yaml("web", [origin.port]) + "routes:\n" + routes)
    p = env.start([BIN, "proxy", "-c", env.write("proxy.yaml", text)], "proxy", wait_port=port)
    p.port, p.admin = port, admin_port
    wait_until(lambda: port_open(admin_port), "admin port")
    env.on_cleanup.append(origin.http.close)
    return p


def get(px, target, host="example.com", headers=None, method="GET", body=None):
    """(status, Cache-Status, body) of a request through the proxy."""
    st, hdrs, data = request(px.port, method, target, body=body,
                             headers=dict({"Host": host}, **(headers or {})))
    assert st == 200, (st, data)
    return st, hdrs.get("cache-status", [""])[0], data


def hit(px, origin, target, host="example.com", **kw):
    """A request answered from the store: no new origin request."""
    before = origin.count[target]
    _, cs, data = get(px, target, host, **kw)
    assert cs.startswith("accelnet; hit"), (target, host, cs)
    assert origin.count[target] == before, (target, host)
    return data


def miss(px, origin, target, host="example.com", **kw):
    """A request the origin answers (and the store keeps)."""
    before = origin.count[target]
    _, cs, data = get(px, target, host, **kw)
    assert "fwd=miss" in cs, (target, host, cs)
    assert origin.count[target] == before + 1, (target, host)
    return data


def fill(px, origin, targets, host="example.com"):
    for t in targets:
        miss(px, origin, t, host)
        hit(px, origin, t, host)


def purge(px, query="", body=None, headers=None, method="POST", token=None):
    """(status, headers, JSON answer) of <method> /cache/purge?<query>."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = f"Bearer {token}"
    st, hdrs, data = request(px.admin, method, "/cache/purge" + ("?" + query if query else ""),
                             body=body, headers=h)
    if st in (401,):
        return st, hdrs, data
    assert hdrs["content-type"] == ["application/json"], (st, hdrs, data)
    return st, hdrs, json.loads(data)


def purged(px, query="", **kw):
    st, _, doc = purge(px, query, **kw)
    assert st == 200, (st, doc)
    return doc["purged"]


def test_purge_by_uri_takes_that_uri_only(env):
    origin = Origin()
    # two caching routes (one for requests with X-Route) and both schemes' keys: a URI purge
    # takes every route's copy
    routes = ("  - match: {path_prefix: /, header: {name: X-Route}}\n    pool: web\n"
              "    cache: true\n"
              "  - match: {path_prefix: /}\n    pool: web\n    cache: true\n")
    px = _proxy(env, origin, routes=routes)
    fill(px, origin, ["/a/b?x=1", "/a/b?x=2", "/a/b", "/a/b?x=1&y=2"])
    fill(px, origin, ["/a/b?x=1"], host="other.example")
    miss(px, origin, "/a/b?x=1", headers={"X-Route": "1"})
    hit(px, origin, "/a/b?x=1", headers={"X-Route": "1"})

    assert purged(px, "uri=http://Example.COM/a/b?x=1") == 2
    miss(px, origin, "/a/b?x=1")
    miss(px, origin, "/a/b?x=1", headers={"X-Route": "1"})
    hit(px, origin, "/a/b?x=2")
    hit(px, origin, "/a/b")
    hit(px, origin, "/a/b?x=1&y=2")
    hit(px, origin, "/a/b?x=1", host="other.example")

    # the same URI again: what was just stored again goes; https:// names the same URI
    assert purged(px, "uri=https://example.com/a/b?x=1") == 2
    assert purged(px, "uri=http://example.com/a/b?x=1") == 0
    # an & inside the URI is percent-encoded; the path form with host=
    assert purged(px, "uri=http://example.com/a/b%3Fx%3D1%26y%3D2") == 1
    miss(px, origin, "/a/b?x=1&y=2")
    assert purged(px, "host=other.example&uri=/a/b?x=1") == 1
    miss(px, origin, "/a/b?x=1", host="other.example")
    hit(px, origin, "/a/b")
    log = env.log(px)
    assert "admin: purge by uri (host example.com, target /a/b?x=1): purged 2" in log, log


def test_purge_by_prefix(env):
    origin = Origin()
    px = _proxy(env, origin)
    fill(px, origin, ["/static/app.js", "/static/css/site.css?v=3", "/static", "/api/static/x"])
    fill(px, origin, ["/static/app.js"], host="cdn.example")

    assert purged(px, "prefix=/static/&host=example.com") == 2
    miss(px, origin, "/static/app.js")
    miss(px, origin, "/static/css/site.css?v=3")
    hit(px, origin, "/static")
    hit(px, origin, "/api/static/x")
    hit(px, origin, "/static/app.js", host="cdn.example")
    # a whole host
    assert purged(px, "prefix=http://cdn.example/") == 1
    miss(px, origin, "/static/app.js", host="cdn.example")
    hit(px, origin, "/static")
    assert "admin: purge by prefix (host example.com, target /static/): purged 2" in \
        env.log(px)


def test_purge_by_tag(env):
    origin = Origin()
    origin.tags = {"/p/1": ["product-1, cat-shoes"],
                   "/p/2": ["product-2", " cat-shoes ,sale"],  # two fields of the name
                   "/p/3": ["product-3, cat-shoes-kids"],
                   "/p/4": []}
    px = _proxy(env, origin)
    fill(px, origin, ["/p/1", "/p/2", "/p/3", "/p/4", "/p/1?page=2"])

    assert purged(px, "tag=Cat-Shoes") == 0  # case-sensitive
    assert purged(px, "tag=cat-shoes") == 3  # /p/1, /p/1?page=2, /p/2
    miss(px, origin, "/p/1")
    miss(px, origin, "/p/1?page=2")
    miss(px, origin, "/p/2")
    hit(px, origin, "/p/3")
    hit(px, origin, "/p/4")
    assert purged(px, "tag=sale") == 1
    miss(px, origin, "/p/2")
    hit(px, origin, "/p/1")
    assert 'admin: purge by tag "cat-shoes" (field Cache-Tag): purged 3' in env.log(px)


def test_purge_by_tag_reads_the_configured_field(env):
    origin = Origin(tag_field="Surrogate-Key")
    origin.tags = {"/a": ["blue, red"], "/b": ["green"]}
    px = _proxy(env, origin, cache="cache: {memory: 16MiB, tag_header: Surrogate-Key}\n")
    fill(px, origin, ["/a", "/b"])
    assert purged(px, "tag=red") == 1
    miss(px, origin, "/a")
    hit(px, origin, "/b")


def test_purge_everything_and_the_metric(env):
    origin = Origin()
    px = _proxy(env, origin)
    fill(px, origin, ["/1", "/2", "/3"])
    fill(px, origin, ["/1"], host="b.example")
    assert purged(px, "uri=http://example.com/1") == 1
    assert purged(px, "all=1") == 3
    for t in ["/1", "/2", "/3"]:
        miss(px, origin, t)
    miss(px, origin, "/1", host="b.example")
    samples = prom_samples(metrics_text(px.admin))
    assert samples[("accelnet_cache_evictions_total", (("reason", "purge"),))] == 4
    assert "admin: purge of everything (all=1): purged 3" in env.log(px)
    assert purged(px, "all=1") == 4


def test_purge_takes_a_form_body(env):
    origin = Origin()
    px = _proxy(env, origin)
    fill(px, origin, ["/a?x=1&y=2", "/a?x=1"])
    form = urllib.parse.urlencode({"uri": "http://example.com/a?x=1&y=2"})
    assert "%26" in form
    assert purged(px, body=form,
                  headers={"Content-Type": "application/x-www-form-urlencoded"}) == 1
    miss(px, origin, "/a?x=1&y=2")
    hit(px, origin, "/a?x=1")


def test_purge_takes_every_inference_body_of_a_uri(env):
    origin = Origin()
    routes = "  - match: {path_prefix: /}\n    pool: web\n    cache: {inference: true}\n"
    px = _proxy(env, origin, routes=routes)
    hdr = {"Content-Type": "application/json"}
    bodies = [json.dumps({"model": "m", "input": w}) for w in ("one", "two")]
    for b in bodies:
        miss(px, origin, "/v1/embeddings", method="POST", body=b, headers=hdr)
        hit(px, origin, "/v1/embeddings", method="POST", body=b, headers=hdr)
    fill(px, origin, ["/v1/models"])
    assert purged(px, "uri=http://example.com/v1/embeddings") == 2
    for b in bodies:
        miss(px, origin, "/v1/embeddings", method="POST", body=b, headers=hdr)
    hit(px, origin, "/v1/models")


def test_purge_needs_the_token(env):
    origin = Origin()
    token = "s3cret-purge-token"
    px = _proxy(env, origin, token=token)
    fill(px, origin, ["/a"])
    st, hdrs, _ = purge(px, "all=1")
    assert st == 401 and hdrs["www-authenticate"] == ["Bearer"], (st, hdrs)
    st, _, _ = purge(px, "all=1", token="wrong")
    assert st == 401
    hit(px, origin, "/a")
    # with the token a browser may purge: a page cannot send the Authorization header
    assert purged(px, "all=1", token=token, headers={"Origin": "http://127.0.0.1"}) == 1
    miss(px, origin, "/a")


def test_without_a_token_purge_is_refused_to_browsers(env):
    origin = Origin()
    px = _proxy(env, origin)
    fill(px, origin, ["/a"])
    for h in ({"Origin": "http://evil.example"}, {"Origin": "null"},
              {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-origin"}):
        st, _, doc = purge(px, "all=1", headers=h)
        assert st == 403 and "refused to browsers" in doc["error"], (h, st, doc)
    hit(px, origin, "/a")
    assert purged(px, "all=1") == 1


def test_purge_refuses_other_methods_and_bad_parameters(env):
    origin = Origin()
    px = _proxy(env, origin)
    fill(px, origin, ["/a"])
    for m in ("GET", "HEAD", "PUT", "DELETE", "PATCH"):
        st, hdrs, data = request(px.admin, m, "/cache/purge?all=1")
        assert st == 405 and hdrs["allow"] == ["POST"], (m, st, hdrs)
        if m != "HEAD":
            assert "purge with POST" in json.loads(data)["error"]
    for query, says in [
            ("", "say what to purge"),
            ("url=http://example.com/a", 'unknown parameter \\"url\\"'),
            ("uri=http://example.com/a?x=1&y=2", 'unknown parameter \\"y\\"'),
            ("uri=http://example.com/a&tag=t", "one purge at a time"),
            ("tag=t&tag=u", "tag is given twice"),
            ("uri=/a", "a path needs host=HOST"),
            ("uri=ftp://example.com/a", "expected http://HOST/PATH"),
            ("uri=http://example.com/a%2", "bad percent-encoding"),
            ("uri=http://example.com/a%20b", "only visible ASCII"),
            ("uri=http://example.com/a%23b", "no fragment"),
            ("tag=a,b", "one tag, without a comma"),
            ("all=yes", "all=1 purges everything"),
            ("host=example.com&tag=t", "host= goes with a path")]:
        st, _, data = request(px.admin, "POST", "/cache/purge?" + query)
        assert st == 400, (query, st, data)
        assert says in data.decode(), (query, data)
    st, _, doc = purge(px, "all=1", body="all=1",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert st == 400 and "not both" in doc["error"], doc
    st, _, doc = purge(px, body='{"all": 1}', headers={"Content-Type": "application/json"})
    assert st == 400 and "must be a form" in doc["error"], doc
    hit(px, origin, "/a")  # nothing went


def test_purge_without_a_cache_says_so(env):
    origin = Origin()
    px = _proxy(env, origin, cache="", routes="  - match: {path_prefix: /}\n    pool: web\n")
    st, _, doc = purge(px, "all=1")
    assert st == 404 and "no response cache" in doc["error"], (st, doc)
    st, _, doc = purge(px, "all=1", method="GET")
    assert st == 405, (st, doc)
