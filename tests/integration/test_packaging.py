"""Packaging (issue 16): `make install` with PREFIX and DESTDIR, the man pages generated from
docs/config.md and the binary's usage (so they name every key `accelnet check --keys` prints),
the .deb that scripts/build-deb.sh makes, and the container image of packaging/Containerfile
(built and run with podman only where podman works and can get the base image)."""

ENVIRONMENT = True  # a test of the machine's tools with accelnet (run.py --no-environment)

import os
import re
import shutil
import subprocess

from harness import BIN, Skip, free_port, pool_yaml, port_open, request, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _build_dir():
    """The build directory of the binary under test, as make's BUILD= (relative to ROOT)."""
    return os.path.relpath(os.path.dirname(os.path.abspath(BIN)), ROOT)


def _make(*args):
    build = _build_dir()
    extra = ["SAN=1"] if build.startswith("build-san") else []
    r = subprocess.run(["make", "-s", "--no-print-directory", f"BUILD={build}", *extra, *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def _files(top):
    found = []
    for d, _, names in os.walk(top):
        found += [os.path.relpath(os.path.join(d, n), top) for n in names]
    return sorted(found)


def _keys():
    r = subprocess.run([BIN, "check", "--keys"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    keys = r.stdout.split()
    assert "pools.backends.weight" in keys, keys
    return keys


def _man_text(page):
    """The page as `man -l` renders it (plain text: not a terminal), or None without man."""
    if not shutil.which("man"):
        return None
    r = subprocess.run(["man", "-l", page], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="120", MANPAGER="cat", PAGER="cat"))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_install_into_a_destdir(env):
    dest = os.path.join(env.dir, "dest")
    _make("install", f"DESTDIR={dest}", "PREFIX=/usr/local")
    landed = _files(dest)
    print("make install put: " + ", ".join(landed))
    assert landed == [
        "etc/accelnet/accelnet.yaml",
        "usr/local/bin/accelnet",
        "usr/local/lib/systemd/system/accelnet.service",
        "usr/local/lib/systemd/system/accelnet.socket",
        "usr/local/share/doc/accelnet/examples/accelnet.yaml",
        "usr/local/share/man/man1/accelnet.1",
        "usr/local/share/man/man5/accelnet.yaml.5",
    ], landed
    binary = os.path.join(dest, "usr/local/bin/accelnet")
    assert os.access(binary, os.X_OK)
    r = subprocess.run([binary, "check", "-c", os.path.join(dest, "etc/accelnet/accelnet.yaml")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and ": ok (" in r.stdout, (r.stdout, r.stderr)
    with open(os.path.join(dest, "usr/local/lib/systemd/system/accelnet.service")) as f:
        unit = f.read()
    # the unit names where the binary runs from, not the DESTDIR it was staged in
    assert "ExecStart=/usr/local/bin/accelnet proxy -c /etc/accelnet/accelnet.yaml" in unit
    assert dest not in unit
    assert oct(os.stat(os.path.join(dest, "etc/accelnet/accelnet.yaml")).st_mode & 0o777) == \
        "0o640"
    # an operator's config survives installing again; uninstall leaves it too
    conf = os.path.join(dest, "etc/accelnet/accelnet.yaml")
    with open(conf, "a") as f:
        f.write("# edited\n")
    _make("install", f"DESTDIR={dest}", "PREFIX=/usr/local")
    with open(conf) as f:
        assert f.read().endswith("# edited\n")
    _make("uninstall", f"DESTDIR={dest}", "PREFIX=/usr/local")
    assert _files(dest) == ["etc/accelnet/accelnet.yaml"], _files(dest)


def test_man_pages_name_every_key_and_every_command(env):
    out = os.path.join(env.dir, "man")
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "gen-man.py"),
                        "--bin", BIN, "--out", out], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out, "accelnet.yaml.5")) as f:
        roff = f.read()
    assert roff.startswith(".TH ACCELNET.YAML 5 ")
    plain = re.sub(r"\\f[BIRP]|\\&", "", roff)
    keys = _keys()
    missing = [k for k in keys if k not in plain]
    assert not missing, f"accelnet.yaml.5 does not name: {missing}"
    text = _man_text(os.path.join(out, "accelnet.yaml.5"))
    if text is not None:
        missing = [k for k in keys if k not in text]
        assert not missing, f"man -l accelnet.yaml.5 does not show: {missing}"
        assert "TOP LEVEL" in text and "listen.tls.cert" in text
    page1 = os.path.join(out, "accelnet.1")
    with open(page1) as f:
        assert f.read().startswith(".TH ACCELNET 1 ")
    text = _man_text(page1)
    if text is not None:
        for cmd in ("proxy", "check", "demo", "sim", "top", "xfer"):
            assert f"accelnet {cmd}" in text, cmd
        for name in ("NOTIFY_SOCKET", "LISTEN_FDS", "SIGTERM", "accelnet xfer serve"):
            assert name in text, name


def test_deb_package(env):
    if not shutil.which("dpkg-deb"):
        raise Skip("dpkg-deb is not installed (Debian package dpkg)")
    out = os.path.join(env.dir, "deb")
    r = subprocess.run([os.path.join(ROOT, "scripts", "build-deb.sh"), _build_dir(), out],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout, r.stderr)
    deb = r.stdout.strip().split("\n")[-1]
    assert os.path.isfile(deb) and deb.endswith(".deb"), deb
    info = subprocess.run(["dpkg-deb", "-I", deb], capture_output=True, text=True,
                          timeout=60).stdout
    print(info)
    assert "Package: accelnet" in info
    depends = re.search(r"^ Depends: (.*)$", info, re.M).group(1).split(", ")
    for lib in ("libssl3", "libyaml-0-2", "libc6", "adduser"):
        assert lib in depends, depends
    contents = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True,
                              timeout=60).stdout
    print(contents)
    for path in ("./usr/bin/accelnet", "./usr/share/man/man1/accelnet.1.gz",
                 "./usr/share/man/man5/accelnet.yaml.5.gz",
                 "./usr/lib/systemd/system/accelnet.service",
                 "./usr/lib/systemd/system/accelnet.socket", "./etc/accelnet/accelnet.yaml"):
        assert re.search(r" " + re.escape(path) + "$", contents, re.M), path
    assert "/tmp/" not in contents and "root/root" in contents
    ctrl = os.path.join(env.dir, "control")
    subprocess.run(["dpkg-deb", "-e", deb, ctrl], check=True, timeout=60)
    with open(os.path.join(ctrl, "conffiles")) as f:
        assert f.read().split() == ["/etc/accelnet/accelnet.yaml"]
    with open(os.path.join(ctrl, "postinst")) as f:
        postinst = f.read()
    assert "adduser --system --group" in postinst and "accelnet" in postinst
    for script in ("postinst", "prerm", "postrm"):
        subprocess.run(["sh", "-n", os.path.join(ctrl, script)], check=True, timeout=30)
    # the image installs the libraries the package depends on (less what its base has)
    with open(os.path.join(ROOT, "packaging", "Containerfile")) as f:
        final_stage = f.read().rsplit("\nFROM ", 1)[1]
    for dep in depends:
        if dep not in ("libc6", "adduser") and not dep.startswith(("libasan", "libubsan")):
            assert re.search(r"\b" + re.escape(dep) + r"\b", final_stage), \
                f"the Containerfile's image lacks {dep}"
    # dpkg's own check of the archive against this system, changing nothing: --dry-run
    if os.geteuid() != 0:
        return
    was = subprocess.run(["dpkg-query", "-W", "accelnet"], capture_output=True).returncode
    r = subprocess.run(["dpkg", "--dry-run", "-i", deb], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "accelnet" in r.stdout, r.stdout
    if was != 0:  # it was not installed, and still is not
        assert subprocess.run(["dpkg-query", "-W", "accelnet"],
                              capture_output=True).returncode != 0


BASE = "docker.io/library/debian:12-slim"


def _podman(*args, timeout=120):
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


def test_container_image_builds_and_serves(env):
    if not shutil.which("podman"):
        raise Skip("podman is not installed (Debian package podman)")
    if _podman("image", "exists", BASE).returncode != 0:
        r = _podman("pull", "-q", BASE, timeout=300)
        if r.returncode != 0:
            why = (r.stderr.strip().split("\n") or ["?"])[-1]
            raise Skip(f"the base image {BASE} is not in podman's store and cannot be "
                       f"pulled here ({why}): the Containerfile was not built")
    tag = f"localhost/accelnet-test:{os.getpid()}"
    env.on_cleanup.append(lambda: _podman("rmi", "-f", tag))
    r = _podman("build", "-q", "-f", "packaging/Containerfile", "-t", tag, ROOT, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    r = _podman("run", "--rm", tag, "check", "-c", "/etc/accelnet/accelnet.yaml")
    assert r.returncode == 0 and ": ok (" in r.stdout, (r.stdout, r.stderr)
    # the image's proxy, on the host's network, in front of a simulator on this machine
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    port = free_port()
    conf = env.write("c.yaml", f"workers: 1\nlisten: [127.0.0.1:{port}]\npools:\n" +
                     pool_yaml("p", [sim.port]) + "routes:\n  - pool: p\n")
    os.chmod(conf, 0o644)
    name = f"accelnet-test-{os.getpid()}"
    env.on_cleanup.append(lambda: _podman("rm", "-f", name))
    r = _podman("run", "-d", "--name", name, "--network", "host", "-v",
                f"{conf}:/etc/accelnet/accelnet.yaml:ro", tag)
    assert r.returncode == 0, r.stderr
    wait_until(lambda: port_open(port), "the container's proxy", timeout=60)
    st, _, _ = request(port, "GET", "/")
    assert st == 200
    r = _podman("stop", "-t", "30", name)
    assert r.returncode == 0, r.stderr


def test_containerfile_build_stage_has_what_the_build_needs(env):
    # what podman cannot do here, done by hand: the files the build stage COPYs, alone in a
    # fresh directory, build and install as its RUN line does (a COPY list missing a file
    # the Makefile needs would fail the image build only where podman runs)
    with open(os.path.join(ROOT, "packaging", "Containerfile")) as f:
        text = f.read()
    build_stage = text.split("\nFROM ")[1]
    ctx = os.path.join(env.dir, "ctx")
    copies = re.findall(r"^COPY (?!--)(\S+) (\S+)$", build_stage, re.M)
    assert ("src", "src") in copies and ("Makefile", "./") in copies, copies
    for src, dst in copies:
        dst = os.path.join(ctx, src if dst == "./" else dst)
        if os.path.isdir(os.path.join(ROOT, src)):
            shutil.copytree(os.path.join(ROOT, src), dst)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(os.path.join(ROOT, src), dst)
    # Every file make names (sources found by its wildcards, scripts, docs the man pages come
    # from, the units): a dry run that rebuilds all and installs finds each or stops with "No
    # rule to make target". Every file the compiler reads (headers included): the dependency
    # files of the build under test name them, and each must be in the context. (Compiling the
    # context again checked the same at a minute and more of CPU in CI.)
    out = os.path.join(env.dir, "out")
    r = subprocess.run(["make", "-n", "-B", "all", "install", f"DESTDIR={out}", "PREFIX=/usr",
                        "SYSCONFDIR=/etc"], cwd=ctx, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    build = os.path.dirname(os.path.abspath(BIN))
    deps = set()
    for d, _, names in os.walk(os.path.join(build, "obj")):  # what `make all` compiles
        for n in names:
            if n.endswith(".d"):
                with open(os.path.join(d, n)) as f:
                    text = f.read().replace("\\\n", " ")
                for word in text.split():
                    if word.endswith(":"):
                        continue
                    path = os.path.abspath(os.path.join(ROOT, word))
                    if path.startswith(ROOT + os.sep) and not path.startswith(build + os.sep):
                        deps.add(os.path.relpath(path, ROOT))
    assert any(x.endswith(".h") for x in deps) and any(x.endswith(".c") for x in deps), \
        f"no dependency files under {build} (the build writes them with -MMD)"
    missing = sorted(x for x in deps if not os.path.exists(os.path.join(ctx, x)))
    assert not missing, f"the build stage's COPY list misses: {missing[:20]}"
    r = subprocess.run([BIN, "check", "-c", os.path.join(ROOT, "packaging", "accelnet.yaml")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
