# One entry point for people and CI. `make demo` and `make test` build .venv on first use,
# from the lock of tested versions for this Python (requirements/lock-py3.X.txt).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
LOCK := requirements/lock-py$(PY_VERSION).txt
# The lock names torch==2.13.0, whose CPU build this machine's pip finds first. Elsewhere PyPI's
# default Linux build of torch is the CUDA one: TORCH_INDEX=https://download.pytorch.org/whl/cpu
# gets the CPU build there, and a CUDA index (cu130, ...) a GPU build.
TORCH_INDEX ?=
INDEX := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# On a machine whose Python already has a CUDA torch: `make install SYSTEM_TORCH=1` builds .venv on top
# of it (--system-site-packages) and installs every locked version but torch's.
SYSTEM_TORCH ?=
PYTEST_ARGS ?=
# The suite runs in TEST_WORKERS pytest-xdist processes, one test file each at a time (`--dist loadfile`:
# a file's module fixtures load once), 2 by default: most tests use one core (tiny models, subprocess
# starts), so two workers halve the suite on a 2-core machine. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
# SUITE PYTHON[,MARKERS]: the suite (the tests MARKERS selects); "no tests collected" (exit 5) is not a failure.
define SUITE
	$(1) -m pytest $(XDIST) $(if $(2),-m "$(2)") $(PYTEST_ARGS) || [ $$? -eq 5 ]
endef

.PHONY: demo test test-fast test-gpu test-latest lint lock bench ui-check install clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(if $(SYSTEM_TORCH),--system-site-packages) $(VENV)
	grep -v '$(if $(SYSTEM_TORCH),^torch==,^#)' $(LOCK) > $(VENV)/requirements.txt  # the lock, less its comments (and torch's pin with SYSTEM_TORCH)
	$(PY) -m pip install $(INDEX) -r $(VENV)/requirements.txt
	$(PY) -m pip install --no-deps -e .
	$(PY) -m pip check
	touch $(STAMP)

$(LOCK):
	@echo "no lock of tested versions for Python $(PY_VERSION) ($(LOCK)): run with PYTHON=python3.11 or"
	@echo "PYTHON=python3.12, or write one with: make lock PYTHONS=$(PYTHON)"
	@exit 2

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/speculab

test: $(STAMP)
	$(call SUITE,$(PY))

# The suite on the newest releases that pyproject.toml allows (torch too: TORCH_SPEC), in .venv-latest,
# so that drift shows here before users meet it; versions.txt there lists what was tested.
TORCH_SPEC ?= torch
test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --upgrade pip
	.venv-latest/bin/python -m pip install $(INDEX) "$(TORCH_SPEC)"
	.venv-latest/bin/python -m pip install $(INDEX) --upgrade --upgrade-strategy eager -e ".[test,lint,ui]"
	.venv-latest/bin/python -m pip freeze --exclude-editable > .venv-latest/versions.txt
	$(call SUITE,.venv-latest/bin/python)

# Rewrites the locks from today's newest releases: a throwaway venv per Python, then `pip freeze`.
PYTHONS ?= python3.11 python3.12
lock:
	TORCH_INDEX="$(TORCH_INDEX)" bash tools/lock.sh $(PYTHONS)

# The tests that need a CUDA GPU (skipped elsewhere): every decode path on the GPU, inline and on Ray.
test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

# Skips the slow end-to-end tests (CI runs everything).
test-fast: $(STAMP)
	$(call SUITE,$(PY),not slow)

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
	$(PY) tools/ui_check.py --out docs/img

clean:
	rm -rf $(VENV) mlflow.db mlruns outputs multirun
