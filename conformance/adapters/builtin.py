"""The in-process adapter for kpurgatory.impl: each vocabulary command becomes one call into the library.

``factory()`` returns a `SystemUnderTest` running impl's timer and purgatory in virtual-clock mode (the same code as
the threaded mode, with the clock injected and expired tasks run inline), so a run is deterministic.

The ops of the purgatory profile behave exactly like the model's: an op's ``try_complete`` counts its calls and its
condition holds from the ``ready_on``-th call on, or once ``set_ready`` was called. ``on_complete`` reports which
route won: ``try`` for a tryComplete made by a watch or a direct ``try``, ``check`` for one made by
check_and_complete, ``expire`` for the timer and ``force`` for a direct force_complete. Malformed commands raise
`CommandError` where the model does; rejections the vocabulary defines become the observation's error code.
"""

from __future__ import annotations

import functools

from kpurgatory.conformance.sut import Hello, SystemUnderTest
from kpurgatory.impl.purgatory import DelayedOperation, DelayedOperationPurgatory, EmptyKeysError, checked_keys
from kpurgatory.impl.timer import SystemTimer, TimerDomainError, TimerTask
from kpurgatory.model import CommandError
from kpurgatory.model import vocabulary as v


class AdapterTask(TimerTask):
    """A plain timer task of the timer profile: running it records a Run event."""

    __slots__ = ("task_id", "adapter")

    def __init__(self, task_id: str, delay_ms: int, adapter: BuiltinAdapter):
        super().__init__(delay_ms)
        self.task_id = task_id
        self.adapter = adapter

    def run(self) -> None:
        self.adapter.events.append(v.Run(self.task_id))


class AdapterOperation(DelayedOperation):
    """A delayed operation whose condition the trace controls (the model's DelayedOperation)."""

    __slots__ = ("op_id", "ready_on", "ready", "try_calls", "via", "adapter")

    def __init__(self, op_id: str, delay_ms: int, ready_on: int | None, adapter: BuiltinAdapter):
        super().__init__(delay_ms)
        self.op_id = op_id
        self.ready_on = ready_on
        self.ready = False
        self.try_calls = 0
        self.via = "force"
        self.adapter = adapter

    def try_complete(self) -> bool:
        self.try_calls += 1
        if self.ready or (self.ready_on is not None and self.try_calls >= self.ready_on):
            self.via = self.adapter.try_route
            return self.force_complete()
        return False

    def run(self) -> None:
        self.via = "expire"
        super().run()

    def on_complete(self) -> None:
        self.adapter.events.append(v.Complete(self.op_id, self.via))

    def on_expiration(self) -> None:
        self.adapter.events.append(v.Expire(self.op_id))


