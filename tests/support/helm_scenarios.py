"""Value sets the chart is rendered with; each must lint, render and validate."""

from __future__ import annotations

from tests.support.helm import config_with

SHA256_OF_ARCHIVE = "3f" * 32
METRICS_CONFIG = config_with(metrics_address="http://0.0.0.0:8082")
# What `tsvk config --protocol oip --oip-address 0.0.0.0` adds to the default config.
OIP_CONFIG = config_with(tsvk__oip__address="0.0.0.0", tsvk__oip__rest_port="8000", tsvk__oip__grpc_port="8001",
                         tsvk__oip__max_images="64")

SCENARIOS: dict[str, dict] = {
    "cpu-default": {},
    "gpu": {"torchserve": {"configProperties": config_with(number_of_gpu="1")}, "gpu": {"enabled": True, "count": 1}},
    "hpa-custom-metric": {
        "torchserve": {"configProperties": METRICS_CONFIG},
        "serviceMonitor": {"enabled": True},
        "autoscaling": {"customMetric": {"enabled": True, "name": "tsvk_queue_latency_microseconds"}},
    },
    "existing-claim": {"modelStore": {"source": "existingClaim", "existingClaim": "team-models"}},
    "model-image": {  # what make helm-template REGISTRY=... sets: the pushed image holding the archives, by digest
        "modelStore": {"source": "image"},
        "image": {"repository": "127.0.0.1:5000/tsvk/tsvk-torchserve", "tag": "0.12.0-cpu-abc1234-models-0123456789ab",
                  "digest": "sha256:" + "ab" * 32},
    },
    "download": {
        "modelStore": {
            "source": "download",
            "download": {
                "archives": [{"name": "resnet50", "url": "https://models.example.com/resnet50.mar", "sha256": SHA256_OF_ARCHIVE}]
            },
        }
    },
    "monitoring": {
        "torchserve": {"configProperties": METRICS_CONFIG},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "grafanaDashboard": {"enabled": True},
    },
    "network-policy-peers": {
        "torchserve": {"configProperties": config_with(management_address="http://0.0.0.0:8081")},
        "service": {"exposeManagement": True},
        "networkPolicy": {
            "allowSameNamespace": False,
            "inferenceFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}],
            "managementFrom": [{"podSelector": {"matchLabels": {"role": "model-admin"}}}],
        },
    },
    "oip": {"protocol": "oip", "torchserve": {"configProperties": OIP_CONFIG}},
    "oip-gpu-download": {
        "protocol": "oip",
        "torchserve": {"configProperties": config_with(
            number_of_gpu="1", tsvk__oip__address="0.0.0.0", tsvk__oip__rest_port="9000", tsvk__oip__grpc_port="9001")},
        "gpu": {"enabled": True, "count": 1},
        "service": {"oipRestPort": 80, "oipGrpcPort": 81},
        "modelStore": {
            "source": "download",
            "download": {
                "archives": [{"name": "resnet50", "url": "https://models.example.com/resnet50.mar", "sha256": SHA256_OF_ARCHIVE}]
            },
        },
    },
    "kserve-engine": {"engine": "kserve"},
    "kserve-engine-oip-download": {
        "engine": "kserve",
        "protocol": "oip",
        "torchserve": {"configProperties": OIP_CONFIG},
        "modelStore": {
            "source": "download",
            "download": {
                "archives": [{"name": "resnet50", "url": "https://models.example.com/resnet50.mar", "sha256": SHA256_OF_ARCHIVE}]
            },
        },
    },
    "network-policy-off-fixed-replicas": {
        "networkPolicy": {"enabled": False},
        "autoscaling": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
        "replicaCount": 3,
    },
}
