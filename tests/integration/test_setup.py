"""The README's two commands on a fresh machine (issue 26, "Set-up"): scripts/demo.sh installs
what building and running the demo needs and nothing the tests alone need (no Chromium,
Podman, Prometheus or Redis), scripts/test.sh's set still holds those, and apt's lock is
waited for, not failed on.

The scripts run from a copy of scripts/ on a PATH whose dpkg-query says that nothing is
installed, whose id says the user is not root and whose sudo runs nothing: it writes down the
commands it is asked to run (apt-get's arguments are what would be installed). make and the
demo binary are stand-ins that exit at once. Nothing on the machine is installed or
changed."""

ENVIRONMENT = True  # tests the set-up scripts, not a build: once, in the normal pass

import os
import shutil
import stat
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEST_ONLY = ["chromium", "podman", "prometheus", "redis-server"]


def _tool(d, name, body):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def _fresh(env):
    """A copy of scripts/ with a stand-in build/accelnet, and a PATH of stand-ins; returns
    (tree, environment, file where sudo writes what it was asked)."""
    tree = os.path.join(env.dir, "tree")
    shutil.copytree(os.path.join(ROOT, "scripts"), os.path.join(tree, "scripts"))
    os.makedirs(os.path.join(tree, "build"))
    fake = os.path.join(env.dir, "bin")
    os.makedirs(fake)
    said = os.path.join(env.dir, "sudo.txt")
    _tool(fake, "dpkg-query", "exit 1")  # nothing installed
    _tool(fake, "id", 'echo 1000')  # not root: every change goes through sudo
    _tool(fake, "sudo", f'echo "$*" >>{said}')
    _tool(fake, "make", "exit 0")
    _tool(os.path.join(tree, "build"), "accelnet", "exit 0")
    return tree, dict(os.environ, PATH=fake + ":" + os.environ["PATH"]), said


def _installs(said):
    """The packages of the apt-get install commands in <said>, and those commands."""
    with open(said) as f:
        lines = [ln.split() for ln in f]
    apt = [ln for ln in lines if ln and ln[0] == "apt-get"]
    pkgs = {w for ln in apt if "install" in ln for w in ln[ln.index("install") + 1:]
            if not w.startswith("-")}
    return pkgs, apt


def test_demo_installs_no_test_only_package(env):
    tree, environ, said = _fresh(env)
    r = subprocess.run(["bash", os.path.join(tree, "scripts", "demo.sh")], env=environ,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    pkgs, apt = _installs(said)
    assert {"gcc", "make", "libssl-dev", "libyaml-dev"} <= pkgs, apt
    assert not pkgs & set(TEST_ONLY), f"demo.sh installs {sorted(pkgs & set(TEST_ONLY))}"
    for cmd in apt:  # update and install both wait for another apt's lock
        assert any(w.startswith("DPkg::Lock::Timeout=") for w in cmd), cmd


def test_the_tests_set_holds_the_test_only_packages(env):
    tree, environ, said = _fresh(env)
    r = subprocess.run(["bash", os.path.join(tree, "scripts", "deps.sh"), "haproxy"],
                       env=environ, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    pkgs, apt = _installs(said)
    assert set(TEST_ONLY + ["gcc", "libcmocka-dev", "haproxy"]) <= pkgs, apt
    for cmd in apt:
        assert any(w.startswith("DPkg::Lock::Timeout=") for w in cmd), cmd
