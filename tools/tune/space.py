"""What `tsvk tune` may try: per model, workers x intra-op x inter-op threads, batch size and batch delay.

The cores are the shared resource: workers x intra-op threads, summed over every model served, never
exceeds the vCPUs (more would over-subscribe the cores, the mistake TorchServe's defaults make).
Fewer is allowed: one core left to TorchServe's Java frontend can pay on a small box, and only a
measurement says so. Batch sizes stop at what each archive was compiled for; delays come from a
short ladder. The space is small and discrete, which is why a structured search suits it (search.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator

from .. import defaults


@dataclass(frozen=True, order=True)
class ModelConfig:
    """One model's serving numbers."""

    workers: int
    intra: int  # torch intra-op threads per worker
    inter: int  # torch inter-op threads per worker
    batch: int
    max_batch_delay_ms: int

    def describe(self) -> str:
        return (f"{self.workers} worker(s) x {self.intra} thread(s){'' if self.inter == 1 else f' (+{self.inter} inter-op)'}, "
                f"batch {self.batch}, delay {self.max_batch_delay_ms} ms")


@dataclass(frozen=True, order=True)
class Candidate:
    """A config for every model served together: (model name, its numbers), in the order given."""

    models: tuple[tuple[str, ModelConfig], ...]

    def of(self, name: str) -> ModelConfig:
        return dict(self.models)[name]

    def with_model(self, name: str, config: ModelConfig) -> "Candidate":
        return Candidate(tuple((n, config if n == name else c) for n, c in self.models))

    @property
    def threads(self) -> int:
        return sum(c.workers * c.intra for _, c in self.models)

    @property
    def workers(self) -> int:
        return sum(c.workers for _, c in self.models)

    def describe(self) -> str:
        if len(self.models) == 1:
            return self.models[0][1].describe()
        return "; ".join(f"{n}: {c.describe()}" for n, c in self.models)


@dataclass(frozen=True)
class ModelLimits:
    """What one archive allows and suggests."""

    name: str
    max_batch: int
    batch: int  # the archive's suggestion: where the search starts
    max_batch_delay_ms: int


@dataclass(frozen=True)
class Space:
    vcpus: int
    models: tuple[ModelLimits, ...]
    delays_ms: tuple[int, ...] = defaults.TUNE_DELAYS_MS
    max_inter: int = defaults.TUNE_MAX_INTER_OP
    _limits: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.vcpus < len(self.models):
            raise ValueError(f"{len(self.models)} models need at least as many vCPUs, got {self.vcpus}")
        object.__setattr__(self, "_limits", {m.name: m for m in self.models})

    def batches(self, name: str) -> list[int]:
        """Powers of two up to the archive's max batch, plus the max and the suggestion."""
        limits = self._limits[name]
        powers = {2**i for i in range(limits.max_batch.bit_length()) if 2**i <= limits.max_batch}
        return sorted(powers | {limits.max_batch, min(limits.batch, limits.max_batch)})

    def delays(self, name: str) -> list[int]:
        return sorted(set(self.delays_ms) | {self._limits[name].max_batch_delay_ms})

    def fits(self, candidate: Candidate) -> bool:
        return candidate.threads <= self.vcpus and all(self._fits_model(n, c) for n, c in candidate.models)

    def _fits_model(self, name: str, config: ModelConfig) -> bool:
        return (config.workers >= 1 and config.intra >= 1 and 1 <= config.inter <= self.max_inter
                and config.batch in self.batches(name) and config.max_batch_delay_ms in self.delays(name))

    def coarse(self) -> list[Candidate]:
        """The first pass: the 1 x N versus N x 1 question. Each model gets an equal share of the vCPUs,
        split into 1, 2, 4, ... workers (and the whole share), each worker using its part fully; batch
        and delay are the archives' suggestions."""
        share = self.vcpus // len(self.models)
        counts = sorted({2**i for i in range(share.bit_length()) if 2**i <= share} | {share})
        return [Candidate(tuple((m.name, ModelConfig(w, share // w, 1, min(m.batch, m.max_batch), m.max_batch_delay_ms))
                                for m in self.models))
                for w in counts]

    def neighbours(self, candidate: Candidate) -> list[Candidate]:
        """One step in one dimension, in the order worth trying first: batch (the biggest lever on a
        CPU after threads), the worker split, the delay, then the finer thread counts."""
        found: list[Candidate] = []
        for step in (self._batch_steps, self._worker_steps, self._delay_steps, self._thread_steps, self._transfers):
            for neighbour in step(candidate):
                if neighbour != candidate and neighbour not in found and self.fits(neighbour):
                    found.append(neighbour)
        return found

    def _batch_steps(self, candidate: Candidate) -> Iterator[Candidate]:
        for name, config in candidate.models:
            for batch in _adjacent(self.batches(name), config.batch):
                yield candidate.with_model(name, replace(config, batch=batch))

    def _delay_steps(self, candidate: Candidate) -> Iterator[Candidate]:
        for name, config in candidate.models:
            for delay in _adjacent(self.delays(name), config.max_batch_delay_ms):
                yield candidate.with_model(name, replace(config, max_batch_delay_ms=delay))

    def _worker_steps(self, candidate: Candidate) -> Iterator[Candidate]:
        """One worker more or fewer, each using what the other models leave (threads follow workers)."""
        for name, config in candidate.models:
            free = self.vcpus - (candidate.threads - config.workers * config.intra)
            for workers in (config.workers + 1, config.workers - 1):
                if workers >= 1 and free // workers >= 1:
                    yield candidate.with_model(name, replace(config, workers=workers, intra=free // workers))

    def _thread_steps(self, candidate: Candidate) -> Iterator[Candidate]:
        for name, config in candidate.models:
            for intra in (config.intra - 1, config.intra + 1):
                if intra >= 1:
                    yield candidate.with_model(name, replace(config, intra=intra))
            for inter in range(1, self.max_inter + 1):
                if inter != config.inter:
                    yield candidate.with_model(name, replace(config, inter=inter))

    def _transfers(self, candidate: Candidate) -> Iterator[Candidate]:
        """Several models: one worker moves from one model to another (the cores they share)."""
        for giver, given in candidate.models:
            for taker, taken in candidate.models:
                if giver != taker and given.workers > 1:
                    moved = candidate.with_model(giver, replace(given, workers=given.workers - 1))
                    yield moved.with_model(taker, replace(taken, workers=taken.workers + 1))

    def size(self) -> int:
        """How many candidates the space holds (for the progress line's 'at most')."""
        per_model = [len(self.batches(m.name)) * len(self.delays(m.name)) * self.max_inter for m in self.models]
        splits = sum(1 for w in range(1, self.vcpus + 1) for t in range(1, self.vcpus // w + 1))
        total = 1
        for count in per_model:
            total *= count * splits
        return total


def _adjacent(ladder: list[int], value: int) -> list[int]:
    """The values next to `value` on the ladder, the larger first."""
    index = ladder.index(value) if value in ladder else 0
    return [ladder[i] for i in (index + 1, index - 1) if 0 <= i < len(ladder)]
