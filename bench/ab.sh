#!/usr/bin/env bash
# Paired A/B of gateway commands: each round runs every command in turn on
# the side-by-side harness's mock upstream and load generator, 5 s
# non-streaming (wrk, c=64) and 5 s streaming (loadgen, c=64), and prints
# throughput and the gateway's CPU per request. Alternating rounds pair the
# commands under the same machine state, which separate harness runs do not.
#
#   bench/ab.sh ROUNDS 'CMD A' 'CMD B' ...
#   bench/ab.sh 3 '/tmp/triage-before serve --config bench/gateway.yaml' 'bin/triage serve --config bench/gateway.yaml'
#
# Each command must serve on 127.0.0.1:18010 (the bench configs do). The
# harness's binaries come from its own build (run ../shared/bench/run.sh
# once); HDR adds request headers (one a line), BODY the non-streaming body
# file.
set -euo pipefail
rounds=$1
shift
shared=${TRIAGE_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared}
B=${BENCH_WORK:-/tmp/bench-work}/bin
[[ -x $B/loadgen && -x $B/mockupstream ]] || { echo "ab.sh: $B/loadgen missing: run $shared/bench/run.sh once" >&2; exit 1; }
body=${BODY:-$(mktemp)}
[[ -n ${BODY:-} ]] || echo '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":64}' > "$body"
hdr=()
while IFS= read -r h; do
	[[ -n $h ]] && hdr+=(-H "$h")
done <<<"${HDR:-}"
"$B/mockupstream" -addr 127.0.0.1:18000 -chunks 20 -paced-delay 5ms >/dev/null 2>&1 &
mock=$!
trap 'kill $mock 2>/dev/null' EXIT
sleep 0.5
pick() { grep -o '"rps":[0-9.]*\|"gw_cpu_us_per_req":[0-9.]*\|"errors":[0-9]*' | tr '\n' ' '; }
for r in $(seq "$rounds"); do
	for cmd in "$@"; do
		bash -c "exec $cmd" >/dev/null 2>&1 &
		gw=$!
		sleep 1
		"$B/loadgen" wrk -body "$body" -lua "$shared/bench/conf/wrk-post.lua" -url http://127.0.0.1:18010/v1/chat/completions -c 64 -d 1s "${hdr[@]}" >/dev/null 2>&1 || true
		ns=$("$B/loadgen" wrk -body "$body" -lua "$shared/bench/conf/wrk-post.lua" -url http://127.0.0.1:18010/v1/chat/completions -c 64 -d 5s -gw-pid $gw "${hdr[@]}" 2>/dev/null | pick)
		st=$("$B/loadgen" run -stream -url http://127.0.0.1:18010/v1/chat/completions -c 64 -d 5s -gw-pid $gw "${hdr[@]}" 2>/dev/null | pick)
		echo "round $r [$cmd]: non-streaming $ns | streaming $st"
		kill $gw
		wait $gw 2>/dev/null || true
	done
done
