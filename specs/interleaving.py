"""Threads inside the purgatory: why tryCompleteElseWatch tries twice, and cancels after adding to the timer.

model/ runs every Kafka call as one atomic step. Here the calls are cut into the atomic steps Kafka really has —
taking and releasing the op lock, the compare-and-set on ``completed``, appending to a key's list (under the shard
lock), incrementing the estimate, adding to the timer — and up to three threads interleave them, over one operation
and one key:

``T1`` tryCompleteElseWatch(op, [k]):  lock; tryComplete #1; append to k's list unless completed; estimate += 1;
       tryComplete #2; unlock; if not completed: add to the timer, then cancel the entry if completed meanwhile.
``T2`` the producer: makes the op's condition true (set_ready), then checkAndComplete(k): reads k's list (the
       iteration is weakly consistent, so it may miss an append that has not happened yet); for the op if listed:
       drop it if completed, else lock, safeTryComplete (skip if completed, else tryComplete), unlock, drop it if
       completed.
``T3`` other code calling forceComplete (the timer's expiry or a direct force).

A completion is a compare-and-set on ``completed`` followed, for the winner, by the cancel of the timer entry and
onComplete. Each thread's program is finite and the lock is always released, so unrolling the schedule to the sum
of the program lengths (with idle steps) covers every interleaving: a property that holds there is proved for this
configuration, not just bounded.
"""

from __future__ import annotations

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header, model_trace
from kpurgatory.model import vocabulary as v
from kpurgatory.specs.core import PROVED, REFUTED, Outcome, obligation, solver, undecided

DONE = 99
MUTANTS = ("no_second_try", "no_cancel_after_add", "force_without_cas")

# program counters, with the step each one executes
T1_STEPS = {0: "lock", 1: "tryComplete#1", 2: "append to k", 3: "estimated+=1", 4: "tryComplete#2", 5: "unlock",
            6: "check completed", 7: "timer add", 8: "cancel if completed", 10: "cancel+onComplete",
            11: "cancel+onComplete"}
T2_STEPS = {0: "set_ready", 1: "read k's list", 2: "skip if completed", 3: "lock", 4: "safeTryComplete",
            5: "cancel+onComplete", 6: "unlock", 7: "remove from list"}
T3_STEPS = {0: "forceComplete CAS", 1: "cancel+onComplete"}
PROGRAM_LENGTH = {1: 9, 2: 8, 3: 2}

VARS = {"pc1": int, "pc2": int, "pc3": int, "lock": int, "listed": int, "est": int, "wins": int, "oncomplete": int,
        "completed": bool, "cond": bool, "in_timer": bool, "won1": bool, "snap": bool}


def fresh(tag: str) -> dict:
    return {name: (z3.Int if kind is int else z3.Bool)(f"{name}@{tag}") for name, kind in VARS.items()}


def initial(s: dict, threads: tuple[int, ...]) -> object:
    return z3.And(*[s[f"pc{t}"] == (0 if t in threads else DONE) for t in (1, 2, 3)], s["lock"] == 0,
                  s["listed"] == 0, s["est"] == 0, s["wins"] == 0, s["oncomplete"] == 0, z3.Not(s["completed"]),
                  z3.Not(s["cond"]), z3.Not(s["in_timer"]), z3.Not(s["won1"]), z3.Not(s["snap"]))


def _cas(s: dict, n: dict, guard, atomic: bool = True) -> object:
    """compare-and-set completed false -> true under ``guard``; returns whether this thread won (``atomic=False``:
    a plain write, which every caller wins)."""
    win = z3.And(guard, z3.Not(s["completed"])) if atomic else guard
    n["completed"] = z3.Or(s["completed"], win)
    n["wins"] = s["wins"] + z3.If(win, 1, 0)
    return win


def _finish(s: dict, n: dict) -> None:
    """The CAS winner: cancel the timer entry, then onComplete."""
    n["in_timer"] = z3.BoolVal(False)
    n["oncomplete"] = s["oncomplete"] + 1


