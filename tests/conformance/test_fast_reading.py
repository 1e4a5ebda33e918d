"""The reader's fast paths say exactly what the slow ones say: a step line or a batch's answer checked against its
shape's schema is accepted exactly when the whole schema accepts it, with the same words when it is not; a line
decoded by orjson is the
json module's value, and the shared decoder is json.loads; the pause of the cycle collector is undone."""

import gc
import json
from unittest import mock

import fastjsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kpurgatory.conformance.check.strategies import runs
from kpurgatory.conformance.traces import codec
from kpurgatory.conformance.traces.codec import (ANSWERED, Fractional, Header, TraceFormatError,
                                                 answer_validator, collector_paused, command_validator,
                                                 decode_line, decode_text, event_kinds, json_value, loads,
                                                 model_trace, no_constant, shape_validator, step_line,
                                                 step_line_shape, validate, validator)
from kpurgatory.conformance.traces.replay import replay, scenarios
from kpurgatory.model import vocabulary as v

HEADER = ('{"trace":"t","seq":0,"header":{"format":"kpurgatory-trace","version":1,"profile":"purgatory",'
          '"params":{"tick_ms":1,"wheel_size":20,"start_ms":0,"purge_interval":1000},"implementation":"x"}}')
#: values that sit on the schema's edges: empty and non-empty strings, the 64-bit bounds, booleans (which are not
#: integers), whole numbers written with a fraction, null, empty containers
EDGES = st.sampled_from(["", "a", "k0", 0, 1, -1, 2, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, True, False,
                         None, [], ["k0"], [""], {}, Fractional(1.0), Fractional(0.5), "empty_keys",
                         "delay_out_of_range", "check", "expire", [1, 2], {"failure": "x"},
                         {"result": None, "events": []}])
JSON = st.recursive(EDGES | st.integers() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6)
TOP_KEYS = ("trace", "seq", "cmd", "args", "result", "events", "error", "thread", "invoked", "returned", "failure",
            "exec_ns", "system", "extra")
ARG_KEYS = ("task", "delay_ms", "op", "keys", "ready_on", "ready", "key", "to_ms", "extra")
EVENTS = [{"event": "complete", "op": "o1", "via": "check"}, {"event": ["run"], "task": "t1"}, {"event": "sneeze"}, {"event": "complete", "op": "o1", "via": "expire"},
          {"event": "expire", "op": "o1"}, {"event": "run", "task": "t1"}, {"event": "purge", "count": 2},
          {"event": "stale_try", "op": "o2"}]
EVENT_KEYS = ("event", "op", "via", "task", "count", "extra")


def as_read(trace_id: str, step) -> dict:
    """A step's line as the reader decodes it."""
    return decode_text(json.dumps(step_line(trace_id, step)))


#: a line of every kind: the scenario corpus has every command, event and read-out, and counterexamples
CORPUS = [as_read(trace.trace_id, step) for trace in scenarios().values() for step in trace.steps]


@st.composite
def step_lines(draw) -> dict:
    """A step line of the corpus, then a few edits: a top-level key, an argument or an event set to an edge value
    or removed, an event added, the command swapped; so both sides of every branch of the schema are reached."""
    line = json.loads(json.dumps(draw(st.sampled_from(CORPUS)), default=float), parse_float=Fractional)
    for _ in range(draw(st.integers(0, 3))):
        edit = draw(st.sampled_from(["top", "drop", "arg", "drop arg", "add event", "event", "cmd"]))
        value = draw(EDGES | JSON)
        if edit == "top":
            line[draw(st.sampled_from(TOP_KEYS))] = value
        elif edit == "drop" and line:
            del line[draw(st.sampled_from(sorted(line)))]
        elif edit == "arg" and isinstance(line.get("args"), dict):
            line["args"][draw(st.sampled_from(ARG_KEYS))] = value
        elif edit == "drop arg" and isinstance(line.get("args"), dict) and line["args"]:
            del line["args"][draw(st.sampled_from(sorted(line["args"])))]
        elif edit == "add event" and isinstance(line.get("events"), list):
            line["events"].append(dict(draw(st.sampled_from(EVENTS))))
        elif edit == "event" and isinstance(line.get("events"), list) and line["events"]:
            index = draw(st.integers(0, len(line["events"]) - 1))
            if isinstance(line["events"][index], dict) and draw(st.booleans()):
                line["events"][index][draw(st.sampled_from(EVENT_KEYS))] = value
            else:
                line["events"][index] = value
        elif edit == "cmd":
            line["cmd"] = draw(st.sampled_from(sorted(v.COMMANDS)))
    return line


def message(check, document) -> str | None:
    try:
        check(document)
    except fastjsonschema.JsonSchemaValueException as error:
        return error.message
    return None


def said(definition: str, document) -> str | None:
    """What `validate` says of ``document`` (None: nothing, it is valid)."""
    try:
        validate(definition, document)
    except ValueError as error:
        return str(error)
    return None


def as_validate_says(schema_message: str | None) -> str | None:
    """A schema's message as `validate` words it: without the leading ``data.``."""
    if schema_message is not None and schema_message.startswith("data."):
        return schema_message.replace("data.", "", 1)
    return schema_message


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_lines())
def test_a_shapes_schema_accepts_exactly_what_the_whole_schema_accepts(line):
    whole = message(validator("step_line"), line)
    shape = step_line_shape(line)
    event("shape" if shape is not None else "no shape")
    event("accepted" if whole is None else "rejected")
    if shape is not None:
        assert (message(shape_validator(*shape), line) is None) == (whole is None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_lines())
