"""Threads inside the purgatory: the races of watching, checking, purging and cancelling one key.

model/ runs every Kafka call as one atomic step. Here the calls are cut into the atomic steps Kafka really has, at
its granularity of locking — the op's lock, the shard lock that guards the watchers map, the compare-and-set on
``completed``, the lock-free watch list (appends under the shard lock, walks and removals without it) — and a few
threads interleave them over one key ``k`` and up to three operations. Each thread runs one of these programs:

``watch(o)``     tryCompleteElseWatch(o, [k]): lock o; tryComplete #1; unless o is completed: take the shard lock,
                 find or create k's list in the map, append o, release; estimated += 1; tryComplete #2; unlock o; if
                 o is not completed: add it to the timer, then cancel the entry if it was completed meanwhile
                 (``watch(o, no timer)``: a purgatory built with timerEnabled false, which stops after the unlock).
``check(k)``     checkAndComplete(k), optionally after set_ready (making conditions true): read k's list from the
                 map under the shard lock; walk it: an entry of a completed op is removed; for any other, lock the op,
                 safeTryComplete (skip if completed, else tryComplete), unlock, remove the entry if this call
                 completed it; then, if the list looks empty, removeKeyIfEmpty.
``purge``        the reaper's purge of k's list: read the map (without the lock, as allWatchers does), remove the
                 entries of completed ops, and if the list looks empty, removeKeyIfEmpty.
``cancelForKey`` under the shard lock: remove k's list from the map, cancel the timer entry of each op in it and
                 return it.
``force(o)``     forceComplete from other code (the timer's expiry or a direct force), without the op lock.

removeKeyIfEmpty takes the shard lock and removes k only if the map still holds the list the caller walked and that
list is still empty. A completion is a compare-and-set on ``completed`` followed, for the winner, by the cancel of
the timer entry and onComplete.

Atomicity. Taking a lock is merged with the first action under it, and releasing it with the last one (acquiring
commutes to the right and releasing to the left with every other thread's actions, Lipton's reduction). A walk reads
an op's entry and its completed flag in one step (the flag only goes from false to true, and the one removal of a
live op's entry, cancelForKey, leaves the walk holding the op either way). safeTryComplete's completed test and
its tryComplete are one step: between them only a forceComplete without the lock can complete the op, and then
tryComplete's compare-and-set fails and changes nothing. removeKeyIfEmpty is one step: under the shard lock the list
can only shrink (appends need that lock), and a thread that empties it afterwards calls removeKeyIfEmpty itself.
estimated += 1, which no other thread reads here, is merged into the watch's preceding step. The walks visit the ops
in a fixed order (the scenario's), not insertion order.

Each program is finite and every lock is released, so unrolling the schedule to the sum of the program lengths (the
longest paths through their steps, computed from the steps themselves; idle steps allowed at the end) covers every
interleaving: a property that holds there is proved for its scenario, not just bounded.
Each obligation states its scenario (its bound: those threads, those ops, one key, each call once) and names a
mutant of its subject that z3 refutes with a schedule.
"""

from __future__ import annotations

from typing import Callable

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header, model_trace
from kpurgatory.model import vocabulary as v
from kpurgatory.specs.core import PROVED, REFUTED, Outcome, obligation, solver, undecided

DONE = 99
#: every counter, pc and list object is a small bit-vector (bit-blasted searches are fast; no value nears 2^7)
WIDTH = 8

#: the deliberate bugs, by key; an obligation's mutant builds one of them into its subject
MUTANTS = {
    "no_second_try": "tryCompleteElseWatch without its second tryComplete",
    "no_cancel_after_add": "tryCompleteElseWatch without the cancel after its timer add",
    "force_without_cas": "forceComplete sets completed with a plain write instead of a compare-and-set",
    "no_completed_guard": "safeTryComplete calls tryComplete without first testing, under the op lock, whether the op "
                          "is completed",
    "remove_without_recheck": "removeKeyIfEmpty removes the key when the walk found the list empty, without testing "
                              "again under the shard lock that it still is",
    "remove_without_identity": "removeKeyIfEmpty removes k when the list it walked is empty, without testing that "
                               "the map still holds that list",
    "append_outside_lock": "watchForOperation finds k's list under the shard lock but appends to it after releasing "
                           "the lock",
    "create_without_lock": "watchForOperation finds or creates k's list without the shard lock (get, then put a new "
                           "list if there was none)",
}


@attrs.frozen
class Role:
    """What one thread runs: ``kind`` in watch, check, purge, cancel_key, force."""

    kind: str
    op: str = ""
    #: check only: the ops whose conditions it makes true (set_ready) before checking k
    ready: tuple[str, ...] = ()
    #: watch only: False for a purgatory built with timerEnabled false (the watch ends after its second try)
    timer: bool = True

    def __str__(self) -> str:
        return {"watch": f"watch({self.op})" if self.timer else f"watch({self.op}, no timer)",
                "force": f"forceComplete({self.op})", "purge": "purge", "cancel_key": "cancelForKey(k)",
                "check": f"set_ready({','.join(self.ready)})+check(k)" if self.ready else "check(k)"}[self.kind]


