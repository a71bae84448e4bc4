"""accelnet xfer: transfers as a user runs them. Links with rates are veth pairs between two
network namespaces the test makes (netns.Links), shaped with tbf; the rest runs on loopback."""

# Alone under run.py -j: the tests on shaped links (netns.Links) compare what each link carried
# with its rate, or act mid-transfer (a link down, a receiver killed, a progress bar drawn
# while it runs): a CPU short of time for the sender bends both. So does the loopback test
# that asserts both of its links carried bytes (under load one link's streams can take every
# chunk of a 9 MiB file before the other's connect). The other tests on loopback check
# bytes, digests and refusals, which load only slows.
SERIAL = {"test_loopback_files_and_tree", "test_two_links_unequal_rates",
          "test_three_links_share_by_rate",
          "test_split_adapts_when_a_link_slows", "test_link_down_mid_transfer",
          "test_link_back_is_used_again", "test_receiver_killed_then_resumed",
          "test_progress_bar_on_a_terminal"}

import hashlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import time

from harness import BIN, free_port, wait_until
from netns import Links, tcp_received


def make_file(path, size, seed=1):
    """Write <size> pseudo-random bytes (fast: a hash chain, not a Python loop per byte)."""
    block = hashlib.sha512(str(seed).encode()).digest() * 16384  # 1 MiB
    with open(path, "wb") as f:
        left = size
        i = 0
        while left:
            n = min(left, len(block))
            f.write(block[:n] if i % 2 == 0 else block[n - 1::-1][:n])
            left -= n
            i += 1
            block = block[7:] + block[:7]
    return path


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def serve(env, listen, dest, name="serve", ns=None, token=None, metrics=None, envvars=None, extra=()):
    """Start `accelnet xfer serve` and wait for its 'listening' line (without a token, with
    --insecure: these tests are about transfers, test_xfer_security about who may make them)."""
    argv = [BIN, "xfer", "serve", "--listen", listen, "--dir", dest] + list(extra)
    argv += ["--token", token] if token else ["--insecure"]
    if metrics:
        argv += ["--metrics", metrics]
    if ns:
        argv = ns.cmd(ns.rcv, argv)
    old = dict(os.environ)
    os.environ.update(envvars or {})
    try:
        p = env.start(argv, name)
    finally:
        os.environ.clear()
        os.environ.update(old)

    def up():
        if p.poll() is not None:
            raise AssertionError(f"{name} exited with {p.returncode}:\n{env.log(p)}")
        return "listening" in env.log(p)
    wait_until(up, f"{name} listening")
    return p


def send(args, ns=None, check=True, timeout=120, cmd="send"):
    argv = [BIN, "xfer", cmd] + args + ["--json"]
    if ns:
        argv = ns.cmd(ns.snd, argv)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert r.stdout.strip(), f"no JSON summary; stderr: {r.stderr}"
    rep = json.loads(r.stdout)
    if check:
        assert r.returncode == 0 and rep["ok"], f"transfer failed: {r.stderr}"
    rep["rc"], rep["stderr"] = r.returncode, r.stderr
    return rep


def metric(port, name, ns=None):
    argv = ["curl", "-s", f"http://127.0.0.1:{port}/metrics"]
    if ns:
        argv = ns.cmd(ns.rcv, argv)
    text = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"^" + re.escape(name) + r" (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def links(env, rates):
    ln = Links(rates)
    env.on_cleanup.append(ln.close)
    return ln


