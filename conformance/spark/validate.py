"""``kpurgatory validate-traces``: replay every trace of a corpus through the model, on Spark.

The job (shape ``runs``, `by_runs`): each task reads its part of the corpus (`corpus.Loaded.map_rows`: a JSON Lines
split cut where a trace ends, or a partition of Parquet rows) and judges it there with `judge_rows`, a run of
consecutive rows of one trace at a time, put in order by seq — the same codec, model, comparison and contract monitor
as ``kpurgatory replay`` (`kpurgatory.conformance.traces.replay.replay`), so a verdict here and there cannot
disagree. Each line is decoded once and no input row crosses into the JVM: a task costs what the plain replay of its
traces costs, and memory is bounded by the largest trace. A file written by ``kpurgatory record`` holds whole traces
one after another, so each trace is one run. The job checks that cheaply (one small ``run`` row per run): a trace
found in more than one run — cut by a split, interleaved with another, spread over files — is judged again whole, by
the shuffle shape (``repartition(trace).sortWithinPartitions(trace, seq, ...)``, then `validate_batches`) over just
the files that hold it, and only that verdict is kept. Either way a trace's rows are judged together and in the
order the shuffle gives them. The other shapes (`SHAPES`) are kept to measure against: ``kpurgatory spark-bench
--shape runs,shuffle,group``.

A trace is judged whole or not at all. If any of its lines is bad (not JSON, unknown command, missing field, a
sequence gap or repeat, a second header, no header, an unsupported version, a command the model rejects), every row
of the trace goes to the quarantine: the bad row with its own reason, the others with ``trace_quarantined`` and the
first bad row's position. A half-checked trace would give a verdict about a different run. A line without a usable
trace id (not UTF-8, not JSON, too long or too deep) counts as a bad line of the trace before it in its file, which
may have lost its last steps there (`corpus.split_rows`); one before any trace, and a blank line, is quarantined
alone. A file that ends in a line cut short, or is gzip-compressed, is quarantined whole, as replay rejects it.
Every reason is the codec's own message, word for word what ``kpurgatory replay`` says about the same line. A crash
of kpurgatory's own on some trace quarantines that trace (``validator_crashed``) and the job goes on. So every input
row ends in exactly one place: input rows = rows of checked traces + quarantined rows, which the job asserts against a
count taken outside it.

A concurrent history (a header with ``threads``, such as a window of a live broker recording, `conformance.live`)
cannot be replayed: it is judged by the concurrent properties instead (`conformance.live.judge.history_verdict`), a
failing one written shrunk to ``failing/`` like any other.

A trace whose failure is one of Kafka's known misbehaviours (a recording of Kafka's own classes where its arithmetic
wraps, a finding's counterexample written by ``kpurgatory check``) gets the verdict ``finding`` and the finding's name,
as replay names it (`findings.FINDINGS`); like check, the job passes with findings unless ``--fail-on-findings``.

Outputs in ``--out``: ``verdicts.parquet`` (one row per checked trace, with the name of its Kafka finding if it is
one), ``quarantine.parquet`` (one row per rejected input row, with file and line), ``failing/<trace>.jsonl`` (each
failing trace as a standalone file that ``kpurgatory replay`` reproduces) and ``summary.json`` (also printed as
tables). Strings go into them as `codec.utf8_safe` spells them. They are written to a hidden folder in ``--out`` and
moved into place once all are complete: an interrupted or failed run leaves the previous outputs, or none, never a
part.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import attrs
import click
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from kpurgatory.conformance.check.compare import LEVELS, Difference
from kpurgatory.conformance.cli import Unwritable
from kpurgatory.conformance.terminal import counted
from kpurgatory.conformance.traces.replay import format_command, format_observation, replay
from kpurgatory.conformance.spark import corpus
from kpurgatory.conformance.spark.session import get_session, parse_conf, progress, with_spark_options
from kpurgatory.conformance.traces import codec
from kpurgatory.conformance.traces.codec import Header, Trace, dumps, loads, parse_line
from kpurgatory.conformance.traces.view import page_path, write_view
from kpurgatory.model import CommandError
from kpurgatory.model.contract import Violation

PASS, FAIL, FINDING = "pass", "fail", "finding"

#: one schema for both kinds of result row, since a mapInArrow has one output schema
RESULT_SCHEMA = pa.schema([
    ("kind", pa.string()),  # "verdict" or "quarantine"
    ("trace", pa.string()), ("source", pa.string()),
    ("line", pa.int64()), ("seq", pa.int64()),  # verdict: the first failing step's; quarantine: the row's
    ("rows", pa.int64()), ("traces", pa.int64()),  # traces: 1 on a verdict and on a quarantined trace's first row
    ("verdict", pa.string()), ("finding", pa.string()), ("profile", pa.string()), ("implementation", pa.string()),
    ("steps", pa.int64()), ("steps_checked", pa.int64()),
    ("command", pa.string()), ("expected", pa.string()), ("observed", pa.string()), ("difference", pa.string()),
    ("properties", pa.list_(pa.string())), ("failures", pa.string()), ("trace_jsonl", pa.string()),
    ("reason_kind", pa.string()), ("reason", pa.string()), ("text", pa.string()),
])
VERDICT_COLUMNS = ("trace", "verdict", "finding", "profile", "implementation", "source", "rows", "steps",
                   "steps_checked", "seq as failing_seq", "line as failing_line", "command", "expected", "observed",
                   "difference", "properties", "failures")
QUARANTINE_COLUMNS = ("source", "line", "trace", "seq", "reason_kind", "reason", "text")


# ---------------------------------------------------------------------------------------------------------------
# One trace
# ---------------------------------------------------------------------------------------------------------------


class Rejected(ValueError):
    """A row that cannot be part of a checked trace; ``kind`` is the quarantine's reason category."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


