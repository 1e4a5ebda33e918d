"""The symbolic transition relation of specs/purgatory.py agrees with model/ on random traces: longer runs and a
wider wheel (20 buckets) than refinement.purgatory enumerates exhaustively (tests/specs/test_specs_refinement.py)."""

import random

import pytest

from kpurgatory.model import vocabulary as v
from kpurgatory.specs.purgatory import ALL_KINDS, CANCEL, NO_CANCEL_KINDS, SHAPE, crosscheck

def random_commands(rng: random.Random, length: int, *, kinds=ALL_KINDS) -> list[v.Command]:
    """A random well-formed command sequence over the bounded ops and keys (with watched/delayed queries)."""
    out: list[v.Command] = []
    created: list[str] = []
    now = 0
    for _ in range(length):
        choice = rng.random()
        if choice < 0.3 or not created:
            op = rng.choice(SHAPE.op_names)
            keys = rng.choice([["k0"], ["k1"], ["k0", "k1"], ["k1", "k0"], ["k0", "k0"], ["k1", "k0", "k1"]])
            if op in created:
                out.append(v.Watch(op, keys))
            else:
                out.append(v.Watch(op, keys, rng.randint(1, 6), rng.choice([None, None, 1, 2, 3])))
                created.append(op)
            continue
        kind = rng.choice(["set_ready", "check", "check", "cancel_key", "force", "try", "cancel", "advance",
                           "advance", "watched", "delayed"])
        if kind in ("cancel_key", "cancel") and CANCEL not in kinds:
            kind = "check"
        op = rng.choice(created)
        if kind == "set_ready":
            out.append(v.SetReady(op))
        elif kind == "check":
            out.append(v.Check(rng.choice(SHAPE.key_names)))
        elif kind == "cancel_key":
            out.append(v.CancelKey(rng.choice(SHAPE.key_names)))
        elif kind == "force":
            out.append(v.Force(op))
        elif kind == "try":
            out.append(v.Try(op))
        elif kind == "cancel":
            out.append(v.Cancel(op))
        elif kind == "advance":
            now += rng.choice([0, 1, 1, 2, 3, 5])
            out.append(v.Advance(now))
        elif kind == "watched":
            out.append(v.Watched())
        else:
            out.append(v.Delayed())
    return out


def random_params(rng: random.Random) -> v.Params:
    return v.Params(tick_ms=1, wheel_size=rng.choice([2, 3, 20]), start_ms=0, purge_interval=rng.randint(0, 2))


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


def test_a_zero_delay_is_refused_not_rounded_up():
    """The model expires an op of delay 0 inside its watch; the symbolic purgatory has no such case, so a trace with
    one is refused by name instead of being checked as a delay of 1."""
    with pytest.raises(ValueError, match="watch of a with a delay of 0 is outside the symbolic purgatory"):
        crosscheck([v.Watch("a", ["k0"], 0)], v.Params(tick_ms=1, wheel_size=20))
