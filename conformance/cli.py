"""The `kpurgatory` command line.

Subcommands live next to the code they drive and are imported only when invoked, so `kpurgatory replay` does not
pay for z3 or PySpark. Register a subcommand by adding "name": "module:attribute" to SUBCOMMANDS.
"""

from __future__ import annotations

import importlib

import click

SUBCOMMANDS: dict[str, str] = {
    "bench": "kpurgatory.conformance.tools.bench:bench_command",
    "check": "kpurgatory.conformance.check.sequential:check_command",
    "check-history": "kpurgatory.conformance.check.concurrent:check_history_command",
    "mutants": "kpurgatory.conformance.tools.mutants:mutants_command",
    "replay": "kpurgatory.conformance.traces.replay:replay_command",
    "scenarios": "kpurgatory.conformance.traces.replay:scenarios_command",
    "simulate": "kpurgatory.conformance.tools.simulate:simulate_command",
    "validate-traces": "kpurgatory.conformance.spark.validate:validate_command",
    "record": "kpurgatory.conformance.spark.record:record_command",
    "campaign": "kpurgatory.conformance.spark.campaign:campaign_command",
    "spark-bench": "kpurgatory.conformance.spark.bench:bench_command",
    "prove": "kpurgatory.specs.cli:prove_command",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (the pattern from click's documentation)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kpurgatory")
def main() -> None:
    """kpurgatory: a reference model of Kafka's purgatory and timing wheel, and a conformance suite for
    implementations of them."""
