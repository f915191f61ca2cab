{{/*
Chart name, truncated to the 63 characters a Kubernetes label allows.
*/}}
{{- define "tsvk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name, with the chart name appended unless it already holds it.
*/}}
{{- define "tsvk.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of an object that sits beside the main one: "<fullname>-<suffix>", still within 63 characters.
*/}}
{{- define "tsvk.childName" -}}
{{- printf "%s-%s" (include "tsvk.fullname" .root | trunc (int (sub 62 (len .suffix))) | trimSuffix "-") .suffix }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "tsvk.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every object carries.
*/}}
{{- define "tsvk.labels" -}}
helm.sh/chart: {{ include "tsvk.chart" . }}
{{ include "tsvk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tsvk
{{- end }}

{{/*
Labels that tell this release's objects from others.
*/}}
{{- define "tsvk.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tsvk.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels that select the TorchServe pods and nothing else (not the helm test pod, which must not be
adopted by the ReplicaSet nor receive traffic from the Services).
*/}}
{{- define "tsvk.serverSelectorLabels" -}}
{{ include "tsvk.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{/*
Name of the service account the pods run as.
*/}}
{{- define "tsvk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tsvk.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The serving image: the tag defaults to "<appVersion>-cpu" or "<appVersion>-gpu" following gpu.enabled, and with
engine kserve to the image without Java or TorchServe that `make image ENGINE=kserve` builds, "...-cpu-kserve".
*/}}
{{- define "tsvk.image" -}}
{{- $variant := ternary "gpu" "cpu" .Values.gpu.enabled }}
{{- $withoutJava := ternary "-kserve" "" (eq (include "tsvk.kserveEngine" .) "true") }}
{{- $tag := .Values.image.tag | default (printf "%s-%s%s" .Chart.AppVersion $variant $withoutJava) }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The egress rule to networkPolicy.dnsTo on port 53 (UDP and TCP), as a one-item list; nothing when empty.
*/}}
{{- define "tsvk.dnsEgress" -}}
{{- with .Values.networkPolicy.dnsTo -}}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
  to:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}

{{/*
The image's pull policy: image.pullPolicy, or when empty IfNotPresent for an image pinned by digest
(it cannot change) and Always for a tag (which can be pushed again).
*/}}
{{- define "tsvk.imagePullPolicy" -}}
{{- .Values.image.pullPolicy | default (ternary "IfNotPresent" "Always" (ne .Values.image.digest "")) }}
{{- end }}

{{/*
One value of torchserve.configProperties, "" when the key is absent.
Usage: include "tsvk.property" (list $ "inference_address")
*/}}
{{- define "tsvk.property" -}}
{{- $root := index . 0 }}
{{- $key := index . 1 }}
{{- $line := regexFind (printf "(?m)^[ \\t]*%s[ \\t]*=.*$" (regexQuoteMeta $key)) $root.Values.torchserve.configProperties }}
{{- regexReplaceAll "^[^=]*=" $line "" | trim }}
{{- end }}

{{/*
The URL, host and port of one TorchServe address property ("http://0.0.0.0:8080"), as JSON.
Usage: include "tsvk.address" (list $ "inference_address") | fromJson
*/}}
{{- define "tsvk.address" -}}
{{- $url := include "tsvk.property" . }}
{{- $parts := regexFindAll "\\[[^\\]]*\\]|[^:/]+" ($url | trimPrefix "http://" | trimPrefix "https://") -1 }}
{{- if eq (len $parts) 2 }}
{{- dict "url" $url "host" (index $parts 0) "port" (index $parts 1 | int) | toJson }}
{{- else }}
{{- dict "url" $url "host" "" "port" 0 | toJson }}
{{- end }}
{{- end }}

