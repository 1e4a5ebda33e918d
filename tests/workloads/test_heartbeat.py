"""DelayedHeartbeat and the coordinator around it, read through the recorded purgatory calls: each heartbeat, join,
sync or commit completes the pending operation by a check on the member's key and watches the next; a session
timeout removes the member and starts a rebalance; a dead group, a departed member or a member taking part in a
rebalance lets its heartbeat complete."""

import pytest

from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.tools.simulate import StepCollector
from kpurgatory.conformance.traces.codec import Header
from kpurgatory.impl.workloads import Errors, GroupCoordinator, MemberKey, Scheduler, SimulatedPurgatory
from kpurgatory.impl.workloads.heartbeat import GroupResponse, GroupState
from kpurgatory.model import vocabulary as v

SESSION_MS = 10_000


class Coordinator:
    def __init__(self):
        self.scheduler = Scheduler()
        self.steps = StepCollector()
        self.purgatory = SimulatedPurgatory("broker-0.heartbeat", self.scheduler, record=self.steps)
        self.coordinator = GroupCoordinator(0, self.purgatory, self.scheduler.action_queue)
        self.coordinator.load_group("g")
        self.group = self.coordinator.groups["g"]
        self.responses: list = []

    @property
    def generation(self) -> int:
        return self.group.generation_id

    def request(self, handler: str, *args):
        getattr(self.coordinator, f"handle_{handler}")("g", *args, self.responses.append)
        self.scheduler.action_queue.try_complete_actions()
        return self.responses[-1] if self.responses else None

    def join_stable(self, *clients: str) -> list[str]:
        """New members join (each new member starts a rebalance, so the earlier ones join again) and sync;
        returns their member ids."""
        for client in clients:
            self.request("join_group", None, client, SESSION_MS)
        for member_id, member in list(self.group.members.items()):
            if self.group.state is GroupState.PREPARING_REBALANCE and member.awaiting_join_callback is None:
                self.request("join_group", member_id, member_id, SESSION_MS)
        members = list(self.group.members)
        for member_id in members:
            self.request("sync_group", member_id, self.group.generation_id)
        assert self.group.state is GroupState.STABLE
        return members

    def since(self, mark: int) -> list[tuple[v.Command, v.Observation]]:
        return [(command, observation) for command, observation in self.steps.pairs[mark:]
                if not isinstance(command, v.Advance)]

    def advance_to(self, to_ms: int) -> None:
        self.scheduler.run_until(to_ms)


@pytest.fixture
def coordinator():
    return Coordinator()


def test_a_heartbeat_completes_the_pending_one_by_a_check_on_its_member_key_and_watches_the_next(coordinator):
    (member_id,) = coordinator.join_stable("c1")
    key = str(MemberKey("g", member_id))
    assert key == f"g-{member_id}"
    mark = len(coordinator.steps.pairs)
    assert coordinator.request("heartbeat", member_id, coordinator.generation).error is Errors.NONE
    (ready, _), (check, checked), (watch, watched) = coordinator.since(mark)
    assert isinstance(ready, v.SetReady) and check == v.Check(key)
    assert checked.result == 1 and checked.events == (v.Complete(ready.op, "check"),)
    assert watch.keys == (key,) and watch.delay_ms == SESSION_MS and watch.ready_on is None
    assert watched.result is False


@pytest.mark.parametrize("handler", ["offset_commit", "sync_group"])
def test_a_commit_or_sync_counts_as_a_heartbeat(coordinator, handler):
    (member_id,) = coordinator.join_stable("c1")
    mark = len(coordinator.steps.pairs)
    assert coordinator.request(handler, member_id, coordinator.generation).error is Errors.NONE
    assert [type(command) for command, _ in coordinator.since(mark)] == [v.SetReady, v.Check, v.Watch]


def test_a_missed_session_removes_the_member_and_starts_a_rebalance(coordinator):
    first, second = coordinator.join_stable("c1", "c2")
    for time_ms in range(3000, 12_000, 3000):  # only the first member heartbeats
        coordinator.advance_to(time_ms)
        coordinator.request("heartbeat", first, coordinator.generation)
    coordinator.advance_to(SESSION_MS)
    assert second not in coordinator.group.members
    assert coordinator.group.state is GroupState.PREPARING_REBALANCE
    expired = [event.op for command, observation in coordinator.steps.pairs if isinstance(command, v.Advance)
               for event in observation.events if isinstance(event, v.Expire)]
    assert len(expired) == 1 and expired[0].startswith(second)
    assert coordinator.request("heartbeat", first, coordinator.generation).error is Errors.REBALANCE_IN_PROGRESS
    generation = coordinator.generation
    assert coordinator.request("join_group", first, "c1", SESSION_MS).error is Errors.NONE
    assert coordinator.generation == generation + 1 and list(coordinator.group.members) == [first]


