#!/usr/bin/env bash
# Capacity of the encoder service: how many texts a second one core of
# `triage encode serve` encodes, at the lengths tier 2 sees. One encoder
# process pinned to one core (ENC_CPU, default 1; --runs 1), driven closed
# loop by `mixload embed` pinned to another (LOAD_CPU, default 0) with
# texts of ../shared/datasets/subjects/dev.jsonl: all of them (typical),
# the short ones (at most 80 bytes) and the long ones (at least 600 bytes,
# which reach USE lite's 128-token cap), one text a request (the
# gateway's calls carry 1 to 8) and 8.
#
# The figure that sizing divides by is texts per core-second: texts
# encoded over the encoder's CPU-seconds (utime + stime from /proc), which
# holds on a shared machine where wall-clock texts/s is whatever core
# share the encoder got. Latency at c=1 is a lone text's; at c=8 it
# includes the queue.
#
#   bench/encoder.sh                       # ROUNDS=3, DUR=10
#   DUR=3 ROUNDS=1 bench/encoder.sh        # a smoke run
#
# ENC_BIN (default bin/triage, built with tier 2), ENC_PORT (18030), OUT
# (default bench/results/<date>-encoder-capacity.md). Everything started
# here is stopped by pid.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "${TRIAGE_SHARED:-$repo/../shared}" && pwd) || { echo "encoder.sh: no ../shared (TRIAGE_SHARED names it)" >&2; exit 1; }
bin=${ENC_BIN:-$repo/bin/triage}
port=${ENC_PORT:-18030}
dur=${DUR:-10}
rounds=${ROUNDS:-3}
enc_cpu=${ENC_CPU:-1}
load_cpu=${LOAD_CPU:-0}
models=${TRIAGE_MODELS:-$repo/var/models}
date=$(date -u +%F)
out=${OUT:-$repo/bench/results/$date-encoder-capacity.md}
[[ -x $bin ]] || { echo "encoder.sh: $bin is not an executable (make build)" >&2; exit 1; }
if ss -ltnH "sport = :$port" 2>/dev/null | grep -q .; then echo "encoder.sh: port $port is in use (ENC_PORT picks another)" >&2; exit 1; fi
work=$(mktemp -d)
enc=''
trap 'kill $enc 2>/dev/null || true; rm -rf "$work"' EXIT

cmdline=
for v in DUR ROUNDS ENC_BIN ENC_CPU LOAD_CPU ENC_PORT OUT; do
	[[ -n ${!v+set} ]] && cmdline+="$v='${!v}' "
done
cmdline+="bench/encoder.sh"

(cd "$repo" && go build -o "$work/mixload" ./bench/mixload)
taskset -c "$enc_cpu" "$bin" encode serve --heads "$repo/models/heads/subjects" --models "$models" --listen "127.0.0.1:$port" --runs 1 >"$work/encoder.log" 2>&1 &
enc=$!
for _ in $(seq 150); do
	curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
	kill -0 "$enc" 2>/dev/null || break
	sleep 0.2
done
curl -sf "http://127.0.0.1:$port/ready" >/dev/null || { echo "encoder.sh: encode serve did not become ready" >&2; cat "$work/encoder.log" >&2; exit 1; }

dev=$shared/datasets/subjects/dev.jsonl
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
runs=$work/runs.txt
for r in $(seq "$rounds"); do
	for set in "typical:0:0" "short:0:80" "long:600:0"; do
		IFS=: read -r name lo hi <<<"$set"
		for cb in "1 1" "8 1" "8 8"; do
			read -r c b <<<"$cb"
			taskset -c "$load_cpu" "$work/mixload" embed -url "http://127.0.0.1:$port/v1/embeddings" -texts "$dev" -min-bytes "$lo" -max-bytes "$hi" \
				-c "$c" -batch "$b" -d "${dur}s" -warmup 1s -enc-pid "$enc" -label "round $r $name" | tee -a "$runs"
		done
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
rss=$(awk '/VmHWM/ {print int($2/1024)}' "/proc/$enc/status")

mkdir -p "$(dirname "$out")"
{
	echo "# Encoder service capacity, $(date -u +'%F %H:%M') UTC"
	echo
	echo "Command: \`$cmdline\` ($(( $(date +%s) - t0 )) s)"
	echo
	echo "Machine: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), shared with other work; load average $load0 before, $load1 after."
	echo "Encoder: \`$("$bin" --version) encode serve --heads models/heads/subjects --runs 1\` (USE lite int8, 512 dims, 128 tokens at most) pinned to CPU $enc_cpu; \`mixload embed\` pinned to CPU $load_cpu; peak RSS ${rss} MiB."
	echo "Texts from ../shared/datasets/subjects/dev.jsonl: typical (all), short (at most 80 bytes), long (at least 600 bytes); \`c\` workers, \`batch\` texts a request, ${dur} s a run, $rounds round(s)."
	echo
	echo "Medians over rounds. texts per core-second = texts encoded / the encoder's CPU-seconds."
	echo
	echo "| texts | c | batch | tokens a text | texts/s | encoder cores | texts per core-second | request p50 / p99 ms |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	awk '
	function med(s,   n, a, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	{
		name = $3; sub(/^c=/, "", $4); c = $4; split($5, bb, "="); b = bb[2]; sub(/:$/, "", b)
		k = name " " c " " b
		if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
		match($0, /[0-9.]+ texts\/s/); tps[k] = tps[k] " " substr($0, RSTART, RLENGTH - 8)
		match($0, /[0-9.]+ tokens a text/); tok[k] = tok[k] " " substr($0, RSTART, RLENGTH - 14)
		match($0, /p50\/p99 [0-9.]+ \/ [0-9.]+/); split(substr($0, RSTART + 8, RLENGTH - 8), pp, " / "); p50[k] = p50[k] " " pp[1]; p99[k] = p99[k] " " pp[2]
		match($0, /encoder [0-9.]+ cores/); cores[k] = cores[k] " " substr($0, RSTART + 8, RLENGTH - 14)
		match($0, /[0-9.]+ texts per core-second/); tpc[k] = tpc[k] " " substr($0, RSTART, RLENGTH - 22)
	}
	END {
		for (i = 1; i <= nk; i++) { k = keys[i]; split(k, f, " ")
			printf "| %s | %s | %s | %.1f | %.0f | %.2f | %.0f | %.2f / %.2f |\n", f[1], f[2], f[3], med(tok[k]), med(tps[k]), med(cores[k]), med(tpc[k]), med(p50[k]), med(p99[k]) }
	}' "$runs"
	echo
	echo "Runs:"
	echo
	echo '```'
	cat "$runs"
	echo '```'
} | sed -e "s#$repo/##g" >"$out"
echo
cat "$out"
echo "written: $out"
