# The two commands of the README:
#   make up     install everything into .venv and start the main job
#   make test   install everything into .venv and run the whole test suite (lint, types, tests)
# Both work on a fresh machine with Python >= 3.11; nothing else is needed first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,spark

.PHONY: up test lint typecheck pytest install bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

# The main job: a local cluster (3 controllers, 3 brokers) on 127.0.0.1; Ctrl-C stops it.
# `make up UP_ARGS="--brokers 1 --controllers 1 --data-dir /tmp/od"` passes options through.
up: $(STAMP)
	$(BIN)/odradek up $(UP_ARGS)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy common log odradek metadata controller broker replication chaos spark bench tests/support

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.storage

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
