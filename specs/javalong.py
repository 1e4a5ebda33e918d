"""Java's ``long`` arithmetic, written once and handed to z3 in the theory that suits each obligation.

Kafka's wheel is Java code over 64-bit signed integers: ``+``, ``-`` and ``*`` wrap modulo 2^64, ``/`` truncates
toward zero and ``%`` takes the sign of the dividend (JLS §15.17.2, §15.18.2). The obligations in `wheel` are
written against the class `Long` below, whose operators mean exactly that, and one *backend* decides what the
operators build:

``BV``      z3 bit-vectors of width 64: ``bvadd``, ``bvmul``, ``bvsdiv``, ``bvsrem`` and signed comparisons. This is
            the literal encoding. z3 bit-blasts it, which is quick for additions and comparisons and for *finding*
            models (every counterexample in specs/ is found here), but hopeless for *proving* facts that tie a
            product to a quotient: ``(E / u) * u <= E`` does not finish in 120 s at width 64, and needs 24 s at
            width 16.
``JINT``    the same 64-bit semantics over z3's unbounded integers: every result is wrapped explicitly into
            [-2^63, 2^63) (``wrap``), division truncates, the remainder follows the dividend. z3's arithmetic
            solver proves the nonlinear obligations in this form in well under a second each.
``EXACT``   unbounded integers without wrapping: the model's Python arithmetic (model/timer.py), used for the
            obligations about the model's own choices where it deliberately departs from Java.
``PY``      concrete Java arithmetic on Python ints, for checking the models z3 returns and for the Kafka
            emulation in `wheel.KafkaWheel`.

Why the proofs can be trusted: the JINT operators are proved equal to Java's definitions (`java_definition`, JLS
§15.17-15.20 written as integer specifications: a sum, difference or product is the representable value congruent
to the exact one modulo 2^64; a quotient is truncated toward zero with Long.MIN / -1 = Long.MIN; a remainder has the
dividend's sign, is smaller than the divisor in magnitude and differs from the dividend by a multiple of it), for
all 64-bit operands, by z3 (obligation java.integer_encoding). The BV encoding is only used to *find* models, and
every model it returns is re-evaluated in concrete Java arithmetic (`PY`) before it is reported; its agreement with
JINT is checked on a sample (java.encodings_agree), not proved.
"""

from __future__ import annotations

from typing import Callable

import z3

WIDTH = 64
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class Backend:
    """How `Long` operators are built. Subclasses fix a theory; ``width`` is 64 except in the 4-bit sample of
    java.encodings_agree."""

    name = "abstract"

    def __init__(self, width: int = WIDTH):
        self.width = width
        self.min = -(2 ** (width - 1))
        self.max = 2 ** (width - 1) - 1

    # to be provided: var, const, add, sub, mul, div, rem, lt, le, eq, no_overflow_add, no_overflow_mul, value

    def long(self, name: str) -> tuple[Long, object]:
        """A fresh symbolic long and the constraint that keeps it in range (True where the sort already does)."""
        raw = self.var(name)
        return Long(self, raw), self.in_range(raw)

    def longs(self, names: str) -> tuple[list[Long], object]:
        pairs = [self.long(name) for name in names.split()]
        return [value for value, _ in pairs], z3.And([bound for _, bound in pairs])

    def c(self, value: int) -> Long:
        return Long(self, self.const(value))


