"""Issue 24's fixes, reviewed as their attackers would (the cache and who asks; the control
plane). Each test here is an attack that worked before its fix."""

from test_cache import Origin, Reply, cs, get, is_hit, start

PAGE = "/page"


def _revalidating_origin(env, on_304):
    """An origin whose PAGE is stored stale at once (max-age=0, an ETag), and whose 304 to a
    revalidation carries the fields <on_304>(req) gives (a list of pairs)."""
    o = Origin(env)

    def page(req):
        if req.headers.get("if-none-match") == '"v1"':
            return Reply(status=304, headers=[("ETag", '"v1"')] + on_304(req))
        return Reply(headers=[("Cache-Control", "max-age=0"), ("ETag", '"v1"')],
                     body=b"the public page")

    o.paths[PAGE] = page
    return o


def test_304_set_cookie_not_merged_into_the_shared_copy(env):
    """A 304 answering alice's revalidation sets her session cookie: the stored copy that
    everyone gets must not take it (a 200 with Set-Cookie is never stored, cookies: false).
    Before: bob's hit answered `Set-Cookie: session=alice-secret`."""
    o = _revalidating_origin(env, lambda req: [
        ("Cache-Control", "max-age=60"),
        ("Set-Cookie", "session=" + req.headers.get("x-who", "nobody") + "-secret")])
    px = start(env, o)
    s, h, b = get(px, PAGE, headers={"X-Who": "first"})
    assert s == 200 and b == b"the public page", (s, h)
    s, h, b = get(px, PAGE, headers={"X-Who": "alice"})  # stale: revalidated, 304
    assert s == 200 and b == b"the public page", (s, h)
    for _ in range(2):
        s, h, b = get(px, PAGE, headers={"X-Who": "bob"})
        assert s == 200 and b == b"the public page", (s, h)
        assert not any("alice" in v for v in h.get("set-cookie", [])), (cs(h), h)


def test_304_private_not_merged_into_the_shared_copy(env):
    """A 304 that says `private` (and a per-user field) to alice's revalidation: the copy that
    answers everyone must not become hers. Before: bob's hit answered `X-User: alice`."""
    o = _revalidating_origin(env, lambda req: [
        ("Cache-Control", "private, max-age=60"),
        ("X-User", req.headers.get("x-who", "nobody"))])
    px = start(env, o)
    get(px, PAGE, headers={"X-Who": "first"})
    get(px, PAGE, headers={"X-Who": "alice"})
    s, h, b = get(px, PAGE, headers={"X-Who": "bob"})
    assert s == 200 and b == b"the public page", (s, h)
    assert h.get("x-user", []) != ["alice"], (cs(h), h)
