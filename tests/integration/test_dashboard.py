"""GET /dashboard on the admin listener (issue 13): the page, its script and style sheet
served with a Content-Security-Policy and without the token (they hold no data; the connection
closed after each, as after a 401), the feed
(/dashboard.json) behind the token with histogram buckets that add up; and the page itself in
headless Chromium under real traffic: it asks for the token, takes it from #token= (then
drops it from the address; a malformed one is refused like a wrong one, one with characters
no header carries is called not a token), draws points on every
traffic chart and one table row per backend, with nothing on the console. Names from the config
are text (a pool named with markup shows as written, runs nothing), and a backend in two pools
is two series on the charts, told apart by the pool. The screenshot is kept: build/artifacts/dashboard.png (next to
the binary under test), its path printed.

Skipped, saying so, only when Debian's chromium is not installed (scripts/deps.sh installs it)."""

ENVIRONMENT = True  # a test of the machine's tools with accelnet (run.py --no-environment)

import json
import os
import threading

from browser import Browser, chromium
from harness import BIN, complete, free_port, port_open, raw, request, wait_until

TOKEN = "dash-t0ken"

# Per chart: [points of each polyline], and how many lie above the baseline (a value > 0).
CHARTS_JS = """JSON.stringify(Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const lines = Array.from(f.querySelectorAll('polyline'));
  const pts = lines.flatMap(l => l.getAttribute('points').trim().split(' '));
  const svg = f.querySelector('svg');
  const h = svg ? svg.viewBox.baseVal.height : 0;
  return {id: f.id, points: pts.length,
          above: pts.filter(p => parseFloat(p.split(',')[1]) < h - 4 - 0.5).length};
}))"""
LEGEND_JS = """JSON.stringify(Array.from(
  document.querySelectorAll('#chart-inflight .legend span')).map(s => s.textContent))"""
# A pool name that is markup: the page must show it as text, never run it.
MARKUP_POOL = "gpus <img src=x onerror=\"window.__xss=1\">"
ROWS_JS = """JSON.stringify(Array.from(document.querySelectorAll('#backends tbody tr')).map(
  tr => Array.from(tr.cells).map(td => td.textContent)))"""


def _proxy_with_token(env, ports, pool="gpus", spare=()):
    """A gateway with an admin token; pool <pool> of <ports> takes /v1/, pool spare (when
    <spare> names ports) takes nothing."""
    token = env.write("admin.token", TOKEN + "\n")
    os.chmod(token, 0o600)
    admin, port = free_port(), free_port()
    pools = "pools:\n"
    for name, members in ((pool, ports), ("spare", spare)):
        if not members:
            continue
        pools += f"  - name: {json.dumps(name)}\n    backends:\n" + "".join(
            f"      - {{address: 127.0.0.1:{p}, max_concurrency: 2}}\n" for p in members)
        pools += ("    health: {path: /health, interval_ms: 200, fall: 2, rise: 1}\n"
                  "    queue: {max: 100, timeout_ms: 10000}\n")
    path = env.write("proxy.yaml", f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"admin:\n  address: 127.0.0.1:{admin}\n  token_file: {token}\n" +
                     pools + "routes:\n  - match: {path_prefix: /v1/}\n"
                     f"    pool: {json.dumps(pool)}\n    api: openai\n")
    px = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    wait_until(lambda: port_open(admin), "admin port")
    px.port, px.admin = port, admin
    return px


class Traffic:
    """Clients sending completions (plain and streamed) until stopped: more at once than the
    backends have slots, so that the queue fills too."""

    def __init__(self, port, clients=6):
        self.stop = threading.Event()
        self.sent = 0
        self.threads = [threading.Thread(target=self._run, args=(port, i), daemon=True)
                        for i in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self, port, i):
        while not self.stop.is_set():
            body = {"prompt": "hi", "max_tokens": 8}
            if i % 2:
                body["stream"] = True
            try:
                complete(port, json.dumps(body))
                self.sent += 1
            except OSError:
                pass

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)


