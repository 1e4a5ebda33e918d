"""A live recording: the agent's event log read (`read_recording`) and each purgatory's calls turned into concurrent
histories (`histories`), the trace format ``kpurgatory check-history`` and ``kpurgatory validate-traces`` judge.

The event log is the files ``events-<n>.jsonl`` of a recording folder, JSON Lines in the interface of
conformance/live/README.md, "The event log": a ``begin`` line opens each file, then one event a line, each with
``t_ns`` (System.nanoTime when it happened), ``thread`` and ``tid``. Lines are read with the trace codec's line reader
(`codec.file_lines`, `codec.decode_line`: the same limits and wording), and a bad line is rejected naming file, line
and field; fields this reader does not know are ignored, so the agent may add some. A last line cut short (the broker
was killed while the agent wrote) ends the recording there.

How a recording becomes a history, per purgatory (one history, cut into windows below):

* Order. Events are put in order of ``t_ns`` (one clock for every thread; a thread's own events keep their order).
  Each event's place in that order is its logical time, so a call's ``invoked`` and ``returned`` are the places of
  its call and return events, and ``exec_ns`` their ``t_ns``.
* Calls. ``watch`` (tryCompleteElseWatch) becomes a ``watch`` step with ``ready_on`` null, ``check``
  (checkAndComplete) a ``check``, the reaper's ``advance`` (advanceClock) an ``advance`` whose ``to_ms`` is the wall
  clock when it was called (it waits up to 200 ms for a bucket to fall due: by its return the clock may read later),
  with a ``purge`` event when a purge ran. A call that threw has the exception's class as its
  failure. Completions inside a call are that call's events: via ``try`` in a watch, via ``check`` in a check.
* Readiness. A live op's condition is Kafka's code, seen only through its tryComplete answers: the try of its own
  watch that returned true is its ``ready_on``; any other tryComplete that returned true is recorded as a
  ``set_ready`` of the op, on the same thread, just before that answer. A completion via try or check without one is
  thus unjustified. A check that calls tryComplete on an op completed before the check began reports ``stale_try``
  (KAFKA-17848; a Kafka finding in the releases before 4.0.0).
* Completions outside any call of the purgatory. An expiry runs on the timer's executor thread, after the reaper's
  advance returned, not inside any protocol call: ``forceComplete`` won, ``onComplete`` then ``onExpiration`` ran.
  It becomes an ``advance`` step of that thread, to the wall clock when its onComplete began (the timer fired it by
  then), whose events are the completion via expire and the expire: the route the concurrent properties allow an
  expiry (`v.may_complete_via`), and a clock reading where the expiry happened, which ``on_time`` compares with the
  deadline. A ``forceComplete`` called by other code becomes a ``force`` step, a ``tryComplete`` called by other code
  a ``try`` step; an ``onComplete`` that no winning forceComplete explains is a ``force`` step that returned false,
  which the ``results`` property rejects.
* The clock. Before each watch that put its op in the timer, a ``clock`` thread advances to the wall clock read when
  the watch was called (once a millisecond), so the deadline the properties derive from a watch is the real one, up
  to the watch's duration.
  Wall-clock milliseconds count from the recording's first event, as Kafka's timer counts them: System.nanoTime in
  whole milliseconds. The real-time allowances (`kpurgatory.model.contract.RealTime`) say how much earlier and later
  than these bounds an op may expire; they travel in the header's declarations (``real_time``).
* Counters. After a reaper's advance that purged, a ``watched`` step reads the watch lists' size the agent read when
  the advance returned: the live watcher property (`conformance.live.judge`) bounds it.
* The end is a cut. Ops still pending when the recording ends are neither lost nor failed: no ``shutdown`` is
  recorded, so ``no_lost_op`` is not judged, and a call still in flight is left out with everything invoked after
  it. ``on_time`` still finds an op that stayed pending far past its deadline.
* Windows. The concurrent properties compare calls pairwise, so a long recording is judged in windows of ``window``
  calls (`histories`), each a history of its own: its calls (a reaper's advance counts where it returned, with the
  calls made while it ran), plus, carried in from before, the watches of the ops still pending when it starts and of
  the ops it completes, each with the clock's advance its deadline counts from (with their earlier completions,
  reduced to those ops, so that an op completed in two windows is seen twice). Every window can then be judged
  alone, on Spark too.
* Lost events. A ``dropped`` event says the agent's queue overflowed: events of that time are missing, so no
  property about them can be judged. Windows from the one whose events come within `DROP_MARGIN_NS` of the first
  drop on are not produced; `Recording.refused` says how many were left out and why.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import attrs

from kpurgatory.conformance.traces import codec
from kpurgatory.conformance.traces.codec import Header, Step, Timing, Trace
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations, RealTime

FORMAT = "kpurgatory-live"
VERSION = 1
#: Kafka's SystemTimer: 1 ms ticks, 20 buckets a wheel
PARAMS = v.Params(tick_ms=1, wheel_size=20, start_ms=0, purge_interval=1000)
#: calls of a purgatory per window (a window also holds the steps made for them and the ops carried in)
WINDOW = 1000
#: how long before a ``dropped`` event the events it reports may have been lost (the writer reports an overflow at
#: its next write, well within a second)
DROP_MARGIN_NS = 1_000_000_000
#: the synthetic thread that advances the wall clock before each watch
CLOCK_THREAD = "clock"
EVENT_FILE = re.compile(r"events-(\d+)\.jsonl")


class RecordingError(ValueError):
    """Bad input: a recording that cannot be read, with the file, line and field at fault."""

    def __init__(self, message: str, source: str | Path = "", line: int | None = None):
        where = f"{source}:{line}: " if line is not None else f"{source}: " if source else ""
        super().__init__(f"{where}{message}")


# ---------------------------------------------------------------------------------------------------------------
# Reading the event log
# ---------------------------------------------------------------------------------------------------------------

STR, INT, BOOL, KEYS, OPT_STR = "string", "integer", "boolean", "array of strings", "string or null"
#: every thread's event has these
COMMON = {"t_ns": INT, "thread": STR, "tid": INT}
#: (ev, phase) -> the fields it must have; a call's return may carry ``thrown`` (a string) instead of ``result``
FIELDS: dict[tuple[str, str | None], dict[str, str]] = {
    ("watch", "call"): {"purgatory": STR, "op": STR, "opclass": STR, "keys": KEYS, "delay_ms": INT},
    ("watch", "return"): {"purgatory": STR, "op": STR, "result": BOOL},
    ("check", "call"): {"purgatory": STR, "key": STR},
    ("check", "return"): {"purgatory": STR, "key": STR, "result": INT},
    ("try", "return"): {"purgatory": STR, "op": STR, "result": BOOL},
    ("force", "return"): {"purgatory": STR, "op": STR, "result": BOOL},
    ("complete", None): {"purgatory": STR, "op": STR},
    ("expire", None): {"purgatory": STR, "op": STR},
    ("advance", "call"): {"purgatory": STR, "timeout_ms": INT, "delayed": INT, "watched": INT},
    ("advance", "return"): {"purgatory": STR, "timeout_ms": INT, "delayed": INT, "watched": INT},
    ("purge", None): {"purgatory": STR, "removed": INT},
    ("timer_add", None): {"timer": STR, "task": STR, "delay_ms": INT, "op": OPT_STR},
    ("timer_advance", "call"): {"timer": STR, "timeout_ms": INT},
    ("timer_advance", "return"): {"timer": STR, "timeout_ms": INT, "result": BOOL},
    ("timer_run", None): {"timer": STR, "task": STR},
}
#: fields an event may have besides its own
OPTIONAL = {("advance", "return"): {"purged": INT}}
LONE = {"begin": {"format": STR, "version": INT, "kafka_version": STR, "pid": INT, "file": INT, "t_ns": INT},
        "dropped": {"t_ns": INT, "count": INT}, "end": {"t_ns": INT}}
KINDS = sorted({ev for ev, _ in FIELDS} | set(LONE))


def type_ok(value: object, kind: str) -> bool:
    if kind == INT:
        return type(value) is int and -2**63 <= value < 2**63
    if kind == BOOL:
        return type(value) is bool
    if kind == KEYS:
        return type(value) is list and all(type(item) is str for item in value)
    if kind == OPT_STR:
        return value is None or type(value) is str
    return type(value) is str


def check_fields(event: dict, fields: dict[str, str], optional: dict[str, str] = {}) -> None:
    for name, kind in fields.items():
        if name == "result" and "result" not in event and "thrown" in event:
            name, kind = "thrown", STR
        if name not in event:
            raise ValueError(f"{name}: missing")
        if not type_ok(event[name], kind):
            raise ValueError(f"{name}: must be {'an' if kind[0] in 'ai' else 'a'} {kind}, got {event[name]!r:.80}")
    for name, kind in optional.items():
        if name in event and not type_ok(event[name], kind):
            raise ValueError(f"{name}: must be {'an' if kind[0] in 'ai' else 'a'} {kind}, got {event[name]!r:.80}")


def validate_event(event: object) -> dict:
    """A decoded line -> the event, or ValueError naming the field at fault."""
    if not isinstance(event, dict):
        raise ValueError(f"an event must be a JSON object, not {type(event).__name__}")
    kind = event.get("ev")
    if kind not in KINDS:
        raise ValueError(f"ev: must be one of {', '.join(KINDS)}, got {kind!r:.80}")
    if kind in LONE:
        check_fields(event, LONE[kind])
        return event
    phase = event.get("phase")
    if (kind, phase) not in FIELDS:
        phases = [p for k, p in FIELDS if k == kind]
        raise ValueError(f"phase: {kind} events have " + (f"phase {' or '.join(map(repr, phases))}" if phases != [None]
                                                          else "no phase") + f", got {phase!r:.80}")
    check_fields(event, COMMON)
    check_fields(event, FIELDS[kind, phase], OPTIONAL.get((kind, phase), {}))
    return event


@attrs.define
class Recording:
    """The events of a recording folder, in ``t_ns`` order (each with ``_at``: (file, line) where it was read)."""

    folder: Path
    kafka_version: str | None
    faults: str | None
    events: list[dict]
    files: int
    #: drops: (t_ns, count) of each ``dropped`` event
    drops: list[tuple[int, int]] = attrs.Factory(list)
    #: whether the recording ended cleanly (an ``end`` event) or was cut (a line cut short, or no end)
    ended: bool = False
    #: windows not produced, per purgatory, and why (set by `histories`)
    refused: dict[str, str] = attrs.Factory(dict)

    @property
    def t0(self) -> int:
        """The recording's origin: its first event's time."""
        return self.events[0]["t_ns"] if self.events else 0

    def ms(self, t_ns: int) -> int:
        """Wall-clock milliseconds since the origin, as Kafka's timer reads them (nanoTime in whole ms)."""
        return t_ns // 1_000_000 - self.t0 // 1_000_000

    @property
    def purgatories(self) -> list[str]:
        return sorted({event["purgatory"] for event in self.events if "purgatory" in event})


