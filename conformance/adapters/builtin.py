"""The in-process adapter for kpurgatory.impl: each vocabulary command becomes one call into the library.

``factory()`` returns a `SystemUnderTest` running impl's timer and purgatory (the implementation ``kpurgatory.impl``
selects: compiled, or pure Python with ``KPURGATORY_IMPL=python``; ``python()`` the pure-Python one, whose every
lock a controlled scheduler takes over) in virtual-clock mode (the same code as
the threaded mode, with the clock injected and expired tasks run inline), so a run is deterministic. The adapter is
thread-safe, as the concurrent check needs: events and the route of a completion are kept per thread, because
``on_complete`` runs in the thread whose ``force_complete`` won and so belongs to that thread's command.

The ops of the purgatory profile behave exactly like the model's: an op's ``try_complete`` counts its calls and its
condition is what the last ``set_ready`` said or, before any, holds from the ``ready_on``-th call on. ``on_complete``
reports which route won: ``try`` for a tryComplete made by a watch or a direct ``try``, ``check`` for one made by
check_and_complete, ``expire`` for the timer and ``force`` for a direct force_complete. Malformed commands raise
`CommandError` where the model does; rejections the vocabulary defines become the observation's error code.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from types import SimpleNamespace

import attrs

from kpurgatory.conformance.adapters.gates import Gates
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.impl import SELECTED, DelayedOperation, TimerTask, implementation, sync
from kpurgatory.impl.purgatory import SHARDS, EmptyKeysError, checked_keys
from kpurgatory.impl.timer import TimerDomainError
from kpurgatory.model import CommandError
from kpurgatory.model.contract import KAFKA, WatcherShards
from kpurgatory.model import vocabulary as v


class TaskBehaviour:
    """A plain timer task of the timer profile: running it records a Run event (mixed into an implementation's
    TimerTask)."""

    __slots__ = ()
    SLOTS = ("task_id", "adapter")

    def __init__(self, task_id: str, delay_ms: int, adapter: BuiltinAdapter):
        super().__init__(delay_ms)
        self.task_id = task_id
        self.adapter = adapter

    def run(self) -> None:
        self.adapter.record(v.Run(self.task_id))


class OperationBehaviour:
    """A delayed operation whose condition the trace controls (the model's DelayedOperation; mixed into an
    implementation's DelayedOperation)."""

    __slots__ = ()
    SLOTS = ("op_id", "ready_on", "ready", "try_calls", "adapter")

    def __init__(self, op_id: str, delay_ms: int, ready_on: int | None, adapter: BuiltinAdapter):
        super().__init__(delay_ms)
        self.op_id = op_id
        self.ready_on = ready_on
        self.ready: bool | None = None  # what the last set_ready said
        self.try_calls = 0
        self.adapter = adapter

    def try_complete(self) -> bool:
        gates = self.adapter.gates
        gates.at("entry")
        with self.lock:  # the purgatory already holds it (reentrant); a direct `try` must count under it too
            self.try_calls += 1
            calls = self.try_calls
            if self.completed and self.adapter.current.route == "check":
                self.adapter.record(v.StaleTry(self.op_id))
        holds = self.ready if self.ready is not None else self.ready_on is not None and calls >= self.ready_on
        gates.at("decision")
        return self.force_complete() if holds else False

    def run(self) -> None:
        with self.adapter.route("expire"):
            super().run()

    def on_complete(self) -> None:
        self.adapter.record(v.Complete(self.op_id, self.adapter.current.route))

    def on_expiration(self) -> None:
        self.adapter.record(v.Expire(self.op_id))


class AdapterTask(TaskBehaviour, TimerTask):
    __slots__ = TaskBehaviour.SLOTS


class AdapterOperation(OperationBehaviour, DelayedOperation):
    __slots__ = OperationBehaviour.SLOTS


#: the route (``via``) of a completion made while a command runs, unless the timer's expiry makes it
ROUTES = {command: via for via, commands in v.VIA_COMMANDS.items() if via != "expire" for command in commands}


class BuiltinAdapter:
    """`SystemUnderTest` over kpurgatory.impl in virtual-clock mode. ``operation_class`` and ``task_class`` make the
    ops and tasks (the mutants replace them). ``gates`` stop an op's try_complete where a race schedule says
    (`kpurgatory.conformance.adapters.gates`)."""

    implementation: SimpleNamespace = SELECTED
    operation_class: type[OperationBehaviour] = AdapterOperation
    task_class: type[TaskBehaviour] = AdapterTask
    #: how many watch lists the purgatory has (declared in the hello, so the check aims keys at each)
    watcher_shards: int = SHARDS
    #: a controlled scheduler can take over its locks (`kpurgatory.impl.sync`): every lock of the pure-Python
    #: implementation, the op locks of the compiled one
    controllable = True

    def __init__(self) -> None:
        self.profile: str | None = None
        #: per thread: ``events`` of the command it runs and the ``route`` a completion made now would take
        self.current = threading.local()
        self.timer = None
        self.purgatory = None
        self.tasks: dict[str, AdapterTask] = {}
        self.ops: dict[str, AdapterOperation] = {}
        self.creating = sync.lock("adapter")  # impl's kind of lock, so a controlled scheduler takes it over too
        self.is_shut_down = False
        self.gates = Gates()

    @property
    def code_files(self) -> frozenset[str]:
        """The files of the system's own code, where a controlled scheduler of ``calls`` granularity may switch:
        impl's, and those of the classes the adapter, its ops, timer and purgatory are made of (a mutant's too)."""
        parts = (type(self), self.operation_class, self.task_class, type(self.timer), type(self.purgatory))
        modules = {sys.modules[cls.__module__] for part in parts for cls in part.__mro__}
        return frozenset(module.__file__ for module in modules if getattr(module, "__file__", None)
                         and module.__name__.partition(".")[0] not in sys.stdlib_module_names)

    def record(self, event: v.Event) -> None:
        self.current.events.append(event)

    @contextlib.contextmanager
    def route(self, route: str):
        outer = self.current.route
        self.current.route = route
        try:
            yield
        finally:
            self.current.route = outer

    def hello(self) -> Hello:
        return Hello(implementation=f"kpurgatory.impl ({self.implementation.name})", profiles=v.PROFILES,
                     features=v.OPTIONAL,
                     declarations=attrs.evolve(KAFKA, watcher_shards=WatcherShards(self.watcher_shards)))

    def init(self, profile: str, params: v.Params) -> None:
        if profile not in v.PROFILES:
            raise CommandError(f"profile: unknown profile {profile!r} (expected one of {', '.join(v.PROFILES)})")
        try:
            impl = self.implementation
            timer = impl.SystemTimer.virtual(params.tick_ms, params.wheel_size, params.start_ms, on_error=_reraise)
            purgatory = impl.DelayedOperationPurgatory(purge_interval=params.purge_interval, timer=timer,
                                                       shards=self.watcher_shards, on_error=_reraise)
        except (TimerDomainError, ValueError) as error:
            raise CommandError(str(error)) from None
        self.gates.reset()
        self.__init__()
        self.profile, self.timer, self.purgatory = profile, timer, purgatory

    def step(self, command: v.Command) -> v.Observation:
        if self.profile is None:
            raise CommandError(f"{command.name}: init must come first")
        if self.is_shut_down:
            raise CommandError(f"{command.name}: no command may follow shutdown")
        if self.profile not in command.profiles:
            raise CommandError(f"{command.name}: not a command of the {self.profile} profile")
        events = self.current.events = []
        self.current.route = ROUTES.get(type(command), "try")
        try:
            result, error = self._execute(command), None
        except (EmptyKeysError, TimerDomainError) as rejection:
            if rejection.code not in v.ERRORS:
                raise CommandError(f"{command.name}: {rejection}") from None
            result, error = None, rejection.code
        return v.Observation(result=result, events=tuple(events), error=error)

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
        with self.creating:
            task = self.tasks.get(command.task)
            if task is None:
                task = self.tasks[command.task] = self.task_class(command.task, command.delay_ms, self)
        if task.delay_ms != command.delay_ms:
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
        with self.creating:
            op = self.ops.get(command.op)
            if op is None:
                if command.delay_ms is None:
                    raise CommandError(f"watch: delay_ms is required the first time op {command.op!r} is watched")
                op = self.ops[command.op] = self.operation_class(command.op, command.delay_ms, command.ready_on,
                                                                 self)
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
        self._op(command.op).ready = command.ready

    @_execute.register
    def _(self, command: v.Check) -> int:
        return self.purgatory.check_and_complete(command.key)

    @_execute.register
    def _(self, command: v.CancelKey) -> list[str]:
        return [op.op_id for op in self.purgatory.cancel_for_key(command.key)]

    @_execute.register
    def _(self, command: v.Force) -> bool:
        return self._op(command.op).force_complete()

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
                    self.record(v.Purge(purged))
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

    @_execute.register
    def _(self, command: v.WatcherKeys) -> list[str]:
        return self.purgatory.watcher_keys()

    @_execute.register
    def _(self, command: v.DelayQueue) -> list[int]:
        return self.timer.queued_expirations()

    def _op(self, op_id: str) -> OperationBehaviour:
        if op_id not in self.ops:
            raise CommandError(f"op: {op_id!r} was never watched")
        return self.ops[op_id]


def _label(task: TimerTask) -> str:
    return task.op_id if isinstance(task, OperationBehaviour) else task.task_id


def _reraise(error: BaseException, source: object) -> None:
    """The adapter's callbacks never raise; if one does, that is an adapter bug the harness must see."""
    raise error


class KafkaLayoutAdapter(BuiltinAdapter):
    """impl with Kafka's watch-list layout: 512 shards (KAFKA-6431), picked as Kafka picks them."""

    watcher_shards = KAFKA.watcher_shards.count


PYTHON = implementation("python")


class PythonTask(TaskBehaviour, PYTHON.TimerTask):
    __slots__ = TaskBehaviour.SLOTS


class PythonOperation(OperationBehaviour, PYTHON.DelayedOperation):
    __slots__ = OperationBehaviour.SLOTS


class PythonAdapter(BuiltinAdapter):
    """impl's pure-Python implementation, whatever ``kpurgatory.impl`` selects: the one a controlled scheduler can
    run (`controllable`)."""

    implementation = PYTHON
    task_class = PythonTask
    operation_class = PythonOperation


def factory() -> SystemUnderTest:
    return BuiltinAdapter()


def python() -> SystemUnderTest:
    return PythonAdapter()


def kafka_layout() -> SystemUnderTest:
    return KafkaLayoutAdapter()
