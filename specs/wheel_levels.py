"""The wheel for every tick, wheel size and number of levels: compositional timing, and the delay queue.

`wheel.timing.*` check the symbolic wheel for four fixed (tick, size, levels) shapes. The obligations here drop the
shape: tick ``u``, wheel size ``n``, clocks and expirations are z3 variables, and the number of levels is not
fixed at all. The proof is compositional:

1. *One level* (``wheel.levels.climb``): for a level with any tick ``t`` (a multiple of ``u``) and a clock ``ck``
   that is the level-1 clock ``c1`` rounded down along the chain, Kafka's add either places the entry — in a bucket
   ``b`` with ``c1 < b <= E < b + t``, a multiple of ``u`` — or hands it to the next level, which is again such a
   level (tick ``t*n``, clock ``ck`` rounded down to it) and does not refuse it. By induction over levels, an add
   that starts at level 1 ends, on whatever level, with a bucket that has the contract, for every number of levels.
2. *The composed wheel* (``wheel.levels.*``): one tracked entry over any number of levels, its insertion being
   any landing the level contract allows, its bucket released by the delay queue, the other entries' releases
   being clock moves to a time no later than now and than the entry's own bucket (the queue's order). Not early,
   not late, termination and conservation are inductive invariants of this system, for all u, n and times. (That
   other entries act on this one only through those clock moves is argued here, not proved: they share only the
   clocks, the queue's order and, in a shared bucket, its expiration, which wheel.placement.no_aliasing makes
   theirs too.)
3. *The delay queue* (``wheel.queue.requeue``): a bucket is offered only when setExpiration reports a change; a
   non-empty bucket is always queued under its current expiration, never twice, and a reused bucket is queued
   again.

Arithmetic is exact (the model's, model/timer.py); Java's wrapping is bounded by wheel.timing.java_longs and the
wheel.kafka.* findings. Every encoding uses `wheel.Arithmetic`, so the mutants of wheel.py apply here too.
"""

from __future__ import annotations

import time

import z3

from kpurgatory.model import vocabulary as v
from kpurgatory.model.timer import TaskCounter, TimerTaskList
from kpurgatory.specs.core import (NOT_INDUCTIVE, PROVED, REFUTED, Answer, Outcome, _answer, minimise, obligation,
                                   prove, solver, verdict)
from kpurgatory.specs.javalong import EXACT, Long, multiple_lemma
from kpurgatory.specs.wheel import (DROPS_REFUSED, KAFKA, REFUSES_EARLY, ROUNDS_UP, STALE_CLOCKS, Arithmetic,
                                    timer_trace)

METHOD = "z3 NIA, symbolic tick, size and levels (exact)"
LEVEL_DOMAIN = ("u >= 1, n >= 2, any number of levels (level k: tick u*n^(k-1)); clocks, expirations and times "
                "any non-negative integers, computed exactly (the model's arithmetic)")


#: the budget of each induction query (each proved one needs well under it): a broken wheel's query stops there and
#: the counterexample search takes over, instead of spending the default budget
QUERY_RLIMIT = 30_000_000


def prove_small(hypotheses, goal) -> Answer:
    s = solver()
    s.set("rlimit", QUERY_RLIMIT)
    s.add(*hypotheses, z3.Not(goal))
    return _answer(s)


def L(raw) -> Long:
    return Long(EXACT, raw)


def down(x, t):
    """x rounded down to a multiple of t (x, t >= 0 exact integers)."""
    return x - x % t


# ---------------------------------------------------------------------------------------------------------------
# One level, and induction over levels
# ---------------------------------------------------------------------------------------------------------------


def on_chain(u, c1, t, ck, E, m, q):
    """Level with tick t and clock ck is one that Kafka's add can reach from level 1 (clock c1) with E: t = m*u, ck
    = q*t within one tick below c1 (the chain's rounding), and E not refused there (E >= ck + t). m and q are the
    witnesses of the two divisibilities, which z3's nonlinear arithmetic does not find by itself."""
    return z3.And(m >= 1, t == m * u, q >= 0, ck == q * t, ck <= c1, c1 < ck + t, E >= ck + t)


