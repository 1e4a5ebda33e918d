"""The live recording's reader, converter and judge on small event logs written by hand in the agent's interface
(conformance/live/README.md, "The event log"): a healthy purgatory passes; one that completes an op twice, expires one
early, keeps one pending past its deadline or leaves completed ops in its watch lists fails by name; bad lines are
rejected naming file, line and field."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.live import recording as rec
from kpurgatory.conformance.live.judge import judge_locally
from kpurgatory.conformance.traces.codec import TraceFormatError, dumps, loads
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations, RealTime

sys.path.insert(0, str(Path(__file__).parent))
from eventlog import T0, Log  # noqa: E402


def healthy(**faults) -> Log:
    """Two fetches: one completed by a produce's check, one expired on time; a purge cleans the lists."""
    log = Log()
    log.at(0).watch("handler-1", "Fetch-1", ["t-0"], 500)
    log.at(5).watch("handler-2", "Fetch-2", ["t-1"], 100)
    log.at(10).check("handler-3", "t-0", ["Fetch-1"], twice=faults.get("twice_check", False))
    log.advance(0, 30)
    log.at(faults.get("expire_at", 105)).expire("Fetch-2", twice=faults.get("twice_expire", False))
    log.advance(106, 306, purged=faults.get("purged", 2), watched=faults.get("watched", 0))
    log.at(400).check("handler-1", "t-1")
    return log.end()


def judge(folder: Path, **options):
    recording = rec.read_recording(folder)
    return judge_locally(list(rec.histories(recording, RealTime(**options)))), recording


def violations(folder: Path, **options) -> set[tuple[str, str]]:
    judged, _ = judge(folder, **options)
    return {(violation.property, violation.cause) for item in judged for violation in item.violations}


def test_a_healthy_purgatory_passes_in_one_window_and_in_small_ones(tmp_path):
    folder = healthy().write(tmp_path / "rec")
    assert violations(folder) == set()
    traces = list(rec.histories(rec.read_recording(folder), window=2))
    assert len(traces) == 4
    assert all(not item.violations for item in judge_locally(traces))


def test_the_history_of_a_recording(tmp_path):
    """Calls become steps in t_ns order; readiness, expiry, clock and purge become the steps the properties read."""
    (trace,) = rec.histories(rec.read_recording(healthy().write(tmp_path / "rec")))
    assert trace.header.threads == 6
    assert trace.header.declarations == Declarations(kafka_version="3.9.1", real_time=RealTime(1, 1000, 200))
    assert trace.header.description.startswith("live recording ") and "{" not in trace.header.description
    assert trace.header.implementation == "Apache Kafka 3.9.1 broker (live recording)"
    steps = [(step.timing.thread, step.command.name, step.observation.result, step.observation.events)
             for step in trace.steps]
    assert steps == [
        ("clock", "advance", None, ()),
        ("handler-1", "watch", False, ()),
        ("ExpirationReaper-0-Fetch", "advance", None, ()),
        ("clock", "advance", None, ()),
        ("handler-2", "watch", False, ()),
        ("handler-3", "check", 1, (v.Complete("Fetch-1", "check"),)),
        ("handler-3", "set_ready", None, ()),
        ("executor-Fetch", "advance", None, (v.Complete("Fetch-2", "expire"), v.Expire("Fetch-2"))),
        ("ExpirationReaper-0-Fetch", "advance", None, (v.Purge(2),)),
        ("ExpirationReaper-0-Fetch", "watched", 0, ()),
        ("handler-1", "check", 0, ()),
    ]
    assert [step.command.to_ms for step in trace.steps if step.command.name == "advance"] == [0, 0, 5, 105, 106]
    assert loads(dumps(trace)) == [trace]  # a valid concurrent history of the trace format


def test_an_op_completed_twice_breaks_exactly_once(tmp_path):
    assert violations(healthy(twice_check=True).write(tmp_path / "a")) == {("exactly_once", ""), ("results", "")}
    assert violations(healthy(twice_expire=True).write(tmp_path / "b")) == {("exactly_once", "")}


