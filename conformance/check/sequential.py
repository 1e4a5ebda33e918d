"""Checking an implementation against the model with generated runs: `run_check` and ``kpurgatory check``.

``run_check(factory, profile=...)`` explores runs of one profile with the conformance state machine
(`conformance.check.machine`), deterministically from ``seed``, and returns a `CheckResult`. On a failure the result
carries the shrunk counterexample as a trace of the model's observations — a test vector that
``kpurgatory replay TRACE --impl/--adapter`` reproduces and anyone can read — and the step table of the system
against the model at the step where they part. A system that raises, crashes, hangs or breaks the protocol fails like
a divergence and is shrunk the same way. The check goes on past a failure: it reports each distinct failure (by
`findings.Signature`) with its own shrunk counterexample, up to a cap, and lists Kafka's known misbehaviours
(`findings.FINDINGS`) apart, as findings that pass unless asked otherwise.

The command checks the built-in implementation on both profiles unless told otherwise, shows progress, a summary
and the coverage reached, writes counterexamples to ``--out`` and optionally a JUnit report, and exits 1 on any
failure.
"""

from __future__ import annotations

import contextlib
import functools
import io
import random
import shlex
import signal
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator

import attrs
import click
import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis.internal.conjecture.data import Status
from hypothesis.internal.conjecture.engine import ConjectureRunner
from hypothesis.internal.escalation import InterestingOrigin
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kpurgatory.conformance.adapters import BUILTIN, one_target, system_factory
from kpurgatory.conformance.adapters.kafka import release_of, with_kafka_option
from kpurgatory.conformance.adapters.subprocess import AdapterError
from kpurgatory.conformance.adapters.forked import ForkedSystem, makes_adapter
from kpurgatory.conformance.check import corpus as shared
from kpurgatory.conformance.check.compare import LEVELS
from kpurgatory.conformance.cli import Interrupted
from kpurgatory.conformance.check.findings import Finding, Signature
from kpurgatory.conformance.check.choices import ConjectureChoices
from kpurgatory.conformance.check.workers import judge_run, judged_runs, merge
from kpurgatory.conformance.check.scheduler import DEPTH, GRANULARITIES, STRATEGIES, Scheduling
from kpurgatory.conformance.check.concurrent import uncontrollable
from kpurgatory.conformance.check.machine import (BREAKS, FINDING_SHRINK_BUDGET, HANG_BUDGET, REFERENCE_BROKE, SHRINK_BUDGET,
                                                  Abort, Cut, Divergence, Drawn, ReferenceBroke, Session, Stop,
                                                  draw_run, judge, minimise, rerun)
from kpurgatory.conformance.traces.replay import ReplayReport, StepOutcome, print_report, with_target_options
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.terminal import command_console, counted, markup, safe
from kpurgatory.conformance.traces.codec import Header, Step, Trace, TraceFormatError, dumps, write_traces
from kpurgatory.conformance.traces.view import write_view
from kpurgatory.model import vocabulary as v

#: the default budget per profile: about 20 s of CPU each for the built-in implementation (kpurgatory check)
DEFAULT_EXAMPLES = 500
DEFAULT_STEPS = 60
#: how many distinct failures one check reports before it stops exploring (kpurgatory check --max-failures)
DEFAULT_MAX_FAILURES = 5
#: seconds one call into the system may take before it counts as hung (kpurgatory check --timeout)
DEFAULT_TIMEOUT_S = 10.0


@attrs.frozen
class Found:
    """One distinct failure or finding: its signature, the shrunk run (for a system that could not be made afresh:
    the run so far, and ``shrunk_length`` is None) and the system's run of it against the model (``report``, for
    `replay.print_report`); ``repeats`` counts the later runs that failed with the same signature. ``write_error``
    says why the counterexample could not be written to out_dir."""

    signature: Signature
    summary: str
    counterexample: Trace
    report: ReplayReport
    shrunk_length: int | None
    finding: Finding | None = None
    repeats: int = 0
    trace_path: Path | None = None
    table_path: Path | None = None
    write_error: str | None = None
    #: why shrinking stopped before it was done (interrupted, the budget of runs that hang); None: it was done
    unfinished: str | None = None


@attrs.frozen
class CheckResult:
    """The verdict of one profile's check. ``coverage`` maps every coverage item of the profile to how often the
    model's state reached it. ``failures`` and ``findings`` (Kafka's known misbehaviours) hold each distinct one
    found, shrunk; the fields from ``failure_summary`` to ``table_path`` and ``write_error`` repeat the first of
    what failed the check, for callers that want one counterexample.

    Run again with the same seed, system and corpus, on any machine under any load, a check gives the same result
    but for its `TIMING` fields (and the interruptions and hangs that time itself decides)."""

    #: the fields that say how long something took
    TIMING: ClassVar[tuple[str, ...]] = ("elapsed_s", "time_to_first_failure_s")

    passed: bool
    profile: str
    level: str
    seed: int
    implementation: str
    examples_run: int
    steps_run: int
    distinct_states: int
    coverage: dict[str, int]
    elapsed_s: float
    failure_summary: str = ""
    counterexample: Trace | None = None
    report: ReplayReport | None = None
    time_to_first_failure_s: float | None = None
    shrunk_length: int | None = None
    shrink_runs: int = 0
    trace_path: Path | None = None
    table_path: Path | None = None
    #: the system failed to answer (an adapter's crash, hang or garbage; an exception from an in-process system), so
    #: the verdict is an error, not a failure
    broken: bool = False
    #: why the counterexample could not be written to out_dir (it is then in ``counterexample`` only)
    write_error: str | None = None
    failures: tuple[Found, ...] = ()
    findings: tuple[Found, ...] = ()
    #: the signal that cut the check short (SIGINT, SIGTERM); what it found so far is kept
    interrupted: str | None = None
    #: why exploration stopped before its budget of examples was spent (too many runs hung)
    cut_short: str | None = None
    #: runs of the corpus replayed before exploring, and the runs found that were new to it
    corpus_runs: int = 0
    corpus_added: int = 0

    def failure_report(self) -> str:
        """What failed the check as plain text: each failure, its step table, and where its counterexample is."""
        lines = [f"{self.implementation} fails the {self.profile} profile at level {self.level} (seed {self.seed}): "
                 f"{self.failure_summary}"]
        for found in self.failures or self.findings:
            if len(self.failures or self.findings) > 1:
                lines.append(f"--- {found.signature}: {found.summary}")
            lines.append(render(found.report))
            if found.trace_path is not None:
                lines.append(f"counterexample: {found.trace_path}")
        return "\n".join(lines)