class BuiltinAdapter:
    """`SystemUnderTest` over kpurgatory.impl in virtual-clock mode."""

    def __init__(self) -> None:
        self.profile: str | None = None
        self.events: list[v.Event] = []
        #: the via of a tryComplete: "check" while check_and_complete walks, "try" otherwise
        self.try_route = "try"
        self.timer: SystemTimer | None = None
        self.purgatory: DelayedOperationPurgatory | None = None
        self.tasks: dict[str, AdapterTask] = {}
        self.ops: dict[str, AdapterOperation] = {}
        self.is_shut_down = False

    def hello(self) -> Hello:
        return Hello(implementation="kpurgatory.impl", profiles=v.PROFILES, features=("wheel",))

    def init(self, profile: str, params: v.Params) -> None:
        if profile not in v.PROFILES:
            raise CommandError(f"profile: unknown profile {profile!r} (expected one of {', '.join(v.PROFILES)})")
        try:
            timer = SystemTimer.virtual(params.tick_ms, params.wheel_size, params.start_ms, on_error=_reraise)
            purgatory = DelayedOperationPurgatory(purge_interval=params.purge_interval, timer=timer,
                                                  on_error=_reraise)
        except (TimerDomainError, ValueError) as error:
            raise CommandError(str(error)) from None
        self.__init__()
        self.profile, self.timer, self.purgatory = profile, timer, purgatory

    def step(self, command: v.Command) -> v.Observation:
        if self.profile is None:
            raise CommandError(f"{command.name}: init must come first")
        if self.is_shut_down:
            raise CommandError(f"{command.name}: no command may follow shutdown")
        if self.profile not in command.profiles:
            raise CommandError(f"{command.name}: not a command of the {self.profile} profile")
        self.events = []
        try:
            result, error = self._execute(command), None
        except (EmptyKeysError, TimerDomainError) as rejection:
            if rejection.code not in v.ERRORS:
                raise CommandError(f"{command.name}: {rejection}") from None
            result, error = None, rejection.code
        return v.Observation(result=result, events=tuple(self.events), error=error)

    def close(self) -> None:
        if self.timer is not None and not self.is_shut_down:
            self.purgatory.shutdown()
        self.profile = None

    # --- commands ---------------------------------------------------------------------------------------------

    @functools.singledispatchmethod
    def _execute(self, command: v.Command) -> v.Json:
        raise CommandError(f"{command.name}: unsupported command")

    @_execute.register
    def _(self, command: v.TimerAdd) -> None:
        task = self.tasks.get(command.task)
        if task is None:
            task = self.tasks[command.task] = AdapterTask(command.task, command.delay_ms, self)
        elif task.delay_ms != command.delay_ms:
            raise CommandError(f"timer_add: task {command.task!r} was created with delay_ms={task.delay_ms}, "
                               f"not {command.delay_ms} (a task's delay is fixed, as in Kafka)")
        self.timer.add(task)

    @_execute.register
    def _(self, command: v.TimerCancel) -> None:
        if command.task not in self.tasks:
            raise CommandError(f"task: {command.task!r} was never added")
        self.tasks[command.task].cancel()

    @_execute.register
    def _(self, command: v.Watch) -> bool:
        op = self.ops.get(command.op)
        if op is None:
            if command.delay_ms is None:
                raise CommandError(f"watch: delay_ms is required the first time op {command.op!r} is watched")
            op = self.ops[command.op] = AdapterOperation(command.op, command.delay_ms, command.ready_on, self)
        else:
            for field in ("delay_ms", "ready_on"):
                given, fixed = getattr(command, field), getattr(op, field)
                if given is not None and given != fixed:
                    raise CommandError(f"watch: op {command.op!r} was created with {field}={fixed}, not {given}")
        try:
            keys = checked_keys(command.keys)
        except EmptyKeysError:
            raise
        except (TypeError, ValueError) as error:
            raise CommandError(f"watch: keys: {error}") from None
        return self.purgatory.try_complete_else_watch(op, keys)

    @_execute.register
    def _(self, command: v.SetReady) -> None:
        self._op(command.op).ready = True

    @_execute.register
    def _(self, command: v.Check) -> int:
        self.try_route = "check"
        try:
            return self.purgatory.check_and_complete(command.key)
        finally:
            self.try_route = "try"

    @_execute.register
    def _(self, command: v.CancelKey) -> list[str]:
        return [op.op_id for op in self.purgatory.cancel_for_key(command.key)]

    @_execute.register
    def _(self, command: v.Force) -> bool:
        op = self._op(command.op)
        op.via = "force"
        return op.force_complete()

    @_execute.register
    def _(self, command: v.Try) -> bool:
        return self._op(command.op).try_complete()

    @_execute.register
    def _(self, command: v.Cancel) -> None:
        self._op(command.op).cancel()

    @_execute.register
    def _(self, command: v.Watched) -> int:
        return self.purgatory.watched()

    @_execute.register
    def _(self, command: v.Delayed) -> int:
        return self.purgatory.num_delayed()

    @_execute.register
    def _(self, command: v.Advance) -> None:
        try:
            if self.profile == "purgatory":
                purged = self.purgatory.advance_to(command.to_ms)
                if purged is not None:
                    self.events.append(v.Purge(purged))
            else:
                self.timer.advance_to(command.to_ms)
        except TimerDomainError as error:
            raise CommandError(f"advance: to_ms: {error}") from None

    @_execute.register
    def _(self, command: v.Size) -> int:
        return self.timer.size()

    @_execute.register
    def _(self, command: v.Shutdown) -> list[str]:
        self.is_shut_down = True
        return sorted(_label(task) for task in self.purgatory.shutdown())

    @_execute.register
    def _(self, command: v.Wheel) -> dict:
        return self.timer.describe(label=_label)

    def _op(self, op_id: str) -> AdapterOperation:
        if op_id not in self.ops:
            raise CommandError(f"op: {op_id!r} was never watched")
        return self.ops[op_id]


def _label(task: TimerTask) -> str:
    return task.op_id if isinstance(task, AdapterOperation) else task.task_id


def _reraise(error: BaseException, source: object) -> None:
    """The adapter's callbacks never raise; if one does, that is an adapter bug the harness must see."""
    raise error


def factory() -> SystemUnderTest:
    return BuiltinAdapter()
