"""The hierarchical timing wheel: its arithmetic, proved over Java longs.

Notation (Kafka's, see model/timer.py): a level has tick ``T`` (level 1: ``u = tickMs``), ``n = wheelSize``
buckets, interval ``T*n`` and current time ``c``. An entry with expiration ``E`` is *refused* (run now) when
``E < c + T``, *placed* when ``E < c + T*n`` — virtual id ``v = E / T``, bucket index ``v % n``, bucket expiration
``b = v * T`` — and otherwise handed to the overflow level, whose tick is ``T*n`` and whose clock starts at ``c``
rounded down to it. Every operator below is Java's (`javalong.Long`): ``+ - *`` wrap, ``/`` truncates, ``%`` keeps
the dividend's sign.

The obligations come in the order of the brief: placement, refusal, overflow levels, cascading and timing; then the
places where Java's arithmetic itself overflows (findings, with the model's alternative proved); then a mutant.
Proofs run in the JINT encoding of the 64-bit semantics (see `javalong` for why), searches in QF_BV; every model z3
returns is re-evaluated with concrete Java arithmetic (`PY`) and, for the findings, run through `KafkaWheel`, a
small emulation of Kafka's wheel in Java arithmetic, so that the documented outcome is an execution, not a claim.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from typing import Callable

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header
from kpurgatory.model import vocabulary as v
from kpurgatory.specs.core import (BOUND, NOT_INDUCTIVE, PROVED, REFUTED, Lemma, Outcome, find, fresh_z3_context,
                                   induction_counterexample, minimise, model_step, obligation, prove, recorded,
                                   smallest, solver, undecided, verdict, with_lemmas)
from kpurgatory.specs.javalong import (BV, EXACT, INT_MAX, JINT, LONG_MAX, LONG_MIN, OPERATORS, PY, Backend,
                                       BVBackend, FloorRemainderBackend, JIntBackend, Long, PyBackend, SignedModuloBVBackend,
                                       definition_query, multiple_lemma, no_overflow_add, no_overflow_mul)

JAVA_DOMAIN = ("u>=1, 2<=n<=Int.MAX, u*n<=Long.MAX, c>=0, c%u==0, c+u*n<=Long.MAX "
               "(u: the level's tick, c: its clock)")


def ite(condition, a: Long, b: Long) -> Long:
    return Long(a.backend, z3.If(condition, a.raw, b.raw if isinstance(b, Long) else a.backend.const(b)))


def wraps(backend: Backend) -> bool:
    """Java encodings wrap; the model's exact arithmetic does not (then "no overflow" side conditions vanish)."""
    return backend is not EXACT


def level_domain(T: Long, n: Long, c: Long, *, top: bool = False):
    """A level with tick T, n buckets and clock c. Java levels (top=False) have a representable interval T*n and a
    window c + T*n that does not wrap; the model's top level (top=True) is the one whose interval reaches beyond
    Long.MAX (only meaningful in EXACT arithmetic)."""
    common = [T >= 1, n >= 2, n <= INT_MAX, c >= 0, (c % T).eq(0)]
    if top:
        return z3.And(*common, T <= LONG_MAX, c <= LONG_MAX, c + T * n > LONG_MAX)
    java = [no_overflow_mul(T, n), no_overflow_add(c, T * n)] if wraps(T.backend) else [T * n <= LONG_MAX]
    return z3.And(*common, *java)


def accepted(E: Long, c: Long, T: Long, n: Long):
    """Kafka's add places E on this level: not refused, inside the window."""
    return z3.And(z3.Not(E < c + T), E < c + T * n)


def place(E: Long, T: Long, n: Long) -> tuple[Long, Long, Long]:
    """Virtual id, bucket index and bucket expiration, as Kafka computes them."""
    vid = E / T
    return vid, vid % n, vid * T


def advance_level(c: Long, T: Long, x: Long) -> Long:
    """One level's advanceClock(x): move to the tick containing x if that is a later tick."""
    return ite(x >= c + T, x - x % T, c)


def overflow_tick(T: Long, n: Long) -> Long:
    """The tick of the level above: this level's interval."""
    return T * n


@attrs.frozen
class Arithmetic:
    """The subject of every wheel obligation: Kafka's placement, refusal, clocks and cascade (`KAFKA`), or a mutant
    that changes exactly one of them. Every obligation below calls these, never its own copy."""

    bug: str = ""
    accepted: Callable = accepted
    place: Callable = place
    advance_level: Callable = advance_level
    overflow_tick: Callable = overflow_tick
    #: a released bucket's entries are re-inserted after the clocks moved to its expiration (Kafka: advanceClock
    #: before flush)
    advance_before_flush: bool = True
    #: a re-inserted entry the finest level refuses is run (Kafka's flush hands it to the executor)
    runs_refused: bool = True
    #: the expiration E the wheel files an entry under, for deadline D added at A with level-1 clock c (Longs; Kafka:
    #: D itself), and what that guarantees, as the symbolic wheel's invariant states it (exact integers)
    schedule: Callable = lambda D, A, c, u: D
    scheduled: Callable = lambda E, D, A, u: E == D

    def refused(self, E: Long, c: Long, T: Long, n: Long):
        """Inside the window but not accepted: "already expired", run now."""
        return z3.And(z3.Not(self.accepted(E, c, T, n)), E < c + T * n)


KAFKA = Arithmetic()
#: mutants, one bug each
ACCEPTS_EXPIRED = Arithmetic("accepted() without the refusal test (E < c + T is placed too)",
                             accepted=lambda E, c, T, n: E < c + T * n)
REFUSES_EARLY = Arithmetic("accepted() refuses one tick early (E < c + 2T)",
                           accepted=lambda E, c, T, n: z3.And(z3.Not(E < c + T + T), E < c + T * n))
MISINDEXED = Arithmetic("place() takes the bucket index from the expiration, E % n, not the virtual id (E / T) % n",
                        place=lambda E, T, n: (E / T, E % n, (E / T) * T))
ROUNDS_UP = Arithmetic("place() rounds the bucket expiration up to the end of the tick",
                       place=lambda E, T, n: place((E + T - 1), T, n))
UNROUNDED_CLOCK = Arithmetic("advanceClock(x) sets the clock to x instead of x rounded down to the tick",
                             advance_level=lambda c, T, x: ite(x >= c + T, x, c))
FLAT_OVERFLOW = Arithmetic("the overflow level gets the same tick T instead of the interval T*n",
                           overflow_tick=lambda T, n: T)
STALE_CLOCKS = Arithmetic("a released bucket is flushed without first advancing the clocks to its expiration",
                          advance_before_flush=False)
DROPS_REFUSED = Arithmetic("flush drops a re-inserted entry that the finest level refuses instead of running it",
                           runs_refused=False)

#: the wheels behind the other declared firing windows: Kafka's wheel filing each entry under another expiration.
#: A slot wheel (kernel, Netty) expires a slot once the clock has left it: the end of the deadline's tick.
SLOT_WHEEL = Arithmetic(schedule=lambda D, A, c, u: D - D % u + u,
                        scheduled=lambda E, D, A, u: E == D - D % u + u)
#: A wheel that never runs an entry on add: one due within the current tick waits for the next one.
NEXT_TICK_WHEEL = Arithmetic(schedule=lambda D, A, c, u: ite(D < c + u, c + u, D),
                             scheduled=lambda E, D, A, u: z3.And(E >= D, E <= z3.If(D >= A + u, D, A + u),
                                                                 z3.Or(E == D, E % u == 0)))
SLOT_UNROUNDED = attrs.evolve(SLOT_WHEEL, bug="the slot wheel files an entry under its deadline, not the end of its "
                                              "tick", schedule=lambda D, A, c, u: D,
                              scheduled=lambda E, D, A, u: E == D)
NEXT_TICK_TWICE = attrs.evolve(NEXT_TICK_WHEEL, bug="an entry due within the current tick waits two ticks, not one",
                               schedule=lambda D, A, c, u: ite(D < c + u, c + u + u, D),
                               scheduled=lambda E, D, A, u: z3.And(E >= D, E <= z3.If(D >= A + u, D, A + u + u),
                                                                   z3.Or(E == D, E % u == 0)))


# ---------------------------------------------------------------------------------------------------------------
# Lemmas (small facts of integer division, each proved by z3 in the backend it is used in)
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class WheelLemmas:
    window: Lemma
    below: Lemma
    mono: Lemma
    residue: Lemma
    divides: Lemma
    floor_le: Lemma
    mul_mono: Lemma
    assoc: Lemma


def lemmas(backend: Backend, *, top: bool = False) -> WheelLemmas:
    tag = f"[{'exact-top' if top else 'java'}]"

    def window(E, c, u, n):
        return (z3.And(level_domain(u, n, c, top=top), accepted(E, c, u, n), E <= LONG_MAX),
                z3.And(E / u >= c / u + 1, E / u <= c / u + n - 1))

    def below(c2, vid, u):
        return (z3.And(u >= 1, c2 >= 0, (c2 % u).eq(0), vid >= 0, no_overflow_mul(vid, u), c2 < vid * u),
                c2 / u < vid)

    def mono(c, c2, u):
        return z3.And(u >= 1, c >= 0, c <= c2), c / u <= c2 / u

    def residue(x, y, m):
        return z3.And(x >= 0, y >= 0, m >= 1, x - y < m, y - x < m, (x % m).eq(y % m)), x.eq(y)

    def exact_quotient(b, T):
        return z3.And(b >= 0, T >= 1, (b % T).eq(0)), ((b / T) * T).eq(b)

    def assoc(q, t, n):
        return (z3.And(q >= 0, t >= 1, n >= 1, no_overflow_mul(t, n), no_overflow_mul(q, t * n)),
                (q * (t * n)).eq((q * n) * t))

    def multiple(k, t):
        return z3.And(k >= 0, t >= 1, no_overflow_mul(k, t)), ((k * t) % t).eq(0)

    def divides(b, t, n):
        return z3.And(b >= 0, t >= 1, n >= 1, no_overflow_mul(t, n), (b % (t * n)).eq(0)), (b % t).eq(0)

    def floor_le(x, E, u):
        return z3.And(u >= 1, x >= 0, E >= 0, no_overflow_mul(x, u), x * u <= E), x <= E / u

    def mul_mono(x, y, u):
        return z3.And(x >= 0, x <= y, u >= 1, no_overflow_mul(y, u)), x * u <= y * u

    L_exact = Lemma("exact_quotient" + tag, "a multiple of T is (b / T) * T", "b T", exact_quotient, backend)
    L_assoc = Lemma("assoc" + tag, "q*(t*n) = (q*n)*t when nothing wraps", "q t n", assoc, backend)
    L_multiple = Lemma("multiple" + tag, "(k*t) % t = 0", "k t", multiple, backend)
    return WheelLemmas(
        window=Lemma("window" + tag, "an accepted entry's virtual id lies strictly between c/T and c/T + n",
                     "E c u n", window, backend),
        below=Lemma("below" + tag, "an aligned clock before v*T is before tick v", "c2 vid u", below, backend),
        mono=Lemma("mono" + tag, "division by a positive tick is monotone on non-negative values", "c c2 u",
                   mono, backend),
        residue=Lemma("residue" + tag, "two naturals closer than m with equal residues mod m are equal", "x y m",
                      residue, backend),
        divides=Lemma("divides" + tag, "a multiple of t*n is a multiple of t", "b t n", divides, backend,
                      needs=(L_exact, L_assoc, L_multiple),
                      hints=lambda b, t, n: [L_exact(b, t * n), L_assoc(b / (t * n), t, n),
                                             L_multiple((b / (t * n)) * n, t)]),
        floor_le=Lemma("floor_le" + tag, "x*u <= E implies x <= E / u", "x E u", floor_le, backend),
        mul_mono=Lemma("mul_mono" + tag, "multiplying by a positive tick is monotone", "x y u", mul_mono, backend),
        assoc=L_assoc,
    )


