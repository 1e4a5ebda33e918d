"""Differential test: the same seeded random command sequences through the model and through impl (builtin adapter).

Results, error codes and rejections (CommandError) must be equal step by step. Events are compared per model group:
the model's observation says how its events split into groups whose order within is free; the adapter's flat events
are cut at the same sizes and each piece compared as a multiset, the pieces in order.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kpurgatory.conformance.adapters.builtin import factory
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v

PARAMS = [  # (tick_ms, wheel_size, start_ms, purge_interval): up to 7 wheel levels in the runs below
    (1, 20, 0, 1000),
    (1, 2, 0, 0),
    (1, 3, 5, 2),
    (2, 4, 1, 1),
    (3, 2, 100, 3),
    (10, 5, 1000, 2),
    (7, 3, 12_345, 5),
    (1, 8, 2**40, 4),
]


class CommandGenerator:
    """Mostly well-formed commands over small pools of tasks, ops and keys, so they collide often; now and then a
    malformed one (both sides must reject it) or one the purgatory rejects (both must report the same code)."""

    def __init__(self, rng: random.Random, profile: str, params: v.Params):
        self.rng, self.profile, self.params = rng, profile, params
        self.now = params.start_ms
        self.horizon = params.tick_ms * params.wheel_size ** 3 * 2  # delays reaching the fourth level and beyond
        self.delays: dict[str, int] = {}

    def delay(self) -> int:
        roll = self.rng.random()
        if roll < 0.03:
            return v.LONG_MAX  # delay_out_of_range unless now == 0
        if roll < 0.08:
            return self.rng.randint(-5, 0)
        if roll < 0.5:
            return self.rng.randint(1, self.params.tick_ms * self.params.wheel_size)
        return self.rng.randint(1, self.horizon)

    def advance(self) -> v.Advance:
        roll = self.rng.random()
        step = (self.rng.randint(0, self.params.tick_ms * 2) if roll < 0.6
                else self.rng.randint(0, self.horizon // 2))
        self.now += step
        return v.Advance(self.now)

    def common(self) -> v.Command:
        return self.rng.choice([v.Size(), v.Wheel()])

    def next(self) -> v.Command:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            return self.advance()
        if roll < 0.35:
            return self.common()
        if roll < 0.355:
            return v.Advance(self.now - 1) if self.now > self.params.start_ms else self.common()  # clock_backwards
        return self.timer_command() if self.profile == "timer" else self.purgatory_command()

    def timer_command(self) -> v.Command:
        rng = self.rng
        task = f"t{rng.randrange(12)}"
        if rng.random() < 0.65:
            if task not in self.delays:
                self.delays[task] = self.delay()
            elif rng.random() < 0.02:
                return v.TimerAdd(task, self.delays[task] + 1)  # malformed: a task's delay is fixed
            return v.TimerAdd(task, self.delays[task])
        if task not in self.delays and rng.random() < 0.9:
            return self.common()
        return v.TimerCancel(task)  # an unknown task is malformed

    def purgatory_command(self) -> v.Command:
        rng = self.rng
        op = f"o{rng.randrange(16)}"
        kind = rng.choices(
            ["watch", "set_ready", "check", "cancel_key", "force", "try", "cancel", "watched", "delayed"],
            weights=[30, 10, 20, 4, 3, 4, 3, 3, 3])[0]
        if kind == "watch":
            keys = tuple(rng.choice("abcdef") for _ in range(rng.choice([0, 1, 1, 2, 3, 3, 4])))
            if op not in self.delays:
                self.delays[op] = self.delay()
                return v.Watch(op, keys, self.delays[op], rng.choice([None, None, 1, 2, 3, 4]))
            return v.Watch(op, keys, self.delays[op] if rng.random() < 0.3 else None)
        if kind in ("check", "cancel_key"):
            key = rng.choice("abcdefg")
            return v.Check(key) if kind == "check" else v.CancelKey(key)
        if kind in ("watched", "delayed"):
            return v.Watched() if kind == "watched" else v.Delayed()
        if op not in self.delays and rng.random() < 0.9:
            return v.Watched()
        return {"set_ready": v.SetReady, "force": v.Force, "try": v.Try, "cancel": v.Cancel}[kind](op)


def split_like(events: tuple, sizes: list[int]) -> list[Counter]:
    pieces, start = [], 0
    for size in sizes:
        pieces.append(Counter(events[start:start + size]))
        start += size
    return pieces


def run_both(profile: str, params: v.Params, seed: int, steps: int) -> None:
    rng = random.Random(seed)
    model, sut = Model(profile, params), factory()
    sut.init(profile, params)
    generator = CommandGenerator(rng, profile, params)
    try:
        for index in range(steps):
            command = generator.next() if index < steps - 1 else v.Shutdown()
            where = f"seed {seed}, step {index}: {command}"
            try:
                expected = model.step(command)
            except CommandError:
                with pytest.raises(CommandError):
                    sut.step(command)
                continue
            actual = sut.step(command)
            assert (actual.result, actual.error) == (expected.result, expected.error), where
            sizes = [len(group) for group in expected.grouped()]
            assert sum(sizes) == len(actual.events), f"{where}: {actual.events} vs {expected.events}"
            assert split_like(actual.events, sizes) == [Counter(group) for group in expected.grouped()], where
    finally:
        sut.close()


@pytest.mark.parametrize("profile", v.PROFILES)
@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "tick{}-size{}-start{}-purge{}".format(*p))
def test_impl_agrees_with_model(profile: str, params: tuple[int, int, int, int]) -> None:
    tick_ms, wheel_size, start_ms, purge_interval = params
    for seed in range(3):
        run_both(profile, v.Params(tick_ms, wheel_size, start_ms, purge_interval), seed, steps=150)


def test_runs_reach_deep_levels() -> None:
    """The generator's horizon does exercise overflow wheels of level 3 and more."""
    sut = factory()
    sut.init("timer", v.Params(1, 2, 0, 0))
    generator = CommandGenerator(random.Random(1), "timer", v.Params(1, 2, 0, 0))
    deepest = 0
    for _ in range(300):
        command = generator.next()
        try:
            sut.step(command)
        except CommandError:
            continue
        deepest = max(deepest, len(sut.step(v.Wheel()).result["levels"]))
    assert deepest >= 4


@pytest.mark.parametrize("profile", v.PROFILES)
def test_invalid_params_rejected_like_the_model(profile: str) -> None:
    for params in (v.Params(tick_ms=0), v.Params(wheel_size=1), v.Params(start_ms=-1), v.Params(purge_interval=-1),
                   v.Params(purge_interval=v.INT_MAX + 1), v.Params(tick_ms=2**62, wheel_size=4)):
        with pytest.raises(CommandError):
            Model(profile, params)
        with pytest.raises(CommandError):
            factory().init(profile, params)


def test_check_removes_the_visited_duplicate_entry_like_the_model():
    """[o, x, o] with o completing on its second visit: the first (now stale) entry stays ahead of x."""
    from kpurgatory.conformance.adapters.builtin import factory
    from kpurgatory.conformance.traces.replay import replay
    from kpurgatory.conformance.traces.codec import Header, model_trace
    from kpurgatory.model import Params
    from kpurgatory.model import vocabulary as v

    commands = [v.Watch("o", ("k",), 100, 6), v.Watch("x", ("k",), 100), v.Watch("o", ("k",)), v.Check("k"),
                v.CancelKey("k")]
    trace = model_trace(Header("duplicate-visit", "purgatory", Params()), commands)
    assert trace.steps[-1].observation.result == ["o", "x"]
    report = replay(trace, factory())
    assert report.ok, report.first_failure
