"""The Helm chart's sizing values for a tuned config: `python -m tsvk_tools.tune.chart configs/tuned.properties`.

The chart (k8s/tsvk) checks that its CPU request equals workers x intra-op threads summed over the
models, and that every model runs `torchserve.workers` workers with batch `torchserve.batchSize`; so
a tuned config is deployed with exactly those values, printed here as helm `--set` arguments
(k8s/helm.mk, HELM_TUNED). Models tuned to different workers or batches cannot share one chart's values.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError
from ..config.serving_config import ModelChoice, tuned_choices


def chart_values(choices: dict[str, ModelChoice]) -> dict[str, int]:
    workers, batches = {c.workers for c in choices.values()}, {c.batch for c in choices.values()}
    if len(workers) > 1 or len(batches) > 1:
        described = ", ".join(f"{name}: {c.workers} worker(s), batch {c.batch}" for name, c in choices.items())
        raise UsageError(f"the chart gives every model the same workers and batch size, and this tune chose differently ({described}); "
                         "deploy the models as separate releases, each with its own tune")
    return {"vcpus": sum(c.workers * c.intra_op_threads for c in choices.values()), "workers": workers.pop(), "batchSize": batches.pop()}


def main(argv: list[str]) -> int:
    try:
        values = chart_values(tuned_choices(Path(argv[0])))
    except (UsageError, IndexError) as err:
        print(f"tsvk_tools.tune.chart: error: {err or 'name the tuned config'}", file=sys.stderr)
        return 2
    print(" ".join(f"--set torchserve.{key}={value}" for key, value in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