def test_loopback_files_and_tree(env):
    """A file and a directory tree over two loopback addresses: all land intact, nothing
    partial is left behind, and a second identical send succeeds too."""
    src, dst = os.path.join(env.dir, "src"), os.path.join(env.dir, "dst")
    os.makedirs(os.path.join(src, "tree", "sub"))
    os.makedirs(dst)
    os.symlink("..", os.path.join(src, "tree", "sub", "loop"))  # not followed inside a tree
    make_file(os.path.join(src, "big.bin"), 9 * 1024 * 1024 + 77)
    make_file(os.path.join(src, "tree", "sub", "small.txt"), 1000, seed=2)
    open(os.path.join(src, "tree", "empty"), "wb").close()
    port = free_port()
    serve(env, f"127.0.0.1:{port},127.0.0.2:{port}", dst)
    rep = send([os.path.join(src, "big.bin"), os.path.join(src, "tree"),
                f"127.0.0.1:{port},127.0.0.2:{port}", "--chunk-kib", "256"])
    assert rep["files"] == 3 and rep["bytes"] == 9 * 1024 * 1024 + 77 + 1000
    for rel in ("big.bin", "tree/sub/small.txt", "tree/empty"):
        assert digest(os.path.join(src, rel)) == digest(os.path.join(dst, rel)), rel
    left = os.listdir(os.path.join(dst, ".accelnet-xfer"))
    assert left == [], f"left in the staging directory after DONE: {left}"
    assert all(link["bytes"] > 0 for link in rep["links"]), rep["links"]
    rep = send([os.path.join(src, "big.bin"), f"127.0.0.1:{port}"])
    assert rep["bytes_skipped"] == rep["bytes"] and rep["bytes_sent"] == 0, rep  # already there
    rep = send([os.path.join(src, "big.bin"), f"127.0.0.1:{port}", "--to", "copy/renamed.bin"])
    assert digest(os.path.join(dst, "copy", "renamed.bin")) == digest(os.path.join(src, "big.bin"))


