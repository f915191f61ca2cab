"""The chart's Grafana dashboard and the prometheus-adapter rules, asked of a real Prometheus scraping a real TorchServe.

Prometheus (Debian's `prometheus` package, 2.42 here) scrapes a TorchServe this test starts, with the chart's
config settings (metrics_mode=prometheus, model metrics auto-detected) and the labels a ServiceMonitor scrape
adds (namespace, service, pod, container, endpoint). The test sends good and bad requests at a steady rate,
then evaluates every query of the dashboard the chart renders and both adapter rules of
k8s/prometheus-adapter/values.yaml: each must return series; requests per second must be within 20% of what
was sent; the 4xx panel must be above 0; the 5xx panel must be 0 (not "no data"). Every test runs against both
engines the chart's config can start: TorchServe (with protocol=oip its front forwards every image to it, whose
metrics these are) and tsvk's own engine (`tsvk serve --engine kserve`), which exposes the same names.

Grafana's `$__rate_interval` becomes RATE_WINDOW (Grafana's own rule, four scrape intervals at the least,
with the 1 s scrape used here, would be 4 s; a wider window averages the pacing's jitter).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.handler_fakes import encode, noise_image
from tests.support.engine import running_engine
from tests.support.helm import REPO
from tests.support.helm_scenarios import SCENARIOS
from tests.support.torchserve import archive_tiny, running_torchserve
from tsvk_tools.config.ports import free_ports, serving_on_free_ports

pytestmark = pytest.mark.helm

ADAPTER_VALUES = REPO / "k8s" / "prometheus-adapter" / "values.yaml"
MODEL = "tiny"
POD = "demo-tsvk-7d9f8-abcde"  # a pod name as a Deployment's ReplicaSet gives it
SCRAPE_S = 1
RATE_WINDOW = "20s"
SEND_S = 30
GOOD_PER_S, BAD_PER_S = 4, 2  # apart enough that counting only the good ones would miss by 33%
TOLERANCE = 0.2


def _prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is missing: scripts/system-deps.sh installs it (apt-get install -y prometheus)")
        pytest.skip("prometheus is not installed (apt-get install -y prometheus, as scripts/system-deps.sh does)")
    return path


def _dashboard_queries(render) -> list[tuple[str, str, str]]:
    """(panel title, legend, expr) of every target of the dashboard the chart renders."""
    (board_json,) = render(SCENARIOS["monitoring"]).one("ConfigMap", "-dashboard")["data"].values()
    return [(panel["title"], target["legendFormat"], target["expr"].replace("$__rate_interval", RATE_WINDOW))
            for panel in json.loads(board_json)["panels"] for target in panel["targets"]]


def _scrape_labels(queries: list[tuple[str, str, str]]) -> dict[str, str]:
    """The labels a ServiceMonitor scrape gives the series: the dashboard's selector, and the pod's."""
    import re

    namespace, service = re.search(r'namespace="([^"]+)",service="([^"]+)"', queries[0][2]).groups()
    return {"namespace": namespace, "service": service, "pod": POD, "container": "torchserve", "endpoint": "metrics"}


class Prometheus:
    """A real Prometheus on a free localhost port, with its own config and data folder, stopped at the end."""

    def __init__(self, binary: str, work: Path, target: str, labels: dict[str, str]):
        (self.port,) = free_ports(1)
        config = {"global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
                  "scrape_configs": [{"job_name": labels["service"], "static_configs": [{"targets": [target], "labels": labels}]}]}
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = (work / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "prometheus exited; see its log"
            try:
                if requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        pytest.fail("prometheus did not get ready")

    def query(self, expr: str, at: float) -> list[dict]:
        response = requests.get(f"{self.url}/api/v1/query", params={"query": expr, "time": at}, timeout=30)
        assert response.status_code == 200, f"{expr}: {response.text}"
        return response.json()["data"]["result"]

    def series(self, match: str) -> list[dict]:
        response = requests.get(f"{self.url}/api/v1/series", params={"match[]": match}, timeout=30)
        assert response.status_code == 200, f"{match}: {response.text}"
        return response.json()["data"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _send_paced(url: str, seconds: float) -> dict[str, list[int]]:
    """GOOD_PER_S photos and BAD_PER_S sentences a second, each kind on its own schedule; the statuses seen."""
    statuses: dict[str, list[int]] = {"good": [], "bad": []}
    bodies = {"good": encode(noise_image(), "JPEG"), "bad": b"a sentence, not an image"}

    def sender(kind: str, per_s: int) -> None:
        start = time.monotonic()
        for i in range(int(seconds * per_s)):
            time.sleep(max(0.0, start + i / per_s - time.monotonic()))
            statuses[kind].append(requests.post(url, data=bodies[kind], timeout=60).status_code)

    threads = [threading.Thread(target=sender, args=(kind, per_s)) for kind, per_s in (("good", GOOD_PER_S), ("bad", BAD_PER_S))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


ENGINES = {"torchserve": running_torchserve, "kserve": running_engine}


@pytest.fixture(scope="module", params=sorted(ENGINES))
def scraped(render, tmp_path_factory, request):
    """An engine on the chart's metrics settings, load sent, Prometheus scraping it: (prometheus, when, queries, statuses)."""
    binary = _prometheus_binary()
    queries = _dashboard_queries(render)
    work = tmp_path_factory.mktemp(f"prometheus-{request.param}")
    store = archive_tiny(work / "store")
    serving = serving_on_free_ports(model_store=store, vcpus=1, workers=1, batch=4, max_batch_delay_ms=5, auth=False)
    with ENGINES[request.param](serving, work) as run:
        metrics_target = run.url("metrics").split("://", 1)[1]
        prometheus = Prometheus(binary, work, metrics_target, _scrape_labels(queries))
        try:
            prometheus.wait_ready()
            statuses = _send_paced(f"{run.url('inference')}/predictions/{MODEL}", SEND_S)
            when = time.time() - 1  # inside the sending, with the last request answered
            time.sleep(3 * SCRAPE_S)  # the last counts scraped
            yield prometheus, when, queries, statuses
        finally:
            prometheus.stop()


