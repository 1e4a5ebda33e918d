"""Replaying traces: the model is always the oracle.

``replay(trace, system)`` runs the trace's commands through the model and, when given, a system under test. Each
step's recorded observation (a claim about the semantics: a hand-written expectation, a recording of a real system,
or the model's own output in a counterexample) and the system's observation are compared with the model's — exactly
at level ``exact``, through the contract properties at level ``contract`` — and the contract is checked as an
invariant at both levels. The replay stops at the first failing step, since what follows a divergence compares
different states.

A counterexample also records what the system under test answered at each step (`codec.Step.system`). Replayed
without a system, those answers are judged as the system's, so the trace alone shows the failure; given a live
system (``--impl``/``--adapter``), the live answers are judged instead, so a fixed system passes.

A failure that is one of Kafka's known misbehaviours (`findings.FINDINGS`: a counterexample of a finding written by
`kpurgatory check`, or a recording of Kafka's own classes at the edge of the domain) is named by the classifier check
uses (`findings.recognise`, with Kafka's timer run beside the model's) and, as in check, passes unless findings are
asked to fail (``--fail-on-findings``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import importlib.resources
import sys
from pathlib import Path

import attrs
import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kpurgatory.conformance.check import findings
from kpurgatory.conformance.check.compare import LEVELS, Difference, describe_events, exact_difference
from kpurgatory.conformance.check.findings import Finding
from kpurgatory.conformance.adapters.kafka import with_kafka_option
from kpurgatory.conformance.adapters.subprocess import AdapterFailed
from kpurgatory.conformance.adapters.timed import MODEL_STEP_S, TimeLimit, failure_text, limited
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.terminal import command_console, counted, markup, safe
from kpurgatory.conformance.traces.codec import (MODEL, Step, Trace, TraceFormatError, collector_paused,
                                                 command_to_json, read_traces)
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, ContractMonitor, Declarations, Violation
from kpurgatory.model.releases import RULES, Release

#: who made an observation that failed: the trace's recording, or the system under test
RECORDING, SYSTEM = "recording", "system"


@attrs.frozen
class Failure:
    who: str
    what: Difference | Violation

    def __str__(self) -> str:
        kind = "differs from the model" if isinstance(self.what, Difference) else f"breaks {self.what.prop}"
        detail = self.what.detail if isinstance(self.what, Difference) else self.what.message
        return f"{self.who} {kind}: {detail}"


@attrs.frozen
class StepOutcome:
    seq: int
    command: v.Command
    model: v.Observation
    recorded: v.Observation | None
    observed: v.Observation | None
    failures: tuple[Failure, ...] = ()
    #: how the system failed to answer the step (raised, crashed, hung), where it did
    failed: str | None = None


@attrs.frozen
class ReplayReport:
    trace: Trace
    target: str
    level: str
    outcomes: tuple[StepOutcome, ...]
    error: str | None = None  # the system failed (crash, hang, protocol violation) or the trace is malformed
    broken: bool = False  # the error is the system's (or the reference model's) failure to answer, not the trace's
    #: why the system differs, when the Kafka release it declares answers the failing step as it did
    explanation: str | None = None
    #: the release rules (tickets) that explanation names: the trace pins a release on their other side
    other_side_of: tuple[str, ...] = ()
    #: why the trace was not replayed on the system: it uses commands the system cannot execute
    skipped: str | None = None
    #: how the system failed to answer (a `findings.Signature` kind: hung, raised, adapter crashed, ...)
    failed_as: str | None = None
    #: the Kafka misbehaviour the failure is (the system's, or the recording's), if it is one (`findings.FINDINGS`)
    finding: Finding | None = None
    #: the step the system failed to answer (``error``), shown after the outcomes
    unanswered: StepOutcome | None = None
    #: the step at which the reference model itself hung or raised (``error`` says how): a bug in kpurgatory
    model_broke_at: int | None = None

    @property
    def exit_code(self) -> int:
        """This replay's exit code (0 pass, 1 the implementation failed, 2 bad input or a trace the system cannot
        run, 3 the system broke); a Kafka finding passes, as in check."""
        return 0 if self.finding is not None else self.failure_code

    @property
    def failure_code(self) -> int:
        """The exit code with a Kafka finding taken for the failure it is (``--fail-on-findings``)."""
        return 3 if self.broken else 2 if self.error is not None or self.skipped else 0 if self.ok else 1

    @property
    def ok(self) -> bool:
        return self.error is None and not any(outcome.failures for outcome in self.outcomes)

    @property
    def first_failure(self) -> StepOutcome | None:
        return next((outcome for outcome in self.outcomes if outcome.failures), None)


class StepChecker:
    """Compares one observer's observations with the model's, step by step, at a level. At the contract level the
    observer is judged by what it declared (``declarations``); the exact level is Kafka's behaviour and contract."""

    def __init__(self, who: str, trace: Trace, level: str, declarations: Declarations = KAFKA):
        self.who, self.level = who, level
        # the exact level holds the system to Kafka's promises, of the release it follows
        self.monitor = ContractMonitor(trace.header.profile, trace.header.params,
                                       declarations if level == "contract" else
                                       Declarations(kafka_version=declarations.kafka_version))

    def check(self, command: v.Command, model: v.Observation, observed: v.Observation) -> list[Failure]:
        failures = [Failure(self.who, violation) for violation in self.monitor.observe(command, observed)]
        if self.level == "exact":
            difference = exact_difference(command, model, observed)
            if difference is not None:
                failures.insert(0, Failure(self.who, difference))
        return failures


