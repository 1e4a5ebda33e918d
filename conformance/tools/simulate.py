"""``kpurgatory simulate``: the purgatory's real users as a workload — traces, figures and a plot.

The broker simulator (kpurgatory.impl.workloads) drives DelayedProduce, DelayedFetch and DelayedHeartbeat operations
through kpurgatory.impl on a virtual clock. With ``--out DIR`` every purgatory that watched anything is written as
one trace (profile ``purgatory``) in the shared format, ``DIR/<broker>.<purgatory>.jsonl``: what impl did, expressed
in the model's vocabulary (see kpurgatory.impl.workloads.scheduler for how the operations' real conditions become
``ready_on`` and ``set_ready``). ``kpurgatory replay DIR/*.jsonl`` checks them against the model.

The figures: per purgatory kind, the operations watched and how they completed, the expiry rate, the latency from
watch to completion in virtual ms, watched() over time; and impl's own speed on this traffic (wall time inside the
purgatory calls, the operations' callbacks included). ``--plot`` draws them.

``--scenario seed`` instead writes the two walkthroughs of the seed example as scenario files: seed-produce.jsonl
(an acks=-1 produce over three partitions, completed by the last follower to catch up; and one timing out on the
laggard only) and seed-fetch.jsonl (new data on one partition completes two fetches at once; the purge then drops
their stale entries from the other partitions' lists).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import click
from rich.console import Console
from rich.table import Table

from kpurgatory.conformance.traces.codec import Header, Step, Trace, header_line, step_line, write_traces
from kpurgatory.impl.workloads import (FetchParams, Partition, PartitionData, RecordBatch, ReplicaManager, Scheduler,
                                       SimulatedPurgatory, Simulation, TopicPartition, scenario_config)
from kpurgatory.impl.workloads.simulator import PURGATORY_KINDS, SCENARIOS
from kpurgatory.model import vocabulary as v
from kpurgatory.conformance.terminal import command_console

IMPLEMENTATION = "kpurgatory.impl, driven by kpurgatory.impl.workloads"


# ---------------------------------------------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------------------------------------------


class TraceWriter:
    """Streams one purgatory's trace to a JSON Lines file while the simulation runs."""

    def __init__(self, path: Path, header: Header):
        self.path = path
        self.trace_id = header.trace_id
        self.steps = 0
        self._file = path.open("w")
        self._write(header_line(header))

    def _write(self, line: dict) -> None:
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")

    def __call__(self, command: v.Command, observation: v.Observation) -> None:
        self.steps += 1
        self._write(step_line(self.trace_id, Step(self.steps, command, observation)))

    def close(self) -> None:
        self._file.close()


class StepCollector:
    """Keeps one purgatory's steps in memory, for a trace built afterwards."""

    def __init__(self) -> None:
        self.pairs: list[tuple[v.Command, v.Observation]] = []

    def __call__(self, command: v.Command, observation: v.Observation) -> None:
        self.pairs.append((command, observation))

    def trace(self, header: Header) -> Trace:
        return Trace(header, [Step(seq, command, observation)
                              for seq, (command, observation) in enumerate(self.pairs, start=1)])


def record_into(out: Path, scenario: str, description: str) -> tuple[Callable, dict[str, TraceWriter]]:
    """A ``record`` factory for `Simulation` writing ``out/<purgatory>.jsonl``, and the writers it made."""
    out.mkdir(parents=True, exist_ok=True)
    writers: dict[str, TraceWriter] = {}

    def record(name: str, params: v.Params) -> TraceWriter:
        header = Header(f"{scenario}.{name}", "purgatory", params, IMPLEMENTATION, f"{description}: {name}")
        writers[name] = TraceWriter(out / f"{name}.jsonl", header)
        return writers[name]

    return record, writers


# ---------------------------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------------------------


def percentile(values: Sequence[int], fraction: float) -> int | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


WATCHED, DELAYED = 1, 2  # columns of SimulatedPurgatory.samples


def summed_gauge(purgatories: Sequence[SimulatedPurgatory], column: int) -> list[int]:
    """A gauge summed over brokers at each sample time (every purgatory samples at the same times)."""
    return [sum(values) for values in zip(*([sample[column] for sample in p.samples] for p in purgatories))]


def latencies_ms(purgatories: Sequence[SimulatedPurgatory]) -> list[int]:
    return sorted(latency for purgatory in purgatories for _, latency, _ in purgatory.completions)


