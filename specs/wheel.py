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

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header, model_trace
from kpurgatory.model import vocabulary as v
from kpurgatory.specs.core import (BOUND, PROVED, REFUTED, Lemma, Outcome, find, minimise, obligation, prove,
                                   verdict, with_lemmas)
from kpurgatory.specs.javalong import (BV, EXACT, INT_MAX, JINT, LONG_MAX, LONG_MIN, OPERATORS, PY, Backend,
                                       BVBackend, JIntBackend, Long, PyBackend, no_overflow_add, no_overflow_mul)

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


def place_rounded_up(E: Long, T: Long, n: Long) -> tuple[Long, Long, Long]:
    """MUTANT: the bucket expiration rounded up to the end of the tick instead of down to its start."""
    vid = (E + T - 1) / T
    return vid, vid % n, vid * T


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
# Supporting: the two encodings of Java longs agree
# ---------------------------------------------------------------------------------------------------------------

BOUNDARY = [LONG_MIN, LONG_MIN + 1, -(2**32), -(2**31) - 1, -(2**31), -21, -2, -1, 0, 1, 2, 3, 20, 2**31 - 1, 2**31,
            2**32, 20**14, 20**15 % 2**63, LONG_MAX - 1, LONG_MAX]


def evaluate_operator(operator: str, width: int, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pairs on which the BV encoding, the JINT encoding (both evaluated by z3) and concrete Java differ."""
    bv, ji, py = BVBackend(width), JIntBackend(width), PyBackend(width)
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
            domain="width 4: all pairs; width 64: boundary values x boundary values + 300 random pairs per operator")
def encodings_agree() -> Outcome:
    """The two z3 encodings of Java's long arithmetic used by the wheel obligations — 64-bit bit-vectors (QF_BV:
    bvadd, bvsub, bvmul, bvsdiv, bvsrem, signed comparisons) and integers with explicit two's-complement wrapping
    (JINT) — compute the same function, and it is Java's: for each of + - * / % < <=, both encodings, evaluated by
    z3, equal a concrete Java evaluation on every pair of a 4-bit width (exhaustively, where the JINT text is the
    same formula with 2^4 for 2^64) and on boundary and random pairs at width 64. A z3 proof over all 64-bit pairs
    does not finish: converting a 64-bit vector to an integer is itself bit-blasted."""
    rng = random.Random(64)
    checked, wrong = 0, []
    small = [(x, y) for x in range(-8, 8) for y in range(-8, 8)]
    for operator in OPERATORS:
        wrong += [(operator, 4, p) for p in evaluate_operator(operator, 4, small)]
        pairs = [(x, y) for x in BOUNDARY for y in BOUNDARY]
        pairs += [(rng.randint(LONG_MIN, LONG_MAX), rng.randint(LONG_MIN, LONG_MAX)) for _ in range(150)]
        pairs += [(rng.randint(0, 2**40), rng.randint(1, 2**20)) for _ in range(150)]
        wrong += [(operator, 64, p) for p in evaluate_operator(operator, 64, pairs)]
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


def placement_setting(backend: Backend, *, top: bool = False):
    (u, n, c, E), ranges = backend.longs(f"u n c E")
    hyps = [ranges, level_domain(u, n, c, top=top), accepted(E, c, u, n), E <= LONG_MAX]
    return (u, n, c, E), hyps


@obligation("wheel.placement.index_in_range", domain=JAVA_DOMAIN + ", c+u<=E<c+u*n")
def placement_index() -> Outcome:
    """An entry the level accepts lands in one of its buckets: the index Kafka computes, (E / u) % n with Java's
    truncating division and sign-following remainder, lies in [0, n). It cannot be negative because an accepted
    expiration is at least c + u > 0, so a negative clock is the only way to Kafka's ArrayIndexOutOfBoundsException
    (§2.6.6), and the domain excludes it as the model does."""
    (u, n, c, E), hyps = placement_setting(JINT)
    _, slot, _ = place(E, u, n)
    return verdict(prove(hyps, z3.And(slot >= 0, slot < n)), METHOD_JINT)


@obligation("wheel.placement.bucket_expiration", domain=JAVA_DOMAIN + ", c+u<=E<c+u*n")
def placement_expiration() -> Outcome:
    """An accepted entry's bucket expiration b = (E / u) * u is the start of the tick containing E: it is after
    the level's clock and no later than the entry, c < b <= E, and less than one tick before it, E - u < b. So the
    bucket is released in the future (never immediately, which would re-insert the entry in a loop) and at most
    u - 1 ms before the entry is due. None of the products or sums wraps in this domain."""
    (u, n, c, E), hyps = placement_setting(JINT)
    _, _, b = place(E, u, n)
    return verdict(prove(hyps, z3.And(c < b, b <= E, E - u < b)), METHOD_JINT)


def aliasing_query(backend: Backend, *, top: bool = False):
    (u, n, c, E1), hyps = placement_setting(backend, top=top)
    (c2, E2), ranges = backend.longs("c2 E2")
    vid1, slot1, b1 = place(E1, u, n)
    vid2, slot2, _ = place(E2, u, n)
    hyps += [ranges, c2 >= c, c2 < b1, (c2 % u).eq(0), level_domain(u, n, c2, top=top), accepted(E2, c2, u, n),
             E2 <= LONG_MAX, slot1.eq(slot2)]
    lem = lemmas(backend, top=top)
    instances = [lem.window(E1, c, u, n), lem.window(E2, c2, u, n), lem.below(c2, vid1, u), lem.mono(c, c2, u),
                 lem.residue(vid1, vid2, n)]
    results, ok = with_lemmas([lem.window, lem.below, lem.mono, lem.residue])
    return prove(hyps + instances, vid1.eq(vid2)), results, ok


@obligation("wheel.placement.no_aliasing",
            domain=JAVA_DOMAIN + "; E1 accepted at clock c, E2 at a later aligned clock c2 < b1 (bucket still live)")
def placement_no_aliasing() -> Outcome:
    """Two entries that share a bucket share its round: if E1 was placed when the level's clock was c, and E2 at
    a clock c2 with c <= c2 < b1 (the bucket has not been released yet, since releasing it moves the clock to b1),
    and both got the same bucket index, then they have the same virtual id. A bucket therefore never mixes entries
    of two rotations of the wheel, so one expiration per bucket is enough. Proved from lemmas on division (window,
    below, mono, residue), each proved by z3 in the same run."""
    answer, results, ok = aliasing_query(JINT)
    return verdict(answer, METHOD_JINT + " + lemmas", results, ok)


# ---------------------------------------------------------------------------------------------------------------
# Refusal, clocks and levels
# ---------------------------------------------------------------------------------------------------------------


@obligation("wheel.refusal.exact",
            domain="level k as in the placement domain, level k+1 created from it (tick T*n, clock c - c%(T*n))")
def refusal_exact() -> Outcome:
    """An entry is refused as expired exactly when E < c1 + u, the test of the finest level: the sum does not wrap
    in the domain, and an entry handed up from level k (because E >= c + T*n) is never refused by level k+1, whose
    tick is T*n and whose clock is c rounded down to that tick. So the only "already expired" verdict is level 1's,
    and it is the stated inequality."""
    (T, n, c, E), ranges = JINT.longs("T n c E")
    upper = c - c % (T * n)
    hyps = [ranges, level_domain(T, n, c), E >= c + T * n, E <= LONG_MAX]
    goal = z3.And(no_overflow_add(c, T), upper >= 0, upper <= c, z3.Not(E < upper + T * n))
    return verdict(prove(hyps, goal), METHOD_JINT)


@obligation("wheel.clock.alignment_inductive",
            domain="t>=1, 2<=n<=Int.MAX, t*n<=Long.MAX, clocks and advance targets <= Long.MAX - t*n")
def clock_alignment() -> Outcome:
    """The clocks of adjacent levels stay aligned: with a fine level (tick t, clock cf) and its overflow level (tick
    T = t*n, clock cc), the invariant "cf >= 0 is a multiple of t and cc = cf - cf % T" holds when the overflow
    level is created (its start is cf) and is preserved by advanceClock(x) for any x: the fine level moves to x
    rounded down to t if x is at least one tick ahead, then passes its new time up, and the coarse level moves if
    that is at least one of its ticks ahead. An inductive invariant, so it holds for every sequence of advances,
    and every level's clock is the level-1 clock rounded down to that level's tick."""
    (t, n, cf, x), ranges = JINT.longs("t n cf x")
    T = t * n
    cc = cf - cf % T
    hyps = [ranges, level_domain(t, n, cf), no_overflow_add(cf, T), x >= 0, no_overflow_add(x, T)]
    cf2 = ite(x >= cf + t, x - x % t, cf)
    cc2 = ite(cf2 >= cc + T, cf2 - cf2 % T, cc)
    goal = z3.And(cf2 >= 0, (cf2 % t).eq(0), cc2.eq(cf2 - cf2 % T), cc2 <= cf2, cf2 < cc2 + T)
    return verdict(prove(hyps, goal), METHOD_JINT)


@obligation("wheel.overflow.climb_ranking",
            domain="any level: T in [1, Long.MAX], 2<=n<=Int.MAX, aligned c>=0, E<=Long.MAX; model arithmetic, and "
                   "Java arithmetic where T*n and c+T*n do not wrap")
def overflow_climb() -> Outcome:
    """Level k has tick u*n^(k-1): each overflow level's tick is the interval of the level below. An entry beyond a
    level (E >= c + T*n) goes up, and the climb is a ranking: the next tick T*n is at least 2T and still at most
    E - c <= Long.MAX, and the entry is not refused there. Ticks therefore double at least at every climb while
    staying representable, so an entry climbs at most 62 times (u*2^62 <= Long.MAX) and the chain of levels is
    bounded by 63. Proved in the model's unbounded arithmetic and in Java's wherever the level's interval and
    window do not wrap; where Kafka's interval does wrap, see wheel.kafka.interval_wraps."""
    results = []
    for backend, java in ((EXACT, False), (JINT, True)):
        (T, n, c, E), ranges = backend.longs("T n c E")
        hyps = [ranges, T >= 1, T <= LONG_MAX, n >= 2, n <= INT_MAX, c >= 0, (c % T).eq(0), E <= LONG_MAX,
                E >= c + T * n]
        if java:
            hyps += [no_overflow_mul(T, n), no_overflow_add(c, T * n)]
        nxt = T * n
        upper = c - c % nxt
        goal = z3.And(nxt >= T + T, nxt <= LONG_MAX, upper >= 0, z3.Not(E < upper + nxt))
        results.append(prove(hyps, goal))
    worst = next((a for a in results if a.status != PROVED), results[0])
    return verdict(worst, "z3 NIA (model) + NIA (Java)")


