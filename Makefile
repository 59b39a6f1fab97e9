# podserve — `make serve` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed before the package, pinned, so that pip never resolves a multi-GB
# CUDA build on a CPU machine. A GPU user overrides it, e.g.
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
HOST ?= 127.0.0.1
PORT ?= 8000
MODEL_REPOSITORY ?= examples/models

.PHONY: serve test lint typecheck imports unit checkov bench fmt models clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Serving needs the core plus the runtimes of the bundled models (scikit-learn, ONNX, and
# torch + transformers for the embedding and language models).
$(VENV)/.serve-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[sklearn,onnx,llm]'
	touch $@

# Development adds torch (for the torch runtime tests) and every test tool.
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[dev,torch,llm]'
	touch $@ $(VENV)/.serve-installed

serve: $(VENV)/.serve-installed
	$(BIN)/podserve serve --model-repository $(MODEL_REPOSITORY) --host $(HOST) --port $(PORT) \
		--log-format console

test: $(VENV)/.dev-installed lint typecheck imports unit checkov

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests scripts benchmarks examples
	$(BIN)/ruff format --check src tests scripts benchmarks examples

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

imports: $(VENV)/.dev-installed
	$(BIN)/lint-imports

# checkov scans every example's rendered output (scripts/checkov-examples.sh); it pins older
# boto3/packaging than podserve, so it lives in its own venv, created on first use.
checkov: $(VENV)/.dev-installed
	bash scripts/checkov-examples.sh

# Two workers by default: most tests wait on the servers they start, so two overlap well
# even on two cores. --dist loadfile keeps a file's tests (and its module fixtures: started
# pods, Redis, PostgreSQL) in one worker. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
unit: $(VENV)/.dev-installed
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/load.py
	$(BIN)/python benchmarks/llm.py
	$(BIN)/python benchmarks/table.py
	$(BIN)/python benchmarks/generation_anchors.py

fmt: $(VENV)/.dev-installed
	$(BIN)/ruff format src tests scripts benchmarks examples
	$(BIN)/ruff check --fix src tests scripts benchmarks examples

models: $(VENV)/.dev-installed
	$(BIN)/python scripts/make_example_models.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