def run_check(system_factory: Callable[[], SystemUnderTest], *, profile: str, level: str = "exact",
              examples: int = DEFAULT_EXAMPLES, steps: int = DEFAULT_STEPS, seed: int | None = None,
              out_dir: str | Path | None = None, on_example: Callable[[Session], None] | None = None,
              timeout: float | None = DEFAULT_TIMEOUT_S, max_failures: int = DEFAULT_MAX_FAILURES,
              fail_on_findings: bool = False, hang_budget: int = HANG_BUDGET, shrink_budget: int = SHRINK_BUDGET,
              corpus: str | Path | None = None, jobs: int = 1) -> CheckResult:
    """Check the systems ``system_factory`` makes (one, initialised afresh for each example, and made afresh after
    it died) on ``profile``.

    ``examples`` runs of up to ``steps`` commands are generated from ``seed`` (a fresh random one when None; the
    result says which), so the same seed and system give the same result. Up to ``max_failures`` distinct failures
    are shrunk and reported, and every Kafka finding met; findings fail the check only with ``fail_on_findings``.
    An in-process system's calls are limited to ``timeout`` seconds each (a subprocess adapter has its own), the
    reference model's steps to as much or `DEFAULT_TIMEOUT_S`, whichever is longer. Each run that hangs costs that
    limit: ``hang_budget`` bounds how many may hang while one failure is shrunk, and while exploring after it
    (`machine.HANG_BUDGET`); ``shrink_budget`` how many runs Hypothesis may spend shrinking one failure (a failure
    shrunk no further for either is marked so). SIGINT and SIGTERM end the check with what it found so far
    (``interrupted``). With ``corpus`` (a folder, `conformance.check.corpus`), the failing runs in it are replayed
    first, and each failure and finding found is added to it. With ``jobs`` > 1 the runs are judged by that many
    worker processes, each with a system of its own (`workers`): the result is the same for any number.
    With ``out_dir`` each counterexample is written there as a trace, its step table as ``.txt`` and its page
    (`traces.view`) as ``.html``: the first failure as ``check-PROFILE-SEED.jsonl``, the next ones
    ``check-PROFILE-SEED-N.jsonl``, findings ``finding-PROFILE-SEED-NAME.jsonl``. ``on_example`` is called after
    every example with the `Session` (examples, steps, coverage, shrink_runs so far) for progress displays."""
    if profile not in v.PROFILES or level not in LEVELS:
        raise ValueError(f"profile must be one of {v.PROFILES} and level one of {LEVELS}; got {profile!r}, {level!r}")
    seed = random.randrange(2**32) if seed is None else seed
    started = time.monotonic()
    factory = time_limited(system_factory, timeout)
    system, session = factory(), None
    try:
        try:
            hello = system.hello()
        except AdapterError as error:
            return broken_result(profile, level, seed, "?", time.monotonic() - started,
                                 f"hello: system failed: {error}")
        if profile not in hello.profiles:
            raise ValueError(f"{hello.implementation} implements {', '.join(hello.profiles)}, not {profile}")
        replays = [] if corpus is None else shared.load(corpus, profile, hello)
        session = Session(factory, system, hello, profile, level, on_example,
                          model_timeout=None if timeout is None else max(timeout, DEFAULT_TIMEOUT_S),
                          hang_budget=hang_budget, shrink_budget=shrink_budget)
        with on_signals(session):
            try:
                session.exploring = True
                stops = explore(session, examples, steps, seed, max_failures, replays, jobs, factory)
            finally:
                session.exploring = False
                close(session.system)
    finally:
        if session is None:
            close(system)
    failures: list[Found] = []
    found_findings: list[Found] = []
    added = 0
    for stop in stops:
        listed = found_findings if stop.finding is not None else failures
        trace_id = (f"finding-{profile}-{seed}-{stop.finding.name}" if stop.finding is not None else
                    f"reference-{profile}-{seed}" if isinstance(stop, ReferenceBroke) else
                    f"check-{profile}-{seed}" + (f"-{len(failures) + 1}" if failures else ""))
        found = reported(stop, trace_id, session.known.get(stop.signature, 0), hello, profile, level, seed, out_dir)
        if corpus is not None:
            found, new = into_corpus(corpus, found)
            added += new
        listed.append(found)
    summary = dict(profile=profile, level=level, seed=seed, implementation=hello.implementation,
                   examples_run=session.examples, steps_run=session.steps,
                   distinct_states=len(session.coverage.states), coverage=session.coverage.report(),
                   elapsed_s=time.monotonic() - started, shrink_runs=session.shrink_runs,
                   failures=tuple(failures), findings=tuple(found_findings),
                   time_to_first_failure_s=session.first_failure_s, interrupted=session.interrupted,
                   cut_short=session.cut_short, corpus_runs=session.corpus_runs, corpus_added=added)
    failing = failures + (found_findings if fail_on_findings else [])
    if not failing:
        if session.interrupted:
            return CheckResult(False, **summary, broken=True,
                               failure_summary=f"interrupted ({session.interrupted}) before any failure was found")
        return CheckResult(True, **summary)
    first = failing[0]
    return CheckResult(False, **summary, failure_summary=first.summary, counterexample=first.counterexample,
                       report=first.report, shrunk_length=first.shrunk_length, trace_path=first.trace_path,
                       table_path=first.table_path, write_error=first.write_error,
                       broken=(all(found.report.error is not None for found in failing)
                               or any(found.signature.kind == REFERENCE_BROKE for found in failing)))


