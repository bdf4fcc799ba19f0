# The project's commands. `make book` builds the site, `make test` runs every test.
# Both create the virtual environment in .venv first, with the pinned dependencies.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: env book test lint unit lab bench browser clean

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/setup_env.sh
	PYTHON=$(PYTHON) bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

## Build the book: execute every chapter and write _build/html.
book: $(STAMP)
	$(BIN)/python scripts/build_book.py

## Run all the tests: lint, unit, parity, chapter, site, browser and JupyterLab tests.
test: $(STAMP) browser lint
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: $(STAMP)
	$(BIN)/python -m pytest -m "not chapter and not site and not browser and not slow"

## Install Debian's Chromium for the browser tests (as root; prints how otherwise).
browser:
	bash scripts/ensure_chromium.sh

## Start JupyterLab at the repository root; chapters open as notebooks.
lab: $(STAMP)
	$(BIN)/jupyter lab

## Print the speed and memory ratios of the implementations against their targets.
bench: $(STAMP)
	$(BIN)/python scripts/bench.py
	$(BIN)/python scripts/bench_tiled.py
	$(BIN)/python scripts/bench_decode.py

clean:
	rm -rf _build .pytest_cache test-artifacts