@obligation("wheel.cascade.ranking",
            domain="a bucket of level k (tick T = t*n, t the tick of level k-1) with aligned b>=0, b+T<=Long.MAX")
def cascade_ranking() -> Outcome:
    """Every cascade moves an entry to a strictly finer level or runs it. When a level-k bucket with expiration b
    is released, the finer clocks advance to b (b is a multiple of every finer tick), and the entry, which lies in
    [b, b + T), is re-inserted from level 1: it fits level k-1's window b + t*n = b + T, so it lands on level k-1
    or lower, or is refused by level 1 and runs; on level k-1 its new bucket is not earlier than b and not later
    than E. The level of an entry (0 once run) is therefore a ranking function; with the finitely many buckets
    queued at or before the target time, advanceClock terminates."""
    (t, n, b, E), ranges = JINT.longs("t n b E")
    T = t * n
    lem = lemmas(JINT)
    hyps = [ranges, t >= 1, n >= 2, n <= INT_MAX, no_overflow_mul(t, n), b >= 0, (b % T).eq(0), no_overflow_add(b, T),
            b <= E, E < b + T, lem.divides(b, t, n)]
    c_fine = b - b % t
    b_new = (E / t) * t
    goal = z3.And(c_fine.eq(b), E < c_fine + T, z3.Implies(z3.Not(E < c_fine + t), z3.And(b <= b_new, b_new <= E)))
    results, ok = with_lemmas([lem.divides])
    return verdict(prove(hyps, goal), METHOD_JINT + " + lemmas", results, ok)


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------


