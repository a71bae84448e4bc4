"""Scenarios 10 and 11 of bench/run (issue 15's must-show): accelnet's response cache beside
nginx `proxy_cache`, HAProxy's `cache` and Varnish, in one run, on one machine.

10. Cache hits. One origin (nginx serving files with `Cache-Control: max-age=3600`, its
    access log counting what reaches it) behind all four caches, each with one worker (one
    thread pool for Varnish, whose threads serve one connection each) on the servers' CPU
    and a 256 MiB store. Each cache is warmed (one request stores the object, a second
    shows the cache's own hit marker), then wrk runs scenario 1's and 2's loads on it (2 KiB
    objects over 64 connections, 1 MiB over 16), interleaved over rounds with the order
    turned each round. The origin's log must not grow during a measured run: every request
    measured is a hit. Reported: hits/s, CPU per hit (the cache's whole process tree:
    nginx's master and cache manager, Varnish's manager and child) and the ratios of
    accelnet's figures to each other cache's in the same round.

11. Misses under a Zipf load. 100,000 objects of 2-16 KiB (the size a function of the id,
    fixed seed), requested 200,000 times with popularity Zipf(0.9) over the ids (ranks
    scattered over the ids, fixed seed): the same URL list replayed by wrk over 8
    connections in the same order against each cache, cold, every cache holding at most
    64 MiB (about 7 % of the objects' bytes). Reported: requests that reached the origin
    (its access log), the share answered without it, the cache's own hit counter where it
    has one, and accelnet's origin requests over each other cache's.

Nothing here asserts a timing; speed never gates CI.
"""

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (ACCELNET, HAPROXY_MAXCONN, LOAD_CPU, NOFILE, ROOT, TCK,  # noqa: E402
                   free_port, med, spread)

WRK_LUA = os.path.join(ROOT, "bench", "wrk_report.lua")
REPLAY_LUA = os.path.join(ROOT, "bench", "replay.lua")
CACHES = ("accelnet", "nginx", "haproxy", "varnish")
HIT_MEMORY_MB = 256
ZIPF = dict(objects=100_000, requests=200_000, exponent=0.9, min_kib=2, max_kib=16,
            memory_mb=64, conns=8, seed=15)


# --- the process tree's CPU ---------------------------------------------------------------

def tree_pids(pid):
    """<pid> and its descendants (nginx's master, workers and cache manager; Varnish's
    manager and child)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def tree_cpu_s(pid):
    """utime+stime of <pid> and its descendants, all their threads."""
    total = 0.0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TCK
        except (OSError, IndexError):
            pass
    return total


def tree_rss_kb(pid):
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0)
        except OSError:
            pass
    return total


# --- the origin ---------------------------------------------------------------------------

def start_origin(run, zipf_sizes=()):
    """nginx serving /small (2 KiB) and /1m (1 MiB), and /z/ID/K (K KiB, the same bytes for
    every ID of one size) with `Cache-Control: max-age=3600` (and `Expires`); one access log
    line per request, unbuffered, so that what reached it can be counted at any moment."""
    www = os.path.join(run.dir, "cache-www")
    os.makedirs(www, exist_ok=True)
    for name, size in [("small", 2048), ("1m", 1 << 20)] + [(f"s{k}", k << 10)
                                                          for k in sorted(set(zipf_sizes))]:
        with open(os.path.join(www, name), "wb") as f:
            f.write(os.urandom(size))
    port = free_port()
    log = os.path.join(run.dir, f"cache-origin-{port}.log")
    cfg = run.write("cache-origin.conf", f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE}; error_log {run.dir}/cache-origin.err crit;
pid {run.dir}/cache-origin.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{ access_log {log}; keepalive_requests 10000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{port} backlog=65535; root {www}; expires 3600s;
    location /z/ {{ rewrite ^/z/[0-9]+/([0-9]+)$ /s$1 break; }} }} }}
""")
    p = run.start(["nginx", "-c", cfg, "-e", f"{run.dir}/cache-origin.err"], port,
                  name="cache-origin")
    p.access_log = log
    return p, port


