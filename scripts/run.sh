#!/usr/bin/env bash
# run.sh — the quickstart: the gateway on its default configuration
# (triage.yaml, or CONFIG=...), with every loopback replica URL served by a
# simulated vLLM replica (`serve --sim`). PORT=8081 serves the gateway on
# 127.0.0.1:8081 instead of the config's listen address. The gateway says
# where it listens once it does, with a request to try. Ctrl-C stops
# everything. Point the config's replica URLs at real vLLM servers and drop
# --sim to use real models.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/triage}
CONFIG=${CONFIG:-triage.yaml}
args=(serve --config "$CONFIG" --sim)
if [ -n "${PORT:-}" ]; then
  case "$PORT" in
    *[!0-9]*) echo "run: PORT=$PORT is not a port number (PORT=8081 make run)" >&2; exit 2 ;;
  esac
  if [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then
    echo "run: PORT=$PORT is not a port number from 1 to 65535" >&2
    exit 2
  fi
  args+=(--listen "127.0.0.1:$PORT")
fi
exec "$BIN" "${args[@]}"
