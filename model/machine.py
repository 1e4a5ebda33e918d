"""The executable spec as a state machine: ``Model(profile, params).step(command) -> Observation``.

This is where the vocabulary meets the Kafka classes: each command is one Kafka call (or one reaper step), the
observation is its return value and the events recorded while it ran. Malformed commands (an unknown op, a command
outside the profile, anything after shutdown) raise `CommandError`: they are not behaviour to compare but input to
reject, and the trace reader reports them with the line that carried them.
"""

from __future__ import annotations

import functools

import attrs

from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import DelayedOperation, DelayedOperationPurgatory, EmptyKeysError, Journal
from kpurgatory.model.releases import CURRENT, Release
from kpurgatory.model.timer import SystemTimer, TimerDomainError, TimerTask


class CommandError(ValueError):
    """A command that no correct trace contains; the message names the field at fault."""


def validate_params(profile: str, params: v.Params) -> None:
    if profile not in v.PROFILES:
        raise CommandError(f"profile: unknown profile {profile!r} (expected one of {', '.join(v.PROFILES)})")
    if not 0 <= params.purge_interval <= v.INT_MAX:
        raise CommandError(f"purge_interval: must be in [0, {v.INT_MAX}], got {params.purge_interval}")
    try:
        SystemTimer.create(params.tick_ms, params.wheel_size, params.start_ms)
    except TimerDomainError as error:
        raise CommandError(str(error)) from None


@functools.cache
def name_fields(command_class: type[v.Command]) -> tuple[str, ...]:
    """The fields of a command that name an op, a task or a key."""
    return tuple(field.name for field in attrs.fields(command_class) if field.name in ("op", "task", "key"))


def validate_names(command: v.Command) -> None:
    """Ids and keys are non-empty strings (the schema's rule, enforced here for callers that skip the codec)."""
    for field in name_fields(type(command)):
        require_name(command, field, getattr(command, field))
    if isinstance(command, v.Watch):
        for index, key in enumerate(command.keys):
            require_name(command, f"keys[{index}]", key)