{{/*
The models={...} JSON of the config as {"<model>": [settings, ...]}, one settings object per version
(TorchServe nests them as {"<model>": {"<version>": {...}}}); {"Error": ...} when it is not JSON.
*/}}
{{- define "tsvk.configModels" -}}
{{- $raw := include "tsvk.property" (list . "models") | default "{}" | fromJson }}
{{- $models := dict }}
{{- range $model, $versions := $raw }}
{{- if eq $model "Error" }}
{{- $_ := set $models "Error" $versions }}
{{- else if or (hasKey $versions "minWorkers") (hasKey $versions "maxWorkers") (hasKey $versions "batchSize") (hasKey $versions "marName") }}
{{- $_ := set $models $model (list $versions) }}
{{- else }}
{{- $_ := set $models $model (values $versions) }}
{{- end }}
{{- end }}
{{- $models | toJson }}
{{- end }}

{{/*
Per-model worker threads from the config's tsvk.threads.<model>=<intra>,<inter> lines,
as JSON {"<model>": {"intra": n, "inter": n}}.
*/}}
{{- define "tsvk.configThreads" -}}
{{- $threads := dict }}
{{- range regexFindAll "(?m)^[ \\t]*tsvk\\.threads\\.[^=\\s]+[ \\t]*=.*$" .Values.torchserve.configProperties -1 }}
{{- $model := regexReplaceAll "^[ \\t]*tsvk\\.threads\\.([^=\\s]+)[ \\t]*=.*$" . "${1}" }}
{{- $numbers := splitList "," (regexReplaceAll "^[^=]*=" . "" | trim) }}
{{- $inter := 1 }}
{{- if gt (len $numbers) 1 }}{{ $inter = index $numbers 1 | trim | atoi }}{{ end }}
{{- $_ := set $threads $model (dict "intra" (index $numbers 0 | trim | atoi) "inter" $inter) }}
{{- end }}
{{- $threads | toJson }}
{{- end }}

{{/*
Whether anything needs the metrics port reachable from outside the pod.
*/}}
{{- define "tsvk.metricsExposed" -}}
{{- if or .Values.service.exposeMetrics .Values.serviceMonitor.enabled }}true{{ end }}
{{- end }}

{{/*
Whether the pods serve the Open Inference Protocol (protocol oip): through the tsvk front beside TorchServe, or
the kserve engine's own (REST on the inference port, gRPC on tsvk.oip.grpc_port).
*/}}
{{- define "tsvk.oipEnabled" -}}
{{- if eq .Values.protocol "oip" }}true{{ end }}
{{- end }}

{{/*
Whether the pods run tsvk's own engine (engine kserve) instead of TorchServe.
*/}}
{{- define "tsvk.kserveEngine" -}}
{{- if eq .Values.engine "kserve" }}true{{ end }}
{{- end }}

{{/*
Whether each pod runs the Open Inference Protocol front as a second container: protocol oip on TorchServe (the
kserve engine serves the protocol itself).
*/}}
{{- define "tsvk.frontEnabled" -}}
{{- if and (include "tsvk.oipEnabled" .) (not (include "tsvk.kserveEngine" .)) }}true{{ end }}
{{- end }}

{{/*
The named container port the Service's oip-rest port targets: the front's REST port, or the engine's inference
port (which serves /predictions and the protocol's REST paths alike).
*/}}
{{- define "tsvk.oipRestTarget" -}}
{{- ternary "inference" "oip-rest" (eq .Values.engine "kserve") }}
{{- end }}

{{/*
Problems of values the kserve engine cannot honour, as a JSON list of strings: it has no management API
(docs/engines.md, "What differs"). Its metrics carry TorchServe's names, so the ServiceMonitor, the dashboard
and the custom-metric autoscaling read either engine.
*/}}
{{- define "tsvk.engineProblems" -}}
{{- $problems := list }}
{{- if and (include "tsvk.kserveEngine" .) .Values.service.exposeManagement }}
{{- $problems = append $problems "service.exposeManagement is true but engine kserve has no management API (models and workers come from the config at start): set service.exposeManagement=false, or engine=torchserve" }}
{{- end }}
{{- $problems | toJson }}
{{- end }}

{{/*
The ports the front listens on, from the config's tsvk.oip.rest_port and tsvk.oip.grpc_port, as JSON
{"rest": n, "grpc": n}; 0 for a port the config does not set.
*/}}
{{- define "tsvk.oipPorts" -}}
{{- dict "rest" (include "tsvk.property" (list . "tsvk.oip.rest_port") | atoi) "grpc" (include "tsvk.property" (list . "tsvk.oip.grpc_port") | atoi) | toJson }}
{{- end }}

