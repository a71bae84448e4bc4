"""Mutual TLS, OCSP stapling, timed reloads and TLS facts on listeners (issue 12). Every
certificate is made in the test with the openssl command: a client CA, client certificates
(one from an untrusted CA, one under a chain too deep), a server certificate signed by a CA
and an OCSP response for it."""

import os
import shutil
import socket
import ssl
import subprocess

from harness import BIN, echo_backend, free_port, pool_yaml, port_open, read_all, wait_until


class Pki:
    """Certificates in one test's directory."""

    def __init__(self, env):
        self.dir = env.dir
        self.serial = 0x1000

    def path(self, name):
        return os.path.join(self.dir, name)

    def _run(self, *argv):
        subprocess.run(["openssl", *argv], check=True, capture_output=True)

    def ca(self, name, cn):
        pem, key = self.path(name + ".pem"), self.path(name + ".key")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-nodes", "-keyout", key, "-out", pem, "-days", "2", "-subj", "/CN=" + cn)
        return pem, key

    def issue(self, name, subj, issuer, ext="", chain=()):
        """A certificate for <subj> signed by <issuer> (pem, key); <chain>: PEM files appended
        after it in <name>.chain.pem. Returns (pem, key, chain_pem)."""
        pem, key, csr = (self.path(name + ".pem"), self.path(name + ".key"),
                         self.path(name + ".csr"))
        extfile = self.path(name + ".ext")
        with open(extfile, "w") as f:
            f.write(ext or "basicConstraints=CA:FALSE\n")
        self._run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-nodes", "-keyout", key, "-out", csr, "-subj", subj)
        self.serial += 1
        self._run("x509", "-req", "-in", csr, "-CA", issuer[0], "-CAkey", issuer[1],
                  "-set_serial", str(self.serial), "-days", "2", "-out", pem, "-extfile",
                  extfile)
        full = self.path(name + ".chain.pem")
        with open(full, "w") as out:
            for part in (pem, *chain):
                with open(part) as f:
                    out.write(f.read())
        return pem, key, full

    def serial_of(self, pem):
        out = subprocess.run(["openssl", "x509", "-in", pem, "-noout", "-serial"],
                             check=True, capture_output=True, text=True).stdout
        return out.strip().split("=")[1]

    def crl(self, name, ca, revoked):
        """A PEM CRL from <ca> (pem, key) revoking the certificates <revoked>."""
        index, number, cnf, out = (self.path(name + ".index"), self.path(name + ".number"),
                                   self.path(name + ".cnf"), self.path(name + ".pem"))
        with open(index, "w") as f:
            for pem in revoked:
                f.write(f"R\t300101000000Z\t260101000000Z\t{self.serial_of(pem)}\tunknown"
                        "\t/CN=x\n")
        with open(number, "w") as f:
            f.write("01\n")
        with open(cnf, "w") as f:
            f.write(f"[ca]\ndefault_ca = c\n[c]\ndatabase = {index}\ncrlnumber = {number}\n"
                    "default_md = sha256\ndefault_crl_days = 1\n")
        self._run("ca", "-gencrl", "-keyfile", ca[1], "-cert", ca[0], "-out", out, "-config",
                  cnf)
        return out

    def intermediate(self, name, issuer):
        return self.issue(name, "/CN=" + name, issuer,
                          ext="basicConstraints=critical,CA:TRUE\n"
                              "keyUsage=critical,keyCertSign,cRLSign\n")

    def ocsp(self, name, cert, issuer, status="V"):
        """A DER OCSP response for <cert> from <issuer> (which signs it)."""
        req, resp, index = (self.path(name + ".req"), self.path(name + ".der"),
                            self.path(name + ".index"))
        serial = self.serial_of(cert)
        with open(index, "w") as f:
            f.write(f"{status}\t300101000000Z\t{'260101000000Z' if status == 'R' else ''}"
                    f"\t{serial}\tunknown\t/CN=x\n")
        self._run("ocsp", "-issuer", issuer[0], "-cert", cert, "-reqout", req)
        self._run("ocsp", "-index", index, "-rsigner", issuer[0], "-rkey", issuer[1], "-CA",
                  issuer[0], "-reqin", req, "-respout", resp, "-ndays", "1")
        return resp


SAN_EXT = ("basicConstraints=CA:FALSE\n"
           "subjectAltName=URI:spiffe://example.org/tenant/acme,DNS:client.example.org\n")


def _server(pki):
    ca = pki.ca("server-ca", "server root")
    pem, key, full = pki.issue("server", "/CN=localhost", ca,
                               ext="subjectAltName=DNS:localhost,DNS:api.example.com,"
                                   "DNS:*.example.net,IP:127.0.0.1\n",
                               chain=(ca[0],))
    return ca, full, key


