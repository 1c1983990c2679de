#!/usr/bin/env bash
# install-test-deps.sh installs what make test needs beside Go and the
# model files, one after another (apt holds one lock): Chromium (the HTML
# reports' render tests), redis-server (the shared limits' tests), nginx
# (the scale-out test), helm (the chart's tests), and the Debian packages
# the container image is assembled from (deploy/image's test; exit 3 from
# fetch-image-base.sh means a pin left Debian's mirror, and that test says
# so and skips). It is mostly downloads, so make test runs it beside
# setup's CPU-bound model build rather than after it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-chromium.sh
bash scripts/install-redis.sh
bash scripts/install-nginx.sh
bash scripts/install-helm.sh
rc=0
bash scripts/fetch-image-base.sh || rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
	exit "$rc"
fi
