"""Threads inside the purgatory: the races of watching, checking, purging and cancelling one or two keys.

model/ runs every Kafka call as one atomic step. Here the calls are cut into the atomic steps Kafka really has, at
its granularity of locking — the op's lock, the shard lock that guards the watchers map of the keys in its shard,
the compare-and-set on ``completed``, the lock-free watch lists (appends under the shard lock, walks and removals
without it) — and a few threads interleave them over one or two keys and up to three operations. A thread runs one
call or two in a row (a check twice, a watch again of the same op); each call is one of these programs:

``watch(o on k1,k2)``  tryCompleteElseWatch(o, [k1, k2]): lock o; tryComplete #1; unless o is completed: for each key
                 in turn, take that key's shard lock, find or create the key's list in the map, append o, release;
                 estimated += 1; tryComplete #2; unlock o; if o is not completed: add it to the timer, then cancel the
                 entry if it was completed meanwhile (``no timer``: a purgatory built with timerEnabled false, which
                 stops after the unlock).
``check(k)``     checkAndComplete(k), optionally after set_ready (making conditions true): read k's list from the
                 map under k's shard lock; walk it: the entries of a completed op are removed; for any other op, lock
                 it, safeTryComplete (skip if completed, else tryComplete), unlock, remove its entries if this call
                 completed it; then, if the list looks empty, removeKeyIfEmpty.
``purge(k)``     the reaper's purge of k's list: read the map (without the lock, as allWatchers does), remove the
                 entries of completed ops, and if the list looks empty, removeKeyIfEmpty.
``cancelForKey(k)``  under k's shard lock: remove k's list from the map, cancel the timer entry of each op in it and
                 return it.
``force(o)``     forceComplete from other code (the timer's expiry or a direct force), without the op lock.

removeKeyIfEmpty takes the shard lock and removes k only if the map still holds the list the caller walked and that
list is still empty. A completion is a compare-and-set on ``completed`` (tryComplete completes through
forceComplete too) followed, for the winner, by the cancel of the timer entry and onComplete. The only lock order
is op lock, then shard lock (a watch holds its op's lock while it appends); nothing holds a shard lock while it
waits for another lock.

Atomicity. Taking a lock is merged with the first action under it, and releasing it with the last one (acquiring
commutes to the right and releasing to the left with every other thread's actions, Lipton's reduction). A walk reads
an op's entries and its completed flag in one step (the flag only goes from false to true, and the one removal of a
live op's entry, cancelForKey, leaves the walk holding the op either way). A walk visits each op once and removes
all of a completed op's entries at that visit: an op watched twice on a key is listed twice, and Kafka's walk,
which visits every entry, removes each of them (no entry of a completed op is appended afterwards, as watch skips a
completed op). safeTryComplete's completed test and its tryComplete are one step: between them only a forceComplete
without the lock can complete the op, and then tryComplete's compare-and-set fails and changes nothing.
removeKeyIfEmpty is one step: under the shard lock the list can only shrink (appends need that lock), and a thread
that empties it afterwards calls removeKeyIfEmpty itself. estimated += 1, which no other thread reads here, is
merged into the watch's last append. The walks visit the ops in a fixed order (the scenario's), not insertion order.

Each program is finite and every lock is released, so unrolling the schedule to the sum of the program lengths (the
longest paths through their steps, computed from the steps themselves; idle steps allowed at the end) covers every
interleaving: a property that holds there is proved for its scenario, not just bounded. The searches of the
two-key and repeated-call scenarios also look for a run that ends with a thread not done and no thread able to step
— a thread blocked forever, on a cycle of lock waits or on a lock never released — so those scenarios are proved
free of deadlock as well (the one-key scenarios are not searched for it: it would double the cost of the largest).
Each obligation states its scenario (its bound: threads, calls, keys, ops, steps unrolled) and names a mutant of its
subject that z3 refutes with a schedule. Each clause of its statement (a property's named clauses, and "blocked"
where it is searched for) has teeth: a concrete run, replayed without a search, breaks that clause and no other
(interleaving.teeth.<obligation>.<clause>), so a deleted or weakened clause fails `prove` by name.
"""

from __future__ import annotations

import functools
from typing import Callable

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header
from kpurgatory.model import vocabulary as v
from kpurgatory.specs import teeth
from kpurgatory.specs.core import ERROR, PROVED, REFUTED, Bound, Outcome, obligation, recorded, solver, undecided

DONE = 99
#: the pcs of a thread's second call are its program's plus this (a thread makes at most two calls: pcs stay < 2^8)
SECOND_CALL = 100
#: every counter, pc and list object is a small bit-vector (bit-blasted searches are fast; no value nears 2^8)
WIDTH = 8

#: the deliberate bugs, by key; an obligation's mutant builds one of them into its subject
MUTANTS = {
    "no_second_try": "tryCompleteElseWatch without its second tryComplete",
    "no_cancel_after_add": "tryCompleteElseWatch without the cancel after its timer add",
    "force_without_cas": "forceComplete (which tryComplete calls too) sets completed with a plain write instead of a "
                         "compare-and-set",
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
    "walk_under_shard_lock": "checkAndComplete holds k's shard lock from reading k's list to the end of its walk, so "
                             "it takes op locks under the shard lock (shard then op: the inverse of the watch's order)",
    "no_skip_if_completed": "tryCompleteElseWatch appends the op to its keys' lists without testing whether it is "
                            "completed",
    "complete_on_lost_cas": "forceComplete cancels the timer entry and runs onComplete even when its compare-and-set "
                            "lost",
    "no_remove_if_empty": "checkAndComplete and the purge leave k in the map when its list looks empty (no "
                          "removeKeyIfEmpty)",
}


@attrs.frozen
class Role:
    """One call: ``kind`` in watch, check, purge, cancel_key, force."""

    kind: str
    op: str = ""
    #: watch: the keys it watches, in order; check, purge, cancel_key: the one key they act on
    keys: tuple[str, ...] = ("k",)
    #: check only: the ops whose conditions it makes true (set_ready) before checking its key
    ready: tuple[str, ...] = ()
    #: watch only: False for a purgatory built with timerEnabled false (the watch ends after its second try)
    timer: bool = True

    @property
    def key(self) -> str:
        return self.keys[0]

    def __str__(self) -> str:
        on = "" if self.keys == ("k",) else f" on {','.join(self.keys)}"
        return {"watch": f"watch({self.op}{on}{'' if self.timer else ', no timer'})",
                "force": f"forceComplete({self.op})", "purge": f"purge({self.key})",
                "cancel_key": f"cancelForKey({self.key})",
                "check": (f"set_ready({','.join(self.ready)})+" if self.ready else "") + f"check({self.key})",
                }[self.kind]


def calls(thread: Role | tuple[Role, ...]) -> tuple[Role, ...]:
    return thread if isinstance(thread, tuple) else (thread,)


