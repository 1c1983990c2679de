#!/usr/bin/env bash
# install-helm.sh builds helm into var/bin/helm from the Go module proxy,
# pinned, for the chart's tests (deploy/deploy_test.go, which render
# deploy/helm/triage with it and fail when it is missing). Idempotent: it
# does nothing when var/bin/helm is already that version (as the binary's
# own build information says: `helm version` reports only v3.22).
#
# Compiling helm is the slow part: 2.5 to 4 minutes of CPU, which took 4.5
# to 7 minutes on this project's 2-core machine while other builds shared
# its cores (three builds, module downloads included in one, 2026-12-01).
# Once built it is kept in var/bin, and later runs of make test skip it.
set -euo pipefail
cd "$(dirname "$0")/.."

want=v3.22.0
bin=$PWD/var/bin/helm

# have: the helm module version var/bin/helm was built from ("" if none).
have() { { go version -m "$bin" 2>/dev/null || true; } | awk '$1 == "mod" && $2 == "helm.sh/helm/v3" { print $3 }'; }

if [ -x "$bin" ] && [ "$(have)" = "$want" ]; then
	echo "install-helm: helm $want already at var/bin/helm"
	exit 0
fi

if [ -e "$bin" ]; then
	cur=$(have)
	echo "install-helm: var/bin/helm is helm ${cur:-of unknown version}, not $want: building $want"
fi
echo "install-helm: building helm $want from the Go module proxy into var/bin (a few minutes on 2 cores)"
start=$SECONDS
mkdir -p var/bin
# Pure Go, so the binary depends on nothing on the machine.
GOBIN=$PWD/var/bin CGO_ENABLED=0 go install "helm.sh/helm/v3/cmd/helm@$want"
if [ "$(have)" != "$want" ]; then
	echo "install-helm: var/bin/helm is not helm $want after the build" >&2
	exit 1
fi
echo "install-helm: helm $want at var/bin/helm in $((SECONDS - start))s"
