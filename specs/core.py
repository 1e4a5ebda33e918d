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

An obligation may *rest on* another (``rests_on=``): typically one inductive invariant that many properties are
read from. The runner decides that premise first, once, and hands its outcome to the dependants (`premise`); when it
is not proved, a dependant is not run at all and reports that it rests on a premise that failed (`rests_on_failed`),
so a broken shared invariant is decided, printed and paid for once, by the obligation that owns it.

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
import re
import time
from typing import Callable, Iterable, Sequence

import attrs
import z3

from kpurgatory.conformance.adapters.timed import MODEL_STEP_S, TimeLimit, failure_text, limited
from kpurgatory.conformance.traces.codec import Header, Step, Trace, model_trace
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v

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
    #: CPU seconds of the process that ran it (z3 runs in-process, so this is the obligation's whole cost)
    cpu: float = 0.0
    #: the outcome of the obligation's mutant (None when it has none)
    mutant: Outcome | None = None
    #: the premise this outcome was inherited from, when the obligation was not run because its premise failed
    premise: str | None = None


@attrs.frozen
class Bound:
    """What an obligation's result covers, for the table of bounds (``kpurgatory prove --list``): how it is
    checked, what is quantified without limit, and what is fixed or limited (and to what)."""

    method: str
    unbounded: str
    bounded: str

    @classmethod
    def from_domain(cls, domain: str) -> Bound:
        """The default: the domain string's clauses sorted by whether they name a limit (a count, a listed set of
        values, a small numeric ceiling, a depth, a sample) or a quantification (any, all, ranges up to Long.MAX)."""
        unbounded, bounded = [], []
        for clause in _clauses(domain):
            clause = clause.removeprefix("bound: ")
            if _METHOD_ONLY.fullmatch(clause):
                continue
            (bounded if _LIMIT.search(clause) else unbounded).append(clause)
        method = next((text for pattern, text in _METHODS if re.search(pattern, domain)), "for all (z3)")
        depth = re.search(r"BMC to (?:depth )?(\d+)", domain)
        if "induct" in method:
            unbounded.append("run length (induction)")
        elif depth:
            bounded.append(f"run length <= {depth.group(1)}")
        return cls(method, "; ".join(unbounded) or "-", "; ".join(bounded) or "-")


#: a clause names a limit: a count of ops/keys/threads/commands, a listed set of shapes or values, a small numeric
#: ceiling (not Long.MAX or Int.MAX), a BMC depth, a width, a sample, one tracked object, named threads or ops
_LIMIT = re.compile(r"(?<!all )\b\d+ (ops?|keys?|commands?|threads?|calls?|steps?|levels?|random|traces)\b"
                    r"|\bin \(|<= ?\d+\b|\d\.\.\d|\d/\d|\bwidth \d|BMC to|random|sample|\bone (tracked|call)"
                    r"|\bops [a-z]\b|\bT\d|small values|\b(tick|wheel|start|size|interval) \d|\bwithout\b|1 key|c=0"
                    r"|\bbefore:")
#: clauses that only say how the obligation is checked (they go to the method column)
_METHOD_ONLY = re.compile(r"(induction|inductive invariant)( \(unbounded depth\))?|every interleaving"
                          r"|BMC to (depth )?\d+( commands)?( from a fresh wheel \+ inductive invariant.*)?"
                          r"|QF_BV 64(, .*minimised)?|.*if it fails, BMC.*")
_METHODS = ((r"every interleaving", "exhaustive: every interleaving"),
            (r"random", "sample (random)"),
            (r"BMC to \d+ commands from a fresh wheel \+ inductive", "BMC + induction"),
            (r"induct.*if it fails, BMC", "induction (BMC only to find a run if it fails)"),
            (r"induct", "induction"),
            (r"BMC to", "BMC"),
            (r"width 4: all", "exhaustive at width 4, sampled at 64"),
            (r"QF_BV 64", "for all (z3, 64-bit bit-vectors)"))


