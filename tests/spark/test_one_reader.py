"""One reader: every piece of bad input gets the same verdict from `kpurgatory replay` and `validate-traces` — the
same line, the same reason word for word, exit 2 from both, and no trace of a rejected file passing. Good input that
naive line splitting or float handling gets wrong (a raw U+2028 inside a string, CRLF line ends) passes both."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.spark import corpus
from kpurgatory.conformance.spark.validate import RESULT_SCHEMA, validate_batches
from kpurgatory.conformance.traces import codec


def header(trace: str) -> str:
    return json.dumps({"trace": trace, "seq": 0, "header": {
        "format": "kpurgatory-trace", "version": 1, "profile": "timer",
        "params": {"tick_ms": 1, "wheel_size": 20, "start_ms": 0}, "implementation": "x"}})


def step(trace: str, seq: int = 1, **fields) -> str:
    line = {"trace": trace, "seq": seq, "cmd": "timer_add", "args": {"task": "a", "delay_ms": 8}, "result": None,
            "events": []}
    line.update(fields)
    return json.dumps(line)


def lines(*items: str, end: bytes = b"\n") -> bytes:
    return "\n".join(items).encode() + end


#: name -> (file content, the bad line's number or None for good input; 0 for an input without lines). A bad line
#: that names no trace is followed by the step after it, so its trace shows a gap: a line lost, whatever it was.
CASES = {
    "empty": (b"", 0),
    "blank-line": (lines(header("blank-line"), "", step("blank-line", 1)), 2),
    "truncated-last-line": (lines(header("truncated-last-line"), step("truncated-last-line"), header("cut")[:40],
                                  end=b""), 3),
    "seq-float": (lines(header("seq-float"), step("seq-float", seq=1.0)), 2),
    "delay-float": (lines(header("delay-float"), step("delay-float", args={"task": "a", "delay_ms": 8.0})), 2),
    "delay-exponent": (lines(header("delay-exponent"),
                             step("delay-exponent").replace('"delay_ms": 8', '"delay_ms": 8e0')), 2),
    "nan": (lines(header("nan"), step("nan").replace('"result": null', '"result": NaN'), step("nan", 2)), 2),
    "deep": (lines(header("deep"), "[" * 100_000 + "]" * 100_000, step("deep", 2)), 2),
    "deep-in-a-field": (lines(header("deep-in-a-field"), step("deep-in-a-field", result=0).replace(
        '"result": 0', '"result": ' + "[" * 1000 + "]" * 1000), step("deep-in-a-field", 2)), 2),
    "too-long": (lines(header("too-long"), step("too-long", args={"task": "a" * codec.MAX_LINE_BYTES,
                                                                  "delay_ms": 8}), step("too-long", 2)), 2),
    "not-utf8": (lines(header("not-utf8")) + b'{"trace": "not-utf8", "seq": 1, \xff}\n' + lines(step("not-utf8", 2)),
                 2),
    "not-json": (lines(header("not-json"), "{this is not json", step("not-json", 2)), 2),
    "huge-integer": (lines(header("huge-integer"), step("huge-integer").replace('"delay_ms": 8', '"delay_ms": '
                                                                                 + "9" * 5000),
                           step("huge-integer", 2)), 2),
    "u2028-in-a-string": (lines(header("u2028-in-a-string"), step("u2028-in-a-string", args={
        "task": "a\u2028b", "delay_ms": 8}).replace("\\u2028", "\u2028")), None),
    "crlf": (lines(header("crlf"), step("crlf")).replace(b"\n", b"\r\n"), None),
    # a lone surrogate is valid JSON: every output must hold it
    "lone-surrogate": (lines(header("lone\ud800sur"), step("lone\ud800sur", args={"task": "t\udc00", "delay_ms": 8})),
                       None),
    # a last line that names no trace: the trace before it may have lost its last step there
    "garbage-last-line": (lines(header("garbage-last-line"), step("garbage-last-line"), "garbage"), 3),
    "deep-last-line": (lines(header("deep-last-line"), "[" * 100 + "]" * 100), 2),
    "one-byte-too-long": (lines(header("one-byte-too-long"), "x" * (codec.MAX_LINE_BYTES + 1)), 2),
    "gzip": (gzip.compress(lines(header("gzip"), step("gzip"))), 1),
}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad-inputs")
    for name, (content, _) in CASES.items():
        (folder / f"{name}.jsonl").write_bytes(content)
    return folder


def replay_outcome(path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["replay", str(path)])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr


def expected_replay(name: str, path, code: int, stderr: str) -> str:
    """replay's verdict on a case: exit 2 and `path:line: reason` for bad input (the reason is returned), exit 0
    for good input."""
    bad_line = CASES[name][1]
    if bad_line is None:
        assert (code, stderr) == (0, ""), (name, stderr)
        return ""
    assert code == 2, (name, code, stderr)
    where = f"Error: {path}: " if bad_line == 0 else f"Error: {path}:{bad_line}: "
    assert stderr.startswith(where), (name, stderr[:300])
    assert "Traceback" not in stderr
    return stderr.removeprefix(where).rstrip("\n")


def python_validation(path) -> list[dict]:
    """What validate-traces' executor code makes of one file, without Spark."""
    splits, count = corpus.line_splits(str(path), 4096)
    plan = pa.RecordBatch.from_pylist([dict(zip(("path", "start", "end", "first"), split)) for split in splits])
    table = pa.Table.from_batches(corpus.read_splits([plan]), corpus.INPUT_SCHEMA).sort_by(
        [(name, "ascending") for name in ("trace", "seq", "source", "line")])
    cut = corpus.truncated_end(str(path), count)
    truncated = {str(path): cut} if cut else {}
    return pa.Table.from_batches(validate_batches(table.to_batches(), "exact", truncated),
                                 RESULT_SCHEMA).to_pylist()


