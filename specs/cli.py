"""``kpurgatory prove``: run every obligation, print what was established, write refutations as traces."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kpurgatory.conformance.traces.codec import write_traces
from kpurgatory.specs.core import (BOUND, PROVED, REFUTED, Obligation, Outcome, as_expected, run_named, run_one,
                                   select)

STYLE = {PROVED: "green", BOUND: "cyan", REFUTED: "yellow"}


def run_obligations(obligations: list[Obligation], jobs: int,
                    show: Callable[[list[str], int], None] = lambda running, done: None) -> dict[str, Outcome]:
    """Run the obligations (the expensive ones first when in parallel), telling ``show`` which are running and how
    many are done whenever that changes; results by name, in document order."""
    if jobs <= 1 or len(obligations) <= 1:
        results = {}
        for ob in obligations:
            show([ob.name], len(results))
            results[ob.name] = run_one(ob)
        return results
    order = sorted(obligations, key=lambda ob: -ob.cost)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    results, running = {}, {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        while order or running:  # never more submitted than workers, so what is submitted is what runs
            while order and len(running) < jobs:
                name = order.pop(0).name
                running[pool.submit(run_named, name)] = name
            show(list(running.values()), len(results))
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                results[running.pop(future)] = future.result()
    return {ob.name: results[ob.name] for ob in obligations}


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


def as_json(obligations, outcomes, paths, seconds: float) -> dict:
    rows = []
    for ob in obligations:
        outcome = outcomes[ob.name]
        rows.append({
            "name": ob.name, "kind": ob.kind, "statement": ob.statement, "domain": ob.domain,
            "method": outcome.method, "result": outcome.status, "expected": ob.expect,
            "as_expected": as_expected(ob, outcome), "seconds": round(outcome.seconds, 3),
            "detail": outcome.detail, "witness": outcome.witness,
            "mutant": None if ob.mutant is None else {
                "bug": ob.mutant, "result": outcome.mutant.status if outcome.mutant else None,
                "detail": outcome.mutant.detail if outcome.mutant else "",
                "seconds": round(outcome.mutant.seconds, 3) if outcome.mutant else 0.0},
            "lemmas": [{"name": n, "result": s, "seconds": round(t, 3)} for n, s, t in outcome.lemmas],
            "traces": paths.get(ob.name, []),
        })
    return {"obligations": rows, "seconds": round(seconds, 3),
            "ok": all(row["as_expected"] for row in rows)}


def print_table(console: Console, obligations, outcomes, paths, seconds: float) -> None:
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
    for ob in obligations:
        outcome = outcomes[ob.name]
        if outcome.status != PROVED:
            console.print(f"[bold]{ob.name}[/] ({outcome.status}): {escape(outcome.detail)}", soft_wrap=True)
            for path in paths.get(ob.name, []):
                console.print(f"    trace: {escape(path)}", soft_wrap=True)
        if outcome.mutant is not None and outcome.mutant.status != REFUTED:
            console.print(f"[bold red]{ob.name}: its mutant ({escape(ob.mutant)}) was not refuted[/] "
                          f"({outcome.mutant.status}): {escape(outcome.mutant.detail)}", soft_wrap=True)


@click.command("prove")
@click.option("--json", "as_json_flag", is_flag=True, help="Print the results as JSON instead of a table.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Where refutation traces are written (one JSON Lines file per trace) [default: a new temporary "
                   "folder, named in the report].")
@click.option("--only", "only", multiple=True, metavar="PATTERN",
              help="Run only obligations whose name matches this glob (repeatable), e.g. 'wheel.*'.")
@click.option("--jobs", "jobs", type=int, default=min(2, os.cpu_count() or 1), show_default=True,
              help="Obligations run in this many processes.")
@click.option("--list", "list_only", is_flag=True, help="List the obligations with their statements and exit.")
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
    obligations = select(only)
    if not obligations:
        raise click.BadParameter(f"no obligation matches {', '.join(only)}", param_hint="--only")
    if list_only:
        for ob in obligations:
            click.echo(f"{ob.name}  [{ob.kind}, expected {ob.expect}]\n  domain: {ob.domain}\n  {ob.statement}\n")
        return
    start = time.perf_counter()
    outcomes = run_with_progress(obligations, jobs)
    seconds = time.perf_counter() - start
    paths = write_refutations(obligations, outcomes, out or Path(tempfile.mkdtemp(prefix="kpurgatory-prove-")))
    report = as_json(obligations, outcomes, paths, seconds)
    if as_json_flag:
        click.echo(json.dumps(report, indent=2))
    else:
        console = Console()
        if not console.is_terminal:  # piped or captured: do not squeeze the table into 80 columns
            console = Console(width=180)
        print_table(console, obligations, outcomes, paths, seconds)
    sys.exit(0 if report["ok"] else 1)
