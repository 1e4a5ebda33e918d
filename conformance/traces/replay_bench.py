"""``kpurgatory replay-bench``: how fast ``kpurgatory replay`` goes, and where each step's time goes.

It simulates the mixed broker workload (``kpurgatory simulate --scenario mixed``), or takes the given trace files,
and times, on one core (CPU time of this process), each stage of a replay over every step:

  decode      a line of bytes to JSON (`codec.decode_line`)
  validate    the line against the schema, as the reader does it (its shape's schema, `codec.validate`)
  build       the Step, its command and observation (the rest of `codec.loads`)
  model       the model's step (`Model.step`)
  contract    the contract monitor on the recorded observation (`ContractMonitor.observe`)
  compare     the exact comparison with the model's observation (`compare.exact_difference`)
  replay      `replay.replay` whole: model, contract, comparison and the step's outcome

and, side by side in the same run, the validation the reader did before shapes (each line against its command's part
of the schema, `codec.command_validator`) and against the whole schema. ``read + replay`` is what ``kpurgatory
replay`` does after starting; its steps/s per core is the figure with a target (50,000): exits 1 below it.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
from rich.table import Table

from kpurgatory.conformance.check.compare import exact_difference
from kpurgatory.conformance.terminal import command_console, markup
from kpurgatory.conformance.traces import codec
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import Model
from kpurgatory.model.contract import ContractMonitor

TARGET_STEPS_PER_S = 50_000


def simulate_mixed(out: Path, duration_ms: int, seed: int) -> list[Path]:
    """The mixed scenario's traces, written to ``out``."""
    from kpurgatory.conformance.tools.simulate import record_into
    from kpurgatory.impl.workloads import Simulation, scenario_config

    record, writers = record_into(out, "mixed", f"kpurgatory replay-bench --duration-ms {duration_ms} --seed {seed}")
    Simulation(scenario_config("mixed", duration_ms=duration_ms, seed=seed), record).run()
    for writer in writers.values():
        writer.close()
    return sorted(writer.path for writer in writers.values() if writer.steps)


def cpu_seconds(work, whole: bool) -> float:
    """CPU seconds of ``work``. A part of the reader or the replay runs with the cycle collector paused, as there;
    the ``whole`` reader or replay pauses it itself, and pays here the young collection the pause put off, as the
    command pays it after reading or replaying."""
    with contextlib.nullcontext() if whole else codec.collector_paused():
        started = time.process_time()
        work()
        if whole:
            gc.collect(0)
        return time.process_time() - started


def measure(paths: list[Path], rounds: int) -> tuple[int, dict[str, float]]:
    """The number of steps in ``paths`` and the CPU seconds each stage took over all of them (the median of
    ``rounds`` rounds, each running every stage once, so that a burst of load on the machine hits one round)."""
    data = [path.read_bytes() for path in paths]
    lines = [codec.split_lines(chunk)[0] for chunk in data]
    documents = [[codec.decode_line(raw) for raw in chunk] for chunk in lines]
    traces = [trace for chunk, path in zip(data, paths) for trace in codec.loads(chunk, str(path))]
    steps = sum(len(trace.steps) for trace in traces)
    observations = []

    def decode():
        for chunk in lines:
            for raw in chunk:
                codec.decode_line(raw)

    def validate_with(check):
        def validate():
            for chunk in documents:
                for document in chunk:
                    check("header_line" if "header" in document else "step_line", document)
        return validate

    def by_command(definition, document):
        cmd = document.get("cmd")
        codec.command_validator(definition, cmd)(document) if cmd else codec.validator(definition)(document)

    def read():
        for chunk, path in zip(data, paths):
            codec.loads(chunk, str(path))

    def model():
        observations.clear()
        for trace in traces:
            stepper = Model(trace.header.profile, trace.header.params, trace.header.declarations.release)
            observations.append([stepper.step(step.command) for step in trace.steps])

    def contract():
        for trace in traces:
            monitor = ContractMonitor(trace.header.profile, trace.header.params)
            for step in trace.steps:
                monitor.observe(step.command, step.observation)

    def compare():
        for trace, expected in zip(traces, observations):
            for step, observation in zip(trace.steps, expected):
                exact_difference(step.command, observation, step.observation)

    def replay_all():
        for trace in traces:
            replay(trace)

    stages = {"decode": decode, "validate": validate_with(codec.validate), "read": read, "model": model,
              "contract": contract, "compare": compare, "replay": replay_all,
              "validate by command": validate_with(by_command),
              "validate by whole schema": validate_with(lambda definition, document:
                                                        codec.validator(definition)(document))}
    runs = [{name: cpu_seconds(stage, name in ("read", "replay")) for name, stage in stages.items()}
            for _ in range(rounds)]
    seconds = {name: statistics.median(run[name] for run in runs) for name in stages}
    seconds["build"] = max(0.0, seconds["read"] - seconds["decode"] - seconds["validate"])
    return steps, seconds


@click.command("replay-bench")
@click.argument("traces", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--duration-ms", type=click.IntRange(1000), default=20_000, show_default=True,
              help="Virtual time of the simulated mixed workload (when no TRACES are given).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True,
              help="Rounds of all stages; each figure is the median.")
def replay_bench_command(traces, duration_ms, seed, rounds):
    """Time each stage of replaying TRACES (default: a simulated mixed workload) against the model, per step and
    per core; exits 1 when read + replay runs below 50,000 steps/s."""
    console = command_console()
    folder = None if traces else Path(tempfile.mkdtemp(prefix="kpurgatory-replay-bench-"))
    try:
        paths = list(traces) or simulate_mixed(folder, duration_ms, seed)
        steps, seconds = measure(paths, rounds)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    table = Table(title=f"{steps:,} steps, {len(paths)} traces: CPU time on one core, median of {rounds}")
    for column in ("stage", "µs/step", "steps/s"):
        table.add_column(column, justify="left" if column == "stage" else "right")

    def row(name: str, seconds_taken: float) -> None:
        table.add_row(name, f"{seconds_taken / steps * 1e6:.2f}", f"{steps / seconds_taken:,.0f}")

    for name in ("decode", "validate", "build", "model", "contract", "compare"):
        row(name, seconds[name])
    table.add_section()
    row("read (decode + validate + build)", seconds["read"])
    row("replay (model + contract + compare + outcome)", seconds["replay"])
    total = seconds["read"] + seconds["replay"]
    row("read + replay", total)
    table.add_section()
    row("validate by command (before)", seconds["validate by command"])
    row("validate by whole schema", seconds["validate by whole schema"])
    console.print(table)
    console.print(f"validation: {seconds['validate by command'] / seconds['validate']:.1f}× faster than by command, "
                  f"{seconds['validate by whole schema'] / seconds['validate']:.1f}× than by the whole schema")
    rate = steps / total
    met = rate >= TARGET_STEPS_PER_S
    console.print(f"read + replay: {rate:,.0f} steps/s per core (target {TARGET_STEPS_PER_S:,}): "
                  + ("[green]met[/]" if met else "[bold red]BELOW TARGET[/]"))
    console.print(f"traces: {markup(', '.join(path.name for path in paths))}")
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    replay_bench_command()
