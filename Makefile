# kernelskill - make help lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
KS := $(VENV)/bin/kernelskill
LEVEL ?= 1
LIMIT ?= 0
TASKS ?=
GPUS ?=
CLUSTER ?=
EVAL_FLAGS ?=
PYTEST_FLAGS ?=

.PHONY: help setup test test-gpu lint demo eval benchmarks studio clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## Create .venv and install everything (torch 2.13.0 CPU wheel first, pinned)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[test,studio,cluster]"
	@$(PY) -c "import torch, triton, langgraph, chromadb, ray, psycopg; print('installed: torch', torch.__version__, '| triton', triton.__version__)"

test: ## Run the test suite (GPU and live-model tests skip with a reason)
	$(PY) -m pytest $(PYTEST_FLAGS)

test-gpu: ## Run only the GPU-marked tests (needs CUDA)
	$(PY) -m pytest -m gpu $(PYTEST_FLAGS)

lint: ## ruff + mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy kernelskill graph nodes skills_kb evals/*.py runner engine

demo: ## Whole graph on CPU, one bundled task, SCRIPTED model (no endpoint needed)
	$(KS) demo

eval: ## Run the suite: make eval LEVEL=2 [TASKS=DIR] [LIMIT=K] [GPUS=0,1 | CLUSTER=ray[://HOST:PORT]] [EVAL_FLAGS=...]
	$(KS) eval --level $(LEVEL) --limit $(LIMIT) $(if $(TASKS),--tasks $(TASKS)) $(if $(GPUS),--gpus $(GPUS)) $(if $(CLUSTER),--cluster $(CLUSTER)) $(EVAL_FLAGS)

benchmarks: ## Reproduce docs/benchmarks.md on a CUDA machine: make benchmarks [KB=DIR] [GPUS=0,0] [BENCH=bench] [ARMS="any custom tf32"]
	KS=$(KS) PY=$(PY) GPUS=$(or $(GPUS),0) BENCH=$(or $(BENCH),bench) KB=$(KB) ARMS="$(ARMS)" bash evals/benchmarks.sh

studio: ## LangGraph Studio on the same graph (langgraph dev, offline)
	@echo "LangGraph API at http://127.0.0.1:2024; Studio: https://smith.langchain.com/studio/?baseUrl=http://127.0.0.1:2024"
	LANGGRAPH_CLI_NO_ANALYTICS=1 LANGGRAPH_NO_VERSION_CHECK=1 $(VENV)/bin/langgraph dev --no-browser

clean: ## Remove caches and run directories
	rm -rf runs .pytest_cache .ruff_cache .mypy_cache .langgraph_api
