#!/usr/bin/env bash
# Mixed-traffic tier-2 benchmark: the gateway under three configs, side by
# side in alternating rounds, on the side-by-side harness's mock upstream,
# driven by bench/mixload with a body set of every distinct text of
# datasets/examples and ../shared/datasets/subjects/dev.jsonl (about
# 4,750, in a seeded order, generated at run time), so that tier 2 is
# consulted at its natural rate:
#
#   plain         bench/gateway.yaml: no rules, nothing classified
#   natural       bench/gateway-tier2.yaml: rules.yaml's decision, tier 2
#                 when tier 1 is unsure (13% of dev offline)
#   escalate-30   bench/gateway-tier2.yaml with rules-tier2-30.yaml: two
#                 classes require tier 2 (30% of the body set escalated)
#   all-escalate  bench/gateway-tier2-all.yaml: every class requires tier 2
#   remote-30     escalate-30 with tier 2 served by an encoder service in its
#                 own process (triage encode serve, tier2.encoder)
#   remote-all    all-escalate, tier 2 served by the encoder service
#   tier1-30      escalate-30 with tier 2's encoder at an address nothing
#                 answers: the breaker opens at once and escalations end on
#                 tier 1's verdict (tier2_encoder_down) without a call: the
#                 rules' cost to the gateway without tier 2's work
#
# The default CONFIGS are plain, natural and all-escalate;
# CONFIGS='plain escalate-30' runs the 30% load the mixed target names.
#
# Each config runs WARMUP + DUR seconds at each concurrency of CONCS, on a
# gateway started for that run (the binaries in turn, A and B swapping
# places every other round). The table gives throughput, answers tier 2
# decided per second, p50/p99/p99.9 of escalated and non-escalated
# requests apart, escalation, timeout and shed rates and the gateway's CPU
# per request (medians over rounds), then the targets, paired within
# rounds. It is printed and written to bench/results/<date>-mixed.md with
# the command line, and the run records to the .jsonl beside it.
#
#   bench/mixed.sh                                  # bin/triage, ROUNDS=3, DUR=10, c=64
#   DUR=3 ROUNDS=1 bench/mixed.sh                   # a smoke run
#   CONCS='8 64' CONFIGS='plain natural' bench/mixed.sh
#   GW_BIN_A=/tmp/before/bin/triage GW_BIN_B=bin/triage bench/mixed.sh   # before / after, paired per round
#   TIER2='cache: 4096' bench/mixed.sh              # tier2 keys set in both tier-2 rules files
#   GW_BIN_B=bin/triage TIER2_A='cache: 0' TIER2_B='cache: 4096' bench/mixed.sh   # one binary, two settings
#
# GW_BIN_A (default bin/triage, built by make build with tier 2) and
# GW_BIN_B (optional) are the binaries, labelled NAME_A and NAME_B (A, B);
# RATE makes the load an open loop: RATE requests a second started
# whatever the answers (CONCS is then the workers sending them), each
# timed from when it was due.
# HEADS_A or HEADS_B replaces the rules' heads directory for that arm (a
# binary from before a change with the heads of its own commit).
# TIER2, then TIER2_A or TIER2_B, set keys of the rules' tier2 mapping
# ('k: v, k: v'). The configs are copied into a scratch directory with
# absolute paths and the ports MOCK_PORT (18000) and GW_PORT (18010); model
# files come from TRIAGE_MODELS (default var/models). BODIES_FROM lists
# other JSONL files of texts to draw the bodies from. OUT names the
# results file.
# The remote configs start one encoder service for the whole run (ENC_BIN,
# default GW_BIN_A's binary; ENC_RUNS Runs at once, default 1; port
# ENC_PORT, 18020), pinned with taskset to the cores ENC_CPU names
# (default 1 on a machine of 2 cores or more); GW_CPU pins every gateway
# the same way (default: not pinned). The encoder's CPU, the texts it
# encoded and shed are recorded beside each remote run. The mock is the harness's own build (run
# ../shared/bench/run.sh once). Everything started here is stopped by pid.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "${TRIAGE_SHARED:-$repo/../shared}" && pwd) || { echo "mixed.sh: no ../shared (TRIAGE_SHARED names it)" >&2; exit 1; }
B=${BENCH_WORK:-/tmp/bench-work}/bin
[[ -x $B/mockupstream ]] || { echo "mixed.sh: $B/mockupstream missing: run $shared/bench/run.sh once" >&2; exit 1; }
dur=${DUR:-10}
warm=${WARMUP:-2}
rounds=${ROUNDS:-3}
concs=${CONCS:-64}
configs=${CONFIGS:-plain natural all-escalate}
mock_port=${MOCK_PORT:-18000}
enc_port=${ENC_PORT:-18020}
need_enc=
[[ " $configs " == *" remote-"* ]] && need_enc=1
gw_port=${GW_PORT:-18010}
models=${TRIAGE_MODELS:-$repo/var/models}
arms=("${NAME_A:-A}")
declare -A bin=(["${arms[0]}"]=${GW_BIN_A:-$repo/bin/triage})
declare -A tier2=(["${arms[0]}"]=${TIER2_A:-})
declare -A heads=(["${arms[0]}"]=${HEADS_A:-})
if [[ -n ${GW_BIN_B:-} ]]; then
	arms+=("${NAME_B:-B}")
	bin[${arms[1]}]=$GW_BIN_B
	tier2[${arms[1]}]=${TIER2_B:-}
	heads[${arms[1]}]=${HEADS_B:-}
