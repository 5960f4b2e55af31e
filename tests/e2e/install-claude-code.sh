#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (tests/e2e/claude-code/package-lock.json) for tests/e2e/test_claude_code.py.
# Idempotent: when the pinned version is already installed and runs, it returns at once without npm.
# Needs npm and the npm registry only: the native binary ships as an npm package (~400 MB unpacked).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/claude-code"
want=$(sed -n 's/.*"@anthropic-ai\/claude-code": "\([^"]*\)".*/\1/p' "$dir/package.json" | head -n 1)

installed() {
  local bin
  for bin in "$dir"/node_modules/@anthropic-ai/claude-code-linux-*/claude "$dir/node_modules/.bin/claude"; do
    [ -x "$bin" ] || continue
    [ "$(HOME="${TMPDIR:-/tmp}" "$bin" --version 2>/dev/null | cut -d' ' -f1)" = "$want" ] && return 0
  done
  return 1
}

if installed; then
  echo "Claude Code $want already installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-claude-code: npm not found; install Node.js and npm to run the Claude Code e2e test" >&2
  exit 1
fi
npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
if ! installed; then
  echo "install-claude-code: npm ci finished but 'claude --version' does not report $want" >&2
  exit 1
fi
echo "Claude Code $want installed in $dir"
