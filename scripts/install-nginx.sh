#!/usr/bin/env bash
# install-nginx.sh installs nginx from Debian's packages, for the scale-out
# test (cmd/triage TestScaleOut), where it stands in for a Kubernetes
# Service in front of three gateway processes; the test starts its own
# nginx on a free port. Idempotent: it does nothing when nginx is already
# installed. It leaves no nginx running: if the package's install started
# the system service, it is stopped again.
set -euo pipefail

found() { command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; }
version() { { nginx -v 2>&1 || /usr/sbin/nginx -v 2>&1; } | head -n1; }

if found; then
	echo "install-nginx: $(version) already installed"
	exit 0
fi

. "$(dirname "$0")/lib.sh"
SUDO=$(root_cmd install-nginx nginx)

export DEBIAN_FRONTEND=noninteractive
candidate=$(apt-cache policy nginx-light 2>/dev/null | awk '/Candidate:/ { print $2 }')
pkg=nginx-light # the core modules are all the test needs
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
	$SUDO apt-get update
	candidate=$(apt-cache policy nginx-light 2>/dev/null | awk '/Candidate:/ { print $2 }')
	if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
		pkg=nginx # newer Debian folds the light flavour into nginx
	fi
fi
$SUDO apt-get install -y --no-install-recommends "$pkg"

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	$SUDO systemctl stop nginx >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1; then
	$SUDO service nginx stop >/dev/null 2>&1 || true
fi

echo "install-nginx: $(version) installed"
