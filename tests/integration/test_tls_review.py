"""Attacks on the TLS edge found in review (issue 12): identity fields forged through another
listener, an RDN injected through a client certificate's CN, and a backend's TLS response cut
short by a bare FIN; each test plays the attack and asserts what the client or backend sees."""

import socket
import ssl

from harness import BIN, echo_backend, free_port, pool_yaml, read_all
from test_mtls import SAN_EXT, Pki, _ctx, _request, _server


def _plain_request(port, head):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(head)
    return read_all(s)


def test_renamed_identity_fields_are_dropped_on_every_listener(env):
    """A listener with mutual TLS names its identity fields X-Cert-DN / X-Cert-SAN; the same
    pool is also reached through a plain listener. A client of the plain listener must not be
    able to hand the backend an X-Cert-DN it would believe."""
    be = echo_backend(env)
    pki = Pki(env)
    cca = pki.ca("client-ca", "client root")
    alice = pki.issue("alice", "/CN=alice", cca, ext=SAN_EXT)
    ca, full, key = _server(pki)
    port, plain = free_port(), free_port()
    path = env.write("proxy.yaml",
                     f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {full}, key: {key}, client_ca: {cca[0]},"
                     " client_auth: optional, client_subject_header: X-Cert-DN,"
                     " client_san_header: X-Cert-SAN}\n"
                     f"  - 127.0.0.1:{plain}\n"
                     "pools:\n" + pool_yaml("p", [be.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    _, data = _request(port, _ctx(ca[0], alice[:2]))
    assert b"X-Cert-DN: CN=alice\r\n" in data, data
    for name in (b"X-Cert-DN", b"x-cert-dn", b"X-CERT-SAN"):
        data = _plain_request(plain, b"GET / HTTP/1.1\r\nHost: x\r\n" + name +
                              b": CN=root\r\nConnection: close\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 200") and b"CN=root" not in data, data
    # and the TLS listener without a certificate drops them too (already promised)
    _, data = _request(port, _ctx(ca[0]), headers=[("X-Cert-DN", "CN=root")])
    assert b"CN=root" not in data, data


class _TlsBackend:
    """A TLS backend in a thread: each connection reads one request head and gets
    answer(n) -> (bytes, how) back, n counting connections; how is 'notify' (close_notify,
    then close) or 'cut' (the socket closed with no close_notify, as an attacker's FIN)."""

    def __init__(self, env, cert, key, answer):
        import threading
        self.answer, self.count = answer, 0
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        env.on_cleanup.append(self.sock.close)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                raw_conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            try:
                s = self.ctx.wrap_socket(raw_conn, server_side=True)
                got = b""
                while b"\r\n\r\n" not in got:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
                out, how = self.answer(self.count)
                s.sendall(out)
                if how == "notify":
                    s.unwrap().close()
                else:
                    s.shutdown(socket.SHUT_RDWR)  # the TCP FIN alone
                    s.close()
            except (OSError, ssl.SSLError):
                raw_conn.close()


def _tls_read_to_end(port, ca, path="/"):
    """A request over TLS read to the end: (data, 'notify' if the proxy ended with
    close_notify, 'cut' if the connection ended without one)."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.options &= ~ssl.OP_IGNORE_UNEXPECTED_EOF  # Python's default would hide the cut
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                        server_hostname="localhost", suppress_ragged_eofs=False)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return data, "notify"
            data += d
    except (ssl.SSLError, ConnectionResetError):  # UNEXPECTED_EOF_WHILE_READING
        return data, "cut"
    finally:
        s.close()


def test_backend_tls_truncation_of_a_close_delimited_body_is_not_a_complete_response(env):
    """A response whose body ends with the connection (no Content-Length, no chunks) is
    complete only when the backend's TLS says so (close_notify). A FIN or reset without it
    -- what anyone on the path can forge -- is a truncation: the proxy must not end the
    client's response cleanly, or the client takes half a body for the whole."""
    pki = Pki(env)
    ca, full, key = _server(pki)
    body = b"the first half of the answer"
    be = _TlsBackend(env, full, key, lambda n: (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
                                                + body, "cut" if n % 2 else "notify"))
    port = free_port()
    path = env.write("proxy.yaml",
                     f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {full}, key: {key}}}\n"
                     "pools:\n  - name: p\n    backends:\n"
                     f"      - {{address: 127.0.0.1:{be.port}}}\n"
                     f"    tls: {{ca: {ca[0]}}}\n")
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    data, end = _tls_read_to_end(port, ca[0])  # backend connection 1: cut
    assert data.startswith(b"HTTP/1.1 200") and end == "cut", (data, end)
    data, end = _tls_read_to_end(port, ca[0])  # connection 2: close_notify
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(body) and end == "notify", \
        (data, end)


def test_client_subject_keeps_rfc4514_escapes_so_no_rdn_can_be_injected(env):
    """A client certificate whose CN holds a comma, an equals sign, a backslash, a quote and
    UTF-8 must reach the backend as one RFC 4514 string that parses back to the same single
    CN: 'CN=evil\\,O=Admins' (the comma escaped), never 'CN=evil\\5C,O=Admins', which an RFC
    4514 parser reads as CN='evil\\' plus an injected O=Admins."""
    be = echo_backend(env)
    pki = Pki(env)
    cca = pki.ca("client-ca", "client root")
    evil = pki.issue("evil", "/CN=evil,O=Admins", cca)
    slash = pki.issue("slash", "/CN=a\\\\b", cca)  # the CN a\b
    ca, full, key = _server(pki)
    port = free_port()
    path = env.write("proxy.yaml",
                     f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {full}, key: {key}, client_ca: {cca[0]}}}\n"
                     "pools:\n" + pool_yaml("p", [be.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    _, data = _request(port, _ctx(ca[0], evil[:2]))
    assert b"\r\nX-Client-Subject: CN=evil\\,O=Admins\r\n" in data, data
    _, data = _request(port, _ctx(ca[0], slash[:2]))
    assert b"\r\nX-Client-Subject: CN=a\\\\b\r\n" in data, data


def test_underscore_spellings_of_identity_fields_are_dropped(env):
    """CGI-style backends (WSGI, PHP, Rack) read X_Client_Subject as HTTP_X_CLIENT_SUBJECT,
    the same variable as X-Client-Subject: when the proxy sets none (no certificate, a plain
    listener) the client's underscore spelling would stand in for it."""
    be = echo_backend(env)
    port = free_port()
    path = env.write("proxy.yaml", f"workers: 1\nlisten:\n  - 127.0.0.1:{port}\n"
                     "pools:\n" + pool_yaml("p", [be.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    for name in (b"X_Client_Subject", b"x_client-san", b"X-TLS_SNI"):
        data = _plain_request(port, b"GET / HTTP/1.1\r\nHost: x\r\n" + name +
                              b": CN=root\r\nX_Other: kept\r\nConnection: close\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 200") and b"CN=root" not in data, data
        assert b"X_Other: kept\r\n" in data, data