# Facts of integer division the level proofs use, each proved by z3 on its own (``LEMMAS``) and instantiated.
def chain_mod(q, t, n):
    return z3.Implies(z3.And(q >= 0, t >= 1, n >= 1), (q * t) % (t * n) == (q % n) * t)


def floor_le(x, E, t):
    return z3.Implies(z3.And(t >= 1, x * t <= E), x <= E / t)


def mul_mono(x, y, t):
    return z3.Implies(z3.And(x <= y, t >= 1), x * t <= y * t)


def multiple(k, t):
    return z3.Implies(t >= 1, (k * t) % t == 0)


LEMMAS = {"chain_mod: (q*t) % (t*n) = (q % n)*t": chain_mod, "floor_le: x*t <= E implies x <= E/t": floor_le,
          "mul_mono: x <= y implies x*t <= y*t": mul_mono, "multiple: (k*t) % t = 0": multiple}


_LEMMA_RESULTS: list[tuple[str, str, float]] = []


def prove_lemmas() -> tuple[list[tuple[str, str, float]], bool]:
    """Prove `LEMMAS` (once per process) and return their results and whether all were proved."""
    if not _LEMMA_RESULTS:
        for name, lemma in LEMMAS.items():
            start = time.perf_counter()
            fresh = z3.Ints(" ".join(f"lemma.{i}" for i in range(lemma.__code__.co_argcount)))
            _LEMMA_RESULTS.append((name, prove([], lemma(*fresh)).status, time.perf_counter() - start))
    return list(_LEMMA_RESULTS), all(status == PROVED for _, status, _ in _LEMMA_RESULTS)


def landing(a: Arithmetic, u, n, t, ck, E, m, q):
    """Level (t, ck) places E: (whether, the bucket expiration, the lemma instances that prove its contract)."""
    b = a.place(L(E), L(t), L(n))[2].raw
    hints = [floor_le(q + 1, E, t), mul_mono(q + 1, E / t, t), multiple((E / t) * m, u), multiple(b / u, u)]
    return a.accepted(L(E), L(ck), L(t), L(n)), b, hints


def bucket_contract(u, c1, b, E):
    """What a placed entry's bucket guarantees: a multiple of u, after the level-1 clock, no later than E."""
    return z3.And(b % u == 0, c1 < b, b <= E)


@obligation("wheel.levels.climb", domain=LEVEL_DOMAIN + "; one add from level 1 at aligned clocks",
            mutant=ROUNDS_UP.bug)
def levels_climb(mutated: bool = False) -> Outcome:
    """Kafka's add climbs the levels correctly for every tick, wheel size and number of levels, by induction over
    levels. Base: level 1 (tick u, clock c1) is on the chain when it does not refuse the entry. Step: from a level
    on the chain (tick t a multiple of u, clock ck = c1 rounded down along the chain, ck <= c1 < ck + t, E >= ck +
    t) that neither places nor refuses the entry, the overflow level (tick t*n, clock ck rounded down to it) is on
    the chain again, its tick at least twice t, so the climb ends (the model's top level takes every E). Landing:
    a level on the chain that places the entry gives a bucket b, a multiple of u, with c1 < b <= E < b + t, so b
    is at most the start of E's tick; and no level on the chain refuses (only level 1 does)."""
    a = ROUNDS_UP if mutated else KAFKA
    u, n, c1, t, ck, E, m, q = z3.Ints("u n c1 t ck E m q")
    domain = [u >= 1, n >= 2, c1 >= 0, c1 % u == 0, E >= 0]
    chain = on_chain(u, c1, t, ck, E, m, q)
    base = z3.Implies(z3.Not(a.refused(L(E), L(c1), L(u), L(n))), on_chain(u, c1, u, c1, E, 1, c1 / u))
    up = a.overflow_tick(L(t), L(n)).raw
    placed, b, hints = landing(a, u, n, t, ck, E, m, q)
    handed_up = z3.And(z3.Not(placed), z3.Not(a.refused(L(E), L(ck), L(t), L(n))))
    step = z3.Implies(z3.And(chain, handed_up),
                      z3.And(on_chain(u, c1, up, down(ck, up), E, m * n, q / n), up >= 2 * t))
    lands = z3.Implies(z3.And(chain, placed), z3.And(bucket_contract(u, c1, b, E), E < b + t))
    never_refused = z3.Implies(chain, z3.Not(a.refused(L(E), L(ck), L(t), L(n))))
    lemmas, ok = prove_lemmas()
    names = dict(zip("u n c1 t ck E".split(), (u, n, c1, t, ck, E)))
    for part, goal, extra in (("base", base, [c1 == (c1 / u) * u]), ("step", step, [chain_mod(q, t, n)]),
                              ("landing", lands, hints), ("refusal", never_refused, [])):
        answer = prove(domain + extra, goal)
        if answer.status == REFUTED:
            return named_refutation(f"{part} fails", answer.model, names, lemmas)
        if answer.status != PROVED:
            return verdict(answer, METHOD, lemmas, detail=part)
    return verdict(answer, METHOD + ", induction over levels", lemmas, ok,
                   detail="base, step, landing and refusal proved")


