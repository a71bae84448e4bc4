"""deploy/ (issue 13): the Prometheus scrape config and alert rules pass promtool (check config,
check rules, and the rules' own unit tests), the Grafana dashboard is well-formed and has the
panels of /dashboard, every metric that the rules and the dashboard name is one that a
running accelnet exports in /metrics, and Debian's prometheus runs the shipped config against a
gateway with an admin token: scraped, every rule evaluated without error, and the gateway's
own alert on its way once it is gone."""

ENVIRONMENT = True  # a test of the machine's tools with accelnet (run.py --no-environment)

import json
import os
import re
import shutil
import subprocess
import urllib.parse

from harness import BIN, complete, free_port, pool_yaml, port_open, request, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROM = os.path.join(ROOT, "deploy", "prometheus")
GRAFANA = os.path.join(ROOT, "deploy", "grafana", "accelnet.json")
PAGE = os.path.join(ROOT, "src", "obs", "dashboard", "dashboard.html")
METRIC_RE = re.compile(r"\b(?:accelnet|process)_[a-z0-9_]+\b")


def _promtool(*args, cwd=PROM):
    assert shutil.which("promtool"), "no promtool: scripts/deps.sh installs Debian prometheus"
    r = subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, timeout=120,
                       check=False)
    out = (r.stdout + r.stderr).decode()
    assert r.returncode == 0, f"promtool {' '.join(args)}:\n{out}"
    assert "WARNING" not in out and "FAILED" not in out, out
    return out


def _grafana():
    with open(GRAFANA) as f:
        return json.load(f)


def _grafana_exprs(dash):
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    out += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return out


def test_promtool_checks_config_and_rules(env):
    out = _promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in out and "rule files found" in out, out
    assert "SUCCESS: 7 rules found" in _promtool("check", "rules", "alerts.yml")
    assert "SUCCESS" in _promtool("test", "rules", "alerts_test.yml")
    with open(os.path.join(PROM, "alerts.yml")) as f:
        rules = f.read()
    for alert in ("AccelnetDown", "AccelnetBackendDown", "AccelnetPoolDown", "AccelnetQueueFull",
                  "AccelnetErrorRatio", "AccelnetBackendErrorRatio", "AccelnetTTFTRegression"):
        assert f"alert: {alert}" in rules, alert
    # the commented-out authorization block is valid once a token file is named
    with open(os.path.join(PROM, "prometheus.yml")) as f:
        text = f.read()
    token = env.write("admin.token", "t0ken\n")
    text = re.sub(r"\n    # authorization:\n    #   type: Bearer\n    #   credentials_file: \S+",
                  f"\n    authorization:\n      type: Bearer\n      credentials_file: {token}", text)
    assert "credentials_file: " + token in text, "the authorization block moved"
    with open(os.path.join(env.dir, "prometheus.yml"), "w") as f:
        f.write(text)
    shutil.copy(os.path.join(PROM, "alerts.yml"), env.dir)
    _promtool("check", "config", "prometheus.yml", cwd=env.dir)


def test_grafana_dashboard_has_the_panels_of_the_page(env):
    dash = _grafana()
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), ids
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}" and t["expr"], p["title"]
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[0] == "datasource" and "instance" in names and "pool" in names, names
    with open(PAGE) as f:
        captions = re.findall(r"<figcaption>([^<]+)</figcaption>", f.read())
    assert len(captions) >= 8, captions
    titles = {p["title"] for p in dash["panels"]}
    for c in captions:  # "Latency, ms" on the page; Grafana says the unit itself
        assert c.split(",")[0] in titles, (c, sorted(titles))
    assert "Backends" in titles


def test_every_metric_named_is_exported(env):
    a, b = env.sim("a", latency_ms=1), env.sim("b", latency_ms=1)
    px = env.proxy("pools:\n" + pool_yaml("gpus", [a.port, b.port]) +
                   "routes:\n  - match: {path_prefix: /}\n    pool: gpus\n    api: openai\n")
    for _ in range(4):
        assert complete(px.port)[0] == 200
    st, _, body = request(px.admin, "GET", "/metrics")
    assert st == 200
    samples = [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]
    exported = {ln.split("{")[0].split(" ")[0] for ln in samples}
    labels = {k for ln in samples for k in re.findall(r'[{,]([a-z_]+)="', ln)}
    used = {}
    with open(os.path.join(PROM, "alerts.yml")) as f:
        used["deploy/prometheus/alerts.yml"] = METRIC_RE.findall(f.read())
    with open(os.path.join(PROM, "alerts_test.yml")) as f:
        used["deploy/prometheus/alerts_test.yml"] = METRIC_RE.findall(f.read())
    used["deploy/grafana/accelnet.json"] = METRIC_RE.findall("\n".join(_grafana_exprs(_grafana())))
    missing = [f"{where}: {name}" for where, names in used.items() for name in sorted(set(names))
               if name not in exported]
    assert all(used.values()), used
    assert not missing, "not in /metrics:\n" + "\n".join(missing)
    # and the labels they group or match by (job and instance are Prometheus's own)
    texts = [open(os.path.join(PROM, "alerts.yml")).read()] + _grafana_exprs(_grafana())
    named = set()
    for t in texts:
        for group in re.findall(r"\bby \(([^)]*)\)", t):
            named.update(x.strip() for x in group.split(",") if x.strip())
        named.update(re.findall(r"[{,]\s*([a-z_]+)\s*=~?\"", t))
    unknown = sorted(named - labels - {"job", "instance"})
    assert not unknown, f"labels not in /metrics: {unknown}"


