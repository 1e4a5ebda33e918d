"""The trace format: JSON Lines, one command and its observation per line (specs/protocol.md, §Traces).

    {"trace": "seed", "seq": 0, "header": {"format": "kpurgatory-trace", "version": 1, "profile": "timer",
                                           "params": {...}, "implementation": "kpurgatory.model"}}
    {"trace": "seed", "seq": 1, "cmd": "timer_add", "args": {"task": "a", "delay_ms": 8}, "result": null, "events": []}

A step line is a protocol request (cmd, args) merged with its response (result, events, error), so traces, the
subprocess protocol, the Spark pipeline and z3 counterexamples share one codec: this module. Every line is checked
against specs/kpurgatory.schema.json; a bad line is reported with its file, line number and the field at fault.

Reading is the same for every reader (replay, validate-traces, check-history, the adapter harness), since traces and
adapter output are untrusted: `split_lines` cuts at ``\n`` only (a raw U+2028 inside a string is content, not a line
break; a ``\r`` before the ``\n`` is dropped; `file_lines` does the same reading a file, and skips a line over the
limit without holding it), and `decode_line` turns one line into JSON within the limits (`MAX_LINE_BYTES`,
`MAX_DEPTH`), with JSON integers only: ``1.0`` or ``1e3`` where the schema asks for an integer is rejected naming the
field, like any other wrong type. An empty input, a blank line and a last line cut short (no
newline, and not JSON) are input errors with one wording everywhere.

Any string JSON can carry is a valid trace string, lone surrogates too (``"\\ud800"``), though UTF-8 cannot encode
them: every output that must be UTF-8 (Parquet, JSON, HTML, the terminal) spells one as JSON does, ``\\ud800``
(`utf8_safe`), while the trace files written keep the string itself.

A *concurrent history* is a trace too: its header says how many ``threads`` ran at once, and each step carries its
`Timing` (the thread, the logical times of invocation and return, and the failure if the system raised). Its steps
are numbered in order of invocation; they cannot be replayed one after the other, only checked
(`kpurgatory.conformance.check.concurrent`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.resources
import json
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

import attrs
import fastjsonschema
import orjson

from kpurgatory.model import CommandError, Model
from kpurgatory.model.contract import KAFKA, Declarations
from kpurgatory.model.machine import validate_params
from kpurgatory.model import vocabulary as v

FORMAT = "kpurgatory-trace"
VERSION = 1
#: the ``implementation`` of a trace whose observations are the model's own (a test vector)
MODEL = "kpurgatory.model"

#: the longest line any reader accepts (a wheel read-out of a large run is the biggest legitimate one)
MAX_LINE_BYTES = 16 * 2**20
#: the deepest nesting of arrays and objects accepted; a trace line needs 4 (events in a wheel read-out)
MAX_DEPTH = 64
EMPTY_INPUT = "empty input: a trace starts with its header line"
GZIP_MAGIC = b"\x1f\x8b"
GZIPPED = "gzip-compressed input: decompress it first (gunzip)"
BLANK_LINE = "blank line"
TOO_LONG = f"line longer than {MAX_LINE_BYTES:,} bytes"
TRUNCATED = "the input ends in a truncated line (no newline after it)"


class TraceFormatError(ValueError):
    """Input that is not a valid trace; the message names where (file:line) and what (the field)."""

    def __init__(self, message: str, source: str = "<trace>", line: int | None = None):
        self.source, self.line, self.reason = source, line, message
        super().__init__(f"{source}:{line}: {message}" if line is not None else f"{source}: {message}")


# ---------------------------------------------------------------------------------------------------------------
# Lines -> JSON, within the limits
# ---------------------------------------------------------------------------------------------------------------


class Fractional(float):
    """A JSON number written with a fraction or an exponent. The schema's "integer" accepts a float that is whole
    (``1.0``) and a const or enum compares it with ``==``; the protocol wants JSON integers, so this one never
    claims to be whole and equals only itself."""

    def is_integer(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = float.__hash__


def no_constant(name: str) -> None:
    raise ValueError(f"not JSON: {name} is not a JSON value")


STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')
BRACKET = re.compile(r"[\[\]{}]")


def too_deep(text: str) -> bool:
    """Arrays and objects nest deeper than `MAX_DEPTH` in this JSON text (brackets inside strings do not count).
    Checked before parsing: Python's parser recurses, and a line of 100,000 ``[`` would exhaust its stack."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # the common case, at C speed
        return False
    depth = 0
    for bracket in BRACKET.findall(STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_DEPTH:
            return True
    return False


#: JSON integers stay integers, other numbers are `Fractional`, NaN and Infinity are rejected
DECODER = json.JSONDecoder(parse_float=Fractional, parse_constant=no_constant)


def json_value(text: str) -> object:
    """``json.loads(text, parse_float=Fractional, parse_constant=no_constant)``, without making a decoder per call."""
    if text.startswith("\ufeff"):  # json.loads's check, which the decoder itself leaves out
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return DECODER.decode(text)


def decode_text(text: str) -> object:
    """One line (without its newline) -> its JSON value; ValueError says what is wrong with it."""
    if len(text) * 4 > MAX_LINE_BYTES and len(text.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
        raise ValueError(TOO_LONG)
    if not text.strip():
        raise ValueError(BLANK_LINE)
    if too_deep(text):
        raise ValueError(f"arrays and objects nested deeper than {MAX_DEPTH} levels")
    try:
        return json_value(text)
    except json.JSONDecodeError as error:
        # some messages end in "at" ("Unterminated string starting at")
        raise ValueError(f"not JSON: {error.msg.removesuffix(' at')} at column {error.colno}") from None
    except ValueError as error:  # an integer with more digits than Python converts
        raise ValueError(str(error) if str(error).startswith("not JSON") else f"not JSON: {error}") from None


def has_float(value: object) -> bool:
    """A float anywhere in this decoded JSON value."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return kind is float
    for item in value.values() if kind is dict else value:
        kind = type(item)
        if kind is float or (kind is dict or kind is list) and has_float(item):
            return True
    return False


def decode_line(raw: bytes) -> object:
    """`decode_text` for a line of bytes, which must be UTF-8.

    orjson decodes a line several times faster than the json module. What it returns stands when it cannot differ:
    the line cannot nest too deep (few brackets), and holds no float (a number written with a fraction or an
    exponent, or an integer beyond 64 bits, which orjson turns into a float). Anything else, including every line
    orjson rejects, goes the json module's way, for its value and its words."""
    if len(raw) > MAX_LINE_BYTES:
        raise ValueError(TOO_LONG)
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if not has_float(document):
                return document
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if raw.startswith(GZIP_MAGIC):
            raise ValueError(GZIPPED) from None
        raise ValueError(f"not UTF-8: byte {error.start + 1} ({raw[error.start:error.start + 1]!r})") from None
    return decode_text(text)


def split_lines(data: bytes) -> tuple[list[bytes], bool]:
    """JSON Lines -> its lines (without ``\n`` or ``\r\n``), and whether the last one lacks its newline."""
    lines = data.split(b"\n")
    unterminated = lines[-1] != b""
    if not unterminated:
        lines.pop()
    return [line.removesuffix(b"\r") for line in lines], unterminated


def file_lines(file, end: int | None = None) -> Iterator[tuple[bytes | None, bool]]:
    """`split_lines` for a binary file read from where it is up to ``end`` (a line boundary) or its end, holding one
    line at a time: (each line without its newline, or None for a line longer than `MAX_LINE_BYTES`, which is skipped
    unread; whether it ended in a newline)."""
    while end is None or file.tell() < end:
        line = file.readline(MAX_LINE_BYTES + 3)  # the newline and a \r before it, and one byte too many
        if not line:
            return
        terminated = line.endswith(b"\n")
        if len(line) > MAX_LINE_BYTES + 2 or not terminated and len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):
                line = file.readline(1 << 20)
            yield None, line.endswith(b"\n")
            continue
        yield line.removesuffix(b"\n").removesuffix(b"\r"), terminated


def decode_last(raw: bytes) -> object:
    """`decode_line` for a last line without its newline: one that is not JSON was cut short (or compressed)."""
    try:
        return decode_line(raw)
    except ValueError as error:
        raise ValueError(str(error) if str(error) == GZIPPED else f"{TRUNCATED}: {error}") from None


#: a lone surrogate, as a Python string holds one (an astral character is one code point, never a pair)
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_spelling(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def utf8_safe(text: str) -> str:
    """``text`` with each lone surrogate spelled ``\\udxxx``, as JSON and the terminal spell it: any trace string
    can then be written as UTF-8."""
    return text if text.isascii() else LONE_SURROGATE.sub(surrogate_spelling, text)


# ---------------------------------------------------------------------------------------------------------------
# The schema
# ---------------------------------------------------------------------------------------------------------------


@functools.cache
def schema() -> dict:
    return json.loads(importlib.resources.files("kpurgatory.specs").joinpath("kpurgatory.schema.json").read_text())


@functools.cache
def validator(definition: str):
    """A compiled validator for one of the schema's $defs (header_line, step_line, request, response, ...)."""
    return fastjsonschema.compile({**schema(), "$ref": f"#/$defs/{definition}"})


#: the $defs that branch on ``cmd``, one ``if cmd == X then ...`` per command
PER_COMMAND = ("command_shape", "observation_shape")


def for_command(whole: dict, cmd: str) -> dict:
    """The schema's $defs with the per-command branches cut to ``cmd``'s: for a document whose ``cmd`` is ``cmd``
    they say exactly what the whole schema says (the other branches never apply)."""
    return {**whole["$defs"], **{name: {"allOf": [branch for branch in whole["$defs"][name]["allOf"]
                                                 if branch["if"]["properties"]["cmd"]["const"] == cmd]}
                                 for name in PER_COMMAND}}


@functools.cache
def command_validator(definition: str, cmd: str):
    """`validator` for documents whose ``cmd`` is ``cmd``, several times faster; its messages are the whole schema's."""
    whole = schema()
    return fastjsonschema.compile({**whole, "$defs": for_command(whole, cmd), "$ref": f"#/$defs/{definition}"})


# A step line's conditional parts hinge on keys most lines lack (a concurrent history's timing, a counterexample's
# system answer, an error), and each event's on its kind; fastjsonschema evaluates every ``if`` by raising and
# catching an exception. So a plain step line (the required keys and no other) is first checked against the schema
# with the branches its cmd and the kinds of its events decide cut away: for such a line it accepts exactly what the
# whole schema accepts, at a fraction of the cost; a batch's plain answer (a result and events) likewise, against the
# answering branch cut to its events' kinds. Anything else, and a document its shape's schema rejects, is checked as
# above, for the whole schema's words.


def fails_for_lack_of_keys(condition: dict, keys: frozenset[str]) -> bool:
    """The ``if`` ``condition``, applied to an object with exactly ``keys``, fails: it requires a key the object lacks.
    (Every keyword of a schema must hold, so one failing ``required``, an ``anyOf`` whose branches all fail, or an
    ``allOf`` with one that fails, decides it.)"""
    return (any(key not in keys for key in condition.get("required", ()))
            or ("anyOf" in condition and all(fails_for_lack_of_keys(c, keys) for c in condition["anyOf"]))
            or any(fails_for_lack_of_keys(c, keys) for c in condition.get("allOf", ())))


def decided(definition: dict, decide) -> dict:
    """``definition`` with each ``if``/``then``/``else`` of its ``allOf`` that ``decide`` settles (True: its condition
    holds, False: it fails, None: not known) replaced by the branch that applies, or dropped when there is none."""
    if "allOf" not in definition:
        return definition
    branches = []
    for branch in definition["allOf"]:
        holds = decide(branch["if"]) if "if" in branch else None
        applies = branch if holds is None else branch.get("then" if holds else "else")
        if applies is not None:
            branches.append(applies)
    return {**definition, "allOf": branches}


@functools.cache
def plain_keys() -> frozenset[str]:
    """The keys of a plain step line: the ones every step line has."""
    return frozenset(schema()["$defs"]["step_line"]["required"])


def step_line_shape(document: dict) -> tuple[str, frozenset[str]] | None:
    """A plain step line's cmd and the kinds of its events; None for any other document (other keys, an unknown cmd,
    events that are not a list of objects of known kinds), which the command's schema checks."""
    cmd = document.get("cmd")
    if type(cmd) is not str or cmd not in v.COMMANDS or document.keys() != plain_keys():
        return None
    kinds = event_kinds(document["events"])
    return None if kinds is None else (cmd, kinds)


def event_kinds(events: object) -> frozenset[str] | None:
    """The kinds of ``events``; None unless it is a list of objects of known kinds."""
    if type(events) is not list:
        return None
    kinds = set()
    for event in events:
        if type(event) is not dict or type(kind := event.get("event")) is not str or kind not in v.EVENTS:
            return None
        kinds.add(kind)
    return frozenset(kinds)


def by_kind(kinds: frozenset[str]):
    """Decides an event's ``if`` (`decided`) for events of ``kinds`` only."""
    def decide(condition: dict) -> bool | None:
        kind = condition["properties"]["event"]["const"]
        return False if kind not in kinds else True if kinds == {kind} else None
    return decide


@functools.cache
def shape_validator(cmd: str, kinds: frozenset[str]):
    """The step line schema for plain lines of one shape (`step_line_shape`): only the branches it leaves open."""
    def by_keys(condition: dict) -> bool | None:
        return False if fails_for_lack_of_keys(condition, plain_keys()) else None

    def by_cmd(condition: dict) -> bool:
        return condition["properties"]["cmd"]["const"] == cmd

    whole = schema()
    defs = for_command(whole, cmd)
    defs["step_line"] = decided(defs["step_line"], by_keys)
    defs.update({name: decided(defs[name], by_cmd) for name in PER_COMMAND})
    defs["event"] = decided(defs["event"], by_kind(kinds))
    return fastjsonschema.compile({**whole, "$defs": defs, "$ref": "#/$defs/step_line"})


#: the keys of a batch's plain answer: one that answered, not a failure, a hang or a skip
ANSWERED = frozenset({"result", "events"})


@functools.cache
def answer_validator(kinds: frozenset[str]):
    """The schema of a batch's plain answer with events of ``kinds``: the branch of ``batch_answer`` for answers
    (the others each require a key it lacks), with the event branches its kinds decide cut away."""
    whole = schema()
    answered, = [branch for branch in whole["$defs"]["batch_answer"]["oneOf"] if set(branch["required"]) <= ANSWERED]
    defs = {**whole["$defs"], "event": decided(whole["$defs"]["event"], by_kind(kinds)), "batch_answer": answered}
    return fastjsonschema.compile({**whole, "$defs": defs, "$ref": "#/$defs/batch_answer"})


def validate(definition: str, document: object) -> None:
    """Raise ValueError naming the field at fault ("data.args.delay_ms must be integer"). A document with a known
    ``cmd`` is checked against that command's part of the schema only; a plain step line or batch answer, against
    its shape's."""
    if definition == "step_line" and type(document) is dict and (shape := step_line_shape(document)) is not None:
        try:
            shape_validator(*shape)(document)
            return
        except fastjsonschema.JsonSchemaValueException:
            pass  # the words come from the command's schema
    if (definition == "batch_answer" and type(document) is dict and document.keys() == ANSWERED
            and (kinds := event_kinds(document["events"])) is not None):
        try:
            answer_validator(kinds)(document)
            return
        except fastjsonschema.JsonSchemaValueException:
            pass  # the words come from the whole schema
    cmd = document.get("cmd") if isinstance(document, dict) else None
    try:
        (command_validator(definition, cmd) if isinstance(cmd, str) and cmd in v.COMMANDS else
         validator(definition))(document)
    except fastjsonschema.JsonSchemaValueException as error:
        raise ValueError(error.message.replace("data.", "", 1) if error.message.startswith("data.") else
                         error.message) from None


# ---------------------------------------------------------------------------------------------------------------
# Commands, events and observations <-> JSON
# ---------------------------------------------------------------------------------------------------------------


def command_to_json(command: v.Command) -> dict:
    args = {field.name: getattr(command, field.name) for field in attrs.fields(type(command))}
    if isinstance(command, v.Watch):
        args = {name: value for name, value in args.items() if value is not None}
        args["keys"] = list(command.keys)
    if isinstance(command, v.SetReady) and command.ready:
        del args["ready"]  # the default: set_ready lines written before ready:false existed read the same
    return {"cmd": command.name, "args": args}


def command_from_json(cmd: str, args: dict) -> v.Command:
    """``args`` must already satisfy the schema."""
    return v.COMMANDS[cmd](**args)


def event_to_json(event: v.Event) -> dict:
    return {"event": event.kind, **attrs.asdict(event)}


def event_from_json(document: dict) -> v.Event:
    fields = dict(document)
    return v.EVENTS[fields.pop("event")](**fields)


def observation_to_json(observation: v.Observation) -> dict:
    document = {"result": observation.result, "events": [event_to_json(e) for e in observation.events]}
    if observation.error is not None:
        document["error"] = observation.error
    return document


def observation_from_json(document: dict) -> v.Observation:
    return v.Observation(
        result=document.get("result"),
        events=tuple(map(event_from_json, document.get("events", ()))),
        error=document.get("error"),
    )


# ---------------------------------------------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Header:
    trace_id: str
    profile: str
    params: v.Params
    implementation: str = MODEL
    description: str | None = None
    #: a concurrent history: how many threads called the system at once (None: a sequential trace)
    threads: int | None = None
    #: what the system whose behaviour the trace is about promised (its hello's), so a replay judges it alike
    declarations: Declarations = KAFKA
    #: a test vector's header (specs/vectors.md): its kind, the coverage items it reaches, its finding and rule
    vector: dict | None = attrs.field(default=None, hash=False)
    #: a concurrent history run under a controlled scheduler: the interleaving, which replays it
    schedule: Schedule | None = None


@attrs.frozen
class Schedule:
    """The interleaving of a run under a controlled scheduler (`kpurgatory.conformance.check.scheduler`):
    ``strategy`` and ``seed`` chose it, switching where ``granularity`` let it; ``switches`` are
    ``(round, point, thread)``: at the ``point``-th
    synchronisation point (from 1) of round ``round`` (from 0), ``thread`` went on instead of the default one (the
    running thread while it could go on, else the first ready one). ``rounds`` lists, per round, the seqs of its
    calls; each ran on a thread of its own, numbered from 0 in that order (the drain's calls follow, a round of one
    thread)."""

    strategy: str
    seed: int
    switches: tuple[tuple[int, int, int], ...] = attrs.field(converter=lambda items: tuple(map(tuple, items)))
    rounds: tuple[tuple[int, ...], ...] = attrs.field(default=(), converter=lambda rounds: tuple(map(tuple, rounds)))
    #: where threads could switch: ``sync`` (locks, the compare-and-set, waits) or ``calls`` (function calls too)
    granularity: str = "sync"

    def to_json(self) -> dict:
        return {"strategy": self.strategy, "seed": self.seed, "granularity": self.granularity,
                "switches": [list(switch) for switch in self.switches], "rounds": [list(seqs) for seqs in self.rounds]}

    @classmethod
    def from_json(cls, document: dict) -> Schedule:
        return cls(document["strategy"], document["seed"], document["switches"], document["rounds"],
                   document["granularity"])


@attrs.frozen
class Timing:
    """Where a step of a concurrent history ran: its ``thread`` and the logical times (one counter shared by all
    threads) of its invocation and return. ``returned`` is None for a call still running when the run ended (a hang);
    ``failure`` says what the system raised instead of answering; ``exec_ns`` is when it executed (start, end) on one
    monotonic clock for the whole history, if known: the overlap figures come from it."""

    thread: str
    invoked: int
    returned: int | None
    failure: str | None = None
    exec_ns: tuple[int, int] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))

    def precedes(self, other: Timing) -> bool:
        """This call returned before ``other`` was invoked (real-time order)."""
        return self.returned is not None and self.returned < other.invoked


