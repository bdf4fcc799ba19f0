#!/usr/bin/env bash
# The browser tests drive Debian's Chromium at /usr/bin/chromium (never a browser that
# Playwright downloads). Install it with apt when we can: as root, or with password-less sudo.
# Otherwise print how to install it; the browser tests then fail with the same hint.
set -euo pipefail
CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ]; then
    SUDO=""
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    SUDO="none"
  fi
  if [ "$SUDO" != none ] && command -v apt-get >/dev/null; then
    echo "Installing Chromium for the browser tests (apt-get install chromium)..."
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  fi
fi

if [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; then
  "$CHROMIUM" --version 2>/dev/null | head -n 1
else
  echo "Chromium is missing at $CHROMIUM. Install it with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y chromium" >&2
  echo "(or run \`make browser\` as root; the browser tests fail until it is installed)" >&2
fi