def test_an_expiration_before_its_deadline_breaks_on_time(tmp_path):
    """Fetch-2's deadline is 5 + 100 ms; the clock's granularity allows 1 ms."""
    assert violations(healthy(expire_at=50).write(tmp_path / "a")) == {("on_time", "")}
    assert violations(healthy(expire_at=103.5).write(tmp_path / "b")) == {("on_time", "")}
    assert violations(healthy(expire_at=104.5).write(tmp_path / "c")) == set()


def test_an_op_pending_past_its_deadline_and_the_allowance_breaks_on_time(tmp_path):
    log = Log()
    log.at(0).watch("handler-1", "Fetch-2", ["t-1"], 100)
    log.advance(1, 200).advance(201, 900).advance(1102, 1500)
    folder = log.end().write(tmp_path / "lost")
    assert violations(folder) == {("on_time", "")}  # still pending at 1102 ms: deadline 100, 1001 ms allowed
    assert violations(folder, executor_lag_ms=2000) == set()  # within the allowance: pending at the cut


def test_a_late_expiry_within_the_allowance_passes(tmp_path):
    log = Log()
    log.at(0).watch("handler-1", "Fetch-2", ["t-1"], 100)
    log.advance(1, 200).advance(450, 500)
    log.at(601).expire("Fetch-2")
    folder = log.end().write(tmp_path / "late")
    assert violations(folder) == set()
    assert violations(folder, executor_lag_ms=300) == {("on_time", "")}


def test_completed_ops_left_in_the_watch_lists_after_a_purge_break_watcher_cleanup(tmp_path):
    assert ("watcher_cleanup", "live_purge") in violations(healthy(watched=2).write(tmp_path / "a"))
    log = Log()  # a purge while an op is still watched: its entry may stay
    log.at(0).watch("handler-1", "Fetch-1", ["t-0", "t-1"], 5000)
    log.advance(1, 200, purged=0, watched=2)
    assert violations(log.end().write(tmp_path / "b")) == set()


def test_an_expiry_whose_on_complete_watches_another_op(tmp_path):
    """Kafka's group coordinator: an expiring InitialDelayedJoin's onComplete watches the next one, on the timer's
    executor thread, before its forceComplete returns."""
    log = Log()
    log.at(0).watch("handler-1", "Rebalance-1", ["join-g"], 0, purgatory="Rebalance")
    thread = "executor-Rebalance"
    log.at(3).ev(thread, "complete", purgatory="Rebalance", op="Rebalance-1")
    log.watch(thread, "Rebalance-2", ["join-g"], 3000, purgatory="Rebalance")
    log.ev(thread, "force", phase="return", purgatory="Rebalance", op="Rebalance-1", result=True)
    log.ev(thread, "expire", purgatory="Rebalance", op="Rebalance-1")
    log.at(10).check("handler-2", "join-g", ["Rebalance-2"], purgatory="Rebalance")
    assert violations(log.end().write(tmp_path / "rec")) == set()


def test_other_callers_force_and_try(tmp_path):
    log = Log()
    log.at(0).watch("handler-1", "Fetch-1", ["t-0"], 500).watch("handler-1", "Fetch-2", ["t-0"], 500)
    log.at(1).ev("other", "complete", purgatory="Fetch", op="Fetch-1")
    log.ev("other", "force", phase="return", purgatory="Fetch", op="Fetch-1", result=True)
    log.at(2).ev("other", "complete", purgatory="Fetch", op="Fetch-2")
    log.ev("other", "force", phase="return", purgatory="Fetch", op="Fetch-2", result=True)
    log.ev("other", "try", phase="return", purgatory="Fetch", op="Fetch-2", result=True)
    (trace,) = rec.histories(rec.read_recording(log.end().write(tmp_path / "rec")))
    made = [(step.command, step.observation.result) for step in trace.steps if step.timing.thread == "other"]
    assert made == [(v.Force("Fetch-1"), True), (v.SetReady("Fetch-2"), None), (v.Try("Fetch-2"), True)]
    assert not judge_locally([trace])[0].violations


