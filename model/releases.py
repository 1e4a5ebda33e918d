"""Kafka releases: how each release's purgatory and timer differ from the current ones, one rule per change.

Kafka's purgatory has been rewritten in place many times since the hierarchical timing wheel arrived in 0.9.0.0
(KAFKA-1989). Most changes are about locking and are invisible to a single thread; a few change what a sequence of
calls returns. Each change is one `Rule`, named after its KAFKA ticket, with the first release that shipped it (and
the older release lines it was backported to) and a paraphrase of both sides. A `Release` is a version number; it
has a rule when it shipped it. The model asks its release before each rule it states (`model/purgatory.py`), so that
`Model(profile, params, Release.parse("2.6.3"))` behaves as 2.6.3's purgatory did, step by step; the default,
`CURRENT`, has every rule.

The timer's arithmetic is the same in every release (0.9 read a task's expiration from the task, later releases
from its timer entry, which `KAFKA-3470` below covers): its edges at Long.MAX_VALUE are findings, not rules
(`conformance/check/findings.py`).

Where a rule is ``seen``:
  sequential   a single thread's calls return or record something else (the exact level tells the sides apart);
  threads      only interleavings differ, and a race schedule makes the difference show in the answers (what a
               check may call on a completed op, whether a ready op can be left waiting);
  locks        only the locks differ: which a call takes and whether it waits for it. No answer in the protocol's
               vocabulary tells the sides apart (a call returns later, not otherwise); the concurrent check must
               merely not assume either side. Under a controlled scheduler the locks' points show which lock
               which of Kafka's methods takes, and how: a rule with points is told apart by which of them a check
               reaches (`points_shown`);
  commands     the call does not exist before the rule: the release cannot be sent that command.
Each rule but a lock change names the scenario or race schedule that separates its two sides.

The other changes in the history of those files are not rules, because nothing the protocol can send or observe
tells their sides apart: KAFKA-2112 (the overflow wheel's reference made volatile), KAFKA-2226 and KAFKA-2253
(entries moving between buckets, and watch lists, made safe under races that had lost nothing a single run shows),
KAFKA-4051 (the monotonic clock: the model's clock is virtual), KAFKA-6042 (a caller may supply the op's lock; 4.1.0
dropped that again), the reaper's shutdown wake-up (3.2.0), the metrics and thread names, and the ports to Java of
the timer (3.6.0) and of the purgatory (KAFKA-17890, 4.0.0), which kept the behaviour.
"""

from __future__ import annotations

import functools
import re

import attrs


@functools.cache
def version_key(version: str) -> tuple[int, ...]:
    """``"0.10.1.1"`` -> (0, 10, 1, 1); raises ValueError for anything but dot-separated numbers."""
    if not re.fullmatch(r"\d+(\.\d+){1,3}", version):
        raise ValueError(f"not a Kafka release number: {version!r} (expected digits and dots, e.g. 3.7.1)")
    return tuple(int(part) for part in version.split("."))


def release_line(key: tuple[int, ...]) -> tuple[int, ...]:
    """The release line a version belongs to: 0.10.1 for 0.10.1.1 (the 0.x numbering), 3.7 for 3.7.1."""
    return key[:3] if key[0] == 0 else key[:2]


@attrs.frozen
class Rule:
    """One behaviour change of Kafka's purgatory or timer, as shipped."""

    ticket: str
    since: str
    title: str
    before: str
    after: str
    seen: str = attrs.field(validator=attrs.validators.in_(("sequential", "threads", "locks", "commands")))
    #: the scenario (trace id) or race schedule whose answers tell the two sides apart; None for a lock change
    separated_by: str | None = None
    #: releases on older lines that got the change too
    backports: tuple[str, ...] = ()
    #: a lock change a controlled scheduler sees: the switch points (which lock, taken how, in which of Kafka's
    #: methods) a check reaches on one side only — ``point`` after the change, ``point_before`` before it — and the
    #: later rule that took ``point`` away again, if any
    point: str | None = None
    point_before: str | None = None
    point_until: str | None = None

    @property
    def points(self) -> frozenset[str]:
        return frozenset(point for point in (self.point, self.point_before) if point is not None)

    def shipped_in(self, version: str) -> bool:
        key = version_key(version)
        if key >= version_key(self.since):
            return True
        return any(key >= version_key(b) and release_line(key) == release_line(version_key(b))
                   for b in self.backports)