def _clauses(domain: str) -> list[str]:
    """The domain's clauses: split at ';' and at commas outside parentheses, except where the comma only lists
    (a fragment that states nothing, like "start" in "start, clocks, times and delays any longs", joins the next;
    one that opens with a parenthesis, like "(1, 3, 2)" in a list of shapes, joins the previous)."""
    out = []
    for part in domain.split(";"):
        fragments, depth, current = [], 0, ""
        for char in part:
            depth += 1 if char in "([" else -1 if char in ")]" else 0
            if char == "," and depth == 0:
                fragments.append(current.strip())
                current = ""
            else:
                current += char
        fragments.append(current.strip())
        merged: list[str] = []
        pending = ""
        for fragment in fragments:
            if fragment.startswith("(") and merged and not pending:
                merged[-1] += ", " + fragment
            elif not _STATES.search(fragment):
                pending += fragment + ", "
            else:
                merged.append(pending + fragment)
                pending = ""
        out += merged + ([pending.rstrip(", ")] if pending else [])
    return [clause for clause in out if clause]


#: a fragment that states something (a relation, a number, a quantifier); others are items of a list
_STATES = re.compile(r"[=<>]|\d|\b(in|any|all|every|for|where|only|without|one|fresh|before|inside|Long|Int)\b")


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
    #: the obligation this one rests on (a shared inductive invariant): decided first, and if it is not proved this
    #: one is not run but reports that it rests on it
    rests_on: str | None = None
    #: what the result covers; None: derived from the domain string (`Bound.from_domain`)
    declared_bound: Bound | None = None

    @property
    def bound(self) -> Bound:
        return self.declared_bound or Bound.from_domain(self.domain)

    @property
    def trusted(self) -> str:
        """What the result takes on trust: the encoding it is about, and what ties that encoding to model/."""
        subject = self.name.removeprefix("mutant.")
        return next((text for prefix, text in TRUSTED if subject.startswith(prefix)), "not stated")

    @property
    def statement(self) -> str:
        """The paragraph in words: the encoding function's docstring, reflowed."""
        return " ".join((self.run.__doc__ or "").split())

    @property
    def group(self) -> str:
        return self.name.split(".")[0]


#: what the obligations of a family take on trust, by name prefix (the first that matches; a mutant as its subject)
TRUSTED = (
    ("java.", "z3's integer and bit-vector theories; Java's operators as the JLS defines them, written out"),
    ("wheel.model.expiration_guard", "model/ itself, run; its guard read by bisection on the delay, taken to be "
                                     "monotone in it"),
    ("wheel.kafka.", "KafkaWheel, Kafka's TimingWheel paraphrased in Java's wrapping arithmetic"),
    ("wheel.queue.", "model/'s own TimerTaskList (setExpiration, flush), run on z3 terms; the delay queue as "
                     "wheel_levels.py encodes it"),
    ("wheel.", "the shared arithmetic (wheel.Arithmetic) for model/timer.py: refinement.wheel.lifted ties each "
               "level's decisions to it for all values, refinement.wheel the whole wheel (buckets, delay queue, "
               "cascade) within its bound"),
    ("purgatory.liveness.fair", "purgatory.step for model/'s purgatory (refinement.purgatory.inductive); and "
                                "fairness read as a count: infinitely many advances that move the clock exceed any "
                                "op's delay (the bounded response, 'fewer than delay advances while live', is "
                                "proved)"),
    ("purgatory.projection", "purgatory.step's loops read as one body per op and per key, the only values carried "
                             "between ops declared (checked against the loops at 3 ops x 3 keys); and, like every "
                             "purgatory.* obligation, purgatory.step for model/'s purgatory"),
    ("purgatory.", "purgatory.step for model/'s purgatory: refinement.purgatory.inductive ties the two one step at a "
                   "time from any invariant state (structures within its bound), refinement.purgatory on bounded "
                   "runs"),
    ("interleaving.", "interleaving.py's encoding of Kafka's locks (op lock, shard locks, the completed flag's "
                      "compare-and-set); model/ is single-threaded, so nothing ties it to model/"),
    ("refinement.purgatory.inductive", "model/'s purgatory run on z3 terms over the timer as a deadline per op "
                                       "(its wheel is tied to that by wheel.timing.* and refinement.wheel.lifted); "
                                       "purgatory.invariant for step()"),
    ("refinement.wheel.lifted", "model/timer.py's TimingWheel run on z3 terms, but for its bucket list indexed by a "
                                "term; level creation for the listed wheel sizes only"),
    ("refinement.", "nothing but Python: model/ itself is run, each step under a time limit"),
)

REGISTRY: dict[str, Obligation] = {}