CONCURRENT_HISTORY = ("a concurrent history has no order to replay its steps in unless a controlled scheduler ran it "
                      "(its header has a schedule); check it with `kpurgatory check-history`")
SEQUENTIAL_TRACE = "not a concurrent history (no threads in the header); replay it with `kpurgatory replay`"


def read_for_command(paths, *, concurrent: bool) -> dict[Path, list[Trace]]:
    """The traces of PATHS, for a command that takes one kind only: sequential traces (replay, which also takes
    the concurrent histories a controlled scheduler ran) or concurrent histories (check-history). Malformed input,
    or a trace of the other kind, exits 2 naming it."""
    try:
        files = {path: read_traces(path) for path in paths}
    except TraceFormatError as error:
        click.echo(f"Error: {safe(error)}", err=True)
        sys.exit(2)
    if wrong := [trace.trace_id for traces in files.values() for trace in traces
                 if (trace.header.threads is not None) != concurrent
                 and not (not concurrent and trace.header.schedule is not None)]:
        click.echo(f"Error: {safe(', '.join(wrong))}: {SEQUENTIAL_TRACE if concurrent else CONCURRENT_HISTORY}",
                   err=True)
        sys.exit(2)
    return files


def replay(trace: Trace, system: SystemUnderTest | None = None, level: str = "exact", *,
           check_recording: bool = True, features: tuple[str, ...] = v.OPTIONAL,
           declarations: Declarations | None = None, unsupported: frozenset[str] = frozenset()) -> ReplayReport:
    """Replay ``trace``; see the module docstring. ``features`` are the optional commands ``system`` supports,
    ``declarations`` what it promises (by default, what the trace's header records) and ``unsupported`` the
    commands it cannot execute: a trace using one is not replayed (``skipped``). A recording is judged by its
    header's declarations, except the model's own observations (a test vector), which are Kafka's. A system that
    fails to answer is reported with how (``failed_as``), and a failure that is one of Kafka's known misbehaviours
    with it (``finding``)."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    header = trace.header
    if header.threads is not None:
        return ReplayReport(trace, "model" if system is None else "system", level, (), CONCURRENT_HISTORY)
    declared = header.declarations if declarations is None else declarations
    if system is not None and (lacking := sorted({step.command.name for step in trace.steps} & unsupported)):
        why = (f"{declared.release} has no such call" if set(lacking) <= declared.release.missing_commands
               else "unsupported by the adapter")
        return ReplayReport(trace, "system", level, (), skipped=f"uses {', '.join(lacking)}, {why}")
    # The trace's recording is what the release in its header does. The system is judged as the release it declares,
    # unless the trace pins one (a release rule's separating scenario): then as that release, and where it differs,
    # its own release's answers name the rules that explain it.
    recorded_release = header.declarations.release
    release = recorded_release if header.declarations.kafka_version else declared.release
    models = {candidate: Model(header.profile, header.params, candidate)
              for candidate in (release, recorded_release, declared.release)}
    model = models[release]
    explanation, other_side_of = None, ()
    recorded_by_model = header.implementation == MODEL
    recording = (StepChecker(RECORDING, trace, level, KAFKA if recorded_by_model else header.declarations)
                 if check_recording else None)
    # a counterexample's recorded answers stand for the system when no live one is given
    answers = system is None and any(step.system is not None for step in trace.steps)
    sut = StepChecker(SYSTEM, trace, level, declared)
    sut = sut if system is not None or answers else None
    outcomes: list[StepOutcome] = []
    finding = failed_as = edge = None
    # what Kafka's own timer does where its arithmetic wraps, to tell its known misbehaviours from the system's bugs
    # (and a recording's: a recording of Kafka's classes does what they do)
    shadow = findings.KafkaShadow() if sut is not None or recording is not None else None

    def report(error: str | None = None, broken: bool = False, unanswered: StepOutcome | None = None,
               model_broke_at: int | None = None) -> ReplayReport:
        return ReplayReport(trace, "system" if sut is not None else "model", level, tuple(outcomes), error, broken,
                            explanation, other_side_of, failed_as=failed_as, finding=finding, unanswered=unanswered,
                            model_broke_at=model_broke_at)

    def failed(step: Step | None, expected: v.Observation | None, error: Exception) -> ReplayReport:
        """The system failed to answer ``step`` (None: init)."""
        nonlocal failed_as, finding
        where = "init" if step is None else f"step {step.seq}"
        failed_as = findings.error_signature(where, error).kind
        finding = findings.recognise(edge, step and step.command, expected, None, error)
        unanswered = None if step is None else StepOutcome(
            step.seq, step.command, expected, step.observation if recording else None, None, failed=f"failed: {error}")
        return report(f"{where}: system failed: {error}", broken=True, unanswered=unanswered)

    if system is not None:
        try:
            system.init(header.profile, header.params)
        except Exception as error:  # noqa: BLE001 - the system failed: the report says how
            return failed(None, None, error)

    # the model's and the comparison's objects form no cycles that outlive the replay; a live system's may
    with collector_paused() if system is None else contextlib.nullcontext(), limited(MODEL_STEP_S) as model_clock:
        for step in trace.steps:
            if shadow is not None:
                shadow.before(model, step.command)
            try:
                model_clock.restart()  # each step of the model on its own limit; the system's calls on theirs
                expected_by = {candidate: stepper.step(step.command) for candidate, stepper in models.items()}
                model_clock.stop()
            except CommandError as error:
                return report(f"step {step.seq}: malformed command: {error}")
            except (Exception, TimeLimit) as error:
                return report(f"step {step.seq}: the reference model {failure_text(error, MODEL_STEP_S)}; this is a "
                              f"bug in kpurgatory, not in the trace or the system", broken=True,
                              model_broke_at=step.seq)
            expected = expected_by[release]
            edge = None if shadow is None else shadow.after(model, step.command, expected)
            failures: list[Failure] = []
            # per observer that fails this step, the Kafka finding its answer is (None: it is no finding)
            named: list[Finding | None] = []
            if recording is not None:
                claimed = expected_by[recorded_release]
                if recording_failures := recording.check(step.command, claimed, step.observation):
                    failures += recording_failures
                    named.append(findings.recognise(edge, step.command, claimed, step.observation, None))
            observed = step.system if answers else None
            if isinstance(observed, str):  # the recorded system failed to answer here: as check met it
                return failed(step, expected, findings.recorded_error(observed))
            if system is not None and v.supported(step.command, features):
                try:
                    observed = system.step(step.command)
                except Exception as error:  # the system failed: stop, keep the trace so far
                    return failed(step, expected, error)
            if observed is not None:
                if system_failures := sut.check(step.command, expected, observed):
                    failures += system_failures
                    named.append(findings.recognise(edge, step.command, expected, observed, None))
            # a finding only if every failure of the step is Kafka's
            finding = named[-1] if named and all(named) else None
            if failures and observed is not None and declared.release != release \
                    and exact_difference(step.command, expected_by[declared.release], observed) is None:
                other_side_of = tuple(rule.ticket for rule in separating_rules(release, declared.release))
                explanation = release_explanation(release, declared.release)
            outcomes.append(StepOutcome(step.seq, step.command, expected, step.observation if recording else None,
                                        observed, tuple(failures)))
            if failures:
                break
    return report()


def separating_rules(expected: Release, observed: Release) -> list:
    """The rules a single thread's answers show that one release has and the other has not."""
    return [rule for rule in RULES if expected.has(rule.ticket) != observed.has(rule.ticket)
            and rule.seen == "sequential"]


