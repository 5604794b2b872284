"""Skulk against the same engine called directly, measured in ABBA order, each side
with the other quiescent.

A benchmark names its sides as kinds (``"tts"``, ``"stt"``; ``""`` when it has one),
each with a ``skulk`` and a ``direct`` measure returning a speed (higher is faster).
Each round measures every kind's two sides, the first side alternating between
rounds so that drift (heat, caches, a neighbour's load) falls on both alike. Every
measure runs through :class:`~bench._isolation.Isolation` (sides named ``skulk`` and
``direct``): after ``--gap`` seconds, once both sides are idle, with the other side's
CPU checked flat while it runs (a leak fails the benchmark loudly)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from bench._common import add_run_options
from bench._isolation import Isolation

Measure = Callable[[], float]
"""One measurement: a speed (work per wall second)."""


def abba_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: the run options, ``--reps`` measured rounds, ``--warmup``
    rounds not counted and ``--gap`` seconds between runs; the description is the
    docstring's first line."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    add_run_options(parser)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between runs")
    return parser


def side_name(kind: str, side: str) -> str:
    return f"{kind}_{side}" if kind else side


def abba(
    kinds: Mapping[str, Mapping[str, Measure]],
    *,
    isolation: Isolation,
    warmup: int,
    reps: int,
    after: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Each side's speeds over ``reps`` rounds after ``warmup`` rounds, keyed
    ``<kind>_<side>`` (``<side>`` for the kind ``""``); ``after`` runs after each
    counted round (to compare the sides' outputs). ``isolation``'s sides are named
    ``skulk`` and ``direct``."""
    speeds: dict[str, list[float]] = {
        side_name(kind, side): [] for kind, sides in kinds.items() for side in sides
    }
    for rep in range(warmup + reps):
        order = ("skulk", "direct") if rep % 2 == 0 else ("direct", "skulk")
        measured = {
            side_name(kind, side): isolation.run(side, sides[side])
            for kind, sides in kinds.items()
            for side in order
        }
        if rep >= warmup:
            for name, speed in measured.items():
                speeds[name].append(speed)
            if after is not None:
                after()
    return speeds
