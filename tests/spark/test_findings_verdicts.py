"""validate-traces names Kafka findings as replay and check do: a recording of Kafka's own timer where its arithmetic
wraps gets the verdict ``finding`` and the finding's name (a Parquet column, counted by name in the summary), passes
unless findings fail, and a real divergence next to it is still a failure."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.spark import corpus
from kpurgatory.conformance.spark.validate import validate_batches
from kpurgatory.conformance.traces.codec import Header, Step, Trace, dumps, model_trace
from kpurgatory.model import vocabulary as v

PARAMS = v.Params(1, 20, 10, 1000)
KAFKA = "Apache Kafka 3.9.0 (SystemTimer)"


def small_corpus(folder) -> str:
    """One trace that agrees with the model, one recording of Kafka doing what Kafka does at the end of the clock
    (now + delay wraps negative: the task runs at once, where the model rejects the deadline), one that runs a near
    task at once (no Kafka does)."""
    agrees = model_trace(Header("agrees", "timer", PARAMS), [v.TimerAdd("t", 5), v.Advance(15)])
    wraps = Trace(Header("kafka.wraps", "timer", PARAMS, implementation=KAFKA), [
        Step(1, v.TimerAdd("t", 5), v.Observation()),
        Step(2, v.TimerAdd("far", v.LONG_MAX), v.Observation(events=(v.Run("far"),)))])
    early = Trace(Header("kafka.early", "timer", PARAMS, implementation=KAFKA), [
        Step(1, v.TimerAdd("t", 5), v.Observation(events=(v.Run("t"),)))])
    path = folder / "corpus.jsonl"
    path.write_text(dumps([agrees, wraps, early]))
    return path


def verdicts(rows) -> dict[str, tuple[str, str | None]]:
    return {row["trace"]: (row["verdict"], row["finding"]) for row in rows if row["kind"] == "verdict"}


EXPECTED = {"agrees": ("pass", None), "kafka.wraps": ("finding", "deadline-wraps"), "kafka.early": ("fail", None)}


def test_each_trace_is_judged_with_the_finding_it_is(tmp_path):
    lines = small_corpus(tmp_path).read_text().splitlines()
    plan = pa.RecordBatch.from_pylist([dict(zip(("path", "start", "end", "first"), split))
                                       for split in corpus.line_splits(str(tmp_path / "corpus.jsonl"), 4096)[0]])
    table = pa.Table.from_batches(corpus.read_splits([plan]), corpus.INPUT_SCHEMA).sort_by(
        [(name, "ascending") for name in ("trace", "seq", "source", "line")])
    assert table.num_rows == len(lines)
    assert verdicts(pa.Table.from_batches(validate_batches(table.to_batches(), "exact")).to_pylist()) == EXPECTED


@pytest.mark.spark
def test_validate_traces_counts_findings_by_name_and_passes_them_unless_asked(spark, tmp_path):
    path = small_corpus(tmp_path)
    only_finding = tmp_path / "kafka-only.jsonl"
    only_finding.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                                    if '"kafka.early"' not in line))
    run = CliRunner().invoke(main, ["validate-traces", str(path), "--out", str(tmp_path / "all")],
                             terminal_width=120)
    assert run.exit_code == 1, run.output  # the real divergence fails the run
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert summary["verdicts"] == {"pass": 1, "fail": 1, "finding": 1}
    assert summary["findings"] == {"deadline-wraps": 1}
    assert "Kafka findings" in run.output and "deadline-wraps" in run.output
    table = pq.read_table(tmp_path / "all" / "verdicts.parquet").to_pylist()
    assert verdicts([{**row, "kind": "verdict"} for row in table]) == EXPECTED
    assert [row["failing_seq"] for row in table if row["trace"] == "kafka.wraps"] == [2]
    assert sorted(p.name for p in (tmp_path / "all" / "failing").glob("*.jsonl")) == ["kafka.early.jsonl"]
    passing = CliRunner().invoke(main, ["validate-traces", str(only_finding), "--out", str(tmp_path / "kafka")])
    assert passing.exit_code == 0, passing.output
    failing = CliRunner().invoke(main, ["validate-traces", str(only_finding), "--out", str(tmp_path / "strict"),
                                        "--fail-on-findings"])
    assert failing.exit_code == 1, failing.output