def obligation(name: str, *, domain: str, expect: str = PROVED, kind: str = "obligation", cost: float = 1.0,
               mutant: str | None = None, rests_on: str | None = None, bound: Bound | None = None):
    """Register the decorated function (its docstring is the statement) as an obligation. ``mutant`` describes the
    bug the function builds into its subject when called with ``mutated=True``; required unless the obligation is
    itself a refutation (a finding or a mutant). ``rests_on`` names the obligation (a shared invariant) this one is
    read from; ``bound`` states what the result covers when the default read from ``domain`` is not right."""
    assert kind in KINDS and expect in (PROVED, REFUTED, BOUND), (name, kind, expect)
    assert (mutant is None) == (kind in ("finding", "mutant")), (name, "a claim needs a mutant of its subject")

    def register(function: Callable[[], Outcome]) -> Callable[[], Outcome]:
        if name in REGISTRY:
            raise ValueError(f"obligation {name!r} registered twice")
        REGISTRY[name] = Obligation(name, kind, domain, expect, function, cost, mutant, rests_on, bound)
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


MODULE_ORDER = ("kpurgatory.specs.wheel", "kpurgatory.specs.wheel_levels", "kpurgatory.specs.purgatory",
                "kpurgatory.specs.uniform", "kpurgatory.specs.interleaving",
                "kpurgatory.specs.refinement", "kpurgatory.specs.simulation")


def select(patterns: Iterable[str] = ()) -> list[Obligation]:
    registry = load_all()
    patterns = list(patterns)
    return [ob for name, ob in registry.items() if not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)]


def run_named(name: str, premises: dict[str, Outcome] | None = None) -> Outcome:
    """Run one obligation by name, given the outcomes of the premises decided so far (what a worker is given)."""
    return run_one(load_all()[name], premises)


#: the outcomes of the premises decided in this run, by name (set from `run_one`'s argument for each obligation, so
#: nothing carries over from an earlier run in the same process)
_PREMISES: dict[str, Outcome] = {}


def premise(name: str) -> Outcome | None:
    """The outcome of the premise ``name`` if this run has decided it (an encoding that rests on it may then skip
    deciding it again), else None."""
    return _PREMISES.get(name)


def rests_on_failed(ob: Obligation, held: Outcome) -> Outcome:
    """The outcome of an obligation that is not run because the premise it rests on is not proved: not inductive
    when the premise is not inductive or refuted (what this obligation is read from does not hold), else the
    premise's own status (undecided, error)."""
    status = NOT_INDUCTIVE if held.status in (NOT_INDUCTIVE, REFUTED) else held.status
    return Outcome(status, f"rests on {ob.rests_on}",
                   f"rests on {ob.rests_on}, which is {held.status}: see {ob.rests_on}", premise=ob.rests_on)


def fresh_z3_context() -> None:
    """Start the next obligation in a new z3 context. z3's search depends on the terms its context already holds,
    so without this an obligation's time depends on what ran before it in the same process (measured: 0.6 s alone,
    20 s after another obligation)."""
    z3.z3._main_ctx = None


def run_one(ob: Obligation, premises: dict[str, Outcome] | None = None) -> Outcome:
    """Run the obligation and then, if it has one, its mutant (``outcome.mutant``), each in a fresh z3 context.
    If the premise it rests on is known and not proved, the obligation itself is not run (its mutant still is: the
    mutant shows the obligation's teeth whatever the unmutated spec does)."""
    _PREMISES.clear()
    _PREMISES.update(premises or {})
    held = _PREMISES.get(ob.rests_on) if ob.rests_on else None
    outcome = rests_on_failed(ob, held) if held is not None and held.status != PROVED else _timed(ob.name, ob.run)
    if ob.mutant is not None:
        outcome.mutant = _timed(ob.name, lambda: ob.run(mutated=True))
    return outcome


def _timed(name: str, run: Callable[[], Outcome]) -> Outcome:
    fresh_z3_context()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        outcome = run()
    except ModelBroke as broke:
        outcome = broke.outcome(name)
    except Exception as error:  # a broken encoding is reported, not fatal to the run
        outcome = Outcome(ERROR, detail=f"{type(error).__name__}: {error}")
    outcome.seconds = time.perf_counter() - start
    outcome.cpu = time.process_time() - cpu
    return outcome


def as_expected(ob: Obligation, outcome: Outcome) -> bool:
    """The obligation has its expected result and its mutant, if any, is refuted."""
    return outcome.status == ob.expect and (ob.mutant is None or (outcome.mutant is not None
                                                                  and outcome.mutant.status == REFUTED))


# ---------------------------------------------------------------------------------------------------------------
# model/ under a time limit
# ---------------------------------------------------------------------------------------------------------------

