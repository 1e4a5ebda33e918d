"""Seeing a trace: ``kpurgatory view TRACE... [-o FILE.html]`` writes one self-contained HTML page.

The page is made from the trace alone (and the model, which recomputes what the trace does not carry), so a shared
trace file is enough to see a failure. It needs no network: its script and style are inline (`view.html`, `view.js`
and `view.css` next to this module, packaged with it).

* A sequential trace (a counterexample, a scenario, a recorded corpus trace, a z3 refutation) is replayed through the
  model. The page lists the steps with the command and each observer's answer (the model's, the trace's recording,
  the system's when known), highlights the first divergence with the property it breaks in words, and shows for the
  selected step (← and → step) the wheel as the model sees it after the step — each level's tick, size and current
  time, its non-empty buckets with their expiration and entries, the delay queue — the purgatory's watch lists with
  stale (completed) entries marked, and a time axis: one row per scheduling with the time it was added, the start of
  its deadline's tick, its deadline and where each observer fired it, so early and late firings stand out.
* A concurrent history (`kpurgatory check --threads`, `kpurgatory check-history`) is checked with the concurrency
  properties (`conformance.check.concurrent`) and drawn Porcupine-style: one lane per thread, each call a bar from
  invocation to return, completions and expiries marked, violating calls outlined and their properties listed; hover
  for a call's command and answer, wheel or +/- to zoom, drag to pan. The canvas draws only what is visible, so a
  history of 100k calls stays usable (``python -m kpurgatory.conformance.traces.view_bench`` measures it).

Untrusted text (trace ids, implementation names, op ids) never becomes markup: the data travels as base64 of gzipped
JSON, which has no character that could end a script element, and the page puts every string in with textContent.
Numbers a JavaScript double cannot hold exactly (clocks near Long.MAX_VALUE) travel as text; positions on the time
axis are ordinal (the rank among the trace's distinct times), so 0 and 2^63 - 1 share one readable axis.
"""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

import attrs
import click

from kpurgatory.conformance.check import concurrent
from kpurgatory.conformance.check.compare import Difference
from kpurgatory.conformance.cli import Unwritable
from kpurgatory.conformance.terminal import safe
from kpurgatory.conformance.traces import codec
from kpurgatory.conformance.traces.codec import Trace, TraceFormatError, read_traces
from kpurgatory.conformance.traces.replay import (RECORDING, SYSTEM, ReplayReport, StepOutcome, format_command,
                                                  format_observation, replay)
from kpurgatory.model import CommandError, Model, contract
from kpurgatory.model import vocabulary as v

#: sequential traces longer than this get the model's state for this many steps around the first failure only
SNAPSHOT_WINDOW = 2000

#: the answer columns of a sequential trace's steps
COLUMN_TITLES = {"model": "model", RECORDING: "trace ({implementation})", SYSTEM: "system"}

EXACT_WORDS = ("exact: the system answers every command as the model (Kafka) does — the same result or error and "
               "the same events, reordered only within one released bucket, the purge, or one command")


def property_words(module) -> dict[str, str]:
    """The properties ``module``'s docstring states, one indented ``name   words`` paragraph each (contract and
    concurrent state theirs that way), so the view quotes each property in the words it is stated in once."""
    words: dict[str, str] = {}
    name = None
    for line in (inspect.getdoc(module) or "").splitlines():
        if match := re.match(r"^  ([a-z_]+) {2,}(\S.*)$", line):
            name = match.group(1)
            words[name] = match.group(2)
        elif name and re.match(r"^ {4,}\S", line):
            words[name] += " " + line.strip()
        else:
            name = None
    return words


# ---------------------------------------------------------------------------------------------------------------
# Sequential traces
# ---------------------------------------------------------------------------------------------------------------


def wheel_state(model: Model) -> dict:
    """The model's timer and purgatory after a step: what the page draws for it (times as text)."""
    timer = model.timer
    levels = [{"tick": str(wheel.tick_ms), "size": wheel.wheel_size, "interval": str(wheel.interval),
               "current": str(wheel.current_time_ms),
               "buckets": [{"slot": slot, "expiration": str(bucket.expiration_ms),
                            "entries": [[entry.task.task_id, str(entry.expiration_ms)] for entry in bucket.entries]}
                           for slot, bucket in enumerate(wheel.buckets) if bucket.entries]}
              for wheel in timer.timing_wheel.levels()]
    watchers = [[key, [[op.op_id, op.completed] for op in ops]] for key, ops in model.purgatory.watchers.items()]
    return {"now": str(timer.now_ms), "levels": levels, "queue": [str(e) for e in timer.queued_expirations()],
            "watchers": watchers}