def named_refutation(what: str, model, names: dict, lemmas=None, **extra) -> Outcome:
    """A refutation whose detail names every value of the counterexample."""
    values = {name: model.eval(x, model_completion=True).as_long() for name, x in names.items()}
    return Outcome(REFUTED, METHOD, f"{what}: " + ", ".join(f"{k}={x}" for k, x in values.items()),
                   witness=values, lemmas=lemmas or [], **extra)


# ---------------------------------------------------------------------------------------------------------------
# The composed wheel: one tracked entry over any number of levels
# ---------------------------------------------------------------------------------------------------------------

ADD, ADVANCE, RELEASE, OTHER = range(4)
COMMANDS = {ADD: "add", ADVANCE: "advance", RELEASE: "release", OTHER: "other release"}
STATE = ("now", "c1", "E", "b", "ran_at", "added", "ran", "at")
#: deep enough for the mutants' shortest runs: add, advance, release, release
LEVEL_BMC_DEPTH = 4


class LevelWheel:
    """Kafka's SystemTimer with tick u and n buckets per level (both symbolic) and as many levels as the entry
    needs, tracking one entry. The clocks of all levels are the level-1 clock c1 rounded down along the chain
    (wheel.clock.alignment_inductive), so c1 is the only clock in the state. One step is one command:

    ``add(delay)``       E = now + delay: refused by level 1 (runs now), or placed on a level on the chain
                         (`wheel.levels.climb`; the command names the level: t, ck and their witnesses m, q);
    ``advance(to)``      now = to; the drain loop's releases are the next steps;
    ``release``          the delay queue releases the entry's bucket (due: b <= now): the clocks advance to b, the
                         entry is re-inserted from level 1 (runs, or placed again);
    ``other release``    another bucket, with expiration x <= now, released before the entry's (x <= b while the
                         entry waits in the queue, which orders buckets by expiration): the clocks advance to x.

    The last is what other entries can do to this one (they share the clocks and the queue; an entry sharing its
    bucket has the same expiration, wheel.placement.no_aliasing)."""

    def __init__(self, arithmetic: Arithmetic = KAFKA):
        self.a = arithmetic
        self.u, self.n = z3.Ints("u n")

    def fresh(self, tag: str) -> dict:
        return {name: (z3.Bool if name in ("added", "ran", "at") else z3.Int)(f"{name}@{tag}") for name in STATE}

    def domain(self):
        return z3.And(self.u >= 1, self.n >= 2)

    def initial(self, s: dict):
        """A fresh wheel started at now: c1 = now rounded down to the tick, nothing added."""
        return z3.And(s["now"] >= 0, s["c1"] == down(s["now"], self.u), z3.Not(s["added"]), z3.Not(s["ran"]),
                      z3.Not(s["at"]))

    def command(self, tag: str) -> dict:
        return {name: z3.Int(f"{name}@{tag}") for name in ("kind", "delay", "to", "x", "t", "ck", "m", "q")}

    def insert(self, s: dict, c1, E, cmd: dict, when) -> tuple[dict, object, list]:
        """Kafka's add of E at clock c1 (when ``when``): (the entry's fields after it, the constraint that the
        command's level is where the climb lands, lemma instances)."""
        a, u, n = self.a, self.u, self.n
        refused = a.refused(L(E), L(c1), L(u), L(n))
        chain = on_chain(u, c1, cmd["t"], cmd["ck"], E, cmd["m"], cmd["q"])
        placed, b, hints = landing(a, u, n, cmd["t"], cmd["ck"], E, cmd["m"], cmd["q"])
        runs = z3.And(refused, a.runs_refused)
        out = {"ran": z3.If(when, runs, s["ran"]), "at": z3.If(when, z3.Not(refused), s["at"]),
               "b": z3.If(z3.And(when, z3.Not(refused)), b, s["b"]),
               "ran_at": z3.If(z3.And(when, runs), s["now"], s["ran_at"])}
        return out, z3.Implies(z3.And(when, z3.Not(refused)), z3.And(chain, placed)), hints

    def step(self, s: dict, cmd: dict, tag: str) -> tuple[dict, object, list]:
        """(next state, the command's well-formedness with the definitions of the new clock and expiration, lemma
        instances)."""
        a, u = self.a, self.u
        kind = cmd["kind"]
        pending = z3.And(s["added"], s["at"])
        n = dict(s)
        adding = z3.And(kind == ADD, z3.Not(s["added"]))
        releasing = kind == RELEASE
        moved_to = z3.If(releasing, s["b"], cmd["x"])
        moving = z3.Or(kind == OTHER, z3.And(releasing, a.advance_before_flush))
        # the new clock and expiration as constants: z3 sees each term once
        c1, E = z3.Int(f"c1.next@{tag}"), z3.Int(f"E.next@{tag}")
        defs = [c1 == z3.If(moving, a.advance_level(L(s["c1"]), L(u), L(moved_to)).raw, s["c1"]),
                E == z3.If(adding, s["now"] + cmd["delay"], s["E"])]
        n.update(now=z3.If(kind == ADVANCE, cmd["to"], s["now"]), c1=c1, E=E, added=z3.Or(s["added"], adding))
        placed, lands, hints = self.insert(n, c1, E, cmd, z3.Or(adding, releasing))
        n.update(placed)
        well_formed = z3.And(
            kind >= ADD, kind <= OTHER, cmd["delay"] >= 0, z3.Implies(kind == ADVANCE, cmd["to"] >= s["now"]),
            z3.Implies(kind == RELEASE, z3.And(pending, s["b"] <= s["now"])),
            z3.Implies(kind == OTHER, z3.And(cmd["x"] >= 0, cmd["x"] <= s["now"],
                                             z3.Implies(pending, cmd["x"] <= s["b"]))),
            lands, *defs)
        # multiples of u: the clocks and the bucket, and how two of them compare (see `multiple`, `mul_mono`)
        hints += [multiple_lemma(moved_to, u), s["c1"] == (s["c1"] / u) * u, s["b"] == (s["b"] / u) * u,
                  z3.Implies(c1 % u == 0, c1 == (c1 / u) * u), mul_mono(s["c1"] / u + 1, s["b"] / u, u),
                  mul_mono(c1 / u + 1, E / u, u), z3.Implies(n["b"] <= E, n["b"] / u <= E / u),
                  mul_mono(n["b"] / u, E / u, u), z3.Implies(n["b"] % u == 0, n["b"] == (n["b"] / u) * u),
                  mul_mono(c1 / u + 1, n["b"] / u, u)]
        return n, well_formed, hints

    def start_of_tick(self, E):
        """Kafka's declared window opens at the start of E's tick (and closes at E)."""
        return E - E % self.u

    def rank(self, s: dict):
        """0 once run; else how far the entry's bucket is from the start of its tick, plus one tick."""
        return z3.If(z3.And(s["added"], s["at"]), self.start_of_tick(s["E"]) - s["b"] + self.u, 0)

    def invariant(self, s: dict):
        """Clock aligned and not ahead of now; the entry in exactly one place once added, nowhere before; its bucket
        a multiple of the tick, not before the clock, no later than E; if it ran, not before its tick started."""
        u = self.u
        return z3.And(
            s["c1"] >= 0, s["c1"] % u == 0, s["c1"] <= s["now"],
            z3.Implies(z3.Not(s["added"]), z3.And(z3.Not(s["ran"]), z3.Not(s["at"]))),
            z3.Implies(s["added"], z3.And(s["ran"] != s["at"], s["E"] >= 0)),
            z3.Implies(s["at"], z3.And(s["b"] % u == 0, s["c1"] <= s["b"], s["b"] <= s["E"])),
            z3.Implies(s["ran"], s["ran_at"] >= self.start_of_tick(s["E"])))


