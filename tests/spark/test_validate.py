"""validate-traces: the sample corpus gets exactly its expected verdicts and quarantine, inputs reconcile, failing
traces reproduce with `kpurgatory replay`, and Parquet input means the same as JSON Lines."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.view import views_in
from kpurgatory.conformance.spark import corpus, sample
from kpurgatory.conformance.spark.validate import run_validation, validate_batches

SAMPLE_ROWS = len(sample.path().read_text().splitlines())


def sorted_input(path) -> pa.Table:
    plan = pa.RecordBatch.from_pylist([dict(zip(("path", "start", "end", "first"), split))
                                       for split in corpus.line_splits(str(path), 4096)[0]])
    return pa.Table.from_batches(corpus.read_splits([plan]), corpus.INPUT_SCHEMA).sort_by(
        [(name, "ascending") for name in ("trace", "seq", "source", "line")])


def test_a_trace_split_across_arrow_batches_is_judged_as_one():
    table = sorted_input(sample.path())
    whole = pa.Table.from_batches(validate_batches(table.to_batches(), "exact")).to_pylist()
    for size in (1, 7, 101):
        assert pa.Table.from_batches(validate_batches(table.to_batches(size), "exact")).to_pylist() == whole
    assert sum(row["rows"] for row in whole) == table.num_rows == SAMPLE_ROWS


@pytest.fixture(scope="module")
def readme_run(spark, tmp_path_factory):
    """The README's command, in-process: `kpurgatory validate-traces <sample> --out DIR`."""
    out = tmp_path_factory.mktemp("validate")
    result = CliRunner().invoke(main, ["validate-traces", str(sample.path()), "--out", str(out)],
                                terminal_width=120)
    return result, out


@pytest.mark.spark
def test_the_sample_gets_its_expected_verdicts_and_quarantine(readme_run):
    result, out = readme_run
    assert result.exit_code == 1, result.output  # the sample holds failing traces on purpose
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdicts"] == sample.EXPECTED["verdicts"]
    assert summary["properties"] == sample.EXPECTED["properties"]
    assert summary["quarantine"] == sample.EXPECTED["quarantine"]
    assert summary["quarantined_traces"] == sample.EXPECTED["quarantined_traces"]
    assert summary["input_rows"] == SAMPLE_ROWS == summary["checked_rows"] + summary["quarantined_rows"]
    for heading in ("traces (level exact)", "failing traces by property", "quarantined rows by reason",
                    f"{SAMPLE_ROWS:,}"):
        assert heading in result.output


@pytest.mark.spark
def test_the_tables_hold_one_row_per_trace_and_per_rejected_line_with_its_position(readme_run):
    _, out = readme_run
    verdicts = pq.read_table(out / "verdicts.parquet").to_pylist()
    quarantine = pq.read_table(out / "quarantine.parquet").to_pylist()
    assert len(verdicts) == sum(sample.EXPECTED["verdicts"].values())
    assert sum(row["rows"] for row in verdicts) + len(quarantine) == SAMPLE_ROWS
    early = next(row for row in verdicts if row["trace"] == "fault.early-expiry")
    assert (early["failing_seq"], early["properties"], early["observed"]) == (
        2, ["on_time"], "None; complete(o1, expire), expire(o1)")
    lines = sample.path().read_text().splitlines()
    garbage = next(row for row in quarantine if row["reason_kind"] == "not_json")
    assert (garbage["source"], lines[garbage["line"] - 1]) == (str(sample.path()), "this line is not JSON")
    gap = [row for row in quarantine if row["trace"] == "bad.seq-gap"]
    assert {row["reason_kind"] for row in gap} == {"seq_gap", "trace_quarantined"}
    assert all("seq 3 follows seq 1" in row["reason"] for row in gap)


