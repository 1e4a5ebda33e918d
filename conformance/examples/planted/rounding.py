"""A timer that promises never to fire early and is up to a tick late by design, with a real bug at tick > 1.

It computes an entry's firing tick as the current tick plus the delay in whole ticks, rounding the current time down
and the delay up: floor(now / tick) + ceil(delay / tick). Rounding the delay up makes it late by up to a tick, which
it declares (``never_early_up_to_tick_late``); rounding the current time down makes it early whenever now is not on a
tick boundary (tick 10, now 5, delay 10: it runs at 10, not 15). The correct rule rounds the deadline up,
ceil((now + delay) / tick). Checked without its declaration, the lateness (a design choice) shows first; with it, the
check looks further and finds the early firing.
"""

from __future__ import annotations

from kpurgatory.conformance.examples.planted.timer import SlotTimer
from kpurgatory.model.contract import Declarations


class RoundingTimer(SlotTimer):
    name = "tick-rounding timer"
    declarations = Declarations(firing="never_early_up_to_tick_late")

    def due(self, expiration_ms: int, scheduled_ms: int, now_ms: int) -> bool:
        delay_ticks = -(-(expiration_ms - scheduled_ms) // self.tick_ms)
        return now_ms >= (scheduled_ms // self.tick_ms + delay_ticks) * self.tick_ms


def factory() -> RoundingTimer:
    return RoundingTimer()