@attrs.frozen
class Scenario:
    #: per thread, the calls it makes in order (a Role alone is one call)
    threads: tuple[tuple[Role, ...], ...] = attrs.field(converter=lambda ts: tuple(calls(t) for t in ts))
    #: ops completed before the threads start, still listed on ``listed_on`` (the map holds their lists)
    stale: tuple[str, ...] = ()
    #: ops watched on ``listed_on`` before the threads start, still waiting (listed, in the timer)
    waiting: tuple[str, ...] = ()
    listed_on: tuple[str, ...] = ("k",)
    #: keys that hash to one shard (one lock for both); otherwise each key has its own shard
    one_shard: bool = False

    @property
    def roles(self) -> tuple[Role, ...]:
        return tuple(role for thread in self.threads for role in thread)

    @property
    def ops(self) -> tuple[str, ...]:
        named = [role.op for role in self.roles if role.op] + [o for role in self.roles for o in role.ready]
        return tuple(dict.fromkeys([*named, *self.stale, *self.waiting]))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*(k for role in self.roles for k in role.keys if role.kind != "force"),
                                    *(self.listed_on if self.stale or self.waiting else ())]))

    def shard(self, key: str) -> str:
        return "shard.0" if self.one_shard else f"shard.{self.keys.index(key)}"

    @property
    def shards(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.shard(k) for k in self.keys))

    def before(self, key: str) -> tuple[str, ...]:
        return (*self.stale, *self.waiting) if key in self.listed_on else ()

    def lists(self, key: str) -> int:
        """List objects that can exist for ``key``: the initial one, and one per watch of the key that creates one."""
        return (1 if self.before(key) else 0) + sum(role.kind == "watch" and key in role.keys for role in self.roles)

    def depth(self, mutants: frozenset = frozenset()) -> int:
        """Steps unrolled: the sum of the threads' longest runs."""
        return sum(program(thread, self, t, mutants).length(self, t) for t, thread in enumerate(self.threads, 1))

    def bound(self) -> str:
        shards = "one shard" if self.one_shard else "a shard each"
        keys = "1 key" if len(self.keys) == 1 else f"{len(self.keys)} keys ({shards})"
        ops = f"{len(self.ops)} op{'s' if len(self.ops) > 1 else ''}"
        return f"{len(self.threads)} threads, {len(self.roles)} calls, {keys}, {ops}, {self.depth()} steps"

    def __str__(self) -> str:
        keys = ",".join(self.listed_on)
        before = [f"{', '.join(self.stale)} completed and listed on {keys}" if self.stale else "",
                  f"{', '.join(self.waiting)} waiting on {keys}" if self.waiting else ""]
        threads = ", ".join(f"T{t} {' then '.join(map(str, thread))}" for t, thread in enumerate(self.threads, 1))
        return (f"{threads}" + "".join(f"; before: {b}" for b in before if b)
                + f"; bound: {self.bound()}; every interleaving")


def num(value) -> object:
    return value if isinstance(value, z3.ExprRef) else z3.BitVecVal(value, WIDTH)


def pick(condition, then, otherwise) -> object:
    return z3.If(condition, num(then), num(otherwise))


# --- state -----------------------------------------------------------------------------------------------------------
#
# Per op o: done.o (completed), cond.o (tryComplete would succeed), timer.o (has a timer entry), wins.o (CAS won),
# calls.o (onComplete runs), lock.o (the thread holding its lock, 0: free), locked.o (completed by a CAS won under its
# lock), stale.o (tryComplete calls made after such a completion), late.o (appends made after o completed); per op
# o and key k: returned.o.k (times cancelForKey(k) returned it), watched.o.k (appended to a list of k). Per key k:
# map.k (the list object the map holds for k, 0: none), next.k (the next list object), and entries e.k.L.o (o's
# entries in list object L of k). Per shard: shard.i (the thread holding its lock). est. Per thread t: pc.t and
# list.t (the list object it found or walks).

OP_VARS = {"done": bool, "cond": bool, "timer": bool, "wins": int, "calls": int, "lock": int, "locked": bool,
           "stale": int, "late": int}
OP_KEY_VARS = {"returned": int, "watched": bool}


def variables(sc: Scenario) -> dict[str, type]:
    names = {f"{var}.{o}": kind for o in sc.ops for var, kind in OP_VARS.items()}
    names.update({f"{var}.{o}.{k}": kind for o in sc.ops for k in sc.keys for var, kind in OP_KEY_VARS.items()})
    for k in sc.keys:
        names.update({f"map.{k}": int, f"next.{k}": int})
        names.update({f"e.{k}.{lst}.{o}": int for lst in range(1, sc.lists(k) + 1) for o in sc.ops})
    names.update({shard: int for shard in sc.shards})
    names["est"] = int
    for t in range(1, len(sc.threads) + 1):
        names.update({f"pc.{t}": int, f"list.{t}": int})
    return names


def fresh(sc: Scenario, tag: str) -> dict:
    return {name: z3.BitVec(f"{name}@{tag}", WIDTH) if kind is int else z3.Bool(f"{name}@{tag}")
            for name, kind in variables(sc).items()}


def initial(sc: Scenario, s: dict) -> object:
    facts = [s["est"] == 0, *[s[shard] == 0 for shard in sc.shards]]
    for k in sc.keys:
        listed = bool(sc.before(k))
        facts += [s[f"map.{k}"] == (1 if listed else 0), s[f"next.{k}"] == (2 if listed else 1)]
        facts += [s[f"e.{k}.{lst}.{o}"] == int(lst == 1 and o in sc.before(k))
                  for lst in range(1, sc.lists(k) + 1) for o in sc.ops]
    for o in sc.ops:
        facts += [s[f"done.{o}"] == (o in sc.stale), s[f"cond.{o}"] == (o in sc.stale),
                  s[f"timer.{o}"] == (o in sc.waiting), s[f"wins.{o}"] == int(o in sc.stale),
                  s[f"calls.{o}"] == int(o in sc.stale), s[f"lock.{o}"] == 0, z3.Not(s[f"locked.{o}"]),
                  s[f"stale.{o}"] == 0, s[f"late.{o}"] == 0]
        facts += [z3.And(s[f"returned.{o}.{k}"] == 0, s[f"watched.{o}.{k}"] == (o in sc.before(k))) for k in sc.keys]
    for t, thread in enumerate(sc.threads, start=1):
        facts += [s[f"pc.{t}"] == program(thread, sc, t, frozenset()).start, s[f"list.{t}"] == 0]
    return z3.And(*facts)


def entries(sc: Scenario, s: dict, k: str, lst, o: str) -> object:
    """o's entries in list object ``lst`` of key k (0 when ``lst`` is 0: no list)."""
    out = num(0)
    for candidate in range(1, sc.lists(k) + 1):
        out = pick(lst == candidate, s[f"e.{k}.{candidate}.{o}"], out)
    return out


def set_entries(sc: Scenario, s: dict, n: dict, k: str, lst, o: str, value) -> None:
    for candidate in range(1, sc.lists(k) + 1):
        n[f"e.{k}.{candidate}.{o}"] = pick(lst == candidate, value, s[f"e.{k}.{candidate}.{o}"])


def is_empty(sc: Scenario, s: dict, k: str, lst) -> object:
    return z3.And(*[entries(sc, s, k, lst, o) == 0 for o in sc.ops])


def remove_completed(sc: Scenario, s: dict, n: dict, k: str, lst, o: str) -> None:
    """A walk's removal of a completed op's entries from list ``lst`` of k: all of them, as Kafka's walk visits each."""
    set_entries(sc, s, n, k, lst, o, 0)


# --- the steps the programs share ------------------------------------------------------------------------------------


def cas(s: dict, n: dict, o: str, guard, mutants: frozenset, *, under_lock: bool = True) -> object:
    """forceComplete's compare-and-set of completed, false -> true, when ``guard`` holds; returns whether this
    thread won (mutant force_without_cas: a plain write, which every caller wins)."""
    win = guard if "force_without_cas" in mutants else z3.And(guard, z3.Not(s[f"done.{o}"]))
    n[f"done.{o}"] = z3.Or(s[f"done.{o}"], win)
    n[f"wins.{o}"] = s[f"wins.{o}"] + pick(win, 1, 0)
    if under_lock:
        n[f"locked.{o}"] = z3.Or(s[f"locked.{o}"], win)
    return win


