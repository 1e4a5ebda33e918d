"""The purgatory as a symbolic transition system, checked by bounded model checking and by induction.

The encoding (`step`) is one function from a state and a command to the next state and the observation, written
with the connectives of `logic` so that it runs on z3 terms *and* on Python values: z3 unrolls it for bounded model
checking and checks it for inductiveness; `crosscheck` runs it concretely, side by side with model/, on given
traces, and refinement.purgatory on every run of a bounded domain (specs/refinement.py).

Bounds and abstractions, stated once:
  * ``OPS`` operations (a, b, c) and ``KEYS`` keys (k0, k1). Commands: watch (keys with multiplicity 0..2 each,
    at least one), set_ready, check, cancel_key, force, try, cancel, advance. Each op's condition is the
    vocabulary's: ``set_ready`` was called, or its ``ready_on``-th tryComplete has happened.
  * A watch list is kept as a multiset: ``cnt[k][o]`` entries of op o in key k's list. Every purgatory operation
    treats an op's entries independently of other ops' (a check walks the list and each op's outcome depends only on
    its own entries, in order), so the multiset determines every count and completion; only the *order* of check's
    completions and of cancel_key's result is lost, which observations treat as unordered anyway.
  * The timer is a deadline per op: ``in_timer`` and ``exp = now + delay``. This is exact for tick 1 and delays
    >= 1, by the wheel obligations: an entry is never refused on add (E >= now + 1 > clock), never runs before E
    (wheel.timing.not_early) and runs at the first advance to E or later (wheel.timing.not_late). The cross-check
    runs the model with wheel sizes 2, 3 and 20, so cascades are exercised.
  * Ghost state the properties talk about: ``completions`` (onComplete calls), ``via``, ``dropped`` (the op left
    the timer by cancellation while live), ``watched_on`` (the op was appended to k's list and k not cancelled since),
    incremental counters ``nd_ctr``/``w_ctr`` kept the way Kafka keeps its task counter, and ``uncounted`` (the op
    was listed, live and out of the timer at the last purge, so the purge estimate no longer counts it).
  * The invariant is a dict of named clauses (``CLAUSES``, ``STEP_CLAUSES``, ``AUXILIARY``); each has teeth of its
    own (purgatory.teeth.*: a bug that clause alone catches, or for an auxiliary fact, that without it the invariant
    is not inductive), so deleting any clause makes `kpurgatory prove` fail.
  * One obligation owns that invariant: purgatory.invariant decides it once (induction; if it fails, one
    counterexample to induction and a shallow BMC for a run violating a clause). The property obligations rest on
    it (``rests_on``): `prove` runs it first and, when it is not proved, reports them in one line pointing to it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from typing import Iterable

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header, Trace
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.specs import core, teeth
from kpurgatory.specs.core import BOUND, NOT_INDUCTIVE, PROVED, REFUTED, Bound, Outcome, obligation, solver, undecided

OPS, KEYS = 3, 2


@attrs.define
class Shape:
    """How many operations and keys the symbolic purgatory has; `bounded` changes it for one obligation."""

    ops: int = OPS
    keys: int = KEYS
    #: the timer's tick: an op expires at the first advance to the start of its deadline's tick or later
    tick: int = 1
    #: the last key stands for every other key, however many (purgatory.any_number_of_ops_and_keys)
    rest: bool = False
    #: a uniform run (specs/uniform.py): every loop over the ops or keys runs its body once, on a symbolic op and
    #: key standing for each of any number of them
    uniform: object = None

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple("abcdefghij"[:self.ops])

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(f"k{k}" for k in range(self.keys))


SHAPE = Shape()


@contextlib.contextmanager
def bounded(ops: int, keys: int, tick: int = 1, rest: bool = False):
    """Run the block over ``ops`` operations, ``keys`` keys (the last standing for all others if ``rest``) and a
    timer of ``tick`` (then back to the default)."""
    saved = attrs.evolve(SHAPE)
    SHAPE.ops, SHAPE.keys, SHAPE.tick, SHAPE.rest = ops, keys, tick, rest
    try:
        yield
    finally:
        SHAPE.ops, SHAPE.keys, SHAPE.tick, SHAPE.rest = saved.ops, saved.keys, saved.tick, saved.rest


def op_indices():
    """The ops a transition's loop visits: all of them, or in a uniform run one symbolic op standing for each."""
    return (SHAPE.uniform.op,) if SHAPE.uniform else range(SHAPE.ops)


def key_indices():
    """The keys a transition's loop visits: all of them, or in a uniform run one symbolic key standing for each."""
    return (SHAPE.uniform.key,) if SHAPE.uniform else range(SHAPE.keys)


def key_sum(term, keys=None):
    """The sum of ``term(k)`` over ``keys`` (all keys by default); in a uniform run, over any number of keys."""
    if SHAPE.uniform:
        return SHAPE.uniform.key_sum(term)
    return Sum(term(k) for k in (range(SHAPE.keys) if keys is None else keys))


def carried(value):
    """A value a loop carries from one op's iteration to the next: in a uniform run, where the body runs once for
    any op, whatever the ops before it left (unknown)."""
    return SHAPE.uniform.unknown(value) if SHAPE.uniform else value


def tracked_keys() -> range:
    """The keys the properties speak of: every key, or all but the last when it stands for every other key."""
    return range(SHAPE.keys - 1 if SHAPE.rest else SHAPE.keys)


def tick_start(deadline):
    """The start of the tick containing ``deadline``: when the wheel releases it (wheel.timing.not_early/not_late;
    Kafka's declared window lets it fire up to tick - 1 ms early)."""
    return deadline if SHAPE.tick == 1 else deadline - deadline % SHAPE.tick
MAX_MULT, MAX_READY_ON, MAX_PURGE_INTERVAL = 2, 3, 2

# command kinds
WATCH, SET_READY, CHECK, CANCEL_KEY, FORCE, TRY, CANCEL, ADVANCE = range(8)
KIND_NAMES = ("watch", "set_ready", "check", "cancel_key", "force", "try", "cancel", "advance")
ALL_KINDS = tuple(range(8))
NO_CANCEL_KINDS = (WATCH, SET_READY, CHECK, FORCE, TRY, ADVANCE)
# via codes
NONE, VIA_TRY, VIA_CHECK, VIA_EXPIRE, VIA_FORCE = range(5)
VIA_NAMES = {VIA_TRY: "try", VIA_CHECK: "check", VIA_EXPIRE: "expire", VIA_FORCE: "force"}

#: not a bug but an abstraction, passed like a mutant: the purge check's outcome is left free (see
#: purgatory.any_number_of_ops_and_keys)
OTHERS_ABSTRACTED = "others_abstracted"
#: spec mutants of the purgatory: one bug each, named by what it breaks
MUTANTS = {
    "purge_ge": "the purge test uses >= instead of >",
    "purge_before_expiries": "the purge test reads numDelayed before the advance's expiries",
    "no_second_try": "tryCompleteElseWatch without its second tryComplete",
    "force_without_cas": "forceComplete completes an op that is already completed (no compare-and-set)",
    "expire_early": "the reaper expires ops one ms before their deadline",
    "expire_late": "the reaper expires only ops whose deadline is strictly before the advance's time",
    "check_drops_live": "checkAndComplete drops the entries of ops it did not complete",
    "check_keeps_completed": "checkAndComplete keeps the entries of ops that were already completed",
    "keeps_emptied_list": "checkAndComplete leaves an emptied watch list in the map",
    "purge_keeps_completed": "the purge resets the estimate but removes no entry",
    "cancel_keeps_counter": "cancel removes the timer entry without decrementing the task counter",
    "expire_without_complete": "the reaper takes a due op out of the timer without completing it",
    "force_without_route": "forceComplete completes the op without recording its route (a Complete event without via)",
    "try_ignores_condition": "tryComplete completes the op whether or not its condition holds",
    "force_keeps_timer": "forceComplete completes the op but leaves its timer entry",
    "purge_keeps_entry_counter": "the purge removes entries without decrementing the watch-entry counter",
    "purge_zeroes_estimate": "the purge resets the estimate to 0 instead of numDelayed",
    "watch_skips_timer": "tryCompleteElseWatch never adds the op to the timer",
    "check_ignores_ready": "checkAndComplete tries an op as if set_ready had not been called",
    "check_keeps_won_entries": "checkAndComplete keeps every entry of the op it completes",
    "watches_completed": "a watch of an op already completed appends it to every key (the rule before Kafka 4.0.0, "
                         "model rule KAFKA-18027)",
    "expiry_reschedules": "the reaper re-adds a due op at now + delay instead of completing it",
    "check_wins_one": "checkAndComplete stops after the first op it completes",
    "check_rearms_timer": "checkAndComplete re-arms the timer (deadline now + delay) of an op it tried and left",
}


# ---------------------------------------------------------------------------------------------------------------
# logic: connectives that evaluate Python values directly and build z3 terms otherwise
# ---------------------------------------------------------------------------------------------------------------


def If(c, a, b):
    if isinstance(c, bool):
        return a if c else b
    return z3.If(c, a, b)


def And(*xs):
    rest = []
    for x in xs:
        if x is False:
            return False
        if x is not True:
            rest.append(x)
    return True if not rest else rest[0] if len(rest) == 1 else z3.And(*rest)


def Or(*xs):
    rest = []
    for x in xs:
        if x is True:
            return True
        if x is not False:
            rest.append(x)
    return False if not rest else rest[0] if len(rest) == 1 else z3.Or(*rest)


def Not(x):
    return (not x) if isinstance(x, bool) else z3.Not(x)


def Implies(a, b):
    return Or(Not(a), b)


def I(b):
    """A boolean as 0/1."""
    return If(b, 1, 0)


def Sum(xs):
    total = 0
    for x in xs:
        total = total + x
    return total


def Max(a, b):
    return If(a >= b, a, b)


def Eq(a, b):
    """Equality for Python values (a bool) and z3 terms (a formula) alike."""
    return a == b


# ---------------------------------------------------------------------------------------------------------------
# State, commands, observations
# ---------------------------------------------------------------------------------------------------------------

BOOL_OP = ("created", "ready", "completed", "in_timer", "dropped", "uncounted", "tried", "entry_new", "entry_old")
INT_OP = ("tc", "exp", "delay", "ro", "via", "completions", "calls")
GLOBAL = ("now", "est", "P", "nd_ctr", "w_ctr", "at_purge")


def state_keys() -> list[tuple]:
    keys: list[tuple] = [(name,) for name in GLOBAL]
    keys += [(name, o) for name in BOOL_OP + INT_OP for o in range(SHAPE.ops)]
    keys += [(name, k, o) for name in ("cnt", "watched_on") for k in range(SHAPE.keys) for o in range(SHAPE.ops)]
    keys += [("present", k) for k in range(SHAPE.keys)]
    return keys


def is_bool_key(key: tuple) -> bool:
    return key[0] in BOOL_OP or key[0] in ("watched_on", "present")


def initial_state(purge_interval) -> dict:
    s = {}
    for key in state_keys():
        s[key] = False if is_bool_key(key) else 0
    s[("P",)] = purge_interval
    return s


def symbolic_state(tag: str) -> dict:
    return {key: (z3.Bool if is_bool_key(key) else z3.Int)(f"{'.'.join(map(str, key))}@{tag}")
            for key in state_keys()}


@attrs.frozen
class Cmd:
    """One purgatory command; fields are Python ints or z3 terms. ``mult[k]``: how often key k is in a watch's key
    list; ``delay``/``ready_on`` (0 = None) are used by the watch that creates the op; ``to``: advance target."""

    kind: object
    op: object = 0
    key: object = 0
    mult: tuple = (1, 0)
    delay: object = 1
    ready_on: object = 0
    to: object = 0
    #: with the other operations abstracted away: whether this advance's purge check fires (their business)
    purge: object = False
    #: with the other keys as one (SHAPE.rest): per op, how many of its entries there belong to the key that a
    #: check or cancelForKey of that one names
    part: tuple = ()


