# lib.sh — helpers the fetch and install scripts share; source it after
# defining say() (the install scripts use only root_cmd).

# root_cmd WHO WHAT: what to run a command as root with: nothing when root,
# sudo when there is one; otherwise it fails, saying WHO cannot install WHAT.
root_cmd() {
  if [ "$(id -u)" -eq 0 ]; then return 0; fi
  if command -v sudo >/dev/null 2>&1; then echo sudo; return 0; fi
  echo "$1: not root and no sudo; cannot install $2" >&2
  return 1
}

sha256() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# verified FILE SHA: FILE exists and has that sha256.
verified() { [ -f "$1" ] && [ "$(sha256 "$1")" = "$2" ]; }

# mb BYTES: a size for a person ("117.9 MB").
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }

# bytes_under DIR: the bytes of the files under DIR.
bytes_under() { du -sb "$1" 2>/dev/null | cut -f1 || echo 0; }

# watch_download PID DIR TOTAL WHAT: while PID runs, how many of TOTAL bytes
# have arrived under DIR, with the rate and the time left: on a terminal one
# line redrawn every second, otherwise a line every 10 seconds.
watch_download() {
  local pid=$1 dir=$2 total=$3 what=$4 start=$SECONDS last=$SECONDS got el rate left line
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    got=$(bytes_under "$dir")
    got=${got:-0}
    [ "$got" -gt "$total" ] && got=$total
    el=$((SECONDS - start))
    line="$what: $(mb "$got") of $(mb "$total") ($((got * 100 / total))%)"
    if [ "$el" -ge 2 ] && [ "$got" -ge 1000000 ]; then # a rate worth the name
      rate=$((got / el))
      left=$(((total - got) / (rate > 0 ? rate : 1)))
      line="$line, $(mb "$rate")/s, about ${left}s left"
    fi
    if [ -t 2 ]; then
      printf '\r%s\033[K' "$(say "$line" 2>&1)" >&2
    elif [ $((SECONDS - last)) -ge 10 ]; then
      last=$SECONDS
      say "$line"
    fi
  done
  [ -t 2 ] && printf '\r\033[K' >&2
  return 0
}

# npm_pack PACKAGE@VERSION TGZ SHA256 SIZE DEST WHAT: put the package's
# tarball at DEST, fetched with npm pack (no install, no scripts run) unless
# DEST is there and verifies; fail when its sha256 is not the pinned one.
# SIZE is the tarball's size in bytes (fixed by the sha256): npm pack shows
# no progress, so the bytes that have reached its cache are shown against
# it. WHAT names it in messages ("glove").
npm_pack() {
  local pkg=$1 tgzname=$2 want=$3 size=$4 dest=$5 what=$6 tmp pid rc start
  if verified "$dest" "$want"; then
    say "$what: $dest is there and verifies"
    return 0
  fi
  rm -f "$dest"
  command -v npm >/dev/null || { say "npm is needed to fetch $pkg (npm pack): install Node.js/npm"; return 1; }
  say "$what: npm pack $pkg ($(mb "$size")) into $dest"
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp -d "$(dirname "$dest")/.pack-XXXXXX")
  start=$SECONDS
  # A cache of its own: what has arrived so far is the size of that
  # directory.
  (cd "$tmp" && exec npm pack --silent --cache "$tmp/npm-cache" --pack-destination "$tmp" "$pkg" >/dev/null) &
  pid=$!
  watch_download "$pid" "$tmp/npm-cache" "$size" "$what"
  rc=0
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ]; then
    say "$what: npm pack $pkg failed (exit $rc)"
    rm -rf "$tmp"
    return 1
  fi
  if ! verified "$tmp/$tgzname" "$want"; then
    say "$what: tarball sha256 $(sha256 "$tmp/$tgzname" 2>/dev/null || echo none) is not the pinned $want"
    rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/$tgzname" "$dest"
  rm -rf "$tmp"
  say "$what: $dest ($(mb "$(wc -c <"$dest")"), sha256 verified) in $((SECONDS - start))s"
}
