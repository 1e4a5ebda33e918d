"""kpurgatory.impl's compiled implementation: the same timer and purgatory with the hot structures in C.

``kpurgatory.impl._core`` (``impl/_core.c``) holds the timer task as an intrusive list node, the buckets, the wheels
and their overflow levels, the delay queue and the counter, and the drain that releases due buckets, cascades and
runs or hands over expired tasks. This module gives it the face of `kpurgatory.impl.timer`: the same
`SystemTimer` API (virtual or real clock, executor and reaper threads, shutdown) built on the shared `TimerBase`,
and the purgatory's classes over it. User code (``run``, ``try_complete``, ``on_complete``, ``on_expiration``, the
error hook) stays Python.

Thread safety: the C core is locked by the GIL, each of its calls being one atomic stretch (the argument is written
at the top of ``impl/_core.c``); no timer lock is taken here. The reaper's wait uses a condition of its own: it
reads the earliest queued expiration under the condition's lock and waits on it, and an add that queues a new
earliest bucket while a reaper waits (``_waiters``) notifies under that lock, so the wake-up cannot fall between the
read and the wait. The purgatory keeps Kafka's per-op lock around ``try_complete`` and its shard locks.

Both implementations are checked against the model on every CI run; ``kpurgatory.impl`` exports this one unless
``KPURGATORY_IMPL=python``.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from kpurgatory.impl import _core, sync
from kpurgatory.impl import purgatory as python_purgatory
from kpurgatory.impl.timer import TimerBase, report_unreported

#: the seeded bugs the core can be built with (``kpurgatory mutants``): name -> bit of ``SystemTimer.faults``
FAULTS: dict[str, int] = _core.FAULTS

TimerTask = _core.TimerTask


class SystemTimer(TimerBase, _core.TimerCore):
    """SystemTimer(tickMs, wheelSize, startMs) over a clock, on the compiled core (see `TimerBase`)."""

    #: seeded bugs (a bit set of `FAULTS` values); zero but in the mutants' subclasses
    faults = 0

    def _build(self, start_ms: int) -> None:
        self._setup_core(self.tick_ms, self.wheel_size, start_ms, self.faults)
        self._virtual_clock = self.clock if self.virtual else None
        self._hand_off = None  # inline until TimerBase gives it an executor
        self._report = None if self.virtual else report_unreported
        self._condition = threading.Condition()
        self._interrupted = False

    def advance_clock(self, timeout_ms: float = 0) -> bool:
        """Release every bucket due by the clock, earliest first (cascading entries down a level, or running or
        handing them over). If none is due, first wait up to ``timeout_ms`` for one (never for a virtual timer).
        Returns whether any bucket was released (Kafka's return value)."""
        if timeout_ms > 0 and not self.virtual:
            self._wait_for_due(timeout_ms)
        return self._drain()

    def _wait_for_due(self, timeout_ms: float) -> None:
        deadline = time.monotonic() + timeout_ms / 1000
        with self._condition:
            self._waiters += 1
            try:
                while not self._interrupted:
                    now, earliest = self.clock(), self._next_expiration()
                    if earliest is not None and earliest <= now:
                        return
                    wait_s = deadline - time.monotonic()
                    if earliest is not None:
                        wait_s = min(wait_s, (earliest - now) / 1000)
                    if wait_s <= 0:
                        return
                    self._condition.wait(wait_s)
                self._interrupted = False
            finally:
                self._waiters -= 1

    def _wake(self) -> None:
        """Called by the core when an add queues a new earliest bucket while a reaper waits."""
        with self._condition:
            self._condition.notify()

    def interrupt(self) -> None:
        """Wake a reaper waiting in `advance_clock` (so it can see it is being stopped)."""
        with self._condition:
            self._interrupted = True
            self._condition.notify_all()

    def describe(self, label: Callable[[TimerTask], object] = repr) -> dict:
        """The wheel read-out of the model's ``describe``: levels finest first, non-empty buckets by slot, each entry
        shown as ``label(task)``."""
        return {
            "levels": [
                {"tick_ms": tick_ms, "wheel_size": wheel_size, "current_ms": current_ms,
                 "buckets": [{"slot": slot, "expiration_ms": expiration_ms, "entries": [label(task) for task in tasks]}
                             for slot, expiration_ms, tasks in buckets]}
                for tick_ms, wheel_size, current_ms, buckets in self._levels()
            ]
        }

    def _drop_pending(self) -> list[TimerTask]:
        return self._flush_all()


DelayedOperation = _core.DelayedOperation
# while a controlled scheduler supplies impl's locks, an op given no lock takes one of them instead of its own OpLock
sync.follow(lambda primitives: _core.set_op_lock_factory(None if primitives is sync.THREADING
                                                         else primitives.reentrant_lock))


class DelayedOperationPurgatory(_core.PurgatoryCore, python_purgatory.DelayedOperationPurgatory):
    """The purgatory, on the compiled core: try_complete_else_watch, check_and_complete, cancel_for_key, the counters,
    the reaper's advance and the purge sweep are C (``PurgatoryCore``); construction, ``advance_to`` and shutdown are
    the pure-Python class's. Its ops are the compiled `DelayedOperation`s and its timer a compiled `SystemTimer`.

    A subclass may override ``_add_to_timer`` or ``_remove_key_if_empty`` (whose ``shard`` argument is here the
    shard's dict of watch lists): the core then calls the override where it would run its own code; overrides of
    an op's ``safe_try_complete``, ``safe_try_complete_or_else`` and ``force_complete`` are honoured the same way."""

    timer_class = SystemTimer

    def _build_watchers(self, shards: int) -> None:
        cls = type(self)
        self._setup_watchers(shards, cls._add_to_timer is not DelayedOperationPurgatory._add_to_timer,
                             cls._remove_key_if_empty is not DelayedOperationPurgatory._remove_key_if_empty)

    @staticmethod
    def _remove_key_if_empty(shard: dict, key, operations: list) -> None:
        """Under the shard lock: drop the key only if the map still holds this very list and it is empty (what the
        core does itself unless a subclass overrides this)."""
        if not operations and shard.get(key) is operations:
            del shard[key]