def try_complete(s: dict, n: dict, o: str, mutants: frozenset) -> object:
    """The op's tryComplete, called under its lock: forceComplete if the condition holds. A call after a completion
    made under the op lock is counted (stale.o): it is what safeTryComplete's completed test prevents."""
    n[f"stale.{o}"] = s[f"stale.{o}"] + pick(s[f"locked.{o}"], 1, 0)
    return cas(s, n, o, s[f"cond.{o}"], mutants)


def finish(s: dict, n: dict, o: str) -> None:
    """The CAS winner: cancel the timer entry, then onComplete."""
    n[f"timer.{o}"] = z3.BoolVal(False)
    n[f"calls.{o}"] = s[f"calls.{o}"] + 1


def remove_key_if_empty(sc: Scenario, s: dict, n: dict, k: str, t: int, mutants: frozenset) -> None:
    """Under k's shard lock: remove k if the map still holds the list this thread walked and it is still empty."""
    same = s[f"map.{k}"] != 0 if "remove_without_identity" in mutants else s[f"map.{k}"] == s[f"list.{t}"]
    remove = same if "remove_without_recheck" in mutants else z3.And(same, is_empty(sc, s, k, s[f"list.{t}"]))
    n[f"map.{k}"] = pick(remove, 0, s[f"map.{k}"])


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

    def then(self, following: Program, pc: str) -> Program:
        """This program, then ``following`` with its pcs moved up by SECOND_CALL: this one's DONE becomes the
        start of the following one."""
        assert max(following.steps) + SECOND_CALL < 2 ** WIDTH and DONE < SECOND_CALL
        start = following.start + SECOND_CALL

        def redirect(step: Step, move: Callable[[int], int]) -> Step:
            def effect(s, n):
                step.effect(s, n)
                n[pc] = _relabel(n[pc], move)
            return Step(step.label, effect, step.enabled)

        steps = {at: redirect(step, lambda p: start if p == DONE else p) for at, step in self.steps.items()}
        steps.update({at + SECOND_CALL: redirect(step, lambda p: p if p == DONE else p + SECOND_CALL)
                      for at, step in following.steps.items()})
        return Program(steps, self.start)


def _leaves(term) -> list[int]:
    if z3.is_bv_value(term):
        return [term.as_long()]
    if z3.is_app_of(term, z3.Z3_OP_ITE):
        return _leaves(term.arg(1)) + _leaves(term.arg(2))
    raise ValueError(f"a pc is set to {term}, not to a numeral")


def _relabel(term, move: Callable[[int], int]) -> object:
    if z3.is_bv_value(term):
        return num(move(term.as_long()))
    assert z3.is_app_of(term, z3.Z3_OP_ITE), f"a pc is set to {term}, not to a numeral"
    return z3.If(term.arg(0), _relabel(term.arg(1), move), _relabel(term.arg(2), move))


def program(thread: tuple[Role, ...], sc: Scenario, t: int, mutants: frozenset) -> Program:
    """The thread's calls, one after the other (at most two)."""
    assert 1 <= len(thread) <= 2, "pcs of a third call would not fit"
    programs = [call_program(role, sc, t, mutants) for role in thread]
    return programs[0] if len(programs) == 1 else programs[0].then(programs[1], f"pc.{t}")


def call_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    return {"watch": watch_program, "check": check_program, "purge": purge_program,
            "cancel_key": cancel_key_program, "force": force_program}[role.kind](role, sc, t, mutants)


def watch_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    o, pc, mine = role.op, f"pc.{t}", f"list.{t}"
    last = 40 + 10 * (len(role.keys) - 1)  # the last key's block
    second_try = 7 if "no_second_try" in mutants else 6

    def goto(n, target):
        n[pc] = num(target)

    def first_try(s, n):
        n[f"lock.{o}"] = num(t)
        win = try_complete(s, n, o, mutants)
        goto(n, pick(win, 20, 2))

    def skip_if_completed(s, n):
        # a completed op joins no list; estimated += 1 (touched by nothing else, so merged into this step) all the same
        n["est"] = s["est"] + pick(s[f"done.{o}"], 1, 0)
        skip = z3.BoolVal(False) if "no_skip_if_completed" in mutants else s[f"done.{o}"]
        goto(n, pick(skip, second_try, 40))

    def key_block(base: int, k: str, nxt: int) -> dict[int, Step]:
        """Keys one after the other, from pc 40 in blocks of 10: find or create (base), put (base+1), append (+2)."""
        shard, m = sc.shard(k), f"map.{k}"

        def find_or_create(s, n):
            found = s[m]
            if "create_without_lock" in mutants:
                n[mine] = found
                goto(n, pick(found == 0, base + 1, base + 2))
                return
            created = pick(found == 0, s[f"next.{k}"], found)
            n[m], n[mine] = created, created
            n[f"next.{k}"] = s[f"next.{k}"] + pick(found == 0, 1, 0)
            if "append_outside_lock" not in mutants:
                n[shard] = num(t)
            goto(n, base + 2)

        def put_new_list(s, n):
            n[m], n[mine], n[f"next.{k}"] = s[f"next.{k}"], s[f"next.{k}"], s[f"next.{k}"] + 1
            goto(n, base + 2)

        def append(s, n):
            set_entries(sc, s, n, k, s[mine], o, entries(sc, s, k, s[mine], o) + 1)
            n[f"watched.{o}.{k}"] = z3.BoolVal(True)
            n[f"late.{o}"] = s[f"late.{o}"] + pick(s[f"done.{o}"], 1, 0)
            n[shard] = pick(s[shard] == t, 0, s[shard])
            if base == last:
                n["est"] = s["est"] + 1
            goto(n, nxt)

        shard_free = None if "create_without_lock" in mutants else (lambda s: s[shard] == 0)
        return {base: Step(f"find or create {k}'s list", find_or_create, shard_free),
                base + 1: Step(f"put a new list for {k}", put_new_list), base + 2: Step(f"append to {k}", append)}

    def try_again(s, n):
        win = try_complete(s, n, o, mutants)
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
    steps = {0: Step("tryComplete#1", first_try, lambda s: s[f"lock.{o}"] == 0),
             2: Step("skip if completed", skip_if_completed), 6: Step("tryComplete#2", try_again),
             7: Step("unlock", unlock), 8: Step("check completed", check_completed), 9: Step("timer add", timer_add),
             10: Step("cancel if completed", cancel_if_completed), 20: Step("cancel+onComplete", complete),
             21: Step("cancel+onComplete", complete)}
    for i, k in enumerate(role.keys):
        steps.update(key_block(40 + 10 * i, k, 40 + 10 * (i + 1) if i + 1 < len(role.keys) else second_try))
    return Program(steps, 0)


def walk(sc: Scenario, after: int, visit: Callable[[int, str, int], dict[int, Step]]) -> dict[int, Step]:
    """The steps of a walk over a list, one block of pcs per op (10, 20, ...); ``visit(base, op, next_pc)``."""
    steps = {}
    for i, o in enumerate(sc.ops):
        base = 10 * (i + 1)
        steps.update(visit(base, o, 10 * (i + 2) if i + 1 < len(sc.ops) else after))
    return steps


