"""The simulated broker's clients: producers, follower fetchers, consumers and consumer-group members.

Each sends requests over a network that takes ``network_delay_ms`` each way and reacts to the responses; together
they are where the purgatories' traffic comes from. A client keeps at most one request in flight per broker.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Sequence

from kpurgatory.impl.workloads.accumulator import ProducerBatch, RecordAccumulator
from kpurgatory.impl.workloads.fetch import FetchParams, FetchPartitionData, PartitionData
from kpurgatory.impl.workloads.heartbeat import GroupResponse
from kpurgatory.impl.workloads.log import TopicPartition
from kpurgatory.impl.workloads.operation import Errors
from kpurgatory.impl.workloads.produce import PartitionResponse

if TYPE_CHECKING:
    from kpurgatory.impl.workloads.simulator import Simulation


class Producer:
    """Records arrive at ``records_per_s`` (exponential gaps, sizes uniform in [record_bytes/2, 3*record_bytes/2]),
    go to one partition until ``batch_size`` bytes went there (Kafka's sticky partitioner), and leave through a
    RecordAccumulator. Failed batches are retried; acks=0 requests get no response."""

    def __init__(self, simulation: Simulation, client_id: str, acks: int):
        self.simulation = simulation
        self.client_id = client_id
        self.acks = acks
        config = simulation.config
        self.accumulator = RecordAccumulator(config.batch_size, config.linger_ms, config.retry_backoff_ms)
        self.in_flight: set[int] = set()
        self._correlation_ids = itertools.count(1)
        self._sticky_partition = simulation.random.choice(simulation.topic_partitions)
        self._sticky_bytes = 0
        self._wakeup_ms: int | None = None
        self._next_record_ms = 0.0  # arrivals in continuous time, each handled in the millisecond it falls in

    def start(self) -> None:
        self._schedule_next_record()

    def _schedule_next_record(self) -> None:
        self._next_record_ms += self.simulation.random.expovariate(self.simulation.config.records_per_s / 1000)
        self.simulation.scheduler.at(int(self._next_record_ms), self.on_record)

    def on_record(self) -> None:
        simulation, config = self.simulation, self.simulation.config
        size = simulation.random.randint(config.record_bytes // 2, config.record_bytes * 3 // 2)
        if self._sticky_bytes >= config.batch_size:
            self._sticky_partition, self._sticky_bytes = simulation.random.choice(simulation.topic_partitions), 0
        self._sticky_bytes += size
        if self.accumulator.append(self._sticky_partition, size, simulation.scheduler.now_ms):
            self.run_sender()
        self._schedule_next_record()

    def run_sender(self) -> None:
        """The Sender's loop: send what is ready, and wake up when the next batch will be."""
        now = self.simulation.scheduler.now_ms
        leader_of = self.simulation.leader_of
        ready_nodes, next_ready_check_ms = self.accumulator.ready(now, leader_of, self.in_flight)
        for node, batches in self.accumulator.drain(leader_of, ready_nodes, now).items():
            self.send(node, batches)
        if next_ready_check_ms is not None:
            wakeup = now + next_ready_check_ms
            if self._wakeup_ms is None or wakeup < self._wakeup_ms:
                self._wakeup_ms = wakeup
                self.simulation.scheduler.at(wakeup, self._wake_up, wakeup)

    def _wake_up(self, wakeup: int) -> None:
        if self._wakeup_ms == wakeup:
            self._wakeup_ms = None
            self.run_sender()

    def send(self, node: int, batches: list[ProducerBatch]) -> None:
        simulation = self.simulation
        op_id = f"{self.client_id}:{next(self._correlation_ids)}"
        entries = {batch.topic_partition: batch.records() for batch in batches}
        sent_ms = simulation.scheduler.now_ms

        def respond(responses: dict[TopicPartition, PartitionResponse]) -> None:
            if self.acks != 0:
                simulation.network(self.on_response, node, batches, responses, sent_ms)

        if self.acks != 0:
            self.in_flight.add(node)
        replica_manager = simulation.brokers[node].replica_manager
        simulation.network(replica_manager.append_records, simulation.config.produce_timeout_ms, self.acks, entries,
                           respond, op_id)

    def on_response(self, node: int, batches: list[ProducerBatch], responses: dict[TopicPartition, PartitionResponse],
                    sent_ms: int) -> None:
        now = self.simulation.scheduler.now_ms
        self.in_flight.discard(node)
        if self.acks == -1:
            self.simulation.produce_request_latencies_ms.append(now - sent_ms)
        for batch in reversed(batches):  # re-enqueued at the front: keep the original order
            if responses[batch.topic_partition].error is not Errors.NONE:
                self.accumulator.reenqueue(batch, now)
        self.run_sender()


class ReplicaFetcher:
    """Follower broker ``follower_id`` replicating ``partitions`` from their leader ``leader_id``: fetch from its
    log end, append what comes back, fetch again. The leader learns the follower's position from each fetch, which
    is what moves the high watermark. The follower's own processing takes ``follower_lag_ms`` on average, and all of
    a slow episode's length (``Broker.stalled_until_ms``)."""

    def __init__(self, simulation: Simulation, follower_id: int, leader_id: int, partitions: Sequence[TopicPartition]):
        self.simulation = simulation
        self.follower_id = follower_id
        self.leader_id = leader_id
        self.fetch_offsets = {topic_partition: 0 for topic_partition in partitions}
        self._correlation_ids = itertools.count(1)

    def start(self) -> None:
        self.send_fetch()

    def send_fetch(self) -> None:
        simulation, config = self.simulation, self.simulation.config
        params = FetchParams(self.follower_id, config.replica_fetch_wait_max_ms, config.replica_fetch_min_bytes)
        fetch_infos = [(tp, PartitionData(offset)) for tp, offset in self.fetch_offsets.items()]
        op_id = f"r{self.follower_id}:{next(self._correlation_ids)}"
        replica_manager = simulation.brokers[self.leader_id].replica_manager
        simulation.network(replica_manager.fetch_messages, params, fetch_infos, self.on_response_sent, op_id)

    def on_response_sent(self, results: list[tuple[TopicPartition, FetchPartitionData]]) -> None:
        lag_ms = round(self.simulation.random.expovariate(1 / self.simulation.config.follower_lag_ms))
        self.simulation.network(self.process_response, results, extra_delay_ms=lag_ms)

    def process_response(self, results: list[tuple[TopicPartition, FetchPartitionData]]) -> None:
        stalled_until_ms = self.simulation.brokers[self.follower_id].stalled_until_ms
        if stalled_until_ms > self.simulation.scheduler.now_ms:
            self.simulation.scheduler.at(stalled_until_ms, self.process_response, results)
            return
        for topic_partition, data in results:
            if data.error is Errors.NONE:
                self.fetch_offsets[topic_partition] = max(self.fetch_offsets[topic_partition], data.next_fetch_offset)
        self.send_fetch()


class Consumer:
    """Fetches its partitions from their leaders with its own ``min_bytes``, one fetch per leader at a time, and
    fetches again ``poll_ms`` after each response (the time its application takes with the records)."""

    def __init__(self, simulation: Simulation, client_id: str, partitions: Sequence[TopicPartition], min_bytes: int):
        self.simulation = simulation
        self.client_id = client_id
        self.min_bytes = min_bytes
        self.positions = {topic_partition: 0 for topic_partition in partitions}
        self._correlation_ids = itertools.count(1)

    def start(self) -> None:
        for leader in sorted({self.simulation.leader_of(tp) for tp in self.positions}):
            self.send_fetch(leader)

    def send_fetch(self, leader: int) -> None:
        simulation, config = self.simulation, self.simulation.config
        params = FetchParams(-1, config.fetch_max_wait_ms, self.min_bytes)
        fetch_infos = [(tp, PartitionData(offset)) for tp, offset in self.positions.items()
                       if simulation.leader_of(tp) == leader]
        op_id = f"{self.client_id}:{next(self._correlation_ids)}"
        simulation.network(simulation.brokers[leader].replica_manager.fetch_messages, params, fetch_infos,
                           lambda results: simulation.network(self.on_response, leader, results), op_id)

    def on_response(self, leader: int, results: list[tuple[TopicPartition, FetchPartitionData]]) -> None:
        for topic_partition, data in results:
            if data.error is Errors.NONE:
                self.positions[topic_partition] = max(self.positions[topic_partition], data.next_fetch_offset)
        self.simulation.scheduler.after(self.simulation.config.poll_ms, self.send_fetch, leader)


class GroupMember:
    """A consumer-group member: join, sync, then a heartbeat every ``heartbeat_interval_ms`` and an offset commit
    every ``commit_interval_ms``; rejoin when told the group rebalances or that it is no longer a member. It
    misbehaves now and then: a heartbeat is lost (``missed_heartbeat_probability``), the process pauses for longer
    than the session timeout (``member_pause_probability``: it is expired and removed), or it leaves and joins again
    as a new member (``member_leave_probability``)."""

    def __init__(self, simulation: Simulation, client_id: str, group_id: str):
        self.simulation = simulation
        self.client_id = client_id
        self.group_id = group_id
        self.member_id: str | None = None
        self.generation_id = -1
        #: bumped whenever the member starts over, so timers set before are ignored
        self._epoch = 0

    def _coordinator(self):
        return self.simulation.brokers[self.simulation.coordinator_of[self.group_id]].group_coordinator

    def _send(self, handler_name: str, *args) -> None:
        """Send a request to the group's coordinator; the response comes back to ``on_<handler>``."""
        epoch, simulation = self._epoch, self.simulation

        def on_response(response: GroupResponse) -> None:
            simulation.network(self._on_response, handler_name, epoch, response)

        simulation.network(getattr(self._coordinator(), handler_name), *args, on_response)

    def _on_response(self, handler_name: str, epoch: int, response: GroupResponse) -> None:
        if epoch == self._epoch:
            getattr(self, f"on_{handler_name.removeprefix('handle_')}")(response)

    def _restart(self) -> None:
        self._epoch += 1

    def join(self) -> None:
        self._restart()
        self._send("handle_join_group", self.group_id, self.member_id, self.client_id,
                   self.simulation.config.session_timeout_ms)

    def on_join_group(self, response: GroupResponse) -> None:
        if response.error is Errors.NONE:
            self.member_id, self.generation_id = response.member_id, response.generation_id
            self._send("handle_sync_group", self.group_id, self.member_id, self.generation_id)
        else:
            self._rejoin(response.error)

    def on_sync_group(self, response: GroupResponse) -> None:
        if response.error is Errors.NONE:
            self._resume(self._epoch)
        else:
            self._rejoin(response.error)

    def _resume(self, epoch: int) -> None:
        """Start (or, after a pause, restart) the heartbeat and commit loops."""
        if epoch == self._epoch:
            scheduler, config = self.simulation.scheduler, self.simulation.config
            scheduler.after(config.heartbeat_interval_ms, self.heartbeat, epoch)
            scheduler.after(config.commit_interval_ms, self.commit, epoch)

    def _rejoin(self, error: Errors) -> None:
        if error is Errors.UNKNOWN_MEMBER_ID:
            self.member_id = None
        self.simulation.scheduler.after(self.simulation.config.retry_backoff_ms, self.join)
        self._restart()

    def heartbeat(self, epoch: int) -> None:
        if epoch != self._epoch:
            return
        simulation, config = self.simulation, self.simulation.config
        draw = simulation.random.random()
        if draw < config.member_leave_probability:
            self._send("handle_leave_group", self.group_id, self.member_id)
            self.member_id = None
            simulation.scheduler.after(config.session_timeout_ms // 2, self.join)
            self._restart()
            return
        draw -= config.member_leave_probability
        if draw < config.member_pause_probability:
            self._restart()
            simulation.scheduler.after(config.session_timeout_ms * 3 // 2, self._resume, self._epoch)
            return
        draw -= config.member_pause_probability
        if draw >= config.missed_heartbeat_probability:
            self._send("handle_heartbeat", self.group_id, self.member_id, self.generation_id)
        simulation.scheduler.after(config.heartbeat_interval_ms, self.heartbeat, epoch)

    def on_heartbeat(self, response: GroupResponse) -> None:
        if response.error not in (Errors.NONE, Errors.NOT_COORDINATOR):  # the next heartbeat finds the new one
            self._rejoin(response.error)

    def commit(self, epoch: int) -> None:
        if epoch == self._epoch:
            self._send("handle_offset_commit", self.group_id, self.member_id, self.generation_id)
            self.simulation.scheduler.after(self.simulation.config.commit_interval_ms, self.commit, epoch)

    def on_offset_commit(self, response: GroupResponse) -> None:
        self.on_heartbeat(response)
