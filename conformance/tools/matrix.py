"""``kpurgatory matrix``: every covered Kafka release against the model, in one table.

Rows are systems: by default the Kafka releases of `model.releases.COVERED`, each driven through the adapter over
that release's own classes (`adapters.kafka`); or any adapters and in-process systems given by name, so that a port,
a fork or a planted system gets the same table. Columns are the checks, run by the functions the commands use,
with one seed and budget for every cell (by default as deep as ``kpurgatory check``'s: 500 runs of up to 60 steps,
and 200 runs of the concurrent check):

  timer/exact, timer/contract, purgatory/exact, purgatory/contract
                   `run_check` of that profile at that level (``kpurgatory check --profile P --level L``)
  purgatory/threads
                   `run_concurrent_check` (``kpurgatory check --threads N``): the race schedules and random runs
  purgatory/scheduled
                   the same under the controlled scheduler (``--scheduler random``), a tenth of its runs: the sides
                   of Kafka's lock changes the locks' points tell apart (``lock_sides``)
  scenarios        Kafka's own unit tests as scenarios, replayed at the exact level (``kpurgatory scenarios``)

Each cell has one verdict (`VERDICTS`). A *finding* is one of Kafka's own known misbehaviours: one of `FINDINGS`
(`check.findings`), or a scenario a release answers as that release did (it lacks the rule the scenario separates:
`model.releases`). A newcomer reads from the row of a release which of Kafka's known bugs it has, by name and ticket.

A cell is a pure function of its system, column and budget (`Task` -> `Done`), so cells run anywhere: one after
another here, on ``-j N`` worker processes, or on Spark (``--master``), one task per cell. This process opens each
row first (a release's jars resolved by Maven and its adapter compiled, its hello), and a worker or executor makes
its systems from the command resolved here (an executor whose host lacks those jars resolves the release again with
Maven, into its own ~/.m2, as ``check --kafka`` does). Each cell writes its counterexamples to a folder of its own and
sends back their contents with its result; rows are written to ``--out`` in order as they complete. The data and
every counterexample are those of a serial run, but for timings, the environment and what time decides: a race the
concurrent check meets or not, a call taken for hung under ``--timeout``.

Everything goes to ``--out``: ``matrix.json`` (the data), ``index.html`` (one self-contained page made from it and
the traces it names: `matrix_page`) and, for each cell that found something, ``ROW/CELL/`` with each
counterexample's trace, which the page links to and shows as a step table, and its text table and page
(`traces.view`). Both files are rewritten after every row, so an interrupted run leaves the rows it finished.
``matrix.json`` holds:

  command          the command that made it, as typed in the folder it ran in (no absolute path under it)
  environment      date, load average at the start and the end, cores, versions (Python, kpurgatory, Java), where
                   the cells ran (runner) and the run's wall time (wall_s)
  budget, columns  the seed and budget of the run; each check's id and what it is
  rows             per system: name, kind (release, adapter, impl), the command or factory (with no path of this
                   machine in it: jars by their Maven coordinates, other paths relative to the page), its hello's
                   implementation, the rules a release lacks, its date, budget and seconds, and its cells
  rows[].cells     per check: verdict, a one-line note, findings (name, ticket, releases, description, trace path
                   relative to index.html), failures (signature, summary, whether the system failed to answer,
                   trace), runs, steps, seconds
  totals           cells per verdict, seconds of the cells (wherever they ran)
  findings, rules  the legend: every finding met (with the rows that met it), every rule of `model.releases`
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import attrs
import click
import orjson
from rich.table import Table

from kpurgatory.conformance.adapters import load_factory, system_factory
from kpurgatory.conformance.adapters.subprocess import AdapterError
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.check.findings import FINDINGS, KafkaShadow, recognise
from kpurgatory.conformance.check.concurrent import ConcurrentResult, label, run_concurrent_check
from kpurgatory.conformance.check.scheduler import Scheduling
from kpurgatory.conformance.check.sequential import DEFAULT_MAX_FAILURES, DEFAULT_TIMEOUT_S, render, run_check, \
    time_limited
from kpurgatory.conformance.check.workers import fresh_worker
from kpurgatory.conformance.terminal import command_console, markup, safe
from kpurgatory.conformance.tools.matrix_page import DEFAULT_OUT, VERDICTS, lacking, page, tickets
from kpurgatory.conformance.traces.codec import Trace, TraceFormatError, read_traces, write_traces
from kpurgatory.conformance.traces.replay import ReplayReport, replay, scenarios
from kpurgatory.conformance.traces.view import write_view
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.releases import COVERED, RULES, RULES_BY_TICKET, Release, version_key

FORMAT, VERSION = "kpurgatory-matrix", 1

@attrs.frozen
class Column:
    id: str
    profile: str | None
    level: str  # exact, contract, threads or scenarios
    what: str

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.id)


COLUMNS = (
    Column("timer/exact", "timer", "exact", "generated runs of the timer, answers compared step by step with Kafka's "
                                            "(kpurgatory check --profile timer)"),
    Column("timer/contract", "timer", "contract", "the same runs judged only by the contract properties a user "
                                                  "relies on (--level contract)"),
    Column("purgatory/exact", "purgatory", "exact", "generated runs of the purgatory, step by step "
                                                    "(kpurgatory check --profile purgatory)"),
    Column("purgatory/contract", "purgatory", "contract", "the same runs, contract properties only"),
    Column("purgatory/threads", "purgatory", "threads", "the concurrent check: Kafka's documented races as "
                                                        "schedules, then random runs from several threads "
                                                        "(kpurgatory check --threads N)"),
    Column("purgatory/scheduled", "purgatory", "scheduled", "the concurrent check under the controlled scheduler (a "
                                                            "random walk): interleavings that replay, and the op "
                                                            "lock's points telling Kafka's lock changes apart "
                                                            "(kpurgatory check --threads N --scheduler random)"),
    Column("scenarios", None, "scenarios", "Kafka's own unit tests and the release rules' scenarios, replayed at the "
                                           "exact level (kpurgatory scenarios)"),
)
#: a column per profile and kind of test vectors (specs/vectors.md), filled from drivers' results files
VECTOR_COLUMNS = tuple(
    Column(f"vectors {profile}/{kind}", profile, "vectors", f"the {kind} test vectors of the {profile} profile, run by "
                                                            f"a driver in the implementation's own test runner")
    for profile, kinds in (("timer", ("scenarios", "coverage", "findings")),
                           ("purgatory", ("scenarios", "coverage", "releases"))) for kind in kinds)
COLUMNS_BY_ID = {column.id: column for column in COLUMNS + VECTOR_COLUMNS}


#: the budget of every cell: as deep as `kpurgatory check`'s own default for the sequential checks (about 10 s a
#: profile through a release's adapter); the concurrent check's runs cost ~0.3 s each through the adapter (200: ~60 s,
#: the row's largest cell)
SEED, EXAMPLES, STEPS, THREADS, THREAD_RUNS = 1, 500, 60, 4, 200


@attrs.frozen
class Budget:
    seed: int = SEED
    examples: int = EXAMPLES
    steps: int = STEPS
    threads: int = THREADS
    thread_runs: int = THREAD_RUNS
    timeout: float = DEFAULT_TIMEOUT_S
    max_failures: int = DEFAULT_MAX_FAILURES


@attrs.frozen
class Subject:
    """A row: a Kafka ``release`` (its adapter is built when the row runs), a subprocess ``adapter`` command or an
    in-process ``impl`` (MODULE:FACTORY)."""

    name: str
    release: str | None = None
    adapter: str | None = None
    impl: str | None = None

    @property
    def kind(self) -> str:
        return "release" if self.release else "adapter" if self.adapter else "impl"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.name).strip("-.") or "system"


class Broke(Exception):
    """The system could not be driven for a whole row: no adapter, no hello."""


class Unfit(Exception):
    """No system to drive for a whole row: a release the Kafka adapter does not cover."""


# ---------------------------------------------------------------------------------------------------------------
# Running the cells
# ---------------------------------------------------------------------------------------------------------------


def relative(path: Path | None, out: Path) -> str | None:
    return None if path is None else Path(os.path.relpath(path, out)).as_posix()


def finding_entry(finding, out: Path, trace_path: Path | None, repeats: int | None = None, **more) -> dict:
    """A Kafka finding (`check.findings.Finding`, `check.concurrent.KafkaRace`) as the matrix lists it: its name,
    ticket, the releases that have it and what it is."""
    ticket = finding.ticket
    releases = getattr(finding, "releases", None)  # a race says which ticket fixed it
    if releases is None and ticket in RULES_BY_TICKET:
        releases = f"fixed by {ticket} in {RULES_BY_TICKET[ticket].since}"
    return {"name": finding.name, "ticket": ticket, "releases": releases,
            "description": finding.description, **trace_of(trace_path, out), "repeats": repeats, **more}


def rule_finding(scenario: str, explanation: str, out: Path, trace_path: Path) -> dict:
    """A scenario the system answers as its release did: the rules it lacks (those the scenario's id names, else
    those the replay's ``explanation`` names) as a finding, the explanation as its detail."""
    named = [ticket for ticket in tickets(scenario) or tickets(explanation) if ticket in RULES_BY_TICKET]
    description = "; ".join(f"{ticket} {RULES_BY_TICKET[ticket].title}: before it, {RULES_BY_TICKET[ticket].before}"
                            for ticket in named) or explanation
    return {"name": scenario, "ticket": ", ".join(named) or None,
            "releases": "; ".join(map(lacking, named)) or None, "description": description, "detail": explanation,
            **trace_of(trace_path, out), "repeats": None, "scenario": scenario}


def failure_entry(signature: str, summary: str, error: bool, out: Path, trace_path: Path | None,
                  repeats: int | None = None) -> dict:
    """A failure as the matrix lists it: its signature, what happened, and whether the system failed to answer."""
    return {"signature": signature, "summary": summary, "error": error, **trace_of(trace_path, out),
            "repeats": repeats}


def trace_of(trace_path: Path | None, out: Path) -> dict:
    """Where a counterexample's trace is, relative to the matrix's page."""
    return {"trace": relative(trace_path, out)}


def cell(verdict: str, note: str, *, findings=(), failures=(), runs=0, steps=0, seconds=0.0, **more) -> dict:
    return {"verdict": verdict, "note": note, "findings": list(findings), "failures": list(failures), "runs": runs,
            "steps": steps, "seconds": round(seconds, 1), **more}


def filed(finding: dict) -> str:
    """A finding's KAFKA tickets, or nothing when none is filed (the legend says so)."""
    return ", ".join(tickets(finding["ticket"] or ""))


def judged(findings: list[dict], failures: list[dict], passed: str, broke: str | None = None, **counts) -> dict:
    """A cell's verdict from what it found: broke when it could not drive the system (``broke`` says why, or every
    failure is a failure to answer), else failure, else finding, else pass (``passed`` says what passed)."""
    if broke is not None or failures and all(failure["error"] for failure in failures):
        return cell("broke", broke or f"{failures[0]['signature']}: {failures[0]['summary']}", findings=findings,
                    failures=failures, **counts)
    if failures:
        plural = "s" * (len(failures) > 1)
        return cell("failure", f"{len(failures)} distinct failure{plural}; first: {failures[0]['signature']}: "
                               f"{failures[0]['summary']}", findings=findings, failures=failures, **counts)
    if findings:
        return cell("finding", "Kafka's known: " + ", ".join(dict.fromkeys(
            f["name"] + (f" ({filed(f)})" if filed(f) else "") for f in findings)), findings=findings, **counts)
    return cell("pass", passed, **counts)


def check_cell(column: Column, factory, budget: Budget, folder: Path, out: Path) -> dict:
    result = run_check(factory, profile=column.profile, level=column.level, examples=budget.examples,
                       steps=budget.steps, seed=budget.seed, out_dir=folder, timeout=budget.timeout,
                       max_failures=budget.max_failures)
    findings = [finding_entry(found.finding, out, found.trace_path, found.repeats) for found in result.findings]
    failures = [failure_entry(str(found.signature), found.summary, found.report.error is not None, out,
                              found.trace_path, found.repeats) for found in result.failures]
    written = [found.write_error for found in result.failures + result.findings if found.write_error]
    # a check cut short before any failure (its hello failed) says why in its summary
    broke = result.failure_summary if result.broken and not failures else None
    return judged(findings, failures, f"{result.examples_run} runs of up to {budget.steps} steps agree with the "
                                      f"model", broke, runs=result.examples_run, steps=result.steps_run,
                  seconds=result.elapsed_s, write_error=written[0] if written else None)


def concurrent_entries(result: ConcurrentResult, out: Path) -> tuple[list[dict], list[dict]]:
    """The findings and failures of a concurrent check, as the matrix lists them."""
    findings = [finding_entry(report.finding, out, report.path, report.repeats) for report in result.findings]
    failures = [failure_entry(label(report.signature), "; ".join(violation.message for violation in report.violations),
                              report.signature.kind in ("hung", "raised"), out, report.path, report.repeats)
                for report in result.failures]
    return findings, failures


def threads_cell(factory, budget: Budget, folder: Path, out: Path) -> dict:
    result = run_concurrent_check(factory, threads=budget.threads, runs=budget.thread_runs, steps=budget.steps,
                                  seed=budget.seed, timeout=budget.timeout, out_dir=folder,
                                  max_failures=budget.max_failures)
    schedules = "no race schedules (no gates)" if result.schedules is None else f"{result.schedules} race schedules"
    return judged(*concurrent_entries(result, out), f"{schedules} and {result.runs} runs of {budget.threads} "
                                                    f"threads: every property holds", result.aborted,
                  runs=result.runs, steps=result.calls, seconds=result.elapsed_s, schedules=result.schedules,
                  schedule_notes=[f"{name}: {note}" for name, note in result.schedule_notes])


#: the scheduled column's share of the concurrent check's runs, and its shrinking budget (a count of runs under the
#: scheduler: 60): a scheduled run through an adapter costs a round trip per point
SCHEDULED_SHARE, SCHEDULED_SHRINK_S = 10, 15.0


def scheduled_cell(factory, budget: Budget, folder: Path, out: Path) -> dict:
    runs = max(1, budget.thread_runs // SCHEDULED_SHARE)
    result = run_concurrent_check(factory, threads=budget.threads, runs=runs, steps=budget.steps, seed=budget.seed,
                                  timeout=budget.timeout, out_dir=folder, max_failures=budget.max_failures,
                                  scheduling=Scheduling("random"), shrink_budget_s=SCHEDULED_SHRINK_S)
    sides = [{"rule": side.rule.ticket, "side": side.side, "reached": sorted(side.reached),
              "as_declared": side.as_declared} for side in result.lock_sides]
    told = "; lock rules: " + ", ".join(f"{side['rule']} {side['side'] or 'neither side'}"
                                        + ("" if side["as_declared"] else " (not the declared release's side)")
                                        for side in sides) if sides else ""
    explored = result.interleavings
    return judged(*concurrent_entries(result, out),
                  f"{result.runs} runs of {budget.threads} threads, {explored.distinct} interleavings: every property "
                  f"holds{told}", result.aborted, runs=result.runs, steps=result.calls, seconds=result.elapsed_s,
                  lock_sides=sides, interleavings=explored.digest)


class Remembering:
    """A system that remembers the exception its last step raised (a replay keeps only its text), so that the
    failure can be recognised as one of Kafka's findings."""

    def __init__(self, system: SystemUnderTest):
        self.system, self.error = system, None

    def hello(self) -> Hello:
        return self.system.hello()

    def init(self, profile: str, params: v.Params) -> None:
        self.error = None
        self.system.init(profile, params)

    def step(self, command: v.Command) -> v.Observation:
        try:
            return self.system.step(command)
        except Exception as error:
            self.error = error
            raise

    def close(self) -> None:
        self.system.close()


def recognised(trace: Trace, report: ReplayReport, error: Exception | None, release: Release):
    """The Kafka finding a failing replay is, if any: its failing step (or the step the system failed to answer)
    judged as `check` judges one, beside Kafka's own timer (`findings.KafkaShadow`)."""
    failing = report.first_failure
    seq = failing.seq if failing is not None else len(report.outcomes) + 1
    model, shadow = Model(trace.header.profile, trace.header.params, release), KafkaShadow()
    for step in trace.steps:
        shadow.before(model, step.command)
        try:
            expected = model.step(step.command)
        except CommandError:
            return None
        edge = shadow.after(model, step.command, expected)
        if step.seq == seq:
            return recognise(edge, step.command, expected, failing and failing.observed, error)
    return None


def answered(trace: Trace, report: ReplayReport) -> Trace:
    """A scenario with what the system answered each step it was sent (or how it failed to), beside the answers
    the scenario expects: the counterexample shows both."""
    said: dict[int, v.Observation | str] = {outcome.seq: outcome.observed for outcome in report.outcomes
                                             if outcome.observed is not None}
    if report.broken:  # the first step it gave no answer to is where it failed
        failed = next((step.seq for step in trace.steps if step.seq not in said), None)
        if failed is not None:
            said[failed] = report.error
    return attrs.evolve(trace, steps=[attrs.evolve(step, system=said.get(step.seq)) for step in trace.steps])


def scenario_cell(factory, budget: Budget, folder: Path, out: Path) -> dict:
    """Replay each scenario of the corpus on one system (made afresh after it broke); a scenario using a command the
    system has no call for is skipped. A failing scenario is a finding when the system's release answers it as that
    release did (the replay explains it by a rule the release lacks) or when it is one of Kafka's findings."""
    started = time.monotonic()
    factory = time_limited(factory, budget.timeout)
    system: Remembering | None = None
    found, failures, passed, skipped, steps = [], [], 0, 0, 0
    try:
        for trace in scenarios().values():
            if system is None:
                system = Remembering(factory())
                hello = system.hello()
            if trace.header.profile not in hello.profiles or hello.unable(step.command for step in trace.steps):
                skipped += 1
                continue
            # only the system is judged: a scenario's recorded answers are current Kafka's, which an older release's
            # model need not give (`kpurgatory scenarios` without a system checks them)
            report = replay(trace, system, "exact", check_recording=False, features=hello.features,
                            declarations=hello.declarations)
            steps += len(report.outcomes)
            if report.ok:
                passed += 1
                continue
            path = write_traces(folder / f"{Subject(trace.trace_id).slug}.jsonl", answered(trace, report))
            path.with_suffix(".txt").write_text(render(report))
            write_view(path.with_suffix(".html"), trace, [report])
            failing = report.first_failure
            # the release the replay judged by: the one a rule's scenario pins, else the system's own
            release = (trace.header.declarations if trace.header.declarations.kafka_version else
                       hello.declarations).release
            finding = recognised(trace, report, system.error if report.broken else None, release)
            if explanation := report.explanation:
                found.append(rule_finding(trace.trace_id, explanation, out, path))
            elif finding is not None:
                found.append(finding_entry(finding, out, path, scenario=trace.trace_id))
            else:
                failures.append(failure_entry(trace.trace_id, report.error or f"step {failing.seq}: "
                                                                              f"{failing.failures[0]}",
                                              report.broken, out, path))
            if report.broken:
                system.close()
                system = None
    finally:
        if system is not None:
            system.close()
    tail = f" ({skipped} skipped: commands the system has no call for)" if skipped else ""
    return judged(found, failures, f"{passed} scenarios agree with the model{tail}",
                  runs=passed + len(found) + len(failures), steps=steps, seconds=time.monotonic() - started,
                  skipped=skipped)


def clear(folder: Path) -> Path:
    """The cell's folder, emptied of what an earlier run of the cell wrote there (it is made when something is
    written to it)."""
    if folder.is_dir():
        for path in folder.iterdir():
            if path.is_file() and path.suffix in (".jsonl", ".txt", ".html"):
                path.unlink()
    return folder


def prune(folder: Path) -> None:
    """Remove ``folder`` and its parent if nothing was written to them."""
    for empty in (folder, folder.parent):
        with contextlib.suppress(OSError):
            empty.rmdir()


def open_subject(subject: Subject, timeout: float) -> tuple[str, Hello]:
    """The command or factory that names the subject (a release's adapter resolved by Maven and compiled here), and
    its hello. Raises `Unfit` for a release the Kafka adapter does not drive, `Broke` when the system cannot be
    driven."""
    try:
        if subject.release:
            from kpurgatory.conformance.adapters.kafka import adapter_command

            target = adapter_command(subject.release)
            factory = system_factory(adapter=target, timeout=timeout)
        else:
            target = subject.adapter or subject.impl
            factory = system_factory(impl=subject.impl, adapter=subject.adapter, timeout=timeout)
    except click.ClickException as error:  # the Kafka adapter's: 2, a release it does not cover; 3, no jars
        raise (Unfit if error.exit_code == 2 else Broke)(error.format_message()) from None
    except Exception as error:  # the Kafka adapter could not be built
        raise Broke(f"{type(error).__name__}: {error}") from None
    try:
        system = time_limited(factory, timeout)()
        try:
            return target, system.hello()
        finally:
            system.close()
    except Exception as error:  # it does not start, or has no hello
        detail = str(error) if isinstance(error, AdapterError) else f"{type(error).__name__}: {error}"
        raise Broke(f"hello: system failed: {detail}") from None


@attrs.frozen
class Task:
    """One cell, with all it depends on: it runs the same in this process, a worker process or a Spark executor."""

    subject: Subject
    #: the command this process resolved (a release's adapter, an --adapter), or the --impl factory
    target: str
    column: Column
    budget: Budget


@attrs.frozen
class Done:
    """A cell's result, the files it wrote (path relative to --out -> contents: an executor's disk is not the
    driver's) and how long it took where it ran."""

    result: dict
    files: dict[str, bytes]
    seconds: float


def runnable_here(command: str) -> bool:
    """Every absolute path in ``command`` (a word, or an entry of a classpath) exists on this host."""
    paths = [part for word in shlex.split(command) for part in word.split(":") if part.startswith("/")]
    return all(Path(path).exists() for path in paths)


def factory_of(task: Task) -> Callable[[], SystemUnderTest]:
    """What makes the task's systems here. A release's adapter resolved elsewhere whose jars this host lacks is
    resolved again here, by Maven into this host's ~/.m2, as ``check --kafka`` does."""
    subject, target = task.subject, task.target
    if subject.impl:
        return system_factory(impl=target, timeout=task.budget.timeout)
    if subject.release and not runnable_here(target):
        from kpurgatory.conformance.adapters.kafka import adapter_command

        target = adapter_command(subject.release)
    return system_factory(adapter=target, timeout=task.budget.timeout)


def run_cell(task: Task) -> Done:
    """Run one cell into a folder of its own and return what it wrote: a pure function of the task, but for
    timings (and the races the concurrent check meets or not)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kpurgatory-cell-") as scratch:
        out = Path(scratch)  # the cell's paths are relative to it, as they will be to --out
        folder = out / task.subject.slug / task.column.slug
        try:
            factory = factory_of(task)
            if task.column.level == "threads":
                result = threads_cell(factory, task.budget, folder, out)
            elif task.column.level == "scheduled":
                result = scheduled_cell(factory, task.budget, folder, out)
            elif task.column.level == "scenarios":
                result = scenario_cell(factory, task.budget, folder, out)
            else:
                result = check_cell(task.column, factory, task.budget, folder, out)
        except Exception as error:  # the system broke where the check could not report it: one cell lost
            if isinstance(error, OSError) and not isinstance(error, AdapterError):
                raise  # no temporary folder
            result = cell("broke", str(error) if isinstance(error, AdapterError) else
                          f"{type(error).__name__}: {error}", seconds=time.monotonic() - started)
        files = {path.relative_to(out).as_posix(): path.read_bytes()
                 for path in sorted(out.rglob("*")) if path.is_file()}
    return Done(result, files, time.monotonic() - started)


def begin_row(subject: Subject, columns: tuple[Column, ...], budget: Budget,
              out: Path) -> tuple[dict, list[Task]]:
    """Open the row's system here and say what is left to run: the row with the cells that need no run (all of
    them for a system that cannot be driven), and a task per other cell."""
    started = time.monotonic()
    row = {"name": subject.name, "kind": subject.kind, "release": subject.release, "target": None,
           "implementation": None, "note": None, "date": now(), "budget": attrs.asdict(budget),
           "lacks": [], "cells": {}}
    if subject.release:
        row["lacks"] = [rule.ticket for rule in Release.parse(subject.release).differences()]
    tasks = []
    try:
        target, hello = open_subject(subject, budget.timeout)
    except Unfit as error:
        row["note"] = str(error)
        row["cells"] = {column.id: cell("n/a", str(error)) for column in columns}
    except Broke as error:
        row["cells"] = {column.id: cell("broke", str(error)) if index == 0 else
                        cell("skipped", "not run: the system broke before it (see the first cell)")
                        for index, column in enumerate(columns)}
    else:
        row["target"], row["implementation"] = portable(target, out), hello.implementation
        for column in columns:
            if column.profile is not None and column.profile not in hello.profiles:
                row["cells"][column.id] = cell("n/a", f"{hello.implementation} implements "
                                                      f"{', '.join(hello.profiles)}, not {column.profile}")
            elif column.level == "threads" and subject.kind != "impl" and "concurrent" not in hello.features:
                row["cells"][column.id] = cell("n/a", "the adapter does not list the 'concurrent' feature in its "
                                                      "hello")
            elif column.level == "scheduled" and subject.kind != "impl" and "scheduler" not in hello.features:
                row["cells"][column.id] = cell("n/a", "the adapter does not list the 'scheduler' feature in its "
                                                      "hello")
            else:
                tasks.append(Task(subject, target, column, budget))
    row["seconds"] = time.monotonic() - started
    tasks.sort(key=lambda task: task.column.level not in ("threads", "scheduled"))  # the longest first: a shorter
    # tail on the last row
    return row, tasks


def end_row(row: dict, done: dict[str, Done], columns: tuple[Column, ...], out: Path) -> dict:
    """The row with its cells' results, in column order, their files written under ``out``; its seconds are its
    opening's and its cells' own, wherever they ran."""
    for column_id, each in done.items():
        folder = clear(out / Subject(row["name"]).slug / COLUMNS_BY_ID[column_id].slug)
        for name, contents in each.files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(contents)
        prune(folder)
        row["cells"][column_id] = each.result
        row["seconds"] += each.seconds
    row["cells"] = {column.id: row["cells"][column.id] for column in columns}
    row["seconds"] = round(row["seconds"], 1)
    return row


def run_rows(subjects: list[Subject], columns: tuple[Column, ...], budget: Budget, out: Path, runner: Runner,
             on_cell: Callable[[Subject, Column, dict], None] = lambda *_: None,
             on_row: Callable[[list[dict]], None] = lambda _: None) -> list[dict]:
    """Every row: each system opened here in turn and its cells handed to ``runner`` at once, so that the cells of
    the next rows run while this process opens more; a row is ended (its files written, ``on_row`` called) as soon
    as it and every row before it are done (``on_row`` gets the rows so far), so the rows come out in order whatever
    order the cells ran in."""
    rows: list[dict] = []
    waiting: collections.deque[tuple[dict, dict[str, Future]]] = collections.deque()

    def end(block: bool) -> None:
        while waiting and (block or all(future.done() for future in waiting[0][1].values())):
            row, futures = waiting.popleft()
            rows.append(end_row(row, {column_id: future.result() for column_id, future in futures.items()}, columns,
                                out))
            on_row(rows)

    def shown(subject: Subject, column: Column) -> Callable[[Future], None]:
        return lambda future: future.exception() is None and on_cell(subject, column, future.result().result)

    for subject in subjects:
        row, tasks = begin_row(subject, columns, budget, out)
        for column in columns:
            if column.id in row["cells"]:
                on_cell(subject, column, row["cells"][column.id])
        futures = {}
        for task in tasks:
            futures[task.column.id] = runner.submit(task)
            futures[task.column.id].add_done_callback(shown(subject, task.column))
        waiting.append((row, futures))
        end(block=False)
    end(block=True)
    return rows


class Runner:
    """Where cells run: here, one after another (``jobs`` 1)."""

    description = "serially in one process"

    def submit(self, task: Task) -> Future:
        future: Future = Future()
        try:
            future.set_result(run_cell(task))
        except Exception as error:
            future.set_exception(error)
        return future

    def close(self, finished: bool) -> None:
        pass


class Processes(Runner):
    """``jobs`` worker processes, forked before this process opens any system (they inherit no adapter and no
    thread)."""

    def __init__(self, jobs: int):
        self.description = f"on {jobs} local worker processes (-j {jobs})"
        self.pool = multiprocessing.get_context("fork").Pool(jobs, initializer=fresh_worker)

    def submit(self, task: Task) -> Future:
        future: Future = Future()
        self.pool.apply_async(run_cell, (task,), callback=future.set_result, error_callback=future.set_exception)
        return future

    def close(self, finished: bool) -> None:
        if finished:
            self.pool.close()
        else:  # interrupted: the workers' adapters die with them (their keeper)
            self.pool.terminate()
        self.pool.join()


class OnSpark(Runner):
    """One Spark job of one task per cell, submitted from a few threads here so that as many cells run at once as
    the cluster has cores, in row order (Spark's FIFO scheduler); each result, files included, comes back to this
    process."""

    def __init__(self, session, master: str, owned: bool):
        self.session, self.owned, self.context = session, owned, session.sparkContext
        cores = self.context.defaultParallelism
        self.description = f"on Spark ({master}, {cores} cores)"
        self.threads = ThreadPoolExecutor(max_workers=2 * max(cores, 2), thread_name_prefix="matrix-cell")

    def submit(self, task: Task) -> Future:
        return self.threads.submit(self.run, task)

    def run(self, task: Task) -> Done:
        self.context.setJobDescription(f"matrix {task.subject.name} {task.column.id}")
        return self.context.parallelize([task], 1).map(run_cell).collect()[0]

    def close(self, finished: bool) -> None:
        if not finished:
            self.context.cancelAllJobs()
        self.threads.shutdown(wait=True, cancel_futures=True)
        if self.owned:  # stopped before the process exits, not by a shutdown hook racing the executors' goodbyes
            self.session.stop()


#: a jar of a Maven repository: its coordinates say what it is on any machine
MAVEN_JAR = re.compile(r"/repository/(?P<group>(?:[^/]+/)+?)(?P<artifact>[^/]+)/(?P<version>[^/]+)/"
                       r"(?P=artifact)-(?P=version)(?:-(?P<classifier>[^/]+))?\.jar$")


def portable(command: str, out: Path) -> str:
    """``command`` without this machine's paths in it: each word that is an absolute path, or a classpath of them,
    rewritten: a jar of a Maven repository (~/.m2) as its coordinates (a classpath's joined by commas), any other
    path relative to ``out`` (the page)."""
    base = out.resolve()

    def rewritten(path: str) -> str:
        jar = MAVEN_JAR.search(path)
        if jar is None:
            return Path(os.path.relpath(path, base)).as_posix()
        return ":".join(filter(None, (jar["group"].strip("/").replace("/", "."), jar["artifact"], jar["version"],
                                      jar["classifier"])))

    try:
        words = shlex.split(command)
    except ValueError:
        return command
    return shlex.join(",".join(map(rewritten, word.split(":"))) if all(
        part.startswith("/") for part in word.split(":")) else word for word in words)


def typed(args: list[str], here: Path) -> str:
    """``kpurgatory matrix ARGS`` as its user would type it again in ``here``, the folder it ran in: each absolute
    path in it (a word, an option's =value, a word of an --adapter's command) under ``here`` made relative to it,
    one under the home directory written from ~, so that the page names no folder of this machine."""
    home = Path.home()

    def rewritten(match: re.Match) -> str:
        path = Path(match[0])
        if path.is_relative_to(here):
            return Path(os.path.relpath(path, here)).as_posix()
        return f"~/{path.relative_to(home).as_posix()}" if path.is_relative_to(home) else match[0]

    return shlex.join(["kpurgatory", "matrix", *(re.sub(r"(?<![^\s=])/[^\s:,]+", rewritten, arg) for arg in args)])


def results_files(paths: tuple[Path, ...]) -> list[Path]:
    """The results files given, a folder standing for the ``*.json`` files in it."""
    return [each for path in paths for each in (sorted(path.glob("*.json")) if path.is_dir() else [path])]


def read_results(path: Path) -> dict:
    """A driver's results file (specs/vectors.md), validated; a bad one is a usage error."""
    from kpurgatory.conformance.tools.vectors import check_document

    try:
        document = orjson.loads(path.read_bytes())
        check_document("results", document, str(path))
    except (OSError, ValueError) as error:
        raise click.BadParameter(str(error), param_hint="--implementations") from None
    return document


def declared(declarations: dict) -> str:
    return ", ".join(f"{name} {value}" for name, value in declarations.items()) or "Kafka's defaults"


def vector_row(results: dict, source: Path, out: Path) -> dict:
    """A row from a driver's results file: a cell per profile and kind of vectors. A failing case's observed trace
    is copied under ``out`` with its page, which the cell links to; a failing findings case is a finding (Kafka's
    own known misbehaviour: its releases fail these by design)."""
    name = f"{results['implementation']} ({results['driver']})"
    row = {"name": name, "kind": "vectors", "release": None, "target": f"{results['driver']} driver, {source.name}",
           "implementation": f"{results['level']} level; declares {declared(results['declarations'])}",
           "note": None, "date": now(), "budget": None, "lacks": [], "cells": {}, "seconds": 0.0,
           "declarations": results["declarations"], "level": results["level"]}
    for column in VECTOR_COLUMNS:
        prefix = f"1/{column.id.removeprefix('vectors ')}/"
        cases = [case for case in results["cases"] if case["path"].startswith(prefix)]
        verdicts = collections.Counter(case["verdict"] for case in cases)
        findings, failures = [], []
        for case in (case for case in cases if case["verdict"] == "fail"):
            trace_path = None
            if case["observed"] and Path(case["observed"]).is_file():
                folder = out / Subject(name).slug / column.slug
                trace_path = folder / Path(case["observed"]).name
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(case["observed"], trace_path)
                with contextlib.suppress(TraceFormatError):
                    write_view(trace_path.with_suffix(".html"), read_traces(trace_path))
            summary = f"step {case['step']}: {case['reason']}" if case["step"] else case["reason"] or "failed"
            if trace_path is not None:  # the driver's words name its own copy: the page names the one beside it
                summary = summary.replace(case["observed"], relative(trace_path, out))
            finding = next((f for f in FINDINGS if Path(case["path"]).stem.endswith(f".{f.name}")), None)
            if column.id.endswith("/findings") and finding is not None:
                findings.append(finding_entry(finding, out, trace_path, detail=summary))
            else:
                failures.append(failure_entry(case["path"], summary, False, out, trace_path))
        counts = f"{verdicts['pass']} passed, {verdicts['fail']} failed, {verdicts['skip']} skipped"
        row["cells"][column.id] = (cell("n/a", f"no case run ({counts})") if not verdicts["pass"] + verdicts["fail"]
                                   else judged(findings, failures, counts, runs=verdicts["pass"] + verdicts["fail"]))
    return row


# ---------------------------------------------------------------------------------------------------------------
# The data and the page
# ---------------------------------------------------------------------------------------------------------------


def java_version() -> str | None:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stderr or done.stdout).splitlines()[0] if (done.stderr or done.stdout) else None


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def loads() -> list[float]:
    """The load average (1, 5 and 15 minutes): how much else the machine did."""
    return [round(load, 2) for load in os.getloadavg()]


def environment(subjects: list[Subject]) -> dict:
    from importlib.metadata import version

    return {"date": now(), "load_average": loads(), "cores": os.cpu_count(),
            "machine": platform.machine(), "python": platform.python_version(),
            "kpurgatory": version("kpurgatory"), "hypothesis": version("hypothesis"),
            "java": java_version() if any(subject.release for subject in subjects) else None}


def totals(rows: list[dict]) -> dict:
    counts = {verdict: 0 for verdict in VERDICTS}
    for row in rows:
        for result in row["cells"].values():
            counts[result["verdict"]] += 1
    return {**counts, "seconds": round(sum(row["seconds"] for row in rows), 1)}


def legend_findings(rows: list[dict]) -> list[dict]:
    """Every finding met, once: the known misbehaviours of `check.findings` and the rules scenarios showed."""
    met: dict[str, dict] = {}
    for row in rows:
        for result in row["cells"].values():
            for finding in result["findings"]:
                entry = met.setdefault(finding["name"], {key: finding[key] for key in ("name", "ticket", "releases",
                                                                                       "description")} | {"rows": []})
                if row["name"] not in entry["rows"]:
                    entry["rows"].append(row["name"])
    return list(met.values())


def merged(previous: dict | None, rows: list[dict],
           columns: tuple[Column, ...]) -> tuple[list[dict], tuple[Column, ...]]:
    """This run's rows with those of an earlier matrix it did not redo: releases by version, then the other systems;
    the columns either has."""
    names = {row["name"] for row in rows}
    every = [row for row in (previous or {}).get("rows", []) if row["name"] not in names] + rows
    releases = sorted((row for row in every if row["kind"] == "release"), key=lambda row: version_key(row["release"]))
    ids = {column["id"] for column in (previous or {}).get("columns", [])} | {column.id for column in columns}
    return (releases + [row for row in every if row["kind"] != "release"],
            tuple(column for column in COLUMNS + VECTOR_COLUMNS if column.id in ids))


def previous_matrix(out: Path) -> dict | None:
    """The matrix an earlier run wrote to ``out``, if any; a file that is not one is a usage error."""
    path = out / "matrix.json"
    if not path.exists():
        return None
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise click.BadParameter(f"cannot read {path}: {error}", param_hint="--out") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise click.BadParameter(f"{path} is not a {FORMAT} version {VERSION} file", param_hint="--out")
    return data


def kept(row: dict, out: Path) -> None:
    """A row of an earlier matrix, kept by --merge, as this version writes it: no path of this machine in its
    target (a results file by its name), nor in what a driver said of a failing case (its observed run: the copy
    beside the page); each counterexample by its trace alone (the page links no counterexample's page)."""
    for result in row["cells"].values():
        for entry in (*result["findings"], *result["failures"]):
            entry.pop("view", None)
    if row["kind"] != "vectors":
        row["target"] = row["target"] and portable(row["target"], out)
        return
    if row["target"]:
        driver, _, source = row["target"].partition(" driver, ")
        row["target"] = f"{driver} driver, {Path(source).name}"
    for result in row["cells"].values():
        for entry in (*result["findings"], *result["failures"]):
            if entry.get("trace"):
                # an absolute path only: a word, not the tail of the relative one put there before
                path = re.compile(rf"(?<![^\s=(\"'])/\S*/{re.escape(Path(entry['trace']).name)}")
                for holder, key in ((entry, "summary"), (entry, "detail"), (result, "note")):
                    if holder.get(key):
                        holder[key] = path.sub(entry["trace"], holder[key])


def forget(out: Path) -> None:
    """Remove the counterexamples of the matrix an earlier run wrote to ``out`` (the folders its cells name), which
    this run's matrix replaces; anything else there stays."""
    with contextlib.suppress(click.BadParameter):
        for row in (previous_matrix(out) or {}).get("rows", []):
            for column in row["cells"]:
                if column in COLUMNS_BY_ID:
                    folder = out / Subject(row["name"]).slug / COLUMNS_BY_ID[column].slug
                    prune(clear(folder))


def matrix_data(rows: list[dict], columns: tuple[Column, ...], budget: Budget, env: dict, command: str) -> dict:
    return {"format": FORMAT, "version": VERSION, "command": command, "environment": env,
            "budget": attrs.asdict(budget),
            "columns": [{"id": column.id, "profile": column.profile, "level": column.level, "what": column.what}
                        for column in columns],
            "rows": rows, "totals": totals(rows), "findings": legend_findings(rows),
            "rules": [{"ticket": rule.ticket, "since": rule.since, "backports": list(rule.backports),
                       "title": rule.title, "before": rule.before, "after": rule.after, "seen": rule.seen}
                      for rule in RULES]}


def write_matrix(out: Path, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    (out / "index.html").write_text(page(data, out))


def exit_code(rows: list[dict]) -> int:
    """3 when a system could not be driven or a counterexample not written, else 1 on a failure, else 0."""
    results = [result for row in rows for result in row["cells"].values()]
    if any(result["verdict"] == "broke" or result.get("write_error") for result in results):
        return 3
    return 1 if any(result["verdict"] == "failure" for result in results) else 0


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------


def named(values: tuple[str, ...], option: str) -> list[tuple[str, str]]:
    """NAME=TARGET values as pairs (a TARGET may hold '=' too: a name cannot)."""
    pairs = []
    for value in values:
        name, sep, target = value.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise click.BadParameter(f"expected NAME=..., got {value!r}", param_hint=option)
        pairs.append((name.strip(), target.strip()))
    return pairs


def subjects_of(releases: str | None, adapters: tuple[str, ...], impls: tuple[str, ...]) -> list[Subject]:
    """The rows: the releases given (every covered one when no system is given either), then the adapters, then the
    in-process systems."""
    subjects = []
    if releases is not None or not (adapters or impls):
        versions = COVERED if releases is None else [part.strip() for part in releases.split(",") if part.strip()]
        for version in versions:
            try:
                version_key(version)
                Release.parse(version)
            except ValueError as error:
                raise click.BadParameter(str(error), param_hint="--releases") from None
            subjects.append(Subject(version, release=version))
    subjects += [Subject(name, adapter=command) for name, command in named(adapters, "--adapter")]
    for name, spec in named(impls, "--impl"):
        load_factory(spec)  # a usage error now, not a broken row later
        subjects.append(Subject(name, impl=spec))
    seen = set()
    for subject in subjects:
        if subject.slug in seen:
            raise click.UsageError(f"two systems named {subject.name!r}: give each a distinct NAME")
        seen.add(subject.slug)
    if not subjects:
        raise click.BadParameter("no release given", param_hint="--releases")
    return subjects


VERDICT_STYLE = {"pass": "green", "finding": "yellow", "failure": "bold red", "broke": "bold red", "n/a": "dim",
                 "skipped": "dim"}


@click.command("matrix")
@click.option("--releases", metavar="V1,V2,...", help="Kafka releases to run [default: every covered release, "
                                                       "unless --adapter or --impl is given].")
@click.option("--adapter", "adapters", multiple=True, metavar="NAME=COMMAND",
              help="A row for a subprocess adapter (specs/protocol.md); repeatable.")
@click.option("--impl", "impls", multiple=True, metavar="NAME=MODULE:FACTORY",
              help="A row for an in-process Python system; repeatable.")
@click.option("--checks", metavar="ID,ID,...", default=",".join(column.id for column in COLUMNS), show_default=True,
              help="The columns to run.")
@click.option("--seed", type=click.IntRange(0), default=SEED, show_default=True,
              help="Seed of every check's generated runs.")
@click.option("--examples", type=click.IntRange(1), default=EXAMPLES, show_default=True,
              help="Runs per sequential check.")
@click.option("--steps", type=click.IntRange(1), default=STEPS, show_default=True,
              help="Commands per run, at most (rounds per run in the concurrent check).")
@click.option("--threads", type=click.IntRange(2, 64), default=THREADS, show_default=True,
              help="Worker threads of the concurrent check.")
@click.option("--thread-runs", type=click.IntRange(1), default=THREAD_RUNS, show_default=True,
              help="Random runs of the concurrent check.")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds one call into a system may take before it counts as hung.")
@click.option("--max-failures", type=click.IntRange(1), default=DEFAULT_MAX_FAILURES, show_default=True,
              help="Distinct failures each check shrinks and reports before it stops exploring.")
@click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Cells run at once, each in a worker process of its own; the results are those of -j 1.")
@click.option("--master", metavar="URL", help="Run the cells on Spark instead, one task per cell (local[N], "
                                              "spark://HOST:PORT); the results are those of -j 1.")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting, with --master "
                                                                         "(repeatable).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path(DEFAULT_OUT),
              show_default=True, help="Where matrix.json, index.html and the counterexamples are written.")
@click.option("--merge", is_flag=True, help="Keep the rows of the matrix already in --out that this run does not "
                                            "redo (each row records its own date and budget): run a few releases "
                                            "at a time.")
@click.option("--implementations", "implementations", multiple=True,
              type=click.Path(exists=True, path_type=Path), metavar="RESULTS",
              help="A driver's results file of the test vectors (specs/vectors.md), or a folder of them: a row per "
                   "file, a column per profile and kind of vectors; repeatable. Given alone, no system is run.")
@click.option("--page-only", is_flag=True, help="Run nothing: write --out's index.html again from its matrix.json "
                                                "and the traces it names (after a change to the page).")
def matrix_command(releases, adapters, impls, checks, seed, examples, steps, threads, thread_runs, timeout,
                   max_failures, jobs, master, conf, out, merge, implementations, page_only):
    """Run every check against every covered Kafka release (or the given systems) with one seed and budget, and
    write the results: OUT/matrix.json and one self-contained page, OUT/index.html, which opens on which of Kafka's
    known bugs each release has and whether the runs met it; then each cell, pass, finding (Kafka's own known
    misbehaviour), failure, broke, n/a or skipped, with its counterexamples' steps and traces. Cells run in parallel
    with -j N, or on Spark with --master.

    Exits 0 when every cell passed or has findings only, 1 when a system failed a check, 3 when a system could not
    be driven or a counterexample could not be written."""
    if page_only:
        data = previous_matrix(out)
        if data is None:
            raise click.BadParameter(f"no {out / 'matrix.json'} to make the page of", param_hint="--out")
        (out / "index.html").write_text(page(data, out))
        click.echo(f"page: {safe(out / 'index.html')}")
        return
    if master and jobs > 1:
        raise click.UsageError("give -j/--jobs or --master, not both: on Spark the cluster's cores run the cells")
    if conf and not master:
        raise click.UsageError("--conf sets Spark, which runs only with --master")
    chosen = [part.strip() for part in checks.split(",") if part.strip()]
    if unknown := [part for part in chosen if part not in COLUMNS_BY_ID]:
        raise click.BadParameter(f"unknown checks {', '.join(unknown)} (expected some of "
                                 f"{', '.join(COLUMNS_BY_ID)})", param_hint="--checks")
    columns = tuple(column for column in COLUMNS if column.id in chosen)
    if not columns:
        raise click.BadParameter("no check given", param_hint="--checks")
    joined = [(path, read_results(path)) for path in results_files(implementations)]
    if implementations and not joined:
        raise click.BadParameter("no results file in the folders given", param_hint="--implementations")
    # results alone are joined without running any system
    subjects = subjects_of(releases, adapters, impls) if releases or adapters or impls or not joined else []
    columns = (columns if subjects else ()) + (VECTOR_COLUMNS if joined else ())
    previous = previous_matrix(out) if merge else None
    for row in (previous or {}).get("rows", []):
        kept(row, out)
    if not merge:
        forget(out)
    budget = Budget(seed, examples, steps, threads, thread_runs, timeout, max_failures)
    console = command_console()
    started = time.monotonic()
    env = environment(subjects)
    command = typed(sys.argv[2:] if sys.argv[1:2] == ["matrix"] else [], Path.cwd())
    # the pool forks before this process opens any system; Spark starts before the first row too
    runner = (Runner() if not subjects or jobs == 1 and not master else Processes(jobs) if not master else
              spark_runner(master, conf))
    env["runner"] = runner.description
    console.print(f"matrix: {len(joined)} results files of test vectors joined; " * bool(joined)
                  + (f"{len(subjects)} systems × {len(columns) - len(VECTOR_COLUMNS) * bool(joined)} checks; seed "
                     f"{seed}, {examples} runs of up to {steps} steps per check, {thread_runs} runs of {threads} "
                     f"threads; {runner.description}; " if subjects else "")
                  + f"writing {markup(out)}")

    def show(subject: Subject, column: Column, result: dict) -> None:
        named_findings = ", ".join(f["name"] for f in result["findings"])
        console.print(f"  {markup(subject.name)} {column.id}: [{VERDICT_STYLE[result['verdict']]}]"
                      f"{result['verdict']}[/]" + (f" ({markup(named_findings)})" if named_findings else "")
                      + f" {result['seconds']:.0f} s", highlight=False)

    def written(done: list[dict]) -> None:
        console.print(f"{markup(done[-1]['name'])}: {done[-1]['seconds']:.0f} s", highlight=False)
        save(rows + done)

    def save(done: list[dict]) -> None:
        env["load_average_end"] = loads()
        env["wall_s"] = round(time.monotonic() - started, 1)
        write_matrix(out, matrix_data(*merged(previous, done, columns), budget, env, command))

    rows: list[dict] = [vector_row(results, path, out) for path, results in joined]
    finished = False
    try:
        rows += run_rows(subjects, columns, budget, out, runner, show, written)
        finished = True
        save(rows)
    except OSError as error:
        click.echo(f"Error: cannot write the matrix to {safe(out)}: {safe(error)}", err=True)
        sys.exit(3)
    finally:
        runner.close(finished)
    table = Table(title=f"matrix (seed {seed}, {examples}×{steps}, {thread_runs} thread runs)")
    table.add_column("system")
    for column in columns:
        table.add_column(column.id)
    table.add_column("time", justify="right")
    for row in rows:
        table.add_row(markup(row["name"]), *(f"[{VERDICT_STYLE[row['cells'][c.id]['verdict']]}]"
                                             f"{row['cells'][c.id]['verdict']}[/]" if c.id in row["cells"] else "—"
                                             for c in columns),
                      f"{row['seconds']:.0f} s")
    console.print(table)
    total = totals(rows)
    console.print(", ".join(f"{total[verdict]} {verdict}" for verdict in VERDICTS if total[verdict])
                  + f"; {total['seconds']:.0f} s of cells, {env['wall_s']:.0f} s wall time {runner.description}",
                  highlight=False)
    console.print(safe(f"page: {out / 'index.html'}\ndata: {out / 'matrix.json'}"), markup=False, highlight=False,
                  soft_wrap=True)
    sys.exit(exit_code(rows))


def spark_runner(master: str, conf: tuple[str, ...]) -> OnSpark:
    from kpurgatory.conformance.spark.session import get_session, parse_conf

    settings = parse_conf(conf)
    try:
        from pyspark import SparkContext

        owned = SparkContext._active_spark_context is None  # else a caller's session (a test's), left running
    except ImportError:
        owned = True  # get_session says what to install
    return OnSpark(get_session(master, settings, "kpurgatory matrix"), master, owned)