@attrs.frozen
class Scenario:
    roles: tuple[Role, ...]
    #: ops completed before the threads start, still listed on k (the map holds their list)
    stale: tuple[str, ...] = ()
    #: ops watched on k before the threads start, still waiting (listed, in the timer)
    waiting: tuple[str, ...] = ()

    @property
    def ops(self) -> tuple[str, ...]:
        named = [role.op for role in self.roles if role.op] + [o for role in self.roles for o in role.ready]
        return tuple(dict.fromkeys([*named, *self.stale, *self.waiting]))

    @property
    def lists(self) -> int:
        """List objects that can exist for k: the initial one, and one per watch that creates one."""
        return (1 if self.stale or self.waiting else 0) + sum(role.kind == "watch" for role in self.roles)

    def __str__(self) -> str:
        before = [f"{', '.join(self.stale)} completed and listed on k" if self.stale else "",
                  f"{', '.join(self.waiting)} waiting on k" if self.waiting else ""]
        threads = ", ".join(f"T{t} {role}" for t, role in enumerate(self.roles, start=1))
        return (f"ops {', '.join(self.ops)}, 1 key; {threads}" + "".join(f"; before: {b}" for b in before if b)
                + "; one call per thread, every interleaving")


def num(value) -> object:
    return value if isinstance(value, z3.ExprRef) else z3.BitVecVal(value, WIDTH)


def pick(condition, then, otherwise) -> object:
    return z3.If(condition, num(then), num(otherwise))


# --- state -----------------------------------------------------------------------------------------------------------
#
# Per op o: done.o (completed), cond.o (tryComplete would succeed), timer.o (has a timer entry), wins.o (CAS won),
# calls.o (onComplete runs), lock.o (the thread holding its lock, 0: free), locked.o (completed by a CAS won under its
# lock), stale.o (tryComplete calls made after such a completion), returned.o (times cancelForKey returned it),
# watched.o (appended to a list). The key: map (the list object it holds, 0: none), next (the next list object),
# shard (the thread holding the shard lock), est, and entries e.L.o (o's entries in list object L). Per thread t:
# pc.t and list.t (the list object it found or walks).

OP_VARS = {"done": bool, "cond": bool, "timer": bool, "wins": int, "calls": int, "lock": int, "locked": bool,
           "stale": int, "returned": int, "watched": bool}


def variables(sc: Scenario) -> dict[str, type]:
    names = {f"{var}.{o}": kind for o in sc.ops for var, kind in OP_VARS.items()}
    names.update({"map": int, "next": int, "shard": int, "est": int})
    names.update({f"e.{lst}.{o}": int for lst in range(1, sc.lists + 1) for o in sc.ops})
    for t in range(1, len(sc.roles) + 1):
        names.update({f"pc.{t}": int, f"list.{t}": int})
    return names


def fresh(sc: Scenario, tag: str) -> dict:
    return {name: z3.BitVec(f"{name}@{tag}", WIDTH) if kind is int else z3.Bool(f"{name}@{tag}")
            for name, kind in variables(sc).items()}


def initial(sc: Scenario, s: dict) -> object:
    listed = set(sc.stale) | set(sc.waiting)
    facts = [s["map"] == (1 if listed else 0), s["next"] == (2 if listed else 1), s["shard"] == 0, s["est"] == 0]
    for o in sc.ops:
        facts += [s[f"done.{o}"] == (o in sc.stale), s[f"cond.{o}"] == (o in sc.stale),
                  s[f"timer.{o}"] == (o in sc.waiting), s[f"wins.{o}"] == int(o in sc.stale),
                  s[f"calls.{o}"] == int(o in sc.stale), s[f"lock.{o}"] == 0, z3.Not(s[f"locked.{o}"]),
                  s[f"stale.{o}"] == 0, s[f"returned.{o}"] == 0, s[f"watched.{o}"] == (o in listed)]
        facts += [s[f"e.{lst}.{o}"] == int(lst == 1 and o in listed) for lst in range(1, sc.lists + 1)]
    for t, role in enumerate(sc.roles, start=1):
        facts += [s[f"pc.{t}"] == program(role, sc, t, frozenset()).start, s[f"list.{t}"] == 0]
    return z3.And(*facts)


def entries(sc: Scenario, s: dict, lst, o: str) -> object:
    """o's entries in list object ``lst`` (0 when ``lst`` is 0: no list)."""
    out = num(0)
    for candidate in range(1, sc.lists + 1):
        out = pick(lst == candidate, s[f"e.{candidate}.{o}"], out)
    return out


def set_entries(sc: Scenario, s: dict, n: dict, lst, o: str, value) -> None:
    for candidate in range(1, sc.lists + 1):
        n[f"e.{candidate}.{o}"] = pick(lst == candidate, value, s[f"e.{candidate}.{o}"])


def is_empty(sc: Scenario, s: dict, lst) -> object:
    return z3.And(*[entries(sc, s, lst, o) == 0 for o in sc.ops])