def test_two_links_unequal_rates(env):
    """Two links, 160 and 40 Mbit/s: both carry data, the faster one about four times more."""
    ln = links(env, [160, 40])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 16 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    serve(env, f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000", dst, ns=ln)
    rep = send([src, f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000", "--streams", "2",
                "--from", f"{ln.sender_addr(0)},{ln.sender_addr(1)}", "--chunk-kib", "256"], ns=ln)
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    fast, slow = rep["links"][0]["bytes"], rep["links"][1]["bytes"]
    assert slow > 0 and fast > 2 * slow, rep["links"]
    # whatever the end game copied is counted: what was sent is what was verified plus that
    assert rep["bytes_sent"] == rep["bytes_acked"] + rep["bytes_dup"], rep


def test_duplicate_bytes_counted(env):
    """The wasted bytes are reported: in --json, in the summary line and in the receiver's
    metrics; on a single link there is nothing to copy, so they are zero."""
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 4 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}")
    rep = send([src, f"127.0.0.1:{port}", "--chunk-kib", "256"])
    assert rep["bytes_dup"] == 0 and rep["bytes_sent"] == rep["bytes"] == 4 << 20, rep
    assert rep["chunks_dup"] == 0, rep
    assert metric(mport, "accelnet_xfer_duplicate_bytes_total") == 0
    os.unlink(os.path.join(dst, "f.bin"))
    r = subprocess.run([BIN, "xfer", "send", src, f"127.0.0.1:{port}"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "4.0 MiB sent, 0 B of it duplicate" in r.stderr, r.stderr


def test_three_links_share_by_rate(env):
    """Three links, 120/60/30 Mbit/s: each carries data in the order of its rate."""
    ln = links(env, [120, 60, 30])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 16 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    remote = ",".join(f"{ln.receiver_addr(i)}:7000" for i in range(3))
    serve(env, remote, dst, ns=ln)
    rep = send([src, remote, "--streams", "2", "--chunk-kib", "256"], ns=ln)
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    b = [link["bytes"] for link in rep["links"]]
    assert b[0] > b[1] > b[2] > 0, b


def send_while(ln, args, at_bytes, action, port=7099):
    """Start a send in the sender namespace, run action() once the receiver has read more
    than <at_bytes> (its metrics on <port>), and wait for the send: (exit code, report, stderr)."""
    argv = ln.cmd(ln.snd, [BIN, "xfer", "send"] + args + ["--json"])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (metric(port, "accelnet_xfer_received_bytes_total", ns=ln) or 0) > at_bytes,
                   f"{at_bytes} bytes received")
        action()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, json.loads(out), err


def test_split_adapts_when_a_link_slows(env):
    """Two equal links; an eighth of the way in, link 0 drops to a sixth of its rate: from
    then on the other link takes most chunks, so it ends up carrying clearly more. (24 MiB:
    with 12 a poll of the receiver's metrics on a loaded machine could see the switch come
    near the end, the links then even.)"""
    ln = links(env, [60, 60])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 24 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    remote = f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000"
    serve(env, remote, dst, ns=ln, metrics="127.0.0.1:7099")
    rc, rep, err = send_while(ln, [src, remote, "--streams", "2", "--chunk-kib", "128"], 3 << 20,
                              lambda: ln.set_rate(0, 10))
    assert rc == 0 and rep["ok"], err
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    slow, fast = rep["links"][0]["bytes"], rep["links"][1]["bytes"]
    assert fast > 1.5 * slow, rep["links"]


def test_link_down_mid_transfer(env):
    """A link taken down halfway: its chunks move to the other link, the file is intact."""
    ln = links(env, [80, 80])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 16 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    remote = f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000"
    serve(env, remote, dst, ns=ln, metrics="127.0.0.1:7099")
    rc, rep, err = send_while(ln, [src, remote, "--streams", "2", "--stall-ms", "1000", "--chunk-kib", "256"],
                              4 << 20, lambda: ln.down(1))
    assert rc == 0 and rep["ok"], err
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    assert rep["links"][1]["streams_lost"] > 0 and rep["links"][1]["streams_up"] == 0, rep["links"]
    assert rep["links"][0]["bytes"] > rep["links"][1]["bytes"], rep["links"]


def test_link_back_is_used_again(env):
    """A link that goes down and comes back during the transfer is dialed again and carries
    chunks again; the file is intact."""
    ln = links(env, [40, 40])
    # 48 MiB: after link 1 is back, the rest still takes ~9 s on link 0 alone, room for a dial
    # stuck in SYN retries while the link was down (1, 2, 4 s) to give up and dial again under
    # a sanitizer (24 MiB left ~4 s: once in a fresh clone's ASan pass the transfer ended first)
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 48 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    remote = f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000"
    serve(env, remote, dst, ns=ln, metrics="127.0.0.1:7099")
    link1 = f'accelnet_xfer_link_bytes_total{{listen="{ln.receiver_addr(1)}:7000"}}'
    at_return = []

    def streams_on_link1():
        out = subprocess.run(ln.cmd(ln.snd, ["ss", "-tnH", "state", "established",
                                             f"( dport = :7000 and dst {ln.receiver_addr(1)} )"]),
                             capture_output=True, text=True).stdout
        return len(out.splitlines())

    def down_then_up():
        ln.down(1)
        wait_until(lambda: streams_on_link1() == 0, "the sender gave up link 1's streams")
        at_return.append(metric(7099, link1, ns=ln))
        ln.up(1)
    rc, rep, err = send_while(ln, [src, remote, "--streams", "2", "--stall-ms", "1000", "--chunk-kib", "128"],
                              2 << 20, down_then_up)
    assert rc == 0 and rep["ok"], err
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    back = rep["links"][1]
    assert back["streams_lost"] > 0 and back["streams_up"] > 0, rep["links"]
    assert metric(7099, link1, ns=ln) > at_return[0], at_return  # it carried chunks again


def test_receiver_killed_then_resumed(env):
    """The receiver is killed mid-transfer; the sender fails with a clear error; the same
    command after a restart sends only what had not arrived whole (every complete chunk that
    reached the receiver is kept), and the file is intact."""
    ln = links(env, [100])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 24 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    remote = f"{ln.receiver_addr(0)}:7000"
    srv = serve(env, remote, dst, ns=ln, metrics="127.0.0.1:7099")
    args = [src, remote, "--streams", "4", "--chunk-kib", "256", "--stall-ms", "2000"]
    arrived = []

    def kill_receiver():
        srv.send_signal(signal.SIGSTOP)
        arrived.append(tcp_received(7000, ns=ln.rcv)[1])  # every byte the receiver had read
        srv.send_signal(signal.SIGKILL)
        srv.wait()
    rc, first, err = send_while(ln, args, 10 << 20, kill_receiver)
    arrived = arrived[0]
    assert rc != 0 and not first["ok"] and first["error"], first
    assert not os.path.exists(os.path.join(dst, "f.bin"))
    serve(env, remote, dst, ns=ln, name="serve2")
    rep = send(args, ns=ln)
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    # what arrived but is sent again: at most the chunk each stream was in the middle of
    assert arrived > 10 << 20, arrived
    assert rep["bytes_skipped"] >= arrived - 4 * 256 * 1024 - 64 * 1024, (arrived, rep)
    assert rep["bytes_skipped"] + rep["bytes_acked"] == rep["bytes"], rep


def test_corrupt_chunk_is_resent(env):
    """Chunks corrupted on arrival (the receiver's fault injection) are detected by their hash
    and sent again; the file is intact and the corruption is counted."""
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 6 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}",
          envvars={"ACCELNET_XFER_CORRUPT_EVERY": "7"})
    rep = send([src, f"127.0.0.1:{port}", "--chunk-kib", "256"])
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    assert rep["chunks_corrupt"] >= 3 and rep["chunks_resent"] >= 3, rep
    assert metric(mport, 'accelnet_xfer_chunks_total{result="corrupt"}') == rep["chunks_corrupt"]