def walk_end(sc: Scenario, k: str, t: int, mutants: frozenset) -> dict[int, Step]:
    """After a walk of k's list (pc 90): if the list looks empty, removeKeyIfEmpty (pc 91)."""
    pc, shard = f"pc.{t}", sc.shard(k)

    def looks_empty(s, n):
        if "walk_under_shard_lock" in mutants:  # the check releases the shard lock it walked under
            n[shard] = pick(s[shard] == t, 0, s[shard])
        removes = z3.BoolVal("no_remove_if_empty" not in mutants)
        n[pc] = pick(z3.And(removes, is_empty(sc, s, k, s[f"list.{t}"])), 91, DONE)

    def remove(s, n):
        remove_key_if_empty(sc, s, n, k, t, mutants)
        n[pc] = num(DONE)

    return {90: Step(f"{k}'s list empty?", looks_empty),
            91: Step(f"removeKeyIfEmpty({k})", remove, lambda s: s[shard] == 0)}


def check_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    pc, mine, k = f"pc.{t}", f"list.{t}", role.key
    shard = sc.shard(k)

    def set_ready(s, n):
        for o in role.ready:
            n[f"cond.{o}"] = z3.BoolVal(True)
        n[pc] = num(1)

    def read(s, n):
        n[mine] = s[f"map.{k}"]
        if "walk_under_shard_lock" in mutants:
            n[shard] = pick(s[f"map.{k}"] == 0, 0, t)
        n[pc] = pick(s[f"map.{k}"] == 0, DONE, 10)

    def visit(base: int, o: str, nxt: int) -> dict[int, Step]:
        def look(s, n):
            listed = entries(sc, s, k, s[mine], o) > 0
            n[pc] = pick(z3.Not(listed), nxt, pick(s[f"done.{o}"], base + 3, base + 1))

        def safe_try(s, n):
            # lock; skip if completed (Kafka's test), else tryComplete; a call that did not complete the op unlocks
            guarded = z3.BoolVal(False) if "no_completed_guard" in mutants else s[f"done.{o}"]
            m = dict(s)
            win = z3.And(z3.Not(guarded), try_complete(s, m, o, mutants))
            for name in (f"done.{o}", f"wins.{o}", f"locked.{o}", f"stale.{o}"):
                n[name] = pick(guarded, s[name], m[name])
            n[f"lock.{o}"] = pick(win, t, 0)
            n[pc] = pick(win, base + 2, nxt)

        def complete(s, n):
            finish(s, n, o)
            n[f"lock.{o}"] = num(0)
            n[pc] = num(base + 3)

        def remove(s, n):
            remove_completed(sc, s, n, k, s[mine], o)
            n[pc] = num(nxt)

        return {base: Step(f"visit {o}", look),
                base + 1: Step(f"safeTryComplete {o}", safe_try, lambda s: s[f"lock.{o}"] == 0),
                base + 2: Step(f"cancel+onComplete {o}", complete), base + 3: Step(f"remove {o} from list", remove)}

    steps = {0: Step("set_ready", set_ready), 1: Step(f"read {k}'s list", read, lambda s: s[shard] == 0)}
    steps.update(walk(sc, 90, visit))
    steps.update(walk_end(sc, k, t, mutants))
    return Program(steps, 0 if role.ready else 1)


def purge_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    pc, mine, k = f"pc.{t}", f"list.{t}", role.key

    def read(s, n):
        n[mine] = s[f"map.{k}"]
        n[pc] = pick(s[f"map.{k}"] == 0, DONE, 10)

    def visit(base: int, o: str, nxt: int) -> dict[int, Step]:
        def look(s, n):
            n[pc] = pick(z3.And(entries(sc, s, k, s[mine], o) > 0, s[f"done.{o}"]), base + 1, nxt)

        def remove(s, n):
            remove_completed(sc, s, n, k, s[mine], o)
            n[pc] = num(nxt)

        return {base: Step(f"visit {o}", look), base + 1: Step(f"remove {o} from list", remove)}

    steps = {0: Step(f"read the map for {k}", read)}
    steps.update(walk(sc, 90, visit))
    steps.update(walk_end(sc, k, t, mutants))
    return Program(steps, 0)


def cancel_key_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    pc, mine, k = f"pc.{t}", f"list.{t}", role.key
    shard = sc.shard(k)

    def take(s, n):
        n[shard], n[mine], n[f"map.{k}"] = num(t), s[f"map.{k}"], num(0)
        n[pc] = pick(s[f"map.{k}"] == 0, 90, 10)

    def visit(base: int, o: str, nxt: int) -> dict[int, Step]:
        def cancel(s, n):
            count = entries(sc, s, k, s[mine], o)
            n[f"timer.{o}"] = z3.And(s[f"timer.{o}"], count == 0)
            n[f"returned.{o}.{k}"] = s[f"returned.{o}.{k}"] + count
            set_entries(sc, s, n, k, s[mine], o, 0)
            n[pc] = num(nxt)

        return {base: Step(f"cancel {o}", cancel)}

    def unlock(s, n):
        n[shard], n[pc] = num(0), num(DONE)

    steps = {0: Step(f"remove {k}'s list from the map", take, lambda s: s[shard] == 0)}
    steps.update(walk(sc, 90, visit))
    steps[90] = Step("unlock", unlock)
    return Program(steps, 0)


def force_program(role: Role, sc: Scenario, t: int, mutants: frozenset) -> Program:
    o, pc = role.op, f"pc.{t}"

    def force(s, n):
        win = cas(s, n, o, z3.BoolVal(True), mutants, under_lock=False)
        n[pc] = num(1) if "complete_on_lost_cas" in mutants else pick(win, 1, DONE)

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


@attrs.frozen(eq=False)
class Property:
    """A bad state, named by what it breaks, as named clauses: the state is bad when any clause holds, and each
    clause has teeth of its own (interleaving.teeth.*). ``ever``: counters that only grow, so once reached the bad
    state holds in every later state and is tested on the last state of every run; otherwise it is tested when all
    threads are done."""

    broken: str
    clauses: dict[str, Predicate]
    ever: bool = False

    def bad(self, sc: Scenario, s: dict) -> object:
        return z3.Or(*[clause(sc, s) for clause in self.clauses.values()])


def explore(sc: Scenario, mutants: frozenset, properties: tuple[Property, ...], *,
            blocked: bool = False) -> tuple[str, Search | None, int]:
    """Search every interleaving of the scenario's threads (idle steps allowed at the end, so the unrolling to the
    sum of the program lengths is complete) for a state that breaks one of ``properties`` and, if ``blocked``, for
    a run that ends with some thread not done and no thread able to step: every run is finite, so a thread blocked
    forever (on a cycle of lock waits, or on a lock never released) is one that such a run leaves stuck."""
    programs = {t: program(thread, sc, t, mutants) for t, thread in enumerate(sc.threads, start=1)}
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
    last = states[-1]
    all_done = z3.And(*[last[f"pc.{t}"] == DONE for t in programs])
    checks = {}
    if blocked:  # a run padded with idle steps from a state where no thread can step, some thread not done
        checks[BLOCKED] = z3.And(z3.Not(all_done), *[z3.Not(transition(prog, last, t)[0])
                                                     for t, prog in programs.items()])
    checks.update({p.broken: p.bad(sc, last) if p.ever else z3.And(all_done, p.bad(sc, last)) for p in properties})
    sol.add(z3.Or(*checks.values()))
    result = sol.check()
    if result == z3.unsat:
        return PROVED, None, depth
    if result != z3.sat:
        return undecided(sol), None, depth
    model = sol.model()
    broken = tuple(name for name, check in checks.items() if z3.is_true(model.eval(check, model_completion=True)))
    reached = len(choices)
    ever = [p for p in properties if p.ever and p.broken in broken]
    if ever and len(broken) == len(ever):  # end the schedule at the step that reached the bad state
        hits = [i for i, s in enumerate(states) if any(z3.is_true(model.eval(p.bad(sc, s), model_completion=True))
                                                       for p in ever)]
        reached = hits[0] if hits else reached
    steps = []
    for i, choice in enumerate(choices[:reached]):
        thread = model.eval(choice).as_long()
        if thread:
            at = model.eval(states[i][f"pc.{thread}"]).as_long()
            steps.append((thread, programs[thread].steps[at].label))
    blocked = ()
    if BLOCKED in broken:  # each stuck thread's next step, and who holds which lock
        at = {t: model.eval(last[f"pc.{t}"]).as_long() for t in programs}
        held = [(name, model.eval(last[name]).as_long()) for name in [*(f"lock.{o}" for o in sc.ops), *sc.shards]]
        blocked = tuple(f"T{t} at {programs[t].steps[pc].label}" for t, pc in at.items() if pc != DONE)
        blocked += tuple(f"{name.replace('lock.', 'lock of ')} held by T{holder}" for name, holder in held if holder)
    return REFUTED, Search(Schedule(tuple(steps)), broken, blocked), depth