def assert_same_verdict(name: str, replay_reason: str, verdicts: list[dict], quarantine: list[dict]) -> None:
    bad_line = CASES[name][1]
    if bad_line is None:
        assert quarantine == [] and [row["verdict"] for row in verdicts] == ["pass"], (name, quarantine)
        return
    if name != "blank-line":  # a blank line loses nothing: the trace around it is still judged
        assert verdicts == [], (name, verdicts)  # replay rejects the file: no trace of it may pass
    at_line = [row for row in quarantine if row["line"] == max(bad_line, 1)]
    assert [row["reason"] for row in at_line] == [replay_reason], (name, at_line)


@pytest.mark.parametrize("name", CASES)
def test_replay_and_the_validators_code_agree_on_each_case(name, corpus_dir):
    path = (corpus_dir / f"{name}.jsonl").resolve()
    reason = expected_replay(name, path, *replay_outcome(path))
    rows = python_validation(path)
    assert_same_verdict(name, reason, [r for r in rows if r["kind"] == "verdict"],
                        [r for r in rows if r["kind"] == "quarantine"])


@pytest.mark.spark
def test_validate_traces_gives_each_case_replays_verdict_in_one_job(spark, corpus_dir, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["validate-traces", str(corpus_dir), "--out", str(out)])
    assert result.exit_code == 2, result.output  # rows were quarantined, nothing failed, the job finished
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input_rows"] == summary["checked_rows"] + summary["quarantined_rows"]
    verdicts = pq.read_table(out / "verdicts.parquet").to_pylist()
    quarantine = pq.read_table(out / "quarantine.parquet").to_pylist()
    for name in CASES:
        path = str((corpus_dir / f"{name}.jsonl").resolve())
        reason = expected_replay(name, path, *replay_outcome(path))
        assert_same_verdict(name, reason, [r for r in verdicts if r["source"] == path],
                            [r for r in quarantine if r["source"] == path])


def test_validate_traces_on_an_empty_folder_says_so_before_starting_spark(tmp_path, monkeypatch):
    import kpurgatory.conformance.spark.validate as validate

    monkeypatch.setattr(validate, "get_session", lambda *args: pytest.fail("started Spark"))
    result = CliRunner().invoke(main, ["validate-traces", str(tmp_path)])
    assert result.exit_code == 2 and "no input files found" in result.stderr