# ---------------------------------------------------------------------------------------------------------------
# Java's long arithmetic: the proof encoding is Java's, the search encoding agrees on a sample
# ---------------------------------------------------------------------------------------------------------------


@obligation("java.integer_encoding", cost=2, domain="all pairs of 64-bit longs (b != 0 for / and %); + - * / % < <=",
            mutant="JINT's remainder with the divisor's sign (floor modulo) instead of the dividend's")
def integer_encoding(mutated: bool = False) -> Outcome:
    """The integer encoding of Java longs that every wheel proof runs in (JINT: z3 integers with explicit
    two's-complement wrapping) is Java's arithmetic: for every operator the obligations use (+ - * / % < <=) and
    every pair of longs, z3 proves that the JINT result meets Java's definition written as an integer
    specification (javalong.java_definition, from the JLS: the representable value congruent to the exact sum,
    difference or product modulo 2^64; the quotient truncated toward zero, with Long.MIN / -1 = Long.MIN; the
    remainder with the dividend's sign, smaller than the divisor in magnitude, differing from the dividend by a
    multiple of it). No sampling: one query per operator over all 2^128 operand pairs. The remainder's query uses
    one lemma of integer division (x - x % m is a multiple of m), proved first."""
    backend = FloorRemainderBackend() if mutated else JINT
    x, m = z3.Ints("lemma.x lemma.m")
    lemma = prove([], multiple_lemma(x, m))
    results = [("multiple (x - x % m is a multiple of m)", lemma.status, 0.0)]
    for operator in OPERATORS:
        answer = prove(*definition_query(backend, operator))
        if answer.status != PROVED:
            if answer.status == REFUTED:
                (a, b) = (answer.model.eval(z3.Int(f"{operator}.{name}"), model_completion=True).as_long()
                          for name in "ab")
                return Outcome(REFUTED, METHOD_JINT, f"{operator}: a={a}, b={b} breaks Java's definition",
                               witness={"operator": operator, "a": a, "b": b}, lemmas=results)
            return verdict(answer, METHOD_JINT, results)
    return verdict(answer, METHOD_JINT + " vs Java's definitions", results, lemma.status == PROVED,
                   detail=f"{len(OPERATORS)} operators meet Java's definitions for all operands")

BOUNDARY = [LONG_MIN, LONG_MIN + 1, -(2**32), -(2**31) - 1, -(2**31), -21, -2, -1, 0, 1, 2, 3, 20, 2**31 - 1, 2**31,
            2**32, 20**14, 20**15 % 2**63, LONG_MAX - 1, LONG_MAX]


def evaluate_operator(operator: str, width: int, pairs: list[tuple[int, int]], bv_backend: type = BVBackend
                      ) -> list[tuple[int, int]]:
    """The pairs on which the BV encoding, the JINT encoding (both evaluated by z3) and concrete Java differ."""
    bv, ji, py = bv_backend(width), JIntBackend(width), PyBackend(width)
    a, b = z3.BitVec("a", width), z3.BitVec("b", width)
    ai, bi = z3.Int("ai"), z3.Int("bi")
    apply = OPERATORS[operator]

    def raw(x):
        return x.raw if isinstance(x, Long) else x

    through_bv, through_int = raw(apply(Long(bv, a), Long(bv, b))), raw(apply(Long(ji, ai), Long(ji, bi)))
    wrong = []
    for x, y in pairs:
        if operator in "/%" and y == 0:
            continue
        rb = z3.simplify(z3.substitute(through_bv, (a, z3.BitVecVal(x, width)), (b, z3.BitVecVal(y, width))))
        ri = z3.simplify(z3.substitute(through_int, (ai, z3.IntVal(x)), (bi, z3.IntVal(y))))
        rp = raw(apply(Long(py, x), Long(py, y)))
        vb = rb.as_signed_long() if z3.is_bv_value(rb) else z3.is_true(rb)
        vi = ri.as_long() if z3.is_int_value(ri) else z3.is_true(ri)
        if not vb == vi == rp:
            wrong.append((x, y))
    return wrong


@obligation("java.encodings_agree", kind="support", expect=BOUND, cost=4,
            domain="width 4: all pairs; width 64: boundary values x boundary values + 300 random pairs per operator",
            mutant="the BV remainder as z3py's % (bvsmod, the divisor's sign)")
def encodings_agree(mutated: bool = False) -> Outcome:
    """The search encoding (64-bit bit-vectors, QF_BV: bvadd, bvsub, bvmul, bvsdiv, bvsrem, signed comparisons)
    agrees with the proof encoding (JINT, proved to be Java's by java.integer_encoding) and with concrete Java: for
    each of + - * / % < <=, both encodings, evaluated by z3, equal a concrete Java evaluation on every pair of a 4-bit
    width and on boundary and random pairs at width 64. This is a sample, not a proof (a z3 proof over all 64-bit
    pairs does not finish: converting a bit-vector to an integer is bit-blasted); it is enough because the BV
    encoding only finds models, and every model is re-evaluated in concrete Java arithmetic before it is reported."""
    bv_backend = SignedModuloBVBackend if mutated else BVBackend
    rng = random.Random(64)
    checked, wrong = 0, []
    small = [(x, y) for x in range(-8, 8) for y in range(-8, 8)]
    for operator in OPERATORS:
        wrong += [(operator, 4, p) for p in evaluate_operator(operator, 4, small, bv_backend)]
        pairs = [(x, y) for x in BOUNDARY for y in BOUNDARY]
        pairs += [(rng.randint(LONG_MIN, LONG_MAX), rng.randint(LONG_MIN, LONG_MAX)) for _ in range(150)]
        pairs += [(rng.randint(0, 2**40), rng.randint(1, 2**20)) for _ in range(150)]
        wrong += [(operator, 64, p) for p in evaluate_operator(operator, 64, pairs, bv_backend)]
        checked += len(small) + len(pairs)
    if wrong:
        return Outcome(REFUTED, "z3 simplify vs concrete Java", f"encodings differ on {wrong[:5]}",
                       witness={"differences": wrong[:20]})
    return Outcome(BOUND, "z3 simplify vs concrete Java", f"{checked} operator applications agree",
                   witness={"applications": checked})


# ---------------------------------------------------------------------------------------------------------------
# Placement
# ---------------------------------------------------------------------------------------------------------------

METHOD_JINT = "z3 NIA, Java longs (JINT)"
METHOD_EXACT = "z3 NIA, unbounded (model)"
METHOD_BV = "z3 QF_BV 64"


def placement_setting(backend: Backend, *, top: bool = False, arithmetic: Arithmetic = KAFKA):
    (u, n, c, E), ranges = backend.longs("u n c E")
    hyps = [ranges, level_domain(u, n, c, top=top), arithmetic.accepted(E, c, u, n), E <= LONG_MAX]
    return (u, n, c, E), hyps


#: the bounds a counterexample is first looked for within (every value's magnitude), smallest first, and the budget
#: of each look: a readable small counterexample when there is one, z3's first model otherwise
SMALL_BOUNDS = (8, 64, 2**12)
SMALL_RLIMIT = 2_000_000


def decide(hypotheses: list, goal, method: str, names: dict[str, Long], lemmas=None, lemmas_ok: bool = True,
           answer=None) -> Outcome:
    """``hypotheses => goal`` as an outcome; a refutation names every value of the counterexample, the smallest
    found by iterative tightening (all magnitudes within 8, else 64, else 4096), and carries a trace of the model
    on those values when they are a wheel the model accepts (u, n, c, E: the entry added at c with delay E - c,
    then an advance to E)."""
    answer = answer or prove(hypotheses, goal)
    if answer.status != REFUTED:
        return verdict(answer, method, lemmas, lemmas_ok)
    model, bound = answer.model, None
    for limit in SMALL_BOUNDS:
        small = solver()
        small.set("rlimit", SMALL_RLIMIT)
        small.add(*hypotheses, z3.Not(goal), *[z3.And(x >= -limit, x <= limit) for x in names.values()])
        if small.check() == z3.sat:
            model, bound = small.model(), limit
            break
    values = {name: x.backend.value(model, x.raw) for name, x in names.items()}
    text = ", ".join(f"{name}={value}" for name, value in values.items())
    return Outcome(REFUTED, method + (f" (smallest within {bound})" if bound else ""), f"counterexample: {text}",
                   witness=values, lemmas=lemmas or [], traces=level_trace(values))


def tightened(constraints, model: z3.ModelRef, terms: list) -> tuple[z3.ModelRef, int | None]:
    """A model of ``constraints`` with every term within the first of `SMALL_BOUNDS` that admits one (``model``
    and None when none does): a run reads advance(9), not advance(9223372036854748443)."""
    for limit in SMALL_BOUNDS:
        small = solver()
        small.set("rlimit", SMALL_RLIMIT)
        small.add(*constraints, *[z3.And(x >= -limit, x <= limit) for x in terms])
        if small.check() == z3.sat:
            return small.model(), limit
    return model, None


def run_trace(tick: int, size: int, start_ms: int, run: list[tuple[str, int, int]]) -> dict:
    """A symbolic wheel's run replayed on the model, when the model accepts it (else no trace)."""
    if start_ms < 0 or any(delay < 0 for kind, delay, _ in run if kind == "add"):
        return {}
    commands, now = [], start_ms
    for number, (kind, delay, to) in enumerate(run):
        if kind == "add":
            commands += [v.TimerAdd(f"t{number}", delay), v.Size()]
        elif to >= now:
            commands += [v.Advance(to), v.Size()]
            now = to
    return {"run": timer_trace("specs.wheel.run", v.Params(tick_ms=tick, wheel_size=size, start_ms=start_ms),
                               commands, "the symbolic wheel's run replayed on the model")}


