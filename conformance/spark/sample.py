"""The bundled sample corpus (sample/sample.jsonl): what ``kpurgatory validate-traces`` should make of a real mix.

It holds recordings of the built-in implementation (seeded ``mixed`` workloads, which agree with the model), one
trace per semantic fault — a completion that never happened, a double completion, an early expiry, a wrong counter
— and one piece of bad input per quarantine reason. `EXPECTED` is what validating it must report, per level; the
tests hold the validator to it, and ``python -m kpurgatory.conformance.spark.sample`` rewrites the file.
"""

from __future__ import annotations

import importlib.resources
import json
import sys
from pathlib import Path

from kpurgatory.conformance.adapters import BUILTIN, open_system
from kpurgatory.conformance.spark.record import record_trace
from kpurgatory.conformance.traces.codec import Header, dumps, model_trace, trace_lines
from kpurgatory.model import vocabulary as v

CLEAN = 30  # recordings: seeds 0..29, 100 steps each
PARAMS = v.Params(tick_ms=1, wheel_size=20, start_ms=0, purge_interval=1000)
COMPLETE_BY_EXPIRY = [{"event": "complete", "op": "o1", "via": "expire"}, {"event": "expire", "op": "o1"}]

#: (trace id, profile, commands, 1-based step to falsify, the falsified observation)
SEMANTIC_FAULTS = (
    ("fault.completion-never-happened", "purgatory",
     [v.Watch("o1", ["k1"], 30), v.Check("k1"), v.Delayed()],
     2, {"result": 1, "events": [{"event": "complete", "op": "o1", "via": "check"}]}),
    ("fault.double-completion", "purgatory",
     [v.Watch("o1", ["k1"], 30), v.SetReady("o1"), v.Check("k1"), v.Advance(30), v.Delayed()],
     4, {"result": None, "events": COMPLETE_BY_EXPIRY}),
    ("fault.early-expiry", "purgatory",
     [v.Watch("o1", ["k1"], 50), v.Advance(20), v.Advance(50)],
     2, {"result": None, "events": COMPLETE_BY_EXPIRY}),
    ("fault.wrong-counter", "purgatory",
     [v.Watch("o1", ["k1"], 50), v.Watch("o2", ["k2"], 60), v.Delayed(), v.Advance(60)],
     3, {"result": 3, "events": []}),
)

#: what validating the sample reports at either level: verdicts, failing traces per contract property, quarantined
#: rows per reason and quarantined traces
EXPECTED = {
    "verdicts": {"pass": CLEAN, "fail": 4, "finding": 0},
    "properties": {"counters": 1, "exactly_once": 1, "justified": 1, "on_time": 1},
    "quarantine": {"blank_line": 1, "malformed_command": 1, "missing_field": 1, "no_header": 2, "not_json": 1,
                   "seq_duplicate": 1, "seq_gap": 1, "trace_quarantined": 17, "unknown_command": 1,
                   "unsupported_version": 1},
    "quarantined_traces": 7,
}


def path() -> Path:
    return Path(str(importlib.resources.files("kpurgatory.conformance.spark").joinpath("sample", "sample.jsonl")))


def lines_of(trace_id: str, profile: str, commands: list[v.Command]) -> list[dict]:
    return list(trace_lines(model_trace(Header(trace_id, profile, PARAMS), commands)))


def bad_input() -> list[str]:
    """One piece of bad input per reason that names its trace (each trace's lines are otherwise valid)."""
    timer = [v.TimerAdd("a", 5), v.TimerAdd("b", 9), v.Advance(5)]
    unknown = lines_of("bad.unknown-command", "timer", timer)
    unknown[2].update(cmd="fly", args={})
    missing = lines_of("bad.missing-field", "timer", timer)
    del missing[3]["events"]
    gap = lines_of("bad.seq-gap", "timer", timer)
    del gap[2]
    duplicate = lines_of("bad.seq-duplicate", "timer", timer)
    duplicate.insert(2, duplicate[2])
    version = lines_of("bad.version-2", "timer", timer)
    version[0]["header"]["version"] = 2
    headless = lines_of("bad.no-header", "timer", timer[:2])[1:]
    never_watched = lines_of("bad.op-never-watched", "purgatory", [v.Watch("o1", ["k1"], 5)])
    never_watched.append({**never_watched[1], "seq": 2, "cmd": "force", "args": {"op": "o9"}, "result": True})
    return [json.dumps(line, separators=(",", ":"))
            for lines in (unknown, missing, gap, duplicate, version, headless, never_watched) for line in lines]


#: lines that name no trace: first in the file, since such a line is taken as a lost line of the trace before it
NAMELESS = ["this line is not JSON", ""]


def build() -> str:
    """The sample's text: lines naming no trace, clean recordings, the semantic faults, then the other bad input."""
    target = open_system(impl=BUILTIN)
    try:
        clean = [record_trace(target, "mixed", seed, 100)[0] for seed in range(CLEAN)]
    finally:
        target.system.close()
    faults = []
    for trace_id, profile, commands, step, observation in SEMANTIC_FAULTS:
        lines = lines_of(trace_id, profile, commands)
        lines[step].update(observation)
        faults += [json.dumps(line, separators=(",", ":")) for line in lines]
    return "\n".join(NAMELESS) + "\n" + dumps(clean) + "\n".join(faults + bad_input()) + "\n"


if __name__ == "__main__":
    (Path(sys.argv[1]) if len(sys.argv) > 1 else path()).write_text(build())
