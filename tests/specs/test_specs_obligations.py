"""Every obligation has its expected result: the proofs prove, the findings and mutants are refuted."""

import pytest

from kpurgatory.specs.core import BOUND, PROVED, REFUTED, load_all

#: the expected status of every obligation; a new obligation must be added here, with its status
EXPECTED = {
    "java.integer_encoding": PROVED,
    "java.encodings_agree": BOUND,
    "wheel.placement.index_in_range": PROVED,
    "wheel.placement.bucket_expiration": PROVED,
    "wheel.placement.no_aliasing": PROVED,
    "wheel.refusal.exact": PROVED,
    "wheel.clock.alignment_inductive": PROVED,
    "wheel.overflow.climb_ranking": PROVED,
    "wheel.timing.not_early": PROVED,
    "wheel.timing.not_late": PROVED,
    "wheel.advance.terminates": PROVED,
    "wheel.cascade.conservation": PROVED,
    "wheel.timing.window.never_early_up_to_tick_late": PROVED,
    "wheel.timing.window.min_one_tick": PROVED,
    "wheel.timing.java_longs": PROVED,
    "wheel.kafka.expiration_wraps": REFUTED,
    "wheel.model.expiration_guard": PROVED,
    "wheel.kafka.end_of_time": REFUTED,
    "wheel.kafka.interval_wraps": REFUTED,
    "wheel.model.top_level_sound": PROVED,
    "mutant.wheel.bucket_rounded_up": REFUTED,
    "wheel.levels.climb": PROVED,
    "wheel.levels.not_early": PROVED,
    "wheel.levels.not_late": PROVED,
    "wheel.levels.terminates": PROVED,
    "wheel.levels.conservation": PROVED,
    "wheel.queue.requeue": PROVED,
    "purgatory.exactly_once": PROVED,
    "purgatory.justified": PROVED,
    "purgatory.no_lost_wakeup": PROVED,
    "purgatory.tried_after_listing": PROVED,
    "purgatory.counters": PROVED,
    "purgatory.no_forgotten_op": PROVED,
    "purgatory.liveness": PROVED,
    "purgatory.cleanup.check": PROVED,
    "purgatory.cleanup.purge": PROVED,
    "purgatory.cleanup.map": PROVED,
    "purgatory.never_watched_again": PROVED,
    "purgatory.liveness.fair": PROVED,
    "purgatory.any_number_of_ops_and_keys": PROVED,
    "purgatory.counting_at_scale": PROVED,
    "purgatory.coarse_tick": PROVED,
    "purgatory.purge.threshold": PROVED,
    "purgatory.memory.bound_without_cancel": PROVED,
    "purgatory.memory.no_bound_with_cancel": REFUTED,
    "purgatory.memory.true_bound": PROVED,
    "purgatory.teeth.exactly_once.once": REFUTED,
    "purgatory.teeth.exactly_once.route": REFUTED,
    "purgatory.teeth.justified.condition": REFUTED,
    "purgatory.teeth.justified.deadline": REFUTED,
    "purgatory.teeth.no_lost_wakeup.listed": REFUTED,
    "purgatory.teeth.counters.completed_not_timed": REFUTED,
    "purgatory.teeth.counters.task_counter": REFUTED,
    "purgatory.teeth.counters.entry_counter": REFUTED,
    "purgatory.teeth.counters.estimate": REFUTED,
    "purgatory.teeth.no_forgotten_op.scheduled": REFUTED,
    "purgatory.teeth.tried_after_listing.tried": REFUTED,
    "purgatory.teeth.cleanup_map.present": REFUTED,
    "purgatory.teeth.no_lost_wakeup.check_completes": REFUTED,
    "purgatory.teeth.cleanup_check.completed_gone": REFUTED,
    "purgatory.teeth.cleanup_check.completion_removes": REFUTED,
    "purgatory.teeth.cleanup_purge.completed_gone": REFUTED,
    "purgatory.teeth.liveness.expired": REFUTED,
    "purgatory.teeth.never_watched_again.no_new_entry": REFUTED,
    "purgatory.invariant": PROVED,
    "purgatory.teeth.auxiliary.delay_min": REFUTED,
    "purgatory.teeth.auxiliary.timer_future": REFUTED,
    "purgatory.teeth.auxiliary.unwatched_blank": REFUTED,
    "purgatory.teeth.auxiliary.entries_nonneg": REFUTED,
    "purgatory.teeth.auxiliary.unwatched_unlisted": REFUTED,
    "purgatory.teeth.registrations.estimate_split": REFUTED,
    "purgatory.teeth.registrations.one_entry": REFUTED,
    "purgatory.teeth.registrations.entry_iff_timer": REFUTED,
    "mutant.purgatory.purge_ge": REFUTED,
    "purgatory.projection": PROVED,
    "interleaving.no_lost_wakeup": PROVED,
    "interleaving.exactly_once": PROVED,
    "interleaving.timer_clean": PROVED,
    "interleaving.watch_vs_purge": PROVED,
    "interleaving.watch_vs_cancel_key": PROVED,
    "interleaving.replaced_list_kept": PROVED,
    "interleaving.kafka.cancelled_op_expires": REFUTED,
    "interleaving.two_watchers": PROVED,
    "interleaving.no_stale_try": PROVED,
    "interleaving.two_keys.exactly_once": PROVED,
    "interleaving.two_keys.purge_and_cancel": PROVED,
    "interleaving.deadlock_free": PROVED,
    "interleaving.repeated_calls": PROVED,
    "interleaving.two_purges": PROVED,
    "mutant.interleaving.no_second_try": REFUTED,
    "mutant.interleaving.no_cancel_after_add": REFUTED,
    "interleaving.teeth.no_lost_wakeup.lost_wakeup": REFUTED,
    "interleaving.teeth.exactly_once.cas_won_twice": REFUTED,
    "interleaving.teeth.exactly_once.on_complete_twice": REFUTED,
    "interleaving.teeth.timer_clean.timer_leak": REFUTED,
    "interleaving.teeth.watch_vs_purge.orphan": REFUTED,
    "interleaving.teeth.watch_vs_purge.empty_kept": REFUTED,
    "interleaving.teeth.watch_vs_purge.completed_listed": REFUTED,
    "interleaving.teeth.watch_vs_cancel_key.orphan": REFUTED,
    "interleaving.teeth.watch_vs_cancel_key.empty_kept": REFUTED,
    "interleaving.teeth.replaced_list_kept.orphan": REFUTED,
    "interleaving.teeth.replaced_list_kept.empty_kept": REFUTED,
    "interleaving.teeth.two_watchers.lost_wakeup": REFUTED,
    "interleaving.teeth.two_watchers.orphan": REFUTED,
    "interleaving.teeth.two_watchers.cas_won_twice": REFUTED,
    "interleaving.teeth.two_watchers.on_complete_twice": REFUTED,
    "interleaving.teeth.no_stale_try.stale_try": REFUTED,
    "interleaving.teeth.two_keys.exactly_once.cas_won_twice": REFUTED,
    "interleaving.teeth.two_keys.exactly_once.on_complete_twice": REFUTED,
    "interleaving.teeth.two_keys.exactly_once.stale_try": REFUTED,
    "interleaving.teeth.two_keys.exactly_once.lost_wakeup": REFUTED,
    "interleaving.teeth.two_keys.exactly_once.empty_kept": REFUTED,
    "interleaving.teeth.two_keys.exactly_once.blocked": REFUTED,
    "interleaving.teeth.two_keys.purge_and_cancel.orphan": REFUTED,
    "interleaving.teeth.two_keys.purge_and_cancel.empty_kept": REFUTED,
    "interleaving.teeth.two_keys.purge_and_cancel.completed_listed": REFUTED,
    "interleaving.teeth.two_keys.purge_and_cancel.blocked": REFUTED,
    "interleaving.teeth.deadlock_free.cas_won_twice": REFUTED,
    "interleaving.teeth.deadlock_free.on_complete_twice": REFUTED,
    "interleaving.teeth.deadlock_free.lost_wakeup": REFUTED,
    "interleaving.teeth.deadlock_free.blocked": REFUTED,
    "interleaving.teeth.repeated_calls.cas_won_twice": REFUTED,
    "interleaving.teeth.repeated_calls.on_complete_twice": REFUTED,
    "interleaving.teeth.repeated_calls.lost_wakeup": REFUTED,
    "interleaving.teeth.repeated_calls.empty_kept": REFUTED,
    "interleaving.teeth.repeated_calls.late_append": REFUTED,
    "interleaving.teeth.repeated_calls.blocked": REFUTED,
    "interleaving.teeth.two_purges.orphan": REFUTED,
    "interleaving.teeth.two_purges.empty_kept": REFUTED,
    "interleaving.teeth.two_purges.completed_listed": REFUTED,
    "interleaving.teeth.two_purges.blocked": REFUTED,
    "refinement.purgatory": BOUND,
    "refinement.wheel": BOUND,
    "refinement.purgatory.inductive": PROVED,
    "refinement.wheel.lifted": PROVED,
}