@attrs.frozen
class Search:
    """A refuting run: its schedule, the properties it breaks, and, when a thread is left blocked, each stuck
    thread's next step ("T1 at <step>") and the locks held then ("lock of a held by T1")."""

    schedule: Schedule
    broken: tuple[str, ...]
    blocked: tuple[str, ...] = ()


# --- the properties --------------------------------------------------------------------------------------------------

BLOCKED = "leaves a thread blocked forever"


def any_op(sc: Scenario, bad: Callable[[str], object]) -> object:
    return z3.Or(*[bad(o) for o in sc.ops])


def any_op_key(sc: Scenario, bad: Callable[[str, str], object]) -> object:
    return z3.Or(*[bad(o, k) for o in sc.ops for k in sc.keys])


def lost_wakeup(sc: Scenario, s: dict) -> object:
    """An op whose condition holds (a check set it, then checked a key) is not completed."""
    return any_op(sc, lambda o: z3.And(s[f"cond.{o}"], z3.Not(s[f"done.{o}"])))


def won_twice(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: s[f"wins.{o}"] > 1)


def called_twice(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: s[f"calls.{o}"] > 1)


def timer_leak(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: z3.And(s[f"done.{o}"], s[f"timer.{o}"]))


def orphaned(sc: Scenario, s: dict) -> object:
    """An op watched on a key, not completed and not returned by cancelForKey of that key, has no entry in the list
    the map holds for the key: no later check of the key can find it (it only times out)."""
    return any_op_key(sc, lambda o, k: z3.And(s[f"watched.{o}.{k}"], z3.Not(s[f"done.{o}"]),
                                              s[f"returned.{o}.{k}"] == 0,
                                              entries(sc, s, k, s[f"map.{k}"], o) == 0))


def emptied_list_kept(sc: Scenario, s: dict) -> object:
    return z3.Or(*[z3.And(s[f"map.{k}"] != 0, is_empty(sc, s, k, s[f"map.{k}"])) for k in sc.keys])


def completed_listed(sc: Scenario, s: dict) -> object:
    """A completed op keeps an entry in the list the map holds for a key."""
    return any_op_key(sc, lambda o, k: z3.And(s[f"done.{o}"], entries(sc, s, k, s[f"map.{k}"], o) > 0))


def appended_late(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: s[f"late.{o}"] > 0)


def cancelled_in_timer(sc: Scenario, s: dict) -> object:
    return any_op_key(sc, lambda o, k: z3.And(s[f"returned.{o}.{k}"] > 0, s[f"timer.{o}"]))


def tried_after_completion(sc: Scenario, s: dict) -> object:
    return any_op(sc, lambda o: s[f"stale.{o}"] > 0)


LOST_WAKEUP = Property("loses the wakeup (a ready, checked op is not completed)", {"lost_wakeup": lost_wakeup})
TWICE = Property("completes an op twice", {"cas_won_twice": won_twice, "on_complete_twice": called_twice}, ever=True)
TIMER_LEAK = Property("leaves a completed op in the timer", {"timer_leak": timer_leak})
ORPHAN = Property("orphans a watched op (no list the map holds lists it)", {"orphan": orphaned})
EMPTY_KEPT = Property("keeps an emptied list in the map", {"empty_kept": emptied_list_kept})
COMPLETED_LISTED = Property("keeps a completed op listed", {"completed_listed": completed_listed})
STALE_TRY = Property("tries an op completed under its lock", {"stale_try": tried_after_completion}, ever=True)
LATE = Property("appends a completed op to a list", {"late_append": appended_late}, ever=True)
CANCELLED_IN_TIMER = Property("leaves an op that cancelForKey returned in the timer",
                              {"cancelled_in_timer": cancelled_in_timer})


def outcome(sc: Scenario, status: str, found: Search | None, depth: int) -> Outcome:
    method = f"every interleaving, {depth} steps unrolled"
    threads = {f"T{t}": " then ".join(map(str, thread)) for t, thread in enumerate(sc.threads, start=1)}
    if status == PROVED:
        return Outcome(PROVED, method, "no interleaving breaks it")
    if status == REFUTED:
        legend = ", ".join(f"{name}={role}" for name, role in threads.items())
        blocked = f"; blocked: {', '.join(found.blocked)}" if found.blocked else ""
        return Outcome(REFUTED, method, f"{'; '.join(found.broken)} ({legend}): {found.schedule}{blocked}",
                       witness={"threads": threads, "broken": list(found.broken), "blocked": list(found.blocked),
                                "schedule": [list(step) for step in found.schedule.steps]})
    return Outcome(status, method, "z3 gave up")


def search(sc: Scenario, mutated: bool, mutant: str, *properties: Property, blocked: bool = False) -> Outcome:
    mutants = frozenset({mutant}) if mutated else frozenset()
    return outcome(sc, *explore(sc, mutants, properties, blocked=blocked))


# --- the scenarios and their obligations -----------------------------------------------------------------------------

K12 = ("k1", "k2")
WATCH_CHECK = Scenario((Role("watch", "a"), Role("check", ready=("a",))))
WATCH_CHECK_FORCE = Scenario((Role("watch", "a"), Role("check", ready=("a",)), Role("force", "a")))
WATCH_PURGE = Scenario((Role("watch", "a"), Role("purge")), stale=("c",))
WATCH_CANCEL_KEY = Scenario((Role("watch", "a"), Role("cancel_key")), waiting=("b",))
PURGE_CANCEL_KEY_WATCH = Scenario((Role("watch", "a"), Role("purge"), Role("cancel_key")), stale=("c",))
TWO_WATCHERS = Scenario((Role("watch", "a", timer=False), Role("watch", "b", timer=False),
                         Role("check", ready=("a", "b"))))
TWO_CHECKS = Scenario((Role("watch", "a"), Role("check", ready=("a",)), Role("check"), Role("force", "a")))
TWO_KEYS_CHECKS = Scenario((Role("watch", "a", K12, timer=False), Role("check", keys=("k1",), ready=("a",)),
                            Role("check", keys=("k2",))))
TWO_KEYS_PURGE_CANCEL = Scenario((Role("watch", "a", K12), Role("purge", keys=("k1",)),
                                  Role("cancel_key", keys=("k2",))), stale=("c",), listed_on=("k1",))
TWO_KEYS_ONE_SHARD = Scenario((Role("watch", "a", K12, timer=False), Role("check", keys=("k1",), ready=("a",)),
                               Role("cancel_key", keys=("k2",))), one_shard=True)
