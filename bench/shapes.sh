#!/usr/bin/env bash
# The same request as a chat completion and as an Anthropic Messages
# request, through one gateway, on the side-by-side harness's mock upstream:
# each round sends, in turn, 5 s of chat non-streaming, Messages
# non-streaming, chat streaming (20 chunks) and Messages streaming, with wrk
# at c=64, and prints requests per second and the gateway's CPU per
# request. The Messages rows are translated both ways (the request to chat,
# the answer or stream back, event by event); the ratio of each pair is the
# cost of translation at load.
#
#   bench/shapes.sh ROUNDS ['GATEWAY CMD']
#
# The command must serve on 127.0.0.1:18010 (default: bin/triage serve
# --config bench/gateway.yaml). The harness's binaries come from its own
# build (run ../shared/bench/run.sh once).
set -euo pipefail
rounds=${1:-3}
cmd=${2:-bin/triage serve --config bench/gateway.yaml}
shared=${TRIAGE_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared}
B=${BENCH_WORK:-/tmp/bench-work}/bin
[[ -x $B/loadgen && -x $B/mockupstream ]] || { echo "shapes.sh: $B/loadgen missing: run $shared/bench/run.sh once" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill $mock $gw 2>/dev/null; rm -rf "$dir"' EXIT
for s in false true; do
	echo '{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":64,"temperature":0,"stream":'$s'}' >"$dir/chat-$s.json"
	echo '{"model":"gpt-4o-mini","system":"You are a helpful assistant.","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":64,"temperature":0,"stream":'$s'}' >"$dir/messages-$s.json"
done
"$B/mockupstream" -addr 127.0.0.1:18000 -chunks 20 >/dev/null 2>&1 &
mock=$!
bash -c "exec $cmd" >/dev/null 2>&1 &
gw=$!
sleep 1
pick() { grep -o '"rps":[0-9.]*\|"gw_cpu_us_per_req":[0-9.]*\|"errors":[0-9]*' | tr '\n' ' '; }
load() { # body-file path duration
	"$B/loadgen" wrk -body "$1" -lua "$shared/bench/conf/wrk-post.lua" -url "http://127.0.0.1:18010$2" -c 64 -d "$3" -gw-pid $gw 2>/dev/null
}
# Each answer checked once, so a broken translation cannot pass for a fast one.
curl -sf http://127.0.0.1:18010/v1/messages -d @"$dir/messages-false.json" | grep -q '"type":"message"' || { echo "shapes.sh: /v1/messages did not answer a message" >&2; exit 1; }
curl -sfN http://127.0.0.1:18010/v1/messages -d @"$dir/messages-true.json" | grep -q 'event: message_stop' || { echo "shapes.sh: /v1/messages did not stream to message_stop" >&2; exit 1; }
for s in false true; do
	load "$dir/chat-$s.json" /v1/chat/completions 1s >/dev/null || true
	load "$dir/messages-$s.json" /v1/messages 1s >/dev/null || true
done
for r in $(seq "$rounds"); do
	for s in false true; do
		mode=non-streaming
		[[ $s == true ]] && mode=streaming
		chat=$(load "$dir/chat-$s.json" /v1/chat/completions 5s | pick)
		msgs=$(load "$dir/messages-$s.json" /v1/messages 5s | pick)
		echo "round $r $mode: chat $chat | messages $msgs"
	done
done