fi
[[ ${arms[0]} != "${arms[1]:-}" ]] || { echo "mixed.sh: NAME_A and NAME_B are the same" >&2; exit 1; }
for a in "${arms[@]}"; do
	[[ -x ${bin[$a]} ]] || { echo "mixed.sh: ${bin[$a]} is not an executable (make build, or set GW_BIN_A/GW_BIN_B)" >&2; exit 1; }
done
gw_pin=()
[[ -n ${GW_CPU:-} ]] && gw_pin=(taskset -c "$GW_CPU")
enc_pin=()
enc_cpu=${ENC_CPU-}
[[ -z ${ENC_CPU+set} ]] && (( $(nproc) >= 2 )) && enc_cpu=1
[[ -n $enc_cpu ]] && enc_pin=(taskset -c "$enc_cpu")
for p in "$mock_port" "$gw_port" ${need_enc:+"$enc_port"}; do
	if ss -ltnH "sport = :$p" 2>/dev/null | grep -q .; then echo "mixed.sh: port $p is in use (MOCK_PORT, GW_PORT pick others)" >&2; exit 1; fi
done
date=$(date -u +%F)
out=${OUT:-$repo/bench/results/$date-mixed.md}
[[ -n ${OUT:-} || ! -e $out ]] || out=$repo/bench/results/$date-mixed-$(date -u +%H%M%S).md
work=$(mktemp -d)
mock='' gw='' enc=''
trap 'kill $gw $enc $mock 2>/dev/null || true; rm -rf "$work"' EXIT

# The command line, as it can be run again.
cmdline=
for v in DUR WARMUP ROUNDS CONCS CONFIGS ENC_BIN ENC_RUNS ENC_CPU GW_CPU GW_BIN_A GW_BIN_B NAME_A NAME_B TIER2 TIER2_A TIER2_B HEADS_A HEADS_B RATE BODIES_FROM MOCK_PORT GW_PORT OUT; do
	[[ -n ${!v+set} ]] && cmdline+="$v='${!v}' "
done
cmdline+="bench/mixed.sh"

(cd "$repo" && go build -o "$work/mixload" ./bench/mixload)
read -r -a from <<<"${BODIES_FROM:-$repo/datasets/examples/subjects.jsonl $shared/datasets/subjects/dev.jsonl}"
"$work/mixload" gen -out "$work/bodies.jsonl" "${from[@]}" 2>"$work/gen.txt"
cat "$work/gen.txt"

# tier2_set FILE 'k: v, ...': FILE with those keys set in its one-line
# tier2 mapping (added, or replaced where the file has them).
tier2_set() {
	awk -v extra="$2" '
	function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
	function add(list,   i, n, kv, k) {
		n = split(list, kv, ",")
		for (i = 1; i <= n; i++) {
			k = trim(substr(kv[i], 1, index(kv[i], ":") - 1))
			if (k == "") continue
			if (!(k in val)) key[++nk] = k
			val[k] = trim(substr(kv[i], index(kv[i], ":") + 1))
		}
	}
	/^tier2: *\{.*\} *$/ {
		s = $0; sub(/^tier2: *\{/, "", s); sub(/\} *$/, "", s)
		add(s); add(extra)
		line = "tier2: {"
		for (i = 1; i <= nk; i++) line = line (i > 1 ? ", " : "") key[i] ": " val[key[i]]
		print line "}"
		next
	}
	{ print }' "$1"
}

