#!/usr/bin/env bash
# fetch-image-base.sh puts the Debian packages the container image's base
# layer is made of in var/cache/image/debs (or $1), each pinned by version
# and sha256: glibc, libgcc_s and libstdc++ (which the gateway, built with
# cgo, and ONNX Runtime's library load), the CA certificates, and
# base-files' os-release; gcc-12-base for the GCC libraries' copyright.
# These are the packages distroless/cc-debian12, the Dockerfile's base, is
# made of. scripts/build-image.sh assembles the image from them; make test
# runs this first so that the image's test (deploy/image) finds them.
#
# Idempotent: a package already there whose sha256 is the pinned one is
# kept, so the second run downloads nothing. Fetched with apt-get download
# (Debian's mirror, the archive's signatures checked by apt), which needs
# no root; apt-get update is run once if the lists lack a pinned version.
#
# The pins are Debian 12 (bookworm) amd64. When Debian replaces a version
# on its mirror (a point release, a security update), apt-get can no
# longer fetch it: this fails naming the package, with exit status 3 (the
# image's test then skips, saying why, unless TRIAGE_REQUIRE_IMAGE=1: the
# rest of the suite does not hang on a mirror's state), and
# `bash scripts/fetch-image-base.sh --pins` prints the versions and sha256
# sums apt would fetch now, to paste into the table below after a look at
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "fetch-image-base: $*" >&2; }
. scripts/lib.sh

# name version sha256
pins=(
	"base-files 12.4+deb12u15 3eb1ea6d85488f488cc2a163b98ad640ef88cee4c79287cf14e361aaf6206f47"
	"ca-certificates 20250419~deb12u2 b9f76b5271a7ac373fd5e7e1b5b826a71ddd702b42a0d104955ecb1acfffc94b"
	"gcc-12-base 12.2.0-14+deb12u1 1896a2aacf4ad681ff5eacc24a5b0ca4d5d9c9b9c9e4b6de5197bc1e116ea619"
	"libc6 2.36-9+deb12u14 ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf"
	"libgcc-s1 12.2.0-14+deb12u1 3016e62cb4b7cd8038822870601f5ed131befe942774d0f745622cc77d8a88f7"
	"libstdc++6 12.2.0-14+deb12u1 5cd3171216d4ab0fc911cfe9c35509bf2dd8f47761c43b7f6a4296701551a24d"
)
arch=amd64

command -v apt-get >/dev/null || { say "apt-get is needed (Debian's packages make the image's base)"; exit 1; }
if [ "$(dpkg --print-architecture 2>/dev/null || echo unknown)" != "$arch" ]; then
	say "the pinned packages are for $arch; this machine is $(dpkg --print-architecture 2>/dev/null || echo unknown)"
	exit 1
fi

# candidate NAME: the version apt would install now.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }'; }

if [ "${1:-}" = "--pins" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	for p in "${pins[@]}"; do
		read -r name _ _ <<<"$p"
		v=$(candidate "$name")
		(cd "$tmp" && apt-get download -q "$name=$v" >/dev/null 2>&1) || { say "apt-get download $name=$v failed"; exit 1; }
		f=$(ls "$tmp"/"${name}"_*.deb)
		printf '\t"%s %s %s"\n' "$name" "$v" "$(sha256 "$f")"
		rm -f "$f"
	done
	exit 0
fi

dest=${1:-var/cache/image/debs}
mkdir -p "$dest"

# debfile NAME VERSION: the file apt-get download names it (an epoch's
# colon is written %3a).
debfile() {
	local a=$arch
	[ "$1" = ca-certificates ] && a=all
	echo "$dest/${1}_${2//:/%3a}_${a}.deb"
}

updated=""
for p in "${pins[@]}"; do
	read -r name version want <<<"$p"
	f=$(debfile "$name" "$version")
	if verified "$f" "$want"; then
		continue
	fi
	rm -f "$f"
	if [ -z "$updated" ] && ! apt-cache show "$name=$version" >/dev/null 2>&1; then
		say "apt's lists lack $name $version: apt-get update"
		SUDO=$(root_cmd fetch-image-base "apt's package lists")
		$SUDO apt-get update -q >/dev/null
		updated=1
	fi
	say "apt-get download $name=$version"
	# apt-get download writes to the working directory (as root it warns
	# that its _apt user cannot write there, which is harmless).
	if ! out=$(cd "$dest" && apt-get download -q "$name=$version" 2>&1); then
		echo "$out" >&2
		say "cannot fetch $name $version (Debian's mirror keeps only current versions; apt would fetch $(candidate "$name") now):"
		say "  run bash scripts/fetch-image-base.sh --pins and update the table in $0"
		exit 3
	fi
	if ! verified "$f" "$want"; then
		say "$f: sha256 $(sha256 "$f" 2>/dev/null || echo none), not the pinned $want"
		rm -f "$f"
		exit 1
	fi
done
# What an earlier table pinned goes: the image is made of every package
# here.
for f in "$dest"/*.deb; do
	[ -e "$f" ] || continue
	pinned=""
	for p in "${pins[@]}"; do
		read -r name version _ <<<"$p"
		[ "$f" = "$(debfile "$name" "$version")" ] && pinned=1
	done
	if [ -z "$pinned" ]; then
		say "removing $f (no longer pinned)"
		rm -f "$f"
	fi
done
say "${#pins[@]} packages in $dest, sha256 verified"
