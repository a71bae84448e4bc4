"""accelnet xfer: the manifest streamed in parts (protocol 3, src/xfer/wire.h). A tree of a few
thousand files goes in several parts and lands byte-exact with its modes and times; a transfer
cut after its first part and some of its files, then run again, is sent only what the receiver
did not have; hostile parts are refused with a reason: a part after the last, a name twice
across parts, totals that lie, more files than --max-files across parts, a chunk size that
changes, an empty part, a bcast hop not allowed, FINISH or a chunk of a file not listed yet,
and a second connection joining a manifest still coming. Data flows before the listing ends,
on the connection that carries the parts too (--streams 1), and `xfer get`'s server streams its
manifest the same way, and so does a bcast chain, each relay forwarding a part as it comes
(with the receiver's checks at each relay, and at the get client): shown without timing anything by ACCELNET_XFER_HOLD_LAST_PART, which
holds a sender's last part until a path matches (and fails the transfer after 20 s if none
does); tests/unit/test_xfer_api.c shows it through the API."""

import glob
import os
import signal
import struct
import socket
import subprocess
import threading
import time

from harness import BIN, free_port, wait_until
from test_xfer import send, serve
from test_xfer_batch import batch_meta, make_small_tree, scratch
from test_xfer_security import (BATCH, BATCH_ACK, CHUNK, ERR, FINISH, MAGIC, MANIFEST, NEED, OK,
                                Wire, manifest, xxh64)


def test_tree_in_parts_arrives_whole(env):
    """3,000 small files (and an empty one, and one of several chunks) go in several manifest
    parts and land byte-exact with the source's permission bits and modification times; the
    summary says how many parts and how long the listing took, and nothing is left behind."""
    work = scratch(env)
    src, dst = os.path.join(work, "src", "tree"), os.path.join(work, "dst")
    os.makedirs(dst)
    files = make_small_tree(src, 3000)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    rep = send([src, f"127.0.0.1:{port}", "--chunk-kib", "64"])
    assert rep["files"] == len(files) and rep["bytes_dup"] == 0, rep
    assert rep["manifest_parts"] > 1, rep  # 64 files first, then twice as many a part
    assert 0 < rep["listing_seconds"] <= rep["seconds"], rep
    for rel, data in files:
        a, b = os.path.join(src, rel), os.path.join(dst, "tree", rel)
        with open(b, "rb") as f:
            assert f.read() == data, rel
        sa, sb = os.stat(a), os.stat(b)
        assert sa.st_mode & 0o777 == sb.st_mode & 0o777, (rel, oct(sa.st_mode), oct(sb.st_mode))
        assert sa.st_mtime_ns == sb.st_mtime_ns, rel
    assert os.listdir(os.path.join(dst, ".accelnet-xfer")) == []


def part(files, last=False, totals=None, chunk=65536, fwd=()):
    return manifest(files, chunk=chunk, fwd=fwd, last=last, totals=totals)


def opened(port):
    w = Wire.dial(port)
    assert w.hello(os.urandom(16))[0] == OK
    return w


