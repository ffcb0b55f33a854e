#!/usr/bin/env bash
# Headless Chromium for the `simlab report` rendering test (tests/test_report.py): installs Debian's `chromium`
# when /usr/bin/chromium is missing, then prints its path and version.
set -euo pipefail
CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
  echo "ensure-chromium: installing chromium" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
fi
[ -x "$CHROMIUM" ] || { echo "ensure-chromium: $CHROMIUM is still missing after the install" >&2; exit 1; }
"$CHROMIUM" --version >&2
echo "$CHROMIUM"
