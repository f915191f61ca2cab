"""Plain-language lines saying where ours spends its time, each computed from measured numbers.

Sources: our handler's per-batch metrics (TsvkBatchSize, TsvkPreprocessMs = decode + resize + crop +
normalize, TsvkInferenceMs = forward + top-k), TorchServe's counters (queue and end-to-end latency per
request), and the ceiling probe (the same model in-process, decode and preprocess rates on their own).
"""

from __future__ import annotations

from .rows import FAST_VS_BEST_PEER_GOAL, FP32_VS_TORCHSERVE_BEST_GOAL, best_peer
from ...measure.stats import cpu_ms_per_image, error_headline


def explain(systems: dict, vcpus: int | None = None) -> list[str]:
    ours = systems.get("ours") or {}
    ceiling = systems.get("ceiling") or {}
    lines = []
    lines += _ceiling_decomposition(ours, ceiling)
    lines += _pipeline_bound(ours, ceiling)
    lines += _worker_split(ours)
    lines += _model_speed(ours, ceiling)
    lines += _busy_fraction(ours)
    lines += _queueing(ours)
    lines += _preprocess_split(ceiling)
    lines += _stock_handler(systems.get("torchserve_tuned") or {})
    lines += _fast_pipeline(systems.get("ours_fast") or {}, systems.get("ceiling_pipeline_fast") or {})
    lines += _inference_bound(systems)
    lines += _cpu_against_peer(systems)
    lines += _cpu_bound(systems, "ours_fast", best_peer(systems), FAST_VS_BEST_PEER_GOAL, vcpus)
    lines += _cpu_bound(systems, "ours", "torchserve_best", FP32_VS_TORCHSERVE_BEST_GOAL, vcpus)
    lines += _peer_variants(systems)
    return lines


def _per_batch(system: dict, name: str) -> float | None:
    return (((system.get("profile") or {}).get("per_batch") or {}).get(name) or {}).get("mean")


def _ceiling_decomposition(ours: dict, ceiling: dict) -> list[str]:
    """ours / ceiling = busy fraction x inference share of busy time x model speed inside the worker."""
    batch, prep, infer = (_per_batch(ours, n) for n in ("TsvkBatchSize", "TsvkPreprocessMs", "TsvkInferenceMs"))
    rate, top = ours.get("throughput_ips"), ceiling.get("throughput_ips")
    workers = ((ours.get("details") or {}).get("plan") or {}).get("workers") or 1
    by_batch = (ceiling.get("details") or {}).get("images_per_s_by_batch") or {}
    if not (batch and infer and prep is not None and rate and top and by_batch):
        return []
    size = min(by_batch, key=lambda s: abs(int(s) - batch))
    busy = rate / batch * (prep + infer) / 1e3 / workers
    share = infer / (prep + infer)
    speed = 1e3 * batch / infer / by_batch[size]
    factors = [f"busy {busy:.2f}", f"inference share of busy time {share:.2f}",
               f"model speed inside the worker vs in-process {speed:.2f}"]
    if workers > 1:
        factors.append(f"workers {workers}")
    if by_batch[size] != top:
        factors.append(f"batch {size} vs the ceiling's best batch {by_batch[size] / top:.2f}")
    return [f"ours / ceiling = {rate / top:.2f} = " + " x ".join(factors) + "; each factor below 1 is a cause (below)."]


def _pipeline_bound(ours: dict, ceiling: dict) -> list[str]:
    """The compute ceiling skips decoding; a server cannot. A worker that decodes, preprocesses and
    infers back to back (as a TorchServe worker does) serves at most `model * prep / (model + prep)`."""
    model, prep = ceiling.get("throughput_ips"), (ceiling.get("details") or {}).get("preprocess_images_per_s")
    rate = ours.get("throughput_ips")
    if not (model and prep and rate):
        return []
    bound = model * prep / (model + prep)
    return [f"bound: the ceiling skips decode + preprocess ({prep:.0f} img/s on their own); a worker doing both and the model "
            f"back to back cannot pass {bound:.1f} img/s = {bound / model:.2f}x the compute ceiling, and ours reached "
            f"{rate / bound:.2f} of that bound."]


def _worker_split(ours: dict, name: str = "ours") -> list[str]:
    batch, prep, infer = (_per_batch(ours, n) for n in ("TsvkBatchSize", "TsvkPreprocessMs", "TsvkInferenceMs"))
    if not (batch and prep is not None and infer):
        return []
    share = 100 * prep / (prep + infer)
    return [f"{name}: batches averaged {batch:.1f} images; per batch {prep:.0f} ms decode+preprocess and {infer:.0f} ms "
            f"inference, so preprocessing is {share:.0f}% of the worker's busy time "
            f"({prep / batch:.1f} ms and {infer / batch:.1f} ms per image)."]


