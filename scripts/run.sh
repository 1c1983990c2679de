#!/usr/bin/env bash
# run.sh — the quickstart: four `triage sim` replicas standing in for vLLM
# servers (the pools of triage.yaml), and the gateway in front of them.
# Ctrl-C stops everything. Point triage.yaml at real vLLM URLs to use real
# models; the gateway alone is `bin/triage serve --config triage.yaml`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/triage}
CONFIG=${CONFIG:-triage.yaml}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

sim() { # sim PORT MODEL NAME
  "$BIN" sim --listen "127.0.0.1:$1" --model "$2" --name "$3" --latency 150ms --chunk-delay 25ms \
    2> >(sed "s/^/[sim $3] /" >&2) &
  pids+=($!)
}
sim 9001 llama-3.1-8b-instruct general-0
sim 9002 llama-3.1-8b-instruct general-1
sim 9003 qwen2.5-coder-7b-instruct code-0
sim 9004 saul-7b-instruct legal-0

echo "triage: gateway on http://127.0.0.1:8080 (config $CONFIG); try:" >&2
cat >&2 <<'MSG'
  curl -s localhost:8080/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello!"}]}'
MSG
"$BIN" serve --config "$CONFIG" &
pids+=($!)
wait "${pids[-1]}"
