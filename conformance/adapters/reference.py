"""The reference model itself as a system under test: ``--impl kpurgatory.conformance.adapters.reference:factory``.

It passes every check by construction, so it is the sanity target: a harness, an adapter wrapper or a new trace that
fails against it is broken itself. Like any system under test it reports flat event lists; only the oracle's
observations carry groups. Built for an older Kafka release, it is that release as the model has it, declaring its
version in its hello: what a faithful port of that release answers.
"""

from __future__ import annotations

import attrs

from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations
from kpurgatory.model.releases import CURRENT, Release


class ModelSystem:
    """`SystemUnderTest` over `kpurgatory.model.Model`; malformed commands raise the model's CommandError."""

    def __init__(self, release: Release = CURRENT) -> None:
        self.release = release
        self.model: Model | None = None

    def hello(self) -> Hello:
        if self.release == CURRENT:
            return Hello(implementation="kpurgatory.model", profiles=v.PROFILES, features=v.OPTIONAL)
        return Hello(implementation=f"kpurgatory.model as {self.release}", profiles=v.PROFILES, features=v.OPTIONAL,
                     declarations=Declarations(kafka_version=self.release.version))

    def init(self, profile: str, params: v.Params) -> None:
        self.model = Model(profile, params, self.release)

    def step(self, command: v.Command) -> v.Observation:
        return attrs.evolve(self.model.step(command), groups=None)

    def close(self) -> None:
        self.model = None


def factory() -> ModelSystem:
    return ModelSystem()
