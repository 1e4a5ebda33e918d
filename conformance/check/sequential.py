"""Checking an implementation against the model with generated runs: `run_check` and ``kpurgatory check``.

``run_check(factory, profile=...)`` explores runs of one profile with the conformance state machine
(`conformance.check.machine`), deterministically from ``seed``, and returns a `CheckResult`. On a failure the result
carries the shrunk counterexample as a trace of the model's observations — a test vector that
``kpurgatory replay TRACE --impl/--adapter`` reproduces and anyone can read — and the step table of the system
against the model at the step where they part. A system that breaks the protocol (crash, hang, garbage) ends the
check at once; its partial run is the counterexample, unshrunk.

The command checks the built-in implementation on both profiles unless told otherwise, shows progress, a summary
and the coverage reached, writes counterexamples to ``--out`` and optionally a JUnit report, and exits 1 on any
failure.
"""

from __future__ import annotations

import contextlib
import io
import random
import shlex
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable
from unittest import mock

import attrs
import click
import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kpurgatory.conformance.adapters import BUILTIN, one_target, system_factory
from kpurgatory.conformance.adapters.subprocess import AdapterError
from kpurgatory.conformance.check.compare import LEVELS
from kpurgatory.conformance.cli import Interrupted
from kpurgatory.conformance.check.machine import Abort, Session, Stop, machine_class
from kpurgatory.conformance.traces.replay import ReplayReport, print_report, with_target_options
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.terminal import markup, safe
from kpurgatory.conformance.traces.codec import Header, Step, Trace, dumps, write_traces
from kpurgatory.conformance.traces.view import write_view
from kpurgatory.model import vocabulary as v

#: the default budget per profile: about 20 s of CPU each for the built-in implementation (kpurgatory check)
DEFAULT_EXAMPLES = 500
DEFAULT_STEPS = 60


@attrs.frozen
class CheckResult:
    """The verdict of one profile's check. ``coverage`` maps every coverage item of the profile to how often the
    model's state reached it; ``counterexample`` is the shrunk failing run (for a broken adapter: the run up to
    the break, not shrunk, and ``shrunk_length`` is None); ``report`` is the system's run of it against the
    model, for `replay.print_report`."""

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

    def failure_report(self) -> str:
        """The failure as plain text: what, the step table, and where the counterexample is."""
        lines = [f"{self.implementation} fails the {self.profile} profile at level {self.level} (seed {self.seed}): "
                 f"{self.failure_summary}"]
        if self.report is not None:
            lines.append(render(self.report))
        if self.trace_path is not None:
            lines.append(f"counterexample: {self.trace_path}")
        return "\n".join(lines)


def run_check(system_factory: Callable[[], SystemUnderTest], *, profile: str, level: str = "exact",
              examples: int = DEFAULT_EXAMPLES, steps: int = DEFAULT_STEPS, seed: int | None = None,
              out_dir: str | Path | None = None,
              on_example: Callable[[Session], None] | None = None) -> CheckResult:
    """Check the systems ``system_factory`` makes (one, initialised afresh for each example) on ``profile``.

    ``examples`` runs of up to ``steps`` commands are generated from ``seed`` (a fresh random one when None; the
    result says which), so the same seed and system give the same result. With ``out_dir`` a counterexample is
    written there as ``check-PROFILE-SEED.jsonl`` plus its step table as ``.txt`` and its page (`traces.view`) as
    ``.html``. ``on_example`` is called after every example with the `Session` (examples, steps, coverage,
    shrink_runs so far) for progress displays."""
    if profile not in v.PROFILES or level not in LEVELS:
        raise ValueError(f"profile must be one of {v.PROFILES} and level one of {LEVELS}; got {profile!r}, {level!r}")
    seed = random.randrange(2**32) if seed is None else seed
    started = time.monotonic()
    system = system_factory()
    try:
        try:
            hello = system.hello()
        except AdapterError as error:
            return broken_result(profile, level, seed, "?", time.monotonic() - started,
                                 f"hello: system failed: {error}")
        if profile not in hello.profiles:
            raise ValueError(f"{hello.implementation} implements {', '.join(hello.profiles)}, not {profile}")
        session = Session(system, hello, profile, level, on_example)
        stop = explore(session, examples, steps, seed)
    finally:
        system.close()
    summary = dict(profile=profile, level=level, seed=seed, implementation=hello.implementation,
                   examples_run=session.examples, steps_run=session.steps,
                   distinct_states=len(session.coverage.states), coverage=session.coverage.report(),
                   elapsed_s=time.monotonic() - started, shrink_runs=session.shrink_runs)
    if stop is None:
        return CheckResult(True, **summary)
    trace_id = f"check-{profile}-{seed}"
    description = (f"counterexample from `kpurgatory check --profile {profile} --level {level} --seed {seed}` "
                   f"against {hello.implementation}: {stop.summary}")
    counterexample = Trace(Header(trace_id, profile, stop.params, description=description,
                                  declarations=hello.declarations), with_answers(stop))
    report = ReplayReport(counterexample, "system", level, tuple(stop.outcomes), stop.error, stop.error is not None)
    trace_path = table_path = write_error = None
    if out_dir is not None:
        try:
            trace_path = write_traces(Path(out_dir) / f"{trace_id}.jsonl", counterexample)
            table_path = trace_path.with_suffix(".txt")
            table_path.write_text(render(report))
            write_view(trace_path.with_suffix(".html"), counterexample, [report])
        except OSError as error:
            trace_path = table_path = None
            write_error = f"cannot write the counterexample to {out_dir}: {error}"
    return CheckResult(False, **summary, failure_summary=stop.summary, counterexample=counterexample,
                       report=report, time_to_first_failure_s=session.first_failure_s,
                       shrunk_length=None if isinstance(stop, Abort) else len(stop.steps),
                       trace_path=trace_path, table_path=table_path, broken=stop.error is not None,
                       write_error=write_error)