def test_validation_says_what_the_commands_schema_says(line):
    """The reader's words on a bad line are the ones it gave before shapes: its command's schema's."""
    cmd = line.get("cmd")
    known = isinstance(cmd, str) and cmd in v.COMMANDS
    before = message(command_validator("step_line", cmd) if known else validator("step_line"), line)
    assert said("step_line", line) == as_validate_says(before)


@st.composite
def batch_answers(draw) -> dict:
    """A batch's answer: a step line's result and events (edited as `step_lines` edits them), now and then with a
    key of the other answers (failure, hung, skipped) or another key, or without one of its own."""
    line = draw(step_lines())
    answer = {key: line[key] for key in ANSWERED if key in line}
    for _ in range(draw(st.integers(0, 2))):
        edit = draw(st.sampled_from(["add", "drop"]))
        if edit == "add":
            answer[draw(st.sampled_from(["failure", "hung", "skipped", "error", "extra"]))] = draw(EDGES | JSON)
        elif answer:
            del answer[draw(st.sampled_from(sorted(answer)))]
    return answer


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_answers())
def test_a_plain_answers_schema_accepts_exactly_what_the_whole_schema_accepts(answer):
    whole = message(validator("batch_answer"), answer)
    plain = answer.keys() == ANSWERED and (kinds := event_kinds(answer["events"])) is not None
    event("plain" if plain else "not plain")
    event("accepted" if whole is None else "rejected")
    if plain:
        assert (message(answer_validator(kinds), answer) is None) == (whole is None)
    assert said("batch_answer", answer) == as_validate_says(whole)


@settings(max_examples=30, deadline=None)
@given(runs())
def test_the_lines_of_model_traces_have_shapes(run):
    """The fast path is the common path: every line of the corpus and of model traces but a rejected command's (an
    error) and a counterexample's (the system's answer) has a shape whose schema accepts it."""
    profile, params, commands = run
    for trace in [*scenarios().values(), model_trace(Header("t", profile, params), commands)]:
        for step in trace.steps:
            if step.system is None and step.observation.error is None:
                line = as_read(trace.trace_id, step)
                shape = step_line_shape(line)
                assert shape is not None and message(shape_validator(*shape), line) is None, line


def typed(value: object) -> object:
    """A decoded JSON value with the type of every part spelled out (a Fractional is not a float, nor 1 True)."""
    if isinstance(value, dict):
        return "dict", [(key, typed(item)) for key, item in value.items()]
    if isinstance(value, list):
        return "list", [typed(item) for item in value]
    return type(value).__name__, repr(value)


def outcome(decode, raw: bytes) -> tuple:
    try:
        return "value", typed(decode(raw))
    except ValueError as error:
        return "error", str(error)


TEXTS = st.one_of(JSON.map(lambda value: json.dumps(value, default=float)), st.text(max_size=30),
                  st.sampled_from(["\ufeff{}", "NaN", "[Infinity]", "1e400", "-0", "1.0", "1E2", '{"a":1,"a":2}', "[1,",
                                   '"\\ud800"', '"\\u0000"', "1" * 5000, " 7 ", "18446744073709551616", "",
                                   "-9223372036854775809", "[" * 65 + "]" * 65, "[[]]" * 40, '"\x01"']))


@settings(max_examples=500, deadline=None)
@given(st.one_of(TEXTS.map(str.encode), st.binary(max_size=40),
                 st.tuples(TEXTS, st.binary(max_size=2), st.integers(0, 40)).map(
                     lambda drawn: drawn[0].encode()[:drawn[2]] + drawn[1] + drawn[0].encode()[drawn[2]:])))
def test_decoding_a_line_with_orjson_gives_what_the_json_module_gives(raw):
    """Value (every part's type included) or words: orjson's result stands only where it cannot differ."""
    def json_module_only(raw: bytes) -> object:
        with mock.patch.object(codec.orjson, "loads", side_effect=codec.orjson.JSONDecodeError("off", "", 0)):
            return decode_line(raw)

    assert outcome(decode_line, raw) == outcome(json_module_only, raw)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_the_shared_decoder_decodes_like_json_loads(text):
    def result(load) -> tuple:
        try:
            return "value", typed(load(text))
        except json.JSONDecodeError as error:
            return "not JSON", error.msg, error.colno
        except ValueError as error:
            return "error", str(error)

    assert result(json_value) == result(lambda text: json.loads(text, parse_float=Fractional,
                                                                 parse_constant=no_constant))


def test_a_line_whose_cmd_is_not_a_string_is_bad_input():
    line = '{"trace":"t","seq":1,"cmd":["check"],"args":{"key":"k"},"result":0,"events":[]}'
    with pytest.raises(TraceFormatError, match="^input.jsonl:2: cmd must be one of"):
        loads(HEADER + "\n" + line + "\n", "input.jsonl")


@pytest.mark.parametrize("enabled", [True, False])
def test_reading_and_replaying_leave_the_collector_as_they_found_it(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() == enabled
        assert replay(scenarios()["seed.cascade"]).ok
        assert gc.isenabled() == enabled
    finally:
        gc.enable()