def _proxy(env, pki, backend_port, tls_extra="", routes="", listen_extra=""):
    """A proxy with one TLS listener serving the server certificate. Returns (proxy, port,
    server CA pem)."""
    ca, full, key = _server(pki)
    port = free_port()
    text = (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
            f"    tls:\n      cert: {full}\n      key: {key}\n" + tls_extra + listen_extra +
            "pools:\n" + pool_yaml("p", [backend_port]) + routes)
    path = env.write("proxy.yaml", text)
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    return p, port, ca[0]


def _ctx(server_ca, client=None, maxv=None):
    c = ssl.create_default_context(cafile=server_ca)
    if client:
        c.load_cert_chain(client[0], client[1])
    if maxv:
        c.maximum_version = maxv
    return c


def _request(port, ctx, path="/", headers=(), host="localhost"):
    """One request over a new TLS connection: (status line, whole answer), or raises the
    ssl/OS error the client saw."""
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                        server_hostname=host)
    try:
        head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
        for k, v in headers:
            head += f"{k}: {v}\r\n"
        s.sendall(head.encode() + b"\r\n")
        data = read_all(s)
    finally:
        s.close()
    if not data:
        raise ConnectionResetError("closed without an answer")
    return data.split(b"\r\n", 1)[0], data


def _refused(port, ctx):
    """The connection fails (in the handshake, or at the first read under TLS 1.3, where
    the client finishes before the server has judged its certificate)."""
    try:
        _request(port, ctx)
    except (ssl.SSLError, OSError):
        return True
    return False


def _clients(pki):
    ca = pki.ca("client-ca", "client root")
    good = pki.issue("alice", "/O=Example/CN=alice", ca, ext=SAN_EXT)
    rogue_ca = pki.ca("rogue-ca", "client root")  # the same name, another key
    rogue = pki.issue("mallory", "/CN=alice", rogue_ca, ext=SAN_EXT)
    return ca, good, rogue


def test_mtls_required(env):
    be = echo_backend(env)
    pki = Pki(env)
    ca, good, rogue = _clients(pki)
    p, port, sca = _proxy(env, pki, be.port, f"      client_ca: {ca[0]}\n")
    for maxv in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        assert _refused(port, _ctx(sca, maxv=maxv)), "no certificate"
        assert _refused(port, _ctx(sca, rogue[:2], maxv=maxv)), "untrusted certificate"
    assert be.count == 0
    # a good certificate: the backend hears who it is, and not what the client claims
    status, data = _request(port, _ctx(sca, good[:2]), headers=[
        ("X-Client-Subject", "CN=admin"), ("x-client-san", "spiffe://evil"),
        ("X-TLS-Version", "SSLv2")])
    assert status == b"HTTP/1.1 200 OK", data[:200]
    assert b"X-Client-Subject: CN=alice,O=Example\r\n" in data, data
    assert b"X-Client-SAN: spiffe://example.org/tenant/acme\r\n" in data, data
    assert b"CN=admin" not in data and b"spiffe://evil" not in data and b"SSLv2" not in data
    assert data.lower().count(b"x-client-subject") == 1


def test_revoked_client_certificate_is_refused(env):
    be = echo_backend(env)
    pki = Pki(env)
    ca, good, _ = _clients(pki)
    revoked = pki.issue("bob", "/CN=bob", ca, ext=SAN_EXT)
    crl = pki.crl("crl", ca, [revoked[0]])
    p, port, sca = _proxy(env, pki, be.port, f"      client_ca: {ca[0]}\n"
                          f"      client_crl: {crl}\n")
    assert _request(port, _ctx(sca, good[:2]))[0] == b"HTTP/1.1 200 OK"
    for maxv in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        assert _refused(port, _ctx(sca, revoked[:2], maxv=maxv))
    assert be.count == 1


