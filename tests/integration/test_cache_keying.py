"""What the cache's key leaves out, and purges with crafted values (issue 24's review of the
cache; docs/cache.md, "Request fields not in the key" and "Purge").

The key is the route, the scheme, the host and the request target (and an inference POST's
canonical body); every other request field the origin gets is unkeyed: an origin that answers
by one of them must say so with Vary, or the first answer is replayed to everyone. Confirmed
and documented for ordinary fields (Accept-Language below). Fields that ask the origin for
another method or target (X-HTTP-Method-Override, X-Original-URL...) and credential fields in
a CGI backend's spelling (X_API_Key) or for a proxy (Proxy-Authorization) were unkeyed too, and let one client's answer be stored
for everyone: now such requests bypass the cache. Forwarding fields (X-Forwarded-Host...) from
a client outside trusted_proxies never reach the origin (refuted).

Purges: an empty prefix, a prefix without a host, a bare '/', percent-encoded bytes, tags with
commas, control bytes, long lists, tags shared by routes, and every tenant's copy of a URI."""

from harness import pool_yaml, request
from test_cache import Origin, Reply, cs, get, is_hit, start
from test_cache_purge import Origin as PurgeOrigin
from test_cache_purge import _proxy as purge_proxy
from test_cache_purge import fill, hit, miss, purge, purged


def test_method_and_target_overrides_never_poison_the_key(env):
    # Frameworks take X-HTTP-Method-Override (and its kin) on a POST or even a GET, and IIS
    # or Symfony route by X-Original-URL: the answer is not the GET /item's. Stored under
    # the GET's key, one client's request replaced /item for everyone.
    o = Origin(env)
    overrides = [("X-HTTP-Method-Override", "DELETE", b"item deleted"),
                 ("X-HTTP-Method", "DELETE", b"item deleted"),
                 ("X-Method-Override", "DELETE", b"item deleted"),
                 ("X_HTTP_Method_Override", "DELETE", b"item deleted"),  # as CGI reads it
                 ("X-Original-URL", "/admin", b"admin page"),
                 ("X-Rewrite-URL", "/admin", b"admin page")]

    def item(req):
        for name, _, answer in overrides:
            if name.lower() in req.headers:
                return Reply(headers=[("Cache-Control", "max-age=60")], body=answer)
        return Reply(headers=[("Cache-Control", "max-age=60")], body=b"item 1")

    o.paths["/item"] = item
    px = start(env, o)
    for name, value, answer in overrides:
        st, h, b = get(px, "/item", headers={name: value})
        assert b == answer and cs(h) == "accelnet; fwd=bypass", (name, b, h)
        st, h, b = get(px, "/item")
        assert b == b"item 1", (name, b, h)
    st, h, b = get(px, "/item")
    assert b == b"item 1" and is_hit(h), h


def test_a_cgi_spelled_api_key_or_a_proxy_credential_is_a_credential(env):
    # a WSGI/PHP backend reads X_API_Key as the X-API-Key it checks, and Proxy-Authorization
    # is forwarded (the proxy takes none): on a route without auth such a request was stored,
    # and the next client got the key holder's answer
    for field in ("X_API_Key", "Proxy-Authorization"):
        o = Origin(env)
        o.paths["/me"] = lambda req, f=field.lower(): Reply(
            headers=[("Cache-Control", "max-age=60")],
            body=b"account of " + req.headers.get(f, "nobody").encode())
        px = start(env, o)
        st, h, b = get(px, "/me", headers={field: "alice"})
        assert b == b"account of alice" and cs(h) == "accelnet; fwd=bypass", (field, h)
        st, h, b = get(px, "/me", headers={field: "bob"})
        assert b == b"account of bob", (field, b, h)
        st, h, b = get(px, "/me")
        assert b == b"account of nobody" and not is_hit(h), (field, b, h)


def test_forwarding_fields_from_a_client_never_reach_the_origin(env):
    # a classic poisoning: the origin builds its links from X-Forwarded-Host; a client
    # outside trusted_proxies cannot set it, so the stored page has the real host's links
    o = Origin(env)
    o.paths["/page"] = lambda req: Reply(
        headers=[("Cache-Control", "max-age=60")],
        body=b"<script src=//" + (req.headers.get("x-forwarded-host") or "real.example")
        .encode() + b"/app.js>")
    px = start(env, o)
    for name in ("X-Forwarded-Host", "X_Forwarded_Host", "Forwarded"):
        get(px, "/page", headers={name: "evil.example"})
    st, h, b = get(px, "/page")
    assert b == b"<script src=//real.example/app.js>" and is_hit(h), (b, h)
    assert all("x-forwarded-host" not in seen and "forwarded" not in seen
               for seen in o.seen[("GET", "/page")])


def test_an_unkeyed_field_the_origin_answers_by_needs_vary(env):
    # what docs/cache.md says: a field not in the key must not change the answer, unless
    # the origin says Vary
    o = Origin(env)
    o.paths["/hello"] = lambda req: Reply(
        headers=[("Cache-Control", "max-age=60")],
        body=b"bonjour" if req.headers.get("accept-language") == "fr" else b"hello")
    o.paths["/hi"] = lambda req: Reply(
        headers=[("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")],
        body=b"bonjour" if req.headers.get("accept-language") == "fr" else b"hello")
    px = start(env, o)
    assert get(px, "/hello", headers={"Accept-Language": "fr"})[2] == b"bonjour"
    st, h, b = get(px, "/hello", headers={"Accept-Language": "en"})
    assert b == b"bonjour" and is_hit(h), "without Vary the first answer is replayed"
    assert get(px, "/hi", headers={"Accept-Language": "fr"})[2] == b"bonjour"
    st, h, b = get(px, "/hi", headers={"Accept-Language": "en"})
    assert b == b"hello" and not is_hit(h), (b, h)


