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
"""

from __future__ import annotations

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

from kpurgatory.conformance.check.compare import LEVELS, Difference, describe_events, exact_difference
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.terminal import command_console, markup, safe
from kpurgatory.conformance.traces.codec import (MODEL, Trace, TraceFormatError, collector_paused, command_to_json,
                                                 read_traces)
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, ContractMonitor, Declarations, Violation

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


@attrs.frozen
class ReplayReport:
    trace: Trace
    target: str
    level: str
    outcomes: tuple[StepOutcome, ...]
    error: str | None = None  # the system failed (crash, hang, protocol violation) or the trace is malformed
    broken: bool = False  # the error is the system's failure to answer, not the trace's

    @property
    def exit_code(self) -> int:
        """This replay's exit code (0 pass, 1 the implementation failed, 2 bad input, 3 the system broke)."""
        return 3 if self.broken else 2 if self.error is not None else 0 if self.ok else 1

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
        self.monitor = ContractMonitor(trace.header.profile, trace.header.params,
                                       declarations if level == "contract" else KAFKA)

    def check(self, command: v.Command, model: v.Observation, observed: v.Observation) -> list[Failure]:
        failures = [Failure(self.who, violation) for violation in self.monitor.observe(command, observed)]
        if self.level == "exact":
            difference = exact_difference(command, model, observed)
            if difference is not None:
                failures.insert(0, Failure(self.who, difference))
        return failures


CONCURRENT_HISTORY = ("a concurrent history has no order to replay its steps in; check it with "
                      "`kpurgatory check-history`")
SEQUENTIAL_TRACE = "not a concurrent history (no threads in the header); replay it with `kpurgatory replay`"


def read_for_command(paths, *, concurrent: bool) -> dict[Path, list[Trace]]:
    """The traces of PATHS, for a command that takes one kind only: sequential traces (replay) or concurrent
    histories (check-history). Malformed input, or a trace of the other kind, exits 2 naming it."""
    try:
        files = {path: read_traces(path) for path in paths}
    except TraceFormatError as error:
        click.echo(f"Error: {safe(error)}", err=True)
        sys.exit(2)
    if wrong := [trace.trace_id for traces in files.values() for trace in traces
                 if (trace.header.threads is not None) != concurrent]:
        click.echo(f"Error: {safe(', '.join(wrong))}: {SEQUENTIAL_TRACE if concurrent else CONCURRENT_HISTORY}",
                   err=True)
        sys.exit(2)
    return files


