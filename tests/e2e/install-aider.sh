#!/usr/bin/env bash
# Installs the pinned aider (tests/e2e/aider/requirements.txt) into its own virtualenv, tests/e2e/aider/.venv,
# for tests/e2e/test_aider.py: aider pins dozens of heavy packages (litellm, numpy, tree-sitter) that must
# not enter the project's environment. Idempotent: returns at once when the pinned version runs.
# Needs python3 and PyPI only.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/aider"
want=$(sed -n 's/^aider-chat==\(.*\)$/\1/p' "$dir/requirements.txt")

installed() {
  [ -x "$dir/.venv/bin/aider" ] || return 1
  [ "$("$dir/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null)" = "$want" ]
}

if installed; then
  echo "aider $want already installed in $dir/.venv"
  exit 0
fi
python3 -m venv "$dir/.venv"
"$dir/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
if ! installed; then
  echo "install-aider: pip finished but aider-chat $want is not what $dir/.venv runs" >&2
  exit 1
fi
echo "aider $want installed in $dir/.venv"
