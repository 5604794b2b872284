"""Performance envelopes: throughput and latency against concurrency, per serving kind.

Observe-only and bounded: each finished generation adds one sample (its concurrency
at admission, time to first token, decode rate) to the envelope of its (hardware
class, model, engine+backend, quantization); each envelope keeps the newest
:data:`SAMPLES_PER_ENVELOPE` samples and at most :data:`MAX_ENVELOPES` envelopes are
kept (least recently fed dropped). :func:`report` turns them into per-concurrency
buckets and a knee: the concurrency past which aggregate throughput stops rising.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Final

import msgspec

SAMPLES_PER_ENVELOPE: Final = 512
MAX_ENVELOPES: Final = 64
# Aggregate throughput must rise by more than this to count as still rising.
KNEE_GAIN: Final = 0.05


@dataclass(frozen=True, slots=True)
class EnvelopeKey:
    hardware_class: str
    model_id: str
    engine: str
    quantization: str


@dataclass(frozen=True, slots=True)
class Sample:
    concurrency: int
    ttft_ms: float
    decode_tps: float


class EnvelopeBucket(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The requests admitted at one concurrency: their decode rates and first-token
    latencies."""

    concurrency: int
    requests: int
    mean_decode_tps: float
    p50_decode_tps: float
    aggregate_decode_tps: float
    """Each of ``concurrency`` sequences decodes at about the mean rate at once."""
    p50_ttft_ms: float
    p90_ttft_ms: float


class Envelope(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    hardware_class: str
    model_id: str
    engine: str
    quantization: str
    samples: int
    buckets: list[EnvelopeBucket]
    knee_concurrency: int | None


class Envelopes:
    def __init__(self) -> None:
        self._envelopes: OrderedDict[EnvelopeKey, deque[Sample]] = OrderedDict()

    def add(self, key: EnvelopeKey, sample: Sample) -> None:
        samples = self._envelopes.pop(key, None)
        if samples is None:
            samples = deque(maxlen=SAMPLES_PER_ENVELOPE)
            while len(self._envelopes) >= MAX_ENVELOPES:
                self._envelopes.popitem(last=False)
        samples.append(sample)
        self._envelopes[key] = samples

    def report(self) -> list[Envelope]:
        return [
            _envelope(key, list(samples))
            for key, samples in sorted(self._envelopes.items(), key=lambda kv: _sort_key(kv[0]))
        ]


def _sort_key(key: EnvelopeKey) -> tuple[str, str, str, str]:
    return (key.hardware_class, key.model_id, key.engine, key.quantization)


def _envelope(key: EnvelopeKey, samples: list[Sample]) -> Envelope:
    by_concurrency: dict[int, list[Sample]] = {}
    for sample in samples:
        by_concurrency.setdefault(max(1, sample.concurrency), []).append(sample)
    buckets = [_bucket(c, group) for c, group in sorted(by_concurrency.items())]
    return Envelope(
        hardware_class=key.hardware_class,
        model_id=key.model_id,
        engine=key.engine,
        quantization=key.quantization,
        samples=len(samples),
        buckets=buckets,
        knee_concurrency=knee(buckets),
    )


def _bucket(concurrency: int, samples: list[Sample]) -> EnvelopeBucket:
    rates = [s.decode_tps for s in samples if s.decode_tps > 0]
    ttfts = [s.ttft_ms for s in samples]
    mean_rate = statistics.fmean(rates) if rates else 0.0
    return EnvelopeBucket(
        concurrency=concurrency,
        requests=len(samples),
        mean_decode_tps=round(mean_rate, 2),
        p50_decode_tps=round(_percentile(rates, 50), 2),
        aggregate_decode_tps=round(mean_rate * concurrency, 2),
        p50_ttft_ms=round(_percentile(ttfts, 50), 1),
        p90_ttft_ms=round(_percentile(ttfts, 90), 1),
    )


def knee(buckets: list[EnvelopeBucket]) -> int | None:
    """The last concurrency whose aggregate throughput rose by more than
    :data:`KNEE_GAIN` over the one before; None with fewer than two buckets."""
    if len(buckets) < 2:
        return None
    best = buckets[0]
    for bucket in buckets[1:]:
        if bucket.aggregate_decode_tps > best.aggregate_decode_tps * (1 + KNEE_GAIN):
            best = bucket
        else:
            break
    return best.concurrency


def _percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]
