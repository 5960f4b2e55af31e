#!/usr/bin/env bash
# Installs the pinned Gemini CLI (tests/e2e/gemini-cli/package-lock.json) for tests/e2e/test_gemini_cli.py.
# Idempotent: when the pinned version is already installed and runs, it returns at once without npm.
# Needs npm and the npm registry only (the CLI is a bundled Node.js package, about 100 MB installed).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/gemini-cli"
want=$(sed -n 's/.*"@google\/gemini-cli": "\([^"]*\)".*/\1/p' "$dir/package.json" | head -n 1)

installed() {
  local bin="$dir/node_modules/.bin/gemini"
  [ -x "$bin" ] && [ "$(HOME="${TMPDIR:-/tmp}" "$bin" --version 2>/dev/null | tail -n 1)" = "$want" ]
}

if installed; then
  echo "Gemini CLI $want already installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-gemini-cli: npm not found; install Node.js (20 or newer) and npm to run the Gemini CLI e2e test" >&2
  exit 1
fi
npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
if ! installed; then
  echo "install-gemini-cli: npm ci finished but 'gemini --version' does not report $want" >&2
  exit 1
fi
echo "Gemini CLI $want installed in $dir"
