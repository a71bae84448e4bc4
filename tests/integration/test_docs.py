"""The docs as a newcomer uses them (issue 26): every ```yaml block of README.md and docs/*.md
passes `accelnet check`, a fragment once completed with what it leaves out (a listener, the
pools its routes name, the cache section their cache needs) and the files it names made;
docs/vllm.md's walk-through config runs against two backends that report what they were sent
(each sees only its own key, the clients' keys are checked by the proxy, the probes answer as
the page says); every link of the docs leads somewhere inside the repository; and
docs/config.md documents no key that `accelnet check --keys` does not print."""

import glob
import json
import os
import re
import subprocess

from harness import BIN, free_port, lenient_backend, request, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))

# blocks that are no top-level config, and the key they sit under in one: FILE:FIRST-LINE
UNDER_A_ROUTE = {"forwarding.md:request_headers:"}

CLIENT_KEY = "0123456789abcdef0123"
FILES = {  # what a file named by such a key holds
    "api_key_file": "backend-key-xyz\n",
    "api_keys_file": f"team-a {CLIENT_KEY}\n",
    "token_file": "admin-token\n",
    "jwks_file": json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC0xMjM0NTY3OA",
                                       "kid": "k1", "alg": "HS256"}]}),
}
ENVIRON = {"GPU_HOST": "127.0.0.1", "GPU_A": "127.0.0.1:8000", "GPU_B": "127.0.0.1:8001"}


def yaml_blocks():
    """(FILE:LINE, text) of each ```yaml block of the docs."""
    out = []
    for path in DOCS:
        with open(path) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```yaml":
                j = i + 1
                while lines[j].strip() != "```":
                    j += 1
                out.append((f"{os.path.basename(path)}:{i + 2}", "\n".join(lines[i + 1:j]) + "\n"))
                i = j
            i += 1
    return out


def _complete(where, text, d):
    """The block as a config check can take: absolute files moved into d (made there), and the
    top-level parts a fragment leaves out added."""
    first = next(line for line in text.split("\n") if line and not line.startswith("#"))
    if f"{where.split(':')[0]}:{first.strip()}" in UNDER_A_ROUTE:
        text = "routes:\n  - pool: p\n" + "".join(f"    {line}\n" for line in text.split("\n"))
    for key, name in re.findall(r"\b(\w+_file):\s*['\"]?((?:\$\{[^}]*\})?[^\s,}'\"]+)", text):
        local = os.path.join(d, os.path.basename(name))
        if not name.startswith("${KEYS"):  # else $KEYS names d
            text = text.replace(name, local)
        with open(local, "w") as f:
            f.write(FILES[key])
        os.chmod(local, 0o600)
    sections = dict(re.findall(r"^([a-z_]+):(.*(?:\n(?:[ #].*|))*)", text, re.M))
    pools = set(re.findall(r"^\s+- \{?\s*name: ([\w.-]+)", sections.get("pools", ""), re.M))
    routes = sections.get("routes", "")
    named = set(re.findall(r"\bpool: ([\w.-]+)", routes))
    if "listen" not in sections:
        text += "listen: [127.0.0.1:1]\n"
    if named - pools or not pools:
        assert "pools" not in sections, f"{where}: routes name pools it does not define"
        text += "pools:\n"
        for name in sorted(named - pools) or ["p"]:
            text += f"  - {{name: {name}, backends: [127.0.0.1:2]}}\n"
    if "cache" not in sections and re.search(r"^\s+cache:", routes, re.M):
        text += "cache: {memory: 64MiB}\n"
    return text


def test_every_yaml_block_in_the_docs_is_a_config_check_takes(env):
    blocks = yaml_blocks()
    assert len(blocks) >= 12, blocks
    bad = []
    for n, (where, text) in enumerate(blocks):
        d = os.path.join(env.dir, str(n))
        os.mkdir(d)
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write(_complete(where, text, d))
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True,
                           timeout=30, cwd=d, env=dict(os.environ, KEYS=d, **ENVIRON))
        if r.returncode != 0 or "ok (" not in r.stdout:
            bad.append(f"{where}: {r.stderr.strip() or r.stdout.strip()}")
    assert not bad, "\n".join(bad)