@obligation("wheel.timing.not_early", domain="u>=1, aligned 0<=c<=now, c+u<=Long.MAX, 0<=E")
def timing_not_early() -> Outcome:
    """An entry runs no earlier than b = (E / u) * u, the start of its tick: it runs only when level 1 refuses it
    (on add, or when re-inserted after a release), i.e. when E < c + u for the level-1 clock c, and that clock is
    never ahead of the virtual now (it only moves to released bucket expirations, which are due). So the run time
    is at least b > E - u: at most u - 1 ms early, and exactly at (or after) E when u = 1."""
    (u, c, now, E), ranges = JINT.longs("u c now E")
    hyps = [ranges, u >= 1, c >= 0, (c % u).eq(0), no_overflow_add(c, u), now >= c, E >= 0, E < c + u]
    goal = z3.And(now >= (E / u) * u, now > E - u, z3.Implies(u.eq(1), now >= E))
    return verdict(prove(hyps, goal), METHOD_JINT)


@obligation("wheel.timing.not_late",
            domain="u>=1, level tick T=u*m with m>=1 and T<=Long.MAX, 0<=E<=Long.MAX-u")
def timing_not_late() -> Outcome:
    """An entry runs no later than the first advance whose time is >= b = (E / u) * u: on every level its bucket
    expiration (E / T) * T is at most b (T is a multiple of u), so whichever bucket holds it is due by then, and
    the drain loop of that advance releases every bucket due at its time, including the finer buckets the entry
    cascades into (not earlier than the released one, by wheel.cascade.ranking, and not later than b); when the
    level-1 bucket b is released the clock becomes b and E < b + u, so level 1 refuses the entry and it runs. (Within
    u of Long.MAX the sum b + u itself wraps and Kafka's refusal test fails: that is the window overflow of
    wheel.kafka.interval_wraps, where the model's exact arithmetic takes over.)"""
    (u, m, E), ranges = JINT.longs("u m E")
    T = u * m
    b1, bk = (E / u) * u, (E / T) * T
    lem = lemmas(JINT)
    x = (E / T) * m  # level k's virtual id in units of level-1 ticks
    hyps = [ranges, u >= 1, m >= 1, no_overflow_mul(u, m), E >= 0, no_overflow_add(E, u),
            lem.assoc(E / T, u, m), lem.floor_le(x, E, u), lem.mul_mono(x, E / u, u)]
    goal = z3.And(bk <= b1, b1 <= E, E < b1 + u, bk >= 0)
    results, ok = with_lemmas([lem.assoc, lem.floor_le, lem.mul_mono])
    return verdict(prove(hyps, goal), METHOD_JINT + " + lemmas", results, ok)


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
    return model_trace(Header(trace_id, "timer", params, "kpurgatory.model", description), commands)


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


