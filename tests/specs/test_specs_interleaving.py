"""The interleaving model: each scenario's unrolling covers its threads' longest runs and some interleaving runs every
thread to its end (so no proof is vacuous), the bound in each domain string is the one searched, and each race
obligation's mutant is refuted by a schedule that has the race's shape, and every clause of every race obligation has
teeth (a run that breaks it alone; deleting or weakening it fails `prove` by name)."""

import json

import attrs

from click.testing import CliRunner
import pytest
import z3

from kpurgatory.conformance.cli import main

from kpurgatory.specs import interleaving as il
from kpurgatory.specs.cli import run_obligations
from kpurgatory.specs.core import BOUND, ERROR, PROVED, REFUTED, select

SCENARIOS = [il.WATCH_CHECK, il.WATCH_CHECK_FORCE, il.WATCH_PURGE, il.WATCH_CANCEL_KEY, il.PURGE_CANCEL_KEY_WATCH,
             il.TWO_WATCHERS, il.TWO_CHECKS, il.TWO_KEYS_CHECKS, il.TWO_KEYS_PURGE_CANCEL, il.TWO_KEYS_ONE_SHARD,
             il.REPEATED, il.TWO_PURGES]
EVERY_THREAD_DONE = il.Property("runs every thread to its end", {"done": lambda sc, s: z3.BoolVal(True)})


def lengths(sc, mutants=frozenset()):
    return [il.program(thread, sc, t, mutants).length(sc, t) for t, thread in enumerate(sc.threads, start=1)]


@pytest.mark.parametrize("sc", SCENARIOS, ids=str)
def test_some_interleaving_runs_every_thread_to_its_end(sc):
    status, found, depth = il.explore(sc, frozenset(), (EVERY_THREAD_DONE,))
    assert status == REFUTED and found.broken == (EVERY_THREAD_DONE.broken,)
    assert depth == sum(lengths(sc)) == sc.depth()
    assert f"{depth} steps; every interleaving" in str(sc)


def test_program_lengths_are_the_longest_runs():
    # watch: lock+try#1, skip if completed, find or create, append, try#2, check completed, timer add, cancel
    assert lengths(il.WATCH_CHECK) == [8, 8]  # check: set_ready, read, visit, try, complete, remove, empty?, remove key
    assert lengths(il.TWO_WATCHERS) == [6, 6, 12]  # without the timer a watch ends at its try#2's completion
    assert lengths(il.TWO_WATCHERS, frozenset({"create_without_lock"}))[0] == 7  # get, then put a new list
    assert lengths(il.WATCH_CANCEL_KEY) == [8, 4]  # take the list, cancel a, cancel b, unlock
    assert lengths(il.TWO_KEYS_CHECKS) == [8, 8, 7]  # two keys: find or create and append, twice
    assert lengths(il.REPEATED) == [6 + 6, 8 + 7]  # a thread's calls one after the other


def test_the_bound_is_printed():
    assert str(il.TWO_KEYS_ONE_SHARD).endswith("bound: 3 threads, 3 calls, 2 keys (one shard), 1 op, 19 steps; "
                                                "every interleaving")
    assert "T1 watch(a, no timer) then watch(a, no timer)" in str(il.REPEATED)
    assert "4 calls, 1 key, 1 op, 27 steps" in str(il.REPEATED)


def test_one_shard_shares_one_lock_and_keys_apart_have_their_own():
    assert il.TWO_KEYS_ONE_SHARD.shards == ("shard.0",)
    assert il.TWO_KEYS_CHECKS.shards == ("shard.0", "shard.1")


def test_a_third_call_does_not_fit_the_pcs():
    with pytest.raises(AssertionError):
        il.program((il.Role("check"),) * 3, il.REPEATED, 2, frozenset())


@pytest.fixture(scope="module")
def outcomes():
    """This module's obligations only (the session's fixture runs every obligation of `prove`)."""
    return run_obligations(select(["interleaving.*"]), jobs=1)


