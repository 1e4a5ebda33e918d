"""``kpurgatory matrix --implementations``: drivers' results files of the test vectors join the matrix page, a row
per implementation, a cell per profile and kind, each failing case linked to its observed trace, its steps shown."""

import json

import attrs
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import matrix
from kpurgatory.conformance.tools.vectors import vector_trace
from kpurgatory.conformance.traces.codec import Trace, write_traces
from kpurgatory.model import vocabulary as v

FAILING = "1/timer/coverage/coverage.timer.late.jsonl"


def results(implementation: str, cases: list[dict], level: str = "contract") -> dict:
    return {"format": "kpurgatory-vector-results", "version": 1, "driver": "go", "implementation": implementation,
            "level": level, "declarations": {"firing": "never_early_up_to_tick_late"}, "cases": cases}


def case(path: str, verdict: str, reason=None, step=None, observed=None) -> dict:
    return {"path": path, "verdict": verdict, "reason": reason, "step": step, "observed": observed}


def test_results_files_join_the_page_with_verdicts_declarations_and_observed_traces(tmp_path):
    vector = vector_trace("coverage.timer.late", "timer", v.Params(), [v.TimerAdd("t", 5), v.Advance(5)], "coverage")
    answered = [attrs.evolve(vector.steps[0], system=vector.steps[0].observation),
                attrs.evolve(vector.steps[1], system=v.Observation())]  # t never ran
    observed = write_traces(tmp_path / "driver" / "coverage.timer.late.observed.jsonl",
                            Trace(attrs.evolve(vector.header, implementation="<b>wheel</b>"), answered))
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(results("good-wheel", [
        case("1/timer/scenarios/kafka.TimerTest.testTaskExpiration.jsonl", "pass"),
        case("1/timer/findings/finding.timer.deadline-wraps.jsonl", "fail", "error: expected 'delay_out_of_range'",
             1, None),
        case("1/purgatory/coverage/coverage.purgatory.purge-fired.jsonl", "skip", "not implemented")])))
    (folder / "bad.json").write_text(json.dumps(results("<b>wheel</b>", [
        case(FAILING, "fail", "on_time: still pending after advance to 5: t", 2, str(observed))])))
    out = tmp_path / "matrix"
    result = CliRunner().invoke(main, ["matrix", "--implementations", str(folder), "--out", str(out)],
                                terminal_width=200)
    assert result.exit_code == 1, result.output  # an implementation failed a case
    data = json.loads((out / "matrix.json").read_text())
    assert [column["id"] for column in data["columns"]] == [column.id for column in matrix.VECTOR_COLUMNS]
    bad, good = data["rows"]  # the files in name order; no system was run
    assert good["name"] == "good-wheel (go)" and "never_early_up_to_tick_late" in good["implementation"]
    assert good["cells"]["vectors timer/scenarios"]["verdict"] == "pass"
    findings = good["cells"]["vectors timer/findings"]
    assert findings["verdict"] == "finding"  # Kafka fails these by design
    assert findings["findings"][0]["name"] == "deadline-wraps" and "wraps negative" in findings["findings"][0][
        "description"]
    assert good["cells"]["vectors purgatory/coverage"]["verdict"] == "n/a"
    failing = bad["cells"]["vectors timer/coverage"]
    assert failing["verdict"] == "failure" and failing["failures"][0]["signature"] == FAILING
    trace = failing["failures"][0]["trace"]
    assert (out / trace).read_bytes() == observed.read_bytes()
    page = (out / "index.html").read_text()
    assert f'href="{trace}"' in page and "<b>wheel</b>" not in page and "&lt;b&gt;wheel" in page
    assert "<td>advance(to_ms=5)</td><td>None; run(t)</td><td>None</td>" in page  # its steps, t never ran


def test_a_file_that_is_not_a_results_file_is_a_usage_error(tmp_path):
    broken = tmp_path / "results.json"
    broken.write_text(json.dumps({**results("x", []), "driver": "cobol"}))
    result = CliRunner().invoke(main, ["matrix", "--implementations", str(broken), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and str(broken) in result.output and "driver" in result.output, result.output
