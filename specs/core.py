"""The machinery every obligation shares: the registry, outcomes, z3 queries and lemmas.

An *obligation* is a Python function whose docstring is its statement in words and whose body is its encoding; the
`obligation` decorator records its name, the domain it is stated over and the result it is expected to have:

``proved``   z3 showed the negation unsatisfiable (for an inductive invariant: initiation and consecution).
``bound``    checked up to a stated bound (bounded model checking to a depth, a sample of inputs) and no more.
``refuted``  z3 produced a model. For a *finding* this is the expected outcome: Kafka's arithmetic or design is
             wrong there, the counterexample is documented and written as a replayable trace. For a *mutant*
             (a deliberately broken copy of a spec) it shows that the obligations have teeth.
``not inductive``  an invariant the obligation relies on is not preserved by some step from some state satisfying
             it; no reachable violation was found (that would be ``refuted``), so the invariant needs strengthening.
``unknown: resource limit``  a query used up its z3 resource budget (``rlimit``) undecided. The budget counts z3's
             own steps, not seconds, so whether it is hit does not depend on the machine or its load.

Every obligation that claims something (kind obligation, model or support) names a *mutant* of its subject: the
same encoding with one deliberate bug (``mutant=`` in the decorator, applied when the function is called with
``mutated=True``). Running the obligation runs its mutant too, which must come out refuted, so each proof shows
that it can fail.

A *lemma* is a small universally quantified fact that z3 proves on its own; an obligation whose direct query is
too hard states which lemmas it uses, and its query receives their instances as hypotheses. Every lemma an
obligation uses is proved in the same run, and its result is part of the obligation's outcome.
"""

from __future__ import annotations

import fnmatch
import time
from typing import Callable, Iterable

import attrs
import z3

from kpurgatory.conformance.traces.codec import Trace

PROVED, REFUTED, BOUND, UNKNOWN, ERROR = "proved", "refuted", "bound", "unknown", "error"
NOT_INDUCTIVE = "not inductive"
RESOURCE_LIMIT = "unknown: resource limit"

#: what an obligation is: a property of Kafka's design that must hold, a place where Kafka is wrong (a finding),
#: a property of the model's own choices, or a broken copy of a spec that must be refuted
KINDS = ("obligation", "finding", "model", "mutant", "support")

#: z3's resource budget per query (its ``rlimit``: a count of solver steps, the same on every machine and at any
#: load, unlike a wall-clock timeout). The largest query of `kpurgatory prove` uses about 6e7; 3e8 is a minute or
#: two of z3's work on these machines.
DEFAULT_RLIMIT = 300_000_000
#: what z3 says when a query stops at its resource limit (no timeout is ever set, so "canceled" is the limit too)
LIMIT_REASONS = ("max. resource limit exceeded", "resource limits reached", "canceled")


@attrs.define
class Outcome:
    """What running an obligation established."""

    status: str
    method: str = ""
    detail: str = ""
    #: named values of the counterexample (refuted) or the bound reached (bound)
    witness: dict = attrs.field(factory=dict)
    #: refutations as traces in the shared format, by a short name (written as <obligation>.<name>.jsonl)
    traces: dict[str, Trace] = attrs.field(factory=dict)
    lemmas: list[tuple[str, str, float]] = attrs.field(factory=list)
    seconds: float = 0.0
    #: the outcome of the obligation's mutant (None when it has none)
    mutant: Outcome | None = None


@attrs.frozen
class Obligation:
    name: str
    kind: str
    domain: str
    expect: str
    run: Callable[[], Outcome] = attrs.field(repr=False)
    #: rough seconds, so that a parallel run starts the long ones first
    cost: float = 1.0
    #: the deliberate bug in the subject that this obligation must refute (None for findings and mutants)
    mutant: str | None = None

    @property
    def statement(self) -> str:
        """The paragraph in words: the encoding function's docstring, reflowed."""
        return " ".join((self.run.__doc__ or "").split())

    @property
    def group(self) -> str:
        return self.name.split(".")[0]


REGISTRY: dict[str, Obligation] = {}