def kind_figures(purgatories: Sequence[SimulatedPurgatory], duration_ms: int) -> dict:
    """One purgatory kind over all brokers."""
    routes: Counter[str] = sum((purgatory.completion_routes() for purgatory in purgatories), Counter())
    latencies = latencies_ms(purgatories)
    watched = summed_gauge(purgatories, WATCHED)
    watches = sum(purgatory.watches for purgatory in purgatories)
    return {
        "watched ops": watches,
        "completed by watch": routes["try"],
        "completed by check": routes["check"],
        "expired": routes["expire"],
        "expiry rate %": round(100 * routes["expire"] / watches, 2) if watches else None,
        "expirations / s": round(routes["expire"] / (duration_ms / 1000), 2) if duration_ms else None,
        "latency p50 ms": percentile(latencies, 0.50),
        "latency p99 ms": percentile(latencies, 0.99),
        "latency max ms": max(latencies, default=None),
        "watched() mean": round(sum(watched) / len(watched), 1) if watched else None,
        "watched() max": max(watched, default=None),
        "purges (entries)": f"{sum(p.purges for p in purgatories)} ({sum(p.purged for p in purgatories)})",
    }


def figures(simulation: Simulation, wall_s: float, cpu_s: float) -> dict:
    """The run's figures. impl time is wall time inside the purgatory calls: on a busy machine compare the
    simulation's wall and CPU time to see how much of it was spent waiting for a core."""
    config = simulation.config
    purgatories = simulation.purgatories()
    busy_s = sum(purgatory.busy_s for purgatory in purgatories)
    watches = sum(purgatory.watches for purgatory in purgatories)
    calls = sum(purgatory.calls for purgatory in purgatories)
    managers = [broker.replica_manager for broker in simulation.brokers]
    return {
        "kinds": {kind: kind_figures(simulation.purgatories(kind), config.duration_ms) for kind in PURGATORY_KINDS},
        "delayed operations": watches,
        "produce request latency (acks=-1, client) p50/p99 ms":
            (percentile(simulation.produce_request_latencies_ms, 0.5),
             percentile(simulation.produce_request_latencies_ms, 0.99)),
        "produce partitions timed out": sum(sum(m.produce_expirations.values()) for m in managers),
        "fetch expirations follower/consumer": (sum(m.fetch_expirations["follower"] for m in managers),
                                                sum(m.fetch_expirations["consumer"] for m in managers)),
        "impl calls (watch, check, advance)": calls,
        "impl time s": round(busy_s, 3),
        "impl delayed ops / s": round(watches / busy_s) if busy_s else None,
        "impl calls / s": round(calls / busy_s) if busy_s else None,
        "simulation wall / CPU time s": (round(wall_s, 2), round(cpu_s, 2)),
    }


def print_figures(console: Console, scenario: str, config, result: dict) -> None:
    table = Table(title=f"kpurgatory simulate --scenario {scenario} (seed {config.seed}, "
                        f"{config.duration_ms / 1000:g} virtual s)")
    table.add_column("purgatory")
    for kind in PURGATORY_KINDS:
        table.add_column(kind, justify="right")
    rows = next(iter(result["kinds"].values())).keys()
    for row in rows:
        table.add_row(row, *("—" if result["kinds"][kind][row] is None else str(result["kinds"][kind][row])
                             for kind in PURGATORY_KINDS))
    console.print(table)
    for name, value in result.items():
        if name != "kinds":
            console.print(f"{name}: {value}")