def reason_kind(message: str) -> str:
    """The reason category of a codec error message (`codec.decode_line` says what is wrong with a line,
    `codec.parse_line` names the field at fault)."""
    for prefix, kind in ((codec.TRUNCATED, "truncated"), (codec.EMPTY_INPUT, "empty_input"),
                         (codec.BLANK_LINE, "blank_line"), ("not JSON", "not_json"), ("not UTF-8", "not_utf8"),
                         ("line longer than", "too_long"), ("arrays and objects nested deeper", "too_deep"),
                         (codec.GZIPPED, "gzip")):
        if message.startswith(prefix):
            return kind
    if message.startswith("cmd must be one of"):
        return "unknown_command"
    if " must contain [" in message:
        return "missing_field"
    if message.startswith("header.version"):
        return "unsupported_version"
    return "bad_field"


def decode(row: dict, truncated: dict[str, tuple[int, str]]) -> Header | tuple[str, object]:
    """An input row -> what `parse_line` makes of it; Rejected says why not. ``truncated``: `corpus.Loaded`'s files
    that replay rejects whole (a line cut short at the end, gzip), with the line at fault and why."""
    try:
        if cut := truncated.get(row["source"]):
            line, reason = cut
            if row["line"] == line:
                raise ValueError(reason)
            raise ValueError(f"{codec.TRUNCATED} at line {line}: the rest of the file may be lost"
                             if reason.startswith(codec.TRUNCATED) else f"{reason} (line {line}): rejected whole")
        if row["problem"]:
            raise ValueError(row["problem"])
        if "document" in row:  # decoded when it was read (`corpus.line_fields`)
            return parse_line(row["document"])
        document = codec.decode_text(row["text"]) if row["text"] is not None else corpus.row_document(row)
        return parse_line(document)
    except ValueError as error:
        raise Rejected(reason_kind(str(error)), str(error)) from None


def raw_text(row: dict) -> str:
    """The row as it was read: the JSON line, or the Parquet row's fields as JSON."""
    if row["text"] is not None or row["problem"]:
        return row["text"]
    return json.dumps({name: row[name] for name in ("trace", "seq", *corpus.FIELDS) if row[name] is not None})


def quarantine(row: dict, kind: str, reason: str, traces: int = 0) -> dict:
    return {"kind": "quarantine", "trace": row["trace"], "source": row["source"], "line": row["line"],
            "seq": row["seq"], "rows": 1, "traces": traces, "reason_kind": kind, "reason": reason,
            "text": raw_text(row)}