def schedule(outcomes, name):
    """The mutant's counterexample of obligation ``name`` as "T<thread>:<step>" strings."""
    mutant = outcomes[name].mutant
    assert mutant.status == REFUTED, mutant.detail
    return [f"T{thread}:{label}" for thread, label in mutant.witness["schedule"]]


def test_purge_without_recheck_orphans_the_watched_op(outcomes):
    """The purge walked k's list empty, the watch appended to it, then the purge removed k from the map."""
    steps = schedule(outcomes, "interleaving.watch_vs_purge")
    assert steps.index("T2:k's list empty?") < steps.index("T1:append to k") < steps.index("T2:removeKeyIfEmpty(k)")
    assert outcomes["interleaving.watch_vs_purge"].mutant.witness["threads"] == {"T1": "watch(a)", "T2": "purge(k)"}


def test_append_outside_the_lock_loses_the_op_to_cancel_for_key(outcomes):
    """The watch found k's list and released the lock; cancelForKey took the list; the watch appended to it."""
    steps = schedule(outcomes, "interleaving.watch_vs_cancel_key")
    assert (steps.index("T1:find or create k's list") < steps.index("T2:remove k's list from the map")
            < steps.index("T1:append to k"))


def test_removal_without_identity_takes_the_new_list(outcomes):
    """The purge read the old list; cancelForKey took it out of the map; the watch created a new list; the purge,
    finding its old list empty, removed k, and with it the new list."""
    steps = schedule(outcomes, "interleaving.replaced_list_kept")
    assert (steps.index("T2:read the map for k") < steps.index("T3:remove k's list from the map")
            < steps.index("T1:find or create k's list") < steps.index("T2:removeKeyIfEmpty(k)"))


def test_unlocked_create_lets_one_watcher_replace_the_other_list(outcomes):
    """Both watchers found no list and each put a new one; the check then read only the one left in the map."""
    steps = schedule(outcomes, "interleaving.two_watchers")
    puts = [steps.index("T1:put a new list for k"), steps.index("T2:put a new list for k")]
    assert max(steps.index("T1:find or create k's list"), steps.index("T2:find or create k's list")) < min(puts)
    assert max(puts) < steps.index("T3:read k's list")


def test_unguarded_safe_try_complete_tries_a_completed_op(outcomes):
    """The schedule ends with a check's tryComplete on a, after another thread completed a under a's lock."""
    for name, checks in (("interleaving.no_stale_try", ("T2", "T3")), ("interleaving.two_keys.exactly_once",
                                                                      ("T2", "T3"))):
        steps = schedule(outcomes, name)
        last = steps[-1]
        assert last in tuple(f"{t}:safeTryComplete a" for t in checks)
        completions = [step for step in steps[:-1] if step.endswith(("cancel+onComplete", "cancel+onComplete a"))]
        assert completions and not completions[0].startswith((last[:3], "T4"))


def test_an_op_cancelled_before_its_timer_add_still_expires(outcomes):
    """Kafka's race: cancelForKey took the list between the watch's append and its timer add."""
    witness = outcomes["interleaving.kafka.cancelled_op_expires"].witness
    steps = [f"T{thread}:{label}" for thread, label in witness["schedule"]]
    assert (steps.index("T1:append to k") < steps.index("T2:remove k's list from the map") < steps.index("T2:cancel a")
            < steps.index("T1:timer add"))


def test_the_readable_counterexample_names_the_threads(outcomes):
    detail = outcomes["interleaving.watch_vs_cancel_key"].mutant.detail
    assert detail.startswith("orphans a watched op (no list the map holds lists it) (T1=watch(a), "
                             "T2=cancelForKey(k)): T1:tryComplete#1 -> ")


