"""The contract monitor catches each property's violation in an observation stream that breaks it."""

import pytest

from kpurgatory.model import Params
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import ContractMonitor

O = v.Observation


def violations(profile, steps, params=Params(1, 20, 0, 1000)):
    monitor = ContractMonitor(profile, params)
    for command, observation in steps:
        monitor.observe(command, observation)
    return [violation.prop for violation in monitor.violations]


WATCH = (v.Watch("o", ("k",), 10), O(False))

CASES = {
    "double completion": ("purgatory", [WATCH, (v.Force("o"), O(True, (v.Complete("o", "force"),))),
                                        (v.Advance(10), O(None, (v.Complete("o", "expire"), v.Expire("o"))))],
                          "exactly_once"),
    "expiration without completion": ("purgatory", [WATCH, (v.Advance(10), O(None, (v.Expire("o"),)))],
                                      "exactly_once"),
    "task runs twice": ("timer", [(v.TimerAdd("t", 5), O()), (v.Advance(5), O(None, (v.Run("t"),))),
                                  (v.Advance(6), O(None, (v.Run("t"),)))], "exactly_once"),
    "completion of a not-ready op by check": ("purgatory", [WATCH, (v.Check("k"), O(1, (v.Complete("o", "check"),)))],
                                              "justified"),
    "watch claims a completion it did not make": ("purgatory", [(v.Watch("o", ("k",), 10), O(True))], "justified"),
    "early expiry": ("purgatory", [WATCH, (v.Advance(9), O(None, (v.Complete("o", "expire"), v.Expire("o"))))],
                     "on_time"),
    "late expiry": ("purgatory", [WATCH, (v.Advance(10), O())], "on_time"),
    "early run": ("timer", [(v.TimerAdd("t", 5), O()), (v.Advance(4), O(None, (v.Run("t"),)))], "on_time"),
    "lost wakeup": ("purgatory", [WATCH, (v.SetReady("o"), O()), (v.Check("k"), O(0))], "no_lost_wakeup"),
    "watched too large": ("purgatory", [WATCH, (v.Watched(), O(2))], "watcher_cleanup"),
    "stale entry survives a check": ("purgatory", [
        (v.Watch("o", ("k", "j"), 10), O(False)), (v.SetReady("o"), O()),
        (v.Check("k"), O(1, (v.Complete("o", "check"),))), (v.Check("j"), O(0)), (v.Watched(), O(1))],
        "watcher_cleanup"),
    "cancel_key forgets an op": ("purgatory", [WATCH, (v.CancelKey("k"), O([]))], "watcher_cleanup"),
    "stale entry survives a purge": ("purgatory", [
        (v.Watch("o", ("k", "j"), 10), O(False)), (v.SetReady("o"), O()),
        (v.Check("k"), O(1, (v.Complete("o", "check"),))), (v.Advance(1), O(None, (v.Purge(0),))),
        (v.Watched(), O(1))], "watcher_cleanup"),
    "purge outside an advance": ("purgatory", [WATCH, (v.Check("k"), O(0, (v.Purge(0),)))], "purge_rule"),
    "delayed counts a completed op": ("purgatory", [WATCH, (v.Force("o"), O(True, (v.Complete("o", "force"),))),
                                                    (v.Delayed(), O(1))], "counters"),
    "size counts a cancelled task": ("timer", [(v.TimerAdd("t", 5), O()), (v.TimerCancel("t"), O()),
                                               (v.Size(), O(1))], "counters"),
    "shutdown hides a pending op": ("purgatory", [WATCH, (v.Shutdown(), O([]))], "counters"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_violation_is_caught(name):
    profile, steps, prop = CASES[name]
    assert prop in violations(profile, steps)


def test_a_correct_stream_has_no_violations():
    steps = [WATCH, (v.Watch("p", ("k", "j"), 30, ready_on=2), O(True, (v.Complete("p", "try"),))),
             (v.Watched(), O(3)), (v.SetReady("o"), O()), (v.Check("k"), O(1, (v.Complete("o", "check"),))),
             (v.Watched(), O(1)), (v.Delayed(), O(0)), (v.Advance(100), O()), (v.Shutdown(), O([]))]
    assert violations("purgatory", steps) == []


def test_tick_above_one_allows_firing_at_the_start_of_the_tick():
    steps = [(v.TimerAdd("t", 15), O()), (v.Advance(10), O(None, (v.Run("t"),)))]
    assert violations("timer", steps, Params(10, 20, 0)) == []
