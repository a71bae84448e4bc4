#!/usr/bin/env bash
# Install the Debian 12 packages accelnet needs to build, test and fuzz, if any is missing,
# plus any packages named as arguments (bench/run adds haproxy, gnuplot-nox and varnish).
# Run as root (or with sudo). Safe to run again: it installs nothing when all are present.
set -eu

PKGS="gcc make pkg-config libyaml-dev libssl-dev libcmocka-dev python3 curl wrk nginx-light
clang clang-format-14 libclang-rt-14-dev libxxhash-dev libjansson-dev libcrypt-dev apache2-utils
libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack libhiredis-dev redis-server
python3-cryptography python3-websockets prometheus xxd chromium
iproute2 strace util-linux testssl.sh libc-ares-dev dnsmasq-base libpcre2-dev
systemd man-db binutils adduser podman $*"

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
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
