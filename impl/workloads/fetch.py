"""DelayedFetch: a fetch waiting for enough new data (Kafka's DelayedFetch).

A fetch asks for at least ``min_bytes`` and waits at most ``max_wait_ms``. For each partition it remembers where
its fetch offset sat in the log when it arrived. It may complete when the bytes that have become available since
then — up to the log end for a follower, up to the high watermark for a consumer, each partition capped at its
``max_bytes`` — add up to ``min_bytes``; and at once when a partition is no longer led here, when the log's end is
now below the fetch offset (it was truncated), or when the fetch offset is on an older segment than the end (the log
rolled: the bytes cannot be counted across segments, so the fetch answers with what it has). On completion it reads
whatever is available, whether it completed or timed out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import attrs

from kpurgatory.impl.workloads.log import FetchIsolation, LogOffsetMetadata, TopicPartition
from kpurgatory.impl.workloads.operation import BrokerOperation, Errors

if TYPE_CHECKING:
    from kpurgatory.impl.workloads.replica_manager import ReplicaManager


@attrs.frozen
class FetchParams:
    """A fetch request's parameters; ``replica_id`` is the fetching follower's broker id, -1 for a consumer."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def isolation(self) -> FetchIsolation:
        return FetchIsolation.LOG_END if self.is_from_follower else FetchIsolation.HIGH_WATERMARK


@attrs.frozen
class PartitionData:
    """One partition of a fetch request."""

    fetch_offset: int
    max_bytes: int = 1024 * 1024


@attrs.frozen
class FetchPartitionStatus:
    start_offset_metadata: LogOffsetMetadata
    fetch_info: PartitionData


@attrs.frozen
class FetchPartitionData:
    """One partition of a fetch response: the bytes read and the offset to fetch from next."""

    error: Errors
    high_watermark: int = -1
    size_in_bytes: int = 0
    next_fetch_offset: int = -1


FetchResponseCallback = Callable[[list[tuple[TopicPartition, FetchPartitionData]]], None]


class DelayedFetch(BrokerOperation):
    __slots__ = ("params", "fetch_partition_status", "replica_manager", "response_callback")

    def __init__(self, op_id: str, params: FetchParams,
                 fetch_partition_status: Sequence[tuple[TopicPartition, FetchPartitionStatus]],
                 replica_manager: ReplicaManager, response_callback: FetchResponseCallback):
        super().__init__(params.max_wait_ms, op_id)
        self.params = params
        self.fetch_partition_status = fetch_partition_status
        self.replica_manager = replica_manager
        self.response_callback = response_callback

    def condition_holds(self) -> bool:
        accumulated_size = 0
        for topic_partition, status in self.fetch_partition_status:
            partition, _ = self.replica_manager.get_partition_or_error(topic_partition)
            if partition is None:  # no longer led here, or unknown: answer at once
                return True
            end_offset = partition.end_offset_metadata(self.params.isolation)
            fetch_offset = status.start_offset_metadata
            if fetch_offset.message_offset > end_offset.message_offset:  # truncated below the fetch offset
                return True
            if fetch_offset.message_offset < end_offset.message_offset:
                if fetch_offset.on_older_segment(end_offset):  # rolled to a newer segment
                    return True
                accumulated_size += min(end_offset.position_diff(fetch_offset), status.fetch_info.max_bytes)
        return accumulated_size >= self.params.min_bytes

    def on_expiration(self) -> None:
        self.replica_manager.record_fetch_expiration(self.params.is_from_follower)
        super().on_expiration()

    def on_complete(self) -> None:
        fetch_infos = [(topic_partition, status.fetch_info) for topic_partition, status in self.fetch_partition_status]
        results = self.replica_manager.read_from_log(self.params, fetch_infos, read_from_purgatory=True)
        self.response_callback([(topic_partition, result.data) for topic_partition, result in results])
        super().on_complete()