REPEATED = Scenario(((Role("watch", "a", timer=False), Role("watch", "a", timer=False)),
                     (Role("check", ready=("a",)), Role("check"))))
TWO_PURGES = Scenario((Role("watch", "a"), Role("purge"), Role("purge")), stale=("c",))


@attrs.frozen(eq=False)
class Claim:
    """What a race obligation states: no interleaving of ``scenario`` breaks any of ``properties`` (nor, if
    ``blocked``, leaves a thread blocked forever); ``mutant`` is the bug its refutation builds in."""

    scenario: Scenario
    mutant: str
    properties: tuple[Property, ...]
    blocked: bool = False

    def search(self, mutated: bool) -> Outcome:
        return search(self.scenario, mutated, self.mutant, *self.properties, blocked=self.blocked)

    def clauses(self) -> dict[str, tuple[Property | None, Predicate | None]]:
        """Every clause of the statement, by name, with its property (None for the blocked-thread clause)."""
        named = {name: (p, clause) for p in self.properties for name, clause in p.clauses.items()}
        return {**named, **({"blocked": (None, None)} if self.blocked else {})}


#: the race obligations' statements, by the obligation's short name
CLAIMS = {
    "no_lost_wakeup": Claim(WATCH_CHECK, "no_second_try", (LOST_WAKEUP,)),
    "exactly_once": Claim(WATCH_CHECK_FORCE, "force_without_cas", (TWICE,)),
    "timer_clean": Claim(WATCH_CHECK_FORCE, "no_cancel_after_add", (TIMER_LEAK,)),
    "watch_vs_purge": Claim(WATCH_PURGE, "remove_without_recheck", (ORPHAN, EMPTY_KEPT, COMPLETED_LISTED)),
    "watch_vs_cancel_key": Claim(WATCH_CANCEL_KEY, "append_outside_lock", (ORPHAN, EMPTY_KEPT)),
    "replaced_list_kept": Claim(PURGE_CANCEL_KEY_WATCH, "remove_without_identity", (ORPHAN, EMPTY_KEPT)),
    "two_watchers": Claim(TWO_WATCHERS, "create_without_lock", (LOST_WAKEUP, ORPHAN, TWICE)),
    "no_stale_try": Claim(TWO_CHECKS, "no_completed_guard", (STALE_TRY,)),
    "two_keys.exactly_once": Claim(TWO_KEYS_CHECKS, "no_completed_guard", (TWICE, STALE_TRY, LOST_WAKEUP, EMPTY_KEPT),
                                   blocked=True),
    "two_keys.purge_and_cancel": Claim(TWO_KEYS_PURGE_CANCEL, "remove_without_recheck",
                                       (ORPHAN, EMPTY_KEPT, COMPLETED_LISTED), blocked=True),
    "deadlock_free": Claim(TWO_KEYS_ONE_SHARD, "walk_under_shard_lock", (TWICE, LOST_WAKEUP), blocked=True),
    "repeated_calls": Claim(REPEATED, "no_skip_if_completed", (TWICE, LOST_WAKEUP, EMPTY_KEPT, LATE), blocked=True),
    "two_purges": Claim(TWO_PURGES, "remove_without_identity", (ORPHAN, EMPTY_KEPT, COMPLETED_LISTED), blocked=True),
}


@obligation("interleaving.no_lost_wakeup", domain=str(WATCH_CHECK), mutant=MUTANTS["no_second_try"])
def no_lost_wakeup(mutated: bool = False) -> Outcome:
    """No lost wakeup under concurrency: when T2 makes the condition true and then checks the key, the op ends
    completed in every interleaving with T1's tryCompleteElseWatch — including the one where the condition becomes
    true after T1's first tryComplete and T2's check reads the list before T1 has appended to it. T1's second
    tryComplete, made after the append and under the op lock, sees the condition then; and a check that does see
    the entry waits for the op lock, so it tries after T1's second try. This is Kafka's argument for trying twice
    (KAFKA-1952, and the comment in tryCompleteElseWatch)."""
    return CLAIMS["no_lost_wakeup"].search(mutated)


@obligation("interleaving.exactly_once", domain=str(WATCH_CHECK_FORCE), mutant=MUTANTS["force_without_cas"])
def exactly_once(mutated: bool = False) -> Outcome:
    """Exactly once under concurrency: whatever the interleaving of T1's two tries, T2's check and T3's
    forceComplete, the compare-and-set on completed is won at most once and onComplete runs at most once."""
    return CLAIMS["exactly_once"].search(mutated)


@obligation("interleaving.timer_clean", domain=str(WATCH_CHECK_FORCE), mutant=MUTANTS["no_cancel_after_add"])
def timer_clean(mutated: bool = False) -> Outcome:
    """No completed op is left in the timer: when all threads are done, a completed op has no timer entry, so
    numDelayed counts only live ops. The race it guards against: T1 finds the op not completed and goes to add it
    to the timer; meanwhile another thread completes it and cancels its (not yet existing) timer entry; T1 then adds
    it. Kafka's "if completed after the add, cancel" step removes that entry."""
    return CLAIMS["timer_clean"].search(mutated)


@obligation("interleaving.watch_vs_purge", domain=str(WATCH_PURGE), mutant=MUTANTS["remove_without_recheck"])
def watch_vs_purge(mutated: bool = False) -> Outcome:
    """A watch racing the reaper's purge orphans nothing (the race behind KAFKA-2160's removeKeyIfEmpty and
    KAFKA-2253's lost op): k's list holds only the completed op c; the purge removes c, finds the list empty and
    removes k from the map, while T1 watches a on k. In every interleaving, when both are done, a (never ready, so
    not completed) has an entry in the list the map holds for k, so a later check of k finds it; c's entry is gone;
    and the map holds no emptied list. The append happens under the shard lock, and removeKeyIfEmpty tests under
    that lock that the map still holds the walked list and that it is still empty: a list that received a's entry
    after the walk stays, and a list that was removed before the watch is replaced by a new one."""
    return CLAIMS["watch_vs_purge"].search(mutated)


@obligation("interleaving.watch_vs_cancel_key", domain=str(WATCH_CANCEL_KEY), mutant=MUTANTS["append_outside_lock"])
def watch_vs_cancel_key(mutated: bool = False) -> Outcome:
    """A watch racing cancelForKey loses no op: k's list holds the waiting op b; T2 removes k's list from the map
    and cancels and returns its ops while T1 watches a on k. In every interleaving, when both are done, each op
    that is not completed was either returned by cancelForKey (its caller now owns it) or has an entry in the list
    the map holds for k (a later check finds it) — never neither — and the map holds no emptied list. cancelForKey
    holds the shard lock from taking the list to returning it, and the watch appends under the same lock, so an
    append lands either in the list before it is taken (and is returned) or in a new list the watch creates."""
    return CLAIMS["watch_vs_cancel_key"].search(mutated)


@obligation("interleaving.replaced_list_kept", domain=str(PURGE_CANCEL_KEY_WATCH),
            mutant=MUTANTS["remove_without_identity"])
def replaced_list_kept(mutated: bool = False) -> Outcome:
    """Removing an emptied list never removes its successor: k's list holds only the completed op c; T2's purge
    walks it empty and goes to remove k, while T3's cancelForKey takes that list out of the map and T1's watch of a
    creates a new list for k. In every interleaving, when all are done, a is either returned by cancelForKey or has
    an entry in the list the map holds for k, and the map holds no emptied list. removeKeyIfEmpty tests, under the
    shard lock, that the map still holds the very list the purge walked (KAFKA-2253's identity test), so the new
    list stays."""
    return CLAIMS["replaced_list_kept"].search(mutated)


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
    return outcome(WATCH_CANCEL_KEY, *explore(WATCH_CANCEL_KEY, frozenset(), (CANCELLED_IN_TIMER,)))


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
    return CLAIMS["two_watchers"].search(mutated)


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
    return CLAIMS["no_stale_try"].search(mutated)


