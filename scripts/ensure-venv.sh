#!/bin/sh
# The project's virtual environment (.venv by default), so that `make run` and
# `make test` work on a Debian python that refuses system-wide pip installs
# (PEP 668, "externally managed"). Installs Debian's venv module when missing.
set -eu
python=${1:-python3}
venv=${2:-.venv}
if [ -x "${venv}/bin/python" ] && "${venv}/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    exit 0
fi
if ! "${python}" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "ensure-venv: ${python} is missing or older than 3.11; chute needs Python 3.11+" >&2
    exit 1
fi
rm -rf "${venv}"
if ! "${python}" -m venv "${venv}" 2>/dev/null; then
    echo "ensure-venv: installing Debian's venv module for ${python}" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    minor=$("${python}" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "python${minor}-venv" >/dev/null
    rm -rf "${venv}"
    "${python}" -m venv "${venv}"
fi
"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
