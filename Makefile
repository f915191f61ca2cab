# TorchServe Vision Kit. `make help` lists the targets; variables in CAPITALS are their options.
# Each target runs one `tsvk` command and each option becomes one of its flags (docs/commands.md).
# An option left empty is not passed, so `tsvk` decides: its defaults are written once, in
# tools/defaults.py (the worker's own in handlers/tsvk/common/defaults.py). tests/unit/test_make_options.py checks the Makefile, the CLI and the
# option tables of docs/commands.md against each other.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   ?= .venv
PYTHON ?= $(VENV)/bin/python
TSVK   := $(VENV)/bin/tsvk
SYSTEM_PYTHON ?= python3
TRITON_VENV ?= .venv-triton
TRITON_SYSTEM_PYTHON ?= /usr/bin/python3
PYTEST_ARGS ?=

opt = $(if $(2),$(1) $(2))
qopt = $(if $(2),$(1) "$(2)")  # a value that may hold spaces (PARTS="slow clients")
switch = $(if $(2),$(1))
# TorchServe's frontend runs on Java: a target that starts TorchServe installs Java 17 first (as root; else it stops
# with the apt-get line). `make setup` installs none, and ENGINE=kserve, tsvk's own engine, needs none.
java = @scripts/system-deps.sh --torchserve
java_unless_kserve = $(if $(filter kserve,$(ENGINE)),,$(java))

# k8s/helm.mk's targets set up the venv first, as every target here does.
kube_setup := setup
include k8s/helm.mk

build_flags = $(strip $(call opt,--model,$(MODEL)) $(call opt,--weights,$(WEIGHTS)) $(call opt,--backend,$(BACKEND)) \
  $(call opt,--device,$(DEVICE)) $(call opt,--cpu-isa,$(CPU_ISA)) $(call opt,--precision,$(PRECISION)) $(call opt,--max-batch,$(MAX_BATCH)) \
  $(call opt,--batch,$(BATCH)) $(call opt,--max-batch-delay,$(MAX_BATCH_DELAY)) $(call opt,--workers,$(WORKERS)) \
  $(call opt,--topk,$(TOPK)) $(call opt,--model-file,$(MODEL_FILE)) $(call opt,--model-factory,$(MODEL_FACTORY)) \
  $(call opt,--resize,$(RESIZE)) $(call opt,--crop,$(CROP)) $(call opt,--mean,$(MEAN)) $(call opt,--std,$(STD)) \
  $(call opt,--labels,$(LABELS)) $(call opt,--tolerance,$(TOLERANCE)) $(call switch,--exact-jpeg-decode,$(EXACT_JPEG)) \
  $(call opt,--calibration,$(CALIBRATION)) $(call opt,--accuracy-photos,$(ACCURACY_PHOTOS)) $(call opt,--max-accuracy-drop,$(MAX_ACCURACY_DROP)) $(call opt,--task,$(TASK)) $(call opt,--score-threshold,$(SCORE_THRESHOLD)) \
  $(call opt,--max-detections,$(MAX_DETECTIONS)))

config_flags = $(strip $(call opt,--vcpus,$(VCPUS)) $(call opt,--workers,$(WORKERS)) $(call opt,--gpus,$(GPUS)) \
  $(call opt,--batch,$(BATCH)) $(call opt,--max-batch-delay,$(MAX_BATCH_DELAY)) $(call opt,--models,$(MODELS)) \
  $(call opt,--auth,$(AUTH)) $(call switch,--core-pinning,$(PINNING)) $(call opt,--response-timeout,$(RESPONSE_TIMEOUT)) \
  $(call opt,--concurrency,$(CONCURRENCY)) $(call opt,--max-request-mb,$(MAX_REQUEST_MB)) \
  $(call opt,--deadline-ms,$(DEADLINE_MS)) $(call opt,--token-expiry-min,$(TOKEN_EXPIRY_MIN)) $(call opt,--protocol,$(PROTOCOL)) \
  $(call opt,--memory-mb,$(MEMORY_MB)) $(call opt,--inference-address,$(INFERENCE_ADDRESS)) \
  $(call opt,--management-address,$(MANAGEMENT_ADDRESS)) $(call opt,--metrics-address,$(METRICS_ADDRESS)) \
  $(call opt,--grpc-inference-port,$(GRPC_INFERENCE_PORT)) $(call opt,--grpc-management-port,$(GRPC_MANAGEMENT_PORT)) \
  $(call opt,--oip-address,$(OIP_ADDRESS)) $(call opt,--oip-rest-port,$(OIP_REST_PORT)) $(call opt,--oip-grpc-port,$(OIP_GRPC_PORT)) \
  $(call opt,--tls-key,$(TLS_KEY)) $(call opt,--tls-cert,$(TLS_CERT)) $(call opt,--output,$(CONFIG)))