def level_trace(values: dict) -> dict:
    """The model on a refuted level's values, when they are a wheel the model accepts (else no trace)."""
    u, n, c, E = (values.get(name) for name in ("u", "n", "c", "E"))
    if None in (u, n, c, E) or not (u >= 1 and n >= 2 and u * n <= LONG_MAX and 0 <= c <= E <= LONG_MAX):
        return {}
    return {"counterexample": timer_trace(
        "specs.wheel.counterexample", v.Params(tick_ms=u, wheel_size=n, start_ms=c),
        [v.TimerAdd("t", E - c), v.Size(), v.Advance(E), v.Size()],
        f"z3's counterexample (u={u}, n={n}, c={c}, E={E}) replayed on the model: the task added at {c} with "
        f"expiration {E} runs by advance({E}).")}


@obligation("wheel.placement.index_in_range", domain=JAVA_DOMAIN + ", c+u<=E<c+u*n", mutant=ACCEPTS_EXPIRED.bug)
def placement_index(mutated: bool = False) -> Outcome:
    """An entry the level accepts lands in one of its buckets: the index Kafka computes, (E / u) % n with Java's
    truncating division and sign-following remainder, lies in [0, n). It cannot be negative because an accepted
    expiration is at least c + u > 0, so a negative clock is the only way to Kafka's ArrayIndexOutOfBoundsException
    (§2.6.6), and the domain excludes it as the model does."""
    arithmetic = ACCEPTS_EXPIRED if mutated else KAFKA
    (u, n, c, E), hyps = placement_setting(JINT, arithmetic=arithmetic)
    _, slot, _ = arithmetic.place(E, u, n)
    return decide(hyps, z3.And(slot >= 0, slot < n), METHOD_JINT, {"u": u, "n": n, "c": c, "E": E})


@obligation("wheel.placement.bucket_expiration", domain=JAVA_DOMAIN + ", c+u<=E<c+u*n", mutant=ROUNDS_UP.bug)
def placement_expiration(mutated: bool = False) -> Outcome:
    """An accepted entry's bucket expiration b = (E / u) * u is the start of the tick containing E: it is after
    the level's clock and no later than the entry, c < b <= E, and less than one tick before it, E - u < b. So the
    bucket is released in the future (never immediately, which would re-insert the entry in a loop) and at most
    u - 1 ms before the entry is due. None of the products or sums wraps in this domain."""
    arithmetic = ROUNDS_UP if mutated else KAFKA
    (u, n, c, E), hyps = placement_setting(JINT, arithmetic=arithmetic)
    _, _, b = arithmetic.place(E, u, n)
    return decide(hyps, z3.And(c < b, b <= E, E - u < b), METHOD_JINT, {"u": u, "n": n, "c": c, "E": E})


def aliasing_query(backend: Backend, *, top: bool = False, arithmetic: Arithmetic = KAFKA):
    (u, n, c, E1), hyps = placement_setting(backend, top=top, arithmetic=arithmetic)
    (c2, E2), ranges = backend.longs("c2 E2")
    vid1, slot1, b1 = arithmetic.place(E1, u, n)
    vid2, slot2, _ = arithmetic.place(E2, u, n)
    hyps += [ranges, c2 >= c, c2 < b1, (c2 % u).eq(0), level_domain(u, n, c2, top=top),
             arithmetic.accepted(E2, c2, u, n),
             E2 <= LONG_MAX, slot1.eq(slot2)]
    lem = lemmas(backend, top=top)
    instances = [lem.window(E1, c, u, n), lem.window(E2, c2, u, n), lem.below(c2, vid1, u), lem.mono(c, c2, u),
                 lem.residue(vid1, vid2, n)]
    results, ok = with_lemmas([lem.window, lem.below, lem.mono, lem.residue])
    names = {"u": u, "n": n, "c": c, "E": E1, "c2": c2, "E2": E2}
    return decide(hyps + instances, vid1.eq(vid2), METHOD_JINT + " + lemmas", names, results, ok), results, ok


@obligation("wheel.placement.no_aliasing",
            domain=JAVA_DOMAIN + "; E1 accepted at clock c, E2 at a later aligned clock c2 < b1 (bucket still live)",
            mutant=MISINDEXED.bug)
def placement_no_aliasing(mutated: bool = False) -> Outcome:
    """Two entries that share a bucket share its round: if E1 was placed when the level's clock was c, and E2 at
    a clock c2 with c <= c2 < b1 (the bucket has not been released yet, since releasing it moves the clock to b1),
    and both got the same bucket index, then they have the same virtual id. A bucket therefore never mixes entries
    of two rotations of the wheel, so one expiration per bucket is enough. Proved from lemmas on division (window,
    below, mono, residue), each proved by z3 in the same run."""
    outcome, _, _ = aliasing_query(JINT, arithmetic=MISINDEXED if mutated else KAFKA)
    return outcome


# ---------------------------------------------------------------------------------------------------------------
# Refusal, clocks and levels
# ---------------------------------------------------------------------------------------------------------------


@obligation("wheel.refusal.exact",
            domain="level k as in the placement domain, level k+1 created from it (tick T*n, clock c - c%(T*n))",
            mutant=REFUSES_EARLY.bug)
def refusal_exact(mutated: bool = False) -> Outcome:
    """An entry is refused as expired exactly when E < c1 + u, the test of the finest level: the sum does not wrap
    in the domain, and an entry handed up from level k (because E >= c + T*n) is never refused by level k+1, whose
    tick is T*n and whose clock is c rounded down to that tick. So the only "already expired" verdict is level 1's,
    and it is the stated inequality."""
    arithmetic = REFUSES_EARLY if mutated else KAFKA
    (T, n, c, E), ranges = JINT.longs("T n c E")
    up = arithmetic.overflow_tick(T, n)
    upper = c - c % up
    hyps = [ranges, level_domain(T, n, c), z3.Not(arithmetic.accepted(E, c, T, n)),
            z3.Not(arithmetic.refused(E, c, T, n)), E <= LONG_MAX]
    goal = z3.And(no_overflow_add(c, T), upper >= 0, upper <= c, z3.Not(arithmetic.refused(E, upper, up, n)))
    return decide(hyps, goal, METHOD_JINT, {"u": T, "n": n, "c": c, "E": E})


@obligation("wheel.clock.alignment_inductive",
            domain="t>=1, 2<=n<=Int.MAX, t*n<=Long.MAX, clocks and advance targets <= Long.MAX - t*n",
            mutant=UNROUNDED_CLOCK.bug)
def clock_alignment(mutated: bool = False) -> Outcome:
    """The clocks of adjacent levels stay aligned: with a fine level (tick t, clock cf) and its overflow level (tick
    T = t*n, clock cc), the invariant "cf >= 0 is a multiple of t and cc = cf - cf % T" holds when the overflow
    level is created (its start is cf) and is preserved by advanceClock(x) for any x: the fine level moves to x
    rounded down to t if x is at least one tick ahead, then passes its new time up, and the coarse level moves if
    that is at least one of its ticks ahead. An inductive invariant, so it holds for every sequence of advances,
    and every level's clock is the level-1 clock rounded down to that level's tick."""
    arithmetic = UNROUNDED_CLOCK if mutated else KAFKA
    (t, n, cf, x), ranges = JINT.longs("t n cf x")
    T = arithmetic.overflow_tick(t, n)
    cc = cf - cf % T
    hyps = [ranges, level_domain(t, n, cf), no_overflow_add(cf, T), x >= 0, no_overflow_add(x, T)]
    cf2 = arithmetic.advance_level(cf, t, x)
    cc2 = arithmetic.advance_level(cc, T, cf2)
    # x - x % t is a multiple of t (one lemma, proved here): without it z3's answer depends on its random seed
    a, m = z3.Ints("lemma.x lemma.m")
    lemma = prove([], multiple_lemma(a, m))
    hints = [multiple_lemma(x.raw, t.raw), multiple_lemma(cf2.raw, T.raw)]
    goal = z3.And(cf2 >= 0, (cf2 % t).eq(0), cc2.eq(cf2 - cf2 % T), cc2 <= cf2, cf2 < cc2 + T)
    return decide(hyps + hints, goal, METHOD_JINT + " + lemma", {"t": t, "n": n, "cf": cf, "x": x},
                  [("multiple (x - x % m is a multiple of m)", lemma.status, 0.0)], lemma.status == PROVED)


@obligation("wheel.overflow.climb_ranking",
            domain="any level: T in [1, Long.MAX], 2<=n<=Int.MAX, aligned c>=0, E<=Long.MAX; model arithmetic, and "
                   "Java arithmetic where T*n and c+T*n do not wrap", mutant=FLAT_OVERFLOW.bug)
def overflow_climb(mutated: bool = False) -> Outcome:
    """Level k has tick u*n^(k-1): each overflow level's tick is the interval of the level below. An entry beyond a
    level (E >= c + T*n) goes up, and the climb is a ranking: the next tick T*n is at least 2T and still at most
    E - c <= Long.MAX, and the entry is not refused there. Ticks therefore double at least at every climb while
    staying representable, so an entry climbs at most 62 times (u*2^62 <= Long.MAX) and the chain of levels is
    bounded by 63. Proved in the model's unbounded arithmetic and in Java's wherever the level's interval and
    window do not wrap; where Kafka's interval does wrap, see wheel.kafka.interval_wraps."""
    arithmetic = FLAT_OVERFLOW if mutated else KAFKA
    results = []
    for backend, java in ((EXACT, False), (JINT, True)):
        (T, n, c, E), ranges = backend.longs("T n c E")
        hyps = [ranges, T >= 1, T <= LONG_MAX, n >= 2, n <= INT_MAX, c >= 0, (c % T).eq(0), E <= LONG_MAX,
                E >= c + T * n]
        if java:
            hyps += [no_overflow_mul(T, n), no_overflow_add(c, T * n)]
        nxt = arithmetic.overflow_tick(T, n)
        upper = c - c % nxt
        goal = z3.And(nxt >= T + T, nxt <= LONG_MAX, upper >= 0, z3.Not(E < upper + nxt))
        results.append(decide(hyps, goal, "z3 NIA (model) + NIA (Java)", {"u": T, "n": n, "c": c, "E": E}))
    return next((outcome for outcome in results if outcome.status != PROVED), results[0])


# ---------------------------------------------------------------------------------------------------------------
# The symbolic wheel: add, advance and cascade, over which every timing obligation is stated
# ---------------------------------------------------------------------------------------------------------------

