"""A producer's RecordAccumulator: records are batched per partition and sent per broker (Kafka's producer
internals, reduced to what shapes the produce purgatory's traffic).

* ``append`` adds a record to the partition's last batch, or opens a new batch when it does not fit.
* ``ready`` finds the brokers worth sending to: a partition's first batch is sendable once it is full (or has a
  batch behind it) or has waited ``linger_ms``; a retried batch waits ``retry_backoff_ms`` instead. Brokers with a
  request in flight are skipped (max.in.flight.requests.per.connection = 1). It also says how long until the next
  batch becomes sendable.
* ``drain`` takes, for each ready broker, the first batch of each of its partitions, round-robin from where the last
  drain stopped, up to ``max_request_size``: one produce request per broker.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

import attrs

from kpurgatory.impl.workloads.log import RecordBatch, TopicPartition


@attrs.define(eq=False)
class ProducerBatch:
    topic_partition: TopicPartition
    created_ms: int
    record_count: int = 0
    size_in_bytes: int = 0
    attempts: int = 0
    last_attempt_ms: int = attrs.field(default=attrs.Factory(lambda self: self.created_ms, takes_self=True))

    def records(self) -> RecordBatch:
        return RecordBatch(self.record_count, self.size_in_bytes)


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int, retry_backoff_ms: int, max_request_size: int = 1 << 20):
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_request_size = max_request_size
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._drain_index: dict[int, int] = {}

    def append(self, topic_partition: TopicPartition, size_in_bytes: int, now_ms: int) -> bool:
        """Add one record; returns whether the sender should wake up: a new batch was opened (so the one before it,
        if any, is complete) or the batch is now full."""
        queue = self.batches.setdefault(topic_partition, deque())
        batch = queue[-1] if queue else None
        opened = batch is None or batch.attempts > 0 or \
            (batch.record_count and batch.size_in_bytes + size_in_bytes > self.batch_size)
        if opened:
            batch = ProducerBatch(topic_partition, now_ms)
            queue.append(batch)
        batch.record_count += 1
        batch.size_in_bytes += size_in_bytes
        return opened or batch.size_in_bytes >= self.batch_size

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """A failed batch goes back to the front of its partition's queue, to be retried after the backoff."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        self.batches.setdefault(batch.topic_partition, deque()).appendleft(batch)

    def ready(self, now_ms: int, leader_of: Callable[[TopicPartition], int],
              muted: Iterable[int]) -> tuple[set[int], int | None]:
        """The brokers with a sendable batch, and the ms until the next batch may become sendable (None: no
        batch waits)."""
        ready_nodes: set[int] = set()
        next_ready_check_ms = None
        for topic_partition, queue in self.batches.items():
            if not queue:
                continue
            leader = leader_of(topic_partition)
            if leader in muted or leader in ready_nodes:
                continue
            batch = queue[0]
            waited_ms = now_ms - batch.last_attempt_ms
            backing_off = batch.attempts > 0 and waited_ms < self.retry_backoff_ms
            time_to_wait_ms = self.retry_backoff_ms if batch.attempts > 0 else self.linger_ms
            full = len(queue) > 1 or batch.size_in_bytes >= self.batch_size
            if (full or waited_ms >= time_to_wait_ms) and not backing_off:
                ready_nodes.add(leader)
            else:
                time_left_ms = max(time_to_wait_ms - waited_ms, 0)
                next_ready_check_ms = time_left_ms if next_ready_check_ms is None else \
                    min(next_ready_check_ms, time_left_ms)
        return ready_nodes, next_ready_check_ms

    def drain(self, leader_of: Callable[[TopicPartition], int], nodes: Iterable[int],
              now_ms: int) -> dict[int, list[ProducerBatch]]:
        drained: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            partitions = [tp for tp, queue in self.batches.items() if queue and leader_of(tp) == node]
            start = self._drain_index.get(node, 0)
            batches, size = [], 0
            for index in range(len(partitions)):
                topic_partition = partitions[(start + index) % len(partitions)]
                queue = self.batches[topic_partition]
                batch = queue[0]
                if batch.attempts > 0 and now_ms - batch.last_attempt_ms < self.retry_backoff_ms:
                    continue
                if batches and size + batch.size_in_bytes > self.max_request_size:
                    break
                batches.append(queue.popleft())
                size += batch.size_in_bytes
            self._drain_index[node] = start + 1
            if batches:
                drained[node] = batches
        return drained
