"""The purgatory's step for any number of operations and keys, and its projection onto one of each.

`purgatory.step` is written as loops over the ops and keys. In a *uniform run* every such loop runs its body once,
on a symbolic op ``O`` and key ``J`` that stand for each of them, over a state whose per-op and per-key fields are
arrays (`Arrays`) and whose numbers of ops and keys are symbolic:

  * a field written by a loop body at its own index (an op field at ``O``, an entry count at ``(J, O)``) becomes that
    body, read at any index by substitution; this is the loop's result for every op (key) at once;
  * a value that depends on a loop variable it is not indexed by (numDelayed, the counters, the watchers map: sums
    over the ops) is an accumulation over the loop, and becomes unknown: the other ops' business;
  * a value a loop carries from one op's iteration to the next is declared with `purgatory.carried`, and is unknown;
  * a sum over the keys (how many entries an op has, a watch's multiplicities) is `TOTAL` of a row, a function z3
    knows by its recursive definition; `key_total` rewrites sums of the shapes the step builds by `SUM_LEMMAS`, each
    proved for every number of keys by induction.

What is trusted is the reading of the loops: that each runs its body for each op and key alike, and that the only
values carried between iterations are the declared ones. `agrees_with_the_loops` checks it where it can be checked:
the uniform body, read at each op and key of a 3 × 3 purgatory, is exactly what the loops compute there.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

import attrs
import z3

from kpurgatory.specs import core
from kpurgatory.specs import purgatory as spec
from kpurgatory.specs.core import PROVED, REFUTED, Bound, Outcome, obligation
from kpurgatory.specs.purgatory import (
    BOOL_OP, INT_OP, KIND_NAMES, MAX_READY_ON, MUTANTS, OTHERS_ABSTRACTED, SHAPE, And, Cmd, Eq, If, Implies, Not, Or,
)


def TOTAL(row, count):
    """The sum of row[0] .. row[count - 1]: a recursive function of z3's, defined once per z3 context."""
    context = z3.main_ctx()
    if not hasattr(context, "kpurgatory_total"):
        ints = z3.IntSort()
        total = z3.RecFunction("total", z3.ArraySort(ints, ints), ints, ints)
        r, n = z3.Array("row", ints, ints), z3.Int("count")
        z3.RecAddDefinition(total, [r, n], z3.If(n <= 0, 0, total(r, n - 1) + r[n - 1]))
        context.kpurgatory_total = total
    return context.kpurgatory_total(row, count)


# ---------------------------------------------------------------------------------------------------------------
# Sums over any number of keys
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class SumLemma:
    name: str
    words: str
    #: the statement for ``n`` keys (n >= 0), over rows a and b, numbers c and e, a condition p and the key j
    claim: Callable[..., z3.BoolRef]

    def proved(self) -> str:
        """By induction on the number of keys: for none, and from n to n + 1 (z3 unfolds TOTAL once)."""
        ints = z3.IntSort()
        a, b = z3.Array("a", ints, ints), z3.Array("b", ints, ints)
        terms = dict(a=a, b=b, c=z3.Int("c"), e=z3.Int("e"), p=z3.Bool("p"), j=z3.Int("j"))
        n = z3.Int("n")
        base = core.prove([], self.claim(z3.IntVal(0), **terms))
        if base.status != PROVED:
            return base.status
        return core.prove([n >= 0, self.claim(n, **terms)], self.claim(n + 1, **terms)).status


def _row(j, body):
    return z3.Lambda([j], body)


SUM_LEMMAS = (
    SumLemma("linear", "the sum of a + b is the sum of a plus the sum of b",
             lambda n, a, b, j, **_: TOTAL(_row(j, a[j] + b[j]), n) == TOTAL(a, n) + TOTAL(b, n)),
    SumLemma("difference", "the sum of a - b is the sum of a minus the sum of b",
             lambda n, a, b, j, **_: TOTAL(_row(j, a[j] - b[j]), n) == TOTAL(a, n) - TOTAL(b, n)),
    SumLemma("scaled", "the sum of c * a is c times the sum of a",
             lambda n, a, c, j, **_: TOTAL(_row(j, c * a[j]), n) == c * TOTAL(a, n)),
    SumLemma("constant", "the sum of a constant c over n keys is c * n",
             lambda n, c, j, **_: TOTAL(_row(j, c), n) == c * n),
    SumLemma("case", "the sum of (p ? a : b), p the same for every key, is p ? sum a : sum b",
             lambda n, a, b, p, j, **_: TOTAL(_row(j, z3.If(p, a[j], b[j])), n)
             == z3.If(p, TOTAL(a, n), TOTAL(b, n))),
    SumLemma("point", "the sum of (key = e ? a : b) is the sum of b, plus a - b at e if e is one of the keys",
             lambda n, a, b, e, j, **_: TOTAL(_row(j, z3.If(j == e, a[j], b[j])), n)
             == TOTAL(b, n) + z3.If(z3.And(0 <= e, e < n), a[e] - b[e], 0)),
    SumLemma("non_negative", "a sum of non-negative numbers is non-negative",
             lambda n, a, j, **_: z3.Implies(z3.ForAll([j], a[j] >= 0), TOTAL(a, n) >= 0)),
)