def test_assets_and_feed_over_http(env):
    sim = env.sim("a", latency_ms=5)
    px = _proxy_with_token(env, [sim.port])
    for path, ctype in (("/dashboard", "text/html"), ("/dashboard.js", "text/javascript"),
                        ("/dashboard.css", "text/css")):
        st, hdrs, body = request(px.admin, "GET", path)  # no token: the files hold no data
        assert st == 200 and hdrs["content-type"][0].startswith(ctype), (path, st, hdrs)
        csp = hdrs["content-security-policy"][0]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp, csp
        assert "'unsafe-inline'" not in csp, csp
        assert hdrs["x-content-type-options"] == ["nosniff"], hdrs
        assert hdrs["referrer-policy"] == ["no-referrer"], hdrs  # the address goes nowhere
        assert "cache-control" in hdrs and body, hdrs
        own = body.replace(b"http://www.w3.org/2000/svg", b"")  # a name, not a load
        assert b"http://" not in own and b"https://" not in own, path  # nothing from elsewhere
    st, hdrs, _ = request(px.admin, "HEAD", "/dashboard")
    assert st == 200, st
    # without the token, one file a connection (as one 401): no one holds the endpoint's
    # few connections with them; with it, the connection stays
    two = (b"GET /dashboard.css HTTP/1.1\r\nHost: a\r\n%s\r\n"
           b"GET /dashboard.js HTTP/1.1\r\nHost: a\r\nConnection: close\r\n%s\r\n")
    got = raw(px.admin, two % (b"", b""))
    assert got.count(b"HTTP/1.1 200") == 1 and b"Connection: close" in got, got[:300]
    bearer = f"Authorization: Bearer {TOKEN}\r\n".encode()
    assert raw(px.admin, two % (bearer, bearer)).count(b"HTTP/1.1 200") == 2
    st, _, body = request(px.admin, "POST", "/dashboard", body=b"")
    assert st in (401, 404), st
    st, _, _ = request(px.admin, "GET", "/dashboard.json")
    assert st == 401, st
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(4):
        assert complete(px.port)[0] == 200
    # with the token, any name in Host (a rebinding page has no token)
    st, hdrs, body = request(px.admin, "GET", "/dashboard.json",
                             headers=dict(auth, Host="gateway.example"))
    assert st == 200 and hdrs["content-type"] == ["application/json"], (st, hdrs)
    assert hdrs["cache-control"] == ["no-store"], hdrs
    feed = json.loads(body)
    st, _, body = request(px.admin, "GET", "/status", headers=auth)
    plain = json.loads(body)
    assert "bounds_ms" not in plain and "buckets" not in body.decode()
    bounds = feed["bounds_ms"]
    assert bounds == sorted(bounds) and len(bounds) >= 10, bounds
    be = feed["pools"][0]["backends"][0]
    ttfb = be["ttfb_ms"]
    assert len(ttfb["buckets"]) == len(bounds) + 1, ttfb
    assert sum(ttfb["buckets"]) == ttfb["count"] == be["requests"] == 4, be
    assert ttfb["sum_ms"] >= 4 * 5 * 0.9, ttfb
    assert set(plain["pools"][0]["backends"][0]) == set(be), "the feed is /status plus buckets"


def test_without_a_token_only_an_address_names_the_listener(env):
    """No admin.token_file (loopback): a page of some other site could point a name it owns at
    127.0.0.1 (DNS rebinding) and read the feed as its own. Only requests that name the
    listener by an IP address or localhost are answered; with a token, any name is."""
    sim = env.sim("a", latency_ms=1)
    px = env.proxy("pools:\n  - name: gpus\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}}}\n"
                   "routes:\n  - match: {path_prefix: /}\n    pool: gpus\n")
    port = px.admin
    for host in ("rebind.example", f"rebind.example:{port}", f"127.0.0.1.nip.io:{port}",
                 f"localhost.example:{port}", "[::1", f"0x7f.1:{port}"):
        for path in ("/dashboard.json", "/status", "/metrics", "/dashboard"):
            st, hdrs, body = request(port, "GET", path, headers={"Host": host})
            assert st == 403 and b"Host" in body, (host, path, st, body)
            assert hdrs.get("connection") == ["close"], hdrs
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST",
                 f"[::1]:{port}", f"10.1.2.3:{port}"):
        assert request(port, "GET", "/dashboard.json", headers={"Host": host})[0] == 200, host