class BVBackend(Backend):
    name = "QF_BV (64-bit bit-vectors)"

    def var(self, name):
        return z3.BitVec(name, self.width)

    def in_range(self, raw):
        return z3.BoolVal(True)

    def const(self, value):
        return z3.BitVecVal(value, self.width)

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def mul(self, a, b):
        return a * b

    def div(self, a, b):
        return a / b  # z3py: bvsdiv, truncating like Java

    def rem(self, a, b):
        return z3.SRem(a, b)  # NOT z3py's %, which is bvsmod (sign of the divisor)

    def lt(self, a, b):
        return a < b  # signed

    def le(self, a, b):
        return a <= b

    def eq(self, a, b):
        return a == b

    def no_overflow_add(self, a, b):
        return z3.And(z3.BVAddNoOverflow(a, b, True), z3.BVAddNoUnderflow(a, b))

    def no_overflow_mul(self, a, b):
        return z3.And(z3.BVMulNoOverflow(a, b, True), z3.BVMulNoUnderflow(a, b))

    def value(self, model, raw) -> int:
        return model.eval(raw, model_completion=True).as_signed_long()

    def to_int(self, raw):
        return z3.BV2Int(raw, is_signed=True)


class JIntBackend(Backend):
    """Java semantics over z3 integers. Each operation has a fast path (operands in the common domain, result in
    range) that z3 can use without reasoning about the modulus, and the exact two's-complement formula otherwise."""

    name = "NIA (64-bit Java semantics over integers)"

    def var(self, name):
        return z3.Int(name)

    def in_range(self, raw):
        return z3.And(raw >= self.min, raw <= self.max)

    def const(self, value):
        return z3.IntVal(value)

    def wrap(self, x):
        span = 2 ** self.width
        return z3.If(z3.And(x >= self.min, x <= self.max), x, (x - self.min) % span + self.min)

    def add(self, a, b):
        return self.wrap(a + b)

    def sub(self, a, b):
        return self.wrap(a - b)

    def mul(self, a, b):
        return self.wrap(a * b)

    @staticmethod
    def _sign(x):
        return z3.If(x >= 0, 1, -1)

    @staticmethod
    def _abs(x):
        return z3.If(x >= 0, x, -x)

    def div(self, a, b):
        # truncation toward zero; MIN / -1 wraps to MIN; division by zero is left unspecified (Java throws)
        general = self.wrap(self._sign(a) * self._sign(b) * (self._abs(a) / self._abs(b)))
        return z3.If(z3.And(a >= 0, b > 0), a / b, general)

    def rem(self, a, b):
        general = self._sign(a) * (self._abs(a) % self._abs(b))
        return z3.If(z3.And(a >= 0, b > 0), a % b, general)

    def lt(self, a, b):
        return a < b

    def le(self, a, b):
        return a <= b

    def eq(self, a, b):
        return a == b

    def no_overflow_add(self, a, b):
        return z3.And(a + b >= self.min, a + b <= self.max)

    def no_overflow_mul(self, a, b):
        return z3.And(a * b >= self.min, a * b <= self.max)

    def value(self, model, raw) -> int:
        return model.eval(raw, model_completion=True).as_long()

    def to_int(self, raw):
        return raw


class ExactBackend(JIntBackend):
    """Unbounded integers, as the model computes in Python. Variables still range over longs (every input of the
    model is one); only the operations do not wrap."""

    name = "NIA (unbounded integers, the model's arithmetic)"

    def wrap(self, x):
        return x

    # Signs are chosen by If, never multiplied in as in JINT: a product of two terms makes z3 treat the whole query
    # as nonlinear even with a constant divisor (the symbolic wheel's queries, 10-100x slower).
    def div(self, a, b):
        q = self._abs(a) / self._abs(b)
        return z3.If(z3.And(a >= 0, b > 0), a / b, z3.If((a >= 0) == (b > 0), q, -q))

    def rem(self, a, b):
        r = self._abs(a) % self._abs(b)
        return z3.If(z3.And(a >= 0, b > 0), a % b, z3.If(a >= 0, r, -r))