tune_flags = $(strip $(call opt,--models,$(MODELS)) $(call opt,--p99-ms,$(P99_MS)) $(call opt,--min-img-s,$(MIN_IMG_S)) \
  $(call opt,--memory-mb,$(MEMORY_MB)) $(call opt,--minutes,$(MINUTES)) $(call opt,--vcpus,$(VCPUS)) \
  $(call opt,--concurrency,$(CONCURRENCY)) $(call opt,--auth,$(AUTH)) $(call opt,--output,$(CONFIG)))

batch_flags = $(strip $(call opt,--model,$(MODEL)) $(call opt,--input,$(INPUT)) $(call opt,--output,$(OUTPUT)) \
  $(call opt,--workers,$(WORKERS)) $(call opt,--batch,$(BATCH)) $(call opt,--column,$(COLUMN)) $(call opt,--ray,$(RAY)) \
  $(call opt,--max-request-mb,$(MAX_REQUEST_MB)))

bench_flags = $(strip $(call opt,--rounds,$(ROUNDS)) $(call opt,--round-seconds,$(ROUND_SECONDS)) $(call switch,--quick,$(QUICK)) $(call switch,--gpu,$(GPU)) $(call opt,--model,$(MODEL)) \
  $(call opt,--jobs,$(JOBS)) $(call opt,--concurrency,$(CONCURRENCY)) $(call opt,--image,$(IMAGE)) $(call opt,--photos,$(PHOTOS)))

# The variables each target takes on the command line: one list a target, the rows of docs/commands.md. Every
# target also takes VENV, PYTHON, SYSTEM_PYTHON and TSVK. A variable given on the command line that no goal
# takes stops make before anything runs, naming what the goals take: `make config MODEL=resnet50` would
# otherwise be ignored (MODELS is meant) and every archive served. The Kubernetes targets (k8s/helm.mk) have
# no list and are not checked.
build_takes := MODEL WEIGHTS BACKEND DEVICE CPU_ISA PRECISION MAX_BATCH BATCH MAX_BATCH_DELAY WORKERS TOPK TASK \
  SCORE_THRESHOLD MAX_DETECTIONS MODEL_FILE MODEL_FACTORY RESIZE CROP MEAN STD LABELS TOLERANCE EXACT_JPEG CALIBRATION ACCURACY_PHOTOS MAX_ACCURACY_DROP
bench_takes := MODEL ROUNDS ROUND_SECONDS QUICK GPU JOBS CONCURRENCY IMAGE PHOTOS
triton_takes := TRITON_VENV TRITON_SYSTEM_PYTHON
listen_takes := INFERENCE_ADDRESS MANAGEMENT_ADDRESS METRICS_ADDRESS GRPC_INFERENCE_PORT GRPC_MANAGEMENT_PORT OIP_ADDRESS OIP_REST_PORT OIP_GRPC_PORT
takes_help :=
takes_setup :=
takes_system-deps :=
takes_archive := $(build_takes) FORCE
takes_compile := $(build_takes)
takes_config := VCPUS WORKERS GPUS BATCH MAX_BATCH_DELAY MODELS AUTH PINNING RESPONSE_TIMEOUT CONCURRENCY MAX_REQUEST_MB \
  DEADLINE_MS TOKEN_EXPIRY_MIN PROTOCOL MEMORY_MB CONFIG TLS_KEY TLS_CERT $(listen_takes)
