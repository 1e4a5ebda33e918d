"""``kpurgatory spark-bench``: how fast validate-traces is, against the same replay in one plain Python process.

A benchmark, not a test: run it by hand (``kpurgatory spark-bench`` or
``python -m kpurgatory.conformance.spark.bench``). It records a corpus of model traces (``--events`` rows in traces
of ``--steps`` commands, JSON Lines, kept under ``--corpus`` for the next run), then validates that same corpus in
each run of `RUNS` that ``--runs`` names:

* ``plain`` — ``kpurgatory replay``'s path in this process, no Spark: the codec reads each file, every trace is
  replayed. The floor: what the codec, the model and the comparison cost;
* ``job`` — the validator's own Python in this process, no Spark: each split read and judged as a Spark task does it
  (`validate.judge_rows`). Against ``plain`` it shows what the job costs per row beyond the replay;
* ``local1``, ``local2`` — ``run_validation`` end to end (read, replay, write all outputs, summary) on ``local[1]``
  and ``local[2]``, each after an untimed warm-up on the bundled sample (JVM JIT, Python workers), once per job
  shape of ``--shape`` (`validate.SHAPES`), so shapes are compared side by side in one run;
* ``cluster1``, ``cluster2`` — the same on a standalone cluster of one and of two one-core workers on loopback
  (`cluster.standalone`), started for the run and stopped after it: what the cluster's plumbing costs against
  ``local1``, and how the job scales with workers rather than threads.

For each it prints events/s (input rows per second) in all and per core, the ratio to ``plain``, events per CPU
second of the whole process tree (this process, the JVM and its Python workers; a cluster's master, workers and
executors too: what the run costs, whatever the machine's load left it), the peak resident memory of that tree over
the run, warm-up included, the cores it really used while timed (CPU seconds of the tree over wall seconds) and the
machine's 1-minute load average before and after (other work on the machine slows every run: compare runs of one
table). Spark's plumbing is cheap when ``local1`` comes close to ``plain`` and ``local2`` (or ``cluster2`` against
``cluster1``) doubles it, given two free cores.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import attrs
import click
from rich.console import Console
from rich.table import Table

from kpurgatory.conformance.spark import corpus, sample
from kpurgatory.conformance.spark.cluster import Host, standalone
from kpurgatory.conformance.spark.record import MODEL, recording
from kpurgatory.conformance.spark.session import get_session, parse_conf, progress, quiet_java_options
from kpurgatory.conformance.spark.validate import SHAPES, judge_rows, run_validation
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.conformance.traces.replay import replay


class Usage:
    """Samples the resident memory of this process, and with ``tree`` of all its descendants (the JVM and its Python
    workers), while active: its peak is what the run needed of the machine."""

    def __init__(self, tree: bool, interval: float = 0.25):
        self.tree, self.interval = tree, interval
        self.peak_rss = 0
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
            self.peak_rss = max(self.peak_rss, tree_usage(os.getpid(), self.tree)[0])
            if self.done.wait(self.interval):
                return


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


@attrs.frozen
class Bench:
    """What every run measures on: the corpus's files, the Spark settings of ``--conf`` and the job's shape."""
    folder: Path
    paths: tuple[str, ...]
    settings: dict[str, str]
    shape: str


@attrs.frozen
class Timed:
    events: int
    seconds: float
    cpu_seconds: float  # of this process, or with ``tree`` of all its descendants too, while timed


def timed(tree: bool, work: Callable[[], int]) -> Timed:
    """``work()`` (which returns the events it handled), timed in wall and CPU seconds."""
    cpu, started = tree_usage(os.getpid(), tree)[1], time.perf_counter()
    events = work()
    return Timed(events, time.perf_counter() - started, tree_usage(os.getpid(), tree)[1] - cpu)


def plain_replay(bench: Bench) -> Timed:
    """Each file read by the codec and each of its traces replayed, as ``kpurgatory replay`` does."""
    def work() -> int:
        events = 0
        for path in bench.paths:
            for trace in read_traces(path):
                replay(trace, level="exact")
                events += len(trace.steps) + 1
        return events

    return timed(False, work)


def job_in_process(bench: Bench) -> Timed:
    """The validator's Python on each split, as a Spark task of the ``runs`` shape runs it, in this process."""
    def work() -> int:
        events = 0
        for path in bench.paths:
            file_splits, lines = corpus.line_splits(path)
            for split in corpus.trace_cuts(path, file_splits) if len(file_splits) > 1 else file_splits:
                for _ in judge_rows(corpus.split_rows(*split), "exact", runs=True):
                    pass
            events += lines
        return events

    return timed(False, work)