def not_early(w: LevelWheel, s, cmd, n):
    """A run is not before the start of the entry's tick."""
    return z3.Implies(z3.And(n["ran"], z3.Not(s["ran"])), n["ran_at"] >= w.start_of_tick(n["E"]))


def not_late(w: LevelWheel, s, cmd, n):
    """Once now has reached the start of the entry's tick, a pending entry's bucket is due: the drain loop, which
    ends only when no queued bucket is due (wheel.queue.requeue: the entry's is queued), does not end before it
    has run."""
    return z3.Implies(z3.And(n["at"], n["now"] >= w.start_of_tick(n["E"])), n["b"] <= n["now"])


def terminates(w: LevelWheel, s, cmd, n):
    """Every release of the entry's bucket lowers its rank by at least one tick (rank >= 0), so one advance
    releases it at most (start of E's tick - b) / u + 1 times."""
    return z3.And(w.rank(n) >= 0, z3.Implies(cmd["kind"] == RELEASE, w.rank(n) <= w.rank(s) - w.u))


def conserved(w: LevelWheel, s, cmd, n):
    """An added entry is in exactly one place (a bucket, or run); one never added is nowhere."""
    return z3.If(n["added"], n["ran"] != n["at"], z3.And(z3.Not(n["ran"]), z3.Not(n["at"])))


