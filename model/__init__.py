"""kpurgatory.model — the executable spec of Kafka's purgatory and timing wheel (pure, deterministic, virtual clock).

    from kpurgatory.model import Model, Params, vocabulary as v
    model = Model("timer", Params(tick_ms=1, wheel_size=20))
    model.step(v.TimerAdd("a", 8))
    model.step(v.Advance(8)).events   # (Run(task='a'),)
"""

from kpurgatory.model import vocabulary
from kpurgatory.model.machine import CommandError, Model
from kpurgatory.model.vocabulary import Observation, Params

__all__ = ["CommandError", "Model", "Observation", "Params", "vocabulary"]
