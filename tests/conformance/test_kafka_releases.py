"""Published Apache Kafka releases through the adapter (``--kafka VERSION``): one release of each API era, resolved
from Maven Central by mvn, the adapter compiled for its era and driven through the protocol. Needs mvn, a JDK and
Maven Central (or a local Maven repository that already holds the jars); the resolved classpaths and compiled
adapters are cached ($KPURGATORY_CACHE), so a second run is offline and quick."""

import json
import shlex
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters import kafka
from kpurgatory.conformance.cli import main

needs_tools = pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("javac") is None,
                                 reason="resolving and compiling a Kafka release needs Maven (mvn) and a JDK (javac)")

#: one release per era, with the jar its purgatory comes from
ERAS = {"4.4.0": ("java-purgatory", "kafka-server-common"),
        "3.9.2": ("scala-purgatory-java-timer", "kafka_2.13"),
        "2.8.2": ("scala-purgatory-scala-timer", "kafka_2.13"),
        "0.10.2.2": ("scala-purgatory-scala-timer", "kafka_2.12"),
        "0.9.0.1": ("scala-purgatory-0.9", "kafka_2.11")}
#: Kafka's own unit tests, re-expressed, and the seed runs: every release passes them
UNIT_TESTS = ("kafka.DelayedOperationTest.testRequestSatisfaction", "kafka.DelayedOperationTest.testRequestExpiry",
              "kafka.DelayedOperationTest.testRequestPurge",
              "kafka.DelayedOperationTest.shouldCancelForKeyReturningCancelledOperations",
              "kafka.DelayedOperationTest.testSafeTryCompleteOrElse", "kafka.TimerTest.testAlreadyExpiredTask",
              "kafka.TimerTest.testTaskExpiration", "kafka.TimingWheelTest.testAdvanceClock",
              "kafka.TimingWheelTest.testOverflowWheel", "seed.delayed-fetch", "seed.delayed-produce", "seed.cascade")
INIT = {"profile": "purgatory", "params": {"tick_ms": 1, "wheel_size": 20, "start_ms": 0, "purge_interval": 1000}}


def test_a_rerun_line_names_the_release_rather_than_its_classpath(tmp_path, monkeypatch):
    from kpurgatory.conformance.check.sequential import target_flags
    monkeypatch.setenv("KPURGATORY_CACHE", str(tmp_path))
    remembered = kafka.classpath_file("4.4.0")
    remembered.parent.mkdir(parents=True)
    remembered.write_text("/m2/a.jar\n")
    command = shlex.join([*kafka.RUN_ADAPTER, "--era", "java-purgatory", "--kafka-version", "4.4.0", "/m2/a.jar"])
    assert kafka.release_of(command) == "4.4.0"
    assert target_flags(None, command, "contract") == "--kafka 4.4.0 --level contract"
    assert kafka.release_of(shlex.join([*kafka.RUN_ADAPTER, "/m2/a.jar"])) is None
    assert target_flags(None, "node adapter.js", "exact") == "--adapter 'node adapter.js'"
    # a build of one's own that declares the release is run again by its own command, not the published jars
    own = shlex.join([*kafka.RUN_ADAPTER, "--era", "java-purgatory", "--kafka-version", "4.4.0", "/edit:/m2/a.jar"])
    assert kafka.release_of(own) is None and target_flags(None, own, "exact") == f"--adapter {shlex.quote(own)}"


def test_a_version_that_is_no_covered_release_is_a_usage_error():
    for version in ("9.9.9", "abc", "2.8.9", "", "0.8.2.2"):  # 0.8 has no hierarchical timing wheel
        with pytest.raises(kafka.KafkaReleaseError, match="is not a Kafka release") as raised:
            kafka.resolve(version)
        assert raised.value.exit_code == 2
    result = CliRunner().invoke(main, ["scenarios", "--kafka", "9.9.9"])
    assert result.exit_code == 2 and "'9.9.9' is not a Kafka release" in result.output


def test_kafka_and_an_adapter_together_are_a_usage_error():
    result = CliRunner().invoke(main, ["check", "--kafka", "4.4.0", "--adapter", "cat"])
    assert result.exit_code == 2 and "not two of them" in result.output


