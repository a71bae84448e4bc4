"""accelnet xfer: small files in batches (protocol 2's BATCH, src/xfer/wire.h). A tree of many
small files lands byte-exact with its modes and times; hostile batches are refused with a
reason and write nothing; a receiver killed in the middle of a batch leaves no half-written
file and, run again, is sent only what it did not have; a peer of protocol 1 is refused with
both versions named."""

import os
import shutil
import signal
import struct
import tempfile

from harness import free_port
from test_xfer import digest, metric, send, serve
from test_xfer_security import BATCH, BATCH_ACK, ERR, MANIFEST, NEED, OK, Wire, manifest, xxh64


def scratch(env):
    """A directory in a tmpfs when there is one (removed at cleanup)."""
    if not os.path.isdir("/dev/shm"):
        return env.dir
    d = tempfile.mkdtemp(prefix="xfer-batch-", dir="/dev/shm")
    env.on_cleanup.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


MODES = (0o644, 0o600, 0o755, 0o640)


def make_small_tree(root, n):
    """<n> files of 1 byte to 64 KiB over four directories, modes and times varied, plus an empty
    file and one of several chunks: [(relative path, bytes)]."""
    out = []
    for i in range(n):
        rel = os.path.join(f"d{i % 4}", f"f{i:04d}")
        size = (1, 100, 4096, 65536)[i % 4] if i % 7 else 4096 + i
        data = os.urandom(size)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, MODES[i % len(MODES)])
        os.utime(path, ns=(1_700_000_000_000_000_000 + i, 1_600_000_000_123_456_789 + i * 1000))
        out.append((rel, data))
    for rel, data in (("empty", b""), ("big", os.urandom(3 * 65536 + 5))):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        out.append((rel, data))
    return out


def test_tree_of_small_files_arrives_whole(env):
    """1,000 small files (and an empty one, and one of several chunks) land byte-exact, each
    with the source's permission bits and modification time, sent in batches (the receiver
    counts them); nothing is left in the directory of partial files."""
    work = scratch(env)
    src, dst = os.path.join(work, "src", "tree"), os.path.join(work, "dst")
    os.makedirs(dst)
    files = make_small_tree(src, 1000)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}")
    rep = send([src, f"127.0.0.1:{port}", "--chunk-kib", "64"])
    assert rep["files"] == len(files) and rep["bytes_dup"] == 0, rep
    for rel, data in files:
        a, b = os.path.join(src, rel), os.path.join(dst, "tree", rel)
        with open(b, "rb") as f:
            assert f.read() == data, rel
        sa, sb = os.stat(a), os.stat(b)
        assert sa.st_mode & 0o777 == sb.st_mode & 0o777, (rel, oct(sa.st_mode), oct(sb.st_mode))
        assert sa.st_mtime_ns == sb.st_mtime_ns, rel
    batches = metric(mport, "accelnet_xfer_batches_total")
    assert 0 < batches < 100, batches  # 18 MB in files of at most 64 KiB, 1 MiB a batch at most
    assert metric(mport, "accelnet_xfer_files_completed_total") == len(files)
    assert os.listdir(os.path.join(dst, ".accelnet-xfer")) == []


def test_corrupt_batched_files_are_resent(env):
    """Batched files found corrupt on arrival (the receiver's fault injection: every 7th) are
    answered corrupt in their batch's acknowledgement and sent again; every file lands intact
    and the corruption is counted on both ends."""
    work = scratch(env)
    src, dst = os.path.join(work, "src", "tree"), os.path.join(work, "dst")
    os.makedirs(dst)
    files = make_small_tree(src, 300)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}",
          envvars={"ACCELNET_XFER_CORRUPT_EVERY": "7"})
    rep = send([src, f"127.0.0.1:{port}", "--chunk-kib", "64"])
    for rel, data in files:
        with open(os.path.join(dst, "tree", rel), "rb") as f:
            assert f.read() == data, rel
    assert rep["chunks_corrupt"] >= 30 and rep["chunks_resent"] >= 30, rep
    assert metric(mport, 'accelnet_xfer_chunks_total{result="corrupt"}') == rep["chunks_corrupt"]
    assert metric(mport, "accelnet_xfer_batches_total") > 0


def open_transfer(port, files, chunk=65536):
    """A connection that sent MANIFEST for <files> [(path, size, mode[, mtime])] and read NEED."""
    w = Wire.dial(port)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, manifest(files, chunk=chunk))
    t, meta, _ = w.frame()
    assert t == NEED, (t, meta)
    return w


def batch_meta(entries):
    """BATCH's meta: entries [(file index, len, hash)], the count first."""
    return struct.pack("<I", len(entries)) + b"".join(struct.pack("<IIQ", *e) for e in entries)