def test_members_in_a_rebalance_are_not_expected_to_heartbeat(coordinator):
    first, second = coordinator.join_stable("c1", "c2")
    generation = coordinator.generation
    coordinator.request("join_group", first, "c1", SESSION_MS)  # a rebalance: the first member waits in join
    mark = len(coordinator.steps.pairs)
    coordinator.advance_to(SESSION_MS)  # both sessions run out
    assert list(coordinator.group.members) == [first]  # the second was removed, the first was excused
    # the second's removal completed the join (through the action queue): new generation, heartbeats rescheduled
    assert coordinator.generation == generation + 1
    assert coordinator.group.state is GroupState.COMPLETING_REBALANCE
    assert coordinator.responses[-1] == GroupResponse(Errors.NONE, first, generation + 1)
    assert any(isinstance(command, v.Watch) for command, _ in coordinator.since(mark))
    # while it awaits its sync response, a rescheduled heartbeat completes inside the watch
    mark = len(coordinator.steps.pairs)
    coordinator.request("sync_group", first, generation + 1)
    ready_at_once = [command for command, observation in coordinator.since(mark)
                     if isinstance(command, v.Watch) and command.ready_on == 1]
    assert ready_at_once


def test_a_departed_member_lets_its_heartbeat_complete(coordinator):
    first, _ = coordinator.join_stable("c1", "c2")
    mark = len(coordinator.steps.pairs)
    assert coordinator.request("leave_group", first).error is Errors.NONE
    (ready, _), (check, checked) = coordinator.since(mark)[:2]
    assert check == v.Check(f"g-{first}") and checked.result == 1
    assert coordinator.group.state is GroupState.PREPARING_REBALANCE


def test_a_dead_group_lets_every_heartbeat_complete(coordinator):
    members = coordinator.join_stable("c1", "c2")
    mark = len(coordinator.steps.pairs)
    previous = coordinator.coordinator.unload_group("g")
    assert previous.state is GroupState.DEAD
    checks = [observation.result for command, observation in coordinator.since(mark) if isinstance(command, v.Check)]
    assert checks == [1, 1]
    assert coordinator.purgatory.purgatory.num_delayed() == 0
    assert coordinator.request("heartbeat", members[0], coordinator.generation).error is Errors.NOT_COORDINATOR
    other = GroupCoordinator(1, coordinator.purgatory, coordinator.scheduler.action_queue)
    other.load_group("g", previous)  # the new coordinator brings the members back with fresh sessions
    assert other.groups["g"].state is GroupState.STABLE and list(other.groups["g"].members) == members


def test_requests_from_strangers_and_old_generations_are_refused(coordinator):
    (member_id,) = coordinator.join_stable("c1")
    assert coordinator.request("heartbeat", "nobody", 1).error is Errors.UNKNOWN_MEMBER_ID
    assert coordinator.request("heartbeat", member_id, coordinator.generation - 1).error is Errors.ILLEGAL_GENERATION
    assert coordinator.request("join_group", "nobody", "c9", SESSION_MS).error is Errors.UNKNOWN_MEMBER_ID


def test_heartbeats_share_their_groups_lock(coordinator):
    coordinator.join_stable("c1")
    (op,) = coordinator.purgatory.purgatory.timer.pending()
    assert op.lock is coordinator.group.lock


def test_the_recorded_heartbeat_purgatory_replays_against_the_model(coordinator):
    first, second = coordinator.join_stable("c1", "c2")
    coordinator.request("join_group", first, "c1", SESSION_MS)
    coordinator.advance_to(2 * SESSION_MS)
    coordinator.request("leave_group", first)
    coordinator.purgatory.sample()
    trace = coordinator.steps.trace(Header("heartbeat-rules", "purgatory", coordinator.purgatory.params))
    report = replay(trace)
    assert report.ok, report.first_failure
