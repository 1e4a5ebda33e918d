"""Replaying traces: the corpus passes against the model; a wrong expectation fails naming the step; a scenario
whose system hangs or crashes fails alone; a Kafka finding, replayed from check's counterexample or from a recording
of Kafka, is named as check names it and passes unless findings fail."""

import functools
import json
import re
import sys
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.replay import replay, scenario_files, scenarios
from kpurgatory.conformance.traces.codec import Header, Step, Trace, dumps, write_traces
from kpurgatory.model import vocabulary as v


@pytest.mark.parametrize("scenario_id", sorted(scenarios()))
def test_every_scenario_agrees_with_the_model(scenario_id):
    report = replay(scenarios()[scenario_id])
    assert report.ok, report.first_failure


def test_the_corpus_covers_kafkas_own_tests():
    ids = set(scenarios())
    for expected in ("kafka.DelayedOperationTest.testRequestPurge", "kafka.TimerTest.testTaskExpiration",
                     "kafka.TimerTaskListTest.testAll", "kafka.TimingWheelTest.testOverflowWheel", "seed.cascade"):
        assert expected in ids


def test_replay_command_exits_zero_on_every_scenario_file():
    result = CliRunner().invoke(main, ["replay", *map(str, scenario_files())])
    assert result.exit_code == 0, result.output


def test_a_wrong_expectation_fails_and_names_the_step(tmp_path):
    text = dumps(scenarios()["seed.cascade"])
    wrong = text.replace('"args":{"to_ms":25},"result":null,"events":[{"event":"run","task":"c"}]',
                         '"args":{"to_ms":25},"result":null,"events":[]', 1)
    assert wrong != text
    path = tmp_path / "wrong.jsonl"
    path.write_text(wrong)
    result = CliRunner().invoke(main, ["replay", str(path)], terminal_width=200)
    assert result.exit_code == 1
    assert re.search(r"FAIL seed\.cascade at step 12 \(advance\(to_ms=25\)\)", result.output)
    assert "expected 1 events, observed 0" in result.output


def test_malformed_input_exits_two_with_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(dumps(scenarios()["seed.cascade"]).replace('"to_ms":25', '"to_ms":"soon"', 1))
    result = CliRunner().invoke(main, ["replay", str(path)])
    assert result.exit_code == 2
    assert "bad.jsonl:13: args.to_ms must be integer" in result.output


def test_scenarios_can_be_selected_and_skipped():
    runner = CliRunner()
    listed = runner.invoke(main, ["scenarios", "--list", "--only", "seed.cascade"])
    assert listed.output.split("\t")[0] == "seed.cascade"
    result = runner.invoke(main, ["scenarios", "--skip", "kafka.TimerTest.testTaskExpiration"], terminal_width=200)
    assert result.exit_code == 0
    assert "testTaskExpiration" not in result.output
    assert runner.invoke(main, ["scenarios", "--only", "no.such.id"]).exit_code == 2


def test_untrusted_text_reaches_the_terminal_escaped(tmp_path):
    """A trace id and task name with Rich markup, terminal escapes and a lone surrogate (valid JSON, unprintable):
    printed as visible text, never obeyed."""
    from kpurgatory.conformance.terminal import markup, safe

    evil = "ev[/]il\x1b[31mRED\x07\ud800"
    header = {"trace": evil, "seq": 0, "header": {"format": "kpurgatory-trace", "version": 1, "profile": "timer",
                                                 "params": {"tick_ms": 1, "wheel_size": 20, "start_ms": 0},
                                                 "implementation": evil}}
    steps = [{"trace": evil, "seq": 1, "cmd": "timer_add", "args": {"task": evil, "delay_ms": 8}, "result": None,
              "events": []},
             {"trace": evil, "seq": 2, "cmd": "advance", "args": {"to_ms": 10}, "result": None, "events": []}]
    path = tmp_path / "evil.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in [header, *steps]))
    result = CliRunner().invoke(main, ["replay", str(path)], color=True)
    assert result.exit_code == 1, result.output  # the recording misses the expiry: a failure, not a crash
    assert "\x1b[31mRED" not in result.output and "\x07" not in result.output
    assert "FAIL ev[/]il\\x1b[31mRED\\x07\\ud800" in result.output.replace("\x1b[1;31m", "").replace("\x1b[0m", "")
    assert safe("a\x1b[2Jb\r\n\tc\x9b") == "a\\x1b[2Jb\\r\n\tc\\x9b"
    assert markup("[/]") == "\\[/]"


