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

import click

from kpurgatory.conformance.terminal import safe

EXIT_CODES = {0: "pass", 1: "the implementation failed (a divergence, a broken contract or a failing trace)",
              2: "bad input or usage (a malformed trace, a wrong option)",
              3: "the tool or the adapter broke (an adapter crash or hang, an unwritable output, an interruption, "
                 "a bug in kpurgatory)"}
EXIT_CODES_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()) + "."

#: the subcommands by task, as ``kpurgatory --help`` lists them: a user's path first, then what makes and judges
#: traces and vectors (on Spark too), a live broker's recording, the suite's own checks, the benchmarks
SECTIONS: dict[str, dict[str, str]] = {
    "Check an implementation": {
        "check": "kpurgatory.conformance.check.sequential:check_command",
        "scenarios": "kpurgatory.conformance.traces.replay:scenarios_command",
        "replay": "kpurgatory.conformance.traces.replay:replay_command",
        "view": "kpurgatory.conformance.traces.view:view_command",
        "check-history": "kpurgatory.conformance.check.concurrent:check_history_command",
        "matrix": "kpurgatory.conformance.tools.matrix:matrix_command",
    },
    "Traces and vectors": {
        "vectors": "kpurgatory.conformance.tools.vectors:vectors_command",
        "record": "kpurgatory.conformance.spark.record:record_command",
        "simulate": "kpurgatory.conformance.tools.simulate:simulate_command",
        "validate-traces": "kpurgatory.conformance.spark.validate:validate_command",
        "campaign": "kpurgatory.conformance.spark.campaign:campaign_command",
    },
    "A live broker": {
        "record-broker": "kpurgatory.conformance.live.command:record_broker_command",
        "judge-recording": "kpurgatory.conformance.live.judge:judge_recording_command",
    },
    "The suite's own checks": {
        "mutants": "kpurgatory.conformance.tools.mutants:mutants_command",
        "prove": "kpurgatory.specs.cli:prove_command",
    },
    "Benchmarks": {
        "bench": "kpurgatory.conformance.tools.bench:bench_command",
        "check-bench": "kpurgatory.conformance.tools.check_bench:check_bench_command",
        "replay-bench": "kpurgatory.conformance.traces.replay_bench:replay_bench_command",
        "view-bench": "kpurgatory.conformance.traces.view_bench:view_bench_command",
        "spark-bench": "kpurgatory.conformance.spark.bench:bench_command",
    },
}
SUBCOMMANDS: dict[str, str] = {name: target for commands in SECTIONS.values() for name, target in commands.items()}


class Unwritable(click.ClickException):
    """An output that cannot be written (a read-only folder, a full disk): one line, exit 3."""

    exit_code = 3

    def __init__(self, what: object, error: OSError | str):
        reason = error if isinstance(error, str) else error.strerror or str(error)
        if isinstance(error, OSError) and error.filename and str(error.filename) != str(what):
            reason = f"{error.filename}: {reason}"  # a folder on the way
        super().__init__(f"cannot write {safe(what)}: {safe(reason)}")


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
        """The commands by section (`SECTIONS`), each with its one-sentence summary, names aligned across sections."""
        width = max(map(len, SUBCOMMANDS))
        for section, commands in SECTIONS.items():
            with formatter.section(section):
                formatter.write_dl([(name.ljust(width), self.get_command(ctx, name).get_short_help_str())
                                    for name in commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        command.epilog = EXIT_CODES_HELP
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="kpurgatory")
def main() -> None:
    """kpurgatory: a reference model of Kafka's purgatory and timing wheel, and a conformance suite for
    implementations of them."""
