"""Refinement between model/ and the encodings (specs/refinement.py, wheel.model.expiration_guard): the obligations
hold on the real model and refute their mutants with replayable traces. The one-edit breakages of model/ they must
catch are in the catalogue of tests/specs/test_breakages.py."""

import pytest

from kpurgatory.conformance.traces import replay as replay_module
from kpurgatory.conformance.traces.replay import format_command, replay
from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import DelayedOperationPurgatory
from kpurgatory.model.timer import LONG_MAX, TimingWheel
from kpurgatory.specs import core, refinement, wheel
from kpurgatory.specs.core import BOUND, PROVED, REFUTED, load_all


def cancel_leaving_key(self, key):
    """cancelForKey that leaves a watched key in the map, with an empty list."""
    watched = key in self.watchers
    cancelled = ORIGINAL_CANCEL_FOR_KEY(self, key)
    if watched:
        self.watchers[key] = []
    return cancelled


ORIGINAL_CANCEL_FOR_KEY = DelayedOperationPurgatory.cancel_for_key


@pytest.fixture(scope="module")
def registry():
    return load_all()


@pytest.mark.parametrize("name, expected", [("refinement.purgatory", BOUND), ("refinement.wheel", BOUND),
                                            ("wheel.model.expiration_guard", PROVED)])
def test_the_obligations_hold_on_the_model(registry, name, expected):
    outcome = registry[name].run()
    assert outcome.status == expected, outcome.detail
    if expected == BOUND:  # the bound reached is stated: the depth, the states expanded and transitions checked
        depth = refinement.PURGATORY_DEPTH if name == "refinement.purgatory" else refinement.WHEEL_DEPTH
        assert outcome.witness["depth"] == depth and f"depth {depth}" in outcome.detail
        assert 100 < outcome.witness["states"] < outcome.witness["transitions"]


@pytest.mark.parametrize("name", ["refinement.purgatory", "refinement.wheel", "wheel.model.expiration_guard"])
def test_each_mutant_is_refuted_with_a_trace(registry, name):
    outcome = registry[name].run(mutated=True)
    assert outcome.status == REFUTED
    assert not replay(outcome.traces["counterexample"]).ok


def test_a_state_only_divergence_shows_in_a_read_out():
    """cancel_key leaving its key changes no observation of the call itself: the trace's read-outs show it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DelayedOperationPurgatory, "cancel_for_key", cancel_leaving_key)
        divergence, _ = refinement.purgatory_refines(refinement.PURGATORY_PARAMS[0], 2)
        trace = refinement.purgatory_trace("refinement.purgatory", refinement.PURGATORY_PARAMS[0], divergence,
                                           frozenset())
    assert [type(c) for c in divergence.commands] == [v.Watch, v.CancelKey]
    last = trace.steps[-1]
    assert isinstance(last.command, v.WatcherKeys)
    assert last.observation.result == ["k0"] and last.system.result == []


def test_kafka_wheel_is_left_out_where_java_wraps():
    """Near Long.MAX the shared arithmetic's exact sums leave the long range: KafkaWheel is not compared there."""
    shape = refinement.WheelShape(1, 2, LONG_MAX - 6)
    w = refinement.wheels_after(shape, [v.TimerAdd("t1", 6)], wheel.KAFKA)
    assert w.kafka is None and w.arithmetic.overflowed
    w = refinement.wheels_after(shape, [v.TimerAdd("t1", 1)], wheel.KAFKA)
    assert w.kafka is not None


def advance_that_never_ends(self, time_ms):
    """A wheel clock that stays put: the bucket released at its expiration is re-inserted into itself, forever."""


def overflow_that_breaks(self):
    raise ZeroDivisionError("a broken overflow wheel")


@pytest.mark.parametrize("name", ["refinement.purgatory", "refinement.wheel"])
@pytest.mark.parametrize("broken, failure", [
    (("advance_clock", advance_that_never_ends), "hung: no answer within 0.2 s"),
    (("add_overflow_wheel", overflow_that_breaks), "raised ZeroDivisionError: a broken overflow wheel")])
def test_a_model_that_hangs_or_raises_refutes_the_obligation_with_its_run(registry, name, broken, failure):
    """The obligation ends within its time limit per step, refuted by the shortest run that got there: a trace
    whose replay on the broken model stops at that step, the reference broken (exit 3)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TimingWheel, *broken)
        patch.setattr(core, "MODEL_STEP_S", 0.2)
        patch.setattr(replay_module, "MODEL_STEP_S", 0.2)
        outcome = core.run_one(registry[name])
        assert outcome.status == REFUTED and outcome.witness["failure"] == failure, outcome.detail
        trace = outcome.traces["counterexample"]
        assert outcome.witness["commands"] == len(trace.steps) <= refinement.WHEEL_DEPTH
        *answered, last = trace.steps
        assert last.observation == v.Observation() and format_command(last.command) in outcome.detail
        report = replay(trace)
        assert report.exit_code == 3 and report.model_broke_at == last.seq
        assert [outcome.seq for outcome in report.outcomes] == [step.seq for step in answered]
        assert f"step {last.seq}: the reference model {failure}" in report.error


@pytest.mark.slow
def test_a_counterexample_trace_on_which_the_model_hangs_ends_its_obligation(registry):
    """A refutation's trace is recorded by model/ too: when model/ hangs on the counterexample's own commands, the
    obligation is refuted by that run within the time limit, never left waiting."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TimingWheel, "advance_clock", advance_that_never_ends)
        patch.setattr(core, "MODEL_STEP_S", 0.2)
        outcome = core.run_one(registry["wheel.timing.not_late"])
        mutant = outcome.mutant
        assert mutant.status == REFUTED and mutant.method.startswith("model/ under a 0.2 s limit per step"), mutant.detail
        assert mutant.witness["failure"] == "hung: no answer within 0.2 s"
        assert mutant.traces["counterexample"].steps[-1].observation == v.Observation()