@contextlib.contextmanager
def on_signals(session: Session) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set ``session.interrupted``, which makes every later step raise
    `Interrupted` again; the signal itself raises it only while the check explores, so closing the system and
    writing what was found are not cut short. Only the main thread can handle signals: elsewhere they stay its."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        session.interrupted = signal.Signals(signum).name
        if session.exploring:
            raise Interrupted(session.interrupted)

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def close(system: SystemUnderTest) -> None:
    """Close ``system``; one that hangs or crashes on the way out changes nothing of what the check found."""
    with contextlib.suppress(AdapterError):
        system.close()


def time_limited(factory: Callable[[], SystemUnderTest], timeout: float | None) -> Callable[[], SystemUnderTest]:
    """``factory`` with its in-process systems made in a process of their own, each call limited to ``timeout``
    seconds (`ForkedSystem`); an adapter is a process of its own already."""
    if timeout is None or makes_adapter(factory):
        return factory
    return functools.partial(ForkedSystem, factory, timeout)


def reported(stop: Stop, trace_id: str, repeats: int, hello: Hello, profile: str, level: str, seed: int,
             out_dir: str | Path | None) -> Found:
    """``stop`` as a reported failure or finding: its run as a trace of the model's observations and the system's
    answers, written to ``out_dir`` (when given) with its step table and page."""
    description = (f"counterexample from `kpurgatory check --profile {profile} --level {level} --seed {seed}` "
                   f"against {hello.implementation}: {stop.summary}")
    steps = with_answers(stop)
    counterexample = Trace(Header(trace_id, profile, stop.params, description=description,
                                  declarations=hello.declarations), steps)
    last = steps[-1] if steps else None
    unanswered = (StepOutcome(last.seq, last.command, last.observation, None, None, failed=f"failed: {last.system}")
                  if last is not None and isinstance(last.system, str) else None)
    report = ReplayReport(counterexample, "system", level, tuple(stop.outcomes), stop.error, stop.error is not None,
                          finding=stop.finding, unanswered=unanswered)
    found = Found(stop.signature, stop.summary, counterexample, report,
                  None if isinstance(stop, (Abort, ReferenceBroke)) else len(stop.steps), stop.finding, repeats,
                  unfinished=stop.unfinished)
    if out_dir is None:
        return found
    try:
        trace_path = write_traces(Path(out_dir) / f"{trace_id}.jsonl", counterexample)
        table_path = trace_path.with_suffix(".txt")
        table_path.write_text(render(report))
        write_view(trace_path.with_suffix(".html"), counterexample, [report])
    except OSError as error:
        return attrs.evolve(found, write_error=f"cannot write the counterexample to {out_dir}: {error}")
    return attrs.evolve(found, trace_path=trace_path, table_path=table_path)


def into_corpus(directory: str | Path, found: Found) -> tuple[Found, bool]:
    """Add the run of ``found`` to the corpus ``directory`` (not one that could not be shrunk: the system could not
    be made afresh, or the reference model broke); ``found`` with a write error if it could not be, and whether the
    corpus did not hold it yet."""
    if found.shrunk_length is None:
        return found, False
    try:
        return found, shared.add(directory, found.counterexample) is not None
    except OSError as error:
        return attrs.evolve(found, write_error=found.write_error
                            or f"cannot add the counterexample to the corpus {directory}: {error}"), False


def with_answers(stop: Stop) -> list[Step]:
    """The stop's steps, each with what the system answered, so the trace alone reproduces the failure: its
    observation, or for a last step it failed to answer, how it failed."""
    answers: dict[int, v.Observation | str] = {outcome.seq: outcome.observed for outcome in stop.outcomes
                                                if outcome.observed is not None}
    if stop.error is not None and stop.steps and stop.steps[-1].seq not in answers:
        answers[stop.steps[-1].seq] = stop.error.partition(": system failed: ")[2] or stop.error
    return [attrs.evolve(step, system=answers.get(step.seq)) for step in stop.steps]


