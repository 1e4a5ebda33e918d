"""Judging a live recording: its histories (`conformance.live.recording`) against the concurrent properties
(`kpurgatory.conformance.check.concurrent`), with the real-time allowances its headers declare (``real_time``,
`kpurgatory.model.contract.RealTime`), plus the property only a real broker's counters show, stated here once:

  watcher_cleanup  (live) A purge removes every completed entry from the watch lists: when the reaper's advance
                   that purged returns, watched() counts at most the entries of the ops watched so far that had not
                   completed when that advance was invoked (an op completed meanwhile may still be listed).

``kpurgatory judge-recording DIR`` converts a recording and judges it on Spark with ``validate-traces``'s job
(`validate.run_validation`): each window a trace, every failing window written to ``failing/`` with its page, as
any failing trace. `judge_locally` judges without Spark (the tests, a quick look).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Iterator

import attrs
import click

from kpurgatory.conformance.check import concurrent
from kpurgatory.conformance.check.concurrent import History, Violation
from kpurgatory.conformance.live.recording import WINDOW, Recording, RecordingError, histories, read_recording
from kpurgatory.conformance.spark.session import with_spark_options
from kpurgatory.conformance.terminal import command_console, counted, markup, safe
from kpurgatory.conformance.traces.codec import Trace, dumps
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import RealTime


def purged_watch_lists(history: History) -> Iterator[Violation]:
    purges = {(step.timing.thread, step.timing.returned): step for step in history.advances
              if any(isinstance(event, v.Purge) for event in step.observation.events)}
    completed_by = {op: min(c.step.timing.returned for c in completions)
                    for op, completions in history.completions.items() if completions}
    for read in history.of(v.Watched):
        purge = purges.get((read.timing.thread, read.timing.invoked - 1))
        if purge is None:
            continue
        bound = sum(len(watch.command.keys) for op, watches in history.watches.items() for watch in watches
                    if watch.timing.invoked < read.timing.returned
                    and not completed_by.get(op, purge.timing.invoked) < purge.timing.invoked)
        if read.observation.result > bound:
            yield Violation("watcher_cleanup", f"watched() read {read.observation.result} after the purge in step "
                                               f"{purge.seq}, but only {bound} entries belong to ops that had not "
                                               f"completed before it: completed ops were left in the watch lists",
                            (purge.seq, read.seq), "live_purge")


#: the properties a live history adds to the concurrent ones (`concurrent.check_history` runs them)
LIVE_CHECKS = (purged_watch_lists,)


def history_verdict(rows: list[dict], trace: Trace) -> list[dict]:
    """``validate-traces``'s verdict row for a concurrent history: its violations, a race Kafka shipped in the
    declared release being a Kafka finding (as ``check-history`` says). Bad real-time allowances in its header were
    quarantined when the header was read, as any bad header field."""
    violations = concurrent.check_history(trace)
    release = trace.header.declarations.release
    races = [concurrent.kafka_race(violation, trace, release) for violation in violations]
    failing = [violation for violation, race in zip(violations, races) if race is None]
    result = {"kind": "verdict", "trace": trace.trace_id, "source": rows[0]["source"], "rows": len(rows), "traces": 1,
              "verdict": "fail" if failing else "finding" if violations else "pass",
              "finding": next((race.name for race in races if race is not None), None),
              "profile": trace.header.profile, "implementation": trace.header.implementation,
              "steps": len(trace.steps), "steps_checked": len(trace.steps)}
    if violations:
        shown = failing or violations
        step = next(step for step in trace.steps if step.seq == shown[0].seqs[0])
        result.update(seq=step.seq, line=rows[step.seq]["line"], command=step.command.name,
                      properties=sorted({violation.property for violation in shown}),
                      failures="; ".join(violation.message for violation in shown))
    if failing:
        result["trace_jsonl"] = dumps(shrunk(trace, tuple(failing)))
    return [result]


def shrunk(trace: Trace, violations: tuple[Violation, ...]) -> Trace:
    """A recorded history cannot be run again, so it is shrunk by projection: the clock's steps and the steps of
    the ops the violations name, each with only those ops' events (a check's result recounted); failing that, with
    the keys of those ops and every op watched on them too. The first projection that shows the same violations, no
    more, is kept; else the whole window."""
    if any(violation.cause == "live_purge" for violation in violations):
        return trace  # the watch lists' size counts every op: none can be left out
    focus = concurrent.involved(trace, violations)
    named = {op for op in focus if op in {getattr(step.command, "op", None) for step in trace.steps}}
    wider = focus | {step.command.op for step in trace.steps
                     if isinstance(step.command, v.Watch) and concurrent.touches(step.command, focus)}
    wanted = {(violation.property, violation.cause) for violation in violations}
    for ops in (named, wider):
        smaller = projection(trace, ops)
        found = concurrent.check_history(smaller)
        if {(violation.property, violation.cause) for violation in found} == wanted and len(found) <= len(violations):
            return smaller
    return trace


def projection(trace: Trace, ops: set[str]) -> Trace:
    """``trace``'s advances and the steps that name one of ``ops`` (ops and keys) or complete one, with only the
    events of ``ops`` (and purges)."""
    kept = []
    for step in trace.steps:
        events = tuple(event for event in step.observation.events
                       if isinstance(event, v.Purge) or getattr(event, "op", None) in ops)
        if not (isinstance(step.command, v.Advance) or concurrent.touches(step.command, ops) or events):
            continue
        result = step.observation.result
        if isinstance(step.command, v.Check):  # less the completions left out, so a wrong count stays wrong
            result -= sum(isinstance(event, v.Complete) and event.via == "check" and event.op not in ops
                          for event in step.observation.events)
        kept.append(attrs.evolve(step, seq=len(kept) + 1,
                                 observation=attrs.evolve(step.observation, result=result, events=events)))
    return Trace(trace.header, kept)


@attrs.frozen
class Judged:
    trace: Trace
    violations: tuple[Violation, ...]
    findings: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return len(self.violations) > len(self.findings)


def judge_locally(traces: list[Trace]) -> list[Judged]:
    """Every history judged in this process (no Spark)."""
    judged = []
    for trace in traces:
        violations = tuple(concurrent.check_history(trace))
        races = [concurrent.kafka_race(violation, trace, trace.header.declarations.release)
                 for violation in violations]
        judged.append(Judged(trace, violations, tuple(race.name for race in races if race is not None)))
    return judged


def convert(folder: Path, out: Path, allowances: RealTime, window: int) -> tuple[Recording, Path, int]:
    """The recording in ``folder`` as histories in ``out``/histories.jsonl: (recording, path, windows)."""
    recording = read_recording(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "histories.jsonl"
    count = 0
    with open(path, "w") as file:
        for trace in histories(recording, allowances, window):
            file.write(dumps(trace))
            count += 1
    return recording, path, count


def judge_on_spark(folder: Path, out: Path, allowances: RealTime, window: int, master: str | None,
                   conf: tuple[str, ...]) -> int:
    """Convert, judge on Spark, print what was judged and how fast; the exit code (validate-traces's)."""
    from kpurgatory.conformance.spark import validate
    from kpurgatory.conformance.spark.session import get_session, parse_conf

    started = time.perf_counter()
    try:
        recording, path, count = convert(folder, out, allowances, window)
    except RecordingError as error:
        raise click.UsageError(safe(str(error))) from None
    converted = time.perf_counter() - started
    console = command_console()
    console.print(f"{markup(folder)}: {len(recording.events):,} events of Kafka {markup(recording.kafka_version)}"
                  f"{f' (faults: {markup(recording.faults)})' if recording.faults else ''} -> "
                  f"{counted(count, 'window')} of {len(recording.purgatories)} purgatories in {converted:.1f} s",
                  highlight=False, soft_wrap=True)
    for purgatory, why in recording.refused.items():
        console.print(f"[yellow]{markup(purgatory)}: {markup(why)}[/]", soft_wrap=True)
    if not count:
        console.print("nothing to judge")
        return 2 if recording.refused else 0
    session = get_session(master, parse_conf(conf), "kpurgatory judge-recording")
    summary = validate.run_validation(session, [path], out, "contract")
    for table in validate.summary_tables(summary):
        console.print(table)
    console.print(f"judged {summary.input_rows:,} rows ({summary.steps_checked:,} steps) in {summary.seconds:.1f} s: "
                  f"{summary.events_per_second:,.0f} rows/s; outputs in {markup(out)}/", highlight=False,
                  soft_wrap=True)
    if summary.failing_files:
        console.print(f"{counted(summary.failing_files, 'failing window')} in {markup(out)}/failing/ (each with its "
                      f"page, .html); check one again with: kpurgatory check-history "
                      f"{markup(out)}/failing/<trace>.jsonl", highlight=False, soft_wrap=True)
    return 1 if summary.verdicts["fail"] else 2 if summary.quarantined_rows or recording.refused else 0


def allowance_options(command):
    """The real-time allowances (`kpurgatory.model.contract.RealTime`) and the window size, as options."""
    defaults = RealTime()
    for name, help_text in reversed((
            ("executor_lag_ms", "How long after its deadline an op may still wait to expire."),
            ("clock_granularity_ms", "How far the recording's clock and the timer's may be apart."),
            ("reaper_ms", "The reaper's advanceClock timeout (the broker's; for the report)."))):
        command = click.option(f"--{name.replace('_', '-')}", type=click.IntRange(0), show_default=True,
                               default=getattr(defaults, name), help=help_text)(command)
    return click.option("--window", type=click.IntRange(10), default=WINDOW, show_default=True,
                        help="Calls of a purgatory per judged window.")(command)


@click.command("judge-recording")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where histories, verdicts and the report go [default: FOLDER/judged].")
@allowance_options
@with_spark_options
def judge_recording_command(folder, out, window, executor_lag_ms, clock_granularity_ms, reaper_ms, master, conf):
    """Judge a live broker recording (a folder of the agent's events-<n>.jsonl) on Spark.

    Each purgatory's calls become concurrent histories, a window of calls at a time, judged by the concurrent
    properties with the real-time allowances given (`validate-traces` at the contract level). Exits 0 when every
    window passes, 1 when one fails, 2 on bad input or windows not judged (events the agent dropped). The report
    (`conformance.live.report`) goes beside the verdicts, into OUT/report."""
    from kpurgatory.conformance.live.report import write_report

    allowances = RealTime(clock_granularity_ms, executor_lag_ms, reaper_ms)
    out = out or folder / "judged"
    code = judge_on_spark(folder, out, allowances, window, master, conf)
    click.echo(f"report: {safe(write_report(folder, out / 'report', allowances, out))}")
    sys.exit(code)