# --- the steps the programs share ------------------------------------------------------------------------------------


def cas(s: dict, n: dict, o: str, guard, *, atomic: bool = True, under_lock: bool = True) -> object:
    """forceComplete's compare-and-set of completed, false -> true, when ``guard`` holds; returns whether this
    thread won (``atomic=False``: a plain write, which every caller wins)."""
    win = z3.And(guard, z3.Not(s[f"done.{o}"])) if atomic else guard
    n[f"done.{o}"] = z3.Or(s[f"done.{o}"], win)
    n[f"wins.{o}"] = s[f"wins.{o}"] + pick(win, 1, 0)
    if under_lock:
        n[f"locked.{o}"] = z3.Or(s[f"locked.{o}"], win)
    return win


def try_complete(s: dict, n: dict, o: str) -> object:
    """The op's tryComplete, called under its lock: forceComplete if the condition holds. A call after a completion
    made under the op lock is counted (stale.o): it is what safeTryComplete's completed test prevents."""
    n[f"stale.{o}"] = s[f"stale.{o}"] + pick(s[f"locked.{o}"], 1, 0)
    return cas(s, n, o, s[f"cond.{o}"])


def finish(s: dict, n: dict, o: str) -> None:
    """The CAS winner: cancel the timer entry, then onComplete."""
    n[f"timer.{o}"] = z3.BoolVal(False)
    n[f"calls.{o}"] = s[f"calls.{o}"] + 1


def remove_key_if_empty(sc: Scenario, s: dict, n: dict, t: int, mutants: frozenset) -> None:
    """Under the shard lock: remove k if the map still holds the list this thread walked and it is still empty."""
    same = s["map"] != 0 if "remove_without_identity" in mutants else s["map"] == s[f"list.{t}"]
    remove = same if "remove_without_recheck" in mutants else z3.And(same, is_empty(sc, s, s[f"list.{t}"]))
    n["map"] = pick(remove, 0, s["map"])


@attrs.frozen
class Step:
    label: str
    effect: Callable[[dict, dict], None]  # sets the next state (pc included) from the current one
    enabled: Callable[[dict], object] | None = None


@attrs.frozen
class Program:
    steps: dict[int, Step]
    start: int

    def successors(self, probe: dict, pc: str) -> dict[int, set[int]]:
        """The pcs each step can go to: the numerals its effect may write to the thread's pc."""
        graph = {}
        for at, step in self.steps.items():
            n = dict(probe)
            step.effect(probe, n)
            graph[at] = set(_leaves(n[pc]))
        return graph

    def length(self, sc: Scenario, t: int) -> int:
        """The most steps one run of the program takes: the longest path from its start to DONE (the steps only
        go forward, so the graph is acyclic)."""
        graph = self.successors(fresh(sc, "probe"), f"pc.{t}")

        def longest(at: int, seen: frozenset) -> int:
            assert at not in seen, "a program loops"
            return 0 if at == DONE else 1 + max(longest(nxt, seen | {at}) for nxt in graph[at])

        return longest(self.start, frozenset())


def _leaves(term) -> list[int]:
    if z3.is_bv_value(term):
        return [term.as_long()]
    if z3.is_app_of(term, z3.Z3_OP_ITE):
        return _leaves(term.arg(1)) + _leaves(term.arg(2))
    raise ValueError(f"a pc is set to {term}, not to a numeral")


def program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    return {"watch": watch_program, "check": check_program, "purge": purge_program,
            "cancel_key": cancel_key_program, "force": force_program}[role.kind](role, sc, t, mutants)


