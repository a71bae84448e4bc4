"""Balancing and routing, seen from a client: which simulated accelerator answered."""

import collections
import concurrent.futures

from harness import complete, pool_yaml, request, served_by


def _counts(port, n):
    c = collections.Counter()
    for _ in range(n):
        st, h, _ = complete(port)
        assert st == 200, st
        c[served_by(h)] += 1
    return c


def test_round_robin_spreads_evenly(env):
    sims = [env.sim(n, latency_ms=0, token_ms=0) for n in ("a", "b", "c")]
    px = env.proxy("pools:\n" + pool_yaml("gpu", [s.port for s in sims]))
    c = _counts(px.port, 30)
    assert c == {"a": 10, "b": 10, "c": 10}, c


def test_weighted_round_robin_follows_weights(env):
    sims = [env.sim(n, latency_ms=0, token_ms=0) for n in ("heavy", "light")]
    px = env.proxy("pools:\n" + pool_yaml("gpu", [s.port for s in sims],
                                         balance="weighted-round-robin", weights=[3, 1]))
    c = _counts(px.port, 40)
    assert c == {"heavy": 30, "light": 10}, c


def _concurrent(port, n, parallel):
    with concurrent.futures.ThreadPoolExecutor(parallel) as ex:
        results = list(ex.map(lambda _: complete(port), range(n)))
    assert all(r[0] == 200 for r in results), [r[0] for r in results]
    return collections.Counter(served_by(r[1]) for r in results)


def test_least_connections_favours_the_free_backend(env):
    fast = env.sim("fast", latency_ms=0, token_ms=0, slots=64)
    slow = env.sim("slow", latency_ms=800, token_ms=0, jitter=0, slots=64)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [fast.port, slow.port],
                                         balance="least-connections"))
    c = _concurrent(px.port, 48, 8)
    assert c["fast"] > 2 * c["slow"], c


def test_p2c_favours_the_free_backend(env):
    fast = env.sim("fast", latency_ms=0, token_ms=0, slots=64)
    slow = env.sim("slow", latency_ms=800, token_ms=0, jitter=0, slots=64)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [fast.port, slow.port], balance="p2c"))
    c = _concurrent(px.port, 48, 8)
    assert c["fast"] > 2 * c["slow"], c


def test_routes_by_path_host_method_and_header(env):
    gpu = env.sim("gpu", latency_ms=0, token_ms=0)
    web = env.sim("web")
    admin = env.sim("admin")
    px = env.proxy("pools:\n" + pool_yaml("gpu", [gpu.port]) + pool_yaml("web", [web.port])
                   + pool_yaml("admin", [admin.port]) +
                   "routes:\n"
                   "  - match: {path_prefix: /v1/}\n    pool: gpu\n"
                   "  - match: {host: static.local}\n    pool: web\n"
                   "  - match: {method: DELETE}\n    pool: admin\n"
                   "  - match: {path_prefix: /tier, header: {name: X-Tier, value: gold}}\n"
                   "    pool: gpu\n"
                   "  - match: {path_prefix: /site/}\n    pool: web\n")
    assert served_by(complete(px.port)[1]) == "gpu"
    assert served_by(request(px.port, "GET", "/x", headers={"Host": "static.local:8080"})[1]) == "web"
    assert served_by(request(px.port, "DELETE", "/thing")[1]) == "admin"
    assert served_by(request(px.port, "GET", "/tier", headers={"X-Tier": "gold"})[1]) == "gpu"
    assert served_by(request(px.port, "GET", "/site/index.html")[1]) == "web"
    st, h, body = request(px.port, "GET", "/tier", headers={"X-Tier": "silver"})
    assert st == 404 and b"no route" in body, (st, body)
    st, _, _ = request(px.port, "GET", "/nowhere")
    assert st == 404


def test_max_concurrency_is_a_hard_cap(env):
    sim = env.sim("capped", latency_ms=500, jitter=0, token_ms=0, slots=64)
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 3}}\n")
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        results = list(ex.map(lambda _: complete(px.port), range(10)))
    statuses = sorted(r[0] for r in results)
    # never more than 3 at once on the backend (across both workers); the rest wait their turn
    assert statuses == [200] * 10, statuses
    from harness import sim_stats
    assert sim_stats(sim.port)["max_active"] == 3