def event_files(folder: Path) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        raise RecordingError("not a folder", folder)
    files = sorted((int(match.group(1)), path) for path in folder.iterdir()
                   if (match := EVENT_FILE.fullmatch(path.name)))
    if not files:
        raise RecordingError("no events-<n>.jsonl files: not a recording", folder)
    return files


def read_recording(folder: str | Path) -> Recording:
    """Every event of the recording in ``folder``; RecordingError names the file, line and field of a bad line."""
    folder = Path(folder)
    files = event_files(folder)
    events: list[dict] = []
    kafka_version = faults = None
    drops: list[tuple[int, int]] = []
    ended = cut = False
    for position, (number, path) in enumerate(files):
        last_file = position == len(files) - 1
        try:
            with open(path, "rb") as file, codec.collector_paused():
                line = 0
                for line, (raw, terminated) in enumerate(codec.file_lines(file), start=1):
                    if raw is None:
                        raise RecordingError(codec.TOO_LONG, path, line)
                    try:
                        event = validate_event(codec.decode_line(raw))
                    except ValueError as error:
                        if not terminated and last_file:
                            cut = True  # the broker died while the agent wrote its last line
                            break
                        raise RecordingError(str(error), path, line) from None
                    kind = event["ev"]
                    if (line == 1) != (kind == "begin"):
                        raise RecordingError("a file starts with its begin line, and has only that one", path, line)
                    if kind == "begin":
                        if event["format"] != FORMAT or event["version"] != VERSION:
                            raise RecordingError(f"format: {FORMAT} version {VERSION} expected, got "
                                                 f"{event['format']!r:.80} version {event['version']}", path, line)
                        if event["file"] != number:
                            raise RecordingError(f"file: {event['file']} in a file named events-{number}.jsonl",
                                                 path, line)
                        kafka_version = kafka_version or event["kafka_version"]
                        faults = faults or (event.get("faults") if isinstance(event.get("faults"), str) else None)
                        continue
                    if kind == "dropped":
                        drops.append((event["t_ns"], event["count"]))
                        continue
                    if kind == "end":
                        ended = True
                        continue
                    event["_at"] = (number, line)
                    events.append(event)
                if not line:
                    raise RecordingError(codec.EMPTY_INPUT.replace("a trace", "an event file")
                                         .replace("header line", "begin line"), path)
        except OSError as error:
            raise RecordingError(f"cannot read: {error.strerror or error}", path) from None
    events.sort(key=lambda event: (event["t_ns"], event["_at"]))
    return Recording(folder, kafka_version, faults, events, len(files), sorted(drops), ended and not cut)