def plot_figures(simulation: Simulation, path: Path) -> Path:
    """Four panels: watched() and delayed over time, watches and expirations per second, latency CDFs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = simulation.config
    colours = {"produce": "tab:blue", "fetch": "tab:orange", "heartbeat": "tab:green"}
    figure, axes = plt.subplots(2, 2, figsize=(14, 9), constrained_layout=True)
    (gauges, delayed_axis), (rates, latency) = axes
    seconds = max(1, -(-config.duration_ms // 1000))  # the completions at the very end join the last second
    for kind in PURGATORY_KINDS:
        purgatories = [p for p in simulation.purgatories(kind) if p.watches]
        if not purgatories:
            continue
        colour = colours[kind]
        times = [t / 1000 for t, _, _ in purgatories[0].samples]
        gauges.plot(times, summed_gauge(purgatories, WATCHED), color=colour, linewidth=0.8, label=kind)
        delayed_axis.plot(times, summed_gauge(purgatories, DELAYED), color=colour, linewidth=0.8, label=kind)
        expired, completed = [0] * seconds, [0] * seconds
        for purgatory in purgatories:
            for at_ms, _, route in purgatory.completions:
                second = min(at_ms // 1000, seconds - 1)
                completed[second] += 1
                expired[second] += route == "expire"
        rates.plot(range(seconds), completed, color=colour, linewidth=1, label=f"{kind}: completed")
        rates.plot(range(seconds), expired, color=colour, linewidth=1, linestyle="--", label=f"{kind}: expired")
        latencies = latencies_ms(purgatories)
        fractions = [(index + 1) / len(latencies) for index in range(len(latencies))]
        latency.step([max(ms, 0.5) for ms in latencies], fractions, where="post", color=colour,
                     label=f"{kind}: p50 {percentile(latencies, 0.5)} ms, p99 {percentile(latencies, 0.99)} ms")
    gauges.set(title="watched() — watch-list entries, stale ones included (sum over brokers)",
               xlabel="virtual time (s)", ylabel="entries")
    delayed_axis.set(title="delayed — operations in the timer (sum over brokers)", xlabel="virtual time (s)",
                     ylabel="operations")
    rates.set(title="completions and expirations per virtual second", xlabel="virtual time (s)",
              ylabel="operations / s", yscale="symlog", ylim=(0, 10 ** 5))
    latency.set(title="latency from watch to completion (0 ms drawn at 0.5)", xlabel="virtual ms", xscale="log",
                ylabel="fraction of operations")
    for axis in (gauges, delayed_axis, latency):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    rates.grid(alpha=0.3)
    rates.legend(fontsize=8, ncols=3, loc="upper center")
    figure.suptitle(f"kpurgatory simulate: {config.brokers} brokers, {config.partitions} partitions, "
                    f"{config.producers} producers, {config.consumers} consumers, "
                    f"{config.groups}×{config.members_per_group} group members, seed {config.seed}")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


# ---------------------------------------------------------------------------------------------------------------
# The seed walkthroughs
# ---------------------------------------------------------------------------------------------------------------


class Walkthrough:
    """A scripted broker 0 leading ``partitions`` (name -> replicas), with its produce and fetch purgatories; the
    purgatory named by ``recorded`` is recorded."""

    def __init__(self, replicas: dict[int, tuple[int, ...]], recorded: str, purge_interval: int = 1000):
        self.scheduler = Scheduler()
        self.params = v.Params(purge_interval=purge_interval)
        self.steps = StepCollector()
        self.partitions = {TopicPartition("t", index): Partition(TopicPartition("t", index), replicas[index],
                                                                  segment_bytes=1 << 20)
                           for index in replicas}
        self.purgatories = {kind: SimulatedPurgatory(f"broker-0.{kind}", self.scheduler, self.params,
                                                     self.steps if kind == recorded else None)
                            for kind in ("produce", "fetch")}
        self.recorded = self.purgatories[recorded]
        self.replica_manager = ReplicaManager(0, self.partitions, self.purgatories["produce"],
                                              self.purgatories["fetch"], self.scheduler.action_queue,
                                              self.scheduler.clock)
        self.responses: list = []

    def follower_fetch(self, follower: int, partition: int, fetch_offset: int) -> None:
        """The follower tells the leader it has everything before ``fetch_offset``."""
        self.replica_manager.fetch_messages(FetchParams(follower, 500, 1),
                                            [(TopicPartition("t", partition), PartitionData(fetch_offset))],
                                            lambda response: None, f"r{follower}:{fetch_offset}")

    def trace(self, trace_id: str, description: str, until_ms: int) -> Trace:
        self.scheduler.run_until(until_ms)
        self.recorded.sample()
        self.recorded.shutdown()
        return self.steps.trace(Header(trace_id, "purgatory", self.params, IMPLEMENTATION, description))


def seed_produce_walkthrough(laggard_catches_up: bool) -> tuple[Trace, list]:
    """Produce 10 records to t-0, t-1, t-2 (led by broker 0; followed by brokers 1, 2, 3) with acks=-1 and a
    1000 ms timeout; the followers catch up at 3, 7 and (if ``laggard_catches_up``) 12 ms."""
    walk = Walkthrough({0: (0, 1), 1: (0, 2), 2: (0, 3)}, "produce")
    batches = {topic_partition: RecordBatch(10, 1000) for topic_partition in walk.partitions}
    walk.scheduler.at(0, walk.replica_manager.append_records, 1000, -1, batches, walk.responses.append, "p1:1")
    for time_ms, follower, partition in ((3, 1, 0), (7, 2, 1), (12, 3, 2))[:3 if laggard_catches_up else 2]:
        walk.scheduler.at(time_ms, walk.follower_fetch, follower, partition, 10)
        walk.scheduler.at(time_ms, walk.recorded.sample)
    if laggard_catches_up:
        trace = walk.trace("seed.delayed-produce", "An acks=-1 produce over t-0, t-1, t-2 waits in the produce "
                           "purgatory until each partition's follower has fetched past its records. The checks "
                           "after the first two followers catch up complete nothing; the third completes it (via "
                           "check), leaving stale entries on t-0 and t-1 (watched 2, delayed 0). The response: NONE "
                           "for every partition.", 20)
    else:
        trace = walk.trace("seed.delayed-produce-timeout", "The same produce, but t-2's follower never catches "
                           "up: at 1000 ms the operation expires (complete via expire, then expire). The response: "
                           "NONE for t-0 and t-1, REQUEST_TIMED_OUT for t-2 only.", 1200)
    return trace, walk.responses


def seed_fetch_walkthrough() -> tuple[Trace, list]:
    """Three consumer fetches (min 1 byte, max wait 500 ms) on t-1..t-3, each watching two partitions; new data on
    t-2 completes the two watching it. Purge interval 1."""
    walk = Walkthrough({1: (0,), 2: (0,), 3: (0,)}, "fetch", purge_interval=1)
    params = FetchParams(-1, 500, 1)
    for op_id, partitions in (("c1:1", (1, 2)), ("c2:1", (2, 3)), ("c3:1", (1, 3))):
        walk.scheduler.at(0, walk.replica_manager.fetch_messages, params,
                [(TopicPartition("t", index), PartitionData(0)) for index in partitions], walk.responses.append, op_id)
    walk.scheduler.at(0, walk.recorded.sample)
    walk.scheduler.at(50, walk.replica_manager.append_records, 1000, 1, {TopicPartition("t", 2): RecordBatch(5, 300)},
            walk.responses.append, "p1:1")
    walk.scheduler.at(50, walk.recorded.sample)
    walk.scheduler.at(200, walk.recorded.sample)
    trace = walk.trace("seed.delayed-fetch", "Fetches c1 (t-1, t-2), c2 (t-2, t-3) and c3 (t-1, t-3) wait for data. "
                       "An acks=1 produce to t-2 raises its high watermark; the check on t-2 completes c1 and c2 at "
                       "once (result 2), leaving their stale entries on t-1 and t-3 (watched 4). With purge interval "
                       "1, the reaper's advance at 200 ms purges those 2 entries (watched 2). c3 expires at 500 ms.",
                       600)
    return trace, walk.responses


def write_seed_scenarios(out: Path) -> list[Path]:
    produce = [seed_produce_walkthrough(laggard_catches_up)[0] for laggard_catches_up in (True, False)]
    return [write_traces(out / "seed-produce.jsonl", produce),
            write_traces(out / "seed-fetch.jsonl", seed_fetch_walkthrough()[0])]


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------


@click.command("simulate")
@click.option("--scenario", type=click.Choice([*SCENARIOS, "seed"]), default="mixed", show_default=True,
              help="Which traffic: one operation type, all of them, or the seed walkthroughs.")
@click.option("--duration-ms", type=int, help="Virtual time to simulate [60000].")
@click.option("--seed", type=int, help="Random seed [1].")
@click.option("--brokers", type=int)
@click.option("--partitions", type=int)
@click.option("--replication-factor", type=int, help="Replicas per partition [3]; at most --brokers.")
@click.option("--producers", type=int)
@click.option("--consumers", type=int)
@click.option("--groups", type=int)
@click.option("--members-per-group", type=int)
@click.option("--records-per-s", type=float, help="Records per second per producer.")
@click.option("--follower-lag-ms", type=float, help="Mean extra time a follower takes per fetch response.")
@click.option("--slow-followers-per-min", type=float, help="Slow-follower episodes per broker per minute.")
@click.option("--purge-interval", type=int)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Write one trace per purgatory here (for --scenario seed: the scenario files).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write the figures as a PNG.")
def simulate_command(scenario, out, plot, **overrides):
    """Simulate a broker cluster driving real DelayedProduce / DelayedFetch / DelayedHeartbeat operations through
    kpurgatory.impl; print the figures, optionally write the traces and a plot.

    Parameters left out keep the scenario's values (see kpurgatory.impl.workloads.simulator)."""
    console = command_console()
    if scenario == "seed":
        if out is None:
            raise click.UsageError("--scenario seed writes scenario files: give --out DIR")
        for path in write_seed_scenarios(out):
            console.print(f"wrote {path}")
        return
    try:
        config = scenario_config(scenario, **overrides)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    writers: dict[str, TraceWriter] = {}
    record = None
    if out is not None:
        record, writers = record_into(out, scenario, f"kpurgatory simulate --scenario {scenario} "
                                      f"--seed {config.seed} --duration-ms {config.duration_ms}")
    simulation = Simulation(config, record)
    started, started_cpu = time.perf_counter(), time.process_time()
    simulation.run()
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
    print_figures(console, scenario, config, figures(simulation, wall_s, cpu_s))
    for purgatory in simulation.purgatories():
        writer = writers.get(purgatory.name)
        if writer is not None:
            writer.close()
            if purgatory.watches:
                console.print(f"wrote {writer.path} ({writer.steps} steps)")
            else:
                writer.path.unlink()
    if plot is not None:
        console.print(f"wrote {plot_figures(simulation, plot)}")