@contextlib.contextmanager
def installation_independent():
    """Hypothesis draws, now and then, a constant found in the source of modules it considers the user's own: files
    outside site-packages, below the working directory. Which those are depends on how kpurgatory was installed
    (editable or not), on the working directory and on what happens to be imported, so the same seed would give
    different runs; collecting them also writes a cache to ``.hypothesis/`` in the working directory. Within this
    block no module counts as local (Hypothesis's own constants remain), and its constant cache is reset on the way
    in and out, so what ran before cannot leak in."""
    from hypothesis.internal.conjecture import providers

    providers.CONSTANTS_CACHE.cache.clear()
    try:
        with mock.patch.object(providers, "_get_local_constants", providers.Constants):
            yield
    finally:
        providers.CONSTANTS_CACHE.cache.clear()


def with_answers(stop: Stop) -> list[Step]:
    """The stop's steps, each with what the system answered, so the trace alone reproduces the failure: its
    observation, or for a last step it failed to answer, how it failed."""
    answers: dict[int, v.Observation | str] = {outcome.seq: outcome.observed for outcome in stop.outcomes
                                                if outcome.observed is not None}
    if stop.error is not None and stop.steps and stop.steps[-1].seq not in answers:
        answers[stop.steps[-1].seq] = stop.error.partition(": system failed: ")[2] or stop.error
    return [attrs.evolve(step, system=answers.get(step.seq)) for step in stop.steps]