# ---------------------------------------------------------------------------------------------------------------
# Turning a purgatory's events into a history
# ---------------------------------------------------------------------------------------------------------------


@attrs.define
class Built:
    """A step being made: its logical times, the events' nanoTimes and what it says. ``anchor`` is the window key of
    the call a made-up step belongs to (a set_ready, a clock advance, a watched read-out): it goes in that call's
    window. A call's window key is its invocation, but a reaper's advance's is its return: the advance is judged with
    the calls made while it ran (and so is its watched read-out)."""

    thread: str
    command: v.Command
    invoked: int
    returned: int | None = None
    result: object = None
    events: list[v.Event] = attrs.Factory(list)
    failure: str | None = None
    exec_ns: tuple[int, int] | None = None
    anchor: int | None = None

    @property
    def window_key(self) -> int:
        if self.anchor is not None:
            return self.anchor
        return self.returned if isinstance(self.command, v.Advance) and self.returned is not None else self.invoked

    def ops(self) -> set[str]:
        return {event.op for event in self.events if isinstance(event, (v.Complete, v.Expire))}


def via_of(command: v.Command) -> str:
    return {v.Watch: "try", v.Try: "try", v.Check: "check", v.Force: "force", v.Advance: "expire"}[type(command)]


class Converter:
    """One purgatory's events -> its steps (`Built`), in order of invocation. See the module docstring."""

    def __init__(self, recording: Recording):
        self.recording = recording
        self.steps: list[Built] = []
        self.open: dict[str, list[Built]] = defaultdict(list)  # thread -> calls in flight, innermost last
        self.orphans: dict[str, list[tuple[dict, int]]] = defaultdict(list)  # thread -> events outside any call
        self.ticks: dict[int, int] = {}  # wall-clock ms -> invocation of the clock's advance to it
        self.watched: set[str] = set()  # ops watched so far
        self.tries: dict[int, int] = {}  # a watch in flight (its invocation) -> tryComplete calls of its op so far
        self.completed: dict[str, int] = {}  # op -> logical time of its first onComplete

    def convert(self, events: list[dict]) -> list[Built]:
        for index, event in enumerate(events):
            self.take(event, 4 * index + 4)
        for thread in list(self.orphans):
            self.flush(thread)
        in_flight = [call.invoked for calls in self.open.values() for call in calls]
        cut = min(in_flight, default=None)
        steps = sorted((step for step in self.steps if step.returned is not None), key=lambda step: step.window_key)
        return [step for step in steps if cut is None or step.window_key < cut]

    def made(self, thread: str, command: v.Command, at: int, t_ns: int, result: object = None,
             events: list[v.Event] | None = None, anchor: int | None = None, after: bool = False) -> Built:
        """A made-up step of an instant just before (or, ``after``, just after) logical time ``at``."""
        invoked = at + 1 if after else at - 2
        step = Built(thread, command, invoked, invoked + 1, result, events or [], None, (t_ns, t_ns), anchor)
        self.steps.append(step)
        return step

    def take(self, event: dict, at: int) -> None:
        kind, phase, thread, t_ns = event["ev"], event.get("phase"), event["thread"], event["t_ns"]
        if kind == "complete":
            self.completed.setdefault(event["op"], at)
        where = f"{self.recording.folder}/events-{event['_at'][0]}.jsonl"
        calls = self.open[thread]
        if phase == "call" and kind in ("watch", "check", "advance"):
            if kind == "watch":
                command = v.Watch(event["op"], tuple(event["keys"]), event["delay_ms"], None)
                self.tries[at] = 0
            elif kind == "check":
                command = v.Check(event["key"])
            else:
                command = v.Advance(self.recording.ms(t_ns))
            call = Built(thread, command, at, exec_ns=(t_ns, t_ns))
            calls.append(call)
            self.steps.append(call)
        elif phase == "return" and kind in ("watch", "check", "advance"):
            call = calls.pop() if calls else None
            if call is None or call.command.name != kind or getattr(call.command, "op", event.get("op")) != event.get(
                    "op") or getattr(call.command, "key", event.get("key")) != event.get("key"):
                if self.recording.drops:
                    return  # its call was lost with the dropped events; the window is not judged
                raise RecordingError(f"{kind} return on thread {thread!r} without its call", where, event["_at"][1])
            call.returned, call.exec_ns = at, (call.exec_ns[0], t_ns)
            if "thrown" in event:
                call.failure = event["thrown"]
            elif kind == "advance":
                call.command = v.Advance(self.recording.ms(call.exec_ns[0]))
                if "purged" in event:
                    call.events.append(v.Purge(event["purged"]))
                    self.made(thread, v.Watched(), at, t_ns, event["watched"], anchor=at, after=True)
            else:
                call.result = event["result"]
            if kind == "watch":
                del self.tries[call.invoked]
                self.watch_returned(call)
        elif calls:  # inside a call of this purgatory on this thread
            call = calls[-1]
            if kind == "complete":
                call.events.append(v.Complete(event["op"], "expire" if isinstance(call.command, v.Advance)
                                              else via_of(call.command)))
            elif kind == "expire":
                for position in range(len(call.events) - 1, -1, -1):  # onExpiration follows its onComplete
                    if call.events[position] == v.Complete(event["op"], via_of(call.command)):
                        call.events[position] = v.Complete(event["op"], "expire")
                        break
                call.events.append(v.Expire(event["op"]))
            elif kind == "try":
                if isinstance(call.command, v.Check) and self.completed.get(event["op"], at) < call.invoked:
                    call.events.append(v.StaleTry(event["op"]))  # completed before this check even began
                if isinstance(call.command, v.Watch) and event["op"] == call.command.op:
                    self.tries[call.invoked] += 1
                    if event.get("result") is True and call.command.op not in self.watched:
                        call.command = attrs.evolve(call.command, ready_on=self.tries[call.invoked])
                        return
                if event.get("result") is True:
                    self.made(thread, v.SetReady(event["op"]), at, t_ns, anchor=call.invoked)
        elif kind in ("complete", "force", "try", "expire"):
            self.orphan(thread, event, at)

    def watch_returned(self, call: Built) -> None:
        """A watch that put its op in the timer has the wall clock advanced to its call before it (once a ms)."""
        self.watched.add(call.command.op)
        if call.result is not False:
            return
        ms = self.recording.ms(call.exec_ns[0])
        if self.ticks.get(ms, call.invoked) >= call.invoked:
            self.ticks[ms] = self.made(CLOCK_THREAD, v.Advance(ms), call.invoked, call.exec_ns[0],
                                       anchor=call.invoked).invoked

    def orphan(self, thread: str, event: dict, at: int) -> None:
        """An event outside any call of this purgatory on its thread: an expiry, or another caller's forceComplete
        or tryComplete. A won forceComplete is followed by its tryComplete's answer or the op's onExpiration, if
        either, so the step is made once the next event of the thread shows which."""
        pending = self.orphans[thread]
        kind = event["ev"]
        if pending and pending[-1][0]["ev"] == "force" and not (
                kind in ("try", "expire", "complete") and event["op"] == pending[-1][0]["op"]):
            self.flush(thread)
            pending = self.orphans[thread]
        if kind in ("complete", "force"):
            pending.append((event, at))
            return
        first = pending[0][1] if pending else at
        started = pending[0][0]["t_ns"] if pending else event["t_ns"]
        completes = [item["op"] for item, _ in pending if item["ev"] == "complete"]
        self.orphans[thread] = []
        if kind == "try":
            step = Built(thread, v.Try(event["op"]), first - 1, at + 1, event.get("result"),
                         [v.Complete(op, "try") for op in completes], event.get("thrown"), (started, event["t_ns"]))
            if event.get("result") is True:
                self.made(thread, v.SetReady(event["op"]), first, started, anchor=step.invoked)
        else:
            step = Built(thread, v.Advance(self.recording.ms(started)), first - 1, at + 1, None,
                         [v.Complete(op, "expire") for op in completes] + [v.Expire(event["op"])], None,
                         (started, event["t_ns"]))
        self.steps.append(step)

    def flush(self, thread: str) -> None:
        """The events outside any call waiting on ``thread``, per op: a ``force`` step with the op's completions,
        returning what its forceComplete returned (false for completions without one)."""
        pending, self.orphans[thread] = self.orphans[thread], []
        by_op: dict[str, list[tuple[dict, int]]] = {}
        for item in pending:
            by_op.setdefault(item[0]["op"], []).append(item)
        for op, part in by_op.items():
            forces = [item for item, _ in part if item["ev"] == "force"]
            self.steps.append(Built(thread, v.Force(op), part[0][1] - 1, part[-1][1] + 1,
                                    any(item.get("result") is True for item in forces),
                                    [v.Complete(op, "force") for item, _ in part if item["ev"] == "complete"],
                                    next((item["thrown"] for item in forces if "thrown" in item), None),
                                    (part[0][0]["t_ns"], part[-1][0]["t_ns"])))