def quarantine_trace(rows: list[dict], bad: dict[int, Rejected]) -> list[dict]:
    """Every row of a trace with at least one bad row (``bad``: row index -> why)."""
    first = min(bad)
    where = f"{rows[first]['source']}:{rows[first]['line']}: {bad[first]}"
    return [quarantine(row, bad[index].kind, str(bad[index]), int(index == 0)) if index in bad else
            quarantine(row, "trace_quarantined", f"trace {row['trace']!r} has a bad line: {where}", int(index == 0))
            for index, row in enumerate(rows)]


def structure(rows: list[dict], parsed: list) -> dict[int, Rejected]:
    """The trace's shape: one header, then seq 1, 2, 3... without gaps or repeats (rows are sorted by seq)."""
    bad: dict[int, Rejected] = {}
    headers = [index for index, item in enumerate(parsed) if isinstance(item, Header)]
    if not headers:
        return {index: Rejected("no_header", f"trace {rows[0]['trace']!r} has no header line (seq 0)")
                for index in range(len(rows))}
    for index in headers[1:]:
        bad[index] = Rejected("second_header", f"trace {rows[0]['trace']!r} has a second header")
    previous = 0
    for index, item in enumerate(parsed):
        if isinstance(item, Header):
            continue
        seq = item[1].seq
        if seq == previous:
            bad[index] = Rejected("seq_duplicate", f"seq {seq} appears again")
        elif seq != previous + 1:
            bad[index] = Rejected("seq_gap", f"seq {seq} follows seq {previous}: "
                                             f"{previous + 1}{'' if seq == previous + 2 else f'..{seq - 1}'} missing")
        previous = seq
    return bad


def verdict(rows: list[dict], trace: Trace, level: str) -> list[dict]:
    """Replay a well-formed trace; a command the model rejects quarantines it like any other bad line."""
    if trace.header.threads is not None:  # a concurrent history (a live recording's window): judged by properties
        from kpurgatory.conformance.live.judge import history_verdict

        return history_verdict(rows, trace)
    step_rows = rows[1:]
    try:
        report = replay(trace, level=level)
    except CommandError as error:  # the model refuses the header's parameters
        return quarantine_trace(rows, {0: Rejected("malformed_command", f"header: {error}")})
    except Exception as error:  # a bug of kpurgatory's own: report it, keep the job alive
        return quarantine_trace(rows, {0: Rejected("replay_crashed", f"{type(error).__name__}: {error}")})
    if report.error is not None and not report.broken:
        return quarantine_trace(rows, {len(report.outcomes) + 1: Rejected("malformed_command", report.error)})
    result = {"kind": "verdict", "trace": trace.trace_id, "source": rows[0]["source"], "rows": len(rows), "traces": 1,
              "verdict": PASS if report.ok else FINDING if report.finding is not None else FAIL,
              "finding": None if report.finding is None else report.finding.name, "profile": trace.header.profile,
              "implementation": trace.header.implementation, "steps": len(trace.steps),
              "steps_checked": len(report.outcomes)}
    failing = report.first_failure
    if failing is not None:
        differences = [f.what for f in failing.failures if isinstance(f.what, Difference)]
        result.update(
            seq=failing.seq, line=step_rows[len(report.outcomes) - 1]["line"], command=format_command(failing.command),
            expected=format_observation(failing.model),
            observed=format_observation(failing.observed if failing.observed is not None else failing.recorded),
            difference=str(differences[0]) if differences else None,
            properties=sorted({f.what.prop for f in failing.failures if isinstance(f.what, Violation)}),
            failures="; ".join(map(str, failing.failures)), trace_jsonl=dumps(trace))
    elif report.broken:  # a counterexample recording that its system failed to answer at the next step
        step = trace.steps[len(report.outcomes)]
        result.update(seq=step.seq, line=step_rows[len(report.outcomes)]["line"], command=format_command(step.command),
                      failures=report.error, trace_jsonl=dumps(trace))
    return [result]


