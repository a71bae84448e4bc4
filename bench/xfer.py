"""bench/xfer: accelnet xfer against iperf3 (the reference: one instance per link at once)
and rsync, on emulated links (veth pairs between network namespaces, tbf-shaped), plus the
failure drills: a link taken down halfway, the receiver killed and the transfer resumed, and
a 1-to-4 bcast against a 1-to-1 send. Files are received into a tmpfs so that, like iperf3,
the figures are network and CPU, not this machine's disk. Prints a table and writes JSON.

usage: bench/xfer.py [--size-mib N] [--rates 2000,1000,500] [--out FILE] [--only NAMES]
       [--bin OTHER-BUILD/accelnet] [--bin-before MAIN-BUILD/accelnet]
       (NAMES: iperf,xfer,tls,rsync,linkdown,resume,bcast, and tree: a tree of --tree-files
       files of --tree-bytes (4 KiB) over the first link, against rsync and tar | nc, with
       both ends' CPU (and per file), when the first file was in place on the receiver and
       how long the sender listed the tree (in how many manifest parts), --repeat rounds, each
       with --bin-before's build first when given; not run by default)"""

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from netns import Links, sh, tcp_received  # noqa: E402

BIN = os.path.join(ROOT, "build", "accelnet")


def cpu_of(pid):
    """user+system seconds of a running process (and its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(pred, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


class LinkSampler:
    """Bytes received on each link's device, every 10 ms, read by one helper inside the
    receiver's namespace (its /sys is that namespace's): when each link started and stopped
    carrying data and what it carried meanwhile, against iperf3 on the same link."""

    PROG = ("import sys,time\n"
            "fs=[open('/sys/class/net/%s/statistics/rx_bytes' % d) for d in sys.argv[1:]]\n"
            "while True:\n"
            " v=[]\n"
            " for f in fs:\n"
            "  f.seek(0); v.append(f.read().strip())\n"
            " print(time.monotonic(), *v, flush=True)\n"
            " time.sleep(0.01)\n")

    def __init__(self, ns):
        self.n = len(ns.devs)
        self.p = subprocess.Popen(ns.cmd(ns.rcv, ["/usr/bin/python3", "-c", self.PROG] +
                                         [b for _, b in ns.devs]),
                                  stdout=subprocess.PIPE, text=True)
        self.p.stdout.readline()

    def stop(self):
        self.p.terminate()
        out = self.p.communicate()[0]
        rows = []
        for line in out.splitlines():
            f = line.split()
            if len(f) == 1 + self.n:
                rows.append([float(f[0])] + [int(x) for x in f[1:]])
        return rows


def link_profile(rows, t0, t1):
    """Per link, from samples taken between t0 and t1 (monotonic): first and last data (s
    after t0; more than 64 KiB since t0 counts as data), bytes, and the rate over the middle
    90 % of its bytes (the link's own efficiency, start-up and tail excluded)."""
    rows = [r for r in rows if t0 - 0.05 <= r[0] <= t1 + 0.05]
    if len(rows) < 2:
        return []
    out = []
    for i in range(1, len(rows[0])):
        base = rows[0][i]
        total = rows[-1][i] - base
        first = next((r[0] for r in rows if r[i] - base > 65536), None)
        last = next((r[0] for r in rows if r[i] - base >= total - 4096), None)
        lo = next((r for r in rows if r[i] - base >= 0.05 * total), None)
        hi = next((r for r in rows if r[i] - base >= 0.95 * total), None)
        mid = (hi[i] - lo[i]) * 8 / (hi[0] - lo[0]) / 1e6 if lo and hi and hi[0] > lo[0] else 0
        out.append({"first_s": (first - t0) if first else None, "last_s": (last - t0) if last else None,
                    "bytes": total, "mid_mbit": mid})
    return out


def make_file(path, mib):
    """Incompressible content, written fast: one random MiB, varied per MiB."""
    block = bytearray(os.urandom(1 << 20))
    with open(path, "wb") as f:
        for i in range(mib):
            block[:8] = i.to_bytes(8, "little")
            f.write(block)
    return path


def xxh(path):
    return subprocess.run(["xxhsum", "-H2", path], capture_output=True, text=True,
                          check=True).stdout.split()[0]


class Serve:
    def __init__(self, ns, netns_name, listen, dest, log):
        self.log = log
        self.p = subprocess.Popen(ns.cmd(netns_name, [BIN, "xfer", "serve", "--listen", listen,
                                                      "--dir", dest, "--metrics", "127.0.0.1:7099",
                                                      "--insecure"]),
                                  stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        wait_for(lambda: "listening" in open(log).read(), "serve listening")
        self.cpu0 = cpu_of(self.p.pid)

    def cpu(self):
        return cpu_of(self.p.pid) - self.cpu0

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(10)


def run_send(ns, args, timeout=600):
    """accelnet xfer send in the sender namespace: (report, wall seconds, cpu seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(ns.cmd(ns.snd, [BIN, "xfer", "send"] + args + ["--json", "--quiet"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=timeout)
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    rep = json.loads(out) if out.strip() else {"ok": False, "error": err}
    rep["stderr"] = err.strip()
    return rep, wall, ru


def iperf3(ns, seconds):
    """One iperf3 per link at once; returns the per-link receiver rates in Mbit/s."""
    servers, clients = [], []
    for i in range(len(ns.rates)):
        servers.append(subprocess.Popen(ns.cmd(ns.rcv, ["iperf3", "-s", "-1", "-B", ns.receiver_addr(i),
                                                        "-p", str(5201 + i)]),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(0.3)
    for i in range(len(ns.rates)):
        clients.append(subprocess.Popen(ns.cmd(ns.snd, ["iperf3", "-c", ns.receiver_addr(i), "-B",
                                                        ns.sender_addr(i), "-p", str(5201 + i),
                                                        "-t", str(seconds), "-J"]),
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    rates = []
    for c in clients:
        out, _ = c.communicate(timeout=seconds + 30)
        rates.append(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6)
    for s in servers:
        s.wait(10)
    return rates


def make_tree(root, nfiles, size):
    """<nfiles> files of <size> random bytes, 1000 to a directory."""
    for i in range(nfiles):
        d = os.path.join(root, f"d{i // 1000:03d}")
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
            f.write(os.urandom(size))


def tree_xfer(ns, work, src, nfiles, binary, dest, streams="4"):
    """One `accelnet xfer send` of the tree with <binary> (<streams> a link): wall and CPU seconds
    of each end."""
    addr = ns.receiver_addr(0)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    log = os.path.join(work, "tree.log")
    srv = subprocess.Popen(ns.cmd(ns.rcv, [binary, "xfer", "serve", "--listen", f"{addr}:7000", "--dir", dest,
                                           "--insecure", "--max-files", str(nfiles + 10)]),
                           stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    wait_for(lambda: "listening" in open(log).read(), "serve listening")
    first = {}
    done = threading.Event()

    def first_file():
        """When the first file of the tree is in place on the receiver (every 10 ms)."""
        root = os.path.join(dest, "tree")
        while not done.is_set() and "s" not in first:
            try:
                if any(os.listdir(os.path.join(root, d)) for d in os.listdir(root)):
                    first["s"] = time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.01)
    t0 = time.monotonic()
    watcher = threading.Thread(target=first_file, daemon=True)
    watcher.start()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(ns.cmd(ns.snd, [binary, "xfer", "send", os.path.join(src, "tree"), f"{addr}:7000",
                                       "--from", ns.sender_addr(0), "--streams", streams, "--json",
                                       "--quiet"]),
                       capture_output=True, text=True, timeout=1200)
    wall = time.monotonic() - t0
    done.set()
    watcher.join()
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rcpu = cpu_of(srv.pid)
    srv.terminate()
    srv.wait(10)
    rep = json.loads(r.stdout) if r.stdout.strip() else {"ok": False, "error": r.stderr}
    scpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    return {"ok": rep["ok"], "wall_s": wall, "files_per_s": nfiles / wall, "error": rep.get("error"),
            "first_file_s": first.get("s"), "listing_s": rep.get("listing_seconds"),
            "manifest_parts": rep.get("manifest_parts"),
            "sender_cpu_s": scpu, "receiver_cpu_s": rcpu,
            "sender_us_per_file": scpu / nfiles * 1e6, "receiver_us_per_file": rcpu / nfiles * 1e6}


def tree(ns, work, nfiles, size, before=None, repeat=1, streams="4"):
    """A tree of many small files over the fastest link: accelnet xfer (and, with <before>,
    another build's, in the same minutes), rsync (daemon, no ssh) and tar piped through nc, each
    into an empty directory, <repeat> rounds; files per second (wall time, from the sender's
    start until every file is on the receiver). A round's figures are in out["runs"]; the first
    round's also at the top level, as before."""
    src = os.path.join(work, "tree-src")
    make_tree(os.path.join(src, "tree"), nfiles, size)
    out = {"files": nfiles, "file_bytes": size, "runs": []}
    addr = ns.receiver_addr(0)

    def fresh(name):
        d = os.path.join(work, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    for _ in range(repeat):
        run = {}
        if before:
            run["xfer_before"] = tree_xfer(ns, work, src, nfiles, before, os.path.join(work, "tree-xfer"),
                                           streams)
        run["xfer"] = tree_xfer(ns, work, src, nfiles, BIN, os.path.join(work, "tree-xfer"), streams)

        dest = fresh("tree-rsync")
        conf = os.path.join(work, "rsyncd-tree.conf")
        with open(conf, "w") as f:
            f.write(f"use chroot = no\n[dst]\npath = {dest}\nread only = no\nuid = root\ngid = root\n")
        d = subprocess.Popen(ns.cmd(ns.rcv, ["rsync", "--daemon", "--no-detach", f"--config={conf}",
                                             f"--address={addr}", "--port=8730"]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        t0 = time.monotonic()
        rc = subprocess.run(ns.cmd(ns.snd, ["rsync", "-a", "--whole-file", os.path.join(src, "tree"),
                                            f"rsync://{addr}:8730/dst/"])).returncode
        wall = time.monotonic() - t0
        d.terminate()
        d.wait(10)
        run["rsync"] = {"ok": rc == 0, "wall_s": wall, "files_per_s": nfiles / wall}

        dest = fresh("tree-tar")
        rx = subprocess.Popen(ns.cmd(ns.rcv, ["sh", "-c", f"nc -l -s {addr} -p 7101 | tar -x -C {dest}"]))
        time.sleep(0.5)
        t0 = time.monotonic()
        subprocess.run(ns.cmd(ns.snd, ["sh", "-c", f"tar -c -C {src} tree | nc -N {addr} 7101"]), check=True)
        rx.wait(600)
        wall = time.monotonic() - t0
        run["tar_nc"] = {"ok": rx.returncode == 0, "wall_s": wall, "files_per_s": nfiles / wall}
        for k in ("xfer_before", "xfer", "rsync", "tar_nc"):
            if k not in run:
                continue
            print(f"tree of {nfiles} x {size} B over one link: {k} {run[k]['wall_s']:.2f} s = "
                  f"{run[k]['files_per_s']:.0f} files/s" +
                  (f" (CPU s: sender {run[k]['sender_cpu_s']:.2f}, receiver {run[k]['receiver_cpu_s']:.2f};"
                   f" us a file: {run[k]['sender_us_per_file']:.0f} + {run[k]['receiver_us_per_file']:.0f};"
                   f" first file in place at {run[k]['first_file_s'] or 0:.2f} s"
                   + (f", listing {run[k]['listing_s']:.2f} s in {run[k]['manifest_parts']} parts"
                      if run[k].get("listing_s") is not None else "") + ")"
                   if "sender_cpu_s" in run[k] else "") +
                  ("" if run[k]["ok"] else f" FAILED: {run[k].get('error', '')}"), flush=True)
        out["runs"].append(run)
    out.update(out["runs"][0])
    shutil.rmtree(src, ignore_errors=True)
    return out


def rsync(ns, src, dest_dir):
    """rsync (daemon mode, no ssh cost) over the fastest link: Mbit/s."""
    conf = os.path.join(dest_dir, "..", "rsyncd.conf")
    with open(conf, "w") as f:
        f.write(f"use chroot = no\n[dst]\npath = {dest_dir}\nread only = no\nuid = root\ngid = root\n")
    d = subprocess.Popen(ns.cmd(ns.rcv, ["rsync", "--daemon", "--no-detach", f"--config={conf}",
                                         f"--address={ns.receiver_addr(0)}", "--port=8730"]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    t0 = time.monotonic()
    subprocess.run(ns.cmd(ns.snd, ["rsync", "--whole-file", "--inplace", src,
                                   f"rsync://{ns.receiver_addr(0)}:8730/dst/"]), check=True)
    wall = time.monotonic() - t0
    d.terminate()
    d.wait(10)
    return os.path.getsize(src) * 8 / wall / 1e6, wall


def received(ns):
    out = subprocess.run(ns.cmd(ns.rcv, ["curl", "-s", "http://127.0.0.1:7099/metrics"]),
                         capture_output=True, text=True).stdout
    m = re.search(r"^accelnet_xfer_received_bytes_total (\d+)$", out, re.M)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--rates", default="2000,1000,500")
    ap.add_argument("--streams", default="4")
    ap.add_argument("--iperf-seconds", type=int, default=10)
    ap.add_argument("--only", default="iperf,xfer,tls,rsync,linkdown,resume,bcast")
    ap.add_argument("--repeat", type=int, default=3, help="xfer runs; the median is reported")
    ap.add_argument("--warmup", type=int, default=1, help="runs before those, shown but not counted")
    ap.add_argument("--tree-files", type=int, default=10000, help="files in the tree (--only tree)")
    ap.add_argument("--tree-bytes", type=int, default=4096, help="bytes of each file in the tree")
    ap.add_argument("--bin", default=None, help="another build's accelnet (a before/after run)")
    ap.add_argument("--bin-before", default=None,
                    help="--only tree: also this build's accelnet, run before ours in each round")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.bin_before:
        a.bin_before = os.path.abspath(a.bin_before)
    if a.bin:
        global BIN
        BIN = os.path.abspath(a.bin)
    only = a.only.split(",")
    rates = [int(r) for r in a.rates.split(",")]
    work = tempfile.mkdtemp(prefix="xferbench-", dir="/dev/shm")
    srcdir = tempfile.mkdtemp(prefix="xferbench-src-", dir="/var/tmp")
    res = {"rates_mbit": rates, "size_mib": a.size_mib, "streams_per_link": int(a.streams)}
    ns = Links(rates)
    try:
        # This VM pays a large first-touch cost for memory the kernel has not handed out
        # before (seen as clear_page in perf: up to 5x slower page allocation). A machine
        # that has run a while has no such cost, so touch the memory the receiver will use
        # first. iperf3 allocates nothing per byte, so it is not affected either way.
        warm = os.path.join(work, "warm")
        subprocess.run(["dd", "if=/dev/zero", f"of={warm}", "bs=1M", f"count={2 * a.size_mib + 1024}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.unlink(warm)
        src = make_file(os.path.join(srcdir, "model.bin"), a.size_mib)
        want = xxh(src)
        remote = ",".join(f"{ns.receiver_addr(i)}:7000" for i in range(len(rates)))
        local = ",".join(ns.sender_addr(i) for i in range(len(rates)))
        dest = os.path.join(work, "dst")

        def fresh():
            shutil.rmtree(dest, ignore_errors=True)
            os.makedirs(dest)

        if "iperf" in only:
            sampler = LinkSampler(ns)
            t_start = time.monotonic()
            r = iperf3(ns, a.iperf_seconds)
            res["iperf3_wire_mbit"] = [x["mid_mbit"] for x in
                                       link_profile(sampler.stop(), t_start, time.monotonic())]
            res["iperf3_mbit"] = r
            res["iperf3_sum_mbit"] = sum(r)
            print(f"iperf3, one per link at once: {' + '.join(f'{x:.0f}' for x in r)} = {sum(r):.0f} Mbit/s"
                  f" (on the wire, headers included: {' + '.join(f'{x:.0f}' for x in res['iperf3_wire_mbit'])})",
                  flush=True)
        if "xfer" in only:
            runs = []
            for k in range(-a.warmup, a.repeat):
                fresh()
                srv = Serve(ns, ns.rcv, remote, dest, os.path.join(work, "serve.log"))
                c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                sampler = LinkSampler(ns)
                t_start = time.monotonic()
                rep, wall, c1 = run_send(ns, [src, remote, "--from", local, "--streams", a.streams])
                prof = link_profile(sampler.stop(), t_start, t_start + wall)
                scpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
                rcpu = srv.cpu()
                srv.stop()
                ok = rep["ok"] and xxh(os.path.join(dest, "model.bin")) == want
                mbit = a.size_mib * 1048576 * 8 / wall / 1e6
                gb = a.size_mib * 1048576 / 1e9
                run = {"ok": ok, "wall_s": wall, "mbit": mbit, "links": rep.get("links"),
                       "sender_cpu_s_per_gb": scpu / gb, "receiver_cpu_s_per_gb": rcpu / gb,
                       "chunks_dup": rep.get("chunks_dup"), "bytes_sent": rep.get("bytes_sent"),
                       "bytes_dup": rep.get("bytes_dup"), "link_profile": prof}
                if "iperf3_wire_mbit" in res:  # both on the wire, headers included
                    for lp, ip in zip(prof, res["iperf3_wire_mbit"]):
                        lp["pct_of_iperf3"] = 100 * lp["mid_mbit"] / ip
                if "iperf3_sum_mbit" in res:
                    run["pct_of_iperf3"] = 100 * mbit / res["iperf3_sum_mbit"]
                if k >= 0:
                    runs.append(run)
                else:
                    res.setdefault("xfer_warmup", []).append(run)
                print(f"accelnet xfer {'run ' + str(k + 1) if k >= 0 else 'warm-up'}: {a.size_mib} MiB in {wall:.2f} s (wall, process start to "
                      f"exit) = {mbit:.0f} Mbit/s ({run.get('pct_of_iperf3', 0):.1f}% of iperf3), hash "
                      f"{'ok' if ok else 'WRONG'}, per link {[round(x['bytes'] / 1048576) for x in rep.get('links', [])]} "
                      f"MiB, duplicate {100 * (rep.get('bytes_dup') or 0) / (a.size_mib * 1048576):.2f}%, "
                      f"CPU s/GB sender {scpu / gb:.2f} receiver {rcpu / gb:.2f}", flush=True)
                for j, lp in enumerate(prof):
                    print(f"  link {j}: data from {lp['first_s']:.3f} s to {lp['last_s']:.3f} s, "
                          f"{lp['bytes'] / 1048576:.1f} MiB on the wire, middle 90%: {lp['mid_mbit']:.0f} Mbit/s"
                          f" on the wire ({lp.get('pct_of_iperf3', 0):.1f}% of iperf3's on that link)",
                          flush=True)
            runs.sort(key=lambda r: r["mbit"])
            res["xfer_runs"] = runs
            res["xfer"] = runs[len(runs) // 2]
            print(f"accelnet xfer median: {res['xfer']['mbit']:.0f} Mbit/s = "
                  f"{res['xfer'].get('pct_of_iperf3', 0):.1f}% of iperf3", flush=True)
        if "tls" in only:
            pki = os.path.join(work, "pki")
            os.makedirs(pki)
            ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
            subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", "k.pem", "-out", "c.pem", "-subj",
                            "/CN=bench", "-addext", "subjectAltName=" + ",".join(
                                f"IP:{ns.receiver_addr(i)}" for i in range(len(rates)))],
                           cwd=pki, check=True, capture_output=True)
            fresh()
            log = os.path.join(work, "serve-tls.log")
            p = subprocess.Popen(ns.cmd(ns.rcv, [BIN, "xfer", "serve", "--listen", remote, "--dir", dest,
                                                 "--tls-cert", f"{pki}/c.pem", "--tls-key", f"{pki}/k.pem",
                                                 "--insecure"]),
                                 stdout=subprocess.DEVNULL, stderr=open(log, "w"))
            wait_for(lambda: "listening" in open(log).read(), "serve listening")
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            rep, wall, c1 = run_send(ns, [src, remote, "--from", local, "--streams", a.streams,
                                          "--tls-ca", f"{pki}/c.pem"])
            scpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
            p.terminate()
            p.wait(10)
            ok = rep["ok"] and xxh(os.path.join(dest, "model.bin")) == want
            mbit = a.size_mib * 1048576 * 8 / wall / 1e6
            res["tls"] = {"ok": ok, "wall_s": wall, "mbit": mbit,
                          "pct_of_iperf3": 100 * mbit / res.get("iperf3_sum_mbit", mbit),
                          "sender_cpu_s_per_gb": scpu / (a.size_mib * 1048576 / 1e9)}
            print(f"accelnet xfer --tls: {mbit:.0f} Mbit/s ({res['tls']['pct_of_iperf3']:.1f}% of iperf3), "
                  f"hash {'ok' if ok else 'WRONG'}, sender CPU s/GB {res['tls']['sender_cpu_s_per_gb']:.2f}",
                  flush=True)
        if "rsync" in only:
            fresh()
            mbit, wall = rsync(ns, src, dest)
            res["rsync"] = {"mbit": mbit, "wall_s": wall, "link_mbit": rates[0]}
            print(f"rsync (daemon, fastest link only): {mbit:.0f} Mbit/s, {wall:.2f} s", flush=True)
        if "linkdown" in only:
            fresh()
            srv = Serve(ns, ns.rcv, remote, dest, os.path.join(work, "serve-ld.log"))
            p = subprocess.Popen(ns.cmd(ns.snd, [BIN, "xfer", "send", src, remote, "--from", local,
                                                 "--streams", a.streams, "--stall-ms", "2000",
                                                 "--json", "--quiet"]),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            t0 = time.monotonic()
            wait_for(lambda: received(ns) > a.size_mib * 1048576 // 2, "half received", 600)
            ns.down(1)
            t_down = time.monotonic() - t0
            out, err = p.communicate(timeout=600)
            wall = time.monotonic() - t0
            srv.stop()
            rep = json.loads(out)
            ok = rep["ok"] and xxh(os.path.join(dest, "model.bin")) == want
            res["linkdown"] = {"ok": ok, "wall_s": wall, "down_at_s": t_down, "links": rep["links"],
                               "chunks_resent": rep["chunks_resent"]}
            print(f"link 1 down at {t_down:.1f} s (half received): completed in {wall:.2f} s, hash "
                  f"{'ok' if ok else 'WRONG'}, {rep['chunks_resent']} chunks re-issued", flush=True)
            ns.close()
            ns = Links(rates)
        if "resume" in only:
            fresh()
            srv = Serve(ns, ns.rcv, remote, dest, os.path.join(work, "serve-r1.log"))
            args = [src, remote, "--from", local, "--streams", a.streams, "--stall-ms", "2000"]
            p = subprocess.Popen(ns.cmd(ns.snd, [BIN, "xfer", "send"] + args + ["--json", "--quiet"]),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_for(lambda: received(ns) > a.size_mib * 1048576 // 2, "half received", 600)
            srv.p.send_signal(signal.SIGSTOP)
            arrived, app_read = tcp_received(7000, ns=ns.rcv)
            srv.p.kill()
            srv.p.wait()
            p.communicate(timeout=120)
            srv = Serve(ns, ns.rcv, remote, dest, os.path.join(work, "serve-r2.log"))
            rep, wall, _ = run_send(ns, args)
            srv.stop()
            ok = rep["ok"] and xxh(os.path.join(dest, "model.bin")) == want
            resent = max(0, arrived - rep["bytes_skipped"])
            res["resume"] = {"ok": ok, "arrived_before_kill": arrived, "read_by_receiver": app_read,
                             "skipped": rep["bytes_skipped"], "resent_of_arrived_pct": 100 * resent / arrived,
                             "resent_of_read_pct": 100 * max(0, app_read - rep["bytes_skipped"]) / app_read,
                             "wall_s": wall}
            print(f"resume: {arrived / 1048576:.0f} MiB had arrived at the receiver's host "
                  f"({app_read / 1048576:.0f} MiB read by it), {rep['bytes_skipped'] / 1048576:.0f} MiB kept; "
                  f"re-sent {res['resume']['resent_of_arrived_pct']:.2f}% of what had arrived "
                  f"({res['resume']['resent_of_read_pct']:.2f}% of what it had read); hash "
                  f"{'ok' if ok else 'WRONG'}", flush=True)
        if "tree" in only:
            res["tree"] = tree(ns, work, a.tree_files, a.tree_bytes, a.bin_before, a.repeat, a.streams)
        ns.close()
        if "bcast" in only:
            res["bcast"] = bcast(work, src, want, min(a.size_mib, 1024), 1000, a.repeat)
    finally:
        ns.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(srcdir, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


def bcast(work, src, want, mib, rate, repeat=3):
    """Five namespaces on a bridge, each node's port shaped to <rate> both ways: a 1-to-1 send
    against a 1-to-4 bcast chain of the first <mib> MiB of <src>, after one warm-up chain
    that is not counted; <repeat> pairs, the median ratio reported."""
    part = os.path.join(os.path.dirname(src), "part.bin")
    with open(src, "rb") as f, open(part, "wb") as g:
        for _ in range(mib):
            g.write(f.read(1 << 20))
    want = xxh(part)
    tag = f"{os.getpid() % 10000}"
    br = f"axbr{tag}"
    nodes = [f"axn{tag}{i}" for i in range(5)]
    procs = []
    try:
        sh("ip", "netns", "add", br)
        sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", br, "link", "set", "br0", "up")
        for i, n in enumerate(nodes):
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
            a, b = f"xn{tag}{i}", f"xp{tag}{i}"
            sh("ip", "link", "add", a, "netns", n, "type", "veth", "peer", "name", b, "netns", br)
            sh("ip", "-n", n, "addr", "add", f"10.78.0.{i + 1}/24", "dev", a)
            sh("ip", "-n", n, "link", "set", a, "up")
            sh("ip", "-n", br, "link", "set", b, "master", "br0")
            sh("ip", "-n", br, "link", "set", b, "up")
            burst = rate * 1000 * 1000 // 8 // 250
            for ns_, dev in ((n, a), (br, b)):
                sh("ip", "netns", "exec", ns_, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                   f"{rate}mbit", "burst", str(burst), "latency", "20ms")
        dests = []
        for i in range(1, 5):
            d = os.path.join(work, f"bc{i}")
            os.makedirs(d)
            dests.append(d)
            log = os.path.join(work, f"bc{i}.log")
            procs.append(subprocess.Popen(["ip", "netns", "exec", nodes[i], BIN, "xfer", "serve", "--listen",
                                           f"10.78.0.{i + 1}:7000", "--dir", d, "--insecure",
                                           "--relay-to", "10.78.0.0/24"],
                                          stdout=subprocess.DEVNULL, stderr=open(log, "w")))
            wait_for(lambda: "listening" in open(log).read(), "bcast receiver")

        def timed(cmd, args):
            t0 = time.monotonic()
            r = subprocess.run(["ip", "netns", "exec", nodes[0], BIN, "xfer", cmd] + args + ["--json", "--quiet"],
                               capture_output=True, text=True, timeout=600)
            return json.loads(r.stdout), time.monotonic() - t0

        timed("bcast", [part] + [f"10.78.0.{i + 1}:7000" for i in range(1, 5)] + ["--to", "warm.bin"])
        pairs = []
        for k in range(repeat):
            one, t1 = timed("send", [part, "10.78.0.2:7000", "--to", f"one{k}.bin"])
            four, t4 = timed("bcast", [part] + [f"10.78.0.{i + 1}:7000" for i in range(1, 5)] + ["--to", f"four{k}.bin"])
            ok = one["ok"] and four["ok"] and xxh(os.path.join(dests[0], f"one{k}.bin")) == want and \
                all(xxh(os.path.join(d, f"four{k}.bin")) == want for d in dests)
            if not ok:
                print(f"bcast failed: {one.get('error')} / {four.get('error')}", flush=True)
            pairs.append({"one_s": t1, "four_s": t4, "ratio": t4 / t1, "ok": ok})
            print(f"bcast {mib} MiB, {rate} Mbit/s per node: 1-to-1 {t1:.2f} s, 1-to-4 chain {t4:.2f} s = "
                  f"{t4 / t1:.2f}x, every copy {'ok' if ok else 'WRONG'}", flush=True)
            for d in dests:  # room for the next pair
                for name in (f"one{k}.bin", f"four{k}.bin"):
                    if os.path.exists(os.path.join(d, name)):
                        os.unlink(os.path.join(d, name))
        med = sorted(pairs, key=lambda x: x["ratio"])[len(pairs) // 2]
        print(f"bcast median ratio: {med['ratio']:.2f}x", flush=True)
        return {"mib": mib, "rate_mbit": rate, "pairs": pairs, "one_s": med["one_s"], "four_s": med["four_s"],
                "ratio": med["ratio"], "ok": all(x["ok"] for x in pairs)}
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        for n in nodes + [br]:
            subprocess.run(["ip", "netns", "del", n], stderr=subprocess.DEVNULL)
        os.unlink(part)


if __name__ == "__main__":
    sys.exit(main())
