"""The page of a trace: what its data says about steps, the wheel, the time axis and histories; that it is
self-contained and keeps untrusted text out of its markup; the commands that write it. The page's drawing is tested
in a real browser in test_view_browser.py."""

import re

import attrs
from click.testing import CliRunner

from kpurgatory.conformance.check import concurrent
from kpurgatory.conformance.check.concurrent import CLOCK, Violation
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import (Header, Step, Timing, Trace, dumps, model_trace, read_traces,
                                                 write_traces)
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.tools.mutants import BY_ID, adapter_class
from kpurgatory.conformance.traces.replay import format_observation, replay, scenarios
from kpurgatory.conformance.traces.view import (concurrent_view, page, property_words, sequential_view,
                                                views_in, write_view)
from kpurgatory.model import contract
from kpurgatory.model import vocabulary as v


def with_recording(trace: Trace, seq: int, observation: v.Observation) -> Trace:
    """``trace`` with the recorded answer of step ``seq`` replaced."""
    return attrs.evolve(trace, steps=[attrs.evolve(step, observation=observation) if step.seq == seq else step
                                      for step in trace.steps])


def test_properties_are_quoted_in_the_words_they_are_stated_in():
    for module, names in ((contract, contract.PROPERTIES),
                          (concurrent, [check.__name__ for check in concurrent.CHECKS])):
        words = property_words(module)
        assert set(names) <= set(words)
    on_time = property_words(contract)["on_time"]  # a paragraph over several lines, joined
    assert on_time.startswith("Nothing fires before") and "tick" in on_time and "\n" not in on_time
    assert on_time.endswith(".") and len(on_time) > 150


def test_the_first_divergence_of_a_recording_is_shown_with_its_property():
    cascade = scenarios()["seed.cascade"]
    late = with_recording(cascade, 12, v.Observation())  # c's run at 25 is missing from the recording
    view = sequential_view(late)
    assert view["failure"]["seq"] == 12 and view["failure"]["command"] == "advance(to_ms=25)"
    assert {failure["property"] for failure in view["failure"]["failures"]} == {"exact", "on_time"}
    on_time = next(f for f in view["failure"]["failures"] if f["property"] == "on_time")
    assert on_time["who"] == "recording" and on_time["words"] == property_words(contract)["on_time"]
    assert view["steps"][11]["bad"] == [1] and view["steps"][10]["bad"] == []
    assert view["steps"][11]["answers"] == ["None; run(c)", "None"]


def test_each_step_shows_the_wheel_as_the_model_sees_it():
    view = sequential_view(scenarios()["seed.cascade"])
    assert view["failure"] is None and view["roles"] == ["model", "recording"]
    after_adds = view["states"][view["steps"][4]["state"]]  # delays 8, 8, 25, 30, 35 added at 0
    first, second = after_adds["levels"]
    assert first["current"] == "0" and first["buckets"] == [
        {"slot": 8, "expiration": "8", "entries": [["a", "8"], ["b", "8"]]}]
    assert second["tick"] == "20" and second["buckets"] == [
        {"slot": 1, "expiration": "20", "entries": [["c", "25"], ["d", "30"], ["e", "35"]]}]
    assert after_adds["queue"] == ["8", "20"]
    cascaded = view["states"][view["steps"][9]["state"]]  # advance to 20: c, d, e moved down a level
    assert cascaded["levels"][0]["current"] == "20"
    assert [bucket["entries"] for bucket in cascaded["levels"][0]["buckets"]] == [[["c", "25"]], [["d", "30"]],
                                                                                  [["e", "35"]]]
    assert cascaded["levels"][1]["buckets"] == []


def test_watch_lists_mark_stale_entries():
    header = Header("stale", "purgatory", v.Params(purge_interval=1000))
    trace = model_trace(header, [v.Watch("a", ("k1", "k2"), 50, None), v.SetReady("a"), v.Check("k1")])
    view = sequential_view(trace)
    state = view["states"][view["steps"][-1]["state"]]
    assert state["watchers"] == [["k2", [["a", True]]]]  # completed through k1, still listed under k2


def test_the_time_axis_shows_deadlines_tick_starts_and_early_firings():
    header = Header("early", "timer", v.Params(tick_ms=10, wheel_size=4))
    trace = model_trace(header, [v.TimerAdd("a", 25), v.Advance(15), v.Advance(20), v.Advance(30)])
    early = with_recording(with_recording(trace, 3, v.Observation()), 2, v.Observation(events=(v.Run("a"),)))
    timeline = sequential_view(early)["timeline"]
    [row] = timeline["rows"]
    times = timeline["times"]
    assert (times[row["added"]], times[row["tick"]], times[row["deadline"]]) == ("0", "20", "25")
    model_fire, recorded_fire = sorted(row["marks"], key=lambda mark: mark["column"])
    assert (times[model_fire["time"]], model_fire["early"]) == ("20", False)
    assert (times[recorded_fire["time"]], recorded_fire["early"]) == ("15", True)
    assert [times[t] for t in timeline["clock"]] == ["0", "15", "20", "30"]
    assert times[row["ended"]] == "20"  # out of the model's timer when the model fired it