def projected(step: Built, ops: set[str]) -> Built:
    """``step`` reduced to the events of ``ops``, its result recounted as the properties count it: a step carried
    into a window for an op completed in two windows."""
    events = [event for event in step.events if getattr(event, "op", None) in ops]
    result = step.result
    if isinstance(step.command, v.Check):
        result = sum(isinstance(event, v.Complete) and event.via == "check" for event in events)
    return attrs.evolve(step, events=events, result=result)


def windows(steps: list[Built], size: int) -> Iterator[list[Built]]:
    """The steps (in order of window key) of each window of ``size`` real calls: the steps keyed in the window,
    those keyed before it but invoked while one of its own was (a reaper's advance spans many calls), and those
    carried in from before that (see the module docstring)."""
    real = [step for step in steps if step.anchor is None]
    bounds = [real[index].window_key for index in range(0, len(real), size)]
    watches: dict[str, list[Built]] = defaultdict(list)
    done: dict[str, list[Built]] = defaultdict(list)  # op -> the steps that completed it
    anchored: dict[int, list[Built]] = defaultdict(list)
    for step in steps:
        if step.anchor is not None:
            anchored[step.anchor].append(step)
        elif isinstance(step.command, v.Watch):
            watches[step.command.op].append(step)
        for op in step.ops():
            done[op].append(step)
    keys = [step.window_key for step in steps]
    # the wall clock's advances in order: a watch carried into a window takes the reading its deadline counts from
    ticks = [step for step in steps if step.thread == CLOCK_THREAD]
    tick_times = [step.invoked for step in ticks]
    #: op -> (its first watch's invocation, its first completion's): the ops pending at a time, by comparisons
    lives = {op: (watched[0].invoked, min((step.invoked for step in done[op]), default=float("inf")))
             for op, watched in watches.items()}
    for number, start in enumerate(bounds):
        end = bounds[number + 1] if number + 1 < len(bounds) else float("inf")
        own = steps[bisect.bisect_left(keys, start):bisect.bisect_left(keys, end)]
        start = min(step.invoked for step in own)
        own = steps[bisect.bisect_left(keys, start):bisect.bisect_left(keys, end)]
        completed_here = {op for step in own for op in step.ops()}
        pending = {op for op, (watched, completed) in lives.items() if watched < start <= completed}
        carried: dict[int, Built] = {id(step): step for step in own}
        for op in pending | completed_here:
            for watch in watches.get(op, ()):
                if watch.invoked < start:
                    carried[id(watch)] = watch
                    carried.update((id(step), step) for step in anchored[watch.window_key])
                    reading = bisect.bisect_left(tick_times, watch.invoked)
                    if reading:
                        carried[id(ticks[reading - 1])] = ticks[reading - 1]
        twice = {op for op in completed_here if any(step.invoked < start for step in done[op])}
        for op in twice:
            for step in done[op]:
                if step.invoked < start and id(step) not in carried:
                    carried[id(step)] = projected(step, twice)
                    carried.update((id(ready), ready) for ready in anchored[step.window_key]
                                   if isinstance(ready.command, v.SetReady) and ready.command.op in twice)
        yield sorted(carried.values(), key=lambda step: step.invoked)


