"""Spec mutants and their counterexample traces.

Each mutant is a deliberately broken copy of one spec, refuted by z3 (obligations ``mutant.*``). Its counterexample
is a trace in the shared format whose recorded observations are the model's: replayed against an implementation
carrying the *same* bug, the replay must fail. The conformance suite's implementation mutants are matched to these
by the keys below.

==========================  ========================================  ==========================================
key                         the bug                                   where the trace diverges
==========================  ========================================  ==========================================
``purge_ge``                purge when estimated - numDelayed >=      an advance where the model does not purge
                            purgeInterval (instead of >)              and the mutant reports Purge
``no_second_try``           tryCompleteElseWatch without its second   watch(ready_on=2): the model completes the
                            tryComplete                               op (True, via try), the mutant returns False
``bucket_rounded_up``       bucket expiration rounded up to the end   advance to the start of the task's tick: the
                            of the tick                               model runs it, the mutant does not
==========================  ========================================  ==========================================
"""

from __future__ import annotations

from kpurgatory.conformance.traces.codec import Trace
from kpurgatory.specs.core import REFUTED, load_all, run_one

#: mutant key -> the obligation that refutes it
MUTANT_OBLIGATIONS = {
    "purge_ge": "mutant.purgatory.purge_ge",
    "no_second_try": "mutant.interleaving.no_second_try",
    "bucket_rounded_up": "mutant.wheel.bucket_rounded_up",
}


#: mutant key -> the implementation mutant with the same bug in kpurgatory.conformance.tools.mutants (None: none yet)
IMPL_MUTANTS = {
    "purge_ge": "purge_at_interval",
    "no_second_try": "missing_second_try",
    "bucket_rounded_up": None,
}


def mutant_counterexamples() -> dict[str, Trace]:
    """Run each mutant's obligation and return, per mutant key, its counterexample trace."""
    registry = load_all()
    traces = {}
    for key, name in MUTANT_OBLIGATIONS.items():
        outcome = run_one(registry[name])
        if outcome.status != REFUTED or "counterexample" not in outcome.traces:
            raise AssertionError(f"mutant {key} was not refuted with a trace: {outcome.status} {outcome.detail}")
        traces[key] = outcome.traces["counterexample"]
    return traces
