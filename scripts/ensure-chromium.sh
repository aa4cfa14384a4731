#!/bin/sh
# Chromium for the web console's browser test (tests/integration/test_console.py):
# use /usr/bin/chromium if it is there, else install Debian's `chromium` package.
# Playwright drives this browser; it never downloads one of its own.
set -eu
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
echo "ensure-chromium: installing Debian's chromium (the console's browser test needs it)" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get update -qq && \
       $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    echo "ensure-chromium: could not install chromium with apt-get." >&2
    echo "  Install it yourself (as root: apt-get install chromium) so that /usr/bin/chromium" >&2
    echo "  exists, then run 'make install-test' again." >&2
    exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
    echo "ensure-chromium: apt-get installed chromium but /usr/bin/chromium is missing;" >&2
    echo "  install a chromium that provides /usr/bin/chromium." >&2
    exit 1
fi