#: the bound of the symbolic wheel: the (tick, wheel size, levels) configurations it is checked for. Times are any
#: longs in exact arithmetic (where Java wraps, see wheel.kafka.*); with the configuration fixed, every division is by
#: a constant, which z3 decides (3 levels cost 2-20 s per
#: configuration instead of 0.1-1.5 s for 2, so only the smallest wheels get 3).
CONFIGURATIONS = ((1, 2, 3), (1, 3, 2), (2, 2, 2), (10, 20, 2))
SYM_DOMAIN = (f"(tick, wheel size, levels) in {', '.join(map(str, CONFIGURATIONS))}; start, clocks, times and "
              f"delays any longs, computed exactly (the model's arithmetic, no wrapping), the entry inside the top "
              f"level's window; one tracked entry, the other entries' releases as arbitrary earlier clock moves; BMC "
              f"to "
              f"{{depth}} commands from a fresh wheel + inductive invariant (unbounded depth)")
ADD, ADVANCE = 0, 1
WHEEL_BMC_DEPTH = 2


class SymbolicWheel:
    """Kafka's SystemTimer over a bounded number of TimingWheel levels, as z3 terms, tracking one entry.

    State: the virtual now; each level's clock; the entry's expiration E, whether it was added and has run (and
    when), which level's bucket holds it (``at``) and that bucket's expiration. The other entries matter to it only
    through the clocks, which their releases move: an advance releases due buckets in expiration order, so before
    each release of the tracked entry's bucket b the clocks may have moved to any time <= b, and after its last
    release to any time <= the advance's target (``moves``, free variables of the command). Levels exist from the
    start with aligned clocks (wheel.clock.alignment_inductive: a lazily created level is in the same state).
    Every step is built from `Arithmetic`'s accepted(), place(), advance_level() and overflow_tick()."""

    def __init__(self, tick: int, size: int, levels: int, arithmetic: Arithmetic = KAFKA, backend: Backend = EXACT):
        self.levels = levels
        self.arithmetic = arithmetic
        self.backend = backend
        self.u, self.n = backend.c(tick), backend.c(size)
        self.ticks = [self.u]
        for _ in range(self.levels - 1):
            self.ticks.append(arithmetic.overflow_tick(self.ticks[-1], self.n))
        #: the latest time (clock, deadline, advance) considered: in Java's arithmetic, one top-level interval
        #: before Long.MAX, so that no level's window end c + T*n passes it (see wheel.timing.java_longs)
        self.horizon = LONG_MAX - tick * size ** levels if wraps(backend) else LONG_MAX

    # --- state ------------------------------------------------------------------------------------------------

    def fresh(self, tag: str) -> dict:
        s = {name: z3.Int(f"{name}@{tag}") for name in ("now", *(f"c{k}" for k in range(self.levels)), "E", "D", "A",
                                                         "b", "ran_at")}
        s.update({name: z3.Bool(f"{name}@{tag}") for name in ("added", "ran", *self.at_names)})
        return s

    @property
    def at_names(self) -> list[str]:
        return [f"at{k}" for k in range(self.levels)]

    def long(self, raw) -> Long:
        return Long(self.backend, raw)

    def clocks(self, s: dict) -> list[Long]:
        return [self.long(s[f"c{k}"]) for k in range(self.levels)]

    def aligned(self, s: dict):
        """Level 1's clock is a non-negative multiple of its tick; each coarser clock is the finer one rounded
        down to the coarser tick."""
        c = self.clocks(s)
        parts = [c[0] >= 0, (c[0] % self.u).eq(0)]
        parts += [c[k].eq(c[k - 1] - c[k - 1] % self.ticks[k]) for k in range(1, self.levels)]
        return z3.And(*parts)

    def initial(self, s: dict):
        """A fresh wheel started at ``now``: clocks at now rounded down, nothing added."""
        return z3.And(s["now"] >= 0, s["now"] <= self.horizon, self.aligned(s), s["c0"] <= s["now"],
                      s["now"] < s["c0"] + self.u.raw, z3.Not(s["added"]), z3.Not(s["ran"]),
                      *[z3.Not(s[f"at{k}"]) for k in range(self.levels)])

    def window(self, E: Long, clocks: list[Long]):
        """The bound: the entry fits the top level's window."""
        return E < clocks[-1] + self.ticks[-1] * self.n

    # --- Kafka's operations -----------------------------------------------------------------------------------

    def advance_clocks(self, clocks: list[Long], x: Long) -> list[Long]:
        """advanceClock(x) from level 1 up: each level moves if x is a later tick, and passes its clock up."""
        out = []
        for c, T in zip(clocks, self.ticks):
            x = self.arithmetic.advance_level(c, T, x)
            out.append(x)
        return out

    def insert(self, clocks: list[Long], E: Long):
        """TimingWheel.add from level 1 up: (refused somewhere, so it runs; placed per level; its bucket)."""
        a = self.arithmetic
        reach, refused, at, bucket = z3.BoolVal(True), z3.BoolVal(False), [], self.backend.c(0)
        for c, T in zip(clocks, self.ticks):
            here = z3.And(reach, a.accepted(E, c, T, self.n))
            gone = z3.And(reach, a.refused(E, c, T, self.n))
            at.append(here)
            bucket = ite(here, a.place(E, T, self.n)[2], bucket)
            refused = z3.Or(refused, gone)
            reach = z3.And(reach, z3.Not(here), z3.Not(gone))
        return refused, at, bucket

    def step(self, s: dict, kind, delay, to, moves, tag: str) -> tuple[dict, dict]:
        """One command: add the entry (delay) or advance to ``to``. Returns the next state and what happened:
        ``ran`` (the entry ran in this step), ``releases`` (per release of its bucket: it happened), ``ranks`` (its
        rank before the first and after each release), ``due`` (its bucket is still due when the unrolled releases
        are exhausted), ``order`` (the clock moves respect the delay queue's order), ``defs`` (definitions of the
        intermediate states, named so that z3 sees each term once)."""
        n = dict(s)
        defs = []

        def named(clocks: list[Long], label: str) -> list[Long]:
            names = [z3.Int(f"{label}.c{k}@{tag}") for k in range(self.levels)]
            defs.extend(name == c.raw for name, c in zip(names, clocks))
            return [self.long(name) for name in names]

        clocks = self.clocks(s)
        now = self.long(s["now"])
        # add: deadline D = now + delay, filed under E, placed or refused against the (possibly lagging) clocks
        D, E = self.scheduled(now, clocks, delay)
        refused, at, bucket = self.insert(clocks, E)
        adding = z3.And(kind == ADD, z3.Not(s["added"]))
        n["added"] = z3.Or(s["added"], adding)
        n["E"] = z3.If(adding, E.raw, s["E"])
        n["D"] = z3.If(adding, D.raw, s["D"])
        n["A"] = z3.If(adding, now.raw, s["A"])
        n["ran"] = z3.Or(s["ran"], z3.And(adding, refused))
        n["ran_at"] = z3.If(z3.And(adding, refused), now.raw, s["ran_at"])
        for k in range(self.levels):
            n[f"at{k}"] = z3.Or(s[f"at{k}"], z3.And(adding, at[k]))
        n["b"] = z3.If(adding, bucket.raw, s["b"])
        # advance: release the entry's bucket while it is due, each time re-inserting from level 1
        advancing = kind == ADVANCE
        target = self.long(to)
        E = self.long(n["E"])
        releases, order, ranks = [], [], [self.rank(n)]
        for i in range(self.levels):
            pending = z3.And(n["added"], z3.Not(n["ran"]), z3.Or(*[n[f"at{k}"] for k in range(self.levels)]))
            due = z3.And(advancing, pending, self.long(n["b"]) <= target)
            order.append(z3.Implies(due, moves[i] <= n["b"]))  # buckets are released in expiration order
            clocks = named([ite(due, moved, c) for moved, c in zip(self.advance_clocks(clocks, self.long(moves[i])),
                                                                     clocks)], f"moved{i}")
            if self.arithmetic.advance_before_flush:
                b = self.long(n["b"])
                clocks = named([ite(due, moved, c) for moved, c in zip(self.advance_clocks(clocks, b), clocks)],
                               f"released{i}")
            refused, at, bucket = self.insert(clocks, E)
            runs = z3.And(due, refused, self.arithmetic.runs_refused)
            n["ran"] = z3.Or(n["ran"], runs)
            n["ran_at"] = z3.If(runs, target.raw, n["ran_at"])
            for k in range(self.levels):
                n[f"at{k}"] = z3.If(due, at[k], n[f"at{k}"])
            n["b"] = z3.If(due, bucket.raw, n["b"])
            n = self.named_state(n, f"r{i}@{tag}", defs)
            releases.append(due)
            ranks.append(self.rank(n))
        pending = z3.And(n["added"], z3.Not(n["ran"]), z3.Or(*[n[f"at{k}"] for k in range(self.levels)]))
        still_due = z3.And(advancing, pending, self.long(n["b"]) <= target)
        clocks = [ite(advancing, moved, c) for moved, c in zip(self.advance_clocks(clocks, self.long(moves[-1])),
                                                                  clocks)]
        for k in range(self.levels):
            n[f"c{k}"] = clocks[k].raw
        n["now"] = z3.If(advancing, to, s["now"])
        return n, {"ran": z3.And(n["ran"], z3.Not(s["ran"])), "releases": releases, "due": still_due,
                   "order": z3.And(*order), "ranks": ranks, "defs": defs}

    def named_state(self, s: dict, tag: str, defs: list) -> dict:
        """The entry's part of ``s`` as fresh constants, their definitions appended to ``defs``."""
        out = dict(s)
        for key in ("b", "ran_at", "ran", *(f"at{k}" for k in range(self.levels))):
            out[key] = (z3.Bool if key in ("ran", *self.at_names) else z3.Int)(f"{key}.{tag}")
            defs.append(out[key] == s[key])
        return out

    def rank(self, s: dict):
        """The entry's ranking: 0 once run (or never added, or lost), else 1 + the level of its bucket."""
        pending = z3.And(s["added"], z3.Not(s["ran"]))
        return z3.If(pending, z3.Sum([z3.If(s[f"at{k}"], k + 1, 0) for k in range(self.levels)]), 0)

    def scheduled(self, now: Long, clocks: list[Long], delay) -> tuple[Long, Long]:
        """An add's deadline D = now + delay and the expiration E the wheel files it under."""
        D = now + self.long(delay)
        return D, self.arithmetic.schedule(D, now, clocks[0], self.u)

    def command(self, s: dict, tag: str):
        """A well-formed symbolic command in state s: (kind, delay, to, moves, constraint). Delays are accepted by
        the model's guard (now + delay <= Long.MAX; in Java's arithmetic: up to the horizon) and keep the entry
        inside the top level's window; advances go forward; clock moves are at most the target (and, by the step's
        ``order``, at most the bucket released next)."""
        kind, delay, to = z3.Int(f"kind@{tag}"), z3.Int(f"delay@{tag}"), z3.Int(f"to@{tag}")
        moves = [z3.Int(f"move{i}@{tag}") for i in range(self.levels + 1)]
        now = self.long(s["now"])
        _, E = self.scheduled(now, self.clocks(s), delay)
        constraint = z3.And(z3.Or(kind == ADD, kind == ADVANCE), delay >= 0, delay <= LONG_MAX,
                            now.raw + delay <= self.horizon, z3.Implies(kind == ADD, self.window(E, self.clocks(s))),
                            to >= s["now"], to <= self.horizon, *[z3.And(m >= 0, m <= to) for m in moves])
        return kind, delay, to, moves, constraint

    # --- what the obligations say -----------------------------------------------------------------------------

    def earliest(self, E):
        """Kafka's declared firing window opens at the start of E's tick (up to tick - 1 ms early)."""
        return E - E % self.u.raw

    def invariant_clauses(self, s: dict) -> dict[str, object]:
        """The invariant, clause by clause (a counterexample to induction names the clauses it breaks): clocks
        aligned and not ahead of now; the entry is in exactly one place once added (a bucket of one level, or run)
        and nowhere before; its bucket expiration is a multiple of its level's tick, no later than E, within one
        tick of it, and after that level's current tick; it fits the top level's window; if it ran, not before the
        tick of E started; E is what the wheel's schedule makes of the deadline D added at A."""
        c = self.clocks(s)
        E, b = self.long(s["E"]), self.long(s["b"])
        places = [s["ran"], *[s[f"at{k}"] for k in range(self.levels)]]

        def once_added(fact):
            return z3.Implies(s["added"], fact)

        def in_bucket(fact: Callable):
            return z3.And(*[z3.Implies(s[f"at{k}"], fact(T, c[k])) for k, T in enumerate(self.ticks)])

        return {"clocks_aligned": self.aligned(s), "clock_not_ahead": s["c0"] <= s["now"],
                "now_in_horizon": s["now"] <= self.horizon,
                "nowhere_before_added": z3.Implies(z3.Not(s["added"]), z3.Not(z3.Or(*places))),
                "one_place": once_added(z3.PbEq([(x, 1) for x in places], 1)),
                "E_nonnegative": once_added(s["E"] >= 0), "in_window": once_added(self.window(E, c)),
                "added_in_past": once_added(z3.And(s["A"] >= 0, s["A"] <= s["now"])),
                "deadline_after_add": once_added(s["D"] >= s["A"]),
                "deadline_in_horizon": once_added(s["D"] <= self.horizon),
                "scheduled": once_added(self.arithmetic.scheduled(s["E"], s["D"], s["A"], self.u.raw)),
                "ran_not_early": z3.Implies(s["ran"], s["ran_at"] >= self.earliest(s["E"])),
                "bucket_multiple_of_tick": in_bucket(lambda T, ck: (b % T).eq(0)),
                "bucket_le_E": in_bucket(lambda T, ck: b <= E),
                "E_within_bucket_tick": in_bucket(lambda T, ck: E < b + T),
                "bucket_after_clock_tick": in_bucket(lambda T, ck: b >= ck + T)}

    def invariant(self, s: dict):
        return z3.And(*self.invariant_clauses(s).values())

    def shown(self, s: dict) -> dict[str, object]:
        """A state as a counterexample shows it: now, the clocks, the entry (E, its deadline D added at A, the level
        of its bucket, 1 for the finest, 0 for none, and the bucket's expiration b) and whether and when it ran."""
        level = z3.IntVal(0)
        for k in reversed(range(self.levels)):
            level = z3.If(s[f"at{k}"], k + 1, level)
        return {"now": s["now"], **{f"c{k}": s[f"c{k}"] for k in range(self.levels)}, "added": s["added"],
                "E": s["E"], "D": s["D"], "A": s["A"], "level": level, "b": s["b"], "ran": s["ran"],
                "ran_at": s["ran_at"]}

    def counterexample(self, model: z3.ModelRef, s: dict, command: tuple, n: dict, clauses: dict) -> dict:
        """A counterexample to induction with its values: the state (of the invariant), the command, what the step
        changed and the clauses (of the invariant, or the step property) the step breaks."""
        kind, delay, to, moves = command
        adding = z3.is_true(model.eval(kind == ADD, model_completion=True))
        fields = {"kind": "add", "delay": delay} if adding else {
            "kind": "advance", "to": to, **{f"move{i}": m for i, m in enumerate(moves)}}
        return induction_counterexample(model, self.shown(s), fields, self.shown(n), clauses)


