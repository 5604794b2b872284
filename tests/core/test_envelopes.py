"""Performance envelopes: buckets by concurrency, percentiles, the knee, bounded memory."""

from __future__ import annotations

from skulk_core.diagnostics.envelopes import (
    MAX_ENVELOPES,
    SAMPLES_PER_ENVELOPE,
    EnvelopeKey,
    Envelopes,
    Sample,
    knee,
)

KEY = EnvelopeKey("cpu x2", "m", "llama.cpp/cpu", "Q4_K_M")


def test_buckets_percentiles_and_the_knee() -> None:
    envelopes = Envelopes()
    # Throughput rises to concurrency 4, then flattens: each sequence slows.
    for concurrency, rate in ((1, 70.0), (2, 60.0), (4, 40.0), (8, 20.0)):
        for ttft in (100.0, 200.0, 300.0, 400.0, 1000.0):
            envelopes.add(KEY, Sample(concurrency, ttft * concurrency, rate))
    [envelope] = envelopes.report()
    assert envelope.samples == 20
    buckets = {b.concurrency: b for b in envelope.buckets}
    assert [b.aggregate_decode_tps for b in envelope.buckets] == [70.0, 120.0, 160.0, 160.0]
    assert buckets[1].p50_ttft_ms == 300.0 and buckets[1].p90_ttft_ms == 1000.0
    assert buckets[2].requests == 5 and buckets[2].p50_decode_tps == 60.0
    assert envelope.knee_concurrency == 4


def test_a_lone_bucket_has_no_knee_and_cancelled_zero_concurrency_counts_as_one() -> None:
    envelopes = Envelopes()
    envelopes.add(KEY, Sample(0, 50.0, 0.0))
    [envelope] = envelopes.report()
    assert envelope.buckets[0].concurrency == 1
    assert envelope.knee_concurrency is None
    assert knee([]) is None


def test_memory_is_bounded_in_samples_and_envelopes() -> None:
    envelopes = Envelopes()
    for i in range(SAMPLES_PER_ENVELOPE + 10):
        envelopes.add(KEY, Sample(1, 1.0, float(i)))
    for i in range(MAX_ENVELOPES + 5):
        envelopes.add(EnvelopeKey("cpu", f"model-{i}", "e", "q"), Sample(1, 1.0, 1.0))
    report = envelopes.report()
    assert len(report) == MAX_ENVELOPES
    # The oldest envelope (KEY, fed first) went first.
    assert all(e.model_id != "m" for e in report)