def test_a_firing_missing_past_the_deadline_is_late():
    header = Header("late", "timer", v.Params(tick_ms=1, wheel_size=4))
    trace = model_trace(header, [v.TimerAdd("a", 5), v.Advance(7), v.Advance(9)])
    late = with_recording(with_recording(trace, 2, v.Observation()), 3, v.Observation(events=(v.Run("a"),)))
    [row] = sequential_view(late)["timeline"]["rows"]
    assert row["late"] == [1]
    [row] = sequential_view(trace)["timeline"]["rows"]
    assert row["late"] == []


def test_a_systems_answers_get_their_own_column():
    cascade = scenarios()["seed.cascade"]
    report = replay(cascade, None)
    view = sequential_view(cascade, attrs.evolve(report, target="system", outcomes=tuple(
        attrs.evolve(outcome, observed=outcome.model, recorded=None) for outcome in report.outcomes)))
    assert view["roles"] == ["model", "system"] and view["columns"] == ["model", "system"]


def test_a_counterexample_file_alone_shows_the_systems_answers(tmp_path):
    result = run_check(adapter_class(BY_ID["cancel_leaves_entry"]), profile="timer", examples=200, seed=1,
                       out_dir=tmp_path)
    [from_file] = read_traces(result.trace_path)
    view = sequential_view(from_file)
    failing = result.report.first_failure
    assert view["roles"] == ["model", "system"] and view["failure"]["seq"] == failing.seq
    assert view["steps"][failing.seq - 1]["bad"] == [1]
    assert view["steps"][failing.seq - 1]["answers"] == [format_observation(failing.model),
                                                          format_observation(failing.observed)]
    assert views_in(result.trace_path.with_suffix(".html").read_text()) == [view]  # what check wrote


def test_huge_times_travel_as_text():
    header = Header("huge", "timer", v.Params())
    trace = model_trace(header, [v.TimerAdd("a", v.LONG_MAX), v.Advance(v.LONG_MAX)])
    view = sequential_view(trace)
    assert view["steps"][1]["now"] == str(v.LONG_MAX)
    assert str(v.LONG_MAX) in view["timeline"]["times"]


def test_a_history_is_drawn_from_columns_with_its_violations():
    steps = [Step(1, v.Watch("a", ("k",), 5, 1), v.Observation(True, (v.Complete("a", "try"),)), Timing("w0", 0, 3)),
             Step(2, v.Force("a"), v.Observation(True, (v.Complete("a", "force"),)), Timing("w1", 1, 4)),
             Step(3, v.Advance(9), v.Observation(), Timing(CLOCK, 2, None))]
    trace = Trace(Header("h", "purgatory", v.Params(), "test", threads=3), steps)
    view = concurrent_view(trace)
    assert view["lanes"] == ["w0", "w1", CLOCK]
    calls = view["calls"]
    assert calls["lane"] == [0, 1, 2] and calls["invoked"] == [0, 1, 2]
    assert calls["returned"] == [3, 4, view["end"]]  # a call that never returned lasts to the end
    assert calls["answer"][2] == "never returned"
    assert calls["command"][0] == "watch(op=a, keys=['k'], delay_ms=5, ready_on=1)"
    properties = {violation["property"] for violation in view["violations"]}
    assert {"exactly_once", "no_failure"} <= properties
    flags = calls["flags"]
    assert flags[0] & 1 and flags[0] & 4 and flags[2] & 8  # completes, violates; failed


def test_untrusted_text_cannot_become_markup():
    hostile = '</script><script>alert(1)</script><!--\u2028'
    header = Header(hostile, "timer", v.Params(), implementation=hostile, description=hostile)
    html = page([model_trace(header, [v.TimerAdd(hostile, 1), v.Advance(1)])])
    assert "alert" not in html and "<!--" not in html and "\u2028" not in html
    assert html.count("<script") == 2 and html.count("</script>") == 2
    [view] = views_in(html)
    assert view["id"] == hostile and view["steps"][1]["answers"][0] == f"None; run({hostile})"
    assert "innerHTML" not in html and "insertAdjacentHTML" not in html and "document.write" not in html


def test_the_page_is_self_contained_and_small():
    html = page(scenarios().values())
    assert not re.search(r"(src|href)\s*=|https?:|@import|url\(", html.split('id="kp-data">')[0] +
                         html.split("</script>", 1)[1])
    assert "default-src 'none'" in html  # the browser refuses any load the page might attempt
    assert len(html) < 400_000, len(html)
    assert [view["id"] for view in views_in(html)] == list(scenarios())


