"""Declared semantics end to end (hello, the protocol, trace headers, the check) and set_ready clearing a condition."""

import functools
import json
import sys

from kpurgatory.conformance.adapters.builtin import factory as builtin
from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.examples.planted import late_by_a_tick
from kpurgatory.conformance.traces.codec import Header, Trace, command_to_json, dumps, loads, model_trace
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import Params
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, Declarations

LATE = "kpurgatory.conformance.examples.planted.late_by_a_tick"


def served(spec: str) -> SubprocessSystem:
    return SubprocessSystem(f"{sys.executable} -m kpurgatory.conformance.adapters.stdio {spec}")


def test_declarations_travel_in_hello_over_the_protocol_and_old_hellos_mean_kafka():
    system = served(f"{LATE}:factory")
    try:
        assert system.hello().declarations == Declarations(firing="never_early_up_to_tick_late")
    finally:
        system.close()
    system = served("kpurgatory.conformance.adapters.reference:factory")
    try:
        assert system.hello().declarations == KAFKA
    finally:
        system.close()


def test_trace_headers_record_declarations_and_omit_the_defaults():
    declared = Declarations(firing="min_one_tick", lazy_size=True, max_deadline_ms=10**12,
                            beyond_max_deadline="undefined", negative_delays="rejected")
    trace = Trace(Header("t", "timer", Params(), declarations=declared), ())
    assert loads(dumps(trace)) == [trace]
    assert "declarations" not in json.loads(dumps(Trace(Header("t", "timer", Params()), ())))["header"]


def test_a_counterexample_replays_with_the_allowances_it_was_judged_by():
    """The late timer declared: a recording of it (judged by its header's declarations) passes; the same recording
    under a header without them breaks on_time."""
    commands = [v.TimerAdd("a", 15), v.Advance(15), v.Advance(20)]
    system = late_by_a_tick.factory()
    system.init("timer", Params(10, 20, 0))
    recorded = [(command, system.step(command)) for command in commands]
    steps = model_trace(Header("t", "timer", Params(10, 20, 0)), commands).steps
    steps = [type(step)(step.seq, step.command, observation) for step, (_, observation) in zip(steps, recorded)]
    header = Header("t", "timer", Params(10, 20, 0), implementation="late wheel", declarations=system.declarations)
    assert replay(Trace(header, steps), level="contract").ok
    undeclared = Header("t", "timer", Params(10, 20, 0), implementation="late wheel")
    assert not replay(Trace(undeclared, steps), level="contract").ok


def test_a_late_by_a_tick_timer_passes_the_contract_when_it_declares_so_and_fails_when_not():
    declared = run_check(late_by_a_tick.factory, profile="timer", level="contract", examples=60, seed=3)
    assert declared.passed, declared.failure_summary
    undeclared = run_check(late_by_a_tick.undeclared, profile="timer", level="contract", examples=60, seed=3)
    assert not undeclared.passed and "breaks on_time" in undeclared.failure_summary
    assert "still pending after advance" in undeclared.failure_summary


def test_set_ready_false_clears_the_condition_in_the_model_and_the_implementation():
    commands = [v.Watch("o", ["k"], 50, 3), v.SetReady("o", ready=False), v.Check("k"), v.Try("o"),
                v.SetReady("o"), v.Check("k"),
                v.Watch("p", ["k"], 50), v.SetReady("p"), v.SetReady("p", ready=False), v.Check("k"), v.Try("p")]
    trace = model_trace(Header("t", "purgatory", Params()), commands)
    results = [step.observation.result for step in trace.steps]
    assert results == [False, None, 0, False, None, 1, False, None, None, 0, False]
    assert replay(trace, builtin(), "exact").ok


def test_set_ready_lines_name_ready_only_when_it_clears():
    assert command_to_json(v.SetReady("o")) == {"cmd": "set_ready", "args": {"op": "o"}}
    assert command_to_json(v.SetReady("o", ready=False)) == {"cmd": "set_ready", "args": {"op": "o", "ready": False}}
    trace = model_trace(Header("t", "purgatory", Params()), [v.Watch("o", ["k"], 5), v.SetReady("o", False)])
    assert loads(dumps(trace)) == [trace]
