"""Each spec mutant is refuted with a trace that the model passes and the mutant fails."""

import pytest

from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import vocabulary as v
from kpurgatory.specs.mutants import IMPL_MUTANTS, MUTANT_OBLIGATIONS, mutant_counterexamples
from kpurgatory.specs.purgatory import crosscheck
from kpurgatory.specs.wheel import KafkaWheel


@pytest.fixture(scope="module")
def counterexamples():
    return mutant_counterexamples()


def test_every_mutant_has_a_counterexample(counterexamples):
    assert set(counterexamples) == set(MUTANT_OBLIGATIONS) == set(IMPL_MUTANTS)


@pytest.mark.parametrize("key", list(MUTANT_OBLIGATIONS))
def test_counterexample_replays_on_the_model(counterexamples, key):
    report = replay(counterexamples[key])
    assert report.ok, report.first_failure


@pytest.mark.parametrize("key", ["purge_ge", "no_second_try"])
def test_the_purgatory_spec_mutant_disagrees_with_the_trace(counterexamples, key):
    trace = counterexamples[key]
    assert crosscheck(trace.commands, trace.header.params) == []
    assert crosscheck(trace.commands, trace.header.params, mutants=frozenset({key}))


def test_no_second_try_trace_is_the_lost_wakeup(counterexamples):
    steps = counterexamples["no_second_try"].steps
    watch = next(step for step in steps if isinstance(step.command, v.Watch))
    assert watch.command.ready_on == 2
    assert watch.observation.result is True
    assert watch.observation.events == (v.Complete("a", "try"),)


def test_the_rounded_up_wheel_disagrees_with_the_trace(counterexamples):
    trace = counterexamples["bucket_rounded_up"]
    params = trace.header.params
    add, advance = trace.commands[0], trace.commands[1]
    recorded = trace.steps[1].observation
    assert recorded.events == (v.Run("t"),)
    for round_up, runs in ((False, True), (True, False)):
        wheel = KafkaWheel(params.tick_ms, params.wheel_size, params.start_ms, round_up=round_up)
        wheel.add_task("t", add.delay_ms)
        wheel.advance(advance.to_ms)
        assert bool(wheel.ran) is runs


@pytest.mark.parametrize("key", [k for k, impl in IMPL_MUTANTS.items() if impl])
def test_counterexample_kills_the_matching_impl_mutant(counterexamples, key):
    mutants = pytest.importorskip("kpurgatory.conformance.tools.mutants")
    from kpurgatory.conformance.adapters.builtin import factory

    trace = counterexamples[key]
    assert replay(trace, factory()).ok
    assert not replay(trace, getattr(mutants, IMPL_MUTANTS[key])()).ok
