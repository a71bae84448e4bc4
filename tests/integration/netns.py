"""Emulated links for xfer tests and benchmarks: two network namespaces (sender, receiver)
joined by one veth pair per link, each direction shaped with tbf to the link's rate.
Link i has 10.77.i.1 (sender side) and 10.77.i.2 (receiver side). Everything is removed
by close(), which Env runs at cleanup even when the test fails."""

import itertools
import os
import subprocess

_seq = itertools.count()


def sh(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Links:
    def __init__(self, rates_mbit, tag=None, shape_acks=True):
        tag = tag or f"{os.getpid() % 100000}{next(_seq)}"
        self.snd, self.rcv = f"axs{tag}", f"axr{tag}"
        self.rates = list(rates_mbit)
        self.devs = []
        try:
            for ns in (self.snd, self.rcv):
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            for i, rate in enumerate(self.rates):
                a, b = f"xa{tag}l{i}"[:15], f"xb{tag}l{i}"[:15]
                sh("ip", "link", "add", a, "netns", self.snd, "type", "veth", "peer", "name", b,
                   "netns", self.rcv)
                sh("ip", "-n", self.snd, "addr", "add", f"10.77.{i}.1/24", "dev", a)
                sh("ip", "-n", self.rcv, "addr", "add", f"10.77.{i}.2/24", "dev", b)
                sh("ip", "-n", self.snd, "link", "set", a, "up")
                sh("ip", "-n", self.rcv, "link", "set", b, "up")
                shaped = [(self.snd, a)] + ([(self.rcv, b)] if shape_acks else [])
                for ns, dev in shaped:
                    burst = max(64 * 1024, rate * 1000 * 1000 // 8 // 250)
                    sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                       "rate", f"{rate}mbit", "burst", str(burst), "latency", "20ms")
                self.devs.append((a, b))
        except Exception:
            self.close()
            raise

    def sender_addr(self, i):
        return f"10.77.{i}.1"

    def receiver_addr(self, i):
        return f"10.77.{i}.2"

    def cmd(self, ns, argv):
        return ["ip", "netns", "exec", ns] + list(argv)

    def set_rate(self, i, rate):
        """Change link i's rate (both directions), as a congested or degraded link would."""
        a, b = self.devs[i]
        for ns, dev in ((self.snd, a), (self.rcv, b)):
            burst = max(64 * 1024, rate * 1000 * 1000 // 8 // 250)
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "change", "dev", dev, "root", "tbf",
               "rate", f"{rate}mbit", "burst", str(burst), "latency", "20ms")

    def down(self, i):
        """Take link i down on both ends, as a pulled cable would."""
        a, b = self.devs[i]
        sh("ip", "-n", self.snd, "link", "set", a, "down")
        sh("ip", "-n", self.rcv, "link", "set", b, "down")

    def up(self, i):
        """Bring link i back (its addresses and routes return with it)."""
        a, b = self.devs[i]
        sh("ip", "-n", self.snd, "link", "set", a, "up")
        sh("ip", "-n", self.rcv, "link", "set", b, "up")

    def close(self):
        for ns in (self.snd, self.rcv):
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


def tcp_received(port, ns=None):
    """Bytes received on the established TCP sockets of local <port> (in namespace <ns>):
    (arrived at the host, read by the application = arrived less what waits in the socket).
    Take it while the receiver is stopped (SIGSTOP) for a consistent picture."""
    argv = ["ss", "-tinH", "state", "established", f"( sport = :{port} )"]
    if ns:
        argv = ["ip", "netns", "exec", ns] + argv
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    host = app = 0
    recvq = 0
    for line in out.splitlines():
        if line and line[0].isdigit():
            recvq = int(line.split()[0])
        elif "bytes_received:" in line:
            n = int(line.split("bytes_received:")[1].split()[0])
            host += n
            app += n - recvq
    return host, app
