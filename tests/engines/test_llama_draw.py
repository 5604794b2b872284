"""The numpy draw keeps exactly what llama.cpp's own samplers keep, and draws by it.

llama.cpp's top-k, top-p, min-p and temperature samplers run here on a
token-data array (they need no model), over logits the size of Gemma 3's
vocabulary in several shapes: a sharp peak, a flat spread, ties. The tokens the
numpy path and the C kernel keep, and their probabilities, must match llama.cpp's.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import llama_cpp
import msgspec
import numpy as np
import pytest

from skulk_core.chat.generation import SamplingParams
from skulk_daemon.engines import _draw_native
from skulk_daemon.engines._llama_draw import _SUM_TOLERANCE, Draw, candidates, takes_draw

N_VOCAB = 262_144
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def _shapes() -> Iterator[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    base = rng.normal(0.0, 2.0, N_VOCAB).astype(np.float32)
    peaked = base.copy()
    peaked[rng.choice(N_VOCAB, 5, replace=False)] += np.array([14, 13, 12.5, 11, 9], np.float32)
    yield "peaked", peaked
    yield "flat", (base * 0.25).astype(np.float32)
    tied = peaked.copy()
    tied[rng.choice(N_VOCAB, 40, replace=False)] = tied.max()
    yield "tied", tied
    # Shapes that test the one-pass scan's running peak: leading -inf blocks
    # (logit-biased tokens), a new record in every block, and the peak in the
    # last, partial block of a vocabulary that is no multiple of the block.
    masked = peaked.copy()
    masked[:1_000] = -np.inf
    yield "masked-start", masked
    yield "rising", np.linspace(-100.0, 10.0, N_VOCAB, dtype=np.float32)
    late = base[: N_VOCAB - 13].copy()
    late[-2] = 25.0
    yield "late-peak", late


SHAPES = dict(_shapes())
CHAINS = [
    SamplingParams(max_tokens=1, temperature=0.8, top_p=0.95),
    SamplingParams(max_tokens=1, temperature=1.0, top_p=0.5),
    SamplingParams(max_tokens=1, temperature=0.7, top_k=40),
    SamplingParams(max_tokens=1, temperature=1.3, top_k=40, top_p=0.88, min_p=0.05),
    SamplingParams(max_tokens=1, temperature=0.9, min_p=0.1),
    SamplingParams(max_tokens=1, temperature=1.0, top_k=1),
    SamplingParams(max_tokens=1, temperature=0.6, top_p=0.999),
]


@pytest.fixture(params=["native", "numpy"])
def passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with the draw in the C kernel, then in numpy."""
    if request.param == "numpy":
        monkeypatch.setattr(_draw_native, "_LIB", None)
    return str(request.param)


