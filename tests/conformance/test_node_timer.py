"""The JavaScript example (conformance/examples/node-timer): a Kafka-like wheel in Node.js passes the timer profile
at the exact level through the subprocess protocol; its --off-by-one variant fails with a counterexample that
`kpurgatory replay` reproduces against it and not against the correct one."""

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import read_traces

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node (Node.js) is not installed")

ADAPTER = "node " + str(Path(__file__).parents[2] / "conformance" / "examples" / "node-timer" / "adapter.js")


def test_the_node_timer_passes_the_timer_profile_exactly(tmp_path):
    result = CliRunner().invoke(main, ["check", "--adapter", ADAPTER, "--examples", "40", "--steps", "40",
                                       "--seed", "1", "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "node-timer 1.0 (hierarchical timing wheel) (timer; level exact" in result.output


def test_the_off_by_one_node_timer_fails_with_a_counterexample_that_replays(tmp_path):
    runner = CliRunner()
    broken = f"{ADAPTER} --off-by-one"
    result = runner.invoke(main, ["check", "--adapter", broken, "--seed", "2", "--max-failures", "1", "--out",
                                  str(tmp_path)], terminal_width=200)
    assert result.exit_code == 1, result.output
    trace = tmp_path / "check-timer-2.jsonl"
    assert len(read_traces(trace)[0].steps) <= 3
    replayed = runner.invoke(main, ["replay", str(trace), "--adapter", broken], terminal_width=200)
    assert replayed.exit_code == 1 and "system differs from the model" in replayed.output
    assert runner.invoke(main, ["replay", str(trace), "--adapter", ADAPTER]).exit_code == 0


def test_the_node_timer_is_not_a_purgatory(tmp_path):
    result = CliRunner().invoke(main, ["check", "--adapter", ADAPTER, "--profile", "purgatory"])
    assert result.exit_code == 2 and "implements timer, not purgatory" in result.output