def explore(session: Session, examples: int, steps: int, seed: int, max_failures: int,
            replays: Iterable[tuple[v.Params, list[v.Command]]] = (), jobs: int = 1,
            factory: Callable[[], SystemUnderTest] | None = None) -> list[Stop]:
    """Replay the corpus's runs ``replays``, then draw and judge ``examples`` runs; the failures and findings, each
    shrunk, in the order found.

    Run number N is drawn from a generator seeded by ``seed`` and N alone (`machine.draw_run`), its watch keys start
    at the watcher shard of its number (`Session.key_home`), and it is judged on its own (`machine.judge`): so what
    a run is, and how it ends, depends on the seed and its number, never on what ran before it, and runs are judged
    on ``jobs`` workers that make their systems with ``factory`` (`workers.judged_runs`) as well as here. The first run that
    fails with a signature makes it known: later runs that fail with it pass, counted as repeats, so exploration goes
    on to other bugs. Exploration ends when the budget is spent, ``max_failures`` failures are known (findings do not
    count: there are few kinds), the system cannot be made afresh (`Abort`) or the reference model broke
    (`ReferenceBroke`), or the check is interrupted. Then each failure is shrunk from the run that found it
    (`shrink`). A corpus run that fails with a new signature is minimised by deleting steps (`machine.minimise`).

    Nothing the clock decides steers what is run: runs are drawn from the seed, shrinking is bounded by a count of
    runs, and a call counts as hung after the fixed time limit only. Nothing found is lost when shrinking is cut
    short, by an interruption, the shrink budget or the budget of runs that hang (`machine.HANG_BUDGET`): the
    shortest failing run so far is kept, marked as not fully shrunk."""
    found: list[Stop] = []
    failures = 0
    for params, commands in replays:
        if failures >= max_failures:
            return found
        try:
            stop = rerun(session, params, commands)
        except (Abort, ReferenceBroke) as ended:
            return [*found, ended]
        except BaseException as error:
            why_cut(session, error)
            return found
        session.corpus_runs += 1
        if stop is not None:
            found.append(shrink(session, stop, None, seed))
            failures += stop.finding is None
    first: list[tuple[Divergence, Drawn, int]] = []
    runs = judged_runs(session, seed, steps, examples, jobs, factory)
    try:
        for judged in runs:
            if failures >= max_failures:
                break
            merge(session.coverage, judged.coverage)
            session.example_done(judged.steps)
            signature = judged.signature
            if signature is None:
                continue
            if signature in session.known:
                session.known[signature] += 1
                if signature.kind == "hung" and judged.costly:
                    session.hung_again()
                continue
            if judged.stop is None:  # judged by a worker: judged again here, for its run and its report
                again = judge_run(session, seed, steps, judged.index)
                judged.run, judged.stop = again.run, again.stop
                if again.signature != signature:
                    continue  # it does not fail so again: a system that is not deterministic
            session.known[signature] = 0
            session.failing = True
            session.shortest = session.shortest or judged.stop
            if session.first_failure_s is None:
                session.first_failure_s = time.monotonic() - session.started
            first.append((judged.stop, judged.run, judged.index))
            failures += judged.stop.finding is None
    except (Abort, ReferenceBroke) as ended:
        return [*found, *(stop for stop, _, _ in first), ended]
    except BaseException as error:
        why_cut(session, error)
    finally:
        runs.close()
    for stop, run, index in first:
        if session.interrupted:
            stop.mark_unfinished("interrupted")
            found.append(stop)
        else:
            found.append(shrink(session, stop, run, seed, steps, index))
    return found


class Reproduced(Exception):
    """A shrinking run that failed as the failure being shrunk (Hypothesis's 'interesting')."""


#: what Hypothesis's shrinker marks a run that fails as the one being shrunk with (one origin: one failure at a time)
SHRUNK = InterestingOrigin.from_exception(Reproduced())
SHRINKING = hypothesis.settings(database=None, deadline=None, suppress_health_check=list(HealthCheck),
                                phases=(Phase.shrink,), verbosity=Verbosity.quiet)


def shrink(session: Session, stop: Divergence, run: Drawn | None, seed: int, steps: int = 0,
           index: int = 0) -> Stop:
    """``stop`` made as small as it goes: Hypothesis's shrinker works on the choices that drew ``run`` (deleting
    steps, moving each choice towards the simple end of its range) within the shrink budget; then steps are deleted
    from the run it ends with (`machine.minimise`: the shrinker now and then leaves a step it could not delete
    without changing another). A run given as commands (``run`` None: a corpus's) is only minimised. While it is
    shrunk, runs that fail with its signature are not counted as repeats, and a known hang's step is sent, not
    foreseen.

    A Kafka finding is shrunk without a search: its input class is known from the model's side (what Kafka's timer
    does there, `findings.KafkaShadow`), so its run is cut at the first step that reaches it, the system is sent
    that run once to confirm it, and its steps are deleted. Only a finding the system does not confirm there is
    shrunk on the system, within `FINDING_SHRINK_BUDGET` runs."""
    target = stop.signature
    repeats = session.known.pop(target, 0)
    try:
        shrunk, unfinished = shrink_under(session, stop, run, seed, steps, index, probe=True)
        if shrunk is not stop and target.kind == "hung" and not session.interrupted:
            confirmed = confirmed_hang(session, shrunk)
            if confirmed is None:  # it hangs only under the shorter limit: shrink again under the full one
                shrunk, unfinished = shrink_under(session, stop, run, seed, steps, index, probe=False)
            else:
                shrunk = confirmed
    finally:
        session.known[target] = repeats
    if unfinished is not None:
        shrunk.mark_unfinished(unfinished)
    return shrunk


def shrink_under(session: Session, stop: Divergence, run: Drawn | None, seed: int, steps: int, index: int,
                 probe: bool) -> tuple[Divergence, str | None]:
    """`shrink`'s search, a hang's under the shorter time limit if ``probe`` (`Session.probing`): the smallest
    failure found, and why the search stopped early (None: it did not)."""
    target = stop.signature
    session.shrinking = True
    session.batching = stop.error is None or target.kind not in BREAKS
    unfinished = None
    try:
        with session.probing(target, probe) as hang_budget:
            if run is not None and stop.finding is not None:
                reached = reaching(run, stop.finding)
                confirmed = judge(session, reached) if reached is not None else None
                if confirmed is not None and confirmed.signature == target:
                    run, stop = None, confirmed
            if run is not None:
                budget = session.shrink_budget if stop.finding is None else min(session.shrink_budget,
                                                                                 FINDING_SHRINK_BUDGET)
                shrunk, unfinished = shrink_choices(
                    session, run.choices, steps, index, f"{seed}/{index}/shrink", budget, hang_budget,
                    lambda drawn: (failure if (failure := judge(session, drawn)) is not None
                                   and failure.signature == target else None), len(stop.steps))
                if shrunk is None:
                    stop.summary += " (did not fail again when run once more: is the system deterministic?)"
                else:
                    stop = shrunk
            if not session.interrupted:
                stop = minimise(session, stop, hang_budget)
    except (Abort, ReferenceBroke):
        raise
    except BaseException as error:
        unfinished = why_cut(session, error)
    finally:
        session.shrinking, session.batching = False, True
    return stop, unfinished


