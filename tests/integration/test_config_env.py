"""Config ergonomics as an operator meets them (issue 26): ${VAR} from the environment, include
files and globs, durations and sizes on time and size keys, a second proxy on a used port, and
`accelnet top`/`reload` finding the admin endpoint as `ctl` does."""

import os
import signal
import subprocess

from harness import BIN, free_port, port_open, request, served_by, wait_until


def _run(*args, environ=None, timeout=20):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AN_") and not k.startswith("ACCELNET_ADMIN")}
    env.update(environ or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _check(path, **environ):
    return _run("check", "-c", path, environ=environ)


def test_env_with_and_without_default(env):
    a, b = env.sim("a"), env.sim("b")
    port = free_port()
    path = env.write("env.yaml", "listen:\n  - address: ${AN_HOST:-127.0.0.1}:${AN_PORT}\n"
                                 "timeouts: {connect_ms: '${AN_CONNECT:-2s}'}\n"
                                 "pools:\n  - name: p\n    backends:\n"
                                 "      - address: 127.0.0.1:${AN_BACKEND}\n"
                                 "        weight: ${AN_WEIGHT:-1}\n")
    r = _check(path, AN_PORT=str(port), AN_BACKEND=str(a.port))
    assert r.returncode == 0 and "ok" in r.stdout, (r.stdout, r.stderr)
    # the default is used when the variable is unset or empty; a set one wins over it
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port,
                  environ={"AN_PORT": str(port), "AN_BACKEND": str(b.port), "AN_HOST": "",
                           "AN_WEIGHT": "3"})
    st, hdrs, _ = request(port, "GET", "/")
    assert st == 200 and served_by(hdrs) == "b", (st, hdrs)
    env.stop(p)


def test_unset_variable_is_named_by_file_line_col(env):
    port = free_port()
    path = env.write("unset.yaml", f"listen: [127.0.0.1:{port}]\npools:\n  - name: p\n"
                                   "    backends:\n      - address: 127.0.0.1:${AN_NOPE}\n")
    r = _check(path)
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"{path}:5:28: ${{AN_NOPE}} is not set"), r.stderr
    r = _run("proxy", "-c", path)
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:5:28: "), r
    assert not port_open(port)


def test_malformed_reference_and_dollar_escape(env):
    path = env.write("bad.yaml", "listen: [127.0.0.1:1]\npools:\n  - name: p\n"
                                 "    backends: [127.0.0.1:9101]\n"
                                 "routes:\n  - {pool: p, match: {path_prefix: '/${AN_X'}}\n")
    r = _check(path)
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:6:38: a malformed ${{...}}"), \
        r.stderr
    # $${ is a literal '${'; any other '$' (a regex replacement's $$ too) stays as written
    sim = env.sim("s")
    px = env.proxy(f"pools:\n  - name: p\n    backends: [127.0.0.1:{sim.port}]\n"
                   "routes:\n  - pool: p\n    match: {header: {name: X-K, value: 'a$${b}$$c'}}\n")
    assert request(px.port, "GET", "/", headers={"X-K": "a${b}$$c"})[0] == 200
    assert request(px.port, "GET", "/", headers={"X-K": "a$${b}$$c"})[0] == 404
    assert request(px.port, "GET", "/", headers={"X-K": "a${b}$c"})[0] == 404


def test_env_value_of_the_wrong_type_is_refused_at_its_place_and_not_shown(env):
    path = env.write("w.yaml", "listen: [127.0.0.1:1]\npools:\n  - name: p\n    backends:\n"
                               "      - {address: 127.0.0.1:9101, weight: '${AN_SECRET}'}\n")
    r = _check(path, AN_SECRET="hunter2-not-a-number")
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"{path}:5:43: expected a number"), r.stderr
    assert "${AN_SECRET}" in r.stderr and "hunter2" not in r.stderr + r.stdout, r.stderr
    r = _check(path, AN_SECRET="5000")
    assert r.returncode == 2 and "out of range" in r.stderr and "5000" not in r.stderr, r.stderr