def wheel_obligation(arithmetic: Arithmetic, prop: Callable, depth: int = WHEEL_BMC_DEPTH, backend: Backend = EXACT,
                     configurations: tuple | None = None) -> Outcome:
    """Check the step property ``prop(wheel, s, kind, to, n, happened)`` for every configuration: BMC from a fresh
    wheel to ``depth`` commands (a violation there is a run: refuted), then induction on `SymbolicWheel.invariant`
    with the property as the step goal (unsat: proved; a model there that BMC did not reach: not inductive, shown
    as a counterexample to induction with small values and the clauses it breaks)."""
    start = time.perf_counter()
    configurations = configurations or CONFIGURATIONS
    for tick, size, levels in configurations:
        fresh_z3_context()  # each configuration alone: z3's search is slower in a context full of earlier terms
        wheel = SymbolicWheel(tick, size, levels, arithmetic, backend)
        sol = solver()
        s = wheel.fresh("0")
        sol.add(wheel.initial(s))
        commands = []
        for i in range(depth):
            kind, delay, to, moves, constraint = wheel.command(s, str(i))
            n, happened = wheel.step(s, kind, delay, to, moves, str(i))
            fresh = wheel.fresh(str(i + 1))
            sol.add(constraint, happened["order"], *happened["defs"], *[fresh[key] == n[key] for key in fresh])
            commands.append((kind, delay, to))
            goal = prop(wheel, s, kind, to, fresh, happened)
            sol.push()
            sol.add(z3.Not(goal))
            result = sol.check()
            status = undecided(sol)  # read before pop, which forgets why z3 gave up
            if result == z3.sat:
                origin = wheel.fresh("0")["now"]
                model, bound = tightened(sol.assertions(), sol.model(),
                                         [origin, *[x for _, d, t in commands for x in (d, t)]])
                run = [("add" if model.eval(k, model_completion=True).as_long() == ADD else "advance",
                        model.eval(d, model_completion=True).as_long(), model.eval(t, model_completion=True).as_long())
                       for k, d, t in commands]
                start_ms = model.eval(origin, model_completion=True).as_long()
                steps = "; ".join(f"add(delay={d})" if k == "add" else f"advance({t})" for k, d, t in run)
                return Outcome(REFUTED, f"BMC d={depth}" + (f" (times within {bound})" if bound else ""),
                               f"tick {tick}, wheel {size}, start {start_ms}: {steps}",
                               witness={"tick_ms": tick, "wheel_size": size, "start_ms": start_ms, "run": run},
                               traces=run_trace(tick, size, start_ms, run))
            sol.pop()
            if result != z3.unsat:
                return Outcome(status, f"BMC d={depth}", f"tick {tick}, wheel {size}, {levels} levels, step {i + 1}: "
                               f"z3 gave up")
            sol.add(goal)
            s = fresh
        s = wheel.fresh("s")
        kind, delay, to, moves, constraint = wheel.command(s, "c")
        n, happened = wheel.step(s, kind, delay, to, moves, "c")
        for part, target in (("consecution", wheel.invariant(n)),
                             ("step property", prop(wheel, s, kind, to, n, happened))):
            step = [wheel.invariant(s), constraint, happened["order"], *happened["defs"]]
            answer = prove(step, target)
            if answer.status == REFUTED:
                # the same query again, now as small as z3 finds (readable values): only on failure
                small, _ = smallest([*step, z3.Not(target)], {"now": s["now"], "ran_at": s["ran_at"]})
                model = small.model if small.status == REFUTED else answer.model
                clauses = {**wheel.invariant_clauses(n),
                           f"step property {prop.__name__}": prop(wheel, s, kind, to, n, happened)}
                return Outcome(NOT_INDUCTIVE, "induction", f"tick {tick}, wheel {size}, {levels} levels: {part} "
                               f"fails from a state of the invariant, and BMC to {depth} found no run to it",
                               witness=wheel.counterexample(model, s, (kind, delay, to, moves), n, clauses))
            if answer.status != PROVED:
                return verdict(answer, "induction", detail=f"tick {tick}, wheel {size}, {levels} levels: {part}")
    return Outcome(PROVED, f"BMC d={depth} + induction",
                   f"{len(configurations)} configurations, {time.perf_counter() - start:.1f}s")


@attrs.frozen
class Window:
    """A firing window of `model.contract.Declarations` (its ``firing``): for an entry with deadline D added at A on
    a wheel of tick u, the earliest time it may run and the advance after which it must have run, over exact
    integers (tests/specs evaluate both against Declarations.earliest_ms and latest_ms)."""

    firing: str
    earliest: Callable  # (D, u)
    latest: Callable  # (D, A, u)


def _max(a, b):
    return z3.If(a >= b, a, b)


WINDOWS = {window.firing: window for window in (
    Window("kafka", lambda D, u: D - D % u, lambda D, A, u: D),
    Window("never_early_up_to_tick_late", lambda D, u: D, lambda D, A, u: _max(D, A) + u),
    Window("min_one_tick", lambda D, u: D - D % u, lambda D, A, u: _max(D, A + u)),
)}


@obligation("wheel.timing.not_early", domain=SYM_DOMAIN.format(depth=WHEEL_BMC_DEPTH), cost=6, mutant=REFUSES_EARLY.bug)
def timing_not_early(mutated: bool = False) -> Outcome:
    """Nothing runs before its declared firing window opens. For Kafka's window (the default declaration, "kafka")
    that is the start of the tick containing the entry's expiration E, floor(E / tick) * tick: an entry runs only
    when level 1 refuses it — on add, or when a released bucket re-inserts it — and at that moment, whatever the
    clocks' lag and whatever other buckets were released before, the run time is at least the start of E's tick.
    Stated over the symbolic wheel (add, advance with its cascades): every step in which the entry runs has the
    virtual now >= floor(E / tick) * tick. So a task runs at most tick - 1 ms early, and never early with tick 1."""
    return wheel_obligation(REFUSES_EARLY if mutated else KAFKA, not_early)


def not_early(w, s, kind, to, n, happened):
    """A run in this step is not before the start of the deadline's tick."""
    return z3.Implies(happened["ran"], n["ran_at"] >= WINDOWS["kafka"].earliest(n["D"], w.u.raw))


