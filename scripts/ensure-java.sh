#!/bin/sh
# Java 17+ for PySpark (chute[spark]): use the one on PATH, else install Debian's.
set -eu
version=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1 || true)
if [ -n "${version}" ] && [ "${version}" -ge 17 ]; then
    exit 0
fi
echo "ensure-java: installing OpenJDK 17 (PySpark needs Java 17+)" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