def confirmed_hang(session: Session, shrunk: Divergence) -> Divergence | None:
    """The hang ``shrunk`` to (under the shorter time limit, `machine.HANG_PROBE_FRACTION`), run again under the
    full one; None if it does not hang there."""
    session.renew(shrunk.params)
    again = rerun(session, shrunk.params, [step.command for step in shrunk.steps])
    return again if again is not None and again.signature == shrunk.signature else None


def shrink_choices(session: Session, choices: tuple[int, ...], steps: int, index: int, label: str, budget: int,
                   hang_budget: int, failing: Callable[[Drawn], Divergence | None],
                   cut_at: int) -> tuple[Divergence | None, str | None]:
    """The smallest ``failing(run)`` Hypothesis's shrinker finds from the run drawn by ``choices`` (None: that run
    itself does not fail), and why it stopped early (None: it did not): at ``budget`` runs, after ``hang_budget``
    runs that hung at the cost of a fresh system, or an interruption. Runs are drawn up to
    ``cut_at`` commands, where the run being shrunk failed: a run that fails only later is no smaller (the cut is
    the same for every run of a shrink, as Hypothesis requires of a test: the same choices, the same run)."""
    found: dict[tuple, Divergence] = {}
    spent, hangs = [0], [0]

    def test(data) -> None:
        if spent[0] >= budget:
            raise Cut(f"the shrink budget of {budget} runs was spent")
        session.go_on()
        spent[0] += 1
        session.shrink_run_done()
        outcome = failing(draw_run(session, ConjectureChoices(data), steps, session.key_home(index), cut_at=cut_at))
        if isinstance(outcome, Divergence) and outcome.signature.kind == "hung" and session.broke():
            hangs[0] += 1
            if hangs[0] >= hang_budget:
                raise Cut(f"shrinking stopped after {hangs[0]} runs that hung")
        if outcome is not None:
            found[tuple(data.choices)] = outcome
            data.mark_interesting(SHRUNK)

    runner = ConjectureRunner(test, settings=SHRINKING, random=random.Random(label), ignore_limits=True)
    try:
        initial = runner.cached_test_function(choices)
        if initial.status != Status.INTERESTING:
            return None, None
        shrinker = runner.new_shrinker(initial, lambda data: data.status == Status.INTERESTING)
        shrinker.shrink()
        return found[tuple(shrinker.shrink_target.choices)], None
    except (Abort, ReferenceBroke):
        raise
    except BaseException as error:  # out of budget: the smallest so far; deleting steps may go further
        why = why_cut(session, error)
        return min(found.values(), key=lambda outcome: len(outcome.steps), default=None), why


def reaching(run: Drawn, finding: Finding) -> Drawn | None:
    """``run`` up to its first step in ``finding``'s input class, by what Kafka's timer does there (None: none)."""
    for at, (step, edge) in enumerate(zip(run.steps, run.edges)):
        if edge is not None and finding.inputs(edge, step.command, step.observation):
            return attrs.evolve(run, steps=run.steps[:at + 1], edges=run.edges[:at + 1], sendable=None,
                                foreseen=None)
    return None


def why_cut(session: Session, error: BaseException) -> str:
    """Why ``error`` cut exploration or shrinking short: the hang or shrink budget (`Cut`; a final one ends
    exploration: ``session.cut_short``), or an interruption; anything else is re-raised."""
    if isinstance(error, Cut):
        if error.final:
            session.cut_short = error.reason
        return error.reason
    if isinstance(error, (Interrupted, KeyboardInterrupt)) and session.interrupted is not None:
        return "interrupted"
    raise error


def render(report: ReplayReport) -> str:
    """The step table and verdict of ``report`` as plain text."""
    console = Console(file=io.StringIO(), width=160, color_system=None)
    print_report(console, report, window=None)
    return console.file.getvalue()


# ---------------------------------------------------------------------------------------------------------------
# JUnit
# ---------------------------------------------------------------------------------------------------------------