@obligation("wheel.timing.not_late", domain=SYM_DOMAIN.format(depth=WHEEL_BMC_DEPTH), cost=6, mutant=ROUNDS_UP.bug)
def timing_not_late(mutated: bool = False) -> Outcome:
    """Nothing stays pending past an advance beyond its deadline: after advanceClock(to) with to at or after the
    start of the entry's tick (so in particular with to >= E, the end of Kafka's declared window), the entry has
    run. Stated over the symbolic wheel: the advance releases the entry's bucket (its expiration is at most the
    start of E's tick on every level), each release re-inserts it lower, and the level-1 release refuses it, all
    within the same advance, whatever the clocks' lag and the other buckets released."""
    return wheel_obligation(ROUNDS_UP if mutated else KAFKA, not_late)


def not_late(w, s, kind, to, n, happened):
    """An advance to the start of the deadline's tick or later leaves the entry run."""
    return z3.Implies(z3.And(kind == ADVANCE, n["added"], to >= WINDOWS["kafka"].earliest(n["D"], w.u.raw)),
                      n["ran"])


@obligation("wheel.advance.terminates", domain=SYM_DOMAIN.format(depth=WHEEL_BMC_DEPTH), cost=6,
            mutant=STALE_CLOCKS.bug)
def advance_terminates(mutated: bool = False) -> Outcome:
    """An advance terminates: the entry's rank (0 once run, else 1 + the level of its bucket) strictly decreases at
    every release of its bucket — the clocks move to the bucket's expiration b, which is a multiple of every finer
    tick, so the entry, which lies in [b, b + T), fits the window of the level below or is refused and runs — and
    after at most one release per level its bucket is no longer due. Each entry is therefore released at most
    once per level in one advanceClock, and the drain loop ends (the buckets due at the target are finitely many)."""
    return wheel_obligation(STALE_CLOCKS if mutated else KAFKA, ranking)


def ranking(w, s, kind, to, n, happened):
    """Every release of the entry's bucket lowers its rank, and after the unrolled releases it is no longer due."""
    ranks = happened["ranks"]
    decreasing = [z3.Implies(due, after < before) for due, before, after in zip(happened["releases"], ranks, ranks[1:])]
    return z3.And(z3.Not(happened["due"]), *decreasing)


@obligation("wheel.cascade.conservation", domain=SYM_DOMAIN.format(depth=WHEEL_BMC_DEPTH), cost=6,
            mutant=DROPS_REFUSED.bug)
def cascade_conservation(mutated: bool = False) -> Outcome:
    """Entries are never lost or duplicated across a cascade: after every add and every advance (with all its
    releases and re-insertions), an added entry is in exactly one place — the bucket of exactly one level, or run —
    and an entry never added is nowhere. Stated over the symbolic wheel as a step property of every command."""
    return wheel_obligation(DROPS_REFUSED if mutated else KAFKA, conserved)


def conserved(w, s, kind, to, n, happened):
    """An added entry is in exactly one place after the step: one level's bucket, or run."""
    return z3.Implies(n["added"], z3.PbEq([(x, 1) for x in (n["ran"], *[n[name] for name in w.at_names])], 1))


# --- the other declared firing windows, and Java's wrapping --------------------------------------------------


def on_time(window: Window) -> Callable:
    """The step property "on time" for ``window``: a run in this step is not before the window opens, and an
    advance to its end or later leaves the entry run."""
    def on_time_in_window(w, s, kind, to, n, happened):
        u = w.u.raw
        return z3.And(z3.Implies(happened["ran"], n["ran_at"] >= window.earliest(n["D"], u)),
                      z3.Implies(z3.And(kind == ADVANCE, n["added"], to >= window.latest(n["D"], n["A"], u)),
                                 n["ran"]))
    return on_time_in_window


@obligation("wheel.timing.window.never_early_up_to_tick_late", domain=SYM_DOMAIN.format(depth=WHEEL_BMC_DEPTH),
            cost=6, mutant=SLOT_UNROUNDED.bug)
def window_never_early(mutated: bool = False) -> Outcome:
    """A wheel that declares never_early_up_to_tick_late (a slot wheel, as in the kernel or Netty: a slot expires
    once the clock has left it) is on time for that window: built as Kafka's wheel (the same accepted(), place(),
    advance and cascade) filing each entry under the end of its deadline's tick, floor(D / tick) * tick + tick, it
    never runs an entry before its deadline D, and an advance to max(D, A) + tick or later (A: when it was added)
    leaves it run. Stated over the symbolic wheel for every add and advance, with both ends of the window as
    `Declarations` defines them."""
    return wheel_obligation(SLOT_UNROUNDED if mutated else SLOT_WHEEL, on_time(WINDOWS["never_early_up_to_tick_late"]))


@obligation("wheel.timing.window.min_one_tick", domain=SYM_DOMAIN.format(depth=WHEEL_BMC_DEPTH), cost=6,
            mutant=NEXT_TICK_TWICE.bug)
def window_min_one_tick(mutated: bool = False) -> Outcome:
    """A wheel that declares min_one_tick (it never runs an entry on add: one due within the current tick waits for
    the next tick) is on time for that window: built as Kafka's wheel filing an entry due before the level-1 clock's
    next tick under that tick, it never runs an entry before the start of its deadline's tick (Kafka's earliest),
    and an advance to max(D, A + tick) or later leaves it run. Stated over the symbolic wheel for every add and
    advance, with both ends of the window as `Declarations` defines them."""
    return wheel_obligation(NEXT_TICK_TWICE if mutated else NEXT_TICK_WHEEL, on_time(WINDOWS["min_one_tick"]))


#: Kafka's defaults (tick 1, wheel 20) and a coarse tick (JINT costs 2-20 s per configuration; 3 levels: 18 s)
JAVA_CONFIGURATIONS = ((1, 20, 2), (2, 2, 2))


@obligation("wheel.timing.java_longs", cost=8, mutant=REFUSES_EARLY.bug,
            domain=f"(tick, wheel size, levels) in {', '.join(map(str, JAVA_CONFIGURATIONS))}; Java's long "
                   f"arithmetic (JINT: + - * wrap, / truncates, % follows the dividend); clocks, deadlines and "
                   f"advances up to Long.MAX - tick * size^levels; otherwise as the symbolic wheel's domain")
def timing_java_longs(mutated: bool = False) -> Outcome:
    """The timing obligations hold in Java's arithmetic, not only the model's: with every operation of the wheel
    (add's sums, the window tests, placement, clock rounding, cascades) computed as Java longs — the JINT encoding,
    proved to be Java's by java.integer_encoding — nothing runs before the start of its tick, nothing stays pending
    past an advance to that start, every advance terminates and a cascade neither loses nor duplicates an entry,
    for every clock, deadline and advance up to one top-level interval before Long.MAX (Long.MAX - tick *
    size^levels). Up to there no sum wraps, so Kafka's wheel and the model's exact one agree. Beyond it wrapping
    matters, and Kafka fails: a deadline whose sum with now passes Long.MAX wraps negative and runs at once
    (wheel.kafka.expiration_wraps); a clock within one interval of Long.MAX makes the window ends c + T*n wrap, so
    an entry due before Long.MAX is neither refused nor placed and climbs until a level's tick wraps to 0, and the
    add throws ArithmeticException (wheel.kafka.end_of_time); intervals of high levels wrap too
    (wheel.kafka.interval_wraps). The model computes exactly there and runs such entries on time."""
    def timing(*step):
        return z3.And(*[prop(*step) for prop in (not_early, not_late, ranking, conserved)])

    return wheel_obligation(REFUSES_EARLY if mutated else KAFKA, timing, backend=JINT,
                            configurations=JAVA_CONFIGURATIONS)


# ---------------------------------------------------------------------------------------------------------------
# KafkaWheel: Kafka's wheel in Java arithmetic, to execute the counterexamples
# ---------------------------------------------------------------------------------------------------------------


class Livelock(RuntimeError):
    """The drain loop re-inserted an entry into a bucket that is due again at once, without end."""


@attrs.define
class _Level:
    tick: int
    size: int
    current: int
    interval: int
    buckets: dict[int, tuple[int, list[str]]] = attrs.field(factory=dict)


@attrs.define
class KafkaWheel:
    """A paraphrase of Kafka's SystemTimer over TimingWheel levels with every operation in Java long arithmetic
    (`PY`), so that wrapping, truncation and exceptions happen where Kafka's would. Buckets are (level, index);
    ``round_up`` turns on the rounded-up bucket expiration of the spec mutant. Only what the counterexamples need:
    add, advance, size; no cancellation."""

    tick: int
    size: int
    start: int
    round_up: bool = False
    levels: list[_Level] = attrs.field(factory=list)
    queue: list[tuple[int, int, int, int]] = attrs.field(factory=list)
    entries: dict[str, int] = attrs.field(factory=dict)  # task -> expiration
    ran: list[tuple[str, int]] = attrs.field(factory=list)  # (task, now at the time it ran)
    now: int = 0
    _seq: itertools.count = attrs.field(factory=itertools.count)

    def __attrs_post_init__(self) -> None:
        self.now = self.start
        self.levels = [self._level(self.tick, self.start)]

    def _level(self, tick: int, start: int) -> _Level:
        return _Level(tick, self.size, PY.sub(start, PY.rem(start, tick)), PY.mul(tick, self.size))

    def add_task(self, task: str, delay: int) -> None:
        expiration = PY.add(self.now, delay)  # Kafka: delayMs + now, wrapping
        self.entries[task] = expiration
        if not self._insert(task, expiration, 0):
            self.ran.append((task, self.now))

    def _insert(self, task: str, expiration: int, k: int) -> bool:
        level = self.levels[k]
        if expiration < PY.add(level.current, level.tick):
            return False
        if expiration < PY.add(level.current, level.interval):
            if self.round_up:
                vid = PY.div(PY.sub(PY.add(expiration, level.tick), 1), level.tick)
            else:
                vid = PY.div(expiration, level.tick)
            index = PY.rem(vid, level.size)
            if not 0 <= index < level.size:
                raise IndexError(f"java.lang.ArrayIndexOutOfBoundsException: Index {index} out of bounds for "
                                 f"length {level.size}")
            bucket_expiration = PY.mul(vid, level.tick)
            old, tasks = level.buckets.get(index, (-1, []))
            tasks.append(task)
            level.buckets[index] = (bucket_expiration, tasks)
            if old != bucket_expiration:
                heapq.heappush(self.queue, (bucket_expiration, next(self._seq), k, index))
            return True
        if k + 1 == len(self.levels):
            self.levels.append(self._level(level.interval, level.current))
        return self._insert(task, expiration, k + 1)

    def _advance_levels(self, time_ms: int) -> None:
        for level in self.levels:
            if time_ms >= PY.add(level.current, level.tick):
                level.current = PY.sub(time_ms, PY.rem(time_ms, level.tick))
            time_ms = level.current

    def advance(self, to_ms: int, budget: int = 10_000) -> None:
        """Release every bucket due by ``to_ms``; more than ``budget`` releases in one call is a livelock."""
        self.now = to_ms
        releases = 0
        while self.queue and self.queue[0][0] <= to_ms:
            expiration, _, k, index = heapq.heappop(self.queue)
            releases += 1
            if releases > budget:
                raise Livelock(f"bucket {index} of level {k + 1} (expiration {expiration}) is due again after "
                               f"every release; {budget} releases in one advanceClock({to_ms})")
            self._advance_levels(expiration)
            _, tasks = self.levels[k].buckets.pop(index, (-1, []))
            for task in tasks:
                if not self._insert(task, self.entries[task], 0):
                    self.ran.append((task, self.now))

    def pending(self) -> int:
        return sum(len(tasks) for level in self.levels for _, tasks in level.buckets.values())