def test_the_registry_is_the_expected_list(registry):
    assert list(registry) == list(EXPECTED)
    for name, ob in registry.items():
        assert ob.expect == EXPECTED[name], name


#: refutations that only an interleaving shows: their counterexample is a schedule, not a sequential trace
ONLY_A_SCHEDULE = {"mutant.interleaving.no_cancel_after_add", "interleaving.kafka.cancelled_op_expires",
                   *(name for name in EXPECTED if name.startswith("interleaving.teeth."))}
#: refutations whose counterexample is one step from a state satisfying the rest of an invariant, not a run
ONLY_A_STEP = {name for name in EXPECTED if name.startswith(("purgatory.teeth.auxiliary.",
                                                             "purgatory.teeth.registrations."))}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_obligation_status(name, outcomes, registry):
    outcome = outcomes[name]
    assert outcome.status == EXPECTED[name], f"{name}: {outcome.status} {outcome.detail}"
    assert all(status == PROVED for _, status, _ in outcome.lemmas), outcome.lemmas
    if registry[name].mutant is not None:
        assert outcome.mutant.status == REFUTED, f"{name}'s mutant: {outcome.mutant.status} {outcome.mutant.detail}"
    if registry[name].kind in ("finding", "mutant") and name not in ONLY_A_SCHEDULE | ONLY_A_STEP:
        assert outcome.traces, f"{name} has no counterexample trace"


