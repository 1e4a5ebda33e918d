"""DelayedHeartbeat and the part of Kafka's (classic) GroupCoordinator that drives it.

Every member of a consumer group has one DelayedHeartbeat pending, keyed by its MemberKey (group id and member id:
purgatory keys are not only partitions), with the session timeout as its delay. A heartbeat — or a join, sync or
offset commit, which prove the member alive just as well — completes the current one and schedules the next
(``complete_and_schedule_next_expiration``): mark the member's heartbeat satisfied, check its key, clear the mark,
watch a new DelayedHeartbeat. If the session timeout passes first, the member is removed and the group rebalances.

A DelayedHeartbeat may also complete when the group is dead (unloaded from this coordinator: nothing left to time
out), when its member is gone, or when the member is awaiting a join or sync response (members taking part in a
rebalance are not expected to heartbeat). It shares its group's lock, as Kafka's does.

Kept from the classic protocol: Empty / PreparingRebalance / CompletingRebalance / Stable / Dead; a join completes
when every member has rejoined (Kafka's DelayedJoin, reduced to that check); the leader's sync moves the group to
Stable and answers the other members. Left out: static membership, pending members, protocol selection and the
initial rebalance delay.
"""

from __future__ import annotations

import enum
import itertools
import threading
from typing import Callable, NamedTuple

import attrs

from kpurgatory.impl.workloads.operation import ActionQueue, BrokerOperation, Errors

#: Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member's first deadline, until its first join completes.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class MemberKey(NamedTuple):
    """A member's purgatory key, labelled ``group-member`` as Kafka's MemberKey."""

    group_id: str
    member_id: str

    def __str__(self) -> str:
        return f"{self.group_id}-{self.member_id}"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@attrs.frozen
class GroupResponse:
    """The answer to a join, sync, heartbeat, offset commit or leave."""

    error: Errors
    member_id: str | None = None
    generation_id: int = -1


ResponseCallback = Callable[[GroupResponse], None]


@attrs.define
class MemberMetadata:
    member_id: str
    session_timeout_ms: int
    is_new: bool = True
    heartbeat_satisfied: bool = False
    awaiting_join_callback: ResponseCallback | None = None
    awaiting_sync_callback: ResponseCallback | None = None

    def has_satisfied_heartbeat(self) -> bool:
        """A new member must heartbeat; an old one awaiting a join or sync response need not."""
        if self.is_new:
            return self.heartbeat_satisfied
        if self.awaiting_join_callback is not None or self.awaiting_sync_callback is not None:
            return True
        return self.heartbeat_satisfied


@attrs.define(eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = attrs.field(factory=dict)
    lock: threading.RLock = attrs.field(factory=threading.RLock)


class DelayedHeartbeat(BrokerOperation):
    __slots__ = ("coordinator", "group", "member_id")

    def __init__(self, op_id: str, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str,
                 timeout_ms: int):
        super().__init__(timeout_ms, op_id, lock=group.lock)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id

    def condition_holds(self) -> bool:
        if self.group.state is GroupState.DEAD:
            return True
        member = self.group.members.get(self.member_id)
        return member is None or member.has_satisfied_heartbeat()

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id)
        super().on_expiration()


