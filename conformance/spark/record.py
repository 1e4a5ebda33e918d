"""``kpurgatory record``: trace corpora from seeded random workloads run against an implementation, on Spark.

Trace ``i`` is the run of workload seed ``--seed + i`` (`workload.workload`), so any trace can be regenerated from its
id alone. Each Spark task opens its own system (``--impl`` in-process, ``--adapter`` as a subprocess; ``--impl
model`` records the model's own observations, i.e. test vectors) and writes what it observed: a recording, which
``kpurgatory validate-traces`` then checks against the model. A run the system breaks off (it raises, times out, or
rejects a command the model accepts) is kept up to the last step it answered, and counted.

Output: ``OUT/corpus.parquet`` (the Parquet layout of `corpus`) and, with ``--jsonl``, ``OUT/corpus.jsonl`` (a folder
of JSON Lines part files); validate-traces reads either folder.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Iterable, Iterator

import click
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console

from kpurgatory.conformance.adapters import BUILTIN, open_system
from kpurgatory.conformance.spark import corpus
from kpurgatory.conformance.spark.session import get_session, parse_conf, progress, with_spark_options
from kpurgatory.conformance.spark.workload import WORKLOADS, workload
from kpurgatory.conformance.traces.codec import Step, Trace, model_trace, trace_lines
from kpurgatory.model import vocabulary as v

MODEL = "model"
RECORD_SCHEMA = corpus.PARQUET_SCHEMA.append(pa.field("text", pa.string()))


def record_trace(target, name: str, seed: int, steps: int) -> tuple[Trace, bool]:
    """The recording of seed ``seed`` on ``target`` (None: the model); False when the system broke the run off."""
    if target is None:
        return model_trace(*workload(name, seed, steps)), True
    header, commands = workload(name, seed, steps, implementation=target.hello.implementation)
    recorded: list[Step] = []
    try:
        target.system.init(header.profile, header.params)
        for command in commands:
            if not v.supported(command, target.hello.features):
                continue
            recorded.append(Step(len(recorded) + 1, command, target.system.step(command)))
    except Exception:  # recorded as far as the system went; counted as broken off
        return Trace(header, recorded), False
    return Trace(header, recorded), True


def record_batches(batches: Iterable[pa.RecordBatch], *, impl: str | None, adapter: str | None, timeout: float,
                   name: str, steps: int, broken) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: seeds (column ``id``) -> the rows of their traces, in trace order. A system that broke a
    run off is replaced by a fresh one for the next."""
    def open_target():
        return None if impl == MODEL else open_system(impl=impl, adapter=adapter, timeout=timeout)

    target, rows = open_target(), []
    try:
        for batch in batches:
            for seed in batch.column(0).to_pylist():
                trace, complete = record_trace(target, name, seed, steps)
                if not complete:
                    broken.add(1)
                    target.system.close()
                    target = open_target()
                for line in trace_lines(trace):
                    rows.append({**corpus.line_row(line), "text": json.dumps(line, separators=(",", ":"))})
                if len(rows) >= corpus.BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, RECORD_SCHEMA)
                    rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, RECORD_SCHEMA)
    finally:
        if target is not None:
            target.system.close()


def recording(session, seeds: range, *, impl: str | None, adapter: str | None = None, timeout: float = 10.0,
              name: str = "mixed", steps: int = 100):
    """The rows (RECORD_SCHEMA, in trace order) of the recordings of ``seeds``, and an accumulator of the runs the
    system broke off."""
    broken = session.sparkContext.accumulator(0)
    tasks = min(len(seeds), 4 * session.sparkContext.defaultParallelism)
    rows = session.range(seeds.start, seeds.stop, numPartitions=tasks).mapInArrow(
        functools.partial(record_batches, impl=impl, adapter=adapter, timeout=timeout, name=name, steps=steps,
                          broken=broken), corpus.spark_schema(RECORD_SCHEMA))
    return rows, broken


@click.command("record")
@click.option("--impl", metavar="MODULE:FACTORY|model", default=BUILTIN, show_default=True,
              help="The in-process system to record, or `model` for the model's own observations.")
@click.option("--adapter", metavar="COMMAND", help="Record a subprocess speaking specs/protocol.md instead.")
@click.option("--timeout", type=float, default=10.0, show_default=True,
              help="Seconds a subprocess adapter may take for one request.")
@click.option("--workload", "name", type=click.Choice(WORKLOADS), default="mixed", show_default=True)
@click.option("--traces", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True, help="Commands per trace.")
@click.option("--seed", type=int, default=0, show_default=True, help="Trace i runs workload seed SEED + i.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--jsonl", is_flag=True, help="Also write the corpus as JSON Lines.")
@with_spark_options
def record_command(impl, adapter, timeout, name, traces, steps, seed, out, jsonl, master, conf):
    """Record TRACES seeded random runs of an implementation as a corpus for validate-traces."""
    from pyspark import StorageLevel

    impl = None if adapter else impl
    if impl != MODEL:
        open_system(impl=impl, adapter=adapter, timeout=timeout).system.close()  # a bad target fails here, once
    session = get_session(master, parse_conf(conf), "kpurgatory record")
    started = time.perf_counter()
    rows, broken = recording(session, range(seed, seed + traces), impl=impl, adapter=adapter, timeout=timeout,
                             name=name, steps=steps)
    if jsonl:
        rows = rows.persist(StorageLevel.DISK_ONLY)
    with progress(session, "recording"):
        rows.drop("text").write.mode("overwrite").parquet(str(out / "corpus.parquet"))
        if jsonl:
            rows.select("text").write.mode("overwrite").text(str(out / "corpus.jsonl"))
            rows.unpersist()
    written = sum(pq.read_metadata(path).num_rows for path in (out / "corpus.parquet").glob("*.parquet"))
    Console(soft_wrap=True).print(f"recorded {traces:,} traces ({written:,} rows) of {name} workloads from "
                    f"{adapter or impl} in {time.perf_counter() - started:,.1f} s into {out}/corpus.parquet"
                    + (f" and {out}/corpus.jsonl" if jsonl else "")
                    + (f"; {broken.value} runs broken off by the system" if broken.value else ""))