def test_cut_mid_manifest_resumes(env):
    """A sender cut after the first part of its manifest and a batch of its files (the
    connection closed, the rest of the tree never listed): the files of that batch are in place,
    and the real sender, run again over the whole tree, is sent everything but them."""
    work = scratch(env)
    src, dst = os.path.join(work, "src", "tree"), os.path.join(work, "dst")
    os.makedirs(dst)
    files = make_small_tree(src, 400)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    # the first part as the real sender lists it: names under "tree/", the source's identity
    first = []
    for rel, data in sorted(files)[:100]:
        st = os.stat(os.path.join(src, rel))
        first.append((f"tree/{rel}", len(data), st.st_mode & 0o7777, st.st_mtime_ns, data))
    w = opened(port)
    w.send(MANIFEST, part([f[:4] for f in first]))
    t, meta, _ = w.frame()
    assert t == NEED, (t, meta)
    small = [(i, f) for i, f in enumerate(first) if 0 < f[1] <= 65536][:20]
    w.send(BATCH, batch_meta([(i, f[1], xxh64(f[4])) for i, f in small]), b"".join(f[4] for _, f in small))
    t, meta, _ = w.frame()
    assert t == BATCH_ACK and all(meta[4 + 5 * k + 4] == 0 for k in range(len(small))), (t, meta)
    w.close()  # killed mid-manifest
    for _, f in small:
        with open(os.path.join(dst, f[0]), "rb") as fh:
            assert fh.read() == f[4], f[0]
    rep = send([src, f"127.0.0.1:{port}", "--chunk-kib", "64"])
    assert rep["bytes_skipped"] == sum(f[1] for _, f in small), rep
    assert rep["bytes_skipped"] + rep["bytes_acked"] == rep["bytes"], rep
    for rel, data in files:
        with open(os.path.join(dst, "tree", rel), "rb") as fh:
            assert fh.read() == data, rel


def refused(w, why):
    t, meta, _ = w.frame()
    assert t == ERR and why.encode() in meta, (t, meta)
    w.close()


def test_hostile_manifest_parts_are_refused(env):
    """Each hostile part is answered with ERR and its reason; nothing is created for it."""
    dst = os.path.join(scratch(env), "dst")
    os.makedirs(dst)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst, extra=["--max-files", "10"])

    def after_first(files, last=False):
        w = opened(port)
        w.send(MANIFEST, part(files, last=last))
        t, meta, _ = w.frame()
        assert t == NEED, (t, meta)
        return w

    a, b, c = ("a", 5, 0o644), ("b", 7, 0o644), ("c", 9, 0o644)
    # a part after the last
    w = after_first([a], last=True)
    w.send(MANIFEST, part([b], last=True, totals=(2, 12)))
    refused(w, "a part after the last one")
    # the same name in two parts
    w = after_first([a, b])
    w.send(MANIFEST, part([("c", 1, 0o644), a], last=True, totals=(4, 18)))
    refused(w, "'a' appears twice in the manifest")
    # totals that lie: files, then bytes
    w = after_first([a, b])
    w.send(MANIFEST, part([c], last=True, totals=(4, 21)))
    refused(w, "its last part says 4 files and 21 bytes in all, its parts listed 3 files and 21 bytes")
    w = after_first([a, b])
    w.send(MANIFEST, part([c], last=True, totals=(3, 20)))
    refused(w, "its parts listed 3 files and 21 bytes")
    # more files than --max-files, across parts (each part alone is within it)
    w = after_first([(f"x{i}", 1, 0o644) for i in range(6)])
    w.send(MANIFEST, part([(f"y{i}", 1, 0o644) for i in range(6)], last=True, totals=(12, 12)))
    refused(w, "too many files in one transfer (at most 10: serve --max-files)")
    # a chunk size that changes, an empty part that is not the last
    w = after_first([a])
    w.send(MANIFEST, part([b], chunk=4096))
    refused(w, "its parts disagree on the chunk size")
    w = after_first([a])
    w.send(MANIFEST, part([]))
    refused(w, "a part other than the last lists no file")
    # a bcast first part (parts are forwarded now) to a hop this server may not dial
    w = opened(port)
    w.send(MANIFEST, part([a], fwd=["127.0.0.1:1"]))
    refused(w, "does not relay to 127.0.0.1:1")
    # FINISH before the last part; a chunk of a file not listed yet
    w = after_first([a])
    w.send(FINISH, bytes(16))
    refused(w, "FINISH before the manifest's last part")
    w = after_first([a])
    w.send(CHUNK, struct.pack("<IIQ", 1, 0, xxh64(b"x" * 7)), b"x" * 7)
    refused(w, "chunk outside the manifest")
    # a second connection sending a manifest for a transfer whose manifest is still coming
    session = os.urandom(16)
    w = Wire.dial(port)
    assert w.hello(session)[0] == OK
    w.send(MANIFEST, part([a]))
    assert w.frame()[0] == NEED
    v = Wire.dial(port)
    assert v.hello(session)[0] == OK
    v.send(MANIFEST, part([b], last=True, totals=(2, 12)))
    refused(v, "the transfer's manifest is still coming on another connection")
    w.close()
    state = os.path.join(dst, ".accelnet-xfer")
    assert os.listdir(dst) in ([], [".accelnet-xfer"]), os.listdir(dst)
    assert not os.path.isdir(state) or os.listdir(state) == [], os.listdir(state)