# --- purges with crafted values ------------------------------------------------------------


def test_prefix_purges_with_empty_bare_and_encoded_prefixes(env):
    origin = PurgeOrigin()
    px = purge_proxy(env, origin)
    fill(px, origin, ["/a/b/x", "/c"])
    fill(px, origin, ["/a/b/x"], host="other.example")
    for bad in ("prefix=", "prefix=/", "prefix=%2F", "prefix=http://", "prefix=&host=example.com",
                "prefix=//&host=", "prefix=/%zz&host=example.com",
                "prefix=/a%00&host=example.com", "prefix=/a%20b&host=example.com",
                # a path no request can have: an encoded / is refused (docs/security.md)
                "prefix=/a%252Fb&host=example.com"):
        st, _, doc = purge(px, bad)
        assert st == 400 and doc["error"], (bad, st, doc)
    hit(px, origin, "/a/b/x")
    # decoded once: %2F is a '/', so this is the prefix /a/b
    assert purged(px, "prefix=/a%2Fb&host=example.com") == 1
    miss(px, origin, "/a/b/x")
    # a bare '/' of one host is that host's everything, and no other host's
    assert purged(px, "prefix=%2F&host=EXAMPLE.com") == 2
    hit(px, origin, "/a/b/x", host="other.example")


def test_cache_tags_with_commas_control_bytes_and_long_lists(env):
    origin = PurgeOrigin()
    many = ", ".join(f"t{i:04d}" for i in range(1000))  # about 7 KB in one field
    origin.tags = {"/list": [" a ,b,, c\t", "d"], "/many": [many], "/odd": ["x y, z"]}
    px = purge_proxy(env, origin)
    fill(px, origin, ["/list", "/many", "/odd"])
    for bad in ("tag=a,b", "tag=a%2Cb", "tag=", "tag=%20a", "tag=a%09", "tag=a%01",
                "tag=a%0d%0aX", "tag=%7f"):
        st, _, doc = purge(px, bad)
        assert st == 400 and doc["error"], (bad, st, doc)
    hit(px, origin, "/list")
    assert purged(px, "tag=x") == 0 and purged(px, "tag=y") == 0
    assert purged(px, "tag=x%20y") == 1  # a member with a space inside it, whole
    miss(px, origin, "/odd")
    assert purged(px, "tag=t0999") == 1
    miss(px, origin, "/many")
    assert purged(px, "tag=c") == 1  # trimmed of its tab; empty members name nothing
    miss(px, origin, "/list")
    assert purged(px, "tag=d") == 1  # a second field of the name
    # a control byte in the field: the response is refused (502), never stored; a byte past
    # ASCII is kept, and the list's other members still name it
    origin.tags.update({"/ctl": ["a\x01b, e"], "/high": ["\x80x, f"]})
    st, _, _ = request(px.port, "GET", "/ctl", headers={"Host": "example.com"})
    assert st == 502
    fill(px, origin, ["/high"])
    assert purge(px, "tag=%80x")[0] == 400
    assert purged(px, "tag=e") == 0 and purged(px, "tag=f") == 1
    miss(px, origin, "/high")


def test_a_tag_names_what_every_route_stored_under_it(env):
    # tags are one namespace across routes and origins: a purge by tag takes each route's
    # copy (and a URI purge every route's copy of that URI)
    origin = PurgeOrigin()
    origin.tags = {"/r1/x": ["shared"], "/r2/x": ["shared"], "/r2/y": ["own"]}
    routes = ("  - match: {path_prefix: /r1/}\n    pool: web\n    cache: true\n"
              "  - match: {path_prefix: /r2/}\n    pool: web\n    cache: true\n")
    px = purge_proxy(env, origin, routes=routes)
    fill(px, origin, ["/r1/x", "/r2/x", "/r2/y"])
    assert purged(px, "tag=shared") == 2
    miss(px, origin, "/r1/x")
    miss(px, origin, "/r2/x")
    hit(px, origin, "/r2/y")


def test_a_uri_purge_takes_every_tenants_copy(env):
    # a credentialed answer is stored per identity, as a variant of its URI: a purge of the
    # URI takes them all
    o = Origin(env)
    o.paths["/me"] = lambda req: Reply(headers=[("Cache-Control", "s-maxage=60")],
                                       body=b"page of " + req.headers["x-tenant"].encode())
    keys = env.write("keys", "alice alice-key-0123456789abcdef\nbob bob-key-0123456789abcdefgh\n")
    px = env.proxy("cache: {memory: 64MiB}\npools:\n" + pool_yaml("o", [o.port])
                   + "routes:\n  - match: {path_prefix: /}\n    pool: o\n"
                   f"    cache: {{authorized: true}}\n    auth: {{api_keys_file: {keys}}}\n",
                   workers=1)
    creds = {"alice": {"X-API-Key": "alice-key-0123456789abcdef"},
             "bob": {"X-API-Key": "bob-key-0123456789abcdefgh"}}
    for who in ("alice", "bob", "alice", "bob"):
        assert get(px, "/me", headers=creds[who])[2] == b"page of " + who.encode()
    assert o.count("/me") == 2
    st, _, b = request(px.admin, "POST", "/cache/purge?uri=/me&host=127.0.0.1:%d" % px.port)
    assert st == 200 and b'"purged":2' in b.replace(b" ", b""), (st, b)
    for who in ("alice", "bob"):
        st, h, b = get(px, "/me", headers=creds[who])
        assert b == b"page of " + who.encode() and not is_hit(h), (who, h)
    assert o.count("/me") == 4