{{/*
Problems of the config's Open Inference Protocol keys against the values, as a JSON list of strings.
Usage: include "tsvk.oipProblems" (list $ $regenerate) | fromJsonArray
*/}}
{{- define "tsvk.oipProblems" -}}
{{- $root := index . 0 }}
{{- $regenerate := index . 1 }}
{{- $problems := list }}
{{- $ports := include "tsvk.oipPorts" $root | fromJson }}
{{- if not (include "tsvk.oipEnabled" $root) }}
{{- if $ports.rest }}
{{- $problems = append $problems (printf "the config serves the Open Inference Protocol (tsvk.oip.rest_port=%d) but protocol is predictions, so no front would run: set protocol=oip, or regenerate the config without --protocol oip" (int $ports.rest)) }}
{{- end }}
{{- else if not (and $ports.rest $ports.grpc) }}
{{- $problems = append $problems (printf "protocol is oip but the config lacks tsvk.oip.rest_port or tsvk.oip.grpc_port, so the front has nothing to listen on: %s" $regenerate) }}
{{- else }}
{{- $address := include "tsvk.property" (list $root "tsvk.oip.address") }}
{{- if not (has $address (list "0.0.0.0" "::")) }}
{{- $problems = append $problems (printf "tsvk.oip.address must be 0.0.0.0 so the Service can reach the front, got %q (tsvk config --oip-address 0.0.0.0)" $address) }}
{{- end }}
{{- $taken := dict }}
{{- range $key := list "inference_address" "management_address" "metrics_address" }}
{{- $_ := set $taken (toString (include "tsvk.address" (list $root $key) | fromJson).port) $key }}
{{- end }}
{{- range $key := list "grpc_inference_port" "grpc_management_port" }}
{{- $_ := set $taken (include "tsvk.property" (list $root $key)) $key }}
{{- end }}
{{- range $name, $port := $ports }}
{{- if hasKey $taken (toString $port) }}
{{- $problems = append $problems (printf "tsvk.oip.%s_port %d is also the config's %s: the pod's containers share one network, so every port must differ" $name (int $port) (get $taken (toString $port))) }}
{{- end }}
{{- end }}
{{- if eq $ports.rest $ports.grpc }}
{{- $problems = append $problems (printf "tsvk.oip.rest_port and tsvk.oip.grpc_port are both %d: give each its own port" (int $ports.rest)) }}
{{- end }}
{{- end }}
{{- $problems | toJson }}
{{- end }}

{{/*
Model archives the config loads, by file name: marName when the models JSON gives one, else <model>.mar.
*/}}
{{- define "tsvk.configArchives" -}}
{{- $archives := list }}
{{- range $model, $entries := include "tsvk.configModels" . | fromJson }}
{{- if ne $model "Error" }}
{{- range $settings := $entries }}
{{- $archives = append $archives (default (printf "%s.mar" $model) (get $settings "marName")) }}
{{- end }}
{{- end }}
{{- end }}
{{- $archives | uniq | toJson }}
{{- end }}

