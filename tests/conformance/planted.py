"""Systems with planted bugs, for the check's exploration: each is the reference model but for one deliberate fault.
They are importable (``planted:HangsInAdvance``) so the tests can also serve them through the stdio adapter."""

import attrs

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.check.findings import past_long_max
from kpurgatory.model import vocabulary as v


class HangsInAdvance(ModelSystem):
    """Spins forever in an advance once a task was cancelled (a cascade that never ends)."""

    def init(self, profile, params):
        super().init(profile, params)
        self.cancelled = False

    def step(self, command):
        self.cancelled |= isinstance(command, v.TimerCancel)
        if isinstance(command, v.Advance) and self.cancelled:
            while True:
                pass
        return super().step(command)


class RaisesInCancel(ModelSystem):
    """Raises when it cancels a task that is still pending."""

    def step(self, command):
        if isinstance(command, v.TimerCancel) and command.task in {task.task_id for task in self.model.timer.pending()}:
            raise KeyError(command.task)
        return super().step(command)


class TwoBugs(ModelSystem):
    """Two independent bugs: ``size`` counts one too many while two or more tasks are pending, and the second task
    ever added (t1) never reports running."""

    def step(self, command):
        observation = super().step(command)
        if isinstance(command, v.Size) and observation.result >= 2:
            return attrs.evolve(observation, result=observation.result + 1)
        if isinstance(command, v.Advance):
            return attrs.evolve(observation, events=tuple(e for e in observation.events if e != v.Run("t1")))
        return observation


class ArithmeticException(Exception):
    """What Java calls it."""


class StackOverflowError(Exception):
    """What Java calls it."""


class KafkaLike(ModelSystem):
    """The model, but at the edge of the domain it does what Kafka's timer does: ``now + delay`` past
    Long.MAX_VALUE wraps negative, so the task runs (the op expires) at once; a deadline that needs a level whose
    interval exceeds Long.MAX_VALUE divides by zero for even wheel sizes and overflows the stack for odd ones."""

    def step(self, command):
        observation = super().step(command)
        if observation.error == "delay_out_of_range":
            if isinstance(command, v.TimerAdd):
                return v.Observation(events=(v.Run(command.task),))
            return v.Observation(result=False, events=(v.Complete(command.op, "expire"), v.Expire(command.op)))
        placed = command.task if isinstance(command, v.TimerAdd) else getattr(command, "op", None)
        if isinstance(command, (v.TimerAdd, v.Watch)) and placed in past_long_max(self.model):
            if self.model.params.wheel_size % 2 == 0:
                raise ArithmeticException("/ by zero")
            raise StackOverflowError()
        return observation