def test_token_required(env):
    """With --token on serve, a sender without it or with another one is refused; with the
    same token it goes through. The token never appears on the wire."""
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 1 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    tok, other = env.write("token", "s3cret-token\n"), env.write("other", "not-it\n")
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, token=tok, metrics=f"127.0.0.1:{mport}")
    rep = send([src, f"127.0.0.1:{port}"], check=False)
    assert rep["rc"] != 0 and "authentication failed" in rep["error"], rep
    rep = send([src, f"127.0.0.1:{port}", "--token", other], check=False)
    assert rep["rc"] != 0 and "authentication failed" in rep["error"], rep
    assert not os.path.exists(os.path.join(dst, "f.bin"))
    send([src, f"127.0.0.1:{port}", "--token", tok])
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
    assert metric(mport, "accelnet_xfer_auth_failures_total") >= 2


def raw_manifest(port, path):
    """Speak the protocol by hand: handshake without a token, then a manifest for <path>."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)

    def frame(t, meta=b""):
        return struct.pack("<IBBHII", 0x31465841, t, 0, 0, len(meta), 0) + meta

    def recv_frame():
        hdr = b""
        while len(hdr) < 16:
            hdr += s.recv(16 - len(hdr))
        magic, t, _, _, mlen, dlen = struct.unpack("<IBBHII", hdr)
        meta = b""
        while len(meta) < mlen:
            meta += s.recv(mlen - len(meta))
        return t, meta

    s.sendall(struct.pack("<I", 0x31465841))  # plain, not TLS
    assert recv_frame()[0] == 1  # CHALLENGE
    s.sendall(frame(2, struct.pack("<IB", 3, 2) + os.urandom(16) + bytes(32)))  # HELLO, version 3
    assert recv_frame()[0] == 3  # OK
    p = path.encode()
    man = struct.pack("<III", 1 << 20, 1, 0) + struct.pack("<H", len(p)) + p + struct.pack("<QIQ", 5, 0o644, 0)
    man += struct.pack("<BIQ", 1, 1, 5)  # the last part: 1 file, 5 bytes in all
    s.sendall(frame(5, man))
    t, meta = recv_frame()
    s.close()
    return t, meta.decode(errors="replace")


def test_path_escape_refused(env):
    """Paths that would leave DIR are refused with a reason, whether by '..', an absolute path
    or a symlink inside DIR; nothing is written outside."""
    dst, outside = os.path.join(env.dir, "dst"), os.path.join(env.dir, "outside")
    os.makedirs(dst)
    os.makedirs(outside)
    os.symlink(outside, os.path.join(dst, "link"))
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    for bad in ("../evil", "/etc/evil", "a/../../evil", ".accelnet-xfer/x"):
        t, text = raw_manifest(port, bad)
        assert t == 4 and "bad manifest" in text, (bad, t, text)
    src = make_file(os.path.join(env.dir, "f.bin"), 100000)
    rep = send([src, f"127.0.0.1:{port}", "--to", "link/evil.bin"], check=False)
    assert rep["rc"] != 0 and "outside" in rep["error"], rep
    assert os.listdir(outside) == []
    rep = send([src, f"127.0.0.1:{port}", "--to", "../evil.bin"], check=False)
    assert rep["rc"] != 0 and ".." in rep["error"], rep


def test_disk_full_is_refused_up_front(env):
    """A file that does not fit is refused before any byte is sent, with the reason; nothing
    appears at the final path."""
    dst = os.path.join(env.dir, "small")
    os.makedirs(dst)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dst], check=True)
    env.on_cleanup.append(lambda: subprocess.run(["umount", "-l", dst]))
    src = make_file(os.path.join(env.dir, "f.bin"), 8 << 20)
    port = free_port()
    serve(env, f"127.0.0.1:{port}", dst)
    rep = send([src, f"127.0.0.1:{port}"], check=False)
    assert rep["rc"] != 0 and "not enough space" in rep["error"], rep
    assert rep["bytes_sent"] == 0 and not os.path.exists(os.path.join(dst, "f.bin"))


def test_disk_filled_during_transfer(env):
    """Two senders whose files each fit but not together: whoever runs out gets a clear error
    (up front or when a chunk cannot be stored), the receiver stays up, and no file appears
    half-written at its final path."""
    dst = os.path.join(env.dir, "small")
    os.makedirs(dst)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dst], check=True)
    env.on_cleanup.append(lambda: subprocess.run(["umount", "-l", dst]))
    srcs = [make_file(os.path.join(env.dir, f"f{i}.bin"), 5 << 20, seed=i) for i in range(2)]
    port = free_port()
    srv = serve(env, f"127.0.0.1:{port}", dst)
    procs = [subprocess.Popen([BIN, "xfer", "send", s, f"127.0.0.1:{port}", "--json", "--chunk-kib", "64"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in srcs]
    reps = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert not all(r["ok"] for r in reps), reps
    for r, s in zip(reps, srcs):
        final = os.path.join(dst, os.path.basename(s))
        if r["ok"]:
            assert digest(final) == digest(s)
        else:
            assert "space" in r["error"], r["error"]
            assert not os.path.exists(final)
    assert srv.poll() is None


def test_bcast_chain(env):
    """One sender, three receivers as a chain: each has the file, intact."""
    src = make_file(os.path.join(env.dir, "f.bin"), 5 << 20)
    hops = []
    for i in range(3):
        d = os.path.join(env.dir, f"r{i}")
        os.makedirs(d)
        port = free_port()
        serve(env, f"127.0.0.1:{port}", d, name=f"serve{i}", extra=["--relay-to", "127.0.0.0/8"])
        hops.append((d, f"127.0.0.1:{port}"))
    rep = send([src] + [h for _, h in hops] + ["--chunk-kib", "256"], cmd="bcast")
    assert rep["ok"]
    for d, _ in hops:
        assert digest(src) == digest(os.path.join(d, "f.bin")), d


def test_get_pulls_files_and_trees(env):
    """`xfer get` pulls a tree and a file from the server's directory over two links into a
    local directory, intact; a second get finds everything there; names that do not exist or
    would leave the directory are refused; a token is required when the server has one."""
    served, dst = os.path.join(env.dir, "served"), os.path.join(env.dir, "dst")
    os.makedirs(os.path.join(served, "models", "m1"))
    os.makedirs(dst)
    make_file(os.path.join(served, "models", "m1", "weights.bin"), 24 << 20)  # enough for both links
    make_file(os.path.join(served, "models", "m1", "config.json"), 300, seed=3)
    make_file(os.path.join(served, "top.bin"), 700000, seed=4)
    outside = make_file(os.path.join(env.dir, "secret.bin"), 1000, seed=5)
    os.symlink(outside, os.path.join(served, "leak.bin"))
    tok = env.write("token", "pull-token\n")
    port = free_port()
    serve(env, f"127.0.0.1:{port},127.0.0.2:{port}", served, token=tok)
    remote = f"127.0.0.1:{port},127.0.0.2:{port}"
    rep = send([remote, "models/m1", "top.bin", "--to", dst, "--token", tok, "--chunk-kib", "256"],
               cmd="get")
    assert rep["files"] == 3 and rep["bytes"] == (24 << 20) + 300 + 700000, rep
    for rel, orig in (("m1/weights.bin", "models/m1/weights.bin"), ("m1/config.json", "models/m1/config.json"),
                      ("top.bin", "top.bin")):
        assert digest(os.path.join(dst, rel)) == digest(os.path.join(served, orig)), rel
    assert all(link["bytes"] > 0 for link in rep["links"]), rep["links"]
    rep = send([remote, "top.bin", "--to", dst, "--token", tok], cmd="get")
    assert rep["bytes_skipped"] == 700000 and rep["bytes_acked"] == 0, rep
    rep = send([remote, "nothere", "--to", dst, "--token", tok], cmd="get", check=False)
    assert rep["rc"] != 0 and "nothere" in rep["error"], rep
    rep = send([remote, "../secret.bin", "--to", dst, "--token", tok], cmd="get", check=False)
    assert rep["rc"] != 0 and ".." in rep["error"], rep
    rep = send([remote, "leak.bin", "--to", dst, "--token", tok], cmd="get", check=False)
    assert rep["rc"] != 0 and not os.path.exists(os.path.join(dst, "leak.bin")), rep
    rep = send([remote, "top.bin", "--to", dst], cmd="get", check=False)
    assert rep["rc"] != 0 and "authentication failed" in rep["error"], rep


def make_pki(env):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, with openssl."""
    d = env.dir

    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    for name, san in (("srv", "IP:127.0.0.1"), ("cli", "DNS:client")):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        ext = env.write(f"{name}.ext", f"subjectAltName={san}\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", ext)
    return {k: os.path.join(d, k) for k in ("ca.pem", "srv.pem", "srv.key", "cli.pem", "cli.key")}


