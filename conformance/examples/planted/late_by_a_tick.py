"""A timer that fires up to one tick late by design, as kernel and Netty wheels do: a slot is expired once the clock
has left it, so an entry due at E runs when the clock reaches the end of E's tick, floor(E / tick) * tick + tick.

It is never early and at most a tick late. ``factory`` declares exactly that (``never_early_up_to_tick_late``) and
passes the contract level; ``undeclared`` is the same timer claiming Kafka's window, and fails it (on_time: late).
"""

from __future__ import annotations

from kpurgatory.conformance.examples.planted.timer import SlotTimer
from kpurgatory.model.contract import KAFKA, Declarations


class LateByATick(SlotTimer):
    name = "late-by-a-tick wheel"
    declarations = Declarations(firing="never_early_up_to_tick_late")

    def due(self, expiration_ms: int, scheduled_ms: int, now_ms: int) -> bool:
        return now_ms >= (expiration_ms // self.tick_ms + 1) * self.tick_ms


def factory() -> LateByATick:
    return LateByATick()


def undeclared() -> LateByATick:
    return LateByATick(KAFKA)