@pytest.mark.parametrize("name", list(EXPECTED))
def test_obligation_reads_as_a_document(name, registry):
    ob = registry[name]
    assert len(ob.statement.split()) >= 25, "a statement is a paragraph in words"
    assert ob.domain


def test_findings_are_documented_with_concrete_values(outcomes):
    wraps = outcomes["wheel.kafka.expiration_wraps"].witness
    assert (wraps["now"], wraps["delay_ms"], wraps["java_expiration"]) == (1, 2**63 - 1, -(2**63))
    assert wraps["kafka"] == "runs at once on add"
    chain = outcomes["wheel.kafka.interval_wraps"].witness
    assert chain["default_config"]["tick_ms"] == 1 and chain["default_config"]["wheel_size"] == 20
    assert chain["default_config"]["delay_ms"] >= 20**14
    threshold = chain["default_config"]["threshold"]
    assert threshold[f"delay {20**14 - 1}"] == f"runs at {20**14 - 1}"
    assert threshold[f"delay {20**14}"].startswith("livelock")
    assert chain["small_wheel"]["wheel_size"] <= 64
    assert chain["small_wheel"]["kafka"].startswith(("livelock", "throws"))
    end = outcomes["wheel.kafka.end_of_time"].witness
    assert (end["start_ms"], end["delay_ms"]) == (2**63 - 20, 1)
    assert end["kafka"].startswith("runs at once on add") and "ArithmeticException" in end["kafka_at_long_max"]
    memory = outcomes["purgatory.memory.no_bound_with_cancel"].witness
    assert memory["family_stale_entries"] == 10


def test_every_obligation_in_a_fresh_z3_context_is_deterministic(registry):
    """Two runs of a cheap refutation give the same counterexample (z3 is seeded, the context is fresh)."""
    from kpurgatory.specs.core import run_one

    first = run_one(registry["mutant.wheel.bucket_rounded_up"]).witness
    second = run_one(registry["mutant.wheel.bucket_rounded_up"]).witness
    assert first == second


def test_all_registered(registry):
    assert set(load_all()) == set(registry)
