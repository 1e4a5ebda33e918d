"""The proofs have teeth: breaking the subject they share, or one line of a transition, refutes them.

Kept cheap for CI: the symbolic wheel is checked for one configuration here (`kpurgatory prove` checks all)."""

import attrs
import pytest
import z3

from kpurgatory.specs import core, purgatory, wheel
from kpurgatory.specs.core import BOUND, NOT_INDUCTIVE, PROVED, REFUTED, fresh_z3_context
from kpurgatory.specs.purgatory import Not


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


def test_the_crosscheck_stops_at_a_hanging_model_with_its_run(monkeypatch):
    from kpurgatory.model import Model
    from kpurgatory.model import vocabulary as v

    real_step = Model.step

    def hang_on_advance(self, command):
        while isinstance(command, v.Advance):
            pass
        return real_step(self, command)

    monkeypatch.setattr(Model, "step", hang_on_advance)
    monkeypatch.setattr(core, "MODEL_STEP_S", 0.2)
    watch, advance = v.Watch("a", ["k0"], 5), v.Advance(1)
    with pytest.raises(core.ModelBroke) as broke:
        purgatory.crosscheck([watch, advance], v.Params(tick_ms=1, wheel_size=2))
    assert (broke.value.commands, broke.value.failure) == ((watch, advance), "hung: no answer within 0.2 s")


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


# --- every clause has teeth --------------------------------------------------------------------------------------


def teeth_obligation(name):
    from kpurgatory.specs.core import as_expected, load_all, run_one

    ob = load_all()[name]
    outcome = run_one(ob)
    return outcome, as_expected(ob, outcome)


def test_deleting_the_condition_clause_of_justified_fails_prove(monkeypatch):
    """The audit's deletion: without "try/check completions had their condition true" nothing catches a tryComplete
    that ignores the condition, so the clause's own obligation is no longer refuted as expected."""
    outcome, ok = teeth_obligation("purgatory.teeth.justified.condition")
    assert ok and outcome.detail.startswith("caught by justified.condition alone after 2 commands")
    assert "try(op=" in outcome.detail and outcome.traces["counterexample"].steps
    monkeypatch.setitem(purgatory.CLAUSES, "justified.condition", lambda s: True)
    outcome, ok = teeth_obligation("purgatory.teeth.justified.condition")
    assert not ok and "no clause catches the bug" in outcome.detail
    assert "its bug goes unnoticed after 2 commands" in outcome.detail and "try(op=" in outcome.detail
    monkeypatch.delitem(purgatory.CLAUSES, "justified.condition")
    outcome, ok = teeth_obligation("purgatory.teeth.justified.condition")
    assert not ok and "not a clause of the invariant" in outcome.detail
    # the run the invariant now lets through, replayable
    assert "its bug goes unnoticed" in outcome.detail and outcome.traces["counterexample"].steps


@pytest.mark.slow  # each search that finds nothing is exhaustive to its depth: 10-20 s
@pytest.mark.parametrize("clause", ["exactly_once.route", "counters.estimate", "no_forgotten_op.scheduled",
                                    "cleanup_check.completion_removes", "liveness.expired",
                                    "never_watched_again.no_new_entry"])
def test_deleting_a_clause_fails_its_teeth(clause, monkeypatch):
    clauses = purgatory.STEP_CLAUSES if clause in purgatory.STEP_CLAUSES else purgatory.CLAUSES
    assert purgatory.clause_teeth(clause).status == REFUTED
    monkeypatch.setitem(clauses, clause, lambda *args: True)
    assert purgatory.clause_teeth(clause).status != REFUTED


def test_a_clause_caught_together_with_another_has_no_teeth(monkeypatch):
    """The reaper one ms late also leaves a live op with its deadline passed: no_forgotten_op catches it in the same
    step, so it does not show that liveness.expired is needed; only a re-armed expiry does."""
    monkeypatch.setitem(purgatory.PROPERTY_TEETH, "liveness.expired", "expire_late")
    outcome = purgatory.clause_teeth("liveness.expired")
    assert outcome.status == BOUND
    assert "liveness.expired, no_forgotten_op.scheduled" in outcome.detail


@pytest.mark.parametrize("group", ["auxiliary", "registrations"])
def test_every_supporting_fact_is_needed_and_a_redundant_one_is_reported(group, monkeypatch):
    facts = purgatory.support(group)[0]
    needed = purgatory.support_needed(group)
    assert list(needed) == list(facts) and {status for status, _ in needed.values()} == {REFUTED}
    monkeypatch.setitem(facts, "now_nonneg", lambda s: s[("now",)] >= 0)
    assert purgatory.support_needed(group)["now_nonneg"][0] == PROVED


def test_deleting_an_auxiliary_fact_breaks_the_invariant(monkeypatch):
    purgatory._invariant_is_inductive.cache_clear()
    monkeypatch.setitem(purgatory.AUXILIARY, "timer_future", lambda s: True)
    status, part, _ = purgatory.invariant_is_inductive()
    purgatory._invariant_is_inductive.cache_clear()
    assert (status, part) == (NOT_INDUCTIVE, "consecution")


# --- new properties ----------------------------------------------------------------------------------------------