@pytest.mark.spark
def test_each_failing_trace_is_a_file_that_replay_reproduces(readme_run):
    _, out = readme_run
    files = sorted((out / "failing").glob("*.jsonl"))
    assert [f.name for f in files] == sorted(f"{trace_id}.jsonl" for trace_id, *_ in sample.SEMANTIC_FAULTS)
    pages = sorted((out / "failing").glob("*.html"))  # each with its page, written by validate-traces
    assert [page.stem for page in pages] == [path.stem for path in files]
    for page in pages:
        [view] = views_in(page.read_text())
        assert view["id"] == page.stem and view["failure"] is not None
    for path in files:
        replayed = CliRunner().invoke(main, ["replay", str(path)], terminal_width=200)
        assert replayed.exit_code == 1 and f"FAIL {path.stem} at step" in replayed.output, replayed.output


@pytest.mark.spark
def test_contract_level_and_parquet_input_agree_with_json_lines(spark, tmp_path):
    lines = [json.loads(text) for text in sample.path().read_text().splitlines()
             if text.startswith("{")]  # the non-JSON and blank lines have no Parquet form
    pq.write_table(pa.Table.from_pylist([corpus.line_row(line) for line in lines], corpus.PARQUET_SCHEMA),
                   tmp_path / "sample.parquet", row_group_size=500)
    summary = run_validation(spark, [tmp_path / "sample.parquet"], tmp_path / "out", "contract")
    expected = dict(sample.EXPECTED["quarantine"])
    del expected["not_json"], expected["blank_line"]
    assert (summary.verdicts, summary.properties, summary.quarantine) == (
        sample.EXPECTED["verdicts"], sample.EXPECTED["properties"], expected)
    assert summary.input_rows == len(lines) == summary.checked_rows + summary.quarantined_rows
    source = pq.read_table(tmp_path / "out" / "quarantine.parquet").column("source").to_pylist()
    assert set(source) == {str(tmp_path / "sample.parquet")}


def test_without_java_there_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    result = CliRunner().invoke(main, ["validate-traces", str(sample.path())])
    assert result.exit_code == 3  # the tool cannot run here
    assert result.output.startswith("Error: Spark needs Java 17 or later") and "Traceback" not in result.output


def test_bad_input_the_sample_lacks_is_quarantined_whole_too(tmp_path):
    header = '{"trace":"%s","seq":0,"header":{"format":"kpurgatory-trace","version":1,"profile":"timer",' \
             '"params":{"tick_ms":%d,"wheel_size":2,"start_ms":0},"implementation":"x"}}'
    size = '{"trace":"%s","seq":%s,"cmd":"size","args":{},"result":0,"events":[]}'
    text = b'{"trace":"\xff"}\n' + "\n".join([  # not UTF-8, before any trace: it can belong to none
        header % ("twice", 1), size % ("twice", 1), header % ("twice", 1),  # a second header
        header % ("float-seq", 1), size % ("float-seq", "1.0"),  # seq 1.0 is not an integer
        header % ("huge-tick", 2**63 - 1), size % ("huge-tick", 1),  # params the schema accepts, the model not
        header % ("ok", 1), size % ("ok", 1),
    ]).encode() + b"\n"
    (tmp_path / "odd.jsonl").write_bytes(text)
    rows = pa.Table.from_batches(validate_batches(sorted_input(tmp_path / "odd.jsonl").to_batches(), "exact"))
    reasons = {}
    for row in rows.to_pylist():
        reasons.setdefault(row["trace"], set()).add(row["reason_kind"] or row["verdict"])
    huge_tick = reasons.pop("huge-tick")  # the model's refusal, or the codec's should it learn to refuse first
    assert huge_tick in ({"malformed_command", "trace_quarantined"}, {"bad_field", "trace_quarantined"})
    assert reasons == {"twice": {"second_header", "trace_quarantined"}, "float-seq": {"bad_field", "trace_quarantined"},
                       "ok": {"pass"}, None: {"not_utf8"}}
    assert sum(rows.column("rows").to_pylist()) == len(text.splitlines())


