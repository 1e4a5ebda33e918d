"""record and campaign: recordings that validate as they should, and counterexamples that replay reproduces."""

import json
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.spark.validate import run_validation

pytestmark = pytest.mark.spark
REFERENCE = "kpurgatory.conformance.adapters.reference:factory"
#: numDelayed reports the estimate of operations instead of the timer's size (KAFKA-1616)
MUTANT = "kpurgatory.conformance.tools.mutants:kafka_1616_num_delayed"


def invoke(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args], terminal_width=200)


def test_recordings_of_a_conforming_system_all_pass_in_both_formats(spark, tmp_path):
    recorded = invoke("record", "--impl", REFERENCE, "--traces", 12, "--steps", 40, "--seed", 100, "--jsonl",
                      "--out", tmp_path)
    assert recorded.exit_code == 0, recorded.output
    for form in ("parquet", "jsonl"):
        summary = run_validation(spark, [tmp_path / f"corpus.{form}"], tmp_path / f"out-{form}")
        assert summary.verdicts == {"pass": 12, "fail": 0, "finding": 0} and summary.input_rows == 12 * 41 == summary.checked_rows


def test_a_run_the_system_breaks_off_is_kept_up_to_its_last_answer(spark, tmp_path):
    crashing = Path(__file__).parents[1] / "conformance" / "misbehaving_adapter.py"  # exits on its 12th request
    adapter = shlex.join([sys.executable, str(crashing), "crash", "12"])
    recorded = invoke("record", "--adapter", adapter, "--traces", 3, "--steps", 20, "--out", tmp_path)
    assert recorded.exit_code == 0 and "3 runs broken off by the system" in recorded.output, recorded.output
    summary = run_validation(spark, [tmp_path / "corpus.parquet"], tmp_path / "out")
    assert summary.verdicts == {"pass": 3, "fail": 0, "finding": 0} and summary.input_rows == 3 * (1 + 10)


def test_recordings_of_a_buggy_system_fail_on_its_bug(spark, tmp_path):
    recorded = invoke("record", "--impl", MUTANT, "--workload", "purgatory", "--traces", 10, "--out", tmp_path)
    assert recorded.exit_code == 0, recorded.output
    summary = run_validation(spark, [tmp_path / "corpus.parquet"], tmp_path / "out", "contract")
    assert summary.verdicts["fail"] > 0 and set(summary.properties) == {"counters"}
    assert summary.input_rows == summary.checked_rows


def test_a_campaign_against_a_conforming_system_passes_with_coverage(spark, tmp_path):
    result = invoke("campaign", "--impl", REFERENCE, "--seeds", 2, "--examples", 5, "--steps", 30, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "4 checks (timer, purgatory; seeds 0..1)" in result.output and "cascade" in result.output
    assert not (tmp_path / "counterexamples").exists()


def test_a_campaign_finds_a_shrunk_counterexample_that_replay_reproduces(spark, tmp_path):
    result = invoke("campaign", "--impl", MUTANT, "--profile", "purgatory", "--seeds", 1, "--examples", 20,
                    "--out", tmp_path)
    assert result.exit_code == 1, result.output
    [trace] = (tmp_path / "counterexamples").glob("check-purgatory-0.jsonl")
    steps = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    assert steps[-1]["cmd"] == "delayed" and len(steps) <= 5  # shrunk to the miscounted gauge
    assert invoke("replay", trace, "--impl", MUTANT).exit_code == 1
    assert invoke("replay", trace).exit_code == 1  # the trace alone: the mutant's recorded answers fail
    assert invoke("replay", trace, "--impl", REFERENCE).exit_code == 0  # a live system's answers replace them