def test_a_completed_op_is_never_watched_again_as_in_the_model_since_4_0():
    """The spec follows Kafka >= 4.0.0; the releases before it (the mutant) list a completed op again, and so does
    model/ at such a release, on the mutant's own run."""
    from kpurgatory.model import Model
    from kpurgatory.model import vocabulary as v
    from kpurgatory.model.releases import CURRENT, Release

    assert purgatory.never_watched_again().status == PROVED
    status, run, depth = purgatory.bmc(None, 3, mutants=frozenset({"watches_completed"}),
                                       step_bad=lambda s, c, n, o: Not(
                                           purgatory.step_properties(s, c, n, o)["never_watched_again"]))
    assert status == REFUTED and [c.kind for c in run.commands] == [purgatory.WATCH, purgatory.WATCH]
    commands = purgatory.to_vocabulary(run.commands) + [v.Watched()]
    params = v.Params(tick_ms=1, wheel_size=20, purge_interval=run.purge_interval)
    mutated = purgatory.replay(run, frozenset({"watches_completed"}))[-1][2]

    def watched(release):
        model = Model("purgatory", params, release=release)
        return [model.step(command) for command in commands][-1].result

    assert watched(CURRENT) == purgatory.entries(purgatory.replay(run)[-1][2])
    assert watched(Release("3.9.0")) == purgatory.entries(mutated) > watched(CURRENT)


def test_fair_liveness_catches_a_starving_check_that_one_step_liveness_misses():
    assert purgatory.liveness_fair().status == PROVED
    outcome = purgatory.liveness_fair(mutated=True)
    assert outcome.status == REFUTED and "check(" in outcome.detail
    assert purgatory.bmc_and_induction("liveness", "check_rearms_timer").status == PROVED


def shared_invariant_report(names):
    """Run purgatory.invariant and then the obligations ``names`` the way `prove` does (the premise first, its
    outcome handed to the dependants), with the cached induction results cleared before and after; returns the
    outcomes and the report's explanation lines."""
    from kpurgatory.specs.cli import explanations
    from kpurgatory.specs.core import load_all, run_one

    registry = load_all()
    purgatory._invariant_is_inductive.cache_clear()
    held = run_one(registry[purgatory.INVARIANT])
    outcomes = {purgatory.INVARIANT: held}
    for name in names:
        outcomes[name] = run_one(registry[name], {purgatory.INVARIANT: held})
    purgatory._invariant_is_inductive.cache_clear()
    obligations = [registry[name] for name in outcomes]
    return outcomes, explanations(obligations, outcomes, {})


DEPENDANTS = ["purgatory.exactly_once", "purgatory.justified", "purgatory.counters", "purgatory.cleanup.check",
              "purgatory.liveness"]


def test_a_broken_shared_invariant_is_one_refutation(monkeypatch):
    """A cancel that forgets the task counter breaks one clause: purgatory.invariant is refuted by a short run that
    names it, with a counterexample to induction; every obligation resting on the invariant is one line."""
    cancel = purgatory.t_cancel

    def forgets_counter(s, c, mutants):
        return cancel(s, c, frozenset({"cancel_keeps_counter"}))

    monkeypatch.setattr(purgatory, "TRANSITIONS", tuple(forgets_counter if t is cancel else t
                                                        for t in purgatory.TRANSITIONS))
    outcomes, lines = shared_invariant_report(DEPENDANTS)
    held = outcomes[purgatory.INVARIANT]
    assert held.status == REFUTED
    assert held.detail.startswith("counters.task_counter violated after 2 commands") and "cancel(op=" in held.detail
    assert held.witness["command"]["kind"] == "cancel" and "counters.task_counter" in held.witness["clause broken"]
    assert held.traces["counterexample"].steps
    for name in DEPENDANTS:
        assert outcomes[name].status == NOT_INDUCTIVE and outcomes[name].premise == purgatory.INVARIANT
        assert outcomes[name].mutant.status == REFUTED  # the mutants still run: the teeth do not rest on the spec
    grouped = [line for line in lines if "rest on" in line]
    assert len(grouped) == 1 and grouped[0].endswith(", ".join(DEPENDANTS))
    assert not [line for line in lines if line.startswith("[bold]purgatory.") and "rest on" not in line
                and not line.startswith(f"[bold]{purgatory.INVARIANT}[/]")]


@pytest.mark.parametrize("table, clause", [("AUXILIARY", "timer_future"), ("CLAUSES", "no_forgotten_op.scheduled")])
def test_a_deleted_clause_is_one_premise_block_and_one_line(table, clause, monkeypatch):
    """Deleting an auxiliary fact or a property clause leaves the invariant not inductive: purgatory.invariant shows
    one counterexample to induction (the clause it breaks) and finds no violating run (there is none: the model is
    right); its dependants are one line pointing to it."""
    monkeypatch.delitem(getattr(purgatory, table), clause)
    outcomes, lines = shared_invariant_report(DEPENDANTS)
    held = outcomes[purgatory.INVARIANT]
    assert held.status == NOT_INDUCTIVE and "no clause is violated within 3 commands" in held.detail
    assert held.witness["clause broken"] and held.witness["command"]["kind"]
    assert lines[0].startswith(f"[bold]{purgatory.INVARIANT}[/] (not inductive)")
    assert [line for line in lines if not line.startswith("    ")] == [
        lines[0], f"[bold]{len(DEPENDANTS)} obligations rest on {purgatory.INVARIANT}[/], which is not inductive: "
                  f"see {purgatory.INVARIANT}: {', '.join(DEPENDANTS)}"]
