#!/usr/bin/env bash
# build-image.sh builds the gateway's container image without a container
# daemon or a registry: an OCI image layout (oci-layout, index.json,
# blobs/sha256) in var/image, or in the directory given as $1, tagged
# triage:latest, the image the Helm chart's default values name.
#
#   bash scripts/build-image.sh                  # var/image
#   skopeo copy oci:var/image:latest docker://REGISTRY/triage:TAG
#   skopeo copy oci:var/image:latest docker-daemon:triage:latest
#
# It is the image `docker build -t triage .` builds from the Dockerfile,
# assembled by deploy/image from the same parts: the binary built here as
# the Dockerfile's build stage builds it (cgo, -tags 'nomsgpack ort'), the
# final stage's files and settings read from the Dockerfile itself, and a
# base layer standing in for distroless/cc-debian12 made of the Debian
# packages distroless is made of (scripts/fetch-image-base.sh, pinned by
# version and sha256). The model files are not in the image: they come
# from a volume at /models, as with the Dockerfile's image.
#
# Reproducible: the same tree gives the same digests. Every mtime is
# SOURCE_DATE_EPOCH (default: the last commit's time); VERSION (default:
# git describe, as the Makefile's) is stamped into the binary.
#
# The binary links against this machine's glibc: build on Debian 12
# (bookworm) or older, as the Dockerfile's golang:1.26-bookworm does, so
# that the image's glibc 2.36 has every symbol version it asks for
# (go test ./deploy/image runs the image's process on its own files).
#
# The binary, the assembler and the packages are kept in var/cache/image:
# a second build with nothing changed takes seconds.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."

say() { echo "build-image: $*" >&2; }

# $1 is relative to where the script was run from; var/image to the
# repository.
case "${1:-}" in
"") out=var/image ;;
/*) out=$1 ;;
*) out=$here/$1 ;;
esac
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
cache=var/cache/image
start=$SECONDS

bash scripts/fetch-image-base.sh "$cache/debs"

# As the Dockerfile's RUN go build (deploy/image's test checks that the
# two agree).
say "go build ./cmd/triage (cgo, tier 2) into $cache/triage"
mkdir -p "$cache"
CGO_ENABLED=1 go build -tags 'nomsgpack ort' -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o "$cache/triage" ./cmd/triage
go build -o "$cache/assemble" ./deploy/image

debs=()
for f in "$cache"/debs/*.deb; do debs+=(-deb "$f"); done
"$cache/assemble" -out "$out" -context . -dockerfile Dockerfile \
	-stage /out/triage="$cache/triage" \
	-epoch "$SOURCE_DATE_EPOCH" -version "$VERSION" -name triage -tag latest "${debs[@]}"
say "done in $((SECONDS - start))s"
