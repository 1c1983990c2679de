#!/usr/bin/env bash
# install-redis.sh installs redis-server from Debian's packages, for the
# tests of the shared limit counters (tenancy/redis_test.go), which
# start their own redis-server on a free port. Idempotent: it does nothing
# when redis-server is already on PATH. It leaves no Redis running: if the
# package's install started the system service, it is stopped again.
set -euo pipefail

version() { redis-server --version 2>/dev/null | head -n1 || echo redis-server; }

if command -v redis-server >/dev/null 2>&1; then
	echo "install-redis: $(version) already installed ($(command -v redis-server))"
	exit 0
fi

. "$(dirname "$0")/lib.sh"
SUDO=$(root_cmd install-redis redis-server)

export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when they do not know redis-server (a fresh
# machine, or an image that cleaned /var/lib/apt/lists).
candidate=$(apt-cache policy redis-server 2>/dev/null | awk '/Candidate:/ { print $2 }')
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
	$SUDO apt-get update
fi
# No recommends: the tests need the server binary, not its tools' extras.
$SUDO apt-get install -y --no-install-recommends redis-server

# The package starts its system service where it can (systemd, or
# invoke-rc.d in a container). The tests start their own server; one left
# on 6379 would only hold memory and a port, so stop it. A failure here
# (no service manager, nothing started) is not one.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	$SUDO systemctl stop redis-server >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1; then
	$SUDO service redis-server stop >/dev/null 2>&1 || true
fi

echo "install-redis: $(version) installed ($(command -v redis-server))"