def _team(env, name, pool, port, prefix):
    os.makedirs(os.path.join(env.dir, "teams"), exist_ok=True)
    return env.write(f"teams/{name}.yaml",
                     f"pools:\n  - name: {pool}\n    backends: [127.0.0.1:{port}]\n"
                     f"routes:\n  - match: {{path_prefix: {prefix}}}\n    pool: {pool}\n")


def test_include_a_glob_and_a_file(env):
    a, b, c = env.sim("a"), env.sim("b"), env.sim("c")
    _team(env, "a", "pa", a.port, "/a")
    _team(env, "b", "pb", b.port, "/b")
    env.write("default.yaml", f"pools:\n  - name: pc\n    backends: [127.0.0.1:{c.port}]\n"
                              "routes:\n  - pool: pc\n")
    port = free_port()
    # the must-show: ${VAR}, an include and 10s-style values in one config
    path = env.write("main.yaml", "listen:\n  - 127.0.0.1:${AN_PORT}\n"
                                  "include: [teams/*.yaml, '${AN_DEFAULT:-default.yaml}']\n"
                                  "timeouts: {idle_ms: 30s, connect_ms: 500ms}\n")
    r = _check(path, AN_PORT=str(port))
    assert r.returncode == 0 and "3 pools, 3 routes" in r.stdout, (r.stdout, r.stderr)
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port,
                  environ={"AN_PORT": str(port)})
    for target, name in (("/a/x", "a"), ("/b/y", "b"), ("/other", "c")):
        st, hdrs, _ = request(port, "GET", target)
        assert st == 200 and served_by(hdrs) == name, (target, st, hdrs)
    # SIGHUP reads the included files again: a new team's file, matched by the glob
    d = env.sim("d")
    _team(env, "c", "pd", d.port, "/d")
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: served_by(request(port, "GET", "/d/z")[1]) == "d", "the new team's route")
    env.stop(p)


def test_errors_in_included_files_name_that_file(env):
    _team(env, "a", "pa", 9101, "/a")
    bad = env.write("teams/b.yaml", "pools:\n  - name: b\n    backends: [127.0.0.1:9102]\n"
                                    "    wieght: 2\n")
    path = env.write("main.yaml", "listen: [127.0.0.1:1]\ninclude: teams/*.yaml\n"
                                  "timeouts: {idle_ms: 1000}\n"
                                  "pools:\n  - name: web\n    backends: [127.0.0.1:9103]\n")
    r = _check(path)
    assert r.returncode == 2 and r.stderr.startswith(f"{bad}:4:5: pools: unknown key 'wieght'"), \
        r.stderr
    # a pool name given twice: both places
    os.remove(bad)
    team_a = _team(env, "a", "web", 9101, "/a")
    r = _check(path)
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"{team_a}:2:5: pool 'web' is defined twice: here and at "
                               f"{path}:5:5"), r.stderr
    # a section given in two files: both places
    _team(env, "a", "pa", 9101, "/a")
    env.write("teams/b.yaml", "timeouts: {idle_ms: 2s}\n")
    r = _check(path)
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"{bad}:1:1: 'timeouts' is given here and at {path}:3:11"), \
        r.stderr
    # YAML syntax in an included file
    env.write("teams/b.yaml", "pools: [\n")
    r = _check(path)
    assert r.returncode == 2 and r.stderr.startswith(f"{bad}:2:1: YAML syntax"), r.stderr
    # a file including its includer; a glob matching nothing; a file that is not there
    env.write("teams/b.yaml", "include: ../main.yaml\n")
    r = _check(path)
    assert r.returncode == 2 and r.stderr.startswith(f"{bad}:1:10: include:"), r.stderr
    assert "includes itself" in r.stderr, r.stderr
    os.remove(bad)
    path2 = env.write("main2.yaml", "listen: [127.0.0.1:1]\ninclude: [nope/*.yaml]\n")
    r = _check(path2)
    assert r.returncode == 2 and r.stderr.startswith(f"{path2}:2:11: include:"), r.stderr
    assert "matches no file" in r.stderr, r.stderr
    path3 = env.write("main3.yaml", "listen: [127.0.0.1:1]\ninclude: missing.yaml\n")
    r = _check(path3)
    assert r.returncode == 2 and r.stderr.startswith(f"{path3}:2:10: include:"), r.stderr