def watch_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    o, pc, mine = role.op, f"pc.{t}", f"list.{t}"

    def goto(n, target):
        n[pc] = num(target)

    def first_try(s, n):
        n[f"lock.{o}"] = num(t)
        win = try_complete(s, n, o)
        goto(n, pick(win, 20, 2))

    def skip_if_completed(s, n):
        # a completed op joins no list; estimated += 1 (touched by nothing else, so merged into this step) all the same
        n["est"] = s["est"] + pick(s[f"done.{o}"], 1, 0)
        goto(n, pick(s[f"done.{o}"], 7 if "no_second_try" in mutants else 6, 3))

    def find_or_create(s, n):
        found = s["map"]
        if "create_without_lock" in mutants:
            n[mine] = found
            goto(n, pick(found == 0, 13, 4))
            return
        created = pick(found == 0, s["next"], found)
        n["map"], n[mine] = created, created
        n["next"] = s["next"] + pick(found == 0, 1, 0)
        if "append_outside_lock" not in mutants:
            n["shard"] = num(t)
        goto(n, 4)

    def put_new_list(s, n):
        n["map"], n[mine], n["next"] = s["next"], s["next"], s["next"] + 1
        goto(n, 4)

    def append(s, n):
        set_entries(sc, s, n, s[mine], o, entries(sc, s, s[mine], o) + 1)
        n[f"watched.{o}"] = z3.BoolVal(True)
        n["shard"] = pick(s["shard"] == t, 0, s["shard"])
        n["est"] = s["est"] + 1
        goto(n, 7 if "no_second_try" in mutants else 6)

    def second_try(s, n):
        win = try_complete(s, n, o)
        n[f"lock.{o}"] = pick(win, t, 0)  # a failed try releases the lock in the same step
        goto(n, pick(win, 21, after))

    def unlock(s, n):
        n[f"lock.{o}"] = num(0)
        goto(n, after)

    def check_completed(s, n):
        goto(n, pick(s[f"done.{o}"], DONE, 9))

    def timer_add(s, n):
        n[f"timer.{o}"] = z3.BoolVal(True)
        goto(n, DONE if "no_cancel_after_add" in mutants else 10)

    def cancel_if_completed(s, n):
        n[f"timer.{o}"] = z3.And(s[f"timer.{o}"], z3.Not(s[f"done.{o}"]))
        goto(n, DONE)

    def complete(s, n):
        finish(s, n, o)
        n[f"lock.{o}"] = num(0)
        goto(n, DONE)

    after = 8 if role.timer else DONE
    shard_free = None if "create_without_lock" in mutants else (lambda s: s["shard"] == 0)
    steps = {0: Step("tryComplete#1", first_try, lambda s: s[f"lock.{o}"] == 0),
             2: Step("skip if completed", skip_if_completed),
             3: Step("find or create k's list", find_or_create, shard_free), 13: Step("put a new list", put_new_list),
             4: Step("append to k", append), 6: Step("tryComplete#2", second_try), 7: Step("unlock", unlock),
             8: Step("check completed", check_completed), 9: Step("timer add", timer_add),
             10: Step("cancel if completed", cancel_if_completed), 20: Step("cancel+onComplete", complete),
             21: Step("cancel+onComplete", complete)}
    return Program(steps, 0)


def walk(sc: Scenario, after: int, visit: Callable[[int, str, int], dict[int, Step]]) -> dict[int, Step]:
    """The steps of a walk over k's list, one block of pcs per op (10, 20, ...); ``visit(base, op, next_pc)``."""
    steps = {}
    for i, o in enumerate(sc.ops):
        base = 10 * (i + 1)
        steps.update(visit(base, o, 10 * (i + 2) if i + 1 < len(sc.ops) else after))
    return steps


def walk_end(sc: Scenario, t: int, mutants: frozenset) -> dict[int, Step]:
    """After a walk (pc 90): if the list looks empty, removeKeyIfEmpty (pc 91)."""
    pc = f"pc.{t}"

    def looks_empty(s, n):
        n[pc] = pick(is_empty(sc, s, s[f"list.{t}"]), 91, DONE)

    def remove(s, n):
        remove_key_if_empty(sc, s, n, t, mutants)
        n[pc] = num(DONE)

    return {90: Step("list empty?", looks_empty), 91: Step("removeKeyIfEmpty", remove, lambda s: s["shard"] == 0)}


def check_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    pc, mine = f"pc.{t}", f"list.{t}"

    def set_ready(s, n):
        for o in role.ready:
            n[f"cond.{o}"] = z3.BoolVal(True)
        n[pc] = num(1)

    def read(s, n):
        n[mine] = s["map"]
        n[pc] = pick(s["map"] == 0, DONE, 10)

    def visit(base: int, o: str, nxt: int) -> dict[int, Step]:
        def look(s, n):
            listed = entries(sc, s, s[mine], o) > 0
            n[pc] = pick(z3.Not(listed), nxt, pick(s[f"done.{o}"], base + 3, base + 1))

        def safe_try(s, n):
            # lock; skip if completed (Kafka's test), else tryComplete; a call that did not complete the op unlocks
            guarded = z3.BoolVal(False) if "no_completed_guard" in mutants else s[f"done.{o}"]
            m = dict(s)
            win = z3.And(z3.Not(guarded), try_complete(s, m, o))
            for name in (f"done.{o}", f"wins.{o}", f"locked.{o}", f"stale.{o}"):
                n[name] = pick(guarded, s[name], m[name])
            n[f"lock.{o}"] = pick(win, t, 0)
            n[pc] = pick(win, base + 2, nxt)

        def complete(s, n):
            finish(s, n, o)
            n[f"lock.{o}"] = num(0)
            n[pc] = num(base + 3)

        def remove(s, n):
            count = entries(sc, s, s[mine], o)
            set_entries(sc, s, n, s[mine], o, pick(count > 0, count - 1, 0))
            n[pc] = num(nxt)

        return {base: Step(f"visit {o}", look),
                base + 1: Step(f"safeTryComplete {o}", safe_try, lambda s: s[f"lock.{o}"] == 0),
                base + 2: Step(f"cancel+onComplete {o}", complete), base + 3: Step(f"remove {o} from list", remove)}

    steps = {0: Step("set_ready", set_ready), 1: Step("read k's list", read, lambda s: s["shard"] == 0)}
    steps.update(walk(sc, 90, visit))
    steps.update(walk_end(sc, t, mutants))
    return Program(steps, 0 if role.ready else 1)