def test_tls_per_transfer(env):
    """A server with a certificate takes TLS and plain transfers on the same port; a client
    verifies the server (a CA it does not trust is refused); send and get both work over TLS;
    a server without a certificate refuses a TLS client with a clear error."""
    pki = make_pki(env)
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 3 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port = free_port()
    argv = [BIN, "xfer", "serve", "--listen", f"127.0.0.1:{port}", "--dir", dst,
            "--tls-cert", pki["srv.pem"], "--tls-key", pki["srv.key"], "--insecure"]
    p = env.start(argv, "serve-tls")
    wait_until(lambda: "listening" in env.log(p), "serve listening")
    rep = send([src, f"127.0.0.1:{port}", "--tls", "--tls-ca", pki["ca.pem"], "--to", "tls.bin"])
    assert digest(src) == digest(os.path.join(dst, "tls.bin"))
    assert rep["zerocopy_bytes"] == 0, rep  # TLS encrypts in user space: nothing is sent by sendfile
    rep = send([src, f"127.0.0.1:{port}", "--to", "plain.bin"])
    assert digest(src) == digest(os.path.join(dst, "plain.bin"))
    rep = send([src, f"127.0.0.1:{port}", "--tls", "--to", "x.bin"], check=False)  # system CAs
    assert rep["rc"] != 0 and "not trusted" in rep["error"], rep
    got = os.path.join(env.dir, "got")
    os.makedirs(got)
    rep = send([f"127.0.0.1:{port}", "tls.bin", "--to", got, "--tls", "--tls-ca", pki["ca.pem"]], cmd="get")
    assert digest(src) == digest(os.path.join(got, "tls.bin"))
    plain_port = free_port()
    serve(env, f"127.0.0.1:{plain_port}", dst, name="serve-plain")
    rep = send([src, f"127.0.0.1:{plain_port}", "--tls", "--tls-ca", pki["ca.pem"]], check=False)
    assert rep["rc"] != 0 and "TLS" in rep["error"], rep


