#!/usr/bin/env bash
# Build the accelnet .deb from a built tree, with dpkg-deb alone (no debhelper):
#   scripts/build-deb.sh [BUILD_DIR (build)] [OUT_DIR (BUILD_DIR/deb)]
# It stages `make install PREFIX=/usr` (binary stripped, man pages gzipped as Debian wants),
# marks /etc/accelnet/accelnet.yaml a conffile (an operator's edits survive upgrades), adds
# maintainer scripts that create the system user `accelnet` and tell systemd about the units
# (installing starts nothing: `systemctl enable --now accelnet` does, docs/operations.md), and
# takes Depends from the libraries the binary links (dpkg -S). Prints the .deb's path.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/deb}
bin="$build/accelnet"
[ -x "$bin" ] || { echo "build-deb: no $bin: run make first" >&2; exit 2; }
command -v dpkg-deb >/dev/null || { echo "build-deb: dpkg-deb is missing (Debian package dpkg)" >&2; exit 2; }

version=$("$bin" version | awk '{print $2}')
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/accelnet_${version}_$arch"

san=0
case "$(basename "$build")" in build-san*) san=1 ;; esac # its own flags, or make relinks
make -s BUILD="$build" SAN=$san install DESTDIR="$root" PREFIX=/usr SYSCONFDIR=/etc >/dev/null
strip --strip-unneeded "$root/usr/bin/accelnet"
gzip -9n "$root/usr/share/man/man1/accelnet.1" "$root/usr/share/man/man5/accelnet.yaml.5"
chmod 0750 "$root/etc/accelnet"
chmod 0640 "$root/etc/accelnet/accelnet.yaml"

# Depends: the package of each library the binary names (NEEDED), found where ldd finds it
depends=$(
	for lib in $(objdump -p "$bin" | awk '/NEEDED/ {print $2}'); do
		path=$(ldd "$bin" | awk -v l="$lib" '$1 == l {print $3}')
		[ -n "$path" ] || continue
		dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null ||
			dpkg -S "/usr$path" 2>/dev/null || echo "build-deb: no package owns $path" >&2
	done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g'
)
depends="$depends, adduser"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)

mkdir -p "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<EOF
Package: accelnet
Version: $version
Architecture: $arch
Maintainer: accelnet developers <accelnet@localhost>
Installed-Size: $size
Depends: $depends
Section: net
Priority: optional
Description: network layer for accelerator clusters
 accelnet proxy is an HTTP reverse proxy and load balancer in front of
 accelerator-backed services (inference servers, GPU workers): admission
 queues, accelerator-aware balancing, token streaming, response cache, TLS,
 authentication, rate limits, metrics and a live dashboard. accelnet xfer moves
 large files over several parallel streams and links; accelnet sim is a
 simulated accelerator server.
EOF
echo /etc/accelnet/accelnet.yaml >"$root/DEBIAN/conffiles"

cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# accelnet postinst: the system user the unit runs as, owning what it must read or write.
set -e
if [ "$1" = configure ]; then
	if ! getent passwd accelnet >/dev/null; then
		adduser --system --group --no-create-home --home /nonexistent \
			--gecos "accelnet gateway" accelnet >/dev/null
	fi
	chown root:accelnet /etc/accelnet /etc/accelnet/accelnet.yaml
	chmod 0750 /etc/accelnet
	chmod 0640 /etc/accelnet/accelnet.yaml
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload >/dev/null || true
	fi
fi
exit 0
EOF
cat >"$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# accelnet prerm: stop the service (it drains) before its files go.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop accelnet.socket accelnet.service >/dev/null 2>&1 || true
fi
exit 0
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# accelnet postrm: purge takes the logs and state; the user stays (Debian's habit: files
# it owned elsewhere would otherwise be left to a recycled uid).
set -e
if [ "$1" = purge ]; then
	rm -rf /var/log/accelnet /var/lib/accelnet
	rmdir /etc/accelnet 2>/dev/null || true
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/accelnet_${version}_$arch.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
