"""The control plane under hostile inputs (issue 24's review): a KV-events publisher flooding
large batches, a planted admin state file, a Redis writer inflating the instance set, and
runtime backends aimed at the proxy's own addresses."""

# Alone under run.py -j: the flood loads the machine (7 MB batches for up to 25 s) and counts
# /status answers while it lasts; the others named count requests passed against a rate, in a
# burst that must fit between two syncs or in a few seconds. The rest read state and refusals,
# which load only slows.
SERIAL = {"test_kv_event_flood_leaves_the_admin_api_answering",
          "test_a_redis_that_forgets_the_debt_hands_out_no_more_than_one_instance_alone",
          "test_fake_instances_in_redis_do_not_shrink_the_shares",
          "test_live_looking_fake_instances_are_believed_up_to_the_cap"}

import http.client
import json
import os
import shutil
import subprocess
import time

from harness import rss_kib
from harness import (BIN, complete, free_port, pool_yaml, port_open, request, served_by, status,
                     wait_until)
from test_cluster import _cluster, _instances, _redis
from test_ctl import _fast, _pool, _start, addr, api, backends, ctl


def _asan(pid):
    """Is process <pid> an AddressSanitizer build (make SAN=1)?"""
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


# A publisher process (apart, so that its sending does not slow this one's polling): binds
# tcp://127.0.0.1:PORT, waits for a subscriber, says "ready" on stdout, then sends batches of
# about SIZE bytes as fast as ZeroMQ takes them (16 queued at most, the rest dropped).
FLOOD = r"""
import random, sys, time, zmq, msgpack
port, size = int(sys.argv[1]), int(sys.argv[2])
rnd = random.Random(7)
events, total = [], 0
while total < size:
    hashes = [rnd.getrandbits(64) for _ in range(128)]
    tokens = [rnd.getrandbits(31) for _ in range(32 * 128)]
    events.append(["BlockStored", hashes, None, tokens, 32, None, "gpu"])
    total += 128 * 9 + 32 * 128 * 5
payload = msgpack.packb([time.time(), events, 0])
assert len(payload) > size
sock = zmq.Context.instance().socket(zmq.XPUB)
sock.setsockopt(zmq.LINGER, 0)
sock.setsockopt(zmq.SNDHWM, 16)
sock.bind(f"tcp://127.0.0.1:{port}")
assert sock.poll(15000) and sock.recv()[0] == 1
print("ready", flush=True)
seq = 0
while True:
    try:
        sock.send_multipart([b"kv@e0", seq.to_bytes(8, "big"), payload], copy=False,
                            flags=zmq.NOBLOCK)
    except zmq.Again:
        time.sleep(0.001)
    seq += 1
"""


def test_kv_event_flood_leaves_the_admin_api_answering(env):
    """Issue 24, finding 7: a publisher flooding 7 MB batches for 25 s once kept the main
    thread busy the whole time (/status took 24.9 s, answered once the flood was over) and
    grew the proxy by 300 MB. The admin API must keep answering between the batches -- its
    answers see the applied count grow, batch after batch, while the flood goes on -- and
    memory stay bounded. (Ordering, not a time limit: a loaded machine is only slower.)"""
    port = free_port()
    # niced: an engine publishes from its own machine, not from the proxy's CPUs
    pub = env.start(["nice", "-n", "19", "/usr/bin/python3", "-c", FLOOD, str(port),
                     str(7 << 20)], "publisher")
    px = env.proxy(
        "pools:\n  - name: gpu\n    balance: least-connections\n    backends:\n"
        f"      - {{address: 127.0.0.1:9, kv_events: 'tcp://127.0.0.1:{port}'}}\n",
        workers=1)
    wait_until(lambda: "ready" in env.log(pub), "the publisher's subscriber")
    start_rss = rss_kib(px.pid)
    # an ASan build keeps what is freed in a quarantine (256 MiB by default) before reusing it
    asan = _asan(px.pid)

    def kv():
        return status(px.admin)["pools"][0]["backends"][0]["kv_events"]

    wait_until(lambda: kv()["applied"]["stored"] > 0, "the flood reaching the proxy")
    seen, peak_rss, polls = set(), start_rss, 0
    end = time.monotonic() + 25
    while time.monotonic() < end and len(seen) < 8:
        st, _, body = request(px.admin, "GET", "/status", timeout=60)
        assert st == 200 and pub.poll() is None  # answered while the flood goes on
        seen.add(json.loads(body)["pools"][0]["backends"][0]["kv_events"]["applied"]["stored"])
        polls += 1
        peak_rss = max(peak_rss, rss_kib(px.pid))
    applied = kv()["applied"]["stored"]
    env.stop(pub)
    assert pub.returncode is not None and applied > 100, applied
    # the main thread held by the flood answers once it is over: one or two counts at most
    assert len(seen) >= 8, f"{polls} /status answers during the flood saw only " \
        f"{sorted(seen)} applied (RSS {start_rss} KiB, at most {peak_rss} KiB)"
    # ZeroMQ holds at most 8 messages of up to 16 MiB for the proxy; the rest is fixed room
    bound = 2 * start_rss + 8 * 16 * 1024 + (256 * 1024 if asan else 0)
    assert peak_rss < bound, f"RSS grew from {start_rss} KiB to {peak_rss} KiB (bound {bound})"
    assert px.poll() is None


