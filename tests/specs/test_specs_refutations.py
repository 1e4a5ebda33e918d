"""Refutation traces are valid trace files that replay against the model and the built-in implementation, with the
documented outcomes; the Kafka emulation that executes the wheel findings agrees with the model where Kafka is
right."""

import random

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.builtin import factory
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.traces.codec import read_traces, write_traces
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.specs.wheel import KafkaWheel, kafka_outcome


def all_traces(outcomes):
    return [(name, label, trace) for name, outcome in outcomes.items() for label, trace in outcome.traces.items()]


def test_refutation_traces_round_trip_and_replay(outcomes, tmp_path):
    traces = all_traces(outcomes)
    assert len(traces) >= 9
    for name, label, trace in traces:
        path = write_traces(tmp_path / f"{name}.{label}.jsonl", trace)
        (loaded,) = read_traces(path)
        assert loaded == trace
        assert replay(loaded).ok, (name, label)
        assert replay(loaded, factory()).ok, (name, label)


def test_replay_command_runs_them(outcomes, tmp_path):
    paths = [str(write_traces(tmp_path / f"{name}.{label}.jsonl", trace)) for name, label, trace in all_traces(outcomes)]
    result = CliRunner().invoke(main, ["replay", *paths])
    assert result.exit_code == 0, result.output


def test_long_overflow_counterexample_against_the_model(outcomes):
    (trace,) = outcomes["wheel.kafka.expiration_wraps"].traces.values()
    add = next(step for step in trace.steps if isinstance(step.command, v.TimerAdd))
    assert add.command.delay_ms == 2**63 - 1
    assert add.observation.error == "delay_out_of_range" and not add.observation.events
    assert [step.observation.result for step in trace.steps if isinstance(step.command, v.Size)] == [0, 0]


def test_overflow_chain_counterexamples_against_the_model(outcomes):
    for label, trace in outcomes["wheel.kafka.interval_wraps"].traces.items():
        add = trace.steps[0].command
        runs = [step for step in trace.steps if v.Run("t") in step.observation.events]
        assert len(runs) == 1, label
        assert runs[0].command.to_ms == add.delay_ms  # the model runs it at its deadline (start 0)
        assert trace.steps[-1].observation.result == 0


def test_kafka_emulation_reproduces_the_documented_facts():
    """kafka-semantics §2.6.4-5: a delay near Long.MAX runs at once; with tick 1 / wheel 20 the chain is fine up to
    20^14 - 1, livelocks from 20^14, throws AIOOBE around 6e18 and divides by zero around 8e18; §2.6.1: tick 10."""
    wheel = KafkaWheel(1, 20, 0)
    wheel.advance(1)
    wheel.add_task("t", 2**63 - 1)
    assert wheel.ran == [("t", 1)]
    assert kafka_outcome(1, 20, 0, 20**14 - 1, 20**14 - 1) == f"runs at {20**14 - 1}"
    assert kafka_outcome(1, 20, 0, 20**14, 1).startswith("livelock")
    assert "ArrayIndexOutOfBoundsException" in kafka_outcome(1, 20, 0, 6 * 10**18, 1)
    assert "/ by zero" in kafka_outcome(1, 20, 0, 8 * 10**18, 1)
    assert kafka_outcome(10, 20, 0, 15, 10) == "runs at 10"
    assert kafka_outcome(10, 20, 0, 205, 200) == "runs at 200"