def _model_speed(ours: dict, ceiling: dict) -> list[str]:
    batch, infer = _per_batch(ours, "TsvkBatchSize"), _per_batch(ours, "TsvkInferenceMs")
    by_batch = (ceiling.get("details") or {}).get("images_per_s_by_batch") or {}
    if not (batch and infer and by_batch):
        return []
    size = min(by_batch, key=lambda s: abs(int(s) - batch))
    inside = 1e3 * batch / infer
    return [f"inside the worker the model ran at {inside:.1f} img/s during its batches; in-process at batch {size} it runs at "
            f"{by_batch[size]:.1f} img/s ({100 * inside / by_batch[size]:.0f}% of that, the rest is threads, "
            f"memory and the other processes sharing the cores)."]


def _busy_fraction(ours: dict) -> list[str]:
    batch, prep, infer = (_per_batch(ours, n) for n in ("TsvkBatchSize", "TsvkPreprocessMs", "TsvkInferenceMs"))
    rate = ours.get("throughput_ips")
    workers = ((ours.get("details") or {}).get("plan") or {}).get("workers") or 1
    if not (batch and infer and rate and prep is not None):
        return []
    busy = rate / batch * (prep + infer) / 1e3 / workers
    return [f"ours' worker(s) were busy with batches {100 * min(busy, 1):.0f}% of the measured time; the rest is waiting "
            f"for a batch to form (maxBatchDelay) and TorchServe's frontend passing requests and answers."]


def _queueing(ours: dict) -> list[str]:
    per_request = (ours.get("profile") or {}).get("per_request") or {}
    queue, total = per_request.get("queue_ms"), per_request.get("frontend_latency_ms")
    if queue is None or total is None:
        return []
    return [f"ours: a request waited {queue:.0f} ms on average in TorchServe's queue, of {total:.0f} ms end to end "
            f"inside TorchServe (closed-loop clients keep the queue full: this is concurrency / throughput, not overhead)."]


def _preprocess_split(ceiling: dict) -> list[str]:
    details = ceiling.get("details") or {}
    decode, prep = details.get("decode_images_per_s"), details.get("preprocess_images_per_s")
    if not (decode and prep):
        return []
    if str(details.get("device", "cpu")).startswith("cuda"):  # the CPU decode timing does not split a GPU path
        return [f"in-process, the {details.get('preprocess_backend', 'GPU')} backend decodes and preprocesses {prep:.0f} img/s "
                f"(CPU decoding alone: {decode:.0f} img/s)" + (f", against {1e3 / ceiling['throughput_ips']:.2f} ms of model "
                f"per image at the best batch." if ceiling.get("throughput_ips") else ".")]
    decode_ms, prep_ms = 1e3 / decode, 1e3 / prep
    return [f"in-process, decoding a photo takes {decode_ms:.1f} ms and resize+crop+normalize {max(prep_ms - decode_ms, 0):.1f} ms "
            f"({prep:.0f} img/s for both, all vCPUs), against {1e3 / ceiling['throughput_ips']:.1f} ms of model per image "
            f"at the best batch." if ceiling.get("throughput_ips") else
            f"in-process, decoding a photo takes {decode_ms:.1f} ms and resize+crop+normalize {max(prep_ms - decode_ms, 0):.1f} ms."]


def _stock_handler(tuned: dict) -> list[str]:
    handler = _per_batch(tuned, "HandlerTime")
    queue = (((tuned.get("profile") or {}).get("per_request") or {}).get("QueueTime") or {}).get("mean")
    if handler is None:
        return []
    extra = f", requests waited {queue:.0f} ms in its queue on average" if queue is not None else ""
    return [f"hand-tuned stock: TorchServe's HandlerTime (decode + transform + inference) averaged {handler:.0f} ms per batch{extra}."]


def _fast_pipeline(fast: dict, pipeline: dict) -> list[str]:
    """ours_fast against one process doing the same decode + preprocess + model + answers back to back: per batch, where
    the worker's time goes, and what is left for TorchServe's passing and batching."""
    rate, bound = fast.get("throughput_ips"), pipeline.get("throughput_ips")
    if not (rate and bound):
        return []
    batch, prep, infer = (_per_batch(fast, n) for n in ("TsvkBatchSize", "TsvkPreprocessMs", "TsvkInferenceMs"))
    size = (pipeline.get("details") or {}).get("best_batch")
    call = (pipeline.get("latency_ms") or {}).get("p50")
    lines = [
        f"ours_fast / its pipeline ceiling = {rate / bound:.2f}: one process decoding, preprocessing, running the int8 "
        f"model and shaping the answers back to back served {bound:.1f} img/s"
        + (f" ({call:.0f} ms per batch of {size}, median)." if call and size else ".")
    ]
    lines += _worker_split(fast, "ours_fast")
    workers = ((fast.get("details") or {}).get("plan") or {}).get("workers") or 1
    if batch and infer and prep is not None:
        busy = rate / batch * (prep + infer) / 1e3 / workers
        lines.append(
            f"ours_fast's worker(s) were busy with batches {100 * min(busy, 1):.0f}% of the measured time; the rest is "
            "batch forming, TorchServe's frontend passing requests and answers, and the other processes on the cores."
        )
    return lines


