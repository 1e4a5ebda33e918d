"""The timing wheel model: placement, refusal, overflow, cascade, timing, lag, and the domain it rejects."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpurgatory.conformance.check.strategies import params as params_strategy
from kpurgatory.conformance.check.strategies import timer_commands
from kpurgatory.model import CommandError, Model, Params
from kpurgatory.model import vocabulary as v
from kpurgatory.model.timer import wheel_invariants


def timer(tick=1, wheel=20, start=0) -> Model:
    return Model("timer", Params(tick, wheel, start))


def runs_of(observation):
    return [event.task for event in observation.events]


def test_current_time_rounds_down_to_the_tick():
    assert timer(tick=10, start=1007).timer.timing_wheel.current_time_ms == 1000


def test_accepted_entry_goes_to_the_bucket_of_its_virtual_id():
    model = timer(tick=10, wheel=5, start=1000)
    model.step(v.TimerAdd("t", 20))  # E = 1020: virtual id 102, slot 2, bucket expiration 1020
    level = model.timer.describe()["levels"][0]
    assert level["buckets"] == [{"slot": 2, "expiration_ms": 1020, "entries": ["t"]}]


def test_entry_within_the_current_tick_runs_on_add():
    model = timer(tick=10, wheel=5, start=1000)
    assert runs_of(model.step(v.TimerAdd("t", 9))) == ["t"]  # E = 1009 < 1000 + 10
    assert runs_of(model.step(v.TimerAdd("u", 10))) == []


def test_a_bucket_is_queued_only_when_its_expiration_changes():
    model = timer()
    model.step(v.TimerAdd("a", 5))
    model.step(v.TimerAdd("b", 5))
    assert len(model.timer.queue.heap) == 1
    model.step(v.Advance(5))
    model.step(v.TimerAdd("c", 19))  # E = 24
    model.step(v.Advance(24))
    model.step(v.TimerAdd("d", 1))  # E = 25: slot 5 again, in a new round of the wheel, so queued anew
    assert [e for e, _, _ in model.timer.queue.heap] == [25]


def test_overflow_wheel_is_created_lazily_from_the_lower_levels_time():
    model = timer(tick=1, wheel=4)
    assert model.timer.timing_wheel.overflow_wheel is None
    model.step(v.TimerAdd("near", 3))
    model.step(v.Advance(3))  # level 1 moves to 3
    model.step(v.TimerAdd("far", 100))
    levels = model.timer.describe()["levels"]
    assert [level["tick_ms"] for level in levels] == [1, 4, 16, 64]
    assert [level["current_ms"] for level in levels] == [3, 0, 0, 0]  # each rounded down to its own tick


def test_seed_example_cascades_at_20_and_fires_exactly():
    model = timer()
    for task, delay in [("a", 8), ("b", 8), ("c", 25), ("d", 30), ("e", 35)]:
        model.step(v.TimerAdd(task, delay))
    fired = {t: runs_of(model.step(v.Advance(t))) for t in range(1, 36)}
    assert {t: tasks for t, tasks in fired.items() if tasks} == {8: ["a", "b"], 25: ["c"], 30: ["d"], 35: ["e"]}


def test_tick_above_one_fires_at_the_start_of_the_tick():
    model = timer(tick=10)
    for delay in (10, 15, 19, 205):
        model.step(v.TimerAdd(f"d{delay}", delay))
    assert runs_of(model.step(v.Advance(9))) == []
    assert sorted(runs_of(model.step(v.Advance(10)))) == ["d10", "d15", "d19"]
    assert runs_of(model.step(v.Advance(199))) == []
    assert runs_of(model.step(v.Advance(200))) == ["d205"]


def test_wheel_lag_defers_a_zero_delay_task_to_the_next_advance():
    model = timer()
    model.step(v.Advance(1000))
    assert model.timer.timing_wheel.current_time_ms == 0  # no bucket released: the wheel did not move
    assert runs_of(model.step(v.TimerAdd("z", 0))) == []
    assert model.step(v.Size()).result == 1
    assert runs_of(model.step(v.Advance(1000))) == ["z"]


def test_cancel_removes_the_entry_at_once_and_readd_resets_the_deadline():
    model = timer()
    model.step(v.TimerAdd("a", 10))
    model.step(v.TimerAdd("b", 10))
    model.step(v.TimerCancel("a"))
    assert model.step(v.Size()).result == 1
    model.step(v.Advance(5))
    model.step(v.TimerAdd("b", 10))  # moved: deadline 15, still one entry
    assert model.step(v.Size()).result == 1
    assert runs_of(model.step(v.Advance(14))) == []
    assert runs_of(model.step(v.Advance(15))) == ["b"]


def test_expiration_beyond_long_max_is_rejected_not_wrapped():
    model = timer(start=1)
    observation = model.step(v.TimerAdd("huge", v.LONG_MAX))
    assert observation.error == "delay_out_of_range" and observation.events == ()
    assert model.step(v.Size()).result == 0


def test_a_level_whose_interval_exceeds_long_max_is_the_top_level():
    model = timer()
    model.step(v.TimerAdd("far", 2 * 10**18))  # needs level 15: 20**15 > Long.MAX_VALUE
    assert len(model.timer.describe()["levels"]) == 15
    assert runs_of(model.step(v.Advance(2 * 10**18 - 1))) == []
    assert runs_of(model.step(v.Advance(2 * 10**18))) == ["far"]


@pytest.mark.parametrize("params, field", [
    (Params(0, 20, 0), "tick_ms"), (Params(1, 1, 0), "wheel_size"), (Params(1, 20, -5), "start_ms"),
])
def test_parameters_outside_the_domain_are_rejected(params, field):
    with pytest.raises(CommandError, match=field):
        Model("timer", params)


def test_the_clock_does_not_go_backwards():
    model = timer()
    model.step(v.Advance(10))
    with pytest.raises(CommandError, match="to_ms"):
        model.step(v.Advance(9))


def test_wrong_profile_and_commands_after_shutdown_are_rejected():
    model = timer()
    with pytest.raises(CommandError, match="not a command of the timer profile"):
        model.step(v.Watched())
    model.step(v.Shutdown())
    with pytest.raises(CommandError, match="shutdown"):
        model.step(v.Size())


@settings(max_examples=300)
@given(st.data())
def test_nothing_fires_early_nothing_late_nothing_lost(data):
    """Every scheduling runs exactly once, in the first advance that reaches the start of its tick (or on add when
    that start has passed), unless cancelled or replaced first; the wheel's invariants hold after every step."""
    p = data.draw(params_strategy("timer"))
    model = Model("timer", p)
    due: dict[str, int] = {}  # task -> start of the tick of its current expiration
    for command in data.draw(timer_commands(p)):
        observation = model.step(command)
        assert wheel_invariants(model.timer) == []
        if isinstance(command, v.TimerAdd):
            expiration = model.now_ms + command.delay_ms
            assert (observation.error == "delay_out_of_range") == (expiration > v.LONG_MAX)
            if observation.error is None:
                due[command.task] = expiration - expiration % p.tick_ms
        elif isinstance(command, v.TimerCancel):
            due.pop(command.task, None)
        for task in runs_of(observation):
            assert due.pop(task) <= model.now_ms, f"{task} fired early"
        if isinstance(command, v.Advance):
            assert all(start > model.now_ms for start in due.values()), "a due task did not fire"
        if isinstance(command, v.Shutdown):
            assert sorted(observation.result) == sorted(due)