def release_explanation(expected: Release, observed: Release) -> str:
    """Why a system of release ``observed`` answers otherwise than ``expected`` does: the rules they differ in."""
    lines = [f"{observed} answers as its release does; {expected} differs from it by"]
    for rule in separating_rules(expected, observed):
        side = rule.before if expected.has(rule.ticket) else rule.after
        lines.append(f"{rule.ticket} ({rule.since}, {rule.title}): {observed} {'has' if observed.has(rule.ticket) else 'predates'} "
                     f"it, so {side}")
    return "\n  ".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------


def format_command(command: v.Command) -> str:
    args = command_to_json(command)["args"]
    return f"{command.name}(" + ", ".join(f"{name}={value}" for name, value in args.items()) + ")"


def format_observation(observation: v.Observation | None) -> str:
    if observation is None:
        return "—"
    head = f"error {observation.error}" if observation.error else repr(observation.result)
    return head if not observation.events else f"{head}; {describe_events(observation.events)}"


def agreeing(count: int, noun: str) -> str:
    return f"{counted(count, noun)} {'agrees' if count == 1 else 'agree'}"


def step_table(report: ReplayReport, window: int | None = 12) -> Table:
    """Model vs recording vs system for each step; ``window`` keeps only the steps before the first failure."""
    table = Table(title=f"trace {markup(report.trace.trace_id)} ({report.trace.header.profile}, level {report.level})",
                  show_lines=False, expand=False)
    table.add_column("seq", justify="right")
    table.add_column("command")
    table.add_column("model")
    has_recording = any(o.recorded is not None for o in report.outcomes)
    has_system = report.target == "system"
    if has_recording:
        table.add_column("recorded")
    if has_system:
        table.add_column("system")
    table.add_column("")
    outcomes = (*report.outcomes, report.unanswered) if report.unanswered else report.outcomes
    if window is not None and len(outcomes) > window:
        table.add_row("…", agreeing(len(outcomes) - window, "earlier step"), "",
                      *([""] * (has_recording + has_system)), "")
        outcomes = outcomes[-window:]
    for outcome in outcomes:
        cells = [str(outcome.seq), markup(format_command(outcome.command)), markup(format_observation(outcome.model))]
        if has_recording:
            cells.append(markup(format_observation(outcome.recorded)))
        if has_system:
            cells.append(markup(outcome.failed or format_observation(outcome.observed)))
        mark = Text("✗", style="bold red") if outcome.failures or outcome.failed else Text("✓", style="green")
        table.add_row(*cells, mark)
    return table


