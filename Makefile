# Quick start: `make demo` then `make test`. Both create .venv from this repo's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

DEMO := src/microcompact/data/demo_transcript.jsonl

demo: $(STAMP)
	$(BIN)/microcompact replay $(DEMO) --context-limit 200000
	$(BIN)/microcompact replay $(DEMO) --context-limit 200000 --compare

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/bench_pass.py
	$(BIN)/python bench/bench_background.py
	$(BIN)/python bench/bench_store.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