def origin_count(log, needle):
    """Requests whose line holds <needle> (" /small ", " /z/") in the origin's access log."""
    n = 0
    with open(log, "rb") as f:
        for line in f:
            n += needle in line
    return n


# --- the caches ---------------------------------------------------------------------------

def get(port, path):
    """One GET: (status, headers as a dict of lower-case names, body length)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, {k.lower(): v for k, v in r.headers.items()}, len(r.read())


def start_accelnet(run, origin, memory_mb, max_object_mb):
    """accelnet with the response cache on its one route (the contract of issue 15: top-level
    `cache: {memory, max_object}`, `routes[].cache: true`); `Cache-Status` on every response
    and `accelnet_cache_*` on the admin /metrics."""
    port, admin = free_port(), free_port()
    cfg = (f"workers: 1\nlisten: [127.0.0.1:{port}]\nadmin: {{address: 127.0.0.1:{admin}}}\n"
           "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, idle_ms: 300000}\n"
           "limits: {max_connections: 200000}\n"
           f"cache: {{memory: {memory_mb}MiB, max_object: {max_object_mb}MiB}}\n"
           f"pools:\n  - name: b\n    backends:\n      - {{address: 127.0.0.1:{origin}}}\n"
           "routes:\n  - name: c\n    match: {path_prefix: /}\n    pool: b\n    cache: true\n"
           "    access_log: false\n")
    p = run.start([ACCELNET, "proxy", "-c", run.write(f"accelnet-cache-{port}.yaml", cfg),
                   "--log-level", "error"], port, name="accelnet-cache")

    def stats():
        """accelnet_route_cache_total by result: answered from the store (hit, stale,
        collapsed: a waiter served from another request's fill, as Varnish counts its
        waiters' hits) and sent on as a miss; accelnet_cache_* as they are."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics",
                                      timeout=5).read().decode()
        by = {}
        for m in re.finditer(r'^accelnet_route_cache_total\{[^}]*result="(\w+)"[^}]*\} (\d+)$',
                             text, re.M):
            by[m.group(1)] = by.get(m.group(1), 0) + int(m.group(2))
        store = {}
        for m in re.finditer(r"^(accelnet_cache_\w+)(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M):
            store[m.group(1)] = store.get(m.group(1), 0) + float(m.group(2))
        return {"hits": sum(by.get(k, 0) for k in ("hit", "stale", "collapsed")),
                "misses": by.get("miss", 0), "results": by, "store": store,
                "objects": store.get("accelnet_cache_objects"),
                "bytes": store.get("accelnet_cache_bytes")}
    p.stats = stats
    p.is_hit = lambda h: "hit" in [x.strip() for x in h.get("cache-status", "").split(";")[1:]]
    return p, port


def start_nginx(run, origin, memory_mb, max_object_mb, keys_kb=16384, open_files=True):
    """nginx `proxy_cache` as its operator would set it up: the cache directory on tmpfs
    (/dev/shm: the same memory the others use), `max_size` the budget, a keys_zone big
    enough for every key of scenario 11 (its metadata is outside max_size, as nginx
    defines it), `proxy_cache_lock on` (concurrent misses make one origin request, as
    accelnet and Varnish do by default), freshness from the origin's headers, sendfile on
    (Debian's default nginx.conf) and, for hits, open_file_cache (a hit then skips open and
    fstat of the cache file: 15-20 % less CPU per 2 KiB hit here). Not in scenario 11: the
    descriptors it holds keep evicted files' pages in memory, beyond the budget, and with it
    nginx at the budget (keys_zone below) went to the origin 19 % less often (77,156 times
    against 94,739-94,782) than without. A master process, because only its cache manager
    enforces max_size; one worker. `X-Cache-Status` shows HIT or MISS.

    max_size is enforced after the fact: while the cache is under it, the cache manager
    sleeps until the least recently used entry's `inactive` time, at most 10 s
    (ngx_http_file_cache_expire), and only then deletes down to max_size. Objects stored in
    between are over the budget (scenario 11 saw 300 MiB and more on a 64 MiB max_size).
    Only a full keys_zone makes nginx evict at once, in the request path: <keys_kb> sized to
    hold as many keys as the budget holds objects is nginx's one hard bound (scenario 11's
    "nginx keys_zone")."""
    port = free_port()
    d = os.path.join(run.dir, f"nginx-cache-{port}")
    os.makedirs(d)
    shm = os.path.join("/dev/shm", os.path.basename(run.dir) + f"-nginx-{port}")
    os.makedirs(shm)
    run.shm_dirs = getattr(run, "shm_dirs", []) + [shm]
    cfg = f"""daemon off; master_process on; worker_processes 1; user root;
worker_rlimit_nofile {NOFILE};
error_log {d}/error.log crit; pid {d}/nginx.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{
    access_log off; sendfile on; {"open_file_cache max=10000 inactive=60s;" if open_files else ""}
    client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
    uwsgi_temp_path {d}; scgi_temp_path {d};
    keepalive_requests 10000000; keepalive_timeout 300s;
    proxy_cache_path {shm} levels=1:2 keys_zone=c:{keys_kb}k max_size={memory_mb}m inactive=1d
                     use_temp_path=off;
    upstream b {{ server 127.0.0.1:{origin}; keepalive 256; keepalive_requests 10000000; }}
    server {{
        listen 127.0.0.1:{port} backlog=65535;
        location / {{
            proxy_pass http://b;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on; proxy_buffer_size 16k; proxy_buffers 8 16k;
            proxy_busy_buffers_size 32k;
            proxy_cache c; proxy_cache_lock on;
            add_header X-Cache-Status $upstream_cache_status;
        }}
    }}
}}
"""
    p = run.start(["nginx", "-c", run.write(f"nginx-cache-{port}.conf", cfg), "-e",
                   f"{d}/error.log"], port, name="nginx-cache")
    p.stats = lambda: None
    p.is_hit = lambda h: h.get("x-cache-status") == "HIT"
    p.cache_dir = shm
    return p, port


def start_haproxy(run, origin, memory_mb, max_object_mb):
    """HAProxy's cache (`http-request cache-use`, `http-response cache-store`): total-max-size
    the budget, max-object-size the largest object (it must stay under half the total),
    max-age 3600 (its default of 60 s would cap the origin's max-age). One thread. Its
    lookups and hits come from `show stat` on the stats socket; a hit carries `Age`, which
    the origin never sends."""
    port = free_port()
    sock = os.path.join(run.dir, f"haproxy-cache-{port}.sock")
    cfg = f"""global
    nbthread 1
    maxconn {HAPROXY_MAXCONN}
    stats socket {sock} level admin
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 300s
    option http-keep-alive
    http-reuse always
cache c
    total-max-size {memory_mb}
    max-object-size {max_object_mb << 20}
    max-age 3600
frontend f
    bind 127.0.0.1:{port}
    default_backend b
backend b
    http-request cache-use c
    http-response cache-store c
    server s0 127.0.0.1:{origin}
"""
    p = run.start(["haproxy", "-db", "-f", run.write(f"haproxy-cache-{port}.cfg", cfg)], port,
                  name="haproxy-cache")

    def stats():
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        head = lines[0].lstrip("# ").split(",")
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            if row.get("pxname") == "b" and row.get("svname") == "BACKEND":
                lookups, hits = int(row["cache_lookups"] or 0), int(row["cache_hits"] or 0)
                return {"hits": hits, "misses": lookups - hits}
        return None
    p.stats = stats
    p.is_hit = lambda h: "age" in h
    return p, port


def start_varnish(run, origin, memory_mb, max_object_mb):
    """Varnish (Debian's varnishd) with a VCL that names the backend and nothing else (the
    built-in VCL decides), `-s malloc` the budget, one thread pool (its threads each serve
    one connection, so it cannot run on one thread; all of them share the one server CPU as
    the others' single thread does). Its counters come from varnishstat."""
    port = free_port()
    d = os.path.join(run.dir, f"varnish-{port}")
    os.makedirs(d)
    vcl = run.write(f"varnish-{port}.vcl", f"""vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{origin}"; }}
""")
    p = run.start(["varnishd", "-F", "-n", d, "-j", "none", "-a", f"127.0.0.1:{port}",
                   "-T", "127.0.0.1:0", "-f", vcl, "-s", f"malloc,{memory_mb}m",
                   "-p", "thread_pools=1", "-p", "thread_pool_min=100"], port,
                  name="varnish")

    def stats():
        out = subprocess.run(["varnishstat", "-n", d, "-1", "-j", "-f", "MAIN.cache_hit",
                              "-f", "MAIN.cache_miss", "-f", "MAIN.backend_req",
                              "-f", "MAIN.n_lru_nuked", "-f", "MAIN.n_object",
                              "-f", "SMA.s0.g_bytes"], capture_output=True, text=True,
                             timeout=10)
        j = json.loads(out.stdout)
        c = j.get("counters", j)

        def v(k):
            return c.get(k, {}).get("value")
        return {"hits": v("MAIN.cache_hit"), "misses": v("MAIN.cache_miss"),
                "evicted": v("MAIN.n_lru_nuked"), "objects": v("MAIN.n_object"),
                "bytes": v("SMA.s0.g_bytes")}
    p.stats = stats
    p.is_hit = lambda h: len(h.get("x-varnish", "").split()) == 2
    return p, port


STARTERS = {"accelnet": start_accelnet, "nginx": start_nginx, "haproxy": start_haproxy,
            "varnish": start_varnish}
NGINX_KEY_BYTES = 128  # a keys_zone entry: "one megabyte zone can store about 8 thousand keys"
NGINX_FILE_HEADER = 600  # bytes before the body in a cache file (header, key, response head)


def alive(p, name):
    """Raise, with the end of its log, if the cache under test has died."""
    if p.poll() is None:
        return
    with open(p.log_path, errors="replace") as f:
        tail = f.read()[-2000:]
    raise RuntimeError(f"{name} exited with {p.returncode} during the run; its log ends:\n{tail}")


def start_caches(run, origin, memory_mb, max_object_mb, names, starters=STARTERS):
    out, skipped = {}, {}
    for name in names:
        try:
            out[name] = starters[name](run, origin, memory_mb, max_object_mb)
        except RuntimeError as e:  # accelnet before its cache is built, Varnish not installed
            skipped[name] = str(e).split(": ", 1)[-1]
            print(f"cache: {name} not run: {e}", file=sys.stderr, flush=True)
    return out, skipped


def stop_all(run, procs):
    for p, _ in procs.values():
        run.stop(p)
    for shm in getattr(run, "shm_dirs", []):
        subprocess.run(["rm", "-rf", shm], check=False)
    run.shm_dirs = []


# --- scenario 10: hits --------------------------------------------------------------------

def wrk(port, path, seconds, conns):
    out = subprocess.run(["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s",
                          "-s", WRK_LUA, f"http://127.0.0.1:{port}{path}"],
                         capture_output=True, text=True, timeout=seconds + 60)
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[8:])
    raise RuntimeError(f"wrk gave no result: {out.stdout} {out.stderr}")


