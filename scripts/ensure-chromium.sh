#!/usr/bin/env bash
# The explorer's browser test drives Debian's chromium (never a browser download). Installed from
# Debian's packages when missing, as root, as on this machine and CI.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "chromium is missing and installing it needs root: apt-get install chromium" >&2
  exit 1
fi
echo "installing chromium from Debian's packages"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
