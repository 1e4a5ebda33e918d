"""Shared by the third-party tests: generated timer runs steered around failures already documented, to show that
nothing else fails."""

from __future__ import annotations

from typing import Callable

import pytest
from hypothesis import strategies as st

from kpurgatory.conformance.check import strategies
from kpurgatory.model import vocabulary as v


@pytest.fixture(scope="session")
def steered_runs() -> Callable[..., st.SearchStrategy[tuple[v.Params, list[v.Command]]]]:
    """``steered_runs(delay, horizon)``: timer runs with every delay mapped through ``delay`` (a task keeps one
    delay, so the map must be a function) and the clock kept at or below ``horizon``."""

    def build(delay: Callable[[int], int], horizon: int):
        def steer(run):
            _, params, commands = run
            return params, [v.TimerAdd(c.task, delay(c.delay_ms)) if isinstance(c, v.TimerAdd) else c
                            for c in commands if not (isinstance(c, v.Advance) and c.to_ms > horizon)]

        return strategies.runs("timer").map(steer)

    return build