def t1(s: dict, mutants: frozenset) -> tuple[object, dict]:
    """One step of T1 from any pc: (enabled, next state)."""
    cases = {}
    for pc in T1_STEPS:
        n = dict(s)
        if pc == 0:
            n["lock"], n["pc1"] = z3.IntVal(1), z3.IntVal(1)
        elif pc in (1, 4):
            win = _cas(s, n, s["cond"])
            n["won1"] = z3.Or(s["won1"], win)
            n["pc1"] = z3.If(win, 10 if pc == 1 else 11, 2 if pc == 1 else 5)
        elif pc == 2:
            n["listed"] = s["listed"] + z3.If(s["completed"], 0, 1)
            n["pc1"] = z3.IntVal(3)
        elif pc == 3:
            n["est"] = s["est"] + 1
            n["pc1"] = z3.IntVal(5 if "no_second_try" in mutants else 4)
        elif pc == 5:
            n["lock"] = z3.IntVal(0)
            n["pc1"] = z3.If(s["won1"], DONE, 6)
        elif pc == 6:
            n["pc1"] = z3.If(s["completed"], DONE, 7)
        elif pc == 7:
            n["in_timer"] = z3.BoolVal(True)
            n["pc1"] = z3.IntVal(DONE if "no_cancel_after_add" in mutants else 8)
        elif pc == 8:
            n["in_timer"] = z3.And(s["in_timer"], z3.Not(s["completed"]))
            n["pc1"] = z3.IntVal(DONE)
        elif pc in (10, 11):
            _finish(s, n)
            n["pc1"] = z3.IntVal(5)
        cases[pc] = n
    enabled = z3.And(s["pc1"] != DONE, z3.Implies(s["pc1"] == 0, s["lock"] == 0))
    return enabled, _by_pc(s, "pc1", cases)


def t2(s: dict, mutants: frozenset) -> tuple[object, dict]:
    cases = {}
    for pc in T2_STEPS:
        n = dict(s)
        if pc == 0:
            n["cond"], n["pc2"] = z3.BoolVal(True), z3.IntVal(1)
        elif pc == 1:
            n["snap"] = s["listed"] > 0
            n["pc2"] = z3.If(s["listed"] > 0, 2, DONE)
        elif pc == 2:
            n["pc2"] = z3.If(s["completed"], 7, 3)
        elif pc == 3:
            n["lock"], n["pc2"] = z3.IntVal(2), z3.IntVal(4)
        elif pc == 4:
            win = _cas(s, n, s["cond"])
            n["pc2"] = z3.If(win, 5, 6)
        elif pc == 5:
            _finish(s, n)
            n["pc2"] = z3.IntVal(6)
        elif pc == 6:
            n["lock"] = z3.IntVal(0)
            n["pc2"] = z3.If(s["completed"], 7, DONE)
        elif pc == 7:
            n["listed"] = z3.If(s["listed"] > 0, s["listed"] - 1, 0)
            n["pc2"] = z3.IntVal(DONE)
        cases[pc] = n
    enabled = z3.And(s["pc2"] != DONE, z3.Implies(s["pc2"] == 3, s["lock"] == 0))
    return enabled, _by_pc(s, "pc2", cases)


def t3(s: dict, mutants: frozenset) -> tuple[object, dict]:
    cases = {}
    for pc in T3_STEPS:
        n = dict(s)
        if pc == 0:
            win = _cas(s, n, z3.BoolVal(True), atomic="force_without_cas" not in mutants)
            n["pc3"] = z3.If(win, 1, DONE)
        else:
            _finish(s, n)
            n["pc3"] = z3.IntVal(DONE)
        cases[pc] = n
    return s["pc3"] != DONE, _by_pc(s, "pc3", cases)


def _by_pc(s: dict, pc_name: str, cases: dict[int, dict]) -> dict:
    pcs = list(cases)
    out = dict(cases[pcs[-1]])
    for pc in reversed(pcs[:-1]):
        out = {name: z3.If(s[pc_name] == pc, cases[pc][name], out[name]) for name in out}
    return out


THREADS = {1: t1, 2: t2, 3: t3}


@attrs.frozen
class Schedule:
    steps: tuple[tuple[int, str], ...]  # (thread, step label)

    def __str__(self) -> str:
        return " -> ".join(f"T{thread}:{label}" for thread, label in self.steps)


