#!/usr/bin/env bash
# Installs the pinned Codex CLI (tests/e2e/codex/package-lock.json) for tests/proxy/test_proxy_codex.py.
# Idempotent: when the pinned version is already installed and runs, it returns at once without npm.
# Needs npm and the npm registry only: the native binary ships as an npm package (~400 MB unpacked).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/codex"
want=$(sed -n 's/.*"@openai\/codex": "\([^"]*\)".*/\1/p' "$dir/package.json" | head -n 1)

installed() {
  local bin home
  home=$(mktemp -d)
  trap 'rm -rf "$home"' RETURN
  for bin in "$dir"/node_modules/@openai/codex-linux-*/vendor/*/bin/codex "$dir/node_modules/.bin/codex"; do
    [ -x "$bin" ] || continue
    [ "$(HOME="$home" CODEX_HOME="$home" "$bin" --version 2>/dev/null | cut -d' ' -f2)" = "$want" ] && return 0
  done
  return 1
}

if installed; then
  echo "Codex CLI $want already installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-codex: npm not found; install Node.js and npm to run the Codex CLI e2e test" >&2
  exit 1
fi
npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
if ! installed; then
  echo "install-codex: npm ci finished but 'codex --version' does not report $want" >&2
  exit 1
fi
echo "Codex CLI $want installed in $dir"