@pytest.mark.parametrize("seed", range(3))
def test_kafka_emulation_agrees_with_the_model(seed):
    """Where Kafka's arithmetic does not overflow, the emulation runs the same tasks at the same advances as the
    model, and holds the same number pending."""
    rng = random.Random(seed)
    for _ in range(30):
        tick, size = rng.choice([1, 1, 2, 10]), rng.choice([2, 3, 5, 20])
        start = rng.randint(0, 50)
        model = Model("timer", v.Params(tick_ms=tick, wheel_size=size, start_ms=start))
        kafka = KafkaWheel(tick, size, start)
        now = start
        for i in range(25):
            if rng.random() < 0.5:
                delay = rng.randint(0, 300)
                observation = model.step(v.TimerAdd(f"t{i}", delay))
                before = len(kafka.ran)
                kafka.add_task(f"t{i}", delay)
            else:
                now += rng.randint(0, 40)
                observation = model.step(v.Advance(now))
                before = len(kafka.ran)
                kafka.advance(now)
            ran_model = sorted(event.task for event in observation.events if isinstance(event, v.Run))
            assert ran_model == sorted(task for task, _ in kafka.ran[before:])
            assert model.step(v.Size()).result == kafka.pending()


def test_a_broken_level_wheel_fails_with_a_small_concrete_run_that_replays():
    """The composed wheel (symbolic tick, size and levels) with level 1 refusing one tick early: BMC finds the
    smallest run, names it, and writes a trace the model replays."""
    from kpurgatory.specs.wheel_levels import levels_not_early

    outcome = levels_not_early(mutated=True)
    assert outcome.status == "refuted"
    assert outcome.detail == "tick 1, wheel 2, start 0: add(delay=1) -> E=1, ran at 0"
    trace = outcome.traces["counterexample"]
    assert trace.header.params.tick_ms == 1 and trace.header.params.wheel_size == 2
    assert [type(step.command) for step in trace.steps] == [v.TimerAdd, v.Size]
    assert replay(trace).ok


def test_a_refuted_arithmetic_obligation_names_small_values():
    from kpurgatory.specs.wheel import refusal_exact

    outcome = refusal_exact(mutated=True)
    assert outcome.status == "refuted" and outcome.detail.startswith("counterexample: u=")
    assert set(outcome.witness) == {"u", "n", "c", "E"}
    assert all(abs(value) <= 8 for value in outcome.witness.values())
    assert replay(outcome.traces["counterexample"]).ok


def test_the_delay_queue_loses_a_bucket_whose_set_expiration_never_reports_a_change():
    from kpurgatory.specs.wheel_levels import queue_requeue

    assert queue_requeue().status == "proved"
    outcome = queue_requeue(mutated=True)
    assert outcome.status == "refuted"
    assert "entries 1, queued 0x" in outcome.detail


def test_a_deleted_clause_of_the_wheel_invariant_fails_with_a_counterexample_to_induction(monkeypatch):
    """Without "the bucket expires no later than E" the symbolic wheel's invariant is not inductive for
    wheel.timing.not_late, and the failure shows the values: a state with the entry in a bucket after E, an advance
    past E that does not release it, and the clause it breaks."""
    from kpurgatory.specs.core import NOT_INDUCTIVE, render_witness
    from kpurgatory.specs.wheel import SymbolicWheel, timing_not_late

    clauses = SymbolicWheel.invariant_clauses

    def without_bucket_le_E(self, s):
        kept = clauses(self, s)
        del kept["bucket_le_E"]
        return kept

    monkeypatch.setattr(SymbolicWheel, "invariant_clauses", without_bucket_le_E)
    outcome = timing_not_late()
    assert outcome.status == NOT_INDUCTIVE
    assert outcome.detail.startswith("tick 1, wheel 2, 3 levels: step property fails")
    pre, command = outcome.witness["pre-state"], outcome.witness["command"]
    assert pre["added"] and not pre["ran"] and pre["level"] >= 1
    assert pre["b"] > pre["E"] and pre["D"] <= command["to"] < pre["b"]  # tick 1: late once past D
    assert all(abs(value) <= 16 for value in pre.values())  # minimised: small enough to read
    assert command["kind"] == "advance"
    assert outcome.witness["clause broken"] == ["step property not_late"]
    lines = render_witness(outcome.witness)
    assert lines[0].startswith("pre-state: now=") and f"b={pre['b']}" in lines[0]
