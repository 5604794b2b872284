"""The OptiQ planner: which tensor gets which width, and what a body may ask for."""

from __future__ import annotations

import math

import pytest

from skulk_core.store.optimize import (
    MAX_TARGET_BPW,
    MIN_TARGET_BPW,
    NOMINAL_BITS,
    GgmlType,
    OptimizeRequest,
    PlanRefused,
    TensorFacts,
    plan_precision,
    request_problem,
    result_model_id,
    tensor_bytes,
)

ROW = 1024  # a multiple of 256: every k-quant fits
LAYERS = 4


def tensor(name: str, shape: tuple[int, ...], kind: GgmlType = GgmlType.Q4_K) -> TensorFacts:
    weights = math.prod(shape)
    return TensorFacts(
        name=name, shape=shape, ggml_type=int(kind), nbytes=tensor_bytes(weights, kind)
    )


def model(embed_rows: int = 4096) -> list[TensorFacts]:
    found = [
        tensor("token_embd.weight", (ROW, embed_rows)),
        tensor("output_norm.weight", (ROW,), GgmlType.F32),
    ]
    for layer in range(LAYERS):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down"):
            found.append(tensor(f"blk.{layer}.{part}.weight", (ROW, ROW)))
        found.append(tensor(f"blk.{layer}.attn_norm.weight", (ROW,), GgmlType.F32))
    return found


def types(plan_choices: object) -> dict[str, GgmlType]:
    return {c.name: c.ggml_type for c in plan_choices}  # type: ignore[attr-defined]


def test_the_average_stays_at_or_under_the_target_and_uses_the_room() -> None:
    for target in (4.0, 4.5, 5.0, 6.0, 8.0):
        plan = plan_precision(model(), target, (4, 8))
        assert plan.achieved_bpw <= target
        # The room left is less than one more tensor's widening (the smallest: a layer's
        # matrix, ROW*ROW weights, from 4 to 8 bits).
        total = sum(c.weights for c in plan.choices)
        assert (target - plan.achieved_bpw) * total < 4 * ROW * ROW


def test_sensitive_tensors_are_widened_first() -> None:
    plan = types(plan_precision(model(embed_rows=ROW), 4.5, (4, 8)).choices)
    # The room is 1/8 of the weights at 8 bits: the embedding, then attention value and
    # output projections of the edge layers.
    assert plan["token_embd.weight"] == GgmlType.Q8_0
    assert plan["blk.0.attn_v.weight"] == GgmlType.Q8_0
    assert plan["blk.1.ffn_up.weight"] == GgmlType.Q4_K
    assert plan["blk.1.attn_q.weight"] == GgmlType.Q4_K


def test_an_embedding_too_large_for_the_budget_is_skipped_not_the_rest() -> None:
    plan = types(plan_precision(model(embed_rows=64 * ROW), 4.5, (4, 8)).choices)
    assert plan["token_embd.weight"] == GgmlType.Q4_K
    assert plan["blk.0.attn_v.weight"] == GgmlType.Q8_0
    assert plan["blk.3.attn_output.weight"] == GgmlType.Q8_0


def test_edge_layers_before_middle_ones_within_a_tier() -> None:
    layers = [tensor(f"blk.{i}.ffn_down.weight", (ROW, ROW)) for i in range(6)]
    plan = types(plan_precision(layers, 4 + 4 * 2 / 6, (4, 8)).choices)
    wide = {name for name, kind in plan.items() if kind == GgmlType.Q8_0}
    assert wide == {"blk.0.ffn_down.weight", "blk.5.ffn_down.weight"}


def test_rows_that_a_k_quant_cannot_hold_take_the_legacy_type() -> None:
    narrow = [tensor("blk.0.attn_q.weight", (640, 640)), tensor("blk.0.ffn_up.weight", (ROW, 640))]
    plan = types(plan_precision(narrow, 4.0, (4, 8)).choices)
    assert plan == {"blk.0.attn_q.weight": GgmlType.Q4_0, "blk.0.ffn_up.weight": GgmlType.Q4_K}


def test_norms_and_vectors_are_kept_and_counted_in_the_size() -> None:
    tensors = model()
    plan = plan_precision(tensors, 4.0, (4,), header_bytes=1000)
    names = {c.name for c in plan.choices}
    assert "output_norm.weight" not in names and "blk.0.attn_norm.weight" not in names
    kept = sum(t.nbytes for t in tensors if t.name not in names)
    quantized = sum(tensor_bytes(c.weights, c.ggml_type) for c in plan.choices)
    assert plan.estimated_bytes == 1000 + kept + quantized
    assert all(NOMINAL_BITS[c.ggml_type] == 4 for c in plan.choices)


def test_a_model_with_nothing_to_quantize_is_refused() -> None:
    with pytest.raises(PlanRefused):
        plan_precision([tensor("output_norm.weight", (ROW,), GgmlType.F32)], 4.5, (4, 8))


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (OptimizeRequest(), None),
        (OptimizeRequest(target_bpw=MIN_TARGET_BPW, candidate_bits=(2, 4)), None),
        (OptimizeRequest(target_bpw=MAX_TARGET_BPW, candidate_bits=(8, 16)), None),
        (OptimizeRequest(target_bpw=MIN_TARGET_BPW - 0.01, candidate_bits=(2,)), "between"),
        (OptimizeRequest(target_bpw=MAX_TARGET_BPW + 0.01), "between"),
        (OptimizeRequest(target_bpw=float("nan")), "between"),
        (OptimizeRequest(candidate_bits=()), "1 to"),
        (OptimizeRequest(candidate_bits=(4, 7)), "[7]"),
        (OptimizeRequest(candidate_bits=(4, 4)), "twice"),
        (OptimizeRequest(target_bpw=3.5, candidate_bits=(4, 8)), "narrowest"),
    ],
)
def test_request_bounds(body: OptimizeRequest, problem: str | None) -> None:
    found = request_problem(body)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_the_result_id_names_source_and_target() -> None:
    assert result_model_id("org/m-GGUF", 4.5) == "org/m-GGUF-optiq-4.5bpw"
    assert result_model_id("org/m-GGUF", 5.0) == "org/m-GGUF-optiq-5bpw"