def _walkthrough():
    return next(text for where, text in yaml_blocks() if where.startswith("vllm.md:")
                and "api_key_file" in text)


def test_vllm_walkthrough_config_runs_as_the_page_says(env):
    a, b = lenient_backend(env), lenient_backend(env)
    keys = os.path.join(env.dir, "keys")
    os.mkdir(keys)
    for name, text in (("gpu-a.key", "key-of-a\n"), ("gpu-b.key", "key-of-b\n"),
                       ("clients.txt", f"team-a {CLIENT_KEY}\n")):
        with open(os.path.join(keys, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(keys, name), 0o600)
    path = env.write("vllm.yaml", _walkthrough())
    port, admin = free_port(), free_port()
    environ = {"LISTEN": f"127.0.0.1:{port}", "ADMIN": f"127.0.0.1:{admin}", "KEYS": keys,
               "GPU_A": f"127.0.0.1:{a.port}", "GPU_B": f"127.0.0.1:{b.port}"}
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port, environ=environ)

    wait_until(lambda: request(port, "GET", "/readyz")[0] == 200, "ready on the listener")
    st, hdrs, body = request(port, "GET", "/readyz")
    assert json.loads(body) == {"status": "ready"}, body
    st, _, body = request(admin, "GET", "/readyz")
    assert st == 200 and body.startswith(b"ready"), (st, body)
    assert request(port, "GET", "/healthz")[0] == 200

    # no key, a wrong key: 401 as OpenAI error JSON, no backend reached
    for h in ({}, {"Authorization": "Bearer not-a-key-of-anyone"}):
        st, hdrs, body = request(port, "POST", "/v1/chat/completions", body=b'{"model":"m"}',
                                 headers=h)
        assert st == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", body
    def forwarded(be):
        return [s for s in be.seen if s["path"] != "/health"]
    assert not forwarded(a) and not forwarded(b)

    for _ in range(4):
        st, hdrs, body = request(port, "POST", "/v1/chat/completions", body=b'{"model":"m"}',
                                 headers={"Authorization": f"Bearer {CLIENT_KEY}",
                                          "X-API-Key": CLIENT_KEY})
        assert st == 200, (st, body)
        assert hdrs.get("access-control-allow-origin") == ["*"], hdrs
    assert forwarded(a) and forwarded(b)
    for be, key in ((a, "key-of-a"), (b, "key-of-b")):
        for seen in forwarded(be):
            assert seen["path"] == "/v1/chat/completions", seen
            assert seen["headers"]["authorization"] == [f"Bearer {key}"], seen["headers"]
            assert "x-api-key" not in seen["headers"], seen["headers"]


def test_links_in_the_docs_resolve_and_stay_in_the_repository(env):
    bad = []
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        name = os.path.relpath(path, ROOT)
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if re.match(r"[a-z]+:", target):
                continue
            if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                bad.append(f"{name}: link {target} leads nowhere")
        for doc in re.findall(r"\bdocs/([\w-]+\.md)", text):
            if not os.path.exists(os.path.join(ROOT, "docs", doc)):
                bad.append(f"{name}: names docs/{doc}, which is not there")
        if re.search(r"\bshared/(research|DESIGN|STYLE)", text):
            bad.append(f"{name}: points outside the repository (shared/)")
    assert not bad, "\n".join(bad)


def test_config_md_documents_no_key_the_proxy_does_not_take(env):
    # the other way round from test_config's docs_list_every_key: a key row of docs/config.md
    # names a key `accelnet check --keys` prints (a renamed or removed key leaves no stale row)
    keys = set(subprocess.run([BIN, "check", "--keys"], capture_output=True, text=True,
                              timeout=30).stdout.split())
    assert "pools.api_key_file" in keys, keys
    with open(os.path.join(ROOT, "docs", "config.md")) as f:
        rows = [line.split("|")[1] for line in f if line.startswith("| `")]
    stale = {k for row in rows for k in re.findall(r"`([a-z_][\w.]*)`", row)} - keys
    assert not stale, f"docs/config.md documents keys the proxy refuses: {sorted(stale)}"