def level_obligation(arithmetic: Arithmetic, prop, depth: int = LEVEL_BMC_DEPTH) -> Outcome:
    """``prop`` in every step of the composed wheel, by induction on `LevelWheel.invariant` (initiation,
    consecution, the step property). If a part fails, BMC from a fresh wheel to ``depth`` commands looks for a
    concrete run, minimised and written as a trace (refuted); without one the outcome is "not inductive"."""
    w = LevelWheel(arithmetic)
    lemmas, ok = prove_lemmas()
    s, cmd = w.fresh("s"), w.command("c")
    n, well_formed, hints = w.step(s, cmd, "c")
    hyps = [w.domain(), w.invariant(s), well_formed, *hints]
    # one query per command and conjunct: together they take seconds, as one query minutes
    queries = [("initiation", [w.domain(), w.initial(s), multiple_lemma(s["now"], w.u)], w.invariant(s))]
    queries += [(f"{part} after {name}", hyps + [cmd["kind"] == kind], goal) for kind, name in COMMANDS.items()
                for part, goals in (("consecution", w.invariant(n).children()), ("step property", [prop(w, s, cmd, n)]))
                for goal in goals]
    for part, hypotheses, goal in queries:
        answer = prove_small(hypotheses, goal)
        if answer.status != PROVED:  # refuted or undecided: a concrete run decides, if there is a short one
            run = bmc(w, prop, depth)
            if run is not None:
                return run
            if answer.status == REFUTED:
                return Outcome(NOT_INDUCTIVE, "induction", f"{part} fails from a state of the invariant, and BMC to "
                                                           f"{depth} found no run to it", lemmas=lemmas)
            return verdict(answer, "induction", lemmas, detail=part)
    return verdict(answer, "induction, symbolic u, n, levels", lemmas, ok)


#: the shapes the counterexample search tries, smallest first: with u and n constants every division is by a
#: constant, which z3 decides quickly (a symbolic u and n make the unrolled runs nonlinear)
SEARCH_SHAPES = tuple((u, n) for u in (1, 2, 3) for n in (2, 3))
#: times of the counterexample search: up to this many ticks (small runs are the readable ones)
SEARCH_TICKS = 64