def test_durations_and_sizes(env):
    sim = env.sim("s")
    px = env.proxy(f"pools:\n  - name: p\n    backends: [127.0.0.1:{sim.port}]\n"
                   "    health: {path: /health, interval_ms: 500ms, timeout_ms: 1s}\n"
                   "    queue: {timeout_ms: 5s}\n    fail_timeout_ms: 1m\n",
                   extra="timeouts: {connect_ms: 2s, header_ms: 10s, idle_ms: 1m,"
                         " first_byte_ms: 2m, shutdown_ms: 1h}\n"
                         "limits: {max_body_bytes: 1k, max_header_bytes: 64k,"
                         " body_buffer_bytes: 1MiB}\n")
    assert request(px.port, "POST", "/", body=b"x" * 1024)[0] == 200
    assert request(px.port, "POST", "/", body=b"x" * 1025)[0] == 413
    for value, where, why in (
            ("timeouts: {idle_ms: 10x}\n", ":2:21:", "an optional unit: ms, s, m or h"),
            ("timeouts: {idle_ms: 10 s}\n", ":2:21:", "found '10 s'"),
            ("timeouts: {connect_ms: 25h}\n", ":2:24:", "25h (90000000 ms) is out of range"),
            ("limits: {max_body_bytes: 16MB}\n", ":2:26:", "optional size unit"),
            ("cache: {memory: 16m}\nroutes:\n  - pool: p\n    cache: {pass_s: 1500ms}\n",
             ":5:21:", "not a whole number of seconds")):
        path = env.write("u.yaml", f"listen: [127.0.0.1:1]\n{value}"
                                   "pools:\n  - name: p\n    backends: [127.0.0.1:1]\n")
        r = _check(path)
        assert r.returncode == 2 and r.stderr.startswith(path + where) and why in r.stderr, \
            (value, r.stderr)


def test_second_proxy_on_a_used_port_exits_2_naming_it(env):
    sim = env.sim("s")
    px = env.proxy(f"pools:\n  - name: p\n    backends: [127.0.0.1:{sim.port}]\n")
    path = os.path.join(env.dir, "proxy.yaml")
    r = _run("proxy", "-c", path)
    assert r.returncode == 2, r
    assert f"127.0.0.1:{px.port} is in use by another process" in r.stderr, r.stderr
    # without an admin endpoint of its own it would otherwise start and take most clients
    text = open(path).read()
    alone = text[:text.index("admin:")] + text[text.index("pools:"):]
    r = _run("proxy", "-c", env.write("alone.yaml", alone), timeout=10)
    assert r.returncode == 2, r
    assert f"127.0.0.1:{px.port} is in use by another process" in r.stderr, r.stderr
    # the admin address too, on its own
    other = free_port()
    text = open(path).read().replace(f"127.0.0.1:{px.port}", f"127.0.0.1:{other}")
    r = _run("proxy", "-c", env.write("second.yaml", text))
    assert r.returncode == 2, r
    assert f"admin: 127.0.0.1:{px.admin} is in use by another process" in r.stderr, r.stderr
    assert not port_open(other)
    # the first one still answers every request
    for _ in range(8):
        assert request(px.port, "GET", "/")[0] == 200
    # shared on purpose: a second proxy starts beside it
    text = open(path).read().replace(f"  - address: 127.0.0.1:{px.port}\n",
                                     f"  - address: 127.0.0.1:{px.port}\n"
                                     "    reuse_port: shared\n")
    text = text.replace(f"127.0.0.1:{px.admin}", f"127.0.0.1:{free_port()}")
    shared = env.write("shared.yaml", text)
    p2 = env.start([BIN, "proxy", "-c", shared], "proxy2")
    wait_until(lambda: "listening on" in env.log(p2) or p2.poll() is not None, "proxy2")
    assert p2.poll() is None, env.log(p2)
    env.stop(p2)


