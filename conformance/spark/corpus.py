"""Trace corpora as Spark reads them: JSON Lines files and Parquet, into one row per trace line with its provenance.

JSON Lines is the codec's format (`kpurgatory.conformance.traces.codec`). The Parquet layout (what ``kpurgatory record``
writes) has one row per line and the line's top-level fields as columns: ``trace`` (string), ``seq`` (int64), and
``header``, ``cmd``, ``args``, ``result``, ``events``, ``error`` (strings), where the JSON-valued fields (header, args,
result, events) hold JSON text — a result is a bool, a number, a list or an object depending on the command, which no
single Parquet type holds. A SQL null means the field is absent (a step has no header, a header no cmd); the JSON
text ``null`` is a null value (a step's null result).

Both become rows of `INPUT_SCHEMA`: ``source`` and ``line`` (file and 1-based line or row number, so every quarantined
row can be found again), the ``trace`` and ``seq`` to group and order by, and the line itself — ``text`` for JSON
Lines, the field columns for Parquet. Nothing is judged here and nothing is dropped: a line that
is blank, not UTF-8 or not JSON still becomes a row (with ``problem`` or a null trace) for the validator to quarantine.
Lines are cut and decoded by the codec's reader (`codec.file_lines`, `codec.decode_line`), with its limits, so a line
means here what it means to ``kpurgatory replay``, and a line over the length limit is never held in memory. An empty
file is one row (the codec's ``empty input``), and a file whose last line was cut short, or that is gzip-compressed,
is found by the driver (`truncated_end`): replay rejects such a file, so the validator quarantines every row of it.

JSON Lines files are cut into byte ranges at line boundaries by the driver, which counts the lines on the way, so
executors read in parallel yet report exact line numbers, and the input's row count is known independently of the
job (the validator reconciles its outputs against it). Cuts are moved to where a trace ends (`trace_cuts`), so a
corpus of whole traces one after another can be judged split by split without a shuffle (`Loaded.map_rows`), and
split sizes follow the machine: about four per core, at most `SPLIT_BYTES`.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
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
#: how far `trace_cuts` looks for the end of the trace a cut falls in (a trace of 100 steps is about 12 KB)
ALIGN_BYTES = 1 << 20
MIN_SPLIT_BYTES = 1 << 20
BATCH_ROWS = 8192
INT64 = (-(2**63), 2**63 - 1)
#: a row of INPUT_SCHEMA with nothing in it
BLANK_ROW = dict.fromkeys(INPUT_SCHEMA.names)


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

    @classmethod
    def of(cls, paths: Iterable[str]) -> Inputs:
        """``*.parquet`` is Parquet, anything else JSON Lines."""
        paths = list(paths)
        return cls(tuple(p for p in paths if not p.endswith(".parquet")),
                   tuple(p for p in paths if p.endswith(".parquet")))


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
    return Inputs.of(str(p.resolve()) for p in found)


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
    """(line number, the reader's reason) when replay rejects ``path`` (of ``lines`` lines) whole: it is
    gzip-compressed (line 1), or ends in a line cut short (no newline after it, and not JSON)."""
    with open(path, "rb") as file:
        if file.read(2) == codec.GZIP_MAGIC:
            return 1, codec.GZIPPED
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


def line_fields(raw: bytes | None) -> dict:
    """The INPUT_SCHEMA fields of one line (None: one over the length limit, not read) but its position: text,
    problem, trace and seq (only those two are taken from it; the trace id `codec.utf8_safe`, as every output needs
    it), and its JSON value as ``document`` when it has one, so the validator need not parse it again."""
    row = dict(BLANK_ROW)
    if raw is None:
        row["problem"] = codec.TOO_LONG
        return row
    try:
        row["text"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        document = codec.decode_line(raw)
    except ValueError as error:
        if row["text"] is None:
            row["problem"] = str(error)
        return row
    row["document"] = document
    if isinstance(document, dict):
        trace, seq = document.get("trace"), document.get("seq")
        row["trace"] = codec.utf8_safe(trace) if isinstance(trace, str) else None
        row["seq"] = seq if type(seq) is int and INT64[0] <= seq <= INT64[1] else None
    return row


def split_rows(path: str, start: int, end: int, first: int) -> Iterator[dict]:
    """The INPUT_SCHEMA rows (with `line_fields`' ``document``) of the lines in one split.

    A line that names no trace (not JSON, too long, too deep...) but is not blank may be a lost line of the trace
    before it, its last steps: it takes that trace's id, so that trace is quarantined whole rather than judged on
    the steps left (a lost line within a trace shows as a seq gap anyway)."""
    if not end:
        yield {**BLANK_ROW, "source": path, "line": first, "problem": codec.EMPTY_INPUT}
        return
    with open(path, "rb") as file:
        file.seek(start)
        previous = ...  # the trace of the last line that names one; ... until needed at the split's start
        for number, (raw, _) in enumerate(codec.file_lines(file, end), start=first):
            row = line_fields(raw)
            row["source"], row["line"] = path, number
            if row["trace"] is not None:
                previous = row["trace"]
            elif row["text"] is None or row["text"].strip():
                if previous is ...:
                    previous = trace_before(file, start)
                row["trace"] = previous
            yield row


def trace_before(file, start: int) -> str | None:
    """The trace of the last line before offset ``start`` (a line boundary) that names one, within `ALIGN_BYTES`;
    the file's position is kept."""
    position = file.tell()
    file.seek(max(0, start - ALIGN_BYTES))
    before = file.read(start - file.tell()).split(b"\n")[:-1]
    file.seek(position)
    for raw in reversed(before[start > ALIGN_BYTES:]):  # the first piece of a window is part of a line
        if (trace := line_fields(raw.removesuffix(b"\r"))["trace"]) is not None:
            return trace
    return None


def splits_of(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, int, int, int]]:
    """The (path, start, end, first line) splits in a mapInArrow's input."""
    for batch in batches:
        yield from zip(*(batch.column(i).to_pylist() for i in range(4)))


def read_splits(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: (path, start, end, first_line) rows -> INPUT_SCHEMA rows, one per line, in batches."""
    for split in splits_of(batches):
        rows = split_rows(*split)
        while batch := list(itertools.islice(rows, BATCH_ROWS)):
            yield pa.RecordBatch.from_pylist(batch, INPUT_SCHEMA)


def trace_cuts(path: str, splits: list[tuple]) -> list[tuple]:
    """``path``'s splits with each cut moved past the rest of the trace it falls in (`moved_cut`). A file of whole
    traces one after another (what ``kpurgatory record`` writes) then gives each trace to one split, which
    validate-traces judges where it was read, without a shuffle. Any cut is correct (the validator finds the traces
    that span splits and judges them again whole); this only makes them rare."""
    cuts = [(splits[0][1], splits[0][3])]
    with open(path, "rb") as file:
        for _, start, _, first in splits[1:]:
            cut = moved_cut(file, start, first)
            if cuts[-1][0] < cut[0] < splits[-1][2]:  # a trace longer than a split swallows the cuts inside it
                cuts.append(cut)
    ends = [start for start, _ in cuts[1:]] + [splits[-1][2]]
    return [(path, start, end, first) for (start, first), end in zip(cuts, ends)]


def moved_cut(file, start: int, first: int) -> tuple[int, int]:
    """(offset, line number) of a cut at ``start`` (line ``first``) moved to where the trace of the line before it
    ends (the end of the file, if it runs on to there), if it ends within `ALIGN_BYTES`; else the cut as it was."""
    file.seek(max(0, start - ALIGN_BYTES))
    before = file.read(start - file.tell())
    begins = before.rfind(b"\n", 0, len(before) - 1) + 1
    if begins == 0 and start > ALIGN_BYTES:  # a line longer than the window
        return start, first
    previous = line_fields(before[begins:-1].removesuffix(b"\r"))["trace"]
    after, position, lines = file.read(ALIGN_BYTES), 0, 0
    while previous is not None and (end := after.find(b"\n", position)) >= 0:
        if line_fields(after[position:end].removesuffix(b"\r"))["trace"] != previous:
            return start + position, first + lines
        position, lines = end + 1, lines + 1
    if previous is not None and len(after) < ALIGN_BYTES:  # the trace runs to the end of the file
        return start + len(after), first + lines
    return start, first


# ---------------------------------------------------------------------------------------------------------------
# Into Spark
# ---------------------------------------------------------------------------------------------------------------


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema: each mapInArrow's output is declared once, in Arrow terms."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


@attrs.frozen
class Loaded:
    #: one partition per JSON Lines split (path, start, end, first line), the largest first; None without JSON Lines
    splits: object | None
    parquet: object | None  # pyspark.sql.DataFrame of the Parquet files' INPUT_SCHEMA rows; None without Parquet
    rows: int  # counted outside the job: lines of the JSON Lines files plus rows in the Parquet footers
    files: int
    #: JSON Lines files that end in a line cut short -> (its line number, why it is not JSON)
    truncated: dict[str, tuple[int, str]] = {}

    @property
    def frame(self):
        """The corpus as one DataFrame of INPUT_SCHEMA rows."""
        frames = [self.splits.mapInArrow(read_splits, spark_schema(INPUT_SCHEMA))] if self.splits is not None else []
        return union(frames + ([self.parquet] if self.parquet is not None else []))

    def map_rows(self, function, schema: pa.Schema):
        """``function`` (INPUT_SCHEMA rows as dicts, in file order -> Arrow batches of ``schema``) over the corpus
        where it lies, without a shuffle: once per JSON Lines split, read by the same task (no row crosses into the
        JVM and back), and once per partition of Parquet rows."""
        frames = []
        if self.splits is not None:
            frames.append(self.splits.mapInArrow(functools.partial(each_split, function=function),
                                                 spark_schema(schema)))
        if self.parquet is not None:
            frames.append(self.parquet.mapInArrow(functools.partial(each_partition, function=function),
                                                  spark_schema(schema)))
        return union(frames)


def each_split(batches: Iterable[pa.RecordBatch], function) -> Iterator[pa.RecordBatch]:
    for split in splits_of(batches):
        yield from function(split_rows(*split))


def each_partition(batches: Iterable[pa.RecordBatch], function) -> Iterator[pa.RecordBatch]:
    yield from function(row for batch in batches for row in batch.to_pylist())


def union(frames: list):
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def split_size(paths: Iterable[str], parallelism: int) -> int:
    """`SPLIT_BYTES`, or less so that every core gets about four splits: the last ones to finish then keep fewer
    cores waiting."""
    total = sum(os.path.getsize(path) for path in paths)
    return max(MIN_SPLIT_BYTES, min(SPLIT_BYTES, total // (4 * parallelism)))


def load(session, inputs: Inputs, split_bytes: int | None = None) -> Loaded:
    """The corpus as splits and Parquet rows, with its row count taken by the driver, outside the job. Inputs must
    name at least one file (`discover` sees to that)."""
    from pyspark.sql import functions as F

    rows, truncated, plan, parquet = 0, {}, None, None
    if inputs.jsonl:
        split_bytes = split_bytes or split_size(inputs.jsonl, session.sparkContext.defaultParallelism)
        splits = []
        for path in inputs.jsonl:
            file_splits, lines = line_splits(path, split_bytes)
            splits += trace_cuts(path, file_splits) if len(file_splits) > 1 else file_splits
            rows += max(lines, 1)
            if cut := truncated_end(path, lines):
                truncated[path] = cut
        splits.sort(key=lambda split: split[1] - split[2])  # the largest first: the smallest fill in at the end
        plan = session.createDataFrame(session.sparkContext.parallelize(splits, len(splits)),
                                       "path string, start bigint, end bigint, first bigint")
    if inputs.parquet:
        rows += sum(pq.read_metadata(path).num_rows for path in inputs.parquet)
        table = session.read.parquet(*inputs.parquet)
        columns = set(table.columns)
        parquet = table.select(
            F.url_decode(F.regexp_replace("_metadata.file_path", "^file:", "")).alias("source"),
            (F.col("_metadata.row_index") + 1).alias("line"),
            *[(F.col(name) if name in columns else F.lit(None)).cast(kind).alias(name)
              for name, kind in (("trace", "string"), ("seq", "bigint"))],
            F.lit(None).cast("string").alias("text"), F.lit(None).cast("string").alias("problem"),
            *[(F.col(name) if name in columns else F.lit(None)).cast("string").alias(name) for name in FIELDS])
    return Loaded(plan, parquet, rows, len(inputs.jsonl) + len(inputs.parquet), truncated)