def test_page_draws_live_traffic_in_chromium(env):
    if not chromium():
        print("skip: no chromium (Debian package chromium; scripts/deps.sh installs it)")
        return
    fast = env.sim("fast", latency_ms=20, slots=2, tokens=6, token_ms=5)
    slow = env.sim("slow", latency_ms=150, slots=2, tokens=6, token_ms=20)
    # the pool's name is markup; the fast backend is in a second pool too
    px = _proxy_with_token(env, [fast.port, slow.port], pool=MARKUP_POOL, spare=[fast.port])
    browser = Browser(env)
    base = f"http://127.0.0.1:{px.admin}/dashboard"

    # a token that is not one (a % without two hex digits): the feed refuses it and the
    # page asks for the token
    browser.open(base + "#token=%zz")
    wait_until(lambda: browser.evaluate(
        "!document.getElementById('token-form').hidden && "
        "document.getElementById('feed-state').textContent"), "the token form", timeout=30)
    assert browser.evaluate("document.getElementById('feed-state').textContent") == \
        "token needed"
    # one that no header can carry (a euro sign): said so, not taken for an unreachable listener
    browser.go(base + "#token=%E2%82%AC")
    wait_until(lambda: browser.evaluate(
        "document.getElementById('feed-state').textContent").startswith("not a token"),
        "the page to refuse a token that is not one", timeout=30)
    browser.clear_errors()  # the refused read of the feed is on the console, as it should be

    traffic = Traffic(px.port)
    try:
        browser.go(base + "#token=" + TOKEN)  # same page: the token comes by hashchange

        def drawn():
            charts = {c["id"]: c for c in json.loads(browser.evaluate(CHARTS_JS))}
            rows = json.loads(browser.evaluate(ROWS_JS))
            busy = ("chart-requests", "chart-latency", "chart-ttft", "chart-tokens",
                    "chart-inflight", "chart-queue", "chart-wait")
            return (all(charts[c]["above"] >= 3 for c in busy) and len(rows) == 3 and
                    all(int(r[-1]) > 0 for r in rows if r[0] == MARKUP_POOL)), charts, rows
        try:
            wait_until(lambda: drawn()[0], "the charts to draw the traffic", timeout=60)
        finally:
            ok, charts, rows = drawn()
            print(f"charts: {charts}\nrows: {rows}\nconsole: {browser.errors()}")
    finally:
        traffic.end()
    assert traffic.sent > 0
    assert browser.evaluate("location.hash") == "", "the token stays out of the address"
    assert TOKEN not in env.log(px), "the part after # never reaches the gateway, nor its log"
    assert browser.evaluate("document.getElementById('token-form').hidden") is True
    assert browser.evaluate("document.getElementById('feed-state').textContent") == "live"
    addresses = sorted((r[0], r[1]) for r in rows)
    assert addresses == sorted([(MARKUP_POOL, f"127.0.0.1:{fast.port}"),
                                (MARKUP_POOL, f"127.0.0.1:{slow.port}"),
                                ("spare", f"127.0.0.1:{fast.port}")]), rows
    assert all(r[2] in ("up", "full") for r in rows), rows
    assert charts["chart-errors"]["points"] > 0, charts  # drawn, at zero
    # the markup is text: no element made of it, nothing run
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    assert browser.evaluate("typeof window.__xss") == "undefined"
    # the fast backend of both pools: two series, told apart by the pool
    legend = json.loads(browser.evaluate(LEGEND_JS))
    assert len(legend) == 3, legend
    assert sum(n.startswith(f"spare 127.0.0.1:{fast.port} ") for n in legend) == 1, legend

    out_dir = os.path.join(os.path.dirname(os.path.abspath(BIN)), "artifacts")
    os.makedirs(out_dir, exist_ok=True)
    shot = browser.screenshot(os.path.join(out_dir, "dashboard.png"))
    assert os.path.getsize(shot) > 10000, shot
    print(f"screenshot: {shot}")
    errors = browser.errors()
    assert not errors, "console errors:\n" + "\n".join(errors)
    # and the check above would see a CSP refusal: an inline style, as a style= attribute
    browser.evaluate("document.body.setAttribute('style', 'color: red'), 0")
    wait_until(lambda: browser.evaluate("0") == 0 and  # takes in the events come meanwhile
               any("Content Security Policy" in e for e in browser.errors()),
               "the CSP refusal of an inline style on the console", timeout=10)
    browser.close()
