"""``kpurgatory prove``: run every obligation, print what was established, write refutations as traces."""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import attrs
import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kpurgatory.conformance.traces.codec import write_traces
from kpurgatory.specs.core import (BOUND, PROVED, REFUTED, Obligation, Outcome, as_expected, render_witness,
                                   run_named, run_one, select)

STYLE = {PROVED: "green", BOUND: "cyan", REFUTED: "yellow"}


def run_obligations(obligations: list[Obligation], jobs: int,
                    show: Callable[[list[str], int], None] = lambda running, done: None) -> dict[str, Outcome]:
    """Run the obligations (the premises others rest on first, then the expensive ones when in parallel), telling
    ``show`` which are running and how many are done whenever that changes; results by name, in document order.
    An obligation that rests on another in the selection waits for it and is given its outcome (`core.run_one`)."""
    selected = {ob.name for ob in obligations}
    premises = {ob.rests_on for ob in obligations if ob.rests_on in selected}
    order = sorted(obligations, key=lambda ob: (ob.name not in premises, -ob.cost if jobs > 1 else 0))
    results: dict[str, Outcome] = {}

    def waits(ob: Obligation) -> bool:
        return ob.rests_on in selected and ob.rests_on not in results

    def given(ob: Obligation) -> dict[str, Outcome]:
        # without its traces and mutant: a dependant only needs the premise's verdict
        held = results.get(ob.rests_on)
        return {} if held is None else {ob.rests_on: attrs.evolve(held, traces={}, mutant=None, lemmas=[])}

    if jobs <= 1 or len(obligations) <= 1:
        for ob in order:
            show([ob.name], len(results))
            results[ob.name] = run_one(ob, given(ob))
        return {ob.name: results[ob.name] for ob in obligations}
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    running: dict = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        while order or running:  # never more submitted than workers, so what is submitted is what runs
            while order and len(running) < jobs:
                # the first that need not wait for a premise (a cycle of premises would otherwise wait forever)
                ob = next((ob for ob in order if not waits(ob)), None if running else order[0])
                if ob is None:
                    break
                order.remove(ob)
                running[pool.submit(run_named, ob.name, given(ob))] = ob.name
            show(list(running.values()), len(results))
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                results[running.pop(future)] = future.result()
    return {ob.name: results[ob.name] for ob in obligations}


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its children that have ended (the workers, once their
    pool is shut down)."""
    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def run_with_progress(obligations: list[Obligation], jobs: int) -> dict[str, Outcome]:
    """`run_obligations` with a progress bar on stderr naming the obligations being discharged (terminals only:
    logs and pipes get the report alone)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        return run_obligations(obligations, jobs)
    with Progress(TextColumn("proving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as progress:
        task = progress.add_task("", total=len(obligations))

        def show(running: list[str], done: int) -> None:
            progress.update(task, completed=done, description=escape(", ".join(running)), refresh=True)

        return run_obligations(obligations, jobs, show)


def write_refutations(obligations: list[Obligation], outcomes: dict[str, Outcome], out: Path) -> dict[str, list[str]]:
    paths: dict[str, list[str]] = {}
    for ob in obligations:
        for label, trace in outcomes[ob.name].traces.items():
            path = write_traces(out / f"{ob.name}.{label}.jsonl", trace)
            paths.setdefault(ob.name, []).append(str(path))
    return paths


def as_json(obligations, outcomes, paths, seconds: float, cpu: float = 0.0) -> dict:
    rows = []
    for ob in obligations:
        outcome = outcomes[ob.name]
        rows.append({
            "name": ob.name, "kind": ob.kind, "statement": ob.statement, "domain": ob.domain,
            "bound": attrs.asdict(ob.bound), "rests_on": ob.rests_on,
            "method": outcome.method, "result": outcome.status, "expected": ob.expect,
            "as_expected": as_expected(ob, outcome), "seconds": round(outcome.seconds, 3),
            "cpu_seconds": round(outcome.cpu + (outcome.mutant.cpu if outcome.mutant else 0.0), 3),
            "detail": outcome.detail, "witness": outcome.witness, "premise_failed": outcome.premise,
            "mutant": None if ob.mutant is None else {
                "bug": ob.mutant, "result": outcome.mutant.status if outcome.mutant else None,
                "detail": outcome.mutant.detail if outcome.mutant else "",
                "witness": outcome.mutant.witness if outcome.mutant else {},
                "seconds": round(outcome.mutant.seconds, 3) if outcome.mutant else 0.0},
            "lemmas": [{"name": n, "result": s, "seconds": round(t, 3)} for n, s, t in outcome.lemmas],
            "traces": paths.get(ob.name, []),
        })
    return {"obligations": rows, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
            "ok": all(row["as_expected"] for row in rows)}


def print_table(console: Console, obligations, outcomes, paths, seconds: float, cpu: float = 0.0) -> None:
    table = Table(title=f"kpurgatory prove: {len(obligations)} obligations in {seconds:.1f}s", show_lines=False)
    table.add_column("obligation", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("its mutant", no_wrap=True)
    table.add_column("domain  [dim](method)[/]", overflow="fold", ratio=1)
    for ob in obligations:
        outcome = outcomes[ob.name]
        result = f"[{STYLE.get(outcome.status, 'bold red')}]{outcome.status}[/]"
        if ob.kind in ("finding", "mutant"):
            result += f" [dim]({ob.kind})[/]"
        if outcome.status != ob.expect:
            result += f" [bold red]✗ expected {ob.expect}[/]"
        teeth = "" if outcome.mutant is None else (
            f"[{STYLE[REFUTED]}]refuted[/] {outcome.mutant.seconds:.2f}s" if outcome.mutant.status == REFUTED
            else f"[bold red]{outcome.mutant.status} ✗[/]")
        table.add_row(ob.name, result, f"{outcome.seconds:.2f}s", teeth,
                      f"{escape(ob.domain)} [dim]({escape(outcome.method)})[/]")
    console.print(table)
    for line in explanations(obligations, outcomes, paths):
        console.print(line, soft_wrap=True)
    console.print(f"CPU: {cpu:.1f}s in all processes (wall {seconds:.1f}s)")


def explanations(obligations, outcomes, paths) -> list[str]:
    """What the table cannot hold, as console markup lines: for each result other than proved its detail, its
    witness (the counterexample's values) and its trace files; one line per failed premise naming every obligation
    that rests on it; and each mutant that was not refuted."""
    lines, dependants = [], {}
    for ob in obligations:
        outcome = outcomes[ob.name]
        if outcome.premise is not None:
            dependants.setdefault(outcome.premise, []).append(ob.name)
        elif outcome.status != PROVED:
            lines.append(f"[bold]{ob.name}[/] ({outcome.status}): {escape(outcome.detail)}")
            lines += [f"    {escape(line)}" for line in render_witness(outcome.witness)]
            if outcome.status == REFUTED and not outcome.witness:
                lines.append("    [dim](no values recorded by this obligation)[/]")
            lines += [f"    trace: {escape(path)}" for path in paths.get(ob.name, [])]
        if outcome.mutant is not None and outcome.mutant.status != REFUTED:
            lines.append(f"[bold red]{ob.name}: its mutant ({escape(ob.mutant)}) was not refuted[/] "
                         f"({outcome.mutant.status}): {escape(outcome.mutant.detail)}")
    for premise, names in dependants.items():
        held = outcomes[premise].status if premise in outcomes else "not proved"
        lines.append(f"[bold]{len(names)} obligation{'s' if len(names) > 1 else ''} rest on {premise}[/], which is "
                     f"{held}: see {premise}: {', '.join(names)}")
    return lines


def print_bounds(console: Console, obligations) -> None:
    """The bounds of every obligation: how it is checked, what is unbounded, what is bounded and how, and what it
    takes on trust."""
    table = Table(title=f"kpurgatory prove --list: the bounds of {len(obligations)} obligations", show_lines=True)
    table.add_column("obligation", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("method", overflow="fold", ratio=1)
    table.add_column("unbounded", overflow="fold", ratio=2)
    table.add_column("bounded, and how", overflow="fold", ratio=2)
    table.add_column("trusted", overflow="fold", ratio=2)
    for ob in obligations:
        bound = ob.bound
        kind = ob.kind + (f"\n[dim]rests on {ob.rests_on}[/]" if ob.rests_on else "")
        table.add_row(ob.name, kind, escape(bound.method), escape(bound.unbounded), escape(bound.bounded),
                      escape(ob.trusted))
    console.print(table)


def listing(obligations) -> list[dict]:
    return [{"name": ob.name, "kind": ob.kind, "expected": ob.expect, "domain": ob.domain,
             "bound": attrs.asdict(ob.bound), "trusted": ob.trusted, "rests_on": ob.rests_on, "mutant": ob.mutant,
             "statement": ob.statement} for ob in obligations]


def report_console(width: int = 180) -> Console:
    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze the table into 80 columns
        console = Console(width=width)
    return console


@click.command("prove")
@click.option("--json", "as_json_flag", is_flag=True, help="Print the results as JSON instead of a table.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Where refutation traces are written (one JSON Lines file per trace) [default: a new temporary "
                   "folder, named in the report].")
@click.option("--only", "only", multiple=True, metavar="PATTERN",
              help="Run only obligations whose name matches this glob (repeatable), e.g. 'wheel.*'.")
@click.option("--jobs", "jobs", type=int, default=min(2, os.cpu_count() or 1), show_default=True,
              help="Obligations run in this many processes.")
@click.option("--list", "list_only", is_flag=True,
              help="Print the table of bounds (how each obligation is checked, what is unbounded, what is bounded "
                   "and how; with --json also the statements) and exit.")
@click.option("--markdown", "markdown", is_flag=True, help="Print specs/obligations.md (the statements) and exit.")
def prove_command(as_json_flag: bool, out: Path | None, only: tuple[str, ...], jobs: int, list_only: bool,
                  markdown: bool) -> None:
    """Run the z3 obligations of specs/ (timing-wheel arithmetic, purgatory invariants, interleavings, findings
    and mutants) and report, per obligation, its domain, result (proved / bound / refuted) and time.

    Exits 0 when every obligation has its expected result (findings and mutants are expected to be refuted) and
    every obligation's own mutant is refuted."""
    if markdown:
        from kpurgatory.specs.document import render

        click.echo(render(), nl=False)
        return
    # from here on, loading the spec modules included: the whole run's cost, comparable with `time kpurgatory prove`
    start, cpu_start = time.perf_counter(), cpu_seconds()
    obligations = select(only)
    if not obligations:
        raise click.BadParameter(f"no obligation matches {', '.join(only)}", param_hint="--only")
    if list_only:
        if as_json_flag:
            click.echo(json.dumps({"obligations": listing(obligations)}, indent=2))
        else:
            print_bounds(report_console(width=240), obligations)  # six columns of prose
        return
    outcomes = run_with_progress(obligations, jobs)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    paths = write_refutations(obligations, outcomes, out or Path(tempfile.mkdtemp(prefix="kpurgatory-prove-")))
    report = as_json(obligations, outcomes, paths, seconds, cpu)
    if as_json_flag:
        click.echo(json.dumps(report, indent=2))
    else:
        print_table(report_console(), obligations, outcomes, paths, seconds, cpu)
    sys.exit(0 if report["ok"] else 1)
