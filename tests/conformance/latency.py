"""Systems that answer late, as on a loaded machine, for the reproducibility tests: a planted system (planted.py)
whose calls each wait a random while first, now and then a long one. The waits are drawn from the operating system's
entropy, so no two runs see the same. Importable (``latency:two_bugs``) so the tests can also serve them through the
stdio adapter."""

from __future__ import annotations

import random
import time

import planted

from kpurgatory.conformance.adapters.sut import SystemUnderTest

#: how often a call waits, how long at most, and how often instead it pauses, and for how long
WAIT_ONE_IN, WAIT_S = 20, 0.020
PAUSE_ONE_IN, PAUSE_S = 1000, 0.2


class Late:
    """``system``, each of whose calls first waits a while."""

    def __init__(self, system: SystemUnderTest):
        self.system, self.random = system, random.SystemRandom()

    def wait(self) -> None:
        if self.random.randrange(PAUSE_ONE_IN) == 0:
            time.sleep(PAUSE_S)
        elif self.random.randrange(WAIT_ONE_IN) == 0:
            time.sleep(self.random.uniform(0, WAIT_S))

    def hello(self):
        self.wait()
        return self.system.hello()

    def init(self, profile, params):
        self.wait()
        self.system.init(profile, params)

    def step(self, command):
        self.wait()
        return self.system.step(command)

    def close(self):
        self.system.close()


def two_bugs() -> Late:
    return Late(planted.TwoBugs())