def test_prometheus_scrapes_and_evaluates_every_rule(env):
    """The shipped config run by Debian's prometheus against a gateway with a token (the
    authorization block uncommented, the target and intervals changed, nothing else): the
    target is up, token and route figures arrive, every rule evaluates without error, and
    AccelnetDown is pending once the gateway stops."""
    prom = shutil.which("prometheus")
    assert prom, "no prometheus: scripts/deps.sh installs Debian prometheus"
    sim = env.sim("a", latency_ms=1, tokens=4, token_ms=1)
    token = env.write("admin.token", "scrape-t0ken\n")
    os.chmod(token, 0o600)
    px = env.proxy("pools:\n" + pool_yaml("gpus", [sim.port]) +
                   "routes:\n  - name: chat\n    match: {path_prefix: /}\n    pool: gpus\n"
                   "    api: openai\n")
    env.stop(px)  # again, with the token
    admin, port = px.admin, px.port
    text = open(os.path.join(env.dir, "proxy.yaml")).read().replace(
        f"address: 127.0.0.1:{admin}\n", f"address: 127.0.0.1:{admin}\n  token_file: {token}\n")
    cfg = env.write("proxy-token.yaml", text)
    gw = env.start([BIN, "proxy", "-c", cfg], "proxy-token", wait_port=port)
    wait_until(lambda: port_open(admin), "admin port")
    for _ in range(3):
        assert complete(port)[0] == 200
    with open(os.path.join(PROM, "prometheus.yml")) as f:
        conf = f.read()
    conf = re.sub(r"\n    # authorization:\n    #   type: Bearer\n    #   credentials_file: \S+",
                  f"\n    authorization:\n      type: Bearer\n      credentials_file: {token}", conf)
    conf = conf.replace('"127.0.0.1:8399"', f'"127.0.0.1:{admin}"')
    conf = re.sub(r"(scrape|evaluation)_interval: 15s", r"\1_interval: 1s", conf)
    assert f"127.0.0.1:{admin}" in conf and "credentials_file: " + token in conf
    with open(os.path.join(env.dir, "prometheus.yml"), "w") as f:
        f.write(conf)
    shutil.copy(os.path.join(PROM, "alerts.yml"), env.dir)
    web = free_port()
    env.start([prom, f"--config.file={env.dir}/prometheus.yml",
               f"--storage.tsdb.path={env.dir}/tsdb", f"--web.listen-address=127.0.0.1:{web}"],
              "prometheus", wait_port=web)

    wait_until(lambda: request(web, "GET", "/-/ready")[0] == 200, "prometheus ready", 60)

    def api(path):
        st, _, body = request(web, "GET", "/api/v1/" + path)
        assert st == 200, (path, st, body[:500])
        return json.loads(body)["data"]

    def scraped():
        r = api("query?query=" + urllib.parse.quote('up{job="accelnet"}'))["result"]
        return r and r[0]["value"][1] == "1"
    wait_until(scraped, "prometheus to scrape the gateway with its token", timeout=60)
    q = urllib.parse.quote('accelnet_route_tokens_total{route="chat",kind="completion"}')
    wait_until(lambda: api("query?query=" + q)["result"], "the route's token counter", 30)
    assert float(api("query?query=" + q)["result"][0]["value"][1]) >= 3 * 4

    def evaluated():
        rules = [r for g in api("rules")["groups"] for r in g["rules"]]
        return len(rules) == 7 and all(r["health"] == "ok" and r.get("lastEvaluation", "")
                                       [:4] not in ("", "0001") for r in rules), rules
    wait_until(lambda: evaluated()[0], "every rule evaluated", timeout=30)
    rules = evaluated()[1]
    assert all("lastError" not in r or not r["lastError"] for r in rules), rules
    firing = [r["name"] for r in rules if r.get("state") == "firing"]
    assert not firing, firing  # a healthy gateway raises no alert

    # the gateway gone: its own alert is on its way (pending for its `for:`), the job named
    # as the shipped scrape config names it
    env.stop(gw)

    def down_pending():
        rules = [r for g in api("rules")["groups"] for r in g["rules"]]
        return [r["state"] for r in rules if r["name"] == "AccelnetDown"] == ["pending"]
    wait_until(down_pending, "AccelnetDown pending once the gateway is gone", timeout=30)
