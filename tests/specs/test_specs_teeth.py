"""The proofs have teeth: breaking the subject they share, or one line of a transition, refutes them.

Kept cheap for CI: the symbolic wheel is checked for one configuration here (`kpurgatory prove` checks all)."""

import attrs
import pytest
import z3

from kpurgatory.specs import purgatory, wheel
from kpurgatory.specs.core import NOT_INDUCTIVE, PROVED, REFUTED, fresh_z3_context


@pytest.fixture(autouse=True)
def one_configuration(monkeypatch):
    monkeypatch.setattr(wheel, "CONFIGURATIONS", ((2, 2, 2),))
    fresh_z3_context()


def refuse_one_tick_early(E, c, T, n):
    return z3.And(z3.Not(E < c + T + T), E < c + T * n)


def rounded_up(E, T, n):
    vid = (E + T - 1) / T
    return vid, vid % n, vid * T


def test_the_timing_obligations_hold_for_kafka():
    for check in (wheel.timing_not_early, wheel.timing_not_late, wheel.advance_terminates, wheel.cascade_conservation):
        assert check().status == PROVED, check.__name__


def test_breaking_the_shared_accepted_refutes_timing(monkeypatch):
    """accepted() refusing one tick early: the entry runs on add before its tick starts."""
    monkeypatch.setattr(wheel, "KAFKA", attrs.evolve(wheel.KAFKA, accepted=refuse_one_tick_early))
    outcome = wheel.timing_not_early()
    assert outcome.status == REFUTED, outcome.detail
    assert outcome.witness["run"][-1][0] == "add"
    assert wheel.refusal_exact().status == REFUTED


def test_breaking_the_shared_place_refutes_timing(monkeypatch):
    """place() rounding the bucket expiration up: an advance to the start of the entry's tick leaves it pending."""
    monkeypatch.setattr(wheel, "KAFKA", attrs.evolve(wheel.KAFKA, place=rounded_up))
    outcome = wheel.timing_not_late()
    assert outcome.status == REFUTED, outcome.detail
    assert [kind for kind, _, _ in outcome.witness["run"]] == ["add", "advance"]
    assert wheel.placement_expiration().status == REFUTED


def test_a_watch_without_its_second_try_refutes_a_sequential_obligation():
    outcome = purgatory.tried_after_listing(mutated=True)
    assert outcome.status == REFUTED
    assert outcome.detail.startswith("violated after 1 commands") and "watch(" in outcome.detail


def test_an_emptied_list_left_in_the_map_refutes_cleanup():
    outcome = purgatory.cleanup_map(mutated=True)
    assert outcome.status == REFUTED
    assert "check(" in outcome.detail or "advance(" in outcome.detail


def test_the_crosscheck_compares_the_watcher_map():
    from kpurgatory.model import vocabulary as v

    commands = [v.Watch("a", ["k0"], 5, 1), v.Watch("b", ["k0"], 5), v.Force("b"), v.Check("k0")]
    params = v.Params(tick_ms=1, wheel_size=20)
    assert purgatory.crosscheck(commands, params) == []
    problems = purgatory.crosscheck(commands, params, mutants=frozenset({"keeps_emptied_list"}))
    assert problems and "present" in problems[0]


def test_a_broken_invariant_is_reported_as_not_inductive():
    """An invariant that no run violates but that is too weak to prove itself is 'not inductive', not 'refuted'."""
    weak = lambda s: purgatory.properties(s)["no_forgotten_op"]  # noqa: E731  (without the auxiliary facts)
    status, part = purgatory.inductive(weak)
    assert (status, part) == (NOT_INDUCTIVE, "consecution")


def test_the_crosscheck_reports_a_hanging_model(monkeypatch):
    from kpurgatory.model import Model
    from kpurgatory.model import vocabulary as v

    real_step = Model.step

    def hang_on_advance(self, command):
        while isinstance(command, v.Advance):
            pass
        return real_step(self, command)

    monkeypatch.setattr(Model, "step", hang_on_advance)
    monkeypatch.setattr(purgatory, "STEP_LIMIT_S", 0.2)
    problems = purgatory.crosscheck([v.Watch("a", ["k0"], 5), v.Advance(1)], v.Params(tick_ms=1, wheel_size=2))
    assert problems == ["step 2 Advance(to_ms=1): the model did not answer within 0.2 s (hang)"]


@pytest.mark.parametrize("mutant", ["purge_ge", "purge_before_expiries"])
def test_the_purge_threshold_refutes_a_wrong_inequality_and_a_wrong_counter(mutant):
    """The purge rule is stated against the registrations since the last purge, not against Kafka's estimate, so a
    purge test with >= or with numDelayed read before the advance's expiries is refuted by a run."""
    assert purgatory.threshold_check(None).status == PROVED
    outcome = purgatory.threshold_check(mutant)
    assert outcome.status == REFUTED, outcome.detail
    assert "advance(" in outcome.detail


def test_the_symbolic_windows_are_the_declared_ones():
    """The windows the wheel obligations are stated against are `Declarations`' (evaluated on the same inputs)."""
    import random

    from kpurgatory.model.contract import FIRING, Declarations

    assert set(wheel.WINDOWS) == set(FIRING)
    rng = random.Random(7)
    for firing, window in wheel.WINDOWS.items():
        declared = Declarations(firing=firing)
        for _ in range(200):
            tick = rng.choice([1, 2, 10, 1000])
            added = rng.randint(0, 10**6)
            deadline = added + rng.choice([0, 1, tick - 1, tick, rng.randint(0, 5 * tick)])

            def value(term):
                return z3.simplify(term).as_long() if z3.is_expr(term) else term

            assert value(window.earliest(z3.IntVal(deadline), tick)) == declared.earliest_ms(deadline, tick)
            assert (value(window.latest(z3.IntVal(deadline), z3.IntVal(added), tick))
                    == declared.latest_ms(deadline, added, tick))


@pytest.mark.parametrize("check", [wheel.window_never_early, wheel.window_min_one_tick, wheel.timing_java_longs])
def test_each_declared_window_and_java_arithmetic_has_teeth(check, monkeypatch):
    """A slot wheel filing entries under their deadline fires early; one that makes a sub-tick delay wait two ticks
    fires late; in Java's arithmetic, refusing one tick early fires early."""
    monkeypatch.setattr(wheel, "JAVA_CONFIGURATIONS", ((2, 2, 2),))
    outcome = check(mutated=True)
    assert outcome.status == REFUTED, outcome.detail
    assert outcome.witness["run"][0][0] == "add"


@pytest.mark.parametrize("mutant", ["no_second_try", "check_drops_live", "check_keeps_completed",
                                    "purge_keeps_completed", "expire_late"])
def test_one_op_and_one_key_for_any_number_has_teeth(mutant):
    """The argument for any number of ops and keys (one tracked op and key, the rest abstracted) refutes a bug in
    any per-op step: each of these mutants is refuted by a run of the abstract system."""
    assert purgatory.one_op_one_key(None).status == PROVED
    outcome = purgatory.one_op_one_key(mutant)
    assert outcome.status == REFUTED, outcome.detail
