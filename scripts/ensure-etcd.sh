#!/bin/sh
# etcd, Debian's etcd-server (v3 API): the cluster tests start their own etcd processes on
# free loopback ports with a throw-away data directory (docs/cluster.md). Only its program
# is used; the package's own service is not started. etcd-client brings etcdctl, handy
# for looking at what a cluster wrote.
set -eu
if command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; then
    exit 0
fi
echo "ensure-etcd: installing etcd-server (the cluster tests need it)" >&2
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
$SUDO apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null
