"""kpurgatory.specs — z3-checked obligations about Kafka's timing wheel and purgatory, with refutations as traces.

Read in this order (each obligation is a function whose docstring states it in words, next to its encoding;
specs/obligations.md collects the statements, ``kpurgatory prove --markdown`` regenerates it):

  core.py          the registry, outcomes (proved / bound / refuted / not inductive), each obligation's mutant,
                   its bound (what is unbounded, what is bounded and how) and the premise it rests on (a shared
                   invariant, decided once); z3 queries and lemmas; counterexamples made readable (the smallest
                   model, a counterexample to induction, values near Long.MAX shown relative to it)
  javalong.py      Java's long arithmetic in the encodings z3 gets: 64-bit bit-vectors for searches, integers with
                   explicit two's-complement wrapping for proofs (proved equal to Java's definitions), unbounded
                   integers for the model
  wheel.py         the wheel's shared arithmetic (accepted, place, clocks, overflow tick) and its mutants;
                   placement, refusal, clock alignment, overflow levels; the symbolic wheel (add, advance, cascade)
                   and the timing obligations over it, for each declared firing window and in Java's wrapping
                   arithmetic; the places where Java's arithmetic overflows (Kafka findings,
                   executed on `wheel.KafkaWheel`) and the model's alternatives, proved; the rounded-up bucket mutant
  purgatory.py     the purgatory as a symbolic transition system over 3 ops and 2 keys: exactly-once, justified
                   completion, no lost wakeup, tried after listing, counters, no forgotten op, liveness, watcher
                   cleanup (check, purge, map) by one inductive invariant; the purge rule, the memory held by stale
                   entries (bound without cancellation, finding with it, the true bound), the >= purge mutant, and
                   the cross-check against model/
  uniform.py       purgatory.step for any number of ops and keys: its loops run once on a symbolic op and key over
                   arrays, sums over the keys by lemmas proved by induction; the projection onto one op and one key
                   proved to commute with a step, for every N and K
  interleaving.py  tryCompleteElseWatch, checkAndComplete, the purge, cancelForKey and forceComplete cut into
                   atomic steps at Kafka's locking (op lock, shard lock) and interleaved: why Kafka tries twice and
                   cancels after the timer add; a watch racing a purge, cancelForKey or another watch loses no op;
                   no tryComplete after a completion under the op lock; each with its mutant
  refinement.py    model/ against the encodings on every run of a bounded domain, by exhaustive enumeration (the
                   shortest divergence, as a trace)
  lift.py          model/'s own code run on z3 terms: every branch on a term decided by z3, each feasible path once
  simulation.py    model/ against the encodings one step from any state, by lifting: the purgatory from every
                   state satisfying its invariant, each level of the wheel for all values
  mutants.py       the spec mutants and `mutant_counterexamples()`, their traces by mutant key
  cli.py           ``kpurgatory prove [--json] [--out DIR] [--only GLOB] [--jobs N] [--list] [--markdown]``: premises
                   first, one line per failed premise, each refutation's values and trace files, the run's CPU
                   seconds over all processes; ``--list`` is the table of bounds

    from kpurgatory.specs import run, mutant_counterexamples
    outcomes = run(["wheel.*"])              # {name: Outcome}
"""

from __future__ import annotations

# Nothing is imported eagerly: the trace codec reads its schema from this package, and `kpurgatory replay` must not
# pay for z3. The names below are resolved on first use.
_LAZY = {
    "REGISTRY": "kpurgatory.specs.core", "Obligation": "kpurgatory.specs.core", "Outcome": "kpurgatory.specs.core",
    "load_all": "kpurgatory.specs.core", "run_one": "kpurgatory.specs.core", "select": "kpurgatory.specs.core",
    "mutant_counterexamples": "kpurgatory.specs.mutants",
}


def run(patterns: list[str] | tuple[str, ...] = (), jobs: int = 1):
    """Run the obligations whose names match ``patterns`` (all by default): {name: Outcome}."""
    from kpurgatory.specs.cli import run_obligations
    from kpurgatory.specs.core import select

    return run_obligations(select(patterns), jobs)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kpurgatory.specs' has no attribute {name!r}")


__all__ = [*_LAZY, "run"]
