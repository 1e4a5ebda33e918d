"""The trace format: round trips, and every kind of bad input rejected with its line and field."""

import json
import re

import pytest
from hypothesis import given, settings

from kpurgatory.conformance.check.strategies import runs
from kpurgatory.conformance.traces.codec import Header, TraceFormatError, dumps, loads, model_trace

HEADER = ('{"trace":"t","seq":0,"header":{"format":"kpurgatory-trace","version":1,"profile":"purgatory",'
          '"params":{"tick_ms":1,"wheel_size":20,"start_ms":0,"purge_interval":1000},"implementation":"x"}}')


def step(seq=1, **fields):
    line = {"trace": "t", "seq": seq, "cmd": "check", "args": {"key": "k"}, "result": 0, "events": []}
    line.update(fields)
    return json.dumps(line)


@settings(max_examples=150)
@given(runs())
def test_model_traces_round_trip(run):
    profile, params, commands = run
    trace = model_trace(Header("t", profile, params), commands)
    assert loads(dumps(trace)) == [trace]


def test_many_traces_in_one_file_keep_their_order():
    text = HEADER + "\n" + HEADER.replace('"t"', '"u"') + "\n" + step() + "\n" + step(trace="u") + "\n"
    assert [(t.trace_id, len(t.steps)) for t in loads(text)] == [("t", 1), ("u", 1)]


@pytest.mark.parametrize("line, message", [
    (step(cmd="frobnicate"), "cmd must be one of"),
    (step(args={}), "args must contain ['key']"),
    (step(args={"key": 5}), "args.key must be string"),
    (step(result="zero"), "result must be integer"),
    (step(events=[{"event": "complete", "op": "o", "via": "magic"}]), "events[0].via must be one of"),
    (step(cmd="watch", args={"op": "o", "keys": ["k"], "delay_ms": 2**64}, result=False), "args.delay_ms"),
    (json.dumps({"trace": "t", "seq": 1, "cmd": "check", "args": {"key": "k"}, "events": []}), "contain ['result']"),
    (step(seq=2), "seq 2 where 1 was expected"),
    (step(trace="other"), "step before its header"),
    ("{not json", "not JSON"),
    ("[1, 2]", "must be a JSON object"),
    (HEADER, "second header"),
])
def test_bad_lines_are_rejected_with_line_and_field(line, message):
    with pytest.raises(TraceFormatError) as caught:
        loads(HEADER + "\n" + line + "\n", "input.jsonl")
    assert str(caught.value).startswith("input.jsonl:2: ")
    assert message in str(caught.value)


def test_unsupported_version_is_rejected():
    with pytest.raises(TraceFormatError, match="input.jsonl:1: header.version must be"):
        loads(HEADER.replace('"version":1', '"version":2'), "input.jsonl")


def test_an_empty_input_has_no_trace():
    with pytest.raises(TraceFormatError, match="^empty.jsonl: empty input"):
        loads("", "empty.jsonl")


def test_a_blank_line_is_rejected():
    with pytest.raises(TraceFormatError, match="^blank.jsonl:1: blank line"):
        loads("\n\n", "blank.jsonl")


def test_params_outside_the_models_domain_are_rejected_with_the_line():
    big = HEADER.replace('"tick_ms":1,"wheel_size":20', '"tick_ms":9223372036854775807,"wheel_size":2')
    with pytest.raises(TraceFormatError, match="input.jsonl:1: header.params: tick_ms \\* wheel_size"):
        loads(big, "input.jsonl")


@pytest.mark.parametrize("line", [
    step(args={}), step(args={"key": 5}), step(result="zero"), step(cmd="watch", args={"op": "o", "keys": []}),
    step(events=[{"event": "complete", "op": "o", "via": "magic"}]), step(cmd="advance", args={"to_ms": 1.0}),
    step(cmd="wheel", args={}, result=[[1, 2]]), step(cmd="timer_add", args={"task": "a", "delay_ms": 1}, result=3),
    step(cmd="frobnicate"), step(extra=1),
])
def test_checking_a_line_against_its_commands_schema_says_what_the_whole_schema_says(line):
    """Each line is validated against its own command's part of the schema only (faster); the verdict and the words
    must be the whole schema's."""
    import fastjsonschema

    from kpurgatory.conformance.traces.codec import decode_text, validate, validator

    document = decode_text(line)
    with pytest.raises(fastjsonschema.JsonSchemaValueException) as whole:
        validator("step_line")(document)
    with pytest.raises(ValueError) as ours:
        validate("step_line", document)
    assert str(ours.value) == whole.value.message.removeprefix("data.")


def padded_step(length: int) -> bytes:
    """A valid step line of exactly ``length`` bytes."""
    line = step(args={"key": ""}).encode()
    return line.replace(b'"key": ""', b'"key": "' + b"k" * (length - len(line)) + b'"')


@pytest.mark.parametrize("read", ["file", "split"])
def test_a_line_over_the_limit_is_rejected_before_it_is_held_in_memory(tmp_path, read):
    """replay's reader (`read_traces`) and validate-traces' (`corpus.split_rows`) read a line at a time: one of
    exactly MAX_LINE_BYTES is read, one byte more is rejected, and a line far over the limit is skipped in pieces:
    reading holds what a line at the limit needs, never the whole line."""
    import tracemalloc

    from kpurgatory.conformance.spark import corpus
    from kpurgatory.conformance.spark.validate import Rejected, decode
    from kpurgatory.conformance.traces.codec import MAX_LINE_BYTES, TOO_LONG, read_traces

    def outcome(content: bytes) -> tuple[str, int]:
        path = tmp_path / "trace.jsonl"
        path.write_bytes(content)
        del content
        tracemalloc.start()
        try:
            if read == "file":
                try:
                    read_traces(path)
                    reason = "ok"
                except TraceFormatError as error:
                    reason = error.reason
            else:
                [row] = [row for row in corpus.split_rows(str(path), 0, path.stat().st_size, 1) if row["line"] == 2]
                try:
                    decode(row, {})
                    reason = "ok"
                except Rejected as error:
                    reason = str(error)
            return reason, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    at_limit = HEADER.encode() + b"\n" + padded_step(MAX_LINE_BYTES) + b"\r\n"
    assert outcome(at_limit)[0] == "ok"
    over = HEADER.encode() + b"\n" + padded_step(MAX_LINE_BYTES + 1) + b"\n"
    assert outcome(over)[0].endswith(TOO_LONG)
    far_over = HEADER.encode() + b"\n" + b"[" * (4 * MAX_LINE_BYTES) + b"\n" + step(2).encode() + b"\n"
    reason, peak = outcome(far_over)
    assert reason.endswith(TOO_LONG) and peak < 2.5 * MAX_LINE_BYTES, peak


def test_gzip_input_is_named_as_such():
    import gzip

    from kpurgatory.conformance.traces.codec import GZIPPED

    with pytest.raises(TraceFormatError, match=f"^trace.jsonl.gz:1: {re.escape(GZIPPED)}$"):
        loads(gzip.compress((HEADER + "\n" + step() + "\n").encode()), "trace.jsonl.gz")


def test_a_json_message_ending_in_at_is_not_followed_by_another_at():
    with pytest.raises(TraceFormatError, match=r"^t:2: not JSON: Unterminated string starting at column 10$"):
        loads(HEADER + '\n{"trace":"t\n', "t")
