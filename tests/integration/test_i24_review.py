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


# --- admin.state_file: its directory ----------------------------------------------------


def test_state_file_in_a_directory_others_can_write_is_refused(env):
    """A state file is believed as far as its directory is: where another user can rename
    names (a directory writable by group or others, not sticky), they can put back an old
    state file of the service user's (a backend since removed: a replay), or a root-owned
    one hard-linked from elsewhere. Before: such a file, owned by root with mode 0600, was
    applied (its backend added). Now it is refused whole; the same file in a directory
    only its owner writes is applied."""
    import os

    from test_ctl import _fast, _pool, _start, addr, backends
    from test_ctl_review import _state_doc
    a, evil = _fast(env, "a"), _fast(env, "evil")
    shared = os.path.join(env.dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    state = os.path.join(shared, "state.json")
    with open(state, "w") as f:
        f.write(_state_doc(addr(evil)))
    os.chmod(state, 0o600)
    px = _start(env, _pool("gpu", [a]), state_file=state, name="proxy-shared")
    assert addr(evil) not in backends(px)
    log = env.log(px)
    assert "refused" in log and f"state file {state}" in log, log
    env.stop(px)
    own = os.path.join(env.dir, "own")
    os.mkdir(own, 0o700)
    state = os.path.join(own, "state.json")
    with open(state, "w") as f:
        f.write(_state_doc(addr(evil)))
    os.chmod(state, 0o600)
    px = _start(env, _pool("gpu", [a]), state_file=state, name="proxy-own")
    assert backends(px)[addr(evil)]["weight"] == 7
    env.finish()
