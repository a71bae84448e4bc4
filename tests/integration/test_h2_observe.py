"""The protocol mix (issue 29: metrics, access log, /debug per stream, `accelnet top`): each
request says which protocol its client spoke, HTTP/1.0, HTTP/1.1 or HTTP/2, in the access
log's `protocol`, /debug/requests' `protocol`, the counter accelnet_client_requests_total
and `accelnet top`'s "requests by protocol" line."""

import json
import os
import urllib.request

from harness import echo_backend, pool_yaml, raw, request, wait_until
from test_h2 import H2Client
from test_top import _top


def _logged(env, fmt):
    """A proxy before an echo backend, its access log in <fmt>: the proxy and the log's path."""
    be = echo_backend(env)
    log = os.path.join(env.dir, "access.log")
    return env.proxy("pools:\n" + pool_yaml("p", [be.port]),
                     extra=f"access_log: {{path: {log}, format: {fmt}}}\n"), log


def test_h2_protocol_mix_in_log_metrics_debug_and_top(env):
    px, log = _logged(env, "json")
    assert request(px.port, "GET", "/one")[0] == 200
    assert b" 200 " in raw(px.port, b"GET /ten HTTP/1.0\r\nHost: x\r\n\r\n").split(b"\r\n")[0]
    c = H2Client(px.port)
    for path in ("/two/a", "/two/b"):
        sid = c.send("GET", path)
        c.wait(lambda: sid in c.ended)
    c.close()

    def lines():
        with open(log) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    wait_until(lambda: len(lines()) == 4, "four lines in the access log")
    got = sorted((r["path"], r["protocol"]) for r in lines())
    assert got == [("/one", "HTTP/1.1"), ("/ten", "HTTP/1.0"), ("/two/a", "HTTP/2"),
                   ("/two/b", "HTTP/2")], got
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{px.admin}/metrics").read().decode()
    for proto, n in (("HTTP/1.0", 1), ("HTTP/1.1", 1), ("HTTP/2", 2)):
        assert f'accelnet_client_requests_total{{protocol="{proto}"}} {n}\n' in metrics, metrics
    dbg = json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{px.admin}/debug/requests").read())
    assert {r["protocol"] for r in dbg["slowest"]} == {"HTTP/1.0", "HTTP/1.1", "HTTP/2"}, dbg
    rc, out, err = _top(["--admin", f"127.0.0.1:{px.admin}", "--once", "--interval-ms", "200"])
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("requests by protocol:"))
    assert "HTTP/1.0 0.0/s (1)" in line and "HTTP/1.1 0.0/s (1)" in line, line
    assert "HTTP/2 0.0/s (2)" in line, line


def test_h2_combined_log_line_names_the_protocol(env):
    px, log = _logged(env, "combined")
    assert request(px.port, "GET", "/one")[0] == 200
    c = H2Client(px.port)
    sid = c.send("GET", "/two")
    c.wait(lambda: sid in c.ended)
    c.close()

    def text():
        with open(log) as f:
            return f.read()
    wait_until(lambda: text().count("\n") == 2, "two lines in the access log")
    assert '"GET /one HTTP/1.1" 200' in text() and '"GET /two HTTP/2" 200' in text(), text()


def test_h2_interim_103_goes_before_the_response(env):
    """A backend's 103 Early Hints reaches an HTTP/2 client as an informational HEADERS frame
    before the final response (it was dropped), as an HTTP/1.1 client gets it."""
    from harness import ScriptedBackend
    be = ScriptedBackend(lambda n, req: (
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False))
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("b", [be.port]))
    c = H2Client(px.port)
    sid = c.send("GET", "/")
    c.wait(lambda: sid in c.ended)
    c.close()
    assert c.interim.get(sid) == [{":status": "103", "link": "</a.css>; rel=preload"}], c.interim
    assert c.status[sid] == 200 and c.body[sid] == b"ok"
