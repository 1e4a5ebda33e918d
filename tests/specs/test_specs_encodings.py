"""Java long semantics in the three encodings."""

import random

import z3

from kpurgatory.specs.javalong import LONG_MAX, LONG_MIN, OPERATORS, PY
from kpurgatory.specs.wheel import evaluate_operator


def test_encodings_agree_on_more_random_64_bit_pairs():
    rng = random.Random(5)
    pairs = [(rng.randint(LONG_MIN, LONG_MAX), rng.choice([rng.randint(LONG_MIN, LONG_MAX), rng.randint(-9, 9)]))
             for _ in range(200)]
    for operator in OPERATORS:
        assert evaluate_operator(operator, 64, pairs) == []


def test_concrete_java_arithmetic():
    assert PY.add(LONG_MAX, 1) == LONG_MIN
    assert PY.div(-7, 2) == -3 and PY.rem(-7, 2) == -1 and PY.rem(7, -2) == 1
    assert PY.div(LONG_MIN, -1) == LONG_MIN and PY.rem(LONG_MIN, -1) == 0
    assert PY.mul(20**14, 20) == (20**15 + 2**63) % 2**64 - 2**63 < 0  # level 15 of the default wheel


def test_z3py_percent_is_not_java_remainder():
    """The pitfall the BV backend avoids: z3py's % on bit-vectors is bvsmod (sign of the divisor)."""
    a, b = z3.BitVecVal(7, 64), z3.BitVecVal(-2, 64)
    assert z3.simplify(a % b).as_signed_long() == -1
    assert z3.simplify(z3.SRem(a, b)).as_signed_long() == PY.rem(7, -2) == 1