class ModelBroke(Exception):
    """model/ hung or raised on the last of ``commands`` (from ``params`` in ``profile``). The obligation that ran
    it is refuted by that run: nothing it would conclude can rest on a model that does not answer."""

    def __init__(self, profile: str, params: v.Params, commands: Sequence[v.Command], failure: str) -> None:
        from kpurgatory.conformance.traces.replay import format_command

        self.profile, self.params, self.commands, self.failure = profile, params, tuple(commands), failure
        super().__init__(f"model/ {failure} at command {len(self.commands)}, "
                         f"{'; '.join(map(format_command, self.commands))}")

    def trace(self, name: str) -> Trace:
        """The run as a trace: model/'s recording up to the command it broke on, which has no answer."""
        header = Header(f"specs.{name}", self.profile, self.params, "kpurgatory.model", f"{self}.")
        recording = model_trace(header, self.commands[:-1])
        return Trace(header, [*recording.steps, Step(len(self.commands), self.commands[-1], v.Observation())])

    def outcome(self, name: str) -> Outcome:
        return Outcome(REFUTED, f"model/ under a {MODEL_STEP_S:g} s limit per step", str(self),
                       witness={"params": attrs.asdict(self.params), "commands": len(self.commands),
                                "failure": self.failure}, traces={"counterexample": self.trace(name)})


def recorded(header: Header, commands: Iterable[v.Command]) -> Trace:
    """model/'s trace of ``commands`` (a refutation's counterexample), each step under `model_step`'s time limit:
    a model that hangs on a counterexample's own commands ends the obligation, refuted by that run."""
    return model_trace(header, commands, step=model_step)


def model_step(model: Model, command: v.Command, before: Sequence[v.Command]) -> v.Observation:
    """``model.step(command)`` (``before``: the commands it ran so far) within `MODEL_STEP_S`; `ModelBroke` if it
    hangs or raises (but for `CommandError`, a command outside the model's domain: the obligation's own bug)."""
    try:
        with limited(MODEL_STEP_S):
            return model.step(command)
    except CommandError:
        raise
    except (Exception, TimeLimit) as error:
        raise ModelBroke(model.profile, model.params, (*before, command), failure_text(error, MODEL_STEP_S)) from None


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


def smallest(constraints: Iterable[object], values: dict[str, object]) -> tuple[Answer, dict[str, int]]:
    """A model of ``constraints`` whose named integer (Int or signed bit-vector) ``values`` are as close to 0 as z3
    finds, in the order given: each is tightened by bisection on its magnitude, then held while the next is
    tightened. Every check has the usual resource budget; one that is undecided keeps the last model. Returns the
    answer (REFUTED with the smallest model, or why there is none) and the values in that model."""
    s = solver()
    s.add(*constraints)
    answer = _answer(s)
    if answer.status != REFUTED:
        return answer, {}
    model = answer.model
    for term in values.values():
        best, low = abs(_integer(model, term)), 0
        while low < best:
            middle = (low + best) // 2
            s.push()
            s.add(_at_most(term, middle))
            result = s.check()
            if result == z3.sat:
                model = s.model()
                best = abs(_integer(model, term))
            s.pop()
            if result == z3.unknown:
                break
            if result == z3.unsat:
                low = middle + 1
        s.add(_at_most(term, best))
    return Answer(REFUTED, model), {name: _integer(model, term) for name, term in values.items()}


def _integer(model: z3.ModelRef, term) -> int:
    value = model.eval(term, model_completion=True)
    return value.as_signed_long() if z3.is_bv(value) else value.as_long()


def _at_most(term, magnitude: int) -> object:
    """|term| <= magnitude (signed, for a bit-vector)."""
    if z3.is_bv(term):
        bits = term.size()
        magnitude = min(magnitude, 2 ** (bits - 1) - 1)
        return z3.And(term >= z3.BitVecVal(-magnitude, bits), term <= z3.BitVecVal(magnitude, bits))
    return z3.And(term >= -magnitude, term <= magnitude)


