"""``kpurgatory check-bench``: how fast a check reaches its verdict through each way into a system.

The same check (one seed, both profiles of what each system implements, at the level it is judged at) runs side by
side in one process, through every way in: the built-in implementation in process, the same behind the Python stdio
adapter, a Kafka release's own classes behind the JVM adapter (``--kafka``), and the stdio servers of the language
drivers that serve a system (the Go driver's, behind go-zero's timing wheel; node's example adapter). Each row is
the steps explored per CPU-second of the whole process tree, the CPU that shrinking failures took included: this process, the adapter and
everything it started, compilers and JVM included, measured with ``getrusage`` of this process and its reaped
children. CPU time, not wall time, so a shared, noisy machine changes the figures little; they are measured in one
run so that they compare.
"""

from __future__ import annotations

import functools
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import attrs
import click
from rich.table import Table

from kpurgatory.conformance.adapters import BUILTIN, BUILTIN_PYTHON, load_factory
from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.check.concurrent import run_concurrent_check
from kpurgatory.conformance.check.scheduler import Scheduling
from kpurgatory.conformance.check.sequential import introduce, run_check
from kpurgatory.conformance.terminal import command_console, markup

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@attrs.frozen
class Way:
    """One way into a system: its name, what makes it, and the level it is judged at."""

    name: str
    factory: Callable[[], SystemUnderTest]
    level: str = "exact"


@attrs.frozen
class Measured:
    way: str
    profile: str
    steps: int
    cpu_s: float
    wall_s: float
    verdict: str

    @property
    def rate(self) -> float:
        return self.steps / self.cpu_s if self.cpu_s else 0.0


def cpu_seconds() -> float:
    """CPU time of this process and of every child it has reaped (the adapters, when closed)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(way: Way, examples: int, seed: int) -> list[Measured]:
    """The check of every profile ``way`` implements, each timed on its own."""
    rows = []
    for profile in introduce(way.factory).profiles:
        before = cpu_seconds()
        result = run_check(way.factory, profile=profile, level=way.level, examples=examples, seed=seed)
        after = cpu_seconds()
        verdict = "pass" if result.passed else f"{len(result.failures)} failures"
        if result.findings:
            verdict += f", {len(result.findings)} findings"
        rows.append(Measured(way.name, profile, result.steps_run, after - before,
                             result.elapsed_s, verdict))
    return rows


def measure_concurrent(name: str, factory: Callable[[], SystemUnderTest], threads: int, runs: int, seed: int,
                       scheduling: Scheduling | None) -> Measured:
    """The concurrent check of ``factory``'s system (racing threads, or under ``scheduling``): calls, not steps."""
    before = cpu_seconds()
    result = run_concurrent_check(factory, threads=threads, runs=runs, steps=CONCURRENT_ROUNDS, seed=seed,
                                  scheduling=scheduling)
    verdict = "pass" if result.passed else f"{len(result.failures)} failures"
    return Measured(name, "purgatory", result.calls, cpu_seconds() - before, result.elapsed_s, verdict)


#: rounds per run of the concurrent rows
CONCURRENT_ROUNDS = 30


def system_of(way: str) -> str:
    """The system a concurrent way runs: its name's last parenthesis ("racing threads (python)": python)."""
    return way.rsplit("(", 1)[-1]


def concurrent_ways(kafka: str | None) -> list[tuple[str, Callable[[], SystemUnderTest], Scheduling | None]]:
    """The concurrent check: threads racing and under the scheduler, on either implementation in process and on a
    Kafka release's classes through its adapter."""
    compiled, python = load_factory(BUILTIN), load_factory(BUILTIN_PYTHON)
    ways = [("racing threads (python)", python, None), ("racing threads (compiled)", compiled, None),
            *((f"scheduled: {scheduling} (python)", python, scheduling)
              for scheduling in (Scheduling("pct"), Scheduling("random"), Scheduling("random", granularity="calls"))),
            (f"scheduled: {Scheduling('random')} (compiled)", compiled, Scheduling("random"))]
    if kafka is not None:
        from kpurgatory.conformance.adapters.kafka import adapter_command

        adapter = functools.partial(SubprocessSystem, adapter_command(kafka))
        ways += [(f"racing threads (Kafka {kafka})", adapter, None),
                 (f"scheduled: {Scheduling('random')} (Kafka {kafka})", adapter, Scheduling("random"))]
    return ways


