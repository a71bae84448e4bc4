"""Admission: backends with max_concurrency (an accelerator's slots) and the pool's queue,
shared by all workers, bounded in size and in time."""

import concurrent.futures
import socket
import threading

from harness import complete, request, sim_stats, status, wait_until


def _pool(port, cap, queue=""):
    return ("pools:\n  - name: gpu\n    backends:\n"
            f"      - {{address: 127.0.0.1:{port}, max_concurrency: {cap}}}\n" + queue)


def test_requests_wait_for_a_slot_in_order(env):
    sim = env.sim("acc", latency_ms=200, jitter=0, token_ms=0, slots=64)
    px = env.proxy(_pool(sim.port, 2))  # two workers share the two slots
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda _: complete(px.port), range(8)))
    assert [r[0] for r in results] == [200] * 8
    st = sim_stats(sim.port)
    assert st["max_active"] == 2 and st["completions"] == 8, st
    q = status(px.admin)["pools"][0]["queue"]
    assert q["enqueued"] >= 5 and q["granted"] == q["enqueued"] and q["length"] == 0, q


def test_full_queue_answers_503_with_retry_after(env):
    sim = env.sim("acc", latency_ms=1000, jitter=0, token_ms=0, slots=64)
    px = env.proxy(_pool(sim.port, 1, "    queue: {max: 1}\n"))
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        first = ex.submit(complete, px.port)
        wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first request in service")
        second = ex.submit(complete, px.port)
        wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 1,
                   "the second request to queue")
        st, h, body = complete(px.port)  # no room left
        assert st == 503 and h["retry-after"] == ["1"] and b"queue is full" in body, (st, body)
        assert first.result()[0] == 200 and second.result()[0] == 200
    assert status(px.admin)["pools"][0]["queue"]["overflows"] == 1


def test_queue_timeout_503(env):
    sim = env.sim("acc", latency_ms=3000, jitter=0, token_ms=0, slots=64)
    px = env.proxy(_pool(sim.port, 1, "    queue: {timeout_ms: 200}\n"))
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        first = ex.submit(complete, px.port)
        wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first request in service")
        st, h, body = complete(px.port)
        assert st == 503 and h["retry-after"] == ["1"] and b"queue.timeout_ms" in body, body
        assert first.result()[0] == 200
    q = status(px.admin)["pools"][0]["queue"]
    assert q["timeouts"] == 1 and q["length"] == 0, q


def test_client_leaving_the_queue_frees_its_place(env):
    sim = env.sim("acc", latency_ms=3000, jitter=0, token_ms=0, slots=64)
    px = env.proxy(_pool(sim.port, 1, "    queue: {max: 1}\n"))
    first = threading.Thread(target=lambda: complete(px.port), daemon=True)
    first.start()
    wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first request in service")
    s = socket.create_connection(("127.0.0.1", px.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 1, "it to queue")
    s.close()  # gives up while waiting
    wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 0,
               "the queue to let it go")
    # ...at once, not when the slot freed: the first request is still in service
    assert sim_stats(sim.port)["completions"] == 0
    assert status(px.admin)["pools"][0]["queue"]["granted"] == 0
    # its place is free again: a new request queues instead of overflowing, and is served
    st, _, _ = complete(px.port)
    assert st == 200
    first.join(10)
    assert sim_stats(sim.port)["completions"] == 2


def test_queue_metrics(env):
    sim = env.sim("acc", latency_ms=0, token_ms=0)
    px = env.proxy(_pool(sim.port, 4))
    assert complete(px.port)[0] == 200
    st, _, body = request(px.admin, "GET", "/metrics")
    assert b'accelnet_pool_queue_length{pool="gpu"} 0' in body
    assert b'accelnet_pool_queue_timeouts_total{pool="gpu"} 0' in body


def test_queued_requests_go_to_a_backend_that_comes_back(env):
    import signal
    from harness import BIN, backend_state
    busy = env.sim("busy", latency_ms=20000, jitter=0, token_ms=0, slots=64)
    spare = env.sim("spare", latency_ms=0, token_ms=0)
    spare_port = spare.port
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{busy.port}, max_concurrency: 1}}\n"
                   f"      - {{address: 127.0.0.1:{spare_port}, max_concurrency: 1}}\n"
                   "    health: {path: /health, interval_ms: 100, fall: 1, rise: 1}\n"
                   "    queue: {timeout_ms: 15000}\n",
                   extra="timeouts: {shutdown_ms: 200}\n")  # the 20 s request is not waited for
    env.stop(spare, signal.SIGKILL)
    wait_until(lambda: not backend_state(px.admin, f"127.0.0.1:{spare_port}")["up"],
               "the spare to be marked down")
    def occupy():  # the busy backend's only slot for 20 s: never waited for, and cut when the
        try:       # proxy stops at the test's end
            complete(px.port)
        except OSError:
            pass
    threading.Thread(target=occupy, daemon=True).start()
    wait_until(lambda: sim_stats(busy.port)["active"] == 1, "the busy slot taken")
    result = []
    queued = threading.Thread(target=lambda: result.append(complete(px.port)), daemon=True)
    queued.start()
    wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 1, "it to queue")
    env.start([BIN, "sim", "--listen", f"127.0.0.1:{spare_port}", "--name", "back",
               "--latency-ms", "0"], "sim-back", wait_port=spare_port)
    queued.join(14)
    st, h, _ = result[0]  # served by the returning backend, long before the busy slot frees
    assert st == 200 and h["x-served-by"] == ["back"], (st, h)


def test_a_flooding_tenant_cannot_fill_the_queue_for_everyone(env):
    """Issue 12: one tenant filling queue.max used to make every other tenant's request 503.
    Now a newcomer from a shorter line takes the place of the flooder's newest request."""
    sim = env.sim("acc", latency_ms=600, jitter=0, token_ms=0, slots=64)
    px = env.proxy(_pool(sim.port, 1, "    queue: {max: 3}\n") +
                   "routes:\n  - pool: gpu\n    tenant_header: X-Tenant\n")

    def as_tenant(t):
        return request(px.port, "POST", "/v1/completions", body=b'{"prompt":"hi"}',
                       headers={"X-Tenant": t, "Content-Type": "application/json"}, timeout=30)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        flood = [ex.submit(as_tenant, "flood")]
        wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the first request in service")
        for i in range(3):
            flood.append(ex.submit(as_tenant, "flood"))
            wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == i + 1,
                       "the flood to queue")
        light = as_tenant("light")  # the queue is full of the flooder's requests
        assert light[0] == 200, light
        codes = sorted(f.result()[0] for f in flood)
        assert codes == [200, 200, 200, 503], codes
        pushed = [f.result() for f in flood if f.result()[0] == 503][0]
        assert b"went to a tenant with fewer requests waiting" in pushed[2], pushed[2]
    # the pushed-out request counts as an overflow; the queue ends empty
    q = status(px.admin)["pools"][0]["queue"]
    assert q["length"] == 0 and q["overflows"] == 1, q
