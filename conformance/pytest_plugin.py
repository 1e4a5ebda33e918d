"""A pytest plugin (registered through the ``pytest11`` entry point) for implementers who want kpurgatory inside
their own test run:

    def test_my_timer_passes_the_corpus(kpurgatory_scenarios, kpurgatory_replay):
        for trace in kpurgatory_scenarios.values():
            if trace.header.profile == "timer":
                assert kpurgatory_replay(trace, MyAdapter()).ok

    def test_my_timer_passes_the_check(kpurgatory_check):
        kpurgatory_check(MyAdapter, profile="timer")   # fails with the counterexample's step table and path

    def test_my_purgatory_is_thread_safe(kpurgatory_check_concurrently):
        kpurgatory_check_concurrently(MyAdapter, threads=4)   # fails with the violations and the history
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from kpurgatory.conformance.check.sequential import CheckResult, run_check
from kpurgatory.conformance.check.concurrent import ConcurrentResult, render, run_concurrent_check
from kpurgatory.conformance.traces.replay import ReplayReport, replay, scenarios
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.traces.codec import Trace


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


@pytest.fixture
def kpurgatory_check(tmp_path: Path):
    """``check(factory, profile=..., level="exact", examples=..., steps=..., seed=None)``: run the conformance check
    (`kpurgatory.conformance.check.sequential.run_check`) on the systems ``factory`` makes. A failure fails the test with the
    step table, the seed and the path of the counterexample trace (under the test's tmp_path) to replay with
    ``kpurgatory replay``; a pass returns the `CheckResult` (coverage, distinct states, ...)."""

    def check(factory: Callable[[], SystemUnderTest], *, profile: str, **options) -> CheckResult:
        result = run_check(factory, profile=profile, out_dir=tmp_path / "kpurgatory", **options)
        if not result.passed:
            pytest.fail(result.failure_report(), pytrace=False)
        return result

    return check


@pytest.fixture
def kpurgatory_check_concurrently(tmp_path: Path):
    """``check(factory, threads=4, runs=100, steps=60, seed=None)``: the concurrent check
    (`kpurgatory.conformance.check.concurrent.run_concurrent_check`). A failure fails the test with the violations, the
    whole history and the path of its file (under the test's tmp_path); a pass returns the `ConcurrentResult`."""

    def check(factory: Callable[[], SystemUnderTest], *, threads: int = 4, runs: int = 100, steps: int = 60,
              **options) -> ConcurrentResult:
        result = run_concurrent_check(factory, threads=threads, runs=runs, steps=steps,
                                      out_dir=tmp_path / "kpurgatory", **options)
        if not result.passed:
            pytest.fail(f"{result.implementation} fails the concurrent check (seed {result.seed}); history: "
                        f"{result.history_path}\n{render(result.history, result.violations)}", pytrace=False)
        return result

    return check
