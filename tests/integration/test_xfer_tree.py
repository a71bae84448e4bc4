"""accelnet xfer: directory trees of many files, as a user sends and pulls them. Each test
makes its tree once (in a tmpfs) and runs every direction it checks against one server."""

import json
import os
import resource
import shutil
import struct
import subprocess
import tempfile

from harness import BIN, free_port, wait_until
from test_xfer import digest

NOFILE = 64  # descriptors allowed to each end: far fewer than the tree has files


def limit_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def make_tree(root, nfiles, size_of):
    """<nfiles> files spread over ten directories, file i of size_of(i) bytes."""
    names = []
    for i in range(nfiles):
        rel = os.path.join(f"d{i % 10}", f"f{i:05d}.bin")
        os.makedirs(os.path.join(root, f"d{i % 10}"), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(os.urandom(size_of(i)))
        names.append(rel)
    return names


def xfer(args):
    """accelnet xfer ARGS --json under the lowered descriptor limit: the process's result."""
    return subprocess.run([BIN, "xfer"] + args + ["--json"], capture_output=True, text=True,
                          timeout=120, preexec_fn=limit_nofile)


def serve_limited(env, listen, dest):
    """`accelnet xfer serve` (--insecure) allowed NOFILE descriptors, once it listens."""
    p = env.start(["prlimit", f"--nofile={NOFILE}", "--", BIN, "xfer", "serve", "--listen", listen,
                   "--dir", dest, "--insecure"], "serve")

    def up():
        if p.poll() is not None:
            raise AssertionError(f"serve exited with {p.returncode}:\n{env.log(p)}")
        return "listening" in env.log(p)
    wait_until(up, "serve listening")
    return p


def scratch(env):
    """A directory in a tmpfs when there is one (removed at cleanup): the receiver fsyncs each
    file before its rename, which on a shared disk costs more than these tests are about."""
    if not os.path.isdir("/dev/shm"):
        return env.dir
    d = tempfile.mkdtemp(prefix="xfer-tree-", dir="/dev/shm")
    env.on_cleanup.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def same_tree(a, b, names):
    for rel in names:
        assert digest(os.path.join(a, rel)) == digest(os.path.join(b, rel)), rel


def test_tree_of_more_files_than_descriptors(env):
    """A tree of 500 files (one of them several chunks long) sent and then pulled back, each
    end allowed 64 descriptors: every file lands intact. The sender used to open every file
    up front and failed with 'Too many open files'."""
    work = scratch(env)
    src, dst, back = (os.path.join(work, d) for d in ("src", "dst", "back"))
    names = make_tree(os.path.join(src, "tree"), 500,
                      lambda i: 600 * 1024 + 5 if i == 7 else 100 + 37 * i)
    os.makedirs(dst)
    os.makedirs(back)
    port = free_port()
    addr = f"127.0.0.1:{port}"
    serve_limited(env, addr, dst)
    r = xfer(["send", os.path.join(src, "tree"), addr, "--chunk-kib", "64"])
    assert r.returncode == 0, f"send failed: {r.stdout} {r.stderr}"
    rep = json.loads(r.stdout)
    assert rep["ok"] and rep["files"] == 500, rep
    same_tree(os.path.join(src, "tree"), os.path.join(dst, "tree"), names)
    r = xfer(["get", addr, "tree", "--to", back, "--chunk-kib", "64"])
    assert r.returncode == 0, f"get failed: {r.stdout} {r.stderr}"
    rep = json.loads(r.stdout)
    assert rep["ok"] and rep["files"] == 500, rep
    same_tree(os.path.join(src, "tree"), os.path.join(back, "tree"), names)


def test_receiver_holds_few_files_between_their_chunks(env):
    """A sender that starts 100 files before finishing any (the first chunk of each, then the
    second), against a receiver allowed 64 descriptors: every chunk is acknowledged and the
    files land whole. The receiver used to keep each started file open until its last chunk,
    and ran out of descriptors."""
    from test_xfer_security import ACK, CHUNK, DONE, FINISH, MANIFEST, NEED, OK, Wire, manifest, \
        whole_hash, xxh64
    dst = os.path.join(scratch(env), "dst")
    os.makedirs(dst)
    port = free_port()
    serve_limited(env, f"127.0.0.1:{port}", dst)
    chunk, n = 64 * 1024, 100
    files = [[os.urandom(chunk), os.urandom(chunk)] for _ in range(n)]
    w = Wire.dial(port)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, manifest([(f"t/f{i:03d}", 2 * chunk, 0o644) for i in range(n)], chunk=chunk))
    assert w.frame()[0] == NEED
    for k in (0, 1):
        for i in range(n):
            part = files[i][k]
            w.send(CHUNK, struct.pack("<IIQ", i, k, xxh64(part)), part)
            t, meta, _ = w.frame()
            assert t == ACK and meta[8] == 0, (i, k, t, meta)
    w.send(FINISH, b"".join(whole_hash([xxh64(p) for p in f]) for f in files))
    assert w.frame()[0] == DONE
    w.close()
    for i in range(n):
        with open(os.path.join(dst, "t", f"f{i:03d}"), "rb") as f:
            assert f.read() == files[i][0] + files[i][1], i
