#!/bin/sh
# tinyproxy, Debian's small HTTP proxy: the tests put it between a client and the broker,
# configured to refuse CONNECT and WebSocket upgrades (docs/protocol.md, native over HTTP).
# Only its program is used: each test runs its own on loopback with its own config.
set -eu
if command -v tinyproxy >/dev/null 2>&1 || [ -x /usr/bin/tinyproxy ]; then
    exit 0
fi
echo "ensure-tinyproxy: installing tinyproxy (the HTTP-proxy test needs it)" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# no service started by the package (the tests start their own), unless a policy exists
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends tinyproxy >/dev/null