def purge_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    pc, mine = f"pc.{t}", f"list.{t}"

    def read(s, n):
        n[mine] = s["map"]
        n[pc] = pick(s["map"] == 0, DONE, 10)

    def visit(base: int, o: str, nxt: int) -> dict[int, Step]:
        def look(s, n):
            n[pc] = pick(z3.And(entries(sc, s, s[mine], o) > 0, s[f"done.{o}"]), base + 1, nxt)

        def remove(s, n):
            set_entries(sc, s, n, s[mine], o, entries(sc, s, s[mine], o) - 1)
            n[pc] = num(nxt)

        return {base: Step(f"visit {o}", look), base + 1: Step(f"remove {o} from list", remove)}

    steps = {0: Step("read the map", read)}
    steps.update(walk(sc, 90, visit))
    steps.update(walk_end(sc, t, mutants))
    return Program(steps, 0)


def cancel_key_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    pc, mine = f"pc.{t}", f"list.{t}"

    def take(s, n):
        n["shard"], n[mine], n["map"] = num(t), s["map"], num(0)
        n[pc] = pick(s["map"] == 0, 90, 10)

    def visit(base: int, o: str, nxt: int) -> dict[int, Step]:
        def cancel(s, n):
            count = entries(sc, s, s[mine], o)
            n[f"timer.{o}"] = z3.And(s[f"timer.{o}"], count == 0)
            n[f"returned.{o}"] = s[f"returned.{o}"] + count
            set_entries(sc, s, n, s[mine], o, 0)
            n[pc] = num(nxt)

        return {base: Step(f"cancel {o}", cancel)}

    def unlock(s, n):
        n["shard"], n[pc] = num(0), num(DONE)

    steps = {0: Step("remove k's list from the map", take, lambda s: s["shard"] == 0)}
    steps.update(walk(sc, 90, visit))
    steps[90] = Step("unlock", unlock)
    return Program(steps, 0)


def force_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    o, pc = role.op, f"pc.{t}"

    def force(s, n):
        win = cas(s, n, o, z3.BoolVal(True), atomic="force_without_cas" not in mutants, under_lock=False)
        n[pc] = pick(win, 1, DONE)

    def complete(s, n):
        finish(s, n, o)
        n[pc] = num(DONE)

    return Program({0: Step("forceComplete CAS", force), 1: Step("cancel+onComplete", complete)}, 0)


def transition(prog: Program, s: dict, t: int) -> tuple[object, dict]:
    """One step of thread t from any pc: (enabled, next state); only the variables some step writes are selected."""
    pc = s[f"pc.{t}"]
    cases = {}
    for at, step in prog.steps.items():
        n = dict(s)
        step.effect(s, n)
        cases[at] = {name: value for name, value in n.items() if value is not s[name]}
    out = dict(s)
    for name in {name for case in cases.values() for name in case}:
        value = s[name]
        for at, case in cases.items():
            if name in case:
                value = pick(pc == at, case[name], value)
        out[name] = value
    guards = [z3.Implies(pc == at, step.enabled(s)) for at, step in prog.steps.items() if step.enabled is not None]
    return z3.And(pc != DONE, *guards), out


# --- the search ------------------------------------------------------------------------------------------------------


@attrs.frozen
class Schedule:
    steps: tuple[tuple[int, str], ...]  # (thread, step label)

    def __str__(self) -> str:
        return " -> ".join(f"T{thread}:{label}" for thread, label in self.steps)


Predicate = Callable[[Scenario, dict], object]


def explore(sc: Scenario, mutants: frozenset, *, final_bad: Predicate | None = None,
            ever_bad: Predicate | None = None) -> tuple[str, Schedule | None, int]:
    """Search every interleaving of the scenario's threads (idle steps allowed at the end, so the unrolling to the
    sum of the program lengths is complete) for a final state (all threads done) where ``final_bad`` holds, or a
    state where ``ever_bad`` holds — a property that, once it holds, holds in every later state (a counter that only
    grows), so it is tested on the last state of every run and its prefixes."""
    programs = {t: program(role, sc, t, mutants) for t, role in enumerate(sc.roles, start=1)}
    depth = sum(prog.length(sc, t) for t, prog in programs.items())
    sol = solver()  # z3's resource budget: two_watchers, the largest search here, uses about 2e7 of it
    states = [fresh(sc, "0")]
    sol.add(initial(sc, states[0]))
    choices = []
    for i in range(depth):
        s = states[-1]
        choice = z3.BitVec(f"run@{i}", WIDTH)
        sol.add(z3.And(choice >= 0, choice <= len(programs)))
        if choices:  # idle steps only at the end: every run is padded, none is left out
            sol.add(z3.Implies(choices[-1] == 0, choice == 0))
        nxt = dict(s)
        for t, prog in programs.items():
            enabled, after = transition(prog, s, t)
            sol.add(z3.Implies(choice == t, enabled))
            nxt = {name: pick(choice == t, after[name], nxt[name]) if after[name] is not s[name] else nxt[name]
                   for name in nxt}
        n = fresh(sc, str(i + 1))
        sol.add(*[n[name] == nxt[name] for name in n])
        states.append(n)
        choices.append(choice)
    bad = []
    if ever_bad is not None:  # a counter that only grows: a run that reaches it idles to the last state
        bad.append(ever_bad(sc, states[-1]))
    if final_bad is not None:
        last = states[-1]
        bad.append(z3.And(*[last[f"pc.{t}"] == DONE for t in programs], final_bad(sc, last)))
    sol.add(z3.Or(*bad))
    result = sol.check()
    if result == z3.unsat:
        return PROVED, None, depth
    if result != z3.sat:
        return undecided(sol), None, depth
    model = sol.model()
    reached = len(choices)
    if ever_bad is not None:  # end the schedule at the step that reached the bad state
        hits = [i for i, s in enumerate(states) if z3.is_true(model.eval(ever_bad(sc, s), model_completion=True))]
        reached = hits[0] if hits else reached
    steps = []
    for i, choice in enumerate(choices[:reached]):
        thread = model.eval(choice).as_long()
        if thread:
            at = model.eval(states[i][f"pc.{thread}"]).as_long()
            steps.append((thread, programs[thread].steps[at].label))
    return REFUTED, Schedule(tuple(steps)), depth


