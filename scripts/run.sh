#!/usr/bin/env bash
# run.sh — the quickstart: the gateway on its default configuration
# (triage.yaml, or CONFIG=...), with every loopback replica URL served by a
# simulated vLLM replica (`serve --sim`). Ctrl-C stops everything. Point the
# config's replica URLs at real vLLM servers and drop --sim to use real models.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/triage}
CONFIG=${CONFIG:-triage.yaml}
cat >&2 <<'MSG'
triage: gateway on http://127.0.0.1:8080; try:
  curl -si localhost:8080/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"auto","messages":[{"role":"user","content":"Why does my Python list comprehension raise a TypeError?"}]}'
MSG
exec "$BIN" serve --config "$CONFIG" --sim
