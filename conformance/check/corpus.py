"""The shared corpus of failing runs: what one way of checking found, every other way tries first.

A corpus is a folder of traces in the project's trace format (`conformance.traces.codec`), one failing run per file.
``kpurgatory check --corpus DIR`` replays each sequential run in it of the profile it checks, at the level it checks,
before it generates any (`conformance.check.sequential.explore`), and adds to it each failure and finding it reports,
shrunk. So a contract-level check tries what an exact-level check found and the reverse, and the concurrent check can
draw the same runs (`load`). A check is reproducible from its seed and the corpus's content: runs are replayed in
the order of their files' names.

A file is named after what makes the run (its profile, parameters and commands; not who found it, at which level,
or what the system answered), so a run found twice is stored once; it is written whole or not at all, since other
checks may read the folder meanwhile. Only runs the system can be sent are replayed (`sendable`): a run found against
one system may use a command another does not implement, or a delay outside what it declares.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.conformance.traces.codec import Trace, command_to_json, dumps, params_to_json, read_traces
from kpurgatory.model import Model
from kpurgatory.model.machine import CommandError
from kpurgatory.model import vocabulary as v


def load(directory: str | Path, profile: str, hello: Hello | None = None) -> list[tuple[v.Params, list[v.Command]]]:
    """The sequential runs of ``profile`` in the corpus ``directory``, each as its parameters and commands, in file
    name order, each once; with ``hello``, only those the system that said it can be sent (`sendable`). A folder
    that does not exist yet is an empty corpus; a file that is not a valid trace raises `TraceFormatError` naming
    it."""
    return [(trace.header.params, trace.commands) for trace in stored(directory)
            if trace.header.profile == profile
            and (hello is None or sendable(profile, trace.header.params, trace.commands, hello))]


def stored(directory: str | Path) -> list[Trace]:
    """The sequential runs in the corpus ``directory`` as stored (each a counterexample: the model's observations
    and the system's answers), in file name order, each once. A folder that does not exist yet is an empty corpus;
    a file that is not a valid trace raises `TraceFormatError` naming it."""
    runs: dict[str, Trace] = {}
    for path in sorted(Path(directory).glob("*.jsonl")):
        for trace in read_traces(path):
            if trace.header.threads is None:
                runs.setdefault(key(trace), trace)
    return list(runs.values())


def add(directory: str | Path, trace: Trace) -> Path | None:
    """Store the failing run ``trace`` in the corpus ``directory`` (made if need be); the path written, or None when
    the corpus already holds the run."""
    directory = Path(directory)
    path = directory / f"{trace.header.profile}-{key(trace)[:16]}.jsonl"
    if path.exists():
        return None
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=".", suffix=".part", delete=False) as file:
        file.write(dumps(trace))
    os.replace(file.name, path)
    return path


def key(trace: Trace) -> str:
    """What identifies a run in the corpus: a digest of its profile, parameters and commands."""
    content = {"profile": trace.header.profile, "params": params_to_json(trace.header.params),
               "commands": [command_to_json(command) for command in trace.commands]}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sendable(profile: str, params: v.Params, commands: list[v.Command], hello: Hello) -> bool:
    """The run is one a check would send to the system that said ``hello``: every command implemented, every delay
    within its declared domain (a watch again's too: the op's deadline is reset), the clock never past its latest
    deadline, and every command well formed for the model."""
    declarations = hello.declarations
    model = Model(profile, params, declarations.release)
    op_delays: dict[str, int] = {}  # a watch again may leave out the op's delay
    for command in commands:
        if command.name in hello.unsupported:
            return False
        delay = scheduled_delay(command, op_delays)
        if delay is not None and not declarations.within_domain(model.now_ms, delay):
            return False
        if isinstance(command, v.Advance) and command.to_ms > declarations.max_deadline_ms:
            return False
        try:
            model.step(command)
        except CommandError:
            return False
    return True


def scheduled_delay(command: v.Command, op_delays: dict[str, int]) -> int | None:
    """The delay from now of the entry ``command`` schedules, if it schedules one: an add's, a watch's on some keys
    (the op's own delay; ``op_delays`` remembers each op's, since a watch again may leave it out)."""
    if isinstance(command, v.TimerAdd):
        return command.delay_ms
    if not isinstance(command, v.Watch):
        return None
    if command.delay_ms is not None:
        op_delays.setdefault(command.op, command.delay_ms)
    return op_delays.get(command.op) if command.keys else None