takes_tune := MODELS P99_MS MIN_IMG_S MEMORY_MB MINUTES VCPUS CONCURRENCY AUTH CONFIG
takes_serve := CONFIG PROTOCOL ALLOCATOR ENGINE
takes_stop := DRAIN_TIMEOUT
takes_status :=
takes_doctor := CONFIG
takes_predict := IMAGE MODEL PREDICT_PROTOCOL
takes_draw := IMAGE MODEL OUTPUT
takes_batch := MODEL INPUT OUTPUT WORKERS BATCH COLUMN RAY MAX_REQUEST_MB
takes_demo := MODEL IMAGE ENGINE
takes_bench := $(bench_takes) $(triton_takes)
takes_triton-venv := $(triton_takes)
takes_bench-central := $(bench_takes)
takes_bench-tuned := $(bench_takes)
takes_bench-preprocess :=
takes_bench-compile := MODEL
takes_bench-pinning := MODEL WORKERS
takes_bench-engines := MODEL WORKERS ROUNDS
takes_bench-protocol := ARCHIVE MODEL
takes_bench-accuracy := IMAGES AS_SENT ENGINE
takes_gpu-check := MODEL WEIGHTS
takes_robustness := FUZZ_INPUTS MODEL ENGINE PARTS
takes_soak := MINUTES MODEL ALLOCATOR
takes_test := PYTEST_ARGS HELM KUBERNETES_VALIDATE
takes_test-unit := PYTEST_ARGS
takes_clean := DRAIN_TIMEOUT
taken_by_all := VENV PYTHON SYSTEM_PYTHON TSVK

goals := $(or $(MAKECMDGOALS),$(.DEFAULT_GOAL))
goals_take := $(sort $(foreach goal,$(goals),$(takes_$(goal))))
given := $(foreach name,$(.VARIABLES),$(if $(filter command line,$(origin $(name))),$(name)))
not_taken := $(filter-out $(goals_take) $(taken_by_all),$(given))
meant = $(filter $(1)% $(patsubst %S,%,$(1)),$(goals_take))
# Only the make a user typed checks: a recursive make (bench's triton-venv) inherits its caller's variables.
ifeq ($(MAKELEVEL),0)
ifeq ($(filter undefined,$(foreach goal,$(goals),$(origin takes_$(goal)))),)
ifneq ($(not_taken),)
$(error make $(goals) does not take $(foreach name,$(not_taken),$(name)$(if $(call meant,$(name)), (did you mean $(call meant,$(name))?))); \
  it takes $(or $(goals_take),no variables) (docs/commands.md, make help))
endif
endif
endif

.PHONY: system-deps status doctor tune robustness soak help setup archive compile config serve stop predict batch draw demo test test-unit clean bench triton-venv bench-central bench-tuned bench-preprocess bench-compile bench-pinning bench-engines bench-protocol bench-accuracy gpu-check

help: ## list the targets and their options
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-19s %s\n", $$1, $$2}'
	@echo "Options (VAR=value; docs/commands.md says which target takes which, and its default):"
	@sed -nE 's/^\| `([A-Z_]+)(=1)?` \|.*/\1/p' docs/commands.md | sort -u | fmt -w 100 | sed 's/^/  /'

setup: $(VENV)/.tsvk-setup ## install the system packages for building (as root; no Java) and create or update the venv with pinned versions (idempotent)

$(VENV)/.tsvk-setup: $(VENV)/.tsvk-python
	@touch $@

system-deps: ## install the missing system packages for building and tsvk's own engine (a C++ compiler, Python venv and headers) as root, else print the apt-get line; the targets that start TorchServe add Java 17
	@scripts/system-deps.sh