# config ARM CONFIG: write ARM's copy of CONFIG's gateway config (and
# rules) under $work, and print its path.
config() {
	local arm=$1 cfg=$2 dir=$work/$1-$2 src rules=
	case $cfg in
	plain) src=gateway.yaml ;;
	natural) src=gateway-tier2.yaml rules=rules-tier2.yaml ;;
	escalate-30) src=gateway-tier2.yaml rules=rules-tier2-30.yaml ;;
	all-escalate) src=gateway-tier2-all.yaml rules=rules-tier2-all.yaml ;;
	remote-30) src=gateway-tier2.yaml rules=rules-tier2-30.yaml ;;
	remote-all) src=gateway-tier2-all.yaml rules=rules-tier2-all.yaml ;;
	tier1-30) src=gateway-tier2.yaml rules=rules-tier2-30.yaml ;;
	*) echo "mixed.sh: unknown config $cfg (plain, natural, escalate-30, all-escalate, remote-30, remote-all, tier1-30)" >&2; return 1 ;;
	esac
	mkdir -p "$dir"
	sed -e "s#^listen: .*#listen: 127.0.0.1:$gw_port#" -e "s#127\.0\.0\.1:18000#127.0.0.1:$mock_port#" \
		-e "s#^rules: .*#rules: rules.yaml#" -e "s#^models_dir: .*#models_dir: $models#" "$repo/bench/$src" >"$dir/gateway.yaml"
	if [[ -n $rules ]]; then
		sed -e "s#^heads: \.\./#heads: $repo/#" "$repo/bench/$rules" >"$dir/rules.in"
		if [[ -n ${heads[$arm]} ]]; then
			sed -i -e "s#^heads: .*#heads: ${heads[$arm]}#" "$dir/rules.in"
		fi
		tier2_set "$dir/rules.in" "${TIER2:-}, ${tier2[$arm]}" >"$dir/rules.yaml"
		if [[ $cfg == remote-* ]]; then
			sed -i -e "s#^tier2: {#tier2: {encoder: {url: http://127.0.0.1:$enc_port, model: ${ENC_MODEL:-use-lite-int8}}, #" "$dir/rules.yaml"
		elif [[ $cfg == tier1-30 ]]; then
			# Port 9 (discard): nothing listens, every call is refused.
			sed -i -e "s#^tier2: {#tier2: {encoder: {url: http://127.0.0.1:9, model: ${ENC_MODEL:-use-lite-int8}, failures: 1, cooldown: 1h}, #" "$dir/rules.yaml"
		fi
	fi
	echo "$dir/gateway.yaml"
}

