#!/usr/bin/env bash
# install-chromium.sh installs headless Chromium from Debian's packages, for
# the HTML report's render test (evaluation/html_test.go). Idempotent: it does
# nothing when /usr/bin/chromium is already there.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
	echo "install-chromium: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) already installed"
	exit 0
fi

. "$(dirname "$0")/lib.sh"
SUDO=$(root_cmd install-chromium chromium)

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# No recommends: the headless render needs chromium and one font, not a desktop.
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
echo "install-chromium: $(/usr/bin/chromium --version 2>/dev/null || echo installed)"
