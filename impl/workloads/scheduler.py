"""Simulated time, and purgatories living in it.

`Scheduler` is a discrete-event loop on a virtual millisecond clock. After each event it runs the action queue, as a
Kafka request handler does after each request.

`SimulatedPurgatory` is a broker purgatory — kpurgatory.impl's, on a virtual timer — inside that loop:

* Kafka's expiration reaper becomes events: the timer is advanced to the simulation clock lazily, before each call,
  at each watched operation's deadline, and every 200 ms (the reaper's poll); every advance ends with the purge
  check, as the reaper's does.
* It is the listener of the operations it watches, so it counts completions by route (``try``: the watch itself,
  ``check``, ``expire``), and the latency from watch to completion.
* Given a ``record`` sink, it reports every call as a command of the vocabulary (kpurgatory.model.vocabulary) with
  what impl did as its observation. The vocabulary lets the trace decide an operation's condition, so the real
  operation's condition is written down: ``watch(op, keys, delay_ms, ready_on)`` has ready_on 1 when the watch
  completed the operation at once (its condition held; nothing changes between the watch's two tries, so otherwise
  it did not), else none; before each ``check(key)``, ``set_ready(op)`` for every operation watched on that key
  whose real condition now holds, which is exactly when a check or try could observe it. Replaying such a trace
  against the model shows the real operation types are expressible in the vocabulary.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from time import perf_counter
from typing import Callable, Hashable, Sequence

from kpurgatory.impl import DelayedOperationPurgatory
from kpurgatory.impl import SystemTimer
from kpurgatory.impl.timer import REAPER_POLL_MS
from kpurgatory.impl.workloads.operation import ActionQueue, BrokerOperation
from kpurgatory.model import vocabulary as v

Recorder = Callable[[v.Command, v.Observation], None]


class Scheduler:
    """Events at virtual milliseconds, run in time order (ties in scheduling order)."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.action_queue = ActionQueue()
        self._events: list[tuple[int, int, Callable, tuple]] = []
        self._sequence = itertools.count()

    def clock(self) -> int:
        return self.now_ms

    def at(self, time_ms: int, action: Callable, *args) -> None:
        heapq.heappush(self._events, (max(time_ms, self.now_ms), next(self._sequence), action, args))

    def after(self, delay_ms: int, action: Callable, *args) -> None:
        self.at(self.now_ms + delay_ms, action, *args)

    def every(self, period_ms: int, action: Callable[[], None]) -> None:
        def tick() -> None:
            action()
            self.after(period_ms, tick)

        self.after(period_ms, tick)

    def run_until(self, end_ms: int) -> None:
        """Run every event due by ``end_ms``, then leave the clock at ``end_ms``."""
        events, actions = self._events, self.action_queue
        while events and events[0][0] <= end_ms:
            self.now_ms, _, action, args = heapq.heappop(events)
            action(*args)
            actions.try_complete_actions()
        self.now_ms = max(self.now_ms, end_ms)


def _reraise(error: BaseException, source: object) -> None:
    """A failing operation is a bug in the workload: stop the simulation rather than log and go on."""
    raise error