def mentions(term, variable) -> bool:
    """Does ``term`` contain ``variable`` (a constant)?"""
    if not z3.is_expr(term):
        return False
    seen, todo = set(), [term]
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_const(t) and t.eq(variable):
            return True
        todo.extend([t.body()] if z3.is_quantifier(t) else t.children())
    return False


def key_total(term, key, count):
    """The sum of ``term`` (over ``key``) for every key below ``count``: TOTAL of the row it describes, rewritten
    by SUM_LEMMAS where the term has the shape of one (so that the sums of a state and of its successor meet)."""
    if not mentions(term, key):
        return term * count  # constant
    if z3.is_add(term):  # linear
        return spec.Sum(key_total(x, key, count) for x in term.children())
    if z3.is_sub(term):  # difference
        first, *rest = term.children()
        return key_total(first, key, count) - spec.Sum(key_total(x, key, count) for x in rest)
    if z3.is_mul(term) and len(term.children()) == 2:  # scaled
        x, y = term.children()
        if not mentions(x, key):
            return x * key_total(y, key, count)
        if not mentions(y, key):
            return y * key_total(x, key, count)
    if z3.is_app_of(term, z3.Z3_OP_UMINUS):  # scaled by -1
        return -key_total(term.arg(0), key, count)
    if z3.is_app_of(term, z3.Z3_OP_ITE):
        condition, x, y = term.children()
        if not mentions(condition, key):  # case
            return z3.If(condition, key_total(x, key, count), key_total(y, key, count))
        if z3.is_eq(condition):  # point
            left, right = condition.children()
            at = right if left.eq(key) else left if right.eq(key) else None
            if at is not None and not mentions(at, key):
                jump = z3.substitute(x - y, (key, at))
                return key_total(y, key, count) + z3.If(z3.And(0 <= at, at < count), jump, 0)
    return TOTAL(z3.Lambda([key], term), count)


# ---------------------------------------------------------------------------------------------------------------
# The uniform run
# ---------------------------------------------------------------------------------------------------------------


@attrs.define
class Uniform:
    """Any number of ops (``ops``) and keys (``keys``); ``op`` and ``key`` the loops' symbolic op and key."""

    ops: z3.ArithRef = attrs.field(factory=lambda: z3.Int("N"))
    keys: z3.ArithRef = attrs.field(factory=lambda: z3.Int("K"))
    op: z3.ArithRef = attrs.field(factory=lambda: z3.Int("O"))
    key: z3.ArithRef = attrs.field(factory=lambda: z3.Int("J"))

    def key_sum(self, term):
        return key_total(term(self.key), self.key, self.keys)

    def unknown(self, value):
        return z3.FreshBool("carried") if isinstance(value, bool) or z3.is_bool(value) else z3.FreshInt("carried")


@contextlib.contextmanager
def uniformly():
    """Run purgatory.step's loops uniformly (see the module's docstring) inside the block."""
    saved, SHAPE.uniform = SHAPE.uniform, Uniform()
    try:
        yield SHAPE.uniform
    finally:
        SHAPE.uniform = saved


@attrs.frozen
class Written:
    """A field as written by a loop body: one term over the loop's variables, read at any index by substitution."""

    variables: tuple
    body: object

    def at(self, index: tuple):
        pairs = [(v, i if z3.is_expr(i) else z3.IntVal(i)) for v, i in zip(self.variables, index)
                 if not (z3.is_expr(i) and i.eq(v))]
        return z3.substitute(self.body, *pairs) if pairs and z3.is_expr(self.body) else self.body


def _same(index: tuple, variables: tuple) -> bool:
    return len(index) == len(variables) and all(z3.is_expr(i) and i.eq(v) for i, v in zip(index, variables))