def test_mutual_tls(env):
    """A server with --tls-ca takes only TLS clients with a certificate from that CA: plain
    and certificate-less clients are refused with a reason, a client with one goes through."""
    pki = make_pki(env)
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 1 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port = free_port()
    p = env.start([BIN, "xfer", "serve", "--listen", f"127.0.0.1:{port}", "--dir", dst, "--tls-cert",
                   pki["srv.pem"], "--tls-key", pki["srv.key"], "--tls-ca", pki["ca.pem"]], "serve-mtls")
    wait_until(lambda: "listening" in env.log(p), "serve listening")
    rep = send([src, f"127.0.0.1:{port}"], check=False)
    assert rep["rc"] != 0 and "requires TLS" in rep["error"], rep
    rep = send([src, f"127.0.0.1:{port}", "--tls-ca", pki["ca.pem"]], check=False)
    assert rep["rc"] != 0, rep
    assert not os.path.exists(os.path.join(dst, "f.bin"))
    send([src, f"127.0.0.1:{port}", "--tls-ca", pki["ca.pem"], "--tls-cert", pki["cli.pem"],
          "--tls-key", pki["cli.key"]])
    assert digest(src) == digest(os.path.join(dst, "f.bin"))


def test_progress_bar_on_a_terminal(env):
    """On a terminal, send draws a progress bar with the rate of each link and an ETA; with
    output redirected it prints only the summary line."""
    import pty
    ln = links(env, [40])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 8 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    serve(env, f"{ln.receiver_addr(0)}:7000", dst, ns=ln)
    master, slave = pty.openpty()
    p = subprocess.Popen(ln.cmd(ln.snd, [BIN, "xfer", "send", src, f"{ln.receiver_addr(0)}:7000",
                                         "--chunk-kib", "256"]),  # acks arrive while the bar runs
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(60)
    os.close(master)
    text = out.decode(errors="replace")
    assert p.returncode == 0, text
    assert re.search(r"\[=*>? *\] +\d+% .*Gbit/s \| 10\.77\.0\.2:7000 [0-9.]+ \| ETA \d+s", text), text
    assert "1 file(s)" in text, text
    r = subprocess.run(ln.cmd(ln.snd, [BIN, "xfer", "send", src, f"{ln.receiver_addr(0)}:7000", "--to", "b"]),
                       capture_output=True, text=True)
    assert r.returncode == 0 and "ETA" not in r.stderr and "1 file(s)" in r.stderr, r.stderr


def test_abandoned_parts_are_swept(env):
    """Partial files nobody resumed for --keep-parts-hours are removed when serve starts (and
    hourly); recent ones stay for a resume."""
    dst = os.path.join(env.dir, "dst")
    store = os.path.join(dst, ".accelnet-xfer")
    os.makedirs(store)
    old, recent = "0" * 31 + "a", "0" * 31 + "b"
    for name in (old, recent):
        for ext in ("part", "state"):
            with open(os.path.join(store, f"{name}.{ext}"), "wb") as f:
                f.write(b"x" * 100)
    week_ago = time.time() - 7 * 24 * 3600
    for ext in ("part", "state"):
        os.utime(os.path.join(store, f"{old}.{ext}"), (week_ago, week_ago))
    p = serve(env, f"127.0.0.1:{free_port()}", dst)
    p.wait_log = lambda: "removed 1 abandoned" in env.log(p)
    wait_until(p.wait_log, "the sweep's log line")
    assert sorted(os.listdir(store)) == [f"{recent}.part", f"{recent}.state"], os.listdir(store)
    r = subprocess.run([BIN, "xfer", "serve", "--listen", "127.0.0.1:1", "--dir", dst, "--insecure",
                        "--keep-parts-hours", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "keep-parts-hours" in r.stderr, r.stderr


def test_cli_errors(env):
    """Bad arguments and unreachable receivers give one clear line and a non-zero exit."""
    r = subprocess.run([BIN, "xfer", "send", "/nonexistent/file", "127.0.0.1:1"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "/nonexistent/file" in r.stderr, r.stderr
    src = make_file(os.path.join(env.dir, "f.bin"), 1000)
    r = subprocess.run([BIN, "xfer", "send", src, "127.0.0.1:1"], capture_output=True, text=True)
    assert r.returncode == 1 and "cannot reach the receiver" in r.stderr, r.stderr
    r = subprocess.run([BIN, "xfer", "send", src, "nohost"], capture_output=True, text=True)
    assert r.returncode == 1 and "bad address" in r.stderr, r.stderr
    r = subprocess.run([BIN, "xfer", "serve", "--listen", "127.0.0.1:1"], capture_output=True, text=True)
    assert r.returncode == 2 and "--dir" in r.stderr, r.stderr


def test_help_and_docs_agree(env):
    """Every option docs/xfer.md documents is in `xfer --help` (made from the flag tables of
    cmd_xfer.c), with the same default, and every option --help lists is documented: the
    tables and the reference cannot drift apart."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "xfer.md")) as f:
        doc = f.read()
    usage = subprocess.run([BIN, "xfer", "--help"], capture_output=True, text=True, timeout=10).stdout
    helped = {}  # flag -> default shown by --help, or None
    for m in re.finditer(r"--([a-z][a-z-]*)(?: [A-Z][^\s\]]*)?(?: \((\d+)\))?", usage.split("trust:")[0]):
        helped.setdefault(m.group(1), m.group(2))
    documented = {}
    for line in doc.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        flags = re.findall(r"--([a-z][a-z-]*)", cells[0])
        default = None
        if len(cells) == 3 and re.fullmatch(r"\d+", cells[1]):
            default = cells[1]
        m = re.search(r"\(default (\d+)", cells[-1])
        if m:
            default = m.group(1)
        for i, flag in enumerate(flags):
            documented.setdefault(flag, default if i == 0 else None)
    assert set(documented) == set(helped), (set(documented) ^ set(helped))
    for flag, default in documented.items():
        if default is not None:
            assert helped[flag] == default, (flag, default, helped[flag])


def test_metrics_and_docs_agree(env):
    """The families serve's /metrics writes (from xfer/metrics.c's one table) are the ones
    docs/observability.md lists for it, and a path other than /metrics is 404 (labels and
    types: test_prometheus)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "observability.md")) as f:
        doc = f.read()
    section = doc.split("### `accelnet xfer serve --metrics")[1].split("\n## ")[0]
    documented = set(re.findall(r"`(accelnet_xfer_[a-z_]+)", section))
    dst = os.path.join(env.dir, "dst")
    os.makedirs(dst)
    port, mport = free_port(), free_port()
    serve(env, f"127.0.0.1:{port}", dst, metrics=f"127.0.0.1:{mport}")
    text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{mport}/metrics"], capture_output=True,
                          text=True, timeout=10).stdout
    written = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert written == documented, written ^ documented
    code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                           f"http://127.0.0.1:{mport}/other"], capture_output=True, text=True, timeout=10).stdout
    assert code == "404", code


