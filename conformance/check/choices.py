"""Where a generated run's choices come from: a seeded generator while exploring, Hypothesis while shrinking.

A run is drawn by plain code (`conformance.check.runs`) that asks a `Choices` for every decision it makes, each an
integer in a range. Exploring, `SeededChoices` answers from a `random.Random` seeded by the check's seed and the run's
number, and records the answers: a run costs a few microseconds of drawing per step, and any run of a check can be
drawn again on its own, in any process. Shrinking, `ConjectureChoices` answers from Hypothesis's
`ConjectureData`: the recorded answers are replayed into Hypothesis's shrinker, which deletes steps (each step is a
span) and moves every integer towards the low end of its range. So the low end of each range is the usual, simple
choice, as Hypothesis's own ``sampled_from`` and ``integers`` shrink, and `pick` puts its first element there.

`DrawChoices` answers from a Hypothesis ``draw`` function, so the same drawing code also makes Hypothesis strategies
(`conformance.check.strategies`) for tests and vectors.
"""

from __future__ import annotations

import contextlib
import random
from typing import Callable, Iterator, Protocol, Sequence, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

#: how far from the low end of a wide range a quarter of the seeded draws land (Hypothesis's own draws favour small
#: values the same way: small delays and gaps are where most of a wheel's edges are)
NEAR = 64
#: the label of a step's span: Hypothesis's shrinker tries deleting whole spans
STEP_LABEL = 0x6B707374  # "kpst"


class Choices(Protocol):
    def integer(self, low: int, high: int, usual: int | None = None) -> int:
        """An integer in [low, high]. ``usual`` is what a seeded run draws most of the time (three times in four),
        where uniform draws would miss it; it shrinks like any other value."""

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """The choices made within belong to one step of the run."""


def pick(choices: Choices, options: Sequence[T]) -> T:
    """One of ``options``; the first is the simplest."""
    return options[choices.integer(0, len(options) - 1)]


def roll(choices: Choices, sides: int) -> int:
    """0 .. sides - 1, uniformly while exploring; shrinks to 0."""
    return choices.integer(0, sides - 1)


class SeededChoices:
    """Choices from a seeded `random.Random`, recorded in ``made`` for the shrinker: uniform in the range, but for
    the ``usual`` value three times in four where there is one, and a quarter of the draws from a wide range within
    `NEAR` of its low end."""

    def __init__(self, seed: str | int):
        self.random = random.Random(seed)
        self.made: list[int] = []

    def integer(self, low: int, high: int, usual: int | None = None) -> int:
        roll = self.random.random()
        if usual is not None and roll < 0.75:
            value = usual
        elif high - low > NEAR and roll >= 0.75:  # a wide range: its low end too, where uniform draws rarely land
            value = low + self.random.randrange(NEAR + 1)
        else:
            value = self.random.randrange(low, high + 1)
        self.made.append(value)
        return value

    def step(self) -> contextlib.AbstractContextManager[None]:
        return NO_SPAN


#: a run's steps are spans for the shrinker alone
NO_SPAN = contextlib.nullcontext()


class ConjectureChoices:
    """Choices from Hypothesis's `ConjectureData` (the shrinker's replays)."""

    def __init__(self, data):
        self.data = data

    def integer(self, low: int, high: int, usual: int | None = None) -> int:
        return self.data.draw_integer(low, high)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        self.data.start_span(STEP_LABEL)
        try:
            yield
        finally:
            self.data.stop_span()


class DrawChoices:
    """Choices from a Hypothesis ``draw`` (inside ``st.composite``)."""

    def __init__(self, draw: Callable):
        self.draw = draw

    def integer(self, low: int, high: int, usual: int | None = None) -> int:
        return self.draw(st.integers(low, high))

    def step(self) -> contextlib.AbstractContextManager[None]:
        return NO_SPAN


def strategy(drawing: Callable[..., T], *args, **kwargs) -> st.SearchStrategy[T]:
    """``drawing(choices, *args, **kwargs)`` as a Hypothesis strategy."""
    return st.composite(lambda draw: drawing(DrawChoices(draw), *args, **kwargs))()