@obligation("wheel.model.expiration_guard", kind="model",
            domain="now in [0, Long.MAX], delay any long; Java sum (JINT) against the model's exact sum")
def model_expiration_guard() -> Outcome:
    """The model accepts timer_add/watch exactly when now + delay <= Long.MAX in exact arithmetic. On every
    accepted input Java's wrapping sum equals the exact one (so the model and Kafka agree there), and on every
    rejected input Java's sum is negative (so the rejected inputs are exactly those where Kafka would run the task
    at once because of wrapping). Negative delays never wrap from a non-negative now."""
    (now, delay), ranges = JINT.longs("now delay")
    java = now + delay
    exact = now.raw + delay.raw
    goal = z3.And(z3.Implies(exact <= LONG_MAX, java.raw == exact), z3.Implies(exact > LONG_MAX, java < 0),
                  exact >= LONG_MIN)
    return verdict(prove([ranges, now >= 0], goal), "z3 NIA (Java vs exact)")


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
                   "c + T*n > Long.MAX (exact), c+T <= E <= Long.MAX")
def model_top_level() -> Outcome:
    """The model's choice for the levels where Kafka's interval wraps is sound: in exact arithmetic a level whose
    window c + T*n reaches beyond Long.MAX accepts every expiration E <= Long.MAX that it does not refuse, so no
    level is ever created above it, and its placements have the properties proved for Java levels: index in
    [0, n), c < b <= E, E - T < b, and no aliasing between entries of a live bucket (from the same lemmas, proved
    again in exact arithmetic)."""
    (u, n, c, E), hyps = placement_setting(EXACT, top=True)
    hyps = hyps[:2] + [z3.Not(E < c + u), E <= LONG_MAX]  # top level: the window test is what is being proved
    _, slot, b = place(E, u, n)
    placed = prove(hyps, z3.And(E < c + u * n, slot >= 0, slot < n, c < b, b <= E, E - u < b))
    alias, results, ok = aliasing_query(EXACT, top=True)
    worst = placed if placed.status != PROVED else alias
    return verdict(worst, METHOD_EXACT + " + lemmas", results, ok)


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
    _, _, b = place_rounded_up(E, u, n)
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
