"""What the harness drives: a system under test (SUT) that speaks the vocabulary.

An in-process adapter implements `SystemUnderTest` directly; the subprocess adapter implements it over the JSON Lines
protocol of specs/protocol.md. Observations from a SUT carry a flat event list (``groups`` is None): the model
decides which events may be reordered.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

from kpurgatory.model.contract import KAFKA, Declarations
from kpurgatory.model import vocabulary as v
from kpurgatory.model.vocabulary import Command, Observation, Params


def command_names(names) -> frozenset[str]:
    """``unsupported``: a collection of the vocabulary's command names (a lone string is a mistake, not its
    letters)."""
    if isinstance(names, str):
        raise TypeError(f"unsupported_commands must be a list of command names, got the string {names!r}")
    names = frozenset(names)
    if unknown := sorted(names - set(v.COMMANDS), key=str):
        raise ValueError(f"unsupported_commands: {', '.join(map(repr, unknown))} "
                         f"{'is not a command' if len(unknown) == 1 else 'are not commands'} of the vocabulary "
                         f"(expected some of {', '.join(v.COMMANDS)})")
    return names


@attrs.frozen
class Hello:
    """The SUT's introduction: its name, the profiles it implements, optional features (``wheel``), what it
    promises where it is not Kafka (`Declarations`: firing window, lazy size, delay domain; and how its watch lists
    are sharded, which exploration covers; Kafka's by default) and the commands it cannot execute (``unsupported``: a
    Kafka release without the call, e.g. ``cancel_key`` before 0.11.0.0), which the harness then never sends."""

    implementation: str
    profiles: tuple[str, ...] = attrs.field(converter=tuple)
    features: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    protocol_version: int = 1
    declarations: Declarations = KAFKA
    unsupported: frozenset[str] = attrs.field(default=frozenset(), converter=command_names)

    def __attrs_post_init__(self) -> None:
        # a release that predates a call cannot be sent it, whether or not its adapter says so
        missing = self.declarations.release.missing_commands
        if not missing <= self.unsupported:
            object.__setattr__(self, "unsupported", self.unsupported | missing)

    def drives(self, command: v.Command) -> bool:
        """The system can be sent ``command``: not an optional read-out it lacks, nor a command it cannot execute."""
        return v.supported(command, self.features) and command.name not in self.unsupported

    def unable(self, commands) -> list[str]:
        """The names of ``commands`` this system cannot execute, in order of first use."""
        return list(dict.fromkeys(command.name for command in commands if command.name in self.unsupported))


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


#: what an in-process system may raise instead of answering: its own exceptions, and its ``sys.exit()`` or
#: ``raise KeyboardInterrupt`` (a real Ctrl-C is `Interrupted` while a check runs), a crash of the system like any other
SYSTEM_ERRORS = (Exception, SystemExit, KeyboardInterrupt)


@attrs.frozen
class Played:
    """What a system did with a run: its observations of the commands it answered, in order, and how it failed to
    answer the next one (``error``), or init (``init_error``). ``batched``: the run went in one batch.
    """

    observed: tuple[Observation, ...] = ()
    error: BaseException | None = None
    init_error: BaseException | None = None
    batched: bool = False
    #: the batch as a whole went unanswered (``init_error`` says how): where in the run the system broke is unknown
    unanswered: bool = False


def play(system: SystemUnderTest, profile: str, params: Params, commands: list[Command], batch: bool = True
         ) -> Played:
    """Start a run on ``system`` and send it ``commands`` up to the first it fails to answer: as one batch where
    the system takes batches (a ``play`` method of its own) unless ``batch`` is False, else one at a time."""
    if batch and callable(getattr(system, "play", None)):
        return system.play(profile, params, commands)
    return play_each(system, profile, params, commands)


def play_each(system: SystemUnderTest, profile: str, params: Params, commands: list[Command]) -> Played:
    """`play`, one call at a time."""
    try:
        system.init(profile, params)
    except SYSTEM_ERRORS as error:
        return Played(init_error=error)
    observed = []
    for command in commands:
        try:
            observed.append(system.step(command))
        except SYSTEM_ERRORS as error:
            return Played(tuple(observed), error)
    return Played(tuple(observed))