def check_trace(rows: list[dict], level: str, truncated: dict[str, tuple[int, str]]) -> list[dict]:
    """All rows of one trace id, sorted by seq -> its verdict row, or its quarantine rows."""
    parsed, bad = [], {}
    for index, row in enumerate(rows):
        try:
            item = decode(row, truncated)
            seq = 0 if isinstance(item, Header) else item[1].seq
            if type(seq) is not int or seq != row["seq"]:  # rows were sorted by the integer seq the reader saw
                raise Rejected("bad_field", f"seq must be an integer, got {seq!r}")
            parsed.append(item)
        except Rejected as rejection:
            parsed.append(None)
            bad[index] = rejection
    if bad:
        return quarantine_trace(rows, bad)
    bad = structure(rows, parsed)
    if bad:
        return quarantine_trace(rows, bad)
    return verdict(rows, Trace(parsed[0], [step for _, step in parsed[1:]]), level)


def lone_row(row: dict, truncated: dict[str, tuple[int, str]]) -> dict:
    """A row without a string trace id, quarantined alone: decoding it says why (a valid line has one)."""
    try:
        decode(row, truncated)
        rejection = Rejected("bad_field", "trace: not readable as a string id")
    except Rejected as error:
        rejection = error
    return quarantine(row, rejection.kind, str(rejection))


def judged(rows: list[dict], level: str, truncated: dict[str, tuple[int, str]]) -> list[dict]:
    """`check_trace`, or `lone_row` for a row without a trace id. A crash of kpurgatory's own on some row
    quarantines that row's trace, naming the crash, and the job goes on with the rest of the corpus."""
    try:
        return check_trace(rows, level, truncated) if rows[0]["trace"] is not None else [lone_row(rows[0], truncated)]
    except Exception as error:
        return quarantine_trace(rows, {0: Rejected("validator_crashed", f"{type(error).__name__}: {error}")})


def spark_order(row: dict) -> tuple:
    """The order the shuffle gives a trace's rows: by seq (nulls first), then source and line."""
    return row["seq"] is not None, row["seq"] or 0, row["source"], row["line"]


def arrow_row(row: dict) -> dict:
    """A result row with its strings `codec.utf8_safe`, which Arrow requires."""
    return {name: codec.utf8_safe(value) if type(value) is str else
            [codec.utf8_safe(item) for item in value] if type(value) is list else value for name, value in row.items()}


