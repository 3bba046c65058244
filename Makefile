# pyterrier-sci: `make run` runs the main job, `make test` the whole test suite.
# Both create the virtual environment (.venv) first when it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# benchmark data: ../shared/data beside the checkout unless PYTERRIER_SCI_DATA says otherwise
export PYTERRIER_SCI_DATA ?= $(abspath ../shared/data)
# never let the checkout's top-level folders (datasets/, ...) shadow installed packages
export PYTHONSAFEPATH := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install install-locked run test lint docs bench clean

# Installing prints nothing but real errors (pip -qq; make does not echo the commands). The project's own
# build is kept free of warnings by setup.cfg, which tests/test_architecture.py checks
# (test_package_data_declares_every_template), so quietness hides nothing of ours.  The CPU build of
# torch comes first: an unpinned torch would pull gigabytes of CUDA wheels.
PIP := $(BIN)/pip --disable-pip-version-check
$(BIN)/.installed: setup.cfg pyproject.toml constraints.txt
	@echo "make install: $(VENV) with pyterrier-sci and all its extras (minutes on a fresh checkout)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install -qq --upgrade pip
	@$(PIP) install -qq torch==2.13.0
	@$(PIP) install -qq -c constraints.txt -e ".[lucene,llm-server,colbert,scale,report,fast,corpora,docs,test]"
	@touch $@

install: $(BIN)/.installed

# the exact versions the documented figures were measured with (requirements-lock.txt, docs/reproducibility.md);
# CI keeps using the version ranges (install)
install-locked:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -qq torch==2.13.0
	@$(PIP) install -qq -r requirements-lock.txt
	@$(PIP) install -qq --no-deps -e .
	@touch $(BIN)/.installed

run: install
	$(BIN)/pyterrier-sci experiment pipelines/csfcube.yaml

# two worker processes (pytest-xdist), each test file whole on one of them: module fixtures are built once, and
# the two cores stay busy while one file waits on a subprocess, a server or a lock; they share one work directory
# (tests/conftest.py), whose builders take the artifact lock
test: install
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=25 tests

# the linter (configured in pyproject.toml); .ci/run runs it before the tests
lint: install
	$(BIN)/ruff check .

# the documentation site (Sphinx and MyST, docs/conf.py) into docs/_build/html: offline, every warning an error;
# .ci/run builds it after the linter.  docs/reference/ is generated from the code: pyterrier-sci reference --write
docs: install
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

bench: install
	$(BIN)/python benchmarks/bench_retrieval.py

clean:
	rm -rf $(VENV) runs .pytest_cache docs/_build