#: the warm-up's split size: the bundled sample (about 340 KB) in a dozen or so tasks
WARM_UP_SPLIT_BYTES = 24 << 10


def spark_run(bench: Bench, master: str) -> Timed:
    """``run_validation`` of the corpus on ``master``, after an untimed warm-up on the bundled sample; the session is
    stopped afterwards (its JVM-level settings stay those of the process's first session)."""
    session = get_session(master, bench.settings, "kpurgatory spark-bench")
    out = Path(tempfile.mkdtemp(prefix="kpurgatory-bench-out-"))
    try:
        # JVM JIT and Python workers on every executor: the sample cut into enough splits to reach them all
        run_validation(session, [sample.path()], out, "exact", split_bytes=WARM_UP_SPLIT_BYTES, shape=bench.shape)
        return timed(True, lambda: run_validation(session, [bench.folder], out, "exact", shape=bench.shape).input_rows)
    finally:
        shutil.rmtree(out)
        session.stop()


#: what each worker of a benchmark cluster offers, and each executor takes
WORKER_MEMORY, WORKER_CORES = "2g", 1


def cluster_run(bench: Bench, workers: int) -> Timed:
    """`spark_run` on a standalone cluster of ``workers`` one-core workers on loopback, started before the run and
    stopped after it (its daemons are this process's children: the run's peak memory counts them and their
    executors)."""
    with tempfile.TemporaryDirectory(prefix="kpurgatory-bench-cluster-") as folder, \
            standalone(Path(folder), [Host()] * workers, cores=WORKER_CORES, memory=WORKER_MEMORY) as cluster:
        # a JVM sizes its JIT and GC threads to the machine's cores, not to the one its executor is offered: two
        # executors on two cores would each run the threads of two (measured: 13% more CPU per event, 1.5x not 1.8x)
        executor_options = f"{quiet_java_options()} -XX:ActiveProcessorCount={WORKER_CORES}"
        settings = {"spark.executor.memory": WORKER_MEMORY, "spark.executor.extraJavaOptions": executor_options,
                    **bench.settings}
        return spark_run(attrs.evolve(bench, settings=settings), cluster.url)


@attrs.frozen
class Run:
    label: str
    cores: int
    measure: Callable[[Bench], Timed]
    spark: bool  # runs once per job shape


#: every run spark-bench knows, in the order of its table
RUNS = {
    "plain": Run("plain replay", 1, plain_replay, spark=False),
    "job": Run("job's Python, no Spark", 1, job_in_process, spark=False),
    "local1": Run("Spark local[1]", 1, lambda bench: spark_run(bench, "local[1]"), spark=True),
    "local2": Run("Spark local[2]", 2, lambda bench: spark_run(bench, "local[2]"), spark=True),
    "cluster1": Run("cluster, 1 worker", 1, lambda bench: cluster_run(bench, 1), spark=True),
    "cluster2": Run("cluster, 2 workers", 2, lambda bench: cluster_run(bench, 2), spark=True),
}

#: (one, two, what doubles): the scalings printed under the table
SCALINGS = (("local1", "local2", "cores"), ("cluster1", "cluster2", "workers"))


def names(option: str, value: str, known) -> list[str]:
    chosen = [name.strip() for name in value.split(",") if name.strip()]
    if not chosen or set(chosen) - set(known):
        raise click.BadParameter(f"choose from {', '.join(known)}", param_hint=option)
    return chosen