def explore(threads: tuple[int, ...], mutants: frozenset, *, final_bad=None, any_bad=None
            ) -> tuple[str, Schedule | None, int]:
    """Search every interleaving of ``threads`` (idle steps allowed, so the unrolling to the sum of the program
    lengths is complete) for a state where ``any_bad`` holds, or a final state (all threads done) where
    ``final_bad`` holds."""
    depth = sum(PROGRAM_LENGTH[t] for t in threads)
    sol = solver()
    states = [fresh("0")]
    sol.add(initial(states[0], threads))
    choices = []
    for i in range(depth):
        s = states[-1]
        choice = z3.Int(f"run@{i}")
        sol.add(z3.Or(choice == 0, *[choice == t for t in threads]))
        n = fresh(str(i + 1))
        nxt = dict(s)
        for t in threads:
            enabled, after = THREADS[t](s, mutants)
            sol.add(z3.Implies(choice == t, enabled))
            nxt = {name: z3.If(choice == t, after[name], nxt[name]) for name in nxt}
        sol.add(*[n[name] == nxt[name] for name in n])
        states.append(n)
        choices.append(choice)
    bad = []
    if any_bad is not None:
        bad += [any_bad(s) for s in states]
    if final_bad is not None:
        last = states[-1]
        bad.append(z3.And(*[last[f"pc{t}"] == DONE for t in threads], final_bad(last)))
    sol.add(z3.Or(*bad))
    result = sol.check()
    if result == z3.unsat:
        return PROVED, None, depth
    if result != z3.sat:
        return undecided(sol), None, depth
    model = sol.model()
    steps = []
    for i, choice in enumerate(choices):
        thread = model.eval(choice).as_long()
        if thread:
            pc = model.eval(states[i][f"pc{thread}"]).as_long()
            steps.append((thread, {1: T1_STEPS, 2: T2_STEPS, 3: T3_STEPS}[thread][pc]))
    return REFUTED, Schedule(tuple(steps)), depth


def lost_wakeup(s: dict) -> object:
    """At the end the condition holds (T2 set it, then checked k) and the op is not completed."""
    return z3.And(s["cond"], z3.Not(s["completed"]))


def exactly_once_bad(s: dict) -> object:
    return z3.Or(s["wins"] > 1, s["oncomplete"] > 1)


def timer_leak(s: dict) -> object:
    return z3.And(s["completed"], s["in_timer"])


def outcome(status: str, schedule: Schedule | None, depth: int, threads: tuple[int, ...], what: str) -> Outcome:
    method = f"interleavings of T{'/T'.join(map(str, threads))}, {depth} steps (all)"
    if status == PROVED:
        return Outcome(PROVED, method, f"no interleaving {what}")
    if status == REFUTED:
        return Outcome(REFUTED, method, f"{what}: {schedule}", witness={"schedule": [list(s) for s in schedule.steps]})
    return Outcome(status, method, "z3 gave up")


DOMAIN_2 = "1 op, 1 key; T1 watch, T2 set_ready+check; every interleaving"
DOMAIN_3 = "1 op, 1 key; T1 watch, T2 set_ready+check, T3 forceComplete; every interleaving"


@obligation("interleaving.no_lost_wakeup", domain=DOMAIN_2,
            mutant="tryCompleteElseWatch without its second tryComplete")
def no_lost_wakeup(mutated: bool = False) -> Outcome:
    """No lost wakeup under concurrency: when T2 makes the condition true and then checks the key, the op ends
    completed in every interleaving with T1's tryCompleteElseWatch — including the one where the condition becomes
    true after T1's first tryComplete and T2's check reads the list before T1 has appended to it. T1's second
    tryComplete, made after the append and under the op lock, sees the condition then; and a check that does see
    the entry waits for the op lock, so it tries after T1's second try. This is Kafka's argument for trying twice
    (KAFKA-1952, and the comment in tryCompleteElseWatch)."""
    mutants = frozenset({"no_second_try"}) if mutated else frozenset()
    return outcome(*explore((1, 2), mutants, final_bad=lost_wakeup), (1, 2), "loses the wakeup")


@obligation("interleaving.exactly_once", domain=DOMAIN_3,
            mutant="forceComplete sets completed with a plain write instead of a compare-and-set")