SEND_JSON_KEYS = ["ok", "files", "bytes", "bytes_skipped", "bytes_sent", "bytes_acked", "bytes_dup", "seconds",
                  "gbit_per_s", "chunks", "chunks_resent", "chunks_dup", "chunks_corrupt",
                  "zerocopy_bytes", "zerocopy_copied_bytes", "manifest_parts", "listing_seconds", "links",
                  "error"]
SEND_JSON_LINK_KEYS = ["remote", "local", "bytes", "gbit_per_s", "streams_up", "streams_lost",
                       "bytes_sent", "chunks_dup", "interface", "numa_node", "cpus"]


def test_send_json_keeps_its_shape(env):
    """`xfer send --json` is read by scripts: its keys, their order and their types are pinned
    here (docs/xfer.md, "The JSON summary"), for a success and for a failure."""
    src, dst = os.path.join(env.dir, "f.bin"), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    make_file(src, 2 * 1024 * 1024 + 3)
    port = free_port()
    serve(env, f"127.0.0.1:{port},127.0.0.2:{port}", dst)
    rep = send([src, f"127.0.0.1:{port},127.0.0.2:{port}", "--chunk-kib", "256"])
    del rep["rc"], rep["stderr"]
    assert list(rep) == SEND_JSON_KEYS, list(rep)
    assert rep["ok"] is True and rep["error"] == "" and rep["bytes"] == 2 * 1024 * 1024 + 3
    for k in SEND_JSON_KEYS[1:17]:
        assert isinstance(rep[k], (int, float)) and not isinstance(rep[k], bool), (k, rep[k])
    assert len(rep["links"]) == 2
    for link in rep["links"]:
        assert list(link) == SEND_JSON_LINK_KEYS, list(link)
        assert isinstance(link["remote"], str) and isinstance(link["local"], str)
    r = subprocess.run([BIN, "xfer", "send", src, "127.0.0.1:1", "--json"], capture_output=True,
                       text=True, timeout=60)
    bad = json.loads(r.stdout)
    assert r.returncode == 1 and list(bad) == SEND_JSON_KEYS, (r.returncode, r.stdout)
    assert bad["ok"] is False and "cannot reach the receiver" in bad["error"], bad


