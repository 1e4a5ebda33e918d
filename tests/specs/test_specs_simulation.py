"""model/ run on z3 terms (specs/lift.py) and the one-step refinement proofs built on it (specs/simulation.py): the
exploration visits every feasible path and no other, model/'s own code is what runs, and a model/ or a step() that
part is caught with the values where they do."""

import pytest
import z3

from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import DelayedOperation, DelayedOperationPurgatory
from kpurgatory.model.timer import TimingWheel
from kpurgatory.specs import core, simulation, wheel
from kpurgatory.specs import purgatory as spec
from kpurgatory.specs.core import NOT_INDUCTIVE, PROVED, REFUTED
from kpurgatory.specs.lift import Bool, Int, PathLimit, Paths, Unliftable


def sign(x):
    if x < 0:
        return "negative"
    return "zero" if x == 0 else "positive"


def explored(function, *assumptions, limit=1000, depth=100):
    x = z3.Int("x")
    paths = Paths(list(assumptions), limit, depth)
    return [(path.result, path.conditions) for path in paths.explore(lambda: function(Int(x)))]


def test_every_feasible_path_is_run_once_with_its_condition():
    x = z3.Int("x")
    paths = explored(sign)
    assert sorted(result for result, _ in paths) == ["negative", "positive", "zero"]
    for result, conditions in paths:  # each condition pins the sign the run returned
        for value, expected in ((-3, "negative"), (0, "zero"), (4, "positive")):
            holds = z3.is_true(z3.simplify(z3.substitute(z3.And(*conditions), (x, z3.IntVal(value)))))
            assert holds == (result == expected), (result, value)


def test_a_branch_the_assumptions_rule_out_is_not_taken():
    x = z3.Int("x")
    assert sorted(result for result, _ in explored(sign, x >= 0)) == ["positive", "zero"]
    assert [result for result, _ in explored(sign, x > 7)] == ["positive"]


def test_assumptions_without_a_model_are_refused_not_explored_vacuously():
    x = z3.Int("x")
    with pytest.raises(Unliftable, match="the assumptions have no model"):
        explored(sign, x > 1, x < 0)


def test_code_that_needs_a_concrete_value_cannot_be_lifted():
    with pytest.raises(Unliftable, match="indexes by the integer x"):
        explored(lambda x: ["a", "b"][x])
    with pytest.raises(Unliftable, match="hashes"):
        explored(lambda x: {x: 1})
    with pytest.raises(Unliftable, match="outside an exploration"):
        bool(Bool(z3.Bool("b")))


def test_a_run_that_branches_differently_on_replay_is_reported():
    calls = []

    def unstable(x):
        calls.append(1)
        return bool(x < len(calls))  # the second run asks another question at the same place

    with pytest.raises(Unliftable, match="where an earlier run branched on"):
        explored(lambda x: (unstable(x), bool(x > 0)))


def count_up(x):
    n = 0
    while x > n:
        n += 1
    return n


def test_a_loop_that_does_not_end_on_a_path_meets_the_depth_limit():
    with pytest.raises(PathLimit, match="more than 100 branches on one path"):
        explored(count_up)


def test_a_loop_that_forks_for_ever_meets_the_path_limit():
    x = z3.Int("x")
    assert len(explored(count_up, x <= 30)) == 31
    with pytest.raises(PathLimit, match="more than 20 feasible paths"):
        explored(count_up, x <= 30, limit=20)


def test_the_wheel_levels_of_model_decide_as_the_shared_arithmetic():
    outcome = simulation.wheel_lifted()
    assert outcome.status == PROVED and outcome.detail == "12 paths of model/, each agreeing"
    found, _ = simulation.level_agrees(wheel.REFUSES_EARLY)
    assert found.startswith("TimingWheel.add at T=") and "refused: model/ False, the shared arithmetic True" in found