def print_report(console: Console, report: ReplayReport, window: int | None = 12) -> None:
    if report.skipped:
        console.print(f"[yellow]SKIP[/] {markup(report.trace.trace_id)}: cannot be replayed on this system: it "
                      f"{markup(report.skipped)}", soft_wrap=True)
        return
    console.print(step_table(report, window))
    # a Kafka finding is named as check names it: its name, then what Kafka does, which releases, which ticket
    verdict = "[bold red]FAIL[/]" if report.finding is None else f"[yellow]finding: {markup(report.finding.name)}[/]"
    named = "" if report.finding is None else f"\n  {markup(report.finding)}"
    failing = report.first_failure
    if report.error:
        console.print(f"{verdict} {markup(report.trace.trace_id)}: {markup(report.error)}{named}")
    elif failing is not None:
        console.print(f"{verdict} {markup(report.trace.trace_id)} at step {failing.seq} "
                      f"({markup(format_command(failing.command))}):{named}")
        for failure in failing.failures:
            console.print(f"  - {markup(failure)}")
        if report.explanation:
            console.print(f"  {markup(report.explanation)}")
    else:
        console.print(f"[green]PASS[/] {markup(report.trace.trace_id)}: {agreeing(len(report.outcomes), 'step')} "
                      f"with the model")


