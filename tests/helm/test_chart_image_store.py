"""modelStore.source=image: the archives are in the image (make image-push builds it), so no volume covers the
image's model store; and whatever the source, a missing archive surfaces as the container's last words."""

from __future__ import annotations

import pytest

from tests.support.helm_scenarios import SCENARIOS

pytestmark = pytest.mark.helm

IMAGE_VALUES = SCENARIOS["model-image"]  # also rendered, linted and schema-checked with every other scenario
DIGEST = IMAGE_VALUES["image"]["digest"]


def test_image_source_mounts_nothing_over_the_image_model_store(render):
    rendered = render(IMAGE_VALUES)
    spec = rendered.pod_spec()
    assert not rendered.has("PersistentVolumeClaim")
    assert "model-store" not in [v["name"] for v in spec["volumes"]]
    for container in spec["containers"]:
        assert "/home/model-server/model-store" not in [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert container["image"] == f"127.0.0.1:5000/tsvk/tsvk-torchserve:0.12.0-cpu-abc1234-models-0123456789ab@{DIGEST}"
        assert container["imagePullPolicy"] == "IfNotPresent"


def test_image_source_with_oip_front_reads_the_archives_from_the_image_too(render):
    values = {**SCENARIOS["oip"], **IMAGE_VALUES}
    for container in render(values).pod_spec()["containers"]:
        assert "/home/model-server/model-store" not in [m["mountPath"] for m in container.get("volumeMounts", [])]


@pytest.mark.parametrize("values", [{}, IMAGE_VALUES])
def test_the_server_log_becomes_its_termination_message(render, values):
    """PID 1 prints the missing archive and exits: kubectl describe shows that line as the last state's message."""
    (server,) = [c for c in render(values).pod_spec()["containers"] if c["name"] == "torchserve"]
    assert server["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_notes_name_the_archives_in_the_image(helm):
    from tests.support.helm import CHART, NAMESPACE, RELEASE, helm_args, run_helm

    result = run_helm(helm, ["install", RELEASE, str(CHART), "--dry-run", "--namespace", NAMESPACE, *helm_args(IMAGE_VALUES)], IMAGE_VALUES)
    assert result.returncode == 0, result.stderr
    assert "The archives are in the image" in result.stdout and "resnet50" in result.stdout