def test_an_op_completed_in_two_windows_is_seen_twice(tmp_path):
    log = Log()
    log.at(0).watch("handler-1", "Fetch-1", ["t-0"], 500)
    log.at(1).check("handler-2", "t-0", ["Fetch-1"])
    for ms in range(2, 8):
        log.at(ms).check("handler-2", "t-9")
    log.at(9).check("handler-2", "t-0", ["Fetch-1"])
    traces = list(rec.histories(rec.read_recording(log.end().write(tmp_path / "rec")), window=3))
    judged = judge_locally(traces)
    assert [sorted({(x.property, x.cause) for x in item.violations}) for item in judged] == [
        [], [], [("exactly_once", ""), ("justified", "stale_try")]]  # the second check tried a completed op


def test_a_watch_carried_into_a_window_keeps_the_clock_its_deadline_counts_from(tmp_path):
    """Two watches in one millisecond share one clock advance, placed before the first: the second, carried into a
    later window where it completes after a reaper's advance, still has its deadline a minute in, not at 500."""
    log = Log()
    log.at(0).check("handler-3", "t-8")
    log.at(60_000).watch("handler-1", "Fetch-1", ["t-0"], 500)
    log.at(60_000).watch("handler-2", "Fetch-2", ["t-1"], 500)
    log.at(60_001).check("handler-3", "t-0", ["Fetch-1"])
    for ms in range(60_002, 60_007):
        log.at(ms).check("handler-3", "t-9")
    log.advance(60_010, 60_020)
    log.at(60_030).check("handler-3", "t-1", ["Fetch-2"])
    traces = list(rec.histories(rec.read_recording(log.end().write(tmp_path / "rec")), window=3))
    carried = traces[-1].steps[:2]
    assert [step.command for step in carried] == [v.Advance(60_000), v.Watch("Fetch-2", ("t-1",), 500, None)]
    assert [list(item.violations) for item in judge_locally(traces)] == [[]] * len(traces)


def test_the_end_is_a_cut(tmp_path):
    """Pending ops are neither lost nor failed; a call in flight is left out with what was invoked after it."""
    log = Log()
    log.at(0).watch("handler-1", "Fetch-1", ["t-0"], 50_000)
    log.at(5).ev("handler-2", "check", phase="call", purgatory="Fetch", key="t-0")
    log.at(6).watch("handler-1", "Fetch-2", ["t-0"], 50_000)
    (trace,) = rec.histories(rec.read_recording(log.write(tmp_path / "rec")))
    assert [step.command.name for step in trace.steps] == ["advance", "watch"]
    assert not judge_locally([trace])[0].violations


def test_windows_where_the_agent_dropped_events_are_not_judged(tmp_path):
    log = healthy()
    log.files[0].insert(3, {"ev": "dropped", "t_ns": T0 + 1_300_000_000, "count": 17})
    recording = rec.read_recording(log.write(tmp_path / "rec"))
    assert list(rec.histories(recording)) == []
    assert recording.refused == {
        "Fetch": "windows 1-1 of 1 not judged: the agent dropped 17 events (first reported at 1.3 s)"}


def test_events_spread_over_rotated_files(tmp_path):
    log = healthy()
    second = log.files[0][6:]
    del log.files[0][6:]
    log.files.append([{**log.files[0][0], "file": 1}, *second])
    (trace,) = rec.histories(rec.read_recording(log.write(tmp_path / "rec")))
    (one,) = rec.histories(rec.read_recording(healthy().write(tmp_path / "one")))
    assert [step.command for step in trace.steps] == [step.command for step in one.steps]