@attrs.define
class Scheduling:
    """One timer entry over the trace: a task or op added at ``added`` to expire at ``deadline``, and where each
    observer (by column) completed or fired it."""

    label: str
    added: int
    deadline: int
    step: int
    marks: list[dict] = attrs.field(factory=list)
    ended: int | None = None  # the time it left the model's timer: fired, completed, cancelled or replaced


class Timeline:
    """The time axis: schedulings and the clock, on the ordinal positions of every time they mention."""

    def __init__(self, tick_ms: int, start_ms: int):
        self.tick_ms, self.start_ms = tick_ms, start_ms
        self.rows: list[Scheduling] = []
        self.live: dict[str, Scheduling] = {}
        self.clock: list[int] = []
        #: seq -> the time an advance moved the clock to
        self.advances: dict[int, int] = {}

    def schedule(self, name: str, now: int, delay: int, seq: int) -> None:
        if name in self.live and self.live[name].ended is None:
            self.live[name].ended = now
        self.live[name] = Scheduling(name, now, now + delay, seq)
        self.rows.append(self.live[name])

    def end(self, name: str, now: int) -> None:
        if name in self.live and self.live[name].ended is None:
            self.live[name].ended = now

    def observe(self, column: int, seq: int, now: int, observation: v.Observation | None) -> None:
        for event in observation.events if observation is not None else ():
            name = getattr(event, "op", None) or getattr(event, "task", None)
            if name not in self.live or isinstance(event, (v.Expire, v.StaleTry)):
                continue
            fired = isinstance(event, v.Run) or isinstance(event, v.Complete) and event.via == "expire"
            kind = "fire" if fired else f"complete via {event.via}"
            scheduling = self.live[name]
            early = fired and now < scheduling.deadline - scheduling.deadline % self.tick_ms
            scheduling.marks.append({"column": column, "time": now, "seq": seq, "kind": kind, "early": early})
            if column == 0:  # the model's answers say when the entry left the timer
                self.end(name, now)

    def to_json(self, columns: int) -> dict:
        times = sorted({self.start_ms, *self.clock, *(t for row in self.rows for t in (row.added, row.deadline, self.tick_start(row),
                                                                        *([row.ended] if row.ended else [])))})
        rank = {time: index for index, time in enumerate(times)}
        rows = [{"label": row.label, "step": row.step, "added": rank[row.added], "tick": rank[self.tick_start(row)],
                 "deadline": rank[row.deadline], "ended": None if row.ended is None else rank[row.ended],
                 "late": [column for column in range(columns) if self.late(row, column)],
                 "marks": [{**mark, "time": rank[mark["time"]]} for mark in row.marks]} for row in self.rows]
        return {"times": [str(t) for t in times], "start": rank[self.start_ms], "clock": [rank[t] for t in self.clock],
                "rows": rows}

    def tick_start(self, row: Scheduling) -> int:
        return row.deadline - row.deadline % self.tick_ms

    def late(self, row: Scheduling, column: int) -> bool:
        """An advance reached the entry's deadline while it was scheduled, and this observer had not completed it
        by the end of that advance."""
        reached = next((seq for seq, to_ms in self.advances.items() if seq > row.step and to_ms >= row.deadline
                        and (row.ended is None or to_ms <= row.ended)), None)
        return reached is not None and not any(mark["column"] == column and mark["seq"] <= reached
                                               for mark in row.marks)


def outcome_failures(outcome: StepOutcome | None) -> list[dict]:
    if outcome is None:
        return []
    words = property_words(contract)
    failures = []
    for failure in outcome.failures:
        if isinstance(failure.what, Difference):
            failures.append({"who": failure.who, "property": "exact", "words": EXACT_WORDS,
                             "detail": failure.what.detail})
        else:
            failures.append({"who": failure.who, "property": failure.what.prop,
                             "words": words.get(failure.what.prop, ""), "detail": failure.what.message})
    return failures


