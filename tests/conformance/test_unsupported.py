"""Commands a system cannot execute (its hello's ``unsupported_commands``, e.g. ``cancel_key`` before Kafka 0.11):
the field is validated, the generators never draw them, the race schedules and scenarios that use them are skipped
and counted, and a trace that uses one is not replayed on that system."""

import random
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kpurgatory.conformance.adapters.builtin import BuiltinAdapter
from kpurgatory.conformance.adapters.subprocess import ProtocolViolation, SubprocessSystem
from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.conformance.check.concurrent import plan_run, run_concurrent_check
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.check.strategies import purgatory_commands
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import write_traces
from kpurgatory.conformance.traces.replay import scenarios
from kpurgatory.model import vocabulary as v

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # planted_releases.py, which the adapters these tests start import too
import planted_releases  # noqa: E402

SERVED = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio planted_releases:NoCancelForKey"
IMPL = "planted_releases:NoCancelForKey"
USING_CANCEL_KEY = sorted(trace_id for trace_id, trace in scenarios().items()
                          if any(isinstance(step.command, v.CancelKey) for step in trace.steps))


class Undeclared(planted_releases.NoCancelForKey):
    """The same system without the declaration: it raises on the cancel_key it is sent."""

    hello = BuiltinAdapter.hello


@pytest.fixture
def importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))


def test_an_adapter_declares_them_and_an_unknown_name_is_a_protocol_violation_naming_the_field(importable, tmp_path):
    system = SubprocessSystem(SERVED)
    try:
        assert system.hello().unsupported == {"cancel_key"}
    finally:
        system.close()
    liar = tmp_path / "liar.py"
    liar.write_text('import json, sys\nfor line in sys.stdin:\n    print(json.dumps({"seq": 0, "events": [], "result": '
                    '{"protocol_version": 1, "implementation": "x", "profiles": ["purgatory"], '
                    '"unsupported_commands": ["cancel_keys"]}}), flush=True)\n')
    system = SubprocessSystem(f"{sys.executable} {liar}")
    try:
        with pytest.raises(ProtocolViolation, match=r"hello result: unsupported_commands\[0\] must be one of"):
            system.hello()
    finally:
        system.close()


def test_an_in_process_hello_declares_them_by_name():
    assert Hello("x", ["purgatory"], unsupported=["cancel_key"]).unsupported == frozenset({"cancel_key"})
    with pytest.raises(ValueError, match="unsupported_commands: 'cancel_keys' is not a command"):
        Hello("x", ["purgatory"], unsupported=["cancel_keys"])
    with pytest.raises(TypeError, match="a list of command names"):
        Hello("x", ["purgatory"], unsupported="cancel_key")


def test_the_sequential_check_never_sends_one():
    """The system raises on cancel_key: declared, the check passes; undeclared, the same check meets it."""
    assert run_check(planted_releases.NoCancelForKey, profile="purgatory", examples=60, steps=30, seed=3).passed
    result = run_check(Undeclared, profile="purgatory", examples=60, steps=30, seed=3)
    assert not result.passed and result.failures[0].signature.command == "cancel_key"


@settings(max_examples=50)
@given(data=st.data())
def test_the_command_strategies_never_draw_one(data):
    p = v.Params(1, 4, 0, 2)
    commands = data.draw(purgatory_commands(p, unsupported=frozenset({"cancel_key", "shutdown"})))
    assert not any(isinstance(command, (v.CancelKey, v.Shutdown)) for command in commands)


def test_concurrent_plans_never_draw_one_and_the_schedule_that_needs_one_is_skipped():
    def kinds(unsupported):
        return {command.name for seed in range(20)
                for _, command in plan_run(random.Random(seed), 3, 20, unsupported).calls}

    assert "cancel_key" in kinds(frozenset())
    assert "cancel_key" not in kinds(frozenset({"cancel_key"}))
    result = run_concurrent_check(planted_releases.NoCancelForKey, threads=3, runs=5, steps=20, seed=1)
    assert result.passed, result.violations
    assert result.schedule_notes == (("cancel_key_during_check",
                                      "skipped: uses cancel_key, unsupported by the adapter"),)


def test_scenarios_that_use_one_are_skipped_and_counted(importable):
    outcome = CliRunner().invoke(main, ["scenarios", "--adapter", SERVED], terminal_width=250)
    assert outcome.exit_code == 0, outcome.output
    assert USING_CANCEL_KEY
    for trace_id in USING_CANCEL_KEY:
        [row] = [line for line in outcome.output.splitlines() if f" {trace_id} " in line]
        assert "skipped" in row and "uses cancel_key, unsupported by the adapter" in row
    passed = len(scenarios()) - len(USING_CANCEL_KEY)
    assert (f"{passed} passed, 0 failed, {len(USING_CANCEL_KEY)} skipped (uses cancel_key, unsupported by the "
            f"adapter)") in outcome.output


def test_a_trace_that_uses_one_cannot_be_replayed_on_that_system(tmp_path):
    path = write_traces(tmp_path / "cancel.jsonl", scenarios()[USING_CANCEL_KEY[0]])
    outcome = CliRunner().invoke(main, ["replay", str(path), "--impl", IMPL], terminal_width=250)
    assert outcome.exit_code == 2, outcome.output
    assert (f"SKIP {USING_CANCEL_KEY[0]}: cannot be replayed on this system: it uses cancel_key, unsupported by the "
            f"adapter") in outcome.output
    assert CliRunner().invoke(main, ["replay", str(path)]).exit_code == 0  # the trace itself is fine