def induction_counterexample(model: z3.ModelRef, pre: dict, command: dict, post: dict, clauses: dict[str, object],
                             name: Callable[[object], str] = str, usual: dict | None = None) -> dict:
    """A counterexample to induction, readable: the pre-state (from ``pre``: key -> term; only the keys whose value
    differs from ``usual``, e.g. the initial state, when it is given), the command (field -> term), the post-state
    (only what the step changed) and the names of the ``clauses`` (name -> term over the step) that are false.
    ``name`` turns a state key into text (e.g. ("cnt", 0, 1) -> "cnt[k0][b]")."""

    def value(term) -> object:
        evaluated = model.eval(term, model_completion=True) if z3.is_expr(term) else term
        if not z3.is_expr(evaluated):
            return evaluated
        if z3.is_bool(evaluated):
            return bool(z3.is_true(evaluated))
        return _integer(model, evaluated) if z3.is_int_value(evaluated) or z3.is_bv_value(evaluated) else str(evaluated)

    before = {key: value(term) for key, term in pre.items()}
    after = {key: value(term) for key, term in post.items()}
    shown = {key: v for key, v in before.items() if usual is None or value(usual.get(key)) != v}
    return {"pre-state": {name(key): v for key, v in shown.items()},
            "command": {field: value(term) for field, term in command.items()},
            "post-state (changed)": {name(key): v for key, v in after.items() if before.get(key) != v},
            "clause broken": [label for label, clause in clauses.items() if value(clause) is False]}


#: how near Long.MAX_VALUE or Long.MIN_VALUE a value is shown relative to it (beyond, digits read better)
_NEAR_LIMIT = 2 ** 40
LONG_MAX = 2 ** 63 - 1


def readable_value(value: object) -> str:
    """A witness value as text: a long near the ends of Java's range relative to them (``Long.MAX_VALUE - 27``),
    a list or a dict on one line."""
    if isinstance(value, bool) or not isinstance(value, (int, list, tuple, dict)):
        return str(value)
    if isinstance(value, int):
        if abs(LONG_MAX - value) < _NEAR_LIMIT:
            offset = LONG_MAX - value
            return "Long.MAX_VALUE" + (f" - {offset}" if offset > 0 else f" + {-offset}" if offset else "")
        if abs(value + LONG_MAX + 1) < _NEAR_LIMIT:
            offset = value + LONG_MAX + 1
            return "Long.MIN_VALUE" + (f" + {offset}" if offset > 0 else f" - {-offset}" if offset else "")
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}={readable_value(v)}" for key, v in value.items()) + "}"
    return "[" + ", ".join(readable_value(v) for v in value) + "]"


def render_witness(witness: dict) -> list[str]:
    """An outcome's witness as lines ``name: value``, a nested dict (a state) as ``name=value`` pairs."""
    lines = []
    for key, value in witness.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={readable_value(v)}" for k, v in value.items()) or "(nothing)"
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ", ".join(value) or "(none)"
        else:
            value = readable_value(value)
        lines.append(f"{key}: {value}")
    return lines


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
            lemmas_ok: bool = True, detail: str = "", values: dict[str, object] | None = None) -> Outcome:
    """An Outcome for a proof query (the caller builds refutation outcomes itself, with their traces). A refutation
    carries the model's values as its witness: of the named terms ``values`` if given, else of every constant of
    the model."""
    lemmas = lemmas or []
    if answer.status == PROVED and not lemmas_ok:
        failed = ", ".join(name for name, status, _ in lemmas if status != PROVED)
        return Outcome(UNKNOWN, method, f"proved from lemmas that were not all proved: {failed}", lemmas=lemmas)
    if answer.status in (UNKNOWN, RESOURCE_LIMIT):
        return Outcome(answer.status, method, f"{detail + ': ' if detail else ''}z3: {answer.reason}", lemmas=lemmas)
    if answer.status == REFUTED:
        witness = model_values(answer.model, values)
        return Outcome(REFUTED, method, detail or "z3 found a model of the negation", witness=witness, lemmas=lemmas)
    return Outcome(PROVED, method, detail, lemmas=lemmas)


def model_values(model: z3.ModelRef | None, values: dict[str, object] | None = None) -> dict[str, object]:
    """The values of the named terms ``values`` in ``model``, or of its integer, bit-vector (signed) and boolean
    constants by name (z3's internal ones left out)."""
    if model is None:
        return {}
    if values is None:
        values = {str(d.name()): d() for d in model.decls() if d.arity() == 0 and "!" not in str(d.name())}
        values = dict(sorted(values.items()))
    out = {}
    for name, term in values.items():
        value = model.eval(term, model_completion=True)
        if z3.is_bool(value):
            out[name] = bool(z3.is_true(value))
        elif z3.is_int_value(value) or z3.is_bv_value(value):
            out[name] = _integer(model, value)
    return out
