"""What a user types: curl against the gateway, and `accelnet demo` as the README tours it."""

SERIAL = True  # load, timing or fixed ports: run alone under run.py -j

import collections
import os
import signal
import subprocess

from harness import BIN, pool_yaml, port_open, wait_until


def curl(*args, timeout=30):
    r = subprocess.run(["curl", "-sS", *args], capture_output=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_curl_large_upload_with_expect_continue(env):
    sim = env.sim("s", latency_ms=0, token_ms=0)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [sim.port]))
    path = os.path.join(env.dir, "upload.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(1000000))  # under the simulator's 1 MiB body limit
    # curl waits for the 100 before sending the body (it sends anyway after a second, so
    # the proof is the interim response in its trace)
    rc, out, err = curl("-v", "-H", "Expect: 100-continue", "--data-binary", f"@{path}",
                        f"http://127.0.0.1:{px.port}/upload")
    assert rc == 0, err
    assert b"HTTP/1.1 100 Continue" in err, err
    assert b"(1000000 body bytes)" in out, out


def test_curl_chunked_upload_and_sse(env):
    sim = env.sim("s", latency_ms=0, token_ms=1, tokens=4)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [sim.port]))
    rc, out, err = curl("-H", "Transfer-Encoding: chunked", "--data-binary", "hello chunked",
                        f"http://127.0.0.1:{px.port}/echo")
    assert rc == 0 and b"(13 body bytes)" in out, (out, err)
    rc, out, err = curl("-N", f"http://127.0.0.1:{px.port}/v1/chat/completions",
                        "-d", '{"stream":true,"messages":[]}')
    assert rc == 0 and out.count(b"data: ") == 5 and b"data: [DONE]" in out, out


def test_demo_as_in_the_readme(env):
    for port in (8080, 8399, 9101, 9102, 9103):
        assert not port_open(port), f"port {port} is busy: the demo needs it"
    demo = env.start([BIN, "demo"], "demo", wait_port=8080)
    wait_until(lambda: port_open(8399), "the demo's admin port")
    seen = collections.Counter()
    for _ in range(6):
        rc, out, err = curl("-si", "http://localhost:8080/v1/completions", "-d",
                            '{"prompt":"hi"}')
        assert rc == 0 and out.startswith(b"HTTP/1.1 200"), out
        for line in out.split(b"\r\n"):
            if line.lower().startswith(b"x-served-by:"):
                seen[line.split(b":", 1)[1].strip()] += 1
    assert seen == {b"accel-fast": 2, b"accel-medium": 2, b"accel-slow": 2}, seen
    rc, out, _ = curl("-sN", "http://localhost:8080/v1/chat/completions", "-d",
                      '{"stream":true,"messages":[]}')
    assert out.count(b"data: ") == 17, out
    rc, out, _ = curl("-s", "http://localhost:8399/status")
    assert b'"up":true' in out
    demo.send_signal(signal.SIGINT)
    assert demo.wait(15) == 0


def test_shutdown_deadline_cuts_long_streams(env):
    sim = env.sim("s", latency_ms=0, tokens=100, token_ms=1000)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [sim.port]),
                   extra="timeouts: {shutdown_ms: 300}\n")
    p = subprocess.Popen(["curl", "-sN", f"http://127.0.0.1:{px.port}/v1/completions", "-d",
                          '{"stream":true}'], stdout=subprocess.PIPE)
    first = p.stdout.readline()
    assert first.startswith(b"data: "), first
    px.send_signal(signal.SIGTERM)
    assert px.wait(15) == 0  # exits 0 once shutdown_ms has passed
    rest = p.stdout.read()
    assert b"[DONE]" not in rest  # the stream was cut, as the deadline says
    p.wait(15)
