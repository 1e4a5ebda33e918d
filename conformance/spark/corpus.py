"""Trace corpora as Spark reads them: JSON Lines files and Parquet, into one row per trace line with its provenance.

JSON Lines is the codec's format (`kpurgatory.conformance.traces.codec`). The Parquet layout (what ``kpurgatory record``
writes) has one row per line and the line's top-level fields as columns: ``trace`` (string), ``seq`` (int64), and
``header``, ``cmd``, ``args``, ``result``, ``events``, ``error`` (strings), where the JSON-valued fields (header, args,
result, events) hold JSON text — a result is a bool, a number, a list or an object depending on the command, which no
single Parquet type holds. A SQL null means the field is absent (a step has no header, a header no cmd); the JSON
text ``null`` is a null value (a step's null result).

Both become rows of `INPUT_SCHEMA`: ``source`` and ``line`` (file and 1-based line or row number, so every quarantined
row can be found again), the ``trace`` and ``seq`` to group and order by, and the line itself — ``text`` for JSON
Lines, the field columns for Parquet. Nothing is parsed beyond trace and seq here and nothing is dropped: a line that
is blank, not UTF-8 or not JSON still becomes a row (with ``problem`` or a null trace) for the validator to quarantine.
Lines are cut and decoded by the codec's reader (`codec.split_lines`, `codec.decode_line`), with its limits, so a line
means here what it means to ``kpurgatory replay``. An empty file is one row (the codec's ``empty input``), and a file
whose last line was cut short is found by the driver (`truncated_end`): replay rejects such a file, so the validator
quarantines every row of it.

JSON Lines files are cut into byte ranges at line boundaries by the driver, which counts the lines on the way, so
executors read in parallel yet report exact line numbers, and the input's row count is known independently of the
job (the validator reconciles its outputs against it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

import attrs
import click
import pyarrow as pa
import pyarrow.parquet as pq

from kpurgatory.conformance.traces import codec

FIELDS = ("header", "cmd", "args", "result", "events", "error")
JSON_FIELDS = ("header", "args", "result", "events")

PARQUET_SCHEMA = pa.schema([("trace", pa.string()), ("seq", pa.int64())] + [(name, pa.string()) for name in FIELDS])

INPUT_SCHEMA = pa.schema([("source", pa.string()), ("line", pa.int64()), ("trace", pa.string()), ("seq", pa.int64()),
                          ("text", pa.string()), ("problem", pa.string())] + [(name, pa.string()) for name in FIELDS])

SPLIT_BYTES = 16 << 20
BATCH_ROWS = 8192
INT64 = (-(2**63), 2**63 - 1)


# ---------------------------------------------------------------------------------------------------------------
# Parquet rows <-> trace lines
# ---------------------------------------------------------------------------------------------------------------


def line_row(line: dict) -> dict:
    """A trace line (as the codec writes it) -> its Parquet row."""
    row = {"trace": line["trace"], "seq": line["seq"]}
    for name in FIELDS:
        value = line.get(name, ...)
        row[name] = None if value is ... else json.dumps(value, separators=(",", ":")) if name in JSON_FIELDS else value
    return row


def row_document(row: dict) -> dict:
    """A Parquet row -> the trace line it stands for; ValueError names the column whose JSON does not parse."""
    document = {name: row[name] for name in ("trace", "seq") if row[name] is not None}
    for name in FIELDS:
        value = row[name]
        if value is None:
            continue
        if name in JSON_FIELDS:
            try:
                value = codec.decode_text(value)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        document[name] = value
    return document


# ---------------------------------------------------------------------------------------------------------------
# Finding the input
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Inputs:
    jsonl: tuple[str, ...]
    parquet: tuple[str, ...]


def discover(paths: Iterable[str | Path]) -> Inputs:
    """Files named on the command line, and every visible file below the folders named (Spark output folders hold
    part files plus _SUCCESS and .crc files, which are skipped). ``*.parquet`` is Parquet, anything else JSON Lines."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file()
                            and not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts))
        elif path.is_file():
            found.append(path)
        else:
            raise click.BadParameter(f"{path} does not exist", param_hint="INPUT")
    if not found:
        raise click.BadParameter("no input files found", param_hint="INPUT")
    resolved = [str(p.resolve()) for p in found]
    return Inputs(tuple(p for p in resolved if not p.endswith(".parquet")),
                  tuple(p for p in resolved if p.endswith(".parquet")))


# ---------------------------------------------------------------------------------------------------------------
# JSON Lines: whole-line byte ranges with their first line number
# ---------------------------------------------------------------------------------------------------------------


def line_splits(path: str, split_bytes: int = SPLIT_BYTES, chunk_bytes: int = 8 << 20) -> tuple[list[tuple], int]:
    """Cut ``path`` into (path, start, end, first line) ranges of about ``split_bytes`` that end after a newline;
    also returns the file's line count (a last line without a newline counts)."""
    splits, start, first, lines, offset, last = [], 0, 1, 0, 0, b"\n"
    with open(path, "rb") as file:
        while chunk := file.read(chunk_bytes):
            seen, seen_lines = 0, lines  # the newlines of chunk[:seen] are counted in seen_lines
            position = max(0, start + split_bytes - 1 - offset)
            while position < len(chunk) and (cut := chunk.find(b"\n", position)) >= 0:
                seen_lines += chunk.count(b"\n", seen, cut + 1)
                seen = cut + 1
                splits.append((path, start, offset + seen, first))
                start, first = offset + seen, seen_lines + 1
                position = cut + split_bytes
            lines = seen_lines + chunk.count(b"\n", seen)
            offset += len(chunk)
            last = chunk[-1:]
    if offset > start or offset == 0:  # an empty file is one (empty) split: its row says so
        splits.append((path, start, offset, first))
    return splits, lines + (last != b"\n")


