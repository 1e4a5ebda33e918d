"""Comparing an observation with the model's, at the exact level.

Exact means: the same result (or error code) and the same events, where events may be reordered only within one of
the model's groups (the events of one released bucket expiration, the purge, or a whole non-advance command) — the
order of those is Kafka's heap or iteration detail, not semantics. Results that are sets in meaning (shutdown's
pending ids, the entries of one bucket in the wheel read-out) compare sorted. The contract level compares nothing here: it checks model.contract properties instead.
"""

from __future__ import annotations

from collections import Counter

import attrs

from kpurgatory.model import vocabulary as v

LEVELS = ("exact", "contract")


@attrs.frozen
class Difference:
    """What differs between the model's observation (expected) and another (observed)."""

    field: str  # "result", "error" or "events"
    expected: v.Json
    observed: v.Json
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


def normalise_result(command: v.Command, result: v.Json) -> v.Json:
    if isinstance(command, v.Shutdown) and isinstance(result, list):
        return sorted(result)
    if isinstance(command, v.Wheel) and isinstance(result, dict):
        return unordered_buckets(result)
    if isinstance(result, tuple):
        return list(result)
    return result


def unordered_buckets(wheel: dict) -> dict:
    """A bucket's entries run in one group of events, so their order is not semantics either: when buckets of two
    levels fall due at the same time, Kafka's delay queue releases them in heap order, and cascading them fills a
    finer bucket in that order."""
    return {**wheel, "levels": [
        {**level, "buckets": [{**bucket, "entries": sorted(bucket["entries"])} for bucket in level["buckets"]]}
        for level in wheel["levels"]]}


def describe_events(events) -> str:
    if not events:
        return "(none)"
    return ", ".join(f"{e.kind}({', '.join(str(value) for value in attrs.astuple(e))})" for e in events)


def exact_difference(command: v.Command, expected: v.Observation, observed: v.Observation) -> Difference | None:
    """The first difference between the model's ``expected`` observation and ``observed``, or None."""
    if observed == expected:  # the same result, error and events in the same order: nothing to normalise or regroup
        return None
    if expected.error != observed.error:
        return Difference("error", expected.error, observed.error,
                          f"expected error {expected.error!r}, observed {observed.error!r}")
    want, got = normalise_result(command, expected.result), normalise_result(command, observed.result)
    if want != got:
        return Difference("result", want, got, f"expected {want!r}, observed {got!r}")
    if len(expected.events) != len(observed.events):
        return Difference("events", describe_events(expected.events), describe_events(observed.events),
                          f"expected {len(expected.events)} events, observed {len(observed.events)}")
    start = 0
    for group in expected.grouped():
        window = observed.events[start:start + len(group)]
        if Counter(group) != Counter(window):
            return Difference("events", describe_events(group), describe_events(window),
                              f"events {start + 1}..{start + len(group)}: expected {describe_events(group)}, "
                              f"observed {describe_events(window)}")
        start += len(group)
    return None