@click.command("spark-bench")
@click.option("--events", type=click.IntRange(min=1000), default=2_000_000, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True, help="Commands per trace.")
@click.option("--corpus", "folder", type=click.Path(file_okay=False, path_type=Path),
              help="Where the corpus is kept, and reused by later runs of the same size [default: a new temporary "
                   "folder, deleted afterwards].")
@click.option("--runs", default=",".join(RUNS), show_default=True, help=f"Which of {', '.join(RUNS)} to run.")
@click.option("--shape", "shapes", default="runs", show_default=True,
              help=f"The job shapes each Spark run is timed with: any of {', '.join(SHAPES)}.")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable).")
def bench_command(events, steps, folder, runs, shapes, conf):
    """Events/s of validate-traces on local[1], local[2] and standalone clusters of one and two workers against the
    same replay in one Python process."""
    chosen, shapes = names("--runs", runs, RUNS), names("--shape", shapes, SHAPES)
    traces = -(-events // (steps + 1))  # a trace is its header and its steps
    scratch = None if folder else Path(tempfile.mkdtemp(prefix="kpurgatory-bench-corpus-"))
    try:
        measure(steps, folder or scratch, chosen, shapes, parse_conf(conf), traces)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch)


def measure(steps: int, folder: Path, chosen: list[str], shapes: list[str], settings: dict[str, str],
            traces: int) -> None:
    """Record the corpus into ``folder`` unless it holds one, then time each chosen run on it."""
    console = Console(width=max(150, Console().width))
    if not (folder / "_SUCCESS").exists():
        session = get_session("local[2]", settings, "kpurgatory spark-bench")
        started = time.perf_counter()
        make_corpus(session, folder, traces, steps)
        session.stop()
        console.print(f"recorded {traces:,} traces in {time.perf_counter() - started:,.0f} s into {folder}")
    paths = corpus.discover([folder]).jsonl
    rows = []
    for name in chosen:
        run = RUNS[name]
        for shape in shapes if run.spark else ["—"]:
            load = os.getloadavg()[0]
            with Usage(tree=run.spark) as usage:
                result = run.measure(Bench(folder, paths, settings, shape))
            rows.append((run, shape, result, usage.peak_rss, load, os.getloadavg()[0]))
            console.print(f"{run.label} ({shape}): {result.events:,} events in {result.seconds:,.1f} s")
    console.print(result_table(rows, traces, steps))
    by_label = {(run.label, shape): result for run, shape, result, *_ in rows}
    for shape in shapes:
        for single, double, what in SCALINGS:
            one, two = by_label.get((RUNS[single].label, shape)), by_label.get((RUNS[double].label, shape))
            if one and two:
                console.print(f"scaling from 1 to 2 {what} ({shape}): {one.seconds / two.seconds:.2f}x")


def result_table(rows: list[tuple], traces: int, steps: int) -> Table:
    """One row per run; ``per CPU s`` (events per CPU second of the process tree) is what a run costs whatever the
    machine's load left it, so it compares runs even on a busy machine."""
    table = Table(title=f"validate-traces, {rows[0][2].events:,} events in {traces:,} traces of {steps} steps "
                        f"({os.cpu_count()} CPUs)")
    for column in ("run", "shape", "cores", "seconds", "events/s", "per core", "vs plain", "per CPU s", "peak RSS",
                   "cores used", "load before/after"):
        table.add_column(column, justify="left" if column in ("run", "shape") else "right", no_wrap=column == "run")
    plain = next((result for run, _, result, *_ in rows if run is RUNS["plain"]), None)
    for run, shape, result, peak_rss, before, after in rows:
        rate = result.events / result.seconds
        table.add_row(run.label, shape, str(run.cores), f"{result.seconds:,.1f}", f"{rate:,.0f}",
                      f"{rate / run.cores:,.0f}", f"{plain.seconds / result.seconds:.2f}x" if plain else "—",
                      f"{result.events / result.cpu_seconds:,.0f}", f"{peak_rss / 2**30:.2f} GiB",
                      f"{result.cpu_seconds / result.seconds:.2f}", f"{before:.1f} / {after:.1f}")
    return table

if __name__ == "__main__":
    bench_command()