def test_links_leave_by_their_routes_nic(env):
    """Issue 32's topology: without --from each link binds the source address the kernel's
    route to its receiver has, and says which interface that is (JSON `local`, `interface`,
    `numa_node`: none shown for a veth); two links that leave by one interface are warned
    about (they share its bandwidth)."""
    ln = links(env, [400, 400])
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 1 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    serve(env, f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000", dst, ns=ln)
    rep = send([src, f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(1)}:7000",
                "--chunk-kib", "256"], ns=ln)
    got = [(x["local"], x["interface"], x["numa_node"]) for x in rep["links"]]
    assert got == [(ln.sender_addr(0), ln.devs[0][0], None),
                   (ln.sender_addr(1), ln.devs[1][0], None)], got
    assert "share" not in rep["stderr"], rep["stderr"]
    assert f"via {ln.devs[0][0]}" not in rep["stderr"]  # (--json: no human summary)
    os.remove(os.path.join(dst, "f.bin"))
    rep = send([src, f"{ln.receiver_addr(0)}:7000,{ln.receiver_addr(0)}:7000"], ns=ln)
    assert [x["interface"] for x in rep["links"]] == [ln.devs[0][0]] * 2, rep["links"]
    assert f"links 1 ({ln.receiver_addr(0)}:7000) and 2 ({ln.receiver_addr(0)}:7000) both " \
        f"leave by {ln.devs[0][0]}" in rep["stderr"], rep["stderr"]
    assert digest(src) == digest(os.path.join(dst, "f.bin"))
