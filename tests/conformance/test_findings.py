"""Kafka's findings at the edge of the domain: each is recognised from what Kafka's own arithmetic does on the step
(its timer in Java longs, from the state before the step) and from how the system failed, in any language's words;
planted ports of Kafka's wheel (tests/conformance/planted.py) fail at those edges by their own code and are named;
a failure outside the input class, or of another kind, stays a failure; a finding met again costs an init, not a
fresh adapter, and a known hang is not waited for again."""

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from kpurgatory.conformance.adapters.subprocess import AdapterCrashed, AdapterFailed, AdapterTimedOut
from kpurgatory.conformance.adapters.forked import ForkedSystem
from kpurgatory.conformance.check.findings import (CLIMB_LIMIT, FINDINGS, KafkaFailed, KafkaShadow, KafkaTimer,
                                                   climb_period, family, foreseen, recognise)
from kpurgatory.conformance.check.machine import Session, rerun
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # planted.py, which the adapters these tests start import too
import planted  # noqa: E402

LONG_MAX = v.LONG_MAX

#: one run per edge: (params, commands); Kafka's timer does the edge on the last command
EDGES = {
    # the brief's measurement: 2^62 + 999999999999999999 does not wrap, but level 11's interval (10^20 ms) does
    "far-deadline-runs-early": (v.Params(1, 100, 2**62, 1000), [v.TimerAdd("t", 999_999_999_999_999_999)]),
    "deadline-wraps": (v.Params(1, 4, 10, 1000), [v.TimerAdd("t", LONG_MAX)]),
    "interval-divides-by-zero": (v.Params(1, 2, 0, 1000), [v.TimerAdd("t", LONG_MAX)]),
    "negative-bucket-index": (v.Params(1, 3, 0, 1000), [v.TimerAdd("t", 2**62 - 1)]),
    "odd-wheel-recursion": (v.Params(1, 3, 0, 1000), [v.TimerAdd("t", LONG_MAX)]),
    # placed in a bucket whose wrapped expiration is due at once: the advance re-inserts it there forever
    "reinsertion-livelock": (v.Params(3, 6, 0, 1000), [v.TimerAdd("t", 2**62 - 1), v.Advance(0)]),
}


def edge_of(params: v.Params, commands: list[v.Command], profile: str = "timer"):
    """Kafka's edge on the last command, the command and the model's observation of it."""
    model, shadow = Model(profile, params), KafkaShadow()
    for command in commands:
        shadow.before(model, command)
        expected = model.step(command)
        edge = shadow.after(model, command, expected)
    return edge, command, expected


def answer(system, params: v.Params, commands: list[v.Command], profile: str = "timer"):
    """What ``system`` (given a 1 s limit per call) answers to the last command, and how it failed."""
    timed = ForkedSystem(lambda: system, 1.0)
    timed.init(profile, params)
    try:
        for command in commands[:-1]:
            timed.step(command)
        return timed.step(commands[-1]), None
    except Exception as error:
        return None, error
    finally:
        timed.close()


def name(finding) -> str | None:
    return None if finding is None else finding.name


@pytest.mark.parametrize("port", [planted.KafkaLike, planted.ListPort, planted.PythonPort])
@pytest.mark.parametrize("finding", sorted(EDGES))
def test_a_port_of_kafkas_wheel_fails_at_each_edge_as_kafka_does_and_it_is_named(finding, port):
    params, commands = EDGES[finding]
    edge, command, expected = edge_of(params, commands)
    observed, error = answer(port(), params, commands)
    assert name(recognise(edge, command, expected, observed, error)) == finding, (edge, observed, error)


def test_the_far_deadline_runs_about_ten_to_the_eighteen_ms_early_without_any_sum_of_now_and_delay_wrapping():
    params, commands = EDGES["far-deadline-runs-early"]
    assert params.start_ms + commands[0].delay_ms <= LONG_MAX
    edge, _, expected = edge_of(params, commands)
    assert edge.early == {"t"} and not edge.wrapped_deadline and expected == v.Observation()
    kafka = KafkaTimer(params.tick_ms, params.wheel_size, params.start_ms)
    assert not kafka.add("t", params.start_ms + commands[0].delay_ms)  # Kafka: due at once
    assert kafka.levels[10].interval != params.tick_ms * params.wheel_size ** 11  # wrapped