def obligation(name: str, *, domain: str, expect: str = PROVED, kind: str = "obligation", cost: float = 1.0,
               mutant: str | None = None):
    """Register the decorated function (its docstring is the statement) as an obligation. ``mutant`` describes the
    bug the function builds into its subject when called with ``mutated=True``; required unless the obligation is
    itself a refutation (a finding or a mutant)."""
    assert kind in KINDS and expect in (PROVED, REFUTED, BOUND), (name, kind, expect)
    assert (mutant is None) == (kind in ("finding", "mutant")), (name, "a claim needs a mutant of its subject")

    def register(function: Callable[[], Outcome]) -> Callable[[], Outcome]:
        if name in REGISTRY:
            raise ValueError(f"obligation {name!r} registered twice")
        REGISTRY[name] = Obligation(name, kind, domain, expect, function, cost, mutant)
        return function

    return register


def load_all() -> dict[str, Obligation]:
    """Import every spec module (registration happens at import) and return the registry in document order."""
    import importlib

    for module in MODULE_ORDER:
        importlib.import_module(module)
    # document order, whatever order the modules happened to be imported in: by module, then as registered
    rank = {module: i for i, module in enumerate(MODULE_ORDER)}
    ordered = sorted(enumerate(REGISTRY.values()), key=lambda item: (rank[item[1].run.__module__], item[0]))
    return {ob.name: ob for _, ob in ordered}


MODULE_ORDER = ("kpurgatory.specs.wheel", "kpurgatory.specs.purgatory", "kpurgatory.specs.interleaving")


def select(patterns: Iterable[str] = ()) -> list[Obligation]:
    registry = load_all()
    patterns = list(patterns)
    return [ob for name, ob in registry.items() if not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)]


def run_named(name: str) -> Outcome:
    """Run one obligation by name (what a worker process is given)."""
    return run_one(load_all()[name])


def fresh_z3_context() -> None:
    """Start the next obligation in a new z3 context. z3's search depends on the terms its context already holds,
    so without this an obligation's time depends on what ran before it in the same process (measured: 0.6 s alone,
    20 s after another obligation)."""
    z3.z3._main_ctx = None


def run_one(ob: Obligation) -> Outcome:
    """Run the obligation and then, if it has one, its mutant (``outcome.mutant``), each in a fresh z3 context."""
    outcome = _timed(ob.run)
    if ob.mutant is not None:
        outcome.mutant = _timed(lambda: ob.run(mutated=True))
    return outcome


def _timed(run: Callable[[], Outcome]) -> Outcome:
    fresh_z3_context()
    start = time.perf_counter()
    try:
        outcome = run()
    except Exception as error:  # a broken encoding is reported, not fatal to the run
        outcome = Outcome(ERROR, detail=f"{type(error).__name__}: {error}")
    outcome.seconds = time.perf_counter() - start
    return outcome


def as_expected(ob: Obligation, outcome: Outcome) -> bool:
    """The obligation has its expected result and its mutant, if any, is refuted."""
    return outcome.status == ob.expect and (ob.mutant is None or (outcome.mutant is not None
                                                                  and outcome.mutant.status == REFUTED))


# ---------------------------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Answer:
    status: str  # PROVED (negation unsat), REFUTED (model found), RESOURCE_LIMIT or UNKNOWN
    model: z3.ModelRef | None = None
    reason: str = ""


def solver() -> z3.Solver:
    """A seeded solver with the resource budget (read at each call, so a test can lower it)."""
    s = z3.Solver()
    s.set("rlimit", DEFAULT_RLIMIT)
    s.set("random_seed", 0)
    return s


def undecided(s: z3.Solver | z3.Optimize) -> str:
    """The status of a query z3 left undecided: RESOURCE_LIMIT when it ran out of its budget, else UNKNOWN."""
    return RESOURCE_LIMIT if s.reason_unknown() in LIMIT_REASONS else UNKNOWN


def prove(hypotheses: Iterable[object], goal: object) -> Answer:
    """Is ``hypotheses => goal`` valid? PROVED, or REFUTED with a model of ``hypotheses and not goal``."""
    s = solver()
    s.add(*hypotheses)
    s.add(z3.Not(goal))
    return _answer(s)


