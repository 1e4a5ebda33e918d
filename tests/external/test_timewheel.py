"""PyPI timewheel 0.0.5, through its in-process adapter (conformance/examples/pypi/timewheel_adapter.py), at the
contract level: the findings of conformance/examples/FINDINGS.md still hold, the check finds the first of them, and
runs without negative delays pass. Needs ``pip install timewheel==0.0.5``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.traces.codec import Header, model_trace, read_traces

timeWheel = pytest.importorskip("timeWheel", reason="needs `pip install timewheel==0.0.5`")

EXAMPLES = Path(__file__).resolve().parents[2] / "conformance" / "examples" / "pypi"
sys.path.insert(0, str(EXAMPLES))
from timewheel_adapter import factory  # noqa: E402  (an example adapter, not part of the package)

FINDINGS = read_traces(EXAMPLES / "findings" / "timewheel.jsonl")
#: trace id -> the step where the package breaks on_time (None: the trace passes)
EXPECTED = {"timewheel.negative-delay-never-runs": 2, "timewheel.control": None}


@pytest.mark.parametrize("trace", FINDINGS, ids=lambda trace: trace.trace_id)
def test_the_findings_still_hold(trace):
    report = replay(trace, factory(), "contract", features=())
    failing = report.first_failure
    assert report.error is None
    assert (failing and failing.seq) == EXPECTED[trace.trace_id]
    assert failing is None or failing.failures[0].what.prop == "on_time"


def test_the_check_finds_the_lost_negative_delay():
    result = run_check(factory, profile="timer", level="contract", examples=100, seed=1)
    assert not result.passed and "on_time" in result.failure_summary
    assert result.shrunk_length == 2  # timer_add(t0, a negative delay), then an advance


def test_every_timeloop_shares_one_task_table():
    """Finding: the task table is a class attribute, so a task inserted into one TimeLoop is in all of them (the
    adapter gives each run its own table)."""
    first, second = timeWheel.TimeLoop(), timeWheel.TimeLoop()
    first.insertTask(print, 5)
    try:
        assert print in [task for tasks in second._TimeLoop__loop.values() for task in tasks]
    finally:
        for tasks in first._TimeLoop__loop.values():
            if print in tasks:
                tasks.remove(print)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_delays_of_zero_and_more_meet_the_contract(data, steered_runs):
    params, commands = data.draw(steered_runs(lambda delay: max(delay, 0), horizon=2**62))
    trace = model_trace(Header("steered", "timer", params), commands)
    assert replay(trace, factory(), "contract", features=()).ok
