"""A hostile review of issue 26's probes on the data listeners (probes.listeners): the proxy
answers /healthz and /readyz whatever query follows (so a client cannot reach a backend's own
/healthz by adding one), and only on those paths as a route reads them (case counts: a
backend's /HEALTHZ is routed)."""

import json

from harness import LenientBackend, request


def test_probes_on_a_data_listener_match_the_path_not_its_query_nor_another_case(env):
    be = LenientBackend()
    env.on_cleanup.append(be.close)
    p = env.proxy("probes: {listeners: true}\npools:\n"
                  f"  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
                  "routes:\n  - match: {path_prefix: /}\n    pool: p\n")
    for path, want in (("/healthz", b'{"status":"ok"}\n'), ("/healthz?x=1", b'{"status":"ok"}\n'),
                       ("/readyz?", b'{"status":"ready"}\n'), ("/%68ealthz", b'{"status":"ok"}\n')):
        st, _, data = request(p.port, "GET", path)
        assert st == 200 and data == want, (path, st, data)
    assert not be.seen, be.seen
    for path in ("/HEALTHZ", "/Readyz", "/healthz/"):
        st, _, data = request(p.port, "GET", path)
        assert st == 200 and json.loads(data)["path"] == path, (path, st, data)
    assert len(be.seen) == 3
