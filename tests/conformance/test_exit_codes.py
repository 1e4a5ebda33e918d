"""Exit codes say who failed — 0 pass, 1 the implementation, 2 the input or the usage, 3 the tool or the adapter —
and the JUnit report tells a failure (a wrong answer) from an error (a system that could not be driven), on every
path."""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import EXIT_CODES_HELP, SUBCOMMANDS, main

MISBEHAVING = f"{sys.executable} {Path(__file__).with_name('misbehaving_adapter.py')}"
BROKEN = "test_check:LateReaper"  # reports expiries one advance late
HEADER = {"trace": "t", "seq": 0, "header": {"format": "kpurgatory-trace", "version": 1, "profile": "timer",
                                             "params": {"tick_ms": 1, "wheel_size": 20, "start_ms": 0},
                                             "implementation": "x"}}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


def junit_verdicts(path: Path) -> list[tuple[str, str]]:
    return [(case.get("name"), child.tag) for case in ET.parse(path).getroot().iter("testcase")
            for child in case if child.tag in ("failure", "error")]


def test_an_adapter_dying_before_its_first_reply_is_an_error_with_a_junit_report(tmp_path):
    junit = tmp_path / "junit.xml"
    result = invoke("check", "--adapter", f"{MISBEHAVING} crash 0", "--junit", str(junit), "--out", str(tmp_path))
    assert result.exit_code == 3, result.output
    assert "adapter crashed: exited with code 3" in result.output
    assert junit_verdicts(junit) == [("hello (exact)", "error")]
    assert ET.parse(junit).getroot().get("errors") == "1"


def test_an_adapter_crashing_mid_run_is_an_error_and_a_wrong_answer_a_failure(tmp_path, monkeypatch):
    crashed = invoke("check", "--adapter", f"{MISBEHAVING} crash 4", "--profile", "timer", "--examples", "5",
                     "--junit", str(tmp_path / "crash.xml"), "--out", str(tmp_path))
    assert crashed.exit_code == 3, crashed.output
    assert junit_verdicts(tmp_path / "crash.xml") == [("timer (exact)", "error")]
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    wrong = invoke("check", "--impl", BROKEN, "--profile", "timer", "--examples", "100", "--steps", "30", "--seed",
                   "3", "--junit", str(tmp_path / "wrong.xml"), "--out", str(tmp_path))
    assert wrong.exit_code == 1, wrong.output
    assert junit_verdicts(tmp_path / "wrong.xml") == [("timer (exact)", "failure")]


def test_an_unwritable_out_is_exit_3_and_the_counterexample_is_printed(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = invoke("check", "--impl", BROKEN, "--profile", "timer", "--examples", "100", "--steps", "30", "--seed",
                    "3", "--out", str(blocker / "out"))
    assert result.exit_code == 3, result.output
    assert "cannot write the counterexample" in result.output
    printed = result.output[result.output.index("counterexample (JSON Lines):"):].splitlines()[1]
    assert json.loads(printed)["header"]["format"] == "kpurgatory-trace"


def test_a_float_where_an_integer_belongs_is_bad_input_not_a_crash(tmp_path):
    path = tmp_path / "float.jsonl"
    step = {"trace": "t", "seq": 1, "cmd": "timer_add", "args": {"task": "a", "delay_ms": 8.0}, "result": None,
            "events": []}
    path.write_text(json.dumps(HEADER) + "\n" + json.dumps(step) + "\n")
    result = invoke("replay", str(path))
    assert result.exit_code == 2 and "args.delay_ms must be integer" in result.stderr, result.output


def test_replay_against_an_adapter_that_crashes_is_exit_3(tmp_path):
    path = tmp_path / "t.jsonl"
    steps = [{"trace": "t", "seq": seq, "cmd": "timer_add", "args": {"task": f"a{seq}", "delay_ms": 8},
              "result": None, "events": []} for seq in (1, 2, 3)]
    path.write_text("".join(json.dumps(line) + "\n" for line in [HEADER, *steps]))
    result = invoke("replay", str(path), "--adapter", f"{MISBEHAVING} crash 3")
    assert result.exit_code == 3, result.output
    assert "system failed: adapter crashed" in result.output


def test_scenarios_against_an_adapter_that_crashes_is_exit_3():
    result = invoke("scenarios", "--only", "seed.cascade", "--adapter", f"{MISBEHAVING} crash 2")
    assert result.exit_code == 3, result.output


def test_usage_errors_are_exit_2(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HEADER) + "\n")
    both = invoke("replay", str(path), "--impl", "a:b", "--adapter", "c")
    assert both.exit_code == 2 and "not both" in both.output
    both = invoke("check", "--impl", "kpurgatory.conformance.adapters.reference:factory", "--adapter", "c")
    assert both.exit_code == 2 and "not both" in both.output
    assert invoke("check", "--examples", "0").exit_code == 2


@pytest.mark.parametrize("command", ["", *sorted(SUBCOMMANDS)])
def test_every_commands_help_lists_the_exit_codes(command):
    result = invoke(*filter(None, [command]), "--help")
    assert result.exit_code == 0
    assert " ".join(EXIT_CODES_HELP.split()) in " ".join(result.output.split())


def test_a_crash_of_the_tool_is_exit_3_saying_it_is_a_bug(tmp_path, monkeypatch):
    from kpurgatory.conformance.traces import replay as replay_module

    def crash(*args, **kwargs):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(replay_module, "replay", crash)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HEADER) + "\n")
    result = invoke("replay", str(path))
    assert result.exit_code == 3
    assert "TypeError: unsupported operand" in result.stderr and "a bug in kpurgatory" in result.stderr
