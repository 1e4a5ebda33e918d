"""A broker 0 for rule tests: partitions ``t-<n>`` with given replicas, a ReplicaManager over two kpurgatory.impl
purgatories on virtual timers, and a clock the test moves."""

from __future__ import annotations

import pytest

from kpurgatory.impl import DelayedOperationPurgatory, SystemTimer
from kpurgatory.impl.workloads import (ActionQueue, FetchParams, Partition, PartitionData, RecordBatch,
                                       ReplicaManager, TopicPartition)


def tp(index: int) -> TopicPartition:
    return TopicPartition("t", index)


class Broker:
    def __init__(self, replicas: dict[int, tuple[int, ...]], min_insync_replicas: int = 1,
                 segment_bytes: int = 1 << 20):
        self.now_ms = 0
        self.partitions = {tp(index): Partition(tp(index), replicas[index], segment_bytes, min_insync_replicas)
                           for index in replicas}
        self.produce = DelayedOperationPurgatory("produce", timer=SystemTimer.virtual())
        self.fetch = DelayedOperationPurgatory("fetch", timer=SystemTimer.virtual())
        self.actions = ActionQueue()
        self.replica_manager = ReplicaManager(0, self.partitions, self.produce, self.fetch, self.actions,
                                              lambda: self.now_ms)
        self.responses: list = []

    def produce_request(self, acks: int, entries: dict[int, RecordBatch], timeout_ms: int = 1000) -> None:
        """A produce request, handled to the end (its purgatory actions included)."""
        self.replica_manager.append_records(timeout_ms, acks, {tp(index): batch for index, batch in entries.items()},
                                            self.responses.append, f"p:{len(self.responses)}")
        self.actions.try_complete_actions()

    def follower_fetch(self, follower: int, index: int, fetch_offset: int) -> list:
        """Follower ``follower`` fetches t-<index> from ``fetch_offset``: the leader learns its position (which may
        move the high watermark and complete produces). Returns the response, or [] while it waits."""
        response: list = []
        self.replica_manager.fetch_messages(FetchParams(follower, 500, 1), [(tp(index), PartitionData(fetch_offset))],
                                            response.extend, f"r{follower}:{fetch_offset}")
        return response

    def advance_to(self, to_ms: int) -> None:
        self.now_ms = to_ms
        self.produce.advance_to(to_ms)
        self.fetch.advance_to(to_ms)


@pytest.fixture
def make_broker():
    return Broker