def test_a_lock_order_inversion_deadlocks_and_says_who_waits_for_whom(outcomes):
    """The check holds the shard lock while it waits for a's lock; the watch holds a's lock and waits for the shard
    lock to append to its second key."""
    mutant = outcomes["interleaving.deadlock_free"].mutant
    steps = schedule(outcomes, "interleaving.deadlock_free")
    assert mutant.witness["broken"] == [il.BLOCKED]
    assert steps.index("T1:append to k1") < steps.index("T2:read k1's list") < steps.index("T2:visit a")
    assert "T1:append to k2" not in steps
    cycle = {"T1 at find or create k2's list", "T2 at safeTryComplete a", "lock of a held by T1", "shard.0 held by T2"}
    blocked = set(mutant.witness["blocked"])
    assert cycle <= blocked
    # z3 may end the run before T3 (cancelForKey of k2) took shard.0: then T3 waits behind the cycle, holding nothing
    assert all(entry.startswith("T3 at ") for entry in blocked - cycle)


def test_a_lock_never_released_is_a_blocked_thread(monkeypatch):
    """A watch that ends at its second try without releasing a's lock: the check waits for that lock forever."""
    sc = il.Scenario((il.Role("watch", "a", timer=False), il.Role("check", ready=("a",))))
    watch = il.program(sc.threads[0], sc, 1, frozenset())
    ends_locked = il.Step("tryComplete#2", lambda s, n: n.update({"pc.1": il.num(il.DONE)}))
    keeps_lock = il.Program({**watch.steps, 6: ends_locked}, watch.start)
    original = il.program
    monkeypatch.setattr(il, "program", lambda thread, sc_, t, m: keeps_lock if t == 1 else original(thread, sc_, t, m))
    status, found, _ = il.explore(sc, frozenset(), (), blocked=True)
    assert status == REFUTED and found.broken == (il.BLOCKED,)
    assert found.blocked == ("T2 at safeTryComplete a", "lock of a held by T1")


def test_two_purges_without_identity_remove_the_watch_s_new_list(outcomes):
    """One purge removed k; the watch created a new list; the other purge, holding the old emptied list, removed
    the new one."""
    steps = schedule(outcomes, "interleaving.two_purges")
    first, second = sorted(["T2", "T3"], key=lambda t: steps.index(f"{t}:removeKeyIfEmpty(k)"))
    assert (steps.index(f"{first}:removeKeyIfEmpty(k)") < steps.index("T1:find or create k's list")
            < steps.index("T1:append to k") < steps.index(f"{second}:removeKeyIfEmpty(k)"))
    assert steps.index(f"{second}:read the map for k") < steps.index(f"{first}:removeKeyIfEmpty(k)")


def test_a_watch_again_of_a_completed_op_appends_it_without_the_skip(outcomes):
    """a completed (by T1's first watch or T2's check); T1's second watch then tries it and appends it anyway."""
    steps = schedule(outcomes, "interleaving.repeated_calls")
    second = len(steps) - 1 - steps[::-1].index("T1:tryComplete#1")
    assert steps.count("T1:tryComplete#1") == 2 and steps[-1] == "T1:append to k"
    assert any(step.startswith(("T1:cancel+onComplete", "T2:cancel+onComplete")) for step in steps[:second])


# --- every clause has teeth ------------------------------------------------------------------------------------------


def prove(*patterns):
    """`kpurgatory prove --json --jobs 1` on the patterns, in this process (so monkeypatches apply): (exit code,
    {name: row})."""
    args = ["prove", "--json", "--jobs", "1"] + [arg for p in patterns for arg in ("--only", p)]
    result = CliRunner().invoke(main, args)
    return result.exit_code, {row["name"]: row for row in json.loads(result.output)["obligations"]}


def test_teeth_every_clause_of_every_race_obligation_is_broken_alone_by_its_run():
    code, rows = prove("interleaving.teeth.*")
    clauses = {f"interleaving.teeth.{claim}.{clause}" for claim, statement in il.CLAIMS.items()
               for clause in statement.clauses()}
    assert set(rows) == clauses and len(clauses) == 40
    assert code == 0 and all(row["result"] == REFUTED for row in rows.values())
    # the statement of exactly_once has two clauses, each with its own run (the audit's blind spot)
    assert rows["interleaving.teeth.exactly_once.on_complete_twice"]["detail"].startswith(
        "caught by on_complete_twice alone after 5 commands: with complete_on_lost_cas (T1=watch(a), ")
    assert "T3:forceComplete CAS -> T3:cancel+onComplete" in rows["interleaving.teeth.exactly_once.on_complete_twice"][
        "detail"]


