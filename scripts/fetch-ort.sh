#!/usr/bin/env bash
# fetch-ort.sh — the ONNX Runtime shared library that the classifier's tier 2
# (package classifier/onnx, build tag `ort`) loads at run time, from the npm
# registry only, pinned by sha256. Safe to run again: a library that is there
# and verifies is kept.
#
# Into ${TRIAGE_MODELS:-<repo>/var/models}:
#   cache/onnxruntime-node-1.24.3.tgz  the npm package onnxruntime-node@1.24.3 (MIT), via
#                                      npm pack: `npm install` would run its install script,
#                                      which downloads CUDA libraries
#   ort/libonnxruntime.so.1            ONNX Runtime 1.24.3, CPU, linux/x64, taken from the
#                                      package's bin/napi-v6/linux/x64/ (35 MB)
#
# The tarball (86 MB) is kept in cache/ only while the library is extracted;
# it is removed once the library verifies.
#
# The library is prebuilt for linux/x64 only here. On any other platform this
# script says how to provide one (TRIAGE_ORT_LIB) and exits 0: the gateway
# runs without tier 2, and `go test -tags ort` skips what needs the runtime.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
M=${TRIAGE_MODELS:-$REPO/var/models}

ORT_VERSION=1.24.3
ORT_PACKAGE=onnxruntime-node@$ORT_VERSION
ORT_TGZ=onnxruntime-node-$ORT_VERSION.tgz
ORT_TGZ_SHA256=aa1bb5fa261ea68de05dd53efbba210cd7adf2d2850f4c3a201054c74cc78040
ORT_TGZ_BYTES=85987774
ORT_MEMBER=package/bin/napi-v6/linux/x64/libonnxruntime.so.1
ORT_LIB_SHA256=92ba8e44d31b80a34f5e805076a044122c3be1fffe0d88ed790de7267b0b2682

say() { echo "fetch-ort: $*" >&2; }
. "$REPO/scripts/lib.sh"

os=$(uname -s)
arch=$(uname -m)
if [ "$os" != Linux ] || { [ "$arch" != x86_64 ] && [ "$arch" != amd64 ]; }; then
  say "no pinned ONNX Runtime library for $os/$arch; tier 2 needs one (>= 1.24, API level 24)."
  say "Download ONNX Runtime $ORT_VERSION for your platform from https://github.com/microsoft/onnxruntime/releases"
  say "(or take it from the npm package $ORT_PACKAGE, bin/napi-v6/<os>/<arch>/) and set"
  say "TRIAGE_ORT_LIB to the library's path (libonnxruntime.so / .dylib / onnxruntime.dll)."
  exit 0
fi

lib="$M/ort/libonnxruntime.so.1"
if verified "$lib" "$ORT_LIB_SHA256"; then
  say "library: $lib is there and verifies"
  exit 0
fi

mkdir -p "$M/ort" "$M/cache"
start=$SECONDS
tgz="$M/cache/$ORT_TGZ"
npm_pack "$ORT_PACKAGE" "$ORT_TGZ" "$ORT_TGZ_SHA256" "$ORT_TGZ_BYTES" "$tgz" "tarball" ||
  { say "or set TRIAGE_ORT_LIB to an ONNX Runtime >= 1.24 library"; exit 1; }

tmp=$(mktemp -d "$M/ort/.extract-XXXXXX")
tar -xzf "$tgz" -C "$tmp" "$ORT_MEMBER"
if ! verified "$tmp/$ORT_MEMBER" "$ORT_LIB_SHA256"; then
  say "library sha256 $(sha256 "$tmp/$ORT_MEMBER" 2>/dev/null || echo none) is not the pinned $ORT_LIB_SHA256"
  rm -rf "$tmp"
  exit 1
fi
chmod 0644 "$tmp/$ORT_MEMBER"
mv "$tmp/$ORT_MEMBER" "$lib"
rm -rf "$tmp"
rm -f "$tgz"
say "library: $lib ($(mb "$(wc -c <"$lib")"), sha256 verified) in $((SECONDS - start))s; the tarball is removed"