def scenario_hits(run, res, rounds, seconds, names=CACHES):
    origin, oport = start_origin(run)
    procs, skipped = start_caches(run, oport, HIT_MEMORY_MB, 2, names)
    sizes = {}
    for path, conns, label in (("/small", 64, "2 KiB"), ("/1m", 16, "1 MiB")):
        needle = f" {path} ".encode()
        warm = {}
        for name, (p, port) in procs.items():
            first = get(port, path)
            second = get(port, path)
            warm[name] = {"first_status": first[0], "second_status": second[0],
                          "second_bytes": second[2], "second_is_hit": bool(p.is_hit(second[1])),
                          "marker": {k: v for k, v in second[1].items()
                                     if k in ("cache-status", "x-cache-status", "x-varnish",
                                              "age")}}
            wrk(port, path, 1, conns)
        figures = {name: [] for name in procs}
        for r in range(rounds):
            order = list(procs) if r % 2 == 0 else list(reversed(procs))
            for name in order:
                p, port = procs[name]
                o0 = origin_count(origin.access_log, needle)
                s0 = p.stats()
                c0 = tree_cpu_s(p.pid)
                w = wrk(port, path, seconds, conns)
                c1 = tree_cpu_s(p.pid)
                alive(p, name)
                s1 = p.stats()
                w["origin_requests"] = origin_count(origin.access_log, needle) - o0
                w["rps"] = w["requests"] / (w["duration_us"] / 1e6)
                w["cpu_us_per_req"] = (c1 - c0) * 1e6 / max(w["requests"], 1)
                w["cache_hits"] = (s1["hits"] - s0["hits"]) if s0 and s1 and s0["hits"] \
                    is not None else None
                w["rss_kb"] = tree_rss_kb(p.pid)
                w["round"] = r
                figures[name].append(w)
        sizes[label] = {"path": path, "conns": conns, "warm": warm, "rounds": figures}
    stop_all(run, procs)
    run.stop(origin)
    res["scenarios"]["10"] = {
        "title": "cache hits: accelnet, nginx proxy_cache, HAProxy cache, Varnish",
        "kind": "cachehit", "seconds": seconds, "memory_mb": HIT_MEMORY_MB, "sizes": sizes,
        "skipped": skipped}