def test_the_livelock_is_judged_from_the_state_before_the_advance():
    """After the advance the model has a plain pending entry: only the state before it (the bucket Kafka placed the
    entry in, due at once) says the flush never ends."""
    params, commands = EDGES["reinsertion-livelock"]
    edge, command, expected = edge_of(params, commands)
    assert edge.failure == "livelock" and expected == v.Observation()
    hang = AdapterTimedOut("no response to request 2 (advance) within 10 s; killed its process group")
    assert name(recognise(edge, command, expected, None, hang)) == "reinsertion-livelock"


@pytest.mark.parametrize("finding, text", [
    ("interval-divides-by-zero", "java.lang.ArithmeticException: / by zero (at TimingWheel.<init>)"),
    ("interval-divides-by-zero", "java.lang.ArithmeticException"),  # a hot JVM's preallocated exception
    ("interval-divides-by-zero", "panic: runtime error: integer divide by zero"),  # Go
    ("interval-divides-by-zero", "thread 'main' panicked at 'attempt to divide by zero'"),  # Rust
    ("negative-bucket-index", "java.lang.ArrayIndexOutOfBoundsException: Index -1 out of bounds for length 3"),
    ("negative-bucket-index", "java.lang.IndexOutOfBoundsException: Index -1 out of bounds for length 3"),
    ("negative-bucket-index", "panic: runtime error: index out of range [-1]"),  # Go
    ("negative-bucket-index", "index out of bounds: the len is 3 but the index is 18446744073709551615"),  # Rust
    ("negative-bucket-index", "RangeError: index -1 is out of range"),  # JavaScript
    ("odd-wheel-recursion", "java.lang.StackOverflowError (at TimingWheel.add)"),
    ("odd-wheel-recursion", "RangeError: Maximum call stack size exceeded"),  # JavaScript: a stack, not an index
    ("odd-wheel-recursion", "RecursionError: maximum recursion depth exceeded"),
    ("odd-wheel-recursion", "java.lang.OutOfMemoryError: Java heap space"),
])
def test_failures_are_judged_by_family_in_any_languages_words(finding, text):
    params, commands = EDGES[finding]
    edge, command, expected = edge_of(params, commands)
    error = AdapterFailed(f"request 1 ({command.name}): {text}")
    assert name(recognise(edge, command, expected, None, error)) == finding


def test_an_endless_climb_may_hang_or_crash_the_system():
    edge, command, expected = edge_of(*EDGES["odd-wheel-recursion"])
    for error in (AdapterTimedOut("no response within 10 s"),
                  AdapterCrashed("exited with code -11 before answering request 1 (timer_add)"),
                  AdapterCrashed("exited with code 134", "thread 'main' has overflowed its stack")):
        assert name(recognise(edge, command, expected, None, error)) == "odd-wheel-recursion"


def kafka_climb(tick: int, size: int, start: int, expiration: int, limit: int) -> tuple[int, str]:
    """TimingWheel.add's climb written out level by level in Java longs, up to ``limit`` levels: how many it
    climbed and how it ended (placed, due, index-out-of-bounds, divide-by-zero, or endless within the limit)."""
    def long(x: int) -> int:
        return (x + 2**63) % 2**64 - 2**63

    def rem(x: int, y: int) -> int:
        return x - y * int(x / y)  # Java's remainder takes the dividend's sign

    current = start - rem(start, tick)
    for climbed in range(limit):
        interval = long(tick * size)
        if expiration < long(current + tick):
            return climbed, "due"
        if expiration < long(current + interval):
            slot = rem(int(expiration / tick), size)
            return climbed, "placed" if 0 <= slot < size else "index-out-of-bounds"
        if interval == 0:
            return climbed, "divide-by-zero"
        current, tick = current - rem(current, interval), interval
    return limit, "endless"


