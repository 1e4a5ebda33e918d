"""The interleaving model: each scenario's unrolling covers its threads' longest runs and some interleaving runs every
thread to its end (so no proof is vacuous), and each race obligation's mutant is refuted by a schedule that has the
race's shape."""

import pytest
import z3

from kpurgatory.specs import interleaving as il
from kpurgatory.specs.core import REFUTED

SCENARIOS = [il.WATCH_CHECK, il.WATCH_CHECK_FORCE, il.WATCH_PURGE, il.WATCH_CANCEL_KEY, il.PURGE_CANCEL_KEY_WATCH,
             il.TWO_WATCHERS, il.TWO_CHECKS]


def lengths(sc, mutants=frozenset()):
    return [il.program(role, sc, t, mutants).length(sc, t) for t, role in enumerate(sc.roles, start=1)]


@pytest.mark.parametrize("sc", SCENARIOS, ids=str)
def test_some_interleaving_runs_every_thread_to_its_end(sc):
    status, schedule, depth = il.explore(sc, frozenset(), final_bad=lambda sc, s: z3.BoolVal(True))
    assert status == REFUTED
    assert depth == sum(lengths(sc))


def test_program_lengths_are_the_longest_runs():
    # watch: lock+try#1, skip if completed, find or create, append, try#2, check completed, timer add, cancel
    assert lengths(il.WATCH_CHECK) == [8, 8]  # check: set_ready, read, visit, try, complete, remove, empty?, remove key
    assert lengths(il.TWO_WATCHERS) == [6, 6, 12]  # without the timer a watch ends at its try#2's completion
    assert lengths(il.TWO_WATCHERS, frozenset({"create_without_lock"}))[0] == 7  # get, then put a new list
    assert lengths(il.WATCH_CANCEL_KEY) == [8, 4]  # take the list, cancel a, cancel b, unlock


def schedule(outcomes, name):
    """The mutant's counterexample of obligation ``name`` as "T<thread>:<step>" strings."""
    mutant = outcomes[name].mutant
    assert mutant.status == REFUTED, mutant.detail
    return [f"T{thread}:{label}" for thread, label in mutant.witness["schedule"]]


def test_purge_without_recheck_orphans_the_watched_op(outcomes):
    """The purge walked k's list empty, the watch appended to it, then the purge removed k from the map."""
    steps = schedule(outcomes, "interleaving.watch_vs_purge")
    assert steps.index("T2:list empty?") < steps.index("T1:append to k") < steps.index("T2:removeKeyIfEmpty")
    assert outcomes["interleaving.watch_vs_purge"].mutant.witness["threads"] == {"T1": "watch(a)", "T2": "purge"}


def test_append_outside_the_lock_loses_the_op_to_cancel_for_key(outcomes):
    """The watch found k's list and released the lock; cancelForKey took the list; the watch appended to it."""
    steps = schedule(outcomes, "interleaving.watch_vs_cancel_key")
    assert (steps.index("T1:find or create k's list") < steps.index("T2:remove k's list from the map")
            < steps.index("T1:append to k"))


def test_removal_without_identity_takes_the_new_list(outcomes):
    """The purge read the old list; cancelForKey took it out of the map; the watch created a new list; the purge,
    finding its old list empty, removed k, and with it the new list."""
    steps = schedule(outcomes, "interleaving.replaced_list_kept")
    assert (steps.index("T2:read the map") < steps.index("T3:remove k's list from the map")
            < steps.index("T1:find or create k's list") < steps.index("T2:removeKeyIfEmpty"))


def test_unlocked_create_lets_one_watcher_replace_the_other_list(outcomes):
    """Both watchers found no list and each put a new one; the check then read only the one left in the map."""
    steps = schedule(outcomes, "interleaving.two_watchers")
    puts = [steps.index("T1:put a new list"), steps.index("T2:put a new list")]
    assert max(steps.index("T1:find or create k's list"), steps.index("T2:find or create k's list")) < min(puts)
    assert max(puts) < steps.index("T3:read k's list")


def test_unguarded_safe_try_complete_tries_a_completed_op(outcomes):
    """The schedule ends with a check's tryComplete on a, after another thread completed a under a's lock."""
    steps = schedule(outcomes, "interleaving.no_stale_try")
    last = steps[-1]
    assert last in ("T2:safeTryComplete a", "T3:safeTryComplete a")
    completions = [step for step in steps[:-1] if step.endswith("cancel+onComplete") or
                   step.endswith("cancel+onComplete a")]
    assert completions and not completions[0].startswith((last[:3], "T4"))


def test_an_op_cancelled_before_its_timer_add_still_expires(outcomes):
    """Kafka's race: cancelForKey took the list between the watch's append and its timer add."""
    witness = outcomes["interleaving.kafka.cancelled_op_expires"].witness
    steps = [f"T{thread}:{label}" for thread, label in witness["schedule"]]
    assert (steps.index("T1:append to k") < steps.index("T2:remove k's list from the map") < steps.index("T2:cancel a")
            < steps.index("T1:timer add"))


def test_the_readable_counterexample_names_the_threads(outcomes):
    detail = outcomes["interleaving.watch_vs_cancel_key"].mutant.detail
    assert detail.startswith("loses an op (T1=watch(a), T2=cancelForKey(k)): T1:tryComplete#1 -> ")
