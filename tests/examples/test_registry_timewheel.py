"""PyPI timewheel 0.0.5 through the Python vector driver (the judging the pytest plugin's ``kpurgatory_vector`` uses),
at the contract level under its adapter's declarations: it fails only timer cases that add a task with a negative
delay (the finding of conformance/examples/FINDINGS.md: such a task never runs, which shows once the clock moves on)
and passes the others."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kpurgatory.conformance.tools import vectors

pytest.importorskip("timeWheel", reason="needs `pip install timewheel==0.0.5`")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance" / "examples" / "pypi"))
from timewheel_adapter import factory  # noqa: E402  (an example adapter, not part of the package)


def adds_a_negative_delay(tree: Path, entry: dict) -> bool:
    steps = [json.loads(line) for line in (tree / entry["path"]).read_text().splitlines()[1:]]
    return any(step["cmd"] == "timer_add" and step["args"]["delay_ms"] < 0 for step in steps)


def test_timewheel_fails_only_cases_with_a_negative_delay(vector_tree, tmp_path):
    verdicts = {}
    for entry in vectors.read_index(vector_tree)["cases"]:
        system = factory()
        try:
            result, _ = vectors.run_case(vector_tree, entry, system, system.hello(), "contract", tmp_path)
        finally:
            system.close()
        verdicts[entry["id"]] = result.verdict
    timer = [entry for entry in vectors.read_index(vector_tree)["cases"] if entry["profile"] == "timer"]
    negative = {entry["id"] for entry in timer if adds_a_negative_delay(vector_tree, entry)}
    assert negative, "the tree has no case with a negative delay: nothing here tells the finding"
    failed = {case for case, verdict in verdicts.items() if verdict == "fail"}
    assert failed and failed <= negative
    assert all(verdicts[entry["id"]] == "pass" for entry in timer if entry["id"] not in negative)
    assert {verdicts[case] for case in verdicts.keys() - {entry["id"] for entry in timer}} == {"skip"}