def truncated_end(path: str, lines: int) -> tuple[int, str] | None:
    """(line number, the reader's reason) when ``path`` (of ``lines`` lines) ends in a line cut short: no newline
    after it, and not JSON."""
    with open(path, "rb") as file:
        size = file.seek(0, 2)
        file.seek(max(0, size - codec.MAX_LINE_BYTES - 1))
        tail = file.read()
    if not tail or tail.endswith(b"\n"):
        return None
    try:
        codec.decode_last(tail[tail.rfind(b"\n") + 1:])
    except ValueError as error:
        return lines, str(error)
    return None


def line_fields(raw: bytes) -> tuple[str | None, str | None, str | None, int | None]:
    """(text, problem, trace, seq) of one line; only trace and seq are taken from it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        try:
            codec.decode_line(raw)
        except ValueError as error:
            return None, str(error), None, None
    try:
        document = codec.decode_text(text)
    except ValueError:
        return text, None, None, None
    if not isinstance(document, dict):
        return text, None, None, None
    trace, seq = document.get("trace"), document.get("seq")
    trace = trace if isinstance(trace, str) else None
    seq = seq if type(seq) is int and INT64[0] <= seq <= INT64[1] else None
    return text, None, trace, seq


def read_splits(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: (path, start, end, first_line) rows -> INPUT_SCHEMA rows, one per line, in batches."""
    for batch in batches:
        for path, start, end, first in zip(*(batch.column(i).to_pylist() for i in range(4))):
            with open(path, "rb") as file:
                file.seek(start)
                data = file.read(end - start)
            lines = codec.split_lines(data)[0] if end else [b""]
            for offset in range(0, len(lines), BATCH_ROWS):
                rows = ([line_fields(raw) for raw in lines[offset:offset + BATCH_ROWS]] if end else
                        [(None, codec.EMPTY_INPUT, None, None)])
                texts, problems, traces, seqs = zip(*rows)
                count = len(rows)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([path] * count, pa.string()), pa.array(range(first + offset, first + offset + count),
                                                                     pa.int64()),
                     pa.array(traces, pa.string()), pa.array(seqs, pa.int64()), pa.array(texts, pa.string()),
                     pa.array(problems, pa.string())] + [pa.nulls(count, pa.string())] * len(FIELDS),
                    schema=INPUT_SCHEMA)


# ---------------------------------------------------------------------------------------------------------------
# Into Spark
# ---------------------------------------------------------------------------------------------------------------


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema: each mapInArrow's output is declared once, in Arrow terms."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


@attrs.frozen
class Loaded:
    frame: object  # pyspark.sql.DataFrame of INPUT_SCHEMA rows
    rows: int  # counted outside the job: lines of the JSON Lines files plus rows in the Parquet footers
    files: int
    #: JSON Lines files that end in a line cut short -> (its line number, why it is not JSON)
    truncated: dict[str, tuple[int, str]] = {}


def load(session, inputs: Inputs, split_bytes: int = SPLIT_BYTES) -> Loaded:
    """The corpus as one DataFrame of INPUT_SCHEMA rows, with its row count taken by the driver, outside the job."""
    from pyspark.sql import functions as F

    frames, rows, truncated = [], 0, {}
    if inputs.jsonl:
        splits = []
        for path in inputs.jsonl:
            file_splits, lines = line_splits(path, split_bytes)
            splits += file_splits
            rows += max(lines, 1)
            if cut := truncated_end(path, lines):
                truncated[path] = cut
        if splits:
            plan = session.createDataFrame(splits, "path string, start bigint, end bigint, first bigint")
            frames.append(plan.repartition(len(splits)).mapInArrow(read_splits, spark_schema(INPUT_SCHEMA)))
    if inputs.parquet:
        rows += sum(pq.read_metadata(path).num_rows for path in inputs.parquet)
        table = session.read.parquet(*inputs.parquet)
        columns = set(table.columns)
        frames.append(table.select(
            F.url_decode(F.regexp_replace("_metadata.file_path", "^file:", "")).alias("source"),
            (F.col("_metadata.row_index") + 1).alias("line"),
            *[(F.col(name) if name in columns else F.lit(None)).cast(kind).alias(name)
              for name, kind in (("trace", "string"), ("seq", "bigint"))],
            F.lit(None).cast("string").alias("text"), F.lit(None).cast("string").alias("problem"),
            *[(F.col(name) if name in columns else F.lit(None)).cast("string").alias(name) for name in FIELDS]))
    frame = frames[0] if frames else session.createDataFrame([], spark_schema(INPUT_SCHEMA))
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return Loaded(frame, rows, len(inputs.jsonl) + len(inputs.parquet), truncated)