# ---------------------------------------------------------------------------------------------------------------
# The scenario corpus
# ---------------------------------------------------------------------------------------------------------------


def scenario_files() -> list[Path]:
    folder = importlib.resources.files("kpurgatory.conformance").joinpath("scenarios")
    return sorted(Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".jsonl"))


@functools.cache
def scenarios() -> dict[str, Trace]:
    """The bundled corpus by stable id (the trace id, e.g. ``kafka.TimerTest.testTaskExpiration``)."""
    corpus: dict[str, Trace] = {}
    for path in scenario_files():
        for trace in read_traces(path):
            if trace.trace_id in corpus:
                raise TraceFormatError(f"duplicate scenario id {trace.trace_id!r}", str(path))
            corpus[trace.trace_id] = trace
    return corpus


# ---------------------------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------------------------

target_options = [
    click.option("--impl", "impl", metavar="MODULE:FACTORY", help="An in-process Python system under test."),
    click.option("--adapter", "adapter", metavar="COMMAND", help="A subprocess speaking specs/protocol.md."),
    click.option("--timeout", type=float, default=10.0, show_default=True,
                 help="Seconds the system may take for one request (a subprocess adapter always; an in-process "
                      "one in check) before it counts as hung."),
    click.option("--level", type=click.Choice(LEVELS), default="exact", show_default=True),
]


def with_target_options(function):
    for option in reversed(target_options):
        function = option(function)
    return function


def open_target(impl: str | None, adapter: str | None, timeout: float):
    from kpurgatory.conformance.adapters import open_system

    return open_system(impl=impl, adapter=adapter, timeout=timeout)


def run_replays(traces: list[Trace], impl, adapter, timeout, level, window) -> list[ReplayReport]:
    """Replay and print each trace."""
    console = command_console()
    target = open_target(impl, adapter, timeout)
    reports = []
    try:
        for trace in traces:
            reports.append(replay(trace, target.system if target else None, level,
                                  features=target.hello.features if target else (),
                                  declarations=target.hello.declarations if target else None,
                                  unsupported=target.hello.unsupported if target else frozenset()))
            print_report(console, reports[-1], window)
    finally:
        if target is not None:
            target.system.close()
    return reports


@click.command("replay")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@with_kafka_option
@with_target_options
@click.option("--all-steps", is_flag=True, help="Show every step, not only the ones before a failure.")
@click.option("--fail-on-findings/--findings-pass", default=False, show_default=True,
              help="Whether a Kafka finding fails the replay, as in `kpurgatory check`: a trace whose failure is "
                   "what Kafka's own classes do there (a finding's counterexample, a recording of Kafka) is named "
                   "with the releases and ticket, and by default passes.")