def sequential_view(trace: Trace, report: ReplayReport | None = None, level: str = "exact") -> dict:
    """The page's data for a sequential trace. ``report`` is a run of it against a system (its answers become the
    system's column; the trace's recorded answers are shown when the run checked them); without one the trace's
    recorded answers are checked against the model at ``level``."""
    header = trace.header
    checked = report if report is not None else replay(trace, level=level)
    outcomes = {outcome.seq: outcome for outcome in checked.outcomes}
    roles = ["model"]
    answered = checked.target == "system"  # a live system's answers, or those a counterexample carries
    if not answered or any(outcome.recorded not in (None, outcome.model) for outcome in checked.outcomes):
        roles.append(RECORDING)  # beside a system's answers, only a recording that says something else
    if answered:
        roles.append(SYSTEM)
    failing = checked.first_failure
    first = max(1, (failing.seq if failing is not None else 1) - SNAPSHOT_WINDOW + 1)
    model = Model(header.profile, header.params, header.declarations.release)
    timeline = Timeline(header.params.tick_ms, header.params.start_ms)
    steps, states, error = [], [], checked.error
    for step in trace.steps:
        if step.seq == checked.model_broke_at:
            break  # the model hangs or raises there, as ``error`` says
        before = model.now_ms
        try:
            expected = model.step(step.command)
        except CommandError as malformed:
            error = error or f"step {step.seq}: malformed command: {malformed}"
            break
        command, outcome = step.command, outcomes.get(step.seq)
        answers = {"model": expected, RECORDING: step.observation,
                   SYSTEM: outcome.observed if outcome is not None else None}
        if isinstance(command, (v.TimerAdd, v.Watch)) and scheduled(model, command, expected):
            timeline.schedule(getattr(command, "task", None) or command.op, before,
                              command.delay_ms if isinstance(command, v.TimerAdd) else model.ops[command.op].delay_ms,
                              step.seq)
        for column, role in enumerate(roles):
            timeline.observe(column, step.seq, model.now_ms, answers[role])
        if isinstance(command, (v.TimerCancel, v.Cancel)):
            timeline.end(getattr(command, "task", None) or command.op, model.now_ms)
        timeline.clock.append(model.now_ms)
        if isinstance(command, v.Advance):
            timeline.advances[step.seq] = command.to_ms
        state = None
        if first <= step.seq < first + SNAPSHOT_WINDOW:
            snapshot = wheel_state(model)
            if not states or states[-1] != snapshot:
                states.append(snapshot)
            state = len(states) - 1
        bad = {failure.who for failure in (outcome.failures if outcome is not None else ())}
        steps.append({"seq": step.seq, "command": format_command(command), "now": str(model.now_ms), "state": state,
                      "answers": [f"failed: {step.system}" if role == SYSTEM and isinstance(step.system, str)
                                  and outcome is None else format_observation(answers[role]) for role in roles],
                      "bad": [column for column, role in enumerate(roles) if role in bad]})
    return {
        "kind": "sequential", "id": trace.trace_id, "profile": header.profile,
        "params": {name: str(value) for name, value in attrs.asdict(header.params).items()},
        "implementation": header.implementation, "description": header.description or "", "level": checked.level,
        "roles": roles, "columns": [COLUMN_TITLES[role].format(implementation=header.implementation) for role in roles],
        "steps": steps, "states": states, "error": error, "window": [first, first + SNAPSHOT_WINDOW - 1],
        "failure": None if failing is None else {"seq": failing.seq, "command": format_command(failing.command),
                                                 "failures": outcome_failures(failing)},
        "timeline": timeline.to_json(len(roles)),
    }


def scheduled(model: Model, command: v.TimerAdd | v.Watch, observation: v.Observation) -> bool:
    """The command put a timer entry in: a timer_add, or a watch that left its op in the timer or expired it on the
    spot (a watch completed by its own tries adds nothing)."""
    if observation.error is not None:
        return False
    if isinstance(command, v.TimerAdd):
        return True
    return model.ops[command.op].entry is not None or v.Complete(command.op, "expire") in observation.events


