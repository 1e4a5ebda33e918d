"""The conformance check: the model passes against itself, broken systems are caught with short counterexamples that
replay as failures, runs are reproducible from their seed, and the command, JUnit report and pytest fixture work."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from kpurgatory.impl import SELECTED
from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.check.coverage import ITEMS
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.traces.codec import dumps, read_traces
from kpurgatory.model import vocabulary as v


class LateReaper(ModelSystem):
    """Reports what each advance fired one advance late, as a reaper that oversleeps would."""

    def init(self, profile, params):
        super().init(profile, params)
        self.held = ()

    def step(self, command):
        observation = super().step(command)
        if not isinstance(command, v.Advance):
            return observation
        fired = tuple(e for e in observation.events if not isinstance(e, v.Purge))
        held, self.held = self.held, fired
        return attrs.evolve(observation, events=held + tuple(e for e in observation.events if e not in fired))


class SilentPurge(ModelSystem):
    """Purges, but does not report it."""

    def step(self, command):
        observation = super().step(command)
        return attrs.evolve(observation, events=tuple(e for e in observation.events if not isinstance(e, v.Purge)))


class CrashesOnCancelKey(ModelSystem):
    def step(self, command):
        if isinstance(command, v.CancelKey):
            raise RuntimeError("cancel_key is not implemented")
        return super().step(command)


@pytest.mark.parametrize("profile", ["timer", "purgatory"])
def test_the_model_passes_against_itself_reaching_every_coverage_item(profile):
    result = run_check(ModelSystem, profile=profile, examples=500, steps=60, seed=3)
    assert result.passed, result.failure_summary
    assert result.counterexample is None and result.failure_summary == ""
    assert result.examples_run >= 100 and result.steps_run > 100 * 20 and result.distinct_states > 100
    shards = ["watcher shards hit (of 512)"] if profile == "purgatory" else []
    assert list(result.coverage) == [*ITEMS[profile], *shards]
    assert [item for item, count in result.coverage.items() if not count] == []


@pytest.mark.parametrize("profile", ["timer", "purgatory"])
def test_the_model_passes_against_itself_at_the_contract_level(profile):
    assert run_check(ModelSystem, profile=profile, level="contract", examples=20, steps=30, seed=1).passed


@pytest.mark.parametrize("level", ["exact", "contract"])
def test_a_late_reaper_is_caught_with_a_short_counterexample_that_replays(level, tmp_path):
    result = run_check(LateReaper, profile="timer", level=level, examples=100, steps=30, seed=3, out_dir=tmp_path)
    assert not result.passed
    trace = result.counterexample
    assert result.shrunk_length == len(trace.steps) <= 3
    assert isinstance(trace.steps[-1].command, v.Advance) and trace.steps[-1].observation.events
    assert read_traces(result.trace_path) == [trace]
    assert result.table_path.read_text().count("✗") == 1 and "FAIL" in result.table_path.read_text()
    if level == "contract":
        assert "breaks on_time" in result.failure_summary
    reproduced = replay(trace, LateReaper(), level)
    assert reproduced.first_failure.seq == len(trace.steps)
    assert replay(trace, ModelSystem(), level).ok  # the counterexample is a test vector: the model's observations


def test_a_silent_purge_is_caught_at_the_exact_level():
    result = run_check(SilentPurge, profile="purgatory", examples=200, steps=40, seed=4)
    assert not result.passed and re.search(r"expected (\d+) events, observed (\d+)", result.failure_summary)
    expected, observed = map(int, re.search(r"expected (\d+) events, observed (\d+)", result.failure_summary).groups())
    assert expected == observed + 1  # the purge, and nothing else, is missing
    last = result.counterexample.steps[-1]
    assert isinstance(last.command, v.Advance) and any(isinstance(e, v.Purge) for e in last.observation.events)
    assert result.time_to_first_failure_s is not None and result.shrink_runs > 0


def test_a_system_that_raises_fails_with_a_shrunk_run():
    result = run_check(CrashesOnCancelKey, profile="purgatory", examples=50, steps=20, seed=5)
    assert not result.passed
    assert "system failed: RuntimeError: cancel_key is not implemented" in result.failure_summary
    assert [step.command.name for step in result.counterexample.steps] == ["cancel_key"]
    assert result.report.error == result.failure_summary


class WrongOnce(ModelSystem):
    """Miscounts its first size() ever, and never again: a failure no replay reproduces."""

    miscounted = False

    def step(self, command):
        observation = super().step(command)
        if isinstance(command, v.Size) and not WrongOnce.miscounted:
            WrongOnce.miscounted = True
            return attrs.evolve(observation, result=observation.result + 1)
        return observation


def test_a_failure_that_does_not_reproduce_is_reported_with_the_run_that_failed(monkeypatch):
    monkeypatch.setattr(WrongOnce, "miscounted", False)
    result = run_check(WrongOnce, profile="timer", examples=50, steps=30, seed=1)
    assert not result.passed and "did not fail again when run once more" in result.failure_summary
    assert result.counterexample.steps[-1].command == v.Size()


def test_a_check_is_reproducible_from_its_seed():
    first, second = (run_check(LateReaper, profile="timer", examples=50, steps=30, seed=6) for _ in range(2))
    assert dumps(first.counterexample) == dumps(second.counterexample)
    assert (first.examples_run, first.shrink_runs) == (second.examples_run, second.shrink_runs)
    first, second = (run_check(ModelSystem, profile="timer", examples=20, steps=30, seed=7) for _ in range(2))
    assert (first.steps_run, first.distinct_states, first.coverage) == \
           (second.steps_run, second.distinct_states, second.coverage)


REFERENCE = "kpurgatory.conformance.adapters.reference:factory"


def test_check_command_passes_the_model_and_writes_junit(tmp_path):
    junit = tmp_path / "junit.xml"
    result = CliRunner().invoke(main, ["check", "--impl", REFERENCE, "--examples", "8", "--steps", "15", "--seed",
                                       "11", "--out", str(tmp_path), "--junit", str(junit)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "PASS seed 11" in result.output and "timer" in result.output and "purgatory" in result.output
    suites = ET.parse(junit).getroot()
    assert (suites.get("tests"), suites.get("failures")) == ("2", "0")
    assert [case.get("name") for case in suites.iter("testcase")] == ["timer (exact)", "purgatory (exact)"]
    assert list(tmp_path.glob("*.jsonl")) == []


def test_check_command_fails_with_a_counterexample_that_replay_reproduces(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    broken = "test_check:LateReaper"
    junit = tmp_path / "junit.xml"
    runner = CliRunner()
    result = runner.invoke(main, ["check", "--impl", broken, "--profile", "timer", "--examples", "100", "--steps",
                                  "30", "--seed", "3", "--out", str(tmp_path), "--junit", str(junit)],
                           terminal_width=200)
    assert result.exit_code == 1, result.output
    trace = tmp_path / "check-timer-3.jsonl"
    assert f"counterexample: {trace}" in result.output and "--seed 3" in result.output
    assert (tmp_path / "check-timer-3.txt").exists()
    failure = ET.parse(junit).getroot().find("./testsuite/testcase/failure")
    assert str(trace) in failure.text
    assert runner.invoke(main, ["replay", str(trace), "--impl", broken]).exit_code == 1
    assert runner.invoke(main, ["replay", str(trace), "--impl", REFERENCE]).exit_code == 0


def test_check_command_without_a_target_checks_the_builtin_implementation_on_both_profiles(tmp_path):
    result = CliRunner().invoke(main, ["check", "--examples", "2", "--steps", "5", "--seed", "1", "--out",
                                       str(tmp_path)], terminal_width=200)
    assert result.exit_code in (0, 1), result.output
    assert f"checking kpurgatory.impl ({SELECTED.name}) (timer, purgatory; level exact" in result.output


class TimerOnly(ModelSystem):
    def hello(self):
        return attrs.evolve(super().hello(), profiles=("timer",))


def test_check_command_checks_the_declared_profiles_and_rejects_others(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    runner = CliRunner()
    result = runner.invoke(main, ["check", "--impl", "test_check:TimerOnly", "--profile", "purgatory"])
    assert result.exit_code == 2 and "implements timer, not purgatory" in result.output
    result = runner.invoke(main, ["check", "--impl", "test_check:TimerOnly", "--examples", "3", "--steps", "5",
                                  "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0 and "(timer; level exact" in result.output


def test_the_pytest_fixture_passes_a_conforming_system(kpurgatory_check):
    result = kpurgatory_check(ModelSystem, profile="timer", examples=10, steps=20, seed=1)
    assert result.passed and result.steps_run > 0


def test_the_pytest_fixture_fails_with_the_step_table_and_the_trace(kpurgatory_check, tmp_path):
    with pytest.raises(pytest.fail.Exception) as failure:
        kpurgatory_check(LateReaper, profile="timer", examples=100, steps=30, seed=3)
    message = str(failure.value)
    assert "fails the timer profile at level exact (seed 3)" in message and "✗" in message
    path = Path(message.split("counterexample: ")[1].strip())
    assert path.is_relative_to(tmp_path) and read_traces(path)[0].header.profile == "timer"


def test_a_counterexample_alone_reproduces_the_failure_and_a_live_system_replaces_its_answers(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    result = run_check(LateReaper, profile="timer", examples=100, steps=30, seed=3, out_dir=tmp_path)
    assert not result.passed
    (trace,) = read_traces(result.trace_path)
    last = trace.steps[-1]
    assert last.system is not None and last.system != last.observation  # the system's answer beside the model's
    runner = CliRunner()
    alone = runner.invoke(main, ["replay", str(result.trace_path)], terminal_width=200)
    assert alone.exit_code == 1, alone.output
    assert f"FAIL {trace.trace_id} at step {last.seq}" in alone.output
    assert "system differs from the model" in alone.output
    assert runner.invoke(main, ["replay", str(result.trace_path), "--impl", REFERENCE]).exit_code == 0
    assert runner.invoke(main, ["replay", str(result.trace_path), "--impl", "test_check:LateReaper"]).exit_code == 1
    old = tmp_path / "without-answers.jsonl"  # a counterexample as written before answers were recorded
    old.write_text(dumps(attrs.evolve(trace, steps=[attrs.evolve(step, system=None) for step in trace.steps])))
    assert '"system"' not in old.read_text()
    assert runner.invoke(main, ["replay", str(old)]).exit_code == 0  # only the model's observations: they agree
