"""The shared corpus of failing runs (conformance/check/corpus.py): what a check at one level found, a check at the
other level replays first and reports, with the planted `TwoBugs` (``size`` one too many, t1 never runs); each run is
stored once, only runs a system can be sent are replayed, and a bad file in the corpus is bad input."""

import sys
from pathlib import Path

from click.testing import CliRunner

from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.conformance.check import corpus
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import Header, model_trace, read_traces, write_traces
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import planted  # noqa: E402

#: small checks of `planted.TwoBugs`
EXACT = dict(profile="timer", level="exact", examples=15, steps=10, seed=2)
CONTRACT = dict(profile="timer", level="contract", examples=3, steps=10, seed=3)


def test_a_failure_found_at_the_exact_level_is_replayed_and_reported_at_the_contract_level(tmp_path):
    shared = tmp_path / "corpus"
    exact = run_check(planted.TwoBugs, **EXACT, corpus=shared)
    assert exact.corpus_runs == 0 and exact.corpus_added == len(exact.failures) >= 1
    stored = sorted(shared.iterdir())
    assert ({tuple(read_traces(path)[0].commands) for path in stored}
            == {tuple(found.counterexample.commands) for found in exact.failures})

    contract = run_check(planted.TwoBugs, **CONTRACT, corpus=shared)
    assert not contract.passed and contract.corpus_runs == len(stored)
    # both bugs break a contract property too: each run the exact level found fails first, from the corpus
    assert ({tuple(found.counterexample.commands) for found in contract.failures[:len(stored)]}
            == {tuple(found.counterexample.commands) for found in exact.failures})
    assert {str(found.signature) for found in contract.failures} <= {"breaks on_time", "breaks counters"}
    assert set(stored) <= set(shared.iterdir())  # the same runs, stored once


def test_check_command_replays_at_the_exact_level_what_the_contract_level_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["check", "--impl", "planted:TwoBugs", "--profile", "timer", "--steps", "10", "--corpus", "shared"]
    alone = CliRunner().invoke(main, [*common[:-2], "--examples", "2", "--seed", "2"])
    assert alone.exit_code == 0, alone.output
    contract = CliRunner().invoke(main, [*common, "--level", "contract", "--examples", "5", "--seed", "1"])
    assert contract.exit_code == 1 and "timer: 0 runs of the corpus replayed, 1 added to it" in contract.output
    assert "system breaks on_time" in contract.output
    exact = CliRunner().invoke(main, [*common, "--examples", "2", "--seed", "2"])
    assert exact.exit_code == 1 and "timer: 1 run of the corpus replayed, 0 added to it" in exact.output
    assert "system differs from the model: expected 1 events, observed 0" in exact.output
    assert "1 distinct failure," in exact.output and "--corpus shared" in exact.output


def test_only_runs_the_system_can_be_sent_are_replayed(tmp_path):
    params = v.Params(tick_ms=1, wheel_size=4, start_ms=0, purge_interval=1)
    cancels = model_trace(Header("cancels", "purgatory", params), [v.Watch("o0", ["k0"], 10), v.CancelKey("k0")])
    far = model_trace(Header("far", "timer", params), [v.TimerAdd("t0", 500), v.Advance(1)])
    near = model_trace(Header("near", "timer", params), [v.TimerAdd("t0", 5), v.Advance(100)])
    for trace in (cancels, far, near):
        assert corpus.add(tmp_path, trace) is not None
    assert corpus.add(tmp_path, near) is None
    assert corpus.load(tmp_path, "purgatory") == [(params, cancels.commands)]
    assert corpus.load(tmp_path, "purgatory", Hello("old", ["purgatory"], unsupported=["cancel_key"])) == []
    narrow = Hello("narrow", ["timer"], declarations=Declarations(max_deadline_ms=100, beyond_max_deadline="undefined"))
    assert corpus.load(tmp_path, "timer", narrow) == [(params, near.commands)]
    assert len(corpus.load(tmp_path, "timer")) == 2


def test_a_file_in_the_corpus_that_is_not_a_trace_is_bad_input(tmp_path):
    write_traces(tmp_path / "good.jsonl", model_trace(Header("good", "timer", v.Params()), [v.Advance(1)]))
    (tmp_path / "bad.jsonl").write_text('{"trace": "bad"}\n')
    result = CliRunner().invoke(main, ["check", "--examples", "1", "--corpus", str(tmp_path)])
    assert result.exit_code == 2 and "bad.jsonl:1" in result.output
