#!/usr/bin/env bash
# Install the Debian 12 packages accelnet needs, if any is missing, plus any packages named as
# arguments (bench/run adds haproxy, gnuplot-nox and varnish). Two sets:
#   scripts/deps.sh --demo [PKG...]   what building accelnet and running `accelnet demo` and
#                                     the README's tour need (scripts/demo.sh)
#   scripts/deps.sh [PKG...]          that, and what the tests run: clang and the fuzzers'
#                                     runtime, cmocka, nginx, wrk, Redis, Prometheus, Chromium,
#                                     Podman, testssl... (scripts/test.sh)
# Run as root (or with sudo). Safe to run again: it installs nothing when all are present.
# Another apt or dpkg holding the lock (an unattended upgrade) is waited for, up to
# ACCELNET_APT_LOCK_WAIT seconds (default 600), not failed on.
set -eu

# building and running: the compilers (C, and C++ for src/tok/spm_shim.cc), pkg-config and
# the libraries of the Makefile's PKGS and libsentencepiece (SentencePiece model files),
# xxd (scripts/embed-assets.sh), python3 (the layering check), curl (the README's tour)
BUILD_PKGS="gcc make pkg-config libyaml-dev libssl-dev libxxhash-dev libjansson-dev
libcrypt-dev libzmq3-dev libmsgpack-dev libc-ares-dev libhiredis-dev libpcre2-dev libnghttp2-dev xxd python3
curl libutf8proc-dev liburing-dev g++ libsentencepiece-dev"
# testing and fuzzing
TEST_PKGS="libcmocka-dev wrk nginx-light clang clang-format-14 libclang-rt-14-dev apache2-utils
python3-zmq python3-msgpack redis-server python3-cryptography python3-websockets prometheus
chromium iproute2 strace util-linux testssl.sh dnsmasq-base systemd man-db binutils adduser
podman python3-yaml nghttp2-client python3-h2 python3-grpcio python3-httpx
sentencepiece"  # spm_train, spm_encode, spm_decode: test_tokenize's SentencePiece model
# scripts/test.sh's compiles go through ccache (a second run on the same machine recompiles only
# what changed)
TEST_PKGS="$TEST_PKGS ccache"
# the tokenizer's conformance test fetches its reference (Hugging Face's tokenizers) with npm;
# a nodejs from NodeSource carries its own npm, Debian's does not
TEST_PKGS="$TEST_PKGS nodejs"
# the chat formats' test also renders the templates' refusals with Python's jinja2 (the engines')
TEST_PKGS="$TEST_PKGS python3-jinja2"
command -v npm >/dev/null 2>&1 || TEST_PKGS="$TEST_PKGS npm"

PKGS="$BUILD_PKGS $TEST_PKGS"
if [ "${1:-}" = --demo ]; then
	shift
	PKGS=$BUILD_PKGS
fi
PKGS="$PKGS $*"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "installing:$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# packaged services (nginx) must not start on their own: the tests start their own
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
	$SUDO chmod +x /usr/sbin/policy-rc.d
	trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
lock="DPkg::Lock::Timeout=${ACCELNET_APT_LOCK_WAIT:-600}"
$SUDO apt-get -o "$lock" update -qq
# shellcheck disable=SC2086
$SUDO apt-get -o "$lock" install -y -qq --no-install-recommends $missing >/dev/null
