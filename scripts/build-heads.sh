#!/usr/bin/env bash
# build-heads.sh — the tier-1 table of the default heads (models/heads/subjects).
#
# The heads artifact (heads.json: classes, head, temperature, provenance,
# evaluation) is committed; its trained table is ~12 MB and is rebuilt
# here instead, by the same deterministic training that made it, from the
# labelled subjects dataset in ../shared (TRIAGE_SHARED). The result must hash
# to the sha256 heads.json records, or the script fails.
#
#   scripts/build-heads.sh            build var/models/tables/subjects-tier1.tbl if missing (fails
#                                     when it is missing and the labelled data is too)
#   scripts/build-heads.sh --retrain  retrain both tiers, recalibrate (floors for 0.9 precision
#                                     in every source of dev.jsonl) and rewrite models/heads/subjects
#                                     (commit the result). Tier 2 is trained on the encoder the
#                                     gateway runs, USE lite in int8 (var/models/use-int8, from
#                                     scripts/fetch-use.sh), with the ONNX Runtime (fetch-ort.sh).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
M=${TRIAGE_MODELS:-$REPO/var/models}
SHARED=${TRIAGE_SHARED:-$REPO/../shared}
DATA=$SHARED/datasets/subjects
HEADS=models/heads/subjects
export SOURCE_DATE_EPOCH=1704067200 # fixed: the artifact's bytes follow from its inputs only
say() { echo "build-heads: $*" >&2; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }
want=$(sed -n 's/.*"table_sha256": "\([0-9a-f]*\)".*/\1/p' "$HEADS/heads.json" 2>/dev/null | head -1 || true)
table="$M/tables/subjects-tier1.tbl"

if [ "${1:-}" != "--retrain" ] && [ -n "$want" ] && [ -f "$table" ] && [ "$(sha256 "$table")" = "$want" ]; then
  say "$table is there and verifies"
  exit 0
fi
missing=""
for f in train.jsonl dev.jsonl; do
  [ -f "$DATA/$f" ] || missing="$missing $f"
done
if [ -n "$missing" ]; then
  if [ -f "$table" ]; then
    say "$table is there but does not verify (its sha256 is not the $want $HEADS/heads.json records), and it cannot be rebuilt:"
  else
    say "$table is missing, and it cannot be built:"
  fi
  say "  the labelled data it is trained on is not there: no$missing in $DATA"
  if [ -n "${TRIAGE_SHARED:-}" ]; then
    say "  (TRIAGE_SHARED is $TRIAGE_SHARED)"
  else
    say "  (TRIAGE_SHARED is not set, so the shared material is looked for at ../shared beside the repository)"
  fi
  say "  set TRIAGE_SHARED to the directory that holds datasets/subjects/train.jsonl and dev.jsonl, and run setup again;"
  say "  without the table, the default heads cannot classify and the gateway refuses rules that use them"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say "training the default tier-1 heads on $DATA/train.jsonl into $table (deterministic; the training shows its progress and the time left)"
go run -tags nomsgpack ./cmd/triage train --data "$DATA/train.jsonl" --eval "$DATA/dev.jsonl" \
  --models "$M" --name subjects --out "$tmp/subjects" >&2
got=$(sha256 "$tmp/subjects/subjects-tier1.tbl")
mkdir -p "$M/tables"
if [ "${1:-}" = "--retrain" ]; then
  go build -tags 'nomsgpack ort' -o "$tmp/triage" ./cmd/triage
  "$tmp/triage" calibrate --heads "$tmp/subjects" --models "$M" --data "$DATA/dev.jsonl" \
    --group-by source --target-precision 0.9 --out "$tmp/calibrated" >&2
  say "training the tier-2 head on Universal Sentence Encoder lite (int8) embeddings (a few minutes the first time)"
  "$tmp/triage" train --tier 2 --data "$DATA/train.jsonl" --eval "$DATA/dev.jsonl" --models "$M" --encoder "$M/use-int8" \
    --out "$tmp/calibrated" >&2
  # Tier 2's temperature, fitted on the training hold-out, is kept: refitted on
  # dev it lowers the NLL there but raises the calibration error.
  "$tmp/triage" calibrate --tier 2 --temperature=false --heads "$tmp/calibrated" --models "$M" --data "$DATA/dev.jsonl" \
    --group-by source --target-precision 0.9 --out "$tmp/calibrated2" >&2
  mkdir -p "$HEADS"
  cp "$tmp/calibrated2/heads.json" "$HEADS/heads.json"
  say "rewrote $HEADS/heads.json (table sha256 $got); commit it"
elif [ "$got" != "$want" ]; then
  say "the trained table hashes to $got, $HEADS/heads.json records ${want:-nothing}:"
  say "the data, the base table or the training changed; run scripts/build-heads.sh --retrain and commit"
  exit 1
fi
cp "$tmp/subjects/subjects-tier1.tbl" "$table.tmp" && mv "$table.tmp" "$table"
say "built $table ($(wc -c <"$table") bytes, sha256 verified) in ${SECONDS}s"