class PyBackend(Backend):
    """Concrete Java arithmetic. Comparisons return Python bools, so `Long` values compose with plain ``if``."""

    name = "concrete Java longs"

    def var(self, name):
        raise TypeError("the concrete backend has no variables")

    def in_range(self, raw):
        return self.min <= raw <= self.max

    def const(self, value):
        return self.wrap(value)

    def wrap(self, x: int) -> int:
        span = 2 ** self.width
        return (x - self.min) % span + self.min

    def add(self, a, b):
        return self.wrap(a + b)

    def sub(self, a, b):
        return self.wrap(a - b)

    def mul(self, a, b):
        return self.wrap(a * b)

    def div(self, a, b):
        if b == 0:
            raise ZeroDivisionError("java.lang.ArithmeticException: / by zero")
        q = abs(a) // abs(b)
        return self.wrap(q if (a >= 0) == (b > 0) else -q)

    def rem(self, a, b):
        if b == 0:
            raise ZeroDivisionError("java.lang.ArithmeticException: / by zero")
        r = abs(a) % abs(b)
        return r if a >= 0 else -r

    def lt(self, a, b):
        return a < b

    def le(self, a, b):
        return a <= b

    def eq(self, a, b):
        return a == b


BV = BVBackend()
JINT = JIntBackend()
EXACT = ExactBackend()
PY = PyBackend()


class Long:
    """A Java ``long`` in one backend. ``+ - *`` wrap, ``/`` truncates, ``%`` is Java's remainder; comparisons give
    z3 booleans (or Python bools in the concrete backend). Plain ints are promoted to constants."""

    __slots__ = ("backend", "raw")

    def __init__(self, backend: Backend, raw):
        self.backend, self.raw = backend, raw

    def _other(self, other) -> object:
        if isinstance(other, Long):
            return other.raw
        return self.backend.const(other)

    def _op(self, name: str, other, swap: bool = False) -> Long:
        a, b = self.raw, self._other(other)
        if swap:
            a, b = b, a
        return Long(self.backend, getattr(self.backend, name)(a, b))

    def __add__(self, other):
        return self._op("add", other)

    def __radd__(self, other):
        return self._op("add", other, swap=True)

    def __sub__(self, other):
        return self._op("sub", other)

    def __rsub__(self, other):
        return self._op("sub", other, swap=True)

    def __mul__(self, other):
        return self._op("mul", other)

    def __rmul__(self, other):
        return self._op("mul", other, swap=True)

    def __truediv__(self, other):
        return self._op("div", other)

    def __mod__(self, other):
        return self._op("rem", other)

    def __lt__(self, other):
        return self.backend.lt(self.raw, self._other(other))

    def __le__(self, other):
        return self.backend.le(self.raw, self._other(other))

    def __gt__(self, other):
        return self.backend.lt(self._other(other), self.raw)

    def __ge__(self, other):
        return self.backend.le(self._other(other), self.raw)

    def eq(self, other):
        return self.backend.eq(self.raw, self._other(other))

    def ne(self, other):
        equal = self.eq(other)
        return (not equal) if isinstance(equal, bool) else z3.Not(equal)

    def __repr__(self) -> str:
        return f"Long({self.raw})"


def no_overflow_add(a: Long, b: Long | int):
    """The mathematical sum a + b is a long (Java's + does not wrap)."""
    return a.backend.no_overflow_add(a.raw, a._other(b))


def no_overflow_mul(a: Long, b: Long | int):
    """The mathematical product a * b is a long (Java's * does not wrap)."""
    return a.backend.no_overflow_mul(a.raw, a._other(b))


# ---------------------------------------------------------------------------------------------------------------
# The two encodings agree
# ---------------------------------------------------------------------------------------------------------------

OPERATORS: dict[str, Callable[[Long, Long], object]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "%": lambda a, b: a % b,
}