def _scan(logits: np.ndarray, scale: float, gap: float) -> tuple[float, float, np.ndarray]:
    """The kernel's one pass (``skulk_scan``): the peak, the normaliser at the
    inverse temperature ``scale`` and the ids within ``gap`` of the peak."""
    assert _draw_native._LIB is not None
    scan = _draw_native._LIB.skulk_scan
    scan.restype = ctypes.c_double
    scan.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_double]
    scan.argtypes += [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    scan.argtypes += [ctypes.POINTER(ctypes.c_float)]
    ids = np.empty(len(logits), dtype=np.int32)
    count, peak = ctypes.c_int64(), ctypes.c_float()
    total = scan(logits.ctypes.data, len(logits), scale, gap, ids.ctypes.data, count, peak)
    return peak.value, float(total), ids[: count.value]


def test_the_kernel_is_built_and_its_pass_matches_float64() -> None:
    # A source checkout builds it (hatch_build.py); a silent build failure would
    # leave every draw on the slow numpy path.
    assert _draw_native.NATIVE
    rng = np.random.default_rng(9)
    cases = [*SHAPES.values(), rng.normal(0.0, 4.0, 100_003).astype(np.float32)]
    masked = SHAPES["peaked"].copy()
    masked[::7] = -np.inf  # logit-biased tokens
    cases.append(masked)
    for logits in cases:
        top = np.float32(logits.max())
        for temperature in (0.2, 0.8, 1.0, 4.0):
            exact = np.exp((logits.astype(np.float64) - top) * np.float32(1 / temperature)).sum()
            peak, total, _ = _scan(logits, 1 / temperature, 8.0)
            assert peak == top
            # Top-p's normaliser (at temperature 1) is held to the bound its cut
            # allows for. At another temperature the exponent logit * scale - peak *
            # scale is rounded to float32 (an error of a few 1e-6 at these logits),
            # which only an untruncated draw's two stages use.
            bound = _SUM_TOLERANCE if temperature == 1.0 else 1e-5
            assert abs(total - exact) / exact < bound, temperature
        for gap in (0.0, 3.0, 20.0, 200.0):
            _, _, ids = _scan(logits, 1.0, gap)
            assert np.array_equal(ids, np.flatnonzero(logits >= np.float32(top - gap)))


def _llama_cpp_keeps(logits: np.ndarray, params: SamplingParams) -> dict[int, float]:
    """What llama.cpp's samplers (in the engine's chain order) keep: id -> probability."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if params.top_k > 0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        llama_cpp.llama_sampler_chain_add(
            chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1)
        )
    if params.min_p > 0.0:
        llama_cpp.llama_sampler_chain_add(
            chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1)
        )
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    data = np.empty(len(logits), dtype=_TOKEN_DATA)
    data["id"] = np.arange(len(logits), dtype=np.int32)
    data["logit"] = logits
    data["p"] = 0.0
    array = llama_cpp.llama_token_data_array(
        data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
        size=len(logits),
        selected=-1,
        sorted=False,
    )
    try:
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
    finally:
        llama_cpp.llama_sampler_free(chain)
    kept = data[: array.size]
    scaled = np.exp(kept["logit"].astype(np.float64) - kept["logit"].max())
    return dict(zip(kept["id"].tolist(), (scaled / scaled.sum()).tolist(), strict=True))


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("params", CHAINS, ids=repr)
def test_the_draw_keeps_what_llama_cpp_keeps(
    shape: str, params: SamplingParams, passes: str
) -> None:
    logits = SHAPES[shape]
    expected = _llama_cpp_keeps(logits, params)
    kept = candidates(logits, params)
    assert kept is not None
    ids, probs = kept
    # Compared by logit, not id: among tied logits either side may keep any.
    theirs_logits = np.sort(logits[list(expected)])[::-1]
    ours_logits = logits[ids]
    assert np.all(np.diff(ours_logits) <= 0)  # handed out likeliest first
    if len(expected) <= 1_000 or params.top_p >= 1.0:  # no running sum involved
        assert np.array_equal(ours_logits, theirs_logits)
        theirs = np.sort(np.array(list(expected.values())))[::-1]
        assert np.allclose(np.sort(probs)[::-1], theirs, rtol=1e-4)
        return
    # A nucleus of tens of thousands of tokens: llama.cpp adds their float32
    # probabilities one by one, which drifts by up to ~1e-3 of the mass (its
    # nucleus for top_p 0.95 can hold 0.9497), so the boundary moves by a few
    # thousand near-zero tokens. What the two keep must differ by less than that.
    weights = np.exp(logits.astype(np.float64) - logits.max())
    mass = weights / weights.sum()
    assert abs(mass[ids].sum() - mass[list(expected)].sum()) < 2e-3
    assert mass[ids].sum() >= params.top_p  # the exact nucleus reaches top_p


def _frequencies(draw: Draw, logits: np.ndarray, n: int) -> np.ndarray:
    counts = np.zeros(len(logits))
    for _ in range(n):
        counts[draw(logits)] += 1
    return counts / n


def test_draws_follow_the_kept_distribution(passes: str) -> None:
    rng = np.random.default_rng(5)
    logits = rng.normal(0.0, 1.5, 500).astype(np.float32)
    params = SamplingParams(max_tokens=1, temperature=0.9, top_p=0.9, seed=11)
    ids, probs = candidates(logits, params) or (np.array([]), np.array([]))
    expected = np.zeros(len(logits))
    expected[ids] = probs
    seen = _frequencies(Draw(params), logits, 20_000)
    assert set(np.flatnonzero(seen)) <= set(ids.tolist())  # never outside the nucleus
    assert np.abs(seen - expected).max() < 0.01


def test_an_untruncated_draw_reaches_the_whole_vocabulary_in_proportion(passes: str) -> None:
    # One likely token and 19,999 unlikely ones at a high temperature: together
    # the unlikely ones, all outside the window near the peak, carry most of the
    # mass, so both stages of the draw are exercised.
    logits = np.full(20_000, -36.0, dtype=np.float32)
    logits[0] = 0.0
    params = SamplingParams(max_tokens=1, temperature=4.0, seed=2)
    assert candidates(logits, params) is None
    weights = np.exp((logits.astype(np.float64) - logits.max()) / params.temperature)
    expected = weights / weights.sum()
    draw = Draw(params)
    drawn = np.array([draw(logits) for _ in range(20_000)])
    assert abs(np.mean(drawn == 0) - expected[0]) < 0.01
    assert expected[1:].sum() > 0.6
    assert len(np.unique(drawn[drawn != 0])) > 5_000  # spread over the tail, not one token


def test_a_draw_over_llama_cpp_s_row_is_the_draw_over_the_array(passes: str) -> None:
    # The engine hands the draw the address of llama.cpp's logits row, not an array.
    logits = SHAPES["peaked"]
    address = logits.ctypes.data
    for params in CHAINS[:4]:
        seeded = msgspec.structs.replace(params, seed=5)
        by_array, by_address = Draw(seeded), Draw(seeded)
        drawn = [by_array(logits) for _ in range(30)]
        assert drawn == [by_address.at(address, len(logits)) for _ in range(30)]
        assert len(set(drawn)) > 1  # really drawn, not the argmax every time


def test_a_seed_repeats_its_draws_and_another_seed_does_not() -> None:
    logits = SHAPES["flat"]
    params = SamplingParams(max_tokens=1, temperature=1.0, top_p=0.95, seed=7)
    first, again = Draw(params), Draw(params)
    other = Draw(SamplingParams(max_tokens=1, temperature=1.0, top_p=0.95, seed=8))
    a = [first(logits) for _ in range(20)]
    assert a == [again(logits) for _ in range(20)]
    assert a != [other(logits) for _ in range(20)]


def test_penalties_and_grammars_stay_with_llama_cpp_s_chain() -> None:
    assert takes_draw(SamplingParams(max_tokens=1, temperature=0.8, top_p=0.9))
    assert not takes_draw(SamplingParams(max_tokens=1, temperature=0.0))
    assert not takes_draw(SamplingParams(max_tokens=1, temperature=0.8, repetition_penalty=1.1))
    assert not takes_draw(SamplingParams(max_tokens=1, temperature=0.8, presence_penalty=0.5))
    assert not takes_draw(SamplingParams(max_tokens=1, temperature=0.8, grammar='root ::= "a"'))