# ---------------------------------------------------------------------------------------------------------------
# Concurrent histories
# ---------------------------------------------------------------------------------------------------------------

#: bits of a call's flags
COMPLETES, EXPIRES, VIOLATES, FAILED, SWITCHED = 1, 2, 4, 8, 16


def switches(trace: Trace) -> tuple[dict[int, list[str]], list[str]]:
    """A scheduled history's switches: by the seq of the call each let go on, what it says; and one line each, in
    order ("round 2, point 3: w1's check(key=k0) went on instead of the default")."""
    schedule = trace.header.schedule
    if schedule is None:
        return {}, []
    by_seq = {step.seq: step for step in trace.steps}
    named: dict[int, list[str]] = {}
    lines = []
    for round_, point, thread in schedule.switches:
        seqs = schedule.rounds[round_] if round_ < len(schedule.rounds) else ()
        if thread >= len(seqs):
            lines.append(f"round {round_}, point {point}: thread {thread} went on (the drain)")
            continue
        step = by_seq[seqs[thread]]
        said = (f"round {round_}, point {point}: call {step.seq} ({step.timing.thread}'s "
                f"{format_command(step.command)}) went on")
        named.setdefault(step.seq, []).append(said)
        lines.append(said)
    return named, lines


def concurrent_view(trace: Trace, violations: Sequence[concurrent.Violation] | None = None,
                    check: bool = True) -> dict:
    """The page's data for a concurrent history, column by column (one entry per call, in seq order), with its
    ``violations``: given, found by checking it, or none when told not to ``check`` (the page says so)."""
    checked = violations is not None or check
    if violations is None:
        violations = concurrent.check_history(trace) if check else ()
    named = {seq for violation in violations for seq in violation.seqs}
    switched, switch_lines = switches(trace)
    lanes = list(dict.fromkeys(step.timing.thread for step in trace.steps))
    lane_of = {thread: index for index, thread in enumerate(lanes)}
    kinds = list(v.COMMANDS)
    end = max([0, *(t for step in trace.steps for t in (step.timing.invoked, step.timing.returned or 0))]) + 1
    columns: dict[str, list] = {name: [] for name in ("lane", "invoked", "returned", "kind", "flags", "command",
                                                      "answer", "exec_ns")}
    for step in trace.steps:
        timing, events = step.timing, step.observation.events
        flags = ((COMPLETES if any(isinstance(e, v.Complete) for e in events) else 0) |
                 (EXPIRES if any(isinstance(e, v.Expire) for e in events) else 0) |
                 (VIOLATES if step.seq in named else 0) |
                 (FAILED if timing.failure is not None or timing.returned is None else 0) |
                 (SWITCHED if step.seq in switched else 0))
        answer = (f"raised {timing.failure}" if timing.failure else "never returned" if timing.returned is None
                  else format_observation(step.observation))
        for name, value in (("lane", lane_of[timing.thread]), ("invoked", timing.invoked),
                            ("returned", end if timing.returned is None else timing.returned),
                            ("kind", kinds.index(step.command.name)), ("flags", flags),
                            ("command", format_command(step.command)), ("answer", answer),
                            ("exec_ns", None if timing.exec_ns is None else timing.exec_ns[1] - timing.exec_ns[0])):
            columns[name].append(value)
    words = property_words(concurrent)
    return {"kind": "concurrent", "id": trace.trace_id, "implementation": trace.header.implementation,
            "description": trace.header.description or "", "threads": trace.header.threads,
            "params": {name: str(value) for name, value in attrs.asdict(trace.header.params).items()},
            "lanes": lanes, "kinds": kinds, "end": end, "calls": columns, "checked": checked,
            "schedule": None if trace.header.schedule is None else {
                "strategy": trace.header.schedule.strategy, "seed": trace.header.schedule.seed,
                "granularity": trace.header.schedule.granularity, "switches": switch_lines},
            "violations": [{"property": violation.property, "words": words.get(violation.property, ""),
                            "message": violation.message, "seqs": list(violation.seqs)} for violation in violations]}


# ---------------------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------------------


def asset(name: str) -> str:
    return importlib.resources.files("kpurgatory.conformance.traces").joinpath("assets", name).read_text()