def agreement_query(operator: str, width: int) -> object:
    """The negation of: for all bit-vectors a, b (b != 0 for / and %), the JINT result on their integer values is
    the integer value of the BV result. Unsat means the encodings agree for this operator at this width."""
    bv, ji = BVBackend(width), JIntBackend(width)
    a_bits, b_bits = z3.BitVec(f"a{width}", width), z3.BitVec(f"b{width}", width)
    a_int, b_int = bv.to_int(a_bits), bv.to_int(b_bits)
    apply = OPERATORS[operator]
    through_bv = apply(Long(bv, a_bits), Long(bv, b_bits))
    through_int = apply(Long(ji, a_int), Long(ji, b_int))
    if isinstance(through_bv, Long):
        same = bv.to_int(through_bv.raw) == through_int.raw
    else:
        same = through_bv == through_int
    side = b_bits != 0 if operator in ("/", "%") else z3.BoolVal(True)
    return z3.And(side, z3.Not(same))


# ---------------------------------------------------------------------------------------------------------------
# Java's definitions, as integer specifications
# ---------------------------------------------------------------------------------------------------------------


def java_definition(operator: str, a, b, r, width: int = WIDTH):
    """Java's definition of ``r = a <operator> b`` on the integer values of two longs, for b != 0 where it divides:
    not how to compute it, but what the result must satisfy (each determines r uniquely)."""
    span, low, high = 2**width, -(2 ** (width - 1)), 2 ** (width - 1) - 1
    if operator in ("<", "<="):
        return r == (a < b if operator == "<" else a <= b)
    representable = z3.And(r >= low, r <= high)

    def congruent(exact):  # JLS 15.18.2, 15.17.1: the low-order bits of the exact result, in two's complement
        return z3.And(representable, (exact - r) % span == 0)

    def magnitude(x):
        return z3.If(x >= 0, x, -x)

    if operator in ("+", "-", "*"):
        return congruent({"+": a + b, "-": a - b, "*": a * b}[operator])
    if operator == "/":  # JLS 15.17.2: round toward zero; the one overflow, MIN / -1, gives MIN
        truncated = z3.And(magnitude(b) * magnitude(r) <= magnitude(a),
                           magnitude(a) < magnitude(b) * (magnitude(r) + 1),
                           z3.Or(r == 0, (r > 0) == ((a > 0) == (b > 0))))
        return z3.If(z3.And(a == low, b == -1), r == low, z3.And(representable, truncated))
    # JLS 15.17.3: sign of the dividend, smaller than the divisor, a - r a multiple of b
    return z3.And(magnitude(r) < magnitude(b), z3.Or(r == 0, (r > 0) == (a > 0)), (a - r) % magnitude(b) == 0)


def multiple_lemma(x, m):
    """For x >= 0 and m >= 1, x - x % m and its negation are multiples of m (z3's integer %, the floor modulo)."""
    return z3.Implies(z3.And(x >= 0, m >= 1), z3.And((x - x % m) % m == 0, (x % m - x) % m == 0))


def definition_query(backend: Backend, operator: str):
    """(hypotheses, goal): for all longs a, b (b != 0 for / and %), ``backend``'s result meets Java's definition.
    The remainder's query gets `multiple_lemma` instantiated at |a| and |b| (the lemma is proved on its own)."""
    (a, b), ranges = backend.longs(f"{operator}.a {operator}.b")
    result = OPERATORS[operator](a, b)
    raw = result.raw if isinstance(result, Long) else result
    hypotheses = [ranges]
    if operator in ("/", "%"):
        hypotheses.append(b.ne(0))
    if operator == "%":
        hypotheses.append(multiple_lemma(z3.If(a.raw >= 0, a.raw, -a.raw), z3.If(b.raw >= 0, b.raw, -b.raw)))
    return hypotheses, java_definition(operator, a.raw, b.raw, raw, backend.width)


class FloorRemainderBackend(JIntBackend):
    """MUTANT of JINT: the remainder takes the divisor's sign (a floor modulo, what z3py's % means on bit-vectors)
    instead of the dividend's."""

    def rem(self, a, b):
        return z3.If(b > 0, a % b, -((-a) % (-b)))


class SignedModuloBVBackend(BVBackend):
    """MUTANT of BV: z3py's % on bit-vectors (bvsmod, the divisor's sign) for Java's remainder."""

    def rem(self, a, b):
        return a % b
