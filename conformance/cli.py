"""The `kpurgatory` command line.

Subcommands live next to the code they drive and are imported only when invoked, so `kpurgatory replay` does not
pay for z3 or PySpark. Register a subcommand by adding "name": "module:attribute" to its section of SECTIONS.

Every command exits with one of `EXIT_CODES`; `LazyGroup.main` makes that true of the ways out a command does not
choose itself: a usage error, an interruption (SIGINT or SIGTERM, turned into an orderly exit so that adapters and
their process groups are killed on the way out) and a crash of kpurgatory's own.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
import traceback
from typing import NamedTuple

import click

from kpurgatory.conformance.terminal import safe

EXIT_CODES = {0: "pass", 1: "the implementation failed (a divergence, a broken contract or a failing trace)",
              2: "bad input or usage (a malformed trace, a wrong option)",
              3: "the tool or the adapter broke (an adapter crash or hang, an unwritable output, an interruption, "
                 "a bug in kpurgatory)"}
EXIT_CODES_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()) + "."


class Subcommand(NamedTuple):
    #: "module:attribute" of its click command, imported when it is invoked
    target: str
    #: one sentence: what ``kpurgatory --help`` says of it, without importing it (nor an optional dependency of it)
    summary: str


#: the subcommands by task, as ``kpurgatory --help`` lists them: a user's path first, then what makes and judges
#: traces and vectors (on Spark too), a live broker's recording, the suite's own checks, the benchmarks
SECTIONS: dict[str, dict[str, Subcommand]] = {
    "Check an implementation": {
        "check": Subcommand("kpurgatory.conformance.check.sequential:check_command",
                            "Check an implementation against the model, runs generated."),
        "scenarios": Subcommand("kpurgatory.conformance.traces.replay:scenarios_command",
                                "Replay Kafka's unit tests and the release rules' scenarios."),
        "replay": Subcommand("kpurgatory.conformance.traces.replay:replay_command",
                             "Replay traces against the model and a system: a verdict."),
        "view": Subcommand("kpurgatory.conformance.traces.view:view_command",
                           "Write one HTML page that shows traces, step by step."),
        "check-history": Subcommand("kpurgatory.conformance.check.concurrent:check_history_command",
                                    "Check concurrent histories against concurrency properties."),
        "matrix": Subcommand("kpurgatory.conformance.tools.matrix:matrix_command",
                             "Every check against every covered Kafka release: a table."),
    },
    "Traces and vectors": {
        "vectors": Subcommand("kpurgatory.conformance.tools.vectors:vectors_command",
                              "Write the test vectors every language's driver runs."),
        "record": Subcommand("kpurgatory.conformance.spark.record:record_command",
                             "Record seeded runs of an implementation as traces."),
        "simulate": Subcommand("kpurgatory.conformance.tools.simulate:simulate_command",
                               "Simulate a broker cluster's delayed operations on impl/."),
        "validate-traces": Subcommand("kpurgatory.conformance.spark.validate:validate_command",
                                      "Replay traces (JSON Lines, Parquet) on Spark."),
        "campaign": Subcommand("kpurgatory.conformance.spark.campaign:campaign_command",
                               "Check an implementation from many seeds on Spark."),
    },
    "A live broker": {
        "record-broker": Subcommand("kpurgatory.conformance.live.command:record_broker_command",
                                    "Record a Kafka broker's purgatories under load; judge them."),
        "judge-recording": Subcommand("kpurgatory.conformance.live.judge:judge_recording_command",
                                      "Judge a live broker recording on Spark."),
    },
    "The suite's own checks": {
        "mutants": Subcommand("kpurgatory.conformance.tools.mutants:mutants_command",
                              "The suite's power: which seeded bugs each check catches."),
        "prove": Subcommand("kpurgatory.specs.cli:prove_command",
                            "Run the z3 obligations of specs/ and report each result."),
    },
    "Benchmarks": {
        "bench": Subcommand("kpurgatory.conformance.tools.bench:bench_command",
                            "Benchmark impl/ against heapq, asyncio and Kafka's classes."),
        "check-bench": Subcommand("kpurgatory.conformance.tools.check_bench:check_bench_command",
                                  "The check's steps per CPU-second through each way in."),
        "replay-bench": Subcommand("kpurgatory.conformance.traces.replay_bench:replay_bench_command",
                                   "Time each stage of replaying traces, per step."),
        "view-bench": Subcommand("kpurgatory.conformance.traces.view_bench:view_bench_command",
                                 "Measure the page of a large concurrent history."),
        "spark-bench": Subcommand("kpurgatory.conformance.spark.bench:bench_command",
                                  "Events per second of validate-traces on Spark."),
    },
}
SUBCOMMANDS: dict[str, Subcommand] = {name: sub for commands in SECTIONS.values() for name, sub in commands.items()}


class Unwritable(click.ClickException):
    """An output that cannot be written (a read-only folder, a full disk): one line, exit 3."""

    exit_code = 3

    def __init__(self, what: object, error: OSError | str):
        reason = error if isinstance(error, str) else error.strerror or str(error)
        if isinstance(error, OSError) and error.filename and str(error.filename) != str(what):
            reason = f"{error.filename}: {reason}"  # a folder on the way
        super().__init__(f"cannot write {safe(what)}: {safe(reason)}")


class MissingDependency(click.ClickException):
    """A command whose optional dependency is not installed: one line saying what to install, exit 3."""

    exit_code = 3

    def __init__(self, command: str, module: str):
        super().__init__(f"kpurgatory {command} needs {module}, which is not installed: "
                         f"pip install 'kpurgatory[all]' (or the extra that has it, pyproject.toml)")


class Interrupted(BaseException):
    """SIGTERM, raised in the main thread so that every ``finally`` and ``atexit`` cleanup runs."""


def interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (the pattern from click's documentation), and
    whose exits follow `EXIT_CODES`."""

    def main(self, *args, **kwargs):
        kwargs.pop("standalone_mode", None)
        in_main_thread = threading.current_thread() is threading.main_thread()  # only it may handle signals
        previous = signal.signal(signal.SIGTERM, interrupt) if in_main_thread else None
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as error:  # usage and bad input; a subclass may say the tool cannot run (3)
            error.show()
            sys.exit(2 if error.exit_code == 1 else error.exit_code)
        except (click.Abort, KeyboardInterrupt, Interrupted) as error:
            click.echo(f"interrupted ({safe(str(error)) or 'SIGINT'}): stopped, adapters killed", err=True)
            sys.exit(3)
        except Exception as error:
            from kpurgatory.conformance.adapters.subprocess import AdapterError

            if isinstance(error, AdapterError):  # the adapter broke before a command could report it
                click.echo(f"Error: {safe(error)}", err=True)
                sys.exit(3)
            click.echo(safe(traceback.format_exc()), err=True, nl=False)
            click.echo("kpurgatory crashed: this is a bug in kpurgatory, not in the implementation", err=True)
            sys.exit(3)
        finally:
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
        sys.exit(code if isinstance(code, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by section (`SECTIONS`), each with its one-sentence summary, names aligned across sections;
        nothing is imported, so the list shows whatever extras are installed."""
        width = max(map(len, SUBCOMMANDS))
        for section, commands in SECTIONS.items():
            with formatter.section(section):
                formatter.write_dl([(name.ljust(width), sub.summary) for name, sub in commands.items()])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        sub = SUBCOMMANDS.get(cmd_name)
        if sub is None:
            return None
        module_name, attribute = sub.target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if (error.name or "kpurgatory").partition(".")[0] == "kpurgatory":
                raise  # a bug of kpurgatory's, not an extra left out
            raise MissingDependency(cmd_name, error.name) from None
        command = getattr(module, attribute)
        command.epilog = EXIT_CODES_HELP
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="kpurgatory")
def main() -> None:
    """kpurgatory: a reference model of Kafka's purgatory and timing wheel, and a conformance suite for
    implementations of them."""
