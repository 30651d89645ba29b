# The two commands a newcomer needs (README): `make run` and `make test`.
# Both create/refresh the local virtual environment .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.specjax-installed

.PHONY: run test test-fast notebooks venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m specjax generate $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

# Execute every notebooks/*.py in place: `jupytext --sync`, run it (SPECJAX_PROFILE=$(NOTEBOOK_PROFILE)),
# write notebooks/<name>.ipynb with its outputs. Outputs go to notebooks/results/ (gitignored).
NOTEBOOK_PROFILE ?= cpu-tiny
notebooks: $(STAMP)
	$(PY) tests/test_notebooks.py --profile $(NOTEBOOK_PROFILE) $(NOTEBOOKS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