def result_batch(results: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(list(map(arrow_row, results)), RESULT_SCHEMA)


def judge_rows(rows: Iterable[dict], level: str, truncated: dict[str, tuple[int, str]] | None = None, *,
               runs: bool = False) -> Iterator[pa.RecordBatch]:
    """Input rows -> result rows. Rows without a trace id are judged alone; the others are judged a group at a time,
    a group being consecutive rows of one trace. With ``runs`` the rows come in file order: each group is put in
    `spark_order` first, and a ``run`` row per group and source (trace, source, rows) lets the job find the traces
    whose rows were not all in one group. ``truncated`` as in `decode`."""
    truncated = truncated or {}
    group: list[dict] = []
    results: list[dict] = []

    def judge_group() -> None:
        if runs:
            group.sort(key=spark_order)
            for source in dict.fromkeys(row["source"] for row in group):
                results.append({"kind": "run", "trace": group[0]["trace"], "source": source, "rows": len(group)})
        results.extend(judged(group, level, truncated))

    for row in rows:
        if row["trace"] is None:
            results += judged([row], level, truncated)
            continue
        if group and row["trace"] != group[0]["trace"]:
            judge_group()
            group = []
            if len(results) >= corpus.BATCH_ROWS:
                yield result_batch(results)
                results = []
        group.append(row)
    if group:
        judge_group()
    if results:
        yield result_batch(results)


def validate_batches(batches: Iterable[pa.RecordBatch], level: str,
                     truncated: dict[str, tuple[int, str]] | None = None) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: input rows sorted by trace then seq -> result rows (`judge_rows`); a trace's rows may
    straddle Arrow batches."""
    return judge_rows((row for batch in batches for row in batch.to_pylist()), level, truncated)


# ---------------------------------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Summary:
    level: str
    files: int
    input_rows: int
    checked_rows: int
    quarantined_rows: int
    verdicts: dict[str, int]  # verdict -> traces
    findings: dict[str, int]  # Kafka finding -> traces
    properties: dict[str, int]  # contract property -> failing traces that break it (or differ only exactly)
    quarantine: dict[str, int]  # reason kind -> rows
    quarantined_traces: int
    steps_checked: int
    seconds: float
    failing_files: int

    @property
    def events_per_second(self) -> float:
        return self.input_rows / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict:
        return {**attrs.asdict(self), "events_per_second": round(self.events_per_second, 1)}


def failing_name(trace_id: str) -> str:
    """A file name for a trace id: the id itself when it is safe, else a cleaned id plus a hash (ids are unique,
    cleaned ids need not be)."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", trace_id)[:100]
    if clean != trace_id or clean.startswith("."):
        clean += "-" + hashlib.sha1(trace_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return clean + ".jsonl"


def write_failing(failing, folder: Path, level: str) -> int:
    """Each failing trace as its own file with its page (`kpurgatory view`) next to it, streamed to the driver a
    partition at a time."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    written = 0
    for row in failing.select("trace", "trace_jsonl").toLocalIterator():
        path = folder / failing_name(row.trace)
        path.write_text(row.trace_jsonl)
        write_view(page_path(path), loads(row.trace_jsonl, str(path)), level=level)
        written += 1
    return written


SORTED = ("trace", "seq", "source", "line")


def unpersist_later(cleanup: contextlib.ExitStack, frame) -> None:
    """Unpersist ``frame`` on the way out, even an interrupted one, when the JVM may be gone: that is no news, and
    must not hide why the run stopped."""
    def unpersist() -> None:
        with contextlib.suppress(Exception):
            frame.unpersist()

    cleanup.callback(unpersist)


def by_shuffle(session, loaded: corpus.Loaded, level: str, cleanup: contextlib.ExitStack):
    """Every row to the partition of its trace, sorted there, streamed through `validate_batches`."""
    return shuffled(loaded.frame, level, loaded.truncated)


def shuffled(rows, level: str, truncated: dict[str, tuple[int, str]]):
    validator = functools.partial(validate_batches, level=level, truncated=truncated)
    return (rows.repartition("trace").sortWithinPartitions(*SORTED)
            .mapInArrow(validator, corpus.spark_schema(RESULT_SCHEMA)))


def by_group(session, loaded: corpus.Loaded, level: str, cleanup: contextlib.ExitStack):
    """``groupBy(trace).applyInArrow``: each trace a table of its own (rows without a trace id form one group,
    whose rows `judge_rows` judges one by one)."""
    truncated = loaded.truncated

    def judge_table(table: pa.Table) -> pa.Table:  # its type hints tell Spark the kind of function
        rows = sorted(table.to_pylist(), key=spark_order)
        return pa.Table.from_batches(list(judge_rows(rows, level, truncated)), RESULT_SCHEMA)

    return loaded.frame.groupBy("trace").applyInArrow(judge_table, corpus.spark_schema(RESULT_SCHEMA))


def by_runs(session, loaded: corpus.Loaded, level: str, cleanup: contextlib.ExitStack):
    """Each trace judged where it was read (`corpus.Loaded.map_rows`, `judge_rows` with runs): no shuffle, and each
    line decoded once. A trace whose rows were not all in one run (cut by a split, interleaved with another, spread
    over files) is judged again with `shuffled`, from the files that hold it, and only that judgement is kept."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    validator = functools.partial(judge_rows, level=level, truncated=loaded.truncated, runs=True)
    first = loaded.map_rows(validator, RESULT_SCHEMA).persist(StorageLevel.DISK_ONLY)
    unpersist_later(cleanup, first)
    runs = first.where("kind = 'run'").groupBy("trace").agg(F.count("*").alias("runs"),
                                                            F.collect_set("source").alias("sources"))
    spread = runs.where("runs > 1")
    sources = [row.source for row in spread.select(F.explode("sources").alias("source")).distinct().collect()]
    judged_here = first.where("kind != 'run'")
    if not sources:
        return judged_here
    spread = spread.select("trace").persist(StorageLevel.DISK_ONLY)
    unpersist_later(cleanup, spread)
    again = corpus.load(session, corpus.Inputs.of(sources))
    return judged_here.join(spread, "trace", "left_anti").unionByName(
        shuffled(again.frame.join(spread, "trace", "left_semi"), level, loaded.truncated))


#: how the job brings each trace's rows together: `by_runs` is the fastest (see ``kpurgatory spark-bench --shape``)
SHAPES = {"runs": by_runs, "shuffle": by_shuffle, "group": by_group}


#: what a run writes into ``--out``, all or none
OUTPUTS = ("verdicts.parquet", "quarantine.parquet", "failing", "summary.json")


def run_validation(session, paths, out: Path, level: str = "exact", split_bytes: int | None = None,
                   shape: str = "runs") -> Summary:
    """Validate the corpus at ``paths`` into ``out``; raises AssertionError if the outputs do not reconcile, and
    `Unwritable` if ``out`` cannot be written. The outputs are made in a hidden folder there (`OUTPUTS`) and moved
    into place only when all are complete; on the way out of a run that did not finish it is removed, its jobs
    cancelled first so that none writes into it again."""
    staging = staging_folder(out)
    try:
        summary = write_outputs(session, paths, staging, level, split_bytes, shape)
        for name in OUTPUTS:
            target = out / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            (staging / name).rename(target)
        staging.rmdir()
    except BaseException as error:
        with contextlib.suppress(Exception):  # the JVM may be gone already
            session.sparkContext.cancelAllJobs()
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError) and str(error.filename or "").startswith(str(out)):  # not an input's
            raise Unwritable(out, error.strerror or str(error)) from None
        if (reason := io_failure(error)) is not None:
            raise Unwritable(out, reason) from None
        raise
    return summary


