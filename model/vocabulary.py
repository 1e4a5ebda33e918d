"""The one vocabulary of kpurgatory: commands, events and observations.

Every part of the project speaks it: the model executes commands and emits observations, the implementation's
adapter does the same, the trace format and the subprocess protocol serialise exactly these classes
(`kpurgatory.conformance.traces.codec`), the Spark pipeline replays them and z3 counterexamples are written in them.
specs/protocol.md is the normative prose; this module is the code it describes.

A command is a frozen attrs class. Its observation is a result (a JSON value), the events the command caused in
the order they happened, and, for a command the purgatory rejects, an error code instead of a result.

Profiles select which commands a system under test must understand:
  * ``timer``      — a bare timing wheel: timer_add, timer_cancel, advance, size, shutdown (and the optional
                     read-outs wheel and delay_queue).
  * ``purgatory``  — the delayed-operation purgatory over its timer: everything else.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

PROFILES = ("timer", "purgatory")

#: Java's Long.MAX_VALUE: no expiration, clock value or parameter may exceed it (see errors below).
LONG_MAX = 2**63 - 1
#: Java's Integer.MAX_VALUE: the purge interval is an int in Kafka.
INT_MAX = 2**31 - 1

Json = Any


# ---------------------------------------------------------------------------------------------------------------
# Parameters of a run (the trace header's "params" and the protocol's init command)
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Params:
    """Timer and purgatory configuration: SystemTimer(tickMs, wheelSize, startMs) and the purge interval."""

    tick_ms: int = 1
    wheel_size: int = 20
    start_ms: int = 0
    purge_interval: int = 1000


# ---------------------------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Command:
    """Base of all commands. ``name`` is the wire name; ``profiles`` lists where the command is legal."""

    name: ClassVar[str]
    profiles: ClassVar[tuple[str, ...]] = PROFILES


@attrs.frozen
class TimerAdd(Command):
    """SystemTimer.add(task): schedule ``task`` to run ``delay_ms`` after now. Re-adding a task moves it."""

    name: ClassVar[str] = "timer_add"
    profiles: ClassVar[tuple[str, ...]] = ("timer",)
    task: str
    delay_ms: int


@attrs.frozen
class TimerCancel(Command):
    """TimerTask.cancel(): take the task's entry out of its bucket; a fired or unknown-to-the-timer task is a no-op."""

    name: ClassVar[str] = "timer_cancel"
    profiles: ClassVar[tuple[str, ...]] = ("timer",)
    task: str


@attrs.frozen
class Watch(Command):
    """tryCompleteElseWatch(op, keys).

    The first watch of ``op`` creates it: ``delay_ms`` is its timeout (fixed at construction, as in Kafka) and
    ``ready_on`` controls its condition: the op's tryComplete succeeds from its ``ready_on``-th call on
    (1 = ready now, 2 = ready on the second try), or never by count when None (then only after set_ready).
    Watching an existing op again re-uses it: ``delay_ms`` and ``ready_on`` may be omitted and, if given,
    must equal the original values.
    """

    name: ClassVar[str] = "watch"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    op: str
    keys: tuple[str, ...] = attrs.field(converter=tuple)
    delay_ms: int | None = None
    ready_on: int | None = None


@attrs.frozen
class SetReady(Command):
    """The op's condition becomes ``ready`` (new data arrived, the follower caught up...; or, with False, what it
    waits for went away again: Kafka's conditions are user code, nothing makes them monotone). From then on the
    condition is what the last set_ready said, whatever ``ready_on`` counts. Completes nothing by itself."""

    name: ClassVar[str] = "set_ready"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    op: str
    ready: bool = True


@attrs.frozen
class Check(Command):
    """checkAndComplete(key): result = number of ops this call completed."""

    name: ClassVar[str] = "check"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    key: str


@attrs.frozen
class CancelKey(Command):
    """cancelForKey(key): result = ids of the ops removed from the key's list, in list order."""

    name: ClassVar[str] = "cancel_key"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    key: str


@attrs.frozen
class Force(Command):
    """op.forceComplete() called by other code: result = whether this call completed the op."""

    name: ClassVar[str] = "force"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    op: str


@attrs.frozen
class Try(Command):
    """op.tryComplete() called directly, outside the purgatory: result = whether this call completed the op."""

    name: ClassVar[str] = "try"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    op: str


@attrs.frozen
class Cancel(Command):
    """op.cancel(): take the op's timer entry out of the timer. The op is not completed and stays watched."""

    name: ClassVar[str] = "cancel"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)
    op: str


@attrs.frozen
class Advance(Command):
    """Move the virtual clock to ``to_ms`` and let the reaper catch up: drain every due bucket, then (purgatory
    profile) run the purge check once."""

    name: ClassVar[str] = "advance"
    to_ms: int


@attrs.frozen
class Watched(Command):
    """watched(): entries over all watcher lists, stale ones included (gauge PurgatorySize)."""

    name: ClassVar[str] = "watched"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)


@attrs.frozen
class Delayed(Command):
    """numDelayed(): the timer's size (gauge NumDelayedOperations)."""

    name: ClassVar[str] = "delayed"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)


@attrs.frozen
class Size(Command):
    """Timer.size(): entries sitting in buckets at any level."""

    name: ClassVar[str] = "size"


@attrs.frozen
class Shutdown(Command):
    """shutdown(): stop; pending timer entries are dropped, neither completed nor expired. Result = their ids,
    sorted. No command may follow."""

    name: ClassVar[str] = "shutdown"


