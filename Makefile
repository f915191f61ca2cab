# TorchServe Vision Kit. `make help` lists the targets; variables in CAPITALS are their options.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   ?= .venv
PYTHON ?= $(VENV)/bin/python
TSVK   := $(VENV)/bin/tsvk
SYSTEM_PYTHON ?= python3

# archive options
MODEL     ?= resnet18
BACKEND   ?= aoti
DEVICE    ?= cpu
PRECISION ?= fp32
MAX_BATCH ?= 8
WEIGHTS   ?= DEFAULT
FORCE     ?=
# config options (empty = decide from the machine and the archives)
VCPUS ?=
WORKERS ?=
GPUS ?=
BATCH ?=
MAX_BATCH_DELAY ?=
MODELS ?=
AUTH ?= on
PINNING ?=
CONFIG ?= configs/generated.properties
IMAGE ?= skimage:chelsea
PYTEST_ARGS ?=

opt = $(if $(2),$(1) $(2))

include k8s/helm.mk

ARCHIVE_FLAGS = --model $(MODEL) --backend $(BACKEND) --device $(DEVICE) --precision $(PRECISION) \
  --max-batch $(MAX_BATCH) --weights $(WEIGHTS) $(call opt,--model-file,$(MODEL_FILE)) \
  $(call opt,--model-factory,$(MODEL_FACTORY)) $(call opt,--resize,$(RESIZE)) $(call opt,--crop,$(CROP)) \
  $(call opt,--mean,$(MEAN)) $(call opt,--std,$(STD)) $(call opt,--labels,$(LABELS)) \
  $(call opt,--tolerance,$(TOLERANCE)) $(if $(EXACT_JPEG),--exact-jpeg-decode) $(if $(FORCE),--force)

CONFIG_FLAGS = $(call opt,--vcpus,$(VCPUS)) $(call opt,--workers,$(WORKERS)) $(call opt,--gpus,$(GPUS)) \
  $(call opt,--batch,$(BATCH)) $(call opt,--max-batch-delay,$(MAX_BATCH_DELAY)) $(call opt,--models,$(MODELS)) \
  --auth $(AUTH) $(if $(PINNING),--core-pinning) --output $(CONFIG)

.PHONY: robustness soak help setup archive compile config serve stop predict demo test test-unit clean bench bench-central bench-preprocess bench-compile bench-pinning gpu-check

help: ## list the targets and their main options
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-19s %s\n", $$1, $$2}'
	@echo "Options: MODEL BACKEND DEVICE PRECISION MAX_BATCH WEIGHTS FORCE MODEL_FILE MODEL_FACTORY RESIZE CROP MEAN STD LABELS EXACT_JPEG"
	@echo "         VCPUS WORKERS GPUS BATCH MAX_BATCH_DELAY MODELS AUTH PINNING CONFIG IMAGE  (see README.md)"

setup: $(VENV)/.tsvk-setup ## create or update the venv with pinned versions (idempotent)

$(VENV)/.tsvk-setup: requirements.txt setup.cfg pyproject.toml
	@java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])' || { echo "TorchServe needs Java 17+: apt-get install -y openjdk-17-jre-headless"; exit 1; }
	@test -x $(PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements.txt
	$(PYTHON) -m pip install -q --no-deps -e .
	@touch $@

archive: setup ## compile, verify and pack model_store/$(MODEL).mar (BACKEND, WEIGHTS, FORCE=1, ...)
	$(TSVK) archive $(ARCHIVE_FLAGS)

compile: setup ## compile and verify only, into build/$(MODEL)/
	$(TSVK) compile $(filter-out --force,$(ARCHIVE_FLAGS))

config: setup ## write $(CONFIG) for VCPUS, WORKERS, GPUS, BATCH, MODELS, AUTH
	$(TSVK) config $(CONFIG_FLAGS)

serve: setup ## start TorchServe on $(CONFIG) and wait until every model is ready
	$(TSVK) serve --config $(CONFIG)

stop: ## stop the TorchServe that `make serve` started (no other)
	@test -x $(TSVK) && $(TSVK) stop || true

predict: ## classify IMAGE (a file or skimage:chelsea) with the running server
	$(TSVK) predict --image $(IMAGE) $(call opt,--model,$(MODELS))

demo: setup ## set up, archive, configure, serve, classify a real photo, stop
	$(PYTHON) -m tsvk_tools.demo --model $(MODEL)

QUICK ?=
JOBS ?=
CONCURRENCY ?=
given = $(filter command line environment,$(origin $(1)))
GPU ?=
BENCH_FLAGS = $(if $(QUICK),--quick) $(if $(GPU),--gpu) $(if $(call given,MODEL),--model $(MODEL)) $(call opt,--jobs,$(JOBS)) \
  $(call opt,--concurrency,$(CONCURRENCY)) $(if $(call given,IMAGE),--image $(IMAGE))

bench: setup ## every serving system side by side, ResNet-152 (QUICK=1: ~10 min, resnet18; GPU=1: on CUDA; MODEL JOBS CONCURRENCY IMAGE)
	$(TSVK) bench $(BENCH_FLAGS)

bench-central: setup ## issue 4's figure: stock TorchServe defaults vs ours, ResNet-152 at concurrency 32
	$(TSVK) bench --central-figure $(if $(call given,MODEL),--model $(MODEL))

bench-preprocess: setup ## preprocessing images/s of each backend vs TorchServe's PIL path (ratios, one run)
	$(PYTHON) -m tsvk_tools.bench.preprocess

bench-compile: setup ## `make archive` time per backend and compiled vs eager img/s (MODEL, cold Inductor cache)
	TORCHINDUCTOR_CACHE_DIR=$$(mktemp -d) $(PYTHON) -m tsvk_tools.bench.compiled --model $(MODEL)

bench-pinning: setup ## serving with and without core pinning, alternating rounds (MODEL, WORKERS)
	$(PYTHON) -m tsvk_tools.bench.pinning --model $(MODEL) $(call opt,--workers,$(WORKERS))

gpu-check: setup ## on a CUDA machine: GPU tests, GPU preprocessing, TensorRT + AOTInductor archives, GPU bench -> one report (MODEL WEIGHTS)
	$(TSVK) gpu-check $(if $(call given,MODEL),--model $(MODEL)) $(if $(call given,WEIGHTS),--weights $(WEIGHTS))

MINUTES ?= 70
FUZZ_INPUTS ?= 10000
robustness: setup ## fuzz (FUZZ_INPUTS), bombs, overload, worker kill, auth, key expiry against a real TorchServe -> benchmarks/results/robustness-*
	$(TSVK) robustness --fuzz-inputs $(FUZZ_INPUTS) $(if $(call given,MODEL),--model $(MODEL))

soak: setup ## MINUTES (70) at 70% of measured capacity, 5% malformed, auth on -> benchmarks/results/soak-*
	$(TSVK) soak --minutes $(MINUTES) $(if $(call given,MODEL),--model $(MODEL))

test: setup helm-install-tools ## run every test (unit, real TorchServe integration, helm)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-unit: setup ## unit tests only (fast)
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

clean: stop ## remove built archives, generated configs, build and run dirs
	rm -rf build .tsvk model_store/*.mar configs/generated*.properties