def replay_command(traces, impl, adapter, timeout, level, all_steps, fail_on_findings):
    """Replay TRACES against the model (and --impl/--adapter); print a step table and a verdict. A file with a
    failing trace gets its page (`kpurgatory view`) next to it, as FILE.html.

    A concurrent history written by `kpurgatory check --threads N --scheduler S` is run again under its schedule
    against --impl, --adapter or --kafka (by default the built-in implementation that recorded it; a history another
    system recorded needs one of them): the same interleaving, compared with the recorded history call by call, then
    checked as `kpurgatory check-history` checks one.

    Exits 0 when every step agrees with the model (or a failure is a Kafka finding, unless --fail-on-findings), 1 on
    a divergence, 2 on malformed input or a trace the system cannot run (it uses a command the system's hello lists
    as unsupported: the trace is skipped, and says so), 3 when the system under test broke (crashed, hung, wrote
    garbage)."""
    files = read_for_command(traces, concurrent=False)
    scheduled = {path: [trace for trace in traces_of_file if trace.header.schedule is not None]
                 for path, traces_of_file in files.items()}
    if any(scheduled.values()):
        if any(len(scheduled[path]) != len(files[path]) for path in files):
            click.echo("Error: replay the concurrent histories a controlled scheduler ran apart from sequential "
                       "traces", err=True)
            sys.exit(2)
        from kpurgatory.conformance.check.concurrent import replay_schedules

        sys.exit(replay_schedules(scheduled, impl, adapter, timeout, fail_on_findings))
    loaded = [trace for traces_of_file in files.values() for trace in traces_of_file]
    from kpurgatory.conformance.traces.view import view_failures  # the view imports this module

    gc.freeze()  # the traces outlive the replays: the collections during them need not walk the traces again
    try:
        reports = run_replays(loaded, impl, adapter, timeout, level, None if all_steps else 12)
        view_failures(files, reports)
    finally:
        gc.unfreeze()
    # the worst of the replays' exit codes: a broken system over bad input over a failure
    sys.exit(max(report.failure_code if fail_on_findings else report.exit_code for report in reports))