@pytest.mark.parametrize("line, why", [
    ("{not json", "events-0.jsonl:3: not JSON"),
    ('{"t_ns":1,"thread":"h","tid":1,"ev":"watch","phase":"call","purgatory":"Fetch","op":"o","opclass":"C",'
     '"delay_ms":5}', "events-0.jsonl:3: keys: missing"),
    ('{"t_ns":1,"thread":"h","tid":1,"ev":"check","phase":"return","purgatory":"Fetch","key":"k","result":true}',
     "events-0.jsonl:3: result: must be an integer, got True"),
    ('{"t_ns":1,"thread":"h","tid":1,"ev":"reap","purgatory":"Fetch"}', "events-0.jsonl:3: ev: must be one of"),
    ('{"t_ns":1,"thread":"h","tid":1,"ev":"complete","phase":"call","purgatory":"Fetch","op":"o"}',
     "events-0.jsonl:3: phase: complete events have no phase, got 'call'"),
    ('{"t_ns":1.5,"thread":"h","tid":1,"ev":"expire","purgatory":"Fetch","op":"o"}',
     "events-0.jsonl:3: t_ns: must be an integer, got 1.5"),
    ('{"t_ns":1,"thread":"h","tid":1,"ev":"check","phase":"return","purgatory":"Fetch","key":"k","result":0}',
     "events-0.jsonl:3: check return on thread 'h' without its call"),
])
def test_bad_lines_are_rejected_naming_file_line_and_field(tmp_path, line, why):
    folder = healthy().write(tmp_path / "rec")
    lines = (folder / "events-0.jsonl").read_text().splitlines(keepends=True)
    (folder / "events-0.jsonl").write_text("".join(lines[:2] + [line + "\n"] + lines[2:]))
    with pytest.raises(rec.RecordingError) as error:
        list(rec.histories(rec.read_recording(folder)))
    assert why in str(error.value)


def test_bad_recordings(tmp_path):
    with pytest.raises(rec.RecordingError, match="no events-<n>.jsonl files: not a recording"):
        rec.read_recording(tmp_path)
    folder = healthy().write(tmp_path / "rec")
    text = (folder / "events-0.jsonl").read_text()
    (folder / "events-0.jsonl").write_text(text.split("\n", 1)[1])
    with pytest.raises(rec.RecordingError, match="events-0.jsonl:1: a file starts with its begin line"):
        rec.read_recording(folder)
    (folder / "events-0.jsonl").write_text(text.replace('"file": 0', '"file": 3'))
    with pytest.raises(rec.RecordingError, match="file: 3 in a file named events-0.jsonl"):
        rec.read_recording(folder)
    (folder / "events-0.jsonl").write_text(text.rsplit("\n", 2)[0] + "\n" + '{"t_ns": 7')  # the broker died
    recording = rec.read_recording(folder)
    assert not recording.ended and len(recording.events) == 24


def test_bad_allowances_in_a_header_are_bad_input(tmp_path):
    """The allowances are the header's declarations (real_time): the trace reader rejects bad ones, naming the
    field, and judges a window by the ones its header declares."""
    log = Log()
    log.at(0).watch("handler-1", "Fetch-2", ["t-1"], 100)
    log.advance(1, 200).advance(201, 900).advance(1102, 1500)
    (trace,) = rec.histories(rec.read_recording(log.end().write(tmp_path / "lost")))
    text = dumps(trace)
    assert '"real_time":{"clock_granularity_ms":1,"executor_lag_ms":1000,"reaper_ms":200}' in text
    for wrong, field in (('"executor_lag_ms":-1', "real_time.executor_lag_ms"),
                         ('"executor_lag_ms":"x"', "real_time.executor_lag_ms"),
                         ('"executor_lag_ms":1000,"lag_ms":1', "real_time"),
                         ('"executor_lag_ms":1.5', "real_time.executor_lag_ms")):
        with pytest.raises(TraceFormatError) as error:
            loads(text.replace('"executor_lag_ms":1000', wrong))
        assert str(error.value).startswith(f"<trace>:1: header.declarations.{field} ")
    (judged,) = judge_locally(loads(text))  # still pending at 1102 ms: deadline 100, 1 + 1000 ms allowed
    assert [violation.property for violation in judged.violations] == ["on_time"]
    (judged,) = judge_locally(loads(text.replace('"executor_lag_ms":1000', '"executor_lag_ms":2000')))
    assert not judged.violations


