# One entry point for people and CI. `make demo` and `make test` build .venv on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch first and pinned to the CPU build this machine serves, so nothing pulls CUDA wheels;
# on a GPU machine set TORCH_SPEC="torch" (or a CUDA index) before `make`.
TORCH_SPEC ?= torch==2.13.*
PYTEST_ARGS ?=

.PHONY: demo test test-fast bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/speculab

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# Skips the slow end-to-end tests (CI runs everything).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) mlflow.db mlruns outputs multirun