declare -A cfgfile=() budget=()
for a in "${arms[@]}"; do
	for c in $configs; do
		f=$(config "$a" "$c")
		cfgfile[$a/$c]=$f
		budget[$a/$c]=0s
		if [[ -f ${f%/*}/rules.yaml ]]; then
			budget[$a/$c]=$(grep '^tier2:' "${f%/*}/rules.yaml" | grep -o 'budget: *[0-9.a-z]*' | sed 's/budget: *//' || true)
			budget[$a/$c]=${budget[$a/$c]:-50ms}
		fi
		"${bin[$a]}" serve --config "$f" --check >/dev/null || { echo "mixed.sh: $a $c: the config does not load (${f%/*})" >&2; exit 1; }
	done
done

# start ARM CONFIG: start the gateway and wait until it is ready, with
# tier 2 loaded where the rules use it.
start() {
	local log=$work/$1-$2/gateway.log r
	"${gw_pin[@]}" "${bin[$1]}" serve --config "${cfgfile[$1/$2]}" >"$log" 2>&1 &
	gw=$!
	for _ in $(seq 300); do
		r=$(curl -s "http://127.0.0.1:$gw_port/readyz" || true)
		if [[ $r == *'"status":"ready"'* && ( $r != *'"tier2"'* || $r == *'"tier2":"loaded"'* || $r == *'"tier2":"off"'* ) ]]; then
			return 0
		fi
		if [[ $r == *'"tier2":"failed"'* ]] || ! kill -0 "$gw" 2>/dev/null; then break; fi
		sleep 0.2
	done
	echo "mixed.sh: $1 $2 did not become ready: $r" >&2
	tail -n 20 "$log" >&2
	return 1
}

stop() {
	kill "$gw" 2>/dev/null || true
	wait "$gw" 2>/dev/null || true
	gw=
}

"$B/mockupstream" -addr "127.0.0.1:$mock_port" -chunks 20 >/dev/null 2>&1 &
mock=$!
sleep 0.5
enc_args=()
if [[ -n $need_enc ]]; then
	"${enc_pin[@]}" "${ENC_BIN:-${bin[${arms[0]}]}}" encode serve --heads "$repo/models/heads/subjects" --models "$models" \
		--listen "127.0.0.1:$enc_port" --runs "${ENC_RUNS:-1}" >"$work/encoder.log" 2>&1 &
	enc=$!
	for _ in $(seq 150); do
		curl -sf "http://127.0.0.1:$enc_port/ready" >/dev/null && break
		kill -0 "$enc" 2>/dev/null || break
		sleep 0.2
	done
	curl -sf "http://127.0.0.1:$enc_port/ready" >/dev/null || { echo "mixed.sh: the encoder service did not become ready" >&2; cat "$work/encoder.log" >&2; exit 1; }
	enc_args=(-enc-pid "$enc" -enc-metrics "http://127.0.0.1:$enc_port/metrics")
fi
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
runs=$work/runs.jsonl
log=$work/runs.txt
for r in $(seq "$rounds"); do
	order=("${arms[@]}")
	if (( ${#arms[@]} == 2 && r % 2 == 0 )); then order=("${arms[1]}" "${arms[0]}"); fi
	for c in $configs; do
		for n in $concs; do
			for a in "${order[@]}"; do
				# A fresh gateway for each run, so each starts from the same
				# state: no Runs in flight, an empty result cache.
				start "$a" "$c"
				run_enc=()
				[[ $c == remote-* ]] && run_enc=("${enc_args[@]}")
				"$work/mixload" run -url "http://127.0.0.1:$gw_port/v1/chat/completions" -bodies "$work/bodies.jsonl" \
					-c "$n" ${RATE:+-rate "$RATE"} -d "${dur}s" -warmup "${warm}s" -gw-pid "$gw" -budget "${budget[$a/$c]}" \
					-arm "$a" -config "$c" -round "$r" -out "$runs" ${run_enc[@]+"${run_enc[@]}"} -brief | sed "s/^/round $r /" | tee -a "$log"
				stop
			done
		done
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$(dirname "$out")"
{
	echo "# Mixed-traffic tier-2 benchmark, $(date -u +'%F %H:%M') UTC"
	echo
	echo "Command: \`$cmdline\` ($(( $(date +%s) - t0 )) s)"
	echo
	echo "Machine: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), shared: the mock, the load generator and the gateway on the same cores; load average $load0 before, $load1 after."
	if [[ -n $need_enc ]]; then
		echo "Encoder service (remote configs): \`encode serve --runs ${ENC_RUNS:-1}\`${enc_cpu:+, pinned to CPU $enc_cpu (taskset)}${GW_CPU:+; gateways pinned to CPU $GW_CPU}; the mock and the load generator run where the kernel puts them."
	fi
	echo "Bodies: $(sed 's/^mixload gen: //' "$work/gen.txt"); the workers share one cursor, so a text comes back after all the others."
	echo "Each run: ${warm} s warm-up, ${dur} s measured, per concurrency ($concs), configs in turn ($configs), $rounds round(s)."
	for a in "${arms[@]}"; do
		t2=
		for c in $configs; do
			f=${cfgfile[$a/$c]%/*}/rules.yaml
			[[ -f $f ]] || continue
			# The first config's tier2 line; the remote and tier1-30 ones
			# differ from it by their encoder only, named below.
			line=$(grep -m1 '^tier2:' "$f")
			[[ $c == remote-* || $c == tier1-30 ]] && line=$(sed 's/encoder: {[^}]*}, //' <<<"$line")
			[[ -z $t2 ]] && t2=$line
		done
		echo "- $a: \`${bin[$a]}\` ($("${bin[$a]}" --version 2>/dev/null || echo '?'))${t2:+; rules \`$t2\`}${heads[$a]:+; heads \`${heads[$a]}\`}"
	done
	if [[ -n $need_enc || " $configs " == *" tier1-30 "* ]]; then
		echo "- remote configs: the rules' tier2 also has \`encoder: {url: http://127.0.0.1:$enc_port, model: ${ENC_MODEL:-use-lite-int8}}\`; tier1-30's \`encoder: {url: http://127.0.0.1:9, ..., failures: 1, cooldown: 1h}\` (nothing listens there)"
	fi
	echo
	"$work/mixload" table -in "$runs"
	echo
	echo "Runs:"
	echo
	echo '```'
	cat "$log"
	echo '```'
} | sed -e "s#$repo/##g" -e "s#$(dirname "$repo")/shared/#../shared/#g" >"$out"
cp "$runs" "${out%.md}.jsonl"
echo
cat "$out"
echo
echo "written: $out and ${out%.md}.jsonl"