# --- admin.state_file: a planted file or link is refused, nothing outside it written ---------


def _state_doc(address):
    return json.dumps({"version": 1, "maintenance": 0,
                       "pools": {"gpu": [{"address": address, "source": "api",
                                          "weight": 7}]}})


def test_state_file_tmp_symlink_does_not_overwrite_its_target(env):
    """Issue 24, finding 8: a symlink planted at PATH.tmp once made a change truncate and
    overwrite the file it points at (root-owned, anywhere)."""
    a = _fast(env, "a")
    victim = env.write("victim.conf", "precious\n")
    state = os.path.join(env.dir, "state.json")
    os.symlink(victim, state + ".tmp")
    px = _start(env, _pool("gpu", [a]), state_file=state)
    ctl(px, "weight", "gpu", addr(a), "3", check=0)
    assert open(victim).read() == "precious\n"
    assert not os.path.islink(state) and json.load(open(state))["pools"]["gpu"][0]["weight"] == 3
    assert not os.path.lexists(state + ".tmp")
    # a link planted at PATH itself is replaced by the next write, its target untouched
    os.unlink(state)
    os.symlink(victim, state)
    ctl(px, "weight", "gpu", addr(a), "4", check=0)
    assert open(victim).read() == "precious\n"
    assert not os.path.islink(state) and json.load(open(state))["pools"]["gpu"][0]["weight"] == 4
    env.finish()


def test_untrusted_state_file_is_refused_at_start(env):
    """Issue 24, finding 8: at start a symlinked, group- or other-writable, or foreign-owned
    state file was applied as root (a planted file adds backends). Each is refused whole,
    the proxy starts from its config, and what the file pointed at is left alone."""
    a, evil = _fast(env, "a"), _fast(env, "evil")
    planted = env.write("planted.json", _state_doc(addr(evil)))
    os.chmod(planted, 0o644)
    cases = {"link": lambda p: os.symlink(planted, p),
             "group-writable": lambda p: (open(p, "w").write(_state_doc(addr(evil))),
                                          os.chmod(p, 0o664)),
             "other-writable": lambda p: (open(p, "w").write(_state_doc(addr(evil))),
                                          os.chmod(p, 0o646)),
             "foreign": lambda p: (open(p, "w").write(_state_doc(addr(evil))),
                                   os.chmod(p, 0o644), os.chown(p, 54321, 54321))}
    for i, (name, plant) in enumerate(cases.items()):
        state = os.path.join(env.dir, f"state-{name}.json")
        plant(state)
        px = _start(env, _pool("gpu", [a]), state_file=state, name=f"proxy-{name}")
        assert addr(evil) not in backends(px), name
        assert {served_by(complete(px.port)[1]) for _ in range(4)} == {"a"}, name
        log = env.log(px)
        assert "refused" in log and f"state file {state}" in log, (name, log)
        assert open(planted).read() == _state_doc(addr(evil)), name
        env.stop(px)
    # the same file, owned by root and writable by root alone, is applied
    state = env.write("state-good.json", _state_doc(addr(evil)))
    os.chmod(state, 0o600)
    px = _start(env, _pool("gpu", [a]), state_file=state, name="proxy-good")
    assert backends(px)[addr(evil)]["weight"] == 7
    env.finish()


