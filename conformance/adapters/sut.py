"""What the harness drives: a system under test (SUT) that speaks the vocabulary.

An in-process adapter implements `SystemUnderTest` directly; the subprocess adapter implements it over the JSON Lines
protocol of specs/protocol.md. Observations from a SUT carry a flat event list (``groups`` is None): the model
decides which events may be reordered.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

from kpurgatory.model.contract import KAFKA, Declarations
from kpurgatory.model.vocabulary import Command, Observation, Params


@attrs.frozen
class Hello:
    """The SUT's introduction: its name, the profiles it implements, optional features (``wheel``) and what it
    promises where it is not Kafka (`Declarations`: firing window, lazy size, delay domain; Kafka's by default)."""

    implementation: str
    profiles: tuple[str, ...] = attrs.field(converter=tuple)
    features: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    protocol_version: int = 1
    declarations: Declarations = KAFKA


@runtime_checkable
class SystemUnderTest(Protocol):
    def hello(self) -> Hello:
        """Called once, before anything else."""

    def init(self, profile: str, params: Params) -> None:
        """Start a fresh run (any previous run's state is discarded)."""

    def step(self, command: Command) -> Observation:
        """Execute one command of the current run and report what it did."""

    def close(self) -> None:
        """Release everything; no call follows."""