def exactly_once(mutated: bool = False) -> Outcome:
    """Exactly once under concurrency: whatever the interleaving of T1's two tries, T2's check and T3's
    forceComplete, the compare-and-set on completed is won at most once and onComplete runs at most once."""
    mutants = frozenset({"force_without_cas"}) if mutated else frozenset()
    return outcome(*explore((1, 2, 3), mutants, any_bad=exactly_once_bad), (1, 2, 3), "completes twice")


@obligation("interleaving.timer_clean", domain=DOMAIN_3,
            mutant="tryCompleteElseWatch without the cancel after its timer add")
def timer_clean(mutated: bool = False) -> Outcome:
    """No completed op is left in the timer: when all threads are done, a completed op has no timer entry, so
    numDelayed counts only live ops. The race it guards against: T1 finds the op not completed and goes to add it
    to the timer; meanwhile another thread completes it and cancels its (not yet existing) timer entry; T1 then adds
    it. Kafka's "if completed after the add, cancel" step removes that entry."""
    mutants = frozenset({"no_cancel_after_add"}) if mutated else frozenset()
    return outcome(*explore((1, 2, 3), mutants, final_bad=timer_leak), (1, 2, 3), "leaves a completed op in the timer")


# --- mutants -------------------------------------------------------------------------------------------------------

LOST_WAKEUP_DELAY = 10


def lost_wakeup_trace(schedule: Schedule):
    """The sequential projection of a lost-wakeup interleaving, in the vocabulary: T2's check read the list before
    T1's append, and the condition became true between T1's first tryComplete and the append — which the vocabulary
    says with ready_on=2 (the condition holds from the op's second tryComplete on). So: check(k) finds nothing;
    watch(o, [k], ready_on=2) completes the op by its second try (the model: True, Complete via try); the advance to
    the deadline expires nothing. Without the second try the watch returns False and the op only times out."""
    order = [f"T{t}:{label}" for t, label in schedule.steps]
    first_try, ready = order.index("T1:tryComplete#1"), order.index("T2:set_ready")
    snapshot, append = order.index("T2:read k's list"), order.index("T1:append to k")
    assert first_try < ready and snapshot < append, "not the lost-wakeup shape"
    commands = [v.Check("k0"), v.Watch("a", ["k0"], LOST_WAKEUP_DELAY, 2), v.Advance(LOST_WAKEUP_DELAY), v.Watched(),
                v.Delayed()]
    header = Header("specs.mutant.interleaving.no_second_try", "purgatory", v.Params(tick_ms=1, wheel_size=20),
                    "kpurgatory.model", "projection of the interleaving " + str(schedule) + ": the op becomes ready "
                    "after the first tryComplete (ready_on=2) and the check ran before the watch; with Kafka's second "
                    "tryComplete the watch completes it, without it the op waits for its timeout")
    return model_trace(header, commands)


@obligation("mutant.interleaving.no_second_try", kind="mutant", expect=REFUTED, domain=DOMAIN_2)
def mutant_no_second_try() -> Outcome:
    """Mutant: tryCompleteElseWatch without its second tryComplete. z3 finds the lost-wakeup interleaving: T1's
    first try fails, T2 makes the condition true and checks the key, whose list does not hold the op yet, then T1
    appends and adds the op to the timer — the op waits for its timeout although it was ready and its key was
    checked. The trace is the interleaving's projection onto the sequential vocabulary (see lost_wakeup_trace)."""
    status, schedule, depth = explore((1, 2), frozenset({"no_second_try"}), final_bad=lost_wakeup)
    result = outcome(status, schedule, depth, (1, 2), "loses the wakeup")
    if status == REFUTED:
        result.traces = {"counterexample": lost_wakeup_trace(schedule)}
    return result


@obligation("mutant.interleaving.no_cancel_after_add", kind="mutant", expect=REFUTED, domain=DOMAIN_3)
def mutant_no_cancel_after_add() -> Outcome:
    """Mutant: tryCompleteElseWatch without the cancel after the timer add. z3 finds the interleaving in which
    another thread completes the op between T1's "not completed" check and its timer add: the completed op stays in
    the timer until its deadline, counted by numDelayed (and keeping estimated - numDelayed, the purge trigger, too
    low). Only an interleaving shows it, so there is no sequential trace; the schedule is the counterexample."""
    return outcome(*explore((1, 2, 3), frozenset({"no_cancel_after_add"}), final_bad=timer_leak), (1, 2, 3),
                   "leaves a completed op in the timer")