def test_the_wheel_read_out_compares_a_buckets_entries_as_a_set_and_everything_else_exactly():
    """Buckets of two levels due at once leave Kafka's delay queue in heap order, so cascading them fills a finer
    bucket in either order; which bucket and level an entry is in still counts."""
    from kpurgatory.conformance.check.compare import exact_difference
    from kpurgatory.model import vocabulary as v

    def wheel(*entries, slot=1):
        return v.Observation(result={"levels": [{"tick_ms": 4, "wheel_size": 2, "current_ms": 16, "buckets": [
            {"slot": slot, "expiration_ms": 20, "entries": list(entries)}]}]})

    assert exact_difference(v.Wheel(), wheel("t1", "t0"), wheel("t0", "t1")) is None
    assert exact_difference(v.Wheel(), wheel("t1", "t0"), wheel("t0", "t1", slot=0)) is not None
    assert exact_difference(v.Wheel(), wheel("t1", "t0"), wheel("t0")) is not None


# --- a scenario that hangs or crashes fails alone --------------------------------------------------------------

HERE = Path(__file__).parent
ADAPTER = f"{sys.executable} {HERE / 'misbehaving_adapter.py'}"
LONG = sorted(trace_id for trace_id, trace in scenarios().items() if len(trace.steps) >= 4)
SHORT = sorted(trace_id for trace_id, trace in scenarios().items() if len(trace.steps) < 4)


#: when a call that has not answered counts as hung: every hang costs it, and a loaded machine may hold a healthy
#: call for a good part of a second
HUNG_AFTER_S = "3"


def scenarios_run(*arguments: str):
    """``kpurgatory scenarios ARGUMENTS`` and each scenario's verdict, from its table."""
    outcome = CliRunner().invoke(main, ["scenarios", *arguments], env={"COLUMNS": "400"})
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in outcome.output.splitlines()
             if line.startswith("│")]
    return outcome, {row[0]: row[2] for row in cells if row[0] in scenarios()}


def test_a_scenario_that_hangs_fails_alone_and_the_rest_are_reported(monkeypatch):
    """In process, the system hangs in cancelForKey: those scenarios are hung, a fresh system plays each next one,
    every scenario has its row, and the system failed to answer (exit 3, as in check and replay)."""
    monkeypatch.syspath_prepend(str(HERE))
    hanging = {trace_id for trace_id, trace in scenarios().items()
               if any(step.command.name == "cancel_key" for step in trace.steps)}
    outcome, verdicts = scenarios_run("--impl", "planted_releases:HangsInCancelForKey", "--timeout", HUNG_AFTER_S)
    assert outcome.exit_code == 3, outcome.output
    assert hanging and verdicts == {trace_id: "hung" if trace_id in hanging else "pass" for trace_id in scenarios()}
    assert f"{len(scenarios()) - len(hanging)} passed, {len(hanging)} failed" in outcome.output


@pytest.mark.parametrize("mode, verdict", [("hang", "hung"), ("crash", "crashed"), ("garbage", "adapter wrote garbage")])
def test_an_adapter_that_hangs_or_crashes_is_restarted_for_the_next_scenario(mode, verdict):
    """The adapter fails at the fourth command of every run: the scenarios that long fail, each on an adapter of
    its own, and the shorter ones after them pass."""
    chosen = [*LONG[:2], *SHORT[:2]]
    outcome, verdicts = scenarios_run("--adapter", f"{ADAPTER} {mode} 5", "--timeout", HUNG_AFTER_S,
                                      *(option for trace_id in chosen for option in ("--only", trace_id)))
    assert outcome.exit_code == 3, outcome.output
    assert verdicts == {trace_id: verdict if trace_id in LONG else "pass" for trace_id in chosen}
    assert "2 passed, 2 failed" in outcome.output


def test_a_wrong_answer_outweighs_a_failure_to_answer(monkeypatch):
    """Some scenarios hang (exit 3 alone), others are answered wrongly: the implementation failed (exit 1)."""
    monkeypatch.syspath_prepend(str(HERE))
    outcome, verdicts = scenarios_run("--impl", "planted_releases:HangsInCancelForKeyCountsWrong", "--timeout",
                                      HUNG_AFTER_S)
    assert outcome.exit_code == 1, outcome.output
    assert {"hung", "FAIL", "pass"} <= set(verdicts.values())


def test_a_scenario_on_which_the_system_does_what_kafka_does_is_a_finding_and_the_run_goes_on(monkeypatch):
    """planted.KafkaLike spins where Kafka's reaper does (a re-insertion livelock): that scenario is Kafka's finding,
    not the system's failure, and the scenarios after it are played on a fresh system."""
    monkeypatch.syspath_prepend(str(HERE))
    livelock = "model.domain.overflow-chain-top-level"
    outcome, verdicts = scenarios_run("--impl", "planted:KafkaLike", "--timeout", HUNG_AFTER_S, "--only", livelock,
                                      "--only", "seed.cascade")
    assert outcome.exit_code == 0, outcome.output
    assert verdicts == {livelock: "finding reinsertion-livelock", "seed.cascade": "pass"}
    assert "1 passed, 0 failed, 1 Kafka finding" in outcome.output


