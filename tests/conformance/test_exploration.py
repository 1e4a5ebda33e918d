"""The check's exploration with planted systems (tests/conformance/planted.py): a system that hangs or raises is
reported and shrunk like a divergence, in process and through the subprocess adapter; a system with two independent
bugs gets both reported in one run; Kafka's known misbehaviours at the edge of the domain are named findings with
short traces, and the run goes on and passes without them."""

import functools
import os
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.subprocess import SubprocessSystem, SystemCrashed
from kpurgatory.conformance.adapters.forked import ForkedSystem
from kpurgatory.conformance.check import machine
from kpurgatory.conformance.check.findings import Signature
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import vocabulary as v

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # planted.py, which the adapters these tests start import too
import planted  # noqa: E402


def served(name: str, timeout: float) -> functools.partial:
    return functools.partial(SubprocessSystem, f"{sys.executable} -m kpurgatory.conformance.adapters.stdio "
                                               f"planted:{name}", timeout=timeout)


@pytest.fixture
def importable(monkeypatch):
    """planted.py importable by adapters the tests start."""
    monkeypatch.setenv("PYTHONPATH", str(HERE))


def test_a_hung_in_process_call_is_stopped_with_its_process_and_the_harness_goes_on():
    system = ForkedSystem(planted.HangsInAdvance, timeout=0.2)
    system.init("timer", v.Params(1, 4, 0, 1000))
    system.step(v.TimerAdd("t0", 5))
    system.step(v.TimerCancel("t0"))
    started = time.monotonic()
    with pytest.raises(Exception, match="no answer to advance within 0.2 s"):
        system.step(v.Advance(1))
    assert time.monotonic() - started < 2.0
    with pytest.raises(ProcessLookupError):  # killed and reaped: it takes no core from the examples after it
        os.kill(system.pid, 0)
    with pytest.raises(Exception, match="no answer to advance"):
        system.step(v.Size())


def test_a_system_that_ends_its_own_process_has_crashed():
    system = ForkedSystem(planted.ExitsInAdvance, timeout=5.0)
    played = system.play("timer", v.Params(1, 4, 0, 1000), [v.TimerAdd("t0", 5), v.Advance(1)])
    assert len(played.observed) == 1 and isinstance(played.error, SystemCrashed)
    assert "system crashed: its process exited with code 3 before answering advance" == str(played.error)
    system.close()


def test_a_system_spinning_in_native_code_with_the_interpreter_lock_is_stopped_too():
    """A C extension's livelock holds the interpreter lock, so no thread of its process runs again (no time limit,
    no signal handler): its own process is killed from outside."""
    system = ForkedSystem(planted.SpinsInNativeCode, timeout=0.3)
    system.init("timer", v.Params(1, 4, 0, 1000))
    started = time.monotonic()
    played = system.play("timer", v.Params(1, 4, 0, 1000), [v.TimerAdd("t0", 5), v.Advance(1), v.Size()])
    assert time.monotonic() - started < 3.0
    assert [observation.result for observation in played.observed] == [None]  # the answer before the hang is kept
    assert "no answer to advance within 0.3 s" in str(played.error)
    system.close()


def test_a_system_that_hangs_in_process_is_reported_within_the_limit_and_shrunk():
    result = run_check(planted.HangsInAdvance, profile="timer", examples=6, steps=20, seed=2, timeout=0.3)
    assert not result.passed
    [hang] = result.failures
    assert hang.signature == Signature("hung", "advance", "")
    assert "system timed out: no answer to advance within 0.3 s" in hang.summary  # no adapter to name
    assert "adapter" not in hang.summary
    assert hang.shrunk_length <= 5 and isinstance(hang.counterexample.steps[-1].command, v.Advance)
    assert any(isinstance(step.command, v.TimerCancel) for step in hang.counterexample.steps)
    assert result.time_to_first_failure_s < 10


