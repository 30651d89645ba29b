# The two commands a newcomer needs (README): `make run` and `make test`.
# Both create/refresh the local virtual environment .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.specjax-installed
# `make test PY=python3` (e.g. on a GPU machine whose Python has jax with CUDA and the dev packages, no registry):
# run with that interpreter as it is, creating no venv.
ifeq ($(origin PY),command line)
STAMP :=
endif

.PHONY: run test test-fast test-gpu gpu-check notebooks lab venv clean proofs methods-table

# torch==2.13.0 first, with pip, which takes this machine's local CPU wheel (pip's find-links); the rest
# with uv (parallel downloads and bytecode compilation), or with pip where uv is not installable or
# cannot reach the index. Measured with cold caches on 2 cores: all with pip 112 s, this way 82 s.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	-$(PY) -m pip install -q uv
	$(PY) -m pip install -q "torch==2.13.0"
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -e ".[dev]" || $(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m specjax.showcase $(ARGS)

# TEST_JOBS pytest-xdist workers (0: one process); tests/conftest.py groups the tests into
# work units (a module; each notebook run) and orders them longest first.
TEST_JOBS ?= 2
XDIST := -n $(TEST_JOBS) --dist loadgroup --no-loadscope-reorder

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

# On a GPU machine. Its own Python holds jax with CUDA (the venv's jax is the CPU build), so these two run with
# GPU_PY (default python3) over this checkout, installing nothing: a machine without registry access runs them.
# `make test-gpu`: the suite's `gpu` subset (tests/gpu_subset.py) on pytest-xdist workers, half the host's cores
# (at most 8: a GPU compiles on the host), as gpu-check's tests step; `make gpu-check`: the GPU
# checks in one command, writing gpu-check/gpu-check.json and gpu-check/gpu-check.md (specjax.bench.gpu_check;
# ARGS="--quick" runs its toy sizes anywhere). `make test PY=python3` runs the whole suite there.
GPU_PY ?= python3

test-gpu:
	export PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}; \
	$(GPU_PY) -m pytest -q $$($(GPU_PY) -m specjax gpu-check --pytest-workers) -m gpu $(PYTEST_ARGS)

gpu-check:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) -m specjax gpu-check $(ARGS)

# Rewrite README.md's method table (between its <!-- methods: ... --> and <!-- /methods --> lines) from the
# registry: the package's own methods (tests/test_method_registry.py fails with the new text when it is stale).
methods-table: $(STAMP)
	$(PY) -m specjax methods --readme README.md

# Execute every notebooks/*.py in place: `jupytext --sync`, run it (SPECJAX_PROFILE=$(NOTEBOOK_PROFILE)),
# write notebooks/<name>.ipynb with its outputs. Outputs go to notebooks/results/ (gitignored). Without
# --in-place, `$(PY) tests/test_notebooks.py` writes executed copies to notebooks/results/ (or --out DIR) only.
NOTEBOOK_PROFILE ?= cpu-smollm2
notebooks: $(STAMP)
	$(PY) tests/test_notebooks.py --in-place --profile $(NOTEBOOK_PROFILE) $(NOTEBOOKS)

# JupyterLab on the notebooks: installs the `notebooks` extra into .venv, then starts the server.
lab: $(STAMP)
	$(VENV)/bin/uv pip install -q --python $(PY) -e ".[dev,notebooks]" || $(PY) -m pip install -q -e ".[dev,notebooks]"
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Machine-checked proofs (proofs/coq, issue 17): plain coqc on the files of _CoqProject, in
# its (dependency) order. Fails on Admitted/admit/Axiom/Parameter/Conjecture anywhere and on
# top-level Hypothesis/Variable; Assumptions.v must print "Closed under the global context"
# for every theorem it lists.
COQ_DIR   := proofs/coq
COQ_FILES := $(shell grep -E '\.v$$' $(COQ_DIR)/_CoqProject)
COQ_FORBIDDEN := \b(Admitted|admit|Axiom|Axioms|Parameter|Parameters|Conjecture)\b|^[[:space:]]*(Hypothesis|Hypotheses|Variable|Variables)\b

proofs:
	@if grep -nE '$(COQ_FORBIDDEN)' $(addprefix $(COQ_DIR)/,$(COQ_FILES)); then \
	  echo "proofs/coq: forbidden Admitted/admit/Axiom/Parameter/Conjecture/Hypothesis/Variable (lines above)"; exit 1; fi
	@cd $(COQ_DIR) && for f in $(COQ_FILES); do echo "coqc $$f"; coqc -Q . Specjax $$f > .coqc.out 2>&1 || { cat .coqc.out; rm -f .coqc.out; exit 1; }; \
	  if [ "$$f" = Assumptions.v ]; then cat .coqc.out || exit 1; \
	    if ! grep -q '^Closed under the global context$$' .coqc.out; then echo "proofs/coq: Assumptions.v printed no assumptions"; exit 1; fi; \
	    if grep -v '^Closed under the global context$$' .coqc.out | grep -q .; then echo "proofs/coq: a theorem depends on an axiom"; rm -f .coqc.out; exit 1; fi; fi; done; rm -f .coqc.out
