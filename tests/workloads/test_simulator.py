"""The simulator's traffic is expressible in the model's vocabulary: a recorded mixed run, with completions by watch,
check and expiry and with purges, replays against the model without a divergence; runs are reproducible; the seed
walkthroughs say what they claim; the command writes traces, figures and a plot."""

import re
from collections import Counter

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.tools.simulate import StepCollector, seed_fetch_walkthrough, seed_produce_walkthrough
from kpurgatory.conformance.traces.codec import Header, read_traces
from kpurgatory.impl.workloads import Errors, Simulation, TopicPartition, scenario_config
from kpurgatory.model import vocabulary as v

#: A small mixed run that still takes every route: followers stall past the produce timeout, consumers wait past
#: their max wait, sessions run out, a coordinator moves, purges run.
SMALL = dict(duration_ms=6000, partitions=6, producers=3, records_per_s=500, consumers=3, groups=2,
             members_per_group=4, produce_timeout_ms=800, slow_followers_per_min=40, slow_follower_ms=(600, 1500),
             replica_lag_time_max_ms=1200, session_timeout_ms=1500, heartbeat_interval_ms=500,
             commit_interval_ms=700, member_pause_probability=0.05, coordinator_moves_per_min=20,
             purge_interval=20)


def recorded_run(**changes):
    collectors: dict[str, tuple[v.Params, StepCollector]] = {}

    def record(name, params):
        collectors[name] = (params, StepCollector())
        return collectors[name][1]

    simulation = Simulation(scenario_config("mixed", **{**SMALL, **changes}), record)
    simulation.run()
    traces = {name: collector.trace(Header(name, "purgatory", params)) for name, (params, collector) in
              collectors.items()}
    return simulation, traces


@pytest.fixture(scope="module")
def small_run():
    return recorded_run()


def test_every_recorded_purgatory_replays_against_the_model(small_run):
    simulation, traces = small_run
    assert len(traces) == 9  # three brokers, three purgatories each
    for trace in traces.values():
        report = replay(trace)
        assert report.ok, (trace.trace_id, report.error, report.first_failure)


def test_the_run_takes_every_route(small_run):
    simulation, traces = small_run
    for kind in ("produce", "fetch", "heartbeat"):
        routes = sum((purgatory.completion_routes() for purgatory in simulation.purgatories(kind)), Counter())
        assert routes["check"] > 0 and routes["expire"] > 0, (kind, routes)
    assert sum(p.completion_routes()["try"] for p in simulation.purgatories("heartbeat")) > 0
    assert sum(p.purges for p in simulation.purgatories()) > 0
    commands = {command.name for trace in traces.values() for command in trace.commands}
    assert commands == {"watch", "set_ready", "check", "advance", "watched", "delayed", "shutdown"}
    timed_out = sum(sum(broker.replica_manager.produce_expirations.values()) for broker in simulation.brokers)
    assert timed_out > 0


def test_runs_are_reproducible():
    runs = [recorded_run(duration_ms=1500, seed=seed)[1]["broker-1.produce"].steps for seed in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_the_produce_walkthrough_completes_with_the_last_follower():
    trace, responses = seed_produce_walkthrough(laggard_catches_up=True)
    assert replay(trace).ok
    checks = [(step.command.key, step.observation.result) for step in trace.steps if step.command.name == "check"]
    assert checks == [("t-0", 0), ("t-1", 0), ("t-2", 1)]
    assert [{tp.partition: status.error for tp, status in r.items()} for r in responses] == \
        [{0: Errors.NONE, 1: Errors.NONE, 2: Errors.NONE}]


def test_the_produce_walkthrough_times_out_on_the_laggard_only():
    trace, responses = seed_produce_walkthrough(laggard_catches_up=False)
    assert replay(trace).ok
    assert any(v.Expire("p1:1") in step.observation.events for step in trace.steps)
    assert [{tp.partition: status.error for tp, status in r.items()} for r in responses] == \
        [{0: Errors.NONE, 1: Errors.NONE, 2: Errors.REQUEST_TIMED_OUT}]


def test_the_fetch_walkthrough_completes_two_at_once_and_purges_their_stale_entries():
    trace, responses = seed_fetch_walkthrough()
    assert replay(trace).ok
    (check,) = [step for step in trace.steps if step.command == v.Check("t-2")]
    assert check.observation.result == 2
    assert v.Purge(2) in [event for step in trace.steps for event in step.observation.events]
    watched = [step.observation.result for step in trace.steps if step.command.name == "watched"]
    assert watched[:3] == [6, 4, 2]
    fetched = [dict(r) for r in responses if isinstance(r, list)]
    assert [data.size_in_bytes for r in fetched[:2] for data in r.values()] == [0, 300, 300, 0]
    assert fetched[0][TopicPartition("t", 2)].next_fetch_offset == 5


def test_the_command_writes_traces_that_replay_and_a_plot(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["simulate", "--scenario", "produce", "--duration-ms", "1000", "--partitions", "3",
                                  "--out", str(tmp_path), "--plot", str(tmp_path / "figures.png")],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert re.search(r"delayed operations: \d+", result.output)
    assert (tmp_path / "figures.png").stat().st_size > 10_000
    written = sorted(path.name for path in tmp_path.glob("*.jsonl"))
    assert "broker-0.produce.jsonl" in written and not any("heartbeat" in name for name in written)
    assert read_traces(tmp_path / "broker-0.produce.jsonl")[0].trace_id == "produce.broker-0.produce"
    replayed = runner.invoke(main, ["replay", *map(str, sorted(tmp_path.glob("*.jsonl")))])
    assert replayed.exit_code == 0, replayed.output


def test_the_seed_scenario_needs_an_output_folder(tmp_path):
    assert CliRunner().invoke(main, ["simulate", "--scenario", "seed"]).exit_code == 2
    result = CliRunner().invoke(main, ["simulate", "--scenario", "seed", "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert sorted(trace.trace_id for path in tmp_path.iterdir() for trace in read_traces(path)) == \
        ["seed.delayed-fetch", "seed.delayed-produce", "seed.delayed-produce-timeout"]