RULES: tuple[Rule, ...] = (
    Rule("KAFKA-1952", "0.9.0.0", "try, watch every key, try again",
         before="tryCompleteElseWatch called tryComplete before watching each key, once per key",
         after="it calls tryComplete once, watches the op on every key, then calls it once more",
         seen="sequential", separated_by="kafka.releases.KAFKA-1952", backports=("0.8.2.1",)),
    Rule("KAFKA-2160", "0.9.0.0", "emptied watch lists leave the watcher map",
         before="a key whose watch list a check or a purge emptied stayed in the map for ever (a leak)",
         after="the emptied list is removed, under the map's lock and only if the key still maps to that list",
         seen="sequential", separated_by="kafka.releases.KAFKA-2160"),
    Rule("KAFKA-3470", "0.10.0.0", "an op's deadline is set when it enters the timer",
         before="a DelayedOperation fixed its expiration (delay + clock) when it was built, so watching it again "
                "kept the first deadline",
         after="the timer entry takes delay + now when the op is added, so a re-watch resets the deadline",
         seen="sequential", separated_by="kafka.releases.KAFKA-3470"),
    Rule("KAFKA-3994", "0.10.2.0", "watch lists are lock-free queues",
         before="a check walked a key's list holding that list's lock, calling tryComplete under it",
         after="lists are lock-free queues; tryComplete runs under the op's lock only",
         seen="locks", backports=("0.10.1.1",), point_before="acquire watch list in tryCompleteWatched"),
    Rule("KAFKA-5059", "0.11.0.0", "cancelForKey",
         before="the purgatory had no call to drop a key's watchers (no cancel_key)",
         after="cancelForKey removes the key's list and cancels each op's timer entry, returning the ops",
         seen="commands", separated_by="kafka.DelayedOperationTest.shouldCancelForKeyReturningCancelledOperations"),
    Rule("KAFKA-5970", "1.0.0", "the op lock is a ReentrantLock, tried without blocking",
         before="tryComplete ran under the op's monitor; a caller waited for it",
         after="checks and the watch's second try take the op lock with tryLock and skip the op when it is held",
         seen="locks", backports=("0.11.0.2",), point="try op in maybeTryComplete", point_until="KAFKA-8334"),
    Rule("KAFKA-6653", "1.1.0", "a skipped try is retried",
         before="a try skipped because another thread held the op lock was lost: an op that became ready while "
                "its lock was held could wait for its timeout",
         after="the skipping thread leaves a pending flag and the lock holder tries again before letting go",
         seen="threads", separated_by="schedule ready_during_held_second_try"),
    Rule("KAFKA-6431", "2.2.0", "512 watcher shards",
         before="one read-write lock guarded the whole watcher map",
         after="keys hash to 512 shards, each with its own lock",
         seen="locks", point="acquire watcher shard in checkAndComplete",
         point_before="read watcher map in checkAndComplete"),
    Rule("KAFKA-8334", "2.7.0", "blocking op lock; the watch loop no longer stops at a completed op",
         before="watching an op already completed stopped at once: no key watched, no second try, no estimate "
                "counted; checks skipped an op whose lock was held",
         after="safeTryCompleteOrElse holds the op lock (blocking) around the first try, the watching of every "
               "key and the second try; the estimate counts every call that gets past the first try",
         seen="sequential", separated_by="kafka.releases.KAFKA-8334"),
    Rule("KAFKA-17848", "4.0.0", "a completed op is not tried again",
         before="safeTryComplete called tryComplete on an op another thread had completed meanwhile (stale_try)",
         after="safeTryComplete returns false for a completed op without calling tryComplete",
         seen="threads", separated_by="schedule locked_completion_during_walk"),
    Rule("KAFKA-18027", "4.0.0", "a completed op is not watched on the remaining keys",
         before="from KAFKA-8334 (2.7.0) on, watching an op already completed still appended it to every key's "
                "list (stale entries at once); before 2.7.0 the loop gave up instead, which reads the same alone",
         after="keys left after the op completed are skipped; the estimate still counts the call",
         seen="sequential", separated_by="kafka.releases.KAFKA-18027"),
    Rule("KAFKA-19312", "4.1.0", "forceComplete takes the op lock",
         before="an expiry or force could complete an op (and run onComplete) while another thread was inside its "
                "tryComplete",
         after="forceComplete completes under the op lock, so onComplete never runs alongside tryComplete",
         seen="locks", point="acquire op in forceComplete"),
)

RULES_BY_TICKET = {rule.ticket: rule for rule in RULES}


def points_shown(rule: Rule, version: str) -> frozenset[str]:
    """The switch points of ``rule`` a controlled check of ``version`` reaches: ``point`` where it shipped the rule
    and not the later one that took the point away, ``point_before`` where it did not ship the rule."""
    until = RULES_BY_TICKET.get(rule.point_until) if rule.point_until else None
    shipped = rule.shipped_in(version)
    after = shipped and not (until is not None and until.shipped_in(version))
    return frozenset(point for point, shown in ((rule.point, after), (rule.point_before, not shipped))
                     if point is not None and shown)


#: the releases the compliance matrix runs: the newest patch of every release line with the hierarchical timing
#: wheel, and the patch releases within a line where a rule arrived (0.10.1.1, 0.11.0.2)
COVERED: tuple[str, ...] = (
    "0.9.0.1", "0.10.0.1", "0.10.1.0", "0.10.1.1", "0.10.2.2", "0.11.0.1", "0.11.0.3", "1.0.2", "1.1.1", "2.0.1",
    "2.1.1", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.3", "2.7.2", "2.8.2", "3.0.2", "3.1.2", "3.2.3", "3.3.2",
    "3.4.1", "3.5.2", "3.6.2", "3.7.2", "3.8.1", "3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0",
)
#: the first release with the hierarchical timing wheel and the estimated-total purge (KAFKA-1989)
FIRST = "0.9.0.0"


@attrs.frozen
class Release:
    """A Kafka release, as the rules it shipped. ``version`` None is current Kafka: every rule."""

    version: str | None = None

    @classmethod
    @functools.cache
    def parse(cls, version: str | None) -> Release:
        if version is None:
            return CURRENT
        if version_key(version) < version_key(FIRST):
            raise ValueError(f"Kafka {version} predates the hierarchical timing wheel ({FIRST}, KAFKA-1989): the "
                             f"model does not describe its purgatory")
        return cls(version)

    def has(self, ticket: str) -> bool:
        rule = RULES_BY_TICKET[ticket]  # a KeyError names a rule that does not exist
        return self.version is None or rule.shipped_in(self.version)

    @property
    def missing_commands(self) -> frozenset[str]:
        """Commands this release has no call for."""
        return frozenset() if self.has("KAFKA-5059") else frozenset({"cancel_key"})

    def differences(self) -> tuple[Rule, ...]:
        """The rules this release lacks: how it differs from current Kafka."""
        return tuple(rule for rule in RULES if not self.has(rule.ticket))

    def __str__(self) -> str:
        return f"Kafka {self.version}" if self.version else "current Kafka"


CURRENT = Release()