def find(constraints: Iterable[object]) -> Answer:
    """Is there a model of ``constraints``? REFUTED (a model: the property these constraints violate is refuted)."""
    s = solver()
    s.add(*constraints)
    return _answer(s)


def _answer(s: z3.Solver | z3.Optimize) -> Answer:
    result = s.check()
    if result == z3.unsat:
        return Answer(PROVED)
    if result == z3.sat:
        return Answer(REFUTED, s.model())
    return Answer(undecided(s), reason=s.reason_unknown())


def minimise(constraints: Iterable[object], objectives: Iterable[object]) -> Answer:
    """A model of ``constraints`` with the objectives minimised lexicographically (small, readable counterexamples)."""
    opt = z3.Optimize()
    opt.set("rlimit", DEFAULT_RLIMIT)
    opt.add(*constraints)
    for objective in objectives:
        opt.minimize(objective)
    return _answer(opt)


# ---------------------------------------------------------------------------------------------------------------
# Lemmas
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Lemma:
    """``for all <variables>: hypothesis => conclusion``, over Java longs in ``backend``.

    ``body(*longs)`` returns (hypothesis, conclusion) for any Long arguments, so the same text is proved once on
    fresh variables and instantiated inside obligations (calling the lemma gives the instance as an implication).
    """

    name: str
    statement: str
    variables: str
    body: Callable = attrs.field(repr=False)
    backend: object = attrs.field(repr=False)
    #: lemmas this one is proved from, and how to instantiate them on its variables
    needs: tuple = ()
    hints: Callable | None = attrs.field(default=None, repr=False)

    def __call__(self, *args) -> object:
        hypothesis, conclusion = self.body(*args)
        return z3.Implies(hypothesis, conclusion)

    def prove(self) -> tuple[str, float]:
        return _prove_lemma(self)


#: by lemma name and resource budget (a result reached under another budget may differ)
_LEMMA_RESULTS: dict[tuple[str, int], tuple[str, float]] = {}


def _prove_lemma(lemma: Lemma) -> tuple[str, float]:
    key = (lemma.name, DEFAULT_RLIMIT)
    if key not in _LEMMA_RESULTS:
        start = time.perf_counter()
        values, ranges = lemma.backend.longs(" ".join(f"{lemma.name}.{v}" for v in lemma.variables.split()))
        hypothesis, conclusion = lemma.body(*values)
        hints = lemma.hints(*values) if lemma.hints is not None else []
        answer = prove([ranges, hypothesis, *hints], conclusion)
        _LEMMA_RESULTS[key] = (answer.status, time.perf_counter() - start)
    return _LEMMA_RESULTS[key]


def with_lemmas(lemmas: Iterable[Lemma]) -> tuple[list[tuple[str, str, float]], bool]:
    """Prove each lemma (and the lemmas it needs); return their results and whether all were proved."""
    ordered: dict[str, Lemma] = {}

    def visit(lemma: Lemma) -> None:
        for needed in lemma.needs:
            visit(needed)
        ordered.setdefault(lemma.name, lemma)

    for lemma in lemmas:
        visit(lemma)
    results = [(lemma.name, *lemma.prove()) for lemma in ordered.values()]
    return results, all(status == PROVED for _, status, _ in results)


def verdict(answer: Answer, method: str, lemmas: list[tuple[str, str, float]] | None = None,
            lemmas_ok: bool = True, detail: str = "") -> Outcome:
    """An Outcome for a proof query (the caller builds refutation outcomes itself, with their traces)."""
    lemmas = lemmas or []
    if answer.status == PROVED and not lemmas_ok:
        failed = ", ".join(name for name, status, _ in lemmas if status != PROVED)
        return Outcome(UNKNOWN, method, f"proved from lemmas that were not all proved: {failed}", lemmas=lemmas)
    if answer.status in (UNKNOWN, RESOURCE_LIMIT):
        return Outcome(answer.status, method, f"{detail + ': ' if detail else ''}z3: {answer.reason}", lemmas=lemmas)
    if answer.status == REFUTED:
        return Outcome(REFUTED, method, detail or "z3 found a model of the negation", lemmas=lemmas)
    return Outcome(PROVED, method, detail, lemmas=lemmas)