def test_top_and_reload_read_the_admin_environment(env):
    sim = env.sim("s")
    token = env.write("admin.token", "s3cret-token\n")
    os.chmod(token, 0o600)
    port, admin_port = free_port(), free_port()
    path = env.write("top.yaml", f"listen: [127.0.0.1:{port}]\n"
                                 f"admin: {{address: 127.0.0.1:{admin_port}, token_file: {token}}}\n"
                                 f"pools:\n  - name: p\n    backends: [127.0.0.1:{sim.port}]\n")
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    wait_until(lambda: port_open(admin_port), "admin port")
    admin = {"ACCELNET_ADMIN": f"127.0.0.1:{admin_port}"}
    r = _run("top", "--once", "--interval-ms", "100", environ=admin)
    assert r.returncode == 1 and "401" in r.stderr, (r.returncode, r.stderr)
    r = _run("top", "--once", "--interval-ms", "100",
             environ=dict(admin, ACCELNET_ADMIN_TOKEN_FILE=token))
    assert r.returncode == 0 and "POOL p" in r.stdout, (r.stdout, r.stderr)
    r = _run("reload", environ=dict(admin, ACCELNET_ADMIN_TOKEN_FILE=token))
    assert r.returncode == 0 and "reloaded" in r.stdout, (r.stdout, r.stderr)
    # reload's own messages say so
    r = _run("reload", environ=admin)
    assert r.returncode == 1 and r.stderr.startswith("accelnet reload: "), r.stderr
    assert "accelnet ctl" not in r.stderr, r.stderr
    r = _run("reload", environ={"ACCELNET_ADMIN": f"127.0.0.1:{free_port()}"})
    assert r.returncode == 1 and r.stderr.startswith("accelnet reload: "), r.stderr
    r = _run("reload", "--bogus")
    assert r.returncode == 2 and r.stderr.startswith("accelnet reload: "), r.stderr
    env.stop(p)


def test_a_reload_is_refused_for_an_unset_variable_or_a_used_port(env):
    a, busy = env.sim("a"), env.sim("busy")
    port = free_port()
    team = _team(env, "a", "pa", a.port, "/a")
    path = env.write("main.yaml", f"listen: [127.0.0.1:{port}]\ninclude: teams/*.yaml\n")
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    # an included file now names a variable the proxy's environment does not hold
    env.write("teams/a.yaml", f"pools:\n  - name: pa\n    backends:\n"
                              f"      - 127.0.0.1:${{AN_NOPE}}\n")
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "the running configuration stays" in env.log(p), "the refused reload")
    assert f"SIGHUP: {team}:4:19: ${{AN_NOPE}} is not set" in env.log(p), env.log(p)
    st, hdrs, _ = request(port, "GET", "/a/x")
    assert st == 200 and served_by(hdrs) == "a", (st, hdrs)
    # a listener added on an address another process listens on
    _team(env, "a", "pa", a.port, "/a")
    env.write("main.yaml", f"listen: [127.0.0.1:{port}, 127.0.0.1:{busy.port}]\n"
                           "include: teams/*.yaml\n")
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: env.log(p).count("the running configuration stays") == 2,
               "the second refused reload")
    assert f"127.0.0.1:{busy.port} is in use by another process" in env.log(p), env.log(p)
    assert request(busy.port, "GET", "/")[0] == 200
    assert served_by(request(port, "GET", "/a/x")[1]) == "a"
    env.stop(p)


def test_reuse_port_takes_own_or_shared(env):
    path = env.write("r.yaml", "listen:\n  - {address: 127.0.0.1:1, reuse_port: yes}\n"
                               "pools:\n  - name: p\n    backends: [127.0.0.1:9101]\n")
    r = _check(path)
    assert r.returncode == 2 and r.stderr.startswith(f"{path}:2:40: listen: reuse_port 'yes': "
                                                     "expected own or shared"), r.stderr
