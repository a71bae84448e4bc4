#!/usr/bin/env bash
# Build accelnet (installing what it needs) and start `accelnet demo`. Ctrl-C stops it.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
make -j"$(nproc)" >/dev/null
exec build/accelnet demo