@attrs.frozen
class Step:
    """One command and the model's ``observation`` of it (or, in a recording, the recorded system's). A
    counterexample also carries what the system under test answered, ``system``: its observation, or a string
    saying how it failed to answer; so the trace alone shows the failure."""

    seq: int
    command: v.Command
    observation: v.Observation
    timing: Timing | None = None
    system: v.Observation | str | None = None
    #: a test vector's aids for judging without the model (specs/vectors.md): event groups, deadline, windows
    expect: dict | None = attrs.field(default=None, hash=False)


@attrs.frozen
class Trace:
    header: Header
    steps: tuple[Step, ...] = attrs.field(converter=tuple)

    @property
    def trace_id(self) -> str:
        return self.header.trace_id

    @property
    def commands(self) -> list[v.Command]:
        return [step.command for step in self.steps]


def params_to_json(params: v.Params) -> dict:
    return attrs.asdict(params)


#: the declarations written only when declared: left out, they are their defaults
UNLESS_DECLARED = ("kafka_version", "real_time", "runs_due_on_update")


def declarations_to_json(declarations: Declarations) -> dict:
    """Every field, but a Kafka release only when one is declared (none means current Kafka), real-time
    allowances only when the system runs on a real clock (none means the virtual clock), and runs_due_on_update only
    when true."""
    return attrs.asdict(declarations,
                        filter=lambda field, value: value != field.default or field.name not in UNLESS_DECLARED)


