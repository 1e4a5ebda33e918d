"""The symbolic transition relation of specs/purgatory.py agrees with model/ on random traces."""

import random

import pytest

from kpurgatory.model import vocabulary as v
from kpurgatory.specs.purgatory import NO_CANCEL_KINDS, crosscheck, random_commands, random_params


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_agree(seed):
    rng = random.Random(seed)
    for _ in range(60):
        commands, params = random_commands(rng, 30), random_params(rng)
        assert crosscheck(commands, params) == [], (params, commands)


def test_random_traces_without_cancellation_agree():
    rng = random.Random(99)
    for _ in range(100):
        commands, params = random_commands(rng, 30, kinds=NO_CANCEL_KINDS), random_params(rng)
        assert crosscheck(commands, params) == []


@pytest.mark.parametrize("seed", range(3))
def test_random_traces_agree_through_z3(seed):
    """The same relation built as z3 terms (a case split over every command kind) and simplified after every step."""
    rng = random.Random(1000 + seed)
    for _ in range(2):
        commands, params = random_commands(rng, 20), random_params(rng)
        assert crosscheck(commands, params, through_z3=True) == []


@pytest.mark.parametrize("mutant", ["purge_ge", "no_second_try"])
def test_the_comparison_sees_a_mutant(mutant):
    rng = random.Random(7)
    differing = sum(bool(crosscheck(random_commands(rng, 30), random_params(rng), mutants=frozenset({mutant})))
                    for _ in range(40))
    assert differing > 0


def test_duplicates_and_stale_entries():
    """Kafka's transcript 14: a duplicate key puts the op in the list twice; a check completes it once and drops the
    second entry; a stale entry on another key stays until checked."""
    commands = [v.Watch("a", ["k0", "k0", "k1"], 5, 3), v.Watched(), v.Check("k0"), v.Watched(), v.Check("k1"),
                v.Watched(), v.Delayed()]
    assert crosscheck(commands, v.Params(tick_ms=1, wheel_size=20)) == []
