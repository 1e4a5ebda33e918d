"""A broker's produce and fetch handling with Kafka's decision rules (ReplicaManager.appendRecords and
fetchMessages), filling its produce and fetch purgatories.

appendRecords:
  * acks must be -1, 0 or 1; otherwise every partition answers INVALID_REQUIRED_ACKS and nothing is appended.
  * Each partition is appended to (or fails: unknown, not led here, too few in-sync replicas for acks=-1).
  * A DelayedProduce is created only when acks = -1, the request has data, and at least one partition appended;
    otherwise the response goes out at once.
  * Once the request is handled (the action queue), each partition whose high watermark rose is checked in the
    produce and fetch purgatories; a partition whose log end moved alone is checked in the fetch purgatory, where
    followers wait for it.

fetchMessages answers at once when the fetch does not want to wait (max wait <= 0), names no partitions, already has
min bytes, or hit an error; otherwise it becomes a DelayedFetch watched on its partitions. A follower's fetch first
records the follower's position, which may move the high watermark and complete produces waiting for it.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping, Protocol, Sequence

import attrs

from kpurgatory.impl.workloads.fetch import (DelayedFetch, FetchParams, FetchPartitionData, FetchPartitionStatus,
                                             FetchResponseCallback, PartitionData)
from kpurgatory.impl.workloads.log import LeaderHwChange, LogOffsetMetadata, Partition, RecordBatch, TopicPartition
from kpurgatory.impl.workloads.operation import ActionQueue, BrokerOperation, Errors
from kpurgatory.impl.workloads.produce import (DelayedProduce, PartitionResponse, ProducePartitionStatus,
                                               ProduceResponseCallback)


class Purgatory(Protocol):
    """What the broker needs of a purgatory: kpurgatory.impl's, or the simulation's wrapper around it."""

    def try_complete_else_watch(self, op: BrokerOperation, keys: Sequence) -> bool: ...

    def check_and_complete(self, key) -> int: ...


@attrs.frozen
class LogAppendResult:
    error: Errors
    first_offset: int = -1
    last_offset: int = -1
    leader_hw_change: LeaderHwChange = LeaderHwChange.NONE


@attrs.frozen
class LogReadResult:
    data: FetchPartitionData
    fetch_offset_metadata: LogOffsetMetadata | None = None


class ReplicaManager:
    """Broker ``broker_id``'s produce and fetch paths over the cluster's ``partitions`` (shared by all brokers of a
    simulation; a broker serves the ones it leads). ``clock`` gives the time in ms (Kafka's Time)."""

    def __init__(self, broker_id: int, partitions: Mapping[TopicPartition, Partition], produce_purgatory: Purgatory,
                 fetch_purgatory: Purgatory, action_queue: ActionQueue, clock: Callable[[], int]):
        self.broker_id = broker_id
        self.clock = clock
        self.partitions = partitions
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.action_queue = action_queue
        #: Kafka's ExpiresPerSec meters: produce expirations by partition, fetch expirations by fetcher type
        self.produce_expirations: Counter[TopicPartition] = Counter()
        self.fetch_expirations: Counter[str] = Counter()

    def get_partition_or_error(self, topic_partition: TopicPartition) -> tuple[Partition | None, Errors]:
        partition = self.partitions.get(topic_partition)
        if partition is None:
            return None, Errors.UNKNOWN_TOPIC_OR_PARTITION
        if partition.leader_id != self.broker_id:
            return None, Errors.NOT_LEADER_OR_FOLLOWER
        return partition, Errors.NONE

    # --- produce ----------------------------------------------------------------------------------------------

    def append_records(self, timeout_ms: int, required_acks: int, entries_per_partition: dict[TopicPartition,
                       RecordBatch], response_callback: ProduceResponseCallback, op_id: str) -> None:
        if required_acks not in (-1, 0, 1):
            response_callback({topic_partition: PartitionResponse(Errors.INVALID_REQUIRED_ACKS)
                               for topic_partition in entries_per_partition})
            return
        results = {topic_partition: self.append_to_local_log(topic_partition, batch, required_acks)
                   for topic_partition, batch in entries_per_partition.items()}
        produce_status = {topic_partition: ProducePartitionStatus(result.last_offset + 1,
                                                                  PartitionResponse(result.error, result.first_offset))
                          for topic_partition, result in results.items()}
        self.action_queue.add(lambda: self.complete_purgatory_actions(results))
        if self.delayed_produce_request_required(required_acks, entries_per_partition, results):
            delayed_produce = DelayedProduce(timeout_ms, op_id, required_acks, produce_status, self,
                                             response_callback)
            self.produce_purgatory.try_complete_else_watch(delayed_produce, list(entries_per_partition))
        else:
            response_callback({topic_partition: status.response_status
                               for topic_partition, status in produce_status.items()})

    def append_to_local_log(self, topic_partition: TopicPartition, batch: RecordBatch,
                            required_acks: int) -> LogAppendResult:
        partition, error = self.get_partition_or_error(topic_partition)
        if partition is None:
            return LogAppendResult(error)
        base_offset, hw_change = partition.append_records_to_leader(batch, required_acks)
        if base_offset < 0:
            return LogAppendResult(Errors.NOT_ENOUGH_REPLICAS)
        return LogAppendResult(Errors.NONE, base_offset, base_offset + batch.record_count - 1, hw_change)

    @staticmethod
    def delayed_produce_request_required(required_acks: int, entries_per_partition: Mapping,
                                         results: Mapping[TopicPartition, LogAppendResult]) -> bool:
        """Wait for replication only with acks=-1, data to append, and at least one partition appended."""
        failed = sum(result.error is not Errors.NONE for result in results.values())
        return required_acks == -1 and bool(entries_per_partition) and failed < len(entries_per_partition)

    def complete_purgatory_actions(self, results: Mapping[TopicPartition, LogAppendResult]) -> None:
        for topic_partition, result in results.items():
            if result.leader_hw_change is LeaderHwChange.INCREASED:
                self.try_complete_delayed_requests(topic_partition)
            elif result.leader_hw_change is LeaderHwChange.SAME:
                self.fetch_purgatory.check_and_complete(topic_partition)

    def try_complete_delayed_requests(self, topic_partition: TopicPartition) -> None:
        """The high watermark rose: produces may be replicated, consumer fetches may have data."""
        self.produce_purgatory.check_and_complete(topic_partition)
        self.fetch_purgatory.check_and_complete(topic_partition)

    def record_produce_expiration(self, topic_partitions: list[TopicPartition]) -> None:
        self.produce_expirations.update(topic_partitions)

    # --- fetch ------------------------------------------------------------------------------------------------

    def fetch_messages(self, params: FetchParams, fetch_infos: Sequence[tuple[TopicPartition, PartitionData]],
                       response_callback: FetchResponseCallback, op_id: str) -> None:
        log_read_results = self.read_from_log(params, fetch_infos, read_from_purgatory=False)
        bytes_readable = sum(result.data.size_in_bytes for _, result in log_read_results)
        error_reading_data = any(result.data.error is not Errors.NONE for _, result in log_read_results)
        if params.max_wait_ms <= 0 or not fetch_infos or bytes_readable >= params.min_bytes or error_reading_data:
            response_callback([(topic_partition, result.data) for topic_partition, result in log_read_results])
            return
        fetch_partition_status = [
            (topic_partition, FetchPartitionStatus(result.fetch_offset_metadata, fetch_info))
            for (topic_partition, fetch_info), (_, result) in zip(fetch_infos, log_read_results)]
        delayed_fetch = DelayedFetch(op_id, params, fetch_partition_status, self, response_callback)
        self.fetch_purgatory.try_complete_else_watch(delayed_fetch, [tp for tp, _ in fetch_partition_status])

    def read_from_log(self, params: FetchParams, fetch_infos: Sequence[tuple[TopicPartition, PartitionData]], *,
                      read_from_purgatory: bool) -> list[tuple[TopicPartition, LogReadResult]]:
        """Read each partition up to the fetch's isolation bound. A follower's first read (not from the
        purgatory) also records its fetch position and completes what a risen high watermark allows."""
        results = []
        for topic_partition, fetch_info in fetch_infos:
            partition, error = self.get_partition_or_error(topic_partition)
            if partition is None:
                results.append((topic_partition, LogReadResult(FetchPartitionData(error))))
                continue
            if params.is_from_follower and not read_from_purgatory and partition.update_follower_fetch_state(
                    params.replica_id, fetch_info.fetch_offset, self.clock()):
                self.try_complete_delayed_requests(topic_partition)
            end_offset = partition.end_offset_metadata(params.isolation).message_offset
            size, next_offset = partition.log.read(fetch_info.fetch_offset, end_offset, fetch_info.max_bytes)
            data = FetchPartitionData(Errors.NONE, partition.high_watermark, size, next_offset)
            fetch_offset_metadata = partition.log.offset_metadata(fetch_info.fetch_offset)
            results.append((topic_partition, LogReadResult(data, fetch_offset_metadata)))
        return results

    def record_fetch_expiration(self, is_from_follower: bool) -> None:
        self.fetch_expirations["follower" if is_from_follower else "consumer"] += 1

    # --- replica management -----------------------------------------------------------------------------------

    def maybe_shrink_isr(self, replica_lag_time_max_ms: int) -> None:
        now_ms = self.clock()
        for topic_partition, partition in self.partitions.items():
            if partition.leader_id == self.broker_id and partition.maybe_shrink_isr(now_ms, replica_lag_time_max_ms):
                self.try_complete_delayed_requests(topic_partition)