def declarations_from_json(document: dict) -> Declarations:
    """``document`` must already satisfy the schema's ``declarations``; fields left out keep Kafka's defaults."""
    return Declarations(**document)


def header_line(header: Header) -> dict:
    body = {"format": FORMAT, "version": VERSION, "profile": header.profile,
            "params": params_to_json(header.params), "implementation": header.implementation}
    if header.description:
        body["description"] = header.description
    if header.threads is not None:
        body["threads"] = header.threads
    if header.declarations != KAFKA:
        body["declarations"] = declarations_to_json(header.declarations)
    if header.vector is not None:
        body["vector"] = header.vector
    if header.schedule is not None:
        body["schedule"] = header.schedule.to_json()
    return {"trace": header.trace_id, "seq": 0, "header": body}


def step_line(trace_id: str, step: Step) -> dict:
    line = {"trace": trace_id, "seq": step.seq, **command_to_json(step.command),
            **observation_to_json(step.observation)}
    if step.timing is not None:
        line.update(thread=step.timing.thread, invoked=step.timing.invoked, returned=step.timing.returned)
        if step.timing.failure is not None:
            line["failure"] = step.timing.failure
        if step.timing.exec_ns is not None:
            line["exec_ns"] = list(step.timing.exec_ns)
    if isinstance(step.system, v.Observation):
        line["system"] = observation_to_json(step.system)
    elif step.system is not None:
        line["system"] = {"failure": step.system}
    if step.expect is not None:
        line["expect"] = step.expect
    return line


