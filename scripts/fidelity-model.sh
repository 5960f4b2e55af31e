#!/usr/bin/env bash
# `make fidelity-model`: bench/fidelity.py with the local model as the summarizer (configs/local-model.yaml).
# Needs the server `make local-model` starts; extra arguments for bench/fidelity.py go in FIDELITY_ARGS.
set -euo pipefail

PYTHON="${PYTHON:-.venv/bin/python}"
CONFIG="${LOCAL_MODEL_CONFIG:-configs/local-model.yaml}"
PORT="${LOCAL_MODEL_PORT:-8087}"

die() { echo "fidelity-model: $*" >&2; exit 1; }

[ -f bench/fidelity.py ] || die "bench/fidelity.py is missing (it comes with issue 12's fidelity benchmark)"
[ -x "$PYTHON" ] || die "no $PYTHON: run make test (or make demo) once to create the dev venv"
LOCAL_MODEL_PORT="$PORT" scripts/local-model.sh check \
    || die "no local model answering on http://127.0.0.1:$PORT/v1: run make local-model first"
# shellcheck disable=SC2086  # FIDELITY_ARGS is a list of arguments
exec "$PYTHON" bench/fidelity.py --summarizer openai --config "$CONFIG" \
    --model qwen2.5-coder-0.5b-instruct --base-url "http://127.0.0.1:$PORT/v1" ${FIDELITY_ARGS:-}