def explore(session: Session, examples: int, steps: int, seed: int) -> Stop | None:
    """Run the state machine; the shrunk divergence or the abort that ended it, or None when every example passed."""
    settings = hypothesis.settings(
        max_examples=examples, stateful_step_count=steps, database=None, deadline=None, derandomize=False,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False, verbosity=Verbosity.quiet,
        phases=(Phase.explicit, Phase.generate, Phase.shrink), print_blob=False,
    )
    try:
        with installation_independent():
            run_state_machine_as_test(hypothesis.seed(seed)(machine_class(session)), settings=settings)
    except Stop as stop:
        return stop
    except Flaky:
        if session.shortest is None:
            raise
        stop = session.shortest
        stop.summary += (" (did not reproduce when Hypothesis replayed it: is the system deterministic? this is the "
                         "shortest failing run seen)")
        return stop
    return None


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
        for name in ("seed", "examples_run", "steps_run", "distinct_states"):
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
    for column in ("profile", "verdict", "examples", "steps", "states", "coverage", "time"):
        table.add_column(column, justify="left" if column in ("profile", "verdict") else "right", no_wrap=True)
    for result in results:
        reached = sum(count > 0 for count in result.coverage.values())
        table.add_row(result.profile, "[green]pass[/]" if result.passed else "[bold red]FAIL[/]",
                      str(result.examples_run), str(result.steps_run), str(result.distinct_states),
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
    flags = f"--adapter {shlex.quote(adapter)}" if adapter else f"--impl {impl}"
    return flags + (f" --level {level}" if level != "exact" else "")


def concurrently(impl, adapter, timeout, profile, examples, steps, seed, out, junit, threads) -> None:
    """``kpurgatory check --threads N``: refuse what the concurrent check cannot do, then run it and exit."""
    if profile == "timer" or junit:
        raise click.UsageError("--threads checks the purgatory profile and writes no JUnit report: drop "
                               + ("--profile timer" if profile == "timer" else "--junit"))
    factory = system_factory(impl, adapter, timeout)
    if adapter:
        try:
            features = introduce(factory).features
        except AdapterError as error:
            click.echo(f"FAIL hello: system failed: {safe(error)}")
            sys.exit(1)
        if "concurrent" not in features:
            raise click.UsageError("--threads calls the adapter from several threads at once; it must list the "
                                   "'concurrent' feature in its hello (specs/protocol.md, §3)")
    from kpurgatory.conformance.check.concurrent import check_concurrently

    seed = random.randrange(2**32) if seed is None else seed
    rerun = (f"kpurgatory check {target_flags(impl, adapter, 'exact')} --threads {threads} --examples {examples} "
             f"--steps {steps} --seed {seed}")
    sys.exit(0 if check_concurrently(factory, threads=threads, runs=examples, steps=steps, seed=seed,
                                     timeout=timeout, out=out, rerun=rerun) else 1)


def introduce(factory: Callable[[], SystemUnderTest]) -> Hello:
    """The hello of a system made for the purpose (it says which profiles to check)."""
    system = factory()
    try:
        return system.hello()
    finally:
        system.close()


def check_profile(console: Console, factory: Callable[[], SystemUnderTest], profile: str, level: str, examples: int,
                  steps: int, seed: int, out: Path, results: list[CheckResult]) -> None:
    """`run_check` of one profile with a progress bar; its result is appended to ``results``."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task(f"{profile:9}", total=examples, detail="")

        def show(session: Session) -> None:
            detail = (f"shrinking: {session.shrink_runs} runs" if session.shrinking else
                      f"{session.steps} steps, {len(session.coverage.states)} states")
            progress.update(task, completed=session.examples, total=max(examples, session.examples), detail=detail)

        results.append(run_check(factory, profile=profile, level=level, examples=examples, steps=steps, seed=seed,
                                 out_dir=out, on_example=show))


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
def check_command(impl, adapter, timeout, level, profile, examples, steps, seed, out, junit, threads):
    """Check an implementation against the model with generated runs (the built-in one by default).

    Hypothesis drives the model and the implementation side by side; on a divergence it shrinks the run to a
    minimal counterexample, written to --out as a trace that `kpurgatory replay` reproduces. Exits 0 when every
    profile passes, 1 when the implementation fails one, 3 when it could not be driven (adapter crash, hang,
    garbage), the counterexample could not be written, or the check was interrupted; --junit is written in every
    case."""
    console = Console()

    def plain(text: str) -> None:
        """Paths and commands: never wrapped or styled, so they can be copied."""
        console.print(safe(text), markup=False, highlight=False, soft_wrap=True)

    one_target(impl, adapter)  # before the default --impl applies
    impl = None if adapter else impl or BUILTIN
    if threads > 1:
        concurrently(impl, adapter, timeout, profile, examples, steps, seed, out, junit, threads)
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
                      f"{examples} examples of up to {steps} steps; seed {seed})")
        for current in profiles:
            check_profile(console, factory, current, level, examples, steps, seed, out, results)
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
        if result.passed:
            continue
        console.rule(f"[bold red]{result.profile}: {'ERROR' if result.broken else 'FAIL'}")
        if result.report is not None:
            print_report(console, result.report, window=None)
            shrunk = (f"shrunk to {result.shrunk_length} steps in {result.shrink_runs} runs"
                      if result.shrunk_length is not None else "not shrunk: the system broke the protocol")
            console.print(f"first failure after {result.time_to_first_failure_s:.1f} s, {shrunk}")
            if result.write_error is not None:  # the counterexample is not lost: it goes to the terminal
                plain(f"{result.write_error}\ncounterexample (JSON Lines):\n{dumps(result.counterexample)}")
            else:
                plain(f"counterexample: {result.trace_path}\nstep table:     {result.table_path}\n"
                      f"view:           {result.trace_path.with_suffix('.html')}")
                plain(f"replay:         kpurgatory replay {result.trace_path} {target_flags(impl, adapter, level)}")
        else:
            plain(result.failure_summary)
        plain(f"re-run:         kpurgatory check {target_flags(impl, adapter, level)} --profile {result.profile} "
              f"--examples {examples} --steps {steps} --seed {seed}")
    report_junit(junit, results)
    code = (3 if any(result.broken or result.write_error for result in results) else
            0 if len(passing) == len(results) else 1)
    console.print(f"{['[green]PASS[/]', '[bold red]FAIL[/]', '', '[bold red]ERROR[/]'][code]} seed {seed}")
    sys.exit(code)