def symbolic_cmd(tag: str) -> Cmd:
    return Cmd(z3.Int(f"kind@{tag}"), z3.Int(f"op@{tag}"), z3.Int(f"key@{tag}"),
               tuple(z3.Int(f"mult{k}@{tag}") for k in range(SHAPE.keys)), z3.Int(f"delay@{tag}"),
               z3.Int(f"ready_on@{tag}"), z3.Int(f"to@{tag}"), z3.Bool(f"purge@{tag}"),
               tuple(z3.Int(f"part{o}@{tag}") for o in range(SHAPE.ops)) if SHAPE.rest else ())


@attrs.frozen
class Obs:
    """What a step showed: ``result`` (0/1 for watch/force/try, a count for check; for cancel_key the per-op
    counts), the completion route per op (0 = none), whether each op's onExpiration ran, and the purge."""

    result: object
    via: tuple
    expired: tuple
    purged: object
    purge_count: object
    removed: tuple = ()  # cancel_key: entries removed per op


def no_obs(result=0) -> Obs:
    return Obs(result, (NONE,) * SHAPE.ops, (False,) * SHAPE.ops, False, 0, (0,) * SHAPE.ops)


# ---------------------------------------------------------------------------------------------------------------
# The transition relation
# ---------------------------------------------------------------------------------------------------------------


def condition(s: dict, o: int, tries):
    """The op's condition at its ``tries``-th tryComplete: set_ready seen, or ready_on reached."""
    ro = s[("ro", o)]
    return Or(s[("ready", o)], And(Not(Eq(ro, 0)), tries >= ro))


def complete(n: dict, o: int, when, via: int) -> None:
    """forceComplete under guard ``when`` (which already implies not completed): CAS, cancel the timer entry,
    onComplete."""
    n[("completed", o)] = Or(n[("completed", o)], when)
    n[("nd_ctr",)] = n[("nd_ctr",)] - I(And(when, n[("in_timer", o)]))
    n[("in_timer", o)] = And(n[("in_timer", o)], Not(when))
    n[("completions", o)] = n[("completions", o)] + I(when)
    n[("via", o)] = If(when, via, n[("via", o)])


def listed(s: dict, o: int):
    return key_sum(lambda k: s[("cnt", k, o)]) > 0


def visited(s: dict, c: Cmd, o: int):
    """How many of op o's entries a check or cancelForKey of ``c.key`` visits: all of that key's; for the key that
    stands for every other key, those of the one among them that the command names (``c.part``)."""
    m = key_sum(lambda k: If(Eq(c.key, k), s[("cnt", k, o)], 0), tracked_keys())
    return m + If(Eq(c.key, SHAPE.keys - 1), c.part[o], 0) if SHAPE.rest else m


def t_watch(s: dict, c: Cmd, mutants: frozenset) -> tuple[dict, Obs]:
    """tryCompleteElseWatch(op, keys): try; else append to every key (unless completed), estimated += 1, try again
    (unless mutant no_second_try); else if still not completed, add to the timer at now + delay."""
    n = s.copy()
    result, via = False, []
    for o in op_indices():
        sel = Eq(c.op, o)
        created = s[("created", o)]
        n[("created", o)] = Or(created, sel)
        n[("delay", o)] = If(And(sel, Not(created)), c.delay, s[("delay", o)])
        n[("ro", o)] = If(And(sel, Not(created)), c.ready_on, s[("ro", o)])
        done_before = s[("completed", o)]
        tries1 = s[("tc", o)] + 1
        win1 = And(sel, condition(n, o, tries1), Not(done_before))
        phase = And(sel, Not(win1))
        append = phase if "watches_completed" in mutants else And(phase, Not(done_before))
        for k in key_indices():
            n[("cnt", k, o)] = s[("cnt", k, o)] + If(append, c.mult[k], 0)
            n[("watched_on", k, o)] = Or(s[("watched_on", k, o)], And(append, c.mult[k] > 0))
            n[("present", k)] = Or(n[("present", k)], And(append, c.mult[k] > 0))
        n[("w_ctr",)] = n[("w_ctr",)] + If(append, key_sum(lambda k: c.mult[k]), 0)
        n[("est",)] = n[("est",)] + I(phase)
        n[("calls", o)] = s[("calls", o)] + I(phase)
        if "no_second_try" in mutants:
            win2, tries = False, tries1
            n[("tried", o)] = And(s[("tried", o)], Not(append))
        else:
            tries2 = tries1 + 1
            win2 = And(phase, condition(n, o, tries2), Not(done_before))
            tries = If(phase, tries2, tries1)
            n[("tried", o)] = Or(s[("tried", o)], phase)
        n[("tc", o)] = If(sel, tries, s[("tc", o)])
        won = Or(win1, win2)
        complete(n, o, won, VIA_TRY)
        add = And(phase, Not(win2), Not(done_before), "watch_skips_timer" not in mutants)
        n[("nd_ctr",)] = n[("nd_ctr",)] + I(And(add, Not(s[("in_timer", o)])))
        n[("in_timer", o)] = Or(n[("in_timer", o)], add)
        n[("entry_new", o)] = Or(s[("entry_new", o)], add)
        n[("entry_old", o)] = And(s[("entry_old", o)], Not(add))  # a re-watch replaces the timer entry
        n[("exp", o)] = If(add, s[("now",)] + n[("delay", o)], s[("exp", o)])
        n[("dropped", o)] = And(s[("dropped", o)], Not(add))
        n[("uncounted", o)] = And(s[("uncounted", o)], Not(add))
        result = Or(result, won)
        via.append(If(won, VIA_TRY, NONE))
    return n, Obs(I(result), tuple(via), (False,) * SHAPE.ops, False, 0, (0,) * SHAPE.ops)