class Arrays:
    """A purgatory state of any size: the globals as terms, every per-op and per-key field as an array or as the
    body a loop wrote; `unknown` names the fields that became the other ops' business (see the module)."""

    def __init__(self, uniform: Uniform, fields: dict, unknown: frozenset = frozenset()):
        self.uniform, self.fields, self.unknown = uniform, fields, unknown

    @classmethod
    def symbolic(cls, uniform: Uniform, tag: str) -> Arrays:
        fields = {}
        for name in spec.GLOBAL:
            fields[name] = z3.Int(f"{name}@{tag}")
        for name, indices in cls.indices_of(uniform).items():
            value = z3.BoolSort() if spec.is_bool_key((name,)) else z3.IntSort()
            fields[name] = z3.Array(f"{name}@{tag}", *[z3.IntSort()] * len(indices), value)
        return cls(uniform, fields)

    @staticmethod
    def indices_of(uniform: Uniform) -> dict[str, tuple]:
        """The loop variables each per-op or per-key field is indexed by."""
        op, key = uniform.op, uniform.key
        return {**{name: (op,) for name in BOOL_OP + INT_OP}, "cnt": (key, op), "watched_on": (key, op),
                "present": (key,)}

    def copy(self) -> Arrays:
        return Arrays(self.uniform, dict(self.fields), self.unknown)

    def __getitem__(self, key: tuple):
        name, *index = key
        value = self.fields[name]
        if isinstance(value, Written):
            return value.at(tuple(index))
        return value[tuple(index)] if index else value

    def __setitem__(self, key: tuple, value) -> None:
        name, *index = key
        variables = self.indices_of(self.uniform).get(name, ())
        if not _same(tuple(index), variables):
            raise ValueError(f"a uniform run writes {name} at {index}, not at its loop's index {variables}")
        loops = (self.uniform.op, self.uniform.key)
        if any(mentions(value, v) for v in loops if not any(v.eq(w) for w in variables)):
            # an accumulation over a loop the field is not indexed by: the other ops' (keys') business
            self.unknown |= {name}
            element = _sort_of(value)
            self.fields[name] = z3.FreshConst(z3.ArraySort(*[z3.IntSort()] * len(variables), element) if variables
                                              else element, name)
            return
        self.fields[name] = Written(variables, value) if variables else value


def _sort_of(value):
    return value.sort() if z3.is_expr(value) else z3.BoolSort() if isinstance(value, bool) else z3.IntSort()


def uniform_cmd(kind: int, tag: str) -> Cmd:
    """A command of ``kind`` with every other field symbolic; the watch's multiplicities an array over the keys."""
    return Cmd(kind, z3.Int(f"op@{tag}"), z3.Int(f"key@{tag}"), z3.Array(f"mult@{tag}", z3.IntSort(), z3.IntSort()),
               z3.Int(f"delay@{tag}"), z3.Int(f"ready_on@{tag}"), z3.Int(f"to@{tag}"), z3.Bool(f"purge@{tag}"))


#: the kinds that name an op: their step leaves every other op's projection as it was
OP_KINDS = (spec.WATCH, spec.SET_READY, spec.FORCE, spec.TRY, spec.CANCEL)


def projected_keys() -> list[tuple]:
    """The small (1 op, 1 key + the rest) state's fields that a projection determines: the clock, the purge
    interval, every field of the op, its entries on the tracked key and on the rest, and whether it is watched on
    the tracked key. The rest are the other ops' business (estimate, counters, the watchers map, the rest's
    watched_on); no transition reads them to decide anything about the op, which the obligation checks by leaving
    them free."""
    return [("now",), ("P",), *[(name, 0) for name in BOOL_OP + INT_OP], ("cnt", 0, 0), ("cnt", 1, 0),
            ("watched_on", 0, 0)]


def projection(u: Uniform, s: Arrays, o, k) -> dict:
    """The small system's state seen from op o and key k: the op's fields, its entries on k and on every other key
    (summed), whether it is watched on k."""
    row = u.key_sum(lambda j: s[("cnt", j, o)])
    view = {("now",): s[("now",)], ("P",): s[("P",)], ("cnt", 0, 0): s[("cnt", k, o)],
            ("cnt", 1, 0): row - s[("cnt", k, o)], ("watched_on", 0, 0): s[("watched_on", k, o)]}
    view.update({(name, 0): s[(name, o)] for name in BOOL_OP + INT_OP})
    return view


def projected_cmd(u: Uniform, s: Arrays, c: Cmd, o, k) -> Cmd:
    """The command as op o and key k see it: a check or cancelForKey of another key is one of the rest, visiting
    the op's entries there; a watch lists the op on k and on the rest."""
    others = u.key_sum(lambda j: c.mult[j]) - c.mult[k]
    return Cmd(c.kind, 0, If(Eq(c.key, k), 0, 1), (c.mult[k], others), c.delay, c.ready_on, c.to, c.purge,
               (If(Eq(c.key, k), 0, s[("cnt", c.key, o)]),))


