"""The contract monitor catches each property's violation in an observation stream that breaks it."""

import pytest

from kpurgatory.model import Params
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, ContractMonitor, Declarations

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


# --- declarations: each allowance lets through exactly what it declares -------------------------------------------

LATE = Declarations(firing="never_early_up_to_tick_late")


def judged(declarations, steps, profile="timer", params=Params(10, 20, 0)):
    monitor = ContractMonitor(profile, params, declarations)
    for command, observation in steps:
        monitor.observe(command, observation)
    return [violation.prop for violation in monitor.violations]


# A task due at 15 on a 10 ms tick, run at 20 (once the clock has left its slot) or at 10 (the start of its tick)
RUN_LATE = [(v.TimerAdd("t", 15), O()), (v.Advance(15), O()), (v.Advance(20), O(None, (v.Run("t"),)))]
RUN_AT_TICK_START = [(v.TimerAdd("t", 15), O()), (v.Advance(10), O(None, (v.Run("t"),)))]


def test_kafka_window_allows_the_tick_start_and_refuses_lateness():
    assert judged(KAFKA, RUN_AT_TICK_START) == []
    assert judged(KAFKA, RUN_LATE) == ["on_time"]


def test_never_early_window_allows_a_tick_of_lateness_and_refuses_the_tick_start():
    assert judged(LATE, RUN_LATE) == []
    assert judged(LATE, RUN_AT_TICK_START) == ["on_time"]
    # more than a tick late is late whatever is declared
    assert judged(LATE, [(v.TimerAdd("t", 15), O()), (v.Advance(25), O())]) == ["on_time"]


def test_min_one_tick_lets_a_zero_delay_wait_for_the_next_tick_only():
    zero_at_next_tick = [(v.TimerAdd("t", 0), O()), (v.Advance(5), O()), (v.Advance(10), O(None, (v.Run("t"),)))]
    assert judged(Declarations(firing="min_one_tick"), zero_at_next_tick) == []
    assert judged(KAFKA, zero_at_next_tick) == ["on_time"]
    longer = [(v.TimerAdd("t", 30), O()), (v.Advance(30), O())]  # a delay of a tick or more: Kafka's window
    assert judged(Declarations(firing="min_one_tick"), longer) == ["on_time"]


def test_lazy_size_counts_departed_entries_only_until_the_next_advance():
    ran = [(v.TimerAdd("t", 0), O(None, (v.Run("t"),))), (v.Size(), O(1))]
    assert judged(KAFKA, ran) == ["counters"]
    assert judged(Declarations(lazy_size=True), ran) == []
    assert judged(Declarations(lazy_size=True), [*ran, (v.Advance(1), O()), (v.Size(), O(1))]) == ["counters"]
    assert judged(Declarations(lazy_size=True), [*ran, (v.Size(), O(2))]) == ["counters"]


def test_the_delay_domain_is_judged_as_declared():
    # at the clock's start 0 a delay of Long.MAX_VALUE is the last deadline inside Kafka's domain
    assert judged(KAFKA, [(v.TimerAdd("t", v.LONG_MAX), O()), (v.TimerAdd("u", 1 << 62), O())]) == []
    far = [(v.Advance(1), O()), (v.TimerAdd("t", v.LONG_MAX), O(None, (), "delay_out_of_range"))]
    assert judged(KAFKA, far) == []
    far[1] = (v.TimerAdd("t", v.LONG_MAX), O())
    assert judged(KAFKA, far) == ["domain"]  # Kafka wraps; the contract asks for the rejection
    small = Declarations(max_deadline_ms=1000)
    assert judged(small, [(v.TimerAdd("t", 1001), O(None, (), "delay_out_of_range"))]) == []
    assert judged(small, [(v.TimerAdd("t", 1000), O(None, (), "delay_out_of_range"))]) == ["domain"]
    negative = [(v.TimerAdd("t", -1), O(None, (v.Run("t"),)))]
    assert judged(KAFKA, negative) == []
    assert "domain" in judged(Declarations(negative_delays="rejected"), negative)


def test_an_undefined_input_ends_the_judgement():
    undefined = Declarations(max_deadline_ms=1000, beyond_max_deadline="undefined")
    steps = [(v.TimerAdd("t", 5000), O()), (v.Size(), O(7))]
    assert judged(undefined, steps) == []
    assert judged(Declarations(max_deadline_ms=1000), steps) == ["domain", "counters"]


def test_declarations_reject_what_they_do_not_know():
    with pytest.raises(ValueError):
        Declarations(firing="sometimes")
    with pytest.raises(ValueError):
        Declarations(max_deadline_ms=v.LONG_MAX + 1)


# --- set_ready can clear a condition ----------------------------------------------------------------------------

def test_a_cleared_condition_does_not_justify_a_completion():
    cleared = [WATCH, (v.SetReady("o"), O()), (v.SetReady("o", ready=False), O())]
    assert violations("purgatory", [*cleared, (v.Check("k"), O(0))]) == []
    assert violations("purgatory", [*cleared, (v.Check("k"), O(1, (v.Complete("o", "check"),)))]) == ["justified"]
    assert violations("purgatory", [*cleared, (v.Try("o"), O(True, (v.Complete("o", "try"),)))]) == ["justified"]
    # cleared even though ready_on would count it ready
    counted = [(v.Watch("p", ("k",), 10, ready_on=2), O(False)), (v.SetReady("p", ready=False), O())]
    assert violations("purgatory", [*counted, (v.Try("p"), O(True, (v.Complete("p", "try"),)))]) == ["justified"]
    assert violations("purgatory", [*cleared, (v.SetReady("o"), O()), (v.Check("k"), O(0))]) == ["no_lost_wakeup"]