def test_mtls_optional_and_tenant_from_certificate(env):
    be = echo_backend(env)
    pki = Pki(env)
    ca, good, rogue = _clients(pki)
    keys = env.write("keys.txt", "keyed sk-keyed-0123456789abcdef\n")
    routes = ("routes:\n"
              "  - match: {path_prefix: /cert/}\n    pool: p\n"
              "    auth: {client_cert: {tenant_from: subject_cn}}\n"
              "  - match: {path_prefix: /san/}\n    pool: p\n"
              "    auth: {client_cert: {tenant_from: san}, identity_header: X-Who}\n"
              "  - match: {path_prefix: /either/}\n    pool: p\n"
              f"    auth: {{client_cert: {{tenant_from: subject_cn}}, api_keys_file: {keys}}}\n"
              "  - match: {path_prefix: /only-bob/}\n    pool: p\n"
              "    auth: {client_cert: {tenant_from: subject_cn}, tenants: [bob]}\n"
              "  - pool: p\n")
    p, port, sca = _proxy(env, pki, be.port,
                          f"      client_ca: {ca[0]}\n      client_auth: optional\n"
                          f"      client_subject_header: X-Subj\n", routes=routes)
    # no certificate: let in, with no identity (and a client's own X-Subj dropped)
    status, data = _request(port, _ctx(sca), headers=[("X-Subj", "CN=alice")])
    assert status == b"HTTP/1.1 200 OK" and b"X-Subj" not in data, data
    # a certificate it presents must still verify
    assert _refused(port, _ctx(sca, rogue[:2]))
    # the tenant from the certificate: the identity header, for fairness and limits
    status, data = _request(port, _ctx(sca, good[:2]), "/cert/x", [("X-Tenant", "root")])
    assert status == b"HTTP/1.1 200 OK" and b"X-Tenant: alice\r\n" in data, data
    assert b"X-Tenant: root" not in data and b"X-Subj: CN=alice,O=Example\r\n" in data
    status, data = _request(port, _ctx(sca, good[:2]), "/san/x")
    assert b"X-Who: spiffe://example.org/tenant/acme\r\n" in data, data
    # without a certificate: 403 where only a certificate names the tenant
    assert _request(port, _ctx(sca), "/cert/x")[0].startswith(b"HTTP/1.1 403")
    # ... an API key still works where the route takes one too
    status, data = _request(port, _ctx(sca), "/either/x",
                            [("X-API-Key", "sk-keyed-0123456789abcdef")])
    assert status == b"HTTP/1.1 200 OK" and b"X-Tenant: keyed\r\n" in data, data
    assert _request(port, _ctx(sca), "/either/x")[0].startswith(b"HTTP/1.1 401")
    # a known tenant the route does not admit
    assert _request(port, _ctx(sca, good[:2]), "/only-bob/x")[0].startswith(b"HTTP/1.1 403")


def test_client_chain_too_deep_is_refused(env):
    be = echo_backend(env)
    pki = Pki(env)
    root = pki.ca("client-ca", "client root")
    chain, issuer = [], root
    for i in range(5):  # five intermediates, more than verify_depth's default (3)
        inter = pki.intermediate(f"int{i}", issuer)
        chain.insert(0, inter[0])
        issuer = inter[:2]
    deep = pki.issue("deep", "/CN=deep", issuer, chain=chain)
    shallow = pki.issue("shallow", "/CN=shallow", root)
    port2 = free_port()
    p, port, sca = _proxy(env, pki, be.port, f"      client_ca: {root[0]}\n",
                          listen_extra=f"  - address: 127.0.0.1:{port2}\n"
                          f"    tls: {{cert: {pki.path('server.chain.pem')}, "
                          f"key: {pki.path('server.key')}, client_ca: {root[0]}, "
                          f"verify_depth: 6}}\n")
    wait_until(lambda: port_open(port2), "second listener")
    assert _request(port, _ctx(sca, shallow[:2]))[0] == b"HTTP/1.1 200 OK"
    assert _refused(port, _ctx(sca, (deep[2], deep[1])))
    # the same chain where verify_depth allows it: the depth was the reason
    status, data = _request(port2, _ctx(sca, (deep[2], deep[1])))
    assert status == b"HTTP/1.1 200 OK" and b"X-Client-Subject: CN=deep\r\n" in data


def _s_client_status(port):
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-status",
                        "-servername", "localhost"], input=b"", capture_output=True, timeout=15)
    return r.stdout.decode(errors="replace")


