"""The contract level of specs/vectors.md (§5.2, §5.3) as the Python driver tracks it from a case's ``expect`` alone
is the model's contract (`ContractMonitor`): over generated runs, answered by the model, by the planted mutants of
the built-in implementation and by the model's answers with one thing changed, under several declarations, both
fail at the same step (or neither does), naming a property the monitor names there."""

from __future__ import annotations

import random

import attrs
import pytest

from kpurgatory.conformance.adapters.forked import ForkedSystem
from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.check import strategies
from kpurgatory.conformance.check.choices import SeededChoices
from kpurgatory.conformance.tools import mutants, vectors
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, ContractMonitor, Declarations

RUNS = 60
CALL_LIMIT_S = 2.0
#: declarations the runs are judged under (the model's answers fail some: a Kafka timer fires before E)
DECLARED = {
    "timer": [KAFKA, Declarations(firing="never_early_up_to_tick_late", lazy_size=True),
              Declarations(firing="min_one_tick", negative_delays="rejected", runs_due_on_update=True),
              Declarations(max_deadline_ms=1 << 40, beyond_max_deadline="undefined")],
    "purgatory": [KAFKA, Declarations(kafka_version="2.0.0"), Declarations(kafka_version="3.9.0", lazy_size=True),
                  Declarations(firing="never_early_up_to_tick_late", max_deadline_ms=1 << 40)],
}


def runs(profile: str) -> list[tuple[v.Params, list[v.Command]]]:
    return [strategies.draw_run(SeededChoices(f"vector-contract/{profile}/{n}"), profile)[1:] for n in range(RUNS)]


def answers(factory, profile: str, params: v.Params, commands: list[v.Command]) -> list[v.Observation]:
    """The answers of a system ``factory`` makes, up to the first it fails to give (a mutant may raise, or spin:
    each call is limited, in a process of its own)."""
    system = ForkedSystem(factory, CALL_LIMIT_S)
    try:
        return list(system.play(profile, params, commands).observed)
    finally:
        system.close()


def changed(observation: v.Observation, rng: random.Random, ids: list[str]) -> v.Observation:
    """The observation with one thing changed: an event dropped, doubled, added or moved, the result off by one or
    flipped, an error added."""
    events, result = list(observation.events), observation.result
    choice = rng.randrange(8)
    if choice == 0 and events:
        del events[rng.randrange(len(events))]
    elif choice == 1 and events:
        events.insert(rng.randrange(len(events) + 1), rng.choice(events))
    elif choice == 2:
        op = rng.choice(ids)
        events.insert(rng.randrange(len(events) + 1), rng.choice(
            [v.Run(op), v.Complete(op, rng.choice(["try", "check", "force", "expire"])), v.Expire(op), v.Purge(1),
             v.StaleTry(op)]))
    elif choice == 3 and len(events) > 1:
        events.reverse()
    elif choice == 4 and isinstance(result, bool):
        result = not result
    elif choice == 5 and isinstance(result, int):
        result += rng.choice([-1, 1])
    elif choice == 6 and isinstance(result, list):
        result = result[1:] if result and rng.random() < 0.5 else [*result, rng.choice(ids)]
    else:
        return attrs.evolve(observation, error=rng.choice(list(v.ERRORS)), events=())
    return attrs.evolve(observation, events=tuple(events), result=result)


def first_failures(profile: str, params: v.Params, commands: list[v.Command], observed: list[v.Observation],
                   declarations: Declarations) -> tuple[tuple, tuple]:
    """(seq, properties) of the first step each judge fails, or where it stops judging (None when it never does):
    the monitor's, and the driver's from the vector case of the run."""
    case = vectors.vector_trace("diff", profile, params, commands[:len(observed)], "coverage",
                                declarations=Declarations(kafka_version=declarations.kafka_version))
    monitor = ContractMonitor(profile, params, declarations)
    tracker = vectors.CONTRACTS[profile](declarations, params.start_ms)
    by_monitor = by_tracker = None
    for step, answer in zip(case.steps, observed):
        if by_monitor is None:
            violations = monitor.observe(step.command, answer)
            if violations or not monitor.judging:
                by_monitor = (step.seq, {violation.prop for violation in violations})
        if by_tracker is None:
            problem = tracker.judge(step, answer)
            if problem is not None or not tracker.judging:
                by_tracker = (step.seq, problem and problem.partition(":")[0])
    return by_monitor, by_tracker


def agree(by_monitor, by_tracker, what: str) -> None:
    assert (by_monitor and by_monitor[0]) == (by_tracker and by_tracker[0]), what
    if by_tracker is not None and by_tracker[1] is not None:
        assert by_tracker[1] in by_monitor[1], what


def systems(profile: str) -> dict[str, object]:
    planted = {mutant.id: mutants.adapter_class(mutant) for mutant in mutants.MUTANTS
               if mutant.profile == profile and not mutant.race}
    return {"model": ModelSystem, **planted}


@pytest.mark.parametrize("profile", v.PROFILES)
def test_the_drivers_contract_fails_where_the_monitor_does_on_the_planted_mutants(profile):
    failed = set()
    for number, (params, commands) in enumerate(runs(profile)):
        for name, factory in systems(profile).items():
            observed = answers(factory, profile, params, commands)
            for declarations in DECLARED[profile]:
                by_monitor, by_tracker = first_failures(profile, params, commands, observed, declarations)
                agree(by_monitor, by_tracker, f"{name} on run {number} under {declarations}")
                if by_tracker and by_tracker[1]:
                    failed.add(name)
    assert len(failed) > 3, failed  # the judges are compared where they fail, not only where both pass


@pytest.mark.parametrize("profile", v.PROFILES)
def test_the_drivers_contract_fails_where_the_monitor_does_on_changed_answers(profile):
    rng, failures = random.Random(f"changed/{profile}"), 0
    for number, (params, commands) in enumerate(runs(profile)):
        observed = answers(ModelSystem, profile, params, commands)
        ids = sorted({getattr(command, "op", None) or getattr(command, "task", None) or "x" for command in commands})
        for attempt in range(6):
            at = rng.randrange(len(observed)) if observed else 0
            answered = [*observed[:at], *([changed(observed[at], rng, ids)] if observed else [])]
            for declarations in DECLARED[profile]:
                by_monitor, by_tracker = first_failures(profile, params, commands, answered, declarations)
                agree(by_monitor, by_tracker, f"run {number}, step {at + 1} changed to {answered[-1:]} under "
                                              f"{declarations}")
                failures += by_tracker is not None and by_tracker[1] is not None
    assert failures > RUNS  # most changes fail
