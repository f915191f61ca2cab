"""What a policy scanner (checkov) asks of every rendered object, checked on every scenario without it:
namespaces, image pinning and pull policy, high UIDs, probes and resources on every container (the
helm test pod's too), and NetworkPolicies that bound egress as well as ingress.
"""

from __future__ import annotations

import pytest
from tests.support.helm import NAMESPACE
from tests.support.helm_scenarios import SCENARIOS

pytestmark = pytest.mark.helm

DIGEST = "sha256:" + "ab" * 32
DNS_PORTS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request, render):
    return request.param, render(SCENARIOS[request.param])


def _pods(rendered) -> list[dict]:
    """Every pod spec the chart renders: the server's and the helm test pod's."""
    return [rendered.pod_spec(), rendered.one("Pod", "test-prediction")["spec"]]


def test_every_object_names_the_release_namespace(scenario):
    _, rendered = scenario
    for doc in rendered.documents:
        assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"


def test_every_container_has_probes_resources_and_a_locked_down_context(scenario):
    _, rendered = scenario
    for spec in _pods(rendered):
        assert spec["securityContext"]["runAsUser"] >= 10000 and spec["securityContext"]["runAsGroup"] >= 10000
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            assert {"livenessProbe", "readinessProbe"} <= container.keys(), container["name"]
            assert container["resources"]["limits"].keys() >= {"cpu", "memory"}, container["name"]
            assert container["resources"]["requests"].keys() >= {"cpu", "memory"}, container["name"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_every_container_runs_the_one_tsvk_image(scenario):
    """The download init container and the test pod run the chart's image: no second image to trust."""
    _, rendered = scenario
    image = rendered.server()["image"]
    spec = rendered.pod_spec()
    test_pod = rendered.one("Pod", "test-prediction")["spec"]
    for container in spec["containers"] + spec.get("initContainers", []) + test_pod["containers"]:
        assert container["image"] == image, container["name"]


@pytest.mark.parametrize("image, policy", [
    ({}, "Always"),  # a tag can be pushed again: ask the registry each time
    ({"digest": DIGEST}, "IfNotPresent"),  # a digest cannot change
    ({"digest": DIGEST, "pullPolicy": "Always"}, "Always"),
    ({"pullPolicy": "Never"}, "Never"),
])
def test_pull_policy_follows_the_digest_unless_set(render, image, policy):
    rendered = render({"image": image, **SCENARIOS["download"]})
    spec = rendered.pod_spec()
    for container in spec["containers"] + spec["initContainers"] + rendered.one("Pod", "test-prediction")["spec"]["containers"]:
        assert container["imagePullPolicy"] == policy, container["name"]


def test_a_digest_pins_every_container_image(render):
    rendered = render({"image": {"digest": DIGEST}, **SCENARIOS["download"]})
    assert rendered.server()["image"] == f"tsvk/torchserve:0.12.0-cpu@{DIGEST}"
    assert rendered.pod_spec()["initContainers"][0]["image"].endswith(f"@{DIGEST}")
    assert rendered.one("Pod", "test-prediction")["spec"]["containers"][0]["image"].endswith(f"@{DIGEST}")


def test_server_egress_is_dns_only_by_default(render):
    policy = render().one("NetworkPolicy", "-tsvk")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (dns,) = policy["egress"]
    assert dns["ports"] == DNS_PORTS
    assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                          "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]


def test_server_egress_adds_the_download_host_only_when_downloading(render):
    host = [{"ipBlock": {"cidr": "203.0.113.7/32"}}]
    downloading = render({**SCENARIOS["download"], "networkPolicy": {"downloadTo": host, "downloadPorts": [443, 8443]}})
    dns, download = downloading.one("NetworkPolicy", "-tsvk")["spec"]["egress"]
    assert download == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}], "to": host}
    from_claim = render({"networkPolicy": {"downloadTo": host}})
    assert len(from_claim.one("NetworkPolicy", "-tsvk")["spec"]["egress"]) == 1, "no download, no download egress"


def test_no_dns_peers_means_no_egress_at_all(render):
    policy = render({"networkPolicy": {"dnsTo": []}}).one("NetworkPolicy", "-tsvk")["spec"]
    assert "Egress" in policy["policyTypes"] and not policy.get("egress")


def test_the_test_pod_has_a_policy_reaching_only_the_server_pods(scenario):
    name, rendered = scenario
    if not rendered.has("NetworkPolicy"):
        pytest.skip("networkPolicy.enabled is false")
    policy = rendered.one("NetworkPolicy", "-test")["spec"]
    test_labels = rendered.one("Pod", "test-prediction")["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= test_labels.items()
    assert policy["policyTypes"] == ["Ingress", "Egress"] and not policy.get("ingress")
    dns, server = policy["egress"]
    assert dns["ports"] == DNS_PORTS
    server_labels = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert server["to"][0]["podSelector"]["matchLabels"].items() <= server_labels.items()
    # The front's REST port where it runs; the kserve engine serves the protocol's REST on its inference port.
    front = "oip" in name and SCENARIOS[name].get("engine", "torchserve") == "torchserve"
    expected = ["inference"] + (["oip-rest"] if front else [])
    assert [p["port"] for p in server["ports"]] == expected