# --- the properties --------------------------------------------------------------------------------------------------


def any_op(sc: Scenario, bad: Callable[[str], object]) -> object:
    return z3.Or(*[bad(o) for o in sc.ops])


def lost_wakeup(sc: Scenario, s: dict) -> object:
    """An op whose condition holds (a check set it, then checked k) is not completed."""
    return any_op(sc, lambda o: z3.And(s[f"cond.{o}"], z3.Not(s[f"done.{o}"])))


def completes_twice(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: z3.Or(s[f"wins.{o}"] > 1, s[f"calls.{o}"] > 1))


def timer_leak(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: z3.And(s[f"done.{o}"], s[f"timer.{o}"]))


def orphaned(sc: Scenario, s: dict) -> object:
    """A watched op, not completed and not returned by cancelForKey, has no entry in the list the map holds for k:
    no later check of k can find it (it only times out)."""
    return any_op(sc, lambda o: z3.And(s[f"watched.{o}"], z3.Not(s[f"done.{o}"]), s[f"returned.{o}"] == 0,
                                       entries(sc, s, s["map"], o) == 0))


def emptied_list_kept(sc: Scenario, s: dict) -> object:
    return z3.And(s["map"] != 0, is_empty(sc, s, s["map"]))


def stale_entry_kept(sc: Scenario, s: dict) -> object:
    return z3.Or(z3.BoolVal(False), *[entries(sc, s, s["map"], o) > 0 for o in sc.stale])


def cancelled_in_timer(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: z3.And(s[f"returned.{o}"] > 0, s[f"timer.{o}"]))


def tried_after_completion(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: s[f"stale.{o}"] > 0)


def either(*predicates: Predicate) -> Predicate:
    return lambda sc, s: z3.Or(*[p(sc, s) for p in predicates])


def outcome(sc: Scenario, status: str, schedule: Schedule | None, depth: int, what: str) -> Outcome:
    method = f"every interleaving, {depth} steps unrolled"
    threads = {f"T{t}": str(role) for t, role in enumerate(sc.roles, start=1)}
    if status == PROVED:
        return Outcome(PROVED, method, f"no interleaving {what}")
    if status == REFUTED:
        legend = ", ".join(f"{name}={role}" for name, role in threads.items())
        return Outcome(REFUTED, method, f"{what} ({legend}): {schedule}",
                       witness={"threads": threads, "schedule": [list(step) for step in schedule.steps]})
    return Outcome(status, method, "z3 gave up")


def search(sc: Scenario, mutated: bool, mutant: str, what: str, *, final_bad: Predicate | None = None,
           ever_bad: Predicate | None = None) -> Outcome:
    mutants = frozenset({mutant}) if mutated else frozenset()
    return outcome(sc, *explore(sc, mutants, final_bad=final_bad, ever_bad=ever_bad), what)


WATCH_CHECK = Scenario((Role("watch", "a"), Role("check", ready=("a",))))
WATCH_CHECK_FORCE = Scenario((Role("watch", "a"), Role("check", ready=("a",)), Role("force", "a")))
WATCH_PURGE = Scenario((Role("watch", "a"), Role("purge")), stale=("c",))
WATCH_CANCEL_KEY = Scenario((Role("watch", "a"), Role("cancel_key")), waiting=("b",))
PURGE_CANCEL_KEY_WATCH = Scenario((Role("watch", "a"), Role("purge"), Role("cancel_key")), stale=("c",))
TWO_WATCHERS = Scenario((Role("watch", "a", timer=False), Role("watch", "b", timer=False),
                         Role("check", ready=("a", "b"))))
