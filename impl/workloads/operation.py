"""What the workload operations share: Kafka's error codes, the base class of their delayed operations, and the
action queue that keeps purgatory calls out of other purgatory calls."""

from __future__ import annotations

import enum
from collections import deque
from typing import Callable, Protocol

from kpurgatory.impl import DelayedOperation


class Errors(enum.Enum):
    """The Kafka error codes the workloads answer with (values are Kafka's wire codes)."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    UNKNOWN_MEMBER_ID = 25
    REBALANCE_IN_PROGRESS = 27


class OperationListener(Protocol):
    """Told when an operation's ``on_complete`` or ``on_expiration`` ran; the purgatory that watches it knows by
    which route (the call it was making at the time)."""

    def completed(self, op: BrokerOperation) -> None: ...

    def expired(self, op: BrokerOperation) -> None: ...


class BrokerOperation(DelayedOperation):
    """A delayed operation of the simulated broker.

    Besides Kafka's callbacks it has an ``op_id`` (the request it answers, e.g. ``p3:17``, its name in traces),
    ``condition_holds`` — what ``try_complete`` would decide now, without its side effects, so that a trace recorder
    can tell when the condition became true — and a ``listener`` that subclasses notify by calling
    ``super().on_complete()`` / ``super().on_expiration()`` after their own work.
    """

    __slots__ = ("op_id", "listener")

    def __init__(self, delay_ms: int, op_id: str, lock=None):
        super().__init__(delay_ms, lock)
        self.op_id = op_id
        self.listener: OperationListener | None = None

    def condition_holds(self) -> bool:
        raise NotImplementedError

    def try_complete(self) -> bool:
        return self.force_complete() if self.condition_holds() else False

    def on_complete(self) -> None:
        if self.listener is not None:
            self.listener.completed(self)

    def on_expiration(self) -> None:
        if self.listener is not None:
            self.listener.expired(self)


class ActionQueue:
    """Kafka's ActionQueue: purgatory work that must not run inside the call that triggered it.

    An append schedules the checks its new high watermark allows, to run once the produce request has been handled;
    a heartbeat expiring inside the reaper's advance schedules the rebalance step that watches new heartbeats. Every
    purgatory call is then a separate step, as the vocabulary (and the model) has them.
    """

    def __init__(self) -> None:
        self._actions: deque[Callable[[], None]] = deque()

    def add(self, action: Callable[[], None]) -> None:
        self._actions.append(action)

    def try_complete_actions(self) -> None:
        while self._actions:
            self._actions.popleft()()
