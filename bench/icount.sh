#!/usr/bin/env bash
# Instructions per benchmark op, counted by callgrind: deterministic where
# wall time on this shared machine is not. The count is the difference
# between two runs of N1 and N2 ops, divided by N2 - N1, so start-up and
# the benchmark's set-up cancel. GC is off and one P runs, so two runs
# of the same binary agree to about 0.5%.
#
#   bench/icount.sh PKG BENCH N1 N2 [TESTBIN]
#   bench/icount.sh ./cmd/triage 'ServePath/plain$' 1000 3000
#   bench/icount.sh ./router 'LogLine$' 10000 30000
#
# TESTBIN reuses a test binary built earlier (go test -c), e.g. to count a
# commit before a change against the one after it. Needs valgrind
# (apt-get install valgrind). --fair-sched=yes: without it, a run of the
# serve path now and then stalls under valgrind's thread lock.
# cpu.rdtscp=off: the runtime reads the clock with RDTSCP when a lock is
# contended, which this valgrind (3.19) answers with SIGILL; without it most
# runs of ServePath/tier1 died that way. (golang.org/x/sys/cpu prints that
# it does not know the option; the runtime does.)
set -euo pipefail
pkg=$1 re=$2 n1=$3 n2=$4 bin=${5:-}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "icount.sh: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
if [[ -z $bin ]]; then
	bin=$(mktemp)
	trap 'rm -f "$bin"' EXIT
	(cd "$root" && go test -c -o "$bin" "$pkg")
fi
count() {
	local out v try
	for try in 1 2 3 4 5; do
		out=$(cd "$root/$pkg" && GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off timeout 300 \
			valgrind --fair-sched=yes --tool=callgrind --callgrind-out-file=/dev/null \
			"$bin" -test.run '^$' -test.bench "$re" -test.benchtime="${1}x" 2>&1) || true
		v=$(awk '/Collected/ {print $4}' <<<"$out")
		# A run that did not finish its ops (a benchmark that failed under
		# valgrind) still reports a count: only one with its result line,
		# and no FAIL, is kept.
		if [[ -n $v ]] && grep -Eq "^Benchmark[^[:space:]]*[[:space:]]+${1}[[:space:]]" <<<"$out" && ! grep -q "^--- FAIL\|^FAIL" <<<"$out"; then
			echo "$v"
			return
		fi
	done
	echo "icount.sh: no count for $1 ops" >&2
	exit 1
}
a=$(count "$n1")
b=$(count "$n2")
echo "$re: $(((b - a) / (n2 - n1))) instructions/op ($n1 ops: $a, $n2 ops: $b)"