def write_junit(path: Path, results: list[CheckResult]) -> None:
    """One test suite, one test case per profile. A wrong answer is a <failure> whose text is its step table; a
    system that could not be driven, or a check cut short, is an <error>."""
    failures = sum(not result.passed and not result.broken for result in results)
    errors = sum(result.broken for result in results)
    elapsed = f"{sum(result.elapsed_s for result in results):.3f}"
    suite = ET.Element("testsuite", name=f"kpurgatory check: {safe(results[0].implementation)}",
                       tests=str(len(results)), failures=str(failures), errors=str(errors), time=elapsed)
    for result in results:
        case = ET.SubElement(suite, "testcase", classname="kpurgatory.check",
                             name=f"{result.profile} ({result.level})", time=f"{result.elapsed_s:.3f}")
        properties = ET.SubElement(case, "properties")
        for name in ("seed", "examples_run", "steps_run", "distinct_states", "shrink_runs"):
            ET.SubElement(properties, "property", name=name, value=str(getattr(result, name)))
        if not result.passed:  # XML 1.0 cannot hold control characters: untrusted text goes through safe()
            verdict = ET.SubElement(case, "error" if result.broken else "failure",
                                    message=safe(result.failure_summary.splitlines()[0]),
                                    type="system broke" if result.broken else "counterexample")
            verdict.text = safe(result.failure_report())
    suites = ET.Element("testsuites", name="kpurgatory", tests=str(len(results)), failures=str(failures),
                        errors=str(errors), time=elapsed)
    suites.append(suite)
    tree = ET.ElementTree(suites)
    ET.indent(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def broken_result(profile: str, level: str, seed: int, implementation: str, elapsed_s: float,
                  summary: str) -> CheckResult:
    """The verdict of a profile whose check could not run: the system broke before it, or the check was cut short."""
    return CheckResult(False, profile, level, seed, implementation, 0, 0, 0, {}, elapsed_s, summary, broken=True)


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------


def summary_table(results: list[CheckResult]) -> Table:
    first = results[0]
    table = Table(title=f"{markup(first.implementation)} against the model (level {first.level}, seed {first.seed})",
                  caption="states: distinct shapes of the model's state visited; coverage: items reached")
    for column in ("profile", "verdict", "failures", "findings", "examples", "steps", "states", "coverage"):
        table.add_column(column, justify="left" if column in ("profile", "verdict") else "right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True, min_width=7)  # up to a day: the table's width is no timing
    for result in results:
        reached = sum(count > 0 for count in result.coverage.values())
        table.add_row(result.profile, "[green]pass[/]" if result.passed else "[bold red]FAIL[/]",
                      str(len(result.failures)), str(len(result.findings)), str(result.examples_run),
                      str(result.steps_run), str(result.distinct_states),
                      f"{reached}/{len(result.coverage)}", f"{result.elapsed_s:.0f} s")
    return table


def coverage_table(results: list[CheckResult]) -> Table:
    """Coverage items as rows, profiles as columns; an item a profile never reached shows in red."""
    table = Table(title="coverage: how often the model's state reached each item")
    table.add_column("item")
    for result in results:
        table.add_column(result.profile, justify="right")
    items = list(dict.fromkeys(item for result in results for item in result.coverage))
    for item in items:
        cells = [("" if item not in result.coverage else
                  str(result.coverage[item]) if result.coverage[item] else "[red]0[/]") for result in results]
        table.add_row(item, *cells)
    return table


def target_flags(impl: str | None, adapter: str | None, level: str) -> str:
    release = adapter and release_of(adapter)
    flags = (f"--kafka {release}" if release else f"--adapter {shlex.quote(adapter)}" if adapter
             else f"--impl {impl}")
    return flags + (f" --level {level}" if level != "exact" else "")


def concurrently(impl, adapter, timeout, profile, examples, steps, seed, out, junit, threads, max_failures,
                 fail_on_findings, corpus, scheduling) -> None:
    """``kpurgatory check --threads N``: refuse what the concurrent check cannot do, then run it and exit."""
    if profile == "timer":
        raise click.UsageError("--threads checks the purgatory profile: drop --profile timer")
    factory = system_factory(impl, adapter, timeout)
    if scheduling is not None and (reason := uncontrollable_system(factory)):
        raise click.UsageError(f"--scheduler cannot run {reason}")
    if scheduling is not None and adapter and scheduling.granularity != "sync":
        raise click.UsageError("--granularity calls switches at Python calls: in process only; an adapter's "
                               "scheduler stops at its synchronisation points (--granularity sync)")
    seed = random.randrange(2**32) if seed is None else seed
    if adapter:
        try:
            features = introduce(factory).features
        except AdapterError as error:
            click.echo(f"ERROR hello: system failed: {safe(error)}")
            report_junit(junit, [broken_result("purgatory", "concurrent", seed, "?", 0.0,
                                               f"hello: system failed: {error}")])
            sys.exit(3)
        if "concurrent" not in features:
            raise click.UsageError("--threads calls the adapter from several threads at once; it must list the "
                                   "'concurrent' feature in its hello (specs/protocol.md, §3)")
    from kpurgatory.conformance.check.concurrent import check_concurrently, exit_code, failure_text

    rerun = (f"kpurgatory check {target_flags(impl, adapter, 'exact')} --threads {threads} --examples {examples} "
             f"--steps {steps} --seed {seed}{scheduling.flags() if scheduling is not None else ''}")
    result = check_concurrently(factory, threads=threads, runs=examples, steps=steps, seed=seed, timeout=timeout,
                                out=out, rerun=rerun, max_failures=max_failures, fail_on_findings=fail_on_findings,
                                corpus=corpus, scheduling=scheduling)
    code = exit_code(result)
    report_junit(junit, [CheckResult(result.passed, "purgatory", "concurrent", seed, result.implementation,
                                     result.runs, result.calls, 0, {}, result.elapsed_s, broken=code == 3,
                                     failure_summary=failure_text(result))])
    sys.exit(code)


def uncontrollable_system(factory: Callable[[], SystemUnderTest]) -> str | None:
    """Why a controlled scheduler cannot run the system, naming it (None: it can; it says so after its hello,
    ``controllable``)."""
    system = factory()
    try:
        hello = system.hello()
        if getattr(system, "controllable", False):
            return None
        return f"{safe(hello.implementation)}: {uncontrollable(system)}"
    finally:
        system.close()


def introduce(factory: Callable[[], SystemUnderTest]) -> Hello:
    """The hello of a system made for the purpose (it says which profiles to check)."""
    system = factory()
    try:
        return system.hello()
    finally:
        system.close()


def check_profile(console: Console, factory: Callable[[], SystemUnderTest], profile: str, level: str, examples: int,
                  steps: int, seed: int, out: Path, results: list[CheckResult], **options) -> None:
    """`run_check` of one profile (with ``options``) with a progress bar; its result is appended to ``results``."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task(f"{profile:9}", total=examples, detail="")

        def show(session: Session) -> None:
            detail = (f"shrinking: {session.shrink_runs} runs" if session.shrinking else
                      f"{session.steps} steps, {len(session.coverage.states)} states")
            if session.known:
                detail += f", {len(session.known)} found"
            progress.update(task, completed=session.examples, total=max(examples, session.examples), detail=detail)

        results.append(run_check(factory, profile=profile, level=level, examples=examples, steps=steps, seed=seed,
                                 out_dir=out, on_example=show, **options))


def report_junit(path: Path | None, results: list[CheckResult]) -> None:
    """Write the JUnit report if one was asked for; a path that cannot be written is the tool's failure (exit 3)."""
    if path is None:
        return
    try:
        write_junit(path, results)
    except OSError as error:
        click.echo(f"Error: cannot write the JUnit report: {safe(error)}", err=True)
        sys.exit(3)


@click.command("check")
@with_kafka_option
@with_target_options
@click.option("--profile", type=click.Choice(v.PROFILES), help="Check one profile [default: every profile the "
                                                                "implementation declares in its hello].")
@click.option("--examples", type=click.IntRange(1), default=DEFAULT_EXAMPLES, show_default=True,
              help="Runs to generate per profile.")
@click.option("--steps", type=click.IntRange(1), default=DEFAULT_STEPS, show_default=True,
              help="Commands per run, at most.")
@click.option("--seed", type=click.IntRange(0), help="Seed of the generated runs [default: a fresh one, printed].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("kpurgatory-out"),
              show_default=True, help="Where counterexamples are written.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write a JUnit XML report.")
@click.option("--threads", type=click.IntRange(1, 64), default=1, show_default=True,
              help="With 2 or more: the concurrent check. That many threads call the system at once (purgatory "
                   "profile; an --adapter must declare the 'concurrent' feature), and properties are checked on the recorded history; --examples "
                   "counts runs, --steps the rounds of each run, and --level does not apply.")
@click.option("--max-failures", type=click.IntRange(1), default=DEFAULT_MAX_FAILURES, show_default=True,
              help="Distinct failures to shrink and report per profile before the check stops exploring. Failures "
                   "are told apart by signature: the property broken, or the command and field that differ, or how "
                   "the system failed to answer (raised, crashed, hung, broke the protocol) and in which command; "
                   "with --threads, the property broken and the commands of the calls that broke it.")
@click.option("--fail-on-findings/--findings-pass", default=False, show_default=True,
              help="Whether Kafka findings fail the check. A finding is the system doing what Kafka's own timer "
                   "wrongly does at the edge of the domain: now + delay past Long.MAX_VALUE wraps and the task runs "
                   "at once; an overflow level's interval wraps: a far deadline runs early, / by zero, a negative "
                   "bucket index, overflow wheels without end (stack overflow or a hang), a re-insertion livelock; "
                   "with --threads, a race the declared Kafka release shipped. By default each is reported apart "
                   "with its shrunk trace and the releases that have it, and the check goes on and passes without "
                   "them.")
@click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Judge the runs on this many worker processes, each with a system of its own (an adapter each). "
                   "The same seed gives the same outputs for any number.")
@click.option("--shrink-budget", type=click.IntRange(0), default=SHRINK_BUDGET, show_default=True,
              help="Runs Hypothesis may spend shrinking one failure; a failure shrunk no further is reported as not "
                   "fully shrunk. A count, not a time, so the same seed shrinks alike on any machine.")
@click.option("--corpus", type=click.Path(file_okay=False, path_type=Path),
              help="A folder of failing runs shared between checks: its runs of the profile are replayed at this "
                   "check's level (with --threads: as plans of the concurrent check) before any is generated, and "
                   "each failure and finding a check without --threads finds is added to it.")
@click.option("--scheduler", type=click.Choice(STRATEGIES),
              help="With --threads: run every run under a controlled scheduler that lets one thread run at a time "
                   "and chooses who goes on at each lock (pct: probabilistic concurrency testing; random: a random "
                   "walk). The same --seed replays the same interleavings; a failure is written with its schedule, "
                   "which `kpurgatory replay` replays. In process, or through an adapter that lists the 'scheduler' "
                   "feature.")
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="sync", show_default=True,
              help="With --scheduler: switch threads only at synchronisation points (sync), or at the system's "
                   "function calls too (calls: finds races in code no lock guards, at more points per run).")
