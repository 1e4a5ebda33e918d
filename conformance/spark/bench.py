"""``kpurgatory spark-bench``: how fast validate-traces is, against the same replay in one plain Python process.

A benchmark, not a test: run it by hand (``kpurgatory spark-bench`` or
``python -m kpurgatory.conformance.spark.bench``). It records a corpus of model traces (``--events`` rows in traces
of ``--steps`` commands, JSON Lines, kept under ``--corpus`` for the next run), then validates that same corpus

* ``python`` — in this process, no Spark: read the files (`corpus.read_splits`), sort by trace and seq with pyarrow,
  and stream the batches through `validate.validate_batches`, the very function Spark runs. Its replay-only time is
  the floor: what the model, the codec and the comparison cost;
* ``spark1``, ``spark2`` — ``run_validation`` end to end (read, shuffle, sort, replay, write all outputs, summary)
  on ``local[1]`` and ``local[2]``, each after an untimed warm-up on the bundled sample (JVM JIT, Python workers),

and prints events/s (input rows per second), each run's peak resident memory and the cores it really used (CPU
seconds over wall seconds; for ``python`` this process, for Spark the whole process tree: this process, the JVM and
the Python workers), the machine's 1-minute load average when the run ended (other work on the machine slows every
run: compare runs made under similar load) and the scaling from one core to two. Spark's plumbing is cheap when
``spark1`` comes close to the plain process and ``spark2`` doubles it, given two free cores.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import click
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from kpurgatory.conformance.spark import corpus, sample
from kpurgatory.conformance.spark.record import MODEL, recording
from kpurgatory.conformance.spark.session import get_session, parse_conf, progress
from kpurgatory.conformance.spark.validate import run_validation, validate_batches

RUNS = ("python", "spark1", "spark2")


class Usage:
    """Samples this process, and with ``tree`` all its descendants (the JVM and its Python workers), while active:
    the peak of their resident memory and the CPU time they used, which says how many cores the run really got."""

    def __init__(self, tree: bool, interval: float = 0.25):
        self.tree, self.interval = tree, interval
        self.peak_rss, self.cpu_start, self.cpu_end = 0, None, 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def __enter__(self) -> Usage:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    def sample(self) -> None:
        while True:
            rss, cpu = tree_usage(os.getpid(), self.tree)
            self.peak_rss = max(self.peak_rss, rss)
            self.cpu_start = cpu if self.cpu_start is None else self.cpu_start
            self.cpu_end = cpu
            if self.done.wait(self.interval):
                return

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_end - self.cpu_start


def tree_usage(root: int, descendants: bool) -> tuple[int, float]:
    """(bytes resident, CPU seconds used, reaped children included) of ``root`` and optionally its descendants."""
    children: dict[int, list[int]] = {}
    usage: dict[int, tuple[int, float]] = {}
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # fields[k] is stat field k + 3
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        usage[int(entry)] = int(fields[21]) * page, sum(map(int, fields[11:15])) / tick
    rss, cpu, stack = 0, 0.0, [root]
    while stack:
        pid = stack.pop()
        rss, cpu = rss + usage.get(pid, (0, 0))[0], cpu + usage.get(pid, (0, 0))[1]
        stack += children.get(pid, []) if descendants else []
    return rss, cpu


def make_corpus(session, folder: Path, traces: int, steps: int) -> None:
    """``traces`` model traces of ``steps`` commands as JSON Lines part files (workload ``mixed``, seeds 0..)."""
    rows, _ = recording(session, range(traces), impl=MODEL, steps=steps)
    with progress(session, "recording the corpus"):
        rows.select("text").write.mode("overwrite").text(str(folder))


def plain_python(paths: tuple[str, ...]) -> dict:
    """The replay of the corpus in this process: (events, seconds reading and sorting, seconds replaying)."""
    started = time.perf_counter()
    plan = [split for path in paths for split in corpus.line_splits(path)[0]]
    batch = pa.RecordBatch.from_pylist([dict(zip(("path", "start", "end", "first"), split)) for split in plan])
    table = pa.Table.from_batches(corpus.read_splits([batch]), corpus.INPUT_SCHEMA).sort_by(
        [("trace", "ascending"), ("seq", "ascending"), ("source", "ascending"), ("line", "ascending")])
    read = time.perf_counter() - started
    for _ in validate_batches(table.to_batches(10_000), "exact"):
        pass
    return {"events": table.num_rows, "seconds": time.perf_counter() - started, "replay_seconds":
            time.perf_counter() - started - read}


@click.command("spark-bench")
@click.option("--events", type=click.IntRange(min=1000), default=2_000_000, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True, help="Commands per trace.")
@click.option("--corpus", "folder", type=click.Path(file_okay=False, path_type=Path),
              help="Where the corpus is kept, and reused by later runs of the same size [default: a new temporary "
                   "folder, deleted afterwards].")
@click.option("--runs", default=",".join(RUNS), show_default=True, help=f"Which of {', '.join(RUNS)} to run.")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable).")
def bench_command(events, steps, folder, runs, conf):
    """Events/s of validate-traces on local[1] and local[2] against the same replay in one Python process."""
    chosen = [run.strip() for run in runs.split(",") if run.strip()]
    if not chosen or set(chosen) - set(RUNS):
        raise click.BadParameter(f"choose from {', '.join(RUNS)}", param_hint="--runs")
    traces = -(-events // (steps + 1))  # a trace is its header and its steps
    scratch = None if folder else Path(tempfile.mkdtemp(prefix="kpurgatory-bench-corpus-"))
    try:
        measure(steps, folder or scratch, chosen, conf, traces)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch)


def measure(steps: int, folder: Path, chosen: list[str], conf: tuple[str, ...], traces: int) -> None:
    """Record the corpus into ``folder`` unless it holds one, then time each chosen run on it."""
    console = Console(width=max(120, Console().width))
    settings = parse_conf(conf)
    if not (folder / "_SUCCESS").exists():
        session = get_session("local[2]", settings, "kpurgatory spark-bench")
        started = time.perf_counter()
        make_corpus(session, folder, traces, steps)
        session.stop()
        console.print(f"recorded {traces:,} traces in {time.perf_counter() - started:,.0f} s into {folder}")
    paths = corpus.discover([folder]).jsonl
    rows = {}
    for run in chosen:
        with Usage(tree=run != "python") as usage:
            if run == "python":
                measured = plain_python(paths)
            else:
                session = get_session(f"local[{run[-1]}]", settings, "kpurgatory spark-bench")
                out = Path(tempfile.mkdtemp(prefix="kpurgatory-bench-out-"))
                run_validation(session, [sample.path()], out, "exact")  # warm-up: JVM JIT, Python workers
                summary = run_validation(session, [folder], out, "exact")
                shutil.rmtree(out)
                measured = {"events": summary.input_rows, "seconds": summary.seconds}
        rows[run] = {**measured, "peak_rss": usage.peak_rss, "cores_used": usage.cpu_seconds / measured["seconds"],
                     "load": os.getloadavg()[0]}
        if run != "python":
            session.stop()
        console.print(f"{run}: {measured['events']:,} events in {measured['seconds']:,.1f} s")
    table = Table(title=f"validate-traces, {rows[chosen[0]]['events']:,} events in {traces:,} traces of {steps} steps "
                        f"({os.cpu_count()} CPUs)")
    for column in ("run", "cores", "seconds", "events/s", "vs plain Python", "peak RSS", "cores used", "load after"):
        table.add_column(column, justify="left" if column == "run" else "right")
    base = rows.get("python", {}).get("seconds")
    for run, row in rows.items():
        name = {"python": "plain Python", "spark1": "Spark local[1]", "spark2": "Spark local[2]"}[run]
        table.add_row(name, "1" if run != "spark2" else "2", f"{row['seconds']:,.1f}",
                      f"{row['events'] / row['seconds']:,.0f}", f"{base / row['seconds']:.2f}x" if base else "—",
                      f"{row['peak_rss'] / 2**30:.2f} GiB", f"{row['cores_used']:.2f}", f"{row['load']:.1f}")
        if run == "python":
            table.add_row("  replay only", "1", f"{row['replay_seconds']:,.1f}",
                          f"{row['events'] / row['replay_seconds']:,.0f}", "", "", "", "")
    console.print(table)
    if "spark1" in rows and "spark2" in rows:
        console.print(f"scaling from 1 to 2 cores: {rows['spark1']['seconds'] / rows['spark2']['seconds']:.2f}x")


if __name__ == "__main__":
    bench_command()