def well_formed(u: Uniform, s: Arrays, c: Cmd, o, k) -> list:
    """What the square assumes: at least one op and key, the tracked ones among them, a well-formed command, and
    facts of every reachable state: the op's purge ghost entries are in the timer, and entry counts and
    multiplicities are non-negative — used through their consequences here, by the lemmas `point` and
    `non_negative` (the sum over all keys but k, and but k and the command's key, of non-negative numbers)."""
    def excluding(row_at, *keys) -> list:
        """The sum of row_at over every key but ``keys``: non-negative (`non_negative`), and equal to its rewriting
        by `point` in terms of the whole row."""
        body = row_at(u.key)
        for x in keys:
            body = If(Eq(u.key, x), 0, body)
        whole = TOTAL(z3.Lambda([u.key], body), u.keys)
        return [whole >= 0, whole == key_total(body, u.key, u.keys)]

    entries = lambda j: s[("cnt", j, o)]  # noqa: E731
    return [u.ops >= 1, u.keys >= 1, 0 <= o, o < u.ops, 0 <= k, k < u.keys,
            0 <= c.op, c.op < u.ops, 0 <= c.key, c.key < u.keys,
            c.delay >= 1, 0 <= c.ready_on, c.ready_on <= MAX_READY_ON, c.to >= s[("now",)],
            u.key_sum(lambda j: c.mult[j]) >= 1,
            Implies(Or(*[c.kind == kind for kind in (spec.SET_READY, spec.FORCE, spec.TRY, spec.CANCEL)]),
                    s[("created", c.op)]),
            Implies(Or(s[("entry_new", o)], s[("entry_old", o)]), s[("in_timer", o)]),
            entries(k) >= 0, entries(c.key) >= 0, c.mult[k] >= 0,
            *excluding(lambda j: c.mult[j], k), *excluding(entries, k, c.key)]


#: how many times a counterexample's sum is unfolded (the model evaluates TOTAL one key at a time)
UNFOLDINGS = 64


def _shown(model: z3.ModelRef, term):
    """A term's value in a counterexample ('?' for a sum over more keys than UNFOLDINGS)."""
    value = term
    for _ in range(UNFOLDINGS):
        value = z3.simplify(model.eval(value, model_completion=True))
        if z3.is_int_value(value):
            return value.as_long()
        if z3.is_true(value) or z3.is_false(value):
            return z3.is_true(value)
    return "?"


def commutes(kind: int, mutants: frozenset) -> tuple[str, str]:
    """Does projecting onto a symbolic op o and key k commute with a step of ``kind``, for any number of ops and
    keys (a command naming another op stutters)? The status, and for a counterexample the command and the fields
    where the two sides differ."""
    with uniformly() as u:
        s, c = Arrays.symbolic(u, "s"), uniform_cmd(kind, "c")
        o, k = z3.Int("o"), z3.Int("k")
        n, _ = spec.step(s, c, mutants)
        facts = well_formed(u, s, c, o, k)
        before, after, ac = projection(u, s, o, k), projection(u, n, o, k), projected_cmd(u, s, c, o, k)
    with spec.bounded(1, 2, rest=True):
        a = {**spec.symbolic_state("abstract"), **before}
        an, _ = spec.step(a, ac, mutants)
        stutter = And(kind in OP_KINDS, Not(Eq(c.op, o)))
        goal = If(stutter, And(*[Eq(after[key], before[key]) for key in projected_keys()]),
                  And(spec.cmd_domain(a, ac, (kind,)), *[Eq(after[key], an[key]) for key in projected_keys()]))
    answer = core.prove(facts, goal)
    if answer.status != REFUTED:
        return answer.status, ""
    value = functools.partial(_shown, answer.model)
    differ = [f"{'.'.join(map(str, key))}: {value(after[key])} (small system: {value(an[key])})"
              for key in projected_keys() if value(after[key]) != value(an[key])]
    name = KIND_NAMES[kind]
    target = "key=another" if value(c.key) != value(k) else "key=k"
    if kind in OP_KINDS:
        target = "op=o" if value(c.op) == value(o) else "op=another"
    return REFUTED, f"{name}({target}): " + ", ".join(differ or ["the small system's command is not well formed"])


LOOP_CHECK = (3, 3)