def test_without_maven_a_release_cannot_be_resolved(monkeypatch, tmp_path):
    monkeypatch.setenv("KPURGATORY_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(kafka.KafkaReleaseError, match=r"Maven \(mvn\) is not installed") as raised:
        kafka.resolve("3.9.2")
    assert raised.value.exit_code == 3


@needs_tools
def test_a_release_maven_cannot_find_is_a_tool_failure(monkeypatch, tmp_path):
    monkeypatch.setenv("KPURGATORY_CACHE", str(tmp_path))
    monkeypatch.setattr(kafka, "RELEASES", (*kafka.RELEASES, "3.9.99"))
    with pytest.raises(kafka.KafkaReleaseError, match="Maven could not resolve Kafka 3.9.99") as raised:
        kafka.resolve("3.9.99")
    assert raised.value.exit_code == 3


@pytest.fixture(scope="module", params=list(ERAS))
def release(request) -> tuple[str, str]:
    """(version, adapter command): resolved and compiled once per session (cached beyond it)."""
    if shutil.which("mvn") is None or shutil.which("javac") is None:
        pytest.skip("resolving and compiling a Kafka release needs Maven (mvn) and a JDK (javac)")
    return request.param, kafka.adapter_command(request.param)


def has_cancel_for_key(version: str) -> bool:
    return kafka.version_key(version) >= (0, 11)


class Adapter:
    """The adapter in a process of its own, one request at a time."""

    def __init__(self, command: str):
        self.process = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.seq = 0

    def __call__(self, cmd: str, **args) -> dict:
        self.seq += 1
        self.process.stdin.write(json.dumps({"seq": self.seq, "cmd": cmd, "args": args}) + "\n")
        self.process.stdin.flush()
        response = json.loads(self.process.stdout.readline())
        assert response["seq"] == self.seq
        return response

    def close(self) -> int:
        self.process.stdin.close()
        return self.process.wait(10)


def test_a_release_resolves_to_its_era_and_is_cached(release):
    version, command = release
    resolved = kafka.resolve(version)
    assert resolved.era == ERAS[version][0]
    assert f"--era {resolved.era}" in command and f"--kafka-version {version}" in command
    jars = resolved.classpath.split(":")
    assert any(jar.endswith(f"{ERAS[version][1]}-{version}.jar") for jar in jars)
    assert kafka.classpath_file(version).read_text().strip() == resolved.classpath


def test_hello_names_and_declares_the_release(release):
    version, command = release
    adapter = Adapter(command)
    hello = adapter("hello", protocol_version=1)["result"]
    assert adapter.close() == 0
    assert hello["implementation"] == f"Apache Kafka {version} ({ERAS[version][1]})"
    shards = ({"count": 512, "hash": "java-string-hashcode"} if kafka.version_key(version) >= (2, 2) else
              {"count": 1, "hash": "none"})  # KAFKA-6431: 512 watch lists, by the key's hashCode
    assert hello["declarations"] == {"kafka_version": version, "watcher_shards": shards}
    assert hello["profiles"] == ["timer", "purgatory"]
    # every era's locks are points: the op lock's field (0.11.0.2 on), or its monitor under the adapter's agent
    assert set(hello["features"]) == {"concurrent", "barrier", "gates", "wheel", "watcher_keys", "delay_queue",
                                      "batch", "scheduler"}
    assert hello.get("unsupported_commands", []) == ([] if has_cancel_for_key(version) else ["cancel_key"])


def test_the_purgatory_and_its_read_outs_answer_as_kafka(release):
    version, command = release
    adapter = Adapter(command)
    adapter("init", **INIT)
    assert adapter("watch", op="a", keys=["k", "j"], delay_ms=15, ready_on=None)["result"] is False
    assert adapter("watch", op="b", keys=[], delay_ms=5, ready_on=None)["error"] == "empty_keys"
    assert adapter("watcher_keys")["result"] == ["j", "k"]
    (level,) = adapter("wheel")["result"]["levels"][:1]
    assert [(bucket["expiration_ms"], bucket["entries"]) for bucket in level["buckets"]] == [(15, ["a"])]
    assert adapter("delay_queue")["result"] == [15]
    assert (adapter("watched")["result"], adapter("delayed")["result"]) == (2, 1)
    if has_cancel_for_key(version):
        assert adapter("cancel_key", key="nothing")["result"] == []
    else:
        assert "has no cancelForKey" in adapter("cancel_key", key="k")["failure"]
    assert adapter("watch", op="c", keys=["k"], delay_ms=50, ready_on=3)["result"] is False  # two tries
    checked = adapter("check", key="k")
    assert (checked["result"], checked["events"]) == (1, [{"event": "complete", "op": "c", "via": "check"}])
    expired = adapter("advance", to_ms=15)
    assert expired["events"] == [{"event": "complete", "op": "a", "via": "expire"}, {"event": "expire", "op": "a"}]
    assert adapter("shutdown")["result"] == []
    assert adapter.close() == 0


def test_kafkas_unit_tests_pass_as_scenarios(release):
    version, command = release
    only = [option for trace_id in UNIT_TESTS for option in ("--only", trace_id)]
    result = CliRunner().invoke(main, ["scenarios", "--kafka", version, *only], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"Apache Kafka {version}" in result.output
    if not has_cancel_for_key(version):  # its test is skipped, not failed
        assert "skipped" in result.output.splitlines()[-1]


def test_a_short_check_passes_at_the_exact_level(release, tmp_path):
    version, command = release
    result = CliRunner().invoke(main, ["check", "--kafka", version, "--examples", "10", "--steps", "10", "--seed", "1",
                                       "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output


#: runs that end in Kafka's known hangs past the model's domain (conformance/check/findings.py), with a run around them
HANGS = [
    ("init", INIT), ("watch", {"op": "a", "keys": ["k"], "delay_ms": 15, "ready_on": None}),
    ("advance", {"to_ms": 15}),
    # an odd wheel's overflow intervals wrap without ever covering the deadline: the add climbs without end
    ("init", {"profile": "timer", "params": {"tick_ms": 1, "wheel_size": 3, "start_ms": 0, "purge_interval": 1000}}),
    ("timer_add", {"task": "t", "delay_ms": 2**63 - 1}),
    ("init", {"profile": "purgatory", "params": {"tick_ms": 1, "wheel_size": 3, "start_ms": 0,
                                                 "purge_interval": 1000}}),
    ("watch", {"op": "a", "keys": ["k"], "delay_ms": 2**63 - 1, "ready_on": None}),
    # a bucket whose wrapped expiration is due at once: its flush re-inserts the op there forever
    ("init", {"profile": "purgatory", "params": {"tick_ms": 3, "wheel_size": 6, "start_ms": 0,
                                                 "purge_interval": 1000}}),
    ("watch", {"op": "a", "keys": ["k"], "delay_ms": 2**62 - 1, "ready_on": None}), ("advance", {"to_ms": 0}),
    ("watched", {}),
    ("init", INIT), ("watched", {})]


def test_kafkas_hangs_are_answered_hung_and_a_batch_answers_as_one_request_at_a_time(release):
    """Every era's timer is reached through the adapter's own classes, which stop the endless climb and the endless
    flush: the hang is answered, not waited out, and the adapter goes on with the next run."""
    version, command = release
    adapter = Adapter(command)
    alone, skipping = [], False
    for cmd, args in HANGS:
        if skipping and cmd != "init":
            alone.append({"skipped": True})
            continue
        answer = adapter(cmd, **args)
        del answer["seq"]
        answer.pop("exec_ns", None)
        skipping = "failure" in answer or "hung" in answer
        alone.append(answer)
    batch = adapter("batch", requests=[{"cmd": cmd, "args": args} for cmd, args in HANGS])["result"]
    assert adapter.close() == 0
    assert [next(iter(answer)) for answer in alone] == [
        "result", "result", "result", "result", "hung", "result", "hung", "result", "result", "hung", "skipped",
        "result", "result"]
    assert batch == alone


@needs_tools
def test_0_9s_ops_keep_the_deadline_they_were_built_with_and_its_tasks_take_one_per_add():
    """0.9's purgatory is rewired onto the virtual clock (its own timer replaced, its reaper stopped): a re-watch
    keeps the op's first deadline, as 0.9 does on the wall clock, while a re-added task of the timer profile takes
    now + delay again."""
    adapter = Adapter(kafka.adapter_command("0.9.0.1"))
    adapter("init", **INIT)
    assert adapter("watch", op="a", keys=["k"], delay_ms=15, ready_on=None)["result"] is False
    assert adapter("advance", to_ms=10)["events"] == []
    assert adapter("watch", op="a", keys=["j"])["result"] is False
    expired = adapter("advance", to_ms=15)
    assert expired["events"] == [{"event": "complete", "op": "a", "via": "expire"}, {"event": "expire", "op": "a"}]
    adapter("init", profile="timer", params=INIT["params"])
    adapter("timer_add", task="t", delay_ms=5)
    adapter("advance", to_ms=3)
    adapter("timer_add", task="t", delay_ms=5)
    assert adapter("advance", to_ms=7)["events"] == []
    assert adapter("advance", to_ms=8)["events"] == [{"event": "run", "task": "t"}]
    assert adapter.close() == 0


@needs_tools
def test_0_9_passes_the_whole_corpus_but_the_rules_it_lacks():
    result = CliRunner().invoke(main, ["scenarios", "--kafka", "0.9.0.1"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "other side of KAFKA-3470" in result.output


#: a release on each side of every lock rule with points: KAFKA-3994 (0.10.1.0 | 0.10.1.1), KAFKA-5970 (0.11.0.1,
#: the op's monitor | 2.6.3, tried; 2.7.2 blocks again: KAFKA-8334), KAFKA-6431 (2.1.1 | 2.2.2), KAFKA-19312 (4.0.2 |
#: 4.1.2)
LOCK_SIDES = {"0.10.1.0": {"KAFKA-3994": "before", "KAFKA-5970": "before", "KAFKA-6431": "before"},
              "0.10.1.1": {"KAFKA-3994": "after", "KAFKA-5970": "before"},
              "0.11.0.1": {"KAFKA-5970": "before"},
              "2.1.1": {"KAFKA-5970": "after", "KAFKA-6431": "before"},
              "2.2.2": {"KAFKA-5970": "after", "KAFKA-6431": "after"},
              "2.6.3": {"KAFKA-5970": "after"},
              "4.0.2": {"KAFKA-19312": "before"},
              "4.1.2": {"KAFKA-19312": "after"}}


@needs_tools
@pytest.mark.parametrize("version", LOCK_SIDES)
def test_a_controlled_check_tells_the_sides_of_kafkas_lock_changes_apart(version):
    """Under the scheduler the locks' points name which lock each of Kafka's methods takes, and how: a watch list's
    monitor around the walk of its ops (before KAFKA-3994), the op lock tried without blocking (KAFKA-5970, until
    KAFKA-8334), the one watcher map's read lock or a shard's lock (KAFKA-6431), forceComplete taking the op lock
    (KAFKA-19312). Each release is on its declared side of every rule, and on the side named here; and where a watch
    list has a monitor, a watch of the key a check walks is seen to wait for it."""
    from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
    from kpurgatory.conformance.check.concurrent import run_concurrent_check
    from kpurgatory.conformance.check.scheduler import Scheduling
    from kpurgatory.model.releases import RULES, points_shown

    command = kafka.adapter_command(version)
    result = run_concurrent_check(lambda: SubprocessSystem(command), threads=4, runs=4, steps=30, seed=0,
                                  scheduling=Scheduling("random"), shrink_budget_s=5)
    assert not result.failures, result.failures
    sides = {side.rule.ticket: side for side in result.lock_sides}
    assert sides.keys() == {rule.ticket for rule in RULES if rule.points} == {"KAFKA-3994", "KAFKA-5970",
                                                                               "KAFKA-6431", "KAFKA-19312"}
    for side in sides.values():
        assert side.as_declared and side.reached == points_shown(side.rule, version), str(side)
    for ticket, expected in LOCK_SIDES[version].items():
        assert sides[ticket].side == expected, str(sides[ticket])
    # before KAFKA-3994 a watch meets the watch list's monitor a check holds while it walks the list, and waits
    blocked = "wait watch list" in result.interleavings.reached
    assert blocked == (version == "0.10.1.0"), sorted(result.interleavings.reached)