class GroupCoordinator:
    """The groups broker ``broker_id`` coordinates, and their heartbeat purgatory. Purgatory work triggered from
    inside the purgatory (a join completing because an expired member left) goes through ``action_queue``."""

    def __init__(self, broker_id: int, heartbeat_purgatory, action_queue: ActionQueue):
        self.broker_id = broker_id
        self.heartbeat_purgatory = heartbeat_purgatory
        self.action_queue = action_queue
        self.groups: dict[str, GroupMetadata] = {}
        self._ids = itertools.count(1)  # member ids and heartbeat names, unique per coordinator (Kafka: UUIDs)

    # --- requests ---------------------------------------------------------------------------------------------

    def handle_join_group(self, group_id: str, member_id: str | None, client_id: str, session_timeout_ms: int,
                          response_callback: ResponseCallback) -> None:
        """Join (``member_id`` None: as a new member). The response waits until every member has joined."""
        group = self.groups.get(group_id)
        if group is None:
            response_callback(GroupResponse(Errors.NOT_COORDINATOR))
            return
        if member_id is None:
            member = MemberMetadata(f"{client_id}-{self.broker_id}.{next(self._ids)}", session_timeout_ms,
                                    awaiting_join_callback=response_callback)
            group.members[member.member_id] = member
            self.complete_and_schedule_next_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        elif member_id in group.members:
            group.members[member_id].awaiting_join_callback = response_callback
        else:
            response_callback(GroupResponse(Errors.UNKNOWN_MEMBER_ID))
            return
        self.maybe_prepare_rebalance(group)
        self.maybe_complete_join(group)

    def handle_sync_group(self, group_id: str, member_id: str, generation_id: int,
                          response_callback: ResponseCallback) -> None:
        """The leader's sync makes the group Stable and answers every member waiting in sync."""
        group, error = self.validate_member(group_id, member_id, generation_id)
        if error is not Errors.NONE:
            response_callback(GroupResponse(error))
        elif group.state is GroupState.PREPARING_REBALANCE:
            response_callback(GroupResponse(Errors.REBALANCE_IN_PROGRESS))
        elif group.state is GroupState.STABLE:
            self.complete_and_schedule_next_heartbeat_expiration(group, group.members[member_id])
            response_callback(GroupResponse(Errors.NONE, member_id, group.generation_id))
        else:
            member = group.members[member_id]
            member.awaiting_sync_callback = response_callback
            self.complete_and_schedule_next_heartbeat_expiration(group, member)
            if member_id == group.leader_id:
                group.state = GroupState.STABLE
                self.propagate_assignment(group, Errors.NONE)

    def handle_heartbeat(self, group_id: str, member_id: str, generation_id: int,
                         response_callback: ResponseCallback) -> None:
        group, error = self.validate_member(group_id, member_id, generation_id)
        if error is Errors.NONE:
            self.complete_and_schedule_next_heartbeat_expiration(group, group.members[member_id])
            if group.state is GroupState.PREPARING_REBALANCE:
                error = Errors.REBALANCE_IN_PROGRESS
        response_callback(GroupResponse(error, member_id, generation_id))

    def handle_offset_commit(self, group_id: str, member_id: str, generation_id: int,
                             response_callback: ResponseCallback) -> None:
        """Offsets are not kept; a commit matters here because it counts as a heartbeat."""
        group, error = self.validate_member(group_id, member_id, generation_id)
        if error is Errors.NONE and group.state is GroupState.COMPLETING_REBALANCE:
            error = Errors.REBALANCE_IN_PROGRESS
        elif error is Errors.NONE:
            self.complete_and_schedule_next_heartbeat_expiration(group, group.members[member_id])
        response_callback(GroupResponse(error, member_id, generation_id))

    def handle_leave_group(self, group_id: str, member_id: str, response_callback: ResponseCallback) -> None:
        group = self.groups.get(group_id)
        if group is None:
            response_callback(GroupResponse(Errors.NOT_COORDINATOR))
        elif member_id not in group.members:
            response_callback(GroupResponse(Errors.UNKNOWN_MEMBER_ID))
        else:
            self.remove_member_and_update_group(group, group.members[member_id])
            self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
            response_callback(GroupResponse(Errors.NONE, member_id))

    def validate_member(self, group_id: str, member_id: str,
                        generation_id: int) -> tuple[GroupMetadata | None, Errors]:
        group = self.groups.get(group_id)
        if group is None:
            return None, Errors.NOT_COORDINATOR
        if member_id not in group.members or group.state is GroupState.EMPTY:
            return group, Errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return group, Errors.ILLEGAL_GENERATION
        return group, Errors.NONE

    # --- heartbeats -------------------------------------------------------------------------------------------

    def complete_and_schedule_next_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self.complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def complete_and_schedule_next_expiration(self, group: GroupMetadata, member: MemberMetadata,
                                              timeout_ms: int) -> None:
        member_key = MemberKey(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(member_key)
        member.heartbeat_satisfied = False
        delayed_heartbeat = DelayedHeartbeat(f"{member.member_id}#{next(self._ids)}", self, group, member.member_id,
                                             timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(delayed_heartbeat, [member_key])

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if group.state is not GroupState.DEAD and member is not None and not member.has_satisfied_heartbeat():
            self.remove_member_and_update_group(group, member)

    # --- rebalancing ------------------------------------------------------------------------------------------

    def remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        del group.members[member.member_id]
        for callback in (member.awaiting_join_callback, member.awaiting_sync_callback):
            if callback is not None:
                callback(GroupResponse(Errors.UNKNOWN_MEMBER_ID))
        self.maybe_prepare_rebalance(group)
        # a join waiting for this member may be complete now; it watches new heartbeats, so not from in here
        self.action_queue.add(lambda: self.maybe_complete_join(group))

    def maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if group.state is GroupState.COMPLETING_REBALANCE:
                self.propagate_assignment(group, Errors.REBALANCE_IN_PROGRESS)
            group.state = GroupState.PREPARING_REBALANCE

    def maybe_complete_join(self, group: GroupMetadata) -> None:
        """Once every member has rejoined: a new generation, every join answered, heartbeats rescheduled."""
        if group.state is not GroupState.PREPARING_REBALANCE or any(
                member.awaiting_join_callback is None for member in group.members.values()):
            return
        group.generation_id += 1
        if not group.members:
            group.state, group.leader_id = GroupState.EMPTY, None
            return
        group.state = GroupState.COMPLETING_REBALANCE
        group.leader_id = next(iter(group.members))
        for member in list(group.members.values()):
            callback, member.awaiting_join_callback = member.awaiting_join_callback, None
            member.is_new = False
            callback(GroupResponse(Errors.NONE, member.member_id, group.generation_id))
            self.complete_and_schedule_next_heartbeat_expiration(group, member)

    def propagate_assignment(self, group: GroupMetadata, error: Errors) -> None:
        """Answer every member waiting in sync and restart its session (an expiry while it waited was ignored)."""
        for member in list(group.members.values()):
            callback, member.awaiting_sync_callback = member.awaiting_sync_callback, None
            if callback is not None:
                callback(GroupResponse(error, member.member_id, group.generation_id))
                if error is Errors.NONE:
                    self.complete_and_schedule_next_heartbeat_expiration(group, member)

    # --- coordinator moves ------------------------------------------------------------------------------------

    def load_group(self, group_id: str, previous: GroupMetadata | None = None) -> None:
        """Become the group's coordinator. ``previous`` is the group as its last coordinator left it (Kafka reads it
        back from the offsets topic): the members of its last generation come back, with fresh sessions."""
        group = GroupMetadata(group_id)
        if previous is not None:
            group.generation_id = previous.generation_id
            for member in previous.members.values():
                if not member.is_new:
                    group.members[member.member_id] = MemberMetadata(member.member_id, member.session_timeout_ms,
                                                                     is_new=False)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.leader_id = next(iter(group.members), None)
        self.groups[group_id] = group
        for member in group.members.values():
            self.complete_and_schedule_next_heartbeat_expiration(group, member)

    def unload_group(self, group_id: str) -> GroupMetadata:
        """Stop coordinating the group: it is dead here, so its pending heartbeats complete through a check of each
        member's key, and members waiting for a join or sync hear NOT_COORDINATOR."""
        group = self.groups.pop(group_id)
        previous_state, group.state = group.state, GroupState.DEAD
        for member in group.members.values():
            for callback in (member.awaiting_join_callback, member.awaiting_sync_callback):
                if callback is not None:
                    callback(GroupResponse(Errors.NOT_COORDINATOR))
            if previous_state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member.member_id))
        return group
