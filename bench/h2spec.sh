#!/usr/bin/env bash
# bench/h2spec.sh H2SPEC_SRC_DIR [H2SPEC_ARGS...]: run h2spec, an independent HTTP/2
# conformance suite (github.com/summerwind/h2spec), against accelnet proxy.
#
# H2SPEC_SRC_DIR is a checkout of h2spec's source (a work tree, or a bare git directory whose
# HEAD is taken). It is built here with Debian's Go and Debian's packaged Go libraries, in
# GOPATH mode (GO111MODULE=off): no module proxy is asked, so it builds offline. Then one
# accelnet proxy (one worker) listens on two free loopback ports, one plain (h2c with prior
# knowledge) and one TLS (ALPN h2, a throwaway self-signed certificate), with one pool to an
# nginx that answers 200 and a short body to any request, and h2spec runs against each:
# every section (generic, http2, hpack) unless H2SPEC_ARGS names some (`http2`, `hpack/4`,
# `-S` for its strict cases too). Its output and JUnit reports go to $H2SPEC_OUT (default
# build/h2spec/): plain.txt, plain.xml, tls.txt, tls.xml.
#
# Exit status: 0 when every case not passed is one docs/benchmarks.md ("HTTP/2 conformance:
# h2spec") lists as allowed by the RFC, 1 otherwise (the unexpected ones are printed).
set -eu
[ $# -ge 1 ] || {
	echo "usage: bench/h2spec.sh H2SPEC_SRC_DIR [H2SPEC_ARGS...]" >&2
	exit 2
}
src=$(cd "$1" && pwd)
shift
cd "$(dirname "$0")/.."
root=$(pwd)
out=${H2SPEC_OUT:-$root/build/h2spec}

scripts/deps.sh golang-go golang-golang-x-net-dev golang-github-spf13-cobra-dev \
	golang-github-fatih-color-dev
make -j"$(nproc)" all >/dev/null

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# h2spec's source in a GOPATH of its own, beside Debian's (/usr/share/gocode)
pkg=$work/gopath/src/github.com/summerwind/h2spec
mkdir -p "$pkg"
if [ -d "$src/cmd/h2spec" ]; then
	cp -r "$src/." "$pkg/"
else
	git -C "$src" archive HEAD | tar -x -C "$pkg"
fi
version=$(git -C "$src" describe --tags --always 2>/dev/null || echo unknown)
(cd "$pkg" && GO111MODULE=off GOFLAGS='' GOPATH="$work/gopath:/usr/share/gocode" \
	GOCACHE="$work/gocache" go build -o "$work/h2spec" ./cmd/h2spec)

read -r backend plain tls < <(/usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" \
	-out "$work/cert.pem" -days 2 -subj /CN=localhost \
	-addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null

cat >"$work/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
error_log $work/nginx-error.log;
pid $work/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    server {
        listen 127.0.0.1:$backend;
        location / { return 200 "accelnet h2spec backend\n"; }
    }
}
EOF
# the body is longer than 5 bytes: h2spec's 6.9.2/2 (a negative window) skips itself on less
cat >"$work/proxy.yaml" <<EOF
workers: 1
listen:
  - address: 127.0.0.1:$plain
  - address: 127.0.0.1:$tls
    tls: {cert: $work/cert.pem, key: $work/key.pem}
pools:
  - name: p
    backends:
      - {address: 127.0.0.1:$backend}
EOF
nginx -c "$work/nginx.conf" -e "$work/nginx-error.log" &
pids+=($!)
build/accelnet proxy -c "$work/proxy.yaml" >"$work/proxy.log" 2>&1 &
pids+=($!)
for port in "$backend" "$plain" "$tls"; do
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		sleep 0.1
	done
done

mkdir -p "$out"
echo "h2spec $version ($src) against accelnet $(git describe --always --dirty 2>/dev/null)"
for mode in plain tls; do
	port=$plain flags=()
	[ $mode = tls ] && port=$tls flags=(-t -k)
	"$work/h2spec" "${flags[@]}" -h 127.0.0.1 -p "$port" -o 5 -j "$out/$mode.xml" "$@" \
		>"$out/$mode.txt" 2>&1 || true
	echo "$mode: $(tail -n 1 "$out/$mode.txt")"
done
kill -0 "${pids[1]}" 2>/dev/null || {
	echo "accelnet proxy exited during the run:" >&2
	tail -n 20 "$work/proxy.log" >&2
	exit 1
}

# the cases not passed, each either allowed (docs/benchmarks.md) or unexpected
/usr/bin/python3 - "$out" <<'EOF'
import sys
import xml.etree.ElementTree as ET

# (listener, h2spec package, case): the case fails here and the RFC allows what accelnet does
ALLOWED = {
    # a plain listener takes HTTP/1.1 as well as h2c with prior knowledge: bytes that are not
    # the preface are an HTTP/1.1 request, answered 400 and closed (RFC 9112 3, RFC 9113 3.3)
    ("plain", "http2/3.5", "Sends invalid connection preface"),
}
unexpected = 0
for mode in ("plain", "tls"):
    for case in ET.parse(f"{sys.argv[1]}/{mode}.xml").iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        key = (mode, case.get("package"), case.get("classname"))
        allowed = key in ALLOWED
        unexpected += not allowed
        print(f"{mode}: {key[1]} {key[2]}: {'allowed' if allowed else 'UNEXPECTED'}")
sys.exit(1 if unexpected else 0)
EOF