def trace_lines(trace: Trace) -> Iterator[dict]:
    yield header_line(trace.header)
    for step in trace.steps:
        yield step_line(trace.trace_id, step)


def dumps(traces: Trace | Iterable[Trace]) -> str:
    traces = [traces] if isinstance(traces, Trace) else traces
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for trace in traces for line in trace_lines(trace))


def write_traces(path: str | Path, traces: Trace | Iterable[Trace]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(traces))
    return path


def parse_line(document: object) -> Header | tuple[str, Step]:
    """One decoded JSON line -> its Header, or (trace id, Step). Raises ValueError naming the field at fault."""
    if not isinstance(document, dict):
        raise ValueError(f"a trace line must be a JSON object, not {type(document).__name__}")
    if "header" in document:
        validate("header_line", document)
        body = document["header"]
        params = v.Params(**body["params"])
        try:
            validate_params(body["profile"], params)
        except CommandError as error:  # in the schema's ranges but outside the model's domain
            raise ValueError(f"header.params: {error}") from None
        return Header(document["trace"], body["profile"], params, body["implementation"], body.get("description"),
                      body.get("threads"), declarations_from_json(body.get("declarations", {})), body.get("vector"),
                      Schedule.from_json(body["schedule"]) if "schedule" in body else None)
    if document.get("cmd") == "init":
        raise ValueError("cmd 'init' belongs to the protocol; in a trace the header line carries the params")
    validate("step_line", document)
    timing = (Timing(document["thread"], document["invoked"], document["returned"], document.get("failure"),
                     document.get("exec_ns")) if "thread" in document else None)
    if timing is not None and timing.exec_ns is not None and timing.exec_ns[0] > timing.exec_ns[1]:
        raise ValueError("exec_ns: the execution's end comes before its start")
    answer = document.get("system")
    system = None if answer is None else answer["failure"] if "failure" in answer else observation_from_json(answer)
    step = Step(document["seq"], command_from_json(document["cmd"], document["args"]), observation_from_json(document),
                timing, system, document.get("expect"))
    return document["trace"], step


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector paused: reading a trace, or replaying it against the model, allocates objects by the
    hundred thousand, and every 700 allocations the collector would walk the youngest again (and, as they age, all of
    them), a quarter of the time, to find no garbage: they form no cycle that outlives the call."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def loads(data: str | bytes, source: str = "<trace>") -> list[Trace]:
    """All traces in a JSON Lines input, in order of first appearance. Each must start with its header (seq 0) and
    number its steps 1, 2, 3, ... without gaps or repeats; commands must make sense for the model."""
    with collector_paused():
        return read_lines(data, source)


