"""Every clause of an invariant has teeth: deleting it makes `kpurgatory prove` fail.

One mutant per obligation does not pin down an invariant's clauses: a clause that no mutant needs can be deleted
and every obligation still proves. So an invariant is a dict of named clauses, and each clause gets its own check:

*claims* (the properties an obligation states) each name a bug of the transition that the clause alone catches: a
  search for a violation of *any* clause under that bug must end in a step that violates this clause and no other.
  Delete the clause and the search finds nothing (the check fails), or finds another clause (the check fails: the
  clause was not the one catching it).
*support* (auxiliary facts that make the claims inductive) must each be needed: the invariant without the clause is
  not inductive (with the step properties as goals). All these queries share one solver: the successor of a
  symbolic state is built once, and each clause is one push/query/pop.
"""

from __future__ import annotations

from typing import Callable, Iterable

import z3

from kpurgatory.specs.core import BOUND, ERROR, NOT_INDUCTIVE, PROVED, REFUTED, Outcome, solver, undecided


def caught_alone(clause: str, known: Iterable[str], search: Callable, violated: Callable, describe: Callable,
                 method: str, traces: Callable = lambda run: {}, departure: Callable | None = None) -> Outcome:
    """The bug is caught by ``clause`` alone: ``search()`` (a BMC for a violation of any clause under the bug)
    returns (status, run, depth); ``violated(run)`` the clauses the run's last step violates; REFUTED (the clause has
    teeth) exactly when that is ``clause`` and nothing else, with ``traces(run)``. When the clause is gone or catches
    nothing, ``departure()`` (a BMC, as ``search``, for the first step where the bug's transition departs from the
    spec's) gives the run that the invariant now lets through, with its trace."""
    if clause not in known:
        return escaped(f"{clause} is not a clause of the invariant any more", method, describe, traces, departure)
    status, run, depth = search()
    if status != REFUTED:
        return escaped(f"no clause catches the bug within {depth} commands: {clause} has no teeth", method, describe,
                       traces, departure, status)
    broken = sorted(violated(run))
    if broken != [clause]:
        return Outcome(BOUND, method, f"caught by {', '.join(broken) or 'nothing'} after {depth} commands, not by "
                                      f"{clause} alone: {describe(run)}")
    return Outcome(REFUTED, method, f"caught by {clause} alone after {depth} commands: {describe(run)}",
                   traces=traces(run))


def escaped(why: str, method: str, describe: Callable, traces: Callable, departure: Callable | None,
            status: str = BOUND) -> Outcome:
    """A clause without teeth: its bug is not refuted within the bound (``status``), shown by the run the bug now
    gets away with (when ``departure`` finds one)."""
    found, run, depth = departure() if departure is not None else (BOUND, None, 0)
    if found != REFUTED:
        return Outcome(status, method, why)
    return Outcome(status, method, f"{why}: its bug goes unnoticed after {depth} commands: {describe(run)}",
                   traces=traces(run))


def needed(names: Iterable[str], base: Iterable[object], without: Callable[[str], tuple[object, object]],
           explain: Callable[[z3.ModelRef], str]) -> dict[str, tuple[str, str]]:
    """For each name, with ``without(name)`` = (the invariant without the clause in the state, the same and the
    goals in the successor): is ``base and hypothesis => goal`` refuted (the clause is needed)? One solver holds
    ``base`` (the step); each clause is one push, query, pop. Returns {name: (status, explanation)} where status is
    REFUTED (needed: ``explain(model)`` says what breaks) or PROVED (redundant) or undecided."""
    sol = solver()
    sol.add(*base)
    results = {}
    for name in names:
        sol.push()
        hypothesis, goal = without(name)
        sol.add(hypothesis, z3.Not(goal))
        answer = sol.check()
        if answer == z3.sat:
            results[name] = (REFUTED, explain(sol.model()))
        elif answer == z3.unsat:
            results[name] = (PROVED, "the invariant without it is still inductive: the clause is redundant")
        else:
            results[name] = (undecided(sol), sol.reason_unknown())
        sol.pop()
    return results


def needed_outcome(name: str, results: dict[str, tuple[str, str]], method: str) -> Outcome:
    if name not in results:
        return Outcome(ERROR, method, f"{name} is not a clause of the invariant any more")
    status, explanation = results[name]
    if status == REFUTED:
        return Outcome(REFUTED, method, f"without it the invariant is {NOT_INDUCTIVE}: {explanation}")
    return Outcome(status, method, explanation)
