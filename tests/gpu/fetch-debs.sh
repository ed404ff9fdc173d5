#!/usr/bin/env bash
# On the development machine (Debian 12, network to Debian's archive): fetch
# the libnuma packages that tests/gpu/run.sh unpacks on a GPU machine that
# has no libnuma headers and no network.  They land in tests/gpu/debs/
# (ignored by git; pass it to the device run with carry).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/debs"
cd "$here/debs"
apt-get download libnuma1 libnuma-dev
ls -l