def bmc(w: LevelWheel, prop, depth: int) -> Outcome | None:
    """A run from a fresh wheel to a violation of ``prop`` within ``depth`` commands, for the first of
    `SEARCH_SHAPES` that has one, with the smallest start, delays and advances (lexicographically), as a refutation
    with its trace; None if there is none."""
    for u, n in SEARCH_SHAPES:
        s = w.fresh("0")
        constraints = [w.u == u, w.n == n, w.initial(s)]
        commands, states = [], [s]
        for i in range(depth):
            cmd = w.command(str(i))
            nxt, well_formed, _ = w.step(s, cmd, str(i))
            fresh = w.fresh(str(i + 1))
            constraints += [well_formed, *[fresh[key] == nxt[key] for key in fresh],
                            *[z3.And(x >= 0, x <= SEARCH_TICKS * u) for x in (cmd["delay"], cmd["to"], s["now"])]]
            commands.append(cmd)
            states.append(fresh)
            bad = z3.Not(prop(w, s, cmd, fresh))
            objectives = [states[0]["now"]] + [x for c in commands for x in (c["delay"], c["to"], c["x"])]
            answer = minimise(constraints + [bad], objectives)
            if answer.status == REFUTED:
                return level_run(w, answer.model, commands, states, i + 1)
            constraints.append(z3.Not(bad))
            s = fresh
    return None


def level_run(w: LevelWheel, model, commands: list[dict], states: list[dict], steps: int) -> Outcome:
    """The BMC run as named values, a readable line and a trace of the model's commands (add and advance; the
    releases happen inside the advance before them)."""
    def value(x):
        return model.eval(x, model_completion=True)

    def where(state) -> str:
        if z3.is_true(value(state["ran"])):
            return f"ran at {value(state['ran_at'])}"
        return f"in bucket {value(state['b'])}" if z3.is_true(value(state["at"])) else "nowhere (lost)"

    u, n, start = (value(x).as_long() for x in (w.u, w.n, states[0]["now"]))
    run, trace_commands = [], []
    for cmd, before, after in zip(commands[:steps], states, states[1:]):
        kind = value(cmd["kind"]).as_long()
        if kind == ADD:
            delay = value(cmd["delay"]).as_long()
            run.append(f"add(delay={delay}) -> E={value(after['E'])}, {where(after)}")
            trace_commands.append(v.TimerAdd("t", delay))
        elif kind == ADVANCE:
            to = value(cmd["to"]).as_long()
            run.append(f"advance({to})")
            trace_commands.append(v.Advance(to))
        else:
            what = "release of its bucket " + str(value(before["b"])) if kind == RELEASE else \
                f"other bucket {value(cmd['x'])} released"
            run.append(f"{what} (clock {value(before['c1'])} -> {value(after['c1'])}) -> {where(after)}")
    text = f"tick {u}, wheel {n}, start {start}: " + "; ".join(run)
    trace = timer_trace("specs.wheel.levels", v.Params(tick_ms=u, wheel_size=n, start_ms=start),
                        [*trace_commands, v.Size()], f"z3 (BMC, minimised): {text}. Replayed: the model's behaviour "
                                                     f"on the same commands.")
    return Outcome(REFUTED, f"BMC d={steps}, minimised", text,
                   witness={"tick_ms": u, "wheel_size": n, "start_ms": start, "run": run},
                   traces={"counterexample": trace})


@obligation("wheel.levels.not_early", domain=LEVEL_DOMAIN + f"; BMC to {LEVEL_BMC_DEPTH} commands + induction",
            cost=3, mutant=REFUSES_EARLY.bug)
def levels_not_early(mutated: bool = False) -> Outcome:
    """For every tick, wheel size and number of levels: nothing runs before the start of its expiration's tick,
    floor(E / u) * u — neither on add (level 1 refuses only E < c1 + u, and c1 <= now) nor when a released bucket
    re-inserts it (the clock has moved to the bucket, a multiple of u), whatever the other entries' releases did to
    the clock before."""
    return level_obligation(REFUSES_EARLY if mutated else KAFKA, not_early)


