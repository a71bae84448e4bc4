"""accelnet xfer over the loopback stand-in transport (src/xfer/transport.h): chunks move by
"RDMA write" into a region the receiver registered (a sealed memfd the sender maps), with
WRITTEN on the control connection as the completion. A tree and a large file land byte-exact
over it, corrupt writes are found by their hash and sent again, a killed transfer resumes, a
hostile sender cannot make the receiver read outside its region, and a receiver that does not
offer the stand-in is named in a clear error. ACCELNET_XFER_TRANSPORT=loopback on both ends."""

import os
import signal
import struct
import subprocess

from harness import BIN, free_port
from test_xfer import digest, make_file, metric, send, serve
from test_xfer_security import ACK, ERR, MANIFEST, NEED, OK, Wire, manifest, xxh64

REGION, WRITTEN = 14, 15  # src/xfer/wire.h
LOOP = {"ACCELNET_XFER_TRANSPORT": "loopback"}


def send_loop(args, check=True):
    old = dict(os.environ)
    os.environ.update(LOOP)
    try:
        return send(args, check=check)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_tree_and_large_file_with_corrupt_writes(env):
    """A 12 MiB file and a tree over the stand-in, every 7th write corrupted on arrival: all
    land byte-exact, the corrupt chunks are counted on both ends and sent again, and nothing
    went by sendfile or zero-copy (the bytes did not travel on the socket)."""
    src, dst = os.path.join(env.dir, "src"), os.path.join(env.dir, "dst")
    os.makedirs(os.path.join(src, "tree", "sub"))
    os.makedirs(dst)
    make_file(os.path.join(src, "big.bin"), 12 * 1024 * 1024 + 77)
    make_file(os.path.join(src, "tree", "sub", "small.txt"), 1000, seed=2)
    make_file(os.path.join(src, "tree", "mid.bin"), 300 * 1024 + 3, seed=3)
    open(os.path.join(src, "tree", "empty"), "wb").close()
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}",
          envvars=dict(LOOP, ACCELNET_XFER_CORRUPT_EVERY="7"))
    rep = send_loop([os.path.join(src, "big.bin"), os.path.join(src, "tree"),
                     f"127.0.0.1:{port}", "--chunk-kib", "256"])
    for rel in ("big.bin", "tree/sub/small.txt", "tree/mid.bin", "tree/empty"):
        assert digest(os.path.join(src, rel)) == digest(os.path.join(dst, rel)), rel
    assert rep["chunks_corrupt"] >= 3 and rep["chunks_resent"] >= 3, rep
    assert metric(mport, 'accelnet_xfer_chunks_total{result="corrupt"}') == rep["chunks_corrupt"]
    assert rep["zerocopy_bytes"] == 0, rep
    assert metric(mport, "accelnet_xfer_batches_total") == 0  # the stand-in moves chunks only
    assert os.listdir(os.path.join(dst, ".accelnet-xfer")) == []


def test_killed_transfer_resumes(env):
    """The sender is killed mid-transfer; the same command again sends only what had not
    arrived, and the file is intact."""
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 48 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}", envvars=LOOP)
    args = [src, f"127.0.0.1:{port}", "--chunk-kib", "4", "--streams", "1"]
    p = subprocess.Popen([BIN, "xfer", "send"] + args + ["--json"], env=dict(os.environ, **LOOP),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while (metric(mport, "accelnet_xfer_received_bytes_total") or 0) < 4 << 20:
            assert p.poll() is None, "the transfer ended before it could be killed"
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    assert not os.path.exists(os.path.join(dst, "f.bin"))
    rep = send_loop(args)
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    assert 4 << 20 <= rep["bytes_skipped"] < rep["bytes"], rep
    assert rep["bytes_skipped"] + rep["bytes_acked"] == rep["bytes"], rep


def region_of(w, want):
    """Ask for a region of <want> bytes: (key, len, pid, fd)."""
    w.send(REGION, struct.pack("<Q", want))
    t, meta, _ = w.frame()
    assert t == REGION, (t, meta)
    return struct.unpack("<QQII", meta)


def test_hostile_writes_stay_inside_the_region(env):
    """By hand: a chunk written into the advertised region and completed with WRITTEN is
    acknowledged and lands; a WRITTEN naming an offset past the region, or a region too large,
    is refused with its reason; WRITTEN before any region is refused."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst, envvars=LOOP)
    data = os.urandom(4096)

    def open_transfer():
        w = Wire.dial(port)
        assert w.hello(os.urandom(16))[0] == OK
        w.send(MANIFEST, manifest([("f.bin", len(data), 0o644)], chunk=4096))
        assert w.frame()[0] == NEED
        return w

    w = open_transfer()
    key, size, pid, fd = region_of(w, 3 * 4096)
    assert size == 3 * 4096
    path = f"/proc/{pid}/fd/{fd}"
    assert os.readlink(path) == f"/memfd:accelnet-xfer-{key:016x} (deleted)"
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(data)
    w.send(WRITTEN, struct.pack("<IIQQ", 0, 0, xxh64(data), 4096))
    t, meta, _ = w.frame()
    assert t == ACK and meta[8] == 0, (t, meta)
    for off in (size - 4095, size, 1 << 63):
        w = open_transfer()
        region_of(w, 3 * 4096)
        w.send(WRITTEN, struct.pack("<IIQQ", 0, 0, xxh64(data), off))
        t, meta, _ = w.frame()
        assert t == ERR and b"outside the region" in meta, (off, t, meta)
    w = open_transfer()
    w.send(REGION, struct.pack("<Q", 1 << 40))
    t, meta, _ = w.frame()
    assert t == ERR and b"region" in meta, (t, meta)
    w = open_transfer()
    w.send(WRITTEN, struct.pack("<IIQQ", 0, 0, xxh64(data), 0))
    t, meta, _ = w.frame()
    assert t == ERR and b"before a region" in meta, (t, meta)


def test_receiver_without_the_stand_in(env):
    """A sender told to use the stand-in, towards a receiver that does not offer it, fails at
    once with the receiver's reason; the same receiver takes plain TCP transfers as before."""
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 1 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    rep = send_loop([src, f"127.0.0.1:{port}"], check=False)
    assert rep["rc"] != 0 and not rep["ok"] and "transport loopback" in rep["error"], rep
    assert "unexpected message" in rep["error"], rep
    send([src, f"127.0.0.1:{port}"])
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