def summarize_hits(sc):
    rows = []
    for label, s in sc["sizes"].items():
        for name, rounds in s["rounds"].items():
            w = s["warm"][name]
            rows.append([label, name, spread([x["rps"] for x in rounds], "{:.0f}"),
                         spread([x["cpu_us_per_req"] for x in rounds], "{:.1f}"),
                         spread([x["cpu_us_per_req"] * x["rps"] / 1e4 for x in rounds], "{:.0f}"),
                         str(sum(x["errors"] + x["non2xx"] for x in rounds)),
                         str(sum(x["origin_requests"] for x in rounds)),
                         "yes" if w["second_is_hit"] else "NO",
                         f"{rounds[-1]['rss_kb'] / 1024:.0f}" if rounds else "-"])
    return (["object", "cache", "hits/s", "CPU µs/hit", "its CPU busy %", "errors",
             "origin requests while measured", "hit marker after warm-up", "RSS MiB"], rows)


def ratios_hits(sc):
    rows = []
    for label, s in sc["sizes"].items():
        a = s["rounds"].get("accelnet")
        if not a:
            rows.append([label, "accelnet not run", "-", "-"])
            continue
        for name, rounds in s["rounds"].items():
            if name == "accelnet":
                continue
            rps = [x["rps"] / y["rps"] for x, y in zip(a, rounds) if y["rps"]]
            cpu = [x["cpu_us_per_req"] / y["cpu_us_per_req"] for x, y in zip(a, rounds)
                   if y["cpu_us_per_req"]]
            rows.append([label, f"accelnet ÷ {name}", f"{med(rps):.2f}" if rps else "-",
                         f"{med(cpu):.2f}" if cpu else "-"])
    return (["object", "ratio", "hits/s", "CPU per hit"], rows)