#: climbs that end past 2,000 levels (found by a search over wheel sizes and deadlines near Long.MAX_VALUE):
#: (tick, wheel size, start, deadline, levels climbed, how Kafka's add ends); checked against Kafka 4.4.0's classes:
#: it places the first two (the read-out is then the wrapped-window finding) and overflows its 1 MB stack on the rest
DEEP_CLIMBS = [
    (10, 2735, 0, 9182013008907562500, 2412, "placed"),
    (2, 2871, 515241, 9206545472739540315, 2744, "placed"),
    (3, 3341, 225144, 9207836230606480327, 5997, "placed"),
    (7, 2931, 774467, 9222874617321983347, 9104, "index-out-of-bounds"),
]


@pytest.mark.parametrize("tick, size, start, deadline, levels, ends", DEEP_CLIMBS)
def test_a_climb_that_ends_however_deep_is_followed_to_its_end(tick, size, start, deadline, levels, ends):
    assert kafka_climb(tick, size, start, deadline, 20_000) == (levels, ends)
    kafka = KafkaTimer(tick, size, start)
    if ends == "placed":
        assert kafka.add("t", deadline) and len(kafka.levels) == levels + 1
    else:
        with pytest.raises(KafkaFailed, match=ends):
            kafka.add("t", deadline)
    # a system that does the step answers as the model (no failure to name); one whose stack overflows on the way
    # has Kafka's recursion finding, not a failure, and never a hang where the climb ends
    edge, command, expected = edge_of(v.Params(tick, size, start, 1000), [v.TimerAdd("t", deadline - start)])
    assert edge.deep_climb and edge.failure == (None if ends == "placed" else ends)
    assert name(recognise(edge, command, expected, None, planted.StackOverflowError())) == "odd-wheel-recursion"
    assert foreseen(edge, command, expected, {finding.signature: 1 for finding in FINDINGS}) is None


@settings(max_examples=300, deadline=None)
@given(tick=st.sampled_from([1, 2, 3, 7, 10, 1000]), size=st.integers(2, 4000), start=st.integers(0, 10**6),
       below_long_max=st.integers(1, 2**62))
def test_the_shadow_climbs_as_kafkas_add_does(tick, size, start, below_long_max):
    """Where the climb ends (or that it never does: its ticks repeat first) is what the level-by-level climb says."""
    deadline = LONG_MAX - below_long_max
    levels, ends = kafka_climb(tick, size, start, deadline, CLIMB_LIMIT)
    kafka = KafkaTimer(tick, size, start)
    try:
        outcome = "placed" if kafka.add("t", deadline) else "due"
    except KafkaFailed as failed:
        outcome = failed.kind
    assert outcome == {"endless": "recursion"}.get(ends, ends)


def test_a_climb_is_endless_once_its_ticks_repeat():
    for tick, size in [(1, 3), (10, 2735), (2**40, 5), (3, 2**20 + 1)]:
        period = climb_period(tick, size)
        ticks = [tick]
        for _ in range(min(period, 4096)):
            ticks.append((ticks[-1] * size) % 2**64)
        if period <= 4096:
            assert ticks[period] == tick % 2**64 and tick % 2**64 not in ticks[1:period]
        else:
            assert tick % 2**64 not in ticks[1:]
    assert climb_period(5, 4) == 64  # an even size: the tick is 0 within 64 levels


def test_the_family_is_read_from_the_failure_text_not_from_an_earlier_runs_stderr():
    error = AdapterFailed("request 9 (timer_add): java.lang.IllegalStateException: closed",
                          "request 3: java.lang.ArithmeticException: / by zero")
    assert family(error) is None
    assert family(AdapterFailed("request 1 (timer_add): java.lang.ArithmeticException: long overflow")) is None


def test_a_failure_of_another_family_than_kafkas_on_the_step_is_no_finding():
    edge, command, expected = edge_of(*EDGES["interval-divides-by-zero"])
    for error in (planted.IndexOutOfBoundsException("Index -1 out of bounds for length 2"),
                  AdapterTimedOut("no response within 10 s"), RuntimeError("not implemented")):
        assert recognise(edge, command, expected, None, error) is None
    edge, command, expected = edge_of(*EDGES["reinsertion-livelock"])
    assert recognise(edge, command, expected, None, planted.StackOverflowError()) is None