def ways(kafka: str | None, build_dir: Path) -> list[Way]:
    """Every way in this machine has the tools for; a driver whose toolchain is missing is left out."""
    python_adapter = shlex.join([sys.executable, "-m", "kpurgatory.conformance.adapters.stdio",
                                 "kpurgatory.conformance.adapters.builtin:factory"])
    found = [Way("in process (kpurgatory.impl)", load_factory(BUILTIN)),
             Way("Python stdio adapter", functools.partial(SubprocessSystem, python_adapter))]
    if kafka is not None:
        from kpurgatory.conformance.adapters.kafka import adapter_command

        found.append(Way(f"Kafka {kafka} (JVM adapter)", functools.partial(SubprocessSystem, adapter_command(kafka))))
    if shutil.which("go") and (EXAMPLES / "go-zero-timingwheel").is_dir():  # a checkout's, not an installed wheel's
        binary = build_dir / "go-zero-adapter"
        subprocess.run(["go", "build", "-o", str(binary), "./cmd/adapter"], cwd=EXAMPLES / "go-zero-timingwheel",
                       check=True, timeout=600)
        found.append(Way("Go driver's stdio server (go-zero)", functools.partial(SubprocessSystem, str(binary)),
                         "contract"))
    if shutil.which("node") and (EXAMPLES / "node-timer").is_dir():
        node_adapter = shlex.join(["node", str(EXAMPLES / "node-timer" / "adapter.js")])
        found.append(Way("node stdio adapter (node-timer)", functools.partial(SubprocessSystem, node_adapter)))
    return found


@click.command("check-bench")
@click.option("--kafka", metavar="VERSION", help="Also through this Kafka release's classes (resolved as check "
                                                 "--kafka does).")
@click.option("--examples", type=click.IntRange(1), default=200, show_default=True, help="Runs per profile.")
@click.option("--seed", type=click.IntRange(0), default=1, show_default=True)
@click.option("--threads", type=click.IntRange(2, 64), help="Measure the concurrent check instead (--examples runs of "
                                                           "this many threads): calls per CPU-second of threads "
                                                           "racing and under the controlled scheduler.")
def check_bench_command(kafka, examples, seed, threads):
    """Steps per CPU-second of `kpurgatory check` through each way into a system, side by side in one run.

    CPU time of the whole process tree (this process and each adapter with all it starts, measured when the
    adapter is reaped), per profile: in process, the Python stdio adapter, a Kafka release's JVM adapter with
    --kafka, and the stdio servers of the Go driver and node's example adapter where go and node are installed and
    their examples are at hand (a checkout). With --threads, the concurrent check instead: threads racing and under
    the controlled scheduler's strategies, in process on either implementation and through --kafka's adapter."""
    console = command_console()
    rows: list[Measured] = []
    if threads is not None:
        for name, factory, scheduling in concurrent_ways(kafka):
            console.print(f"checking concurrently: {markup(name)} …")
            rows.append(measure_concurrent(name, factory, threads, examples, seed, scheduling))
        table = Table(title=f"kpurgatory check --threads {threads}, {examples} runs of {CONCURRENT_ROUNDS} rounds, "
                            f"seed {seed}: calls per CPU-second")
        for column in ("threads", "verdict", "calls", "CPU s", "wall s", "calls / CPU s", "vs racing, same system"):
            table.add_column(column, justify="left" if column in ("threads", "verdict") else "right")
        racing = {system_of(row.way): row.rate for row in rows if row.way.startswith("racing")}
        for row in rows:
            table.add_row(markup(row.way), markup(row.verdict), f"{row.steps:,}", f"{row.cpu_s:.2f}",
                          f"{row.wall_s:.2f}", f"{row.rate:,.0f}", f"{row.rate / racing[system_of(row.way)]:.2f}")
        console.print(table)
        return
    with tempfile.TemporaryDirectory(prefix="kpurgatory-check-bench-") as build:
        for way in ways(kafka, Path(build)):
            console.print(f"checking through {markup(way.name)} …")
            rows += measure(way, examples, seed)
    table = Table(title=f"kpurgatory check, {examples} runs per profile, seed {seed}: steps per CPU-second "
                        "(process tree)")
    for column in ("way in", "profile", "verdict", "steps", "CPU s", "wall s", "steps / CPU s", "vs in process"):
        table.add_column(column, justify="left" if column in ("way in", "profile", "verdict") else "right")
    reference = {row.profile: row.rate for row in rows if row is rows[0] or row.way == rows[0].way}
    for row in rows:
        ratio = row.rate / reference[row.profile] if reference.get(row.profile) else 0.0
        table.add_row(markup(row.way), row.profile, markup(row.verdict), str(row.steps), f"{row.cpu_s:.2f}",
                      f"{row.wall_s:.2f}", f"{row.rate:,.0f}", f"{ratio:.2f}")
    console.print(table)
