#!/usr/bin/env bash
# Build accelnet (installing what building and running it needs, and no more: the tests'
# packages are scripts/test.sh's) and start `accelnet demo`. Ctrl-C stops it.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh --demo
make -j"$(nproc)" >/dev/null
exec build/accelnet demo