def test_the_server_answered_what_was_sent(scraped):
    _, _, _, statuses = scraped
    assert set(statuses["good"]) == {200} and len(statuses["good"]) == SEND_S * GOOD_PER_S
    assert set(statuses["bad"]) == {400} and len(statuses["bad"]) == SEND_S * BAD_PER_S


def test_every_dashboard_query_returns_series(scraped):
    prometheus, when, queries, _ = scraped
    empty = [f"{title} / {legend}: {expr}" for title, legend, expr in queries if not prometheus.query(expr, when)]
    assert not empty, "dashboard queries that return no series:\n" + "\n".join(empty)


def _panel_value(scraped, legend: str) -> float:
    prometheus, when, queries, _ = scraped
    (expr,) = [e for title, lg, e in queries if title == "Requests per second" and lg == legend]
    (series,) = prometheus.query(expr, when)
    return float(series["value"][1])


def test_requests_per_second_is_what_was_sent(scraped):
    sent = GOOD_PER_S + BAD_PER_S  # either engine counts every request that reached the model, answered 200 or 400
    shown = _panel_value(scraped, "{{model_name}}")
    assert abs(shown - sent) <= TOLERANCE * sent, f"the panel shows {shown:.2f} req/s; {sent} a second were sent"


def test_the_4xx_panel_counts_the_bad_requests(scraped):
    shown = _panel_value(scraped, "4xx")
    assert abs(shown - BAD_PER_S) <= TOLERANCE * BAD_PER_S, f"the 4xx panel shows {shown:.2f}/s; {BAD_PER_S} a second were sent"


def test_the_5xx_panel_is_zero_not_no_data(scraped):
    assert _panel_value(scraped, "5xx") == 0.0


@pytest.mark.parametrize("rule", range(2))
def test_adapter_rule_finds_series_and_answers_per_pod(scraped, rule):
    """What prometheus-adapter does with each rule: discover series by seriesQuery, then, asked for the pods of a
    namespace, run metricsQuery with the pod's label matchers, grouped by pod."""
    prometheus, when, queries, _ = scraped
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    assert len(rules) == 2, "one test per rule: update the parametrize range"
    spec = rules[rule]
    labels = _scrape_labels(queries)
    assert prometheus.series(spec["seriesQuery"]), f"no series for {spec['seriesQuery']}"
    matchers = f'namespace="{labels["namespace"]}",pod=~"{POD}"'
    expr = spec["metricsQuery"].replace("<<.GroupBy>>", "pod").replace("<<.LabelMatchers>>", matchers)
    (series,) = prometheus.query(expr, when)
    assert series["metric"] == {"pod": POD}
    value = float(series["value"][1])
    assert value > 0, f"{spec['name']['as']}: {value}"