@pytest.mark.parametrize("params, commands, error", [
    # Kafka's arithmetic is sound here: the same exceptions are the system's own bugs
    (v.Params(1, 2, 0, 1000), [v.TimerAdd("t", 20)], planted.ArithmeticException("/ by zero")),
    (v.Params(1, 3, 0, 1000), [v.TimerAdd("t", 2**40)], planted.StackOverflowError()),
    (v.Params(1, 3, 0, 1000), [v.TimerAdd("t", 2**40)], IndexError("list index out of range")),
    (v.Params(3, 6, 0, 1000), [v.TimerAdd("t", 2**40), v.Advance(9)], AdapterTimedOut("no response")),
    # a cancel and a size never do arithmetic, even with a wrapped wheel
    (v.Params(1, 4, LONG_MAX - 2, 1000), [v.TimerAdd("t", 1), v.TimerCancel("t")], AdapterTimedOut("no response")),
])
def test_outside_the_input_class_kafkas_exceptions_and_hangs_are_failures(params, commands, error):
    edge, command, expected = edge_of(params, commands)
    assert recognise(edge, command, expected, None, error) is None


def test_a_system_that_misbehaves_where_kafkas_arithmetic_is_sound_fails():
    """It divides by zero on far deadlines: where Kafka does too that is Kafka's finding, anywhere else a failure."""
    result = run_check(planted.WrongAtTheEdge, profile="timer", examples=60, steps=20, seed=1, timeout=10)
    assert not result.passed
    assert [found.signature.detail for found in result.failures] == ["ArithmeticException"]
    assert result.failures[0].counterexample.steps[-1].command.delay_ms < v.LONG_MAX // 2
    assert {found.finding.name for found in result.findings} <= {"interval-divides-by-zero"}


def test_a_port_of_kafkas_wheel_passes_a_check_with_its_edges_named(tmp_path):
    result = run_check(planted.PythonPort, profile="timer", examples=200, steps=20, seed=1, timeout=2.0,
                       out_dir=tmp_path)
    assert result.passed and result.failures == (), [found.summary for found in result.failures]
    names = {found.finding.name for found in result.findings}
    assert "deadline-wraps" in names and len(names) >= 3, names  # it fails in Python's words: named all the same


def test_a_finding_met_again_through_an_adapter_costs_an_init_not_a_restart(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    factory, made = planted.counted_adapter("ListPort", 10)
    result = run_check(factory, profile="timer", examples=40, steps=20, seed=3)  # a seed that meets no hang
    assert result.passed and sum(found.repeats for found in result.findings) >= 5, result.findings
    assert len(made) == 1  # every finding answered with a failure: the one adapter was initialised afresh each run


class Recording(planted.KafkaLike):
    sent: list = []

    def step(self, command):
        Recording.sent.append(command)
        return super().step(command)


def test_a_known_hang_is_not_sent_again(monkeypatch):
    monkeypatch.setattr(Recording, "sent", [])
    system = Recording()  # in process: what was sent is counted here
    livelock = next(finding for finding in FINDINGS if finding.name == "reinsertion-livelock")
    session = Session(lambda: system, system, system.hello(), "timer", "exact")
    session.known[livelock.signature] = 0
    params, commands = EDGES["reinsertion-livelock"]
    assert rerun(session, params, commands) is None
    assert Recording.sent == commands[:-1] and session.known[livelock.signature] == 1


def test_every_finding_says_which_releases_have_it():
    for finding in FINDINGS:
        assert finding.releases and finding.ticket and finding.summary
        assert finding.applies_to("0.9.0.0") and finding.applies_to("2.8.2") and finding.applies_to("4.4.0")
        assert finding.releases in str(finding) and finding.ticket in str(finding)
    assert [finding.name for finding in FINDINGS] == [
        "deadline-wraps", "far-deadline-runs-early", "interval-divides-by-zero", "negative-bucket-index",
        "odd-wheel-recursion", "reinsertion-livelock", "wrapped-window-read-out"]
