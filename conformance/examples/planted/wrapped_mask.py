"""A hashed wheel with a wrapped sweep mask: a real bug that only far clock origins show.

The wheel files an entry under its tick number, E // tick, and its sweep counts ticks in a 32-bit counter, comparing
tick numbers masked with 2^32 - 1 (jiffies compared without time_after). Within one 2^32-tick epoch it is exactly
Kafka's window (an entry runs at the start of its tick). When a deadline lies past the next multiple of 2^32 ticks and
the clock before it, the masked deadline is small and the entry runs at once, ages early; when the clock crosses such
a multiple with an entry of the old epoch still pending, the entry waits another 2^32 ticks. A run whose clock starts
at 0 never sees it: it takes 49 days of milliseconds.
"""

from __future__ import annotations

from kpurgatory.conformance.examples.planted.timer import SlotTimer

MASK = 2**32 - 1


class WrappedMask(SlotTimer):
    name = "wheel with a 32-bit sweep mask"

    def due(self, expiration_ms: int, scheduled_ms: int, now_ms: int) -> bool:
        filed = max(expiration_ms, scheduled_ms)  # a deadline in the past is filed under the current tick
        return (filed // self.tick_ms) & MASK <= (now_ms // self.tick_ms) & MASK


def factory() -> WrappedMask:
    return WrappedMask()