@click.option("--depth", type=click.IntRange(1, 16), default=DEPTH, show_default=True,
              help="With --scheduler pct: the bug depth PCT aims at (its priority change points plus one).")
@click.option("--switch-bound", type=click.IntRange(0), help="With --scheduler random: at most this many switches "
                                                                "from the default order per run.")
def check_command(impl, adapter, timeout, level, profile, examples, steps, seed, out, junit, threads, max_failures,
                  fail_on_findings, jobs, shrink_budget, corpus, scheduler, granularity, depth, switch_bound):
    """Check an implementation against the model with generated runs (the built-in one by default).

    Hypothesis drives the model and the implementation side by side; on a failure it shrinks the run to a minimal
    counterexample, written to --out as a trace that `kpurgatory replay` reproduces, then goes on exploring with
    that failure known, up to --max-failures distinct failures per profile. A system that raises, crashes, hangs
    (takes longer than --timeout for one call, in process or through --adapter) or breaks the protocol fails and is
    shrunk the same way, and is made afresh (an adapter restarted) for the next run. Exits 0 when every profile
    passes (findings aside), 1 when the implementation fails one, 3 when it only failed to answer (crash, hang,
    garbage), a counterexample could not be written, or the check was interrupted; --junit is written in every
    case.

    With the same --seed, system and --corpus content, a check runs, shrinks and reports the same on any machine under
    any load: only the times printed differ (the summary's time column, "first failure after", the progress bar,
    JUnit's time attributes)."""
    console = command_console()

    def plain(text: str) -> None:
        """Paths and commands: never wrapped or styled, so they can be copied."""
        console.print(safe(text), markup=False, highlight=False, soft_wrap=True)

    one_target(impl, adapter)  # before the default --impl applies
    impl = None if adapter else impl or BUILTIN
    if corpus is not None:
        try:
            shared.load(corpus, v.PROFILES[0])  # reads every file: a bad one is bad input, before anything runs
        except TraceFormatError as error:
            raise click.BadParameter(str(error), param_hint="--corpus") from None
    if scheduler is not None and threads < 2:
        raise click.UsageError("--scheduler schedules the threads of the concurrent check: add --threads N (N >= 2)")
    if threads > 1:
        scheduling = None if scheduler is None else Scheduling(scheduler, depth, switch_bound, granularity)
        concurrently(impl, adapter, timeout, profile, examples, steps, seed, out, junit, threads, max_failures,
                     fail_on_findings, corpus, scheduling)
    factory = system_factory(impl, adapter, timeout)
    seed = random.randrange(2**32) if seed is None else seed
    started = time.monotonic()
    results: list[CheckResult] = []
    current, implementation = profile or "hello", "?"
    try:
        try:
            hello = introduce(factory)
        except AdapterError as error:
            plain(f"ERROR hello: system failed: {error}")
            report_junit(junit, [broken_result(current, level, seed, "?", time.monotonic() - started,
                                               f"hello: system failed: {error}")])
            sys.exit(3)
        implementation = hello.implementation
        if profile and profile not in hello.profiles:
            raise click.UsageError(f"{safe(implementation)} implements {', '.join(hello.profiles)}, not {profile}")
        profiles = [profile] if profile else [p for p in v.PROFILES if p in hello.profiles]
        console.print(f"checking {markup(implementation)} ({', '.join(profiles)}; level {level}; "
                      f"{examples} examples of up to {steps} steps; seed {seed}; shrinking each failure in up to "
                      f"{shrink_budget} runs)")
        if corpus is not None:
            plain(f"corpus: {corpus}")
        for current in profiles:
            check_profile(console, factory, current, level, examples, steps, seed, out, results, timeout=timeout,
                          max_failures=max_failures, fail_on_findings=fail_on_findings, shrink_budget=shrink_budget,
                          corpus=corpus, jobs=jobs)
            if results[-1].interrupted:
                break
    except click.ClickException:
        raise
    except (Exception, KeyboardInterrupt, Interrupted) as error:  # the report says so, then exit 3 (cli.main)
        cut = ("interrupted" if isinstance(error, (KeyboardInterrupt, Interrupted)) else
               f"kpurgatory crashed: {type(error).__name__}: {error}")
        report_junit(junit, results + [broken_result(current, level, seed, implementation,
                                                     time.monotonic() - started, cut)])
        raise
    console.print(summary_table(results))
    if passing := [result for result in results if result.passed]:  # a failed run's coverage stops at its failure
        console.print(coverage_table(passing))
    for result in results:
        for found in result.findings + result.failures:
            failing = found.finding is None or fail_on_findings
            console.rule(f"[bold {'red' if failing else 'yellow'}]{result.profile}: "
                         + markup(str(found.signature if found.finding is None else found.finding.name)))
            print_report(console, found.report, window=None)
            plain(("not shrunk: the reference model broke" if found.signature.kind == REFERENCE_BROKE else
                   "not shrunk: the system could not be made afresh" if found.shrunk_length is None else
                   f"not fully shrunk ({found.unfinished}): {counted(found.shrunk_length, 'step')}" if found.unfinished
                   else f"shrunk to {counted(found.shrunk_length, 'step')}")
                  + f"; met again in {counted(found.repeats, 'later run')}")
            if found.write_error is not None:  # the counterexample is not lost: it goes to the terminal
                plain(f"{found.write_error}\ncounterexample (JSON Lines):\n{dumps(found.counterexample)}")
            elif found.trace_path is not None:
                plain(f"counterexample: {found.trace_path}\nstep table:     {found.table_path}\n"
                      f"view:           {found.trace_path.with_suffix('.html')}")
                plain(f"replay:         kpurgatory replay {found.trace_path} {target_flags(impl, adapter, level)}")
        if result.cut_short:
            plain(f"{result.profile}: {result.cut_short}")
        if corpus is not None:
            plain(f"{result.profile}: {counted(result.corpus_runs, 'run')} of the corpus replayed, "
                  f"{result.corpus_added} added to it")
        if result.failures or result.findings:
            first = result.time_to_first_failure_s  # None: only the reference model failed
            console.print(f"{result.profile}: " + ("" if first is None else f"first failure after {first:.1f} s; ")
                          + f"{counted(len(result.failures), 'distinct failure')}, "
                          f"{counted(len(result.findings), 'Kafka finding')}; {counted(result.shrink_runs, 'shrink run')}")
        elif not result.passed:
            plain(result.failure_summary)
        if not result.passed:
            plain(f"re-run:         kpurgatory check {target_flags(impl, adapter, level)} --profile "
                  f"{result.profile} --examples {examples} --steps {steps} --seed {seed}"
                  + (f" --shrink-budget {shrink_budget}" if shrink_budget != SHRINK_BUDGET else "")
                  + (f" --corpus {shlex.quote(str(corpus))}" if corpus is not None else ""))
    report_junit(junit, results)
    if interrupted := next((result.interrupted for result in results if result.interrupted), None):
        unfinished = any(found.unfinished for result in results for found in result.failures + result.findings)
        kept = sum(len(result.failures) for result in results)
        plain(f"interrupted ({interrupted}): " + ("counterexample not fully shrunk" if unfinished else
                                                  f"{kept} counterexamples kept" if kept else
                                                  "stopped before any failure was found"))
    code = (3 if any(result.broken or result.write_error for result in results) else
            0 if len(passing) == len(results) else 1)
    console.print(f"{['[green]PASS[/]', '[bold red]FAIL[/]', '', '[bold red]ERROR[/]'][code]} seed {seed}")
    sys.exit(code)
