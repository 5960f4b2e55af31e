#!/usr/bin/env bash
# Installs the pinned aider (tests/e2e/aider/requirements.txt) into its own virtualenv, tests/e2e/aider/.venv,
# for tests/e2e/test_aider.py: aider pins dozens of heavy packages (litellm, numpy, tree-sitter) that must
# not enter the project's environment. Part of `make e2e-install`.
# Idempotent and fast the second time: a stamp file (.venv/.installed) holds the requirements it was made
# from; while it matches requirements.txt and the binary is there, the script returns at once (no Python, no
# pip). A changed pin rebuilds the virtualenv from scratch. Needs python3 (3.10-3.12) and PyPI only.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/aider"
venv="$dir/.venv"
stamp="$venv/.installed"
want=$(sed -n 's/^aider-chat==\(.*\)$/\1/p' "$dir/requirements.txt")

if [ -x "$venv/bin/aider" ] && [ -f "$stamp" ] && cmp -s "$stamp" "$dir/requirements.txt"; then
  echo "aider $want already installed in $venv"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
got=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null || true)
if [ ! -x "$venv/bin/aider" ] || [ "$got" != "$want" ]; then
  echo "install-aider: pip finished but $venv runs aider-chat '${got:-none}', not $want" >&2
  exit 1
fi
cp "$dir/requirements.txt" "$stamp"
echo "aider $want installed in $venv"