HOLD = "ACCELNET_XFER_HOLD_LAST_PART"


def held(pattern, fn, *args, **kw):
    """Run fn with the hold knob set to <pattern> in the environment of what it starts."""
    old = os.environ.get(HOLD)
    os.environ[HOLD] = pattern
    try:
        return fn(*args, **kw)
    finally:
        if old is None:
            del os.environ[HOLD]
        else:
            os.environ[HOLD] = old


def same_tree(files, root):
    for rel, data in files:
        with open(os.path.join(root, rel), "rb") as f:
            assert f.read() == data, rel


def test_one_stream_carries_data_while_listing(env):
    """--streams 1 on one link: the connection that carries the manifest's parts carries the
    files too, so the receiver has files in place while the sender still holds its last part
    (before, that connection carried nothing until the last part was answered: the hold timed
    out and the transfer failed)."""
    work = scratch(env)
    src, dst = os.path.join(work, "src", "tree"), os.path.join(work, "dst")
    os.makedirs(dst)
    files = make_small_tree(src, 300)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    rep = held(os.path.join(dst, "tree", "d*", "f*"), send,
               [src, f"127.0.0.1:{port}", "--streams", "1", "--chunk-kib", "64"], check=False)
    assert rep["rc"] == 0, rep
    assert rep["manifest_parts"] > 1 and rep["files"] == len(files), rep
    same_tree(files, os.path.join(dst, "tree"))