# --- scenario 11: Zipf misses -------------------------------------------------------------

def zipf_trace(objects, requests, exponent, min_kib, max_kib, seed):
    """The URL list: request i is /z/ID/K for an ID drawn Zipf(<exponent>) (rank r weighs
    1/r^s; ranks shuffled over the ids) and K its size in KiB (uniform, fixed per ID)."""
    rnd = random.Random(seed)
    size = [rnd.randint(min_kib, max_kib) for _ in range(objects)]
    ids = list(range(objects))
    rnd.shuffle(ids)  # ids[rank] is the rank's object
    cum, t = [], 0.0
    for r in range(1, objects + 1):
        t += 1.0 / r ** exponent
        cum.append(t)
    ranks = rnd.choices(range(objects), cum_weights=cum, k=requests)
    return [f"/z/{ids[r]}/{size[ids[r]]}" for r in ranks], size


def replay(port, paths_file, n, conns, timeout_s=300):
    """Replay the URL list over <conns> keep-alive connections (wrk, bench/replay.lua): every
    path once, in the file's order; returns its counts and the wall time."""
    t0 = time.monotonic()
    out = subprocess.run(["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{conns}",
                          f"-d{timeout_s}s", "--timeout", "30s", "-s", REPLAY_LUA,
                          f"http://127.0.0.1:{port}/", "--", paths_file, str(n)],
                         capture_output=True, text=True, timeout=timeout_s + 60)
    wall = time.monotonic() - t0
    for line in out.stdout.splitlines():
        if line.startswith("REPLAYJSON "):
            r = json.loads(line[11:])
            r["wall_s"] = wall
            return r
    raise RuntimeError(f"replay gave no result: {out.stdout[-500:]} {out.stderr[-500:]}")


