"""A pytest plugin (registered through the ``pytest11`` entry point) for implementers who want kpurgatory inside
their own test run:

    def test_my_timer_passes_the_corpus(kpurgatory_scenarios, kpurgatory_replay):
        for trace in kpurgatory_scenarios.values():
            if trace.header.profile == "timer":
                assert kpurgatory_replay(trace, MyAdapter()).ok
"""

from __future__ import annotations

import pytest

from kpurgatory.conformance.replay import ReplayReport, replay, scenarios
from kpurgatory.conformance.sut import SystemUnderTest
from kpurgatory.conformance.trace import Trace


@pytest.fixture(scope="session")
def kpurgatory_scenarios() -> dict[str, Trace]:
    """The bundled scenario corpus by stable id."""
    return scenarios()


@pytest.fixture
def kpurgatory_replay():
    """``replay(trace, system, level="exact")``: the system is initialised, replayed and closed; the report is
    returned (``.ok``, ``.first_failure``)."""

    def run(trace: Trace, system: SystemUnderTest, level: str = "exact") -> ReplayReport:
        hello = system.hello()
        try:
            return replay(trace, system, level, features=hello.features)
        finally:
            system.close()

    return run
