#!/usr/bin/env bash
# The Stateful streams page's test opens the page in a real headless browser: Debian's chromium
# (tools/browser.py also takes chromium-browser or google-chrome from PATH). `make test` and
# .ci/run call this first, so a missing browser stops the run at once, not after the suite.
# It installs chromium with apt-get when it can do so without a password (as root, or with
# passwordless sudo); otherwise it exits 1 with the command to run.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  command -v "$name" >/dev/null && exit 0
done
install="apt-get update && apt-get install -y chromium"
if ! command -v apt-get >/dev/null; then
  echo "error: the tests need Chromium (the Stateful streams page's test) and there is no apt-get here:" \
       "install chromium (or chromium-browser / google-chrome) on PATH, then run make test again" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  sudo=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo="sudo"
else
  echo "error: the tests need Debian's chromium (the Stateful streams page's test), which is not installed;" \
       "install it with: sudo sh -c '$install' - then run make test again" >&2
  exit 1
fi
echo "installing Debian's chromium (the Stateful streams page's test needs it): $install" >&2
$sudo apt-get update -qq && $sudo apt-get install -y -qq chromium
command -v chromium >/dev/null || { echo "error: apt-get installed chromium, yet it is not on PATH" >&2; exit 1; }
