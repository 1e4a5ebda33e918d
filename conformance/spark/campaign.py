"""``kpurgatory campaign``: many seeds of `kpurgatory.conformance.check.sequential.run_check`, spread over Spark executors.

One check explores generated runs of one profile from one seed and shrinks the first divergence it finds; a campaign
is many of them: every (profile, seed) pair for seeds ``--first-seed`` .. ``+ --seeds``, cut into ranges, one range
per task. Each check makes its own systems from ``--impl``/``--adapter`` on the executor, so a subprocess adapter runs
where the task runs. The driver collects per check: its verdict, its coverage (the model-state items of
`kpurgatory.conformance.check.coverage`: wheel levels reached, cascades, purges, stale entries...) and, on a divergence,
the shrunk counterexample (a trace of model observations that ``kpurgatory replay FILE --impl ...`` reproduces)
with its step table. A check that crashes is reported as an error, not allowed to end the campaign.
"""

from __future__ import annotations

import functools
import shlex
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable, Iterator

import click
from rich.console import Console
from rich.table import Table

from kpurgatory.conformance.adapters import BUILTIN, open_system, system_factory
from kpurgatory.conformance.check.sequential import DEFAULT_STEPS, coverage_table, render, run_check
from kpurgatory.conformance.check.compare import LEVELS
from kpurgatory.conformance.spark.session import get_session, parse_conf, progress, with_spark_options
from kpurgatory.conformance.traces.codec import dumps
from kpurgatory.model import vocabulary as v

DEFAULT_EXAMPLES = 25  # per (profile, seed): many small checks spread better than a few long ones


def run_checks(pairs: Iterable[tuple[str, int]], *, impl: str | None, adapter: str | None, timeout: float,
               level: str, examples: int, steps: int) -> Iterator[dict]:
    """A task: one check per (profile, seed), reduced to what the driver needs (plain data, small)."""
    factory = system_factory(impl, adapter, timeout)
    for profile, seed in pairs:
        outcome = {"profile": profile, "seed": seed}
        try:
            result = run_check(factory, profile=profile, level=level, examples=examples, steps=steps, seed=seed)
        except Exception as error:  # a harness or adapter failure: one bad check, not a dead campaign
            yield {**outcome, "error": f"{type(error).__name__}: {error}"}
            continue
        outcome.update(passed=result.passed, examples=result.examples_run, steps=result.steps_run,
                       coverage=result.coverage, failure=result.failure_summary)
        if result.counterexample is not None:
            outcome.update(trace_id=result.counterexample.trace_id, counterexample=dumps(result.counterexample),
                           table=render(result.report) if result.report else result.failure_summary,
                           shrunk_length=result.shrunk_length)
        yield outcome


@click.command("campaign")
@click.option("--impl", metavar="MODULE:FACTORY", help=f"The in-process system under test [default: {BUILTIN}].")
@click.option("--adapter", metavar="COMMAND", help="A subprocess speaking specs/protocol.md instead.")
@click.option("--timeout", type=float, default=10.0, show_default=True,
              help="Seconds a subprocess adapter may take for one request.")
@click.option("--seeds", type=click.IntRange(min=1), required=True, help="Checks per profile (one per seed).")
@click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--profile", type=click.Choice(v.PROFILES), help="One profile [default: all the system declares].")
@click.option("--examples", type=click.IntRange(min=1), default=DEFAULT_EXAMPLES, show_default=True,
              help="Generated runs per check.")
@click.option("--steps", type=click.IntRange(min=1), default=DEFAULT_STEPS, show_default=True,
              help="Commands per run, at most.")
@click.option("--level", type=click.Choice(LEVELS), default="exact", show_default=True)
@click.option("--tasks", type=click.IntRange(min=1), help="Seed ranges [default: 4 per core].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("kpurgatory-out/campaign"),
              show_default=True, help="Folder for counterexample traces and their step tables.")
@with_spark_options
def campaign_command(impl, adapter, timeout, seeds, first_seed, profile, examples, steps, level, tasks, out, master,
                     conf):
    """Check an implementation against the model from SEEDS seeds per profile, spread over Spark executors.

    Exits 0 when every check passes, 1 when any found a counterexample or failed."""
    impl = None if adapter else impl or BUILTIN
    target = open_system(impl=impl, adapter=adapter, timeout=timeout)  # a bad target fails here, once
    target.system.close()
    profiles = [profile] if profile else [p for p in v.PROFILES if p in target.hello.profiles]
    session = get_session(master, parse_conf(conf), "kpurgatory campaign")
    started = time.perf_counter()
    pairs = [(name, seed) for seed in range(first_seed, first_seed + seeds) for name in profiles]
    tasks = min(len(pairs), tasks or 4 * session.sparkContext.defaultParallelism)
    run = functools.partial(run_checks, impl=impl, adapter=adapter, timeout=timeout, level=level,
                            examples=examples, steps=steps)
    with progress(session, "campaign"):
        results = session.sparkContext.parallelize(pairs, tasks).mapPartitions(run).collect()

    coverage = {name: Counter() for name in profiles}
    for result in results:
        coverage[result["profile"]].update(result.get("coverage", {}))
    console = Console()
    console.print(coverage_table([SimpleNamespace(profile=name, coverage=counts) for name, counts in coverage.items()]))
    failed = [r for r in results if not r.get("passed")]
    if failed:
        folder = out / "counterexamples"
        folder.mkdir(parents=True, exist_ok=True)
        table = Table(title=f"failed checks ({len(failed)} of {len(results)})")
        for column in ("profile", "seed", "steps", "counterexample", "failure"):
            table.add_column(column, overflow="fold")
        for result in failed:
            path = ""
            if "counterexample" in result:
                path = folder / f"{result['trace_id']}.jsonl"
                path.write_text(result["counterexample"])
                path.with_suffix(".txt").write_text(result["table"])
            size = "not shrunk" if result.get("shrunk_length") is None else str(result["shrunk_length"])
            table.add_row(result["profile"], str(result["seed"]), size, str(path),
                          result.get("error") or result["failure"].splitlines()[0])
        console.print(table)
        flags = f"--adapter {shlex.quote(adapter)}" if adapter else f"--impl {impl}"
        console.print(f"reproduce one with: kpurgatory replay FILE {flags}", markup=False, highlight=False)
    console.print(f"{len(results):,} checks ({', '.join(profiles)}; seeds {first_seed}..{first_seed + seeds - 1}), "
                  f"{sum(r.get('examples', 0) for r in results):,} runs, "
                  f"{sum(r.get('steps', 0) for r in results):,} steps, {len(failed)} failed, "
                  f"{time.perf_counter() - started:,.1f} s")
    raise SystemExit(1 if failed else 0)