def staging_folder(out: Path) -> Path:
    """A fresh hidden folder in ``out`` for a run's outputs; `Unwritable` if it cannot be made."""
    staging = out / ".validate-traces.incomplete"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    except OSError as error:
        raise Unwritable(out, error.strerror or str(error)) from None
    return staging


def io_failure(error: BaseException) -> str | None:
    """What the JVM said when a Spark job failed for a java.io.IOException (a full disk, a read-only folder): the
    deepest one among the causes of ``error``, a Py4JJavaError or the exception PySpark made of it; None for any
    other error."""
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    cause = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    found = None
    while cause is not None:
        if is_instance_of(SparkContext._gateway, cause, "java.io.IOException"):
            found = cause
        cause = cause.getCause()
    return None if found is None else found.getMessage() or found.getClass().getName()


def write_outputs(session, paths, out: Path, level: str, split_bytes: int | None, shape: str) -> Summary:
    """The job: every output of `OUTPUTS` written into ``out``, and the summary."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.perf_counter()
    loaded = corpus.load(session, corpus.discover(paths), split_bytes)
    with contextlib.ExitStack() as cleanup:
        with progress(session, "validating"):
            results = SHAPES[shape](session, loaded, level, cleanup).persist(StorageLevel.DISK_ONLY)
            unpersist_later(cleanup, results)
            results.where("kind = 'verdict'").selectExpr(*VERDICT_COLUMNS).write.mode("overwrite").parquet(
                str(out / "verdicts.parquet"))
        results.where("kind = 'quarantine'").selectExpr(*QUARANTINE_COLUMNS).write.mode("overwrite").parquet(
            str(out / "quarantine.parquet"))
        counts = results.groupBy("kind", "verdict", "finding", "reason_kind", "properties").agg(
            F.sum("rows").alias("rows"), F.sum("traces").alias("traces"),
            F.sum("steps_checked").alias("steps")).collect()
        written = write_failing(results.where(f"verdict = '{FAIL}'"), out / "failing", level)
    verdicts = [row for row in counts if row.kind == "verdict"]
    quarantined = [row for row in counts if row.kind == "quarantine"]
    by_verdict, by_finding, by_property, by_reason = Counter(), Counter(), Counter(), Counter()
    for row in verdicts:
        by_verdict[row.verdict] += row.traces
        if row.finding is not None:
            by_finding[row.finding] += row.traces
        for prop in (row.properties or ["(exact difference only)"]) if row.verdict == FAIL else ():
            by_property[prop] += row.traces
    for row in quarantined:
        by_reason[row.reason_kind] += row.rows
    summary = Summary(
        level=level, files=loaded.files, input_rows=loaded.rows,
        checked_rows=sum(row.rows for row in verdicts), quarantined_rows=sum(row.rows for row in quarantined),
        verdicts={name: by_verdict[name] for name in (PASS, FAIL, FINDING)},
        findings=dict(sorted(by_finding.items())), properties=dict(sorted(by_property.items())),
        quarantine=dict(sorted(by_reason.items())), quarantined_traces=sum(row.traces for row in quarantined),
        steps_checked=sum(row.steps for row in verdicts), seconds=round(time.perf_counter() - started, 3),
        failing_files=written)
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    if summary.input_rows != summary.checked_rows + summary.quarantined_rows:
        raise AssertionError(f"rows do not reconcile: {summary.input_rows} read, {summary.checked_rows} checked + "
                             f"{summary.quarantined_rows} quarantined")
    return summary


def count_table(title: str, columns: tuple[str, str], counts: dict[str, int], show_header: bool = True) -> Table:
    table = Table(title=title, show_header=show_header)
    table.add_column(columns[0])
    table.add_column(columns[1], justify="right")
    for name, count in counts.items():
        table.add_row(name, count if isinstance(count, str) else f"{count:,}")
    return table


def summary_tables(summary: Summary) -> list[Table]:
    tables = [count_table(f"traces (level {summary.level})", ("verdict", "traces"), {
        "[green]pass[/]": summary.verdicts[PASS], "[bold red]fail[/]": summary.verdicts[FAIL],
        "[yellow]Kafka finding[/]": summary.verdicts[FINDING], "[yellow]quarantined[/]": summary.quarantined_traces})]
    if summary.findings:
        tables.append(count_table("Kafka findings", ("finding", "traces"), summary.findings))
    if summary.properties:
        tables.append(count_table("failing traces by property", ("contract property", "traces"), summary.properties))
    if summary.quarantine:
        tables.append(count_table("quarantined rows by reason", ("reason", "rows"), summary.quarantine))
    tables.append(count_table("rows", ("", ""), {
        "input rows": summary.input_rows, "= rows of checked traces": summary.checked_rows,
        "+ quarantined rows": summary.quarantined_rows, "steps replayed": summary.steps_checked,
        "seconds": f"{summary.seconds:,.1f}", "events/s (input rows)": f"{summary.events_per_second:,.0f}"},
        show_header=False))
    return tables


@click.command("validate-traces")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("kpurgatory-out/validate"),
              show_default=True, help="Folder for verdicts, quarantine, failing traces and the summary.")
@click.option("--level", type=click.Choice(LEVELS), default="exact", show_default=True)
@click.option("--fail-on-findings/--findings-pass", default=False, show_default=True,
              help="Whether a trace whose failure is a Kafka finding (what Kafka's own classes do there, named as "
                   "`kpurgatory check` names it) fails the run; by default it is counted apart and passes.")
@with_spark_options
def validate_command(inputs, out, level, fail_on_findings, master, conf):
    """Replay every trace in INPUTS (JSON Lines or Parquet files, or folders of them) through the model on Spark.

    Exits 0 when every trace passes (Kafka findings aside, unless --fail-on-findings) and no row is quarantined, 1
    when a trace fails, 2 when rows were quarantined but nothing failed."""
    corpus.discover(inputs)  # no input files is a usage error, and an unwritable --out, said before a JVM starts
    staging_folder(out).rmdir()
    session = get_session(master, parse_conf(conf), "kpurgatory validate-traces")
    summary = run_validation(session, inputs, out, level)
    console = Console()
    for table in summary_tables(summary):
        console.print(table)
    console.print(f"outputs in {out}/: verdicts.parquet, quarantine.parquet, summary.json", soft_wrap=True)
    if summary.failing_files:
        console.print(f"{counted(summary.failing_files, 'failing trace')} in {out}/failing/; reproduce one with: "
                      f"kpurgatory replay {out}/failing/<trace>.jsonl; see one in {out}/failing/<trace>.html",
                      soft_wrap=True, highlight=False)
    failed = summary.verdicts[FAIL] + (summary.verdicts[FINDING] if fail_on_findings else 0)
    sys.exit(1 if failed else 2 if summary.quarantined_rows else 0)