class SimulatedPurgatory:
    """A purgatory in simulated time; see the module docstring. ``busy_s`` is the wall time spent inside impl."""

    def __init__(self, name: str, scheduler: Scheduler, params: v.Params = v.Params(),
                 record: Recorder | None = None):
        self.name = name
        self.params = params
        self.scheduler = scheduler
        timer = SystemTimer.virtual(params.tick_ms, params.wheel_size, params.start_ms, on_error=_reraise)
        self.purgatory = DelayedOperationPurgatory(name, purge_interval=params.purge_interval, timer=timer,
                                                   on_error=_reraise)
        self.now_ms = params.start_ms
        self.record = record
        self.route = "try"
        self.events: list[v.Event] = []
        # statistics
        self.watches = 0
        self.calls = 0  # watches, checks and advances made into impl
        self.completions: list[tuple[int, int, str]] = []  # (time, latency from watch, route) of each completion
        self.purges = self.purged = 0
        self.samples: list[tuple[int, int, int]] = []  # (time, watched, delayed)
        self.busy_s = 0.0
        self._watched_at: dict[BrokerOperation, int] = {}
        # what recording needs: the keys of each operation, and the live ones per key not yet marked ready
        self._keys_of: dict[BrokerOperation, tuple[Hashable, ...]] = {}
        self._live: dict[Hashable, dict[BrokerOperation, None]] = {}
        scheduler.every(REAPER_POLL_MS, self.catch_up)

    # --- the purgatory calls ----------------------------------------------------------------------------------

    def try_complete_else_watch(self, op: BrokerOperation, keys: Sequence[Hashable]) -> bool:
        self.catch_up()
        keys = tuple(keys)
        op.listener = self
        self._watched_at[op] = self.now_ms
        if self.record is not None:
            self._keys_of[op] = keys
        self.route, self.events = "try", []
        started = perf_counter()
        result = self.purgatory.try_complete_else_watch(op, keys)
        self.busy_s += perf_counter() - started
        self.watches += 1
        self.calls += 1
        if not op.completed:
            self.scheduler.at(self.now_ms + op.delay_ms, self._reap, op)
        if self.record is not None:
            if not op.completed:
                for key in keys:
                    self._live.setdefault(key, {})[op] = None
            self.record(v.Watch(op.op_id, tuple(map(str, keys)), op.delay_ms, 1 if result else None),
                        v.Observation(result, tuple(self.events)))
        return result

    def check_and_complete(self, key: Hashable) -> int:
        self.catch_up()
        if self.record is not None:
            self._set_ready(key)
        self.route, self.events = "check", []
        started = perf_counter()
        completed = self.purgatory.check_and_complete(key)
        self.busy_s += perf_counter() - started
        self.calls += 1
        if self.record is not None:
            self.record(v.Check(str(key)), v.Observation(completed, tuple(self.events)))
        return completed

    def catch_up(self) -> None:
        """Advance the timer to the simulation clock (the reaper's step), then the purge check."""
        now = self.scheduler.now_ms
        if now <= self.now_ms:
            return
        self.now_ms = now
        self.route, self.events = "expire", []
        started = perf_counter()
        purged = self.purgatory.advance_to(now)
        self.busy_s += perf_counter() - started
        self.calls += 1
        if purged is not None:
            self.purges += 1
            self.purged += purged
            self.events.append(v.Purge(purged))
        if self.record is not None:
            self.record(v.Advance(now), v.Observation(None, tuple(self.events)))

    def sample(self) -> None:
        """Read the gauges PurgatorySize (watched) and NumDelayedOperations (delayed)."""
        self.catch_up()
        watched, delayed = self.purgatory.watched(), self.purgatory.num_delayed()
        self.samples.append((self.now_ms, watched, delayed))
        if self.record is not None:
            self.record(v.Watched(), v.Observation(watched))
            self.record(v.Delayed(), v.Observation(delayed))

    def shutdown(self) -> list[BrokerOperation]:
        """Stop: the operations still pending are dropped, neither completed nor expired."""
        self.catch_up()
        pending = self.purgatory.shutdown()
        if self.record is not None:
            self.record(v.Shutdown(), v.Observation(sorted(op.op_id for op in pending)))
        return pending

    def _reap(self, op: BrokerOperation) -> None:
        if not op.completed:
            self.catch_up()

    def _set_ready(self, key: Hashable) -> None:
        for op in list(self._live.get(key, ())):
            if op.condition_holds():
                self.record(v.SetReady(op.op_id), v.Observation())
                self._forget(op, self._keys_of[op])

    def _forget(self, op: BrokerOperation, keys: tuple[Hashable, ...]) -> None:
        """``op`` is ready or complete: no longer a candidate for set_ready."""
        for key in keys:
            live = self._live.get(key)
            if live is not None:
                live.pop(op, None)
                if not live:
                    del self._live[key]

    # --- the operations' listener -----------------------------------------------------------------------------

    def completion_routes(self) -> Counter[str]:
        """Completions by route: ``try`` (by the watch itself), ``check``, ``expire``."""
        return Counter(route for _, _, route in self.completions)

    def completed(self, op: BrokerOperation) -> None:
        self.completions.append((self.now_ms, self.now_ms - self._watched_at.pop(op), self.route))
        if self.record is not None:
            self.events.append(v.Complete(op.op_id, self.route))
            self._forget(op, self._keys_of.pop(op))

    def expired(self, op: BrokerOperation) -> None:
        if self.route != "expire":  # the timer ran it inside a watch: its delay had already passed
            self.completions[-1] = (*self.completions[-1][:2], "expire")
            if self.record is not None:
                self.events[-1] = v.Complete(op.op_id, "expire")
        if self.record is not None:
            self.events.append(v.Expire(op.op_id))