def test_validate_traces_judges_a_live_window_by_its_properties(tmp_path):
    """The validate-traces hook, without Spark: a concurrent history gets a verdict from its properties, and a
    failing one its shrunk trace."""
    from kpurgatory.conformance.spark.validate import check_trace

    def rows(trace):
        text = trace if isinstance(trace, str) else dumps(trace)
        return [{"trace": json.loads(text.split("\n", 1)[0])["trace"], "seq": number, "source": "h.jsonl",
                 "line": number + 1, "text": line, "problem": None} for number, line in enumerate(text.splitlines())]

    (good,) = rec.histories(rec.read_recording(healthy().write(tmp_path / "a")))
    (bad,) = rec.histories(rec.read_recording(healthy(expire_at=50).write(tmp_path / "b")))
    bad_header = dumps(good).replace('"executor_lag_ms":1000', '"executor_lag_ms":"x"')
    quarantined = check_trace(rows(bad_header), "contract", {})
    assert quarantined[0]["reason_kind"] == "bad_field"
    assert "header.declarations.real_time.executor_lag_ms" in quarantined[0]["reason"]
    (passed,) = check_trace(rows(good), "contract", {})
    assert passed["verdict"] == "pass" and passed["steps"] == 11
    (failed,) = check_trace(rows(bad), "contract", {})
    assert failed["verdict"] == "fail" and failed["properties"] == ["on_time"]
    shrunk = loads(failed["trace_jsonl"])[0]
    assert len(shrunk.steps) < len(bad.steps)
    assert {x.property for x in judge_locally([shrunk])[0].violations} == {"on_time"}


def test_record_broker_usage_errors(tmp_path):
    from kpurgatory.conformance.cli import main

    runner = CliRunner()
    bad = runner.invoke(main, ["record-broker", "--kafka", "latest", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "not a release number" in bad.output
    both = runner.invoke(main, ["record-broker", "--no-agent", "--judge", "--out", str(tmp_path / "x")])
    assert both.exit_code == 2 and "--no-agent records nothing to judge" in both.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    full = runner.invoke(main, ["record-broker", "--out", str(tmp_path / "full")])
    assert full.exit_code == 2 and "is not empty" in full.output


def test_an_expiry_recorded_force_first(tmp_path):
    """Either order of a won forceComplete's return and its onComplete makes the same expiry."""
    log = Log()
    log.at(0).watch("handler-1", "Fetch-1", ["t-0"], 10)
    log.at(11).ev("executor-Fetch", "force", phase="return", purgatory="Fetch", op="Fetch-1", result=True)
    log.ev("executor-Fetch", "complete", purgatory="Fetch", op="Fetch-1")
    log.ev("executor-Fetch", "expire", purgatory="Fetch", op="Fetch-1")
    (trace,) = rec.histories(rec.read_recording(log.end().write(tmp_path / "rec")))
    assert trace.steps[-1].observation.events == (v.Complete("Fetch-1", "expire"), v.Expire("Fetch-1"))
    assert not judge_locally([trace])[0].violations


def test_a_check_trying_an_op_completed_before_it_began_is_a_stale_try(tmp_path):
    """A Kafka finding (KAFKA-17848) for a release before 4.0.0, a failure after."""
    for version, failed in (("3.9.1", False), ("4.1.1", True)):
        log = Log(version)
        log.at(0).watch("handler-1", "Fetch-1", ["t-0"], 500)
        log.at(1).check("handler-2", "t-0", ["Fetch-1"])
        log.at(2).ev("handler-3", "check", phase="call", purgatory="Fetch", key="t-0")
        log.ev("handler-3", "try", phase="return", purgatory="Fetch", op="Fetch-1", result=False)
        log.ev("handler-3", "check", phase="return", purgatory="Fetch", key="t-0", result=0)
        (judged,), _ = judge(log.end().write(tmp_path / version))
        assert {(x.property, x.cause) for x in judged.violations} == {("justified", "stale_try")}
        assert judged.failed == failed and judged.findings == (() if failed else ("stale-try",))


def test_judge_recording_refuses_a_folder_that_is_not_a_recording(tmp_path):
    from kpurgatory.conformance.cli import main

    result = CliRunner().invoke(main, ["judge-recording", str(tmp_path)])
    assert result.exit_code == 2 and "no events-<n>.jsonl files: not a recording" in result.output