TWO_CHECKS = Scenario((Role("watch", "a"), Role("check", ready=("a",)), Role("check"), Role("force", "a")))


@obligation("interleaving.no_lost_wakeup", domain=str(WATCH_CHECK), mutant=MUTANTS["no_second_try"])
def no_lost_wakeup(mutated: bool = False) -> Outcome:
    """No lost wakeup under concurrency: when T2 makes the condition true and then checks the key, the op ends
    completed in every interleaving with T1's tryCompleteElseWatch — including the one where the condition becomes
    true after T1's first tryComplete and T2's check reads the list before T1 has appended to it. T1's second
    tryComplete, made after the append and under the op lock, sees the condition then; and a check that does see
    the entry waits for the op lock, so it tries after T1's second try. This is Kafka's argument for trying twice
    (KAFKA-1952, and the comment in tryCompleteElseWatch)."""
    return search(WATCH_CHECK, mutated, "no_second_try", "loses the wakeup", final_bad=lost_wakeup)


@obligation("interleaving.exactly_once", domain=str(WATCH_CHECK_FORCE), mutant=MUTANTS["force_without_cas"])
def exactly_once(mutated: bool = False) -> Outcome:
    """Exactly once under concurrency: whatever the interleaving of T1's two tries, T2's check and T3's
    forceComplete, the compare-and-set on completed is won at most once and onComplete runs at most once."""
    return search(WATCH_CHECK_FORCE, mutated, "force_without_cas", "completes twice", ever_bad=completes_twice)


@obligation("interleaving.timer_clean", domain=str(WATCH_CHECK_FORCE), mutant=MUTANTS["no_cancel_after_add"])
def timer_clean(mutated: bool = False) -> Outcome:
    """No completed op is left in the timer: when all threads are done, a completed op has no timer entry, so
    numDelayed counts only live ops. The race it guards against: T1 finds the op not completed and goes to add it
    to the timer; meanwhile another thread completes it and cancels its (not yet existing) timer entry; T1 then adds
    it. Kafka's "if completed after the add, cancel" step removes that entry."""
    return search(WATCH_CHECK_FORCE, mutated, "no_cancel_after_add", "leaves a completed op in the timer",
                  final_bad=timer_leak)


@obligation("interleaving.watch_vs_purge", domain=str(WATCH_PURGE), mutant=MUTANTS["remove_without_recheck"])
def watch_vs_purge(mutated: bool = False) -> Outcome:
    """A watch racing the reaper's purge orphans nothing (the race behind KAFKA-2160's removeKeyIfEmpty and
    KAFKA-2253's lost op): k's list holds only the completed op c; the purge removes c, finds the list empty and
    removes k from the map, while T1 watches a on k. In every interleaving, when both are done, a (never ready, so
    not completed) has an entry in the list the map holds for k, so a later check of k finds it; c's entry is gone;
    and the map holds no emptied list. The append happens under the shard lock, and removeKeyIfEmpty tests under
    that lock that the map still holds the walked list and that it is still empty: a list that received a's entry
    after the walk stays, and a list that was removed before the watch is replaced by a new one."""
    return search(WATCH_PURGE, mutated, "remove_without_recheck", "orphans a watched op or keeps an emptied list",
                  final_bad=either(orphaned, emptied_list_kept, stale_entry_kept))


@obligation("interleaving.watch_vs_cancel_key", domain=str(WATCH_CANCEL_KEY), mutant=MUTANTS["append_outside_lock"])
def watch_vs_cancel_key(mutated: bool = False) -> Outcome:
    """A watch racing cancelForKey loses no op: k's list holds the waiting op b; T2 removes k's list from the map
    and cancels and returns its ops while T1 watches a on k. In every interleaving, when both are done, each op
    that is not completed was either returned by cancelForKey (its caller now owns it) or has an entry in the list
    the map holds for k (a later check finds it) — never neither — and the map holds no emptied list. cancelForKey
    holds the shard lock from taking the list to returning it, and the watch appends under the same lock, so an
    append lands either in the list before it is taken (and is returned) or in a new list the watch creates."""
    return search(WATCH_CANCEL_KEY, mutated, "append_outside_lock", "loses an op",
                  final_bad=either(orphaned, emptied_list_kept))


@obligation("interleaving.replaced_list_kept", domain=str(PURGE_CANCEL_KEY_WATCH),
            mutant=MUTANTS["remove_without_identity"])
def replaced_list_kept(mutated: bool = False) -> Outcome:
    """Removing an emptied list never removes its successor: k's list holds only the completed op c; T2's purge
    walks it empty and goes to remove k, while T3's cancelForKey takes that list out of the map and T1's watch of a
    creates a new list for k. In every interleaving, when all are done, a is either returned by cancelForKey or has
    an entry in the list the map holds for k, and the map holds no emptied list. removeKeyIfEmpty tests, under the
    shard lock, that the map still holds the very list the purge walked (KAFKA-2253's identity test), so the new
    list stays."""
    return search(PURGE_CANCEL_KEY_WATCH, mutated, "remove_without_identity", "removes a list it did not walk",
                  final_bad=either(orphaned, emptied_list_kept))