def test_teeth_deleting_the_on_complete_clause_of_completes_twice_fails_prove_naming_it(monkeypatch):
    """Without onComplete's clause the property still proves (the runs the search looks at break the other clause
    too), so only its teeth notice: prove fails, naming the clause."""
    monkeypatch.delitem(il.TWICE.clauses, "on_complete_twice")
    code, rows = prove("interleaving.exactly_once", "interleaving.teeth.exactly_once.*")
    assert rows["interleaving.exactly_once"]["result"] == PROVED and rows["interleaving.exactly_once"]["as_expected"]
    assert rows["interleaving.teeth.exactly_once.cas_won_twice"]["as_expected"]
    failed = rows["interleaving.teeth.exactly_once.on_complete_twice"]
    assert code == 1 and not failed["as_expected"] and failed["result"] == BOUND
    assert failed["detail"] == "on_complete_twice is not a clause of the invariant any more"


def test_teeth_dropping_the_blocked_search_from_one_obligation_fails_naming_it(monkeypatch):
    monkeypatch.setitem(il.CLAIMS, "deadlock_free", attrs.evolve(il.CLAIMS["deadlock_free"], blocked=False))
    outcome = il.clause_teeth("deadlock_free", "blocked")
    assert outcome.status == BOUND and outcome.detail == "blocked is not a clause of the invariant any more"


def test_teeth_a_stated_clause_not_listed_fails_naming_it(monkeypatch):
    monkeypatch.setitem(il.TEETH, "timer_clean", ())
    outcome = il.clause_teeth("timer_clean", "timer_leak")
    assert outcome.status == ERROR
    assert outcome.detail == "timer_leak is stated but not listed in TEETH: timer_leak has no teeth"


def test_teeth_the_listed_clauses_are_the_stated_ones():
    assert {claim: set(clauses) for claim, clauses in il.TEETH.items()} == {
        claim: set(statement.clauses()) for claim, statement in il.CLAIMS.items()}


def test_teeth_a_weakened_clause_fails_naming_it(monkeypatch):
    """onComplete three times instead of twice: the clause's run breaks nothing any more."""
    def thrice(sc, s):
        return il.any_op(sc, lambda o: s[f"calls.{o}"] > 2)

    monkeypatch.setitem(il.TWICE.clauses, "on_complete_twice", thrice)
    outcome = il.clause_teeth("exactly_once", "on_complete_twice")
    assert outcome.status == BOUND and outcome.detail.startswith("caught by nothing after 5 commands")


def test_teeth_a_clause_without_a_run_fails_naming_it(monkeypatch):
    monkeypatch.delitem(il.WITNESSES, "timer_leak")
    outcome = il.clause_teeth("timer_clean", "timer_leak")
    assert outcome.status == ERROR and outcome.detail == "no run breaks timer_leak alone: timer_leak has no teeth"


def test_teeth_a_run_that_breaks_two_clauses_is_no_witness(monkeypatch):
    """The plain-write mutant run to its end: both threads that win also run onComplete."""
    both = il.Run(il.WATCH_CHECK_FORCE, "force_without_cas", "3 3 2 1 1")
    monkeypatch.setitem(il.WITNESSES, "on_complete_twice", both)
    outcome = il.clause_teeth("exactly_once", "on_complete_twice")
    assert outcome.status == BOUND and outcome.detail.startswith(
        "caught by cas_won_twice, on_complete_twice after 5 commands")


def test_teeth_a_run_the_programs_cannot_take_is_an_error():
    with pytest.raises(ValueError, match="T2 cannot step after T1:tryComplete#1"):
        il.replay(il.Run(il.WATCH_CHECK, None, "1 2 2 2"))  # T2's check reads the empty map and is done