def page(traces: Iterable[Trace], reports: Iterable[ReplayReport] = (),
         violations: dict[str, Sequence[concurrent.Violation]] | None = None, level: str = "exact",
         check: bool = True) -> str:
    """The HTML page for ``traces``. ``reports`` (runs of these very Trace objects) carry a system's answers to
    sequential traces, the others are checked at ``level``; ``violations`` (by trace id) spare checking a concurrent
    history again, and without ``check`` the others are drawn unchecked."""
    run_of = {id(report.trace): report for report in reports}
    views = [concurrent_view(trace, (violations or {}).get(trace.trace_id), check) if trace.header.threads is not None
             else sequential_view(trace, run_of.get(id(trace)), level) for trace in traces]
    # UTF-8 JSON, its lone surrogates spelled as JSON spells them (`codec.utf8_safe`): "\\ud800" in the JSON text
    data = codec.LONE_SURROGATE.sub(lambda match: "\\" + codec.surrogate_spelling(match),
                                    json.dumps(views, separators=(",", ":"), ensure_ascii=False))
    data = base64.b64encode(gzip.compress(data.encode(), 6, mtime=0)).decode("ascii")  # the same trace, the same page
    parts = {"style": asset("view.css"), "script": asset("view.js"), "data": data}
    return re.sub(r"\{\{(style|script|data)\}\}", lambda match: parts[match.group(1)], asset("view.html"))


def views_in(html: str) -> list[dict]:
    """The data a page carries, one dict per trace: what its script draws (for tools and tests that read pages)."""
    data = re.search(r'<script type="application/octet-stream" id="kp-data">([^<]*)</script>', html)
    if data is None:
        raise ValueError("not a kpurgatory view page")
    return json.loads(gzip.decompress(base64.b64decode(data.group(1))))


def write_view(path: str | Path, traces: Trace | Iterable[Trace], reports: Iterable[ReplayReport] = (),
               violations: dict[str, Sequence[concurrent.Violation]] | None = None, level: str = "exact",
               check: bool = True) -> Path:
    """Write the page for ``traces`` (see `page`) to ``path`` and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page([traces] if isinstance(traces, Trace) else traces, reports, violations, level, check))
    return path


def page_path(trace_path: Path) -> Path:
    """Where the page of a trace file goes: next to it, FILE.html (never over the file itself)."""
    return trace_path.with_suffix(".html") if trace_path.suffix != ".html" else trace_path.with_name(
        trace_path.name + ".html")


def view_failures(files: dict[Path, list[Trace]], reports: Iterable[ReplayReport] = (),
                  violations: dict[str, Sequence[concurrent.Violation]] | None = None) -> None:
    """Write the page of each trace file holding a failing trace (a failing report, or violations) next to it and
    print where; a file that cannot be written there is reported, not fatal (the verdict stands)."""
    reports = list(reports)
    failing = {id(report.trace) for report in reports if not report.ok}
    for path, traces in files.items():
        if not any(id(trace) in failing or (violations or {}).get(trace.trace_id) for trace in traces):
            continue
        try:
            click.echo(f"view: {safe(write_view(page_path(path), traces, reports, violations))}")
        except OSError as error:
            click.echo(f"view: not written next to {safe(path)}: {error.strerror}; `kpurgatory view {safe(path)} -o "
                       f"FILE.html` writes it elsewhere", err=True)


@click.command("view")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="The HTML file to write [default: the first TRACE with the suffix .html].")
@click.option("--unchecked", is_flag=True, help="Draw concurrent histories without checking their properties "
                                                "(checking one of 100k calls takes long; check-history checks it).")
def view_command(traces, output, unchecked):
    """Write one self-contained HTML page showing TRACES: counterexamples, scenarios, recorded traces, concurrent
    histories, z3 refutations. Open it in any browser; it needs no network.

    Exits 0 when the page was written, 2 on malformed input."""
    try:
        loaded = [trace for path in traces for trace in read_traces(path)]
    except TraceFormatError as error:
        click.echo(f"Error: {safe(error)}", err=True)
        sys.exit(2)
    path = output or page_path(traces[0])
    try:
        click.echo(f"view: {safe(write_view(path, loaded, check=not unchecked))}")
    except OSError as error:
        raise Unwritable(path, error) from None