@obligation("interleaving.two_keys.exactly_once", domain=str(TWO_KEYS_CHECKS), mutant=MUTANTS["no_completed_guard"])
def two_keys_exactly_once(mutated: bool = False) -> Outcome:
    """An op watched on two keys, checked on both at once, completes exactly once and is not lost: T1 watches a on
    k1 then k2 (each key's list found or created and appended to under that key's shard lock, all under a's lock),
    T2 makes a ready and checks k1, T3 checks k2. In every interleaving the compare-and-set on completed is won once
    and onComplete runs once — both checks may find a listed and not completed, and a's lock orders their tries, the
    loser's compare-and-set failing —, no tryComplete follows a completion under a's lock, and when all are done a
    is completed, has no timer entry, and the map holds no emptied list for either key."""
    return CLAIMS["two_keys.exactly_once"].search(mutated)


@obligation("interleaving.two_keys.purge_and_cancel", domain=str(TWO_KEYS_PURGE_CANCEL),
            mutant=MUTANTS["remove_without_recheck"])
def two_keys_purge_and_cancel(mutated: bool = False) -> Outcome:
    """A purge of one key and a cancelForKey of the other, racing a watch on both, lose nothing: k1's list holds
    only the completed op c; T1 watches a on k1 and k2; T2 purges k1 (removing c, then removing k1 from the map if
    its list is still empty); T3 cancels k2. In every interleaving, when all are done, a (never ready) is on each
    key either listed in the list the map holds for that key or returned by that key's cancelForKey; c is listed
    nowhere; and the map holds no emptied list. The operations on k1 and on k2 meet only in a's lock, which neither
    the purge nor cancelForKey takes, so each key's race is the one-key race; the scenario shows the watch's key
    loop adds none."""
    return CLAIMS["two_keys.purge_and_cancel"].search(mutated)


@obligation("interleaving.deadlock_free", domain=str(TWO_KEYS_ONE_SHARD), mutant=MUTANTS["walk_under_shard_lock"])
def deadlock_free(mutated: bool = False) -> Outcome:
    """No thread is ever blocked forever: in every interleaving of T1's watch of a on k1 and k2 (holding a's lock
    while it takes the shard lock for each key), T2's set_ready and check of k1 (the shard lock to read, then a's
    lock to try) and T3's cancelForKey of k2 (the shard lock), with both keys in one shard, every run ends with all
    threads done — none waits on a lock that is never released, and there is no cycle of lock waits. The only
    nesting is a's lock, then the shard lock; checkAndComplete releases the shard lock before it takes any op's
    lock, and cancelForKey takes no op lock. The other two-key and repeated-call scenarios are proved free of blocked
    threads by the same search. Besides, a is completed exactly once and not lost."""
    return CLAIMS["deadlock_free"].search(mutated)


@obligation("interleaving.repeated_calls", domain=str(REPEATED), mutant=MUTANTS["no_skip_if_completed"])
def repeated_calls(mutated: bool = False) -> Outcome:
    """Calls made again are harmless: T1 watches a on k, then watches a again; T2 makes a ready and checks k, then
    checks k again. In every interleaving a completes exactly once and is completed when all are done, has no
    timer entry, and a completed a is never appended to a list again (a watch of a completed op adds it to no key:
    the watch tests completed under a's lock, and nothing else completes a here, as only the two checks and the
    watches' own tries do and all of them hold a's lock); the map keeps no emptied list. A watch again of a live a
    lists it twice, and a check that completes it removes both entries."""
    return CLAIMS["repeated_calls"].search(mutated)


@obligation("interleaving.two_purges", domain=str(TWO_PURGES), mutant=MUTANTS["remove_without_identity"])
def two_purges(mutated: bool = False) -> Outcome:
    """Two purges racing a watch orphan nothing: k's list holds only the completed op c; T2 and T3 both purge k
    while T1 watches a on k. Both purges may walk the same list empty; the first removes k; T1 then creates a new
    list for k; the second's removeKeyIfEmpty must leave that list, which it does because it tests that the map
    still holds the list it walked. In every interleaving, when all are done, a is listed in the list the map holds
    for k, c is listed nowhere, and the map holds no emptied list."""
    return CLAIMS["two_purges"].search(mutated)


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
    return recorded(header, commands)


@obligation("mutant.interleaving.no_second_try", kind="mutant", expect=REFUTED, domain=str(WATCH_CHECK))
def mutant_no_second_try() -> Outcome:
    """Mutant: tryCompleteElseWatch without its second tryComplete. z3 finds the lost-wakeup interleaving: T1's
    first try fails, T2 makes the condition true and checks the key, whose list does not hold the op yet, then T1
    appends and adds the op to the timer — the op waits for its timeout although it was ready and its key was
    checked. The trace is the interleaving's projection onto the sequential vocabulary (see lost_wakeup_trace)."""
    status, found, depth = explore(WATCH_CHECK, frozenset({"no_second_try"}), (LOST_WAKEUP,))
    result = outcome(WATCH_CHECK, status, found, depth)
    if status == REFUTED:
        result.traces = {"counterexample": lost_wakeup_trace(found.schedule)}
    return result


@obligation("mutant.interleaving.no_cancel_after_add", kind="mutant", expect=REFUTED, domain=str(WATCH_CHECK_FORCE))
def mutant_no_cancel_after_add() -> Outcome:
    """Mutant: tryCompleteElseWatch without the cancel after the timer add. z3 finds the interleaving in which
    another thread completes the op between T1's "not completed" check and its timer add: the completed op stays in
    the timer until its deadline, counted by numDelayed (and keeping estimated - numDelayed, the purge trigger, too
    low). Only an interleaving shows it, so there is no sequential trace; the schedule is the counterexample."""
    return timer_clean(mutated=True)


# --- every clause has teeth ------------------------------------------------------------------------------------------
#
# One mutant per obligation does not pin down a statement's clauses: the mutant's run may break several, and a
# clause it does not need can be deleted with every obligation still proved. So each clause of each race obligation
# (its properties' clauses, and "blocked" where the search looks for blocked threads) has a concrete run that breaks
# it and no other clause of that obligation: delete the clause and that run no longer counts as a violation. The runs
# are replayed on concrete values (each step's effect simplified by z3, no search), so they cost milliseconds and
# follow any change of the programs: a run whose step is no longer enabled, or that now breaks another clause too,
# fails its obligation.


@attrs.frozen
class Run:
    """A concrete run: ``scenario`` with ``mutant`` built in (None: Kafka's code), its threads stepping in the order
    ``order`` gives, one thread number a step."""

    scenario: Scenario
    mutant: str | None
    order: str

    def __str__(self) -> str:
        threads = ", ".join(f"T{t}={' then '.join(map(str, thread))}"
                            for t, thread in enumerate(self.scenario.threads, 1))
        code = f"with {self.mutant}" if self.mutant else "Kafka's code"
        return f"{code} ({threads}): {replay(self).schedule}"


@attrs.frozen
class Replayed:
    """Where a run ends: the last state as Python values (z3 terms belong to one context, and each obligation runs
    in its own), whether all threads are done, and whether some thread is not done and none can step."""

    state: dict[str, int | bool]
    done: bool
    stuck: bool
    schedule: Schedule

    def terms(self) -> dict:
        return {name: z3.BoolVal(value) if isinstance(value, bool) else num(value)
                for name, value in self.state.items()}