def read_lines(data: str | bytes, source: str) -> list[Trace]:
    lines, unterminated = split_lines(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return read_from(((raw, not unterminated or number < len(lines)) for number, raw in enumerate(lines, start=1)),
                     source)


def read_from(lines: Iterable[tuple[bytes | None, bool]], source: str) -> list[Trace]:
    """The traces in (line, terminated) pairs (`file_lines`); the first bad line raises TraceFormatError."""
    headers: dict[str, Header] = {}
    steps: dict[str, list[Step]] = {}
    number = 0
    for number, (raw, terminated) in enumerate(lines, start=1):
        try:
            if raw is None:
                raise ValueError(TOO_LONG)
            parsed = parse_line(decode_line(raw) if terminated else decode_last(raw))
        except ValueError as error:
            raise TraceFormatError(str(error), source, number) from None
        if isinstance(parsed, Header):
            if parsed.trace_id in headers:
                raise TraceFormatError(f"trace {parsed.trace_id!r} has a second header", source, number)
            headers[parsed.trace_id], steps[parsed.trace_id] = parsed, []
            continue
        trace_id, step = parsed
        if trace_id not in headers:
            raise TraceFormatError(f"trace {trace_id!r}: step before its header line", source, number)
        concurrent = headers[trace_id].threads is not None
        if (step.timing is not None) != concurrent:
            raise TraceFormatError(f"trace {trace_id!r}: " + (
                "a step of a concurrent history needs thread, invoked and returned" if concurrent else
                "thread, invoked and returned belong to concurrent histories (a header with threads)"), source, number)
        if step.timing is not None and step.timing.returned is not None and step.timing.returned <= step.timing.invoked:
            raise TraceFormatError(f"trace {trace_id!r}: returned must come after invoked", source, number)
        expected = len(steps[trace_id]) + 1
        if step.seq != expected:
            raise TraceFormatError(f"trace {trace_id!r}: seq {step.seq} where {expected} was expected", source, number)
        steps[trace_id].append(step)
    if not number:
        raise TraceFormatError(EMPTY_INPUT, source)
    return [Trace(headers[trace_id], steps[trace_id]) for trace_id in headers]


def read_traces(path: str | Path) -> list[Trace]:
    """The traces of a file, read a line at a time: a line over the limit is rejected before it is held in memory."""
    path = Path(path)
    try:
        with open(path, "rb") as file, collector_paused():
            return read_from(file_lines(file), str(path))
    except OSError as error:
        raise TraceFormatError(f"cannot read: {error}", str(path)) from None


# ---------------------------------------------------------------------------------------------------------------
# Building traces from commands
# ---------------------------------------------------------------------------------------------------------------


def model_trace(header: Header, commands: Iterable[v.Command],
                step: Callable[[Model, v.Command, tuple[v.Command, ...]], v.Observation] | None = None) -> Trace:
    """The trace the model produces for ``commands``: a test vector any implementation can be replayed against.
    ``step(model, command, commands before it)`` takes each step (by default ``model.step(command)``; the proofs
    pass one under a time limit)."""
    model = Model(header.profile, header.params, header.declarations.release)
    commands, steps = tuple(commands), []
    for seq, command in enumerate(commands, start=1):
        try:
            observation = model.step(command) if step is None else step(model, command, commands[:seq - 1])
            steps.append(Step(seq, command, observation))
        except CommandError as error:
            raise TraceFormatError(f"command {seq} ({command.name}): {error}", header.trace_id) from None
    return Trace(header, steps)
