# One entry point for people and CI. `make demo` and `make test` build .venv on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch first and pinned to the CPU build this machine serves, so nothing pulls CUDA wheels;
# on a GPU machine set TORCH_SPEC="torch" (or a CUDA index) before `make`.
TORCH_SPEC ?= torch==2.13.*
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint bench ui-check install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[test,lint]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/speculab

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# Skips the slow end-to-end tests (CI runs everything).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# ruff (lint + format check) over the code, mypy over the package; CI runs this before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check platform tests benchmarks jobs tools
	$(VENV)/bin/ruff format --check platform tests benchmarks jobs tools
	$(VENV)/bin/mypy

# The quick benchmarks (a few minutes on 2 cores): verifier times, OT solvers, DDTree build times.
bench: $(STAMP)
	PYTHONPATH=platform $(PY) benchmarks/verify.py --quick --threads 1
	PYTHONPATH=platform $(PY) benchmarks/ot_solvers.py --quick
	PYTHONPATH=platform $(PY) benchmarks/ddtree.py --skip-e2e --repeats 3

# The MLflow UI in headless Chromium over a tiny sweep: screenshots into docs/img and the facts
# a researcher needs checked from the rendered pages (needs `apt-get install chromium chromium-driver`).
ui-check: $(STAMP)
	@command -v chromium >/dev/null || { echo "ui-check needs Chromium: apt-get install chromium chromium-driver"; exit 2; }
	$(PY) -m pip install -q -e ".[ui]"
	$(PY) tools/ui_check.py --out docs/img

clean:
	rm -rf $(VENV) mlflow.db mlruns outputs multirun