@obligation("interleaving.kafka.cancelled_op_expires", kind="finding", expect=REFUTED, domain=str(WATCH_CANCEL_KEY))
def cancelled_op_expires() -> Outcome:
    """Claim: an op that cancelForKey returned has no timer entry once the threads are done, so it will not time
    out (cancelForKey cancels the timer entry of every op it returns, and its caller takes over those ops; Kafka's
    documentation: the operation will not be completed). z3 refutes it: T2 takes k's list after T1's watch appended
    a but before T1 adds a to the timer; T2 cancels a's timer entry, which does not exist yet, and returns a; T1,
    finding a not completed, then adds it to the timer. a expires at its deadline — onComplete and onExpiration
    run — although cancelForKey handed it to its caller. Nothing in tryCompleteElseWatch re-checks for a
    cancellation after the timer add (its cancel-after-add step looks only at completed). In Kafka's trunk of
    December 2024 only tests call cancelForKey, so this is a hazard of the API rather than a broker bug. Only an
    interleaving shows it; the schedule is the counterexample."""
    status, schedule, depth = explore(WATCH_CANCEL_KEY, frozenset(), final_bad=cancelled_in_timer)
    return outcome(WATCH_CANCEL_KEY, status, schedule, depth, "leaves an op that cancelForKey returned in the timer")


@obligation("interleaving.two_watchers", domain=str(TWO_WATCHERS), mutant=MUTANTS["create_without_lock"])
def two_watchers(mutated: bool = False) -> Outcome:
    """Two watchers on one key lose neither op: T1 watches a and T2 watches b on k, whose list does not exist yet,
    while T3 makes both conditions true and checks k. In every interleaving each op is completed exactly once (the
    compare-and-set is won once, onComplete runs once) and, when all are done, both are completed — neither watch
    created a list that the other's replaced in the map, so the check, or the watch's own second tryComplete, finds
    each op. The find-or-create and the append are one critical section of the shard lock (computeIfAbsent under
    watchersLock). The watches run without the timer (a purgatory built with timerEnabled false): the timer add
    touches only the op's timer entry, which this property does not read, and leaving it out keeps the search to
    seconds."""
    return search(TWO_WATCHERS, mutated, "create_without_lock", "loses or doubles a completion",
                  final_bad=either(lost_wakeup, orphaned), ever_bad=completes_twice)


@obligation("interleaving.no_stale_try", domain=str(TWO_CHECKS), mutant=MUTANTS["no_completed_guard"])
def no_stale_try(mutated: bool = False) -> Outcome:
    """No tryComplete after a completion under the op lock (KAFKA-17848, where a tryComplete after onComplete leaked
    locks that tryComplete takes): T2 and T3 both check k and may both find op a listed and not completed; the
    first to get a's lock completes it. In every interleaving, no tryComplete — of either check or of T1's watch — is
    called on a after a completion made under a's lock, because safeTryComplete tests completed after taking the
    lock and a check that lost the race skips the op. A completion without the lock — T4's forceComplete, as the
    timer's expiry does — is not excluded by that test: it may land between the test and tryComplete, where it makes
    tryComplete's compare-and-set fail and changes nothing else (so the model takes the test and the call as one
    step), and tryComplete must tolerate it; that is why only calls after a completion under the lock count."""
    return search(TWO_CHECKS, mutated, "no_completed_guard", "tries an op completed under its lock",
                  ever_bad=tried_after_completion)


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


@obligation("mutant.interleaving.no_second_try", kind="mutant", expect=REFUTED, domain=str(WATCH_CHECK))
def mutant_no_second_try() -> Outcome:
    """Mutant: tryCompleteElseWatch without its second tryComplete. z3 finds the lost-wakeup interleaving: T1's
    first try fails, T2 makes the condition true and checks the key, whose list does not hold the op yet, then T1
    appends and adds the op to the timer — the op waits for its timeout although it was ready and its key was
    checked. The trace is the interleaving's projection onto the sequential vocabulary (see lost_wakeup_trace)."""
    status, schedule, depth = explore(WATCH_CHECK, frozenset({"no_second_try"}), final_bad=lost_wakeup)
    result = outcome(WATCH_CHECK, status, schedule, depth, "loses the wakeup")
    if status == REFUTED:
        result.traces = {"counterexample": lost_wakeup_trace(schedule)}
    return result


@obligation("mutant.interleaving.no_cancel_after_add", kind="mutant", expect=REFUTED, domain=str(WATCH_CHECK_FORCE))
def mutant_no_cancel_after_add() -> Outcome:
    """Mutant: tryCompleteElseWatch without the cancel after the timer add. z3 finds the interleaving in which
    another thread completes the op between T1's "not completed" check and its timer add: the completed op stays in
    the timer until its deadline, counted by numDelayed (and keeping estimated - numDelayed, the purge trigger, too
    low). Only an interleaving shows it, so there is no sequential trace; the schedule is the counterexample."""
    return timer_clean(mutated=True)