def test_state_file_content_is_not_echoed_into_the_log(env):
    """Issue 24, finding 8: a state file that does not parse had its first word echoed into
    the log (read as root: a way to leak a line of a file the proxy could read)."""
    a = _fast(env, "a")
    for i, text in enumerate(['"s3cr3t-Passw0rd" and more\n', "[s3cr3t]\n",
                              '{"version": 1, "s3cr3t": }\n']):
        state = env.write(f"state{i}.json", text)
        px = _start(env, _pool("gpu", [a]), state_file=state, name=f"proxy{i}")
        assert complete(px.port)[0] == 200
        log = env.log(px)
        assert f"state file {state}: not JSON" in log, log
        assert "s3cr3t" not in log and "3cr" not in log, log
        env.stop(px)
    env.finish()


# --- cluster: what a Redis writer can make the instances believe --------------------------


def _redis_cli(redis, *args):
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    return subprocess.run([cli, "-p", str(redis.port), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def _burst(px, n):
    """<n> requests at once, one after another on one connection: how many passed."""
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    ok = 0
    for _ in range(n):
        c.request("GET", "/x")
        r = c.getresponse()
        r.read()
        ok += r.status == 200
    c.close()
    return ok


def _one_instance(env, extra="", sync_ms=100):
    sim = env.sim("a", latency_ms=0, token_ms=0)
    redis = _redis(env)
    # 200,000 members that never expire, as a writer would plant them
    _redis_cli(redis, "EVAL", "for i = 1, 200000 do redis.call('ZADD', KEYS[1], 9e15, "
               "'fake' .. i) end return 0", "1", "accelnet:instances")
    body = ("pools:\n" + pool_yaml("p", [sim.port]) +
            "routes:\n  - pool: p\n    rate_limit: {per_route: 1/s, burst: 50}\n")
    px, = _instances(env, redis.port, body, n=1, extra=extra, sync_ms=sync_ms)
    wait_until(lambda: _cluster(px).get("accelnet_cluster_redis_up") == 1, "Redis up")
    return redis, px


def test_fake_instances_in_redis_do_not_shrink_the_shares(env):
    """Issue 24, finding 9: whoever can write to Redis once shrank every instance's share of
    every shared limit by adding fake members to the live set (200,001 instances: a burst of
    50 let almost nothing through). Entries expiring later than any instance writes its own
    are not counted."""
    redis, px = _one_instance(env)
    assert _cluster(px)["accelnet_cluster_instances"] == 1
    assert 48 <= _burst(px, 60) <= 52
    assert px.poll() is None


def test_live_looking_fake_instances_are_believed_up_to_the_cap(env):
    """Members that look alive (a writer re-planting them before they expire) count, but
    never past cluster.max_instances, and the log says so."""
    # one sync a second, and the burst sent just after one: all of it between two syncs (a
    # sync in its middle hands out a quarter of what is left, passing more than 20; at 100 ms
    # a loaded machine's burst outlasted one)
    redis, px = _one_instance(env, extra=", max_instances: 4", sync_ms=1000)
    now_ms = int(_redis_cli(redis, "TIME").split()[0]) * 1000
    _redis_cli(redis, "EVAL", "for i = 1, 1000 do redis.call('ZADD', KEYS[1], ARGV[1], "
               "'alive' .. i) end return 0", "1", "accelnet:instances", str(now_ms + 60000))
    wait_until(lambda: _cluster(px)["accelnet_cluster_instances"] == 4, "the cap believed")
    assert "more than cluster.max_instances; 4 believed" in env.log(px)
    synced = _cluster(px)["accelnet_cluster_syncs_total"]
    wait_until(lambda: _cluster(px)["accelnet_cluster_syncs_total"] > synced, "a sync")
    # a quarter of the burst each sync, never less: not 1/1001 of it
    assert 10 <= _burst(px, 60) <= 20
    assert px.poll() is None


# --- the admin API: backends at the proxy's own addresses ---------------------------------


def test_backend_at_the_proxys_own_addresses_is_refused(env):
    """Issue 24, finding 10: the runtime API accepted a backend at any address, the admin
    port included (a client's request then reaches the admin API from the proxy itself).
    The proxy's own listeners and admin endpoint are refused, through the API and from the
    state file; any other address is still accepted."""
    a, b = _fast(env, "a"), _fast(env, "b")
    state = os.path.join(env.dir, "state.json")
    px = _start(env, _pool("gpu", [a], extra="    spare_backends: 4"), state_file=state)
    own = [f"127.0.0.1:{px.admin}", f"127.0.0.1:{px.port}", f"[::ffff:127.0.0.1]:{px.admin}"]
    for address in own:
        st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": address})
        assert st == 400 and "own" in doc["error"], (address, st, doc)
        assert address not in backends(px)
    rc, out, err = ctl(px, "add", "gpu", f"127.0.0.1:{px.admin}")
    assert rc != 0 and "admin endpoint" in err, (out, err)
    assert addr(b) not in backends(px)
    ctl(px, "add", "gpu", addr(b), check=0)
    assert addr(b) in backends(px)
    # a state file naming the admin endpoint adds nothing at the next start
    env.stop(px)
    doc = json.load(open(state))
    doc["pools"]["gpu"].append({"address": f"127.0.0.1:{px.admin}", "source": "api"})
    with open(state, "w") as f:
        json.dump(doc, f)
    px2 = _start(env, _pool("gpu", [a], extra="    spare_backends: 4"), state_file=state,
                 name="proxy-again", ports=(px.port, px.admin))
    got = backends(px2)
    assert addr(b) in got and f"127.0.0.1:{px.admin}" not in got, got
    assert "admin endpoint: refused" in env.log(px2)
    env.finish()


def test_admin_backend_networks_bound_where_backends_may_be_added(env):
    """admin.backend_networks: the API adds backends only inside the listed blocks (the
    config's own backends are not checked); a bad block is refused at load."""
    a, b = _fast(env, "a"), _fast(env, "b")
    px = _start(env, _pool("gpu", [a], extra="    spare_backends: 4"),
                extra="  backend_networks: [10.0.0.0/8, '127.0.0.1']\n")
    for address in ["192.0.2.1:80", "127.0.0.2:80", "[2001:db8::1]:80"]:
        st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": address})
        assert st == 400 and "outside admin.backend_networks" in doc["error"], (address, doc)
    st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": "10.9.8.7:8000"})
    assert st == 201, doc
    ctl(px, "add", "gpu", addr(b), check=0)
    # the admin endpoint stays refused though it is inside the list
    st, _, doc = api(px, "POST", "/api/pools/gpu/backends",
                     {"address": f"127.0.0.1:{px.admin}"})
    assert st == 400 and "admin endpoint" in doc["error"], doc
    assert set(backends(px)) == {addr(a), addr(b), "10.9.8.7:8000"}
    path = env.write("bad.yaml", "listen: [127.0.0.1:1]\nadmin:\n  address: 127.0.0.1:2\n"
                     "  backend_networks: [10.0.0.0/33]\npools:\n  - name: p\n"
                     "    backends: [{address: 127.0.0.1:3}]\n")
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:4:"), r.stderr
    env.finish()


def test_a_redis_that_forgets_the_debt_hands_out_no_more_than_one_instance_alone(env):
    """Review of issue 24: a Redis writer deleting the shared buckets' keys as fast as it
    can (or a Redis answering zero usage) made every sync hand the instance a fresh burst: a
    tenant passed about a burst per sync. A request rate's debt is never taken below what
    the store said last, less the time since, plus what this instance sent: the instance
    passes no more than it would alone, rate x T + burst."""
    sim = env.sim("a", latency_ms=0, token_ms=0)
    redis = _redis(env)
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    body = ("pools:\n" + pool_yaml("p", [sim.port]) +
            "routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
            "    rate_limit: {per_tenant: 5/s, burst: 5}\n")
    px, = _instances(env, redis.port, body, n=1)
    wait_until(lambda: _cluster(px).get("accelnet_cluster_redis_up") == 1, "Redis up")
    env.start([cli, "-p", str(redis.port), "-r", "-1", "-i", "0.002", "EVAL",
               "for _, k in ipairs(redis.call('KEYS', 'accelnet:rl:*')) do "
               "redis.call('DEL', k) end return 0", "0"], "forgetter")
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    passed, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 4:
        c.request("GET", "/x", headers={"X-Tenant": "t1"})
        r = c.getresponse()
        r.read()
        passed += r.status == 200
        time.sleep(0.002)
    took = time.monotonic() - t0
    c.close()
    alone = 5 * took + 5
    assert passed <= alone + 3, (passed, alone)
    assert passed >= 5 * took - 3, (passed, alone)  # and the rate still passes
    assert px.poll() is None


def test_prefix_hints_injected_through_redis_stay_inside_the_pool(env):
    """Review of issue 24: what a Redis writer can do through the affinity stream. Entries
    naming an address that is not in the pool are passed over (nothing is added, no
    request goes there); entries naming a pool backend are taken in as hints, as another
    instance's would be, and that backend's index stays within llm.cache_blocks."""
    sims = [env.sim(f"s{i}", latency_ms=0, tokens=1, token_ms=0) for i in range(2)]
    lines = ["pools:", "  - name: gpu", "    balance: llm",
             "    llm: {block_bytes: 64, cache_blocks: 1024}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4}}" for s in sims]
    redis = _redis(env)
    px, = _instances(env, redis.port, "\n".join(lines) + "\n", n=1)
    wait_until(lambda: _cluster(px).get("accelnet_cluster_redis_up") == 1, "Redis up")
    home = f"127.0.0.1:{sims[0].port}"
    # 3,000 entries for an address outside the pool, 3,000 of 64 random hashes for s0
    _redis_cli(redis, "EVAL", "for i = 1, 3000 do "
               "redis.call('XADD', KEYS[1], '*', 'i', 'evil', 'b', '10.6.6.6:80', 'h', "
               "string.rep(string.char(i % 251 + 1), 512)) "
               "redis.call('XADD', KEYS[1], '*', 'i', 'evil', 'b', ARGV[1], 'h', "
               "string.rep(string.char(i % 251 + 1, i % 241 + 2, 7, 9, i % 239 + 3, 1, 2, "
               "i % 233 + 4), 64)) end return 0", "1", "accelnet:aff:gpu", home)
    wait_until(lambda: _cluster(px)["accelnet_cluster_prefixes_received_total"] == 3000,
               "the pool backend's entries taken in", timeout=30)
    st = status(px.admin)
    addrs = {b["address"]: b for b in st["pools"][0]["backends"]}
    assert set(addrs) == {f"127.0.0.1:{s.port}" for s in sims}, addrs
    assert 0 < addrs[home]["llm_index_blocks"] <= 1024, addrs[home]
    # requests still go to the pool's backends only
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    for k in range(10):
        c.request("POST", "/v1/completions", body=json.dumps({"model": "m", "prompt": "x" * k}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 200
    c.close()
    assert px.poll() is None


def test_a_wildcard_listener_is_refused_at_every_local_address(env):
    """A listener on 0.0.0.0:PORT is reached at PORT on any loopback or local interface
    address: each is refused as a backend; the same port on another host is not."""
    a = _fast(env, "a")
    port, admin = free_port(), free_port()
    text = (f"workers: 1\nlisten:\n  - address: 0.0.0.0:{port}\n"
            f"admin:\n  address: 127.0.0.1:{admin}\npools:\n"
            + _pool("gpu", [a], extra="    spare_backends: 4"))
    px = env.start([BIN, "proxy", "-c", env.write("wild.yaml", text)], "proxy",
                   wait_port=port)
    px.port, px.admin = port, admin
    wait_until(lambda: port_open(admin), "admin port")
    local = [f"127.0.0.1:{port}", f"127.9.9.9:{port}", f"0.0.0.0:{port}"]
    r = subprocess.run(["hostname", "-I"], capture_output=True, text=True)
    local += [f"{ip}:{port}" for ip in r.stdout.split() if "." in ip][:2]
    for address in local:
        st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": address})
        assert st == 400 and "own listener" in doc["error"], (address, doc)
    st, _, doc = api(px, "POST", "/api/pools/gpu/backends", {"address": f"192.0.2.1:{port}"})
    assert st == 201, doc
    env.finish()
