"""The skeleton the planted timers share: a timer profile system whose only difference is *when* an entry is due.

`SlotTimer` keeps each pending task's expiration E and the time A it was scheduled at; after every add and every
advance it runs, in order of expiration, every pending entry its ``due(E, A, now)`` says is due. Everything else
(cancel, moving a task by re-adding it, size, shutdown, and rejecting a deadline past Long.MAX_VALUE with
``delay_out_of_range``) is the vocabulary's. Subclasses state their wheel's firing rule in ``due`` and what they
promise in ``declarations``.
"""

from __future__ import annotations

import functools

from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.model import CommandError
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, Declarations


class SlotTimer:
    name = "slot timer"
    declarations: Declarations = KAFKA

    def __init__(self, declarations: Declarations | None = None) -> None:
        if declarations is not None:
            self.declarations = declarations
        self.tick_ms = 1
        self.now = 0
        #: task -> (expiration, scheduled at, order of scheduling)
        self.pending: dict[str, tuple[int, int, int]] = {}
        self.scheduled = 0

    def due(self, expiration_ms: int, scheduled_ms: int, now_ms: int) -> bool:
        raise NotImplementedError

    def hello(self) -> Hello:
        return Hello(self.name, ("timer",), declarations=self.declarations)

    def init(self, profile: str, params: v.Params) -> None:
        if profile != "timer":
            raise CommandError(f"profile: {self.name} implements only the timer profile")
        self.tick_ms, self.now, self.pending, self.scheduled = params.tick_ms, params.start_ms, {}, 0

    def run_due(self) -> tuple[v.Event, ...]:
        due = sorted((entry, task) for task, entry in self.pending.items() if self.due(entry[0], entry[1], self.now))
        for _, task in due:
            del self.pending[task]
        return tuple(v.Run(task) for _, task in due)

    @functools.singledispatchmethod
    def step(self, command: v.Command) -> v.Observation:
        raise CommandError(f"{command.name}: not supported by {self.name}")

    @step.register
    def _(self, command: v.TimerAdd) -> v.Observation:
        if self.now + command.delay_ms > v.LONG_MAX:
            return v.Observation(error="delay_out_of_range")
        self.scheduled += 1
        self.pending[command.task] = (self.now + command.delay_ms, self.now, self.scheduled)
        return v.Observation(events=self.run_due())

    @step.register
    def _(self, command: v.TimerCancel) -> v.Observation:
        self.pending.pop(command.task, None)
        return v.Observation()

    @step.register
    def _(self, command: v.Advance) -> v.Observation:
        self.now = command.to_ms
        return v.Observation(events=self.run_due())

    @step.register
    def _(self, command: v.Size) -> v.Observation:
        return v.Observation(len(self.pending))

    @step.register
    def _(self, command: v.Shutdown) -> v.Observation:
        pending, self.pending = sorted(self.pending), {}
        return v.Observation(pending)

    def close(self) -> None:
        self.pending = {}
