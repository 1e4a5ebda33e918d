"""npm timer-wheel 1.0.0, through its Node adapter (conformance/examples/pypi/npm-timer-wheel), at the contract
level: the findings of conformance/examples/FINDINGS.md still hold, the check finds one of them, and runs
steered around both pass. Needs node and ``npm ci --prefix conformance/examples/pypi/npm-timer-wheel``."""

from __future__ import annotations

import functools
import shlex
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.traces.codec import Header, model_trace, read_traces
from kpurgatory.model import vocabulary as v

EXAMPLES = Path(__file__).resolve().parents[2] / "conformance" / "examples" / "pypi"
ADAPTER = f"node {shlex.quote(str(EXAMPLES / 'npm-timer-wheel' / 'adapter.js'))}"
FINDINGS = read_traces(EXAMPLES / "findings" / "npm-timer-wheel.jsonl")
#: trace id -> the step where the package breaks on_time (None: the trace passes)
EXPECTED = {
    "npm-timer-wheel.due-task-parked-in-bucket-0": 3,
    "npm-timer-wheel.sweep-skipped-when-the-index-wraps": 3,
    "npm-timer-wheel.control": None,
}
#: the finest layer sweeps 64 buckets of 1024 ticks' index range; below 1024 no index wraps
ERA = 1024

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (EXAMPLES / "npm-timer-wheel" / "node_modules" / "timer-wheel").is_dir(),
    reason="needs node and `npm ci --prefix conformance/examples/pypi/npm-timer-wheel`")


@pytest.fixture(scope="module")
def system():
    adapter = SubprocessSystem(ADAPTER)
    adapter.hello()
    yield adapter
    adapter.close()


@pytest.mark.parametrize("trace", FINDINGS, ids=lambda trace: trace.trace_id)
def test_the_findings_still_hold(trace, system):
    report = replay(trace, system, "contract", features=())
    failing = report.first_failure
    assert report.error is None
    assert (failing and failing.seq) == EXPECTED[trace.trace_id]
    assert failing is None or failing.failures[0].what.prop == "on_time"


def test_the_check_finds_one_of_the_findings():
    result = run_check(functools.partial(SubprocessSystem, ADAPTER), profile="timer", level="contract",
                       examples=100, seed=1)
    assert not result.passed and "on_time" in result.failure_summary
    # both findings shrink to an add and an advance (the shrinker may keep one advance before them): a task added with
    # delay 0 or less, parked; or an advance whose sweep crosses a multiple of the era, skipped
    commands = [step.command for step in result.counterexample.steps]
    assert result.shrunk_length <= 3 and isinstance(commands[-1], v.Advance)
    parked = any(isinstance(command, v.TimerAdd) and command.delay_ms <= 0 for command in commands)
    wrapped = commands[-1].to_ms >= ERA
    assert parked or wrapped


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_positive_delays_within_one_era_meet_the_contract(data, system, steered_runs):
    params, commands = data.draw(steered_runs(lambda delay: 1 + abs(delay) % (ERA // 2), horizon=ERA - 1))
    trace = model_trace(Header("steered", "timer", params), commands)
    assert replay(trace, system, "contract", features=()).ok