@attrs.frozen
class Wheel(Command):
    """Optional read-out of the wheel: levels (finest first) with tick, size, current time and non-empty buckets."""

    name: ClassVar[str] = "wheel"


@attrs.frozen
class WatcherKeys(Command):
    """Optional read-out of the watcher map: the keys that have a watch list, sorted. An emptied list is removed
    with its key (KAFKA-2160: kept, they leaked), so a key shows only while an entry is watched under it."""

    name: ClassVar[str] = "watcher_keys"
    profiles: ClassVar[tuple[str, ...]] = ("purgatory",)


@attrs.frozen
class DelayQueue(Command):
    """Optional read-out of the timer's delay queue: the expirations of the queued buckets, sorted, a bucket queued
    twice counted twice. A bucket is queued when its expiration changes (setExpiration), once per round of its
    wheel; queued more often, it costs memory and polls, and nothing else shows it."""

    name: ClassVar[str] = "delay_queue"


COMMANDS: dict[str, type[Command]] = {
    cls.name: cls
    for cls in (
        TimerAdd, TimerCancel, Watch, SetReady, Check, CancelKey, Force, Try, Cancel,
        Advance, Watched, Delayed, Size, Shutdown, Wheel, WatcherKeys, DelayQueue,
    )
}

#: read-outs a system may lack: it lists the ones it supports in its hello's features, and only those are sent
OPTIONAL: tuple[str, ...] = ("wheel", "watcher_keys", "delay_queue")


def supported(command: Command, features: tuple[str, ...]) -> bool:
    return command.name not in OPTIONAL or command.name in features


# ---------------------------------------------------------------------------------------------------------------
# Events: what a command caused, in order
# ---------------------------------------------------------------------------------------------------------------

Via = Literal["try", "check", "expire", "force"]
VIAS: tuple[str, ...] = ("try", "check", "expire", "force")


@attrs.frozen
class Event:
    kind: ClassVar[str]


@attrs.frozen
class Complete(Event):
    """onComplete() ran for ``op``. ``via`` names the route that won forceComplete: a tryComplete made by watch or
    try (``try``), by checkAndComplete (``check``), the timer (``expire``) or a direct forceComplete (``force``)."""

    kind: ClassVar[str] = "complete"
    op: str
    via: str


@attrs.frozen
class Expire(Event):
    """onExpiration() ran for ``op`` (always right after its Complete with via=expire)."""

    kind: ClassVar[str] = "expire"
    op: str


@attrs.frozen
class Run(Event):
    """A plain timer task ran (timer profile)."""

    kind: ClassVar[str] = "run"
    task: str


@attrs.frozen
class Purge(Event):
    """The purge check fired and removed ``count`` completed entries from the watcher lists (possibly 0)."""

    kind: ClassVar[str] = "purge"
    count: int


@attrs.frozen
class StaleTry(Event):
    """checkAndComplete called ``op``'s tryComplete although the op had already completed (KAFKA-17848: tryComplete
    ran after onComplete and leaked what it acquired). checkAndComplete must skip completed ops, under the op's lock,
    so the model never reports it; a correct purgatory may, only when a completion that does not take the op's lock
    (expiry, a direct forceComplete or tryComplete) races with the check."""

    kind: ClassVar[str] = "stale_try"
    op: str


EVENTS: dict[str, type[Event]] = {cls.kind: cls for cls in (Complete, Expire, Run, Purge, StaleTry)}

#: the commands during which a completion can take each route: a tryComplete made by a watch or a try of the op, by
#: a check, a force of the op, and the timer (in an advance, or in the watch whose timer add found the op already due)
VIA_COMMANDS: dict[str, tuple[type[Command], ...]] = {
    "try": (Watch, Try), "check": (Check,), "force": (Force,), "expire": (Advance, Watch)}


def may_complete_via(command: Command, event: Complete) -> bool:
    """``command`` can complete ``event.op`` by ``event.via``: a command of that route, naming that op if it names
    one (which keys a check may complete through is the caller's to judge)."""
    return isinstance(command, VIA_COMMANDS.get(event.via, ())) and getattr(command, "op", event.op) == event.op


# ---------------------------------------------------------------------------------------------------------------
# Observations
# ---------------------------------------------------------------------------------------------------------------

#: Rejections the purgatory itself makes (observable behaviour, compared like results):
ERRORS = {
    "empty_keys": "tryCompleteElseWatch with an empty key list (Kafka: IllegalArgumentException)",
    "delay_out_of_range": "now + delay_ms exceeds Long.MAX_VALUE (Kafka silently wraps; kpurgatory rejects), or the "
                          "delay is outside the domain the system declares (model/contract.py, Declarations)",
}


@attrs.frozen
class Observation:
    """What one command did: its result (or error code) and its events.

    ``groups`` partitions ``events`` into runs that the comparison treats as unordered: all events of one released
    bucket expiration (buckets of different levels with the same expiration are released in heap order, which is not
    part of the semantics), the purge, or the whole of a non-advance command. Systems under test report a flat list;
    only the model reports groups, and comparisons use the model's.
    """

    result: Json = None
    events: tuple[Event, ...] = ()
    error: str | None = None
    groups: tuple[int, ...] | None = attrs.field(default=None, eq=False)

    def grouped(self) -> list[tuple[Event, ...]]:
        sizes = self.groups if self.groups is not None else (len(self.events),)
        out, start = [], 0
        for size in sizes:
            out.append(self.events[start:start + size])
            start += size
        return out