def test_get_streams_its_manifest_and_resumes(env):
    """`xfer get`: the server walks the tree while it sends it, in parts. Its last part held
    (until the test says go), the client already has files in place; the client killed then,
    mid-manifest, and run again, is sent only what it lacked, and every file lands whole."""
    work = scratch(env)
    served, dst = os.path.join(work, "served"), os.path.join(work, "dst")
    os.makedirs(dst)
    files = make_small_tree(os.path.join(served, "tree"), 300)
    go = os.path.join(work, "go")
    os.makedirs(go)
    port = free_port()
    srv = held(os.path.join(go, "*"), serve, env, f"127.0.0.1:{port}", served)
    # a knob for tests: a daemon that has it says so at once
    assert "ACCELNET_XFER_HOLD_LAST_PART is set: a knob for tests" in env.log(srv), env.log(srv)
    argv = [BIN, "xfer", "get", f"127.0.0.1:{port}", "tree", "--to", dst, "--chunk-kib", "64",
            "--json"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    env.on_cleanup.append(lambda: first.poll() is None and first.kill())
    wait_until(lambda: glob.glob(os.path.join(dst, "tree", "d*", "f*")) or first.poll() is not None,
               "a file in place")
    assert first.poll() is None, first.communicate()  # the server still holds its last part
    first.send_signal(signal.SIGKILL)
    first.wait()
    had = glob.glob(os.path.join(dst, "tree", "d*", "f*"))
    assert had and len(had) < len(files), len(had)
    open(os.path.join(go, "now"), "w").close()
    rep = send([f"127.0.0.1:{port}", "tree", "--to", dst, "--chunk-kib", "64"], cmd="get")
    assert rep["manifest_parts"] > 1 and rep["files"] == len(files), rep
    assert rep["bytes_skipped"] >= sum(os.path.getsize(p) for p in had) > 0, rep
    same_tree(files, os.path.join(dst, "tree"))


class PartsServer:
    """A hostile server for `xfer get`: after the handshake and the GET, it sends the MANIFEST
    parts <parts> one by one, reading the client's answer to each; .answers holds them
    [(type, meta)] (the client's ERR says why it refused)."""

    def __init__(self, env, parts):
        self.parts, self.answers = parts, []
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()
        env.on_cleanup.append(self.close)

    def run(self):
        try:
            c, _ = self.ls.accept()
            c.settimeout(20)
            w = Wire(c)
            w.welcome()
            w.frame()  # GET
            for meta in self.parts:
                w.send(MANIFEST, meta)
                t, meta, _ = w.frame()
                self.answers.append((t, meta))
                if t != NEED:
                    break
            c.close()
        except (OSError, ConnectionError, AssertionError, struct.error):
            pass

    def close(self):
        self.ls.close()
        self.th.join(10)


def get_refuses(env, parts, why):
    """`xfer get t` from a PartsServer sending <parts>: the client refuses the last of them with
    ERR <why>, exits non-zero saying so, and nothing lands."""
    to = os.path.join(scratch(env), "to")
    os.makedirs(to)
    fake = PartsServer(env, parts)
    r = subprocess.run([BIN, "xfer", "get", f"127.0.0.1:{fake.port}", "t", "--to", to, "--streams",
                        "1", "--quiet"], capture_output=True, text=True, timeout=60)
    fake.close()
    assert r.returncode != 0 and why in r.stderr, (r.returncode, r.stderr)
    assert [t for t, _ in fake.answers] == [NEED] * (len(parts) - 1) + [ERR], fake.answers
    assert why.encode() in fake.answers[-1][1], fake.answers
    assert not os.path.exists(os.path.join(to, "t")), os.listdir(to)


A, B, C = ("t/a", 5, 0o644), ("t/b", 7, 0o644), ("t/c", 9, 0o644)


def test_get_client_refuses_a_part_after_the_last(env):
    get_refuses(env, [part([A], last=True), part([B], last=True, totals=(2, 12))],
                "a part after the last one")


def test_get_client_refuses_a_name_twice_across_parts(env):
    get_refuses(env, [part([A, B]), part([C, A], last=True, totals=(4, 26))],
                "'t/a' appears twice in the manifest")


def test_get_client_refuses_totals_that_lie(env):
    get_refuses(env, [part([A, B]), part([C], last=True, totals=(3, 20))],
                "its last part says 3 files and 20 bytes in all, its parts listed 3 files and 21 bytes")


def test_bcast_chain_streams_its_manifest(env):
    """A chain of three: each relay forwards the source's parts as they arrive, so the last hop
    has files in place while the source still holds its last part; every hop gets the tree
    whole (before, the chain took the manifest in one part)."""
    work = scratch(env)
    src = os.path.join(work, "src", "tree")
    files = make_small_tree(src, 300)
    hops = []
    for i in range(3):
        d = os.path.join(work, f"r{i}")
        os.makedirs(d)
        port = free_port()
        serve(env, f"127.0.0.1:{port}", d, name=f"serve{i}", extra=["--relay-to", "127.0.0.0/8"])
        hops.append((d, f"127.0.0.1:{port}"))
    rep = held(os.path.join(hops[-1][0], "tree", "d*", "f*"), send,
               [src] + [h for _, h in hops] + ["--chunk-kib", "64"], cmd="bcast", check=False)
    assert rep["rc"] == 0, rep
    assert rep["manifest_parts"] > 1 and rep["files"] == len(files), rep
    for d, _ in hops:
        same_tree(files, os.path.join(d, "tree"))


def relay_refuses(env, first, hostile, why, first_last=False):
    """A relay (serve with --relay-to) takes a first part naming a next hop, and forwards it;
    the hostile part after it is refused with ERR <why>, and nothing lands at the next hop."""
    work = scratch(env)
    d1, d2 = os.path.join(work, "relay"), os.path.join(work, "next")
    os.makedirs(d1)
    os.makedirs(d2)
    p1, p2 = free_port(), free_port()
    serve(env, f"127.0.0.1:{p2}", d2, name="next")
    serve(env, f"127.0.0.1:{p1}", d1, name="relay", extra=["--relay-to", "127.0.0.0/8"])
    w = opened(p1)
    w.send(MANIFEST, part(first, last=first_last, fwd=[f"127.0.0.1:{p2}"]))
    t, meta, _ = w.frame()
    assert t == NEED, (t, meta)
    w.send(MANIFEST, hostile)
    refused(w, why)
    for d in (d1, d2):
        assert not os.path.exists(os.path.join(d, "t")), os.listdir(d)


def test_relay_refuses_a_part_after_the_last(env):
    relay_refuses(env, [A], part([B], last=True, totals=(2, 12)), "a part after the last one",
                  first_last=True)


def test_relay_refuses_a_name_twice_across_parts(env):
    relay_refuses(env, [A, B], part([C, A], last=True, totals=(4, 26)),
                  "'t/a' appears twice in the manifest")


def test_relay_refuses_totals_that_lie(env):
    relay_refuses(env, [A, B], part([C], last=True, totals=(3, 20)),
                  "its last part says 3 files and 20 bytes in all, its parts listed 3 files and 21 bytes")


class TricklingHop:
    """A bcast next hop that answers the handshakes, takes the relay's first manifest part, then
    sends its NEED a byte every 0.4 s (the header alone would take 6.4 s); `cut` is set when the
    relay closes that connection. Other connections (the relay's data streams) are held open."""

    def __init__(self, env):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.cut, self.trickling, self.conns = threading.Event(), threading.Event(), []
        threading.Thread(target=self.accept, daemon=True).start()
        env.on_cleanup.append(self.close)

    def accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.run, args=(c,), daemon=True).start()

    def run(self, c):
        c.settimeout(60)
        w = Wire(c)
        try:
            w.welcome()
            t, _, _ = w.frame()
            if t != MANIFEST:
                c.recv(1)  # a data stream: held until the relay lets go
                return
            self.trickling.set()
            need = struct.pack("<IBBHII", MAGIC, NEED, 0, 0, 64, 0) + bytes(64)
            for b in need:
                c.sendall(bytes([b]))
                time.sleep(0.4)
        except OSError:
            self.cut.set()

    def close(self):
        self.ls.close()
        for c in self.conns:
            c.close()


def test_relay_cuts_a_next_hop_that_trickles_its_need(env):
    """A bcast relay waits for its next hop's NEED before it answers its own (each part). A next
    hop sending that NEED a byte at a time held the relay's thread, and the transfer's disk
    reservation, a read's timeout (600 s) per byte. Now the NEED, from its first byte, has the
    relay's --frame-ms (and a second per --min-rate-kib KiB): the relay cuts the hop and says why
    to the source. ~2 s."""
    work = scratch(env)
    src = os.path.join(work, "src", "tree")
    make_small_tree(src, 20)
    d = os.path.join(work, "relay")
    os.makedirs(d)
    hop = TricklingHop(env)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", d, name="relay",
          extra=["--relay-to", "127.0.0.0/8", "--frame-ms", "1000"])
    rep = send([src, f"127.0.0.1:{port}", f"127.0.0.1:{hop.port}"], cmd="bcast", check=False,
               timeout=60)
    assert hop.trickling.is_set(), "the hop never got the relay's manifest part"
    assert rep["rc"] != 0 and "no whole answer (NEED) to a manifest part in time" in \
        rep["stderr"], rep
    wait_until(hop.cut.is_set, "the relay to cut the trickling hop")