def test_ocsp_stapling(env):
    be = echo_backend(env)
    pki = Pki(env)
    ca, full, key = _server(pki)
    resp = pki.ocsp("good", pki.path("server.pem"), ca)
    port = free_port()
    path = env.write("proxy.yaml",
                     f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {full}, key: {key}, ocsp_file: {resp}}}\n"
                     "pools:\n" + pool_yaml("p", [be.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    out = _s_client_status(port)
    assert "OCSP Response Status: successful" in out, out[-2000:]
    assert "Cert Status: good" in out
    # a response for another certificate, a revoked one, and garbage: refused with the place
    other = pki.issue("other", "/CN=localhost", ca)
    bad = {"another certificate": pki.ocsp("other", other[0], ca),
           "revoked": pki.ocsp("revoked", pki.path("server.pem"), ca, status="R"),
           "not a DER OCSP response": env.write("junk.der", "junk")}
    for why, f in bad.items():
        conf = env.write("bad.yaml", f"listen:\n  - address: 127.0.0.1:{free_port()}\n"
                         f"    tls:\n      cert: {full}\n      key: {key}\n"
                         f"      ocsp_file: {f}\n" + "pools:\n" + pool_yaml("p", [be.port]))
        r = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert r.returncode != 0 and "bad.yaml:4:" in r.stderr and why in r.stderr, r.stderr


def test_sni_route_match_and_tls_facts_headers(env):
    be = echo_backend(env)
    pki = Pki(env)
    routes = ("routes:\n"
              "  - match: {sni: api.example.com, path_prefix: /}\n    pool: api\n"
              "  - match: {sni: '*.example.net'}\n    pool: net\n"
              "  - pool: p\n")
    be2, be3 = echo_backend(env), echo_backend(env)
    text_pools = pool_yaml("api", [be2.port]) + pool_yaml("net", [be3.port])
    ca, full, key = _server(pki)
    port, plain = free_port(), free_port()
    path = env.write("proxy.yaml",
                     f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {full}, key: {key}, facts_headers: true}}\n"
                     f"  - 127.0.0.1:{plain}\n"
                     "pools:\n" + pool_yaml("p", [be.port]) + text_pools + routes)
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    ctx = _ctx(ca[0], maxv=ssl.TLSVersion.TLSv1_2)
    _, data = _request(port, ctx, host="api.example.com", headers=[("X-TLS-SNI", "forged")])
    assert b"X-TLS-SNI: api.example.com\r\n" in data and b"forged" not in data, data
    assert b"X-TLS-Version: TLSv1.2\r\nX-TLS-Cipher: ECDHE-ECDSA-" in data, data
    assert (be.count, be2.count, be3.count) == (0, 1, 0)
    _, data_net = _request(port, _ctx(ca[0]), host="a.example.net")
    _, data_default = _request(port, _ctx(ca[0]), host="localhost")
    assert b"X-TLS-SNI: a.example.net\r\n" in data_net
    assert b"X-TLS-Version: TLSv1.3\r\n" in data_default
    assert (be.count, be2.count, be3.count) == (1, 1, 1)  # each route its own pool
    # the plain listener matches no SNI route, and forwards no forged facts
    s = socket.create_connection(("127.0.0.1", plain), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: api.example.com\r\nX-TLS-Cipher: NULL\r\n"
              b"X-Client-Subject: CN=root\r\nConnection: close\r\n\r\n")
    data = read_all(s)
    assert data.startswith(b"HTTP/1.1 200") and b"NULL" not in data and b"CN=root" not in data


def test_timer_reload_serves_new_certificate_without_dropping(env):
    be = echo_backend(env)
    pki = Pki(env)
    ca, full, key = _server(pki)
    new = pki.issue("renewed", "/CN=localhost", ca, ext="subjectAltName=DNS:localhost\n",
                    chain=(ca[0],))
    live_pem, live_key = pki.path("live.pem"), pki.path("live.key")
    shutil.copy(full, live_pem)
    shutil.copy(key, live_key)
    port = free_port()
    path = env.write("proxy.yaml",
                     f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {live_pem}, key: {live_key}, reload_s: 1}}\n"
                     "pools:\n" + pool_yaml("p", [be.port]))
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    old = _ctx(ca[0]).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                  server_hostname="localhost")
    old.sendall(b"GET /1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert old.recv(65536).startswith(b"HTTP/1.1 200")

    def serial(der):
        return subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"],
                              input=der, capture_output=True, check=True).stdout

    def served():
        s = _ctx(ca[0]).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                    server_hostname="localhost")
        with s:
            return serial(s.getpeercert(binary_form=True))

    new_serial = subprocess.run(["openssl", "x509", "-in", new[0], "-noout", "-serial"],
                                capture_output=True, check=True).stdout
    assert served() != new_serial
    # the key first, then the certificate: a reload in between fails (mismatch) and waits
    shutil.copy(new[1], live_key + ".tmp")
    os.replace(live_key + ".tmp", live_key)
    shutil.copy(new[2], live_pem + ".tmp")
    os.replace(live_pem + ".tmp", live_pem)
    wait_until(lambda: served() == new_serial, "the renewed certificate")
    # the connection opened before still works
    old.sendall(b"GET /2 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert read_all(old).startswith(b"HTTP/1.1 200")
    assert p.poll() is None
