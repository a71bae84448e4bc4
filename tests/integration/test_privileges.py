"""Privileges (issue 12): the gateway binds, reads its keys, then runs as the configured user;
key material stays out of core dumps."""

import os
import subprocess

from harness import BIN, free_port, pool_yaml, request


def _status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split()[1:]
    return None


def test_runs_as_the_configured_user_and_keeps_keys_out_of_cores(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    os.chmod(keys, 0o600)  # readable by root only: read before the drop
    os.chmod(env.dir, 0o755)
    port = free_port()
    conf = env.write("p.yaml", f"workers: 2\nuser: nobody\ngroup: nogroup\n"
                     f"listen: [127.0.0.1:{port}]\npools:\n" + pool_yaml("p", [sim.port]) +
                     f"routes:\n  - pool: p\n    auth: {{api_keys_file: {keys}}}\n")
    p = env.start([BIN, "proxy", "-c", conf], "proxy", wait_port=port)
    st, _, _ = request(port, "GET", "/", headers={"X-API-Key": "sk-acme-0123456789abcdef"})
    assert st == 200
    uid, gid = _status(p.pid, "Uid"), _status(p.pid, "Gid")
    assert set(uid) == {"65534"} and set(gid) == {"65534"}, (uid, gid)
    assert _status(p.pid, "Groups") in ([], None), _status(p.pid, "Groups")
    with open(f"/proc/{p.pid}/limits") as f:
        core = [ln for ln in f if ln.startswith("Max core file size")][0].split()
    assert core[4] == "0" and core[5] == "0", core
    assert "running as nobody" in env.log(p)


def test_unknown_accounts_are_refused_with_their_place(env):
    for extra, want in (("user: no-such-user-xyz\n", "no account 'no-such-user-xyz'"),
                        ("user: nobody\ngroup: no-such-group-xyz\n", "no group"),
                        ("group: nogroup\n", "give 'user' too")):
        conf = env.write("p.yaml", extra + "listen: [127.0.0.1:1]\npools:\n" +
                         pool_yaml("p", [free_port()]))
        r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert r.returncode == 2 and want in r.stderr and f"{conf}:" in r.stderr, r.stderr