@obligation("wheel.levels.not_late", domain=LEVEL_DOMAIN + f"; BMC to {LEVEL_BMC_DEPTH} commands + induction",
            cost=3, mutant=ROUNDS_UP.bug)
def levels_not_late(mutated: bool = False) -> Outcome:
    """For every tick, wheel size and number of levels: a pending entry's bucket expiration is at most the start of
    its tick (every landing gives a multiple of u no later than E), so once now reaches that start its bucket is
    due and the advance's drain loop releases it, and the bucket it is re-inserted into, until it runs — nothing is
    pending after an advance to the start of its tick or later."""
    return level_obligation(ROUNDS_UP if mutated else KAFKA, not_late)


@obligation("wheel.levels.terminates", domain=LEVEL_DOMAIN + f"; BMC to {LEVEL_BMC_DEPTH} commands + induction",
            cost=3, mutant=STALE_CLOCKS.bug)
def levels_terminates(mutated: bool = False) -> Outcome:
    """For every tick, wheel size and number of levels, an advance terminates: each release of the entry's bucket
    moves the clock to the bucket b and re-inserts the entry after it (b' > b, both multiples of u) or runs it, so
    its rank (the start of E's tick - b + u, 0 once run) falls by at least u and stays >= 0."""
    return level_obligation(STALE_CLOCKS if mutated else KAFKA, terminates)


@obligation("wheel.levels.conservation", domain=LEVEL_DOMAIN + f"; BMC to {LEVEL_BMC_DEPTH} commands + induction",
            cost=3, mutant=DROPS_REFUSED.bug)
def levels_conservation(mutated: bool = False) -> Outcome:
    """For every tick, wheel size and number of levels, entries are never lost or duplicated: after every add,
    advance and release an added entry is in exactly one place (one bucket, or run) and an entry never added is
    nowhere."""
    return level_obligation(DROPS_REFUSED if mutated else KAFKA, conserved)


# ---------------------------------------------------------------------------------------------------------------
# The delay queue's re-queue rule
# ---------------------------------------------------------------------------------------------------------------


class ComparesAfterSwap(TimerTaskList):
    """A bucket whose setExpiration compares after storing the new value, so it never reports a change."""

    def set_expiration(self, expiration_ms) -> bool:
        self.expiration_ms = expiration_ms
        return self.expiration_ms != expiration_ms


QUEUE_STATE = ("c", "x", "cnt", "queued", "key")
PLACE, CANCEL, POLL, MOVE = range(4)


def queue_step(bucket_class: type, s: dict, kind, y, m):
    """One command on one bucket (slot) and the delay queue, with the model's own TimerTaskList deciding what the
    bucket's expiration becomes and whether it is offered: place an entry with bucket expiration y; cancel one;
    poll the bucket (due: the clock moves to its key, the entries are flushed elsewhere); or another bucket's
    release moves the clock to m. Returns (next state, well-formedness)."""
    bucket = bucket_class(TaskCounter(), expiration_ms=s["x"])
    offered = bucket.set_expiration(y)
    after_place = bucket.expiration_ms
    bucket = bucket_class(TaskCounter(), expiration_ms=s["x"])
    bucket.flush()
    after_flush = bucket.expiration_ms
    placing, polling = kind == PLACE, kind == POLL
    offer = z3.And(placing, offered)
    n = {"x": z3.If(placing, after_place, z3.If(polling, after_flush, s["x"])),
         "cnt": z3.If(placing, s["cnt"] + 1, z3.If(kind == CANCEL, s["cnt"] - 1, z3.If(polling, 0, s["cnt"]))),
         "queued": z3.If(offer, s["queued"] + 1, z3.If(polling, s["queued"] - 1, s["queued"])),
         "key": z3.If(offer, y, s["key"]),
         "c": z3.If(polling, z3.If(s["key"] > s["c"], s["key"], s["c"]), z3.If(kind == MOVE, m, s["c"]))}
    well_formed = z3.And(
        kind >= PLACE, kind <= MOVE,
        # placement: the bucket expiration is after the clock (wheel.placement.bucket_expiration), and a bucket
        # whose expiration is not yet past receives only entries of that expiration (wheel.placement.no_aliasing)
        z3.Implies(placing, z3.And(y > s["c"], z3.Implies(s["x"] >= s["c"], y == s["x"]))),
        z3.Implies(kind == CANCEL, s["cnt"] >= 1),
        z3.Implies(polling, s["queued"] >= 1),
        # other buckets are released in expiration order: the clock passes this one's key only by polling it
        z3.Implies(kind == MOVE, z3.And(m >= s["c"], z3.Implies(s["queued"] >= 1, m <= s["key"]))))
    return n, well_formed