def test_counts_are_pluralised(tmp_path):
    trace = scenarios()["seed.cascade"]
    path = write_traces(tmp_path / "one.jsonl", attrs.evolve(trace, steps=trace.steps[:1]))
    result = CliRunner().invoke(main, ["replay", str(path)], terminal_width=200)
    assert result.exit_code == 0 and f"PASS {trace.trace_id}: 1 step agrees with the model" in result.output


# --- a replayed Kafka finding is named as check names it -------------------------------------------------------

def counterexample_of(tmp_path, factory, params, commands):
    """The counterexample check writes for the run ``commands`` (check's own run, classifier and writer), and the
    failure check met there."""
    from kpurgatory.conformance.check.machine import Session, rerun
    from kpurgatory.conformance.check.sequential import reported

    system = factory()
    try:
        hello = system.hello()
        stop = rerun(Session(factory, system, hello, "timer", "exact"), params, commands)
    finally:
        system.close()
    name = "check-timer-1" if stop.finding is None else f"finding-timer-1-{stop.finding.name}"
    found = reported(stop, name, 0, hello, "timer", "exact", 1, tmp_path)
    return found.trace_path, stop


#: one run per way a finding is met: a wrong answer, an exception, a hang (through an adapter)
FINDING_RUNS = {
    "deadline-wraps": (v.Params(1, 4, 10, 1000), [v.TimerAdd("t", v.LONG_MAX)]),
    "negative-bucket-index": (v.Params(1, 3, 0, 1000), [v.TimerAdd("t", 2**62 - 1)]),
    "reinsertion-livelock": (v.Params(3, 6, 0, 1000), [v.TimerAdd("t", 2**62 - 1), v.Advance(0)]),
}


@pytest.mark.parametrize("finding", sorted(FINDING_RUNS))
def test_a_finding_written_by_check_is_named_when_replayed_and_passes_unless_findings_fail(tmp_path, monkeypatch,
                                                                                          finding):
    from kpurgatory.conformance.adapters.forked import ForkedSystem

    monkeypatch.syspath_prepend(str(HERE))
    import planted

    factory = functools.partial(ForkedSystem, planted.PythonPort, float(HUNG_AFTER_S))  # a hang is killed
    path, stop = counterexample_of(tmp_path, factory, *FINDING_RUNS[finding])
    assert stop.finding is not None and stop.finding.name == finding
    replayed = CliRunner().invoke(main, ["replay", str(path)], env={"COLUMNS": "400"})
    assert replayed.exit_code == 0, replayed.output
    assert f"finding: {finding} finding-timer-1-{finding}" in replayed.output
    assert str(stop.finding) in replayed.output and "FAIL" not in replayed.output  # check's words, word for word
    failing = CliRunner().invoke(main, ["replay", "--fail-on-findings", str(path)],
                                 env={"COLUMNS": "400"})
    assert failing.exit_code == (1 if finding == "deadline-wraps" else 3), failing.output  # as check's would be


def test_a_real_divergence_replayed_is_still_a_failure(tmp_path, monkeypatch):
    """planted.WrongAtTheEdge fails with Kafka's exception, but where Kafka's arithmetic is sound: no finding."""
    from kpurgatory.conformance.adapters.forked import ForkedSystem

    monkeypatch.syspath_prepend(str(HERE))
    import planted

    path, stop = counterexample_of(tmp_path, functools.partial(ForkedSystem, planted.WrongAtTheEdge,
                                                               float(HUNG_AFTER_S)),
                                   v.Params(1, 20, 0, 1000), [v.TimerAdd("t", 20_000)])
    assert stop.finding is None
    replayed = CliRunner().invoke(main, ["replay", str(path)], env={"COLUMNS": "400"})
    assert replayed.exit_code == 3 and "FAIL check-timer-1: step 1: system failed: ArithmeticException" in \
        replayed.output and "finding" not in replayed.output, replayed.output


def kafka_recording(trace_id: str) -> Trace:
    """A recording of Kafka's own timer at the end of the clock: now + delay wraps negative and the task runs at
    once, where the model rejects the deadline."""
    header = Header(trace_id, "timer", v.Params(1, 20, 10, 1000), implementation="Apache Kafka 3.9.0 (SystemTimer)")
    return Trace(header, [Step(1, v.TimerAdd("t", 5), v.Observation()),
                          Step(2, v.TimerAdd("far", v.LONG_MAX), v.Observation(events=(v.Run("far"),)))])


def test_a_recording_of_kafka_doing_what_kafka_does_is_named_and_a_wrong_one_is_not():
    named = replay(kafka_recording("kafka.wraps"))
    assert named.finding is not None and named.finding.name == "deadline-wraps" and named.exit_code == 0
    assert named.failure_code == 1
    trace = kafka_recording("kafka.wrong")
    early = attrs.evolve(trace.steps[0], observation=v.Observation(events=(v.Run("t"),)))
    report = replay(attrs.evolve(trace, steps=[early, trace.steps[1]]))  # runs a near task at once: Kafka does not
    assert report.finding is None and report.exit_code == 1 and report.first_failure.seq == 1
