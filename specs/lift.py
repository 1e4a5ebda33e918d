"""Symbolic execution of model/: model/'s own code run on z3 terms, once per feasible path.

model/ is ordinary Python. To prove something about it for every value rather than for listed ones, the proofs
hand it `Int` and `Bool` values that wrap z3 terms: arithmetic and comparisons build terms, and where model/ code
branches on a term (``if``, ``and``, ``not``, ``while``) `Paths` decides the branch. A branch that only one side of
can take under what the path already assumes is taken without a choice; one that both sides can take is a fork:
the run takes one side and the other is explored by running the code again from the start with the same earlier
decisions (model/ is deterministic, so the re-run reaches the same branch). What comes out is every feasible path
through the code: its path condition and whatever the run returned, with terms in it where the values depend on
the inputs. Nothing in model/ is restated or changed; code that needs a concrete value where it got a term (a
list index, a hash, ``int()``) stops the run with `Unliftable`, which names what cannot be lifted.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, TypeVar

import attrs
import z3

T = TypeVar("T")


class Unliftable(Exception):
    """model/ code needed a concrete value where it was given a term."""


class PathLimit(Exception):
    """More feasible paths, or more branches on one path, than the exploration allows."""


#: the exploration a branch on a term is decided by (one at a time: model/ is single-threaded)
_current: list[Paths] = []


def term(x: object) -> z3.ExprRef:
    """Any value a lifted run produces, as a z3 term."""
    if isinstance(x, (Int, Bool)):
        return x.term
    if isinstance(x, z3.ExprRef):
        return x
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    raise Unliftable(f"{type(x).__name__} {x!r} has no z3 term")


class Int:
    """An integer that model/ code computes with: a z3 Int term. Division and remainder are Python's (floor), which
    agree with z3's for a positive divisor, the only kind model/ divides by (a tick or a wheel size); any other
    divisor stops the run."""

    __slots__ = ("term",)

    def __init__(self, t: z3.ArithRef):
        self.term = t

    def __add__(self, other):
        return Int(self.term + term(other))

    __radd__ = __add__

    def __sub__(self, other):
        return Int(self.term - term(other))

    def __rsub__(self, other):
        return Int(term(other) - self.term)

    def __mul__(self, other):
        return Int(self.term * term(other))

    __rmul__ = __mul__

    def __neg__(self):
        return Int(-self.term)

    def __floordiv__(self, other):
        return Int(self.term / positive(other))

    def __mod__(self, other):
        return Int(self.term % positive(other))

    def __lt__(self, other):
        return Bool(self.term < term(other))

    def __le__(self, other):
        return Bool(self.term <= term(other))

    def __gt__(self, other):
        return Bool(self.term > term(other))

    def __ge__(self, other):
        return Bool(self.term >= term(other))

    def __eq__(self, other):
        return Bool(self.term == term(other)) if isinstance(other, (int, Int)) else NotImplemented

    def __ne__(self, other):
        return Bool(self.term != term(other)) if isinstance(other, (int, Int)) else NotImplemented

    def __bool__(self) -> bool:
        return bool(Bool(self.term != 0))

    def __hash__(self):
        raise Unliftable(f"model/ hashes the integer {self.term}, which is a term")

    def __index__(self):
        raise Unliftable(f"model/ indexes by the integer {self.term}, which is a term")

    def __repr__(self) -> str:
        return f"Int({self.term})"


class Bool:
    """A truth value that model/ code branches on: a z3 Bool term, decided by the current exploration."""

    __slots__ = ("term",)

    def __init__(self, t: z3.BoolRef):
        self.term = t

    def __bool__(self) -> bool:
        if not _current:
            raise Unliftable(f"model/ branches on {self.term} outside an exploration")
        return _current[-1].decide(self.term)

    def __hash__(self):
        raise Unliftable(f"model/ hashes the truth value {self.term}, which is a term")

    def __repr__(self) -> str:
        return f"Bool({self.term})"


def positive(divisor: object) -> z3.ArithRef:
    """A divisor model/ uses: it must be positive on this path (model/ never divides by anything else)."""
    if not bool(Bool(term(divisor) > 0)):
        raise Unliftable(f"model/ divides by {term(divisor)}, which may be 0 or negative here")
    return term(divisor)


@attrs.frozen
class Path:
    """One feasible path: the conditions its branches took (beyond the exploration's assumptions), and what the
    run returned on it."""

    conditions: tuple[z3.BoolRef, ...]
    result: object


@attrs.define
class Paths:
    """Every feasible path of a run under ``assumptions``, at most ``limit`` of them, each of at most ``depth``
    branches. Decisions are replayed from a prefix and extended, depth first; each new decision asks z3 which sides
    the path allows."""

    assumptions: list
    limit: int = 100_000
    #: more decisions than this on one path means a loop that does not end on it
    depth: int = 10_000
    solver: z3.Solver = attrs.field(factory=z3.Solver)
    #: the decisions of the current run: (condition, side), replayed up to ``replayed`` and then extended
    decisions: list[tuple[z3.BoolRef, bool]] = attrs.field(factory=list)
    replayed: int = 0
    #: how many decisions the current run has made
    cursor: int = 0
    pending: list[list[tuple[z3.BoolRef, bool]]] = attrs.field(factory=list)
    feasibility_checks: int = 0

    def __attrs_post_init__(self) -> None:
        self.solver.add(*self.assumptions)

    def explore(self, run: Callable[[], T]) -> Iterator[Path]:
        """Run ``run`` once per feasible path, yielding each path as it completes. Assumptions without a model
        would make every path vacuous, so they stop the exploration instead."""
        if self.solver.check() != z3.sat:
            raise Unliftable(f"the assumptions have no model (z3: {self.solver.check()}): nothing would be explored")
        self.pending, explored = [[]], 0
        while self.pending:
            prefix = self.pending.pop()
            explored += 1
            if explored > self.limit:
                raise PathLimit(f"more than {self.limit} feasible paths")
            self.decisions, self.replayed, self.cursor = [], 0, 0
            self.solver.push()
            try:
                for condition, side in prefix:
                    self.decisions.append((condition, side))
                    self.solver.add(condition if side else z3.Not(condition))
                self.replayed = len(prefix)
                with self.current():
                    result = run()
            finally:
                self.solver.pop()
            yield Path(tuple(c if side else z3.Not(c) for c, side in self.decisions), result)

    @contextlib.contextmanager
    def current(self):
        _current.append(self)
        try:
            yield
        finally:
            _current.pop()

    def decide(self, condition: z3.BoolRef) -> bool:
        """The side of a branch this run takes (forking when the path allows both)."""
        simple = z3.simplify(condition)
        if z3.is_true(simple) or z3.is_false(simple):
            return z3.is_true(simple)
        self.cursor += 1
        if self.cursor > self.depth:
            raise PathLimit(f"more than {self.depth} branches on one path: a loop that does not end on it")
        if self.cursor <= self.replayed:
            replayed, side = self.decisions[self.cursor - 1]
            if not replayed.eq(condition):
                raise Unliftable(f"model/ branched on {condition} where an earlier run branched on {replayed}")
            return side
        # the path so far is feasible, so a branch whose one side it rules out takes the other
        sides = [True, False] if self.allows(condition) else [False]
        if sides[0] and not self.allows(z3.Not(condition)):
            sides = [True]
        if len(sides) == 2:
            self.pending.append(self.decisions + [(condition, False)])
        self.decisions.append((condition, sides[0]))
        self.solver.add(condition if sides[0] else z3.Not(condition))
        return sides[0]

    def counterexample(self, claim: z3.BoolRef) -> z3.ModelRef | None:
        """A model of the current path in which ``claim`` is false, or None when the path implies it."""
        self.solver.push()
        self.solver.add(z3.Not(claim))
        try:
            answer = self.solver.check()
            if answer == z3.unknown:
                raise Unliftable(f"z3 cannot decide {claim} on a path: {self.solver.reason_unknown()}")
            return self.solver.model() if answer == z3.sat else None
        finally:
            self.solver.pop()

    def allows(self, condition: z3.BoolRef) -> bool:
        self.feasibility_checks += 1
        self.solver.push()
        self.solver.add(condition)
        answer = self.solver.check()
        self.solver.pop()
        if answer == z3.unknown:
            raise Unliftable(f"z3 cannot decide whether {condition} is feasible: {self.solver.reason_unknown()}")
        return answer == z3.sat