def test_view_command_writes_the_page_and_refuses_bad_input(tmp_path):
    source = tmp_path / "trace.jsonl"
    write_traces(source, scenarios()["seed.cascade"])
    runner = CliRunner()
    result = runner.invoke(main, ["view", str(source)])
    assert result.exit_code == 0 and result.output == f"view: {tmp_path / 'trace.html'}\n"
    assert views_in((tmp_path / "trace.html").read_text())[0]["id"] == "seed.cascade"
    result = runner.invoke(main, ["view", str(source), "-o", str(tmp_path / "out" / "x.html")])
    assert result.exit_code == 0 and (tmp_path / "out" / "x.html").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(dumps(scenarios()["seed.cascade"]).replace('"to_ms":25', '"to_ms":"soon"', 1))
    result = runner.invoke(main, ["view", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:13: args.to_ms must be integer" in result.output


def test_replay_and_check_history_write_the_page_of_a_failing_file(tmp_path):
    runner = CliRunner()
    good, wrong = tmp_path / "good.jsonl", tmp_path / "wrong.jsonl"
    write_traces(good, scenarios()["seed.cascade"])
    write_traces(wrong, with_recording(scenarios()["seed.cascade"], 12, v.Observation()))
    result = runner.invoke(main, ["replay", str(good), str(wrong)], terminal_width=200)
    assert result.exit_code == 1 and f"view: {tmp_path / 'wrong.html'}" in result.output
    assert (tmp_path / "wrong.html").exists() and not (tmp_path / "good.html").exists()
    assert views_in((tmp_path / "wrong.html").read_text())[0]["failure"]["seq"] == 12

    steps = [Step(1, v.Watch("a", ("k",), 5, 1), v.Observation(True, (v.Complete("a", "try"),)), Timing("w0", 0, 3)),
             Step(2, v.Force("a"), v.Observation(True, (v.Complete("a", "force"),)), Timing("w1", 1, 4))]
    history = tmp_path / "history.jsonl"
    write_traces(history, Trace(Header("h", "purgatory", v.Params(), "test", threads=2), steps))
    result = runner.invoke(main, ["check-history", str(history)], terminal_width=200)
    assert result.exit_code == 1 and f"view: {tmp_path / 'history.html'}" in result.output
    assert "exactly_once" in {violation["property"] for violation in
                              views_in((tmp_path / "history.html").read_text())[0]["violations"]}


def test_a_history_can_be_drawn_unchecked(tmp_path):
    steps = [Step(1, v.Watch("a", ("k",), 5, 1), v.Observation(True, (v.Complete("a", "try"),)), Timing("w0", 0, 3)),
             Step(2, v.Force("a"), v.Observation(True, (v.Complete("a", "force"),)), Timing("w1", 1, 4))]
    path = write_traces(tmp_path / "h.jsonl", Trace(Header("h", "purgatory", v.Params(), "test", threads=2), steps))
    assert CliRunner().invoke(main, ["view", str(path), "--unchecked"]).exit_code == 0
    [view] = views_in(path.with_suffix(".html").read_text())
    assert (view["checked"], view["violations"]) == (False, [])
    assert CliRunner().invoke(main, ["view", str(path)]).exit_code == 0
    [view] = views_in(path.with_suffix(".html").read_text())
    assert view["checked"] and view["violations"]


def test_given_violations_are_not_computed_again():
    steps = [Step(1, v.Watched(), v.Observation(0), Timing("w0", 0, 1))]
    trace = Trace(Header("h", "purgatory", v.Params(), "test", threads=1), steps)
    [view] = views_in(page([trace], violations={"h": [Violation("results", "planted", (1,))]}))
    assert view["violations"] == [{"property": "results", "words": property_words(concurrent)["results"],
                                   "message": "planted", "seqs": [1]}]
    assert view["calls"]["flags"] == [4]


def test_write_view_creates_folders(tmp_path):
    path = write_view(tmp_path / "a" / "b.html", scenarios()["seed.cascade"])
    assert path.read_text().startswith("<!DOCTYPE html>")


def test_an_unwritable_page_is_one_line_and_exit_3(tmp_path):
    source = write_traces(tmp_path / "trace.jsonl", scenarios()["seed.cascade"])
    folder = tmp_path / "a-file"  # a file where a folder should be
    folder.write_text("")
    for output, reason in (("/dev/full", "/dev/full: No space left on device"),
                           (folder / "x.html", f"{folder / 'x.html'}: {folder}: File exists")):
        result = CliRunner().invoke(main, ["view", str(source), "-o", str(output)])
        assert (result.exit_code, result.output) == (3, f"Error: cannot write {reason}\n")


def test_a_lone_surrogate_reaches_the_page_spelled_as_json_spells_it(tmp_path):
    """JSON's "\\ud800" is a valid trace string that UTF-8 cannot hold: the page shows it as the terminal does."""
    trace = scenarios()["seed.cascade"]
    odd = attrs.evolve(trace, header=attrs.evolve(trace.header, trace_id="lone\ud800sur"))
    path = write_traces(tmp_path / "odd.jsonl", odd)
    result = CliRunner().invoke(main, ["view", str(path)])
    assert result.exit_code == 0, result.output
    assert views_in((tmp_path / "odd.html").read_text())[0]["id"] == "lone\\ud800sur"