@pytest.mark.spark
def test_traces_cut_by_splits_or_spread_over_files_get_the_verdicts_the_shuffle_gives(spark, tmp_path):
    lines = sample.path().read_bytes().splitlines(keepends=True)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "first.jsonl").write_bytes(b"".join(lines[: len(lines) // 2]))  # a trace spans the files
    (tmp_path / "in" / "second.jsonl").write_bytes(b"".join(lines[len(lines) // 2:]))
    tables = {}
    for shape, split_bytes in (("shuffle", None), ("runs", 2000)):  # small splits: many tasks, cuts moved
        out = tmp_path / f"{shape}-{split_bytes}"
        summary = run_validation(spark, [tmp_path / "in"], out, split_bytes=split_bytes, shape=shape)
        tables[shape, split_bytes] = summary.verdicts, summary.quarantine, *(
            sorted(map(str, pq.read_table(out / name).to_pylist())) for name in ("verdicts.parquet",
                                                                                  "quarantine.parquet"))
    assert tables["runs", 2000] == tables["shuffle", None]
    assert tables["shuffle", None][:2] == (sample.EXPECTED["verdicts"], sample.EXPECTED["quarantine"])


def test_an_unwritable_out_is_one_line_before_spark_starts(monkeypatch, tmp_path):
    import kpurgatory.conformance.spark.validate as validate

    monkeypatch.setattr(validate, "get_session", lambda *args: pytest.fail("started Spark"))
    result = CliRunner().invoke(main, ["validate-traces", str(sample.path()), "--out", "/dev/full/out"])
    assert result.exit_code == 3 and result.output.startswith("Error: cannot write /dev/full/out: ")
    assert result.output.count("\n") == 1, result.output


@pytest.mark.parametrize("failure", ["SIGTERM", "disk full"])
def test_a_run_that_does_not_finish_leaves_no_part_of_its_outputs(monkeypatch, tmp_path, failure):
    """Outputs are moved into --out only when all are written: an interruption or a full disk half-way leaves the
    previous run's outputs as they were, and says so in one line."""
    import errno
    import types

    import kpurgatory.conformance.spark.validate as validate
    from kpurgatory.conformance.cli import Interrupted

    out = tmp_path / "out"
    (out / "verdicts.parquet").mkdir(parents=True)
    (out / "summary.json").write_text("the previous run's")
    cancelled = []

    def half_way(session, paths, staging, *args):
        (staging / "verdicts.parquet").mkdir()
        (staging / "verdicts.parquet" / "part-0.parquet").write_text("half")
        raise Interrupted("SIGTERM") if failure == "SIGTERM" else OSError(errno.ENOSPC, "No space left on device", str(staging / "failing"))

    session = types.SimpleNamespace(sparkContext=types.SimpleNamespace(cancelAllJobs=lambda: cancelled.append(1)))
    monkeypatch.setattr(validate, "get_session", lambda *args: session)
    monkeypatch.setattr(validate, "write_outputs", half_way)
    result = CliRunner().invoke(main, ["validate-traces", str(sample.path()), "--out", str(out)])
    assert result.exit_code == 3 and result.output == {
        "SIGTERM": "interrupted (SIGTERM): stopped, adapters killed\n",
        "disk full": f"Error: cannot write {out}: No space left on device\n"}[failure]
    assert sorted(path.name for path in out.iterdir()) == ["summary.json", "verdicts.parquet"]
    assert (out / "summary.json").read_text() == "the previous run's" and cancelled == [1]


def test_a_line_naming_no_trace_counts_against_the_trace_before_it_even_across_a_split(tmp_path):
    """It may be that trace's lost last step; before any trace, and blank, it belongs to none."""
    path = tmp_path / "t.jsonl"
    lines = [b"garbage first", *sample.path().read_bytes().splitlines()[2:4], b"", b"garbage after a"]
    path.write_bytes(b"\n".join(lines) + b"\n")
    cut = len(b"\n".join(lines[:4])) + 1  # a split starting at the blank line, as a cut may fall anywhere
    rows = [*corpus.split_rows(str(path), 0, cut, 1), *corpus.split_rows(str(path), cut, path.stat().st_size, 5)]
    assert [(row["line"], row["trace"]) for row in rows] == [
        (1, None), (2, "mixed-0"), (3, "mixed-0"), (4, None), (5, "mixed-0")]