@functools.cache
def replay(run: Run) -> Replayed:
    """The run executed step by step on concrete values (each step's effect simplified by z3). A step of a thread
    that is done or not enabled is an error (the run is no longer a run of the programs)."""
    sc, mutants = run.scenario, frozenset({run.mutant} - {None})
    programs = {t: program(thread, sc, t, mutants) for t, thread in enumerate(sc.threads, start=1)}
    symbolic, sol = fresh(sc, "replay"), solver()
    sol.add(initial(sc, symbolic))
    assert sol.check() == z3.sat, "no initial state"
    s = {name: sol.model().eval(var, model_completion=True) for name, var in symbolic.items()}
    steps = []
    for t in map(int, run.order.split()):
        step = programs[t].steps.get(s[f"pc.{t}"].as_long())
        if step is None or not (step.enabled is None or z3.is_true(z3.simplify(step.enabled(s)))):
            raise ValueError(f"T{t} cannot step after {Schedule(tuple(steps))}")
        n = dict(s)
        step.effect(s, n)
        s = {name: z3.simplify(value) for name, value in n.items()}
        steps.append((t, step.label))
    done = all(s[f"pc.{t}"].as_long() == DONE for t in programs)
    stuck = not done and not any(z3.is_true(z3.simplify(transition(prog, s, t)[0])) for t, prog in programs.items())
    state = {name: z3.is_true(value) if z3.is_bool(value) else value.as_long() for name, value in s.items()}
    return Replayed(state, done, stuck, Schedule(tuple(steps)))


def violated(claim: Claim, run: Run) -> list[str]:
    """The clauses of the claim that the run's last state breaks, read as its search reads them: a property that
    only grows (``ever``) on any state, the others when all threads are done, blocked when some thread is not done
    and none can step."""
    end = replay(run)
    s = end.terms()
    return [name for name, (prop, clause) in claim.clauses().items()
            if (end.stuck if prop is None else
                (prop.ever or end.done) and z3.is_true(z3.simplify(clause(run.scenario, s))))]


#: for each clause, a run that breaks it alone (most are the refuting runs of the obligations' mutants, written out)
WITNESSES = {
    # the lost wakeup: T1's first try fails, T2 makes a ready and finds k's list not there yet, T1 appends and waits
    "lost_wakeup": Run(WATCH_CHECK, "no_second_try", "1 2 2 1 1 1 1 1 1 1"),
    # the force completes a, then T1's first try writes completed again and wins too (before its onComplete)
    "cas_won_twice": Run(WATCH_CHECK_FORCE, "force_without_cas", "3 3 2 1"),
    # T1's first try completes a; the force loses the compare-and-set and runs onComplete all the same
    "on_complete_twice": Run(WATCH_CHECK_FORCE, "complete_on_lost_cas", "2 1 1 3 3"),
    # the force completes a between T1's "not completed" check and its timer add; T2's check then removes a's entry
    "timer_leak": Run(WATCH_CHECK_FORCE, "no_cancel_after_add", "1 1 1 1 1 1 3 3 1 2 2 2 2 2 2"),
    # the purge walks k's list empty, T1 appends a to it, the purge removes k without looking again
    "orphan": Run(WATCH_PURGE, "remove_without_recheck", "2 2 2 2 2 1 1 1 1 1 1 1 1 2"),
    # the check completes a and empties k's list, and leaves it in the map
    "empty_kept": Run(WATCH_CHECK, "no_remove_if_empty", "1 1 1 1 1 1 1 1 2 2 2 2 2 2 2"),
    # the force completes a after T1's first try and T2's check of an empty map; T1 appends the completed a all the
    # same, and nothing walks k's list again
    "completed_listed": Run(WATCH_CHECK_FORCE, "no_skip_if_completed", "1 2 2 3 3 1 1 1 1 1"),
    "late_append": Run(WATCH_CHECK_FORCE, "no_skip_if_completed", "1 2 2 3 3 1 1 1 1 1"),
    # both checks find a listed and not completed; T2 completes it under a's lock, then T3 tries it again
    "stale_try": Run(TWO_CHECKS, "no_completed_guard", "1 1 1 1 1 1 1 1 2 2 3 2 3 2 2 3"),
    # T1 holds a's lock and waits for the shard lock; T2 holds the shard lock (walking k1) and waits for a's lock
    "blocked": Run(TWO_KEYS_ONE_SHARD, "walk_under_shard_lock", "1 1 1 1 2 2 2"),
}


#: the clauses each race obligation states, written down apart from the statements (CLAIMS and the properties), so
#: that a clause deleted there, or a property or the blocked-thread search dropped from one obligation, leaves a
#: teeth obligation here that fails; and a clause added there without a line here fails too
TEETH = {
    "no_lost_wakeup": ("lost_wakeup",),
    "exactly_once": ("cas_won_twice", "on_complete_twice"),
    "timer_clean": ("timer_leak",),
    "watch_vs_purge": ("orphan", "empty_kept", "completed_listed"),
    "watch_vs_cancel_key": ("orphan", "empty_kept"),
    "replaced_list_kept": ("orphan", "empty_kept"),
    "two_watchers": ("lost_wakeup", "orphan", "cas_won_twice", "on_complete_twice"),
    "no_stale_try": ("stale_try",),
    "two_keys.exactly_once": ("cas_won_twice", "on_complete_twice", "stale_try", "lost_wakeup", "empty_kept",
                              "blocked"),
    "two_keys.purge_and_cancel": ("orphan", "empty_kept", "completed_listed", "blocked"),
    "deadlock_free": ("cas_won_twice", "on_complete_twice", "lost_wakeup", "blocked"),
    "repeated_calls": ("cas_won_twice", "on_complete_twice", "lost_wakeup", "empty_kept", "late_append", "blocked"),
    "two_purges": ("orphan", "empty_kept", "completed_listed", "blocked"),
}

def clause_teeth(claim: str, clause: str) -> Outcome:
    """interleaving.teeth.<claim>.<clause>: the clause is listed for the claim (TEETH) and stated by it (CLAIMS),
    and its run breaks it and no other clause of the claim."""
    method = "replay, no search"
    run = WITNESSES.get(clause)
    if clause not in TEETH.get(claim, ()):
        return Outcome(ERROR, method, f"{clause} is stated but not listed in TEETH: {clause} has no teeth")
    if run is None:
        return Outcome(ERROR, method, f"no run breaks {clause} alone: {clause} has no teeth")
    return teeth.caught_alone(clause, CLAIMS[claim].clauses(), lambda: (REFUTED, run, len(run.order.split())),
                              lambda found: violated(CLAIMS[claim], found), str, method)


def register_clause_teeth(claim: str, clause: str) -> None:
    def check() -> Outcome:
        return clause_teeth(claim, clause)

    check.__doc__ = (f"The clause {clause} of interleaving.{claim} has teeth: a concrete run breaks it and no other "
                     f"clause of that statement, so with the clause deleted the run would count as no violation.")
    others = [name for name in TEETH.get(claim, ()) if name != clause]
    obligation(f"interleaving.teeth.{claim}.{clause}", kind="mutant", expect=REFUTED,
               domain=f"one concrete run, replayed: breaks {clause}, not {' nor '.join(others) or 'another clause'}",
               bound=Bound("replay of one run (no search)", "-", "one schedule of one scenario"))(check)


for _claim, _statement in CLAIMS.items():
    for _clause in dict.fromkeys([*TEETH.get(_claim, ()), *_statement.clauses()]):
        register_clause_teeth(_claim, _clause)