@pytest.mark.slow
def test_a_system_that_hangs_behind_an_adapter_is_restarted_and_shrunk(importable, tmp_path):
    """A hang is shrunk under a shorter limit, with a budget of hangs worth the same time, and the run it shrinks to
    is reported only once it hangs under the full limit too: so it shrinks as far as any failure, and what is
    reported does not rest on the shorter limit."""
    adapter, started = planted.counted_adapter("HangsInAdvance", 4.0)
    result = run_check(adapter, profile="timer", examples=3, steps=20, seed=2, out_dir=tmp_path, hang_budget=5)
    assert not result.passed
    [hang] = result.failures
    assert hang.signature == Signature("hung", "advance", "") and "within 4 s" in hang.summary
    assert "not fully shrunk" not in hang.summary
    assert hang.shrunk_length <= 5 and read_traces(hang.trace_path) == [hang.counterexample]
    # the first adapter, then one after each run that hung: the hang found; 5 runs' worth of the time limit while
    # Hypothesis shrank it and as much while its steps were deleted (under the shorter limit a hang is shrunk with);
    # the shrunk run under the full limit
    assert len(started) <= 2 + 2 * machine.shrink_hang_budget(5, 4.0) + 1


def test_a_system_that_raises_is_shrunk():
    result = run_check(planted.RaisesInCancel, profile="timer", examples=60, steps=20, seed=2)
    [failure] = result.failures
    assert failure.signature == Signature("raised", "timer_cancel", "KeyError")
    commands = [step.command for step in failure.counterexample.steps]
    assert len(commands) <= 3 and isinstance(commands[-1], v.TimerCancel)  # an add, and an advance if the wheel lags
    assert any(isinstance(command, v.TimerAdd) for command in commands)
    error = replay(failure.counterexample, planted.RaisesInCancel()).error
    assert error.startswith(f"step {len(commands)}: system failed")


def test_two_independent_bugs_are_both_reported_in_one_run(tmp_path):
    result = run_check(planted.TwoBugs, profile="timer", examples=60, steps=30, seed=4, out_dir=tmp_path)
    assert not result.passed
    assert {found.signature for found in result.failures} == {Signature("differs", "size", "result"),
                                                            Signature("differs", "advance", "events")}
    assert all(found.shrunk_length <= 4 for found in result.failures)
    assert sorted(path.name for path in tmp_path.glob("*.jsonl")) == ["check-timer-4-2.jsonl", "check-timer-4.jsonl"]
    assert result.counterexample == result.failures[0].counterexample


@pytest.mark.parametrize("profile", ["purgatory"])  # the timer profile: test_check_command_lists_findings_apart
def test_kafka_like_overflow_bugs_are_named_findings_and_the_run_passes(profile, tmp_path):
    result = run_check(planted.KafkaLike, profile=profile, examples=60, steps=30, seed=1, out_dir=tmp_path)
    assert result.passed and result.failures == ()
    names = {found.finding.name for found in result.findings}
    assert {"deadline-wraps", "interval-divides-by-zero"} <= names
    assert all(found.shrunk_length <= 3 for found in result.findings)
    assert all(str(found.finding) in found.summary for found in result.findings)
    assert (tmp_path / f"finding-{profile}-1-deadline-wraps.jsonl").exists()
    assert result.examples_run >= 60 and result.steps_run > 600  # exploration went on past the findings


def test_kafka_findings_through_an_adapter_that_reports_failures(importable):
    result = run_check(served("KafkaLike", 10.0), profile="timer", examples=30, steps=20, seed=3)
    assert result.passed
    assert "interval-divides-by-zero" in {found.finding.name for found in result.findings}
    assert all(found.shrunk_length <= 3 for found in result.findings)


def test_check_command_lists_findings_apart_and_passes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    arguments = ["check", "--impl", "planted:KafkaLike", "--profile", "timer", "--examples", "40", "--steps", "20",
                 "--seed", "3", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, arguments, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "PASS seed 3" in result.output and "0 distinct failures" in result.output
    for name in ("deadline-wraps", "interval-divides-by-zero"):
        assert f"Kafka finding ({name})" in result.output
    assert all(len(read_traces(path)[0].steps) <= 3 for path in tmp_path.glob("finding-timer-3-*.jsonl"))
    result = CliRunner().invoke(main, arguments + ["--fail-on-findings", "--max-failures", "1"], terminal_width=200)
    # a finding the system raised for is its failure to answer (3), one it answered wrongly a failure (1)
    assert (result.exit_code, result.output.splitlines()[-1]) in ((1, "FAIL seed 3"), (3, "ERROR seed 3")), \
        result.output