def kafka_outcome(tick: int, size: int, start: int, delay: int, advance_to: int, *, round_up: bool = False) -> str:
    """What Kafka's wheel does with one task of ``delay`` added at ``start`` and an advance to ``advance_to``."""
    wheel = KafkaWheel(tick, size, start, round_up=round_up)
    try:
        wheel.add_task("t", delay)
        if wheel.ran:
            return f"runs at once on add (expiration wrapped to {wheel.entries['t']})"
        wheel.advance(advance_to)
    except Livelock as error:
        return f"livelock: {error}"
    except (IndexError, ZeroDivisionError) as error:
        return f"throws {error}"
    return f"runs at {wheel.ran[0][1]}" if wheel.ran else f"pending after advance({advance_to})"


# ---------------------------------------------------------------------------------------------------------------
# Where Java's arithmetic overflows: findings, and the model's alternative
# ---------------------------------------------------------------------------------------------------------------


def timer_trace(trace_id: str, params: v.Params, commands: list[v.Command], description: str):
    return recorded(Header(trace_id, "timer", params, "kpurgatory.model", description), commands)


@obligation("wheel.kafka.expiration_wraps", kind="finding", expect=REFUTED,
            domain="now in [0, Long.MAX], delay in [0, Long.MAX], QF_BV 64")
def kafka_expiration_wraps() -> Outcome:
    """Kafka computes a task's expiration as delayMs + now in a long. Claim: the sum is a faithful deadline for
    every non-negative delay. z3 refutes it: for now >= 1 and delay > Long.MAX - now the sum wraps negative, the
    wheel sees an expiration below its clock, and the task runs at once instead of (practically) never — a caller
    that passes Long.MAX_VALUE for "no timeout" gets an immediate timeout. The model rejects these inputs with
    delay_out_of_range (wheel.model.expiration_guard)."""
    (now, delay), ranges = BV.longs("now delay")
    answer = minimise([ranges, now >= 0, delay >= 0, now + delay < 0], [now.raw, delay.raw])
    if answer.status != REFUTED:
        return verdict(answer, METHOD_BV)
    now_v, delay_v = BV.value(answer.model, now.raw), BV.value(answer.model, delay.raw)
    wrapped = PY.add(now_v, delay_v)
    assert wrapped < 0, "z3's model must wrap under concrete Java arithmetic"
    kafka = KafkaWheel(1, 20, 0)
    kafka.advance(now_v)
    kafka.add_task("t", delay_v)
    outcome = "runs at once on add" if kafka.ran else "does not run"
    trace = timer_trace(
        "specs.wheel.kafka.expiration_wraps", v.Params(tick_ms=1, wheel_size=20, start_ms=0),
        [v.Advance(now_v), v.TimerAdd("t", delay_v), v.Size(), v.Advance(now_v + 1), v.Size()],
        f"z3: now={now_v}, delay_ms={delay_v}: Kafka's now+delay wraps to {wrapped} and the task {outcome}; the "
        f"model rejects the add with delay_out_of_range and nothing runs.")
    return Outcome(REFUTED, METHOD_BV + " (minimised)",
                   f"now={now_v}, delay={delay_v}: Java sum {wrapped}; Kafka's wheel: task {outcome} at {now_v}. "
                   f"Model: delay_out_of_range.",
                   witness={"now": now_v, "delay_ms": delay_v, "java_expiration": wrapped, "kafka": outcome},
                   traces={"delay_near_long_max": trace})


#: the clocks at which the model's guard is read: the first two, one far from both ends, the last
GUARD_NOWS = (0, 1, 2**62, LONG_MAX)


def model_accepts(now: int, delay: int) -> bool:
    """The model's guard, read from the model itself: a timer_add of ``delay`` on a model whose clock starts at
    ``now`` is not rejected."""
    from kpurgatory.model import Model  # model/ itself, not a copy of its rule

    return model_step(Model("timer", v.Params(tick_ms=1, wheel_size=20, start_ms=now)), v.TimerAdd("t", delay),
                      ()).error is None


def largest_accepted_deadline(accepts: Callable[[int, int], bool], now: int) -> int:
    """The largest deadline now + delay that ``accepts`` lets through at ``now``, by bisection on the delay over
    [0, 2^64] (the guard is taken to be monotone in the delay; now - 1 if it rejects even delay 0)."""
    if not accepts(now, 0):
        return now - 1
    low, high = 0, 2**64  # accepts(now, low); high is beyond any deadline the domain has
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if accepts(now, middle) else (low, middle)
    return now + low


@obligation("wheel.model.expiration_guard", kind="model",
            domain="now in [0, Long.MAX], delay any long: Java's sum (JINT) against the exact one (z3); the "
                   "model's guard read from model/ by bisection on the delay of a timer_add, at now in (0, 1, 2^62, "
                   "Long.MAX)",
            mutant="the model's guard accepts one past Long.MAX (now + delay <= Long.MAX + 1)")
def model_expiration_guard(mutated: bool = False) -> Outcome:
    """The model accepts timer_add/watch exactly when now + delay <= Long.MAX in exact arithmetic: the largest
    deadline model/ itself accepts is Long.MAX at every clock read, neither less (a caller's "never" of exactly
    Long.MAX must not be refused) nor more. With that bound, on every accepted input Java's wrapping sum equals the
    exact one (so the model and Kafka agree there), and on every rejected input Java's sum is negative (so the
    rejected inputs are exactly those where Kafka would run the task at once because of wrapping). Negative delays
    never wrap from a non-negative now."""
    accepts = model_accepts if not mutated else (
        lambda now, delay: model_accepts(now, delay) or now + delay == LONG_MAX + 1)
    limits = {now: largest_accepted_deadline(accepts, now) for now in GUARD_NOWS}
    if len(set(limits.values())) > 1:
        return Outcome(REFUTED, "the model's guard, read by bisection", "the largest deadline the model accepts "
                       f"depends on the clock: {limits}", witness={"largest_accepted_deadline": limits})
    limit = limits[0]
    (now, delay), ranges = JINT.longs("now delay")
    java = now + delay
    exact = now.raw + delay.raw
    goal = z3.And(z3.Implies(exact <= limit, java.raw == exact), z3.Implies(exact > limit, java < 0),
                  exact >= LONG_MIN)
    answer = minimise([ranges, now >= 0, z3.Not(goal)], [now.raw, delay.raw])
    if answer.status != REFUTED:
        return verdict(answer, "the model's guard (bisection) + z3 NIA (Java vs exact)",
                       detail=f"the model accepts deadlines up to {limit} (Long.MAX) at now in {GUARD_NOWS}")
    now_v, delay_v = (answer.model.eval(x.raw, model_completion=True).as_long() for x in (now, delay))
    trace = timer_trace("specs.wheel.model.expiration_guard", v.Params(tick_ms=1, wheel_size=20, start_ms=now_v),
                        [v.TimerAdd("t", delay_v), v.Size()],
                        f"the guard accepts deadlines up to {limit}, Long.MAX {'-' if limit < LONG_MAX else '+'} "
                        f"{abs(LONG_MAX - limit)}: now={now_v}, delay={delay_v} (deadline {now_v + delay_v}, Java's "
                        f"sum {PY.add(now_v, delay_v)}) is {'rejected' if now_v + delay_v > limit else 'accepted'}. "
                        f"The recording is model/'s, the system's answers are the "
                        f"{'mutant guard' if mutated else 'bound Long.MAX'}'s.")
    # the system's answers: the guard under test where it differs from model/, else the statement's bound
    accepted = accepts(now_v, delay_v) if mutated else now_v + delay_v <= LONG_MAX
    answers = ([v.Observation(None), v.Observation(1)] if accepted
               else [v.Observation(None, error="delay_out_of_range"), v.Observation(0)])
    trace = attrs.evolve(trace, steps=[attrs.evolve(step, system=answer)
                                       for step, answer in zip(trace.steps, answers)])
    return Outcome(REFUTED, "the model's guard (bisection) + z3 NIA (minimised)",
                   f"the model accepts deadlines up to {limit} (Long.MAX {'-' if limit < LONG_MAX else '+'} "
                   f"{abs(LONG_MAX - limit)}); now={now_v}, delay={delay_v}: deadline {now_v + delay_v}, Java's sum "
                   f"{PY.add(now_v, delay_v)}", witness={"largest_accepted_deadline": limit, "now": now_v,
                                                         "delay_ms": delay_v}, traces={"counterexample": trace})


@obligation("wheel.kafka.end_of_time", kind="finding", expect=REFUTED,
            domain="Kafka's defaults (tick 1, wheel 20), clock c in [0, Long.MAX], delay d >= 0 with c + d <= "
                   "Long.MAX (accepted by the model); QF_BV 64, clock then delay minimised")