class DirSampler:
    """The disk space (tmpfs pages) of nginx's cache directory, sampled every <every_s> in a
    thread while it runs: nginx enforces max_size from its cache manager, after the fact."""

    def __init__(self, path, every_s=0.25):
        import threading
        self.path, self.every_s, self.peak, self.last = path, every_s, 0, 0
        self.stop_ = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def size_kb(self):
        out = subprocess.run(["du", "-sk", self.path], capture_output=True, text=True)
        return int(out.stdout.split()[0]) if out.stdout else 0

    def _run(self):
        while not self.stop_.is_set():
            self.last = self.size_kb()
            self.peak = max(self.peak, self.last)
            self.stop_.wait(self.every_s)

    def stop(self):
        """(peak KiB, KiB at the end, files at the end)"""
        self.stop_.set()
        self.th.join()
        self.last = self.size_kb()
        files = sum(len(f) for _, _, f in os.walk(self.path))
        return max(self.peak, self.last), self.last, files


def scenario_zipf(run, res, requests=None, names=CACHES):
    z = dict(ZIPF, requests=requests or ZIPF["requests"])
    paths, size = zipf_trace(z["objects"], z["requests"], z["exponent"], z["min_kib"],
                             z["max_kib"], z["seed"])
    pfile = run.write("zipf-paths.txt", "\n".join(paths) + "\n")
    distinct = len(set(paths))
    origin, oport = start_origin(run, range(z["min_kib"], z["max_kib"] + 1))
    # nginx bounded by its keys_zone: as many keys as the budget holds objects, each object
    # taking whole 4 KiB tmpfs pages for its body and nginx's header (key, response headers)
    pages = [-(-(k * 1024 + NGINX_FILE_HEADER) // 4096) * 4096 for k in size]
    fit = int(z["memory_mb"] * 2**20 / (sum(pages) / len(pages)))
    keys_kb = -(-fit * NGINX_KEY_BYTES // 1024)
    starters = dict(STARTERS)
    starters["nginx"] = lambda *a: start_nginx(*a, open_files=False)
    starters["nginx keys_zone"] = lambda *a: start_nginx(*a, keys_kb=keys_kb, open_files=False)
    if "nginx" in names:
        names = list(names) + ["nginx keys_zone"]
    results, skipped = {}, {}
    for name in names:  # one at a time: each alone on the server CPU, each cold
        procs, sk = start_caches(run, oport, z["memory_mb"], 2, [name], starters)
        skipped.update(sk)
        if name not in procs:
            continue
        p, port = procs[name]
        sampler = DirSampler(p.cache_dir) if getattr(p, "cache_dir", None) else None
        o0 = origin_count(origin.access_log, b" /z/")
        c0 = tree_cpu_s(p.pid)
        r = replay(port, pfile, len(paths), z["conns"])
        r["cpu_s"] = tree_cpu_s(p.pid) - c0
        r["origin_requests"] = origin_count(origin.access_log, b" /z/") - o0
        alive(p, name)
        r["stats"] = p.stats()
        r["rss_kb"] = tree_rss_kb(p.pid)
        if sampler:
            r["store_peak_kb"], r["store_end_kb"], r["objects_end"] = sampler.stop()
        elif r["stats"] and r["stats"].get("bytes") is not None:
            r["store_end_kb"] = r["stats"]["bytes"] / 1024
            r["objects_end"] = r["stats"]["objects"]
        results[name] = r
        stop_all(run, procs)
    run.stop(origin)
    res["scenarios"]["11"] = {
        "title": f"misses: Zipf({z['exponent']}) over {z['objects']:,} objects of "
                 f"{z['min_kib']}-{z['max_kib']} KiB, {z['requests']:,} requests, "
                 f"{z['memory_mb']} MiB per cache",
        "kind": "cachezipf", "params": z, "distinct": distinct, "nginx_keys_kb": keys_kb,
        "nginx_fit": fit,
        "object_bytes": sum(size) << 10, "results": results, "skipped": skipped}


def summarize_zipf(sc):
    n = sc["params"]["requests"]
    rows = []
    for name, r in sc["results"].items():
        st = r.get("stats") or {}
        own = st.get("hits")
        rows.append([name, f"{r['ok']:,}", str(r["bad"]), f"{r['origin_requests']:,}",
                     f"{100 * (1 - r['origin_requests'] / n):.1f} %",
                     f"{100 * own / n:.1f} %" if own is not None else "-",
                     f"{r['ok'] / r['wall_s']:.0f}", f"{r['cpu_s'] * 1e6 / n:.1f}",
                     f"{r['rss_kb'] / 1024:.0f}",
                     f"{r['store_end_kb'] / 1024:.0f} / {int(r['objects_end']):,}"
                     if "store_end_kb" in r else "-",
                     f"{r['store_peak_kb'] / 1024:.0f}" if "store_peak_kb" in r else "-"])
    return (["cache", "answered 200", "other", "origin requests",
             "answered without the origin", "own hit counter", "req/s", "CPU µs/req",
             "RSS MiB", "store at the end: MiB / objects", "nginx: peak MiB of its files"],
            rows)


def ratios_zipf(sc):
    a = sc["results"].get("accelnet")
    if not a:
        return (["ratio", "origin requests"], [["accelnet not run", "-"]])
    rows = [[f"accelnet ÷ {name}", f"{a['origin_requests'] / r['origin_requests']:.3f}"]
            for name, r in sc["results"].items() if name != "accelnet" and r["origin_requests"]]
    return (["ratio", "origin requests"], rows)


def notes_zipf(sc):
    z = sc["params"]
    floor = sc["distinct"]
    return (f"{sc['distinct']:,} distinct objects requested ({sc['object_bytes'] / 2**20:.0f} MiB "
            f"in all {z['objects']:,}): at least {floor:,} origin requests for any cache "
            f"({100 * (1 - floor / z['requests']):.1f} % the most answered without the "
            "origin). nginx enforces max_size from its cache manager, which sleeps up to 10 s "
            "while the cache is under it: its store outgrows the budget (the last column: "
            "tmpfs pages of its cache directory, sampled every 0.25 s; HAProxy's store is "
            "its fixed total-max-size). \"nginx keys_zone\" "
            f"is nginx with a keys_zone of {sc['nginx_keys_kb']} KiB, about as many keys "
            f"({sc['nginx_fit']:,}) as {z['memory_mb']} MiB holds objects, which it enforces "
            "at once: nginx at the budget.")


SUMMARIZERS = {"cachehit": summarize_hits, "cachezipf": summarize_zipf}
RATIOS = {"cachehit": ratios_hits, "cachezipf": ratios_zipf}
