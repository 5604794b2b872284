"""Skulk against the same engine called directly, measured in ABBA order.

A benchmark names its sides as kinds (``"tts"``, ``"stt"``; ``""`` when it has one),
each with a ``skulk`` and a ``direct`` measure returning a speed (higher is faster).
Each round measures every kind's two sides, the first side alternating between
rounds so that drift (heat, caches, a neighbour's load) falls on both alike."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from bench._common import add_run_options

Measure = Callable[[], float]
"""One measurement: a speed (work per wall second)."""


def abba_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: the run options, ``--reps`` measured rounds and
    ``--warmup`` rounds not counted; the description is the docstring's first line."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    add_run_options(parser)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    return parser


def side_name(kind: str, side: str) -> str:
    return f"{kind}_{side}" if kind else side


def abba(
    kinds: Mapping[str, Mapping[str, Measure]],
    *,
    warmup: int,
    reps: int,
    after: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Each side's speeds over ``reps`` rounds after ``warmup`` rounds, keyed
    ``<kind>_<side>`` (``<side>`` for the kind ``""``); ``after`` runs after each
    counted round (to compare the sides' outputs)."""
    speeds: dict[str, list[float]] = {
        side_name(kind, side): [] for kind, sides in kinds.items() for side in sides
    }
    for rep in range(warmup + reps):
        order = ("skulk", "direct") if rep % 2 == 0 else ("direct", "skulk")
        measured = {
            side_name(kind, side): sides[side]() for kind, sides in kinds.items() for side in order
        }
        if rep >= warmup:
            for name, speed in measured.items():
                speeds[name].append(speed)
            if after is not None:
                after()
    return speeds