def replay(trace: Trace, system: SystemUnderTest | None = None, level: str = "exact", *,
           check_recording: bool = True, features: tuple[str, ...] = v.OPTIONAL,
           declarations: Declarations | None = None) -> ReplayReport:
    """Replay ``trace``; see the module docstring. ``features`` are the optional commands ``system`` supports and
    ``declarations`` what it promises (by default, what the trace's header records). A recording is judged by its
    header's declarations, except the model's own observations (a test vector), which are Kafka's."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    header = trace.header
    if header.threads is not None:
        return ReplayReport(trace, "model" if system is None else "system", level, (), CONCURRENT_HISTORY)
    model = Model(header.profile, header.params)
    recorded_by_model = header.implementation == MODEL
    recording = (StepChecker(RECORDING, trace, level, KAFKA if recorded_by_model else header.declarations)
                 if check_recording else None)
    # a counterexample's recorded answers stand for the system when no live one is given
    answers = system is None and any(step.system is not None for step in trace.steps)
    sut = StepChecker(SYSTEM, trace, level, header.declarations if declarations is None else declarations)
    sut = sut if system is not None or answers else None
    if system is not None:
        system.init(header.profile, header.params)
    outcomes: list[StepOutcome] = []

    def report(error: str | None = None, broken: bool = False) -> ReplayReport:
        return ReplayReport(trace, "system" if sut is not None else "model", level, tuple(outcomes), error, broken)

    # the model's and the comparison's objects form no cycles that outlive the replay; a live system's may
    with collector_paused() if system is None else contextlib.nullcontext():
        for step in trace.steps:
            try:
                expected = model.step(step.command)
            except CommandError as error:
                return report(f"step {step.seq}: malformed command: {error}")
            failures: list[Failure] = []
            if recording is not None:
                failures += recording.check(step.command, expected, step.observation)
            observed = step.system if answers else None
            if isinstance(observed, str):  # the recorded system failed to answer here
                return report(f"step {step.seq}: system failed: {observed}", broken=True)
            if system is not None and v.supported(step.command, features):
                try:
                    observed = system.step(step.command)
                except Exception as error:  # the system failed: stop, keep the trace so far
                    return report(f"step {step.seq}: system failed: {error}", broken=True)
            if observed is not None:
                failures += sut.check(step.command, expected, observed)
            outcomes.append(StepOutcome(step.seq, step.command, expected, step.observation if recording else None,
                                        observed, tuple(failures)))
            if failures:
                break
    return report()


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
    outcomes = report.outcomes
    if window is not None and len(outcomes) > window:
        table.add_row("…", f"{len(outcomes) - window} earlier steps agree", "", *([""] * (has_recording + has_system)),
                      "")
        outcomes = outcomes[-window:]
    for outcome in outcomes:
        cells = [str(outcome.seq), markup(format_command(outcome.command)), markup(format_observation(outcome.model))]
        if has_recording:
            cells.append(markup(format_observation(outcome.recorded)))
        if has_system:
            cells.append(markup(format_observation(outcome.observed)))
        mark = Text("✗", style="bold red") if outcome.failures else Text("✓", style="green")
        table.add_row(*cells, mark)
    return table


def print_report(console: Console, report: ReplayReport, window: int | None = 12) -> None:
    console.print(step_table(report, window))
    failing = report.first_failure
    if report.error:
        console.print(f"[bold red]FAIL[/] {markup(report.trace.trace_id)}: {markup(report.error)}")
    elif failing is not None:
        console.print(f"[bold red]FAIL[/] {markup(report.trace.trace_id)} at step {failing.seq} "
                      f"({markup(format_command(failing.command))}):")
        for failure in failing.failures:
            console.print(f"  - {markup(failure)}")
    else:
        console.print(f"[green]PASS[/] {markup(report.trace.trace_id)}: {len(report.outcomes)} steps agree with the "
                      f"model")


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
                                  declarations=target.hello.declarations if target else None))
            print_report(console, reports[-1], window)
    finally:
        if target is not None:
            target.system.close()
    return reports


@click.command("replay")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@with_target_options
@click.option("--all-steps", is_flag=True, help="Show every step, not only the ones before a failure.")
def replay_command(traces, impl, adapter, timeout, level, all_steps):
    """Replay TRACES against the model (and --impl/--adapter); print a step table and a verdict. A file with a
    failing trace gets its page (`kpurgatory view`) next to it, as FILE.html.

    Exits 0 when every step agrees with the model, 1 on a divergence, 2 on malformed input, 3 when the system
    under test broke (crashed, hung, wrote garbage)."""
    files = read_for_command(traces, concurrent=False)
    loaded = [trace for traces_of_file in files.values() for trace in traces_of_file]
    from kpurgatory.conformance.traces.view import view_failures  # the view imports this module

    gc.freeze()  # the traces outlive the replays: the collections during them need not walk the traces again
    try:
        reports = run_replays(loaded, impl, adapter, timeout, level, None if all_steps else 12)
        view_failures(files, reports)
    finally:
        gc.unfreeze()
    # the worst of the replays' exit codes: a broken system over bad input over a failure
    sys.exit(max(report.exit_code for report in reports))


@click.command("scenarios")
@with_target_options
@click.option("--only", "only", multiple=True, metavar="ID", help="Run only these scenario ids (repeatable).")
@click.option("--skip", "skip", multiple=True, metavar="ID", help="Skip these scenario ids (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the scenario ids and exit.")
def scenarios_command(impl, adapter, timeout, level, only, skip, list_only):
    """Replay the bundled scenario corpus (Kafka's own unit tests, re-expressed) against the model, and the system
    under test if one is given."""
    corpus = scenarios()
    unknown = sorted((set(only) | set(skip)) - set(corpus))
    if unknown:
        raise click.BadParameter(f"unknown scenario ids: {', '.join(unknown)}", param_hint="--only/--skip")
    chosen = [trace for trace_id, trace in corpus.items() if (not only or trace_id in only) and trace_id not in skip]
    if list_only:
        for trace in chosen:
            click.echo(safe(f"{trace.trace_id}\t{trace.header.description or ''}"))
        return
    target = open_target(impl, adapter, timeout)
    console = command_console()
    summary = Table(title="scenario corpus against "
                          + ("the model" if target is None else markup(target.hello.implementation)))
    summary.add_column("scenario", overflow="fold")
    for column in ("steps", "verdict", "first failure"):
        summary.add_column(column)
    failed = code = 0
    try:
        for trace in chosen:
            report = replay(trace, target.system if target else None, level,
                            features=target.hello.features if target else (),
                            declarations=target.hello.declarations if target else None)
            failing = report.first_failure
            detail = report.error or (f"step {failing.seq}: {failing.failures[0]}" if failing else "")
            summary.add_row(markup(trace.trace_id), str(len(trace.steps)),
                            "[green]pass[/]" if report.ok else "[bold red]FAIL[/]", markup(detail))
            failed += not report.ok
            code = max(code, report.exit_code)
    finally:
        if target is not None:
            target.system.close()
    console.print(summary)
    console.print(f"{len(chosen) - failed} passed, {failed} failed")
    sys.exit(code)
