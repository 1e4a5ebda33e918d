"""Seeded random workloads for ``kpurgatory record``: ``workload(name, seed, steps)`` -> a run valid for the model.

Hypothesis (conformance.check.strategies, conformance.check.sequential) searches and shrinks; a corpus needs something else: many
long runs, cheaply, each one regenerable from nothing but its seed on any executor, with no database. So this draws
with ``random.Random`` and follows the strategies' rules for validity (ops re-watched without their delay, commands
only on known ids, nothing after shutdown) and their spirit for reach: small wheels so overflow levels three and up
are cheap, delays near level boundaries, few shared keys so checks, stale entries, cancelled keys and purges happen.
"""

from __future__ import annotations

import random

from kpurgatory.conformance.traces.codec import Header
from kpurgatory.model import vocabulary as v

WORKLOADS = ("mixed", "purgatory", "timer")

#: command kind -> relative weight, per profile (wheel read-outs are rare: they are large and say little new)
TIMER_MIX = {"add": 45, "cancel": 10, "advance": 30, "size": 12, "wheel": 3}
PURGATORY_MIX = {"watch": 28, "ready": 12, "check": 16, "cancel_key": 3, "force": 4, "try": 4, "cancel": 3,
                 "advance": 16, "watched": 5, "delayed": 5, "size": 3, "wheel": 1}


class Draw:
    """One run's random choices: the parameters, then a command at a time."""

    def __init__(self, rng: random.Random, profile: str):
        self.rng, self.profile = rng, profile
        tick = rng.choice((1, 1, 1, 2, 5))
        size = rng.randint(2, 8)
        self.params = v.Params(tick, size, rng.choice((0, rng.randint(0, 4 * tick * size))),
                               rng.randint(0, 5) if profile == "purgatory" else 1000)
        self.now = self.params.start_ms
        self.delays: dict[str, int] = {}  # task or op id -> its fixed delay
        self.mix = TIMER_MIX if profile == "timer" else PURGATORY_MIX

    def delay(self) -> int:
        tick, size = self.params.tick_ms, self.params.wheel_size
        roll = self.rng.random()
        if roll < 0.02:
            return self.rng.randint(v.LONG_MAX - self.now, v.LONG_MAX)  # a deadline past Long.MAX_VALUE, mostly
        if roll < 0.3:
            return self.rng.randint(-2, 3 * tick)
        if roll < 0.7:
            return tick * size ** self.rng.randint(1, 3) + self.rng.randint(-2, 2)
        return self.rng.randint(0, tick * size ** 4)

    def advance(self) -> v.Advance:
        tick, size = self.params.tick_ms, self.params.wheel_size
        self.now += self.rng.randint(0, 3 * tick) if self.rng.random() < 0.6 else self.rng.randint(0, tick * size ** 3)
        return v.Advance(self.now)

    def known(self) -> str | None:
        return self.rng.choice(sorted(self.delays)) if self.delays else None

    def command(self) -> v.Command | None:
        """The next command, or None when the drawn kind needs an id nobody has created yet."""
        rng = self.rng
        kind = rng.choices(list(self.mix), weights=list(self.mix.values()))[0]
        if kind == "advance":
            return self.advance()
        if kind in ("size", "watched", "delayed", "wheel"):
            return {"size": v.Size, "watched": v.Watched, "delayed": v.Delayed, "wheel": v.Wheel}[kind]()
        if kind == "add":
            task = f"t{rng.randrange(10)}"
            return v.TimerAdd(task, self.delays.setdefault(task, self.delay()))
        if kind in ("check", "cancel_key"):
            key = f"k{rng.randrange(5)}"
            return v.Check(key) if kind == "check" else v.CancelKey(key)
        if kind == "watch":
            op, keys = f"o{rng.randrange(10)}", [f"k{rng.randrange(5)}" for _ in range(rng.choice((0, 1, 1, 2, 3)))]
            if not keys and rng.random() < 0.8:
                keys = ["k0"]  # an empty key list is rejected (empty_keys): keep it rare
            if op in self.delays:
                return v.Watch(op, keys)
            self.delays[op] = self.delay()
            return v.Watch(op, keys, self.delays[op], rng.choice((None, None, 1, 2, 3)))
        target = self.known()
        if target is None:
            return None
        return {"cancel": v.TimerCancel if self.profile == "timer" else v.Cancel,
                "ready": v.SetReady, "force": v.Force, "try": v.Try}[kind](target)


def workload(name: str, seed: int, steps: int = 100,
             implementation: str = "kpurgatory.model") -> tuple[Header, list[v.Command]]:
    """The run of ``seed``: ``steps`` commands (the last may be a shutdown) under a trace id naming workload and
    seed."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} (expected one of {', '.join(WORKLOADS)})")
    rng = random.Random(f"{name}:{seed}")
    profile = rng.choice(v.PROFILES) if name == "mixed" else name
    draw = Draw(rng, profile)
    commands: list[v.Command] = []
    while len(commands) < steps - 1:
        command = draw.command()
        if command is not None:
            commands.append(command)
    commands.append(v.Shutdown() if rng.random() < 0.3 else draw.advance())
    header = Header(f"{name}-{seed}", profile, draw.params, implementation)
    return header, commands
