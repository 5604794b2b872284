"""OptiQ store optimization: the wire of ``/store/models/{id}/optimize`` and the pure
planner that gives each tensor of a GGUF its precision.

A mixed-precision requantization towards ``target_bpw``: every quantizable tensor
starts at the narrowest of ``candidate_bits``; then, most sensitive first, each is
widened to the widest candidate that still keeps the whole model's average at or
under the target. Sensitivity follows what llama.cpp's own mixes (Q4_K_M and kin)
and OptiQ-style studies keep wide: the token embeddings and the output head first,
then the attention value and output projections, then ``ffn_down``, then the rest;
inside each tier the first and last layers before the middle ones.

Bits per weight are *nominal* (a 4-bit type counts 4, an 8-bit type 8, the way the
target is stated): ``achieved_bpw`` is the average of the chosen types' nominal bits
weighted by each tensor's weights, over the quantized tensors (norms and other small
tensors stay F32 and are not counted). The size estimate counts real block bytes
(a Q4_0 block spends 4.5 bits a weight on its scale), so it is larger than
``achieved_bpw`` suggests.

Each candidate width maps to one llama.cpp type, a k-quant when the tensor's rows are
a multiple of its 256-weight super-block and otherwise the legacy 32-weight type of
at least that width (llama.cpp cannot store a 640-wide row as Q4_K).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from enum import IntEnum
from typing import Final, Literal

import msgspec

DEFAULT_TARGET_BPW: Final = 4.5
DEFAULT_CANDIDATE_BITS: Final = (4, 8)
SUPPORTED_BITS: Final = (2, 3, 4, 5, 6, 8, 16)
MAX_CANDIDATE_BITS: Final = len(SUPPORTED_BITS)
MIN_TARGET_BPW: Final = 2.0
MAX_TARGET_BPW: Final = 16.0
OPTIQ_TAG: Final = "optiq"
"""The capability (and so the ``tags`` badge) an optimized card carries."""
MIB: Final = 1024 * 1024


class GgmlType(IntEnum):
    """The ggml tensor types the planner reads or writes (values are ggml's)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q5_0 = 6
    Q8_0 = 8
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14


# (weights per block, bytes per block), from ggml's type traits.
BLOCK_LAYOUT: Final[dict[GgmlType, tuple[int, int]]] = {
    GgmlType.F32: (1, 4),
    GgmlType.F16: (1, 2),
    GgmlType.Q4_0: (32, 18),
    GgmlType.Q5_0: (32, 22),
    GgmlType.Q8_0: (32, 34),
    GgmlType.Q2_K: (256, 84),
    GgmlType.Q3_K: (256, 110),
    GgmlType.Q4_K: (256, 144),
    GgmlType.Q5_K: (256, 176),
    GgmlType.Q6_K: (256, 210),
}
# Per candidate width: the k-quant (rows a multiple of 256), else the legacy type.
TYPE_FOR_BITS: Final[dict[int, tuple[GgmlType, GgmlType]]] = {
    2: (GgmlType.Q2_K, GgmlType.Q4_0),
    3: (GgmlType.Q3_K, GgmlType.Q4_0),
    4: (GgmlType.Q4_K, GgmlType.Q4_0),
    5: (GgmlType.Q5_K, GgmlType.Q5_0),
    6: (GgmlType.Q6_K, GgmlType.Q8_0),
    8: (GgmlType.Q8_0, GgmlType.Q8_0),
    16: (GgmlType.F16, GgmlType.F16),
}
NOMINAL_BITS: Final[dict[GgmlType, int]] = {
    GgmlType.F16: 16,
    GgmlType.Q4_0: 4,
    GgmlType.Q5_0: 5,
    GgmlType.Q8_0: 8,
    GgmlType.Q2_K: 2,
    GgmlType.Q3_K: 3,
    GgmlType.Q4_K: 4,
    GgmlType.Q5_K: 5,
    GgmlType.Q6_K: 6,
}
# llama.cpp leaves these in their float type whatever the file type says.
_NEVER_QUANTIZED: Final = re.compile(r"(_norm|\.norm|ffn_gate_inp|pos_embd|token_types)\.weight$")
_LAYER: Final = re.compile(r"^blk\.(\d+)\.")
_TIERS: Final = (
    (".token_embd.", ".output."),
    (".attn_v.", ".attn_output.", ".attn_kv_b.", ".attn_qkv."),
    (".ffn_down",),
)

OptimizeState = Literal["running", "completed", "failed"]


# -- wire ---------------------------------------------------------------------------


class OptimizeRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /store/models/{model_id}/optimize``'s optional body."""

    target_bpw: float = DEFAULT_TARGET_BPW
    candidate_bits: tuple[int, ...] = DEFAULT_CANDIDATE_BITS


class OptimizeStarted(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: str
    status: Literal["started"] = "started"
    target_bpw: float
    result_model_id: str
    """The id the optimized model will be stored and placed under."""


class OptimizeStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One optimization job; a started job is not a completed or placed model."""

    model_id: str
    status: OptimizeState
    progress: float
    """0 to 1: the share of tensors llama.cpp has written, then publishing."""
    message: str
    target_bpw: float
    candidate_bits: tuple[int, ...]
    result_model_id: str
    result_path: str | None = None
    achieved_bpw: float | None = None
    estimated_size_mb: float | None = None
    error: str | None = None


def request_problem(request: OptimizeRequest) -> str | None:
    """Why the body is refused (400), or None."""
    bits = request.candidate_bits
    if not 1 <= len(bits) <= MAX_CANDIDATE_BITS:
        return f"candidate_bits must list 1 to {MAX_CANDIDATE_BITS} widths"
    unknown = sorted(set(bits) - set(SUPPORTED_BITS))
    if unknown:
        return f"candidate_bits {unknown} are not supported; choose among {list(SUPPORTED_BITS)}"
    if len(set(bits)) != len(bits):
        return "candidate_bits lists a width twice"
    target = request.target_bpw
    if not math.isfinite(target) or not MIN_TARGET_BPW <= target <= MAX_TARGET_BPW:
        return f"target_bpw must be between {MIN_TARGET_BPW} and {MAX_TARGET_BPW}"
    if target < min(bits):
        return (
            f"target_bpw {target} is below the narrowest candidate ({min(bits)} bits); "
            "add a narrower width or raise the target"
        )
    return None


def result_model_id(model_id: str, target_bpw: float) -> str:
    """``org/name-optiq-4.5bpw``: where the optimized copy of ``model_id`` is stored."""
    return f"{model_id}-optiq-{target_bpw:g}bpw"


# -- planning -----------------------------------------------------------------------


class TensorFacts(msgspec.Struct, frozen=True, kw_only=True):
    """One tensor of the source GGUF: its name, ggml shape (``ne[0]`` first, the row
    length) and type."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    nbytes: int
    """Bytes of its data in the source (what it costs when kept as it is)."""

    @property
    def weights(self) -> int:
        return math.prod(self.shape)


class TensorChoice(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    weights: int
    ggml_type: GgmlType


class PrecisionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Each quantizable tensor's type; what is not listed keeps its own."""

    choices: tuple[TensorChoice, ...]
    achieved_bpw: float
    estimated_bytes: int
    """The result file's bytes: the header and every tensor's data."""

    @property
    def estimated_size_mb(self) -> float:
        return round(self.estimated_bytes / MIB, 2)


class PlanRefused(Exception):
    """The source cannot be planned (nothing to quantize, an unknown tensor type)."""


def quantizable(tensor: TensorFacts) -> bool:
    """Whether llama.cpp's quantizer would quantize the tensor at all."""
    return (
        tensor.name.endswith(".weight")
        and len([d for d in tensor.shape if d > 1]) >= 2
        and _NEVER_QUANTIZED.search(tensor.name) is None
        and tensor.shape[0] % BLOCK_LAYOUT[GgmlType.Q4_0][0] == 0
    )


def type_for(bits: int, row: int) -> GgmlType:
    """The llama.cpp type storing ``bits``-wide weights in rows of ``row`` weights."""
    k_quant, legacy = TYPE_FOR_BITS[bits]
    return k_quant if row % BLOCK_LAYOUT[k_quant][0] == 0 else legacy


def sensitivity_order(names: Sequence[str], n_layers: int) -> list[str]:
    """``names``, most sensitive first (see the module docstring)."""

    def rank(name: str) -> tuple[int, int, str]:
        tier = next(
            (i for i, marks in enumerate(_TIERS) if any(m in f".{name}" for m in marks)),
            len(_TIERS),
        )
        layer = _LAYER.match(name)
        edge = 0
        if layer is not None:
            index = int(layer.group(1))
            edge = 1 + min(index, max(n_layers - 1 - index, 0))
        return tier, edge, name

    return sorted(names, key=rank)


def tensor_bytes(weights: int, ggml_type: GgmlType) -> int:
    block, size = BLOCK_LAYOUT[ggml_type]
    return -(-weights // block) * size


def plan_precision(
    tensors: Sequence[TensorFacts],
    target_bpw: float,
    candidate_bits: Sequence[int],
    header_bytes: int = 0,
) -> PrecisionPlan:
    """Each quantizable tensor's type, widest where the target allows, most sensitive
    first; ``header_bytes`` (the source file's metadata and vocabulary, kept as they
    are) counts towards the size estimate. Pure: the same inputs give the same plan."""
    quantized = [t for t in tensors if quantizable(t)]
    if not quantized:
        raise PlanRefused("the model has no tensor llama.cpp can quantize")
    widths = sorted(set(candidate_bits))
    by_name = {t.name: t for t in quantized}
    chosen = {t.name: type_for(widths[0], t.shape[0]) for t in quantized}
    total = sum(t.weights for t in quantized)
    spent = sum(NOMINAL_BITS[chosen[t.name]] * t.weights for t in quantized)
    budget = target_bpw * total
    n_layers = 1 + max(
        (int(m.group(1)) for t in quantized if (m := _LAYER.match(t.name))), default=0
    )
    for name in sensitivity_order(list(by_name), n_layers):
        tensor = by_name[name]
        now = NOMINAL_BITS[chosen[name]]
        for bits in reversed(widths):
            wider = type_for(bits, tensor.shape[0])
            extra = (NOMINAL_BITS[wider] - now) * tensor.weights
            if extra > 0 and spent + extra <= budget:
                chosen[name] = wider
                spent += extra
                break
    kept = sum(t.nbytes for t in tensors if t.name not in chosen)
    choices = tuple(
        TensorChoice(name=t.name, weights=t.weights, ggml_type=chosen[t.name]) for t in quantized
    )
    return PrecisionPlan(
        choices=choices,
        achieved_bpw=round(spent / total, 3),
        estimated_bytes=header_bytes
        + kept
        + sum(tensor_bytes(c.weights, c.ggml_type) for c in choices),
    )