{{/*
Checks that the generated config.properties agrees with the values; fails with every problem at once.
The config is the generator's output (tsvk config); the values size the pod. They must tell one story.
*/}}
{{- define "tsvk.validateConfig" -}}
{{- $v := .Values }}
{{- $problems := list }}
{{- $oipFlags := ternary " --protocol oip --oip-address 0.0.0.0" "" (eq $v.protocol "oip") }}
{{- $makeOip := ternary " HELM_PROTOCOL=oip" "" (eq $v.protocol "oip") }}
{{- $regenerate := printf "regenerate it with `tsvk config --vcpus %v --workers %v --batch %v --auth off --no-archive-check%s` (make helm-template%s does this)" $v.torchserve.vcpus $v.torchserve.workers $v.torchserve.batchSize $oipFlags $makeOip }}
{{- if not (trim $v.torchserve.configProperties) }}
{{- $problems = append $problems (printf "torchserve.configProperties is empty: %s" $regenerate) }}
{{- else }}
{{- $inference := include "tsvk.address" (list . "inference_address") | fromJson }}
{{- if not (has $inference.host (list "0.0.0.0" "[::]")) }}
{{- $problems = append $problems (printf "inference_address must listen on 0.0.0.0 so the Service can reach it, got %q" $inference.url) }}
{{- end }}
{{- $management := include "tsvk.address" (list . "management_address") | fromJson }}
{{- $managementOpen := has $management.host (list "0.0.0.0" "[::]") }}
{{- if and $v.service.exposeManagement (not $managementOpen) }}
{{- $problems = append $problems (printf "service.exposeManagement is true but management_address is %q: bind it to 0.0.0.0 (tsvk config --management-address http://0.0.0.0:8081)" $management.url) }}
{{- end }}
{{- if and $managementOpen (not $v.service.exposeManagement) }}
{{- $problems = append $problems (printf "management_address %q is reachable from other pods while service.exposeManagement is false: bind it to 127.0.0.1 (the default of tsvk config), or set service.exposeManagement=true knowingly" $management.url) }}
{{- end }}
{{- if include "tsvk.metricsExposed" . }}
{{- $metrics := include "tsvk.address" (list . "metrics_address") | fromJson }}
{{- if not (has $metrics.host (list "0.0.0.0" "[::]")) }}
{{- $problems = append $problems (printf "serviceMonitor.enabled or service.exposeMetrics needs metrics_address on 0.0.0.0, got %q (tsvk config --metrics-address http://0.0.0.0:8082)" $metrics.url) }}
{{- end }}
{{- $mode := include "tsvk.property" (list . "metrics_mode") }}
{{- if ne $mode "prometheus" }}
{{- $problems = append $problems (printf "Prometheus scraping needs metrics_mode=prometheus in the config, got %q" $mode) }}
{{- end }}
{{- end }}
{{- $problems = concat $problems (include "tsvk.oipProblems" (list . $regenerate) | fromJsonArray) }}
{{- if ne (include "tsvk.property" (list . "disable_token_authorization")) "true" }}
{{- $problems = append $problems "the config must turn token authorization off (disable_token_authorization=true, tsvk config --auth off): a per-pod random key cannot work behind a Service; the NetworkPolicy and the unexposed management port protect the pods instead" }}
{{- end }}
{{- if not (include "tsvk.property" (list . "model_store")) }}
{{- $problems = append $problems (printf "the config has no model_store: %s" $regenerate) }}
{{- end }}
{{- $gpus := include "tsvk.property" (list . "number_of_gpu") }}
{{- $wantGpus := ternary (int $v.gpu.count) 0 $v.gpu.enabled }}
{{- if and $gpus (ne (atoi $gpus) $wantGpus) }}
{{- $problems = append $problems (printf "the config sets number_of_gpu=%s but the pod gets %d GPUs (gpu.enabled=%v, gpu.count=%v)" $gpus $wantGpus $v.gpu.enabled $v.gpu.count) }}
{{- end }}
{{- $threads := include "tsvk.configThreads" . | fromJson }}
{{- $models := include "tsvk.configModels" . | fromJson }}
{{- if hasKey $models "Error" }}
{{- $problems = append $problems (printf "the models= line of the config is not JSON: %s" $models.Error) }}
{{- $models = dict }}
{{- end }}
{{- if not (without (keys $models) "Error") }}
{{- $problems = append $problems (printf "the config has no models={...} entry naming the models, their workers and batch size: %s" $regenerate) }}
{{- end }}
{{- if not $threads }}
{{- $problems = append $problems (printf "the config has no tsvk.threads.<model>=<intra>,<inter> line, so workers would not know their thread count: %s" $regenerate) }}
{{- end }}
{{- $defaultWorkers := include "tsvk.property" (list . "default_workers_per_model") | default "1" | atoi }}
{{- $cpuThreads := 0 }}
{{- range $model, $plan := $threads }}
{{- $workers := $defaultWorkers }}
{{- range $settings := (get $models $model | default list) }}
{{- $workers = get $settings "maxWorkers" | default $workers | int }}
{{- end }}
{{- $cpuThreads = add $cpuThreads (mul $workers $plan.intra) }}
{{- end }}
{{- if and $threads (gt (int $cpuThreads) (int $v.torchserve.vcpus)) }}
{{- $problems = append $problems (printf "the config runs %d compute threads in all (workers x intra-op threads, summed over models) but torchserve.vcpus, the pod's CPU request and limit, is %v: the workers would be throttled; %s" (int $cpuThreads) $v.torchserve.vcpus $regenerate) }}
{{- else if and $threads (lt (int $cpuThreads) (int $v.torchserve.vcpus)) }}
{{- $problems = append $problems (printf "the config runs %d compute threads in all (workers x intra-op threads, summed over models) but torchserve.vcpus, the pod's CPU request, is %v: the pod would pay for idle CPUs; make vcpus a multiple of workers x models, or %s" (int $cpuThreads) $v.torchserve.vcpus $regenerate) }}
{{- end }}
{{- range $model, $entries := $models }}
{{- range $settings := $entries }}
{{- $minWorkers := get $settings "minWorkers" | default 0 | int }}
{{- $maxWorkers := get $settings "maxWorkers" | default 0 | int }}
{{- if or (ne $minWorkers (int $v.torchserve.workers)) (ne $maxWorkers (int $v.torchserve.workers)) }}
{{- $problems = append $problems (printf "model %s runs minWorkers %d / maxWorkers %d but torchserve.workers is %v: %s" $model $minWorkers $maxWorkers $v.torchserve.workers $regenerate) }}
{{- end }}
{{- $batch := get $settings "batchSize" | default 1 | int }}
{{- if ne $batch (int $v.torchserve.batchSize) }}
{{- $problems = append $problems (printf "model %s has batchSize %d but torchserve.batchSize is %v: %s" $model $batch $v.torchserve.batchSize $regenerate) }}
{{- end }}
{{- if not (hasKey $threads $model) }}
{{- $problems = append $problems (printf "model %s has no tsvk.threads.%s line: %s" $model $model $regenerate) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $v.modelStore.source "download" }}
{{- $downloads := list }}
{{- range $v.modelStore.download.archives }}{{ $downloads = append $downloads (printf "%s.mar" .name) }}{{ end }}
{{- range include "tsvk.configArchives" . | fromJsonArray }}
{{- if not (has . $downloads) }}
{{- $problems = append $problems (printf "the config loads %s but modelStore.download.archives has no entry named %q" . (trimSuffix ".mar" .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (eq $v.modelStore.source "existingClaim") (not $v.modelStore.existingClaim) }}
{{- $problems = append $problems "modelStore.source is existingClaim but modelStore.existingClaim names no PersistentVolumeClaim" }}
{{- end }}
{{- $problems = concat $problems (include "tsvk.engineProblems" . | fromJsonArray) }}
{{- if and $v.autoscaling.enabled $v.autoscaling.customMetric.enabled (not (include "tsvk.metricsExposed" .)) (not (include "tsvk.kserveEngine" .)) }}
{{- $problems = append $problems "autoscaling.customMetric needs TorchServe's metrics scraped, but they stay inside the pod: set serviceMonitor.enabled=true (or service.exposeMetrics=true for another scraper)" }}
{{- end }}
{{- if and $v.autoscaling.enabled (lt (int $v.autoscaling.maxReplicas) (int $v.autoscaling.minReplicas)) }}
{{- $problems = append $problems (printf "autoscaling.maxReplicas (%v) must be at least autoscaling.minReplicas (%v)" $v.autoscaling.maxReplicas $v.autoscaling.minReplicas) }}
{{- end }}
{{- if $problems }}
{{- fail (printf "\n\ntsvk chart: the values and the generated config disagree:\n  - %s\n" (join "\n  - " $problems)) }}
{{- end }}
{{- end }}

{{/*
Seconds from a pod's deletion to SIGKILL: the preStop sleep, the drain, TorchServe's exit (3 s at most,
tools/engines/torchserve/drain.py) and 10 s to spare, so that SIGKILL never cuts a drain short.
*/}}
{{- define "tsvk.terminationGracePeriodSeconds" -}}
{{- add .Values.preStopSleepSeconds .Values.drainTimeoutSeconds 10 }}
{{- end }}