def _peer_variants(systems: dict) -> list[str]:
    """What each peer was tried with, which configuration was fastest, and which failed and why."""
    lines = []
    for name in ("torchserve_best", "triton", "litserve_fast"):
        variants = (systems.get(name) or {}).get("variants") or []
        if not variants:
            continue
        tried = "; ".join(_variant_result(v) for v in variants)
        lines.append(f"{name} tried: {tried}.")
    return lines


def _variant_result(variant: dict) -> str:
    described = ", ".join(f"{k} {v}" for k, v in (variant.get("variant") or {}).items())
    if variant.get("throughput_ips"):
        return f"{described}: {variant['throughput_ips']:.1f} img/s"
    return f"{described}: failed ({error_headline(variant.get('error'))[:160]})"


def _inference_bound(systems: dict) -> list[str]:
    """What ours_fast could serve if its workers did nothing but run the model (no preprocessing, no waiting), against
    the best peer: the peers run the same int8 graph, so serving alone cannot win more than this."""
    fast = systems.get("ours_fast") or {}
    batch, infer = _per_batch(fast, "TsvkBatchSize"), _per_batch(fast, "TsvkInferenceMs")
    workers = ((fast.get("details") or {}).get("plan") or {}).get("workers") or 1
    peer = best_peer(systems)
    if not (batch and infer and peer):
        return []
    bound = workers * batch / (infer / 1e3)
    peer_rate = systems[peer]["throughput_ips"]
    return [
        f"ours_fast with no preprocessing and no idle time (its workers only running the model, {infer:.0f} ms per batch of "
        f"{batch:.1f}) would serve {bound:.1f} img/s = {bound / peer_rate:.2f}x the best peer ({peer}, {peer_rate:.1f} img/s), "
        "which runs the same int8 graph: beyond that, only a faster model run (not serving) can add."
    ]


def _cpu_against_peer(systems: dict) -> list[str]:
    """ours_fast and the best peer, CPU per image by process: on cores that both keep busy, the cheaper image is the
    faster system, and the split says which process the difference is in."""
    peer = best_peer(systems)
    ours, theirs = cpu_ms_per_image(systems.get("ours_fast") or {}), cpu_ms_per_image(systems.get(peer) or {})
    if not (ours and theirs):
        return []
    return [f"CPU per answered image, by process: ours_fast {_split(ours)}; {peer} {_split(theirs)}."]


def _cpu_bound(systems: dict, name: str, peer: str | None, goal: float, vcpus: int | None) -> list[str]:
    """The most `name` could answer with every vCPU busy all the time at the CPU per image it was measured at (its
    processes and the load generator, which share the cores), against `peer` and the goal: when the bound is under
    the goal, no layout, queueing or batching change can meet it; only spending less CPU per image can."""
    costs, peer_rate = cpu_ms_per_image(systems.get(name) or {}), (systems.get(peer) or {}).get("throughput_ips")
    if not (costs and peer_rate and vcpus):
        return []
    spent = sum(costs.values())
    bound = vcpus * 1e3 / spent
    busy = sum(systems[name]["mean_cpu_pct_by_process"].values())  # the mean CPU the sampler measured, in % of one vCPU
    needed = vcpus * 1e3 / (goal * peer_rate)
    verdict = (
        "within reach of this CPU cost"
        if bound >= goal * peer_rate
        else f"out of reach at this CPU cost: it needs at most {needed:.1f} ms per image"
    )
    return [
        f"{name} spent {spent:.1f} ms of CPU per answered image and kept the {vcpus} vCPUs {busy:.0f}% busy (of "
        f"{vcpus * 100}%): with every vCPU busy all the time it could answer at most {bound:.1f} img/s = "
        f"{bound / peer_rate:.2f}x {peer} ({peer_rate:.1f} img/s); {goal:g}x is {verdict}."
    ]


def _split(costs: dict[str, float]) -> str:
    return f"{sum(costs.values()):.1f} ms (" + ", ".join(f"{kind} {ms:.1f}" for kind, ms in costs.items()) + ")"
