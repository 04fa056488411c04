#!/usr/bin/env bash
# Installs the npm reference implementations our parity tests compare against, into
# tests/reference/node_modules. Soft-fails (tests then skip with a message) when npm is absent.
set -uo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
  echo "reference/install.sh: npm not found; parity tests will be skipped" >&2
  exit 0
fi
if [ -f node_modules/.srformer-installed ] && [ node_modules/.srformer-installed -nt package.json ]; then
  exit 0
fi
if npm install --no-audit --no-fund --silent >/tmp/srformer-npm.log 2>&1; then
  touch node_modules/.srformer-installed
else
  tail -n 20 /tmp/srformer-npm.log >&2
  echo "reference/install.sh: npm install failed; parity tests will be skipped" >&2
fi
exit 0
