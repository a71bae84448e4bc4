"""accelnet xfer on a machine of several NUMA nodes (issue 32, topology): each link's stream
threads, and each of serve's connection threads, run on the CPUs of their NIC's node, within
what the process may use. This machine has one node, so the tests point ACCELNET_SYSFS_ROOT (for
tests only) at a fake sysfs tree of two: node 0 with CPU 0, node 1 with CPU 1, loopback's
"device" on node 1, and the disk the files are on on node 0. What a user sees: the JSON's `cpus`,
the threads' Cpus_allowed_list in /proc, and the one line that says the disk is on the other
node; with --numa off, nothing pinned."""

import os
import socket
import struct
import subprocess

from harness import BIN, Skip, free_port
from test_xfer import digest, make_file, send, serve

MAGIC, CHALLENGE = 0x31465841, 1  # src/xfer/wire.h


def fake_sysfs(env, path):
    """Two nodes (CPU 0, CPU 1), lo on node 1, the block device <path> is on on node 0."""
    root = os.path.join(env.dir, "sys")

    def put(rel, text):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    put("devices/system/node/online", "0-1\n")
    put("devices/system/node/node0/cpulist", "0\n")
    put("devices/system/node/node1/cpulist", "1\n")
    put("class/net/lo/device/numa_node", "1\n")
    pci = "devices/pci0000:00/0000:00:05.0"
    put(f"{pci}/numa_node", "0\n")
    put(f"{pci}/block/disk/size", "0\n")
    os.symlink("../..", os.path.join(root, pci, "block/disk/device"))
    dev = os.stat(path).st_dev
    os.makedirs(os.path.join(root, "dev/block"))
    os.symlink(f"../../{pci}/block/disk",
               os.path.join(root, f"dev/block/{os.major(dev)}:{os.minor(dev)}"))
    return root, f"{os.major(dev)}:{os.minor(dev)}"


def need_cpus_0_and_1():
    if not {0, 1} <= os.sched_getaffinity(0):
        raise Skip("needs CPUs 0 and 1")


def cpus_of(n):
    """What /proc shows as the Cpus_allowed_list of a thread allowed the CPUs <n>."""
    n = sorted(n)
    if n == list(range(n[0], n[-1] + 1)) and len(n) > 1:
        return f"{n[0]}-{n[-1]}"
    return ",".join(map(str, n))


def threads_cpus(pid):
    """{tid: Cpus_allowed_list} of every thread of <pid>."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    out[int(tid)] = line.split(":", 1)[1].strip()
    return out


def connection_thread_cpus(port, pid):
    """Open a connection to serve and wait for its CHALLENGE (its thread has started and
    placed itself): the Cpus_allowed_list of serve's threads, the connection held open."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(struct.pack("<I", MAGIC))
        head = b""
        while len(head) < 16:
            got = s.recv(16 - len(head))
            assert got, "serve closed the connection"
            head += got
        assert struct.unpack("<IB", head[:5]) == (MAGIC, CHALLENGE), head
        return threads_cpus(pid)
    finally:
        s.close()


def sendv(args, root):
    old = dict(os.environ)
    os.environ["ACCELNET_SYSFS_ROOT"] = root
    try:
        return send(args)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_threads_run_on_their_nics_node(env):
    """send: the link's streams are pinned to node 1's CPUs (JSON `cpus`: [1], read back from
    the threads), and the disk on node 0 is said once; serve: a connection's thread runs on CPU
    1 while its main thread keeps every CPU it had."""
    need_cpus_0_and_1()
    allowed = cpus_of(os.sched_getaffinity(0))
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 3 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    root, dev = fake_sysfs(env, src)
    port = free_port()
    p = serve(env, f"127.0.0.1:{port}", dst, envvars={"ACCELNET_SYSFS_ROOT": root})
    cpus = connection_thread_cpus(port, p.pid)
    assert cpus[p.pid] == allowed, cpus
    # the connection's thread; the others (a sanitizer's own, under TSan) keep every CPU
    assert sorted(c for c in cpus.values() if c != allowed) == ["1"], cpus
    rep = sendv([src, f"127.0.0.1:{port}", "--chunk-kib", "256", "--streams", "2"], root)
    (link,) = rep["links"]
    assert (link["interface"], link["numa_node"], link["cpus"]) == ("lo", 1, [1]), link
    assert rep["stderr"].count(f"files on a disk (device {dev}) of NUMA node 0 go by link 1, "
                               "through lo on node 1") == 1, rep["stderr"]
    assert f"files land on a disk (device {dev}) of NUMA node 0, through lo on node 1" in \
        env.log(p), env.log(p)
    assert digest(src) == digest(os.path.join(dst, "f.bin"))


def test_numa_off_leaves_threads_unpinned(env):
    """--numa off on both ends: the same fake machine, and no thread is pinned (JSON `cpus`:
    null, every thread of serve on every CPU it had), nothing said about the disk; a --numa
    that is neither auto nor off is a usage error."""
    need_cpus_0_and_1()
    allowed = cpus_of(os.sched_getaffinity(0))
    src, dst = make_file(os.path.join(env.dir, "f.bin"), 1 << 20), os.path.join(env.dir, "dst")
    os.makedirs(dst)
    root, _ = fake_sysfs(env, src)
    port = free_port()
    p = serve(env, f"127.0.0.1:{port}", dst, envvars={"ACCELNET_SYSFS_ROOT": root},
              extra=["--numa", "off"])
    cpus = connection_thread_cpus(port, p.pid)
    assert len(cpus) >= 2 and set(cpus.values()) == {allowed}, cpus
    rep = sendv([src, f"127.0.0.1:{port}", "--numa", "off"], root)
    (link,) = rep["links"]
    assert (link["interface"], link["numa_node"], link["cpus"]) == ("lo", 1, None), link
    assert "NUMA" not in rep["stderr"] and "NUMA" not in env.log(p), rep["stderr"]
    r = subprocess.run([BIN, "xfer", "send", src, f"127.0.0.1:{port}", "--numa", "sideways"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--numa takes one of auto|off" in r.stderr, r.stderr
