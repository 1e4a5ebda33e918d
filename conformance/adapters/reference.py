"""The reference model itself as a system under test: ``--impl kpurgatory.conformance.adapters.reference:factory``.

It passes every check by construction, so it is the sanity target: a harness, an adapter wrapper or a new trace that
fails against it is broken itself. Like any system under test it reports flat event lists; only the oracle's
observations carry groups.
"""

from __future__ import annotations

import attrs

from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v


class ModelSystem:
    """`SystemUnderTest` over `kpurgatory.model.Model`; malformed commands raise the model's CommandError."""

    def __init__(self) -> None:
        self.model: Model | None = None

    def hello(self) -> Hello:
        return Hello(implementation="kpurgatory.model", profiles=v.PROFILES, features=v.OPTIONAL)

    def init(self, profile: str, params: v.Params) -> None:
        self.model = Model(profile, params)

    def step(self, command: v.Command) -> v.Observation:
        return attrs.evolve(self.model.step(command), groups=None)

    def close(self) -> None:
        self.model = None


def factory() -> ModelSystem:
    return ModelSystem()