def stalled_advance(self, time_ms):
    """advanceClock that moves only once the time is past the next tick, not at it."""
    if time_ms > self.current_time_ms + self.tick_ms:
        self.current_time_ms = time_ms - time_ms % self.tick_ms
        if self.overflow_wheel is not None:
            self.overflow_wheel.advance_clock(self.current_time_ms)


def test_a_wheel_clock_that_stalls_is_caught_for_one_level_with_its_values(monkeypatch):
    monkeypatch.setattr(TimingWheel, "advance_clock", stalled_advance)
    found, _ = simulation.level_agrees(wheel.KAFKA)
    where = found.removeprefix("TimingWheel.advance_clock at ").split(":")[0]
    values = dict(pair.split("=") for pair in where.split(", "))
    T, c, x = int(values["T"]), int(values["c"]), int(values["x"])
    assert x == c + T  # the one time at which the stalled clock does not move
    assert f"clock: model/ {c}, the shared arithmetic {x - x % T}" in found


def test_the_stalled_clock_is_refuted_with_one_level_s_values_and_the_run_that_hangs(monkeypatch):
    monkeypatch.setattr(TimingWheel, "advance_clock", stalled_advance)
    monkeypatch.setattr(core, "MODEL_STEP_S", 0.2)
    outcome = simulation.wheel_lifted()
    assert outcome.status == REFUTED and outcome.method == "model/ under a 0.2 s limit per step"
    assert "(one level, any values: TimingWheel.advance_clock at T=" in outcome.detail
    assert outcome.traces["counterexample"].steps[-1].observation == v.Observation()


def test_the_purgatory_steps_as_step_from_every_state_of_a_small_shape():
    found, coverage = simulation.simulates((1, 1, 2))
    assert found is None
    assert coverage.cases == 11 and coverage.paths > 100


def test_a_step_that_departs_from_model_is_caught_with_the_state_and_the_fields():
    found, _ = simulation.simulates((1, 1, 1), frozenset({"check_keeps_completed"}))
    assert found.command == "check(key=k0)"
    assert found.state[("completed", 0)] == z3.BoolVal(True) and found.state[("cnt", 0, 0)] == 1
    assert "cnt.0.0: model/ 0, step() 1" in found.problems and not found.broke


def purge_at_threshold(self):
    return self.estimated_total_operations - self.num_delayed() >= self.purge_interval


def test_a_model_purge_rule_off_by_one_is_caught(monkeypatch):
    monkeypatch.setattr(DelayedOperationPurgatory, "purge_is_due", purge_at_threshold)
    found, _ = simulation.simulates((1, 1, 1))
    assert found.command.startswith("advance(") and "purged: model/ True, step() False" in found.problems


def spinning_try(self, via):
    while True:
        pass


def test_a_model_that_hangs_on_a_path_is_refuted_not_waited_for(monkeypatch):
    monkeypatch.setattr(DelayedOperation, "try_complete", spinning_try)
    monkeypatch.setattr(core, "MODEL_STEP_S", 0.2)
    found, _ = simulation.simulates((1, 1, 1))
    assert found.broke and found.problems == ("model/ hung: no answer within 0.2 s",)


def test_liveness_ends_in_a_bounded_response():
    assert spec.bounded_response() == (PROVED, "")
    # a check that re-arms a live op's timer raises its rank without a watch: the response bound is not kept
    assert spec.bounded_response(frozenset({"check_rearms_timer"})) == (REFUTED, "consecution")


@pytest.mark.slow
def test_the_one_step_refinement_holds_and_its_mutant_is_refuted_with_a_run():
    outcome = simulation.purgatory_simulation()
    assert outcome.status == PROVED, outcome.detail
    mutated = simulation.purgatory_simulation(mutated=True)
    assert mutated.status == REFUTED and mutated.traces["counterexample"]
    assert "one step from any state: " in mutated.detail
    assert NOT_INDUCTIVE != mutated.status