def test_hostile_batches_are_refused(env):
    """Each hostile BATCH is answered with ERR and its reason, before any of its bytes are
    written: no file or too many, a count that does not match the meta, lengths that do not add
    up to the data, files out of order or twice, a file outside the manifest, of another length
    or of several chunks, more than 1 MiB; and a file whose directory is a symlink leading out
    of DIR is not written there."""
    work = scratch(env)
    dst, outside = os.path.join(work, "dst"), os.path.join(work, "outside")
    os.makedirs(dst)
    os.makedirs(outside)
    os.symlink(outside, os.path.join(dst, "link"))
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    a, b = os.urandom(4096), os.urandom(100)
    files = [("x/a", len(a), 0o644), ("x/b", len(b), 0o644), ("x/big", 3 * 65536, 0o644),
             ("link/evil", len(a), 0o644)]
    ok = [(0, len(a), xxh64(a)), (1, len(b), xxh64(b))]
    cases = [
        (batch_meta([]), b"", "no file or too many"),
        (batch_meta([(i, 1, 0) for i in range(257)]), bytes(257), "no file or too many"),
        (batch_meta(ok)[:-4], a + b, "count does not match"),
        (batch_meta(ok), a + b + b"!", "do not add up"),
        (batch_meta(ok[::-1]), b + a, "out of order or named twice"),
        (batch_meta([ok[0], ok[0]]), a + a, "out of order or named twice"),
        (batch_meta([(9, len(a), xxh64(a))]), a, "file 9 is not in the manifest"),
        (batch_meta([(0, 100, xxh64(b))]), b, "file 0 is not in the manifest as a file of 100"),
        (batch_meta([(2, 65536, 0)]), bytes(65536), "file 2 is not in the manifest"),
        (batch_meta([(i, 65536, 0) for i in range(17)]), bytes(17 * 65536), "larger than"),
    ]
    for meta, data, why in cases:
        w = open_transfer(port, files)
        w.send(BATCH, meta, data_len=len(data))  # refused before its data is read
        t, text, _ = w.frame()
        assert t == ERR and b"bad batch" in text and why.encode() in text, (why, t, text)
        w.close()
    w = open_transfer(port, files)
    w.send(BATCH, batch_meta([(3, len(a), xxh64(a))]), a)
    t, meta, _ = w.frame()
    assert t == BATCH_ACK and meta == struct.pack("<IIB", 1, 3, 3), (t, meta)  # XFER_ACK_IO
    t, text, _ = w.frame()
    assert t == ERR and b"outside the directory" in text, text
    w.close()
    assert os.listdir(outside) == []
    assert not os.path.exists(os.path.join(dst, "x"))


def test_receiver_killed_in_a_batch_resumes(env):
    """A sender's first batch (10 files) is acknowledged; the receiver is killed while the
    second is on the wire. No file of the second batch is at its final name, whole or not; run
    again, `xfer send` of the tree is sent every file but the first batch's (bytes_skipped is
    theirs exactly, nothing is sent twice) and the tree lands whole."""
    work = scratch(env)
    src, dst = os.path.join(work, "src", "tree"), os.path.join(work, "dst")
    os.makedirs(src)
    os.makedirs(dst)
    names = [f"f{i:02d}" for i in range(30)]
    data = {n: os.urandom(1000 + i) for i, n in enumerate(names)}
    for n in names:
        with open(os.path.join(src, n), "wb") as f:
            f.write(data[n])
    port = free_port()
    p = serve(env, f"127.0.0.1:{port}", dst)
    entries = [(f"tree/{n}", len(data[n]), 0o644, os.stat(os.path.join(src, n)).st_mtime_ns)
               for n in names]
    w = open_transfer(port, entries)
    first = [(i, len(data[n]), xxh64(data[n])) for i, n in enumerate(names[:10])]
    w.send(BATCH, batch_meta(first), b"".join(data[n] for n in names[:10]))
    t, meta, _ = w.frame()
    assert t == BATCH_ACK and meta == struct.pack("<I", 10) + b"".join(
        struct.pack("<IB", i, 0) for i in range(10)), meta
    second = [(10 + i, len(data[n]), xxh64(data[n])) for i, n in enumerate(names[10:20])]
    body = b"".join(data[n] for n in names[10:20])
    w.s.sendall(struct.pack("<IBBHII", 0x31465841, BATCH, 0, 0, 4 + 16 * 10, len(body)) +
                batch_meta(second) + body[:len(body) // 2])
    env.stop(p, sig=signal.SIGKILL)
    w.close()
    landed = sorted(os.listdir(os.path.join(dst, "tree")))
    assert landed == names[:10], landed
    for n in landed:
        with open(os.path.join(dst, "tree", n), "rb") as f:
            assert f.read() == data[n], n
    serve(env, f"127.0.0.1:{port}", dst, name="serve2")
    rep = send([src, f"127.0.0.1:{port}"])
    first_bytes = sum(len(data[n]) for n in names[:10])
    assert rep["bytes_skipped"] == first_bytes, rep
    assert rep["bytes_sent"] == rep["bytes"] - first_bytes and rep["bytes_dup"] == 0, rep
    for n in names:
        assert digest(os.path.join(src, n)) == digest(os.path.join(dst, "tree", n)), n


def test_protocol_1_peer_is_refused(env):
    """A sender speaking protocol 1 (before batches) is refused at its HELLO with a message that
    names both versions and what to do."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    w = Wire.dial(port)
    t, text = w.hello(os.urandom(16), version=1)
    assert t == ERR, (t, text)
    assert b"protocol 1" in text and b"this one 3" in text and b"same accelnet release" in text, text
    w.close()
    assert os.listdir(dst) == []