def queue_invariant(s: dict):
    """A bucket holding entries is queued; a queued bucket is queued once, under its current expiration, which is
    not past; an unqueued bucket holds no expiration in the future."""
    return z3.And(s["cnt"] >= 0, s["queued"] >= 0, s["queued"] <= 1, s["c"] >= 0,
                  z3.Implies(s["cnt"] >= 1, s["queued"] == 1),
                  z3.Implies(s["queued"] == 1, z3.And(s["key"] == s["x"], s["x"] >= s["c"])),
                  z3.Implies(s["queued"] == 0, s["x"] <= s["c"]))


@obligation("wheel.queue.requeue", domain="one bucket of any level and the delay queue; clock, expirations any "
                                          "integers >= -1; BMC to 4 commands (minimised) + inductive invariant",
            mutant="setExpiration compares after storing the new value (never reports a change)")
def queue_requeue(mutated: bool = False) -> Outcome:
    """The delay queue neither loses nor delays a bucket. A bucket is offered only when setExpiration reports that
    its expiration changed (the model's TimerTaskList decides, read here, not restated); it is flushed to -1 when
    released. Over every sequence of placements (bucket expirations after the clock, one per live rotation:
    placement.no_aliasing), cancellations, polls and other buckets' releases: a bucket that holds entries is in the
    queue, exactly once, under its current expiration, which is not in the past — so it is released when the clock
    reaches it, not later (lost) and not by a stale key (delayed or early); a bucket reused for a later rotation after
    its release is queued again; a re-used expiration (a cancelled bucket refilled) is not queued twice."""
    bucket_class = ComparesAfterSwap if mutated else TimerTaskList
    names = ("kind", "y", "m")
    s = {k: z3.Int(f"{k}@0") for k in QUEUE_STATE}
    constraints = [s["c"] >= 0, s["x"] == -1, s["cnt"] == 0, s["queued"] == 0]
    commands, states = [], [s]
    for i in range(4):
        cmd = [z3.Int(f"{k}@{i}") for k in names]
        n, well_formed = queue_step(bucket_class, s, *cmd)
        fresh = {k: z3.Int(f"{k}@{i + 1}") for k in QUEUE_STATE}
        constraints += [well_formed, *[fresh[k] == n[k] for k in QUEUE_STATE]]
        commands.append(cmd)
        states.append(fresh)
        answer = minimise(constraints + [z3.Not(queue_invariant(fresh))],
                          [states[0]["c"]] + [x for c in commands for x in c[1:]])
        if answer.status == REFUTED:
            return queue_run(answer.model, commands, states)
        s = fresh
    s = {k: z3.Int(f"{k}.s") for k in QUEUE_STATE}
    n, well_formed = queue_step(bucket_class, s, *[z3.Int(k) for k in names])
    return verdict(prove([queue_invariant(s), well_formed], queue_invariant(n)), "BMC d=4 + induction, z3 LIA")


def queue_run(model, commands, states) -> Outcome:
    def value(x):
        return model.eval(x, model_completion=True).as_long()

    words = {PLACE: "place(bucket expiration {y})", CANCEL: "cancel", POLL: "poll", MOVE: "clock moves to {m}"}
    steps = [words[value(k)].format(y=value(y), m=value(m)) + f" -> expiration {value(s['x'])}, entries "
             f"{value(s['cnt'])}, queued {value(s['queued'])}x" for (k, y, m), s in zip(commands, states[1:])]
    text = f"clock {value(states[0]['c'])}: " + "; ".join(steps)
    return Outcome(REFUTED, "BMC, minimised", text, witness={"run": steps})