def kafka_end_of_time() -> Outcome:
    """Claim: for every deadline the model accepts (c + d <= Long.MAX), wrapping does not matter to Kafka's first
    level: its tests E < c + u ("already expired") and E < c + u*n ("inside my window") decide as they would in
    exact arithmetic. z3 refutes it with the clock within one interval (u*n = 20 ms) of Long.MAX: c + u*n wraps
    negative, so an entry inside the level's window is neither refused nor placed but handed up the overflow chain,
    whose window ends wrap too. Executed on KafkaWheel: with the earliest such clock, a level up the chain refuses
    the entry and it runs at once on add, before its deadline although the tick is 1 ms; with the clock at Long.MAX,
    the climb goes on until a level's tick wraps to 0 and the add throws ArithmeticException. The model runs both
    at their deadlines. This is where the symbolic wheel's Java obligation (wheel.timing.java_longs) stops: one
    top-level interval before Long.MAX."""
    (c, d), ranges = BV.longs("c d")
    u, n = BV.c(1), BV.c(20)
    E = c + d
    constraints = [ranges, c >= 0, d >= 0, no_overflow_add(c, d), E - c < u * n, z3.Not(no_overflow_add(c, u * n)),
                   z3.Not(E < c + u), z3.Not(E < c + u * n)]
    answer = minimise(constraints, [c.raw, d.raw])
    if answer.status != REFUTED:
        return verdict(answer, METHOD_BV)
    c_v, d_v = BV.value(answer.model, c.raw), BV.value(answer.model, d.raw)
    executed = {}
    for clock, delay in ((c_v, d_v), (LONG_MAX, 0)):
        kafka = KafkaWheel(1, 20, clock)
        try:
            kafka.add_task("t", delay)
            executed[(clock, delay)] = (f"runs at once on add, at {clock}, {delay} ms before its deadline"
                                        if kafka.ran else "placed")
        except (IndexError, ZeroDivisionError) as error:
            executed[(clock, delay)] = f"the add throws {error}"
    trace = timer_trace(
        "specs.wheel.kafka.end_of_time", v.Params(tick_ms=1, wheel_size=20, start_ms=c_v),
        [v.TimerAdd("t", d_v), v.Size(), v.Advance(c_v + d_v), v.Size()],
        f"z3: clock {c_v}, delay {d_v}: Kafka's window end c + 20 wraps; Kafka: {executed[(c_v, d_v)]}. The model "
        f"runs the task at its deadline {c_v + d_v}.")
    return Outcome(REFUTED, METHOD_BV + " (minimised)",
                   "; ".join(f"clock={clock}, delay={delay}: Kafka {outcome}" for (clock, delay), outcome
                             in executed.items()) + ". Model: runs at the deadline.",
                   witness={"start_ms": c_v, "delay_ms": d_v, "kafka": executed[(c_v, d_v)],
                            "kafka_at_long_max": executed[(LONG_MAX, 0)]},
                   traces={"clock_near_long_max": trace})


def kafka_chain(u: Long, n: Long, c: Long, E: Long, levels: int):
    """Kafka's add from a fresh wheel, unrolled over ``levels`` levels in Java arithmetic: the condition that it
    goes wrong — a tick that is not positive (ArithmeticException / nonsense), a level above the first refusing
    the entry, a placement outside [0, n) or with a bucket expiration not in (c, E], or still climbing at the end."""
    bad = []
    T, ck = u, c
    reached = z3.BoolVal(True)
    for k in range(levels):
        interval = T * n
        refused = E < ck + T
        placed = z3.And(z3.Not(refused), E < ck + interval)
        _, slot, b = place(E, T, n)
        wrong_place = z3.Or(b <= c, b > E, slot < 0, slot >= n)
        bad.append(z3.And(reached, z3.Or(T <= 0, z3.And(refused, k > 0), z3.And(placed, wrong_place))))
        reached = z3.And(reached, z3.Not(refused), z3.Not(placed))
        ck = ck - ck % interval
        T = interval
    bad.append(reached)
    return z3.Or(bad)


@obligation("wheel.kafka.interval_wraps", kind="finding", expect=REFUTED, cost=25,
            domain="fresh wheel, start 0, E in [0, Long.MAX]; (a) Kafka's defaults u=1, n=20, 17 levels; "
                   "(b) u>=1, 2<=n<=64, u*n<=Long.MAX, 4 levels; QF_BV 64")
def kafka_interval_wraps() -> Outcome:
    """Claim: for every configuration the model accepts and every expiration up to Long.MAX, Kafka's add places
    the entry correctly on some level (index in range, c < b <= E) without a level above the first refusing it.
    z3 refutes it by unrolling Kafka's add over the overflow chain: the interval tick*wheelSize of a high level
    wraps, the next level gets a wrapped tick, and the entry lands in a bucket whose expiration is not after the
    clock, so every release re-inserts it into the same bucket: advanceClock spins forever holding the timer's
    write lock (or, for larger delays, throws). With Kafka's defaults this starts at delays of 20^14 ms. The model
    computes with unbounded integers, so the level whose interval exceeds Long.MAX is simply the top one
    (wheel.model.top_level_sound); the traces replay these inputs against the model, where the task runs on time."""
    results, traces, witness = [], {}, {}
    for label, levels, fixed in (("default_config", 17, True), ("small_wheel", 4, False)):
        (u, n, E), ranges = BV.longs("u n E")
        c = BV.c(0)
        constraints = [ranges, u >= 1, n >= 2, no_overflow_mul(u, n), E >= 0, kafka_chain(u, n, c, E, levels)]
        constraints += [u.eq(1), n.eq(20)] if fixed else [n <= 64]
        answer = find(constraints)
        results.append(answer)
        if answer.status != REFUTED:
            continue
        u_v, n_v, E_v = (BV.value(answer.model, x.raw) for x in (u, n, E))
        kafka = kafka_outcome(u_v, n_v, 0, E_v, 1)
        witness[label] = {"tick_ms": u_v, "wheel_size": n_v, "start_ms": 0, "delay_ms": E_v, "kafka": kafka}
        if fixed:  # where it starts, by execution: the first delay whose chain reaches the wrapped level
            witness[label]["threshold"] = {f"delay {d}": kafka_outcome(1, 20, 0, d, d) for d in (20**14 - 1, 20**14)}
            traces["default_config_threshold"] = timer_trace(
                "specs.wheel.kafka.interval_wraps.default_config_threshold", v.Params(),
                [v.TimerAdd("t", 20**14), v.Size(), v.Advance(1), v.Size(), v.Advance(20**14), v.Size()],
                f"Kafka's defaults (tick 1, wheel 20), delay 20^14 ms: Kafka {kafka_outcome(1, 20, 0, 20**14, 1)}. "
                f"The model runs the task at its deadline.")
        traces[label] = timer_trace(
            f"specs.wheel.kafka.interval_wraps.{label}", v.Params(tick_ms=u_v, wheel_size=n_v, start_ms=0),
            [v.TimerAdd("t", E_v), v.Size(), v.Advance(1), v.Size(), v.Advance(E_v), v.Size()],
            f"z3: tick {u_v}, wheel {n_v}, delay {E_v}: Kafka's overflow chain wraps; Kafka: {kafka}. "
            f"The model places the task on its top level and runs it at its deadline.")
    if any(answer.status != REFUTED for answer in results):
        return verdict(next(a for a in results if a.status != REFUTED), METHOD_BV)
    detail = "; ".join(f"{label}: tick={w['tick_ms']} wheel={w['wheel_size']} delay={w['delay_ms']} -> Kafka "
                       f"{w['kafka']}" for label, w in witness.items())
    detail += "; threshold with the defaults (executed): " + "; ".join(
        f"{d} -> {o}" for d, o in witness["default_config"]["threshold"].items())
    return Outcome(REFUTED, METHOD_BV, detail, witness=witness, traces=traces)


@obligation("wheel.model.top_level_sound", kind="model",
            domain="the model's top level: T in [1, Long.MAX], 2<=n<=Int.MAX, aligned c in [0, Long.MAX], "
                   "c + T*n > Long.MAX (exact), c+T <= E <= Long.MAX", mutant=ROUNDS_UP.bug)
def model_top_level(mutated: bool = False) -> Outcome:
    """The model's choice for the levels where Kafka's interval wraps is sound: in exact arithmetic a level whose
    window c + T*n reaches beyond Long.MAX accepts every expiration E <= Long.MAX that it does not refuse, so no
    level is ever created above it, and its placements have the properties proved for Java levels: index in
    [0, n), c < b <= E, E - T < b, and no aliasing between entries of a live bucket (from the same lemmas, proved
    again in exact arithmetic)."""
    arithmetic = ROUNDS_UP if mutated else KAFKA
    (u, n, c, E), hyps = placement_setting(EXACT, top=True)
    hyps = hyps[:2] + [z3.Not(E < c + u), E <= LONG_MAX]  # top level: the window test is what is being proved
    _, slot, b = arithmetic.place(E, u, n)
    placed = decide(hyps, z3.And(E < c + u * n, slot >= 0, slot < n, c < b, b <= E, E - u < b),
                    METHOD_EXACT + " + lemmas", {"u": u, "n": n, "c": c, "E": E})
    alias, results, ok = aliasing_query(EXACT, top=True, arithmetic=arithmetic)
    return placed if placed.status != PROVED else alias


# ---------------------------------------------------------------------------------------------------------------
# Mutant
# ---------------------------------------------------------------------------------------------------------------


@obligation("mutant.wheel.bucket_rounded_up", kind="mutant", expect=REFUTED,
            domain="placement domain with small values (u<=10, n<=8, c=0, E<=40), QF_BV 64")
def mutant_bucket_rounded_up() -> Outcome:
    """Mutant of wheel.placement.bucket_expiration: the bucket expiration rounded up, ((E + u - 1) / u) * u,
    instead of down. z3 finds an accepted entry whose bucket expiration is after the entry itself (b > E), so the
    mutant runs the task late: the trace adds it and advances to the start of its tick, where the model (and
    Kafka) run it and the mutant does not."""
    (u, n, c, E), ranges = BV.longs("u n c E")
    _, _, b = ROUNDS_UP.place(E, u, n)
    constraints = [ranges, level_domain(u, n, c), accepted(E, c, u, n), u <= 10, n <= 8, c.eq(0), E <= 40,
                   z3.Not(b <= E)]
    answer = find(constraints)
    if answer.status != REFUTED:
        return verdict(answer, METHOD_BV)
    u_v, n_v, c_v, E_v = (BV.value(answer.model, x.raw) for x in (u, n, c, E))
    b_ref, b_mut = PY.mul(PY.div(E_v, u_v), u_v), PY.mul(PY.div(E_v + u_v - 1, u_v), u_v)
    mutant = kafka_outcome(u_v, n_v, c_v, E_v - c_v, b_ref, round_up=True)
    reference = kafka_outcome(u_v, n_v, c_v, E_v - c_v, b_ref)
    trace = timer_trace(
        "specs.mutant.wheel.bucket_rounded_up", v.Params(tick_ms=u_v, wheel_size=n_v, start_ms=c_v),
        [v.TimerAdd("t", E_v - c_v), v.Advance(b_ref), v.Size()],
        f"tick {u_v}: a task due at {E_v} belongs to the bucket starting at {b_ref} and runs at advance({b_ref}); "
        f"with the bucket expiration rounded up to {b_mut} it would not.")
    return Outcome(REFUTED, METHOD_BV,
                   f"u={u_v}, n={n_v}, c={c_v}, E={E_v}: mutant bucket expiration {b_mut} > E; reference b={b_ref}. "
                   f"Kafka emulation at advance({b_ref}): reference {reference}, mutant {mutant}.",
                   witness={"tick_ms": u_v, "wheel_size": n_v, "start_ms": c_v, "expiration": E_v,
                            "bucket_reference": b_ref, "bucket_mutant": b_mut},
                   traces={"counterexample": trace})
