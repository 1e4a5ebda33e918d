"""Reading corpora: exact line numbers from byte-range splits, Parquet rows that round-trip, input discovery."""

import json
import random

import pytest

from kpurgatory.conformance.spark import corpus
from kpurgatory.conformance.spark.sample import lines_of
from kpurgatory.model import vocabulary as v


def test_splits_cover_the_file_at_line_boundaries_with_exact_line_numbers(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "lines.jsonl"
    for _ in range(300):
        lines = [b"x" * rng.randint(0, 9) for _ in range(rng.randint(0, 40))]
        data = b"\n".join(lines) + (b"\n" if lines and rng.random() < 0.5 else b"")
        path.write_bytes(data)
        splits, count = corpus.line_splits(str(path), rng.randint(1, 30), rng.randint(1, 16))
        assert count == data.count(b"\n") + (not data.endswith(b"\n") and bool(data))
        ranges = [(start, end) for _, start, end, _ in splits]
        assert [start for start, _ in ranges] == [0, *(end for _, end in ranges[:-1])][:len(ranges)]
        assert (ranges[-1][1] if ranges else 0) == len(data)
        for _, start, _, first in splits:
            assert first == data[:start].count(b"\n") + 1 and (start == 0 or data[start - 1:start] == b"\n")


def test_the_reader_keeps_every_line_with_its_number_and_problem(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'{"trace":"t","seq":0}\n\nnot json\n{"trace":5,"seq":"1"}\n\xff\xfe\r\n{"trace":"t","seq":2}')
    batches = corpus.read_splits([corpus.pa.RecordBatch.from_pylist(
        [{"path": str(path), "start": start, "end": end, "first": first}
         for _, start, end, first in corpus.line_splits(str(path), 8)[0]])])
    rows = [row for batch in batches for row in batch.to_pylist()]
    # a bad line that names no trace counts against the trace before it (it may be that trace's lost step); a blank
    # line stays alone
    assert [(r["line"], r["trace"], r["seq"]) for r in rows] == [
        (1, "t", 0), (2, None, None), (3, "t", None), (4, "t", None), (5, "t", None), (6, "t", 2)]
    assert rows[1]["text"] == "" and rows[2]["text"] == "not json"
    assert rows[4]["text"] is None and rows[4]["problem"].startswith("not UTF-8: byte 1")


@pytest.mark.parametrize("index", range(4))
def test_parquet_rows_round_trip_to_the_same_lines(index):
    lines = lines_of("t", "purgatory", [v.Watch("o1", ["k1", "k2"], 5), v.Advance(5), v.CancelKey("k1")])
    line = lines[index]
    assert corpus.row_document(corpus.line_row(line)) == line


def test_a_parquet_json_column_that_does_not_parse_names_the_column():
    row = corpus.line_row(lines_of("t", "timer", [v.Size()])[1])
    with pytest.raises(ValueError, match=r"^events: not JSON"):
        corpus.row_document({**row, "events": "[oops"})


def test_discover_walks_folders_and_skips_spark_markers(tmp_path):
    (tmp_path / "out").mkdir()
    for name in ("part-0.txt", "_SUCCESS", ".part-0.txt.crc", "x.parquet"):
        (tmp_path / "out" / name).write_text("")
    found = corpus.discover([tmp_path / "out"])
    assert [p.rsplit("/", 1)[1] for p in found.jsonl] == ["part-0.txt"]
    assert [p.rsplit("/", 1)[1] for p in found.parquet] == ["x.parquet"]


@pytest.mark.parametrize("window", [corpus.ALIGN_BYTES, 64])
def test_cuts_move_to_where_a_trace_ends_and_keep_exact_line_numbers(tmp_path, monkeypatch, window):
    monkeypatch.setattr(corpus, "ALIGN_BYTES", window)
    rng = random.Random(window)
    path = tmp_path / "traces.jsonl"
    for _ in range(200):
        lines = [json.dumps({"trace": f"t{index}", "seq": seq, "pad": "x" * rng.randint(0, 30)})
                 for index in range(rng.randint(1, 20)) for seq in range(rng.randint(1, 12))]
        data = "\n".join(lines).encode() + b"\n"
        path.write_bytes(data)
        splits = corpus.trace_cuts(str(path), corpus.line_splits(str(path), rng.randint(1, 400))[0])
        assert splits[0][1] == 0 and splits[-1][2] == len(data)
        assert all(end == start for (_, _, end, _), (_, start, _, _) in zip(splits, splits[1:]))
        holders: dict[str, set[int]] = {}
        for index, (_, start, end, first) in enumerate(splits):
            assert start < end and first == data[:start].count(b"\n") + 1 and data[start - 1:start] in (b"", b"\n")
            for raw in data[start:end].splitlines():
                holders.setdefault(json.loads(raw)["trace"], set()).add(index)
        if window > len(data):  # a window larger than any trace: no trace is cut
            assert all(len(indexes) == 1 for indexes in holders.values())
