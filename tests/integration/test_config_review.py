"""A hostile review of issue 26's config sources (docs/config.md, "Includes"): an include is read
only from a regular file, so a FIFO cannot hold `check` (or a reload) until someone writes to
it, and a glob matching a directory names it rather than a YAML error at line 1."""

import os
import subprocess

from harness import BIN

MAIN = ("listen: [127.0.0.1:1]\ninclude: {inc}\n"
        "pools:\n  - name: a\n    backends: [127.0.0.1:9101]\n"
        "routes:\n  - match: {{path_prefix: /}}\n    pool: a\n")


def _check(path):
    return subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=15)


def test_an_include_that_is_a_fifo_or_a_directory_is_refused_by_name(env):
    fifo = os.path.join(os.path.dirname(env.write("x", "")), "team.yaml")
    os.mkfifo(fifo)
    path = env.write("main.yaml", MAIN.format(inc="team.yaml"))
    r = _check(path)  # on the base binary this never returns: it waits for a writer
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"{path}:2:10: include: '{fifo}' is not a regular file"), \
        r.stderr
    os.makedirs(os.path.join(os.path.dirname(path), "teams", "old"))
    env.write("teams/a.yaml", "pools:\n  - name: t\n    backends: [127.0.0.1:9102]\n")
    path = env.write("main.yaml", MAIN.format(inc="teams/*"))
    r = _check(path)
    assert r.returncode == 2 and "teams/old' is not a regular file" in r.stderr, r.stderr


def test_a_large_variable_named_many_times_is_refused_before_it_takes_the_memory(env):
    """200 references to a 100 KB variable would be 20 MB of values (a real config named so
    could take gigabytes of a reload): refused past 16 MiB, at the value that went past it,
    the variable's value never shown."""
    refs = "".join(f"  - \"${{BIG}}\"\n" for _ in range(200))
    path = env.write("main.yaml", "listen: [127.0.0.1:1]\ntrusted_proxies:\n" + refs +
                     "pools:\n  - name: a\n    backends: [127.0.0.1:9101]\n"
                     "routes:\n  - match: {path_prefix: /}\n    pool: a\n")
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "BIG": "k" * 100000})
    assert r.returncode == 2, r
    assert "more than 16 MiB once ${...} is expanded" in r.stderr, r.stderr[:300]
    assert r.stderr.startswith(f"{path}:"), r.stderr[:300]
    assert "kkkk" not in r.stderr, r.stderr[:300]
