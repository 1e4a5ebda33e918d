"""A seed reproduces a check on any machine: the same runs, the same shrinking, the same verdict, summary and
counterexample files, whether the system answers at once or late (as on a loaded machine), in process and through
the stdio adapter; only the fields and figures that say how long something took differ. Shrinking is bounded by a
count of runs: the check drives Hypothesis's shrinker itself (`sequential.shrink`), never through the engine's phase
that stops shrinking after five minutes of wall-clock time."""

import re
import sys
import time
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner
from hypothesis.internal.conjecture import engine

from kpurgatory.conformance.check.sequential import CheckResult, run_check
from kpurgatory.conformance.cli import main

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # planted.py and latency.py, which the adapters these tests start import too
import planted  # noqa: E402

#: what in a check's terminal output says how long something took: "27 s", "after 1.2 s", the progress bar's "0:00:27",
#: with the spaces that align it in its column
TIMES = re.compile(r" *\b\d+:\d\d:\d\d\b| *\b\d[\d,]*(\.\d+)? s\b")
#: a check that finds `planted.TwoBugs`'s bugs and shrinks each in hundreds of runs
CHECK = ["check", "--profile", "timer", "--examples", "15", "--steps", "10", "--seed", "2"]


def untimed(result: CheckResult) -> CheckResult:
    return attrs.evolve(result, **{name: None for name in CheckResult.TIMING})


class RacingClock:
    """The time module as Hypothesis's engine sees it on a machine where each call takes a minute."""

    def __init__(self):
        self.minutes = 0

    def perf_counter(self) -> float:
        self.minutes += 1
        return time.perf_counter() + 60 * self.minutes

    monotonic = perf_counter

    def __getattr__(self, name):
        return getattr(time, name)


def test_a_clock_that_races_changes_nothing_a_check_runs_or_reports(monkeypatch):
    quiet = run_check(planted.TwoBugs, profile="timer", examples=15, steps=10, seed=2, max_failures=1)
    monkeypatch.setattr(engine, "time", RacingClock())
    slow = run_check(planted.TwoBugs, profile="timer", examples=15, steps=10, seed=2, max_failures=1)
    assert quiet.shrink_runs > 100 and quiet.failures[0].unfinished is None
    assert untimed(slow) == untimed(quiet)


def test_shrinking_stops_at_its_budget_of_runs_with_the_shortest_failure_so_far():
    first, again = (run_check(planted.TwoBugs, profile="timer", examples=15, steps=10, seed=2, max_failures=1,
                              shrink_budget=20) for _ in range(2))
    found = first.failures[0]
    assert found.unfinished == "the shrink budget of 20 runs was spent"
    assert "(not fully shrunk: the shrink budget of 20 runs was spent)" in found.summary
    assert 20 <= first.shrink_runs < 100 and found.shrunk_length >= 2  # then the steps were deleted one by one
    assert untimed(first) == untimed(again)


@pytest.mark.parametrize("target", [["--impl", "latency:two_bugs"],
                                    ["--adapter", f"{sys.executable} -m kpurgatory.conformance.adapters.stdio "
                                                  "latency:two_bugs"]],
                         ids=["in process", "through the stdio adapter"])
def test_the_same_seed_gives_the_same_check_of_a_system_that_answers_late(target, tmp_path, monkeypatch):
    """Each call of the system waits 0-20 ms one time in 20, and pauses 0.2 s one time in 1,000, drawn afresh each
    run: the output, the counterexample files, the corpus and the JUnit report are the same but for the times."""
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    runs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        result = CliRunner().invoke(main, [*CHECK, *target, "--junit", "junit.xml", "--corpus", "corpus"])
        assert result.exit_code == 1, result.output
        runs.append(result.output)
    assert "distinct failure" in runs[0] and "shrunk to" in runs[0]
    assert TIMES.sub("T", runs[0]) == TIMES.sub("T", runs[1])
    first, second = tmp_path / "first", tmp_path / "second"
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    assert files == sorted(path.relative_to(second) for path in second.rglob("*") if path.is_file())
    counterexamples = [path for path in files if path.suffix == ".jsonl"]
    assert counterexamples and len(counterexamples) % 2 == 0  # each counterexample and its corpus entry
    for path in files:
        if path.name != "junit.xml":
            assert (first / path).read_bytes() == (second / path).read_bytes(), path
    junit = [re.sub(r' time="[\d.]+"', "", (run / "junit.xml").read_text()) for run in (first, second)]
    assert junit[0] == junit[1]