@click.command("scenarios")
@with_kafka_option
@with_target_options
@click.option("--only", "only", multiple=True, metavar="ID", help="Run only these scenario ids (repeatable).")
@click.option("--skip", "skip", multiple=True, metavar="ID", help="Skip these scenario ids (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the scenario ids and exit.")
def scenarios_command(impl, adapter, timeout, level, only, skip, list_only):
    """Replay the bundled scenario corpus (Kafka's own unit tests, re-expressed) against the model, and the system
    under test if one is given.

    Each scenario stands alone: a system that hangs (no answer within --timeout, in process too), crashes or raises
    fails that scenario, and a fresh one (an adapter restarted) plays the next. A scenario using a command the
    system's hello lists as unsupported is skipped; a failure that is one of Kafka's known misbehaviours is a
    finding. Every scenario gets a row and a verdict. Exits 0 when every scenario passed (findings and skipped ones
    aside), 1 when the system answered one wrongly, else 3 when it failed to answer one (hung, crashed, wrote
    garbage) or could not be made afresh, else 2 on a malformed scenario."""
    corpus = scenarios()
    unknown = sorted((set(only) | set(skip)) - set(corpus))
    if unknown:
        raise click.BadParameter(f"unknown scenario ids: {', '.join(unknown)}", param_hint="--only/--skip")
    chosen = [trace for trace_id, trace in corpus.items() if (not only or trace_id in only) and trace_id not in skip]
    if list_only:
        for trace in chosen:
            click.echo(safe(f"{trace.trace_id}\t{trace.header.description or ''}"))
        return
    target = open_time_limited(impl, adapter, timeout)
    console = command_console()
    summary = Table(title="scenario corpus against "
                          + ("the model" if target is None else markup(target.hello.implementation)))
    summary.add_column("scenario", overflow="fold")
    for column in ("steps", "verdict", "first failure"):
        summary.add_column(column)
    counts: collections.Counter[str] = collections.Counter()
    skipped: collections.Counter[str] = collections.Counter()
    try:
        for number, trace in enumerate(chosen):
            report = replay(trace, target.system if target else None, level,
                            features=target.hello.features if target else (),
                            declarations=target.hello.declarations if target else None,
                            unsupported=target.hello.unsupported if target else frozenset())
            verdict, outcome = scenario_verdict(report)
            failing = report.first_failure
            detail = report.skipped or report.error or (f"step {failing.seq}: {failing.failures[0]}" if failing
                                                        else "")
            if report.finding is not None:
                detail = f"{report.finding}\n{detail}"
            if report.explanation:
                detail += f"\n  {report.explanation}"
            summary.add_row(markup(trace.trace_id), str(len(trace.steps)), verdict, markup(detail))
            counts[outcome] += 1
            if report.skipped:
                skipped[report.skipped] += 1
            if report.broken and target is not None:  # a system that failed to answer plays no further scenario
                target.system.close()
                try:
                    target = open_time_limited(impl, adapter, timeout)
                except Exception as error:  # noqa: BLE001 - the rows left say so
                    target = None
                    for rest in chosen[number + 1:]:
                        summary.add_row(markup(rest.trace_id), str(len(rest.steps)), "[bold red]not run[/]",
                                        markup(f"the system could not be made afresh: {error}"))
                    counts["not run"] += len(chosen) - number - 1
                    break
    finally:
        if target is not None:
            target.system.close()
    console.print(summary)
    words = [f"{counts['passed']} passed", f"{counts['failed'] + counts['broken'] + counts['malformed']} failed"]
    words += [f"{counted(counts['finding'], 'Kafka finding')}"] if counts["finding"] else []
    words += [f"{counts[outcome]} {label}" for outcome, label in (
        ("other side", "on the other side of a release rule (as their release does)"), ("not run", "not run"))
        if counts[outcome]]
    words += [f"{number} skipped ({reason})" for reason, number in skipped.items()]
    console.print(", ".join(words), markup=False, highlight=False)
    sys.exit(next((code for outcome, code in OUTCOME_CODES.items() if counts[outcome]), 3 if counts["not run"] else 0))


#: a scenario's outcome (`scenario_verdict`) -> the exit code it calls for; the run's is the first of these met, in
#: this order: the implementation answering wrongly outweighs its failing to answer (as in `kpurgatory check`)
OUTCOME_CODES = {"failed": 1, "broken": 3, "malformed": 2}


def scenario_verdict(report: ReplayReport) -> tuple[str, str]:
    """A scenario's verdict (markup) and outcome: passed, skipped, finding, failed (a wrong answer), broken (the
    system failed to answer: hung, crashed, raised, broke the protocol) or malformed (the scenario is)."""
    if report.skipped:
        return "[yellow]skipped[/]", "skipped"
    if report.finding is not None:
        return f"[yellow]finding {markup(report.finding.name)}[/]", "finding"
    if report.ok:
        return "[green]pass[/]", "passed"
    if report.other_side_of:
        return f"[cyan]other side of {', '.join(report.other_side_of)}[/]", "other side"
    if report.failed_as is not None:
        words = {"adapter crashed": "crashed", "system crashed": "crashed", "raised": "crashed",
                 AdapterFailed.kind: "failed to execute"}
        return f"[bold red]{words.get(report.failed_as, report.failed_as)}[/]", "broken"
    return "[bold red]FAIL[/]", "malformed" if report.error else "failed"


def open_time_limited(impl: str | None, adapter: str | None, timeout: float):
    """`open_target`, with an in-process system in a process of its own, each call limited to ``timeout`` seconds
    too (`ForkedSystem`)."""
    from kpurgatory.conformance.adapters import Target, system_factory
    from kpurgatory.conformance.adapters.forked import ForkedSystem

    factory = system_factory(impl, adapter, timeout)
    if factory is None:
        return None
    system = factory() if adapter else ForkedSystem(factory, timeout)
    try:
        return Target(system, system.hello())
    except BaseException:
        system.close()
        raise