# the venv: the building packages first, then the pinned Python packages (TorchServe's pip package too: it needs Java
# only to start, which the targets that start it install); the version lives in handlers/tsvk/__init__.py
$(VENV)/.tsvk-python: requirements.txt setup.cfg pyproject.toml scripts/system-deps.sh handlers/tsvk/__init__.py
	@scripts/system-deps.sh
	@test -x $(PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements.txt
	$(PYTHON) -m pip install -q --no-deps kserve==0.21.0  # the OIP front; its other dependencies are in requirements.txt
	$(PYTHON) -m pip install -q --no-deps -e .
	@touch $@

archive: setup ## compile, verify and pack model_store/<model>.mar (MODEL, BACKEND, WEIGHTS, FORCE=1, ...)
	$(TSVK) archive $(build_flags) $(call switch,--force,$(FORCE))

compile: setup ## compile and verify only, into build/<model>/ (the archive options but FORCE)
	$(TSVK) compile $(build_flags)

config: setup ## write the TorchServe config (VCPUS, WORKERS, GPUS, BATCH, MODELS, AUTH, PROTOCOL, INFERENCE_ADDRESS and the other ports, ...)
	$(TSVK) config $(config_flags)

tune: setup ## measure workers x threads x batch x delay on a real TorchServe -> configs/tuned.properties (MODELS P99_MS MIN_IMG_S MEMORY_MB MINUTES)
	$(java)
	$(TSVK) tune $(tune_flags)

serve: setup ## start TorchServe (or ENGINE=kserve: tsvk's own engine, no Java) on CONFIG (and the OIP front, PROTOCOL=oip) and wait until every model is ready
	$(java_unless_kserve)
	$(TSVK) serve $(call opt,--config,$(CONFIG)) $(call opt,--protocol,$(PROTOCOL)) $(call opt,--allocator,$(ALLOCATOR)) $(call opt,--engine,$(ENGINE))

stop: ## stop the TorchServe (and OIP front) that `make serve` started (no other)
	@test -x $(TSVK) && $(TSVK) stop $(call opt,--drain-timeout,$(DRAIN_TIMEOUT)) || true

status: ## what the TorchServe `make serve` started is doing: models, workers, ports, key file, OIP front, memory, uptime
	@test -x $(TSVK) && $(TSVK) status || echo "nothing runs: tsvk is not set up yet (make setup)"

doctor: setup ## check a TorchServe config (CONFIG, default the generated one) and the archives it serves: one line per problem, with its fix
	$(TSVK) doctor $(CONFIG)

predict: setup ## classify IMAGE (a file or skimage:chelsea) with the running server (MODEL, PREDICT_PROTOCOL)
	$(TSVK) predict $(call opt,--image,$(IMAGE)) $(call opt,--model,$(MODEL)) $(call opt,--protocol,$(PREDICT_PROTOCOL))

draw: setup ## draw a served detector's boxes or segmenter's label map over IMAGE into OUTPUT (MODEL)
	$(TSVK) draw $(call opt,--image,$(IMAGE)) $(call opt,--model,$(MODEL)) $(call opt,--output,$(OUTPUT))

batch: setup ## score INPUT (a folder, a text file of paths or URLs, a Parquet/CSV table) with model_store/MODEL.mar into OUTPUT (.jsonl or .parquet), resumable (WORKERS BATCH COLUMN RAY)
	$(TSVK) batch $(batch_flags)

demo: setup ## set up, archive, configure, serve, classify a real photo, stop (MODEL, IMAGE; ENGINE=kserve: tsvk's own engine, no Java)
	$(java_unless_kserve)
	$(TSVK) demo $(call opt,--model,$(MODEL)) $(call opt,--image,$(IMAGE)) $(call opt,--engine,$(ENGINE))

bench: setup ## every serving system side by side, ResNet-152 (QUICK=1: a smoke run, every system once on resnet18 for 3 s, figures not for comparison; GPU=1: on CUDA; PHOTOS=as-sent: 12-48 MP phone photos, sideways ones checked, as-sent-no-heic without the HEIC; MODEL JOBS CONCURRENCY IMAGE ROUNDS ROUND_SECONDS)
	$(java)
	@$(MAKE) --no-print-directory triton-venv || echo "bench: the Triton venv could not be built; the triton row is left out"
	$(TSVK) bench $(bench_flags)

triton-venv: $(TRITON_VENV)/.tsvk-triton ## the triton bench row's venv: Debian's own python3 with PyTriton, OpenVINO, Pillow (requirements-triton.txt)

# PyTriton's Triton Python stub fails at model load under other CPython 3.11 builds ('_thread.RLock' object has no
# attribute '_recursion_count'), so this venv is made from Debian's own python3, apart from the main one
$(TRITON_VENV)/.tsvk-triton: requirements-triton.txt
	@test -x $(TRITON_VENV)/bin/python || $(TRITON_SYSTEM_PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/python -m pip install -q -r requirements-triton.txt
	@touch $@

bench-central: setup ## the central figure: stock TorchServe defaults vs ours, ResNet-152 at concurrency 32 (as bench)
	$(java)
	$(TSVK) bench --central-figure $(bench_flags)

bench-tuned: setup ## ours with configs/tuned.properties vs ours with the generated config, alternating rounds -> benchmarks/results/*-tuned-<model>.* (MODEL ROUNDS ROUND_SECONDS CONCURRENCY)
	$(java)
	$(TSVK) bench --tuned-vs-generated $(bench_flags)

bench-preprocess: setup ## preprocessing images/s of each backend vs TorchServe's PIL path (ratios, one run)
	$(TSVK) bench preprocess

bench-compile: setup ## archive time per backend and compiled vs eager img/s (MODEL, cold Inductor cache)
	TORCHINDUCTOR_CACHE_DIR=$$(mktemp -d) $(TSVK) bench compile $(call opt,--model,$(MODEL))

bench-pinning: setup ## serving with and without core pinning, alternating rounds (MODEL, WORKERS)
	$(java)
	$(TSVK) bench pinning $(call opt,--model,$(MODEL)) $(call opt,--workers,$(WORKERS))

bench-engines: setup ## TorchServe and the kserve engine on one archive: cold start and the whole server's memory, alternating rounds (MODEL, WORKERS, ROUNDS)
	$(java)
	$(TSVK) bench engines $(call opt,--model,$(MODEL)) $(call opt,--workers,$(WORKERS)) $(call opt,--rounds,$(ROUNDS))

bench-protocol: setup ## the kserve engine answering the Open Inference Protocol's REST vs /predictions, alternating rounds, client hey (ARCHIVE or MODEL)
	$(TSVK) bench protocol $(call opt,--archive,$(ARCHIVE)) $(call opt,--model,$(MODEL))

bench-accuracy: setup ## top-1/top-5 of every backend and precision through a real TorchServe, EfficientNet-Lite0 (IMAGES; AS_SENT=12mp: also as phone-size photos; ENGINE=kserve: tsvk's own engine, no Java)
	$(java_unless_kserve)
	$(TSVK) bench accuracy $(call opt,--images,$(IMAGES)) $(call opt,--as-sent,$(AS_SENT)) $(call opt,--engine,$(ENGINE))

gpu-check: $(VENV)/.tsvk-python ## on a CUDA machine: installs CV-CUDA + Torch-TensorRT (cu13), GPU tests, preprocessing, TensorRT + AOTInductor archives, GPU bench -> one report (MODEL WEIGHTS)
	$(TSVK) gpu-check $(call opt,--model,$(MODEL)) $(call opt,--weights,$(WEIGHTS))

robustness: setup ## fuzz, bombs, overload, worker kill, auth, key expiry, large uploads, slow clients and drain against a real TorchServe (ENGINE=kserve: tsvk's own engine; PARTS: some only) -> benchmarks/results/robustness-*
	$(java_unless_kserve)
	$(TSVK) robustness $(call opt,--fuzz-inputs,$(FUZZ_INPUTS)) $(call opt,--model,$(MODEL)) $(call opt,--engine,$(ENGINE)) $(call qopt,--parts,$(PARTS))

soak: setup ## MINUTES (70) at 70% of measured capacity, 5% malformed requests, token auth on -> benchmarks/results/soak-*
	$(java)
	$(TSVK) soak $(call opt,--minutes,$(MINUTES)) $(call opt,--model,$(MODEL)) $(call opt,--allocator,$(ALLOCATOR))

test: setup helm-install-tools ## install the tests' system packages (bubblewrap, hey, curl, jemalloc, prometheus) and run every test (unit, real TorchServe integration, helm)
	@scripts/system-deps.sh --test
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-unit: setup ## unit tests only (fast; the tests' system packages first, as make test)
	@scripts/system-deps.sh --test
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

clean: stop ## remove built archives, generated configs, build and run dirs
	rm -rf build .tsvk model_store/*.mar configs/generated*.properties
