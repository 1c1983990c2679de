#!/bin/sh
# Calibrating on your own traffic, tried as a new user would: one source of
# subjects/dev.jsonl is held out as "the user's traffic"; N of its rows,
# drawn with a seed, are the user's labels, the rest of it judges. The
# floors are fitted (1) on the other sources alone, pooled, as the
# README's calibrate command fits dev, (2) the same chosen on held-out
# sources (--group-by source), and (3) on the user's labels leaning on the
# other sources (--prior); each is measured on the rest of the held-out
# source, beside the shipped floors (fitted on all of dev, the held-out
# source included).
#
#   bench/own-traffic.sh [SOURCE] [SEED] [N] [TARGET] [MAX_ESCALATION]
#   bench/own-traffic.sh reddit_selfposts 1 300 0.93 0.3
#
# Needs bin/triage (make build), python3 and TRIAGE_SHARED (default
# ../shared). Writes its files under $OUT (default a new temporary
# directory), never into the repository. Takes about 3 minutes.
set -eu
src=${1:-reddit_selfposts} seed=${2:-1} n=${3:-300} target=${4:-0.93} cap=${5:-0.3}
shared=${TRIAGE_SHARED:-../shared}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
rules=examples/subjects/rules.yaml config=examples/subjects/triage.yaml

python3 - "$shared/datasets/subjects/dev.jsonl" "$src" "$seed" "$n" "$out" <<'PY'
import json, random, sys
dev, src, seed, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows = [json.loads(l) for l in open(dev)]
held = [r for r in rows if r["source"] == src]
if len(held) <= n:
    sys.exit(f"{src}: {len(held)} rows, not more than {n}")
idx = list(range(len(held)))
random.Random(seed).shuffle(idx)
own = sorted(idx[:n])
for name, rs in (("labels.jsonl", [held[i] for i in own]),
                 ("rest.jsonl", [held[i] for i in sorted(idx[n:])]),
                 ("prior.jsonl", [r for r in rows if r["source"] != src])):
    with open(f"{out}/{name}", "w") as f:
        for r in rs:
            f.write(json.dumps(r) + "\n")
PY

# apply SNIPPET OUT: a copy of the rules with the floors and tier-2
# settings of a calibrate --diff snippet (what a person does by hand).
apply() {
	python3 - "$rules" "$1" "$2" <<'PY'
import os, re, sys
rules, snip, out = sys.argv[1:4]
src, d = open(rules).read(), open(snip).read()
t2 = re.search(r"^tier2: \{escalate_at: ([0-9.]+), mix: ([0-9.]+), fallback_floor: ([0-9.]+)\}", d, re.M)
for key, v in zip(("escalate_at", "mix", "fallback_floor"), t2.groups()):
    src = re.sub(key + r": [0-9.]+", f"{key}: {v}", src)
for m in re.finditer(r"\{name: (\S+), floors: \{tier1: ([0-9.]+), tier2: ([0-9.]+)\}\}", d):
    src = re.sub(r"(\{name: " + re.escape(m[1]) + r",.*?floors: \{tier1: )[0-9.]+(, tier2: )[0-9.]+",
                 lambda x: x[1] + m[2] + x[2] + m[3], src)
heads = re.search(r"^heads: (\S+)", src, re.M)[1]
src = src.replace("heads: " + heads, "heads: " + os.path.abspath(os.path.join(os.path.dirname(rules), heads)))
open(out, "w").write(src)
PY
}

fit="--rules $rules --config $config --target-precision $target --max-escalation $cap --diff"
bin/triage calibrate $fit --data "$out/prior.jsonl" >"$out/pooled.diff" 2>/dev/null
bin/triage calibrate $fit --data "$out/prior.jsonl" --group-by source >"$out/by-source.diff" 2>/dev/null
bin/triage calibrate $fit --data "$out/labels.jsonl" --prior "$out/prior.jsonl" >"$out/own.diff" 2>/dev/null
apply "$out/pooled.diff" "$out/pooled.yaml"
apply "$out/by-source.diff" "$out/by-source.yaml"
apply "$out/own.diff" "$out/own.yaml"

echo "held out: $src ($(wc -l <"$out/labels.jsonl") labels, seed $seed; judged on the other $(wc -l <"$out/rest.jsonl") rows); target $target, escalation cap $cap; files in $out"
printf '%-58s %9s %15s %9s %9s\n' floors "route prec" "95% interval" escalated accuracy
for f in "shipped (all of dev, $src included):$rules" \
	"dev without $src, pooled:$out/pooled.yaml" \
	"dev without $src, --group-by source:$out/by-source.yaml" \
	"$n labels --prior dev without $src:$out/own.yaml"; do
	name=${f%%:*} file=${f#*:}
	bin/triage eval --rules "$file" --config $config --data "$out/rest.jsonl" --json 2>/dev/null |
		python3 -c 'import json,sys; r=json.load(sys.stdin); ci=r["route_precision_ci"]
print("%-58s %9.3f %7.3f-%.3f %8.1f%% %9.3f" % (sys.argv[1], r["route_precision"], ci["lo"], ci["hi"], 100*r["escalation_rate"], r["accuracy"]))' "$name"
done
