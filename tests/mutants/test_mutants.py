"""The conformance check finds every seeded bug (`kpurgatory.conformance.tools.mutants`) within a CI budget, and each
counterexample is a real test vector: it fails against its mutant and passes against the built-in implementation.

Budget: seed 0, at most 200 runs of up to 60 commands per mutant (the check's own step count), stopped at the first
failure. Shrinking is skipped here: it costs 2-50 s per mutant and proves nothing more about finding the bug;
``kpurgatory mutants`` shrinks and reports the lengths.
"""

from __future__ import annotations

import inspect

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.builtin import factory as builtin_factory
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.check.machine import Session
from kpurgatory.conformance.check.concurrent import run_concurrent_check
from kpurgatory.conformance.tools.mutants import (CONCURRENT_STEPS, CONCURRENT_THREADS, MUTANTS, SLOTS, Mutant,
                                                  Wheel, adapter_class)
from kpurgatory.conformance.traces.codec import Header, Trace

SEED, EXAMPLES = 0, 1000  # runs stop at the first failure; the budget only bounds slow kills
#: sequential runs that must all pass against a race mutant (each runs to the end: kept modest)
RACE_EXAMPLES = 200
SEQUENTIAL = [mutant for mutant in MUTANTS if not mutant.blind_in("exact")]
RACES = [mutant for mutant in MUTANTS if mutant.race]


class FirstFailure(BaseException):
    """Ends a check at its first failure, carrying the failing run (a BaseException, so the check does not catch
    it as a system failure)."""


def stop_at_first_failure(session: Session) -> None:
    if session.failing:
        raise FirstFailure(session.shortest)


def first_counterexample(mutant: Mutant, examples: int = EXAMPLES) -> Trace | None:
    """The first failing run of the check against ``mutant``, unshrunk; None if every run passed."""
    try:
        run_check(adapter_class(mutant), profile=mutant.profile, examples=examples, seed=SEED,
                  on_example=stop_at_first_failure)
    except FirstFailure as found:
        stop = found.args[0]
        assert stop.error is None, f"{mutant.id} crashed instead of misbehaving: {stop.summary}"
        return Trace(Header(f"mutant-{mutant.id}", mutant.profile, stop.params), stop.steps)
    return None


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: mutant.id)
def test_a_mutant_overrides_only_methods_impl_has(mutant):
    """A mutant whose method impl renamed or inlined away would be killed by an AttributeError or survive as a
    copy of impl; either way it would measure nothing."""
    base = next(kind for kind in SLOTS if issubclass(mutant.component, kind))
    own = [name for name, member in vars(mutant.component).items()
           if callable(member) or isinstance(member, staticmethod)]
    assert own, f"{mutant.component.__name__} overrides nothing"
    for name in own:
        assert any(name in vars(cls) for cls in inspect.getmro(base)), f"{base.__name__} has no {name}"


def test_the_assembly_alone_changes_nothing():
    class Unchanged(Wheel):
        __slots__ = ()

    for profile in ("timer", "purgatory"):
        identity = Mutant(f"unchanged_{profile}", "no change", "none", profile, Unchanged)
        assert run_check(adapter_class(identity), profile=profile, examples=60, seed=SEED).passed


def test_a_mutant_replaces_exactly_one_component():
    with pytest.raises(ValueError, match="exactly one"):
        Mutant("nothing", "not a component", "none", "timer", dict)


@pytest.mark.parametrize("mutant", SEQUENTIAL, ids=lambda mutant: mutant.id)
def test_the_check_kills_the_mutant_and_its_counterexample_replays(mutant, kpurgatory_replay):
    trace = first_counterexample(mutant)
    assert trace is not None, f"{mutant.id} survived {EXAMPLES} runs (seed {SEED})"
    assert not kpurgatory_replay(trace, adapter_class(mutant)()).ok
    assert kpurgatory_replay(trace, builtin_factory()).ok


@pytest.mark.parametrize("mutant", RACES, ids=lambda mutant: mutant.id)
def test_a_race_survives_the_sequential_check_and_the_concurrent_check_kills_it(mutant, tmp_path):
    """If a sequential run ever shows one of these, it is no race: unmark it."""
    assert first_counterexample(mutant, RACE_EXAMPLES) is None
    result = run_concurrent_check(adapter_class(mutant), threads=CONCURRENT_THREADS, runs=EXAMPLES,
                                  steps=CONCURRENT_STEPS, seed=SEED, out_dir=tmp_path, shrink_budget_s=10)
    assert not result.passed, f"{mutant.id} survived {EXAMPLES} concurrent runs (seed {SEED})"
    assert CliRunner().invoke(main, ["check-history", str(result.history_path)]).exit_code == 1


def test_the_command_writes_a_counterexample_that_replay_reproduces(tmp_path):
    runner = CliRunner()
    suite = runner.invoke(main, ["mutants", "--only", "purge_at_interval", "--seed", "0", "--examples", "20",
                                 "--out", str(tmp_path)])
    assert suite.exit_code == 0, suite.output
    assert "killed" in suite.output and "median" in suite.output
    trace = tmp_path / "purge_at_interval.jsonl"
    against_mutant = runner.invoke(main, ["replay", str(trace), "--impl",
                                          "kpurgatory.conformance.tools.mutants:purge_at_interval"])
    assert against_mutant.exit_code == 1, against_mutant.output
    assert runner.invoke(main, ["replay", str(trace), "--impl",
                                "kpurgatory.conformance.adapters.builtin:factory"]).exit_code == 0


def test_an_unknown_mutant_is_a_usage_error():
    result = CliRunner().invoke(main, ["mutants", "--only", "no_such_bug"])
    assert result.exit_code == 2 and "no_such_bug" in result.output


def test_kafkas_bug_history_is_seeded():
    """Each bug class of kafka-semantics §4 that a single-threaded purgatory or timer can have."""
    for ticket in ("664", "938", "1616", "1952", "2160", "17848", "18027"):
        assert any(mutant.id.startswith(f"kafka_{ticket}_") for mutant in MUTANTS), ticket


def test_the_modes_are_chosen_and_a_blind_mode_says_why():
    runner = CliRunner()
    assert runner.invoke(main, ["mutants", "--modes", "exact,sideways"]).exit_code == 2
    listed = runner.invoke(main, ["mutants", "--list", "--only", "kafka_17848_try_completed"]).output
    assert "exact: blind, a race: no single thread's calls show it" in listed
    unwritable = runner.invoke(main, ["mutants", "--only", "cancel_key_keeps_timeout", "--out", "/dev/null/none"])
    assert unwritable.exit_code == 3 and unwritable.output.startswith("Error: cannot write /dev/null/none"), \
        unwritable.output


def test_a_contributor_bug_is_caught_by_each_sequential_mode(tmp_path):
    result = CliRunner().invoke(main, ["mutants", "--only", "cancel_key_keeps_timeout", "--modes", "contract,exact",
                                       "--seed", "0", "--examples", "150", "--out", str(tmp_path)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0 and "killed 1/1 (exact 1, contract 1)" in result.output, result.output
    assert {path.name for path in tmp_path.glob("*.jsonl")} == {"cancel_key_keeps_timeout.jsonl",
                                                               "cancel_key_keeps_timeout-contract.jsonl"}
