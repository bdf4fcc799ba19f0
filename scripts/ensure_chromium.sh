#!/usr/bin/env bash
# The browser tests drive Debian's Chromium at /usr/bin/chromium. Install it when we can.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "Chromium is missing at /usr/bin/chromium. Install it with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y chromium" >&2
  echo "(the browser tests will fail until it is installed)" >&2
fi