def require_name(command: v.Command, field: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise CommandError(f"{command.name}: {field} must be a non-empty string, got {value!r}")


@attrs.define(eq=False)
class Model:
    """``release`` is the Kafka release whose purgatory the model follows (`model/releases.py`); by default the
    current one."""

    profile: str
    params: v.Params
    release: Release = CURRENT
    journal: Journal = attrs.field(factory=Journal)
    timer: SystemTimer = attrs.field(init=False)
    purgatory: DelayedOperationPurgatory = attrs.field(init=False)
    tasks: dict[str, TimerTask] = attrs.field(factory=dict)
    ops: dict[str, DelayedOperation] = attrs.field(factory=dict)
    is_shut_down: bool = False

    def __attrs_post_init__(self) -> None:
        validate_params(self.profile, self.params)
        self.timer = SystemTimer.create(
            self.params.tick_ms, self.params.wheel_size, self.params.start_ms, on_bucket=self._enter_bucket_group
        )
        self.purgatory = DelayedOperationPurgatory(self.timer, self.journal, self.params.purge_interval, self.release)

    def _enter_bucket_group(self, expiration_ms: int) -> None:
        self.journal.current_group = ("bucket", expiration_ms)

    @property
    def now_ms(self) -> int:
        return self.timer.now_ms

    # --- the step function ------------------------------------------------------------------------------------

    def step(self, command: v.Command) -> v.Observation:
        if self.is_shut_down:
            raise CommandError(f"{command.name}: no command may follow shutdown")
        if self.profile not in command.profiles:
            raise CommandError(f"{command.name}: not a command of the {self.profile} profile")
        if command.name in self.release.missing_commands:
            raise CommandError(f"{command.name}: {self.release} has no such call")
        validate_names(command)
        self.journal.current_group = "command"
        try:
            result, error = self._execute(command), None
        except (EmptyKeysError, TimerDomainError) as rejection:
            if rejection.code not in v.ERRORS:
                raise CommandError(f"{command.name}: {rejection}") from None
            result, error = None, rejection.code
        events, groups = self.journal.take()
        return v.Observation(result=result, events=events, error=error, groups=groups)

    def _execute(self, command: v.Command) -> v.Json:
        """The Kafka call ``command`` stands for: the method ``_<name>`` below, named after the command."""
        call = getattr(self, f"_{command.name}", None)
        if call is None:
            raise CommandError(f"{command.name}: unsupported command")
        return call(command)

    # --- timer profile ----------------------------------------------------------------------------------------

    def _timer_add(self, command: v.TimerAdd) -> None:
        task = self.tasks.get(command.task)
        if task is None:
            task = self.tasks[command.task] = TimerTask(command.task, command.delay_ms, on_run=self._record_run)
        elif task.delay_ms != command.delay_ms:
            raise CommandError(f"timer_add: task {command.task!r} was created with delay_ms={task.delay_ms}, "
                               f"not {command.delay_ms} (a task's delay is fixed, as in Kafka)")
        self.timer.add(task)

    def _record_run(self, task: TimerTask) -> None:
        self.journal.record(v.Run(task.task_id))

    def _timer_cancel(self, command: v.TimerCancel) -> None:
        self._task(command.task).cancel()

    # --- purgatory profile ------------------------------------------------------------------------------------

    def _watch(self, command: v.Watch) -> bool:
        op = self.ops.get(command.op)
        if op is None:
            if command.delay_ms is None:
                raise CommandError(f"watch: delay_ms is required the first time op {command.op!r} is watched")
            op = DelayedOperation(command.op, command.delay_ms, journal=self.journal, ready_on=command.ready_on,
                                  built_expiration_ms=self.now_ms + command.delay_ms)
            self.ops[command.op] = op
        else:
            for field in ("delay_ms", "ready_on"):
                given, fixed = getattr(command, field), getattr(op, field)
                if given is not None and given != fixed:
                    raise CommandError(f"watch: op {command.op!r} was created with {field}={fixed}, not {given}")
        return self.purgatory.try_complete_else_watch(op, command.keys)

    def _set_ready(self, command: v.SetReady) -> None:
        self._op(command.op).ready = command.ready

    def _check(self, command: v.Check) -> int:
        return self.purgatory.check_and_complete(command.key)

    def _cancel_key(self, command: v.CancelKey) -> list[str]:
        return [op.op_id for op in self.purgatory.cancel_for_key(command.key)]

    def _force(self, command: v.Force) -> bool:
        return self._op(command.op).force_complete("force")

    def _try(self, command: v.Try) -> bool:
        return self._op(command.op).try_complete("try")

    def _cancel(self, command: v.Cancel) -> None:
        self._op(command.op).cancel()

    def _watched(self, command: v.Watched) -> int:
        return self.purgatory.watched()

    def _delayed(self, command: v.Delayed) -> int:
        return self.purgatory.num_delayed()

    # --- both profiles ----------------------------------------------------------------------------------------

    def _advance(self, command: v.Advance) -> None:
        try:
            if self.profile == "purgatory":
                self.purgatory.advance_clock(command.to_ms)
            else:
                self.timer.advance_clock(command.to_ms)
        except TimerDomainError as error:
            raise CommandError(f"advance: to_ms: {error}") from None

    def _size(self, command: v.Size) -> int:
        return self.timer.size()

    def _shutdown(self, command: v.Shutdown) -> list[str]:
        self.is_shut_down = True
        return sorted(task.task_id for task in self.purgatory.shutdown())

    def _wheel(self, command: v.Wheel) -> dict:
        return self.timer.describe()

    def _watcher_keys(self, command: v.WatcherKeys) -> list[str]:
        return self.purgatory.watcher_keys()

    def _delay_queue(self, command: v.DelayQueue) -> list[int]:
        return self.timer.queued_expirations()

    # --- lookups ----------------------------------------------------------------------------------------------

    def _op(self, op_id: str) -> DelayedOperation:
        if op_id not in self.ops:
            raise CommandError(f"op: {op_id!r} was never watched")
        return self.ops[op_id]

    def _task(self, task_id: str) -> TimerTask:
        if task_id not in self.tasks:
            raise CommandError(f"task: {task_id!r} was never added")
        return self.tasks[task_id]