def to_trace(header: Header, steps: list[Built]) -> Trace:
    return Trace(header, [Step(seq, step.command, v.Observation(step.result, tuple(step.events)),
                               Timing(step.thread, step.invoked, step.returned, step.failure, step.exec_ns))
                          for seq, step in enumerate(steps, start=1)])


def declarations(recording: Recording, allowances: RealTime = RealTime()) -> Declarations:
    """A broker on a real clock, with ``allowances``, that runs the release of the recording, when the model knows
    it."""
    try:
        return Declarations(kafka_version=recording.kafka_version, real_time=allowances)
    except (ValueError, TypeError):
        return Declarations(real_time=allowances)


def histories(recording: Recording, allowances: RealTime = RealTime(), window: int = WINDOW,
              purgatories: list[str] | None = None) -> Iterator[Trace]:
    """Each purgatory's history, a window at a time (see the module docstring), as concurrent-history traces."""
    first_drop = recording.drops[0][0] - DROP_MARGIN_NS if recording.drops else None
    name = re.sub(r"[^A-Za-z0-9._-]", "_", recording.folder.resolve().name)
    for purgatory in purgatories or recording.purgatories:
        events = [event for event in recording.events if event.get("purgatory") == purgatory]
        steps = Converter(recording).convert(events)
        parts = list(windows(steps, window))
        for number, part in enumerate(parts):
            if first_drop is not None and max(step.exec_ns[1] for step in part) >= first_drop:
                recording.refused[purgatory] = (
                    f"windows {number + 1}-{len(parts)} of {len(parts)} not judged: the agent dropped "
                    f"{sum(count for _, count in recording.drops):,} events (first reported at "
                    f"{recording.ms(recording.drops[0][0]) / 1000:.1f} s)")
                break
            text = (f"live recording {recording.folder}: purgatory {purgatory}, window {number + 1} of {len(parts)} "
                    f"({sum(step.anchor is None for step in part)} calls)")
            threads = {step.thread for step in part}
            header = Header(f"{name}.{purgatory}.{number + 1:04d}", "purgatory", PARAMS,
                            f"Apache Kafka {recording.kafka_version or '(unknown)'} broker (live recording)",
                            text, max(2, len(threads)), declarations(recording, allowances))
            yield to_trace(header, part)