def agrees_with_the_loops(kind: int, mutants: frozenset) -> tuple[str, str]:
    """The trusted reading of the loops, checked where it can be: the uniform body of a step of ``kind``, read at
    every op and key of a purgatory of LOOP_CHECK ops × keys, equals the loops' result there (for every field the
    uniform run determines), from any state."""
    ops, keys = LOOP_CHECK
    with uniformly() as u:
        s, c = Arrays.symbolic(u, "s"), uniform_cmd(kind, "c")
        n, _ = spec.step(s, c, mutants)
    with spec.bounded(ops, keys):
        concrete = {key: s[key] for key in spec.state_keys()}
        cc = Cmd(kind, c.op, c.key, tuple(c.mult[j] for j in range(keys)), c.delay, c.ready_on, c.to, c.purge)
        cn, _ = spec.step(concrete, cc, mutants)
        compared = [key for key in spec.state_keys() if key[0] not in n.unknown]
        domain = [u.ops == ops, u.keys == keys, spec.cmd_domain(concrete, cc, (kind,))]
    answer = core.prove(domain, And(*[Eq(cn[key], n[key]) for key in compared]))
    if answer.status != REFUTED:
        return answer.status, ""
    value = functools.partial(_shown, answer.model)
    differ = [".".join(map(str, key)) for key in compared if value(cn[key]) != value(n[key])]
    return REFUTED, f"{KIND_NAMES[kind]}: " + ", ".join(differ)


@obligation("purgatory.projection", cost=5, mutant=MUTANTS["check_wins_one"],
            domain="any number of ops and keys, any tracked op and key among them, any state with non-negative entry "
                   "counts whose purge ghost entries are in the timer, all 8 commands, the purge decision free; "
                   "each transition's loops run once on a symbolic op and key, their reading checked against the "
                   "loops at 3 ops x 3 keys; sums over the keys by lemmas proved by induction",
            bound=Bound("for all (z3), one step; the sums' lemmas by induction on the number of keys",
                        "any number of ops and keys; any tracked op and key; any state with non-negative entry counts "
                        "whose purge ghost entries are in the timer; all 8 commands; the purge decision free", "-"))
def projection_obligation(mutated: bool = False) -> Outcome:
    """The projection argument behind purgatory.any_number_of_ops_and_keys, for any number of ops and keys: the
    transition of op o on key k depends on the other ops and keys only through the purge decision. Project a state
    of a purgatory with N ops and K keys (N and K symbolic) onto a symbolic op o and key k, lumping the other keys
    into one (the op's entries there summed): for every state and every well-formed command, the projection of the
    next state is the next state of the one-op, one-key-plus-the-rest system from the projection, under the
    projected command (a check or cancelForKey of another key visits the op's entries on that key; a watch lists
    the op on the tracked key and on the rest), with the same purge decision, whatever that system's other fields
    are; and a command naming another op leaves the projection as it was. So every run of any purgatory projects
    to a run of the small system (with stutters), where purgatory.any_number_of_ops_and_keys proves the per-op
    properties, stated by the same per-op, per-key clauses: they are theorems for every number of ops and keys.
    The step is purgatory.step itself, its loops run once on a symbolic op and key over arrays (specs/uniform.py);
    the sums over K keys rest on seven lemmas (linear, difference, scaled, constant, case, point, non-negative),
    each proved by induction on K; that the one body is what the loops compute is checked at every op and key of
    a 3 × 3 purgatory, command by command."""
    for lemma in SUM_LEMMAS:
        status = lemma.proved()
        if status != PROVED:
            return Outcome(status, "induction on the number of keys", f"the sum lemma {lemma.name} ({lemma.words})")
    mutants = frozenset({OTHERS_ABSTRACTED, *(["check_wins_one"] if mutated else [])})
    for kind in spec.ALL_KINDS:
        status, seen = commutes(kind, mutants)
        if status == REFUTED:
            return Outcome(REFUTED, "validity of the commuting square, any N x K",
                           f"projected onto op o and key k: {seen}")
        if status != PROVED:
            return Outcome(status, "validity of the commuting square, any N x K", KIND_NAMES[kind])
    for kind in spec.ALL_KINDS:
        status, seen = agrees_with_the_loops(kind, mutants)
        if status != PROVED:
            return Outcome(status, "the uniform body against the loops at 3 x 3", seen or KIND_NAMES[kind])
    return Outcome(PROVED, "validity of the commuting square, any N x K",
                   f"{len(SUM_LEMMAS)} sum lemmas by induction; 8 commands; the body agrees with the loops at 3 x 3")