def t_set_ready(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    n = s.copy()
    for o in op_indices():
        n[("ready", o)] = Or(s[("ready", o)], Eq(c.op, o))
    return n, no_obs()


def t_check(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    """checkAndComplete(key): walk the key's entries; an op already completed loses them all; an op not completed
    is tried once per entry until one try completes it (that entry and the later ones go, the earlier ones stay)."""
    n = s.copy()
    result, via, won_before = 0, [], carried(False)
    for o in op_indices():
        m = visited(s, c, o)
        done_before = s[("completed", o)]
        tc, ro = s[("tc", o)], s[("ro", o)]
        ready = And(s[("ready", o)], "check_ignores_ready" not in mutants)
        first_ready = If(ready, 1, If(Not(Eq(ro, 0)), Max(1, ro - tc), m + 1))
        active = And(m > 0, Not(done_before))
        wins = And(active, first_ready <= m, Not(And(won_before, "check_wins_one" in mutants)))
        n[("tc", o)] = tc + If(active, If(wins, first_ready, m), 0)
        n[("tried", o)] = Or(s[("tried", o)], active)
        left = If(And(m > 0, done_before), 0, If(wins, first_ready - 1, m))
        if "check_drops_live" in mutants:
            left = If(wins, first_ready - 1, 0)
        if "check_keeps_completed" in mutants:
            left = If(done_before, m, left)
        if "check_keeps_won_entries" in mutants:
            left = If(wins, m, left)
        if "check_rearms_timer" in mutants:
            rearm = And(active, Not(wins), s[("in_timer", o)])
            n[("exp", o)] = If(rearm, s[("now",)] + s[("delay", o)], s[("exp", o)])
        for k in key_indices():
            n[("cnt", k, o)] = If(Eq(c.key, k), s[("cnt", k, o)] - (m - left), s[("cnt", k, o)])
        n[("w_ctr",)] = n[("w_ctr",)] - (m - left)
        complete(n, o, wins, VIA_CHECK)
        result = result + I(wins)
        won_before = Or(won_before, wins)
        via.append(If(wins, VIA_CHECK, NONE))
    if "keeps_emptied_list" not in mutants:
        for k in key_indices():  # an emptied list leaves the map
            n[("present", k)] = And(s[("present", k)], Or(Not(Eq(c.key, k)), entries_on(n, k) > 0))
    return n, Obs(result, tuple(via), (False,) * SHAPE.ops, False, 0, (0,) * SHAPE.ops)


def t_cancel_key(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    """cancelForKey(key): remove the key's list; cancel the timer entry of every op on it (completing nothing)."""
    n = s.copy()
    removed = []
    for o in op_indices():
        m = visited(s, c, o)
        was = And(m > 0, s[("in_timer", o)])
        n[("in_timer", o)] = And(s[("in_timer", o)], Not(was))
        n[("nd_ctr",)] = n[("nd_ctr",)] - I(was)
        n[("dropped", o)] = Or(s[("dropped", o)], And(was, Not(s[("completed", o)])))
        for k in key_indices():
            n[("cnt", k, o)] = If(Eq(c.key, k), s[("cnt", k, o)] - m, s[("cnt", k, o)])
            n[("watched_on", k, o)] = And(s[("watched_on", k, o)], Not(Eq(c.key, k)))
        n[("w_ctr",)] = n[("w_ctr",)] - m
        removed.append(m)
    for k in key_indices():
        n[("present", k)] = And(s[("present", k)], Not(Eq(c.key, k)))
    return n, Obs(Sum(removed), (NONE,) * SHAPE.ops, (False,) * SHAPE.ops, False, 0, tuple(removed))


def t_force(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    n = s.copy()
    result, via = False, []
    for o in op_indices():
        win = Eq(c.op, o) if "force_without_cas" in mutants else And(Eq(c.op, o), Not(s[("completed", o)]))
        timed = n[("in_timer", o)]
        complete(n, o, win, NONE if "force_without_route" in mutants else VIA_FORCE)
        if "force_keeps_timer" in mutants:  # undo complete()'s cancellation of the timer entry
            n[("in_timer", o)], n[("nd_ctr",)] = timed, n[("nd_ctr",)] + I(And(win, timed))
        result = Or(result, win)
        via.append(If(win, VIA_FORCE, NONE))
    return n, Obs(I(result), tuple(via), (False,) * SHAPE.ops, False, 0, (0,) * SHAPE.ops)


def t_try(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    n = s.copy()
    result, via = False, []
    for o in op_indices():
        sel = Eq(c.op, o)
        tries = s[("tc", o)] + 1
        n[("tc", o)] = If(sel, tries, s[("tc", o)])
        n[("tried", o)] = Or(s[("tried", o)], sel)
        condition_holds = True if "try_ignores_condition" in mutants else condition(s, o, tries)
        win = And(sel, condition_holds, Not(s[("completed", o)]))
        complete(n, o, win, VIA_TRY)
        result = Or(result, win)
        via.append(If(win, VIA_TRY, NONE))
    return n, Obs(I(result), tuple(via), (False,) * SHAPE.ops, False, 0, (0,) * SHAPE.ops)


def t_cancel(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    n = s.copy()
    for o in op_indices():
        was = And(Eq(c.op, o), s[("in_timer", o)])
        n[("in_timer", o)] = And(s[("in_timer", o)], Not(was))
        n[("nd_ctr",)] = n[("nd_ctr",)] - (0 if "cancel_keeps_counter" in mutants else I(was))
        n[("dropped", o)] = Or(s[("dropped", o)], And(was, Not(s[("completed", o)])))
    return n, no_obs()


def purge_due(est, delayed, interval, mutants):
    """Kafka's purge rule: strictly more than purgeInterval operations estimated gone (mutant purge_ge: >=)."""
    return est - delayed >= interval if "purge_ge" in mutants else est - delayed > interval


def t_advance(s: dict, c: Cmd, mutants) -> tuple[dict, Obs]:
    """The reaper: run every op whose deadline is <= to (complete by expiry, then onExpiration), then the purge
    check: if estimated - numDelayed > purgeInterval, reset the estimate and drop completed entries everywhere."""
    n = s.copy()
    via, expired = [], []
    deadline_reached = {"expire_early": lambda exp: tick_start(exp) <= c.to + 1,
                        "expire_late": lambda exp: tick_start(exp) < c.to}
    reached = next((deadline_reached[m] for m in mutants if m in deadline_reached),
                   lambda exp: tick_start(exp) <= c.to)
    for o in op_indices():
        fire = And(s[("in_timer", o)], reached(s[("exp", o)]), Not(s[("completed", o)]))
        if "expire_without_complete" in mutants:
            n[("in_timer", o)] = And(n[("in_timer", o)], Not(fire))
            n[("nd_ctr",)] = n[("nd_ctr",)] - I(fire)
            fire = False
        if "expiry_reschedules" in mutants:
            n[("exp", o)] = If(fire, c.to + s[("delay", o)], s[("exp", o)])
            fire = False
        complete(n, o, fire, VIA_EXPIRE)
        via.append(If(fire, VIA_EXPIRE, NONE))
        expired.append(fire)
    n[("now",)] = c.to
    delayed = Sum(I(n[("in_timer", o)]) for o in op_indices())
    tested = Sum(I(s[("in_timer", o)]) for o in op_indices()) if "purge_before_expiries" in mutants else delayed
    fires = c.purge if OTHERS_ABSTRACTED in mutants else purge_due(n[("est",)], tested, s[("P",)], mutants)
    n[("est",)] = If(fires, 0 if "purge_zeroes_estimate" in mutants else delayed, n[("est",)])
    n[("at_purge",)] = If(fires, delayed, s[("at_purge",)])
    purged = 0
    for o in op_indices():
        n[("calls", o)] = If(fires, 0, s[("calls", o)])
        n[("entry_old", o)] = If(fires, n[("in_timer", o)], s[("entry_old", o)])
        n[("entry_new", o)] = And(s[("entry_new", o)], Not(fires))
        for k in key_indices():
            gone = If(And(fires, n[("completed", o)], "purge_keeps_completed" not in mutants), n[("cnt", k, o)], 0)
            n[("cnt", k, o)] = n[("cnt", k, o)] - gone
            purged = purged + gone
        n[("uncounted", o)] = If(fires, And(listed(n, o), Not(n[("completed", o)]), Not(n[("in_timer", o)])),
                                 s[("uncounted", o)])
    n[("w_ctr",)] = n[("w_ctr",)] - (0 if "purge_keeps_entry_counter" in mutants else purged)
    for k in key_indices():  # an emptied list leaves the map
        n[("present", k)] = And(n[("present", k)], Or(Not(fires), entries_on(n, k) > 0))
    return n, Obs(0, tuple(via), tuple(expired), fires, purged, (0,) * SHAPE.ops)


TRANSITIONS = (t_watch, t_set_ready, t_check, t_cancel_key, t_force, t_try, t_cancel, t_advance)


def step(s: dict, c: Cmd, mutants: frozenset = frozenset(), kinds: Iterable[int] = ALL_KINDS) -> tuple[dict, Obs]:
    """The transition relation. A concrete kind runs its transition; a symbolic one is the case split over
    ``kinds``."""
    if isinstance(c.kind, int):
        return entries_pending(*TRANSITIONS[c.kind](s, c, mutants))
    kinds = list(kinds)
    results = [(kind, TRANSITIONS[kind](s, c, mutants)) for kind in kinds]
    _, (n, obs) = results[-1]
    n, obs = dict(n), obs
    for kind, (nk, ok) in reversed(results[:-1]):
        is_kind = c.kind == kind
        n = {key: If(is_kind, nk[key], n[key]) for key in n}
        obs = Obs(If(is_kind, ok.result, obs.result),
                  tuple(If(is_kind, a, b) for a, b in zip(ok.via, obs.via)),
                  tuple(If(is_kind, a, b) for a, b in zip(ok.expired, obs.expired)),
                  If(is_kind, ok.purged, obs.purged), If(is_kind, ok.purge_count, obs.purge_count),
                  tuple(If(is_kind, a, b) for a, b in zip(ok.removed, obs.removed)))
    return entries_pending(n, obs)


def entries_pending(n: dict, obs: Obs) -> tuple[dict, Obs]:
    """Ghost state of the purge rule's specification: a timer entry that left the timer (by completion, expiry or
    cancellation) is no longer pending, whichever purge epoch it belongs to."""
    for o in op_indices():
        for name in ("entry_new", "entry_old"):
            n[(name, o)] = And(n[(name, o)], n[("in_timer", o)])
    return n, obs


def cmd_domain(s: dict, c: Cmd, kinds: Iterable[int], max_delay: int | None = None) -> object:
    """Commands that are well formed in state s: a known kind, op and key; a watch has at least one key and
    creates an op with delay >= 1 and ready_on in 0..3; other op commands name an op that exists; time moves
    forward."""
    created = Or(*[And(Eq(c.op, o), s[("created", o)]) for o in range(SHAPE.ops)])
    parts = [Or(*[c.kind == kind for kind in kinds]), c.op >= 0, c.op < SHAPE.ops, c.key >= 0, c.key < SHAPE.keys,
             *[And(m >= 0, Or(SHAPE.rest, m <= MAX_MULT)) for m in c.mult], Sum(c.mult) >= 1, c.delay >= SHAPE.tick,
             *[And(p >= 0, p <= s[("cnt", SHAPE.keys - 1, o)]) for o, p in enumerate(c.part)],
             c.ready_on >= 0, c.ready_on <= MAX_READY_ON, c.to >= s[("now",)],
             Implies(Or(*[c.kind == kind for kind in (SET_READY, FORCE, TRY, CANCEL)]), created)]
    if max_delay is not None:  # a search for a short, readable run
        parts += [c.delay <= max_delay, c.to <= s[("now",)] + max_delay + 1, *[m <= MAX_MULT for m in c.mult]]
    return And(*parts)


# ---------------------------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------------------------


def entries_on(s: dict, k: int):
    return Sum(s[("cnt", k, o)] for o in op_indices())


def stale_ops(s: dict):
    """Operations completed but still on some watch list."""
    return Sum(I(And(s[("completed", o)], listed(s, o))) for o in range(SHAPE.ops))


def delayed(s: dict):
    return Sum(I(s[("in_timer", o)]) for o in range(SHAPE.ops))


def entries(s: dict):
    return Sum(s[("cnt", k, o)] for k in range(SHAPE.keys) for o in range(SHAPE.ops))


def each_op(clause):
    """A clause stated per op, for every op."""
    return lambda s: And(*[clause(s, o) for o in range(SHAPE.ops)])


def each_op_and_key(clause):
    """A clause stated per op and tracked key, for all of them."""
    return lambda s: And(*[clause(s, o, k) for o in range(SHAPE.ops) for k in tracked_keys()])


def each_op_step(clause):
    """A step clause stated per op, for every op."""
    return lambda s, c, n, obs: And(*[clause(s, c, n, obs, o) for o in range(SHAPE.ops)])


def each_op_and_key_step(clause, keys=tracked_keys):
    """A step clause stated per op and key (the tracked ones unless ``keys`` says otherwise), for all of them."""
    return lambda s, c, n, obs: And(*[clause(s, c, n, obs, o, k) for o in range(SHAPE.ops) for k in keys()])


def via_try_or_check(s, o):
    return Or(Eq(s[("via", o)], VIA_TRY), Eq(s[("via", o)], VIA_CHECK))


def live(s, o):
    """Watched, not completed, its timer entry not cancelled."""
    return And(s[("created", o)], Not(s[("completed", o)]), Not(s[("dropped", o)]))


#: The state properties as named clauses, "<property>.<clause>"; a property is the conjunction of its clauses. Each
#: clause has a bug of the transition that it alone catches (PROPERTY_TEETH, obligations purgatory.teeth.*), so
#: deleting one makes `prove` fail.
CLAUSES = {
    "exactly_once.once": each_op(lambda s, o: Eq(s[("completions", o)], I(s[("completed", o)]))),
    "exactly_once.route": each_op(lambda s, o: Eq(Not(Eq(s[("via", o)], NONE)), s[("completed", o)])),
    "justified.condition": each_op(lambda s, o: Implies(via_try_or_check(s, o), condition(s, o, s[("tc", o)]))),
    "justified.deadline": each_op(lambda s, o: Implies(Eq(s[("via", o)], VIA_EXPIRE),
                                                       tick_start(s[("exp", o)]) <= s[("now",)])),
    "no_lost_wakeup.listed": each_op_and_key(lambda s, o, k: Implies(
        And(s[("watched_on", k, o)], Not(s[("completed", o)])), s[("cnt", k, o)] >= 1)),
    "counters.completed_not_timed": each_op(lambda s, o: Implies(s[("completed", o)], Not(s[("in_timer", o)]))),
    "counters.task_counter": lambda s: Eq(s[("nd_ctr",)], delayed(s)),
    "counters.entry_counter": lambda s: Eq(s[("w_ctr",)], entries(s)),
    "counters.estimate": lambda s: s[("est",)] >= delayed(s),
    "no_forgotten_op.scheduled": each_op(lambda s, o: Implies(
        live(s, o), And(s[("in_timer", o)], tick_start(s[("exp", o)]) > s[("now",)]))),
    "tried_after_listing.tried": each_op(lambda s, o: Implies(And(listed(s, o), Not(s[("completed", o)])),
                                                              s[("tried", o)])),
    "cleanup_map.present": lambda s: And(*[Eq(s[("present", k)], entries_on(s, k) > 0) for k in tracked_keys()]),
}


def checked_ready_watched(s, c, o, k):
    return And(c.kind == CHECK, Eq(c.key, k), s[("ready", o)], s[("watched_on", k, o)], Not(s[("completed", o)]))


def checked(c, k):
    return And(c.kind == CHECK, Eq(c.key, k))


#: The properties of one transition s --c--> n as named clauses, like CLAUSES.
STEP_CLAUSES = {
    "no_lost_wakeup.check_completes": each_op_and_key_step(
        lambda s, c, n, obs, o, k: Implies(checked_ready_watched(s, c, o, k), n[("completed", o)])),
    "cleanup_check.completed_gone": each_op_and_key_step(
        lambda s, c, n, obs, o, k: Implies(And(checked(c, k), s[("completed", o)]), Eq(n[("cnt", k, o)], 0))),
    "cleanup_check.completion_removes": each_op_and_key_step(
        lambda s, c, n, obs, o, k: Implies(And(checked(c, k), n[("completed", o)], Not(s[("completed", o)])),
                                           n[("cnt", k, o)] < s[("cnt", k, o)])),
    "cleanup_purge.completed_gone": each_op_and_key_step(
        lambda s, c, n, obs, o, k: Implies(And(c.kind == ADVANCE, obs.purged, n[("completed", o)]),
                                           Eq(n[("cnt", k, o)], 0)), keys=lambda: range(SHAPE.keys)),
    "liveness.expired": each_op_step(
        lambda s, c, n, obs, o: Implies(And(c.kind == ADVANCE, s[("created", o)], Not(n[("dropped", o)]),
                                            s[("exp", o)] <= c.to), n[("completed", o)])),
    "never_watched_again.no_new_entry": each_op_and_key_step(
        lambda s, c, n, obs, o, k: Implies(s[("completed", o)], n[("cnt", k, o)] <= s[("cnt", k, o)]),
        keys=lambda: range(SHAPE.keys)),
}


def grouped(clauses: dict, *args) -> dict[str, object]:
    """The clauses evaluated on ``args``, conjoined by property (the part of the name before the dot)."""
    parts: dict[str, list] = {}
    for name, clause in clauses.items():
        parts.setdefault(name.split(".")[0], []).append(clause(*args))
    return {prop: And(*xs) for prop, xs in parts.items()}


def property_names(clauses: dict) -> set[str]:
    return {name.split(".")[0] for name in clauses}


def properties(s: dict) -> dict[str, object]:
    """The state properties, by the name of the obligation that states them."""
    return grouped(CLAUSES, s)


def step_properties(s: dict, c: Cmd, n: dict, obs: Obs) -> dict[str, object]:
    """Properties of one transition (s --c--> n), by the name of the obligation that states them."""
    return grouped(STEP_CLAUSES, s, c, n, obs)


#: Facts that make the properties inductive, as named clauses: ranges, and what a never-watched op looks like. Each
#: is needed: without it the invariant is not inductive (obligations purgatory.teeth.auxiliary.*).
AUXILIARY = {
    "delay_min": each_op(lambda s, o: Implies(s[("created", o)], s[("delay", o)] >= SHAPE.tick)),
    "timer_future": each_op(lambda s, o: Implies(s[("in_timer", o)], And(s[("created", o)],
                                                                         tick_start(s[("exp", o)]) > s[("now",)]))),
    "unwatched_blank": each_op(lambda s, o: Implies(Not(s[("created", o)]), And(
        Not(s[("completed", o)]), Not(s[("ready", o)]), Eq(s[("tc", o)], 0), Not(s[("dropped", o)]),
        Not(s[("uncounted", o)])))),
    "entries_nonneg": each_op(lambda s, o: And(*[s[("cnt", k, o)] >= 0 for k in range(SHAPE.keys)])),
    "unwatched_unlisted": each_op(lambda s, o: Implies(Not(s[("created", o)]), And(
        *[And(Eq(s[("cnt", k, o)], 0), Not(s[("watched_on", k, o)])) for k in range(SHAPE.keys)]))),
}


def auxiliary(s: dict) -> object:
    return And(*[clause(s) for clause in AUXILIARY.values()])

def invariant(s: dict) -> object:
    return And(auxiliary(s), *properties(s).values())


# ---------------------------------------------------------------------------------------------------------------
# Checking: BMC and induction
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Run:
    """A counterexample path: the commands (as Cmd with Python values) and the purge interval."""

    purge_interval: int
    commands: tuple[Cmd, ...]
    depth: int


def _value(model: z3.ModelRef, term) -> int:
    value = model.eval(term, model_completion=True)
    return bool(z3.is_true(value)) if z3.is_bool(value) else value.as_long()


def bmc(bad, depth: int, *, mutants=frozenset(), kinds=ALL_KINDS, max_delay: int | None = 4,
        step_bad=None) -> tuple[str, Run | None, int]:
    """Bounded model checking from the initial state: is ``bad(state)`` (or ``step_bad(s, c, n, obs)``) reachable
    within ``depth`` commands? Returns (REFUTED, path, steps) or (BOUND, None, depth) or (undecided, None, steps)
    (z3 gave up, or used up its resource limit: `undecided`)."""
    s0 = initial_state(z3.Int("P"))
    sol = solver()
    sol.add(s0[("P",)] >= 0, s0[("P",)] <= MAX_PURGE_INTERVAL)
    states, cmds = [s0], []
    for i in range(depth + 1):
        if i > 0:
            c = symbolic_cmd(str(i))
            sol.add(cmd_domain(states[-1], c, kinds, max_delay))
            nxt, obs = step(states[-1], c, mutants, kinds)
            fresh = symbolic_state(str(i))
            sol.add(*[fresh[key] == nxt[key] for key in fresh])
            cmds.append(c)
            prev = states[-1]
            states.append(fresh)
            here = [bad(fresh)] if bad is not None else []
            if step_bad is not None:
                here.append(step_bad(prev, c, fresh, obs))
        else:
            here = [bad(s0)] if bad is not None else []
        if not here:
            continue
        sol.push()
        sol.add(Or(*here))
        result = sol.check()
        status = undecided(sol)  # read before pop, which forgets why z3 gave up
        if result == z3.sat:
            model = sol.model()
            run = Run(_value(model, s0[("P",)]),
                      tuple(Cmd(*[_value(model, x) if not isinstance(x, tuple) else tuple(_value(model, y) for y in x)
                                  for x in attrs.astuple(c, recurse=False)]) for c in cmds), i)
            return REFUTED, run, i
        sol.pop()
        if result != z3.unsat:
            return status, None, i
        # no violation within i steps: the search for a first violation may assume none earlier
        sol.add(Not(Or(*here)))
    return BOUND, None, depth


def inductive(inv, *, mutants=frozenset(), kinds=ALL_KINDS, goal=None, step_goal=None) -> tuple[str, str]:
    """Is ``inv`` an inductive invariant (initiation: the initial state satisfies it, for every purge interval;
    consecution: inv(s) and a well-formed command give inv(s')), and does it imply ``goal`` / the one-step
    ``step_goal``? Returns (PROVED | REFUTED | NOT_INDUCTIVE | undecided, which part failed): REFUTED when the initial
    state violates ``inv``, NOT_INDUCTIVE when a state satisfying it steps out of it (or violates a goal) — which says
    the invariant is too weak or a reachable violation exists deeper than any BMC ran, not that one was found."""
    s0 = initial_state(z3.Int("P0"))
    init = solver()
    init.add(s0[("P",)] >= 0, Not(inv(s0)))
    r = init.check()
    if r != z3.unsat:
        return (REFUTED if r == z3.sat else undecided(init)), "initiation"
    s, c = symbolic_state("s"), symbolic_cmd("c")
    n, obs = step(s, c, mutants, kinds)
    checks = [("consecution", inv(n))]
    if goal is not None:
        checks.append(("goal", goal(s)))
    if step_goal is not None:
        checks.append(("step goal", step_goal(s, c, n, obs)))
    for part, target in checks:
        sol = solver()
        sol.add(inv(s), cmd_domain(s, c, kinds), Not(target))
        r = sol.check()
        if r != z3.unsat:
            return (NOT_INDUCTIVE if r == z3.sat else undecided(sol)), part
    return PROVED, ""


# ---------------------------------------------------------------------------------------------------------------
# From paths to traces, and the concrete run used by the cross-check
# ---------------------------------------------------------------------------------------------------------------


def to_vocabulary(run_commands: Iterable[Cmd]) -> list[v.Command]:
    """Cmds with Python values -> vocabulary commands (op a/b/c, keys k0/k1; delay and ready_on only on the watch
    that creates the op)."""
    out: list[v.Command] = []
    created: set[int] = set()
    for c in run_commands:
        op = SHAPE.op_names[c.op]
        if c.kind == WATCH:
            keys = [SHAPE.key_names[k] for k in range(SHAPE.keys) for _ in range(c.mult[k])]
            if c.op in created:
                out.append(v.Watch(op, keys))
            else:
                out.append(v.Watch(op, keys, c.delay, c.ready_on or None))
                created.add(c.op)
        elif c.kind == SET_READY:
            out.append(v.SetReady(op))
        elif c.kind == CHECK:
            out.append(v.Check(SHAPE.key_names[c.key]))
        elif c.kind == CANCEL_KEY:
            out.append(v.CancelKey(SHAPE.key_names[c.key]))
        elif c.kind == FORCE:
            out.append(v.Force(op))
        elif c.kind == TRY:
            out.append(v.Try(op))
        elif c.kind == CANCEL:
            out.append(v.Cancel(op))
        elif c.kind == ADVANCE:
            out.append(v.Advance(c.to))
    return out


def from_vocabulary(commands: Iterable[v.Command]) -> list[Cmd | str]:
    """Vocabulary -> Cmds (queries watched/delayed stay as strings)."""
    out: list[Cmd | str] = []
    for command in commands:
        if isinstance(command, v.Watch):
            if command.delay_ms == 0:  # the model expires such an op inside its watch; step() has no such case
                raise ValueError(f"{command.name} of {command.op} with a delay of 0 is outside the symbolic purgatory")
            mult = tuple(sum(1 for key in command.keys if key == name) for name in SHAPE.key_names)
            # a re-watch names no delay: the op keeps its own, and step() reads c.delay only when it creates the op
            delay = 1 if command.delay_ms is None else command.delay_ms
            out.append(Cmd(WATCH, SHAPE.op_names.index(command.op), 0, mult, delay, command.ready_on or 0))
        elif isinstance(command, (v.SetReady, v.Force, v.Try, v.Cancel)):
            kind = {v.SetReady: SET_READY, v.Force: FORCE, v.Try: TRY, v.Cancel: CANCEL}[type(command)]
            out.append(Cmd(kind, SHAPE.op_names.index(command.op)))
        elif isinstance(command, (v.Check, v.CancelKey)):
            out.append(Cmd(CHECK if isinstance(command, v.Check) else CANCEL_KEY, 0,
                           SHAPE.key_names.index(command.key)))
        elif isinstance(command, v.Advance):
            out.append(Cmd(ADVANCE, to=command.to_ms))
        elif isinstance(command, (v.Watched, v.Delayed)):
            out.append(command.name)
        else:
            raise ValueError(f"{command.name} is outside the symbolic purgatory")
    return out


def expected_observation(command: v.Command, s: dict, obs: Obs | None) -> tuple:
    """A symbolic step's observation in comparable form: (result, sorted events)."""
    if obs is None:  # watched / delayed
        return (entries(s) if command.name == "watched" else delayed(s)), ()
    events = []
    for o in range(SHAPE.ops):
        if obs.via[o] != NONE:
            events.append(("complete", SHAPE.op_names[o], VIA_NAMES[obs.via[o]]))
        if obs.expired[o]:
            events.append(("expire", SHAPE.op_names[o]))
    if obs.purged:
        events.append(("purge", obs.purge_count))
    if isinstance(command, v.Watch) or isinstance(command, (v.Force, v.Try)):
        result = bool(obs.result)
    elif isinstance(command, v.Check):
        result = obs.result
    elif isinstance(command, v.CancelKey):
        result = tuple(sorted(Counter({SHAPE.op_names[o]: obs.removed[o] for o in range(SHAPE.ops)}).elements()))
    else:
        result = None
    return result, tuple(sorted(events, key=repr))


def observed(command: v.Command, observation: v.Observation) -> tuple:
    events = []
    for event in observation.events:
        if isinstance(event, v.Complete):
            events.append(("complete", event.op, event.via))
        elif isinstance(event, v.Expire):
            events.append(("expire", event.op))
        elif isinstance(event, v.Purge):
            events.append(("purge", event.count))
    result = observation.result
    if isinstance(command, v.CancelKey):
        result = tuple(sorted(result))
    return result, tuple(sorted(events, key=repr))


def model_state(model: Model) -> dict:
    """The model's state in the symbolic state's terms (the non-ghost part)."""
    purgatory = model.purgatory
    s = {("now",): model.now_ms, ("est",): purgatory.estimated_total_operations}
    s.update({("present", k): key in purgatory.watchers for k, key in enumerate(SHAPE.key_names)})
    for o, name in enumerate(SHAPE.op_names):
        op = model.ops.get(name)
        s[("created", o)] = op is not None
        if op is None:
            continue
        in_timer = op.entry is not None and op.entry.bucket is not None
        s[("ready", o)], s[("completed", o)], s[("tc", o)] = op.ready is True, op.completed, op.try_calls
        s[("in_timer", o)] = in_timer
        if in_timer:
            s[("exp", o)] = op.entry.expiration_ms
        for k, key in enumerate(SHAPE.key_names):
            s[("cnt", k, o)] = sum(1 for listed_op in purgatory.watchers.get(key, []) if listed_op is op)
    return s


def compare_state(symbolic: dict, model_view: dict) -> list[str]:
    diffs = []
    for key, value in model_view.items():
        mine = _concrete(symbolic[key])
        if mine != value:
            diffs.append(f"{key}: symbolic {mine}, model {value}")
    return diffs


def crosscheck(commands: list[v.Command], params: v.Params, *, through_z3: bool = False,
               mutants: frozenset = frozenset()) -> list[str]:
    """Run ``commands`` through the model and through the symbolic transition relation (evaluated on Python values,
    or on z3 constants simplified after every step when ``through_z3``); return every disagreement of state or
    observation (empty when they agree); `core.ModelBroke` if the model hangs or raises."""
    model = Model("purgatory", params)
    s = initial_state(params.purge_interval)
    if through_z3:
        s = {key: (z3.BoolVal(x) if isinstance(x, bool) else z3.IntVal(x)) for key, x in s.items()}
    problems: list[str] = []
    for seq, (command, cmd) in enumerate(zip(commands, from_vocabulary(commands)), start=1):
        observation = core.model_step(model, command, commands[:seq - 1])
        if isinstance(cmd, str):
            concrete = s if not through_z3 else _concretise(s)
            mine = expected_observation(command, concrete, None)
        else:
            if through_z3:  # every field a z3 constant, so step() builds the full case split over the kinds
                cmd = Cmd(*[tuple(z3.IntVal(y) for y in x) if isinstance(x, tuple) else z3.IntVal(x)
                            for x in attrs.astuple(cmd, recurse=False)])
            s, obs = step(s, cmd, mutants)
            if through_z3:
                s = {key: _as_z3(z3.simplify(_as_z3(x))) for key, x in s.items()}
                obs = _concretise_obs(obs)
            mine = expected_observation(command, s if not through_z3 else _concretise(s), obs)
        theirs = observed(command, observation)
        if mine != theirs:
            problems.append(f"step {seq} {command}: symbolic {mine}, model {theirs}")
        diffs = compare_state(s if not through_z3 else _concretise(s), model_state(model))
        problems += [f"step {seq} {command}: {d}" for d in diffs]
        if problems:
            break
    return problems


def _as_z3(x):
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    return x


def _concretise(s: dict) -> dict:
    return {key: _concrete(x) for key, x in s.items()}


def _concrete(x):
    if isinstance(x, (bool, int)):
        return x
    x = z3.simplify(x)
    return z3.is_true(x) if z3.is_bool(x) else x.as_long()


def _concretise_obs(obs: Obs) -> Obs:
    return Obs(_concrete(obs.result), tuple(_concrete(x) for x in obs.via), tuple(_concrete(x) for x in obs.expired),
               _concrete(obs.purged), _concrete(obs.purge_count), tuple(_concrete(x) for x in obs.removed))


def purgatory_trace(trace_id: str, run: Run, description: str) -> Trace:
    params = v.Params(tick_ms=1, wheel_size=20, start_ms=0, purge_interval=run.purge_interval)
    commands = to_vocabulary(run.commands) + [v.Watched(), v.Delayed()]
    return core.recorded(Header(trace_id, "purgatory", params, "kpurgatory.model", description), commands)


def describe_run(run: Run) -> str:
    from kpurgatory.conformance.traces.replay import format_command

    return f"purge_interval={run.purge_interval}: " + "; ".join(format_command(c) for c in to_vocabulary(run.commands))


# ---------------------------------------------------------------------------------------------------------------
# Obligations
# ---------------------------------------------------------------------------------------------------------------

BMC_DEPTH = 10
#: the obligation that owns the shared invariant; every property obligation read from it rests on it
INVARIANT = "purgatory.invariant"
#: how deep the first violation of any clause is searched for (by purgatory.invariant and each clause's teeth): a
#: search that finds nothing is exhaustive to its depth, about 12 s of CPU at 3 and 240 s at 10
TEETH_DEPTH = 3
DOMAIN = (f"{OPS} ops, {KEYS} keys, all 8 commands, any purge interval, tick 1, any delays; inductive invariant "
          f"(unbounded depth); if it fails, BMC to {TEETH_DEPTH} commands (delays <= 4, purge interval 0..2) for a "
          f"run (to {BMC_DEPTH} on the mutant)")


def invariant_is_inductive(mutants: frozenset = frozenset()) -> tuple[str, str, float]:
    """Whether the shared invariant is inductive (with every step property as a goal), for the current shape."""
    return _invariant_is_inductive(mutants, SHAPE.ops, SHAPE.keys, SHAPE.tick, core.DEFAULT_RLIMIT)


@functools.cache
def _invariant_is_inductive(mutants: frozenset, ops: int, keys: int, tick: int, rlimit: int) -> tuple[str, str, float]:
    # keyed by the resource budget too: a result reached under another budget may differ
    start = time.perf_counter()
    status, part = inductive(invariant, mutants=mutants,
                             step_goal=lambda s, c, n, o: And(*step_properties(s, c, n, o).values()))
    return status, part, time.perf_counter() - start


def bmc_and_induction(name: str, mutant: str | None = None) -> Outcome:
    """Property ``name`` of the shared invariant. On the spec itself it is read from the invariant, which
    purgatory.invariant decides once for every property (when the runner has not decided it, it is decided here).
    On the spec with ``mutant`` applied: induction, and if that fails, BMC to ``BMC_DEPTH`` commands for a
    violation of this property (refuted, with the run)."""
    if mutant is None:
        held = core.premise(INVARIANT) or the_invariant()
        if held.status == PROVED:
            return Outcome(PROVED, f"rests on {INVARIANT}", f"read from {INVARIANT}, which is proved")
        return core.rests_on_failed(core.REGISTRY[obligation_of(name)], held)
    mutants = frozenset({mutant})
    ind, part, ind_time = invariant_is_inductive(mutants)
    if ind == PROVED:
        return Outcome(PROVED, "induction", f"the invariant is inductive and implies it ({ind_time:.1f}s)")
    state_bad = (lambda s: Not(properties(s)[name])) if name in property_names(CLAUSES) else None
    step_bad = ((lambda s, c, n, o: Not(step_properties(s, c, n, o)[name])) if name in property_names(STEP_CLAUSES)
                else None)
    status, run, depth = bmc(state_bad, BMC_DEPTH, mutants=mutants, step_bad=step_bad)
    if status == REFUTED:
        return Outcome(REFUTED, f"induction fails ({part}); BMC", f"violated after {depth} commands: "
                       f"{describe_run(run)}")
    if status != BOUND:
        return Outcome(status, f"BMC d={BMC_DEPTH}", f"BMC gave up at depth {depth}")
    return Outcome(ind, f"induction + BMC d={BMC_DEPTH}", f"the invariant is {ind} ({part}); no violation of this "
                   f"property within {BMC_DEPTH} commands")


def obligation_of(clause: str) -> str:
    """The obligation that states a clause's property: cleanup_check.completed_gone -> purgatory.cleanup.check."""
    return "purgatory." + clause.split(".")[0].replace("cleanup_", "cleanup.")


def mutant_of(name: str, mutated: bool, mutant: str) -> Outcome:
    return bmc_and_induction(name, mutant if mutated else None)


@obligation("purgatory.exactly_once", domain=DOMAIN, rests_on=INVARIANT, mutant=MUTANTS["force_without_cas"])
def exactly_once(mutated: bool = False) -> Outcome:
    """Every operation completes at most once, whichever route gets there first: onComplete runs exactly as often
    as the op is completed (0 or 1 times), and an op has a completion route exactly when it is completed. The single
    door is forceComplete's compare-and-set; together with purgatory.no_forgotten_op (every live op stays scheduled)
    this is exactly-once for every op that is not cancelled."""
    return mutant_of("exactly_once", mutated, "force_without_cas")


@obligation("purgatory.justified", domain=DOMAIN, rests_on=INVARIANT, cost=10, mutant=MUTANTS["expire_early"])
def justified(mutated: bool = False) -> Outcome:
    """An operation completes only when it is ready or expired (or forced by other code): one completed through a
    tryComplete (by watch, try or check) has its condition true — set_ready was seen or its ready_on-th try has
    happened — and one completed by the timer has a deadline at or before the clock. The condition is monotone, so
    this holds in every later state too."""
    return mutant_of("justified", mutated, "expire_early")


@obligation("purgatory.no_lost_wakeup", domain=DOMAIN, rests_on=INVARIANT, cost=20,
            mutant=MUTANTS["check_drops_live"])
def no_lost_wakeup(mutated: bool = False) -> Outcome:
    """No lost wakeup: an operation appended to key k's list stays on it until it completes or k is cancelled, so
    a check of k after the op's condition became true completes it. Stated as the state invariant "watched on k and
    not completed implies at least one entry in k's list" and as the step property "check(k) of a ready op watched
    on k completes it". The sequential model executes tryCompleteElseWatch atomically; the window between its first
    tryComplete and the watch is the business of interleaving.no_lost_wakeup."""
    return mutant_of("no_lost_wakeup", mutated, "check_drops_live")


@obligation("purgatory.tried_after_listing", domain=DOMAIN, rests_on=INVARIANT, cost=4,
            mutant=MUTANTS["no_second_try"])
def tried_after_listing(mutated: bool = False) -> Outcome:
    """Sequential half of the lost-wakeup argument: an operation that is on some watch list and not completed has
    had a tryComplete since it was last appended to its lists. tryCompleteElseWatch guarantees it with its second
    tryComplete, made after the appends; a check that leaves an op on the list has just tried it. So whatever made
    the condition true before the op was listed has been seen, and only later changes need a check — which finds
    the op on the list. A tryCompleteElseWatch without its second tryComplete violates it in one command (an op that
    becomes completable only at its second try is left waiting for its timeout)."""
    return mutant_of("tried_after_listing", mutated, "no_second_try")


@obligation("purgatory.counters", domain=DOMAIN, rests_on=INVARIANT, cost=4,
            mutant=MUTANTS["cancel_keeps_counter"])
def counters(mutated: bool = False) -> Outcome:
    """The counters are consistent: the task counter, kept incrementally the way Kafka's TimerTaskList keeps it
    (+1 on add, -1 on remove or expiry), equals the number of ops in the timer (numDelayed); the watch-entry counter
    kept the same way equals the entries in all lists (watched()); a completed op is never in the timer; and the
    estimate of operations is at least numDelayed, so est - numDelayed, the purge trigger, is never negative."""
    return mutant_of("counters", mutated, "cancel_keeps_counter")


@obligation("purgatory.no_forgotten_op", domain=DOMAIN, rests_on=INVARIANT,
            mutant=MUTANTS["expire_without_complete"])
def no_forgotten_op(mutated: bool = False) -> Outcome:
    """Every live operation is still scheduled: an op that was watched, is not completed and whose timer entry was
    not cancelled (by cancel or cancelForKey) is in the timer with a deadline after the clock, so it completes by
    its deadline at the latest. With exactly_once: every op that is not cancelled completes exactly once."""
    return mutant_of("no_forgotten_op", mutated, "expire_without_complete")


@obligation("purgatory.liveness", domain=DOMAIN, rests_on=INVARIANT, mutant=MUTANTS["expire_late"])
def liveness(mutated: bool = False) -> Outcome:
    """Every operation that is not cancelled completes once the clock passes its deadline: after an advance to a
    time at or after the deadline of an op that was watched and whose timer entry was not cancelled, the op is
    completed (by that advance's expiry if nothing completed it before). A step property of every advance, so it
    holds on every run, not just those BMC reaches."""
    return mutant_of("liveness", mutated, "expire_late")


@obligation("purgatory.cleanup.check", domain=DOMAIN, rests_on=INVARIANT,
            mutant=MUTANTS["check_keeps_completed"])
def cleanup_check(mutated: bool = False) -> Outcome:
    """Watcher cleanup by a check: after checkAndComplete(k) no operation that was already completed before the
    check has an entry left in k's list, and an operation the check completes has fewer entries there than before
    (the entry that completed it and the later ones go; with a key listed twice, an earlier entry that was tried
    and failed stays, as in Kafka, until a later check or purge)."""
    return mutant_of("cleanup_check", mutated, "check_keeps_completed")


@obligation("purgatory.cleanup.purge", domain=DOMAIN, rests_on=INVARIANT,
            mutant=MUTANTS["purge_keeps_completed"])
def cleanup_purge(mutated: bool = False) -> Outcome:
    """Watcher cleanup by the purge: right after an advance whose purge check fired, no completed operation has an
    entry in any watch list, whichever keys it was watched on and however many times, so the memory held by stale
    entries drops to nothing at every purge (what is left between purges is bounded by purgatory.memory.*)."""
    return mutant_of("cleanup_purge", mutated, "purge_keeps_completed")


@obligation("purgatory.cleanup.map", domain=DOMAIN, rests_on=INVARIANT,
            mutant=MUTANTS["keeps_emptied_list"])
def cleanup_map(mutated: bool = False) -> Outcome:
    """An emptied watch list leaves the map (the leak of KAFKA-2160, where emptied lists of ever-new keys piled up):
    in every state a key has a list in the watchers map exactly when that list has an entry. A check or a purge
    that empties a list removes the key; cancelForKey removes it whatever it held; a watch that appends creates it."""
    return mutant_of("cleanup_map", mutated, "keeps_emptied_list")


@obligation("purgatory.never_watched_again", domain=DOMAIN + "; the rules of Kafka >= 4.0.0", rests_on=INVARIANT,
            mutant=MUTANTS["watches_completed"])
def never_watched_again(mutated: bool = False) -> Outcome:
    """A completed operation is never watched again: no step adds an entry for a completed op to any key's list
    (a tryCompleteElseWatch of an op that is already completed, or completed by its own first try, lists it
    nowhere; it still counts toward the estimate). This is the rule from Kafka 4.0.0 on (model/releases.py, rule
    KAFKA-18027), which the model follows by default. The releases from 2.7.0 up to 4.0.0 appended a completed
    op to every key, stale at once, and only a later check or purge removed it: that rule is this obligation's
    mutant, refuted by a watch of an op that completed before (the model at such a release lists it again too)."""
    return mutant_of("never_watched_again", mutated, "watches_completed")


def rank(s: dict, o: int):
    """How long a live op may still wait: from the clock to the start of its deadline's tick (0 when not live)."""
    return If(live(s, o), tick_start(s[("exp", o)]) - s[("now",)], 0)


def fair_progress(s: dict, c: Cmd, n: dict, obs: Obs) -> object:
    """The ranking argument, per op: a live op's rank is at least 1; no step but a watch of that op raises it; every
    advance that moves the clock lowers it or ends the op's life; completion is for ever; an advance to the last
    live deadline or later leaves no op live."""
    parts = []
    fair = And(c.kind == ADVANCE, c.to > s[("now",)])
    for o in range(SHAPE.ops):
        rewatch = And(c.kind == WATCH, Eq(c.op, o))
        parts += [Implies(live(n, o), rank(n, o) >= 1),
                  Implies(Not(rewatch), rank(n, o) <= rank(s, o)),
                  Implies(And(fair, live(s, o)), Or(Not(live(n, o)), rank(n, o) < rank(s, o))),
                  Implies(s[("completed", o)], n[("completed", o)])]
    last_deadline_passed = And(c.kind == ADVANCE, *[Implies(live(s, o), s[("exp", o)] <= c.to)
                                                    for o in range(SHAPE.ops)])
    parts.append(Implies(last_deadline_passed, And(*[Not(live(n, o)) for o in range(SHAPE.ops)])))
    return And(*parts)


def response_bound(s: dict, fairs: dict, budget: dict) -> object:
    """The bounded-response invariant, per op: while live, the fair advances since its last watch plus its rank are
    at most the delay it was last watched with."""
    return And(*[Implies(live(s, o), rank(s, o) + fairs[o] <= budget[o]) for o in range(SHAPE.ops)])


def bounded_response(mutants: frozenset = frozenset()) -> tuple[str, str]:
    """Is `response_bound` inductive over step() (with the shared invariant), and does it, with the invariant,
    give: a live op has had fewer fair advances since its last watch than the delay it was watched with? Two ghost
    counters per op: ``fairs`` (advances that moved the clock since its last watch; reset by a watch of it) and
    ``budget`` (its delay, set by a watch of it)."""
    s, c = symbolic_state("s"), symbolic_cmd("c")
    n, _ = step(s, c, mutants)
    fairs = {o: z3.Int(f"fairs.{o}@s") for o in range(SHAPE.ops)}
    budget = {o: z3.Int(f"budget.{o}@s") for o in range(SHAPE.ops)}
    fair = And(c.kind == ADVANCE, c.to > s[("now",)])
    watched = {o: And(c.kind == WATCH, Eq(c.op, o)) for o in range(SHAPE.ops)}
    fairs_n = {o: If(watched[o], 0, fairs[o] + I(fair)) for o in range(SHAPE.ops)}
    budget_n = {o: If(watched[o], n[("delay", o)], budget[o]) for o in range(SHAPE.ops)}
    initially = initial_state(z3.Int("P0"))
    checks = (("initiation", [initially[("P",)] >= 0], response_bound(initially, {o: 0 for o in fairs},
                                                                        {o: 0 for o in budget})),
              ("consecution", [invariant(s), cmd_domain(s, c, ALL_KINDS), response_bound(s, fairs, budget)],
               response_bound(n, fairs_n, budget_n)),
              ("conclusion", [invariant(s), response_bound(s, fairs, budget)],
               And(*[Implies(live(s, o), fairs[o] < budget[o]) for o in range(SHAPE.ops)])))
    for part, hypotheses, goal in checks:
        answer = core.prove(hypotheses, goal)
        if answer.status != PROVED:
            return answer.status, part
    return PROVED, ""


@obligation("purgatory.liveness.fair", domain=DOMAIN + "; fairness: the reaper's advances move the clock forward "
                                                       "infinitely often, each op is watched finitely often",
            rests_on=INVARIANT, mutant=MUTANTS["check_rearms_timer"])
def liveness_fair(mutated: bool = False) -> Outcome:
    """Liveness under fairness: every operation that is not cancelled eventually completes, provided the reaper
    keeps advancing the clock (infinitely many advances to a later time) and the op is watched only finitely often
    (each watch of a live op re-arms its timer, as in Kafka). Proved in two parts, each by z3 for any run length.
    The ranking step: the rank of a live op is the time from the clock to the start of its deadline's tick; in
    every state satisfying the invariant a live op has rank at least 1, no step but a watch of that op raises its
    rank, every advance that moves the clock lowers it or ends the op's life (it completes, or is cancelled), and a
    completion is never undone. The end of the argument, as a bounded response: with two ghost counters per op,
    the advances that moved the clock since its last watch and the delay it was last watched with, "while live,
    rank + advances <= delay" holds initially and is preserved by every step (induction), and with the invariant
    it gives: a live op has had fewer such advances since its last watch than its delay. So after its last watch,
    an op watched with a finite delay d is no longer live once the clock has moved d times — it completed (by
    expiry at the latest) unless it was cancelled — and fairness supplies those d advances. Without a lasso: from
    any reachable state, one advance to the last live deadline or later leaves no op live."""
    outcome = bmc_then_invariant(invariant, fair_progress, "check_rearms_timer" if mutated else None)
    if outcome.status != PROVED:
        return outcome
    status, part = bounded_response(frozenset({"check_rearms_timer"}) if mutated else frozenset())
    if status != PROVED:
        return Outcome(NOT_INDUCTIVE if status == REFUTED else status, "induction (bounded response)",
                       f"the ranking step is proved; the bounded response fails at its {part}")
    return Outcome(PROVED, "induction (ranking step + bounded response)",
                   "the ranking step and the bounded response (initiation, consecution, conclusion) are proved")


# --- beyond the bound --------------------------------------------------------------------------------------------

#: the per-operation properties: each talks about one op (and its keys) only
PER_OP = ("exactly_once", "justified", "no_lost_wakeup", "no_forgotten_op", "tried_after_listing")
PER_OP_STEPS = ("no_lost_wakeup", "cleanup_check", "cleanup_purge", "liveness", "never_watched_again")
SCALE_OPS, SCALE_KEYS = 6, 4


def per_op_invariant(s: dict) -> object:
    """The per-op properties, with the one per-op fact of purgatory.counters: a completed op is not in the timer."""
    not_timed = [Implies(s[("completed", o)], Not(s[("in_timer", o)])) for o in range(SHAPE.ops)]
    return And(auxiliary(s), *[properties(s)[name] for name in PER_OP], *not_timed)


@obligation("purgatory.any_number_of_ops_and_keys", cost=3, mutant=MUTANTS["no_second_try"],
            domain="any number of operations and keys: one tracked op and one tracked key; the other ops abstracted "
                   "(any purge decision at any advance), the other keys as one (a check or cancelForKey of one of "
                   "them visits any number of the op's entries there); any key multiplicities, all 8 commands, any "
                   "delays; induction. Every bigger purgatory projects onto this system by purgatory.projection",
            bound=Bound("induction", "any number of ops and keys, through one tracked op and key (purgatory.projection); "
                        "any key multiplicities; all 8 commands; any delays; run length (induction)", "-"))
def any_number_of_ops_and_keys(mutated: bool = False) -> Outcome:
    """The per-operation properties hold for any number of operations and keys. Every transition treats each op
    on its own — a watch, try, force or cancel touches only its op; a check or cancelForKey walks one key's entries
    op by op; an advance expires each op on its own deadline — except the purge check, whose outcome depends on the
    other ops through the estimate and numDelayed, and which then removes each op's entries only if that op is
    completed. So the projection of any run with N ops onto one of them is a run of a one-op purgatory in which the
    purge check may fire or not at any advance. Keys are alike too, and the per-key properties speak of one key at
    a time: project the run further onto one tracked key and lump every other key into one, of which a check or
    cancelForKey (of the one other key it names) visits any number of the op's entries there, from none to all; a
    watch lists the op any number of times on the tracked key and on the others. z3 proves, for that system of one
    op and one key plus the rest, with the purge decision free, that the invariant of exactly_once, justified,
    no_lost_wakeup, no_forgotten_op and tried_after_listing is inductive and implies the step properties
    no_lost_wakeup, cleanup.check, cleanup.purge, liveness and never_watched_again for the tracked key (and
    cleanup.purge for the rest): since the tracked op and key are any op and key, they hold for every op and key of
    a purgatory of any size. That the projection of a bigger purgatory's step is a step of this system is
    purgatory.projection.
    (The counting properties relate all ops and keys; they are checked at the largest bound in
    purgatory.counting_at_scale.)"""
    return one_op_one_key("no_second_try" if mutated else None)


def one_op_one_key(mutant: str | None) -> Outcome:
    """purgatory.any_number_of_ops_and_keys on the spec with ``mutant`` applied if given."""
    mutants = frozenset({OTHERS_ABSTRACTED, *([mutant] if mutant else [])})
    step_goal = lambda s, c, n, o: And(*[step_properties(s, c, n, o)[name] for name in PER_OP_STEPS])  # noqa: E731
    with bounded(1, 2, rest=True):
        status, part = inductive(per_op_invariant, mutants=mutants, step_goal=step_goal)
        if status == PROVED:
            return Outcome(PROVED, "induction (1 op, 1 key + the rest, purge free)",
                           "inductive; implies the step properties")
        found, run, depth = bmc(lambda s: Not(per_op_invariant(s)), 4, mutants=mutants,
                                step_bad=lambda s, c, n, o: Not(step_goal(s, c, n, o)))
        if found == REFUTED:
            return Outcome(REFUTED, "BMC d=4 (1 op, 1 key + the rest, purge free)", f"after {depth} commands: "
                           f"{describe_run(run)}")
        return Outcome(status, "induction + BMC d=4", f"{part} fails; no violation within 4 commands")


@obligation("purgatory.counting_at_scale", cost=40, mutant=MUTANTS["cancel_keeps_counter"],
            domain=f"{SCALE_OPS} ops, {SCALE_KEYS} keys, all 8 commands, any purge interval and delays; induction "
                   f"(if it "
                   f"fails, BMC to 3 for a run)")
def counting_at_scale(mutated: bool = False) -> Outcome:
    """The whole invariant — including the counting properties, which relate the ops to one another: the task and
    watch-entry counters against numDelayed and watched(), the estimate against numDelayed, and the watchers map's
    keys against the non-empty lists — is inductive, with every step property as a goal, at 6 operations and 4 keys.
    Measured in z3's resource units (the same on any machine) and seconds on this 2-core machine at load 7-9: 6 x 3
    takes 3.8e7 (11 s), 6 x 4 6.1e7 (20 s), 7 x 3 9.3e7 (30 s), and 8 x 3 uses up the budget of 3e8 (77 s); 6 x 4 is
    kept, the largest shape that proves well under a minute without making `kpurgatory prove` slow.
    The per-op properties hold for any number of ops and keys by purgatory.any_number_of_ops_and_keys."""
    mutants = frozenset({"cancel_keeps_counter"}) if mutated else frozenset()
    with bounded(SCALE_OPS, SCALE_KEYS):
        ind, part, seconds = invariant_is_inductive(mutants)
        if ind == PROVED:
            return Outcome(PROVED, f"induction ({SCALE_OPS} x {SCALE_KEYS})", f"inductive ({seconds:.1f}s)")
        found, run, depth = bmc(lambda s: Not(properties(s)["counters"]), 3, mutants=mutants)
        if found == REFUTED:
            return Outcome(REFUTED, "BMC d=3", f"after {depth} commands: {describe_run(run)}")
        return Outcome(ind, "induction + BMC d=3", f"{part} fails; no violation within 3 commands")


TICKS = (2, 10)


@obligation("purgatory.coarse_tick", cost=20, mutant=MUTANTS["expire_early"],
            domain=f"{OPS} ops, {KEYS} keys, timer tick in {TICKS}, delays >= one tick (never refused on add), all 8 "
                   f"commands, any purge interval; induction")
def coarse_tick(mutated: bool = False) -> Outcome:
    """With a tick above 1 ms the timer may fire an op early, within Kafka's declared window: from the start of the
    tick that contains its deadline. The whole invariant — justified completion (an expired op's tick has started:
    floor(deadline / tick) * tick <= now), no forgotten op (a live op's tick has not started), liveness (an advance to
    its deadline or later completes it), and every other property — is inductive with the timer firing at the start
    of the deadline's tick, for each stated tick. Delays are at least one tick, so the wheel never refuses the add
    and runs nothing during a watch."""
    mutants = frozenset({"expire_early"}) if mutated else frozenset()
    for tick in TICKS:
        with bounded(OPS, KEYS, tick):
            ind, part, seconds = invariant_is_inductive(mutants)
            if ind == PROVED:
                continue
            found, run, depth = bmc(lambda s: Not(properties(s)["justified"]), 4, mutants=mutants)
            if found == REFUTED:
                return Outcome(REFUTED, f"BMC d=4, tick {tick}", f"after {depth} commands: {describe_run(run)}")
            return Outcome(ind, f"induction + BMC d=4, tick {tick}", f"{part} fails; no violation within 4 commands")
    return Outcome(PROVED, "induction", f"ticks {', '.join(map(str, TICKS))}")


# --- purge rule and memory ---------------------------------------------------------------------------------------


def gone_since_purge(s: dict, obs: Obs):
    """The purge rule's specification, in terms of the registrations since the last purge rather than Kafka's
    estimate: every watch call since then that got past its first tryComplete, and every timer entry pending at the
    last purge; minus those still pending after this advance's expiries (the entry a call added, if it is still in
    the timer; the last purge's entries still in the timer)."""
    still_new = Sum(I(And(s[("entry_new", o)], Not(obs.expired[o]))) for o in range(SHAPE.ops))
    still_old = Sum(I(And(s[("entry_old", o)], Not(obs.expired[o]))) for o in range(SHAPE.ops))
    return Sum(s[("calls", o)] for o in range(SHAPE.ops)) + s[("at_purge",)] - still_new - still_old


def purge_rule(s, c, n, obs):
    return Implies(c.kind == ADVANCE, Eq(obs.purged, gone_since_purge(s, obs) > s[("P",)]))


#: How the ghost state of `gone_since_purge` relates to the timer, as named clauses: the estimate is the last purge's
#: count plus the watches since; an op in the timer holds exactly one entry, from before or since the last purge.
#: Each is needed (purgatory.teeth.registrations.*).
REGISTRATIONS = {
    "estimate_split": lambda s: Eq(s[("est",)], s[("at_purge",)] + Sum(s[("calls", o)] for o in range(SHAPE.ops))),
    "one_entry": each_op(lambda s, o: Not(And(s[("entry_new", o)], s[("entry_old", o)]))),
    "entry_iff_timer": each_op(lambda s, o: Eq(s[("in_timer", o)], Or(s[("entry_new", o)], s[("entry_old", o)]))),
}


def registrations(s: dict) -> object:
    return And(*[clause(s) for clause in REGISTRATIONS.values()])


def bmc_then_invariant(inv, step_goal, mutant: str | None, kinds=ALL_KINDS, depth: int = 6) -> Outcome:
    """Induction on ``inv`` with ``step_goal`` (proved); if that fails, BMC to ``depth`` for a step violating
    ``step_goal`` (refuted, with the run) or none (not inductive). On the spec with ``mutant`` applied if given."""
    mutants = frozenset({mutant}) if mutant else frozenset()
    status, part = inductive(inv, mutants=mutants, kinds=kinds, step_goal=step_goal)
    if status == PROVED:
        return Outcome(PROVED, "induction", "inductive invariant, implies the step property")
    found, run, reached = bmc(None, depth, mutants=mutants, kinds=kinds,
                              step_bad=lambda s, c, n, o: Not(step_goal(s, c, n, o)))
    if found == REFUTED:
        return Outcome(REFUTED, f"BMC d={depth}", f"violated after {reached} commands: {describe_run(run)}")
    return Outcome(status, f"induction + BMC d={depth}", f"{part} fails; no violation within {depth} commands")


@obligation("purgatory.purge.threshold", domain=f"{OPS} ops, {KEYS} keys, all 8 commands, any purge interval and "
                                                  f"delays; induction (if it fails, BMC to 6 for a run)",
            rests_on=INVARIANT, mutant=MUTANTS["purge_ge"])
def purge_threshold(mutated: bool = False) -> Outcome:
    """The purge fires exactly when more than purgeInterval of the registrations made since the last purge are
    gone, stated without Kafka's estimate: count every tryCompleteElseWatch since the last purge that got past its
    first tryComplete, and every timer entry that was pending when the last purge ran; take away those still
    pending after this advance's expiries (the entry a counted watch added, the last purge's entries). At every
    advance a purge happens if and only if that count is strictly greater than purgeInterval (transcript 05: with
    interval 2 and 4 watched ops, 2 still pending does not purge and 1 does). Kafka decides with
    estimated - numDelayed; the obligation is that this estimate, reset to numDelayed at each purge, always equals
    the count, so a test with >= or a different counter (numDelayed read before the expiries, say) is refuted.
    Proved by induction on the shared invariant with the ghost state of the count (which op holds a timer entry
    from before or since the last purge, how many watches each op had since)."""
    return threshold_check("purge_ge" if mutated else None)


def threshold_check(mutant: str | None) -> Outcome:
    """purgatory.purge.threshold on the spec with ``mutant`` applied if given."""
    return bmc_then_invariant(lambda s: And(invariant(s), registrations(s)), purge_rule, mutant)


def bmc_advance_bad(bound_of):
    """Violation right after an advance: more stale ops than ``bound_of(state)``."""
    return lambda s, c, n, obs: And(c.kind == ADVANCE, stale_ops(n) > bound_of(n))


def memory_invariant_no_cancel(s):
    counted = Sum(I(And(s[("completed", o)], listed(s, o))) for o in range(SHAPE.ops))
    return And(invariant(s), s[("P",)] >= 0, counted <= s[("est",)] - delayed(s),
               *[Not(s[("dropped", o)]) for o in range(SHAPE.ops)])


def uncounted_listed(s):
    return Sum(I(And(s[("uncounted", o)], listed(s, o))) for o in range(SHAPE.ops))


def memory_invariant(s):
    stale_counted = Sum(I(And(s[("completed", o)], listed(s, o), Not(s[("uncounted", o)]))) for o in range(SHAPE.ops))
    live_out = Sum(I(And(listed(s, o), Not(s[("completed", o)]), Not(s[("in_timer", o)]), Not(s[("uncounted", o)])))
                   for o in range(SHAPE.ops))
    return And(invariant(s), s[("P",)] >= 0, stale_counted + live_out <= s[("est",)] - delayed(s))


@obligation("purgatory.memory.bound_without_cancel",
            domain=f"{OPS} ops, {KEYS} keys, commands without cancel/cancel_key, any purge interval; induction",
            mutant=MUTANTS["purge_keeps_completed"])
def memory_bound_without_cancel(mutated: bool = False) -> Outcome:
    """Without cancellation the memory held by completed-but-still-listed entries is bounded by the purge interval:
    the number of such stale operations never exceeds estimated - numDelayed (every op that becomes stale has left
    the timer or was counted by a watch since the last purge), and right after every advance — where the purge
    check has either fired (no stale op left) or found estimated - numDelayed <= purgeInterval — there are at most
    purgeInterval stale operations. The memory bound is therefore purgeInterval * m entries, where m is the largest
    number of entries one op holds (its keys per watch, duplicates included, times its watches)."""
    return bmc_then_invariant(memory_invariant_no_cancel,
                              lambda s, c, n, o: Implies(c.kind == ADVANCE, stale_ops(n) <= n[("P",)]),
                              "purge_keeps_completed" if mutated else None, kinds=NO_CANCEL_KINDS)


@obligation("purgatory.memory.no_bound_with_cancel", kind="finding", expect=REFUTED,
            domain=f"{OPS} ops, {KEYS} keys, all commands, purge interval 0..{MAX_PURGE_INTERVAL}; BMC to 8")
def memory_no_bound_with_cancel() -> Outcome:
    """Claim: right after every advance at most purgeInterval operations are completed but still listed (the bound
    of purgatory.memory.bound_without_cancel). With cancellation z3 refutes it: an op cancelled while live leaves
    the timer, so it counts toward estimated - numDelayed and lets a purge fire; the purge resets the estimate to
    numDelayed but cannot remove the op, which is not completed; when the op completes later it becomes stale
    without being counted by the estimate again. Repeating this (P+1 cancellations per purge) accumulates any number
    of stale entries, invisible to the purge trigger, so no bound in terms of purgeInterval and keys per op holds.
    The true bound is purgatory.memory.true_bound."""
    status, run, depth = bmc(None, 8, step_bad=bmc_advance_bad(lambda s: s[("P",)]))
    if status != REFUTED:
        return Outcome(status, "BMC d=8", f"no counterexample within {depth}")
    trace = purgatory_trace("specs.purgatory.memory.no_bound_with_cancel", run,
                            "stale entries of ops cancelled before a purge are not counted by the purge estimate")
    family = memory_family_trace(FAMILY_SIZE)
    stale = family.steps[-1].observation.result
    return Outcome(REFUTED, "BMC d=8", f"after {depth} commands: {describe_run(run)}. Generalised (the z3 pattern "
                   f"with {FAMILY_SIZE} ops, purge interval 0): {stale} stale entries after the last advance.",
                   witness={"purge_interval": run.purge_interval, "depth": depth, "family_stale_entries": stale},
                   traces={"counterexample": trace, "family": family})


FAMILY_SIZE = 10


def memory_family_trace(size: int) -> Trace:
    """The counterexample's pattern for ``size`` ops with purge interval 0: watch each on (k0, k1); cancelForKey(k0)
    takes them all out of the timer; an advance purges (size - 0 > 0) but removes nothing and resets the estimate to
    0; forcing them all leaves ``size`` stale entries on k1 that the next advance does not purge (0 - 0 = 0)."""
    ops = [f"op{i}" for i in range(size)]
    commands: list[v.Command] = [v.Watch(op, ["k0", "k1"], 100) for op in ops]
    commands += [v.CancelKey("k0"), v.Advance(1)] + [v.Force(op) for op in ops] + [v.Advance(2), v.Watched()]
    params = v.Params(tick_ms=1, wheel_size=20, start_ms=0, purge_interval=0)
    return core.recorded(Header("specs.purgatory.memory.no_bound_with_cancel.family", "purgatory", params,
                                "kpurgatory.model", f"{size} stale entries survive the purge check with interval 0"),
                         commands)


@obligation("purgatory.memory.true_bound", domain=f"{OPS} ops, {KEYS} keys, all commands, any purge interval; "
                                                  "induction", mutant=MUTANTS["purge_keeps_completed"])
def memory_true_bound(mutated: bool = False) -> Outcome:
    """The true bound: call an op *uncounted* if it was listed, live and out of the timer when the last purge ran
    (the estimate forgot it). Then stale counted ops plus live listed ops out of the timer never exceed
    estimated - numDelayed, so right after every advance the stale operations number at most purgeInterval + U,
    where U is the number of uncounted ops still listed — at most the ops cancelled (cancel or cancelForKey on
    another key) but not completed before the last purge. Memory held by stale entries is at most
    m * (purgeInterval + U); U is bounded only by the application's use of cancel."""
    return bmc_then_invariant(memory_invariant, lambda s, c, n, o: Implies(
        c.kind == ADVANCE, stale_ops(n) <= n[("P",)] + uncounted_listed(n)),
        "purge_keeps_completed" if mutated else None)


# --- every clause has teeth --------------------------------------------------------------------------------------

#: the bug of the transition that each clause of a property alone catches (the mutants' keys)
PROPERTY_TEETH = {
    "exactly_once.once": "force_without_cas",
    "exactly_once.route": "force_without_route",
    "justified.condition": "try_ignores_condition",
    "justified.deadline": "expire_early",
    "no_lost_wakeup.listed": "check_drops_live",
    "counters.completed_not_timed": "force_keeps_timer",
    "counters.task_counter": "cancel_keeps_counter",
    "counters.entry_counter": "purge_keeps_entry_counter",
    "counters.estimate": "purge_zeroes_estimate",
    "no_forgotten_op.scheduled": "watch_skips_timer",
    "tried_after_listing.tried": "no_second_try",
    "cleanup_map.present": "keeps_emptied_list",
    "no_lost_wakeup.check_completes": "check_ignores_ready",
    "cleanup_check.completed_gone": "check_keeps_completed",
    "cleanup_check.completion_removes": "check_keeps_won_entries",
    "cleanup_purge.completed_gone": "purge_keeps_completed",
    "liveness.expired": "expiry_reschedules",
    "never_watched_again.no_new_entry": "watches_completed",
}
TEETH_DOMAIN = (f"{OPS} ops, {KEYS} keys, all 8 commands, purge interval 0..{MAX_PURGE_INTERVAL}, delays <= 4; BMC to "
                f"{TEETH_DEPTH} for the first violation of any clause")


def replay(run: Run, mutants: frozenset = frozenset()) -> list[tuple[dict, Cmd, dict, Obs]]:
    """The run's steps (s, c, n, obs), evaluated on Python values."""
    s, steps = initial_state(run.purge_interval), []
    for c in run.commands:
        n, obs = step(s, c, mutants)
        steps.append((s, c, n, obs))
        s = n
    return steps


def violated_at_end(run: Run, mutants: frozenset) -> set[str]:
    """The clauses the run's last step violates (state clauses in the state it reaches, step clauses of the step)."""
    s, c, n, obs = replay(run, mutants)[-1]
    return ({name for name, clause in CLAUSES.items() if not clause(n)}
            | {name for name, clause in STEP_CLAUSES.items() if not clause(s, c, n, obs)})


def first_violation(mutants: frozenset, depth: int = TEETH_DEPTH) -> tuple[str, Run | None, int]:
    """BMC for the first step that violates any clause of any property."""
    return bmc(lambda s: Not(And(*[clause(s) for clause in CLAUSES.values()])), depth, mutants=mutants,
               step_bad=lambda s, c, n, obs: Not(And(*[clause(s, c, n, obs) for clause in STEP_CLAUSES.values()])))


def departure(mutants: frozenset, depth: int = TEETH_DEPTH) -> tuple[str, Run | None, int]:
    """BMC for the first step where the transition with ``mutants`` departs from the spec's (another state or
    observation from the same state and command): the first behaviour the bug adds."""
    def departs(s, c, n, obs):
        right, right_obs = step(s, c)
        seen, meant = attrs.astuple(obs, recurse=False), attrs.astuple(right_obs, recurse=False)
        pairs = [*((n[key], right[key]) for key in n),
                 *((a, b) for x, y in zip(seen, meant) for a, b in (zip(x, y) if isinstance(x, tuple) else [(x, y)]))]
        return Not(And(*[Eq(a, b) for a, b in pairs]))

    return bmc(None, depth, mutants=mutants, step_bad=departs)


def clause_teeth(clause: str) -> Outcome:
    """purgatory.teeth.<clause>: the clause alone catches its bug (teeth.caught_alone)."""
    mutants = frozenset({PROPERTY_TEETH[clause]})
    description = f"the model here; with the bug ({MUTANTS[PROPERTY_TEETH[clause]]}) {clause} fails"
    return teeth.caught_alone(clause, [*CLAUSES, *STEP_CLAUSES], lambda: first_violation(mutants),
                              lambda run: violated_at_end(run, mutants), describe_run, f"BMC d<={TEETH_DEPTH}",
                              lambda run: {"counterexample": purgatory_trace(f"specs.purgatory.teeth.{clause}", run,
                                                                             description)},
                              lambda: departure(mutants))


def register_clause_teeth(clause: str, mutant: str) -> None:
    def check() -> Outcome:
        return clause_teeth(clause)

    check.__doc__ = (f"The clause {clause} has teeth: with the bug \"{MUTANTS[mutant]}\", the first step of a run "
                     f"that violates any clause of the invariant or of the step properties violates {clause} and no "
                     f"other. Deleting the clause makes this fail.")
    obligation(f"purgatory.teeth.{clause}", kind="mutant", expect=REFUTED, domain=TEETH_DOMAIN)(check)


for _clause, _mutant in PROPERTY_TEETH.items():
    register_clause_teeth(_clause, _mutant)


# --- the shared invariant ----------------------------------------------------------------------------------------


def state_name(key: tuple) -> str:
    """A state key as text: ("cnt", 0, 1) -> "cnt[k0][b]", ("tc", 2) -> "tc[c]", ("now",) -> "now"."""
    name, *index = key
    if name == "present":
        return f"present[{SHAPE.key_names[index[0]]}]"
    if len(index) == 2:
        return f"{name}[{SHAPE.key_names[index[0]]}][{SHAPE.op_names[index[1]]}]"
    return f"{name}[{SHAPE.op_names[index[0]]}]" if index else name


#: the fields of each command kind that a counterexample shows
COMMAND_FIELDS = {"watch": ("op", "delay", "ready_on"), "advance": ("to",), "check": ("key",),
                  "cancel_key": ("key",)}


def counterexample_to_induction(mutants: frozenset) -> dict:
    """A state satisfying the invariant, a command, and the clauses the step breaks (auxiliary facts and state
    clauses in the state reached, step clauses of the step), each state shown by what differs from the initial one."""
    s, c = symbolic_state("s"), symbolic_cmd("c")
    n, obs = step(s, c, mutants)
    clauses = {**{f"auxiliary.{name}": clause(n) for name, clause in AUXILIARY.items()},
               **{name: clause(n) for name, clause in CLAUSES.items()},
               **{name: clause(s, c, n, obs) for name, clause in STEP_CLAUSES.items()}}
    answer = core.find([invariant(s), cmd_domain(s, c, ALL_KINDS), Not(And(*clauses.values()))])
    if answer.status != REFUTED:
        return {}
    kind = KIND_NAMES[answer.model.eval(c.kind, model_completion=True).as_long()]
    command = {"kind": kind, **{f: getattr(c, f) for f in COMMAND_FIELDS.get(kind, ("op",))},
               **({f"mult[{SHAPE.key_names[k]}]": m for k, m in enumerate(c.mult)} if kind == "watch" else {})}
    return core.induction_counterexample(answer.model, s, command, n, clauses, state_name, usual=initial_state(0))


@obligation(INVARIANT, domain=DOMAIN.removesuffix(f" (to {BMC_DEPTH} on the mutant)"), cost=30,
            mutant=MUTANTS["expire_early"])
def the_invariant(mutated: bool = False) -> Outcome:
    """The purgatory's one invariant (the auxiliary facts and every clause of every state property) is inductive
    and implies every step property. Every property obligation of the purgatory rests on it and is read from it, so
    it is decided once: when it fails, this obligation shows one counterexample to induction (a state satisfying
    it, a command, the clauses the step breaks) and searches from the initial state for a run whose last step
    violates a clause of a property (refuted, with that run and the clauses it breaks); its dependants only point
    here. The search is shallow on purpose: a search that finds nothing is exhaustive to its depth, and its cost
    grows steeply with it."""
    mutants = frozenset({"expire_early"}) if mutated else frozenset()
    status, part, seconds = invariant_is_inductive(mutants)
    if status == PROVED:
        return Outcome(PROVED, "induction", f"inductive, and implies every step property ({seconds:.1f}s)")
    witness = counterexample_to_induction(mutants) if status == NOT_INDUCTIVE else {}
    found, run, depth = first_violation(mutants, TEETH_DEPTH)
    if found == REFUTED:
        broken = ", ".join(sorted(violated_at_end(run, mutants)))
        return Outcome(REFUTED, f"induction fails ({part}); BMC", f"{broken} violated after {depth} commands: "
                       f"{describe_run(run)}", witness={**witness, "run": describe_run(run)},
                       traces={} if mutated else {"counterexample": purgatory_trace("specs." + INVARIANT, run,
                                                                                     f"violates {broken}")})
    if found != BOUND:
        return Outcome(found, f"BMC d={TEETH_DEPTH}", f"{part} fails; BMC gave up at depth {depth}", witness=witness)
    return Outcome(status, f"induction ({part}) + BMC d={TEETH_DEPTH}", f"{part} fails; no clause is violated "
                   f"within {TEETH_DEPTH} commands", witness=witness)


def support(group: str) -> tuple[dict, dict, object]:
    """A group of supporting facts: (the facts, the clauses they support, the step goal). The auxiliary facts
    support the properties and the step properties; the registrations support the purge rule on top of the whole
    invariant."""
    if group == "auxiliary":
        return AUXILIARY, CLAUSES, lambda s, c, n, obs: And(*[clause(s, c, n, obs) for clause in STEP_CLAUSES.values()])
    return REGISTRATIONS, {"invariant": invariant}, purge_rule


def support_needed(group: str) -> dict[str, tuple[str, str]]:
    """For each fact of the group: is the invariant without it still inductive (with the step goal)? One shared
    solver; one query per fact."""
    facts, supported, step_goal = support(group)
    s, c = symbolic_state("s"), symbolic_cmd("c")
    n, obs = step(s, c)
    goal = step_goal(s, c, n, obs)

    def without(name: str) -> tuple[object, object]:
        rest = [clause for other, clause in {**facts, **supported}.items() if other != name]
        return And(*[clause(s) for clause in rest]), And(*[clause(n) for clause in rest], goal)

    def explain(model: z3.ModelRef) -> str:
        kind = KIND_NAMES[model.eval(c.kind, model_completion=True).as_long()]
        broken = [name for name, clause in {**supported, **facts}.items()
                  if z3.is_false(model.eval(clause(n), model_completion=True))]
        if z3.is_false(model.eval(goal, model_completion=True)):
            broken.append("the step goal")
        return f"a state satisfying the rest steps by {kind} to one violating {', '.join(broken)}"

    return teeth.needed(facts, [cmd_domain(s, c, ALL_KINDS)], without, explain)


@functools.cache
def _support_needed(group: str, clauses: tuple, rlimit: int) -> dict[str, tuple[str, str]]:
    # keyed by the clauses themselves (a test replaces one) and the resource budget
    return support_needed(group)


def register_support_teeth(group: str, name: str, supports: str) -> None:
    def check() -> Outcome:
        clauses = tuple((*AUXILIARY.items(), *CLAUSES.items(), *STEP_CLAUSES.items(), *REGISTRATIONS.items()))
        return teeth.needed_outcome(name, _support_needed(group, clauses, core.DEFAULT_RLIMIT),
                                    f"consecution without the fact (one shared solver for all {group} facts)")

    check.__doc__ = (f"The {group} fact {name} is needed: the invariant without it is not inductive (some state "
                     f"satisfying the rest of it steps out of it, or violates the step goal), so deleting it makes "
                     f"{supports} fail.")
    obligation(f"purgatory.teeth.{group}.{name}", kind="mutant", expect=REFUTED,
               domain=f"{OPS} ops, {KEYS} keys, all 8 commands, any purge interval and delays; one consecution "
                      f"query")(check)


for _name in AUXILIARY:
    register_support_teeth("auxiliary", _name, f"{INVARIANT} and every obligation resting on it")
for _name in REGISTRATIONS:
    register_support_teeth("registrations", _name, "purgatory.purge.threshold")


# --- mutants -----------------------------------------------------------------------------------------------------


def purge_ge_counterexample() -> tuple[str, Run | None]:
    status, run, _ = bmc(None, 4, mutants=frozenset({"purge_ge"}), step_bad=lambda s, c, n, o: Not(purge_rule(s, c, n, o)))
    return status, run


@obligation("mutant.purgatory.purge_ge", kind="mutant", expect=REFUTED,
            domain="purgatory.purge.threshold on the spec with >= in the purge test; BMC to 4")
def mutant_purge_ge() -> Outcome:
    """Mutant of the purge rule: purge when estimated - numDelayed >= purgeInterval instead of >. z3 finds a reachable
    advance where the mutant purges although no more than purgeInterval operations have left the timer (with
    interval 0: a purge although nothing left at all). The trace records the model's observations, which contain no
    purge there; an implementation with the mutant reports a Purge event at that advance."""
    status, run = purge_ge_counterexample()
    if status != REFUTED:
        return Outcome(status, "BMC d=4", "mutant not refuted")
    trace = purgatory_trace("specs.mutant.purgatory.purge_ge", run,
                            "the model does not purge here; a purge test with >= would")
    return Outcome(REFUTED, "BMC d=4", describe_run(run), traces={"counterexample": trace})
