"""kpurgatory.impl — a thread-safe, fast delayed-operation purgatory and hierarchical timing wheel for Python servers.

    from kpurgatory.impl import DelayedOperation, DelayedOperationPurgatory, SystemTimer

It is the library twin of `kpurgatory.model` (same names, same semantics, checked by the conformance suite). See
`kpurgatory.impl.timer` and `kpurgatory.impl.purgatory` for the design.
"""

from kpurgatory.impl.purgatory import DelayedOperation, DelayedOperationPurgatory, EmptyKeysError
from kpurgatory.impl.timer import SystemTimer, TimerDomainError, TimerTask, VirtualClock

__all__ = [
    "DelayedOperation", "DelayedOperationPurgatory", "EmptyKeysError",
    "SystemTimer", "TimerDomainError", "TimerTask", "VirtualClock",
]
